"""Producer exceptions. Names follow Kafka's (``BufferExhaustedException`` ->
:class:`BufferExhaustedError`, ...). Anything a record can fail with reaches the
caller through its future and delivery callback; only misuse raises from ``send``.
:class:`RecordTooLargeError` is the shared :mod:`tidegate.errors` class (MESSAGE_TOO_LARGE),
re-exported here."""

from __future__ import annotations

from tidegate.errors import KafkaError, KafkaTimeoutError, RecordTooLargeError

__all__ = [
    "BufferExhaustedError",
    "IdempotenceUnsupportedError",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordTooLargeError",
]


class ProducerClosedError(KafkaError):
    """The producer (or its buffer pool) was closed."""


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory within ``max.block.ms`` (Kafka's BufferExhaustedException)."""


class ProducerFencedError(KafkaError):
    """Another producer with the same id and a newer epoch exists."""


class IdempotenceUnsupportedError(KafkaError):
    """``enable.idempotence=true`` but the broker has no InitProducerId API."""
