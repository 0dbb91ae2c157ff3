"""The ``range`` server-side assignor (Kafka's ``RangeAssignor``, as rewritten in
KAFKA-16944).

Deterministic, not sticky: members are ordered static ones first by instance id, then
dynamic ones by member id; for each topic its subscribers, in that order, take
contiguous ranges of ``P // N`` partitions, the first ``P % N`` one more. When every
member subscribes to the same topics and the topics have as many partitions each, a
member gets the same partition numbers of every topic (co-partitioning, what joins of
streams need). A static member that restarts under a new member id keeps its ranges as
long as the group's members, subscriptions and partition counts stay the same.

Example: M0 and M1 on T1 and T2, three partitions each: M0 gets T1{0,1} T2{0,1}, M1 gets
T1{2} T2{2}.
"""

from __future__ import annotations

import uuid

from tidegate.coordinator.group.assignor.api import (
    HOMOGENEOUS,
    Assignment,
    GroupAssignment,
    GroupSpec,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.assignor.helpers import partition_counts

RANGE_ASSIGNOR_NAME = "range"


class RangeAssignor:
    name = RANGE_ASSIGNOR_NAME

    def assign(
        self, group_spec: GroupSpec, topic_describer: SubscribedTopicDescriber
    ) -> GroupAssignment:
        members = group_spec.members
        if not members:
            return GroupAssignment({})
        order = sorted(
            members,
            key=lambda m: (
                (0, members[m].instance_id, "")
                if members[m].instance_id is not None
                else (1, "", m)
            ),
        )
        if group_spec.subscription_type is HOMOGENEOUS:
            topic_ids = members[order[0]].subscribed_topic_ids
            subscriptions = dict.fromkeys(order, topic_ids)
        else:
            subscriptions = {m: members[m].subscribed_topic_ids for m in order}
        subscribers: dict[uuid.UUID, int] = {}
        for topic_ids in subscriptions.values():
            for topic_id in topic_ids:
                subscribers[topic_id] = subscribers.get(topic_id, 0) + 1
        counts = partition_counts(sorted(subscribers), topic_describer)

        #: topic id -> (next range start, members still to serve)
        cursor = {t: [0, n] for t, n in subscribers.items()}
        assignment: dict[str, Assignment] = {}
        for member_id in order:
            ranges: dict[uuid.UUID, frozenset[int]] = {}
            for topic_id in sorted(subscriptions[member_id]):
                state = cursor[topic_id]
                start, left = state
                size = -(
                    -(counts[topic_id] - start) // left
                )  # ceil: earlier members get the extras
                state[0], state[1] = start + size, left - 1
                if size:
                    ranges[topic_id] = frozenset(range(start, start + size))
            assignment[member_id] = ranges
        return GroupAssignment(assignment)
