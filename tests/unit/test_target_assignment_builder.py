"""The target assignment builder (Kafka's TargetAssignmentBuilderTest) and the modern
groups' small pieces: member values, member state, subscription type, metadata hash."""

from __future__ import annotations

import uuid

import pytest

from tidegate.coordinator.group.assignor import RangeAssignor, SimpleAssignor, UniformAssignor
from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    HETEROGENEOUS,
    HOMOGENEOUS,
    GroupAssignment,
    GroupSpec,
    MemberSubscriptionAndAssignment,
    PartitionAssignorException,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.subscription import (
    subscription_counts,
    subscription_type,
)
from tidegate.coordinator.group.modern.target_assignment_builder import (
    TargetAssignmentBuilder,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from tidegate.coordinator.group.modern.topics import (
    TopicMetadata,
    TopicsImage,
    compute_group_hash,
    compute_metadata_hash,
    compute_topic_hash,
)
from tidegate.server.metadata import TopicStore

FOO = uuid.UUID("00000000-0000-0000-0000-00000000f001")
BAR = uuid.UUID("00000000-0000-0000-0000-00000000ba12")
IMAGE = TopicsImage.of((FOO, "foo", 6), (BAR, "bar", 6))


def mk(foo=(), bar=()) -> dict[uuid.UUID, frozenset[int]]:
    out = {}
    if foo:
        out[FOO] = frozenset(foo)
    if bar:
        out[BAR] = frozenset(bar)
    return out


def consumer(member_id, names=("foo", "bar", "zar"), instance_id=None, rack_id=None, regex=""):
    return ConsumerGroupMember(
        member_id,
        subscribed_topic_names=frozenset(names),
        instance_id=instance_id,
        rack_id=rack_id,
        subscribed_topic_regex=regex,
    )


class ScriptedAssignor:
    """Answers a prepared assignment and keeps the spec it was given."""

    name = "scripted"

    def __init__(self, answer: dict[str, dict]) -> None:
        self.answer = answer
        self.specs: list[GroupSpec] = []

    def assign(self, group_spec: GroupSpec, topic_describer: SubscribedTopicDescriber):
        self.specs.append(group_spec)
        assert topic_describer.num_partitions(FOO) == 6
        assert topic_describer.num_partitions(uuid.uuid4()) == -1
        return GroupAssignment(self.answer)


def build(assignor, members, targets, *, updated=(), removed=(), static=None, **kw):
    builder = TargetAssignmentBuilder(
        "my-group",
        20,
        assignor,
        members=members,
        target_assignment=targets,
        subscription_type=kw.pop("subscription_type", HOMOGENEOUS),
        metadata_image=kw.pop("image", IMAGE),
        static_members=static,
        **kw,
    )
    for member in updated:
        builder.add_or_update_member(member.member_id, member)
    for member_id in removed:
        builder.remove_member(member_id)
    return builder.build()


EPOCH = TargetAssignmentEpochRecord("my-group", 20)


def test_empty_group_writes_only_the_epoch():
    result = build(ScriptedAssignor({}), {}, {})
    assert result.records == [EPOCH]
    assert result.target_assignment == {}


def test_unchanged_assignment_writes_only_the_epoch():
    members = {"member-1": consumer("member-1"), "member-2": consumer("member-2")}
    targets = {"member-1": mk({1, 2, 3}, {1, 2, 3}), "member-2": mk({4, 5, 6}, {4, 5, 6})}
    result = build(ScriptedAssignor(dict(targets)), members, targets)
    assert result.records == [EPOCH]
    assert result.target_assignment == targets


def test_swapped_assignment_writes_both_members():
    members = {"member-1": consumer("member-1"), "member-2": consumer("member-2")}
    targets = {"member-1": mk({1, 2, 3}, {1, 2, 3}), "member-2": mk({4, 5, 6}, {4, 5, 6})}
    swapped = {"member-1": targets["member-2"], "member-2": targets["member-1"]}
    result = build(ScriptedAssignor(swapped), members, targets)
    assert result.records == [
        TargetAssignmentMemberRecord("my-group", "member-1", mk({4, 5, 6}, {4, 5, 6})),
        TargetAssignmentMemberRecord("my-group", "member-2", mk({1, 2, 3}, {1, 2, 3})),
        EPOCH,
    ]


def test_new_member_and_the_spec_the_assignor_sees():
    members = {"member-1": consumer("member-1"), "member-2": consumer("member-2")}
    targets = {"member-1": mk({1, 2, 3}, {1, 2, 3}), "member-2": mk({4, 5, 6}, {4, 5, 6})}
    answer = {
        "member-1": mk({1, 2}, {1, 2}),
        "member-2": mk({3, 4}, {3, 4}),
        "member-3": mk({5, 6}, {5, 6}),
    }
    assignor = ScriptedAssignor(answer)
    newcomer = consumer("member-3", instance_id="i-3", rack_id="rack-0")
    result = build(assignor, members, targets, updated=[newcomer])
    assert [type(r) for r in result.records] == [TargetAssignmentMemberRecord] * 3 + [
        TargetAssignmentEpochRecord
    ]
    assert result.target_assignment == answer
    # "zar" does not exist: names resolve to the ids of existing topics only.
    assert assignor.specs == [
        GroupSpec(
            {
                "member-1": MemberSubscriptionAndAssignment(
                    frozenset({FOO, BAR}), targets["member-1"]
                ),
                "member-2": MemberSubscriptionAndAssignment(
                    frozenset({FOO, BAR}), targets["member-2"]
                ),
                "member-3": MemberSubscriptionAndAssignment(
                    frozenset({FOO, BAR}), EMPTY_ASSIGNMENT, instance_id="i-3", rack_id="rack-0"
                ),
            },
            HOMOGENEOUS,
        )
    ]


def test_removed_member_gets_no_record_and_leaves_the_spec():
    members = {m: consumer(m) for m in ("member-1", "member-2", "member-3")}
    targets = {
        "member-1": mk({1, 2}, {1, 2}),
        "member-2": mk({3, 4}, {3, 4}),
        "member-3": mk({5, 6}, {5, 6}),
    }
    result = build(UniformAssignor(), members, targets, removed=["member-3"])
    assert set(result.target_assignment) == {"member-1", "member-2"}
    assert {r.member_id for r in result.records[:-1]} == {"member-1", "member-2"}
    for m in ("member-1", "member-2"):
        assert all(targets[m][t] <= result.target_assignment[m][t] for t in targets[m])
    assert result.records[-1] == EPOCH


def test_static_member_rejoining_under_a_new_id_takes_its_old_target():
    members = {
        "member-1": consumer("member-1", instance_id="instance-1"),
        "member-2": consumer("member-2", instance_id="instance-2"),
    }
    targets = {"member-1": mk({0, 1, 2}, {0, 1, 2}), "member-2": mk({3, 4, 5}, {3, 4, 5})}
    static = {"instance-1": "member-1", "instance-2": "member-2"}
    replacement = consumer("member-3", instance_id="instance-2")
    result = build(
        UniformAssignor(),
        members,
        targets,
        updated=[replacement],
        removed=["member-2"],
        static=static,
    )
    assert result.target_assignment == {
        "member-1": targets["member-1"],
        "member-3": targets["member-2"],
    }
    assert result.records == [
        TargetAssignmentMemberRecord("my-group", "member-3", targets["member-2"]),
        EPOCH,
    ]


def test_regex_subscriptions_resolve_through_the_resolved_regular_expressions():
    members = {"a": consumer("a", names=(), regex="f.*"), "b": consumer("b", names=(), regex="f.*")}
    resolved = {"f.*": ResolvedRegularExpression(frozenset({"foo"}))}
    result = build(UniformAssignor(), members, {}, resolved_regular_expressions=resolved)
    assert sorted(len(a[FOO]) for a in result.target_assignment.values()) == [3, 3]
    # Unresolved, a regex matches nothing yet.
    unresolved = build(UniformAssignor(), members, {})
    assert unresolved.target_assignment == {"a": {}, "b": {}}


def test_share_group_assigns_only_initialized_partitions():
    members = {m: consumer(m, names=("foo",)) for m in "ab"}
    result = build(SimpleAssignor(), members, {}, assignable_partitions={FOO: frozenset({0, 1, 2})})
    assert sorted(p for a in result.target_assignment.values() for p in a[FOO]) == [0, 1, 2]


def test_an_assignor_failure_propagates():
    members = {"a": consumer("a")}

    class Failing:
        name = "failing"

        def assign(self, group_spec, topic_describer):
            raise PartitionAssignorException("boom")

    with pytest.raises(PartitionAssignorException):
        build(Failing(), members, {})


def test_the_broker_topic_store_is_a_metadata_image(tmp_path):
    store = TopicStore(tmp_path)
    foo = store.create("foo", 4, {})
    members = {m: consumer(m, names=("foo",)) for m in "ab"}
    result = build(RangeAssignor(), members, {}, image=store)
    assert result.target_assignment == {
        "a": {foo.topic_id: frozenset({0, 1})},
        "b": {foo.topic_id: frozenset({2, 3})},
    }


# ----------------------------------------------------------------- members and states
def test_member_epoch_updates_keep_the_previous_epoch():
    m = ConsumerGroupMember("m", member_epoch=5, previous_member_epoch=4)
    n = m.update_member_epoch(6, state=MemberState.UNRELEASED_PARTITIONS)
    assert (n.member_epoch, n.previous_member_epoch, n.state) == (
        6,
        5,
        MemberState.UNRELEASED_PARTITIONS,
    )
    assert m.member_epoch == 5  # immutable
    assert not n.is_reconciled_to(6) and n.replace(state=MemberState.STABLE).is_reconciled_to(6)
    assert not m.use_classic_protocol
    assert m.replace(classic_member_metadata=ClassicMemberMetadata(45000)).use_classic_protocol


def test_member_state_bytes():
    assert [int(s) for s in MemberState] == [0, 1, 2, 127]
    assert MemberState.from_value(1) is MemberState.UNREVOKED_PARTITIONS
    assert MemberState.from_value(42) is MemberState.UNKNOWN


# ----------------------------------------------------------------- subscription type
def _type(*members, resolved=None):
    regexes, topics = subscription_counts(members, resolved or {})
    return subscription_type(regexes, topics, len(members))


def test_subscription_type():
    assert _type() is HOMOGENEOUS
    assert _type(consumer("a", names=()), consumer("b", names=())) is HOMOGENEOUS
    assert (
        _type(consumer("a", names=("foo", "bar")), consumer("b", names=("bar", "foo")))
        is HOMOGENEOUS
    )
    assert (
        _type(consumer("a", names=("foo",)), consumer("b", names=("foo", "bar"))) is HETEROGENEOUS
    )
    # A name counts whether or not the topic exists.
    assert (
        _type(consumer("a", names=("foo", "nope")), consumer("b", names=("foo",))) is HETEROGENEOUS
    )

    resolved = {"f.*": ResolvedRegularExpression(frozenset({"foo", "fuu"}))}
    same_regex = (consumer("a", names=(), regex="f.*"), consumer("b", names=(), regex="f.*"))
    assert _type(*same_regex, resolved=resolved) is HOMOGENEOUS
    assert _type(*same_regex) is HOMOGENEOUS  # not resolved yet: no topics
    assert (
        _type(consumer("a", names=(), regex="f.*"), consumer("b", names=("foo",))) is HETEROGENEOUS
    )
    assert (
        _type(
            consumer("a", names=("bar",), regex="f.*"),
            consumer("b", names=(), regex="f.*"),
            resolved=resolved,
        )
        is HETEROGENEOUS
    )
    two = (consumer("a", names=(), regex="f.*"), consumer("b", names=(), regex="b.*"))
    assert _type(*two, resolved=resolved) is HETEROGENEOUS


# ----------------------------------------------------------------------- metadata hash
def test_metadata_hash():
    foo = TopicMetadata(FOO, "foo", 6)
    assert compute_topic_hash(foo) == compute_topic_hash(TopicMetadata(FOO, "foo", 6))
    assert -(2**63) <= compute_topic_hash(foo) < 2**63
    # Every field matters.
    for other in (
        TopicMetadata(BAR, "foo", 6),
        TopicMetadata(FOO, "fo", 6),
        TopicMetadata(FOO, "foo", 7),
    ):
        assert compute_topic_hash(other) != compute_topic_hash(foo)
    assert compute_group_hash({}) == 0
    assert compute_group_hash({"a": 1, "b": 2}) == compute_group_hash({"b": 2, "a": 1})
    assert compute_group_hash({"a": 1, "b": 2}) != compute_group_hash({"a": 2, "b": 1})

    before = compute_metadata_hash(["foo", "bar", "zar"], IMAGE)
    assert before == compute_metadata_hash(["bar", "foo"], IMAGE)  # zar does not exist
    grown = TopicsImage.of((FOO, "foo", 7), (BAR, "bar", 6))
    assert compute_metadata_hash(["foo", "bar"], grown) != before  # partitions added
    created = TopicsImage.of((FOO, "foo", 6), (BAR, "bar", 6), (uuid.uuid4(), "zar", 1))
    assert compute_metadata_hash(["foo", "bar", "zar"], created) != before
    assert compute_metadata_hash([], IMAGE) == 0
    cache: dict[str, int] = {}
    assert compute_metadata_hash(["foo", "bar"], IMAGE, cache) == before
    assert set(cache) == {"foo", "bar"}
