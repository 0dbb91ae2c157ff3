"""One clean of one log: Kafka's ``Cleaner`` (docs/compaction.md).

The rest of log compaction beside it: which log to clean and from where
(:mod:`.log_cleaner_manager`), the broker's cleaner that runs the cleans and keeps the
metrics (:mod:`.log_cleaner`), the offset map (:mod:`.offset_map`), the I/O throttle
(:mod:`.throttler`), the re-encoding of kept batches (:mod:`.cleaned_batch`), the swap of
the cleaned segments (:mod:`.segment_swap`) and the worker process (:mod:`.cleaner_worker`).

A compacted log (cleanup.policy includes ``compact``) keeps at least the latest record
of every key. One clean of one log:

1. the cleanable range is ``[first dirty, first uncleanable)``
   (:mod:`.log_cleaner_manager`);
2. the :class:`~tidegate.log.offset_map.SkimpyOffsetMap` (MD5 of the key -> latest offset, bounded by
   log.cleaner.dedupe.buffer.size) is filled from that range, skipping control batches
   and aborted transactions' batches; when it fills the round ends there and the next
   round continues (several passes for a log with more keys than fit);
3. the segments from the log start up to the round's end are grouped (a group within
   segment.bytes) and each group is rewritten into one segment with the same offsets,
   swapped in with Kafka's ``.cleaned`` -> ``.swap`` -> replace protocol
   (:func:`~tidegate.log.segment_swap.swap_in`; a crash at any step is completed or
   discarded by the next load).

Records are dropped when a later offset holds their key, when they have no key, when
they belong to an aborted transaction, or when they are tombstones whose delete horizon
has passed. As Kafka 2.8+ (KIP-534) the first rewrite of a batch holding a tombstone (or
a removable transaction marker) stamps its delete horizon, now + delete.retention.ms,
into the batch's base timestamp with attribute bit 6; a later pass past the horizon
drops them. Batch headers (producer id, epoch, base sequence, last offset delta) are
kept; a batch emptied by cleaning survives as an empty header when it is its
producer's last batch, so the producer's sequence survives.

Plain synchronous objects with time passed in. The broker chooses the log on its event
loop (:meth:`LogCleaner.choose <tidegate.log.log_cleaner.LogCleaner.choose>`), runs
:meth:`Cleaner.prepare` (the map and the ``.cleaned`` files: all the reading and
writing) on a worker thread or process, and swaps the result in back on the loop
(:meth:`Cleaner.commit`), where the log's segment list lives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tidegate.clock import Clock, MonotonicMs, WallMs
from tidegate.record.control_records import (
    ControlRecordType,
    InvalidControlRecordError,
    end_transaction_marker_of,
)
from tidegate.record.record_batch import DELETE_HORIZON_FLAG_MASK, BatchHeader
from tidegate.utils import INT32_MAX

from .cleaned_batch import KeyedRecord, decode_records, rebuild_batch
from .index import AbortedTxn, TransactionIndex
from .log import Log
from .log_cleaner_manager import LogToClean
from .offset_map import SkimpyOffsetMap
from .segment import LogSegment
from .segment_swap import CleanedSegmentWriter, can_swap, discard_cleaned, swap_in
from .throttler import UNBOUNDED_RATE, Throttler

__all__ = ["CleanedLog", "CleanedSegment", "Cleaner", "CleanerStats", "PreparedClean"]


class CleanedSegment(Protocol):
    """What a clean reads of a segment: a :class:`~tidegate.log.segment.LogSegment`, or
    a worker process's :class:`~tidegate.log.cleaner_worker.SegmentFile`."""

    @property
    def base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def txn_index(self) -> TransactionIndex: ...
    def iter_batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]: ...
    def read_batch(self, position: int, size: int) -> bytes: ...


class CleanedLogConfig(Protocol):
    @property
    def delete_retention_ms(self) -> int: ...
    @property
    def segment_bytes(self) -> int: ...


class CleanedLog(Protocol):
    """What a clean reads of a log: the live :class:`~tidegate.log.log.Log` (on a thread),
    or its :class:`~tidegate.log.cleaner_worker.LogSnapshot` (in a worker process)."""

    @property
    def directory(self) -> Path: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def config(self) -> CleanedLogConfig: ...
    @property
    def segments(self) -> Sequence[CleanedSegment]: ...
    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...


#: a clean's times before it is timed, and a cleaner's last run before its first
_NOT_TIMED = MonotonicMs(0)


@dataclass
class CleanerStats:
    """One clean's counters (Kafka's ``CleanerStats``)."""

    map_bytes_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0
    buffer_utilization: float = 0.0
    #: monotonic times of the clean's start, of its offset map's completion and its end
    start_ms: MonotonicMs = _NOT_TIMED
    map_complete_ms: MonotonicMs = _NOT_TIMED
    end_ms: MonotonicMs = _NOT_TIMED
    #: the offset the next round starts from (the checkpoint's new value)
    end_offset: int = 0

    @property
    def elapsed_secs(self) -> float:
        return max(0, self.end_ms - self.start_ms) / 1000.0


