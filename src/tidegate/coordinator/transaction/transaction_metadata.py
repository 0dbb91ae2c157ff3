"""Kafka's TransactionState and TransactionMetadata: one transactional id's state machine.

States, their ids (persisted in ``__transaction_state``) and the states each may be
entered from (Kafka's ``TransactionState.validPreviousStates``):

====  ==================  ===========================================  ==========
 id   state               valid previous states                         expirable
====  ==================  ===========================================  ==========
 0    Empty               Empty, CompleteCommit, CompleteAbort          yes
 1    Ongoing             Ongoing, Empty, CompleteCommit, CompleteAbort no
 2    PrepareCommit       Ongoing                                       no
 3    PrepareAbort        Ongoing, PrepareEpochFence                    no
 4    CompleteCommit      PrepareCommit                                 yes
 5    CompleteAbort       PrepareAbort                                  yes
 6    Dead                Empty, CompleteAbort, CompleteCommit          (never written)
 7    PrepareEpochFence   Ongoing                                       (never written)
====  ==================  ===========================================  ==========

Every change is two steps, as in Kafka: a ``prepare_*`` method computes the new
metadata (:class:`TxnTransitMetadata`) and sets ``pending_state`` (a second prepare
while one is pending is a bug: callers answer CONCURRENT_TRANSACTIONS first); the new
record is appended to ``__transaction_state``; :meth:`TransactionMetadata.complete_transition_to`
swaps the cached metadata only once the write succeeded (on failure the pending state
is cleared). Transaction version 1 ("TV1") semantics: the epoch is bumped by
InitProducerId, never by EndTxn.

Plain objects: tidegate runs the coordinator on one event loop, so Kafka's per-metadata
lock is not needed (every method runs to completion before another request is handled).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tidegate.clock import WallMs

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TransactionMetadata",
    "TransactionResult",
    "TransactionState",
    "TxnTransitMetadata",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    """Epochs from Short.MAX_VALUE - 1 on are exhausted; the last one is kept so the
    coordinator can always fence a producer (Kafka's ``isEpochExhausted``)."""
    return epoch >= SHORT_MAX - 1


class TransactionResult(enum.Enum):
    ABORT = 0
    COMMIT = 1


class TransactionState(enum.Enum):
    EMPTY = (0, "Empty", True)
    ONGOING = (1, "Ongoing", False)
    PREPARE_COMMIT = (2, "PrepareCommit", False)
    PREPARE_ABORT = (3, "PrepareAbort", False)
    COMPLETE_COMMIT = (4, "CompleteCommit", True)
    COMPLETE_ABORT = (5, "CompleteAbort", True)
    DEAD = (6, "Dead", False)
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence", False)

    def __init__(self, state_id: int, state_name: str, expiration_allowed: bool) -> None:
        self.id = state_id
        self.state_name = state_name
        self.expiration_allowed = expiration_allowed

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return _VALID_PREVIOUS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state a ListTransactions filter names (case-insensitive), or None."""
        for state in cls:
            if state.state_name.lower() == name.lower():
                return state
        return None

    def __repr__(self) -> str:
        return self.state_name


S = TransactionState
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The metadata a transition will leave (what is written to ``__transaction_state``)."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


class IllegalTransitionError(Exception):
    """A transition the state machine does not allow: a bug, as in Kafka (IllegalStateException)."""


class TransactionMetadata:
    __slots__ = (
        "has_failed_epoch_fence",
        "last_producer_epoch",
        "next_producer_id",
        "pending_state",
        "prev_producer_id",
        "producer_epoch",
        "producer_id",
        "state",
        "topic_partitions",
        "transactional_id",
        "txn_last_update_timestamp",
        "txn_start_timestamp",
        "txn_timeout_ms",
    )

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        txn_timeout_ms: int,
        state: TransactionState,
        txn_last_update_timestamp: int,
        *,
        prev_producer_id: int = NO_PRODUCER_ID,
        next_producer_id: int = NO_PRODUCER_ID,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        topic_partitions: Iterable[TopicPartition] = (),
        txn_start_timestamp: int = -1,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.prev_producer_id = prev_producer_id
        self.next_producer_id = next_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[TopicPartition] = set(topic_partitions)
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        #: the state a prepared transition will enter once its record is durable
        self.pending_state: TransactionState | None = None
        #: an epoch fence whose write failed: the next fence reuses its epoch (no double bump)
        self.has_failed_epoch_fence = False

    # -- queries ------------------------------------------------------------------------
    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # -- prepare ------------------------------------------------------------------------
    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing → PrepareEpochFence with the epoch bumped (kept if a fence already failed)."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransitionError(f"cannot fence producer of {self.transactional_id}: epoch exhausted")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
            self.topic_partitions, self.txn_start_timestamp, self.txn_last_update_timestamp,
        )  # fmt: skip

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: WallMs
    ) -> TxnTransitMetadata | None:
        """Empty/Complete* → Empty with the epoch bumped (InitProducerId). None: PRODUCER_FENCED."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"epoch of {self.transactional_id} exhausted: rotate the producer id")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry
        else:
            return None
        return self._prepare_transition_to(S.EMPTY, self.producer_id, epoch, last, new_txn_timeout_ms,
                                           (), -1, now_ms)

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: WallMs, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """The epoch is exhausted: a new producer id at epoch 0."""
        if self.pending_transition_in_progress:
            raise IllegalTransitionError("producer id rotation while a transition is pending")
        return self._prepare_transition_to(
            S.EMPTY, new_producer_id, 0, self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            new_txn_timeout_ms, (), -1, now_ms, prev_producer_id=self.producer_id,
        )  # fmt: skip

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: WallMs) -> TxnTransitMetadata:
        """→ Ongoing with the union of partitions; the start time is now when a new
        transaction begins."""
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare_transition_to(
            S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms,
            self.topic_partitions | set(added), start, now_ms,
        )  # fmt: skip

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: WallMs) -> TxnTransitMetadata:
        """Ongoing → PrepareCommit or PrepareAbort (TV1: the epoch does not change)."""
        return self._prepare_transition_to(
            new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms,
            self.topic_partitions, self.txn_start_timestamp, now_ms,
        )  # fmt: skip

    def prepare_complete(self, now_ms: WallMs) -> TxnTransitMetadata:
        """Prepare* → Complete* with no partitions (once every marker is written)."""
        new_state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare_transition_to(
            new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms,
            (), self.txn_start_timestamp, now_ms,
        )  # fmt: skip

    def prepare_dead(self) -> TxnTransitMetadata:
        """Empty/Complete* → Dead (expiry: a tombstone is written, never this state)."""
        return self._prepare_transition_to(
            S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms,
            (), self.txn_start_timestamp, self.txn_last_update_timestamp,
        )  # fmt: skip

    def _transit(
        self, state: TransactionState, producer_id: int, producer_epoch: int, last_producer_epoch: int,
        txn_timeout_ms: int, partitions: Iterable[TopicPartition], start: int, update: int,
        prev_producer_id: int | None = None,
    ) -> TxnTransitMetadata:  # fmt: skip
        return TxnTransitMetadata(
            producer_id,
            self.prev_producer_id if prev_producer_id is None else prev_producer_id,
            self.next_producer_id,
            producer_epoch,
            last_producer_epoch,
            txn_timeout_ms,
            state,
            frozenset(partitions),
            start,
            update,
        )

    def _prepare_transition_to(
        self, new_state: TransactionState, producer_id: int, producer_epoch: int, last_producer_epoch: int,
        txn_timeout_ms: int, partitions: Iterable[TopicPartition], start: int, update: int,
        prev_producer_id: int | None = None,
    ) -> TxnTransitMetadata:  # fmt: skip
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"preparing {self.transactional_id} for {new_state} while it is already pending "
                f"{self.pending_state}"
            )
        if producer_id < 0 or producer_epoch < 0 or txn_timeout_ms < 0:
            raise IllegalTransitionError(f"invalid transition: pid {producer_id} epoch {producer_epoch}")
        if self.state not in new_state.valid_previous_states:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state} to {new_state} is not a valid transition"
            )
        self.pending_state = new_state
        return self._transit(new_state, producer_id, producer_epoch, last_producer_epoch, txn_timeout_ms,
                             partitions, start, update, prev_producer_id)

    # -- complete -----------------------------------------------------------------------
    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """The transit's record is durable: adopt it (Kafka's ``completeTransitionTo``)."""
        to = transit.state
        if self.pending_state is not to and not (to is self.state and self.pending_state is None):
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {to} but the pending state is {self.pending_state}"
            )
        if to is S.ONGOING and not transit.topic_partitions >= self.topic_partitions:
            raise IllegalTransitionError("an Ongoing transition may only add partitions")
        if to in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and transit.topic_partitions != self.topic_partitions:
            raise IllegalTransitionError("a Prepare transition keeps the partitions")
        if to in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and transit.topic_partitions:
            raise IllegalTransitionError("a Complete transition has no partitions")
        self.producer_id = transit.producer_id
        self.prev_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.state = to
        self.pending_state = None
        if to is not S.PREPARE_EPOCH_FENCE:
            self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, pid={self.producer_id}, "
            f"epoch={self.producer_epoch}, state={self.state}, pending={self.pending_state}, "
            f"partitions={sorted(self.topic_partitions)})"
        )
