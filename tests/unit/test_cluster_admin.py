"""The cluster's admin APIs as a single-node KRaft cluster answers them, through KafkaApis:
DescribeLogDirs, AlterReplicaLogDirs, DescribeTopicPartitions (KIP-966), DescribeProducers,
ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum, Add/RemoveRaftVoter,
UnregisterBroker, ListConfigResources (KIP-1142), the delegation-token APIs and the KIP-848
group APIs (refused as a classic-only Kafka refuses them)."""

from __future__ import annotations

import os
import struct
import uuid

import pytest

from tests.core_harness import CTX, CoreHarness
from tests.unit.test_apis import NOW, batch
from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import RequestContext
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.topic_admin import TOPIC_AUTHORIZED_OPERATIONS

ZERO_UUID = uuid.UUID(int=0)
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
CREATE_TOKEN, RENEW_TOKEN, EXPIRE_TOKEN, DESCRIBE_TOKEN = 38, 39, 40, 41
ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
DESCRIBE_QUORUM, DESCRIBE_PRODUCERS, UNREGISTER_BROKER = 55, 61, 64
LIST_CONFIG_RESOURCES, DESCRIBE_TOPIC_PARTITIONS = 74, 75
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER = 80, 81


def log_dir(h: CoreHarness) -> str:
    return os.path.abspath(h.root)


# -- DescribeLogDirs / AlterReplicaLogDirs --------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_sizes_every_partition_of_the_one_log_dir(h, version):
    h.create_topic("a", 2)
    h.create_topic("b")
    h.produce("a", 1, batch(b"x" * 100))
    h.produce("b", 0, batch(b"y"))
    resp = h.request(DESCRIBE_LOG_DIRS, version, {"topics": None})
    assert len(resp.results) == 1
    r = resp.results[0]
    assert (r.error_code, r.log_dir) == (E.none, log_dir(h))
    sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
             for t in r.topics for p in t.partitions}
    assert sizes == {
        ("a", 0): (0, 0, False),
        ("a", 1): (h.replicas.get_log("a", 1).size_bytes, 0, False),
        ("b", 0): (h.replicas.get_log("b", 0).size_bytes, 0, False),
    }
    assert sizes[("a", 1)][0] == len(batch(b"x" * 100))
    if version >= 4:
        st = os.statvfs(h.root)
        assert r.total_bytes == st.f_blocks * st.f_frsize
        assert 0 < r.usable_bytes <= r.total_bytes
    if version >= 3:
        assert resp.error_code == E.none


def test_describe_log_dirs_of_named_partitions_leaves_out_empty_topics(h):
    h.create_topic("a", 2)
    h.create_topic("b")
    body = {"topics": [{"topic": "a", "partitions": [1, 5]}, {"topic": "b", "partitions": []},
                       {"topic": "nope", "partitions": [0]}]}
    r = h.request(DESCRIBE_LOG_DIRS, 4, body).results[0]
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics] == [("a", [1])]


@pytest.mark.parametrize("version", [1, 2])
def test_alter_replica_log_dirs_with_one_log_dir(h, version):
    h.create_topic("a", 2)
    body = {"dirs": [
        {"path": log_dir(h), "topics": [{"name": "a", "partitions": [0, 7]}, {"name": "nope", "partitions": [0]}]},
        {"path": "/elsewhere", "topics": [{"name": "a", "partitions": [1]}]},
        {"path": log_dir(h), "topics": [{"name": "x" * 249, "partitions": [0]}]},
    ]}
    resp = h.request(ALTER_REPLICA_LOG_DIRS, version, body)
    got = {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}
    assert got == {
        ("a", 0): E.none,  # already there
        ("a", 7): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
        ("a", 1): E.log_dir_not_found,
        ("x" * 249, 0): E.invalid_topic_exception,  # its future dir name exceeds 255
    }
    assert h.replicas.get_log("a", 0).directory.parent == h.root  # nothing moved


# -- DescribeTopicPartitions (KIP-966) -------------------------------------------------------


