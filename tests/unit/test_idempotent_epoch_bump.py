"""KIP-360 for the idempotent producer, sans-IO: the transaction manager bumps the epoch
locally (same producer id, epoch + 1) when a partition's sequences have a gap, renumbers
that partition's unacknowledged batches from 0, lets every other partition finish its
batches in flight under the old epoch before starting at 0, and asks InitProducerId again
only when the epoch is exhausted. The cases of Kafka's ``TransactionManagerTest``
(``testBumpEpochAndResetSequenceNumbersAfterUnknownProducerId``,
``testHealthyPartitionRetriesDuringEpochBump``, ``testEpochBumpAfterLastInflightBatchFails``,
``testNoProducerIdResetAfterLastInFlightBatchSucceeds``, ...), on the fake clock."""

from __future__ import annotations

from tests.unit.test_transaction_manager import INIT_PRODUCER_ID, batch, new_tm
from tidegate.errors import KafkaTimeoutError
from tidegate.producer.errors import ProducerFencedError, error_for_code
from tidegate.producer.transaction_manager import State

PID, EPOCH = 15, 5
TP0, TP1 = ("foo", 0), ("foo", 1)
OUT_OF_ORDER, UNKNOWN_PRODUCER_ID, NOT_LEADER, INVALID_RECORD = 45, 59, 6, 87


def idempotent(pid=PID, epoch=EPOCH):
    tm, d, _ = new_tm(transactional_id=None)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    d.answer(d.expect(INIT_PRODUCER_ID), producer_id=pid, producer_epoch=epoch)
    assert tm.state is State.READY
    return tm, d


def write(tm, tp, n=1):
    """``n`` batches of one record drained for ``tp`` (sequences assigned)."""
    out = []
    for _ in range(n):
        b = batch(*tp)
        assert tm.may_drain(b)
        tm.assign(b)
        out.append(b)
    return out


def state(b):
    return (b.producer_id, b.producer_epoch, b.base_sequence)


def test_unknown_producer_id_bumps_the_epoch_and_renumbers_the_partition_from_zero():
    tm, d = idempotent()
    b1, b2, b3, b4, b5 = write(tm, TP0, 5)
    assert tm.idempotence.next_sequence(TP0) == 5
    tm.handle_completed_batch(b1, 500)
    # the broker lost the producer's state, and not to retention (log start 500 is not
    # past the last acknowledged offset): retry, with a new epoch
    assert tm.can_retry(b2, UNKNOWN_PRODUCER_ID, False, 500)
    assert state(b2) == (PID, EPOCH, 1)  # nothing changes until the sender's next loop
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert (tm.idempotence.producer_id, tm.idempotence.producer_epoch) == (PID, EPOCH + 1)
    assert [state(b) for b in (b2, b3, b4, b5)] == [(PID, EPOCH + 1, s) for s in range(4)]
    assert all(b.sequence_reset for b in (b2, b3, b4, b5))
    assert tm.idempotence.next_sequence(TP0) == 4
    assert d.next() is None  # no InitProducerId: the bump is local
    assert tm.may_drain(b2) and not tm.may_drain(b3)  # the oldest goes first


def test_unknown_producer_id_without_a_log_start_offset_is_retried_as_it_is():
    tm, _ = idempotent()
    (b1,) = write(tm, TP0)
    assert tm.can_retry(b1, UNKNOWN_PRODUCER_ID, False, -1)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH and state(b1) == (PID, EPOCH, 0)


def test_a_healthy_partition_finishes_under_the_old_epoch_before_restarting_at_zero():
    tm, _ = idempotent()
    _, tp0b2, tp0b3 = write(tm, TP0, 3)
    tp1b1, tp1b2 = write(tm, TP1, 2)
    tm.handle_completed_batch(tm.idempotence.first_in_flight(TP0), 500)
    tm.handle_completed_batch(tp1b1, 500)
    assert tm.can_retry(tp0b2, UNKNOWN_PRODUCER_ID, False, 500)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    # tp0 renumbered, tp1 not
    assert [state(b) for b in (tp0b2, tp0b3)] == [(PID, EPOCH + 1, 0), (PID, EPOCH + 1, 1)]
    assert state(tp1b2) == (PID, EPOCH, 1) and not tp1b2.sequence_reset
    # no new tp1 batch while tp1 has a batch in flight under the old epoch ...
    new = batch(*TP1)
    assert not tm.may_drain(new)
    # ... which is retried with its old epoch and sequence after a leader move
    assert tm.can_retry(tp1b2, NOT_LEADER, True, -1)
    assert tm.may_drain(tp1b2)
    tm.assign(tp1b2)
    assert state(tp1b2) == (PID, EPOCH, 1)
    tm.handle_completed_batch(tp1b2, 501)
    # now the partition moves to the new epoch, from 0
    assert tm.may_drain(new)
    tm.assign(new)
    assert state(new) == (PID, EPOCH + 1, 0)
    assert tm.idempotence.next_sequence(TP1) == 1


