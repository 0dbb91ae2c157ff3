"""ConsumerGroupHeartbeat on the KIP-848 coordinator (ConsumerGroupManager), on fake
time over a real ``__consumer_offsets``: every consumer-group case of the reference's
section 4 (items 1-23 and 28), each test named after the Kafka 4.2 test it pins
(GroupMetadataManagerTest unless said otherwise; CGHRT = ConsumerGroupHeartbeatRequestTest).
"""

from __future__ import annotations

import pytest

from tests.unit.consumer_groups import INTERVAL, SESSION, Harness, mk, seed_group
from tidegate.coordinator.group.assignor.api import (
    GroupAssignment,
    PartitionAssignorException,
)
from tidegate.coordinator.group.assignor.range import RangeAssignor
from tidegate.coordinator.group.assignor.uniform import UniformAssignor
from tidegate.coordinator.group.group_metadata_manager import OffsetAndMetadata
from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroupState
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import ConsumerGroupMember
from tidegate.coordinator.group.modern.consumer.records import (
    new_classic_group_tombstone_record,
    new_consumer_group_current_assignment_record,
    new_consumer_group_current_assignment_tombstone_record,
    new_consumer_group_epoch_record,
    new_consumer_group_member_subscription_record,
    new_consumer_group_member_subscription_tombstone_record,
    new_consumer_group_target_assignment_epoch_record,
    new_consumer_group_target_assignment_record,
    new_consumer_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.topics import compute_metadata_hash
from tidegate.errors import ErrorCode as E
from tidegate.protocol.messages.consumer_group_describe import (
    Assignment,
    Member,
    TopicPartitions,
)

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
G = "fooup"


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def member(member_id, epoch, previous, assigned=None, *, topics=("foo", "bar"), state=STABLE,
           pending=None, instance=None, regex="", assignor="range", rebalance=5000):
    """A member as Kafka's tests build them."""
    return ConsumerGroupMember(
        member_id,
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        instance_id=instance,
        rebalance_timeout_ms=rebalance,
        subscribed_topic_names=frozenset(topics),
        subscribed_topic_regex=regex,
        server_assignor_name=assignor,
        assigned_partitions=assigned or {},
        partitions_pending_revocation=pending or {},
    )


def group_hash(h, *names):
    return compute_metadata_hash(names, h.topics)


def owned(assignment):
    return [(t, sorted(p)) for t, p in assignment.items()]


# --------------------------------------------------------------------- request checks (1.4)
def test_member_id_generation(h):
    """testMemberIdGeneration; CGHRT testMemberIdGeneratedOnServerWhenApiVersionIs0."""
    r = h.heartbeat(G, "", 0, api_version=0, server_assignor="range",
                    subscribed_topic_names=["foo", "bar"])
    assert r.error is E.none and r.member_id and r.member_id != ""
    assert (r.member_epoch, r.heartbeat_interval_ms, r.assignment) == (1, INTERVAL, {})
    assert r.member_id in h.group(G).members


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # CGHRT testConsumerGroupHeartbeatFailureIfMemberIdMissingForVersionsAbove0
        ({"member_id": "", "api_version": 1}, "MemberId can't be empty."),
        ({"member_id": " ", "api_version": 0, "member_epoch": 5}, "MemberId can't be empty."),
        ({"member_id": "", "api_version": 0, "member_epoch": -1}, "MemberId can't be empty."),
        # CGHRT testEmptyConsumerGroupId
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"instance_id": " "}, "InstanceId can't be empty."),
        ({"rack_id": ""}, "RackId can't be empty."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"topic_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
        ({"topic_partitions": [("t", [0])]}, "TopicPartitions must be empty when (re-)joining."),
        (
            {"subscribed_topic_names": None},
            (
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            ),
        ),
        ({"member_epoch": -2}, "InstanceId can't be null."),
        ({"member_epoch": -3}, "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests_answer_invalid_request(h, fields, message):
    request = {
        "group_id": G, "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5000,
        "subscribed_topic_names": ["foo"], "topic_partitions": [],
    }  # fmt: skip
    request.update(fields)
    (r,) = h.send(ConsumerGroupHeartbeat(**request))
    assert (r.error, r.error_message) == (E.invalid_request, message)
    assert G not in h.manager.groups and not h.batches


def test_unsupported_assignor(h):
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"], server_assignor="sticky")
    assert r.error is E.unsupported_assignor
    assert r.error_message == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."


def test_consumer_group_heartbeat_with_empty_subscription(h):
    """CGHRT testConsumerGroupHeartbeatWithEmptySubscription: an empty list of names (or
    an empty regex) is a member with no topics."""
    h.create_topic("foo", 2)
    r = h.heartbeat(G, "m1", 0, subscribed_topic_names=[])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 1, {})
    r = h.heartbeat(G, "m2", 0, subscribed_topic_regex="")
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 1, {})
    assert h.group(G).state is ConsumerGroupState.STABLE


