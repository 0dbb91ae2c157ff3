"""Offsets in transactions, sans-IO: TxnOffsetCommit, pending offsets, markers, replay.

The broker's core on fake time (tests/core_harness): raw requests with kio bodies go
through KafkaApis.handle, the transaction coordinator writes its markers through the
same ReplicaManager, and the group coordinator commits or discards the pending offsets
when the marker reaches __consumer_offsets. Checks and error codes are Kafka 4.0's
(reference kafka-transactions-compaction-acls.md 2.10 and 2.12; Kafka's
OffsetMetadataManager, ClassicGroup.validateOffsetCommit, GroupCoordinatorService and
AddPartitionsToTxnManager).
"""

from __future__ import annotations

import errno

import pytest

from tests.core_harness import CoreHarness
from tests.unit.test_group_apis import GROUP_PROPS, call, commit_body, join_body
from tests.unit.test_storage_errors import DiskFaults
from tidegate.coordinator.group.group_coordinator import coordinator_operation_error
from tidegate.coordinator.group.group_metadata import DEAD
from tidegate.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, iter_records
from tidegate.coordinator.transaction.transaction_metadata import TransactionState
from tidegate.errors import ErrorCode as E
from tidegate.log.replay import replay_batches, replay_records
from tidegate.protocol.apis import ApiKey
from tidegate.record.control_records import ControlRecordType, parse_control_key
from tidegate.record.record_batch import iter_batches, read_header

TXN = "tx-1"
GROUP = "g"


# -- request helpers ---------------------------------------------------------------------------
def init_producer(h: CoreHarness, txn_id: str = TXN, timeout_ms: int = 60_000) -> tuple[int, int]:
    r = call(h, ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    assert r.coordinators[0].error_code == E.none
    r = call(h, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout": timeout_ms,
                                             "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == E.none
    return r.producer_id, r.producer_epoch


def add_offsets(h: CoreHarness, pid: int, epoch: int, group: str = GROUP, txn_id: str = TXN) -> None:
    r = call(h, ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": txn_id, "producer_id": pid,
                                               "producer_epoch": epoch, "group_id": group})
    assert r.error_code == E.none


def end_txn(h: CoreHarness, pid: int, epoch: int, commit: bool, txn_id: str = TXN) -> None:
    r = call(h, ApiKey.END_TXN, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                    "committed": commit})
    assert r.error_code == E.none
    h.loop.run_pending()  # the markers, then Complete*


