"""The log cleaner (tidegate.log.cleaner): Kafka's LogCleanerTest / LogCleanerManagerTest
cases on real segment files, time passed in."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import os
import pickle
import signal
import sys
import termios
import time

import pytest

from tests.unit.logs import LOG_DIR, batch_headers, crash, marker, open_log
from tidegate.clock import MockClock
from tidegate.log import Log, LogConfig
from tidegate.log.cleaner import Cleaner, PreparedClean
from tidegate.log.cleaner_worker import CleanJob, prepare_in_worker
from tidegate.log.log_cleaner import LogCleaner
from tidegate.log.log_cleaner_manager import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LogCleanerManager,
    LogToClean,
)
from tidegate.log.offset_map import SkimpyOffsetMap
from tidegate.log.throttler import Throttler
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import DELETE_HORIZON_FLAG_MASK
from tidegate.record.records import decode_batch_records, iter_decoded_batches

TP = ("t", 0)
DAY = 86_400_000


def kv(*pairs: tuple[int | None, bytes | None], ts: int = 1_000, **kw) -> bytearray:
    """One batch of ``(key, value)`` records (key as an int, None: no key)."""
    recs = [
        Record(v, key=None if k is None else str(k).encode(), timestamp=ts + i)
        for i, (k, v) in enumerate(pairs)
    ]
    return build_batch(recs, **kw)


def txn(pid: int, seq: int, *keys: int, epoch: int = 0) -> bytearray:
    return kv(*[(k, b"v%d" % k) for k in keys], producer_id=pid, producer_epoch=epoch,
              base_sequence=seq, transactional=True)  # fmt: skip


def records(plog: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record from the log start on."""
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 22)
        assert data
        for info in iter_decoded_batches(data):
            for r in decode_batch_records(info):
                out.append((r.offset, r.key, r.value))
            offset = info.last_offset + 1
    return out


def offsets(plog: Log, include_control: bool = True) -> list[int]:
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 22)
        for info in iter_decoded_batches(data):
            if include_control or not info.is_control:
                out += [r.offset for r in decode_batch_records(info, include_control=True)]
            offset = info.last_offset + 1
    return out


def keys(plog: Log) -> list[int]:
    return [int(k) for _, k, _ in records(plog) if k is not None]


@pytest.fixture(autouse=True, params=["thread", "worker"])
def execution(request, monkeypatch):
    """Every case runs twice: the clean prepared on the log itself (a worker thread's
    way) and from a pickled :class:`CleanJob` through :func:`prepare_in_worker` (the
    worker process's code, its input and output through pickle as across the process
    boundary)."""
    monkeypatch.setattr(f"{__name__}.EXECUTION", request.param)
    return request.param


EXECUTION = "thread"


def in_worker(ltc: LogToClean, now: int, cleaner: Cleaner) -> PreparedClean:
    job = pickle.loads(pickle.dumps(CleanJob.of(ltc, now, cleaner)))
    result = pickle.loads(pickle.dumps(prepare_in_worker(job, os.getppid())))
    return PreparedClean.of_worker(ltc.log, *result)


def clean(plog: Log, now: int, *, memory: int = 1 << 20, upper: int | None = None, first: int = 0,
          **kw) -> int:  # fmt: skip
    """Clean ``[first, upper or the active segment)`` once at ``now``; the end offset."""
    if upper is None:
        upper = min(plog.segments[-1].base_offset, plog.last_stable_offset)
    ltc = LogToClean(TP, plog, first, upper, 0, 1)
    if EXECUTION == "worker" and not kw:
        cleaner = Cleaner(memory, clock=MockClock())
        prepared = in_worker(ltc, now, cleaner)
        assert Cleaner.commit(prepared, now)
        return prepared.stats.end_offset
    return Cleaner(memory, clock=MockClock()).clean(ltc, now, **kw).end_offset


@pytest.fixture
def compacted(tmp_path):
    logs: list[Log] = []

    def make(**settings) -> Log:
        settings.setdefault("cleanup_policy", ("compact",))
        settings.setdefault("segment_bytes", 1024)
        plog = open_log(tmp_path, LogConfig(**settings))
        logs.append(plog)
        return plog

    yield make
    for plog in logs:
        if not plog.closed:
            plog.close()


