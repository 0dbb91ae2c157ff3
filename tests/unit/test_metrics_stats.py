"""Kafka's stats (tidegate.metrics.stats): Rate's time unit and Meter.

The sequences follow Kafka's MetricsTest.testRateWindowing and MeterTest.testMeter;
the quota-specific uses of Rate/SampledStat are in test_quotas.py. Time is
tidegate.clock.MockClock (Kafka's MockTime), so every value is exact.
"""

from __future__ import annotations

import pytest

from tidegate.clock import MockClock
from tidegate.metrics.stats import (
    METRICS_NUM_SAMPLES_DEFAULT,
    METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    CumulativeSum,
    Meter,
    MetricConfig,
    Rate,
    Sensor,
    TimeUnit,
    WindowedSum,
)

EPS = 1e-6


def test_metric_config_defaults_are_kafkas_and_validated():
    config = MetricConfig()
    assert (config.samples, config.time_window_ms) == (2, 30_000)
    assert (METRICS_NUM_SAMPLES_DEFAULT, METRICS_SAMPLE_WINDOW_MS_DEFAULT) == (2, 30_000)
    with pytest.raises(ValueError):
        MetricConfig(samples=0)
    with pytest.raises(ValueError):
        MetricConfig(time_window_ms=0)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        (TimeUnit.NANOSECONDS, 1_500_000_000.0),
        (TimeUnit.MICROSECONDS, 1_500_000.0),
        (TimeUnit.MILLISECONDS, 1_500.0),
        (TimeUnit.SECONDS, 1.5),
        (TimeUnit.MINUTES, 1.5 / 60),
        (TimeUnit.HOURS, 1.5 / 3600),
        (TimeUnit.DAYS, 1.5 / 86_400),
    ],
)
def test_time_unit_converts_milliseconds_as_kafkas_rate_convert(unit, expected):
    assert unit.from_ms(1_500) == expected
    assert Rate(unit=unit).convert(1_500) == expected


def test_rate_is_per_second_by_default():
    assert Rate().unit is TimeUnit.SECONDS
    stat = WindowedSum()
    assert Rate(stat).stat is stat  # the stat stays the first positional argument
    assert Meter().unit is TimeUnit.SECONDS


def record_100_at_0_and_30_s(rate: Rate, config: MetricConfig, clock: MockClock) -> None:
    for _ in range(2):
        rate.record(config, 100, clock.milliseconds())
        clock.advance(30_000)
    clock.advance(15_000)  # 75 s after the first record


@pytest.mark.parametrize(
    ("unit", "window_in_unit"),
    [
        (TimeUnit.NANOSECONDS, 75e9),
        (TimeUnit.MICROSECONDS, 75e6),
        (TimeUnit.MILLISECONDS, 75_000.0),
        (TimeUnit.SECONDS, 75.0),
        (TimeUnit.MINUTES, 1.25),
        (TimeUnit.HOURS, 75 / 3600),
        (TimeUnit.DAYS, 75 / 86_400),
    ],
)
def test_rate_unit_divides_by_the_window_in_that_unit(unit, window_in_unit):
    # 3 samples of 30 s, 100 at 0 s and 30 s, measured at 75 s: 200 per 75 s
    clock = MockClock()
    config = MetricConfig(samples=3, time_window_ms=30_000)
    rate = Rate(unit=unit)
    record_100_at_0_and_30_s(rate, config, clock)
    assert rate.window_size(config, clock.milliseconds()) == 75_000  # the window itself is in ms
    assert rate.measure(config, clock.milliseconds()) == 200 / window_in_unit
    clock.advance(90_000)  # samples * window later: every sample purged
    assert rate.measure(config, clock.milliseconds()) == 0.0


def test_rate_per_millisecond_is_a_fraction_of_time():
    # milliseconds recorded on a Rate(MILLISECONDS) read as the fraction of time they
    # cover (the memory pool's depleted percent): 2 samples of 100 ms, 1 ms every 10 ms
    config = MetricConfig(samples=2, time_window_ms=100)
    rate = Rate(unit=TimeUnit.MILLISECONDS)
    for t in range(0, 1000, 10):  # 100 events over 1 s: the ring of 3 samples is reused
        rate.record(config, 1.0, t)
    assert len(rate.stat.samples) == 3
    # at 990 the sample started at 700 (last event 790) is purged; those started at
    # 800 and 900 hold 10 events each: 20 ms over the 190 ms since 800
    assert rate.measure(config, 990) == 20 / 190