@dataclass
class PreparedClean:
    """A clean written as ``.cleaned`` files, waiting for :meth:`Cleaner.commit`."""

    log: Log
    stats: CleanerStats
    groups: list[tuple[list[LogSegment], list[AbortedTxn]]] = field(default_factory=list)

    @classmethod
    def of_worker(
        cls, plog: Log, stats: CleanerStats, groups: list[tuple[list[int], list[AbortedTxn]]]
    ) -> PreparedClean:
        """What :func:`prepare_in_worker` returned, on the live log: each group's base
        offsets become its segments (a group whose segments are gone, deleted by
        retention or DeleteRecords meanwhile, gets none: :meth:`Cleaner.commit` then
        discards the rest)."""
        by_base = {seg.base_offset: seg for seg in plog.segments}
        prepared = cls(plog, stats)
        for i, (bases, aborted) in enumerate(groups):
            segs = [by_base[b] for b in bases if b in by_base]
            if len(segs) < len(bases):
                for later, _ in groups[i:]:
                    if not plog.closed:
                        discard_cleaned(plog.directory, later[0])
                break
            prepared.groups.append((segs, aborted))
        return prepared


class CleanedTransactionMetadata:
    """Kafka's ``CleanedTransactionMetadata``: which batches belong to aborted
    transactions (from the ``.txnindex``) and whether a pass saw data of the transaction
    a marker ends (a marker is removable only when it saw none)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        #: pid -> [the aborted transaction, whether a batch of it was seen]
        self.ongoing_aborted: dict[int, list] = {}
        self.ongoing_committed: set[int] = set()

    def _advance(self, last_offset: int) -> None:
        while (
            self._next < len(self._aborted)
            and self._aborted[self._next].first_offset <= last_offset
        ):
            txn = self._aborted[self._next]
            self.ongoing_aborted[txn.producer_id] = [txn, False]
            self._next += 1

    def is_aborted(self, h: BatchHeader) -> bool:
        """Call for each data batch in order: True when it belongs to an aborted transaction."""
        self._advance(h.base_offset + h.last_offset_delta)
        if not h.is_transactional:
            return False
        entry = self.ongoing_aborted.get(h.producer_id)
        if entry is not None:
            entry[1] = True
            return True
        self.ongoing_committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, abort: bool) -> tuple[bool, AbortedTxn | None]:
        """(whether the marker may be discarded, the index entry to keep with it)."""
        self._advance(h.base_offset + h.last_offset_delta)
        if abort:
            entry = self.ongoing_aborted.pop(h.producer_id, None)
            if entry is not None and entry[1]:
                return False, entry[0]
            return True, None
        if h.producer_id in self.ongoing_committed:
            self.ongoing_committed.discard(h.producer_id)
            return False, None
        return True, None


class Cleaner:
    """One clean of one log (Kafka's ``Cleaner``). Its stats time the clean and its
    :class:`Throttler` sleeps on ``clock`` (Kafka's ``Cleaner`` holds a ``Time``)."""

    def __init__(
        self,
        dedupe_buffer_size: int = 134217728,
        load_factor: float = 0.9,
        *,
        clock: Clock,
        io_buffer_size: int = 524288,
        io_max_bytes_per_second: float = UNBOUNDED_RATE,
        throttle: Callable[[int], None] | None = None,
    ) -> None:
        self.clock = clock
        self.offset_map = SkimpyOffsetMap(dedupe_buffer_size, load_factor)
        #: log.cleaner.io.buffer.size: half for reading, half for the cleaned segment
        self.io_buffer_size = io_buffer_size
        self.write_buffer_size = max(1, io_buffer_size // 2)
        #: log.cleaner.io.max.bytes.per.second (its ``rate`` changes live)
        self.throttler = Throttler(io_max_bytes_per_second, clock=clock)
        #: called with the bytes read or written
        self.throttle: Callable[[int], None] = throttle or self.throttler

    # -- map -----------------------------------------------------------------
    def build_offset_map(self, plog: CleanedLog, start: int, end: int, stats: CleanerStats) -> int:
        """Fill the map from ``[start, end)``; the end offset of the round (the map's
        latest offset + 1: below ``end`` when the map filled up)."""
        omap = self.offset_map
        omap.clear()
        omap.latest_offset = start - 1
        tracker = CleanedTransactionMetadata(plog.collect_aborted_transactions(start, end))
        segs = [s for s in plog.segments if s.base_offset < end]
        for i, seg in enumerate(segs):
            if seg.next_offset <= start:
                continue
            for pos, h in seg.iter_batches_from(start):
                if h.base_offset >= end:
                    return omap.latest_offset + 1
                stats.map_bytes_read += h.size
                self.throttle(h.size)
                if h.is_control:
                    tracker.on_marker(h, self._is_abort(seg, pos, h))
                elif not tracker.is_aborted(h):
                    for rec in self._records(seg, pos, h):
                        stats.map_messages_read += 1
                        if rec.key is not None and rec.offset >= start:
                            if omap.full:
                                return omap.latest_offset + 1
                            omap.put(rec.key, rec.offset)
                if h.last_offset >= start:
                    omap.latest_offset = max(omap.latest_offset, h.last_offset)
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else end
            omap.latest_offset = max(omap.latest_offset, min(nxt, end) - 1)
        return min(omap.latest_offset + 1, end)

    @staticmethod
    def _records(seg: CleanedSegment, pos: int, h: BatchHeader) -> list[KeyedRecord]:
        return decode_records(seg.read_batch(pos, h.size), h)

    @staticmethod
    def _is_abort(seg: CleanedSegment, pos: int, h: BatchHeader) -> bool:
        try:
            marker = end_transaction_marker_of(seg.read_batch(pos, h.size))
        except InvalidControlRecordError:
            return False
        return marker is not None and marker.type == ControlRecordType.ABORT

    # -- clean -----------------------------------------------------------------
    def clean(
        self,
        to_clean: LogToClean,
        now_ms: WallMs,
        *,
        on_step: Callable[[str], None] | None = None,
    ) -> CleanerStats:
        """Clean one log (:meth:`prepare` then :meth:`commit` on this thread); the stats'
        ``end_offset`` is the new first dirty offset."""
        prepared = self.prepare(to_clean, now_ms, on_step=on_step)
        self.commit(prepared, now_ms, on_step=on_step)
        return prepared.stats

    def prepare(
        self,
        to_clean: LogToClean,
        now_ms: WallMs,
        *,
        on_step: Callable[[str], None] | None = None,
    ) -> PreparedClean:
        """Everything but the swap, without changing the log: build the offset map and
        write each group's cleaned segment as ``.cleaned`` files. Reads only inactive
        segments, so the broker runs it off the event loop while the log takes appends;
        :meth:`commit` (on the log's thread) swaps the groups in."""
        producers = to_clean.log.producer_state

        def last_data_offset(producer_id: int) -> int | None:
            entry = producers.entry(producer_id)
            return None if entry is None else entry.last_data_offset

        stats, groups = self.prepare_log(
            to_clean.log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset,
            now_ms, last_data_offset=last_data_offset, on_step=on_step,
        )  # fmt: skip
        prepared = PreparedClean(to_clean.log, stats)
        for segs, aborted in groups:
            assert all(isinstance(seg, LogSegment) for seg in segs)
            prepared.groups.append(([seg for seg in segs if isinstance(seg, LogSegment)], aborted))
        return prepared

    def prepare_log(
        self,
        plog: CleanedLog,
        first_dirty: int,
        first_uncleanable: int,
        now_ms: WallMs,
        *,
        last_data_offset: Callable[[int], int | None],
        on_step: Callable[[str], None] | None = None,
    ) -> tuple[CleanerStats, list[tuple[list[CleanedSegment], list[AbortedTxn]]]]:
        """:meth:`prepare` of a live log or of a worker process's
        :class:`~tidegate.log.cleaner_worker.LogSnapshot`: the stats and, per group, the
        segments it replaces and the aborted transactions its ``.cleaned`` transaction
        index holds. ``last_data_offset``: the offset of a producer's last data record
        (None: unknown producer), whose batch is kept even when emptied."""
        clock = self.clock
        stats = CleanerStats(start_ms=clock.milliseconds())
        end = self.build_offset_map(plog, first_dirty, first_uncleanable, stats)
        stats.map_complete_ms = clock.milliseconds()
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_offset = end
        delete_retention_ms = plog.config.delete_retention_ms
        start = plog.log_start_offset
        tracker = CleanedTransactionMetadata(plog.collect_aborted_transactions(start, end))
        all_segs: Sequence[CleanedSegment] = plog.segments
        segs = [s for s in all_segs[:-1] if s.base_offset < end]
        groups: list[tuple[list[CleanedSegment], list[AbortedTxn]]] = []
        for group in self.group_segments(segs, plog.config.segment_bytes):
            kept_aborted: list[AbortedTxn] = []
            writer = CleanedSegmentWriter(plog.directory, group[0].base_offset, self.write_buffer_size)
            try:
                for seg in group:
                    for pos, h in seg.iter_batches_from(seg.base_offset):
                        stats.bytes_read += h.size
                        self.throttle(h.size)
                        data = self._clean_batch(seg, pos, h, end, now_ms, delete_retention_ms,
                                                 tracker, kept_aborted, stats, last_data_offset)  # fmt: skip
                        if data is not None:
                            writer.write(data)
                            self.throttle(len(data))
            except BaseException:
                writer.close()
                raise
            writer.finish(kept_aborted)
            stats.bytes_written += writer.written
            groups.append((group, kept_aborted))
            if on_step is not None:
                on_step("cleaned")
        stats.end_ms = clock.milliseconds()
        self.offset_map.clear()  # its buffer goes back until the next clean
        return stats, groups

    @staticmethod
    def commit(
        prepared: PreparedClean, now_ms: WallMs, *, on_step: Callable[[str], None] | None = None
    ) -> bool:
        """Swap the prepared groups in; False (the rest discarded) when the log changed
        under them (retention, DeleteRecords, truncation, closing)."""
        plog = prepared.log
        for i, (group, aborted) in enumerate(prepared.groups):
            if not can_swap(plog.local, group):
                for later, _ in prepared.groups[i:]:
                    if not plog.closed:
                        discard_cleaned(plog.directory, later[0].base_offset)
                return False
            swap_in(plog.local, group, aborted, now_ms, on_step)
        return True

    def _clean_batch(
        self,
        seg: CleanedSegment,
        pos: int,
        h: BatchHeader,
        end: int,
        now_ms: WallMs,
        delete_retention_ms: int,
        tracker: CleanedTransactionMetadata,
        kept_aborted: list[AbortedTxn],
        stats: CleanerStats,
        last_data_offset: Callable[[int], int | None],
    ) -> bytes | None:
        """The batch as it goes into the cleaned segment (``raw`` itself when nothing of
        it changes), or None when nothing of it is kept."""
        raw = seg.read_batch(pos, h.size)
        has_horizon = bool(h.attributes & DELETE_HORIZON_FLAG_MASK)
        horizon_passed = has_horizon and now_ms >= h.base_timestamp
        if h.is_control:
            stats.messages_read += h.records_count
            can_discard, entry = tracker.on_marker(h, self._is_abort(seg, pos, h))
            if entry is not None:
                kept_aborted.append(entry)
            if h.base_offset >= end or not can_discard:
                return raw
            if h.records_count == 0 or horizon_passed:
                return None  # an empty control batch, or a marker past its horizon
            if has_horizon:
                return raw
            recs = self._records(seg, pos, h)
            horizon = now_ms + delete_retention_ms
            return rebuild_batch(h, recs, horizon, h.attributes | DELETE_HORIZON_FLAG_MASK)
        aborted = tracker.is_aborted(h)
        if h.base_offset >= end and not aborted:
            stats.messages_read += h.records_count
            stats.messages_written += h.records_count
            return raw
        recs = self._records(seg, pos, h)
        stats.messages_read += len(recs)
        omap = self.offset_map
        kept: list[KeyedRecord] = []
        tombstones = False
        for rec in recs:
            if aborted:
                continue
            if rec.offset >= end:
                kept.append(rec)
            elif rec.key is None:
                stats.invalid_messages_read += 1
            elif rec.offset >= omap.get(rec.key):
                if rec.is_tombstone:
                    if horizon_passed:
                        continue
                    tombstones = True
                kept.append(rec)
        stats.messages_written += len(kept)
        if len(kept) == len(recs) and (not tombstones or has_horizon):
            return raw
        if not kept:
            last = last_data_offset(h.producer_id) if h.producer_id >= 0 else None
            if last == h.last_offset:
                # the producer's last batch: kept empty so its epoch and sequence survive
                return rebuild_batch(h, [], h.base_timestamp, h.attributes)
            return None
        if tombstones and not has_horizon:
            horizon = now_ms + delete_retention_ms
            return rebuild_batch(h, kept, horizon, h.attributes | DELETE_HORIZON_FLAG_MASK)
        return rebuild_batch(h, kept, h.base_timestamp, h.attributes)

    @staticmethod
    def group_segments(segs: list[CleanedSegment], max_size: int) -> list[list[CleanedSegment]]:
        """Kafka's ``groupSegmentsBySize``: consecutive segments whose logs together stay
        within ``max_size`` and whose offsets span less than 2^31."""
        groups: list[list[CleanedSegment]] = []
        i = 0
        while i < len(segs):
            group = [segs[i]]
            size = segs[i].size
            j = i + 1
            while j < len(segs):
                nxt = segs[j]
                last = segs[j + 1].base_offset - 1 if j + 1 < len(segs) else nxt.next_offset - 1
                if size + nxt.size > max_size or last - group[0].base_offset > INT32_MAX:
                    break
                group.append(nxt)
                size += nxt.size
                j += 1
            groups.append(group)
            i = j
        return groups
