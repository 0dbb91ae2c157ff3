"""The producer's transactional API through its sender thread, against a scripted broker
(tests/fake_broker.py) whose coordinator answers what the test says: which requests go
out, in which order, with which versions and fields, and what the application sees,
under both buffer strategies and with the asyncio producer."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.fake_broker import FakeBroker
from tidegate.producer import (
    AIOProducer,
    ConsumerGroupMetadata,
    IllegalStateError,
    InvalidProducerEpochError,
    OffsetAndMetadata,
    Producer,
    ProducerFencedError,
    TransactionAbortedError,
)
from tidegate.producer.transaction_manager import State

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
TID = "tx-unit"
PID = 5000
STRATEGIES = ["full", "incremental"]

#: The transactional APIs at the versions Kafka 4.0 brokers serve.
TXN_APIS = [(10, 0, 6), (22, 0, 5), (24, 0, 5), (25, 0, 4), (26, 0, 4), (28, 0, 5)]


class FakeCoordinator:
    """Transaction and group coordinator of a FakeBroker: answers with success unless
    the test queued error codes for an API (``errors[api_key] = [code, ...]``); the
    InitProducerId epoch goes up by one at each call, as the coordinator's does."""

    def __init__(self) -> None:
        self.errors: dict[int, list[int]] = {}
        self.epoch = -1
        self.broker = FakeBroker(
            apis=TXN_APIS,
            topics={"t": 2, "in": 2},
            handlers={
                FIND_COORDINATOR: self.find_coordinator,
                INIT_PRODUCER_ID: self.init_producer_id,
                ADD_PARTITIONS: self.add_partitions,
                ADD_OFFSETS: self.simple,
                END_TXN: self.simple,
                TXN_OFFSET_COMMIT: self.txn_offset_commit,
            },
        )

    def code(self, api: int) -> int:
        queued = self.errors.get(api)
        return queued.pop(0) if queued else 0

    def find_coordinator(self, version: int, req: Any) -> dict:
        node = {"node_id": 7, "host": "127.0.0.1", "port": self.broker.port, "error_code": 0}
        if version >= 4:
            return {"coordinators": [{"key": req.coordinator_keys[0], **node}]}
        return node

    def init_producer_id(self, version: int, req: Any) -> dict:
        code = self.code(INIT_PRODUCER_ID)
        if code:
            return {"error_code": code, "producer_id": -1, "producer_epoch": -1}
        self.epoch += 1
        return {"error_code": 0, "producer_id": PID, "producer_epoch": self.epoch}

    def add_partitions(self, version: int, req: Any) -> dict:
        code = self.code(ADD_PARTITIONS)
        return {
            "results_by_topic_v3_and_below": [
                {"name": t.name, "results_by_partition": [
                    {"partition_index": p, "partition_error_code": code} for p in t.partitions]}
                for t in req.v3_and_below_topics
            ]
        }  # fmt: skip

    def simple(self, version: int, req: Any) -> dict:
        api = ADD_OFFSETS if hasattr(req, "group_id") else END_TXN
        return {"error_code": self.code(api)}

    def txn_offset_commit(self, version: int, req: Any) -> dict:
        code = self.code(TXN_OFFSET_COMMIT)
        return {
            "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": code}
                    for p in t.partitions]}
                for t in req.topics
            ]
        }  # fmt: skip

    def order(self) -> list[int]:
        """The API keys received, without ApiVersions and Metadata."""
        with self.broker.lock:
            return [k for k, _, _ in self.broker.received if k not in (3, 18)]


@pytest.fixture
def coordinator():
    c = FakeCoordinator()
    yield c
    c.broker.close()


def producer(c: FakeCoordinator, strategy: str = "full", **conf: Any) -> Producer:
    base = {
        "bootstrap.servers": c.broker.bootstrap,
        "transactional.id": TID,
        "buffer.memory.allocation.strategy": strategy,
        "linger.ms": 0,
        "retry.backoff.ms": 10,
        "max.block.ms": 10_000,
    }
    base.update(conf)
    return Producer(base)


def header(records: bytes) -> tuple[int, int, int, int]:
    """(attributes, producer id, epoch, base sequence) of a v2 batch."""
    (attrs,) = struct.unpack_from(">h", records, 21)
    pid, epoch, seq = struct.unpack_from(">qhi", records, 43)
    return attrs, pid, epoch, seq