def describe_partitions(h, topics=(), limit=2000, cursor=None):
    body = {
        "topics": [{"name": t} for t in topics],
        "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    resp = h.request(DESCRIBE_TOPIC_PARTITIONS, 0, body)
    nxt = resp.next_cursor
    return (
        [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics],
        None if nxt is None else (nxt.topic_name, nxt.partition_index),
        resp,
    )


def test_describe_topic_partitions_pages_with_the_cursor(h):
    ids = {name: h.create_topic(name, n) for name, n in (("c", 1), ("a", 3), ("b", 2))}
    topics, nxt, resp = describe_partitions(h, limit=2)
    assert (topics, nxt) == ([("a", E.none, [0, 1])], ("a", 2))
    t = resp.topics[0]
    assert (t.topic_id, t.is_internal, t.topic_authorized_operations) == (ids["a"], False, 3576)
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes)) == (1, 0, (1,), (1,))
    assert (tuple(p.eligible_leader_replicas), tuple(p.last_known_elr), tuple(p.offline_replicas)) == ((), (), ())
    topics, nxt, _ = describe_partitions(h, limit=2, cursor=("a", 2))
    assert (topics, nxt) == ([("a", E.none, [2]), ("b", E.none, [0])], ("b", 1))
    topics, nxt, _ = describe_partitions(h, limit=2, cursor=("b", 1))
    assert (topics, nxt) == ([("b", E.none, [1]), ("c", E.none, [0])], None)
    # a budget that ends exactly with a topic points at the next topic's first partition
    topics, nxt, _ = describe_partitions(h, limit=3)
    assert (topics, nxt) == ([("a", E.none, [0, 1, 2])], ("b", 0))
    # the budget is clamped to [1, 2000]
    assert describe_partitions(h, limit=0)[:2] == ([("a", E.none, [0])], ("a", 1))
    assert describe_partitions(h, limit=5000)[1] is None
    assert TOPIC_AUTHORIZED_OPERATIONS == 3576


def test_describe_topic_partitions_of_named_topics(h):
    h.create_topic("c")
    h.logs.create_topic("__consumer_offsets", 1, {})
    topics, nxt, resp = describe_partitions(h, ["nope", "c", "bad name", "__consumer_offsets"])
    assert topics == [  # in name order, unknown ones with their error
        ("__consumer_offsets", E.none, [0]),
        ("bad name", E.invalid_topic_exception, []),
        ("c", E.none, [0]),
        ("nope", E.unknown_topic_or_partition, []),
    ]
    assert nxt is None
    assert [t.is_internal for t in resp.topics] == [True, False, False, False]
    # a cursor past a topic's partitions gives it with none
    assert describe_partitions(h, ["c"], cursor=("c", 5))[:2] == ([("c", E.none, [])], None)


def test_describe_topic_partitions_rejects_a_bad_cursor(h):
    h.create_topic("c")
    topics, nxt, _ = describe_partitions(h, ["c"], cursor=("d", 0))  # not among the topics
    assert (topics, nxt) == ([("c", E.invalid_request, [])], None)
    topics, _, _ = describe_partitions(h, ["c"], cursor=("c", -1))
    assert topics == [("c", E.invalid_request, [])]


# -- DescribeProducers -------------------------------------------------------------------


def test_describe_producers_lists_each_partitions_idempotent_producers(h):
    h.create_topic("p", 2)

    def pbatch(pid, seq, n, epoch=0):
        return build_batch(
            [Record(b"v", timestamp=NOW + i) for i in range(n)],
            producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        )

    h.produce("p", 0, pbatch(2000, 0, 3))
    h.produce("p", 0, pbatch(1000, 0, 2, epoch=4))
    h.produce("p", 0, pbatch(1000, 2, 1, epoch=4))
    h.produce("p", 0, batch(b"plain"))  # not idempotent: not tracked
    body = {"topics": [{"name": "p", "partition_indexes": [0, 1, 9]}, {"name": "nope", "partition_indexes": [0]},
                       {"name": "", "partition_indexes": [3]}]}
    resp = h.request(DESCRIBE_PRODUCERS, 0, body)
    got = {(t.name, p.partition_index): (p.error_code, p.error_message,
                                          [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                            s.coordinator_epoch, s.current_txn_start_offset)
                                           for s in p.active_producers])
           for t in resp.topics for p in t.partitions}
    assert got == {
        ("p", 0): (E.none, None, [(1000, 4, 2, NOW, -1, -1), (2000, 0, 2, NOW + 2, -1, -1)]),
        ("p", 1): (E.none, None, []),
        ("p", 9): (E.unknown_topic_or_partition, None, []),
        ("nope", 0): (E.unknown_topic_or_partition, "This server does not host this topic-partition.", []),
        ("", 3): (E.invalid_topic_exception, "Topic name is illegal, it can't be empty", []),
    }


