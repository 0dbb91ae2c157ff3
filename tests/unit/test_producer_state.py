"""Idempotent producer state: Kafka's ProducerStateManager rules, snapshots, and the
log keeping it across appends, restarts (clean and kill -9), truncation and retention."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.logs import LOG_DIR, PID, batch_headers, crash, open_log, pbatch
from tidegate.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from tidegate.log import Log, LogConfig
from tidegate.log.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import read_header as header_of
from tidegate.utils import INT32_MAX

SRC = Path(__file__).resolve().parents[2] / "src"


def hdr(seq: int, n: int = 1, **kw):
    return header_of(pbatch(seq, n, **kw))


# -- the rules, on the manager alone ------------------------------------------------------


def append(psm: ProducerStateManager, leo: int, *batches) -> tuple[int, object]:
    """prepare + commit as the log does; returns (new log end offset, prepared)."""
    headers = [header_of(b) for b in batches]
    prepared = psm.prepare(headers, leo, None)
    assert prepared is not None and prepared.duplicate is None
    psm.commit(prepared)
    return leo + sum(h.last_offset_delta + 1 for h in headers), prepared


def test_batches_without_a_producer_id_are_not_tracked(tmp_path):
    psm = ProducerStateManager(tmp_path)
    assert psm.prepare([header_of(build_batch([Record(b"x")]))], 0, None) is None
    assert len(psm) == 0


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path):
    # Kafka since KIP-360 (2.5): no state means nothing to check against (expired or new).
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pbatch(42, 3))
    e = psm.entry(PID)
    assert (e.producer_epoch, e.last_seq, e.last_data_offset) == (0, 44, 2)


def test_in_sequence_batches_are_accepted_and_cached(tmp_path):
    psm = ProducerStateManager(tmp_path)
    leo = 0
    for seq in range(0, 20, 2):
        leo, _ = append(psm, leo, pbatch(seq, 2))
    e = psm.entry(PID)
    assert e.last_seq == 19 and e.last_data_offset == 19
    assert len(e.batches) == NUM_BATCHES_TO_RETAIN
    b = e.batches[0]
    assert (b.first_seq, b.last_seq, b.first_offset) == (10, 11, 10)


@pytest.mark.parametrize("seq", [6, 7, 100, 4, 0])
def test_a_gap_or_step_back_is_out_of_order(tmp_path, seq):
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pbatch(0, 5))  # 0..4 written; 5 is next
    with pytest.raises(OutOfOrderSequenceError) as exc:
        psm.prepare([hdr(seq, 2 if seq == 4 else 1)], 5, None)
    assert exc.value.code == 45
    assert psm.entry(PID).last_seq == 4  # prepare changed nothing


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(tmp_path):
    psm = ProducerStateManager(tmp_path)
    leo = 0
    originals = []
    for i in range(7):  # sequence ranges 0-2, 3-5, ..., offsets shifted by other writers
        b = pbatch(3 * i, 3)
        originals.append((3 * i, leo + 10))
        leo, _ = append(psm, leo + 10, b)
    for seq, offset in originals[-NUM_BATCHES_TO_RETAIN:]:
        prepared = psm.prepare([hdr(seq, 3)], leo, None)
        dup = prepared.duplicate
        assert dup is not None
        assert (dup.first_offset, dup.last_offset) == (offset, offset + 2)
        assert (dup.first_seq, dup.last_seq) == (seq, seq + 2)
    # Older than the cache: not recognisable any more, so (as Kafka) out of order.
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([hdr(originals[0][0], 3)], leo, None)
    # A different range overlapping a cached batch is not a duplicate either.
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([hdr(originals[-1][0], 2)], leo, None)


def test_a_duplicate_needs_the_same_epoch(tmp_path):
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pbatch(0, 2, epoch=3))
    assert psm.prepare([hdr(0, 2, epoch=3)], 2, None).duplicate is not None
    # the same range under a newer epoch is new data (a new epoch starts at 0)
    prepared = psm.prepare([hdr(0, 2, epoch=4)], 2, None)
    assert prepared.duplicate is None


def test_an_older_epoch_is_fenced(tmp_path):
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pbatch(0, 1, epoch=5))
    for seq in (0, 1, 7):
        with pytest.raises(InvalidProducerEpochError) as exc:
            psm.prepare([hdr(seq, epoch=4)], 1, None)
        assert exc.value.code == 47


def test_a_newer_epoch_must_restart_at_zero_and_clears_the_cache(tmp_path):
    psm = ProducerStateManager(tmp_path)
    leo, _ = append(psm, 0, pbatch(0, 3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([hdr(3, epoch=1)], leo, None)
    leo, _ = append(psm, leo, pbatch(0, 2, epoch=1))
    e = psm.entry(PID)
    assert e.producer_epoch == 1 and len(e.batches) == 1 and e.last_seq == 1
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare([hdr(3, epoch=0)], leo, None)  # the old epoch is fenced now


def test_sequences_wrap_at_int32_max(tmp_path):
    psm = ProducerStateManager(tmp_path)
    leo, _ = append(psm, 0, pbatch(INT32_MAX - 1, 2))  # ends at INT32_MAX
    assert psm.entry(PID).last_seq == INT32_MAX
    leo, _ = append(psm, leo, pbatch(0, 2))
    # a batch crossing the wrap: 2**31-1 then 0
    psm2 = ProducerStateManager(tmp_path / "x")
    leo2, _ = append(psm2, 0, pbatch(INT32_MAX, 3))
    e = psm2.entry(PID)
    assert e.last_seq == 1 and e.batches[-1].first_seq == INT32_MAX
    assert psm2.prepare([hdr(INT32_MAX, 3)], leo2, None).duplicate is not None
    append(psm2, leo2, pbatch(2))


def test_batches_of_one_append_are_checked_against_each_other(tmp_path):
    psm = ProducerStateManager(tmp_path)
    headers = [hdr(0, 2), hdr(2, 2), hdr(4, 1, pid=7, epoch=2)]
    prepared = psm.prepare(headers, 100, None)
    assert len(psm) == 0  # nothing until commit
    psm.commit(prepared)
    assert psm.entry(PID).last_seq == 3 and psm.entry(PID).last_data_offset == 103
    assert psm.entry(7).producer_epoch == 2 and psm.entry(7).last_data_offset == 104
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare([hdr(4, 1), hdr(6, 1)], 105, None)  # second one skips 5
    assert psm.entry(PID).last_seq == 3


def test_log_append_time_is_what_the_cache_remembers(tmp_path):
    psm = ProducerStateManager(tmp_path)
    psm.commit(psm.prepare([hdr(0, ts=5)], 0, 99_999))
    assert psm.entry(PID).batches[-1].timestamp == 99_999
    assert psm.entry(PID).last_timestamp == 99_999


def test_expiration_measures_from_the_last_batch_timestamp(tmp_path):
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pbatch(0, ts=1_000), pbatch(0, pid=2, ts=5_000))
    assert psm.remove_expired(now_ms=5_999, expiration_ms=5_000) == 0
    assert psm.remove_expired(now_ms=6_000, expiration_ms=5_000) == 1
    assert psm.entry(PID) is None and psm.entry(2) is not None
    # an expired producer is unknown again: any sequence is accepted (Kafka since 2.5)
    append(psm, 2, pbatch(17))


# -- snapshot files -----------------------------------------------------------------------


def test_snapshot_round_trip_keeps_every_cached_batch(tmp_path):
    entries = [
        ProducerStateEntry(5, 2, last_timestamp=77, coordinator_epoch=3, current_txn_first_offset=101),
        ProducerStateEntry(2**62, 32767, last_timestamp=-1),
        ProducerStateEntry(9, 0, coordinator_epoch=2**31 - 1),
    ]
    for i in range(7):
        entries[0].add_batch(2, BatchMetadata(i * 2 + 1, 100 + i * 2, 1, 70 + i))
    entries[1].add_batch(32767, BatchMetadata(INT32_MAX, 2**40, 0, -1))
    path = write_snapshot(tmp_path, 123, entries, sync=True)
    assert path.name == f"{123:020d}.snapshot"
    assert list_snapshots(tmp_path) == [123]
    back = read_snapshot(path)
    assert back == entries
    assert len(back[0].batches) == NUM_BATCHES_TO_RETAIN
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],
        lambda b: b[:5],
        lambda b: b"",
        lambda b: b[:10] + bytes([b[10] ^ 1]) + b[11:],
        lambda b: b"\x00\x07" + b[2:],  # unknown version
        lambda b: b + b"\x00",
    ],
)
def test_damaged_snapshots_are_detected(tmp_path, damage):
    e = ProducerStateEntry(5, 1)
    e.add_batch(1, BatchMetadata(3, 10, 3, 5))
    path = write_snapshot(tmp_path, 10, [e], sync=False)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_load_takes_the_newest_good_snapshot_at_or_below_the_end(tmp_path):
    psm = ProducerStateManager(tmp_path)
    for offset, seq in ((10, 0), (20, 1), (30, 2), (40, 3)):
        psm.producers = {PID: ProducerStateEntry(PID, 0)}
        psm.producers[PID].add_batch(0, BatchMetadata(seq, offset - 1, 0, 1))
        psm.take_snapshot(offset, sync=False)
    snapshot_path(tmp_path, 30).write_bytes(b"torn")
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(log_end_offset=35) == 20  # 40 is past the end, 30 is corrupt
    assert fresh.entry(PID).last_seq == 1
    assert list_snapshots(tmp_path) == [10, 20]  # both deleted
    assert ProducerStateManager(tmp_path).load(log_end_offset=5) is None
    assert list_snapshots(tmp_path) == []


def test_deleting_old_snapshots_keeps_the_newest(tmp_path):
    psm = ProducerStateManager(tmp_path)
    for offset in (10, 20, 30):
        psm.take_snapshot(offset, sync=False)
    psm.delete_snapshots_before(25)
    assert list_snapshots(tmp_path) == [30]
    psm.delete_snapshots_before(100)
    assert list_snapshots(tmp_path) == [30]


# -- in the log ---------------------------------------------------------------------------

# Four small batches per segment, as test_log_recovery does.
CFG = LogConfig(segment_bytes=len(pbatch(0, 2)) * 4, index_interval_bytes=1)


def offsets_in_log(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, producer id, base sequence) of every batch in the log."""
    return [(h.base_offset, h.producer_id, h.base_sequence) for h in batch_headers(log)]


