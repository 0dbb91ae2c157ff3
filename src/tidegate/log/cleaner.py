"""Log compaction: Kafka's ``LogCleaner``, ``LogCleanerManager``, ``Cleaner`` and
``SkimpyOffsetMap`` (docs/compaction.md).

A compacted log (cleanup.policy includes ``compact``) keeps at least the latest record
of every key. One clean of one log:

1. the cleanable range is ``[first dirty, first uncleanable)``: the first dirty offset
   comes from ``cleaner-offset-checkpoint``; the first uncleanable offset is the
   smallest of the last stable offset (undecided transactions are never cleaned), the
   active segment's base offset and, with min.compaction.lag.ms, the base of the first
   segment holding a record younger than the lag;
2. the :class:`OffsetMap` (MD5 of the key -> latest offset, bounded by
   log.cleaner.dedupe.buffer.size) is filled from that range, skipping control batches
   and aborted transactions' batches; when it fills the round ends there and the next
   round continues (several passes for a log with more keys than fit);
3. the segments from the log start up to the round's end are grouped (a group within
   segment.bytes) and each group is rewritten into one segment with the same offsets,
   swapped in with Kafka's ``.cleaned`` -> ``.swap`` -> replace protocol
   (:func:`~tidegate.log.segment_swap.swap_in`; a crash at any step is completed or discarded by the
   next load).

Records are dropped when a later offset holds their key, when they have no key, when
they belong to an aborted transaction, or when they are tombstones whose delete horizon
has passed. As Kafka 2.8+ (KIP-534) the first rewrite of a batch holding a tombstone (or
a removable transaction marker) stamps its delete horizon, now + delete.retention.ms,
into the batch's base timestamp with attribute bit 6; a later pass past the horizon
drops them. Batch headers (producer id, epoch, base sequence, last offset delta) are
kept; a batch emptied by cleaning survives as an empty header when it is its
producer's last batch, so the producer's sequence survives.

Plain synchronous objects with time passed in. The broker chooses the log on its event
loop (:meth:`LogCleaner.choose`), runs :meth:`Cleaner.prepare` (the map and the
``.cleaned`` files: all the reading and writing) on a worker thread, and swaps the result
in back on the loop (:meth:`LogCleaner.finish`), where the log's segment list lives.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from tidegate.clock import SYSTEM_CLOCK, Clock, MonotonicMs, WallMs
from tidegate.record.batch_builder import batch_crc, set_crc, varint
from tidegate.record.compression import compress, decompress
from tidegate.record.control_records import (
    ControlRecordType,
    InvalidControlRecordError,
    end_transaction_marker_of,
)
from tidegate.record.record_batch import (
    COMPRESSION_CODEC_MASK,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
)
from tidegate.utils import INT32_MAX
from tidegate.utils.byte_utils import read_varlong

from .checkpoint import read_checkpoint_file, write_checkpoint_file
from .dir_failure import LogDirFailureChannel, StorageError
from .index import AbortedTxn, TransactionIndex
from .local_log import collect_aborted_transactions
from .log import Log
from .segment import LogSegment, iter_batch_headers, log_file_path, txn_index_file_path
from .segment_swap import CleanedSegmentWriter, can_swap, discard_cleaned, swap_in

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILE",
    "CleanJob",
    "Cleaner",
    "CleanerStats",
    "LogCleaner",
    "LogCleanerManager",
    "LogToClean",
    "OffsetMap",
    "PreparedClean",
    "Throttler",
    "prepare_in_worker",
]

log = logging.getLogger(__name__)

#: Kafka's file, one per log directory: each compacted partition's first dirty offset.
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: Bytes per offset map entry, as Kafka's SkimpyOffsetMap: MD5 (16) + offset (8).
OFFSET_MAP_ENTRY_SIZE = 24
#: log.cleaner.io.max.bytes.per.second's default (Double.MaxValue): no throttle
UNBOUNDED_RATE = 1.7976931348623157e308


class OffsetMap:
    """Kafka's ``SkimpyOffsetMap``: MD5 of a key -> the latest offset seen for it, in one
    buffer of ``memory`` bytes (16 bytes of hash and 8 of offset per slot, open
    addressing with linear probing), holding at most ``memory / 24 * load_factor`` keys.

    The buffer is the whole of the map's memory, as in Kafka (a dict of digests cost
    about 140 bytes a key, 6x the budget). It is allocated at the first put after
    :meth:`clear` (zero pages the kernel only backs once touched) and dropped by
    :meth:`clear`, so an idle cleaner holds none of it. An all-zero slot is empty;
    a key whose MD5 is all zeros would share that marker, as in Kafka."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory = memory
        self.load_factor = load_factor
        self.slots = min(memory, INT32_MAX) // OFFSET_MAP_ENTRY_SIZE
        self.capacity = int(self.slots * load_factor)
        if self.capacity < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no entry")
        self._buf: bytearray | None = None
        self._size = 0
        #: the last offset the map covers (Kafka's ``latestOffset``)
        self.latest_offset = -1

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self.capacity

    def _slot(self, buf: bytearray, digest: bytes) -> tuple[int, bool]:
        """(byte position of the digest's slot, whether it holds the digest already);
        (-1, False) when every slot holds another key."""
        slots = self.slots
        pos = int.from_bytes(digest[:8], "big") % slots
        for _ in range(slots):
            base = pos * OFFSET_MAP_ENTRY_SIZE
            stored = buf[base : base + 16]
            if stored == digest:
                return base, True
            if stored == _EMPTY_HASH:
                return base, False
            pos += 1
            if pos == slots:
                pos = 0
        return -1, False

    def put(self, key: bytes, offset: int) -> None:
        buf = self._buf
        if buf is None:
            buf = self._buf = bytearray(self.slots * OFFSET_MAP_ENTRY_SIZE)
        digest = hashlib.md5(key).digest()
        base, found = self._slot(buf, digest)
        if not found:
            if base < 0:
                raise ValueError("the offset map is full")  # callers stop at capacity
            buf[base : base + 16] = digest
            self._size += 1
        _OFFSET.pack_into(buf, base + 16, offset)
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when the map has not seen it."""
        buf = self._buf
        if buf is None:
            return -1
        base, found = self._slot(buf, hashlib.md5(key).digest())
        return _OFFSET.unpack_from(buf, base + 16)[0] if found else -1

    def clear(self) -> None:
        self._buf = None
        self._size = 0
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self._size / self.slots


_EMPTY_HASH = bytes(16)
_OFFSET = struct.Struct(">q")


class Throttler:
    """Kafka's ``Throttler``: holds a byte rate to ``rate`` per second by sleeping. Every
    ``check_interval_ms`` it compares the bytes seen since the last check with the
    time taken and sleeps off the excess, on the :class:`~tidegate.clock.Clock` it is
    given (Kafka's ``Throttler`` takes a ``Time``; tests give a
    :class:`~tidegate.clock.MockClock`); ``sleep`` defaults to the clock's."""

    def __init__(
        self,
        rate: float,
        *,
        check_interval_ms: int = 300,
        clock: Clock,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.rate = rate
        self.check_interval_s = check_interval_ms / 1000.0
        self._clock = lambda: clock.nanoseconds() / 1e9
        self._sleep = sleep or clock.sleep
        self._period_start = self._clock()
        self._observed = 0
        #: seconds slept in total (the cleaner's throttle metric)
        self.slept_s = 0.0

    @property
    def unbounded(self) -> bool:
        return self.rate >= UNBOUNDED_RATE or self.rate <= 0

    def __call__(self, observed: int) -> None:
        if self.unbounded:
            return
        self._observed += observed
        elapsed = self._clock() - self._period_start
        if elapsed <= self.check_interval_s or self._observed <= 0:
            return
        if self._observed / elapsed > self.rate:
            pause = self._observed / self.rate - elapsed
            if pause > 0:
                self._sleep(pause)
                self.slept_s += pause
        self._period_start = self._clock()
        self._observed = 0


#: a clean's times before it is timed, and a cleaner's last run before its first
_NOT_TIMED = MonotonicMs(0)
_NEVER = WallMs(0)


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


@dataclass
class LogToClean:
    """A compacted log and its cleanable range (Kafka's ``LogToClean``)."""

    key: object
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    #: max.compaction.lag.ms passed for a dirty record: clean whatever the ratio
    needs_compaction_now: bool = False
    #: the log start offset when the clean was chosen (DeleteRecords may move it meanwhile)
    log_start_offset: int = -1

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class SegmentFile:
    """A closed segment as a cleaner worker process sees it: its log file (read-only,
    opened on first read, up to the size it had when the clean was chosen) and its
    aborted-transaction index. What :class:`Cleaner` reads of a :class:`LogSegment`."""

    def __init__(self, directory: Path, base_offset: int, size: int, next_offset: int) -> None:
        self.base_offset = base_offset
        self.size = size
        self.next_offset = next_offset
        self.path = log_file_path(directory, base_offset)
        self._txn_path = txn_index_file_path(directory, base_offset)
        self._fd: int | None = None
        self._txn_index: TransactionIndex | None = None

    @property
    def txn_index(self) -> TransactionIndex:
        if self._txn_index is None:
            self._txn_index = TransactionIndex.load(self._txn_path, self.base_offset)
        return self._txn_index

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        return self._fd

    def iter_batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        if start_offset >= self.next_offset:
            return
        for pos, h in iter_batch_headers(self._file(), self.path, 0, self.size):
            if h[0] + h[6] >= start_offset:
                yield pos, BatchHeader._make(h)

    def read_batch(self, position: int, size: int) -> bytes:
        data = os.pread(self._file(), size, position)
        if len(data) < size:
            raise OSError(f"{self.path}: short read at {position}")
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class _SnapshotConfig:
    delete_retention_ms: int
    segment_bytes: int


@dataclass(frozen=True)
class CleanJob:
    """One clean, described by value so a worker process can run it (:func:`prepare_in_worker`):
    the partition directory, its segments (base offset, size, next offset; the last is the
    active one, never read), the cleanable range, the configs the clean uses, each
    producer's last data offset, and the I/O throttle."""

    directory: str
    segments: tuple[tuple[int, int, int], ...]
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    delete_retention_ms: int
    segment_bytes: int
    producer_last_offsets: dict[int, int]
    now_ms: WallMs
    dedupe_buffer_size: int
    load_factor: float
    io_buffer_size: int
    io_max_bytes_per_second: float

    @classmethod
    def of(cls, ltc: LogToClean, now_ms: WallMs, cleaner: Cleaner) -> CleanJob:
        plog = ltc.log
        return cls(
            str(plog.directory),
            tuple((s.base_offset, s.size, s.next_offset) for s in plog.segments),
            plog.log_start_offset, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
            plog.config.delete_retention_ms, plog.config.segment_bytes,
            {pid: e.last_data_offset for pid, e in plog.producer_state.producers.items()},
            now_ms, cleaner.offset_map.memory, cleaner.offset_map.load_factor, cleaner.io_buffer_size,
            cleaner.throttler.rate,
        )  # fmt: skip


class LogSnapshot:
    """What :class:`Cleaner` reads of a :class:`Log`, rebuilt from a :class:`CleanJob`
    in a worker process: the segment files, the log start, the configs of the clean, the
    aborted transactions (from the segments' ``.txnindex`` files) and the producers' last
    data offsets; ``.cleaned`` files are written the same way as by the log."""

    def __init__(self, job: CleanJob) -> None:
        self.directory = Path(job.directory)
        self.segments = [SegmentFile(self.directory, b, size, nxt) for b, size, nxt in job.segments]
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = job.log_start_offset
        self.config = _SnapshotConfig(job.delete_retention_ms, job.segment_bytes)
        self.producer_last_offsets = job.producer_last_offsets

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        return collect_aborted_transactions(self.segments, self._bases, fetch_offset, upper_bound_offset)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()


#: what a clean reads: the live log (thread) or its snapshot (worker process)
_CleanedLog = Union[Log, LogSnapshot]  # noqa: UP007 - a runtime alias
_Segment = Union[LogSegment, SegmentFile]  # noqa: UP007 - a runtime alias


def _last_data_offset(plog: _CleanedLog, producer_id: int) -> int | None:
    if isinstance(plog, LogSnapshot):
        return plog.producer_last_offsets.get(producer_id)
    entry = plog.producer_state.entry(producer_id)
    return None if entry is None else entry.last_data_offset


def _check_parent(parent: int) -> Callable[[int], None]:
    """A throttle hook for a worker process: stop when the broker that started it is
    gone (its ``.cleaned`` files belong to a broker that no longer exists)."""

    def check(_n: int) -> None:
        if os.getppid() != parent:
            raise SystemExit("the broker is gone")

    return check


def prepare_in_worker(job: CleanJob, parent_pid: int) -> tuple[CleanerStats, list[tuple[list[int], list[AbortedTxn]]]]:
    """Run a clean's :meth:`Cleaner.prepare` in a worker process: everything but the
    swap, from the files alone. Returns the stats and, per group, the base offsets of
    the segments it replaces and the aborted transactions it kept."""
    # the worker is a process of its own: its clock is the system's
    throttle = Throttler(job.io_max_bytes_per_second, clock=SYSTEM_CLOCK)
    alive = _check_parent(parent_pid)

    def hook(n: int) -> None:
        alive(n)
        throttle(n)

    cleaner = Cleaner(job.dedupe_buffer_size, job.load_factor, clock=SYSTEM_CLOCK,
                      io_buffer_size=job.io_buffer_size, throttle=hook)
    snapshot = LogSnapshot(job)
    try:
        stats, groups = cleaner.prepare_log(
            snapshot, job.first_dirty_offset, job.first_uncleanable_offset, job.now_ms
        )
    finally:
        snapshot.close()
    return stats, [([s.base_offset for s in segs], aborted) for segs, aborted in groups]


def _header(h: BatchHeader | tuple) -> BatchHeader:
    return h if isinstance(h, BatchHeader) else BatchHeader._make(h)


@dataclass
class _Record:
    offset: int
    key: bytes | None
    is_tombstone: bool
    timestamp: int
    #: the record's bytes after its timestamp delta (offset delta, key, value, headers)
    tail: bytes


def _parse_records(data: bytes, base_offset: int, base_ts: int) -> list[_Record]:
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        length, pos = read_varlong(data, pos)
        end = pos + length
        ts_delta, p = read_varlong(data, pos + 1)
        tail_start = p
        off_delta, p = read_varlong(data, p)
        klen, p = read_varlong(data, p)
        key = None
        if klen >= 0:
            key = bytes(data[p : p + klen])
            p += klen
        vlen, p = read_varlong(data, p)
        out.append(_Record(base_offset + off_delta, key, vlen < 0, base_ts + ts_delta,
                           bytes(data[tail_start:end])))  # fmt: skip
        pos = end
    return out


def _encode(rec: _Record, base_ts: int) -> bytes:
    body = b"\x00" + varint(rec.timestamp - base_ts) + rec.tail
    return varint(len(body)) + body


def _rebuild(h: BatchHeader, records: list[_Record], base_ts: int, attributes: int) -> bytes:
    """A batch with ``h``'s header fields (offsets, producer, sequence, last offset delta
    kept), the given records and base timestamp (the delete horizon when bit 6 is set)."""
    section = b"".join(_encode(r, base_ts) for r in records)
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec and section:
        section = compress(codec, section)
    buf = bytearray(HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        buf, 0, h.base_offset, HEADER_SIZE + len(section) - LOG_OVERHEAD,
        h.partition_leader_epoch, h.magic, 0, attributes, h.last_offset_delta, base_ts,
        h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, len(records),
    )  # fmt: skip
    buf += section
    set_crc(buf, batch_crc((buf,)))
    return bytes(buf)


class _TxnTracker:
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
        self.offset_map = OffsetMap(dedupe_buffer_size, load_factor)
        #: log.cleaner.io.buffer.size: half for reading, half for the cleaned segment
        self.io_buffer_size = io_buffer_size
        self.write_buffer_size = max(1, io_buffer_size // 2)
        #: log.cleaner.io.max.bytes.per.second (its ``rate`` changes live)
        self.throttler = Throttler(io_max_bytes_per_second, clock=clock)
        #: called with the bytes read or written
        self.throttle: Callable[[int], None] = throttle or self.throttler

    # -- map -----------------------------------------------------------------
    def build_offset_map(self, plog: _CleanedLog, start: int, end: int, stats: CleanerStats) -> int:
        """Fill the map from ``[start, end)``; the end offset of the round (the map's
        latest offset + 1: below ``end`` when the map filled up)."""
        omap = self.offset_map
        omap.clear()
        omap.latest_offset = start - 1
        tracker = _TxnTracker(plog.collect_aborted_transactions(start, end))
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
    def _records(seg: _Segment, pos: int, h: BatchHeader) -> list[_Record]:
        data = seg.read_batch(pos, h.size)
        body = data[HEADER_SIZE:]
        codec = h.attributes & COMPRESSION_CODEC_MASK
        if codec:
            body = decompress(codec, body)
        return _parse_records(body, h.base_offset, h.base_timestamp)

    @staticmethod
    def _is_abort(seg: _Segment, pos: int, h: BatchHeader) -> bool:
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
        stats, groups = self.prepare_log(
            to_clean.log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset,
            now_ms, on_step=on_step,
        )  # fmt: skip
        prepared = PreparedClean(to_clean.log, stats)
        for segs, aborted in groups:
            assert all(isinstance(seg, LogSegment) for seg in segs)
            prepared.groups.append(([seg for seg in segs if isinstance(seg, LogSegment)], aborted))
        return prepared

    def prepare_log(
        self,
        plog: _CleanedLog,
        first_dirty: int,
        first_uncleanable: int,
        now_ms: WallMs,
        *,
        on_step: Callable[[str], None] | None = None,
    ) -> tuple[CleanerStats, list[tuple[list[_Segment], list[AbortedTxn]]]]:
        """:meth:`prepare` of a live log or of a worker process's :class:`LogSnapshot`:
        the stats and, per group, the segments it replaces and the aborted transactions
        its ``.cleaned`` transaction index holds."""
        clock = self.clock
        stats = CleanerStats(start_ms=clock.milliseconds())
        end = self.build_offset_map(plog, first_dirty, first_uncleanable, stats)
        stats.map_complete_ms = clock.milliseconds()
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_offset = end
        delete_retention_ms = plog.config.delete_retention_ms
        start = plog.log_start_offset
        tracker = _TxnTracker(plog.collect_aborted_transactions(start, end))
        all_segs: Sequence[_Segment] = plog.segments
        segs = [s for s in all_segs[:-1] if s.base_offset < end]
        groups: list[tuple[list[_Segment], list[AbortedTxn]]] = []
        for group in self.group_segments(segs, plog.config.segment_bytes):
            kept_aborted: list[AbortedTxn] = []
            writer = CleanedSegmentWriter(plog.directory, group[0].base_offset, self.write_buffer_size)
            try:
                for seg in group:
                    for pos, h in seg.iter_batches_from(seg.base_offset):
                        stats.bytes_read += h.size
                        self.throttle(h.size)
                        data = self._clean_batch(plog, seg, pos, h, end, now_ms, delete_retention_ms,
                                                 tracker, kept_aborted, stats)  # fmt: skip
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
        plog: _CleanedLog,
        seg: _Segment,
        pos: int,
        h: BatchHeader,
        end: int,
        now_ms: WallMs,
        delete_retention_ms: int,
        tracker: _TxnTracker,
        kept_aborted: list[AbortedTxn],
        stats: CleanerStats,
    ) -> bytes | None:
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
            return _rebuild(h, recs, horizon, h.attributes | DELETE_HORIZON_FLAG_MASK)
        aborted = tracker.is_aborted(h)
        if h.base_offset >= end and not aborted:
            stats.messages_read += h.records_count
            stats.messages_written += h.records_count
            return raw
        recs = self._records(seg, pos, h)
        stats.messages_read += len(recs)
        omap = self.offset_map
        kept: list[_Record] = []
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
            last = _last_data_offset(plog, h.producer_id) if h.producer_id >= 0 else None
            if last == h.last_offset:
                # the producer's last batch: kept empty so its epoch and sequence survive
                return _rebuild(h, [], h.base_timestamp, h.attributes)
            return None
        if tombstones and not has_horizon:
            horizon = now_ms + delete_retention_ms
            return _rebuild(h, kept, horizon, h.attributes | DELETE_HORIZON_FLAG_MASK)
        return _rebuild(h, kept, h.base_timestamp, h.attributes)

    @staticmethod
    def group_segments(segs: list[_Segment], max_size: int) -> list[list[_Segment]]:
        """Kafka's ``groupSegmentsBySize``: consecutive segments whose logs together stay
        within ``max_size`` and whose offsets span less than 2^31."""
        groups: list[list[_Segment]] = []
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


class LogCleanerManager:
    """Which log to clean next and from where (Kafka's ``LogCleanerManager``): the
    first dirty offsets live in ``cleaner-offset-checkpoint`` in the log directory."""

    def __init__(self, dir_fd: int, failure_channel: LogDirFailureChannel | None = None) -> None:
        self._dir_fd = dir_fd
        #: where a checkpoint write's I/O error goes (as Kafka's ``updateCheckpoints``);
        #: without one it is raised
        self.failure_channel = failure_channel
        self.checkpoints: dict[tuple[str, int], int] = {}
        for line in read_checkpoint_file(dir_fd, CLEANER_OFFSET_CHECKPOINT_FILE) or []:
            try:
                topic, partition, offset = line.split(" ")
                self.checkpoints[(topic, int(partition))] = int(offset)
            except ValueError:
                continue
        #: partitions whose cleaning raised: skipped from then on (Kafka's uncleanable)
        self.uncleanable: set[tuple[str, int]] = set()

    def write_checkpoints(self) -> None:
        entries = [f"{t} {p} {o}" for (t, p), o in sorted(self.checkpoints.items())]
        try:
            write_checkpoint_file(self._dir_fd, CLEANER_OFFSET_CHECKPOINT_FILE, entries)
        except OSError as exc:
            if self.failure_channel is None:
                raise
            self.failure_channel.error(StorageError(f"{CLEANER_OFFSET_CHECKPOINT_FILE} write", exc))

    def update_checkpoint(self, tp: tuple[str, int], offset: int | None) -> None:
        if offset is None:
            self.checkpoints.pop(tp, None)
        else:
            self.checkpoints[tp] = offset
        self.write_checkpoints()

    def cleanable_range(self, tp: tuple[str, int], plog: Log, now_ms: WallMs) -> tuple[int, int]:
        """(first dirty, first uncleanable) offsets; an invalid checkpoint is reset to the
        log start offset."""
        start = plog.log_start_offset
        first_dirty = self.checkpoints.get(tp, start)
        if first_dirty < start or first_dirty > plog.log_end_offset:
            first_dirty = start
        segs = plog.segments
        bound = min(plog.last_stable_offset, plog.high_watermark, segs[-1].base_offset)
        lag = plog.config.min_compaction_lag_ms
        if lag > 0:
            for seg in segs:
                if seg.base_offset >= bound:
                    break
                if seg.largest_timestamp() > now_ms - lag:
                    bound = seg.base_offset
                    break
        return first_dirty, max(first_dirty, bound)

    def log_to_clean(self, tp: tuple[str, int], plog: Log, now_ms: WallMs) -> LogToClean:
        first_dirty, uncleanable = self.cleanable_range(tp, plog, now_ms)
        start = plog.log_start_offset
        clean = plog.bytes_between(start, first_dirty) if first_dirty > start else 0
        cleanable = plog.bytes_between(first_dirty, uncleanable) if uncleanable > first_dirty else 0
        ltc = LogToClean(tp, plog, first_dirty, uncleanable, clean, cleanable, log_start_offset=start)
        max_lag = plog.config.max_compaction_lag_ms
        if cleanable > 0 and max_lag < 2**62:
            for seg in plog.segments[:-1]:
                if seg.next_offset <= first_dirty or seg.base_offset >= uncleanable:
                    continue
                first_ts = seg.rolling_based_timestamp()
                if first_ts is not None and first_ts >= 0 and now_ms - first_ts > max_lag:
                    ltc.needs_compaction_now = True
                break
        return ltc

    def grab_filthiest(
        self, logs: Mapping[tuple[str, int], Log], now_ms: WallMs
    ) -> tuple[LogToClean | None, float]:
        """The eligible log with the highest dirty ratio, and the highest ratio of all
        compacted logs (the max_dirty_percent metric)."""
        best: LogToClean | None = None
        max_ratio = 0.0
        for tp, plog in logs.items():
            if not plog.config.compact or tp in self.uncleanable or plog.closed:
                continue
            ltc = self.log_to_clean(tp, plog, now_ms)
            max_ratio = max(max_ratio, ltc.cleanable_ratio)
            eligible = ltc.cleanable_bytes > 0 and (
                ltc.needs_compaction_now
                or ltc.cleanable_ratio > plog.config.min_cleanable_dirty_ratio
            )
            if eligible and (best is None or ltc.cleanable_ratio > best.cleanable_ratio):
                best = ltc
        return best, max_ratio


@dataclass
class LogCleaner:
    """The broker's cleaner: picks the filthiest compacted log, cleans it, moves its
    checkpoint, keeps Kafka's LogCleaner metrics."""

    manager: LogCleanerManager
    cleaner: Cleaner
    #: Kafka's metrics: max-dirty-percent, cleaner-recopy-percent, max-clean-time-secs,
    #: max-buffer-utilization-percent, time-since-last-run-ms (from last_run_ms)
    max_dirty_percent: int = 0
    recopy_percent: int = 0
    max_clean_time_secs: int = 0
    max_buffer_utilization_percent: int = 0
    last_run_ms: WallMs = _NEVER
    cleans: int = 0
    last_stats: CleanerStats | None = None
    #: the log a worker thread is cleaning (retention leaves it alone meanwhile)
    in_progress: Log | None = None
    stats_history: list[CleanerStats] = field(default_factory=list)

    def clean_once(self, logs: Mapping[tuple[str, int], Log], now_ms: WallMs) -> bool:
        """Clean the filthiest eligible log once, on this thread; False when none needed
        cleaning."""
        ltc = self.choose(logs, now_ms)
        if ltc is None:
            return False
        try:
            prepared = self.cleaner.prepare(ltc, now_ms)
        except Exception as exc:  # noqa: BLE001 - Kafka: any error makes it uncleanable
            self.failed(ltc, exc)
            return False
        return self.finish(ltc, prepared, now_ms)

    def choose(self, logs: Mapping[tuple[str, int], Log], now_ms: WallMs) -> LogToClean | None:
        """The log to clean now (None: none is due); updates max-dirty-percent."""
        ltc, max_ratio = self.manager.grab_filthiest(logs, now_ms)
        self.max_dirty_percent = int(100 * max_ratio)
        self.last_run_ms = now_ms
        return ltc

    def failed(self, ltc: LogToClean, exc: BaseException) -> None:
        """A clean raised: the partition is uncleanable from now on (Kafka's behaviour),
        unless the log changed under the clean (closed, or DeleteRecords moved its start
        and deleted segments the clean was reading)."""
        if ltc.log.closed:
            return
        if ltc.log.log_start_offset != ltc.log_start_offset:
            log.info("cleaning %s abandoned: its log start moved meanwhile (%r)", ltc.log, exc)
            return
        log.error("cleaning %s failed, marked uncleanable: %r", ltc.log, exc)
        assert isinstance(ltc.key, tuple)
        self.manager.uncleanable.add(ltc.key)

    def finish(self, ltc: LogToClean, prepared: PreparedClean, now_ms: WallMs) -> bool:
        """Swap a prepared clean in, move the checkpoint, update the metrics."""
        tp = ltc.key
        assert isinstance(tp, tuple)
        try:
            if not self.cleaner.commit(prepared, now_ms):
                log.info("cleaning %s abandoned: its segments changed meanwhile", ltc.log)
                return False
        except Exception as exc:  # noqa: BLE001 - Kafka: any error makes it uncleanable
            self.failed(ltc, exc)
            return False
        stats = prepared.stats
        self.manager.update_checkpoint(tp, stats.end_offset)
        self.cleans += 1
        self.last_stats = stats
        self.max_clean_time_secs = int(stats.elapsed_secs)
        self.max_buffer_utilization_percent = int(100 * stats.buffer_utilization)
        if stats.bytes_read:
            self.recopy_percent = int(100 * stats.bytes_written / stats.bytes_read)
        log.info(
            "cleaned %s up to offset %d: %d of %d message(s) kept, %d -> %d bytes",
            ltc.log, stats.end_offset, stats.messages_written, stats.messages_read,
            stats.bytes_read, stats.bytes_written,
        )  # fmt: skip
        return True
