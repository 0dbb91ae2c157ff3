"""Which log to clean next and from where: Kafka's ``LogCleanerManager`` (and its
``LogToClean``).

The first dirty offset of each compacted partition lives in the log directory's
``cleaner-offset-checkpoint``. The cleanable range of a log is ``[first dirty, first
uncleanable)``: the first uncleanable offset is the smallest of the last stable offset
(undecided transactions are never cleaned), the active segment's base offset and, with
min.compaction.lag.ms, the base of the first segment holding a record younger than the
lag. The filthiest log (the largest share of cleanable bytes) above
min.cleanable.dirty.ratio is cleaned next; max.compaction.lag.ms makes a log due
whatever its ratio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.clock import WallMs

from .checkpoint import read_checkpoint_file, write_checkpoint_file
from .dir_failure import LogDirFailureChannel, StorageError
from .log import Log

__all__ = ["CLEANER_OFFSET_CHECKPOINT_FILE", "LogCleanerManager", "LogToClean"]

#: Kafka's file, one per log directory: each compacted partition's first dirty offset.
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"


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
