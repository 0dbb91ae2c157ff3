"""One partition's log: a directory of segments, Kafka's ``UnifiedLog``/``LocalLog``.

Layout (Kafka's): ``<log.dirs>/<topic>-<partition>/`` holding
``{base_offset:020d}.log``/``.index``/``.timeindex`` per segment, Kafka's
``leader-epoch-checkpoint`` (:mod:`.leader_epoch`), and two small files of our own:
``recovery-point`` (a checkpoint, replaced atomically with tmp + fsync + rename) and
``clean-shutdown`` (written last by :meth:`Log.close`, removed by the next open). The
log start offset is kept as Kafka keeps it, in the log directory's
``log-start-offset-checkpoint`` (written by the LogManager, read back into
``Log(log_start_offset=...)``).

Plain synchronous object: no asyncio, no threads, no clock: every call that needs
the time takes ``now_ms``, a :data:`~tidegate.clock.WallMs` from its caller. One
clock for all of it, as Kafka's log reads ``Time.milliseconds()`` (the wall clock)
for each: LogAppendTime and timestamp validation, retention by time (record
timestamps), segment roll by time (a segment's creation against record timestamps)
and flush.ms. The one concession to an asyncio caller is the split flush
(:meth:`Log.begin_flush`, :meth:`FlushTicket.run` on a worker thread,
:meth:`Log.complete_flush`).

Durability contract: every offset below :attr:`Log.recovery_point` has been
fsynced. After a crash (kill -9 or power loss) the next open re-validates every
segment from the one holding the recovery point on (or all of them if the
checkpoint is lost), keeping every whole CRC-valid batch and cutting the log at
the first torn or corrupt one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from tidegate.clock import WallMs
from tidegate.errors import OffsetOutOfRangeError
from tidegate.record.control_records import (
    EndTransactionMarker,
    InvalidControlRecordError,
    end_transaction_marker_of,
)
from tidegate.record.file_region import FileRegion
from tidegate.record.record_batch import (
    CONTROL_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchTooLargeError,
    InvalidRecordError,
    assign_offsets,
)
from tidegate.utils import INT32_MAX
from tidegate.utils.files import TMP_MARK, fsync_dir, replace_file

from .checkpoint import CheckpointWrite
from .config import LogConfig
from .dir_failure import StorageError
from .index import AbortedTxn, TransactionIndex
from .leader_epoch import LeaderEpochFileCache
from .producer_state import CompletedTxn, ProducerStateManager
from .segment import LogSegment, TimestampAndOffset
from .validator import check_keys, needs_record_validation, validate_batches, validate_records

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "FlushTicket",
    "Log",
    "LogClosedError",
    "LogOffsetOutOfRangeError",
    "OffsetOutOfRangeError",
    "TimestampAndOffset",
    "parse_partition_dir",
    "partition_dir",
]

RECOVERY_POINT_FILE = "recovery-point"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
_TMP_MARK = TMP_MARK
_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
#: Kafka's suffixes for the log cleaner's replacement segments: written as ``.cleaned``,
#: renamed to ``.swap`` once complete (the commit point), renamed into place once the
#: segments they replace are gone.
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
_SWAP_RE = re.compile(r"^(\d{20})\.(log|txnindex)\.(cleaned|swap)$")

#: ListOffsets special timestamps understood by :meth:`Log.offset_for_timestamp`.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

_fdatasync = getattr(os, "fdatasync", os.fsync)


class LogOffsetOutOfRangeError(OffsetOutOfRangeError):
    """OFFSET_OUT_OF_RANGE: a read or seek outside [log_start_offset, log_end_offset]
    of this log (the shared :class:`~tidegate.errors.OffsetOutOfRangeError`, re-exported
    here, with the log's range)."""

    error_code = 1

    def __init__(self, message: str, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(RuntimeError):
    """The log was closed or deleted."""


def partition_dir(log_dir: Path, topic: str, partition: int) -> Path:
    """Kafka's partition directory: ``<log_dir>/<topic>-<partition>``."""
    return Path(log_dir) / f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """Inverse of :func:`partition_dir` on a directory name (topics may contain '-')."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {name!r}")
    return topic, int(part)


# -- checkpoint files -----------------------------------------------------------


def _read_checkpoint(dir_fd: int, name: str) -> int | None:
    """Read a checkpoint file; None if absent or unreadable (treated as 'unknown')."""
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        text = os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)
    lines = text.split("\n")
    if len(lines) < 2 or lines[0] != "0":
        return None
    try:
        value = int(lines[1])
    except ValueError:
        return None
    return value if value >= 0 else None


def _write_checkpoint(dir_fd: int, name: str, value: int) -> None:
    """Replace ``name`` atomically: write a tmp file, fsync it, rename it over.

    The directory itself is not fsynced: losing the rename leaves the previous,
    lower value, which is always safe (more recovery, never less).
    """
    replace_file(dir_fd, name, f"0\n{value}\n".encode("ascii"), sync_dir=False)


# -- public records --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Result of :meth:`Log.append` (what a ProduceResponse partition needs)."""

    first_offset: int
    last_offset: int
    #: The append time for a LogAppendTime topic, -1 for CreateTime (Produce's log_append_time_ms).
    log_append_time_ms: int
    num_records: int
    #: Largest maxTimestamp among the appended batches (the append time for LogAppendTime).
    max_timestamp: int
    #: Log start offset after the append (Produce v5+ log_start_offset).
    log_start_offset: int
    size_bytes: int
    #: The batch was a retry of one already in the log (same producer id, epoch and
    #: sequence range): nothing was appended and the offsets are the original's.
    duplicate: bool = False


class RecoveryPointCheckpoint:
    """The ``recovery-point`` file of one log, to write on any thread.

    Made on the log's thread by :meth:`Log.checkpoint_recovery_point`, which
    duplicates the directory descriptor so the log may be closed or deleted while
    :meth:`run` writes on a worker thread.
    """

    __slots__ = ("_dir_fd", "value")

    def __init__(self, dir_fd: int, value: int) -> None:
        self._dir_fd = dir_fd
        self.value = value

    def run(self) -> None:
        try:
            _write_checkpoint(self._dir_fd, RECOVERY_POINT_FILE, self.value)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile: nothing to recover any more
        finally:
            os.close(self._dir_fd)


class FlushTicket:
    """The fsync half of a flush, safe to run on a worker thread.

    Owns duplicated file descriptors (so the segments may be rolled, deleted or
    closed meanwhile) and closes them in :meth:`run` (or :meth:`discard`). The
    ``recovery-point`` checkpoint is not rewritten here: as in Kafka
    (``log.flush.offset.checkpoint.interval.ms``) it is written on a timer by
    :class:`RecoveryPointCheckpoint`, because rewriting a file per flush cost an
    acks=all producer more than the data fsync itself. A stale checkpoint only
    makes crash recovery scan more; flushed data is on disk either way.
    """

    __slots__ = (
        "_dir_fd",
        "_done",
        "_generation",
        "_log",
        "_segments",
        "_sync_dir",
        "fds",
        "synced",
        "target_offset",
    )

    def __init__(
        self,
        target_offset: int,
        fds: list[int],
        dir_fd: int | None,
        sync_dir: bool,
        log: Log | None,
        generation: int,
        segments: list[LogSegment],
    ) -> None:
        self.target_offset = target_offset
        self.fds = fds
        #: True once every fsync succeeded.
        self.synced = False
        self._dir_fd = dir_fd
        self._sync_dir = sync_dir
        self._log = log
        self._generation = generation
        self._segments = segments
        self._done = False

    def run(self) -> None:
        """fsync everything; always closes the descriptors."""
        if self._done:
            return
        try:
            for fd in self.fds:
                _fdatasync(fd)
            if self._sync_dir and self._dir_fd is not None:
                os.fsync(self._dir_fd)
            self.synced = True
        finally:
            self._close_fds()

    def discard(self) -> None:
        """Give the ticket up without syncing (closes the descriptors)."""
        if not self._done:
            self._close_fds()

    def _close_fds(self) -> None:
        self._done = True
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def __del__(self) -> None:
        # A ticket dropped without run()/discard() must not leak descriptors.
        if not self._done:
            with contextlib.suppress(OSError):
                self._close_fds()


# -- the log ---------------------------------------------------------------------


class Log:
    """One partition's log.

    Opening a directory loads its segments; without a clean-shutdown marker the
    segments from the recovery point on are recovered (CRC-checked, torn tail
    cut). Any segment whose indexes are missing or implausible is rebuilt.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: WallMs,
        *,
        leader_epoch: int = 0,
        log_start_offset: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.config = config
        #: The partition's leader epoch: stamped into every appended batch's
        #: partitionLeaderEpoch (as Kafka's leader does) and reported by Metadata,
        #: ListOffsets, Fetch and OffsetForLeaderEpoch. Stable: the latest epoch of the
        #: leader-epoch-checkpoint when there is one, else ``leader_epoch``.
        self.leader_epoch = leader_epoch
        #: epoch -> start offset (leader-epoch-checkpoint), set up by the load
        self.leader_epoch_cache: LeaderEpochFileCache
        #: the log start offset from the log directory's checkpoint (None: not in it)
        self._checkpointed_log_start_offset = log_start_offset
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._checkpointed_recovery_point = -1
        self._last_flush_ms = now_ms
        self._generation = 0
        self._dir_dirty = False
        self._pending_index_sync: list[LogSegment] = []
        self._closed = False
        #: Whether the directory was opened after a clean shutdown (for tests and metrics).
        self.had_clean_shutdown = False
        #: Bytes cut from torn or corrupt tails while opening.
        self.recovered_truncated_bytes = 0
        #: Idempotent producers' epochs and last sequences (docs/idempotence.md).
        self.producer_state = ProducerStateManager(self.directory)
        #: Batch headers replayed to rebuild the producer state when last (re)built.
        self.producer_state_replayed_batches = 0
        self._pending_snapshot_sync: list[Path] = []
        created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(self.directory.parent)
        self._dir_fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            self._load(now_ms)
        except BaseException:
            for seg in self._segments:
                seg.close()
            os.close(self._dir_fd)
            raise

    # -- loading ---------------------------------------------------------------

    def _load(self, now_ms: WallMs) -> None:
        d = self.directory
        dir_fd = self._dir_fd
        clean = os.path.exists(d / CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = clean
        self._recover_swaps()
        bases: set[int] = set()
        strays: list[str] = []
        for name in os.listdir(d):
            if _TMP_MARK in name:
                strays.append(name)
                continue
            m = _SEGMENT_RE.match(name)
            if m and m.group(2) == "log":
                bases.add(int(m.group(1)))
        for name in os.listdir(d):
            m = _SEGMENT_RE.match(name)
            if m and m.group(2) != "log" and int(m.group(1)) not in bases:
                strays.append(name)  # an index without its log (Kafka deletes those too)
        for name in strays:
            os.unlink(d / name)
        rp_ckpt = _read_checkpoint(dir_fd, RECOVERY_POINT_FILE)
        lso_ckpt = self._checkpointed_log_start_offset
        rp = rp_ckpt if rp_ckpt is not None else 0
        cache = self.leader_epoch_cache = LeaderEpochFileCache(dir_fd)
        interval = self.config.index_interval_bytes

        segs: list[LogSegment] = []
        try:
            for base in sorted(bases):
                segs.append(LogSegment.open(d, base, interval, now_ms))
        except BaseException:
            for s in segs:
                s.close()
            raise
        self._segments = segs

        i = 0
        #: base offset of the first recovered segment holding markers: its transaction
        #: index and those after it are rebuilt from the producer state (None: no need)
        rebuild_txn_index_from: int | None = None
        while i < len(segs):
            seg = segs[i]
            is_last = i == len(segs) - 1
            next_base = None if is_last else segs[i + 1].base_offset
            # Segments that may hold unflushed data: the one containing the
            # recovery point and everything after it.
            unflushed = next_base is None or next_base > rp
            if (not clean and unflushed) or not seg.load(next_base):
                truncated = seg.recover(cache)
                if seg.recovered_control_batches and rebuild_txn_index_from is None:
                    rebuild_txn_index_from = seg.base_offset
                self.recovered_truncated_bytes += truncated
                if truncated and not is_last:
                    # The log must stay contiguous: what followed the damage goes too.
                    for later in segs[i + 1 :]:
                        later.delete()
                    del segs[i + 1 :]
                    self._dir_dirty = True
            i += 1

        for seg in segs[:-1]:
            seg.release_index_fds()  # rebuilt indexes are synced; reopened if ever written

        lso = lso_ckpt if lso_ckpt is not None else 0
        if segs:
            lso = max(lso, segs[0].base_offset)
        if not segs:
            segs.append(LogSegment.create(d, lso, interval, now_ms))
            self._dir_dirty = True
        self._segments = segs
        self._bases = [s.base_offset for s in segs]
        self._log_start_offset = lso
        leo = segs[-1].next_offset
        if lso > leo:
            # Everything up to the checkpointed start offset is gone (e.g. an unflushed
            # tail lost after DeleteRecords/retention): start empty at the start offset.
            self._truncate_fully_and_start_at(lso, now_ms)
        leo = self.log_end_offset
        self._recovery_point = leo if clean else min(max(rp, 0), leo)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        # Kafka's LogLoader: the epochs must lie within [log start, log end], and the
        # leader (this node, at every open) assigns its epoch from the log end offset on.
        cache.truncate_from_end(leo)
        cache.truncate_from_start(self._log_start_offset)
        cache.flush()
        latest = cache.latest_epoch
        if latest is not None:
            self.leader_epoch = latest
        cache.assign(self.leader_epoch, leo)

        if clean:
            os.unlink(d / CLEAN_SHUTDOWN_FILE)
            self._dir_dirty = True
        if self._dir_dirty:
            # Before accepting writes, make the marker's removal (and any segment
            # deletion above) durable: a later crash must not look like a clean stop.
            os.fsync(dir_fd)
            self._dir_dirty = False
        if rebuild_txn_index_from is not None and rebuild_txn_index_from < self._segments[0].base_offset:
            rebuild_txn_index_from = None  # the recovered segments were all cut away
        self._load_producer_state(rebuild_txn_index_from)

    def _recover_swaps(self) -> None:
        """Kafka's LogLoader for the cleaner's leftovers: ``.cleaned`` files (a clean cut
        short before its commit point) are deleted; a ``.swap`` log (committed) replaces
        every segment whose base offset lies in its offset range, then takes its place."""
        d = self.directory
        cleaned: list[str] = []
        swaps: dict[int, list[str]] = {}
        for name in os.listdir(d):
            m = _SWAP_RE.match(name)
            if m is None:
                continue
            if m.group(3) == "cleaned":
                cleaned.append(name)
            else:
                swaps.setdefault(int(m.group(1)), []).append(name)
        for name in cleaned:
            os.unlink(d / name)
        for base, names in sorted(swaps.items()):
            log_swap = f"{base:020d}.log{SWAP_FILE_SUFFIX}"
            if log_swap not in names:
                for name in names:  # an index without its log: nothing to complete
                    os.unlink(d / name)
                continue
            end = _next_offset_of_file(d / log_swap, base)
            for name in os.listdir(d):
                m = _SEGMENT_RE.match(name)
                if m and base <= int(m.group(1)) < end:
                    os.unlink(d / name)
            for name in names:
                os.rename(d / name, d / name[: -len(SWAP_FILE_SUFFIX)])
        if cleaned or swaps:
            self._dir_dirty = True

    def replace_segments(
        self,
        old: list[LogSegment],
        log_data: bytes,
        aborted: list[AbortedTxn],
        now_ms: WallMs,
        on_step: Callable[[str], None] | None = None,
    ) -> LogSegment:
        """Swap ``old`` (consecutive inactive segments) for one segment holding
        ``log_data`` (their cleaned batches, offsets unchanged) and the ``aborted``
        transactions of its ``.txnindex``: Kafka's ``replaceSegments``. Steps, each
        durable before the next (``on_step`` is called after each: crash tests):
        ``cleaned`` (files written as ``.cleaned``, :meth:`write_cleaned`), ``swap``
        (renamed ``.swap``: from here a crash completes the replacement at load),
        ``deleted`` (old segments removed), ``renamed`` (the ``.swap`` suffix dropped);
        the indexes are then rebuilt (:meth:`swap_in`)."""
        self._check_open()
        self.write_cleaned(old[0].base_offset, log_data, aborted)
        if on_step is not None:
            on_step("cleaned")
        return self.swap_in(old, aborted, now_ms, on_step)

    def write_cleaned(self, base: int, log_data: bytes, aborted: list[AbortedTxn]) -> None:
        """The first step of :meth:`replace_segments` (:func:`write_cleaned_files`)."""
        write_cleaned_files(self.directory, base, log_data, aborted)

    def cleaned_writer(self, base: int, buffer_size: int) -> CleanedSegmentWriter:
        """A :class:`CleanedSegmentWriter` for a clean of this log. Touches no state of
        the log: the log cleaner uses it off the event loop."""
        return CleanedSegmentWriter(self.directory, base, buffer_size)

    def discard_cleaned(self, base: int) -> None:
        """Remove what :meth:`write_cleaned` wrote (the segments changed meanwhile)."""
        for name in (f"{base:020d}.log", f"{base:020d}.txnindex"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / (name + CLEANED_FILE_SUFFIX))

    def can_swap(self, old: list[LogSegment]) -> bool:
        """``old`` is still a run of consecutive inactive segments of this log."""
        if self._closed or not old or old[0] not in self._segments:
            return False
        i = self._segments.index(old[0])
        return self._segments[i : i + len(old)] == old and i + len(old) < len(self._segments)

    def swap_in(
        self,
        old: list[LogSegment],
        aborted: list[AbortedTxn],
        now_ms: WallMs,
        on_step: Callable[[str], None] | None = None,
    ) -> LogSegment:
        """The rest of :meth:`replace_segments` once the ``.cleaned`` files are written."""
        self._check_open()
        step = on_step or (lambda _name: None)
        if not self.can_swap(old):
            raise ValueError("replace_segments takes consecutive inactive segments")
        d = self.directory
        dir_fd = self._dir_fd
        base = old[0].base_offset
        i = self._segments.index(old[0])
        next_base = self._segments[i + len(old)].base_offset
        log_name = f"{base:020d}.log"
        txn_name = f"{base:020d}.txnindex"
        names = [log_name] + ([txn_name] if aborted else [])
        for name in names:
            os.rename(d / (name + CLEANED_FILE_SUFFIX), d / (name + SWAP_FILE_SUFFIX))
        os.fsync(dir_fd)
        step("swap")
        for seg in old:
            if seg in self._pending_index_sync:
                self._pending_index_sync.remove(seg)
            seg.delete()
        os.fsync(dir_fd)
        step("deleted")
        for name in names:
            os.rename(d / (name + SWAP_FILE_SUFFIX), d / name)
        os.fsync(dir_fd)
        step("renamed")
        seg = LogSegment.open(d, base, self.config.index_interval_bytes, now_ms)
        seg.recover()
        seg.txn_index.reset(aborted)
        seg.txn_index.flush()
        seg.set_next_offset(next_base)
        seg.release_index_fds()
        self._segments[i : i + len(old)] = [seg]
        self._bases[i : i + len(old)] = [base]
        return seg

    def _load_producer_state(self, rebuild_txn_index_from: int | None = None) -> None:
        """Kafka's rebuild: the newest snapshot at or below the log end offset, then the
        batches after it, from the log start offset on (batches DeleteRecords put below the
        start are not replayed; after a clean shutdown the snapshot is at the end and nothing
        is read). With ``rebuild_txn_index_from`` (recovered segments from there on, their
        transaction indexes emptied) the replay starts at a snapshot at or below it and
        re-indexes the transactions aborted from there on."""
        ps = self.producer_state
        leo = self.log_end_offset
        start = ps.load(leo, rebuild_txn_index_from)
        segs = self._segments
        scan_from = max(segs[0].base_offset, self._log_start_offset)
        if start is not None:
            scan_from = max(start, scan_from)
        replayed = 0
        if scan_from < leo:
            i = max(0, bisect_right(self._bases, scan_from) - 1)
            for seg in segs[i:]:
                reindex = rebuild_txn_index_from is not None and seg.base_offset >= rebuild_txn_index_from
                if reindex:
                    seg.txn_index.reset()
                for pos, h in seg.iter_batches_from(scan_from):
                    replayed += 1
                    if h.producer_id < 0:
                        continue
                    marker = None
                    if h.attributes & CONTROL_FLAG_MASK:
                        marker = self._marker_at(seg, pos, h.size)
                    completed = ps.replay_batch(h, marker)
                    if completed is not None:
                        if reindex and completed.is_aborted:
                            self._index_aborted(seg, completed)
                        ps.complete_txn(completed)
        self.producer_state_replayed_batches = replayed

    @staticmethod
    def _marker_at(seg: LogSegment, pos: int, size: int) -> EndTransactionMarker | None:
        try:
            return end_transaction_marker_of(seg.read_batch(pos, size))
        except InvalidControlRecordError:
            return None  # Kafka skips control records it cannot read

    def _index_aborted(self, seg: LogSegment, completed: CompletedTxn) -> None:
        seg.txn_index.append(AbortedTxn(
            completed.producer_id, completed.first_offset, completed.last_offset,
            self.producer_state.last_stable_offset(completed),
        ))  # fmt: skip

    # -- properties --------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Offsets below it are committed; a single-node broker commits on append."""
        return self._segments[-1].next_offset

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: below it every transaction is decided (committed or aborted);
        ``read_committed`` consumers read up to it. Without open transactions it is the
        high watermark; it never falls below the log start offset."""
        hw = self.high_watermark
        fuo = self.producer_state.first_unstable_offset()
        if fuo is None or fuo >= hw:
            return hw
        return max(fuo, self._log_start_offset)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        return self.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self._recovery_point

    flushed_offset = recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list)."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic settings (AlterConfigs); they take effect from the next call."""
        self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # -- append ------------------------------------------------------------------

    def append(
        self,
        records,
        now_ms: WallMs,
        *,
        from_client: bool = True,
        single_batch: bool = False,
        auto_flush: bool = True,
    ) -> AppendInfo:
        """Validate, assign offsets to and append a Produce partition's records.

        ``records`` is modified in place (offsets, leader epoch, LogAppendTime), so it
        must be writable (bytearray or writable memoryview); ``bytes`` is copied
        first. Validation errors (:mod:`tidegate.record.record_batch` exceptions) are
        raised before anything is written. Batches in another codec than the topic's
        ``compression.type`` are rebuilt in it first, and record timestamps are checked
        against ``message.timestamp.{before,after}.max.ms`` (:mod:`.validator`). The bytes are in the OS page cache when
        this returns. With ``auto_flush`` the log is fsynced here once
        ``flush.messages`` messages are unflushed; an asyncio caller passes
        ``auto_flush=False`` and checks :meth:`flush_due` to flush off-thread.
        See :func:`~tidegate.log.validator.validate_batches` for ``from_client``
        and ``single_batch``. An ``OSError`` is raised as :class:`.dir_failure.StorageError`:
        while writing the batch or rolling a segment it leaves the log as it was (the
        torn bytes are cut off); ``fatal`` when it came after the batch was written.
        """
        self._check_open()
        if isinstance(records, bytes):
            records = bytearray(records)
        config = self.config
        v = validate_batches(
            records,
            config.max_message_bytes,
            from_client=from_client,
            single_batch=single_batch,
        )
        if config.compact:
            check_keys(records, v, self.directory.name)
        if needs_record_validation(v, config, now_ms):
            # Kafka's LogValidator: record timestamps, and recompression to the topic's codec
            rebuilt = validate_records(records, v, config, now_ms)
            if rebuilt is not None:
                records = rebuilt
                v = validate_batches(records, INT32_MAX, from_client=from_client)
                for h, pos in zip(v.headers, v.positions, strict=True):
                    if h.size > config.max_message_bytes:
                        raise BatchTooLargeError(
                            f"Message batch size is {h.size} bytes in append topartition "
                            f"{self.directory.name} which exceeds the maximum configured size "
                            f"of {config.max_message_bytes}.",
                            pos,
                        )
        log_append_time = now_ms if config.message_timestamp_type == "LogAppendTime" else None
        max_ts = log_append_time if log_append_time is not None else v.max_timestamp
        first = self.log_end_offset
        markers = None if from_client else self._markers(records, v.positions, v.headers)
        # Idempotent and transactional producers: epoch, sequence and transaction checks
        # (nothing written on error); a retried batch is answered with the original's offsets.
        prepared = self.producer_state.prepare(
            v.headers, first, log_append_time, from_client=from_client, markers=markers
        )
        if prepared is not None and prepared.duplicate is not None:
            dup = prepared.duplicate
            return AppendInfo(
                first_offset=dup.first_offset,
                last_offset=dup.last_offset,
                log_append_time_ms=dup.timestamp if log_append_time is not None else -1,
                num_records=0,
                max_timestamp=dup.timestamp,
                log_start_offset=self._log_start_offset,
                size_bytes=0,
                duplicate=True,
            )
        last = first + v.num_records - 1
        try:
            segment = self._maybe_roll(v.size_bytes, max_ts, last, now_ms)
        except OSError as exc:
            raise StorageError("segment roll", exc) from exc
        assign_offsets(
            records,
            first,
            log_append_time,
            partition_leader_epoch=self.leader_epoch,
            positions=v.positions,
        )
        try:
            # On an error the segment cuts the torn bytes off (or raises
            # UnrecoverableWriteError, which takes the dir offline): the log is as it was.
            segment.append(records, last)
        except OSError as exc:
            raise StorageError("append", exc) from exc
        cache = self.leader_epoch_cache
        if cache.latest_epoch != self.leader_epoch:
            # Kafka's maybeAssignEpochStartOffset: the first batch of an epoch (after the
            # cache was emptied by a full truncation) records where the epoch starts.
            cache.assign(self.leader_epoch, first)
        try:
            if prepared is not None:
                ps = self.producer_state
                for completed in ps.commit(prepared):
                    if completed.is_aborted:
                        self._index_aborted(segment, completed)
                    ps.complete_txn(completed)
            if auto_flush and self.unflushed_messages >= config.flush_messages:
                self.flush()
                self._last_flush_ms = now_ms
        except OSError as exc:
            # the batch is in the log but its transaction index or its fsync failed:
            # the state on disk is unknown
            raise StorageError("append", exc, fatal=True) from exc
        return AppendInfo(
            first_offset=first,
            last_offset=last,
            log_append_time_ms=log_append_time if log_append_time is not None else -1,
            num_records=v.num_records,
            max_timestamp=max_ts,
            log_start_offset=self._log_start_offset,
            size_bytes=v.size_bytes,
        )

    @staticmethod
    def _markers(records, positions: list[int], headers: list) -> list[EndTransactionMarker | None] | None:
        """The end transaction marker of each control batch of a broker-made append."""
        if not any(h.attributes & CONTROL_FLAG_MASK for h in headers):
            return None
        out: list[EndTransactionMarker | None] = []
        with memoryview(records) as mv:
            for pos, h in zip(positions, headers, strict=True):
                if not h.attributes & CONTROL_FLAG_MASK:
                    out.append(None)
                    continue
                try:
                    out.append(end_transaction_marker_of(mv[pos : pos + h.size]))
                except InvalidControlRecordError as exc:
                    raise InvalidRecordError(f"invalid control batch: {exc}", pos) from exc
        return out

    def _should_roll(
        self, seg: LogSegment, size: int, max_ts: int, max_offset: int, now_ms: WallMs
    ) -> bool:
        """Kafka's ``LogSegment.shouldRoll`` (no roll jitter; never rolls an empty segment)."""
        if seg.size == 0:
            return False
        cfg = self.config
        return (
            seg.size > cfg.segment_bytes - size
            or seg.time_waited_for_roll(now_ms, max_ts)
            > (min(cfg.segment_ms, cfg.max_compaction_lag_ms) if cfg.compact else cfg.segment_ms)
            or max_offset - seg.base_offset > INT32_MAX
        )

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, now_ms: WallMs) -> LogSegment:
        seg = self._segments[-1]
        if self._should_roll(seg, size, max_ts, max_offset, now_ms):
            return self.roll(now_ms)
        return seg

    def roll(self, now_ms: WallMs) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        old = self._segments[-1]
        if old.size == 0:
            return old
        # Kafka snapshots the producer state at every roll, so recovery replays at most
        # the active segment. fsynced by the next flush (a torn one is skipped on load).
        self._pending_snapshot_sync.append(
            self.producer_state.take_snapshot(old.next_offset, sync=False)
        )
        old.on_become_inactive()
        if old.indexes_dirty:
            self._pending_index_sync.append(old)
        new = LogSegment.create(
            self.directory, old.next_offset, self.config.index_interval_bytes, now_ms
        )
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        return new

    # -- read ------------------------------------------------------------------

    @overload
    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = ..., max_offset: int | None = ...,
        region: Literal[False] = ...,
    ) -> bytes: ...
    @overload
    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = ..., max_offset: int | None = ...,
        region: bool,
    ) -> bytes | FileRegion: ...
    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None,
        region: bool = False,
    ) -> bytes | FileRegion:
        """Whole batches from the one containing ``offset``, up to ``max_bytes``.

        The first batch is returned even if larger than ``max_bytes`` unless
        ``min_one_batch`` is False (Kafka sets it for the first partition of a
        Fetch response only). Data comes from one segment per call. At the log end
        offset the result is ``b""``; outside [log_start_offset, log_end_offset]
        :class:`LogOffsetOutOfRangeError` is raised. Batches may start before
        ``offset`` (clients skip those records). ``max_offset`` (a batch boundary: the
        last stable offset for ``read_committed``) stops the read before the batch there.
        """
        self._check_open()
        leo = self.log_end_offset
        lso = self._log_start_offset
        if offset < lso or offset > leo:
            raise LogOffsetOutOfRangeError(
                f"offset {offset} is outside [{lso}, {leo}] for {self.directory.name}", lso, leo
            )
        if offset == leo or (max_offset is not None and offset >= max_offset):
            return b""
        segs = self._segments
        i = bisect_right(self._bases, offset) - 1
        i = max(i, 0)
        while i < len(segs):
            seg = segs[i]
            max_position = None
            if max_offset is not None and max_offset < seg.next_offset:
                found = seg.find_batch(max_offset)
                max_position = found[0] if found is not None else None
            data = (seg.read_region if region else seg.read)(
                offset, max_bytes, max_position=max_position, min_one_batch=min_one_batch
            )
            if data is not None:
                return data
            if max_position is not None:
                return b""
            i += 1
        return b""

    def read_region(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None
    ) -> FileRegion | bytes:
        """:meth:`read` as a :class:`FileRegion` of the segment file (``b""`` when there
        is nothing): the fetch path, which sends the bytes from the file."""
        return self.read(offset, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset, region=True)

    def fetch_upper_bound(self, offset: int) -> int:
        """The offset a fetch from ``offset`` reads below at most: the next segment's base
        offset, else the log end offset (Kafka's fallback for ``upperBoundOffset``)."""
        i = bisect_right(self._bases, offset)
        return self._bases[i] if i < len(self._bases) else self.log_end_offset

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Every aborted transaction a fetch from ``fetch_offset`` below ``upper_bound_offset``
        overlaps (:func:`collect_aborted_transactions`)."""
        self._check_open()
        return collect_aborted_transactions(self._segments, self._bases, fetch_offset, upper_bound_offset)

    def bytes_between(self, start: int, end: int) -> int:
        """Roughly the bytes of the batches from the one holding ``start`` to the one at
        ``end`` (a batch boundary); across segments, the rest of ``start``'s segment plus
        the segments before ``end``'s. What a parked ``read_committed`` fetch counts."""
        if end <= start:
            return 0
        segs = self._segments
        i = max(0, bisect_right(self._bases, start) - 1)
        j = max(0, bisect_right(self._bases, end) - 1) if end < self.log_end_offset else len(segs) - 1
        first = segs[i].find_batch(start)
        if first is None:
            return 0
        if i == j:
            last = segs[j].find_batch(end) if end < segs[j].next_offset else None
            return (last[0] if last is not None else segs[j].size) - first[0]
        total = segs[i].size - first[0]
        for seg in segs[i + 1 : j]:
            total += seg.size
        last = segs[j].find_batch(end) if end < segs[j].next_offset else None
        return total + (last[0] if last is not None else segs[j].size)

    # -- timestamps ------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets (Kafka's ``fetchOffsetByTimestamp``): ``(timestamp, offset,
        leader_epoch)`` for a target timestamp, or None (Kafka's "no offset").

        For ``timestamp >= 0``: the first record at or after the log start offset whose
        timestamp is >= ``timestamp``, exact to the record inside its batch (the batch is
        read and its records decoded), with that record's timestamp and its batch's
        partition leader epoch. The special values: -1 (latest) → the log end offset and
        the latest epoch, -2 (earliest) → the log start offset and the first epoch if it
        starts there, -3 → :meth:`max_timestamp_offset`.
        """
        self._check_open()
        cache = self.leader_epoch_cache
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self.log_end_offset, cache.latest_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            first = cache.earliest_entry()
            epoch = first.epoch if first is not None and first.start_offset <= self._log_start_offset else None
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset, epoch)
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        if timestamp < 0:
            raise ValueError(f"unsupported ListOffsets timestamp {timestamp}")
        lso = self._log_start_offset
        # Kafka searches only the first segment whose largest timestamp reaches the
        # target; the later ones are searched too when records in it that qualify lie
        # below the log start offset, so the answer is never a deleted record.
        for seg in self._segments:
            if seg.max_timestamp >= timestamp and seg.next_offset > lso:
                found = seg.find_offset_by_timestamp(timestamp, lso)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the first record carrying the largest timestamp
        of the log (Kafka's answer since KAFKA-16310: the segment with the largest
        timestamp, its first batch with that max timestamp, the first record in it with
        that timestamp), with its batch's leader epoch; None if no batch has one."""
        self._check_open()
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        return best.offset_of_max_timestamp_record()

    # -- flushing ----------------------------------------------------------------

    def begin_flush(self, up_to: int | None = None) -> FlushTicket:
        """First half of a flush, on the log's own thread: collect what to fsync.

        ``up_to`` (exclusive, default the log end offset) is the recovery point the
        ticket will establish. Pass the ticket's :meth:`FlushTicket.run` to a worker
        thread, then call :meth:`complete_flush` back on this thread.
        """
        self._check_open()
        leo = self.log_end_offset
        target = leo if up_to is None else max(0, min(up_to, leo))
        rp = self._recovery_point
        segs = self._segments
        i = max(0, bisect_right(self._bases, rp) - 1)
        chosen: list[LogSegment] = []
        fds: list[int] = []
        try:
            for seg in segs[i:]:
                needs_data = seg.next_offset > rp and seg.base_offset < target
                seg_fds = (
                    seg.dup_fds_for_flush(needs_data) if needs_data or seg.indexes_dirty else []
                )
                if seg_fds:
                    fds.extend(seg_fds)
                    chosen.append(seg)
            for seg in self._pending_index_sync:
                if seg not in chosen:
                    seg_fds = seg.dup_fds_for_flush(False)
                    if seg_fds:
                        fds.extend(seg_fds)
                        chosen.append(seg)
            self._pending_index_sync = []
            for path in self._pending_snapshot_sync:
                try:
                    fds.append(os.open(path, os.O_RDONLY))
                except FileNotFoundError:
                    pass  # deleted since (retention, truncation)
            self._pending_snapshot_sync = []
            sync_dir = self._dir_dirty
            self._dir_dirty = False
            dir_fd = os.dup(self._dir_fd) if (sync_dir or target > rp) else None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return FlushTicket(
            max(rp, target),
            fds,
            dir_fd,
            sync_dir,
            self if target > rp else None,
            self._generation,
            chosen,
        )

    def complete_flush(self, ticket: FlushTicket) -> bool:
        """Second half: advance the recovery point to the ticket's target once it ran.

        Returns False (and changes nothing) if the ticket did not sync or is stale
        (the log was truncated since it was issued).
        """
        if not ticket.synced or ticket._generation != self._generation or self._closed:
            return False
        self._recovery_point = max(self._recovery_point, ticket.target_offset)
        # Index files open lazily (Kafka's LazyIndex): once synced, every index
        # descriptor of the flushed segments closes, the active segment's too, and the
        # next index write reopens it. A broker of 5,000 idle partitions then holds one
        # descriptor per segment log (and one per partition directory), not four.
        for seg in ticket._segments:
            seg.release_index_fds()
        return True

    def checkpoint_recovery_point(self) -> RecoveryPointCheckpoint | None:
        """The checkpoint write to run (on any thread) if the recovery point moved since."""
        if self._closed or self._recovery_point == self._checkpointed_recovery_point:
            return None
        self._checkpointed_recovery_point = self._recovery_point
        return RecoveryPointCheckpoint(os.dup(self._dir_fd), self._recovery_point)

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below ``up_to`` (default: the log end offset) on this thread."""
        ticket = self.begin_flush(up_to)
        ticket.run()
        self.complete_flush(ticket)

    def flush_due(self, now_ms: WallMs) -> bool:
        """Whether ``flush.messages`` or ``flush.ms`` asks for a flush now."""
        unflushed = self.unflushed_messages
        if unflushed <= 0:
            return False
        cfg = self.config
        return unflushed >= cfg.flush_messages or now_ms - self._last_flush_ms >= cfg.flush_ms

    def maybe_flush_by_time(self, now_ms: WallMs) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush and data is unflushed."""
        self._check_open()
        if self.unflushed_messages > 0 and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            self._last_flush_ms = now_ms
            return True
        return False

    # -- retention ---------------------------------------------------------------

    def apply_retention(self, now_ms: WallMs) -> int:
        """Delete old segments as Kafka's ``deleteOldSegments``; return how many.

        In order: segments whose largest timestamp is more than ``retention.ms`` old;
        oldest segments while the log exceeds ``retention.bytes`` by at least the
        segment's size; segments wholly below the log start offset. Only a prefix of
        the log goes, never past the high watermark. If every segment is deletable
        the active one is rolled first (Kafka's behaviour), so the log becomes empty
        at its end offset. The log start offset moves to the first remaining segment.
        """
        self._check_open()
        cfg = self.config
        deleted = 0
        if cfg.delete and cfg.retention_ms >= 0:
            retention_ms = cfg.retention_ms
            deleted += self._delete_old_segments(
                lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms, now_ms
            )
        if cfg.delete and cfg.retention_bytes >= 0:
            diff = self.size_bytes - cfg.retention_bytes
            if diff > 0:
                remaining = [diff]

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    if remaining[0] - seg.size >= 0:
                        remaining[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_old_segments(over_size, now_ms)
        deleted += self._delete_old_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset, now_ms
        )
        return deleted

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], now_ms: WallMs
    ) -> int:
        segs = self._segments
        hw = self.high_watermark
        n = 0
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and seg.size == 0:
                break
            if upper > hw or not predicate(seg, nxt):
                break
            n += 1
        if n == 0:
            return 0
        if n == len(segs):
            self.roll(now_ms)
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for seg in doomed:
            if seg in self._pending_index_sync:
                self._pending_index_sync.remove(seg)
            seg.delete()
        self._dir_dirty = True
        self._set_log_start_offset(max(self._log_start_offset, self._segments[0].base_offset))
        # The producer state itself stays (KIP-360: producers outlive their batches until
        # producer.id.expiration.ms); snapshots of deleted segments go, the newest stays.
        self.producer_state.delete_snapshots_before(self._segments[0].base_offset)
        return n

    def _set_log_start_offset(self, offset: int) -> None:
        """Kafka's ``updateLogStartOffset`` plus the epoch cache's trim. The log directory's
        ``log-start-offset-checkpoint`` is the LogManager's to write; the segments below
        the new start are deleted by the caller (or the next retention pass)."""
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._recovery_point = max(self._recovery_point, offset)
        self.leader_epoch_cache.truncate_from_start(offset)

    def increment_log_start_offset(self, offset: int, now_ms: WallMs) -> int:
        """DeleteRecords (Kafka's ``maybeIncrementLogStartOffset``): move the log start
        offset up to ``offset`` (at most the high watermark; a lower offset changes
        nothing), trim the leader-epoch cache, and delete the segments now wholly below
        it. Returns the log start offset. The caller makes it durable
        (:meth:`LogManager.checkpoint_log_start_offsets`)."""
        self._check_open()
        if offset > self.high_watermark or offset < 0:
            raise LogOffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition "
                f"{self.directory.name} since it is larger than the high watermark "
                f"{self.high_watermark}"
                if offset >= 0
                else f"The offset {offset} for partition {self.directory.name} is not valid",
                self._log_start_offset,
                self.log_end_offset,
            )
        if offset > self._log_start_offset:
            self._set_log_start_offset(offset)
            self._delete_old_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset, now_ms
            )
        return self._log_start_offset

    def checkpoint_leader_epochs(self) -> CheckpointWrite | None:
        """The pending write of a trimmed leader-epoch-checkpoint (run it on any thread)."""
        if self._closed:
            return None
        return self.leader_epoch_cache.checkpoint()

    # -- producer state ----------------------------------------------------------

    def remove_expired_producers(self, now_ms: WallMs, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many."""
        self._check_open()
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    # -- truncation, close, delete --------------------------------------------------

    def truncate_to(self, offset: int, now_ms: WallMs) -> int:
        """Remove every batch ending at or after ``offset``; return the new log end offset.

        A batch containing ``offset`` is removed whole. Below the log start offset
        the log is emptied and restarted at ``offset``. Pending flush tickets become
        stale; the recovery point is lowered (and checkpointed) if needed.
        """
        self._check_open()
        if offset >= self.log_end_offset:
            return self.log_end_offset
        self._generation += 1
        if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
            self._truncate_fully_and_start_at(offset, now_ms)
            return offset
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            if seg in self._pending_index_sync:
                self._pending_index_sync.remove(seg)
            seg.delete()
            self._dir_dirty = True
        self._segments[-1].truncate_to(offset)
        leo = self.log_end_offset
        if self._recovery_point > leo:
            self._recovery_point = leo
            _write_checkpoint(self._dir_fd, RECOVERY_POINT_FILE, leo)
        self._log_start_offset = min(self._log_start_offset, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        # As Kafka: drop the snapshots past the new end and rebuild the producer state
        # from the newest one left plus the remaining batch headers.
        self.producer_state.delete_snapshots_after(leo)
        self._load_producer_state()
        return leo

    def _truncate_fully_and_start_at(self, offset: int, now_ms: WallMs) -> None:
        self._generation += 1
        for seg in self._segments:
            seg.delete()
        self._pending_index_sync = []
        seg = LogSegment.create(self.directory, offset, self.config.index_interval_bytes, now_ms)
        self._segments = [seg]
        self._bases = [offset]
        self._dir_dirty = True
        self._log_start_offset = offset
        self._recovery_point = offset
        _write_checkpoint(self._dir_fd, RECOVERY_POINT_FILE, offset)
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully()
        self._pending_snapshot_sync = []

    def close(self) -> None:
        """Flush everything, checkpoint, write the clean-shutdown marker, close files."""
        if self._closed:
            return
        self._segments[-1].on_become_inactive()
        self._pending_index_sync.append(self._segments[-1])
        self.flush()
        dir_fd = self._dir_fd
        _write_checkpoint(dir_fd, RECOVERY_POINT_FILE, self._recovery_point)
        self.leader_epoch_cache.flush()
        # The producer state at the end of the log, so the next open reads no batches.
        self.producer_state.take_snapshot(self.log_end_offset, sync=True)
        fd = os.open(
            CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd
        )
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(dir_fd)
        self._release()

    def abandon(self) -> None:
        """Close every file without flushing or marking a clean shutdown (an offline log
        dir, a close that failed): the next open recovers the log."""
        if not self._closed:
            self._generation += 1
            self._release()

    def delete(self) -> None:
        """Close every file and remove the partition directory (DeleteTopics)."""
        if not self._closed:
            self._generation += 1
            self._release()
        shutil.rmtree(self.directory, ignore_errors=True)
        try:
            fsync_dir(self.directory.parent)
        except OSError:
            pass

    def _release(self) -> None:
        self._closed = True
        for seg in self._segments:
            seg.close()
        os.close(self._dir_fd)
        self._dir_fd = -1

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset if self._segments else '?'}, "
            f"segments={len(self._segments)})"
        )


def _next_offset_of_file(path: Path, base: int) -> int:
    """The offset after the last whole batch of a log file (``base`` when it has none)."""
    end = base
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + HEADER_STRUCT.size <= len(data):
        h = HEADER_STRUCT.unpack_from(data, pos)
        size = h[1] + LOG_OVERHEAD
        if h[1] < 0 or pos + size > len(data):
            break
        end = h[0] + h[6] + 1
        pos += size
    return end


def write_cleaned_files(directory: Path, base: int, log_data: bytes, aborted: list[AbortedTxn]) -> None:
    """Write and fsync ``<base>.log.cleaned`` (and its ``.txnindex.cleaned``) in one go
    (:class:`CleanedSegmentWriter`)."""
    writer = CleanedSegmentWriter(directory, base)
    try:
        writer.write(log_data)
    except BaseException:
        writer.close()
        raise
    writer.finish(aborted)


class CleanedSegmentWriter:
    """``<base>.log.cleaned`` in a partition directory, written as a clean goes through
    at most ``buffer_size`` bytes held (the write half of log.cleaner.io.buffer.size),
    then fsynced with its ``.txnindex.cleaned`` by :meth:`finish`: what a clean leaves
    for the swap. Needs no open log, so a cleaner worker process uses it too."""

    def __init__(self, directory: Path, base: int, buffer_size: int = 262144) -> None:
        self.directory = Path(directory)
        self.base = base
        self.buffer_size = max(1, buffer_size)
        self.written = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        path = self.directory / (f"{base:020d}.log" + CLEANED_FILE_SUFFIX)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.written += len(data)
        if self._pending_bytes >= self.buffer_size:
            self._drain()

    def _drain(self) -> None:
        view = memoryview(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        while view:
            view = view[os.write(self._fd, view) :]

    def finish(self, aborted: list[AbortedTxn]) -> None:
        """The rest written and fsynced, the transaction index beside it, the directory
        fsynced."""
        try:
            self._drain()
            os.fsync(self._fd)
        finally:
            self.close()
        if aborted:
            xi = TransactionIndex(self.directory / (f"{self.base:020d}.txnindex" + CLEANED_FILE_SUFFIX), self.base)
            xi.reset(aborted)
            xi.flush()
            xi.close()
        fsync_dir(self.directory)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def collect_aborted_transactions(
    segments: Sequence[Any], bases: Sequence[int], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions`` over ``segments`` (each with a
    ``txn_index``; ``bases`` their base offsets): from the segment holding the fetch offset
    on, until a segment's index has an abort at or past the upper bound."""
    out: list[AbortedTxn] = []
    for seg in segments[max(0, bisect_right(bases, fetch_offset) - 1):]:
        idx = seg.txn_index
        if not len(idx):
            continue
        out.extend(idx.collect(fetch_offset, upper_bound_offset))
        if idx.entries()[-1].last_offset >= upper_bound_offset:
            break
    return out