# -- ElectLeaders and reassignments ------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_is_never_needed_on_one_broker(h, version):
    h.create_topic("a", 2)
    body = {"election_type": 0, "timeout": 1000,
            "topic_partitions": [{"topic": "a", "partitions": [0, 1, 4]}, {"topic": "nope", "partitions": [0]}]}
    resp = h.request(ELECT_LEADERS, version, body)
    got = [(r.topic, p.partition_id, p.error_code, p.error_message)
           for r in resp.replica_election_results for p in r.partition_result]
    assert got == [
        ("a", 0, E.election_not_needed, "Leader election not needed for topic partition."),
        ("a", 1, E.election_not_needed, "Leader election not needed for topic partition."),
        ("a", 4, E.unknown_topic_or_partition, "No such partition as a-4"),
        ("nope", 0, E.unknown_topic_or_partition, "No such topic as nope"),
    ]
    if version >= 1:
        assert resp.error_code == E.none


def test_elect_leaders_for_all_partitions_lists_each_topic_with_none_elected(h):
    h.create_topic("b", 2)
    h.create_topic("a")
    resp = h.request(ELECT_LEADERS, 2, {"election_type": 1, "timeout": 1000, "topic_partitions": None})
    assert [(r.topic, list(r.partition_result)) for r in resp.replica_election_results] == [("a", []), ("b", [])]
    resp = h.request(ELECT_LEADERS, 1, {"election_type": 1, "timeout": 1000,
                                        "topic_partitions": [{"topic": "a", "partitions": [0]}]})
    assert resp.replica_election_results[0].partition_result[0].error_code == E.election_not_needed


def test_elect_leaders_unknown_election_type(h):
    h.create_topic("a")
    resp = h.request(ELECT_LEADERS, 2, {"election_type": 7, "timeout": 1000,
                                        "topic_partitions": [{"topic": "a", "partitions": [0]}]})
    assert resp.error_code == E.invalid_request
    p = resp.replica_election_results[0].partition_result[0]
    assert (p.error_code, p.error_message) == (E.invalid_request, "Unknown election type 7")


