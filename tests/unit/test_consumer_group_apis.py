"""KIP-848's consumer group protocol on the wire, sans-IO: ConsumerGroupHeartbeat and
ConsumerGroupDescribe, and the offset APIs of consumer groups, encoded through
KafkaApis.handle on the broker's real core (tests/core_harness, fake time). The state
machine is tested in test_consumer_group_heartbeat.py and its neighbours; here: the
wiring in BrokerCore, the request checks before the coordinator, the responses as
clients decode them, member epochs on OffsetCommit/OffsetFetch, and a restart."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.core_harness import CoreHarness, decode_frame, response_bytes
from tests.unit.test_authorization import (
    ADMIN,
    ALICE,
    AUTHORIZER,
    BOB,
    add_acls,
    create_topic,
    creation,
)
from tests.unit.test_group_apis import GROUP_PROPS, by_id_commit_body, call, commit_body, join_body
from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import PARKED
from tidegate.protocol.apis import ApiKey
from tidegate.security.authorizer.acl import AclOperation as Op
from tidegate.security.authorizer.acl import ResourceType as Res

HB, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE


def hb(member_id="m1", epoch=0, group="g", *, version=1, **fields):
    """A heartbeat body; a join (epoch 0) as librdkafka sends one unless told otherwise."""
    body = {
        "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None,
    }  # fmt: skip
    if epoch == 0:
        body.update(rebalance_timeout=300_000, subscribed_topic_names=["t"], topic_partitions=[])
        if version >= 1:
            body["subscribed_topic_regex"] = ""
    body.update(fields)
    return body


def owned(response):
    """The assignment of a heartbeat response: topic id -> partitions."""
    assert response.assignment is not None
    return {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}


def test_a_member_joins_gets_every_partition_and_heartbeats(tmp_path):
    h = CoreHarness(tmp_path)
    topic_id = h.create_topic("t", 3)
    r = call(h, HB, 1, hb())
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval) == (E.none, "m1", 1, timedelta(seconds=5))
    assert owned(r) == {uuid.UUID(str(topic_id)): [0, 1, 2]}
    steady = call(h, HB, 1, hb(epoch=1))
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (E.none, 1, None)
    d = call(h, DESCRIBE, 1, {"group_ids": ["g", "nope"], "include_authorized_operations": False})
    group, missing = d.groups
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch) == (E.none, "Stable", 1, 1)
    assert group.assignor_name == "uniform"
    (member,) = group.members
    assert (member.member_id, member.member_epoch, member.member_type) == ("m1", 1, 1)
    assert [(tp.topic_name, sorted(tp.partitions)) for tp in member.assignment.topic_partitions] == [("t", [0, 1, 2])]
    assert missing.error_code == E.group_id_not_found
    h.close()


def test_request_checks_before_the_coordinator(tmp_path):
    """Reference 1.4: INVALID_REQUEST, UNSUPPORTED_ASSIGNOR; v0 lets the coordinator name the member."""
    h = CoreHarness(tmp_path)
    h.create_topic("t", 1)
    assert call(h, HB, 1, hb(member_id="")).error_code == E.invalid_request
    assert call(h, HB, 1, hb(group="")).error_code == E.invalid_request
    assert call(h, HB, 1, hb(topic_partitions=None)).error_code == E.invalid_request
    bad = call(h, HB, 1, hb(server_assignor="sticky"))
    assert bad.error_code == E.unsupported_assignor and "sticky" in bad.error_message
    v0 = call(h, HB, 0, hb(member_id="", version=0))
    assert v0.error_code == E.none and v0.member_id and v0.member_epoch == 1
    assert call(h, HB, 1, hb(member_id="ghost", epoch=3)).error_code == E.unknown_member_id
    assert call(h, HB, 1, hb(group="other", epoch=3)).error_code == E.group_id_not_found
    h.close()


@pytest.mark.parametrize("version", [0, 1])
def test_the_consumer_protocol_can_be_turned_off(tmp_path, version):
    """Kafka's answer without "consumer" in group.coordinator.rebalance.protocols."""
    h = CoreHarness(tmp_path, {"group.coordinator.rebalance.protocols": "classic"})
    assert call(h, HB, version, hb(member_id="", version=version)).error_code == E.unsupported_version
    d = call(h, DESCRIBE, version, {"group_ids": ["g", "h"], "include_authorized_operations": False})
    assert [(g.group_id, g.error_code) for g in d.groups] == [("g", E.unsupported_version),
                                                             ("h", E.unsupported_version)]
    h.close()


