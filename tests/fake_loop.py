"""A fake event loop for the shell's wake-ups, on a :class:`MockClock`.

The broker's timer reaper (and anything else that arms wake-ups) takes
``call_at(at_ms, fn) -> handle``; the shell implements it with ``loop.call_later``.
Tests pass :meth:`FakeLoop.call_at` instead and move time with :meth:`run_until`:
each armed callback runs exactly at its time, in time order, with the clock set to
that time. Nothing sleeps, so expiry times can be asserted exactly.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from tidegate.clock import MockClock


class FakeHandle:
    __slots__ = ("at_ms", "cancelled", "fn")

    def __init__(self, at_ms: int, fn: Callable[[], None]) -> None:
        self.at_ms = at_ms
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    def __init__(self, clock: MockClock | None = None) -> None:
        self.clock = clock if clock is not None else MockClock()
        self._heap: list[tuple[int, int, FakeHandle]] = []
        self._seq = itertools.count()
        self.calls = 0

    def time_ms(self) -> int:
        return self.clock.milliseconds()

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> FakeHandle:
        handle = FakeHandle(at_ms, fn)
        heapq.heappush(self._heap, (at_ms, next(self._seq), handle))
        return handle

    @property
    def armed(self) -> list[int]:
        """Times of the callbacks still armed, earliest first."""
        return sorted(h.at_ms for _, _, h in self._heap if not h.cancelled)

    def run_until(self, end_ms: int) -> None:
        """Run every callback due up to ``end_ms`` in time order, then set the clock to it."""
        heap = self._heap
        while heap and heap[0][0] <= end_ms:
            at, _, handle = heapq.heappop(heap)
            if handle.cancelled:
                continue
            if at > self.time_ms():
                self.clock.advance(at - self.time_ms())
            self.calls += 1
            handle.fn()
        if end_ms > self.time_ms():
            self.clock.advance(end_ms - self.time_ms())


def clock_at(ms: int) -> MockClock:
    """A :class:`MockClock` whose monotonic time starts at ``ms`` (it starts at 0)."""
    clock = MockClock()
    clock.set_milliseconds(ms)
    return clock