def fill(plog: Log, n: int, nkeys: int, ts: int = 1_000) -> dict[bytes, bytes]:
    """``n`` single-record batches cycling over ``nkeys`` keys; the latest value per key."""
    latest = {}
    for i in range(n):
        k, v = i % nkeys, b"value-%d" % i
        plog.append(kv((k, v), ts=ts + i), ts + i)
        latest[str(k).encode()] = v
    return latest


def test_keeps_the_latest_record_per_key_with_its_offset_and_never_the_active_segment(compacted):
    plog = compacted()
    fill(plog, 200, 10)
    active_before = [(o, k, v) for o, k, v in records(plog) if o >= plog.segments[-1].base_offset]
    upper = plog.segments[-1].base_offset
    assert clean(plog, 10_000) == upper
    after = records(plog)
    cleaned = [r for r in after if r[0] < upper]
    # each key appears once below the active segment, at its latest offset there
    latest_below: dict[bytes, int] = {}
    for i in range(upper):
        latest_below[str(i % 10).encode()] = i
    assert sorted((o, k) for o, k, _ in cleaned) == sorted((o, k) for k, o in latest_below.items())
    assert all(v == b"value-%d" % o for o, _, v in cleaned)
    assert [r for r in after if r[0] >= upper] == active_before
    assert plog.log_end_offset == 200


def test_batch_headers_survive_cleaning(compacted):
    plog = compacted()
    for seq in range(20):
        plog.append(kv((seq % 2, b"x" * 50), producer_id=7, producer_epoch=3, base_sequence=seq), 0)
    clean(plog, 0)
    for h in batch_headers(plog):
        assert (h.producer_id, h.producer_epoch) == (7, 3)
        assert h.base_sequence == h.base_offset  # sequences unchanged


def test_small_offset_map_cleans_in_several_passes(compacted):
    plog = compacted()
    latest = fill(plog, 300, 40)
    first = 0
    upper = plog.segments[-1].base_offset
    passes = 0
    # 24 bytes per entry at 0.9 load: 10 keys per pass
    while first < upper:
        first = clean(plog, 0, memory=24 * 12, first=first)
        passes += 1
        assert passes < 60
    assert passes >= 4  # each pass maps 10 keys: ~10 records of the 40-key cycle
    below = [(k, o) for o, k, _ in records(plog) if o < upper]
    assert len(below) == len({k for k, _ in below}) == 40
    assert {k: v for _, k, v in records(plog)} == latest


def test_tombstones_stay_until_delete_retention_ms_after_a_clean(compacted):
    plog = compacted(delete_retention_ms=DAY)
    for i in range(30):
        plog.append(kv((i % 3, b"x" * 40)), i)
    plog.append(kv((1, None)), 100)  # tombstone for key 1
    for i in range(30):
        plog.append(kv((2, b"y" * 40)), 200 + i)
    t0 = 1_000_000
    clean(plog, t0)
    assert (b"1", None) in [(k, v) for _, k, v in records(plog)]
    stamped = [h for h in batch_headers(plog) if h.attributes & DELETE_HORIZON_FLAG_MASK]
    assert stamped and all(h.base_timestamp == t0 + DAY for h in stamped)
    # the record's own timestamp is unchanged by the horizon in the base timestamp
    assert clean(plog, t0 + DAY - 1) and b"1" in [k for _, k, _ in records(plog)]
    clean(plog, t0 + DAY)
    assert b"1" not in [k for _, k, _ in records(plog)]
    assert b"0" in [k for _, k, _ in records(plog)]


def test_record_timestamps_survive_the_delete_horizon(compacted):
    plog = compacted(delete_retention_ms=DAY)
    plog.append(kv((1, None), ts=5_000), 0)
    for i in range(40):
        plog.append(kv((2, b"z" * 40), ts=6_000 + i), 0)
    clean(plog, 10_000_000)
    data = plog.read(0, 1 << 20)
    info = next(iter_decoded_batches(data))
    assert decode_batch_records(info)[0].timestamp == 5_000


