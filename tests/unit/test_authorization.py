"""The authorization step of the request pipeline, sans-IO: the broker's real core
(tests/core_harness.CoreHarness) with the StandardAuthorizer, requests from principals
given by their RequestContext; the ACL APIs, per-API checks with Kafka's error codes,
partial answers merged with the handler's, authorized-operations bit fields, ACLs
surviving a restart."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from tests.core_harness import CTX, CoreHarness, decode_frame, response_bytes
from tests.integration.rawclient import create_topics_body, fetch_topics_body, produce_body
from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import PARKED, CloseConnectionResponse, NoOpResponse
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.record.batch_builder import Record, build_batch
from tidegate.security.authorizer.acl import AclOperation as Op
from tidegate.security.authorizer.acl import AclPermissionType as Perm
from tidegate.security.authorizer.acl import PatternType as Pat
from tidegate.security.authorizer.acl import ResourceType as Res
from tidegate.server.authorization import CHECKS, UNCHECKED


def batch(value: bytes) -> bytes:
    return build_batch([Record(value, timestamp=1000)])


AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}


def ctx(user: str, protocol: str = "SASL_PLAINTEXT", address: str = "127.0.0.1"):
    return dataclasses.replace(CTX, principal=user, security_protocol=protocol, client_address=address)


ADMIN, ALICE, BOB = ctx("admin"), ctx("alice"), ctx("bob")


pytestmark = pytest.mark.harness(AUTHORIZER)


def creation(principal, op, name, rtype=Res.TOPIC, pattern=Pat.LITERAL, perm=Perm.ALLOW, host="*"):
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": op, "permission_type": perm}


def add_acls(h, *creations, as_=ADMIN):
    resp = h.request(ApiKey.CREATE_ACLS, 3, {"creations": list(creations)}, ctx=as_)
    return [r.error_code for r in resp.results]


def create_topic(h, name, partitions=1):
    # (the logs are made on a worker thread: the request parks until they are)
    resp = h.request_parked(ApiKey.CREATE_TOPICS, 7, create_topics_body(name, partitions), ctx=ADMIN)
    assert resp.topics[0].error_code == E.none


def metadata(h, who, topics=None, version=12, **extra):
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False, **extra}
    return h.request(ApiKey.METADATA, version, body, ctx=who)


def test_every_api_has_a_check_or_is_deliberately_unchecked():
    assert set(SUPPORTED_APIS) == set(CHECKS) | UNCHECKED
    assert not set(CHECKS) & UNCHECKED


def test_without_an_authorizer_acl_apis_answer_security_disabled_and_everything_is_allowed(tmp_path):
    h = CoreHarness(tmp_path / "data")
    try:
        assert add_acls(h, creation("User:a", Op.READ, "t")) == [E.security_disabled]
        resp = h.request(ApiKey.DESCRIBE_ACLS, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                                   "pattern_type_filter": 1, "principal_filter": None,
                                                   "host_filter": None, "operation": 1, "permission_type": 1})
        assert resp.error_code == E.security_disabled
        create_topic(h, "t")
        m = metadata(h, ALICE, ["t"], include_topic_authorized_operations=True)
        assert m.topics[0].topic_authorized_operations == 3576
        resp = h.request(ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True}, ctx=ALICE)
        assert resp.cluster_authorized_operations == 8096
    finally:
        h.close()


def test_acl_apis_create_describe_delete(h):
    assert add_acls(
        h,
        creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED),
        creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED),  # a duplicate: success
        creation("alice", Op.WRITE, "t"),  # no principal type
        creation("User:alice", Op.ALTER, "other", rtype=Res.CLUSTER),
        creation("User:bob", Op.READ, "g", rtype=Res.GROUP, perm=Perm.DENY),
    ) == [E.none, E.none, E.invalid_request, E.invalid_request, E.none]
    # only CLUSTER ALTER may create, CLUSTER DESCRIBE describe
    assert add_acls(h, creation("User:alice", Op.ALL, "*"), as_=ALICE) == [E.cluster_authorization_failed]
    any_filter = {"resource_type_filter": Res.ANY, "resource_name_filter": None, "pattern_type_filter": Pat.ANY,
                  "principal_filter": None, "host_filter": None, "operation": Op.ANY, "permission_type": Perm.ANY}
    assert h.request(ApiKey.DESCRIBE_ACLS, 3, any_filter, ctx=ALICE).error_code == E.cluster_authorization_failed
    resp = h.request(ApiKey.DESCRIBE_ACLS, 3, any_filter, ctx=ADMIN)
    assert resp.error_code == E.none
    got = {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation, a.permission_type)
           for r in resp.resources for a in r.acls}
    assert got == {(Res.TOPIC, "orders-", Pat.PREFIXED, "User:alice", Op.WRITE, Perm.ALLOW),
                   (Res.GROUP, "g", Pat.LITERAL, "User:bob", Op.READ, Perm.DENY)}
    match = dict(any_filter, resource_type_filter=Res.TOPIC, resource_name_filter="orders-eu",
                 pattern_type_filter=Pat.MATCH)
    assert [r.resource_name for r in h.request(ApiKey.DESCRIBE_ACLS, 1, match, ctx=ADMIN).resources] == ["orders-"]
    resp = h.request(ApiKey.DELETE_ACLS, 3, {"filters": [dict(any_filter, resource_type_filter=Res.GROUP),
                                                         dict(any_filter, resource_type_filter=Res.GROUP)]},
                     ctx=ADMIN)
    assert [len(r.matching_acls) for r in resp.filter_results] == [1, 0]
    assert resp.filter_results[0].matching_acls[0].resource_name == "g"
    assert len(h.request(ApiKey.DESCRIBE_ACLS, 3, any_filter, ctx=ADMIN).resources) == 1


def test_acls_survive_a_restart(tmp_path):
    h = CoreHarness(tmp_path / "data", AUTHORIZER)
    create_topic(h, "orders-1")
    add_acls(h, creation("User:alice", Op.DESCRIBE, "orders-", pattern=Pat.PREFIXED))
    assert [t.name for t in metadata(h, ALICE).topics] == ["orders-1"]
    h.close()
    h = CoreHarness(tmp_path / "data", AUTHORIZER)
    try:
        assert [t.name for t in metadata(h, ALICE).topics] == ["orders-1"]
        assert metadata(h, BOB).topics == ()
    finally:
        h.close()


def test_produce_partial_answer_and_transactional_id(h):
    create_topic(h, "orders-1")
    create_topic(h, "payments-1")
    add_acls(h, creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED))
    body = produce_body("orders-1", {0: batch(b"x")})
    body["topic_data"] = body["topic_data"] + produce_body("payments-1", {0: batch(b"y")})["topic_data"]
    resp = h.request(ApiKey.PRODUCE, 9, body, ctx=ALICE)
    errors = {t.name: t.partition_responses[0].error_code for t in resp.responses}
    assert errors == {"orders-1": E.none, "payments-1": E.topic_authorization_failed}
    assert h.logs.get_log("payments-1", 0).log_end_offset == 0
    assert h.logs.get_log("orders-1", 0).log_end_offset == 1
    # everything denied: answered by the step alone
    only = produce_body("payments-1", {0: batch(b"y")})
    resp = h.request(ApiKey.PRODUCE, 9, only, ctx=ALICE)
    assert resp.responses[0].partition_responses[0].error_code == E.topic_authorization_failed
    resp = h.request(ApiKey.PRODUCE, 9, dict(only, transactional_id="tx"), ctx=ALICE)
    assert resp.responses[0].partition_responses[0].error_code == E.transactional_id_authorization_failed


def test_produce_v13_by_topic_id_is_authorized_by_the_topic_name(h):
    """Produce v13 names topics by id: WRITE is checked on the name the id resolves to; an
    unknown id is UNKNOWN_TOPIC_ID (Kafka resolves before authorizing), not denied."""
    create_topic(h, "orders-1")
    create_topic(h, "payments-1")
    add_acls(h, creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED))
    ids = {name: h.store.get(name).topic_id for name in ("orders-1", "payments-1")}
    stranger = uuid.uuid4()
    body = {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch(b"x")}]}
        for topic_id in (ids["orders-1"], ids["payments-1"], stranger)
    ]}  # fmt: skip
    resp = h.request(ApiKey.PRODUCE, 13, body, ctx=ALICE)
    errors = {t.topic_id: t.partition_responses[0].error_code for t in resp.responses}
    assert errors == {ids["orders-1"]: E.none, ids["payments-1"]: E.topic_authorization_failed,
                      stranger: E.unknown_topic_id}  # fmt: skip
    assert h.logs.get_log("orders-1", 0).log_end_offset == 1
    assert h.logs.get_log("payments-1", 0).log_end_offset == 0


def test_offset_commit_and_fetch_v10_by_topic_id_are_authorized_by_the_topic_name(h):
    """OffsetCommit and OffsetFetch v10 name topics by id: READ (commit) and DESCRIBE
    (fetch) are checked on the name the id resolves to; an unknown id is UNKNOWN_TOPIC_ID
    (Kafka resolves before authorizing), not denied; a denied topic answers with its id."""
    create_topic(h, "orders-1")
    create_topic(h, "payments-1")
    add_acls(h, creation("User:alice", Op.READ, "orders-", pattern=Pat.PREFIXED),
             creation("User:alice", Op.READ, "g", rtype=Res.GROUP))  # fmt: skip
    ids = {name: h.store.get(name).topic_id for name in ("orders-1", "payments-1")}
    stranger = uuid.uuid4()
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for topic_id in (ids["orders-1"], ids["payments-1"], stranger)]}  # fmt: skip
    request, cid = h.park(ApiKey.OFFSET_COMMIT, 10, body, ctx=ALICE)
    resp = h.answer(request, cid, within_ms=6000)
    expected = {ids["orders-1"]: E.none, ids["payments-1"]: E.topic_authorization_failed,
                stranger: E.unknown_topic_id}  # fmt: skip
    assert {t.topic_id: t.partitions[0].error_code for t in resp.topics} == expected

    def fetch(topics):
        body = {"require_stable": False, "groups": [
            {"group_id": "g", "member_id": None, "member_epoch": -1, "topics": topics}]}  # fmt: skip
        return h.request(ApiKey.OFFSET_FETCH, 10, body, ctx=ALICE).groups[0]

    g = fetch([{"topic_id": topic_id, "partition_indexes": [0]} for topic_id in expected])
    assert {t.topic_id: (t.partitions[0].committed_offset, t.partitions[0].error_code) for t in g.topics} == {
        ids["orders-1"]: (3, E.none), ids["payments-1"]: (-1, E.topic_authorization_failed),
        stranger: (-1, E.unknown_topic_id),
    }  # fmt: skip
    # ADMIN commits to payments-1 too; ALICE's listing of every topic leaves it out
    h.request_parked(ApiKey.OFFSET_COMMIT, 10, dict(body, topics=body["topics"][1:2]), ctx=ADMIN)
    assert [t.topic_id for t in fetch(None).topics] == [ids["orders-1"]]
    everything = {"require_stable": False, "groups": [
        {"group_id": "g", "member_id": None, "member_epoch": -1, "topics": None}]}  # fmt: skip
    listed = h.request(ApiKey.OFFSET_FETCH, 10, everything, ctx=ADMIN).groups[0].topics
    assert sorted(t.topic_id for t in listed) == sorted([ids["orders-1"], ids["payments-1"]])


def test_produce_acks_0_denied_closes_the_connection(h):
    """acks=0 has no response to carry TOPIC_AUTHORIZATION_FAILED: as Kafka, the allowed
    topics are appended and the connection is closed (entirely denied: closed at once)."""
    create_topic(h, "orders-1")
    create_topic(h, "payments-1")
    add_acls(h, creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED))
    body = produce_body("orders-1", {0: batch(b"x")}, acks=0)
    body["topic_data"] = body["topic_data"] + produce_body("payments-1", {0: batch(b"y")})["topic_data"]
    assert isinstance(h.send(ApiKey.PRODUCE, 9, body, ctx=ALICE)[1], CloseConnectionResponse)
    assert h.logs.get_log("orders-1", 0).log_end_offset == 1
    assert h.logs.get_log("payments-1", 0).log_end_offset == 0
    only = produce_body("payments-1", {0: batch(b"y")}, acks=0)
    assert isinstance(h.send(ApiKey.PRODUCE, 9, only, ctx=ALICE)[1], CloseConnectionResponse)
    ok = produce_body("orders-1", {0: batch(b"z")}, acks=0)
    assert isinstance(h.send(ApiKey.PRODUCE, 9, ok, ctx=ALICE)[1], NoOpResponse)
    assert h.logs.get_log("orders-1", 0).log_end_offset == 2


def test_metadata_hides_and_refuses_unauthorized_topics(h):
    for name in ("orders-1", "payments-1"):
        create_topic(h, name)
    add_acls(h, creation("User:alice", Op.READ, "orders-1"))
    assert [t.name for t in metadata(h, ALICE).topics] == ["orders-1"]
    resp = metadata(h, ALICE, ["orders-1", "payments-1", "nope"], include_topic_authorized_operations=True)
    by_name = {t.name: t for t in resp.topics}
    assert by_name["orders-1"].error_code == E.none
    assert by_name["orders-1"].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert by_name["payments-1"].error_code == E.topic_authorization_failed
    assert by_name["payments-1"].partitions == ()
    assert by_name["nope"].error_code == E.topic_authorization_failed  # existence is not revealed
    assert len(metadata(h, ADMIN).topics) == 2
    # auto-creation needs CREATE
    add_acls(h, creation("User:bob", Op.DESCRIBE, "auto-", pattern=Pat.PREFIXED))
    resp = metadata(h, BOB, ["auto-1"], allow_auto_topic_creation=True)
    assert resp.topics[0].error_code == E.topic_authorization_failed
    assert h.store.get("auto-1") is None
    add_acls(h, creation("User:bob", Op.CREATE, "auto-", pattern=Pat.PREFIXED))
    resp = metadata(h, BOB, ["auto-1"], allow_auto_topic_creation=True)
    assert resp.topics[0].error_code == E.none
    # the cluster's authorized operations need CLUSTER DESCRIBE (v8-10)
    resp = metadata(h, BOB, [], version=10, include_cluster_authorized_operations=True)
    assert resp.cluster_authorized_operations == 0
    resp = metadata(h, ADMIN, [], version=10, include_cluster_authorized_operations=True)
    assert resp.cluster_authorized_operations == 8096


def test_fetch_and_list_offsets_need_read_and_describe(h):
    create_topic(h, "a")
    create_topic(h, "b")
    add_acls(h, creation("User:alice", Op.READ, "a"))
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": t, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                     "last_fetched_epoch": -1, "log_start_offset": -1,
                                                     "partition_max_bytes": 1 << 20}]} for t in ("a", "b")]}
    request, outcome, cid, _ = h.send(ApiKey.FETCH, 12, body, ctx=ALICE)
    if outcome is PARKED:
        resp = h.answer(request, cid, within_ms=10)
    else:
        resp = decode_frame(ApiKey.FETCH, 12, response_bytes(outcome), cid)
    errors = {t.topic: t.partitions[0].error_code for t in resp.responses}
    assert errors == {"a": E.none, "b": E.topic_authorization_failed}
    lo = {"replica_id": -1, "isolation_level": 0,
          "topics": [{"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                 "timestamp": -1}]} for t in ("a", "b")]}
    resp = h.request(ApiKey.LIST_OFFSETS, 7, lo, ctx=ALICE)
    errors = {t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in resp.topics}
    assert errors == {"a": (E.none, 0), "b": (E.topic_authorization_failed, -1)}


def _fetch(h, who, body):
    request, outcome, cid, _ = h.send(ApiKey.FETCH, 12, body, ctx=who)
    if outcome is PARKED:
        return h.answer(request, cid, within_ms=10)
    return decode_frame(ApiKey.FETCH, 12, response_bytes(outcome), cid)


def test_an_acl_removed_applies_to_the_next_fetch_of_a_session(h):
    """KIP-227: an incremental fetch names no partitions, the session does; they are
    authorized on every fetch, so removing READ stops the consumer's next poll."""
    create_topic(h, "a")
    acl = creation("User:alice", Op.READ, "a")
    add_acls(h, acl)
    full = fetch_topics_body([("a", None, [(0, 0, 1 << 20)])], session_epoch=0, min_bytes=0)
    resp = _fetch(h, ALICE, full)
    assert resp.error_code == E.none and resp.session_id > 0
    assert resp.responses[0].partitions[0].error_code == E.none
    incremental = fetch_topics_body([], session_id=resp.session_id, session_epoch=1, min_bytes=0)
    deleted = h.request(ApiKey.DELETE_ACLS, 3, {"filters": [{
        "resource_type_filter": Res.TOPIC, "resource_name_filter": "a", "pattern_type_filter": Pat.LITERAL,
        "principal_filter": "User:alice", "host_filter": None, "operation": Op.READ,
        "permission_type": Perm.ALLOW}]}, ctx=ADMIN)
    assert deleted.filter_results[0].error_code == E.none
    resp = _fetch(h, ALICE, incremental)
    assert [(t.topic, t.partitions[0].error_code) for t in resp.responses] == [
        ("a", E.topic_authorization_failed)]
    # READ given back: the partition (unchanged, but last answered with an error) is
    # answered again on the next incremental fetch, then no more while nothing changes
    add_acls(h, acl)
    for epoch, expected in ((2, [("a", E.none)]), (3, [])):
        body = fetch_topics_body([], session_id=resp.session_id, session_epoch=epoch, min_bytes=0)
        got = _fetch(h, ALICE, body)
        assert [(t.topic, t.partitions[0].error_code) for t in got.responses] == expected