# --------------------------------------------------------------------- groups and members (1.5)
def test_unknown_group_id(h):
    r = h.heartbeat(G, "m", 100, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                    topic_partitions=[])
    assert (r.error, r.error_message) == (E.group_id_not_found, f"Consumer group {G} not found.")


def test_unknown_member_id_joins_consumer_group(h):
    h.join("m1", group_id=G)
    r = h.heartbeat(G, "other", 1, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                    topic_partitions=[])
    assert r.error is E.unknown_member_id
    assert r.error_message == f"Member other is not a member of group {G}."


def test_consumer_group_member_epoch_validation(h):
    foo = h.create_topic("foo", 6)
    seed_group(h, G, 100, [member("m", 100, 99, mk((foo, (1, 2, 3))))])
    for epoch, partitions in ((200, []), (50, []), (99, None)):
        r = h.heartbeat(G, "m", epoch, rebalance_timeout_ms=5000,
                        subscribed_topic_names=["foo", "bar"], topic_partitions=partitions)
        assert r.error is E.fenced_member_epoch, (epoch, r)
    # the previous epoch with a subset of the partitions: the answer with 100 was lost
    r = h.heartbeat(G, "m", 99, rebalance_timeout_ms=5000, subscribed_topic_names=["foo", "bar"],
                    topic_partitions=[(foo, [1, 2])])
    assert (r.error, r.member_epoch) == (E.none, 100)
    # the previous epoch with a partition it does not have: fenced
    r = h.heartbeat(G, "m", 99, topic_partitions=[(foo, [4])])
    assert r.error is E.fenced_member_epoch


def test_member_can_rejoin_with_epoch_zero_in_stable_state(h):
    foo = h.create_topic("foo", 3)
    seed_group(h, G, 100, [member("m", 100, 99, mk((foo, (0, 1, 2))), topics=("foo",))])
    batches = len(h.batches)
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 100, mk((foo, (0, 1, 2))))
    assert h.group(G).group_epoch == 100, "no bump"
    assert all(rec.type != 3 for batch in h.batches[batches:] for rec in batch)


def test_member_can_rejoin_with_epoch_zero_in_unrevoked_partitions_state(h):
    foo = h.create_topic("foo", 3)
    seed_group(
        h, G, 101,
        [member("m", 100, 99, mk((foo, (0, 1))), topics=("foo",), state=UNREVOKED,
                pending=mk((foo, (2,))))],
        targets={"m": mk((foo, (0, 1)))},
    )  # fmt: skip
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 101, mk((foo, (0, 1))))
    assert h.member("m", G).state is STABLE


def test_member_can_rejoin_with_epoch_zero_in_unreleased_partitions_state(h):
    foo = h.create_topic("foo", 3)
    seed_group(
        h, G, 100,
        [member("m", 100, 99, mk((foo, (0,))), topics=("foo",), state=UNRELEASED)],
        targets={"m": mk((foo, (0, 1, 2)))},
    )  # fmt: skip
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 100, mk((foo, (0, 1, 2))))
    assert h.group(G).group_epoch == 100


def test_duplicate_full_heartbeat_in_stable_state(h):
    foo = h.create_topic("foo", 2)
    first = h.join("m", group_id=G)
    batches = len(h.batches)
    full = {"rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"],
            "topic_partitions": [(foo, [0, 1])]}
    again = h.heartbeat(G, "m", first.member_epoch, **full)
    assert again == first, "a full request always gets the assignment, nothing changes"
    assert len(h.batches) == batches


def test_duplicate_full_heartbeat_in_unrevoked_partitions_state(h):
    foo = h.create_topic("foo", 2)
    h.join("a", group_id=G)
    h.join("b", group_id=G)
    revoking = h.ack("a", G)
    assert h.member("a", G).state is UNREVOKED
    full = {"rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"],
            "topic_partitions": [(foo, [0, 1])]}
    again = h.heartbeat(G, "a", revoking.member_epoch, **full)
    assert again == revoking and h.member("a", G).state is UNREVOKED


