"""Quota arithmetic: Kafka's Rate/SampledStat (tidegate.metrics.stats) as the quotas use
them, QuotaUtils and client quota managers.

Fake clock (tidegate.clock.MockClock) throughout, no sleeps.  "Case N" refers to the numbered test cases of
section 3 of ../shared/reference/kafka-internals.md; the sequences follow Kafka's
RateTest, MetricsTest, QuotaUtilsTest, ClientQuotaManagerTest and
ClientRequestQuotaManagerTest.
"""

from __future__ import annotations

import copy
import math
import pickle
import sys

import pytest

from tests.fake_loop import clock_at
from tidegate.clock import MockClock
from tidegate.metrics.quota_utils import bounded_throttle_time, java_round, throttle_time
from tidegate.metrics.stats import (
    Avg,
    CumulativeSum,
    Max,
    Metric,
    MetricConfig,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    WindowedSum,
)
from tidegate.server.quota.client_quota_manager import (
    DEFAULT,
    NANOS_TO_PERCENTAGE_PER_SECOND,
    UNLIMITED_BOUND,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    QuotaEntity,
    QuotaType,
    ThrottledChannel,
    max_throttle,
    nanos_to_percentage,
)
from tidegate.server.quota.client_request_quota_manager import ClientRequestQuotaManager

EPS = 1e-6
T0 = 1_700_000_000_000  # an arbitrary start: windows are not aligned to the clock



class Ends:
    """Which throttled channels have ended, as the shell's end_throttling would see them."""

    def __init__(self) -> None:
        self.names: list = []

    def __call__(self, name):
        return lambda: self.names.append(name)

    def reap(self, manager) -> list:
        """Expire what is due on the manager's throttle timer; the names that ended."""
        manager.throttle_timer.advance_clock()
        out, self.names = self.names, []
        return out

def millis_to_percent(ms: float) -> float:
    """Thread time in ms as the request-time sensor records it (Kafka's test helper)."""
    return ms * 1000 * 1000 * NANOS_TO_PERCENTAGE_PER_SECOND


def quota_config(samples: int = 11, window_s: int = 1, bound: float | None = None) -> MetricConfig:
    return MetricConfig(
        samples=samples,
        time_window_ms=window_s * 1000,
        quota=None if bound is None else Quota.upper_bound(bound),
    )


# --------------------------------------------------------------------------------------
# Case 1: QuotaUtils.throttleTime / boundedThrottleTime on a fresh Rate
# --------------------------------------------------------------------------------------
def violation(observed: float, quota: float, num_samples: int) -> QuotaViolationError:
    """A violation on a fresh Rate: its window is (num_samples - 1) full 1 s windows."""
    metric = Metric("test-metric", Rate(), quota_config(num_samples, 1, quota))
    return QuotaViolationError(metric, observed, quota)


def test_case1_throttle_time_above_quota():
    # W = (3 - 1) * 1000 ms; (100 - 50) / 50 * 2000
    assert throttle_time(violation(100.0, 50.0, 3), T0) == 2000


def test_case1_bounded_throttle_time_below_the_cap():
    # W = 1000 ms; (55 - 50) / 50 * 1000 = 100 < 500
    assert bounded_throttle_time(violation(55.0, 50.0, 2), 500, T0) == 100


def test_case1_bounded_throttle_time_capped():
    # uncapped it would be (100 - 50) / 50 * 9000 = 9000
    assert throttle_time(violation(100.0, 50.0, 10), T0) == 9000
    assert bounded_throttle_time(violation(100.0, 50.0, 10), 500, T0) == 500


@pytest.mark.parametrize("num_samples", [10, 11])
def test_throttle_time_zero_at_quota_and_negative_below(num_samples):
    assert throttle_time(violation(16.5, 16.5, num_samples), T0) == 0
    assert bounded_throttle_time(violation(18.2, 18.2, num_samples), 500, T0) == 0
    assert throttle_time(violation(16.5, 20.4, num_samples), T0) < 0
    assert bounded_throttle_time(violation(16.5, 22.4, num_samples), 500, T0) < 0


def test_throttle_time_needs_a_rate_metric():
    metric = Metric("not-a-rate", CumulativeSum(), MetricConfig(quota=Quota.upper_bound(20)))
    with pytest.raises(TypeError):
        throttle_time(QuotaViolationError(metric, 10.0, 20.0), T0)
    with pytest.raises(TypeError):
        bounded_throttle_time(QuotaViolationError(metric, 10.0, 20.0), 500, T0)


def test_throttle_time_uses_the_rates_current_window():
    # 10 s of history and half a window: W = 10500 ms, not (samples - 1) * 1000
    rate = Rate()
    config = quota_config(11, 1, 500)
    for i in range(10):
        rate.record(config, 400, T0 + i * 1000)
    assert rate.window_size(config, T0 + 10_500) == 10_500
    metric = Metric("byte-rate", rate, config)
    assert throttle_time(QuotaViolationError(metric, 600.0, 500.0), T0 + 10_500) == 2100


