"""Drives every timer of the broker: Kafka's SystemTimerReaper, without a thread.

Kafka's reaper threads block on the delay queues of buckets. Here one wake-up is
armed for the earliest non-empty bucket of all the timers (the purgatories' timing
wheels and the quota managers' throttle timers); when it fires, each timer advances
(expiring what is due) and the wake-up is re-armed for the earliest bucket left.
Timers report a bucket scheduled earlier than the armed wake-up through
``on_schedule``, which moves it earlier. Nothing polls: with no timer task pending,
nothing is armed at all.

How the wake-up is armed is injected: ``call_at(at_ms, fn) -> handle`` with a
``cancel()``, the broker's :class:`~tidegate.scheduler.Scheduler` (the event loop in
the broker, ``tests/fake_loop.FakeLoop`` on fake time in tests), so the arming logic
is tested without sleeping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidegate.clock import MonotonicMs
from tidegate.scheduler import Cancellable
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.timer import SystemTimer

log = logging.getLogger(__name__)

CallAt = Callable[[MonotonicMs, Callable[[], None]], Cancellable]


class TimerReaper:
    def __init__(self, call_at: CallAt) -> None:
        self._call_at = call_at
        #: (name, timer, advance): advance expires what is due (a purgatory also purges)
        self._timers: list[tuple[str, SystemTimer, Callable[[], object]]] = []
        self.purgatories: list[DelayedOperationPurgatory] = []
        self._handle: Cancellable | None = None
        self._armed_at: MonotonicMs | None = None
        self._firing = False
        self.wakeups = 0  # how often it fired (tests check it does not spin)

    def add_purgatory(
        self, purgatory: DelayedOperationPurgatory, advance: Callable[[], object] | None = None
    ) -> None:
        """Expire ``purgatory``'s operations when due, by ``advance`` (its
        ``advance_clock`` unless given: one that wraps it)."""
        self.purgatories.append(purgatory)
        self.add_timer(purgatory.name, purgatory.timer, advance if advance is not None else purgatory.advance_clock)

    def add_timer(self, name: str, timer: SystemTimer, advance: Callable[[], object] | None = None) -> None:
        self._timers.append((name, timer, advance if advance is not None else timer.advance_clock))
        timer.on_schedule = self._on_schedule
        nxt = timer.next_expiration_ms()
        if nxt is not None:
            self._on_schedule(nxt)

    def _on_schedule(self, expiration_ms: MonotonicMs) -> None:
        if self._firing:
            return  # _fire re-arms for the earliest bucket once every timer has advanced
        if self._armed_at is None or expiration_ms < self._armed_at:
            self._arm(expiration_ms)

    def _arm(self, at_ms: MonotonicMs) -> None:
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
            for name, _timer, advance in self._timers:
                try:
                    advance()
                except Exception:
                    log.exception("error expiring the operations of timer %s", name)
        finally:
            self._firing = False
        nxt = [t for t in (timer.next_expiration_ms() for _, timer, _ in self._timers) if t is not None]
        if nxt:
            self._arm(min(nxt))

    @property
    def armed_at(self) -> MonotonicMs | None:
        return self._armed_at

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
        for _name, timer, _advance in self._timers:
            timer.shutdown()
