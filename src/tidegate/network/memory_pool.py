"""Memory for incoming requests (KIP-72).

The network layer takes every request body's buffer from a pool *before* the
body is read (``NetworkReceive.try_allocate``) and gives it back with
:meth:`MemoryPool.release` once the request no longer needs it. Two pools plug
into that seam:

* :data:`NONE` -- Kafka's ``MemoryPool.NONE``: unbounded, used when
  ``queued.max.request.bytes`` <= 0.
* :class:`SimpleMemoryPool` -- Kafka's ``SimpleMemoryPool``: a byte bound on
  the memory held by requests, with the depletion ("dry spell") metrics.

:func:`create_pool` is the broker's wiring rule and
:func:`validate_queued_max_request_bytes` its configuration check.

Everything here is sans-IO and single-threaded: pools are called from the event
loop only (tidegate runs one loop where Kafka runs processor threads, so there
are no atomics or locks). A pool reads the monotonic milliseconds of the
:class:`~tidegate.clock.Clock` it is built with (the broker's; a
:class:`~tidegate.clock.MockClock` in tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sized
from typing import Protocol

from tidegate.clock import Clock, MonotonicMs
from tidegate.config.broker import validate_queued_max_request_bytes
from tidegate.metrics.stats import (
    METRICS_NUM_SAMPLES_DEFAULT,
    METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    Meter,
    MetricConfig,
    TimeUnit,
)

log = logging.getLogger(__name__)

ReleaseListener = Callable[[], None]
"""Called with no arguments after a release gave memory back to a pool."""


class BufferAllocator(Protocol):
    """What reading a request needs: a buffer of ``size`` bytes or None, and its release
    (a MemoryPool, or the broker's RequestMemory that also bounds the request count)."""

    def try_allocate(self, size: int) -> bytearray | None: ...

    def release(self, buffer: bytearray) -> None: ...


class MemoryPool(Protocol):
    """A non-blocking pool; every buffer from :meth:`try_allocate` must be released once."""

    def try_allocate(self, size: int) -> bytearray | None:
        """A zero-filled buffer of exactly ``size`` bytes, or None if there is no memory."""
        ...

    def release(self, buffer: bytearray) -> None:
        """Give back a buffer returned by :meth:`try_allocate` of this pool."""
        ...

    @property
    def size(self) -> int: ...

    @property
    def available(self) -> int:
        """Bytes that may still be allocated; negative when a pool over-allocated."""
        ...

    @property
    def used(self) -> int:
        """``size - available`` (MemoryPoolUsed)."""
        ...

    @property
    def is_out_of_memory(self) -> bool:
        """``available <= 0``: no allocation can succeed until something is released."""
        ...

    def add_release_listener(self, listener: ReleaseListener) -> None:
        """Call ``listener()`` after every release that gave memory back."""
        ...

    def remove_release_listener(self, listener: ReleaseListener) -> None: ...

    @property
    def depleted_time_total_ms(self) -> float:
        """MemoryPoolDepletedTimeTotal: milliseconds spent in finished dry spells."""
        ...

    def avg_depleted_percent(self) -> float:
        """MemoryPoolAvgDepletedPercent: fraction (0..1) of recent time spent depleted."""
        ...


class _NonePool:
    """Kafka's ``MemoryPool.NONE``: always a fresh buffer, never out of memory.

    ``release`` accepts anything but None (it is a no-op). Memory is never
    refused, so nothing ever waits for a release: release listeners are
    accepted and ignored (this pool is a process-wide singleton and must not
    keep references to connections or servers).
    """

    size = 2**63 - 1
    available = 2**63 - 1
    used = 0
    is_out_of_memory = False
    depleted_time_total_ms = 0.0

    def try_allocate(self, size: int) -> bytearray:
        if size < 1:
            raise ValueError(f"requested size {size} <= 0")
        return bytearray(size)

    def release(self, buffer: bytearray) -> None:
        if buffer is None:
            raise ValueError("release(None)")

    def add_release_listener(self, listener: ReleaseListener) -> None:
        pass

    def remove_release_listener(self, listener: ReleaseListener) -> None:
        pass

    def avg_depleted_percent(self) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "MemoryPool.NONE"


NONE: MemoryPool = _NonePool()


class SimpleMemoryPool:
    """Kafka's ``SimpleMemoryPool``: a bound on the bytes held by outstanding buffers.

    * ``size`` bytes, any single allocation 1..``max_single_allocation`` bytes;
      ``max_single_allocation`` must not exceed ``size``.
    * ``strict``: an allocation succeeds only if it fits (``available >= n``).
      Non-strict (what the broker uses): it succeeds while at least one byte is
      free, so ``available`` can fall to ``-(max_single_allocation - 1)`` and at
      most ``size + max_single_allocation - 1`` bytes are ever outstanding. A
      strict pool would starve large requests behind a stream of small ones.
    * Dry spells: the first refused allocation starts one; the next successful
      allocation or release ends it and records its length (ms) into a
      :class:`~tidegate.metrics.stats.Meter` over milliseconds, as Kafka's
      ``Meter(TimeUnit.MILLISECONDS, ...)`` sensor does: its cumulative total is
      :attr:`depleted_time_total_ms` (MemoryPoolDepletedTimeTotal) and its Rate,
      depleted ms per ms over ``metric_samples`` windows of ``metric_window_ms``
      (Kafka's ``metrics.num.samples`` and ``metrics.sample.window.ms``), is
      :meth:`avg_depleted_percent` (MemoryPoolAvgDepletedPercent). As in Kafka,
      a spell is counted only once it ends (:attr:`dry_spell_started_ms` shows
      one in progress). The clock is read only on a refusal and at the end of a
      spell, never on the ordinary allocate/release path.

    Differences from Kafka, on purpose:

    * **Ownership is checked.** Kafka's ``SimpleMemoryPool`` adds back the
      capacity of whatever buffer it is handed, so a double release or a foreign
      buffer silently inflates ``available`` and the bound is lost. tidegate
      keeps every outstanding buffer in a dict keyed by ``id()`` (the dict holds
      a reference, so an id cannot be reused while its buffer is outstanding)
      and gives back the size that was *allocated*, not the buffer's current
      length. Releasing a buffer this pool did not hand out, or releasing it a
      second time, raises ``ValueError`` with ``debug=True`` (Kafka's
      ``GarbageCollectedMemoryPool`` checks the same; use it in tests) and
      otherwise logs an error and changes nothing. Unlike that Kafka debug
      pool, leaked buffers are not reclaimed (``bytearray`` has no weak
      references); :attr:`outstanding` counts them for leak checks.
    * **Release listeners** (:meth:`add_release_listener`) stand in for the
      Kafka selector's poll-time check: the network layer unmutes its
      memory-muted connections from them.
    * :meth:`avg_depleted_percent` is clamped to 1.0: Kafka records a whole
      spell at its end, so a spell longer than the measured window would read
      above 100 %.
    * A spell is measured in whole milliseconds of the clock (integer
      monotonic ms, the project's convention); Kafka records fractional ms
      from ``System.nanoTime``.
    """

    __slots__ = (
        "_available",
        "_clock",
        "_debug",
        "_depleted",
        "_depleted_config",
        "_dry_spell_start",
        "_listeners",
        "_max_single",
        "_outstanding",
        "_size",
        "_strict",
    )

    def __init__(
        self,
        size: int,
        max_single_allocation: int,
        strict: bool,
        clock: Clock,
        *,
        debug: bool = False,
        metric_samples: int = METRICS_NUM_SAMPLES_DEFAULT,
        metric_window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    ) -> None:
        if size <= 0 or max_single_allocation <= 0 or max_single_allocation > size:
            raise ValueError(
                "a memory pool needs a positive size and a positive max single allocation "
                f"no larger than the size; got size {size} and max single allocation "
                f"{max_single_allocation}"
            )
        self._size = size
        self._max_single = max_single_allocation
        self._strict = strict
        self._debug = debug
        self._clock = clock
        self._available = size
        # id(buffer) -> (buffer, allocated size); the reference pins the id.
        self._outstanding: dict[int, tuple[bytearray, int]] = {}
        self._listeners: tuple[ReleaseListener, ...] = ()
        self._dry_spell_start: MonotonicMs | None = None
        self._depleted_config = MetricConfig(metric_samples, metric_window_ms)
        self._depleted = Meter(TimeUnit.MILLISECONDS)

    # -- allocation (hot path) -------------------------------------------
    def try_allocate(self, size: int) -> bytearray | None:
        if size < 1:
            raise ValueError(f"requested size {size} <= 0")
        if size > self._max_single:
            raise ValueError(
                f"requested size {size} is larger than the max single allocation {self._max_single}"
            )
        if self._available < (size if self._strict else 1):
            if self._dry_spell_start is None:
                self._dry_spell_start = self._clock.milliseconds()
            return None
        buffer = bytearray(size)  # before any accounting: a failure here changes nothing
        self._available -= size
        self._outstanding[id(buffer)] = (buffer, size)
        if self._dry_spell_start is not None:
            self._end_dry_spell()
        return buffer

    def release(self, buffer: bytearray) -> None:
        if buffer is None:
            raise ValueError("release(None)")
        entry = self._outstanding.get(id(buffer))
        if entry is None or entry[0] is not buffer:
            self._reject(buffer)
            return
        del self._outstanding[id(buffer)]
        self._available += entry[1]
        if self._dry_spell_start is not None:
            self._end_dry_spell()
        for listener in self._listeners:
            self._notify(listener)

    def _reject(self, buffer: object) -> None:
        size = len(buffer) if isinstance(buffer, bytearray | bytes | memoryview) else "?"
        message = (
            f"release of a buffer ({type(buffer).__name__}, {size} bytes) that {self!r} "
            "did not allocate or that was already released; accounting left unchanged"
        )
        if self._debug:
            raise ValueError(message)
        log.error(message)

    def _notify(self, listener: ReleaseListener) -> None:
        try:
            listener()
        except Exception:
            if self._debug:
                raise
            log.exception("memory pool release listener %r failed", listener)

    def _end_dry_spell(self) -> None:
        now = self._clock.milliseconds()
        start = self._dry_spell_start
        self._dry_spell_start = None
        assert start is not None
        self._depleted.record(self._depleted_config, max(0, now - start), now)

    # -- listeners -------------------------------------------------------
    def add_release_listener(self, listener: ReleaseListener) -> None:
        """Call ``listener()`` after every release that gave memory back.

        Listeners run after the accounting (and any dry spell) is updated, so
        they may allocate or release themselves. They should be quick: they run
        on every release. An exception is logged and the other listeners still
        run (with ``debug=True`` it propagates).
        """
        self._listeners = (*self._listeners, listener)

    def remove_release_listener(self, listener: ReleaseListener) -> None:
        """Forget ``listener`` (its first registration); no error if it is not registered."""
        listeners = list(self._listeners)
        if listener in listeners:
            listeners.remove(listener)
            self._listeners = tuple(listeners)

    # -- state and metrics -----------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    @property
    def max_single_allocation(self) -> int:
        return self._max_single

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def debug(self) -> bool:
        return self._debug

    @property
    def available(self) -> int:
        """MemoryPoolAvailable; as low as ``-(max_single_allocation - 1)`` when non-strict."""
        return self._available

    @property
    def used(self) -> int:
        """MemoryPoolUsed: ``size - available``."""
        return self._size - self._available

    @property
    def is_out_of_memory(self) -> bool:
        return self._available <= 0

    @property
    def outstanding(self) -> int:
        """How many allocated buffers have not been released yet."""
        return len(self._outstanding)

    @property
    def dry_spell_started_ms(self) -> int | None:
        """Clock time of the refusal that started the current dry spell, or None."""
        return self._dry_spell_start

    @property
    def depleted_time_total_ms(self) -> float:
        """MemoryPoolDepletedTimeTotal: the summed length of finished dry spells, in ms."""
        return self._depleted.total.total

    def avg_depleted_percent(self) -> float:
        """MemoryPoolAvgDepletedPercent: depleted ms / window ms, a fraction in 0..1.

        The Rate (per millisecond) of the finished dry spells' milliseconds, as Kafka's
        ``Meter(TimeUnit.MILLISECONDS)`` measures it, now on the pool's clock.
        """
        now = self._clock.milliseconds()
        return min(1.0, self._depleted.rate.measure(self._depleted_config, now))

    def __repr__(self) -> str:
        kind = "strict" if self._strict else "non-strict"
        return f"SimpleMemoryPool({self.used}/{self._size} bytes used, {kind})"


def create_pool(
    queued_max_request_bytes: int,
    socket_request_max_bytes: int,
    clock: Clock,
    *,
    debug: bool = False,
) -> MemoryPool:
    """The broker's pool: NONE if ``queued.max.request.bytes`` <= 0, else a non-strict pool.

    One pool is shared by all connections: size ``queued.max.request.bytes``,
    max single allocation ``socket.request.max.bytes``.
    """
    if queued_max_request_bytes <= 0:
        return NONE
    validate_queued_max_request_bytes(queued_max_request_bytes, socket_request_max_bytes)
    return SimpleMemoryPool(
        queued_max_request_bytes, socket_request_max_bytes, False, clock, debug=debug
    )


class RequestMemory:
    """Both KIP-72 bounds at once: request bytes (the pool) and request count.

    ``queued.max.request.bytes`` is the pool's size; ``queued.max.requests``
    bounds how many request bodies are held at once (Kafka bounds its request
    queue with it; tidegate has no queue, so it bounds the bodies being read or
    processed). Whichever is hit first refuses the allocation. Every release
    calls ``on_release`` so that connections muted for memory can be unmuted.

    While connections wait for memory (``waiting``, the server's memory-muted
    connections) a new request queues behind them: only the server's hand-out
    (``granting``) allocates then. Otherwise a connection reading its next size
    between a release and the hand-out would take the freed memory ahead of
    connections that have waited for it, and the same busy connections would be
    served again and again. Used by one event loop only.
    """

    __slots__ = ("granting", "max_requests", "on_release", "outstanding", "pool", "waiting")

    def __init__(self, pool: MemoryPool, max_requests: int) -> None:
        self.pool = pool
        self.max_requests = max_requests
        self.outstanding = 0
        self.on_release: Callable[[], None] = lambda: None
        self.waiting: Sized = ()
        self.granting = False

    def try_allocate(self, size: int) -> bytearray | None:
        if self.outstanding >= self.max_requests:
            return None
        if self.waiting and not self.granting:
            return None
        buf = self.pool.try_allocate(size)
        if buf is not None:
            self.outstanding += 1
        return buf

    def release(self, buffer: bytearray) -> None:
        self.pool.release(buffer)
        self.outstanding -= 1
        self.on_release()

    @property
    def is_out_of_memory(self) -> bool:
        return self.outstanding >= self.max_requests or self.pool.is_out_of_memory