def test_out_of_order_on_the_batch_after_the_last_acknowledged_bumps_the_epoch():
    tm, _ = idempotent()
    b1, b2, b3 = write(tm, TP0, 3)
    tm.handle_completed_batch(b1, 0)
    # b3 is not next (b2 is still in flight and may fill the gap): retry, no bump
    assert tm.can_retry(b3, OUT_OF_ORDER, False, 0)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH
    # b2 is next: waiting cannot close the gap
    assert tm.can_retry(b2, OUT_OF_ORDER, False, 0)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert [state(b) for b in (b2, b3)] == [(PID, EPOCH + 1, 0), (PID, EPOCH + 1, 1)]
    # a renumbered batch that comes back out of order once more is only retried
    assert tm.can_retry(b3, OUT_OF_ORDER, False, 0)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH + 1


def test_a_batch_that_failed_for_good_bumps_the_epoch_for_the_batches_behind_it():
    tm, d = idempotent()
    b1, b2, b3 = write(tm, TP0, 3)
    (other,) = write(tm, TP1)
    tm.handle_completed_batch(b1, 0)
    tm.handle_failed_batch(b2, error_for_code(INVALID_RECORD), adjust_sequence_numbers=True)
    assert tm.epoch_bump_required and tm.state is State.READY
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert state(b3) == (PID, EPOCH + 1, 0)
    assert state(other) == (PID, EPOCH, 0)  # tp1 keeps its epoch until its batch is done
    assert tm.idempotence.next_sequence(TP0) == 1
    assert d.next() is None


def test_a_failure_that_may_have_been_written_does_not_renumber():
    tm, _ = idempotent()
    b1, b2 = write(tm, TP0, 2)
    tm.handle_failed_batch(b1, error_for_code(INVALID_RECORD), adjust_sequence_numbers=False)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH and state(b2) == (PID, EPOCH, 1)


def test_an_expired_batch_is_resolved_by_a_later_success_without_a_bump():
    tm, _ = idempotent()
    b1, b2, b3 = write(tm, TP0, 3)
    tm.mark_sequence_unresolved(b1)
    tm.handle_failed_batch(b1, KafkaTimeoutError("Expiring"), adjust_sequence_numbers=False)
    assert not tm.may_drain(batch(*TP0))  # unresolved: no new batch
    tm.handle_failed_batch(b2, KafkaTimeoutError("Expiring"), adjust_sequence_numbers=False)
    tm.maybe_resolve_sequences()
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.unresolved  # b3 still in flight
    tm.handle_completed_batch(b3, 2)  # b3 was written, so b1 and b2 were too
    tm.maybe_resolve_sequences()
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH and not tm.idempotence.unresolved
    assert tm.idempotence.next_sequence(TP0) == 3 and tm.may_drain(batch(*TP0))


def test_an_expired_batch_with_nothing_acknowledged_after_it_bumps_the_epoch():
    tm, _ = idempotent()
    b1, b2, b3 = write(tm, TP0, 3)
    tm.mark_sequence_unresolved(b1)
    tm.handle_failed_batch(b1, KafkaTimeoutError("Expiring"), adjust_sequence_numbers=False)
    tm.handle_completed_batch(b2, 1)
    tm.maybe_resolve_sequences()
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH  # b3 may still resolve it
    tm.handle_failed_batch(b3, KafkaTimeoutError("Expiring"), adjust_sequence_numbers=False)
    tm.maybe_resolve_sequences()
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert (tm.idempotence.producer_id, tm.idempotence.producer_epoch) == (PID, EPOCH + 1)
    assert not tm.idempotence.unresolved and tm.idempotence.next_sequence(TP0) == 0
    nxt = batch(*TP0)
    tm.assign(nxt)
    assert state(nxt) == (PID, EPOCH + 1, 0)


def test_an_exhausted_epoch_takes_a_new_producer_id_then_renumbers():
    tm, d = idempotent(epoch=32767)
    b1, b2 = write(tm, TP0, 2)
    (other,) = write(tm, TP1)
    tm.handle_completed_batch(b1, 0)
    assert tm.can_retry(b2, OUT_OF_ORDER, False, 0)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert not tm.has_producer_id and tm.state is State.INITIALIZING
    assert not tm.may_drain(b2)  # nothing goes out without a producer id
    init = d.expect(INIT_PRODUCER_ID)
    assert d.body(init)["producer_id"] == -1  # a new id, not a bump of the old one
    d.answer(init, producer_id=PID + 1, producer_epoch=0)
    assert state(b2) == (PID + 1, 0, 0) and b2.sequence_reset
    assert state(other) == (PID, 32767, 0)  # tp1 moves once its batch is done
    tm.handle_completed_batch(other, 0)
    nxt = batch(*TP1)
    tm.assign(nxt)
    assert state(nxt) == (PID + 1, 0, 0)


def test_no_bump_in_the_fatal_state_and_a_fenced_idempotent_producer_is_fatal():
    tm, _ = idempotent()
    b1, b2 = write(tm, TP0, 2)
    tm.handle_failed_batch(b1, error_for_code(OUT_OF_ORDER), adjust_sequence_numbers=False)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH + 1  # OUT_OF_ORDER: a gap, whatever the retries
    tm.handle_failed_batch(b2, ProducerFencedError("produce"))
    assert tm.state is State.FATAL_ERROR
    b3 = batch(*TP0, seq=1, pid=PID)
    tm.handle_failed_batch(b3, error_for_code(INVALID_RECORD), adjust_sequence_numbers=True)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.idempotence.producer_epoch == EPOCH + 1
