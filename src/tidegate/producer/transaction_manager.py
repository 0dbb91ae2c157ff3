"""Kafka's producer ``TransactionManager``, sans-IO: the producer id (InitProducerId),
the transaction state machine, and the queue of transactional requests.

It holds no socket and reads no clock of its own (an injected :class:`~tidegate.clock.Clock`
times retry backoffs). The application threads call the transactional methods
(:meth:`TransactionManager.initialize_transactions`, :meth:`begin_transaction`,
:meth:`begin_commit`, :meth:`begin_abort`, :meth:`send_offsets_to_transaction`,
:meth:`maybe_add_partition`); each returns at once, with a
:class:`TransactionalRequestResult` to wait on where Kafka's returns one. The sender
(:mod:`tidegate.producer.sender`, the shell) asks :meth:`next_request` for the next
request to send, one at a time, to the node the request names (its coordinator, or any
broker), and hands back the decoded response (:meth:`TxnRequestHandler.on_response`) or
the failure (:meth:`TxnRequestHandler.on_disconnect`, :meth:`on_version_mismatch`).

The idempotent producer uses the same object without a transactional id: InitProducerId
and KIP-360's local epoch bump (:meth:`bump_idempotent_epoch_and_reset_id_if_needed`,
requested by :meth:`can_retry`, :meth:`handle_failed_batch` and
:meth:`maybe_resolve_sequences` when a partition's sequences have a gap), and the
per-partition sequence numbers are the :class:`~tidegate.producer.idempotence.IdempotenceState`
it owns.

States and transitions are Kafka's (``TransactionManager.State``)::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                         ^                         |                    |
                         |                         v                    v
                         +---(epoch bump)-- ABORTING_TRANSACTION <- ABORTABLE_ERROR
    any -> FATAL_ERROR (terminal: only close() is left)

Requests go out by priority (FindCoordinator, InitProducerId, AddPartitionsToTxn /
AddOffsetsToTxn / TxnOffsetCommit, EndTxn, the epoch bump's InitProducerId), and EndTxn
only once no batch is incomplete (commit = flush, then EndTxn). Errors are handled as
Kafka's handlers handle them (``docs/transactions.md`` has the table): retried (NOT_COORDINATOR
and COORDINATOR_NOT_AVAILABLE after a new FindCoordinator, COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS with a 20 ms backoff for the transaction's first AddPartitionsToTxn,
any retriable code), abortable (the transaction must be aborted; KIP-360: with an
InitProducerId carrying the current producer id and epoch after the abort, when the
coordinator has InitProducerId v3+) or fatal.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from tidegate.clock import Clock, MonotonicMs
from tidegate.errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from tidegate.utils import INT32_MAX

from .errors import (
    ClusterAuthorizationError,
    CommitFailedError,
    GroupAuthorizationError,
    IllegalStateError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
    error_for_code,
)
from .idempotence import IdempotenceState

__all__ = [
    "ConsumerGroupMetadata",
    "CoordinatorType",
    "OffsetAndMetadata",
    "Priority",
    "State",
    "TransactionManager",
    "TransactionalRequestResult",
    "TxnRequestHandler",
]

log = logging.getLogger("tidegate.producer")

FIND_COORDINATOR = 10
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

# error codes the handlers tell apart
NONE = 0
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
CONCURRENT_TRANSACTIONS = 51
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
UNKNOWN_PRODUCER_ID = 59
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
FENCED_INSTANCE_ID = 82
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120

#: Kafka's ``ADD_PARTITIONS_RETRY_BACKOFF_MS``: the backoff of the transaction's first
#: AddPartitionsToTxn after CONCURRENT_TRANSACTIONS (the previous transaction is still
#: writing its markers; KAFKA-5482).
ADD_PARTITIONS_RETRY_BACKOFF_MS = 20

#: Request versions a transaction-version-1 client sends (Kafka 4.0's caps:
#: ``LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2`` and AddPartitionsToTxn's client form).
INIT_PRODUCER_ID_MAX_VERSION = 5
ADD_PARTITIONS_TO_TXN_MAX_VERSION = 3
ADD_OFFSETS_TO_TXN_MAX_VERSION = 4
END_TXN_MAX_VERSION = 4
TXN_OFFSET_COMMIT_MAX_VERSION = 4
FIND_COORDINATOR_MAX_VERSION = 6

_SHORT_MAX = 2**15 - 1

TopicPartition = tuple[str, int]


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = State
#: target -> the states it may be entered from (FATAL_ERROR: from any state).
VALID_SOURCES: dict[State, frozenset[State]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset(
        {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}
    ),
    S.FATAL_ERROR: frozenset(State),
}


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's ``key_type``."""

    GROUP = 0
    TRANSACTION = 1


