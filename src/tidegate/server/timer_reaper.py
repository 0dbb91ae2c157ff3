"""Drives the purgatories' timers: Kafka's SystemTimerReaper, without a thread.

Kafka's reaper thread blocks on the delay queue of buckets. Here one wake-up is
armed for the earliest non-empty bucket of all the timers; when it fires, each
purgatory advances its clock (expiring what is due) and the wake-up is re-armed
for the earliest bucket left. Timers report a bucket scheduled earlier than the
armed wake-up through ``on_schedule``, which moves it earlier. Nothing polls:
with no delayed operation pending, nothing is armed at all.

How the wake-up is armed is injected (``call_at(at_ms, fn) -> handle`` with a
``cancel()``): the event loop's ``call_later`` in the broker, a fake loop on fake
time in tests, so the arming logic is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from tidegate.clock import monotonic_ms
from tidegate.server.purgatory import DelayedOperationPurgatory

log = logging.getLogger(__name__)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


CallAt = Callable[[int, Callable[[], None]], Cancellable]


class LoopCallAt:
    """``call_at`` on the running event loop, for times of ``clock`` (integer ms)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, at_ms: int, fn: Callable[[], None]) -> Cancellable:
        # +1 ms: asyncio may run a handle up to its clock resolution early, and a
        # bucket polled before its expiration would only re-arm for the same time.
        delay_s = max(at_ms - self.clock() + 1, 0) / 1000
        self.loop = asyncio.get_running_loop()
        return self.loop.call_later(delay_s, fn)

    def stale(self) -> bool:
        """Armed on a loop that is not the running one (tests run several)."""
        try:
            return self.loop is not None and self.loop is not asyncio.get_running_loop()
        except RuntimeError:
            return False


class TimerReaper:
    def __init__(
        self,
        purgatories: Sequence[DelayedOperationPurgatory],
        clock: Callable[[], int] = monotonic_ms,
        call_at: CallAt | None = None,
    ) -> None:
        self.purgatories = list(purgatories)
        self.clock = clock
        self._call_at = call_at if call_at is not None else LoopCallAt(clock)
        self._handle: Cancellable | None = None
        self._armed_at: int | None = None
        self._firing = False
        self.wakeups = 0  # how often it fired (tests check it does not spin)
        for purgatory in self.purgatories:
            purgatory.timer.on_schedule = self._on_schedule

    def _on_schedule(self, expiration_ms: int) -> None:
        if self._firing:
            return  # _fire re-arms for the earliest bucket once every timer has advanced
        if isinstance(self._call_at, LoopCallAt) and self._call_at.stale():
            self._handle = None
            self._armed_at = None
        if self._armed_at is None or expiration_ms < self._armed_at:
            self._arm(expiration_ms)

    def _arm(self, at_ms: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = at_ms
        self._handle = self._call_at(at_ms, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = None
        self.wakeups += 1
        # While the timers advance, an expiring operation may schedule another one (a
        # completed join arms heartbeat deadlines seconds out): that must not arm the
        # wake-up for its later time while earlier buckets of other timers wait. So
        # nothing is armed during the advance; the earliest bucket of all is armed after.
        self._firing = True
        try:
            for purgatory in self.purgatories:
                try:
                    purgatory.advance_clock()
                except Exception:
                    log.exception("error expiring operations of purgatory %s", purgatory.name)
        finally:
            self._firing = False
        nxt = [t for t in (p.timer.next_expiration_ms() for p in self.purgatories) if t is not None]
        if nxt:
            self._arm(min(nxt))

    def purge_if_due(self) -> None:
        """Purge watcher lists of completed operations (called from the 1 s housekeeping)."""
        for purgatory in self.purgatories:
            if purgatory.purge_due:
                purgatory.purge()

    def shutdown(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._armed_at = None
        for purgatory in self.purgatories:
            purgatory.shutdown()
