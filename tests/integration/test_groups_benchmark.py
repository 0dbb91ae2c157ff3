"""benchmarks/groups.py's end-to-end rows against a real broker, at a tiny size (so the
raw requests it sends keep matching what the broker answers)."""

from __future__ import annotations

from tests.unit.test_groups_benchmark import load_benchmark


def test_groups_benchmark_end_to_end(broker):
    bench = load_benchmark()
    rows = bench.end_to_end(broker.bootstrap, broker.pid, requests=20, partitions=8)
    assert set(rows) == {"ApiVersions v3", "Heartbeat v4 (classic)", "ConsumerGroupHeartbeat v1"}
    for row in rows.values():
        assert row["per_s"] > 0 and row["cpu_us"] is not None
