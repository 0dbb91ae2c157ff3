"""Decoding the records inside record batches v2 (Kafka's ``DefaultRecord``).

:mod:`tidegate.record.record_batch` reads and checks the 61-byte batch header and
:mod:`tidegate.record.batch_builder` writes batches; this module reads the records back:
it decompresses the records section (gzip, snappy, lz4, zstd via
:func:`tidegate.record.compression.decompress`) and parses each record's
varint-framed fields::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value
    headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*

Lengths of -1 mean null. Control batches (transaction markers) carry no user data and
are skipped. A batch cut short at the end of a response (the broker sends whole
batches, but ``partition_max_bytes`` can end a response inside one) is not an error:
decoding stops there and the caller fetches again from the next offset. Each batch
comes with its producer id and transactional bit, what a ``read_committed`` reader
needs to drop aborted transactions (:class:`tidegate.client.fetcher.CompletedFetch`).

Users: the consumer side (:mod:`tidegate.client.fetcher`, the Spark source) and the
broker reading its internal topics back (:mod:`tidegate.log.replay`).
Everything here is sans-IO: bytes in, records out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from tidegate.utils.byte_utils import VarintError, read_varlong

from .compression import decompress
from .record_batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "ConsumerRecord",
    "RecordDecodeError",
    "decode_batch_records",
    "iter_decoded_batches",
    "scan_records",
]

CREATE_TIME = TIMESTAMP_TYPE_CREATE_TIME
LOG_APPEND_TIME = TIMESTAMP_TYPE_LOG_APPEND_TIME
_OFFSET_AND_LENGTH = struct.Struct(">qi")


class RecordDecodeError(Exception):
    """A batch whose bytes do not parse (or an unsupported message format)."""


class ConsumerRecord(NamedTuple):
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class BatchInfo(NamedTuple):
    base_offset: int
    last_offset: int
    is_control: bool
    records: bytes  # the (decompressed) records section
    records_count: int  # not `count`: that would shadow tuple.count
    base_timestamp: int
    max_timestamp: int
    timestamp_type: int
    #: -1 (Kafka's NO_PRODUCER_ID) for a batch from a producer that is neither
    #: idempotent nor transactional; what read_committed filtering keys on
    producer_id: int = -1
    producer_epoch: int = -1
    is_transactional: bool = False
    #: the leader epoch the batch was appended in (KIP-101); what a consumer validates
    #: its position with after a leader change (KIP-320)
    partition_leader_epoch: int = -1


def iter_decoded_batches(buf: bytes | memoryview) -> Iterator[BatchInfo]:
    """The complete v2 batches in ``buf`` (a Fetch response's ``records``), with their
    records section decompressed. A trailing partial batch is ignored."""
    mv = memoryview(buf)
    n = len(mv)
    pos = 0
    while pos + LOG_OVERHEAD <= n:
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(mv, pos)
        total = batch_length + LOG_OVERHEAD
        if batch_length < MIN_BATCH_LENGTH:
            if pos + total > n:
                return  # a partial batch header at the end
            raise RecordDecodeError(f"batch at offset {base_offset} has length {batch_length}")
        if pos + total > n:
            return  # partial batch at the end of the response
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            raise RecordDecodeError(
                f"message format v{magic} at offset {base_offset}: only v2 record batches "
                "(Kafka 0.11+) are supported"
            )
        (
            _bo,
            _bl,
            leader_epoch,
            _magic,
            _crc,
            attributes,
            last_delta,
            base_ts,
            max_ts,
            pid,
            pepoch,
            _seq,
            count,
        ) = HEADER_STRUCT.unpack_from(mv, pos)
        codec = attributes & COMPRESSION_CODEC_MASK
        body = mv[pos + HEADER_SIZE : pos + total]
        records = bytes(body) if codec == 0 else decompress(codec, bytes(body))
        yield BatchInfo(
            base_offset,
            base_offset + last_delta,
            bool(attributes & CONTROL_FLAG_MASK),
            records,
            count,
            base_ts,
            max_ts,
            LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME,
            pid,
            pepoch,
            bool(attributes & TRANSACTIONAL_FLAG_MASK),
            leader_epoch,
        )
        pos += total


def decode_batch_records(batch: BatchInfo, *, include_control: bool = False) -> list[ConsumerRecord]:
    """Every record of one batch (a control batch gives an empty list unless
    ``include_control``: then its control records, e.g. a transaction marker).

    One loop with the varints of each field inlined (about 110 lines): the consumer's
    decoding hot path, where a call per field cost more than the rest of the decoding
    (``benchmarks/record_codec.py``, "decode_batch_records")."""
    if batch.is_control and not include_control:
        return []
    data = batch.records
    n = len(data)
    base_offset = batch.base_offset
    base_ts = batch.base_timestamp
    ts_type = batch.timestamp_type
    log_append = ts_type == LOG_APPEND_TIME
    max_ts = batch.max_timestamp
    out: list[ConsumerRecord] = []
    append = out.append
    pos = 0
    zz = read_varlong
    new_record = tuple.__new__
    # Varints below 0x80 (one byte) are decoded inline: most fields of most records
    # (deltas, lengths under 64, header counts) are, and a call per field costs more
    # than the rest of the decoding.
    try:
        for _ in range(batch.records_count):
            # length (zigzag varint): skipped, the fields are self-delimiting
            while data[pos] & 0x80:
                pos += 1
            pos += 2  # the length's last byte, then attributes (unused in v2)
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = zz(data, pos)
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                off_delta, pos = zz(data, pos)
            b = data[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                klen = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                klen, pos = zz(data, pos)
            if klen < 0:
                key = None
            else:
                key = data[pos : pos + klen]
                pos += klen
            b = data[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                vlen = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                vlen, pos = zz(data, pos)
            if vlen < 0:
                value = None
            else:
                value = data[pos : pos + vlen]
                pos += vlen
            hcount = data[pos]
            if hcount == 0:
                pos += 1
                headers: tuple = ()
            else:
                hcount, pos = zz(data, pos)
                hs = []
                for _h in range(hcount):
                    hklen, pos = zz(data, pos)
                    hkey = data[pos : pos + hklen].decode("utf-8")
                    pos += hklen
                    hvlen, pos = zz(data, pos)
                    if hvlen < 0:
                        hval = None
                    else:
                        hval = data[pos : pos + hvlen]
                        pos += hvlen
                    hs.append((hkey, hval))
                headers = tuple(hs)
            append(
                new_record(
                    ConsumerRecord,
                    (
                        base_offset + off_delta,
                        max_ts if log_append else base_ts + ts_delta,
                        ts_type,
                        key,
                        value,
                        headers,
                    ),
                )
            )
    except (IndexError, UnicodeDecodeError, VarintError) as exc:
        raise RecordDecodeError(f"corrupt record in batch at offset {base_offset}: {exc}") from exc
    if pos > n:
        raise RecordDecodeError(f"records of batch at offset {base_offset} overrun its length")
    return out


def scan_records(data: bytes, count: int) -> list[tuple[int, int]]:
    """(timestamp delta, offset delta) of each record of an (uncompressed) records
    section that should hold ``count`` records; RecordDecodeError if it holds another
    number, or a record overruns the section. Reads only each record's first fields, so
    it is what the broker uses to check timestamps and to rebuild a batch."""
    out: list[tuple[int, int]] = []
    append = out.append
    n = len(data)
    pos = 0
    zz = read_varlong
    try:
        while pos < n:
            length, pos = zz(data, pos)
            end = pos + length
            if length < 3 or end > n:
                raise RecordDecodeError(f"record {len(out)} has an invalid length {length}")
            ts_delta, p = zz(data, pos + 1)  # after the attributes byte
            off_delta, p = zz(data, p)
            append((ts_delta, off_delta))
            pos = end
    except VarintError as exc:
        raise RecordDecodeError(f"record {len(out)}: {exc}") from exc
    if len(out) != count:
        raise RecordDecodeError(f"the batch declares {count} records but holds {len(out)}")
    return out


def decode_records(buf: bytes | memoryview) -> Iterator[ConsumerRecord]:
    """All user records in ``buf`` (control batches skipped), in offset order."""
    for batch in iter_decoded_batches(buf):
        yield from decode_batch_records(batch)
