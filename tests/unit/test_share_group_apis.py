"""KIP-932's share groups on the wire, sans-IO: ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge and the share offsets APIs, encoded through KafkaApis.handle
on the broker's real core (tests/core_harness, fake time). The state machines are tested
in test_share_group_heartbeat.py, test_share_partition.py and their neighbours; here: the
wiring in BrokerCore (the share-partition manager, its timers on the reaper, the hooks),
the responses as clients decode them, the ACLs, ListGroups and DeleteGroups of share
groups, topic deletion and the group.share.* keys."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.core_harness import CoreHarness as Harness
from tests.core_harness import decode_frame, response_bytes
from tests.integration.rawclient import produce_body
from tests.unit.test_apis import batch
from tests.unit.test_authorization import (
    ADMIN,
    ALICE,
    AUTHORIZER,
    BOB,
    add_acls,
    create_topic,
    creation,
)
from tests.unit.test_consumer_group_apis import call_as
from tests.unit.test_group_apis import call
from tidegate.config import BrokerConfig, ConfigError
from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import PARKED
from tidegate.protocol.apis import ApiKey
from tidegate.security.authorizer.acl import AclOperation as Op
from tidegate.security.authorizer.acl import ResourceType as Res
from tidegate.server.quota.client_quota_manager import QuotaEntity

HB, DESCRIBE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE
FETCH, ACK = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = (
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)
MEMBER = "5c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"


def hb(member_id=MEMBER, epoch=0, group="g", topics=("t",)):
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": list(topics) if epoch == 0 else None}  # fmt: skip


def fetch(topic_id, partitions=(0,), epoch=0, member_id=MEMBER, group="g", acks=None, max_wait=500, forgotten=()):
    """A ShareFetch as librdkafka sends one; ``acks``: partition -> [(first, last, type)]."""
    acks = acks or {}
    return {
        "group_id": group, "member_id": member_id, "share_session_epoch": epoch, "max_wait": max_wait,
        "min_bytes": 1, "max_bytes": 52428800, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition_index": p, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": [t]} for f, last, t in acks.get(p, [])]}
            for p in partitions]}],
        "forgotten_topics_data": [{"topic_id": topic_id, "partitions": list(forgotten)}] if forgotten else [],
    }  # fmt: skip


def ack(topic_id, acks, epoch, member_id=MEMBER, group="g"):
    return {
        "group_id": group, "member_id": member_id, "share_session_epoch": epoch,
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition_index": p, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": [t]} for f, last, t in batches]}
            for p, batches in acks.items()]}],
    }  # fmt: skip


def share_fetch(h, body, *, within_ms=None, wait=True):
    """A ShareFetch, answered within its MaxWaitMs of fake time (a share-partition's
    first load waits for the share coordinator's write)."""
    request, outcome, cid, _released = h.send(FETCH, 1, body)
    if outcome is not PARKED:
        return decode_frame(FETCH, 1, response_bytes(outcome), cid)
    if not wait:
        return request, cid
    return h.answer(request, cid, body["max_wait"] if within_ms is None else within_ms)


def acquired(response):
    """(partition, first, last, delivery count) of every acquired range of a ShareFetch."""
    return [(p.partition_index, r.first_offset, r.last_offset, r.delivery_count)
            for t in response.responses for p in t.partitions for r in p.acquired_records]  # fmt: skip


def alter_offsets(group, topic, offsets):
    return {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
        {"partition_index": p, "start_offset": o} for p, o in offsets.items()]}]}  # fmt: skip


def joined(h, topic="t", partitions=1, group="g"):
    """A topic with three records in partition 0, its share-partitions at offset 0 (an
    AlterShareGroupOffsets before anyone joins), and one member holding them all."""
    topic_id = h.create_topic(topic, partitions)
    h.produce(topic, 0, batch(b"a", b"b", b"c"))
    assert call(h, ALTER_OFFSETS, 0, alter_offsets(group, topic, dict.fromkeys(range(partitions), 0))).error_code == 0
    r = call(h, HB, 1, hb(group=group, topics=(topic,)))
    assert r.error_code == E.none, r
    return topic_id, r


