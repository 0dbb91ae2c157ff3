"""Producer metrics with Kafka's names and semantics (a tiny ``Metrics``/``Meter``).

Kafka's ``Meter`` pairs a windowed rate with a cumulative total; the rate is a
``SampledStat`` over ``metrics.num.samples`` windows of ``metrics.sample.window.ms``
(2 x 30 s by default) whose elapsed time is padded to at least
``(samples - 1)`` full windows, so a fresh rate is not inflated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tidegate.clock import SYSTEM_CLOCK, Clock


class Meter:
    """A rate (per second, or a ratio for nanosecond meters) plus a total."""

    __slots__ = ("_buckets", "_clock", "_lock", "_ratio", "_samples", "_total", "_window_ns")

    def __init__(
        self,
        clock: Clock = SYSTEM_CLOCK,
        *,
        window_ms: int = 30_000,
        samples: int = 2,
        ratio_of_nanoseconds: bool = False,
    ) -> None:
        self._clock = clock
        self._window_ns = window_ms * 1_000_000
        self._samples = samples
        # list of [window start ns, sum]
        self._buckets: list[list[float]] = []
        self._total = 0.0
        self._lock = threading.Lock()
        self._ratio = ratio_of_nanoseconds

    def record(self, value: float = 1.0) -> None:
        now = self._clock.nanoseconds()
        with self._lock:
            self._total += value
            b = self._buckets
            if not b or now - b[-1][0] >= self._window_ns:
                b.append([now, 0.0])
                if len(b) > self._samples:
                    del b[0]
            b[-1][1] += value

    @property
    def total(self) -> float:
        return self._total

    def rate(self) -> float:
        now = self._clock.nanoseconds()
        with self._lock:
            horizon = now - self._samples * self._window_ns
            live = [bk for bk in self._buckets if bk[0] > horizon]
            if not live:
                return 0.0
            value = sum(bk[1] for bk in live)
            elapsed = now - live[0][0]
        full = elapsed // self._window_ns
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window_ns
        if elapsed <= 0:
            return 0.0
        if self._ratio:
            return value / elapsed  # nanoseconds waited per nanosecond elapsed
        return value / (elapsed / 1e9)


class Metrics:
    """Named metric readers: ``{name: callable() -> number}`` in group ``producer-metrics``."""

    GROUP = "producer-metrics"

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._readers: dict[str, Callable[[], float]] = {}

    def add(self, name: str, reader: Callable[[], float]) -> None:
        self._readers[name] = reader

    def meter(self, rate_name: str, total_name: str, **kw: object) -> Meter:
        m = Meter(self.clock, **kw)  # type: ignore[arg-type]
        self.add(rate_name, m.rate)
        self.add(total_name, lambda: m.total)
        return m

    def snapshot(self) -> dict[str, float]:
        return {name: reader() for name, reader in self._readers.items()}

    def get(self, name: str) -> float:
        return self._readers[name]()
