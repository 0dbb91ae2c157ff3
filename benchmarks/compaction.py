"""What the log cleaner costs (docs/compaction.md, docs/benchmarks.md).

Two parts:

1. **The cleaner alone** (in this process, no broker): a compacted Log of ``--size`` bytes
   (1 KiB values over ``--keys`` keys, 64 MiB segments) is cleaned once by
   ``tidegate.log.cleaner.Cleaner``; prints MB/s read by the clean and the peak RSS
   growth during it (sampled every 10 ms).
2. **Produce latency** (``--broker``): a spawned tidegate with a compacted topic holding
   ``--size`` bytes; a confluent-kafka producer (acks=all, one record at a time, 200/s)
   measures delivery latency for ``--seconds`` (segments of size/16, at most 64 MiB), once
   per ``--modes``: ``off`` (``log.cleaner.enable=false``), ``process`` and ``thread``
   (``log.cleaner.execution``), ``thread-throttled`` (a thread with
   ``log.cleaner.io.max.bytes.per.second`` = ``--throttle-mb`` MB/s). Latency is reported
   over the whole window and over the part of it while the clean ran (until the broker
   logged it, so the cleaner's effect is not diluted by the quiet rest).

    .venv/bin/python benchmarks/compaction.py --size 64M
    .venv/bin/python benchmarks/compaction.py --size 1G --broker
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _common import SpawnedTidegate, format_table, percentile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from tidegate.clock import SYSTEM_CLOCK
from tidegate.log import Log, LogConfig
from tidegate.log.cleaner import Cleaner
from tidegate.log.log_cleaner_manager import LogToClean
from tidegate.record.batch_builder import Record, build_batch


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def fill(plog: Log, size: int, keys: int, value_size: int = 1024) -> int:
    value = b"v" * value_size
    per_batch = 64
    written = i = 0
    while written < size:
        recs = [Record(value, key=b"key-%06d" % ((i + j) % keys), timestamp=i + j)
                for j in range(per_batch)]  # fmt: skip
        data = build_batch(recs)
        plog.append(data, i, auto_flush=False)
        written += len(data)
        i += per_batch
    plog.roll(i)
    return written


def cleaner_alone(size: int, keys: int, dedupe: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="tidegate-clean-bench-"))
    try:
        cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=64 << 20)
        plog = Log(tmp / "t-0", cfg, 0)
        written = fill(plog, size, keys)
        plog.flush()
        proc = psutil.Process()
        base_rss = proc.memory_info().rss
        peak = [base_rss]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.01):
                peak[0] = max(peak[0], proc.memory_info().rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        upper = plog.segments[-1].base_offset
        started = time.monotonic()
        stats = Cleaner(dedupe, clock=SYSTEM_CLOCK).clean(LogToClean(("t", 0), plog, 0, upper, 0, 1), 0)
        took = time.monotonic() - started
        done.set()
        sampler.join()
        plog.close()
        return {
            "written_mb": written / 1e6,
            "seconds": took,
            "mb_per_s": (stats.map_bytes_read + stats.bytes_read) / 1e6 / took,
            "kept_mb": stats.bytes_written / 1e6,
            "rss_growth_mb": (peak[0] - base_rss) / 1e6,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


MODES = {
    "off": ["log.cleaner.enable=false"],
    "process": ["log.cleaner.execution=process"],
    "thread": ["log.cleaner.execution=thread"],
    "thread-throttled": ["log.cleaner.execution=thread"],
}


def produce_latency(size: int, keys: int, seconds: float, mode: str, throttle_mb: float) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    overrides = [*MODES[mode], "log.cleaner.backoff.ms=200"]
    if mode == "thread-throttled":
        overrides.append(f"log.cleaner.io.max.bytes.per.second={throttle_mb * 1e6:.0f}")
    broker = SpawnedTidegate(overrides=overrides).start()
    try:
        topic = "compacted"
        segment_bytes = max(1 << 20, min(64 << 20, size // 16))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "1.0"})])[topic].result(30)  # fmt: skip
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "acks": 1})
        value = b"v" * 1024
        for i in range(size // 1024):
            while True:
                try:
                    p.produce(topic, value, key=b"key-%06d" % (i % keys))
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(300)
        # let the cleaner see the dirty log now (ratio 1.0 kept it from cleaning during
        # the fill): a ratio change applies live
        from confluent_kafka.admin import ConfigResource

        res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={
            "cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "0.01"})  # fmt: skip
        admin.alter_configs([res])[res].result(30)
        timed = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
        latencies: list[float] = []
        during: list[float] = []
        start = time.monotonic()
        end = start + seconds
        cleaned_at: float | None = None
        next_look = start + 0.5
        i = 0
        while time.monotonic() < end:
            sent = time.monotonic()
            timed.produce(topic, value, key=b"probe-%d" % (i % 100),
                          on_delivery=lambda err, msg, t=sent: latencies.append(time.monotonic() - t))
            timed.flush(30)
            if cleaned_at is None and latencies:
                during.append(latencies[-1])
            i += 1
            if cleaned_at is None and mode != "off" and time.monotonic() > next_look:
                next_look += 0.5
                if "cleaned Log(" in broker.log_tail(200):
                    cleaned_at = time.monotonic()
            time.sleep(0.005)
        latencies.sort()
        during.sort()
        return {
            "mode": mode,
            "p50_ms": 1000 * (percentile(latencies, 50) or 0),
            "p99_ms": 1000 * (percentile(latencies, 99) or 0),
            "max_ms": 1000 * latencies[-1],
            "during_p99_ms": 1000 * (percentile(during, 99) or 0) if mode != "off" else None,
            "clean_s": None if cleaned_at is None else cleaned_at - start,
            "cleaned": "cleaned Log(" in broker.log_tail(2000),
        }
    finally:
        broker.stop()
        broker.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="64M", help="log size to clean (e.g. 64M, 1G)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--dedupe-buffer-size", type=int, default=134217728)
    ap.add_argument("--broker", action="store_true", help="also measure produce latency on a broker")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--modes", default="off,process,thread,thread-throttled",
                    help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--throttle-mb", type=float, default=20.0,
                    help="log.cleaner.io.max.bytes.per.second of thread-throttled, in MB/s")
    ap.add_argument("--skip-alone", action="store_true", help="only the broker part")
    args = ap.parse_args()
    size = parse_size(args.size)
    if not args.skip_alone:
        r = cleaner_alone(size, args.keys, args.dedupe_buffer_size)
        print(format_table(["log MB", "clean s", "MB/s", "kept MB", "RSS growth MB"], [[
            f"{r['written_mb']:.0f}", f"{r['seconds']:.1f}", f"{r['mb_per_s']:.1f}",
            f"{r['kept_mb']:.1f}", f"{r['rss_growth_mb']:.0f}"]]))  # fmt: skip
    if args.broker:
        rows = []
        for mode in args.modes.split(","):
            m = produce_latency(size, args.keys, args.seconds, mode, args.throttle_mb)
            rows.append([mode, f"{m['p50_ms']:.1f}", f"{m['p99_ms']:.1f}", f"{m['max_ms']:.1f}",
                         "-" if m["during_p99_ms"] is None else f"{m['during_p99_ms']:.1f}",
                         "-" if m["clean_s"] is None else f"{m['clean_s']:.1f}", str(m["cleaned"])])  # fmt: skip
            print(rows[-1], flush=True)
        print(format_table(["cleaner", "produce p50 ms", "p99 ms", "max ms", "p99 during clean ms",
                            "clean s (≤)", "cleaned"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
