"""KafkaApis driven sans-IO: encoded requests in, outcomes out, fake time, no sockets.

The broker's real core (tests/core_harness.CoreHarness: LogManager, ReplicaManager,
purgatories, flusher) lives in ``tmp_path`` on a FakeLoop; acks=all goes through the
real LogFlusher, whose fsync the fake scheduler runs. Every request checks that its
memory (the shell's release hook) is released exactly once.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from tests.core_harness import CTX, CoreHarness, decode_frame, response_bytes
from tests.fake_loop import FakeLoop
from tests.integration.rawclient import (
    decode_response,
    encode_request,
    produce_body,
)
from tests.integration.rawclient import fetch_topics_body as fetch_body
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import (
    PARKED,
    CloseConnectionResponse,
    NoOpResponse,
    Request,
    SendResponse,
)
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    is_crc_valid,
    iter_batches,
    read_header,
)

NOW = 1_700_000_000_000
ZERO_UUID = uuid.UUID(int=0)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 18, 19, 20
DESCRIBE_CONFIGS, CREATE_PARTITIONS, DESCRIBE_CLUSTER = 32, 37, 60


def batch(*values, ts=NOW, size=0):
    """One batch of records with the given values (each padded to ``size`` bytes)."""
    return build_batch([Record(v.ljust(size, b"."), timestamp=ts) for v in values])


def batches_in(records):
    """[(base_offset, last_offset, bytes)] of the batches in a fetched records blob."""
    out = []
    for pos, size in iter_batches(records):
        h = read_header(records, pos)
        assert is_crc_valid(records, pos, size)
        out.append((h.base_offset, h.last_offset, bytes(records[pos : pos + size])))
    return out


def same_client_bytes(stored, produced):
    """The broker only rewrites fields outside the CRC (baseOffset, leader epoch)."""
    return stored[CRC_OFFSET:] == bytes(produced[CRC_OFFSET:])


# ---------------------------------------------------------------------------
# ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version_lists_exactly_the_supported_table(h, version):
    body = {"client_software_name": "unit", "client_software_version": "1.0"}
    resp = h.request(API_VERSIONS, version, body)
    assert resp.error_code == ErrorCode.none
    advertised = {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys}
    expected = {(int(r.key), r.min_version, r.max_version) for r in SUPPORTED_APIS.values()}
    assert advertised == expected
    assert len(resp.api_keys) == len(SUPPORTED_APIS)


def _features(resp):
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
    return supported, finalized


def test_api_versions_v4_reports_the_feature_levels_tidegate_implements(h):
    resp = h.request(API_VERSIONS, 4, {"client_software_name": "unit", "client_software_version": "1.0"})
    supported, finalized = _features(resp)
    assert supported == {"metadata.version": (29, 29), "group.version": (0, 1), "share.version": (0, 1)}
    # min = max = the level; transaction.version (KIP-890 part 2 not implemented),
    # kraft.version (static voters), ELR and streams are level 0: absent
    assert finalized == {"metadata.version": (29, 29), "group.version": (1, 1), "share.version": (1, 1)}
    assert resp.finalized_features_epoch == 0


def test_api_versions_v3_leaves_out_supported_features_from_level_0(h):
    # KAFKA-17492: a v3 client cannot read a supported min level of 0
    resp = h.request(API_VERSIONS, 3, {"client_software_name": "unit", "client_software_version": "1.0"})
    supported, finalized = _features(resp)
    assert supported == {"metadata.version": (29, 29)}
    assert set(finalized) == {"metadata.version", "group.version", "share.version"}


@pytest.mark.harness({"group.coordinator.rebalance.protocols": "classic", "group.share.enable": "false"})
def test_api_versions_finalizes_no_group_or_share_version_when_they_are_off(h):
    resp = h.request(API_VERSIONS, 4, {"client_software_name": "unit", "client_software_version": "1.0"})
    supported, finalized = _features(resp)
    # the software still supports them; the cluster does not run them
    assert supported == {"metadata.version": (29, 29), "group.version": (0, 1), "share.version": (0, 1)}
    assert finalized == {"metadata.version": (29, 29)}


@pytest.mark.harness({"group.share.enable": "false"})
def test_api_versions_share_off_leaves_group_version_finalized(h):
    resp = h.request(API_VERSIONS, 4, {"client_software_name": "unit", "client_software_version": "1.0"})
    assert _features(resp)[1] == {"metadata.version": (29, 29), "group.version": (1, 1)}


def test_api_versions_unsupported_version_answers_v0_body_with_the_table(h):
    # kio has no v5 schema; hand-craft a v5 header (KIP-511: body is then unparseable).
    payload = bytearray(struct.pack(">hhih", 18, 5, 4242, -1) + b"\x00garbage")
    _request, outcome = h.send_payload(payload)
    assert h._last_released[0] == 1
    cid, resp = decode_response(API_VERSIONS, 0, response_bytes(outcome)[4:])
    assert cid == 4242
    assert resp.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in resp.api_keys} == set(SUPPORTED_APIS)


@pytest.mark.parametrize("key,version", [(0, 2), (3, 99), (9999, 0), (1, 3)])
def test_unsupported_key_or_version_answers_error_35_with_correlation_id(h, key, version):
    payload = bytearray(struct.pack(">hhih", key, version, 777, -1))
    _request, outcome = h.send_payload(payload)
    assert h._last_released[0] == 1
    assert response_bytes(outcome) == struct.pack(">iih", 6, 777, 35)


def test_garbage_body_closes_the_connection(h):
    payload = bytearray(struct.pack(">hhi", 3, 12, 5) + b"\xff\xff\xff\xff")
    _request, outcome = h.send_payload(payload)
    assert isinstance(outcome, CloseConnectionResponse)
    assert "cannot decode api_key=3 v12" in outcome.reason
    assert h._last_released[0] == 1


# ---------------------------------------------------------------------------
# Metadata


def test_metadata_all_topics_v0_empty_list_and_v1_null(h):
    h.create_topic("alpha", 2)
    h.create_topic("beta", 1)
    for version, topics in ((0, []), (1, None), (12, None)):
        resp = h.metadata(version, topics)
        got = {t.name: len(t.partitions) for t in resp.topics}
        assert got == {"alpha": 2, "beta": 1}, (version, resp)
        assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", 9092)]
    v12 = h.metadata(12, None)
    assert v12.cluster_id == "test-cluster" and v12.controller_id == 1
    p = v12.topics[0].partitions[0]
    assert (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) == (1, (1,), (1,))


def test_metadata_named_topic_only(h):
    tid = h.create_topic("alpha", 3)
    h.create_topic("beta", 1)
    resp = h.metadata(12, [{"name": "alpha", "topic_id": ZERO_UUID}])
    assert [t.name for t in resp.topics] == ["alpha"]
    assert resp.topics[0].topic_id == tid
    assert sorted(p.partition_index for p in resp.topics[0].partitions) == [0, 1, 2]


def test_metadata_auto_creates_unknown_topic_only_when_allowed(h):
    resp = h.metadata(12, [{"name": "nope", "topic_id": ZERO_UUID}], allow_auto=False)
    assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert h.store.get("nope") is None
    resp = h.metadata(12, [{"name": "fresh", "topic_id": ZERO_UUID}], allow_auto=True)
    assert resp.topics[0].error_code == ErrorCode.none
    assert len(resp.topics[0].partitions) == 1  # num.partitions
    assert h.store.get("fresh") is not None
    assert h.replicas.get_log("fresh", 0) is not None
    # v1-v3 have no allow flag: auto-creation follows the broker setting
    resp = h.metadata(1, [{"name": "old-client"}])
    assert resp.topics[0].error_code == ErrorCode.none


def test_metadata_auto_create_disabled_by_broker_config(tmp_path):
    h = CoreHarness(tmp_path / "d", {"auto.create.topics.enable": "false"})
    resp = h.metadata(12, [{"name": "x", "topic_id": ZERO_UUID}], allow_auto=True)
    assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert h.store.get("x") is None


@pytest.mark.parametrize("name", ["bad name", "a/b", "x" * 250, ".."])
def test_metadata_invalid_topic_name(h, name):
    resp = h.metadata(12, [{"name": name, "topic_id": ZERO_UUID}])
    assert resp.topics[0].error_code == ErrorCode.invalid_topic_exception
    assert h.store.topics == {}


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_with_a_null_name_is_refused_as_kafka_refuses_it(h, version):
    """Found by the fuzzer (docs/reliability.md): a v10/v11 response cannot hold a null
    name, so encoding the answer raised. Kafka refuses such a request ("Topic name can
    not be null for version ...") with every topic INVALID_REQUEST, a null name as ""."""
    h.create_topic("t")
    resp = h.metadata(version, [{"name": None, "topic_id": uuid.uuid4()}, {"name": "t", "topic_id": None}])
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("", ErrorCode.invalid_request), ("t", ErrorCode.invalid_request)]


