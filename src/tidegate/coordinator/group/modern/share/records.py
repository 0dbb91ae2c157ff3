"""The records a share group is made of in ``__consumer_offsets`` (reference 1.16; Kafka's
``ShareGroup*Key``/``*Value`` record schemas and the share-group half of its
``GroupCoordinatorRecordHelpers``).

=====  ==========================================  ==============================================
type   record                                      value
=====  ==========================================  ==============================================
11     ShareGroupMetadata                          :data:`ShareGroupMetadataValue` (epoch, hash)
10     ShareGroupMemberMetadata                    :class:`ShareGroupMemberMetadataValue`
12     ShareGroupTargetAssignmentMetadata          :data:`ShareGroupTargetAssignmentMetadataValue`
13     ShareGroupTargetAssignmentMember            :data:`ShareGroupTargetAssignmentMemberValue`
14     ShareGroupCurrentMemberAssignment           :class:`ShareGroupCurrentMemberAssignmentValue`
15     ShareGroupStatePartitionMetadata            :class:`ShareGroupStatePartitionMetadataValue`
=====  ==========================================  ==============================================

Record 15 is the group's share-partitions: those whose state the persister is initializing,
those it has initialized (the only ones the assignor may hand out), and the topics whose
state is being deleted; each write of it replaces the previous one whole, as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.coordinator.group.assignor.api import EMPTY_ASSIGNMENT, Assignment
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.records import (
    SHARE_GROUP_RECORDS,
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
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember

#: Kafka's names for the group-level values, which consumer groups write too.
ShareGroupMetadataValue = GroupMetadataValue
ShareGroupTargetAssignmentMetadataValue = TargetAssignmentMetadataValue
ShareGroupTargetAssignmentMemberValue = TargetAssignmentMemberValue


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: frozenset[str]


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    """A topic's share-partitions in record 15 (Kafka's ``TopicPartitionsInfo``, keyed by
    topic id)."""

    topic_name: str
    partitions: frozenset[int]


#: topic id -> its share-partitions
TopicPartitionsMap = Mapping[uuid.UUID, TopicPartitionsInfo]


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    initializing_topics: TopicPartitionsMap
    initialized_topics: TopicPartitionsMap
    #: topic id -> topic name
    deleting_topics: Mapping[uuid.UUID, str]


# -- the helpers (Kafka's GroupCoordinatorRecordHelpers) ----------------------------------------
def new_share_group_member_subscription_record(
    group_id: str, member: ShareGroupMember
) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_MEMBER_METADATA,
        group_id,
        member.member_id,
        value_from_member(ShareGroupMemberMetadataValue, member),
    )


def new_share_group_member_subscription_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_MEMBER_METADATA, group_id, member_id)


def new_share_group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return group_epoch_record(SHARE_GROUP_RECORDS, group_id, epoch, metadata_hash)


def new_share_group_epoch_tombstone_record(group_id: str) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_METADATA, group_id)


def new_share_group_target_assignment_record(
    group_id: str, member_id: str, partitions: Assignment
) -> CoordinatorRecord:
    return target_assignment_record(SHARE_GROUP_RECORDS, group_id, member_id, partitions)


def new_share_group_target_assignment_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id)


def new_share_group_target_assignment_epoch_record(
    group_id: str, assignment_epoch: int
) -> CoordinatorRecord:
    return target_assignment_epoch_record(SHARE_GROUP_RECORDS, group_id, assignment_epoch)


def new_share_group_target_assignment_epoch_tombstone_record(group_id: str) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, group_id)


def new_share_group_current_assignment_record(
    group_id: str, member: ShareGroupMember
) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        group_id,
        member.member_id,
        value_from_member(ShareGroupCurrentMemberAssignmentValue, member),
    )


def new_share_group_current_assignment_tombstone_record(
    group_id: str, member_id: str
) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)


def new_share_group_state_partition_metadata_record(
    group_id: str,
    initializing: TopicPartitionsMap,
    initialized: TopicPartitionsMap,
    deleting: Mapping[uuid.UUID, str],
) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
        group_id,
        value=ShareGroupStatePartitionMetadataValue(
            dict(initializing), dict(initialized), dict(deleting)
        ),
    )


def new_share_group_state_partition_metadata_tombstone_record(group_id: str) -> CoordinatorRecord:
    return tombstone(RecordType.SHARE_GROUP_STATE_PARTITION_METADATA, group_id)


def member_with_metadata(
    member: ShareGroupMember, value: ShareGroupMemberMetadataValue
) -> ShareGroupMember:
    return member_updated_with(member, value)


def member_with_assignment(
    member: ShareGroupMember, value: ShareGroupCurrentMemberAssignmentValue | None
) -> ShareGroupMember:
    """``member`` updated with a current assignment record; a tombstone leaves it at epoch
    -1 without partitions, as Kafka's replay does before the member's own tombstone."""
    if value is None:
        value = ShareGroupCurrentMemberAssignmentValue(-1, -1, member.state, EMPTY_ASSIGNMENT)
    return member_updated_with(member, value)