def test_a_member_joins_fetches_acknowledges_and_the_group_is_described(tmp_path):
    h = Harness(tmp_path)
    topic_id, r = joined(h)
    assert (r.member_id, r.member_epoch, r.heartbeat_interval) == (MEMBER, 2, timedelta(seconds=5))
    assert [(tp.topic_id, tp.partitions) for tp in r.assignment.topic_partitions] == [(uuid.UUID(str(topic_id)), (0,))]
    f = share_fetch(h, fetch(topic_id))
    assert (f.error_code, f.acquisition_lock_timeout) == (E.none, timedelta(seconds=30))
    assert acquired(f) == [(0, 0, 2, 1)]
    a = call(h, ACK, 1, ack(topic_id, {0: [(0, 1, 1), (2, 2, 2)]}, epoch=1))
    assert [(p.partition_index, p.error_code) for t in a.responses for p in t.partitions] == [(0, E.none)]
    again = share_fetch(h, fetch(topic_id, epoch=2))
    assert acquired(again) == [(0, 2, 2, 2)]  # the released record, its count 2
    d = call(h, DESCRIBE, 1, {"group_ids": ["g", "nope"], "include_authorized_operations": False})
    group, missing = d.groups
    assert (group.error_code, group.group_state, group.assignor_name) == (E.none, "Stable", "simple")
    assert [m.member_id for m in group.members] == [MEMBER]
    assert missing.error_code == E.group_id_not_found
    offsets = call(h, DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": "g", "topics": None}]})
    (part,) = offsets.groups[0].topics[0].partitions
    # the acknowledgement's write carried the start offset before it moved (as Kafka's)
    assert (part.partition_index, part.start_offset, part.lag) == (0, 0, 1)
    h.close()


def test_listed_and_deleted_once_empty(tmp_path):
    h = Harness(tmp_path)
    joined(h)
    listed = call(h, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [
        ("g", "share", "share", "Stable")]
    deleting = call(h, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert [(r.group_id, r.error_code) for r in deleting.results] == [("g", E.non_empty_group)]
    assert call(h, HB, 1, hb(epoch=-1)).member_epoch == -1
    deleted = call(h, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert [(r.group_id, r.error_code) for r in deleted.results] == [("g", E.none)]
    assert call(h, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]}).groups == ()
    h.close()


def test_a_member_leaving_the_group_keeps_its_records_until_its_session_closes(tmp_path):
    """librdkafka's close sends the leaving heartbeat and the closing ShareAcknowledge
    (with the last acknowledgements) at once, on two connections: the heartbeat coming
    first must not release the records those acknowledgements are for (Kafka releases
    on the session's end only). The session's close releases what was not acknowledged."""
    h = Harness(tmp_path)
    topic_id, _ = joined(h)
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    assert call(h, HB, 1, hb(epoch=-1)).error_code == E.none
    other = "6c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"
    assert call(h, HB, 1, hb(member_id=other)).error_code == E.none
    assert acquired(share_fetch(h, fetch(topic_id, member_id=other))) == []
    closing = call(h, ACK, 1, ack(topic_id, {0: [(0, 0, 1)]}, epoch=-1))
    assert [(p.partition_index, p.error_code) for t in closing.responses for p in t.partitions] == [(0, E.none)]
    assert acquired(share_fetch(h, fetch(topic_id, member_id=other, epoch=1))) == [(0, 1, 2, 2)]
    h.close()


def test_a_closed_connection_releases_what_its_session_holds(tmp_path):
    h = Harness(tmp_path)
    topic_id, _ = joined(h)
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    h.core.share_partitions.connection_closed(h.send(ApiKey.API_VERSIONS, 0, {})[0].context.connection_id)
    other = "6c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"
    assert acquired(share_fetch(h, fetch(topic_id, member_id=other))) == [(0, 0, 2, 2)]
    h.close()


def test_a_lock_expires_on_the_reaper_and_the_record_goes_to_a_parked_fetch(tmp_path):
    h = Harness(tmp_path, {"group.share.record.lock.duration.ms": "1000",
                           "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    topic_id, _ = joined(h)
    start = h.clock.milliseconds()
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    other = "6c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"
    request, cid = share_fetch(h, fetch(topic_id, member_id=other, max_wait=5000), wait=False)
    r = h.answer(request, cid, within_ms=5000)
    assert acquired(r) == [(0, 0, 2, 2)]
    assert 1000 <= h.clock.milliseconds() - start <= 1010
    h.close()


def test_a_parked_fetch_is_woken_by_a_produce(tmp_path):
    h = Harness(tmp_path)
    topic_id, _ = joined(h)
    share_fetch(h, fetch(topic_id))
    request, cid = share_fetch(h, fetch(topic_id, epoch=1, max_wait=5000), wait=False)
    h.produce("t", 0, batch(b"d"))
    assert acquired(h.answer(request, cid)) == [(0, 3, 3, 1)]
    h.close()


def test_a_deleted_topic_leaves_the_share_state(tmp_path):
    h = Harness(tmp_path)
    topic_id, _ = joined(h)
    share_fetch(h, fetch(topic_id))
    key = uuid.UUID(str(topic_id))
    assert any(k.topic_id == key for k in h.core.share_coordinator.states)
    deleted = call(h, ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "t", "topic_id": None}], "timeout": 5000})
    assert deleted.responses[0].error_code == E.none
    assert not any(k.topic_id == key for k in h.core.share_coordinator.states)
    assert h.core.share_partitions.num_share_partitions == 0
    assert h.core.share_group_coordinator.groups["g"].initialized_topics == {}
    h.close()


def test_disabled_share_groups_answer_unsupported_version(tmp_path):
    h = Harness(tmp_path, {"group.share.enable": "false"})
    h.create_topic("t")
    assert call(h, HB, 1, hb()).error_code == E.unsupported_version
    assert share_fetch(h, fetch(uuid.uuid4())).error_code == E.unsupported_version
    h.close()


def test_acls_read_on_the_group_and_topics(tmp_path):
    h = Harness(tmp_path, AUTHORIZER)
    create_topic(h, "t")
    topic_id = h.core.store.get("t").topic_id
    assert call_as(h, ALICE, HB, 1, hb()).error_code == E.group_authorization_failed
    assert add_acls(h, creation("User:alice", Op.READ, "g", Res.GROUP)) == [E.none]
    assert call_as(h, ALICE, HB, 1, hb()).error_code == E.topic_authorization_failed
    assert add_acls(h, creation("User:alice", Op.DESCRIBE, "t")) == [E.none]
    assert call_as(h, ALICE, HB, 1, hb()).error_code == E.none
    f = call_as(h, ALICE, FETCH, 1, fetch(topic_id, max_wait=0))
    assert [p.error_code for t in f.responses for p in t.partitions] == [E.topic_authorization_failed]
    assert call_as(h, BOB, FETCH, 1, fetch(topic_id, max_wait=0)).error_code == E.group_authorization_failed
    d = call_as(h, BOB, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False})
    assert d.groups[0].error_code == E.group_authorization_failed
    assert call_as(h, ADMIN, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False}
                   ).groups[0].error_code == E.none
    # a group assigning a topic the principal may not DESCRIBE is hidden without its members
    assert add_acls(h, creation("User:bob", Op.DESCRIBE, "g", Res.GROUP)) == [E.none]
    r = call_as(h, ALICE, HB, 1, hb())
    for _ in range(3):  # the topic's share-partitions initialized, the member assigned
        r = call_as(h, ALICE, HB, 1, hb(epoch=r.member_epoch))
    assert r.error_code == E.none
    hidden = call_as(h, BOB, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False}).groups[0]
    assert (hidden.error_code, hidden.members) == (E.topic_authorization_failed, ())
    assert add_acls(h, creation("User:bob", Op.DESCRIBE, "t")) == [E.none]
    shown = call_as(h, BOB, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False}).groups[0]
    assert (shown.error_code, [tp.topic_name for tp in shown.members[0].assignment.topic_partitions]) == (E.none, ["t"])
    h.close()


