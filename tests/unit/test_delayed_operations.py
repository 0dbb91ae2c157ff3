"""DelayedFetch, DelayedProduce, the group-commit flusher and the timer reaper.

Real logs in tmp_path; the purgatory timers use a fake clock where the test
drives time, and a real event loop only where the shell's asyncio parts are
under test (the flusher's worker thread, the reaper's call_later).
"""

import asyncio
import time

from kio.schema.errors import ErrorCode

from tests.fake_loop import clock_at
from tidegate.log.batch_builder import Record, build_batch
from tidegate.log.config import LogConfig
from tidegate.server.delayed_fetch import DelayedFetch, FetchPartitionStatus
from tidegate.server.delayed_produce import DelayedProduce
from tidegate.server.log_flusher import LogFlusher
from tidegate.server.metadata import TopicStore
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.timer import SystemTimer
from tidegate.server.timer_reaper import TimerReaper


def replicas_with(tmp_path, topic="t", partitions=2):
    store = TopicStore(tmp_path)
    rm = ReplicaManager(tmp_path, store, lambda info: LogConfig(), lambda: 0)
    rm.create_topic(topic, partitions, {})
    return rm


def append(rm, key, *values):
    plog = rm.get_log(*key)
    info = plog.append(bytearray(build_batch([Record(v) for v in values])), 0)
    rm.record_append(key, info.size_bytes)
    return info


def fetch_status(rm, key, fetch_offset=0, max_bytes=1 << 20, bytes_at_start=0):
    return FetchPartitionStatus(
        key, rm.get_log(*key), fetch_offset, max_bytes, bytes_at_start, rm.appended_bytes.get(key, 0)
    )


# -- DelayedFetch --------------------------------------------------------------------


def test_fetch_completes_when_min_bytes_arrive_across_partitions(tmp_path):
    rm = replicas_with(tmp_path)
    clock = clock_at(1_000_000)
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock))
    answered = []
    k0, k1 = ("t", 0), ("t", 1)
    op = DelayedFetch(500, 200, [fetch_status(rm, k0), fetch_status(rm, k1)], rm,
                      lambda: answered.append(clock()))
    assert purgatory.try_complete_else_watch(op, [k0, k1]) is False
    assert purgatory.delayed == 1 and purgatory.watched == 2
    info = append(rm, k0, b"x" * 80)
    assert info.size_bytes < 200
    assert purgatory.check_and_complete(k0) == 0 and not answered
    append(rm, k1, b"y" * 80)
    assert purgatory.check_and_complete(k1) == 1
    assert answered == [clock()] and purgatory.delayed == 0


def test_fetch_counts_each_partition_only_up_to_its_max_bytes(tmp_path):
    rm = replicas_with(tmp_path)
    k0 = ("t", 0)
    answered = []
    op = DelayedFetch(500, 200, [fetch_status(rm, k0, max_bytes=100)], rm, lambda: answered.append(1))
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock_at(1_000_000)))
    purgatory.try_complete_else_watch(op, [k0])
    append(rm, k0, b"z" * 500)  # far more than min_bytes, but capped at 100 for this partition
    assert purgatory.check_and_complete(k0) == 0 and not answered


def test_fetch_expires_after_max_wait_not_before(tmp_path):
    rm = replicas_with(tmp_path)
    clock = clock_at(1_000_000)
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock))
    answered = []
    op = DelayedFetch(500, 1, [fetch_status(rm, ("t", 0))], rm, lambda: answered.append(clock()))
    start = clock()
    purgatory.try_complete_else_watch(op, [("t", 0)])
    clock.advance(499)
    purgatory.advance_clock()
    assert not answered
    clock.advance(1)
    purgatory.advance_clock()
    assert answered == [start + 500] and purgatory.expirations_total == 1


def test_fetch_completes_when_its_partition_is_deleted_or_truncated(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock_at(1_000_000)))
    answered = []
    append(rm, ("t", 1), b"a", b"b", b"c")
    beyond = DelayedFetch(500, 1, [fetch_status(rm, ("t", 1), fetch_offset=3)], rm,
                          lambda: answered.append("truncated"))
    gone = DelayedFetch(500, 1, [fetch_status(rm, ("t", 0))], rm, lambda: answered.append("gone"))
    purgatory.try_complete_else_watch(beyond, [("t", 1)])
    purgatory.try_complete_else_watch(gone, [("t", 0)])
    rm.get_log("t", 1).truncate_to(1)
    assert purgatory.check_and_complete(("t", 1)) == 1
    rm.delete_topic("t")
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert answered == ["truncated", "gone"]