def produce(log: Log, n: int, pid: int = PID, epoch: int = 0, start_seq: int = 0) -> list:
    infos = []
    for i in range(n):
        infos.append(log.append(pbatch(start_seq + 2 * i, 2, pid=pid, epoch=epoch), 0))
    return infos


def test_a_retried_batch_is_not_written_and_gets_the_original_offsets(tmp_path):
    log = open_log(tmp_path, CFG)
    first = log.append(pbatch(0, 2), 0)
    log.append(build_batch([Record(b"someone else")]), 0)
    second = log.append(pbatch(2, 2), 0)
    leo = log.log_end_offset
    again = log.append(pbatch(0, 2), 0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 1)
    assert again.num_records == 0 and again.size_bytes == 0 and again.log_append_time_ms == -1
    again2 = log.append(pbatch(2, 2), 0)
    assert (again2.first_offset, again2.last_offset) == (second.first_offset, second.last_offset)
    assert log.log_end_offset == leo
    assert [b[0] for b in offsets_in_log(log)] == [first.first_offset, 2, second.first_offset]
    log.close()


def test_a_retried_batch_on_a_log_append_time_topic_gets_the_original_append_time(tmp_path):
    log = Log(tmp_path / LOG_DIR, LogConfig(message_timestamp_type="LogAppendTime"), 0)
    first = log.append(pbatch(0, 2), 111)
    again = log.append(pbatch(0, 2), 999)
    assert again.duplicate and again.log_append_time_ms == first.log_append_time_ms == 111
    log.close()


