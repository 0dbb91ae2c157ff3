"""Durable share-partition state (KIP-932): what must survive a restart, and the interface
that stores it (Kafka's ``org.apache.kafka.server.share.persister``, in server-common).

A share-partition persists its *start offset* (SPSO: everything below is done), its
*state epoch* and the in-flight ranges whose outcome must not be lost: state batches of
``(first offset, last offset, delivery state, delivery count)`` with the delivery state
AVAILABLE 0, ACKNOWLEDGED 2 or ARCHIVED 4 (ACQUIRED 1 is never persisted: a lock does not
survive a restart, the record comes back AVAILABLE with its last persisted count).

The :class:`Persister` protocol is the seam. Two implementations keep the share
coordinator's rules (Kafka's ``ShareCoordinatorShard``) through the one
:class:`ShareStates` below, so they answer alike: :class:`InMemoryPersister` (a dict,
for unit tests of the share-partition) and the share coordinator
(:class:`tidegate.coordinator.share.ShareCoordinator`), which keeps the states durable in
``__share_group_state`` as ShareSnapshot and ShareUpdate records written through the
ReplicaManager. Both apply a write with :func:`merge_state` and combine ranges with
:func:`combine_state_batches`.

Every call answers through a callback, now or later (a write is asynchronous in Kafka:
an acknowledgement completes only when its write succeeded, reference 2.5 and 2.9).

This module depends on nothing else of ``tidegate.server`` (it sits in the layer of
Kafka's server-common, below the coordinators that implement it).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tidegate.errors import ErrorCode

__all__ = [
    "NO_LEADER_EPOCH",
    "UNINITIALIZED_DELIVERY_COMPLETE_COUNT",
    "UNINITIALIZED_START_OFFSET",
    "InMemoryPersister",
    "Persister",
    "PersisterReadResult",
    "PersisterReadSummary",
    "PersisterStateBatch",
    "PersisterWrite",
    "ShareGroupOffset",
    "SharePartitionKey",
    "ShareStates",
    "StateError",
    "TopicPartitions",
    "combine_state_batches",
    "merge_state",
]

#: Kafka's ``PartitionFactory.UNINITIALIZED_START_OFFSET``: no start offset yet, the
#: share-partition applies ``share.auto.offset.reset`` when it loads.
UNINITIALIZED_START_OFFSET = -1
#: Kafka's ``PartitionFactory.UNINITIALIZED_DELIVERY_COMPLETE_COUNT``: not known.
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
#: A leader epoch of -1: none given (a write leaves the stored one, a read is not fenced).
NO_LEADER_EPOCH = -1
#: a state epoch of -1 in a write: none given (not checked)
_NO_STATE_EPOCH = -1

_ACKNOWLEDGED = 2
_ARCHIVED = 4


class SharePartitionKey(NamedTuple):
    """(group id, topic id, partition): the share-partition a state belongs to."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


