"""kio as the tests' independent reference codec.

The broker and the client speak through tidegate's own messages and codec
(:mod:`tidegate.protocol.codec`); tests that want a second opinion encode and decode with
kio's per-version dataclasses (``tests/integration/rawclient.py``, ``tests/fake_broker.py``,
the byte-equality tests). :func:`build` makes a kio object of one version from a dict of
Kafka's field names, as tidegate's codec did before it had its own messages: a field the
version lacks is dropped, one the dict lacks takes the version's default, milliseconds
become timedeltas and datetimes, ints ``ErrorCode`` members, and a key no version of the
message has raises ``TypeError``.
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

__all__ = [
    "build",
    "decode_body",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
    "request_class",
    "response_class",
    "response_header_size",
]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_I32 = struct.Struct(">i")


def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def encode_body(obj: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


def decode_body(cls: type, data: Any, offset: int = 0) -> tuple[Any, int]:
    """(kio object, bytes it took) of ``cls`` read from ``data`` at ``offset``."""
    return entity_reader(cls)(data, offset)


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    body: Any,
    client_id: str | None = "rawclient",
) -> bytes:
    """Header + body of a request (no size prefix). ``body`` is a kio object or a dict."""
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=api_key, request_api_version=version,
                        correlation_id=correlation_id, client_id=client_id)
    if isinstance(body, dict):
        body = build(cls, body)
    return encode_body(header) + encode_body(body)


def response_header_size(api_key: int, version: int) -> int:
    """Bytes of the response header before the body: correlation id (+ tagged fields);
    ApiVersions answers with header v0 whatever its version (KIP-511)."""
    if api_key == 18:
        return 4
    return 5 if response_class(api_key, version).__flexible__ else 4


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A size-prefixed response frame. ``body`` is a kio object or a dict."""
    if isinstance(body, dict):
        body = build(response_class(api_key, version), body)
    header = _I32.pack(correlation_id) + (b"\x00" if response_header_size(api_key, version) == 5 else b"")
    data = header + encode_body(body)
    return _I32.pack(len(data)) + data


def decode_response(api_key: int, version: int, data: bytes) -> tuple[int, Any]:
    """(correlation id, kio response) from a response frame without its size prefix."""
    (correlation_id,) = _I32.unpack_from(data, 0)
    body, _ = decode_body(response_class(api_key, version), data, response_header_size(api_key, version))
    return correlation_id, body


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
        target: object
        if origin is tuple and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
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
    return build(plan.target, value) if isinstance(value, dict) else value


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@cache
def _names_in_any_version(cls: type) -> frozenset[str]:
    """The field names of ``cls``'s entity in every version of its message (kio's modules
    are ``kio.schema.<message>.v<N>.<request|response>``)."""
    parts = cls.__module__.split(".")
    if len(parts) != 5 or parts[:2] != ["kio", "schema"] or not parts[3].startswith("v"):
        return _field_names(cls)
    package = importlib.import_module(".".join(parts[:3]))
    names: set[str] = set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.name[:1] == "v" and info.name[1:].isdigit():
            module = importlib.import_module(f"{package.__name__}.{info.name}.{parts[4]}")
            other = getattr(module, cls.__qualname__, None)
            if isinstance(other, type) and dataclasses.is_dataclass(other):
                names |= _field_names(other)
    return frozenset(names)


def build(cls: type, values: dict[str, Any]) -> Any:
    """A kio object of ``cls`` from a dict (see the module docstring)."""
    unknown = values.keys() - _names_in_any_version(cls)
    if unknown:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no field {', '.join(sorted(unknown))} in any version")
    kwargs = {}
    for plan in _plan(cls):
        kwargs[plan.name] = _convert(plan, values[plan.name]) if plan.name in values else plan.default
    return cls(**kwargs)
