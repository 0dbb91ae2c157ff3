"""Kafka's ``LogValidator``: the checks on batches appended to a log, and recompression.

:func:`validate_batches` is the batch-level half, on headers only (framing, size, CRC,
and what a client may send). The produce path stays on batch headers
(:mod:`tidegate.record.record_batch`) whenever it can. Two topic configs need the
records themselves, and only then are they read (the record-level half):

* ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms`` (CreateTime
  topics): a record further in the past or future than these from the broker's clock
  fails the batch with INVALID_TIMESTAMP, every such record listed in ``record_errors``
  with Kafka's message. With ``before`` unbounded (its default) a batch whose
  maxTimestamp is within ``after`` of the clock cannot hold such a record, so only the
  header is read; the records are scanned when that is not so, to name them.
* ``compression.type`` other than ``producer``: a batch whose codec is not the topic's is
  rebuilt, as Kafka's ``buildRecordsAndAssignOffsets`` does: one batch holding the same
  records (keys, values, headers and timestamps), offset deltas 0..n-1, baseTimestamp the
  first record's, compressed with the topic's codec at its level
  (``compression.{gzip,lz4,zstd}.level``), the producer id, epoch, base sequence and
  transactional flag kept, maxTimestamp the largest record timestamp (the append time on
  a LogAppendTime topic), and a new CRC. When the records already have those deltas the
  records section is recompressed as it is; otherwise each record is re-encoded. The
  log then assigns offsets to the new batch as to any other. A batch in the topic's
  codec is kept as sent (Kafka's in-place assignment), whatever level it was made at;
  control batches are never recompressed.

The rebuilt batch may be larger than the one sent: the log checks it against
``max.message.bytes`` again (:meth:`~.log.Log.append`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidegate.clock import WallMs
from tidegate.record.batch_builder import batch_crc, encode_record, set_crc, write_header
from tidegate.record.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from tidegate.record.record_batch import (
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    BatchTooLargeError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    check_batch_contents,
    check_framing,
    read_header,
)
from tidegate.record.records import (
    RecordDecodeError,
    decode_batch_records,
    iter_decoded_batches,
    scan_records,
)

if TYPE_CHECKING:
    from .config import LogConfig

__all__ = [
    "TARGET_CODECS",
    "ValidatedBatches",
    "check_keys",
    "needs_record_validation",
    "validate_batches",
    "validate_records",
]

#: ``compression.type`` -> the codec batches are stored with (None: the producer's)
TARGET_CODECS: dict[str, int | None] = {
    "producer": None,
    "uncompressed": NONE,
    "gzip": GZIP,
    "snappy": SNAPPY,
    "lz4": LZ4,
    "zstd": ZSTD,
}

_LONG_MAX = 2**63 - 1
_WRAP = 2**64


def _int64(value: int) -> int:
    """Java long arithmetic: wrap to 64 bits (Kafka's message prints the wrapped bounds)."""
    value %= _WRAP
    return value - _WRAP if value > _LONG_MAX else value


@dataclass(slots=True)
class ValidatedBatches:
    """What :func:`validate_batches` learned about a Produce partition's records."""

    #: Byte position of each batch in the buffer.
    positions: list[int]
    #: Each batch's header (as sent by the client, before offset assignment).
    headers: list[BatchHeader]
    #: Sum over batches of lastOffsetDelta + 1: the offsets the append will consume.
    num_records: int
    #: Total bytes (the whole buffer).
    size_bytes: int
    #: Largest maxTimestamp of the batches (-1 if none carries a timestamp).
    max_timestamp: int
    #: Index in ``headers`` of the batch holding ``max_timestamp`` (first one on ties).
    max_timestamp_batch: int

    @property
    def batch_count(self) -> int:
        return len(self.positions)


def validate_batches(
    buf,
    max_message_bytes: int,
    *,
    from_client: bool = True,
    single_batch: bool = False,
) -> ValidatedBatches:
    """Validate a Produce partition's records blob, without touching the records.

    Checks, batch by batch and in Kafka's order: framing (a truncated or empty
    blob is :class:`CorruptRecordError`), magic (0/1 →
    :class:`UnsupportedForMessageFormatError`, > 2 → corrupt), size against
    ``max_message_bytes`` (:class:`BatchTooLargeError`), CRC-32C and the sign of
    lastOffsetDelta/recordsCount (corrupt).

    With ``from_client`` (the default; ``False`` is for batches the broker itself
    builds, e.g. transaction markers) also Kafka's client-origin rules, as
    :class:`InvalidRecordError`: baseOffset 0, recordsCount > 0 and equal to
    lastOffsetDelta + 1, no control batch, no producer id with a negative sequence.

    Kafka's ``LogValidator`` accepts only one v2 batch per partition in a Produce
    request; pass ``single_batch=True`` to enforce that (INVALID_RECORD). By
    default several concatenated batches are accepted and get consecutive offsets.

    Not checked (they need the records themselves): per-record timestamps against
    ``message.timestamp.{before,after}.max.ms`` and keys on compacted topics.
    """
    end = len(buf)
    if end == 0:
        raise CorruptRecordError("empty record set", 0)
    positions: list[int] = []
    headers: list[BatchHeader] = []
    num_records = 0
    max_ts = NO_TIMESTAMP
    max_ts_batch = -1
    pos = 0
    with memoryview(buf) as mv:
        while pos < end:
            size = check_framing(mv, pos, end)
            if size > max_message_bytes:
                raise BatchTooLargeError(
                    f"batch at position {pos} is {size} bytes, larger than "
                    f"max.message.bytes {max_message_bytes}",
                    pos,
                )
            check_batch_contents(mv, pos, size)
            header = read_header(mv, pos)
            if from_client:
                _check_client_batch(header, pos)
            if header.max_timestamp > max_ts:
                max_ts = header.max_timestamp
                max_ts_batch = len(headers)
            positions.append(pos)
            headers.append(header)
            num_records += header.last_offset_delta + 1
            pos += size
    if single_batch and len(positions) > 1:
        raise InvalidRecordError(
            f"a produce request may carry one record batch per partition, got {len(positions)}",
            positions[1],
        )
    return ValidatedBatches(positions, headers, num_records, end, max_ts, max_ts_batch)


def _check_client_batch(h: BatchHeader, pos: int) -> None:
    if h.base_offset != 0:
        raise InvalidRecordError(
            f"the baseOffset of a produced batch must be 0, but it is {h.base_offset}", pos
        )
    if h.records_count <= 0:
        raise InvalidRecordError(f"invalid recordsCount {h.records_count}", pos)
    if h.records_count != h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} "
            f"and recordsCount {h.records_count}",
            pos,
        )
    if h.attributes & CONTROL_FLAG_MASK:
        raise InvalidRecordError("clients are not allowed to write control records", pos)
    if h.producer_id > NO_PRODUCER_ID and h.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {h.base_sequence} for producer id {h.producer_id}", pos
        )