def test_java_round_rounds_half_up():
    assert java_round(0.5) == 1
    assert java_round(2.5) == 3  # Python's round() gives 2
    assert java_round(-0.5) == 0
    assert java_round(-1.5) == -1
    assert java_round(209.99999999) == 210
    assert java_round(math.nan) == 0


# --------------------------------------------------------------------------------------
# Case 2: a fresh Rate measured just before its first window ends is never NaN
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("num_samples", "window_s"), [(1, 1), (1, 11), (11, 1), (11, 11)])
def test_case2_rate_with_no_prior_samples(num_samples, window_s):
    rate = Rate()
    config = MetricConfig(samples=num_samples, time_window_ms=window_s * 1000)
    rate.record(config, 50.0, T0)
    now = T0 + window_s * 1000 - 1
    observed = rate.measure(config, now)
    assert not math.isnan(observed)
    # N - 1 empty prior windows are assumed
    expected = 50.0 / ((window_s - 0.001) + (num_samples - 1) * window_s)
    assert observed == pytest.approx(expected, abs=EPS)


def test_case2_rate_before_any_time_passes_is_finite():
    # elapsed 0 with a single sample: the window is the 1 ms minimum, not 0
    rate = Rate()
    config = MetricConfig(samples=1, time_window_ms=1000)
    assert rate.window_size(config, T0) == 1
    assert rate.measure(config, T0) == 0.0
    rate.record(config, 5, T0)
    assert rate.measure(config, T0) == pytest.approx(5000.0)


def test_rate_is_consistent_after_the_first_window():
    # Kafka's RateTest: one event every ~100 ms, 2 samples of 1 s -> 10..11 events/s
    clock = clock_at(T0)
    rate = Rate()
    config = MetricConfig(samples=2, time_window_ms=1000)
    steps = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    for step in steps:
        clock.advance(step)
        rate.record(config, 1, clock.milliseconds())
    clock.advance(101)
    for step in steps:
        clock.advance(step)
        rate.record(config, 1, clock.milliseconds())
        observed = rate.measure(config, clock.milliseconds())
        assert 10 <= observed <= 11
        assert rate.measure(config, clock.milliseconds()) == observed  # repeatable at the same time


# --------------------------------------------------------------------------------------
# Case 3: rate over 3 samples x 30 s
# --------------------------------------------------------------------------------------
def test_case3_rate_windowing_3_samples_of_30s():
    clock = clock_at(T0)
    config = MetricConfig(samples=3, time_window_ms=30_000)
    sensor = Sensor("test.sensor", clock.milliseconds(), config)
    rate = sensor.add("test.rate", Rate())
    total = sensor.add("test.total", CumulativeSum())
    for _ in range(2):
        sensor.record(100, clock.milliseconds())
        clock.advance(30_000)
    clock.advance(15_000)  # now 75 s after the first record
    assert rate.value(clock.milliseconds()) == pytest.approx(200 / 75, abs=EPS)
    assert rate.stat.window_size(config, clock.milliseconds()) == 75_000
    assert total.value(clock.milliseconds()) == 200
    clock.advance(90_000)  # samples * window later: everything expired
    assert rate.value(clock.milliseconds()) == 0
    assert total.value(clock.milliseconds()) == 200  # the cumulative total is not windowed


def test_purge_resets_samples_whose_last_event_is_a_full_span_old():
    # samples * window after the last event (not the start) a sample is dropped
    config = MetricConfig(samples=2, time_window_ms=1000)
    stat = WindowedSum()
    stat.record(config, 7, T0)
    stat.record(config, 3, T0 + 900)  # same sample, last event at +900
    assert stat.measure(config, T0 + 2000) == 10  # 1100 ms after the last event: kept
    assert stat.measure(config, T0 + 2899) == 10
    assert stat.measure(config, T0 + 2900) == 0  # 2000 ms after it: reset


def test_sample_ring_keeps_samples_plus_one():
    config = MetricConfig(samples=3, time_window_ms=1000)
    stat = WindowedSum()
    for i in range(10):
        stat.record(config, 1, T0 + i * 1000)
    assert len(stat.samples) == 4  # one extra slot for the overlapping sample
    assert stat.measure(config, T0 + 9000) == 3  # samples started at 7, 8, 9 s (6 s purged)


def test_avg_and_max_are_nan_without_values():
    config = MetricConfig(samples=2, time_window_ms=100)
    avg, peak = Avg(), Max()
    assert math.isnan(avg.measure(config, T0))
    assert math.isnan(peak.measure(config, T0))
    for v in (10, 30):
        avg.record(config, v, T0)
        peak.record(config, v, T0)
    assert avg.measure(config, T0) == 20
    assert peak.measure(config, T0) == 30
    later = T0 + 200  # samples * window after the records
    assert math.isnan(avg.measure(config, later))
    assert math.isnan(peak.measure(config, later))


