"""benchmarks/share_groups.py's lock-expiry precision run at a tiny size, on the real clock
(its acquisitions and redeliveries keep matching what the share-partition manager does)."""

from __future__ import annotations

import pytest

from tests.unit.test_groups_benchmark import load_benchmark


def test_lock_expiry_precision_run_redelivers_every_record(tmp_path):
    bench = load_benchmark("share_groups")
    result = bench.run_precision(tmp_path, 5_000, 200, 500)
    assert (result["records"], result["locks"]) == (5_000, 10)
    assert result["p50_ms"] >= 0 and result["timer_p50_ms"] >= 0  # never before the lock's deadline


def test_lock_expiry_precision_refuses_a_size_it_cannot_write(tmp_path):
    bench = load_benchmark("share_groups")
    with pytest.raises(ValueError, match="multiple of 10 partitions x 500"):
        bench.run_precision(tmp_path, 2_000, 200, 500)