class PersisterStateBatch(NamedTuple):
    """Kafka's ``PersisterStateBatch``: one range's delivery state (0, 2 or 4) and count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersisterWrite:
    """What a share-partition asks to store (Kafka's WriteShareGroupState partition data):
    its state and leader epochs, its start offset, and the ranges whose state changed.
    An acknowledgement's response waits until this write succeeded.

    ``delivery_complete_count`` (KIP-1226, WriteShareGroupState v1) is the number of
    acknowledged or archived offsets at or above the start offset; -1 (not sent) lets the
    store count them from the ranges it holds (:meth:`ShareGroupOffset.summary`)."""

    key: SharePartitionKey
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[PersisterStateBatch, ...]
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class PersisterReadResult:
    """A read's answer (Kafka's ReadShareGroupState partition result). ``start_offset``
    is :data:`UNINITIALIZED_START_OFFSET` for a share-partition initialized without one."""

    error: ErrorCode = ErrorCode.none
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[PersisterStateBatch, ...] = ()
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class PersisterReadSummary:
    """A read-summary's answer (Kafka's ReadShareGroupStateSummary partition result, what
    DescribeShareGroupOffsets shows): start offset -1 for a share-partition with none (or
    none stored), delivery complete count -1 when not known."""

    error: ErrorCode = ErrorCode.none
    state_epoch: int = 0
    leader_epoch: int = NO_LEADER_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT
    error_message: str | None = None


WriteCallback = Callable[[ErrorCode], None]
ReadCallback = Callable[[PersisterReadResult], None]
SummaryCallback = Callable[[PersisterReadSummary], None]
#: the partition count of a topic id, None for no such topic (the metadata image)
TopicPartitions = Callable[[uuid.UUID], "int | None"]


class Persister(Protocol):
    """Kafka's ``Persister``: initialize, read, write and delete a share-partition's state,
    and read its summary. Each answers through its callback, at once or later."""

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   callback: WriteCallback) -> None: ...

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None: ...

    def read_summary(self, key: SharePartitionKey, leader_epoch: int, callback: SummaryCallback) -> None: ...

    def write(self, write: PersisterWrite, callback: WriteCallback) -> None: ...

    def delete(self, key: SharePartitionKey, callback: WriteCallback) -> None: ...


def combine_state_batches(
    current: Iterable[PersisterStateBatch], new: Iterable[PersisterStateBatch], start_offset: int
) -> list[PersisterStateBatch]:
    """Kafka's ``PersisterStateBatchCombiner``: the stored ranges after a write.

    A newer range overrides what it overlaps; nothing below ``start_offset`` is kept (a
    range crossing it is cut); adjacent ranges with the same state and count merge. The
    result is sorted and non-overlapping.
    """
    out: list[PersisterStateBatch] = []
    for batch in current:
        if batch.last_offset >= start_offset:
            out.append(batch)
    for batch in new:
        if batch.last_offset < start_offset:
            continue
        kept: list[PersisterStateBatch] = []
        for old in out:
            if old.last_offset < batch.first_offset or old.first_offset > batch.last_offset:
                kept.append(old)
                continue
            if old.first_offset < batch.first_offset:
                kept.append(old._replace(last_offset=batch.first_offset - 1))
            if old.last_offset > batch.last_offset:
                kept.append(old._replace(first_offset=batch.last_offset + 1))
        kept.append(batch)
        out = kept
    out.sort()
    merged: list[PersisterStateBatch] = []
    for batch in out:
        if batch.first_offset < start_offset:
            batch = batch._replace(first_offset=start_offset)
        if merged:
            prev = merged[-1]
            if (prev.last_offset + 1 == batch.first_offset and prev.delivery_state == batch.delivery_state
                    and prev.delivery_count == batch.delivery_count):
                merged[-1] = prev._replace(last_offset=batch.last_offset)
                continue
        merged.append(batch)
    return merged


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One share-partition's stored state (Kafka's ``ShareGroupOffset``, the share
    coordinator's value per key). ``snapshot_epoch`` counts the snapshots written for the
    key; the timestamps (wall clock, ms) are those of the last snapshot: when it was first
    created and when it was last written (a cold partition's snapshot is rewritten)."""

    state_epoch: int
    start_offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    state_batches: tuple[PersisterStateBatch, ...] = ()
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT
    snapshot_epoch: int = 0
    create_timestamp: int = 0
    write_timestamp: int = 0

    def read_result(self) -> PersisterReadResult:
        return PersisterReadResult(ErrorCode.none, self.state_epoch, self.start_offset, self.state_batches)

    def summary(self) -> PersisterReadSummary:
        """The read-summary: the stored delivery complete count, or (not sent by the
        share-partition) the acknowledged and archived offsets of the stored ranges,
        which hold every terminal offset at or above the start offset."""
        count = self.delivery_complete_count
        if count < 0 and self.start_offset != UNINITIALIZED_START_OFFSET:
            count = sum(b.last_offset - b.first_offset + 1 for b in self.state_batches
                        if b.delivery_state in (_ACKNOWLEDGED, _ARCHIVED))
        return PersisterReadSummary(ErrorCode.none, self.state_epoch, self.leader_epoch, self.start_offset, count)


def merge_state(state: ShareGroupOffset, start_offset: int, leader_epoch: int, delivery_complete_count: int,
                batches: Iterable[PersisterStateBatch]) -> ShareGroupOffset:
    """``state`` after a write (or a ShareUpdate record, the same delta): a start offset
    of -1 and a leader epoch of -1 leave the stored ones; the ranges are combined at the
    new start offset; the delivery complete count is the write's."""
    start = state.start_offset if start_offset == UNINITIALIZED_START_OFFSET else start_offset
    return dataclasses.replace(
        state,
        start_offset=start,
        leader_epoch=state.leader_epoch if leader_epoch == NO_LEADER_EPOCH else leader_epoch,
        state_batches=tuple(combine_state_batches(state.state_batches, batches, start)),
        delivery_complete_count=delivery_complete_count,
    )