# --------------------------------------------------------------------------------------
# Case 4: record first, then check; the violating value stays recorded
# --------------------------------------------------------------------------------------
def test_case4_upper_bound_record_then_check():
    sensor = Sensor("test", T0)
    total = sensor.add("test1.total", CumulativeSum(), MetricConfig(quota=Quota.upper_bound(5.0)))
    sensor.add("test2.total", CumulativeSum(), MetricConfig(quota=Quota.lower_bound(0.0)))
    sensor.record(5.0, T0)  # == bound: acceptable
    with pytest.raises(QuotaViolationError) as info:
        sensor.record(1.0, T0)
    assert info.value.value == 6.0 and info.value.bound == 5.0
    assert total.value(T0) == 6.0  # recorded anyway
    sensor.record(-6.0, T0)  # back to 0: both bounds hold
    with pytest.raises(QuotaViolationError) as info:
        sensor.record(-1.0, T0)  # now below the lower bound
    assert info.value.bound == 0.0


def test_quota_acceptable():
    assert Quota(5).acceptable(5) and not Quota(5).acceptable(5.0001)
    assert Quota.lower_bound(0).acceptable(0) and not Quota.lower_bound(0).acceptable(-1)
    assert Quota.upper_bound(10.5) == Quota(10.5, True) != Quota.lower_bound(10.5)


def test_record_without_check_does_not_raise():
    sensor = Sensor("s", T0)
    sensor.add("total", CumulativeSum(), MetricConfig(quota=Quota.upper_bound(1)))
    sensor.record(10, T0, check_quotas=False)
    with pytest.raises(QuotaViolationError):
        sensor.check_quotas(T0)


# --------------------------------------------------------------------------------------
# Case 5: byte rate, 2100 ms, not capped
# --------------------------------------------------------------------------------------
def produce_manager(clock: MockClock, config: ClientQuotaManagerConfig | None = None):
    return ClientQuotaManager(QuotaType.PRODUCE, config, clock=clock)


def test_case5_byte_rate_quota_violation():
    clock = clock_at(T0)
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    # 10 windows under the quota
    for _ in range(10):
        assert m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400) == 0
        clock.advance(1000)
    assert m.queue_size == 0
    # spike: (400 * 10 + 2300) / 10.5 s = 600 B/s; (600 - 500) / 500 * 10500 ms
    clock.advance(500)
    throttle = m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300)
    assert throttle == 2100  # more than one window: byte-rate throttles are not capped
    assert m.max_throttle_time_ms is None

    ends = Ends()
    channel = m.throttle("ANONYMOUS", "unknown", throttle, ends("conn-1"))
    assert channel is not None and channel.end_time_ms == clock.milliseconds() + 2100
    assert m.queue_size == 1
    assert ends.reap(m) == []  # not before the delay
    clock.advance(throttle - 1)
    assert ends.reap(m) == []
    clock.advance(1)
    assert ends.reap(m) == ["conn-1"]
    assert m.queue_size == 0

    # delays continue until the burst has rolled out of the samples
    for _ in range(10):
        m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400)
        clock.advance(1000)
    assert m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 0) == 0


def test_unrecord_takes_a_throttled_fetch_back():
    clock = clock_at(T0)
    m = ClientQuotaManager(QuotaType.FETCH, clock=clock)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    for _ in range(10):
        m.maybe_record_and_get_throttle_time_ms("u", "c", 400)
        clock.advance(1000)
    clock.advance(500)
    assert m.maybe_record_and_get_throttle_time_ms("u", "c", 2300) == 2100
    m.unrecord_quota_sensor("u", "c", 2300)  # the Fetch is answered empty
    assert m.metrics_for("u", "c").rate == pytest.approx(4000 / 10.5)
    assert m.maybe_record_and_get_throttle_time_ms("u", "c", 0) == 0
    # without the unrecord the same check throttles
    clock2 = clock_at(T0)
    m2 = ClientQuotaManager(QuotaType.FETCH, clock=clock2)
    m2.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    for _ in range(10):
        m2.maybe_record_and_get_throttle_time_ms("u", "c", 400)
        clock2.advance(1000)
    clock2.advance(500)
    assert m2.maybe_record_and_get_throttle_time_ms("u", "c", 2300) == 2100
    assert m2.maybe_record_and_get_throttle_time_ms("u", "c", 0) == 2100
    assert m.unrecord == m.unrecord_quota_sensor  # the short name is the same method


