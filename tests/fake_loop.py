"""The broker's scheduler on fake time: :class:`FakeLoop`, for tests.

The broker's core takes a :class:`tidegate.scheduler.Scheduler` (``call_soon``,
``call_at``, ``submit``, ``schedule``); the shell implements it on the asyncio loop.
FakeLoop implements it on a :class:`~tidegate.clock.MockClock`, the suite's one fake
clock: callbacks run only when the test moves time with :meth:`run_until` (or runs
what is ready with :meth:`run_pending`), each exactly at its time, in time order, with
the clock set to that time. ``submit`` runs its work inline and delivers the result on
the next :meth:`run_pending`, as a worker thread's completion arrives on a later loop
turn. Nothing sleeps, so times can be asserted exactly.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

from tidegate.clock import MockClock


class FakeHandle:
    __slots__ = ("at_ms", "cancelled", "fn")

    def __init__(self, at_ms: int, fn: Callable[[], None]) -> None:
        self.at_ms = at_ms
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Periodic:
    def __init__(self, loop: FakeLoop, name: str, fn: Callable[[], None], period_ms: int) -> None:
        self.loop, self.name, self.fn, self.period_ms = loop, name, fn, period_ms
        self.cancelled = False
        self.handle = loop.call_at(loop.time_ms() + period_ms, self.run)

    def run(self) -> None:
        if not self.cancelled:
            self.fn()
            self.handle = self.loop.call_at(self.loop.time_ms() + self.period_ms, self.run)

    def cancel(self) -> None:
        self.cancelled = True
        self.handle.cancel()


class FakeLoop:
    def __init__(self, clock: MockClock | None = None) -> None:
        self.clock = clock if clock is not None else MockClock()
        self._heap: list[tuple[int, int, FakeHandle]] = []
        self._seq = itertools.count()
        self._ready: deque[Callable[[], None]] = deque()
        self.calls = 0
        self.submitted = 0

    def time_ms(self) -> int:
        return self.clock.milliseconds()

    # -- the Scheduler interface ------------------------------------------------------
    def call_soon(self, fn: Callable[[], None]) -> None:
        self._ready.append(fn)

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> FakeHandle:
        handle = FakeHandle(at_ms, fn)
        heapq.heappush(self._heap, (at_ms, next(self._seq), handle))
        return handle

    def submit(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        self.submitted += 1
        try:
            result, exc = fn(), None
        except Exception as e:  # noqa: BLE001 - handed to on_done, as a worker thread would
            result, exc = None, e
        self._ready.append(lambda: on_done(result, exc))

    def schedule(self, name: str, fn: Callable[[], None], period_ms: int) -> _Periodic:
        return _Periodic(self, name, fn, period_ms)

    # -- driving time -----------------------------------------------------------------
    @property
    def armed(self) -> list[int]:
        """Times of the callbacks still armed, earliest first."""
        return sorted(h.at_ms for _, _, h in self._heap if not h.cancelled)

    def run_pending(self) -> int:
        """Run what is ready now (call_soon callbacks, finished submits, due timers)
        until nothing is; returns how many callbacks ran."""
        ran = 0
        while True:
            while self._ready:
                self._ready.popleft()()
                ran += 1
            if self._heap and self._heap[0][0] <= self.time_ms():
                _, _, handle = heapq.heappop(self._heap)
                if not handle.cancelled:
                    self.calls += 1
                    ran += 1
                    handle.fn()
                continue
            if not self._ready:
                return ran

    def run_until(self, end_ms: int) -> None:
        """Run every callback due up to ``end_ms`` in time order, then set the clock to it."""
        self.run_pending()
        heap = self._heap
        while heap and heap[0][0] <= end_ms:
            at, _, handle = heapq.heappop(heap)
            if handle.cancelled:
                continue
            if at > self.time_ms():
                self.clock.set_milliseconds(at)
            self.calls += 1
            handle.fn()
            self.run_pending()
        if end_ms > self.time_ms():
            self.clock.set_milliseconds(end_ms)
        self.run_pending()

    def advance(self, ms: int) -> None:
        """:meth:`run_until` ``ms`` from now."""
        self.run_until(self.time_ms() + ms)


def clock_at(ms: int) -> MockClock:
    """A :class:`MockClock` whose monotonic time starts at ``ms`` (it starts at 0); its
    wall clock reads MockClock's start (1_700_000_000_000) + ``ms``. The suite's one
    "fake clock at N ms"."""
    clock = MockClock()
    clock.set_milliseconds(ms)
    return clock
