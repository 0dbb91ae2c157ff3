"""Request/response framing for the client, on top of ``tidegate.protocol.codec``.

A request is ``[int32 size][request header][body]``; the header is v1 (api key,
version, correlation id, int16-length client id) or v2 (v1 plus empty tagged
fields) when the API version is flexible. A response is ``[int32 size][correlation
id][tagged fields if flexible][body]``, except that ApiVersions responses always use
header v0 (KIP-511). Bodies are kio dataclasses: built from dicts with
:func:`tidegate.protocol.codec.build`, written and read with kio's
``entity_writer``/``entity_reader``. Everything here is sans-IO.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from tidegate.protocol.codec import build, request_class, response_class
from tidegate.utils.byte_utils import read_uvarint

__all__ = [
    "decode_response",
    "encode_request",
    "request_header_bytes",
    "response_is_flexible",
    "skip_tagged_fields",
]

_HDR = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


@cache
def _request_info(api_key: int, version: int) -> tuple[type, Any, bool]:
    cls = request_class(api_key, version)
    return cls, entity_writer(cls), bool(cls.__flexible__)


@cache
def _response_info(api_key: int, version: int) -> tuple[Any, bool]:
    cls = response_class(api_key, version)
    flexible = bool(cls.__flexible__) and api_key != 18
    return entity_reader(cls), flexible


def request_is_flexible(api_key: int, version: int) -> bool:
    return _request_info(api_key, version)[2]


def response_is_flexible(api_key: int, version: int) -> bool:
    """Whether the response *header* is v1 (ApiVersions: never)."""
    return _response_info(api_key, version)[1]


def request_header_bytes(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v1 or v2 (v2 = flexible: v1 + empty tagged fields)."""
    out = bytearray(_HDR.pack(api_key, version, correlation_id))
    if client_id is None:
        out += b"\xff\xff"
    else:
        cid = client_id.encode("utf-8")
        out += struct.pack(">h", len(cid)) + cid
    if _request_info(api_key, version)[2]:
        out += b"\x00"
    return bytes(out)


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A whole size-prefixed request frame. ``body`` is a kio object or a dict."""
    cls, writer, _ = _request_info(api_key, version)
    if isinstance(body, dict):
        body = build(cls, body)
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(request_header_bytes(api_key, version, correlation_id, client_id))
    writer(out, body)
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def skip_tagged_fields(buf: Any, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio body) from a response frame without its size prefix."""
    (correlation_id,) = _I32.unpack_from(frame, 0)
    reader, flexible = _response_info(api_key, version)
    pos = 4
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    body, _ = reader(frame, pos)
    return correlation_id, body


def decode_api_versions_fallback(frame: bytes) -> Any:
    """Decode an ApiVersions response as v0 (what a broker sends when it does not
    support the version asked for, KIP-511)."""
    reader, _ = _response_info(18, 0)
    body, _ = reader(frame, 4)
    return body
