"""One share-partition (KIP-932): Kafka's ``kafka.server.share.SharePartition``, sans-IO.

A share-partition is (group, topic id, partition). It keeps the records *in flight*
between the share-partition start offset (SPSO, :attr:`SharePartition.start_offset`:
everything below is done) and the end offset (SPEO, the last offset fetched into the
cache), each AVAILABLE, ACQUIRED by one member under a time-limited lock, ACKNOWLEDGED
or ARCHIVED, with its delivery count. It does not read the log: the caller reads (from
:meth:`~SharePartition.next_fetch_offset`) and hands over what the read returned as a
:class:`ShareFetchRead` (batch boundaries, producer ids and flags, the aborted
transactions of a ``read_committed`` read), and gets back the ranges this member now
holds (:class:`AcquiredRecords`, the response's ``AcquiredRecords``).

* **Acquisition** (:meth:`~SharePartition.acquire`): whole log batches in
  ``batch_optimized`` mode (``MaxRecords`` is met at batch boundaries, new ranges split
  into ``BatchSize`` pieces at batch boundaries), exactly ``MaxRecords`` offsets in
  ``record_limit`` mode; bounded by ``group.share.partition.max.record.locks``; records
  near their delivery limit throttled (from delivery count ``max(2, ceil(limit/2))``
  on, the number taken per fetch halves with each attempt, and a record on its last
  attempt goes alone); aborted transactional batches archived under ``read_committed``.
* **Locks** on the timing wheel given at construction: a batch (or an offset of a split
  batch) is its own :class:`~tidegate.server.timer.TimerTask`; the lock duration is read
  at acquisition; expiry makes the records AVAILABLE, or ARCHIVED at the delivery limit
  or below the SPSO, writes that (best effort) and calls ``listener``.
* **Acknowledgement** (:meth:`~SharePartition.acknowledge`) and **release** of a
  member's records (:meth:`~SharePartition.release_acquired_records`): all batches of
  a request as one unit, any error rolls all of it back; the new states go to the
  :class:`~tidegate.server.share.persister.Persister` as one
  :class:`~tidegate.server.share.persister.PersisterWrite`, and the callback fires only
  when the write succeeded (a failed write rolls back to ACQUIRED, unless the lock
  expired meanwhile). Then the SPSO moves over the terminal prefix. RELEASE never lowers
  a delivery count; RENEW re-arms the lock.
* **Log start movement** (:meth:`~SharePartition.update_cache_and_offsets`) archives
  AVAILABLE records below the new log start offset.
* **Load** (:meth:`~SharePartition.maybe_initialize`): the persisted state, with
  ``share.auto.offset.reset`` for a share-partition without a start offset, and the
  "gap window" of offsets between persisted batches that were never persisted (acquired
  when the broker stopped): they are fetched again and hold the SPSO back.

SharePartitionMetrics (their series: :class:`~tidegate.metrics.collectors.ShareGroupCollector`):
the in-flight gauges, ``AcquisitionLockTimeoutPerSec`` (:attr:`~SharePartition.lock_timeouts`),
``InFlightBatchMessageCount`` (the records of each batch put in the cache, by an
acquisition of new records or by a load, as Kafka records it), ``FetchLockTimeMs`` and
``FetchLockRatio`` (see :meth:`~SharePartition.release_fetch_lock`).

Single-threaded (one event loop): Kafka's read/write lock is not needed; a callback of
the persister or the timer may run inside a call here or later. Time comes from the
timer's clock (locks) and from the caller (``wall_clock_ms``, a
:data:`~tidegate.clock.WallMs`, for ``by_duration``: record timestamps are wall-clock;
``now_ns`` of the fetch lock, :meth:`tidegate.clock.Clock.nanoseconds`).
"""

from __future__ import annotations

import enum
import math
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter
from typing import NamedTuple, Protocol

from tidegate.clock import WallMs
from tidegate.errors import ErrorCode
from tidegate.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tidegate.log.segment import TimestampAndOffset, iter_batch_headers
from tidegate.record.control_records import ControlRecordType, end_transaction_marker_of
from tidegate.record.file_region import FileRegion
from tidegate.record.record_batch import LOG_OVERHEAD, BatchHeader, iter_batches, read_header
from tidegate.server.timer import SystemTimer
from tidegate.utils.durations import parse_duration

from .acknowledgements import AcknowledgeType, ShareAcknowledgementBatch
from .in_flight import (
    EMPTY_MEMBER_ID,
    EXPIRED,
    SHARED_LOCK,
    STATE_MASK,
    TERMINAL,
    TRANSITION,
    InFlightBatch,
    OffsetLock,
    OffsetStates,
    RecordState,
)
from .metrics import BATCH_RECORDS_HISTOGRAM, RATIO_HISTOGRAM, TIME_HISTOGRAM
from .persister import (
    UNINITIALIZED_START_OFFSET,
    Persister,
    PersisterReadResult,
    PersisterStateBatch,
    PersisterWrite,
    SharePartitionKey,
)

__all__ = [
    "AcquiredRecords",
    "FetchedBatch",
    "ShareAcquireMode",
    "ShareAcquiredRecords",
    "ShareAutoOffsetReset",
    "ShareFetchRead",
    "SharePartition",
    "SharePartitionState",
    "ShareResult",
    "aborted_batches",
    "fetched_batch",
    "fetched_batches",
    "persister_error",
    "region_batches",
]

AVAILABLE = int(RecordState.AVAILABLE)
ACQUIRED = int(RecordState.ACQUIRED)
ACKNOWLEDGED = int(RecordState.ACKNOWLEDGED)
ARCHIVED = int(RecordState.ARCHIVED)

#: the state an acknowledge type moves a record to (RENEW moves none)
ACK_TYPE_STATE: dict[int, int] = {
    AcknowledgeType.GAP: ARCHIVED,
    AcknowledgeType.ACCEPT: ACKNOWLEDGED,
    AcknowledgeType.RELEASE: AVAILABLE,
    AcknowledgeType.REJECT: ARCHIVED,
}
_RENEW = int(AcknowledgeType.RENEW)
_MIN_THROTTLE_LIMIT = 2  # Kafka's MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT
#: byte translation: 1 for a settled terminal state (ACKNOWLEDGED or ARCHIVED, no flag)
_SETTLED_TERMINAL = bytes(1 if b in (ACKNOWLEDGED, ARCHIVED) else 0 for b in range(256))


#: (topic id, partition): how share fetching names a partition
TopicIdPartition = tuple[uuid.UUID, int]


class SharePartitionState(enum.Enum):
    """Kafka's ``SharePartitionState``: EMPTY until loaded, INITIALIZING while the
    persisted state is read, then ACTIVE, or FAILED; FENCED once its state epoch or
    leadership is lost."""

    EMPTY = "EMPTY"
    INITIALIZING = "INITIALIZING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    FENCED = "FENCED"


