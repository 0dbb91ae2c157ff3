"""Log directories: DescribeLogDirs and AlterReplicaLogDirs, for
:class:`~tidegate.server.kafka_apis.KafkaApis`.

Kafka's ``ReplicaManager.describeLogDirs`` and ``alterReplicaLogDirs`` with the one log
directory tidegate has (``log.dirs`` names one): its partitions' sizes and the file
system's space; a replica can only "move" to where it already is.
"""

from __future__ import annotations

import logging
import os

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)
from tidegate.protocol.messages.describe_log_dirs import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from tidegate.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class LogDirAdminApis:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.logs = replicas.logs

    @property
    def log_dir(self) -> str:
        """The one log directory, as Kafka names it (``File.getAbsolutePath``)."""
        return os.path.abspath(self.logs.root)

    def handle_describe_log_dirs(self, request: Request) -> DescribeLogDirsResponse:
        """One log directory: each (asked) partition's size, offset lag 0 (the log end
        offset is the high watermark), the file system's total and usable bytes."""
        req = request.body_as(DescribeLogDirsRequest)
        wanted = (
            None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        )
        topics: dict[str, list[DescribeLogDirsPartition]] = {}
        for (topic, partition), plog in sorted(self.logs.logs.items()):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            # offset lag max(HW - LEO, 0) is 0: this node is the leader
            topics.setdefault(topic, []).append(
                DescribeLogDirsPartition(partition_index=partition, partition_size=plog.size_bytes)
            )
        result = DescribeLogDirsResult(log_dir=self.log_dir)
        try:
            if self.logs.failure_channel.offline:
                # Kafka's describeLogDirs: an offline dir answers KAFKA_STORAGE_ERROR, no topics
                raise OSError(f"log directory {self.log_dir} is offline")
            st = os.statvfs(self.logs.root)
        except OSError as exc:
            log.warning("unable to describe log dir %s: %s", self.log_dir, exc)
            result.error_code = ErrorCode.kafka_storage_error
        else:
            result.topics = [DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in topics.items()]
            result.total_bytes = st.f_blocks * st.f_frsize
            result.usable_bytes = st.f_bavail * st.f_frsize
        return DescribeLogDirsResponse(results=[result])

    def handle_alter_replica_log_dirs(self, request: Request) -> AlterReplicaLogDirsResponse:
        """Kafka's ``ReplicaManager.alterReplicaLogDirs`` with one log directory: moving a
        replica to where it already is succeeds and does nothing; any other path is
        LOG_DIR_NOT_FOUND."""
        results: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
        for d in request.body_as(AlterReplicaLogDirsRequest).dirs:
            for t in d.topics:
                for p in t.partitions:
                    results.setdefault(t.name, []).append(AlterReplicaLogDirPartitionResult(
                        partition_index=p, error_code=self._alter_replica_log_dir(t.name, p, d.path)))  # fmt: skip
        return AlterReplicaLogDirsResponse(results=[
            AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts) for name, parts in results.items()
        ])  # fmt: skip

    def _alter_replica_log_dir(self, topic: str, partition: int, path: str) -> ErrorCode:
        # The future replica's directory name: <topic>-<partition>.<32 hex>-future (KAFKA-4893)
        if len(f"{topic}-{partition}") + 1 + 32 + len("-future") > 255:
            return ErrorCode.invalid_topic_exception
        if path != self.log_dir:
            log.info("AlterReplicaLogDirs for %s-%d: log dir %s is not found in the config",
                     topic, partition, path)
            return ErrorCode.log_dir_not_found
        if self.replicas.get_log(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.none  # already there