def test_duplicate_full_heartbeat_with_revocation_ack(h):
    foo = h.create_topic("foo", 3)
    seed_group(
        h, G, 101,
        [member("m", 100, 99, mk((foo, (0, 1))), topics=("foo",), state=UNREVOKED,
                pending=mk((foo, (2,))))],
        targets={"m": mk((foo, (0, 1)))},
    )  # fmt: skip
    full = {"rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"],
            "topic_partitions": [(foo, [0, 1])]}
    first = h.heartbeat(G, "m", 100, **full)
    assert (first.member_epoch, first.assignment) == (101, mk((foo, (0, 1))))
    assert h.member("m", G).state is STABLE
    batches = len(h.batches)
    again = h.heartbeat(G, "m", 100, **full)  # the same request again: its answer was lost
    assert again == first and len(h.batches) == batches


def test_duplicate_full_heartbeat_in_unreleased_partitions_state(h):
    foo = h.create_topic("foo", 2)
    h.join("a", group_id=G)
    h.join("b", group_id=G)
    full = {"rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"],
            "topic_partitions": []}
    waiting = h.heartbeat(G, "b", 2, **full)
    assert h.member("b", G).state is UNRELEASED and waiting.assignment == {}
    again = h.heartbeat(G, "b", 2, **full)
    assert again == waiting and h.member("b", G).state is UNRELEASED
    assert h.group(G).target_assignment["b"][foo], "it waits for a's partitions"


def test_member_joins_empty_consumer_group(h):
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    r = h.heartbeat(G, "m", 0, server_assignor="range", subscribed_topic_names=["foo", "bar"],
                    client_id="client", client_host="/127.0.0.1")
    everything = mk((foo, range(6)), (bar, range(3)))
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.none, "m", 1, INTERVAL)
    assert r.assignment == everything
    expected = ConsumerGroupMember(
        "m", member_epoch=1, previous_member_epoch=0, client_id="client",
        client_host="/127.0.0.1", rebalance_timeout_ms=5000,
        subscribed_topic_names=frozenset({"foo", "bar"}), server_assignor_name="range",
        assigned_partitions=everything,
    )  # fmt: skip
    assert h.last_batch == [
        new_consumer_group_member_subscription_record(G, expected),
        new_consumer_group_epoch_record(G, 1, group_hash(h, "foo", "bar")),
        new_consumer_group_target_assignment_record(G, "m", everything),
        new_consumer_group_target_assignment_epoch_record(G, 1),
        new_consumer_group_current_assignment_record(G, expected),
    ]
    assert h.member("m", G) == expected


def _two_member_group(h):
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    seed_group(h, G, 10, [
        member("m1", 10, 9, mk((foo, (0, 1, 2)), (bar, (0, 1)))),
        member("m2", 10, 9, mk((foo, (3, 4, 5)), (bar, (2,)))),
    ])  # fmt: skip
    return foo, bar


def test_new_joining_member_triggers_new_target_assignment(h):
    foo, bar = _two_member_group(h)
    r = h.heartbeat(G, "m3", 0, server_assignor="range", subscribed_topic_names=["foo", "bar"])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 11, {})
    m3 = member("m3", 11, 0, {}, state=UNRELEASED)
    batch = h.last_batch
    assert batch[0] == new_consumer_group_member_subscription_record(G, m3)
    assert batch[1] == new_consumer_group_epoch_record(G, 11, group_hash(h, "foo", "bar"))
    assert sorted(batch[2:5], key=lambda r: r.key) == [
        new_consumer_group_target_assignment_record(G, "m1", mk((foo, (0, 1)), (bar, (0,)))),
        new_consumer_group_target_assignment_record(G, "m2", mk((foo, (2, 3)), (bar, (1,)))),
        new_consumer_group_target_assignment_record(G, "m3", mk((foo, (4, 5)), (bar, (2,)))),
    ]
    assert batch[5:] == [
        new_consumer_group_target_assignment_epoch_record(G, 11),
        new_consumer_group_current_assignment_record(G, m3),
    ]
    # the owners of moved partitions revoke them first, at their epoch
    r1 = h.heartbeat(G, "m1", 10)
    assert (r1.member_epoch, r1.assignment) == (10, mk((foo, (0, 1)), (bar, (0,))))
    assert h.member("m1", G).state is UNREVOKED
    assert h.member("m1", G).partitions_pending_revocation == mk((foo, (2,)), (bar, (1,)))


