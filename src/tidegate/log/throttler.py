"""Kafka's ``Throttler``: the log cleaner's I/O rate limit (log.cleaner.io.max.bytes.per.second)."""

from __future__ import annotations

from collections.abc import Callable

from tidegate.clock import Clock

__all__ = ["UNBOUNDED_RATE", "Throttler"]

#: log.cleaner.io.max.bytes.per.second's default (Double.MaxValue): no throttle
UNBOUNDED_RATE = 1.7976931348623157e308


class Throttler:
    """Kafka's ``Throttler``: holds a byte rate to ``rate`` per second by sleeping. Every
    ``check_interval_ms`` it compares the bytes seen since the last check with the
    time taken and sleeps off the excess, on the :class:`~tidegate.clock.Clock` it is
    given (Kafka's ``Throttler`` takes a ``Time``; tests give a
    :class:`~tidegate.clock.MockClock`); ``sleep`` defaults to the clock's."""

    def __init__(
        self,
        rate: float,
        *,
        check_interval_ms: int = 300,
        clock: Clock,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.rate = rate
        self.check_interval_s = check_interval_ms / 1000.0
        self._clock = lambda: clock.nanoseconds() / 1e9
        self._sleep = sleep or clock.sleep
        self._period_start = self._clock()
        self._observed = 0
        #: seconds slept in total (the cleaner's throttle metric)
        self.slept_s = 0.0

    @property
    def unbounded(self) -> bool:
        return self.rate >= UNBOUNDED_RATE or self.rate <= 0

    def __call__(self, observed: int) -> None:
        if self.unbounded:
            return
        self._observed += observed
        elapsed = self._clock() - self._period_start
        if elapsed <= self.check_interval_s or self._observed <= 0:
            return
        if self._observed / elapsed > self.rate:
            pause = self._observed / self.rate - elapsed
            if pause > 0:
                self._sleep(pause)
                self.slept_s += pause
        self._period_start = self._clock()
        self._observed = 0
