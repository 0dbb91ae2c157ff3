"""Per-partition state of idempotent and transactional producers: Kafka's
ProducerStateManager.

For every producer id that has written to a partition the broker keeps the
producer's epoch, the metadata of its last :data:`NUM_BATCHES_TO_RETAIN`
batches (first/last sequence -> first/last offset, max timestamp), the epoch of
the transaction coordinator that wrote its last marker and the first offset of
its open transaction, if any. Before a batch is appended it is checked against
that state, with the rules of Kafka's ``ProducerAppendInfo``:

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
  of answering UNKNOWN_PRODUCER_ID;
- a transactional batch opens a transaction (its first offset is the
  producer's ``current_txn_first_offset``, and the partition's last stable offset
  cannot pass it); a non-transactional batch while one is open is
  INVALID_TXN_STATE (48);
- a transaction marker (a COMMIT or ABORT control batch, written by the
  coordinator) with an older producer epoch is INVALID_PRODUCER_EPOCH, with an
  older coordinator epoch TRANSACTION_COORDINATOR_FENCED (52); otherwise it
  closes the open transaction (a :class:`CompletedTxn`; the log indexes aborted
  ones in ``.txnindex``), takes the marker's epoch (a new epoch resets the
  sequences) and records the coordinator epoch. A marker with no open
  transaction only updates the epochs.

Validation (:meth:`ProducerStateManager.prepare`) never changes anything; the
log applies the result with :meth:`ProducerStateManager.commit` only after the
batch is written, so a rejected or failed append leaves the state as it was.

Persistence follows Kafka: the whole table is written to
``{offset:020d}.snapshot`` in the partition directory when a segment rolls and
when the log is closed (``offset`` = the log end offset at that moment), and on
open the newest readable snapshot at or below the log end offset is loaded and
the batches after it are replayed (every v2 batch header carries the producer
id, epoch and base sequence; a marker's type and coordinator epoch are read
from its one record). Unlike Kafka's snapshot, which keeps only each
producer's last batch, these keep all the cached batches, so a retry of any of
the last five batches is still recognised after a restart. Open transactions
are in the snapshot (each producer's ``current_txn_first_offset``).

Pure synchronous code: time is passed in, the caller owns the files' directory.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from tidegate.clock import WallMs
from tidegate.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidegate.record.control_records import ControlRecordType, EndTransactionMarker
from tidegate.record.record_batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK, BatchHeader
from tidegate.utils import INT32_MAX
from tidegate.utils.files import write_atomically

from .index import AbortedTxn

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "PreparedAppend",
    "ProducerStateEntry",
    "ProducerStateManager",
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
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")


# -- errors ----------------------------------------------------------------------


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or fails its CRC: it is ignored and deleted."""


