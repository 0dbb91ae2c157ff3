"""A reusable synchronous Kafka protocol client (``tidegate.client``).

Used by tidegate's producer and meant for anything else in tidegate that talks to
a broker as a client (``tidegate top``, the Spark data source): bootstrap, API
version negotiation, metadata, request/response framing (tidegate.protocol.codec), a connection
per broker with pipelining, timeouts and reconnects, TLS and SASL (PLAIN, SCRAM; see
:mod:`.security`). See :mod:`.client`.
"""

from tidegate.errors import (
    AuthenticationError,
    BrokerResponseError,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnsupportedVersionError,
)

from .client import KafkaClient, client_version_range, metadata_request_body, parse_bootstrap
from .connection import BrokerConnection, ConnectionState, InFlightRequest
from .metadata import BrokerNode, Cluster, PartitionInfo, TopicMetadata
from .security import ClientSecurity, SecurityConfigError

__all__ = [
    "AuthenticationError",
    "BrokerConnection",
    "BrokerNode",
    "BrokerResponseError",
    "ClientSecurity",
    "Cluster",
    "ConnectionError_",
    "ConnectionState",
    "InFlightRequest",
    "KafkaClient",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "PartitionInfo",
    "SaslAuthenticationError",
    "SecurityConfigError",
    "SslAuthenticationError",
    "TopicMetadata",
    "UnsupportedVersionError",
    "client_version_range",
    "metadata_request_body",
    "parse_bootstrap",
]
