"""DelayedFetch, DelayedProduce, the group-commit flusher and the timer reaper.

Real logs in tmp_path under the broker's LogManager and ReplicaManager; time is a
MockClock moved by the test, the scheduler a FakeLoop (the flusher's fsync runs in
it). The reaper on the shell's real event loop is tested in
tests/integration/test_purgatory.py.
"""

from typing import NamedTuple

from tests.fake_loop import FakeLoop
from tidegate.clock import MockClock
from tidegate.errors import ErrorCode
from tidegate.log.config import LogConfig
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.delayed_fetch import DelayedFetch, FetchPartitionStatus
from tidegate.server.delayed_produce import DelayedProduce
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_flusher import LogFlusher
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.replica_manager import (
    FetchParams,
    FetchPartition,
    PartitionResponse,
    ReplicaManager,
)
from tidegate.server.timer import SystemTimer


def replicas_with(tmp_path, topic="t", partitions=2, clock=None):
    loop = FakeLoop(clock)
    logs = LogManager(tmp_path, TopicStore(tmp_path), lambda info: LogConfig(), loop.clock, loop)
    logs.create_topic(topic, partitions, {})
    return ReplicaManager(logs, loop, clock=loop.clock, fetch_sessions=FetchSessionCache(1000))


class Appended(NamedTuple):
    last_offset: int
    size_bytes: int


def append(rm, key, *values):
    """An acks=1 append through ReplicaManager.append_records (counts the bytes parked
    fetches wait for); the fetch wake-ups it queues are left to the test."""
    before = rm.appended_bytes.get(key, 0)
    results = rm.append_records(0, 1, {key: bytearray(build_batch([Record(v) for v in values]))},
                                lambda r: None)
    assert results[key].error == ErrorCode.none
    return Appended(rm.get_log(*key).log_end_offset - 1, rm.appended_bytes[key] - before)


def fetch_status(rm, key, fetch_offset=0, max_bytes=1 << 20, bytes_at_start=0):
    return FetchPartitionStatus(
        key, rm.get_log(*key), fetch_offset, max_bytes, bytes_at_start, rm.appended_bytes.get(key, 0)
    )


class Answer:
    """A parked fetch's answer (a ``FetchAnswer``): records ``what()`` when called with
    the re-read."""

    abandoned = False

    def __init__(self, what):
        self.what = what
        self.results = None

    def __call__(self, results):
        self.results = results
        self.what()


def parked_fetch(rm, max_wait_ms, min_bytes, statuses, what):
    """A DelayedFetch of ``statuses`` (re-reading their partitions at completion)."""
    fetches = [FetchPartition(st.key, st.fetch_offset, st.max_bytes, -1, -1) for st in statuses]
    return DelayedFetch(FetchParams(max_wait_ms, min_bytes, 1 << 20, 0), statuses, fetches, rm, Answer(what))


# -- DelayedFetch --------------------------------------------------------------------


def test_fetch_completes_when_min_bytes_arrive_across_partitions(tmp_path):
    rm = replicas_with(tmp_path)
    clock = MockClock()
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock))
    answered = []
    k0, k1 = ("t", 0), ("t", 1)
    op = parked_fetch(rm, 500, 200, [fetch_status(rm, k0), fetch_status(rm, k1)],
                      lambda: answered.append(clock.milliseconds()))
    assert purgatory.try_complete_else_watch(op, [k0, k1]) is False
    assert purgatory.delayed == 1 and purgatory.watched == 2
    info = append(rm, k0, b"x" * 80)
    assert info.size_bytes < 200
    assert purgatory.check_and_complete(k0) == 0 and not answered
    append(rm, k1, b"y" * 80)
    assert purgatory.check_and_complete(k1) == 1
    assert answered == [clock.milliseconds()] and purgatory.delayed == 0


def test_fetch_counts_each_partition_only_up_to_its_max_bytes(tmp_path):
    rm = replicas_with(tmp_path)
    k0 = ("t", 0)
    answered = []
    op = parked_fetch(rm, 500, 200, [fetch_status(rm, k0, max_bytes=100)], lambda: answered.append(1))
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=MockClock()))
    purgatory.try_complete_else_watch(op, [k0])
    append(rm, k0, b"z" * 500)  # far more than min_bytes, but capped at 100 for this partition
    assert purgatory.check_and_complete(k0) == 0 and not answered


