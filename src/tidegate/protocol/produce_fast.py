"""A hand-written decoder for Produce requests (v3-v13), the broker's hottest request.

kio decodes the ``records`` field of each partition into a fresh ``bytes``
object, and the log then needs a writable copy to assign offsets: two copies of
every produced batch, made while the request's pool buffer is still held (see
docs/benchmarks.md for the profile). This decoder returns *writable memoryviews
into the request buffer itself*, so the log rewrites offsets in place in memory
taken from the KIP-72 pool and writes it out, with no copy at all.

The result is the generated :class:`~tidegate.protocol.messages.produce.ProduceRequest`
(its ``records`` are :data:`~tidegate.protocol.messages._base.Records`, views here).
Everything else about the request is decoded exactly as kio decodes it;
``tests/unit/test_produce_fast.py`` checks that on requests kio encodes, for
every supported version. Anything unexpected raises :class:`ValueError` (the
caller turns that into a closed connection, as for any undecodable request).
"""

from __future__ import annotations

import struct
import uuid
from typing import Literal, overload

from tidegate.protocol.messages._base import ZERO_UUID
from tidegate.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from tidegate.utils.byte_utils import read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


class _Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ValueError(f"produce request truncated at byte {pos} (needs {n} more)")
        self.pos = pos + n
        return pos

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self.need(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self.need(4))[0]

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte: most lengths and counts
            self.pos = pos + 1
            return self.buf[pos]
        value, self.pos = read_uvarint(self.buf, pos, self.end)
        return value

    @overload
    def string(self, flexible: bool, nullable: Literal[False]) -> str: ...
    @overload
    def string(self, flexible: bool, nullable: bool) -> str | None: ...
    def string(self, flexible: bool, nullable: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            if not nullable:
                raise ValueError("null value for a non-nullable string")
            return None
        start = self.need(n)
        return str(self.buf[start : start + n], "utf-8")

    def uuid(self) -> uuid.UUID:
        start = self.need(16)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def records(self, flexible: bool) -> memoryview | None:
        if flexible:  # a batch's size: seldom one byte, so no fast path (one call, not two)
            n, self.pos = read_uvarint(self.buf, self.pos, self.end)
            n -= 1
        else:
            n = self.int32()
        if n < 0:
            return None
        start = self.need(n)
        return self.buf[start : start + n]

    def array_length(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            raise ValueError("non-nullable array was serialized as null")
        return n

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.need(self.uvarint())


def decode_produce(payload: bytearray | memoryview) -> tuple[int, str | None, ProduceRequest]:
    """Decode a whole Produce request frame body: (correlation_id, client_id, request).

    ``records`` of each partition are writable views into ``payload``: they are
    valid only while the payload buffer is (until the request is released).
    """
    view = memoryview(payload)
    api_key, version, correlation_id = _HEADER.unpack_from(view, 0)
    if api_key != 0 or not 3 <= version <= 13:
        raise ValueError(f"not a Produce v3-v13 request: key {api_key} v{version}")
    flexible = version >= 9
    r = _Reader(view, 8)
    client_id = r.string(False, True)  # header client_id is int16-length in v1 and v2
    if flexible:
        r.skip_tagged_fields()
    transactional_id = r.string(flexible, True)
    acks = r.int16()
    timeout_ms = r.int32()
    topics = []
    by_id = version >= 13  # KIP-516: topics named by id
    for _ in range(r.array_length(flexible)):
        topic_id, name = (r.uuid(), "") if by_id else (ZERO_UUID, r.string(flexible, False))
        partitions = []
        for _ in range(r.array_length(flexible)):
            index = r.int32()
            records = r.records(flexible)
            if flexible:
                r.skip_tagged_fields()
            partitions.append(PartitionProduceData(index=index, records=records))
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicProduceData(topic_id=topic_id, name=name, partition_data=partitions))
    if flexible:
        r.skip_tagged_fields()
    request = ProduceRequest(transactional_id=transactional_id, acks=acks, timeout=timeout_ms, topic_data=topics)
    return correlation_id, client_id, request
