"""The broker's log cleaner: Kafka's ``LogCleaner`` (docs/compaction.md).

It asks the :class:`~tidegate.log.log_cleaner_manager.LogCleanerManager` for the
filthiest compacted log, has its :class:`~tidegate.log.cleaner.Cleaner` clean it, moves
the log's first dirty offset in ``cleaner-offset-checkpoint``, and keeps Kafka's
LogCleaner metrics. A clean that raises makes its partition uncleanable, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.clock import WallMs

from .cleaner import Cleaner, PreparedClean
from .log import Log
from .log_cleaner_manager import LogCleanerManager, LogToClean

__all__ = ["LogCleaner"]

log = logging.getLogger(__name__)

#: a cleaner's last run before its first
_NEVER = WallMs(0)


@dataclass
class LogCleaner:
    """The broker's cleaner: picks the filthiest compacted log, cleans it, moves its
    checkpoint, keeps Kafka's LogCleaner metrics."""

    manager: LogCleanerManager
    cleaner: Cleaner
    #: Kafka's metrics: max-dirty-percent, cleaner-recopy-percent, max-clean-time-secs,
    #: max-buffer-utilization-percent, time-since-last-run-ms (from last_run_ms)
    max_dirty_percent: int = 0
    recopy_percent: int = 0
    max_clean_time_secs: int = 0
    max_buffer_utilization_percent: int = 0
    last_run_ms: WallMs = _NEVER
    cleans: int = 0
    #: the log a worker thread is cleaning (retention leaves it alone meanwhile)
    in_progress: Log | None = None

    def clean_once(self, logs: Mapping[tuple[str, int], Log], now_ms: WallMs) -> bool:
        """Clean the filthiest eligible log once, on this thread; False when none needed
        cleaning."""
        ltc = self.choose(logs, now_ms)
        if ltc is None:
            return False
        try:
            prepared = self.cleaner.prepare(ltc, now_ms)
        except Exception as exc:  # noqa: BLE001 - Kafka: any error makes it uncleanable
            self.failed(ltc, exc)
            return False
        return self.finish(ltc, prepared, now_ms)

    def choose(self, logs: Mapping[tuple[str, int], Log], now_ms: WallMs) -> LogToClean | None:
        """The log to clean now (None: none is due); updates max-dirty-percent."""
        ltc, max_ratio = self.manager.grab_filthiest(logs, now_ms)
        self.max_dirty_percent = int(100 * max_ratio)
        self.last_run_ms = now_ms
        return ltc

    def failed(self, ltc: LogToClean, exc: BaseException) -> None:
        """A clean raised: the partition is uncleanable from now on (Kafka's behaviour),
        unless the log changed under the clean (closed, or DeleteRecords moved its start
        and deleted segments the clean was reading)."""
        if ltc.log.closed:
            return
        if ltc.log.log_start_offset != ltc.log_start_offset:
            log.info("cleaning %s abandoned: its log start moved meanwhile (%r)", ltc.log, exc)
            return
        log.error("cleaning %s failed, marked uncleanable: %r", ltc.log, exc)
        assert isinstance(ltc.key, tuple)
        self.manager.uncleanable.add(ltc.key)

    def finish(self, ltc: LogToClean, prepared: PreparedClean, now_ms: WallMs) -> bool:
        """Swap a prepared clean in, move the checkpoint, update the metrics."""
        tp = ltc.key
        assert isinstance(tp, tuple)
        try:
            if not self.cleaner.commit(prepared, now_ms):
                log.info("cleaning %s abandoned: its segments changed meanwhile", ltc.log)
                return False
        except Exception as exc:  # noqa: BLE001 - Kafka: any error makes it uncleanable
            self.failed(ltc, exc)
            return False
        stats = prepared.stats
        self.manager.update_checkpoint(tp, stats.end_offset)
        self.cleans += 1
        self.max_clean_time_secs = int(stats.elapsed_secs)
        self.max_buffer_utilization_percent = int(100 * stats.buffer_utilization)
        if stats.bytes_read:
            self.recopy_percent = int(100 * stats.bytes_written / stats.bytes_read)
        log.info(
            "cleaned %s up to offset %d: %d of %d message(s) kept, %d -> %d bytes",
            ltc.log, stats.end_offset, stats.messages_written, stats.messages_read,
            stats.bytes_read, stats.bytes_written,
        )  # fmt: skip
        return True
