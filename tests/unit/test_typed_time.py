"""Monotonic and wall-clock milliseconds are types mypy keeps apart (tidegate.clock).

The fetch-session defect of issue 25 (sessions created on the monotonic clock, touched
with the wall-clock time of the request) type-checked because both were ``int``. Here
mypy checks a snippet against the real signatures: every line marked ``# E:`` must be
refused with that message, every other line accepted (so the test fails if the types
leak, and also if the snippet stops meaning anything).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

SNIPPET = '''
from tidegate.clock import Clock, MonotonicMs, WallMs
from tidegate.log.log import Log
from tidegate.scheduler import Scheduler
from tidegate.server.fetch_session import FetchSessionCache


def fetch_sessions(cache: FetchSessionCache, clock: Clock) -> None:
    session = cache.get(1)
    assert session is not None
    cache.touch(session, clock.milliseconds())
    cache.touch(session, clock.wall_milliseconds())  # E: incompatible type "WallMs"; expected "MonotonicMs"
    cache.touch(session, 120_000)  # E: incompatible type "int"; expected "MonotonicMs"


def log_times(log: Log, clock: Clock) -> None:
    log.append(b"", clock.wall_milliseconds())
    log.append(b"", clock.milliseconds())  # E: incompatible type "MonotonicMs"; expected "WallMs"


def deadlines(scheduler: Scheduler, clock: Clock) -> None:
    scheduler.call_at(MonotonicMs(clock.milliseconds() + 500), lambda: None)
    scheduler.call_at(clock.milliseconds() + 500, lambda: None)  # E: incompatible type "int"; expected "MonotonicMs"
    scheduler.call_at(clock.wall_milliseconds(), lambda: None)  # E: incompatible type "WallMs"; expected "MonotonicMs"
    stamped: WallMs = clock.milliseconds()  # E: (expression has type "MonotonicMs", variable has type "WallMs")
    waited: int = clock.milliseconds() - clock.milliseconds()  # a duration is a plain int
'''


def test_mypy_keeps_monotonic_and_wall_milliseconds_apart(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\npython_version = 3.11\nfollow_imports = silent\n")
    pytest_cache = getattr(pytestconfig, "cache", None)  # absent under -p no:cacheprovider
    cache = pytest_cache.mkdir("mypy-typed-time") if pytest_cache is not None else tmp_path
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache),
         "--no-error-summary", "--hide-error-context", "--no-pretty", str(snippet)],
        check=False, capture_output=True, text=True, env={"MYPYPATH": str(SRC), "PATH": ""}, timeout=300,
    )  # fmt: skip
    assert run.stderr == "", run.stderr
    found: dict[int, str] = {}
    for line in run.stdout.splitlines():
        m = re.search(r"snippet\.py:(\d+): error: (.*)", line)  # (a cached result names an older tmp_path)
        assert m is not None, run.stdout
        found[int(m.group(1))] = m.group(2)
    expected = {
        n: text.split("# E: ", 1)[1]
        for n, text in enumerate(SNIPPET.splitlines(), start=1)
        if "# E: " in text
    }
    assert found.keys() == expected.keys(), run.stdout
    for n, message in expected.items():
        assert message in found[n], (n, found[n])
