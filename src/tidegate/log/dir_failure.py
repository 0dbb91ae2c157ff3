"""Kafka's ``LogDirFailureChannel`` for tidegate's one log directory (docs/reliability.md).

Every I/O error of the write path (append, index write, segment roll, fsync,
checkpoint) is reported here instead of escaping to the network layer. The channel
decides what the error means for the directory:

- ENOSPC/EDQUOT while writing (not while fsyncing): the directory is *full*. Nothing
  was written (the log cut the torn bytes off), so writes are refused with
  KAFKA_STORAGE_ERROR only as long as they keep failing: every append is the probe,
  and writes resume by themselves when space returns. Reads keep working.
- anything else (EIO, a failed fsync whatever its errno, a write that could not be
  cut back): the directory goes *offline* until restart, as Kafka takes a failed
  log dir offline. After a failed fsync the page cache may have dropped the dirty
  pages (PostgreSQL's "fsyncgate"), so retrying the fsync proves nothing: reads and
  writes of every partition answer KAFKA_STORAGE_ERROR; the broker stays up to
  answer Metadata, ApiVersions and DescribeLogDirs.

Each state change logs one line with its cause; repeats of the same failure are
counted and logged at most once per ``repeat_interval_ms``. Sans-IO: the clock is
injected.
"""

from __future__ import annotations

import errno
import logging

from tidegate.clock import Clock, MonotonicMs

__all__ = ["LogDirFailureChannel", "StorageError", "UnrecoverableWriteError"]

log = logging.getLogger(__name__)

#: errnos that mean "no space": transient, the write is retried by the next append
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class StorageError(Exception):
    """An I/O error of the log layer, with what was being done (Kafka's
    ``KafkaStorageException``). ``fatal``: the log's state on disk is unknown (a
    failed fsync, a write that could not be cut back), so the directory must go
    offline whatever the errno."""

    def __init__(self, what: str, cause: OSError, *, fatal: bool = False) -> None:
        super().__init__(f"{what}: {cause.strerror or cause}")
        self.what = what
        self.cause = cause
        self.fatal = fatal


class UnrecoverableWriteError(OSError):
    """A failed write whose torn bytes could not be cut off (the cut itself failed)."""


class LogDirFailureChannel:
    def __init__(
        self,
        log_dir: str,
        clock: Clock,
        *,
        repeat_interval_ms: int = 60_000,
    ) -> None:
        self.log_dir = log_dir
        #: its monotonic time spaces out the repeated error lines
        self._clock = clock
        self.repeat_interval_ms = repeat_interval_ms
        #: the directory is offline until restart (Kafka's offline log dir)
        self.offline = False
        self.offline_reason: str | None = None
        #: the last write failed for lack of space and none has succeeded since
        self.full = False
        #: I/O errors reported since start (tidegate_log_storage_errors_total)
        self.storage_errors = 0
        self._last_logged_ms: MonotonicMs | None = None
        self._suppressed = 0

    @property
    def offline_log_directory_count(self) -> int:
        """Kafka's ``LogManager.OfflineLogDirectoryCount``."""
        return 1 if self.offline else 0

    @property
    def writable(self) -> bool:
        return not self.offline

    def error(self, exc: BaseException) -> bool:
        """Report an I/O error of the write path; returns True if the dir is now offline."""
        self.storage_errors += 1
        cause: BaseException
        if isinstance(exc, StorageError):
            what, cause, fatal = exc.what, exc.cause, exc.fatal
        else:
            what, cause, fatal = "I/O", exc, True
        err = getattr(cause, "errno", None)
        reason = f"{what} in {self.log_dir} failed: {cause}"
        if self.offline:
            self._repeat(reason)
            return True
        if not fatal and err in _FULL_ERRNOS and not isinstance(cause, UnrecoverableWriteError):
            if not self.full:
                self.full = True
                self._log_now(
                    logging.ERROR,
                    "log dir %s is full (%s); produce answers KAFKA_STORAGE_ERROR until space "
                    "returns, reads keep working",
                    self.log_dir, reason,
                )
            else:
                self._repeat(reason)
            return False
        self.offline = True
        self.full = False
        self.offline_reason = reason
        self._log_now(
            logging.ERROR,
            "log dir %s is offline until restart (%s); its partitions answer KAFKA_STORAGE_ERROR",
            self.log_dir, reason,
        )
        return True

    def write_succeeded(self) -> None:
        """An append went through: a full dir has space again."""
        if self.full:
            self.full = False
            extra = f" ({self._suppressed} more write(s) failed meanwhile)" if self._suppressed else ""
            self._suppressed = 0
            log.warning("log dir %s has space again: writes resume%s", self.log_dir, extra)

    def _log_now(self, level: int, msg: str, *args: object) -> None:
        self._suppressed = 0
        self._last_logged_ms = self._clock.milliseconds()
        log.log(level, msg, *args)

    def _repeat(self, reason: str) -> None:
        now = self._clock.milliseconds()
        if self._last_logged_ms is not None and now - self._last_logged_ms < self.repeat_interval_ms:
            self._suppressed += 1
            return
        n, self._suppressed = self._suppressed, 0
        self._last_logged_ms = now
        log.error("log dir %s still failing: %s (%d more since the last report)", self.log_dir, reason, n)
