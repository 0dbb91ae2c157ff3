"""Broker start-up: how soon a broker listens, and how soon it serves at full speed.

Two cases (``--cases start cold``; both by default):

**start**: broker start to the first accepted connection, tidegate.testing.Broker in
this process (its own thread and event loop) against a subprocess broker (``python -m
tidegate serve``), each on a fresh temporary data directory, ``--runs`` times. Each run
times ``Broker(...).start()`` up to the moment a TCP connection to its PLAINTEXT
listener is accepted; the broker is then stopped (not timed). The in-process runs happen
after tidegate is imported (a test session pays the import once; it is printed on its
own line); a subprocess pays interpreter start and the import on every start, which is
what its column shows.

**cold**: a broker started from nothing and used at once, as a test fixture or a CI job
does, side by side with the peer broker (Tansu, ``--peer``) and any ``--base`` checkout.
Every run starts a fresh broker (the targets take turns, ``--cold-runs`` runs each, after
one unmeasured run each for the file-system caches):

1. spawn: ``python -m tidegate serve`` (``subprocess``), ``tidegate.testing.Broker()``
   started in this process (``inprocess``), the peer's script (``peer``);
2. connect every millisecond until the port accepts: *listening*;
3. create two one-partition topics (confluent-kafka's AdminClient), then at once: 40
   connections each send one Fetch long poll (``--max-wait-ms`` 500, min bytes 1) on
   the empty topic (from a process of their own), and a confluent-kafka producer sends 100,000 x 1 KiB records (acks=1,
   linger.ms 5) to the other and flushes. *produced*: from the spawn to the last
   acknowledgement; *late*: how long after its max wait each poll was answered (median
   and worst of the 40);
4. the same again on two new topics of the same broker, now warm: *warm produce* (topic
   creation to the last acknowledgement) against the cold one (listening to the last
   acknowledgement) says whether the first requests were served at full speed.

The broker's CPU seconds (user+system, psutil) are read at listening and after the cold
produce (the peer's pid is known only after its script returns: no CPU at listening).
Printed: the median and the spread (min-max) of each over the runs.

Usage::

    .venv/bin/python benchmarks/broker_start.py                      # both cases
    .venv/bin/python benchmarks/broker_start.py --cases cold --cold-runs 7 \\
        --base before=../main-before/src          # another checkout's tree, same run
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import selectors
import socket
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import _common
from _common import format_table, git_describe, percentile
from parked_fetches import fetch_v4_frame, parse_fetch_v4

#: what ``tidegate serve`` logs once it listens (a tree from before it logs nothing)
_STARTED_IN = re.compile(r"started in ([\d.]+) s")


def one_start(mode: str) -> float:
    from tidegate.testing import Broker

    broker = Broker(mode=mode)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    broker.start()
    try:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10):
            return time.perf_counter() - t0
    finally:
        broker.stop()


def start_case(runs: int) -> None:
    t0 = time.perf_counter()
    import tidegate.server.broker
    import tidegate.testing  # noqa: F401

    import_s = time.perf_counter() - t0
    rows = []
    for mode in ("inprocess", "subprocess"):
        one_start(mode)  # warm-up: file-system caches, first-use imports
        times = sorted(one_start(mode) for _ in range(runs))
        rows.append([
            mode,
            str(runs),
            f"{statistics.median(times) * 1000:.0f}",
            f"{percentile(times, 90) * 1000:.0f}",  # type: ignore[operator]
            f"{times[0] * 1000:.0f}",
            f"{times[-1] * 1000:.0f}",
            f"{statistics.pstdev(times) * 1000:.0f}",
        ])
    print(f"tidegate {git_describe() or '?'}; broker start to first accepted connection; "
          f"importing tidegate in-process took {import_s * 1000:.0f} ms (once per session)")
    print(format_table(["mode", "runs", "p50 ms", "p90 ms", "min ms", "max ms", "stdev ms"], rows))


# -- the cold case ------------------------------------------------------------------------


class Subprocess:
    """``python -m tidegate serve`` of this checkout, or of another one's ``src``."""

    def __init__(self, name: str, src: str | None = None) -> None:
        self.name = name
        env = {"PYTHONPATH": src} if src else {}
        self.broker = _common.SpawnedTidegate(env=env)

    def spawn(self) -> None:
        self.broker.spawn()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def alive(self) -> bool:
        return self.broker.proc is not None and self.broker.proc.poll() is None

    def pid(self) -> int | None:
        return self.broker.pid

    def logged_start_s(self) -> float | None:
        path = self.broker.log_path
        found = _STARTED_IN.search(path.read_text(errors="replace")) if path and path.exists() else None
        return float(found.group(1)) if found else None

    def stop(self) -> None:
        self.broker.stop()


