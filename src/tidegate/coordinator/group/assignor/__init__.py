"""Server-side partition assignors of the consumer protocol (KIP-848) and share groups
(KIP-932): Kafka's ``coordinator.group.assignor`` and its ``api.assignor`` interface.

* :mod:`.api` -- what an assignor gets (:class:`~.api.GroupSpec`, a
  :class:`~.api.SubscribedTopicDescriber`) and returns (:class:`~.api.GroupAssignment`);
* :mod:`.uniform` -- ``uniform``, the consumer groups' default (sticky, balanced);
* :mod:`.range` -- ``range`` (contiguous ranges, co-partitioning, static members first);
* :mod:`.simple` -- ``simple``, the share groups' assignor (partitions may be shared).

Everything here is a pure function of its inputs: no clock, no I/O.
"""

from __future__ import annotations

from tidegate.coordinator.group.assignor.api import PartitionAssignor
from tidegate.coordinator.group.assignor.range import RangeAssignor
from tidegate.coordinator.group.assignor.simple import SimpleAssignor
from tidegate.coordinator.group.assignor.uniform import UniformAssignor

#: The consumer groups' assignors by name, in ``group.consumer.assignors``' default order.
CONSUMER_GROUP_ASSIGNORS: dict[str, PartitionAssignor] = {
    a.name: a for a in (UniformAssignor(), RangeAssignor())
}

__all__ = [
    "CONSUMER_GROUP_ASSIGNORS",
    "RangeAssignor",
    "SimpleAssignor",
    "UniformAssignor",
]