# --------------------------------------------------------------------------------------
# Case 6: request quota, 210 ms, capped at one window
# --------------------------------------------------------------------------------------
def test_case6_request_percentage_quota_violation():
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(clock=clock)
    m.update_quota(QuotaEntity("ANONYMOUS", "test-client"), 1)  # 1% = 10 ms per 1 s window

    def record(ms: float) -> int:
        return m.maybe_record_and_get_throttle_time_ms(
            "ANONYMOUS", "test-client", millis_to_percent(ms))

    for _ in range(10):
        assert record(4) == 0
        clock.advance(1000)
    assert m.queue_size == 0
    # (4 * 10 + 67.1) / 10.5 s = 10.2 ms/s; (10.2 - 10) / 10 * 10500 ms
    clock.advance(500)
    throttle = record(67.1)
    assert throttle == 210
    ends = Ends()
    m.throttle("ANONYMOUS", "test-client", throttle, ends("conn"))
    assert m.queue_size == 1
    assert ends.reap(m) == []
    clock.advance(throttle)
    assert ends.reap(m) == ["conn"]
    assert m.queue_size == 0

    for _ in range(11):
        record(4)
        clock.advance(1000)
    assert record(0) == 0  # the burst has rolled over

    # a spike that needs more than one window to drain: capped at 1000 ms ...
    assert m.max_throttle_time_ms == 1000
    assert record(500) == 1000
    # ... and stays 1000 for the next 10 windows, then 0
    for _ in range(10):
        clock.advance(1000)
        assert record(0) == 1000
    clock.advance(1000)
    assert record(0) == 0


def test_request_cap_follows_the_window_size():
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(ClientQuotaManagerConfig(11, 2), clock=clock)
    m.update_quota(QuotaEntity(client_id="c"), 1)
    assert m.max_throttle_time_ms == 2000
    assert m.record_and_get_throttle_time_ms("u", "c", millis_to_percent(5000)) == 2000


def test_request_time_is_recorded_in_percent_of_one_thread():
    assert nanos_to_percentage(10_000_000) == pytest.approx(1.0)  # 10 ms = 1% of a second
    assert nanos_to_percentage(1_000_000_000) == pytest.approx(100.0)  # one thread, 1 s
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(clock=clock)
    m.update_quota(QuotaEntity(client_id="c"), 100)  # one whole thread
    # 10 s of history: a thread busy 50% of every second measures 50
    for _ in range(11):
        assert m.maybe_record_request_time_ns("u", "c", 500_000_000) == 0
        clock.advance(1000)
    assert m.metrics_for("u", "c").rate == pytest.approx(50.0, rel=0.1)
    assert m.quota_metric_name == "request-time"
    assert ClientQuotaManager(QuotaType.FETCH, clock=clock).quota_metric_name == "byte-rate"


def test_network_thread_time_is_recorded_unchecked_and_counted_next_time():
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(clock=clock)
    m.update_quota(QuotaEntity(client_id="c"), 1)  # a fresh rate allows 100 ms over 10 s
    m.record_network_thread_time_ns("u", "c", 150_000_000)  # no exception, no check
    # the next checked record sees it: 15 / 10 s = 1.5% -> (1.5 - 1) / 1 * 10000 = 5000 -> cap
    assert m.maybe_record_request_time_ns("u", "c", 0) == 1000


def test_exempt_request_time():
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(clock=clock)
    # exempt time is recorded only once some request quota exists (as Kafka)
    m.maybe_record_exempt_ns(10_000_000)
    assert m.exempt_request_time() == 0
    m.update_quota(QuotaEntity(user=DEFAULT), 50)
    m.maybe_record_exempt_ns(30_000_000)  # 30 ms = 3 percent-seconds
    m.record_exempt(3.0)
    # broker metric windows: 2 x 30 s, so a fresh rate divides by 30 s
    assert m.exempt_request_time() == pytest.approx(6.0 / 30)
    # exempt time is for all clients together, never on an entity's counter
    assert m.entity_metrics() == []


# --------------------------------------------------------------------------------------
# Case 7: precedence table, sharing of counters, set-then-remove
# --------------------------------------------------------------------------------------
CONFIG = ClientQuotaManagerConfig()


def check_quota(m, user, client_id, expected_bound, value, expected_throttle_ms):
    """Kafka's checkQuota: bound, max value in the window, then record value * samples
    and get the throttle time. Time does not move in these tests, so every Rate's window
    is its minimum, (samples - 1) * 1 s = 10 s, and a counter holding R bytes/s over a
    bound T answers (R - T) / T * 10,000 ms."""
    assert m.quota(user, client_id).bound == expected_bound
    if expected_bound < UNLIMITED_BOUND:
        expected_max = CONFIG.quota_window_size_seconds * (CONFIG.num_quota_samples - 1)
        expected_max *= expected_bound
    else:
        expected_max = sys.float_info.max
    assert m.max_value_in_quota_window(user, client_id) == pytest.approx(expected_max)
    throttle = m.maybe_record_and_get_throttle_time_ms(user, client_id, value * CONFIG.num_quota_samples)
    assert throttle == expected_throttle_ms, (user, client_id)


