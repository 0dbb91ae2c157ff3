"""What a server-side assignor sees and returns (Kafka's ``coordinator.group.api.assignor``).

An assignor is a pure function of a :class:`GroupSpec` (every member's subscribed topic
ids and current target assignment, the subscription type, and for share groups the
partitions that may be assigned) and a :class:`SubscribedTopicDescriber` (partition
counts by topic id). It returns a :class:`GroupAssignment`, a new target assignment for
every member, or raises :class:`PartitionAssignorException` (the coordinator answers
UNKNOWN_SERVER_ERROR and changes nothing).

An :data:`Assignment` maps a topic id to the partitions of it a member has, as a
``frozenset``. Assignments are never changed after they are built, so an assignor hands
an unchanged member's input mapping back as it is (Kafka's assignment reuse), and the
target assignment builder compares mappings to decide which members need a new record.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, TypeAlias

#: topic id -> the partitions of it (Kafka's ``Map<Uuid, Set<Integer>>``).
Assignment: TypeAlias = Mapping[uuid.UUID, frozenset[int]]

#: The empty assignment (Kafka's ``Assignment.EMPTY``).
EMPTY_ASSIGNMENT: Assignment = MappingProxyType({})


class PartitionAssignorException(Exception):
    """The assignor could not compute an assignment (a member subscribes to a topic the
    describer does not know, or partitions were left over)."""


class SubscriptionType(enum.Enum):
    """HOMOGENEOUS: every member subscribes to the same topics; HETEROGENEOUS otherwise."""

    HOMOGENEOUS = "Homogeneous"
    HETEROGENEOUS = "Heterogeneous"

    def __str__(self) -> str:
        return self.value


HOMOGENEOUS = SubscriptionType.HOMOGENEOUS
HETEROGENEOUS = SubscriptionType.HETEROGENEOUS


@dataclass(frozen=True, slots=True)
class MemberSubscriptionAndAssignment:
    """One member as the assignor sees it (Kafka's ``MemberSubscriptionAndAssignmentImpl``)."""

    #: the ids of the existing topics the member subscribes to (names and regex resolved)
    subscribed_topic_ids: frozenset[uuid.UUID]
    #: the member's current target assignment, the assignor's starting point
    assignment: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The group as the assignor sees it (Kafka's ``GroupSpec``)."""

    #: member id -> its subscription and current target assignment
    members: Mapping[str, MemberSubscriptionAndAssignment]
    subscription_type: SubscriptionType
    #: share groups: topic id -> the partitions that may be assigned (initialized
    #: share-partitions); None (consumer groups) = every partition
    assignable_partitions: Mapping[uuid.UUID, frozenset[int]] | None = None

    def is_partition_assignable(self, topic_id: uuid.UUID, partition: int) -> bool:
        if self.assignable_partitions is None:
            return True
        allowed = self.assignable_partitions.get(topic_id)
        return allowed is not None and partition in allowed

    def member_assignment(self, member_id: str) -> Assignment:
        member = self.members.get(member_id)
        return EMPTY_ASSIGNMENT if member is None else member.assignment


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """An assignor's answer: member id -> its new target assignment (every member of the
    spec is present; a member with nothing gets :data:`EMPTY_ASSIGNMENT`)."""

    members: Mapping[str, Assignment]


class SubscribedTopicDescriber(Protocol):
    """Partition counts by topic id (Kafka's ``SubscribedTopicDescriber``; on one node
    there are no racks to describe)."""

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        """The topic's partition count, or -1 if the topic does not exist."""
        ...


class PartitionAssignor(Protocol):
    """A server-side assignor (Kafka's ``PartitionAssignor``): ``uniform``, ``range`` and,
    for share groups, ``simple``."""

    @property
    def name(self) -> str: ...

    def assign(
        self, group_spec: GroupSpec, topic_describer: SubscribedTopicDescriber
    ) -> GroupAssignment:
        """The new target assignment. Raises :class:`PartitionAssignorException`."""
        ...
