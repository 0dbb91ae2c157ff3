"""Kafka's ``QuotaUtils``: the throttle time that brings a violated Rate back to its bound.

Pure arithmetic on :mod:`tidegate.metrics.stats` (a :class:`QuotaViolationError` and
the window of its :class:`Rate`), shared by the client quota managers
(:mod:`tidegate.server.quota`) and the connection quotas
(:mod:`tidegate.network.connection_quotas`), which sits below the server.
"""

from __future__ import annotations

import math

from tidegate.clock import MonotonicMs
from tidegate.metrics.stats import QuotaViolationError, Rate

__all__ = ["bounded_throttle_time", "java_round", "throttle_time"]


def java_round(x: float) -> int:
    """``Math.round`` for a double: half rounds up (Python's ``round`` rounds half to even)."""
    if math.isnan(x):
        return 0
    return math.floor(x + 0.5)


def throttle_time(e: QuotaViolationError, now_ms: MonotonicMs) -> int:
    """The delay X that brings the observed rate O back to the bound T.

    Over a window W, ``O * W / (W + X) = T`` gives ``X = (O - T) / T * W``, where W is
    the violated Rate's own current window (:meth:`Rate.window_size`), rounded like
    Java's ``Math.round``.  Negative when O is below T (callers only ask on a violation).
    """
    stat = e.metric.stat
    if not isinstance(stat, Rate):
        raise TypeError(f"Metric {e.metric.name} is not a Rate metric: {stat!r}")
    window_ms = stat.window_size(e.metric.config, now_ms)
    return java_round((e.value - e.bound) / e.bound * window_ms)


def bounded_throttle_time(
    e: QuotaViolationError, max_throttle_time_ms: int, now_ms: MonotonicMs
) -> int:
    """:func:`throttle_time`, capped at ``max_throttle_time_ms``."""
    return min(throttle_time(e, now_ms), max_throttle_time_ms)
