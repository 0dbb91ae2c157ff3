"""Offsets in transactions through real clients: consume-transform-produce.

For each of confluent-kafka (``send_offsets_to_transaction`` with
``consumer_group_metadata()``, TxnOffsetCommit v3), kafka-python (with
``KafkaConsumer.group_metadata()``) and aiokafka (group id only, TxnOffsetCommit v0),
a group consumer reads an input topic and a transactional producer writes each record,
transformed, to an output topic and commits the consumer's offsets in the same
transaction:

1. ten records, committed: the group's committed offset is 10 and the ten outputs are
   visible to read_committed;
2. the next five, aborted: while the transaction is open, OffsetFetch with
   require_stable answers UNSTABLE_OFFSET_COMMIT and without it still 10; after the
   abort the committed offset stays 10 and read_committed sees no new output;
3. a new consumer of the group resumes at the committed offset 10 and ten records are
   committed: the offset is 20 and read_committed sees each of the twenty inputs once
   (read_uncommitted also sees the five aborted ones).

Every wait is bounded.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from tests.conftest import wait_until

from .clients import Rec, consume, create_topic, produce, run_async
from .rawclient import RawClient

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
INPUTS = 20
UNSTABLE_OFFSET_COMMIT = 88
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    b = module_broker_factory(OVERRIDES)
    yield b
    assert b.stop(15) == 0
    log = b.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-5000:]


def committed(bootstrap: str, group: str, topic: str, *, stable: bool = True) -> tuple[int, int]:
    """(committed offset, error) of partition 0 (OffsetFetch v7)."""
    with RawClient.connect(bootstrap) as c:
        r = c.request(9, 7, {"group_id": group, "require_stable": stable,
                             "topics": [{"name": topic, "partition_indexes": [0]}]})
    assert r.error_code == 0
    p = r.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def outputs(bootstrap: str, topic: str, count: int, *, committed_only: bool) -> list[bytes | None]:
    """The output topic's values, read_committed or read_uncommitted (confluent-kafka)."""
    level = "read_committed" if committed_only else "read_uncommitted"
    got = consume(bootstrap, topic, count, client="confluent", timeout=TIMEOUT_S, settle=0.5,
                  conf={"isolation.level": level})
    return [g.value for g in got]


def transform(value: bytes) -> bytes:
    return b"out-" + value


class Scenario:
    """The three rounds; a client adapter supplies ``run(rounds)``: for each round
    (records to take, commit or abort, new consumer first, a check while open), consume
    exactly that many records from where the group stands, write their transforms and
    the next offset in one transaction, then commit or abort it."""

    def __init__(self, bootstrap: str, client: str) -> None:
        self.bootstrap = bootstrap
        self.src = create_topic(bootstrap, prefix=f"in-{client}", client="confluent")
        self.dst = create_topic(bootstrap, prefix=f"out-{client}", client="confluent")
        self.group = f"eos-{client}"
        self.txn_id = f"tx-{client}"
        produce(bootstrap, self.src, [Rec(b"k%d" % i, b"v%d" % i) for i in range(INPUTS)], client="confluent",
                partition=0)
        self.consumed: list[int] = []  # input offsets, every round

    def while_open(self, next_offset: int) -> None:
        """Round 2, offsets sent and not yet aborted: pending, so unstable."""
        assert committed(self.bootstrap, self.group, self.src) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert committed(self.bootstrap, self.group, self.src, stable=False) == (10, 0)

    @property
    def rounds(self) -> list[tuple[int, bool, bool, Callable[[int], None] | None]]:
        return [(10, True, False, None), (5, False, False, self.while_open), (10, True, True, None)]

    def after(self, index: int) -> None:
        """After EndTxn: the client is answered once the commit or abort is decided; the
        marker reaches __consumer_offsets right after, and until then the offsets are
        unstable (clients retry UNSTABLE_OFFSET_COMMIT), as in Kafka."""
        expected = [10, 10, 20][index]
        wait_until(lambda: committed(self.bootstrap, self.group, self.src) == (expected, 0), 10,
                   what=lambda: f"committed {expected}, not {committed(self.bootstrap, self.group, self.src)}")
        assert committed(self.bootstrap, self.group, self.src, stable=False) == (expected, 0)
        if index == 0:
            assert outputs(self.bootstrap, self.dst, 10, committed_only=True) == [
                transform(b"v%d" % i) for i in range(10)]

    def check_end(self) -> None:
        assert self.consumed == list(range(15)) + list(range(10, 20))
        assert outputs(self.bootstrap, self.dst, 20, committed_only=True) == [
            transform(b"v%d" % i) for i in range(20)]
        assert outputs(self.bootstrap, self.dst, 25, committed_only=False) == [
            transform(b"v%d" % i) for i in list(range(15)) + list(range(10, 20))]


