"""Shared fixtures: a real tidegate broker process on a free loopback port."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegate.testing import Broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has bytes (or EOF) to read within ``timeout`` seconds. ``poll``, not
    ``select``: a test process may hold descriptors numbered past select's 1024."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))

def wait_until(
    cond: Callable[[], object],
    timeout: float,
    step: Callable[[], None] | None = None,
    what: str | Callable[[], str] = "condition",
    interval: float = 0.05,
) -> float:
    """Run ``step`` (or sleep ``interval``) until ``cond()`` is true; returns the seconds
    it took. Raises AssertionError naming ``what`` (or what ``what()`` says then) after
    ``timeout`` seconds."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            what = what() if callable(what) else what
            raise AssertionError(f"{what} not reached within {timeout}s")
        if step is not None:
            step()
        else:
            time.sleep(interval)
    return time.monotonic() - start


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    def listening() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    wait_until(listening, timeout, what=f"a listener on 127.0.0.1:{port}")


def metrics_overrides() -> dict:
    """Broker overrides that serve /metrics on a free loopback port (``metrics_url``)."""
    return {"metrics.listener": f"http://127.0.0.1:{free_port()}"}


#: log files of the brokers started so far (a failing test shows those written during it)
STARTED_LOGS: dict[Path, None] = {}
LOG_TAIL_LINES = 80
_test_started_at = [0.0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test shows the end of the log of every broker that wrote to its log during
    the test: what the broker said about the connections and requests the test saw, so a
    flaky failure is diagnosable from the CI output alone."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        _test_started_at[0] = call.start
    if report.failed:
        for path in STARTED_LOGS:
            if path.exists() and path.stat().st_mtime >= _test_started_at[0]:
                lines = path.read_text(errors="replace").splitlines()
                report.sections.append(
                    (f"broker log {path.name} (last {LOG_TAIL_LINES} lines)",
                     "\n".join(lines[-LOG_TAIL_LINES:]))
                )


class BrokerProcess(Broker):
    """``tidegate serve`` in a subprocess, restartable on the same port and data dir: a
    :class:`tidegate.testing.Broker` (``mode="subprocess"``) with the tests' defaults
    (Kafka's ``group.initial.rebalance.delay.ms``, a log per port that a failing test
    shows)."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict | None = None):
        """``port``: the first listener's; by default that of a ``listeners`` override,
        else a free one (one PLAINTEXT listener)."""
        overrides = dict(overrides or {})
        listeners = _listener_ports(overrides)
        self.port = port or (next(iter(listeners.values())) if listeners else free_port())
        overrides.setdefault("listeners", f"PLAINTEXT://127.0.0.1:{self.port}")
        super().__init__(mode="subprocess", data_dir=data_dir, overrides=overrides, keep=True,
                         log_path=data_dir.parent / f"broker-{self.port}.log")
        if "group.initial.rebalance.delay.ms" not in (overrides or {}):
            del self.overrides["group.initial.rebalance.delay.ms"]  # Kafka's default here

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """The /metrics endpoint, when the broker was given a ``metrics.listener``."""
        listener = self.overrides.get("metrics.listener")
        return f"{listener}/metrics" if listener else None

    def listener_port(self, name: str) -> int:
        return _listener_ports(self.overrides)[name]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> BrokerProcess:
        assert self.log_path is not None
        STARTED_LOGS[self.log_path] = None
        super().start()
        return self

    def restart(self) -> BrokerProcess:
        super().restart()
        return self

    def stop_or_kill(self, timeout: float = 10.0) -> None:
        """Tear-down: stop it if it runs, and kill it if it will not stop."""
        if self.alive():
            self.stop(timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.running


def _listener_ports(overrides: dict) -> dict[str, int]:
    """{listener name: port} of a ``listeners`` override."""
    out = {}
    for spec in str(overrides.get("listeners", "")).split(","):
        if spec.strip():
            name, address = spec.strip().split("://", 1)
            out[name] = int(address.rsplit(":", 1)[1])
    return out


def _broker_factory(base: Path):
    started: list[BrokerProcess] = []

    def make(
        overrides: dict | None = None, name: str = "data", port: int | None = None
    ) -> BrokerProcess:
        b = BrokerProcess(base / name, port=port, overrides=overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.stop_or_kill()


@pytest.fixture
def broker_factory(tmp_path):
    """``make(overrides, name, port)``: a started broker, stopped (or killed) at the end."""
    yield from _broker_factory(tmp_path)


@pytest.fixture(scope="module")
def module_broker_factory(request, tmp_path_factory):
    """``broker_factory`` for brokers shared by the tests of one module."""
    yield from _broker_factory(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


#: The peer broker (Tansu) helper beside the checkout: ../shared/tools/peer-broker.sh, or
#: the one TIDEGATE_PEER_SCRIPT names (a git worktree elsewhere)
PEER_SCRIPT = Path(
    os.environ.get("TIDEGATE_PEER_SCRIPT")
    or Path(__file__).resolve().parents[2] / "shared" / "tools" / "peer-broker.sh"
)


@pytest.fixture(scope="module")
def peer_bootstrap():
    """Tansu on a free loopback port for one module; skips when it cannot start (no
    ``../shared`` beside the checkout, no binary, no network to fetch it)."""
    from tidegate.client import KafkaClient

    if not PEER_SCRIPT.exists():
        pytest.skip(f"no peer broker script at {PEER_SCRIPT}")
    port = free_port()

    def stop() -> None:
        subprocess.run(["bash", str(PEER_SCRIPT), "stop", str(port)], check=False,
                       capture_output=True, timeout=30)

    try:
        subprocess.run(["bash", str(PEER_SCRIPT), "start", str(port)], check=True,
                       capture_output=True, timeout=120)
        with KafkaClient(f"127.0.0.1:{port}") as c:
            c.bootstrap(timeout_ms=10_000)
    except Exception as exc:  # noqa: BLE001 - any failure means: no peer here
        stop()
        pytest.skip(f"peer broker did not start: {exc}")
    yield f"127.0.0.1:{port}"
    stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (made at run
    time: no key is committed), as files and PEM text: :func:`tidegate.testing.make_pki`."""
    from tidegate.testing import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def spark():
    """One local[2] SparkSession (bound to loopback, the tidegate source registered) for
    the module, or the one already running; skipped without Java."""
    import shutil

    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.skip("no Java on this machine (Spark needs Java 17+)")
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    import tidegate.spark

    running = SparkSession.getActiveSession()
    session = tidegate.spark.local_session(
        "tidegate-spark-tests",
        **{"spark.sql.streaming.stopTimeout": "30s", "spark.driver.memory": "1g"},
    )
    yield session
    if running is None:
        session.stop()