# -- state -----------------------------------------------------------------------


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's int32 sequence circle."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


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
    #: Epoch of the transaction coordinator that wrote this producer's last marker.
    coordinator_epoch: int = -1
    #: First offset of the producer's open transaction on this partition (-1: none).
    current_txn_first_offset: int = -1

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

    def maybe_update_producer_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()  # a new epoch starts a new sequence space
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker (Kafka's ``CompletedTxn``): ``first_offset`` of its
    first batch on this partition, ``last_offset`` the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class _AppendInfo:
    """Kafka's ProducerAppendInfo: one producer's batches in one append, validated in
    order against the committed entry (``current``) and what this append already added
    (Kafka's ``updatedEntry``: ``epoch``, ``batches``, ``last_timestamp``,
    ``coordinator_epoch`` and ``txn_first_offset`` here, which start as ``current``'s
    with no batches). ``started``: the first offset of a transaction this append opens;
    ``completed``: the transactions its markers close."""

    __slots__ = ("batches", "completed", "coordinator_epoch", "current", "epoch", "last_timestamp",
                 "started", "txn_first_offset")

    def __init__(self, current: ProducerStateEntry) -> None:
        self.current = current
        self.epoch = current.producer_epoch
        self.batches: list[BatchMetadata] = []
        self.last_timestamp = current.last_timestamp
        self.coordinator_epoch = current.coordinator_epoch
        self.txn_first_offset = current.current_txn_first_offset
        self.started: int | None = None
        self.completed: list[CompletedTxn] = []

    def _update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()  # a new epoch starts a new sequence space
            self.epoch = epoch

    def _check_epoch(self, epoch: int, pid: int, offset: int) -> None:
        if epoch < self.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {pid} at offset {offset} is older than its current "
                f"epoch {self.epoch}"
            )

    def append(self, h: BatchHeader, first_offset: int, timestamp: int, validate: bool) -> None:
        epoch = h.producer_epoch
        # the epoch is checked for the coordinators' writes too (Kafka: every origin but
        # replication), the sequence only for clients
        self._check_epoch(epoch, h.producer_id, first_offset)
        if validate:
            self._check_sequence(epoch, h.base_sequence, first_offset, h.producer_id)
        self._update_epoch(epoch)
        delta = h.last_offset_delta
        self.batches.append(BatchMetadata(h.last_sequence, first_offset + delta, delta, timestamp))
        self.last_timestamp = timestamp
        transactional = bool(h.attributes & TRANSACTIONAL_FLAG_MASK)
        if self.txn_first_offset >= 0 and not transactional:
            raise InvalidTxnStateError(
                f"non-transactional batch from producer {h.producer_id} at offset {first_offset} "
                f"while its transaction (from offset {self.txn_first_offset}) is open"
            )
        if self.txn_first_offset < 0 and transactional:
            self.txn_first_offset = first_offset
            self.started = first_offset

    def append_marker(self, h: BatchHeader, marker: EndTransactionMarker, offset: int, timestamp: int) -> None:
        """Kafka's ``appendEndTxnMarker``."""
        pid = h.producer_id
        self._check_epoch(h.producer_epoch, pid, offset)
        if self.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {pid} at offset {offset} is from coordinator epoch "
                f"{marker.coordinator_epoch}, older than the last seen {self.coordinator_epoch}"
            )
        if self.txn_first_offset >= 0:  # an empty transaction completes nothing
            aborted = marker.type is ControlRecordType.ABORT
            self.completed.append(CompletedTxn(pid, self.txn_first_offset, offset, aborted))
        self._update_epoch(h.producer_epoch)
        self.txn_first_offset = -1
        self.coordinator_epoch = marker.coordinator_epoch
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
    """The producer table of one partition, its open transactions and its snapshot files."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.producers: dict[int, ProducerStateEntry] = {}
        #: Open transactions: first offset -> producer id (Kafka's ``ongoingTxns``).
        self.ongoing_txns: dict[int, int] = {}
        #: Offset of the newest snapshot written or loaded (-1: none).
        self.last_snapshot_offset = -1

    def __len__(self) -> int:
        return len(self.producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- transactions ------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none open). A single
        node's high watermark is its log end offset, so a completed transaction is
        stable as soon as its marker is appended (Kafka's ``unreplicatedTxns`` stay empty)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here at ``producer_epoch``
        (then a transactional produce needs no verification with the coordinator)."""
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset >= 0 and e.producer_epoch == producer_epoch

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction in ``.txnindex``: the first offset of
        the oldest open transaction of another producer, else the marker's offset + 1."""
        others = [off for off, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def aborted_txn(self, completed: CompletedTxn) -> AbortedTxn:
        """The ``.txnindex`` entry of an aborted transaction, with its
        :meth:`last_stable_offset` (Kafka's ``new AbortedTxn(completedTxn, lastStableOffset)``)."""
        return AbortedTxn(
            completed.producer_id, completed.first_offset, completed.last_offset,
            self.last_stable_offset(completed),
        )  # fmt: skip

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self.ongoing_txns.get(completed.first_offset) == completed.producer_id:
            del self.ongoing_txns[completed.first_offset]

    def _rebuild_ongoing(self) -> None:
        self.ongoing_txns = {
            e.current_txn_first_offset: pid for pid, e in self.producers.items() if e.current_txn_first_offset >= 0
        }

    # -- the append path -------------------------------------------------------------

    def prepare(
        self,
        headers: Iterable[BatchHeader],
        first_offset: int,
        log_append_time: int | None,
        *,
        from_client: bool = True,
        markers: Sequence[EndTransactionMarker | None] | None = None,
    ) -> PreparedAppend | None:
        """Validate the producer batches of an append that will start at ``first_offset``.

        Returns None when no batch carries a producer id (nothing to track). Raises
        :class:`InvalidProducerEpochError`, :class:`OutOfOrderSequenceError`,
        :class:`InvalidTxnStateError` or :class:`TransactionCoordinatorFencedError`
        without changing any state. ``log_append_time`` (LogAppendTime topics) is the max
        timestamp the batches will carry in the log; otherwise each batch's own max
        timestamp is used. ``markers`` (the coordinator's appends): for each control
        batch, its end transaction marker (None for other control types, which change
        nothing). Sequence numbers are checked only ``from_client``.
        """
        prepared: PreparedAppend | None = None
        offset = first_offset
        for i, h in enumerate(headers):
            base = offset
            offset += h.last_offset_delta + 1
            pid = h.producer_id
            if pid < 0:
                continue
            control = h.attributes & CONTROL_FLAG_MASK
            marker = markers[i] if control and markers is not None else None
            if control and marker is None:
                continue
            if prepared is None:
                prepared = PreparedAppend()
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
            if marker is not None:
                info.append_marker(h, marker, base, ts)
            else:
                info.append(h, base, ts, from_client)
        return prepared

    def commit(self, prepared: PreparedAppend) -> list[CompletedTxn]:
        """Apply a prepared (non-duplicate) append once its batches are in the log.
        Returns the transactions its markers closed, for the log to index (aborted ones)
        and then :meth:`complete_txn`."""
        producers = self.producers
        completed: list[CompletedTxn] = []
        for pid, info in prepared.updates.items():
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerStateEntry(pid, info.epoch)
            entry.maybe_update_producer_epoch(info.epoch)
            entry.batches.extend(info.batches)
            entry.last_timestamp = info.last_timestamp
            entry.coordinator_epoch = info.coordinator_epoch
            entry.current_txn_first_offset = info.txn_first_offset
            if info.started is not None and info.txn_first_offset == info.started:
                self.ongoing_txns[info.started] = pid
            completed.extend(info.completed)
        return completed

    def replay_batch(self, h: BatchHeader, marker: EndTransactionMarker | None) -> CompletedTxn | None:
        """Rebuild from one batch already in the log (offsets assigned): no validation, as
        Kafka loads state from its own log. For a marker, returns the transaction it
        closed, which the caller indexes if needed and passes to :meth:`complete_txn`."""
        pid = h.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if h.attributes & CONTROL_FLAG_MASK:
            if marker is None:
                return None
            completed = None
            if entry.current_txn_first_offset >= 0:
                completed = CompletedTxn(pid, entry.current_txn_first_offset, h.base_offset,
                                         marker.type is ControlRecordType.ABORT)
            entry.maybe_update_producer_epoch(h.producer_epoch)
            entry.current_txn_first_offset = -1
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = h.max_timestamp
            return completed
        delta = h.last_offset_delta
        entry.add_batch(h.producer_epoch, BatchMetadata(h.last_sequence, h.base_offset + delta, delta, h.max_timestamp))
        if h.attributes & TRANSACTIONAL_FLAG_MASK and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing_txns[h.base_offset] = pid
        return None

    # -- expiration --------------------------------------------------------------------

    def remove_expired(self, now_ms: WallMs, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``), measured
        from their last batch's max timestamp as Kafka does; a producer with an open
        transaction never expires. Returns how many went."""
        expired = [
            pid for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]  # fmt: skip
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

    def load(self, log_end_offset: int, up_to: int | None = None) -> int | None:
        """Replace the table with the newest readable snapshot at or below ``up_to``
        (default: ``log_end_offset``).

        Snapshots above the log end offset (the log lost its tail) and unreadable ones are
        deleted. Returns the snapshot's offset (the caller replays the log from there), or
        None when there is none (replay the whole log).
        """
        self.producers = {}
        self.ongoing_txns = {}
        self.last_snapshot_offset = -1
        limit = log_end_offset if up_to is None else min(up_to, log_end_offset)
        for offset in sorted(self.snapshot_offsets(), reverse=True):
            path = snapshot_path(self.directory, offset)
            if offset > log_end_offset:
                _unlink(path)
                continue
            if offset > limit:
                continue
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError:
                _unlink(path)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self._rebuild_ongoing()
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
        self.ongoing_txns = {}
        for off in self.snapshot_offsets():
            _unlink(snapshot_path(self.directory, off))
        self.last_snapshot_offset = -1


# -- snapshot files ------------------------------------------------------------------------
#
# version   int16   2 (1: written before transactions, read as if none were open)
# crc       uint32  CRC-32C of everything after this field
# count     int32   number of producers
# per producer:
#   producer_id int64, epoch int16, last_timestamp int64,
#   v2 only: coordinator_epoch int32, current_txn_first_offset int64 (-1: none open),
#   batch count int8,
#   per batch (oldest first): last_seq int32, last_offset int64, offset_delta int32,
#                             timestamp int64

SNAPSHOT_VERSION = 2
_HEAD = struct.Struct(">hIi")
_PRODUCER_V1 = struct.Struct(">qhqb")
_PRODUCER = struct.Struct(">qhqiqb")
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
        body += _PRODUCER.pack(e.producer_id, e.producer_epoch, e.last_timestamp, e.coordinator_epoch,
                               e.current_txn_first_offset, len(e.batches))
        for b in e.batches:
            body += _BATCH.pack(b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
    rest = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(rest)) + rest


def _decode(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version not in (1, SNAPSHOT_VERSION):
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    out = []
    pos = _HEAD.size
    try:
        for _ in range(count):
            if version == 1:
                pid, epoch, last_ts, nbatches = _PRODUCER_V1.unpack_from(data, pos)
                coordinator_epoch, txn_first_offset = -1, -1
                pos += _PRODUCER_V1.size
            else:
                pid, epoch, last_ts, coordinator_epoch, txn_first_offset, nbatches = _PRODUCER.unpack_from(data, pos)
                pos += _PRODUCER.size
            if not 0 <= nbatches <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"producer {pid} has {nbatches} batches")
            entry = ProducerStateEntry(pid, epoch, last_timestamp=last_ts, coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=txn_first_offset)
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
    write_atomically(path, _encode(entries), sync=sync, sync_dir=False)
    return path


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