def txn_body(pid: int, epoch: int, offsets: dict, *, group: str = GROUP, txn_id: str = TXN,
             member: str = "", generation: int = -1, instance: str | None = None, metadata=None) -> dict:
    by_topic: dict[str, list] = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append({
            "partition_index": p, "committed_offset": off, "committed_leader_epoch": 3,
            "committed_metadata": f"m{off}" if metadata is None else metadata,
        })
    return {
        "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member, "group_instance_id": instance,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


def txn_commit(h: CoreHarness, version: int, body: dict) -> dict:
    """{(topic, partition): error} of a TxnOffsetCommit."""
    r = call(h, ApiKey.TXN_OFFSET_COMMIT, version, body)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch(h: CoreHarness, partitions, *, stable: bool, group: str = GROUP, version: int = 7) -> dict:
    """{(topic, partition): (offset, metadata, error)} of an OffsetFetch for one group."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    req_topics = [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    if version >= 8:
        r = call(h, ApiKey.OFFSET_FETCH, version, {"require_stable": stable, "groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": req_topics}]})
        (g,) = r.groups
        assert g.error_code == E.none  # unstable partitions never make a group-level error
        topics_out = g.topics
    else:
        r = call(h, ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": req_topics,
                                                   "require_stable": stable})
        assert r.error_code == E.none
        topics_out = r.topics
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in topics_out for p in t.partitions}


def fetch_all(h: CoreHarness, *, stable: bool, group: str = GROUP) -> dict:
    r = call(h, ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None, "require_stable": stable})
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in r.topics for p in t.partitions}


def offsets_batches(h: CoreHarness) -> list:
    """Headers of every batch in __consumer_offsets."""
    plog = h.replicas.get_log(OFFSETS_TOPIC, 0)
    if plog is None:
        return []
    data = plog.read(plog.log_start_offset, 1 << 20)
    return [read_header(data, pos) for pos, _ in iter_batches(data)]


def stable_group(h: CoreHarness, group: str = GROUP, instance: str | None = None) -> tuple[str, int]:
    """One consumer joined and synced: (member id, generation)."""
    r = call(h, ApiKey.JOIN_GROUP, 9, join_body(group=group, instance=instance))
    member = r.member_id
    if r.error_code == E.member_id_required:
        r = call(h, ApiKey.JOIN_GROUP, 9, join_body(group=group, member_id=member, instance=instance))
    assert r.error_code == E.none
    s = call(h, ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": r.generation_id, "member_id": member, "group_instance_id": instance,
        "protocol_type": "consumer", "protocol_name": "range", "assignments": [{"member_id": member,
                                                                                 "assignment": b""}],
    })
    assert s.error_code == E.none
    return member, r.generation_id


T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
UNSTABLE = (-1, "", E.unstable_offset_commit)
NONE_YET = (-1, "", E.none)


pytestmark = pytest.mark.harness(GROUP_PROPS, topics={"t": 3})


# -- the full path -----------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_committed_transaction_makes_its_offsets_visible(h, version):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 10, T1: 11})) == {T0: E.none, T1: E.none}
    # durable before the answer, and pending: invisible, unstable for require_stable
    plog = h.replicas.get_log(OFFSETS_TOPIC, 0)
    assert plog.recovery_point == plog.log_end_offset
    assert fetch(h, [T0, T1, T2], stable=False) == {T0: NONE_YET, T1: NONE_YET, T2: NONE_YET}
    assert fetch(h, [T0, T1, T2], stable=True) == {T0: UNSTABLE, T1: UNSTABLE, T2: NONE_YET}
    assert fetch(h, [T0, T2], stable=True, version=9) == {T0: UNSTABLE, T2: NONE_YET}
    assert fetch(h, [T0], stable=False, version=9) == {T0: NONE_YET}
    assert fetch_all(h, stable=True) == {}  # pending offsets are not committed ones

    end_txn(h, pid, epoch, commit=True)
    assert fetch(h, [T0, T1, T2], stable=True) == {T0: (10, "m10", E.none), T1: (11, "m11", E.none),
                                                    T2: NONE_YET}
    r = call(h, ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}],
                                         "require_stable": True})
    assert r.topics[0].partitions[0].committed_leader_epoch == (3 if version >= 2 else -1)
    assert fetch_all(h, stable=True) == {T0: (10, E.none), T1: (11, E.none)}

    # what Kafka's coordinator writes: a transactional batch of the producer (base sequence
    # 0), then the producer's COMMIT marker
    *_, data, marker = offsets_batches(h)
    assert (data.producer_id, data.producer_epoch, data.base_sequence) == (pid, epoch, 0)
    assert data.is_transactional and not data.is_control and data.records_count == 2
    assert marker.is_control and marker.producer_id == pid
    batches = list(replay_batches(plog))
    assert parse_control_key(batches[-1].records[0].key) is ControlRecordType.COMMIT


def test_aborted_transaction_discards_its_offsets(h):
    assert call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 5}))
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 9, T1: 9})) == {T0: E.none, T1: E.none}
    assert fetch(h, [T0, T1], stable=False) == {T0: (5, "m5", E.none), T1: NONE_YET}
    end_txn(h, pid, epoch, commit=False)
    assert fetch(h, [T0, T1], stable=True) == {T0: (5, "m5", E.none), T1: NONE_YET}
    assert h.core.groups.coordinator.open_groups_by_producer == {}


def test_a_plain_commit_written_after_the_transactional_one_wins(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T1: 4}))  # before: replaced
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 9, T1: 9}))
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 7}))  # after: kept
    assert fetch(h, [T0], stable=True) == {T0: UNSTABLE}  # still pending
    end_txn(h, pid, epoch, commit=True)
    assert fetch(h, [T0, T1], stable=True) == {T0: (7, "m7", E.none), T1: (9, "m9", E.none)}
    # and the same after a restart (the replay applies the same rule in log order)
    h.close()
    h2 = CoreHarness(h.root, GROUP_PROPS)
    try:
        assert fetch(h2, [T0, T1], stable=True) == {T0: (7, "m7", E.none), T1: (9, "m9", E.none)}
    finally:
        h2.close()


def test_two_producers_pending_in_one_group_complete_separately(h):
    a, ea = init_producer(h, "tx-a")
    b, eb = init_producer(h, "tx-b")
    add_offsets(h, a, ea, txn_id="tx-a")
    add_offsets(h, b, eb, txn_id="tx-b")
    txn_commit(h, 3, txn_body(a, ea, {T0: 1}, txn_id="tx-a"))
    txn_commit(h, 3, txn_body(b, eb, {T1: 2}, txn_id="tx-b"))
    end_txn(h, a, ea, commit=True, txn_id="tx-a")
    assert fetch(h, [T0, T1], stable=True) == {T0: (1, "m1", E.none), T1: UNSTABLE}
    end_txn(h, b, eb, commit=False, txn_id="tx-b")
    assert fetch(h, [T0, T1], stable=True) == {T0: (1, "m1", E.none), T1: NONE_YET}


def test_one_transaction_commits_offsets_of_two_groups(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch, group="g1")
    add_offsets(h, pid, epoch, group="g2")
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 3}, group="g1"))
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 4}, group="g2"))
    end_txn(h, pid, epoch, commit=True)
    assert fetch(h, [T0], stable=True, group="g1") == {T0: (3, "m3", E.none)}
    assert fetch(h, [T0], stable=True, group="g2") == {T0: (4, "m4", E.none)}


def test_a_transaction_past_its_timeout_is_aborted_and_its_offsets_dropped(h):
    """The coordinator fences and aborts it (every 10 s, Kafka's
    transaction.abort.timed.out.transaction.cleanup.interval.ms): its ABORT marker on
    __consumer_offsets discards the pending offsets, and the old epoch is refused."""
    pid, epoch = init_producer(h, timeout_ms=1000)
    add_offsets(h, pid, epoch)
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 5}))
    h.loop.advance(9_000)
    assert fetch(h, [T0], stable=True) == {T0: UNSTABLE}
    h.loop.advance(1_100)  # the cleanup at 10 s
    h.loop.run_pending()
    assert fetch(h, [T0], stable=True) == {T0: NONE_YET}
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 6})) == {T0: E.invalid_producer_epoch}


def test_write_txn_markers_from_an_admin_also_completes_pending_offsets(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 8}))
    r = call(h, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False, "coordinator_epoch": 0,
        "topics": [{"name": OFFSETS_TOPIC, "partition_indexes": [0]}]}]})
    assert r.markers[0].topics[0].partitions[0].error_code == E.none
    assert fetch(h, [T0], stable=True) == {T0: NONE_YET}


# -- the group checks --------------------------------------------------------------------------
def test_empty_group_id_and_unknown_partitions(h):
    pid, epoch = init_producer(h)
    body = txn_body(pid, epoch, {T0: 1, ("t", 7): 1, ("nope", 0): 1}, group="")
    assert txn_commit(h, 3, body) == {T0: E.invalid_group_id, ("t", 7): E.unknown_topic_or_partition,
                                      ("nope", 0): E.unknown_topic_or_partition}
    # only unknown partitions: answered without the coordinator (no group created)
    assert txn_commit(h, 3, txn_body(pid, epoch, {("nope", 0): 1}, group="x")) == {
        ("nope", 0): E.unknown_topic_or_partition}
    assert "x" not in h.core.groups.coordinator.groups


def test_a_transactional_commit_that_is_not_made_durable_answers_as_kafkas_coordinator(h, monkeypatch):
    """The batch is appended but its fsync fails: the partitions written answer what
    Kafka's handleOperationException makes of KAFKA_STORAGE_ERROR (NOT_COORDINATOR)."""
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    DiskFaults(monkeypatch).fail("fsync", ".log", errno.EIO)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1, T1: 2, ("nope", 0): 1})) == {
        T0: E.not_coordinator, T1: E.not_coordinator, ("nope", 0): E.unknown_topic_or_partition}