def test_two_members_split_the_partitions_revoking_before_assigning(tmp_path):
    h = CoreHarness(tmp_path)
    h.create_topic("t", 4)
    first = call(h, HB, 1, hb("a"))
    assert sum(len(p) for p in owned(first).values()) == 4
    second = call(h, HB, 1, hb("b"))
    assert (second.member_epoch, owned(second)) == (2, {})  # waits for a's partitions
    a = call(h, HB, 1, hb("a", 1))  # told to give two up, still at epoch 1
    (kept,) = owned(a).values()
    assert (a.member_epoch, len(kept)) == (1, 2)
    topic_id = next(iter(owned(a)))
    acked = call(h, HB, 1, hb("a", 1, topic_partitions=[{"topic_id": topic_id, "partitions": kept}]))
    assert acked.member_epoch == 2
    b = call(h, HB, 1, hb("b", 2))
    assert sorted(owned(b)[topic_id]) == sorted({0, 1, 2, 3} - set(kept))
    h.close()


def test_offsets_of_a_consumer_group_check_member_epochs_and_survive_a_restart(tmp_path):
    """Reference 1.14: OffsetCommit/OffsetFetch v9 carry the member epoch."""
    h = CoreHarness(tmp_path / "data", GROUP_PROPS)
    h.create_topic("t", 1)
    call(h, HB, 1, hb())

    def commit(member, epoch, version=9):
        r = call(h, ApiKey.OFFSET_COMMIT, version, commit_body("g", member, epoch, {("t", 0): 7}))
        return r.topics[0].partitions[0].error_code

    assert commit("m1", 0) == E.stale_member_epoch
    assert commit("ghost", 1) == E.unknown_member_id
    assert commit("m1", 1, version=8) == E.unsupported_version
    assert commit("m1", 1) == E.none

    def fetch(member, epoch):
        body = {"groups": [{"group_id": "g", "member_id": member, "member_epoch": epoch, "topics": None}],
                "require_stable": False}  # fmt: skip
        return call(h, ApiKey.OFFSET_FETCH, 9, body).groups[0]

    assert fetch("m1", 5).error_code == E.stale_member_epoch
    assert fetch(None, -1).topics[0].partitions[0].committed_offset == 7  # the admin client
    assert fetch("m1", 1).topics[0].partitions[0].committed_offset == 7
    # not a classic group: a JoinGroup joins it as a classic-protocol member (online
    # migration: v4+ gets its member id first); DescribeGroups and ListGroups' classic view
    assert call(h, ApiKey.JOIN_GROUP, 9, join_body("g")).error_code == E.member_id_required
    described = call(h, ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["g"], "include_authorized_operations": False})
    assert (described.groups[0].error_code, described.groups[0].group_state) == (E.group_id_not_found, "Dead")
    h.close()

    h = CoreHarness(tmp_path / "data", GROUP_PROPS)
    assert h.core.consumer_group_coordinator.timeouts("g", "m1")["session"] > 0
    again = call(h, HB, 1, hb(epoch=1))
    assert (again.error_code, again.member_epoch) == (E.none, 1)  # resumed, no new epoch
    assert fetch("m1", 1).topics[0].partitions[0].committed_offset == 7
    h.close()


def test_offsets_v10_by_topic_id_check_member_epochs(tmp_path):
    """OffsetCommit and OffsetFetch v10 (topics by id) check a consumer group member's
    epoch as v9 does."""
    h = CoreHarness(tmp_path / "data", GROUP_PROPS)
    t = h.create_topic("t", 1)
    call(h, HB, 1, hb())

    def commit(member, epoch):
        r = call(h, ApiKey.OFFSET_COMMIT, 10, by_id_commit_body("g", member, epoch, {(t, 0): 7}))
        assert r.topics[0].topic_id == t
        return r.topics[0].partitions[0].error_code

    assert commit("m1", 0) == E.stale_member_epoch
    assert commit("ghost", 1) == E.unknown_member_id
    assert commit("m1", 1) == E.none

    def fetch(member, epoch):
        body = {"groups": [{"group_id": "g", "member_id": member, "member_epoch": epoch,
                            "topics": [{"topic_id": t, "partition_indexes": [0]}]}],
                "require_stable": False}  # fmt: skip
        return call(h, ApiKey.OFFSET_FETCH, 10, body).groups[0]

    assert fetch("m1", 5).error_code == E.stale_member_epoch
    assert fetch("ghost", 1).error_code == E.unknown_member_id
    got = fetch("m1", 1)
    assert (got.error_code, got.topics[0].topic_id, got.topics[0].partitions[0].committed_offset) == (E.none, t, 7)
    h.close()


