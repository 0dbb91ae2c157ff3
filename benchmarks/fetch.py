"""Fetch throughput and broker CPU per GB: tidegate (file regions + sendfile), earlier
tidegate checkouts (``--base NAME=SRC``), tidegate with chunked region writes instead
of sendfile (``--chunked``), the peer broker (``--peer``), and a plain loopback
``os.sendfile`` of the same segment bytes, all in one run.

Every target is started once and loaded (confluent-kafka) with ``--mb`` MiB per
partition for each record size and partition count. Then, ``--repeat`` rounds, each
measuring every case on every target back to back (so load from elsewhere on the
machine falls on all targets alike) plus the loopback sendfile: one blocking client
sends Fetch v12 for every partition from offset 0 again and again for ``--seconds``
(the same bytes each time: the page cache serves them, as for consumers that keep up)
and reads the responses without decoding them. The Fetch is a consumer's: ``max_wait``
500 ms, ``min_bytes`` 1 (answered at once, the data is there). The first response of
each case is decoded to check that every partition carried records (the peer answers
a Fetch with ``max_wait`` 0 with no partitions at all). ``--client-check`` also reads
each case's whole topic with a new confluent-kafka consumer, three times, a real
client's rate (median; start-up included).

Reported per record size and partition count: records/s, MB/s, broker CPU seconds per
GB fetched (psutil), median and min..max over the rounds, and the load average.

    python benchmarks/fetch.py --base d1b0708=/tmp/base/src --chunked \\
        --peer ../shared/tools/peer-broker.sh --client-check --json out.json
    python benchmarks/fetch.py --report out.json --png docs/fetch_zero_copy.png
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

import psutil
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

FETCH_VERSION = 12
#: per partition of each Fetch; Kafka's max.partition.fetch.bytes default
PARTITION_MAX_BYTES = 1024 * 1024


def fetch_request(topic: str, partitions: int, correlation_id: int, max_wait_ms: int = 500) -> bytes:
    import datetime
    import io

    cls = load_request_schema(1, FETCH_VERSION)
    mod = sys.modules[cls.__module__]
    body = cls(
        cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=64 * 1024 * 1024,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(
            mod.FetchTopic(topic=topic, partitions=tuple(
                mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                   last_fetched_epoch=-1, log_start_offset=-1,
                                   partition_max_bytes=PARTITION_MAX_BYTES)
                for p in range(partitions))),
        ),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=1, request_api_version=FETCH_VERSION,
                                                    correlation_id=correlation_id, client_id="bench"))
    entity_writer(cls)(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def load(bootstrap: str, topic: str, partitions: int, record: int, mb: int) -> None:
    _common.fill_topic(bootstrap, topic, partitions, mb * 1024 * 1024 // record, os.urandom(record),
                       **{"linger.ms": 20, "batch.size": 1024 * 1024, "message.max.bytes": 1000000})



def check_response(bootstrap: str, topic: str, partitions: int, max_wait_ms: int) -> list[int]:
    """Bytes of records in each partition of one Fetch's response (decoded)."""
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(fetch_request(topic, partitions, 1, max_wait_ms))
        size = struct.unpack(">i", _common.recv_exactly(sock, 4))[0]
        data = _common.recv_exactly(sock, size)
    # response header v1 (flexible): correlation id, no tagged fields
    body, _ = entity_reader(load_response_schema(1, FETCH_VERSION))(data, 5)
    got = {(t.topic, p.partition_index): len(p.records or b"") for t in body.responses for p in t.partitions}
    return [got.get((topic, p), 0) for p in range(partitions)]