def test_groups_need_read_on_the_group_and_the_topics(h):
    create_topic(h, "a")
    create_topic(h, "b")
    add_acls(h, creation("User:alice", Op.READ, "a"), creation("User:alice", Op.READ, "b"))
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t in ("a", "b")]}
    resp = h.request(ApiKey.OFFSET_COMMIT, 8, body, ctx=ALICE)
    assert {p.error_code for t in resp.topics for p in t.partitions} == {E.group_authorization_failed}
    fc = h.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}, ctx=ALICE)
    assert fc.error_code == E.group_authorization_failed
    add_acls(h, creation("User:alice", Op.READ, "g", rtype=Res.GROUP),
             creation("User:alice", Op.READ, "b", perm=Perm.DENY))
    assert h.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}, ctx=ALICE).error_code == E.none
    request, cid = h.park(ApiKey.OFFSET_COMMIT, 8, body, ctx=ALICE)
    resp = h.answer(request, cid, within_ms=6000)
    errors = {t.name: t.partitions[0].error_code for t in resp.topics}
    assert errors == {"a": E.none, "b": E.topic_authorization_failed}
    fetch = h.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None, "require_stable": False},
                      ctx=ALICE)
    assert [(t.name, t.partitions[0].committed_offset) for t in fetch.topics] == [("a", 0)]
    resp = h.request(ApiKey.HEARTBEAT, 4, {"group_id": "other", "generation_id": 1, "member_id": "m",
                                           "group_instance_id": None}, ctx=ALICE)
    assert resp.error_code == E.group_authorization_failed
    resp = h.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g", "other"], "include_authorized_operations": True},
                     ctx=ALICE)
    by_id = {g.group_id: g for g in resp.groups}
    assert by_id["other"].error_code == E.group_authorization_failed
    assert by_id["g"].error_code == E.none
    assert by_id["g"].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_transactional_and_idempotent_producer_ids(h):
    body = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    assert h.request(ApiKey.INIT_PRODUCER_ID, 4, body, ctx=ALICE).error_code == E.cluster_authorization_failed
    # WRITE on any topic (here a prefix) is enough for an idempotent producer (Kafka 4.0)
    add_acls(h, creation("User:alice", Op.WRITE, "orders-", pattern=Pat.PREFIXED))
    assert h.request(ApiKey.INIT_PRODUCER_ID, 4, body, ctx=ALICE).error_code == E.none
    assert h.request(ApiKey.INIT_PRODUCER_ID, 4, body, ctx=BOB).error_code == E.cluster_authorization_failed
    add_acls(h, creation("User:bob", Op.IDEMPOTENT_WRITE, "kafka-cluster", rtype=Res.CLUSTER))
    assert h.request(ApiKey.INIT_PRODUCER_ID, 4, body, ctx=BOB).error_code == E.none
    txn = dict(body, transactional_id="tx-1")
    resp = h.request(ApiKey.INIT_PRODUCER_ID, 4, txn, ctx=ALICE)
    assert resp.error_code == E.transactional_id_authorization_failed
    resp = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-1"]}, ctx=ALICE)
    assert resp.coordinators[0].error_code == E.transactional_id_authorization_failed
    end = {"transactional_id": "tx-1", "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert h.request(ApiKey.END_TXN, 3, end, ctx=ALICE).error_code == E.transactional_id_authorization_failed
    add_acls(h, creation("User:alice", Op.WRITE, "tx-", rtype=Res.TRANSACTIONAL_ID, pattern=Pat.PREFIXED))
    resp = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-1"]}, ctx=ALICE)
    assert resp.coordinators[0].error_code != E.transactional_id_authorization_failed
    offsets = {"transactional_id": "tx-1", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
    assert h.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, offsets, ctx=ALICE).error_code == E.group_authorization_failed
    add = {"v3_and_below_transactional_id": "tx-1", "v3_and_below_producer_id": 1,
           "v3_and_below_producer_epoch": 0,
           "v3_and_below_topics": [{"name": "orders-1", "partitions": [0]}, {"name": "x", "partitions": [0]}]}
    resp = h.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add, ctx=ALICE)
    errors = {t.name: t.results_by_partition[0].partition_error_code for t in resp.results_by_topic_v3_and_below}
    assert errors == {"orders-1": E.operation_not_attempted, "x": E.topic_authorization_failed}


