"""Idempotent-producer state (the sequence-number part of Kafka's
``TransactionManager``, its ``TxnPartitionMap``): the producer id and epoch from
InitProducerId, and per partition the producer id and epoch its sequences belong to,
the next sequence number, the last acknowledged sequence and offset, and the
unacknowledged batches. The rest of Kafka's ``TransactionManager`` (InitProducerId,
the epoch bump, the transaction state machine) is
:mod:`tidegate.producer.transaction_manager`, which owns one of these.

Sequences are assigned when a batch is first drained (so a batch keeps its sequence
across retries) and advance by the batch's record count, wrapping at 2^31-1. A batch
stays *in flight* here from that drain until it completes or fails for good (a retry
waiting for its backoff included). A retried batch is sent again only when it is the
lowest-sequence batch of its partition still unacknowledged, which keeps the broker's
per-partition sequence check satisfied with up to 5 requests in flight; while a retry
is in flight, no new batch of its partition is drained (the retry could fail again,
and a broker that does not check sequences, such as librdkafka's mock cluster for a
non-transactional producer, would then write the new batch first).

KIP-360: when a partition's sequences have a gap the broker will never fill (a batch
failed for good, OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for the batch
right after the last acknowledged one), the transaction manager bumps the epoch
locally (:meth:`IdempotenceState.bump_epoch`): the same producer id, epoch + 1, and
that partition's unacknowledged batches renumbered from sequence 0 under the new
epoch (:meth:`start_sequences_at_beginning`; the bytes are rewritten when each is
drained again, never while a request holds them). Every other partition is *stale*:
its batches in flight finish under the old epoch, and only then does its next batch
start at sequence 0 under the new one (no new batch is drained meanwhile: it could
overtake them). A broker accepts a new epoch at sequence 0 and nothing else
(Kafka's ``ProducerAppendInfo.checkSequence``).
"""

from __future__ import annotations

import threading
from typing import Any

from tidegate.utils import INT32_MAX

__all__ = ["NO_LAST_ACKED_SEQUENCE", "IdempotenceState"]

NO_LAST_ACKED_SEQUENCE = -1

TopicPartition = tuple[str, int]


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: wraps at 2^31-1 to 0."""
    nxt = sequence + increment
    return nxt - INT32_MAX - 1 if nxt > INT32_MAX else nxt


def last_sequence(batch: Any) -> int:
    return increment_sequence(batch.base_sequence, batch.count - 1)


class PartitionEntry:
    """Kafka's ``TxnPartitionEntry``."""

    __slots__ = ("in_flight", "last_acked_offset", "last_acked_sequence", "next_sequence",
                 "producer_epoch", "producer_id")  # fmt: skip

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = NO_LAST_ACKED_SEQUENCE
        self.last_acked_offset = -1
        #: unacknowledged batches (drained, not completed nor failed), by sequence
        self.in_flight: list[Any] = []


