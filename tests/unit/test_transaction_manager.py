"""The producer's transaction manager without sockets: every state transition, the
request queue (order, coordinators, backoffs on fake time), and what each error of
every transactional response does (the reference's section 2.15, Kafka's handlers)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import ClassVar

import pytest

from tidegate.clock import MockClock
from tidegate.errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from tidegate.producer import (
    CommitFailedError,
    ConsumerGroupMetadata,
    GroupAuthorizationError,
    IllegalStateError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OffsetAndMetadata,
    OutOfOrderSequenceError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionalIdAuthorizationError,
    UnknownProducerIdError,
)
from tidegate.producer.errors import (
    ClusterAuthorizationError,
    FencedInstanceIdError,
    error_for_code,
)
from tidegate.producer.transaction_manager import (
    ADD_PARTITIONS_RETRY_BACKOFF_MS,
    VALID_SOURCES,
    CoordinatorType,
    State,
    TransactionManager,
    TxnRequestHandler,
)
from tidegate.protocol.codec import response_class

TID = "txn-1"
PID = 4000
BACKOFF = 100

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = (
    10,
    22,
    24,
    25,
    26,
    28,
)
# error codes
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 16, 15, 14
CONCURRENT_TRANSACTIONS, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT = 51, 3, 7
PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 90, 47, 48
INVALID_PRODUCER_ID_MAPPING, UNKNOWN_PRODUCER_ID, TRANSACTION_ABORTABLE = 49, 59, 120
TXN_ID_AUTH, CLUSTER_AUTH, TOPIC_AUTH, GROUP_AUTH = 53, 31, 29, 30
OPERATION_NOT_ATTEMPTED, INVALID_TRANSACTION_TIMEOUT, UNSUPPORTED_VERSION = 55, 50, 35
UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID = 25, 22, 82
UNSUPPORTED_FOR_MESSAGE_FORMAT, INVALID_RECORD, UNKNOWN_SERVER_ERROR = 43, 87, -1


# -- a sender without sockets ---------------------------------------------------------------


def fake_response(api_key: int, version: int, **fields):
    """A response of ``api_key`` v``version``, as the client decodes it (the codec's
    message class)."""
    from tidegate.protocol.codec import build

    return build(response_class(api_key, version), fields)


class Driver:
    """What the sender does with the manager's requests, minus the network: route each
    to its coordinator (looking it up first), and answer with what the test says."""

    VERSIONS: ClassVar[dict[int, int]] = {FIND_COORDINATOR: 4, INIT_PRODUCER_ID: 5, ADD_PARTITIONS: 3, ADD_OFFSETS: 4,
                END_TXN: 4, TXN_OFFSET_COMMIT: 4}  # fmt: skip

    def __init__(self, tm: TransactionManager, clock: MockClock) -> None:
        self.tm = tm
        self.clock = clock
        self.sent: list[TxnRequestHandler] = []

    def next(self, has_incomplete: bool = False) -> TxnRequestHandler | None:
        """The next request the sender would send (FindCoordinator answered by the
        test like any other)."""
        for _ in range(10):
            h = self.tm.next_request(has_incomplete, self.clock.milliseconds())
            if h is None:
                return None
            kind = h.coordinator_type
            if kind is not None and self.tm.coordinator(kind) is None:
                self.tm.coordinator_unknown(h)
                continue
            if kind is CoordinatorType.TRANSACTION:
                self.tm.handle_coordinator_ready(5)
            self.sent.append(h)
            return h
        raise AssertionError("looping")

    def expect(self, api_key: int, has_incomplete: bool = False) -> TxnRequestHandler:
        h = self.next(has_incomplete)
        assert h is not None, f"expected api {api_key}, nothing to send"
        assert h.api_key == api_key, f"expected api {api_key}, got {h.name}"
        return h

    def body(self, h: TxnRequestHandler) -> dict:
        return h.body(max(h.min_version, min(h.max_version, self.VERSIONS[h.api_key])))

    def answer(self, h: TxnRequestHandler, code: int = 0, **fields) -> None:
        v = self.VERSIONS[h.api_key]
        if h.api_key == FIND_COORDINATOR:
            key = h.body(v)["coordinator_keys"][0]
            resp = fake_response(FIND_COORDINATOR, v, coordinators=[
                {"key": key, "node_id": 1, "host": "127.0.0.1", "port": 9092, "error_code": code}])  # fmt: skip
        elif h.api_key == INIT_PRODUCER_ID:
            ok = code == 0
            resp = fake_response(INIT_PRODUCER_ID, v, error_code=code,
                                 producer_id=fields.get("producer_id", PID if ok else -1),
                                 producer_epoch=fields.get("producer_epoch", 0 if ok else -1))  # fmt: skip
        elif h.api_key == ADD_PARTITIONS:
            codes = fields.get("codes", {})
            topics: dict[str, list] = {}
            for tp in h.partitions:
                topics.setdefault(tp[0], []).append(
                    {"partition_index": tp[1], "partition_error_code": codes.get(tp, code)})
            resp = fake_response(ADD_PARTITIONS, v, results_by_topic_v3_and_below=[
                {"name": t, "results_by_partition": ps} for t, ps in topics.items()])  # fmt: skip
        elif h.api_key in (ADD_OFFSETS, END_TXN):
            resp = fake_response(h.api_key, v, error_code=code)
        elif h.api_key == TXN_OFFSET_COMMIT:
            codes = fields.get("codes", {})
            body = self.body(h)
            resp = fake_response(TXN_OFFSET_COMMIT, v, topics=[
                {"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"],
                     "error_code": codes.get((t["name"], p["partition_index"]), code)}
                    for p in t["partitions"]]}
                for t in body["topics"]])  # fmt: skip
        else:  # pragma: no cover
            raise AssertionError(h)
        h.on_response(resp)

    def run(self, api_key: int, code: int = 0, has_incomplete: bool = False, **fields):
        """Answer the FindCoordinator lookups on the way with success, then ``api_key``."""
        while True:
            h = self.next(has_incomplete)
            assert h is not None, f"expected api {api_key}, nothing to send"
            if h.api_key == FIND_COORDINATOR and api_key != FIND_COORDINATOR:
                self.answer(h)
                continue
            assert h.api_key == api_key, f"expected api {api_key}, got {h.name}"
            self.answer(h, code, **fields)
            return h


def new_tm(transactional_id: str | None = TID) -> tuple[TransactionManager, Driver, MockClock]:
    clock = MockClock()
    tm = TransactionManager(transactional_id, transaction_timeout_ms=60000,
                            retry_backoff_ms=BACKOFF, clock=clock)  # fmt: skip
    return tm, Driver(tm, clock), clock


def initialized(**kw) -> tuple[TransactionManager, Driver, MockClock]:
    tm, d, clock = new_tm(**kw)
    result = tm.initialize_transactions()
    d.run(INIT_PRODUCER_ID)
    result.wait(0)
    assert tm.state is State.READY
    return tm, d, clock


def in_transaction(*partitions: tuple[str, int]) -> tuple[TransactionManager, Driver, MockClock]:
    tm, d, clock = initialized()
    tm.begin_transaction()
    for tp in partitions:
        tm.maybe_add_partition(tp)
    if partitions:
        d.run(ADD_PARTITIONS)
    return tm, d, clock


def batch(topic: str = "t", partition: int = 0, seq: int = -1, pid: int = -1, count: int = 1):
    b = SimpleNamespace(topic=topic, partition=partition, base_sequence=seq, producer_id=pid,
                        producer_epoch=-1, count=count, transactional=False, attempts=0,
                        sequence_reset=False)  # fmt: skip

    def set_producer_state(pid, epoch, seq, transactional=False):
        b.producer_id, b.producer_epoch, b.base_sequence = pid, epoch, seq
        b.transactional = transactional

    b.set_producer_state = set_producer_state
    return b


# -- transitions -------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), list(itertools.product(State, State)))
def test_every_transition_is_kafkas(source, target):
    valid = {
        State.UNINITIALIZED: {State.READY, State.ABORTABLE_ERROR},
        State.INITIALIZING: {State.UNINITIALIZED, State.ABORTING_TRANSACTION},
        State.READY: {State.INITIALIZING, State.COMMITTING_TRANSACTION,
                      State.ABORTING_TRANSACTION},
        State.IN_TRANSACTION: {State.READY},
        State.COMMITTING_TRANSACTION: {State.IN_TRANSACTION},
        State.ABORTING_TRANSACTION: {State.IN_TRANSACTION, State.ABORTABLE_ERROR},
        State.ABORTABLE_ERROR: {State.IN_TRANSACTION, State.COMMITTING_TRANSACTION,
                                State.ABORTABLE_ERROR, State.INITIALIZING},
        State.FATAL_ERROR: set(State),
    }  # fmt: skip
    assert set(VALID_SOURCES[target]) == valid[target]
    tm, _, _ = new_tm()
    tm._state = source
    err = KafkaError("boom")
    needs_error = target in (State.ABORTABLE_ERROR, State.FATAL_ERROR)
    if source in valid[target]:
        tm._transition_to(target, err if needs_error else None)
        assert tm.state is target
        assert tm.last_error is (err if needs_error else None)
    else:
        # on an application thread: refused, state unchanged
        with pytest.raises(IllegalStateError, match=f"from state {source.name} to state"):
            tm._transition_to(target, err if needs_error else None)
        assert tm.state is source
        # on the sender thread: refused, and the state is poisoned (KAFKA-14831)
        tm.set_poison_state_on_invalid_transition(True)
        with pytest.raises(IllegalStateError):
            tm._transition_to(target, err if needs_error else None)
        assert tm.state is State.FATAL_ERROR
        assert isinstance(tm.last_error, IllegalStateError) and tm.last_error.fatal


def test_error_states_need_an_error_and_mark_it():
    tm, _, _ = new_tm()
    tm._state = State.IN_TRANSACTION
    with pytest.raises(ValueError, match="null exception"):
        tm._transition_to(State.ABORTABLE_ERROR)
    err = KafkaError("x")
    tm._transition_to(State.ABORTABLE_ERROR, err)
    assert err.txn_requires_abort and not err.fatal
    err2 = KafkaError("y")
    tm._transition_to(State.FATAL_ERROR, err2)
    assert err2.fatal and not err2.txn_requires_abort


# -- the happy paths ----------------------------------------------------------------------------


def test_init_transactions_finds_the_coordinator_then_inits_the_producer_id():
    tm, d, _ = new_tm()
    assert tm.state is State.UNINITIALIZED
    result = tm.initialize_transactions()
    assert tm.state is State.INITIALIZING and not result.is_completed
    find = d.expect(FIND_COORDINATOR)
    assert d.body(find) == {"key_type": 1, "coordinator_keys": [TID]}
    assert find.body(3) == {"key": TID, "key_type": 1}  # before KIP-699 batching
    assert find.min_version == 1  # key_type needs v1
    d.answer(find)
    assert tm.coordinator(CoordinatorType.TRANSACTION) == (1, "127.0.0.1", 9092)
    init = d.expect(INIT_PRODUCER_ID)
    assert d.body(init) == {"transactional_id": TID, "transaction_timeout": 60000,
                            "producer_id": -1, "producer_epoch": -1}  # fmt: skip
    d.answer(init, producer_id=PID, producer_epoch=3)
    result.wait(0)
    assert tm.state is State.READY
    assert (tm.idempotence.producer_id, tm.idempotence.producer_epoch) == (PID, 3)
    assert d.next() is None


def test_a_transaction_adds_each_new_partition_once_then_commits_after_the_flush():
    tm, d, _ = initialized()
    tm.begin_transaction()
    assert tm.state is State.IN_TRANSACTION
    tm.maybe_add_partition(("t", 1))
    tm.maybe_add_partition(("t", 0))
    tm.maybe_add_partition(("t", 1))  # already pending
    assert not tm.may_drain(batch("t", 0))  # not in the transaction yet
    add = d.expect(ADD_PARTITIONS)
    assert d.body(add) == {
        "v3_and_below_transactional_id": TID,
        "v3_and_below_producer_id": PID,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "t", "partitions": [0, 1]}],
    }
    d.answer(add)
    assert add.result.is_successful and tm.transaction_started
    assert tm.may_drain(batch("t", 0)) and tm.may_drain(batch("t", 1))
    assert not tm.may_drain(batch("t", 2))
    tm.maybe_add_partition(("t", 0))
    assert d.next() is None  # nothing new to add
    b = batch("t", 0)
    tm.assign(b)
    assert (b.producer_id, b.base_sequence, b.transactional) == (PID, 0, True)

    result = tm.begin_commit()
    assert tm.state is State.COMMITTING_TRANSACTION and tm.is_completing()
    assert d.next(has_incomplete=True) is None  # EndTxn waits for the batches
    end = d.expect(END_TXN)
    assert d.body(end) == {"transactional_id": TID, "producer_id": PID, "producer_epoch": 0,
                           "committed": True}  # fmt: skip
    d.answer(end)
    result.wait(0)
    assert tm.state is State.READY and not tm.transaction_started
    assert not tm.may_drain(batch("t", 0))  # the next transaction adds it again


def test_partitions_added_while_one_add_is_in_flight_go_in_the_next_request():
    tm, d, _ = initialized()
    tm.begin_transaction()
    tm.maybe_add_partition(("a", 0))
    first = d.expect(ADD_PARTITIONS)
    tm.maybe_add_partition(("b", 0))
    tm.maybe_add_partition(("a", 0))  # pending in the first request
    d.answer(first)
    second = d.expect(ADD_PARTITIONS)
    assert second.partitions == [("b", 0)]
    d.answer(second)
    assert tm.is_partition_added(("a", 0)) and tm.is_partition_added(("b", 0))


def test_abort_sends_end_txn_abort():
    tm, d, _ = in_transaction(("t", 0))
    result = tm.begin_abort()
    assert tm.state is State.ABORTING_TRANSACTION and tm.is_aborting()
    end = d.expect(END_TXN)
    assert d.body(end)["committed"] is False
    d.answer(end)
    result.wait(0)
    assert tm.state is State.READY


@pytest.mark.parametrize("abort", [False, True])
def test_a_transaction_with_nothing_added_sends_no_end_txn(abort):
    tm, d, _ = initialized()
    tm.begin_transaction()
    result = tm.begin_abort() if abort else tm.begin_commit()
    assert d.next() is None
    result.wait(0)
    assert tm.state is State.READY
    assert [h.api_key for h in d.sent if h.api_key == END_TXN] == []


def test_send_offsets_adds_the_group_then_commits_to_the_group_coordinator():
    tm, d, _ = initialized()
    tm.begin_transaction()
    group = ConsumerGroupMetadata("g", 7, "member-1", "instance-1")
    offsets = {("in", 0): OffsetAndMetadata(42, "m", 3), ("in", 1): OffsetAndMetadata(5)}
    result = tm.send_offsets_to_transaction(offsets, group)
    add = d.expect(ADD_OFFSETS)
    assert d.body(add) == {"transactional_id": TID, "producer_id": PID, "producer_epoch": 0,
                           "group_id": "g"}  # fmt: skip
    d.answer(add)
    assert not result.is_completed  # done when TxnOffsetCommit is
    find = d.expect(FIND_COORDINATOR)
    assert d.body(find) == {"key_type": 0, "coordinator_keys": ["g"]}
    d.answer(find)
    commit = d.expect(TXN_OFFSET_COMMIT)
    assert commit.min_version == 3  # the membership fields (KIP-447)
    assert d.body(commit) == {
        "transactional_id": TID, "group_id": "g", "producer_id": PID, "producer_epoch": 0,
        "generation_id": 7, "member_id": "member-1", "group_instance_id": "instance-1",
        "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3,
             "committed_metadata": "m"},
            {"partition_index": 1, "committed_offset": 5, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    }  # fmt: skip
    d.answer(commit)
    result.wait(0)
    assert not tm.has_pending_offset_commits()
    # offsets alone start the transaction: the commit sends EndTxn
    end_result = tm.begin_commit()
    d.run(END_TXN)
    end_result.wait(0)


def test_a_group_id_alone_commits_with_any_version():
    tm, d, _ = initialized()
    tm.begin_transaction()
    tm.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
    d.run(ADD_OFFSETS)
    d.answer(d.expect(FIND_COORDINATOR))
    commit = d.expect(TXN_OFFSET_COMMIT)
    assert commit.min_version == 0
    assert commit.body(0)["generation_id"] == -1


def test_txn_offset_commit_retries_only_the_partitions_that_failed():
    tm, d, _ = initialized()
    tm.begin_transaction()
    result = tm.send_offsets_to_transaction(
        {("in", 0): OffsetAndMetadata(1), ("in", 1): OffsetAndMetadata(2)},
        ConsumerGroupMetadata("g"),
    )
    d.run(ADD_OFFSETS)
    d.answer(d.expect(FIND_COORDINATOR))
    d.answer(d.expect(TXN_OFFSET_COMMIT), codes={("in", 1): UNKNOWN_TOPIC_OR_PARTITION})
    assert not result.is_completed
    d.clock.advance(BACKOFF)
    again = d.expect(TXN_OFFSET_COMMIT)
    assert [p["partition_index"] for p in d.body(again)["topics"][0]["partitions"]] == [1]
    d.answer(again)
    result.wait(0)


# -- retries, backoff and coordinators -------------------------------------------------------------


def test_a_retry_waits_retry_backoff_ms_on_the_clock():
    tm, d, clock = new_tm()
    tm.initialize_transactions()
    d.answer(d.expect(FIND_COORDINATOR))
    d.answer(d.expect(INIT_PRODUCER_ID), COORDINATOR_LOAD_IN_PROGRESS)
    assert d.next() is None
    assert tm.retry_delay_ms(clock.milliseconds()) == BACKOFF
    clock.advance(BACKOFF - 1)
    assert d.next() is None
    clock.advance(1)
    assert d.expect(INIT_PRODUCER_ID).is_retry


def test_concurrent_transactions_on_the_first_add_partitions_backs_off_20_ms():
    tm, d, clock = initialized()
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    d.answer(d.expect(ADD_PARTITIONS), CONCURRENT_TRANSACTIONS)
    assert tm.retry_delay_ms(clock.milliseconds()) == ADD_PARTITIONS_RETRY_BACKOFF_MS == 20
    clock.advance(20)
    d.answer(d.expect(ADD_PARTITIONS))
    # later in the transaction: the ordinary backoff
    tm.maybe_add_partition(("t", 1))
    d.answer(d.expect(ADD_PARTITIONS), CONCURRENT_TRANSACTIONS)
    assert tm.retry_delay_ms(clock.milliseconds()) == BACKOFF


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
def test_not_coordinator_looks_the_coordinator_up_again(code):
    tm, d, clock = in_transaction(("t", 0))
    result = tm.begin_commit()
    d.answer(d.expect(END_TXN), code)
    assert tm.coordinator(CoordinatorType.TRANSACTION) is None
    clock.advance(BACKOFF)
    d.answer(d.expect(FIND_COORDINATOR))
    d.answer(d.expect(END_TXN))
    result.wait(0)


def test_a_disconnect_looks_the_coordinator_up_and_retries():
    tm, d, clock = in_transaction(("t", 0))
    result = tm.begin_commit()
    d.expect(END_TXN).on_disconnect()
    assert tm.coordinator(CoordinatorType.TRANSACTION) is None
    clock.advance(BACKOFF)
    d.answer(d.expect(FIND_COORDINATOR))
    d.answer(d.expect(END_TXN))
    result.wait(0)


def test_requests_go_out_by_kafkas_priorities():
    tm, d, _ = in_transaction(("t", 0))
    tm.maybe_add_partition(("t", 1))
    tm.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
    tm.lookup_coordinator(CoordinatorType.TRANSACTION, TID)
    order = []
    while (h := d.next()) is not None:
        order.append(h.api_key)
        d.answer(h)
    # FindCoordinator first, then the adds (AddOffsets before the AddPartitions queued
    # by next_request itself), then the group lookup and TxnOffsetCommit
    assert order[0] == FIND_COORDINATOR
    assert set(order[1:3]) == {ADD_PARTITIONS, ADD_OFFSETS}
    assert order[3:] == [FIND_COORDINATOR, TXN_OFFSET_COMMIT]


# -- errors: what each one does (section 2.15) --------------------------------------------------


def drive_error(api: int, code: int):
    """Put the manager where ``api`` is the next request and answer it with ``code``.
    Returns (tm, driver, the call's result, clock)."""
    if api == INIT_PRODUCER_ID:
        tm, d, clock = new_tm()
        result = tm.initialize_transactions()
        d.answer(d.expect(FIND_COORDINATOR))
        d.answer(d.expect(INIT_PRODUCER_ID), code)
        return tm, d, result, clock
    tm, d, clock = initialized()
    tm.begin_transaction()
    if api == ADD_PARTITIONS:
        tm.maybe_add_partition(("t", 0))
        h = d.expect(ADD_PARTITIONS)
        d.answer(h, code)
        return tm, d, h.result, clock
    if api in (ADD_OFFSETS, TXN_OFFSET_COMMIT):
        result = tm.send_offsets_to_transaction(
            {("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g")
        )
        if api == ADD_OFFSETS:
            d.answer(d.expect(ADD_OFFSETS), code)
        else:
            d.run(ADD_OFFSETS)
            d.answer(d.expect(FIND_COORDINATOR))
            d.answer(d.expect(TXN_OFFSET_COMMIT), code)
        return tm, d, result, clock
    if api == END_TXN:
        tm.maybe_add_partition(("t", 0))
        d.run(ADD_PARTITIONS)
        result = tm.begin_commit()
        d.answer(d.expect(END_TXN), code)
        return tm, d, result, clock
    if api == FIND_COORDINATOR:
        tm.lookup_coordinator(CoordinatorType.TRANSACTION, TID)
        h = d.expect(FIND_COORDINATOR)
        d.answer(h, code)
        return tm, d, h.result, clock
    raise AssertionError(api)


RETRY, LOOKUP, ABORTABLE, ABORTABLE_BUMP, FATAL = "retry", "lookup", "abortable", "bump", "fatal"

ERROR_CASES = [
    # InitProducerId
    (INIT_PRODUCER_ID, NOT_COORDINATOR, LOOKUP, None),
    (INIT_PRODUCER_ID, COORDINATOR_NOT_AVAILABLE, LOOKUP, None),
    (INIT_PRODUCER_ID, COORDINATOR_LOAD_IN_PROGRESS, RETRY, None),
    (INIT_PRODUCER_ID, CONCURRENT_TRANSACTIONS, RETRY, None),
    (INIT_PRODUCER_ID, TXN_ID_AUTH, ABORTABLE, TransactionalIdAuthorizationError),
    (INIT_PRODUCER_ID, CLUSTER_AUTH, ABORTABLE, ClusterAuthorizationError),
    (INIT_PRODUCER_ID, PRODUCER_FENCED, FATAL, ProducerFencedError),
    (INIT_PRODUCER_ID, INVALID_PRODUCER_EPOCH, FATAL, ProducerFencedError),
    (INIT_PRODUCER_ID, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (INIT_PRODUCER_ID, INVALID_TRANSACTION_TIMEOUT, FATAL, KafkaError),
    (INIT_PRODUCER_ID, UNSUPPORTED_VERSION, FATAL, KafkaError),
    # AddPartitionsToTxn
    (ADD_PARTITIONS, NOT_COORDINATOR, LOOKUP, None),
    (ADD_PARTITIONS, COORDINATOR_NOT_AVAILABLE, LOOKUP, None),
    (ADD_PARTITIONS, CONCURRENT_TRANSACTIONS, RETRY, None),
    (ADD_PARTITIONS, COORDINATOR_LOAD_IN_PROGRESS, RETRY, None),
    (ADD_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION, RETRY, None),
    (ADD_PARTITIONS, PRODUCER_FENCED, FATAL, ProducerFencedError),
    (ADD_PARTITIONS, INVALID_PRODUCER_EPOCH, FATAL, ProducerFencedError),
    (ADD_PARTITIONS, TXN_ID_AUTH, FATAL, TransactionalIdAuthorizationError),
    (ADD_PARTITIONS, INVALID_TXN_STATE, FATAL, InvalidTxnStateError),
    (ADD_PARTITIONS, TOPIC_AUTH, ABORTABLE, TopicAuthorizationError),
    (ADD_PARTITIONS, OPERATION_NOT_ATTEMPTED, ABORTABLE, KafkaError),
    (ADD_PARTITIONS, UNKNOWN_PRODUCER_ID, ABORTABLE_BUMP, UnknownProducerIdError),
    (ADD_PARTITIONS, INVALID_PRODUCER_ID_MAPPING, ABORTABLE_BUMP, InvalidPidMappingError),
    (ADD_PARTITIONS, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (ADD_PARTITIONS, INVALID_RECORD, ABORTABLE, KafkaError),
    # AddOffsetsToTxn
    (ADD_OFFSETS, NOT_COORDINATOR, LOOKUP, None),
    (ADD_OFFSETS, CONCURRENT_TRANSACTIONS, RETRY, None),
    (ADD_OFFSETS, COORDINATOR_LOAD_IN_PROGRESS, RETRY, None),
    (ADD_OFFSETS, UNKNOWN_PRODUCER_ID, ABORTABLE_BUMP, UnknownProducerIdError),
    (ADD_OFFSETS, INVALID_PRODUCER_ID_MAPPING, ABORTABLE_BUMP, InvalidPidMappingError),
    (ADD_OFFSETS, PRODUCER_FENCED, FATAL, ProducerFencedError),
    (ADD_OFFSETS, INVALID_PRODUCER_EPOCH, FATAL, ProducerFencedError),
    (ADD_OFFSETS, TXN_ID_AUTH, FATAL, TransactionalIdAuthorizationError),
    (ADD_OFFSETS, INVALID_TXN_STATE, FATAL, InvalidTxnStateError),
    (ADD_OFFSETS, GROUP_AUTH, ABORTABLE, GroupAuthorizationError),
    (ADD_OFFSETS, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (ADD_OFFSETS, UNKNOWN_SERVER_ERROR, FATAL, KafkaError),
    # TxnOffsetCommit
    (TXN_OFFSET_COMMIT, NOT_COORDINATOR, LOOKUP, None),
    (TXN_OFFSET_COMMIT, COORDINATOR_NOT_AVAILABLE, LOOKUP, None),
    (TXN_OFFSET_COMMIT, REQUEST_TIMED_OUT, LOOKUP, None),
    (TXN_OFFSET_COMMIT, COORDINATOR_LOAD_IN_PROGRESS, RETRY, None),
    (TXN_OFFSET_COMMIT, UNKNOWN_TOPIC_OR_PARTITION, RETRY, None),
    (TXN_OFFSET_COMMIT, GROUP_AUTH, ABORTABLE, GroupAuthorizationError),
    (TXN_OFFSET_COMMIT, FENCED_INSTANCE_ID, ABORTABLE, FencedInstanceIdError),
    (TXN_OFFSET_COMMIT, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (TXN_OFFSET_COMMIT, UNKNOWN_MEMBER_ID, ABORTABLE, CommitFailedError),
    (TXN_OFFSET_COMMIT, ILLEGAL_GENERATION, ABORTABLE, CommitFailedError),
    (TXN_OFFSET_COMMIT, PRODUCER_FENCED, FATAL, ProducerFencedError),
    (TXN_OFFSET_COMMIT, INVALID_PRODUCER_EPOCH, FATAL, ProducerFencedError),
    (TXN_OFFSET_COMMIT, TXN_ID_AUTH, FATAL, TransactionalIdAuthorizationError),
    (TXN_OFFSET_COMMIT, UNSUPPORTED_FOR_MESSAGE_FORMAT, FATAL, KafkaError),
    (TXN_OFFSET_COMMIT, UNKNOWN_SERVER_ERROR, FATAL, KafkaError),
    # EndTxn
    (END_TXN, NOT_COORDINATOR, LOOKUP, None),
    (END_TXN, COORDINATOR_NOT_AVAILABLE, LOOKUP, None),
    (END_TXN, CONCURRENT_TRANSACTIONS, RETRY, None),
    (END_TXN, COORDINATOR_LOAD_IN_PROGRESS, RETRY, None),
    (END_TXN, PRODUCER_FENCED, FATAL, ProducerFencedError),
    (END_TXN, INVALID_PRODUCER_EPOCH, FATAL, ProducerFencedError),
    (END_TXN, TXN_ID_AUTH, FATAL, TransactionalIdAuthorizationError),
    (END_TXN, INVALID_TXN_STATE, FATAL, InvalidTxnStateError),
    (END_TXN, UNKNOWN_PRODUCER_ID, ABORTABLE_BUMP, UnknownProducerIdError),
    (END_TXN, INVALID_PRODUCER_ID_MAPPING, ABORTABLE_BUMP, InvalidPidMappingError),
    (END_TXN, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (END_TXN, UNKNOWN_SERVER_ERROR, FATAL, KafkaError),
    # FindCoordinator
    (FIND_COORDINATOR, COORDINATOR_NOT_AVAILABLE, RETRY, None),
    (FIND_COORDINATOR, TXN_ID_AUTH, FATAL, TransactionalIdAuthorizationError),
    (FIND_COORDINATOR, GROUP_AUTH, ABORTABLE, GroupAuthorizationError),
    (FIND_COORDINATOR, TRANSACTION_ABORTABLE, ABORTABLE, TransactionAbortableError),
    (FIND_COORDINATOR, UNKNOWN_SERVER_ERROR, FATAL, KafkaError),
]


@pytest.mark.parametrize(("api", "code", "outcome", "error_class"), ERROR_CASES)
def test_each_transactional_error_is_retried_abortable_or_fatal_as_in_kafka(
    api, code, outcome, error_class
):
    tm, d, result, clock = drive_error(api, code)
    if outcome in (RETRY, LOOKUP):
        assert not result.is_completed and not tm.has_error()
        if outcome == LOOKUP:
            kind = CoordinatorType.GROUP if api == TXN_OFFSET_COMMIT else CoordinatorType.TRANSACTION
            assert tm.coordinator(kind) is None
        clock.advance(BACKOFF)
        h = d.next()
        while h is not None and h.api_key == FIND_COORDINATOR and api != FIND_COORDINATOR:
            d.answer(h)
            h = d.next()
        assert h is not None and h.api_key == api, "the request is sent again"
        return
    assert result.is_completed
    err = result.error
    assert isinstance(err, error_class), err
    if outcome == FATAL:
        assert tm.state is State.FATAL_ERROR
        assert err.fatal and not err.txn_requires_abort
    else:
        assert tm.state is State.ABORTABLE_ERROR
        assert err.txn_requires_abort and not err.fatal
        assert tm.epoch_bump_required is (outcome == ABORTABLE_BUMP)


@pytest.mark.parametrize(
    ("api", "code"),
    [(ADD_PARTITIONS, UNKNOWN_PRODUCER_ID), (END_TXN, INVALID_PRODUCER_ID_MAPPING),
     (ADD_OFFSETS, UNKNOWN_PRODUCER_ID)],
)  # fmt: skip
def test_an_id_error_is_fatal_when_the_coordinator_cannot_bump_epochs(api, code):
    tm, d, _ = initialized()
    d.tm.handle_coordinator_ready(2)  # InitProducerId v2: no KIP-360
    tm.begin_transaction()
    real_ready = tm.handle_coordinator_ready
    tm.handle_coordinator_ready = lambda v: real_ready(2)  # type: ignore[method-assign]
    if api == ADD_PARTITIONS:
        tm.maybe_add_partition(("t", 0))
        h = d.expect(ADD_PARTITIONS)
    elif api == ADD_OFFSETS:
        tm.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
        h = d.expect(ADD_OFFSETS)
    else:
        tm.maybe_add_partition(("t", 0))
        d.run(ADD_PARTITIONS)
        tm.begin_commit()
        h = d.expect(END_TXN)
    d.answer(h, code)
    assert tm.state is State.FATAL_ERROR and h.result.error.fatal


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (InvalidProducerEpochError("produce"), ABORTABLE_BUMP),
        (InvalidTxnStateError("produce"), ABORTABLE_BUMP),
        (OutOfOrderSequenceError("produce"), ABORTABLE_BUMP),
        (UnknownProducerIdError("produce"), ABORTABLE_BUMP),
        (TopicAuthorizationError("produce"), ABORTABLE_BUMP),
        (KafkaTimeoutError("Expiring 1 record(s)"), ABORTABLE_BUMP),
        (ProducerFencedError("produce"), FATAL),
        (TransactionalIdAuthorizationError("produce"), FATAL),
        (ClusterAuthorizationError("produce"), FATAL),
        (UnsupportedVersionError("produce"), FATAL),
    ],
)
def test_a_failed_batch_makes_the_transaction_abortable_or_the_producer_fatal(error, outcome):
    tm, _, _ = in_transaction(("t", 0))
    tm.handle_failed_batch(batch(), error)
    if outcome == FATAL:
        assert tm.state is State.FATAL_ERROR and error.fatal
    else:
        assert tm.state is State.ABORTABLE_ERROR and error.txn_requires_abort
        assert tm.epoch_bump_required  # the coordinator has InitProducerId v3+


def test_abort_after_an_abortable_error_bumps_the_epoch_kip_360():
    tm, d, _ = in_transaction(("t", 0))
    b = batch()
    tm.assign(b)
    tm.idempotence.done(b)
    assert tm.idempotence.next_sequence(("t", 0)) == 1
    tm.handle_failed_batch(b, OutOfOrderSequenceError("produce"))
    with pytest.raises(KafkaError) as exc_info:
        tm.begin_commit()  # only an abort is possible now
    assert exc_info.value.txn_requires_abort and isinstance(
        exc_info.value.__cause__, OutOfOrderSequenceError
    )
    result = tm.begin_abort()
    assert tm.state is State.ABORTING_TRANSACTION
    d.answer(d.expect(END_TXN))
    assert tm.state is State.INITIALIZING and not result.is_completed
    bump = d.expect(INIT_PRODUCER_ID)
    assert bump.min_version == 3  # KIP-360 fields
    assert d.body(bump) == {"transactional_id": TID, "transaction_timeout": 60000,
                            "producer_id": PID, "producer_epoch": 0}  # fmt: skip
    d.answer(bump, producer_id=PID, producer_epoch=1)
    result.wait(0)
    assert tm.state is State.READY
    assert tm.idempotence.producer_epoch == 1 and tm.idempotence.next_sequence(("t", 0)) == 0
    tm.begin_transaction()  # and on it goes


def test_an_invalid_producer_id_mapping_skips_end_txn_and_reinitializes():
    tm, d, _ = initialized()
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    d.answer(d.expect(ADD_PARTITIONS), INVALID_PRODUCER_ID_MAPPING)
    assert tm.state is State.ABORTABLE_ERROR
    result = tm.begin_abort()
    bump = d.expect(INIT_PRODUCER_ID)  # no EndTxn: the coordinator would refuse it
    d.answer(bump, producer_id=PID + 1, producer_epoch=0)
    result.wait(0)
    assert tm.state is State.READY and tm.idempotence.producer_id == PID + 1


def test_an_error_state_fails_the_queued_requests_but_lets_find_coordinator_through():
    tm, d, _ = in_transaction(("t", 0))
    tm.maybe_add_partition(("t", 1))
    tm.lookup_coordinator(CoordinatorType.TRANSACTION, TID)
    err = InvalidProducerEpochError("produce")
    tm.handle_failed_batch(batch(), err)
    assert d.expect(FIND_COORDINATOR)  # no harm before the abort
    d.answer(d.sent[-1])
    assert d.next() is None  # the AddPartitionsToTxn failed with the error instead
    assert tm.state is State.ABORTABLE_ERROR


def test_after_a_fatal_error_every_call_raises_a_fatal_error():
    tm, d, _ = in_transaction(("t", 0))
    result = tm.begin_commit()
    d.answer(d.expect(END_TXN), PRODUCER_FENCED)
    with pytest.raises(ProducerFencedError) as first:
        result.wait(0)
    assert first.value.fatal
    for call in (tm.begin_transaction, tm.begin_abort, tm.begin_commit, tm.check_send):
        with pytest.raises(ProducerFencedError, match="has been fenced by another producer") as e:
            call()
        assert e.value.fatal and not e.value.txn_requires_abort
    with pytest.raises(ProducerFencedError):
        tm.maybe_add_partition(("t", 1))
    assert not tm.may_drain(batch())  # nothing goes out any more


def test_after_an_abortable_error_only_abort_is_allowed():
    tm, _, _ = in_transaction(("t", 0))
    tm.handle_failed_batch(batch(), InvalidProducerEpochError("produce"))
    for call in (tm.begin_transaction, tm.begin_commit, tm.check_send):
        with pytest.raises(InvalidProducerEpochError, match="old epoch") as e:
            call()
        assert e.value.txn_requires_abort and not e.value.fatal
    with pytest.raises(InvalidProducerEpochError):
        tm.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
    tm.begin_abort()
    assert tm.state is State.ABORTING_TRANSACTION


def test_an_error_during_a_commit_fails_the_commit_as_abortable():
    tm, d, _ = in_transaction(("t", 0))
    result = tm.begin_commit()
    assert d.next(has_incomplete=True) is None
    tm.handle_failed_batch(batch(), InvalidTxnStateError("produce"))  # while flushing
    assert tm.state is State.ABORTABLE_ERROR
    assert not tm.epoch_bump_required  # Kafka: no bump asked while completing
    assert d.next() is None  # EndTxn failed with the error instead of being sent
    with pytest.raises(InvalidTxnStateError) as e:
        result.wait(0)
    assert e.value.txn_requires_abort
    abort = tm.begin_abort()
    d.run(END_TXN)
    abort.wait(0)
    assert tm.state is State.READY


def test_an_error_while_aborting_does_not_leave_aborting():
    tm, _, _ = in_transaction(("t", 0))
    tm.begin_abort()
    tm.handle_failed_batch(batch(), InvalidProducerEpochError("produce"))
    assert tm.state is State.ABORTING_TRANSACTION


# -- misuse and timeouts ------------------------------------------------------------------------


def test_calls_out_of_order_are_illegal_state_errors_that_change_nothing():
    tm, _, _ = new_tm()
    with pytest.raises(IllegalStateError, match="init_transactions"):
        tm.check_send()
    with pytest.raises(IllegalStateError, match="UNINITIALIZED to state IN_TRANSACTION"):
        tm.begin_transaction()
    with pytest.raises(IllegalStateError):
        tm.begin_commit()
    tm, _, _ = initialized()
    with pytest.raises(IllegalStateError, match="state READY"):
        tm.check_send()
    with pytest.raises(IllegalStateError, match="state READY"):
        tm.maybe_add_partition(("t", 0))
    with pytest.raises(IllegalStateError, match="not in progress"):
        tm.send_offsets_to_transaction({("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g"))
    with pytest.raises(IllegalStateError, match="READY to state INITIALIZING"):
        tm.initialize_transactions()
    assert tm.state is State.READY
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="IN_TRANSACTION to state IN_TRANSACTION"):
        tm.begin_transaction()
    assert not issubclass(IllegalStateError, KafkaError)


def test_transactional_methods_need_a_transactional_id():
    tm, _, _ = new_tm(transactional_id=None)
    for call in (tm.initialize_transactions, tm.begin_transaction, tm.begin_commit, tm.begin_abort):
        with pytest.raises(IllegalStateError, match="transactional.id"):
            call()


def test_a_timed_out_call_is_retried_by_calling_it_again():
    tm, d, _ = in_transaction(("t", 0))
    result = tm.begin_commit()
    with pytest.raises(KafkaTimeoutError, match=r"awaiting EndTxn\(commit\)") as e:
        result.wait(0)
    assert e.value.retriable
    assert tm.begin_commit() is result  # the same commit, still pending
    for other in (tm.begin_abort, tm.begin_transaction, tm.check_send):
        with pytest.raises(IllegalStateError, match="`commitTransaction` timed out"):
            other()
    d.run(END_TXN)
    tm.begin_commit().wait(0)  # the retry sees the outcome
    tm.begin_transaction()  # acknowledged: the next call starts afresh


def test_a_timed_out_init_transactions_is_retried_too():
    tm, d, _ = new_tm()
    result = tm.initialize_transactions()
    with pytest.raises(KafkaTimeoutError):
        result.wait(0)
    assert tm.initialize_transactions() is result
    d.run(INIT_PRODUCER_ID)
    tm.initialize_transactions().wait(0)
    assert tm.state is State.READY


def test_close_fails_what_is_pending():
    tm, _, _ = new_tm()
    result = tm.initialize_transactions()
    tm.close()
    with pytest.raises(ProducerClosedError):
        result.wait(0)
    assert not tm.has_pending_requests()


def test_an_unsupported_version_is_fatal():
    tm, d, _ = new_tm()
    result = tm.initialize_transactions()
    d.answer(d.expect(FIND_COORDINATOR))
    d.expect(INIT_PRODUCER_ID).on_version_mismatch(UnsupportedVersionError("no InitProducerId"))
    with pytest.raises(UnsupportedVersionError):
        result.wait(0)
    assert tm.state is State.FATAL_ERROR


def test_authorization_errors_on_init_go_back_to_uninitialized():
    tm, d, _ = new_tm()
    result = tm.initialize_transactions()
    d.answer(d.expect(FIND_COORDINATOR))
    d.answer(d.expect(INIT_PRODUCER_ID), TXN_ID_AUTH)
    assert tm.state is State.ABORTABLE_ERROR
    with pytest.raises(TransactionalIdAuthorizationError):
        result.wait(0)
    tm.transition_to_uninitialized(tm.last_error)  # the sender does this
    assert tm.state is State.UNINITIALIZED and tm.last_error is None
    again = tm.initialize_transactions()  # once the ACLs allow it
    d.run(INIT_PRODUCER_ID)
    again.wait(0)
    assert tm.state is State.READY


def test_an_ongoing_transaction_is_from_begin_until_its_end():
    tm, d, _ = initialized()
    assert not tm.has_ongoing_transaction()
    tm.begin_transaction()
    assert tm.has_ongoing_transaction()
    tm.maybe_add_partition(("t", 0))
    d.run(ADD_PARTITIONS)
    tm.begin_commit()
    assert tm.has_ongoing_transaction()
    d.run(END_TXN)
    assert not tm.has_ongoing_transaction()


# -- the idempotent producer (no transactional id) -----------------------------------------------


def test_the_idempotent_producer_asks_any_broker_for_a_producer_id():
    tm, d, _ = new_tm(transactional_id=None)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    assert tm.state is State.INITIALIZING
    init = d.expect(INIT_PRODUCER_ID)
    assert init.coordinator_type is None  # no coordinator: the least loaded broker
    assert d.body(init) == {"transactional_id": None, "transaction_timeout": 2**31 - 1,
                            "producer_id": -1, "producer_epoch": -1}  # fmt: skip
    tm.bump_idempotent_epoch_and_reset_id_if_needed()  # one at a time
    d.answer(init, producer_id=7, producer_epoch=0)
    assert tm.state is State.READY and tm.has_producer_id
    assert tm.may_drain(batch("any", 3))  # no partitions to add without a transaction
    b = batch("any", 3)
    tm.assign(b)
    assert not b.transactional
    assert d.next() is None  # nothing else to ask for


def test_the_idempotent_producer_retries_retriable_init_errors_and_dies_of_others():
    tm, d, clock = new_tm(transactional_id=None)
    tm.bump_idempotent_epoch_and_reset_id_if_needed()
    d.answer(d.expect(INIT_PRODUCER_ID), COORDINATOR_LOAD_IN_PROGRESS)
    clock.advance(BACKOFF)
    d.answer(d.expect(INIT_PRODUCER_ID), CLUSTER_AUTH)
    assert tm.state is State.FATAL_ERROR
    assert isinstance(tm.last_error, ClusterAuthorizationError)


def test_error_for_code_builds_kafkas_classes():
    assert isinstance(error_for_code(90), ProducerFencedError)
    assert error_for_code(90).code == 90 and error_for_code(90).fatal
    assert isinstance(error_for_code(47, "x"), InvalidProducerEpochError)
    assert isinstance(error_for_code(35), UnsupportedVersionError)
    other = error_for_code(87)
    assert other.code == 87 and type(other).__name__ == "BrokerResponseError"
    assert error_for_code(51).retriable and not error_for_code(48).retriable


def test_the_transaction_manager_is_sans_io():
    """No socket, selector, event loop or network client: the sender is the shell."""
    import ast
    from pathlib import Path

    import tidegate.producer.transaction_manager as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
    forbidden = {"socket", "selectors", "asyncio", "ssl", "time", "tidegate.client", ".sender"}
    assert not {i for i in imported if i in forbidden or i.startswith("tidegate.client")}


def test_a_batch_failing_after_the_fence_keeps_the_fatal_error():
    tm, d, _ = in_transaction(("t", 0))
    tm.set_poison_state_on_invalid_transition(True)  # as on the sender thread
    result = tm.begin_commit()
    d.answer(d.expect(END_TXN), PRODUCER_FENCED)
    tm.handle_failed_batch(batch(), InvalidProducerEpochError("late"))
    assert tm.state is State.FATAL_ERROR
    assert isinstance(tm.last_error, ProducerFencedError)
    assert isinstance(result.error, ProducerFencedError)
