"""Transactions on a partition: the producer-state rules Kafka's ProducerStateManagerTest
pins (reference §2.10, §2.14), the last stable offset, the ``.txnindex`` of aborted
transactions and its rebuild after a crash, snapshots carrying open transactions, and
``read_committed`` reads — on the Log alone, without the broker."""

from __future__ import annotations

import os

import pytest

from tests.unit.logs import LOG_DIR, PID, crash, marker, open_log, pbatch
from tidegate.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidegate.log import LogConfig
from tidegate.log.index import AbortedTxn, TransactionIndex
from tidegate.record.record_batch import InvalidRecordError, iter_batches, read_header

OTHER = 2000


def txn(seq, n=1, pid=PID, epoch=0):
    return pbatch(seq, n, pid=pid, epoch=epoch, transactional=True)


def end(log, commit, pid=PID, epoch=0, coordinator_epoch=0):
    """Append a marker as the coordinator does (an internal append); its offset."""
    return log.append(marker(commit, pid, epoch, coordinator_epoch), 0, from_client=False).first_offset


def aborted(log):
    return [e for seg in log.segments for e in seg.txn_index.entries()]


@pytest.fixture
def log(tmp_path):
    plog = open_log(tmp_path)
    yield plog
    if not plog.closed:
        plog.close()


# -- the last stable offset -----------------------------------------------------------------


def test_an_open_transaction_holds_the_lso_at_its_first_offset(log):
    log.append(pbatch(0, 2, pid=OTHER), 0)  # idempotent, not transactional
    assert log.last_stable_offset == log.high_watermark == 2
    log.append(txn(0, 3), 0)  # offsets 2-4
    log.append(pbatch(2, 1, pid=OTHER), 0)  # 5
    assert (log.high_watermark, log.last_stable_offset, log.first_unstable_offset) == (6, 2, 2)
    log.append(txn(3, 1), 0)  # the same transaction: 6
    assert log.last_stable_offset == 2
    assert end(log, commit=True) == 7
    assert (log.high_watermark, log.last_stable_offset, log.first_unstable_offset) == (8, 8, None)
    assert aborted(log) == []  # commits are not indexed


def test_the_oldest_of_several_open_transactions_bounds_the_lso(log):
    log.append(txn(0), 0)  # 0: PID opens
    log.append(txn(0, pid=OTHER), 0)  # 1: OTHER opens
    end(log, commit=False)  # 2: PID aborted
    assert log.last_stable_offset == 1
    # the aborted transaction's LSO is the first offset of the other open one
    assert aborted(log) == [AbortedTxn(PID, 0, 2, 1)]
    end(log, commit=True, pid=OTHER)  # 3
    assert log.last_stable_offset == 4


def test_an_aborted_transaction_alone_records_the_offset_after_its_marker(log):
    log.append(txn(0, 2), 0)
    assert end(log, commit=False) == 2
    assert aborted(log) == [AbortedTxn(PID, 0, 2, 3)]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(PID, 0, 2, 3)]
    assert log.collect_aborted_transactions(3, log.log_end_offset) == []  # ended before


def test_an_empty_transaction_completes_nothing(log):
    assert end(log, commit=False, epoch=1) == 0
    assert aborted(log) == [] and log.last_stable_offset == 1
    e = log.producer_state.entry(PID)
    assert (e.producer_epoch, e.current_txn_first_offset, e.coordinator_epoch) == (1, -1, 0)


def test_the_lso_never_falls_below_the_log_start_offset(log):
    log.append(pbatch(0, 3, pid=OTHER), 0)
    log.append(txn(0), 0)  # 3, open
    log.append(pbatch(3, 2, pid=OTHER), 0)
    log.increment_log_start_offset(4, 0)
    assert (log.first_unstable_offset, log.last_stable_offset) == (3, 4)


# -- Kafka's ProducerStateManagerTest cases ---------------------------------------------------