def test_rejected_batches_write_nothing(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 2, epoch=3)
    leo, size = log.log_end_offset, log.size_bytes
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(9, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(4, epoch=2), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(5, epoch=4), 0)
    assert (log.log_end_offset, log.size_bytes) == (leo, size)
    assert log.append(pbatch(4, epoch=3), 0).first_offset == leo  # still in sequence
    log.close()


def test_snapshots_at_rolls_and_at_close(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 9)  # 4 batches of 2 records per segment
    assert [s.base_offset for s in log.segments] == [0, 8, 16]
    d = tmp_path / LOG_DIR
    assert list_snapshots(d) == [8, 16]
    log.close()
    assert list_snapshots(d) == [8, 16, 18]


def test_clean_restart_reads_the_snapshot_and_no_batches(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 9)
    log.close()
    again = open_log(tmp_path, CFG)
    assert again.producer_state_replayed_batches == 0
    assert again.producer_state.entry(PID).last_seq == 17
    dup = again.append(pbatch(12, 2), 0)  # one of the last five batches
    assert dup.duplicate and dup.first_offset == 12
    assert again.append(pbatch(18, 2), 0).first_offset == 18
    again.close()


def test_crash_rebuilds_from_the_last_roll_snapshot_and_the_tail(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 10)
    produce(log, 3, pid=77)  # a second producer, only in the active segment
    crash(log)
    again = open_log(tmp_path, CFG)
    assert not again.had_clean_shutdown
    assert again.producer_state.last_snapshot_offset == 24
    assert again.producer_state_replayed_batches == 1  # only what followed offset 24
    assert again.producer_state.entry(PID).last_seq == 19
    assert again.producer_state.entry(77).last_seq == 5
    for seq, offset in ((18, 18), (12, 12)):
        dup = again.append(pbatch(seq, 2), 0)
        assert dup.duplicate and dup.first_offset == offset
    assert again.append(pbatch(4, 2, pid=77), 0).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        again.append(pbatch(21, 2), 0)
    again.close()


