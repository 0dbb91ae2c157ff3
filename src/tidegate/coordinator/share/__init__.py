"""The share coordinator (KIP-932; Kafka's ``share-coordinator`` module): share-partition
state kept durable in ``__share_group_state``.

* :mod:`.records` -- the ShareSnapshot and ShareUpdate records and their format;
* :mod:`.share_coordinator` -- :class:`ShareCoordinator`, the durable share-state
  persister: the checks, the records each operation writes through the ReplicaManager,
  replay at startup, topic deletion, and the pruning that bounds the topic.
"""

from .share_coordinator import (
    SHARE_GROUP_STATE_KEY,
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorConfig,
    share_group_state_topic_configs,
)

__all__ = [
    "SHARE_GROUP_STATE_KEY",
    "SHARE_GROUP_STATE_TOPIC",
    "ShareCoordinator",
    "ShareCoordinatorConfig",
    "share_group_state_topic_configs",
]