def test_a_regex_picks_up_a_topic_created_later(tmp_path):
    """RE2, whole-name match: "topic-.*" takes topic-a, not other; topic-b once created."""
    h = CoreHarness(tmp_path)
    h.create_topic("topic-a", 1)
    h.create_topic("other", 1)
    epoch = call(h, HB, 1, hb(subscribed_topic_names=[], subscribed_topic_regex="topic-.*")).member_epoch

    def settle() -> set[str]:
        nonlocal epoch
        h.clock.advance(11_000)  # regexes are resolved again at most every 10 s
        for _ in range(3):
            epoch = call(h, HB, 1, hb(epoch=epoch)).member_epoch
        d = call(h, DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
        return {tp.topic_name for tp in d.groups[0].members[0].assignment.topic_partitions}

    assert settle() == {"topic-a"}
    h.create_topic("topic-b", 2)
    assert settle() == {"topic-a", "topic-b"}
    h.close()


def test_list_delete_and_offset_delete_of_a_consumer_group(tmp_path):
    """Reference 1.14: ListGroups v5 shows the group's type; DeleteGroups needs it EMPTY
    and takes its offsets along; OffsetDelete keeps the offsets of subscribed topics."""
    h = CoreHarness(tmp_path, GROUP_PROPS)
    h.create_topic("t", 1)
    h.create_topic("u", 1)
    call(h, HB, 1, hb())
    call(h, ApiKey.OFFSET_COMMIT, 9, commit_body("g", "m1", 1, {("t", 0): 3, ("u", 0): 4}))
    call(h, ApiKey.OFFSET_COMMIT, 9, commit_body("simple", "", -1, {("t", 0): 1}))

    def listed(**filters):
        body = {"states_filter": [], "types_filter": [], **filters}
        return sorted((g.group_id, g.protocol_type, g.group_state, g.group_type)
                      for g in call(h, ApiKey.LIST_GROUPS, 5, body).groups)  # fmt: skip

    assert listed() == [("g", "consumer", "Stable", "consumer"), ("simple", "", "Empty", "classic")]
    assert listed(types_filter=["Consumer"]) == [("g", "consumer", "Stable", "consumer")]
    assert listed(types_filter=["share"]) == []
    assert listed(states_filter=["empty"]) == [("simple", "", "Empty", "classic")]

    deleted = call(h, ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}, {"name": "u", "partitions": [{"partition_index": 0}]},
    ]})  # fmt: skip
    assert [(t.name, t.partitions[0].error_code) for t in deleted.topics] == [
        ("t", E.group_subscribed_to_topic), ("u", E.none)]

    def delete() -> int:
        return call(h, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]}).results[0].error_code

    assert delete() == E.non_empty_group
    assert call(h, HB, 1, hb(epoch=-1)).member_epoch == -1  # leaves
    assert delete() == E.none
    assert listed() == [("simple", "", "Empty", "classic")]
    fetched = call(h, ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})
    assert fetched.groups[0].topics == ()
    assert delete() == E.group_id_not_found
    h.close()