def test_without_any_snapshot_the_whole_log_is_replayed(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 10)
    crash(log)
    d = tmp_path / LOG_DIR
    for off in list_snapshots(d):
        os.unlink(snapshot_path(d, off))
    again = open_log(tmp_path, CFG)
    assert again.producer_state_replayed_batches == 10
    assert again.append(pbatch(18, 2), 0).duplicate
    again.close()


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 10)
    log.close()
    d = tmp_path / LOG_DIR
    newest = list_snapshots(d)[-1]
    snapshot_path(d, newest).write_bytes(b"\x00\x01garbage")
    again = open_log(tmp_path, CFG)
    assert again.producer_state.last_snapshot_offset < newest
    assert again.producer_state.entry(PID).last_seq == 19
    assert again.append(pbatch(18, 2), 0).duplicate
    again.close()


def test_a_torn_tail_takes_its_batches_out_of_the_producer_state(tmp_path):
    """The last batch was acknowledged (acks=1) but never reached the disk whole: after
    recovery cuts it, its retry must be appended as new data, not answered as a
    duplicate pointing at an offset that no longer exists."""
    log = open_log(tmp_path, CFG)
    infos = produce(log, 10)
    last = infos[-1]
    crash(log)
    seg = tmp_path / LOG_DIR / f"{log.segments[-1].base_offset:020d}.log"
    os.truncate(seg, seg.stat().st_size - 3)
    again = open_log(tmp_path, CFG)
    assert again.log_end_offset == last.first_offset
    assert again.producer_state.entry(PID).last_seq == 17
    retried = again.append(pbatch(18, 2), 0)
    assert not retried.duplicate and retried.first_offset == last.first_offset
    again.close()


def test_truncate_to_rebuilds_the_state_below_the_new_end(tmp_path):
    log = open_log(tmp_path, CFG)
    produce(log, 10)
    log.truncate_to(11, 0)  # cuts the batch holding 11 (10-11) and everything after
    assert log.log_end_offset == 10
    d = tmp_path / LOG_DIR
    assert max(list_snapshots(d)) <= 10
    assert log.producer_state.entry(PID).last_seq == 9
    assert not log.append(pbatch(10, 2), 0).duplicate  # the cut batch, sent again
    log.truncate_to(0, 0)
    assert log.producer_state.entry(PID) is None and list_snapshots(d) == []
    log.append(pbatch(40, 2), 0)  # unknown producer again: any sequence
    log.close()


