"""The uniform assignor when every member subscribes to the same topics (Kafka's
``UniformHomogeneousAssignmentBuilder``).

Balance first, then stickiness. With P partitions over M members each member's quota is
``P // M``, and ``P % M`` of them get one more: the members that already own the most
(see :func:`~tidegate.coordinator.group.assignor.helpers.quotas`). Every member keeps up
to its quota of what it has (still subscribed, existing, not kept by another member);
what it has beyond, and every partition nobody kept, goes to the members still under
their quota, topic by topic, each topic's partitions in ascending order.

Cost: one pass over the partitions, with set operations per member and topic rather
than a Python step per partition, plus sorting the members once (O(P + M log M)).
"""

from __future__ import annotations

import uuid

from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    GroupAssignment,
    GroupSpec,
    PartitionAssignorException,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.assignor.helpers import (
    PartitionPool,
    merge,
    partition_counts,
    quotas,
    retain_partitions,
)


def assign_homogeneous(spec: GroupSpec, describer: SubscribedTopicDescriber) -> GroupAssignment:
    if not spec.members:
        return GroupAssignment({})
    member_ids = sorted(spec.members)
    counts = partition_counts(spec.members[member_ids[0]].subscribed_topic_ids, describer)
    if not counts:
        return GroupAssignment(dict.fromkeys(member_ids, EMPTY_ASSIGNMENT))

    claimed: dict[uuid.UUID, set[int]] = {}
    kept: dict[str, Assignment] = {}
    owned: dict[str, int] = {}
    for member_id in member_ids:
        kept[member_id], owned[member_id] = retain_partitions(
            spec.members[member_id].assignment, counts, counts, claimed
        )

    quota = quotas(owned, sum(counts.values()))
    for member_id in member_ids:
        if owned[member_id] > quota[member_id]:
            kept[member_id] = _trim(kept[member_id], quota[member_id], claimed)
            owned[member_id] = quota[member_id]

    pool = PartitionPool(
        [
            (topic_id, sorted(set(range(counts[topic_id])).difference(claimed.get(topic_id, ()))))
            for topic_id in sorted(counts)
        ]
    )
    members: dict[str, Assignment] = {}
    for member_id in member_ids:
        missing = quota[member_id] - owned[member_id]
        members[member_id] = (
            merge(kept[member_id], pool.take(missing)) if missing else kept[member_id]
        )
    if pool.remaining:
        raise PartitionAssignorException("Partitions were left unassigned")
    return GroupAssignment(members)


def _trim(assignment: Assignment, quota: int, claimed: dict[uuid.UUID, set[int]]) -> Assignment:
    """The first ``quota`` partitions of ``assignment`` (its topics in order, each topic's
    partitions ascending); the rest are released from ``claimed``."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in assignment.items():
        if quota >= len(partitions):
            out[topic_id] = partitions
            quota -= len(partitions)
            continue
        ordered = sorted(partitions)
        if quota:
            out[topic_id] = frozenset(ordered[:quota])
        claimed[topic_id].difference_update(ordered[quota:])
        quota = 0
    return out
