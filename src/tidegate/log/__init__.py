"""Durable partition logs: validation of appended batches, segments, indexes and the log.

Kafka's log layer in plain Python objects (``LogValidator`` → :mod:`.validator`,
``OffsetIndex``/``TimeIndex`` → :mod:`.index`, ``LogSegment`` → :mod:`.segment`,
``LocalLog`` → :mod:`.local_log`, ``LogLoader`` → :mod:`.log_loader`, ``UnifiedLog`` →
:mod:`.log`, the log cleaner's swap → :mod:`.segment_swap`). The broker works on batch headers only; the
record format itself (batches, records, compression) is :mod:`tidegate.record`.
"""

from .config import LogConfig
from .index import CorruptIndexError, InvalidIndexEntryError, OffsetIndex, TimeIndex
from .local_log import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    FlushTicket,
    LogClosedError,
    parse_partition_dir,
    partition_dir,
)
from .log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    Log,
    LogOffsetOutOfRangeError,
    OffsetOutOfRangeError,
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