class ShareAcquireMode(enum.IntEnum):
    """ShareFetch v2 ``ShareAcquireMode`` (KIP-1206); v1 requests are batch_optimized."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


class FetchedBatch(NamedTuple):
    """What acquisition needs of one log batch a read returned: its offsets, producer id
    (-1: none), whether it is transactional, a control batch, and an ABORT marker (a
    control batch whose record's key is ABORT)."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False
    is_abort_marker: bool = False


class AbortedTransaction(Protocol):
    """An aborted transaction a ``read_committed`` read overlaps
    (:class:`tidegate.log.index.AbortedTxn` is one)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ShareFetchRead:
    """A log read handed to :meth:`SharePartition.acquire`: the batches in offset order,
    and for ``read_committed`` the aborted transactions they overlap."""

    batches: Sequence[FetchedBatch]
    aborted_transactions: Sequence[AbortedTransaction] | None = None


class AcquiredRecords(NamedTuple):
    """A range handed to a member (ShareFetch response ``AcquiredRecords``)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareAcquiredRecords:
    """The ranges one acquisition handed out, and how many offsets they hold."""

    records: list[AcquiredRecords]
    count: int


class ShareResult(NamedTuple):
    """The outcome of an acknowledgement, a release or a load: an error code (none on
    success) and the message a response carries with it."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None


OK = ShareResult()
ResultCallback = Callable[[ShareResult], None]


@dataclass(frozen=True, slots=True)
class ShareAutoOffsetReset:
    """``share.auto.offset.reset`` (Kafka's ``ShareGroupAutoOffsetResetStrategy``):
    ``earliest``, ``latest`` (the default) or ``by_duration`` (the first offset with a
    timestamp at or after now minus ``duration_ms``); :meth:`parse` reads the config
    value."""

    kind: str
    duration_ms: int = 0

    @classmethod
    def earliest(cls) -> ShareAutoOffsetReset:
        return cls("earliest")

    @classmethod
    def latest(cls) -> ShareAutoOffsetReset:
        return cls("latest")

    @classmethod
    def by_duration(cls, duration_ms: int) -> ShareAutoOffsetReset:
        return cls("by_duration", duration_ms)

    @classmethod
    def parse(cls, value: str) -> ShareAutoOffsetReset:
        """The config value (case-insensitive ``earliest``, ``latest``, or
        ``by_duration:`` and an ISO-8601 duration that is not negative); ValueError
        with Kafka's message otherwise."""
        lowered = value.strip().lower()
        if lowered in ("earliest", "latest"):
            return cls(lowered)
        prefix = "by_duration:"
        if not lowered.startswith(prefix):
            raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset. "
                             "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
        try:
            duration_ms = parse_duration(value.strip()[len(prefix):])
        except ValueError as exc:
            raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset: {exc}") from None
        if duration_ms < 0:
            raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset. "
                             "The duration must not be negative.")
        return cls.by_duration(duration_ms)

    def start_offset(self, offsets: OffsetsForTimestamp, wall_clock_ms: WallMs) -> int | None:
        if self.kind == "earliest":
            found = offsets.offset_for_timestamp(EARLIEST_TIMESTAMP)
        elif self.kind == "latest":
            found = offsets.offset_for_timestamp(LATEST_TIMESTAMP)
        else:
            found = offsets.offset_for_timestamp(max(wall_clock_ms - self.duration_ms, 0))
        return None if found is None else found.offset


class OffsetsForTimestamp(Protocol):
    """The ListOffsets lookup the reset uses (:meth:`tidegate.log.log.Log.offset_for_timestamp`:
    -2 earliest, -1 latest, else the first offset at or after a timestamp; None: none)."""

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None: ...


def fetched_batch(header: BatchHeader, batch: bytes | memoryview | None = None) -> FetchedBatch:
    """What acquisition needs of one log batch: its header's offsets and flags, and for a
    control batch (``batch``: its bytes) whether it is an ABORT marker."""
    abort = False
    if header.is_control and batch is not None:
        marker = end_transaction_marker_of(batch)
        abort = marker is not None and marker.type is ControlRecordType.ABORT
    return FetchedBatch(header.base_offset, header.last_offset, header.producer_id, header.is_transactional,
                        header.is_control, abort)


def fetched_batches(records: bytes | bytearray | memoryview,
                    spans: list[tuple[int, int]] | None = None) -> list[FetchedBatch]:
    """The :class:`FetchedBatch` of each batch in what a log read returned (whole batches,
    as :meth:`tidegate.log.log.Log.read` returns them); ``spans`` (if given) gets each
    batch's (position, size) in ``records``."""
    out: list[FetchedBatch] = []
    view = memoryview(records)
    for position, size in iter_batches(records):
        if spans is not None:
            spans.append((position, size))
        out.append(fetched_batch(read_header(records, position), view[position:position + size]))
    return out


def region_batches(region: FileRegion, last_needed: int, spans: list[tuple[int, int]], firsts: list[int],
                   cached_until: int = -1) -> list[FetchedBatch]:
    """:func:`fetched_batches` of a log read left in its file (a
    :class:`~tidegate.record.file_region.FileRegion`), reading only batch headers (and
    control batches whole), up to the batch holding ``last_needed``: a share fetch
    acquires a few hundred records, while the read may reach megabytes further.

    ``spans`` and ``firsts`` get every batch's (position in the region, size) and first
    offset. A batch wholly at or below ``cached_until`` (the share-partition's end offset)
    other than the first and the last is left out of the answer: acquiring cached
    records needs their state, not their batches (not for a ``read_committed``
    acquisition, which looks for aborted transactions, nor in a load's gap window)."""
    out: list[FetchedBatch] = []
    start = region.position
    skipped: tuple[int, tuple] | None = None
    for position, raw in iter_batch_headers(region.fd, "a share fetch's read", start, start + region.length):
        base, length = raw[0], raw[1]
        size = length + LOG_OVERHEAD
        spans.append((position - start, size))
        firsts.append(base)
        last = base + raw[6]
        if out and last <= cached_until and last < last_needed:
            skipped = position, raw
            continue
        out.append(_region_batch(region, position - start, size, raw))
        skipped = None
        if last >= last_needed:
            break
    if skipped is not None:
        position, raw = skipped
        out.append(_region_batch(region, position - start, raw[1] + LOG_OVERHEAD, raw))
    return out


def _region_batch(region: FileRegion, position: int, size: int, raw: tuple) -> FetchedBatch:
    header = BatchHeader._make(raw)
    return fetched_batch(header, region.read_at(position, size) if header.is_control else None)


def persister_error(code: ErrorCode) -> ErrorCode:
    """The error a client sees for a persister error (Kafka's ``fetchPersisterError``)."""
    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                ErrorCode.coordinator_load_in_progress):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition):
        return code
    if code in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
        return ErrorCode.not_leader_or_follower
    return ErrorCode.unknown_server_error


def aborted_batches(batches: Iterable[FetchedBatch], aborted: Iterable[AbortedTransaction]) -> list[FetchedBatch]:
    """The transactional batches of aborted transactions (Kafka's
    ``fetchAbortedTransactionRecordBatches``): a producer's batches from the first offset
    of one of its aborted transactions up to its ABORT marker."""
    pending = sorted(aborted, key=lambda t: t.first_offset)
    k = 0
    producers: set[int] = set()
    out: list[FetchedBatch] = []
    for batch in batches:
        if batch.producer_id < 0:
            continue
        while k < len(pending) and pending[k].first_offset <= batch.last_offset:
            producers.add(pending[k].producer_id)
            k += 1
        if batch.is_abort_marker:
            producers.discard(batch.producer_id)
        elif batch.is_transactional and batch.producer_id in producers:
            out.append(batch)
    return out


def _subtract(records: list[AcquiredRecords], removed: list[FetchedBatch]) -> list[AcquiredRecords]:
    """``records`` without the offsets of the (sorted, disjoint) ``removed`` batches."""
    out: list[AcquiredRecords] = []
    for first, last, count in records:
        for batch in removed:
            if batch.last_offset < first or batch.base_offset > last:
                continue
            if batch.base_offset > first:
                out.append(AcquiredRecords(first, batch.base_offset - 1, count))
            first = batch.last_offset + 1
            if first > last:
                break
        if first <= last:
            out.append(AcquiredRecords(first, last, count))
    return out


def _last_offset_of_batch_with(batches: Sequence[FetchedBatch], offset: int) -> int:
    """The last offset of the fetched batch holding ``offset``, else ``offset``."""
    holder = None
    for batch in batches:
        if offset < batch.base_offset:
            break
        holder = batch
    if holder is not None and offset <= holder.last_offset:
        return holder.last_offset
    return offset


