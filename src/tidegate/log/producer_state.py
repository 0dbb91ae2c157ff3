"""Per-partition state of idempotent producers: Kafka's ProducerStateManager.

For every producer id that has written to a partition the broker keeps the
producer's epoch and the metadata of its last :data:`NUM_BATCHES_TO_RETAIN`
batches (first/last sequence -> first/last offset, max timestamp). Before a
batch from a client is appended it is checked against that state, with the
rules of Kafka's ``ProducerAppendInfo``:

- an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH (47);
- a batch whose epoch and sequence range equal one of the cached batches is a
  *duplicate* (a retry of a batch already written): nothing is appended and the
  answer is success with the offsets the original got (Kafka has answered this
  way since 1.0; DUPLICATE_SEQUENCE_NUMBER (46) is not used);
- a newer epoch of a known producer must start again at sequence 0, and within
  an epoch each batch must start right after the previous one's last sequence
  (wrapping at 2**31 - 1); anything else is OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a producer id the partition has no state for (never seen, or expired) may
  start at any sequence: Kafka has accepted that since KIP-360 (2.5) instead
  of answering UNKNOWN_PRODUCER_ID.

Validation (:meth:`ProducerStateManager.prepare`) never changes anything; the
log applies the result with :meth:`ProducerStateManager.commit` only after the
batch is written, so a rejected or failed append leaves the state as it was.

Persistence follows Kafka: the whole table is written to
``{offset:020d}.snapshot`` in the partition directory when a segment rolls and
when the log is closed (``offset`` = the log end offset at that moment), and on
open the newest readable snapshot at or below the log end offset is loaded and
the batch headers after it are replayed (every v2 batch header carries the
producer id, epoch and base sequence, so nothing else is needed). Unlike
Kafka's snapshot, which keeps only each producer's last batch, these keep all
the cached batches, so a retry of any of the last five batches is still
recognised after a restart.

Pure synchronous code: time is passed in, the caller owns the files' directory.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from .record_batch import TRANSACTIONAL_FLAG_MASK, BatchHeader, RecordBatchError

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CorruptSnapshotError",
    "InvalidProducerEpochError",
    "OutOfOrderSequenceError",
    "PreparedAppend",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionsNotSupportedError",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

#: How many batches per producer are remembered for duplicate detection (Kafka's
#: ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``; clients keep at most 5 in flight).
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SNAPSHOT_SUFFIX = ".snapshot"
_INT32_MAX = 2**31 - 1
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_TMP_MARK = ".tmp-"  # the log deletes files with this mark when it opens
_tmp_counter = itertools.count()


# -- errors ----------------------------------------------------------------------


class OutOfOrderSequenceError(RecordBatchError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER: a gap (or a step back) in a producer's sequence."""

    error_code = 45


class InvalidProducerEpochError(RecordBatchError):
    """INVALID_PRODUCER_EPOCH: a batch from an epoch older than the producer's current one."""

    error_code = 47


class TransactionsNotSupportedError(RecordBatchError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED for a transactional batch: tidegate has no
    transaction coordinator, and Kafka answers this code to transactional records a
    producer may not write (every client treats it as fatal, with a clear message)."""

    error_code = 53


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or fails its CRC: it is ignored and deleted."""


# -- state -----------------------------------------------------------------------


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's int32 sequence circle."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: its sequence range, where it went, its max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """What a partition knows of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    #: Max timestamp of the producer's last batch: what expiration is measured from.
    last_timestamp: int = -1

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()  # a new epoch starts a new sequence space
            self.producer_epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
        )


