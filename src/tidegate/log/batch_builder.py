"""Build uncompressed v2 record batches.

For the few places the broker writes records itself (control batches such as
transaction markers, internal topics) and for tests. The produce path never
uses this: it stores the client's bytes as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from crc32c import crc32c

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

__all__ = ["Record", "build_batch", "encode_record", "encode_varint"]


class Record(NamedTuple):
    """One record to encode: ``headers`` is a sequence of ``(str key, bytes|None value)``."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = 0
    headers: Sequence[tuple[str, bytes | None]] = ()


def encode_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zig-zag varint (Kafka's ``ByteUtils.writeVarint``/``Varlong``)."""
    v = (value << 1) ^ (value >> 63)
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    """One v2 record: length varint, attributes, deltas, key, value, headers."""
    body = bytearray(b"\x00")  # record attributes: unused
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    for blob in (key, value):
        if blob is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(blob), body)
            body += blob
    headers = list(headers)
    encode_varint(len(headers), body)
    for h_key, h_value in headers:
        k = h_key.encode("utf-8")
        encode_varint(len(k), body)
        body += k
        if h_value is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(h_value), body)
            body += h_value
    out = bytearray()
    encode_varint(len(body), out)
    out += body
    return bytes(out)


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
    body = bytearray()
    for i, r in enumerate(records):
        body += encode_record(i, r.timestamp - base_ts, r.key, r.value, r.headers)
    attrs = 0
    if log_append_time:
        attrs |= TIMESTAMP_TYPE_MASK
    if transactional:
        attrs |= TRANSACTIONAL_FLAG_MASK
    if control:
        attrs |= CONTROL_FLAG_MASK
    buf = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        magic,
        0,
        attrs,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf += body
    crc = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
    buf[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return buf
