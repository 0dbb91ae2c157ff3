"""The share coordinator (KIP-932): share-partition state kept durable in
``__share_group_state`` through the ReplicaManager, on fake time with a real log.

Kafka's ``ShareCoordinatorShardTest`` cases (the checks, snapshots and updates, leader
epoch updates on read, delete, cold partitions, topic deletion), the guarantees of
reference 2.9 with a restart (a second coordinator replaying the same log), a kill -9
with a torn tail, and the bound on the topic's size.
"""

from __future__ import annotations

import errno
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.logs import batch_headers
from tests.unit.share_helpers import acquire, records
from tests.unit.share_state import Node
from tidegate.config import BrokerConfig
from tidegate.coordinator.share import SHARE_GROUP_STATE_TOPIC, ShareCoordinatorConfig
from tidegate.coordinator.share.records import (
    ShareRecord,
    ShareRecordType,
    ShareUpdate,
    decode_record,
    encode_record,
)
from tidegate.errors import ErrorCode
from tidegate.log.dir_failure import StorageError
from tidegate.server.share import (
    AcknowledgeType,
    InMemoryPersister,
    PersisterReadResult,
    PersisterReadSummary,
    PersisterStateBatch,
    PersisterWrite,
    ShareAcknowledgementBatch,
    SharePartition,
    SharePartitionKey,
    SharePartitionState,
)
from tidegate.server.share.persister import ShareGroupOffset
from tidegate.server.timer import SystemTimer

E = ErrorCode
B = PersisterStateBatch
SNAPSHOT, UPDATE = ShareRecordType.SHARE_SNAPSHOT, ShareRecordType.SHARE_UPDATE
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
GROUP = "g"


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def key_of(node: Node, partition: int = 0, topic: str = "t", group: str = GROUP) -> SharePartitionKey:
    info = node.topics.get(topic)
    topic_id = node.create_topic(topic) if info is None else info.topic_id
    return SharePartitionKey(group, topic_id, partition)


def write(key, state_epoch=0, leader_epoch=0, start_offset=-1, batches=(), dcc=-1) -> PersisterWrite:
    return PersisterWrite(key, state_epoch, leader_epoch, start_offset, tuple(B(*b) for b in batches), dcc)


def types(node: Node) -> list[ShareRecordType]:
    return [r.type for _o, r in node.records()]


# -- the record format ----------------------------------------------------------------------


def test_records_round_trip():
    key = SharePartitionKey("g\u00e9", uuid.uuid4(), 7)
    snapshot = ShareGroupOffset(3, 10, 2, (B(10, 12, 2, 1), B(14, 14, 4, 5)), 4, 6, 111, 222)
    update = ShareUpdate(6, -1, -1, 9, (B(20, 29, 0, 2),))
    for record in (ShareRecord.snapshot(key, snapshot), ShareRecord.update(key, update), ShareRecord.tombstone(key)):
        assert decode_record(*encode_record(record)) == record
    assert decode_record(b'["o","g","t",0]', b"{}") is None  # another coordinator's kind of key


def test_state_topic_is_created_with_kafkas_configs_on_first_write(node):
    key = key_of(node)
    assert node.topics.get(SHARE_GROUP_STATE_TOPIC) is None
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.none
    configs = node.topics.get(SHARE_GROUP_STATE_TOPIC).configs
    assert configs["cleanup.policy"] == "delete"  # KIP-932: pruned, never compacted
    assert configs["retention.ms"] == "-1" and node.topics.get(SHARE_GROUP_STATE_TOPIC).partitions == 1
    assert "min.insync.replicas" not in configs  # one node is an ISR of one


# -- the checks (ShareCoordinatorShardTest), alike in both persisters ------------------------


@pytest.fixture(params=["coordinator", "in-memory"])
def persister(request, tmp_path):
    """(node, persister, answer): the share coordinator or the in-memory persister over
    the same topics; ``answer(fn, *args)`` calls and returns the one answer."""
    node = Node(tmp_path)
    if request.param == "coordinator":
        return node, node.coordinator, node.call
    p = InMemoryPersister(node.partitions)

    def answer(fn, *args):
        out = []
        fn(*args, out.append)
        return out[0]

    return node, p, answer