def test_unknown_group_with_a_generation_is_illegal_without_one_a_simple_group(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch, group="new")
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1}, group="new", member="m", generation=1)) == {
        T0: E.illegal_generation}
    assert "new" not in h.core.groups.coordinator.groups
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1}, group="new")) == {T0: E.none}
    group = h.core.groups.coordinator.groups["new"]
    assert (group.state.value, group.protocol_type, group.offsets) == ("Empty", None, {})


def test_member_checks_of_a_stable_group(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    member, gen = stable_group(h, instance="i-1")

    def commit(version=3, **kw):
        return txn_commit(h, version, txn_body(pid, epoch, {T0: 1}, **kw))[T0]

    # no member, no generation, no instance id: no member check (v0-v2 carry none), and
    # unlike OffsetCommit no UNKNOWN_MEMBER_ID for a non-empty group
    assert commit(version=0) == E.none
    assert commit() == E.none
    assert commit(instance="i-2", member=member, generation=gen) == E.unknown_member_id
    assert commit(instance="i-1", member="other", generation=gen) == E.fenced_instance_id
    assert commit(member="stranger", generation=gen) == E.unknown_member_id
    assert commit(member=member, generation=gen + 1) == E.illegal_generation
    assert commit(member=member, generation=-1) == E.illegal_generation  # a member: generation checked
    assert commit(member=member, generation=gen, instance="i-1") == E.none
    assert commit(member=member, generation=gen) == E.none


def test_an_empty_group_accepts_generation_minus_one_whatever_the_member(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 1}))  # a simple, Empty group
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 2}, member="m", instance="i"))[T0] == E.none


