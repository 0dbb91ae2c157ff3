"""A KIP-932 share group (Kafka's ``ShareGroup`` and the share-partition metadata its
``GroupMetadataManager`` keeps per group).

Everything here is the replay of the group's records (:mod:`.records`): the group epoch
and metadata hash, the members with their assignments, the target assignment and its
epoch (:class:`~tidegate.coordinator.group.modern.modern_group.ModernGroup`), and record
15, the group's **share-partitions**:

* *initializing* -- their state is being created by the persister (InitializeShareGroup-
  State, start offset -1); each topic remembers when it was recorded (soft state: the
  time of the replay, as in Kafka), so that an initialization lost with a crash or a
  failed call is tried again after ``group.share.initialize.retry.interval.ms``;
* *initialized* -- the persister holds their state: the only partitions the assignor may
  hand out;
* *deleting* -- topics whose state DeleteGroups or DeleteShareGroupOffsets is deleting.

States (reference 2.3): EMPTY (no member), STABLE (members; there is no revocation, so no
assigning or reconciling), DEAD once deleted.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.clock import MonotonicMs
from tidegate.coordinator.group.modern.modern_group import (
    ModernGroup,
    api_error,
    described_topic_partitions,
    update_name_counts,
)
from tidegate.coordinator.group.modern.records import SHARE_GROUP_RECORDS, CoordinatorRecord
from tidegate.coordinator.group.modern.share.records import (
    ShareGroupStatePartitionMetadataValue,
    TopicPartitionsInfo,
    new_share_group_state_partition_metadata_tombstone_record,
)
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember
from tidegate.coordinator.group.modern.subscription import subscription_type
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import ErrorCode
from tidegate.protocol.messages import share_group_describe

#: The group's protocol type, as ListGroups shows it.
SHARE_PROTOCOL_TYPE = "share"


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class InitMapValue:
    """A topic's share-partitions in one of the group's sets (Kafka's ``InitMapValue``)."""

    topic_name: str
    partitions: frozenset[int]
    #: when it was recorded (replayed), on the monotonic clock; soft state
    timestamp_ms: MonotonicMs

    @property
    def info(self) -> TopicPartitionsInfo:
        return TopicPartitionsInfo(self.topic_name, self.partitions)


#: topic id -> its share-partitions
InitMap = Mapping[uuid.UUID, InitMapValue]


def combine_init_maps(initialized: InitMap, initializing: InitMap) -> dict[uuid.UUID, InitMapValue]:
    """Kafka's ``combineInitMaps``: the union per topic; the second map's name and time
    win where both have the topic."""
    out = dict(initialized)
    for topic_id, value in initializing.items():
        old = out.get(topic_id)
        if old is not None:
            value = InitMapValue(
                value.topic_name, old.partitions | value.partitions, value.timestamp_ms
            )
        out[topic_id] = value
    return out


def infos(init_map: InitMap) -> dict[uuid.UUID, TopicPartitionsInfo]:
    return {topic_id: value.info for topic_id, value in init_map.items()}


class ShareGroup(ModernGroup[ShareGroupMember]):
    RECORDS = SHARE_GROUP_RECORDS

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        #: record 15: topic id -> its share-partitions in each set
        self.initializing_topics: dict[uuid.UUID, InitMapValue] = {}
        self.initialized_topics: dict[uuid.UUID, InitMapValue] = {}
        #: topic id -> topic name
        self.deleting_topics: dict[uuid.UUID, str] = {}
        #: whether record 15 is present (Kafka keeps the group's entry only then)
        self.has_state_partition_metadata = False

    def __repr__(self) -> str:
        return (
            f"ShareGroup({self.group_id!r}, {self.state}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={len(self.members)}, "
            f"initialized={ {t: sorted(v.partitions) for t, v in self.initialized_topics.items()} })"
        )

    def _new_member(self, member_id: str) -> ShareGroupMember:
        return ShareGroupMember(member_id)

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    # -- members ------------------------------------------------------------------------------
    def update_member(self, new: ShareGroupMember) -> None:
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        update_name_counts(self.subscribed_topic_names, old, new)
        self._update_subscription_type()

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            update_name_counts(self.subscribed_topic_names, old, None)
            self._update_subscription_type()

    def _update_subscription_type(self) -> None:
        self.subscription_type = subscription_type(
            {}, self.subscribed_topic_names, len(self.members)
        )

    # -- share-partitions (record 15) ------------------------------------------------------------
    def replay_state_partition_metadata(
        self, value: ShareGroupStatePartitionMetadataValue | None, now_ms: MonotonicMs
    ) -> None:
        """Record 15 replaces the three sets whole; every topic is stamped with ``now_ms``
        (Kafka stamps them with the replay's time); a tombstone clears them."""

        def stamped(
            topics: Mapping[uuid.UUID, TopicPartitionsInfo],
        ) -> dict[uuid.UUID, InitMapValue]:
            return {t: InitMapValue(i.topic_name, i.partitions, now_ms) for t, i in topics.items()}

        if value is None:
            self.initializing_topics, self.initialized_topics, self.deleting_topics = {}, {}, {}
            self.has_state_partition_metadata = False
            return
        self.initializing_topics = stamped(value.initializing_topics)
        self.initialized_topics = stamped(value.initialized_topics)
        self.deleting_topics = dict(value.deleting_topics)
        self.has_state_partition_metadata = True

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        """The initialized share-partitions, topic id -> partitions (the assignable ones)."""
        return {topic_id: value.partitions for topic_id, value in self.initialized_topics.items()}

    def share_partition_topic_ids(self) -> set[uuid.UUID]:
        """Every topic id in the three sets."""
        return {*self.initializing_topics, *self.initialized_topics, *self.deleting_topics}

    # -- deletion ----------------------------------------------------------------------------------
    def validate_empty(self) -> None:
        """NON_EMPTY_GROUP unless the group has no member (DeleteGroups, Alter- and
        DeleteShareGroupOffsets)."""
        if self.state is not ShareGroupState.EMPTY:
            raise api_error(ErrorCode.non_empty_group, "The group is not empty.")

    def _own_tombstone_records(self) -> list[CoordinatorRecord]:
        return [new_share_group_state_partition_metadata_tombstone_record(self.group_id)]

    # -- ShareGroupDescribe -------------------------------------------------------------------
    def describe(
        self, assignor_name: str, image: MetadataImage
    ) -> share_group_describe.DescribedGroup:
        """The group as ShareGroupDescribe shows it (Kafka's ``asDescribedGroup``)."""
        members = [
            share_group_describe.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                assignment=share_group_describe.Assignment(
                    topic_partitions=described_topic_partitions(
                        m.assigned_partitions,
                        image,
                        share_group_describe.TopicPartitions,
                    )
                ),
            )
            for m in self.members.values()
        ]
        return share_group_describe.DescribedGroup(
            group_id=self.group_id,
            group_state=str(self.state),
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor_name=assignor_name,
            members=members,
        )