def test_cluster_level_admin_apis(h):
    create_topic(h, "t")
    resp = h.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}, ctx=ALICE)
    assert {r.resource_type: r.error_code for r in resp.results} == {
        2: E.topic_authorization_failed, 4: E.cluster_authorization_failed}
    add_acls(h, creation("User:alice", Op.ALTER_CONFIGS, "t"))
    resp = h.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}, ctx=ALICE)
    errors = {r.resource_type: r.error_code for r in resp.results}
    assert errors == {2: E.none, 4: E.cluster_authorization_failed}  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    resp = h.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}, ctx=ALICE)
    assert resp.error_code == E.cluster_authorization_failed and resp.results == ()
    resp = h.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [{"name": "bob", "mechanism": 1}],
                                                              "upsertions": []}, ctx=ALICE)
    assert [(r.user, r.error_code) for r in resp.results] == [("bob", E.cluster_authorization_failed)]
    resp = h.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "t", "topic_id": None}], "timeout": 1000},
                     ctx=ALICE)
    assert resp.responses[0].error_code == E.topic_authorization_failed
    assert h.store.get("t") is not None
    resp = h.request(ApiKey.CREATE_TOPICS, 7, create_topics_body("new"), ctx=ALICE)
    assert resp.topics[0].error_code == E.topic_authorization_failed
    resp = h.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []}, ctx=ALICE)
    assert resp.error_code == E.none