# -- DelayedProduce ------------------------------------------------------------------


def test_produce_completes_when_the_recovery_point_passes_every_partition(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=clock_at(1_000_000)))
    parts = {}
    pending = {}
    for p in (0, 1):
        key = ("t", p)
        info = append(rm, key, b"v")
        parts[p] = {"error_code": ErrorCode.none}
        pending[key] = (rm.get_log(*key), info.last_offset, parts[p])
    answered = []
    op = DelayedProduce(30_000, pending, rm, lambda: answered.append(1))
    assert purgatory.try_complete_else_watch(op, list(pending)) is False
    rm.get_log("t", 0).flush()
    assert purgatory.check_and_complete(("t", 0)) == 0
    rm.get_log("t", 1).flush()
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert answered == [1] and parts[0]["error_code"] == parts[1]["error_code"] == ErrorCode.none


def test_produce_timeout_marks_only_unflushed_partitions(tmp_path):
    rm = replicas_with(tmp_path)
    clock = clock_at(1_000_000)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=clock))
    parts = {p: {"error_code": ErrorCode.none} for p in (0, 1)}
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
    assert parts[0]["error_code"] == ErrorCode.none
    assert parts[1]["error_code"] == ErrorCode.request_timed_out


def test_produce_to_a_deleted_partition_answers_unknown(tmp_path):
    rm = replicas_with(tmp_path)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock=clock_at(1_000_000)))
    info = append(rm, ("t", 0), b"v")
    part = {"error_code": ErrorCode.none}
    op = DelayedProduce(30_000, {("t", 0): (rm.get_log("t", 0), info.last_offset, part)}, rm,
                        lambda: None)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    rm.delete_topic("t")
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert part["error_code"] == ErrorCode.unknown_topic_or_partition


# -- the group-commit flusher ----------------------------------------------------------


def test_appends_during_a_flush_share_the_next_round(tmp_path):
    rm = replicas_with(tmp_path, partitions=1)
    key = ("t", 0)
    plog = rm.get_log(*key)
    flushed = []

    async def main():
        flusher = LogFlusher(lambda k: flushed.append((k, plog.recovery_point)))
        append(rm, key, b"a")
        flusher.request(key, plog)  # round 1 starts at once
        for v in (b"b", b"c", b"d", b"e"):
            append(rm, key, v)
            flusher.request(key, plog)  # all wait for round 2
        for _ in range(200):
            if flusher.in_progress == 0 and plog.recovery_point == plog.log_end_offset:
                break
            await asyncio.sleep(0.005)
        return flusher

    flusher = asyncio.run(main())
    assert flusher.requests == 5
    assert flusher.rounds == 2  # five acks=all appends, two fsync rounds
    assert flushed[-1] == (key, 5) and plog.recovery_point == 5


# -- the reaper --------------------------------------------------------------------------


def test_reaper_expires_on_time_and_does_not_spin_while_idle():
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer())
    reaper = TimerReaper([purgatory])

    expired_at = []

    async def main():
        from tidegate.server.purgatory import DelayedOperation

        class Sleeper(DelayedOperation):
            def try_complete(self):
                return False

            def on_complete(self):
                expired_at.append(time.monotonic())

        start = time.monotonic()
        purgatory.try_complete_else_watch(Sleeper(300), ["k"])
        purgatory.try_complete_else_watch(Sleeper(100), ["k"])
        await asyncio.sleep(0.6)
        return start

    start = asyncio.run(main())
    offsets = sorted(t - start for t in expired_at)
    assert len(offsets) == 2
    assert 0.099 <= offsets[0] < 0.25 and 0.299 <= offsets[1] < 0.45
    # a handful of wake-ups (one per due bucket, plus overflow moves), never a 1 ms loop
    assert reaper.wakeups < 20
    assert purgatory.timer.next_expiration_ms() is None