def test_produce_with_a_null_record_set_is_corrupt_message(h):
    """Found by the fuzzer: a null record set raised in the transactional-batch check."""
    h.create_topic("t")
    body = produce_body("t", {0: b""})
    body["topic_data"][0]["partition_data"][0]["records"] = None
    resp = h.request(PRODUCE, 9, body)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message


def test_metadata_by_topic_id_v12_and_unknown_id(h):
    tid = h.create_topic("byid", 2)
    resp = h.metadata(12, [{"name": None, "topic_id": tid}])
    assert resp.topics[0].error_code == ErrorCode.none
    assert resp.topics[0].name == "byid" and resp.topics[0].topic_id == tid
    unknown = uuid.uuid4()
    resp = h.metadata(13, [{"name": None, "topic_id": unknown}])
    assert resp.topics[0].error_code == ErrorCode.unknown_topic_id
    assert resp.topics[0].topic_id == unknown
    assert list(h.store.topics) == ["byid"]


# ---------------------------------------------------------------------------
# CreateTopics


def _creatable(name, partitions=1, rf=1, configs=None, assignments=()):
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": list(assignments),
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def test_create_topics_validate_only_creates_nothing(h):
    resp = h.request(
        CREATE_TOPICS, 7, {"topics": [_creatable("v", 4)], "timeout": 1000, "validate_only": True}
    )
    t = resp.topics[0]
    assert t.error_code == ErrorCode.none and t.num_partitions == 4
    assert t.topic_id in (None, ZERO_UUID)  # kio decodes the zero uuid as None
    assert h.store.get("v") is None and not (h.root / "v-0").exists()


def test_create_topics_duplicates_in_one_request_all_fail(h):
    resp = h.request_parked(
        CREATE_TOPICS,
        5,
        {"topics": [_creatable("dup"), _creatable("dup"), _creatable("ok")], "timeout": 1000},
    )
    codes = [(t.name, t.error_code) for t in resp.topics]
    assert codes == [
        ("dup", ErrorCode.invalid_request),
        ("dup", ErrorCode.invalid_request),
        ("ok", ErrorCode.none),
    ]
    assert h.store.get("dup") is None and h.store.get("ok") is not None


def test_create_topics_configs_are_validated_stored_and_described(h):
    resp = h.request_parked(
        CREATE_TOPICS,
        7,
        {
            "topics": [
                _creatable("c1", 2, configs={"retention.ms": "1234", "max.message.bytes": "2048"}),
                _creatable("c2", configs={"retention.ms": "not-a-number"}),
                _creatable("c3", configs={"no.such.key": "1"}),
                _creatable("c4", configs={"cleanup.policy": "compacted"}),
            ],
            "timeout": 1000,
        },
    )
    by_name = {t.name: t for t in resp.topics}
    c1 = by_name["c1"]
    assert c1.error_code == ErrorCode.none and c1.num_partitions == 2 and c1.replication_factor == 1
    described = {c.name: c.value for c in c1.configs}
    assert described["retention.ms"] == "1234" and described["max.message.bytes"] == "2048"
    assert h.store.get("c1").configs == {"retention.ms": "1234", "max.message.bytes": "2048"}
    assert h.replicas.get_log("c1", 1).config.max_message_bytes == 2048
    for bad in ("c2", "c3", "c4"):
        assert by_name[bad].error_code == ErrorCode.invalid_config, by_name[bad]
        assert by_name[bad].error_message
        assert h.store.get(bad) is None


