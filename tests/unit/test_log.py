"""The partition log: append/read, rolling, indexes, retention, timestamps, flushing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from tests.unit.logs import LOG_DIR, batch, open_log, read_all
from tidegate.log import Log, LogClosedError, LogConfig, OffsetOutOfRangeError
from tidegate.log.local_log import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    parse_partition_dir,
    partition_dir,
)
from tidegate.log.segment import TimestampAndOffset
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
    iter_batches,
    read_header,
)

HOUR = 3_600_000


def batch_ranges(data) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in ``data``."""
    return [
        (read_header(data, p).base_offset, read_header(data, p).last_offset)
        for p, _ in iter_batches(data)
    ]


def checkpoint(log_dir: Path, name: str) -> int:
    version, value = (log_dir / name).read_text().split()
    assert version == "0"
    return int(value)


# -- append and read ----------------------------------------------------------------


def test_append_assigns_offsets_and_read_returns_the_same_bytes(tmp_path):
    log = open_log(tmp_path)
    a, b = batch(3), batch(2)
    info_a = log.append(a, 10)
    info_b = log.append(b, 11)
    assert (info_a.first_offset, info_a.last_offset, info_a.num_records) == (0, 2, 3)
    assert (info_b.first_offset, info_b.last_offset) == (3, 4)
    assert info_a.log_append_time_ms == -1 and info_a.max_timestamp == 1_002
    assert log.log_end_offset == log.high_watermark == 5
    data = log.read(0, 1 << 20)
    assert bytes(data) == bytes(a) + bytes(b)  # a and b were rewritten in place
    decoded = []
    mr = MemoryRecords(bytes(data))
    while (bt := mr.next_batch()) is not None:
        assert bt.validate_crc()
        decoded += [r.offset for r in bt]
    assert decoded == [0, 1, 2, 3, 4]
    log.close()


def test_append_accepts_bytes_and_stamps_the_leader_epoch(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(), 0, leader_epoch=7)
    log.append(bytes(batch(2)), 0)
    assert read_header(log.read(0, 1000)).partition_leader_epoch == 7
    log.close()


def test_read_from_the_middle_of_a_batch_returns_that_whole_batch(tmp_path):
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(batch(5), 0)
    data = log.read(7, 1 << 20)
    assert batch_ranges(data)[0] == (5, 9)
    assert batch_ranges(log.read(9, 1 << 20))[0] == (5, 9)
    assert batch_ranges(log.read(10, 1 << 20))[0] == (10, 14)
    log.close()