def test_retention_keeps_the_state_and_the_newest_snapshot(tmp_path):
    cfg = LogConfig(segment_bytes=CFG.segment_bytes, index_interval_bytes=1, retention_ms=10)
    log = open_log(tmp_path, cfg)
    produce(log, 10)  # 10 two-record batches, 4 to a segment: segments at 0, 8 and 16
    assert [s.base_offset for s in log.segments] == [0, 8, 16]
    # every record is past retention: all three go (the active one after a roll)
    assert log.apply_retention(now_ms=10**9) == 3
    assert [s.base_offset for s in log.segments] == [20]
    d = tmp_path / LOG_DIR
    assert list_snapshots(d) == [log.segments[0].base_offset]
    assert log.producer_state.entry(PID).last_seq == 19  # KIP-360: state outlives its data
    assert log.append(pbatch(18, 2), 0).duplicate
    log.close()
    again = open_log(tmp_path, cfg)
    assert again.producer_state.entry(PID).last_seq == 19
    assert again.append(pbatch(20, 2), 0).first_offset == 20
    again.close()


def test_expired_producers_are_forgotten_by_the_log(tmp_path):
    log = open_log(tmp_path, CFG)
    log.append(pbatch(0, ts=1_000), 0)
    assert log.remove_expired_producers(1_000 + 86_400_000, 86_400_000) == 1
    assert log.producer_state.entry(PID) is None
    log.close()
    assert open_log(tmp_path, CFG).producer_state.entry(PID) is None


def test_snapshots_written_at_rolls_are_fsynced_by_the_next_flush(tmp_path, monkeypatch):
    log = open_log(tmp_path, CFG)
    produce(log, 5)  # one roll
    d = tmp_path / LOG_DIR
    synced = []
    real = os.fdatasync if hasattr(os, "fdatasync") else os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr("tidegate.log.local_log._fdatasync", spy)
    log.flush()
    assert str(snapshot_path(d, 8)) in synced
    synced.clear()
    log.flush()
    assert str(snapshot_path(d, 8)) not in synced
    log.close()


# -- a real kill -9 -------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tidegate.log import Log, LogConfig
    from tidegate.record.batch_builder import Record, build_batch
    log = Log(Path(sys.argv[1]), LogConfig(segment_bytes=4_000, index_interval_bytes=300), 0)
    seq = 0
    while True:
        n = 1 + seq % 3
        recs = [Record(b"x" * 50, key=b"%d" % seq, timestamp=seq + j) for j in range(n)]
        info = log.append(build_batch(recs, producer_id=5, producer_epoch=0, base_sequence=seq), 0)
        print(seq, n, info.first_offset, flush=True)
        seq += n
    """
)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_kill_9_while_an_idempotent_producer_appends(tmp_path):
    d = tmp_path / LOG_DIR
    env = dict(os.environ, PYTHONPATH=str(SRC))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, env=env, text=True
    )
    acked: list[tuple[int, int, int]] = []
    try:
        for line in child.stdout:
            acked.append(tuple(int(x) for x in line.split()))
            if len(acked) >= 400:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        rest = child.stdout.read()  # printed before the kill, still in the pipe
        child.stdout.close()
    # The kill can land mid-print: only newline-terminated lines were acknowledged
    # (a cut line could even parse as three wrong numbers).
    complete = rest.split("\n")[:-1]
    acked += [tuple(int(x) for x in line.split()) for line in complete if line]
    assert len(acked) >= 400
    cfg = LogConfig(segment_bytes=4_000, index_interval_bytes=300)
    log = Log(d, cfg, 0)
    assert not log.had_clean_shutdown and len(log.segments) > 3
    assert log.producer_state_replayed_batches < 60  # the tail after the last roll only
    in_log = offsets_in_log(log)
    assert {(seq, offset) for seq, _n, offset in acked} <= {(s, o) for o, _p, s in in_log}
    # Each of the last five batches in the log is recognised as a retry (the child may
    # have appended one more than it printed).
    for offset, pid, seq in in_log[-NUM_BATCHES_TO_RETAIN:]:
        n = 1 + seq % 3
        recs = [Record(b"x" * 50, key=b"%d" % seq, timestamp=seq + j) for j in range(n)]
        info = log.append(
            build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq), 0
        )
        assert info.duplicate and info.first_offset == offset
    leo = log.log_end_offset
    seq = in_log[-1][2] + 1 + in_log[-1][2] % 3
    info = log.append(
        build_batch([Record(b"next")], producer_id=5, producer_epoch=0, base_sequence=seq), 0
    )
    assert not info.duplicate and info.first_offset == leo
    log.close()
