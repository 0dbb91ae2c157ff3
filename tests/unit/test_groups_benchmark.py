"""benchmarks/groups.py at a tiny size (3 members over 12 partitions), so it cannot rot:
both protocols form a group, take a member in, let one go, heartbeat steadily, on the
broker's core on fake time; the benchmark itself checks each stable group (every
partition owned by exactly one member). What is asserted here is what the protocols
decide, not how fast they are (speed lives in the benchmark)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_benchmark(name: str = "groups"):
    """``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_groups_benchmark_runs_at_a_tiny_size():
    bench = load_benchmark()
    results = bench.run_in_process([3], 1, partitions=12, heartbeat_calls=30, log=lambda _line: None)
    assert set(results) == {("classic", 3), ("consumer", 3)}
    classic, consumer = results["classic", 3][0], results["consumer", 3][0]
    for run in (classic, consumer):
        assert set(run.cases) == {"form", "join", "leave"}
        assert all(c.requests > 0 and c.cpu_ms > 0 for c in run.cases.values())
        assert run.heartbeat_us > 0 and run.request_us > 0
    # eager: every member gives up everything on a join or a leave; KIP-848 moves only
    # what changes hands (a newcomer takes a quarter of the partitions of 3 + 1 members)
    assert classic.cases["join"].revoked == classic.cases["leave"].revoked == 12
    assert consumer.cases["join"].revoked == 3
    # the newcomer owns its partitions once its second heartbeat is answered: two round
    # trips (1 ms each) and one heartbeat interval (5 s) after it joined
    assert consumer.cases["join"].fake_ms == 5000 + 2 * 1
    table = bench.table(results, partitions=12)
    assert "3 x 12 join" in table and "consumer" in table
    assert "< 50" in bench.heartbeat_table(results)
