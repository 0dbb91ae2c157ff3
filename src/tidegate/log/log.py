"""One partition's log: Kafka's ``UnifiedLog``.

:class:`Log` is the public face of a partition's log: offsets (log start, high
watermark, last stable offset), appends (validated by :mod:`.validator`, offsets and
the leader epoch assigned, the producer state checked and updated), reads, ListOffsets,
retention, DeleteRecords, truncation and the flush API. Its segments and files are a
:class:`~tidegate.log.local_log.LocalLog` (``Log.local``; Kafka's ``LocalLog``), opened by
the :class:`~tidegate.log.log_loader.LogLoader`. The log start offset is kept as Kafka
keeps it, in the log directory's ``log-start-offset-checkpoint`` (written by the
LogManager, read back into ``Log(log_start_offset=...)``).

Plain synchronous object: no asyncio, no threads, no clock: every call that needs
the time takes ``now_ms``, a :data:`~tidegate.clock.WallMs` from its caller. One
clock for all of it, as Kafka's log reads ``Time.milliseconds()`` (the wall clock)
for each: LogAppendTime and timestamp validation, retention by time (record
timestamps), segment roll by time (a segment's creation against record timestamps)
and flush.ms. The one concession to an asyncio caller is the split flush
(:meth:`Log.begin_flush`, :meth:`~tidegate.log.local_log.FlushTicket.run` on a worker
thread, :meth:`Log.complete_flush`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

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
    NO_TIMESTAMP,
    BatchTooLargeError,
    InvalidRecordError,
    assign_offsets,
)
from tidegate.utils import INT32_MAX

from .checkpoint import CheckpointWrite
from .config import LogConfig
from .dir_failure import StorageError
from .index import AbortedTxn
from .leader_epoch import LeaderEpochFileCache
from .local_log import FlushTicket, LocalLog, RecoveryPointCheckpoint
from .log_loader import LogLoader, rebuild_producer_state
from .producer_state import PreparedAppend, ProducerStateManager
from .segment import LogSegment, TimestampAndOffset
from .validator import (
    ValidatedBatches,
    check_keys,
    needs_record_validation,
    validate_batches,
    validate_records,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "Log",
    "LogOffsetOutOfRangeError",
    "OffsetOutOfRangeError",
    "TimestampAndOffset",
]

#: ListOffsets special timestamps understood by :meth:`Log.offset_for_timestamp`.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


class LogOffsetOutOfRangeError(OffsetOutOfRangeError):
    """OFFSET_OUT_OF_RANGE: a read or seek outside [log_start_offset, log_end_offset]
    of this log (the shared :class:`~tidegate.errors.OffsetOutOfRangeError`, re-exported
    here, with the log's range)."""

    error_code = 1

    def __init__(self, message: str, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


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


class Log:
    """One partition's log (Kafka's ``UnifiedLog``).

    Opening a directory loads its segments (:class:`~tidegate.log.log_loader.LogLoader`);
    without a clean-shutdown marker the segments from the recovery point on are
    recovered (CRC-checked, torn tail cut). Any segment whose indexes are missing or
    implausible is rebuilt.
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
        #: the segments and files (Kafka's ``LocalLog``)
        self.local = local = LocalLog(directory, config)
        self._last_flush_ms = now_ms
        #: Idempotent producers' epochs and last sequences (docs/idempotence.md).
        self.producer_state = ProducerStateManager(local.directory)
        try:
            loaded = LogLoader(
                local, self.producer_state, now_ms, leader_epoch=leader_epoch, log_start_offset=log_start_offset
            ).load()
        except BaseException:
            local.release()
            raise
        self._log_start_offset = loaded.log_start_offset
        #: The partition's leader epoch: stamped into every appended batch's
        #: partitionLeaderEpoch (as Kafka's leader does) and reported by Metadata,
        #: ListOffsets, Fetch and OffsetForLeaderEpoch. Stable: the latest epoch of the
        #: leader-epoch-checkpoint when there is one, else ``leader_epoch``.
        self.leader_epoch = loaded.leader_epoch
        #: epoch -> start offset (leader-epoch-checkpoint)
        self.leader_epoch_cache: LeaderEpochFileCache = loaded.leader_epoch_cache
        #: Whether the directory was opened after a clean shutdown (for tests and metrics).
        self.had_clean_shutdown = loaded.had_clean_shutdown
        #: Bytes cut from torn or corrupt tails while opening.
        self.recovered_truncated_bytes = loaded.recovered_truncated_bytes
        #: Batch headers replayed to rebuild the producer state when last (re)built.
        self.producer_state_replayed_batches = loaded.producer_state_replayed_batches

    def _load_producer_state(self) -> None:
        """Rebuild the producer state from the newest snapshot left and the batches after it."""
        self.producer_state_replayed_batches = rebuild_producer_state(
            self.producer_state, self.local, self._log_start_offset
        )

    # -- properties --------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self.local.directory

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self.local.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Offsets below it are committed; a single-node broker commits on append."""
        return self.local.log_end_offset

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

    def fetch_offsets(self) -> tuple[int, int, int, int]:
        """(log start offset, high watermark, last stable offset, log end offset) at
        once, as the properties give them: what a fetch's read is checked and answered
        with (each property alone walks to the active segment; a fan-out's wake-up
        reads them once per answer)."""
        end = self.local.log_end_offset
        start = self._log_start_offset
        fuo = self.producer_state.first_unstable_offset()
        if fuo is None or fuo >= end:
            return start, end, end, end
        return start, end, max(fuo, start), end

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        return self.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self.local.recovery_point

    flushed_offset = recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.local.recovery_point

    @property
    def size_bytes(self) -> int:
        return self.local.size_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list)."""
        return self.local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    @property
    def closed(self) -> bool:
        return self.local.closed

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic settings (AlterConfigs); they take effect from the next call."""
        self.local.config = config

    def _check_open(self) -> None:
        self.local.check_open()

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
        against ``message.timestamp.{before,after}.max.ms`` (:mod:`.validator`). The
        bytes are in the OS page cache when this returns. With ``auto_flush`` the log is fsynced here once
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
        records, v = self._validate(records, now_ms, from_client, single_batch)
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
                dup.first_offset, dup.last_offset, dup.timestamp if log_append_time is not None else -1,
                0, dup.timestamp, self._log_start_offset, 0, duplicate=True,
            )  # fmt: skip
        last = first + v.num_records - 1
        segment = self._write(records, v, first, last, log_append_time, max_ts, now_ms)
        cache = self.leader_epoch_cache
        if cache.latest_epoch != self.leader_epoch:
            # Kafka's maybeAssignEpochStartOffset: the first batch of an epoch (after the
            # cache was emptied by a full truncation) records where the epoch starts.
            cache.assign(self.leader_epoch, first)
        try:
            if prepared is not None:
                self._commit_producer_state(segment, prepared)
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

    def _write(
        self, records: bytearray | memoryview, v: ValidatedBatches, first: int, last: int,
        log_append_time: int | None, max_ts: int, now_ms: WallMs,
    ) -> LogSegment:
        """Offsets ``first``..``last``, the leader epoch (and LogAppendTime) assigned, the
        batches written to the active segment (rolled first if due); the segment. An
        ``OSError`` leaves the log as it was (:class:`.dir_failure.StorageError`)."""
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
        return segment

    def _commit_producer_state(self, segment: LogSegment, prepared: PreparedAppend) -> None:
        """The appended batches' producers updated; the transactions their markers
        closed completed, the aborted ones in the segment's ``.txnindex``."""
        ps = self.producer_state
        for completed in ps.commit(prepared):
            if completed.is_aborted:
                segment.txn_index.append(ps.aborted_txn(completed))
            ps.complete_txn(completed)

    def _validate(
        self, records: bytearray | memoryview, now_ms: WallMs, from_client: bool, single_batch: bool
    ) -> tuple[bytearray | memoryview, ValidatedBatches]:
        """Kafka's ``analyzeAndValidateRecords`` and ``LogValidator``: the batches' framing,
        CRCs and sizes, keys on a compacted topic, record timestamps; batches in another
        codec than the topic's are rebuilt in it (the records returned are then new)."""
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
        return records, v

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
        seg = self.local.active_segment
        if self._should_roll(seg, size, max_ts, max_offset, now_ms):
            return self.roll(now_ms)
        return seg

    def roll(self, now_ms: WallMs) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        old = self.local.active_segment
        if old.size == 0:
            return old
        # Kafka snapshots the producer state at every roll, so recovery replays at most
        # the active segment. fsynced by the next flush (a torn one is skipped on load).
        self.local.sync_on_next_flush(self.producer_state.take_snapshot(old.next_offset, sync=False))
        return self.local.roll(now_ms)

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
        return self.local.read(
            offset, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset, region=region
        )

    def read_region(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None
    ) -> FileRegion | bytes:
        """:meth:`read` as a :class:`FileRegion` of the segment file (``b""`` when there
        is nothing): the fetch path, which sends the bytes from the file."""
        return self.read(offset, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset, region=True)

    def fetch_upper_bound(self, offset: int) -> int:
        """The offset a fetch from ``offset`` reads below at most: the next segment's base
        offset, else the log end offset (Kafka's fallback for ``upperBoundOffset``)."""
        return self.local.fetch_upper_bound(offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Every aborted transaction a fetch from ``fetch_offset`` below ``upper_bound_offset``
        overlaps (:func:`~tidegate.log.local_log.collect_aborted_transactions`)."""
        self._check_open()
        return self.local.collect_aborted_transactions(fetch_offset, upper_bound_offset)

    def bytes_between(self, start: int, end: int) -> int:
        """Roughly the bytes of the batches from the one holding ``start`` to the one at
        ``end`` (:meth:`LocalLog.bytes_between <tidegate.log.local_log.LocalLog.bytes_between>`)."""
        return self.local.bytes_between(start, end)

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
        for seg in self.local.segments:
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
        for seg in self.local.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        return best.offset_of_max_timestamp_record()

    # -- flushing ----------------------------------------------------------------

    def begin_flush(self, up_to: int | None = None) -> FlushTicket:
        """First half of a flush (:meth:`LocalLog.begin_flush
        <tidegate.log.local_log.LocalLog.begin_flush>`): run the ticket on a worker thread,
        then :meth:`complete_flush` on this thread."""
        return self.local.begin_flush(up_to)

    def complete_flush(self, ticket: FlushTicket) -> bool:
        """Second half: advance the recovery point to the ticket's target once it ran;
        False (nothing changed) if it did not sync or is stale."""
        return self.local.complete_flush(ticket)

    def checkpoint_recovery_point(self) -> RecoveryPointCheckpoint | None:
        """The checkpoint write to run (on any thread) if the recovery point moved since."""
        return self.local.checkpoint_recovery_point()

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below ``up_to`` (default: the log end offset) on this thread."""
        self.local.flush(up_to)

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
        segs = self.local.segments
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
        self.local.remove_and_delete_segments(n)
        first = self.local.bases[0]
        self._set_log_start_offset(max(self._log_start_offset, first))
        # The producer state itself stays (KIP-360: producers outlive their batches until
        # producer.id.expiration.ms); snapshots of deleted segments go, the newest stays.
        self.producer_state.delete_snapshots_before(first)
        return n

    def _set_log_start_offset(self, offset: int) -> None:
        """Kafka's ``updateLogStartOffset`` plus the epoch cache's trim. The log directory's
        ``log-start-offset-checkpoint`` is the LogManager's to write; the segments below
        the new start are deleted by the caller (or the next retention pass)."""
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self.local.update_recovery_point(offset)
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
        if self.closed:
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
        if offset < self._log_start_offset or offset <= self.local.bases[0]:
            self._truncate_fully_and_start_at(offset, now_ms)
            return offset
        leo = self.local.truncate_to(offset)
        self._log_start_offset = min(self._log_start_offset, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        # As Kafka: drop the snapshots past the new end and rebuild the producer state
        # from the newest one left plus the remaining batch headers.
        self.producer_state.delete_snapshots_after(leo)
        self._load_producer_state()
        return leo

    def _truncate_fully_and_start_at(self, offset: int, now_ms: WallMs) -> None:
        self.local.truncate_fully_and_start_at(offset, now_ms)
        self._log_start_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully()

    def close(self) -> None:
        """Flush everything, checkpoint, write the clean-shutdown marker, close files."""
        if self.closed:
            return
        self.local.flush_for_close()
        self.leader_epoch_cache.flush()
        # The producer state at the end of the log, so the next open reads no batches.
        self.producer_state.take_snapshot(self.log_end_offset, sync=True)
        self.local.mark_clean_shutdown()

    def abandon(self) -> None:
        """Close every file without flushing or marking a clean shutdown (an offline log
        dir, a close that failed): the next open recovers the log."""
        self.local.abandon()

    def delete(self) -> None:
        """Close every file and remove the partition directory (DeleteTopics)."""
        self.local.delete()

    def _release(self) -> None:
        self.local.release()

    def __repr__(self) -> str:
        local = self.local
        return (
            f"Log({str(local.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={local.log_end_offset if local.bases else '?'}, "
            f"segments={len(local.bases)})"
        )