def test_write_fails_on_uninitialized_partition(persister):
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.write, write(key, batches=[(0, 10, 0, 1)])) is E.invalid_request
    result = answer(p.read, key, 0)
    assert (result.error, result.error_message) == (
        E.invalid_request, "Read operation on uninitialized share partition not allowed.")


def test_negative_partition_and_unknown_topic_or_partition(persister):
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.initialize, key._replace(partition=-1), 0, 0) is E.invalid_request
    assert answer(p.initialize, key._replace(partition=3), 0, 0) is E.unknown_topic_or_partition
    assert answer(p.initialize, key._replace(topic_id=uuid.uuid4()), 0, 0) is E.unknown_topic_or_partition
    assert answer(p.read_summary, key._replace(partition=3), 0).error is E.unknown_topic_or_partition
    assert answer(p.delete, key._replace(partition=-1)) is E.invalid_request


def test_fenced_epochs(persister):
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.initialize, key, 2, -1) is E.none
    assert answer(p.read, key, 3).start_offset == -1  # records leader epoch 3
    assert answer(p.write, write(key, 2, 0, 0)) is E.fenced_leader_epoch  # 0 < 3
    assert answer(p.read, key, 1).error is E.fenced_leader_epoch
    assert answer(p.write, write(key, 1, 3, 0)) is E.fenced_state_epoch  # 1 < 2
    assert answer(p.initialize, key, 1, 0) is E.fenced_state_epoch
    assert answer(p.write, write(key, 2, 3, 5, [(3, 9, 2, 1)])) is E.none
    assert answer(p.write, write(key, -1, -1, -1, [(9, 9, 4, 1)])) is E.none  # -1: not checked
    assert answer(p.read, key, -1) == PersisterReadResult(E.none, 2, 5, (B(5, 8, 2, 1), B(9, 9, 4, 1)))
    assert answer(p.read_summary, key, 0) == PersisterReadSummary(E.none, 2, 3, 5, 5)


def test_a_state_of_a_topic_gone_answers_unknown_topic_after_the_epoch_checks(persister):
    """ShareCoordinatorShardTest testWriteNullMetadataImage / testReadNullMetadataImage:
    a stored state whose topic is gone is UNKNOWN_TOPIC_OR_PARTITION, once its epochs pass."""
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.initialize, key, 2, 0) is E.none
    node.logs.delete_topic("t")
    assert answer(p.write, write(key, 1, 0, 0)) is E.fenced_state_epoch
    assert answer(p.write, write(key, 2, 0, 0)) is E.unknown_topic_or_partition
    assert answer(p.read, key, 0).error is E.unknown_topic_or_partition
    assert answer(p.read_summary, key, 0).error is E.unknown_topic_or_partition


def test_delete_of_nothing_succeeds_and_a_deleted_state_is_uninitialized(persister):
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.delete, key) is E.none
    assert answer(p.initialize, key, 0, 4) is E.none
    assert answer(p.delete, key) is E.none
    assert answer(p.read, key, 0).error is E.invalid_request
    assert answer(p.read_summary, key, 0) == PersisterReadSummary()  # start offset -1


def test_read_summary_counts_terminal_offsets_unless_the_write_says(persister):
    node, p, answer = persister
    key = key_of(node)
    assert answer(p.read_summary, key, 0) == PersisterReadSummary()
    assert answer(p.initialize, key, 1, -1) is E.none
    assert answer(p.read_summary, key, 0).delivery_complete_count == -1  # no start offset
    assert answer(p.write, write(key, 1, 0, 10, [(10, 14, 2, 1), (15, 19, 0, 2), (20, 21, 4, 5)])) is E.none
    assert answer(p.read_summary, key, 0) == PersisterReadSummary(E.none, 1, 0, 10, 7)
    assert answer(p.write, write(key, 1, 0, 15, [], dcc=3)) is E.none
    assert answer(p.read_summary, key, 0) == PersisterReadSummary(E.none, 1, 0, 15, 3)


