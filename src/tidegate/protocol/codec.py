"""Requests and responses on the wire: headers, bodies, frames.

The bodies are the version-less message classes of :mod:`tidegate.protocol.messages`
(``MetadataRequest``, ``FetchResponse`` ...), one class covering every version as
Kafka's generated ``*Data`` classes do; :mod:`tidegate.protocol.serialization` reads
and writes the fields of the version on the wire. :func:`decode_request` gives the
broker the request header and body (Produce through its own zero-copy decoder,
:mod:`tidegate.protocol.produce_fast`); :func:`encode_response` frames a response;
:func:`encode_request` and :func:`decode_response` are the client's half.

Handlers still describe most responses as nested dicts with Kafka's field names:
:func:`build` turns one into the message class (nested dicts become entities, ``None``
uuids the zero uuid, timedeltas and enum members plain ints) and refuses a key no
version of the message has. It goes when the handlers build messages themselves.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import sys
from functools import cache
from typing import Any

from tidegate.errors import UnsupportedVersionError
from tidegate.protocol.apis import SUPPORTED_APIS
from tidegate.protocol.messages import api_module
from tidegate.protocol.messages._base import ZERO_UUID, Message, MessageSpec
from tidegate.protocol.produce_fast import decode_produce
from tidegate.protocol.serialization import (
    SchemaError,
    read_message,
    read_request_header,
    read_response_header,
    reader,
    write_message,
    write_request_header,
    write_response_header,
    writer,
)

__all__ = [
    "InvalidRequestError",
    "RequestHeader",
    "SchemaError",
    "UnsupportedRequestVersionError",
    "build",
    "decode_request",
    "decode_response",
    "encode_error_only",
    "encode_request",
    "encode_response",
    "message_versions",
    "prepare",
    "request_class",
    "request_is_flexible",
    "response_class",
    "response_is_flexible",
    "supported_versions",
]

_I16_I16_I32 = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
API_VERSIONS = 18


class InvalidRequestError(SchemaError):
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
        if self.api_key == API_VERSIONS:
            return 0
        return 1 if self.flexible else 0


# ---------------------------------------------------------------------------
# the message classes of each API


@cache
def _spec(api_key: int, response: bool) -> MessageSpec:
    module = api_module(api_key)
    spec: MessageSpec = module.RESPONSE if response else module.REQUEST
    return spec


def _flexible(spec: MessageSpec, version: int) -> bool:
    if not spec[1] <= version <= spec[2]:
        raise UnsupportedVersionError(f"{spec[0].__name__} has no version {version}")
    return spec[3] is not None and version >= spec[3]


def message_versions(api_key: int) -> tuple[int, int]:
    """The versions of ``api_key`` the message classes cover (what the client can speak);
    ``KeyError`` for an API without messages here."""
    spec = _spec(api_key, False)
    return spec[1], spec[2]


def request_class(api_key: int, version: int) -> type[Message]:
    spec = _spec(api_key, False)
    _flexible(spec, version)
    return spec[0]


def response_class(api_key: int, version: int) -> type[Message]:
    spec = _spec(api_key, True)
    _flexible(spec, version)
    return spec[0]


def request_is_flexible(api_key: int, version: int) -> bool:
    return _flexible(_spec(api_key, False), version)


def response_is_flexible(api_key: int, version: int) -> bool:
    """Whether the response *body* is flexible (its header is v0 for ApiVersions
    whatever this says, KIP-511)."""
    return _flexible(_spec(api_key, True), version)


# ---------------------------------------------------------------------------
# the broker's half


def peek_header(buf: Any) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: the part every header version shares."""
    if len(buf) < 8:
        raise InvalidRequestError(f"request of {len(buf)} bytes is shorter than a header")
    return _I16_I16_I32.unpack_from(buf, 0)