def _append_state(out: list[PersisterStateBatch], first: int, last: int, state: int, count: int) -> None:
    """Append a state range, extending the previous one when it continues it."""
    if out:
        prev = out[-1]
        if prev.last_offset + 1 == first and prev.delivery_state == state and prev.delivery_count == count:
            out[-1] = prev._replace(last_offset=last)
            return
    out.append(PersisterStateBatch(first, last, state, count))


class _Cache:
    """The in-flight batches in offset order, bisected by first offset, with a head index,
    so removing the acknowledged prefix is O(1) amortized (compacted once the dropped
    prefix is as long as the rest). One list: a parallel list of first offsets would
    cost 8 bytes a batch, a batch per record in the worst case."""

    __slots__ = ("batches", "head")

    def __init__(self) -> None:
        self.batches: list[InFlightBatch] = []
        self.head = 0

    def __len__(self) -> int:
        return len(self.batches) - self.head

    def __bool__(self) -> bool:
        return len(self.batches) > self.head

    def __iter__(self) -> Iterator[InFlightBatch]:
        return islice(self.batches, self.head, None)

    def floor(self, offset: int) -> int:
        """Index of the last batch starting at or before ``offset``; -1 if none."""
        i = bisect_right(self.batches, offset, self.head, key=_FIRST) - 1
        return i if i >= self.head else -1

    def index_from(self, offset: int) -> int:
        """Index of the first batch starting at or after ``offset``."""
        return bisect_left(self.batches, offset, self.head, key=_FIRST)

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """Index range of the batches starting in ``lo..hi`` (both included)."""
        batches = self.batches
        return (bisect_left(batches, lo, self.head, key=_FIRST),
                bisect_right(batches, hi, self.head, key=_FIRST))  # fmt: skip

    def first(self) -> InFlightBatch:
        return self.batches[self.head]

    def last(self) -> InFlightBatch:
        return self.batches[-1]

    def insert(self, batch: InFlightBatch) -> None:
        batches = self.batches
        if len(batches) == self.head or batch.first > batches[-1].first:
            batches.append(batch)
            return
        batches.insert(bisect_left(batches, batch.first, self.head, key=_FIRST), batch)

    def drop_through(self, index: int) -> None:
        """Forget the batches up to ``index`` (included)."""
        self.head = index + 1
        if self.head >= 16 and self.head * 2 >= len(self.batches):
            del self.batches[: self.head]
            self.head = 0

    def clear(self) -> None:
        self.batches.clear()
        self.head = 0

    def get(self, first: int) -> InFlightBatch | None:
        i = self.floor(first)
        if i >= 0 and self.batches[i].first == first:
            return self.batches[i]
        return None


#: a cached batch's first offset (the cache's bisection key)
_FIRST = attrgetter("first")


class _GapWindow:
    """Kafka's ``GapWindow``: after a load with offsets between the persisted batches
    never persisted, the gaps from ``gap_start`` on are fetched again, as long as the end
    offset is still the load's ``end_offset``."""

    __slots__ = ("end_offset", "gap_start")

    def __init__(self, end_offset: int, gap_start: int) -> None:
        self.end_offset = end_offset
        self.gap_start = gap_start


class _Transitions:
    """The transitions of one acknowledgement or release waiting for their write: (batch,
    offset index or -1 for the whole batch, the owner before) and the state ranges to
    write. The state before is always ACQUIRED."""

    __slots__ = ("entries", "state_batches")

    def __init__(self) -> None:
        self.entries: list[tuple[InFlightBatch, int, str]] = []
        self.state_batches: list[PersisterStateBatch] = []


