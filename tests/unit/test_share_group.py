"""The share group's state (ShareGroup: states, subscription counts, the share-partition
sets, the tombstones of a deletion), its member's reconciliation
(ShareGroupAssignmentBuilder), and its records' round trip through ``__consumer_offsets``'
JSON format."""

from __future__ import annotations

import uuid

import pytest

from tests.unit.consumer_groups import mk
from tidegate.clock import MonotonicMs
from tidegate.coordinator.group.assignor.api import HETEROGENEOUS, HOMOGENEOUS
from tidegate.coordinator.group.group_metadata_manager import (
    decode_coordinator_record,
    encode_coordinator_record,
    parse_key,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.share.records import (
    ShareGroupStatePartitionMetadataValue,
    TopicPartitionsInfo,
    new_share_group_current_assignment_record,
    new_share_group_current_assignment_tombstone_record,
    new_share_group_epoch_record,
    new_share_group_epoch_tombstone_record,
    new_share_group_member_subscription_record,
    new_share_group_member_subscription_tombstone_record,
    new_share_group_state_partition_metadata_record,
    new_share_group_state_partition_metadata_tombstone_record,
    new_share_group_target_assignment_epoch_record,
    new_share_group_target_assignment_epoch_tombstone_record,
    new_share_group_target_assignment_record,
    new_share_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.share.share_group import (
    InitMapValue,
    ShareGroup,
    ShareGroupState,
    combine_init_maps,
)
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember, reconcile
from tidegate.coordinator.group.modern.topics import TopicsImage

G = "share-group"
FOO, BAR = uuid.UUID(int=1), uuid.UUID(int=2)
IMAGE = TopicsImage.of((FOO, "foo", 6), (BAR, "bar", 3))


def member(member_id, topics=("foo",), epoch=1, previous=0, assigned=None):
    return ShareGroupMember(
        member_id, epoch, previous, subscribed_topic_names=frozenset(topics), assigned_partitions=assigned or {}
    )


# ------------------------------------------------------------------------ the group
def test_share_group_states():
    """testShareGroupStates: Empty without members, Stable with (no other state), Dead once
    deleted."""
    group = ShareGroup(G)
    assert group.state is ShareGroupState.EMPTY
    group.update_member(member("a"))
    assert group.state is ShareGroupState.STABLE
    group.update_member(member("a", assigned=mk((FOO, (1, 2)))))
    assert group.state is ShareGroupState.STABLE
    group.remove_member("a")
    assert group.state is ShareGroupState.EMPTY
    group.dead = True
    assert str(group.state) == "Dead"


def test_subscription_counts_and_type():
    group = ShareGroup(G)
    group.update_member(member("a", ("foo", "bar")))
    group.update_member(member("b", ("foo", "bar")))
    assert group.subscription_type is HOMOGENEOUS
    group.update_member(member("b", ("foo",)))
    assert group.subscription_type is HETEROGENEOUS
    assert {n: c.by_name_count for n, c in group.subscribed_topic_names.items()} == {"foo": 2, "bar": 1}
    group.remove_member("a")
    assert set(group.subscribed_topic_names) == {"foo"}
    assert group.subscription_type is HOMOGENEOUS


def test_share_group_delete_tombstones():
    """testShareGroupDeleteTombstones: members' current and target assignments, the target
    epoch, the members, the share-partitions, then the group."""
    group = ShareGroup(G)
    assert group.create_group_tombstone_records() == [
        new_share_group_target_assignment_epoch_tombstone_record(G),
        new_share_group_state_partition_metadata_tombstone_record(G),
        new_share_group_epoch_tombstone_record(G),
    ]
    group.update_member(member("a"))
    assert group.create_group_tombstone_records() == [
        new_share_group_current_assignment_tombstone_record(G, "a"),
        new_share_group_target_assignment_tombstone_record(G, "a"),
        new_share_group_target_assignment_epoch_tombstone_record(G),
        new_share_group_member_subscription_tombstone_record(G, "a"),
        new_share_group_state_partition_metadata_tombstone_record(G),
        new_share_group_epoch_tombstone_record(G),
    ]


def test_share_partition_sets_replay_whole_and_stamp_the_time():
    group = ShareGroup(G)
    value = ShareGroupStatePartitionMetadataValue(
        {FOO: TopicPartitionsInfo("foo", frozenset({3}))},
        {FOO: TopicPartitionsInfo("foo", frozenset({0, 1, 2})), BAR: TopicPartitionsInfo("bar", frozenset({0}))},
        {uuid.UUID(int=9): "gone"},
    )
    group.replay_state_partition_metadata(value, MonotonicMs(1234))
    assert group.initialized_partitions() == {FOO: frozenset({0, 1, 2}), BAR: frozenset({0})}
    assert group.initializing_topics == {FOO: InitMapValue("foo", frozenset({3}), MonotonicMs(1234))}
    assert group.share_partition_topic_ids() == {FOO, BAR, uuid.UUID(int=9)}
    group.replay_state_partition_metadata(None, MonotonicMs(5))
    assert (group.initialized_topics, group.has_state_partition_metadata) == ({}, False)


def test_combine_init_maps():
    """combineInitMaps: a union per topic, the second map's name and time win."""
    t = MonotonicMs
    combined = combine_init_maps(
        {FOO: InitMapValue("foo", frozenset({0}), t(1))},
        {FOO: InitMapValue("foo", frozenset({1}), t(2)), BAR: InitMapValue("bar", frozenset({0}), t(3))},
    )
    assert combined == {
        FOO: InitMapValue("foo", frozenset({0, 1}), t(2)),
        BAR: InitMapValue("bar", frozenset({0}), t(3)),
    }


# ------------------------------------------------------------------------ reconciliation
def test_member_moves_to_the_target_epoch_with_its_subscribed_target():
    """ShareGroupAssignmentBuilder: a new target epoch moves the member to it, STABLE, with
    the target's topics it subscribes to; the same epoch keeps it unless its subscription
    changed."""
    m = member("a", ("foo",), epoch=3, previous=2, assigned=mk((FOO, (0,))))
    target = mk((FOO, (0, 1)), (BAR, (0,)))
    moved = reconcile(m, 4, target, False, IMAGE)
    assert (moved.member_epoch, moved.previous_member_epoch, moved.state) == (4, 3, MemberState.STABLE)
    assert moved.assigned_partitions == mk((FOO, (0, 1)))
    assert reconcile(moved, 4, target, False, IMAGE) is moved
    both = moved.replace(subscribed_topic_names=frozenset({"foo", "bar"}))
    assert reconcile(both, 4, target, True, IMAGE).assigned_partitions == target


# ------------------------------------------------------------------------ the record format
def _records():
    m = ShareGroupMember(
        "m", 4, 3, rack_id="r", client_id="c", client_host="/h",
        subscribed_topic_names=frozenset({"b", "a"}), assigned_partitions=mk((FOO, (0, 2))),
    )  # fmt: skip
    infos = {FOO: TopicPartitionsInfo("foo", frozenset({0, 1}))}
    return [
        new_share_group_epoch_record(G, 4, -(2**63)),
        new_share_group_epoch_tombstone_record(G),
        new_share_group_member_subscription_record(G, m),
        new_share_group_member_subscription_tombstone_record(G, "m"),
        new_share_group_target_assignment_record(G, "m", mk((FOO, (0, 1, 2)))),
        new_share_group_target_assignment_tombstone_record(G, "m"),
        new_share_group_target_assignment_epoch_record(G, 4),
        new_share_group_target_assignment_epoch_tombstone_record(G),
        new_share_group_current_assignment_record(G, m),
        new_share_group_current_assignment_tombstone_record(G, "m"),
        new_share_group_state_partition_metadata_record(
            G, infos, {BAR: TopicPartitionsInfo("bar", frozenset({2}))}, {uuid.UUID(int=7): "old"}
        ),
        new_share_group_state_partition_metadata_tombstone_record(G),
    ]


@pytest.mark.parametrize("record", _records(), ids=lambda r: f"{r.type.name}-{r.value is None}")
def test_records_round_trip_through_the_json_format(record):
    key, value = encode_coordinator_record(record)
    assert (value is None) is (record.value is None)
    assert parse_key(key)[0].startswith("sg")
    assert decode_coordinator_record(parse_key(key), value) == record