def produced(c: FakeCoordinator) -> list[tuple[int, str | None, str, int, tuple]]:
    """(version, transactional id, topic, partition, header) of every batch sent."""
    out = []
    with c.broker.lock:
        reqs = [(v, r) for k, v, r in c.broker.received if k == PRODUCE]
    for v, r in reqs:
        for t in r.topic_data:
            for p in t.partition_data:
                out.append((v, r.transactional_id, t.name, p.index, header(p.records)))
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_committed_transaction_sends_kafkas_requests_in_kafkas_order(coordinator, strategy):
    c = coordinator
    p = producer(c, strategy)
    try:
        p.init_transactions()
        assert p.transaction_state is State.READY
        assert (p.producer_id, p.producer_epoch) == (PID, 0)
        (find,) = c.broker.of(FIND_COORDINATOR)
        assert (find.key_type, list(find.coordinator_keys)) == (1, [TID])
        (init,) = c.broker.of(INIT_PRODUCER_ID)
        assert init.transactional_id == TID
        assert init.transaction_timeout.total_seconds() == 60  # transaction.timeout.ms
        assert (init.producer_id, init.producer_epoch) == (-1, -1)

        p.begin_transaction()
        futures = [p.send("t", b"v%d" % i, partition=i % 2) for i in range(6)]
        p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)
        for part in (0, 1):
            assert [f.result().offset for f in futures if f.partition == part] == [0, 1, 2]

        order = c.order()
        # every partition is added before its first batch, EndTxn comes last
        first_produce = order.index(PRODUCE)
        assert ADD_PARTITIONS in order[:first_produce]
        assert order[-1] == END_TXN
        added = {(t.name, part) for r in c.broker.of(ADD_PARTITIONS)
                 for t in r.v3_and_below_topics for part in t.partitions}  # fmt: skip
        assert added == {("t", 0), ("t", 1)}
        assert all(v <= 3 for v in c.broker.versions(ADD_PARTITIONS))
        (end,) = c.broker.of(END_TXN)
        assert (end.transactional_id, end.producer_id, end.producer_epoch) == (TID, PID, 0)
        assert end.committed is True
        assert c.broker.versions(END_TXN) == [4]
        # Produce: transaction version 1 (<= v11), the transactional id, and batches with
        # the transactional attribute, this producer's id and epoch, sequences from 0
        batches = produced(c)
        assert {v for v, *_ in batches} == {11}
        assert {tid for _, tid, *_ in batches} == {TID}
        for _, _, _, _, (attrs, pid, epoch, _seq) in batches:
            assert attrs & 0x10 and (pid, epoch) == (PID, 0)
        for part in (0, 1):
            assert next(h[3] for *_, tp, h in batches if tp == part) == 0
        assert p.transaction_state is State.READY
        m = p.metrics()
        assert m["txn-init-time-ns-total"] > 0 and m["txn-commit-time-ns-total"] > 0
        assert m["txn-begin-time-ns-total"] >= 0
    finally:
        p.close(5)
    assert p.pool.available_memory() == p.pool.total_memory


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_abort_fails_the_records_not_sent_and_returns_their_memory(coordinator, strategy):
    c = coordinator
    p = producer(c, strategy, **{"linger.ms": 60_000, "batch.size": 1 << 20})
    try:
        p.init_transactions()
        p.begin_transaction()
        delivered: list[Any] = []
        futures = [
            p.send("t", b"x" * 100, partition=i % 2, on_delivery=lambda md, e: delivered.append(e))
            for i in range(20)
        ]
        # the partitions get added (the sender does that at once), the batches linger
        wait_until(lambda: len(c.broker.of(ADD_PARTITIONS)) >= 1, 5, what="AddPartitionsToTxn")
        p.abort_transaction()
        assert all(isinstance(f.exception(0), TransactionAbortedError) for f in futures)
        assert len(delivered) == 20 and all(isinstance(e, TransactionAbortedError) for e in delivered)
        assert produced(c) == []
        (end,) = c.broker.of(END_TXN)
        assert end.committed is False
        assert p.pool.available_memory() == p.pool.total_memory
        # and the producer goes on
        p.begin_transaction()
        f = p.send("t", b"after", partition=0)
        p.commit_transaction()
        assert f.result(0).partition == 0
    finally:
        p.close(5)