class IdempotenceState:
    def __init__(self, *, transactional: bool = False) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        #: batches get the transactional attribute (bit 4) with their sequence
        self.transactional = transactional
        self._partitions: dict[TopicPartition, PartitionEntry] = {}
        #: partitions with a retried batch that expired: the next sequence after it
        #: (Kafka's ``partitionsWithUnresolvedSequences``)
        self.unresolved: dict[TopicPartition, int] = {}
        self._lock = threading.RLock()

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def entry(self, tp: TopicPartition) -> PartitionEntry:
        e = self._partitions.get(tp)
        if e is None:
            e = self._partitions[tp] = PartitionEntry()
        return e

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """A new producer id or epoch: each partition moves to it once its batches in
        flight are done (a stale partition)."""
        with self._lock:
            self.producer_id = producer_id
            self.producer_epoch = epoch

    def reset_producer_id(self) -> None:
        with self._lock:
            self.producer_id = -1
            self.producer_epoch = -1

    def reset_sequences(self, tp: TopicPartition | None = None) -> None:
        """Forget the sequences of ``tp`` (or of every partition): the next batch starts
        at 0 (Kafka's ``resetSequenceForPartition`` / ``resetSequenceNumbers``)."""
        with self._lock:
            if tp is None:
                self._partitions.clear()
                self.unresolved.clear()
            else:
                self._partitions.pop(tp, None)
                self.unresolved.pop(tp, None)

    def bump_epoch(self) -> None:
        """KIP-360: the same producer id, the next epoch."""
        with self._lock:
            self.producer_epoch += 1

    def start_sequences_at_beginning(self, tp: TopicPartition) -> None:
        """Renumber ``tp``'s unacknowledged batches from 0 under the current producer id
        and epoch (Kafka's ``startSequencesAtBeginning``); each is marked
        ``sequence_reset`` and re-closed when drained again."""
        with self._lock:
            e = self.entry(tp)
            seq = 0
            for b in e.in_flight:
                b.set_producer_state(self.producer_id, self.producer_epoch, seq, self.transactional)
                b.sequence_reset = True
                seq = increment_sequence(seq, b.count)
            e.producer_id, e.producer_epoch = self.producer_id, self.producer_epoch
            e.next_sequence = seq
            e.last_acked_sequence = NO_LAST_ACKED_SEQUENCE
            self.unresolved.pop(tp, None)

    def is_stale(self, e: PartitionEntry) -> bool:
        return (e.producer_id, e.producer_epoch) != (self.producer_id, self.producer_epoch)

    # called under the partition queue lock, from drain
    def may_drain(self, batch: Any) -> bool:
        """Kafka's ``shouldStopDrainBatchesForPartition``, negated."""
        if not self.has_producer_id:
            return False
        tp = (batch.topic, batch.partition)
        with self._lock:
            e = self._partitions.get(tp)
            if e is None:
                return tp not in self.unresolved
            flying = e.in_flight
            if batch.base_sequence < 0:
                if flying and (self.is_stale(e) or any(b.attempts for b in flying)):
                    # stale: a batch at sequence 0 of the new epoch would overtake the
                    # old epoch's batches still in flight. A retry in flight: were it to
                    # fail again, a broker that does not check sequences would write the
                    # new batch ahead of it (librdkafka drains a partition before
                    # retrying for the same reason)
                    return False
                return tp not in self.unresolved
            # a retry goes out only when it is the oldest unacknowledged batch
            return not flying or flying[0] is batch or batch not in flying

    def assign(self, batch: Any) -> None:
        """A batch is drained: a new one gets the partition's next sequence (after the
        partition moved to the current producer id and epoch if it was stale)."""
        if batch.base_sequence >= 0:
            return  # a retry keeps its sequence (or the one a bump renumbered it to)
        tp = (batch.topic, batch.partition)
        with self._lock:
            e = self.entry(tp)
            if self.is_stale(e) and not e.in_flight:
                # Kafka's maybeUpdateProducerIdAndEpoch: sequences restart at 0
                e.producer_id, e.producer_epoch = self.producer_id, self.producer_epoch
                e.next_sequence = 0
                e.last_acked_sequence = NO_LAST_ACKED_SEQUENCE
            seq = e.next_sequence
            batch.set_producer_state(e.producer_id, e.producer_epoch, seq, self.transactional)
            e.next_sequence = increment_sequence(seq, batch.count)
            e.in_flight.append(batch)
            e.in_flight.sort(key=lambda b: b.base_sequence)

    def first_in_flight(self, tp: TopicPartition) -> Any:
        e = self._partitions.get(tp)
        return e.in_flight[0] if e is not None and e.in_flight else None

    def has_in_flight(self, tp: TopicPartition | None = None) -> bool:
        if tp is not None:
            e = self._partitions.get(tp)
            return e is not None and bool(e.in_flight)
        return any(e.in_flight for e in self._partitions.values())

    def completed(self, batch: Any, base_offset: int) -> None:
        """The broker acknowledged ``batch`` (Kafka's ``handleCompletedBatch``)."""
        tp = (batch.topic, batch.partition)
        with self._lock:
            e = self.entry(tp)
            if (batch.producer_id, batch.producer_epoch) == (e.producer_id, e.producer_epoch):
                e.last_acked_sequence = max(e.last_acked_sequence, last_sequence(batch))
            if base_offset >= 0:
                e.last_acked_offset = max(e.last_acked_offset, base_offset + batch.count - 1)
            self.done(batch)

    def done(self, batch: Any) -> None:
        """``batch`` is no longer in flight (acknowledged, or failed for good)."""
        with self._lock:
            e = self._partitions.get((batch.topic, batch.partition))
            if e is not None and batch in e.in_flight:
                e.in_flight.remove(batch)

    def is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        e = self._partitions.get(tp)
        last = e.last_acked_sequence if e is not None else NO_LAST_ACKED_SEQUENCE
        return sequence - last == 1

    def next_sequence(self, tp: TopicPartition) -> int:
        e = self._partitions.get(tp)
        return e.next_sequence if e is not None else 0

    def last_acked_offset(self, tp: TopicPartition) -> int:
        e = self._partitions.get(tp)
        return e.last_acked_offset if e is not None else -1

    def mark_unresolved(self, batch: Any) -> None:
        """A batch that was sent expired: no new batch of its partition is drained until
        the batches in flight tell whether it was written (Kafka's
        ``markSequenceUnresolved``)."""
        tp = (batch.topic, batch.partition)
        with self._lock:
            nxt = increment_sequence(last_sequence(batch), 1)
            self.unresolved[tp] = max(self.unresolved.get(tp, nxt), nxt)
