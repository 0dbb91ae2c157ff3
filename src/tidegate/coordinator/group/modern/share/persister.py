"""What the group coordinator asks of the share-group state persister (Kafka's
``org.apache.kafka.server.share.persister.Persister``, as ``GroupCoordinatorService`` calls
it): create the state of new share-partitions, delete the state of a group's or a topic's
share-partitions, and read their summaries for DescribeShareGroupOffsets.

Calls are per group, many share-partitions at once, as Kafka's ``*Parameters`` are, and
answer through a callback, at once or later, per share-partition (an error code, or a
:class:`PartitionStateSummary`). The share-partitions' own reads and writes (the
share-partition side, :mod:`tidegate.server.share.persister`) are not this coordinator's
business; the broker wires one store behind both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from tidegate.errors import ErrorCode

#: Kafka's ``PartitionFactory.UNINITIALIZED_START_OFFSET``: initialized without a start
#: offset; the share-partition applies ``share.auto.offset.reset`` when it first loads.
UNINITIALIZED_START_OFFSET = -1
#: Kafka's ``PartitionFactory.UNINITIALIZED_DELIVERY_COMPLETE_COUNT``
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1

#: topic id -> partition -> its error (NONE for success)
PartitionErrors = Mapping[uuid.UUID, Mapping[int, ErrorCode]]
ErrorsCallback = Callable[[PartitionErrors], None]


@dataclass(frozen=True, slots=True)
class PartitionStateSummary:
    """One share-partition's summary (Kafka's ``PartitionStateSummaryData``,
    ReadShareGroupStateSummary v1)."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    #: terminal (acknowledged or archived) records at or above the start offset (KIP-1226)
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT


SummaryCallback = Callable[[Mapping[uuid.UUID, Mapping[int, PartitionStateSummary]]], None]


class ShareGroupStatePersister(Protocol):
    def initialize_state(
        self,
        group_id: str,
        state_epoch: int,
        start_offsets: Mapping[uuid.UUID, Mapping[int, int]],
        callback: ErrorsCallback,
    ) -> None:
        """InitializeShareGroupState: create (or replace) the state of the share-partitions,
        topic id -> partition -> start offset (-1: none), at ``state_epoch``."""
        ...

    def delete_state(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Collection[int]],
        callback: ErrorsCallback,
    ) -> None:
        """DeleteShareGroupState: forget the share-partitions' state."""
        ...

    def read_summary(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Collection[int]],
        callback: SummaryCallback,
    ) -> None:
        """ReadShareGroupStateSummary: each share-partition's start offset, epochs and
        delivery complete count (an error for one without state)."""
        ...


def first_error(errors: PartitionErrors) -> ErrorCode:
    """The first error of a per-partition answer, NONE if every partition succeeded
    (Kafka's service takes the first one it meets)."""
    for partitions in errors.values():
        for error in partitions.values():
            if error is not ErrorCode.none:
                return error
    return ErrorCode.none
