"""The indexes of a log segment, in Kafka's on-disk formats: sparse offset and time
indexes, and the aborted-transaction index (:class:`TransactionIndex`).

``NNNNNNNNNNNNNNNNNNNN.index``: 8-byte entries, relative offset (int32) and
file position (int32), big-endian. ``.timeindex``: 12-byte entries, timestamp
(int64) and relative offset (int32). Offsets are stored relative to the
segment's base offset, as Kafka does.

Both indexes keep their entries in memory (``array``s, searched with
``bisect``) and append new entries to the file with ``os.pwrite``. They do not
preallocate (Kafka mmaps a preallocated file and trims it on close), so a
file's size is always a whole number of entries unless something tore it.

An index is only a hint: a segment can always rebuild it by scanning its log
(:meth:`tidegate.log.segment.LogSegment.recover`). :meth:`sanity_check` decides
whether a loaded index can be trusted.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from tidegate.utils import INT32_MAX

__all__ = [
    "AbortedTxn",
    "CorruptIndexError",
    "InvalidIndexEntryError",
    "OffsetIndex",
    "TimeIndex",
    "TransactionIndex",
]

_BIG_ENDIAN_HOST = sys.byteorder == "big"


class InvalidIndexEntryError(Exception):
    """An index operation that would break the index's ordering."""


class CorruptIndexError(Exception):
    """An index file that cannot be trusted and must be rebuilt."""


def _load_file(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _strictly_increasing(a: array) -> bool:
    n = len(a)
    if n < 2:
        return True
    # Compare the array with itself shifted by one, at C speed.
    return all(map(int.__lt__, a[: n - 1], a[1:]))


def _non_decreasing(a: array) -> bool:
    n = len(a)
    if n < 2:
        return True
    return all(map(int.__le__, a[: n - 1], a[1:]))


class _Index:
    """Common file handling: an append-only file of fixed-size entries."""

    ENTRY_SIZE = 0

    __slots__ = ("_dirty", "_fd", "_missing", "base_offset", "path")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._fd: int | None = None
        #: Written since the last fsync.
        self._dirty = False
        #: The file did not exist when loaded.
        self._missing = False

    # -- file ------------------------------------------------------------------

    def _read_entries(self) -> bytes | None:
        """The file's bytes for ``load`` (None, and marked missing, if there is none).

        Raises :class:`CorruptIndexError` when the size is not a whole number of entries.
        """
        data = _load_file(self.path)
        if data is None:
            self._missing = True
            return None
        if len(data) % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path}: size {len(data)} is not a multiple of {self.ENTRY_SIZE}"
            )
        return data

    def _ensure_fd(self) -> int:
        fd = self._fd
        if fd is None:
            fd = self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return fd

    def _write_at(self, data, position: int) -> None:
        fd = self._ensure_fd()
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, position)
            view = view[n:]
            position += n
        self._dirty = True

    def _write_all(self, data: bytes) -> None:
        """Replace the file's content with ``data``. An empty index is created and closed
        at once (Kafka's LazyIndex): a new segment's indexes hold no descriptor until
        their first entry, so thousands of idle partitions do not hold three each."""
        if not data and self._fd is None:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            return  # nothing to fsync: the directory's sync makes the name durable
        fd = self._ensure_fd()
        os.ftruncate(fd, 0)
        if data:
            self._write_at(data, 0)
        self._dirty = True

    def _truncate_file(self, entries: int) -> None:
        os.ftruncate(self._ensure_fd(), entries * self.ENTRY_SIZE)
        self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def was_missing(self) -> bool:
        return self._missing

    def dup_fd_for_flush(self) -> int | None:
        """A duplicate of the file descriptor if there is anything to fsync, clearing dirty."""
        if not self._dirty or self._fd is None:
            return None
        self._dirty = False
        return os.dup(self._fd)

    def flush(self) -> None:
        if self._dirty and self._fd is not None:
            os.fsync(self._fd)
        self._dirty = False

    def release_fd(self) -> None:
        """Close the file descriptor (reopened on the next write). Unsynced writes stay dirty."""
        if self._fd is not None and not self._dirty:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass



