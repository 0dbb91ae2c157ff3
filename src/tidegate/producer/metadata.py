"""The producer's view of cluster metadata (Kafka's ``ProducerMetadata``).

Shared between ``send`` callers and the sender thread: callers register topics and
wait (up to ``max.block.ms``) for a snapshot that knows their partitions; the
sender fetches Metadata for the registered topics when an update is requested,
when ``metadata.max.age.ms`` passed, or after errors that mean the metadata is
stale, never more often than ``retry.backoff.ms``. Topics unused for
``metadata.max.idle.ms`` are dropped from the requests.
"""

from __future__ import annotations

import threading

from tidegate.client.metadata import Cluster
from tidegate.clock import Clock, MonotonicMs

__all__ = ["ProducerMetadata"]


class ProducerMetadata:
    def __init__(
        self,
        *,
        refresh_backoff_ms: int = 100,
        max_age_ms: int = 300_000,
        max_idle_ms: int = 300_000,
        clock: Clock,
    ) -> None:
        self.refresh_backoff_ms = refresh_backoff_ms
        self.max_age_ms = max_age_ms
        self.max_idle_ms = max_idle_ms
        self.clock = clock
        self.cluster = Cluster.empty()
        self.version = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._topics: dict[str, int] = {}
        self._need_update = True
        self._last_refresh_ms = -(1 << 40)
        self._last_attempt_ms = -(1 << 40)
        self._fatal: BaseException | None = None

    def add(self, topic: str, now_ms: MonotonicMs) -> None:
        """Mark ``topic`` as used; a new topic triggers an update."""
        if topic not in self._topics:
            with self._lock:
                if topic not in self._topics:
                    self._need_update = True
        self._topics[topic] = now_ms

    def topics(self, now_ms: MonotonicMs) -> list[str]:
        """Topics to request, dropping those idle for metadata.max.idle.ms."""
        with self._lock:
            idle = [t for t, used in self._topics.items() if now_ms - used > self.max_idle_ms]
            for t in idle:
                del self._topics[t]
            return list(self._topics)

    def request_update(self) -> int:
        with self._lock:
            self._need_update = True
            return self.version

    def time_to_next_update(self, now_ms: MonotonicMs) -> int:
        backoff_left = self._last_attempt_ms + self.refresh_backoff_ms - now_ms
        if self._need_update:
            return max(0, backoff_left)
        return max(0, self._last_refresh_ms + self.max_age_ms - now_ms, backoff_left)

    def attempt(self, now_ms: MonotonicMs) -> None:
        self._last_attempt_ms = now_ms

    def update(self, cluster: Cluster, now_ms: MonotonicMs) -> None:
        with self._lock:
            self.cluster = cluster
            self.version += 1
            self._last_refresh_ms = now_ms
            self._last_attempt_ms = now_ms
            # keep asking while a registered topic has no usable partitions yet
            self._need_update = any(cluster.partition_count(t) is None for t in self._topics)
            self._cond.notify_all()

    def failed_update(self, now_ms: MonotonicMs, error: BaseException | None = None) -> None:
        with self._lock:
            self._last_attempt_ms = now_ms
            self._need_update = True

    def set_fatal(self, error: BaseException) -> None:
        with self._lock:
            self._fatal = error
            self._cond.notify_all()

    def await_update(self, last_version: int, timeout_ms: float) -> bool:
        """Wait until a snapshot newer than ``last_version`` exists; False on timeout."""
        deadline = self.clock.nanoseconds() + int(timeout_ms * 1_000_000)
        with self._lock:
            while self.version <= last_version:
                if self._fatal is not None:
                    raise self._fatal
                left = (deadline - self.clock.nanoseconds()) / 1e9
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wake_waiters(self) -> None:
        with self._lock:
            self._cond.notify_all()
