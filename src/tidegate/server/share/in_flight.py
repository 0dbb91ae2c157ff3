"""The in-flight state of a share-partition (Kafka's ``InFlightBatch``, ``InFlightState``,
``AcquisitionLockTimerTask``), laid out for memory.

A cached range is an :class:`InFlightBatch`: one state, delivery count and owner for the
whole range while it moves as a unit (acquired whole, acknowledged whole, expired
whole). The batch *is* its acquisition lock, and its own timer entry: a
:class:`~tidegate.server.timer.SelfTimedTask` that the share-partition schedules on its
timing wheel on acquisition and cancels on acknowledgement, so a batch in flight costs
one object of eleven slots (about 120 bytes) and nothing else in the timer but the
expiration's int, shared by the locks taken in the same millisecond.

When a range stops moving as a unit (part of it acknowledged, a subset acquired, the
start offset moving inside it, ``record_limit`` acquiring part of a log batch) it is
*split*: :class:`OffsetStates` keeps one state byte, one count byte and one owner
reference per offset (about 10 bytes an offset, against Kafka's object and timer task
per offset). The offsets that were acquired under the batch's lock when it split stay
under it (:data:`SHARED_LOCK`; the batch's timer entry keeps running with the same
deadline, Kafka re-arms one task per offset for the remaining time): only an offset
acquired or renewed on its own afterwards gets an :class:`OffsetLock` of its own.

A state is a small int: the :class:`RecordState` in the low bits, plus flags for an
acknowledgement or release waiting for its write (:data:`TRANSITION`; the previous
state is kept by the share-partition with the write), a lock that expired meanwhile
(:data:`EXPIRED`) and a record archived meanwhile (:data:`TERMINAL`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from tidegate.server.timer import SelfTimedTask, TimerTask

if TYPE_CHECKING:
    from .share_partition import SharePartition

__all__ = [
    "EMPTY_MEMBER_ID",
    "EXPIRED",
    "SHARED_LOCK",
    "STATE_MASK",
    "TERMINAL",
    "TRANSITION",
    "InFlightBatch",
    "OffsetLock",
    "OffsetStates",
    "RecordState",
]

#: The owner of a record nobody holds (Kafka 4.2's ``EMPTY_MEMBER_ID``).
EMPTY_MEMBER_ID = ""


class RecordState(enum.IntEnum):
    """A record's delivery state; the values are the persisted ids (ACQUIRED is never
    persisted)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED


STATE_MASK = 0x07
#: an acknowledgement or release waits for its write (Kafka's ongoing state transition)
TRANSITION = 0x08
#: the acquisition lock expired while the transition waited: a failed write makes the
#: record AVAILABLE (or ARCHIVED), not ACQUIRED again
EXPIRED = 0x10
#: archived while the transition waited (log start movement, aborted transaction): the
#: record stays ARCHIVED whatever the write's outcome
TERMINAL = 0x20
#: a split batch's offset still held under the batch's own lock (its timer entry)
SHARED_LOCK = 0x40

_AVAILABLE = int(RecordState.AVAILABLE)
_ACQUIRED = int(RecordState.ACQUIRED)


class OffsetStates:
    """The per-offset state of a split :class:`InFlightBatch`: ``states`` and ``counts``
    (one byte per offset, index = offset - first offset), ``members`` (the owner of each),
    ``locks`` (the offsets acquired on their own since the split: index ->
    :class:`OffsetLock`) and ``shared`` (how many offsets still hold the batch's lock)."""

    __slots__ = ("counts", "locks", "members", "shared", "states")

    def __init__(self, size: int, state: int, count: int, member: str) -> None:
        self.states = bytearray((state,)) * size
        self.counts = bytearray((min(count, 255),)) * size
        self.members = [member] * size
        self.locks: dict[int, OffsetLock] = {}
        self.shared = 0

    def __len__(self) -> int:
        return len(self.states)


