"""Idempotent-producer state (the sequence-number part of Kafka's
``TransactionManager``): the producer id and epoch from InitProducerId, and per
partition the next sequence number and the batches in flight. The rest of Kafka's
``TransactionManager`` (InitProducerId itself, the transaction state machine) is
:mod:`tidegate.producer.transaction_manager`, which owns one of these.

Sequences are assigned when a batch is drained (so a batch keeps its sequence
across retries) and advance by the batch's record count, wrapping at 2^31-1. A
retried batch is sent again only when it is the lowest-sequence batch of its
partition still unacknowledged, which keeps the broker's per-partition sequence
check satisfied with up to 5 requests in flight; while a retry is in flight, no new
batch of its partition is drained (the retry could fail again, and a broker that
does not check sequences, such as librdkafka's mock cluster for a non-transactional
producer, would then write the new batch first).

When a sequenced batch fails for good (too large, timed out, rejected) the broker
never wrote its sequence, so every later batch of the partition would be out of
order: the producer then takes a new producer id (sequences restart at 0; Kafka
bumps the epoch for the same reason, KIP-360), and batches that come back with
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID under the old id are retried
under the new one. A transactional producer never does that in the middle of a
transaction: the failure makes the transaction abortable, and the abort bumps the
epoch through the coordinator (the transaction manager's job).
"""

from __future__ import annotations

import threading
from typing import Any

from tidegate.utils import INT32_MAX

__all__ = ["IdempotenceState"]


class IdempotenceState:
    def __init__(self, *, transactional: bool = False) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        #: batches get the transactional attribute (bit 4) with their sequence
        self.transactional = transactional
        self._next_seq: dict[tuple[str, int], int] = {}
        self._in_flight: dict[tuple[str, int], list[Any]] = {}
        self._lock = threading.Lock()

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        with self._lock:
            self.producer_id = producer_id
            self.producer_epoch = epoch
            self._next_seq.clear()

    def reset_producer_id(self) -> None:
        with self._lock:
            self.producer_id = -1
            self.producer_epoch = -1

    # called under the partition queue lock, from drain
    def may_drain(self, batch: Any) -> bool:
        tp = (batch.topic, batch.partition)
        flying = self._in_flight.get(tp)
        if batch.base_sequence < 0 or batch.producer_id != self.producer_id:
            # a new batch (it gets a fresh sequence at drain) waits while a retry of the
            # partition is in flight: were the retry to fail again, the new batch would be
            # written ahead of it by a broker that does not check sequences, and only
            # cost an OUT_OF_ORDER_SEQUENCE_NUMBER round trip with one that does
            # (librdkafka drains a partition before retrying for the same reason)
            return self.has_producer_id and not (flying and any(b.attempts for b in flying))
        # a retry goes out only when it is the oldest unacknowledged batch
        return not flying or flying[0].base_sequence >= batch.base_sequence

    def assign(self, batch: Any) -> None:
        tp = (batch.topic, batch.partition)
        with self._lock:
            if batch.base_sequence < 0 or batch.producer_id != self.producer_id:
                seq = self._next_seq.get(tp, 0)
                batch.set_producer_state(
                    self.producer_id, self.producer_epoch, seq, self.transactional
                )
                nxt = seq + batch.count
                self._next_seq[tp] = nxt - INT32_MAX - 1 if nxt > INT32_MAX else nxt
            flying = self._in_flight.setdefault(tp, [])
            flying.append(batch)
            flying.sort(key=lambda b: b.base_sequence)

    def is_first_in_flight(self, batch: Any) -> bool:
        """Whether ``batch`` is the lowest-sequence unacknowledged batch of its
        partition (a sequence error on it cannot be waited out)."""
        flying = self._in_flight.get((batch.topic, batch.partition))
        return not flying or flying[0] is batch

    def done(self, batch: Any) -> None:
        tp = (batch.topic, batch.partition)
        with self._lock:
            flying = self._in_flight.get(tp)
            if flying and batch in flying:
                flying.remove(batch)

    def has_in_flight(self) -> bool:
        return any(self._in_flight.values())

