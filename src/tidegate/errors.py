"""Kafka's errors, one class per error, shared by the client, the producer and the
broker (as ``org.apache.kafka.common.errors`` is in Kafka).

:class:`KafkaError` carries an optional broker ``code`` (one of Kafka's error codes,
:class:`ErrorCode`, generated from kio's into
:mod:`tidegate.protocol.messages.error_code`) and whether retrying can help.
Where one side needs more context than the error itself (the request header of an
unsupported request, the partition and position of a fetch), it raises a subclass
with its own name; ``except`` on the class here catches both.
"""

from __future__ import annotations

from tidegate.protocol.messages.error_code import ErrorCode

__all__ = [
    "INVALID_METADATA_CODES",
    "AuthenticationError",
    "BrokerResponseError",
    "CodedError",
    "ConnectionError_",
    "ErrorCode",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "SaslAuthenticationError",
    "SslAuthenticationError",
    "TransactionCoordinatorFencedError",
    "UnsupportedVersionError",
    "error_for_code",
]


class KafkaError(Exception):
    """Base class. ``retriable`` says whether the same request may succeed later.

    A transactional producer classifies the errors it reports (Kafka's split between a
    ``KafkaException`` that poisons the producer and an ``ApiException`` the application
    answers by aborting; confluent-kafka's ``fatal()`` / ``txn_requires_abort()``):
    ``fatal`` means the producer can do nothing more but ``close()``;
    ``txn_requires_abort`` means the current transaction can only be aborted, after which
    the producer goes on. Both are False for every other error.
    """

    retriable = False
    fatal = False
    txn_requires_abort = False
    code: int | None = None


class KafkaTimeoutError(KafkaError):
    """A client-side deadline passed (``max.block.ms``, ``request.timeout.ms``,
    ``delivery.timeout.ms``)."""

    retriable = True


class ConnectionError_(KafkaError):
    """The connection to a broker failed or was closed (Kafka's NETWORK_EXCEPTION)."""

    retriable = True
    code = 13


class NoBrokersAvailableError(KafkaError):
    """No bootstrap server could be reached."""

    retriable = True


class UnsupportedVersionError(KafkaError):
    """UNSUPPORTED_VERSION: no version of an API in common between client and broker
    (the client found none in the broker's ApiVersions; the broker got a request for
    an API key or version it does not serve)."""

    code = 35


class OffsetOutOfRangeError(KafkaError):
    """OFFSET_OUT_OF_RANGE: an offset outside the range a partition holds (retention
    deleted it, the partition was recreated, or it is past the end)."""

    code = 1


class RecordTooLargeError(KafkaError):
    """MESSAGE_TOO_LARGE: a record or batch over a size limit: the producer's
    ``max.request.size`` or ``buffer.memory``, or the topic's ``max.message.bytes``
    on the broker."""

    code = 10


class AuthenticationError(KafkaError):
    """The broker (or this client) refused the connection's authentication (Kafka's
    AuthenticationException). Not retriable: the same credentials fail again."""

    retriable = False


class SaslAuthenticationError(AuthenticationError):
    """A SASL login failed (SASL_AUTHENTICATION_FAILED, an unsupported mechanism, a bad
    server signature). On the client the message is the broker's when it sent one; on
    the broker (Kafka's SaslAuthenticationException) it is a message safe to send to the
    client, unlike :class:`tidegate.security.scram.SaslError`'s."""

    code = 58


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed (an untrusted certificate, a host name mismatch, a
    refused client certificate)."""


class BrokerResponseError(KafkaError):
    """A non-zero error code in a broker response."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        #: the broker's error message (None when it sent none)
        self.message = message
        try:
            self.name = ErrorCode(self.code).name.upper()
            self.retriable = bool(ErrorCode(self.code).retriable)
        except ValueError:
            self.name = f"UNKNOWN_CODE_{self.code}"
            self.retriable = False
        super().__init__(f"{self.name} ({self.code})" + (f": {message}" if message else ""))


class CodedError(BrokerResponseError):
    """A Kafka error with a class of its own; ``code`` is the class's. The broker raises
    these too (its producer-state checks), with the message it answers with."""

    code: int = -1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(type(self).code, message)


class OutOfOrderSequenceError(CodedError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45): a gap (or a step back) in a producer's
    sequence."""

    code = 45


class InvalidProducerEpochError(CodedError):
    """INVALID_PRODUCER_EPOCH (47): a batch (or marker) from an epoch older than the
    producer's current one. A transactional producer treats it as abortable (KIP-588:
    the abort then finds out whether the producer was fenced)."""

    code = 47


class InvalidTxnStateError(CodedError):
    """INVALID_TXN_STATE (48): e.g. a non-transactional batch from a producer whose
    transaction is open on the partition."""

    code = 48


class TransactionCoordinatorFencedError(CodedError):
    """TRANSACTION_COORDINATOR_FENCED (52): a marker from a coordinator epoch older than
    the one that wrote the producer's last marker."""

    code = 52


#: Errors after which the client's metadata is stale (Kafka's InvalidMetadataException
#: subclasses): the producer refreshes metadata before retrying.
INVALID_METADATA_CODES = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        9,  # REPLICA_NOT_AVAILABLE
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        100,  # UNKNOWN_TOPIC_ID
        103,  # INCONSISTENT_TOPIC_ID
    }
)


def error_for_code(code: int, message: str | None = None) -> BrokerResponseError:
    return BrokerResponseError(code, message)
