"""The group coordinator's calls to the share-group state persister (Kafka's
``GroupCoordinatorService`` calling ``Persister.initializeState``, ``deleteState`` and
``readSummary``): per group, many share-partitions at once, over the one
:class:`~tidegate.server.share.persister.Persister` the share-partitions use (the share
coordinator on a broker), one call per share-partition.

Each answers through its callback once every share-partition has answered (at once or
later), topic id -> partition -> the share-partition's answer: an error code (NONE for
success) or a :class:`~tidegate.server.share.persister.PersisterReadSummary`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from tidegate.errors import ErrorCode
from tidegate.server.share.persister import (
    NO_LEADER_EPOCH,
    Persister,
    PersisterReadSummary,
    SharePartitionKey,
)

#: topic id -> partition -> its error (NONE for success)
PartitionErrors = Mapping[uuid.UUID, Mapping[int, ErrorCode]]
ErrorsCallback = Callable[[PartitionErrors], None]
#: topic id -> partition -> its summary
Summaries = Mapping[uuid.UUID, Mapping[int, PersisterReadSummary]]

T = TypeVar("T")


def _gather(
    partitions: Mapping[uuid.UUID, Collection[int]],
    call: Callable[[uuid.UUID, int, Callable[[T], None]], None],
    callback: Callable[[dict[uuid.UUID, dict[int, T]]], None],
) -> None:
    """``call`` for every share-partition; ``callback`` with all the answers once the last
    one is in."""
    answers: dict[uuid.UUID, dict[int, T]] = {}
    remaining = sum(len(parts) for parts in partitions.values())

    def answered(topic_id: uuid.UUID, partition: int, answer: T) -> None:
        nonlocal remaining
        answers.setdefault(topic_id, {})[partition] = answer
        remaining -= 1
        if remaining == 0:
            callback(answers)

    if remaining == 0:
        callback(answers)
        return
    for topic_id, parts in partitions.items():
        for partition in parts:
            call(topic_id, partition, functools.partial(answered, topic_id, partition))


def initialize_state(
    persister: Persister,
    group_id: str,
    state_epoch: int,
    start_offsets: Mapping[uuid.UUID, Mapping[int, int]],
    callback: ErrorsCallback,
) -> None:
    """InitializeShareGroupState: create (or replace) the share-partitions' state at
    ``state_epoch``, topic id -> partition -> start offset (-1: none)."""

    def call(topic_id: uuid.UUID, partition: int, done: Callable[[ErrorCode], None]) -> None:
        key = SharePartitionKey(group_id, topic_id, partition)
        persister.initialize(key, state_epoch, start_offsets[topic_id][partition], done)

    _gather(start_offsets, call, callback)


def delete_state(
    persister: Persister,
    group_id: str,
    partitions: Mapping[uuid.UUID, Collection[int]],
    callback: ErrorsCallback,
) -> None:
    """DeleteShareGroupState: forget the share-partitions' state."""

    def call(topic_id: uuid.UUID, partition: int, done: Callable[[ErrorCode], None]) -> None:
        persister.delete(SharePartitionKey(group_id, topic_id, partition), done)

    _gather(partitions, call, callback)


def read_summary(
    persister: Persister,
    group_id: str,
    partitions: Mapping[uuid.UUID, Collection[int]],
    callback: Callable[[Summaries], None],
) -> None:
    """ReadShareGroupStateSummary: each share-partition's start offset, epochs and
    delivery complete count (not fenced by a leader epoch)."""

    def call(topic_id: uuid.UUID, partition: int, done: Callable[[PersisterReadSummary], None]) -> None:
        persister.read_summary(SharePartitionKey(group_id, topic_id, partition), NO_LEADER_EPOCH, done)

    _gather(partitions, call, callback)


def first_error(errors: PartitionErrors) -> ErrorCode:
    """The first error of a per-partition answer, NONE if every partition succeeded
    (Kafka's service takes the first one it meets)."""
    for partitions in errors.values():
        for error in partitions.values():
            if error is not ErrorCode.none:
                return error
    return ErrorCode.none
