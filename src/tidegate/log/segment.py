"""One log segment: ``{base_offset:020d}.log`` with its offset, time and transaction indexes.

Mirrors Kafka's ``LogSegment``. The log file is a concatenation of v2 record
batches whose offsets have been assigned; the segment appends to it with
``os.pwrite`` (so the bytes are in the page cache when ``append`` returns),
reads whole batches with ``os.pread``, and keeps two sparse indexes: an entry
every ``index_interval_bytes`` of log, per batch as in Kafka 3.7+ (offset index
entry = (batch last offset, batch position); time index entry = (max timestamp
so far, last offset of the batch that carried it)). The ``.txnindex`` holds the
transactions aborted by markers in this segment; the log fills it (it needs the
partition's producer state), the segment keeps it with its other files.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tidegate.clock import WallMs
from tidegate.record.file_region import FileRegion
from tidegate.record.record_batch import (
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    RecordBatchError,
    check_batch_contents,
    check_framing,
)
from tidegate.record.records import decode_batch_records, iter_decoded_batches
from tidegate.utils import INT32_MAX

from .dir_failure import UnrecoverableWriteError
from .index import CorruptIndexError, OffsetIndex, TimeIndex, TransactionIndex

if TYPE_CHECKING:
    from .leader_epoch import LeaderEpochFileCache

__all__ = [
    "INDEX_FILE_SUFFIX",
    "LOG_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "LogSegment",
    "TimestampAndOffset",
    "log_file_path",
    "offset_index_file_path",
    "time_index_file_path",
    "txn_index_file_path",
]

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"

_unpack_header = HEADER_STRUCT.unpack_from
_make_header = BatchHeader._make
#: Bytes read at a time when scanning batch headers from the file.
_SCAN_CHUNK = 8192
_fdatasync = getattr(os, "fdatasync", os.fsync)


def _file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def log_file_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / _file_name(base_offset, LOG_FILE_SUFFIX)


def offset_index_file_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / _file_name(base_offset, INDEX_FILE_SUFFIX)


def time_index_file_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / _file_name(base_offset, TIME_INDEX_FILE_SUFFIX)


def txn_index_file_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / _file_name(base_offset, TXN_INDEX_FILE_SUFFIX)


class TimestampAndOffset(NamedTuple):
    """A ListOffsets answer (Kafka's ``TimestampAndOffset``): the record's timestamp (-1
    for the earliest/latest offsets), its offset, and its batch's partition leader epoch
    (None when unknown)."""

    timestamp: int
    offset: int
    leader_epoch: int | None



def iter_batch_headers(fd: int, path: object, start: int, end: int) -> Iterator[tuple[int, tuple]]:
    """Yield (position, raw header tuple) for each batch of the log file ``fd`` in
    [start, end), by chunked pread.

    Checks only the framing (lengths and magic); raises CorruptRecordError on a
    torn or impossible batch.
    """
    buf = b""
    buf_start = start
    pos = start
    while pos < end:
        rel = pos - buf_start
        if rel < 0 or rel + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"{path}: truncated batch header at position {pos}", pos)
        h = _unpack_header(buf, rel)
        length = h[1]
        if length < MIN_BATCH_LENGTH or h[3] != 2 or pos + length + LOG_OVERHEAD > end:
            raise CorruptRecordError(
                f"{path}: invalid batch at position {pos} (length {length}, magic {h[3]})", pos
            )
        yield pos, h
        pos += length + LOG_OVERHEAD


def _pwrite_all(fd: int, data, position: int) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, position)
            view = view[n:]
            position += n
    finally:
        view.release()


class LogSegment:
    """A segment file and its indexes. Not thread-safe; see ``Log`` for flushing off-thread."""

    __slots__ = (
        "_bytes_since_index",
        "_fd",
        "_index_problem",
        "_max_ts",
        "_next_offset",
        "_offset_of_max_ts",
        "_rolling_ts",
        "_size",
        "base_offset",
        "created_ms",
        "directory",
        "index_interval_bytes",
        "log_path",
        "offset_index",
        "recovered_control_batches",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        now_ms: WallMs,
        fd: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = log_file_path(directory, base_offset)
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        #: When this object was created (Kafka's ``created``): the age used for
        #: ``segment.ms`` when the segment's batches carry no timestamp.
        self.created_ms = now_ms
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._next_offset = base_offset
        self._max_ts = NO_TIMESTAMP
        self._offset_of_max_ts = -1
        self._bytes_since_index = 0
        self._rolling_ts: int | None = None
        #: Why the indexes cannot be trusted (None: they looked fine when read).
        self._index_problem: str | None = None
        #: :meth:`recover` found control batches (transaction markers): the log must
        #: rebuild this segment's transaction index
        self.recovered_control_batches = False

    # -- construction ------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: WallMs
    ) -> LogSegment:
        """A new, empty segment (any leftover files with its name are replaced)."""
        fd = os.open(
            log_file_path(directory, base_offset), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644
        )
        try:
            oi = OffsetIndex(offset_index_file_path(directory, base_offset), base_offset)
            ti = TimeIndex(time_index_file_path(directory, base_offset), base_offset)
            xi = TransactionIndex(txn_index_file_path(directory, base_offset), base_offset)
            oi.reset()
            ti.reset()
            xi.reset()
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base_offset, index_interval_bytes, now_ms, fd, oi, ti, xi)

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: WallMs
    ) -> LogSegment:
        """Open an existing segment. Its state is unknown until :meth:`load` or :meth:`recover`."""
        fd = os.open(log_file_path(directory, base_offset), os.O_RDWR)
        problem = None
        try:
            oi = OffsetIndex.load(offset_index_file_path(directory, base_offset), base_offset)
        except CorruptIndexError as e:
            oi = OffsetIndex(offset_index_file_path(directory, base_offset), base_offset)
            problem = str(e)
        try:
            ti = TimeIndex.load(time_index_file_path(directory, base_offset), base_offset)
        except CorruptIndexError as e:
            ti = TimeIndex(time_index_file_path(directory, base_offset), base_offset)
            problem = problem or str(e)
        try:
            xi = TransactionIndex.load(txn_index_file_path(directory, base_offset), base_offset)
        except CorruptIndexError as e:
            xi = TransactionIndex(txn_index_file_path(directory, base_offset), base_offset)
            problem = problem or str(e)
        seg = cls(directory, base_offset, index_interval_bytes, now_ms, fd, oi, ti, xi)
        if problem is None and seg._size > 0 and (oi.was_missing or ti.was_missing):
            problem = "index file missing"
        seg._index_problem = problem
        return seg

    def load(self, next_segment_base: int | None) -> bool:
        """Derive the segment's state from its (already read) indexes without a full scan.

        ``next_segment_base`` is the following segment's base offset, or None for
        the active (last) segment, whose tail after the last index entry is scanned
        to find the next offset and the largest timestamp. Returns False when the
        indexes cannot be trusted (missing, torn, out of order, pointing beyond the
        log, or disagreeing with the batch they point at) or the tail is torn: the
        caller must then :meth:`recover` the segment.
        """
        if self._index_problem is not None:
            return False
        size = self._size
        if size == 0:
            if len(self.offset_index) or len(self.time_index):
                self._index_problem = "entries in the index of an empty segment"
                return False
            self._next_offset = self.base_offset
            self._max_ts, self._offset_of_max_ts = NO_TIMESTAMP, -1
            self._bytes_since_index = 0
            return True
        try:
            self.offset_index.sanity_check(size)
            if next_segment_base is None:
                self._load_tail()
            else:
                self._check_last_index_entry()
                self._next_offset = next_segment_base
                ts, off = self.time_index.last_entry()
                if ts == NO_TIMESTAMP:
                    # A closed segment always carries its largest timestamp in the
                    # time index (appended when it was rolled); none means we can't
                    # tell it, so rebuild.
                    raise CorruptIndexError("non-empty inactive segment with an empty time index")
                self._max_ts, self._offset_of_max_ts = ts, off
                self._bytes_since_index = size - self.offset_index.last_entry()[1]
            self.time_index.sanity_check(self._next_offset)
            self.txn_index.sanity_check(self._next_offset)
        except (CorruptIndexError, RecordBatchError) as e:
            self._index_problem = str(e)
            return False
        return True

    def _check_last_index_entry(self) -> None:
        """One pread: the last offset-index entry must point at the batch it names."""
        if not len(self.offset_index):
            return
        off, pos = self.offset_index.last_entry()
        data = os.pread(self._fd, HEADER_SIZE, pos)
        if len(data) < HEADER_SIZE:
            raise CorruptIndexError(f"offset index entry points at a truncated batch ({pos})")
        h = _unpack_header(data, 0)
        if h[3] != 2 or h[1] < MIN_BATCH_LENGTH or pos + h[1] + LOG_OVERHEAD > self._size:
            raise CorruptIndexError(f"offset index entry points at a non-batch ({pos})")
        if h[0] + h[6] != off:
            raise CorruptIndexError(
                f"offset index entry for offset {off} points at a batch ending at {h[0] + h[6]}"
            )

    def _load_tail(self) -> None:
        """Set next offset, max timestamp and bytes-since-index from the indexes and the tail."""
        idx_off, idx_pos = self.offset_index.last_entry()
        have_entry = len(self.offset_index) > 0
        max_ts, off_of_max = self.time_index.last_entry()
        if max_ts == NO_TIMESTAMP:
            off_of_max = -1
        next_offset = self.base_offset
        first = True
        for _pos, h in self._iter_headers(idx_pos, self._size):
            last = h[0] + h[6]
            if first and have_entry and last != idx_off:
                raise CorruptIndexError(
                    f"offset index entry for offset {idx_off} points at a batch ending at {last}"
                )
            if h[0] < next_offset:
                raise CorruptRecordError(f"batch at {_pos} goes back to offset {h[0]}", _pos)
            first = False
            if h[8] > max_ts:
                max_ts, off_of_max = h[8], last
            next_offset = last + 1
        self._next_offset = next_offset
        self._max_ts, self._offset_of_max_ts = max_ts, off_of_max
        self._bytes_since_index = self._size - idx_pos

    # -- state -------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the log file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """Offset after the last batch (the base offset when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp seen in this segment (-1 if none)."""
        return self._max_ts

    def is_empty(self) -> bool:
        return self._size == 0

    def fileno(self) -> int:
        return self._fd

    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: max timestamp, or the file's mtime if there is none."""
        if self._max_ts >= 0:
            return self._max_ts
        return int(os.fstat(self._fd).st_mtime * 1000)

    def rolling_based_timestamp(self) -> int | None:
        """The first batch's maxTimestamp (Kafka's ``rollingBasedTimestamp``), None if empty."""
        if self._rolling_ts is None and self._size > 0:
            data = os.pread(self._fd, HEADER_SIZE, 0)
            if len(data) == HEADER_SIZE:
                self._rolling_ts = _unpack_header(data, 0)[8]
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: WallMs, message_timestamp: int) -> int:
        """Kafka's ``timeWaitedForRoll``: age by message timestamps, else by wall clock."""
        t = self.rolling_based_timestamp()
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self.created_ms

    # -- append ------------------------------------------------------------------

    def append(self, data, largest_offset: int | None = None) -> None:
        """Append offset-assigned batches (validated by the caller) and index them.

        ``largest_offset`` is the last offset in ``data`` (read from the last batch
        if omitted). On an I/O error the file is cut back to its previous size and
        the error propagates.
        """
        n = len(data)
        if n == 0:
            return
        start = self._size
        fd = self._fd
        oi, ti = self.offset_index, self.time_index
        n_oi, n_ti = len(oi), len(ti)
        saved = (self._max_ts, self._offset_of_max_ts, self._bytes_since_index)
        try:
            _pwrite_all(fd, data, start)
            interval = self.index_interval_bytes
            max_ts, off_of_max = self._max_ts, self._offset_of_max_ts
            since = self._bytes_since_index
            last = self._next_offset - 1
            with memoryview(data) as mv:
                p = 0
                while p < n:
                    h = _unpack_header(mv, p)
                    last = h[0] + h[6]
                    if h[8] > max_ts:
                        max_ts, off_of_max = h[8], last
                    if since > interval:
                        oi.append(last, start + p)
                        ti.maybe_append(max_ts, off_of_max)
                        since = 0
                    size = h[1] + LOG_OVERHEAD
                    since += size
                    p += size
        except BaseException as exc:
            try:
                os.ftruncate(fd, start)
            except OSError as cut:
                raise UnrecoverableWriteError(
                    cut.errno, f"could not cut {self.log_path} back to {start} bytes after "
                    f"a failed write ({exc}): {cut.strerror}",
                ) from exc
            if len(oi) > n_oi:
                oi.truncate_to(oi.entries()[n_oi][0])
            if len(ti) > n_ti:
                ti.truncate_to(ti.entries()[n_ti][1])
            self._max_ts, self._offset_of_max_ts, self._bytes_since_index = saved
            raise
        if start == 0:
            self._rolling_ts = _unpack_header(data, 0)[8]
        self._size = start + n
        self._max_ts, self._offset_of_max_ts = max_ts, off_of_max
        self._bytes_since_index = since
        self._next_offset = (largest_offset if largest_offset is not None else last) + 1

    def on_become_inactive(self) -> None:
        """Record the largest timestamp in the time index (Kafka does this on roll and close)."""
        if self._max_ts >= 0:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts)

    # -- read --------------------------------------------------------------------

    def _iter_headers(self, start: int, end: int) -> Iterator[tuple[int, tuple]]:
        return iter_batch_headers(self._fd, self.log_path, start, end)

    def _translate(self, offset: int, end: int) -> tuple[int, tuple] | None:
        """Position and header of the first batch whose last offset >= ``offset``."""
        start = self.offset_index.lookup(offset)
        if start >= end:
            start = 0
        for pos, h in self._iter_headers(start, end):
            if h[0] + h[6] >= offset:
                return pos, h
        return None

    def iter_batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of the batches that end at or after ``start_offset`` (the one
        holding it first), in order (framing checked only): what rebuilding the producer
        state replays."""
        if start_offset >= self._next_offset:
            return
        start = self.offset_index.lookup(start_offset)
        if start >= self._size:
            start = 0
        for pos, h in self._iter_headers(start, self._size):
            if h[0] + h[6] >= start_offset:
                yield pos, _make_header(h)

    def read_batch(self, position: int, size: int) -> bytes:
        """The bytes of the batch at ``position`` (``size`` from its header)."""
        data = os.pread(self._fd, size, position)
        if len(data) < size:
            raise CorruptRecordError(f"{self.log_path}: short read at {position}", position)
        return data

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the batch containing ``offset`` (or the first one after it)."""
        found = self._translate(offset, self._size)
        if found is None:
            return None
        return found[0], _make_header(found[1])

    def locate(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
    ) -> tuple[int, int] | None:
        """(position, length) of the whole batches :meth:`read` returns, without
        reading them: a trailing partial batch is cut by its length (the batch headers
        after the first are read, 12 bytes each, only when the limit falls inside the
        range). None if no batch in the segment reaches ``start_offset``."""
        if start_offset >= self._next_offset:
            return None
        end = self._size if max_position is None else min(max_position, self._size)
        found = self._translate(start_offset, end)
        if found is None:
            return None
        pos, h = found
        first_size = h[1] + LOG_OVERHEAD
        limit = end - pos
        if first_size > max_bytes:
            return (pos, first_size) if min_one_batch else (pos, 0)
        want = min(max_bytes, limit)
        if want == limit:
            return pos, want
        # Cut a trailing partial batch: walk the batch lengths up to the limit.
        fd = self._fd
        p = first_size
        while p + LOG_OVERHEAD <= want:
            head = os.pread(fd, LOG_OVERHEAD, pos + p)
            if len(head) < LOG_OVERHEAD:
                break
            s = int.from_bytes(head[8:12], "big") + LOG_OVERHEAD
            if p + s > want:
                break
            p += s
        return pos, p

    def read_region(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
    ) -> FileRegion | None:
        """:meth:`locate` as a :class:`FileRegion` with its own descriptor (a fetch
        sends it from the file; it stays readable if the segment is deleted meanwhile)."""
        found = self.locate(start_offset, max_bytes, max_position, min_one_batch)
        if found is None:
            return None
        return FileRegion.of(self._fd, found[0], found[1])

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes | None:
        """Whole batches starting with the one that contains ``start_offset``.

        Returns at most ``max_bytes`` bytes of whole batches, except that with
        ``min_one_batch`` the first batch is returned even if it is larger (KIP-74);
        without it an oversized first batch gives ``b""``. Reads stop at
        ``max_position`` (a batch boundary, e.g. the high watermark's position).
        Returns None if no batch in the segment reaches ``start_offset``.
        """
        found = self.locate(start_offset, max_bytes, max_position, min_one_batch)
        if found is None:
            return None
        pos, want = found
        if want == 0:
            return b""
        data = os.pread(self._fd, want, pos)
        if len(data) < want:
            raise CorruptRecordError(
                f"{self.log_path}: short read at {pos}: {len(data)} of {want} bytes", pos
            )
        return data

    def _read_records(self, pos: int, h: tuple) -> list:
        """The records of the batch at ``pos`` (header ``h``), decompressed and decoded."""
        size = h[1] + LOG_OVERHEAD
        data = os.pread(self._fd, size, pos)
        if len(data) < size:
            raise CorruptRecordError(f"{self.log_path}: short read at {pos}", pos)
        return [r for info in iter_decoded_batches(data) for r in decode_batch_records(info)]

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp is >=
        ``timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp``): the time index
        gives where to start, batches whose max timestamp reaches the target are read
        and their records' own timestamps compared (a LogAppendTime batch's records all
        carry its max timestamp)."""
        if self._max_ts < timestamp:
            return None
        _ts, ts_offset = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(ts_offset, starting_offset))
        for pos, h in self._iter_headers(start, self._size):
            if h[8] < timestamp or h[0] + h[6] < starting_offset:
                continue
            for r in self._read_records(pos, h):
                if r.timestamp >= timestamp and r.offset >= starting_offset:
                    return TimestampAndOffset(r.timestamp, r.offset, h[2] if h[2] >= 0 else None)
        return None

    def offset_of_max_timestamp_record(self) -> TimestampAndOffset | None:
        """The first record with this segment's largest timestamp (Kafka's
        ``batch.offsetOfMaxTimestamp`` on the first batch carrying it), None if the
        segment has no timestamps."""
        if self._max_ts < 0:
            return None
        found = self._translate(self._offset_of_max_ts, self._size)
        if found is None:
            return None
        start = found[0]
        for pos, h in self._iter_headers(start, self._size):
            if h[8] != self._max_ts:
                continue
            for r in self._read_records(pos, h):
                if r.timestamp == h[8]:
                    return TimestampAndOffset(h[8], r.offset, h[2] if h[2] >= 0 else None)
            return None
        return None

    # -- recovery and truncation ----------------------------------------------

    def recover(self, epoch_cache: LeaderEpochFileCache | None = None) -> int:
        """Rebuild the indexes from a full scan of the log, CRCs included.

        The file is cut at the first batch that is torn, fails its CRC, has impossible
        lengths or counts, or whose offsets go backwards or do not fit the segment.
        Both index files are rewritten and everything is fsynced. As Kafka's
        ``LogSegment.recover``, an epoch newer than ``epoch_cache`` knows is assigned
        the offset of its first batch. The transaction index is emptied: rebuilding it
        needs the producer state, which the log replays (:func:`~tidegate.log.log_loader.rebuild_producer_state`).
        Returns the number of bytes truncated.
        """
        fd = self._fd
        size = os.fstat(fd).st_size
        base = self.base_offset
        interval = self.index_interval_bytes
        oi_entries: list[tuple[int, int]] = []
        ti_entries: list[tuple[int, int]] = []
        max_ts, off_of_max = NO_TIMESTAMP, -1
        last_ti_ts = NO_TIMESTAMP
        since = 0
        expected = base
        rolling_ts = None
        control = False
        pos = 0
        if size > 0:
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm, memoryview(mm) as mv:
                while pos < size:
                    try:
                        bsize = check_framing(mv, pos, size)
                        check_batch_contents(mv, pos, bsize)
                    except RecordBatchError:
                        break
                    h = _unpack_header(mv, pos)
                    last = h[0] + h[6]
                    if h[0] < expected or last - base > INT32_MAX:
                        break
                    if rolling_ts is None:
                        rolling_ts = h[8]
                    if h[5] & CONTROL_FLAG_MASK:
                        control = True
                    if epoch_cache is not None and h[2] >= 0:
                        latest = epoch_cache.latest_epoch
                        if latest is None or latest < h[2]:
                            epoch_cache.assign(h[2], h[0])
                    if h[8] > max_ts:
                        max_ts, off_of_max = h[8], last
                    if since > interval:
                        oi_entries.append((last, pos))
                        if max_ts > last_ti_ts:
                            ti_entries.append((max_ts, off_of_max))
                            last_ti_ts = max_ts
                        since = 0
                    since += bsize
                    expected = last + 1
                    pos += bsize
        truncated = size - pos
        if truncated:
            os.ftruncate(fd, pos)
        if max_ts > last_ti_ts:
            # As Kafka: a recovered segment carries its largest timestamp in the time index.
            ti_entries.append((max_ts, off_of_max))
        self.offset_index.reset(oi_entries)
        self.time_index.reset(ti_entries)
        self.txn_index.reset()
        _fdatasync(fd)
        self.offset_index.flush()
        self.time_index.flush()
        self._size = pos
        self._next_offset = expected
        self._max_ts, self._offset_of_max_ts = max_ts, off_of_max
        self._bytes_since_index = since
        self._rolling_ts = rolling_ts
        self._index_problem = None
        self.recovered_control_batches = control
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that ends at or after ``offset``; return bytes removed.

        Like Kafka, a batch containing ``offset`` is removed whole, so the new next
        offset is that batch's base offset.
        """
        found = self._translate(offset, self._size)
        if found is None:
            return 0
        pos, h = found
        new_next = h[0]
        self.offset_index.truncate_to(new_next)
        self.time_index.truncate_to(new_next)
        self.txn_index.truncate_to(new_next)
        truncated = self._size - pos
        os.ftruncate(self._fd, pos)
        self._size = pos
        if pos == 0:
            self._rolling_ts = None
        self._load_tail()
        return truncated

    # -- durability and lifecycle -------------------------------------------------

    def dup_fds_for_flush(self, include_log: bool) -> list[int]:
        """Duplicated descriptors to fsync: the log (if asked) and any dirty index."""
        fds = [os.dup(self._fd)] if include_log else []
        for idx in (self.offset_index, self.time_index, self.txn_index):
            fd = idx.dup_fd_for_flush()
            if fd is not None:
                fds.append(fd)
        return fds

    @property
    def indexes_dirty(self) -> bool:
        return self.offset_index.dirty or self.time_index.dirty or self.txn_index.dirty

    def set_next_offset(self, next_offset: int) -> None:
        """An inactive segment ends where the next one starts (the log cleaner leaves
        gaps: its last batches may be gone)."""
        self._next_offset = max(self._next_offset, next_offset)

    def release_index_fds(self) -> None:
        """Close the index descriptors of a flushed segment (reopened by the next write)."""
        self.offset_index.release_fd()
        self.time_index.release_fd()
        self.txn_index.release_fd()

    def flush(self) -> None:
        _fdatasync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, "
            f"next_offset={self._next_offset}, max_timestamp={self._max_ts})"
        )
