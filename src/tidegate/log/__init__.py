"""Durable partition logs: record-batch validation, segments, indexes and the log.

Kafka's log layer in plain Python objects (``LogValidator`` → :mod:`.record_batch`,
``OffsetIndex``/``TimeIndex`` → :mod:`.index`, ``LogSegment`` → :mod:`.segment`,
``UnifiedLog``/``LocalLog`` → :mod:`.log`). The broker works on batch headers only.
"""

from .batch_builder import Record, build_batch, encode_record, encode_varint
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
from .record_batch import (
    BatchHeader,
    BatchTooLargeError,
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
    ValidatedBatches,
    assign_offsets,
    iter_batches,
    read_header,
    validate_batches,
)
from .segment import LogSegment

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "BatchHeader",
    "BatchTooLargeError",
    "CorruptIndexError",
    "CorruptRecordError",
    "FlushTicket",
    "InvalidIndexEntryError",
    "InvalidRecordError",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogOffsetOutOfRangeError",
    "LogSegment",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "Record",
    "RecordBatchError",
    "RecordTooLargeError",
    "TimeIndex",
    "UnsupportedForMessageFormatError",
    "ValidatedBatches",
    "assign_offsets",
    "build_batch",
    "encode_record",
    "encode_varint",
    "iter_batches",
    "parse_partition_dir",
    "partition_dir",
    "read_header",
    "validate_batches",
]
