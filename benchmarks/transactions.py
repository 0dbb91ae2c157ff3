#!/usr/bin/env python3
"""What transactions cost: transactional produce against idempotent produce, and
read_committed fetch against read_uncommitted, in the same run, through confluent-kafka.

Produce cases, each writing ``--records`` records of ``--size`` bytes over
``--partitions`` partitions of a fresh topic (acks=all, idempotent: what a transactional
producer is underneath):

* ``idempotent``: no transactions (the baseline);
* ``txn-100ms``: a transaction committed every 100 ms (commit_transaction flushes and
  waits for the markers' coordinator round trip, as a Kafka Streams app with
  commit.interval.ms=100 does);
* ``txn-1000``: a transaction committed every 1,000 records.

Fetch cases read the ``txn-1000`` topic back whole with one consumer assigned every
partition (no group), at read_uncommitted (the baseline) and read_committed.

After one unmeasured warm-up of each produce case, the cases run ``--runs`` times each, interleaved (case A, B, C, A, B, C, ...) so that the
shared machine's noise falls on all of them alike; the table has the median and the
range of each, and the ratio of medians against the baseline. The broker's CPU time per
case is measured when its pid is known (``--spawn-tidegate`` or ``--pid``).

    .venv/bin/python benchmarks/transactions.py --spawn-tidegate
    .venv/bin/python benchmarks/transactions.py --bootstrap 127.0.0.1:9092 --pid 1234 --records 50000

Works against any broker with transactions (e.g. ``../shared/tools/peer-broker.sh``).
The goal (issue 15): at a 100 ms commit interval transactions cost at most 10 %.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid

from _common import (
    CONSUMER_THROUGHPUT_CONFIG,
    CpuMeter,
    add_target_arguments,
    format_table,
    git_describe,
    open_target,
)

PRODUCE_CASES = ("idempotent", "txn-100ms", "txn-1000")
FETCH_CASES = ("read_uncommitted", "read_committed")


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def produce_case(bootstrap: str, pid: int | None, case: str, records: int, size: int, partitions: int) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    topic = f"txbench-{case}-{uuid.uuid4().hex[:8]}"
    admin = _admin(bootstrap)  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 262144, "queue.buffering.max.messages": 200000, "log_level": 0}
    transactional = case != "idempotent"
    if transactional:
        conf["transactional.id"] = f"txbench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    p.list_topics(topic, timeout=10)
    rnd = random.Random(7)
    pool = [rnd.randbytes(size // 2).hex().encode()[:size] for _ in range(64)]
    failed = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed[0] += 1

    # ready before the clock starts: the producer id (and a first transaction), the
    # metadata and the connections, so every case measures only the steady stream
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    p.produce(topic, b"warm-up", partition=0)
    if transactional:
        p.commit_transaction(30)
    p.flush(30)
    cpu = CpuMeter(pid)
    cpu_start = cpu.now()
    start = time.perf_counter()
    commits = 0
    if transactional:
        p.begin_transaction()
    txn_started = time.perf_counter()
    in_txn = 0
    for i in range(records):
        while True:
            try:
                p.produce(topic, pool[i % 64], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
        in_txn += 1
        if i % 500 == 0:
            p.poll(0)
        if transactional and (
            (case == "txn-1000" and in_txn >= 1000)
            or (case == "txn-100ms" and i % 100 == 0 and time.perf_counter() - txn_started >= 0.1)
        ):
            p.commit_transaction(60)
            commits += 1
            p.begin_transaction()
            txn_started, in_txn = time.perf_counter(), 0
    if transactional:
        p.commit_transaction(60)
        commits += 1
    else:
        p.flush(120)
    elapsed = time.perf_counter() - start
    cpu_end = cpu.now()
    return {
        "case": case, "topic": topic, "records": records + 1, "failed": failed[0], "seconds": elapsed,
        "records_per_s": records / elapsed, "mb_per_s": records * size / 1e6 / elapsed, "commits": commits,
        "broker_cpu_s": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
    }  # fmt: skip


def fetch_case(bootstrap: str, pid: int | None, case: str, topic: str, records: int, size: int,
               partitions: int) -> dict:  # fmt: skip
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({**CONSUMER_THROUGHPUT_CONFIG,
                  "bootstrap.servers": bootstrap, "group.id": f"txbench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": case, "fetch.max.bytes": 52428800,
                  "log_level": 0})  # fmt: skip
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    cpu = CpuMeter(pid)
    cpu_start = cpu.now()
    start = time.perf_counter()
    got = 0
    deadline = start + 300
    while got < records and time.perf_counter() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    cpu_end = cpu.now()
    c.close()
    return {
        "case": case, "records": got, "failed": records - got, "seconds": elapsed,
        "records_per_s": got / elapsed, "mb_per_s": got * size / 1e6 / elapsed,
        "broker_cpu_s": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
    }  # fmt: skip


def summarize(results: list[dict], cases: tuple[str, ...]) -> list[list[str]]:
    by_case = {c: [r for r in results if r["case"] == c] for c in cases}
    base = statistics.median(r["records_per_s"] for r in by_case[cases[0]])
    rows = []
    for case in cases:
        rs = by_case[case]
        rate = [r["records_per_s"] for r in rs]
        mbs = [r["mb_per_s"] for r in rs]
        cpu = [r["broker_cpu_s"] for r in rs if r["broker_cpu_s"] is not None]
        commits = [r.get("commits", 0) for r in rs]
        rows.append([
            case, f"{statistics.median(rate):,.0f}", f"{min(rate):,.0f}-{max(rate):,.0f}",
            f"{statistics.median(mbs):.1f}", f"{statistics.median(rate) / base:.2f}",
            f"{statistics.median(cpu):.2f}" if cpu else "-",
            str(int(statistics.median(commits))) if any(commits) else "-",
            "FAILED" if any(r["failed"] for r in rs) else "ok",
        ])  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(parser)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    bootstrap, pid, spawned = open_target(args)
    produced: list[dict] = []
    fetched: list[dict] = []
    try:
        for case in PRODUCE_CASES:  # warm-up, not measured: connections, metadata, the coordinator
            produce_case(bootstrap, pid, case, min(args.records, 5000), args.size, args.partitions)
        for run in range(args.runs):
            for case in PRODUCE_CASES:
                r = produce_case(bootstrap, pid, case, args.records, args.size, args.partitions)
                produced.append(r)
                print(f"run {run + 1} {case:<11} {r['records_per_s']:9,.0f} rec/s  {r['commits']} commits",
                      file=sys.stderr)
            topic = produced[-1]["topic"]  # this run's txn-1000 topic
            for case in FETCH_CASES:
                r = fetch_case(bootstrap, pid, case, topic, args.records, args.size, args.partitions)
                fetched.append(r)
                print(f"run {run + 1} {case:<16} {r['records_per_s']:9,.0f} rec/s", file=sys.stderr)
    finally:
        if spawned is not None:
            spawned.cleanup()
    headers = ["case", "records/s (median)", "range", "MB/s", "vs baseline", "broker CPU s", "commits",
               "result"]
    print(f"commit {git_describe()}, {args.records} records of {args.size} B over {args.partitions} "
          f"partitions, {args.runs} runs per case, interleaved")
    print(format_table(headers, summarize(produced, PRODUCE_CASES)))
    print()
    print(format_table(headers, summarize(fetched, FETCH_CASES)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commit": git_describe(), "produce": produced, "fetch": fetched}, f, indent=1)
    return 1 if any(r["failed"] for r in produced + fetched) else 0


if __name__ == "__main__":
    sys.exit(main())
