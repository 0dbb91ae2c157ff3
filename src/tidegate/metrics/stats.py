"""Kafka's metric core and stats: the one copy of its SampledStat/Rate arithmetic.

A rendering, with Kafka's names, of ``clients/.../common/metrics`` (``MetricConfig``,
``Quota``, ``QuotaViolationException``, ``KafkaMetric``, ``Sensor``) and
``metrics/stats`` (``SampledStat`` and its ``Sample``, ``WindowedSum``, ``Avg``,
``Max``, ``CumulativeSum``, ``Rate`` with its ``TimeUnit``, ``Meter``).  Three users
share it:

* the client quotas (:mod:`tidegate.server.quota.client_quota_manager`): per-second Rates checked
  against a :class:`Quota` by a :class:`Sensor`;
* the request memory pool (:mod:`tidegate.network.memory_pool`): KIP-72's
  ``MemoryPoolAvgDepletedPercent``/``MemoryPoolDepletedTimeTotal`` are a
  ``Meter(TimeUnit.MILLISECONDS)``, a Rate of depleted ms per ms plus their total;
* the producer (:mod:`tidegate.producer.metrics`): ``Meter`` s over
  ``metrics.num.samples`` windows of ``metrics.sample.window.ms``.

Plain objects, sans-IO: every ``record``/``measure`` takes ``now_ms``, the
:data:`~tidegate.clock.MonotonicMs` of its caller's clock (rates are monotonic), and
nothing takes a lock.  Kafka synchronises a sensor's record and a metric's read; a
caller that records from several threads (the producer) holds its own lock, the
broker's event loop needs none.  Like Kafka's, ``Avg`` and ``Max`` measure NaN when
nothing was recorded in the retained windows; ``Rate`` never does.
"""

from __future__ import annotations

import enum
import math
import sys
from dataclasses import dataclass
from typing import Final

from tidegate.clock import MonotonicMs

__all__ = [
    "METRICS_NUM_SAMPLES_DEFAULT",
    "METRICS_SAMPLE_WINDOW_MS_DEFAULT",
    "Avg",
    "CumulativeSum",
    "Max",
    "Meter",
    "Metric",
    "MetricConfig",
    "Quota",
    "QuotaViolationError",
    "Rate",
    "Sample",
    "SampledStat",
    "Sensor",
    "Stat",
    "TimeUnit",
    "WindowedSum",
]

#: ``metrics.num.samples`` / ``metrics.sample.window.ms``: Kafka's default metric
#: config (the broker's throttle-time and exempt-request-time sensors, the memory pool
#: and the producer's meters use it).
METRICS_NUM_SAMPLES_DEFAULT: Final = 2
METRICS_SAMPLE_WINDOW_MS_DEFAULT: Final = 30_000


class TimeUnit(enum.Enum):
    """The unit a :class:`Rate` is per (Java's ``TimeUnit``, as Kafka's ``Rate`` takes it).

    Each member is ``(multiplier, divisor)`` turning milliseconds into the unit, so
    :meth:`from_ms` computes what Kafka's ``Rate.convert`` does (``ms * 1000.0 * 1000.0``
    for nanoseconds, ``ms / 1000.0`` for seconds, ...).
    """

    NANOSECONDS = (1_000_000.0, 1.0)
    MICROSECONDS = (1_000.0, 1.0)
    MILLISECONDS = (1.0, 1.0)
    SECONDS = (1.0, 1_000.0)
    MINUTES = (1.0, 60.0 * 1_000.0)
    HOURS = (1.0, 60.0 * 60.0 * 1_000.0)
    DAYS = (1.0, 24.0 * 60.0 * 60.0 * 1_000.0)

    def __init__(self, multiplier: float, divisor: float) -> None:
        self.multiplier = multiplier
        self.divisor = divisor

    def from_ms(self, time_ms: float) -> float:
        """``time_ms`` milliseconds expressed in this unit."""
        return time_ms * self.multiplier / self.divisor


class Quota:
    """An upper (or lower) bound on a measured value; ``upper=True`` for client quotas."""

    __slots__ = ("bound", "upper")

    def __init__(self, bound: float, upper: bool = True) -> None:
        self.bound = float(bound)
        self.upper = upper

    @classmethod
    def upper_bound(cls, bound: float) -> Quota:
        return cls(bound, True)

    @classmethod
    def lower_bound(cls, bound: float) -> Quota:
        return cls(bound, False)

    def acceptable(self, value: float) -> bool:
        """An upper bound is violated only when the value is strictly above it."""
        return value <= self.bound if self.upper else value >= self.bound

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quota) and (self.bound, self.upper) == (other.bound, other.upper)

    def __hash__(self) -> int:
        return hash((self.bound, self.upper))

    def __repr__(self) -> str:
        return f"Quota({'upper' if self.upper else 'lower'}={self.bound})"


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """The part of Kafka's ``MetricConfig`` the stats read."""

    samples: int = METRICS_NUM_SAMPLES_DEFAULT
    time_window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT
    quota: Quota | None = None
    event_window: int = sys.maxsize

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("The number of samples must be at least 1.")
        if self.time_window_ms < 1:
            raise ValueError("The sample window must be at least 1 ms.")


