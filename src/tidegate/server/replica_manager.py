"""Kafka's ReplicaManager: everything an append or a fetch implies.

:meth:`ReplicaManager.append_records` validates the partitions of a Produce (or of a
coordinator's write to an internal topic), appends to the logs, counts the appended
bytes that parked fetches wait for, asks the group-commit flusher for an fsync when
``acks=all``, and either answers at once or parks a :class:`DelayedProduce` in the
produce purgatory; the wake-ups of fetches parked on the appended partitions go on the
action queue, run once the producer's response is written
(:meth:`try_complete_actions`, Kafka's ActionQueue). :meth:`fetch_messages` reads the
logs and answers at once or parks a :class:`DelayedFetch` until ``min_bytes`` arrive;
:meth:`fetch_session_messages` does the same for an incremental fetch session's dirty
partitions (appends mark them dirty in the sessions through ``fetch_sessions``), parked
as one :class:`SessionDelayedFetch` on the session's key.
:meth:`delete_records` moves log start offsets (DeleteRecords) and answers once they
are durable; :meth:`last_offset_for_leader_epoch` answers OffsetForLeaderEpoch.

Both report through a callback, called exactly once, now or later: the caller
(KafkaApis, the group coordinator) never needs to know whether the operation waited.
Plain objects driven by the caller's time, no event loop: the flusher's fsync runs on
the scheduler it was given.

One node leads every partition, so there is no replication: ``acks=all`` means "fsynced"
(see docs/durability.md), and the high watermark is the log end offset.

Transactions (docs/transactions.md): a client's transactional batch is appended only if
its partition is in the producer's transaction (KIP-890 part 1): when the partition has no
transaction open for that producer id and epoch, the transaction coordinator is asked
(``transaction_verifier``, in-process and synchronous on one node, so no verification
guard is needed: nothing can run between the answer and the append). A ``read_committed``
fetch reads up to the partition's last stable offset and gets the aborted transactions
its data overlaps.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tidegate.clock import Clock
from tidegate.errors import CodedError, ErrorCode, OffsetOutOfRangeError
from tidegate.log.dir_failure import StorageError
from tidegate.log.index import AbortedTxn
from tidegate.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from tidegate.log.log import Log
from tidegate.record.file_region import FileRegion
from tidegate.record.record_batch import (
    RecordBatchError,
    is_transactional_batch,
    read_header,
)
from tidegate.server.delayed_fetch import (
    DelayedFetch,
    FetchAnswer,
    FetchCompletionBatch,
    FetchPartitionStatus,
    SessionDelayedFetch,
    SessionFetchAnswer,
)
from tidegate.server.delayed_produce import DelayedProduce
from tidegate.server.fetch_session import FetchSession, FetchSessionCache, session_watch_key
from tidegate.server.log_flusher import LogFlusher
from tidegate.server.log_manager import LogManager, TopicPartition
from tidegate.server.metadata import TopicInfo
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.timer import SystemTimer
from tidegate.utils import INT32_MAX
from tidegate.utils.topic import is_internal_topic

if TYPE_CHECKING:
    from tidegate.metrics.request_metrics import TopicMetrics
    from tidegate.scheduler import Scheduler

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

#: TransactionCoordinator.handle_verify_partitions: (transactional id, producer id, epoch,
#: partitions) -> (transaction-level error, per-partition error)
TransactionVerifier = Callable[
    [str, int, int, list[tuple[str, int]]], tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]
]

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class PartitionStateEntity(Protocol[P_co]):
    """A response's partition class with Metadata's partition fields
    (``MetadataResponsePartition``, ``DescribeTopicPartitionsResponsePartition``)."""

    def __call__(
        self, *, error_code: int, partition_index: int, leader_id: int, leader_epoch: int,
        replica_nodes: list[int], isr_nodes: list[int], offline_replicas: list[int],
    ) -> P_co: ...


#: Verification errors older producers would not retry: Kafka answers NOT_ENOUGH_REPLICAS
#: (retriable, no metadata refresh) instead.
_VERIFICATION_RETRIABLE = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
})  # fmt: skip


class PartitionResponse:
    """One partition's append result (Kafka's ProduceResponse.PartitionResponse).

    A plain slotted class rather than a dataclass: one is made per partition of every
    Produce, so its construction stays a single frame."""

    __slots__ = ("base_offset", "error", "error_message", "log_append_time", "log_start_offset",
                 "record_errors")

    def __init__(
        self,
        error: ErrorCode = ErrorCode.none,
        base_offset: int = -1,
        log_append_time: int = -1,
        log_start_offset: int = -1,
        error_message: str | None = None,
        record_errors: tuple[tuple[int, str | None], ...] = (),
    ) -> None:
        self.error = error
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.error_message = error_message
        #: (batch index, message): Kafka's record_errors
        self.record_errors = record_errors

    def __repr__(self) -> str:
        return (f"PartitionResponse({self.error.name}, base_offset={self.base_offset}, "
                f"message={self.error_message!r})")


@dataclass(slots=True)
class FetchPartition:
    """One partition of a fetch (Kafka's FetchRequest.PartitionData). ``key`` is None
    when the request named a topic the broker does not know. The epochs are -1 when the
    request version has none (Fetch v9+ current_leader_epoch, v12+ last_fetched_epoch)."""

    key: TopicPartition | None
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchPartitionData:
    """What a fetch read from one partition (Kafka's FetchPartitionData)."""

    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    #: the batches read: a region of a segment file (sent from the file), or b""
    records: bytes | FileRegion = b""
    #: read_committed: the aborted transactions the records overlap (None: read_uncommitted)
    aborted_transactions: list[AbortedTxn] | None = None
    #: (epoch, end offset) when last_fetched_epoch shows the fetcher's log diverged
    diverging_epoch: tuple[int, int] | None = None
    #: one read answering several fetches of a completion batch (records in memory;
    #: nobody changes it): see :class:`~tidegate.server.delayed_fetch.FetchCompletionBatch`
    shared: bool = False


def check_leader_epoch(plog: Log, current_leader_epoch: int) -> ErrorCode:
    """Kafka's ``Partition.checkCurrentLeaderEpoch``: a client's epoch (-1: none given)
    older than the partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH."""
    if current_leader_epoch == -1 or current_leader_epoch == plog.leader_epoch:
        return ErrorCode.none
    if current_leader_epoch < plog.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


def deletion_allowed(plog: Log) -> bool:
    """Whether the topic's ``cleanup.policy`` includes ``delete`` (Kafka's
    ``LogConfig.delete``)."""
    return plog.config.delete


@dataclass(slots=True)
class DeleteRecordsResult:
    """One partition of DeleteRecords (Kafka's DeleteRecordsPartitionResult)."""

    error: ErrorCode = ErrorCode.none
    low_watermark: int = -1
    error_message: str | None = None


@dataclass(slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    #: the response's byte limit: the request's max_bytes, lowered by a fetch quota
    max_bytes: int = INT32_MAX
    #: 0 read_uncommitted (up to the high watermark), 1 read_committed (up to the LSO)
    isolation_level: int = READ_UNCOMMITTED


class ActionQueue:
    """Work to run once the current responses are written (Kafka's ActionQueue)."""

    __slots__ = ("_actions",)

    def __init__(self) -> None:
        self._actions: deque[Callable[[], object]] = deque()

    def add(self, action: Callable[[], object]) -> None:
        self._actions.append(action)

    def try_complete_actions(self) -> None:
        actions = self._actions
        while actions:
            action = actions.popleft()
            try:
                action()
            except Exception:
                log.exception("a delayed action failed")

    def __len__(self) -> int:
        return len(self._actions)


class ReplicaManager:
    def __init__(
        self,
        logs: LogManager,
        scheduler: Scheduler,
        *,
        clock: Clock,
        fetch_sessions: FetchSessionCache,
        fetch_purge_interval: int = 1000,
        produce_purge_interval: int = 1000,
        node_id: int = 1,
        topic_stats: TopicMetrics | None = None,
    ) -> None:
        self.logs = logs
        self.scheduler = scheduler
        #: appends read its wall clock (LogAppendTime, retention, roll: Kafka's ``time``)
        self.clock = clock
        #: this node: the leader, only replica and only ISR member of every partition
        self.node_id = node_id
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=clock), fetch_purge_interval)
        self.produce_purgatory = DelayedOperationPurgatory(
            "Produce", SystemTimer(clock=clock), produce_purge_interval
        )
        # group commit for acks=all: each fsync round completes the produces it covered
        #: the log dir's I/O failures: full (writes refused until space returns) or offline
        self.failure_channel = logs.failure_channel
        self.flusher = LogFlusher(
            self.produce_purgatory.check_and_complete, scheduler.submit, self._flush_failed
        )
        self.action_queue = ActionQueue()
        # Bytes appended per partition since start: a monotonic count that parked
        # fetches compare against (DelayedFetch), unaffected by retention.
        self.appended_bytes: dict[TopicPartition, int] = {}
        #: the KIP-227 session cache (KafkaApis'), told of every change to a log so each
        #: session knows which of its partitions an incremental fetch must read
        self.fetch_sessions = fetch_sessions
        logs.log_start_moved = self._log_changed
        #: per-topic byte and message counts (tidegate.metrics), when metrics are on
        self.topic_stats = topic_stats
        #: the transaction coordinator's verification (KIP-890 part 1), set by BrokerCore
        #: when transaction.partition.verification.enable is true
        self.transaction_verifier: TransactionVerifier | None = None
        #: KIP-932: told of the partitions appended to (high watermark or last stable
        #: offset moved) or removed, where parked fetches are woken: share fetches parked
        #: on them try again (``SharePartitionManager.partitions_changed``, set by BrokerCore)
        self.share_fetch_wakeup: Callable[[Sequence[TopicPartition]], None] | None = None
        #: while parked fetches complete on an append: what they share (issue 29)
        self.completion_batch: FetchCompletionBatch | None = None

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.logs.get((topic, partition))

    def partition_states(self, info: TopicInfo, entity: PartitionStateEntity[P]) -> list[P]:
        """Every partition of a topic as Metadata and DescribeTopicPartitions describe it
        (``entity``: the response's partition class): this node leads each, alone in its
        replicas and ISR, at the log's leader epoch."""
        node = self.node_id
        logs = self.logs.logs
        # An offline log dir (docs/reliability.md): this node stays the leader, so clients
        # keep asking it and get KAFKA_STORAGE_ERROR, and lists itself as an offline replica.
        offline = self.failure_channel.offline
        error = ErrorCode.kafka_storage_error if offline else ErrorCode.none
        out = []
        for p in range(info.partitions):
            plog = logs.get((info.name, p))
            out.append(
                entity(
                    error_code=error,
                    partition_index=p,
                    leader_id=node,
                    leader_epoch=plog.leader_epoch if plog is not None else 0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[node] if offline else [],
                )
            )
        return out

    # -- append ---------------------------------------------------------------------------
    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: Mapping[TopicPartition, Any],
        callback: Callable[[dict[TopicPartition, PartitionResponse]], None],
        *,
        internal_topics_allowed: bool = False,
        from_client: bool = True,
        transactional_id: str | None = None,
        generic_txn_errors: bool = True,
    ) -> dict[TopicPartition, PartitionResponse]:
        """Append each partition's records (one batch per partition from clients) and
        call ``callback`` with every partition's result: at once, or for ``acks=-1``
        once the appended data is fsynced or ``timeout_ms`` passes (REQUEST_TIMED_OUT).

        ``internal_topics_allowed`` is for the coordinators' own writes; a client's
        append to an internal topic is refused with INVALID_TOPIC_EXCEPTION. Returns the
        results as they are once appended (the same objects the callback gets; an acks=all
        wait may still turn a partition's error into REQUEST_TIMED_OUT).

        A client's transactional batches (from ``transactional_id``) are verified first
        (see the module doc); ``generic_txn_errors`` (Produce v11+) lets a partition that
        is not in the transaction answer TRANSACTION_ABORTABLE rather than INVALID_TXN_STATE.

        One function, as Kafka's ``appendRecords``/``appendToLocalLog``: each partition's
        checks lead to its append in one loop, then the acks=-1 wait.
        """
        results: dict[TopicPartition, PartitionResponse] = {}
        if required_acks not in (0, 1, -1):
            for key in entries:
                results[key] = PartitionResponse(ErrorCode.invalid_required_acks)
            callback(results)
            return results
        if from_client:
            refused = self._verify_transactional(entries, transactional_id, generic_txn_errors)
            if refused:
                results.update(refused)
                entries = {k: v for k, v in entries.items() if k not in refused}
        pending: dict[TopicPartition, tuple[Log, int, PartitionResponse]] = {}
        appended: list[TopicPartition] = []
        stats = self.topic_stats
        failures = self.failure_channel
        now_ms = self.clock.wall_milliseconds()
        for key, records in entries.items():
            result = results[key] = PartitionResponse()
            topic, partition = key
            if not internal_topics_allowed and is_internal_topic(topic):
                result.error = ErrorCode.invalid_topic_exception
                result.error_message = f"Cannot append to internal topic {topic}"
                continue
            plog = self.logs.logs.get(key)
            if plog is None:
                result.error = ErrorCode.unknown_topic_or_partition
                continue
            if failures.offline:
                result.error = ErrorCode.kafka_storage_error
                result.error_message = failures.offline_reason
                continue
            if not records:
                result.error = ErrorCode.corrupt_message
                result.error_message = "empty records"
                continue
            min_isr = plog.config.min_insync_replicas
            if required_acks == -1 and min_isr > 1:
                # Kafka's Partition.appendRecordsToLeader: one node is an ISR of one
                result.error = ErrorCode.not_enough_replicas
                result.error_message = (
                    f"The size of the current ISR Set({self.node_id}) is insufficient to "
                    f"satisfy the min.isr requirement of {min_isr} for partition {topic}-{partition}"
                )
                continue
            try:
                info = plog.append(
                    records, now_ms, from_client=from_client, single_batch=from_client,
                    auto_flush=from_client,
                )
            except RecordBatchError as exc:
                result.error = ErrorCode(exc.error_code)
                result.error_message = str(exc)
                result.record_errors = exc.record_errors
                log.info("produce to %s-%d rejected: %s", topic, partition, exc)
                continue
            except CodedError as exc:
                # the producer-state checks (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...)
                result.error = ErrorCode(exc.code)
                result.error_message = exc.message
                log.info("produce to %s-%d rejected: %s", topic, partition, exc)
                continue
            except StorageError as exc:
                # Kafka's KafkaStorageException: one line from the failure channel, no
                # traceback, and the partition answers KAFKA_STORAGE_ERROR
                failures.error(exc)
                result.error = ErrorCode.kafka_storage_error
                result.error_message = f"{topic}-{partition}: {exc}"
                continue
            failures.write_succeeded()
            result.base_offset = info.first_offset
            result.log_append_time = info.log_append_time_ms
            result.log_start_offset = plog.log_start_offset
            if info.duplicate:
                # An idempotent producer's retry: answered with the original offsets,
                # nothing appended (acks=all still waits for the original's fsync).
                log.debug("duplicate batch to %s-%d: original base offset %d", topic, partition,
                          info.first_offset)
            elif stats is not None:
                stats.appended(topic, info.num_records, info.size_bytes)
            self.appended_bytes[key] = self.appended_bytes.get(key, 0) + info.size_bytes
            appended.append(key)
            if required_acks == -1:
                pending[key] = (plog, info.last_offset, result)
                self.flusher.request(key, plog)
        if appended:
            # Fetches parked on these partitions re-read and answer once this append's
            # own response is out: with many parked consumers that work must not delay it.
            # A session's parked fetch waits on its session's key instead.
            self.action_queue.add(functools.partial(self._wake_fetches, appended, self._sessions_changed(appended)))
            if not from_client:
                # a coordinator's write (a transaction marker, a group's offsets) may come
                # from a timer or an fsync completion, after which no response is written
                # to run the queue: run it on the next turn of the loop
                self.scheduler.call_soon(self.try_complete_actions)
        if not pending:
            callback(results)
            return results
        op = DelayedProduce(timeout_ms, pending, self, lambda: callback(results))
        self.produce_purgatory.try_complete_else_watch(op, list(pending))
        return results

    def _wake_fetches(self, appended: list[TopicPartition], sessions: list[Any]) -> None:
        """Parked fetches (and share fetches) on appended partitions, and the parked
        fetches of the sessions holding them, try to complete."""
        check = self.fetch_purgatory.check_and_complete
        with self._completion_batch():
            for key in appended + sessions:
                check(key)
        if self.share_fetch_wakeup is not None:
            self.share_fetch_wakeup(appended)

    def expire_fetches(self) -> bool:
        """The fetch purgatory's timer advance (``TimerReaper``): the fetches expiring at
        one tick (no append completed them) share their reads like an append's wake-up."""
        with self._completion_batch():
            return self.fetch_purgatory.advance_clock()

    @contextlib.contextmanager
    def _completion_batch(self) -> Iterator[None]:
        """Fetches completed meanwhile share a :class:`FetchCompletionBatch` (a nested
        wake-up joins the outer one)."""
        if self.completion_batch is not None:
            yield
            return
        self.completion_batch = FetchCompletionBatch()
        try:
            yield
        finally:
            self.completion_batch = None

    def _verify_transactional(
        self, entries: Mapping[TopicPartition, Any], transactional_id: str | None, generic_errors: bool
    ) -> dict[TopicPartition, PartitionResponse]:
        """Kafka's ``handleProduceAppend``: the partitions refused before appending. Every
        transactional batch of a request must come from one producer id and epoch (else
        INVALID_PRODUCER_ID_MAPPING for all); each partition without that producer's
        transaction open is checked with the coordinator."""
        producers: set[tuple[int, int]] = set()
        transactional: list[TopicPartition] = []
        for key, records in entries.items():
            if is_transactional_batch(records):
                h = read_header(records)
                if h.producer_id >= 0:
                    producers.add((h.producer_id, h.producer_epoch))
                    transactional.append(key)
        if not producers:
            return {}
        if len(producers) > 1:
            ipim = "Transactional records contained more than one producer ID"
            return {k: PartitionResponse(ErrorCode.invalid_producer_id_mapping, error_message=ipim) for k in entries}
        if transactional_id is None:
            return {}
        pid, epoch = next(iter(producers))
        refused: dict[TopicPartition, PartitionResponse] = {}
        for key, e in self.verify_transaction(transactional_id, pid, epoch, transactional, generic_errors).items():
            message: str | None = None
            if e is ErrorCode.invalid_txn_state:
                message = "Partition was not added to the transaction"
            elif e in _VERIFICATION_RETRIABLE:
                message = f"Unable to verify the partition has been added to the transaction. Underlying error: {e.name}"
                e = ErrorCode.not_enough_replicas
            refused[key] = PartitionResponse(e, error_message=message)
        return refused

    def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition],
        generic_errors: bool,
    ) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """KIP-890 part 1 for Produce and TxnOffsetCommit (Kafka's
        ``maybeStartTransactionVerificationForPartitions`` with AddPartitionsToTxnManager's
        error mapping): the partitions the transaction coordinator does not confirm are in
        this producer's transaction, each with its error. A partition already holding the
        producer's open transaction at this epoch is not asked about; an unknown one is
        left to the append. PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, and
        TRANSACTION_ABORTABLE INVALID_TXN_STATE unless ``generic_errors`` (the request
        versions that know it). Empty when verification is off."""
        verifier = self.transaction_verifier
        if verifier is None:
            return {}
        logs = self.logs.logs
        unverified = [k for k in partitions if (plog := logs.get(k)) is not None
                      and not plog.has_ongoing_transaction(producer_id, producer_epoch)]  # fmt: skip
        if not unverified:
            return {}
        error, per_partition = verifier(transactional_id, producer_id, producer_epoch, unverified)
        refused: dict[TopicPartition, ErrorCode] = {}
        for key in unverified:
            e = error if error is not ErrorCode.none else per_partition.get(key, ErrorCode.none)
            if e is ErrorCode.none:
                continue
            if e is ErrorCode.producer_fenced:
                e = ErrorCode.invalid_producer_epoch
            elif e is ErrorCode.transaction_abortable and not generic_errors:
                e = ErrorCode.invalid_txn_state
            refused[key] = e
        return refused

    # -- fetch ----------------------------------------------------------------------------
    def read_from_log(
        self, params: FetchParams, partitions: Sequence[FetchPartition],
        batch: FetchCompletionBatch | None = None,
    ) -> tuple[list[FetchPartitionData], int]:
        """Read every partition within the limits; (results in request order, bytes read).

        KIP-74: the first batch of the first partition with data is returned even when
        it exceeds the limits, so a consumer always makes progress; every later
        partition stays within both its own and the response's limit.

        With ``batch`` (a parked fetch completing with others), a read that another
        fetch of the batch made the same way is shared (:class:`FetchCompletionBatch`).
        (One loop, as Kafka's ``readFromLog``: each partition's checks lead to its read.)
        """
        remaining = params.max_bytes
        total = 0
        out = []
        logs = self.logs.logs
        for fp in partitions:
            plog = logs.get(fp.key) if fp.key is not None else None
            if plog is None:
                out.append(FetchPartitionData(ErrorCode.unknown_topic_or_partition))
                continue
            if self.failure_channel.offline:
                # Kafka: an offline log dir's partitions
                out.append(FetchPartitionData(ErrorCode.kafka_storage_error))
                continue
            epoch_error = check_leader_epoch(plog, fp.current_leader_epoch)
            if epoch_error is not ErrorCode.none:
                out.append(FetchPartitionData(epoch_error))  # Kafka answers these with no offsets (-1)
                continue
            log_start, hw, lso, log_end = plog.fetch_offsets()
            if fp.last_fetched_epoch >= 0:
                # KIP-320 (Kafka's Partition.readRecords): the fetcher's last epoch must end
                # at or after its fetch offset here, else its log diverged from ours.
                epoch, end = plog.leader_epoch_cache.end_offset_for(fp.last_fetched_epoch, log_end)
                if (
                    end == UNDEFINED_EPOCH_OFFSET
                    or epoch == UNDEFINED_EPOCH
                    or fp.fetch_offset < log_start
                ):
                    out.append(FetchPartitionData(ErrorCode.offset_out_of_range))
                    continue
                if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
                    # answered with the partition's offsets, as Kafka's readRecords does
                    out.append(FetchPartitionData(high_watermark=hw, last_stable_offset=lso,
                                                  log_start_offset=log_start, diverging_epoch=(epoch, end)))
                    continue
            if fp.fetch_offset < log_start or fp.fetch_offset > log_end:
                # Kafka's createLogReadResult(e): an error answers no offsets (-1)
                out.append(FetchPartitionData(ErrorCode.offset_out_of_range))
                continue
            limit = min(fp.max_bytes, remaining)
            share_key = None
            if batch is not None:
                read_key = (plog, fp.fetch_offset, limit, total == 0, params.isolation_level, hw, lso,
                            log_start, log_end)
                seen = batch.lookup(read_key)
                if seen is True:  # the second to read it: kept for the others
                    share_key = read_key
                elif seen is not False:  # another fetch's read, as is
                    out.append(seen)
                    total += len(seen.records)
                    remaining -= len(seen.records)
                    continue
            data = FetchPartitionData(high_watermark=hw, last_stable_offset=lso, log_start_offset=log_start)
            out.append(data)
            records: bytes | FileRegion = b""
            try:
                if params.isolation_level == READ_COMMITTED:
                    records = plog.read_region(
                        fp.fetch_offset, max(limit, 0), min_one_batch=total == 0, max_offset=lso
                    )
                    data.aborted_transactions = (
                        plog.collect_aborted_transactions(fp.fetch_offset, plog.fetch_upper_bound(fp.fetch_offset))
                        if records else []
                    )  # fmt: skip
                else:
                    records = plog.read_region(fp.fetch_offset, max(limit, 0), min_one_batch=total == 0)
            except OSError as exc:
                # Kafka's LocalLog.read under maybeHandleIOException: a read that fails
                # takes the log dir offline (one line from the failure channel, no
                # traceback) and the partition answers KAFKA_STORAGE_ERROR
                key = fp.key
                what = f"read of {key[0]}-{key[1]}" if key is not None else "read"
                self.failure_channel.error(StorageError(what, exc, fatal=True))
                if isinstance(records, FileRegion):
                    records.close()
                out[-1] = failed = FetchPartitionData()
                failed.error = ErrorCode.kafka_storage_error
                continue
            data.records = records
            if share_key is not None:
                assert batch is not None
                out[-1] = data = batch.keep(share_key, data)
            total += len(records)
            remaining -= len(records)
        return out, total

    def fetch_messages(self, params: FetchParams, partitions: Sequence[FetchPartition], answer: FetchAnswer) -> None:
        """Read now; answer at once if ``max_wait_ms`` <= 0, ``min_bytes`` are there, a
        partition has an error or there are no partitions. Otherwise park a DelayedFetch
        until ``min_bytes`` arrive, a partition goes away, or ``max_wait_ms`` passes, and
        then re-read and answer (unless ``answer.abandoned``: the client went away)."""
        results, total = self.read_from_log(params, partitions)
        if (
            params.max_wait_ms <= 0
            or total >= params.min_bytes
            or not partitions
            or any(r.error is not ErrorCode.none or r.diverging_epoch is not None for r in results)
        ):
            answer(results)
            return
        appended = self.appended_bytes
        logs = self.logs.logs
        statuses = []
        for fp, data in zip(partitions, results, strict=True):
            assert fp.key is not None  # no error: every partition is known
            statuses.append(
                FetchPartitionStatus(
                    fp.key, logs[fp.key], fp.fetch_offset, fp.max_bytes, len(data.records),
                    appended.get(fp.key, 0),
                )
            )
        op = DelayedFetch(params, statuses, partitions, self, answer,
                          read_committed=params.isolation_level == READ_COMMITTED)
        self.fetch_purgatory.try_complete_else_watch(op, [st.key for st in statuses])

    def fetch_session_messages(self, params: FetchParams, session: FetchSession, answer: SessionFetchAnswer) -> None:
        """An incremental fetch: as :meth:`fetch_messages`, for the partitions
        ``answer.select()`` names (the session's dirty ones, as (session keys,
        partitions)), chosen again when a parked fetch completes. A parked fetch waits on
        the session's one key and its checks cost O(dirty partitions)
        (:class:`SessionDelayedFetch`)."""
        keys, partitions = answer.select()
        results, total = self.read_from_log(params, partitions)
        if (
            params.max_wait_ms <= 0
            or total >= params.min_bytes
            or any(r.error is not ErrorCode.none or r.diverging_epoch is not None for r in results)
        ):
            answer(keys, partitions, results)
            return
        op = SessionDelayedFetch(params, session, self, answer,
                                 read_committed=params.isolation_level == READ_COMMITTED)
        self.fetch_purgatory.try_complete_else_watch(op, [session_watch_key(session)])

    def _sessions_changed(self, keys: Iterable[TopicPartition]) -> list[Any]:
        """Mark ``keys`` dirty in the fetch sessions that hold them; the purgatory keys
        of those sessions (their parked fetches may complete now)."""
        cache = self.fetch_sessions
        woken: dict[Any, None] = {}
        for key in keys:
            for session in cache.partition_changed(key):
                woken[session_watch_key(session)] = None
        return list(woken)

    def _log_changed(self, key: TopicPartition) -> None:
        """A change that completes no parked fetch (a new log start offset: a parked fetch
        waits at the log end) but must reach incremental responses."""
        self._sessions_changed((key,))

    def complete_fetches_now(self) -> int:
        """Answer every parked fetch with what is there now (broker shutdown)."""
        return self.fetch_purgatory.complete_all()

    # -- DeleteRecords --------------------------------------------------------------------
    def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        callback: Callable[[dict[TopicPartition, DeleteRecordsResult]], None],
        *,
        internal_topics_allowed: bool = False,
    ) -> None:
        """Move each partition's log start offset up to its offset (-1: the high
        watermark), as Kafka's ``deleteRecordsOnLocalLog``/``deleteRecordsOnLeader``, and
        call ``callback`` once the new start offsets are durable in the log directory's
        ``log-start-offset-checkpoint`` (Kafka waits for the followers instead; a single
        node has none). Segments wholly below a new start are deleted at once; fetches
        below it get OFFSET_OUT_OF_RANGE. (A parked fetch waits at the log end offset,
        which a new start never passes.) A client's request may not delete records of an
        internal topic; ``internal_topics_allowed`` is for the share coordinator pruning
        ``__share_group_state`` (Kafka's ``allowInternalTopicDeletion``)."""
        results: dict[TopicPartition, DeleteRecordsResult] = {}
        moved: list[TopicPartition] = []
        now_ms = self.clock.wall_milliseconds()
        for key, offset in offsets.items():
            result = results[key] = DeleteRecordsResult()
            topic = key[0]
            plog = self.logs.logs.get(key)
            if plog is None:
                result.error = ErrorCode.unknown_topic_or_partition
                continue
            if is_internal_topic(topic) and not internal_topics_allowed:
                result.error = ErrorCode.invalid_topic_exception
                result.error_message = f"Cannot delete records of internal topic {topic}"
                continue
            if not deletion_allowed(plog):
                result.error = ErrorCode.policy_violation
                result.error_message = (
                    f"Records of partition {topic}-{key[1]} can not be deleted due to the "
                    "configured policy"
                )
                continue
            target = plog.high_watermark if offset == -1 else offset
            before = plog.log_start_offset
            try:
                result.low_watermark = plog.increment_log_start_offset(target, now_ms)
            except OffsetOutOfRangeError as exc:
                result.error = ErrorCode.offset_out_of_range
                result.error_message = str(exc)
                continue
            if result.low_watermark != before:
                self._log_changed(key)
                log.info("log start offset of %s-%d moved to %d by DeleteRecords", topic, key[1],
                         result.low_watermark)
                moved.append(key)
        if not moved:
            callback(results)
            return
        epochs = [t for t in (self.logs.logs[k].checkpoint_leader_epochs() for k in moved) if t]

        def durable(exc: BaseException | None) -> None:
            if exc is not None:
                for key in moved:
                    results[key] = DeleteRecordsResult(
                        ErrorCode.kafka_storage_error, -1, f"could not checkpoint the log start offset: {exc}"
                    )
            callback(results)

        self.logs.checkpoint_log_start_offsets(durable)
        for ticket in epochs:
            self.scheduler.submit(ticket.run, self.logs.checkpoint_failed("leader-epoch checkpoint"))

    # -- OffsetForLeaderEpoch ---------------------------------------------------------------
    def last_offset_for_leader_epoch(
        self, key: TopicPartition, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset) for OffsetForLeaderEpoch (Kafka's
        ``Partition.lastOffsetForLeaderEpoch``): the largest epoch <= ``leader_epoch`` and
        where it ends (the log end offset for the latest); (-1, -1) when unknown."""
        plog = self.logs.logs.get(key)
        if plog is None:
            return ErrorCode.unknown_topic_or_partition, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        error = check_leader_epoch(plog, current_leader_epoch)
        if error is not ErrorCode.none:
            return error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epoch, end = plog.leader_epoch_cache.end_offset_for(leader_epoch, plog.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return ErrorCode.none, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return ErrorCode.none, epoch, end

    # -- storage errors -------------------------------------------------------------------
    def _flush_failed(self, key: TopicPartition, exc: BaseException) -> None:
        """An fsync failed: whatever its errno the page cache's state is unknown (fsyncgate),
        so the dir goes offline and the acks=all produces waiting on it answer
        KAFKA_STORAGE_ERROR (the flusher then completes them via on_flushed)."""
        cause = exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc))
        self.failure_channel.error(StorageError(f"fsync of {key[0]}-{key[1]}", cause, fatal=True))

    @property
    def log_dir_offline(self) -> bool:
        return self.failure_channel.offline

    # -- partitions going away ------------------------------------------------------------
    def partitions_removed(self, keys: Iterable[TopicPartition]) -> None:
        """Parked fetches and acks=all produces on deleted partitions answer now."""
        keys = list(keys)
        for key in keys + self._sessions_changed(keys):
            self.fetch_purgatory.check_and_complete(key)
        if self.share_fetch_wakeup is not None:
            self.share_fetch_wakeup(keys)
        for key in keys:
            self.produce_purgatory.check_and_complete(key)

    def try_complete_actions(self) -> None:
        self.action_queue.try_complete_actions()

    def shutdown(self) -> None:
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
