"""Share groups (KIP-932) on the broker: Kafka's ``kafka.server.share`` and
``org.apache.kafka.server.share``, sans-IO.

* :mod:`.share_partition` -- :class:`SharePartition`: one (group, topic id, partition)'s
  in-flight records, acquisition locks on the timing wheel, acknowledgements, the start
  offset, the load of persisted state.
* :mod:`.in_flight` -- the in-flight batches and per-offset state it keeps.
* :mod:`.persister` -- what is persisted (:class:`PersisterWrite`), the :class:`Persister`
  protocol, the share coordinator's checks (:class:`~.persister.ShareStates`) and an
  in-memory implementation (the durable one is :mod:`tidegate.coordinator.share`).
* :mod:`.session` -- share sessions (:class:`ShareSessionCache`).
* :mod:`.acknowledgements` -- acknowledge types, batches and their validation.
* :mod:`.share_partition_manager` -- :class:`~.share_partition_manager.SharePartitionManager`:
  the share-partition cache, fetch, acknowledge and release, the hooks the broker calls.
* :mod:`.delayed_share_fetch` -- :class:`~.delayed_share_fetch.DelayedShareFetch`: a
  ShareFetch parked in the share fetch purgatory, and the read-and-acquire.
* :mod:`.share_apis` -- ShareFetch and ShareAcknowledge handling with typed responses
  (:func:`~.share_apis.handle_share_fetch`, :func:`~.share_apis.handle_share_acknowledge`).

The last three import the ReplicaManager, so they are imported from their modules, not
here: every import of this package (the share coordinator's of its persister too) runs
this file.
"""

from .acknowledgements import (
    AcknowledgeType,
    ShareAcknowledgementBatch,
    validate_acknowledgement_batches,
)
from .in_flight import EMPTY_MEMBER_ID, InFlightBatch, RecordState
from .persister import (
    InMemoryPersister,
    Persister,
    PersisterReadResult,
    PersisterReadSummary,
    PersisterStateBatch,
    PersisterWrite,
    SharePartitionKey,
)
from .session import (
    ShareFetchContext,
    ShareSession,
    ShareSessionCache,
    ShareSessionKey,
    acknowledge_session_update,
    new_context,
    release_session,
)
from .share_partition import (
    AcquiredRecords,
    FetchedBatch,
    ShareAcquiredRecords,
    ShareAcquireMode,
    ShareAutoOffsetReset,
    ShareFetchRead,
    SharePartition,
    SharePartitionState,
    ShareResult,
)

__all__ = [
    "EMPTY_MEMBER_ID",
    "AcknowledgeType",
    "AcquiredRecords",
    "FetchedBatch",
    "InFlightBatch",
    "InMemoryPersister",
    "Persister",
    "PersisterReadResult",
    "PersisterReadSummary",
    "PersisterStateBatch",
    "PersisterWrite",
    "RecordState",
    "ShareAcknowledgementBatch",
    "ShareAcquireMode",
    "ShareAcquiredRecords",
    "ShareAutoOffsetReset",
    "ShareFetchContext",
    "ShareFetchRead",
    "SharePartition",
    "SharePartitionKey",
    "SharePartitionState",
    "ShareResult",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionKey",
    "acknowledge_session_update",
    "new_context",
    "release_session",
    "validate_acknowledgement_batches",
]