def precedence_manager(clock: MockClock) -> ClientQuotaManager:
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(user=DEFAULT), 1000)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 2000)
    m.update_quota(QuotaEntity(DEFAULT, DEFAULT), 3000)
    m.update_quota(QuotaEntity("userA"), 4000)
    m.update_quota(QuotaEntity("userA", "client1"), 5000)
    m.update_quota(QuotaEntity("userB"), 6000)
    m.update_quota(QuotaEntity("userB", "client1"), 7000)
    m.update_quota(QuotaEntity("userB", DEFAULT), 8000)
    m.update_quota(QuotaEntity("userC"), 10000)
    m.update_quota(QuotaEntity(client_id="client1"), 9000)
    return m


def test_case7_precedence_table():
    clock = clock_at(T0)
    m = precedence_manager(clock)
    bounds = {
        ("userA", "client1"): 5000,  # level 1 beats level 3
        ("userA", "client2"): 4000,  # level 3 beats client-id and the defaults
        ("userA", "client3"): 4000,
        ("userB", "client1"): 7000,  # level 1
        ("userB", "client2"): 8000,  # level 2
        ("userC", "client1"): 10000,  # level 3 beats level 4 and /clients/client1
        ("userD", "client1"): 3000,  # level 5 beats /clients/client1 (level 7)
        ("userD", "client2"): 3000,
        ("userE", "client1"): 3000,
    }
    for (user, client_id), bound in bounds.items():
        assert m.quota(user, client_id) == Quota.upper_bound(bound), (user, client_id)


def test_case7_all_eight_levels_first_match_wins():
    # configure all eight levels for (U, C), then remove them one by one, most specific first
    levels = [
        (QuotaEntity("U", "C"), ("U", "C")),
        (QuotaEntity("U", DEFAULT), ("U", "C")),
        (QuotaEntity("U"), ("U", "")),
        (QuotaEntity(DEFAULT, "C"), ("U", "C")),
        (QuotaEntity(DEFAULT, DEFAULT), ("U", "C")),
        (QuotaEntity(DEFAULT), ("U", "")),
        (QuotaEntity(client_id="C"), ("", "C")),
        (QuotaEntity(client_id=DEFAULT), ("", "C")),
    ]
    m = produce_manager(clock_at(T0))
    for bound, (entity, _) in enumerate(levels, start=1):
        m.update_quota(entity, bound * 100)
    for bound, (entity, tags) in enumerate(levels, start=1):
        assert m.quota("U", "C").bound == bound * 100, entity
        assert m.quota_metric_tags("U", "C") == tags, entity
        m.update_quota(entity, None)
    assert m.quota("U", "C").bound == UNLIMITED_BOUND
    assert not m.quotas_enabled


def test_case7_precedence_and_sharing_kafka_sequence():
    clock = clock_at(T0)
    m = precedence_manager(clock)

    def check(user, client_id, bound, value, expected_throttle_ms):
        check_quota(m, user, client_id, bound, value, expected_throttle_ms)

    check("userA", "client1", 5000, 4500, 0)  # <user, client> over <user>: 4,950/s
    check("userA", "client2", 4000, 4500, 2375)  # <user> over <client> and defaults: 4,950/s
    check("userA", "client3", 4000, 0, 2375)  # <user> is shared by the user's clients
    check("userA", "client1", 5000, 0, 0)  # <user, client> is its own counter

    check("userB", "client1", 7000, 8000, 2571)  # 8,800/s over 7,000
    check("userB", "client2", 8000, 7000, 0)  # <user, default client>: per client
    check("userB", "client3", 8000, 7000, 0)

    check("userD", "client1", 3000, 3500, 2833)  # <default user, default client>: 3,850/s
    check("userD", "client2", 3000, 2500, 0)
    check("userE", "client1", 3000, 2500, 0)

    # remove the <user, client> default: back to the <user> default, per user
    m.update_quota(QuotaEntity(DEFAULT, DEFAULT), None)
    check("userD", "client1", 1000, 0, 0)  # new tags: a fresh counter
    check("userE", "client4", 1000, 1500, 6500)  # 1,650/s over 1,000
    check("userF", "client4", 1000, 800, 0)
    check("userF", "client5", 1000, 800, 7600)  # shared with userF/client4: 1,760/s

    # remove the <user> default: back to the <client-id> default, shared across users
    m.update_quota(QuotaEntity(user=DEFAULT), None)
    check("userF", "client4", 2000, 0, 0)
    check("userF", "client5", 2000, 0, 0)
    check("userF", "client5", 2000, 2500, 3750)  # 2,750/s over 2,000
    check("userG", "client5", 2000, 0, 3750)  # userG shares client5's counter

    # live updates keep the counters
    m.update_quota(QuotaEntity("userA"), 8000)
    m.update_quota(QuotaEntity("userA", "client1"), 10000)
    check("userA", "client2", 8000, 0, 0)  # 4,950/s from before
    check("userA", "client2", 8000, 4500, 2375)  # sum of new and earlier values: 9,900/s
    check("userA", "client1", 10000, 0, 0)
    check("userA", "client1", 10000, 6000, 1550)  # 4,950 + 6,600 = 11,550/s
    m.update_quota(QuotaEntity("userA", "client1"), None)
    check("userA", "client6", 8000, 0, 2375)  # the shared userA counter
    m.update_quota(QuotaEntity("userA", "client6"), 11000)
    check("userA", "client6", 11000, 8500, 0)
    m.update_quota(QuotaEntity("userA", DEFAULT), 12000)
    m.update_quota(QuotaEntity("userA", "client6"), None)
    check("userA", "client6", 12000, 4000, 1458)  # same (userA, client6) counter: 13,750/s