class Priority(enum.IntEnum):
    """Kafka's order of transactional requests (lower goes first)."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS_OR_OFFSETS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


class ConsumerGroupMetadata(NamedTuple):
    """The consumer group an offset commit belongs to (Kafka's ``ConsumerGroupMetadata``,
    what ``KafkaConsumer.groupMetadata()`` returns). With the member's generation, member
    id and static instance id the group coordinator fences a zombie consumer's commits
    (KIP-447); with only the group id (the defaults) it checks no membership."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndMetadata(NamedTuple):
    """An offset to commit: the next offset to consume, optional metadata, and the
    leader epoch of the record before it (None: unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class TransactionalRequestResult:
    """The outcome of a transactional call (Kafka's ``TransactionalRequestResult``):
    :meth:`wait` blocks until the sender finished the call's requests, then returns or
    raises the call's error. A wait that times out raises :class:`KafkaTimeoutError`
    and leaves the call pending: calling the same method again waits on it again."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self._event = threading.Event()
        self.error: BaseException | None = None
        self.is_acked = False

    def done(self) -> None:
        self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    @property
    def is_completed(self) -> bool:
        return self._event.is_set()

    @property
    def is_successful(self) -> bool:
        return self._event.is_set() and self.error is None

    def wait(self, timeout_s: float | None) -> None:
        if not self._event.wait(timeout_s):
            ms = "" if timeout_s is None else f" {timeout_s * 1000:.0f} ms"
            raise KafkaTimeoutError(f"Timeout expired after{ms} while awaiting {self.operation}")
        self.is_acked = True
        if self.error is not None:
            raise self.error

    def __repr__(self) -> str:
        state = "pending" if not self.is_completed else ("failed" if self.error else "done")
        return f"<TransactionalRequestResult {self.operation} {state}>"


class _PendingTransition(NamedTuple):
    result: TransactionalRequestResult
    state: State
    operation: str


def _mark(error: BaseException, state: State) -> None:
    """Classify an error for the application: ``fatal`` or ``txn_requires_abort``."""
    try:
        if state is State.FATAL_ERROR:
            error.fatal = True  # type: ignore[attr-defined]
            error.txn_requires_abort = False  # type: ignore[attr-defined]
        elif state is State.ABORTABLE_ERROR:
            error.txn_requires_abort = True  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - an exception type with __slots__
        pass


class TransactionManager:
    """See the module docstring. Thread-safe: one lock, as Kafka's methods are
    ``synchronized``; the sender thread calls :meth:`set_poison_state_on_invalid_transition`
    so that an invalid transition it attempts poisons the state (FATAL_ERROR) instead of
    only raising (Kafka's KAFKA-14831)."""

    def __init__(
        self,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int = 60000,
        retry_backoff_ms: int = 100,
        clock: Clock,
        idempotence: IdempotenceState | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.clock = clock
        self.idempotence = idempotence or IdempotenceState(
            transactional=transactional_id is not None
        )
        self._lock = threading.RLock()
        self._state = State.UNINITIALIZED
        self._last_error: BaseException | None = None
        self._pending: list[tuple[int, int, TxnRequestHandler]] = []
        self._seq = itertools.count()
        self._new_partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        self._partitions_in_txn: set[TopicPartition] = set()
        self._pending_txn_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        self._pending_transition: _PendingTransition | None = None
        self._coordinators: dict[CoordinatorType, tuple[int, str, int] | None] = {
            CoordinatorType.GROUP: None,
            CoordinatorType.TRANSACTION: None,
        }
        self.coordinator_supports_bumping_epoch = False
        self.transaction_started = False
        self.epoch_bump_required = False
        #: idempotent producer: partitions whose unacknowledged batches are renumbered
        #: from 0 by the next epoch bump (Kafka's ``partitionsToRewriteSequences``)
        self._partitions_to_rewrite: set[TopicPartition] = set()
        #: the error that made the transaction abortable was INVALID_PRODUCER_ID_MAPPING:
        #: the coordinator would refuse EndTxn, so the abort goes to InitProducerId at once
        self._abortable_pid_mapping = False
        self._poison = threading.local()

    # -- introspection ----------------------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def state(self) -> State:
        return self._state

    @property
    def last_error(self) -> BaseException | None:
        return self._last_error

    @property
    def has_producer_id(self) -> bool:
        return self.idempotence.has_producer_id

    def has_error(self) -> bool:
        return self._state in (State.ABORTABLE_ERROR, State.FATAL_ERROR)

    def has_fatal_error(self) -> bool:
        return self._state is State.FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return self._state is State.ABORTABLE_ERROR

    def is_completing(self) -> bool:
        return self._state in (State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION)

    def is_aborting(self) -> bool:
        return self._state is State.ABORTING_TRANSACTION

    def is_ready(self) -> bool:
        return self.is_transactional and self._state is State.READY

    def has_ongoing_transaction(self) -> bool:
        """From the first ``begin_transaction`` until its commit or abort completes."""
        return (
            self._state is State.IN_TRANSACTION
            or self.is_completing()
            or (self._state is State.ABORTABLE_ERROR)
        )

    def has_pending_requests(self) -> bool:
        return bool(self._pending)

    def is_partition_added(self, tp: TopicPartition) -> bool:
        return tp in self._partitions_in_txn

    def is_partition_pending_add(self, tp: TopicPartition) -> bool:
        return tp in self._new_partitions or tp in self._pending_partitions

    def has_pending_offset_commits(self) -> bool:
        return bool(self._pending_txn_offset_commits)

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        """A batch for ``tp`` may be drained: not fatal, and (transactional) the
        partition is in the transaction (AddPartitionsToTxn answered)."""
        if self._state is State.FATAL_ERROR:
            return False
        return self.transactional_id is None or tp in self._partitions_in_txn

    def can_bump_epoch(self) -> bool:
        """KIP-360: an idempotent producer always can; a transactional one when its
        coordinator has InitProducerId v3+ (checked when the coordinator is ready)."""
        return self.transactional_id is None or self.coordinator_supports_bumping_epoch

    # -- the accumulator's sequencer interface ------------------------------------------------

    def may_drain(self, batch: Any) -> bool:
        if not self.is_send_to_partition_allowed((batch.topic, batch.partition)):
            return False
        return self.idempotence.may_drain(batch)

    def assign(self, batch: Any) -> None:
        self.idempotence.assign(batch)

    # -- state transitions --------------------------------------------------------------------

    def set_poison_state_on_invalid_transition(self, poison: bool) -> None:
        self._poison.value = poison

    def _transition_to(self, target: State, error: BaseException | None = None) -> None:
        if self._state not in VALID_SOURCES[target]:
            prefix = f"TransactionalId {self.transactional_id}: " if self.is_transactional else ""
            message = (
                f"{prefix}Invalid transition attempted from state {self._state.name} "
                f"to state {target.name}"
            )
            exc = IllegalStateError(message)
            if getattr(self._poison, "value", False):
                self._state = State.FATAL_ERROR
                self._last_error = exc
                _mark(exc, State.FATAL_ERROR)
            raise exc
        if target in (State.FATAL_ERROR, State.ABORTABLE_ERROR):
            if error is None:
                raise ValueError(f"Cannot transition to {target.name} with a null exception")
            _mark(error, target)
            self._last_error = error
        else:
            self._last_error = None
        if error is not None:
            log.debug(
                "transition from %s to error state %s: %s", self._state.name, target.name, error
            )
        else:
            log.debug("transition from %s to %s", self._state.name, target.name)
        self._state = target

    def transition_to_abortable_error(self, error: BaseException) -> None:
        with self._lock:
            if self._state is State.ABORTING_TRANSACTION:
                log.debug("already aborting; not entering ABORTABLE_ERROR for %s", error)
                return
            if self._state is State.FATAL_ERROR:
                log.debug("already fatal; not entering ABORTABLE_ERROR for %s", error)
                return
            log.info("transaction abortable after %s", error)
            self._abortable_pid_mapping = isinstance(error, InvalidPidMappingError)
            self._transition_to(State.ABORTABLE_ERROR, error)

    def transition_to_fatal_error(self, error: BaseException) -> None:
        with self._lock:
            log.info("producer entering the fatal error state after %s", error)
            self._transition_to(State.FATAL_ERROR, error)
            if self._pending_transition is not None:
                self._pending_transition.result.fail(error)

    def transition_to_uninitialized(self, error: BaseException) -> None:
        """After an authorization error on InitProducerId (abortable there): fail what was
        pending and go back to UNINITIALIZED, so that ``init_transactions`` may be called
        again once the ACLs are fixed (Kafka's ``shouldHandleAuthorizationError``)."""
        with self._lock:
            for _, _, handler in self._pending:
                handler.result.fail(error)
            self._pending.clear()
            self._transition_to(State.UNINITIALIZED)
            if self._pending_transition is not None:
                self._pending_transition.result.fail(error)
            self._last_error = None

    def maybe_transition_to_error_state(self, error: BaseException) -> None:
        """A record failed (a produce error, or in ``send``): authorization errors, a
        fenced producer and an unsupported version are fatal; with a transactional id,
        anything else makes the transaction abortable (and asks for an epoch bump)."""
        with self._lock:
            if isinstance(
                error,
                (
                    ClusterAuthorizationError,
                    TransactionalIdAuthorizationError,
                    ProducerFencedError,
                    UnsupportedVersionError,
                ),
            ):
                self.transition_to_fatal_error(error)
            elif self.is_transactional:
                if self.can_bump_epoch() and not self.is_completing():
                    self.epoch_bump_required = True
                self.transition_to_abortable_error(error)

    def handle_completed_batch(self, batch: Any, base_offset: int) -> None:
        """The broker acknowledged ``batch`` (Kafka's ``handleCompletedBatch``)."""
        self.idempotence.completed(batch, base_offset)

    def handle_failed_batch(
        self, batch: Any, error: BaseException, adjust_sequence_numbers: bool = True
    ) -> None:
        """A sequenced batch failed for good (Kafka's ``handleFailedBatch``). A
        transactional producer's transaction becomes abortable (the abort bumps the
        epoch) or the producer fatal. An idempotent producer whose batch's sequence
        leaves a gap (OUT_OF_ORDER_SEQUENCE_NUMBER, or any error the broker gave before
        the retries ran out: it wrote nothing) bumps its epoch for the partition (KIP-360).
        ``adjust_sequence_numbers`` is False when the batch may have been written (it
        expired, or its retries ran out)."""
        with self._lock:
            self.maybe_transition_to_error_state(error)
            self.idempotence.done(batch)
            if self._state is State.FATAL_ERROR or batch.base_sequence < 0:
                return
            tp = (batch.topic, batch.partition)
            code = getattr(error, "code", None)
            if code == OUT_OF_ORDER_SEQUENCE_NUMBER and not self.is_transactional:
                log.error(
                    "the broker returned %s for %s-%s with producer id %s, epoch %s and sequence %s",
                    error, tp[0], tp[1], batch.producer_id, batch.producer_epoch,
                    batch.base_sequence,
                )  # fmt: skip
                self.request_epoch_bump_for_partition(tp)
            elif code == UNKNOWN_PRODUCER_ID:
                # the broker has no state for this producer here: it takes sequence 0
                self.idempotence.reset_sequences(tp)
            elif adjust_sequence_numbers and not self.is_transactional:
                self.request_epoch_bump_for_partition(tp)

    def can_retry(self, batch: Any, code: int, retriable: bool, log_start_offset: int) -> bool:
        """Whether a batch answered with error ``code`` is retried, as far as sequences
        go (Kafka's ``TransactionManager.canRetry``; the caller checked the retries left
        and ``delivery.timeout.ms``). The idempotent producer retries
        OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID and bumps the epoch when
        the batch is the one right after the last acknowledged sequence (waiting cannot
        close that gap); a transactional producer retries a batch behind the gap and
        lets the one at the gap fail (the abort bumps the epoch)."""
        with self._lock:
            idem = self.idempotence
            tp = (batch.topic, batch.partition)
            reset = getattr(batch, "sequence_reset", False)
            if code == UNKNOWN_PRODUCER_ID:
                if log_start_offset == -1:
                    return True  # the broker did not know its log start: ask again
                if reset:
                    return True  # renumbered already: the others come back with it too
                if idem.last_acked_offset(tp) < log_start_offset:
                    # retention removed the producer's batches, and its state with them
                    if self.is_transactional:
                        idem.start_sequences_at_beginning(tp)
                    else:
                        self.request_epoch_bump_for_partition(tp)
                    return True
                if not self.is_transactional:
                    self.request_epoch_bump_for_partition(tp)
                    return True
            elif code == OUT_OF_ORDER_SEQUENCE_NUMBER:
                unresolved = idem.unresolved.get(tp)
                if unresolved is None and (
                    reset or not idem.is_next_sequence(tp, batch.base_sequence)
                ):
                    return True  # an earlier batch is still in flight: it may fill the gap
                if not self.is_transactional:
                    if unresolved is None or unresolved == batch.base_sequence:
                        self.request_epoch_bump_for_partition(tp)
                    return True
            return retriable

    def request_epoch_bump_for_partition(self, tp: TopicPartition) -> None:
        """The idempotent producer's next loop bumps the epoch and renumbers ``tp``'s
        unacknowledged batches from 0 (Kafka's ``requestEpochBumpForPartition``)."""
        with self._lock:
            self.epoch_bump_required = True
            self._partitions_to_rewrite.add(tp)

    def mark_sequence_unresolved(self, batch: Any) -> None:
        self.idempotence.mark_unresolved(batch)

    def maybe_resolve_sequences(self) -> None:
        """For each partition with an expired batch that had been sent, once nothing of it
        is in flight: the sequences are whole if the last acknowledged sequence is the
        one before the next (a later batch was written, so the expired one was too);
        otherwise bump the epoch (idempotent), or make the transaction abortable (fatal
        without epoch bumps). Kafka's ``maybeResolveSequences``."""
        with self._lock:
            idem = self.idempotence
            for tp in list(idem.unresolved):
                if idem.has_in_flight(tp):
                    continue
                del idem.unresolved[tp]
                if idem.is_next_sequence(tp, idem.next_sequence(tp)):
                    continue
                if not self.is_transactional:
                    log.info(
                        "nothing in flight for %s-%s and its last acknowledged sequence is not "
                        "the one before %s: bumping the epoch", tp[0], tp[1], idem.next_sequence(tp),
                    )  # fmt: skip
                    self.request_epoch_bump_for_partition(tp)
                    continue
                unacked = (
                    "The client hasn't received acknowledgment for some previously sent "
                    "messages and can no longer retry them. "
                )
                if self.can_bump_epoch():
                    self.epoch_bump_required = True
                    self.transition_to_abortable_error(
                        KafkaError(unacked + "It is safe to abort the transaction and continue.")
                    )
                else:
                    self.transition_to_fatal_error(
                        KafkaError(unacked + "It isn't safe to continue.")
                    )

    def _reset_idempotent_producer_id(self) -> None:
        """Idempotent producer: forget the producer id (the epoch would overflow); the
        sender then asks for a new one."""
        if self.is_transactional:
            raise IllegalStateError(
                "Cannot reset producer state for a transactional producer. You must "
                "either abort the ongoing transaction or reinitialize the transactional "
                "producer instead"
            )
        log.debug(
            "resetting the idempotent producer id %s (epoch %s)",
            self.idempotence.producer_id,
            self.idempotence.producer_epoch,
        )
        self.idempotence.reset_producer_id()
        if self._state is State.READY:
            self._transition_to(State.UNINITIALIZED)

    def _maybe_fail_with_error(self) -> None:
        """Raise if in an error state: a new ProducerFencedError or
        InvalidProducerEpochError naming this producer for those, else a KafkaError
        whose ``__cause__`` is the error that caused the state."""
        if not self.has_error():
            return
        last = self._last_error
        idem = self.idempotence
        who = (
            f"Producer with transactionalId '{self.transactional_id}' and "
            f"producerId {idem.producer_id}, epoch {idem.producer_epoch}"
        )
        exc: BaseException
        if isinstance(last, ProducerFencedError):
            exc = ProducerFencedError(
                f"{who} has been fenced by another producer with the same transactionalId"
            )
        elif isinstance(last, InvalidProducerEpochError):
            exc = InvalidProducerEpochError(f"{who} attempted to produce with an old epoch")
        elif isinstance(last, IllegalStateError):
            exc = IllegalStateError(
                f"{who} cannot execute transactional method because of previous invalid "
                f"state transition attempt"
            )
            exc.__cause__ = last
        else:
            exc = KafkaError(
                f"Cannot execute transactional method because we are in an error state: {last}"
            )
            exc.__cause__ = last
        _mark(exc, self._state)
        raise exc

    def _ensure_transactional(self) -> None:
        if not self.is_transactional:
            raise IllegalStateError(
                "Transactional method invoked on a non-transactional producer: set "
                "transactional.id to use transactions"
            )

    def _throw_if_pending_state(self, operation: str) -> None:
        p = self._pending_transition
        if p is not None:
            if p.result.is_acked:
                self._pending_transition = None
            else:
                raise IllegalStateError(
                    f"Cannot attempt operation `{operation}` because the previous call to "
                    f"`{p.operation}` timed out and must be retried"
                )

    def _handle_cached_result(
        self,
        supplier: Callable[[], TransactionalRequestResult],
        next_state: State,
        operation: str,
    ) -> TransactionalRequestResult:
        """A call that timed out is retried by calling it again: it gets the same result
        back; any other call fails until then."""
        self._ensure_transactional()
        p = self._pending_transition
        if p is not None:
            if p.result.is_acked:
                self._pending_transition = None
            elif next_state is not p.state:
                raise IllegalStateError(
                    f"Cannot attempt operation `{operation}` because the previous call to "
                    f"`{p.operation}` timed out and must be retried"
                )
            else:
                return p.result
        result = supplier()
        self._pending_transition = _PendingTransition(result, next_state, operation)
        return result

    # -- the application's calls ----------------------------------------------------------------

    def initialize_transactions(self) -> TransactionalRequestResult:
        """``init_transactions``: InitProducerId for the transactional id (which also
        fences older producers with that id and completes their transaction)."""
        with self._lock:
            self._ensure_transactional()
            self._maybe_fail_with_error()

            def supplier() -> TransactionalRequestResult:
                self._transition_to(State.INITIALIZING)
                log.info("InitProducerId for transactional id %s", self.transactional_id)
                handler = InitProducerIdHandler(self, is_epoch_bump=False)
                self._enqueue(handler)
                return handler.result

            return self._handle_cached_result(supplier, State.INITIALIZING, "initTransactions")

    def begin_transaction(self) -> None:
        with self._lock:
            self._ensure_transactional()
            self._throw_if_pending_state("beginTransaction")
            self._maybe_fail_with_error()
            self._transition_to(State.IN_TRANSACTION)

    def begin_commit(self) -> TransactionalRequestResult:
        with self._lock:

            def supplier() -> TransactionalRequestResult:
                self._maybe_fail_with_error()
                self._transition_to(State.COMMITTING_TRANSACTION)
                return self._begin_completing_transaction(committed=True)

            return self._handle_cached_result(
                supplier, State.COMMITTING_TRANSACTION, "commitTransaction"
            )

    def begin_abort(self) -> TransactionalRequestResult:
        with self._lock:

            def supplier() -> TransactionalRequestResult:
                if self._state is not State.ABORTABLE_ERROR:
                    self._maybe_fail_with_error()
                skip_end_txn = self._abortable_pid_mapping
                self._transition_to(State.ABORTING_TRANSACTION)
                # aborting: no partition needs adding any more
                self._new_partitions.clear()
                return self._begin_completing_transaction(
                    committed=False, skip_end_txn=skip_end_txn
                )

            return self._handle_cached_result(
                supplier, State.ABORTING_TRANSACTION, "abortTransaction"
            )

    def _begin_completing_transaction(
        self, *, committed: bool, skip_end_txn: bool = False
    ) -> TransactionalRequestResult:
        if self._new_partitions:
            self._enqueue(self._add_partitions_handler())
        self._abortable_pid_mapping = False
        if not skip_end_txn:
            # INVALID_PRODUCER_ID_MAPPING: the coordinator would refuse the EndTxn, so go
            # straight to InitProducerId; otherwise abort first (InitProducerId in the
            # middle of a transaction would fence this producer)
            handler = EndTxnHandler(self, committed)
            self._enqueue(handler)
            if not self.epoch_bump_required:
                return handler.result
        bump = InitProducerIdHandler(self, is_epoch_bump=True)
        log.info(
            "InitProducerId with producer id %s and epoch %s to bump the epoch",
            self.idempotence.producer_id,
            self.idempotence.producer_epoch,
        )
        self._enqueue(bump)
        return bump.result

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
    ) -> TransactionalRequestResult:
        with self._lock:
            self._ensure_transactional()
            self._throw_if_pending_state("sendOffsetsToTransaction")
            self._maybe_fail_with_error()
            if self._state is not State.IN_TRANSACTION:
                raise IllegalStateError(
                    "Cannot send offsets if a transaction is not in progress "
                    f"(currentState= {self._state.name})"
                )
            handler = AddOffsetsToTxnHandler(self, dict(offsets), group_metadata)
            self._enqueue(handler)
            return handler.result

    def check_send(self) -> None:
        """Before a record is queued: raise what :meth:`maybe_add_partition` would
        (an error state, or no transaction open), so a refused record is never queued."""
        if self._state is State.IN_TRANSACTION and self._pending_transition is None:
            return  # the common case, without the lock (once per record)
        with self._lock:
            self._maybe_fail_with_error()
            self._throw_if_pending_state("send")
            if self.is_transactional:
                if not self.has_producer_id:
                    raise IllegalStateError(
                        "Cannot add a partition to the transaction before completing a call "
                        "to init_transactions"
                    )
                if self._state is not State.IN_TRANSACTION:
                    raise IllegalStateError(
                        "Cannot add a partition to the transaction while in state "
                        f"{self._state.name} (call begin_transaction first)"
                    )

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record was queued for ``tp``: a partition new to the transaction is added
        (AddPartitionsToTxn before its first batch is sent)."""
        if (
            self._state is State.IN_TRANSACTION
            and self._pending_transition is None
            and (tp in self._partitions_in_txn or tp in self._new_partitions)
        ):
            return  # the common case, without the lock (once per record)
        with self._lock:
            self._maybe_fail_with_error()
            self._throw_if_pending_state("send")
            if not self.is_transactional:
                return
            if not self.has_producer_id:
                raise IllegalStateError(
                    f"Cannot add partition {tp[0]}-{tp[1]} to transaction before completing "
                    "a call to init_transactions"
                )
            if self._state is not State.IN_TRANSACTION:
                raise IllegalStateError(
                    f"Cannot add partition {tp[0]}-{tp[1]} to transaction while in state "
                    f"{self._state.name}"
                )
            if self.is_partition_added(tp) or self.is_partition_pending_add(tp):
                return
            log.debug("adding partition %s-%s to the transaction", tp[0], tp[1])
            self._new_partitions.add(tp)

    # -- the idempotent producer ------------------------------------------------------------------

    def bump_idempotent_epoch_and_reset_id_if_needed(self) -> None:
        """Idempotent producer, once per sender loop: bump the epoch when a partition
        asked for it (KIP-360; a new producer id instead when the epoch would pass
        32767), and ask for a producer id when there is none (at start, and after such
        a reset)."""
        with self._lock:
            if self.is_transactional or self._state is State.FATAL_ERROR:
                return
            if self.epoch_bump_required:
                self._bump_idempotent_producer_epoch()
            if self._state is not State.INITIALIZING and not self.has_producer_id:
                if self._state is State.READY:
                    self._transition_to(State.UNINITIALIZED)
                self._transition_to(State.INITIALIZING)
                self._enqueue(InitProducerIdHandler(self, is_epoch_bump=False))

    def _bump_idempotent_producer_epoch(self) -> None:
        """Kafka's ``bumpIdempotentProducerEpoch``: epoch + 1 for the same producer id,
        and the partitions that asked renumber their unacknowledged batches from 0. When
        the epoch is exhausted, a new producer id; those partitions are renumbered once
        it arrives (until then nothing is drained)."""
        self.epoch_bump_required = False
        idem = self.idempotence
        if not idem.has_producer_id:
            return  # InitProducerId on the way: the partitions are renumbered with its answer
        if idem.producer_epoch >= _SHORT_MAX:
            self._reset_idempotent_producer_id()
            return
        idem.bump_epoch()
        log.info(
            "bumped the epoch of producer id %s to %s (KIP-360) for %s",
            idem.producer_id,
            idem.producer_epoch,
            sorted(self._partitions_to_rewrite),
        )
        self._rewrite_sequences()

    def _rewrite_sequences(self) -> None:
        for tp in sorted(self._partitions_to_rewrite):
            self.idempotence.start_sequences_at_beginning(tp)
        self._partitions_to_rewrite.clear()

    # -- the sender's side ------------------------------------------------------------------------

    def _enqueue(self, handler: TxnRequestHandler) -> None:
        log.debug("enqueuing transactional request %s", handler.name)
        heapq.heappush(self._pending, (handler.priority, next(self._seq), handler))

    def _add_partitions_handler(self) -> AddPartitionsToTxnHandler:
        self._pending_partitions |= self._new_partitions
        self._new_partitions.clear()
        return AddPartitionsToTxnHandler(self, sorted(self._pending_partitions))

    def next_request(self, has_incomplete_batches: bool, now_ms: MonotonicMs) -> TxnRequestHandler | None:
        """The next request to send, or None: nothing pending, EndTxn waiting for the
        incomplete batches (commit flushes first), the head still backing off (see
        :meth:`retry_delay_ms`), or the head failed at once (an error state)."""
        with self._lock:
            if self._new_partitions:
                self._enqueue(self._add_partitions_handler())
            if not self._pending:
                return None
            head = self._pending[0][2]
            if head.is_end_txn and has_incomplete_batches:
                return None
            if head.not_before_ms > now_ms:
                return None
            heapq.heappop(self._pending)
            if self._maybe_terminate_with_error(head):
                log.debug("not sending %s: the producer is in an error state", head.name)
                return None
            handler: TxnRequestHandler | None = head
            if head.is_end_txn and not self.transaction_started:
                # nothing was added to the transaction: nothing to end on the broker
                head.result.done()
                if self._state is not State.FATAL_ERROR:
                    log.debug("no EndTxn for a transaction to which nothing was added")
                    self._complete_transaction()
                handler = heapq.heappop(self._pending)[2] if self._pending else None
            return handler

    def retry_delay_ms(self, now_ms: MonotonicMs) -> int:
        """Milliseconds until the head request's backoff ends (1 << 30: nothing waits)."""
        with self._lock:
            if not self._pending:
                return 1 << 30
            return max(0, self._pending[0][2].not_before_ms - now_ms)

    def _maybe_terminate_with_error(self, handler: TxnRequestHandler) -> bool:
        if self.has_error():
            if self.has_abortable_error() and isinstance(handler, FindCoordinatorHandler):
                return False  # no harm finding the coordinator ahead of the abort
            assert self._last_error is not None
            handler.fail(self._last_error)
            return True
        return False

    def retry(self, handler: TxnRequestHandler, *, backoff: bool = True) -> None:
        """Queue ``handler`` again (after ``retry.backoff.ms`` unless ``backoff`` is
        False: it only waited for a coordinator or a connection)."""
        with self._lock:
            handler.is_retry = handler.is_retry or backoff
            handler.not_before_ms = (
                self.clock.milliseconds() + handler.retry_backoff_ms() if backoff else 0
            )
            self._enqueue(handler)

    def coordinator(self, kind: CoordinatorType) -> tuple[int, str, int] | None:
        """(node id, host, port) of the coordinator, or None when not known."""
        return self._coordinators[kind]

    def lookup_coordinator(self, kind: CoordinatorType, key: str | None) -> None:
        with self._lock:
            self._coordinators[kind] = None
            for _, _, queued in self._pending:
                if isinstance(queued, FindCoordinatorHandler) and queued.key_type is kind:
                    return  # one lookup at a time per coordinator type
            self._enqueue(FindCoordinatorHandler(self, kind, key or ""))

    def coordinator_unknown(self, handler: TxnRequestHandler) -> None:
        """``handler`` goes to a coordinator not known yet: FindCoordinator first, then
        ``handler`` again (no backoff: it waited for nothing but the lookup)."""
        with self._lock:
            kind = handler.coordinator_type
            assert kind is not None
            log.debug("%s coordinator unknown: looking it up for %s", kind.name, handler.name)
            self.lookup_coordinator(kind, handler.coordinator_key)
            self.retry(handler, backoff=False)

    def handle_coordinator_ready(self, init_producer_id_max_version: int | None) -> None:
        """The transaction coordinator's connection is ready: may it bump epochs?"""
        self.coordinator_supports_bumping_epoch = (
            init_producer_id_max_version is not None and init_producer_id_max_version >= 3
        )

    def close(self) -> None:
        """The sender stopped: fail what is still pending."""
        with self._lock:
            err = ProducerClosedError("The producer closed forcefully")
            pending = [h for _, _, h in self._pending]
            self._pending.clear()
            for handler in pending:
                handler.result.fail(err)
            if self._pending_transition is not None:
                self._pending_transition.result.fail(err)

    def _complete_transaction(self) -> None:
        if self.epoch_bump_required:
            self._transition_to(State.INITIALIZING)
        else:
            self._transition_to(State.READY)
        self._last_error = None
        self.epoch_bump_required = False
        self.transaction_started = False
        self._new_partitions.clear()
        self._pending_partitions.clear()
        self._partitions_in_txn.clear()

    def _set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        log.info(
            "producer id %s epoch %s%s",
            producer_id,
            epoch,
            f" for transactional id {self.transactional_id}" if self.is_transactional else "",
        )
        # each partition's sequences restart at 0 under a new producer id or epoch,
        # once its batches in flight under the old one are done
        self.idempotence.set_producer_id(producer_id, epoch)


# -- the requests ---------------------------------------------------------------------------------


class TxnRequestHandler:
    """One transactional request: its body for a version, where it goes, and what its
    response does to the transaction manager (called by the sender)."""

    api_key = -1
    max_version = 0
    min_version = 0
    priority = Priority.ADD_PARTITIONS_OR_OFFSETS
    is_end_txn = False
    name = "request"

    def __init__(
        self, tm: TransactionManager, result: TransactionalRequestResult | None = None
    ) -> None:
        self.tm = tm
        self.result = result if result is not None else TransactionalRequestResult(self.name)
        self.is_retry = False
        self.not_before_ms = 0
        #: when the sender started waiting for this request's node to be ready
        self.waiting_since_ms: int | None = None

    # where it goes
    @property
    def coordinator_type(self) -> CoordinatorType | None:
        """The coordinator it is sent to; None: any broker."""
        return CoordinatorType.TRANSACTION

    @property
    def coordinator_key(self) -> str | None:
        return self.tm.transactional_id

    def needs_coordinator(self) -> bool:
        return self.coordinator_type is not None

    def retry_backoff_ms(self) -> int:
        return self.tm.retry_backoff_ms

    def body(self, version: int) -> dict[str, Any]:
        raise NotImplementedError

    def handle_response(self, response: Any) -> None:
        raise NotImplementedError

    # outcomes
    def fatal_error(self, error: BaseException) -> None:
        self.result.fail(error)
        self.tm.transition_to_fatal_error(error)

    def abortable_error(self, error: BaseException) -> None:
        self.result.fail(error)
        self.tm.transition_to_abortable_error(error)

    def abortable_error_if_possible(self, error: BaseException) -> None:
        if self.tm.can_bump_epoch():
            self.tm.epoch_bump_required = True
            self.abortable_error(error)
        else:
            self.fatal_error(error)

    def fail(self, error: BaseException) -> None:
        self.result.fail(error)

    def reenqueue(self) -> None:
        self.tm.retry(self)

    # the sender's calls
    def on_response(self, response: Any) -> None:
        with self.tm._lock:
            self.handle_response(response)

    def on_disconnect(self) -> None:
        """The connection closed (or the request timed out) before an answer: retry,
        after a new coordinator lookup when it went to one."""
        with self.tm._lock:
            log.debug("%s: disconnected; retrying", self.name)
            if self.needs_coordinator():
                self.tm.lookup_coordinator(
                    self.coordinator_type,  # type: ignore[arg-type]
                    self.coordinator_key,
                )
            self.reenqueue()

    def on_version_mismatch(self, error: BaseException) -> None:
        with self.tm._lock:
            self.fatal_error(error)

    def _coordinator_moved(self) -> None:
        self.tm.lookup_coordinator(CoordinatorType.TRANSACTION, self.tm.transactional_id)
        self.reenqueue()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _code(value: Any) -> int:
    return int(value)


class InitProducerIdHandler(TxnRequestHandler):
    api_key = INIT_PRODUCER_ID
    max_version = INIT_PRODUCER_ID_MAX_VERSION

    def __init__(self, tm: TransactionManager, *, is_epoch_bump: bool) -> None:
        self.name = "InitProducerId"
        super().__init__(tm)
        self.is_epoch_bump = is_epoch_bump
        self.priority = Priority.EPOCH_BUMP if is_epoch_bump else Priority.INIT_PRODUCER_ID
        # KIP-360: the current producer id and epoch need v3
        self.min_version = 3 if is_epoch_bump else 0
        idem = tm.idempotence
        self.producer_id = idem.producer_id if is_epoch_bump else -1
        self.producer_epoch = idem.producer_epoch if is_epoch_bump else -1

    @property
    def coordinator_type(self) -> CoordinatorType | None:
        return CoordinatorType.TRANSACTION if self.tm.is_transactional else None

    def body(self, version: int) -> dict[str, Any]:
        tm = self.tm
        return {
            "transactional_id": tm.transactional_id,
            # an idempotent producer has no transaction to time out (Kafka: Integer.MAX_VALUE)
            "transaction_timeout": tm.transaction_timeout_ms if tm.is_transactional else INT32_MAX,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
        }

    def handle_response(self, response: Any) -> None:
        tm = self.tm
        code = _code(response.error_code)
        if code == NONE:
            tm._set_producer_id_and_epoch(int(response.producer_id), int(response.producer_epoch))
            tm._transition_to(State.READY)
            tm._last_error = None
            if self.is_epoch_bump:
                tm.idempotence.reset_sequences()  # the transaction was aborted: all at 0
            elif not tm.is_transactional:
                tm._rewrite_sequences()  # after an exhausted epoch: the partitions that asked
            self.result.done()
            return
        err = error_for_code(code, "InitProducerId")
        if not tm.is_transactional:
            if err.retriable:
                self.reenqueue()
            else:
                self.fatal_error(err)
            return
        if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
            self._coordinator_moved()
        elif err.retriable:
            self.reenqueue()
        elif code in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
            # abortable here: once the ACLs are fixed, init_transactions may be called again
            self.abortable_error(err)
        elif code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
            self.fatal_error(ProducerFencedError("InitProducerId"))
        elif code == TRANSACTION_ABORTABLE:
            self.abortable_error(err)
        else:
            self.fatal_error(_unexpected(err, f"Unexpected error in InitProducerIdResponse; {err}"))


def _unexpected(err: KafkaError, message: str) -> KafkaError:
    """Kafka wraps an error it did not expect in a plain KafkaException; the code is
    kept (``err.code``) and the broker's error is the cause."""
    exc = KafkaError(message)
    exc.code = err.code
    exc.__cause__ = err
    return exc


class AddPartitionsToTxnHandler(TxnRequestHandler):
    api_key = ADD_PARTITIONS_TO_TXN
    max_version = ADD_PARTITIONS_TO_TXN_MAX_VERSION
    priority = Priority.ADD_PARTITIONS_OR_OFFSETS
    name = "AddPartitionsToTxn"

    def __init__(self, tm: TransactionManager, partitions: Iterable[TopicPartition]) -> None:
        super().__init__(tm)
        self.partitions = list(partitions)
        self._backoff_ms = tm.retry_backoff_ms
        idem = tm.idempotence
        self.producer_id = idem.producer_id
        self.producer_epoch = idem.producer_epoch

    def body(self, version: int) -> dict[str, Any]:
        topics: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            topics.setdefault(topic, []).append(partition)
        return {
            "v3_and_below_transactional_id": self.tm.transactional_id,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [
                {"name": t, "partitions": sorted(ps)} for t, ps in sorted(topics.items())
            ],
        }

    def retry_backoff_ms(self) -> int:
        return min(self.tm.retry_backoff_ms, self._backoff_ms)

    def handle_response(self, response: Any) -> None:
        tm = self.tm
        errors: dict[TopicPartition, int] = {}
        for topic in response.results_by_topic_v3_and_below:
            for p in topic.results_by_partition:
                errors[(topic.name, int(p.partition_index))] = _code(p.partition_error_code)
        self._backoff_ms = tm.retry_backoff_ms
        unauthorized: set[str] = set()
        partition_errors = False
        for tp, code in errors.items():
            if code == NONE:
                continue
            err = error_for_code(code, f"AddPartitionsToTxn {tp[0]}-{tp[1]}")
            if code in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR):
                self._coordinator_moved()
                return
            if code == CONCURRENT_TRANSACTIONS:
                # the previous transaction is still completing: retry soon
                if not tm._partitions_in_txn:
                    self._backoff_ms = ADD_PARTITIONS_RETRY_BACKOFF_MS
                self.reenqueue()
                return
            if err.retriable:
                self.reenqueue()
                return
            if code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
                self.fatal_error(ProducerFencedError("AddPartitionsToTxn"))
                return
            if code in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE):
                self.fatal_error(err)
                return
            if code == TOPIC_AUTHORIZATION_FAILED:
                unauthorized.add(tp[0])
            elif code == OPERATION_NOT_ATTEMPTED:
                log.debug("%s-%s not added: other partitions of the request failed", *tp)
                partition_errors = True
            elif code in (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING):
                self.abortable_error_if_possible(err)
                return
            elif code == TRANSACTION_ABORTABLE:
                self.abortable_error(err)
                return
            else:
                log.error("could not add partition %s-%s: unexpected error %s", tp[0], tp[1], err)
                partition_errors = True
        # the partitions leave the pending set whatever happened: in an error state their
        # batches are aborted anyway, and batches of partitions that were added must be
        # able to go on (retries of the same transaction)
        tm._pending_partitions.difference_update(errors)
        if unauthorized:
            self.abortable_error(
                TopicAuthorizationError(f"not authorized to access topics {sorted(unauthorized)}")
            )
        elif partition_errors:
            self.abortable_error(
                KafkaError(f"Could not add partitions to transaction due to errors: {errors}")
            )
        else:
            log.debug("added partitions %s to the transaction", sorted(errors))
            tm._partitions_in_txn.update(errors)
            tm.transaction_started = True
            self.result.done()