class SharePartition:
    """One share-partition's in-flight records, locks and durable state (see the module
    docstring). ``record_lock_duration_ms`` may be a callable (the group config, read at
    each acquisition); ``listener`` is called when records may have become acquirable
    (acknowledgement, release, lock expiry), where Kafka completes delayed share fetches.
    """

    def __init__(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        *,
        timer: SystemTimer,
        persister: Persister,
        max_in_flight_records: int = 2000,
        max_delivery_count: int = 5,
        record_lock_duration_ms: int | Callable[[], int] = 30_000,
        leader_epoch: int = 0,
        listener: Callable[[], object] | None = None,
        state: SharePartitionState = SharePartitionState.EMPTY,
    ) -> None:
        self.key = SharePartitionKey(group_id, topic_id, partition)
        self.timer = timer
        self.persister = persister
        self.max_in_flight_records = max_in_flight_records
        self.max_delivery_count = max_delivery_count
        self.throttle_limit = max(_MIN_THROTTLE_LIMIT, math.ceil(max_delivery_count / 2))
        if callable(record_lock_duration_ms):
            self._lock_duration: Callable[[], int] = record_lock_duration_ms
        else:
            duration = record_lock_duration_ms
            self._lock_duration = lambda: duration
        self.leader_epoch = leader_epoch
        self.listener = listener
        self.state = state
        self.state_epoch = 0
        #: SPSO: every offset below is acknowledged or archived
        self.start_offset = 0
        #: SPEO: the last offset fetched into the cache (== start_offset when it is empty)
        self.end_offset = 0
        self._cache = _Cache()
        self._find_next = False
        #: no cached offset below it is AVAILABLE (while ``_find_next``)
        self._find_hint = 0
        self._gap_window: _GapWindow | None = None
        self._fetch_lock: object | None = None
        #: when the fetch lock was taken and when it was last released (0: never), ns
        self._fetch_lock_taken_ns = 0
        self._fetch_lock_released_ns = 0
        #: records whose acquisition lock expired (SharePartitionMetrics
        #: AcquisitionLockTimeoutPerSec: each expiring lock counts the records it held)
        self.lock_timeouts = 0
        #: records handed out under a lock, and records archived because their delivery
        #: count reached the limit (tidegate's own counters: Kafka counts neither)
        self.records_acquired = 0
        self.delivery_limit_archived = 0
        #: SharePartitionMetrics InFlightBatchMessageCount: records per batch cached
        self.batch_message_count = BATCH_RECORDS_HISTOGRAM.empty_copy()
        #: SharePartitionMetrics FetchLockTimeMs (ns) and FetchLockRatio (percent)
        self.fetch_lock_time = TIME_HISTOGRAM.empty_copy()
        self.fetch_lock_ratio = RATIO_HISTOGRAM.empty_copy()

    # -- introspection ---------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self.key.group_id

    def cached_batches(self) -> list[InFlightBatch]:
        return list(self._cache)

    def batch_at(self, first_offset: int) -> InFlightBatch | None:
        """The cached batch starting at ``first_offset``, if any."""
        return self._cache.get(first_offset)

    def batch_of(self, offset: int) -> InFlightBatch | None:
        """The cached batch holding ``offset``, if any."""
        i = self._cache.floor(offset)
        if i >= 0 and self._cache.batches[i].last >= offset:
            return self._cache.batches[i]
        return None

    @property
    def in_flight_batches(self) -> int:
        """Cached batches (SharePartitionMetrics InFlightBatchCount)."""
        return len(self._cache)

    @property
    def in_flight_records(self) -> int:
        """SPEO - SPSO + 1 while anything is cached (what the in-flight bound limits)."""
        return self.end_offset - self.start_offset + 1 if self._cache else 0

    @property
    def acquired_records(self) -> int:
        """Records held under an acquisition lock now (ACQUIRED, or acknowledged with the
        share-state write still pending): what ``tidegate top`` shows as locks. Walks the
        cache: a metrics scrape's work, never the request path's."""
        n = 0
        for batch in self._cache.batches:
            offsets = batch.offsets
            if offsets is None:
                if batch.state & STATE_MASK == ACQUIRED or batch.state & TRANSITION:
                    n += batch.last - batch.first + 1
            else:
                n += sum(1 for state in offsets.states if state & STATE_MASK == ACQUIRED or state & TRANSITION)
        return n

    @property
    def cached_until(self) -> int:
        """The last offset of the cached range still in flight (SPEO while anything at or
        after the SPSO is cached); -1 when nothing is: a read past it finds new records."""
        cache = self._cache
        if not cache or self.start_offset > cache.last().last:
            return -1
        return self.end_offset

    @property
    def gap_window(self) -> tuple[int, int] | None:
        """(gap start, end offset) of the load's gap window, or None."""
        w = self._gap_window
        return None if w is None else (w.gap_start, w.end_offset)

    # -- fetching --------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next read starts: the first AVAILABLE cached offset (or acquirable
        gap) when records were released, else the offset after SPEO.

        The search starts at the lowest offset made AVAILABLE since the last search
        found none before it (``_find_hint``), not at the cache's head: with thousands of
        batches in flight and records expiring at the front while members take them, a
        scan from the head would walk every batch taken since (the gap window of a load
        is the exception: it is searched from the head)."""
        cache = self._cache
        empty_or_passed = not cache or self.start_offset > cache.last().last
        if not self._find_next:
            return self.end_offset if empty_or_passed else self.end_offset + 1
        if empty_or_passed:
            self._find_next = False
            return self.end_offset
        window = self._gap_window if self._gap_window_active() else None
        gap_start = window.gap_start if window is not None else -1
        start = cache.head if window is not None else max(cache.floor(self._find_hint), cache.head)
        for batch in islice(cache.batches, start, None):
            if window is not None:
                if batch.first > gap_start:
                    return gap_start
                gap_start = max(batch.last + 1, gap_start)
            offsets = batch.offsets
            if offsets is None:
                if batch.state == AVAILABLE:
                    self._find_hint = batch.first
                    return batch.first
            else:
                k = offsets.states.find(AVAILABLE)
                if k >= 0:
                    self._find_hint = batch.first + k
                    return batch.first + k
        self._find_next = False
        return self.end_offset + 1

    def cached_available(self, fetch_offset: int, max_records: int) -> tuple[int, int]:
        """(last offset, count) of the AVAILABLE cached records from ``fetch_offset`` an
        acquisition of ``max_records`` would reach: the last offset of the batch where the
        count reaches ``max_records`` (or the last AVAILABLE one), and how many there are up
        to it; (-1, 0) if none. What a read for that acquisition must cover of the cache."""
        cache = self._cache
        last = -1
        count = 0
        for batch in islice(cache.batches, max(cache.floor(fetch_offset), cache.head), None):
            offsets = batch.offsets
            if offsets is None:
                if batch.state == AVAILABLE and batch.last >= fetch_offset:
                    count += batch.last - max(batch.first, fetch_offset) + 1
                    last = batch.last
            else:
                start = max(fetch_offset - batch.first, 0)
                k = offsets.states.rfind(AVAILABLE, start)
                if k >= 0:
                    count += offsets.states.count(AVAILABLE, start)
                    last = batch.first + k
            if count >= max_records:
                break
        return last, count

    def _find_from(self, offset: int) -> None:
        """Records from ``offset`` on may be AVAILABLE (again): the next
        :meth:`next_fetch_offset` searches from there."""
        if not self._find_next or offset < self._find_hint:
            self._find_hint = offset
        self._find_next = True

    def can_acquire_records(self) -> bool:
        """Records released for redelivery, or room under the in-flight bound."""
        if self.next_fetch_offset() != self.end_offset + 1:
            return True
        return self.in_flight_records < self.max_in_flight_records

    def try_acquire_fetch_lock(self, owner: object, now_ns: int) -> bool:
        """One acquiring fetch at a time per share-partition (Kafka's fetch lock), taken
        at ``now_ns``."""
        if self._fetch_lock is not None:
            return False
        self._fetch_lock = owner
        self._fetch_lock_taken_ns = now_ns
        return True

    def release_fetch_lock(self, owner: object, now_ns: int) -> None:
        """Release the fetch lock at ``now_ns`` and record how long it was held
        (FetchLockTimeMs) and which part of the time since its previous release that was
        (FetchLockRatio, in percent: held / (held + free before it was taken); 100 the
        first time, or when both are 0), as Kafka's ``releaseFetchLock`` does.

        Kafka holds the lock across an asynchronous log read; tidegate takes it in
        :meth:`DelayedShareFetch.on_complete <.delayed_share_fetch.DelayedShareFetch.on_complete>`
        and releases it once the read and the acquisition are done, in the same call (the
        event loop runs nothing else meanwhile): what is timed is that read and
        acquisition. Times are ns, so a hold shorter than a millisecond is not 0: Kafka's
        special case for a hold of 0 ms (1 / the free ms) is not needed."""
        if self._fetch_lock is not owner:
            return
        self._fetch_lock = None
        held = now_ns - self._fetch_lock_taken_ns
        released = self._fetch_lock_released_ns
        total = now_ns - released if released else held  # held + free before it was taken
        self._fetch_lock_released_ns = now_ns
        ratio = int(held * (1.0 / total) * 100) if total else 100  # Kafka's double, truncated
        self.fetch_lock_time.observe(held)
        self.fetch_lock_ratio.observe(ratio)

    def acquire(
        self,
        member_id: str,
        read: ShareFetchRead,
        *,
        fetch_offset: int,
        max_records: int,
        batch_size: int = 500,
        mode: ShareAcquireMode = ShareAcquireMode.BATCH_OPTIMIZED,
        read_committed: bool = False,
    ) -> ShareAcquiredRecords:
        """Acquire for ``member_id`` what ``read`` (read from ``fetch_offset``) returned and
        is acquirable: new records, and cached ones that are AVAILABLE again."""
        batches = read.batches
        if self.state is not SharePartitionState.ACTIVE or max_records <= 0 or not batches:
            return ShareAcquiredRecords([], 0)
        last_fetched = batches[-1].last_offset
        if last_fetched < self.start_offset:
            return ShareAcquiredRecords([], 0)
        last_to_acquire, max_to_acquire = self._acquire_bounds(fetch_offset, max_records, last_fetched)
        if max_to_acquire <= 0:
            return ShareAcquiredRecords([], 0)
        record_limit = mode is ShareAcquireMode.RECORD_LIMIT
        first_base = base = batches[0].base_offset
        self._archive_stale_batches(fetch_offset, base)
        cache = self._cache
        i = cache.floor(base)
        if i >= 0 and cache.batches[i].last >= base:
            base = cache.batches[i].first  # work on the cached batch's boundaries
        else:
            # Kafka moves a base below the SPSO up to it only when nothing is cached
            # before it; also when the cached batches before it end earlier, so a record
            # below the SPSO (gone with the log start) is never handed out
            base = max(base, self.start_offset)
        lo, hi = cache.span(min(first_base, base), last_to_acquire)
        if lo == hi:
            acquired = self._acquire_new(member_id, batches, record_limit, base, last_to_acquire,
                                         batch_size, max_to_acquire)
        else:
            acquired = self._acquire_cached(member_id, batches, record_limit, base, last_to_acquire,
                                            batch_size, max_to_acquire, cache.batches[lo:hi])
        if read_committed and acquired.count and read.aborted_transactions:
            acquired = self._archive_aborted(batches, read.aborted_transactions, acquired)
        self.records_acquired += acquired.count
        return acquired

    def _acquire_bounds(self, fetch_offset: int, max_records: int, last_fetched: int) -> tuple[int, int]:
        """(last offset, number of records) this acquisition may take: within the
        in-flight bound, except records released inside the cached range."""
        max_to_acquire = min(max_records, self.max_in_flight_records - self.in_flight_records)
        last_to_acquire = last_fetched
        if max_to_acquire <= 0 and fetch_offset <= self.end_offset:
            max_to_acquire = min(max_records, self.end_offset - fetch_offset + 1)
            last_to_acquire = min(last_fetched, self.end_offset)
        return last_to_acquire, max_to_acquire

    def _acquire_cached(
        self, member_id: str, batches: Sequence[FetchedBatch], record_limit: bool, base: int,
        last_to_acquire: int, batch_size: int, max_to_acquire: int, entries: list[InFlightBatch],
    ) -> ShareAcquiredRecords:
        """The read overlaps cached batches: acquire the AVAILABLE ones (whole, or offset
        by offset), gaps of the load's gap window, and what lies after the cache."""
        first_base = batches[0].base_offset
        result: list[AcquiredRecords] = []
        acquired = 0
        gap_start = base
        for batch in entries:
            if acquired >= max_to_acquire:
                break
            if self._gap_window_active():
                if gap_start < batch.first:
                    new = self._acquire_new(member_id, batches, record_limit, gap_start, batch.first - 1,
                                            batch_size, max_to_acquire - acquired)
                    result.extend(new.records)
                    acquired += new.count
                gap_start = batch.last + 1
                if acquired >= max_to_acquire:
                    break
            remaining = max_to_acquire - acquired
            full = batch.first >= first_base and batch.last <= last_to_acquire
            throttle = self._should_throttle(batch, first_base, last_to_acquire)
            if throttle and acquired > 0:
                max_to_acquire = 0  # the throttled records go alone, next time
                break
            if not full or batch.offsets is not None or throttle or (record_limit and batch.size > remaining):
                if batch.offsets is None:
                    if batch.state != AVAILABLE:
                        continue
                    batch.split()
                taken = self._acquire_offsets(member_id, record_limit, remaining, first_base, last_to_acquire,
                                              batch, result)
                acquired += taken
                if throttle and taken:
                    max_to_acquire = 0
                    break
                continue
            if batch.state != AVAILABLE:
                continue
            batch.state = ACQUIRED
            batch.count += 1
            batch.member = member_id
            self._lock(batch)
            result.append(AcquiredRecords(batch.first, batch.last, batch.count))
            acquired += batch.size
        if acquired < max_to_acquire and entries[-1].last < last_to_acquire:
            new = self._acquire_new(member_id, batches, record_limit, entries[-1].last + 1, last_to_acquire,
                                    batch_size, max_to_acquire - acquired)
            result.extend(new.records)
            acquired += new.count
        if result:
            self._shrink_gap_window(result[-1].last_offset + 1)
        return ShareAcquiredRecords(result, acquired)

    def _acquire_new(
        self, member_id: str, batches: Sequence[FetchedBatch], record_limit: bool, first: int, last: int,
        batch_size: int, max_records: int,
    ) -> ShareAcquiredRecords:
        """Acquire ``first..last`` (not cached yet), at most ``max_records`` of it, at a
        batch boundary (Kafka's ``acquireNewBatchRecords``)."""
        cache = self._cache
        if not cache and self.end_offset > first:
            first = self.end_offset
        last_acquired = last
        if max_records < last_acquired - first + 1:
            last_acquired = _last_offset_of_batch_with(batches, first + max_records - 1)
            if self._gap_window_active() and last_acquired > last:
                last_acquired = last
        records = self._create_batches(member_id, batches, record_limit, max_records, first, last_acquired, batch_size)
        if cache.batches[cache.head].first == first:
            self.start_offset = first
        self.end_offset = max(self.end_offset, last_acquired)
        if record_limit:
            last_acquired = records[0].last_offset
        self._shrink_gap_window(last_acquired + 1)
        return ShareAcquiredRecords(records, last_acquired - first + 1)

    def _create_batches(
        self, member_id: str, batches: Sequence[FetchedBatch], record_limit: bool, max_records: int,
        first: int, last: int, batch_size: int,
    ) -> list[AcquiredRecords]:
        """Cache ``first..last`` as ACQUIRED batches: cut into ``batch_size`` pieces at log
        batch boundaries (batch_optimized), or one range of which only ``max_records``
        offsets are taken (record_limit)."""
        ranges: list[tuple[int, int]] = []
        current = first
        if not record_limit and last - first + 1 > batch_size:
            for fetched in batches:
                fetched_base = fetched.base_offset
                if fetched_base > last:
                    break
                if fetched_base - current >= batch_size:
                    ranges.append((current, fetched_base - 1))
                    current = fetched_base
        ranges.append((current, last))
        if record_limit and last - current + 1 > max_records:
            batch = InFlightBatch(self, current, last, ACQUIRED, 1, member_id)
            target = current + max_records - 1
            batch.split_acquired_prefix(target)
            self._lock(batch)  # the lock of first..target: their SHARED_LOCK
            self._find_from(target + 1)
            self._cache.insert(batch)
            self.batch_message_count.observe(last - current + 1)
            return [AcquiredRecords(current, target, 1)]
        out = []
        observe = self.batch_message_count.observe
        for lo, hi in ranges:
            if hi == lo:
                hi = lo  # one int object for both ends of a one-record batch (32 bytes)
            batch = InFlightBatch(self, lo, hi, ACQUIRED, 1, member_id)
            self._lock(batch)
            self._cache.insert(batch)
            observe(hi - lo + 1)
            out.append(AcquiredRecords(lo, hi, 1))
        return out

    def _acquire_offsets(
        self, member_id: str, record_limit: bool, max_records: int, request_first: int, request_last: int,
        batch: InFlightBatch, result: list[AcquiredRecords],
    ) -> int:
        """Acquire the AVAILABLE offsets of a split batch inside the request, with the
        delivery throttling of reference 2.7 (Kafka's ``acquireSubsetBatchRecords``)."""
        offsets = batch.offsets
        assert offsets is not None
        states, counts, members = offsets.states, offsets.counts, offsets.members
        limit = self.max_delivery_count
        throttle_limit = self.throttle_limit
        first = batch.first
        taken: list[AcquiredRecords] = []
        acquired = 0
        throttled_max = 0
        for offset in range(max(request_first, first), min(request_last, batch.last) + 1):
            i = offset - first
            if states[i] != AVAILABLE:
                continue
            count = counts[i]
            if limit > 2 and count == limit - 1 and acquired:
                break  # a record on its last attempt goes alone
            if count >= throttle_limit and not throttled_max:
                throttled_max = max(1, len(states) >> (count - throttle_limit + 1))
            count += 1
            states[i] = ACQUIRED
            counts[i] = min(count, 255)
            members[i] = member_id
            self._lock_offset(batch, offsets, i)
            if taken and taken[-1].last_offset + 1 == offset and taken[-1].delivery_count == count:
                taken[-1] = taken[-1]._replace(last_offset=offset)
            else:
                taken.append(AcquiredRecords(offset, offset, count))
            acquired += 1
            if (count == limit and limit > 2) or (record_limit and acquired == max_records) \
                    or acquired == throttled_max:
                break
        result.extend(taken)
        return acquired

    def _should_throttle(self, batch: InFlightBatch, request_first: int, request_last: int) -> bool:
        """An AVAILABLE record of ``batch`` inside the request has reached the throttle
        delivery count."""
        offsets = batch.offsets
        if offsets is None:
            return batch.state == AVAILABLE and batch.count >= self.throttle_limit
        states, counts, first = offsets.states, offsets.counts, batch.first
        highest = 0
        for i in range(max(request_first, first) - first, min(request_last, batch.last) - first + 1):
            if states[i] == AVAILABLE and counts[i] > highest:
                highest = counts[i]
        return highest >= self.throttle_limit

    def _archive_aborted(self, batches: Sequence[FetchedBatch], aborted: Sequence[AbortedTransaction],
                         acquired: ShareAcquiredRecords) -> ShareAcquiredRecords:
        """read_committed: archive what this acquisition took of aborted transactional
        batches and drop them from the answer."""
        removed = aborted_batches(batches, aborted)
        if not removed:
            return acquired
        cache = self._cache
        for fetched in removed:
            i = cache.floor(fetched.base_offset)
            if i < 0:
                continue
            lo, hi = cache.span(cache.batches[i].first, fetched.last_offset)
            self._archive(fetched.base_offset, fetched.last_offset + 1, cache.batches[lo:hi], ACQUIRED)
        records = _subtract(acquired.records, removed)
        return ShareAcquiredRecords(records, sum(r.last_offset - r.first_offset + 1 for r in records))

    def _archive_stale_batches(self, fetch_offset: int, base: int) -> None:
        """Cached AVAILABLE records between the fetch offset and the first batch the read
        returned are gone from the log (compaction): archive them."""
        cache = self._cache
        if not cache or fetch_offset >= base:
            return
        floor_offset = fetch_offset
        i = cache.floor(fetch_offset)
        if i >= 0 and cache.batches[i].last >= fetch_offset:
            floor_offset = cache.batches[i].first
        lo = cache.index_from(floor_offset)
        hi = cache.index_from(base)
        if lo < hi and self._archive(fetch_offset, base, cache.batches[lo:hi], AVAILABLE):
            self._find_from(fetch_offset)

    # -- locks -----------------------------------------------------------------------

    def _lock(self, batch: InFlightBatch) -> None:
        """Start (or restart) the batch's acquisition lock, for the duration configured now."""
        self.timer.schedule(batch, max(1, self._lock_duration()))

    def _lock_offset(self, batch: InFlightBatch, offsets: OffsetStates, i: int) -> None:
        self._end_offset_lock(batch, offsets, i)
        lock = OffsetLock(batch, i, max(1, self._lock_duration()))
        offsets.locks[i] = lock
        self.timer.add(lock)

    @staticmethod
    def _end_offset_lock(batch: InFlightBatch, offsets: OffsetStates, i: int) -> None:
        """The offset holds no lock any more: leave the batch's shared lock (cancelled with
        its last holder) or cancel its own."""
        state = offsets.states[i]
        if state & SHARED_LOCK:
            offsets.states[i] = state & ~SHARED_LOCK
            offsets.shared -= 1
            if not offsets.shared:
                batch.cancel()
        else:
            lock = offsets.locks.pop(i, None)
            if lock is not None:
                lock.cancel()

    def _batch_lock_expired(self, batch: InFlightBatch) -> None:
        """The batch's lock expired: its ACQUIRED records (or, split, those holding its
        lock) become AVAILABLE, or ARCHIVED at the delivery limit or below the SPSO."""
        updates: list[PersisterStateBatch] = []
        offsets = batch.offsets
        if offsets is None:
            self.lock_timeouts += batch.last - batch.first + 1
            state = batch.state
            if state & TRANSITION:
                batch.state = state | EXPIRED  # a failed write will not make it ACQUIRED again
                return
            if state != ACQUIRED:
                return
            if batch.first < self.start_offset <= batch.last:
                offsets = batch.split()
                for i in range(len(offsets)):
                    self._expire_offset(batch, offsets, i, updates)
            else:
                new = ARCHIVED if batch.last < self.start_offset else self._released(batch.count, batch.size)
                batch.state = new
                batch.member = EMPTY_MEMBER_ID
                updates.append(PersisterStateBatch(batch.first, batch.last, new, batch.count))
                if new == AVAILABLE:
                    self._find_from(batch.first)
        else:
            states = offsets.states
            self.lock_timeouts += offsets.shared
            for i in range(len(states)):
                if states[i] & SHARED_LOCK:
                    states[i] &= ~SHARED_LOCK
                    self._expire_offset(batch, offsets, i, updates)
            offsets.shared = 0
        self._after_expiry(updates)

    def _offset_lock_expired(self, batch: InFlightBatch, lock: OffsetLock) -> None:
        offsets = batch.offsets
        if offsets is None or offsets.locks.get(lock.index) is not lock:
            return
        del offsets.locks[lock.index]
        self.lock_timeouts += 1
        updates: list[PersisterStateBatch] = []
        self._expire_offset(batch, offsets, lock.index, updates)
        self._after_expiry(updates)

    def _expire_offset(self, batch: InFlightBatch, offsets: OffsetStates, i: int,
                       updates: list[PersisterStateBatch]) -> None:
        state = offsets.states[i]
        if state & TRANSITION:
            offsets.states[i] = state | EXPIRED
            return
        if state != ACQUIRED:
            return
        offset = batch.first + i
        count = offsets.counts[i]
        new = ARCHIVED if offset < self.start_offset else self._released(count)
        offsets.states[i] = new
        offsets.members[i] = EMPTY_MEMBER_ID
        _append_state(updates, offset, offset, new, count)
        if new == AVAILABLE:
            self._find_from(offset)

    def _after_expiry(self, updates: list[PersisterStateBatch]) -> None:
        """Persist what expiry changed (best effort: the transitions stand whatever the
        write says), move the SPSO once written, wake parked fetches."""
        if not updates:
            return
        def written(_error: ErrorCode) -> None:
            self._maybe_advance_start()

        self.persister.write(self._write_of(updates), written)
        self._wake()

    def _released(self, count: int, records: int = 1) -> int:
        """AVAILABLE, or ARCHIVED once the delivery count reached the limit (``records``
        records released together: counted as archived at the limit)."""
        if count >= self.max_delivery_count:
            self.delivery_limit_archived += records
            return ARCHIVED
        return AVAILABLE

    # -- acknowledgement and release --------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[ShareAcknowledgementBatch],
                    callback: ResultCallback) -> None:
        """Apply ``member_id``'s acknowledgements of this partition, all or nothing;
        ``callback`` gets the outcome once the new states are written (at once when
        nothing needs writing, or on an error found before)."""
        pending = _Transitions()
        error: ShareResult | None = None
        for ack in batches:
            types = ack.acknowledge_types
            if not types or any(t < 0 or t > _RENEW for t in types):
                error = ShareResult(ErrorCode.invalid_request, f"Invalid acknowledge type: {list(types)}")
                break
            if ack.last_offset < self.start_offset:
                continue
            span = self._ack_span(ack)
            if isinstance(span, ShareResult):
                error = span
                break
            error = self._ack_range(member_id, ack, span, pending)
            if error is not None:
                break
        self._finish(pending, error, callback)

    def _ack_span(self, ack: ShareAcknowledgementBatch) -> list[InFlightBatch] | ShareResult:
        """The cached batches an acknowledgement batch covers (Kafka's
        ``fetchSubMapForAcknowledgementBatch``): before the cache is INVALID_RECORD_STATE,
        after it INVALID_REQUEST."""
        cache = self._cache
        i = cache.floor(ack.first_offset)
        if i < 0 and ack.first_offset < self.start_offset <= ack.last_offset:
            i = cache.floor(self.start_offset)
        if i < 0:
            return ShareResult(ErrorCode.invalid_record_state,
                               "Batch record not found. The request batch offsets are not found in the cache.")
        lo, hi = cache.span(cache.batches[i].first, ack.last_offset)
        last = cache.batches[hi - 1].last
        if last < ack.first_offset:
            return ShareResult(ErrorCode.invalid_request,
                               "Batch record not found. The first offset in request is past acquired records.")
        if ack.last_offset > last:
            return ShareResult(ErrorCode.invalid_request,
                               "Batch record not found. The last offset in request is past acquired records.")
        return cache.batches[lo:hi]

    def _ack_range(self, member_id: str, ack: ShareAcknowledgementBatch, entries: list[InFlightBatch],
                   pending: _Transitions) -> ShareResult | None:
        per_offset_types = len(ack.acknowledge_types) > 1
        for batch in entries:
            if batch.last < self.start_offset:
                continue
            if batch.offsets is None:
                if batch.member == EMPTY_MEMBER_ID:
                    return ShareResult(ErrorCode.invalid_record_state,
                                       "The batch cannot be acknowledged. The batch is not in the acquired state.")
                if batch.member != member_id:
                    return ShareResult(ErrorCode.invalid_record_state, "Member is not the owner of batch record")
                if batch.state & TRANSITION:
                    return ShareResult(ErrorCode.invalid_record_state, "The record state is invalid. "
                                       "The acknowledgement of delivery could not be completed.")
            full = batch.first >= ack.first_offset and batch.last <= ack.last_offset
            start_inside = batch.first < self.start_offset <= batch.last
            if not full or batch.offsets is not None or per_offset_types or start_inside:
                if batch.offsets is None:
                    if batch.state != ACQUIRED:
                        return ShareResult(ErrorCode.invalid_record_state, "The batch cannot be acknowledged. "
                                           "The subset batch is not in the acquired state.")
                    batch.split()
                error = self._ack_offsets(member_id, ack, batch, pending)
            else:
                error = self._ack_whole(ack.acknowledge_types[0], batch, pending)
            if error is not None:
                return error
        return None

    def _ack_whole(self, ack_type: int, batch: InFlightBatch, pending: _Transitions) -> ShareResult | None:
        if batch.state != ACQUIRED:
            return ShareResult(ErrorCode.invalid_record_state,
                               "The batch cannot be acknowledged. The batch is not in the acquired state.")
        if ack_type == _RENEW:
            self._lock(batch)
            return None
        new = ACK_TYPE_STATE[ack_type]
        if new == AVAILABLE:
            new = self._released(batch.count, batch.size)
        self._start_transition(batch, new, pending)
        return None

    def _ack_offsets(self, member_id: str, ack: ShareAcknowledgementBatch, batch: InFlightBatch,
                     pending: _Transitions) -> ShareResult | None:
        offsets = batch.offsets
        assert offsets is not None
        states, counts, members = offsets.states, offsets.counts, offsets.members
        types = ack.acknowledge_types
        single = len(types) == 1
        first = batch.first
        for offset in range(max(ack.first_offset, self.start_offset, first), min(ack.last_offset, batch.last) + 1):
            i = offset - first
            state = states[i]
            if state & STATE_MASK != ACQUIRED or state & TRANSITION:
                return ShareResult(ErrorCode.invalid_record_state,
                                   "The offset cannot be acknowledged. The offset is not acquired.")
            if members[i] != member_id:
                return ShareResult(ErrorCode.invalid_record_state, "Member is not the owner of offset")
            ack_type = types[0] if single else types[offset - ack.first_offset]
            if ack_type == _RENEW:
                self._lock_offset(batch, offsets, i)
                continue
            new = ACK_TYPE_STATE[ack_type]
            if new == AVAILABLE:
                new = self._released(counts[i])
            pending.entries.append((batch, i, member_id))
            states[i] = new | TRANSITION | (state & SHARED_LOCK)
            members[i] = EMPTY_MEMBER_ID
            _append_state(pending.state_batches, offset, offset, new, counts[i])
        return None

    @staticmethod
    def _start_transition(batch: InFlightBatch, new: int, pending: _Transitions) -> None:
        pending.entries.append((batch, -1, batch.member))
        batch.state = new | TRANSITION
        batch.member = EMPTY_MEMBER_ID
        _append_state(pending.state_batches, batch.first, batch.last, new, batch.count)

    def release_acquired_records(self, member_id: str, callback: ResultCallback) -> None:
        """The member's session ended: everything it still holds becomes AVAILABLE (ARCHIVED
        below the SPSO or at the delivery limit; counts are not lowered), written before
        ``callback`` gets the outcome."""
        pending = _Transitions()
        start = self.start_offset
        for batch in list(self._cache):
            offsets = batch.offsets
            if offsets is None:
                if batch.state != ACQUIRED or batch.member != member_id:
                    continue
                if not batch.first < start <= batch.last:
                    new = ARCHIVED if batch.last < start else self._released(batch.count, batch.size)
                    self._start_transition(batch, new, pending)
                    continue
                offsets = batch.split()
            states, counts, members = offsets.states, offsets.counts, offsets.members
            for i in range(len(states)):
                state = states[i]
                if state & STATE_MASK != ACQUIRED or state & TRANSITION or members[i] != member_id:
                    continue
                offset = batch.first + i
                new = ARCHIVED if offset < start else self._released(counts[i])
                pending.entries.append((batch, i, member_id))
                states[i] = new | TRANSITION | (state & SHARED_LOCK)
                members[i] = EMPTY_MEMBER_ID
                _append_state(pending.state_batches, offset, offset, new, counts[i])
        self._finish(pending, None, callback)

    def _finish(self, pending: _Transitions, error: ShareResult | None, callback: ResultCallback) -> None:
        """Roll back on an error; else write the new states and complete (or roll back)
        when the write answers; then answer ``callback`` and wake parked fetches."""
        if error is not None:
            self._complete(pending, commit=False)
            callback(error)
            return
        if not pending.entries:
            callback(OK)
            return

        def written(code: ErrorCode) -> None:
            if code is ErrorCode.none:
                self._complete(pending, commit=True)
                self._maybe_advance_start()
                callback(OK)
            else:
                self._complete(pending, commit=False)
                callback(ShareResult(persister_error(code), f"Failed to write the share group state: {code.name}"))
            self._wake()

        self.persister.write(self._write_of(pending.state_batches), written)

    def _complete(self, pending: _Transitions, *, commit: bool) -> None:
        for batch, i, previous_member in pending.entries:
            offsets = batch.offsets
            if offsets is None:
                self._complete_batch(batch, previous_member, commit)
            elif i >= 0:
                self._complete_offset(batch, offsets, i, previous_member, commit)
            else:  # split while the write waited (log start movement archived part of it)
                for k in range(len(offsets)):
                    if offsets.states[k] & TRANSITION:
                        self._complete_offset(batch, offsets, k, previous_member, commit)

    def _complete_batch(self, batch: InFlightBatch, previous_member: str, commit: bool) -> None:
        state = batch.state
        if state & TERMINAL:
            batch.state = ARCHIVED
            return
        if commit:
            batch.cancel()
            batch.state = state & STATE_MASK
        elif state & EXPIRED:
            expired_out = batch.count >= self.max_delivery_count or batch.last < self.start_offset
            batch.state = ARCHIVED if expired_out else AVAILABLE
            batch.member = EMPTY_MEMBER_ID
        else:
            batch.state = ACQUIRED
            batch.member = previous_member
        if batch.state == AVAILABLE:
            self._find_from(batch.first)

    def _complete_offset(self, batch: InFlightBatch, offsets: OffsetStates, i: int, previous_member: str,
                         commit: bool) -> None:
        state = offsets.states[i]
        if state & TERMINAL:
            offsets.states[i] = ARCHIVED
            return
        if commit:
            self._end_offset_lock(batch, offsets, i)
            new = state & STATE_MASK
        elif state & EXPIRED:
            expired_out = offsets.counts[i] >= self.max_delivery_count or batch.first + i < self.start_offset
            new = ARCHIVED if expired_out else AVAILABLE
            offsets.members[i] = EMPTY_MEMBER_ID
        else:
            offsets.states[i] = ACQUIRED | (state & SHARED_LOCK)
            offsets.members[i] = previous_member
            return
        offsets.states[i] = new
        if new == AVAILABLE:
            self._find_from(batch.first + i)

    def _write_of(self, state_batches: list[PersisterStateBatch]) -> PersisterWrite:
        return PersisterWrite(self.key, self.state_epoch, self.leader_epoch, self.start_offset, tuple(state_batches))

    def _wake(self) -> None:
        listener = self.listener
        if listener is not None:
            listener()

    # -- the start offset --------------------------------------------------------------

    def _maybe_advance_start(self) -> bool:
        """Move the SPSO past the acknowledged/archived prefix and forget the batches
        wholly behind it (Kafka's ``maybeUpdateCachedStateAndOffsets``)."""
        if not self._can_move_start():
            return False
        last_done = self._last_terminal_offset()
        if last_done < 0:
            return False
        cache = self._cache
        if last_done == cache.last().last:
            self.start_offset = self.end_offset = last_done + 1
            cache.clear()
            return True
        i = cache.floor(last_done)
        if last_done == cache.batches[i].last:
            self.start_offset = max(self.start_offset, cache.batches[i + 1].first)
            if self._gap_window_active():
                assert self._gap_window is not None
                self.start_offset = min(self._gap_window.gap_start, self.start_offset)
            drop_through = i
        else:
            self.start_offset = max(self.start_offset, last_done + 1)
            drop_through = i - 1
        if drop_through >= cache.head:
            cache.drop_through(drop_through)
        return True

    def _can_move_start(self) -> bool:
        cache = self._cache
        i = cache.floor(self.start_offset)
        if i < 0:
            return False  # an acquirable gap at the start (after a load)
        batch = cache.batches[i]
        offsets = batch.offsets
        if offsets is None:
            state = batch.state
        else:
            state = offsets.states[min(self.start_offset, batch.last) - batch.first]
        return state in (ACKNOWLEDGED, ARCHIVED)

    def _last_terminal_offset(self) -> int:
        """The last offset of the cache's acknowledged/archived prefix; -1 if none."""
        last = -1
        window = self._gap_window if self._gap_window_active() else None
        for batch in self._cache:
            if window is not None and batch.last >= window.gap_start:
                return last
            offsets = batch.offsets
            if offsets is None:
                if batch.state not in (ACKNOWLEDGED, ARCHIVED):
                    return last
            else:
                k = offsets.states.translate(_SETTLED_TERMINAL).find(0)
                if k >= 0:
                    return batch.first + k - 1 if k else last
            last = batch.last
        return last

    def update_cache_and_offsets(self, log_start_offset: int) -> None:
        """The log start offset moved past the SPSO (retention, DeleteRecords, or a read
        answered OFFSET_OUT_OF_RANGE): AVAILABLE records below it are archived and the
        SPSO follows it (ACQUIRED ones are archived when their lock ends)."""
        if log_start_offset <= self.start_offset:
            return
        if not self._cache:
            self.start_offset = self.end_offset = log_start_offset
            return
        if self._archive(self.start_offset, log_start_offset, self._cache, AVAILABLE):
            self._find_from(log_start_offset)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, self.start_offset)

    def _archive(self, start: int, end: int, entries: Iterable[InFlightBatch], initial_state: int) -> bool:
        """Archive the ``initial_state`` records of ``start..end-1`` (Kafka's
        ``archiveRecords``); True if any was."""
        archived = False
        for batch in entries:
            if batch.first >= end:
                break
            full = batch.first >= start and batch.last <= end - 1
            offsets = batch.offsets
            if full and offsets is None:
                if batch.state & STATE_MASK == initial_state:
                    was = batch.state & TRANSITION
                    batch.state = ARCHIVED | (TRANSITION | TERMINAL if was else 0)
                    batch.member = EMPTY_MEMBER_ID
                    batch.cancel()
                    archived = True
                continue
            if offsets is None:
                if batch.state & STATE_MASK != initial_state:
                    continue
                offsets = batch.split()
            states, first = offsets.states, batch.first
            for i in range(max(start, first) - first, min(end - 1, batch.last) - first + 1):
                state = states[i]
                if state & STATE_MASK != initial_state:
                    continue
                self._end_offset_lock(batch, offsets, i)
                states[i] = ARCHIVED | (TRANSITION | TERMINAL if state & TRANSITION else 0)
                offsets.members[i] = EMPTY_MEMBER_ID
                archived = True
        return archived

    # -- the gap window of a load ------------------------------------------------------

    def _gap_window_active(self) -> bool:
        window = self._gap_window
        return window is not None and window.end_offset == self.end_offset

    def _shrink_gap_window(self, offset: int) -> None:
        window = self._gap_window
        if window is None:
            return
        if window.end_offset == self.end_offset and offset <= window.end_offset:
            window.gap_start = offset
        else:
            self._gap_window = None

    # -- load ----------------------------------------------------------------------------

    def maybe_initialize(
        self,
        callback: ResultCallback,
        *,
        offsets: OffsetsForTimestamp | None = None,
        reset: ShareAutoOffsetReset | None = None,
        wall_clock_ms: WallMs,
    ) -> None:
        """Load the persisted state (once). A share-partition without a start offset
        starts where ``reset`` says, looked up in ``offsets`` (the partition's log);
        ``by_duration`` counts back from ``wall_clock_ms``, the caller's wall clock.
        While loading, and once fenced, callers get LEADER_NOT_AVAILABLE (Kafka's
        retriable answer); after a failed load UNKNOWN_SERVER_ERROR."""
        state = self.state
        if state is SharePartitionState.ACTIVE:
            callback(OK)
            return
        if state is SharePartitionState.FAILED:
            callback(ShareResult(ErrorCode.unknown_server_error, f"Share partition failed to load {self.key}"))
            return
        if state is not SharePartitionState.EMPTY:
            callback(ShareResult(ErrorCode.leader_not_available, f"Share partition is {state.value} {self.key}"))
            return
        self.state = SharePartitionState.INITIALIZING

        strategy = reset if reset is not None else ShareAutoOffsetReset.latest()

        def read(result: PersisterReadResult) -> None:
            outcome = self._load(result, offsets, strategy, wall_clock_ms)
            self.state = SharePartitionState.ACTIVE if outcome is OK else SharePartitionState.FAILED
            callback(outcome)

        self.persister.read(self.key, self.leader_epoch, read)

    def _load(self, result: PersisterReadResult, offsets: OffsetsForTimestamp | None,
              reset: ShareAutoOffsetReset, wall_clock_ms: WallMs) -> ShareResult:
        if result.error is not ErrorCode.none:
            return ShareResult(persister_error(result.error), result.error_message)
        start = result.start_offset
        if start == UNINITIALIZED_START_OFFSET:
            found = None if offsets is None else reset.start_offset(offsets, wall_clock_ms)
            if found is None:
                return ShareResult(ErrorCode.offset_not_available,
                                   f"Offset for {reset.kind} not found for share partition {self.key}")
            start = found
        failed = ShareResult(ErrorCode.unknown_server_error, f"Failed to initialize the share partition {self.key}")
        batches: list[InFlightBatch] = []
        gap_start = -1
        previous_last = start - 1
        for stored in result.state_batches:
            first, last, delivery_state, count = stored
            if first < start or last < first or (batches and first <= batches[-1].last):
                return failed
            if delivery_state not in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED):
                return failed
            if gap_start < 0 and first > previous_last + 1:
                gap_start = previous_last + 1
            previous_last = last
            # ACQUIRED is never persisted; were it, the record would be free again
            state = AVAILABLE if delivery_state == ACQUIRED else delivery_state
            batches.append(InFlightBatch(self, first, last, state, count))
        self.start_offset = start
        self.state_epoch = result.state_epoch
        for batch in batches:
            self._cache.insert(batch)
            self.batch_message_count.observe(batch.last - batch.first + 1)
        if batches:
            self._find_from(start)
            self.end_offset = batches[-1].last
            if gap_start >= 0:
                self._gap_window = _GapWindow(self.end_offset, gap_start)
            self._maybe_advance_start()
        else:
            self.end_offset = start
        return OK

    def mark_fenced(self) -> None:
        """The state epoch or the leadership moved on: this instance serves no more."""
        self.state = SharePartitionState.FENCED

    def cancel_locks(self) -> None:
        """Cancel every acquisition lock (the share-partition is dropped: its topic was
        deleted, or it was fenced): nothing of it stays on the timing wheel."""
        for batch in self._cache:
            batch.cancel()
            offsets = batch.offsets
            if offsets is not None:
                for lock in offsets.locks.values():
                    lock.cancel()
                offsets.locks.clear()
