"""KIP-72 against a real broker process: the seed's flood of large produce requests.

200 raw connections each send 8 MiB Produce requests (one record batch, acks=1, one
in flight per connection) at once, for a bounded time, against a broker with
``queued.max.request.bytes`` = 64 MiB, while the broker's RSS is sampled by pid
(every 10 ms, plus the kernel's exact high-water mark VmHWM, reset just before the
flood). The flood engine is ``benchmarks/memory_flood.py`` (one selector thread, the
request bytes built once and shared by every send).

What is proven, and why the thresholds are what they are: docs/memory-pool.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import metrics_overrides

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import memory_flood as mf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MiB = mf.MiB
POOL = 64 * MiB
REQUEST = 8 * MiB  # the whole frame, size prefix included
CONNECTIONS = 200
# The bound counts request bodies only. What else the broker allocates during the
# flood, measured: 0.0-0.8 MiB (200 connections' state, the metrics scrapes, response
# buffers). On top of it glibc keeps up to 16 MiB of freed bodies at the top of its heap
# (its trim threshold, twice the largest freed mmap chunk: 2 x 8 MiB), measured 8.8 and
# 16.3 MiB; the rest leaves room for a slower, busier machine. docs/memory-pool.md.
OVERHEAD = 2 * REQUEST + 4 * MiB
BOUND = POOL + REQUEST + OVERHEAD  # over the baseline RSS
FLOOD_S = 30.0  # new requests for this long, then every answer is awaited

BROKER = {
    "socket.request.max.bytes": str(16 * MiB),
    "message.max.bytes": str(16 * MiB),
    # small segments and retention (set on the topic) deleted every 0.5 s: gigabytes
    # flow through, the disk and the dirty page cache must not fill up
    "log.retention.check.interval.ms": "500",
}


def flood(broker, *, requests_per_conn: int, duration_s: float, metrics_url: str | None):
    result, run, probe, scraper = mf.measure(
        "tidegate",
        broker.bootstrap,
        broker.pid,
        connections=CONNECTIONS,
        request_bytes=REQUEST,
        requests_per_conn=requests_per_conn,
        duration_s=duration_s,
        drain_timeout_s=90.0,
        metrics_url=metrics_url,
        log=lambda msg: print(msg, file=sys.stderr),
    )
    assert run is not None, result.error
    print(
        f"baseline {result.baseline_rss / MiB:.1f} MiB, peak {result.peak_rss / MiB:.1f} MiB "
        f"(growth {result.growth / MiB:.1f} MiB), {run.answered} answered in "
        f"{run.elapsed_s:.1f} s ({run.mbps:.0f} MB/s), completions {result.completions}, "
        f"at half time {result.half_completions}, latency {result.latency_s}, "
        f"probe {result.probe}, pool {result.pool}",
        file=sys.stderr,
    )
    return result, run, probe, scraper


def assert_all_answered(run) -> None:
    assert run.closed_by_broker == 0, "the broker closed flood connections"
    assert run.unanswered == 0, f"{run.unanswered} requests never answered (deadlock?)"
    assert run.answered == run.sent
    assert run.error_codes == {0: run.answered}, f"produce errors: {run.error_codes}"


def test_flood_with_64_mib_pool_stays_bounded_fair_and_live(broker_factory):
    broker = broker_factory({**BROKER, "queued.max.request.bytes": str(POOL), **metrics_overrides()})
    metrics_url = broker.metrics_url
    before = mf.scrape_pool(metrics_url)
    assert before["kafka_network_socketserver_memorypoolavailable"] == POOL

    result, run, probe, scraper = flood(
        broker, requests_per_conn=0, duration_s=FLOOD_S, metrics_url=metrics_url
    )

    # -- no deadlock: every request sent was answered, without errors
    assert_all_answered(run)
    assert run.answered >= 2 * CONNECTIONS, "the flood hardly ran"

    # -- the bound: RSS stayed under baseline + pool + one request + overhead
    assert result.peak_rss_hwm is not None or len(result.rss_series) > 100
    assert result.growth <= BOUND, (
        f"RSS grew by {result.growth / MiB:.1f} MiB over the baseline; the bound is "
        f"{BOUND / MiB:.0f} MiB (pool {POOL / MiB:.0f} + request {REQUEST / MiB:.0f} "
        f"+ overhead {OVERHEAD / MiB:.0f})"
    )
    # ...and the pool was really the limit: the bodies held reached the pool's size
    assert result.growth >= POOL * 0.9

    # -- no starvation. Connections muted for memory are served in shuffled order
    # while the pool is nearly empty (KIP-72), so the counts spread like random
    # service: var/mean about 1 or less (measured 0.4-0.6). A starved subset would
    # show as connections with nothing answered and var/mean far above 1.
    counts = run.completions
    fair = result.completions
    assert min(counts) >= 1, f"a connection got no answer during the flood: {fair}"
    assert fair["dispersion"] <= 2.0, fair
    assert min(counts) >= max(counts) / 8, fair

    # -- a light client kept being served: ApiVersions round trips in a loop. Its
    # requests wait for memory like everybody's, so its latency is measured in
    # "turns": the time for the broker to serve every flood connection once
    # (connections / requests per second). Random service makes a wait about one
    # turn on average (exponential tail); FIFO would make it at most one.
    turn = CONNECTIONS / run.rps
    waits = [lat / turn for lat in probe.latencies]
    print(f"turn {turn:.2f} s, probe waits in turns: p50 {mf.quantile(waits, 0.5):.2f} "
          f"max {max(waits):.2f}", file=sys.stderr)
    assert probe.timeouts == 0 and not probe.errors, (probe.timeouts, probe.errors)
    assert len(probe.latencies) >= 5, "the probe was hardly served"
    assert mf.quantile(waits, 0.5) < 2.0, result.probe
    assert max(waits) < 10.0, result.probe

    # -- the metrics moved: available fell below the pool (even below 0: non-strict),
    # the pool was depleted for a while, and it is all back once the flood is over
    assert scraper.samples and not scraper.errors, scraper.errors
    assert result.pool["available_min"] < REQUEST
    assert result.pool["available_min"] > -REQUEST  # never more than one request over
    assert result.pool["depleted_time_total_ms"] > 0
    time.sleep(0.5)
    after = mf.scrape_pool(metrics_url)
    assert after["kafka_network_socketserver_memorypoolavailable"] == POOL
    assert after["kafka_network_socketserver_memorypoolused"] == 0
    assert after["kafka_network_socketserver_memorypooldepletedtimetotal"] > 0
    assert broker.alive()
    assert " ERROR " not in broker.log_text()


def test_same_flood_without_pool_grows_with_the_flood(broker_factory):
    broker = broker_factory({**BROKER, "queued.max.request.bytes": "-1"})
    result, run, _probe, _ = flood(
        broker, requests_per_conn=1, duration_s=60.0, metrics_url=None
    )
    assert_all_answered(run)
    # Every connection's body is allocated as soon as its size is read: the broker
    # holds up to 200 x 8 MiB at once. At least 1.5x the bounded run's whole bound.
    assert result.growth > 1.5 * BOUND, (
        f"RSS grew by only {result.growth / MiB:.0f} MiB without a pool"
    )
    assert broker.alive()