def _target_codec(config: LogConfig) -> int | None:
    return TARGET_CODECS[config.compression_type]


def _must_recompress(h: BatchHeader, target: int | None) -> bool:
    return target is not None and h.compression_type != target and not h.is_control


def _timestamps_suspect(h: BatchHeader, config: LogConfig, now_ms: WallMs) -> bool:
    """Whether a record of this batch may be out of the allowed range (CreateTime only)."""
    if config.message_timestamp_type != "CreateTime":
        return False
    if config.message_timestamp_before_max_ms < _LONG_MAX:
        return True  # the smallest timestamp is in no header
    return h.max_timestamp - now_ms > config.message_timestamp_after_max_ms


def needs_record_validation(v: ValidatedBatches, config: LogConfig, now_ms: WallMs) -> bool:
    """Whether :func:`validate_records` has anything to do (read from the headers only)."""
    target = _target_codec(config)
    return any(
        _must_recompress(h, target) or _timestamps_suspect(h, config, now_ms) for h in v.headers
    )


def validate_records(
    buf: bytes | bytearray | memoryview, v: ValidatedBatches, config: LogConfig, now_ms: WallMs
) -> bytearray | None:
    """Check the records' timestamps and recompress batches not in the topic's codec.

    ``v`` is what :func:`validate_batches` found in ``buf``. Returns the
    new records (every batch, rebuilt or as sent) when a batch was rebuilt, else None.
    Raises :class:`InvalidTimestampError` (with ``record_errors``), or
    :class:`CorruptRecordError` for records that do not parse.
    """
    target = _target_codec(config)
    out: list[bytes | memoryview] = []
    rebuilt = False
    mv = memoryview(buf)
    for pos, h in zip(v.positions, v.headers, strict=True):
        end = pos + h.size
        recompress = _must_recompress(h, target)
        if not recompress and not _timestamps_suspect(h, config, now_ms):
            out.append(mv[pos:end])
            continue
        body = bytes(mv[pos + HEADER_SIZE : end])
        try:
            records = body if h.compression_type == NONE else decompress(h.compression_type, body)
            deltas = scan_records(records, h.records_count)
        except RecordDecodeError as exc:
            raise CorruptRecordError(f"batch at position {pos}: {exc}", pos) from exc
        except Exception as exc:
            raise CorruptRecordError(
                f"batch at position {pos} does not decompress: {exc}", pos
            ) from exc
        if config.message_timestamp_type == "CreateTime":
            _check_timestamps(h, deltas, config, now_ms, pos)
        if recompress and deltas:
            assert target is not None
            out.append(_rebuild(mv[pos:end], h, records, deltas, target, config, now_ms))
            rebuilt = True
        else:
            out.append(mv[pos:end])
    if not rebuilt:
        return None
    return bytearray(b"".join(out))


