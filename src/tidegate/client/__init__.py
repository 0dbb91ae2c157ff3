"""A reusable synchronous Kafka protocol client (``tidegate.client``).

Used by tidegate's producer and meant for anything else in tidegate that talks to
a broker as a client (``tidegate top``, the Spark data source): bootstrap, API
version negotiation, metadata, request/response framing with kio, a connection
per broker with pipelining, timeouts and reconnects. See :mod:`.client`.
"""

from .client import KafkaClient, kio_version_range, metadata_request_body, parse_bootstrap
from .connection import BrokerConnection, ConnectionState, InFlightRequest
from .errors import (
    BrokerResponseError,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    UnsupportedVersionError,
)
from .metadata import BrokerNode, Cluster, PartitionInfo, TopicMetadata

__all__ = [
    "BrokerConnection",
    "BrokerNode",
    "BrokerResponseError",
    "Cluster",
    "ConnectionError_",
    "ConnectionState",
    "InFlightRequest",
    "KafkaClient",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "PartitionInfo",
    "TopicMetadata",
    "UnsupportedVersionError",
    "kio_version_range",
    "metadata_request_body",
    "parse_bootstrap",
]