class StateError(NamedTuple):
    """A refused operation: its error code and Kafka's message for it."""

    code: ErrorCode
    message: str | None = None


_NEGATIVE_PARTITION = StateError(ErrorCode.invalid_request, "The partition id cannot be a negative number.")
_WRITE_UNINITIALIZED = StateError(ErrorCode.invalid_request,
                                  "Write operation on uninitialized share partition not allowed.")
_READ_UNINITIALIZED = StateError(ErrorCode.invalid_request,
                                 "Read operation on uninitialized share partition not allowed.")
_UNKNOWN_TOPIC_OR_PARTITION = StateError(ErrorCode.unknown_topic_or_partition,
                                         "This server does not host this topic-partition.")
_FENCED_LEADER_EPOCH = StateError(ErrorCode.fenced_leader_epoch,
                                  "The leader epoch in the request is older than the epoch on the broker.")
_FENCED_STATE_EPOCH = StateError(ErrorCode.fenced_state_epoch,
                                 "The state epoch in the request is older than the current state epoch.")


class ShareStates:
    """The share coordinator's states and its checks (Kafka's ``ShareCoordinatorShard``:
    ``maybeGet{Initialize,Read,Write,Delete}StateError``), with no I/O: what a persister
    may store is decided here, how it is stored is the persister's.

    * initialize: a negative partition is INVALID_REQUEST; a state epoch lower than the
      stored one FENCED_STATE_EPOCH; an unknown topic or partition
      UNKNOWN_TOPIC_OR_PARTITION.
    * read: a negative partition or an uninitialized share-partition is INVALID_REQUEST; a
      leader epoch lower than the stored one FENCED_LEADER_EPOCH (-1: none, never fenced);
      then the unknown topic or partition.
    * write: as a read (uninitialized: INVALID_REQUEST), with a state epoch lower than
      the stored one FENCED_STATE_EPOCH before the unknown topic or partition (-1 for
      either epoch: not checked).
    * delete and read-summary: a negative partition is INVALID_REQUEST, an unknown topic
      or partition UNKNOWN_TOPIC_OR_PARTITION; deleting what is not stored succeeds, its
      summary has start offset -1.

    ``topic_partitions`` is the metadata image (None: every topic exists, as in a unit
    test of the share-partition).
    """

    def __init__(self, topic_partitions: TopicPartitions | None = None) -> None:
        self.topic_partitions = topic_partitions
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}

    def get(self, key: SharePartitionKey) -> ShareGroupOffset | None:
        return self.states.get(key)

    def __iter__(self) -> Iterator[SharePartitionKey]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def _unknown(self, key: SharePartitionKey) -> bool:
        if self.topic_partitions is None:
            return False
        count = self.topic_partitions(key.topic_id)
        return count is None or key.partition >= count

    def initialize_error(self, key: SharePartitionKey, state_epoch: int) -> StateError | None:
        if key.partition < 0:
            return _NEGATIVE_PARTITION
        state = self.states.get(key)
        if state is not None and state.state_epoch > state_epoch:
            return _FENCED_STATE_EPOCH
        if self._unknown(key):
            return _UNKNOWN_TOPIC_OR_PARTITION
        return None

    def _stored_error(self, key: SharePartitionKey, leader_epoch: int,
                      uninitialized: StateError) -> StateError | None:
        if key.partition < 0:
            return _NEGATIVE_PARTITION
        state = self.states.get(key)
        if state is None:
            return uninitialized
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch < state.leader_epoch:
            return _FENCED_LEADER_EPOCH
        return None

    def read_error(self, key: SharePartitionKey, leader_epoch: int) -> StateError | None:
        error = self._stored_error(key, leader_epoch, _READ_UNINITIALIZED)
        if error is None and self._unknown(key):
            return _UNKNOWN_TOPIC_OR_PARTITION
        return error

    def write_error(self, write: PersisterWrite) -> StateError | None:
        key = write.key
        error = self._stored_error(key, write.leader_epoch, _WRITE_UNINITIALIZED)
        if error is not None:
            return error
        if write.state_epoch != _NO_STATE_EPOCH and write.state_epoch < self.states[key].state_epoch:
            return _FENCED_STATE_EPOCH
        if self._unknown(key):
            return _UNKNOWN_TOPIC_OR_PARTITION
        return None

    def delete_error(self, key: SharePartitionKey) -> StateError | None:
        if key.partition < 0:
            return _NEGATIVE_PARTITION
        if self._unknown(key):
            return _UNKNOWN_TOPIC_OR_PARTITION
        return None

    def summary(self, key: SharePartitionKey) -> PersisterReadSummary:
        """The read-summary of ``key``: refused as a delete is, start offset -1 for a key
        with nothing stored."""
        error = self.delete_error(key)
        if error is not None:
            return PersisterReadSummary(error.code, error_message=error.message)
        state = self.states.get(key)
        return PersisterReadSummary() if state is None else state.summary()

    def leader_epoch_moved(self, key: SharePartitionKey, leader_epoch: int) -> bool:
        """Whether a checked read with ``leader_epoch`` records a new leader epoch."""
        return leader_epoch != NO_LEADER_EPOCH and leader_epoch != self.states[key].leader_epoch