class Sample:
    """One window of a :class:`SampledStat`."""

    __slots__ = ("event_count", "initial_value", "last_event_ms", "start_time_ms", "value")

    def __init__(self, initial_value: float, now_ms: MonotonicMs) -> None:
        self.initial_value = initial_value
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = initial_value

    def reset(self, now_ms: MonotonicMs) -> None:
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = self.initial_value

    def is_complete(self, now_ms: MonotonicMs, config: MetricConfig) -> bool:
        return (
            now_ms - self.start_time_ms >= config.time_window_ms
            or self.event_count >= config.event_window
        )

    def __repr__(self) -> str:
        return (
            f"Sample(value={self.value}, events={self.event_count}, "
            f"start={self.start_time_ms}, last={self.last_event_ms})"
        )


class SampledStat:
    """A value measured over a ring of ``config.samples + 1`` time windows.

    A sample starts when a value is recorded into it (windows are not aligned to the
    clock).  Recording into a complete sample moves to the next slot of the ring,
    recycling the oldest; the extra slot keeps a sample that started before the
    monitored span but overlaps it.  Measuring first resets every sample whose last
    event is ``samples * window`` or more in the past; reset samples stay in the ring
    with their start moved to the time of the reset.
    """

    __slots__ = ("_current", "samples")
    initial_value: float = 0.0

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self._current = 0

    def record(self, config: MetricConfig, value: float, now_ms: MonotonicMs) -> None:
        sample = self.current(now_ms)
        if sample.is_complete(now_ms, config):
            sample = self._advance(config, now_ms)
        self._update(sample, value)
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def _advance(self, config: MetricConfig, now_ms: MonotonicMs) -> Sample:
        self._current = (self._current + 1) % (config.samples + 1)
        if self._current >= len(self.samples):
            sample = Sample(self.initial_value, now_ms)
            self.samples.append(sample)
            return sample
        sample = self.samples[self._current]
        sample.reset(now_ms)
        return sample

    def measure(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        self.purge_obsolete_samples(config, now_ms)
        return self.combine(config, now_ms)

    def current(self, now_ms: MonotonicMs) -> Sample:
        if not self.samples:
            self.samples.append(Sample(self.initial_value, now_ms))
        return self.samples[self._current]

    def oldest(self, now_ms: MonotonicMs) -> Sample:
        """The sample with the earliest start (the first such in ring order)."""
        if not self.samples:
            self.samples.append(Sample(self.initial_value, now_ms))
        return min(self.samples, key=_start_time)

    def purge_obsolete_samples(self, config: MetricConfig, now_ms: MonotonicMs) -> None:
        expire_age = config.samples * config.time_window_ms
        for sample in self.samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)

    def _update(self, sample: Sample, value: float) -> None:
        raise NotImplementedError

    def combine(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        raise NotImplementedError


def _start_time(sample: Sample) -> MonotonicMs:
    return sample.start_time_ms


class WindowedSum(SampledStat):
    """The sum of the values recorded in the retained windows."""

    __slots__ = ()

    def _update(self, sample: Sample, value: float) -> None:
        sample.value += value

    def combine(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        return sum(s.value for s in self.samples)


class Avg(SampledStat):
    """The average of the values recorded in the retained windows; NaN if none."""

    __slots__ = ()

    def _update(self, sample: Sample, value: float) -> None:
        sample.value += value

    def combine(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        count = sum(s.event_count for s in self.samples)
        return sum(s.value for s in self.samples) / count if count else math.nan


class Max(SampledStat):
    """The largest value recorded in the retained windows; NaN if none."""

    __slots__ = ()
    initial_value = -math.inf

    def _update(self, sample: Sample, value: float) -> None:
        sample.value = max(sample.value, value)

    def combine(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        if not any(s.event_count for s in self.samples):
            return math.nan
        return max(s.value for s in self.samples)


class CumulativeSum:
    """A running total, never windowed (Kafka's ``queue-size`` is one)."""

    __slots__ = ("total",)

    def __init__(self, value: float = 0.0) -> None:
        self.total = value

    def record(self, config: MetricConfig, value: float, now_ms: MonotonicMs) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        return self.total


class Rate:
    """Rate of a :class:`SampledStat` (a :class:`WindowedSum` by default) per ``unit``.

    ``measure = windowed sum / window_size`` where the window is the time since the
    start of the oldest retained sample, padded up to ``samples - 1`` full windows while
    fewer have elapsed (so a fresh quota does not read one burst as a huge rate), and
    at least 1 ms (never a division by zero, never NaN).  The window is then expressed
    in ``unit`` (Kafka's ``Rate(TimeUnit)``): per second by default, as the quotas use
    it; ``TimeUnit.MILLISECONDS`` makes recorded milliseconds a fraction of time (the
    memory pool's depleted time), ``TimeUnit.NANOSECONDS`` does the same for
    nanoseconds (the producer's buffer-pool wait ratio).
    """

    __slots__ = ("stat", "unit")

    def __init__(
        self, stat: SampledStat | None = None, *, unit: TimeUnit = TimeUnit.SECONDS
    ) -> None:
        self.stat = stat if stat is not None else WindowedSum()
        self.unit = unit

    def record(self, config: MetricConfig, value: float, now_ms: MonotonicMs) -> None:
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: MonotonicMs) -> float:
        value = self.stat.measure(config, now_ms)
        return value / self.convert(self.window_size(config, now_ms))

    def convert(self, time_ms: int) -> float:
        """A span of ``time_ms`` in this rate's unit (Kafka's ``Rate.convert``)."""
        return self.unit.from_ms(time_ms)

    def window_size(self, config: MetricConfig, now_ms: MonotonicMs) -> int:
        """The span, in ms, the rate divides by (``Rate.windowSize``)."""
        self.stat.purge_obsolete_samples(config, now_ms)
        elapsed = now_ms - self.stat.oldest(now_ms).start_time_ms
        window = config.time_window_ms
        # Java's long division truncates towards zero
        full_windows = elapsed // window if elapsed >= 0 else -(-elapsed // window)
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * window
        return max(elapsed, 1)


class Meter:
    """Kafka's ``Meter``: a :class:`Rate` and a :class:`CumulativeSum` of the same values.

    Every recorded value goes into both: :attr:`rate` is the windowed rate per ``unit``
    and :attr:`total` the running total, which never decays.  Kafka's ``Meter`` is a
    ``CompoundStat`` registered as two metrics (``...-rate`` and ``...-total``); here
    the owner measures the two parts itself.
    """

    __slots__ = ("rate", "total")

    def __init__(self, unit: TimeUnit = TimeUnit.SECONDS) -> None:
        self.rate = Rate(unit=unit)
        self.total = CumulativeSum()

    @property
    def unit(self) -> TimeUnit:
        return self.rate.unit

    def record(self, config: MetricConfig, value: float, now_ms: MonotonicMs) -> None:
        self.rate.record(config, value, now_ms)
        self.total.record(config, value, now_ms)

    def __repr__(self) -> str:
        return f"Meter(unit={self.unit.name}, total={self.total.total})"


#: What a :class:`Metric` measures (a :class:`Meter` is measured through its parts).
Stat = SampledStat | Rate | CumulativeSum


class Metric:
    """A named stat with its (replaceable) config: Kafka's ``KafkaMetric``."""

    __slots__ = ("config", "name", "stat")

    def __init__(self, name: str, stat: Stat, config: MetricConfig) -> None:
        self.name = name
        self.stat = stat
        self.config = config

    def value(self, now_ms: MonotonicMs) -> float:
        return self.stat.measure(self.config, now_ms)

    def __repr__(self) -> str:
        return f"Metric({self.name!r}, {type(self.stat).__name__}, {self.config})"


class QuotaViolationError(Exception):
    """Raised by :meth:`Sensor.record` after recording, when a quota no longer holds."""

    def __init__(self, metric: Metric, value: float, bound: float) -> None:
        super().__init__(f"{metric.name} is {value}, which violates the bound {bound}")
        self.metric = metric
        self.value = value
        self.bound = bound


class Sensor:
    """Records a value into all its metrics, then checks the ones that carry a quota."""

    __slots__ = ("config", "inactive_expiration_ms", "last_record_ms", "metrics", "name")

    def __init__(
        self,
        name: str,
        now_ms: MonotonicMs,
        config: MetricConfig | None = None,
        inactive_expiration_ms: int | None = None,
    ) -> None:
        self.name = name
        self.config = config if config is not None else MetricConfig()
        self.inactive_expiration_ms = inactive_expiration_ms
        self.last_record_ms = now_ms
        self.metrics: dict[str, Metric] = {}

    def add(self, name: str, stat: Stat, config: MetricConfig | None = None) -> Metric:
        metric = self.metrics.get(name)
        if metric is None:
            metric = Metric(name, stat, config if config is not None else self.config)
            self.metrics[name] = metric
        return metric

    def record(self, value: float, now_ms: MonotonicMs, check_quotas: bool = True) -> None:
        """Record into every stat; then raise :class:`QuotaViolationError` on a violation.

        The value stays recorded when the check fails (record first, then check).
        """
        self.last_record_ms = now_ms
        for metric in self.metrics.values():
            metric.stat.record(metric.config, value, now_ms)
        if check_quotas:
            self.check_quotas(now_ms)

    def check_quotas(self, now_ms: MonotonicMs) -> None:
        for metric in self.metrics.values():
            quota = metric.config.quota
            if quota is not None:
                value = metric.value(now_ms)
                if not quota.acceptable(value):
                    raise QuotaViolationError(metric, value, quota.bound)

    def has_expired(self, now_ms: MonotonicMs) -> bool:
        return (
            self.inactive_expiration_ms is not None
            and now_ms - self.last_record_ms > self.inactive_expiration_ms
        )

    def __repr__(self) -> str:
        return f"Sensor({self.name!r}, {list(self.metrics)})"
