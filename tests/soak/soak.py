"""An exactly-once soak in the spirit of Jepsen's Kafka workload (issue 19).

Clients, each a confluent-kafka process restarted whenever it exits:

* two **idempotent producers** writing unique values (``name:incarnation:n``) to
  ``soak-idem`` and logging every acknowledged one (partition, offset);
* a **transactional producer** writing transactions of five values to ``soak-txn``,
  committing two of three and aborting the third, logging each outcome it was told;
* two **consumer-group members** of ``soak-group`` reading ``soak-idem`` and committing;
* two **transactional consume-transform-produce workers** copying ``soak-idem`` to
  ``soak-eos`` with their input offsets in the transaction (the exactly-once check's
  worker, tests/integration/test_exactly_once.py).

A **nemesis** meanwhile kill -9s and restarts the broker, SIGSTOPs it and SIGCONTs it,
throttles every client with a produce byte-rate quota, and (when the data directory is
a tmpfs the harness could mount) fills the disk and frees it again. A monitor polls the
group's committed offsets.

The **checker** then reads everything back and counts what must be zero:
acknowledged writes lost, values duplicated (idempotent producers, and the
exactly-once workers' output), read_committed reads of aborted transactions, offsets not
increasing within a partition, and committed offsets moving backwards.

    .venv/bin/python -m tests.soak.soak --seconds 1800     # the long run
    tests/soak/test_soak.py                                # 60 s on every CI run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import BrokerProcess
from tests.integration.clients import alter_quotas, create_topic
from tests.integration.test_exactly_once import WORKER as EOS_WORKER

PARTITIONS = 3
BROKER_PROPS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "num.partitions": str(PARTITIONS),
    # a long run must not fill its tmpfs: retention keeps each partition near 32 MiB
    # (what it deleted is counted as aged out, not checked)
    "log.segment.bytes": str(4 * 1024 * 1024),
    "log.retention.bytes": str(32 * 1024 * 1024),
    "log.retention.check.interval.ms": "5000",
}

#: the start of every client script: SIGTERM asks the loop to stop (``stop``)
_STOPPABLE = textwrap.dedent("""
    import signal
    stop = False
    def on_term(*_):
        global stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
""")

IDEMPOTENT = _STOPPABLE + textwrap.dedent("""
    import json, os, signal, sys
    from confluent_kafka import Producer
    bootstrap, topic, name, log_path = sys.argv[1:5]
    log = open(log_path, "a", buffering=1)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 120000, "log_level": 0})
    def acked(err, msg):
        if err is None:
            log.write(json.dumps({"v": msg.value().decode(), "p": msg.partition(), "o": msg.offset()}) + "\\n")
    n = 0
    while not stop:
        try:
            p.produce(topic, f"{name}:{os.getpid()}:{n}".encode(), on_delivery=acked)
            n += 1
        except BufferError:
            pass
        p.poll(0.002)
    p.flush(30)
""")

TRANSACTIONAL = _STOPPABLE + textwrap.dedent("""
    import json, os, random, signal, sys
    from confluent_kafka import KafkaException, Producer
    bootstrap, topic, name, log_path = sys.argv[1:5]
    log = open(log_path, "a", buffering=1)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"soak-{name}",
                  "transaction.timeout.ms": 10000, "linger.ms": 5, "log_level": 0})
    p.init_transactions(60)
    t = 0
    while not stop:
        values = [f"{name}:{os.getpid()}:{t}:{i}" for i in range(5)]
        commit = random.random() < 2 / 3
        at = {}
        def delivered(err, msg):
            if err is None:
                at[msg.value().decode()] = [msg.partition(), msg.offset()]
        try:
            p.begin_transaction()
            for v in values:
                p.produce(topic, v.encode(), on_delivery=delivered)
            if commit:
                p.commit_transaction(60)
            else:
                p.abort_transaction(60)
            log.write(json.dumps({"values": values, "at": at, "status": "committed" if commit else "aborted"}) + "\\n")
        except KafkaException as exc:
            if exc.args[0].txn_requires_abort():
                p.abort_transaction(60)
                log.write(json.dumps({"values": values, "at": at, "status": "aborted"}) + "\\n")
            elif exc.args[0].retriable():
                continue  # the outcome is unknown: neither counted as committed nor aborted
            else:
                raise
        t += 1
