#!/usr/bin/env python3
"""KIP-1332: buffer memory of tidegate's producer under ``full`` and ``incremental``.

Workload ``mixed`` (the seed's): one producer, ``batch.size`` = 4 MiB, sending
keyless records at high volume to topic A (sticky partitioning) and keyed records
with high-cardinality keys at low volume to a 1000-partition topic B, for a fixed
time, flat out from one thread. Under ``full`` every partition of B that receives a
record reserves a whole 4 MiB batch; under ``incremental`` it reserves the 16 KiB
chunks its data needs.

Workload ``mixed-small``: the same with ``buffer.memory`` = 128 MiB and
``max.block.ms`` = 200: far below the ~4 GiB ``full`` would need, so ``full``
blocks and drops records (buffer-exhausted) while ``incremental`` does not.

Workload ``fill``: every partition fills its batch (keyed records spread over a few
partitions of topic C, batch.size small enough to fill before linger.ms): both
strategies converge to about one batch.size per active partition.

Each case runs against a fresh tidegate broker (``--spawn-tidegate``, the default)
or a given ``--bootstrap``, each strategy ``--repeat`` times alternately. A sampler
thread records every 10 ms the pool reservation (``buffer.memory`` minus available:
what buffers and chunks hold) and the bytes actually in open or in-flight batches.
Printed per case: peak and mean reservation, peak and mean bytes buffered, the
buffer-exhausted count, hot-topic (A) and total records/s, and the ratios
incremental/full; the reservation over time of one run of each strategy is drawn
to ``docs/producer-memory.png``.

    python benchmarks/producer_memory.py                      # both workloads, spawned broker
    python benchmarks/producer_memory.py --bootstrap 127.0.0.1:9092 --duration 10
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

from tidegate.client import KafkaClient
from tidegate.producer import Producer

MiB = 1024 * 1024
STRATEGIES = ("full", "incremental")
WORKLOADS = ("mixed", "mixed-small", "fill")


@dataclass
class Result:
    workload: str
    strategy: str
    run: int
    buffer_memory: int
    batch_size: int
    linger_ms: int
    duration_s: float
    hot_records: int
    cold_records: int
    hot_rps: float
    total_rps: float
    peak_reserved: int
    mean_reserved: float
    peak_buffered: int
    mean_buffered: float
    exhausted: int
    wait_s: float
    failed: int
    samples: list[tuple[float, int, int]] = field(default_factory=list, repr=False)


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    with KafkaClient(bootstrap, request_timeout_ms=60_000) as c:
        r = c.request(
            19,
            {
                "topics": [
                    {"name": t, "num_partitions": n, "replication_factor": 1}
                    for t, n in topics.items()
                ],
                "timeout": 60_000,
            },
            timeout_ms=90_000,
        )
        for t in r.topics:
            if int(t.error_code) not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"create {t.name}: error {int(t.error_code)}")


class Sampler(threading.Thread):
    def __init__(self, producer: Producer, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.p = producer
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []
        self._halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        pool, acc = self.p.pool, self.p.accumulator
        while not self._halt.is_set():
            self.samples.append(
                (time.monotonic() - self.t0, pool.reserved_memory(), acc.buffered_bytes())
            )
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def run_case(
    bootstrap: str,
    workload: str,
    strategy: str,
    run: int,
    args: argparse.Namespace,
    topics: dict[str, str],
) -> Result:
    memory = args.buffer_memory
    if workload.startswith("mixed"):
        batch_size, linger = args.batch_size, args.linger_ms
        if workload == "mixed-small":
            memory = args.small_buffer_memory
    else:
        batch_size, linger = args.fill_batch_size, args.linger_ms
    conf = {
        "bootstrap.servers": bootstrap,
        "batch.size": batch_size,
        "linger.ms": linger,
        "buffer.memory": memory,
        "max.block.ms": args.small_max_block_ms if workload == "mixed-small" else args.max_block_ms,
        "max.request.size": args.max_request_size,
        "buffer.memory.allocation.strategy": strategy,
        "client.id": f"mem-{strategy}",
    }
    p = Producer(conf)
    rnd = random.Random(run)
    value = bytes(rnd.randrange(256) for _ in range(args.value_size))
    mixed = workload.startswith("mixed")
    hot, cold = topics["A"], topics["B"] if mixed else topics["C"]
    # warm up metadata for both topics
    p.send(hot, value).result(30)
    p.send(cold, value, key=b"warm").result(30)
    sampler = Sampler(p)
    sampler.start()
    hot_n = cold_n = failed = 0
    every = args.cold_every
    keys = [b"user-%d" % i for i in range(100_000)]
    t0 = time.monotonic()
    deadline = t0 + args.duration
    send = p.send
    i = 0
    if mixed:
        while True:
            if i % 256 == 0 and time.monotonic() >= deadline:
                break
            i += 1
            if i % every == 0:
                f = send(cold, value, key=keys[rnd.randrange(100_000)])
                cold_n += 1
            else:
                f = send(hot, value)
                hot_n += 1
            if f.done() and f.exception(0) is not None:
                failed += 1
    else:
        nkeys = keys[: args.fill_partitions * 50]
        while True:
            if i % 256 == 0 and time.monotonic() >= deadline:
                break
            i += 1
            f = send(cold, value, key=nkeys[i % len(nkeys)])
            cold_n += 1
            if f.done() and f.exception(0) is not None:
                failed += 1
    left = p.flush(120)
    elapsed = time.monotonic() - t0
    sampler.stop()
    m = p.metrics()
    p.close(30)
    samples = sampler.samples
    res = [s[1] for s in samples] or [0]
    buf = [s[2] for s in samples] or [0]
    n_hot = hot_n if mixed else cold_n
    return Result(
        workload,
        strategy,
        run,
        memory,
        batch_size,
        linger,
        elapsed,
        hot_n,
        cold_n,
        n_hot / elapsed,
        (hot_n + cold_n) / elapsed,
        max(res),
        statistics.fmean(res),
        max(buf),
        statistics.fmean(buf),
        int(m["buffer-exhausted-total"]),
        m["bufferpool-wait-time-ns-total"] / 1e9,
        failed + left,
        samples,
    )


def mib(n: float) -> str:
    return f"{n / MiB:,.1f}"


def human(n: float) -> str:
    return f"{n / MiB:,.0f} MiB" if n >= MiB else f"{n / 1024:,.0f} KiB"


def args_duration(rs: list[Result]) -> float:
    """Median wall time of the runs (sending time plus the final flush)."""
    return statistics.median(r.duration_s for r in rs)


def summarize(results: list[Result]) -> str:
    out = []
    for workload in WORKLOADS:
        rs = [r for r in results if r.workload == workload]
        if not rs:
            continue
        rows = []
        med = {}
        for strategy in STRATEGIES:
            sr = [r for r in rs if r.strategy == strategy]
            if not sr:
                continue
            med[strategy] = {
                "peak": statistics.median(r.peak_reserved for r in sr),
                "mean": statistics.median(r.mean_reserved for r in sr),
                "pbuf": statistics.median(r.peak_buffered for r in sr),
                "mbuf": statistics.median(r.mean_buffered for r in sr),
                "hot": statistics.median(r.hot_rps for r in sr),
                "tot": statistics.median(r.total_rps for r in sr),
                "exh": sum(r.exhausted for r in sr),
            }
            for r in sr:
                rows.append(
                    [
                        f"{strategy} #{r.run}",
                        mib(r.peak_reserved),
                        mib(r.mean_reserved),
                        mib(r.peak_buffered),
                        mib(r.mean_buffered),
                        str(r.exhausted),
                        f"{r.wait_s:.2f}",
                        f"{r.hot_rps:,.0f}",
                        f"{r.total_rps:,.0f}",
                    ]
                )
        b = rs[0]
        out.append(
            f"== workload {workload}: batch.size {human(b.batch_size)}, buffer.memory "
            f"{human(b.buffer_memory)}, linger.ms {b.linger_ms}, {args_duration(rs):.0f}s runs"
        )
        out.append(
            _common.format_table(
                [
                    "run",
                    "peak reserved MiB",
                    "mean reserved MiB",
                    "peak buffered MiB",
                    "mean buffered MiB",
                    "exhausted",
                    "blocked s",
                    "hot rec/s",
                    "total rec/s",
                ],
                rows,
            )
        )
        if len(med) == 2:
            f, i = med["full"], med["incremental"]
            out.append(
                f"median incremental/full: peak reservation {i['peak'] / f['peak']:.4f} "
                f"(1/{f['peak'] / max(i['peak'], 1):.0f}), mean reservation "
                f"{i['mean'] / max(f['mean'], 1):.4f}, hot-topic throughput "
                f"{i['hot'] / f['hot']:.3f}x, total throughput {i['tot'] / f['tot']:.3f}x; "
                f"exhausted full={f['exh']} incremental={i['exh']}"
            )
        out.append("")
    return "\n".join(out)


def draw(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in WORKLOADS if any(r.workload == w for r in results)]
    fig, axes = plt.subplots(len(workloads), 1, figsize=(10, 4.2 * len(workloads)), squeeze=False)
    colors = {"full": "tab:red", "incremental": "tab:blue"}
    for ax, workload in zip(axes[:, 0], workloads, strict=True):
        for strategy in STRATEGIES:
            sr = [r for r in results if r.workload == workload and r.strategy == strategy]
            if not sr:
                continue
            r = sr[0]
            t = [s[0] for s in r.samples]
            ax.plot(
                t,
                [s[1] / MiB for s in r.samples],
                color=colors[strategy],
                label=f"{strategy}: pool reserved (peak {mib(r.peak_reserved)} MiB)",
            )
            ax.plot(
                t,
                [s[2] / MiB for s in r.samples],
                color=colors[strategy],
                alpha=0.5,
                linestyle=":",
                label=f"{strategy}: bytes buffered",
            )
        ax.set_yscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("MiB (log)")
        b = next(r for r in results if r.workload == workload)
        title = {
            "mixed": "mixed: keyless hot topic A + keyed 1000-partition topic B",
            "mixed-small": "mixed, buffer.memory too small for full",
            "fill": "fill: every partition fills its batch",
        }[workload]
        ax.set_title(
            f"{title}; batch.size {mib(b.batch_size)} MiB, buffer.memory {mib(b.buffer_memory)} MiB"
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="use this broker instead of spawning tidegate")
    ap.add_argument("--workloads", default="mixed,mixed-small,fill")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of sending per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4 * MiB)
    ap.add_argument("--fill-batch-size", type=int, default=64 * 1024)
    ap.add_argument("--fill-partitions", type=int, default=8)
    ap.add_argument(
        "--buffer-memory",
        type=int,
        default=8 * 1024 * MiB,
        help="large enough that full never runs out in the mixed workload, so "
        "throughput compares like for like (default 8 GiB of accounting; "
        "untouched pages of a bytearray cost no RSS)",
    )
    ap.add_argument(
        "--small-buffer-memory",
        type=int,
        default=128 * MiB,
        help="buffer.memory of the mixed-small workload",
    )
    ap.add_argument(
        "--small-max-block-ms",
        type=int,
        default=200,
        help="max.block.ms of the mixed-small workload",
    )
    ap.add_argument("--linger-ms", type=int, default=100)
    ap.add_argument(
        "--max-request-size",
        type=int,
        default=16 * MiB,
        help="a 4 MiB batch needs max.request.size (and the broker's "
        "message.max.bytes) above it; the spawned broker gets the same",
    )
    ap.add_argument("--max-block-ms", type=int, default=60_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument(
        "--cold-every",
        type=int,
        default=50,
        help="one keyed record to topic B per this many records",
    )
    ap.add_argument("--png", default=str(_common.REPO_ROOT / "docs" / "producer-memory.png"))
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()

    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    results: list[Result] = []
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker = _common.SpawnedTidegate(
                overrides=[f"message.max.bytes={args.max_request_size}"]
            )
            broker.start()
            bootstrap = broker.bootstrap
        suffix = str(int(time.time()))
        topics = {"A": f"hot-{suffix}", "B": f"keyed-{suffix}", "C": f"fill-{suffix}"}
        create_topics(
            bootstrap, {topics["A"]: 4, topics["B"]: 1000, topics["C"]: args.fill_partitions}
        )
        for workload in workloads:
            for run in range(args.repeat):
                for strategy in STRATEGIES if run % 2 == 0 else STRATEGIES[::-1]:
                    r = run_case(bootstrap, workload, strategy, run, args, topics)
                    print(
                        f"{workload} {strategy} #{run}: peak reserved {mib(r.peak_reserved)} "
                        f"MiB, peak buffered {mib(r.peak_buffered)} MiB, hot "
                        f"{r.hot_rps:,.0f} rec/s, exhausted {r.exhausted}",
                        flush=True,
                    )
                    results.append(r)
    finally:
        if broker is not None:
            broker.cleanup()
    print()
    print(f"tidegate {_common.git_describe()}")
    print(summarize(results))
    if args.png:
        draw(results, Path(args.png))
        print(f"chart: {args.png}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [{k: v for k, v in asdict(r).items() if k != "samples"} for r in results], indent=1
            )
        )


if __name__ == "__main__":
    main()