class InFlightBatch(SelfTimedTask):
    """A cached range ``first..last`` with one state, or per-offset state once split
    (``offsets``). As a timed task it is the range's acquisition lock: ``run`` is the
    lock expiring."""

    __slots__ = ("count", "first", "last", "member", "offsets", "owner", "state")

    def __init__(self, owner: SharePartition, first: int, last: int, state: int, count: int,
                 member: str = EMPTY_MEMBER_ID) -> None:
        SelfTimedTask.__init__(self)
        self.owner = owner
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.offsets: OffsetStates | None = None

    def run(self) -> None:
        if self.expire():  # not acknowledged, nor locked again, since this expiry was queued
            self.owner._batch_lock_expired(self)

    @property
    def locked(self) -> bool:
        """The batch's lock is pending (acquired and neither acknowledged nor expired)."""
        return self.expiration_ms >= 0

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def split(self) -> OffsetStates:
        """Keep state per offset from now on (Kafka's ``maybeInitializeOffsetStateUpdate``):
        every offset starts with the batch's state, count and owner; under a pending lock
        they hold it (:data:`SHARED_LOCK`)."""
        offsets = self.offsets
        if offsets is None:
            state = self.state
            if self.expiration_ms >= 0 and (state & STATE_MASK == _ACQUIRED or state & TRANSITION):
                state |= SHARED_LOCK
                offsets = OffsetStates(self.size, state, self.count, self.member)
                offsets.shared = self.size
            else:
                offsets = OffsetStates(self.size, state, self.count, self.member)
            self.offsets = offsets
        return offsets

    def split_acquired_prefix(self, last_acquired: int) -> OffsetStates:
        """``record_limit`` acquisition of a new batch: ``first..last_acquired`` is
        ACQUIRED by the batch's owner under its lock, the rest AVAILABLE and never
        delivered (count one less, Kafka's ``maybeInitializeOffsetStateUpdate(target)``)."""
        acquired = last_acquired - self.first + 1
        offsets = OffsetStates(self.size, _AVAILABLE, max(self.count - 1, 0), EMPTY_MEMBER_ID)
        offsets.states[:acquired] = bytes((_ACQUIRED | SHARED_LOCK,)) * acquired
        offsets.counts[:acquired] = bytes((min(self.count, 255),)) * acquired
        offsets.members[:acquired] = [self.member] * acquired
        offsets.shared = acquired
        self.offsets = offsets
        return offsets

    def state_at(self, offset: int | None = None) -> tuple[int, int, str]:
        """(state with its flags, delivery count, owner) of the batch, or of one of its
        offsets once it is split (then ``offset`` is required)."""
        offsets = self.offsets
        if offsets is None:
            return self.state, self.count, self.member
        if offset is None:
            raise ValueError("the batch keeps per-offset state")
        i = offset - self.first
        return offsets.states[i], offsets.counts[i], offsets.members[i]

    def record_state(self, offset: int | None = None) -> RecordState:
        return RecordState(self.state_at(offset)[0] & STATE_MASK)

    def delivery_count(self, offset: int | None = None) -> int:
        return self.state_at(offset)[1]

    def member_id(self, offset: int | None = None) -> str:
        return self.state_at(offset)[2]

    def in_transition(self, offset: int | None = None) -> bool:
        return bool(self.state_at(offset)[0] & TRANSITION)

    def __repr__(self) -> str:
        if self.offsets is None:
            return (f"InFlightBatch({self.first}-{self.last}, {RecordState(self.state & STATE_MASK).name}, "
                    f"count={self.count}, member={self.member!r}, flags={self.state & ~STATE_MASK:#x})")
        return f"InFlightBatch({self.first}-{self.last}, per-offset)"


class OffsetLock(TimerTask):
    """The acquisition lock of one offset of a split batch (acquired or renewed on its
    own); ``run`` is its expiry."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: InFlightBatch, index: int, delay_ms: int) -> None:
        self._entry = None
        self.delay_ms = delay_ms
        self.batch = batch
        self.index = index

    def run(self) -> None:
        entry = self._entry
        if entry is None or entry.list is not None:
            return  # cancelled, or added again, since this expiry was queued
        self._entry = None
        batch = self.batch
        batch.owner._offset_lock_expired(batch, self)
