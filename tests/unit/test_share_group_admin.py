"""The share groups' admin operations on the KIP-932 coordinator (reference 2.3 and 2.10):
ShareGroupDescribe, ListGroups, DeleteGroups, DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets, each answering the generated response
entities, on fake time over a real ``__consumer_offsets`` and the share-partitions' state
store."""

from __future__ import annotations

import uuid

import pytest

from tests.unit.consumer_groups import mk
from tests.unit.share_groups import ShareHarness, keys
from tidegate.coordinator.group.group_type import GroupType
from tidegate.coordinator.group.modern.share.share_group import ShareGroupState
from tidegate.errors import ErrorCode as E
from tidegate.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequestTopic,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.list_groups import ListedGroup
from tidegate.protocol.messages.share_group_describe import (
    Assignment,
    DescribedGroup,
    Member,
    TopicPartitions,
)
from tidegate.server.share.persister import PersisterStateBatch, SharePartitionKey

G = "admin-group"
UTP = E.unknown_topic_or_partition.value


@pytest.fixture
def h(tmp_path) -> ShareHarness:
    return ShareHarness(tmp_path)


def answer(h, call, *args):
    """Run an admin call; its one answer once what it wrote is durable."""
    answers: list = []
    call(*args, answers.append)
    h.loop.run_pending()
    assert len(answers) == 1, answers
    return answers[0]


def alter(h, group_id, **topics):
    """AlterShareGroupOffsets: ``topic=[(partition, start offset), ...]``."""
    request = [
        AlterShareGroupOffsetsRequestTopic(
            topic_name=name,
            partitions=[AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in parts],
        )
        for name, parts in topics.items()
    ]
    return answer(h, h.share.alter_share_group_offsets, group_id, request)


# ------------------------------------------------------------------- ShareGroupDescribe
def test_share_group_describe(h):
    """testShareGroupDescribeNoErrors / testShareGroupDescribeRequest."""
    foo = h.create_topic("foo", 2)
    h.join("m1", group_id=G, client_id="c1", client_host="/127.0.0.1", rack_id="r1")
    assert h.share.share_group_describe([G, "missing", ""]) == [
        DescribedGroup(
            group_id=G,
            group_state="Stable",
            group_epoch=2,
            assignment_epoch=2,
            assignor_name="simple",
            members=[
                Member(
                    member_id="m1",
                    rack_id="r1",
                    member_epoch=2,
                    client_id="c1",
                    client_host="/127.0.0.1",
                    subscribed_topic_names=["foo"],
                    assignment=Assignment(
                        topic_partitions=[TopicPartitions(topic_id=foo, topic_name="foo", partitions=[0, 1])]
                    ),
                )
            ],
        ),
        DescribedGroup(group_id="missing", error_code=E.group_id_not_found.value, error_message="Group missing not found."),
        DescribedGroup(group_id="", error_code=E.invalid_group_id.value, error_message="The group id is empty."),
    ]
    h.heartbeat(G, "m1", -1)
    [empty] = h.share.share_group_describe([G])
    assert (empty.group_state, empty.members) == ("Empty", [])


# ------------------------------------------------------------------------- ListGroups
def test_list_groups(h):
    """ListGroups v5: type ``share``, protocol type ``share``, the state filter."""
    h.create_topic("foo", 1)
    h.join("m1", group_id="busy")
    h.join("m2", group_id="idle")
    h.heartbeat("idle", "m2", -1)
    busy = ListedGroup(group_id="busy", protocol_type="share", group_state="Stable", group_type="share")
    idle = ListedGroup(group_id="idle", protocol_type="share", group_state="Empty", group_type="share")
    assert h.share.list_groups() == [busy, idle]
    assert h.share.list_groups(types_filter=["Share"]) == [busy, idle]
    assert h.share.list_groups(types_filter=["consumer"]) == []
    assert h.share.list_groups(types_filter=["nonsense"]) == []
    assert h.share.list_groups(states_filter=["EMPTY"]) == [idle]
    assert h.share.groups_in_state(ShareGroupState.STABLE) == 1


# ------------------------------------------------------------------------ DeleteGroups
def test_delete_groups_requires_an_empty_group(h):
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    assert answer(h, h.share.delete_groups, [G, "not-a-share-group"]) == {G: E.non_empty_group}
    assert G in h.share.groups


def test_delete_groups_deletes_the_state_then_the_group(h):
    """DeleteGroups on a share group: the initialized and initializing share-partitions
    are recorded as deleting, their state deleted, then the group tombstoned; a restart
    does not bring it back."""
    foo, bar = h.create_topic("foo", 2), h.create_topic("bar", 1)
    h.join("m1", ["foo", "bar"], G)
    h.persister.hold = True
    h.logs.add_partitions("foo", 3)
    h.beat("m1", G)  # foo-2 initializing
    h.persister.forget_held()
    h.persister.hold = False
    h.heartbeat(G, "m1", -1)
    assert answer(h, h.share.delete_groups, [G]) == {G: E.none}
    assert sorted(h.persister.asked("delete")) == sorted(keys(G, (foo, range(3)), (bar, (0,))))
    assert h.persister.store.keys() == []
    assert G not in h.share.groups
    assert h.restart().share.groups == {}


