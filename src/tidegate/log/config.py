"""Per-partition log settings, named after Kafka's topic-level config keys.

The broker-level keys (``log.segment.bytes`` ...) supply the defaults; a topic's
own overrides (``segment.bytes`` ...) win. ``tidegate.config`` does that mapping;
this class only carries the resolved values into the log.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms (roll a segment this old)
    retention_ms: int = 604800000  # retention.ms (-1: keep forever)
    retention_bytes: int = -1  # retention.bytes (-1: no size bound)
    flush_messages: int = 9223372036854775807  # flush.messages
    flush_ms: int = 9223372036854775807  # flush.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_message_bytes: int = 1048588  # max.message.bytes (largest batch accepted)
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: CreateTime|LogAppendTime
    # message.timestamp.{before,after}.max.ms: CreateTime records further than this from the
    # broker's clock are refused (INVALID_TIMESTAMP); Kafka 4.0's defaults
    message_timestamp_before_max_ms: int = 9223372036854775807
    message_timestamp_after_max_ms: int = 3600000
    # compression.type: producer (keep the batch's codec), uncompressed, gzip, snappy, lz4, zstd
    compression_type: str = "producer"
    compression_gzip_level: int = -1  # compression.gzip.level (-1: gzip's default)
    compression_lz4_level: int = 9  # compression.lz4.level (9: the fast compressor)
    compression_zstd_level: int = 3  # compression.zstd.level
    min_insync_replicas: int = 1  # min.insync.replicas (acks=all needs this many in sync)
    # cleanup.policy: "delete" (retention), "compact" (the log cleaner) or both
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    delete_retention_ms: int = 86400000  # delete.retention.ms (tombstones' horizon)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = 9223372036854775807  # max.compaction.lag.ms

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the log cleaner compacts this log."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms/bytes delete old segments."""
        return "delete" in self.cleanup_policy
