"""Regular expression subscriptions (reference 1.11, section 4 items 19-20): RE2 with a
whole-name match, INVALID_REGULAR_EXPRESSION, resolution after the heartbeat that needs
it (its own write, which bumps the group epoch), the ACL filter, refreshes on topic
creation and on the refresh interval, and regexes dropped with their last member."""

from __future__ import annotations

import pytest

from tests.unit.consumer_groups import SESSION, Harness, mk, seed_group
from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroupState
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
    ConsumerGroupConfig,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import ConsumerGroupMember
from tidegate.coordinator.group.modern.consumer.records import (
    RecordType,
    new_consumer_group_current_assignment_record,
    new_consumer_group_epoch_record,
    new_consumer_group_member_subscription_record,
    new_consumer_group_regular_expression_record,
    new_consumer_group_regular_expression_tombstone,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.consumer.topic_regex import (
    InvalidRegularExpressionError,
    matches,
    refresh_regular_expressions,
    throw_if_regular_expression_is_invalid,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.topics import compute_metadata_hash
from tidegate.errors import ErrorCode as E

G = "fooup"


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def member(member_id, epoch, assigned=None, *, names=(), regex="", rebalance=5000):
    return ConsumerGroupMember(
        member_id,
        member_epoch=epoch,
        previous_member_epoch=epoch,
        rebalance_timeout_ms=rebalance,
        subscribed_topic_names=frozenset(names),
        subscribed_topic_regex=regex,
        server_assignor_name="range",
        assigned_partitions=assigned or {},
    )


def resolve(h, group_id, regex, topics, version=0, timestamp_ms=0):
    h.manager.replay(new_consumer_group_regular_expression_record(
        group_id, regex, ResolvedRegularExpression(frozenset(topics), version, timestamp_ms)
    ))  # fmt: skip


def wall(h) -> int:
    return h.clock.wall_milliseconds()


# ------------------------------------------------------------------------ the RE2 semantics
@pytest.mark.parametrize(
    ("regex", "topic", "expected"),
    [
        ("^topic", "topic-1", False),  # whole-name: a prefix is not a match
        ("^topic.*", "topic-1", True),
        ("topic", "topic", True),
        ("foo*", "foo", True),
        ("foo*", "fooo", True),
        ("foo*", "foo-bar", False),
        ("(^a.*)|(^b.*)", "bx", True),  # librdkafka's union of "^" subscriptions
        ("[a-c]-\\d+", "b-12", True),
    ],
)
def test_whole_name_match(regex, topic, expected):
    assert matches(regex, topic) is expected


@pytest.mark.parametrize("regex", ["[", "(?=ahead)", "(?<=behind)x", "(a)\\1", "a{1001}"])
def test_patterns_re2_refuses(regex):
    with pytest.raises(InvalidRegularExpressionError) as info:
        throw_if_regular_expression_is_invalid(regex)
    assert info.value.code == 128
    assert info.value.message.startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: ")


def test_resolution_is_filtered_and_stamped():
    resolved = refresh_regular_expressions(
        "g", ["foo.*", "bar"], ["foo", "foo-1", "bar", "baz"],
        version=7, timestamp_ms=123, topic_filter=lambda names: {n for n in names if n != "foo-1"},
    )  # fmt: skip
    assert resolved == {
        "foo.*": ResolvedRegularExpression(frozenset({"foo"}), 7, 123),
        "bar": ResolvedRegularExpression(frozenset({"bar"}), 7, 123),
    }


# ------------------------------------------------------------------------ the coordinator
def test_consumer_heartbeat_regex_validation(h):
    r = h.heartbeat(G, "m", 0, subscribed_topic_regex="[")
    assert r.error is E.invalid_regular_expression
    assert r.error_message == "SubscribedTopicRegex `[` is not a valid regular expression: missing ]: [."
    r = h.heartbeat(G, "m", 0, subscribed_topic_regex="foo.*")
    assert (r.error, r.member_epoch) == (E.none, 1)
    r = h.heartbeat(G, "m", 1, rebalance_timeout_ms=5000, subscribed_topic_regex="[",
                    topic_partitions=[])
    assert r.error is E.invalid_regular_expression
    r = h.heartbeat(G, "m", 1, rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                    topic_partitions=[])
    assert (r.error, r.member_epoch) == (E.none, 2)


def test_consumer_group_member_joins_with_new_regex(h):
    foo = h.create_topic("foo", 6)
    seed_group(h, G, 10, [member("m1", 10, mk((foo, range(6))), names=("foo",))])
    r = h.heartbeat(G, "m2", 0, subscribed_topic_regex="foo*", server_assignor="range")
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 10, {}), "no bump before resolution"
    m2 = member("m2", 10, regex="foo*").replace(previous_member_epoch=0)
    heartbeat, resolution = h.batches[-2:]
    assert heartbeat == [
        new_consumer_group_member_subscription_record(G, m2),
        new_consumer_group_current_assignment_record(G, m2),
    ]
    assert resolution == [
        new_consumer_group_regular_expression_record(
            G, "foo*", ResolvedRegularExpression(frozenset({"foo"}), h.topics.version, wall(h))
        ),
        new_consumer_group_epoch_record(G, 11, compute_metadata_hash(["foo"], h.topics)),
    ]
    # the next heartbeats share foo out
    r = h.heartbeat(G, "m2", 10)
    assert (r.member_epoch, r.assignment) == (11, None)
    h.ack("m1", G)
    h.ack("m1", G)
    r = h.ack("m2", G)
    assert r.member_epoch == 11 and len(r.assignment[foo]) == 3


def test_consumer_group_member_picks_up_existing_resolved_regular_expression(h):
    foo = h.create_topic("foo", 2)
    seed_group(h, G, 10, [member("m1", 10, mk((foo, (0, 1))), regex="foo*")])
    resolve(h, G, "foo*", {"foo"}, h.topics.version, wall(h))
    r = h.heartbeat(G, "m2", 0, rebalance_timeout_ms=10_000, subscribed_topic_regex="foo*")
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 11, {}), "resolved: bumps at once"
    assert h.group(G).target_assignment == {"m1": mk((foo, (0,))), "m2": mk((foo, (1,)))}