def test_denials_are_counted_by_api(h):
    create_topic(h, "t")
    metadata(h, ALICE, ["t"])
    metadata(h, ALICE, ["t"])
    add_acls(h, creation("User:x", Op.READ, "t"), as_=ALICE)
    assert h.core.authorizer.denied_by_api == {"Metadata": 2, "CreateAcls": 1}


def test_host_of_the_acl_is_compared_with_the_client_address(h):
    create_topic(h, "t")
    add_acls(h, creation("User:alice", Op.DESCRIBE, "t", host="10.0.0.7"))
    assert [t.name for t in metadata(h, ctx("alice", address="10.0.0.7")).topics] == ["t"]
    assert metadata(h, ctx("alice", address="10.0.0.8")).topics == ()


def test_authorizer_metrics(h):
    from tidegate.metrics.prometheus import BrokerMetrics

    create_topic(h, "t")
    add_acls(h, creation("User:alice", Op.READ, "t"))
    metadata(h, BOB, ["t"])
    metrics = BrokerMetrics()
    metrics.register_authorizer(h.core.authorizer)
    text = metrics.exposition().decode()
    assert "kafka_security_authorizer_metrics_acls_total_count 1.0" in text
    assert 'kafka_security_authorizer_metrics_authorization_denied_by_api_total{request="Metadata"} 1.0' in text
    assert "kafka_security_authorizer_metrics_authorization_denied_total 1.0" in text


