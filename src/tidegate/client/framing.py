"""Request/response framing for the client, on top of ``tidegate.protocol.codec``.

A request is ``[int32 size][request header][body]``; the header is v1 (api key,
version, correlation id, int16-length client id) or v2 (v1 plus empty tagged
fields) when the API version is flexible. A response is ``[int32 size][correlation
id][tagged fields if flexible][body]``, except that ApiVersions responses always use
header v0 (KIP-511). Bodies are tidegate's version-less messages
(:mod:`tidegate.protocol.messages`), or dicts of Kafka's field names turned into one by
:func:`tidegate.protocol.codec.build`. Everything here is sans-IO.
"""

from __future__ import annotations

from typing import Any

from tidegate.protocol.codec import (
    decode_response,
    encode_request,
    request_is_flexible,
    response_class,
)
from tidegate.protocol.serialization import read_message, write_request_header

__all__ = [
    "decode_api_versions_fallback",
    "decode_response",
    "encode_request",
    "request_header_bytes",
    "request_is_flexible",
]

API_VERSIONS = 18


def request_header_bytes(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v1 or v2 (v2 = flexible: v1 + empty tagged fields)."""
    out = bytearray()
    write_request_header(api_key, version, correlation_id, client_id,
                         request_is_flexible(api_key, version), out)
    return bytes(out)


def decode_api_versions_fallback(frame: bytes) -> Any:
    """Decode an ApiVersions response as v0 (what a broker sends when it does not
    support the version asked for, KIP-511)."""
    body, _ = read_message(response_class(API_VERSIONS, 0), 0, False, frame, 4)
    return body
