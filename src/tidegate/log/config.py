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
