"""Helpers shared by the benchmarks: spawning brokers, ports, CPU sampling, tables.

Nothing here imports tidegate: the benchmarks drive brokers over the wire only, so they
run unchanged against tidegate, Kafka, or any other Kafka-compatible broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent


def git_describe() -> str | None:
    """The repository's commit (short hash, '+dirty' if src/ has local changes), or None."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "src"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}{'+dirty' if dirty else ''}" if head else None


def free_port() -> int:
    """A TCP port on loopback that nothing is bound to right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from a blocking socket; ConnectionError if it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def wait_for_port(
    host: str, port: int, timeout: float = 30.0, alive=lambda: True, interval: float = 0.05
) -> None:
    """Wait until something accepts TCP connections on host:port, trying every
    ``interval`` seconds.

    ``alive`` is polled too, so a broker that dies while starting fails fast
    instead of after the whole timeout.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"broker process exited before listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(interval)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


def default_tidegate_python() -> str:
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable



#: Settings every throughput benchmark gives its confluent-kafka consumers. librdkafka
#: postpones a partition's next Fetch by ``fetch.queue.backoff.ms`` (1000 ms by default)
#: once its local queue holds ``queued.min.messages`` / ``queued.max.messages.kbytes``:
#: a broker fast enough to fill the queue then lost about 1 s per case (produce_fetch
#: read 200 MB at 160 MB/s instead of 750 in half of its runs, with any tidegate
#: version). The benchmarks measure the broker, so the backoff is 10 ms.
CONSUMER_THROUGHPUT_CONFIG: dict[str, object] = {"fetch.queue.backoff.ms": 10}