# -- the clients ---------------------------------------------------------------------------------
def run_confluent(s: Scenario) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    def new_consumer() -> Consumer:
        c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed", "log_level": 0})
        c.subscribe([s.src])
        return c

    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": s.txn_id, "log_level": 0})
    p.init_transactions(TIMEOUT_S)
    c = new_consumer()
    try:
        for index, (n, commit, fresh, check) in enumerate(s.rounds):
            if fresh:
                c.close()
                c = new_consumer()
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                for m in c.consume(n - len(got), timeout=0.5):
                    assert m.error() is None, m.error()
                    got.append(m)
            assert len(got) == n, f"consumed {len(got)} of {n}"
            s.consumed += [m.offset() for m in got]
            p.begin_transaction()
            for m in got:
                p.produce(s.dst, key=m.key(), value=transform(m.value()), partition=0)
            next_offset = got[-1].offset() + 1
            p.send_offsets_to_transaction([TopicPartition(s.src, 0, next_offset)], c.consumer_group_metadata(),
                                          TIMEOUT_S)
            if check is not None:
                check(next_offset)
            if commit:
                p.commit_transaction(TIMEOUT_S)
            else:
                p.abort_transaction(TIMEOUT_S)
            s.after(index)
    finally:
        c.close()
        p.flush(5)


def run_kafka_python(s: Scenario) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    def new_consumer() -> KafkaConsumer:
        return KafkaConsumer(s.src, bootstrap_servers=s.bootstrap, group_id=s.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             request_timeout_ms=30_000)

    p = KafkaProducer(bootstrap_servers=s.bootstrap, transactional_id=s.txn_id)
    p.init_transactions()
    c = new_consumer()
    try:
        for index, (n, commit, fresh, check) in enumerate(s.rounds):
            if fresh:
                c.close()
                c = new_consumer()
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500, max_records=n - len(got)).values():
                    got += recs
            assert len(got) == n, f"consumed {len(got)} of {n}"
            s.consumed += [r.offset for r in got]
            p.begin_transaction()
            for r in got:
                p.send(s.dst, key=r.key, value=transform(r.value), partition=0)
            next_offset = got[-1].offset + 1
            p.send_offsets_to_transaction({TopicPartition(s.src, 0): OffsetAndMetadata(next_offset, "", -1)},
                                          c.group_metadata())
            if check is not None:
                check(next_offset)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
            s.after(index)
    finally:
        c.close()
        p.close(5)


def run_aiokafka(s: Scenario) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def new_consumer() -> AIOKafkaConsumer:
        c = AIOKafkaConsumer(s.src, bootstrap_servers=s.bootstrap, group_id=s.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
        await c.start()
        return c

    async def main() -> None:
        p = AIOKafkaProducer(bootstrap_servers=s.bootstrap, transactional_id=s.txn_id)
        await p.start()
        c = await new_consumer()
        try:
            for index, (n, commit, fresh, check) in enumerate(s.rounds):
                if fresh:
                    await c.stop()
                    c = await new_consumer()
                got = []
                deadline = time.monotonic() + TIMEOUT_S
                while len(got) < n and time.monotonic() < deadline:
                    for recs in (await c.getmany(timeout_ms=500, max_records=n - len(got))).values():
                        got += recs
                assert len(got) == n, f"consumed {len(got)} of {n}"
                s.consumed += [r.offset for r in got]
                await p.begin_transaction()
                for r in got:
                    await p.send(s.dst, key=r.key, value=transform(r.value), partition=0)
                next_offset = got[-1].offset + 1
                await p.send_offsets_to_transaction({TopicPartition(s.src, 0): next_offset}, s.group)
                # the checks block the loop briefly: the broker is another process
                if check is not None:
                    check(next_offset)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
                s.after(index)
        finally:
            await c.stop()
            await p.stop()

    run_async(main(), 150)


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


@pytest.mark.parametrize("client", list(RUNNERS))
def test_consume_transform_produce_commits_offsets_in_the_transaction(broker, client):
    s = Scenario(broker.bootstrap, client)
    RUNNERS[client](s)
    s.check_end()

    def state() -> tuple[str, int]:
        with RawClient.connect(broker.bootstrap) as c:
            (d,) = c.request(65, 0, {"transactional_ids": [s.txn_id]}).transaction_states
        return d.transaction_state, len(d.topics)

    # the last transaction's markers are written and CompleteCommit is stored after the
    # client's EndTxn was answered
    wait_until(lambda: state() == ("CompleteCommit", 0), 10, what=lambda: f"CompleteCommit, not {state()}")
