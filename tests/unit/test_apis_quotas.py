"""KafkaApis under client quotas, sans-IO on fake time: throttle_time_ms in every
response version that has the field, the throttle's end through the channel, the
throttled Fetch answered empty with its bytes taken back, the produce quota charged
with the request size, ApiVersions exempt but measured. Handler time is set exactly
(``h.handler_ns``), so every recorded value is exact."""

from __future__ import annotations

from tests.core_harness import CoreHarness
from tests.integration.rawclient import encode_request
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.quota.client_quota_manager import QuotaEntity, nanos_to_percentage

from .test_apis import API_VERSIONS, METADATA, PRODUCE, produce_body

CLIENT = "rawclient"  # what encode_request puts in the header
CTX_ID = 7  # tests.core_harness.CTX


def test_no_quota_no_recording(tmp_path):
    h = CoreHarness(tmp_path / "d")
    assert not h.apis.quotas.enabled
    h.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    assert h.apis.quotas.request.entity_metrics() == []


def test_throttle_time_in_every_version_that_has_it(tmp_path):
    h = CoreHarness(tmp_path / "d")
    h.handler_ns = 1_000_000  # 1 ms of handling per request
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "request_percentage", 0.0001)
    body = {"topics": [], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    v0 = h.request(METADATA, 0, {"topics": []})  # Metadata v0 has no throttle_time_ms
    assert v0.brokers
    for version in (3, 9, 12):
        resp = h.request(METADATA, version, body)
        # 1 ms is far over 0.0001 % of a thread: capped at one window
        assert resp.throttle_time.total_seconds() * 1000 == 1000, version
    assert h.apis.quotas.request.queue_size == 4
    last = h.channel.sent[-1]
    assert next(r for q, r in h.outcomes if q is last).throttle_quota == "Request"
    # each throttle ends exactly one window later, through the channel (the shell unmutes)
    h.loop.advance(999)
    assert h.channel.throttle_ends == []
    h.loop.advance(1)
    assert h.channel.throttle_ends == [CTX_ID] * 4
    assert h.apis.quotas.request.queue_size == 0


def test_api_versions_is_exempt_but_measured(tmp_path):
    h = CoreHarness(tmp_path / "d")
    h.handler_ns = 2_000_000
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "request_percentage", 0.0001)
    for _ in range(3):
        resp = h.request(API_VERSIONS, 3, {"client_software_name": "t",
                                           "client_software_version": "1"})
        assert resp.throttle_time.total_seconds() == 0
    # 3 x 2 ms on exempt-request-time, a Rate over the broker's 2 x 30 s metric windows
    # (elapsed padded to one full window): percent-seconds per second
    assert h.apis.quotas.request.exempt_request_time() == nanos_to_percentage(6_000_000) / 30
    assert h.apis.quotas.request.queue_size == 0
    assert h.apis.quotas.request.entity_metrics() == []  # nothing on the client's counter


def test_produce_charges_the_request_size(tmp_path):
    h = CoreHarness(tmp_path / "d")
    h.create_topic("t")
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "producer_byte_rate", 1_000_000)
    records = build_batch([Record(b"x" * 1000)] * 10)
    part = h.produce("t", 0, records)
    assert part.error_code == 0
    [m] = h.apis.quotas.produce.entity_metrics()
    assert (m.user, m.client_id) == ("", CLIENT)
    # the whole request (its size without the 4-byte size prefix, as Kafka's
    # sizeInBytes) over the padded 10 s window (11 samples of 1 s)
    size = len(encode_request(PRODUCE, 9, 0, produce_body("t", {0: records})))
    assert m.rate == size / 10


def test_throttled_fetch_is_empty_and_its_bytes_are_taken_back(tmp_path):
    h = CoreHarness(tmp_path / "d")
    h.create_topic("t")
    for _ in range(3):
        h.produce("t", 0, build_batch([Record(b"y" * 1000)] * 50))
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "consumer_byte_rate", 1000)
    resp = h.fetch(12, [("t", None, [(0, 0, 1_000_000)])])
    part = resp.responses[0].partitions[0]
    assert resp.throttle_time.total_seconds() > 1
    assert part.error_code == 0 and part.high_watermark == 150 and not part.records
    [m] = h.apis.quotas.fetch.entity_metrics()
    assert m.rate == 0  # unrecorded
    assert m.throttle_time_max > 1000
    assert h.apis.quotas.fetch.queue_size == 1
    # the cap: a response is at most the quota's whole-window allowance (10 windows x
    # 10 kB/s = 100 kB, Kafka's getMaxValueInQuotaWindow), beyond the first batch (KIP-74);
    # the batches are ~50.5 kB, so one fits and two do not
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "consumer_byte_rate", 10_000)
    resp = h.fetch(12, [("t", None, [(0, 0, 1_000_000)])])
    assert resp.throttle_time.total_seconds() == 0
    records = resp.responses[0].partitions[0].records
    assert 50_000 < len(records) < 51_000
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "consumer_byte_rate", None)
    resp = h.fetch(12, [("t", None, [(0, 0, 1_000_000)])])
    assert len(resp.responses[0].partitions[0].records) > 150_000
