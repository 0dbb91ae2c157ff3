"""Reading and writing Kafka's messages, one version at a time (Kafka's generated
``read``/``write`` methods), from the ``SCHEMA`` tables of
:mod:`tidegate.protocol.messages`.

For a message class and a version, :func:`reader` and :func:`writer` build the code
that reads and writes that version's fields the first time they are asked, and cache
it. Per version, a field the version lacks is skipped on write and takes its default
on read; in flexible versions arrays, strings and bytes are compact and tagged fields
follow each entity (written when they differ from their default, in tag order;
unknown ones skipped on read). Consecutive fixed-width fields are read and written
with one ``struct`` each.

How the code is built was decided by measurement (``benchmarks/codec.py``):

* a reader is straight-line Python generated from the table and compiled (``exec``):
  readers made of one closure per field decoded 1.3-2.7x slower than kio's native
  readers with the size checks they needed, straight-line ones 1.3-1.9x faster. A
  layout is compiled once (versions and entities with the same fields share the code),
  about 40 ms for every supported version, under 1 ms for one;
* a writer is closures over the fields, one ``struct.pack`` per run of fixed-width
  fields: 2.5-5x faster than kio's writers already, and nothing to compile.

Reading is defensive, as Kafka's generated readers are: every malformed input raises
:class:`SchemaError` (a ``ValueError``); a length or count larger than the bytes left
is refused before anything is allocated ("Tried to allocate a collection of size N,
but there are only M bytes remaining."); a null (-1) string, bytes, array or struct
where the version does not allow one is refused. Bytes after the message are left to
the caller (a request's trailing bytes are ignored, as Kafka ignores them).
"""

from __future__ import annotations

import struct
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from tidegate.protocol.messages._base import ZERO_UUID, FieldSpec, Message
from tidegate.utils.byte_utils import VarintError, read_uvarint, write_uvarint

__all__ = [
    "Reader",
    "SchemaError",
    "Writer",
    "read_message",
    "read_request_header",
    "read_response_header",
    "reader",
    "write_message",
    "write_request_header",
    "write_response_header",
    "writer",
]

