"""Fan-out (issue 29): the parked fetches one append completes share one read of the
partition, one response partition and its encoding, and are answered in the order
they parked; each answer is still exactly what it would be alone (kio's bytes), with
its own header, throttle and session, its quota and its incremental session."""

from __future__ import annotations

import pytest

from tests.core_harness import decode_frame, response_bytes
from tests.integration.rawclient import fetch_topics_body as fetch_body
from tests.kio_codec import encode_response
from tidegate.errors import ErrorCode
from tidegate.log.log import Log
from tidegate.network.request_channel import SendResponse
from tidegate.protocol.apis import ApiKey
from tidegate.protocol.fetch_fast import release_pieces
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.file_region import FileRegion
from tidegate.server import delayed_fetch
from tidegate.server.quota.quota_factory import QuotaEntity

FETCH = ApiKey.FETCH
CLIENT = "rawclient"  # what encode_request puts in the header


@pytest.fixture
def reads(monkeypatch):
    """Count the log reads (Log.read_region calls)."""
    count = [0]
    real = Log.read_region

    def counting(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Log, "read_region", counting)
    return count


def kio_frame(version, cid, response) -> bytes:
    """The frame kio writes for the decoded ``response`` (records as bytes)."""
    from tests.unit.test_fetch_fast import as_values

    return encode_response(1, version, cid, as_values(response))


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_one_append_answers_every_parked_fetch_from_one_read_in_parking_order(h, reads, version):
    h.create_topic("fan")
    body = fetch_body([("fan", h.store.get("fan").topic_id if version >= 13 else None, [(0, 0, 1 << 20)])],
                      max_wait=30_000, min_bytes=1)
    parked = [h.park(FETCH, version, body) for _ in range(40)]
    assert h.replicas.fetch_purgatory.delayed == 40
    reads[0] = 0
    h.produce("fan", 0, build_batch([Record(b"wake up")]))
    assert h.replicas.fetch_purgatory.delayed == 0
    assert reads[0] == 2  # the first fetch from the file as alone; the second for all the others
    assert h.replicas.completion_batch is None  # the batch lives for the wake-up only
    answered = [req for req, _resp in h.channel.responses if req.header.api_key == FETCH]
    assert answered == [req for req, _cid in parked]  # in the order they parked
    records = []
    for request, cid in parked:
        response = h.channel.response_to(request)
        assert isinstance(response, SendResponse)
        data = response_bytes(response)
        decoded = decode_frame(FETCH, version, data, cid)
        part = decoded.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none and part.high_watermark == 1
        assert data == kio_frame(version, cid, decoded)
        records.append(bytes(part.records))
    assert len(set(records)) == 1 and records[0]
    first, second, *rest = (h.channel.response_to(req) for req, _ in parked)
    assert any(isinstance(p, FileRegion) for p in first.pieces)  # alone: sent from the file
    assert not any(isinstance(p, FileRegion) for r in [second, *rest] for p in r.pieces)


def test_fetches_at_other_offsets_or_limits_read_their_own(h, reads):
    h.create_topic("mix")
    h.produce("mix", 0, build_batch([Record(b"old")]))
    at_end = fetch_body([("mix", None, [(0, 1, 1 << 20)])], max_wait=30_000, min_bytes=1)
    small = fetch_body([("mix", None, [(0, 1, 10)])], max_wait=30_000, min_bytes=1)
    parked = [h.park(FETCH, 12, b) for b in (at_end, small, at_end, small, at_end)]
    reads[0] = 0
    h.produce("mix", 0, build_batch([Record(b"new")]))
    assert reads[0] == 4  # two reads (first, shared) for each of the two kinds
    for request, cid in parked:
        part = h.answer(request, cid).responses[0].partitions[0]
        assert part.high_watermark == 2 and len(part.records) > 0  # KIP-74: one batch over 10 bytes


