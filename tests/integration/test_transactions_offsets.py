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

And with confluent-kafka: offsets of a transaction open when the broker is killed
(SIGKILL) are still pending after the restart and become committed when the producer
commits.

Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Any

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from tests.conftest import wait_until

from .clients import (
    TRANSACTIONAL_CLIENTS,
    Rec,
    TransactionalProducer,
    consume,
    create_topic,
    produce,
)
from .rawclient import RawClient, committed

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


def outputs(bootstrap: str, topic: str, count: int, *, committed_only: bool) -> list[bytes | None]:
    """The output topic's values, read_committed or read_uncommitted (confluent-kafka)."""
    level = "read_committed" if committed_only else "read_uncommitted"
    got = consume(bootstrap, topic, count, client="confluent", timeout=TIMEOUT_S, settle=0.5,
                  conf={"isolation.level": level})
    return [g.value for g in got]


def transform(value: bytes) -> bytes:
    return b"out-" + value


class Reader:
    """A group consumer of the input topic (subscribe, no auto commit, earliest), in the
    client's own API: ``take(n)`` returns exactly the next ``n`` records as (offset, key,
    value); ``consumer`` is what ``send_offsets_to_transaction`` takes the group metadata
    from (confluent-kafka, kafka-python; aiokafka sends the group id only)."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str) -> None:
        self.client = client
        self.loop: asyncio.AbstractEventLoop | None = None
        if client == "confluent":
            from confluent_kafka import Consumer

            self.consumer: Any = Consumer({
                "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "isolation.level": "read_committed", "log_level": 0})
            self.consumer.subscribe([topic])
        elif client == "kafka-python":
            from kafka import KafkaConsumer

            self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                          enable_auto_commit=False, auto_offset_reset="earliest",
                                          isolation_level="read_committed", request_timeout_ms=30_000)
        else:
            from aiokafka import AIOKafkaConsumer

            self.loop = asyncio.new_event_loop()

            async def start() -> Any:
                c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                     auto_offset_reset="earliest", isolation_level="read_committed")
                await c.start()
                return c

            self.consumer = self._run(start())

    def _run(self, coro: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT_S))

    def _poll(self, most: int) -> list[tuple[int, bytes | None, bytes]]:
        if self.client == "confluent":
            out = []
            for m in self.consumer.consume(most, timeout=0.5):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
            return out
        if self.client == "kafka-python":
            batches = self.consumer.poll(timeout_ms=500, max_records=most)
        else:
            batches = self._run(self.consumer.getmany(timeout_ms=500, max_records=most))
        return [(r.offset, r.key, r.value) for recs in batches.values() for r in recs]

    def take(self, n: int) -> list[tuple[int, bytes | None, bytes]]:
        got: list[tuple[int, bytes | None, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            got += self._poll(n - len(got))
        assert len(got) == n, f"consumed {len(got)} of {n}"
        return got

    def close(self) -> None:
        if self.client == "aiokafka":
            try:
                self._run(self.consumer.stop())
            finally:
                assert self.loop is not None
                self.loop.close()
        else:
            self.consumer.close()


@pytest.mark.parametrize("client", TRANSACTIONAL_CLIENTS)
def test_consume_transform_produce_commits_offsets_in_the_transaction(broker, client):
    bootstrap = broker.bootstrap
    src = create_topic(bootstrap, prefix=f"in-{client}", client="confluent")
    dst = create_topic(bootstrap, prefix=f"out-{client}", client="confluent")
    group, txn_id = f"eos-{client}", f"tx-{client}"
    produce(bootstrap, src, [Rec(b"k%d" % i, b"v%d" % i) for i in range(INPUTS)], client="confluent",
            partition=0)

    def while_open() -> None:
        # round 2, offsets sent and not yet aborted: pending, so unstable
        assert committed(bootstrap, group, src) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert committed(bootstrap, group, src, stable=False) == (10, 0)

    # (records, commit, a new consumer first, a check while the transaction is open,
    #  the group's committed offset after it)
    rounds = [(10, True, False, None, 10), (5, False, False, while_open, 10), (10, True, True, None, 20)]
    consumed: list[int] = []
    producer = TransactionalProducer(client, bootstrap, txn_id)
    reader = Reader(client, bootstrap, src, group)
    try:
        producer.init()
        for n, commit, fresh, check, expected in rounds:
            if fresh:
                reader.close()
                reader = Reader(client, bootstrap, src, group)
            got = reader.take(n)
            consumed += [offset for offset, _, _ in got]
            producer.begin()
            for _, key, value in got:
                producer.send(dst, transform(value), 0, key)
            producer.flush()  # in the log before the end (an abort drops what is queued)
            producer.send_offsets({(src, 0): got[-1][0] + 1}, group, reader.consumer)
            if check is not None:
                check()
            if commit:
                producer.commit()
            else:
                producer.abort()
            # the client is answered once the outcome is decided; the marker reaches
            # __consumer_offsets right after, and until then the offsets are unstable
            # (clients retry UNSTABLE_OFFSET_COMMIT), as in Kafka
            wait_until(lambda e=expected: committed(bootstrap, group, src) == (e, 0), 10,
                       what=lambda e=expected: f"committed {e}, not {committed(bootstrap, group, src)}")
            assert committed(bootstrap, group, src, stable=False) == (expected, 0)
            if expected == 10 and commit:
                assert outputs(bootstrap, dst, 10, committed_only=True) == [
                    transform(b"v%d" % i) for i in range(10)]
    finally:
        reader.close()
        producer.close()

    assert consumed == list(range(15)) + list(range(10, 20))
    assert outputs(bootstrap, dst, 20, committed_only=True) == [transform(b"v%d" % i) for i in range(20)]
    assert outputs(bootstrap, dst, 25, committed_only=False) == [
        transform(b"v%d" % i) for i in list(range(15)) + list(range(10, 20))]

    def state() -> tuple[str, int]:
        with RawClient.connect(bootstrap) as c:
            (d,) = c.request(65, 0, {"transactional_ids": [txn_id]}).transaction_states
        return d.transaction_state, len(d.topics)

    # the last transaction's markers are written and CompleteCommit is stored after the
    # client's EndTxn was answered
    wait_until(lambda: state() == ("CompleteCommit", 0), 10, what=lambda: f"CompleteCommit, not {state()}")


def test_offsets_of_a_transaction_open_at_a_kill_9_stay_pending_and_commit_after_restart(broker_factory):
    """confluent-kafka: the offsets are sent, the broker is killed (SIGKILL) before the
    commit; after the restart they are still pending (replayed from __consumer_offsets),
    and the producer's commit_transaction, retried against the restarted broker, makes
    them the group's committed offset."""
    b = broker_factory(OVERRIDES)
    src = create_topic(b.bootstrap, prefix="in-restart", client="confluent")
    dst = create_topic(b.bootstrap, prefix="out-restart", client="confluent")
    group = "eos-restart"
    p = TransactionalProducer("confluent", b.bootstrap, "tx-restart")
    try:
        p.init()
        p.begin()
        p.send(dst, transform(b"v0"))
        p.flush()
        # a standalone consumer's commit (generation -1: no group membership needed)
        p.send_offsets({(src, 0): 7}, group, _NotJoined(b.bootstrap, group))
        assert committed(b.bootstrap, group, src) == (-1, UNSTABLE_OFFSET_COMMIT)
        b.kill()
        b.start()
        assert committed(b.bootstrap, group, src) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert committed(b.bootstrap, group, src, stable=False) == (-1, 0)
        p.commit()
        wait_until(lambda: committed(b.bootstrap, group, src) == (7, 0), 10,
                   what=lambda: f"committed 7, not {committed(b.bootstrap, group, src)}")
        assert outputs(b.bootstrap, dst, 1, committed_only=True) == [transform(b"v0")]
    finally:
        p.close()


class _NotJoined:
    """What ``send_offsets`` takes the group metadata from: a confluent-kafka consumer of
    the group that never joins (generation -1, no member id)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
        try:
            self.metadata = c.consumer_group_metadata()
        finally:
            c.close()

    def consumer_group_metadata(self) -> Any:
        return self.metadata
