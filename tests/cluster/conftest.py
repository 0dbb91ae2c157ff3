"""Fixtures of the cluster tests: librdkafka's mock cluster (3 brokers, in this
process, through ctypes; skipped with the reason when the library or its mock symbols
are missing) and the peer broker (Tansu, from tests/conftest.py)."""

from __future__ import annotations

import itertools

import pytest

from .mock_cluster import MockCluster, unavailable_reason

_names = itertools.count()


@pytest.fixture
def mock_cluster():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"librdkafka's mock cluster is not available: {reason}")
    with MockCluster(3) as cluster:
        yield cluster


@pytest.fixture
def topic_name(request) -> str:
    """A topic name of this test's own."""
    return f"{request.node.name.split('[')[0].removeprefix('test_')[:40]}-{next(_names)}"