GROUP_BODIES = {
    ApiKey.JOIN_GROUP: {
        "group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "m",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    },
    ApiKey.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                        "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
    ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
    ApiKey.LEAVE_GROUP: {"group_id": "g", "member_id": "m",
                         "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]},
}  # fmt: skip


@pytest.mark.parametrize("key", [ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP])
def test_group_denials_encode_at_every_version(h, key):
    r = SUPPORTED_APIS[key]
    for version in range(r.min_version, r.max_version + 1):
        assert h.request(key, version, GROUP_BODIES[key], ctx=ALICE).error_code == E.group_authorization_failed, version


def test_find_coordinator_and_offset_apis_denials_at_every_version(h):
    create_topic(h, "t")
    r = SUPPORTED_APIS[ApiKey.FIND_COORDINATOR]
    for version in range(r.min_version, r.max_version + 1):
        body = {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}
        resp = h.request(ApiKey.FIND_COORDINATOR, version, body, ctx=ALICE)
        error = resp.coordinators[0].error_code if version >= 4 else resp.error_code
        assert error == E.group_authorization_failed, version
    commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
              "retention_time": -1,
              "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                       "committed_leader_epoch": -1,
                                                       "committed_metadata": ""}]}]}
    r = SUPPORTED_APIS[ApiKey.OFFSET_COMMIT]
    for version in range(r.min_version, r.max_version + 1):
        resp = h.request(ApiKey.OFFSET_COMMIT, version, commit, ctx=ALICE)
        assert resp.topics[0].partitions[0].error_code == E.group_authorization_failed, version
    r = SUPPORTED_APIS[ApiKey.OFFSET_FETCH]
    for version in range(r.min_version, r.max_version + 1):
        body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": False,
                "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                            "topics": [{"name": "t", "partition_indexes": [0]}]}]}
        resp = h.request(ApiKey.OFFSET_FETCH, version, body, ctx=ALICE)
        if version >= 8:
            assert resp.groups[0].error_code == E.group_authorization_failed
        elif version >= 2:
            assert resp.error_code == E.group_authorization_failed, version
    r = SUPPORTED_APIS[ApiKey.DESCRIBE_GROUPS]
    for version in range(r.min_version, r.max_version + 1):
        resp = h.request(ApiKey.DESCRIBE_GROUPS, version, {"groups": ["g"], "include_authorized_operations": True},
                         ctx=ALICE)
        assert resp.groups[0].error_code == E.group_authorization_failed, version


