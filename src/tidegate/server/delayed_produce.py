"""Kafka's DelayedProduce: an acks=all produce waiting until its data is durable.

On a single node "enough replicas have it" becomes "it is fsynced": each
partition the request appended to is pending until the log's recovery point
passes the last offset appended. The group-commit flusher
(``tidegate.server.log_flusher``) calls ``check_and_complete((topic, partition))``
on the produce purgatory after each fsync round, so every producer whose data
the round covered is answered by that one fsync. Partitions still pending when
the request's ``timeout_ms`` expires answer REQUEST_TIMED_OUT (the data stays
appended, as in Kafka); a partition deleted meanwhile answers
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidegate.errors import ErrorCode
from tidegate.server.purgatory import DelayedOperation

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.server.replica_manager import PartitionResponse, ReplicaManager


class DelayedProduce(DelayedOperation):
    __slots__ = ("pending", "replicas", "respond")

    def __init__(
        self,
        delay_ms: int,
        pending: dict[tuple[str, int], tuple[Log, int, PartitionResponse]],
        replicas: ReplicaManager,
        respond: Callable[[], None],
    ) -> None:
        """``pending`` maps (topic, partition) to (log, last offset appended, the
        partition's result, whose error this operation settles)."""
        super().__init__(delay_ms)
        self.pending = pending
        self.replicas = replicas
        self.respond = respond

    def try_complete(self) -> bool:
        pending = self.pending
        if self.replicas.log_dir_offline:
            # an fsync failed: what was appended may never reach the disk
            for _log, _last, part in pending.values():
                part.error = ErrorCode.kafka_storage_error
                part.error_message = self.replicas.failure_channel.offline_reason
            pending.clear()
            return self.force_complete()
        for key in list(pending):
            log, last_offset, part = pending[key]
            if self.replicas.get_log(*key) is not log:
                part.error = ErrorCode.unknown_topic_or_partition
                part.error_message = "the partition was deleted before the data was flushed"
                del pending[key]
            elif log.recovery_point > last_offset:
                del pending[key]
        if not pending:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for _log, _last, part in self.pending.values():
            part.error = ErrorCode.request_timed_out
        self.respond()