def test_updating_subscription_triggers_new_target_assignment(h):
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    seed_group(h, G, 10, [member("m", 10, 9, mk((foo, range(6))), topics=("foo",))])
    r = h.heartbeat(G, "m", 10, subscribed_topic_names=["foo", "bar"])
    assert (r.error, r.member_epoch) == (E.none, 11)
    assert r.assignment == mk((foo, range(6)), (bar, range(3)))
    assert h.last_batch[1] == new_consumer_group_epoch_record(G, 11, group_hash(h, "foo", "bar"))


def test_leaving_member_bumps_group_epoch(h):
    _two_member_group(h)
    r = h.heartbeat(G, "m2", -1)
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == (E.none, "m2", -1, None)
    assert h.last_batch == [
        new_consumer_group_current_assignment_tombstone_record(G, "m2"),
        new_consumer_group_target_assignment_tombstone_record(G, "m2"),
        new_consumer_group_member_subscription_tombstone_record(G, "m2"),
        new_consumer_group_epoch_record(G, 11, group_hash(h, "foo", "bar")),
    ]
    assert list(h.group(G).members) == ["m1"]
    assert h.manager.timeouts(G, "m2") == {}


def test_leave_of_an_unknown_group_or_member(h):
    assert h.heartbeat(G, "m", -1).error is E.group_id_not_found
    h.join("m1", group_id=G)
    assert h.heartbeat(G, "other", -1).error is E.unknown_member_id


# --------------------------------------------------------------------- static members (1.9)
def _static_group(h):
    foo, bar = h.create_topic("foo", 6), h.create_topic("bar", 3)
    seed_group(h, G, 10, [
        member("m1", 10, 9, mk((foo, (0, 1, 2)), (bar, (0, 1))), instance="i1"),
        member("m2", 10, 9, mk((foo, (3, 4, 5)), (bar, (2,))), instance="i2"),
    ])  # fmt: skip
    return foo, bar


def test_no_group_epoch_bump_when_static_member_temporarily_leaves(h):
    _static_group(h)
    before = h.member("m2", G)
    r = h.heartbeat(G, "m2", -2, instance_id="i2")
    assert (r.error, r.member_id, r.member_epoch) == (E.none, "m2", -2)
    parked = before.replace(member_epoch=-2)
    assert h.last_batch == [new_consumer_group_current_assignment_record(G, parked)]
    assert h.group(G).group_epoch == 10


def test_leaving_static_member_bumps_group_epoch(h):
    _static_group(h)
    r = h.heartbeat(G, "m2", -1, instance_id="i2")
    assert (r.error, r.member_epoch) == (E.none, -1)
    assert h.last_batch[-1] == new_consumer_group_epoch_record(G, 11, group_hash(h, "foo", "bar"))
    assert "i2" not in h.group(G).static_members


def test_static_member_gets_back_assignment_upon_rejoin(h):
    foo, bar = _static_group(h)
    h.heartbeat(G, "m2", -2, instance_id="i2")
    r = h.heartbeat(G, "m2-new", 0, instance_id="i2", server_assignor="range",
                    subscribed_topic_names=["foo", "bar"])
    mine = mk((foo, (3, 4, 5)), (bar, (2,)))
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == (E.none, "m2-new", 10, mine)
    copied = member("m2-new", 0, 0, mine, instance="i2")
    rejoined = member("m2-new", 10, 0, mine, instance="i2")
    assert h.last_batch == [
        new_consumer_group_current_assignment_tombstone_record(G, "m2"),
        new_consumer_group_target_assignment_tombstone_record(G, "m2"),
        new_consumer_group_member_subscription_tombstone_record(G, "m2"),
        new_consumer_group_member_subscription_record(G, copied),
        new_consumer_group_target_assignment_record(G, "m2-new", mine),
        new_consumer_group_current_assignment_record(G, copied),
        new_consumer_group_current_assignment_record(G, rejoined),
    ]
    assert h.group(G).group_epoch == 10 and h.group(G).static_members["i2"] == "m2-new"
    assert h.manager.timeouts(G, "m2") == {}


def test_static_member_rejoins_with_new_subscribed_topics(h):
    _static_group(h)
    h.create_topic("zar", 1)
    h.heartbeat(G, "m2", -2, instance_id="i2")
    r = h.heartbeat(G, "m2-new", 0, instance_id="i2", server_assignor="range",
                    subscribed_topic_names=["foo", "bar", "zar"])
    assert (r.error, r.member_epoch) == (E.none, 11), "a new subscription rebalances"
    assert h.group(G).group_epoch == 11 and set(h.group(G).members) == {"m1", "m2-new"}


