"""Produce requests (v3-v12) as a list of buffers, for scatter-gather writes.

kio would encode a Produce request into one bytes object, copying every record
batch into it. Here the framing (size prefix, header, topic and partition fields,
each batch's length) is written into small ``bytearray`` pieces and each batch's
own memory (its buffer, or its chunks) is referenced as ``memoryview`` slices
between them; ``socket.sendmsg`` then writes the lot in one call. The bytes are
exactly kio's (``tests/unit/test_producer_request.py`` checks every version).

Layout: v3-v8 use request header v1 and classic encodings (int16 string lengths,
int32 array counts, int32 nullable-bytes length); v9-v12 are flexible: header v2,
compact strings/arrays/bytes (unsigned varint length + 1) and empty tagged-field
sections after each partition, topic and the request.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from tidegate.client.framing import request_header_bytes
from tidegate.utils.byte_utils import write_uvarint

__all__ = ["MAX_PRODUCE_VERSION", "MIN_PRODUCE_VERSION", "produce_request_buffers"]

MIN_PRODUCE_VERSION = 3
#: v13 (KIP-516) names topics by id; kio and the broker use names up to v12.
MAX_PRODUCE_VERSION = 12

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_HI = struct.Struct(">hi")


def produce_request_buffers(
    version: int,
    correlation_id: int,
    client_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[Any], int]]]],
    transactional_id: str | None = None,
) -> list[Any]:
    """The whole frame as buffers. ``topics`` is ``[(name, [(partition, segments,
    size), ...]), ...]`` where ``segments`` are the batch's buffers (``size`` bytes
    in total) — referenced, not copied."""
    if not MIN_PRODUCE_VERSION <= version <= MAX_PRODUCE_VERSION:
        raise ValueError(f"produce v{version} is not supported (v3-v12)")
    flexible = version >= 9
    out: list[Any] = []
    cur = bytearray(b"\x00\x00\x00\x00")
    cur += request_header_bytes(0, version, correlation_id, client_id)
    if flexible:
        if transactional_id is None:
            cur.append(0)
        else:
            t = transactional_id.encode("utf-8")
            write_uvarint(len(t) + 1, cur)
            cur += t
    else:
        if transactional_id is None:
            cur += b"\xff\xff"
        else:
            t = transactional_id.encode("utf-8")
            cur += _H.pack(len(t)) + t
    cur += _HI.pack(acks, timeout_ms)
    if flexible:
        write_uvarint(len(topics) + 1, cur)
    else:
        cur += _I.pack(len(topics))
    total = 0
    for name, partitions in topics:
        nb = name.encode("utf-8")
        if flexible:
            write_uvarint(len(nb) + 1, cur)
            cur += nb
            write_uvarint(len(partitions) + 1, cur)
        else:
            cur += _H.pack(len(nb)) + nb
            cur += _I.pack(len(partitions))
        for index, segments, size in partitions:
            cur += _I.pack(index)
            if flexible:
                write_uvarint(size + 1, cur)
            else:
                cur += _I.pack(size)
            out.append(cur)
            total += len(cur)
            out.extend(segments)
            total += size
            cur = bytearray()
            if flexible:
                cur.append(0)  # partition tagged fields
        if flexible:
            cur.append(0)  # topic tagged fields
    if flexible:
        cur.append(0)  # request tagged fields
    out.append(cur)
    total += len(cur)
    _I.pack_into(out[0], 0, total - 4)
    return out
