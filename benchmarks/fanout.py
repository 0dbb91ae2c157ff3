"""Fan-out: one produce wakes N parked long polls (issue 29).

N raw Fetch v4 long polls (one per connection, at the log end, ``--max-wait-ms``) are
parked on one broker from ``--clients`` client processes, spread over ``--partitions``
partitions of a fresh topic; then one produce request (one record per partition,
confluent-kafka, acks=1) wakes them. Measured: the wake-up latency of every answer
from the produce being sent to the answer reaching its client socket (p50 / p99 /
max; the kernel's receive timestamp, ``SO_TIMESTAMPNS``, so that client processes
reading thousands of sockets on a busy machine do not count against the broker) and
to the client reading it (``read p99``), the broker's CPU from the produce to the last
answer, its RSS per parked connection (connections and fetches together), and
whether every answer of one partition is the same bytes (they are: same request,
same correlation id).

The wire pieces (the Fetch v4 frame, its parser, RSS/CPU probes, descriptor limits,
the metrics gauge) are ``parked_fetches.py``'s. Each case runs on a fresh broker:
``--spawn`` starts tidegate (metrics on), ``--peer`` the peer broker
(/work/shared/tools/peer-broker.sh), ``--bootstrap``/``--pid`` a running one.
``--profile OUT`` records the broker with py-spy (if installed) during the wake-up.

    .venv/bin/python benchmarks/fanout.py --spawn --fetches 1000 10000 18000 --partitions 1 8
    .venv/bin/python benchmarks/fanout.py --spawn --peer --fetches 1000 --partitions 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import parked_fetches as pf

PEER_SCRIPT = "/work/shared/tools/peer-broker.sh"


# -- a client process ----------------------------------------------------------------

#: Linux's SO_TIMESTAMPNS (and SCM_TIMESTAMPNS): the kernel stamps each received segment
#: with the wall-clock time it reached the socket (a struct timespec)
SO_TIMESTAMPNS = 35


def client_main(bootstrap: str, topic: str, partitions: list[int], max_wait_ms: int, pipe) -> None:
    """One client process: a blocking connection per long poll, each sent its Fetch, then
    every answer read with epoll. An answer's time is when its first segment reached the
    socket (the kernel's receive timestamp, wall clock), so a client process that reads
    its thousands of sockets late does not count against the broker; when it was read
    is reported too."""
    pf.raise_nofile(len(partitions) + 256)  # the soft limit up to the hard one
    host, port_s = bootstrap.rsplit(":", 1)
    frames = {p: pf.fetch_v4_frame(topic, p, 0, max_wait_ms) for p in set(partitions)}
    socks = []
    for p in partitions:
        for attempt in range(5):
            try:
                s = socket.create_connection((host, int(port_s)), timeout=30)
                break
            except OSError:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.sendall(frames[p])
        socks.append(s)
    n = len(socks)
    arrived: list[float | None] = [None] * n
    read: list[float | None] = [None] * n
    bodies: list[bytearray] = [bytearray() for _ in range(n)]
    sel = selectors.EpollSelector()
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    pipe.send(("sent", n))
    pending = n
    deadline = time.monotonic() + max_wait_ms / 1000 + 30
    while pending and time.monotonic() < deadline:
        for key, _events in sel.select(1.0):
            i = key.data
            try:
                data, anc, _flags, _addr = key.fileobj.recvmsg(65536, 256)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if arrived[i] is None:
                for level, kind, stamp in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = struct.unpack("qq", stamp[:16])
                        arrived[i] = sec + nsec / 1e9
            body = bodies[i]
            body += data
            if not data or (len(body) >= 4 and len(body) >= 4 + int.from_bytes(body[:4], "big")):
                read[i] = time.time()
                sel.unregister(key.fileobj)
                pending -= 1
    digests: dict[int, dict[str, int]] = {}
    records = errors = 0
    for p, body, r in zip(partitions, bodies, read, strict=True):
        if r is None or len(body) < 8:
            continue
        error, nbytes = pf.parse_fetch_v4(bytes(body[4:]))
        errors += error != 0
        records += nbytes > 0
        d = digests.setdefault(p, {})
        h = hashlib.sha1(body).hexdigest()
        d[h] = d.get(h, 0) + 1
    pipe.send(("done", arrived, read, records, errors, digests))
    for s in socks:
        s.close()


# -- one case ------------------------------------------------------------------------


@dataclass
class Case:
    broker: str
    fetches: int
    partitions: int
    clients: int
    answered: int = 0
    with_record: int = 0
    errors: int = 0
    distinct_bodies: int = 0  # distinct response bytes over all partitions (1 per partition expected)
    park_s: float = 0.0
    rss_per_conn: float | None = None  # bytes per parked connection (connect + park)
    wake_p50_ms: float | None = None  # from the produce to an answer reaching its socket
    wake_p99_ms: float | None = None
    wake_max_ms: float | None = None
    read_p99_ms: float | None = None  # ... to the client process reading it (client-bound)
    wake_cpu_ms: float | None = None
    produce_ack_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def _produce(bootstrap: str, topic: str, partitions: int) -> tuple[float, float]:
    """One produce request carrying one record per partition; (sent, acknowledged)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 50, "log_level": 0})
    producer.list_topics(topic, timeout=10)
    acked: list[float] = []
    t0 = time.time()  # wall clock: the kernel's receive timestamps are
    for p in range(partitions):
        producer.produce(topic, b"wake up", partition=p, on_delivery=lambda e, m: acked.append(time.time()))
    if producer.flush(30) != 0:
        raise RuntimeError("the wake-up records were not delivered")
    return t0, max(acked)


