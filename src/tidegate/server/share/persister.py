"""Durable share-partition state (KIP-932): what must survive a restart, and the interface
that stores it (Kafka's ``org.apache.kafka.server.share.persister``).

A share-partition persists its *start offset* (SPSO: everything below is done), its
*state epoch* and the in-flight ranges whose outcome must not be lost: state batches of
``(first offset, last offset, delivery state, delivery count)`` with the delivery state
AVAILABLE 0, ACKNOWLEDGED 2 or ARCHIVED 4 (ACQUIRED 1 is never persisted: a lock does not
survive a restart, the record comes back AVAILABLE with its last persisted count).
Kafka keeps this in ``__share_group_state`` as ShareSnapshot and ShareUpdate records
through the share coordinator; here the :class:`Persister` protocol is the seam, and
:class:`InMemoryPersister` the implementation the unit tests use. The on-disk one,
through the ReplicaManager, comes later and reuses :func:`combine_state_batches`.

Every call answers through a callback, now or later (a write is asynchronous in Kafka:
an acknowledgement completes only when its write succeeded, reference 2.5 and 2.9).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tidegate.errors import ErrorCode

__all__ = [
    "UNINITIALIZED_START_OFFSET",
    "InMemoryPersister",
    "Persister",
    "PersisterReadResult",
    "PersisterStateBatch",
    "PersisterWrite",
    "SharePartitionKey",
    "combine_state_batches",
]

#: Kafka's ``PartitionFactory.UNINITIALIZED_START_OFFSET``: no start offset yet, the
#: share-partition applies ``share.auto.offset.reset`` when it loads.
UNINITIALIZED_START_OFFSET = -1


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
    An acknowledgement's response waits until this write succeeded."""

    key: SharePartitionKey
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[PersisterStateBatch, ...]


@dataclass(frozen=True, slots=True)
class PersisterReadResult:
    """A read's answer (Kafka's ReadShareGroupState partition result). ``start_offset``
    is :data:`UNINITIALIZED_START_OFFSET` for a share-partition initialized without one."""

    error: ErrorCode = ErrorCode.none
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[PersisterStateBatch, ...] = ()
    error_message: str | None = None


WriteCallback = Callable[[ErrorCode], None]
ReadCallback = Callable[[PersisterReadResult], None]


class Persister(Protocol):
    """Kafka's ``Persister``: initialize, read, write and delete a share-partition's state.
    Each answers through its callback, at once or later."""

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   callback: WriteCallback) -> None: ...

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None: ...

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


@dataclass(slots=True)
class _StoredState:
    state_epoch: int
    start_offset: int
    leader_epoch: int = -1
    batches: list[PersisterStateBatch] = field(default_factory=list)


class InMemoryPersister:
    """A :class:`Persister` in a dict, with the share coordinator's checks (Kafka's
    ``ShareCoordinatorShard``): reading or writing an uninitialized share-partition is
    INVALID_REQUEST, a lower leader epoch FENCED_LEADER_EPOCH, a lower state epoch
    FENCED_STATE_EPOCH. A state kept here survives a new :class:`SharePartition` (a
    broker restart in a unit test).

    For tests of the write path: ``fail_writes`` answers every write with that error
    (nothing stored); ``hold_writes`` keeps writes pending until :meth:`complete_held`
    (or :meth:`fail_held`) answers them, in order. ``writes`` lists every write asked.
    """

    def __init__(self) -> None:
        self._states: dict[SharePartitionKey, _StoredState] = {}
        self.writes: list[PersisterWrite] = []
        self.fail_writes: ErrorCode | None = None
        self.hold_writes = False
        self._held: list[tuple[PersisterWrite, WriteCallback]] = []

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   callback: WriteCallback) -> None:
        self._states[key] = _StoredState(state_epoch, start_offset)
        callback(ErrorCode.none)

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None:
        state = self._states.get(key)
        if state is None:
            callback(PersisterReadResult(ErrorCode.invalid_request,
                                         error_message="Read operation on uninitialized share partition not allowed."))
            return
        if leader_epoch < state.leader_epoch:
            callback(PersisterReadResult(ErrorCode.fenced_leader_epoch))
            return
        state.leader_epoch = leader_epoch
        callback(PersisterReadResult(ErrorCode.none, state.state_epoch, state.start_offset, tuple(state.batches)))

    def write(self, write: PersisterWrite, callback: WriteCallback) -> None:
        self.writes.append(write)
        if self.hold_writes:
            self._held.append((write, callback))
            return
        callback(self._apply(write))

    def delete(self, key: SharePartitionKey, callback: WriteCallback) -> None:
        self._states.pop(key, None)
        callback(ErrorCode.none)

    def _apply(self, write: PersisterWrite) -> ErrorCode:
        if self.fail_writes is not None:
            return self.fail_writes
        state = self._states.get(write.key)
        if state is None:
            return ErrorCode.invalid_request
        if write.leader_epoch != -1 and write.leader_epoch < state.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if write.state_epoch != -1 and write.state_epoch < state.state_epoch:
            return ErrorCode.fenced_state_epoch
        if write.start_offset != UNINITIALIZED_START_OFFSET:
            state.start_offset = write.start_offset
        if write.leader_epoch != -1:
            state.leader_epoch = write.leader_epoch
        state.batches = combine_state_batches(state.batches, write.state_batches, state.start_offset)
        return ErrorCode.none

    def put(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
            batches: Sequence[PersisterStateBatch] = ()) -> None:
        """Store a state as the share coordinator would hold it (tests of a load)."""
        self._states[key] = _StoredState(state_epoch, start_offset, batches=list(batches))

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
        if state is None:
            return None
        return PersisterReadResult(ErrorCode.none, state.state_epoch, state.start_offset, tuple(state.batches))

    def keys(self) -> Sequence[SharePartitionKey]:
        return list(self._states)
