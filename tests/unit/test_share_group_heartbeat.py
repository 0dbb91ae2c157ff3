"""ShareGroupHeartbeat on the KIP-932 coordinator (ShareGroupManager), on fake time over a
real ``__consumer_offsets`` and the share-partitions' state store: the share-group cases
of the reference's section 4 (items 27, 33-36, named after the Kafka 4.2 tests they pin:
GroupMetadataManagerTest unless said otherwise; SGHRT = ShareGroupHeartbeatRequestTest),
the share-partition initialization (the persister answering at once or later, failing,
partitions and topics that come later), leaving, session expiry and the replay at start.
"""

from __future__ import annotations

import pytest

from tests.unit.consumer_groups import INTERVAL, SESSION, Harness, mk
from tests.unit.share_groups import ShareHarness, keys, subdir
from tidegate.coordinator.group.group_type import GroupType
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.records import RecordType
from tidegate.coordinator.group.modern.share.records import (
    TopicPartitionsInfo,
    new_share_group_current_assignment_record,
    new_share_group_current_assignment_tombstone_record,
    new_share_group_epoch_record,
    new_share_group_member_subscription_record,
    new_share_group_member_subscription_tombstone_record,
    new_share_group_state_partition_metadata_record,
    new_share_group_target_assignment_epoch_record,
    new_share_group_target_assignment_record,
    new_share_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.share.share_group import ShareGroupState
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupConfig,
    ShareGroupHeartbeat,
)
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember
from tidegate.coordinator.group.modern.topics import compute_metadata_hash
from tidegate.errors import ErrorCode as E
from tidegate.server.share.persister import SharePartitionKey

G = "fooup"


@pytest.fixture
def h(tmp_path) -> ShareHarness:
    return ShareHarness(tmp_path)


def group_hash(h, *names):
    return compute_metadata_hash(names, h.topics)


def init_record(group_id, initializing=None, initialized=None, deleting=None):
    """Record 15 from {topic_id: (name, partitions)} maps."""

    def infos(m):
        return {t: TopicPartitionsInfo(n, frozenset(p)) for t, (n, p) in (m or {}).items()}

    return new_share_group_state_partition_metadata_record(
        group_id, infos(initializing), infos(initialized), deleting or {}
    )


