"""Record batch v2 (magic 2) headers: layout, framing, CRC and offset assignment.

The broker never decompresses or parses individual records. Everything here
works on the 61-byte batch header, the one thing Kafka's own broker reads on
the produce path when it can assign offsets in place (``LogValidator`` with a
v2 batch and no recompression):

======================  ======  =======  ============================================
field                   offset  type     notes
======================  ======  =======  ============================================
baseOffset                   0  int64    assigned by the broker
batchLength                  8  int32    bytes after this field (total = length + 12)
partitionLeaderEpoch        12  int32    stamped by the broker, outside the CRC
magic                       16  int8     2 (0 and 1 are the legacy formats)
crc                         17  uint32   CRC-32C of bytes 21..end
attributes                  21  int16    bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
lastOffsetDelta             23  int32
baseTimestamp               27  int64
maxTimestamp                35  int64    set to the append time for LogAppendTime
producerId                  43  int64
producerEpoch               51  int16
baseSequence                53  int32
recordsCount                57  int32
======================  ======  =======  ============================================

Neither ``baseOffset`` nor ``partitionLeaderEpoch`` is covered by the CRC, which is
what lets the broker assign offsets without touching the client's checksum.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from tidegate.errors import RecordTooLargeError
from tidegate.utils import INT32_MAX

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CONTROL_FLAG_MASK",
    "CRC_OFFSET",
    "CURRENT_MAGIC",
    "DELETE_HORIZON_FLAG_MASK",
    "HEADER_SIZE",
    "HEADER_SIZE_UP_TO_MAGIC",
    "HEADER_STRUCT",
    "LAST_OFFSET_DELTA_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_TYPE_CREATE_TIME",
    "TIMESTAMP_TYPE_LOG_APPEND_TIME",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "BatchHeader",
    "BatchTooLargeError",
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "RecordBatchError",
    "RecordTooLargeError",
    "UnsupportedForMessageFormatError",
    "assign_offsets",
    "attributes",
    "base_offset",
    "batch_size",
    "check_batch_contents",
    "check_framing",
    "compute_crc",
    "is_crc_valid",
    "is_transactional_batch",
    "iter_batches",
    "last_offset",
    "max_timestamp",
    "read_header",
    "records_count",
]

# -- layout ------------------------------------------------------------------

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
#: Size of the v2 batch header (Kafka's ``DefaultRecordBatch.RECORD_BATCH_OVERHEAD``).
RECORD_BATCH_OVERHEAD = 61
HEADER_SIZE = RECORD_BATCH_OVERHEAD
#: baseOffset + batchLength: the part of a batch that ``batchLength`` does not count.
LOG_OVERHEAD = 12
#: Bytes needed to read the magic byte, common to every message format.
HEADER_SIZE_UP_TO_MAGIC = 17
#: Smallest legal ``batchLength`` of a v2 batch (a header and no records).
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
#: Kafka's ``LegacyRecord.RECORD_OVERHEAD_V0``: below this even a legacy entry is garbage.
_MIN_LEGACY_SIZE = 14

CURRENT_MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

#: The whole header in one unpack: baseOffset .. recordsCount.
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == RECORD_BATCH_OVERHEAD

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT8 = struct.Struct(">b")
_OFFSET_AND_LENGTH = struct.Struct(">qi")

_unpack_i32 = _INT32.unpack_from
_unpack_i64 = _INT64.unpack_from
_unpack_u32 = _UINT32.unpack_from
_unpack_i16 = _INT16.unpack_from
_unpack_i8 = _INT8.unpack_from
_unpack_header = HEADER_STRUCT.unpack_from


# -- errors ------------------------------------------------------------------


class RecordBatchError(Exception):
    """A batch the broker refuses; ``error_code`` is the Kafka error code to answer with."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR

    def __init__(
        self,
        message: str,
        position: int | None = None,
        record_errors: tuple[tuple[int, str | None], ...] = (),
    ) -> None:
        super().__init__(message)
        #: Byte position (in the buffer being checked) of the offending batch, if known.
        self.position = position
        #: Kafka's ``record_errors``: (index of the record in its batch, message)
        self.record_errors = record_errors


class CorruptRecordError(RecordBatchError):
    """CORRUPT_MESSAGE: bad CRC, truncated batch, impossible lengths or counts, magic > 2."""

    error_code = 2