def test_alter_partition_reassignments_as_the_controller_answers_with_one_broker(h):
    h.create_topic("a", 2)
    parts = [
        {"partition_index": 0, "replicas": [1]},  # where it is: nothing to change
        {"partition_index": 1, "replicas": None},  # cancel: nothing in progress
        {"partition_index": 1, "replicas": []},
        {"partition_index": 1, "replicas": [3, 1]},
        {"partition_index": 1, "replicas": [1, 1]},
        {"partition_index": 5, "replicas": [1]},
    ]
    body = {"timeout": 1000, "topics": [{"name": "a", "partitions": parts},
                                        {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}
    resp = h.request(ALTER_REASSIGNMENTS, 0, body)
    assert (resp.error_code, resp.error_message) == (E.none, None)
    got = [(r.name, p.partition_index, p.error_code, p.error_message) for r in resp.responses for p in r.partitions]
    assert got == [
        ("a", 0, E.none, None),
        ("a", 1, E.no_reassignment_in_progress, None),
        ("a", 1, E.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."),
        ("a", 1, E.invalid_replica_assignment,
         "The manual partition assignment includes broker 3, but no such broker is registered."),
        ("a", 1, E.invalid_replica_assignment,
         "The manual partition assignment includes the broker 1 more than once."),
        ("a", 5, E.unknown_topic_or_partition, "Unable to find partition a:5."),
        ("nope", 0, E.unknown_topic_or_partition, "Unable to find a topic named nope."),
    ]


def test_list_partition_reassignments_has_nothing_in_progress(h):
    h.create_topic("a")
    for topics in (None, [{"name": "a", "partition_indexes": [0]}]):
        resp = h.request(LIST_REASSIGNMENTS, 0, {"timeout": 1000, "topics": topics})
        assert (resp.error_code, resp.error_message, list(resp.topics)) == (E.none, None, [])


# -- the quorum ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_one_voter(h, version):
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    resp = h.request(DESCRIBE_QUORUM, version, body)
    assert resp.error_code == E.none
    p = resp.topics[0].partitions[0]
    assert (resp.topics[0].topic_name, p.partition_index, p.error_code) == ("__cluster_metadata", 0, E.none)
    assert (p.leader_id, p.leader_epoch, p.high_watermark) == (1, 1, 0)
    assert list(p.observers) == []
    (voter,) = p.current_voters
    assert (voter.replica_id, voter.log_end_offset) == (1, 0)
    if version >= 1:  # the leader is always caught up: now, on fake time
        assert voter.last_fetch_timestamp == voter.last_caught_up_timestamp == h.clock.wall_milliseconds()
    if version >= 2:
        assert voter.replica_directory_id is None  # a static voter set: the zero uuid (kio: None)
        assert [(n.node_id, [(lst.name, lst.host, lst.port) for lst in n.listeners]) for n in resp.nodes] == [
            (1, [("PLAINTEXT", "127.0.0.1", 9092)])
        ]


def test_describe_quorum_of_another_partition_is_unknown(h):
    body = {"topics": [{"topic_name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]}
    resp = h.request(DESCRIBE_QUORUM, 2, body)
    got = [(p.partition_index, p.error_code, p.error_message) for p in resp.topics[0].partitions]
    assert got == [(i, E.unknown_topic_or_partition, "This server does not host this topic-partition.")
                   for i in (0, 1)]


@pytest.mark.parametrize(("key", "verb", "doing"), [(ADD_RAFT_VOTER, "Add", "adding"),
                                                    (REMOVE_RAFT_VOTER, "Remove", "removing")])
def test_raft_voter_changes_are_refused_by_a_static_quorum(h, key, verb, doing):
    def call(**kw):
        body = {"cluster_id": None, "voter_id": 2, "voter_directory_id": uuid.uuid4(), **kw}
        if key == ADD_RAFT_VOTER:
            body.update(timeout=1000, listeners=[{"name": "CONTROLLER", "host": "h", "port": 9093}])
        r = h.request(key, 0, body)
        return r.error_code, r.error_message

    assert call() == (E.unsupported_version,
                      f"Cluster doesn't support {doing} voter because the kraft.version feature is 0")
    assert call(cluster_id="test-cluster")[0] == E.unsupported_version
    assert call(cluster_id="other") == (
        E.inconsistent_cluster_id, 'The given id "other" doesn\'t match the cluster id "test-cluster"')
    assert call(voter_directory_id=ZERO_UUID) == (E.invalid_request, f"{verb} voter request didn't include a valid voter")


def test_unregister_broker(h):
    r = h.request(UNREGISTER_BROKER, 0, {"broker_id": 7})
    assert (r.error_code, r.error_message) == (E.broker_id_not_registered, "Broker ID 7 is not currently registered")
    r = h.request(UNREGISTER_BROKER, 0, {"broker_id": 1})
    assert (r.error_code, r.error_message) == (E.none, None)


def test_list_config_resources_v0_lists_client_metrics_only_and_there_are_none(h):
    """v0 is KIP-714's ListClientMetricsResources: no subscriptions (no telemetry receiver)."""
    h.create_topic("a")
    r = h.request(LIST_CONFIG_RESOURCES, 0, {})
    assert (r.error_code, list(r.config_resources)) == (E.none, [])


def listed(h, types: list[int]) -> tuple[int, list[tuple[int, str]]]:
    r = h.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": types})
    return r.error_code, sorted((c.resource_type, c.resource_name) for c in r.config_resources)


def test_list_config_resources_v1_lists_every_type_or_the_requested_ones(h):
    """As Kafka's KafkaApis: groups with configs, this node as BROKER and BROKER_LOGGER,
    every topic; an empty list means every type v1 has."""
    h.create_topic("a")
    h.create_topic("b")
    h.core.group_configs.alter("g1", {"consumer.session.timeout.ms": "50000"})
    h.core.group_configs.alter("g2", {"consumer.heartbeat.interval.ms": "6000"})
    h.core.group_configs.alter("g2", {"consumer.heartbeat.interval.ms": None})  # none left
    every = [(TOPIC, "a"), (TOPIC, "b"), (BROKER, "1"), (BROKER_LOGGER, "1"), (GROUP, "g1")]
    assert listed(h, []) == (E.none, sorted(every))
    assert listed(h, [TOPIC]) == (E.none, [(TOPIC, "a"), (TOPIC, "b")])
    assert listed(h, [GROUP, BROKER]) == (E.none, [(BROKER, "1"), (GROUP, "g1")])
    assert listed(h, [CLIENT_METRICS]) == (E.none, [])


@pytest.mark.parametrize("types", [[1], [TOPIC, 64]])
def test_list_config_resources_of_a_type_the_version_lacks_is_unsupported_version(h, types):
    assert listed(h, types) == (E.unsupported_version, [])


# -- delegation tokens: disabled ------------------------------------------------------------

SASL_CTX = RequestContext(8, "SASL_PLAINTEXT", "127.0.0.1", 40001, principal="alice",
                          security_protocol="SASL_PLAINTEXT")
SSL_ANONYMOUS = RequestContext(9, "SSL", "127.0.0.1", 40002, principal="ANONYMOUS", security_protocol="SSL")


def raw_answer(h: CoreHarness, key: int, version: int, body: dict, ctx: RequestContext) -> bytes:
    """The response body bytes (kio's decoder refuses the -1 timestamps Kafka sends)."""
    from tests.core_harness import response_bytes

    _request, outcome, _cid, _released = h.send(key, version, body, ctx=ctx)
    return response_bytes(outcome)[8:]  # size, correlation id (v1: header v0)


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, pos)
    return data[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


@pytest.mark.parametrize("ctx", [CTX, SSL_ANONYMOUS])
def test_delegation_tokens_are_not_allowed_on_plaintext_or_one_way_ssl(h, ctx):
    body = {"owner_principal_type": None, "owner_principal_name": None, "renewers": [], "max_lifetime": -1}
    data = raw_answer(h, CREATE_TOKEN, 1, body, ctx)
    (error,) = struct.unpack_from(">h", data, 0)
    ptype, pos = read_string(data, 2)
    pname, pos = read_string(data, pos)
    issue, expiry, maximum = struct.unpack_from(">qqq", data, pos)
    assert (error, ptype, pname, issue, expiry, maximum) == (64, "User", "ANONYMOUS", -1, -1, -1)
    for key in (RENEW_TOKEN, EXPIRE_TOKEN):
        period = {"renew_period": 1000} if key == RENEW_TOKEN else {"expiry_time_period": 1000}
        data = raw_answer(h, key, 1, {"hmac": b"x", **period}, ctx)
        assert struct.unpack_from(">hq", data, 0) == (64, -1)
    r = h.request(DESCRIBE_TOKEN, 3, {"owners": None}, ctx=ctx)
    assert (r.error_code, list(r.tokens)) == (E.delegation_token_request_not_allowed, [])


def test_delegation_tokens_are_disabled_elsewhere(h):
    body = {"owner_principal_type": "User", "owner_principal_name": "bob", "renewers": [], "max_lifetime": -1}
    r = h.request(CREATE_TOKEN, 3, body, ctx=SASL_CTX)
    assert r.error_code == E.delegation_token_auth_disabled
    assert (r.principal_type, r.principal_name) == ("User", "bob")
    assert (r.token_requester_principal_type, r.token_requester_principal_name) == ("User", "alice")
    bad = {**body, "renewers": [{"principal_type": "Group", "principal_name": "g"}]}
    data = raw_answer(h, CREATE_TOKEN, 1, bad, SASL_CTX)
    assert struct.unpack_from(">h", data, 0) == (67,)  # INVALID_PRINCIPAL_TYPE
    assert h.request(RENEW_TOKEN, 2, {"hmac": b"x", "renew_period": 1000}, ctx=SASL_CTX).error_code == (
        E.delegation_token_auth_disabled)
    assert h.request(EXPIRE_TOKEN, 2, {"hmac": b"x", "expiry_time_period": 1000}, ctx=SASL_CTX).error_code == (
        E.delegation_token_auth_disabled)
    assert h.request(DESCRIBE_TOKEN, 3, {"owners": []}, ctx=SASL_CTX).error_code == E.delegation_token_auth_disabled