def test_create_topics_replication_factor_partitions_and_existing(h):
    h.create_topic("exists")
    resp = h.request_parked(
        CREATE_TOPICS,
        7,
        {
            "topics": [
                _creatable("rf2", rf=2),
                _creatable("rf0", rf=0),
                _creatable("rfdefault", 3, rf=-1),
                _creatable("p0", partitions=0),
                _creatable("pdefault", partitions=-1),
                _creatable("exists"),
                _creatable("bad/name"),
                _creatable(
                    "assigned",
                    -1,
                    -1,
                    assignments=[
                        {"partition_index": 0, "broker_ids": [1]},
                        {"partition_index": 1, "broker_ids": [1]},
                    ],
                ),
                _creatable(
                    "assigned-other",
                    -1,
                    -1,
                    assignments=[
                        {"partition_index": 0, "broker_ids": [2]},
                    ],
                ),
            ],
            "timeout": 1000,
        },
    )
    codes = {t.name: t.error_code for t in resp.topics}
    assert codes == {
        "rf2": ErrorCode.invalid_replication_factor,
        "rf0": ErrorCode.invalid_replication_factor,
        "rfdefault": ErrorCode.none,
        "p0": ErrorCode.invalid_partitions,
        "pdefault": ErrorCode.none,
        "exists": ErrorCode.topic_already_exists,
        "bad/name": ErrorCode.invalid_topic_exception,
        "assigned": ErrorCode.none,
        "assigned-other": ErrorCode.invalid_replica_assignment,
    }
    assert h.store.get("rfdefault").partitions == 3
    assert h.store.get("pdefault").partitions == 1
    assert h.store.get("assigned").partitions == 2
    assert h.store.get("rf2") is None


# ---------------------------------------------------------------------------
# Produce


def test_produce_acks_0_returns_none_but_appends(h):
    h.create_topic("t")
    body = produce_body("t", {0: batch(b"a", b"b")}, acks=0)
    _request, result, _cid, released = h.send(PRODUCE, 9, body)
    assert isinstance(result, NoOpResponse) and result.throttle_ms == 0
    assert released[0] == 1
    assert h.replicas.get_log("t", 0).log_end_offset == 2


def test_produce_acks_1_returns_consecutive_offsets(h):
    h.create_topic("t")
    first = h.produce("t", 0, batch(b"a", b"b", b"c"))
    second = h.produce("t", 0, batch(b"d"))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 3)
    assert second.log_start_offset == 0
    assert h.flusher.requests == 0  # acks=1 does not wait for fsync


def test_an_answer_made_in_its_handler_is_the_outcome_not_a_channel_message(h):
    """acks=1: the append's callback runs inside handle_produce; its response is what
    handle returns (written in the same turn), nothing goes through the channel, and the
    request keeps nothing of it."""
    h.create_topic("t")
    request, outcome, _cid, _released = h.send(PRODUCE, 9, produce_body("t", {0: batch(b"a")}))
    assert isinstance(outcome, SendResponse)
    assert h.channel.response_to(request) is None
    assert not request.in_handler and request.answered is None


@pytest.mark.parametrize("version", [3, 7, 9, 12])
def test_produce_versions_and_multiple_partitions(h, version):
    h.create_topic("m", 3)
    body = produce_body("m", {0: batch(b"x"), 2: batch(b"y", b"z")})
    resp = h.request(PRODUCE, version, body)
    parts = {p.index: (p.error_code, p.base_offset) for p in resp.responses[0].partition_responses}
    assert parts == {0: (ErrorCode.none, 0), 2: (ErrorCode.none, 0)}
    assert h.replicas.get_log("m", 2).log_end_offset == 2
    assert h.replicas.get_log("m", 1).log_end_offset == 0


def test_produce_v13_names_topics_by_id_and_unknown_ids_are_unknown_topic_id(h):
    """KIP-516 in Produce (v13, Kafka 4.1): topics by id, answered by id; an id the broker
    does not know gets UNKNOWN_TOPIC_ID for each of its partitions, the others append."""
    topic_id = h.create_topic("m", 2)
    stranger = uuid.uuid4()
    body = {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch(b"x")},
                                                  {"index": 5, "records": batch(b"y")}]},
        {"topic_id": stranger, "partition_data": [{"index": 0, "records": batch(b"z")}]},
    ]}  # fmt: skip
    resp = h.request(PRODUCE, 13, body)
    got = {(t.topic_id, p.index): (p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses}
    assert got == {
        (topic_id, 0): (ErrorCode.none, 0),
        (topic_id, 5): (ErrorCode.unknown_topic_or_partition, -1),
        (stranger, 0): (ErrorCode.unknown_topic_id, -1),
    }
    assert h.replicas.get_log("m", 0).log_end_offset == 1
    # acks=0: no answer, but the unknown id's error closes the connection as any error does
    body["acks"] = 0
    body["topic_data"] = body["topic_data"][1:]
    assert isinstance(h.send(PRODUCE, 13, body)[1], CloseConnectionResponse)


def test_produce_acks_all_waits_for_fsync(h):
    h.create_topic("t")
    body = produce_body("t", {0: batch(b"a", b"b")}, acks=-1)
    submitted = h.loop.submitted
    request, cid = h.park(PRODUCE, 9, body)
    plog = h.replicas.get_log("t", 0)
    assert plog.recovery_point == 0 and h.channel.response_to(request) is None
    assert h.flusher.requests == 1 and h.flusher.rounds == 1
    resp = h.answer(request, cid)  # the fsync round completes on the scheduler's next turn
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset) == (ErrorCode.none, 0)
    assert plog.recovery_point == 2 and h.loop.submitted == submitted + 1


def test_produce_unknown_topic_and_partition(h):
    h.create_topic("t", 1)
    assert h.produce("missing", 0, batch(b"a")).error_code == ErrorCode.unknown_topic_or_partition
    assert h.produce("t", 5, batch(b"a")).error_code == ErrorCode.unknown_topic_or_partition
    assert h.store.get("missing") is None  # produce never auto-creates


def test_a_transactional_id_without_transactional_batches_is_ignored(h):
    # as Kafka: only transactional records need (WRITE on) a transactional id
    h.create_topic("t")
    p = h.produce("t", 0, batch(b"a"), transactional_id="tx-1")
    assert (p.error_code, p.base_offset) == (ErrorCode.none, 0)
    assert h.replicas.get_log("t", 0).log_end_offset == 1