def test_an_abortable_produce_error_then_abort_bumps_the_epoch(coordinator):
    c = coordinator
    c.broker.produce_errors = [47]  # INVALID_PRODUCER_EPOCH from the partition (KIP-588)
    p = producer(c)
    try:
        p.init_transactions()
        p.begin_transaction()
        err = p.send("t", b"v", partition=0).exception(10)
        assert isinstance(err, InvalidProducerEpochError)
        assert err.txn_requires_abort and not err.fatal
        assert p.transaction_state is State.ABORTABLE_ERROR
        with pytest.raises(InvalidProducerEpochError) as commit:
            p.commit_transaction()
        assert commit.value.txn_requires_abort
        with pytest.raises(InvalidProducerEpochError):
            p.send("t", b"refused", partition=0)  # only an abort now
        p.abort_transaction()
        # EndTxn(abort), then InitProducerId with the current id and epoch (KIP-360)
        assert c.order()[-2:] == [END_TXN, INIT_PRODUCER_ID]
        bump = c.broker.of(INIT_PRODUCER_ID)[-1]
        assert (bump.producer_id, bump.producer_epoch) == (PID, 0)
        assert c.broker.versions(INIT_PRODUCER_ID)[-1] >= 3
        assert (p.producer_id, p.producer_epoch) == (PID, 1)
        p.begin_transaction()
        p.send("t", b"again", partition=0)
        p.commit_transaction()
        *_, (_, _, _, _, (_, pid, epoch, seq)) = produced(c)
        assert (pid, epoch, seq) == (PID, 1, 0)  # the new epoch restarts at 0
    finally:
        p.close(5)


def test_a_fenced_producer_is_told_and_can_only_close(coordinator):
    c = coordinator
    p = producer(c)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"v", partition=0).result(10)
        c.errors[END_TXN] = [90]  # PRODUCER_FENCED: a newer producer took the id
        with pytest.raises(ProducerFencedError) as e:
            p.commit_transaction()
        assert e.value.fatal and not e.value.txn_requires_abort
        assert p.transaction_state is State.FATAL_ERROR
        for call in (p.begin_transaction, p.abort_transaction, p.commit_transaction):
            with pytest.raises(ProducerFencedError):
                call()
        with pytest.raises(ProducerFencedError):
            p.send("t", b"v", partition=0)
    finally:
        p.close(5)


def test_send_offsets_commits_them_through_the_group_coordinator(coordinator):
    c = coordinator
    p = producer(c)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"out", partition=1)
        p.send_offsets_to_transaction(
            {("in", 0): 10, ("in", 1): OffsetAndMetadata(20, "meta")},
            ConsumerGroupMetadata("grp", 3, "member-a"),
        )
        p.commit_transaction()
        (add,) = c.broker.of(ADD_OFFSETS)
        assert (add.transactional_id, add.group_id, add.producer_id) == (TID, "grp", PID)
        finds = c.broker.of(FIND_COORDINATOR)
        assert [(f.key_type, list(f.coordinator_keys)) for f in finds] == [
            (1, [TID]), (0, ["grp"])]  # fmt: skip
        (commit,) = c.broker.of(TXN_OFFSET_COMMIT)
        assert c.broker.versions(TXN_OFFSET_COMMIT) == [4]  # transaction version 1
        assert (commit.group_id, commit.generation_id, commit.member_id) == ("grp", 3, "member-a")
        offsets = {(t.name, q.partition_index): (q.committed_offset, q.committed_metadata)
                   for t in commit.topics for q in t.partitions}  # fmt: skip
        assert offsets == {("in", 0): (10, ""), ("in", 1): (20, "meta")}
        order = c.order()
        assert order.index(ADD_OFFSETS) < order.index(TXN_OFFSET_COMMIT) < order.index(END_TXN)
    finally:
        p.close(5)


def test_offsets_accept_a_group_id_and_confluent_style_topic_partitions(coordinator):
    from types import SimpleNamespace

    c = coordinator
    p = producer(c)
    try:
        p.init_transactions()
        p.begin_transaction()
        tps = [SimpleNamespace(topic="in", partition=0, offset=5, metadata=None, leader_epoch=-1)]
        p.send_offsets_to_transaction(tps, "plain-group")
        (commit,) = c.broker.of(TXN_OFFSET_COMMIT)
        assert (commit.group_id, commit.generation_id, commit.member_id) == ("plain-group", -1, "")
        with pytest.raises(ValueError, match="generationId > 0"):
            p.send_offsets_to_transaction({("in", 0): 1}, ConsumerGroupMetadata("g", 2))
        with pytest.raises(ValueError, match="negative offset"):
            p.send_offsets_to_transaction({("in", 0): -1}, "g")
        p.send_offsets_to_transaction({}, "g")  # nothing to send: no request
        assert len(c.broker.of(ADD_OFFSETS)) == 1
        p.abort_transaction()
    finally:
        p.close(5)


