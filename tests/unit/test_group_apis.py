"""The group APIs on the wire, sans-IO: encoded requests through KafkaApis.handle.

The broker's core runs on fake time (tests/core_harness): parked JoinGroup/SyncGroup
requests and offset commits waiting for their fsync are answered through the
request channel once the coordinator or the flusher completes them. The state machine itself is
tested in test_group_coordinator.py; here: versions, field mapping, errors as the
clients see them, the internal topic's protection, and durability through the
broker's own ReplicaManager.
"""

from __future__ import annotations

import errno
import struct
import uuid

import pytest

from tests.core_harness import CoreHarness, decode_frame, response_bytes
from tests.unit.test_apis import batch, produce_body
from tests.unit.test_storage_errors import DiskFaults
from tidegate.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import PARKED
from tidegate.protocol.apis import ApiKey

GROUP_PROPS = {"group.initial.rebalance.delay.ms": "0"}


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def call(h: CoreHarness, key: int, version: int, body: dict, *, wait: bool = True):
    """Send one request; if it parks, let the scheduler run what is ready (an fsync)
    and take its answer. Returns the decoded response, or the parked request (and
    correlation id) when ``wait`` is False."""
    request, outcome, cid, released = h.send(key, version, body)
    assert released[0] == 1
    if outcome is not PARKED:
        return decode_frame(key, version, response_bytes(outcome), cid)
    if not wait:
        return request, cid
    return h.answer(request, cid)


def join_body(group="g", member_id="", instance=None, *, session=10_000, rebalance=30_000, topics=("t",)):
    return {
        "group_id": group,
        "session_timeout": session,
        "rebalance_timeout": rebalance,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(*topics)}],
        "reason": None,
    }


def commit_body(group, member_id, generation, offsets: dict, instance=None):
    by_topic: dict[str, list] = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append(
            {"partition_index": p, "committed_offset": off, "committed_leader_epoch": 4,
             "committed_metadata": f"m{off}"}
        )
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": instance,
        "retention_time": -1,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


pytestmark = pytest.mark.harness(GROUP_PROPS)


# ------------------------------------------------------------------------------------------
def test_find_coordinator_every_version_names_this_broker(h):
    def go():
        for v in range(4):
            r = call(h, ApiKey.FIND_COORDINATOR, v, {"key": "g", "key_type": 0})
            assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 1, "127.0.0.1", 9092)
        r = call(h, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c.key, c.node_id, c.error_code) for c in r.coordinators] == [
            ("a", 1, E.none), ("b", 1, E.none)
        ]
        # transactional ids: this broker, so InitProducerId can refuse them with 53 at once
        r = call(h, ApiKey.FIND_COORDINATOR, 6, {"key_type": 1, "coordinator_keys": ["tx"]})
        assert (r.coordinators[0].error_code, r.coordinators[0].node_id) == (E.none, 1)

    go()
    assert h.store.get(OFFSETS_TOPIC) is not None  # created on first use, as Kafka does