def test_acls_of_share_acknowledge_read_on_the_group_then_on_each_topic(tmp_path):
    # Kafka's handleShareAcknowledgeRequest: READ on the group (top level), then READ on
    # each acknowledged topic (TOPIC_AUTHORIZATION_FAILED for its partitions)
    h = Harness(tmp_path, AUTHORIZER)
    create_topic(h, "t")
    topic_id = h.core.store.get("t").topic_id
    produced = h.request(ApiKey.PRODUCE, 9, produce_body("t", {0: batch(b"a", b"b")}, 1), ctx=ADMIN)
    assert produced.responses[0].partition_responses[0].error_code == E.none
    assert call_as(h, ADMIN, ALTER_OFFSETS, 0, alter_offsets("g", "t", {0: 0})).error_code == E.none
    assert add_acls(h, creation("User:alice", Op.READ, "g", Res.GROUP),
                    creation("User:alice", Op.DESCRIBE, "t")) == [E.none, E.none]
    r = call_as(h, ALICE, HB, 1, hb())
    assert (r.error_code, [tp.partitions for tp in r.assignment.topic_partitions]) == (E.none, [(0,)])
    f = call_as(h, ALICE, FETCH, 1, fetch(topic_id, max_wait=0))  # opens the session
    assert [p.error_code for t in f.responses for p in t.partitions] == [E.topic_authorization_failed]
    a = call_as(h, ALICE, ACK, 1, ack(topic_id, {0: [(0, 1, 1)]}, epoch=1))
    assert a.error_code == E.none
    assert [(p.partition_index, p.error_code) for t in a.responses for p in t.partitions] == [
        (0, E.topic_authorization_failed)]
    assert call_as(h, BOB, ACK, 1, ack(topic_id, {0: [(0, 1, 1)]}, epoch=1)).error_code == (
        E.group_authorization_failed)
    # READ on the topic: the records are acquired and the acknowledgement goes through
    assert add_acls(h, creation("User:alice", Op.READ, "t")) == [E.none]
    f = call_as(h, ALICE, FETCH, 1, fetch(topic_id, epoch=2))  # the share-partition's first load
    assert acquired(f) == [(0, 0, 1, 1)]
    a = call_as(h, ALICE, ACK, 1, ack(topic_id, {0: [(0, 1, 1)]}, epoch=3))
    assert [(p.partition_index, p.error_code) for t in a.responses for p in t.partitions] == [(0, E.none)]
    h.close()