def test_a_rebalancing_group_takes_transactional_commits(h):
    """No REBALANCE_IN_PROGRESS for TxnOffsetCommit (ClassicGroup.validateOffsetCommit)."""
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    r = call(h, ApiKey.JOIN_GROUP, 9, join_body())
    r = call(h, ApiKey.JOIN_GROUP, 9, join_body(member_id=r.member_id))
    assert h.core.groups.coordinator.groups[GROUP].state.value == "CompletingRebalance"
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1}, member=r.member_id, generation=r.generation_id)) == {
        T0: E.none}
    assert call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, r.member_id, r.generation_id, {T0: 1})
                ).topics[0].partitions[0].error_code == E.rebalance_in_progress


def test_dead_group_and_stopped_coordinator_are_not_available(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 1}))
    h.core.groups.coordinator.groups[GROUP].transition_to(DEAD)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 2})) == {T0: E.coordinator_not_available}
    h.core.groups.shutdown()
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 2}, group="other")) == {T0: E.coordinator_not_available}


def test_metadata_too_large_refuses_that_partition_only(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    body = txn_body(pid, epoch, {T0: 1, T1: 2}, metadata="x" * 4097)
    body["topics"][0]["partitions"][1]["committed_metadata"] = "ok"
    assert txn_commit(h, 3, body) == {T0: E.offset_metadata_too_large, T1: E.none}
    end_txn(h, pid, epoch, commit=True)
    assert fetch(h, [T0, T1], stable=True) == {T0: NONE_YET, T1: (2, "ok", E.none)}


# -- KIP-890: the offsets partition must be in the transaction ---------------------------------
@pytest.mark.parametrize(("version", "expected"), [(0, E.invalid_txn_state), (3, E.invalid_txn_state),
                                                   (4, E.transaction_abortable)])
def test_offsets_partition_not_in_the_transaction(h, version, expected):
    pid, epoch = init_producer(h)
    # no AddOffsetsToTxn
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 1})) == {T0: expected}
    assert fetch(h, [T0], stable=True) == {T0: NONE_YET}
    assert offsets_batches(h) == []  # nothing written