def test_delete_groups_keeps_the_group_when_the_state_deletion_fails(h):
    """A failed state deletion answers its error and keeps the group, its share-partitions
    deleting; the next DeleteGroups deletes them (every partition of the topic)."""
    foo = h.create_topic("foo", 2)
    h.join("m1", group_id=G)
    h.heartbeat(G, "m1", -1)
    h.persister.fail = E.coordinator_not_available
    assert answer(h, h.share.delete_groups, [G]) == {G: E.coordinator_not_available}
    group = h.group(G)
    assert (group.initialized_topics, group.deleting_topics) == ({}, {foo: "foo"})
    h.persister.fail = None
    assert answer(h, h.share.delete_groups, [G]) == {G: E.none}
    assert h.persister.asked("delete") == keys(G, (foo, (0, 1))) * 2
    assert G not in h.share.groups


def test_delete_groups_of_no_share_group(h):
    assert answer(h, h.share.delete_groups, ["x", "y"]) == {}


# ---------------------------------------------------------- AlterShareGroupOffsets
def test_alter_share_group_offsets_creates_the_group_and_initializes_at_a_higher_state_epoch(h):
    """AlterShareGroupOffsets: the group is created if missing; the share-partitions are
    initialized with the given start offsets at a state epoch above any used before;
    unknown topics and partitions are UNKNOWN_TOPIC_OR_PARTITION."""
    foo = h.create_topic("foo", 2)
    response = alter(h, G, foo=[(0, 10), (1, 20), (5, 0)], nope=[(0, 1)])
    assert response == AlterShareGroupOffsetsResponse(
        responses=[
            AlterShareGroupOffsetsResponseTopic(
                topic_name="foo",
                topic_id=foo,
                partitions=[
                    AlterShareGroupOffsetsResponsePartition(partition_index=0),
                    AlterShareGroupOffsetsResponsePartition(partition_index=1),
                    AlterShareGroupOffsetsResponsePartition(
                        partition_index=5, error_code=UTP, error_message="This server does not host this topic-partition."
                    ),
                ],
            ),
            AlterShareGroupOffsetsResponseTopic(
                topic_name="nope",
                topic_id=uuid.UUID(int=0),
                partitions=[
                    AlterShareGroupOffsetsResponsePartition(
                        partition_index=0, error_code=UTP, error_message="This server does not host this topic-partition."
                    )
                ],
            ),
        ]
    )
    assert h.initialized(G) == mk((foo, (0, 1)))
    assert h.group(G).group_epoch == 1
    stored = h.persister.store.state(SharePartitionKey(G, foo, 0))
    assert (stored.state_epoch, stored.start_offset) == (1, 10)
    # members come and go (epochs up to 4); the next alter is at a higher epoch still
    h.join("m1", group_id=G)
    h.heartbeat(G, "m1", -1)
    epoch = h.group(G).group_epoch
    alter(h, G, foo=[(0, 30)])
    stored = h.persister.store.state(SharePartitionKey(G, foo, 0))
    assert (stored.state_epoch, stored.start_offset) == (epoch + 1, 30)
    assert h.persister.store.state(SharePartitionKey(G, foo, 1)).start_offset == 20


def test_alter_share_group_offsets_errors(h):
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    busy = alter(h, G, foo=[(0, 1)])
    assert (busy.error_code, busy.responses) == (E.non_empty_group.value, [])
    assert alter(h, "", foo=[(0, 1)]).error_code == E.invalid_group_id.value
    h.heartbeat(G, "m1", -1)
    h.persister.fail = E.fenced_state_epoch
    failed = alter(h, G, foo=[(0, 7)])
    assert failed.responses[0].partitions[0].error_code == E.fenced_state_epoch.value


def test_alter_share_group_offsets_of_a_consumer_group_id(tmp_path):
    h = ShareHarness(tmp_path, other_groups=lambda g: GroupType.CONSUMER if g == G else None)
    h.create_topic("foo", 1)
    assert alter(h, G, foo=[(0, 1)]).error_code == E.group_id_not_found.value