class InMemoryPersister:
    """A :class:`Persister` in a dict, with the share coordinator's checks
    (:class:`ShareStates`). A state kept here survives a new :class:`SharePartition` (a
    broker restart in a unit test).

    For tests of the write path: ``fail_writes`` answers every write with that error
    (nothing stored); ``hold_writes`` keeps writes pending until :meth:`complete_held`
    (or :meth:`fail_held`) answers them, in order. ``writes`` lists every write asked.
    """

    def __init__(self, topic_partitions: TopicPartitions | None = None) -> None:
        self._states = ShareStates(topic_partitions)
        self.writes: list[PersisterWrite] = []
        self.fail_writes: ErrorCode | None = None
        self.hold_writes = False
        self._held: list[tuple[PersisterWrite, WriteCallback]] = []

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   callback: WriteCallback) -> None:
        error = self._states.initialize_error(key, state_epoch)
        if error is None:
            self._states.states[key] = ShareGroupOffset(state_epoch, start_offset)
        callback(ErrorCode.none if error is None else error.code)

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None:
        error = self._states.read_error(key, leader_epoch)
        if error is not None:
            callback(PersisterReadResult(error.code, error_message=error.message))
            return
        states = self._states.states
        state = states[key]
        if self._states.leader_epoch_moved(key, leader_epoch):
            states[key] = merge_state(state, UNINITIALIZED_START_OFFSET, leader_epoch,
                                      state.delivery_complete_count, ())
        callback(state.read_result())

    def read_summary(self, key: SharePartitionKey, leader_epoch: int, callback: SummaryCallback) -> None:
        callback(self._states.summary(key))

    def write(self, write: PersisterWrite, callback: WriteCallback) -> None:
        self.writes.append(write)
        if self.hold_writes:
            self._held.append((write, callback))
            return
        callback(self._apply(write))

    def delete(self, key: SharePartitionKey, callback: WriteCallback) -> None:
        error = self._states.delete_error(key)
        if error is None:
            self._states.states.pop(key, None)
        callback(ErrorCode.none if error is None else error.code)

    def _apply(self, write: PersisterWrite) -> ErrorCode:
        if self.fail_writes is not None:
            return self.fail_writes
        error = self._states.write_error(write)
        if error is not None:
            return error.code
        states = self._states.states
        states[write.key] = merge_state(states[write.key], write.start_offset, write.leader_epoch,
                                        write.delivery_complete_count, write.state_batches)
        return ErrorCode.none

    def put(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
            batches: Sequence[PersisterStateBatch] = ()) -> None:
        """Store a state as the share coordinator would hold it (tests of a load)."""
        self._states.states[key] = ShareGroupOffset(state_epoch, start_offset, state_batches=tuple(batches))

    def complete_held(self) -> int:
        """Answer the held writes (applying them); how many there were."""
        held, self._held = self._held, []
        for write, callback in held:
            callback(self._apply(write))
        return len(held)

    def fail_held(self, error: ErrorCode) -> int:
        """Answer the held writes with ``error`` (none is applied); how many there were."""
        held, self._held = self._held, []
        for _write, callback in held:
            callback(error)
        return len(held)

    @property
    def held(self) -> int:
        return len(self._held)

    def state(self, key: SharePartitionKey) -> PersisterReadResult | None:
        """What is stored for ``key`` (None: nothing)."""
        state = self._states.get(key)
        return None if state is None else state.read_result()

    def keys(self) -> Sequence[SharePartitionKey]:
        return list(self._states)
