"""The exactly-once soak (benchmarks/soak.py), bounded for CI: 60 s of kill -9, SIGSTOP
and (as root, on a tmpfs) disk-full faults under idempotent and transactional producers
and a committing group member; every Jepsen-style count must be 0."""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks import soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_soak_60s_loses_nothing_and_duplicates_nothing(tmp_path):
    disk_mb = 64 if os.geteuid() == 0 and shutil.which("mount") else None
    report = soak.run(60.0, 5.0, disk_mb, 1, tmp_path)
    failures = {k: report[k] for k in soak.FAILURE_KEYS if report[k]}
    assert not failures, report
    assert report["acknowledged_idempotent"] > 1000, report
    assert report["committed_txn_records"] > 100 and report["aborted_txn_records"] > 100, report
    assert sum(report["faults"].values()) >= 8, report
