"""Request quota benchmark: a greedy client and a polite client on one broker.

* The **greedy** client sends tiny Metadata requests (no topics) in a tight loop on one
  connection, one in flight, and ignores ``throttle_time_ms`` (as librdkafka would for
  a request it has already queued): only the broker's mute holds it back.
* The **polite** client sends the same request every 10 ms and records each latency.

Each client runs in its own process (no shared GIL). Every case runs on a fresh broker:

1. ``no quota``: the greedy client unthrottled;
2. ``request_percentage=P`` on the greedy client-id (default P = 5, ``--percent``).

For each case it prints the polite client's p50/p99 latency, the greedy client's
request rate, and the greedy client's measured share of one broker thread: the broker
process's CPU time while both run, minus its CPU time while the polite client runs
alone (measured first, in the same case), over the wall time. Process CPU includes what
the request quota does not count (the event loop's own work, reading sockets), so the
share under a quota is a little above P.

The broker's default quota windows (11 x 1 s) make a throttled client's progress a
sawtooth with a period of ~11 s (a burst each time the first sample expires), so the
measurement runs 30 s by default; ``--window-num 3`` makes the period ~3 s.

Usage::

    .venv/bin/python benchmarks/quotas.py --spawn-tidegate
    .venv/bin/python benchmarks/quotas.py --spawn-tidegate --seconds 60 --percent 5,20
    .venv/bin/python benchmarks/quotas.py --bootstrap 127.0.0.1:9092   # a running broker

Against a running broker (``--bootstrap``) the quota is set and removed with
AlterClientQuotas, and the baseline/CPU columns need ``--broker-pid``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from _common import SpawnedTidegate, format_table, git_describe, recv_exactly

GREEDY = "greedy"
POLITE = "polite"


# -- a minimal wire client (no Kafka library: nothing between the socket and the broker) --
def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _request(api_key: int, version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _string(client_id) + body
    return struct.pack(">i", len(payload)) + payload



def _roundtrip(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


#: Metadata v1 with an empty topic array: no topics, the smallest useful request.
METADATA_V1_NO_TOPICS = struct.pack(">i", 0)


def alter_request_percentage(bootstrap: str, client_id: str, percent: float | None) -> None:
    """AlterClientQuotas v0 for one client-id: set (or remove, None) request_percentage."""
    body = (
        struct.pack(">i", 1)  # one entry
        + struct.pack(">i", 1) + _string("client-id") + _string(client_id)  # its entity
        + struct.pack(">i", 1) + _string("request_percentage")
        + struct.pack(">d?", percent or 0.0, percent is None)
        + struct.pack(">?", False)  # validate_only
    )  # fmt: skip
    with _connect(bootstrap) as sock:
        resp = _roundtrip(sock, _request(49, 0, 1, "bench-admin", body))
    # correlation id, throttle ms, entry count, then the entry's error code
    (error_code,) = struct.unpack_from(">h", resp, 12)
    if error_code:
        raise RuntimeError(f"AlterClientQuotas failed with error code {error_code}")


def _client(bootstrap: str, client_id: str, pause: float, seconds: float, out) -> None:
    """Loop Metadata requests for ``seconds``; send back (start, end) monotonic times."""
    times: list[tuple[float, float]] = []
    with _connect(bootstrap) as sock:
        deadline = time.monotonic() + seconds
        cid = 0
        while True:
            t0 = time.monotonic()
            if t0 >= deadline:
                break
            cid += 1
            _roundtrip(sock, _request(3, 1, cid, client_id, METADATA_V1_NO_TOPICS))
            times.append((t0, time.monotonic()))
            if pause:
                time.sleep(pause)
    out.send(times)
    out.close()


def _start(bootstrap: str, client_id: str, pause: float, seconds: float):
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=_client, args=(bootstrap, client_id, pause, seconds, send), daemon=True)
    proc.start()
    return proc, recv


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def run_case(bootstrap: str, broker_pid: int | None, percent: float | None, args) -> dict:
    if percent is not None:
        alter_request_percentage(bootstrap, GREEDY, percent)
    broker = psutil.Process(broker_pid) if broker_pid else None
    total = args.baseline + args.warmup + args.seconds + 1
    polite_proc, polite_pipe = _start(bootstrap, POLITE, 0.010, total)
    time.sleep(0.5)
    base_cpu0 = _cpu(broker) if broker else None
    t_base = time.monotonic()
    time.sleep(args.baseline)
    baseline = (_cpu(broker) - base_cpu0) / (time.monotonic() - t_base) if broker else None
    greedy_proc, greedy_pipe = _start(bootstrap, GREEDY, 0.0, args.warmup + args.seconds)
    time.sleep(args.warmup)
    start = time.monotonic()
    cpu0 = _cpu(broker) if broker else None
    time.sleep(args.seconds)
    end = time.monotonic()
    both = (_cpu(broker) - cpu0) / (end - start) if broker else None
    greedy_times = greedy_pipe.recv()
    polite_times = polite_pipe.recv()
    greedy_proc.join(30)
    polite_proc.join(30)
    if percent is not None:
        alter_request_percentage(bootstrap, GREEDY, None)
    polite_lat = sorted(
        (e - s) * 1000 for s, e in polite_times if start <= s and e <= end
    )  # fmt: skip
    greedy_n = sum(1 for s, e in greedy_times if start <= s and e <= end)
    greedy_max = max(((e - s) * 1000 for s, e in greedy_times if start <= s), default=0.0)
    return {
        "case": "no quota" if percent is None else f"request_percentage={percent:g}",
        "polite_p50": statistics.median(polite_lat),
        "polite_p99": statistics.quantiles(polite_lat, n=100)[98],
        "polite_n": len(polite_lat),
        "greedy_rps": greedy_n / (end - start),
        "greedy_max_ms": greedy_max,
        "baseline": baseline,
        "share": None if both is None else both - baseline,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--spawn-tidegate", action="store_true", help="a fresh tidegate per case")
    where.add_argument("--bootstrap", help="a running broker, host:port")
    ap.add_argument("--broker-pid", type=int, help="with --bootstrap: the broker's pid (CPU share)")
    ap.add_argument("--percent", default="5", help="request_percentage values, comma-separated")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured seconds per case")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of greedy before measuring")
    ap.add_argument("--baseline", type=float, default=4.0, help="seconds of polite alone")
    ap.add_argument("--window-num", type=int, help="quota.window.num for --spawn-tidegate")
    args = ap.parse_args()
    cases: list[float | None] = [None] + [float(p) for p in args.percent.split(",") if p]
    overrides = [f"quota.window.num={args.window_num}"] if args.window_num else []
    results = []
    for percent in cases:
        if args.spawn_tidegate:
            broker = SpawnedTidegate(overrides=overrides, log_level="WARNING").start()
            try:
                results.append(run_case(broker.bootstrap, broker.pid, percent, args))
            finally:
                broker.cleanup()
        else:
            results.append(run_case(args.bootstrap, args.broker_pid, percent, args))
        r = results[-1]
        print(f"  {r['case']}: done", file=sys.stderr)

    def pct(x):
        return "n/a" if x is None else f"{x:.1%}"

    print(f"tidegate {git_describe() or '?'}; {args.seconds:g} s per case, "
          f"quota.window.num={args.window_num or 11}; polite: one request / 10 ms")
    print(format_table(
        ["case", "polite p50 ms", "polite p99 ms", "greedy req/s", "greedy longest wait ms",
         "greedy share of a broker thread", "broker CPU, polite alone"],
        [[r["case"], f"{r['polite_p50']:.2f}", f"{r['polite_p99']:.2f}", f"{r['greedy_rps']:,.0f}",
          f"{r['greedy_max_ms']:,.0f}", pct(r["share"]), pct(r["baseline"])] for r in results],
    ))  # fmt: skip


if __name__ == "__main__":
    main()
