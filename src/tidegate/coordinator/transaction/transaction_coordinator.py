"""Kafka's TransactionCoordinator (transaction version 1), sans-IO.

Handles InitProducerId (with and without a transactional id), AddPartitionsToTxn (and
its verify-only form), AddOffsetsToTxn (as an add of the group's ``__consumer_offsets``
partition), EndTxn, DescribeTransactions and ListTransactions, with the checks, their
order and the error codes of Kafka 4.0's coordinator (the reference:
kafka-transactions-compaction-acls.md §2). Answers go to callbacks, called once, now
or after the transaction-log write is durable.

Completion: once PrepareCommit/PrepareAbort is durable the client is answered, then the
markers are written to every partition of the transaction
(:class:`TransactionMarkerChannelManager`) and CompleteCommit/CompleteAbort is appended.
At startup, transactions found in Prepare* get their markers again.

Timeouts run on the coordinator's timer (timing wheels driven by the broker's reaper):
every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` open transactions
past their timeout are fenced (epoch + 1) and aborted; every
``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle past
``transactional.id.expiration.ms`` are removed (a tombstone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidegate.clock import Clock, WallMs
from tidegate.coordinator.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
)
from tidegate.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from tidegate.coordinator.transaction.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
)
from tidegate.errors import ErrorCode
from tidegate.server.timer import FunctionTask, SystemTimer, TimerTask

if TYPE_CHECKING:
    from tidegate.coordinator.transaction.producer_id_manager import ProducerIdManager

log = logging.getLogger(__name__)

S = TransactionState
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    producer_id: int
    producer_epoch: int
    error: ErrorCode


def _init_error(error: ErrorCode) -> InitProducerIdResult:
    return InitProducerIdResult(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error)


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of one id (an error leaves the other fields at the
    message's defaults, as Kafka's does)."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    start_timestamp: int = 0
    partitions: tuple[TopicPartition, ...] = ()


class _Periodic(TimerTask):
    """A task that runs every ``period_ms`` on the coordinator's timer."""

    __slots__ = ("fn", "period_ms", "timer")

    def __init__(self, timer: SystemTimer, period_ms: int, fn: Callable[[], object]) -> None:
        super().__init__(period_ms)
        self.timer = timer
        self.period_ms = period_ms
        self.fn = fn

    def run(self) -> None:
        try:
            self.fn()
        except Exception:
            log.exception("transaction coordinator task failed")
        if not self.timer.is_shutdown:
            self.timer.add(_Periodic(self.timer, self.period_ms, self.fn))


COMPLETION_RETRY_BACKOFF_MS = 100
#: How long an AddPartitionsToTxn/AddOffsetsToTxn that arrives while the previous
#: transaction's markers are being written waits for them before it is answered
#: CONCURRENT_TRANSACTIONS (see :meth:`TransactionCoordinator._park_until_complete`).
COMPLETION_WAIT_MS = 500


class _CompletionWaiter:
    """A request parked until a transaction's Complete* is durable."""

    __slots__ = ("give_up", "retry", "task")

    def __init__(self, retry: Callable[[], None], give_up: Callable[[], None]) -> None:
        self.retry = retry
        self.give_up = give_up
        self.task: FunctionTask | None = None