def _start_profile(pid: int, out: str | None) -> subprocess.Popen | None:
    spy = shutil.which("py-spy") or (os.environ.get("PY_SPY") or None)
    if out is None or spy is None:
        return None
    return subprocess.Popen(
        [spy, "record", "-p", str(pid), "-r", "1000", "-f", "raw", "-o", out, "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def run_case(bootstrap: str, pid: int | None, metrics_url: str | None, broker: str, fetches: int,
             partitions: int, clients: int, max_wait_ms: int, profile: str | None) -> Case:
    topic = f"fanout-{uuid.uuid4().hex[:8]}"
    _common.create_topics(bootstrap, {topic: partitions})
    probe = pf.Probe(pid)
    case = Case(broker, fetches, partitions, clients)
    baseline = (pf.scrape_gauge(metrics_url) or 0.0) if metrics_url else 0.0
    time.sleep(0.5)
    rss0 = probe.rss()
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for c in range(clients):
        mine = [i % partitions for i in range(c, fetches, clients)]
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=client_main, args=(bootstrap, topic, mine, max_wait_ms, child), daemon=True)
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    t = time.monotonic()
    for pipe in pipes:
        assert pipe.recv()[0] == "sent"
    if metrics_url:
        deadline = t + max(60.0, fetches / 200)
        while time.monotonic() < deadline and (pf.scrape_gauge(metrics_url) or 0.0) - baseline < fetches:
            time.sleep(0.25)
    else:
        time.sleep(5.0)
    case.park_s = time.monotonic() - t
    time.sleep(1.0)
    rss1 = probe.rss()
    if rss0 is not None and rss1 is not None:
        case.rss_per_conn = (rss1 - rss0) / fetches
    spy = _start_profile(pid, profile) if pid else None
    if spy is not None:
        time.sleep(1.0)  # py-spy attached
    c0 = probe.cpu()
    t0, acked = _produce(bootstrap, topic, partitions)
    case.produce_ack_ms = (acked - t0) * 1000
    times: list[float] = []
    reads: list[float] = []
    digests: set[str] = set()
    for pipe in pipes:
        if not pipe.poll(max_wait_ms / 1000 + 60):
            case.notes.append("a client process did not report")
            continue
        _tag, ts, rs, records, errors, dg = pipe.recv()
        times += [x for x in ts if x is not None]
        reads += [x for x in rs if x is not None]
        case.with_record += records
        case.errors += errors
        for d in dg.values():
            digests.update(d)
    c1 = probe.cpu()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    for proc in procs:
        proc.join(10)
    # the CPU of the wake-up: from the produce to the last answer (c1 is read after the
    # clients reported, a few ms later; the broker is idle meanwhile)
    if c0 is not None and c1 is not None:
        case.wake_cpu_ms = (c1 - c0) * 1000
    lat = sorted((x - t0) * 1000 for x in times)
    case.answered = len(reads)
    if reads:
        case.read_p99_ms = _common.percentile(sorted((x - t0) * 1000 for x in reads), 99)
    case.distinct_bodies = len(digests)
    if lat:
        case.wake_p50_ms = _common.percentile(lat, 50)
        case.wake_p99_ms = _common.percentile(lat, 99)
        case.wake_max_ms = lat[-1] if len(lat) == fetches else None
    return case