def test_should_thrown_unreleased_instance_id_exception_when_new_member_joins_with_in_use_instance_id(h):
    _static_group(h)
    r = h.heartbeat(G, "m3", 0, instance_id="i1", subscribed_topic_names=["foo"])
    assert r.error is E.unreleased_instance_id
    assert r.error_message == (
        "Static member m3 with instance id i1 cannot join the group because the instance id "
        "is owned by m1 member."
    )


def test_should_thrown_unknown_member_id_exception_when_unknown_static_member_joins(h):
    _static_group(h)
    r = h.heartbeat(G, "m3", 11, instance_id="i3", rebalance_timeout_ms=5000,
                    subscribed_topic_names=["foo"], topic_partitions=[])
    assert (r.error, r.error_message) == (E.unknown_member_id, "Instance id i3 is unknown.")


def test_should_throw_fenced_instance_id_exception_when_static_member_with_different_member_id_joins(h):
    _static_group(h)
    r = h.heartbeat(G, "m3", 10, instance_id="i1", topic_partitions=[])
    assert r.error is E.fenced_instance_id
    assert r.error_message == "Static member m3 with instance id i1 was fenced by member m1."


def test_consumer_group_member_epoch_validation_for_static_member(h):
    _static_group(h)
    assert h.heartbeat(G, "m1", 11, instance_id="i1").error is E.fenced_member_epoch
    assert h.heartbeat(G, "m1", 10, instance_id="i1").error is E.none


def test_should_throw_unknown_member_id_exception_when_unknown_static_member_leaves(h):
    _static_group(h)
    assert h.heartbeat(G, "m3", -2, instance_id="i3").error is E.unknown_member_id
    assert h.heartbeat(G, "m3", -1, instance_id="i3").error is E.unknown_member_id


def test_should_throw_fenced_instance_id_exception_when_static_member_with_different_member_id_leaves(h):
    _static_group(h)
    assert h.heartbeat(G, "m3", -2, instance_id="i1").error is E.fenced_instance_id
    assert h.heartbeat(G, "m3", -1, instance_id="i1").error is E.fenced_instance_id


