"""Request decoding and response encoding on top of kio.

kio gives one frozen dataclass per API version, generated from Kafka's own JSON
message specs; it decodes natively and encodes in Python. Handlers in
``tidegate.server.kafka_apis`` describe a response once, as nested dicts, and
:func:`build` turns that description into the dataclass of whichever version the
client asked for: fields that version lacks are dropped, fields it has but the
handler did not set take their schema default. Milliseconds become the
timedeltas kio expects and ints become ``ErrorCode`` members.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import pkgutil
import struct
import types
import typing
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from tidegate.errors import UnsupportedVersionError
from tidegate.protocol.apis import SUPPORTED_APIS
from tidegate.protocol.produce_fast import decode_produce
from tidegate.protocol.size_check import check_sizes

_I16_I16_I32 = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class InvalidRequestError(Exception):
    """The bytes of a request do not parse: the connection that sent them is closed."""


class UnsupportedRequestVersionError(UnsupportedVersionError):
    """UNSUPPORTED_VERSION for a request: an API key or version outside
    :data:`SUPPORTED_APIS`, with the header fields the broker answers with."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool

    @property
    def response_header_version(self) -> int:
        # KIP-511: ApiVersions responses always use header v0 so that a client
        # can parse the answer whatever version it asked for.
        if self.api_key == 18:
            return 0
        return 1 if self.flexible else 0


# ---------------------------------------------------------------------------
# decoding


@cache
def _request_reader(api_key: int, version: int) -> tuple[Any, Any, bool, Any]:
    cls = load_request_schema(api_key, version)
    flexible = bool(cls.__flexible__)
    return entity_reader(cls.__header_schema__), entity_reader(cls), flexible, cls


def peek_header(buf: Any) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: the part every header version shares."""
    if len(buf) < 8:
        raise InvalidRequestError(f"request of {len(buf)} bytes is shorter than a header")
    return _I16_I16_I32.unpack_from(buf, 0)


def decode_request(buf: Any) -> tuple[RequestHeader, Any]:
    """Decode header and body of one request (the frame without its size prefix).

    Raises :class:`UnsupportedRequestVersionError` for keys/versions tidegate does not
    implement (the caller answers UNSUPPORTED_VERSION) and
    :class:`InvalidRequestError` for bytes that do not parse.
    """
    api_key, api_version, correlation_id = peek_header(buf)
    supported = SUPPORTED_APIS.get(api_key)
    if supported is None or not supported.supports(api_version):
        raise UnsupportedRequestVersionError(api_key, api_version, correlation_id)
    if api_key == 0 and not isinstance(buf, bytes):
        # Produce: decoded by hand into writable views of the request buffer, so
        # the records are never copied (tidegate.protocol.produce_fast).
        try:
            _, client_id, body = decode_produce(buf)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequestError(f"cannot decode api_key=0 v{api_version}: {exc}") from exc
        return RequestHeader(0, api_version, correlation_id, client_id, api_version >= 9), body
    header_reader, body_reader, flexible, cls = _request_reader(api_key, api_version)
    if not isinstance(buf, bytes):
        buf = memoryview(buf).toreadonly()  # kio reads only from read-only buffers
    try:
        # kio allocates an array from its length prefix before reading it: refuse a
        # length the request cannot hold first, as Kafka's generated readers do
        check_sizes(cls.__header_schema__, cls, buf)
        kio_header, offset = header_reader(buf, 0)
        body, _size = body_reader(buf, offset)
    except Exception as exc:  # kio raises a variety of errors on garbage
        raise InvalidRequestError(
            f"cannot decode api_key={api_key} v{api_version}: {exc!r}"
        ) from exc
    # kio refuses a null string where the schema has none, but reads a null
    # (length -1) array into None whatever the schema says; refuse it as Kafka's
    # generated parsers do, before a handler iterates over it.
    _check_null_arrays(body)
    # Like Kafka's generated parsers, bytes after the last field are ignored
    # (librdkafka pads some requests); a body that ends early fails above.
    header = RequestHeader(api_key, api_version, correlation_id, kio_header.client_id, flexible)
    return header, body


@cache
def _nested_fields(cls: type) -> tuple[tuple[str, bool, bool, type | None], ...]:
    """(name, is_array, nullable, entity class to descend into) for the array and
    entity fields of a request class that may need the null check."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, bool, bool, type | None]] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        nullable = False
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            nullable = len(members) < len(typing.get_args(tp))
            tp = members[0] if len(members) == 1 else tp
            origin = typing.get_origin(tp)
        if origin is tuple:
            args = typing.get_args(tp)
            elem: type | None = None
            if args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
                elem = args[0]
            if elem is not None and not _nested_fields(elem):
                elem = None  # nothing below can be null
            out.append((f.name, True, nullable, elem))
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and _nested_fields(tp):
            out.append((f.name, False, nullable, tp))
    return tuple(out)


