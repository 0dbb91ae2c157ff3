"""The producer's Meter and Metrics: Kafka's Meter (tidegate.metrics.stats) on a clock,
safe to record from several threads."""

from __future__ import annotations

import threading

from tidegate.clock import MockClock
from tidegate.metrics.stats import TimeUnit
from tidegate.producer.metrics import Meter, Metrics


def test_meter_is_kafkas_rate_and_total_on_the_clock():
    # 3 samples of 30 s: 100 at 0 s and at 30 s, read at 75 s -> 200 / 75 per second
    clock = MockClock()
    meter = Meter(clock, samples=3, window_ms=30_000)
    for _ in range(2):
        meter.record(100)
        clock.advance(30_000)
    clock.advance(15_000)
    assert meter.rate() == 200 / 75
    assert meter.total == 200
    clock.advance(90_000)  # samples * window later the rate has expired, not the total
    assert meter.rate() == 0.0
    assert meter.total == 200


def test_meter_in_nanoseconds_is_a_ratio_of_time():
    # Kafka's bufferpool-wait-ratio: ns waited per ns of the Rate's window
    clock = MockClock()
    meter = Meter(clock, unit=TimeUnit.NANOSECONDS)
    clock.advance(1_000)
    meter.record(500_000_000)  # 0.5 s waited, recorded at t = 1 s
    clock.advance(5_000)
    # 5 s since the sample opened, padded by one 30 s window: 0.5 s of 35 s
    assert meter.rate() == 500_000_000 / 35e9
    assert meter.total == 500_000_000


def test_meter_counts_every_record_from_concurrent_threads():
    clock = MockClock()
    meter = Meter(clock)
    threads_n, per_thread = 8, 2_000
    start = threading.Barrier(threads_n)

    def record() -> None:
        start.wait()
        for _ in range(per_thread):
            meter.record()

    threads = [threading.Thread(target=record) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert meter.total == threads_n * per_thread
    # all recorded at t = 0: one 30 s window of padding (2 samples)
    assert meter.rate() == threads_n * per_thread / 30.0


def test_metrics_meter_registers_the_rate_and_the_total():
    clock = MockClock()
    metrics = Metrics(clock)
    m = metrics.meter("x-rate", "x-total")
    m.record()
    m.record(2)
    assert metrics.snapshot() == {"x-rate": 3 / 30.0, "x-total": 3.0}
    assert metrics.get("x-total") == 3.0


def test_the_producers_rates_use_its_metrics_sample_window():
    """metrics.sample.window.ms / metrics.num.samples (Kafka's MetricConfig) shape the
    producer's rates: a rate with 1 s windows forgets what a 30 s one still counts."""
    from tidegate.producer import Producer

    clock = MockClock()
    short = Producer({"bootstrap.servers": "127.0.0.1:1", "metrics.sample.window.ms": "1000",
                      "metrics.num.samples": "2"}, clock=clock)  # fmt: skip
    default = Producer({"bootstrap.servers": "127.0.0.1:1"}, clock=clock)
    try:
        for p in (short, default):
            m = p._metrics.meter("x-rate", "x-total")
            m.record(10)
        clock.advance(5_000)
        assert short._metrics.get("x-rate") == 0.0  # both 1 s samples expired
        assert default._metrics.get("x-rate") == 10 / 35.0
        assert short._metrics.get("x-total") == default._metrics.get("x-total") == 10
    finally:
        short.close(0)
        default.close(0)
