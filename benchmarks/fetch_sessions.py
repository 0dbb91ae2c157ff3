"""Broker CPU per idle long-poll of a consumer of many partitions, with and without a
KIP-227 fetch session (issue 18, "Scale with partitions and consumers").

For each partition count (``--partitions``, default 100 1000 2000 5000) a fresh topic of
that many partitions is created, and one consumer long-polls it while nothing is
produced, in the same run:

* ``sessionless``: every Fetch names every partition (epoch -1), and every response
  lists every partition, as librdkafka and aiokafka fetch;
* ``session``: the first Fetch opens a session (epoch 0), then every Fetch is
  incremental: no partition named, none answered (kafka-python, the Java consumer).

and, as a baseline, ``idle``: no requests for as long as the polls take (the broker's
background work, e.g. its once-a-second log maintenance over every partition, per
poll-equivalent of wall time; subtract it from the other two for the cost of a poll).

Each poll waits ``--max-wait-ms`` at the broker. The broker's CPU time (user+system,
psutil) over ``--polls`` polls, divided by the polls, is one sample; ``--rounds``
samples per mode give the median and the spread (min..max). The consumer is tidegate's
own client (``tidegate.client.fetcher.fetch``, with and without a
``FetchSessionHandler``); it speaks the wire protocol only, so ``--bootstrap``/``--pid``
measures any broker.

    .venv/bin/python benchmarks/fetch_sessions.py --spawn-tidegate
    .venv/bin/python benchmarks/fetch_sessions.py --spawn-tidegate --partitions 100 2000
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import CpuMeter, add_target_arguments, format_table, open_target

from tidegate.client import KafkaClient
from tidegate.client.fetcher import FetchSessionHandler, fetch


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient as CAdmin
    from confluent_kafka.admin import NewTopic

    admin = CAdmin({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 300_000})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=300)[topic].result(300)


def poll_round(client: KafkaClient, node: int, positions: dict, polls: int, max_wait_ms: int,
               session: FetchSessionHandler | None, cpu: CpuMeter) -> float | None:
    """Broker CPU ms per poll over ``polls`` idle long-polls."""
    before = cpu.now()
    for _ in range(polls):
        got = fetch(client, node, positions, max_wait_ms=max_wait_ms, min_bytes=1, session=session)
        assert not any(pf.records for pf in got.values()), "the broker is not idle"
    after = cpu.now()
    if before is None or after is None:
        return None
    return (after - before) * 1000 / polls


def idle_round(polls: int, max_wait_ms: int, cpu: CpuMeter) -> float | None:
    """Broker CPU ms per poll-equivalent (``max_wait_ms``) of wall time with no requests."""
    before = cpu.now()
    time.sleep(polls * max_wait_ms / 1000)
    after = cpu.now()
    if before is None or after is None:
        return None
    return (after - before) * 1000 / polls


def measure(bootstrap: str, pid: int | None, partitions: int, polls: int, rounds: int,
            max_wait_ms: int) -> dict[str, list[float]]:
    topic = f"fs-{partitions}-{int(time.time())}"
    create_topic(bootstrap, topic, partitions)
    cpu = CpuMeter(pid)
    out: dict[str, list[float]] = {"sessionless": [], "session": [], "idle": []}
    with KafkaClient(bootstrap, request_timeout_ms=120_000) as client:
        client.metadata([topic], timeout_ms=120_000)
        leaders = {client.cluster.leader_for(topic, p) for p in range(partitions)}
        assert len(leaders) == 1, leaders
        node = leaders.pop()
        assert node is not None
        positions = {(topic, p): 0 for p in range(partitions)}
        session = FetchSessionHandler()
        fetch(client, node, positions, max_wait_ms=0, min_bytes=0, session=session)  # opens it
        established = session.session_id != 0
        for _ in range(rounds):  # alternate, so drift in machine load hits both alike
            for mode in ("sessionless", "session", "idle"):
                if mode == "session" and not established:
                    continue
                if mode == "idle":
                    v = idle_round(polls, max_wait_ms, cpu)
                else:
                    v = poll_round(client, node, positions, polls, max_wait_ms,
                                   session if mode == "session" else None, cpu)
                if v is not None:
                    out[mode].append(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_arguments(ap)
    ap.add_argument("--partitions", type=int, nargs="+", default=[100, 1000, 2000, 5000])
    ap.add_argument("--polls", type=int, default=20, help="idle long-polls per sample")
    ap.add_argument("--rounds", type=int, default=5, help="samples per mode and partition count")
    ap.add_argument("--max-wait-ms", type=int, default=100)
    args = ap.parse_args()
    # a broker of thousands of partitions holds files open for each (inherited limit)
    # (about 4 per partition: 5,000 partitions need more than a 20,000 limit)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 65536), max(hard, 65536)))
    except (ValueError, OSError):  # not allowed to raise the hard limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    bootstrap, pid, spawned = open_target(args)
    rows = []
    try:
        for i, n in enumerate(args.partitions):
            if spawned is not None and i:
                spawned.restart()  # a fresh broker per partition count
                bootstrap, pid = spawned.bootstrap, spawned.pid
            res = measure(bootstrap, pid, n, args.polls, args.rounds, args.max_wait_ms)
            row = [str(n)]
            for mode in ("sessionless", "session", "idle"):
                vals = sorted(res[mode])
                row.append(f"{statistics.median(vals):.2f} ({vals[0]:.2f}..{vals[-1]:.2f})" if vals else "-")
            less, sess = res["sessionless"], res["session"]
            # a median of 0: below the CPU clock's resolution (10 ms over --polls polls)
            row.append(f"{statistics.median(less) / statistics.median(sess):.0f}x"
                       if less and sess and statistics.median(sess) else "-")
            rows.append(row)
            print("  ".join(row), file=sys.stderr, flush=True)
    finally:
        if spawned is not None:
            spawned.cleanup()
    print(f"broker CPU ms per idle long-poll (max_wait {args.max_wait_ms} ms, {args.polls} polls x "
          f"{args.rounds} rounds; median (min..max)); load average {os.getloadavg()[0]:.2f}")
    print(format_table(["partitions", "sessionless", "session", "idle (no requests)", "ratio"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
