"""Re-encoding the batches the log cleaner keeps part of (what Kafka's
``MemoryRecords.filterTo`` does for its ``Cleaner``).

A batch is parsed into :class:`KeyedRecord` (offset, key, tombstone, timestamp, and the
record's remaining bytes, kept as they are), and a batch with some of its records is
rebuilt with the header fields of the original (offsets, producer id, epoch, base
sequence, last offset delta), a new base timestamp (the delete horizon when attribute
bit 6 is set), compressed again in the batch's codec.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.record.batch_builder import batch_crc, set_crc, varint
from tidegate.record.compression import compress, decompress
from tidegate.record.record_batch import (
    COMPRESSION_CODEC_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
)
from tidegate.utils.byte_utils import read_varlong

__all__ = ["KeyedRecord", "decode_records", "encode_record_tail", "parse_records", "rebuild_batch"]


@dataclass
class KeyedRecord:
    """A record as the cleaner judges it: its offset, key, whether it is a tombstone,
    its timestamp, and its bytes after the timestamp delta (re-encoded unchanged)."""

    offset: int
    key: bytes | None
    is_tombstone: bool
    timestamp: int
    #: the record's bytes after its timestamp delta (offset delta, key, value, headers)
    tail: bytes


def parse_records(data: bytes, base_offset: int, base_ts: int) -> list[KeyedRecord]:
    """The records of an uncompressed records section (a batch's body)."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        length, pos = read_varlong(data, pos)
        end = pos + length
        ts_delta, p = read_varlong(data, pos + 1)
        tail_start = p
        off_delta, p = read_varlong(data, p)
        klen, p = read_varlong(data, p)
        key = None
        if klen >= 0:
            key = bytes(data[p : p + klen])
            p += klen
        vlen, p = read_varlong(data, p)
        out.append(KeyedRecord(base_offset + off_delta, key, vlen < 0, base_ts + ts_delta,
                               bytes(data[tail_start:end])))  # fmt: skip
        pos = end
    return out


def encode_record_tail(rec: KeyedRecord, base_ts: int) -> bytes:
    """A record's bytes in a batch of base timestamp ``base_ts``."""
    body = b"\x00" + varint(rec.timestamp - base_ts) + rec.tail
    return varint(len(body)) + body


def rebuild_batch(h: BatchHeader, records: list[KeyedRecord], base_ts: int, attributes: int) -> bytes:
    """A batch with ``h``'s header fields (offsets, producer, sequence, last offset delta
    kept), the given records and base timestamp (the delete horizon when bit 6 is set)."""
    section = b"".join(encode_record_tail(r, base_ts) for r in records)
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec and section:
        section = compress(codec, section)
    buf = bytearray(HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        buf, 0, h.base_offset, HEADER_SIZE + len(section) - LOG_OVERHEAD,
        h.partition_leader_epoch, h.magic, 0, attributes, h.last_offset_delta, base_ts,
        h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, len(records),
    )  # fmt: skip
    buf += section
    set_crc(buf, batch_crc((buf,)))
    return bytes(buf)


def decode_records(batch: bytes, h: BatchHeader) -> list[KeyedRecord]:
    """The records of the whole batch ``batch`` (header ``h``), decompressed."""
    body = batch[HEADER_SIZE:]
    codec = h.attributes & COMPRESSION_CODEC_MASK
    if codec:
        body = decompress(codec, body)
    return parse_records(body, h.base_offset, h.base_timestamp)