def test_produce_invalid_acks(h):
    h.create_topic("t")
    assert h.produce("t", 0, batch(b"a"), acks=2).error_code == ErrorCode.invalid_required_acks
    assert h.replicas.get_log("t", 0).log_end_offset == 0


def test_produce_bad_batches_map_to_kafka_errors(h):
    h.create_topic("t", configs={"max.message.bytes": "1000"})
    good = batch(b"ok")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    legacy = bytearray(good)
    legacy[16] = 1  # magic
    too_big = batch(b"x" * 2000)
    assert h.produce("t", 0, corrupt).error_code == ErrorCode.corrupt_message
    assert h.produce("t", 0, legacy).error_code == ErrorCode.unsupported_for_message_format
    assert h.produce("t", 0, too_big).error_code == ErrorCode.message_too_large
    assert h.produce("t", 0, good[:-3]).error_code == ErrorCode.corrupt_message
    assert h.replicas.get_log("t", 0).log_end_offset == 0
    assert h.produce("t", 0, good).base_offset == 0


# ---------------------------------------------------------------------------
# When the request's memory goes back to the pool (docs/memory-pool.md): after
# parsing for requests without records, after the append for Produce. Both the plain
# path and the quota path (any client quota configured) keep that contract.

BIG_QUOTA = 10**12  # enables the quota path without ever throttling


def _with_quotas(h, enabled):
    if enabled:
        from tidegate.server.quota.client_quota_manager import QuotaEntity

        h.apis.quotas.set_quota(QuotaEntity(None, "rawclient"), "producer_byte_rate", BIG_QUOTA)
    assert h.apis.quotas.enabled == enabled


