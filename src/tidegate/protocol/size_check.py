"""Kafka's collection-size check, run over a request before kio decodes it.

Kafka's generated readers refuse a length prefix larger than the bytes left (``Tried
to allocate a collection of size N, but there are only M bytes remaining.``) before
allocating anything. kio's native reader allocates an array's storage from its length
prefix first, so one request with a count of 2^32 - 1 made the process abort on a
34 GB allocation (found by the fuzzer, tests/fuzz). :func:`check_sizes` walks a
request's bytes with its kio schema — every string, bytes, records and array length
and every tagged field, nested entities included — and raises
:class:`CollectionSizeError` for the first length that cannot fit. It allocates
nothing and reads each byte at most once; per (API, version) the walk is compiled once.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from tidegate.utils.byte_utils import read_uvarint

__all__ = ["CollectionSizeError", "check_sizes"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

#: bytes of the fixed-size primitives of kio's schemas
_FIXED = {
    "int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = {"string", "bytes", "records"}

# A step reads from ``buf`` at ``pos`` (with ``end`` the end of the frame) and returns
# the position after what it read.
Step = Callable[[Any, int, int], int]


class CollectionSizeError(ValueError):
    """A length prefix larger than the bytes that remain."""


def _too_big(size: int, pos: int, end: int) -> CollectionSizeError:
    return CollectionSizeError(
        f"Tried to allocate a collection of size {size}, but there are only {end - pos} bytes remaining."
    )


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, end)
    except ValueError as exc:
        raise CollectionSizeError(str(exc)) from exc


def _length(buf: Any, pos: int, end: int, compact: bool, wide: bool) -> tuple[int, int]:
    """(length or -1 for null, position after the prefix)."""
    if compact:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    size = 4 if wide else 2
    if pos + size > end:
        raise CollectionSizeError("length prefix runs past the end of the request")
    return (_I32 if wide else _I16).unpack_from(buf, pos)[0], pos + size


def _fixed(size: int) -> Step:
    def step(buf: Any, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise CollectionSizeError("field runs past the end of the request")
        return pos
    return step


def _prefixed(compact: bool, wide: bool) -> Step:
    def step(buf: Any, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, compact, wide)
        if n > end - pos:
            raise _too_big(n, pos, end)
        return pos + max(n, 0)
    return step


def _array(compact: bool, element: Step, min_size: int) -> Step:
    def step(buf: Any, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, compact, True)
        if n <= 0:
            return pos
        if n * min_size > end - pos:
            raise _too_big(n, pos, end)
        for _ in range(n):
            pos = element(buf, pos, end)
        return pos
    return step


def _optional_entity(entity: Step) -> Step:
    def step(buf: Any, pos: int, end: int) -> int:
        if pos >= end:
            raise CollectionSizeError("field runs past the end of the request")
        present = buf[pos]
        return pos + 1 if present >= 0x80 else entity(buf, pos + 1, end)  # int8 -1: null
    return step


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(type without None, nullable)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return members[0], True
    return tp, False


def _field_step(f: dataclasses.Field, tp: Any, flexible: bool) -> Step:
    kafka_type = f.metadata.get("kafka_type")
    tp, nullable = _unwrap(tp)
    if typing.get_origin(tp) is tuple:
        (elem_tp, *_rest) = typing.get_args(tp)
        if kafka_type is None:
            return _array(flexible, _entity_step(elem_tp), 1)
        if kafka_type in _FIXED:
            return _array(flexible, _fixed(_FIXED[kafka_type]), _FIXED[kafka_type])
        return _array(flexible, _prefixed(flexible, kafka_type != "string"), 1 if flexible else 2)
    if kafka_type is None:
        entity = _entity_step(tp)
        return _optional_entity(entity) if nullable else entity
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type in _LENGTH_PREFIXED:
        return _prefixed(flexible, kafka_type != "string")
    raise TypeError(f"no size check for kafka_type {kafka_type!r} ({f.name})")


@cache
def _entity_step(cls: type, header: bool = False) -> Step:
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    fixed = 0  # bytes of consecutive fixed-size fields, skipped in one step
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            tagged[f.metadata["tag"]] = _field_step(f, hints[f.name], flexible)
            continue
        size = _FIXED.get(f.metadata.get("kafka_type", ""))
        if size is not None and typing.get_origin(_unwrap(hints[f.name])[0]) is not tuple:
            fixed += size
            continue
        if fixed:
            steps.append(_fixed(fixed))
            fixed = 0
        # Kafka's request header v2 keeps client_id a non-compact string
        compact = flexible and not (header and f.name == "client_id")
        steps.append(_field_step(f, hints[f.name], compact))
    tail = fixed

    def read(buf: Any, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        if tail:
            pos += tail
            if pos > end:
                raise CollectionSizeError("field runs past the end of the request")
        if not flexible:
            return pos
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise _too_big(count, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if size > end - pos:
                raise _too_big(size, pos, end)
            known = tagged.get(tag)
            if known is not None:
                known(buf, pos, pos + size)  # what kio will read inside the field
            pos += size
        return pos

    return read


def check_sizes(header_cls: type, body_cls: type, buf: Any) -> int:
    """Raise :class:`CollectionSizeError` if any length in the request ``buf`` (header
    and body, without the size prefix) is larger than what remains of it; else return
    where the body ends (bytes after it are ignored, as Kafka ignores them)."""
    end = len(buf)
    pos = _entity_step(header_cls, True)(buf, 0, end)
    return _entity_step(body_cls)(buf, pos, end)