@pytest.mark.parametrize("key", [ApiKey.PRODUCE, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.CREATE_TOPICS,
                                 ApiKey.DELETE_TOPICS, ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN,
                                 ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.DESCRIBE_CONFIGS, ApiKey.CREATE_ACLS,
                                 ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_LOG_DIRS])
def test_denials_encode_at_every_version(h, key):
    """Every version's denial answer encodes (a field missing before some version is dropped)."""
    create_topic(h, "t")
    bodies = {
        ApiKey.PRODUCE: dict(produce_body("t", {0: batch(b"x")}), acks=1),
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "isolation_level": 0, "timeout": 1000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
        ApiKey.METADATA: {"topics": [{"name": "t"}], "allow_auto_topic_creation": False,
                          "include_cluster_authorized_operations": True, "include_topic_authorized_operations": True},
        ApiKey.CREATE_TOPICS: create_topics_body("new"),
        ApiKey.DELETE_TOPICS: {"topic_names": ["t"], "topics": [{"name": "t", "topic_id": None}], "timeout": 1000},
        ApiKey.INIT_PRODUCER_ID: {"transactional_id": "x", "transaction_timeout": 1000, "producer_id": -1,
                                  "producer_epoch": -1},
        ApiKey.END_TXN: {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True},
        ApiKey.ADD_OFFSETS_TO_TXN: {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
        ApiKey.DESCRIBE_CONFIGS: {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                                  "include_synonyms": False, "include_documentation": False},
        ApiKey.CREATE_ACLS: {"creations": [creation("User:a", Op.READ, "t")]},
        ApiKey.DESCRIBE_ACLS: {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
        ApiKey.DELETE_ACLS: {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                                          "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                          "operation": 1, "permission_type": 1}]},
        ApiKey.DESCRIBE_LOG_DIRS: {"topics": None},
    }
    r = SUPPORTED_APIS[key]
    for version in range(r.min_version, r.max_version + 1):
        body = bodies[key]
        if key == ApiKey.PRODUCE and version >= 13:  # topics by id
            body = dict(body, topic_data=[{"topic_id": h.store.get("t").topic_id,
                                           "partition_data": body["topic_data"][0]["partition_data"]}])  # fmt: skip
        h.request(key, version, body, ctx=ALICE)  # decodes: the answer was well-formed
    assert sum(h.core.authorizer.denied_by_api.values()) >= r.max_version - r.min_version + 1


def test_topic_admin_apis_per_topic(h):
    for t in ("mine", "theirs"):
        create_topic(h, t, partitions=2)
    add_acls(h, creation("User:alice", Op.ALL, "mine"))
    resp = h.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": t, "count": 3, "assignments": None}
                                                              for t in ("mine", "theirs")],
                                                   "timeout": 1000, "validate_only": True}, ctx=ALICE)
    assert {r.name: r.error_code for r in resp.results} == {"mine": E.none, "theirs": E.topic_authorization_failed}
    resp = h.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": t, "partitions": [{"partition_index": 0,
                                                                                         "offset": 0}]}
                                                           for t in ("mine", "theirs")], "timeout": 1000},
                     ctx=ALICE)
    assert {t.name: (t.partitions[0].error_code, t.partitions[0].low_watermark) for t in resp.topics} == {
        "mine": (E.none, 0), "theirs": (E.topic_authorization_failed, -1)}
    resp = h.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": t, "partition_indexes": [0, 1]}
                                                               for t in ("mine", "theirs")]}, ctx=ALICE)
    assert {t.name: [p.error_code for p in t.partitions] for t in resp.topics} == {
        "mine": [E.none, E.none], "theirs": [E.topic_authorization_failed] * 2}
    resp = h.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [], "response_partition_limit": 100,
                                                           "cursor": None}, ctx=ALICE)
    assert [(t.name, t.topic_authorized_operations) for t in resp.topics] == [("mine", 3576)]
    resp = h.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "theirs"}],
                                                           "response_partition_limit": 100, "cursor": None},
                     ctx=ALICE)
    assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [
        ("theirs", E.topic_authorization_failed, ())]
    resp = h.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True}, ctx=ALICE)
    assert resp.cluster_authorized_operations == 0
    add_acls(h, creation("User:alice", Op.DESCRIBE, "kafka-cluster", rtype=Res.CLUSTER))
    resp = h.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True}, ctx=ALICE)
    assert resp.cluster_authorized_operations == 1 << Op.DESCRIBE