class TransactionCoordinator:
    def __init__(
        self,
        config: TransactionConfig,
        state_manager: TransactionStateManager,
        producer_ids: ProducerIdManager,
        markers: TransactionMarkerChannelManager,
        timer: SystemTimer,
        clock: Clock,
    ) -> None:
        self.config = config
        self.txn_manager = state_manager
        self.producer_ids = producer_ids
        self.markers = markers
        self.timer = timer
        #: its wall clock stamps the transactions (persisted in __transaction_state, as
        #: Kafka's): their timeouts and expiry are measured on it; retries are timer tasks
        self.clock = clock
        self.active = False
        #: completed transactions (metrics)
        self.commits = 0
        self.aborts = 0
        #: requests waiting for a transaction's markers (transactional id -> waiters)
        self._completion_waiters: dict[str, list[_CompletionWaiter]] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def startup(self) -> None:
        """Load the transaction log, finish the transactions left in Prepare*, and start the
        timeout and expiry tasks."""
        for metadata in self.txn_manager.startup():
            log.info("completing transaction %s left in %s after a restart", metadata.transactional_id,
                     metadata.state)
            self._send_markers(self.txn_manager.coordinator_epoch, metadata)
        self.active = True
        self.timer.add(_Periodic(self.timer, self.config.abort_timed_out_transaction_cleanup_interval_ms,
                                 self.abort_timed_out_transactions))
        self.timer.add(_Periodic(self.timer, self.config.remove_expired_transaction_cleanup_interval_ms,
                                 self.remove_expired_transactional_ids))

    def shutdown(self) -> None:
        self.active = False
        self.txn_manager.shutdown()

    def _fenced(self, version_uses_producer_fenced: bool) -> ErrorCode:
        """PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for the request versions that predate it."""
        return ErrorCode.producer_fenced if version_uses_producer_fenced else ErrorCode.invalid_producer_epoch

    # -- InitProducerId -------------------------------------------------------------------------
    def handle_init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
        callback: Callable[[InitProducerIdResult], None],
        *,
        producer_fenced_supported: bool = True,
    ) -> None:
        """``expected``: the (producer id, epoch) the client has (v3+, KIP-360), or None."""
        if transactional_id is None:
            # an idempotent producer: always a fresh id at epoch 0 (v3 fields ignored)
            try:
                callback(InitProducerIdResult(self.producer_ids.generate(), 0, ErrorCode.none))
            except OSError as exc:
                log.error("cannot reserve a block of producer ids: %s", exc)
                callback(_init_error(ErrorCode.coordinator_load_in_progress))
            return
        if transactional_id == "":
            callback(_init_error(ErrorCode.invalid_request))
            return
        if not self.txn_manager.validate_transaction_timeout(transaction_timeout_ms):
            callback(_init_error(ErrorCode.invalid_transaction_timeout))
            return
        if not self.active:
            callback(_init_error(ErrorCode.coordinator_not_available))
            return
        now = self.clock.wall_milliseconds()
        metadata = self.txn_manager.get(transactional_id)
        if metadata is None:
            try:
                pid = self.producer_ids.generate()
            except OSError as exc:
                log.error("cannot reserve a block of producer ids: %s", exc)
                callback(_init_error(ErrorCode.coordinator_load_in_progress))
                return
            metadata = self.txn_manager.put_if_not_exists(TransactionMetadata(
                transactional_id, pid, NO_PRODUCER_EPOCH, transaction_timeout_ms, S.EMPTY, now,
            ))  # fmt: skip
        coordinator_epoch = self.txn_manager.coordinator_epoch
        prepared = self._prepare_init_producer_id_transit(
            metadata, transaction_timeout_ms, expected, now, producer_fenced_supported
        )
        if isinstance(prepared, ErrorCode):
            callback(_init_error(prepared))
            return
        if prepared.state is S.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction first; the client retries (CONCURRENT_TRANSACTIONS)
            # and that retry bumps the epoch again (or rotates the producer id).
            self._end_transaction(
                transactional_id, prepared.producer_id, prepared.producer_epoch, TransactionResult.ABORT,
                lambda _error: callback(_init_error(ErrorCode.concurrent_transactions)), from_client=False,
            )  # fmt: skip
            return

        def written(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                callback(InitProducerIdResult(prepared.producer_id, prepared.producer_epoch, ErrorCode.none))
            else:
                callback(_init_error(error))

        self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch, prepared, written)

    def _prepare_init_producer_id_transit(
        self, metadata: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None, now: WallMs,
        producer_fenced_supported: bool,
    ) -> TxnTransitMetadata | ErrorCode:  # fmt: skip
        def valid_producer_id(pid: int, epoch: int) -> bool:
            return (
                metadata.producer_epoch == NO_PRODUCER_EPOCH
                or pid == metadata.producer_id
                or (pid == metadata.prev_producer_id and is_epoch_exhausted(epoch))
            )

        if metadata.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None and not valid_producer_id(*expected):
            return self._fenced(producer_fenced_supported)
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                try:
                    new_pid = self.producer_ids.generate()
                except OSError:
                    return ErrorCode.coordinator_load_in_progress
                return metadata.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            transit = metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
            return transit if transit is not None else self._fenced(producer_fenced_supported)
        if state is S.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        raise RuntimeError(f"transactional id {metadata.transactional_id} found in state {state}")

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------
    def handle_add_partitions(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        callback: Callable[[ErrorCode], None],
        *,
        producer_fenced_supported: bool = True,
    ) -> None:
        if not transactional_id:
            callback(ErrorCode.invalid_request)
            return
        if not self.active:
            callback(ErrorCode.coordinator_not_available)
            return
        wanted = set(partitions)
        metadata = self.txn_manager.get(transactional_id)
        if metadata is None:
            callback(ErrorCode.invalid_producer_id_mapping)
            return
        if (
            metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
            and metadata.producer_id == producer_id
            and metadata.producer_epoch == producer_epoch
        ):
            # the next transaction's first call, right after EndTxn: wait for the markers
            # (one fsync or two) instead of answering CONCURRENT_TRANSACTIONS
            self._park_until_complete(
                transactional_id,
                lambda: self.handle_add_partitions(
                    transactional_id, producer_id, producer_epoch, wanted, callback,
                    producer_fenced_supported=producer_fenced_supported,
                ),
                lambda: callback(ErrorCode.concurrent_transactions),
            )  # fmt: skip
            return
        if metadata.pending_transition_in_progress:
            callback(ErrorCode.concurrent_transactions)
        elif metadata.producer_id != producer_id:
            callback(ErrorCode.invalid_producer_id_mapping)
        elif metadata.producer_epoch != producer_epoch:
            callback(self._fenced(producer_fenced_supported))
        elif metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            callback(ErrorCode.concurrent_transactions)
        elif metadata.state is S.ONGOING and wanted <= metadata.topic_partitions:
            callback(ErrorCode.none)
        else:
            now = self.clock.wall_milliseconds()
            transit = metadata.prepare_add_partitions(wanted, now)
            self.txn_manager.append_transaction_to_log(
                transactional_id, self.txn_manager.coordinator_epoch, transit, callback
            )

    def _park_until_complete(
        self, transactional_id: str, retry: Callable[[], None], give_up: Callable[[], None]
    ) -> None:
        """Run ``retry`` once the transaction's Complete* is durable (or its markers are
        given up), or ``give_up`` after COMPLETION_WAIT_MS.

        Kafka answers a call that arrives while the previous transaction's markers are
        written with CONCURRENT_TRANSACTIONS, and clients retry after a backoff (20 ms in
        Java and librdkafka): with back-to-back transactions that backoff, not the
        markers, is most of each transaction's cost. Here the markers are local appends
        that complete within a few ms, so the call waits for them and gets the answer its
        retry would have got; a completion slower than COMPLETION_WAIT_MS (a failing
        disk) still gets CONCURRENT_TRANSACTIONS."""
        waiter = _CompletionWaiter(retry, give_up)
        waiters = self._completion_waiters.setdefault(transactional_id, [])
        waiters.append(waiter)

        def expire() -> None:
            current = self._completion_waiters.get(transactional_id)
            if current is not None and waiter in current:
                current.remove(waiter)
                if not current:
                    del self._completion_waiters[transactional_id]
                give_up()

        waiter.task = FunctionTask(COMPLETION_WAIT_MS, expire)
        self.timer.add(waiter.task)

    def _completion_done(self, transactional_id: str) -> None:
        """The transaction's markers are written (or given up): run the parked calls."""
        for waiter in self._completion_waiters.pop(transactional_id, ()):
            if waiter.task is not None:
                waiter.task.cancel()
            waiter.retry()

    def handle_verify_partitions(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:  # fmt: skip
        """AddPartitionsToTxn verify_only (KIP-890 part 1): changes nothing. Returns a
        transaction-level error, else each partition's: NONE if in the transaction, else
        TRANSACTION_ABORTABLE."""
        wanted = list(partitions)
        if not transactional_id:
            return ErrorCode.invalid_request, {}
        if not self.active:
            return ErrorCode.coordinator_not_available, {}
        metadata = self.txn_manager.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, {}
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, {}
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, {}
        in_txn = metadata.topic_partitions if metadata.state is S.ONGOING else set()
        return ErrorCode.none, {tp: ErrorCode.none if tp in in_txn else ErrorCode.transaction_abortable for tp in wanted}

    # -- EndTxn ---------------------------------------------------------------------------------
    def handle_end_transaction(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        callback: Callable[[ErrorCode], None],
        *,
        producer_fenced_supported: bool = True,
    ) -> None:
        if not transactional_id:
            callback(ErrorCode.invalid_request)
            return
        if not self.active:
            callback(ErrorCode.coordinator_not_available)
            return
        self._end_transaction(transactional_id, producer_id, producer_epoch, result, callback,
                              from_client=True, producer_fenced_supported=producer_fenced_supported)

    def _end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, result: TransactionResult,
        callback: Callable[[ErrorCode], None], *, from_client: bool, producer_fenced_supported: bool = True,
    ) -> None:  # fmt: skip
        metadata = self.txn_manager.get(transactional_id)
        if metadata is None:
            callback(ErrorCode.invalid_producer_id_mapping)
            return
        coordinator_epoch = self.txn_manager.coordinator_epoch
        commit = result is TransactionResult.COMMIT
        is_epoch_fence = False
        if metadata.producer_id != producer_id:
            callback(ErrorCode.invalid_producer_id_mapping)
            return
        # strict equality for clients (they never bump the epoch); the coordinator's own
        # aborts come with the fenced (bumped) epoch
        if (from_client and producer_epoch != metadata.producer_epoch) or producer_epoch < metadata.producer_epoch:
            callback(self._fenced(producer_fenced_supported))
            return
        if metadata.pending_transition_in_progress and metadata.pending_state is not S.PREPARE_EPOCH_FENCE:
            callback(ErrorCode.concurrent_transactions)
            return
        state = metadata.state
        if state is S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if next_state is S.PREPARE_ABORT and metadata.pending_state is S.PREPARE_EPOCH_FENCE:
                # the fence: clear the pending state and take the bumped epoch into the abort
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            now = self.clock.wall_milliseconds()
            transit = metadata.prepare_abort_or_commit(next_state, now)
        elif state is S.COMPLETE_COMMIT:
            callback(ErrorCode.none if commit else ErrorCode.invalid_txn_state)
            return
        elif state is S.COMPLETE_ABORT:
            callback(ErrorCode.none if not commit else ErrorCode.invalid_txn_state)
            return
        elif state is S.PREPARE_COMMIT:
            callback(ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state)
            return
        elif state is S.PREPARE_ABORT:
            callback(ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state)
            return
        elif state is S.EMPTY:
            callback(ErrorCode.invalid_txn_state)
            return
        else:
            raise RuntimeError(f"transactional id {transactional_id} found in state {state}")

        def prepared(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                if is_epoch_fence:
                    m = self.txn_manager.get(transactional_id)
                    if m is not None:
                        m.has_failed_epoch_fence = True
                callback(error)
                return
            m = self.txn_manager.get(transactional_id)
            if m is None or coordinator_epoch != self.txn_manager.coordinator_epoch:
                callback(ErrorCode.not_coordinator)
                return
            if m.producer_id != producer_id:
                callback(ErrorCode.invalid_producer_id_mapping)
            elif m.producer_epoch != producer_epoch:
                callback(ErrorCode.producer_fenced)
            elif m.pending_transition_in_progress:
                callback(ErrorCode.concurrent_transactions)
            elif m.state is not (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                callback(ErrorCode.invalid_txn_state)
            else:
                # answer now: the markers and the completion follow
                callback(ErrorCode.none)
                self._send_markers(coordinator_epoch, m)

        self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch, transit, prepared)

    def _send_markers(self, coordinator_epoch: int, metadata: TransactionMetadata) -> None:
        """Write the markers of a transaction in Prepare*, then append Complete*."""
        commit = metadata.state is S.PREPARE_COMMIT
        transactional_id = metadata.transactional_id
        # Complete* is prepared now, so the transaction counts as pending until it is durable
        complete = metadata.prepare_complete(self.clock.wall_milliseconds())
        pending = set(metadata.topic_partitions)
        abandoned = False

        def done(tp: TopicPartition, error: ErrorCode) -> None:
            nonlocal abandoned
            if abandoned:
                return
            if error is not ErrorCode.none:
                abandoned = True
                log.info("giving up the markers of transaction %s: %s", transactional_id, error.name)
                metadata.pending_state = None
                self._completion_done(transactional_id)
                return
            pending.discard(tp)
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                metadata.topic_partitions.discard(tp)
            if not pending:
                self._write_completion(coordinator_epoch, transactional_id, complete, commit)

        if not pending:
            self._write_completion(coordinator_epoch, transactional_id, complete, commit)
            return
        self.markers.write_markers(metadata.producer_id, metadata.producer_epoch, coordinator_epoch,
                                   commit, sorted(pending), done)

    def _write_completion(
        self, coordinator_epoch: int, transactional_id: str, complete: TxnTransitMetadata, commit: bool
    ) -> None:
        def written(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                if commit:
                    self.commits += 1
                else:
                    self.aborts += 1
            elif error in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator) and self.active:
                log.info("writing %s of %s failed (%s); retrying", complete.state, transactional_id, error.name)
                self.timer.add(FunctionTask(COMPLETION_RETRY_BACKOFF_MS, lambda: self._write_completion(
                    coordinator_epoch, transactional_id, complete, commit)))
                return
            else:
                log.error("writing %s of %s failed: %s", complete.state, transactional_id, error.name)
            self._completion_done(transactional_id)

        self.txn_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, complete, written,
            retry_on_error=lambda e: e in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator),
        )

    # -- timeouts and expiry --------------------------------------------------------------------
    def abort_timed_out_transactions(self) -> int:
        """Fence (epoch + 1) and abort every Ongoing transaction past its timeout."""
        if not self.active:
            return 0
        aborted = 0
        for metadata in self.txn_manager.timed_out_transactions():
            if metadata.pending_transition_in_progress:
                continue
            transit = metadata.prepare_fence_producer_epoch()
            log.info("aborting transaction %s of producer %d: open longer than its timeout of %d ms",
                     metadata.transactional_id, metadata.producer_id, metadata.txn_timeout_ms)
            aborted += 1
            txn_id = metadata.transactional_id

            def ended(error: ErrorCode, txn_id: str = txn_id) -> None:
                if error not in (ErrorCode.none, ErrorCode.concurrent_transactions):
                    log.info("aborting timed-out transaction %s failed: %s", txn_id, error.name)

            self._end_transaction(txn_id, transit.producer_id, transit.producer_epoch, TransactionResult.ABORT,
                                  ended, from_client=False)
        return aborted

    def remove_expired_transactional_ids(self) -> int:
        """Write a tombstone for every id idle past transactional.id.expiration.ms."""
        if not self.active:
            return 0
        expired = self.txn_manager.expired_transactional_ids()
        for metadata in expired:
            transit = metadata.prepare_dead()
            txn_id = metadata.transactional_id

            def written(error: ErrorCode, txn_id: str = txn_id) -> None:
                if error is ErrorCode.none:
                    log.info("transactional id %s expired", txn_id)

            self.txn_manager.append_transaction_to_log(
                txn_id, self.txn_manager.coordinator_epoch, transit, written
            )
        return len(expired)

    # -- metrics ---------------------------------------------------------------------------------
    def state_counts(self) -> dict[str, int]:
        """Transactional ids per state name (Dead ones are being removed: not counted)."""
        counts: dict[str, int] = {}
        for m in self.txn_manager.all():
            if m.state is not S.DEAD:
                counts[m.state.state_name] = counts.get(m.state.state_name, 0) + 1
        return counts

    def oldest_open_transaction_age_ms(self) -> int:
        """How long the oldest transaction not yet complete has been open (0: none)."""
        starts = [m.txn_start_timestamp for m in self.txn_manager.all()
                  if m.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT) and m.txn_start_timestamp >= 0]
        return max(0, self.clock.wall_milliseconds() - min(starts)) if starts else 0

    # -- DescribeTransactions / ListTransactions ------------------------------------------------
    def handle_describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        out = []
        for txn_id in transactional_ids:
            if not txn_id:
                out.append(TransactionDescription(txn_id, ErrorCode.invalid_request))
                continue
            if not self.active:
                out.append(TransactionDescription(txn_id, ErrorCode.coordinator_not_available))
                continue
            m = self.txn_manager.get(txn_id)
            if m is None or m.state is S.DEAD:
                out.append(TransactionDescription(txn_id, ErrorCode.transactional_id_not_found))
                continue
            out.append(TransactionDescription(
                txn_id, ErrorCode.none, m.state.state_name, m.producer_id, m.producer_epoch, m.txn_timeout_ms,
                m.txn_start_timestamp, tuple(sorted(m.topic_partitions)),
            ))  # fmt: skip
        return out

    def handle_list_transactions(
        self, state_filters: Iterable[str], producer_id_filters: Iterable[int], duration_filter_ms: int,
    ) -> tuple[ErrorCode, list[tuple[str, int, str]], list[str]]:  # fmt: skip
        """(error, [(transactional id, producer id, state)], unknown state filters)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, [], []
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_filters:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pids = set(producer_id_filters)
        now = self.clock.wall_milliseconds()
        out = []
        for m in self.txn_manager.all():
            if m.state is S.DEAD:
                continue
            if states and m.state not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if duration_filter_ms >= 0 and m.txn_start_timestamp >= 0 and now - m.txn_start_timestamp <= duration_filter_ms:
                continue
            out.append((m.transactional_id, m.producer_id, m.state.state_name))
        return ErrorCode.none, sorted(out), unknown