def group_with_two_topics(tmp_path):
    """A broker with an authorizer, topics t and u, and share group g at offset 0 of both
    (set by the super user)."""
    h = Harness(tmp_path, AUTHORIZER)
    for topic in ("t", "u"):
        create_topic(h, topic)
        assert call_as(h, ADMIN, ALTER_OFFSETS, 0, alter_offsets("g", topic, {0: 0})).error_code == E.none
    return h


def test_acls_of_describe_share_group_offsets_describe_on_the_group_and_topics(tmp_path):
    # Kafka's handleDescribeShareGroupOffsetsRequest: DESCRIBE on each group
    # (GROUP_AUTHORIZATION_FAILED for that group); named topics without DESCRIBE answer
    # TOPIC_AUTHORIZATION_FAILED per partition; all topics (null) leaves them out
    h = group_with_two_topics(tmp_path)

    def describe(who, topics):
        return call_as(h, who, DESCRIBE_OFFSETS, 1, {"groups": [
            {"group_id": "g", "topics": topics}, {"group_id": "other", "topics": None}]}).groups

    groups = describe(BOB, None)
    assert [(g.group_id, g.error_code) for g in groups] == [
        ("g", E.group_authorization_failed), ("other", E.group_authorization_failed)]
    assert add_acls(h, creation("User:bob", Op.DESCRIBE, "g", Res.GROUP),
                    creation("User:bob", Op.DESCRIBE, "t")) == [E.none, E.none]
    named = describe(BOB, [{"topic_name": "t", "partitions": [0]}, {"topic_name": "u", "partitions": [0]}])
    assert [(g.group_id, g.error_code) for g in named] == [("g", E.none), ("other", E.group_authorization_failed)]
    assert sorted((t.topic_name, p.partition_index, p.error_code, p.start_offset)
                  for t in named[0].topics for p in t.partitions) == [
        ("t", 0, E.none, 0), ("u", 0, E.topic_authorization_failed, -1)]  # fmt: skip
    every = describe(BOB, None)[0]
    assert (every.error_code, [t.topic_name for t in every.topics]) == (E.none, ["t"])
    assert sorted(t.topic_name for t in describe(ADMIN, None)[0].topics) == ["t", "u"]
    h.close()