def test_unkeyed_records_are_dropped(compacted):
    """Written before the topic became compacted (cleanup.policy altered)."""
    plog = compacted(cleanup_policy=("delete",))
    plog.append(kv((None, b"a"), (1, b"b")), 0)
    for _ in range(30):
        plog.append(kv((2, b"c" * 40)), 0)
    plog.update_config(dataclasses.replace(plog.config, cleanup_policy=("compact",)))
    ltc = LogToClean(TP, plog, 0, plog.segments[-1].base_offset, 0, 1)
    stats = Cleaner(1 << 20, clock=MockClock()).clean(ltc, 0)
    assert stats.invalid_messages_read == 1
    assert records(plog)[0] == (1, b"1", b"b")


def test_small_segments_are_grouped_into_one(compacted):
    plog = compacted(segment_bytes=800)
    fill(plog, 200, 2)
    before = len(plog.segments)
    clean(plog, 0)  # groups by the sizes before cleaning: full segments stay apart
    assert len(plog.segments) == before
    clean(plog, 0)  # now small: grouped within segment.bytes
    assert len(plog.segments) < before / 3
    assert plog.log_end_offset == 200
    assert len(records(plog)) >= 2


def test_compact_only_logs_ignore_time_and_size_retention(compacted):
    plog = compacted(retention_ms=1, retention_bytes=1)
    fill(plog, 100, 5)
    assert plog.apply_retention(10**12) == 0
    both = compacted(cleanup_policy=("compact", "delete"), retention_ms=1)
    both.close()


# -- crash safety ---------------------------------------------------------------------


@pytest.mark.parametrize("step", ["cleaned", "swap", "deleted", "renamed"])
def test_a_crash_at_any_step_leaves_a_loadable_log_with_every_latest_value(tmp_path, step):
    cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=1024)
    plog = open_log(tmp_path, cfg)
    latest = fill(plog, 200, 10)
    plog.flush()
    before = records(plog)

    class Crash(Exception):
        pass

    def die(name: str) -> None:
        if name == step:
            raise Crash(name)

    with pytest.raises(Crash):
        clean(plog, 0, on_step=die)
    crash(plog)
    reloaded = Log(tmp_path / LOG_DIR, cfg, 0)
    try:
        names = os.listdir(tmp_path / LOG_DIR)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        after = records(reloaded)
        assert reloaded.log_end_offset == 200
        assert {k: v for _, k, v in after} == latest
        if step == "cleaned":
            assert after == before  # discarded
        else:
            assert len(after) < len(before)  # completed
        # and the next clean works on the recovered log
        clean(reloaded, 0)
        assert {k: v for _, k, v in records(reloaded)} == latest
    finally:
        reloaded.close()


# -- transactions (LogCleanerTest) ------------------------------------------------------


def test_mixed_transactions(compacted):
    """pid1 writes 1,2; pid2 writes 2,3; pid1 writes 3,4; pid1 aborts; pid2 commits;
    pid1 writes 2 and commits: keys [3, 2] at offsets [3, 6, 7, 8, 9] remain."""
    plog = compacted(segment_bytes=1 << 20)
    p1, p2 = 1, 2
    plog.append(txn(p1, 0, 1, 2), 0)
    plog.append(txn(p2, 0, 2, 3), 0)
    plog.append(txn(p1, 2, 3, 4), 0)
    plog.append(marker(False, p1), 0, from_client=False)
    plog.append(marker(True, p2), 0, from_client=False)
    plog.append(txn(p1, 4, 2), 0)
    plog.append(marker(True, p1), 0, from_client=False)
    aborted_before = plog.collect_aborted_transactions(0, 10)
    plog.roll(0)
    clean(plog, 0)
    assert keys(plog) == [3, 2]
    assert offsets(plog) == [3, 6, 7, 8, 9]
    assert plog.collect_aborted_transactions(0, 10) == aborted_before


