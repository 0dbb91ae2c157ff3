"""What a topic's compression.type costs the broker: produce into topics of every
compression.type with every producer codec, and compare with ``producer`` (stored as sent).

For every (producer codec, topic compression.type) case the benchmark creates a topic with
that ``compression.type`` (AdminClient), produces ``--records`` records of ``--size`` bytes
(values drawn from 64 random hex strings, about 2:1 compressible, as produce_fetch.py) with
a confluent-kafka producer using the codec (acks=1, linger 5 ms, 256 KiB batches), and
reports records/s, MB/s (uncompressed value bytes) and the broker's CPU time per MB
(``--pid``, or the spawned broker's). A codec pair whose codecs differ makes the broker
rebuild every batch; equal codecs (and ``producer``) keep the batch as sent. Talks only the
Kafka protocol, so it runs against any broker that implements compression.type.

    .venv/bin/python benchmarks/recompression.py --spawn-tidegate
    .venv/bin/python benchmarks/recompression.py --bootstrap 127.0.0.1:9092 --pid 1234 \\
        --sources none,zstd --targets producer,lz4,zstd --records 50000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid

from _common import CpuMeter, add_target_arguments, format_table, git_describe, open_target

SOURCES = ("none", "gzip", "snappy", "lz4", "zstd")
TARGETS = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def run_case(bootstrap: str, pid: int | None, source: str, target: str, records: int,
             size: int) -> dict:  # fmt: skip
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"recompress-{source}-{target}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": target})])[topic].result(30)
    rnd = random.Random(7)
    pool = [rnd.randbytes(size // 2).hex().encode()[:size] for _ in range(64)]
    producer = Producer({
        "bootstrap.servers": bootstrap, "compression.type": source, "acks": 1,
        "linger.ms": 5, "batch.size": 262144, "queue.buffering.max.messages": 200000,
    })  # fmt: skip
    producer.list_topics(topic, timeout=10)
    failed = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed[0] += 1

    cpu = CpuMeter(pid)
    cpu_start = cpu.now()
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, pool[i % 64], partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    cpu_end = cpu.now()
    mb = records * size / 1e6
    broker_cpu = None if cpu_start is None or cpu_end is None else cpu_end - cpu_start
    return {
        "source": source,
        "target": target,
        "records": records,
        "failed": failed[0],
        "seconds": elapsed,
        "records_per_s": records / elapsed,
        "mb_per_s": mb / elapsed,
        "broker_cpu_s": broker_cpu,
        "broker_cpu_ms_per_mb": None if broker_cpu is None else 1000 * broker_cpu / mb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(parser)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    bootstrap, pid, spawned = open_target(args)
    results = []
    try:
        for source in args.sources.split(","):
            for target in args.targets.split(","):
                results.append(run_case(bootstrap, pid, source, target, args.records, args.size))
                r = results[-1]
                print(f"{source:>6} -> {target:<12} {r['mb_per_s']:7.1f} MB/s", file=sys.stderr)
    finally:
        if spawned is not None:
            spawned.cleanup()
    baseline = {r["source"]: r for r in results if r["target"] == "producer"}
    rows = []
    for r in results:
        base = baseline.get(r["source"])
        cpu = r["broker_cpu_ms_per_mb"]
        rows.append([
            r["source"], r["target"], f"{r['records_per_s']:,.0f}", f"{r['mb_per_s']:.1f}",
            "-" if cpu is None else f"{cpu:.1f}",
            "-" if base is None or cpu is None or not base["broker_cpu_ms_per_mb"]
            else f"{cpu / base['broker_cpu_ms_per_mb']:.2f}x",
            "FAILED" if r["failed"] else "ok",
        ])  # fmt: skip
    print(f"commit {git_describe()}, {args.records} records of {args.size} B per case")
    print(format_table(
        ["producer codec", "compression.type", "records/s", "MB/s", "broker CPU ms/MB",
         "vs producer", "result"], rows,
    ))  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commit": git_describe(), "results": results}, f, indent=1)
    return 1 if any(r["failed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