@pytest.mark.parametrize("version", [0, 4])
def test_verification_errors_of_the_transaction_coordinator(h, version):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    # fenced: PRODUCER_FENCED answers INVALID_PRODUCER_EPOCH, at every version
    assert txn_commit(h, version, txn_body(pid, epoch - 1 if epoch else epoch + 1, {T0: 1})) == {
        T0: E.invalid_producer_epoch}
    assert txn_commit(h, version, txn_body(pid + 1, epoch, {T0: 1})) == {T0: E.invalid_producer_id_mapping}
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 1}, txn_id="unknown")) == {
        T0: E.invalid_producer_id_mapping}
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 1}, txn_id="")) == {T0: E.invalid_request}
    # the transaction is being completed: CONCURRENT_TRANSACTIONS (the coordinator's state
    # is set by hand: on fake time the markers follow PrepareCommit at once)
    metadata = h.core.transaction_coordinator.txn_manager.get(TXN)
    metadata.state = TransactionState.PREPARE_COMMIT
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 1})) == {T0: E.concurrent_transactions}
    assert offsets_batches(h) == []


def test_the_empty_group_id_is_refused_before_the_verification(h):
    pid, epoch = init_producer(h)  # not in the transaction either
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1}, group="")) == {T0: E.invalid_group_id}


def test_verification_comes_before_the_group_checks(h):
    pid, epoch = init_producer(h)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1}, group="new", member="m", generation=3)) == {
        T0: E.invalid_txn_state}


def test_an_open_transaction_on_the_offsets_partition_needs_no_verification(h):
    """Kafka's UnifiedLog.maybeStartTransactionVerification: the partition already holds
    this producer's open transaction at this epoch."""
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1})) == {T0: E.none}
    calls = []
    verify = h.replicas.transaction_verifier
    h.replicas.transaction_verifier = lambda *a: calls.append(a) or verify(*a)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T1: 2})) == {T1: E.none}
    assert calls == []
    end_txn(h, pid, epoch, commit=True)
    add_offsets(h, pid, epoch)
    assert txn_commit(h, 3, txn_body(pid, epoch, {T1: 3})) == {T1: E.none}
    assert [c[3] for c in calls] == [[(OFFSETS_TOPIC, 0)]]  # the next transaction is verified again


def test_verification_can_be_disabled_and_the_log_still_refuses_an_old_epoch(tmp_path):
    h = CoreHarness(tmp_path / "data", {**GROUP_PROPS, "transaction.partition.verification.enable": "false"})
    try:
        h.create_topic("t", 1)
        init_producer(h)
        pid, epoch = init_producer(h)  # the same id again: epoch 1
        assert epoch == 1
        assert txn_commit(h, 3, txn_body(pid, epoch, {T0: 1})) == {T0: E.none}  # no AddOffsetsToTxn
        # the partition's producer state refuses the older epoch: the append's error
        assert txn_commit(h, 3, txn_body(pid, 0, {T0: 2})) == {T0: E.invalid_producer_epoch}
    finally:
        h.close()


@pytest.mark.parametrize(("version", "expected"), [(0, E.coordinator_not_available),
                                                   (1, E.coordinator_not_available),
                                                   (2, E.coordinator_load_in_progress),
                                                   (4, E.coordinator_load_in_progress)])
def test_load_in_progress_is_not_available_before_v2(h, version, expected):
    pid, epoch = init_producer(h)
    # a transaction coordinator still loading, as a stand-in verifier answers it
    h.replicas.transaction_verifier = lambda *_a: (E.coordinator_load_in_progress, {})
    assert txn_commit(h, version, txn_body(pid, epoch, {T0: 1})) == {T0: expected}