def test_not_available_before_startup_and_after_shutdown(node):
    key = key_of(node)
    node.coordinator.shutdown()
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.coordinator_not_available
    assert node.call(node.coordinator.read, key, 0).error is E.coordinator_not_available
    assert node.call(node.coordinator.write, write(key)) is E.coordinator_not_available
    assert node.call(node.coordinator.delete, key) is E.coordinator_not_available


# -- records: snapshots, updates, leader epochs -------------------------------------------------


def test_initialize_writes_a_snapshot_and_writes_write_updates(node):
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 0) is E.none
    assert node.call(c.write, write(key, 0, 0, 0, [(0, 10, 0, 1)])) is E.none
    assert node.call(c.write, write(key, 0, 0, 0, [(11, 20, 0, 1)], dcc=0)) is E.none
    recs = node.records()
    assert [r.type for _o, r in recs] == [SNAPSHOT, UPDATE, UPDATE]
    assert recs[2][1].value == ShareUpdate(0, 0, 0, 0, (B(11, 20, 0, 1),))
    # the updates combine with the snapshot: one range, the same state and count
    assert c.states.get(key).state_batches == (B(0, 20, 0, 1),)


def test_snapshot_every_n_updates(tmp_path):
    """share.coordinator.snapshot.update.records.per.snapshot updates between snapshots; a
    snapshot holds the merged state with the next snapshot epoch."""
    node = Node(tmp_path, ShareCoordinatorConfig(snapshot_update_records_per_snapshot=2))
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 0) is E.none
    for i in range(7):
        assert node.call(c.write, write(key, 0, 0, -1, [(i, i, 2, 1)])) is E.none
    assert types(node) == [SNAPSHOT, UPDATE, UPDATE, SNAPSHOT, UPDATE, UPDATE, SNAPSHOT, UPDATE]
    last_snapshot = node.records()[6][1].value
    assert (last_snapshot.snapshot_epoch, last_snapshot.state_batches) == (2, (B(0, 5, 2, 1),))
    assert node.records()[7][1].value.snapshot_epoch == 2  # an update names its snapshot


def test_every_write_is_a_snapshot_with_zero_updates_per_snapshot(tmp_path):
    """ShareCoordinatorShardTest testNonSequentialBatchUpdates: a snapshot built from a
    write that moves the start offset keeps the ranges the write did not name."""
    node = Node(tmp_path, ShareCoordinatorConfig(snapshot_update_records_per_snapshot=0))
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 0) is E.none
    assert node.call(c.write, write(key, 0, 0, 100, [(100, 109, 0, 1), (110, 119, 0, 2), (120, 129, 0, 0)])) is E.none
    assert node.call(c.write, write(key, 0, 0, -1, [(100, 109, 2, 1)], dcc=10)) is E.none
    assert node.call(c.write, write(key, 0, 0, 110, [(120, 129, 2, 1)], dcc=10)) is E.none
    assert types(node) == [SNAPSHOT] * 4
    final = node.records()[-1][1].value
    assert (final.start_offset, final.snapshot_epoch, final.delivery_complete_count) == (110, 3, 10)
    assert final.state_batches == (B(110, 119, 0, 2), B(120, 129, 2, 1))  # b2 not lost


def test_read_with_a_new_leader_epoch_records_it_before_answering(node):
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 5) is E.none
    out: list = []
    c.read(key, 2, out.append)
    assert out == []  # answered once the leader epoch is durable
    node.loop.run_pending()
    assert out == [PersisterReadResult(E.none, 0, 5)]
    assert node.records()[-1][1] == ShareRecord.update(key, ShareUpdate(0, 2, -1, -1, ()))
    n = len(node.records())
    assert node.call(c.read, key, 2).error is E.none and node.call(c.read, key, -1).error is E.none
    assert len(node.records()) == n  # the same epoch, or none: nothing written