def test_acls_on_the_consumer_protocol(tmp_path):
    """Reference 1.4 and 1.12: READ on the group, DESCRIBE on subscribed names; a regex
    resolves only to topics the member may DESCRIBE; a described group assigning a topic
    the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED without members."""
    h = CoreHarness(tmp_path, AUTHORIZER)
    for name in ("topic-open", "topic-secret"):
        create_topic(h, name)
    assert call_as(h, ALICE, HB, 1, hb()).error_code == E.group_authorization_failed
    assert add_acls(h, creation("User:alice", Op.READ, "g", Res.GROUP), creation("User:bob", Op.DESCRIBE, "g", Res.GROUP),
                    creation("User:alice", Op.DESCRIBE, "topic-open"), creation("User:bob", Op.DESCRIBE, "topic-open"),
                    ) == [E.none] * 4  # fmt: skip
    denied = call_as(h, ALICE, HB, 1, hb(subscribed_topic_names=["topic-secret"]))
    assert denied.error_code == E.topic_authorization_failed
    epoch = call_as(h, ALICE, HB, 1, hb(subscribed_topic_names=[], subscribed_topic_regex="topic-.*")).member_epoch
    h.clock.advance(11_000)
    for _ in range(3):
        epoch = call_as(h, ALICE, HB, 1, hb(epoch=epoch)).member_epoch
    body = {"group_ids": ["g"], "include_authorized_operations": False}
    (group,) = call_as(h, ADMIN, DESCRIBE, 1, body).groups
    assert [tp.topic_name for tp in group.members[0].assignment.topic_partitions] == ["topic-open"]
    assert call_as(h, BOB, DESCRIBE, 1, body).groups[0].error_code == E.none
    assert add_acls(h, creation("User:bob", Op.DESCRIBE, "topic-open", perm=2)) == [E.none]  # DENY
    hidden = call_as(h, BOB, DESCRIBE, 1, body).groups[0]
    assert (hidden.error_code, hidden.members) == (E.topic_authorization_failed, ())
    h.close()


def call_as(h, who, key, version, body):
    """One request from a principal: its answer, now or once durable."""
    request, outcome, cid, _released = h.send(key, version, body, ctx=who)
    if outcome is not PARKED:
        return decode_frame(key, version, response_bytes(outcome), cid)
    return h.answer(request, cid)


def test_group_coordinator_metrics(tmp_path):
    """Kafka's group-coordinator-metrics: groups per protocol and state, one rebalance per
    group epoch bump, offsets committed (per partition), deleted by OffsetDelete and
    expired; and each group's members and epoch (what ``tidegate top`` lists)."""
    from tidegate.metrics.prometheus import BrokerMetrics

    h = CoreHarness(tmp_path, {**GROUP_PROPS, "offsets.retention.minutes": "1"})
    core = h.core
    metrics = BrokerMetrics()
    metrics.register_group_coordinators(
        core.group_coordinator, core.consumer_group_coordinator, core.share_group_coordinator
    )

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value("kafka_server_group_coordinator_metrics_" + name, labels)

    assert value("consumer_group_rebalance_total") == 0
    h.create_topic("t", 2)
    h.create_topic("u", 1)
    call(h, HB, 1, hb("a"))  # a new group: epoch 1
    call(h, HB, 1, hb("b"))  # b joins: epoch 2
    assert value("consumer_group_rebalance_total") == 2
    assert value("group_count", protocol="consumer") == 1
    assert value("consumer_group_count", state="reconciling") == 1
    assert value("consumer_group_count", state="stable") == 0
    assert metrics.registry.get_sample_value(
        "tidegate_group_members", {"group": "g", "protocol": "consumer", "state": "reconciling"}) == 2
    assert metrics.registry.get_sample_value("tidegate_group_epoch", {"group": "g", "protocol": "consumer"}) == 2

    call(h, ApiKey.OFFSET_COMMIT, 9, commit_body("g", "a", 1, {("t", 0): 3, ("u", 0): 4}))
    call(h, ApiKey.OFFSET_COMMIT, 9, commit_body("simple", "", -1, {("t", 1): 1}))
    assert value("offset_commit_total") == 3
    assert value("group_count", protocol="classic") == 1
    assert value("classic_group_count", state="empty") == 1
    call(h, ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}, {"name": "u", "partitions": [{"partition_index": 0}]},
    ]})  # fmt: skip
    assert value("offset_deletion_total") == 1  # t is subscribed: only u's offset goes

    call(h, HB, 1, hb("b", epoch=-1))  # b leaves: epoch 3
    assert value("consumer_group_rebalance_total") == 3
    h.clock.advance(120_000)
    core.group_coordinator.cleanup_group_metadata()
    assert value("offset_expiration_total") == 1  # the simple group's offset; g has a member
    assert value("group_count", protocol="classic") == 0
    assert value("share_group_rebalance_total") == 0
    assert value("group_count", protocol="share") == 0
    h.close()