def test_fetch_expires_after_max_wait_not_before(tmp_path):
    rm = replicas_with(tmp_path)
    clock = MockClock()
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock))
    answered = []
    op = parked_fetch(rm, 500, 1, [fetch_status(rm, ("t", 0))], lambda: answered.append(clock.milliseconds()))
    start = clock.milliseconds()
    purgatory.try_complete_else_watch(op, [("t", 0)])
    clock.advance(499)
    purgatory.advance_clock()
    assert not answered
    clock.advance(1)
    purgatory.advance_clock()
    assert answered == [start + 500] and purgatory.expirations_total == 1


def test_fetch_completes_when_its_partition_is_deleted_or_truncated(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=MockClock()))
    answered = []
    append(rm, ("t", 1), b"a", b"b", b"c")
    beyond = parked_fetch(rm, 500, 1, [fetch_status(rm, ("t", 1), fetch_offset=3)],
                          lambda: answered.append("truncated"))
    gone = parked_fetch(rm, 500, 1, [fetch_status(rm, ("t", 0))], lambda: answered.append("gone"))
    purgatory.try_complete_else_watch(beyond, [("t", 1)])
    purgatory.try_complete_else_watch(gone, [("t", 0)])
    rm.get_log("t", 1).truncate_to(1, 0)
    assert purgatory.check_and_complete(("t", 1)) == 1
    rm.logs.delete_topic("t")
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert answered == ["truncated", "gone"]


# -- DelayedProduce ------------------------------------------------------------------


def test_produce_completes_when_the_recovery_point_passes_every_partition(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=MockClock()))
    parts = {}
    pending = {}
    for p in (0, 1):
        key = ("t", p)
        info = append(rm, key, b"v")
        parts[p] = PartitionResponse()
        pending[key] = (rm.get_log(*key), info.last_offset, parts[p])
    answered = []
    op = DelayedProduce(30_000, pending, rm, lambda: answered.append(1))
    assert purgatory.try_complete_else_watch(op, list(pending)) is False
    rm.get_log("t", 0).flush()
    assert purgatory.check_and_complete(("t", 0)) == 0
    rm.get_log("t", 1).flush()
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert answered == [1] and parts[0].error == parts[1].error == ErrorCode.none


def test_produce_timeout_marks_only_unflushed_partitions(tmp_path):
    rm = replicas_with(tmp_path)
    clock = MockClock()
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=clock))
    parts = {p: PartitionResponse() for p in (0, 1)}
    pending = {}
    for p in (0, 1):
        info = append(rm, ("t", p), b"v")
        pending[("t", p)] = (rm.get_log("t", p), info.last_offset, parts[p])
    answered = []
    op = DelayedProduce(100, pending, rm, lambda: answered.append(1))
    purgatory.try_complete_else_watch(op, list(pending))
    rm.get_log("t", 0).flush()
    purgatory.check_and_complete(("t", 0))
    clock.advance(100)
    purgatory.advance_clock()
    assert answered == [1]
    assert parts[0].error == ErrorCode.none
    assert parts[1].error == ErrorCode.request_timed_out


def test_produce_to_a_deleted_partition_answers_unknown(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=MockClock()))
    info = append(rm, ("t", 0), b"v")
    part = PartitionResponse()
    op = DelayedProduce(30_000, {("t", 0): (rm.get_log("t", 0), info.last_offset, part)}, rm,
                        lambda: None)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    rm.logs.delete_topic("t")
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert part.error == ErrorCode.unknown_topic_or_partition


# -- the group-commit flusher ----------------------------------------------------------


def test_appends_during_a_flush_share_the_next_round(tmp_path):
    rm = replicas_with(tmp_path, partitions=1)
    loop = FakeLoop()
    key = ("t", 0)
    plog = rm.get_log(*key)
    flushed = []
    flusher = LogFlusher(lambda k: flushed.append((k, plog.recovery_point)), loop.submit)
    append(rm, key, b"a")
    flusher.request(key, plog)  # round 1 starts at once (its fsync is submitted)
    for v in (b"b", b"c", b"d", b"e"):
        append(rm, key, v)
        flusher.request(key, plog)  # all wait for round 2
    assert flusher.rounds == 1 and flusher.in_progress == 1 and flushed == []
    loop.run_pending()  # round 1 ends; round 2 starts at once and ends too
    assert flusher.requests == 5
    assert flusher.rounds == 2 and loop.submitted == 2  # five acks=all appends, two fsyncs
    assert flushed == [(key, 1), (key, 5)] and plog.recovery_point == 5
    assert flusher.in_progress == 0

