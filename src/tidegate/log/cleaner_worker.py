"""The log cleaner's worker process (``log.cleaner.execution=process``, docs/compaction.md).

A clean's reading and rewriting is CPU-bound Python (record parsing, MD5, re-encoding);
on a thread of the broker it takes the GIL from the event loop and produce latency
suffers. :class:`CleanerWorker` runs it in a child process instead: ``python -m
tidegate.log.cleaner_worker``, started on the first clean and kept, fed one pickled
:class:`CleanJob` at a time on its stdin and answering with the pickled result of
:func:`prepare_in_worker` on its stdout. The clean there reads a :class:`LogSnapshot`:
the log's files as the job describes them, without the log.

A plain child process rather than :mod:`multiprocessing`: its spawn method re-imports
the parent's ``__main__`` in the child, which would re-run a user's script that starts an
in-process broker (tidegate.testing) without a main guard.

The child dies with the broker: Linux ``PR_SET_PDEATHSIG``, and a check of its parent
between batches; its ``.cleaned`` files belong to a broker that no longer exists, and
the next start removes them. :meth:`CleanerWorker.run` blocks: the broker calls it on a
worker thread.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tidegate.clock import SYSTEM_CLOCK, WallMs
from tidegate.record.record_batch import BatchHeader

from .cleaner import Cleaner, CleanerStats
from .index import AbortedTxn, TransactionIndex
from .local_log import collect_aborted_transactions
from .log_cleaner_manager import LogToClean
from .segment import iter_batch_headers, log_file_path, txn_index_file_path
from .throttler import Throttler

__all__ = [
    "CleanJob",
    "CleanerWorker",
    "CleanerWorkerDied",
    "LogSnapshot",
    "SegmentFile",
    "prepare_in_worker",
]

Result = tuple[CleanerStats, list[tuple[list[int], list[AbortedTxn]]]]


class SegmentFile:
    """A closed segment as a cleaner worker process sees it: its log file (read-only,
    opened on first read, up to the size it had when the clean was chosen) and its
    aborted-transaction index. What :class:`Cleaner` reads of a :class:`LogSegment`."""

    def __init__(self, directory: Path, base_offset: int, size: int, next_offset: int) -> None:
        self.base_offset = base_offset
        self.size = size
        self.next_offset = next_offset
        self.path = log_file_path(directory, base_offset)
        self._txn_path = txn_index_file_path(directory, base_offset)
        self._fd: int | None = None
        self._txn_index: TransactionIndex | None = None

    @property
    def txn_index(self) -> TransactionIndex:
        if self._txn_index is None:
            self._txn_index = TransactionIndex.load(self._txn_path, self.base_offset)
        return self._txn_index

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        return self._fd

    def iter_batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        if start_offset >= self.next_offset:
            return
        for pos, h in iter_batch_headers(self._file(), self.path, 0, self.size):
            if h[0] + h[6] >= start_offset:
                yield pos, BatchHeader._make(h)

    def read_batch(self, position: int, size: int) -> bytes:
        data = os.pread(self._file(), size, position)
        if len(data) < size:
            raise OSError(f"{self.path}: short read at {position}")
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class _SnapshotConfig:
    delete_retention_ms: int
    segment_bytes: int


@dataclass(frozen=True)
class CleanJob:
    """One clean, described by value so a worker process can run it (:func:`prepare_in_worker`):
    the partition directory, its segments (base offset, size, next offset; the last is the
    active one, never read), the cleanable range, the configs the clean uses, each
    producer's last data offset, and the I/O throttle."""

    directory: str
    segments: tuple[tuple[int, int, int], ...]
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    delete_retention_ms: int
    segment_bytes: int
    producer_last_offsets: dict[int, int]
    now_ms: WallMs
    dedupe_buffer_size: int
    load_factor: float
    io_buffer_size: int
    io_max_bytes_per_second: float

    @classmethod
    def of(cls, ltc: LogToClean, now_ms: WallMs, cleaner: Cleaner) -> CleanJob:
        plog = ltc.log
        return cls(
            str(plog.directory),
            tuple((s.base_offset, s.size, s.next_offset) for s in plog.segments),
            plog.log_start_offset, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
            plog.config.delete_retention_ms, plog.config.segment_bytes,
            {pid: e.last_data_offset for pid, e in plog.producer_state.producers.items()},
            now_ms, cleaner.offset_map.memory, cleaner.offset_map.load_factor, cleaner.io_buffer_size,
            cleaner.throttler.rate,
        )  # fmt: skip


