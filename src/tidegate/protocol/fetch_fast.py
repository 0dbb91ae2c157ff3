"""A hand-written encoder for Fetch responses (v4-v17), the broker's biggest answers.

kio writes a response into one ``BytesIO``: every record byte is copied from the log
into a ``bytes``, then into the buffer, then out as one more ``bytes``. This encoder
writes everything *except* the records itself and returns the response as *pieces*:
header bytes, and each partition's records as it came from the log — a
:class:`~tidegate.record.file_region.FileRegion` (a range of a segment file the shell sends
with ``os.sendfile``) or bytes. Nothing here reads a region.

The bytes are exactly kio's (``tests/unit/test_fetch_fast.py`` compares them over
every version and generated field combinations, regions materialized). The input is
the generated :class:`~tidegate.protocol.messages.fetch.FetchResponse` KafkaApis builds
(its ``records`` a file region or bytes); :func:`fetch_response_size` is the size the
pieces add up to, known without encoding (the fetch quota decides its throttle from it
before encoding, as Kafka's ``FetchResponse.sizeOf``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

from tidegate.protocol.messages._base import Records
from tidegate.protocol.messages.fetch import FetchResponse, NodeEndpoint, PartitionData
from tidegate.record.file_region import FileRegion
from tidegate.utils.byte_utils import write_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_OFFSETS = struct.Struct(">qq")  # an aborted transaction: producer_id, first_offset

Piece = bytes | bytearray | memoryview | FileRegion

MIN_VERSION = 4
MAX_VERSION = 17

#: Partitions encoded once for many responses (:func:`encode_fetch_response`): by
#: (id, version), the partition (kept alive, so its id is not reused), the bytes before
#: its records piece (all of it when the records are inline), the records piece or
#: None, the bytes after it.
#: A whole response made only of such partitions is kept too, by (what its bytes after
#: the correlation id depend on, version): its partitions (kept alive) and its pieces;
#: another response with the same key costs a copy of its first piece.
SharedPartitions: TypeAlias = dict[
    tuple[Any, int],
    tuple[PartitionData, bytes, Piece | None, bytes] | tuple[tuple[PartitionData, ...], tuple[Piece, ...]],
]


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

    def records(self, records: Records | None) -> None:
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


def _partition_tags(p: PartitionData) -> list[tuple[int, bytes]]:
    """The tagged fields of a partition (v12+) that differ from their defaults."""
    tags = []
    de = p.diverging_epoch
    if de.epoch != -1 or de.end_offset != -1:
        tags.append((0, _I32.pack(de.epoch) + _I64.pack(de.end_offset) + b"\x00"))
    cl = p.current_leader
    if cl.leader_id != -1 or cl.leader_epoch != -1:
        tags.append((1, _I32.pack(cl.leader_id) + _I32.pack(cl.leader_epoch) + b"\x00"))
    sn = p.snapshot_id
    if sn.end_offset != -1 or sn.epoch != -1:
        tags.append((2, _I64.pack(sn.end_offset) + _I32.pack(sn.epoch) + b"\x00"))
    return tags


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    w = _Writer(True)
    w.length(len(endpoints))
    for e in endpoints:
        w.buf += _I32.pack(e.node_id)
        w.string(e.host)
        w.buf += _I32.pack(e.port)
        w.string(e.rack)
        w.buf += b"\x00"
    return bytes(w.buf)


def encode_fetch_response(
    correlation_id: int, version: int, response: FetchResponse, shared: SharedPartitions | None = None
) -> list[Piece]:
    """The framed response (size prefix, header, body) as pieces, in order. With
    ``shared``, a partition whose records are ``bytes`` is encoded once per version for
    every response it is in (by identity: the responses of one completion batch share
    their :class:`PartitionData`, which nobody changes meanwhile)."""
    return _encode(correlation_id, version, response, None, shared)


def _encode(
    correlation_id: int, version: int, response: FetchResponse, sizing: list[int] | None,
    shared: SharedPartitions | None = None,
) -> list[Piece]:
    """:func:`encode_fetch_response`; with ``sizing`` (a one-int list), records are not
    written but their lengths added to ``sizing[0]`` (:func:`fetch_response_size`;
    never with ``shared``)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here")
    whole = _whole_key(version, response) if shared is not None else None
    if whole is not None:
        assert shared is not None
        done = shared.get(whole)
        if done is not None:  # the same response but for its correlation id
            pieces = list(cast("tuple[Piece, ...]", done[1]))
            frame = cast(bytes, pieces[0])
            pieces[0] = frame[:4] + _I32.pack(correlation_id) + frame[8:]
            return pieces
    flexible = version >= 12
    w = _Writer(flexible)
    buf = w.buf
    buf += b"\x00\x00\x00\x00"  # the size, filled in below
    buf += _I32.pack(correlation_id)
    if flexible:
        buf += b"\x00"  # response header v1: no tagged fields
    buf += _I32.pack(response.throttle_time)
    if version >= 7:
        buf += _I16.pack(response.error_code)
        buf += _I32.pack(response.session_id)
    responses = response.responses
    w.length(len(responses))
    for t in responses:
        if version >= 13:
            w.buf += t.topic_id.bytes
        else:
            w.string(t.topic)
        parts = t.partitions
        w.length(len(parts))
        for p in parts:
            if shared is None or not isinstance(p.records, bytes):
                _partition(w, p, version, sizing)
                continue
            # A partition several responses of a completion batch carry (the same
            # object, records in memory): encoded once, its pieces reused.
            key = (id(p), version)
            done = shared.get(key)
            if done is None:
                mark, start = len(w.pieces), len(w.buf)
                _partition(w, p, version, sizing)
                if len(w.pieces) == mark:
                    done = shared[key] = (p, bytes(w.buf[start:]), None, b"")
                else:  # the records went as a piece of their own: (prefix, records, suffix)
                    head = w.pieces[mark]
                    assert isinstance(head, bytes)
                    done = shared[key] = (p, head[start:], w.pieces[mark + 1], bytes(w.buf))
                    if len(w.pieces) != mark + 2:
                        raise AssertionError("a partition's records are one piece")
                continue
            _p, prefix, rec, suffix = cast("tuple[PartitionData, bytes, Piece | None, bytes]", done)
            w.buf += prefix
            if rec is not None:
                w.flush()
                w.pieces.append(rec)
                w.size += len(rec)
                w.buf += suffix
        if flexible:
            w.buf += b"\x00"
    if flexible:
        endpoints = response.node_endpoints
        if version >= 16 and endpoints:
            w.tagged([(0, _node_endpoints(endpoints))])
        else:
            w.buf += b"\x00"
    w.flush()
    first = w.pieces[0]
    assert isinstance(first, bytes)
    w.pieces[0] = _I32.pack(w.size - 4 + (sizing[0] if sizing is not None else 0)) + first[4:]
    if whole is not None:
        assert shared is not None
        shared[whole] = (tuple(p for t in responses for p in t.partitions), tuple(w.pieces))
    return w.pieces