def test_a_member_joining_with_an_unresolved_regex_when_a_target_is_due(h):
    """m2's join does not bump (its regex is not resolved yet) but computes the target an
    earlier bump left due, with the group's subscription type counting m2: no longer
    HOMOGENEOUS, so m2 gets none of m1's topics (it would never take them, its regex
    matching nothing yet, and they would stay unassigned)."""
    foo, bar = h.create_topic("foo", 3), h.create_topic("bar", 2)
    h.heartbeat(G, "m1", 0, subscribed_topic_regex="foo|bar")
    assert (h.group(G).group_epoch, h.group(G).assignment_epoch) == (2, 1), "the resolution's bump"
    r = h.heartbeat(G, "m2", 0, subscribed_topic_regex="baz.*")
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 2, {})
    everything = mk((foo, range(3)), (bar, range(2)))
    assert h.group(G).target_assignment == {"m1": everything, "m2": {}}
    r = h.beat("m1", G)
    assert (r.member_epoch, r.assignment) == (2, everything)
    assert h.group(G).state is ConsumerGroupState.STABLE


def test_a_first_resolution_to_no_topics_bumps(h):
    """m1 leaves its regex for one not resolved yet (no bump) and gives up its share of
    foo; the new regex matches nothing, but m1's target still holds that share: the
    resolution bumps, so the next target gives it to m2."""
    foo = h.create_topic("foo", 2)
    seed_group(h, G, 10, [
        member("m1", 10, mk((foo, (0,))), regex="fo+"),
        member("m2", 10, mk((foo, (1,))), names=("foo",)),
    ])  # fmt: skip
    resolve(h, G, "fo+", {"foo"}, h.topics.version, timestamp_ms=0)
    r = h.heartbeat(G, "m1", 10, subscribed_topic_regex="bar.*", topic_partitions=[(foo, [0])])
    assert (r.member_epoch, r.assignment) == (10, {})
    assert h.group(G).resolved_regular_expressions["bar.*"].topics == frozenset()
    assert h.group(G).group_epoch == 11, "the first resolution bumps"
    r = h.heartbeat(G, "m1", 10, topic_partitions=[])
    assert (r.member_epoch, h.member("m1", G).state) == (11, MemberState.STABLE)
    r = h.beat("m2", G)
    assert (r.member_epoch, r.assignment) == (11, mk((foo, (0, 1))))
    assert h.group(G).state is ConsumerGroupState.STABLE


def test_regex_and_names_are_a_union(h):
    foo, bar = h.create_topic("foo", 1), h.create_topic("bar", 1)
    h.heartbeat(G, "m", 0, subscribed_topic_names=["bar"], subscribed_topic_regex="fo.")
    r = h.beat("m", G)
    assert r.assignment == mk((foo, (0,)), (bar, (0,)))


