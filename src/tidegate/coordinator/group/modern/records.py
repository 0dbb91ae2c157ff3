"""The records a modern group (KIP-848 consumer group, KIP-932 share group) is made of in
``__consumer_offsets``: what both protocols share (Kafka's ``CoordinatorRecord``, its
``CoordinatorRecordType`` numbers and the values whose shape the two protocols have in
common).

A :class:`CoordinatorRecord` is a record type, the group id, the key within the group (a
member id, a regular expression; "" for the group's own records) and a value, None for a
tombstone. Everything the coordinator knows about a modern group is the replay of its
records, in log order.

The group-level values have one shape for both protocols, as Kafka's generated classes
do (ConsumerGroupMetadataValue and ShareGroupMetadataValue hold the same fields):

* :class:`GroupMetadataValue` -- the group epoch and metadata hash (types 3 and 11);
* :class:`TargetAssignmentMetadataValue` -- the target assignment epoch (6 and 12);
* :class:`TargetAssignmentMemberValue` -- one member's target (7 and 13).

The member values differ: :mod:`.consumer.records` (5, 8, 16 and the classic group 2)
and :mod:`.share.records` (10, 14, 15). How the records are stored (tidegate's JSON format)
is :mod:`tidegate.coordinator.group.group_metadata_manager`'s business.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from tidegate.coordinator.group.assignor.api import Assignment
from tidegate.coordinator.group.modern.target_assignment_builder import (
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    TargetAssignmentRecord,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from tidegate.coordinator.group.modern.consumer.records import (
        ClassicGroupMetadataValue,
        ConsumerGroupCurrentMemberAssignmentValue,
        ConsumerGroupMemberMetadataValue,
    )
    from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
        ResolvedRegularExpression,
    )
    from tidegate.coordinator.group.modern.share.records import (
        ShareGroupCurrentMemberAssignmentValue,
        ShareGroupMemberMetadataValue,
        ShareGroupStatePartitionMetadataValue,
    )


class RecordType(enum.IntEnum):
    """Kafka's ``CoordinatorRecordType`` numbers of the modern groups' records."""

    CLASSIC_GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16


@dataclass(frozen=True, slots=True)
class GroupRecordTypes:
    """The types of the records both protocols write, for one protocol."""

    group_metadata: RecordType
    member_metadata: RecordType
    target_assignment_metadata: RecordType
    target_assignment_member: RecordType
    current_member_assignment: RecordType


CONSUMER_GROUP_RECORDS = GroupRecordTypes(
    RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)
SHARE_GROUP_RECORDS = GroupRecordTypes(
    RecordType.SHARE_GROUP_METADATA,
    RecordType.SHARE_GROUP_MEMBER_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)
#: The records of a consumer group (the classic tombstone it may write is the classic
#: coordinator's to replay).
CONSUMER_GROUP_RECORD_TYPES = frozenset({
    RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION,
})  # fmt: skip
#: The records of a share group.
SHARE_GROUP_RECORD_TYPES = frozenset({
    RecordType.SHARE_GROUP_MEMBER_METADATA,
    RecordType.SHARE_GROUP_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """The group epoch (ConsumerGroupMetadataValue, ShareGroupMetadataValue)."""

    epoch: int
    #: the metadata hash of the subscribed topics (KIP-1101)
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    """The target assignment's epoch (Consumer/ShareGroupTargetAssignmentMetadataValue)."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    """A member's target (Consumer/ShareGroupTargetAssignmentMemberValue)."""

    partitions: Assignment


if TYPE_CHECKING:
    RecordValue: TypeAlias = (
        GroupMetadataValue
        | TargetAssignmentMetadataValue
        | TargetAssignmentMemberValue
        | ConsumerGroupMemberMetadataValue
        | ConsumerGroupCurrentMemberAssignmentValue
        | ResolvedRegularExpression
        | ShareGroupMemberMetadataValue
        | ShareGroupCurrentMemberAssignmentValue
        | ShareGroupStatePartitionMetadataValue
        | ClassicGroupMetadataValue
    )


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    type: RecordType
    group_id: str
    #: the member id (5, 7, 8, 10, 13, 14) or the regular expression (16); "" for the
    #: group's own records
    key: str = ""
    #: None: a tombstone
    value: RecordValue | None = None


# -- the helpers both protocols' record helpers are made of (Kafka's
# GroupCoordinatorRecordHelpers) ------------------------------------------------------------
def tombstone(record_type: RecordType, group_id: str, key: str = "") -> CoordinatorRecord:
    return CoordinatorRecord(record_type, group_id, key)


def group_epoch_record(
    types: GroupRecordTypes, group_id: str, epoch: int, metadata_hash: int
) -> CoordinatorRecord:
    return CoordinatorRecord(
        types.group_metadata, group_id, value=GroupMetadataValue(epoch, metadata_hash)
    )


def target_assignment_record(
    types: GroupRecordTypes, group_id: str, member_id: str, partitions: Assignment
) -> CoordinatorRecord:
    return CoordinatorRecord(
        types.target_assignment_member, group_id, member_id, TargetAssignmentMemberValue(partitions)
    )


def target_assignment_epoch_record(
    types: GroupRecordTypes, group_id: str, assignment_epoch: int
) -> CoordinatorRecord:
    return CoordinatorRecord(
        types.target_assignment_metadata,
        group_id,
        value=TargetAssignmentMetadataValue(assignment_epoch),
    )


def member_tombstone_records(
    types: GroupRecordTypes, group_id: str, member_id: str
) -> list[CoordinatorRecord]:
    """A member's tombstones, in Kafka's order (current, target, member)."""
    return [
        tombstone(types.current_member_assignment, group_id, member_id),
        tombstone(types.target_assignment_member, group_id, member_id),
        tombstone(types.member_metadata, group_id, member_id),
    ]


def target_assignment_records(
    types: GroupRecordTypes, records: list[TargetAssignmentRecord]
) -> list[CoordinatorRecord]:
    """A :class:`~tidegate.coordinator.group.modern.target_assignment_builder.
    TargetAssignmentBuilder`'s records as a group's records (a member's target: 7 or 13;
    the epoch: 6 or 12)."""
    out = []
    for record in records:
        if isinstance(record, TargetAssignmentMemberRecord):
            out.append(
                target_assignment_record(types, record.group_id, record.member_id, record.partitions)
            )
        else:
            assert isinstance(record, TargetAssignmentEpochRecord)
            out.append(
                target_assignment_epoch_record(types, record.group_id, record.assignment_epoch)
            )
    return out


# -- member values (a member's metadata and current assignment records name their fields as
# the member does) --------------------------------------------------------------------------
_V = TypeVar("_V", bound="DataclassInstance")


class _Member(Protocol):
    def replace(self, **changes: Any) -> Any: ...


_M = TypeVar("_M", bound=_Member)


def value_from_member(cls: type[_V], member: object) -> _V:
    """A record value made of the member's fields of the same names."""
    return cls(**{f.name: getattr(member, f.name) for f in fields(cls)})


def member_updated_with(member: _M, value: DataclassInstance) -> _M:
    """``member`` updated with a record value's fields (Kafka's ``Builder.updateWith``)."""
    updated: _M = member.replace(**{f.name: getattr(value, f.name) for f in fields(value)})
    return updated