# --------------------------------------------------------------------- capacity, states, assignors
def test_new_member_is_rejected_with_maximum_members_is_reached(tmp_path):
    h = Harness(tmp_path, ConsumerGroupConfig(max_size=2))
    h.create_topic("foo", 2)
    h.join("m1", group_id=G)
    h.join("m2", group_id=G)
    r = h.heartbeat(G, "m3", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (
        E.group_max_size_reached,
        "The consumer group has reached its maximum capacity of 2 members.",
    )
    # members already in the group go on
    assert h.heartbeat(G, "m1", h.member("m1", G).member_epoch).error is E.none
    assert h.heartbeat(G, "m2", 0, subscribed_topic_names=["foo"]).error is E.none


def test_consumer_group_states(h):
    foo = h.create_topic("foo", 2)
    group = seed_group(h, G, 10, [])
    assert group.state is ConsumerGroupState.EMPTY
    h.manager.replay(new_consumer_group_member_subscription_record(G, member("m1", 0, 0, topics=("foo",))))
    group.group_epoch = 11
    assert group.state is ConsumerGroupState.ASSIGNING
    h.manager.replay(new_consumer_group_target_assignment_epoch_record(G, 11))
    assert group.state is ConsumerGroupState.RECONCILING
    h.manager.replay(new_consumer_group_current_assignment_record(
        G, member("m1", 11, 10, mk((foo, (0, 1))), topics=("foo",))))
    assert group.state is ConsumerGroupState.STABLE
    assert str(group.state) == "Stable"


def test_states_through_a_rebalance(h):
    h.create_topic("foo", 4)
    h.join("a", group_id=G)
    assert h.group(G).state is ConsumerGroupState.STABLE
    h.join("b", group_id=G)
    assert h.group(G).state is ConsumerGroupState.RECONCILING
    h.ack("a", G)  # revoking
    h.ack("a", G)  # revoked: moves to epoch 2
    h.ack("b", G)  # gets the released partitions
    assert h.group(G).state is ConsumerGroupState.STABLE
    h.heartbeat(G, "a", -1)
    h.heartbeat(G, "b", -1)
    assert h.group(G).state is ConsumerGroupState.EMPTY


def test_partition_assignor_exception_on_regular_heartbeat(tmp_path):
    class Failing:
        name = "range"

        def assign(self, group_spec, topic_describer) -> GroupAssignment:
            raise PartitionAssignorException("Assignment failed.")

    h = Harness(tmp_path, assignors={"uniform": UniformAssignor(), "range": Failing()})
    h.create_topic("foo", 2)
    r = h.heartbeat(G, "m", 0, server_assignor="range", subscribed_topic_names=["foo"])
    assert r.error is E.unknown_server_error
    assert r.error_message == "Failed to compute a new target assignment for epoch 1: Assignment failed."
    assert G not in h.manager.groups and not h.batches, "nothing written"


def test_preferred_server_assignor_is_the_one_most_members_name(h):
    foo = h.create_topic("foo", 4)
    h.join("a", group_id=G, server_assignor="range")
    assert h.group(G).preferred_server_assignor == "range"
    described = h.manager.consumer_group_describe([G])[0]
    assert described.assignor_name == "range"
    h.join("b", group_id=G, server_assignor="uniform")
    h.join("c", group_id=G, server_assignor="uniform")
    assert h.group(G).preferred_server_assignor == "uniform"
    assert sum(len(p) for m in h.group(G).target_assignment.values() for p in m.values()) == 4
    assert foo in h.group(G).target_assignment["a"]


def test_range_by_default_when_configured_first(tmp_path):
    h = Harness(tmp_path, ConsumerGroupConfig(assignors=("range", "uniform")))
    foo = h.create_topic("foo", 3)
    h.join("a", group_id=G)
    h.join("b", group_id=G)
    targets = h.group(G).target_assignment
    assert targets == {"a": mk((foo, (0, 1))), "b": mk((foo, (2,)))}
    assert h.manager.consumer_group_describe([G])[0].assignor_name == "range"
    assert isinstance(h.manager.assignors["range"], RangeAssignor)


# --------------------------------------------------------------------- timers (1.8)
def test_session_timeout_lifecycle(h):
    h.create_topic("foo", 2)
    h.join("m", group_id=G)
    assert h.manager.timeouts(G, "m") == {"session": h.clock.milliseconds() + SESSION}
    h.advance(SESSION - 1000)
    h.heartbeat(G, "m", 1)
    assert h.manager.timeouts(G, "m") == {"session": h.clock.milliseconds() + SESSION}
    h.advance(SESSION - 1000)
    assert "m" in h.group(G).members, "each heartbeat re-arms it"


def test_session_timeout_expiration(h):
    h.create_topic("foo", 6)
    r = h.heartbeat(G, "m", 0, rebalance_timeout_ms=90_000, subscribed_topic_names=["foo"])
    assert r.member_epoch == 1
    h.advance(SESSION + 100)
    assert h.last_batch == [
        new_consumer_group_current_assignment_tombstone_record(G, "m"),
        new_consumer_group_target_assignment_tombstone_record(G, "m"),
        new_consumer_group_member_subscription_tombstone_record(G, "m"),
        new_consumer_group_epoch_record(G, 2, 0),
    ]
    assert h.manager.timeouts(G, "m") == {} and h.group(G).state is ConsumerGroupState.EMPTY


def test_session_timeout_expiration_static_member(h):
    """A static member parked at -2 is removed when its session timeout passes."""
    h.create_topic("foo", 2)
    h.join("m", group_id=G, instance_id="i")
    h.advance(10_000)
    assert h.heartbeat(G, "m", -2, instance_id="i").member_epoch == -2
    h.advance(SESSION - 10_000 - 100)
    assert "m" in h.group(G).members, "the session started at its last heartbeat"
    h.advance(200)
    assert not h.group(G).members and h.group(G).group_epoch == 2


def test_rebalance_timeout_lifecycle(h):
    h.create_topic("foo", 3)
    h.join("a", group_id=G, rebalance_timeout_ms=10_000)
    h.join("b", group_id=G, rebalance_timeout_ms=10_000)
    r = h.heartbeat(G, "a", 1)
    assert h.member("a", G).state is UNREVOKED and r.member_epoch == 1
    assert h.manager.timeouts(G, "a")["rebalance"] == h.clock.milliseconds() + 10_000
    h.advance(5_000)
    h.heartbeat(G, "a", 1, topic_partitions=owned(h.member("a", G).assigned_partitions))
    assert h.member("a", G).member_epoch == 2
    assert "rebalance" not in h.manager.timeouts(G, "a"), "cancelled leaving UNREVOKED"
    h.advance(10_000)
    assert "a" in h.group(G).members


def test_rebalance_timeout_expiration(h):
    foo = h.create_topic("foo", 3)
    r = h.heartbeat(G, "m1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=["foo"])
    assert (r.member_epoch, r.assignment) == (1, mk((foo, (0, 1, 2))))
    h.advance(INTERVAL)
    r = h.heartbeat(G, "m2", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=["foo"])
    assert (r.member_epoch, r.assignment) == (2, {})
    h.advance(INTERVAL)
    r = h.heartbeat(G, "m1", 1)
    assert r.member_epoch == 1 and h.member("m1", G).state is UNREVOKED
    h.advance(10_000 + 100)
    assert h.last_batch == [
        new_consumer_group_current_assignment_tombstone_record(G, "m1"),
        new_consumer_group_target_assignment_tombstone_record(G, "m1"),
        new_consumer_group_member_subscription_tombstone_record(G, "m1"),
        new_consumer_group_epoch_record(G, 3, group_hash(h, "foo")),
    ]
    assert h.manager.timeouts(G, "m1") == {}


def test_rebalance_timeout_does_not_fence_a_member_that_moved_on(h):
    h.create_topic("foo", 3)
    h.join("a", group_id=G, rebalance_timeout_ms=10_000)
    h.join("b", group_id=G)
    h.heartbeat(G, "a", 1)  # revoking at epoch 1
    task = h.manager._timers[("rebalance", G, "a")]
    h.heartbeat(G, "a", 1, topic_partitions=owned(h.member("a", G).assigned_partitions))
    assert h.member("a", G).member_epoch == 2
    task.run()  # a late expiry of the epoch-1 timeout
    assert "a" in h.group(G).members


# --------------------------------------------------------------------- configs (item 28)
def test_consumer_group_dynamic_configs(tmp_path):
    configs: dict[str, dict[str, int]] = {}
    h = Harness(tmp_path, group_configs=lambda g: configs.get(g, {}))
    h.create_topic("foo", 1)
    r = h.join("m", group_id=G)
    assert r.heartbeat_interval_ms == INTERVAL
    assert h.manager.timeouts(G, "m")["session"] == h.clock.milliseconds() + SESSION
    configs[G] = {"consumer.heartbeat.interval.ms": 10_000, "consumer.session.timeout.ms": 50_000}
    r = h.heartbeat(G, "m", 1)
    assert r.heartbeat_interval_ms == 10_000
    assert h.manager.timeouts(G, "m")["session"] == h.clock.milliseconds() + 50_000


# --------------------------------------------------------------------- topic changes
def test_new_partitions_bump_the_group_epoch(h):
    foo = h.create_topic("foo", 2)
    h.join("m", group_id=G)
    h.logs.add_partitions("foo", 4)
    r = h.heartbeat(G, "m", 1)
    assert (r.member_epoch, r.assignment) == (2, mk((foo, range(4))))
    assert h.group(G).metadata_hash == group_hash(h, "foo")


def test_a_deleted_topic_leaves_the_assignment(h):
    foo, bar = h.create_topic("foo", 2), h.create_topic("bar", 2)
    h.join("m", ("foo", "bar"), group_id=G)
    h.delete_topic("bar")
    r = h.heartbeat(G, "m", 1, topic_partitions=[(foo, [0, 1]), (bar, [0, 1])])
    assert r.member_epoch == 1 and h.member("m", G).state is UNREVOKED
    assert r.assignment == mk((foo, (0, 1)))
    r = h.heartbeat(G, "m", 1, topic_partitions=[(foo, [0, 1])])
    assert (r.member_epoch, r.assignment) == (2, None), "the assignment did not change"
    assert h.member("m", G).state is STABLE


def test_a_topic_created_later_is_assigned(h):
    h.join("m", ("foo",), group_id=G)
    foo = h.create_topic("foo", 3)
    r = h.heartbeat(G, "m", 1)
    assert (r.member_epoch, r.assignment) == (2, mk((foo, range(3))))


# --------------------------------------------------------------------- classic groups (1.13)
def test_consumer_group_heartbeat_with_empty_classic_group(tmp_path):
    """A classic group without members (here one an offset commit made) is replaced; its
    offsets stay."""
    h = Harness(tmp_path)
    h.create_topic("foo", 1)
    h.classic.handle_commit_offsets(G, "", None, -1, {("foo", 0): OffsetAndMetadata(5)})
    h.loop.run_pending()
    assert h.classic.classic_group_is_empty(G) is True
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.member_epoch) == (E.none, 1)
    assert h.last_batch[0] == new_classic_group_tombstone_record(G)
    assert h.classic.classic_group_is_empty(G) is None  # a consumer group's id now
    assert h.classic.handle_fetch_offsets(G, [("foo", 0)], "m", 1)[1][("foo", 0)].offset == 5


def test_consumer_group_heartbeat_with_non_empty_classic_group(tmp_path):
    """A classic group whose first rebalance has not selected a protocol cannot be
    upgraded (its members' subscriptions cannot be read): GROUP_ID_NOT_FOUND, as Kafka
    answers a refused upgrade. test_consumer_group_migration.py has the upgrades."""
    h = Harness(tmp_path)
    h.classic.handle_join_group(G, "", None, False, True, "client", "/127.0.0.1", 30_000, 10_000, "consumer",
                                [("range", b"")], lambda _result: None)  # fmt: skip
    assert h.classic.classic_group_is_empty(G) is False
    r = h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (
        E.group_id_not_found,
        (f"Cannot upgrade the classic group {G} to consumer group because the embedded consumer "
        "protocol is malformed."),
    )
    assert h.heartbeat(G, "m", 1).error is E.group_id_not_found
    assert h.heartbeat(G, "m", -1).error is E.group_id_not_found
    described = h.manager.consumer_group_describe([G])[0]
    assert (described.error_code, described.error_message) == (
        E.group_id_not_found, f"Group {G} is not a consumer group.",
    )  # fmt: skip


# --------------------------------------------------------------------- ConsumerGroupDescribe
def test_consumer_group_describe_with_errors(h):
    (d,) = h.manager.consumer_group_describe(["missing"])
    assert (d.group_id, d.error_code, d.error_message) == (
        "missing", E.group_id_not_found, "Group missing not found.",
    )  # fmt: skip


def test_consumer_group_describe(h):
    foo = h.create_topic("foo", 2)
    h.join("a", group_id=G, instance_id="ia", rack_id="r1", client_id="c", client_host="/h")
    h.join("b", group_id=G, subscribed_topic_regex="f.*")
    (d,) = h.manager.consumer_group_describe([G])
    # b's regex was resolved after its join: the group must assign again
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        E.none, "Assigning", 3, 2, "uniform",
    )  # fmt: skip
    a, b = d.members
    assert a == Member(
        member_id="a", instance_id="ia", rack_id="r1", member_epoch=1, client_id="c",
        client_host="/h", subscribed_topic_names=["foo"], subscribed_topic_regex=None,
        assignment=Assignment(topic_partitions=[
            TopicPartitions(topic_id=foo, topic_name="foo", partitions=[0, 1])
        ]),
        target_assignment=Assignment(topic_partitions=[
            TopicPartitions(topic_id=foo, topic_name="foo", partitions=[0])
        ]),
        member_type=1,
    )  # fmt: skip
    assert (b.subscribed_topic_regex, b.assignment, b.member_epoch) == ("f.*", Assignment(), 2)