# --------------------------------------------------------------------- request checks (2.3)
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"member_id": ""}, "MemberId can't be empty."),
        ({"member_id": " "}, "MemberId can't be empty."),
        ({"member_id": "x" * 37}, "MemberId can't be longer than 36 characters."),
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"rack_id": " "}, "RackId can't be empty."),
        ({"subscribed_topic_names": None}, "SubscribedTopicNames must be set in first request."),
        ({"subscribed_topic_names": []}, "SubscribedTopicNames must be set in first request."),
        ({"member_epoch": -2}, "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests_answer_invalid_request(h, fields, message):
    request = {"group_id": G, "member_id": "m", "member_epoch": 0, "subscribed_topic_names": ["foo"]}
    request.update(fields)
    answers = h.send(ShareGroupHeartbeat(**request))
    assert [(a.error, a.error_message) for a in answers] == [(E.invalid_request, message)]
    assert h.batches == []


def test_not_active_answers_coordinator_not_available(h):
    h.share.active = False
    assert h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"]).error is E.coordinator_not_available


# -------------------------------------------------------------------------- item 33
def test_share_group_unknown_group_id(h):
    """testShareGroupUnknownGroupId: a heartbeat above 0 of an unknown group."""
    r = h.heartbeat(G, "m1", 100, subscribed_topic_names=["foo", "bar"])
    assert r.error is E.group_id_not_found
    assert h.batches == []


def test_share_group_unknown_member_id_joins(h):
    """testShareGroupUnknownMemberIdJoins: a member is created only at epoch 0."""
    h.create_topic("foo", 1)
    h.join("m1", ["foo", "bar"], G)
    r = h.heartbeat(G, "m2", 1, subscribed_topic_names=["foo", "bar"])
    assert r.error is E.unknown_member_id


def test_share_group_member_can_rejoin_with_epoch_zero(h):
    """testShareGroupMemberCanRejoinWithEpochZero: a known member joining again keeps its
    epoch and assignment; nothing changes, nothing is written."""
    foo = h.create_topic("foo", 2)
    first = h.join("m1", group_id=G)
    written = len(h.batches)
    again = h.join("m1", group_id=G)
    assert (again.member_epoch, again.assignment) == (first.member_epoch, mk((foo, (0, 1))))
    assert len(h.batches) == written


def test_member_epoch_validation(h):
    """Member at 100 (previous 99): 200 or 50 is FENCED_MEMBER_EPOCH; 99 is accepted (the
    answer with 100 was lost) and answered with 100."""
    foo = h.create_topic("foo", 2)
    member = ShareGroupMember(
        "m1", 100, 99, subscribed_topic_names=frozenset({"foo"}), assigned_partitions=mk((foo, (0, 1)))
    )
    for record in (
        new_share_group_member_subscription_record(G, member),
        new_share_group_epoch_record(G, 100, group_hash(h, "foo")),
        init_record(G, initialized={foo: ("foo", (0, 1))}),
        new_share_group_target_assignment_record(G, "m1", member.assigned_partitions),
        new_share_group_target_assignment_epoch_record(G, 100),
        new_share_group_current_assignment_record(G, member),
    ):
        h.share.replay(record)
    assert h.heartbeat(G, "m1", 200).error is E.fenced_member_epoch
    assert h.heartbeat(G, "m1", 50).error is E.fenced_member_epoch
    r = h.heartbeat(G, "m1", 99)
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 100, None)
    assert h.batches == []


# -------------------------------------------------------------------------- item 34
def test_share_group_leaving_member_bumps_group_epoch(h):
    """testShareGroupLeavingMemberBumpsGroupEpoch: the member's three records are
    tombstoned and the epoch bumped with the hash of what the others subscribe to."""
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    h.create_topic("zar", 1)
    h.join("m1", ["foo", "bar"], G)
    h.join("m2", ["foo", "bar", "zar"], G)
    h.beat("m1", G)
    assert h.member("m1", G).assigned_partitions != mk((foo, range(6)), (bar, range(3)))
    epoch = h.group(G).group_epoch
    r = h.heartbeat(G, "m2", -1)
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == (E.none, "m2", -1, None)
    assert h.last_batch == [
        new_share_group_current_assignment_tombstone_record(G, "m2"),
        new_share_group_target_assignment_tombstone_record(G, "m2"),
        new_share_group_member_subscription_tombstone_record(G, "m2"),
        new_share_group_epoch_record(G, epoch + 1, group_hash(h, "foo", "bar")),
    ]
    assert set(h.group(G).members) == {"m1"}
    assert h.share.timeouts(G, "m2") == {}
    # the next heartbeat of the one left gives it every partition
    assert h.beat("m1", G).assignment == mk((foo, range(6)), (bar, range(3)))


def test_leave_of_an_unknown_group_or_member(h):
    assert h.heartbeat(G, "m1", -1).error is E.group_id_not_found
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    assert h.heartbeat(G, "m2", -1).error is E.unknown_member_id


