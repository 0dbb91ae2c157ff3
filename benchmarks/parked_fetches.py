"""N concurrent long-poll fetches parked on one broker: memory, idle CPU, wake-all time.

Issue 3 asks that 10,000 long-poll fetches parked on one broker hold little memory
and near-zero CPU while idle. This benchmark:

1. creates a fresh one-partition topic (confluent-kafka AdminClient) and notes the
   broker's RSS (psutil);
2. opens ``--fetches`` TCP connections from one asyncio process and notes the RSS
   again (the cost of an idle connection);
3. sends one Fetch (v4, hand-encoded: offset 0 of the empty partition, min_bytes 1,
   max_wait ``--max-wait-ms``) on each, waits until the broker's metrics endpoint
   reports them all parked (``numdelayedoperations{delayedOperation="Fetch"}``) and
   notes the RSS (the cost of a parked fetch);
4. measures the broker's CPU time (user+system, psutil) over an idle window of
   ``--idle-s`` seconds, during which nothing may answer;
5. produces one record (confluent-kafka, acks=1) and measures how long until every
   one of the N fetches has answered with that record.

It speaks the wire protocol only, so it runs against any Kafka-compatible broker
(``--bootstrap``; ``--pid`` for the memory and CPU figures, ``--metrics-url`` to
know when all are parked, else it waits ``--settle-s``). ``--spawn`` starts its own
tidegate with metrics on and a file-descriptor limit large enough for N connections.

    .venv/bin/python benchmarks/parked_fetches.py --spawn --fetches 10000
    .venv/bin/python benchmarks/parked_fetches.py --bootstrap 127.0.0.1:9092 --pid 1234 \\
        --metrics-url http://127.0.0.1:9404/metrics

``measure()`` is also what ``tests/integration/test_purgatory.py`` runs, smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import struct
import sys
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

FETCH_GAUGE = (
    'kafka_server_delayedoperationpurgatory_numdelayedoperations{delayedOperation="Fetch"}'
)
CONNECT_CONCURRENCY = 256


# -- wire ------------------------------------------------------------------------------


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def fetch_v4_frame(
    topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes: int = 1
) -> bytes:
    """A size-prefixed Fetch v4 request (non-flexible: easy to encode by hand)."""
    header = struct.pack(">hhi", 1, 4, 1) + _string("parked-fetches")
    body = (
        struct.pack(">iiiib", -1, max_wait_ms, min_bytes, 1 << 20, 0)
        + struct.pack(">i", 1)
        + _string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iqi", partition, offset, 1 << 20)
    )
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def parse_fetch_v4(data: bytes) -> tuple[int, int]:
    """(error code, record bytes) of the first partition of a Fetch v4 response body
    (``data`` starts at the correlation id)."""
    pos = 4 + 4  # correlation id, throttle time
    (ntopics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    assert ntopics >= 1, "no topic in the fetch response"
    (tlen,) = struct.unpack_from(">h", data, pos)
    pos += 2 + tlen
    (nparts,) = struct.unpack_from(">i", data, pos)
    pos += 4
    assert nparts >= 1, "no partition in the fetch response"
    _pidx, error, _hw, _lso, naborted = struct.unpack_from(">ihqqi", data, pos)
    pos += 4 + 2 + 8 + 8 + 4
    if naborted > 0:
        pos += naborted * 16
    (rlen,) = struct.unpack_from(">i", data, pos)
    return error, max(rlen, 0)


# -- broker-side probes -------------------------------------------------------------------


def scrape_gauge(url: str, name: str = FETCH_GAUGE) -> float | None:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


class Probe:
    """RSS and CPU seconds of the broker process (None without a pid)."""

    def __init__(self, pid: int | None) -> None:
        self.proc = psutil.Process(pid) if pid else None

    def rss(self) -> int | None:
        return self.proc.memory_info().rss if self.proc else None

    def cpu(self) -> float | None:
        """CPU seconds, user + system: the scheduler's nanosecond count of every thread
        (``/proc/PID/task/*/schedstat``) on Linux, else psutil's (10 ms ticks there,
        too coarse for a wake-up of a few hundred ms)."""
        if not self.proc:
            return None
        try:
            total = 0
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0])
            return total / 1e9
        except (OSError, ValueError, IndexError):
            t = self.proc.cpu_times()
            return t.user + t.system


def raise_nofile(want: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward ``want`` (up to the hard limit,
    or beyond it when running as root); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    target = want if hard == resource.RLIM_INFINITY or hard >= want else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, max(target, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(target, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def prlimit_nofile(pid: int, want: int) -> int | None:
    """``prlimit --nofile`` on the broker: raise its soft limit toward ``want``."""
    try:
        p = psutil.Process(pid)
        soft, hard = p.rlimit(psutil.RLIMIT_NOFILE)
        if soft < want:
            new_hard = hard if hard == psutil.RLIM_INFINITY or hard >= want else want
            try:
                p.rlimit(psutil.RLIMIT_NOFILE, (want, new_hard))
            except (psutil.Error, OSError, ValueError):
                p.rlimit(psutil.RLIMIT_NOFILE, (min(want, hard), hard))
        return p.rlimit(psutil.RLIMIT_NOFILE)[0]
    except (psutil.Error, OSError):
        return None


# -- the measurement -----------------------------------------------------------------------


@dataclass
class Result:
    fetches: int
    max_wait_ms: int
    idle_s: float
    rss_before: int | None = None
    rss_connected: int | None = None
    rss_parked: int | None = None
    rss_after: int | None = None
    parked_seen: float | None = None  # the gauge when all were sent and settled
    park_s: float = 0.0  # from the first fetch sent to all seen parked
    connect_s: float = 0.0
    idle_cpu_s: float | None = None
    idle_wall_s: float = 0.0
    answered_early: int = 0
    wake_first_ms: float | None = None
    wake_p50_ms: float | None = None
    wake_p99_ms: float | None = None
    wake_all_ms: float | None = None
    wake_cpu_s: float | None = None
    produce_ack_ms: float | None = None  # the wake-up record's produce, acks=1
    answered: int = 0
    answered_with_record: int = 0
    errors: dict = field(default_factory=dict)

    def per_fetch(self, a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else (b - a) / self.fetches

    @property
    def idle_cpu_pct(self) -> float | None:
        if self.idle_cpu_s is None or not self.idle_wall_s:
            return None
        return 100.0 * self.idle_cpu_s / self.idle_wall_s


def create_topic(bootstrap: str, topic: str) -> None:
    _common.create_topics(bootstrap, {topic: 1})


async def _open(host: str, port: int, sem: asyncio.Semaphore):
    async with sem:
        for attempt in range(5):
            try:
                return await asyncio.open_connection(host, port)
            except OSError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))


async def _await_response(reader: asyncio.StreamReader, times: list, results: list, i: int) -> None:
    head = await reader.readexactly(4)
    (size,) = struct.unpack(">i", head)
    data = await reader.readexactly(size)
    times[i] = time.monotonic()
    results[i] = parse_fetch_v4(data)


async def measure(
    bootstrap: str,
    *,
    fetches: int,
    max_wait_ms: int = 30_000,
    idle_s: float = 10.0,
    pid: int | None = None,
    metrics_url: str | None = None,
    settle_s: float = 5.0,
    topic: str | None = None,
    log=print,
) -> Result:
    """Park ``fetches`` long polls on a fresh topic, measure, wake them with one record."""
    from confluent_kafka import Producer

    host, port_s = bootstrap.rsplit(":", 1)
    port = int(port_s)
    topic = topic or f"parked-{uuid.uuid4().hex[:8]}"
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, create_topic, bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "log_level": 0})
    producer.list_topics(topic, timeout=10)  # connected and metadata known before t0
    probe = Probe(pid)
    res = Result(fetches, max_wait_ms, idle_s)
    baseline = 0.0
    if metrics_url:
        baseline = scrape_gauge(metrics_url) or 0.0
    await asyncio.sleep(0.5)
    res.rss_before = probe.rss()

    sem = asyncio.Semaphore(CONNECT_CONCURRENCY)
    t = time.monotonic()
    conns = await asyncio.gather(*(_open(host, port, sem) for _ in range(fetches)))
    res.connect_s = time.monotonic() - t
    await asyncio.sleep(1.0)  # let the broker accept and settle
    res.rss_connected = probe.rss()
    log(f"{fetches} connections open in {res.connect_s:.1f} s")

    frame = fetch_v4_frame(topic, 0, 0, max_wait_ms)
    times: list[float | None] = [None] * fetches
    results: list[tuple[int, int] | None] = [None] * fetches
    readers = []
    t_park = time.monotonic()
    for i, (reader, writer) in enumerate(conns):
        writer.write(frame)
        readers.append(asyncio.ensure_future(_await_response(reader, times, results, i)))
        if i % 512 == 511:
            await asyncio.sleep(0)  # let the transports flush
    # all parked: the broker's gauge says so (else give it --settle-s)
    deadline = t_park + max(60.0, fetches / 200)
    if metrics_url:
        seen = 0.0
        while time.monotonic() < deadline:
            seen = await loop.run_in_executor(None, scrape_gauge, metrics_url) or 0.0
            if seen - baseline >= fetches:
                break
            await asyncio.sleep(0.25)
        res.parked_seen = seen - baseline
    else:
        await asyncio.sleep(settle_s)
    res.park_s = time.monotonic() - t_park
    log(f"parked: gauge {res.parked_seen} after {res.park_s:.1f} s")
    if res.park_s + idle_s + 1 > max_wait_ms / 1000:
        log(f"warning: parking took {res.park_s:.1f} s; the idle window may reach the max wait")
    await asyncio.sleep(0.5)
    res.rss_parked = probe.rss()

    # idle window: nothing runs in this process either (readers are blocked)
    c0, w0 = probe.cpu(), time.monotonic()
    await asyncio.sleep(idle_s)
    c1, w1 = probe.cpu(), time.monotonic()
    res.idle_wall_s = w1 - w0
    res.idle_cpu_s = None if c0 is None or c1 is None else c1 - c0
    res.answered_early = sum(1 for x in times if x is not None)
    log(f"idle {res.idle_wall_s:.1f} s: broker CPU {res.idle_cpu_s}")

    # wake them all with one record
    acked: list[float] = []

    def produce_one() -> float:
        t0 = time.monotonic()
        producer.produce(
            topic,
            value=b"wake up",
            partition=0,
            on_delivery=lambda e, m: acked.append(time.monotonic()),
        )
        if producer.flush(30) != 0:
            raise RuntimeError("the wake-up record was not delivered")
        return t0

    c0 = probe.cpu()
    t0 = await loop.run_in_executor(None, produce_one)
    done, pending = await asyncio.wait(readers, timeout=max(30.0, fetches / 500))
    c1 = probe.cpu()
    res.wake_cpu_s = None if c0 is None or c1 is None else c1 - c0
    res.produce_ack_ms = (acked[0] - t0) * 1000 if acked else None
    lat = sorted((x - t0) * 1000 for x in times if x is not None)
    res.answered = len(lat)
    if lat:
        res.wake_first_ms = lat[0]
        res.wake_p50_ms = _common.percentile(lat, 50)
        res.wake_p99_ms = _common.percentile(lat, 99)
        res.wake_all_ms = lat[-1] if res.answered == fetches else None
    for r in results:
        if r is None:
            continue
        err, nbytes = r
        if err:
            res.errors[err] = res.errors.get(err, 0) + 1
        elif nbytes > 0:
            res.answered_with_record += 1
    for f in pending:
        f.cancel()
    for f in done:
        if not f.cancelled() and f.exception() is not None:
            res.errors[repr(f.exception())] = res.errors.get(repr(f.exception()), 0) + 1
    for _reader, writer in conns:
        writer.close()
    await asyncio.sleep(1.0)
    res.rss_after = probe.rss()
    return res


def table(res: Result) -> str:
    def mib(v: int | None) -> str:
        return "n/a" if v is None else f"{v / 2**20:.1f} MiB"

    def kib(v: float | None) -> str:
        return "n/a" if v is None else f"{v / 1024:.2f} KiB"

    def msf(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f} ms"

    rows = [
        ["parked fetches", f"{res.fetches}"],
        ["max wait", f"{res.max_wait_ms} ms"],
        ["broker RSS before", mib(res.rss_before)],
        ["broker RSS, N connections open", mib(res.rss_connected)],
        ["broker RSS, N fetches parked", mib(res.rss_parked)],
        ["RSS per connection", kib(res.per_fetch(res.rss_before, res.rss_connected))],
        [
            "RSS per parked fetch (on its connection)",
            kib(res.per_fetch(res.rss_connected, res.rss_parked)),
        ],
        ["RSS per parked long-poll, total", kib(res.per_fetch(res.rss_before, res.rss_parked))],
        ["parked (metrics gauge)", "n/a" if res.parked_seen is None else f"{res.parked_seen:.0f}"],
        ["time to park all", f"{res.park_s:.1f} s"],
        ["idle window", f"{res.idle_wall_s:.1f} s"],
        ["broker CPU while idle", "n/a" if res.idle_cpu_s is None else f"{res.idle_cpu_s:.3f} s"],
        ["  = of one core", "n/a" if res.idle_cpu_pct is None else f"{res.idle_cpu_pct:.2f} %"],
        ["answered during the idle window", f"{res.answered_early}"],
        [
            "answered after one produce",
            f"{res.answered} (with the record: {res.answered_with_record})",
        ],
        ["the produce acknowledged (acks=1)", msf(res.produce_ack_ms)],
        ["first answer after the produce", msf(res.wake_first_ms)],
        ["median answer", msf(res.wake_p50_ms)],
        ["p99 answer", msf(res.wake_p99_ms)],
        ["all N answered", msf(res.wake_all_ms)],
        ["broker CPU to wake all", "n/a" if res.wake_cpu_s is None else f"{res.wake_cpu_s:.2f} s"],
        ["broker RSS after all answered and closed", mib(res.rss_after)],
        ["errors", json.dumps(res.errors) if res.errors else "none"],
    ]
    return _common.format_table(["measure", "value"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--fetches", type=int, default=10_000)
    p.add_argument("--max-wait-ms", type=int, default=30_000)
    p.add_argument("--idle-s", type=float, default=10.0)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--spawn", action="store_true", help="start a tidegate with metrics on")
    g.add_argument("--bootstrap", help="host:port of a running broker")
    p.add_argument("--pid", type=int, help="the running broker's pid (RSS, CPU)")
    p.add_argument("--metrics-url", help="its /metrics URL (to see when all are parked)")
    p.add_argument("--settle-s", type=float, default=5.0, help="wait without --metrics-url")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)

    want = args.fetches + 1024
    got = raise_nofile(want)
    if got < want:
        print(f"warning: RLIMIT_NOFILE is {got}, {want} wanted", file=sys.stderr)
    spawned = None
    try:
        if args.spawn:
            mport = _common.free_port()
            args.metrics_url = f"http://127.0.0.1:{mport}/metrics"
            # the broker inherits the raised limit; prlimit makes sure
            spawned = _common.SpawnedTidegate(
                overrides=[f"metrics.listener=http://127.0.0.1:{mport}"]
            ).start()
            args.bootstrap, args.pid = spawned.bootstrap, spawned.pid
            lim = prlimit_nofile(spawned.pid, want)
            print(f"spawned tidegate pid {spawned.pid} on {spawned.bootstrap}, nofile {lim}")
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        res = runner(
            measure(
                args.bootstrap,
                fetches=args.fetches,
                max_wait_ms=args.max_wait_ms,
                idle_s=args.idle_s,
                pid=args.pid,
                metrics_url=args.metrics_url,
                settle_s=args.settle_s,
            )
        )
    finally:
        if spawned is not None:
            errs = spawned.error_lines()
            spawned.cleanup()
            if errs:
                print("broker errors:\n  " + "\n  ".join(errs), file=sys.stderr)
    print()
    print(table(res))
    print(
        f"\nload average {psutil.getloadavg()}, {psutil.cpu_count()} cores, commit {_common.git_describe()}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(res), indent=2))
    ok = res.answered == res.fetches and res.answered_early == 0 and not res.errors
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
