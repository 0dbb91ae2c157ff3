#!/usr/bin/env python3
"""KIP-72 memory flood: many connections send large Produce requests at once.

The seed scenario of KIP-72 ("a sudden spike of very large request batches ... caused
OOM"): ``--connections`` raw TCP connections each send ``--requests-per-conn`` Produce
requests of ``--request-mib`` MiB (one record batch each, acks=1, one request in flight
per connection: the next is sent when the previous is answered) while the broker's RSS
is sampled every few ms by pid. A small well-behaved client (an ApiVersions round trip
every ``--probe-interval-ms`` on its own connection) measures how a light client is
served during the flood.

Works against any Kafka-compatible broker:

    python benchmarks/memory_flood.py --target tidegate=127.0.0.1:9092 --pid tidegate=1234
    python benchmarks/memory_flood.py --spawn                      # the three cases below

``--spawn`` runs, one after the other on fresh processes: tidegate with a 64 MiB pool
(``queued.max.request.bytes=67108864``), tidegate without a pool
(``queued.max.request.bytes=-1``) and the peer broker (Tansu, via
``../shared/tools/peer-broker.sh``; Tansu keeps every record in memory and never frees
it, so its RSS grows by at least the data produced whatever the request bound; it is
restarted before its run). It prints, per target: baseline and peak RSS (sampled, and
the kernel's exact high-water mark VmHWM when /proc allows resetting it), growth over
the baseline, throughput (MB/s of request bytes answered, requests/s), completion
fairness (min/max completions per connection, at half time and at the end), request
latency and the probe's latency; and draws RSS over time, one line per target, to
``docs/memory-flood.png``.

The flood engine (:func:`run_flood`) is also used by
``tests/integration/test_memory_bound.py``. It needs only the standard library, psutil,
and tidegate's record-batch builder (``tidegate.record.batch_builder``) to make one valid
batch, built once; the Produce (v3) and ApiVersions (v0) requests are encoded by hand
here so that nothing in the client path depends on the broker under test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import socket
import statistics
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

MiB = 1024 * 1024
MB = 1e6

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id

PRODUCE_VERSION = 3  # the oldest Produce version with v2 record batches; not flexible
API_VERSIONS_VERSION = 0


# ----------------------------------------------------------------------------- encoding


def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


def record_batch(value_size: int) -> bytes:
    """One uncompressed v2 batch holding one record of ``value_size`` bytes."""
    from tidegate.record.batch_builder import Record, build_batch

    value = (b"kip-72 flood " * (value_size // 13 + 1))[:value_size]
    return bytes(build_batch([Record(value=value, timestamp=int(time.time() * 1000))]))


@dataclass
class Request:
    """A request split so that only the correlation id changes between sends.

    The frame is ``_HEAD(size, api_key, version, correlation_id) + tail``; ``tail``
    (client id and body, megabytes for Produce) is built once and shared.
    """

    api_key: int
    version: int
    tail: bytes

    @property
    def frame_size(self) -> int:
        return _HEAD.size + len(self.tail)

    def head(self, correlation_id: int) -> bytes:
        return _HEAD.pack(self.frame_size - 4, self.api_key, self.version, correlation_id)


def produce_request(
    topic: str, partition: int, batch: bytes, acks: int = 1, timeout_ms: int = 30_000,
    client_id: str = "memory-flood",
) -> Request:
    body = (
        _string(client_id)
        + _string(None)  # transactional_id
        + struct.pack(">hi", acks, timeout_ms)
        + _I32.pack(1)
        + _string(topic)
        + _I32.pack(1)
        + _I32.pack(partition)
        + _I32.pack(len(batch))
    )
    return Request(0, PRODUCE_VERSION, body + batch)


def request_for_size(topic: str, partition: int, request_bytes: int, acks: int = 1) -> Request:
    """A Produce request whose whole frame (size prefix included) is ``request_bytes``."""
    empty = produce_request(topic, partition, b"", acks)
    batch_overhead = len(record_batch(1)) - 1
    value_size = request_bytes - empty.frame_size - batch_overhead
    if value_size < 1:
        raise ValueError(f"request size {request_bytes} too small")
    req = produce_request(topic, partition, record_batch(value_size), acks)
    # varints in the record header grow with the value size; trim to the exact size
    excess = req.frame_size - request_bytes
    if excess:
        req = produce_request(topic, partition, record_batch(value_size - excess), acks)
    return req


def api_versions_request(client_id: str = "memory-flood-probe") -> Request:
    return Request(18, API_VERSIONS_VERSION, _string(client_id))


def produce_errors(response: bytes | bytearray) -> list[int]:
    """Error codes of a Produce v3 response body (after the 4-byte correlation id)."""
    errors = []
    pos = 4
    (ntopics,) = _I32.unpack_from(response, pos)
    pos += 4
    for _ in range(ntopics):
        (nlen,) = _I16.unpack_from(response, pos)
        pos += 2 + max(nlen, 0)
        (nparts,) = _I32.unpack_from(response, pos)
        pos += 4
        for _ in range(nparts):
            (err,) = _I16.unpack_from(response, pos + 4)
            errors.append(err)
            pos += 4 + 2 + 8 + 8
    return errors


# ----------------------------------------------------------------------------- sampling


def reset_peak_rss(pid: int) -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) of ``pid``; False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss(pid: int) -> int | None:
    """VmHWM of ``pid`` in bytes (Linux), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss(pid: int) -> int | None:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