def test_consumer_group_member_joins_with_regex_with_topic_authorization_failure(h):
    foo = h.create_topic("foo", 1)
    h.create_topic("bar", 1)
    r = h.heartbeat(G, "m", 0, subscribed_topic_regex="foo|bar",
                    topic_filter=lambda names: {n for n in names if n != "bar"})
    assert r.error is E.none
    assert h.group(G).resolved_regular_expressions["foo|bar"].topics == {"foo"}
    r = h.beat("m", G)
    assert (r.member_epoch, r.assignment) == (2, mk((foo, (0,))))


def test_resolved_regular_expressions_removed_when_members_leave_or_fenced(h):
    h.create_topic("foo", 1)
    h.create_topic("bar", 1)
    h.heartbeat(G, "m1", 0, subscribed_topic_regex="foo*")
    h.heartbeat(G, "m2", 0, subscribed_topic_regex="bar*")
    h.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1000)
    h.heartbeat(G, "m2", h.member("m2", G).member_epoch)  # resolves bar* with foo*
    assert set(h.group(G).resolved_regular_expressions) == {"foo*", "bar*"}
    h.heartbeat(G, "m1", -1)
    assert new_consumer_group_regular_expression_tombstone(G, "foo*") in h.last_batch
    assert set(h.group(G).resolved_regular_expressions) == {"bar*"}
    h.advance(SESSION + 1000)
    assert h.last_batch[3] == new_consumer_group_regular_expression_tombstone(G, "bar*")
    assert not h.group(G).resolved_regular_expressions and not h.group(G).members


def test_consumer_group_member_clears_regex(h):
    foo = h.create_topic("foo", 2)
    h.heartbeat(G, "m", 0, subscribed_topic_regex="foo")
    h.beat("m", G)
    assert h.member("m", G).assigned_partitions == mk((foo, (0, 1)))
    epoch = h.group(G).group_epoch
    r = h.beat("m", G, subscribed_topic_regex="")
    assert h.group(G).group_epoch == epoch + 1
    assert new_consumer_group_regular_expression_tombstone(G, "foo") in h.last_batch
    assert h.member("m", G).state is MemberState.UNREVOKED_PARTITIONS
    assert r.assignment == {}


def test_consumer_group_member_join_refreshes_expired_regexes(h):
    foo = h.create_topic("foo", 1)
    h.heartbeat(G, "m", 0, subscribed_topic_regex="foo.*")
    assert h.group(G).resolved_regular_expressions["foo.*"].topics == {"foo"}
    fooo = h.create_topic("fooo", 1)
    batches = len(h.batches)
    h.beat("m", G)
    assert len(h.batches) == batches + 1, "resolved less than 10 s ago: not yet"
    h.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1000)
    r = h.beat("m", G)
    resolved = h.group(G).resolved_regular_expressions["foo.*"]
    assert resolved.topics == {"foo", "fooo"} and resolved.version == h.topics.version
    assert h.last_batch[-1].type is RecordType.CONSUMER_GROUP_METADATA
    r = h.beat("m", G)
    assert r.assignment == mk((foo, (0,)), (fooo, (0,)))


def test_regexes_refresh_on_the_refresh_interval(tmp_path):
    h = Harness(tmp_path, ConsumerGroupConfig(regex_refresh_interval_ms=60_000))
    h.create_topic("foo", 1)
    h.heartbeat(G, "m", 0, subscribed_topic_regex="foo")
    first = h.group(G).resolved_regular_expressions["foo"]
    h.advance(30_000)
    h.beat("m", G)
    assert h.group(G).resolved_regular_expressions["foo"] == first
    h.advance(31_000)
    h.beat("m", G)
    again = h.group(G).resolved_regular_expressions["foo"]
    assert again.timestamp_ms > first.timestamp_ms and again.topics == first.topics
    assert h.last_batch == [new_consumer_group_regular_expression_record(G, "foo", again)], (
        "the same topics: no bump"
    )
    assert h.group(G).group_epoch == 2  # the first resolution's bump only


def test_a_deleted_topic_leaves_a_regex_subscription(h):
    foo, bar = h.create_topic("foo1", 1), h.create_topic("foo2", 1)
    h.heartbeat(G, "m", 0, subscribed_topic_regex="foo.")
    h.beat("m", G)
    assert h.member("m", G).assigned_partitions == mk((foo, (0,)), (bar, (0,)))
    h.delete_topic("foo2")
    h.beat("m", G, topic_partitions=[(foo, [0]), (bar, [0])])  # revoking foo2-0
    r = h.beat("m", G, topic_partitions=[(foo, [0])])
    assert (r.member_epoch, h.member("m", G).assigned_partitions) == (3, mk((foo, (0,))))