def _check_null_arrays(obj: Any) -> None:
    cls: type = type(obj)  # as `type`: mypy takes type[Any] as unhashable (mypy#11470)
    for name, is_array, nullable, elem in _nested_fields(cls):
        value = getattr(obj, name)
        if value is None:
            if is_array and not nullable:
                raise InvalidRequestError(f"non-nullable field {name} was serialized as null")
            continue
        if elem is not None:
            if is_array:
                for item in value:
                    _check_null_arrays(item)
            else:
                _check_null_arrays(value)


# ---------------------------------------------------------------------------
# building responses from plain values


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kind: str  # "entity", "entities", "timedelta", "datetime", "error", "value"
    target: Any
    default: Any


def _zero_for(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        return None
    if origin is tuple:
        return ()
    base = tp if isinstance(tp, type) else None
    if base is None:
        return None
    if issubclass(base, bool):
        return False
    if issubclass(base, ErrorCode):
        return ErrorCode.none
    if issubclass(base, datetime.timedelta):
        return datetime.timedelta(0)
    if issubclass(base, int):
        return 0
    if issubclass(base, float):
        return 0.0
    if issubclass(base, str):
        return ""
    if issubclass(base, bytes):
        return b""
    return None


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        inner = tp
        if origin in (typing.Union, types.UnionType):
            non_none = [a for a in args if a is not type(None)]
            inner = non_none[0] if len(non_none) == 1 else tp
            origin = typing.get_origin(inner)
            args = typing.get_args(inner)
        # what _convert builds from: an entity class, a value class, or for "value" the
        # type hint itself (not always a class: a generic alias, a union)
        target: object
        if origin is tuple and args and isinstance(args[0], type) and dataclasses.is_dataclass(
            args[0]
        ):
            kind, target = "entities", args[0]
        elif isinstance(inner, type) and dataclasses.is_dataclass(inner):
            kind, target = "entity", inner
        elif isinstance(inner, type) and issubclass(inner, datetime.timedelta):
            kind, target = "timedelta", inner
        elif isinstance(inner, type) and issubclass(inner, datetime.datetime):
            kind, target = "datetime", inner
        elif isinstance(inner, type) and issubclass(inner, ErrorCode):
            kind, target = "error", inner
        else:
            kind, target = "value", inner
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _zero_for(tp)
        plans.append(_FieldPlan(f.name, kind, target, default))
    return tuple(plans)


def _convert(plan: _FieldPlan, value: Any) -> Any:
    if value is None:
        return None
    kind = plan.kind
    if kind == "value":
        return value
    if kind == "error":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kind == "timedelta":
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=value)
    if kind == "datetime":
        if isinstance(value, datetime.datetime):
            return value
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if kind == "entities":
        return tuple(build(plan.target, v) if isinstance(v, dict) else v for v in value)
    # "entity"
    return build(plan.target, value) if isinstance(value, dict) else value


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@cache
def _other_versions(cls: type) -> tuple[str, ...]:
    """The modules of ``cls`` in the other versions of its message, newest first (kio's
    modules are ``kio.schema.<message>.v<N>.<request|response>``)."""
    parts = cls.__module__.split(".")
    if len(parts) != 5 or parts[:2] != ["kio", "schema"] or not parts[3].startswith("v"):
        return ()
    package = importlib.import_module(".".join(parts[:3]))
    versions = sorted(
        (int(info.name[1:]) for info in pkgutil.iter_modules(package.__path__)
         if info.name[:1] == "v" and info.name[1:].isdigit()),
        reverse=True,
    )
    return tuple(f"{package.__name__}.v{v}.{parts[4]}" for v in versions if f"v{v}" != parts[3])


