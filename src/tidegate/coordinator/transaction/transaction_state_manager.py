"""Kafka's TransactionStateManager: the coordinator's cache of transactional ids, kept
durable in ``__transaction_state``.

Every transition's record is appended through ``ReplicaManager.append_records`` with
acks=all, as an internal-topic write; the cached metadata changes only once the record
is durable (:meth:`append_transaction_to_log`). At startup every partition of the topic
is replayed (latest record per id wins, a tombstone removes the id) and the coordinator
epoch, which every transaction marker carries, is moved past the last one used (single
node: persisted in ``transaction-coordinator-epoch`` and incremented at each start,
never decreasing, as Kafka's leader epoch of the partition would).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from tidegate.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from tidegate.errors import ErrorCode
from tidegate.log.replay import replay_records
from tidegate.record.batch_builder import Record, build_batch
from tidegate.utils.files import write_atomically

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.server.log_manager import LogManager
    from tidegate.server.replica_manager import PartitionResponse

log = logging.getLogger(__name__)

COORDINATOR_EPOCH_FILE = "transaction-coordinator-epoch"

#: ReplicaManager.append_records
AppendRecords = Callable[..., "dict[tuple[str, int], PartitionResponse]"]


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The coordinator's broker configs (Kafka's TransactionConfig / TransactionLogConfig)."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_log_num_partitions: int = 50
    transaction_log_segment_bytes: int = 104_857_600
    transaction_log_load_buffer_size: int = 5_242_880
    request_timeout_ms: int = 30_000

    @classmethod
    def from_broker(cls, config: Any) -> TransactionConfig:
        return cls(
            config.get("transaction.max.timeout.ms"),
            config.get("transactional.id.expiration.ms"),
            config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            config.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
            config.get("transaction.state.log.num.partitions"),
            config.get("transaction.state.log.segment.bytes"),
            config.get("transaction.state.log.load.buffer.size"),
        )


def transaction_log_topic_configs(config: TransactionConfig) -> dict[str, str]:
    """Topic configs of ``__transaction_state`` (Kafka's ``transactionTopicConfigs``):
    compacted by the log cleaner (a tombstone removes an id), segments of
    transaction.state.log.segment.bytes."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.transaction_log_segment_bytes),
    }


def _map_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a transaction-log append error before it reaches a client."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                 ErrorCode.request_timed_out):  # fmt: skip
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


