"""Read N records through the ``tidegate`` Spark data source and through a plain
confluent-kafka consumer loop on the same machine; print records/s and the ratio.

    .venv/bin/python benchmarks/spark_read.py                       # spawns tidegate
    .venv/bin/python benchmarks/spark_read.py --bootstrap 127.0.0.1:9092 --records 500000
    .venv/bin/python benchmarks/spark_read.py --spawn-peer          # against Tansu too

For each target the benchmark creates a topic (``--partitions``), produces
``--records`` records of ``--size`` bytes with confluent-kafka (``--codec``), then
times, each ``--repeat`` times:

- ``spark (arrow)``: ``spark.read.format("tidegate")...load()`` and an aggregate that
  needs every row (count and total value bytes), on a local[N] session already started
  and warmed up (one small read first, so Python workers exist); executors yield Arrow
  batches, the default;
- ``spark (tuples)``: the same with ``tidegate.arrow=false`` (executors yield tuples);
- ``tidegate client``: the data source's read path without Spark: ``read_range`` over
  every partition in this process, decoding each record (what one executor does);
- ``confluent-kafka``: a consumer ``assign()``s every partition at the beginning and
  polls until it has every record, touching each value's length.

The counts and byte totals must match what was produced; a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    CONSUMER_THROUGHPUT_CONFIG,
    REPO_ROOT,
    SpawnedPeer,
    SpawnedTidegate,
    format_table,
    git_describe,
)


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int, codec: str) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} has no leaders")
        time.sleep(0.1)
    rnd = random.Random(1)
    payloads = [rnd.randbytes(size // 2).hex().encode()[:size] for _ in range(64)]
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 200_000,
        }
    )
    total = 0
    for i in range(n):
        v = payloads[i % 64]
        total += len(v)
        while True:
            try:
                p.produce(topic, v, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(120) != 0:
        raise RuntimeError("records left unsent")
    return total


def read_confluent(bootstrap: str, topic: str, partitions: int, n: int) -> tuple[int, int]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            **CONSUMER_THROUGHPUT_CONFIG,
            "bootstrap.servers": bootstrap,
            "group.id": "spark-read-bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = total = 0
        deadline = time.monotonic() + 600
        while count < n:
            msgs = c.consume(10_000, 1.0)
            for m in msgs:
                if m.error():
                    continue
                count += 1
                total += len(m.value())
            if time.monotonic() > deadline:
                break
        return count, total
    finally:
        c.close()


def read_client(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    from tidegate.client import KafkaClient
    from tidegate.client.fetcher import end_offsets, read_range

    count = total = 0
    with KafkaClient(bootstrap) as c:
        c.metadata([topic])
        ends = end_offsets(c, [(topic, p) for p in range(partitions)])
        for (t, p), end in ends.items():
            for r in read_range(c, (t, p), 0, end):
                count += 1
                total += len(r.value)
    return count, total


def spark_session(cores: int):
    import tidegate.spark

    return tidegate.spark.local_session("tidegate-spark-read", cores, **{"spark.driver.memory": "2g"})


def read_spark(spark, bootstrap: str, topic: str, arrow: bool) -> tuple[int, int]:
    from pyspark.sql import functions as F

    row = (
        spark.read.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("tidegate.arrow", str(arrow).lower())
        .load()
        .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))
        .collect()[0]
    )
    return int(row["n"]), int(row["bytes"] or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        action="append",
        default=[],
        help="NAME=HOST:PORT or HOST:PORT of a running broker (repeatable)",
    )
    ap.add_argument("--spawn-peer", action="store_true", help="also start Tansu and measure it")
    ap.add_argument(
        "--peer-script", default=str(REPO_ROOT.parent / "shared" / "tools" / "peer-broker.sh")
    )
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--skip-tuples", action="store_true", help="do not measure tidegate.arrow=false"
    )
    args = ap.parse_args(argv)  # fmt: skip

    spawned = []
    targets: list[tuple[str, str]] = []
    for b in args.bootstrap:
        name, _, addr = b.rpartition("=")
        targets.append((name or addr, addr))
    if not targets:
        t = SpawnedTidegate().start()
        spawned.append(t)
        targets.append(("tidegate", t.bootstrap))
    if args.spawn_peer:
        peer = SpawnedPeer(args.peer_script).start()
        spawned.append(peer)
        targets.append(("peer", peer.bootstrap))

    ok = True
    rows = []
    try:
        spark = spark_session(args.cores)
        for name, bootstrap in targets:
            topic = f"spark-read-{int(time.time())}-{random.randrange(1 << 16)}"
            t0 = time.monotonic()
            want_bytes = produce(bootstrap, topic, args.partitions, args.records, args.size,
                                 args.codec)  # fmt: skip
            print(f"{name}: produced {args.records} records to {topic} in "
                  f"{time.monotonic() - t0:.1f}s", flush=True)  # fmt: skip
            # warm-up: a Python worker per partition started, classes loaded
            warm = f"{topic}-warm"
            produce(bootstrap, warm, args.partitions, 1000, args.size, args.codec)
            read_spark(spark, bootstrap, warm, True)

            methods = [
                ("spark (arrow)", lambda b=bootstrap, t=topic: read_spark(spark, b, t, True))
            ]
            if not args.skip_tuples:
                methods.append(
                    ("spark (tuples)", lambda b=bootstrap, t=topic: read_spark(spark, b, t, False))
                )
            methods += [
                ("tidegate client", lambda b=bootstrap, t=topic: read_client(b, t, args.partitions)),
                ("confluent-kafka", lambda b=bootstrap, t=topic:
                    read_confluent(b, t, args.partitions, args.records)),
            ]  # fmt: skip
            best: dict[str, float] = {}
            for _ in range(args.repeat):
                for label, fn in methods:
                    t0 = time.perf_counter()
                    n, nbytes = fn()
                    dt = time.perf_counter() - t0
                    if (n, nbytes) != (args.records, want_bytes):
                        print(f"MISMATCH {name} {label}: {n} records / {nbytes} bytes, "
                              f"want {args.records} / {want_bytes}")  # fmt: skip
                        ok = False
                    best[label] = min(best.get(label, dt), dt)
                    print(f"  {label:16s} {dt:7.2f}s  {n / dt:12,.0f} rec/s", flush=True)
            base = args.records / best["confluent-kafka"]
            for label, _ in methods:
                rate = args.records / best[label]
                rows.append([name, label, f"{args.records:,}", f"{best[label]:.2f}",
                             f"{rate:,.0f}", f"{rate * args.size / 1e6:.1f}",
                             f"{rate / base:.2f}x"])  # fmt: skip
        spark.stop()
    finally:
        for s in spawned:
            s.stop()
    print()
    print(f"spark_read.py: {args.records:,} records of {args.size} B, {args.partitions} "
          f"partitions, {args.codec}, Spark local[{args.cores}], best of {args.repeat}; "
          f"commit {git_describe()}")  # fmt: skip
    print(format_table(["target", "reader", "records", "seconds", "records/s", "MB/s",
                        "vs confluent"], rows))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
