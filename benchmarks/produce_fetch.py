#!/usr/bin/env python3
"""Produce N records, then fetch them all back, through confluent-kafka (librdkafka).

Works against any Kafka-compatible bootstrap address. Several targets are measured back
to back, case by case, and printed in one table with ratios against the first target:

    python benchmarks/produce_fetch.py --spawn-tidegate --spawn-peer
    python benchmarks/produce_fetch.py --target tidegate=127.0.0.1:19192 \
        --target tansu=127.0.0.1:19092 --pid tidegate=1234 --acks 1 --records 50000

Each case (target x acks x run) uses a fresh topic created with the AdminClient
(replication factor 1). The producer runs flat out with a bounded queue (BufferError ->
poll), then flushes; produce latency is librdkafka's per-message time from produce() to
the broker's acknowledgement, i.e. the delivery report the callback receives
(Message.latency()). The consumer then assigns every partition at OFFSET_BEGINNING (no
group join, no commits) and reads until every partition has reached the last offset the
delivery reports gave; the count read must equal the count produced.

See docs/benchmarks.md for how to read the numbers.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

try:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaException,
        Producer,
        TopicPartition,
    )
    from confluent_kafka import libversion as _libversion
    from confluent_kafka import version as _ckversion
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:  # pragma: no cover
    sys.exit("confluent-kafka is required: pip install -e '.[bench]'")

MB = 1e6  # MB/s counts 10^6 bytes of record values

# librdkafka's own log lines (connection refused, every retry) go here instead of stderr;
# failures still surface through error_cb and the case's status. --client-logs shows them.
RDKAFKA_LOG = logging.getLogger("rdkafka")


class CaseAborted(Exception):
    """A case could not finish (timeout, broker error); the message says why."""


@dataclass
class Target:
    name: str
    bootstrap: str
    pid: int | None = None
    spawned: object | None = None  # SpawnedTidegate / SpawnedPeer

    def current_pid(self) -> int | None:
        return self.spawned.pid if self.spawned is not None else self.pid


@dataclass
class CaseResult:
    target: str
    bootstrap: str
    run: int
    acks: str
    records: int
    size: int
    partitions: int
    compression: str
    topic: str = ""
    topic_created: bool = False
    status: str = "ok"  # ok | FAILED | TIMEOUT | MISMATCH
    error: str | None = None
    produced: int = 0
    delivery_errors: int = 0
    consumed: int = 0
    consumed_bytes: int = 0
    produce_s: float | None = None
    fetch_s: float | None = None
    produce_rps: float | None = None
    produce_mbps: float | None = None
    fetch_rps: float | None = None
    fetch_mbps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    broker_pid: int | None = None
    broker_cpu_produce_s: float | None = None
    broker_cpu_fetch_s: float | None = None
    broker_rss_mb: float | None = None
    client_cpu_produce_s: float | None = None
    client_cpu_fetch_s: float | None = None
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- options


def parse_kv(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"{what} expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Produce then fetch N records through confluent-kafka against one or more "
        "Kafka-compatible brokers; prints records/s, MB/s, produce p50/p99 latency "
        "and (with --pid) the broker's CPU seconds, with ratios against the first target.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("targets (measured in this order; ratios are first/other)")
    g.add_argument(
        "--spawn-tidegate",
        action="store_true",
        help="start a tidegate broker (venv python -m tidegate serve) on a free port; "
        "it becomes the first target, named 'tidegate'",
    )
    g.add_argument(
        "--spawn-tidegate-metrics",
        action="store_true",
        help="also start a second tidegate with its metrics endpoint on "
        "(metrics.listener=http://127.0.0.1:0), named 'tidegate+metrics', to measure the "
        "cost of metric collection side by side with --spawn-tidegate",
    )
    g.add_argument(
        "--spawn-peer",
        action="store_true",
        help="start the peer broker (Tansu) with --peer-script on a free port, named 'tansu'",
    )
    g.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="an already running broker (repeatable)",
    )
    g.add_argument(
        "--bootstrap",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an already running broker, named by its address (repeatable)",
    )
    g.add_argument(
        "--pid",
        "--broker-pid",
        dest="pid",
        action="append",
        default=[],
        metavar="[NAME=]PID",
        help="broker process to sample CPU seconds from (psutil); NAME=PID, or bare "
        "PIDs matched in order to the non-spawned targets (repeatable). "
        "Spawned brokers are sampled automatically",
    )
    g.add_argument(
        "--peer-script",
        default=str(_common.REPO_ROOT.parent / "shared/tools/peer-broker.sh"),
        help="script that starts/stops the peer broker: SCRIPT start|stop PORT",
    )
    g.add_argument("--peer-name", default="tansu")
    g.add_argument(
        "--tidegate-python",
        default=_common.default_tidegate_python(),
        help="interpreter used for --spawn-tidegate",
    )
    g.add_argument(
        "--tidegate-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra --override for the spawned tidegate (repeatable)",
    )
    g.add_argument(
        "--tidegate-log-level",
        default=None,
        help="--log-level for the spawned tidegate (default: the broker's own)",
    )
    g.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="do not restart spawned brokers before every case (by default they are "
        "restarted, tidegate with an empty log dir, so every case starts fresh "
        "and Tansu's never-freed memory does not pile up)",
    )

    w = p.add_argument_group("workload")
    w.add_argument("--records", type=int, default=200_000)
    w.add_argument("--size", type=int, default=1024, help="bytes per record value (no key)")
    w.add_argument(
        "--acks",
        action="append",
        choices=["0", "1", "all", "-1"],
        default=None,
        help="producer acks, repeatable (default: 1 and all)",
    )
    w.add_argument(
        "--compression",
        default="none",
        help="producer compression.type: none, gzip, snappy, lz4, zstd",
    )
    w.add_argument("--partitions", type=int, default=1)
    w.add_argument("--topic-prefix", default="bench-pf")
    w.add_argument("--linger-ms", type=float, default=5)
    w.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="producer batch.size in bytes (default: librdkafka's, 1000000)",
    )
    w.add_argument(
        "--max-queue",
        type=int,
        default=10_000,
        help="producer queue.buffering.max.messages: the bound on records in flight "
        "(queued or awaiting acknowledgement) in the client",
    )
    w.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every (acks, target) case this many times, interleaved",
    )
    w.add_argument(
        "--timeout-s",
        type=float,
        default=300,
        help="per-case limit (topic creation + produce + fetch); a case over it is "
        "aborted and reported as TIMEOUT",
    )
    w.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer property (repeatable)",
    )
    w.add_argument(
        "--consumer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer property (repeatable)",
    )
    w.add_argument(
        "--keep-topics",
        action="store_true",
        help="do not delete each case's topic afterwards (never deleted on spawned "
        "brokers, which are restarted instead)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="OUT", help="also write every result (and the ratios) as JSON")
    o.add_argument(
        "--client-logs",
        action="store_true",
        help="show librdkafka's own log lines on stderr (hidden by default)",
    )
    o.add_argument("-q", "--quiet", action="store_true", help="no per-case progress on stderr")
    return p


def resolve_targets(args) -> list[Target]:
    targets: list[Target] = []
    if args.spawn_tidegate:
        sp = _common.SpawnedTidegate(
            args.tidegate_python, args.tidegate_override, args.tidegate_log_level
        )
        targets.append(Target("tidegate", sp.bootstrap, spawned=sp))
    if args.spawn_tidegate_metrics:
        sp = _common.SpawnedTidegate(
            args.tidegate_python,
            [*args.tidegate_override, "metrics.listener=http://127.0.0.1:0"],
            args.tidegate_log_level,
        )
        targets.append(Target("tidegate+metrics", sp.bootstrap, spawned=sp))
    if args.spawn_peer:
        script = Path(args.peer_script)
        if not script.exists():
            raise SystemExit(f"--spawn-peer: peer script not found: {script}")
        sp = _common.SpawnedPeer(script)
        targets.append(Target(args.peer_name, sp.bootstrap, spawned=sp))
    for kv in args.target:
        if "=" not in kv:
            raise SystemExit(f"--target expects NAME=HOST:PORT, got {kv!r}")
        name, boot = kv.split("=", 1)
        targets.append(Target(name.strip(), boot.strip()))
    for boot in args.bootstrap:
        targets.append(Target(boot.strip(), boot.strip()))
    if not targets:
        raise SystemExit(
            "no target: give --bootstrap, --target, --spawn-tidegate[-metrics] or --spawn-peer"
        )
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise SystemExit(f"target names must be unique: {names}")
    external = [t for t in targets if t.spawned is None]
    bare = []
    for item in args.pid:
        if "=" in item:
            name, pid = item.split("=", 1)
            match = [t for t in targets if t.name == name.strip()]
            if not match:
                raise SystemExit(f"--pid {item}: no target named {name!r} (targets: {names})")
            match[0].pid = int(pid)
        else:
            bare.append(int(item))
    if len(bare) > len(external):
        raise SystemExit(
            f"{len(bare)} bare --pid values but only {len(external)} non-spawned targets"
        )
    for t, pid in zip(external, bare):
        t.pid = pid
    for t in targets:
        if t.pid is not None and not psutil.pid_exists(t.pid):
            raise SystemExit(f"--pid for {t.name}: no process {t.pid}")
    return targets


# ----------------------------------------------------------------------------- one case


def _errs(errors: list[str], n: int = 3) -> str:
    """The last n distinct client errors (librdkafka repeats a refused connect every retry)."""
    seen: list[str] = []
    for e in reversed(errors):
        if e not in seen:
            seen.append(e)
        if len(seen) == n:
            break
    return "; ".join(reversed(seen))


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


def _check(deadline: float, what: str) -> None:
    if time.monotonic() >= deadline:
        raise CaseAborted(f"TIMEOUT during {what}")


def create_topic(bootstrap: str, topic: str, partitions: int, deadline: float, log) -> None:
    errors: list[str] = []
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "error_cb": lambda e: errors.append(str(e))},
        logger=RDKAFKA_LOG,
    )
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=max(1.0, min(30.0, _remaining(deadline))),
        request_timeout=max(1.0, min(30.0, _remaining(deadline))),
    )[topic]
    try:
        fut.result(timeout=max(0.1, _remaining(deadline)))
    except KafkaException as e:
        raise CaseAborted(
            f"CreateTopics {topic} ({partitions} partitions, RF 1) failed: {e}"
        ) from e
    except TimeoutError as e:  # concurrent.futures.TimeoutError is TimeoutError
        admin.poll(0)  # serves error_cb
        why = f"; client errors: {_errs(errors)}" if errors else ""
        raise CaseAborted(f"TIMEOUT: CreateTopics {topic} got no answer{why}") from e
    # wait until metadata shows every partition with a leader, so produce() never races the
    # creation (and never auto-creates the topic with a broker's default partition count)
    while True:
        _check(deadline, "waiting for the new topic's metadata")
        try:
            md = admin.list_topics(topic, timeout=max(0.5, min(5.0, _remaining(deadline))))
            tm = md.topics.get(topic)
            if (
                tm is not None
                and tm.error is None
                and len(tm.partitions) == partitions
                and all(pm.leader >= 0 for pm in tm.partitions.values())
            ):
                return
            if tm is not None and len(tm.partitions) not in (0, partitions):
                raise CaseAborted(
                    f"topic {topic} has {len(tm.partitions)} partitions, asked for {partitions}"
                )
        except KafkaException as e:
            log(f"  metadata for {topic}: {e}; retrying")
        time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str, log) -> None:
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap}, logger=RDKAFKA_LOG)
        admin.delete_topics([topic], operation_timeout=10, request_timeout=10)[topic].result(15)
    except (KafkaException, TimeoutError) as e:
        log(f"  note: could not delete topic {topic}: {e}")


def run_case(target: Target, res: CaseResult, args, payloads: list[bytes], log) -> None:
    deadline = time.monotonic() + args.timeout_s
    me = psutil.Process()

    def client_cpu() -> float:
        t = me.cpu_times()
        return t.user + t.system

    pid = target.current_pid()
    res.broker_pid = pid
    meter = _common.CpuMeter(pid)
    raw = f"{args.topic_prefix}-{target.name}-acks{res.acks}-r{res.run}-{uuid.uuid4().hex[:8]}"
    topic = "".join(c if c.isalnum() or c in "._-" else "_" for c in raw)  # legal topic chars
    res.topic = topic
    n, size, parts = res.records, res.size, res.partitions

    create_topic(target.bootstrap, topic, parts, deadline, log)
    res.topic_created = True

    # ---- produce
    client_errors: list[str] = []

    def on_error(err):
        client_errors.append(str(err))
        if err.fatal():
            client_errors.append("(fatal)")

    pconf = {
        "bootstrap.servers": target.bootstrap,
        "acks": res.acks,
        "linger.ms": args.linger_ms,
        "compression.type": res.compression,
        "queue.buffering.max.messages": args.max_queue,
        "queue.buffering.max.kbytes": 2_097_151,  # the message bound above is the one that binds
        "enable.idempotence": False,
        "error_cb": on_error,
    }
    if args.batch_size:
        pconf["batch.size"] = args.batch_size
    pconf.update(parse_kv(args.producer_config, "--producer-config"))
    prod = Producer(pconf, logger=RDKAFKA_LOG)
    latencies: list[float] = []
    ends: dict[int, int] = {}  # partition -> highest acknowledged offset
    derr = {"n": 0, "first": None}

    def on_delivery(err, msg):
        if err is not None:
            derr["n"] += 1
            if derr["first"] is None:
                derr["first"] = str(err)
            return
        latencies.append(msg.latency())
        p, off = msg.partition(), msg.offset()
        if off > ends.get(p, -1):
            ends[p] = off

    aborted = None
    try:
        # connect and learn the topic's leaders before the clock starts
        prod.list_topics(topic, timeout=max(1.0, min(30.0, _remaining(deadline))))
        np_ = len(payloads)
        produce = prod.produce
        poll = prod.poll
        c0, b0 = client_cpu(), meter.now()
        t0 = time.perf_counter()
        for i in range(n):
            v = payloads[i % np_]
            while True:
                try:
                    produce(topic, v, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.005)
                    _check(deadline, f"produce (record {i} of {n})")
            if i & 127 == 0:
                poll(0)
                if i & 4095 == 0:
                    _check(deadline, f"produce (record {i} of {n})")
                    if derr["n"] > 1000:
                        raise CaseAborted(f"{derr['n']} delivery errors, first: {derr['first']}")
        res.produced = n
        left = prod.flush(max(0.1, _remaining(deadline)))
        while left and _remaining(deadline) > 0:
            left = prod.flush(max(0.1, _remaining(deadline)))
        if left:
            raise CaseAborted(f"TIMEOUT: flush left {left} of {n} records unacknowledged")
        res.produce_s = time.perf_counter() - t0
        b1 = meter.now()
        res.client_cpu_produce_s = client_cpu() - c0
        if b0 is not None and b1 is not None:
            res.broker_cpu_produce_s = b1 - b0
    except CaseAborted as e:
        aborted = e
    except BaseException:
        prod.purge()
        prod.flush(0)
        raise
    if aborted is not None:
        prod.purge()
        prod.flush(0)
        if client_errors:
            aborted.args = (f"{aborted.args[0]}; client errors: {_errs(client_errors)}",)
        raise aborted

    delivered = len(latencies)
    res.delivery_errors = derr["n"]
    res.produce_rps = delivered / res.produce_s
    res.produce_mbps = delivered * size / MB / res.produce_s
    lat = sorted(latencies)
    if lat and lat[0] is not None and lat[0] >= 0:
        res.p50_ms = _common.percentile(lat, 50) * 1e3
        res.p99_ms = _common.percentile(lat, 99) * 1e3
        res.max_ms = lat[-1] * 1e3
    if derr["n"]:
        res.status = "FAILED"
        res.error = f"{derr['n']} of {n} records failed delivery; first error: {derr['first']}"
    acked_total = sum(off + 1 for off in ends.values())
    if acked_total != delivered:
        res.notes.append(
            f"acknowledged offsets span {acked_total} records but {delivered} "
            f"were acknowledged (the topic was not empty, or offsets skip)"
        )

    # ---- fetch
    cconf = {
        **_common.CONSUMER_THROUGHPUT_CONFIG,
        "bootstrap.servers": target.bootstrap,
        "group.id": f"{topic}-reader",  # required by the client; assign() never joins it
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "error_cb": on_error,
    }
    cconf.update(parse_kv(args.consumer_config, "--consumer-config"))
    cons = Consumer(cconf, logger=RDKAFKA_LOG)
    try:
        cons.list_topics(topic, timeout=max(1.0, min(30.0, _remaining(deadline))))
        want = dict(ends)  # partition -> last offset to read
        done_parts: set[int] = {p for p in range(parts) if p not in want}
        count = nbytes = 0
        extra = 0
        bad_size = 0
        fetch_errors: list[str] = []
        c0, b0 = client_cpu(), meter.now()
        t0 = time.perf_counter()
        cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        consume = cons.consume
        while len(done_parts) < parts:
            rem = _remaining(deadline)
            if rem <= 0:
                raise CaseAborted(
                    f"TIMEOUT during fetch: read {count} of {delivered} records "
                    f"(partitions still short: {sorted(set(range(parts)) - done_parts)})"
                )
            # consume() waits for num_messages or the timeout, so never ask for more than
            # are still due: the last call then returns as soon as the last record arrives
            batch = consume(
                num_messages=max(1, min(10_000, delivered - count)), timeout=min(1.0, rem)
            )
            for m in batch:
                e = m.error()
                if e is not None:
                    fetch_errors.append(str(e))
                    if e.fatal() or len(fetch_errors) > 100:
                        raise CaseAborted(f"fetch errors: {'; '.join(fetch_errors[-3:])}")
                    continue
                p, off = m.partition(), m.offset()
                last = want.get(p, -1)
                if off > last:
                    extra += 1
                    continue
                count += 1
                lv = len(m.value())
                nbytes += lv
                if lv != size:
                    bad_size += 1
                if off == last:
                    done_parts.add(p)
        res.fetch_s = time.perf_counter() - t0
        b1 = meter.now()
        res.client_cpu_fetch_s = client_cpu() - c0
        if b0 is not None and b1 is not None:
            res.broker_cpu_fetch_s = b1 - b0
    except CaseAborted as e:
        if client_errors:
            e.args = (f"{e.args[0]}; client errors: {_errs(client_errors)}",)
        raise
    finally:
        cons.close()
    res.broker_rss_mb = meter.rss_mb()
    res.consumed, res.consumed_bytes = count, nbytes
    res.fetch_rps = count / res.fetch_s
    res.fetch_mbps = nbytes / MB / res.fetch_s
    if fetch_errors:
        res.notes.append(f"{len(fetch_errors)} fetch errors (retried), last: {fetch_errors[-1]}")
    problems = []
    if count != n:
        problems.append(f"consumed {count} records but produced {n}")
    if extra:
        problems.append(f"{extra} records past the last acknowledged offset")
    if bad_size:
        problems.append(f"{bad_size} records with a value size other than {size}")
    if problems and res.status == "ok":
        res.status = "MISMATCH"
        res.error = "; ".join(problems)
    elif problems:
        res.error = f"{res.error}; " + "; ".join(problems)


# ----------------------------------------------------------------------------- report


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def result_row(r: CaseResult, show_cpu: bool, show_run: bool) -> list[str]:
    row = [r.target, r.acks]
    if show_run:
        row.append(str(r.run))
    row += [str(r.records), str(r.size)]
    row += [
        _f(r.produce_rps, ",.0f"),
        _f(r.produce_mbps, ".1f"),
        _f(r.p50_ms, ".1f"),
        _f(r.p99_ms, ".1f"),
        _f(r.fetch_rps, ",.0f"),
        _f(r.fetch_mbps, ".1f"),
    ]
    if show_cpu:
        row += [
            _f(r.broker_cpu_produce_s, ".2f"),
            _f(r.broker_cpu_fetch_s, ".2f"),
            _f(r.broker_rss_mb, ".0f"),
        ]
    row.append(r.status)
    return row


RATIO_FIELDS = ["produce_rps", "produce_mbps", "p50_ms", "p99_ms", "fetch_rps", "fetch_mbps"]
CPU_FIELDS = ["broker_cpu_produce_s", "broker_cpu_fetch_s", "broker_rss_mb"]


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def ratio_row(
    first: CaseResult, other: CaseResult, show_cpu: bool, show_run: bool
) -> tuple[list[str], dict]:
    fields = RATIO_FIELDS + (CPU_FIELDS if show_cpu else [])
    rs = {f: ratio(getattr(first, f), getattr(other, f)) for f in fields}
    row = [f"ratio {first.target}/{other.target}", first.acks]
    if show_run:
        row.append(str(first.run))
    row += ["", ""]
    row += [_f(rs[f], ".2f") for f in fields]
    row.append("")
    return row, rs


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    acks_list = args.acks or ["1", "all"]
    if args.records < 1 or args.size < 0 or args.partitions < 1 or args.repeat < 1:
        raise SystemExit("--records, --partitions and --repeat must be >= 1, --size >= 0")
    targets = resolve_targets(args)
    RDKAFKA_LOG.propagate = False
    if args.client_logs:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("rdkafka %(message)s"))
        RDKAFKA_LOG.addHandler(h)
        RDKAFKA_LOG.setLevel(logging.DEBUG)
    else:
        RDKAFKA_LOG.addHandler(logging.NullHandler())
    log = (
        (lambda *_a, **_k: None)
        if args.quiet
        else (lambda s: print(s, file=sys.stderr, flush=True))
    )

    # SIGTERM -> SystemExit, so spawned brokers are stopped by the finally below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    # a pool of distinct values: hex text is ~2:1 compressible, like typical payloads
    payloads = [os.urandom((args.size + 1) // 2).hex()[: args.size].encode() for _ in range(64)]
    started = _dt.datetime.now().astimezone()
    git = _common.git_describe()
    meta = {
        "benchmark": "produce_fetch",
        "started": started.isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "tidegate_git": git,
        "python": platform.python_version(),
        "confluent_kafka": _ckversion() if isinstance(_ckversion(), str) else _ckversion()[0],
        "librdkafka": _libversion()[0],
        "args": {k: v for k, v in vars(args).items()},
        "targets": [
            {
                "name": t.name,
                "bootstrap": t.bootstrap,
                "spawned": type(t.spawned).__name__ if t.spawned else None,
            }
            for t in targets
        ],
    }
    log(
        f"produce_fetch: {args.records} records x {args.size} B, acks {acks_list}, "
        f"{args.partitions} partition(s), compression {args.compression}, linger.ms {args.linger_ms:g}, "
        f"repeat {args.repeat}; {os.cpu_count()} cpus; confluent-kafka {meta['confluent_kafka']} "
        f"librdkafka {meta['librdkafka']}"
    )

    results: list[CaseResult] = []
    try:
        for t in targets:
            if t.spawned is not None:
                log(f"starting {t.name} ({type(t.spawned).__name__}) on {t.bootstrap}")
                t.spawned.start()
        first_case = True
        for run in range(1, args.repeat + 1):
            for acks in acks_list:
                for t in targets:
                    res = CaseResult(
                        t.name,
                        t.bootstrap,
                        run,
                        acks,
                        args.records,
                        args.size,
                        args.partitions,
                        args.compression,
                    )
                    results.append(res)
                    try:
                        if t.spawned is not None and args.restart and not first_case:
                            t.spawned.restart()
                        elif t.spawned is not None and not t.spawned.alive():
                            raise CaseAborted(f"{t.name} is not running")
                        log(f"[{t.name} acks={acks} run {run}] {t.bootstrap} ...")
                        run_case(t, res, args, payloads, log)
                    except CaseAborted as e:
                        msg = str(e)
                        res.status = "TIMEOUT" if msg.startswith("TIMEOUT") else "FAILED"
                        res.error = msg.removeprefix("TIMEOUT").lstrip(": ") or msg
                    except Exception as e:  # noqa: BLE001 - any broker/client failure: report it, go on
                        res.status = "FAILED"
                        res.error = f"{type(e).__name__}: {e}"
                    if res.status != "ok" and isinstance(t.spawned, _common.SpawnedTidegate):
                        for ln in t.spawned.error_lines():
                            res.notes.append(f"tidegate log: {ln}")
                    if t.spawned is not None and not t.spawned.alive():
                        res.notes.append(f"{t.name} broker process died")
                        if isinstance(t.spawned, _common.SpawnedTidegate):
                            res.notes.append("broker log tail:\n" + t.spawned.log_tail(20))
                    if res.status == "ok":
                        log(
                            f"  produce {res.produce_rps:,.0f} rec/s {res.produce_mbps:.1f} MB/s "
                            f"p50 {_f(res.p50_ms, '.1f')} ms p99 {_f(res.p99_ms, '.1f')} ms | fetch "
                            f"{res.fetch_rps:,.0f} rec/s {res.fetch_mbps:.1f} MB/s"
                        )
                    else:
                        log(f"  !!! {res.status}: {res.error}")
                    for nt in res.notes:
                        log(f"  note: {nt}")
                    if t.spawned is None and not args.keep_topics and res.topic_created:
                        delete_topic(t.bootstrap, res.topic, log)
                first_case = False
    except KeyboardInterrupt:
        log("interrupted; reporting what finished")
    finally:
        for t in targets:
            if t.spawned is not None:
                try:
                    t.spawned.cleanup()
                except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                    log(f"stopping {t.name}: {e}")

    # ---- table
    show_cpu = any(r.broker_cpu_produce_s is not None for r in results)
    show_run = args.repeat > 1
    headers = (
        ["target", "acks"]
        + (["run"] if show_run else [])
        + [
            "records",
            "size",
            "produce rec/s",
            "produce MB/s",
            "p50 ms",
            "p99 ms",
            "fetch rec/s",
            "fetch MB/s",
        ]
    )
    if show_cpu:
        headers += ["cpu prod s", "cpu fetch s", "rss MB"]
    headers.append("status")
    rows, ratios = [], []
    by_case: dict[tuple, list[CaseResult]] = {}
    for r in results:
        by_case.setdefault((r.run, r.acks), []).append(r)
    for (run, acks), group in by_case.items():
        for r in group:
            rows.append(result_row(r, show_cpu, show_run))
        first = group[0]
        for other in group[1:]:
            if first.status == "ok" and other.status == "ok":
                row, rs = ratio_row(first, other, show_cpu, show_run)
                rows.append(row)
                ratios.append(
                    {
                        "run": run,
                        "acks": acks,
                        "numerator": first.target,
                        "denominator": other.target,
                        **rs,
                    }
                )
    summary_rows = []
    if args.repeat > 1 and len(targets) > 1:
        for acks in acks_list:
            for other in targets[1:]:
                rs = [x for x in ratios if x["acks"] == acks and x["denominator"] == other.name]
                if rs:
                    summary_rows.append(
                        [f"median ratio {targets[0].name}/{other.name}", acks, str(len(rs))]
                        + [_f(median([x[f] for x in rs]), ".2f") for f in RATIO_FIELDS]
                    )

    print()
    print(
        f"produce_fetch  {started:%Y-%m-%d %H:%M %Z}  {platform.node()}  {os.cpu_count()} cpus  "
        f"records={args.records} size={args.size} partitions={args.partitions} "
        f"compression={args.compression} linger.ms={args.linger_ms:g} max-queue={args.max_queue}"
        + (f"  tidegate {git}" if args.spawn_tidegate and git else "")
    )
    print(_common.format_table(headers, rows))
    if summary_rows:
        print()
        print(
            _common.format_table(
                [
                    "",
                    "acks",
                    "runs",
                    "produce rec/s",
                    "produce MB/s",
                    "p50 ms",
                    "p99 ms",
                    "fetch rec/s",
                    "fetch MB/s",
                ],
                summary_rows,
            )
        )
    print(
        "rec/s and MB/s: higher is better; p50/p99 = produce latency (produce() to ack) in ms; "
        "ratios are first/other"
        + (
            "; cpu = broker CPU seconds during each phase, rss = broker RSS after the case"
            if show_cpu
            else ""
        )
    )
    sys.stdout.flush()
    bad = [r for r in results if r.status != "ok"]
    for r in bad:
        print(f"!!! {r.target} acks={r.acks} run {r.run}: {r.status}: {r.error}", file=sys.stderr)
    for r in results:
        for nt in r.notes:
            print(f"note {r.target} acks={r.acks} run {r.run}: {nt}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"meta": meta, "results": [asdict(r) for r in results], "ratios": ratios},
                fh,
                indent=2,
                default=str,
            )
        log(f"wrote {args.json}")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