@pytest.mark.parametrize("quotas", [False, True], ids=["plain", "quotas"])
def test_non_produce_request_memory_is_released_before_its_handler_runs(h, quotas):
    _with_quotas(h, quotas)
    h.create_topic("t")
    released_when_handled = []
    real = h.apis.handlers[METADATA]

    def spy(request):
        released_when_handled.append(released[0])
        return real(request)

    h.apis.handlers[METADATA] = spy
    payload = bytearray(
        encode_request(METADATA, 12, 5, {"topics": [{"name": "t", "topic_id": ZERO_UUID}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    )
    released = [0]

    def release():
        released[0] += 1
        payload[:] = bytes(len(payload))  # the pool may hand the buffer on at once

    result = h.apis.handle(Request(CTX, payload, release))
    # parsed, then released, then handled: the handler never needs the request's bytes
    assert released_when_handled == [1] and released[0] == 1
    resp = decode_frame(METADATA, 12, response_bytes(result), 5)
    assert [t.name for t in resp.topics] == ["t"]  # decoded before the bytes were reused


@pytest.mark.parametrize("quotas", [False, True], ids=["plain", "quotas"])
@pytest.mark.parametrize("acks", [1, -1])
def test_produce_memory_is_released_only_once_the_records_are_appended(h, acks, quotas):
    _with_quotas(h, quotas)
    h.create_topic("t")
    produced = batch(b"a", b"b")
    plog = h.replicas.get_log("t", 0)
    payload = bytearray(encode_request(PRODUCE, 9, 6, produce_body("t", {0: produced}, acks)))
    at_release = []

    def release():
        at_release.append(plog.log_end_offset)
        payload[:] = bytes(len(payload))  # reused by the next request: the log must not care

    request = Request(CTX, payload, release)
    result = h.apis.handle(request)
    # released when handle returns, not when acks=all's fsync answers
    assert at_release == [2]
    if acks == -1:
        assert result is PARKED and h.channel.response_to(request) is None
        h.loop.run_pending()  # the fsync round
        result = h.channel.response_to(request)
    assert at_release == [2]
    part = decode_frame(PRODUCE, 9, response_bytes(result), 6).responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
    # the stored batch is the producer's, not the zeroed request buffer
    fetched = h.fetch(12, [("t", None, [(0, 0, 1_000_000)])]).responses[0].partitions[0]
    ((_, last, stored),) = batches_in(fetched.records)
    assert last == 1 and same_client_bytes(stored, produced)


# ---------------------------------------------------------------------------
# Fetch


def test_fetch_returns_produced_batches_verbatim(h):
    tid = h.create_topic("f")
    produced = [batch(b"a", b"b"), batch(b"c")]
    for b in produced:
        h.produce("f", 0, b)
    for version in (4, 11, 12):
        resp = h.fetch(version, [("f", None, [(0, 0, 1_000_000)])])
        p = resp.responses[0].partitions[0]
        assert p.error_code == ErrorCode.none and p.high_watermark == 3
        got = batches_in(p.records)
        assert [(b, last) for b, last, _ in got] == [(0, 1), (2, 2)]
        assert all(same_client_bytes(g, b) for (_, _, g), b in zip(got, produced, strict=True))
    resp = h.fetch(17, [(None, tid, [(0, 2, 1_000_000)])])
    assert [b for b, _, _ in batches_in(resp.responses[0].partitions[0].records)] == [2]


def test_fetch_offset_out_of_range(h):
    h.create_topic("f")
    h.produce("f", 0, batch(b"a", b"b"))
    resp = h.fetch(12, [("f", None, [(0, 3, 1000)])])
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.offset_out_of_range
    # Kafka's LogReadResult(error): no offsets with an error
    assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (-1, -1, -1)
    resp = h.fetch(12, [("f", None, [(0, -1, 1000)])])
    assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


def test_fetch_at_log_end_returns_empty(h):
    h.create_topic("f")
    h.produce("f", 0, batch(b"a", b"b"))
    resp = h.fetch(12, [("f", None, [(0, 2, 1000)])])
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none
    assert not p.records
    assert p.high_watermark == 2 and p.log_start_offset == 0


def test_fetch_by_topic_id_v13_and_unknown_id(h):
    tid = h.create_topic("f", 2)
    h.produce("f", 1, batch(b"a"))
    unknown = uuid.uuid4()
    resp = h.fetch(13, [(None, tid, [(1, 0, 1000)]), (None, unknown, [(0, 0, 1000)])])
    known, missing = resp.responses
    assert known.topic_id == tid
    assert known.partitions[0].error_code == ErrorCode.none
    assert [b for b, _, _ in batches_in(known.partitions[0].records)] == [0]
    assert missing.topic_id == unknown
    assert missing.partitions[0].error_code == ErrorCode.unknown_topic_id


def test_fetch_unknown_topic_by_name(h):
    resp = h.fetch(12, [("ghost", None, [(0, 0, 1000)])])
    assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_partition_max_bytes_bounds_to_whole_batches(h):
    h.create_topic("f")
    produced = [batch(b"%03d" % i, size=100) for i in range(10)]
    for b in produced:
        h.produce("f", 0, b)
    size = len(produced[0])
    limit = 2 * size + size // 2
    resp = h.fetch(12, [("f", None, [(0, 0, limit)])])
    records = resp.responses[0].partitions[0].records
    assert len(records) == 2 * size
    assert [b for b, _, _ in batches_in(records)] == [0, 1]
    # max_bytes (response-wide) bounds too
    resp = h.fetch(12, [("f", None, [(0, 4, 10_000)])], max_bytes=3 * size)
    assert [b for b, _, _ in batches_in(resp.responses[0].partitions[0].records)] == [4, 5, 6]


def test_fetch_first_batch_returned_even_when_larger_than_limits(h):
    h.create_topic("f")
    big = batch(b"x" * 5000)
    h.produce("f", 0, big)
    h.produce("f", 0, batch(b"small"))
    resp = h.fetch(12, [("f", None, [(0, 0, 100)])], max_bytes=100)
    records = resp.responses[0].partitions[0].records
    assert len(records) == len(big)
    assert [b for b, _, _ in batches_in(records)] == [0]


def test_fetch_only_the_first_nonempty_partition_may_exceed_partition_max_bytes(h):
    # KIP-74: the oversized-first-batch exception applies to the first partition with
    # data; later partitions stay within partition_max_bytes (Kafka's minOneMessage).
    h.create_topic("f", 3)
    big = batch(b"x" * 1000)
    h.produce("f", 1, big)
    h.produce("f", 2, big)
    resp = h.fetch(12, [("f", None, [(0, 0, 500), (1, 0, 500), (2, 0, 500)])], max_bytes=100_000)
    parts = {p.partition_index: p for p in resp.responses[0].partitions}
    assert not parts[0].records
    assert len(parts[1].records) == len(big)
    assert not parts[2].records
    assert parts[2].error_code == ErrorCode.none


def test_fetch_max_bytes_stops_later_partitions(h):
    h.create_topic("f", 2)
    big = batch(b"x" * 1000)
    h.produce("f", 0, big)
    h.produce("f", 1, big)
    resp = h.fetch(12, [("f", None, [(0, 0, 5000), (1, 0, 5000)])], max_bytes=1500)
    parts = {p.partition_index: p for p in resp.responses[0].partitions}
    assert len(parts[0].records) == len(big)
    assert not parts[1].records


def test_fetch_long_poll_times_out_empty(h):
    h.create_topic("f")
    request, cid = h.park(FETCH, 12, fetch_body([("f", None, [(0, 0, 1000)])], max_wait=200, min_bytes=1))
    start = h.clock.milliseconds()
    resp = h.answer(request, cid, within_ms=1000)
    assert h.clock.milliseconds() - start == 200  # answered exactly at max_wait
    assert not resp.responses[0].partitions[0].records


def test_fetch_long_poll_is_woken_early_by_an_append(h):
    h.create_topic("f")
    request, cid = h.park(FETCH, 12, fetch_body([("f", None, [(0, 0, 1000)])], max_wait=10_000, min_bytes=1))
    h.loop.advance(50)
    assert h.channel.response_to(request) is None
    assert h.produce("f", 0, batch(b"wake")).error_code == ErrorCode.none
    # answered at once, and after the producer's own response (the action queue)
    produce_request = h.channel.sent[-2]
    assert produce_request.header.api_key == PRODUCE and h.channel.sent[-1] is request
    resp = h.answer(request, cid)
    assert [b for b, _, _ in batches_in(resp.responses[0].partitions[0].records)] == [0]


def test_fetch_with_data_or_zero_wait_answers_immediately(h):
    h.create_topic("f")
    h.produce("f", 0, batch(b"a"))
    resp = h.fetch(12, [("f", None, [(0, 0, 1000)])], max_wait=10_000, min_bytes=1)
    assert batches_in(resp.responses[0].partitions[0].records)
    resp = h.fetch(12, [("f", None, [(0, 1, 1000)])], max_wait=0, min_bytes=1)
    assert not resp.responses[0].partitions[0].records


# ---------------------------------------------------------------------------
# ListOffsets


def test_list_offsets_earliest_latest_max_and_by_timestamp(h):
    h.create_topic("l")
    h.produce("l", 0, build_batch([Record(b"a", timestamp=1000), Record(b"b", timestamp=1500)]))
    h.produce("l", 0, build_batch([Record(b"c", timestamp=5000)]))
    h.produce("l", 0, build_batch([Record(b"d", timestamp=3000)]))
    earliest = h.list_offsets("l", -2)
    assert (earliest.error_code, earliest.offset) == (ErrorCode.none, 0)
    assert h.list_offsets("l", -1).offset == 4
    assert h.list_offsets("l", -1, version=1).offset == 4
    mx = h.list_offsets("l", -3)
    assert (mx.offset, mx.timestamp) == (2, 5000)
    by_ts = h.list_offsets("l", 2000)
    assert (by_ts.offset, by_ts.timestamp) == (2, 5000)
    first = h.list_offsets("l", 0)
    assert first.offset == 0
    none = h.list_offsets("l", 999_999)
    assert (none.error_code, none.offset, none.timestamp) == (ErrorCode.none, -1, -1)


def test_list_offsets_empty_log_and_unknown_topic(h):
    h.create_topic("empty")
    assert h.list_offsets("empty", -1).offset == 0
    assert h.list_offsets("empty", -2).offset == 0
    mx = h.list_offsets("empty", -3)
    assert mx.error_code == ErrorCode.none and mx.offset == -1
    assert h.list_offsets("nope", -1).error_code == ErrorCode.unknown_topic_or_partition
    assert (
        h.list_offsets("empty", -1, partition=3).error_code == ErrorCode.unknown_topic_or_partition
    )


# ---------------------------------------------------------------------------
# DeleteTopics


def test_delete_topics_by_name(h):
    h.create_topic("d1", 2)
    h.produce("d1", 1, batch(b"a"))
    assert (h.root / "d1-1").is_dir()
    resp = h.request(DELETE_TOPICS, 5, {"topic_names": ["d1", "unknown"], "timeout": 1000})
    codes = {r.name: r.error_code for r in resp.responses}
    assert codes == {"d1": ErrorCode.none, "unknown": ErrorCode.unknown_topic_or_partition}
    assert h.store.get("d1") is None
    assert not (h.root / "d1-0").exists() and not (h.root / "d1-1").exists()
    assert h.replicas.get_log("d1", 0) is None
    md = h.metadata(12, [{"name": "d1", "topic_id": ZERO_UUID}], allow_auto=False)
    assert md.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def test_delete_topics_by_id_v6(h):
    tid = h.create_topic("d2")
    h.create_topic("keep")
    unknown = uuid.uuid4()
    resp = h.request(
        DELETE_TOPICS,
        6,
        {
            "topics": [{"name": None, "topic_id": tid}, {"name": None, "topic_id": unknown}],
            "timeout": 1000,
        },
    )
    first, second = resp.responses
    assert (first.name, first.topic_id, first.error_code) == ("d2", tid, ErrorCode.none)
    assert (second.topic_id, second.error_code) == (unknown, ErrorCode.unknown_topic_id)
    assert h.store.get("d2") is None and h.store.get("keep") is not None
    # the name can be reused and gets a new id
    new_id = h.create_topic("d2")
    assert new_id != tid


@pytest.mark.parametrize(("version", "code"), [(2, ErrorCode.invalid_request), (3, ErrorCode.topic_deletion_disabled),
                                             (6, ErrorCode.topic_deletion_disabled)])  # fmt: skip
def test_delete_topics_with_deletion_disabled_deletes_nothing(tmp_path, version, code):
    """delete.topic.enable=false: every topic named gets the error (Kafka's
    handleDeleteTopicsRequest answers it before any lookup, INVALID_REQUEST below v3)."""
    h = CoreHarness(tmp_path / "data", {"delete.topic.enable": "false"})
    try:
        tid = h.create_topic("kept")
        if version >= 6:
            body = {"topics": [{"name": "kept", "topic_id": ZERO_UUID}, {"name": None, "topic_id": tid}]}
        else:
            body = {"topic_names": ["kept", "unknown"]}
        resp = h.request(DELETE_TOPICS, version, {**body, "timeout": 1000})
        assert [r.error_code for r in resp.responses] == [code, code]
        if version >= 5:
            assert {r.error_message for r in resp.responses} == {"Topic deletion is disabled."}
        assert h.store.get("kept") is not None and (h.root / "kept-0").is_dir()
    finally:
        h.close()


def test_parked_fetches_answer_through_the_channel_and_skip_abandoned_ones(h):
    """A parked long poll is a DelayedFetch in the purgatory, nothing else; a request
    whose connection went away (abandoned) is not re-read or answered at completion."""
    h.create_topic("f")
    body = fetch_body([("f", None, [(0, 0, 1000)])], max_wait=10_000, min_bytes=1)
    parked = [h.park(FETCH, 12, body) for _ in range(10)]
    assert h.replicas.fetch_purgatory.delayed == 10
    parked[0][0].abandoned = True  # the shell marks it when the connection closes
    assert h.produce("f", 0, batch(b"wake")).error_code == ErrorCode.none
    assert h.replicas.fetch_purgatory.delayed == 0
    assert h.channel.response_to(parked[0][0]) is None
    for request, cid in parked[1:]:
        resp = h.answer(request, cid)
        assert [b for b, _, _ in batches_in(resp.responses[0].partitions[0].records)] == [0]


def test_delete_wakes_a_waiting_fetch(h):
    h.create_topic("gone")
    request, cid = h.park(FETCH, 12, fetch_body([("gone", None, [(0, 0, 1000)])], max_wait=10_000, min_bytes=1))
    h.loop.advance(50)
    h.request(DELETE_TOPICS, 5, {"topic_names": ["gone"], "timeout": 1000})
    resp = h.answer(request, cid)  # at once, without moving time
    assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


# ---------------------------------------------------------------------------
# CreatePartitions


def test_create_partitions(h):
    h.create_topic("cp", 1)
    resp = h.request_parked(  # the new logs are made on a worker thread
        CREATE_PARTITIONS,
        3,
        {
            "topics": [
                {"name": "cp", "count": 3, "assignments": None},
                {"name": "nope", "count": 2, "assignments": None},
            ],
            "timeout": 1000,
            "validate_only": False,
        },
    )
    codes = {r.name: r.error_code for r in resp.results}
    assert codes == {"cp": ErrorCode.none, "nope": ErrorCode.unknown_topic_or_partition}
    assert h.store.get("cp").partitions == 3
    assert h.replicas.get_log("cp", 2) is not None
    assert h.produce("cp", 2, batch(b"a")).error_code == ErrorCode.none
    assert len(h.metadata(12, [{"name": "cp", "topic_id": ZERO_UUID}]).topics[0].partitions) == 3

    resp = h.request(
        CREATE_PARTITIONS,
        0,
        {
            "topics": [{"name": "cp", "count": 3, "assignments": None}],
            "timeout": 1000,
            "validate_only": False,
        },
    )
    assert resp.results[0].error_code == ErrorCode.invalid_partitions
    resp = h.request(
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": "cp", "count": 5, "assignments": None}],
            "timeout": 1000,
            "validate_only": True,
        },
    )
    assert resp.results[0].error_code == ErrorCode.none
    assert h.store.get("cp").partitions == 3
    resp = h.request(
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": "cp", "count": 4, "assignments": [{"broker_ids": [2]}]}],
            "timeout": 1000,
            "validate_only": False,
        },
    )
    assert resp.results[0].error_code == ErrorCode.invalid_replica_assignment
    assert h.store.get("cp").partitions == 3


def _create_topics_body(*topics, validate_only=False):
    return {"topics": list(topics), "timeout": 1000, "validate_only": validate_only}


def test_create_topics_over_kafkas_partition_bound_fails_whole_and_creates_nothing(h):
    """Kafka's controller (validateTotalNumberOfPartitions): more than 10,000 partitions in
    one request is a POLICY_VIOLATION for every topic of it, before any is created; the
    default partition count counts for topics that ask for -1."""
    resp = h.request(CREATE_TOPICS, 7, _create_topics_body(
        _creatable("huge", 4_194_560), _creatable("small", 1)))
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("huge", ErrorCode.policy_violation, "Excessively large number of partitions per request."),
        ("small", ErrorCode.policy_violation, "Excessively large number of partitions per request."),
    ]
    assert h.store.get("huge") is None and h.store.get("small") is None
    assert not any(h.root.glob("huge-*")) and h.loop.submitted == 0
    resp = h.request(CREATE_TOPICS, 7, _create_topics_body(
        *[_creatable(f"many{i}", 5_000) for i in range(2)], _creatable("default", -1, -1)))
    assert {t.error_code for t in resp.topics} == {ErrorCode.policy_violation}
    # exactly at the bound: allowed (validate_only: answered at once, nothing made)
    resp = h.request(CREATE_TOPICS, 7, _create_topics_body(
        *[_creatable(f"many{i}", 5_000) for i in range(2)], validate_only=True))
    assert [t.error_code for t in resp.topics] == [ErrorCode.none, ErrorCode.none]


