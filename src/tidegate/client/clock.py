"""Time for the client and producer, injectable so tests can control it.

The client, the buffer pool and the accumulator never read the system clock directly: they
ask a :class:`Clock` for the time and for a timed wait on a condition. Tests use
:class:`MockClock`, whose timed waits return at once with the fake time moved
forward by the whole timeout (trio's autojump idea), so "blocked for max.block.ms
and gave up" is deterministic and takes no real time.
"""

from __future__ import annotations

import threading
import time


class Clock:
    """The real clock: monotonic time for deadlines, wall time for timestamps."""

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def milliseconds(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_milliseconds(self) -> int:
        """Milliseconds since the epoch: record timestamps."""
        return time.time_ns() // 1_000_000

    def wait(self, condition: threading.Condition, timeout_ns: int) -> bool:
        """Wait on ``condition`` (its lock held) for at most ``timeout_ns``; True if
        notified, False if the time ran out."""
        if timeout_ns <= 0:
            return False
        return condition.wait(timeout_ns / 1e9)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = Clock()


class MockClock(Clock):
    """A fake clock for tests (Kafka's ``MockTime``).

    ``wait`` advances the fake time by the whole timeout and reports a timeout,
    unless the condition is notified while the lock is briefly released (it does a
    zero-length real wait first, so a notify already pending is seen).
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ns = 0
        self._wall_base_ms = start_ms
        self._lock = threading.Lock()

    def nanoseconds(self) -> int:
        return self._ns

    def milliseconds(self) -> int:
        return self._ns // 1_000_000

    def wall_milliseconds(self) -> int:
        return self._wall_base_ms + self._ns // 1_000_000

    def advance(self, ms: float) -> None:
        with self._lock:
            self._ns += int(ms * 1_000_000)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds * 1000)

    def wait(self, condition: threading.Condition, timeout_ns: int) -> bool:
        if timeout_ns > 0:
            with self._lock:
                self._ns += timeout_ns
        return False