# -- brokers and the table -----------------------------------------------------------


def _spawn(kind: str, fetches: int):
    want = fetches + 1024
    if kind == "peer":
        b = _common.SpawnedPeer(PEER_SCRIPT).start()
        pf.prlimit_nofile(b.pid, want)
        return b, None
    mport = _common.free_port()
    b = _common.SpawnedTidegate(overrides=[f"metrics.listener=http://127.0.0.1:{mport}"], log_level="WARNING")
    b.start()
    pf.prlimit_nofile(b.pid, want)
    return b, f"http://127.0.0.1:{mport}/metrics"


def table(cases: list[Case]) -> str:
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f}"

    groups: dict[tuple[str, int, int], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.broker, c.fetches, c.partitions), []).append(c)

    def med(cs: list[Case], attr: str) -> str:
        vals = [getattr(c, attr) for c in cs if getattr(c, attr) is not None]
        if not vals:
            return "n/a"
        m = statistics.median(vals)
        if attr == "rss_per_conn":
            return f"{m / 1024:.1f} KB" + (f" ({min(vals) / 1024:.1f}-{max(vals) / 1024:.1f})" if len(vals) > 1 else "")
        return ms(m) + (f" ({ms(min(vals))}-{ms(max(vals))})" if len(vals) > 1 else "")

    rows = []
    for (broker, n, parts), cs in groups.items():
        answered = "/".join(str(c.answered) for c in cs)
        rows.append([broker, str(n), str(parts), str(len(cs)), answered, med(cs, "wake_p50_ms"),
                     med(cs, "wake_p99_ms"), med(cs, "wake_max_ms"), med(cs, "read_p99_ms"), med(cs, "wake_cpu_ms"),
                     med(cs, "rss_per_conn"), str(max(c.distinct_bodies for c in cs))])
    return _common.format_table(
        ["broker", "polls", "partitions", "runs", "answered", "p50 ms", "p99 ms", "max ms", "read p99 ms",
         "wake CPU ms", "RSS/conn", "distinct bodies"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fetches", type=int, nargs="+", default=[1000, 10_000])
    p.add_argument("--partitions", type=int, nargs="+", default=[1])
    p.add_argument("--clients", type=int, default=4, help="client processes")
    p.add_argument("--runs", type=int, default=1, help="runs of each case (fresh broker each)")
    p.add_argument("--max-wait-ms", type=int, default=30_000)
    p.add_argument("--spawn", action="store_true", help="start a tidegate per case")
    p.add_argument("--peer", action="store_true", help="also the peer broker (1,000 polls at most)")
    p.add_argument("--bootstrap", help="a running broker instead")
    p.add_argument("--pid", type=int)
    p.add_argument("--metrics-url")
    p.add_argument("--profile", help="py-spy raw output of the wake-up (tidegate), per case: OUT.N.P.txt")
    p.add_argument("--json")
    args = p.parse_args(argv)
    kinds = (["tidegate"] if args.spawn else []) + (["peer"] if args.peer else [])
    if not kinds and not args.bootstrap:
        p.error("--spawn, --peer or --bootstrap")
    cases: list[Case] = []
    for _run in range(args.runs):
        for n in args.fetches:
            for parts in args.partitions:
                for kind in kinds or ["given"]:
                    if kind == "peer" and n > 1000:
                        continue
                    broker = None
                    try:
                        if kind == "given":
                            bootstrap, pid, murl = args.bootstrap, args.pid, args.metrics_url
                        else:
                            broker, murl = _spawn(kind, n)
                            bootstrap, pid = broker.bootstrap, broker.pid
                        prof = f"{args.profile}.{n}.{parts}.txt" if args.profile and kind == "tidegate" else None
                        case = run_case(bootstrap, pid, murl, kind, n, parts, args.clients, args.max_wait_ms, prof)
                    finally:
                        if broker is not None:
                            broker.cleanup()
                    print(json.dumps(asdict(case)), flush=True)
                    cases.append(case)
    print()
    print(table(cases))
    print(f"\nload average {psutil.getloadavg()}, {psutil.cpu_count()} cores, commit {_common.git_describe()}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(c) for c in cases], indent=2))
    return 0 if all(c.answered == c.fetches for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