def test_create_partitions_over_the_bound_fails_the_topic_that_passes_it(h):
    h.create_topic("a", 1)
    h.create_topic("b", 1)
    body = {
        "topics": [{"name": "a", "count": 9_001, "assignments": None},
                   {"name": "b", "count": 1_002, "assignments": None}],
        "timeout": 1000, "validate_only": True}
    resp = h.request(CREATE_PARTITIONS, 3, body)
    assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
        ("a", ErrorCode.none, None),
        ("b", ErrorCode.policy_violation, "Unable to perform excessively large batch operation."),
    ]
    body["topics"][0]["count"] = 21  # 20 + 1,001 new ones: within the bound
    body["validate_only"] = False
    resp = h.request_parked(CREATE_PARTITIONS, 3, body)
    assert [r.error_code for r in resp.results] == [ErrorCode.none, ErrorCode.none]
    assert (h.store.get("a").partitions, h.store.get("b").partitions) == (21, 1_002)


def test_topic_creations_run_one_at_a_time_off_the_handler(h):
    """The file work runs on the scheduler's worker; until it is done the topic is not
    visible, Metadata answers LEADER_NOT_AVAILABLE instead of auto-creating it, and a
    second CreateTopics waits its turn (then finds the topic there)."""
    first, first_cid = h.park(CREATE_TOPICS, 7, _create_topics_body(_creatable("slow", 3)))
    assert h.store.get("slow") is None
    # (sent without letting the loop run: the worker's answer waits on the loop)
    _req, outcome, cid, _released = h.send(METADATA, 12, {
        "topics": [{"name": "slow", "topic_id": ZERO_UUID}], "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
    meta = decode_frame(METADATA, 12, response_bytes(outcome), cid)
    assert meta.topics[0].error_code == ErrorCode.leader_not_available
    second, second_cid = h.park(CREATE_TOPICS, 7, _create_topics_body(_creatable("slow", 3)))
    assert h.answer(first, first_cid).topics[0].error_code == ErrorCode.none
    again = h.answer(second, second_cid).topics[0]
    assert (again.error_code, again.error_message) == (
        ErrorCode.topic_already_exists, "Topic 'slow' already exists.")
    assert h.store.get("slow").partitions == 3 and h.replicas.get_log("slow", 2) is not None


# ---------------------------------------------------------------------------
# DescribeConfigs


def _describe(h, resources, version=4, synonyms=False):
    body = {
        "resources": [
            {"resource_type": t, "resource_name": n, "configuration_keys": keys}
            for t, n, keys in resources
        ],
        "include_synonyms": synonyms,
        "include_documentation": False,
    }
    return h.request(DESCRIBE_CONFIGS, version, body).results


def test_describe_configs_topic(h):
    h.create_topic("dc", configs={"retention.ms": "777"})
    (r,) = _describe(h, [(2, "dc", None)])
    assert r.error_code == ErrorCode.none
    configs = {c.name: c for c in r.configs}
    assert configs["retention.ms"].value == "777"
    assert configs["max.message.bytes"].value == "1048588"
    (r,) = _describe(h, [(2, "dc", ["retention.ms"])], version=1)
    assert [c.name for c in r.configs] == ["retention.ms"]


def test_describe_configs_broker_and_errors(h):
    results = _describe(
        h, [(4, "1", None), (4, "", None), (4, "2", None), (2, "ghost", None), (99, "x", None)]
    )
    own, default, other, ghost, bad_type = results
    assert own.error_code == ErrorCode.none
    names = {c.name for c in own.configs}
    assert {"num.partitions", "socket.request.max.bytes", "log.dirs"} <= names
    assert default.error_code == ErrorCode.none
    assert other.error_code == ErrorCode.invalid_request and other.configs == ()
    assert ghost.error_code == ErrorCode.unknown_topic_or_partition
    assert bad_type.error_code == ErrorCode.invalid_request


def test_describe_configs_broker_reports_the_memory_bound_in_force(tmp_path):
    """queued.max.request.bytes unset is not unbounded: DescribeConfigs shows the
    256 MiB default (or socket.request.max.bytes if larger) as a DEFAULT_CONFIG value."""
    cases = [
        ({}, "268435456", 5, [("268435456", 5)]),
        ({"socket.request.max.bytes": "400000000"}, "400000000", 5, [("400000000", 5)]),
        ({"queued.max.request.bytes": "-1"}, "-1", 4, [("-1", 4), ("268435456", 5)]),
    ]
    for i, (props, value, source, synonyms) in enumerate(cases):
        h = CoreHarness(tmp_path / f"d{i}", props)
        try:
            (r,) = _describe(h, [(4, "1", ["queued.max.request.bytes"])], synonyms=True)
        finally:
            h.close()
        (c,) = r.configs
        assert (c.name, c.value, c.config_source, c.read_only) == (
            "queued.max.request.bytes", value, source, True
        ), props
        assert [(s.value, s.source) for s in c.synonyms] == synonyms, props


# ---------------------------------------------------------------------------
# DescribeCluster


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(h, version):
    body = {
        "include_cluster_authorized_operations": False,
        "endpoint_type": 1,
        "include_fenced_brokers": False,
    }
    resp = h.request(DESCRIBE_CLUSTER, version, body)
    assert resp.error_code == ErrorCode.none
    assert resp.cluster_id == "test-cluster" and resp.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", 9092)]


def test_describe_cluster_controller_endpoint_unsupported(h):
    body = {"include_cluster_authorized_operations": False, "endpoint_type": 2}
    resp = h.request(DESCRIBE_CLUSTER, 1, body)
    assert resp.error_code == ErrorCode.unsupported_endpoint_type
    assert resp.brokers == ()


def test_every_supported_api_is_handled(h):
    assert set(h.apis.handlers) == set(SUPPORTED_APIS) == {int(k) for k in ApiKey}


def test_record_bytes_untouched_after_crc(h):
    # Sanity check on the helper the fetch tests use: the broker rewrites offsets only.
    h.create_topic("u")
    b = batch(b"a", b"b")
    h.produce("u", 0, batch(b"z"))
    h.produce("u", 0, b)
    resp = h.fetch(12, [("u", None, [(0, 1, 1000)])])
    ((base, last, stored),) = batches_in(resp.responses[0].partitions[0].records)
    assert (base, last) == (1, 2)
    assert stored[ATTRIBUTES_OFFSET:] == bytes(b[ATTRIBUTES_OFFSET:])
    assert len(stored) == len(b) and len(stored) >= LOG_OVERHEAD


@pytest.mark.parametrize(
    "api_key,version,body",
    [
        (2, 1, struct.pack(">ii", -1, -1)),  # ListOffsets topics = null
        (2, 1, struct.pack(">iih3si", -1, 1, 3, b"abc", -1)),  # a topic's partitions = null
        (0, 3, struct.pack(">hhii", -1, 1, 1000, -1)),  # Produce topic_data = null
        (19, 2, struct.pack(">iib", -1, 1000, 0)),  # CreateTopics topics = null
    ],
    ids=["list-offsets-topics", "list-offsets-partitions", "produce-topic-data", "create-topics"],
)
def test_null_non_nullable_array_closes_the_connection_before_any_handler(
    h, api_key, version, body
):
    # kio reads a -1 array length as None even where the schema has no null; a
    # handler iterating over it would crash, so the decoder refuses it as Kafka does.
    payload = bytearray(struct.pack(">hhih", api_key, version, 1, -1) + body)
    _request, outcome = h.send_payload(payload)
    assert isinstance(outcome, CloseConnectionResponse)
    assert "serialized as null" in outcome.reason


def test_null_metadata_topics_still_means_all_topics(h):
    h.create_topic("x")
    payload = bytearray(struct.pack(">hhih", 3, 1, 9, -1) + struct.pack(">i", -1))
    _request, outcome = h.send_payload(payload)
    assert h._last_released[0] == 1
    assert [t.name for t in decode_frame(3, 1, response_bytes(outcome), 9).topics] == ["x"]


def test_internal_topics_of_an_older_data_dir_become_compacted_at_load(tmp_path):
    """A data dir whose __consumer_offsets / __transaction_state were created before the
    log cleaner (no cleanup.policy) loads them compacted, as Kafka creates them; an
    operator's own cleanup.policy and other topics stay as they are."""
    from tidegate.config import BrokerConfig, topic_log_config
    from tidegate.server.log_manager import LogManager
    from tidegate.server.metadata import TopicStore

    config = BrokerConfig({})
    store = TopicStore(tmp_path)
    store.create("__consumer_offsets", 1, {"segment.bytes": "104857600"})
    store.create("__transaction_state", 2, {"cleanup.policy": "compact,delete"})
    store.create("events", 1, {})
    loop = FakeLoop()
    logs = LogManager(tmp_path, TopicStore(tmp_path), lambda info: topic_log_config(config, info.configs),
                      loop.clock, loop)
    logs.load()
    try:
        assert TopicStore(tmp_path).get("__consumer_offsets").configs == {
            "segment.bytes": "104857600", "cleanup.policy": "compact"}  # fmt: skip
        assert logs.get_log("__consumer_offsets", 0).config.compact
        assert TopicStore(tmp_path).get("__transaction_state").configs == {"cleanup.policy": "compact,delete"}
        assert TopicStore(tmp_path).get("events").configs == {}
        assert not logs.get_log("events", 0).config.compact
    finally:
        logs.close()


def test_create_topic_is_all_or_nothing_when_a_log_cannot_open(tmp_path, monkeypatch):
    """A partition log that fails to open (e.g. EMFILE) rolls the whole topic back."""
    from tidegate.log.config import LogConfig
    from tidegate.log.log import Log as RealLog
    from tidegate.server import log_manager as lm
    from tidegate.server.metadata import TopicStore

    opened = []

    def flaky_log(directory, config, now_ms, **kwargs):
        if len(opened) == 3:
            raise OSError(24, "Too many open files")
        log = RealLog(directory, config, now_ms, **kwargs)
        opened.append(log)
        return log

    store = TopicStore(tmp_path)
    loop = FakeLoop()
    logs = lm.LogManager(tmp_path, store, lambda info: LogConfig(), loop.clock, loop)
    monkeypatch.setattr(lm, "Log", flaky_log)
    with pytest.raises(OSError):
        logs.create_topic("big", 10, {})
    assert store.get("big") is None
    assert logs.logs == {}
    assert not any(p.name.startswith("big-") for p in tmp_path.iterdir())
    assert TopicStore(tmp_path).get("big") is None  # nothing persisted either
    monkeypatch.setattr(lm, "Log", RealLog)
    info = logs.create_topic("big", 10, {})
    assert len(logs.logs) == 10 and store.get("big") is info


def test_produce_acks_0_with_an_error_closes_the_connection(h):
    """Kafka's handleProduceRequest: acks=0 has no response to carry an error, so any
    partition error closes the connection (the producer then refreshes its metadata);
    the partitions without error are appended."""
    h.create_topic("t")
    body = produce_body("t", {0: batch(b"a"), 5: batch(b"b")}, acks=0)  # partition 5: unknown
    _request, result, _cid, _released = h.send(PRODUCE, 9, body)
    assert isinstance(result, CloseConnectionResponse)
    assert h.replicas.get_log("t", 0).log_end_offset == 1
    body = produce_body("missing", {0: batch(b"a")}, acks=0)
    assert isinstance(h.send(PRODUCE, 9, body)[1], CloseConnectionResponse)
