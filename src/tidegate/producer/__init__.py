"""tidegate's Kafka producer, with KIP-1332's ``incremental`` buffer memory.

- :class:`Producer` — ``send`` / ``flush`` / ``close`` with Kafka's config keys, and
  Kafka's transactions (``transactional.id``, ``init_transactions`` ... ``commit_transaction``;
  :class:`ConsumerGroupMetadata`, the transaction errors) (:class:`AIOProducer`: the same
  for asyncio);
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
    ClusterAuthorizationError,
    CommitFailedError,
    ConcurrentTransactionsError,
    FencedInstanceIdError,
    GroupAuthorizationError,
    IdempotenceUnsupportedError,
    IllegalStateError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    InvalidTxnTimeoutError,
    OutOfOrderSequenceError,
    ProducerClosedError,
    ProducerFencedError,
    RecordTooLargeError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    UnknownProducerIdError,
)
from .partitioner import (
    BuiltInPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)
from .producer import Producer
from .transaction_manager import ConsumerGroupMetadata, OffsetAndMetadata, TransactionManager

__all__ = [
    "AIOProducer",
    "BufferExhaustedError",
    "BufferPool",
    "BuiltInPartitioner",
    "ChunkedProducerBatch",
    "Clock",
    "ClusterAuthorizationError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "ConfigError",
    "ConsumerGroupMetadata",
    "FencedInstanceIdError",
    "GroupAuthorizationError",
    "IdempotenceUnsupportedError",
    "IllegalStateError",
    "InvalidPidMappingError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "InvalidTxnTimeoutError",
    "MockClock",
    "OffsetAndMetadata",
    "OutOfOrderSequenceError",
    "Producer",
    "ProducerBatch",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerFencedError",
    "RecordAccumulator",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "RoundRobinPartitioner",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionalIdAuthorizationError",
    "UnknownProducerIdError",
    "chunk_size_for",
    "murmur2",
    "partition_for_key",
    "to_positive",
]