# ------------------------------------------------------- DescribeShareGroupOffsets
def test_describe_share_group_offsets(h):
    """DescribeShareGroupOffsets v1: start offset, leader epoch and lag = log end offset -
    start offset - delivery complete count; a share-partition without state, or a topic
    that does not exist, has start offset -1 and no lag; an unknown log end offset is
    UNKNOWN_TOPIC_OR_PARTITION; ``topics`` None describes every initialized one."""
    foo, bar = h.create_topic("foo", 3), h.create_topic("bar", 1)
    alter(h, G, foo=[(0, 100), (1, 50)])
    h.persister.store.put(
        SharePartitionKey(G, foo, 0), 1, 100, [PersisterStateBatch(105, 109, 2, 1), PersisterStateBatch(110, 110, 0, 1)]
    )
    ends = {(foo, 0): 200, (foo, 1): None}
    request = [
        DescribeShareGroupOffsetsRequestTopic(topic_name="foo", partitions=[0, 1, 2]),
        DescribeShareGroupOffsetsRequestTopic(topic_name="nope", partitions=[0]),
    ]
    described = answer(h, h.share.describe_share_group_offsets, G, request, lambda t, p: ends.get((t, p)))
    assert described == DescribeShareGroupOffsetsResponseGroup(
        group_id=G,
        topics=[
            DescribeShareGroupOffsetsResponseTopic(
                topic_name="foo",
                topic_id=foo,
                partitions=[
                    # the leader epoch is the persister's: none yet (no leader read the state)
                    DescribeShareGroupOffsetsResponsePartition(
                        partition_index=0, start_offset=100, leader_epoch=-1, lag=95
                    ),
                    DescribeShareGroupOffsetsResponsePartition(
                        partition_index=1, error_code=UTP, error_message="This server does not host this topic-partition."
                    ),
                    DescribeShareGroupOffsetsResponsePartition(partition_index=2, start_offset=-1, leader_epoch=-1),
                ],
            ),
            DescribeShareGroupOffsetsResponseTopic(
                topic_name="nope", partitions=[DescribeShareGroupOffsetsResponsePartition(partition_index=0, start_offset=-1)]
            ),
        ],
    )
    everything = answer(h, h.share.describe_share_group_offsets, G, None, lambda t, p: 100)
    assert [(t.topic_name, [(p.partition_index, p.start_offset, p.lag) for p in t.partitions]) for t in everything.topics] == [
        ("foo", [(0, 100, -5), (1, 50, 50)])
    ]
    assert bar not in h.initialized(G)
    nothing = answer(h, h.share.describe_share_group_offsets, "no-group", None, lambda t, p: 0)
    assert nothing == DescribeShareGroupOffsetsResponseGroup(group_id="no-group")


# --------------------------------------------------------- DeleteShareGroupOffsets
def test_delete_share_group_offsets(h):
    """DeleteShareGroupOffsets: the topic's initialized share-partitions move to deleting,
    their state is deleted, then they leave the group; a topic without state, or that
    does not exist, is UNKNOWN_TOPIC_OR_PARTITION."""
    foo, bar = h.create_topic("foo", 2), h.create_topic("bar", 1)
    h.join("m1", ["foo"], G)
    h.heartbeat(G, "m1", -1)
    response = answer(h, h.share.delete_share_group_offsets, G, ["foo", "bar", "nope"])
    assert response == DeleteShareGroupOffsetsResponse(
        responses=[
            DeleteShareGroupOffsetsResponseTopic(topic_name="foo", topic_id=foo),
            DeleteShareGroupOffsetsResponseTopic(
                topic_name="bar", error_code=UTP, error_message="There is no offset information to delete."
            ),
            DeleteShareGroupOffsetsResponseTopic(
                topic_name="nope", error_code=UTP, error_message="This server does not host this topic-partition."
            ),
        ]
    )
    assert h.persister.asked("delete") == keys(G, (foo, (0, 1)))
    assert (h.initialized(G), h.group(G).deleting_topics) == ({}, {})
    assert bar not in h.initialized(G)


def test_delete_share_group_offsets_failure_keeps_the_topic_deleting(h):
    foo = h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    h.heartbeat(G, "m1", -1)
    h.persister.fail = E.coordinator_load_in_progress
    response = answer(h, h.share.delete_share_group_offsets, G, ["foo"])
    assert [(t.topic_id, t.error_code) for t in response.responses] == [(foo, E.coordinator_load_in_progress.value)]
    assert h.group(G).deleting_topics == {foo: "foo"}
    h.persister.fail = None
    response = answer(h, h.share.delete_share_group_offsets, G, ["foo"])
    assert [(t.topic_id, t.error_code) for t in response.responses] == [(foo, 0)]
    assert h.group(G).deleting_topics == {}


def test_delete_share_group_offsets_errors(h):
    assert answer(h, h.share.delete_share_group_offsets, G, ["foo"]).error_code == E.group_id_not_found.value
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    busy = answer(h, h.share.delete_share_group_offsets, G, ["foo"])
    assert (busy.error_code, busy.error_message) == (E.non_empty_group.value, "The group is not empty.")
    assert answer(h, h.share.delete_share_group_offsets, "", ["foo"]).error_code == E.invalid_group_id.value


def test_initializing_a_deleting_topic_takes_it_out_of_deleting(h):
    """addInitializingTopicsRecords: a topic a failed deletion left deleting, subscribed
    again, is initialized again and no longer deleting."""
    foo = h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    h.heartbeat(G, "m1", -1)
    h.persister.fail = E.coordinator_not_available
    answer(h, h.share.delete_share_group_offsets, G, ["foo"])
    h.persister.fail = None
    assert h.join("m1", group_id=G).assignment == mk((foo, (0,)))
    assert h.group(G).deleting_topics == {}