def test_meter_rate_windowing_and_cumulative_total():
    # Kafka's MetricsTest.testRateWindowing: a Meter over 3 samples of the default 30 s
    clock = MockClock()
    config = MetricConfig(samples=3)
    meter = Meter()
    total = 0
    for _ in range(config.samples - 1):
        meter.record(config, 100, clock.milliseconds())
        total += 100
        clock.advance(config.time_window_ms)
        assert meter.total.measure(config, clock.milliseconds()) == total
    clock.advance(config.time_window_ms // 2)
    elapsed_s = (config.time_window_ms * (config.samples - 1) + config.time_window_ms / 2) / 1000
    assert elapsed_s == 75.0
    assert meter.rate.measure(config, clock.milliseconds()) == pytest.approx(200 / 75, abs=EPS)
    assert meter.rate.window_size(config, clock.milliseconds()) == 75_000
    assert meter.total.measure(config, clock.milliseconds()) == 200
    # the rate expires, the total does not
    clock.advance(config.time_window_ms * config.samples)
    assert meter.rate.measure(config, clock.milliseconds()) == 0.0
    assert meter.total.measure(config, clock.milliseconds()) == 200


def test_meter_records_every_value_into_both_parts():
    # Kafka's MeterTest.testMeter: a value every 100 ms, rising by 5 each time, over
    # 100 s of the default 2 x 30 s windows; the total is cumulative and the rate is
    # the values recorded since the oldest retained sample over the Rate's window
    clock = MockClock()
    config = MetricConfig()
    meter = Meter()
    assert isinstance(meter.rate, Rate) and isinstance(meter.total, CumulativeSum)
    next_value = expected_total = 0.0
    interval_ms, delta = 100, 5.0
    for i in range(1, 101):
        while clock.milliseconds() < i * 1000:
            expected_total += next_value
            meter.record(config, next_value, clock.milliseconds())
            clock.advance(interval_ms)
            next_value += delta
        now = clock.milliseconds()
        assert meter.total.measure(config, now) == pytest.approx(expected_total, abs=EPS)
        window_ms = meter.rate.window_size(config, now)
        window_start_ms = max(now - window_ms, 0)
        sampled_total = 0.0
        prev_value = next_value - delta
        t = now - 100
        while t >= window_start_ms:
            sampled_total += prev_value
            t -= interval_ms
            prev_value -= delta
        rate = meter.rate.measure(config, now)
        assert rate == pytest.approx(sampled_total * 1000 / window_ms, abs=EPS)


def test_meter_per_millisecond_as_the_memory_pool_uses_it():
    # Meter(TimeUnit.MILLISECONDS): 3000 depleted ms recorded at 4 s into a fresh
    # meter, read at 10 s: 6 s elapsed, padded by one 30 s window -> 3000 / 36000
    config = MetricConfig()
    meter = Meter(TimeUnit.MILLISECONDS)
    meter.record(config, 3_000, 4_000)
    assert meter.rate.measure(config, 10_000) == 3_000 / 36_000
    assert meter.total.measure(config, 10_000) == 3_000
    assert meter.rate.measure(config, 64_000) == 0.0  # 60 s after the last record
    assert meter.total.measure(config, 64_000) == 3_000


def test_a_sensor_records_into_rates_of_different_units():
    clock = MockClock()
    config = MetricConfig(samples=3)
    sensor = Sensor("depleted", clock.milliseconds(), config)
    per_ms = sensor.add("rate-per-ms", Rate(unit=TimeUnit.MILLISECONDS))
    per_s = sensor.add("rate-per-s", Rate())
    for _ in range(2):
        sensor.record(100, clock.milliseconds())
        clock.advance(30_000)
    clock.advance(15_000)
    assert per_ms.value(clock.milliseconds()) == 200 / 75_000
    assert per_s.value(clock.milliseconds()) == 200 / 75.0