class SpawnedTidegate:
    """``python -m tidegate serve`` on a free loopback port with a throw-away log dir.

    ``restart()`` gives a fresh broker (new process, new empty log dir), so every
    benchmark case starts from the same state.
    """

    kind = "tidegate"

    def __init__(
        self,
        python: str | None = None,
        overrides: list[str] | None = None,
        log_level: str | None = None,
        start_timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ):
        self.python = python or default_tidegate_python()
        self.overrides = list(overrides or [])
        self.log_level = log_level
        self.start_timeout = start_timeout
        #: set in the broker's environment over this process's (e.g. PYTHONPATH: another checkout)
        self.env = dict(env or {})
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="tidegate-bench-"))
        self.proc: subprocess.Popen | None = None
        self.generation = 0
        self.log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def spawn(self) -> SpawnedTidegate:
        """Start the process and return at once (:meth:`start` waits for its port)."""
        self.generation += 1
        data = self.workdir / f"data-{self.generation}"
        self.log_path = self.workdir / f"broker-{self.generation}.log"
        args = [
            self.python,
            "-m",
            "tidegate",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override",
            f"log.dirs={data}",
        ]
        for ov in self.overrides:
            args += ["--override", ov]
        if self.log_level:
            args += ["--log-level", self.log_level]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                args, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True,
                env={**os.environ, **self.env},
            )
        return self

    def start(self) -> SpawnedTidegate:
        """Start the broker and return once its port accepts connections: it serves at
        full speed from then on (no warm-up follows, docs/architecture.md)."""
        self.spawn()
        try:
            wait_for_port(
                "127.0.0.1", self.port, self.start_timeout, alive=lambda: self.proc.poll() is None
            )
        except Exception as e:
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(
                f"tidegate did not start: {e}\n--- broker log tail ---\n{tail}"
            ) from e
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(
                    f"tidegate pid {self.proc.pid} ignored SIGTERM for {timeout:.0f}s; killing",
                    file=sys.stderr,
                )
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        # drop the previous generation's data: a 200k x 1 KiB case is ~200 MB on disk
        for d in self.workdir.glob("data-*"):
            shutil.rmtree(d, ignore_errors=True)

    def restart(self) -> SpawnedTidegate:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def error_lines(self, n: int = 3) -> list[str]:
        """The last n distinct ERROR/CRITICAL log lines and exception lines, oldest first."""
        if self.log_path is None or not self.log_path.exists():
            return []
        out: list[str] = []
        for ln in reversed(self.log_path.read_text(errors="replace").splitlines()):
            s = ln.strip()
            key = s.split("] ", 1)[-1]  # without the timestamp
            if (
                " ERROR " in s
                or " CRITICAL " in s
                or (
                    s
                    and not s.startswith(("File ", "Traceback", "^", "handle:", "["))
                    and s.split(":")[0].endswith(("Error", "Exception"))
                )
            ) and key not in out:
                out.append(key)
                if len(out) == n:
                    break
        return list(reversed(out))

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class SpawnedPeer:
    """The peer broker (Tansu, in-memory) via ``peer-broker.sh start|stop PORT``.

    Tansu never frees memory, so restarting it between cases is the only way to give
    every case the same starting point.
    """

    kind = "peer"

    def __init__(self, script: str | os.PathLike, start_timeout: float = 120.0):
        self.script = str(script)
        self.start_timeout = start_timeout
        self.port = free_port()
        self._pid: int | None = None
        self._starter: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._pid

    def _run(self, cmd: str, timeout: float) -> str:
        out = subprocess.run(
            ["bash", self.script, cmd, str(self.port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"{self.script} {cmd} {self.port} failed ({out.returncode}): {out.stderr.strip()}"
            )
        return out.stdout

    def spawn(self) -> SpawnedPeer:
        """Run the script's ``start`` and return at once; :meth:`started` waits for it
        (it returns once the port is open, polling every 0.1 s) and takes the pid."""
        self._starter = subprocess.Popen(
            ["bash", self.script, "start", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        return self

    def started(self) -> SpawnedPeer:
        assert self._starter is not None, "spawn() first"
        out, err = self._starter.communicate(timeout=self.start_timeout)
        code, self._starter = self._starter.returncode, None
        if code != 0:
            raise RuntimeError(f"{self.script} start {self.port} failed ({code}): {err.strip()}")
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if not lines or not lines[-1].isdigit():
            raise RuntimeError(f"peer script printed no pid: {out!r}")
        self._pid = int(lines[-1])
        return self

    def start(self) -> SpawnedPeer:
        self.spawn().started()
        wait_for_port("127.0.0.1", self.port, 30.0, alive=self.alive)
        return self

    def alive(self) -> bool:
        if self._pid is None:
            return False
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        try:  # a zombie counts as dead
            return psutil.Process(self._pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:
            return True

    def stop(self) -> None:
        if self._pid is None:
            return
        pid = self._pid
        self._run("stop", 30.0)
        # wait for it to go so the next start can bind the same port
        deadline = time.monotonic() + 15
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            os.kill(pid, signal.SIGKILL)
        self._pid = None

    def restart(self) -> SpawnedPeer:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.stop()


class CpuMeter:
    """CPU seconds (user+system, including children) a process used between two marks."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self._proc = None
        if pid is not None:
            self._proc = psutil.Process(pid)

    def now(self) -> float | None:
        if self._proc is None:
            return None
        try:
            t = self._proc.cpu_times()
        except psutil.Error:
            return None
        return (
            t.user
            + t.system
            + getattr(t, "children_user", 0.0)
            + getattr(t, "children_system", 0.0)
        )

    def rss_mb(self) -> float | None:
        if self._proc is None:
            return None
        try:
            return self._proc.memory_info().rss / 1e6
        except psutil.Error:
            return None


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of an already sorted list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, round(q / 100.0 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells):
        return "  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)
        ).rstrip()

    out = [line(headers)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def add_target_arguments(parser) -> None:
    """``--bootstrap HOST:PORT`` (with ``--pid`` for its CPU time) or ``--spawn-tidegate``:
    the broker a one-target benchmark measures (see :func:`open_target`)."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="a running broker (HOST:PORT)")
    where.add_argument("--spawn-tidegate", action="store_true", help="start a tidegate for the run")
    parser.add_argument("--pid", type=int, help="the running broker's pid, for its CPU time")


def open_target(args) -> tuple[str, int | None, SpawnedTidegate | None]:
    """(bootstrap, pid, the spawned broker to ``cleanup()`` or None) from
    :func:`add_target_arguments`' options."""
    if args.spawn_tidegate:
        spawned = SpawnedTidegate(log_level="WARNING").start()
        return spawned.bootstrap, spawned.pid, spawned
    return args.bootstrap, args.pid, None


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 30.0) -> None:
    """Create ``{topic: partitions}`` (replication factor 1) with confluent-kafka's
    AdminClient in one request and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for future in futures.values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    for topic in topics:
        while True:
            t = admin.list_topics(topic, timeout=timeout).topics.get(topic)
            if t is not None and t.error is None and t.partitions and all(
                p.leader >= 0 for p in t.partitions.values()
            ):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} has no leader after {timeout:.0f} s")
            time.sleep(0.01)


def produce_waiting(producer, topic: str, value: bytes, wait_s: float, **kwargs) -> None:
    """``producer.produce`` (confluent-kafka) once there is room: while its queue is full
    (BufferError), serve delivery reports for ``wait_s`` and try again."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(wait_s)


def fill_topic(bootstrap: str, topic: str, partitions: int, records_per_partition: int, value: bytes,
               **producer_conf) -> None:
    """Create ``topic`` and write ``records_per_partition`` copies of ``value`` to each of
    its partitions with confluent-kafka (acks=1, no compression unless ``producer_conf``
    says otherwise), round-robin over the partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(120)
    time.sleep(0.5)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "log_level": 0,
                  "compression.type": "none", **producer_conf})
    for _ in range(records_per_partition):
        for part in range(partitions):
            produce_waiting(p, topic, value, 0.05, partition=part)
        p.poll(0)
    assert p.flush(120) == 0