def test_a_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state(log):
    log.append(txn(0), 0)
    with pytest.raises(InvalidTxnStateError) as exc:
        log.append(pbatch(1), 0)
    assert exc.value.code == 48
    assert log.log_end_offset == 1  # nothing written


def test_an_abort_at_a_new_epoch_resets_the_sequences(log):
    log.append(txn(0, 2, epoch=0), 0)
    end(log, commit=False, epoch=1)  # the coordinator fenced epoch 0 and aborted
    e = log.producer_state.entry(PID)
    assert (e.producer_epoch, e.last_seq) == (1, -1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(txn(2, epoch=1), 0)  # epoch 1 must start at 0
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn(2, epoch=0), 0)  # the zombie
    assert log.append(txn(0, epoch=1), 0).first_offset == 3


def test_a_marker_with_an_older_epoch_is_invalid_producer_epoch(log):
    log.append(txn(0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError) as exc:
        end(log, commit=True, epoch=2)
    assert exc.value.code == 47
    assert log.last_stable_offset == 0  # still open


def test_an_older_coordinator_epoch_is_fenced_also_after_a_restart(tmp_path):
    log = open_log(tmp_path)
    for coordinator_epoch in (1, 1, 2):
        log.append(txn(log.producer_state.entry(PID).last_seq + 1 if log.producer_state.entry(PID) else 0), 0)
        end(log, commit=True, coordinator_epoch=coordinator_epoch)
    log.append(txn(3), 0)
    with pytest.raises(TransactionCoordinatorFencedError) as exc:
        end(log, commit=True, coordinator_epoch=1)
    assert exc.value.code == 52
    log.close()
    log = open_log(tmp_path)  # the coordinator epoch is in the snapshot
    with pytest.raises(TransactionCoordinatorFencedError):
        end(log, commit=True, coordinator_epoch=1)
    end(log, commit=True, coordinator_epoch=2)
    log.close()


def test_a_producer_with_an_open_transaction_never_expires(log):
    log.append(pbatch(0, pid=OTHER, ts=1_000), 0)
    log.append(txn(0), 0)
    assert log.remove_expired_producers(now_ms=10**12, expiration_ms=1) == 1  # OTHER only
    assert log.producer_state.entry(PID) is not None
    end(log, commit=True)
    assert log.remove_expired_producers(now_ms=10**12, expiration_ms=1) == 1


def test_a_client_cannot_write_a_marker(log):
    with pytest.raises(InvalidRecordError):
        log.append(marker(True), 0)
    assert log.log_end_offset == 0


# -- read_committed reads -------------------------------------------------------------------


def batch_bases(data):
    return [read_header(data, p).base_offset for p, _ in iter_batches(data)]


def test_reads_up_to_the_lso_stop_before_the_open_transaction(log):
    log.append(pbatch(0, 2, pid=OTHER), 0)  # 0-1
    log.append(txn(0, 2), 0)  # 2-3 open
    log.append(pbatch(2, 1, pid=OTHER), 0)  # 4
    lso = log.last_stable_offset
    assert batch_bases(log.read(0, 1 << 20, max_offset=lso)) == [0]
    assert log.read(2, 1 << 20, max_offset=lso) == b""
    assert batch_bases(log.read(0, 1 << 20)) == [0, 2, 4]  # read_uncommitted: everything
    end(log, commit=True)
    assert batch_bases(log.read(0, 1 << 20, max_offset=log.last_stable_offset)) == [0, 2, 4, 5]


def test_a_transaction_spanning_segments_is_found_from_either(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    log.append(txn(0, 3), 0)
    while len(log.segments) < 3:
        log.append(pbatch(log.log_end_offset, pid=OTHER), 0)
    at = end(log, commit=False)
    entry = AbortedTxn(PID, 0, at, at + 1)
    assert log.segments[-1].txn_index.entries() == [entry]  # in the marker's segment
    assert log.collect_aborted_transactions(0, log.fetch_upper_bound(0)) == [entry]
    assert log.fetch_upper_bound(0) == log.segments[1].base_offset
    assert log.collect_aborted_transactions(at + 1, log.log_end_offset) == []
    log.close()


def test_bytes_between_counts_the_batches_below_the_end(log):
    sizes = []
    for i in range(3):
        b = pbatch(i, pid=OTHER)
        sizes.append(len(b))
        log.append(b, 0)
    assert log.bytes_between(0, 3) == sum(sizes)
    assert log.bytes_between(1, 2) == sizes[1]
    assert log.bytes_between(2, 2) == 0


# -- persistence ----------------------------------------------------------------------------


def test_open_transactions_survive_a_clean_restart(tmp_path):
    log = open_log(tmp_path)
    log.append(pbatch(0, 2, pid=OTHER), 0)
    log.append(txn(0, 2), 0)  # open at 2
    log.close()
    log = open_log(tmp_path)
    assert log.producer_state_replayed_batches == 0  # from the snapshot alone
    assert (log.last_stable_offset, log.first_unstable_offset) == (2, 2)
    with pytest.raises(InvalidTxnStateError):
        log.append(pbatch(2), 0)
    end(log, commit=False)
    assert aborted(log) == [AbortedTxn(PID, 2, 4, 5)]
    log.close()


def test_a_crash_rebuilds_the_transaction_index_from_the_log(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for round_ in range(6):
        log.append(txn(round_ * 2, 2), 0)
        log.append(pbatch(round_, pid=OTHER), 0)
        end(log, commit=round_ % 2 == 0)
    before = aborted(log)
    assert len(before) == 3 and len(log.segments) > 2
    lso = log.last_stable_offset
    crash(log)
    d = tmp_path / LOG_DIR
    for name in os.listdir(d):
        if name.endswith(".txnindex"):
            os.unlink(d / name)  # lost with the crash
    log = open_log(tmp_path)
    assert not log.had_clean_shutdown
    assert aborted(log) == before
    assert log.last_stable_offset == lso
    log.close()


def test_a_crash_with_a_transaction_open_keeps_it_open(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    log.append(txn(0), 0)
    while len(log.segments) < 3:
        log.append(pbatch(log.log_end_offset, pid=OTHER), 0)
    crash(log)
    log = open_log(tmp_path)
    assert (log.first_unstable_offset, log.last_stable_offset) == (0, 0)
    end(log, commit=True)
    assert log.last_stable_offset == log.log_end_offset
    log.close()


def test_a_torn_transaction_index_is_rebuilt(tmp_path):
    log = open_log(tmp_path)
    log.append(txn(0), 0)
    end(log, commit=False)
    log.close()
    path = tmp_path / LOG_DIR / f"{0:020d}.txnindex"
    assert path.stat().st_size == TransactionIndex.ENTRY_SIZE
    path.write_bytes(path.read_bytes()[:-3])
    log = open_log(tmp_path)
    assert aborted(log) == [AbortedTxn(PID, 0, 1, 2)]
    assert path.stat().st_size == TransactionIndex.ENTRY_SIZE
    log.close()


def test_truncation_reopens_the_transaction_whose_marker_it_removes(tmp_path):
    log = open_log(tmp_path, LogConfig())
    log.append(txn(0, 2), 0)
    end(log, commit=False)  # 2
    log.append(pbatch(0, pid=OTHER), 0)
    log.truncate_to(2, 0)
    assert aborted(log) == []
    assert (log.first_unstable_offset, log.last_stable_offset) == (0, 0)
    log.close()


def test_segments_without_aborts_have_no_transaction_index_file(tmp_path):
    log = open_log(tmp_path)
    log.append(txn(0), 0)
    end(log, commit=True)
    log.close()
    assert not [n for n in os.listdir(tmp_path / LOG_DIR) if n.endswith(".txnindex")]
