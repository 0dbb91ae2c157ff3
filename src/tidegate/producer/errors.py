"""Producer exceptions. Names follow Kafka's (``BufferExhaustedException`` ->
:class:`BufferExhaustedError`, ...). Anything a record can fail with reaches the
caller through its future and delivery callback; only misuse raises from ``send``."""

from __future__ import annotations

from tidegate.client.errors import KafkaError, KafkaTimeoutError


class ProducerClosedError(KafkaError):
    """The producer (or its buffer pool) was closed."""


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory within ``max.block.ms`` (Kafka's BufferExhaustedException)."""


class RecordTooLargeError(KafkaError):
    """A record larger than ``max.request.size`` or ``buffer.memory``."""


class ProducerFencedError(KafkaError):
    """Another producer with the same id and a newer epoch exists."""


class IdempotenceUnsupportedError(KafkaError):
    """``enable.idempotence=true`` but the broker has no InitProducerId API."""
