"""A Kafka for your test suite, without a JVM or Docker.

:class:`Broker` starts a tidegate broker in this process (its own thread and event
loop) or as a subprocess, in a temporary directory, with helpers for topics,
produce/consume, consumer groups, offsets and lag. The pytest plugin
(:mod:`tidegate.testing.pytest_plugin`, registered through the ``pytest11`` entry
point) gives the fixtures ``tidegate_broker``, ``tidegate_topic`` and
``tidegate_broker_factory``. See docs/testing.md.
"""

from .broker import Broker, BrokerError
from .pki import make_pki, write_users

__all__ = ["Broker", "BrokerError", "make_pki", "write_users"]
