"""Bytecodes per request of each purgatory design, by function: a cost that load cannot move.

Runs the simulated-clock worker of ``benchmarks/purgatory.py`` (the same workload, the
same code path) under ``sys.settrace`` with opcode events, and counts the bytecode
instructions CPython executes per request in each Python function.  Unlike timings, the
counts are exact and repeatable on a busy machine; unlike callgrind's machine
instructions they say *which* Python code the cost is in.  They leave out what runs in C
below a bytecode (``heapq``, list comprehensions' loops, allocation), so they understate
the old design's heap work; read them beside the callgrind table in docs/purgatory.md.

Usage::

    .venv/bin/python benchmarks/purgatory_opcodes.py                      # 4 points, both designs
    .venv/bin/python benchmarks/purgatory_opcodes.py --points low:10000 --top 12
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import purgatory as bench  # benchmarks/purgatory.py, beside this file

CASES = {"low": (60.0, 20.0), "high": (400.0, 200.0)}  # case -> (pct75, pct50) in ms


def count(design: str, case: str, rate: int, requests: int) -> collections.Counter:
    """Bytecodes executed per function while the simulated run handles ``requests``."""
    pct75, pct50 = CASES[case]
    params = {
        "simulated": True, "design": design, "case": case, "rate": rate,
        "requests": requests, "timeout_ms": 200, "pct75": pct75, "pct50": pct50,
        "keys": 3, "key_space": 100, "tick_ms": 1, "wheel_size": 20,
        "purge_interval": 1000, "seed": 20150402,
    }  # fmt: skip
    counts: collections.Counter = collections.Counter()

    def local(frame, event, arg):
        if event == "opcode":
            counts[frame.f_code.co_name] += 1
        return local

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        return local

    simulated_run = bench._simulated_run

    def traced(*args, **kwargs):
        sys.settrace(tracer)
        try:
            return simulated_run(*args, **kwargs)
        finally:
            sys.settrace(None)

    bench._simulated_run = traced
    try:
        bench.run_worker(params)
    finally:
        bench._simulated_run = simulated_run
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--points", default="low:10000,low:150000,high:10000,high:100000",
        help="case:rate pairs, comma separated (case: low or high)",
    )  # fmt: skip
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--top", type=int, default=8, help="functions listed per run")
    args = ap.parse_args(argv)
    print(f"bytecodes per request ({args.requests} requests per point, simulated clock)")
    for point in args.points.split(","):
        case, rate = point.split(":")
        runs = {d: count(d, case, int(rate), args.requests) for d in ("new", "old")}
        totals = {d: sum(c.values()) / args.requests for d, c in runs.items()}
        print(
            f"\n{case}-timeout {int(rate):,} req/s: new {totals['new']:.1f}, "
            f"old {totals['old']:.1f}, new/old {totals['new'] / totals['old']:.2f}"
        )
        for design, counts in runs.items():
            top = ", ".join(
                f"{name} {c / args.requests:.1f}" for name, c in counts.most_common(args.top)
            )
            print(f"  {design}: {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