class _AppendInfo:
    """Kafka's ProducerAppendInfo: one producer's batches in one append, validated in
    order against the committed entry (``current``) and what this append already added
    (Kafka's ``updatedEntry``: ``epoch``, ``batches`` and ``last_timestamp`` here, which
    start as ``current``'s epoch and timestamp with no batches)."""

    __slots__ = ("batches", "current", "epoch", "last_timestamp")

    def __init__(self, current: ProducerStateEntry) -> None:
        self.current = current
        self.epoch = current.producer_epoch
        self.batches: list[BatchMetadata] = []
        self.last_timestamp = current.last_timestamp

    def append(self, h: BatchHeader, first_offset: int, timestamp: int, validate: bool) -> None:
        epoch = h.producer_epoch
        if validate:
            if epoch < self.epoch:
                raise InvalidProducerEpochError(
                    f"epoch {epoch} of producer {h.producer_id} at offset {first_offset} is "
                    f"older than its current epoch {self.epoch}"
                )
            self._check_sequence(epoch, h.base_sequence, first_offset, h.producer_id)
        if epoch != self.epoch:
            self.batches.clear()  # a new epoch starts a new sequence space
            self.epoch = epoch
        delta = h.last_offset_delta
        self.batches.append(BatchMetadata(h.last_sequence, first_offset + delta, delta, timestamp))
        self.last_timestamp = timestamp

    def _check_sequence(self, epoch: int, first_seq: int, offset: int, pid: int) -> None:
        current = self.current
        if epoch != self.epoch:
            if first_seq != 0 and self.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number {first_seq} for the new epoch {epoch} of producer "
                    f"{pid} at offset {offset} (a new epoch starts at 0; current epoch "
                    f"{self.epoch})"
                )
            return
        if self.batches:
            last = self.batches[-1].last_seq
        elif epoch == current.producer_epoch:
            last = current.last_seq
        else:
            last = NO_SEQUENCE
        # No epoch known (the producer's state expired or never existed): any sequence.
        if current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {pid} at offset {offset}: "
                f"{first_seq} (incoming), {last} (current end sequence number)"
            )


class PreparedAppend:
    """What :meth:`ProducerStateManager.prepare` found: either a duplicate of a batch
    already in the log (append nothing, answer with its offsets) or the producer
    entries the append will produce (hand them to :meth:`~ProducerStateManager.commit`)."""

    __slots__ = ("duplicate", "updates")

    def __init__(self, duplicate: BatchMetadata | None = None) -> None:
        self.duplicate = duplicate
        self.updates: dict[int, _AppendInfo] = {}