""")

GROUP_MEMBER = _STOPPABLE + textwrap.dedent("""
    import signal, sys
    from confluent_kafka import Consumer
    bootstrap, topic = sys.argv[1:3]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-group", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 3000,
                  "heartbeat.interval.ms": 500, "log_level": 0})
    c.subscribe([topic])
    while not stop:
        msgs = c.consume(200, 0.5)
        if msgs:
            try:
                c.commit(asynchronous=False)
            except Exception:
                pass
    c.close()
""")


@dataclass
class Report:
    seconds: float = 0.0
    nemesis: Counter = field(default_factory=Counter)
    restarts: int = 0
    acked: int = 0
    #: acknowledged writes below the log start offset at the end (deleted by retention)
    aged_out: int = 0
    lost: int = 0
    duplicated: int = 0
    txn_committed: int = 0
    txn_aborted: int = 0
    committed_missing: int = 0
    aborted_read: int = 0
    eos_output: int = 0
    eos_duplicated: int = 0
    non_monotonic: int = 0
    commits_backwards: int = 0
    group_commit_samples: int = 0
    #: seconds spent stopping the clients and reading everything back
    wind_down: tuple[float, float] = (0.0, 0.0)

    def violations(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("lost", "duplicated", "committed_missing", "aborted_read",
                                              "eos_duplicated", "non_monotonic", "commits_backwards")
                if getattr(self, k)}

    def table(self) -> str:
        rows = [
            ("run", f"{self.seconds:.0f} s, nemesis {dict(self.nemesis)}, {self.restarts} client restarts"),
            ("clients stopped in / checked in", f"{self.wind_down[0]:.0f} s / {self.wind_down[1]:.0f} s"),
            ("idempotent writes acknowledged (aged out by retention)", f"{self.acked} ({self.aged_out})"),
            ("  acknowledged writes lost (must be 0)", self.lost),
            ("  values duplicated (must be 0)", self.duplicated),
            ("transactions committed / aborted", f"{self.txn_committed} / {self.txn_aborted}"),
            ("  committed values missing at read_committed (must be 0)", self.committed_missing),
            ("  aborted values read at read_committed (must be 0)", self.aborted_read),
            ("exactly-once workers' output records", self.eos_output),
            ("  output duplicated (must be 0)", self.eos_duplicated),
            ("offsets not increasing within a partition (must be 0)", self.non_monotonic),
            ("group commit samples", self.group_commit_samples),
            ("  committed offsets moving backwards (must be 0)", self.commits_backwards),
        ]
        return "\n".join(f"{k:<58} {v}" for k, v in rows)


class Soak:
    def __init__(self, base: Path, seconds: float, *, seed: int = 1, disk: bool | None = None,
                 tmpfs_mb: int = 512) -> None:
        self.base = base
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.data = base / "data"
        self.tmpfs = False
        if disk is not False and os.geteuid() == 0 and shutil.which("mount"):
            self.data.mkdir(parents=True, exist_ok=True)
            self.tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={tmpfs_mb}m", "tmpfs", str(self.data)],
                                        check=False, capture_output=True).returncode == 0
        self.broker = BrokerProcess(self.data, overrides=BROKER_PROPS)
        self.logs = base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.clients: dict[str, tuple[list[str], subprocess.Popen | None]] = {}
        self.report = Report()
        self.commit_samples: list[dict[int, int]] = []
        self._monitor_stop = threading.Event()

    # -- clients -------------------------------------------------------------------------
    def _spawn(self, name: str) -> None:
        args, _ = self.clients[name]
        with open(self.logs / f"{name}.out", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-c", *args], stdout=out, stderr=subprocess.STDOUT)
        self.clients[name] = (args, proc)

    def _add(self, name: str, script: str, *args: str) -> None:
        self.clients[name] = ([script, *args], None)
        self._spawn(name)

    def _restart_exited(self) -> None:
        for name, (_args, proc) in list(self.clients.items()):
            if proc is not None and proc.poll() is not None:
                self.report.restarts += 1
                self._spawn(name)

    # -- the nemesis -------------------------------------------------------------------------
    def _nemesis(self) -> None:
        actions = ["kill", "pause", "quota"] + (["disk"] if self.tmpfs else [])
        action = self.rng.choice(actions)
        self.report.nemesis[action] += 1
        b = self.broker
        if action == "kill":
            b.kill()
            time.sleep(0.5)
            b.start()
        elif action == "pause":
            os.kill(b.pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(1, 3))
            os.kill(b.pid, signal.SIGCONT)
        elif action == "quota":
            try:
                alter_quotas(b.bootstrap, {"client-id": None}, {"producer_byte_rate": 20_000.0})
                time.sleep(3)
                alter_quotas(b.bootstrap, {"client-id": None}, {"producer_byte_rate": None})
            except Exception:  # noqa: BLE001 - the broker may be restarting: next time
                self.report.nemesis["quota-failed"] += 1
        elif action == "disk":
            filler = self.data / "filler"
            try:
                free = shutil.disk_usage(self.data).free
                with open(filler, "wb") as f:
                    f.truncate(0)
                    os.posix_fallocate(f.fileno(), 0, max(free - 64 * 1024, 0))
                time.sleep(3)
            except OSError:
                pass
            finally:
                filler.unlink(missing_ok=True)

    def _monitor(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        while not self._monitor_stop.wait(1.0):
            if not self.broker.alive():
                continue
            c = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": "soak-group",
                          "log_level": 0})
            try:
                parts = c.committed([TopicPartition("soak-idem", p) for p in range(PARTITIONS)], timeout=3)
                self.commit_samples.append({tp.partition: tp.offset for tp in parts if tp.offset >= 0})
            except Exception:  # noqa: BLE001, S110 - broker paused or restarting: no sample
                pass
            finally:
                c.close()

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> Report:
        b = self.broker.start()
        try:
            for topic in ("soak-idem", "soak-txn", "soak-eos"):
                create_topic(b.bootstrap, topic, partitions=PARTITIONS, client="confluent")
            for i in range(2):
                self._add(f"idem-{i}", IDEMPOTENT, b.bootstrap, "soak-idem", f"idem-{i}",
                          str(self.logs / f"idem-{i}.jsonl"))
            self._add("txn-0", TRANSACTIONAL, b.bootstrap, "soak-txn", "txn-0", str(self.logs / "txn-0.jsonl"))
            for i in range(2):
                self._add(f"member-{i}", GROUP_MEMBER, b.bootstrap, "soak-idem")
                self._add(f"eos-{i}", EOS_WORKER, b.bootstrap, "soak-idem", "soak-eos", str(i))
            monitor = threading.Thread(target=self._monitor, daemon=True)
            monitor.start()
            started = time.monotonic()
            next_fault = started + 5
            while time.monotonic() - started < self.seconds:
                if time.monotonic() >= next_fault:
                    self._nemesis()
                    next_fault = time.monotonic() + self.rng.uniform(4, 10)
                self._restart_exited()
                time.sleep(0.2)
            self.report.seconds = time.monotonic() - started
            self._monitor_stop.set()
            monitor.join(10)
            t0 = time.monotonic()
            self._stop_clients()
            t1 = time.monotonic()
            self._check()
            self.report.wind_down = (t1 - t0, time.monotonic() - t1)
            return self.report
        finally:
            self._stop_clients()
            self.broker.stop_or_kill()
            if self.tmpfs:
                subprocess.run(["umount", "-l", str(self.data)], check=False, capture_output=True)

    def _stop_clients(self) -> None:
        for _args, proc in self.clients.values():
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _args, proc in self.clients.values():
            if proc is not None:
                try:
                    proc.wait(40)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

    # -- the checker ---------------------------------------------------------------------------------
    def _read_all(self, topic: str, committed: bool) -> list[tuple[int, int, str]]:
        """(partition, offset, value) of every record of ``topic`` up to its end."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": "soak-checker",
                      "enable.auto.commit": False, "log_level": 0,
                      "isolation.level": "read_committed" if committed else "read_uncommitted"})
        try:
            ends = {}
            for p in range(PARTITIONS):
                _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                ends[p] = high
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            out: list[tuple[int, int, str]] = []
            done: set[int] = {p for p, e in ends.items() if e == 0}
            deadline = time.monotonic() + 120
            while len(done) < PARTITIONS and time.monotonic() < deadline:
                for m in c.consume(1000, 1.0):
                    if m.error() is not None:
                        continue
                    out.append((m.partition(), m.offset(), m.value().decode()))
                    if m.offset() >= ends[m.partition()] - 1:
                        done.add(m.partition())
                # transaction markers (and aborted records, read_committed) are never
                # delivered: a partition is done once the position passed its end
                for p in range(PARTITIONS):
                    pos = c.position([TopicPartition(topic, p)])[0].offset
                    if pos >= ends[p]:
                        done.add(p)
            return out
        finally:
            c.close()

    def _log_start_offsets(self, topic: str) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": "soak-checker", "log_level": 0})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in range(PARTITIONS)}
        finally:
            c.close()

    def _check(self) -> None:
        r = self.report
        if not self.broker.alive():
            self.broker.start()
        reads = {(t, committed): self._read_all(t, committed)
                 for t in ("soak-idem", "soak-txn", "soak-eos") for committed in (False, True)}
        for records in reads.values():
            last: dict[int, int] = {}
            for p, o, _v in records:
                if o <= last.get(p, -1):
                    r.non_monotonic += 1
                last[p] = o
        idem = reads[("soak-idem", False)]
        counts = Counter(v for _p, _o, v in idem)
        r.duplicated = sum(1 for n in counts.values() if n > 1)
        at = {(p, o): v for p, o, v in idem}
        start = self._log_start_offsets("soak-idem")
        for path in self.logs.glob("idem-*.jsonl"):
            for line in path.read_text().splitlines():
                a = json.loads(line)
                r.acked += 1
                if a["o"] < start[a["p"]]:
                    r.aged_out += 1
                elif at.get((a["p"], a["o"])) != a["v"]:
                    r.lost += 1
        txn_read = {v for _p, _o, v in reads[("soak-txn", True)]}
        txn_start = self._log_start_offsets("soak-txn")
        for line in (self.logs / "txn-0.jsonl").read_text().splitlines() if (self.logs / "txn-0.jsonl").exists() else []:
            t = json.loads(line)
            if t["status"] == "committed":
                r.txn_committed += 1
                r.committed_missing += sum(
                    1 for v in t["values"]
                    if v not in txn_read and not (v in t["at"] and t["at"][v][1] < txn_start[t["at"][v][0]]))
            else:
                r.txn_aborted += 1
                r.aborted_read += sum(1 for v in t["values"] if v in txn_read)
        eos = reads[("soak-eos", True)]
        r.eos_output = len(eos)
        eos_counts = Counter(v for _p, _o, v in eos)
        r.eos_duplicated = sum(1 for n in eos_counts.values() if n > 1)
        r.group_commit_samples = len(self.commit_samples)
        highest: dict[int, int] = defaultdict(lambda: -1)
        for sample in self.commit_samples:
            for p, o in sample.items():
                if o < highest[p]:
                    r.commits_backwards += 1
                highest[p] = max(highest[p], o)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="An exactly-once soak against a tidegate broker it starts.")
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-disk", action="store_true", help="no disk-full faults (no tmpfs)")
    parser.add_argument("--tmpfs-mb", type=int, default=512, help="size of the data tmpfs (root only)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="tidegate-soak-"))
    report = Soak(base, args.seconds, seed=args.seed, disk=False if args.no_disk else None,
                  tmpfs_mb=args.tmpfs_mb).run()
    print(report.table())
    print(f"(logs in {base / 'logs'})")
    return 1 if report.violations() else 0


if __name__ == "__main__":
    raise SystemExit(main())
