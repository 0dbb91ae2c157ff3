"""Durable partition logs: validation of appended batches, segments, indexes and the log.

Kafka's log layer in plain Python objects (``LogValidator`` → :mod:`.validator`,
``OffsetIndex``/``TimeIndex`` → :mod:`.index`, ``LogSegment`` → :mod:`.segment`,
``UnifiedLog``/``LocalLog`` → :mod:`.log`). The broker works on batch headers only; the
record format itself (batches, records, compression) is :mod:`tidegate.record`.
"""

from .config import LogConfig
from .index import CorruptIndexError, InvalidIndexEntryError, OffsetIndex, TimeIndex
from .log import (
    CLEAN_SHUTDOWN_FILE,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    RECOVERY_POINT_FILE,
    AppendInfo,
    FlushTicket,
    Log,
    LogClosedError,
    LogOffsetOutOfRangeError,
    OffsetOutOfRangeError,
    parse_partition_dir,
    partition_dir,
)
from .segment import LogSegment

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "CorruptIndexError",
    "FlushTicket",
    "InvalidIndexEntryError",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogOffsetOutOfRangeError",
    "LogSegment",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "TimeIndex",
    "parse_partition_dir",
    "partition_dir",
]