def test_coordinator_operation_error_mapping():
    """Kafka's GroupCoordinatorService.handleOperationException."""
    f = coordinator_operation_error
    assert f(E.network_exception) == E.coordinator_load_in_progress
    assert f(E.unknown_topic_or_partition) == f(E.not_enough_replicas) == E.coordinator_not_available
    assert f(E.request_timed_out) == E.coordinator_not_available
    assert f(E.not_leader_or_follower) == f(E.kafka_storage_error) == E.not_coordinator
    assert f(E.message_too_large) == f(E.record_list_too_large) == E.unknown_server_error
    assert f(E.concurrent_transactions) == E.concurrent_transactions
    assert f(E.none) == E.none


# -- expiry and deletion -----------------------------------------------------------------------
def test_offsets_with_a_pending_transaction_do_not_expire_nor_does_their_group(tmp_path):
    h = CoreHarness(tmp_path / "data", {**GROUP_PROPS, "offsets.retention.minutes": "1"})
    try:
        h.create_topic("t", 3)
        coord = h.core.groups.coordinator
        call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 1, T1: 1}))
        pid, epoch = init_producer(h, timeout_ms=600_000)  # open past the offsets' retention
        add_offsets(h, pid, epoch)
        txn_commit(h, 3, txn_body(pid, epoch, {T0: 2}))
        h.clock.advance(61_000)
        assert coord.cleanup_group_metadata() == 1  # T1 only
        assert coord.groups[GROUP].offsets.keys() == {T0}
        # a group with an open transaction stays even without committed offsets
        txn_commit(h, 3, txn_body(pid, epoch, {("t", 2): 2}, group="pending-only"))
        add_offsets(h, pid, epoch, group="pending-only")
        txn_commit(h, 3, txn_body(pid, epoch, {("t", 2): 2}, group="pending-only"))
        assert coord.cleanup_group_metadata() == 0
        assert "pending-only" in coord.groups
        end_txn(h, pid, epoch, commit=False)
        assert coord.cleanup_group_metadata() == 1
        assert GROUP not in coord.groups and "pending-only" not in coord.groups
    finally:
        h.close()


def test_delete_groups_removes_pending_offsets_too(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: 1}))
    txn_commit(h, 3, txn_body(pid, epoch, {T1: 2}))
    r = call(h, ApiKey.DELETE_GROUPS, 2, {"groups_names": [GROUP]})
    assert r.results[0].error_code == E.none  # an Empty group: pending offsets do not block it
    tombstones = [key for _off, key, value in replay_records(h.replicas.get_log(OFFSETS_TOPIC, 0))
                  if value is None]
    assert tombstones == [b'["o","g","t",0]', b'["o","g","t",1]', b'["g","g"]']
    end_txn(h, pid, epoch, commit=True)
    assert fetch(h, [T0, T1], stable=True) == {T0: NONE_YET, T1: NONE_YET}


def test_offset_delete_and_topic_deletion_remove_pending_offsets(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    h.create_topic("u", 1)
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 2, ("u", 0): 3}))
    r = call(h, ApiKey.OFFSET_DELETE, 0, {"group_id": GROUP, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0}]}]})
    assert r.error_code == E.none and r.topics[0].partitions[0].error_code == E.none
    assert fetch(h, [T0], stable=True) == {T0: NONE_YET}
    r = h.request(20, 6, {"topics": [{"name": "u", "topic_id": None}], "timeout": 5000, "topic_names": ["u"]})
    assert r.responses[0].error_code == E.none
    assert fetch(h, [("u", 0)], stable=True) == {("u", 0): NONE_YET}
    end_txn(h, pid, epoch, commit=True)
    assert fetch_all(h, stable=True) == {}


