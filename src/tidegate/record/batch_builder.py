"""Encode v2 record batches: one record encoder and one header writer.

Two users share this module. The broker builds the few batches it writes itself
(control batches, internal topics, tests) with :func:`build_batch`; the producer
(``tidegate.producer``) encodes each record with :func:`encode_record` straight
into the buffer or chunks that back an open batch, and finishes the batch with
:func:`write_header` and :func:`batch_crc`, so the bytes are the same whichever
way a batch was assembled. The layout is Kafka's ``DefaultRecord`` /
``DefaultRecordBatch``; the tests compare it byte for byte with kafka-python's
``DefaultRecordBatchBuilder``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from crc32c import crc32c

from tidegate.utils.byte_utils import size_of_varlong, varlong

from .record_batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)

__all__ = [
    "MAX_RECORD_OVERHEAD",
    "Record",
    "batch_crc",
    "build_batch",
    "encode_record",
    "record_size_upper_bound",
    "set_crc",
    "varint",
    "write_header",
]

#: Kafka's ``DefaultRecord.MAX_RECORD_OVERHEAD``: size varint (5) + attributes (1) +
#: timestamp delta varlong (10) + offset delta varint (5).
MAX_RECORD_OVERHEAD = 21


class Record(NamedTuple):
    """One record to encode: ``headers`` is a sequence of ``(str key, bytes|None value)``."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = 0
    headers: Sequence[tuple[str, bytes | None]] = ()


# Record lengths, key/value lengths and offset deltas are small non-negative ints:
# their encodings are looked up rather than computed, which is most of what makes
# the per-record encoder cheap in CPython. The table is written out by byte count (a
# non-negative i zig-zags to 2i): 2 ms at import instead of 5 for varlong() of each.
_CACHED = 1 << 14
_VARINTS: tuple[bytes, ...] = tuple(
    [bytes((v,)) for v in range(0, 1 << 7, 2)]
    + [bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(1 << 7, 1 << 14, 2)]
    + [bytes(((v & 0x7F) | 0x80, ((v >> 7) & 0x7F) | 0x80, v >> 14)) for v in range(1 << 14, 2 * _CACHED, 2)]
)
_NULL = varlong(-1)  # a null key, value or header value: length -1


def varint(value: int) -> bytes:
    """``value`` as a zig-zag varint (:func:`~tidegate.utils.byte_utils.varlong`, small
    non-negative values from a table)."""
    if 0 <= value < _CACHED:
        return _VARINTS[value]
    return varlong(value)


def _headers_parts(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    hs = list(headers)
    parts = [varint(len(hs))]
    for h_key, h_value in hs:
        k = h_key.encode("utf-8") if isinstance(h_key, str) else bytes(h_key)
        parts.append(varint(len(k)))
        parts.append(k)
        if h_value is None:
            parts.append(_NULL)
        else:
            parts.append(varint(len(h_value)))
            parts.append(h_value)
    return b"".join(parts)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    """One v2 record: length varint, attributes, deltas, key, value, headers.

    ``key``/``value`` may be any bytes-like object (``None`` is a null). The
    result is one ``bytes`` object, built with a single join.
    """
    vs = _VARINTS
    td = vs[timestamp_delta] if 0 <= timestamp_delta < _CACHED else varlong(timestamp_delta)
    od = vs[offset_delta] if offset_delta < _CACHED else varlong(offset_delta)
    if key is None:
        kh = _NULL
        key = b""
    else:
        n = len(key)
        kh = vs[n] if n < _CACHED else varlong(n)
    if value is None:
        vh = _NULL
        value = b""
    else:
        n = len(value)
        vh = vs[n] if n < _CACHED else varlong(n)
    hb = _headers_parts(headers) if headers else b"\x00"
    body_len = 1 + len(td) + len(od) + len(kh) + len(key) + len(vh) + len(value) + len(hb)
    lh = vs[body_len] if body_len < _CACHED else varlong(body_len)
    return b"".join((lh, b"\x00", td, od, kh, key, vh, value, hb))


def record_size_upper_bound(
    key: Any, value: Any, headers: Iterable[tuple[str, bytes | None]] = ()
) -> int:
    """Kafka's ``DefaultRecord.recordSizeUpperBound``: the most bytes a record with this
    key, value and headers can take in a v2 batch, whatever its deltas."""
    size = MAX_RECORD_OVERHEAD
    size += 1 if key is None else size_of_varlong(len(key)) + len(key)
    size += 1 if value is None else size_of_varlong(len(value)) + len(value)
    if not headers:
        return size + 1
    hs = list(headers)
    size += size_of_varlong(len(hs))
    for h_key, h_value in hs:
        k = len(h_key.encode("utf-8")) if isinstance(h_key, str) else len(h_key)
        size += size_of_varlong(k) + k
        size += 1 if h_value is None else size_of_varlong(len(h_value)) + len(h_value)
    return size


def write_header(
    buf: Any,
    *,
    size: int,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    magic: int = CURRENT_MAGIC,
) -> None:
    """Write every field of the 61-byte v2 header into ``buf[0:61]`` except the CRC
    (left 0): ``size`` is the whole batch in bytes, ``count`` its number of records
    (offset deltas 0..count-1)."""
    attrs = compression & 0x07
    if log_append_time:
        attrs |= TIMESTAMP_TYPE_MASK
    if transactional:
        attrs |= TRANSACTIONAL_FLAG_MASK
    if control:
        attrs |= CONTROL_FLAG_MASK
    HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        magic,
        0,
        attrs,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )


def batch_crc(segments: Sequence[Any]) -> int:
    """CRC-32C of a batch (attributes to the end) held in ``segments`` in order, the
    first holding the whole header; computed piece by piece, never joined."""
    crc = crc32c(memoryview(segments[0])[ATTRIBUTES_OFFSET:])
    for seg in segments[1:]:
        crc = crc32c(seg, crc)
    return crc


def set_crc(first_segment: Any, crc: int) -> None:
    """Store ``crc`` in the header at the start of ``first_segment``."""
    first_segment[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    magic: int = CURRENT_MAGIC,
) -> bytearray:
    """Encode ``records`` as one uncompressed batch with a valid CRC-32C."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    buf = bytearray(RECORD_BATCH_OVERHEAD)
    for i, r in enumerate(records):
        buf += encode_record(i, r.timestamp - base_ts, r.key, r.value, r.headers)
    write_header(
        buf,
        size=len(buf),
        count=len(records),
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        log_append_time=log_append_time,
        magic=magic,
    )
    set_crc(buf, batch_crc((buf,)))
    return buf