def test_a_write_answers_once_fsynced(node):
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 0) is E.none
    out: list = []
    c.write(write(key, 0, 0, 0, [(0, 4, 2, 1)]), out.append)
    assert out == [] and node.log.recovery_point < node.log.log_end_offset
    node.loop.run_pending()
    assert out == [E.none] and node.log.recovery_point == node.log.log_end_offset


def test_a_failed_append_answers_the_coordinators_error_and_changes_nothing(tmp_path):
    """An append the log refuses (here min.insync.replicas=2 on a node that is an ISR of
    one: NOT_ENOUGH_REPLICAS) answers COORDINATOR_NOT_AVAILABLE (Kafka's mapping)."""
    node = Node(tmp_path, state_topic_configs={"cleanup.policy": "delete", "min.insync.replicas": "2"})
    key = key_of(node)
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.coordinator_not_available
    assert node.coordinator.states.get(key) is None and node.log.log_end_offset == 0


# -- replay at start ------------------------------------------------------------------------------


def test_replay_rebuilds_every_state(tmp_path):
    node = Node(tmp_path, ShareCoordinatorConfig(snapshot_update_records_per_snapshot=3))
    c = node.coordinator
    keys = [key_of(node, p) for p in range(3)] + [key_of(node, 0, group="h")]
    for k in keys:
        assert node.call(c.initialize, k, 1, 0) is E.none
    for i in range(20):
        k = keys[i % len(keys)]
        assert node.call(c.write, write(k, 1, 0, i // 4, [(i, i + 2, (0, 2, 4)[i % 3], 1 + i % 2)])) is E.none
    assert node.call(c.read, keys[1], 4).error is E.none
    assert node.call(c.delete, keys[2]) is E.none
    again = node.restart()
    assert again.replayed == len(again.records())
    assert again.coordinator.states.states == c.states.states
    assert again.coordinator._updates_since_snapshot == c._updates_since_snapshot  # the cadence goes on
    assert again.call(again.coordinator.read, keys[1], 3).error is E.fenced_leader_epoch


# -- the guarantees (reference 2.9) with a share-partition and a restart --------------------------


class Broker:
    """A share-partition of a node's share coordinator (its persister), with locks on a
    timing wheel on the node's clock."""

    def __init__(self, node: Node, key: SharePartitionKey) -> None:
        self.node, self.key = node, key
        self.timer = SystemTimer(clock=node.clock)

    def partition(self) -> SharePartition:
        sp = SharePartition(self.key.group_id, self.key.topic_id, self.key.partition, timer=self.timer,
                            persister=self.node.coordinator, max_delivery_count=5, record_lock_duration_ms=1000)
        out: list = []
        sp.maybe_initialize(out.append, wall_clock_ms=self.node.clock.wall_milliseconds())
        self.node.loop.run_pending()
        assert out and out[0].error is E.none and sp.state is SharePartitionState.ACTIVE
        return sp


def acked(node: Node, sp: SharePartition, *batches, waits: bool = True) -> E:
    """Acknowledge as m1; the answer (which, for a write appended, waits for its fsync)."""
    out: list = []
    sp.acknowledge("m1", [ShareAcknowledgementBatch(f, l, (t,)) for f, l, t in batches], out.append)
    assert (out == []) is waits
    node.loop.run_pending()
    return out[0].error


def test_acknowledged_never_comes_back_and_acquired_comes_back_with_its_count(tmp_path):
    """Guarantees 1-3: an ACCEPT/REJECT is durable before its answer; after a restart
    nothing acknowledged or archived, nothing below the start offset, is delivered again;
    a released record comes back with its count, a record acquired at the crash comes
    back AVAILABLE with its last persisted count."""
    node = Node(tmp_path)
    key = key_of(node)
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.none
    sp = Broker(node, key).partition()
    acquire(sp, records(0, 20), 20, member="m1")
    assert acked(node, sp, (0, 4, ACCEPT), (5, 6, REJECT), (7, 8, RELEASE)) is E.none
    acquire(sp, records(0, 20), 2, member="m1", fetch_offset=sp.next_fetch_offset())  # 7-8, count 2
    assert acked(node, sp, (12, 12, ACCEPT)) is E.none
    # kill -9: the locks of 7-8 and 9-19 (acquired, unacknowledged) die with the broker
    node = node.restart(crash=True)
    sp2 = Broker(node, key).partition()
    assert sp2.start_offset == 7
    got = acquire(sp2, records(0, 20), 12, member="m2", fetch_offset=sp2.next_fetch_offset())
    offsets = {o: r.delivery_count for r in got for o in range(r.first_offset, r.last_offset + 1)}
    assert 12 not in offsets and min(offsets) == 7
    # 7-8 were persisted AVAILABLE at count 1 (released), acquired again: count 2; the
    # rest was never persisted (acquired at the crash): delivered again at count 1
    assert offsets == {7: 2, 8: 2} | {o: 1 for o in (9, 10, 11, 13, 14, 15, 16, 17, 18, 19)}


def test_released_and_expired_records_keep_their_counts_across_restarts(tmp_path):
    """A record's persisted count only grows: released at count 1, expired at count 2,
    then a crash: it comes back at count 2 and its next delivery is the third."""
    node = Node(tmp_path)
    key = key_of(node)
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.none
    broker = Broker(node, key)
    sp = broker.partition()
    acquire(sp, records(0, 3), 3, member="m1")
    out: list = []
    sp.release_acquired_records("m1", out.append)
    node.loop.run_pending()
    assert out[0].error is E.none
    acquire(sp, records(0, 3), 3, member="m1", fetch_offset=sp.next_fetch_offset())
    node.clock.advance(1000)
    broker.timer.advance_clock()  # the lock expires: AVAILABLE at count 2, persisted best effort
    node.loop.run_pending()
    node = node.restart(crash=True)
    sp2 = Broker(node, key).partition()
    got = acquire(sp2, records(0, 3), 3, member="m2", fetch_offset=sp2.next_fetch_offset())
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(0, 2, 3)]


def test_a_failed_state_write_rolls_the_acknowledgement_back(tmp_path):
    """Guarantee 1, when the write fails: the log directory offline (the append answers
    KAFKA_STORAGE_ERROR, the coordinator NOT_COORDINATOR), the acknowledgement fails and
    the records stay acquired by their member; nothing of it is stored."""
    node = Node(tmp_path)
    key = key_of(node)
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.none
    sp = Broker(node, key).partition()
    acquire(sp, records(0, 5), 5, member="m1")
    node.logs.failure_channel.error(StorageError("fsync", OSError(errno.EIO, "Input/output error"), fatal=True))
    assert acked(node, sp, (0, 4, ACCEPT), waits=False) is E.coordinator_not_available
    batch = sp.batch_at(0)
    assert (batch.record_state(0).name, batch.member_id(0)) == ("ACQUIRED", "m1")
    assert node.coordinator.states.get(key).state_batches == ()


def test_a_write_that_never_became_durable_is_lost_only_with_its_answer(tmp_path):
    """A torn tail (kill -9 in the middle of a batch): the log's recovery drops the
    partial batch; what it held was never acknowledged (its answer waited for the fsync),
    everything answered survives."""
    node = Node(tmp_path)
    key = key_of(node)
    c = node.coordinator
    assert node.call(c.initialize, key, 0, 0) is E.none
    assert node.call(c.write, write(key, 0, 0, 0, [(0, 4, 2, 1)])) is E.none
    path = node.log.active_segment.log_path
    out: list = []
    c.write(write(key, 0, 0, 5, [(5, 9, 4, 1)]), out.append)
    assert out == []  # not fsynced yet: not answered
    size = path.stat().st_size

    def tear() -> None:
        with open(path, "r+b") as f:
            f.truncate(size - 7)

    node = node.restart(crash=True, before=tear)
    assert node.log.log_end_offset == 2
    assert node.call(node.coordinator.read, key, 0) == PersisterReadResult(E.none, 0, 0, (B(0, 4, 2, 1),))


def test_topic_deletion_removes_its_share_state(node):
    """Guarantee 6: deleting a topic tombstones its share-partitions' states; a topic
    created again with the same name (a new id) starts with none."""
    c = node.coordinator
    old = [key_of(node, p) for p in range(3)]
    other = key_of(node, 0, topic="u")
    for k in old + [other]:
        assert node.call(c.initialize, k, 0, 0) is E.none
        assert node.call(c.write, write(k, 0, 0, 0, [(0, 9, 2, 1)])) is E.none
    topic_id = old[0].topic_id
    node.logs.delete_topic("t")
    assert node.call(c.on_topics_deleted, [topic_id]) is E.none
    assert all(c.states.get(k) is None for k in old) and c.states.get(other) is not None
    node = node.restart()
    assert node.coordinator.states.get(old[0]) is None and node.coordinator.states.get(other) is not None
    new = key_of(node, 0)
    assert new.topic_id != topic_id
    assert node.call(node.coordinator.read, new, 0).error is E.invalid_request  # nothing carried over
    assert node.call(node.coordinator.initialize, new, 0, 0) is E.none


# -- bounding the log: cold partitions and pruning -------------------------------------------------


def test_cold_partition_snapshot(tmp_path):
    """ShareCoordinatorShardTest testSnapshotColdPartitions*: a share-partition whose
    snapshot is older than the interval and has records after it gets a fresh snapshot
    (same state, next snapshot epoch, creation time kept); once nothing else is written
    after it, it is not snapshotted again."""
    node = Node(tmp_path, ShareCoordinatorConfig(cold_partition_snapshot_interval_ms=10_000))
    c = node.coordinator
    idle, busy = key_of(node, 0), key_of(node, 1)
    assert node.call(c.initialize, idle, 0, 0) is E.none
    created = c.states.get(idle).create_timestamp
    node.clock.advance(5_000)
    assert node.call(c.initialize, busy, 0, 0) is E.none
    for i in range(3):
        assert node.call(c.write, write(busy, 0, 0, -1, [(i, i, 2, 1)])) is E.none
    assert c.snapshot_cold_partitions() == 0  # 5 s old: not yet
    node.clock.advance(6_000)
    before = c.states.get(idle)
    assert node.call(c.snapshot_cold_partitions) is E.none
    after = c.states.get(idle)
    assert after == ShareGroupOffset(0, 0, snapshot_epoch=1, create_timestamp=created,
                                     write_timestamp=node.clock.wall_milliseconds()) != before
    assert c.states.get(busy).snapshot_epoch == 0  # its snapshot is 6 s old
    node.clock.advance(20_000)
    assert node.call(c.snapshot_cold_partitions) is E.none  # busy: old, with 3 updates after it
    assert c.states.get(busy).snapshot_epoch == 1
    node.clock.advance(20_000)
    assert c.snapshot_cold_partitions() == 0  # nothing written since: no perpetual snapshots


def test_prune_keeps_the_log_to_o_of_share_partitions(tmp_path):
    """After many writes, a cold-partition pass and a prune leave a snapshot per
    share-partition and the updates since: O(share-partitions) records, not O(writes);
    the pruned log replays to the same states."""
    config = ShareCoordinatorConfig(snapshot_update_records_per_snapshot=10, cold_partition_snapshot_interval_ms=1000)
    node = Node(tmp_path, config)
    c = node.coordinator
    keys = [key_of(node, p, group=g) for g in ("a", "b", "c") for p in range(3)]
    for k in keys:
        assert node.call(c.initialize, k, 0, 0) is E.none
    idle = keys[0]
    for i in range(600):  # every key but the first is written
        k = keys[1 + i % (len(keys) - 1)]
        assert node.call(c.write, write(k, 0, 0, i // 50, [(i, i, (0, 2, 4)[i % 3], 1)])) is E.none
    assert len(node.records()) == len(keys) + 600
    # the idle key's snapshot at offset 0 holds everything back
    assert c.redundant_offset() == 0 and c.prune() is None
    node.clock.advance(1000)
    assert node.call(c.snapshot_cold_partitions) is E.none
    assert node.call(c.prune) is E.none
    kept = len(node.records())
    assert node.log.log_start_offset > 0
    assert kept <= 2 * len(keys) + len(keys) * config.snapshot_update_records_per_snapshot, kept
    states = dict(c.states.states)
    again = node.restart()
    assert again.coordinator.states.states == states
    assert idle in again.coordinator.states.states


def test_prune_keeps_the_last_fsynced_snapshot_until_the_next_one_is(node):
    """Records are redundant only below a snapshot on disk (Kafka prunes below committed
    offsets only): while a newer snapshot waits for its fsync, the older one and its
    updates stay, so a kill -9 that loses the newer one leaves the older state."""
    c = node.coordinator
    key = key_of(node)
    assert node.call(c.initialize, key, 0, 0) is E.none
    assert node.call(c.write, write(key, 0, 0, 0, [(0, 4, 2, 1)])) is E.none
    out: list = []
    c.initialize(key, 1, 10, out.append)  # a new snapshot at offset 2, not fsynced yet
    assert c.redundant_offset() == 0 and c.prune() is None
    node.loop.run_pending()
    assert out == [E.none] and c.redundant_offset() == 2
    assert node.call(c.prune) is E.none and node.log.log_start_offset == 2
    assert node.restart().coordinator.states.get(key) == c.states.get(key)


def test_prune_with_no_state_left_deletes_everything(node):
    c = node.coordinator
    key = key_of(node)
    assert node.call(c.initialize, key, 0, 0) is E.none
    assert node.call(c.delete, key) is E.none
    assert node.call(c.prune) is E.none
    assert node.log.log_start_offset == node.log.log_end_offset == 2
    assert node.restart().coordinator.states.states == {}


def test_clients_still_may_not_delete_records_of_the_state_topic(node):
    key = key_of(node)
    assert node.call(node.coordinator.initialize, key, 0, 0) is E.none
    out: list = []
    node.replicas.delete_records({(SHARE_GROUP_STATE_TOPIC, 0): 1}, out.append)
    assert out[0][(SHARE_GROUP_STATE_TOPIC, 0)].error is E.invalid_topic_exception


# -- the durable persister answers as the in-memory one (Hypothesis) -------------------------------

_epochs = st.integers(-1, 3)
_batch = st.tuples(st.integers(0, 30), st.integers(0, 4), st.sampled_from([0, 2, 4]), st.integers(1, 3)).map(
    lambda t: (t[0], t[0] + t[1], t[2], t[3]))
_key = st.tuples(st.sampled_from([GROUP, "h"]), st.sampled_from([0, 0, 1, 2, 3, -1]))  # 3: no such partition
_write = st.one_of(
    st.tuples(st.just("write"), _key, _epochs, _epochs, st.integers(-1, 20), st.lists(_batch, max_size=4),
              st.integers(-1, 9)),
    st.tuples(st.just("write"), _key, _epochs, _epochs, st.just(-1), st.lists(_batch, max_size=4), st.just(-1)),
)
#: writes most often; restarts (each a new LogManager and replay) least
_ops = st.one_of(
    _write, _write, _write,
    st.tuples(st.just("initialize"), _key, st.integers(0, 3), st.integers(-1, 10)),
    st.tuples(st.just("read"), _key, _epochs),
    st.tuples(st.just("summary"), _key),
    st.tuples(st.just("delete"), _key),
    st.tuples(st.just("prune"), st.integers(0, 2_000)),
    st.tuples(st.just("restart"), st.booleans()),
)


def _project(state: ShareGroupOffset) -> tuple:
    """What both persisters keep (snapshot epochs and timestamps are the log's own)."""
    return (state.state_epoch, state.start_offset, state.leader_epoch, state.state_batches,
            state.delivery_complete_count)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 3), st.lists(_ops, max_size=40))
def test_the_log_replays_to_what_the_in_memory_persister_holds(per_snapshot, ops):
    """Random initializes, writes, reads (with leader epochs), summaries and deletes go to
    the share coordinator and to the in-memory persister: every answer is the same,
    across restarts (a second coordinator replaying the log, after a clean close or a
    kill -9), cold-partition snapshots and prunes; so snapshots plus updates replay to
    the state the in-memory persister holds."""
    config = ShareCoordinatorConfig(snapshot_update_records_per_snapshot=per_snapshot,
                                    cold_partition_snapshot_interval_ms=1000)
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp), config)
        topic_id = node.create_topic("t", 3)
        model = InMemoryPersister(node.partitions)

        def both(name: str, *args):
            expected: list = []
            getattr(model, name)(*args, expected.append)
            got = node.call(getattr(node.coordinator, name), *args)
            assert got == expected[0], (name, args)

        for group in (GROUP, "h"):
            for partition in range(3):
                both("initialize", SharePartitionKey(group, topic_id, partition), 0, 0)
        for op in ops:
            kind = op[0]
            if kind == "restart":
                node = node.restart(crash=op[1])
            elif kind == "prune":
                node.clock.advance(op[1])
                node.call(node.coordinator.snapshot_cold_partitions)
                node.call(node.coordinator.prune)
            else:
                (group, partition) = op[1]
                key = SharePartitionKey(group, topic_id, partition)
                if kind == "initialize":
                    both("initialize", key, op[2], op[3])
                elif kind == "write":
                    both("write", write(key, op[2], op[3], op[4], op[5], op[6]))
                elif kind == "read":
                    both("read", key, op[2])
                elif kind == "summary":
                    both("read_summary", key, 0)
                else:
                    both("delete", key)
        final = node.restart()
        assert {k: _project(v) for k, v in final.coordinator.states.states.items()} == {
            k: _project(v) for k, v in model._states.states.items()}