# --------------------------------------------------------------------- writes
def test_a_heartbeat_is_answered_once_its_records_are_durable(h):
    h.create_topic("foo", 1)
    answers = h.send(ConsumerGroupHeartbeat(G, "m", 0, rebalance_timeout_ms=5000,
                                            subscribed_topic_names=["foo"], topic_partitions=[]))
    assert answers == [], "waits for the fsync"
    # a heartbeat that writes nothing waits for the write before it
    quiet = h.send(ConsumerGroupHeartbeat(G, "m", 1))
    assert quiet == []
    h.loop.run_pending()
    assert [a.member_epoch for a in answers + quiet] == [1, 1]


def test_append_errors_answer_as_kafka(tmp_path):
    from tidegate.coordinator.group.group_metadata_manager import AppendError

    h = Harness(tmp_path)
    h.create_topic("foo", 1)
    failures = iter([AppendError("x", E.not_enough_replicas), OSError("disk"),
                     AppendError("y", E.request_timed_out)])
    h.manager._append = lambda records: (_ for _ in ()).throw(next(failures))
    assert h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"]).error is E.coordinator_not_available
    assert h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"]).error is E.not_coordinator
    assert h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"]).error is E.coordinator_not_available
    assert G not in h.manager.groups, "a failed write changes nothing"


def test_inactive_coordinator_answers_coordinator_not_available(h):
    h.manager.shutdown()
    assert h.heartbeat(G, "m", 0, subscribed_topic_names=["foo"]).error is E.coordinator_not_available
