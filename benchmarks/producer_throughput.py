#!/usr/bin/env python3
"""Producer throughput: tidegate's producer against kafka-python's and confluent-kafka's.

Each client sends the same N records (a fixed random value of ``--sizes`` bytes,
no key) as fast as one thread can, to a fresh 4-partition topic on the same
broker, and the time from the first send until every record is acknowledged is
measured (records/s, MB/s). All clients use the same settings: acks=all (``--acks``),
linger.ms=5, batch.size=16384, no compression, idempotence off (kafka-python and
librdkafka would otherwise differ in what they negotiate). tidegate's producer
runs under both buffer.memory allocation strategies. Every case runs in its own
interpreter, ``--repeat`` times, interleaved; the median is reported with the
ratios to kafka-python.

    python benchmarks/producer_throughput.py                  # spawns a tidegate broker
    python benchmarks/producer_throughput.py --bootstrap 127.0.0.1:9092 --records 200000
    python benchmarks/producer_throughput.py --mock-cluster --records 50000 --sizes 100

``--mock-cluster`` runs against librdkafka's 3-broker mock cluster (tests/cluster,
started in this process through ctypes), tidegate's producer against confluent-kafka's
on the same 4-partition topics spread over the three brokers: the mock's speed bounds
both, so the point is the ratio between them and that both finish.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

CLIENTS = ("tidegate-full", "tidegate-incremental", "kafka-python", "confluent-kafka")
MOCK_CLIENTS = ("tidegate-full", "tidegate-incremental", "confluent-kafka")


def mock_cluster():
    """librdkafka's 3-broker mock cluster, started in this process (tests/cluster)."""
    sys.path.insert(0, str(_common.REPO_ROOT))
    from tests.cluster.mock_cluster import MockCluster, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no mock cluster: {reason}")
    return MockCluster(3)


def run_client(
    client: str, bootstrap: str, topic: str, size: int, n: int, acks: str = "all"
) -> dict:
    """Runs in a child interpreter: produce n records, return timings."""
    import os

    value = os.urandom(size)
    if client.startswith("tidegate"):
        from tidegate.producer import Producer

        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "linger.ms": 5,
                "batch.size": 16384,
                "enable.idempotence": False,
                "buffer.memory.allocation.strategy": client.split("-", 1)[1],
            }
        )
        p.send(topic, b"warm-up").result(30)
        t0 = time.perf_counter()
        send = p.send
        for _ in range(n):
            send(topic, value)
        t1 = time.perf_counter()
        left = p.flush(300)
        t2 = time.perf_counter()
        p.close(30)
        assert left == 0
    elif client == "kafka-python":
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=acks if acks == "all" else int(acks),
            linger_ms=5,
            batch_size=16384,
            enable_idempotence=False,
        )
        p.send(topic, b"warm-up").get(30)
        t0 = time.perf_counter()
        send = p.send
        for _ in range(n):
            send(topic, value)
        t1 = time.perf_counter()
        p.flush(300)
        t2 = time.perf_counter()
        p.close(30)
    else:
        from confluent_kafka import Producer as CProducer

        errors = []
        p = CProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "linger.ms": 5,
                "batch.size": 16384,
                "enable.idempotence": False,
                "queue.buffering.max.kbytes": 32768,
                "log_level": 0,
            }
        )
        p.produce(topic, b"warm-up")
        p.flush(30)

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)

        t0 = time.perf_counter()
        produce = p.produce
        for _ in range(n):
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.005)
            # serve delivery reports as librdkafka expects
        t1 = time.perf_counter()
        left = p.flush(300)
        t2 = time.perf_counter()
        assert left == 0 and not errors, errors[:3]
    return {"send_s": t1 - t0, "total_s": t2 - t0}


def create_topic(bootstrap: str, name: str) -> None:
    from tidegate.client import KafkaClient

    with KafkaClient(bootstrap) as c:
        r = c.request(
            19,
            {
                "topics": [{"name": name, "num_partitions": 4, "replication_factor": 1}],
                "timeout": 30_000,
            },
            timeout_ms=40_000,
        )
        assert int(r.topics[0].error_code) == 0, r


