"""N consumers, each reading a different partition at full speed (issue 18, "Scale with
partitions and consumers"): total fetch throughput and broker CPU, tidegate and the
peer broker (Tansu) side by side in one run.

For each broker (spawned fresh): a topic of ``--consumers`` partitions gets
``--records`` records of ``--size`` bytes in each (confluent-kafka producer); then
``--consumers`` confluent-kafka consumers (one thread each, librdkafka does the I/O),
each assigned one partition from offset 0, read to its end at once. Reported: records/s
and MB/s over the whole read (first consumer start to last consumer done), and broker
CPU seconds per GB fetched (psutil).

    .venv/bin/python benchmarks/fetch_consumers.py --spawn-peer
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common
from _common import CpuMeter, SpawnedTidegate, format_table


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    _common.fill_topic(bootstrap, topic, partitions, records, b"x" * size)


def read_all(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    done = []

    def one(part: int) -> None:
        c = Consumer({**_common.CONSUMER_THROUGHPUT_CONFIG,
                      "bootstrap.servers": bootstrap, "group.id": f"g{part}", "enable.auto.commit": False,
                      "log_level": 0})
        c.assign([TopicPartition(topic, part, 0)])
        n = 0
        deadline = time.monotonic() + 300
        while n < records and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    n += 1
        c.close()
        done.append(n)

    threads = [threading.Thread(target=one, args=(p,)) for p in range(partitions)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done) == records * partitions, (sum(done), records * partitions)
    return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--consumers", type=int, default=50)
    ap.add_argument("--records", type=int, default=2000, help="records per partition")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--spawn-peer", action="store_true")
    ap.add_argument("--peer-script", default=str(_common.REPO_ROOT.parent / "shared/tools/peer-broker.sh"))
    args = ap.parse_args()
    brokers: list = [SpawnedTidegate(log_level="WARNING")]
    if args.spawn_peer:
        brokers.append(_common.SpawnedPeer(args.peer_script))
    rows = []
    for b in brokers:
        b.start()
        try:
            topic = f"fc-{int(time.time())}"
            fill(b.bootstrap, topic, args.consumers, args.records, args.size)
            cpu = CpuMeter(b.pid)
            c0 = cpu.now()
            secs = read_all(b.bootstrap, topic, args.consumers, args.records)
            c1 = cpu.now()
            total = args.consumers * args.records
            gb = total * args.size / 1e9
            cpu_s = (c1 - c0) if c0 is not None and c1 is not None else None
            rows.append([b.kind, f"{total / secs:,.0f}", f"{gb * 1000 / secs:.1f}",
                         f"{cpu_s:.2f}" if cpu_s is not None else "-",
                         f"{cpu_s / gb:.1f}" if cpu_s is not None else "-"])
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)
        finally:
            b.cleanup()
    print(f"{args.consumers} consumers x {args.records} records of {args.size} B, one partition each; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(format_table(["broker", "records/s", "MB/s", "broker CPU s", "CPU s per GB"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
