"""Kafka's ``ByteUtils``: unsigned varints (compact lengths, tagged fields) and zig-zag
varints/varlongs (record fields), read from and written to buffers.

The one implementation of both encodings: the protocol codec, the record formats, the
producer's request writer and the log cleaner all use these.
"""

from __future__ import annotations

from typing import Any


class VarintError(ValueError):
    """A varint runs past its buffer or is longer than its type allows."""


def read_uvarint(buf: Any, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at ``pos`` (at most 5 bytes).
    Raises :class:`VarintError` when it runs past ``end`` (default: the buffer's end) or
    is longer than 5 bytes."""
    if end is None:
        end = len(buf)
    value = shift = 0
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise VarintError("varint is longer than 5 bytes")


def write_uvarint(value: int, out: bytearray) -> None:
    """Append the unsigned varint of ``value`` (>= 0) to ``out``."""
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint(value: int) -> bytes:
    """The unsigned varint of ``value`` as bytes."""
    out = bytearray()
    write_uvarint(value, out)
    return bytes(out)


def size_of_uvarint(value: int) -> int:
    """Bytes of ``value`` as an unsigned varint (``ByteUtils.sizeOfUnsignedVarint``)."""
    n = 1
    while value > 0x7F:
        value >>= 7
        n += 1
    return n


def read_varlong(buf: Any, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zig-zag varint/varlong at ``pos`` (at most 10
    bytes). Raises :class:`VarintError` past the buffer's end or beyond 10 bytes."""
    try:
        b = buf[pos]
        pos += 1
        if not b & 0x80:
            return (b >> 1) ^ -(b & 1), pos
        value = b & 0x7F
        shift = 7
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1), pos
            shift += 7
            if shift > 63:
                raise VarintError("varint is longer than 10 bytes")
    except IndexError:
        raise VarintError("varint runs past the end of the buffer") from None


def write_varlong(value: int, out: bytearray) -> None:
    """Append ``value`` as a zig-zag varint (``ByteUtils.writeVarint``/``writeVarlong``)."""
    v = (value << 1) ^ (value >> 63)
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def varlong(value: int) -> bytes:
    """``value`` as a zig-zag varint, as bytes."""
    out = bytearray()
    write_varlong(value, out)
    return bytes(out)


def size_of_varlong(value: int) -> int:
    """Bytes of ``value`` as a zig-zag varint (``ByteUtils.sizeOfVarint``/``Varlong``)."""
    v = (value << 1) ^ (value >> 63)
    n = 1
    while v > 0x7F:  # size_of_uvarint's loop, inline: the producer sizes every record
        v >>= 7
        n += 1
    return n
