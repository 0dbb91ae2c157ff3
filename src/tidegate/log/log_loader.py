"""Opening a partition directory: Kafka's ``LogLoader`` (and ``UnifiedLog``'s rebuild of
the producer state, which the load ends with).

Durability contract: every offset below the recovery point has been fsynced. After a
crash (kill -9 or power loss) the load re-validates every segment from the one holding
the recovery point on (or all of them if the checkpoint is lost), keeping every whole
CRC-valid batch and cutting the log at the first torn or corrupt one. After a clean
shutdown (the ``clean-shutdown`` marker) only segments whose indexes are missing or
implausible are rebuilt. Leftovers of a crash go first: temporary files, indexes
without their log, the log cleaner's ``.cleaned`` files; a committed ``.swap`` is
completed (:func:`~tidegate.log.segment_swap.complete_swaps`).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass

from tidegate.clock import WallMs
from tidegate.record.control_records import (
    EndTransactionMarker,
    InvalidControlRecordError,
    end_transaction_marker_of,
)
from tidegate.record.record_batch import CONTROL_FLAG_MASK
from tidegate.utils.files import TMP_MARK

from .leader_epoch import LeaderEpochFileCache
from .local_log import CLEAN_SHUTDOWN_FILE, SEGMENT_FILE_RE, LocalLog, read_recovery_point
from .producer_state import ProducerStateManager
from .segment import LogSegment
from .segment_swap import complete_swaps

__all__ = ["LoadedLog", "LogLoader", "rebuild_producer_state"]


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What a load found (Kafka's ``LoadedLogOffsets`` and more)."""

    log_start_offset: int
    #: epoch -> start offset (leader-epoch-checkpoint), trimmed to the log
    leader_epoch_cache: LeaderEpochFileCache
    #: the latest epoch of the cache, else the epoch the log was opened with
    leader_epoch: int
    #: whether the directory was opened after a clean shutdown
    had_clean_shutdown: bool
    #: bytes cut from torn or corrupt tails
    recovered_truncated_bytes: int
    #: batch headers replayed to rebuild the producer state
    producer_state_replayed_batches: int