def fetch_loop(bootstrap: str, topic: str, partitions: int, seconds: float,
               max_wait_ms: int = 500) -> tuple[int, int, float]:
    """(responses, bytes, elapsed) of back-to-back fetches."""
    host, port = bootstrap.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(8 * 1024 * 1024)
    view = memoryview(buf)
    total = responses = 0
    request = fetch_request(topic, partitions, 1, max_wait_ms)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        # the same correlation id every time: the client does not match them
        sock.sendall(request)
        head = sock.recv(4, socket.MSG_WAITALL)
        size = struct.unpack(">i", head)[0]
        left = size
        while left:
            n = sock.recv_into(view, min(left, len(buf)))
            if not n:
                raise ConnectionError("broker closed")
            left -= n
        total += size + 4
        responses += 1
    elapsed = time.perf_counter() - start
    sock.close()
    return responses, total, elapsed


_SENDER = """
import os, socket, sys
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
try:
    while True:
        off = 0
        while off < size:
            off += os.sendfile(conn.fileno(), fd, off, size - off)
except OSError:
    pass
"""


def loopback_sendfile(path: Path, seconds: float) -> tuple[float, float]:
    """(MB/s, sender CPU s per GB) of a plain ``os.sendfile`` loop sending ``path`` again
    and again over loopback TCP (in a process of its own, as a broker is) to a reader
    that reads as :func:`fetch_loop` does (``recv_into`` an 8 MiB buffer) and discards."""
    import subprocess

    sender = subprocess.Popen([sys.executable, "-c", _SENDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert sender.stdout is not None
        port = int(sender.stdout.readline())
        c = socket.create_connection(("127.0.0.1", port))
        proc = psutil.Process(sender.pid)
        buf = bytearray(8 * 1024 * 1024)
        c.recv_into(buf)  # connected and sending
        cpu0 = sum(proc.cpu_times()[:2])
        start = time.perf_counter()
        got = 0
        while time.perf_counter() - start < seconds:
            got += c.recv_into(buf)
        elapsed = time.perf_counter() - start
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        c.close()
    finally:
        sender.kill()
        sender.wait(10)
    return got / elapsed / 1e6, cpu / (got / 1e9)


def client_check(bootstrap: str, topic: str, partitions: int, record: int, per_partition: int) -> float:
    """MB/s of a new confluent-kafka consumer reading the whole topic once (assigned
    from offset 0, no group; from its creation on, so start-up is included): a real
    client's view of the broker, the same for every target."""
    from confluent_kafka import Consumer, TopicPartition

    want = per_partition * partitions
    start = time.perf_counter()
    c = Consumer({**_common.CONSUMER_THROUGHPUT_CONFIG,
                  "bootstrap.servers": bootstrap, "group.id": "fetch-bench", "enable.auto.commit": False,
                  "log_level": 0, "fetch.max.bytes": 64 * 1024 * 1024,
                  "max.partition.fetch.bytes": PARTITION_MAX_BYTES})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        n = 0
        deadline = time.monotonic() + 120
        while n < want and time.monotonic() < deadline:
            n += sum(1 for m in c.consume(min(want - n, 100000), 1.0) if m.error() is None)
        elapsed = time.perf_counter() - start
    finally:
        c.close()
    if n < want:
        raise RuntimeError(f"confluent-kafka read {n} of {want} records")
    return want * record / elapsed / 1e6


class Target:
    """One broker of the run: its name, how to start it, its topics' segment files."""

    def __init__(self, name: str, broker, pythonpath: str | None = None, env: dict | None = None) -> None:
        self.name = name
        self.broker = broker
        self.pythonpath = pythonpath
        self.env = env or {}

    def start(self) -> None:
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", *self.env)}
        if self.pythonpath is not None:
            os.environ["PYTHONPATH"] = self.pythonpath
        os.environ.update(self.env)
        try:
            self.broker.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def segment(self, topic: str) -> Path | None:
        workdir = getattr(self.broker, "workdir", None)
        if workdir is None:
            return None
        segs = sorted(Path(workdir).glob(f"data-*/{topic}-0/*.log"), key=lambda p: p.stat().st_size)
        return segs[-1] if segs else None


def summarize(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def run(args) -> list[dict]:
    here_src = str(_common.REPO_ROOT / "src")
    targets = [Target("tidegate", _common.SpawnedTidegate(log_level="WARNING"), here_src)]
    for spec in args.base or []:
        name, _, src = spec.partition("=")
        targets.append(Target(f"tidegate-{name}", _common.SpawnedTidegate(log_level="WARNING"), src))
    if args.base_src:
        targets.append(Target("tidegate-before", _common.SpawnedTidegate(log_level="WARNING"), args.base_src))
    if args.chunked:
        targets.append(Target("tidegate-chunked", _common.SpawnedTidegate(log_level="WARNING"), here_src,
                              {"TIDEGATE_FETCH_SENDFILE": "0"}))
    if args.peer:
        targets.append(Target("peer", _common.SpawnedPeer(args.peer)))
    cases = [(r, p) for r in map(int, args.records.split(",")) for p in map(int, args.partitions.split(","))]
    results: dict[tuple[str, int, int], dict] = {}
    loopback: dict[tuple[int, int], list[tuple[float, float, float]]] = {c: [] for c in cases}
    try:
        for t in targets:
            t.start()
            for record, parts in cases:
                topic = f"f{record}x{parts}"
                res = results[(t.name, record, parts)] = {
                    "target": t.name, "record": record, "partitions": parts, "runs": []}
                try:
                    load(t.broker.bootstrap, topic, parts, record, args.mb)
                    time.sleep(0.5)
                    sizes = check_response(t.broker.bootstrap, topic, parts, args.max_wait_ms)
                    res["first_response_partition_bytes"] = sizes
                    if not any(sizes):
                        res["error"] = f"no records in a response: {sizes}"
                    if args.client_check:
                        res["confluent_mb_s"] = statistics.median(
                            client_check(t.broker.bootstrap, topic, parts, record, args.mb * 1024 * 1024 // record)
                            for _ in range(3))
                except Exception as exc:  # noqa: BLE001 - a target that fails is reported
                    res["error"] = repr(exc)[:300]
                print(json.dumps({k: v for k, v in res.items() if k != "runs"}), flush=True)
        for rnd in range(args.repeat):
            for record, parts in cases:
                topic = f"f{record}x{parts}"
                for t in targets:
                    res = results[(t.name, record, parts)]
                    if "error" in res:
                        continue
                    proc = psutil.Process(t.broker.pid)
                    load1 = os.getloadavg()[0]
                    cpu0 = sum(proc.cpu_times()[:2])
                    responses, nbytes, elapsed = fetch_loop(t.broker.bootstrap, topic, parts, args.seconds,
                                                            args.max_wait_ms)
                    cpu = sum(proc.cpu_times()[:2]) - cpu0
                    run = {"round": rnd, "mb_s": nbytes / elapsed / 1e6, "records_s": nbytes / record / elapsed,
                           "responses_s": responses / elapsed, "cpu_s_per_gb": cpu / (nbytes / 1e9),
                           "cpu_ms_per_response": 1000 * cpu / responses, "load1": load1}
                    res["runs"].append(run)
                    print(json.dumps({"target": t.name, "record": record, "partitions": parts, **run}), flush=True)
                seg = next((s for s in (t.segment(topic) for t in targets) if s is not None), None)
                if seg is not None:
                    mb_s, cpu_gb = loopback_sendfile(seg, args.seconds)
                    loopback[(record, parts)].append((mb_s, cpu_gb, os.getloadavg()[0]))
                    print(json.dumps({"loopback_sendfile": [record, parts], "mb_s": mb_s, "cpu_s_per_gb": cpu_gb}),
                          flush=True)
    finally:
        for t in targets:
            try:
                t.broker.stop()
            finally:
                if hasattr(t.broker, "cleanup"):
                    t.broker.cleanup()
    out = []
    for res in results.values():
        for key in ("mb_s", "records_s", "cpu_s_per_gb", "cpu_ms_per_response", "load1"):
            s = summarize([r[key] for r in res["runs"]])
            if s:
                res[key] = s
        out.append(res)
    for (record, parts), vals in loopback.items():
        if vals:
            out.append({"target": "loopback-sendfile", "record": record, "partitions": parts,
                        "mb_s": summarize([v[0] for v in vals]), "cpu_s_per_gb": summarize([v[1] for v in vals]),
                        "load1": summarize([v[2] for v in vals])})
    return out


def _spread(s: dict | None, fmt: str = "{:.0f}") -> str:
    if not s:
        return "-"
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}..{fmt.format(s['max'])})"


def report(results: list[dict], png: str | None) -> None:
    """A markdown table of the results and, if matplotlib is installed, a plot."""
    print("| target | record | partitions | MB/s median (min..max) | records/s median "
          "| broker CPU s/GB median (min..max) | CPU ms per response | confluent-kafka MB/s | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (r["record"], r["partitions"])):
        if "error" in r:
            print(f"| {r['target']} | {r['record']} | {r['partitions']} | error: {r['error']} | | | | | |")
            continue
        if "mb_s" not in r:
            continue
        rec = r.get("records_s")
        cc = r.get("confluent_mb_s")
        cells = [r["target"], str(r["record"]), str(r["partitions"]), _spread(r["mb_s"]),
                 f"{rec['median']:.0f}" if rec else "-", _spread(r.get("cpu_s_per_gb"), "{:.3f}"),
                 _spread(r.get("cpu_ms_per_response"), "{:.2f}"), f"{cc:.0f}" if cc else "-",
                 _spread(r.get("load1"), "{:.1f}")]
        print("| " + " | ".join(cells) + " |")
    if not png:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e .[bench]): no plot")
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for target in dict.fromkeys(r["target"] for r in results):
        for parts in sorted({r["partitions"] for r in results}):
            rows = sorted((r for r in results if r["target"] == target and r["partitions"] == parts
                           and "mb_s" in r and "error" not in r), key=lambda r: r["record"])
            if not rows:
                continue
            style = "--" if target == "loopback-sendfile" else "-"
            xs = [r["record"] / 1024 for r in rows]
            a1.errorbar(xs, [r["mb_s"]["median"] for r in rows],
                        yerr=[[r["mb_s"]["median"] - r["mb_s"]["min"] for r in rows],
                              [r["mb_s"]["max"] - r["mb_s"]["median"] for r in rows]],
                        marker="o", linestyle=style, capsize=3, label=f"{target} {parts}p")
            if all(r.get("cpu_s_per_gb") for r in rows):
                a2.plot(xs, [r["cpu_s_per_gb"]["median"] for r in rows], marker="o", label=f"{target} {parts}p")
    for ax, title in ((a1, "fetch MB/s (median, min..max)"), (a2, "broker CPU s per GB fetched (median)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("record size (KiB)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    a2.set_yscale("log")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=8, help="MiB loaded per partition")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one measurement")
    ap.add_argument("--repeat", type=int, default=5, help="rounds over every case and target")
    ap.add_argument("--records", default="1024,65536")
    ap.add_argument("--partitions", default="1,8")
    ap.add_argument("--max-wait-ms", type=int, default=500, help="the Fetch's max_wait (min_bytes is 1)")
    ap.add_argument("--base", action="append", metavar="NAME=SRC",
                    help="src/ of another tidegate checkout, reported as tidegate-NAME (repeatable)")
    ap.add_argument("--base-src", help="src/ of a checkout reported as tidegate-before")
    ap.add_argument("--chunked", action="store_true",
                    help="also tidegate with TIDEGATE_FETCH_SENDFILE=0 (regions written in chunks)")
    ap.add_argument("--peer", help="peer-broker.sh (Tansu)")
    ap.add_argument("--client-check", action="store_true",
                    help="also read each topic once with confluent-kafka (MB/s of a real client)")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--report", help="only print the table (and --png plot) of a --json file")
    ap.add_argument("--png", help="with --report: plot MB/s and CPU/GB vs record size")
    args = ap.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text()), args.png)
        return
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    report(results, None)


if __name__ == "__main__":
    main()