def child(client: str, bootstrap: str, topic: str, size: int, n: int, acks: str) -> dict:
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys, json; sys.path.insert(0, {here!r}); import producer_throughput as m; "
        f"print(json.dumps(m.run_client({client!r}, {bootstrap!r}, {topic!r}, {size}, {n}, "
        f"{acks!r})))"
    )
    out = subprocess.run(
        [_common.default_tidegate_python(), "-c", code],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,  # the return code is checked below, with the stderr tail
        cwd=_common.REPO_ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{client} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="use this broker instead of spawning tidegate")
    ap.add_argument(
        "--spawn-peer",
        action="store_true",
        help="run against the peer broker (Tansu, in memory) instead of tidegate",
    )
    ap.add_argument(
        "--peer-script",
        default=str(_common.REPO_ROOT.parent / "shared" / "tools" / "peer-broker.sh"),
    )
    ap.add_argument(
        "--mock-cluster",
        action="store_true",
        help="run against librdkafka's 3-broker mock cluster (tidegate's producers and confluent-kafka)",
    )
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--records", type=int, default=200_000, help="records per run (100 B)")
    ap.add_argument("--records-1k", type=int, default=100_000, help="records per run (1 KiB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--acks", default="all", choices=["all", "1", "0"])
    ap.add_argument("--clients", help=f"default: {','.join(CLIENTS)} ({','.join(MOCK_CLIENTS)} on the mock)")
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()
    default_clients = MOCK_CLIENTS if args.mock_cluster else CLIENTS
    clients = [c.strip() for c in (args.clients or ",".join(default_clients)).split(",") if c.strip()]
    sizes = [int(s) for s in args.sizes.split(",")]
    broker = None
    cluster = None
    results: list[dict] = []
    try:
        if args.mock_cluster:
            cluster = mock_cluster()
            bootstrap = cluster.bootstrap
        elif args.bootstrap:
            bootstrap = args.bootstrap
        elif args.spawn_peer:
            broker = _common.SpawnedPeer(args.peer_script)
            broker.start()
            bootstrap = broker.bootstrap
        else:
            broker = _common.SpawnedTidegate()
            broker.start()
            bootstrap = broker.bootstrap
        seq = 0
        for size in sizes:
            n = args.records if size <= 512 else args.records_1k
            for run in range(args.repeat):
                order = clients if run % 2 == 0 else clients[::-1]
                for client in order:
                    seq += 1
                    topic = f"tput-{int(time.time())}-{seq}"
                    if cluster is not None:
                        cluster.create_topic(topic, 4)  # the mock has no CreateTopics
                    else:
                        create_topic(bootstrap, topic)
                    r = child(client, bootstrap, topic, size, n, args.acks)
                    r.update(
                        client=client,
                        size=size,
                        records=n,
                        run=run,
                        rps=n / r["total_s"],
                        mbps=n * size / r["total_s"] / 1e6,
                    )
                    results.append(r)
                    print(
                        f"{size:>5} B  {client:<22} run {run}: {r['rps']:>10,.0f} rec/s "
                        f"({r['mbps']:.1f} MB/s; send loop {n / r['send_s']:,.0f} rec/s)",
                        flush=True,
                    )
    finally:
        if broker is not None:
            broker.cleanup()
        if cluster is not None:
            cluster.close()
    print()
    where = f"spawned {broker.kind}" if broker else bootstrap
    if cluster is not None:
        where = "librdkafka's mock cluster (3 brokers, in process)"
    print(f"tidegate {_common.git_describe()}, broker {where}, acks={args.acks}")
    for size in sizes:
        rows = []
        med = {}
        for client in clients:
            rs = [r for r in results if r["client"] == client and r["size"] == size]
            med[client] = statistics.median(r["rps"] for r in rs)
        base_name = "kafka-python" if "kafka-python" in med else "confluent-kafka"
        base = med.get(base_name)
        for client in clients:
            rs = [r for r in results if r["client"] == client and r["size"] == size]
            rows.append(
                [
                    client,
                    f"{med[client]:,.0f}",
                    f"{statistics.median(r['mbps'] for r in rs):.1f}",
                    f"{med[client] / base:.2f}x" if base else "-",
                    " ".join(f"{r['rps']:,.0f}" for r in rs),
                ]
            )
        print(f"== {size} B records")
        print(
            _common.format_table(
                ["client", "median rec/s", "MB/s", f"vs {base_name}", "runs rec/s"], rows
            )
        )
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