def test_acls_of_alter_share_group_offsets_read_on_the_group_and_topics(tmp_path):
    # Kafka's handleAlterShareGroupOffsetsRequest: READ on the group (top level; DESCRIBE
    # is not enough), READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)
    h = Harness(tmp_path, AUTHORIZER)
    create_topic(h, "t")
    create_topic(h, "u")
    assert add_acls(h, creation("User:bob", Op.DESCRIBE, "g", Res.GROUP)) == [E.none]
    assert call_as(h, BOB, ALTER_OFFSETS, 0, alter_offsets("g", "t", {0: 0})).error_code == (
        E.group_authorization_failed)
    assert add_acls(h, creation("User:bob", Op.READ, "g", Res.GROUP), creation("User:bob", Op.READ, "t"),
                    creation("User:bob", Op.DESCRIBE, "u")) == [E.none] * 3
    body = alter_offsets("g", "t", {0: 0})
    body["topics"] += alter_offsets("g", "u", {0: 0})["topics"]
    r = call_as(h, BOB, ALTER_OFFSETS, 0, body)
    assert r.error_code == E.none
    assert sorted((t.topic_name, p.partition_index, p.error_code) for t in r.responses for p in t.partitions) == [
        ("t", 0, E.none), ("u", 0, E.topic_authorization_failed)]
    h.close()