#: (buffer, position, end) -> (value, position after it)
Reader = Callable[[Any, int, int], tuple[Any, int]]
#: (value, output) -> None: appends the value's bytes to the output
Writer = Callable[[Any, bytearray], None]
#: reads one field into an object: (object, buffer, position, end) -> position after it
_FieldOp = Callable[[Any, Any, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ZERO16 = bytes(16)
_MAX_STRING = 0x7FFF

#: struct codes and sizes of the fixed-width types
_FIXED = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d",
    "bool": "?",
}  # fmt: skip


class SchemaError(ValueError):
    """Bytes that do not parse as the message they should be (Kafka's
    ``SchemaException``), or a value that cannot be written in the version asked."""


def _eof(need: int, pos: int, end: int) -> SchemaError:
    return SchemaError(f"needed {need} bytes at {pos}, but there are only {end - pos} bytes remaining")


def _too_big(size: int, pos: int, end: int) -> SchemaError:
    return SchemaError(
        f"Tried to allocate a collection of size {size}, but there are only {end - pos} bytes remaining."
    )


def _null(name: str) -> SchemaError:
    return SchemaError(f"non-nullable field {name} was serialized as null")


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    try:
        return read_uvarint(buf, pos, end)
    except VarintError as exc:
        raise SchemaError(str(exc)) from None


def _length(compact: bool, wide: bool) -> Reader:
    """The length (or count) prefix reader: -1 for null, whatever the encoding."""
    if compact:
        def compact_length(buf: Any, pos: int, end: int) -> tuple[int, int]:
            n, pos = _uvarint(buf, pos, end)
            return n - 1, pos
        return compact_length
    prefix = _I32 if wide else _I16
    size = prefix.size
    unpack = prefix.unpack_from

    def classic_length(buf: Any, pos: int, end: int) -> tuple[int, int]:
        if pos + size > end:
            raise _eof(size, pos, end)
        return unpack(buf, pos)[0], pos + size
    return classic_length


def _write_length(compact: bool, wide: bool) -> Callable[[int, bytearray], None]:
    if compact:
        def compact_length(n: int, out: bytearray) -> None:
            write_uvarint(n + 1, out)  # null (-1) is 0
        return compact_length
    pack = (_I32 if wide else _I16).pack

    def classic_length(n: int, out: bytearray) -> None:
        out += pack(n)
    return classic_length


# -- value readers and writers ----------------------------------------------------------------
def _sized_reader(name: str, compact: bool, wide: bool, nullable: bool, unit: int,
                  take: Callable[[Any, int, int, int], Any]) -> Reader:
    """A length-prefixed value (string, bytes, array): null where ``nullable``, refused
    where not; ``take(buf, pos, end, n)`` reads its ``n`` items of at least ``unit``
    bytes once the length is known to fit."""
    length = _length(compact, wide)

    def read_sized(buf: Any, pos: int, end: int) -> tuple[Any, int]:
        n, pos = length(buf, pos, end)
        if n < 0:
            if nullable:
                return None, pos
            raise _null(name)
        if n * unit > end - pos:
            raise _too_big(n, pos, end)
        return take(buf, pos, end, n)  # type: ignore[no-any-return]
    return read_sized


def _sized_writer(name: str, compact: bool, wide: bool, nullable: bool,
                  put: Callable[[Any, bytearray, Callable[[int, bytearray], None]], None]) -> Writer:
    """A length-prefixed value: ``put(value, out, length)`` writes a value that is not
    None, its length through ``length``."""
    length = _write_length(compact, wide)

    def write_sized(value: Any, out: bytearray) -> None:
        if value is None:
            if not nullable:
                raise _null(name)
            length(-1, out)
        else:
            put(value, out, length)
    return write_sized


def _take_string(buf: Any, pos: int, end: int, n: int) -> tuple[str, int]:
    return str(buf[pos:pos + n], "utf-8"), pos + n  # not UTF-8: read_message's SchemaError


def _take_bytes(buf: Any, pos: int, end: int, n: int) -> tuple[bytes, int]:
    return bytes(buf[pos:pos + n]), pos + n


def _string_reader(name: str, compact: bool, nullable: bool) -> Reader:
    return _sized_reader(name, compact, False, nullable, 1, _take_string)


def _bytes_reader(name: str, compact: bool, nullable: bool) -> Reader:
    return _sized_reader(name, compact, True, nullable, 1, _take_bytes)


def _string_writer(name: str, compact: bool, nullable: bool) -> Writer:
    def put_string(value: str, out: bytearray, length: Callable[[int, bytearray], None]) -> None:
        data = value.encode()
        if not compact and len(data) > _MAX_STRING:
            raise SchemaError(f"string field {name} had invalid length {len(data)}")
        length(len(data), out)
        out += data
    return _sized_writer(name, compact, False, nullable, put_string)


def _put_bytes(value: Any, out: bytearray, length: Callable[[int, bytearray], None]) -> None:
    length(memoryview(value).nbytes, out)
    out += value


def _bytes_writer(name: str, compact: bool, nullable: bool) -> Writer:
    return _sized_writer(name, compact, True, nullable, _put_bytes)


def _read_uuid(buf: Any, pos: int, end: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > end:
        raise _eof(16, pos, end)
    raw = bytes(buf[pos:pos + 16])
    return (ZERO_UUID if raw == _ZERO16 else uuid.UUID(bytes=raw)), pos + 16


def _write_uuid(value: uuid.UUID, out: bytearray) -> None:
    out += value.bytes


def _fixed_reader(code: str) -> Reader:
    unpack = struct.Struct(">" + code).unpack_from
    size = struct.calcsize(">" + code)

    def read_fixed(buf: Any, pos: int, end: int) -> tuple[Any, int]:
        if pos + size > end:
            raise _eof(size, pos, end)
        return unpack(buf, pos)[0], pos + size
    return read_fixed


def _fixed_writer(code: str) -> Writer:
    pack = struct.Struct(">" + code).pack

    def write_fixed(value: Any, out: bytearray) -> None:
        out += pack(value)
    return write_fixed


def _fixed_array_reader(name: str, code: str, compact: bool, nullable: bool) -> Reader:
    size = struct.calcsize(">" + code)

    def take(buf: Any, pos: int, end: int, n: int) -> tuple[list[Any], int]:
        return list(struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * size
    return _sized_reader(name, compact, True, nullable, size, take)


def _fixed_array_writer(name: str, code: str, compact: bool, nullable: bool) -> Writer:
    def put(value: Any, out: bytearray, length: Callable[[int, bytearray], None]) -> None:
        length(len(value), out)
        out += struct.pack(f">{len(value)}{code}", *value)
    return _sized_writer(name, compact, True, nullable, put)


def _array_reader(name: str, element: Reader, compact: bool, nullable: bool) -> Reader:
    def take(buf: Any, pos: int, end: int, n: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            item, pos = element(buf, pos, end)
            append(item)
        return items, pos
    return _sized_reader(name, compact, True, nullable, 1, take)


def _array_writer(name: str, element: Writer, compact: bool, nullable: bool) -> Writer:
    def put(value: Any, out: bytearray, length: Callable[[int, bytearray], None]) -> None:
        length(len(value), out)
        for item in value:
            element(item, out)
    return _sized_writer(name, compact, True, nullable, put)


def _nullable_entity_reader(read_entity: Reader) -> Reader:
    """KIP-893's nullable struct: an int8 marker (-1 null, 1 present) before it."""
    def read_nullable(buf: Any, pos: int, end: int) -> tuple[Any, int]:
        if pos >= end:
            raise _eof(1, pos, end)
        if buf[pos] & 0x80:
            return None, pos + 1
        return read_entity(buf, pos + 1, end)
    return read_nullable


def _nullable_entity_writer(write_entity: Writer) -> Writer:
    def write_nullable(value: Any, out: bytearray) -> None:
        if value is None:
            out += b"\xff"
        else:
            out += b"\x01"
            write_entity(value, out)
    return write_nullable


# -- schema tables ----------------------------------------------------------------------------
def _schema(cls: type[Message]) -> tuple[FieldSpec, ...]:
    return sys.modules[cls.__module__].SCHEMA[cls]  # type: ignore[no-any-return]


def _entity(cls: type[Message], name: str) -> type[Message]:
    entity: type[Message] = getattr(sys.modules[cls.__module__], name)
    return entity


def _present(spec: FieldSpec, version: int) -> bool:
    first, last = spec[2]
    return first <= version <= last


def _nullable(spec: FieldSpec, version: int) -> bool:
    versions = spec[3]
    return versions is not None and versions[0] <= version <= versions[1]


@dataclass(frozen=True, slots=True)
class _Side:
    """The value readers, or the value writers: what :func:`_value_code` builds from."""

    fixed: Callable[[str], Any]
    fixed_array: Callable[[str, str, bool, bool], Any]
    array: Callable[[str, Any, bool, bool], Any]
    string: Callable[[str, bool, bool], Any]
    bytes: Callable[[str, bool, bool], Any]
    uuid: Any
    entity: Callable[[type[Message], int, bool], Any]
    nullable_entity: Callable[[Any], Any]


def _value_code(side: _Side, cls: type[Message], spec: FieldSpec, version: int,
                flexible: bool) -> Any:
    """The reader or writer (``side``) of one field's value in ``version``."""
    name, wire_type = spec[0], spec[1]
    nullable = _nullable(spec, version)
    if wire_type.startswith("[]"):
        element_type = wire_type[2:]
        code = _FIXED.get(element_type)
        if code is not None:
            return side.fixed_array(name, code, flexible, nullable)
        element = _element_code(side, cls, element_type, name, version, flexible, False)
        return side.array(name, element, flexible, nullable)
    value = _element_code(side, cls, wire_type, name, version, flexible, nullable)
    if nullable and wire_type[0].isupper():
        return side.nullable_entity(value)
    return value


def _element_code(side: _Side, cls: type[Message], wire_type: str, name: str, version: int,
                  flexible: bool, nullable: bool) -> Any:
    if wire_type == "string":
        return side.string(name, flexible, nullable)
    if wire_type in ("bytes", "records"):
        return side.bytes(name, flexible, nullable)
    if wire_type == "uuid":
        return side.uuid
    if wire_type in _FIXED:
        return side.fixed(_FIXED[wire_type])
    return side.entity(_entity(cls, wire_type), version, flexible)


def _value_reader(cls: type[Message], spec: FieldSpec, version: int, flexible: bool) -> Reader:
    reader_of: Reader = _value_code(_READERS, cls, spec, version, flexible)
    return reader_of


def _value_writer(cls: type[Message], spec: FieldSpec, version: int, flexible: bool) -> Writer:
    writer_of: Writer = _value_code(_WRITERS, cls, spec, version, flexible)
    return writer_of


def _fixed_run(specs: list[FieldSpec]) -> tuple[tuple[str, ...], struct.Struct]:
    return tuple(s[0] for s in specs), struct.Struct(">" + "".join(_FIXED[s[1]] for s in specs))


def _split(cls: type[Message], version: int) -> tuple[list[list[FieldSpec]], list[FieldSpec]]:
    """The version's untagged fields in wire order, consecutive fixed-width ones grouped
    (one group per other field), and its tagged fields in tag order."""
    groups: list[list[FieldSpec]] = []
    tagged: list[FieldSpec] = []
    for spec in _schema(cls):
        if not _present(spec, version):
            continue
        if spec[4] is not None:
            tagged.append(spec)
        elif spec[1] in _FIXED and groups and groups[-1][0][1] in _FIXED:
            groups[-1].append(spec)
        else:
            groups.append([spec])
    tagged.sort(key=lambda s: s[4] or 0)
    return groups, tagged


# -- entity readers ---------------------------------------------------------------------------
def _field_op(name: str, read: Reader) -> _FieldOp:
    def read_field(o: Any, buf: Any, pos: int, end: int) -> int:
        value, pos = read(buf, pos, end)
        setattr(o, name, value)
        return pos
    return read_field


def _read_tagged(known: dict[int, _FieldOp]) -> _FieldOp:
    """The tagged-field section of a flexible entity: known tags read within their size,
    unknown ones skipped."""
    def read_tags(o: Any, buf: Any, pos: int, end: int) -> int:
        if pos < end and buf[pos] == 0:
            return pos + 1
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise _too_big(count, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if size > end - pos:
                raise _too_big(size, pos, end)
            op = known.get(tag)
            if op is not None:
                op(o, buf, pos, pos + size)
            pos += size
        return pos
    return read_tags


_readers: dict[tuple[type[Message], int, bool], Reader] = {}
_writers: dict[tuple[type[Message], int, bool], Writer] = {}
#: compiled reader sources: the same layout (another version, another entity with the
#: same fields) is compiled once
_compiled: dict[str, Any] = {}


class _Source:
    """The source of one generated reader, and the names its code refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, object] = {}

    def name(self, value: object, prefix: str) -> str:
        key = f"{prefix}{len(self.names)}"
        self.names[key] = value
        return key

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def length(self, compact: bool, wide: bool) -> None:
        """``n`` = the length or count prefix (-1 for null) and ``pos`` after it."""
        if compact:
            self.add("    if pos < end and buf[pos] < 128:",
                     "        n = buf[pos] - 1",
                     "        pos += 1",
                     "    else:",
                     "        n, pos = _uvarint(buf, pos, end)",
                     "        n -= 1")
        else:
            size = 4 if wide else 2
            self.add(f"    if pos + {size} > end:",
                     f"        raise _eof({size}, pos, end)",
                     f"    n = {'_i32' if wide else '_i16'}(buf, pos)[0]",
                     f"    pos += {size}")

    def null(self, name: str, nullable: bool) -> None:
        """The ``n < 0`` branch: None, or the error; opens the ``else`` of a value."""
        self.add("    if n < 0:",
                 f"        o.{name} = None" if nullable else f"        raise _null({name!r})",
                 "    else:",
                 "        if n > end - pos:",
                 "            raise _too_big(n, pos, end)")


_READER_GLOBALS: dict[str, object] = {
    "_uvarint": _uvarint, "_eof": _eof, "_null": _null, "_too_big": _too_big,
    "_i16": _I16.unpack_from, "_i32": _I32.unpack_from, "_unpack": struct.unpack_from,
}


def _reader_source(cls: type[Message], version: int, flexible: bool) -> _Source:
    """Straight-line code reading ``cls`` in ``version`` (``def read(buf, pos, end)``):
    the fixed-width runs, strings and arrays of entities inline, the other fields through
    the value readers above, the tagged fields through :func:`_read_tagged`."""
    groups, tagged = _split(cls, version)
    src = _Source()
    src.add("def read(buf, pos, end):", f"    o = _new({src.name(cls, 'C')})")
    prototype = cls()
    read_names = {spec[0] for group in groups for spec in group}
    slots: tuple[str, ...] = cls.__slots__
    for name in slots:
        if name not in read_names:  # a field the version lacks, or a tagged one
            value = getattr(prototype, name)
            if isinstance(value, list):
                src.add(f"    o.{name} = []")
            elif isinstance(value, Message):
                src.add(f"    o.{name} = {src.name(type(value), 'E')}()")
            else:
                src.add(f"    o.{name} = {src.name(value, 'D')}")
    for group in groups:
        spec = group[0]
        name, wire_type = spec[0], spec[1]
        nullable = _nullable(spec, version)
        if wire_type in _FIXED:
            names, layout = _fixed_run(group)
            targets = ", ".join(f"o.{n}" for n in names)
            src.add(f"    if pos + {layout.size} > end:",
                    f"        raise _eof({layout.size}, pos, end)",
                    f"    {targets}, = {src.name(layout.unpack_from, 'U')}(buf, pos)",
                    f"    pos += {layout.size}")
        elif wire_type == "string":
            src.length(flexible, False)
            src.null(name, nullable)
            src.add(f"        o.{name} = str(buf[pos:pos + n], 'utf-8')",
                    "        pos += n")
        elif wire_type.startswith("[]") and wire_type[2:] in _FIXED:
            code = _FIXED[wire_type[2:]]
            size = struct.calcsize(code)
            src.length(flexible, True)
            src.null(name, nullable)
            src.add(f"        if n * {size} > end - pos:",
                    "            raise _too_big(n, pos, end)",
                    f"        o.{name} = list(_unpack('>%d{code}' % n, buf, pos))",
                    f"        pos += n * {size}")
        elif wire_type.startswith("[]") and wire_type[2].isupper():
            element = src.name(reader(_entity(cls, wire_type[2:]), version, flexible), "R")
            src.length(flexible, True)
            src.null(name, nullable)
            src.add(f"        o.{name} = items = []",
                    "        append = items.append",
                    "        for _ in range(n):",
                    f"            item, pos = {element}(buf, pos, end)",
                    "            append(item)")
        else:
            read_value = src.name(_value_reader(cls, spec, version, flexible), "R")
            src.add(f"    o.{name}, pos = {read_value}(buf, pos, end)")
    if flexible:
        known = {spec[4]: _field_op(spec[0], _value_reader(cls, spec, version, flexible))
                 for spec in tagged if spec[4] is not None}
        src.add("    if pos < end and buf[pos] == 0:",
                "        pos += 1",
                "    else:",
                f"        pos = {src.name(_read_tagged(known), 'T')}(o, buf, pos, end)")
    src.add("    return o, pos")
    return src


def reader(cls: type[Message], version: int, flexible: bool) -> Reader:
    """The reader of ``cls`` (a message or entity) in ``version``: ``(buf, pos, end) ->
    (instance, position after it)``. Built on first use and cached."""
    key = (cls, version, flexible)
    read = _readers.get(key)
    if read is not None:
        return read
    src = _reader_source(cls, version, flexible)
    text = "\n".join(src.lines)
    code = _compiled.get(text)
    if code is None:
        code = _compiled[text] = compile(text, f"<reader of {cls.__name__} v{version}>", "exec")
    namespace = {**_READER_GLOBALS, "_new": cls.__new__, **src.names}
    exec(code, namespace)  # noqa: S102 - source generated above from the schema table
    read = _readers[key] = namespace["read"]  # type: ignore[assignment]
    return read  # type: ignore[return-value]


# -- entity writers ---------------------------------------------------------------------------
def _differs(default: object) -> Callable[[Any], bool]:
    """Whether a tagged field's value is to be written (it is not its default)."""
    if isinstance(default, list):
        assert not default, default
        return lambda value: value is None or len(value) > 0
    return lambda value: value != default


def _write_tagged(tagged: tuple[tuple[int, Callable[[Any], Any], Callable[[Any], bool], Writer], ...]
                  ) -> Callable[[Any, bytearray], None]:
    def write_tags(o: Any, out: bytearray) -> None:
        present = []
        for tag, get, differs, write in tagged:
            value = get(o)
            if differs(value):
                data = bytearray()
                write(value, data)
                present.append((tag, data))
        write_uvarint(len(present), out)
        for tag, data in present:
            write_uvarint(tag, out)
            write_uvarint(len(data), out)
            out += data
    return write_tags


def _pack_run(layout: struct.Struct, single: bool) -> Writer:
    pack = layout.pack
    if single:
        def write_one(value: Any, out: bytearray) -> None:
            out += pack(value)
        return write_one

    def write_run(values: Any, out: bytearray) -> None:
        out += pack(*values)
    return write_run


def writer(cls: type[Message], version: int, flexible: bool) -> Writer:
    """The writer of ``cls`` in ``version``: ``(instance, out)`` appends its bytes to
    ``out``. Built on first use and cached."""
    key = (cls, version, flexible)
    write = _writers.get(key)
    if write is not None:
        return write
    groups, tagged = _split(cls, version)
    steps: list[tuple[Callable[[Any], Any], Writer]] = []
    for group in groups:
        if group[0][1] in _FIXED:
            names, layout = _fixed_run(group)
            steps.append((attrgetter(*names), _pack_run(layout, len(names) == 1)))
        else:
            spec = group[0]
            steps.append((attrgetter(spec[0]), _value_writer(cls, spec, version, flexible)))
    run = tuple(steps)
    tags: Callable[[Any, bytearray], None] | None = None
    if flexible and tagged:
        prototype = cls()
        tags = _write_tagged(tuple(
            (spec[4] or 0, attrgetter(spec[0]), _differs(getattr(prototype, spec[0])),
             _value_writer(cls, spec, version, flexible))
            for spec in tagged
        ))

    def write_entity(o: Any, out: bytearray) -> None:
        for get, write_value in run:
            write_value(get(o), out)
        if tags is not None:
            tags(o, out)
        elif flexible:
            out += b"\x00"

    _writers[key] = write_entity
    return write_entity


_READERS = _Side(_fixed_reader, _fixed_array_reader, _array_reader, _string_reader, _bytes_reader,
                 _read_uuid, reader, _nullable_entity_reader)
_WRITERS = _Side(_fixed_writer, _fixed_array_writer, _array_writer, _string_writer, _bytes_writer,
                 _write_uuid, writer, _nullable_entity_writer)


# -- whole messages ---------------------------------------------------------------------------
def read_message(cls: type[Message], version: int, flexible: bool, buf: Any, pos: int = 0,
                 end: int | None = None) -> tuple[Any, int]:
    """``cls`` of ``version`` read from ``buf`` at ``pos``: (instance, position after it).
    Raises :class:`SchemaError` for bytes that do not parse."""
    if end is None:
        end = len(buf)
    try:
        return reader(cls, version, flexible)(buf, pos, end)
    except SchemaError:
        raise
    except (struct.error, IndexError, ValueError, TypeError) as exc:  # a reader's defect
        raise SchemaError(f"cannot read {cls.__name__} v{version}: {exc!r}") from exc


def write_message(message: Message, version: int, flexible: bool, out: bytearray) -> None:
    """Append ``message`` in ``version`` to ``out``."""
    writer(type(message), version, flexible)(message, out)


# -- headers ----------------------------------------------------------------------------------
_read_client_id = _string_reader("client_id", False, True)
_write_client_id = _string_writer("client_id", False, True)
_skip_tagged = _read_tagged({})
_HEADER = struct.Struct(">hhi")


def read_request_header(buf: Any, flexible: bool) -> tuple[str | None, int]:
    """Kafka's RequestHeader v1 (v2 when ``flexible``) after its fixed 8 bytes (api key,
    version, correlation id, read by the caller): (client id, position of the body). The
    client id stays a classic nullable string in v2, as Kafka's RequestHeader.json says;
    the header's tagged fields are skipped."""
    end = len(buf)
    try:
        client_id, pos = _read_client_id(buf, 8, end)
    except UnicodeDecodeError as exc:
        raise SchemaError(f"client_id is not UTF-8: {exc}") from None
    if flexible:
        pos = _skip_tagged(None, buf, pos, end)
    return client_id, pos


def write_request_header(api_key: int, version: int, correlation_id: int, client_id: str | None,
                         flexible: bool, out: bytearray) -> None:
    """Append RequestHeader v1 (v2 when ``flexible``: no tagged fields)."""
    out += _HEADER.pack(api_key, version, correlation_id)
    _write_client_id(client_id, out)
    if flexible:
        out += b"\x00"


def read_response_header(buf: Any, flexible: bool) -> tuple[int, int]:
    """Kafka's ResponseHeader v0 (v1 when ``flexible``): (correlation id, position of the
    body)."""
    end = len(buf)
    if end < 4:
        raise _eof(4, 0, end)
    (correlation_id,) = _I32.unpack_from(buf, 0)
    pos = _skip_tagged(None, buf, 4, end) if flexible else 4
    return correlation_id, pos


def write_response_header(correlation_id: int, flexible: bool, out: bytearray) -> None:
    """Append ResponseHeader v0 (v1 when ``flexible``: no tagged fields)."""
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\x00"