def test_records_outside_a_transaction_are_refused_before_being_queued(coordinator):
    c = coordinator
    p = producer(c)
    try:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.send("t", b"v", partition=0)
        with pytest.raises(IllegalStateError):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            p.send("t", b"v", partition=0)
        assert not p.accumulator.has_undrained()
    finally:
        p.close(5)
    q = Producer({"bootstrap.servers": c.broker.bootstrap})
    try:
        with pytest.raises(IllegalStateError, match="transactional.id"):
            q.init_transactions()
    finally:
        q.close(5)


def test_close_aborts_an_open_transaction(coordinator):
    c = coordinator
    p = producer(c)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"v", partition=0).result(10)
    p.close(10)
    (end,) = c.broker.of(END_TXN)
    assert end.committed is False


def test_init_transactions_retries_concurrent_transactions_and_times_out_retriably(coordinator):
    c = coordinator
    c.errors[INIT_PRODUCER_ID] = [51, 51]  # the previous producer's transaction is completing
    p = producer(c)
    try:
        p.init_transactions()
        assert len(c.broker.of(INIT_PRODUCER_ID)) == 3
    finally:
        p.close(5)
    c.errors[INIT_PRODUCER_ID] = [51] * 1000
    p = producer(c, **{"retry.backoff.ms": 50})
    try:
        from tidegate.errors import KafkaTimeoutError

        with pytest.raises(KafkaTimeoutError) as e:
            p.init_transactions(0.2)
        assert e.value.retriable
        c.errors[INIT_PRODUCER_ID] = []
        p.init_transactions(10)  # called again: waits on the same InitProducerId
        assert p.transaction_state is State.READY
    finally:
        p.close(5)


def test_the_asyncio_producer_runs_transactions(coordinator):
    c = coordinator

    async def main() -> None:
        async with AIOProducer(
            # a long linger: the commit sends the first record, the abort finds the second
            {"bootstrap.servers": c.broker.bootstrap, "transactional.id": TID, "linger.ms": 60_000}
        ) as p:
            await p.init_transactions()
            p.begin_transaction()
            fut = await p.send("t", b"v", partition=1)
            await p.send_offsets_to_transaction({("in", 0): 3}, ConsumerGroupMetadata("g"))
            await p.commit_transaction()
            assert (await fut).partition == 1
            p.begin_transaction()
            queued = await p.send("t", b"w", partition=0)
            await p.abort_transaction()
            with pytest.raises(TransactionAbortedError):
                await queued

    asyncio.run(main())
    ends = [e.committed for e in c.broker.of(END_TXN)]
    # the abort sends EndTxn only if the partition was added before it (no race to win)
    assert ends in ([True], [True, False])


def test_a_record_refused_in_send_makes_the_transaction_abortable(coordinator):
    """Kafka: an ApiException in send() (too large, no memory, metadata timeout) fails
    the record's future and leaves the transaction only abortable."""
    from tidegate.errors import KafkaError
    from tidegate.producer import RecordTooLargeError

    c = coordinator
    p = producer(c, **{"max.request.size": 1000})
    try:
        p.init_transactions()
        p.begin_transaction()
        ok = p.send("t", b"small", partition=0)
        err = p.send("t", b"x" * 2000, partition=0).exception(0)
        assert isinstance(err, RecordTooLargeError) and err.txn_requires_abort
        assert p.transaction_state is State.ABORTABLE_ERROR
        with pytest.raises(KafkaError, match="in an error state") as commit:
            p.commit_transaction()  # Kafka: a KafkaException caused by the record's error
        assert isinstance(commit.value.__cause__, RecordTooLargeError)
        assert commit.value.txn_requires_abort
        p.abort_transaction()
        assert ok.done()  # sent before the error, or aborted with it
        assert [e.committed for e in c.broker.of(END_TXN)] in ([], [False])
        assert p.transaction_state is State.READY
    finally:
        p.close(5)
