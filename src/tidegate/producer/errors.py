"""Producer exceptions. Names follow Kafka's (``BufferExhaustedException`` ->
:class:`BufferExhaustedError`, ...). Anything a record can fail with reaches the
caller through its future and delivery callback; only misuse raises from ``send``.
:class:`RecordTooLargeError` is the shared :mod:`tidegate.errors` class (MESSAGE_TOO_LARGE),
re-exported here.

The transaction errors are Kafka's ``org.apache.kafka.common.errors`` classes that a
transactional producer reports. Those a broker sends are :class:`BrokerResponseError`
subclasses with their code (``err.code``); :func:`error_for_code` builds the right one.
Whether an error is fatal or only needs the transaction aborted is not a property of the
class (Kafka's ``TransactionManager`` decides by request: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
is abortable from InitProducerId, fatal elsewhere) but of the instance the producer
reports: ``err.fatal`` and ``err.txn_requires_abort`` (see :class:`tidegate.errors.KafkaError`
and ``docs/transactions.md``).
"""

from __future__ import annotations

from tidegate.errors import (
    BrokerResponseError,
    CodedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnsupportedVersionError,
)

__all__ = [
    "BufferExhaustedError",
    "ClusterAuthorizationError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "FencedInstanceIdError",
    "GroupAuthorizationError",
    "IdempotenceUnsupportedError",
    "IllegalStateError",
    "InvalidPidMappingError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "InvalidTxnTimeoutError",
    "OutOfOrderSequenceError",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionalIdAuthorizationError",
    "UnknownProducerIdError",
    "error_for_code",
]


class ProducerClosedError(KafkaError):
    """The producer (or its buffer pool) was closed."""


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory within ``max.block.ms`` (Kafka's BufferExhaustedException)."""


class IdempotenceUnsupportedError(KafkaError):
    """``enable.idempotence=true`` but the broker has no InitProducerId API."""


class IllegalStateError(RuntimeError):
    """A method called in a state that does not allow it (Kafka's
    IllegalStateException): ``begin_transaction()`` before ``init_transactions()``, a
    transactional method on a producer without ``transactional.id``, ``send()`` outside
    a transaction, another method while a timed-out one must be retried. A programming
    error, not a :class:`KafkaError`: the producer's state is unchanged."""


class TransactionAbortedError(KafkaError):
    """The record was still queued when its transaction was aborted (Kafka's
    TransactionAbortedException: "Failing batch since transaction was aborted")."""

    def __init__(self, message: str = "Failing batch since transaction was aborted") -> None:
        super().__init__(message)


class CommitFailedError(KafkaError):
    """The group coordinator refused the transaction's offsets for the group's
    membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: Kafka's CommitFailedException);
    the transaction must be aborted."""


class ProducerFencedError(CodedError):
    """PRODUCER_FENCED (90): another producer with the same ``transactional.id`` and a
    newer epoch exists. Always fatal."""

    code = 90
    fatal = True


class InvalidPidMappingError(CodedError):
    """INVALID_PRODUCER_ID_MAPPING (49): the coordinator does not know this producer id
    for the transactional id (expired)."""

    code = 49


class InvalidTxnTimeoutError(CodedError):
    """INVALID_TRANSACTION_TIMEOUT (50): ``transaction.timeout.ms`` above the broker's
    ``transaction.max.timeout.ms``."""

    code = 50


class ConcurrentTransactionsError(CodedError):
    """CONCURRENT_TRANSACTIONS (51): the previous transaction is still completing
    (retried by the producer)."""

    code = 51


class TransactionalIdAuthorizationError(CodedError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)."""

    code = 53


class UnknownProducerIdError(CodedError):
    """UNKNOWN_PRODUCER_ID (59)."""

    code = 59


class TopicAuthorizationError(CodedError):
    """TOPIC_AUTHORIZATION_FAILED (29)."""

    code = 29


class GroupAuthorizationError(CodedError):
    """GROUP_AUTHORIZATION_FAILED (30)."""

    code = 30


class ClusterAuthorizationError(CodedError):
    """CLUSTER_AUTHORIZATION_FAILED (31)."""

    code = 31


class FencedInstanceIdError(CodedError):
    """FENCED_INSTANCE_ID (82): the group's static member id is held by another member."""

    code = 82


class TransactionAbortableError(CodedError):
    """TRANSACTION_ABORTABLE (120)."""

    code = 120


_BY_CODE: dict[int, type[CodedError]] = {
    cls.code: cls
    for cls in (
        ProducerFencedError,
        InvalidProducerEpochError,
        InvalidTxnStateError,
        InvalidPidMappingError,
        InvalidTxnTimeoutError,
        ConcurrentTransactionsError,
        TransactionalIdAuthorizationError,
        OutOfOrderSequenceError,
        UnknownProducerIdError,
        TopicAuthorizationError,
        GroupAuthorizationError,
        ClusterAuthorizationError,
        FencedInstanceIdError,
        TransactionAbortableError,
    )
}


def error_for_code(code: int, message: str | None = None) -> KafkaError:
    """The exception for a broker error code: the class above when there is one,
    :class:`UnsupportedVersionError` for 35, else :class:`BrokerResponseError`."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    if code == UnsupportedVersionError.code:
        return UnsupportedVersionError(message or "UNSUPPORTED_VERSION (35)")
    return BrokerResponseError(code, message)