class FindCoordinatorHandler(TxnRequestHandler):
    api_key = FIND_COORDINATOR
    max_version = FIND_COORDINATOR_MAX_VERSION
    priority = Priority.FIND_COORDINATOR
    name = "FindCoordinator"

    def __init__(self, tm: TransactionManager, key_type: CoordinatorType, key: str) -> None:
        super().__init__(tm)
        self.key_type = key_type
        self.key = key
        # key_type appeared in v1
        self.min_version = 1 if key_type is CoordinatorType.TRANSACTION else 0

    @property
    def coordinator_type(self) -> CoordinatorType | None:
        return None

    @property
    def coordinator_key(self) -> str | None:
        return None

    def body(self, version: int) -> dict[str, Any]:
        if version >= 4:
            return {"key_type": int(self.key_type), "coordinator_keys": [self.key]}
        return {"key": self.key, "key_type": int(self.key_type)}

    def handle_response(self, response: Any) -> None:
        tm = self.tm
        # v4+ answers in ``coordinators``, older versions at the top level (Kafka's
        # FindCoordinatorResponse.coordinators() makes one of the top-level fields)
        coordinators = response.coordinators
        if coordinators:
            if len(coordinators) != 1:
                self.fatal_error(
                    KafkaError(
                        "Coordinator lookup failed: Invalid response containing more than a "
                        "single coordinator"
                    )
                )
                return
            c: Any = coordinators[0]
        else:
            c = response
        code = _code(c.error_code)
        kind = self.key_type.name.lower()
        if code == NONE:
            tm._coordinators[self.key_type] = (int(c.node_id), str(c.host), int(c.port))
            log.info("discovered %s coordinator %s (%s:%s)", kind, c.node_id, c.host, c.port)
            self.result.done()
            return
        err = error_for_code(code, getattr(c, "error_message", None))
        if err.retriable:
            self.reenqueue()
        elif code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            self.fatal_error(err)
        elif code == GROUP_AUTHORIZATION_FAILED:
            self.abortable_error(GroupAuthorizationError(f"group {self.key}"))
        elif code == TRANSACTION_ABORTABLE:
            self.abortable_error(err)
        else:
            self.fatal_error(
                _unexpected(
                    err,
                    f"Could not find a coordinator with type {kind} with key {self.key} due to "
                    f"unexpected error: {err}",
                )
            )


