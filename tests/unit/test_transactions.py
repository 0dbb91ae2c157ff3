"""Transactions through the broker's core, sans-IO: encoded requests into KafkaApis on
fake time (tests/core_harness), the transaction coordinator writing ``__transaction_state``
and markers through the ReplicaManager, and the partitions' side (KIP-890 verification,
LSO, read_committed fetches, ListOffsets by isolation level). The cases are those
Kafka's TransactionCoordinatorTest and TransactionStateManagerTest pin
(reference kafka-transactions-compaction-acls.md §2.14)."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsResponse

from tests.core_harness import CoreHarness, response_bytes
from tests.integration.rawclient import fetch_body, list_offsets_body, produce_body
from tests.unit.logs import pbatch
from tests.unit.test_apis import NOW, batches_in
from tests.unit.test_group_apis import call
from tidegate import top
from tidegate.coordinator.transaction.transaction_coordinator import COMPLETION_WAIT_MS
from tidegate.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from tidegate.coordinator.transaction.transaction_metadata import TransactionState
from tidegate.errors import ErrorCode as E
from tidegate.metrics.prometheus import BrokerMetrics
from tidegate.protocol.apis import ApiKey
from tidegate.record.control_records import ControlRecordType, end_transaction_marker_of
from tidegate.record.record_batch import CONTROL_FLAG_MASK, read_header

TOPIC = "t"
TX = "tx-1"
MAX_TIMEOUT = 900_000
PROPS = {"transaction.state.log.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}


pytestmark = pytest.mark.harness(PROPS, topics={TOPIC: 3})


# -- request helpers ----------------------------------------------------------------------------


def settle(h, ms=50):
    """Let markers and Complete* writes (each waits for its fsync) run to the end."""
    h.loop.advance(ms)


def init(h, txn_id=TX, timeout=60_000, pid=-1, epoch=-1, version=4):
    body = {"transactional_id": txn_id, "transaction_timeout": timeout, "producer_id": pid,
            "producer_epoch": epoch}
    r = call(h, ApiKey.INIT_PRODUCER_ID, version, body)
    return r.error_code, r.producer_id, r.producer_epoch


def add_body(pid, epoch, partitions=((TOPIC, 0),), txn_id=TX):
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topics}


def add(h, pid, epoch, partitions=((TOPIC, 0),), txn_id=TX, version=3):
    r = call(h, ApiKey.ADD_PARTITIONS_TO_TXN, version, add_body(pid, epoch, partitions, txn_id))
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def verify(h, pid, epoch, partitions, txn_id=TX):
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    body = {"transactions": [{"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                              "verify_only": True,
                              "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
    r = call(h, ApiKey.ADD_PARTITIONS_TO_TXN, 4, body)
    assert r.error_code == E.none
    (result,) = r.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code for t in result.topic_results
            for p in t.results_by_partition}


def end_txn(h, pid, epoch, commit, txn_id=TX, version=3):
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return call(h, ApiKey.END_TXN, version, body).error_code


def produce(h, records, partition=0, txn_id=TX, version=9):
    body = produce_body(TOPIC, {partition: records}, acks=-1, transactional_id=txn_id)
    return call(h, ApiKey.PRODUCE, version, body).responses[0].partition_responses[0]


def fetch(h, offset=0, partition=0, isolation=1):
    r = call(h, ApiKey.FETCH, 11, fetch_body(TOPIC, offset, partition=partition, isolation_level=isolation))
    return r.responses[0].partitions[0]


def latest(h, isolation, partition=0):
    r = call(h, ApiKey.LIST_OFFSETS, 5, list_offsets_body(TOPIC, partition, -1, isolation))
    return r.topics[0].partitions[0].offset


def describe(h, txn_id=TX):
    """DescribeTransactions v0 of one id, decoded by kafka-python (kio refuses the -1
    start time of an id with no transaction open, which Kafka sends)."""
    _request, outcome, _cid, _released = h.send(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
    r = DescribeTransactionsResponse.decode(response_bytes(outcome), version=0, header=True, framed=True)
    return r.transaction_states[0]


def state(h, txn_id=TX):
    return h.core.transaction_coordinator.txn_manager.get(txn_id).state


def txn(seq, pid, epoch=0, n=1):
    return pbatch(seq, n, pid=pid, epoch=epoch, transactional=True, ts=NOW)


def markers(h, partition=0):
    """(type, producer id, epoch, coordinator epoch) of every marker in the partition."""
    out = []
    plog = h.replicas.get_log(TOPIC, partition)
    offset = 0
    while offset < plog.log_end_offset:
        for _base, last, raw in batches_in(plog.read(offset, 1 << 24)):
            b = read_header(raw)
            if b.attributes & CONTROL_FLAG_MASK:
                m = end_transaction_marker_of(raw)
                out.append((m.type, b.producer_id, b.producer_epoch, m.coordinator_epoch))
            offset = last + 1
    return out


# -- the whole path -------------------------------------------------------------------------------


def test_a_committed_transaction_becomes_visible_to_read_committed_at_its_marker(h):
    err, pid, epoch = init(h)
    assert (err, epoch) == (E.none, 0)
    assert add(h, pid, epoch) == {(TOPIC, 0): E.none}
    assert produce(h, txn(0, pid, n=2)).error_code == E.none
    assert produce(h, txn(2, pid)).error_code == E.none
    p = fetch(h)
    assert (p.high_watermark, p.last_stable_offset, p.aborted_transactions) == (3, 0, ())
    assert batches_in(p.records) == []
    assert fetch(h, isolation=0).aborted_transactions is None  # read_uncommitted: null
    assert len(batches_in(fetch(h, isolation=0).records)) == 2
    assert (latest(h, 0), latest(h, 1)) == (3, 0)
    assert state(h) is TransactionState.ONGOING
    assert end_txn(h, pid, epoch, True) == E.none
    settle(h)
    assert state(h) is TransactionState.COMPLETE_COMMIT
    assert markers(h) == [(ControlRecordType.COMMIT, pid, 0, h.core.transaction_coordinator.txn_manager.coordinator_epoch)]
    p = fetch(h)
    assert (p.high_watermark, p.last_stable_offset, p.aborted_transactions) == (4, 4, ())
    assert [b[0] for b in batches_in(p.records)] == [0, 2, 3]
    assert (latest(h, 0), latest(h, 1)) == (4, 4)


def test_an_aborted_transaction_is_listed_for_read_committed_consumers(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    produce(h, txn(0, pid, n=2), partition=0)
    produce(h, txn(0, pid), partition=1)
    assert end_txn(h, pid, epoch, False) == E.none
    settle(h)
    for partition in (0, 1):
        p = fetch(h, partition=partition)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
        assert p.last_stable_offset == p.high_watermark
        assert markers(h, partition)[0][0] is ControlRecordType.ABORT
    assert markers(h, 2) == []  # not in the transaction
    assert state(h) is TransactionState.COMPLETE_ABORT


def test_the_next_transaction_continues_the_sequence(h):
    _, pid, epoch = init(h)
    for i, commit in enumerate((False, True)):
        add(h, pid, epoch)
        assert produce(h, txn(i, pid)).error_code == E.none
        assert end_txn(h, pid, epoch, commit) == E.none
        settle(h)
    p = fetch(h)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
    assert p.last_stable_offset == 4


# -- KIP-890 part 1: produce verification ----------------------------------------------------------


@pytest.mark.parametrize(("version", "error"), [(9, E.invalid_txn_state), (10, E.invalid_txn_state),
                                                (11, E.transaction_abortable)])
def test_a_partition_not_added_to_the_transaction_is_refused(h, version, error):
    _, pid, epoch = init(h)
    add(h, pid, epoch, [(TOPIC, 0)])
    r = produce(h, txn(0, pid), partition=1, version=version)
    assert r.error_code == error
    assert h.replicas.get_log(TOPIC, 1).log_end_offset == 0
    assert produce(h, txn(0, pid), partition=0, version=version).error_code == E.none


def test_a_produce_without_a_transaction_is_refused(h):
    _, pid, _epoch = init(h)
    r = produce(h, txn(0, pid))  # no AddPartitionsToTxn: Empty
    assert r.error_code == E.invalid_txn_state
    assert r.error_message == "Partition was not added to the transaction"


def test_a_fenced_producer_gets_invalid_producer_epoch_on_produce(h):
    _, pid, _ = init(h)
    _, pid2, epoch2 = init(h)  # a second instance: epoch 1
    assert (pid2, epoch2) == (pid, 1)
    add(h, pid, 1)
    r = produce(h, txn(0, pid, epoch=0))
    assert r.error_code == E.invalid_producer_epoch


def test_transactional_batches_of_two_producers_in_one_request_are_refused(h):
    _, pid, _epoch = init(h)
    _, other, _ = init(h, "tx-2")
    body = produce_body(TOPIC, {0: txn(0, pid), 1: txn(0, other)}, acks=1, transactional_id=TX)
    parts = call(h, ApiKey.PRODUCE, 9, body).responses[0].partition_responses
    assert [p.error_code for p in parts] == [E.invalid_producer_id_mapping] * 2


def test_verification_can_be_turned_off(tmp_path):
    h = CoreHarness(tmp_path / "data", {**PROPS, "transaction.partition.verification.enable": "false"})
    h.create_topic(TOPIC)
    _, pid, _ = init(h)
    assert produce(h, txn(0, pid)).error_code == E.none  # as Kafka before 3.6
    h.close()


# -- InitProducerId ------------------------------------------------------------------------------


def test_init_producer_id_rules(h):
    assert init(h, "")[0] == E.invalid_request
    for bad in (0, -1, MAX_TIMEOUT + 1):
        assert init(h, timeout=bad)[0] == E.invalid_transaction_timeout
    assert init(h, timeout=1)[:1] == (E.none,)
    assert init(h, "tx-max", timeout=MAX_TIMEOUT)[0] == E.none
    err, _pid, epoch = init(h, version=2)
    assert (err, epoch) == (E.none, 1)  # the second InitProducerId of TX bumps its epoch


def test_init_producer_id_while_a_transaction_is_open_fences_and_aborts_it(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    # the zombie's successor: the open transaction is aborted at epoch + 1 first
    assert init(h) == (E.concurrent_transactions, -1, -1)
    assert describe(h).producer_epoch == 1
    settle(h)
    assert state(h) is TransactionState.COMPLETE_ABORT
    assert markers(h) == [(ControlRecordType.ABORT, pid, 1, markers(h)[0][3])]
    assert init(h) == (E.none, pid, 2)  # the retry bumps again
    assert end_txn(h, pid, 0, True) == E.producer_fenced  # the zombie
    assert end_txn(h, pid, 0, True, version=1) == E.invalid_producer_epoch  # older versions


def test_an_exhausted_epoch_rotates_the_producer_id_and_a_retry_gets_the_same(h):
    _, pid, _ = init(h)
    m = h.core.transaction_coordinator.txn_manager.get(TX)
    m.producer_epoch = 32766  # Short.MaxValue - 1: exhausted
    err, new_pid, new_epoch = init(h, pid=pid, epoch=32766)
    assert (err, new_epoch) == (E.none, 0) and new_pid != pid
    # a retry with the old id and epoch (the response was lost) gets the same answer
    assert init(h, pid=pid, epoch=32766) == (E.none, new_pid, 0)
    assert init(h, pid=pid, epoch=5)[0] == E.producer_fenced


def test_kip_360_a_bump_with_the_current_epoch(h):
    _, pid, epoch = init(h)
    assert init(h, pid=pid, epoch=epoch) == (E.none, pid, 1)
    assert init(h, pid=pid, epoch=0) == (E.none, pid, 1)  # a retry: the same answer, no bump
    assert init(h, pid=pid, epoch=1) == (E.none, pid, 2)
    assert init(h, pid=pid, epoch=0)[0] == E.producer_fenced  # bumped by someone else since
    assert init(h, pid=pid + 100, epoch=2)[0] == E.producer_fenced


def test_init_producer_id_in_prepare_commit_is_concurrent_transactions(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    coordinator = h.core.transaction_coordinator
    coordinator.markers.write_markers = lambda *a, **kw: None  # markers never complete
    assert end_txn(h, pid, epoch, True) == E.none
    assert state(h) is TransactionState.PREPARE_COMMIT
    assert init(h)[0] == E.concurrent_transactions
    # the next transaction's AddPartitionsToTxn waits for the markers, up to
    # COMPLETION_WAIT_MS, then is told to retry
    request, cid = call(h, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body(pid, epoch), wait=False)
    h.loop.advance(COMPLETION_WAIT_MS - 1)
    assert h.channel.response_to(request) is None
    r = h.answer(request, cid, within_ms=1)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == E.concurrent_transactions
    # the markers are being written (Complete* pending): either result is told to retry
    assert end_txn(h, pid, epoch, True) == E.concurrent_transactions
    assert end_txn(h, pid, epoch, False) == E.concurrent_transactions
    m = h.core.transaction_coordinator.txn_manager.get(TX)
    m.pending_state = None  # Kafka's TransactionCoordinatorTest: PrepareCommit, nothing pending
    assert end_txn(h, pid, epoch, True) == E.concurrent_transactions
    assert end_txn(h, pid, epoch, False) == E.invalid_txn_state
    m.state = TransactionState.PREPARE_ABORT
    assert end_txn(h, pid, epoch, True) == E.invalid_txn_state
    assert end_txn(h, pid, epoch, False) == E.concurrent_transactions


def test_the_next_transaction_waits_for_the_markers_instead_of_retrying(h):
    """Back to back transactions: the AddPartitionsToTxn sent right after EndTxn is
    answered once the previous transaction is complete, not with CONCURRENT_TRANSACTIONS
    (which would cost the client its retry backoff)."""
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    markers_channel = h.core.transaction_coordinator.markers
    held = []  # the markers' writes, held back until the next call has arrived
    write_markers = markers_channel.write_markers
    markers_channel.write_markers = lambda *a: held.append(a)
    assert end_txn(h, pid, epoch, True) == E.none
    assert state(h) is TransactionState.PREPARE_COMMIT and len(held) == 1
    request, cid = call(h, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_body(pid, epoch), wait=False)
    h.loop.advance(5)
    assert h.channel.response_to(request) is None  # waiting, not CONCURRENT_TRANSACTIONS
    write_markers(*held[0])
    r = h.answer(request, cid, within_ms=5)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == E.none
    assert state(h) is TransactionState.ONGOING
    assert markers(h)[0][0] is ControlRecordType.COMMIT


# -- AddPartitionsToTxn -------------------------------------------------------------------------


def test_add_partitions_rules(h):
    assert add(h, 99, 0, txn_id="unknown") == {(TOPIC, 0): E.invalid_producer_id_mapping}
    _, pid, epoch = init(h)
    assert add(h, pid, epoch + 1) == {(TOPIC, 0): E.producer_fenced}
    assert add(h, pid, epoch + 1, version=1) == {(TOPIC, 0): E.invalid_producer_epoch}
    assert add(h, pid + 1, epoch) == {(TOPIC, 0): E.invalid_producer_id_mapping}
    assert add(h, pid, epoch, [(TOPIC, 0), ("nope", 0)]) == {
        (TOPIC, 0): E.operation_not_attempted, ("nope", 0): E.unknown_topic_or_partition}
    assert state(h) is TransactionState.EMPTY  # nothing added
    assert add(h, pid, epoch) == {(TOPIC, 0): E.none}
    end = h.logs.get_log(TRANSACTION_STATE_TOPIC, h.core.transaction_coordinator.txn_manager.partition_for(TX))
    written = end.log_end_offset
    assert add(h, pid, epoch) == {(TOPIC, 0): E.none}  # already there: no write
    assert end.log_end_offset == written
    assert verify(h, pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) == {
        (TOPIC, 0): E.none, (TOPIC, 1): E.transaction_abortable}
    assert describe(h).topics[0].partitions == [0]  # verify_only added nothing


# -- EndTxn (transaction version 1) ---------------------------------------------------------------


def test_end_txn_rules(h):
    _, pid, epoch = init(h)
    assert end_txn(h, pid, epoch, True) == E.invalid_txn_state  # Empty
    add(h, pid, epoch)
    assert end_txn(h, pid, epoch + 1, True) == E.producer_fenced
    assert end_txn(h, pid, epoch - 1, True) == E.producer_fenced
    assert end_txn(h, pid + 1, epoch, True) == E.invalid_producer_id_mapping
    assert end_txn(h, pid, epoch, True) == E.none
    settle(h)
    assert end_txn(h, pid, epoch, True) == E.none  # a retry of the commit
    assert end_txn(h, pid, epoch, False) == E.invalid_txn_state
    add(h, pid, epoch)
    assert end_txn(h, pid, epoch, False) == E.none
    settle(h)
    assert end_txn(h, pid, epoch, False) == E.none
    assert end_txn(h, pid, epoch, True) == E.invalid_txn_state


# -- timeouts and expiry ------------------------------------------------------------------------------


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(h):
    _, pid, epoch = init(h, timeout=5_000)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    h.loop.advance(5_000)
    assert state(h) is TransactionState.ONGOING  # the check runs every 10 s
    h.loop.advance(5_000 + 100)
    assert state(h) is TransactionState.COMPLETE_ABORT
    assert describe(h).producer_epoch == epoch + 1
    assert markers(h) == [(ControlRecordType.ABORT, pid, epoch + 1, markers(h)[0][3])]
    assert produce(h, txn(1, pid)).error_code == E.invalid_producer_epoch  # the zombie
    assert end_txn(h, pid, epoch, True) == E.producer_fenced
    p = fetch(h)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]


def test_idle_transactional_ids_expire(tmp_path):
    h = CoreHarness(tmp_path / "data", {**PROPS, "transactional.id.expiration.ms": "60000",
                                    "transaction.remove.expired.transaction.cleanup.interval.ms": "10000"})
    h.create_topic(TOPIC)
    _, _pid, _epoch = init(h, "idle")
    _, pid2, epoch2 = init(h, "open", timeout=MAX_TIMEOUT)
    assert add(h, pid2, epoch2, txn_id="open") == {(TOPIC, 0): E.none}
    h.loop.advance(60_000 + 10_000)
    assert describe(h, "idle").error_code == E.transactional_id_not_found
    # an open transaction is kept (it is aborted by its own timeout, then may expire)
    assert describe(h, "open").error_code == E.none
    h.close()


# -- restarts ---------------------------------------------------------------------------------------


def test_a_transaction_left_in_prepare_commit_is_completed_after_a_restart(tmp_path):
    root = tmp_path / "data"
    h = CoreHarness(root, PROPS)
    h.create_topic(TOPIC)
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    h.core.transaction_coordinator.markers.write_markers = lambda *a, **kw: None
    assert end_txn(h, pid, epoch, True) == E.none  # PrepareCommit durable, no marker yet
    assert fetch(h).last_stable_offset == 0
    h.close()
    h = CoreHarness(root, PROPS)
    settle(h)
    assert state(h) is TransactionState.COMPLETE_COMMIT
    (m,) = markers(h)
    assert m[:3] == (ControlRecordType.COMMIT, pid, epoch)
    assert m[3] == h.core.transaction_coordinator.txn_manager.coordinator_epoch == 1
    p = fetch(h)
    assert (p.last_stable_offset, len(batches_in(p.records))) == (2, 2)  # the data and its marker
    assert init(h) == (E.none, pid, epoch + 1)
    h.close()


@pytest.mark.parametrize("stop_at", ["prepared", "mid-markers", "marked"])
def test_kill_9_at_each_step_of_a_commit_completes_it_after_the_restart(tmp_path, stop_at):
    """A transaction over two partitions commits and the broker is killed (-9) at
    ``stop_at``: "prepared" (PrepareCommit durable, no marker), "mid-markers" (the marker
    on partition 0 only) or "marked" (every marker, CompleteCommit not written). After
    the restart the transaction must be complete and wholly visible to read_committed."""
    root = tmp_path / "data"
    h = CoreHarness(root, PROPS)
    h.create_topic(TOPIC, partitions=2)
    _, pid, epoch = init(h)
    add(h, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    for p in (0, 1):
        assert produce(h, txn(0, pid, n=2), partition=p).error_code == E.none
    coordinator = h.core.transaction_coordinator
    write_markers = coordinator.markers.write_markers
    if stop_at == "prepared":
        coordinator.markers.write_markers = lambda *a, **kw: None
    elif stop_at == "mid-markers":
        coordinator.markers.write_markers = lambda pid_, ep, ce, commit, partitions, done: write_markers(
            pid_, ep, ce, commit, partitions[:1], lambda tp, err: None)
    else:
        coordinator._write_completion = lambda *a, **kw: None
    assert end_txn(h, pid, epoch, True) == E.none
    settle(h)
    assert len(markers(h, 0)) == (0 if stop_at == "prepared" else 1)
    assert len(markers(h, 1)) == (1 if stop_at == "marked" else 0)
    assert state(h) is TransactionState.PREPARE_COMMIT
    h.crash()
    h = CoreHarness(root, PROPS)
    settle(h)
    assert state(h) is TransactionState.COMPLETE_COMMIT
    for p in (0, 1):
        got = fetch(h, partition=p)
        assert got.last_stable_offset == got.high_watermark
        data = [b for b in batches_in(got.records) if not read_header(b[2]).attributes & CONTROL_FLAG_MASK]
        assert [(b[0], b[1]) for b in data] == [(0, 1)]
        assert all(m[0] is ControlRecordType.COMMIT for m in markers(h, p))
        assert got.aborted_transactions == ()
    # the producer goes on: a new transaction at the same epoch
    add(h, pid, epoch)
    assert produce(h, txn(2, pid)).error_code == E.none
    assert end_txn(h, pid, epoch, False) == E.none
    settle(h)
    assert state(h) is TransactionState.COMPLETE_ABORT
    h.close()


def test_the_coordinator_state_survives_a_restart(tmp_path):
    root = tmp_path / "data"
    h = CoreHarness(root, PROPS)
    h.create_topic(TOPIC, partitions=2)
    _, pid, epoch = init(h)
    add(h, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    h.close()
    h = CoreHarness(root, PROPS)
    d = describe(h)
    assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("Ongoing", pid, epoch)
    assert [(t.topic, t.partitions) for t in d.topics] == [(TOPIC, [0, 1])]
    assert end_txn(h, pid, epoch, False) == E.none
    h.close()


# -- DescribeTransactions / ListTransactions ---------------------------------------------------------


def test_describe_and_list_transactions(h):
    _, pid, epoch = init(h)
    _, pid2, _ = init(h, "tx-2")
    add(h, pid, epoch)
    d = describe(h)
    assert (d.error_code, d.transaction_state, d.transaction_timeout_ms) == (E.none, "Ongoing", 60_000)
    assert d.transaction_start_time_ms == h.clock.wall_milliseconds()
    assert describe(h, "none").error_code == E.transactional_id_not_found

    def listed(states=(), pids=(), duration=-1):
        r = call(h, ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": list(states),
                                                  "producer_id_filters": list(pids), "duration_filter": duration})
        return r.unknown_state_filters, sorted((s.transactional_id, s.transaction_state) for s in r.transaction_states)

    assert listed() == ((), [(TX, "Ongoing"), ("tx-2", "Empty")])
    assert listed(["Ongoing", "Bogus"]) == (("Bogus",), [(TX, "Ongoing")])
    assert listed(pids=[pid2]) == ((), [("tx-2", "Empty")])
    h.loop.advance(5_000)
    # Kafka's duration filter: now - start > duration, where an id without a transaction
    # has start -1 and so always passes
    assert listed(duration=10_000)[1] == [("tx-2", "Empty")]
    assert listed(duration=1_000)[1] == [(TX, "Ongoing"), ("tx-2", "Empty")]


# -- metrics and tidegate top ------------------------------------------------------------------------


def test_coordinator_metrics_and_the_top_view(h):
    bm = BrokerMetrics()
    bm.register_transaction_coordinator(h.core.transaction_coordinator)

    def value(name, **labels):
        return bm.registry.get_sample_value(name, labels)

    _, pid, epoch = init(h)
    add(h, pid, epoch)
    produce(h, txn(0, pid))
    _, pid2, epoch2 = init(h, "tx-2")
    h.loop.advance(2_000)
    assert value("tidegate_transaction_coordinator_transactional_ids", state="Ongoing") == 1
    assert value("tidegate_transaction_coordinator_transactional_ids", state="Empty") == 1
    assert value("tidegate_transaction_coordinator_oldest_open_transaction_age_ms") == 2_000
    first = top.Snapshot.parse(bm.exposition().decode(), 1.0)
    end_txn(h, pid, epoch, True)
    add(h, pid2, epoch2, txn_id="tx-2")
    end_txn(h, pid2, epoch2, False, txn_id="tx-2")
    settle(h)
    assert value("tidegate_transaction_coordinator_completed_transactions_total", result="commit") == 1
    assert value("tidegate_transaction_coordinator_completed_transactions_total", result="abort") == 1
    assert value("tidegate_transaction_coordinator_markers_written_total") == 2
    assert value("kafka_server_transaction_coordinator_metrics_partition_load_time_max") == 0
    (section,) = [s for s in top.build_view(first, top.Snapshot.parse(bm.exposition().decode(), 2.0),
                                            "test").sections if s.title == "Transactions"]
    rows = {r[0]: r[1] for r in section.rows}
    assert (rows["open transactions"], rows["commits/s"], rows["aborts/s"]) == ("0", "1", "1")
    assert rows["ids by state"] == "CompleteCommit 1, CompleteAbort 1"


def test_a_parked_read_committed_fetch_waits_for_the_commit_not_the_data(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    body = fetch_body(TOPIC, 0, isolation_level=1, max_wait=5_000, min_bytes=1)
    request, cid = call(h, ApiKey.FETCH, 11, body, wait=False)
    assert produce(h, txn(0, pid)).error_code == E.none
    h.loop.advance(100)
    assert h.channel.response_to(request) is None  # the data is not committed yet
    uncommitted = call(h, ApiKey.FETCH, 11, fetch_body(TOPIC, 0, max_wait=5_000, min_bytes=1))
    assert len(batches_in(uncommitted.responses[0].partitions[0].records)) == 1  # read_uncommitted sees it
    assert end_txn(h, pid, epoch, True) == E.none
    started = h.clock.milliseconds()
    r = h.answer(request, cid, within_ms=100)
    assert h.clock.milliseconds() - started < 100  # woken by the marker, not the timeout
    p = r.responses[0].partitions[0]
    assert (p.last_stable_offset, len(batches_in(p.records))) == (2, 2)


def test_describe_producers_shows_the_open_transaction_and_the_coordinator_epoch(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    produce(h, pbatch(0, 2, pid=pid, transactional=True, ts=NOW), partition=1)
    h.produce(TOPIC, 1, pbatch(0, 1, pid=777, ts=NOW))  # an idempotent producer beside it

    def producers(partition):
        body = {"topics": [{"name": TOPIC, "partition_indexes": [partition]}]}
        r = call(h, ApiKey.DESCRIBE_PRODUCERS, 0, body)
        return sorted((s.producer_id, s.coordinator_epoch, s.current_txn_start_offset)
                      for s in r.topics[0].partitions[0].active_producers)

    assert producers(1) == [(pid, -1, 0), (777, -1, -1)]
    assert end_txn(h, pid, epoch, True) == E.none
    settle(h)
    coordinator_epoch = h.core.transaction_coordinator.txn_manager.coordinator_epoch
    assert producers(1) == [(pid, coordinator_epoch, -1), (777, -1, -1)]
    assert producers(0) == [(pid, coordinator_epoch, -1)]  # the marker alone


def test_a_coordinator_not_serving_cannot_verify_a_produce(h):
    _, pid, epoch = init(h)
    add(h, pid, epoch)
    h.core.transaction_coordinator.active = False  # shutting down
    r = produce(h, txn(0, pid), partition=1)
    # COORDINATOR_NOT_AVAILABLE from the verification, as Kafka answers it to producers
    assert (r.error_code, r.error_message.split(".")[0]) == (
        E.not_enough_replicas, "Unable to verify the partition has been added to the transaction")
