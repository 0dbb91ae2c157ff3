"""The client's errors: :mod:`tidegate.errors` (shared with the producer and the
broker), re-exported under their old import path."""

from __future__ import annotations

from tidegate.errors import (
    INVALID_METADATA_CODES,
    AuthenticationError,
    BrokerResponseError,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = [
    "INVALID_METADATA_CODES",
    "AuthenticationError",
    "BrokerResponseError",
    "ConnectionError_",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "SaslAuthenticationError",
    "SslAuthenticationError",
    "UnsupportedVersionError",
    "error_for_code",
]