class OffsetIndex(_Index):
    """Maps offsets to file positions. Entries: (last offset of a batch, batch position).

    Keys are strictly increasing, as are positions. :meth:`lookup` returns the
    position of the largest entry whose offset is <= the target (0 if none), the
    place to start scanning for the batch that contains the target.
    """

    ENTRY_SIZE = 8
    _ENTRY = struct.Struct(">ii")

    __slots__ = ("_pos", "_rel")

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._rel = array("i")
        self._pos = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int) -> OffsetIndex:
        """Read the file (if any). Raises :class:`CorruptIndexError` on a torn file."""
        idx = cls(path, base_offset)
        data = idx._read_entries()
        if data is None:
            return idx
        both = array("i")
        both.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            both.byteswap()
        idx._rel = both[0::2]
        idx._pos = both[1::2]
        return idx

    def sanity_check(self, log_size: int) -> None:
        """Raise :class:`CorruptIndexError` unless entries are ordered and inside the log."""
        rel, pos = self._rel, self._pos
        if not rel:
            return
        if rel[0] < 0 or pos[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative entry")
        if not _strictly_increasing(rel) or not _strictly_increasing(pos):
            raise CorruptIndexError(f"{self.path}: entries are not increasing")
        if pos[-1] >= log_size:
            raise CorruptIndexError(
                f"{self.path}: entry points at position {pos[-1]} beyond the log ({log_size})"
            )

    # -- queries ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rel)

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position)."""
        base = self.base_offset
        return [(base + r, p) for r, p in zip(self._rel, self._pos)]

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def lookup_entry(self, offset: int) -> tuple[int, int]:
        """The largest entry with offset <= ``offset``, or (base_offset, 0)."""
        rel = offset - self.base_offset
        rel = min(rel, INT32_MAX)
        i = bisect_right(self._rel, rel) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def lookup(self, offset: int) -> int:
        """File position of the largest entry with offset <= ``offset`` (0 if none)."""
        rel = offset - self.base_offset
        rel = min(rel, INT32_MAX)
        i = bisect_right(self._rel, rel) - 1
        return self._pos[i] if i >= 0 else 0

    # -- updates ---------------------------------------------------------------

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise InvalidIndexEntryError(
                f"offset index entry ({offset}, {position}) is not after the last entry "
                f"{self.last_entry()}"
            )
        if rel < 0 or rel > INT32_MAX:
            raise InvalidIndexEntryError(
                f"offset {offset} out of range for segment {self.base_offset}"
            )
        self._write_at(self._ENTRY.pack(rel, position), len(self._rel) * 8)
        self._rel.append(rel)
        self._pos.append(position)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset``."""
        i = bisect_left(self._rel, offset - self.base_offset)
        if i < len(self._rel):
            del self._rel[i:]
            del self._pos[i:]
            self._truncate_file(i)

    def reset(self, entries: list[tuple[int, int]] | None = None) -> None:
        """Replace every entry (absolute offsets) and rewrite the file."""
        base = self.base_offset
        rel = array("i", [o - base for o, _ in entries or ()])
        pos = array("i", [p for _, p in entries or ()])
        both = array("i", bytes(8 * len(rel)))
        both[0::2] = rel
        both[1::2] = pos
        if not _BIG_ENDIAN_HOST:
            both.byteswap()
        self._write_all(both.tobytes())
        self._rel, self._pos = rel, pos
        self._missing = False