def test_a_throttled_answer_empties_its_own_copy_not_the_shared_partition(h):
    """The fetch quota applies per answer: a throttled one goes out without records,
    and the answers sharing its partition keep theirs."""
    h.create_topic("q")
    body = fetch_body([("q", None, [(0, 0, 1 << 20)])], max_wait=30_000, min_bytes=1)
    h.apis.quotas.set_quota(QuotaEntity(None, CLIENT), "consumer_byte_rate", 10_000)
    parked = [h.park(FETCH, 12, body) for _ in range(12)]
    h.produce("q", 0, build_batch([Record(b"z" * 20_000)]))
    throttled = full = 0
    for request, cid in parked:
        response = h.answer(request, cid)
        part = response.responses[0].partitions[0]
        if response.throttle_time.total_seconds() > 0:
            throttled += 1
            assert not part.records
        else:
            full += 1
            assert len(part.records) > 20_000
    assert throttled and full


def test_incremental_sessions_woken_together_share_the_read_and_stay_incremental(h, reads):
    h.create_topic("s")
    sessions = []
    for _ in range(6):  # a full fetch creates each session, answered at once
        resp = h.fetch(12, [("s", None, [(0, 0, 1 << 20)])], max_wait=0, session_id=0, session_epoch=0)
        assert resp.session_id > 0
        sessions.append(resp.session_id)
    parked = [
        h.park(FETCH, 12, fetch_body([], max_wait=30_000, min_bytes=1, session_id=sid, session_epoch=1))
        for sid in sessions
    ]
    reads[0] = 0
    h.produce("s", 0, build_batch([Record(b"to all")]))
    assert reads[0] == 2
    for (request, cid), sid in zip(parked, sessions, strict=True):
        resp = h.answer(request, cid)
        assert resp.session_id == sid
        [topic] = resp.responses
        assert [p.high_watermark for p in topic.partitions] == [1] and topic.partitions[0].records
    # the next incremental poll of each session (its new offset) has nothing new: it parks
    for sid in sessions:
        h.park(FETCH, 12, fetch_body([("s", None, [(0, 1, 1 << 20)])], max_wait=30_000, min_bytes=1,
                                     session_id=sid, session_epoch=2))


def test_a_read_over_the_shared_limit_is_made_by_each_fetch_from_the_file(h, reads, monkeypatch):
    monkeypatch.setattr(delayed_fetch, "SHARED_READ_MAX", 10)  # any batch is larger
    h.create_topic("big")
    body = fetch_body([("big", None, [(0, 0, 1 << 20)])], max_wait=30_000, min_bytes=1)
    parked = [h.park(FETCH, 12, body) for _ in range(5)]
    reads[0] = 0
    h.produce("big", 0, build_batch([Record(b"x" * 100)]))
    assert reads[0] == 5
    for request, _cid in parked:
        response = h.channel.response_to(request)
        assert any(isinstance(p, FileRegion) for p in response.pieces)
        release_pieces(response.pieces)


def test_fetches_expiring_at_one_tick_share_the_read(h, reads):
    """Fetches whose min bytes never came expire together: one read for all of them
    (the first from the file as alone, the second for the others), each answered with
    what is there, in parking order."""
    h.create_topic("slow")
    h.produce("slow", 0, build_batch([Record(b"not enough")]))
    body = fetch_body([("slow", None, [(0, 0, 1 << 20)])], max_wait=500, min_bytes=1 << 20)
    parked = [h.park(FETCH, 12, body) for _ in range(8)]
    reads[0] = 0
    h.loop.advance(499)
    assert h.replicas.fetch_purgatory.delayed == 8 and reads[0] == 0
    h.loop.advance(1)
    assert h.replicas.fetch_purgatory.delayed == 0
    assert reads[0] == 2
    assert h.replicas.completion_batch is None
    answered = [req for req, _resp in h.channel.responses if req.header.api_key == FETCH]
    assert answered == [req for req, _cid in parked]
    records = set()
    for request, cid in parked:
        part = h.answer(request, cid).responses[0].partitions[0]
        assert part.error_code == ErrorCode.none and part.high_watermark == 1
        records.add(bytes(part.records))
    assert len(records) == 1 and records.pop()