def test_case7_counter_sharing_follows_metric_tags():
    clock = clock_at(T0)
    m = precedence_manager(clock)
    tags = m.quota_metric_tags
    assert tags("userA", "client1") == ("userA", "client1")  # level 1: per (user, client)
    assert tags("userA", "client2") == tags("userA", "client3") == ("userA", "")  # level 3
    assert tags("userB", "client2") == ("userB", "client2")  # level 2: per (user, client)
    assert tags("userB", "client3") == ("userB", "client3")
    assert tags("userD", "client1") == ("userD", "client1")  # level 5: per (user, client)
    m.update_quota(QuotaEntity(DEFAULT, DEFAULT), None)
    assert tags("userD", "client1") == tags("userD", "client9") == ("userD", "")  # level 6
    # level 4 is per (user, client) too
    m.update_quota(QuotaEntity(DEFAULT, "client7"), 100)
    assert tags("userD", "client7") == ("userD", "client7")
    assert m.quota("userD", "client7").bound == 100
    m.update_quota(QuotaEntity(user=DEFAULT), None)
    assert tags("userF", "client5") == tags("userG", "client5") == ("", "client5")  # level 8
    assert tags("userF", "client1") == ("", "client1")  # level 7: per client-id
    assert m.quota("userF", "client1").bound == 9000
    assert m.quota("userF", "client5").bound == 2000

    # the same counter: what one entity records, the other sees
    m.record_no_throttle("userF", "client5", 30_000)
    assert m.metrics_for("userG", "client5").rate == pytest.approx(3000)
    assert m.maybe_record_and_get_throttle_time_ms("userG", "client5", 0) == 5000  # 3,000/s over 2,000


def test_sensor_names_use_the_raw_client_id():
    clock = clock_at(T0)
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    client_id = "client@#$%"
    m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", client_id, 100)
    sensors = m.get_or_create_quota_sensors("ANONYMOUS", client_id, clock.milliseconds())
    assert sensors.quota_sensor.name == "Produce-:client@#$%"
    assert sensors.throttle_time_sensor.name == "ProduceThrottleTime-:client@#$%"


@pytest.mark.parametrize(
    ("client1", "client2", "random_client", "default_entity"),
    [
        # <client-id> quotas
        (("ANONYMOUS", "p1", QuotaEntity(client_id="p1")),
         ("ANONYMOUS", "p2", QuotaEntity(client_id="p2")),
         ("ANONYMOUS", "random-client-id"), QuotaEntity(client_id=DEFAULT)),
        # <user> quotas
        (("User1", "p1", QuotaEntity("User1")), ("User2", "p2", QuotaEntity("User2")),
         ("RandomUser", "random-client-id"), QuotaEntity(user=DEFAULT)),
        # <user, client-id> quotas
        (("User1", "p1", QuotaEntity("User1", "p1")), ("User2", "p2", QuotaEntity("User2", "p2")),
         ("RandomUser", "random-client-id"), QuotaEntity(DEFAULT, DEFAULT)),
    ],
)  # fmt: skip
def test_quota_parsing_and_live_updates(client1, client2, random_client, default_entity):
    clock = clock_at(T0)
    m = produce_manager(clock)
    u1, c1, e1 = client1
    u2, c2, e2 = client2
    m.update_quota(e1, 2000)
    m.update_quota(e2, 4000)
    assert m.quota(*random_client).bound == UNLIMITED_BOUND
    assert m.quota(u1, c1).bound == 2000
    assert m.quota(u2, c2).bound == 4000
    # p1 is throttled on its override
    assert m.maybe_record_and_get_throttle_time_ms(u1, c1, 2500 * 11) == 3750  # 2,750/s over 2,000
    # raising the quota applies to the live counter
    m.update_quota(e1, 3000)
    assert m.quota(u1, c1).bound == 3000
    assert m.maybe_record_and_get_throttle_time_ms(u1, c1, 0) == 0
    # lowering it again throttles on the same samples
    m.update_quota(e1, 500)
    assert m.maybe_record_and_get_throttle_time_ms(u1, c1, 0) == 45_000  # 2,750/s over 500
    # remove the override, set a high default: no longer throttled
    m.update_quota(e1, None)
    m.update_quota(default_entity, 4000)
    assert m.quota(u1, c1).bound == 4000
    assert m.maybe_record_and_get_throttle_time_ms(u1, c1, 1000 * 11) == 0


