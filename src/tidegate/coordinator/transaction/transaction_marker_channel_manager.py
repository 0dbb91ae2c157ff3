"""Writing transaction markers: Kafka's TransactionMarkerChannelManager on one node.

Kafka's coordinator sends WriteTxnMarkers requests to each partition leader; here every
partition is local, so a marker is a control batch (COMMIT or ABORT, the producer id,
the marker epoch and the coordinator epoch) appended through
``ReplicaManager.append_records`` with acks=all, as an internal write. Each partition's
result is handled as Kafka's ``TransactionMarkerRequestCompletionHandler`` does:

* NONE: the partition is done;
* retriable (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR): written again after a backoff;
* a partition that no longer exists (deleted topic): done, nothing to mark;
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: give up this transaction's
  markers (a newer coordinator or epoch owns it);
* UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: treated as done;
* anything else (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...): a bug; logged, given up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidegate.clock import Clock
from tidegate.errors import ErrorCode
from tidegate.record.control_records import end_transaction_marker_batch
from tidegate.server.timer import FunctionTask, SystemTimer

if TYPE_CHECKING:
    from tidegate.server.replica_manager import PartitionResponse, ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

RETRY_BACKOFF_MS = 100

_RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
})  # fmt: skip
_DONE = frozenset({ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
_ABANDON = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


class TransactionMarkerChannelManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        timer: SystemTimer,
        clock: Clock,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.replicas = replicas
        self.timer = timer
        #: its wall clock stamps the markers
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms
        #: called after a marker is durable on a partition: (partition, producer id, commit)
        #: (the group coordinator completes transactional offsets on __consumer_offsets)
        self.marker_listeners: list[Callable[[TopicPartition, int, bool], None]] = []
        self.markers_written = 0
        #: markers waiting to be written again (Kafka's LogAppendRetryQueueSize)
        self.retry_queue_size = 0

    def marker_written(self, tp: TopicPartition, producer_id: int, commit: bool) -> None:
        """Tell every listener that a marker is durable on ``tp``: the markers written here,
        and those WriteTxnMarkers appends (an admin's abortTransaction)."""
        for listener in self.marker_listeners:
            listener(tp, producer_id, commit)

    def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
        on_partition_done: Callable[[TopicPartition, ErrorCode], None],
    ) -> None:
        """Append the marker to every partition; ``on_partition_done(tp, error)`` once per
        partition with NONE (written, or nothing to write) or the error that ended it."""
        for tp in partitions:
            self._write_one(producer_id, producer_epoch, coordinator_epoch, commit, tp, on_partition_done)

    def _write_one(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        tp: TopicPartition, on_done: Callable[[TopicPartition, ErrorCode], None],
    ) -> None:  # fmt: skip
        if self.replicas.get_log(*tp) is None:
            log.info("transaction marker for %s-%d skipped: the partition no longer exists", *tp)
            on_done(tp, ErrorCode.none)
            return
        batch = end_transaction_marker_batch(
            producer_id, producer_epoch, coordinator_epoch, commit, self.clock.wall_milliseconds()
        )

        def appended(results: dict[TopicPartition, PartitionResponse]) -> None:
            error = results[tp].error
            if error in _DONE:
                if error is ErrorCode.none:
                    self.markers_written += 1
                    self.marker_written(tp, producer_id, commit)
                on_done(tp, ErrorCode.none)
            elif error in _RETRIABLE or (error is ErrorCode.unknown_topic_or_partition and self.replicas.get_log(*tp)):
                log.info("transaction marker for %s-%d failed with %s; retrying", tp[0], tp[1], error.name)
                self._retry(lambda: self._write_one(producer_id, producer_epoch, coordinator_epoch, commit, tp,
                                                    on_done))
            elif error is ErrorCode.unknown_topic_or_partition:
                on_done(tp, ErrorCode.none)  # deleted meanwhile: nothing to mark
            else:
                if error not in _ABANDON:
                    log.error("transaction marker for %s-%d of producer %d failed with %s", tp[0], tp[1],
                              producer_id, error.name)
                on_done(tp, error)

        try:
            self.replicas.append_records(self.request_timeout_ms, -1, {tp: batch}, appended,
                                         internal_topics_allowed=True, from_client=False)
        except OSError as exc:
            log.error("transaction marker for %s-%d: %s; retrying", tp[0], tp[1], exc)
            self._retry(lambda: self._write_one(producer_id, producer_epoch, coordinator_epoch, commit, tp,
                                                on_done))

    def _retry(self, write: Callable[[], None]) -> None:
        self.retry_queue_size += 1

        def again() -> None:
            self.retry_queue_size -= 1
            write()

        self.timer.add(FunctionTask(RETRY_BACKOFF_MS, again))