class ProducerStateManager:
    """The producer table of one partition and its snapshot files."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.producers: dict[int, ProducerStateEntry] = {}
        #: Offset of the newest snapshot written or loaded (-1: none).
        self.last_snapshot_offset = -1

    def __len__(self) -> int:
        return len(self.producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- the append path -------------------------------------------------------------

    def prepare(
        self,
        headers: Iterable[BatchHeader],
        first_offset: int,
        log_append_time: int | None,
        *,
        from_client: bool = True,
    ) -> PreparedAppend | None:
        """Validate the producer batches of an append that will start at ``first_offset``.

        Returns None when no batch carries a producer id (nothing to track). Raises
        :class:`InvalidProducerEpochError`, :class:`OutOfOrderSequenceError` or
        :class:`TransactionsNotSupportedError` without changing any state.
        ``log_append_time`` (LogAppendTime topics) is the max timestamp the batches will
        carry in the log; otherwise each batch's own max timestamp is used.
        """
        prepared: PreparedAppend | None = None
        offset = first_offset
        for h in headers:
            base = offset
            offset += h.last_offset_delta + 1
            pid = h.producer_id
            if pid < 0:
                continue
            if prepared is None:
                prepared = PreparedAppend()
            if h.attributes & TRANSACTIONAL_FLAG_MASK and from_client:
                raise TransactionsNotSupportedError(
                    f"transactional batch from producer {pid}: transactions are not supported"
                )
            current = self.producers.get(pid)
            if from_client and current is not None and current.producer_epoch == h.producer_epoch:
                dup = current.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                if dup is not None:
                    return PreparedAppend(dup)
            info = prepared.updates.get(pid)
            if info is None:
                info = _AppendInfo(current if current is not None else ProducerStateEntry(pid))
                prepared.updates[pid] = info
            ts = log_append_time if log_append_time is not None else h.max_timestamp
            info.append(h, base, ts, from_client)
        return prepared

    def commit(self, prepared: PreparedAppend) -> None:
        """Apply a prepared (non-duplicate) append once its batches are in the log."""
        producers = self.producers
        for pid, info in prepared.updates.items():
            entry = producers.get(pid)
            if entry is None:
                producers[pid] = ProducerStateEntry(
                    pid,
                    info.epoch,
                    deque(info.batches, maxlen=NUM_BATCHES_TO_RETAIN),
                    info.last_timestamp,
                )
                continue
            if info.epoch != entry.producer_epoch:
                entry.batches.clear()
                entry.producer_epoch = info.epoch
            entry.batches.extend(info.batches)
            entry.last_timestamp = info.last_timestamp

    def replay(self, headers: Iterable[BatchHeader]) -> int:
        """Rebuild from batches already in the log (offsets assigned): no validation,
        as Kafka loads state from its own log. Returns how many batches were read."""
        producers = self.producers
        n = 0
        for h in headers:
            n += 1
            pid = h.producer_id
            if pid < 0:
                continue
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerStateEntry(pid)
            delta = h.last_offset_delta
            entry.add_batch(
                h.producer_epoch,
                BatchMetadata(h.last_sequence, h.base_offset + delta, delta, h.max_timestamp),
            )
        return n

    # -- expiration --------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``), measured
        from their last batch's max timestamp as Kafka does. Returns how many went."""
        expired = [
            pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots ----------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return list_snapshots(self.directory)

    def take_snapshot(self, offset: int, *, sync: bool) -> Path:
        """Write the table as ``{offset}.snapshot`` (replacing one already there)."""
        path = write_snapshot(self.directory, offset, self.producers.values(), sync=sync)
        self.last_snapshot_offset = max(self.last_snapshot_offset, offset)
        return path

    def load(self, log_end_offset: int) -> int | None:
        """Replace the table with the newest readable snapshot at or below ``log_end_offset``.

        Snapshots above the log end offset (the log lost its tail) and unreadable ones are
        deleted. Returns the snapshot's offset (the caller replays the log from there), or
        None when there is none (replay the whole log).
        """
        self.producers = {}
        self.last_snapshot_offset = -1
        for offset in sorted(self.snapshot_offsets(), reverse=True):
            path = snapshot_path(self.directory, offset)
            if offset > log_end_offset:
                _unlink(path)
                continue
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError:
                _unlink(path)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self.last_snapshot_offset = offset
            return offset
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots below ``offset`` (their segments are gone), keeping the newest."""
        offsets = self.snapshot_offsets()
        for off in offsets[:-1]:
            if off < offset:
                _unlink(snapshot_path(self.directory, off))

    def delete_snapshots_after(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                _unlink(snapshot_path(self.directory, off))
        if self.last_snapshot_offset > offset:
            self.last_snapshot_offset = -1

    def truncate_fully(self) -> None:
        """Forget everything and delete every snapshot (the log restarted empty)."""
        self.producers = {}
        for off in self.snapshot_offsets():
            _unlink(snapshot_path(self.directory, off))
        self.last_snapshot_offset = -1


# -- snapshot files ------------------------------------------------------------------------
#
# version   int16   1
# crc       uint32  CRC-32C of everything after this field
# count     int32   number of producers
# per producer:
#   producer_id int64, epoch int16, last_timestamp int64, batch count int8,
#   per batch (oldest first): last_seq int32, last_offset int64, offset_delta int32,
#                             timestamp int64

SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iqiq")


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for name in os.listdir(directory):
        m = _SNAPSHOT_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    out.sort()
    return out


def _encode(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        count += 1
        body += _PRODUCER.pack(e.producer_id, e.producer_epoch, e.last_timestamp, len(e.batches))
        for b in e.batches:
            body += _BATCH.pack(b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
    rest = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(rest)) + rest


def _decode(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    out = []
    pos = _HEAD.size
    try:
        for _ in range(count):
            pid, epoch, last_ts, nbatches = _PRODUCER.unpack_from(data, pos)
            pos += _PRODUCER.size
            if not 0 <= nbatches <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"producer {pid} has {nbatches} batches")
            entry = ProducerStateEntry(pid, epoch, last_timestamp=last_ts)
            for _ in range(nbatches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            out.append(entry)
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated snapshot: {exc}") from exc
    if pos != len(data):
        raise CorruptSnapshotError(f"{len(data) - pos} bytes after the last producer")
    return out


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise CorruptSnapshotError(f"{path} vanished") from exc
    return _decode(data)


def write_snapshot(
    directory: Path, offset: int, entries: Iterable[ProducerStateEntry], *, sync: bool
) -> Path:
    """Write a snapshot atomically (tmp file, rename). With ``sync`` the file is fsynced
    before the rename; otherwise the caller fsyncs it later (a torn snapshot fails its
    CRC on load and the state is rebuilt from an older one and the log)."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(
        f"{path.name}{_TMP_MARK}{os.getpid()}-{threading.get_ident()}-{next(_tmp_counter)}"
    )
    data = _encode(entries)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    return path


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
