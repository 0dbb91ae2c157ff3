"""The exactly-once soak (tests/soak/soak.py) for 60 seconds on every CI run: every
count that must be zero is zero, and the run really did something (writes acknowledged,
transactions both committed and aborted, faults injected, the group committed)."""

from __future__ import annotations

import pytest

from .soak import Soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_minute_of_faults_loses_duplicates_and_leaks_nothing(tmp_path):
    report = Soak(tmp_path, 60, seed=20261125).run()
    print(report.table())
    assert report.violations() == {}, report.table()
    assert report.acked > 1000 and report.txn_committed > 0 and report.txn_aborted > 0, report.table()
    assert sum(report.nemesis.values()) >= 4 and report.group_commit_samples > 10, report.table()
    assert report.eos_output > 0, report.table()
