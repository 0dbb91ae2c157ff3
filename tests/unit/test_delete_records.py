"""DeleteRecords (21) through KafkaApis on fake time: the log start offset moves, durably
(Kafka's log-start-offset-checkpoint, written on a worker thread before the answer),
segments below it go, fetches below it are OFFSET_OUT_OF_RANGE, ListOffsets EARLIEST
follows, and every error of Kafka's ReplicaManager.deleteRecords."""

from __future__ import annotations

import dataclasses
import errno
import os

import pytest

from tests.core_harness import CoreHarness, decode_frame, response_bytes
from tests.integration.rawclient import fetch_body
from tests.unit.logs import crash
from tests.unit.test_apis import FETCH, batch
from tidegate.errors import ErrorCode as E
from tidegate.log import checkpoint
from tidegate.network.request_channel import PARKED
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.log_manager import LOG_START_OFFSET_CHECKPOINT_FILE
from tidegate.utils.topic import GROUP_METADATA_TOPIC_NAME

DELETE_RECORDS = 21
TWO = len(batch(b"a", b"b"))  # one two-record batch: segment.bytes that rolls after each


def delete_body(offsets: dict[tuple[str, int], int]) -> dict:
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "offset": offset})
    return {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout": 30_000}


def delete(h: CoreHarness, offsets: dict[tuple[str, int], int], version: int = 2) -> dict:
    """{(topic, partition): (error, low_watermark)} of one DeleteRecords (parked until the
    checkpoint is written when a start offset moved, answered at once otherwise)."""
    request, outcome, cid, _released = h.send(DELETE_RECORDS, version, delete_body(offsets))
    if outcome is PARKED:
        resp = h.answer(request, cid)
    else:
        resp = decode_frame(DELETE_RECORDS, version, response_bytes(outcome), cid)
    return {
        (t.name, p.partition_index): (p.error_code, p.low_watermark)
        for t in resp.topics
        for p in t.partitions
    }


def filled(h: CoreHarness, topic: str = "d", batches: int = 4, partitions: int = 1) -> None:
    """``batches`` two-record batches per partition, one segment each (offsets 0, 2, ...)."""
    h.create_topic(topic, partitions, {"segment.bytes": str(TWO)})
    for p in range(partitions):
        for _ in range(batches):
            assert h.produce(topic, p, batch(b"a", b"b")).error_code == E.none


def checkpoint_text(root) -> str:
    """The log directory's log-start-offset-checkpoint."""
    return (root / LOG_START_OFFSET_CHECKPOINT_FILE).read_text()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_moves_the_log_start_offset_once_it_is_durable(h, version):
    filled(h)
    plog = h.replicas.get_log("d", 0)
    request, cid = h.park(DELETE_RECORDS, version, delete_body({("d", 0): 5}))
    # In memory at once; the answer waits for the checkpoint's worker-thread write.
    assert plog.log_start_offset == 5
    assert h.channel.response_to(request) is None
    resp = h.answer(request, cid)
    p = resp.topics[0].partitions[0]
    assert (resp.topics[0].name, p.partition_index, p.error_code, p.low_watermark) == ("d", 0, E.none, 5)
    assert checkpoint_text(h.root) == "0\n1\nd 0 5\n"  # Kafka's format: topic partition offset
    # whole segments below the new start are gone; the one holding 5 stays
    assert [s.base_offset for s in plog.segments] == [4, 6]
    assert not (h.root / "d-0" / f"{0:020d}.log").exists()


def test_after_delete_records_fetch_below_is_out_of_range_and_earliest_moves(h):
    filled(h)
    assert delete(h, {("d", 0): 5}) == {("d", 0): (E.none, 5)}
    below = h.request(FETCH, 12, fetch_body("d", 4)).responses[0].partitions[0]
    assert below.error_code == E.offset_out_of_range
    at = h.request(FETCH, 12, fetch_body("d", 5)).responses[0].partitions[0]
    assert (at.error_code, at.log_start_offset, at.high_watermark) == (E.none, 5, 8)
    earliest = h.list_offsets("d", -2)
    assert (earliest.offset, earliest.leader_epoch) == (5, 0)
    assert h.list_offsets("d", -4, version=8).offset == 5  # EARLIEST_LOCAL: no tiers
    assert h.list_offsets("d", -1).offset == 8


def test_offset_minus_one_means_the_high_watermark_and_the_start_never_moves_back(h):
    filled(h)
    assert delete(h, {("d", 0): -1}) == {("d", 0): (E.none, 8)}
    assert h.replicas.get_log("d", 0).log_start_offset == 8
    # a lower target succeeds and reports the current start (Kafka's low watermark)
    assert delete(h, {("d", 0): 3}) == {("d", 0): (E.none, 8)}
    assert delete(h, {("d", 0): 8}) == {("d", 0): (E.none, 8)}
    # an empty log can still take new records after its start
    assert h.produce("d", 0, batch(b"x")).base_offset == 8


def test_delete_records_errors(h):
    filled(h, partitions=2)
    h.logs.create_topic(GROUP_METADATA_TOPIC_NAME, 1, {})
    got = delete(
        h,
        {
            ("d", 0): 9,  # above the high watermark (8)
            ("d", 1): -2,  # negative other than -1
            ("d", 7): 1,  # no such partition
            ("nope", 0): 1,  # no such topic
            (GROUP_METADATA_TOPIC_NAME, 0): 0,  # internal
        },
    )
    assert got == {
        ("d", 0): (E.offset_out_of_range, -1),
        ("d", 1): (E.offset_out_of_range, -1),
        ("d", 7): (E.unknown_topic_or_partition, -1),
        ("nope", 0): (E.unknown_topic_or_partition, -1),
        (GROUP_METADATA_TOPIC_NAME, 0): (E.invalid_topic_exception, -1),
    }
    assert [h.replicas.get_log("d", p).log_start_offset for p in (0, 1)] == [0, 0]
    assert not (h.root / LOG_START_OFFSET_CHECKPOINT_FILE).exists()  # nothing moved


@pytest.mark.parametrize(("policy", "allowed"), [
    (["compact"], False), (["compact", "delete"], True), (["delete"], True),
])
def test_a_cleanup_policy_without_delete_is_a_policy_violation(h, policy, allowed):
    """Kafka's Partition.deleteRecordsOnLeader: !leaderLog.config.delete. The policy is
    read from the log config's cleanup_policy."""
    filled(h)
    plog = h.replicas.get_log("d", 0)
    plog.update_config(dataclasses.replace(plog.config, cleanup_policy=tuple(policy)))
    want = (E.none, 4) if allowed else (E.policy_violation, -1)
    assert delete(h, {("d", 0): 4}) == {("d", 0): want}


def test_partitions_of_several_topics_in_one_request(h):
    filled(h, "a", partitions=2)
    filled(h, "b")
    got = delete(h, {("a", 0): 2, ("a", 1): 4, ("b", 0): -1})
    assert got == {("a", 0): (E.none, 2), ("a", 1): (E.none, 4), ("b", 0): (E.none, 8)}
    # As Kafka, only starts that the first segment does not imply: a-0 and a-1 now begin
    # at a segment's base; b-0's start (8) is past its last segment's base (6).
    assert checkpoint_text(h.root) == "0\n1\nb 0 8\n"


@pytest.mark.parametrize("how", ["restart", "kill -9"])
def test_the_moved_start_survives_a_restart(tmp_path, how):
    root = tmp_path / "data"
    h = CoreHarness(root)
    filled(h)
    assert delete(h, {("d", 0): 5}) == {("d", 0): (E.none, 5)}  # inside segment [4, 5]
    if how == "restart":
        h.close()
    else:  # kill -9: nothing flushed or checkpointed after the answer
        h.core.stop_serving()
        for plog in h.logs.logs.values():
            crash(plog)
    again = CoreHarness(root)
    try:
        plog = again.replicas.get_log("d", 0)
        assert (plog.log_start_offset, plog.log_end_offset) == (5, 8)
        assert again.list_offsets("d", -2).offset == 5
        below = again.request(FETCH, 12, fetch_body("d", 4)).responses[0].partitions[0]
        assert below.error_code == E.offset_out_of_range
        assert plog.leader_epoch_cache.entries == [(0, 5)]  # trimmed, and written
    finally:
        again.close()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_a_failed_checkpoint_write_is_a_storage_error(h, monkeypatch, err):
    """The partition answers KAFKA_STORAGE_ERROR and the log dir's failure channel hears
    of it, as of any checkpoint write (Kafka: LogDirFailureChannel): a full disk is
    *full*, any other error takes the dir offline."""
    filled(h)

    def broken(dir_fd, name, entries):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(checkpoint, "write_checkpoint_file", broken)
    assert delete(h, {("d", 0): 5}) == {("d", 0): (E.kafka_storage_error, -1)}
    channel = h.logs.failure_channel
    assert (channel.full, channel.offline) == ((True, False) if err == errno.ENOSPC else (False, True))
    assert channel.storage_errors == 2  # the log-start-offset and leader-epoch checkpoints


def test_deleting_a_topic_drops_its_start_offsets_from_the_checkpoint(tmp_path):
    root = tmp_path / "data"
    h = CoreHarness(root)
    filled(h)
    assert delete(h, {("d", 0): 5}) == {("d", 0): (E.none, 5)}
    assert checkpoint_text(h.root) == "0\n1\nd 0 5\n"
    resp = h.request(20, 5, {"topic_names": ["d"], "timeout": 1000})
    assert resp.responses[0].error_code == E.none
    assert checkpoint_text(h.root) == "0\n0\n"  # written at once, not at the next shutdown
    h.create_topic("d")  # a new topic of the same name starts at 0, also after a crash
    h.produce("d", 0, batch(b"n"))
    h.core.stop_serving()
    for plog in h.logs.logs.values():
        crash(plog)
    again = CoreHarness(root)
    try:
        assert again.replicas.get_log("d", 0).log_start_offset == 0
    finally:
        again.close()


def test_producer_state_is_rebuilt_from_the_log_start_offset(tmp_path):
    """After a crash with no snapshot, the producer state is replayed from the log start
    offset (Kafka's rebuildProducerState): a producer whose batches all lie below it is
    not remembered; one with a batch above it is."""
    root = tmp_path / "data"
    h = CoreHarness(root)
    h.create_topic("p")

    def pbatch(pid: int, seq: int):
        return build_batch([Record(b"v")], producer_id=pid, producer_epoch=0, base_sequence=seq)

    assert h.produce("p", 0, pbatch(1000, 0)).base_offset == 0
    assert h.produce("p", 0, pbatch(2000, 0)).base_offset == 1
    assert delete(h, {("p", 0): 1}) == {("p", 0): (E.none, 1)}
    assert set(h.replicas.get_log("p", 0).producer_state.producers) == {1000, 2000}  # in memory
    h.core.stop_serving()
    for plog in h.logs.logs.values():
        plog.flush()
        crash(plog)
    again = CoreHarness(root)
    try:
        assert set(again.replicas.get_log("p", 0).producer_state.producers) == {2000}
    finally:
        again.close()


def test_delete_records_is_parked_only_when_something_moved(h):
    filled(h)
    _request, outcome, _cid, _released = h.send(DELETE_RECORDS, 2, delete_body({("nope", 0): 1}))
    assert outcome is not PARKED  # nothing to make durable: answered during the handler


def test_the_checkpoint_is_read_at_load_and_bad_entries_are_ignored(tmp_path):
    root = tmp_path / "data"
    h = CoreHarness(root)
    filled(h, partitions=2)
    h.close()
    (root / LOG_START_OFFSET_CHECKPOINT_FILE).write_text(
        "0\n4\nd 0 3\nd 1 nonsense\ngone 0 7\nd 1\n"  # two malformed lines, a deleted topic
    )
    (root / f"{LOG_START_OFFSET_CHECKPOINT_FILE}.tmp-1-2-3").write_text("a write cut short")
    again = CoreHarness(root)
    try:
        assert [again.replicas.get_log("d", p).log_start_offset for p in (0, 1)] == [3, 0]
        assert not (root / f"{LOG_START_OFFSET_CHECKPOINT_FILE}.tmp-1-2-3").exists()
    finally:
        again.close()
    assert checkpoint_text(root) == "0\n1\nd 0 3\n"  # rewritten from the logs at shutdown
