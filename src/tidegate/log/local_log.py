"""A partition directory's segments: Kafka's ``LocalLog``.

Layout (Kafka's): ``<log.dirs>/<topic>-<partition>/`` holding
``{base_offset:020d}.log``/``.index``/``.timeindex``/``.txnindex`` per segment and two
small files of our own: ``recovery-point`` (a checkpoint, replaced atomically with tmp +
fsync + rename) and ``clean-shutdown`` (written last by :meth:`LocalLog.close`, removed
by the next open).

:class:`LocalLog` holds the segments, oldest first, and what is true of the files: the
log end offset, the recovery point (every offset below it has been fsynced), and
whether the directory itself needs an fsync. It rolls, reads, flushes, truncates and
deletes segments; what those mean for offsets, producers and epochs is
:class:`~tidegate.log.log.Log`'s (Kafka's ``UnifiedLog``), which holds one. Opening a
directory is :class:`~tidegate.log.log_loader.LogLoader`'s; replacing segments with
cleaned ones is :mod:`.segment_swap`'s.

The one concession to an asyncio caller is the split flush (:meth:`LocalLog.begin_flush`,
:meth:`FlushTicket.run` on a worker thread, :meth:`LocalLog.complete_flush`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidegate.clock import WallMs
from tidegate.record.file_region import FileRegion
from tidegate.utils.files import fsync_dir, open_dir, replace_file

from .config import LogConfig
from .index import AbortedTxn
from .segment import LogSegment

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_FILE",
    "FlushTicket",
    "LocalLog",
    "LogClosedError",
    "RecoveryPointCheckpoint",
    "collect_aborted_transactions",
    "parse_partition_dir",
    "partition_dir",
]

RECOVERY_POINT_FILE = "recovery-point"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
#: A segment's files: ``{base_offset:020d}.log`` and its indexes.
SEGMENT_FILE_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")

_fdatasync = getattr(os, "fdatasync", os.fsync)


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


# -- the recovery-point file ------------------------------------------------------


def read_recovery_point(dir_fd: int) -> int | None:
    """The ``recovery-point`` checkpoint; None if absent or unreadable ('unknown')."""
    try:
        fd = os.open(RECOVERY_POINT_FILE, os.O_RDONLY, dir_fd=dir_fd)
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


def write_recovery_point(dir_fd: int, value: int) -> None:
    """Replace ``recovery-point`` atomically: write a tmp file, fsync it, rename it over.

    The directory itself is not fsynced: losing the rename leaves the previous,
    lower value, which is always safe (more recovery, never less).
    """
    replace_file(dir_fd, RECOVERY_POINT_FILE, f"0\n{value}\n".encode("ascii"), sync_dir=False)


class RecoveryPointCheckpoint:
    """The ``recovery-point`` file of one log, to write on any thread.

    Made on the log's thread by :meth:`LocalLog.checkpoint_recovery_point`, which
    duplicates the directory descriptor so the log may be closed or deleted while
    :meth:`run` writes on a worker thread.
    """

    __slots__ = ("_dir_fd", "value")

    def __init__(self, dir_fd: int, value: int) -> None:
        self._dir_fd = dir_fd
        self.value = value

    def run(self) -> None:
        try:
            write_recovery_point(self._dir_fd, self.value)
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
        generation: int,
        segments: list[LogSegment],
    ) -> None:
        self.target_offset = target_offset
        self.fds = fds
        #: True once every fsync succeeded.
        self.synced = False
        self._dir_fd = dir_fd
        self._sync_dir = sync_dir
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


def collect_aborted_transactions(
    segments: Sequence[Any], bases: Sequence[int], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Kafka's ``LocalLog.collectAbortedTransactions`` over ``segments`` (each with a
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


class LocalLog:
    """The segments of one partition directory (Kafka's ``LocalLog``).

    Made empty (the directory created if needed, and its descriptor opened); the
    :class:`~tidegate.log.log_loader.LogLoader` then hands it the segments it loaded
    (:meth:`loaded`).
    """

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = Path(directory)
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._recovery_point = 0
        self._checkpointed_recovery_point = -1
        #: moved by every truncation, abandon and delete: flush tickets issued before are stale
        self._generation = 0
        #: a segment was created, renamed or deleted since the directory was last fsynced
        self.dir_dirty = False
        self._pending_index_sync: list[LogSegment] = []
        #: files written without fsync (the producer-state snapshots) the next flush syncs
        self._pending_file_sync: list[Path] = []
        self._closed = False
        created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(self.directory.parent)
        self.dir_fd = open_dir(self.directory)

    def loaded(self, segments: list[LogSegment], recovery_point: int) -> None:
        """Take the segments a load found (at least one) and the recovery point."""
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._recovery_point = recovery_point

    # -- properties --------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self._recovery_point

    def update_recovery_point(self, offset: int) -> None:
        """Raise the recovery point to ``offset`` (the log start moved past it)."""
        self._recovery_point = max(self._recovery_point, offset)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list)."""
        return list(self._segments)

    @property
    def bases(self) -> list[int]:
        """The segments' base offsets, oldest first (the list itself: do not change it)."""
        return self._bases

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def segment_index(self, offset: int) -> int:
        """The index of the segment holding ``offset`` (0 below the first)."""
        return max(0, bisect_right(self._bases, offset) - 1)

    # -- roll ------------------------------------------------------------------------

    def roll(self, now_ms: WallMs) -> LogSegment:
        """A new active segment at the log end offset; the old one's indexes are synced
        by the next flush."""
        old = self._segments[-1]
        old.on_become_inactive()
        if old.indexes_dirty:
            self._pending_index_sync.append(old)
        new = LogSegment.create(
            self.directory, old.next_offset, self.config.index_interval_bytes, now_ms
        )
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self.dir_dirty = True
        return new

    def sync_on_next_flush(self, path: Path) -> None:
        """fsync ``path`` (a file written without it) with the next flush."""
        self._pending_file_sync.append(path)

    # -- read ------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool, max_offset: int | None, region: bool
    ) -> bytes | FileRegion:
        """Whole batches from the one containing ``offset`` (within the log: the caller
        checked), from one segment (see :meth:`Log.read <tidegate.log.log.Log.read>`)."""
        segs = self._segments
        i = self.segment_index(offset)
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

    def fetch_upper_bound(self, offset: int) -> int:
        """The offset a fetch from ``offset`` reads below at most: the next segment's base
        offset, else the log end offset (Kafka's fallback for ``upperBoundOffset``)."""
        i = bisect_right(self._bases, offset)
        return self._bases[i] if i < len(self._bases) else self.log_end_offset

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Every aborted transaction a fetch from ``fetch_offset`` below ``upper_bound_offset``
        overlaps (:func:`collect_aborted_transactions`)."""
        return collect_aborted_transactions(self._segments, self._bases, fetch_offset, upper_bound_offset)

    def bytes_between(self, start: int, end: int) -> int:
        """Roughly the bytes of the batches from the one holding ``start`` to the one at
        ``end`` (a batch boundary); across segments, the rest of ``start``'s segment plus
        the segments before ``end``'s. What a parked ``read_committed`` fetch counts."""
        if end <= start:
            return 0
        segs = self._segments
        i = self.segment_index(start)
        j = self.segment_index(end) if end < self.log_end_offset else len(segs) - 1
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

    # -- flushing ----------------------------------------------------------------

    def begin_flush(self, up_to: int | None = None) -> FlushTicket:
        """First half of a flush, on the log's own thread: collect what to fsync.

        ``up_to`` (exclusive, default the log end offset) is the recovery point the
        ticket will establish. Pass the ticket's :meth:`FlushTicket.run` to a worker
        thread, then call :meth:`complete_flush` back on this thread.
        """
        self.check_open()
        leo = self.log_end_offset
        target = leo if up_to is None else max(0, min(up_to, leo))
        rp = self._recovery_point
        chosen: list[LogSegment] = []
        fds: list[int] = []
        try:
            for seg in self._segments[self.segment_index(rp) :]:
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
            for path in self._pending_file_sync:
                try:
                    fds.append(os.open(path, os.O_RDONLY))
                except FileNotFoundError:
                    pass  # deleted since (retention, truncation)
            self._pending_file_sync = []
            sync_dir = self.dir_dirty
            self.dir_dirty = False
            dir_fd = os.dup(self.dir_fd) if (sync_dir or target > rp) else None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return FlushTicket(max(rp, target), fds, dir_fd, sync_dir, self._generation, chosen)

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

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below ``up_to`` (default: the log end offset) on this thread."""
        ticket = self.begin_flush(up_to)
        ticket.run()
        self.complete_flush(ticket)

    def checkpoint_recovery_point(self) -> RecoveryPointCheckpoint | None:
        """The checkpoint write to run (on any thread) if the recovery point moved since."""
        if self._closed or self._recovery_point == self._checkpointed_recovery_point:
            return None
        self._checkpointed_recovery_point = self._recovery_point
        return RecoveryPointCheckpoint(os.dup(self.dir_fd), self._recovery_point)

    # -- deleting and replacing segments --------------------------------------------

    def _forget(self, seg: LogSegment) -> None:
        """Delete a segment no longer in the list (its pending index sync too)."""
        if seg in self._pending_index_sync:
            self._pending_index_sync.remove(seg)
        seg.delete()

    def remove_and_delete_segments(self, n: int) -> None:
        """Delete the ``n`` oldest segments (Kafka's ``removeAndDeleteSegments``); at
        least one stays."""
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for seg in doomed:
            self._forget(seg)
        self.dir_dirty = True

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put ``new`` where the consecutive segments ``old`` were, deleting them."""
        i = self._segments.index(old[0])
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]

    def forget_segments(self, old: list[LogSegment]) -> None:
        """Delete the files of ``old`` (still in the list until :meth:`replace_segments`)."""
        for seg in old:
            self._forget(seg)

    def next_base_after(self, old: list[LogSegment]) -> int | None:
        """The base offset of the segment after the consecutive segments ``old``, None
        when ``old`` is not such a run of inactive segments of this log (any more)."""
        if self._closed or not old or old[0] not in self._segments:
            return None
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != old or i + len(old) >= len(self._segments):
            return None
        return self._bases[i + len(old)]

    # -- truncation ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch ending at or after ``offset`` (above the first segment's
        base); return the new log end offset. The recovery point is lowered (and
        checkpointed) if needed; pending flush tickets become stale."""
        self._generation += 1
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            self._forget(seg)
            self.dir_dirty = True
        self._segments[-1].truncate_to(offset)
        leo = self.log_end_offset
        if self._recovery_point > leo:
            self._recovery_point = leo
            write_recovery_point(self.dir_fd, leo)
        return leo

    def truncate_fully_and_start_at(self, offset: int, now_ms: WallMs) -> None:
        """Delete every segment and start empty at ``offset`` (the recovery point too)."""
        self._generation += 1
        for seg in self._segments:
            seg.delete()
        self._pending_index_sync = []
        seg = LogSegment.create(self.directory, offset, self.config.index_interval_bytes, now_ms)
        self._segments = [seg]
        self._bases = [offset]
        self.dir_dirty = True
        self._recovery_point = offset
        write_recovery_point(self.dir_fd, offset)
        self._pending_file_sync = []

    # -- close, delete -----------------------------------------------------------------

    def flush_for_close(self) -> None:
        """The first half of a clean close: everything fsynced, the recovery point
        checkpointed."""
        self._segments[-1].on_become_inactive()
        self._pending_index_sync.append(self._segments[-1])
        self.flush()
        write_recovery_point(self.dir_fd, self._recovery_point)

    def mark_clean_shutdown(self) -> None:
        """The last half: the ``clean-shutdown`` marker made durable, the files closed."""
        dir_fd = self.dir_fd
        fd = os.open(
            CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd
        )
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(dir_fd)
        self.release()

    def abandon(self) -> None:
        """Close every file without flushing or marking a clean shutdown."""
        if not self._closed:
            self._generation += 1
            self.release()

    def delete(self) -> None:
        """Close every file and remove the partition directory."""
        self.abandon()
        shutil.rmtree(self.directory, ignore_errors=True)
        try:
            fsync_dir(self.directory.parent)
        except OSError:
            pass

    def release(self) -> None:
        """Close every file (a kill -9 in tests: nothing flushed, nothing marked)."""
        self._closed = True
        for seg in self._segments:
            seg.close()
        os.close(self.dir_fd)
        self.dir_fd = -1