def decode_request(buf: Any) -> tuple[RequestHeader, Message]:
    """Decode header and body of one request (the frame without its size prefix).

    Raises :class:`UnsupportedRequestVersionError` for keys/versions tidegate does not
    implement (the caller answers UNSUPPORTED_VERSION) and
    :class:`InvalidRequestError` for bytes that do not parse. The body is the API's
    request message; a Produce request in a pool buffer (not ``bytes``) is decoded by
    :mod:`tidegate.protocol.produce_fast` into the same message, its records views of the
    buffer. Like Kafka's generated parsers, bytes after the last field are ignored
    (librdkafka pads some requests).
    """
    api_key, api_version, correlation_id = peek_header(buf)
    supported = SUPPORTED_APIS.get(api_key)
    if supported is None or not supported.supports(api_version):
        raise UnsupportedRequestVersionError(api_key, api_version, correlation_id)
    if api_key == 0 and not isinstance(buf, bytes):
        # Produce: decoded by hand into writable views of the request buffer, so
        # the records are never copied (tidegate.protocol.produce_fast).
        try:
            _, client_id, produce = decode_produce(buf)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequestError(f"cannot decode api_key=0 v{api_version}: {exc}") from exc
        return RequestHeader(0, api_version, correlation_id, client_id, api_version >= 9), produce
    spec = _spec(api_key, False)
    flexible = _flexible(spec, api_version)
    # a view, released before returning: nothing decoded keeps the buffer (a pool's)
    with memoryview(buf) as view:
        try:
            client_id, pos = read_request_header(view, flexible)
            body, _end = read_message(spec[0], api_version, flexible, view, pos)
        except SchemaError as exc:
            raise InvalidRequestError(f"cannot decode api_key={api_key} v{api_version}: {exc}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), body


def encode_response(header: RequestHeader, response: Message) -> bytes:
    """Frame one response: size prefix, response header, body."""
    flexible = _flexible(_spec(header.api_key, True), header.api_version)
    out = bytearray(b"\x00\x00\x00\x00")
    write_response_header(header.correlation_id, header.response_header_version >= 1, out)
    write_message(response, header.api_version, flexible, out)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_error_only(correlation_id: int, error_code: int) -> bytes:
    """A response that is just a header v0 and an int16 error code.

    Used to answer UNSUPPORTED_VERSION for an API key or version tidegate does
    not implement, where no response schema of that version exists to fill in.
    For ApiVersions itself the v0 body starts with the same int16, so a client
    reading it as ApiVersions v0 sees the error (see the api_versions handler
    for the full KIP-511 answer).
    """
    return struct.pack(">iih", 6, correlation_id, error_code)


def supported_versions() -> list[tuple[int, int]]:
    """Every supported (api_key, version), the newest version of every API first (what
    clients send), then the next newest, and so on."""
    pairs = [(api, v) for api, r in SUPPORTED_APIS.items() for v in range(r.min_version, r.max_version + 1)]
    return sorted(pairs, key=lambda p: (SUPPORTED_APIS[p[0]].max_version - p[1], p[0]))


def prepare(api_key: int, version: int) -> None:
    """Do now what the first request of an API version does: import the API's message
    module and build the request's reader and the response's writer (and :func:`build`'s
    plan of the response), 0.1-1.5 ms. The broker never calls it: each API version a
    client uses is built by its first request (docs/architecture.md, "Messages and
    start-up"); the tests build every version with it, benchmarks/codec.py times it."""
    request = _spec(api_key, False)
    response = _spec(api_key, True)
    reader(request[0], version, _flexible(request, version))
    writer(response[0], version, _flexible(response, version))
    _build_plan(response[0])


# ---------------------------------------------------------------------------
# the client's half


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Message | dict[str, Any]) -> bytes:
    """A whole size-prefixed request frame; ``body`` is a message or a dict for
    :func:`build`."""
    spec = _spec(api_key, False)
    flexible = _flexible(spec, version)
    message = build(spec[0], body) if isinstance(body, dict) else body
    out = bytearray(b"\x00\x00\x00\x00")
    write_request_header(api_key, version, correlation_id, client_id, flexible, out)
    write_message(message, version, flexible, out)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: Any) -> tuple[int, Any]:
    """(correlation id, response message) from a response frame without its size
    prefix; :class:`SchemaError` for bytes that do not parse."""
    spec = _spec(api_key, True)
    flexible = _flexible(spec, version)
    correlation_id, pos = read_response_header(frame, flexible and api_key != API_VERSIONS)
    body, _end = read_message(spec[0], version, flexible, frame, pos)
    return correlation_id, body


# ---------------------------------------------------------------------------
# building messages from handlers' dicts (until the handlers build messages)


def _to_int(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        value = value - _EPOCH
    if isinstance(value, datetime.timedelta):
        return (value.days * 86400 + value.seconds) * 1000 + value.microseconds // 1000
    if isinstance(value, enum.Enum):
        return int(value.value)
    return value


# what build does with a handler's value of a field
_AS_IS, _INT, _UUID, _LIST, _ENTITY, _ENTITIES = range(6)
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16"}
_build_plans: dict[type[Message], dict[str, tuple[int, Any]]] = {}


def _build_plan(cls: type[Message]) -> dict[str, tuple[int, Any]]:
    """Per field of ``cls``: (what becomes of a handler's value, the entity class)."""
    plan = _build_plans.get(cls)
    if plan is not None:
        return plan
    module = sys.modules[cls.__module__]
    plan = _build_plans[cls] = {}
    for name, wire_type, *_rest in module.SCHEMA[cls]:
        array = wire_type.startswith("[]")
        element = wire_type[2:] if array else wire_type
        if element[0].isupper():
            plan[name] = (_ENTITIES if array else _ENTITY, getattr(module, element))
        elif array:
            plan[name] = (_LIST, None)
        elif element in _INT_TYPES:
            plan[name] = (_INT, None)
        elif element == "uuid":
            plan[name] = (_UUID, None)
        else:
            plan[name] = (_AS_IS, None)
    return plan


def build(cls: type[Message], values: dict[str, Any]) -> Any:
    """Build a ``cls`` message from a dict: nested dicts become entities, a field left
    out takes its default, a field the version sent lacks is dropped when it is written.
    A key that no version of the message has is a mistake (a misspelt field would
    otherwise go out as its default) and raises ``TypeError``."""
    plan = _build_plans.get(cls) or _build_plan(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        try:
            kind, entity = plan[name]
        except KeyError:
            unknown = ", ".join(sorted(values.keys() - plan.keys()))
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no field {unknown} in any version") from None
        if kind == _AS_IS:
            pass
        elif value is None:
            if kind == _UUID:
                value = ZERO_UUID
        elif kind == _INT:
            if type(value) is not int:
                value = _to_int(value)
        elif kind == _ENTITIES:
            value = [build(entity, v) if type(v) is dict else v for v in value]
        elif kind == _ENTITY:
            if type(value) is dict:
                value = build(entity, value)
        elif kind == _LIST and type(value) is not list:
            value = list(value)
        kwargs[name] = value
    return cls(**kwargs)