def test_group_admin_apis_per_group(h):
    create_topic(h, "t")
    for group in ("mine", "theirs"):
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        request, cid = h.park(ApiKey.OFFSET_COMMIT, 8, body, ctx=ADMIN)
        assert h.answer(request, cid, within_ms=6000).topics[0].partitions[0].error_code == E.none
    add_acls(h, creation("User:alice", Op.ALL, "mine", rtype=Res.GROUP))
    resp = h.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []}, ctx=ALICE)
    assert [g.group_id for g in resp.groups] == ["mine"]
    assert len(h.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []}, ctx=ADMIN).groups) == 2
    resp = h.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "theirs", "topics": []}, ctx=ALICE)
    assert resp.error_code == E.group_authorization_failed
    resp = h.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["mine", "theirs"]}, ctx=ALICE)
    assert {r.group_id: r.error_code for r in resp.results} == {
        "mine": E.none, "theirs": E.group_authorization_failed}


def test_metadata_v0_with_every_named_topic_denied_lists_nothing_else(h):
    create_topic(h, "t")
    create_topic(h, "u")
    resp = h.request(ApiKey.METADATA, 0, {"topics": [{"name": "t"}]}, ctx=ALICE)
    assert [(t.name, t.error_code) for t in resp.topics] == [("t", E.topic_authorization_failed)]
    assert len(resp.brokers) == 1
