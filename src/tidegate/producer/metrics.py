"""Producer metrics with Kafka's names and semantics (a tiny ``Metrics``/``Meter``).

Kafka's ``Meter`` pairs a windowed rate with a cumulative total. Both are the shared
stats of :mod:`tidegate.metrics.stats`: the rate is a ``Rate`` over
``metrics.num.samples`` windows of ``metrics.sample.window.ms`` (2 x 30 s by default)
whose elapsed time is padded to at least ``(samples - 1)`` full windows, so a fresh
rate is not inflated; the total is a ``CumulativeSum``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tidegate.clock import Clock
from tidegate.metrics import stats
from tidegate.metrics.stats import (
    METRICS_NUM_SAMPLES_DEFAULT,
    METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    MetricConfig,
    TimeUnit,
)


class Meter:
    """Kafka's ``Meter`` on a clock, for producer threads: a rate per ``unit`` plus a total.

    ``unit`` is Kafka's: per second by default; ``TimeUnit.NANOSECONDS`` turns recorded
    nanoseconds into the fraction of time they cover (``bufferpool-wait-ratio``).
    Application threads and the sender record concurrently, so recording and reading
    hold a lock, as Kafka's synchronized ``Sensor.record`` and metric reads do. The
    time is the clock's monotonic milliseconds, read before taking the lock.
    """

    __slots__ = ("_clock", "_config", "_lock", "_meter")

    def __init__(
        self,
        clock: Clock,
        *,
        window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT,
        samples: int = METRICS_NUM_SAMPLES_DEFAULT,
        unit: TimeUnit = TimeUnit.SECONDS,
    ) -> None:
        self._clock = clock
        self._config = MetricConfig(samples=samples, time_window_ms=window_ms)
        self._meter = stats.Meter(unit)
        self._lock = threading.Lock()

    def record(self, value: float = 1.0) -> None:
        now = self._clock.milliseconds()
        with self._lock:
            self._meter.record(self._config, value, now)

    @property
    def total(self) -> float:
        with self._lock:
            return self._meter.total.total

    def rate(self) -> float:
        now = self._clock.milliseconds()
        with self._lock:
            return self._meter.rate.measure(self._config, now)


class Metrics:
    """Named metric readers: ``{name: callable() -> number}`` in group ``producer-metrics``."""

    GROUP = "producer-metrics"

    def __init__(
        self,
        clock: Clock,
        *,
        window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT,
        samples: int = METRICS_NUM_SAMPLES_DEFAULT,
    ) -> None:
        self.clock = clock
        #: Kafka's MetricConfig: metrics.sample.window.ms and metrics.num.samples
        self.window_ms = window_ms
        self.samples = samples
        self._readers: dict[str, Callable[[], float]] = {}

    def add(self, name: str, reader: Callable[[], float]) -> None:
        self._readers[name] = reader

    def meter(
        self,
        rate_name: str,
        total_name: str,
        *,
        unit: TimeUnit = TimeUnit.SECONDS,
    ) -> Meter:
        """A :class:`Meter` read as ``rate_name`` (its rate) and ``total_name`` (its total),
        over this registry's sample windows."""
        m = Meter(self.clock, window_ms=self.window_ms, samples=self.samples, unit=unit)
        self.add(rate_name, m.rate)
        self.add(total_name, lambda: m.total)
        return m

    def snapshot(self) -> dict[str, float]:
        return {name: reader() for name, reader in self._readers.items()}

    def get(self, name: str) -> float:
        return self._readers[name]()