def test_commit_marker_removal(compacted):
    """Keys 1; 2,3; commit; 2; commit: the first clean keeps [1, 3, 2] at [0, 2, 3, 4, 5];
    the first marker goes only in a pass past its horizon."""
    plog = compacted(segment_bytes=1 << 20, delete_retention_ms=DAY)
    pid = 1
    plog.append(kv((1, b"a")), 0)
    plog.append(txn(pid, 0, 2, 3), 0)
    plog.append(marker(True, pid), 0, from_client=False)
    plog.append(txn(pid, 2, 2), 0)
    plog.append(marker(True, pid), 0, from_client=False)
    plog.roll(0)
    clean(plog, 0)
    assert keys(plog) == [1, 3, 2]
    assert offsets(plog) == [0, 2, 3, 4, 5]
    clean(plog, 1)  # the batch at 1-2 is still read: the marker stays
    assert offsets(plog) == [0, 2, 3, 4, 5]


def test_abort_marker_removal(compacted):
    """Keys 1; 2,3; abort; 3; commit: [3, 4, 5] after one clean (the abort marker kept),
    [4, 5] after two more."""
    plog = compacted(segment_bytes=1 << 20, delete_retention_ms=0)
    pid = 1
    plog.append(txn(pid, 0, 1), 0)
    plog.append(txn(pid, 1, 2, 3), 0)
    plog.append(marker(False, pid), 0, from_client=False)
    plog.append(txn(pid, 3, 3), 0)
    plog.append(marker(True, pid), 0, from_client=False)
    plog.roll(0)
    clean(plog, 0)
    assert offsets(plog) == [3, 4, 5]
    clean(plog, 0)
    clean(plog, 1)
    assert offsets(plog) == [4, 5]
    assert keys(plog) == [3]


def test_undecided_transactions_are_not_cleanable(compacted, tmp_path):
    plog = compacted(segment_bytes=1 << 20)
    plog.append(txn(1, 0, 1), 0)
    plog.append(kv((2, b"a")), 0)
    plog.append(kv((2, b"b")), 0)
    plog.roll(0)
    manager = LogCleanerManager(os.open(tmp_path, os.O_RDONLY))
    first_dirty, uncleanable = manager.cleanable_range(TP, plog, 10**9)
    assert (first_dirty, uncleanable) == (0, 0)  # the LSO is at the open transaction
    plog.append(marker(False, 1), 0, from_client=False)
    plog.roll(0)
    assert manager.cleanable_range(TP, plog, 10**9) == (0, 4)


def test_a_producers_last_batch_is_kept_empty(compacted):
    plog = compacted(segment_bytes=1 << 20)
    plog.append(kv((1, b"a"), producer_id=5, producer_epoch=0, base_sequence=0), 0)
    plog.append(kv((1, b"b")), 0)
    plog.roll(0)
    clean(plog, 0)
    hs = batch_headers(plog)
    assert (hs[0].producer_id, hs[0].records_count, hs[0].base_sequence) == (5, 0, 0)
    assert offsets(plog) == [1]


# -- the manager -------------------------------------------------------------------------