def check_keys(buf: bytes | bytearray | memoryview, v: ValidatedBatches, topic_partition: str) -> None:
    """Kafka's ``LogValidator.validateKey`` on a compacted topic: a record without a key
    fails its whole batch with INVALID_RECORD, each such record in ``record_errors``."""
    mv = memoryview(buf)
    for pos, h in zip(v.positions, v.headers, strict=True):
        if h.is_control:
            continue
        try:
            (info,) = iter_decoded_batches(mv[pos : pos + h.size])
            keys = [r.key for r in decode_batch_records(info)]
        except (RecordDecodeError, ValueError) as exc:
            raise CorruptRecordError(f"batch at position {pos}: {exc}", pos) from exc
        message = (
            f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
        )
        errors = tuple((i, message) for i, key in enumerate(keys) if key is None)
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]",
                pos,
                errors,
            )


def _check_timestamps(
    h: BatchHeader, deltas: list[tuple[int, int]], config: LogConfig, now_ms: WallMs, pos: int
) -> None:
    """Kafka's ``LogValidator.validateTimestamp`` on every record of a CreateTime batch."""
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    errors: list[tuple[int, str | None]] = []
    base_ts = h.base_timestamp
    for index, (ts_delta, off_delta) in enumerate(deltas):
        ts = base_ts + ts_delta
        if ts == -1:  # NO_TIMESTAMP: not checked
            continue
        diff = now_ms - ts
        if diff > before or -diff > after:
            errors.append(
                (
                    index,
                    (f"Timestamp {ts} of message with offset {h.base_offset + off_delta} is out "
                    f"of range. The timestamp should be within [{_int64(now_ms - before)}, "
                    f"{_int64(now_ms + after)}]"),
                )
            )
    if errors:
        raise InvalidTimestampError(
            "One or more records have been rejected due to invalid timestamp",
            pos,
            tuple(errors),
        )


def _level(config: LogConfig, codec: int) -> int | None:
    return {
        GZIP: config.compression_gzip_level,
        LZ4: config.compression_lz4_level,
        ZSTD: config.compression_zstd_level,
    }.get(codec)


def _rebuild(
    batch: memoryview,
    h: BatchHeader,
    records: bytes,
    deltas: list[tuple[int, int]],
    target: int,
    config: LogConfig,
    now_ms: WallMs,
) -> bytes:
    """One batch with the same records in the ``target`` codec (Kafka's
    ``MemoryRecordsBuilder`` as ``LogValidator`` drives it)."""
    base_ts = h.base_timestamp + deltas[0][0]  # the first record's timestamp
    in_order = deltas[0][0] == 0 and all(off == i for i, (_, off) in enumerate(deltas))
    if not in_order:
        # offset deltas not 0..n-1, or the first timestamp not the base: re-encode
        (info,) = iter_decoded_batches(bytes(batch))
        decoded = decode_batch_records(info)
        parts = []
        for i, r in enumerate(decoded):
            ts = h.base_timestamp + deltas[i][0]
            parts.append(encode_record(i, ts - base_ts, r.key, r.value, r.headers))
        records = b"".join(parts)
    timestamps = [h.base_timestamp + ts_delta for ts_delta, _ in deltas]
    log_append = config.message_timestamp_type == "LogAppendTime"
    max_ts = now_ms if log_append else max(timestamps)
    payload = compress(target, records, _level(config, target))
    out = bytearray(HEADER_SIZE)
    write_header(
        out,
        size=HEADER_SIZE + len(payload),
        count=len(deltas),
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=target,
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        transactional=h.is_transactional,
        log_append_time=log_append,
    )
    out += payload
    set_crc(out, batch_crc((out,)))
    return bytes(out)
