"""Time, injectable so tests can control it: the one clock convention of tidegate.

Two clocks, two types that mypy keeps apart (Kafka's ``Time.hiResClockMs()`` and
``Time.milliseconds()``; Rust's ``Instant`` and ``SystemTime``):

* :data:`MonotonicMs` — integer milliseconds of a monotonic clock
  (:meth:`Clock.milliseconds`): deadlines, timers, sessions, rates and quotas, anything
  that measures how long since or until. It never jumps, and means nothing outside
  this process.
* :data:`WallMs` — integer milliseconds since the epoch (:meth:`Clock.wall_milliseconds`):
  record timestamps, commit and expiry times, anything compared with a timestamp a
  client wrote or that outlives the process.
* Durations stay plain ``int`` milliseconds; ``now + timeout`` is an ``int`` until it is
  named a time again (``MonotonicMs(now + timeout)``), which is where a reader checks
  that both sides are on the same clock.
* Elapsed thread time (the request quota) uses :meth:`Clock.nanoseconds`.

``NewType`` rather than small classes: a time stays a plain ``int`` at run time (a
timer reads the clock once per delayed request), and arithmetic decays to ``int``, so
every derived time is named on purpose. What ``NewType`` lets through is arithmetic
mixing the two (``wall - monotonic`` is an ``int`` like any other), which is why time
enters one way: the wrong clock is refused where it comes in, at a typed ``now``
argument or field.

Time comes in one way per kind of object (docs/architecture.md, "Time"): the shell
chooses the clock; every component of the core holds the :class:`Clock` it was built
with (there is no default: nothing falls back to the system clock); the state those
components drive (the log, fetch sessions, transaction metadata, sensors, the timing
wheels' buckets) is handed the time as the ``now`` argument of each call and never
reads a clock.

The client, the buffer pool and the accumulator ask their :class:`Clock` for the time and
for a timed wait on a condition. Tests use :class:`MockClock` (Kafka's ``MockTime``)
everywhere. Its timed waits return at once with the fake time moved forward by the
whole timeout (trio's autojump idea), so "blocked for max.block.ms and gave up" is
deterministic and takes no real time.
"""

from __future__ import annotations

import threading
import time
from typing import NewType

#: milliseconds of a monotonic clock: deadlines, timers, sessions, rates
MonotonicMs = NewType("MonotonicMs", int)
#: milliseconds since the epoch: record timestamps, commit and expiry times
WallMs = NewType("WallMs", int)


class Clock:
    """The real clock: monotonic time for deadlines, wall time for timestamps."""

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def milliseconds(self) -> MonotonicMs:
        """Monotonic milliseconds: deadlines, timers, sessions, rates."""
        return MonotonicMs(time.monotonic_ns() // 1_000_000)

    def wall_milliseconds(self) -> WallMs:
        """Milliseconds since the epoch: record timestamps, commit times."""
        return WallMs(time.time_ns() // 1_000_000)

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

    By default (``autojump=True``) ``wait`` advances the fake time by the whole
    timeout and reports a timeout at once, without waiting for a notify: "blocked
    for max.block.ms and gave up" takes no real time.

    With ``autojump=False`` time moves only when the test calls :meth:`advance` (or
    :meth:`set_milliseconds`): ``wait`` returns True when the condition is notified
    (another thread freed memory, or closed the pool) and False once the fake time has
    been moved past its deadline, which wakes it. The wait itself is an untimed
    ``Condition.wait``: a timed one can lose a ``notify`` that races with its timeout
    (CPython hands the notify to the waiter whose timeout just expired, which then
    reports a timeout), and on fake time that never moves the notified thread would
    then sleep for good. Tests where a second thread wakes a blocked one use this, so
    wait times and timeouts are exact and nothing depends on how fast the machine runs.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, *, autojump: bool = True) -> None:
        self._ns = 0
        self._wall_base_ms = start_ms
        self._lock = threading.Lock()
        self.autojump = autojump
        #: threads blocked in wait (autojump=False): woken when the time passes their deadline
        self._sleepers: list[_Sleeper] = []

    def nanoseconds(self) -> int:
        return self._ns

    def milliseconds(self) -> MonotonicMs:
        return MonotonicMs(self._ns // 1_000_000)

    def wall_milliseconds(self) -> WallMs:
        return WallMs(self._wall_base_ms + self._ns // 1_000_000)

    def set_milliseconds(self, ms: int) -> None:
        """Move the fake monotonic time forward to ``ms`` (never backwards)."""
        if ms * 1_000_000 < self._ns:
            raise ValueError("a monotonic clock cannot go backwards")
        self._move_to(ms * 1_000_000)

    def _move_to(self, ns: int) -> None:
        """Set the time and wake every waiter whose deadline it reaches."""
        with self._lock:
            self._ns = ns
            due = [s for s in self._sleepers if not s.expired and s.deadline_ns <= ns]
            for sleeper in due:
                sleeper.expired = True
        for sleeper in due:
            # The waiter holds this lock until it is inside Condition.wait, so the notify
            # cannot arrive before it waits.
            with sleeper.condition:
                sleeper.condition.notify_all()

    def advance(self, ms: float) -> None:
        self._move_to(self._ns + int(ms * 1_000_000))

    def sleep(self, seconds: float) -> None:
        self.advance(seconds * 1000)

    def wait(self, condition: threading.Condition, timeout_ns: int) -> bool:
        if timeout_ns <= 0:
            return False
        if self.autojump:
            with self._lock:
                self._ns += timeout_ns
            return False
        with self._lock:
            sleeper = _Sleeper(condition, self._ns + timeout_ns)
            self._sleepers.append(sleeper)
        try:
            condition.wait()
            return not sleeper.expired
        finally:
            with self._lock:
                self._sleepers.remove(sleeper)


class _Sleeper:
    """A thread blocked in :meth:`MockClock.wait` until ``deadline_ns`` of fake time."""

    __slots__ = ("condition", "deadline_ns", "expired")

    def __init__(self, condition: threading.Condition, deadline_ns: int) -> None:
        self.condition = condition
        self.deadline_ns = deadline_ns
        self.expired = False