def test_manager_picks_the_filthiest_eligible_log_and_checkpoints(tmp_path):
    cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=1024)
    dirty = Log(tmp_path / "a-0", cfg, 0)
    clean_one = Log(tmp_path / "b-0", cfg, 0)
    deleted = Log(tmp_path / "c-0", LogConfig(segment_bytes=1024), 0)
    try:
        fill(dirty, 200, 2)
        fill(clean_one, 200, 200)
        fill(deleted, 200, 1)
        dir_fd = os.open(tmp_path, os.O_RDONLY)
        cleaner = LogCleaner(LogCleanerManager(dir_fd), Cleaner(1 << 20, clock=MockClock()))
        logs = {("a", 0): dirty, ("b", 0): clean_one, ("c", 0): deleted}
        assert cleaner.clean_once(logs, 0)
        upper = dirty.segments[-1].base_offset
        assert cleaner.manager.checkpoints == {("a", 0): upper}
        assert cleaner.max_dirty_percent == 100
        assert (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text().splitlines()[
            2
        ] == f"a 0 {upper}"
        # after cleaning a, b is the dirtiest: its ratio is above 0.5 too
        assert cleaner.clean_once(logs, 0)
        assert ("b", 0) in cleaner.manager.checkpoints
        assert not cleaner.clean_once(logs, 0)  # nothing dirty is left
        # a new manager reads the checkpoint back
        again = LogCleanerManager(dir_fd)
        assert again.checkpoints[("a", 0)] == upper
        os.close(dir_fd)
    finally:
        for plog in (dirty, clean_one, deleted):
            plog.close()


def test_min_compaction_lag_bounds_the_cleanable_range_and_checkpoint_reset(compacted, tmp_path):
    plog = compacted(min_compaction_lag_ms=1_000)
    fill(plog, 100, 5, ts=0)
    manager = LogCleanerManager(os.open(tmp_path, os.O_RDONLY))
    segs = plog.segments
    # at now=1000+50 only segments whose largest timestamp is <= 50 are cleanable
    _, uncleanable = manager.cleanable_range(TP, plog, 1_050)
    assert uncleanable == next(s.base_offset for s in segs if s.largest_timestamp() > 50)
    assert manager.cleanable_range(TP, plog, 10**9)[1] == segs[-1].base_offset
    manager.checkpoints[TP] = 10_000  # beyond the log end: reset to the log start
    assert manager.cleanable_range(TP, plog, 10**9)[0] == 0


def test_max_compaction_lag_forces_a_clean_below_the_ratio(compacted, tmp_path):
    plog = compacted(max_compaction_lag_ms=1_000, min_cleanable_dirty_ratio=0.99)
    fill(plog, 100, 100, ts=0)
    manager = LogCleanerManager(os.open(tmp_path, os.O_RDONLY))
    manager.checkpoints[TP] = plog.segments[-2].base_offset  # little dirty
    best, _ = manager.grab_filthiest({TP: plog}, 500)
    assert best is None
    best, _ = manager.grab_filthiest({TP: plog}, 10_000)
    assert best is not None and best.needs_compaction_now


def test_an_empty_cleanup_policy_neither_deletes_nor_compacts(compacted, tmp_path):
    """cleanup.policy= (Kafka 4): retention deletes nothing and the cleaner never picks it."""
    plog = compacted(cleanup_policy=(), retention_ms=1, retention_bytes=1)
    fill(plog, 100, 100, ts=0)
    segments = len(plog.segments)
    assert plog.apply_retention(10**12) == 0
    assert len(plog.segments) == segments
    manager = LogCleanerManager(os.open(tmp_path, os.O_RDONLY))
    best, _ = manager.grab_filthiest({TP: plog}, 10**12)
    assert best is None
    plog.append(kv((None, b"unkeyed")), 0)  # not compacted: records need no key


def test_a_compacted_topic_refuses_a_batch_with_an_unkeyed_record(compacted):
    """Kafka's LogValidator: INVALID_RECORD for the whole batch, the records in
    record_errors; nothing of the batch is appended."""
    from tidegate.record.record_batch import InvalidRecordError

    plog = compacted()
    with pytest.raises(InvalidRecordError) as info:
        plog.append(kv((1, b"a"), (None, b"b"), (2, b"c"), (None, b"d")), 0)
    assert info.value.error_code == 87
    assert [i for i, _ in info.value.record_errors] == [1, 3]
    assert info.value.record_errors[0][1] == (
        "Compacted topic cannot accept message without key in topic partition t-0."
    )
    assert plog.log_end_offset == 0
    plog.append(kv((1, b"a")), 0)
    assert plog.log_end_offset == 1


def test_throttler_sleeps_off_the_excess_rate():
    """Kafka's Throttler: checked once per interval, the bytes over the rate slept off."""
    clock = MockClock()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.advance(int(s * 1000))

    throttle = Throttler(1000.0, check_interval_ms=300, clock=clock, sleep=sleep)
    throttle(100)
    clock.advance(100)
    throttle(100)  # within the interval: no check
    assert slept == []
    clock.advance(300)
    throttle(800)  # 1000 bytes in 0.4 s at 1000/s: 0.6 s too fast
    assert slept == [pytest.approx(0.6)]
    clock.advance(1000)
    throttle(500)  # 500 bytes in 1 s: under the rate
    assert slept == [pytest.approx(0.6)]
    assert throttle.slept_s == pytest.approx(0.6)
    unbounded = Throttler(1.7976931348623157e308, clock=clock, sleep=sleep)
    clock.advance(1000)
    unbounded(10**12)
    assert slept == [pytest.approx(0.6)]


def test_a_throttled_clean_reads_and_writes_at_the_rate(compacted):
    plog = compacted()
    fill(plog, 300, 3)
    seen: list[int] = []
    cleaner = Cleaner(1 << 20, throttle=seen.append, clock=MockClock())
    ltc = LogToClean(TP, plog, 0, plog.segments[-1].base_offset, 0, 1)
    stats = cleaner.clean(ltc, 0)
    assert sum(seen) == stats.map_bytes_read + stats.bytes_read + stats.bytes_written > 0


def test_a_worker_clean_whose_segments_were_deleted_meanwhile_is_discarded(compacted):
    """DeleteRecords during a clean in the worker: the groups from the deleted
    segments on are dropped with their .cleaned files, the log keeps its segments, and
    the partition is not marked uncleanable."""
    plog = compacted()
    fill(plog, 300, 3)
    ltc = LogCleanerManager(os.open(plog.directory.parent, os.O_RDONLY)).log_to_clean(TP, plog, 0)
    job = CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock()))
    stats, groups = prepare_in_worker(job, os.getppid())
    assert groups and list(plog.directory.glob("*.cleaned"))
    before = [s.base_offset for s in plog.segments]
    plog.increment_log_start_offset(plog.segments[1].base_offset, 0)  # DeleteRecords
    prepared = PreparedClean.of_worker(plog, stats, groups)
    assert prepared.groups == [] and not list(plog.directory.glob("*.cleaned"))
    assert [s.base_offset for s in plog.segments] == before[1:]
    cleaner = LogCleaner(LogCleanerManager(os.open(plog.directory.parent, os.O_RDONLY)), Cleaner(1 << 20, clock=MockClock()))
    cleaner.failed(ltc, FileNotFoundError("segment deleted"))
    assert TP not in cleaner.manager.uncleanable
    # an error without such a change marks it uncleanable, as Kafka does
    ltc2 = cleaner.manager.log_to_clean(TP, plog, 0)
    cleaner.failed(ltc2, ValueError("corrupt"))
    assert TP in cleaner.manager.uncleanable


