"""The Request quota (KIP-124): Kafka's ClientRequestQuotaManager.

Thread time as a percentage of one thread, recorded in percent-seconds so the Rate is
the percentage itself; a throttle capped at one quota window; and the
``exempt-request-time`` sensor for requests exempt from the quota (ApiVersions, the
SASL exchange before login). The byte-rate arithmetic it shares lives in
:mod:`tidegate.server.quota.client_quota_manager`.
"""

from __future__ import annotations

from tidegate.clock import Clock, MonotonicMs
from tidegate.metrics.quota_utils import bounded_throttle_time
from tidegate.metrics.stats import (
    METRICS_NUM_SAMPLES_DEFAULT,
    METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    QuotaViolationError,
    Rate,
    Sensor,
)
from tidegate.server.quota.client_quota_manager import (
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    QuotaType,
    nanos_to_percentage,
)

__all__ = ["ClientRequestQuotaManager"]


class ClientRequestQuotaManager(ClientQuotaManager):
    """The Request quota (KIP-124): thread time as a percentage of one thread.

    Thread time is recorded in percent-seconds (:func:`nanos_to_percentage`: 10 ms is
    1.0), so the per-second Rate is a percentage of one thread and is compared with
    ``request_percentage`` directly: 100 is one thread for the whole window, 1 is 10 ms
    per 1 s window.  A throttle is capped at one quota window.  Time spent on exempt
    requests is measured on the ``exempt-request-time`` Rate (all clients together,
    never expired, the broker's metric windows).
    """

    quota_metric_name = "request-time"

    def __init__(
        self,
        config: ClientQuotaManagerConfig | None = None,
        *,
        clock: Clock,
        metrics_num_samples: int = METRICS_NUM_SAMPLES_DEFAULT,
        metrics_sample_window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    ) -> None:
        super().__init__(
            QuotaType.REQUEST,
            config,
            clock=clock,
            metrics_num_samples=metrics_num_samples,
            metrics_sample_window_ms=metrics_sample_window_ms,
        )
        self._max_throttle_time_ms = self.config.quota_window_size_seconds * 1000
        self.exempt_sensor = Sensor(f"exempt-{self.quota_type.group}", clock.milliseconds())
        self._exempt_metric = self.exempt_sensor.add(
            "exempt-request-time", Rate(), self.metrics_config
        )

    @property
    def max_throttle_time_ms(self) -> int:
        return self._max_throttle_time_ms

    def throttle_time(self, e: QuotaViolationError, now_ms: MonotonicMs) -> int:
        return bounded_throttle_time(e, self._max_throttle_time_ms, now_ms)

    def maybe_record_request_time_ns(self, user: str, client_id: str, thread_time_ns: int) -> int:
        """Record a request's handler time and return its throttle (Kafka's
        ``maybeRecordAndGetThrottleTimeMs(request, timeMs)``)."""
        return self.maybe_record_and_get_throttle_time_ms(user, client_id, nanos_to_percentage(thread_time_ns))

    def record_network_thread_time_ns(self, user: str, client_id: str, thread_time_ns: int) -> None:
        """Time spent sending the response: recorded unchecked, counted by the next check."""
        if self.quotas_enabled:
            self.record_no_throttle(user, client_id, nanos_to_percentage(thread_time_ns))

    def record_exempt(self, value: float) -> None:
        """Record exempt time (in percent-seconds) on ``exempt-request-time``."""
        self.exempt_sensor.record(value, self.clock.milliseconds())

    def maybe_record_exempt_ns(self, thread_time_ns: int) -> None:
        """Record an exempt request's time, if any request quota is configured (as Kafka)."""
        if self.quotas_enabled:
            self.record_exempt(nanos_to_percentage(thread_time_ns))

    def exempt_request_time(self) -> float:
        """Exempt requests' thread time, as a percentage of one thread."""
        return self._exempt_metric.value(self.clock.milliseconds())