@cache
def _known_field(cls: type, name: str) -> bool:
    """Whether some version of the message of ``cls`` has field ``name``. Versions are
    imported newest first and only until one has it: a dict built for the newest version
    costs one import, not one per version (a broker's first request of an API would
    otherwise import every version of it on the event loop)."""
    for module_name in _other_versions(cls):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        other = getattr(module, cls.__qualname__, None)
        if isinstance(other, type) and dataclasses.is_dataclass(other) and name in _field_names(other):
            return True
    return False


def build(cls: type, values: dict[str, Any]) -> Any:
    """Build a kio dataclass of ``cls`` from a dict, tolerating version differences: a
    field this version lacks is left out, one it has and the dict lacks gets its default.
    A key that no version of the message has is a mistake (a misspelt field would
    otherwise go out as its default) and raises ``TypeError``."""
    unknown = [name for name in values.keys() - _field_names(cls) if not _known_field(cls, name)]
    if unknown:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no field {', '.join(sorted(unknown))} in any version")
    kwargs = {}
    for plan in _plan(cls):
        if plan.name in values:
            kwargs[plan.name] = _convert(plan, values[plan.name])
        else:
            kwargs[plan.name] = plan.default
    return cls(**kwargs)


def warm_up_order() -> list[tuple[int, int]]:
    """Every supported (api_key, version), the newest version of every API first (what
    clients send), then the next newest, and so on."""
    pairs = [(api, v) for api, r in SUPPORTED_APIS.items() for v in range(r.min_version, r.max_version + 1)]
    return sorted(pairs, key=lambda p: (SUPPORTED_APIS[p[0]].max_version - p[1], p[0]))


def warm_up(api_key: int, version: int) -> None:
    """Do now what the first request of an API version would otherwise do while a client
    waits: kio imports a version's schema modules on first use (1-4 ms each, several
    times that on a busy machine) and tidegate builds the request's reader and the
    response's writer and build plan."""
    _request_reader(api_key, version)
    cls = load_response_schema(api_key, version)
    _writer(cls)
    _plan(cls)


def response_class(api_key: int, version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, version)


def request_class(api_key: int, version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, version)


# ---------------------------------------------------------------------------
# encoding


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Frame one response: size prefix, response header, body."""
    cls: type = type(response)  # as `type`: see _check_null_arrays
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_I32.pack(header.correlation_id))
    if header.response_header_version >= 1:
        out.write(b"\x00")  # empty tagged fields
    _writer(cls)(out, response)
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def encode_error_only(correlation_id: int, error_code: int) -> bytes:
    """A response that is just a header v0 and an int16 error code.

    Used to answer UNSUPPORTED_VERSION for an API key or version tidegate does
    not implement, where no response schema of that version exists to fill in.
    For ApiVersions itself the v0 body starts with the same int16, so a client
    reading it as ApiVersions v0 sees the error (see the api_versions handler
    for the full KIP-511 answer).
    """
    return struct.pack(">iih", 6, correlation_id, error_code)


def ms(value: Any) -> int:
    """Milliseconds from a kio timedelta (or an int already in ms)."""
    if isinstance(value, datetime.timedelta):
        return (value.days * 86400 + value.seconds) * 1000 + value.microseconds // 1000
    return int(value)


def timestamp_ms(value: Any) -> int:
    """Milliseconds since the epoch from a kio datetime (or an int already in ms)."""
    if isinstance(value, datetime.datetime):
        return ms(value - _EPOCH)
    return int(value)
