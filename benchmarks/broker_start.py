"""Broker start to first accepted connection: tidegate.testing.Broker in this process
(its own thread and event loop) against a subprocess broker (``python -m tidegate
serve``), each on a fresh temporary data directory.

Each run times ``Broker(...).start()`` up to the moment a TCP connection to its
PLAINTEXT listener is accepted; the broker is then stopped (not timed). The
in-process runs happen after tidegate is imported (a test session pays the import
once; it is printed on its own line); a subprocess pays interpreter start and the
import on every start, which is what its column shows.

Usage::

    .venv/bin/python benchmarks/broker_start.py            # 20 runs each
    .venv/bin/python benchmarks/broker_start.py --runs 50
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from _common import format_table, git_describe, percentile


def one_start(mode: str) -> float:
    from tidegate.testing import Broker

    broker = Broker(mode=mode)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    broker.start()
    try:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10):
            return time.perf_counter() - t0
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="starts per mode (default 20)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    import tidegate.server.broker
    import tidegate.testing  # noqa: F401

    import_s = time.perf_counter() - t0
    rows = []
    for mode in ("inprocess", "subprocess"):
        one_start(mode)  # warm-up: file-system caches, first-use imports
        times = sorted(one_start(mode) for _ in range(args.runs))
        rows.append([
            mode,
            str(args.runs),
            f"{statistics.median(times) * 1000:.0f}",
            f"{percentile(times, 90) * 1000:.0f}",  # type: ignore[operator]
            f"{times[0] * 1000:.0f}",
            f"{times[-1] * 1000:.0f}",
            f"{statistics.pstdev(times) * 1000:.0f}",
        ])
    print(f"tidegate {git_describe() or '?'}; broker start to first accepted connection; "
          f"importing tidegate in-process took {import_s * 1000:.0f} ms (once per session)")
    print(format_table(["mode", "runs", "p50 ms", "p90 ms", "min ms", "max ms", "stdev ms"], rows))


if __name__ == "__main__":
    main()
