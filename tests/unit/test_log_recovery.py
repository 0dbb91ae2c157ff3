"""Reopening a log after crashes and damage: torn tails, garbage, bad CRCs, lost indexes."""

from __future__ import annotations

import itertools
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit import logs
from tests.unit.logs import LOG_DIR, crash, open_log, read_all
from tidegate.log import Log, LogConfig, LogSegment
from tidegate.log.local_log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE

SRC = Path(__file__).resolve().parents[2] / "src"


def batch(ts: int = 1_000) -> bytearray:
    """This module's batch: two records of 40-byte values."""
    return logs.batch(2, ts=ts, size=40)


CFG = LogConfig(segment_bytes=len(batch()) * 4, index_interval_bytes=1)


def filled(tmp_path: Path, batches: int = 10, cfg: LogConfig = CFG) -> tuple[Log, list]:
    log = open_log(tmp_path, cfg)
    ranges = []
    for i in range(batches):
        info = log.append(batch(ts=1_000 * i), 0)
        ranges.append((info.first_offset, info.last_offset))
    return log, ranges


def seg_file(tmp_path: Path, base: int, suffix: str = ".log") -> Path:
    return tmp_path / LOG_DIR / f"{base:020d}{suffix}"


def assert_serves(log: Log, ranges: list) -> None:
    assert read_all(log) == ranges
    assert log.log_end_offset == (ranges[-1][1] + 1 if ranges else log.log_start_offset)
    next_offset = log.log_end_offset
    assert log.append(batch(), 0).first_offset == next_offset


# -- torn and damaged tails ------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 30, 61, 62])
def test_torn_tail_is_truncated(tmp_path, cut):
    log, ranges = filled(tmp_path)
    last_base = log.segments[-1].base_offset
    crash(log)
    path = seg_file(tmp_path, last_base)
    size = path.stat().st_size
    os.truncate(path, size - cut)
    again = open_log(tmp_path, CFG)
    assert not again.had_clean_shutdown
    assert path.stat().st_size == size - len(batch())
    assert again.recovered_truncated_bytes == len(batch()) - cut
    assert_serves(again, ranges[:-1])
    again.close()


@pytest.mark.parametrize("garbage", ["zeros", "random", "valid-looking"])
def test_garbage_after_the_last_batch_is_truncated(tmp_path, garbage):
    log, ranges = filled(tmp_path)
    last_base = log.segments[-1].base_offset
    crash(log)
    if garbage == "zeros":
        junk = bytes(4096)  # what a crash after a size update but before the data looks like
    elif garbage == "random":
        junk = random.Random(7).randbytes(500)
    else:  # a plausible header whose CRC does not match
        junk = bytearray(batch())
        struct.pack_into(">q", junk, 0, ranges[-1][1] + 1)
        junk[-5] ^= 0x40
    path = seg_file(tmp_path, last_base)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(junk)
    again = open_log(tmp_path, CFG)
    assert path.stat().st_size == size
    assert again.recovered_truncated_bytes == len(junk)
    assert_serves(again, ranges)
    again.close()


def test_flipped_byte_in_the_last_batch_drops_that_batch(tmp_path):
    log, ranges = filled(tmp_path)
    last_base = log.segments[-1].base_offset
    crash(log)
    path = seg_file(tmp_path, last_base)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(data)
    again = open_log(tmp_path, CFG)
    assert_serves(again, ranges[:-1])
    again.close()


def test_corruption_in_an_earlier_unflushed_segment_drops_everything_after_it(tmp_path):
    log, ranges = filled(tmp_path, batches=12)  # 3 segments of 4 batches
    bases = [s.base_offset for s in log.segments]
    assert len(bases) == 3
    crash(log)
    path = seg_file(tmp_path, bases[1])
    data = bytearray(path.read_bytes())
    second_batch = len(batch())
    data[second_batch + 40] ^= 0xFF  # inside the 2nd batch of the middle segment
    path.write_bytes(data)
    again = open_log(tmp_path, CFG)
    assert [s.base_offset for s in again.segments] == bases[:2]
    assert not seg_file(tmp_path, bases[2]).exists()
    assert_serves(again, ranges[:5])
    again.close()


def test_offsets_going_backwards_are_treated_as_corruption(tmp_path):
    # baseOffset is outside the CRC: a damaged one can only be caught by ordering.
    log, ranges = filled(tmp_path, batches=3)
    crash(log)
    path = seg_file(tmp_path, 0)
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, 2 * len(batch()), 1)  # 3rd batch claims offset 1
    path.write_bytes(data)
    again = open_log(tmp_path, CFG)
    assert_serves(again, ranges[:2])
    again.close()


def test_a_crash_after_a_clean_open_still_recovers(tmp_path):
    log, ranges = filled(tmp_path)
    log.close()
    again = open_log(tmp_path, CFG)
    assert again.had_clean_shutdown
    assert not (tmp_path / LOG_DIR / CLEAN_SHUTDOWN_FILE).exists()
    again.append(batch(), 0)
    last_base = again.segments[-1].base_offset
    crash(again)
    path = seg_file(tmp_path, last_base)
    os.truncate(path, path.stat().st_size - 10)
    third = open_log(tmp_path, CFG)
    assert not third.had_clean_shutdown
    assert_serves(third, ranges)
    third.close()