def test_read_at_the_log_end_is_empty_and_beyond_is_out_of_range(tmp_path):
    log = open_log(tmp_path)
    assert log.read(0, 100) == b""  # empty log
    log.append(batch(2), 0)
    assert log.read(2, 100) == b""
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(3, 100)
    assert e.value.error_code == 1
    assert (e.value.log_start_offset, e.value.log_end_offset) == (0, 2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_read_returns_whole_batches_within_max_bytes(tmp_path):
    log = open_log(tmp_path)
    sizes = []
    for _ in range(5):
        b = batch(2, size=100)
        sizes.append(len(b))
        log.append(b, 0)
    data = log.read(0, sizes[0] + sizes[1] + 10)
    assert len(data) == sizes[0] + sizes[1]
    assert batch_ranges(data) == [(0, 1), (2, 3)]
    assert len(log.read(0, sum(sizes))) == sum(sizes)


def test_first_batch_is_returned_even_when_larger_than_max_bytes(tmp_path):
    log = open_log(tmp_path)
    big = batch(3, size=5_000)
    log.append(big, 0)
    log.append(batch(1), 0)
    data = log.read(1, 100)
    assert len(data) == len(big) and batch_ranges(data) == [(0, 2)]
    assert log.read(1, 100, min_one_batch=False) == b""


def test_validation_errors_write_nothing(tmp_path):
    log = open_log(tmp_path, max_message_bytes=500)
    log.append(batch(1), 0)
    size = log.size_bytes
    bad_crc = batch(1)
    bad_crc[-1] ^= 1
    legacy = batch(1)
    legacy[16] = 1
    good_then_torn = batch(1) + batch(1)[:-3]
    cases = [
        (bad_crc, CorruptRecordError),
        (legacy, UnsupportedForMessageFormatError),
        (batch(1, size=1_000), RecordTooLargeError),
        (good_then_torn, CorruptRecordError),
        (build_batch([Record(b"x")], base_offset=3), InvalidRecordError),
    ]
    for records, exc in cases:
        with pytest.raises(exc):
            log.append(records, 0)
        assert log.log_end_offset == 1
        assert log.size_bytes == size
    log.close()


def test_log_append_time_topic(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(batch(3, ts=5), now_ms=123_456)
    assert info.log_append_time_ms == 123_456 and info.max_timestamp == 123_456
    h = read_header(log.read(0, 1000))
    assert h.timestamp_type == 1 and h.max_timestamp == 123_456
    assert log.offset_for_timestamp(100_000) == TimestampAndOffset(123_456, 0, 0)
    log.close()


def test_closed_log_refuses_work(tmp_path):
    log = open_log(tmp_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append(batch(), 0)
    with pytest.raises(LogClosedError):
        log.read(0, 10)


# -- segments and indexes ------------------------------------------------------------------


def test_roll_at_segment_bytes(tmp_path):
    one = len(batch(1, size=100))
    log = open_log(tmp_path, segment_bytes=one * 3, index_interval_bytes=1)
    for _ in range(10):
        log.append(batch(1, size=100), 0)
    segs = log.segments
    assert [s.base_offset for s in segs] == [0, 3, 6, 9]
    assert all(s.size <= one * 3 for s in segs)
    assert [s.next_offset for s in segs] == [3, 6, 9, 10]
    names = sorted(p.name for p in (tmp_path / LOG_DIR).glob("*.log"))
    assert names == [f"{b:020d}.log" for b in (0, 3, 6, 9)]
    assert {p.suffix for p in (tmp_path / LOG_DIR).iterdir()} >= {".log", ".index", ".timeindex"}
    assert read_all(log) == [(i, i) for i in range(10)]
    log.close()


def test_oversized_batch_gets_its_own_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    log.append(batch(1, size=10), 0)
    log.append(batch(1, size=1_000), 0)
    log.append(batch(1, size=10), 0)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]


def test_roll_by_segment_ms_uses_message_timestamps(tmp_path):
    log = open_log(tmp_path, segment_ms=HOUR)
    log.append(batch(1, ts=0), now_ms=0)
    log.append(batch(1, ts=HOUR), now_ms=HOUR)  # exactly segment.ms later: no roll
    assert len(log.segments) == 1
    log.append(batch(1, ts=HOUR + 1), now_ms=HOUR + 1)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_segment_ms_uses_the_clock_without_timestamps(tmp_path):
    log = open_log(tmp_path, now=10_000, segment_ms=1_000)  # the segment's creation time
    log.append(batch(1, ts=-1), now_ms=10_000)
    log.append(batch(1, ts=-1), now_ms=11_000)
    assert len(log.segments) == 1
    log.append(batch(1, ts=-1), now_ms=11_001)
    assert len(log.segments) == 2


def test_index_lookups_after_many_appends(tmp_path):
    log = open_log(tmp_path, segment_bytes=20_000, index_interval_bytes=500)
    expected = []
    for i in range(400):
        n = 1 + i % 4
        info = log.append(batch(n, ts=i * 10, size=30 + i % 50), 0)
        expected.append((info.first_offset, info.last_offset))
    assert len(log.segments) > 3
    for seg in log.segments:
        entries = seg.offset_index.entries()
        assert len(entries) > 5
        for offset, pos in entries:  # every entry points at the batch ending at its offset
            h = read_header(log.read(offset, 1))
            assert h.last_offset == offset
            assert seg.find_batch(offset)[0] == pos
    for first, last in expected:
        for off in {first, (first + last) // 2, last}:
            assert batch_ranges(log.read(off, 1))[0] == (first, last)
    assert read_all(log) == expected
    log.close()


# -- retention --------------------------------------------------------------------------


def fill_segments(log: Log, count: int, ts_step: int = HOUR) -> None:
    """Append one batch per segment (segment_bytes must fit a single batch)."""
    for i in range(count):
        log.append(batch(2, ts=i * ts_step), now_ms=i * ts_step)


def test_retention_by_time_deletes_old_segments_and_persists(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=10 * HOUR)
    fill_segments(log, 6)  # segment i holds timestamps i*HOUR .. i*HOUR+1
    assert len(log.segments) == 6
    now = 13 * HOUR  # segments 0..2 are more than 10h old, segment 3 is 10h - 1ms old
    assert log.apply_retention(now) == 3
    assert log.log_start_offset == 6
    assert [s.base_offset for s in log.segments] == [6, 8, 10]
    assert not (tmp_path / LOG_DIR / f"{0:020d}.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    assert batch_ranges(log.read(6, 100))[0] == (6, 7)
    assert log.apply_retention(now) == 0
    log.close()
    again = open_log(tmp_path)
    assert again.log_start_offset == 6 and again.log_end_offset == 12
    assert read_all(again) == [(6, 7), (8, 9), (10, 11)]
    again.close()


def test_retention_rolls_and_empties_a_fully_expired_log(tmp_path):
    log = open_log(tmp_path, retention_ms=HOUR)
    log.append(batch(3, ts=0), 0)
    assert log.apply_retention(HOUR + 10) == 1
    assert log.log_start_offset == log.log_end_offset == 3
    assert [s.base_offset for s in log.segments] == [3]
    assert log.read(3, 100) == b""
    info = log.append(batch(1, ts=HOUR + 10), HOUR + 10)
    assert info.first_offset == 3
    assert log.apply_retention(HOUR + 20) == 0
    log.close()
    again = open_log(tmp_path)
    assert (again.log_start_offset, again.log_end_offset) == (3, 4)
    again.close()


def test_retention_by_size(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one, retention_bytes=one * 3 + one // 2)
    fill_segments(log, 6)
    # 6 segments of `one` bytes; deleting k keeps 6-k: deletable while size - k*one >= limit
    assert log.apply_retention(0) == 2
    assert log.size_bytes == one * 4
    assert log.log_start_offset == 4
    assert log.apply_retention(0) == 0  # 4*one - one < limit: Kafka keeps it
    log.close()
    again = open_log(tmp_path)
    assert again.log_start_offset == 4
    again.close()


def test_retention_disabled(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=-1, retention_bytes=-1)
    fill_segments(log, 4)
    assert log.apply_retention(10**15) == 0
    assert log.log_start_offset == 0


def test_delete_records_moves_the_log_start_offset(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=-1)
    fill_segments(log, 4)
    assert log.increment_log_start_offset(5, 0) == 5
    assert [s.base_offset for s in log.segments] == [4, 6]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert batch_ranges(log.read(5, 100)) == [(4, 5)]  # the batch containing 5
    # the first record at or after the start, not the batch holding it
    assert log.offset_for_timestamp(0) == TimestampAndOffset(2 * HOUR + 1, 5, 0)
    assert log.offset_for_timestamp(-2) == TimestampAndOffset(-1, 5, 0)
    assert log.leader_epoch_cache.entries == [(0, 5)]  # trimmed to the new start
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(9, 0)  # above the high watermark (8)
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(-3, 0)
    assert log.increment_log_start_offset(3, 0) == 5  # never moves back
    assert log.increment_log_start_offset(8, 0) == 8  # up to the high watermark: all records
    assert [s.base_offset for s in log.segments] == [6]  # the last segment stays
    log.close()
    # The start offset comes back from the log directory's checkpoint (the LogManager
    # reads it); without it, from the first segment.
    again = open_log(tmp_path, log_start_offset=8)
    assert (again.log_start_offset, again.log_end_offset) == (8, 8)
    again.close()
    again = open_log(tmp_path)
    assert again.log_start_offset == 6
    again.close()


# -- timestamps ---------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    starts = {}
    for i in range(30):
        info = log.append(batch(3, ts=1_000 * i), 0)  # timestamps 1000i .. 1000i+2
        starts[i] = info.first_offset
    # equal batches, as many to a segment as fit in 400 bytes
    per_segment = 400 // len(batch(3))
    assert len(log.segments) == -(-30 // per_segment) > 2
    # exact to the record: (the record's timestamp, its offset, its batch's leader epoch)
    assert log.offset_for_timestamp(0) == TimestampAndOffset(0, 0, 0)
    assert log.offset_for_timestamp(1_000) == TimestampAndOffset(1_000, starts[1], 0)
    assert log.offset_for_timestamp(1_002) == TimestampAndOffset(1_002, starts[1] + 2, 0)
    assert log.offset_for_timestamp(1_003) == TimestampAndOffset(2_000, starts[2], 0)
    assert log.offset_for_timestamp(17_500) == TimestampAndOffset(18_000, starts[18], 0)
    assert log.offset_for_timestamp(29_002) == TimestampAndOffset(29_002, starts[29] + 2, 0)
    assert log.offset_for_timestamp(29_003) is None
    assert log.offset_for_timestamp(-1) == TimestampAndOffset(-1, 90, 0)
    assert log.offset_for_timestamp(-2) == TimestampAndOffset(-1, 0, 0)
    assert log.max_timestamp_offset() == TimestampAndOffset(29_002, starts[29] + 2, 0)
    log.close()
    again = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    assert again.offset_for_timestamp(17_500) == TimestampAndOffset(18_000, starts[18], 0)
    assert again.max_timestamp_offset() == TimestampAndOffset(29_002, starts[29] + 2, 0)
    again.close()


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=1)
    for ts in (500, 100, 900, 300, 950):
        log.append(batch(1, ts=ts), 0)
    assert log.offset_for_timestamp(200) == TimestampAndOffset(500, 0, 0)
    assert log.offset_for_timestamp(600) == TimestampAndOffset(900, 2, 0)
    assert log.offset_for_timestamp(920) == TimestampAndOffset(950, 4, 0)
    assert log.max_timestamp_offset() == TimestampAndOffset(950, 4, 0)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_timestamps_inside_one_batch_are_exact(tmp_path, codec):
    """The issue's case: records stamped 100, 400, 200 in one batch (offsets 0-2):
    MAX_TIMESTAMP is offset 1 and so is "the first at or after 150", not the batch's base
    offset; compressed batches are read the same way."""
    log = open_log(tmp_path)
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for ts in (100, 400, 200):
        builder.append(timestamp=ts, key=b"k", value=b"v" * 50, headers=[])
    builder.close()
    log.append(bytearray(builder.buffer()), 0)
    assert log.max_timestamp_offset() == TimestampAndOffset(400, 1, 0)
    assert log.offset_for_timestamp(150) == TimestampAndOffset(400, 1, 0)
    assert log.offset_for_timestamp(100) == TimestampAndOffset(100, 0, 0)
    assert log.offset_for_timestamp(300) == TimestampAndOffset(400, 1, 0)
    assert log.offset_for_timestamp(401) is None
    # a LogAppendTime batch: every record carries the batch's time, the first one answers
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime"))
    log.append(batch(3, ts=10), 7_000)
    assert log.max_timestamp_offset() == TimestampAndOffset(7_000, 3, 0)
    assert log.offset_for_timestamp(6_999) == TimestampAndOffset(7_000, 3, 0)


def test_max_timestamp_offset_on_an_empty_log(tmp_path):
    log = open_log(tmp_path)
    assert log.max_timestamp_offset() is None
    assert log.offset_for_timestamp(0) is None


# -- flushing -------------------------------------------------------------------------


def test_flush_advances_the_recovery_point_and_the_timer_checkpoints_it(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(3), 0)
    assert log.recovery_point == 0 and log.unflushed_messages == 3
    log.flush()
    assert log.recovery_point == log.flushed_offset == 3
    # The flush itself does not rewrite the checkpoint file (Kafka writes it on
    # log.flush.offset.checkpoint.interval.ms); the periodic checkpoint does.
    assert not (tmp_path / LOG_DIR / RECOVERY_POINT_FILE).exists()  # none written yet
    ticket = log.checkpoint_recovery_point()
    assert ticket is not None and ticket.value == 3
    ticket.run()
    assert checkpoint(tmp_path / LOG_DIR, RECOVERY_POINT_FILE) == 3
    assert log.checkpoint_recovery_point() is None  # unchanged since: nothing to write
    log.append(batch(2), 0)
    log.flush(up_to=4)
    assert log.recovery_point == 4
    log.checkpoint_recovery_point().run()
    assert checkpoint(tmp_path / LOG_DIR, RECOVERY_POINT_FILE) == 4
    log.close()


def test_flush_messages_triggers_a_flush_on_append(tmp_path):
    log = open_log(tmp_path, flush_messages=5)
    log.append(batch(3), 0)
    assert log.recovery_point == 0
    log.append(batch(2), 0)
    assert log.recovery_point == 5
    log.append(batch(4), 0, auto_flush=False)
    assert log.recovery_point == 5 and not log.flush_due(0)
    log.append(batch(1), 0, auto_flush=False)
    assert log.flush_due(0)


def test_maybe_flush_by_time(tmp_path):
    log = open_log(tmp_path, now=0, flush_ms=1_000)
    log.append(batch(1), 10)
    assert not log.maybe_flush_by_time(999)
    assert log.maybe_flush_by_time(1_000)
    assert log.recovery_point == 1
    assert not log.maybe_flush_by_time(5_000)  # nothing unflushed
    log.append(batch(1), 5_000)
    # Kafka counts flush.ms from the last flush (at 1000), not from the append.
    assert log.maybe_flush_by_time(5_000)
    log.append(batch(1), 5_100)
    assert not log.maybe_flush_by_time(5_999)
    assert log.maybe_flush_by_time(6_000)
    assert log.recovery_point == 3


def test_split_flush_survives_a_roll_and_a_deletion_in_between(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=HOUR)
    log.append(batch(2, ts=0), 0)
    log.append(batch(2, ts=0), 0)
    ticket = log.begin_flush()
    assert ticket.target_offset == 4 and ticket.fds
    # Meanwhile: a roll, and retention deletes the segments the ticket covers.
    log.append(batch(2, ts=10 * HOUR), 10 * HOUR)
    assert log.apply_retention(10 * HOUR) == 2
    worker = threading.Thread(target=ticket.run)
    worker.start()
    worker.join()
    assert ticket.synced and ticket.fds == []
    assert log.complete_flush(ticket)
    assert log.recovery_point == 4  # not the 6 the log has reached since
    log.flush()
    assert log.recovery_point == 6
    log.close()


def test_complete_flush_ignores_tickets_that_did_not_run_or_went_stale(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(3), 0)
    t = log.begin_flush()
    assert not log.complete_flush(t)
    t.discard()
    assert log.recovery_point == 0
    log.append(batch(3), 0)
    stale = log.begin_flush()
    log.truncate_to(3, 0)
    stale.run()
    assert stale.synced and not log.complete_flush(stale)
    assert log.recovery_point == 0
    log.close()


def test_an_empty_flush_is_harmless(tmp_path):
    log = open_log(tmp_path)
    t = log.begin_flush()
    t.run()
    assert log.complete_flush(t)
    assert log.recovery_point == 0


# -- truncation, close, delete -----------------------------------------------------------


def test_truncate_to_removes_whole_batches(tmp_path):
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=one * 2, index_interval_bytes=1)
    for _ in range(6):
        log.append(batch(2), 0)
    log.flush()
    assert log.truncate_to(7, 0) == 6  # the batch holding 6..7 goes whole
    assert read_all(log) == [(0, 1), (2, 3), (4, 5)]
    assert log.recovery_point == 6
    assert log.append(batch(1), 0).first_offset == 6
    assert log.truncate_to(100, 0) == 7  # beyond the end: nothing to do
    assert log.truncate_to(0, 0) == 0
    assert read_all(log) == []
    assert log.append(batch(1), 0).first_offset == 0
    log.close()


def test_close_writes_a_clean_shutdown_marker_that_open_consumes(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), 0)
    log.close()
    d = tmp_path / LOG_DIR
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert checkpoint(d, RECOVERY_POINT_FILE) == 2
    again = open_log(tmp_path)
    assert again.had_clean_shutdown
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert again.recovery_point == 2
    assert again.append(batch(1), 0).first_offset == 2
    again.close()


def test_delete_removes_the_directory(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), 0)
    log.delete()
    assert not (tmp_path / LOG_DIR).exists()
    assert log.closed


def test_partition_dir_names():
    assert partition_dir(Path("/data"), "my-topic", 3) == Path("/data/my-topic-3")
    assert parse_partition_dir("my-topic-3") == ("my-topic", 3)
    with pytest.raises(ValueError):
        parse_partition_dir("nodash")
