"""A classic group as a consumer group and back: the two conversions of online migration
(reference 1.13; Kafka's ``ConsumerGroup.fromClassicGroup`` with
``createConsumerGroupRecords``, and ``ClassicGroup.fromConsumerGroup``).

* :func:`consumer_group_from_classic` -- the upgrade: the group epoch and assignment epoch
  are the generation; every member is STABLE at it with its last assignment as current
  and target assignment, remembers its session timeout and JoinGroup protocols
  (:class:`ClassicMemberMetadata`: it keeps speaking the classic protocol), and
  subscribes to its ConsumerProtocol subscription's topics, in its rack (v3+);
  :func:`consumer_group_records` are the records that write such a group.
* :func:`classic_group_from_consumer` -- the downgrade: a Stable classic group at the
  group epoch whose members (those using the classic protocol, less the leaving ones) get
  their target assignment as a ConsumerProtocol assignment, in the protocol the group
  selects and the version of their subscription to it (Kafka's).
* :func:`consumer_protocol_assignment` -- partitions by topic id as the ConsumerProtocol
  assignment a classic member reads (the downgrade, a SyncGroup in a consumer group).

An upgrade refuses a group whose assignments carry an assignor's user data
(:class:`CustomAssignorUserDataError`): a consumer group has nowhere to keep it, and
Kafka refuses it so ("an unsupported custom assignor is in use").

Only what the conversion is: the coordinator that drives a migration (policies, pending
JoinGroup/SyncGroup answers, the rebalance after a downgrade) uses these.
"""

from __future__ import annotations

from collections.abc import Collection

from tidegate.clock import Clock
from tidegate.coordinator.group.assignor.api import Assignment
from tidegate.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    STABLE,
    GroupMetadata,
    MemberMetadata,
)
from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroup
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.records import (
    CoordinatorRecord,
    new_consumer_group_current_assignment_record,
    new_consumer_group_epoch_record,
    new_consumer_group_member_subscription_record,
    new_consumer_group_target_assignment_epoch_record,
    new_consumer_group_target_assignment_record,
)
from tidegate.coordinator.group.modern.topics import MetadataImage, compute_metadata_hash
from tidegate.protocol.consumer_protocol import (
    assignment_user_data,
    consumer_protocol_version,
    decode_assignment,
    decode_subscription,
    decode_subscription_rack,
    encode_assignment,
)


class CustomAssignorUserDataError(ValueError):
    """A classic member's assignment carries user data of a (custom) assignor, which the
    consumer group would lose (Kafka's UnsupportedVersionException in
    ``ConsumerGroup.fromClassicGroup``)."""


def _assignment_by_id(data: bytes, image: MetadataImage) -> Assignment:
    """A ConsumerProtocol assignment by topic id; topics that no longer exist are dropped.
    Raises :class:`CustomAssignorUserDataError` if it carries user data."""
    if assignment_user_data(data):
        raise CustomAssignorUserDataError("userData from a custom assignor would be lost")
    out: dict = {}
    for name, partition in decode_assignment(data):
        topic = image.get(name)
        if topic is not None:
            out.setdefault(topic.topic_id, set()).add(partition)
    return {topic_id: frozenset(partitions) for topic_id, partitions in out.items()}


def consumer_group_from_classic(classic: GroupMetadata, image: MetadataImage) -> ConsumerGroup:
    """The consumer group a classic group becomes (its generation as the epochs). Raises
    ValueError when a member's subscription or assignment does not parse,
    :class:`CustomAssignorUserDataError` when an assignment carries user data."""
    generation = classic.generation_id
    protocol = classic.protocol_name
    if protocol is None and classic.members:
        raise ValueError(f"group {classic.group_id} has not selected a protocol yet")
    group = ConsumerGroup(classic.group_id)
    group.group_epoch = generation
    group.assignment_epoch = generation
    for m in classic.members.values():
        assigned = _assignment_by_id(m.assignment, image)
        subscription = m.metadata(protocol) if protocol is not None else None
        topics = decode_subscription(subscription) if subscription is not None else []
        member = ConsumerGroupMember(
            m.member_id,
            member_epoch=generation,
            previous_member_epoch=generation,
            instance_id=m.group_instance_id,
            rack_id=decode_subscription_rack(subscription) if subscription is not None else None,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=frozenset(topics),
            assigned_partitions=assigned,
            classic_member_metadata=ClassicMemberMetadata(
                m.session_timeout_ms,
                tuple(ClassicProtocol(name, metadata) for name, metadata in m.protocols),
            ),
        )
        group.update_target_assignment(m.member_id, assigned)
        group.update_member(member)
    group.metadata_hash = compute_metadata_hash(group.subscribed_topic_names, image)
    return group


def consumer_group_records(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """The records that write ``group`` (Kafka's ``createConsumerGroupRecords``): members,
    epoch, targets, target epoch, current assignments."""
    group_id = group.group_id
    members = group.members.values()
    return [
        *(new_consumer_group_member_subscription_record(group_id, m) for m in members),
        new_consumer_group_epoch_record(group_id, group.group_epoch, group.metadata_hash),
        *(
            new_consumer_group_target_assignment_record(
                group_id, m.member_id, group.target_assignment_of(m.member_id)
            )
            for m in members
        ),
        new_consumer_group_target_assignment_epoch_record(group_id, group.assignment_epoch),
        *(new_consumer_group_current_assignment_record(group_id, m) for m in members),
    ]


def classic_group_from_consumer(
    group: ConsumerGroup,
    image: MetadataImage,
    clock: Clock,
    leaving: Collection[str] = (),
) -> GroupMetadata:
    """The classic group a consumer group becomes once only classic-protocol members are
    left (the ``leaving`` member ids excepted). Raises ValueError if a member left does
    not speak the classic protocol."""
    classic = GroupMetadata(group.group_id, STABLE, clock)
    classic.generation_id = group.group_epoch
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    for member in group.members.values():
        if member.member_id in leaving:
            continue
        metadata = member.classic_member_metadata
        if metadata is None:
            raise ValueError(f"member {member.member_id} does not use the classic protocol")
        classic.add(
            MemberMetadata(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                metadata.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                [(p.name, p.metadata) for p in metadata.supported_protocols],
            )
        )
    if classic.members:
        classic.protocol_name = classic.select_protocol()
    classic.subscribed_topics = classic.compute_subscribed_topics()
    for member_id, m in classic.members.items():
        m.assignment = consumer_protocol_assignment(
            group.target_assignment_of(member_id),
            image,
            consumer_protocol_version(m.metadata(classic.protocol_name or "")),
        )
    return classic


def consumer_protocol_assignment(assignment: Assignment, image: MetadataImage, version: int) -> bytes:
    """``assignment`` (by topic id) as a ConsumerProtocol assignment in ``version`` (that
    of the member's subscription, as Kafka answers); deleted topics are left out."""
    return encode_assignment(
        (
            (topic.name, partition)
            for topic_id, partitions in assignment.items()
            if (topic := image.get_by_id(topic_id)) is not None
            for partition in partitions
        ),
        version,
    )