def test_recovery_starts_at_the_recovery_point(tmp_path, monkeypatch):
    log, _ranges = filled(tmp_path, batches=12)
    log.flush(up_to=6)  # offsets < 6 fsynced: segment 0 (0..7) holds the recovery point
    bases = [s.base_offset for s in log.segments]
    crash(log)
    recovered = []
    original = LogSegment.recover

    def spy(self, epoch_cache=None):
        recovered.append(self.base_offset)
        return original(self, epoch_cache)

    monkeypatch.setattr(LogSegment, "recover", spy)
    open_log(tmp_path, CFG).close()
    assert recovered == bases  # the segment holding the recovery point and all after it
    recovered.clear()
    again = open_log(tmp_path, CFG)  # clean shutdown: nothing to recover
    assert recovered == []
    again.append(batch(), 0)  # rolls: the segments were full
    again.flush()
    again.append(batch(), 0)
    last_base = again.segments[-1].base_offset
    assert last_base not in bases
    crash(again)
    open_log(tmp_path, CFG).close()
    assert recovered == [last_base]


def test_a_lost_recovery_point_checkpoint_means_full_recovery(tmp_path, monkeypatch):
    log, ranges = filled(tmp_path)
    log.flush()
    crash(log)
    (tmp_path / LOG_DIR / RECOVERY_POINT_FILE).write_text("garbage")
    recovered = []
    original = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover",
        lambda self, cache=None: recovered.append(self.base_offset) or original(self, cache),
    )
    again = open_log(tmp_path, CFG)
    assert len(recovered) == len(again.segments) == 3
    assert again.recovery_point == 0
    assert_serves(again, ranges)
    again.close()


def test_lost_tail_below_a_checkpointed_log_start_offset(tmp_path):
    log, _ranges = filled(tmp_path, batches=2)
    crash(log)
    # e.g. DeleteRecords up to the old end, in the log directory's checkpoint
    again = open_log(tmp_path, CFG, log_start_offset=50)
    assert (again.log_start_offset, again.log_end_offset) == (50, 50)
    assert again.append(batch(), 0).first_offset == 50
    again.close()


# -- indexes --------------------------------------------------------------------------


def index_snapshot(log: Log) -> list:
    return [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments]


@pytest.mark.parametrize("suffix", [".index", ".timeindex", "both"])
def test_deleted_indexes_are_rebuilt(tmp_path, suffix):
    log, ranges = filled(tmp_path)
    log.close()
    reopened = open_log(tmp_path, CFG)
    before = index_snapshot(reopened)
    reopened.close()
    bases = [s.base_offset for s in log.segments]
    for s in (".index", ".timeindex") if suffix == "both" else (suffix,):
        for base in bases:
            seg_file(tmp_path, base, s).unlink()
    (tmp_path / LOG_DIR / CLEAN_SHUTDOWN_FILE).touch()  # even after a clean shutdown
    again = open_log(tmp_path, CFG)
    assert index_snapshot(again) == before
    assert all(seg_file(tmp_path, b, ".index").exists() for b in bases)
    assert_serves(again, ranges)
    again.close()


def test_truncated_index_file_is_rebuilt(tmp_path):
    log, ranges = filled(tmp_path)
    log.close()
    path = seg_file(tmp_path, 8, ".index")
    good = path.read_bytes()
    path.write_bytes(good[:-3])
    tpath = seg_file(tmp_path, 0, ".timeindex")
    tpath.write_bytes(tpath.read_bytes()[:-1])
    again = open_log(tmp_path, CFG)
    assert path.read_bytes() == good
    assert seg_file(tmp_path, 8, ".index").stat().st_size % 8 == 0
    assert_serves(again, ranges)
    again.close()


@pytest.mark.parametrize("damage", ["beyond-log", "not-increasing", "wrong-target", "time-ahead"])
def test_implausible_indexes_are_rebuilt(tmp_path, damage):
    log, ranges = filled(tmp_path)
    log.close()
    path = seg_file(tmp_path, 8, ".index")
    good = path.read_bytes()
    entries = list(struct.iter_unpack(">ii", good))
    if damage == "beyond-log":
        bad = good + struct.pack(">ii", 100, 1 << 20)
    elif damage == "not-increasing":
        bad = b"".join(struct.pack(">ii", *e) for e in reversed(entries))
    elif damage == "wrong-target":  # last entry points at a batch with another offset
        rel, pos = entries[-1]
        bad = good[:-8] + struct.pack(">ii", rel + 1, pos)
    else:
        tpath = seg_file(tmp_path, 8, ".timeindex")
        tpath.write_bytes(tpath.read_bytes() + struct.pack(">qi", 1 << 50, 1_000))
        bad = good
    path.write_bytes(bad)
    again = open_log(tmp_path, CFG)
    assert path.read_bytes() == good
    assert_serves(again, ranges)
    again.close()


