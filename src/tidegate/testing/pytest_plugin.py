"""pytest fixtures for a tidegate broker, registered through the ``pytest11`` entry point
(installing tidegate is all the set-up there is).

- ``tidegate_broker``: a started :class:`~tidegate.testing.Broker`, shared by the
  session (or the scope the ``tidegate_broker_scope`` ini option names: session,
  package, module, class or function). A test marked ``@pytest.mark.tidegate(...)``
  (any :class:`~tidegate.testing.Broker` keyword: ``partitions=3``, ``users={...}``,
  ``tls=True``, ``overrides={...}``, ``mode="subprocess"``) gets a broker of its own
  with those settings instead.
- ``tidegate_topic``: a fresh topic on ``tidegate_broker`` for each test (its name);
  ``@pytest.mark.tidegate(topic_partitions=3, topic_config={...})`` shapes it.
- ``tidegate_broker_factory``: ``make(**settings)`` starts another broker, stopped at
  the end of the test.

ini options (``pytest.ini`` / ``[tool.pytest.ini_options]``): ``tidegate_broker_scope``,
``tidegate_broker_mode`` (inprocess or subprocess), ``tidegate_partitions`` and
``tidegate_overrides`` (``key=value`` lines). Under pytest-xdist each worker starts
its own broker (listeners bind port 0, so workers never collide).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .broker import Broker

_SCOPES = ("session", "package", "module", "class", "function")
_TOPIC_KEYS = ("topic_partitions", "topic_config")
_topic_seq = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("tidegate_broker_scope", "scope of the tidegate_broker fixture",
                  default="session")
    parser.addini("tidegate_broker_mode", "tidegate_broker runs inprocess or as a subprocess",
                  default="inprocess")
    parser.addini("tidegate_partitions", "num.partitions of tidegate_broker", default="")
    parser.addini("tidegate_overrides", "broker config of tidegate_broker, key=value lines",
                  type="linelist", default=[])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tidegate(**settings): a broker of the test's own with these tidegate.testing.Broker "
        "settings; topic_partitions=/topic_config= shape tidegate_topic",
    )


def _ini_settings(config: pytest.Config) -> dict[str, Any]:
    settings: dict[str, Any] = {"mode": config.getini("tidegate_broker_mode")}
    if config.getini("tidegate_partitions"):
        settings["partitions"] = int(config.getini("tidegate_partitions"))
    overrides = {}
    for line in config.getini("tidegate_overrides"):
        key, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"tidegate_overrides: {line!r} is not key=value")
        overrides[key.strip()] = value.strip()
    if overrides:
        settings["overrides"] = overrides
    return settings


def _scope(fixture_name: str, config: pytest.Config) -> str:
    scope = config.getini("tidegate_broker_scope")
    if scope not in _SCOPES:
        raise pytest.UsageError(f"tidegate_broker_scope must be one of {', '.join(_SCOPES)}")
    return str(scope)


def _marker_settings(request: pytest.FixtureRequest) -> dict[str, Any] | None:
    marker = request.node.get_closest_marker("tidegate")
    if marker is None:
        return None
    if marker.args:
        raise pytest.UsageError("@pytest.mark.tidegate takes keyword arguments only")
    return dict(marker.kwargs)


@pytest.fixture(scope=_scope)  # type: ignore[arg-type]
def _tidegate_shared_broker(pytestconfig: pytest.Config) -> Iterator[Broker]:
    with Broker(**_ini_settings(pytestconfig)) as broker:
        yield broker


@pytest.fixture
def tidegate_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """A running tidegate broker (see the module's documentation)."""
    settings = _marker_settings(request)
    broker_settings = {k: v for k, v in (settings or {}).items() if k not in _TOPIC_KEYS}
    if not broker_settings:
        yield request.getfixturevalue("_tidegate_shared_broker")
        return
    merged = _ini_settings(request.config)
    merged.update(broker_settings)
    with Broker(**merged) as broker:
        yield broker


@pytest.fixture
def tidegate_topic(request: pytest.FixtureRequest, tidegate_broker: Broker) -> str:
    """The name of a topic made for this test on ``tidegate_broker``."""
    settings = _marker_settings(request) or {}
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-.")[:180]
    name = f"{base or 'topic'}-{next(_topic_seq)}"
    return tidegate_broker.create_topic(
        name, settings.get("topic_partitions", 1), settings.get("topic_config")
    )


@pytest.fixture
def tidegate_broker_factory(pytestconfig: pytest.Config) -> Iterator[Callable[..., Broker]]:
    """``make(**settings)``: a started :class:`Broker` (the ini settings, then these),
    stopped at the end of the test."""
    started: list[Broker] = []

    def make(**settings: Any) -> Broker:
        merged = _ini_settings(pytestconfig)
        merged.update(settings)
        broker = Broker(**merged)
        started.append(broker)
        return broker.start()

    yield make
    for broker in reversed(started):
        broker.stop()