class EndTxnHandler(TxnRequestHandler):
    api_key = END_TXN
    max_version = END_TXN_MAX_VERSION
    priority = Priority.END_TXN
    is_end_txn = True

    def __init__(self, tm: TransactionManager, committed: bool) -> None:
        self.name = f"EndTxn({'commit' if committed else 'abort'})"
        super().__init__(tm)
        self.committed = committed
        idem = tm.idempotence
        self.producer_id = idem.producer_id
        self.producer_epoch = idem.producer_epoch

    def body(self, version: int) -> dict[str, Any]:
        return {
            "transactional_id": self.tm.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "committed": self.committed,
        }

    def handle_response(self, response: Any) -> None:
        code = _code(response.error_code)
        if code == NONE:
            self.tm._complete_transaction()
            self.result.done()
            return
        err = error_for_code(code, self.name)
        if code in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR):
            self._coordinator_moved()
        elif err.retriable:
            self.reenqueue()
        elif code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
            self.fatal_error(ProducerFencedError(self.name))
        elif code in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE):
            self.fatal_error(err)
        elif code in (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING):
            self.abortable_error_if_possible(err)
        elif code == TRANSACTION_ABORTABLE:
            self.abortable_error(err)
        else:
            self.fatal_error(_unexpected(err, f"Unhandled error in EndTxnResponse: {err}"))