def _whole_key(version: int, response: FetchResponse) -> tuple[Any, int] | None:
    """What a response's bytes after its correlation id depend on, when every partition
    in it has its records in memory (shared by a completion batch, by identity), else
    None: its throttle, error, session, node endpoints (none), and per topic its name,
    id and partition objects."""
    if version >= 16 and response.node_endpoints:
        return None
    topics = []
    for t in response.responses:
        parts = t.partitions
        for p in parts:
            if not isinstance(p.records, bytes):
                return None
        topics.append((t.topic, t.topic_id, tuple(map(id, parts))))
    return (response.throttle_time, response.error_code, response.session_id, tuple(topics)), version


def _partition(w: _Writer, p: PartitionData, version: int, sizing: list[int] | None) -> None:
    """One partition of a topic's response (see :func:`_encode`)."""
    flexible = w.flexible
    b = w.buf
    b += _PARTITION.pack(p.partition_index, p.error_code, p.high_watermark)
    b += _I64.pack(p.last_stable_offset)
    if version >= 5:
        b += _I64.pack(p.log_start_offset)
    aborted = p.aborted_transactions
    if aborted is None:
        w.length(-1)
    else:
        w.length(len(aborted))
        for a in aborted:
            w.buf += _OFFSETS.pack(a.producer_id, a.first_offset)
            if flexible:
                w.buf += b"\x00"
    if version >= 11:
        w.buf += _I32.pack(p.preferred_read_replica)
    records = p.records
    if sizing is not None and records:
        sizing[0] += len(records)
        w.length(len(records))
    else:
        w.records(records)
    if flexible:
        w.tagged(_partition_tags(p))


def fetch_response_size(version: int, response: FetchResponse) -> int:
    """The framed size :func:`encode_fetch_response` gives (the fetch quota's measure,
    before encoding: Kafka's ``FetchResponse.sizeOf``): the response is encoded without
    its records, whose lengths are added."""
    records = [0]
    pieces = _encode(0, version, response, records)
    return sum(len(p) for p in pieces) + records[0]


def release_pieces(pieces: Sequence[Piece]) -> None:
    """Close the regions of a response that will not be sent."""
    for p in pieces:
        if isinstance(p, FileRegion):
            p.close()
