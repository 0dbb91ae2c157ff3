"""The broker's one scheduler: time and background work for the sans-IO core.

The core (purgatories, quota throttles, the memory pool's hand-out, the group-commit
flusher, log maintenance) never touches the event loop. It is given a
:class:`Scheduler` and asks it to

* ``call_soon(fn)``: run ``fn`` on the next turn of the loop,
* ``call_at(at_ms, fn)``: run ``fn`` once the monotonic clock reaches ``at_ms`` (a
  :data:`~tidegate.clock.MonotonicMs`; returns a handle with ``cancel()``),
* ``submit(fn, on_done)``: run ``fn`` off the loop (a worker thread: fsync, checkpoint
  writes), then ``on_done(result, exception)`` back on the loop,
* ``schedule(name, fn, period_ms)``: run ``fn`` every ``period_ms`` (Kafka's
  KafkaScheduler: retention, time-based flush, checkpoints, offset expiry).

:class:`AsyncioScheduler` is the shell's implementation on an asyncio loop and owns every
future the broker creates. Tests use ``tests/fake_loop.FakeLoop``, the same interface on
a :class:`~tidegate.clock.MockClock`, so broker behaviour that depends on time runs
deterministically without sleeping. Nothing in the core asks whether a loop is running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol

from tidegate.clock import Clock, MonotonicMs

log = logging.getLogger(__name__)

OnDone = Callable[[Any, BaseException | None], None]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_soon(self, fn: Callable[[], None]) -> None: ...

    def call_at(self, at_ms: MonotonicMs, fn: Callable[[], None]) -> Cancellable: ...

    def submit(self, fn: Callable[[], Any], on_done: OnDone) -> None: ...

    def schedule(self, name: str, fn: Callable[[], None], period_ms: int) -> Cancellable: ...


class _Periodic:
    """A periodic task: re-armed after each run, whatever the run did."""

    __slots__ = ("_handle", "cancelled", "fn", "name", "period_ms", "scheduler")

    def __init__(self, scheduler: AsyncioScheduler, name: str, fn: Callable[[], None], period_ms: int):
        self.scheduler = scheduler
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self.cancelled = False
        self._handle: Cancellable | None = None

    def arm(self, at_ms: MonotonicMs) -> None:
        self._handle = self.scheduler.call_at(at_ms, self.run)

    def run(self) -> None:
        if self.cancelled:
            return
        try:
            self.fn()
        except Exception:
            log.exception("scheduled task %s failed", self.name)
        if not self.cancelled:
            self.arm(MonotonicMs(self.scheduler.clock.milliseconds() + self.period_ms))

    def cancel(self) -> None:
        self.cancelled = True
        if self._handle is not None:
            self._handle.cancel()


class AsyncioScheduler:
    """:class:`Scheduler` on an asyncio event loop; worker threads from ``executor``
    (the loop's default executor when None). ``call_at`` times are on ``clock``, the
    broker's: the loop's own clock only measures the delay until then."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
        executor: Executor | None = None,
    ) -> None:
        self.loop = loop
        self.clock = clock
        self.executor = executor
        self._pending: set[asyncio.Future] = set()
        self._periodic: list[_Periodic] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon(fn)

    def call_at(self, at_ms: MonotonicMs, fn: Callable[[], None]) -> Cancellable:
        # Whole milliseconds from the clock's current millisecond: uvloop (libuv) arms
        # its timer in whole ms from its own millisecond of the same monotonic clock, so
        # the handle runs as that clock reaches ``at_ms``, never before it; asyncio's
        # loop (a float clock) runs it at most the fraction of the current ms late.
        # A handle run early anyway is harmless: the timer reaper finds nothing due and
        # arms again for the same millisecond. (An extra ms of margin here made every
        # timed wake-up, a lock expiry or a long poll's deadline, 1-2 ms late:
        # benchmarks/share_groups.py's lock-expiry precision.)
        delay_s = max(at_ms - self.clock.milliseconds(), 0) / 1000
        return self.loop.call_later(delay_s, fn)

    def submit(self, fn: Callable[[], Any], on_done: OnDone) -> None:
        self._run(self.loop.run_in_executor(self.executor, fn), on_done)

    def _run(self, fut: asyncio.Future, on_done: OnDone) -> None:
        self._pending.add(fut)

        def done(f: asyncio.Future) -> None:
            self._pending.discard(f)
            if f.cancelled():
                on_done(None, asyncio.CancelledError())
                return
            exc = f.exception()
            on_done(None if exc is not None else f.result(), exc)

        fut.add_done_callback(done)

    def schedule(self, name: str, fn: Callable[[], None], period_ms: int) -> Cancellable:
        task = _Periodic(self, name, fn, period_ms)
        self._periodic.append(task)
        task.arm(MonotonicMs(self.clock.milliseconds() + period_ms))
        return task

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for submitted work to finish (shutdown: fsyncs in flight complete)."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)

    def shutdown(self) -> None:
        """Stop every periodic task (submitted work is not interrupted)."""
        for task in self._periodic:
            task.cancel()
        self._periodic.clear()

