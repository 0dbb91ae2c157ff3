"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core_harness import CoreHarness


@pytest.fixture
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CoreHarness]:
    """The broker's core in ``tmp_path/data`` on fake time (:class:`CoreHarness`), closed
    after the test. A module or test configures it with the ``harness`` mark:
    ``pytestmark = pytest.mark.harness({"broker.key": "value"}, topics={"t": 3})`` (the
    broker's properties, and topics created first, name -> partitions)."""
    mark = request.node.get_closest_marker("harness")
    args = mark.args if mark is not None else ()
    kwargs = mark.kwargs if mark is not None else {}
    harness = CoreHarness(tmp_path / "data", *args, **{k: v for k, v in kwargs.items() if k != "topics"})
    for name, partitions in kwargs.get("topics", {}).items():
        harness.create_topic(name, partitions)
    yield harness
    harness.close()