def test_join_sync_heartbeat_leave_on_the_wire(h):
    h.create_topic("t", 2)

    def go():
        r = call(h, ApiKey.JOIN_GROUP, 9, join_body())
        assert r.error_code == E.member_id_required and r.member_id.startswith("rawclient-")
        member = r.member_id
        r = call(h, ApiKey.JOIN_GROUP, 9, join_body(member_id=member))
        assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (E.none, 1, member, "range")
        assert r.protocol_type == "consumer" and [m.member_id for m in r.members] == [member]

        # a v0 member (no MEMBER_ID_REQUIRED, session timeout as rebalance timeout) joins:
        # it parks until the first member rejoins
        v0 = join_body()
        del v0["rebalance_timeout"], v0["group_instance_id"], v0["reason"]
        parked, cid = call(h, ApiKey.JOIN_GROUP, 0, v0, wait=False)
        hb = call(h, ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": member,
                                                  "group_instance_id": None})
        assert hb.error_code == E.rebalance_in_progress
        r1 = call(h, ApiKey.JOIN_GROUP, 5, join_body(member_id=member))
        r0 = h.answer(parked, cid)
        assert r1.generation_id == r0.generation_id == 2 and r0.protocol_name == "range"
        other = r0.member_id

        follower, fcid = call(h, ApiKey.SYNC_GROUP, 0, {"group_id": "g", "generation_id": 2,
                                                             "member_id": other, "assignments": []},
                                    wait=False)
        leader = call(h, ApiKey.SYNC_GROUP, 5, {
            "group_id": "g", "generation_id": 2, "member_id": member, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"A"},
                            {"member_id": other, "assignment": b"B"}],
        })
        assert (leader.error_code, leader.assignment, leader.protocol_name) == (E.none, b"A", "range")
        assert h.answer(follower, fcid).assignment == b"B"

        d = call(h, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g", "nope"], "include_authorized_operations": True})
        g, nope = d.groups
        assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
        assert {m.member_id for m in g.members} == {member, other}
        assert {m.client_host for m in g.members} == {"/127.0.0.1"}
        assert g.authorized_operations != -(2**31)
        assert (nope.error_code, nope.group_state) == (E.none, "Dead")
        d6 = call(h, ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["nope"], "include_authorized_operations": False})
        assert (d6.groups[0].error_code, d6.groups[0].error_message) == (E.group_id_not_found, "Group nope not found.")

        lg = call(h, ApiKey.LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": []})
        assert [(x.group_id, x.group_state, x.group_type) for x in lg.groups] == [("g", "Stable", "classic")]
        lg0 = call(h, ApiKey.LIST_GROUPS, 0, {})
        assert [(x.group_id, x.protocol_type) for x in lg0.groups] == [("g", "consumer")]

        # LeaveGroup v0 (one member, top-level error) and v3 (batch)
        r = call(h, ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": "stranger"})
        assert r.error_code == E.unknown_member_id
        r = call(h, ApiKey.LEAVE_GROUP, 5, {"group_id": "g", "members": [
            {"member_id": other, "group_instance_id": None, "reason": "test"}]})
        assert r.error_code == E.none and [m.error_code for m in r.members] == [E.none]
        hb = call(h, ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": 2, "member_id": member})
        assert hb.error_code == E.rebalance_in_progress

        bad = call(h, ApiKey.JOIN_GROUP, 9, join_body(session=100))
        assert bad.error_code == E.invalid_session_timeout and bad.protocol_name is None
        bad = call(h, ApiKey.JOIN_GROUP, 2, {**join_body(group=""), "member_id": ""})
        assert bad.error_code == E.invalid_group_id and bad.protocol_name == ""

    go()


def test_offset_commit_fetch_delete_on_the_wire(h):
    h.create_topic("t", 3)

    def go():
        # a standalone consumer (generation -1) commits; the answer waits for the fsync
        r = call(h, ApiKey.OFFSET_COMMIT, 8, commit_body("s", "", -1, {("t", 0): 5, ("t", 2): 7, ("nope", 0): 1}))
        errors = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
        assert errors == {("t", 0): E.none, ("t", 2): E.none, ("nope", 0): E.unknown_topic_or_partition}
        plog = h.replicas.get_log(OFFSETS_TOPIC, 0)
        assert plog.recovery_point == plog.log_end_offset  # durable before the answer

        r = call(h, ApiKey.OFFSET_COMMIT, 2, {**commit_body("s", "", -1, {("t", 1): 9}), "retention_time": 60_000})
        assert r.topics[0].partitions[0].error_code == E.none

        f = call(h, ApiKey.OFFSET_FETCH, 1, {"group_id": "s", "topics": [
            {"name": "t", "partition_indexes": [0, 1, 2]}]})
        got = {(p.partition_index, p.committed_offset, p.metadata) for p in f.topics[0].partitions}
        assert got == {(0, 5, "m5"), (1, 9, "m9"), (2, 7, "m7")}
        f = call(h, ApiKey.OFFSET_FETCH, 7, {"group_id": "s", "topics": None, "require_stable": True})
        assert f.error_code == E.none
        assert sorted((p.partition_index, p.committed_offset, p.committed_leader_epoch)
                      for p in f.topics[0].partitions) == [(0, 5, 4), (1, 9, -1), (2, 7, 4)]
        f = call(h, ApiKey.OFFSET_FETCH, 9, {"require_stable": False, "groups": [
            {"group_id": "s", "member_id": None, "member_epoch": -1,
             "topics": [{"name": "t", "partition_indexes": [0]}, {"name": "u", "partition_indexes": [3]}]},
            {"group_id": "none", "member_id": None, "member_epoch": -1, "topics": None},
        ]})
        s, none = f.groups
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in s.topics] == [
            ("t", [(0, 5)]), ("u", [(3, -1)])
        ]
        assert none.topics == () and none.error_code == E.none

        od = call(h, ApiKey.OFFSET_DELETE, 0, {"group_id": "s", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        assert od.error_code == E.none and od.topics[0].partitions[0].error_code == E.none
        od = call(h, ApiKey.OFFSET_DELETE, 0, {"group_id": "nope", "topics": []})
        assert od.error_code == E.group_id_not_found

        dg = call(h, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["s", "nope"]})
        assert [(x.group_id, x.error_code) for x in dg.results] == [
            ("s", E.none), ("nope", E.group_id_not_found)
        ]
        f = call(h, ApiKey.OFFSET_FETCH, 5, {"group_id": "s", "topics": None})
        assert f.topics == ()

        # deleting a topic forgets its offsets
        call(h, ApiKey.OFFSET_COMMIT, 9, commit_body("s2", "", -1, {("t", 0): 1}))
        call(h, ApiKey.DELETE_TOPICS, 5, {"topic_names": ["t"], "timeout": 5000})
        f = call(h, ApiKey.OFFSET_FETCH, 5, {"group_id": "s2", "topics": None})
        assert f.topics == ()

    go()


def test_offsets_that_are_not_made_durable_answer_the_partitions_written_with_an_error(h, monkeypatch):
    """An OffsetCommit waits for the fsync of its record; when that fails (the log dir goes
    offline: KAFKA_STORAGE_ERROR), the partitions it wrote answer NOT_COORDINATOR as Kafka 4's
    GroupCoordinatorService.handleOperationException maps it, a partition that does not exist
    still answers UNKNOWN_TOPIC_OR_PARTITION."""
    h.create_topic("t", 2)
    assert call(h, ApiKey.OFFSET_COMMIT, 8, commit_body("s", "", -1, {("t", 0): 1})).topics  # the topic exists
    DiskFaults(monkeypatch).fail("fsync", ".log", errno.EIO)
    r = call(h, ApiKey.OFFSET_COMMIT, 8, commit_body("s", "", -1, {("t", 0): 5, ("t", 1): 6, ("nope", 0): 1}))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("t", [(0, E.not_coordinator), (1, E.not_coordinator)]), ("nope", [(0, E.unknown_topic_or_partition)])
    ]


def test_the_offsets_topic_is_listed_as_internal_and_protected(h):
    h.create_topic("t")

    def go():
        call(h, ApiKey.OFFSET_COMMIT, 8, commit_body("s", "", -1, {("t", 0): 5}))
        md = call(h, ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        # Kafka lists internal topics in an all-topics Metadata (its KRaft metadata cache
        # returns every topic, KafkaApis only filters by DESCRIBE permission) and marks
        # them is_internal; clients hide them themselves (exclude.internal.topics).
        assert [(t.name, t.is_internal) for t in md.topics] == [
            ("t", False), (OFFSETS_TOPIC, True)
        ]
        md = call(h, ApiKey.METADATA, 12, {"topics": [{"name": OFFSETS_TOPIC, "topic_id": None}],
                                                 "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        assert md.topics[0].is_internal is True and len(md.topics[0].partitions) == 1

        pr = call(h, ApiKey.PRODUCE, 9, produce_body(OFFSETS_TOPIC, {0: batch(b"x")}))
        assert pr.responses[0].partition_responses[0].error_code == E.invalid_topic_exception
        dt = call(h, ApiKey.DELETE_TOPICS, 5, {"topic_names": [OFFSETS_TOPIC], "timeout": 5000})
        assert dt.responses[0].error_code == E.invalid_request
        cp = call(h, ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": OFFSETS_TOPIC, "count": 5,
                                                                      "assignments": None}],
                                                           "timeout": 5000, "validate_only": False})
        assert cp.results[0].error_code == E.invalid_request
        assert h.store.get(OFFSETS_TOPIC).partitions == 1

    go()


def test_metadata_does_not_auto_create_the_offsets_topic(h):
    def go():
        md = call(h, ApiKey.METADATA, 12, {"topics": [{"name": OFFSETS_TOPIC, "topic_id": None}],
                                                 "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == E.unknown_topic_or_partition
        ct = call(h, ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": OFFSETS_TOPIC, "num_partitions": 3,
                                                                  "replication_factor": 1, "assignments": [],
                                                                  "configs": []}],
                                                     "timeout": 5000, "validate_only": False})
        assert ct.topics[0].error_code == E.invalid_request

    go()
    assert h.store.get(OFFSETS_TOPIC) is None


def test_committed_offsets_and_groups_survive_a_new_broker_on_the_same_directory(tmp_path):
    h = CoreHarness(tmp_path / "data", GROUP_PROPS)
    h.create_topic("t", 2)

    def first():
        r = call(h, ApiKey.JOIN_GROUP, 3, join_body())
        member = r.member_id
        call(h, ApiKey.SYNC_GROUP, 3, {"group_id": "g", "generation_id": 1, "member_id": member,
                                             "group_instance_id": None,
                                             "assignments": [{"member_id": member, "assignment": b"all"}]})
        c = call(h, ApiKey.OFFSET_COMMIT, 7, commit_body("g", member, 1, {("t", 0): 11, ("t", 1): 12}))
        assert all(p.error_code == E.none for t in c.topics for p in t.partitions)
        return member

    member = first()
    h.close()
    h2 = CoreHarness(tmp_path / "data", GROUP_PROPS)

    def second():
        f = call(h2, ApiKey.OFFSET_FETCH, 8, {"require_stable": False, "groups": [
            {"group_id": "g", "topics": None}]})
        got = {(p.partition_index, p.committed_offset) for p in f.groups[0].topics[0].partitions}
        assert got == {(0, 11), (1, 12)}
        # the member carries on in its generation
        hb = call(h2, ApiKey.HEARTBEAT, 3, {"group_id": "g", "generation_id": 1, "member_id": member,
                                                   "group_instance_id": None})
        assert hb.error_code == E.none
        s = call(h2, ApiKey.SYNC_GROUP, 3, {"group_id": "g", "generation_id": 1, "member_id": member,
                                                  "group_instance_id": None, "assignments": []})
        assert s.assignment == b"all"

    second()
    h2.close()


def test_after_shutdown_group_requests_answer_coordinator_not_available(h):
    def go():
        r = call(h, ApiKey.JOIN_GROUP, 4, join_body())
        parked_member = r.member_id
        first = call(h, ApiKey.JOIN_GROUP, 4, join_body(member_id=parked_member))
        assert first.error_code == E.none
        # a second member parks in JoinGroup; the shutdown answers it
        second = call(h, ApiKey.JOIN_GROUP, 4, join_body())
        parked, cid = call(h, ApiKey.JOIN_GROUP, 4, join_body(member_id=second.member_id), wait=False)
        h.apis.groups.shutdown()
        assert h.answer(parked, cid).error_code == E.not_coordinator
        hb = call(h, ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1,
                                                  "member_id": parked_member, "group_instance_id": None})
        assert hb.error_code == E.coordinator_not_available
        fc = call(h, ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert fc.error_code == E.coordinator_not_available
        # OffsetFetch v1 has no group-level error: every requested partition carries it
        topics = [{"name": "t", "partition_indexes": [0, 1]}]
        f = call(h, ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": topics})
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in f.topics[0].partitions] == [
            (0, -1, E.coordinator_not_available), (1, -1, E.coordinator_not_available)
        ]
        f = call(h, ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": topics})
        assert (f.error_code, [(t.name, list(t.partitions)) for t in f.topics]) == (E.coordinator_not_available, [("t", [])])

    go()


def test_broker_maintenance_expires_offsets_of_empty_groups(tmp_path):
    """What the broker's group maintenance task runs every offsets.retention.check.interval.ms:
    offsets older than offsets.retention.minutes go, tombstoned, so they stay gone."""
    h = CoreHarness(tmp_path / "data", {**GROUP_PROPS, "offsets.retention.minutes": "1"})
    h.create_topic("t")

    def go():
        committed_at = h.clock.wall_milliseconds()
        call(h, ApiKey.OFFSET_COMMIT, 8, commit_body("s", "", -1, {("t", 0): 5}))
        h.clock.advance(committed_at + 59_000 - h.clock.wall_milliseconds())
        h.apis.groups.maintenance(True)
        f = call(h, ApiKey.OFFSET_FETCH, 5, {"group_id": "s", "topics": None})
        assert [p.committed_offset for p in f.topics[0].partitions] == [5]
        h.clock.advance(1_000)  # a minute after the commit
        h.apis.groups.maintenance(False)  # not due: nothing happens
        assert "s" in h.apis.groups.coordinator.groups
        h.apis.groups.maintenance(True)
        f = call(h, ApiKey.OFFSET_FETCH, 5, {"group_id": "s", "topics": None})
        assert f.topics == ()
        lg = call(h, ApiKey.LIST_GROUPS, 3, {})
        assert lg.groups == ()  # empty and without offsets: removed

    go()
    h.close()
    h2 = CoreHarness(tmp_path / "data", GROUP_PROPS)
    h2.apis.groups.start()
    assert h2.apis.groups.coordinator.groups == {}


def by_id_commit_body(group, member_id, epoch, offsets: dict):
    """An OffsetCommit v10 body: ``offsets`` keyed by (topic id, partition)."""
    body = commit_body(group, member_id, epoch, offsets)
    for t in body["topics"]:
        t["topic_id"] = t.pop("name")
    return body


def test_offset_commit_and_fetch_v10_name_topics_by_id(h):
    """KIP-848's v10: topics by id, resolved to their names (offsets are stored by name,
    so v9 reads what v10 wrote); an unknown id is UNKNOWN_TOPIC_ID for its partitions,
    answered after the known topics; every answer carries the id, none a name."""
    t = h.create_topic("t", 2)
    u = h.create_topic("u", 1)
    stranger = uuid.uuid4()

    def go():
        r = call(h, ApiKey.OFFSET_COMMIT, 10, by_id_commit_body(
            "s", "", -1, {(stranger, 0): 1, (t, 0): 5, (t, 1): 6, (t, 9): 1, (u, 0): 8}))  # fmt: skip
        assert [(x.topic_id, [(p.partition_index, p.error_code) for p in x.partitions]) for x in r.topics] == [
            (t, [(0, E.none), (1, E.none), (9, E.unknown_topic_or_partition)]),
            (u, [(0, E.none)]),
            (stranger, [(0, E.unknown_topic_id)]),
        ]
        assert not hasattr(r.topics[0], "name")  # not on the wire from v10
        # stored by name: a v9 fetch by name reads them
        f = call(h, ApiKey.OFFSET_FETCH, 9, {"require_stable": False, "groups": [
            {"group_id": "s", "member_id": None, "member_epoch": -1, "topics": None}]})  # fmt: skip
        assert {(x.name, p.partition_index, p.committed_offset) for x in f.groups[0].topics for p in x.partitions} == {
            ("t", 0, 5), ("t", 1, 6), ("u", 0, 8)
        }

        def fetch(topics):
            body = {"require_stable": True, "groups": [
                {"group_id": "s", "member_id": None, "member_epoch": -1, "topics": topics},
                {"group_id": "none", "member_id": None, "member_epoch": -1,
                 "topics": [{"topic_id": stranger, "partition_indexes": [0]}]},
            ]}  # fmt: skip
            return call(h, ApiKey.OFFSET_FETCH, 10, body).groups

        s, none = fetch([{"topic_id": stranger, "partition_indexes": [0, 1]},
                         {"topic_id": t, "partition_indexes": [1, 0]}])  # fmt: skip
        assert s.error_code == E.none
        assert [(x.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in x.partitions])
                for x in s.topics] == [
            (t, [(0, 5, E.none), (1, 6, E.none)]),
            (stranger, [(0, -1, E.unknown_topic_id), (1, -1, E.unknown_topic_id)]),
        ]  # fmt: skip
        assert none.error_code == E.none and [x.topic_id for x in none.topics] == [stranger]
        s, _ = fetch(None)  # every topic the group has, each by its id
        assert sorted((x.topic_id, len(x.partitions)) for x in s.topics) == sorted([(t, 2), (u, 1)])

    go()
