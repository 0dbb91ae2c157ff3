"""The consumer group (ConsumerGroup, Kafka's ConsumerGroupTest), its records in
``__consumer_offsets`` and their replay: a restarted coordinator resumes its groups where
they were, timers re-armed (reference 1.8, 1.14, 1.16; section 4 items 17 and 32)."""

from __future__ import annotations

import uuid

import pytest

from tests.unit.consumer_groups import SESSION, Harness, mk
from tidegate.coordinator.group.assignor.api import HETEROGENEOUS, HOMOGENEOUS
from tidegate.coordinator.group.group_metadata_manager import (
    decode_coordinator_record,
    encode_coordinator_record,
    parse_key,
)
from tidegate.coordinator.group.modern.consumer.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
    IllegalStateError,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.records import (
    new_consumer_group_current_assignment_record,
    new_consumer_group_current_assignment_tombstone_record,
    new_consumer_group_epoch_record,
    new_consumer_group_epoch_tombstone_record,
    new_consumer_group_member_subscription_record,
    new_consumer_group_member_subscription_tombstone_record,
    new_consumer_group_regular_expression_record,
    new_consumer_group_regular_expression_tombstone,
    new_consumer_group_target_assignment_epoch_record,
    new_consumer_group_target_assignment_epoch_tombstone_record,
    new_consumer_group_target_assignment_record,
    new_consumer_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.errors import BrokerResponseError
from tidegate.errors import ErrorCode as E
from tidegate.server.metadata import TopicStore

FOO = uuid.UUID("00000000-0000-0000-0000-00000000f001")
G = "grp"


def code_of(fn, *args) -> E:
    with pytest.raises(BrokerResponseError) as info:
        fn(*args)
    return E(info.value.code)


# ------------------------------------------------------------------------ offsets (item 32)
@pytest.mark.parametrize("version", [8, 9])
def test_validate_offset_commit(version):
    group = ConsumerGroup("group-foo")
    # the admin client (no member, epoch -1): only while the group is empty
    group.validate_offset_commit("", "", -1, False, version)
    assert code_of(group.validate_offset_commit, "member-id", None, 0, False, version) is E.unknown_member_id
    group.update_member(ConsumerGroupMember("new-protocol-member-id"))
    group.update_member(ConsumerGroupMember(
        "old-protocol-member-id", classic_member_metadata=ClassicMemberMetadata(45000)
    ))  # fmt: skip
    assert code_of(group.validate_offset_commit, "", "", -1, False, version) is E.unknown_member_id
    assert code_of(group.validate_offset_commit, "", None, -1, False, version) is E.unknown_member_id
    stale = code_of(group.validate_offset_commit, "new-protocol-member-id", "", 10, False, version)
    assert stale is (E.stale_member_epoch if version >= 9 else E.unsupported_version)
    assert code_of(
        group.validate_offset_commit, "old-protocol-member-id", "", 10, False, version
    ) is E.illegal_generation
    if version >= 9:
        group.validate_offset_commit("new-protocol-member-id", "", 0, False, version)
    else:
        assert code_of(
            group.validate_offset_commit, "new-protocol-member-id", "", 0, False, version
        ) is E.unsupported_version
    # TxnOffsetCommit without member, generation and instance: no member check
    group.validate_offset_commit("", None, -1, True, version)


def test_validate_offset_fetch():
    group = ConsumerGroup("group-foo")
    group.validate_offset_fetch(None, -1)
    assert code_of(group.validate_offset_fetch, "member-id", 0) is E.unknown_member_id
    group.update_member(ConsumerGroupMember("member-id"))
    assert code_of(group.validate_offset_fetch, "member-id", 10) is E.stale_member_epoch
    group.validate_offset_fetch("member-id", 0)


def test_validate_delete_group():
    group = ConsumerGroup("foo")
    assert group.state is ConsumerGroupState.EMPTY
    group.validate_delete_group()
    group.update_member(ConsumerGroupMember("member1", member_epoch=1, previous_member_epoch=0))
    assert group.state is ConsumerGroupState.RECONCILING
    assert code_of(group.validate_delete_group) is E.non_empty_group
    group.group_epoch = 1
    assert group.state is ConsumerGroupState.ASSIGNING
    assert code_of(group.validate_delete_group) is E.non_empty_group
    group.assignment_epoch = 1
    assert group.state is ConsumerGroupState.STABLE
    assert code_of(group.validate_delete_group) is E.non_empty_group


# ------------------------------------------------------------------------ derived state
def test_partition_epochs_follow_the_members():
    group = ConsumerGroup(G)
    group.update_member(ConsumerGroupMember(
        "a", member_epoch=5, assigned_partitions=mk((FOO, (0, 1))),
        partitions_pending_revocation=mk((FOO, (2,))),
    ))  # fmt: skip
    assert [group.current_partition_epoch(FOO, p) for p in range(4)] == [5, 5, 5, -1]
    # a revoked partition is released; the others move to the new epoch
    group.update_member(group.members["a"].update_member_epoch(6, partitions_pending_revocation={}))
    assert [group.current_partition_epoch(FOO, p) for p in range(4)] == [6, 6, -1, -1]
    with pytest.raises(IllegalStateError):  # one partition, two holders
        group.update_member(ConsumerGroupMember("b", member_epoch=6, assigned_partitions=mk((FOO, (1,)))))
    group.remove_member("a")
    assert group.current_partition_epoch(FOO, 0) == -1


def test_subscription_counts_and_type():
    group = ConsumerGroup(G)
    group.update_member(ConsumerGroupMember("a", subscribed_topic_names=frozenset({"foo"})))
    group.update_member(ConsumerGroupMember("b", subscribed_topic_names=frozenset({"foo"})))
    assert group.subscription_type is HOMOGENEOUS
    group.update_member(ConsumerGroupMember("c", subscribed_topic_regex="ba."))
    assert group.subscription_type is HETEROGENEOUS
    group.update_resolved_regular_expression("ba.", ResolvedRegularExpression(frozenset({"bar"})))
    assert group.subscribed_topic_names["bar"].by_regex_count == 1
    assert group.is_subscribed_to_topic("bar") and group.num_subscribed_members("ba.") == 1
    group.remove_member("c")
    group.remove_resolved_regular_expression("ba.")
    assert set(group.subscribed_topic_names) == {"foo"} and group.subscription_type is HOMOGENEOUS


def test_static_members_and_targets():
    group = ConsumerGroup(G)
    group.update_member(ConsumerGroupMember("a", instance_id="i"))
    group.update_target_assignment("a", mk((FOO, (0,))))
    assert group.static_member("i").member_id == "a"
    assert group.target_assignment_of("new-id", "i") == mk((FOO, (0,)))
    assert group.target_assignment_of("new-id", "unknown") == {}
    group.remove_member("a")
    assert not group.static_members


# ------------------------------------------------------------------------ the record format
def _records():
    member = ConsumerGroupMember(
        "m", instance_id="i", rack_id="r", client_id="c", client_host="/h",
        rebalance_timeout_ms=300_000, subscribed_topic_names=frozenset({"b", "a"}),
        subscribed_topic_regex="x.*", server_assignor_name="range", member_epoch=4,
        previous_member_epoch=3, state=MemberState.UNREVOKED_PARTITIONS,
        assigned_partitions=mk((FOO, (0, 2))), partitions_pending_revocation=mk((FOO, (1,))),
        classic_member_metadata=ClassicMemberMetadata(
            10_000, (ClassicProtocol("range", b"\x00\x01"), ClassicProtocol("roundrobin", b"")),
        ),
    )  # fmt: skip
    return [
        new_consumer_group_epoch_record(G, 4, -(2**63)),
        new_consumer_group_epoch_tombstone_record(G),
        new_consumer_group_member_subscription_record(G, member),
        new_consumer_group_member_subscription_tombstone_record(G, "m"),
        new_consumer_group_target_assignment_record(G, "m", mk((FOO, (0, 1, 2)))),
        new_consumer_group_target_assignment_tombstone_record(G, "m"),
        new_consumer_group_target_assignment_epoch_record(G, 4),
        new_consumer_group_target_assignment_epoch_tombstone_record(G),
        new_consumer_group_current_assignment_record(G, member),
        new_consumer_group_current_assignment_tombstone_record(G, "m"),
        new_consumer_group_regular_expression_record(
            G, "x.*", ResolvedRegularExpression(frozenset({"x1", "x2"}), 17, 1_700_000_000_000)
        ),
        new_consumer_group_regular_expression_tombstone(G, "x.*"),
    ]


@pytest.mark.parametrize("record", _records(), ids=lambda r: f"{r.type.name}-{r.value is None}")
def test_records_round_trip_through_the_json_format(record):
    key, value = encode_coordinator_record(record)
    assert (value is None) is (record.value is None)
    assert parse_key(key)[1] == G
    assert decode_coordinator_record(parse_key(key), value) == record


def test_other_keys_are_not_consumer_group_records():
    assert decode_coordinator_record(("o", G, "t", 0), b"{}") is None
    assert decode_coordinator_record(("g", G), None) is None


# ------------------------------------------------------------------------ replay and restarts
def test_topic_store_version_goes_up_and_survives_a_restart(tmp_path):
    store = TopicStore(tmp_path)
    assert store.version == 0
    store.create("a", 1, {})
    store.set_partitions("a", 2)
    store.delete("a")
    assert store.version == 3
    assert TopicStore(tmp_path).version == 3


def _mid_reconciliation(h):
    """Three members, the third just joined: the first two revoking, it waiting."""
    foo = h.create_topic("foo", 6)
    h.join("a", instance_id="ia")
    h.ack("a")
    h.join("b")
    h.ack("a")  # revoking
    h.ack("b")  # waits
    h.join("c", subscribed_topic_regex="fo.")
    return foo


def test_replay_after_restart_resumes_the_group_where_it_was(tmp_path):
    h = Harness(tmp_path)
    _mid_reconciliation(h)
    before = h.group()
    snapshot = (
        before.group_epoch, before.assignment_epoch, before.metadata_hash, dict(before.members),
        dict(before.target_assignment), dict(before.static_members),
        dict(before.resolved_regular_expressions), dict(before.subscribed_topic_names),
        before.subscription_type, before.state,
    )  # fmt: skip
    epochs = {(t, p): before.current_partition_epoch(t, p) for t in before._partition_epochs for p in range(6)}
    h2 = h.restart()
    after = h2.group()
    assert snapshot == (
        after.group_epoch, after.assignment_epoch, after.metadata_hash, dict(after.members),
        dict(after.target_assignment), dict(after.static_members),
        dict(after.resolved_regular_expressions), dict(after.subscribed_topic_names),
        after.subscription_type, after.state,
    )  # fmt: skip
    assert {k: after.current_partition_epoch(*k) for k in epochs} == epochs
    # every member has a session timeout again; the revoking one its rebalance timeout
    now = h2.clock.milliseconds()
    assert h2.manager.timeouts(G, "b") == {"session": now + SESSION}
    assert h2.manager.timeouts(G, "a") == {"session": now + SESSION, "rebalance": now + 5000}
    # the members carry on with their epochs: no rebalance
    epoch = after.group_epoch
    for member_id in ("a", "b", "c"):
        assert h2.beat(member_id).error is E.none
    assert h2.group().group_epoch == epoch
    for _ in range(3):
        for member_id in ("a", "b", "c"):
            h2.ack(member_id)
    assert h2.group().state is ConsumerGroupState.STABLE
    assert sorted(len(m.assigned_partitions.get(next(iter(after._partition_epochs)), ()))
                  for m in h2.group().members.values()) == [2, 2, 2]


def test_on_loaded_session_timeout_expiration(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 6)
    h.join("foo-1")
    h2 = h.restart()
    h2.advance(SESSION - 1000)
    assert "foo-1" in h2.group().members
    h2.advance(2000)
    assert not h2.group().members
    assert h2.last_batch[-1] == new_consumer_group_epoch_record(G, 2, 0)
    assert h2.manager.timeouts(G, "foo-1") == {}


def test_on_loaded_rebalance_timeout_expiration(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 2)
    h.join("a", rebalance_timeout_ms=10_000)
    h.join("b")
    h.beat("a")
    assert h.member("a").state is MemberState.UNREVOKED_PARTITIONS
    h2 = h.restart()
    h2.advance(9_000)
    h2.beat("b")  # keeps b alive
    h2.advance(2_000)
    assert set(h2.group().members) == {"b"}, "a did not revoke within its rebalance timeout"


def test_a_deleted_group_stays_deleted_after_a_restart(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 1)
    h.join("m", subscribed_topic_regex="fo.")
    results = []
    h.manager.delete_groups([G, "missing"], results.append)
    h.loop.run_pending()
    assert results == [{G: E.non_empty_group, "missing": E.group_id_not_found}]
    h.heartbeat(G, "m", -1)
    assert new_consumer_group_regular_expression_tombstone(G, "fo.") in h.last_batch
    h.manager.delete_groups([G], results.append)
    h.loop.run_pending()
    assert results[-1] == {G: E.none}
    assert G not in h.manager.groups
    assert h.last_batch == [
        new_consumer_group_target_assignment_epoch_tombstone_record(G),
        new_consumer_group_epoch_tombstone_record(G),
    ]
    assert G not in h.restart().manager.groups


def test_list_groups(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 2)
    h.join("a", group_id="g1")
    h.join("a", group_id="g2")
    h.join("b", group_id="g2")
    assert sorted(h.manager.list_groups()) == [("g1", "Stable"), ("g2", "Reconciling")]
    assert h.manager.list_groups(["stable"]) == [("g1", "Stable")]
    assert h.manager.groups_in_state(ConsumerGroupState.RECONCILING) == 1


def test_records_of_other_kinds_are_left_to_the_classic_coordinator(tmp_path):
    """Offsets and classic groups share the partition: the consumer group replay skips
    them, and the classic coordinator's replay skips consumer group records."""
    from tidegate.coordinator.group.group_metadata_manager import OffsetAndMetadata

    h = Harness(tmp_path)
    h.create_topic("foo", 1)
    h.join("m")
    h.classic.handle_commit_offsets("simple", "", None, -1, {("foo", 0): OffsetAndMetadata(5)})
    h.loop.run_pending()
    h2 = h.restart()
    assert set(h2.manager.groups) == {G}
    assert h2.member("m").member_epoch == 1
    assert set(h2.classic.groups) == {"simple"}
    assert h2.classic.group_type(G) is None  # not a classic group


# ------------------------------------------------------------------------ classic <-> consumer
def _classic_group(clock):
    from tidegate.coordinator.group.group_metadata import STABLE, GroupMetadata, MemberMetadata
    from tidegate.protocol.consumer_protocol import encode_assignment, encode_subscription

    classic = GroupMetadata(G, STABLE, clock)
    classic.generation_id = 5
    for member_id, instance, partitions in (("a", "ia", (0, 1)), ("b", None, (2,))):
        member = MemberMetadata(
            member_id, instance, f"client-{member_id}", "/10.0.0.1", 60_000, 10_000, "consumer",
            [("range", encode_subscription(["foo", "gone"])), ("roundrobin", b"rr")],
        )  # fmt: skip
        classic.add(member)
        member.assignment = encode_assignment(
            [("foo", p) for p in partitions] + [("gone", 0)]
        )
    classic.protocol_name = "range"
    return classic


def test_a_classic_group_converts_to_a_consumer_group_and_back(tmp_path):
    from tidegate.coordinator.group.modern.consumer.classic_conversion import (
        classic_group_from_consumer,
        consumer_group_from_classic,
        consumer_group_records,
    )
    from tidegate.protocol.consumer_protocol import decode_assignment

    h = Harness(tmp_path)
    foo = h.create_topic("foo", 3)
    group = consumer_group_from_classic(_classic_group(h.clock), h.topics)
    assert (group.group_epoch, group.assignment_epoch, group.state) == (5, 5, ConsumerGroupState.STABLE)
    a = group.members["a"]
    assert (a.member_epoch, a.previous_member_epoch, a.instance_id, a.client_id) == (5, 5, "ia", "client-a")
    assert a.assigned_partitions == mk((foo, (0, 1))), "a topic that no longer exists is dropped"
    assert a.subscribed_topic_names == {"foo", "gone"} and a.use_classic_protocol
    assert a.classic_member_metadata.session_timeout_ms == 10_000
    assert [p.name for p in a.classic_member_metadata.supported_protocols] == ["range", "roundrobin"]
    assert group.target_assignment == {"a": mk((foo, (0, 1))), "b": mk((foo, (2,)))}
    assert group.static_members == {"ia": "a"} and group.current_partition_epoch(foo, 2) == 5

    # its records rebuild the same group
    for record in consumer_group_records(group):
        h.manager.replay(record)
    again = h.group()
    assert (again.group_epoch, again.assignment_epoch, again.members, again.target_assignment) == (
        group.group_epoch, group.assignment_epoch, group.members, group.target_assignment,
    )  # fmt: skip
    assert again.metadata_hash == group.metadata_hash

    # and back, without the leaving member b
    classic = classic_group_from_consumer(group, h.topics, h.clock, leaving={"b"})
    assert (classic.generation_id, classic.protocol_type, classic.protocol_name) == (5, "consumer", "range")
    assert list(classic.members) == ["a"] and classic.leader_id == "a"
    assert classic.static_members == {"ia": "a"}
    assert decode_assignment(classic.members["a"].assignment) == [("foo", 0), ("foo", 1)]
    assert classic.subscribed_topics == {"foo", "gone"}
    group.update_member(ConsumerGroupMember("c"))  # a member of the consumer protocol
    with pytest.raises(ValueError):
        classic_group_from_consumer(group, h.topics, h.clock)


def test_an_unreadable_record_is_skipped_at_load(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 1)
    h.join("m")
    h.store.append([(b'["cgc","grp","x"]', b'{"v":1}'), (b'["cg","other"]', None)])
    h.loop.run_pending()
    h2 = h.restart()
    assert set(h2.group().members) == {"m"} and "other" not in h2.manager.groups
