"""A modern group's new target assignment and the records that persist it (Kafka's
``TargetAssignmentBuilder``; reference 1.5 step 7).

The builder starts from the group's members and their current targets, applies the
members being added, updated or removed by the heartbeat at hand (not yet in the group),
runs the assignor, and yields a :class:`TargetAssignmentMemberRecord` for every member
whose target changed (or who had none) plus one :class:`TargetAssignmentEpochRecord` with
the group epoch. A removed member needs no record here: its own removal tombstones its
target. A static member that rejoins under a new member id starts from the target of the
member id its instance id had (``static_members``), so it gets its partitions back.

The records are plain values; the coordinator writes them (consumer groups: record types
7 and 6; share groups: 13 and 12) and replays them into the group.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    GroupSpec,
    MemberSubscriptionAndAssignment,
    PartitionAssignor,
    SubscriptionType,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.subscription import (
    SubscribedMember,
    subscribed_topic_names,
)
from tidegate.coordinator.group.modern.topics import (
    MetadataImage,
    SubscribedTopicDescriberImpl,
    topic_ids,
)


class ModernGroupMember(SubscribedMember, Protocol):
    """What the builder reads of a member (a consumer or a share group member)."""

    @property
    def instance_id(self) -> str | None: ...

    @property
    def rack_id(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberRecord:
    """A member's new target (ConsumerGroupTargetAssignmentMember, ShareGroup... 13)."""

    group_id: str
    member_id: str
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochRecord:
    """The epoch the group's target assignment is now at (ConsumerGroupTargetAssignment-
    Metadata, ShareGroupTargetAssignmentMetadata 12)."""

    group_id: str
    assignment_epoch: int


TargetAssignmentRecord = TargetAssignmentMemberRecord | TargetAssignmentEpochRecord


@dataclass(frozen=True, slots=True)
class TargetAssignmentResult:
    #: the changed members' targets, then the epoch record
    records: list[TargetAssignmentRecord]
    #: every member's new target
    target_assignment: Mapping[str, Assignment]


class TargetAssignmentBuilder:
    """Build once: ``TargetAssignmentBuilder(...).add_or_update_member(...).build()``.

    :meth:`build` raises the assignor's
    :class:`~tidegate.coordinator.group.assignor.api.PartitionAssignorException`; the
    coordinator then answers UNKNOWN_SERVER_ERROR and writes nothing.
    """

    def __init__(
        self,
        group_id: str,
        group_epoch: int,
        assignor: PartitionAssignor,
        *,
        members: Mapping[str, ModernGroupMember],
        target_assignment: Mapping[str, Assignment],
        subscription_type: SubscriptionType,
        metadata_image: MetadataImage,
        static_members: Mapping[str, str] | None = None,
        resolved_regular_expressions: Mapping[str, ResolvedRegularExpression] | None = None,
        assignable_partitions: Mapping[uuid.UUID, frozenset[int]] | None = None,
    ) -> None:
        self.group_id = group_id
        self.group_epoch = group_epoch
        self.assignor = assignor
        self.members = members
        self.target_assignment = target_assignment
        self.subscription_type = subscription_type
        self.metadata_image = metadata_image
        #: instance id -> the member id holding it
        self.static_members = static_members or {}
        self.resolved_regular_expressions = resolved_regular_expressions or {}
        #: share groups: the initialized share-partitions, the only assignable ones
        self.assignable_partitions = assignable_partitions
        #: member id -> the member, or None for a removed one
        self.updated_members: dict[str, ModernGroupMember | None] = {}

    def add_or_update_member(
        self, member_id: str, member: ModernGroupMember
    ) -> TargetAssignmentBuilder:
        self.updated_members[member_id] = member
        return self

    def remove_member(self, member_id: str) -> TargetAssignmentBuilder:
        self.updated_members[member_id] = None
        return self

    def build(self) -> TargetAssignmentResult:
        resolved: dict[tuple[frozenset[str], str | None], frozenset[uuid.UUID]] = {}

        def spec(
            member: ModernGroupMember, assignment: Assignment
        ) -> MemberSubscriptionAndAssignment:
            key = (member.subscribed_topic_names, member.subscribed_topic_regex)
            ids = resolved.get(key)
            if ids is None:  # members of a homogeneous group share one resolution
                names = subscribed_topic_names(member, self.resolved_regular_expressions)
                ids = resolved[key] = topic_ids(names, self.metadata_image)
            return MemberSubscriptionAndAssignment(
                ids, assignment, instance_id=member.instance_id, rack_id=member.rack_id
            )

        targets = self.target_assignment
        specs = {
            member_id: spec(member, targets.get(member_id, EMPTY_ASSIGNMENT))
            for member_id, member in self.members.items()
        }
        for member_id, updated in self.updated_members.items():
            if updated is None:
                specs.pop(member_id, None)
                continue
            assignment = targets.get(member_id, EMPTY_ASSIGNMENT)
            if updated.instance_id is not None:
                previous = self.static_members.get(updated.instance_id)
                if previous is not None and previous != member_id:
                    # A static member rejoining under a new id takes over its old target.
                    assignment = targets.get(previous, EMPTY_ASSIGNMENT)
            specs[member_id] = spec(updated, assignment)

        group_spec = GroupSpec(specs, self.subscription_type, self.assignable_partitions)
        new = self.assignor.assign(group_spec, SubscribedTopicDescriberImpl(self.metadata_image))

        records: list[TargetAssignmentRecord] = []
        result: dict[str, Assignment] = {}
        for member_id in specs:
            assignment = new.members.get(member_id, EMPTY_ASSIGNMENT)
            result[member_id] = assignment
            old = targets.get(member_id)
            if old is None or (old is not assignment and old != assignment):
                records.append(TargetAssignmentMemberRecord(self.group_id, member_id, assignment))
        records.append(TargetAssignmentEpochRecord(self.group_id, self.group_epoch))
        return TargetAssignmentResult(records, result)