class InProcess:
    """``tidegate.testing.Broker()`` in this process: ``spawn`` returns once it listens."""

    name = "inprocess"

    def __init__(self) -> None:
        self.broker = None

    def spawn(self) -> None:
        from tidegate.testing import Broker

        self.broker = Broker().start()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def alive(self) -> bool:
        return True

    def pid(self) -> int | None:
        return None  # this process: the benchmark's own CPU would count

    def logged_start_s(self) -> float | None:
        return None

    def stop(self) -> None:
        self.broker.stop()


class Peer:
    """The peer broker through its script: its pid is known once the script returns."""

    name = "peer"

    def __init__(self, script: str) -> None:
        self.broker = _common.SpawnedPeer(script)
        self._started = False

    def spawn(self) -> None:
        self._started = False
        self.broker.spawn()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def alive(self) -> bool:
        return True  # the script's own wait fails if Tansu does not start

    def pid(self) -> int | None:
        if not self._started:
            return None
        return self.broker.pid

    def logged_start_s(self) -> float | None:
        return None

    def stop(self) -> None:
        if not self._started:
            self.broker.started()
        self.broker.stop()

    def settle(self) -> None:
        """Wait for the script (it polls the port every 0.1 s) and take the pid."""
        self.broker.started()
        self._started = True


def long_polls(bootstrap: str, topic: str, count: int, max_wait_ms: int) -> list[float | str]:
    """Open ``count`` connections, send one Fetch long poll on each at once, and return how
    late past ``max_wait_ms`` each was answered (s), or an error string. Runs in a process
    of its own (:data:`POLLER`): this one's producer loop holds the GIL."""
    host, port = bootstrap.rsplit(":", 1)
    frame = fetch_v4_frame(topic, 0, 0, max_wait_ms)
    sel = selectors.DefaultSelector()
    sent: dict[socket.socket, float] = {}
    out: list[float | str] = []
    try:
        conns = [socket.create_connection((host, int(port)), timeout=30) for _ in range(count)]
        for s in conns:
            s.sendall(frame)
            sent[s] = time.perf_counter()
            sel.register(s, selectors.EVENT_READ, bytearray())
        deadline = time.perf_counter() + 30 + max_wait_ms / 1000
        while sel.get_map():
            ready = sel.select(timeout=max(0.0, deadline - time.perf_counter()))
            if not ready:
                out.append(f"{len(sel.get_map())} long polls unanswered after 30 s past their max wait")
                break
            for key, _ in ready:
                s, buf = key.fileobj, key.data
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("the broker closed a long poll's connection")
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    now = time.perf_counter()
                    error, _records = parse_fetch_v4(bytes(buf[4:]))
                    out.append(now - sent[s] - max_wait_ms / 1000 if error == 0 else f"error {error}")
                    sel.unregister(s)
                    s.close()
    except Exception as exc:  # noqa: BLE001 - reported with the run's results
        out.append(f"{type(exc).__name__}: {exc}")
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()
    return out