@pytest.mark.parametrize(
    "entity",
    [QuotaEntity(user=DEFAULT), QuotaEntity("userA"), QuotaEntity("userA", "client1")],
)
def test_set_and_remove_quota(entity):
    clock = clock_at(T0)
    m = produce_manager(clock)
    assert not m.quotas_enabled
    check_quota(m, "userA", "client1", UNLIMITED_BOUND, 1000, 0)
    m.update_quota(entity, 10)
    assert m.quotas_enabled
    check_quota(m, "userA", "client1", 10, 1000, 1_090_000)  # 1,100/s over 10/s
    m.update_quota(entity, None)  # back to no quotas at all
    assert not m.quotas_enabled
    check_quota(m, "userA", "client1", UNLIMITED_BOUND, 1000, 0)


def test_no_quota_records_nothing():
    clock = clock_at(T0)
    m = produce_manager(clock)
    assert m.maybe_record_and_get_throttle_time_ms("u", "c", 10**9) == 0
    assert m.entity_metrics() == []
    assert m.max_value_in_quota_window("u", "c") == sys.float_info.max
    # with a quota elsewhere, an unmatched entity is recorded but never throttled
    m.update_quota(QuotaEntity("other"), 1)
    assert m.maybe_record_and_get_throttle_time_ms("u", "c", 10**12) == 0
    assert m.quota("u", "c").bound == UNLIMITED_BOUND
    (metrics,) = m.entity_metrics()
    assert (metrics.user, metrics.client_id) == ("u", "")  # only <user> quotas: per user


def test_single_level_tags():
    m = produce_manager(clock_at(T0))
    assert m.quota_metric_tags("u", "c") == ("", "c")  # no quotas
    m.update_quota(QuotaEntity(client_id="x"), 1)
    assert m.quota_metric_tags("u", "c") == ("", "c")
    m.update_quota(QuotaEntity(client_id="x"), None)
    m.update_quota(QuotaEntity("x", "y"), 1)
    assert m.quota_metric_tags("u", "c") == ("u", "c")


def test_max_value_in_quota_window_with_other_window_count():
    m = ClientQuotaManager(QuotaType.FETCH, ClientQuotaManagerConfig(4), clock=clock_at(T0))
    assert m.max_value_in_quota_window("userA", "client1") == sys.float_info.max
    m.update_quota(QuotaEntity(user=DEFAULT), 10)
    assert m.max_value_in_quota_window("userA", "client1") == pytest.approx(30)


def test_update_quota_rejects_non_positive_bounds():
    m = produce_manager(clock_at(T0))
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError):
            m.update_quota(QuotaEntity("u"), bad)
    m.update_quota(QuotaEntity("u"), Quota.upper_bound(5))
    assert m.configured_quotas() == {QuotaEntity("u"): 5.0}


def test_quota_entity():
    with pytest.raises(ValueError):
        QuotaEntity()
    with pytest.raises(TypeError):
        QuotaEntity(user=3)
    assert repr(DEFAULT) == "<default>"
    assert QuotaEntity("<default>") != QuotaEntity(DEFAULT)  # a real name never collides
    assert copy.deepcopy(QuotaEntity(DEFAULT, DEFAULT)).user is DEFAULT
    assert pickle.loads(pickle.dumps(QuotaEntity(client_id=DEFAULT))).client_id is DEFAULT
    assert str(QuotaEntity("alice", DEFAULT)) == "user alice default client-id"
    assert QuotaType.from_config_key("request_percentage") is QuotaType.REQUEST
    assert str(QuotaType.FETCH) == "Fetch"
    assert QuotaType.PRODUCE.config_key == "producer_byte_rate"


# --------------------------------------------------------------------------------------
# several quotas, metrics, expiry, the injected clock
# --------------------------------------------------------------------------------------
def test_max_throttle_is_the_maximum_not_the_sum():
    assert max_throttle(2100, 210) == 2100
    assert max_throttle(0, 1000) == 1000
    assert max_throttle() == 0
    assert max_throttle(-5) == 0


def test_byte_rate_and_request_quota_violated_together():
    clock = clock_at(T0)
    produce = produce_manager(clock)
    request = ClientRequestQuotaManager(clock=clock)
    produce.update_quota(QuotaEntity(client_id="c"), 100)
    request.update_quota(QuotaEntity(client_id="c"), 1)
    bytes_throttle = produce.maybe_record_and_get_throttle_time_ms("u", "c", 2000)
    request_throttle = request.maybe_record_request_time_ns("u", "c", 200_000_000)
    # 2000 B over a fresh (10 s) window = 200 B/s: (200 - 100) / 100 * 10000, not capped
    assert bytes_throttle == 10_000
    # 200 ms = 20 percent-seconds over 10 s = 2%: (2 - 1) / 1 * 10000, capped at one window
    assert request_throttle == 1000
    assert max_throttle(bytes_throttle, request_throttle) == 10_000