def test_active_segment_index_check(tmp_path):
    log, ranges = filled(tmp_path, batches=10)
    log.close()
    path = seg_file(tmp_path, 16, ".index")
    good = path.read_bytes()
    rel, pos = struct.unpack(">ii", good[-8:])
    path.write_bytes(good[:-8] + struct.pack(">ii", rel, pos + 1))  # off by one byte
    again = open_log(tmp_path, CFG)
    assert path.read_bytes() == good
    assert_serves(again, ranges)
    again.close()


def test_stray_files_are_cleaned_up(tmp_path):
    log, ranges = filled(tmp_path, batches=2)
    log.close()
    d = tmp_path / LOG_DIR
    (d / f"{RECOVERY_POINT_FILE}.tmp-123-4-5").write_text("0\n999\n")
    (d / f"{123:020d}.index").write_bytes(b"")
    again = open_log(tmp_path, CFG)
    assert not (d / f"{RECOVERY_POINT_FILE}.tmp-123-4-5").exists()
    assert not (d / f"{123:020d}.index").exists()
    assert_serves(again, ranges)
    again.close()


# -- a real kill -9 ------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tidegate.log import Log, LogConfig
    from tidegate.record.batch_builder import Record, build_batch
    log = Log(Path(sys.argv[1]), LogConfig(segment_bytes=20_000, index_interval_bytes=300), 0)
    i = 0
    while True:
        recs = [Record(b"x" * (i % 200), key=b"%d" % i, timestamp=i + j) for j in range(1 + i % 5)]
        info = log.append(build_batch(recs), i)
        print(info.last_offset, flush=True)
        i += 1
    """
)


def test_kill_9_during_appends(tmp_path):
    d = tmp_path / LOG_DIR
    env = dict(os.environ, PYTHONPATH=str(SRC))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, env=env, text=True
    )
    acked = -1
    try:
        for line in child.stdout:
            acked = int(line)
            if acked >= 3_000:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert acked >= 3_000
    log = Log(d, LogConfig(segment_bytes=20_000, index_interval_bytes=300), 0)
    assert not log.had_clean_shutdown
    assert log.log_end_offset > acked  # the page cache survives a process crash
    ranges = read_all(log)  # every batch CRC-valid...
    assert ranges[0][0] == 0 and ranges[-1][1] + 1 == log.log_end_offset
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))  # ...contiguous
    assert len(log.segments) > 5
    assert log.append(batch(), 0).first_offset == log.log_end_offset - 2
    log.close()


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_open_descriptors_stay_about_one_per_segment(tmp_path):
    log, ranges = filled(tmp_path, batches=40)  # 10 segments
    crash(log)
    assert not (tmp_path / LOG_DIR / RECOVERY_POINT_FILE).exists()  # full recovery: all rebuilt
    before = len(os.listdir("/proc/self/fd"))
    again = open_log(tmp_path, CFG)
    opened = len(os.listdir("/proc/self/fd")) - before
    # one per segment log file, the directory, and the active segment's two indexes
    assert opened <= len(again.segments) + 3
    assert_serves(again, ranges)
    again.close()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_index_files_open_lazily_so_many_partitions_hold_two_descriptors_each(tmp_path):
    """Kafka's LazyIndex: a new partition's empty index, time index and transaction index
    are created and synced, then closed; a write reopens them and a flush closes them
    again. 200 partitions hold their segment log and directory open, nothing more."""
    before = len(os.listdir("/proc/self/fd"))
    parts = [Log(tmp_path / f"t-{i}", CFG, 0) for i in range(200)]
    assert len(os.listdir("/proc/self/fd")) - before == 2 * len(parts)
    log = parts[7]
    ranges = []
    for i in range(3):  # every batch gets an index entry (index_interval_bytes=1)
        info = log.append(batch(ts=10_000 + 100 * i), 0)
        ranges.append((info.first_offset, info.last_offset))
    assert len(os.listdir("/proc/self/fd")) - before > 2 * len(parts)  # reopened to write
    log.flush()
    assert len(os.listdir("/proc/self/fd")) - before == 2 * len(parts)
    # reads after the lazy reopen and close: the index and time index answer
    assert read_all(log) == ranges
    assert log.offset_for_timestamp(10_100).offset == ranges[1][0]
    for p in parts:
        p.close()
    reopened = Log(tmp_path / "t-7", CFG, 0)
    assert read_all(reopened) == ranges
    assert reopened.offset_for_timestamp(10_200).offset == ranges[2][0]
    reopened.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_dropped_flush_ticket_closes_its_descriptors(tmp_path):
    log, _ = filled(tmp_path, batches=3)
    before = len(os.listdir("/proc/self/fd"))
    ticket = log.begin_flush()
    assert len(os.listdir("/proc/self/fd")) > before
    del ticket
    assert len(os.listdir("/proc/self/fd")) == before
    log.close()