class LogSnapshot:
    """What :class:`Cleaner` reads of a :class:`Log`, rebuilt from a :class:`CleanJob`
    in a worker process: the segment files, the log start, the configs of the clean, the
    aborted transactions (from the segments' ``.txnindex`` files); ``.cleaned`` files are
    written the same way as by the log."""

    def __init__(self, job: CleanJob) -> None:
        self.directory = Path(job.directory)
        self.segments = [SegmentFile(self.directory, b, size, nxt) for b, size, nxt in job.segments]
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = job.log_start_offset
        self.config = _SnapshotConfig(job.delete_retention_ms, job.segment_bytes)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        return collect_aborted_transactions(self.segments, self._bases, fetch_offset, upper_bound_offset)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()


def _check_parent(parent: int) -> Callable[[int], None]:
    """A throttle hook for a worker process: stop when the broker that started it is
    gone (its ``.cleaned`` files belong to a broker that no longer exists)."""

    def check(_n: int) -> None:
        if os.getppid() != parent:
            raise SystemExit("the broker is gone")

    return check


def prepare_in_worker(job: CleanJob, parent_pid: int) -> tuple[CleanerStats, list[tuple[list[int], list[AbortedTxn]]]]:
    """Run a clean's :meth:`Cleaner.prepare` in a worker process: everything but the
    swap, from the files alone. Returns the stats and, per group, the base offsets of
    the segments it replaces and the aborted transactions it kept."""
    # the worker is a process of its own: its clock is the system's
    throttle = Throttler(job.io_max_bytes_per_second, clock=SYSTEM_CLOCK)
    alive = _check_parent(parent_pid)

    def hook(n: int) -> None:
        alive(n)
        throttle(n)

    cleaner = Cleaner(job.dedupe_buffer_size, job.load_factor, clock=SYSTEM_CLOCK,
                      io_buffer_size=job.io_buffer_size, throttle=hook)
    snapshot = LogSnapshot(job)
    try:
        stats, groups = cleaner.prepare_log(
            snapshot, job.first_dirty_offset, job.first_uncleanable_offset, job.now_ms,
            last_data_offset=job.producer_last_offsets.get,
        )  # fmt: skip
    finally:
        snapshot.close()
    return stats, [([s.base_offset for s in segs], aborted) for segs, aborted in groups]


class CleanerWorkerDied(RuntimeError):
    """The worker process exited (killed, out of memory, broker shutting down) before it
    answered: the clean is lost, not the log's fault."""


class CleanerWorker:
    """One worker process, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _process(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            proc = self._proc = subprocess.Popen(
                [sys.executable, "-m", "tidegate.log.cleaner_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            )  # fmt: skip
        return proc

    def run(self, job: CleanJob) -> Result:
        """The clean's result from the worker (blocks; a worker thread calls it). Raises
        the worker's exception, or :class:`CleanerWorkerDied`."""
        with self._lock:
            if self._closed:
                raise CleanerWorkerDied("the cleaner worker is closed")
            proc = self._process()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                pickle.dump((job, os.getpid()), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                proc.stdin.flush()
                ok, payload = pickle.load(proc.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as exc:
                self._proc = None
                proc.kill()
                proc.wait()
                raise CleanerWorkerDied(f"the cleaner worker exited: {exc!r}") from None
        if not ok:
            raise payload
        result: Result = payload
        return result

    def close(self) -> None:
        """Stop the worker (a clean in progress is abandoned)."""
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


def _die_with_parent() -> None:
    import ctypes  # in the worker only: the broker does not pay its import

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The worker's loop: a job in, its result (or its exception) out, until EOF."""
    while True:
        try:
            job, parent = pickle.load(stdin)
        except EOFError:
            return
        answer: tuple[bool, Any]
        try:
            answer = (True, prepare_in_worker(job, parent))
        except Exception as exc:  # noqa: BLE001 - handed back to the broker, which decides
            answer = (False, exc)
        pickle.dump(answer, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    _die_with_parent()
    if os.getppid() == 1:
        sys.exit(1)  # the broker died before the call above
    serve(sys.stdin.buffer, sys.stdout.buffer)