class LogLoader:
    """Loads ``local``'s directory into it: the segments (recovered where they may hold
    unflushed data), the recovery point, the log start offset (the log directory's
    checkpoint, ``log_start_offset``), the leader-epoch cache, and the producer state."""

    def __init__(
        self,
        local: LocalLog,
        producer_state: ProducerStateManager,
        now_ms: WallMs,
        *,
        leader_epoch: int,
        log_start_offset: int | None,
    ) -> None:
        self.local = local
        self.producer_state = producer_state
        self.now_ms = now_ms
        self.leader_epoch = leader_epoch
        #: the log start offset from the log directory's checkpoint (None: not in it)
        self.checkpointed_log_start_offset = log_start_offset
        self.recovered_truncated_bytes = 0
        #: base offset of the first recovered segment holding markers: its transaction
        #: index and those after it are rebuilt from the producer state (None: no need)
        self.rebuild_txn_index_from: int | None = None

    def load(self) -> LoadedLog:
        local = self.local
        d = local.directory
        clean = os.path.exists(d / CLEAN_SHUTDOWN_FILE)
        if complete_swaps(d):
            local.dir_dirty = True
        bases = self._remove_strays()
        rp_ckpt = read_recovery_point(local.dir_fd)
        rp = rp_ckpt if rp_ckpt is not None else 0
        cache = LeaderEpochFileCache(local.dir_fd)
        segs = self._open_segments(bases)
        self._recover(segs, clean, rp, cache)
        for seg in segs[:-1]:
            seg.release_index_fds()  # rebuilt indexes are synced; reopened if ever written

        lso_ckpt = self.checkpointed_log_start_offset
        lso = lso_ckpt if lso_ckpt is not None else 0
        if segs:
            lso = max(lso, segs[0].base_offset)
        if not segs:
            segs.append(LogSegment.create(d, lso, local.config.index_interval_bytes, self.now_ms))
            local.dir_dirty = True
        local.loaded(segs, 0)
        if lso > local.log_end_offset:
            # Everything up to the checkpointed start offset is gone (e.g. an unflushed
            # tail lost after DeleteRecords/retention): start empty at the start offset.
            local.truncate_fully_and_start_at(lso, self.now_ms)
            cache.clear()
            self.producer_state.truncate_fully()
        leo = local.log_end_offset
        local.update_recovery_point(max(leo if clean else min(max(rp, 0), leo), lso))
        # Kafka's LogLoader: the epochs must lie within [log start, log end], and the
        # leader (this node, at every open) assigns its epoch from the log end offset on.
        cache.truncate_from_end(leo)
        cache.truncate_from_start(lso)
        cache.flush()
        leader_epoch = self.leader_epoch
        latest = cache.latest_epoch
        if latest is not None:
            leader_epoch = latest
        cache.assign(leader_epoch, leo)

        if clean:
            os.unlink(d / CLEAN_SHUTDOWN_FILE)
            local.dir_dirty = True
        if local.dir_dirty:
            # Before accepting writes, make the marker's removal (and any segment
            # deletion above) durable: a later crash must not look like a clean stop.
            os.fsync(local.dir_fd)
            local.dir_dirty = False
        rebuild_from = self.rebuild_txn_index_from
        if rebuild_from is not None and rebuild_from < local.bases[0]:
            rebuild_from = None  # the recovered segments were all cut away
        replayed = rebuild_producer_state(self.producer_state, local, lso, rebuild_from)
        return LoadedLog(lso, cache, leader_epoch, clean, self.recovered_truncated_bytes, replayed)

    def _remove_strays(self) -> set[int]:
        """Delete temporary files and indexes without their log; the base offsets of the
        segment logs."""
        d = self.local.directory
        bases: set[int] = set()
        strays: list[str] = []
        for name in os.listdir(d):
            if TMP_MARK in name:
                strays.append(name)
                continue
            m = SEGMENT_FILE_RE.match(name)
            if m and m.group(2) == "log":
                bases.add(int(m.group(1)))
        for name in os.listdir(d):
            m = SEGMENT_FILE_RE.match(name)
            if m and m.group(2) != "log" and int(m.group(1)) not in bases:
                strays.append(name)  # an index without its log (Kafka deletes those too)
        for name in strays:
            os.unlink(d / name)
        return bases

    def _open_segments(self, bases: set[int]) -> list[LogSegment]:
        local = self.local
        segs: list[LogSegment] = []
        try:
            for base in sorted(bases):
                segs.append(LogSegment.open(local.directory, base, local.config.index_interval_bytes, self.now_ms))
        except BaseException:
            for s in segs:
                s.close()
            raise
        local.loaded(segs, 0)  # closed with the log if the load fails from here on
        return segs

    def _recover(self, segs: list[LogSegment], clean: bool, rp: int, cache: LeaderEpochFileCache) -> None:
        """Load each segment; recover those that may hold unflushed data (after a crash:
        the one holding the recovery point and every later one) or whose indexes do not
        load. A segment cut short takes every later one with it."""
        i = 0
        while i < len(segs):
            seg = segs[i]
            is_last = i == len(segs) - 1
            next_base = None if is_last else segs[i + 1].base_offset
            unflushed = next_base is None or next_base > rp
            if (not clean and unflushed) or not seg.load(next_base):
                truncated = seg.recover(cache)
                if seg.recovered_control_batches and self.rebuild_txn_index_from is None:
                    self.rebuild_txn_index_from = seg.base_offset
                self.recovered_truncated_bytes += truncated
                if truncated and not is_last:
                    # The log must stay contiguous: what followed the damage goes too.
                    for later in segs[i + 1 :]:
                        later.delete()
                    del segs[i + 1 :]
                    self.local.dir_dirty = True
            i += 1


def rebuild_producer_state(
    ps: ProducerStateManager, local: LocalLog, log_start_offset: int, rebuild_txn_index_from: int | None = None
) -> int:
    """Kafka's ``rebuildProducerState``: the newest snapshot at or below the log end offset,
    then the batches after it, from the log start offset on (batches DeleteRecords put
    below the start are not replayed; after a clean shutdown the snapshot is at the end and
    nothing is read). With ``rebuild_txn_index_from`` (recovered segments from there on,
    their transaction indexes emptied) the replay starts at a snapshot at or below it and
    re-indexes the transactions aborted from there on. Returns the batches replayed."""
    leo = local.log_end_offset
    start = ps.load(leo, rebuild_txn_index_from)
    segs = local.segments
    scan_from = max(segs[0].base_offset, log_start_offset)
    if start is not None:
        scan_from = max(start, scan_from)
    replayed = 0
    if scan_from < leo:
        i = max(0, bisect_right(local.bases, scan_from) - 1)
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
                    marker = _marker_at(seg, pos, h.size)
                completed = ps.replay_batch(h, marker)
                if completed is not None:
                    if reindex and completed.is_aborted:
                        seg.txn_index.append(ps.aborted_txn(completed))
                    ps.complete_txn(completed)
    return replayed


def _marker_at(seg: LogSegment, pos: int, size: int) -> EndTransactionMarker | None:
    try:
        return end_transaction_marker_of(seg.read_batch(pos, size))
    except InvalidControlRecordError:
        return None  # Kafka skips control records it cannot read