def test_share_group_max_size_config_exceeded(tmp_path):
    """SGHRT testShareGroupMaxSizeConfigExceeded (GMMT
    testShareGroupNewMemberIsRejectedWithMaximumMembersIsReached): a newcomer to a full
    group is refused; the members keep heartbeating."""
    h = ShareHarness(tmp_path, ShareGroupConfig(max_size=1))
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    r = h.heartbeat(G, "m2", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (
        E.group_max_size_reached,
        "The share group has reached its maximum capacity of 1 members.",
    )
    assert h.beat("m1", G).error is E.none
    assert h.join("m1", group_id=G).error is E.none


# -------------------------------------------------------------------------- item 35
def test_share_group_member_joins_empty_group_with_assignments(h):
    """testShareGroupMemberJoinsEmptyGroupWithAssignments: the first heartbeat records the
    member, the epoch, the target, its assignment and the share-partitions as
    initializing; the persister answering at once, they are recorded as initialized and
    the member's heartbeat is run again (single-node note): the answer assigns them all."""
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    r = h.join("m1", ["foo", "bar"], G, client_id="client", client_host="localhost")
    joined = ShareGroupMember(
        "m1", 1, 0, client_id="client", client_host="localhost",
        subscribed_topic_names=frozenset({"foo", "bar"}),
    )  # fmt: skip
    everything = mk((foo, range(6)), (bar, range(3)))
    assigned = joined.replace(member_epoch=2, previous_member_epoch=1, assigned_partitions=everything)
    metadata_hash = group_hash(h, "foo", "bar")
    assert h.batches == [
        [
            new_share_group_member_subscription_record(G, joined.replace(member_epoch=0, previous_member_epoch=-1)),
            new_share_group_epoch_record(G, 1, metadata_hash),
            new_share_group_target_assignment_record(G, "m1", {}),
            new_share_group_target_assignment_epoch_record(G, 1),
            new_share_group_current_assignment_record(G, joined),
            init_record(G, initializing={foo: ("foo", range(6)), bar: ("bar", range(3))}),
        ],
        [init_record(G, initialized={foo: ("foo", range(6)), bar: ("bar", range(3))})],
        [
            new_share_group_epoch_record(G, 2, metadata_hash),
            new_share_group_target_assignment_record(G, "m1", everything),
            new_share_group_target_assignment_epoch_record(G, 2),
            new_share_group_current_assignment_record(G, assigned),
        ],
    ]
    assert (r.member_epoch, r.heartbeat_interval_ms, r.assignment) == (2, INTERVAL, everything)
    assert h.persister.initializations() == dict.fromkeys(
        keys(G, (foo, range(6)), (bar, range(3))), (1, -1)
    )
    assert h.persister.store.state(SharePartitionKey(G, foo, 0)).start_offset == -1


def test_only_initialized_partitions_are_assigned(h):
    """SGHRT testPartitionAssignmentWithChangingTopics, with a persister that answers
    later (Kafka's way): the first answer is empty, the share-partitions initializing;
    once initialized, the next heartbeat bumps the epoch and assigns them."""
    foo = h.create_topic("foo", 3)
    h.persister.hold = True
    r = h.join("m1", group_id=G)
    assert (r.member_epoch, r.assignment) == (1, {})
    assert h.initializing(G) == mk((foo, range(3)))
    assert h.initialized(G) == {}
    assert h.beat("m1", G).assignment is None  # nothing initialized yet: no bump
    assert h.persister.initializations() == dict.fromkeys(keys(G, (foo, range(3))), (1, -1))
    h.release()
    assert (h.initializing(G), h.initialized(G)) == ({}, mk((foo, range(3))))
    assert h.group(G).group_epoch == 1
    r = h.beat("m1", G)
    assert (r.member_epoch, r.assignment) == (2, mk((foo, range(3))))


def test_partitions_and_topics_that_come_later_are_initialized_then_assigned(h):
    """SGHRT testPartitionAssignmentWithChangingTopics: a topic created after the member
    subscribed to it, then partitions added to it, are initialized and assigned."""
    h.join("m1", ["foo", "bar"], G)
    assert h.member("m1", G).assigned_partitions == {}
    foo = h.create_topic("foo", 2)
    r = h.beat("m1", G)  # a new metadata hash: bump, initialize, assign
    assert r.assignment == mk((foo, (0, 1)))
    h.logs.add_partitions("foo", 4)
    bar = h.create_topic("bar", 1)
    r = h.beat("m1", G)
    assert r.assignment == mk((foo, range(4)), (bar, (0,)))
    assert h.initialized(G) == mk((foo, range(4)), (bar, (0,)))
    asked = h.persister.asked("initialize")
    assert asked[:2] == keys(G, (foo, (0, 1)))
    assert sorted(asked[2:]) == sorted(keys(G, (foo, (2, 3)), (bar, (0,))))


def test_initialization_failure_leaves_partitions_to_the_next_heartbeat(h):
    """uninitializeShareGroupState: a persister error takes the share-partitions out of
    initializing; the next heartbeat records and initializes them again."""
    foo = h.create_topic("foo", 2)
    h.persister.fail = E.coordinator_not_available
    r = h.join("m1", group_id=G)
    assert (r.error, r.assignment) == (E.none, {})
    assert (h.initializing(G), h.initialized(G)) == ({}, {})
    h.persister.fail = None
    r = h.beat("m1", G)
    assert r.assignment == mk((foo, (0, 1)))
    assert [epoch for _, _, epoch, _ in h.persister.calls] == [1] * 4  # the group epoch, twice


def test_a_lost_initialization_is_retried_after_the_retry_interval(h):
    """subscribedTopicsChangeMap: a share-partition initializing for longer than
    group.share.initialize.retry.interval.ms counts as lost and is initialized again."""
    foo = h.create_topic("foo", 1)
    h.persister.hold = True
    h.join("m1", group_id=G)
    h.persister.forget_held()  # the call is lost (a crash of the share coordinator)
    h.advance(29_000)
    h.beat("m1", G)
    assert len(h.persister.calls) == 1
    h.advance(1_000)
    h.beat("m1", G)
    assert len(h.persister.calls) == 2
    h.release()
    assert h.beat("m1", G).assignment == mk((foo, (0,)))


def test_shares_partitions_and_stays_sticky(h):
    """Item 36 on the coordinator (SimpleAssignorTest has the assignor's own cases): 3
    members and one partition share it; with 6 partitions each gets 2, and a member that
    leaves gives its 2 to the others without moving theirs."""
    one = h.create_topic("one", 1)
    for m in ("a", "b", "c"):
        h.join(m, ["one"], G)
    for m in ("a", "b", "c"):
        assert h.beat(m, G).error is E.none
    assert {m: h.member(m, G).assigned_partitions for m in "abc"} == dict.fromkeys("abc", mk((one, (0,))))
    six = h.create_topic("six", 6)
    for m in ("a", "b", "c"):
        h.heartbeat(G, m, h.member(m, G).member_epoch, subscribed_topic_names=["six"])
    for m in ("a", "b", "c"):
        h.beat(m, G)
    held = {m: h.member(m, G).assigned_partitions[six] for m in "abc"}
    assert sorted(map(len, held.values())) == [2, 2, 2]
    assert frozenset().union(*held.values()) == frozenset(range(6))
    h.heartbeat(G, "c", -1)
    for m in ("a", "b"):
        h.beat(m, G)
    for m in ("a", "b"):
        assert h.member(m, G).assigned_partitions[six] > held[m]
        assert len(h.member(m, G).assigned_partitions[six]) == 3


def test_subscription_change_drops_unsubscribed_topics_at_once(h):
    """ShareGroupAssignmentBuilder: a member whose subscription changes keeps only the
    topics it still subscribes to, in the same answer."""
    foo, bar = h.create_topic("foo", 1), h.create_topic("bar", 1)
    h.join("m1", ["foo", "bar"], G)
    r = h.heartbeat(G, "m1", h.member("m1", G).member_epoch, subscribed_topic_names=["bar"])
    assert r.assignment == mk((bar, (0,)))
    assert foo not in h.member("m1", G).assigned_partitions


def test_every_member_stable_at_the_target_epoch(h):
    """No revocation phase: a member moves to the target epoch with its target, STABLE;
    the group is STABLE with members, EMPTY without."""
    h.create_topic("foo", 4)
    assert h.join("a", group_id=G).error is E.none
    h.join("b", group_id=G)
    h.beat("a", G)
    for m in h.group(G).members.values():
        assert m.state is MemberState.STABLE
        assert m.member_epoch == h.group(G).assignment_epoch
        assert m.assigned_partitions == h.group(G).target_assignment[m.member_id]
    assert h.group(G).state is ShareGroupState.STABLE
    h.heartbeat(G, "a", -1)
    h.heartbeat(G, "b", -1)
    assert h.group(G).state is ShareGroupState.EMPTY


# -------------------------------------------------------------------------- topic deletion
def test_topic_deletion_drops_it_from_the_share_partitions_and_assignments(h):
    """maybeCleanupShareGroupState, and the new metadata hash: a deleted topic leaves the
    three sets and, at the next heartbeat, the assignment; the other topic keeps
    flowing. Created again, it has a new id and is initialized afresh."""
    foo, bar = h.create_topic("foo", 2), h.create_topic("bar", 1)
    h.join("m1", ["foo", "bar"], G)
    h.delete_topic("foo")
    r = h.beat("m1", G)
    assert r.assignment == mk((bar, (0,)))
    assert foo not in h.initialized(G)
    new_foo = h.create_topic("foo", 3)
    assert new_foo != foo
    assert h.beat("m1", G).assignment == mk((bar, (0,)), (new_foo, range(3)))
    assert h.persister.asked("initialize")[-3:] == keys(G, (new_foo, range(3)))


def test_on_topics_deleted(h):
    foo = h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    h.share.on_topics_deleted([foo])
    h.loop.run_pending()
    assert h.initialized(G) == {}
    assert h.last_batch == [init_record(G)]


# -------------------------------------------------------------------------- leave, expiry
def test_session_timeout_fences_the_member(h):
    """testSessionTimeoutExpiration for share groups: a member that stops heartbeating is
    fenced after share.session.timeout.ms (its records tombstoned, the epoch bumped)."""
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    epoch = h.group(G).group_epoch
    assert h.share.timeouts(G, "m1") == {"session": h.clock.milliseconds() + SESSION}
    h.advance(SESSION - 100)
    h.beat("m1", G)  # re-armed
    h.advance(SESSION - 100)
    assert "m1" in h.group(G).members
    h.advance(200)
    assert h.group(G).members == {}
    assert h.group(G).group_epoch == epoch + 1
    assert h.heartbeat(G, "m1", epoch).error is E.unknown_member_id


def test_share_group_dynamic_configs(tmp_path):
    """testShareGroupDynamicConfigs: share.session.timeout.ms and
    share.heartbeat.interval.ms per group, the broker's defaults otherwise."""
    configs: dict[str, dict[str, int]] = {}
    h = ShareHarness(tmp_path, group_configs=lambda g: configs.get(g, {}))
    h.create_topic("foo", 1)
    assert h.join("m1", group_id=G).heartbeat_interval_ms == INTERVAL
    configs[G] = {"share.session.timeout.ms": 50_000, "share.heartbeat.interval.ms": 10_000}
    assert h.beat("m1", G).heartbeat_interval_ms == 10_000
    assert h.share.timeouts(G, "m1") == {"session": h.clock.milliseconds() + 50_000}


# -------------------------------------------------------------------------- replay
def test_replay_after_restart_rebuilds_the_group_and_its_timers(h):
    """testOnLoadedWithShareGroup: a restart replays the log into the same groups (members,
    epochs, targets, share-partitions) and re-arms every member's session timeout."""
    h.create_topic("foo", 3)
    bar = h.create_topic("bar", 2)
    h.join("m1", ["foo"], G)
    h.join("m2", ["foo", "bar"], G)
    h.beat("m1", G)
    h.persister.hold = True
    h.logs.add_partitions("bar", 3)
    h.beat("m2", G)  # bar-2 initializing, the call held
    before = h.group(G)
    h2 = h.restart()
    after = h2.group(G)
    for field in ("group_epoch", "metadata_hash", "assignment_epoch", "members", "target_assignment"):
        assert getattr(after, field) == getattr(before, field), field
    assert after.initialized_partitions() == before.initialized_partitions()
    assert h2.initializing(G) == {bar: frozenset({2})}
    assert set(h2.share.timeouts(G, "m1")) == {"session"}
    assert set(h2.share.timeouts(G, "m2")) == {"session"}
    h2.advance(SESSION + 100)
    assert h2.group(G).members == {}


def test_replay_skips_the_other_protocols_records(tmp_path):
    """One __consumer_offsets holds both kinds of group: each coordinator replays its own
    record types only."""
    consumer = Harness(subdir(tmp_path, "c"))
    consumer.create_topic("foo", 1)
    consumer.join("c1", group_id="cg")
    records = [r for batch in consumer.batches for r in batch]
    share = ShareHarness(subdir(tmp_path, "s"))
    for record in records:
        if record.type in share.share.RECORD_TYPES:
            share.share.replay(record)
    assert share.share.groups == {}
    assert {r.type for r in records} <= {t for t in RecordType if t.name.startswith(("CONSUMER", "CLASSIC"))}


# -------------------------------------------------------------------------- item 27
def test_consumer_group_heartbeat_on_share_group(tmp_path):
    """testConsumerGroupHeartbeatOnShareGroup: a share group's id is GROUP_ID_NOT_FOUND for
    ConsumerGroupHeartbeat (and describe)."""
    share = ShareHarness(subdir(tmp_path, "s"))
    share.create_topic("foo", 1)
    share.join("m1", group_id=G)
    consumer = Harness(subdir(tmp_path, "c"), other_groups=share.share.group_type)
    r = consumer.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (E.group_id_not_found, f"Group {G} is not a consumer group.")
    [described] = consumer.manager.consumer_group_describe([G])
    assert described.error_code == E.group_id_not_found.value


def test_share_group_heartbeat_on_consumer_group(tmp_path):
    """testShareGroupHeartbeatOnConsumerGroup: a consumer (or classic) group's id is
    GROUP_ID_NOT_FOUND for ShareGroupHeartbeat, ShareGroupDescribe and the offsets
    admin."""
    consumer = Harness(subdir(tmp_path, "c"))
    consumer.create_topic("foo", 1)
    consumer.join("c1", group_id=G)
    assert consumer.manager.group_type(G) is GroupType.CONSUMER
    share = ShareHarness(subdir(tmp_path, "s"), other_groups=consumer.manager.group_type)
    r = share.heartbeat(G, "m1", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (E.group_id_not_found, f"Group {G} is not a share group.")
    [described] = share.share.share_group_describe([G])
    assert described.error_code == E.group_id_not_found.value
    assert share.share.groups == {}


def test_classic_group_join_on_share_group(h):
    """testClassicGroupJoinOnShareGroup: a JoinGroup of a share group's id answers
    INCONSISTENT_GROUP_PROTOCOL (what the classic coordinator asks)."""
    h.create_topic("foo", 1)
    h.join("m1", group_id=G)
    assert h.share.group_type(G) is GroupType.SHARE
    assert h.share.join_group_error(G) is E.inconsistent_group_protocol
    assert h.share.join_group_error("other") is None
    assert h.share.group_type("other") is None



def test_a_topic_deleted_while_the_coordinator_was_down_leaves_at_load(h):
    """The state machine's first find: the coordinator sees no change of the topic store
    after a restart, so the load itself drops share-partitions of topics that are gone."""
    foo, bar = h.create_topic("foo", 1), h.create_topic("bar", 1)
    h.join("m1", ["foo", "bar"], G)
    h.share.shutdown()
    h.delete_topic("foo")
    h2 = h.restart()
    assert h2.initialized(G) == mk((bar, (0,)))
    assert foo not in h2.group(G).share_partition_topic_ids()
