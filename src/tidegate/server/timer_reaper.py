"""Drives the purgatories' timers from the asyncio event loop (Kafka's SystemTimerReaper).

Kafka's reaper thread blocks on the delay queue of buckets. Here one
``loop.call_later`` is armed for the earliest non-empty bucket of all the timers;
when it fires, each purgatory advances its clock (expiring what is due) and the
wake-up is re-armed for the next bucket. Timers report a bucket scheduled earlier
than the armed wake-up through ``on_schedule``, which moves it earlier. Nothing
polls: with no delayed operation pending, nothing is armed at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.timer import monotonic_ms

log = logging.getLogger(__name__)


class TimerReaper:
    def __init__(
        self,
        purgatories: Sequence[DelayedOperationPurgatory],
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.purgatories = list(purgatories)
        self.clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed_at: int | None = None
        self.wakeups = 0  # how often it fired (tests check it does not spin)
        for purgatory in self.purgatories:
            purgatory.timer.on_schedule = self._on_schedule

    def _on_schedule(self, expiration_ms: int) -> None:
        loop = asyncio.get_running_loop()
        if self._handle is not None and self._loop is not loop:
            self._handle = None  # armed on a loop that is gone (tests run several)
            self._armed_at = None
        if self._armed_at is None or expiration_ms < self._armed_at:
            self._arm(loop, expiration_ms)

    def _arm(self, loop: asyncio.AbstractEventLoop, at_ms: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        # +1 ms: asyncio may run a handle up to its clock resolution early, and a
        # bucket polled before its expiration would only re-arm for the same time.
        delay_s = max(at_ms - self.clock() + 1, 0) / 1000
        self._loop = loop
        self._armed_at = at_ms
        self._handle = loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = None
        self.wakeups += 1
        for purgatory in self.purgatories:
            try:
                purgatory.advance_clock()
            except Exception:
                log.exception("error expiring operations of purgatory %s", purgatory.name)
        nxt = [
            t
            for t in (p.timer.next_expiration_ms() for p in self.purgatories)
            if t is not None
        ]
        if nxt and self._handle is None:
            self._arm(asyncio.get_running_loop(), min(nxt))

    def purge_if_due(self) -> None:
        """Purge watcher lists of completed operations (called from the 1 s housekeeping)."""
        for purgatory in self.purgatories:
            if purgatory.purge_due:
                purgatory.purge()

    def shutdown(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        for purgatory in self.purgatories:
            purgatory.shutdown()
