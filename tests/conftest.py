"""Shared fixtures: a real tidegate broker process on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


class BrokerProcess:
    """``tidegate serve`` in a subprocess, restartable on the same port and data dir."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> BrokerProcess:
        args = [
            sys.executable,
            "-m",
            "tidegate",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override",
            f"log.dirs={self.data_dir}",
        ]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc)
        return self

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown returns 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def restart(self) -> BrokerProcess:
        if self.proc is not None:
            self.stop()
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(overrides: dict | None = None, name: str = "data") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, overrides=overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        if b.alive():
            try:
                b.stop(10)
            except Exception:  # noqa: BLE001 - a broker that will not stop is killed
                b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


#: The peer broker (Tansu) helper beside the checkout: ../shared/tools/peer-broker.sh
PEER_SCRIPT = Path(__file__).resolve().parents[2] / "shared" / "tools" / "peer-broker.sh"


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
