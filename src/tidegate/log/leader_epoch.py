"""The leader epochs of one partition and where each began: Kafka's ``LeaderEpochFileCache``.

Every batch the leader appends is stamped with the partition's leader epoch
(``partitionLeaderEpoch`` in the batch header); the cache records, for each epoch, the
offset of its first batch. OffsetForLeaderEpoch answers from it (the end offset of an
epoch is the start of the next one, or the log end offset for the latest), and so does
a Fetch that carries ``last_fetched_epoch`` (KIP-320 truncation detection). It lives in
``leader-epoch-checkpoint`` in the partition directory (Kafka's format: ``epoch
start_offset`` lines under a version and a count).

As in Kafka, a new epoch (:meth:`LeaderEpochFileCache.assign`) is written at once, so the
file never misses an entry; trimming from the start (the log start offset moved) or the
end (truncation) only marks the file dirty and the write happens later on a worker
thread (:meth:`checkpoint`): a stale file is trimmed again the next time the log opens.
tidegate's single node keeps one stable epoch per partition, so the file holds one entry
in practice.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import NamedTuple

from .checkpoint import CheckpointWrite, CheckpointWriter, read_checkpoint_file

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epoch → start offset, both increasing, for the partition directory ``dir_fd``
    (borrowed: the log owns it)."""

    __slots__ = ("_dir_fd", "_dirty", "_entries", "_epochs", "_writer")

    def __init__(self, dir_fd: int) -> None:
        self._dir_fd = dir_fd
        self._writer = CheckpointWriter(LEADER_EPOCH_CHECKPOINT_FILE)
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []  # the entries' epochs, for bisect
        self._dirty = False
        lines = read_checkpoint_file(dir_fd, LEADER_EPOCH_CHECKPOINT_FILE)
        for line in lines or ():
            try:
                epoch, start = (int(x) for x in line.split())
            except ValueError:
                # Kafka fails the log dir on a malformed line; a lost entry here only
                # means OffsetForLeaderEpoch knows less, so start from what was read.
                break
            self._assign(epoch, start)
        self._dirty = False

    # -- reading ------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (the largest known epoch <= ``requested_epoch``, the
        start of the next higher epoch), or (requested, LEO) for the latest epoch;
        (-1, -1) for an undefined or unknown-higher epoch; (requested, start of the first
        epoch) when it is below every known epoch."""
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset`` (Kafka's ``epochForOffset``)."""
        previous = None
        for e in self._entries:
            if e.start_offset == offset:
                return e.epoch
            if e.start_offset > offset:
                return previous
            previous = e.epoch
        return previous

    # -- changing -------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` and write the file at once if
        that is new (Kafka's ``assign``). Entries that would break monotonicity (an
        epoch or start offset at or above the new one) go first."""
        if not self._assign(epoch, start_offset):
            return False
        self._writer.write(self._dir_fd, self._lines())
        self._dirty = False
        return True

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid partition leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and entries[-1].epoch == epoch and entries[-1].start_offset <= start_offset:
            return False
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
            self._epochs.pop()
        entries.append(EpochEntry(epoch, start_offset))
        self._epochs.append(epoch)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start offset moved to ``start_offset``: drop the epochs that ended
        before it and move the start of the one holding it there (Kafka's
        ``truncateFromStart``; written later by :meth:`checkpoint`)."""
        entries = self._entries
        n = bisect_right([e.start_offset for e in entries], start_offset)
        if n == 0:
            return False
        kept = EpochEntry(entries[n - 1].epoch, start_offset)
        if n == 1 and entries[0] == kept:
            return False
        del entries[:n]
        del self._epochs[:n]
        entries.insert(0, kept)
        self._epochs.insert(0, kept.epoch)
        self._dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut at ``end_offset``: drop the epochs starting at or after it
        (Kafka's ``truncateFromEnd``; written later by :meth:`checkpoint`)."""
        n = bisect_left([e.start_offset for e in self._entries], end_offset)
        if end_offset < 0 or n == len(self._entries):
            return False
        del self._entries[n:]
        del self._epochs[n:]
        self._dirty = True
        return True

    def clear(self) -> None:
        """Forget every epoch and write the empty file (Kafka's ``clearAndFlush``)."""
        self._entries.clear()
        self._epochs.clear()
        self._writer.write(self._dir_fd, [])
        self._dirty = False

    # -- persistence ----------------------------------------------------------------
    def _lines(self) -> list[str]:
        return [f"{e.epoch} {e.start_offset}" for e in self._entries]

    @property
    def dirty(self) -> bool:
        return self._dirty

    def checkpoint(self) -> CheckpointWrite | None:
        """The pending write of a trimmed cache, to run on any thread; None if clean."""
        if not self._dirty:
            return None
        self._dirty = False
        # the partition may be deleted before the ticket runs: then there is nothing to write
        return self._writer.ticket(self._dir_fd, self._lines(), missing_ok=True)

    def flush(self) -> None:
        """Write a trimmed cache now (on this thread)."""
        if self._dirty:
            self._writer.write(self._dir_fd, self._lines())
            self._dirty = False
