"""Purgatory enqueue benchmark: the timing-wheel purgatory against Kafka 0.8's design.

Reproduces the experiment of the seed blog post / Kafka's ``TestPurgatoryPerformance``
for both designs in one run:

* requests arrive as a Poisson process at a target rate (exponential inter-arrival
  times); each watches 3 keys drawn from a key space of 100 and has a 200 ms timeout;
* each request gets a completion latency from a log-normal distribution with
  ``mu = ln(pct50)`` and ``sigma = (ln(pct75) - mu) / 0.674490``; a request whose latency
  is under the timeout is completed (``force_complete``) at enqueue time + latency by
  the driver, the others expire in the purgatory;
* tick 1 ms, wheel size 20, purge interval 1000 for both designs;
* low-timeout case pct75=60 ms, pct50=20 ms; high-timeout case pct75=400, pct50=200.

The target rate is swept upward.  Every (case, design, rate) point runs in a fresh
subprocess, so peak RSS is that design's alone.  The subprocess runs a real-time loop on
``time.monotonic``: it enqueues requests whose arrival time has come, completes the ones
whose completion time has come, calls ``advance_clock`` and sleeps until the next event
(next arrival, next completion, or the timer's next non-empty bucket).  When a design
cannot keep up the loop falls behind and the achieved enqueue rate drops below the
target: that is its saturation.  CPU seconds are the process's CPU time for the whole run
(enqueue phase plus draining the last requests), so at a rate both designs sustain they
compare the cost of the same work.  Memory is reported as peak RSS (what the issue asks
for; dominated by the interpreter's ~19 MB) and as peak live allocations above the
start (``sys.getallocatedblocks``), which shows the designs' difference without page
and arena rounding.

Then the same sweep runs on a simulated millisecond clock, as fast as the CPU allows:
the CPU cost per request at each rate, nearly independent of whatever else the machine
is doing.  ``1e6 / cost`` is what one core could sustain; where it crosses the rate is a
load-independent saturation estimate.  On a shared machine trust that one for ratios.

With ``--repeat N`` every point runs N times and each metric keeps its best value (other
processes only ever make a run slower or bigger).

Usage::

    .venv/bin/python benchmarks/purgatory.py                 # a few minutes
    .venv/bin/python benchmarks/purgatory.py --requests 1000000   # the seed's size
    .venv/bin/python benchmarks/purgatory.py --rates 20000,60000 --cases high

Writes ``benchmarks/out/purgatory-results.json`` and ``benchmarks/out/purgatory.png``
(``--copy-chart docs/purgatory-benchmark.png`` also copies the chart there).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = REPO_ROOT / "benchmarks" / "out"

CASES = {
    # name: (pct75 ms, pct50 ms)
    "low": (60.0, 20.0),
    "high": (400.0, 200.0),
}
CASE_TITLES = {
    "low": "low timeout rate (pct75=60 ms, pct50=20 ms)",
    "high": "high timeout rate (pct75=400 ms, pct50=200 ms)",
}
DESIGNS = ("new", "old")
DESIGN_LABELS = {"new": "timing wheels (new)", "old": "0.8 delay queue (old)"}
DEFAULT_RATES = (10_000, 25_000, 40_000, 55_000, 70_000, 85_000, 100_000, 115_000,
                 130_000, 150_000, 175_000, 200_000)
SUSTAINED = 0.95  # a rate is sustained when achieved >= 95% of target

# sample pools, indexed cyclically (Kafka's benchmark draws from 1M-sample pools); the
# sizes are co-prime so that (interval, latency, keys) combinations do not repeat
INTERVAL_POOL = 65_536
LATENCY_POOL = 65_521
KEY_POOL = 8_191
MAX_BATCH = 512  # arrivals handled per loop turn before completions and the timer
MIN_SLEEP_S = 0.001  # never sleep for less than 1 ms: batch sub-millisecond arrivals


# --------------------------------------------------------------------------------------
# worker: one design at one rate, in its own process
# --------------------------------------------------------------------------------------


def _rss_kb_now() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_worker(p: dict) -> dict:
    if str(REPO_ROOT / "src") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "src"))
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    from old_purgatory import OldDelayedOperation, RequestPurgatory  # beside this file

    from tidegate.clock import SYSTEM_CLOCK, Clock, MonotonicMs
    from tidegate.server.purgatory import DelayedOperation, DelayedOperationPurgatory
    from tidegate.server.timer import SystemTimer

    design = p["design"]
    n = p["requests"]
    rate = p["rate"]
    timeout = p["timeout_ms"]
    rng = random.Random(p["seed"])

    # -- samples (outside the measurement, as in Kafka's benchmark) --
    lam = rate / 1000.0  # arrivals per ms
    intervals = [rng.expovariate(lam) for _ in range(INTERVAL_POOL)]
    mu = math.log(p["pct50"])
    sigma = (math.log(p["pct75"]) - mu) / 0.674490
    latencies = [int(rng.lognormvariate(mu, sigma)) for _ in range(LATENCY_POOL)]
    key_space = [f"fakeKey{i}" for i in range(p["key_space"])]
    key_sets = [tuple(rng.sample(key_space, p["keys"])) for _ in range(KEY_POOL)]

    class Latch:
        __slots__ = ("count",)

    latch = Latch()
    latch.count = n

    simulated = p.get("simulated", False)
    if simulated:

        class SimulatedClock(Clock):
            __slots__ = ("now",)

            def milliseconds(self) -> MonotonicMs:
                return MonotonicMs(self.now)

        clock: Clock = SimulatedClock()
        clock.now = 0
    else:
        clock = SYSTEM_CLOCK

    if design == "new":

        class FakeOperation(DelayedOperation):
            __slots__ = ()

            def try_complete(self) -> bool:
                return False  # completed by the driver (force_complete) or expiry

            def on_complete(self) -> None:
                latch.count -= 1

        timer = SystemTimer(p["tick_ms"], p["wheel_size"], clock=clock)
        purgatory = DelayedOperationPurgatory("fake", timer, purge_interval=p["purge_interval"])
        next_expiration = timer.next_expiration_ms
    else:

        class FakeOperation(OldDelayedOperation):  # type: ignore[no-redef]
            __slots__ = ()

            def try_complete(self) -> bool:
                return False

            def on_complete(self) -> None:
                latch.count -= 1

        purgatory = RequestPurgatory("fake", clock, purge_interval=p["purge_interval"])
        next_expiration = purgatory.next_expiration_ms

    try_complete_else_watch = purgatory.try_complete_else_watch
    advance_clock = purgatory.advance_clock
    if simulated:
        return _simulated_run(p, purgatory, FakeOperation, clock, latch, intervals, latencies,
                              key_sets)
    monotonic = time.monotonic
    sleep = time.sleep

    heappush = heapq.heappush
    heappop = heapq.heappop
    getallocatedblocks = sys.getallocatedblocks
    baseline_rss_kb = _rss_kb_now()
    baseline_blocks = peak_blocks = getallocatedblocks()
    completions: dict[int, list] = {}  # completion millisecond -> operations
    completion_due: list[int] = []  # heap of the milliseconds in ``completions``
    peak_watched = 0
    peak_delayed = 0
    loops = 0
    sleeps = 0

    cpu0 = time.process_time()
    t0 = monotonic()
    t0_ms_abs = t0 * 1000.0
    arrival = intervals[0]  # ms since t0
    i = 0
    enqueue_end = None
    enqueue_cpu = None
    sample_at = 100.0
    while True:
        loops += 1
        now = (monotonic() - t0) * 1000.0
        # -- arrivals that are due (at most MAX_BATCH per turn) --
        if i < n and arrival <= now:
            inow = int(now)
            stop = min(n, i + MAX_BATCH)
            while i < stop and arrival <= now:
                op = FakeOperation(timeout)
                try_complete_else_watch(op, key_sets[i % KEY_POOL])
                latency = latencies[i % LATENCY_POOL]
                if latency < timeout:
                    due = inow + latency
                    bucket = completions.get(due)
                    if bucket is None:
                        completions[due] = [op]
                        heappush(completion_due, due)
                    else:
                        bucket.append(op)
                i += 1
                arrival += intervals[i % INTERVAL_POOL]
            if i == n:
                enqueue_end = now
                enqueue_cpu = time.process_time() - cpu0
        # -- completions that are due --
        inow = int(now)
        while completion_due and completion_due[0] <= inow:
            for op in completions.pop(heappop(completion_due)):
                op.force_complete()
        # -- the reaper --
        advance_clock()
        if now >= sample_at:
            sample_at = now + 100.0
            w = purgatory.watched
            d = purgatory.delayed
            peak_watched = max(peak_watched, w)
            peak_delayed = max(peak_delayed, d)
            peak_blocks = max(peak_blocks, getallocatedblocks())
        if i >= n and latch.count <= 0:
            break
        # -- sleep until the next event, unless behind --
        now = (monotonic() - t0) * 1000.0
        if i < n and arrival <= now:
            continue
        wake = arrival if i < n else math.inf
        if completion_due:
            wake = min(wake, float(completion_due[0]))
        exp = next_expiration()
        if exp is not None:
            wake = min(wake, exp - t0_ms_abs)
        if wake == math.inf:
            wake = now + 1.0  # nothing scheduled yet (cannot happen with latch > 0)
        delay_s = (wake - now) / 1000.0
        if delay_s > 0:
            sleeps += 1
            sleep(max(delay_s, MIN_SLEEP_S))
    elapsed_ms = (monotonic() - t0) * 1000.0
    cpu = time.process_time() - cpu0
    peak_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if enqueue_end is None:
        enqueue_end = elapsed_ms
        enqueue_cpu = cpu
    arrivals_span = sum(intervals[j % INTERVAL_POOL] for j in range(n))
    return {
        "design": design,
        "case": p["case"],
        "requests": n,
        "target_rate": rate,
        "scheduled_rate": n * 1000.0 / arrivals_span,
        "achieved_rate": n * 1000.0 / enqueue_end,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu * 1e6 / n,
        "elapsed_s": elapsed_ms / 1000.0,
        # share of a CPU the process got while enqueuing: ~1.0 when it is saturated on
        # a quiet machine; well below 1.0 while behind means other processes took the CPU
        "enqueue_utilization": enqueue_cpu * 1000.0 / enqueue_end,
        "peak_rss_mb": peak_rss_kb / 1024.0,
        "baseline_rss_mb": baseline_rss_kb / 1024.0,
        # live allocations (pymalloc blocks) above the start, sampled every 100 ms: a
        # memory measure that, unlike RSS, is not rounded up to pages and arenas
        "peak_blocks_over_baseline": peak_blocks - baseline_blocks,
        "peak_watched": peak_watched,
        "peak_delayed": peak_delayed,
        "expired": purgatory.expirations_total,
        "purges": purgatory.purges_total,
        "loops": loops,
        "sleeps": sleeps,
    }


def _simulated_run(p, purgatory, FakeOperation, clock, latch, intervals, latencies,
                   key_sets) -> dict:
    """The same workload on a simulated millisecond clock, as fast as the CPU allows.

    Nothing sleeps and nothing else on the machine changes the result much: it measures
    the CPU cost per request at this arrival rate (which grows with the rate, since the
    purgatory holds more requests).  1e6 / cost is what one core could sustain if that
    cost held; a design saturates where that capacity falls below the rate.
    """
    n = p["requests"]
    timeout = p["timeout_ms"]
    try_complete_else_watch = purgatory.try_complete_else_watch
    advance_clock = purgatory.advance_clock
    completions: dict[int, list] = {}
    baseline_blocks = peak_blocks = sys.getallocatedblocks()
    peak_watched = 0
    cpu0 = time.process_time()
    t = 0
    arrival = intervals[0]
    i = 0
    while i < n or latch.count > 0:
        clock.now = t
        end = t + 1
        while i < n and arrival < end:
            op = FakeOperation(timeout)
            try_complete_else_watch(op, key_sets[i % KEY_POOL])
            latency = latencies[i % LATENCY_POOL]
            if latency < timeout:
                due = t + latency
                bucket = completions.get(due)
                if bucket is None:
                    completions[due] = [op]
                else:
                    bucket.append(op)
            i += 1
            arrival += intervals[i % INTERVAL_POOL]
        bucket = completions.pop(t, None)
        if bucket is not None:
            for op in bucket:
                op.force_complete()
        advance_clock()
        if t % 100 == 0:
            peak_watched = max(peak_watched, purgatory.watched)
            peak_blocks = max(peak_blocks, sys.getallocatedblocks())
        t = end
    cpu = time.process_time() - cpu0
    return {
        "design": p["design"],
        "case": p["case"],
        "requests": n,
        "target_rate": p["rate"],
        "simulated_ms": t,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu * 1e6 / n,
        "one_core_capacity": n / cpu,
        "peak_blocks_over_baseline": peak_blocks - baseline_blocks,
        "peak_watched": peak_watched,
        "expired": purgatory.expirations_total,
        "purges": purgatory.purges_total,
    }


# --------------------------------------------------------------------------------------
# driver: the sweep, the table, the chart
# --------------------------------------------------------------------------------------


def spawn_point(
    args: argparse.Namespace, case: str, design: str, rate: int, simulated: bool = False
) -> dict:
    pct75, pct50 = CASES[case]
    params = {
        "simulated": simulated,
        "design": design,
        "case": case,
        "rate": rate,
        "requests": args.requests,
        "timeout_ms": args.timeout,
        "pct75": pct75,
        "pct50": pct50,
        "keys": args.keys,
        "key_space": args.key_space,
        "tick_ms": args.tick,
        "wheel_size": args.wheel_size,
        "purge_interval": args.purge_interval,
        "seed": args.seed,
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(params)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({case}/{design}/{rate}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best_of(runs: list[dict]) -> dict:
    """Combine repeated runs of one point, metric by metric: other processes on the
    machine only ever make a run slower or costlier, so the best value of each metric is
    the least disturbed one (highest achieved rate, least CPU, least memory)."""
    r = dict(max(runs, key=lambda x: x["achieved_rate"]))
    cheapest = min(runs, key=lambda x: x["cpu_s"])
    for k in ("cpu_s", "cpu_us_per_request"):
        r[k] = cheapest[k]
    for k in ("peak_rss_mb", "peak_blocks_over_baseline"):
        r[k] = min(x[k] for x in runs)
    r["baseline_rss_mb"] = min(runs, key=lambda x: x["peak_rss_mb"])["baseline_rss_mb"]
    r["repeats"] = len(runs)
    return r


def sustained(r: dict) -> bool:
    return r["achieved_rate"] >= SUSTAINED * r["target_rate"]


def fmt_row(r: dict) -> str:
    mark = "" if sustained(r) else "  saturated"
    return (
        f"{r['case']:>4}  {r['design']:>3}  {r['target_rate']:>8,.0f}  {r['achieved_rate']:>8,.0f}"
        f"  {r['cpu_s']:>6.2f}  {r['cpu_us_per_request']:>6.2f}  {r['enqueue_utilization']:>4.0%}"
        f"  {r['peak_rss_mb']:>7.1f}  {r['peak_rss_mb'] - r['baseline_rss_mb']:>6.1f}"
        f"  {r['peak_blocks_over_baseline'] / 1000:>7.1f}"
        f"  {r['peak_watched']:>7,}  {r['expired'] / r['requests']:>4.0%}  {r['purges']:>5,}{mark}"
    )


HEADER = (
    "case  des    target  achieved   cpu s  us/req  util  peakRSS  RSS+MB  allocs   watched"
    "  expd  purges\n"
    "                req/s     req/s                           MB      MB   k live     peak"
)


def saturation(rows: list[dict]) -> tuple[float, float | None]:
    """(peak achieved enqueue rate, highest target rate sustained)."""
    peak = max(r["achieved_rate"] for r in rows)
    ok = [r["target_rate"] for r in rows if sustained(r)]
    return peak, (max(ok) if ok else None)


def summarize(results: list[dict], cases: list[str]) -> list[str]:
    lines = []
    for case in cases:
        by = {d: [r for r in results if r["case"] == case and r["design"] == d] for d in DESIGNS}
        if not all(by.values()):
            continue
        sat = {d: saturation(by[d]) for d in DESIGNS}
        lines.append(f"{CASE_TITLES[case]}:")
        for d in DESIGNS:
            peak, sus = sat[d]
            sus_txt = f"{sus:,.0f}" if sus is not None else "none"
            lines.append(
                f"  {DESIGN_LABELS[d]:<24} saturation {peak:>9,.0f} req/s (peak achieved);"
                f" highest target sustained within {SUSTAINED:.0%}: {sus_txt}"
            )
        lines.append(f"  saturation ratio new/old: {sat['new'][0] / sat['old'][0]:.2f}x")
        # the machine-load independent view: requests per CPU-second while enqueuing at
        # each design's highest rate (achieved rate / share of a CPU it got)
        cap = {d: max(by[d], key=lambda r: r["target_rate"]) for d in DESIGNS}
        cap_rate = {d: cap[d]["achieved_rate"] / max(cap[d]["enqueue_utilization"], 1e-9)
                    for d in DESIGNS}
        lines.append(
            f"  requests per CPU-second at the top rate: new {cap_rate['new']:,.0f},"
            f" old {cap_rate['old']:,.0f} ({cap_rate['new'] / cap_rate['old']:.2f}x)"
        )
        new_at = {r["target_rate"]: r for r in by["new"] if sustained(r)}
        old_at = {r["target_rate"]: r for r in by["old"] if sustained(r)}
        both = sorted(set(new_at) & set(old_at))
        if both:
            cpu_ratios = [old_at[rt]["cpu_s"] / new_at[rt]["cpu_s"] for rt in both]
            rss = [(new_at[rt]["peak_rss_mb"], old_at[rt]["peak_rss_mb"]) for rt in both]
            blocks = [
                old_at[rt]["peak_blocks_over_baseline"]
                / max(new_at[rt]["peak_blocks_over_baseline"], 1)
                for rt in both
            ]
            cpu_less = sum(1 for x in cpu_ratios if x > 1.0)
            rss_less = sum(1 for a, b in rss if a < b)
            blocks_less = sum(1 for x in blocks if x > 1.0)
            lines.append(
                f"  at the {len(both)} target rates both sustain ({', '.join(f'{x:,}' for x in both)}):"
            )
            lines.append(
                f"    CPU old/new {min(cpu_ratios):.2f}x .. {max(cpu_ratios):.2f}x;"
                f" new uses less CPU at {cpu_less} of {len(both)}"
            )
            lines.append(
                f"    peak RSS new-old {min(a - b for a, b in rss):+.1f} .. "
                f"{max(a - b for a, b in rss):+.1f} MB; new uses less at {rss_less} of {len(both)}"
            )
            lines.append(
                f"    peak live allocations old/new {min(blocks):.2f}x .. {max(blocks):.2f}x;"
                f" new holds fewer at {blocks_less} of {len(both)}"
            )
    return lines


SIM_HEADER = "case  des      rate  cpu us/req  one-core req/s  allocs k  watched  purges"


def fmt_sim_row(r: dict) -> str:
    return (
        f"{r['case']:>4}  {r['design']:>3}  {r['target_rate']:>8,.0f}  {r['cpu_us_per_request']:>10.2f}"
        f"  {r['one_core_capacity']:>14,.0f}  {r['peak_blocks_over_baseline'] / 1000:>8.1f}"
        f"  {r['peak_watched']:>7,}  {r['purges']:>6,}"
    )


def one_core_saturation(rows: list[dict]) -> float | None:
    """The rate at which one core's capacity (1e6 / cost per request, measured at that
    rate) falls to the rate itself, interpolated between swept rates; None if the
    capacity stays above every swept rate."""
    pts = sorted((r["target_rate"], r["one_core_capacity"]) for r in rows)
    prev = None
    for rate, cap in pts:
        if cap < rate:
            if prev is None:
                return cap
            r0, c0 = prev
            # capacity - rate changes sign between r0 and rate: linear interpolation
            d0, d1 = c0 - r0, cap - rate
            return r0 + (rate - r0) * d0 / (d0 - d1)
        prev = (rate, cap)
    return None


def summarize_simulated(rows: list[dict], cases: list[str]) -> list[str]:
    lines = []
    for case in cases:
        by = {d: [r for r in rows if r["case"] == case and r["design"] == d] for d in DESIGNS}
        if not all(by.values()):
            continue
        lines.append(f"{CASE_TITLES[case]}, simulated clock:")
        sat = {}
        for d in DESIGNS:
            sat[d] = one_core_saturation(by[d])
            top = max(r["target_rate"] for r in by[d])
            txt = f"{sat[d]:,.0f} req/s" if sat[d] is not None else f"above {top:,} req/s"
            lines.append(f"  {DESIGN_LABELS[d]:<24} one-core saturation {txt}")
        if sat["new"] is not None and sat["old"] is not None:
            lines.append(f"  one-core saturation ratio new/old: {sat['new'] / sat['old']:.2f}x")
        old_at = {r["target_rate"]: r for r in by["old"]}
        ratios = [
            (r["target_rate"], old_at[r["target_rate"]]["cpu_s"] / r["cpu_s"])
            for r in by["new"]
            if r["target_rate"] in old_at
        ]
        cheaper = [rt for rt, x in ratios if x > 1.0]
        lines.append(
            "  CPU old/new by rate: "
            + ", ".join(f"{rt // 1000}k {x:.2f}x" for rt, x in ratios)
            + f"; new cheaper at {len(cheaper)} of {len(ratios)}"
        )
    return lines


def draw_chart(
    results: list[dict],
    cases: list[str],
    path: Path,
    requests: int,
    simulated: list[dict] | None = None,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    cases = [c for c in cases if any(r["case"] == c for r in results)]
    ncols = 4 if simulated else 3
    fig, axes = plt.subplots(
        len(cases), ncols, figsize=(5 * ncols, 4.6 * len(cases)), squeeze=False
    )
    styles = {"new": ("tab:blue", "o"), "old": ("tab:red", "s")}
    for row, case in enumerate(cases):
        for d in DESIGNS:
            pts = sorted(
                (r for r in results if r["case"] == case and r["design"] == d),
                key=lambda r: r["target_rate"],
            )
            if not pts:
                continue
            color, marker = styles[d]
            xs = [r["target_rate"] for r in pts]
            kw = {"color": color, "marker": marker, "label": DESIGN_LABELS[d]}
            axes[row][0].plot(xs, [r["achieved_rate"] for r in pts], **kw)
            axes[row][1].plot(xs, [r["cpu_s"] for r in pts], **kw)
            axes[row][2].plot(xs, [r["peak_blocks_over_baseline"] / 1000 for r in pts], **kw)
            sim = sorted(
                (r for r in simulated or () if r["case"] == case and r["design"] == d),
                key=lambda r: r["target_rate"],
            )
            if sim:
                axes[row][3].plot(
                    [r["target_rate"] for r in sim], [r["cpu_us_per_request"] for r in sim], **kw
                )
        top = max(r["target_rate"] for r in results if r["case"] == case)
        axes[row][0].plot([0, top], [0, top], color="grey", linestyle=":", label="target")
        titles = (
            "enqueue rate achieved (req/s)",
            f"CPU seconds per run of {requests:,} requests",
            "peak live allocations above start (thousands)",
            "CPU us per request, simulated clock",
        )[:ncols]
        kfmt = FuncFormatter(lambda v, _pos: f"{v / 1000:.0f}k")
        for col, title in enumerate(titles):
            ax = axes[row][col]
            ax.set_title(f"{title}\n{CASE_TITLES[case]}", fontsize=10)
            ax.set_xlabel("target rate (req/s)")
            ax.xaxis.set_major_formatter(kfmt)
            if col == 0:
                ax.yaxis.set_major_formatter(kfmt)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
    fig.suptitle(
        f"Purgatory enqueue benchmark, {requests:,} requests per point, timeout 200 ms, "
        "tick 1 ms, wheel 20, 3 keys of 100 (Python "
        f"{sys.version_info.major}.{sys.version_info.minor}, {os.cpu_count()} CPUs)",
        fontsize=11,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=100_000, help="requests per point")
    ap.add_argument("--rates", default=",".join(str(r) for r in DEFAULT_RATES),
                    help="comma-separated target rates (req/s), swept upward")
    ap.add_argument("--cases", default="low,high", help="low, high or both")
    ap.add_argument("--designs", default="new,old")
    ap.add_argument("--timeout", type=int, default=200, help="request timeout (ms)")
    ap.add_argument("--keys", type=int, default=3, help="keys per request")
    ap.add_argument("--key-space", type=int, default=100)
    ap.add_argument("--tick", type=int, default=1, help="tick (ms) of the new design")
    ap.add_argument("--wheel-size", type=int, default=20)
    ap.add_argument("--purge-interval", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20150402)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per point; the least disturbed (highest achieved rate) is kept")
    ap.add_argument("--stop-after", type=int, default=2,
                    help="stop a design's sweep after this many saturated rates in a row")
    ap.add_argument("--no-simulated", action="store_true",
                    help="skip the simulated-clock sweep (CPU cost per request)")
    ap.add_argument("--no-realtime", action="store_true",
                    help="skip the real-time sweep (only the simulated one)")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--copy-chart", type=Path, help="also copy the chart to this path")
    ap.add_argument("--plot-only", type=Path, help="redraw the chart from a results JSON")
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    rates = sorted(int(r) for r in args.rates.split(","))
    chart = args.out / "purgatory.png"
    if args.plot_only:
        data = json.loads(args.plot_only.read_text())
        draw_chart(data["results"], cases, chart, data["requests"], data.get("simulated", []))
        print(f"chart: {chart}")
        return 0

    print(f"# {args.requests:,} requests per point; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    print(HEADER)
    results: list[dict] = []
    started = time.monotonic()
    for case in cases if not args.no_realtime else ():
        for design in designs:
            saturated_in_a_row = 0
            for rate in rates:
                runs = [spawn_point(args, case, design, rate) for _ in range(args.repeat)]
                r = best_of(runs)
                results.append(r)
                print(fmt_row(r), flush=True)
                if not sustained(r):
                    saturated_in_a_row += 1
                    if saturated_in_a_row >= args.stop_after:
                        break
                else:
                    saturated_in_a_row = 0
    simulated: list[dict] = []
    if not args.no_simulated:
        print("\n# the same workload on a simulated clock: CPU cost per request at each rate")
        print(SIM_HEADER)
        for case in cases:
            for design in designs:
                for rate in rates:
                    runs = [
                        spawn_point(args, case, design, rate, simulated=True)
                        for _ in range(args.repeat)
                    ]
                    r = min(runs, key=lambda x: x["cpu_s"])
                    simulated.append(r)
                    print(fmt_sim_row(r), flush=True)
    print()
    for line in summarize(results, cases):
        print(line)
    for line in summarize_simulated(simulated, cases):
        print(line)
    print(f"\n# total {time.monotonic() - started:.0f} s; load average now "
          f"{os.getloadavg()[0]:.2f}")

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "purgatory-results.json").write_text(
        json.dumps(
            {"requests": args.requests, "results": results, "simulated": simulated}, indent=1
        )
    )
    if not results:
        return 0
    draw_chart(results, cases, chart, args.requests, simulated)
    print(f"chart: {chart}")
    if args.copy_chart:
        args.copy_chart.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(chart, args.copy_chart)
        print(f"copied to {args.copy_chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
