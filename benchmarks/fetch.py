"""Fetch throughput and broker CPU per GB: tidegate (file regions + sendfile), the
pre-zero-copy tidegate (``--base-python``/``--base-src``: a checkout of main before it),
the peer broker, and a plain loopback ``os.sendfile`` of the same segment bytes.

Each case loads ``--mb`` MiB per partition with confluent-kafka, then one blocking
client sends Fetch v12 (max_wait 500 ms, min_bytes 1: answered at once, data being there;
the peer broker answers max_wait 0 with an empty response) for every partition from
offset 0 again and again for
``--seconds`` (the same bytes each time: the page cache serves them, as for consumers
that keep up) and discards the responses without decoding them. Reported per record
size and partition count: records/s, MB/s, broker CPU seconds per GB fetched
(psutil), repeated ``--repeat`` times (median and min..max).

    python benchmarks/fetch.py --base-src /tmp/zc-base/src --peer ../shared/tools/peer-broker.sh
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

import psutil
from kio.index import load_request_schema
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

FETCH_VERSION = 12


def fetch_request(topic: str, partitions: int, correlation_id: int) -> bytes:
    import datetime

    cls = load_request_schema(1, FETCH_VERSION)
    mod = sys.modules[cls.__module__]
    body = cls(
        cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=64 * 1024 * 1024,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(
            mod.FetchTopic(topic=topic, partitions=tuple(
                mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                   last_fetched_epoch=-1, log_start_offset=-1,
                                   partition_max_bytes=1024 * 1024)
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


def fetch_loop(bootstrap: str, topic: str, partitions: int, seconds: float) -> tuple[int, int, float]:
    """(responses, bytes, elapsed) of back-to-back fetches."""
    host, port = bootstrap.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(8 * 1024 * 1024)
    view = memoryview(buf)
    total = responses = 0
    start = time.perf_counter()
    cid = 0
    while time.perf_counter() - start < seconds:
        cid += 1
        sock.sendall(fetch_request(topic, partitions, cid))
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


def loopback_sendfile(path: Path, seconds: float) -> float:
    """MB/s of os.sendfile of ``path`` over a loopback TCP socket, read and discarded."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    done = threading.Event()
    sent = [0]

    def sender() -> None:
        conn, _ = srv.accept()
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        while not done.is_set():
            off = 0
            while off < size and not done.is_set():
                off += os.sendfile(conn.fileno(), fd, off, size - off)
            sent[0] += off
        os.close(fd)
        conn.close()

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(1024 * 1024)
    start = time.perf_counter()
    got = 0
    while time.perf_counter() - start < seconds:
        got += c.recv_into(buf)
    elapsed = time.perf_counter() - start
    done.set()
    c.close()
    srv.close()
    return got / elapsed / 1e6


def run_case(target, name: str, record: int, partitions: int, args) -> dict:
    topic = f"f{record}x{partitions}"
    load(target.bootstrap, topic, partitions, record, args.mb)
    proc = psutil.Process(target.pid) if target.pid else None
    runs = []
    for _ in range(args.repeat):
        cpu0 = sum(proc.cpu_times()[:2]) if proc else None
        _responses, nbytes, elapsed = fetch_loop(target.bootstrap, topic, partitions, args.seconds)
        cpu = sum(proc.cpu_times()[:2]) - cpu0 if proc else None
        runs.append({"mb_s": nbytes / elapsed / 1e6, "records_s": nbytes / record / elapsed,
                     "cpu_s_per_gb": cpu / (nbytes / 1e9) if cpu is not None else None})
    out = {"target": name, "record": record, "partitions": partitions, "runs": runs}
    for key in ("mb_s", "records_s", "cpu_s_per_gb"):
        vals = [r[key] for r in runs if r[key] is not None]
        if vals:
            out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    segs = sorted(Path(getattr(target, "workdir", "/nonexistent")).glob(f"data-*/{topic}-0/*.log"))
    if segs:
        out["loopback_sendfile_mb_s"] = loopback_sendfile(segs[-1], args.seconds)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}), flush=True)
    return out


def report(results: list[dict], png: str | None) -> None:
    """A markdown table of the results and, if matplotlib is installed, a plot."""
    print("| target | record | partitions | MB/s median (min..max) | records/s median "
          "| broker CPU s/GB median (min..max) | loopback sendfile MB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "mb_s" not in r:
            continue
        mb, cpu = r["mb_s"], r.get("cpu_s_per_gb")
        cpu_s = f"{cpu['median']:.2f} ({cpu['min']:.2f}..{cpu['max']:.2f})" if cpu else "-"
        lb = r.get("loopback_sendfile_mb_s")
        print(f"| {r['target']} | {r['record']} | {r['partitions']} | {mb['median']:.0f} "
              f"({mb['min']:.0f}..{mb['max']:.0f}) | {r['records_s']['median']:.0f} | {cpu_s} | "
              f"{f'{lb:.0f}' if lb else '-'} |")
    if not png:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e .[bench]): no plot")
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for target in dict.fromkeys(r["target"] for r in results):
        for parts in sorted({r["partitions"] for r in results}):
            rows = [r for r in results if r["target"] == target and r["partitions"] == parts and "mb_s" in r]
            if not rows:
                continue
            xs = [r["record"] / 1024 for r in rows]
            a1.plot(xs, [r["mb_s"]["median"] for r in rows], marker="o", label=f"{target} {parts}p")
            if all(r.get("cpu_s_per_gb") for r in rows):
                a2.plot(xs, [r["cpu_s_per_gb"]["median"] for r in rows], marker="o", label=f"{target} {parts}p")
    for ax, title in ((a1, "fetch MB/s"), (a2, "broker CPU s per GB fetched")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("record size (KiB)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    a2.set_yscale("log")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=16, help="MiB loaded per partition")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", default="1024,65536")
    ap.add_argument("--partitions", default="1,8")
    ap.add_argument("--base-src", help="src/ of a tidegate checkout before zero-copy fetch")
    ap.add_argument("--peer", help="peer-broker.sh (Tansu)")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--report", help="only print the table (and --png plot) of a --json file")
    ap.add_argument("--png", help="with --report: plot MB/s and CPU/GB vs record size")
    args = ap.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text()), args.png)
        return
    targets = [("tidegate", lambda: _common.SpawnedTidegate())]
    if args.base_src:
        def base():
            t = _common.SpawnedTidegate()
            t.env_pythonpath = args.base_src
            return t
        targets.append(("tidegate-before", base))
    if args.peer:
        targets.append(("peer", lambda: _common.SpawnedPeer(args.peer)))
    results = []
    here_src = str(_common.REPO_ROOT / "src")
    for name, make in targets:
        for record in map(int, args.records.split(",")):
            for partitions in map(int, args.partitions.split(",")):
                target = make()
                old = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = getattr(target, "env_pythonpath", here_src)
                try:
                    target.start()
                    results.append(run_case(target, name, record, partitions, args))
                except Exception as exc:  # noqa: BLE001 - a target that fails is reported
                    print(json.dumps({"target": name, "record": record, "partitions": partitions,
                                      "error": repr(exc)[:300]}), flush=True)
                finally:
                    if old is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = old
                    target.stop()
                    if hasattr(target, "cleanup"):
                        target.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