class AddOffsetsToTxnHandler(TxnRequestHandler):
    api_key = ADD_OFFSETS_TO_TXN
    max_version = ADD_OFFSETS_TO_TXN_MAX_VERSION
    priority = Priority.ADD_PARTITIONS_OR_OFFSETS
    name = "AddOffsetsToTxn"

    def __init__(
        self,
        tm: TransactionManager,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
    ) -> None:
        super().__init__(tm)
        self.offsets = offsets
        self.group_metadata = group_metadata
        idem = tm.idempotence
        self.producer_id = idem.producer_id
        self.producer_epoch = idem.producer_epoch

    def body(self, version: int) -> dict[str, Any]:
        return {
            "transactional_id": self.tm.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "group_id": self.group_metadata.group_id,
        }

    def handle_response(self, response: Any) -> None:
        tm = self.tm
        code = _code(response.error_code)
        group = self.group_metadata.group_id
        if code == NONE:
            log.debug("added the offsets of group %s to the transaction", group)
            # the call completes when TxnOffsetCommit does
            tm._pending_txn_offset_commits.update(self.offsets)
            tm._enqueue(TxnOffsetCommitHandler(tm, self.result, self.group_metadata))
            tm.transaction_started = True
            return
        err = error_for_code(code, f"AddOffsetsToTxn for group {group}")
        if code in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR):
            self._coordinator_moved()
        elif err.retriable:
            self.reenqueue()
        elif code in (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING):
            self.abortable_error_if_possible(err)
        elif code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
            self.fatal_error(ProducerFencedError(self.name))
        elif code in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE):
            self.fatal_error(err)
        elif code == GROUP_AUTHORIZATION_FAILED:
            self.abortable_error(GroupAuthorizationError(f"group {group}"))
        elif code == TRANSACTION_ABORTABLE:
            self.abortable_error(err)
        else:
            self.fatal_error(
                _unexpected(err, f"Unexpected error in AddOffsetsToTxnResponse: {err}")
            )


