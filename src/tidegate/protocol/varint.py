"""Kafka's unsigned varint (compact lengths, tagged-field headers), read from a buffer."""

from __future__ import annotations

from typing import Any


def read_uvarint(buf: Any, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at ``pos``. Raises ValueError
    when it runs past ``end`` (default: the buffer's end) or is longer than 5 bytes."""
    if end is None:
        end = len(buf)
    value = shift = 0
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint is longer than 5 bytes")