class TransactionStateManager:
    def __init__(
        self,
        config: TransactionConfig,
        logs: LogManager,
        append_records: AppendRecords,
        data_dir: Path,
        clock: Clock,
    ) -> None:
        self.config = config
        self.logs = logs
        self._append_records = append_records
        self.data_dir = Path(data_dir)
        #: monotonic: load times; wall: record timestamps, timeouts and expiry of the
        #: transactions' (persisted, wall-clock) timestamps
        self.clock = clock
        #: how long loading each partition of __transaction_state took at startup (ms):
        #: Kafka's partition-load-time-max/avg
        self.partition_load_times_ms: list[int] = []
        self._cache: dict[str, TransactionMetadata] = {}
        self.coordinator_epoch = 0
        self.active = False

    # -- startup ------------------------------------------------------------------------------
    def startup(self) -> list[TransactionMetadata]:
        """Load every partition of ``__transaction_state`` and bump the coordinator epoch.
        Returns the transactions found in PrepareCommit/PrepareAbort (their markers must be
        written again)."""
        self.coordinator_epoch = self._bump_coordinator_epoch()
        self._cache.clear()
        loaded = 0
        self.partition_load_times_ms = []
        for plog in self._existing_logs():
            started = self.clock.milliseconds()
            for _offset, key, value in replay_records(plog, self.config.transaction_log_load_buffer_size):
                if key is None:
                    continue
                txn_id = decode_key(key)
                if txn_id is None:
                    continue  # a key version this broker cannot read: skipped, as in Kafka
                loaded += 1
                if value is None:
                    self._cache.pop(txn_id, None)
                else:
                    self._cache[txn_id] = decode_value(txn_id, value)
            self.partition_load_times_ms.append(self.clock.milliseconds() - started)
        self.active = True
        if loaded:
            log.info("loaded %d transactional id(s) from %d record(s) of %s, coordinator epoch %d",
                     len(self._cache), loaded, TRANSACTION_STATE_TOPIC, self.coordinator_epoch)
        return [m for m in self._cache.values()
                if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)]

    def shutdown(self) -> None:
        self.active = False

    def _bump_coordinator_epoch(self) -> int:
        path = self.data_dir / COORDINATOR_EPOCH_FILE
        try:
            previous = int(path.read_text().strip())
        except FileNotFoundError:
            previous = -1
        epoch = previous + 1
        data = f"{epoch}\n".encode()
        try:
            write_atomically(path, data)
        except OSError as exc:
            if previous < 0:
                raise
            # A full disk has no room for the tmp file: rewrite the existing file in place
            # (a few bytes in a block it already owns), so the broker can start and serve
            # reads on a full disk (docs/reliability.md). Durable before it is used.
            log.warning("could not replace %s (%s): rewriting it in place", path, exc)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)
        return epoch

    def _existing_logs(self) -> Iterator[Log]:
        info = self.logs.store.get(TRANSACTION_STATE_TOPIC)
        if info is None:
            return
        for p in range(info.partitions):
            plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, p)
            if plog is not None:
                yield plog

    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use, as Kafka does (FindCoordinator of a
        transactional id). Raises OSError if its logs cannot be created."""
        if self.logs.store.get(TRANSACTION_STATE_TOPIC) is None:
            self.logs.create_topic(
                TRANSACTION_STATE_TOPIC,
                self.config.transaction_log_num_partitions,
                transaction_log_topic_configs(self.config),
            )
            log.info("created the internal topic %s with %d partitions", TRANSACTION_STATE_TOPIC,
                     self.config.transaction_log_num_partitions)

    # -- the cache ----------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_log_num_partitions)

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._cache.get(transactional_id)

    def put_if_not_exists(self, metadata: TransactionMetadata) -> TransactionMetadata:
        return self._cache.setdefault(metadata.transactional_id, metadata)

    def all(self) -> list[TransactionMetadata]:
        return list(self._cache.values())

    def validate_transaction_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    def timed_out_transactions(self) -> list[TransactionMetadata]:
        """Ongoing transactions past their timeout with no transition pending."""
        now_ms = self.clock.wall_milliseconds()
        return [
            m for m in self._cache.values()
            if m.state is TransactionState.ONGOING and not m.pending_transition_in_progress
            and m.txn_start_timestamp + m.txn_timeout_ms < now_ms
        ]  # fmt: skip

    # -- writing ------------------------------------------------------------------------------
    def append_transaction_to_log(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        transit: TxnTransitMetadata,
        callback: Callable[[ErrorCode], None],
        retry_on_error: Callable[[ErrorCode], bool] = lambda _e: False,
    ) -> None:
        """Append the transit's record (acks=all); once durable complete the transition in
        the cache, then ``callback(error)``. On an error the pending state is cleared
        (unless ``retry_on_error`` says the caller will try again)."""
        value = None if transit.state is TransactionState.DEAD else encode_value(transit)
        key = (TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
        try:
            self.ensure_topic()
        except OSError as exc:
            log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC, exc)
            self._clear_pending(transactional_id, coordinator_epoch, ErrorCode.coordinator_not_available, retry_on_error)
            callback(ErrorCode.coordinator_not_available)
            return
        batch = build_batch([Record(value, encode_key(transactional_id), self.clock.wall_milliseconds())])

        def appended(results: dict[tuple[str, int], PartitionResponse]) -> None:
            error = _map_append_error(results[key].error)
            if error is ErrorCode.none:
                metadata = self._cache.get(transactional_id)
                if metadata is None or coordinator_epoch != self.coordinator_epoch or not self.active:
                    error = ErrorCode.not_coordinator
                elif transit.state is TransactionState.DEAD:
                    metadata.pending_state = None
                    del self._cache[transactional_id]
                else:
                    metadata.complete_transition_to(transit)
            else:
                log.info("appending %s for transactional id %s failed: %s", transit.state,
                         transactional_id, error.name)
                self._clear_pending(transactional_id, coordinator_epoch, error, retry_on_error)
            callback(error)

        try:
            self._append_records(self.config.request_timeout_ms, -1, {key: batch}, appended,
                                 internal_topics_allowed=True, from_client=False)
        except OSError as exc:
            log.error("cannot append to %s: %s", TRANSACTION_STATE_TOPIC, exc)
            self._clear_pending(transactional_id, coordinator_epoch, ErrorCode.not_coordinator, retry_on_error)
            callback(ErrorCode.not_coordinator)

    def _clear_pending(
        self, transactional_id: str, coordinator_epoch: int, error: ErrorCode,
        retry_on_error: Callable[[ErrorCode], bool],
    ) -> None:  # fmt: skip
        metadata = self._cache.get(transactional_id)
        if metadata is not None and coordinator_epoch == self.coordinator_epoch and not retry_on_error(error):
            metadata.pending_state = None

    def expired_transactional_ids(self) -> list[TransactionMetadata]:
        """Ids with no transaction in progress idle past transactional.id.expiration.ms."""
        limit = self.clock.wall_milliseconds() - self.config.transactional_id_expiration_ms
        return [
            m for m in self._cache.values()
            if m.state.expiration_allowed and not m.pending_transition_in_progress
            and m.txn_last_update_timestamp <= limit
        ]  # fmt: skip