def test_entity_metrics_are_plain_numbers():
    clock = clock_at(T0)
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    m.maybe_record_and_get_throttle_time_ms("u", "c", 1000)
    (metrics,) = m.entity_metrics()
    assert metrics.user == "" and metrics.client_id == "c"
    assert metrics.rate == pytest.approx(100)  # 1000 B over 10 padded seconds
    assert metrics.quota == 500
    assert metrics.throttle_time_avg == 0.0 and metrics.throttle_time_max == 0.0
    m.throttle("u", "c", 2100, Ends()(1))
    m.throttle("u", "c", 500, Ends()(2))
    metrics = m.metrics_for("u", "c")
    assert metrics.throttle_time_avg == pytest.approx(1300)
    assert metrics.throttle_time_max == 2100
    assert m.queue_size == 2
    # the throttle-time sensor uses the broker's metric windows (2 x 30 s by default)
    clock.advance(60_000)
    metrics = m.metrics_for("u", "c")
    assert metrics.throttle_time_avg == 0.0 and metrics.throttle_time_max == 0.0
    assert metrics.rate == 0.0
    assert m.metrics_for("nobody", "else") is None


def test_inactive_sensors_expire_after_an_hour():
    clock = clock_at(T0)
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(client_id="c"), 500)
    m.maybe_record_and_get_throttle_time_ms("u", "c", 1)
    clock.advance(3600 * 1000)
    assert m.expire_sensors() == 0  # not more than an hour yet
    clock.advance(1)
    assert m.expire_sensors() == 2  # the quota and throttle-time sensors
    assert m.entity_metrics() == []
    assert m.maybe_record_and_get_throttle_time_ms("u", "c", 1) == 0  # recreated


def test_injected_clock_is_used_when_no_time_is_given():
    clock = clock_at(T0)
    m = produce_manager(clock)
    m.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    for _ in range(10):
        assert m.maybe_record_and_get_throttle_time_ms("u", "c", 400) == 0
        clock.advance(1000)
    clock.advance(500)
    throttle = m.maybe_record_and_get_throttle_time_ms("u", "c", 2300)
    assert throttle == 2100
    ends = Ends()
    channel = m.throttle("u", "c", throttle, ends("conn"))
    assert channel.end_time_ms == clock.milliseconds() + 2100
    clock.advance(2100)
    assert ends.reap(m) == ["conn"]


# --------------------------------------------------------------------------------------
# Case 8 (the queue part): throttled channels come back in end-time order
# --------------------------------------------------------------------------------------
def test_throttled_channels_end_in_end_time_order_ties_in_arrival_order():
    """Case 8 (the queue part): Kafka's DelayQueue of ThrottledChannels is a timer here:
    each channel is a timer task on its manager's throttle timer."""
    clock = clock_at(T0)
    m = produce_manager(clock)
    ends = Ends()
    assert m.throttle_timer.next_expiration_ms() is None and m.queue_size == 0
    m.throttle("u", "c", 300, ends("a"))  # ends T0 + 300
    clock.advance(50)
    m.throttle("u", "c", 100, ends("b"))  # ends T0 + 150
    clock.advance(50)
    m.throttle("u", "c", 200, ends("c"))  # ends T0 + 300, added after a
    m.throttle("u", "c", 10, ends("d"))  # ends T0 + 110
    assert m.queue_size == 4
    clock.set_milliseconds(T0 + 109)
    assert ends.reap(m) == []
    clock.set_milliseconds(T0 + 110)
    assert ends.reap(m) == ["d"]  # due when the end time is reached
    clock.set_milliseconds(T0 + 149)
    assert ends.reap(m) == []
    clock.set_milliseconds(T0 + 150)
    assert ends.reap(m) == ["b"]
    clock.set_milliseconds(T0 + 10_000)
    assert ends.reap(m) == ["a", "c"]  # ties in the order they were added
    assert m.queue_size == 0 and m.throttle_timer.next_expiration_ms() is None


def test_throttled_channel_delay():
    channel = ThrottledChannel(210, T0, lambda: None)
    assert channel.end_time_ms == T0 + 210
    assert channel.get_delay(T0) == 210
    assert channel.get_delay(T0 + 210) == 0
    assert channel.get_delay(T0 + 300) < 0


def test_throttle_then_drain_returns_to_normal():
    clock = clock_at(T0)
    m = ClientRequestQuotaManager(clock=clock)
    m.update_quota(QuotaEntity(client_id="c"), 1)
    ends = Ends()
    assert m.throttle("u", "c", 0, ends("conn")) is None  # nothing to throttle
    throttle = m.maybe_record_request_time_ns("u", "c", 500_000_000)
    assert throttle == 1000
    m.throttle("u", "c", throttle, ends("conn"))
    m.throttle("u", "c", 400, ends("other"))
    clock.advance(400)
    assert ends.reap(m) == ["other"]
    clock.advance(600)
    assert ends.reap(m) == ["conn"]
    assert m.queue_size == 0 and m.throttle_timer.next_expiration_ms() is None