class UnsupportedForMessageFormatError(RecordBatchError):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT: a legacy (magic 0 or 1) message set."""

    error_code = 43


class BatchTooLargeError(RecordBatchError, RecordTooLargeError):
    """MESSAGE_TOO_LARGE: a batch bigger than the topic's ``max.message.bytes``. The
    shared :class:`~tidegate.errors.RecordTooLargeError` (re-exported here) with the
    batch's position, so ``except RecordBatchError`` and ``except RecordTooLargeError``
    both catch it."""

    error_code = 10


class InvalidTimestampError(RecordBatchError):
    """INVALID_TIMESTAMP: records whose CreateTime is further from the broker's clock than
    ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms`` allow (the
    offending records are in ``record_errors``)."""

    error_code = 32


class InvalidRecordError(RecordBatchError):
    """INVALID_RECORD: a well-formed batch that a client is not allowed to send.

    Raised by :func:`tidegate.log.validator.validate_batches` for the checks Kafka's ``UnifiedLog`` and
    ``LogValidator.validateBatch`` make on batches from clients: baseOffset must be 0,
    recordsCount must be positive and equal lastOffsetDelta + 1, no control batches,
    no idempotent batch with a negative base sequence, and (optionally) a single batch.
    """

    error_code = 87


# -- header view -------------------------------------------------------------


class BatchHeader(NamedTuple):
    """The 61-byte v2 header, unpacked in one ``struct`` call (see :func:`read_header`)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at int32 like Kafka's ``incrementSequence``)."""
        if self.base_sequence < 0:
            return -1
        seq = self.base_sequence + self.last_offset_delta
        return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