# -- startup load ------------------------------------------------------------------------------
def test_restart_keeps_committed_drops_aborted_and_keeps_open_transactions_pending(h):
    a, ea = init_producer(h, "tx-a")
    b, eb = init_producer(h, "tx-b")
    c, ec = init_producer(h, "tx-c")
    for txn_id, pid, epoch in (("tx-a", a, ea), ("tx-b", b, eb), ("tx-c", c, ec)):
        add_offsets(h, pid, epoch, txn_id=txn_id)
    call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T1: 5}))
    txn_commit(h, 3, txn_body(a, ea, {T0: 10}, txn_id="tx-a"))
    txn_commit(h, 3, txn_body(b, eb, {T1: 20}, txn_id="tx-b"))
    txn_commit(h, 3, txn_body(c, ec, {T2: 30}, txn_id="tx-c"))
    end_txn(h, a, ea, commit=True, txn_id="tx-a")
    end_txn(h, b, eb, commit=False, txn_id="tx-b")
    h.close()

    h2 = CoreHarness(h.root, GROUP_PROPS)
    try:
        assert fetch(h2, [T0, T1, T2], stable=False) == {T0: (10, "m10", E.none), T1: (5, "m5", E.none),
                                                         T2: NONE_YET}
        assert fetch(h2, [T2], stable=True) == {T2: UNSTABLE}
        plog = h2.replicas.get_log(OFFSETS_TOPIC, 0)
        assert plog.has_ongoing_transaction(c, ec) and not plog.has_ongoing_transaction(a, ea)
        # the open transaction completes after the restart: its offsets become visible
        end_txn(h2, c, ec, commit=True, txn_id="tx-c")
        assert fetch(h2, [T2], stable=True) == {T2: (30, "m30", E.none)}
        assert plog.first_unstable_offset is None
    finally:
        h2.close()


def test_restart_then_abort_of_the_open_transaction_discards_it(h):
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    txn_commit(h, 3, txn_body(pid, epoch, {T0: 10}))
    h.close()
    h2 = CoreHarness(h.root, GROUP_PROPS)
    try:
        assert fetch(h2, [T0], stable=True) == {T0: UNSTABLE}
        end_txn(h2, pid, epoch, commit=False)
        assert fetch(h2, [T0], stable=True) == {T0: NONE_YET}
        assert GROUP in h2.core.groups.coordinator.groups  # a simple group, Empty
    finally:
        h2.close()


def test_the_cleaner_waits_for_open_transactions_and_keeps_committed_offsets(tmp_path):
    h = CoreHarness(tmp_path / "data", {**GROUP_PROPS, "log.cleaner.delete.retention.ms": "0"})
    h.create_topic("t", 3)
    logs = h.core.logs
    for i in range(12):
        call(h, ApiKey.OFFSET_COMMIT, 8, commit_body(GROUP, "", -1, {T0: i}))
    pid, epoch = init_producer(h)
    add_offsets(h, pid, epoch)
    txn_commit(h, 3, txn_body(pid, epoch, {T1: 40}))
    plog = logs.get_log("__consumer_offsets", 0)
    assert plog is not None and plog.config.compact
    now = h.clock.wall_milliseconds()
    plog.roll(now)
    assert logs.cleaner is not None
    _dirty, uncleanable = logs.cleaner.manager.cleanable_range(("__consumer_offsets", 0), plog, now)
    assert uncleanable == 12  # the open transaction's first offset: nothing past it is cleaned
    end_txn(h, pid, epoch, commit=True)
    plog.roll(now)
    assert logs.clean()
    keys = [k for _, k, _ in iter_records(plog.read(0, 1 << 20), 0)]
    assert sorted(keys) == [b'["o","g","t",0]', b'["o","g","t",1]']
    h.close()
    h2 = CoreHarness(h.root, GROUP_PROPS)
    try:
        assert fetch(h2, [T0, T1], stable=True) == {T0: (11, "m11", E.none), T1: (40, "m40", E.none)}
    finally:
        h2.close()
