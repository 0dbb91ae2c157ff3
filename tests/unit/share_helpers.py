"""Share-partition test helpers: a fake clock and a real timing wheel and persister, log
reads as FetchedBatch lists, and synchronous wrappers around the callback API."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tidegate.clock import MockClock
from tidegate.errors import ErrorCode
from tidegate.server.share import (
    AcquiredRecords,
    FetchedBatch,
    InMemoryPersister,
    PersisterStateBatch,
    ShareAcknowledgementBatch,
    ShareAcquiredRecords,
    ShareAcquireMode,
    ShareFetchRead,
    SharePartition,
    SharePartitionKey,
    SharePartitionState,
    ShareResult,
)
from tidegate.server.timer import SystemTimer

GROUP_ID = "test-group"
TOPIC_ID = uuid.UUID("5f6e2b1a-0000-4000-8000-000000000001")
MEMBER_ID = "member-1"
MAX_DELIVERY_COUNT = 5
MAX_IN_FLIGHT_RECORDS = 200
ACQUISITION_LOCK_TIMEOUT_MS = 100
BATCH_SIZE = 500
MAX_FETCH_RECORDS = 500
KEY = SharePartitionKey(GROUP_ID, TOPIC_ID, 0)


class Env:
    """A MockClock, a SystemTimer on it (tick 1 ms, as the purgatories), an
    InMemoryPersister, and a count of listener calls."""

    def __init__(self) -> None:
        self.clock = MockClock()
        self.timer = SystemTimer(clock=self.clock)
        self.persister = InMemoryPersister()
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def partition(
        self,
        *,
        active: bool = True,
        max_in_flight_records: int = MAX_IN_FLIGHT_RECORDS,
        max_delivery_count: int = MAX_DELIVERY_COUNT,
        lock_ms: int | object = 30_000,
        persister: object | None = None,
    ) -> SharePartition:
        """A share-partition; ``active`` ones start at offset 0 with an initialized
        persisted state (Kafka's tests' ``withState(ACTIVE)``)."""
        if active and self.persister.state(KEY) is None:
            self.persister.initialize(KEY, 0, 0, lambda _e: None)
        return SharePartition(
            GROUP_ID, TOPIC_ID, 0,
            timer=self.timer,
            persister=persister or self.persister,  # type: ignore[arg-type]
            max_in_flight_records=max_in_flight_records,
            max_delivery_count=max_delivery_count,
            record_lock_duration_ms=lock_ms,  # type: ignore[arg-type]
            listener=self.wake,
            state=SharePartitionState.ACTIVE if active else SharePartitionState.EMPTY,
        )

    def loaded(self, start: int, batches: Sequence[tuple[int, int, int, int]], *, state_epoch: int = 3,
               **kw) -> SharePartition:
        """A share-partition loaded from a persisted state (start offset, state batches)."""
        self.persister.put(KEY, state_epoch, start, [PersisterStateBatch(*b) for b in batches])
        sp = self.partition(active=False, **kw)
        result = initialize(sp)
        assert result == ShareResult(), result
        return sp

    def advance(self, ms: int) -> None:
        """Move the fake clock and let the timer expire what is due (the reaper's job)."""
        self.clock.advance(ms)
        self.timer.advance_clock()


def initialize(sp: SharePartition, **kw) -> ShareResult | None:
    out: list[ShareResult] = []
    kw.setdefault("wall_clock_ms", sp.timer.clock.wall_milliseconds())
    sp.maybe_initialize(out.append, **kw)
    return out[0] if out else None


def read(*batches: tuple[int, int] | FetchedBatch, aborted=None) -> ShareFetchRead:
    """A log read of batches given as (base offset, record count)."""
    fetched = [b if isinstance(b, FetchedBatch) else FetchedBatch(b[0], b[0] + b[1] - 1) for b in batches]
    return ShareFetchRead(fetched, aborted)


def records(start: int, count: int) -> ShareFetchRead:
    """One log batch of ``count`` records from ``start`` (Kafka's ``memoryRecords``)."""
    return read((start, count))


def acquire(
    sp: SharePartition,
    fetched: ShareFetchRead,
    expected_count: int | None = None,
    *,
    member: str = MEMBER_ID,
    max_records: int = MAX_FETCH_RECORDS,
    batch_size: int = BATCH_SIZE,
    fetch_offset: int | None = None,
    mode: ShareAcquireMode = ShareAcquireMode.BATCH_OPTIMIZED,
    read_committed: bool = False,
) -> list[AcquiredRecords]:
    """Kafka's ``fetchAcquiredRecords``: acquire (fetching from the read's first batch by
    default) and check how many offsets were taken."""
    if fetch_offset is None:
        fetch_offset = fetched.batches[0].base_offset
    result: ShareAcquiredRecords = sp.acquire(
        member, fetched, fetch_offset=fetch_offset, max_records=max_records, batch_size=batch_size,
        mode=mode, read_committed=read_committed,
    )
    if expected_count is not None:
        assert result.count == expected_count, (result.count, result.records)
    return result.records


def ack(sp: SharePartition, *batches: tuple[int, int, int | tuple[int, ...]], member: str = MEMBER_ID
        ) -> ShareResult | None:
    """Acknowledge (first, last, type or types); the result, or None while the write waits."""
    out: list[ShareResult] = []
    sp.acknowledge(member, [ShareAcknowledgementBatch(f, l, t if isinstance(t, tuple) else (t,))
                            for f, l, t in batches], out.append)
    return out[0] if out else None


def release(sp: SharePartition, member: str = MEMBER_ID) -> ShareResult | None:
    out: list[ShareResult] = []
    sp.release_acquired_records(member, out.append)
    return out[0] if out else None


def ranges(*triples: tuple[int, int, int]) -> list[AcquiredRecords]:
    return [AcquiredRecords(*t) for t in triples]


def offset_states(sp: SharePartition, first: int) -> dict[int, tuple[str, int, str]]:
    """offset -> (state name, delivery count, member) of the split batch at ``first``."""
    batch = sp.batch_at(first)
    assert batch is not None and batch.offsets is not None
    return {o: (batch.record_state(o).name, batch.delivery_count(o), batch.member_id(o))
            for o in range(batch.first, batch.last + 1)}


def error(result: ShareResult | None) -> ErrorCode | None:
    return None if result is None else result.error