_make_header = BatchHeader._make


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the header of the batch at ``pos`` (no validation)."""
    return _make_header(_unpack_header(buf, pos))


def batch_size(buf, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` according to its batchLength field."""
    return _unpack_i32(buf, pos + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD


def base_offset(buf, pos: int = 0) -> int:
    return _unpack_i64(buf, pos)[0]


def last_offset(buf, pos: int = 0) -> int:
    return _unpack_i64(buf, pos)[0] + _unpack_i32(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]


def max_timestamp(buf, pos: int = 0) -> int:
    return _unpack_i64(buf, pos + MAX_TIMESTAMP_OFFSET)[0]


def attributes(buf, pos: int = 0) -> int:
    return _unpack_i16(buf, pos + ATTRIBUTES_OFFSET)[0]


def is_transactional_batch(buf) -> bool:
    """Whether ``buf`` starts with a v2 batch that has the transactional flag (Kafka's
    ``ProduceRequest.hasTransactionalRecords`` on the first batch). Any other magic keeps
    the flag's byte for something else and is refused by validation."""
    return (
        buf is not None  # a null record set (Produce allows it; the append refuses it)
        and len(buf) >= HEADER_SIZE
        and buf[MAGIC_OFFSET] == CURRENT_MAGIC
        and bool(buf[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK)
    )


def records_count(buf, pos: int = 0) -> int:
    return _unpack_i32(buf, pos + RECORDS_COUNT_OFFSET)[0]


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` (bytes from attributes to the end)."""
    with memoryview(buf) as mv:
        return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def is_crc_valid(buf, pos: int, size: int) -> bool:
    return compute_crc(buf, pos, size) == _unpack_u32(buf, pos + CRC_OFFSET)[0]


# -- framing -----------------------------------------------------------------


def check_framing(buf, pos: int, end: int) -> int:
    """Check the framing of the batch at ``pos`` in ``buf[:end]`` and return its size.

    Raises :class:`CorruptRecordError` for a batch cut short by ``end``, a
    batchLength too small for the format, or magic > 2, and
    :class:`UnsupportedForMessageFormatError` for magic 0 or 1. Does not check the CRC.
    """
    remaining = end - pos
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(
            f"truncated batch at position {pos}: {remaining} bytes left, "
            f"need {HEADER_SIZE_UP_TO_MAGIC} to read the header",
            pos,
        )
    length = _unpack_i32(buf, pos + BATCH_LENGTH_OFFSET)[0]
    if length < _MIN_LEGACY_SIZE:
        raise CorruptRecordError(f"batch at position {pos} has batchLength {length}", pos)
    magic = _unpack_i8(buf, pos + MAGIC_OFFSET)[0]
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"batch at position {pos} has magic {magic}; only magic 2 is supported", pos
            )
        raise CorruptRecordError(f"batch at position {pos} has invalid magic {magic}", pos)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at position {pos} has batchLength {length} < {MIN_BATCH_LENGTH}", pos
        )
    size = length + LOG_OVERHEAD
    if size > remaining:
        raise CorruptRecordError(
            f"truncated batch at position {pos}: size {size}, {remaining} bytes left", pos
        )
    return size


def iter_batches(
    buf, *, start: int = 0, end: int | None = None, verify_crc: bool = False
) -> Iterator[tuple[int, int]]:
    """Yield ``(position, size)`` of each batch in ``buf[start:end]``.

    Framing is checked as in :func:`check_framing`; a torn or impossible batch
    raises (the exception's ``position`` says where the valid prefix ends). With
    ``verify_crc`` each batch's CRC and its non-negative lastOffsetDelta and
    recordsCount are checked too (the recovery scan).
    """
    if end is None:
        end = len(buf)
    pos = start
    with memoryview(buf) as mv:
        while pos < end:
            size = check_framing(mv, pos, end)
            if verify_crc:
                check_batch_contents(mv, pos, size)
            yield pos, size
            pos += size


def check_batch_contents(mv, pos: int, size: int) -> None:
    """Check the CRC-32C and the sign of lastOffsetDelta/recordsCount of a framed batch.

    Raises :class:`CorruptRecordError`. ``mv`` may be any bytes-like object.
    """
    if crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != _unpack_u32(mv, pos + CRC_OFFSET)[0]:
        raise CorruptRecordError(f"batch at position {pos} fails its CRC-32C check", pos)
    if _unpack_i32(mv, pos + LAST_OFFSET_DELTA_OFFSET)[0] < 0:
        raise CorruptRecordError(f"batch at position {pos} has a negative lastOffsetDelta", pos)
    if _unpack_i32(mv, pos + RECORDS_COUNT_OFFSET)[0] < 0:
        raise CorruptRecordError(f"batch at position {pos} has a negative recordsCount", pos)


# -- offset assignment ---------------------------------------------------------


def assign_offsets(
    buf,
    first_offset: int,
    log_append_time_ms: int | None = None,
    *,
    partition_leader_epoch: int | None = None,
    positions: Sequence[int] | None = None,
) -> int:
    """Assign offsets in place to the (already validated) batches in ``buf``.

    ``buf`` must be writable (a ``bytearray`` or a writable ``memoryview``). Each
    batch's baseOffset becomes the previous batch's last offset + 1, the first one
    ``first_offset``; baseOffset is outside the CRC so the checksum stays valid.
    ``partition_leader_epoch``, when given, is stamped into every batch (also outside
    the CRC), as Kafka's leader does.

    With ``log_append_time_ms`` (a topic with ``message.timestamp.type=LogAppendTime``)
    each batch gets the timestamp-type attribute bit and maxTimestamp = the append
    time, and its CRC is recomputed, exactly as Kafka's
    ``DefaultRecordBatch.setMaxTimestamp`` does; baseTimestamp is left alone (Kafka
    leaves it too: readers take every record's timestamp from maxTimestamp when the
    bit is set). Nothing else is touched; compressed payloads are never rewritten.

    ``positions`` (from :func:`tidegate.log.validator.validate_batches`) saves re-walking the buffer.
    Returns the last offset assigned.
    """
    if positions is None:
        positions = [p for p, _ in iter_batches(buf)]
    pack_i64 = _INT64.pack_into
    offset = first_offset
    with memoryview(buf) as mv:
        for pos in positions:
            pack_i64(mv, pos, offset)
            offset += _unpack_i32(mv, pos + LAST_OFFSET_DELTA_OFFSET)[0] + 1
            if partition_leader_epoch is not None:
                _INT32.pack_into(mv, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
            if log_append_time_ms is not None:
                attrs = _unpack_i16(mv, pos + ATTRIBUTES_OFFSET)[0]
                if (
                    attrs & TIMESTAMP_TYPE_MASK
                    and _unpack_i64(mv, pos + MAX_TIMESTAMP_OFFSET)[0] == log_append_time_ms
                ):
                    continue
                size = _unpack_i32(mv, pos + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
                _INT16.pack_into(mv, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
                pack_i64(mv, pos + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
                _UINT32.pack_into(
                    mv, pos + CRC_OFFSET, crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])
                )
    return offset - 1
