"""A hand-written encoder for Fetch responses (v4-v17), the broker's biggest answers.

kio writes a response into one ``BytesIO``: every record byte is copied from the log
into a ``bytes``, then into the buffer, then out as one more ``bytes``. This encoder
writes everything *except* the records itself and returns the response as *pieces*:
header bytes, and each partition's records as it came from the log — a
:class:`~tidegate.record.file_region.FileRegion` (a range of a segment file the shell sends
with ``os.sendfile``) or bytes. Nothing here reads a region.

The bytes are exactly kio's (``tests/unit/test_fetch_fast.py`` compares them over
every version and generated field combinations, regions materialized). The input is
the dict KafkaApis builds for kio (field names as kio's), so both encoders take the
same values; :func:`fetch_response_size` is the size the pieces add up to, known
without encoding (the fetch quota decides its throttle from it before encoding, as
Kafka's ``FetchResponse.sizeOf``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from tidegate.record.file_region import FileRegion
from tidegate.utils.byte_utils import write_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_OFFSETS = struct.Struct(">qq")  # last_stable_offset, log_start_offset (v5+)
_ZERO_UUID = bytes(16)

Piece = bytes | bytearray | memoryview | FileRegion

MIN_VERSION = 4
MAX_VERSION = 17


def _ms(value: Any) -> int:
    if hasattr(value, "total_seconds"):
        return (value.days * 86400 + value.seconds) * 1000 + value.microseconds // 1000
    return int(value)


class _Writer:
    """Accumulates header bytes; records close the current byte piece."""

    __slots__ = ("buf", "flexible", "pieces", "size")

    def __init__(self, flexible: bool) -> None:
        self.buf = bytearray()
        self.pieces: list[Piece] = []
        self.flexible = flexible
        self.size = 0

    def length(self, n: int) -> None:
        """An array or records length; -1 is null."""
        if self.flexible:
            write_uvarint(n + 1, self.buf)
        else:
            self.buf += _I32.pack(n)

    def string(self, s: str | None) -> None:
        if s is None:
            self.buf += b"\x00" if self.flexible else _I16.pack(-1)  # a null string
            return
        data = s.encode()
        if self.flexible:
            write_uvarint(len(data) + 1, self.buf)
        else:
            self.buf += _I16.pack(len(data))
        self.buf += data

    def records(self, records: bytes | bytearray | memoryview | FileRegion | None) -> None:
        if records is None:
            self.length(-1)
            return
        n = len(records)
        self.length(n)
        if n == 0:
            return
        if not isinstance(records, FileRegion | bytes | bytearray | memoryview):
            raise TypeError(f"Fetch records are a FileRegion or bytes, not {type(records).__name__}")
        if isinstance(records, FileRegion) or n > 4096:
            self.flush()
            self.pieces.append(records)
            self.size += n
        else:
            self.buf += records

    def flush(self) -> None:
        if self.buf:
            self.size += len(self.buf)
            self.pieces.append(bytes(self.buf))
            self.buf = bytearray()

    def tagged(self, fields: list[tuple[int, bytes]]) -> None:
        write_uvarint(len(fields), self.buf)
        for tag, data in fields:
            write_uvarint(tag, self.buf)
            write_uvarint(len(data), self.buf)
            self.buf += data


def _partition_tags(p: dict) -> list[tuple[int, bytes]]:
    tags = []
    de = p.get("diverging_epoch")
    if de is not None:
        epoch, end = _field(de, "epoch", -1), _field(de, "end_offset", -1)
        if (epoch, end) != (-1, -1):
            tags.append((0, _I32.pack(epoch) + _I64.pack(end) + b"\x00"))
    cl = p.get("current_leader")
    if cl is not None:
        leader, epoch = _field(cl, "leader_id", -1), _field(cl, "leader_epoch", -1)
        if (leader, epoch) != (-1, -1):
            tags.append((1, _I32.pack(leader) + _I32.pack(epoch) + b"\x00"))
    sn = p.get("snapshot_id")
    if sn is not None:
        end, epoch = _field(sn, "end_offset", -1), _field(sn, "epoch", -1)
        if (end, epoch) != (-1, -1):
            tags.append((2, _I64.pack(end) + _I32.pack(epoch) + b"\x00"))
    return tags


def _field(obj: Any, name: str, default: int) -> int:
    if isinstance(obj, dict):
        return int(obj.get(name, default))
    return int(getattr(obj, name, default))


def _node_endpoints(endpoints: Sequence[dict]) -> bytes:
    w = _Writer(True)
    w.length(len(endpoints))
    for e in endpoints:
        w.buf += _I32.pack(e["node_id"])
        w.string(e["host"])
        w.buf += _I32.pack(e["port"])
        w.string(e.get("rack"))
        w.buf += b"\x00"
    return bytes(w.buf)


def encode_fetch_response(correlation_id: int, version: int, values: dict) -> list[Piece]:
    """The framed response (size prefix, header, body) as pieces, in order."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here")
    flexible = version >= 12
    w = _Writer(flexible)
    buf = w.buf
    buf += b"\x00\x00\x00\x00"  # the size, filled in below
    buf += _I32.pack(correlation_id)
    if flexible:
        buf += b"\x00"  # response header v1: no tagged fields
    buf += _I32.pack(_ms(values.get("throttle_time", 0)))
    if version >= 7:
        buf += _I16.pack(int(values.get("error_code", 0)))
        buf += _I32.pack(values.get("session_id", 0))
    responses = values["responses"]
    w.length(len(responses))
    for t in responses:
        if version >= 13:
            topic_id = t.get("topic_id")
            w.buf += topic_id.bytes if isinstance(topic_id, uuid.UUID) else _ZERO_UUID
        else:
            w.string(t["topic"])
        parts = t["partitions"]
        w.length(len(parts))
        for p in parts:
            b = w.buf
            b += _PARTITION.pack(p["partition_index"], int(p["error_code"]), p["high_watermark"])
            b += _I64.pack(p.get("last_stable_offset", -1))
            if version >= 5:
                b += _I64.pack(p.get("log_start_offset", -1))
            aborted = p.get("aborted_transactions")
            if aborted is None:
                w.length(-1)
            else:
                w.length(len(aborted))
                for a in aborted:
                    w.buf += _OFFSETS.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        w.buf += b"\x00"
            if version >= 11:
                w.buf += _I32.pack(p.get("preferred_read_replica", -1))
            w.records(p.get("records"))
            if flexible:
                w.tagged(_partition_tags(p))
        if flexible:
            w.buf += b"\x00"
    if flexible:
        endpoints = values.get("node_endpoints") or ()
        if version >= 16 and endpoints:
            w.tagged([(0, _node_endpoints(endpoints))])
        else:
            w.buf += b"\x00"
    w.flush()
    first = w.pieces[0]
    assert isinstance(first, bytes)
    w.pieces[0] = _I32.pack(w.size - 4) + first[4:]
    return w.pieces


def fetch_response_size(version: int, values: dict) -> int:
    """The framed size :func:`encode_fetch_response` gives (the fetch quota's
    measure, before encoding: Kafka's ``FetchResponse.sizeOf``). Headers are small
    next to records, so they are encoded with empty records and the records added."""
    records = 0
    stripped = []
    for t in values["responses"]:
        parts = []
        for p in t["partitions"]:
            r = p.get("records")
            if r:
                records += len(r)
                p = {**p, "records": _Sized(len(r))}
            parts.append(p)
        stripped.append({**t, "partitions": parts})
    pieces = encode_fetch_response(0, version, {**values, "responses": stripped})
    return sum(len(p) for p in pieces if not isinstance(p, _Sized)) + records


class _Sized(FileRegion):
    """A stand-in of a given length (no file) for sizing."""

    __slots__ = ()

    def __init__(self, length: int) -> None:
        super().__init__(-1, 0, length)


def release_pieces(pieces: Sequence[Piece]) -> None:
    """Close the regions of a response that will not be sent."""
    for p in pieces:
        if isinstance(p, FileRegion):
            p.close()