class TimeIndex(_Index):
    """Maps timestamps to offsets. Entries: (max timestamp so far, offset of that batch).

    Timestamps are strictly increasing (an entry is only added when the segment's
    max timestamp grew, Kafka's ``maybeAppend``), offsets non-decreasing. The
    offset of an entry is the last offset of the batch that carried the timestamp.
    """

    ENTRY_SIZE = 12
    _ENTRY = struct.Struct(">qi")

    __slots__ = ("_rel", "_ts")

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._ts = array("q")
        self._rel = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        idx = cls(path, base_offset)
        data = idx._read_entries()
        if data is None:
            return idx
        pairs = list(cls._ENTRY.iter_unpack(data))
        idx._ts = array("q", [t for t, _ in pairs])
        idx._rel = array("i", [r for _, r in pairs])
        return idx

    def sanity_check(self, next_offset: int) -> None:
        """Raise :class:`CorruptIndexError` unless ordered and below ``next_offset``."""
        if not self._ts:
            return
        if self._rel[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative offset")
        if not _strictly_increasing(self._ts) or not _non_decreasing(self._rel):
            raise CorruptIndexError(f"{self.path}: entries are not increasing")
        if self.base_offset + self._rel[-1] >= next_offset:
            raise CorruptIndexError(
                f"{self.path}: entry for offset {self.base_offset + self._rel[-1]} "
                f"beyond the log end {next_offset}"
            )

    def __len__(self) -> int:
        return len(self._ts)

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (timestamp, absolute offset)."""
        base = self.base_offset
        return [(t, base + r) for t, r in zip(self._ts, self._rel)]

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Kafka's ``TimeIndex.lookup``: the last entry with timestamp <= ``timestamp``.

        Returns ``(timestamp, offset)``, or ``(-1, base_offset)`` if every entry is
        newer. Every batch before that entry's offset has a smaller max timestamp,
        so the first batch with maxTimestamp >= ``timestamp`` is found by scanning
        forward from there (which is what ``LogSegment.find_offset_by_timestamp`` does).
        """
        i = bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append (timestamp, offset) if ``timestamp`` is newer than the last entry."""
        if self._ts and timestamp <= self._ts[-1]:
            return False
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            raise InvalidIndexEntryError(
                f"time index offset {offset} is before the last entry {self.last_entry()}"
            )
        if rel < 0 or rel > INT32_MAX:
            raise InvalidIndexEntryError(
                f"offset {offset} out of range for segment {self.base_offset}"
            )
        self._write_at(self._ENTRY.pack(timestamp, rel), len(self._ts) * 12)
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset``."""
        i = bisect_left(self._rel, offset - self.base_offset)
        if i < len(self._ts):
            del self._ts[i:]
            del self._rel[i:]
            self._truncate_file(i)

    def reset(self, entries: list[tuple[int, int]] | None = None) -> None:
        """Replace every entry ((timestamp, absolute offset)) and rewrite the file."""
        base = self.base_offset
        pack = self._ENTRY.pack
        ents = entries or []
        self._write_all(b"".join(pack(t, o - base) for t, o in ents))
        self._ts = array("q", [t for t, _ in ents])
        self._rel = array("i", [o - base for _, o in ents])
        self._missing = False


class AbortedTxn(NamedTuple):
    """One entry of a ``.txnindex`` (Kafka's ``AbortedTxn``): an aborted transaction of
    ``producer_id`` from ``first_offset`` to its ABORT marker at ``last_offset``;
    ``last_stable_offset`` was the partition's LSO once the marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex(_Index):
    """The aborted-transaction index of a segment (Kafka's ``TransactionIndex``).

    ``NNNNNNNNNNNNNNNNNNNN.txnindex``: 34-byte entries, int16 version (0), int64
    producer id, int64 first offset, int64 last offset (the ABORT marker), int64 last
    stable offset, one per transaction aborted by a marker in this segment, in marker
    order (last offsets strictly increase). The file is created with its first entry,
    as Kafka's is, so most segments have none. Entries are kept in memory: a fetch at
    ``read_committed`` collects the ones it overlaps (:meth:`collect`).
    """

    ENTRY_SIZE = 34
    VERSION = 0
    _ENTRY = struct.Struct(">hqqqq")

    __slots__ = ("_entries", "_last_offsets")

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._entries: list[AbortedTxn] = []
        self._last_offsets = array("q")

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Read the file if there is one. Raises :class:`CorruptIndexError` on a torn file,
        an unknown entry version or last offsets that do not increase."""
        idx = cls(path, base_offset)
        data = _load_file(idx.path)
        if not data:
            return idx
        if len(data) % cls.ENTRY_SIZE:
            raise CorruptIndexError(f"{idx.path}: size {len(data)} is not a multiple of {cls.ENTRY_SIZE}")
        entries = []
        for version, *fields in cls._ENTRY.iter_unpack(data):
            if version != cls.VERSION:
                raise CorruptIndexError(f"{idx.path}: unknown entry version {version}")
            entries.append(AbortedTxn(*fields))
        idx._set(entries)
        if not _strictly_increasing(idx._last_offsets):
            raise CorruptIndexError(f"{idx.path}: last offsets are not increasing")
        return idx

    def _set(self, entries: list[AbortedTxn]) -> None:
        self._entries = entries
        self._last_offsets = array("q", [e.last_offset for e in entries])

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def sanity_check(self, next_offset: int) -> None:
        """Raise :class:`CorruptIndexError` for an entry outside the segment."""
        if self._entries and (
            self._entries[0].last_offset < self.base_offset or self._entries[-1].last_offset >= next_offset
        ):
            raise CorruptIndexError(f"{self.path}: an entry lies outside the segment")

    def append(self, txn: AbortedTxn) -> None:
        if self._last_offsets and txn.last_offset <= self._last_offsets[-1]:
            raise InvalidIndexEntryError(
                f"aborted transaction ending at {txn.last_offset} is not after the last one "
                f"({self._last_offsets[-1]}) in {self.path}"
            )
        self._write_at(self._ENTRY.pack(self.VERSION, *txn), len(self._entries) * self.ENTRY_SIZE)
        self._entries.append(txn)
        self._last_offsets.append(txn.last_offset)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a fetch from ``fetch_offset`` reading up to (not
        including) ``upper_bound_offset`` overlaps: last offset >= fetch offset and first
        offset < upper bound (Kafka's ``collectAbortedTxns``)."""
        i = bisect_left(self._last_offsets, fetch_offset)
        return [e for e in self._entries[i:] if e.first_offset < upper_bound_offset]

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``."""
        i = bisect_left(self._last_offsets, offset)
        if i < len(self._entries):
            self._set(self._entries[:i])
            if i:
                self._truncate_file(i)
            else:
                self.delete()

    def reset(self, entries: list[AbortedTxn] | None = None) -> None:
        """Replace every entry and rewrite the file (removed when there are none)."""
        ents = list(entries or ())
        if ents:
            pack = self._ENTRY.pack
            self._write_all(b"".join(pack(self.VERSION, *e) for e in ents))
        else:
            self.delete()
        self._set(ents)
        self._missing = False