class RssSampler(threading.Thread):
    """RSS of a process every ``interval`` seconds: (seconds since start, bytes)."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        super().__init__(daemon=True, name=f"rss-{pid}")
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self._halt = threading.Event()
        self._proc = psutil.Process(pid)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                value = self._proc.memory_info().rss
            except psutil.Error:
                return
            self.samples.append((time.monotonic() - self.t0, value))
            self._halt.wait(self.interval)

    def stop(self) -> list[tuple[float, int]]:
        self._halt.set()
        self.join(5)
        return self.samples


class Probe(threading.Thread):
    """A well-behaved client: one small request, wait for the answer, pause, repeat.

    Latency of each round trip goes to :attr:`latencies` (seconds); a round trip
    that takes longer than ``timeout`` counts in :attr:`timeouts` and reconnects.
    """

    def __init__(self, host: str, port: int, interval: float = 0.05, timeout: float = 60.0):
        super().__init__(daemon=True, name="probe")
        self.addr = (host, port)
        self.interval = interval
        self.timeout = timeout
        self.latencies: list[float] = []
        self.sent_at: list[float] = []
        self.timeouts = 0
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        req = api_versions_request()
        cid = 0
        sock = None
        while not self._halt.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection(self.addr, timeout=self.timeout)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                cid += 1
                t = time.monotonic()
                sock.sendall(req.head(cid) + req.tail)
                (size,) = _I32.unpack(_common.recv_exactly(sock, 4))
                data = _common.recv_exactly(sock, size)
                (got,) = _I32.unpack_from(data, 0)
                if got != cid:
                    raise RuntimeError(f"correlation id {got}, expected {cid}")
                self.sent_at.append(t)
                self.latencies.append(time.monotonic() - t)
            except TimeoutError:
                self.timeouts += 1
                sock.close()
                sock = None
            except (OSError, RuntimeError) as exc:
                self.errors.append(repr(exc))
                if sock is not None:
                    sock.close()
                sock = None
                self._halt.wait(0.2)
            self._halt.wait(self.interval)
        if sock is not None:
            sock.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(self.timeout + 5)



# ----------------------------------------------------------------------------- flood


@dataclass
class FloodResult:
    connections: int
    request_bytes: int
    requests_per_conn: int
    elapsed_s: float = 0.0
    completions: list[int] = field(default_factory=list)  # per connection, at the end
    half_completions: list[int] = field(default_factory=list)  # when half were answered
    sent: int = 0
    answered: int = 0
    unanswered: int = 0
    error_codes: dict[int, int] = field(default_factory=dict)
    closed_by_broker: int = 0
    latencies_s: list[float] = field(default_factory=list)
    # (seconds since the flood started, connection index) of every answer
    events: list[tuple[float, int]] = field(default_factory=list)
    first_send_s: float = 0.0

    @property
    def bytes_answered(self) -> int:
        return self.answered * self.request_bytes

    @property
    def mbps(self) -> float:
        return self.bytes_answered / MB / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def rps(self) -> float:
        return self.answered / self.elapsed_s if self.elapsed_s else 0.0


class _Conn:
    __slots__ = (
        "cid",
        "done",
        "idx",
        "inbuf",
        "need",
        "outstanding",
        "parts",
        "sending",
        "sent_at",
        "sock",
    )

    def __init__(self, idx: int, sock: socket.socket) -> None:
        self.idx = idx
        self.sock = sock
        self.cid = 0
        self.done = 0
        self.parts: list[memoryview] = []
        self.sending = False
        self.sent_at = 0.0
        self.inbuf = bytearray()
        self.need = 4
        self.outstanding = False


def raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def run_flood(
    host: str,
    port: int,
    requests: list[Request],
    connections: int = 200,
    requests_per_conn: int = 2,
    duration_s: float = 60.0,
    drain_timeout_s: float = 120.0,
    on_tick=None,
    sndbuf: int | None = None,
) -> FloodResult:
    """Connect ``connections`` sockets, then flood from one thread with a selector.

    Connection ``i`` sends ``requests[i % len(requests)]`` (new correlation id each
    time) up to ``requests_per_conn`` times (0: no limit), one in flight. New requests
    stop after ``duration_s``; requests already sent are then waited for up to
    ``drain_timeout_s`` more, and those still unanswered are counted in ``unanswered``.
    ``on_tick(seconds)`` is called about every 100 ms from the flood thread.
    """
    raise_fd_limit(connections + 256)
    size = requests[0].frame_size
    result = FloodResult(connections, size, requests_per_conn)
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []
    for i in range(connections):
        s = socket.create_connection((host, port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sndbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        s.setblocking(False)
        conns.append(_Conn(i, s))
    tails = [memoryview(r.tail) for r in requests]
    t0 = time.monotonic()
    stop_sending_at = t0 + duration_s
    give_up_at = stop_sending_at + drain_timeout_s
    half = None

    def start(c: _Conn, now: float) -> bool:
        if now >= stop_sending_at or (requests_per_conn and c.done >= requests_per_conn):
            return False
        c.cid += 1
        req = requests[c.idx % len(requests)]
        c.parts = [memoryview(req.head(c.cid)), tails[c.idx % len(tails)]]
        c.sending = True
        c.outstanding = True
        c.sent_at = now
        result.sent += 1
        return True

    now = time.monotonic()
    for c in conns:
        if start(c, now):
            sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        else:
            sel.register(c.sock, selectors.EVENT_READ, c)
    result.first_send_s = time.monotonic() - t0
    outstanding = sum(c.outstanding for c in conns)
    next_tick = t0
    while True:
        now = time.monotonic()
        if on_tick is not None and now >= next_tick:
            on_tick(now - t0)
            next_tick = now + 0.1
        if outstanding == 0 and (
            now >= stop_sending_at
            or (requests_per_conn and all(c.done >= requests_per_conn for c in conns))
        ):
            break
        if now >= give_up_at:
            break
        for key, mask in sel.select(timeout=0.1):
            c: _Conn = key.data
            if mask & selectors.EVENT_WRITE and c.sending:
                try:
                    n = c.sock.send(c.parts[0])
                except BlockingIOError:
                    n = 0
                except OSError:
                    result.closed_by_broker += 1
                    sel.unregister(c.sock)
                    c.sock.close()
                    outstanding -= 1
                    c.outstanding = False
                    continue
                c.parts[0] = c.parts[0][n:]
                if not len(c.parts[0]):
                    c.parts.pop(0)
                    if not c.parts:
                        c.sending = False
                        sel.modify(c.sock, selectors.EVENT_READ, c)
            if mask & selectors.EVENT_READ:
                try:
                    chunk = c.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    result.closed_by_broker += 1
                    sel.unregister(c.sock)
                    c.sock.close()
                    if c.outstanding:
                        outstanding -= 1
                        c.outstanding = False
                    continue
                c.inbuf += chunk
                while len(c.inbuf) >= 4:
                    (rsize,) = _I32.unpack_from(c.inbuf, 0)
                    if len(c.inbuf) < 4 + rsize:
                        break
                    body = bytes(c.inbuf[4 : 4 + rsize])
                    del c.inbuf[: 4 + rsize]
                    now = time.monotonic()
                    (got,) = _I32.unpack_from(body, 0)
                    if got != c.cid:
                        raise RuntimeError(
                            f"connection {c.idx}: correlation id {got}, expected {c.cid}"
                        )
                    for err in produce_errors(body):
                        result.error_codes[err] = result.error_codes.get(err, 0) + 1
                    c.done += 1
                    c.outstanding = False
                    outstanding -= 1
                    result.answered += 1
                    result.latencies_s.append(now - c.sent_at)
                    result.events.append((now - t0, c.idx))
                    total = connections * requests_per_conn if requests_per_conn else 0
                    if half is None and total and result.answered * 2 >= total:
                        half = [x.done for x in conns]
                    if start(c, now):
                        outstanding += 1
                        sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
    result.elapsed_s = time.monotonic() - t0
    result.unanswered = outstanding
    result.completions = [c.done for c in conns]
    if half is None:
        # time-bounded run: the counts at half of the elapsed time
        cut = result.elapsed_s / 2
        half = [0] * connections
        for t, i in result.events:
            if t <= cut:
                half[i] += 1
    result.half_completions = half
    for c in conns:
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
    sel.close()
    return result


# ----------------------------------------------------------------------------- statistics


def fairness(counts: list[int]) -> dict:
    """min, max, mean, Jain's index ((sum x)^2 / (n sum x^2); 1 = all equal) and the
    dispersion index var/mean (about 1 when connections are served in random order,
    0 when served round robin, far above 1 when some connections starve)."""
    n = len(counts)
    if not n:
        return {}
    mean = sum(counts) / n
    squares = sum(c * c for c in counts)
    var = statistics.pvariance(counts) if n > 1 else 0.0
    return {
        "min": min(counts),
        "max": max(counts),
        "mean": mean,
        "jain": (sum(counts) ** 2) / (n * squares) if squares else 1.0,
        "dispersion": var / mean if mean else 0.0,
    }


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile (0..1)."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


# ----------------------------------------------------------------------------- metrics


POOL_METRICS = (
    "kafka_network_socketserver_memorypoolavailable",
    "kafka_network_socketserver_memorypoolused",
    "kafka_network_socketserver_memorypoolavgdepletedpercent",
    "kafka_network_socketserver_memorypooldepletedtimetotal",
)


def scrape_pool(url: str, timeout: float = 5.0) -> dict[str, float]:
    """The KIP-72 gauges from a Prometheus text endpoint (tidegate's metrics.listener)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_socketserver_memorypool"):
            name, _, value = line.partition(" ")
            if name in POOL_METRICS:
                out[name] = float(value)
    return out


class MetricsScraper(threading.Thread):
    """Scrape the pool gauges every ``interval`` s: (seconds since start, gauges)."""

    def __init__(self, url: str, interval: float = 0.25) -> None:
        super().__init__(daemon=True, name="metrics-scraper")
        self.url = url
        self.interval = interval
        self.t0 = time.monotonic()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.samples.append((time.monotonic() - self.t0, scrape_pool(self.url)))
            except Exception as exc:  # noqa: BLE001 - report, keep sampling
                self.errors.append(repr(exc))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def series(self, name: str) -> list[float]:
        return [s[name] for _, s in self.samples if name in s]


# ----------------------------------------------------------------------------- one case


TOPIC = "memory-flood"
PARTITIONS = 4


def create_topic(bootstrap: str, topic: str, partitions: int, max_message_bytes: int) -> str:
    """Create the flood topic: large batches allowed, small segments and retention so a
    long flood does not fill the disk or the dirty page cache (which would make the
    broker wait for the disk instead of the network). Returns a note on what happened."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    configs = {
        "max.message.bytes": str(max_message_bytes),
        "segment.bytes": str(32 * MiB),
        "retention.bytes": str(32 * MiB),
    }
    for cfg in (configs, {}):
        fut = admin.create_topics([NewTopic(topic, partitions, 1, config=cfg)])[topic]
        try:
            fut.result(30)
            return "created" + ("" if cfg else " without configs")
        except Exception as exc:
            text = str(exc)
            if "TOPIC_ALREADY_EXISTS" in text or "already exists" in text:
                return "existed"
            if not cfg:
                raise
    return "?"


@dataclass
class CaseResult:
    name: str
    bootstrap: str
    pid: int | None
    note: str = ""
    status: str = "ok"
    error: str | None = None
    baseline_rss: int | None = None
    peak_rss_sampled: int | None = None
    peak_rss_hwm: int | None = None  # kernel VmHWM after a reset, None if not available
    end_rss: int | None = None
    flood: dict = field(default_factory=dict)
    completions: dict = field(default_factory=dict)
    half_completions: dict = field(default_factory=dict)
    latency_s: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    pool: dict = field(default_factory=dict)
    rss_series: list = field(default_factory=list)  # (s, MiB)

    @property
    def peak_rss(self) -> int | None:
        peaks = [p for p in (self.peak_rss_sampled, self.peak_rss_hwm) if p is not None]
        return max(peaks) if peaks else None

    @property
    def growth(self) -> int | None:
        if self.peak_rss is None or self.baseline_rss is None:
            return None
        return self.peak_rss - self.baseline_rss


def measure(
    name: str,
    bootstrap: str,
    pid: int | None,
    *,
    connections: int,
    request_bytes: int,
    requests_per_conn: int,
    duration_s: float,
    drain_timeout_s: float = 120.0,
    sndbuf: int | None = 1 * MiB,
    metrics_url: str | None = None,
    warmup: bool = True,
    log=print,
) -> tuple[CaseResult, FloodResult | None, Probe | None, MetricsScraper | None]:
    """One flood against one broker, with RSS sampling, the probe and (optionally) the
    pool metrics. The baseline RSS is taken after a warm-up (topic created, a few
    produce requests and probe round trips answered, so imports and first
    allocations are done) and one second of quiet."""
    host, port = bootstrap.rsplit(":", 1)
    port_i = int(port)
    res = CaseResult(name, bootstrap, pid)
    res.note = create_topic(bootstrap, TOPIC, PARTITIONS, max(16 * MiB, request_bytes))
    requests = [request_for_size(TOPIC, p, request_bytes) for p in range(PARTITIONS)]
    if warmup:
        w = run_flood(host, port_i, requests, connections=4, requests_per_conn=2,
                      duration_s=60, drain_timeout_s=60)
        if w.unanswered or w.closed_by_broker:
            raise RuntimeError(f"{name}: warm-up failed ({w.unanswered} unanswered, "
                               f"{w.closed_by_broker} closed by the broker)")
        probe = Probe(host, port_i, interval=0.01)
        probe.start()
        time.sleep(0.3)
        probe.stop()
        if metrics_url:
            scrape_pool(metrics_url)
        time.sleep(1.0)
    sampler = probe = scraper = None
    if pid is not None:
        res.baseline_rss = rss(pid)
        hwm_ok = reset_peak_rss(pid)
        sampler = RssSampler(pid, interval=0.01)
        sampler.start()
    if metrics_url:
        scraper = MetricsScraper(metrics_url)
        scraper.start()
    probe = Probe(host, port_i, interval=0.05)
    probe.start()
    log(f"[{name}] flood: {connections} connections x {request_bytes / MiB:g} MiB, "
        f"{requests_per_conn or 'unlimited'} per connection, at most {duration_s:g} s")
    flood = None
    try:
        flood = run_flood(host, port_i, requests, connections=connections,
                          requests_per_conn=requests_per_conn, duration_s=duration_s,
                          drain_timeout_s=drain_timeout_s, sndbuf=sndbuf)
    except Exception as exc:  # noqa: BLE001 - keep the case, report the failure
        res.status, res.error = "FAILED", repr(exc)
    finally:
        probe.stop()
        if scraper is not None:
            scraper.stop()
        if sampler is not None:
            samples = sampler.stop()
            res.peak_rss_sampled = max((v for _, v in samples), default=None)
            res.peak_rss_hwm = peak_rss(pid) if hwm_ok else None
            res.end_rss = rss(pid)
            res.rss_series = [(t, v / MiB) for t, v in samples]
    if flood is not None:
        if flood.unanswered or flood.closed_by_broker:
            res.status = "INCOMPLETE"
        res.flood = {
            "elapsed_s": flood.elapsed_s,
            "sent": flood.sent,
            "answered": flood.answered,
            "unanswered": flood.unanswered,
            "closed_by_broker": flood.closed_by_broker,
            "error_codes": {str(k): v for k, v in flood.error_codes.items()},
            "mbps": flood.mbps,
            "rps": flood.rps,
        }
        res.completions = fairness(flood.completions)
        res.half_completions = fairness(flood.half_completions)
        lat = flood.latencies_s
        res.latency_s = {"p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
                         "max": max(lat, default=None)}
    res.probe = {
        "round_trips": len(probe.latencies),
        "p50": quantile(probe.latencies, 0.5),
        "p99": quantile(probe.latencies, 0.99),
        "max": max(probe.latencies, default=None),
        "timeouts": probe.timeouts,
        "errors": probe.errors[:3],
    }
    if scraper is not None and scraper.samples:
        avail = scraper.series("kafka_network_socketserver_memorypoolavailable")
        depleted = scraper.series("kafka_network_socketserver_memorypooldepletedtimetotal")
        try:
            final = scrape_pool(metrics_url)
        except Exception:  # noqa: BLE001
            final = scraper.samples[-1][1]
        res.pool = {
            "available_min": min(avail, default=None),
            "available_max": max(avail, default=None),
            "depleted_time_total_ms": final.get(
                "kafka_network_socketserver_memorypooldepletedtimetotal",
                max(depleted, default=0.0)),
            "avg_depleted_percent": final.get(
                "kafka_network_socketserver_memorypoolavgdepletedpercent"),
        }
    return res, flood, probe, scraper


# ----------------------------------------------------------------------------- output


def _mib(v: int | None) -> str:
    return "-" if v is None else f"{v / MiB:.0f}"


def _f(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def table(results: list[CaseResult]) -> str:
    headers = ["target", "status", "base MiB", "peak MiB", "growth MiB", "MB/s", "req/s",
               "compl min/max", "half min/max", "jain(half)", "lat p50/p99 s",
               "probe p50/p99 s", "probe n"]
    rows = []
    for r in results:
        c, h = r.completions, r.half_completions
        rows.append([
            r.name,
            r.status,
            _mib(r.baseline_rss),
            _mib(r.peak_rss),
            _mib(r.growth),
            _f(r.flood.get("mbps"), "{:.0f}"),
            _f(r.flood.get("rps"), "{:.1f}"),
            f"{c.get('min', '-')}/{c.get('max', '-')}",
            f"{h.get('min', '-')}/{h.get('max', '-')}",
            _f(h.get("jain")),
            f"{_f(r.latency_s.get('p50'))}/{_f(r.latency_s.get('p99'))}",
            f"{_f(r.probe.get('p50'))}/{_f(r.probe.get('p99'))}",
            str(r.probe.get("round_trips", "-")),
        ])
    return _common.format_table(headers, rows)


def plot(results: list[CaseResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for r in results:
        if not r.rss_series:
            continue
        t = [s for s, _ in r.rss_series]
        v = [m for _, m in r.rss_series]
        ax.plot(t, v, label=f"{r.name} (peak {r.peak_rss / MiB:.0f} MiB)", linewidth=1.2)
    bounds = [r for r in results if r.pool.get("size")]
    for r in bounds:
        ax.axhline(r.pool["bound_mib"], linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(f"{r.name}: baseline + pool + one request",
                    (0, r.pool["bound_mib"]), textcoords="offset points", xytext=(4, 4),
                    fontsize=8, color="grey")
    ax.set_xlabel("seconds since the flood started")
    ax.set_ylabel("broker RSS (MiB)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI


def parse_kv(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"{what} expects NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="KIP-72 memory flood: many connections send large Produce requests at "
        "once; samples the broker's RSS and prints peak RSS, throughput, fairness and a "
        "light client's latency per target, and plots RSS over time.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("targets")
    g.add_argument("--target", action="append", default=[], metavar="NAME=HOST:PORT",
                   help="a running broker (repeatable)")
    g.add_argument("--pid", action="append", default=[], metavar="NAME=PID",
                   help="the process of target NAME, for RSS (repeatable)")
    g.add_argument("--metrics", action="append", default=[], metavar="NAME=URL",
                   help="a Prometheus endpoint of target NAME with the KIP-72 pool gauges")
    g.add_argument("--spawn", action="store_true",
                   help="run tidegate with a 64 MiB pool, tidegate without a pool, and the "
                   "peer broker (Tansu), each freshly started")
    g.add_argument("--pool-bytes", type=int, default=64 * MiB,
                   help="queued.max.request.bytes of the spawned bounded tidegate")
    g.add_argument("--no-peer", action="store_true", help="with --spawn: skip the peer broker")
    g.add_argument("--peer-script",
                   default=str(_common.REPO_ROOT.parent / "shared/tools/peer-broker.sh"))
    w = p.add_argument_group("flood")
    w.add_argument("--connections", type=int, default=200)
    w.add_argument("--request-mib", type=float, default=8.0,
                   help="size of each Produce request (one record batch)")
    w.add_argument("--requests-per-conn", type=int, default=2,
                   help="requests each connection sends, one in flight (0: until --duration-s)")
    w.add_argument("--duration-s", type=float, default=60.0,
                   help="stop sending new requests after this long")
    w.add_argument("--drain-timeout-s", type=float, default=120.0,
                   help="then wait this long for the answers still due")
    w.add_argument("--sndbuf-kib", type=int, default=1024,
                   help="SO_SNDBUF of the flood's sockets (0: OS default). Client and broker "
                   "share the host's TCP memory here; a small send buffer keeps the client's "
                   "side of it out of the measurement")
    o = p.add_argument_group("output")
    o.add_argument("--png", default=str(_common.REPO_ROOT / "docs" / "memory-flood.png"))
    o.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    targets = parse_kv(args.target, "--target")
    pids = {k: int(v) for k, v in parse_kv(args.pid, "--pid").items()}
    metrics = parse_kv(args.metrics, "--metrics")
    if not targets and not args.spawn:
        raise SystemExit("nothing to measure: give --target NAME=HOST:PORT or --spawn")
    request_bytes = int(args.request_mib * MiB)
    max_request = max(16 * MiB, request_bytes)
    flood_kw = {
        "connections": args.connections,
        "request_bytes": request_bytes,
        "requests_per_conn": args.requests_per_conn,
        "duration_s": args.duration_s,
        "drain_timeout_s": args.drain_timeout_s,
        "sndbuf": args.sndbuf_kib * 1024 or None,
    }
    raise_fd_limit(args.connections + 256)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load0 = os.getloadavg()
    results: list[CaseResult] = []
    for name, bootstrap in targets.items():
        res, *_ = measure(name, bootstrap, pids.get(name), metrics_url=metrics.get(name),
                          log=log, **flood_kw)
        results.append(res)

    if args.spawn:
        common = [
            f"socket.request.max.bytes={max_request}",
            f"message.max.bytes={max_request}",
            "log.retention.check.interval.ms=500",
        ]
        cases = [
            (f"tidegate pool {args.pool_bytes // MiB} MiB",
             [f"queued.max.request.bytes={args.pool_bytes}"], args.pool_bytes),
            ("tidegate no pool", ["queued.max.request.bytes=-1"], None),
        ]
        for name, extra, pool in cases:
            mport = _common.free_port()
            broker = _common.SpawnedTidegate(
                overrides=common + extra + [f"metrics.listener=http://127.0.0.1:{mport}"]
            )
            try:
                broker.start()
                res, *_ = measure(name, broker.bootstrap, broker.pid,
                                  metrics_url=f"http://127.0.0.1:{mport}/metrics", log=log,
                                  **flood_kw)
                if pool:
                    res.pool["size"] = pool
                    res.pool["bound_mib"] = (res.baseline_rss + pool + request_bytes) / MiB
                errors = broker.error_lines()
                if errors:
                    res.note += "; broker log: " + " | ".join(errors)
                results.append(res)
            finally:
                broker.cleanup()
        if not args.no_peer:
            peer = _common.SpawnedPeer(args.peer_script)
            try:
                peer.start()  # fresh process: Tansu never frees what it stored
                res, *_ = measure("tansu (peer)", peer.bootstrap, peer.pid, log=log, **flood_kw)
                res.note += ("; Tansu stores every record in memory and never frees it: "
                             "its RSS grows with the data produced, pool or not")
                results.append(res)
            finally:
                peer.cleanup()

    print()
    print(f"KIP-72 memory flood: {args.connections} connections x {args.request_mib:g} MiB "
          f"Produce (acks=1), {args.requests_per_conn or 'unlimited'} per connection, "
          f"<= {args.duration_s:g} s; git {_common.git_describe() or '?'}; "
          f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after (other work on the host slows every target)")
    print(table(results))
    for r in results:
        notes = []
        if r.flood:
            f = r.flood
            notes.append(f"{f['answered']}/{f['sent']} answered in {f['elapsed_s']:.1f} s, "
                         f"unanswered {f['unanswered']}, closed by broker "
                         f"{f['closed_by_broker']}, error codes {f['error_codes']}")
        if r.peak_rss_hwm is not None:
            notes.append(f"VmHWM {_mib(r.peak_rss_hwm)} MiB, sampled peak "
                         f"{_mib(r.peak_rss_sampled)} MiB, RSS after {_mib(r.end_rss)} MiB")
        if r.pool:
            notes.append("pool: available min {} / depleted total {} ms / avg depleted {}".format(
                _f(r.pool.get("available_min"), "{:.0f}"),
                _f(r.pool.get("depleted_time_total_ms"), "{:.0f}"),
                _f(r.pool.get("avg_depleted_percent"), "{:.3f}")))
        if r.latency_s:
            notes.append(f"request latency max {_f(r.latency_s.get('max'))} s; probe max "
                         f"{_f(r.probe.get('max'))} s, timeouts {r.probe.get('timeouts')}")
        if r.note:
            notes.append(r.note.strip("; "))
        if r.error:
            notes.append(f"error: {r.error}")
        print(f"  {r.name}: " + "\n    ".join(notes))
    if any(r.rss_series for r in results):
        png = Path(args.png)
        plot(results, png, f"Broker RSS during a flood of {args.connections} x "
             f"{args.request_mib:g} MiB Produce requests")
        print(f"RSS over time: {png}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1, default=str)
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
