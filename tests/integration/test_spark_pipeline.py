"""The example pipeline (examples/pipeline/run.py) end to end, as a user runs it: it
starts its own broker, streams, aggregates, writes to a topic and Parquet, reads the
topic back and checks the table against the generated events (exit 0 = match)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

RUN = Path(__file__).resolve().parents[2] / "examples" / "pipeline" / "run.py"


@pytest.mark.timeout(420)
def test_pipeline_runs_and_matches(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(RUN), "--events", "3000", "--minutes", "3",
         "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "pageviews-per-minute (read back from the topic), 18 windows" in out, out[-3000:]
    assert "-> OK" in out
    assert (tmp_path / "parquet").is_dir()