class TxnOffsetCommitHandler(TxnRequestHandler):
    api_key = TXN_OFFSET_COMMIT
    max_version = TXN_OFFSET_COMMIT_MAX_VERSION
    priority = Priority.ADD_PARTITIONS_OR_OFFSETS
    name = "TxnOffsetCommit"

    def __init__(
        self,
        tm: TransactionManager,
        result: TransactionalRequestResult,
        group_metadata: ConsumerGroupMetadata,
    ) -> None:
        super().__init__(tm, result)
        self.group_metadata = group_metadata
        g = group_metadata
        # the group membership fields (KIP-447) are v3+: an older broker cannot check them
        if g.generation_id >= 0 or g.member_id or g.group_instance_id is not None:
            self.min_version = 3
        idem = tm.idempotence
        self.producer_id = idem.producer_id
        self.producer_epoch = idem.producer_epoch

    @property
    def coordinator_type(self) -> CoordinatorType | None:
        return CoordinatorType.GROUP

    @property
    def coordinator_key(self) -> str | None:
        return self.group_metadata.group_id

    def body(self, version: int) -> dict[str, Any]:
        g = self.group_metadata
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), om in sorted(self.tm._pending_txn_offset_commits.items()):
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                    "committed_metadata": om.metadata,
                }
            )
        return {
            "transactional_id": self.tm.transactional_id,
            "group_id": g.group_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "generation_id": g.generation_id,
            "member_id": g.member_id,
            "group_instance_id": g.group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

    def handle_response(self, response: Any) -> None:
        tm = self.tm
        group = self.group_metadata.group_id
        coordinator_reloaded = False
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.name, int(p.partition_index))
                code = _code(p.error_code)
                if code == NONE:
                    tm._pending_txn_offset_commits.pop(tp, None)
                    continue
                err = error_for_code(code, f"TxnOffsetCommit {tp[0]}-{tp[1]} for group {group}")
                if code in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, REQUEST_TIMED_OUT):
                    if not coordinator_reloaded:
                        coordinator_reloaded = True
                        tm.lookup_coordinator(CoordinatorType.GROUP, group)
                    continue
                if err.retriable:
                    continue  # retried with the same coordinator
                if code == GROUP_AUTHORIZATION_FAILED:
                    self.abortable_error(GroupAuthorizationError(f"group {group}"))
                elif code in (FENCED_INSTANCE_ID, TRANSACTION_ABORTABLE):
                    self.abortable_error(err)
                elif code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    self.abortable_error(
                        CommitFailedError(
                            "Transaction offset Commit failed due to consumer group metadata "
                            f"mismatch: {err}"
                        )
                    )
                elif code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
                    self.fatal_error(ProducerFencedError(self.name))
                elif code in (
                    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    UNSUPPORTED_FOR_MESSAGE_FORMAT,
                ):
                    self.fatal_error(err)
                else:
                    self.fatal_error(
                        _unexpected(err, f"Unexpected error in TxnOffsetCommitResponse: {err}")
                    )
                break
            else:
                continue
            break
        if self.result.is_completed:
            tm._pending_txn_offset_commits.clear()
        elif not tm._pending_txn_offset_commits:
            self.result.done()
        else:
            self.reenqueue()  # the offsets that failed with a retriable error
