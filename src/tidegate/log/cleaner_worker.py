"""The log cleaner's worker process (``log.cleaner.execution=process``, docs/compaction.md).

A clean's reading and rewriting is CPU-bound Python (record parsing, MD5, re-encoding);
on a thread of the broker it takes the GIL from the event loop and produce latency
suffers. :class:`CleanerWorker` runs it in a child process instead: ``python -m
tidegate.log.cleaner_worker``, started on the first clean and kept, fed one pickled
:class:`~tidegate.log.cleaner.CleanJob` at a time on its stdin and answering with the
pickled result of :func:`~tidegate.log.cleaner.prepare_in_worker` on its stdout.

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
from typing import IO, Any

from .cleaner import CleanerStats, CleanJob, prepare_in_worker
from .index import AbortedTxn

__all__ = ["CleanerWorker", "CleanerWorkerDied"]

Result = tuple[CleanerStats, list[tuple[list[int], list[AbortedTxn]]]]


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
