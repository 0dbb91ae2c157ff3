"""tidegate's Kafka producer, with KIP-1332's ``incremental`` buffer memory.

- :class:`Producer` — ``send`` / ``flush`` / ``close`` with Kafka's config keys
  (:class:`AIOProducer`: the same for asyncio);
- :class:`BufferPool` — Kafka's ``BufferPool`` plus atomic multi-chunk allocation;
- :class:`RecordAccumulator` — per-partition batches for both allocation strategies;
- partitioners — Java-compatible murmur2, KIP-794 sticky, round robin, callables.

See ``docs/producer.md``.
"""

from tidegate.clock import Clock, MockClock

from .accumulator import RecordAccumulator
from .aio import AIOProducer
from .batch import ChunkedProducerBatch, ProducerBatch, RecordFuture, RecordMetadata
from .buffer_pool import BufferPool, chunk_size_for
from .config import ConfigError, ProducerConfig
from .errors import (
    BufferExhaustedError,
    IdempotenceUnsupportedError,
    ProducerClosedError,
    RecordTooLargeError,
)
from .partitioner import (
    BuiltInPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)
from .producer import Producer

__all__ = [
    "AIOProducer",
    "BufferExhaustedError",
    "BufferPool",
    "BuiltInPartitioner",
    "ChunkedProducerBatch",
    "Clock",
    "ConfigError",
    "IdempotenceUnsupportedError",
    "MockClock",
    "Producer",
    "ProducerBatch",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordAccumulator",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "RoundRobinPartitioner",
    "chunk_size_for",
    "murmur2",
    "partition_for_key",
    "to_positive",
]
