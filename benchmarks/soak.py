"""Exactly-once soak under faults (issue 19), in the spirit of Jepsen's Kafka workload.

One tidegate broker on a fixed data dir; for ``--duration`` seconds:

- idempotent producers (confluent-kafka, acks=all, enable.idempotence) write
  distinct values and remember each acknowledged one with its offset;
- a transactional producer writes transactions of a few records and commits or
  aborts each at random, remembering which values were committed or aborted (a
  transaction whose commit or abort raised is *indeterminate* and checked for
  neither);
- a consumer-group member (read_committed) commits what it read, and the offsets
  the group has committed are sampled to check they never move backwards;
- a nemesis, every ``--fault-interval`` seconds, kill -9s and restarts the broker,
  SIGSTOPs it for a moment and SIGCONTs it, or (with ``--disk-mb``, as root) fills
  the tmpfs holding the log dir and frees it again.

Afterwards the broker runs undisturbed and a checker reads every partition from
the start (read_uncommitted and read_committed) and reports, all of which must be 0:
acknowledged writes lost, duplicates from the idempotent producers, aborted
records seen by read_committed, non-monotonic offsets, committed offsets moving
backwards.

    python benchmarks/soak.py --duration 60
    python benchmarks/soak.py --duration 1800 --disk-mb 256   # as root: fills a tmpfs

Prints a JSON report and exits 1 if any count is not 0. Not done yet: the
consume-transform-produce workers and the quota throttling of issue 19.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOPIC = "soak"
PARTITIONS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """``python -m tidegate serve`` on one data dir, for kill -9, SIGSTOP and restart."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [sys.executable, "-m", "tidegate", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}",
                "--override", "transaction.state.log.replication.factor=1",
                "--override", "transaction.state.log.min.isr=1",
                "--override", "group.initial.rebalance.delay.ms=0"]  # fmt: skip
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not listen within 60 s")

    def kill9(self) -> None:
        assert self.proc is not None
        if self.paused:
            self.resume()
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@dataclass
class History:
    """What the clients were told, shared by the workers (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: idempotent value -> (partition, offset) of its acknowledgement
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    committed_txn: set[bytes] = field(default_factory=set)
    aborted_txn: set[bytes] = field(default_factory=set)
    indeterminate_txn: set[bytes] = field(default_factory=set)
    #: (partition, committed offset) samples, in time order
    group_commits: list[tuple[int, int]] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)


def idempotent_producer(bootstrap: str, n: int, hist: History, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 120_000, "log_level": 0})  # fmt: skip

    def report(err, msg):
        if err is None:
            with hist.lock:
                hist.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            with hist.lock:
                hist.errors[f"idempotent:{err.name()}"] += 1

    seq = 0
    while not stop.is_set():
        try:
            p.produce(TOPIC, value=b"idem-%d-%d" % (n, seq), on_delivery=report)
            seq += 1
        except BufferError:
            p.poll(0.1)
        p.poll(0.002)
    p.flush(150)


def transactional_producer(bootstrap: str, hist: History, stop: threading.Event, seed: int) -> None:
    from confluent_kafka import KafkaException, Producer

    rnd = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "soak-txn",
                  "transaction.timeout.ms": 60_000, "log_level": 0})  # fmt: skip
    p.init_transactions(120)
    n = 0
    while not stop.is_set():
        values = [b"txn-%d" % (n + i) for i in range(rnd.randint(1, 5))]
        n += len(values)
        commit = rnd.random() < 0.5
        try:
            p.begin_transaction()
            for v in values:
                p.produce(TOPIC, value=v)
            if commit:
                p.commit_transaction(60)
            else:
                p.abort_transaction(60)
        except KafkaException as exc:
            with hist.lock:
                hist.indeterminate_txn.update(values)
                hist.errors[f"txn:{exc.args[0].name()}"] += 1
            err = exc.args[0]
            try:
                if err.txn_requires_abort():
                    p.abort_transaction(60)
                elif not err.retriable():
                    return  # fatal (fenced): stop this worker
            except KafkaException:
                time.sleep(0.5)
            continue
        with hist.lock:
            (hist.committed_txn if commit else hist.aborted_txn).update(values)


def group_member(bootstrap: str, hist: History, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-group",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    c.subscribe([TOPIC])
    try:
        while not stop.is_set():
            msgs = c.consume(500, 0.5)
            if msgs:
                try:
                    c.commit(asynchronous=False)
                except KafkaException as exc:
                    with hist.lock:
                        hist.errors[f"commit:{exc.args[0].name()}"] += 1
            try:
                parts = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=5)
            except KafkaException:
                continue
            with hist.lock:
                hist.group_commits.extend((tp.partition, tp.offset) for tp in parts if tp.offset >= 0)
    finally:
        c.close()


def fill(path: Path) -> None:
    chunk = b"\0" * (1 << 16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def nemesis(broker: Broker, hist: History, stop: threading.Event, interval: float,
            disk: Path | None, seed: int) -> None:  # fmt: skip
    rnd = random.Random(seed)
    kinds = ["kill", "pause"] + (["disk"] if disk is not None else [])
    while not stop.wait(interval):
        kind = rnd.choice(kinds)
        hist.faults[kind] += 1
        if kind == "kill":
            broker.kill9()
            broker.start()
        elif kind == "pause":
            broker.pause()
            stop.wait(rnd.uniform(0.5, 3))
            broker.resume()
        else:
            assert disk is not None
            fill(disk / "filler")
            stop.wait(rnd.uniform(1, 3))
            (disk / "filler").unlink()


def read_all(bootstrap: str, isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from offset 0 to its end: {partition: [(offset, value)]}."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-checker",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "check.crcs": True, "log_level": 0})  # fmt: skip
    out: dict[int, list[tuple[int, bytes]]] = {}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        pos = dict.fromkeys(range(PARTITIONS), 0)
        out = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        while any(pos[p] < ends[p] for p in pos) and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out[m.partition()].append((m.offset(), m.value()))
                pos[m.partition()] = m.offset() + 1
            if isolation == "read_committed":
                # the last records may be markers or aborted data: stop at the LSO
                pos = {p: max(pos[p], c.position([TopicPartition(TOPIC, p)])[0].offset) for p in pos}
    finally:
        c.close()
    return out


def check(hist: History, uncommitted: dict, committed: dict) -> dict:
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    non_monotonic = 0
    for p, recs in uncommitted.items():
        offsets = [o for o, _ in recs]
        non_monotonic += sum(1 for a, b in itertools.pairwise(offsets) if b <= a)
        for o, v in recs:
            where[v].append((p, o))
    seen_committed = Counter(v for recs in committed.values() for _, v in recs)
    lost = [v for v, at in hist.acked.items() if at not in where.get(v, [])]
    lost += [v for v in hist.committed_txn if seen_committed[v] == 0]
    duplicates = sum(len(at) - 1 for v, at in where.items() if v.startswith(b"idem-") and len(at) > 1)
    aborted_read = sum(1 for v in hist.aborted_txn if seen_committed[v])
    backwards = 0
    last: dict[int, int] = {}
    for p, o in hist.group_commits:
        if o < last.get(p, -1):
            backwards += 1
        last[p] = max(o, last.get(p, -1))
    return {
        "acknowledged_lost": len(lost),
        "idempotent_duplicates": duplicates,
        "read_committed_aborted": aborted_read,
        "non_monotonic_offsets": non_monotonic,
        "committed_offsets_backwards": backwards,
        "lost_examples": [v.decode() for v in lost[:5]],
    }


def run(duration: float, fault_interval: float, disk_mb: int | None, seed: int, workdir: Path) -> dict:
    disk: Path | None = None
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    if disk_mb:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mb}m", "tmpfs", str(data)], check=True)
        disk = data
    broker = Broker(data, workdir / "broker.log")
    hist = History()
    try:
        broker.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        stop_clients, stop_faults = threading.Event(), threading.Event()
        workers = [threading.Thread(target=idempotent_producer, args=(broker.bootstrap, i, hist, stop_clients))
                   for i in range(2)]  # fmt: skip
        workers.append(threading.Thread(target=transactional_producer,
                                        args=(broker.bootstrap, hist, stop_clients, seed)))  # fmt: skip
        workers.append(threading.Thread(target=group_member, args=(broker.bootstrap, hist, stop_clients)))
        faults = threading.Thread(target=nemesis,
                                  args=(broker, hist, stop_faults, fault_interval, disk, seed))  # fmt: skip
        for t in [*workers, faults]:
            t.start()
        time.sleep(duration)
        stop_faults.set()
        faults.join()
        if broker.proc is None:
            broker.start()
        if disk is not None:
            (disk / "filler").unlink(missing_ok=True)
        stop_clients.set()
        for t in workers:
            t.join(180)
        report = check(hist, read_all(broker.bootstrap, "read_uncommitted"),
                       read_all(broker.bootstrap, "read_committed"))  # fmt: skip
        report.update({
            "duration_s": duration,
            "faults": dict(hist.faults),
            "acknowledged_idempotent": len(hist.acked),
            "committed_txn_records": len(hist.committed_txn),
            "aborted_txn_records": len(hist.aborted_txn),
            "indeterminate_txn_records": len(hist.indeterminate_txn),
            "group_commit_samples": len(hist.group_commits),
            "client_errors": dict(hist.errors),
        })  # fmt: skip
        return report
    finally:
        broker.stop()
        if disk is not None:
            subprocess.run(["umount", "-l", str(disk)], check=False)


FAILURE_KEYS = ("acknowledged_lost", "idempotent_duplicates", "read_committed_aborted",
                "non_monotonic_offsets", "committed_offsets_backwards")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults (default 60)")
    parser.add_argument("--fault-interval", type=float, default=5.0, help="seconds between faults")
    parser.add_argument("--disk-mb", type=int, default=None,
                        help="mount a tmpfs of this size as the log dir and fill it as a fault (root)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (broker log)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tidegate-soak-"))
    try:
        report = run(args.duration, args.fault_interval, args.disk_mb, args.seed, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 1 if any(report[k] for k in FAILURE_KEYS) else 0


if __name__ == "__main__":
    sys.exit(main())