def test_a_cleaned_segment_is_written_through_a_bounded_buffer(compacted, monkeypatch):
    """log.cleaner.io.buffer.size: the cleaned segment is written as the clean goes, at
    most half the buffer (plus one batch) held, not the whole group in memory."""
    from tidegate.log import segment_swap

    plog = compacted(segment_bytes=1 << 20)
    fill(plog, 2_000, 2_000)  # unique keys: nothing is dropped, everything rewritten
    plog.roll(10_000)
    held: list[int] = []
    real_write = segment_swap.CleanedSegmentWriter.write

    def write(self, data: bytes) -> None:
        real_write(self, data)
        held.append(self._pending_bytes)

    monkeypatch.setattr(segment_swap.CleanedSegmentWriter, "write", write)
    ltc = LogToClean(TP, plog, 0, plog.segments[-1].base_offset, 0, 1)
    stats = Cleaner(1 << 20, io_buffer_size=8192, clock=MockClock()).clean(ltc, 0)
    assert stats.bytes_written > 100_000 and len(held) == 2_000
    assert max(held) < 4096 + 200  # half the buffer plus one batch
    assert len(records(plog)) == 2_000


def _wait_for_exit_unreaped(pid: int) -> None:
    """Until ``pid`` (a child) has exited, leaving it for its Popen to reap."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def _wait_for_bytes_in(pipe, timeout: float = 10.0) -> None:
    """Until something was written to ``pipe`` and not read yet (FIONREAD on its write end)."""
    deadline = time.monotonic() + timeout
    while True:
        pending = fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0\0\0\0")
        if int.from_bytes(pending, sys.byteorder):
            return
        assert time.monotonic() < deadline, "nothing was written to the pipe"
        time.sleep(0.001)


def test_the_worker_process_cleans_and_reports_its_death(compacted):
    """CleanerWorker: a real child process (python -m tidegate.log.cleaner_worker) runs
    the job; its exceptions come back as themselves; a worker killed during a job is
    CleanerWorkerDied, one found dead before a job is replaced, and the next job after a
    death starts a new one."""
    from tidegate.log.cleaner_worker import CleanerWorker, CleanerWorkerDied

    plog = compacted()
    latest = fill(plog, 300, 3)
    ltc = LogToClean(TP, plog, 0, plog.segments[-1].base_offset, 0, 1)
    worker = CleanerWorker()
    try:
        stats, groups = worker.run(CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock())))
        first = worker.pid
        # one record per batch: the records below the active segment were read
        assert first is not None and stats.messages_read == plog.segments[-1].base_offset
        prepared = PreparedClean.of_worker(plog, stats, groups)
        assert Cleaner.commit(prepared, 0)
        assert {k: v for _, k, v in records(plog)} == latest
        bad = dataclasses.replace(CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock())), directory=str(plog.directory / "gone"))
        with pytest.raises(FileNotFoundError):
            worker.run(bad)
        assert worker.pid == first  # an error in a job does not end the worker
        # killed during a job: stopped first (and seen stopped: a stop still pending when
        # the job arrived would let it read the job), so the job is sent before it dies
        os.kill(first, signal.SIGSTOP)
        os.waitid(os.P_PID, first, os.WSTOPPED | os.WNOWAIT)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            during = pool.submit(worker.run, CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock())))
            assert worker._proc is not None and worker._proc.stdin is not None
            _wait_for_bytes_in(worker._proc.stdin)
        finally:
            os.kill(first, signal.SIGKILL)  # whatever failed above, run() returns
            pool.shutdown(wait=True)
        with pytest.raises(CleanerWorkerDied):
            during.result(30)
        worker.run(CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock())))  # a new worker
        second = worker.pid
        assert second not in (None, first)
        # found dead between jobs: replaced, the job runs
        assert second is not None
        os.kill(second, signal.SIGKILL)
        _wait_for_exit_unreaped(second)
        stats, _ = worker.run(CleanJob.of(ltc, 0, Cleaner(1 << 20, clock=MockClock())))
        assert stats.messages_read > 0 and worker.pid not in (None, first, second)
    finally:
        worker.close()
    assert worker.pid is None


# -- the offset map -----------------------------------------------------------------------


def test_the_offset_map_keeps_the_latest_offset_per_key_and_stops_at_its_capacity():
    omap = SkimpyOffsetMap(24 * 10, load_factor=0.9)  # 10 slots, 9 keys
    assert (omap.slots, omap.capacity, omap.get(b"a")) == (10, 9, -1)
    for i in range(9):
        omap.put(b"k%d" % i, i)
    omap.put(b"k3", 100)  # an update takes no slot
    assert len(omap) == 9 and omap.full
    assert [omap.get(b"k%d" % i) for i in range(9)] == [0, 1, 2, 100, 4, 5, 6, 7, 8]
    assert omap.get(b"other") == -1 and omap.latest_offset == 100
    omap.put(b"k9", 9)  # the tenth slot (callers stop at capacity; the map holds its slots)
    with pytest.raises(ValueError):
        omap.put(b"k10", 10)
    omap.clear()
    assert (len(omap), omap.get(b"k3"), omap.latest_offset) == (0, -1, -1)


def test_the_offset_map_holds_its_keys_within_its_memory():
    """Kafka's bound: the map is ``log.cleaner.dedupe.buffer.size`` bytes whatever the
    keys (a dict of digests took about 140 bytes a key, 6x the budget)."""
    import tracemalloc

    memory = 24 * 200_000
    omap = SkimpyOffsetMap(memory)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(omap.capacity):
            omap.put(b"key-%d" % i, i)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(omap) == omap.capacity == 180_000
    assert peak <= memory + 64 * 1024, peak
    assert omap.get(b"key-0") == 0 and omap.get(b"key-179999") == 179_999