def test_config_from_the_broker_keys_has_kafkas_defaults():
    assert ShareCoordinatorConfig.from_broker(BrokerConfig()) == ShareCoordinatorConfig()
    config = ShareCoordinatorConfig.from_broker(BrokerConfig({
        "share.coordinator.snapshot.update.records.per.snapshot": "7",
        "share.coordinator.cold.partition.snapshot.interval.ms": "1000",
    }))
    assert (config.snapshot_update_records_per_snapshot, config.cold_partition_snapshot_interval_ms) == (7, 1000)


def test_many_cold_snapshots_are_split_into_batches_the_log_accepts(tmp_path):
    """Snapshots of many share-partitions written at once go as several batches, each
    within max.message.bytes, in one append."""
    node = Node(tmp_path, ShareCoordinatorConfig(cold_partition_snapshot_interval_ms=1000),
                state_topic_configs={"cleanup.policy": "delete", "max.message.bytes": "2000"})
    c = node.coordinator
    keys = [key_of(node, p, group=f"group-{i}") for i in range(20) for p in range(3)]
    for k in keys:
        assert node.call(c.initialize, k, 0, 0) is E.none
    for k in keys:  # one update each: every snapshot has records after it
        assert node.call(c.write, write(k, 0, 0, 0, [(0, 9, 2, 1)])) is E.none
    node.clock.advance(1000)
    end = node.log.log_end_offset
    out: list = []
    assert c.snapshot_cold_partitions(out.append) == len(keys)
    node.loop.run_pending()
    assert out == [E.none] and node.log.log_end_offset == end + len(keys)
    sizes = [h.size for h in batch_headers(node.log) if h.base_offset >= end]
    assert len(sizes) > 1 and max(sizes) <= 2000
    assert node.restart().coordinator.states.states == c.states.states
