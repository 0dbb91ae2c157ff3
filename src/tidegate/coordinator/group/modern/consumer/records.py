"""The records a consumer group is made of in ``__consumer_offsets`` (reference 1.16;
Kafka's ``ConsumerGroup*Key``/``*Value`` record schemas and the consumer-group half of its
``GroupCoordinatorRecordHelpers``).

A record is a :class:`~tidegate.coordinator.group.modern.records.CoordinatorRecord` (the
type and value classes both modern protocols share are in
:mod:`tidegate.coordinator.group.modern.records`). Everything the coordinator knows about a
consumer group is the replay of these records, in log order:

=====  ==========================================  ===============================================
type   record                                      value
=====  ==========================================  ===============================================
3      ConsumerGroupMetadata                       :class:`ConsumerGroupMetadataValue` (epoch, hash)
5      ConsumerGroupMemberMetadata                 :class:`ConsumerGroupMemberMetadataValue`
6      ConsumerGroupTargetAssignmentMetadata       :class:`ConsumerGroupTargetAssignmentMetadataValue`
7      ConsumerGroupTargetAssignmentMember         :class:`ConsumerGroupTargetAssignmentMemberValue`
8      ConsumerGroupCurrentMemberAssignment        :class:`ConsumerGroupCurrentMemberAssignmentValue`
16     ConsumerGroupRegularExpression              a :class:`ResolvedRegularExpression`
2      (classic) GroupMetadata                     its tombstone (a classic group replaced or
                                                   upgraded) or :class:`ClassicGroupMetadataValue`
                                                   (the classic group a downgrade makes, in the
                                                   batch that tombstones the consumer group)
=====  ==========================================  ===============================================

How they are stored (tidegate's JSON format) is
:mod:`tidegate.coordinator.group.group_metadata_manager`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tidegate.coordinator.group.assignor.api import EMPTY_ASSIGNMENT, Assignment
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.records import (
    CONSUMER_GROUP_RECORDS,
    CoordinatorRecord,
    GroupMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    group_epoch_record,
    member_updated_with,
    target_assignment_epoch_record,
    target_assignment_record,
    tombstone,
    value_from_member,
)

#: Kafka's names for the group-level values, which share groups write too
#: (:mod:`tidegate.coordinator.group.modern.records`).
ConsumerGroupMetadataValue = GroupMetadataValue
ConsumerGroupTargetAssignmentMetadataValue = TargetAssignmentMetadataValue
ConsumerGroupTargetAssignmentMemberValue = TargetAssignmentMemberValue


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: frozenset[str]
    #: "" = none
    subscribed_topic_regex: str
    rebalance_timeout_ms: int
    server_assignor_name: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class ClassicGroupMetadataValue:
    """A classic group's stored generation, as the classic coordinator stores it
    (``group_metadata_manager.classic_group_value``): written by a downgrade in the same
    batch as the consumer group's tombstones, so a crash leaves one group or the other."""

    data: bytes


# -- the helpers (Kafka's GroupCoordinatorRecordHelpers) ----------------------------------------
# The member and current assignment values name their fields as ConsumerGroupMember does.
def member_metadata_value(member: ConsumerGroupMember) -> ConsumerGroupMemberMetadataValue:
    value = value_from_member(ConsumerGroupMemberMetadataValue, member)
    return value if value.subscribed_topic_regex is not None else replace(value, subscribed_topic_regex="")


def current_assignment_value(member: ConsumerGroupMember) -> ConsumerGroupCurrentMemberAssignmentValue:
    return value_from_member(ConsumerGroupCurrentMemberAssignmentValue, member)


def new_consumer_group_member_subscription_record(
    group_id: str, member: ConsumerGroupMember
) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        group_id,
        member.member_id,
        member_metadata_value(member),
    )


def new_consumer_group_member_subscription_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_MEMBER_METADATA, group_id, member_id)


def new_consumer_group_epoch_record(
    group_id: str, epoch: int, metadata_hash: int
) -> CoordinatorRecord:
    return group_epoch_record(CONSUMER_GROUP_RECORDS, group_id, epoch, metadata_hash)


def new_consumer_group_epoch_tombstone_record(group_id: str) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_METADATA, group_id)


def new_consumer_group_target_assignment_record(
    group_id: str, member_id: str, partitions: Assignment
) -> CoordinatorRecord:
    return target_assignment_record(CONSUMER_GROUP_RECORDS, group_id, member_id, partitions)


def new_consumer_group_target_assignment_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id)


def new_consumer_group_target_assignment_epoch_record(
    group_id: str, assignment_epoch: int
) -> CoordinatorRecord:
    return target_assignment_epoch_record(CONSUMER_GROUP_RECORDS, group_id, assignment_epoch)


def new_consumer_group_target_assignment_epoch_tombstone_record(group_id: str) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id)


def new_consumer_group_current_assignment_record(
    group_id: str, member: ConsumerGroupMember
) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        group_id,
        member.member_id,
        current_assignment_value(member),
    )


def new_consumer_group_current_assignment_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)


def new_consumer_group_regular_expression_record(
    group_id: str, regex: str, resolved: ResolvedRegularExpression
) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION, group_id, regex, resolved)


def new_consumer_group_regular_expression_tombstone(group_id: str, regex: str) -> CoordinatorRecord:
    return tombstone(RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION, group_id, regex)


def new_classic_group_tombstone_record(group_id: str) -> CoordinatorRecord:
    """The tombstone of a classic group's stored generation (an empty classic group that a
    consumer group replaces)."""
    return tombstone(RecordType.CLASSIC_GROUP_METADATA, group_id)


def new_classic_group_record(group_id: str, data: bytes) -> CoordinatorRecord:
    """A classic group's stored generation (a downgraded consumer group; Kafka's
    ``newGroupMetadataRecord``), ``data`` from ``classic_group_value``."""
    return CoordinatorRecord(RecordType.CLASSIC_GROUP_METADATA, group_id, value=ClassicGroupMetadataValue(data))


def member_with_metadata(
    member: ConsumerGroupMember, value: ConsumerGroupMemberMetadataValue
) -> ConsumerGroupMember:
    """``member`` updated with a member metadata record (Kafka's ``Builder.updateWith``)."""
    return member_updated_with(member, value)


def member_with_assignment(
    member: ConsumerGroupMember, value: ConsumerGroupCurrentMemberAssignmentValue | None
) -> ConsumerGroupMember:
    """``member`` updated with a current assignment record; a tombstone leaves it at epoch
    -1 without partitions, as Kafka's replay does before the member's own tombstone."""
    if value is None:
        value = ConsumerGroupCurrentMemberAssignmentValue(
            -1, -1, member.state, EMPTY_ASSIGNMENT, EMPTY_ASSIGNMENT
        )
    return member_updated_with(member, value)