def produce(bootstrap: str, topic: str, records: int, size: int) -> float:
    """Send ``records`` x ``size`` bytes (acks=1) and flush; the time of the last
    acknowledgement (``time.perf_counter``)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "enable.idempotence": False,
        "queue.buffering.max.messages": 10_000, "queue.buffering.max.kbytes": 2_097_151,
        "delivery.report.only.error": True, "log_level": 0,
    })

    def on_delivery(err, _msg) -> None:
        errors.append(str(err))

    value = os.urandom(size)
    for _ in range(records):
        _common.produce_waiting(producer, topic, value, 0.001, on_delivery=on_delivery)
    left = producer.flush(120)
    end = time.perf_counter()
    if left or errors:
        raise RuntimeError(f"{left} record(s) unacknowledged, {len(errors)} delivery error(s): {errors[:1]}")
    return end


def cpu_s(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def load_and_poll(target, tag: str, args, poller) -> tuple[float, list]:
    """Create this pass's two topics, then produce and long-poll at once: (the last
    acknowledgement's time, the polls' lateness)."""
    produced, polled = f"cold-{tag}", f"polls-{tag}"
    _common.create_topics(target.bootstrap, {produced: 1, polled: 1})
    polls = poller.apply_async(long_polls, (target.bootstrap, polled, args.polls, args.max_wait_ms))
    end = produce(target.bootstrap, produced, args.records, args.size)
    return end, polls.get(60 + args.max_wait_ms / 1000)


def cold_run(target, run: int, args, poller) -> dict:
    result: dict = {}
    t0 = time.perf_counter()
    target.spawn()
    try:
        host, port = target.bootstrap.rsplit(":", 1)
        _common.wait_for_port(host, int(port), 60, alive=target.alive, interval=0.001)
        listening = time.perf_counter()
        result["cpu_listening"] = cpu_s(target.pid())
        produced, late = load_and_poll(target, f"{run}a", args, poller)
        if isinstance(target, Peer):
            target.settle()
        result["cpu_cold"] = cpu_s(target.pid())
        warm_from = time.perf_counter()
        warm_end, _ = load_and_poll(target, f"{run}b", args, poller)
        result.update(
            listening=listening - t0, produced=produced - t0, cold=produced - listening,
            warm=warm_end - warm_from, logged=target.logged_start_s(),
            late=[x for x in late if isinstance(x, float)], errors=[x for x in late if isinstance(x, str)],
        )
    finally:
        target.stop()
    return result


def _spread(values: list[float | None], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    got = [v * scale for v in values if v is not None]
    if not got:
        return "-"
    median = fmt.format(statistics.median(got))
    return f"{median} ({fmt.format(min(got))}-{fmt.format(max(got))})"


def cold_case(args) -> None:
    targets: list = [Subprocess("subprocess")]
    targets += [Subprocess(name, src) for name, _, src in (b.partition("=") for b in args.base)]
    targets.append(InProcess())
    if args.peer and Path(args.peer).exists():
        targets.append(Peer(args.peer))
    elif args.peer:
        print(f"no peer broker: {args.peer} does not exist (--peer SCRIPT)", file=sys.stderr)
    results: dict[str, list[dict]] = {t.name: [] for t in targets}
    load = []
    # the long polls' own process, started once: not beside this one's producer loop
    try:
        with multiprocessing.get_context("spawn").Pool(1) as poller:
            for target in targets:
                cold_run(target, 0, args, poller)  # unmeasured: file-system caches, the peer's download
            for run in range(1, args.cold_runs + 1):
                for target in targets:
                    load.append(os.getloadavg()[0])
                    results[target.name].append(cold_run(target, run, args, poller))
                    print(f"run {run} {target.name}: {_brief(results[target.name][-1])}", file=sys.stderr)
    finally:
        for target in targets:
            if isinstance(target, Subprocess):
                target.broker.cleanup()  # its work directory (logs)
    rows = []
    for target in targets:
        rs = results[target.name]
        late = [max(r["late"]) if r["late"] else None for r in rs]
        rows.append([
            target.name,
            _spread([r["listening"] for r in rs], 1000, "{:.0f}"),
            _spread([r["logged"] for r in rs], 1000, "{:.0f}"),
            _spread([r["produced"] for r in rs]),
            _spread([r["cold"] for r in rs]),
            _spread([r["warm"] for r in rs]),
            _spread([statistics.median(r["late"]) if r["late"] else None for r in rs], 1000, "{:.0f}"),
            _spread(late, 1000, "{:.0f}"),
            _spread([r["cpu_listening"] for r in rs]),
            _spread([r["cpu_cold"] for r in rs]),
            str(sum(len(r["errors"]) for r in rs)),
        ])
    print(f"tidegate {git_describe() or '?'}; cold start, {args.cold_runs} runs per target, median (min-max); "
          f"{args.records} x {args.size} B acks=1 to one partition, {args.polls} long polls of "
          f"{args.max_wait_ms} ms; load average {min(load):.1f}-{max(load):.1f}")
    print(format_table(
        ["target", "listening ms", "logged ms", "produced s", "cold produce s", "warm produce s",
         "late p50 ms", "late max ms", "CPU listening s", "CPU cold s", "poll errors"], rows))
    errors = {t.name: e for t in targets for r in results[t.name] for e in r["errors"]}
    for name, error in errors.items():
        print(f"{name}: {error}")


def _brief(r: dict) -> str:
    late = f"{max(r['late']) * 1000:.0f}" if r["late"] else "-"
    return (f"listening {r['listening'] * 1000:.0f} ms, produced {r['produced']:.2f} s, "
            f"warm {r['warm']:.2f} s, latest poll +{late} ms{', errors' if r['errors'] else ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=["start", "cold"], default=["start", "cold"])
    parser.add_argument("--runs", type=int, default=20, help="start: starts per mode (default 20)")
    parser.add_argument("--cold-runs", type=int, default=5, help="cold: runs per target (default 5)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--max-wait-ms", type=int, default=500)
    parser.add_argument("--peer", default=str(_common.REPO_ROOT.parent / "shared/tools/peer-broker.sh"),
                        help="the peer broker's script (SCRIPT start|stop PORT); '' for none")
    parser.add_argument("--base", action="append", default=[], metavar="NAME=SRC",
                        help="cold: also a subprocess broker of another checkout's src (repeatable)")
    args = parser.parse_args()
    cases: dict[str, Callable[[], None]] = {"start": lambda: start_case(args.runs), "cold": lambda: cold_case(args)}
    for case in args.cases:
        cases[case]()


if __name__ == "__main__":
    main()