def test_acls_of_delete_share_group_offsets_delete_on_the_group_read_on_topics(tmp_path):
    # Kafka's handleDeleteShareGroupOffsetsRequest: DELETE on the group (top level; READ
    # is not enough), READ on each topic (TOPIC_AUTHORIZATION_FAILED for that topic)
    h = group_with_two_topics(tmp_path)
    body = {"group_id": "g", "topics": [{"topic_name": "t"}, {"topic_name": "u"}]}
    assert add_acls(h, creation("User:bob", Op.READ, "g", Res.GROUP), creation("User:bob", Op.READ, "t"),
                    creation("User:bob", Op.DESCRIBE, "u")) == [E.none] * 3
    assert call_as(h, BOB, DELETE_OFFSETS, 0, body).error_code == E.group_authorization_failed
    assert add_acls(h, creation("User:bob", Op.DELETE, "g", Res.GROUP)) == [E.none]
    r = call_as(h, BOB, DELETE_OFFSETS, 0, body)
    assert r.error_code == E.none
    assert sorted((t.topic_name, t.error_code) for t in r.responses) == [
        ("t", E.none), ("u", E.topic_authorization_failed)]
    left = call_as(h, ADMIN, DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": "g", "topics": None}]}).groups[0]
    assert [t.topic_name for t in left.topics] == ["u"]  # only the authorized topic's state went
    h.close()


@pytest.mark.parametrize(("props", "message"), [
    ({"group.share.record.lock.duration.ms": "1000"}, "group.share.record.lock.duration.ms"),
    ({"group.share.max.size": "300", "group.share.max.share.sessions": "250"}, "group.share.max.share.sessions"),
    ({"group.share.delivery.count.limit": "11"}, "group.share.delivery.count.limit"),
    ({"group.share.assignors": "simple,other"}, "group.share.assignors"),
])  # fmt: skip
def test_share_keys_are_validated_as_kafka(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)


def test_the_clients_test_cluster_settings_are_accepted():
    config = BrokerConfig({"group.share.record.lock.duration.ms": "1000",
                           "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    assert config.get("group.share.record.lock.duration.ms") == 1000


def test_an_acknowledgement_after_the_lock_expired_is_invalid_record_state(tmp_path):
    h = Harness(tmp_path, {"group.share.record.lock.duration.ms": "1000",
                           "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    topic_id, _ = joined(h)
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    h.loop.advance(1001)
    other = "6c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"
    assert acquired(share_fetch(h, fetch(topic_id, member_id=other))) == [(0, 0, 2, 2)]
    late = call(h, ACK, 1, ack(topic_id, {0: [(0, 2, 1)]}, epoch=1))
    assert [(p.partition_index, p.error_code) for t in late.responses for p in t.partitions] == [
        (0, E.invalid_record_state)]
    h.close()


def test_a_share_fetch_is_on_the_fetch_quota_and_keeps_its_acquired_records(tmp_path):
    """KIP-932: the records a ShareFetch answers count on the fetch quota; throttled, the
    response still carries them (they are acquired by the member) with ThrottleTimeMs."""
    h = Harness(tmp_path)
    topic_id = h.create_topic("t")
    h.produce("t", 0, batch(*[b"y" * 1000] * 50))
    assert call(h, ALTER_OFFSETS, 0, alter_offsets("g", "t", {0: 0})).error_code == 0
    assert call(h, HB, 1, hb()).error_code == E.none
    h.apis.quotas.set_quota(QuotaEntity(None, "rawclient"), "consumer_byte_rate", 1000)
    f = share_fetch(h, fetch(topic_id))
    assert acquired(f) == [(0, 0, 49, 1)]
    assert f.throttle_time.total_seconds() > 1
    assert len(f.responses[0].partitions[0].records) > 50_000
    h.close()


def test_share_group_metrics(tmp_path):
    from tidegate.metrics.prometheus import BrokerMetrics

    h = Harness(tmp_path)
    topic_id, _ = joined(h)
    share_fetch(h, fetch(topic_id))
    metrics = BrokerMetrics()
    core = h.core
    metrics.register_group_coordinators(core.group_coordinator, core.consumer_group_coordinator,
                                        core.share_group_coordinator)  # fmt: skip
    metrics.register_share_partitions(core.share_partitions)
    text = metrics.exposition().decode()
    assert 'kafka_server_group_coordinator_metrics_group_count{protocol="share"} 1.0' in text
    assert 'kafka_server_group_coordinator_metrics_share_group_count{state="stable"} 1.0' in text
    assert "kafka_server_group_coordinator_metrics_share_group_rebalance_total 1.0" in text
    assert 'tidegate_group_members{group="g",protocol="share",state="stable"} 1.0' in text
    # tidegate top lists the groups: a consumer-protocol group beside the share group
    from tests.unit.test_consumer_group_apis import hb as consumer_hb
    from tidegate import top

    first = top.Snapshot.parse(text, 10.0)
    h.create_topic("c", 2)
    for member in ("m1", "m2"):
        reply = call(h, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, consumer_hb(member, group="cg", subscribed_topic_names=["c"]))
        assert reply.error_code == 0
    view = top.build_view(first, top.Snapshot.parse(metrics.exposition().decode(), 12.0), "test")
    (groups,) = [s for s in view.sections if s.title == "Groups"]
    # the share group's epoch: 1 at its creation by AlterShareGroupOffsets, 2 once joined
    assert groups.rows == [["cg", "consumer", "Reconciling", "2", "2", "-", "-"],
                           ["g", "share", "Stable", "2", "1", "3", "3"]]  # fmt: skip
    assert groups.note is not None and groups.note.startswith("1 consumer, 1 share, 0 classic group(s); "
                                                              "rebalances/s: consumer 1, share 0, classic 0")
    assert "Groups" in top.render_plain(view)
    assert "kafka_server_sharesessioncache_sharesessionscount 1.0" in text
    assert 'kafka_server_sharepartitionmetrics_inflightmessagecount{group="g",partition="0",topic="t"} 3.0' in text
    assert 'tidegate_share_partition_acquired_records{group="g",partition="0",topic="t"} 3.0' in text
    # one record of the batch accepted (the batch is split: per-offset states): two still locked
    share_fetch(h, fetch(topic_id, epoch=1, max_wait=0, acks={0: [(1, 1, 1)]}))
    text = metrics.exposition().decode()
    assert 'tidegate_share_partition_acquired_records{group="g",partition="0",topic="t"} 2.0' in text
    h.close()


def test_share_metrics_count_acknowledgements_lock_timeouts_and_requests(tmp_path):
    """ShareGroupMetrics RecordAcknowledgementsPerSec{ackType} counts the records of
    applied acknowledgements; SharePartitionMetrics AcquisitionLockTimeoutPerSec the
    records whose lock expired, InFlightBatchCount the cached batches; BrokerTopicMetrics
    the share requests per topic, failed ones (an acknowledgement after the lock expired)
    apart; the histograms of both (values pinned in test_share_metrics,
    test_share_partition and test_share_partition_manager) under their names."""
    from prometheus_client import CollectorRegistry, generate_latest

    from tidegate.metrics.collectors import ShareGroupCollector

    h = Harness(tmp_path, {"group.share.record.lock.duration.ms": "1000",
                           "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    topic_id, _ = joined(h)
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    h.loop.advance(1001)  # the lock of all three expires
    other = "6c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f"
    assert acquired(share_fetch(h, fetch(topic_id, member_id=other))) == [(0, 0, 2, 2)]
    late = call(h, ACK, 1, ack(topic_id, {0: [(0, 2, 1)]}, epoch=1))  # not the owner: INVALID_RECORD_STATE
    assert late.responses[0].partitions[0].error_code == E.invalid_record_state
    body = ack(topic_id, {0: [(0, 0, 1), (1, 1, 2)]}, epoch=1, member_id=other)
    body["topics"][0]["partitions"][0]["acknowledgement_batches"].append(
        {"first_offset": 2, "last_offset": 2, "acknowledge_types": [3]})
    assert call(h, ACK, 1, body).responses[0].partitions[0].error_code == E.none
    registry = CollectorRegistry()
    registry.register(ShareGroupCollector(h.core.share_partitions))
    text = generate_latest(registry).decode()
    labels = 'group="g",partition="0",topic="t"'
    assert f"kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total{{{labels}}} 3.0" in text
    assert f"kafka_server_sharepartitionmetrics_inflightbatchcount{{{labels}}} 1.0" in text  # 1 RELEASEd
    for ack_type, records in (("Accept", 1), ("Release", 1), ("Reject", 1), ("Renew", 0)):
        assert f'kafka_server_sharegroupmetrics_recordacknowledgements_total{{ackType="{ack_type}"}} {records}.0' in text
    assert 'kafka_server_brokertopicmetrics_totalsharefetchrequests_total{topic="t"} 2.0' in text
    assert 'kafka_server_brokertopicmetrics_failedsharefetchrequests_total{topic="t"} 0.0' in text
    assert 'kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total{topic="t"} 2.0' in text
    assert 'kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total{topic="t"} 1.0' in text
    # the histograms: one batch of three cached (its redelivery adds none), two fetches that
    # took the fetch lock, one load; both fetches took the lock of all they asked for
    assert f"kafka_server_sharepartitionmetrics_inflightbatchmessagecount_count{{{labels}}} 1.0" in text
    assert f"kafka_server_sharepartitionmetrics_inflightbatchmessagecount_sum{{{labels}}} 3.0" in text
    assert f"kafka_server_sharepartitionmetrics_fetchlocktimems_count{{{labels}}} 2.0" in text
    assert f"kafka_server_sharepartitionmetrics_fetchlockratio_count{{{labels}}} 2.0" in text
    assert "kafka_server_sharegroupmetrics_partitionloadtimems_count 1.0" in text
    assert 'kafka_server_sharegroupmetrics_requesttopicpartitionsfetchratio_sum{group="g"} 200.0' in text
    assert 'kafka_server_sharegroupmetrics_topicpartitionsacquiretimems_count{group="g"} 2.0' in text
    h.close()


def test_share_metrics_count_acquired_records_and_archiving_at_the_delivery_limit(tmp_path):
    """tidegate's own share-partition counters: every record handed out under a lock
    (redeliveries too), and records archived because their delivery count reached
    group.share.delivery.count.limit (a lock expiry at the limit), not REJECTed ones."""
    from prometheus_client import CollectorRegistry, generate_latest

    from tidegate.metrics.collectors import ShareGroupCollector

    h = Harness(tmp_path, {"group.share.record.lock.duration.ms": "1000",
                           "group.share.min.record.lock.duration.ms": "1000",
                           "group.share.delivery.count.limit": "2"})  # fmt: skip
    topic_id, _ = joined(h)
    assert acquired(share_fetch(h, fetch(topic_id))) == [(0, 0, 2, 1)]
    h.loop.advance(1001)  # first delivery's lock expires: AVAILABLE again
    assert acquired(share_fetch(h, fetch(topic_id, epoch=1))) == [(0, 0, 2, 2)]
    h.loop.advance(1001)  # second delivery's lock expires at the limit: ARCHIVED
    registry = CollectorRegistry()
    registry.register(ShareGroupCollector(h.core.share_partitions))
    text = generate_latest(registry).decode()
    labels = 'group="g",partition="0",topic="t"'
    assert f"tidegate_share_partition_records_acquired_total{{{labels}}} 6.0" in text
    assert f"tidegate_share_partition_records_archived_at_delivery_limit_total{{{labels}}} 3.0" in text
    assert f"kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total{{{labels}}} 6.0" in text
    assert acquired(share_fetch(h, fetch(topic_id, epoch=2))) == []  # nothing left to deliver
    h.close()
