"""tidegate's producer in transactions against a real broker, checked by read_committed
consumers (confluent-kafka ``isolation.level=read_committed``, kafka-python
``isolation_level="read_committed"``), under both buffer strategies:

- committed records are visible, aborted ones are not (though they are in the log:
  read_uncommitted sees them), and a commit after an abort is visible;
- a second producer with the same ``transactional.id`` fences the first: its commit
  raises ProducerFencedError (fatal), or its next record fails with
  InvalidProducerEpochError (abortable) and the abort then finds it fenced; only the
  new producer's transaction is visible;
- ``send_offsets_to_transaction`` in consume-transform-produce, with a kafka-python
  group consumer's ``group_metadata()`` (KIP-447): the group's committed offsets move
  with commits only (unstable while the transaction is open), and a new consumer of
  the group resumes there; with a bare group id too;
- the asyncio producer, and ``close()`` aborting a transaction left open.

Every wait is bounded.
"""

from __future__ import annotations

import time
import warnings

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from tests.conftest import wait_until
from tidegate.producer import (
    AIOProducer,
    InvalidProducerEpochError,
    Producer,
    ProducerFencedError,
)

from .clients import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Rec,
    consume,
    create_topic,
    produce,
    run_async,
)
from .rawclient import committed

pytestmark = pytest.mark.timeout(180)

STRATEGIES = ["full", "incremental"]
PARTITIONS = 2
#: the consumers that check what is visible
CONSUMERS = ("confluent", "kafka-python")
TIMEOUT_S = 30.0
UNSTABLE_OFFSET_COMMIT = 88


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    b = module_broker_factory({"group.initial.rebalance.delay.ms": 0})
    yield b
    assert b.stop(15) == 0
    log = b.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-5000:]


def new_producer(bootstrap: str, txn_id: str, strategy: str = "full", **conf) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "buffer.memory.allocation.strategy": strategy,
            "linger.ms": 0,
            **conf,
        }
    )


def visible(
    bootstrap: str, topic: str, count: int, *, client: str = "confluent", committed_only: bool = True
) -> dict[int, list[bytes | None]]:
    """{partition: values in offset order} of ``topic``, read_committed (or not), after
    ``count`` records arrived and half a second more showed nothing else."""
    conf = (READ_COMMITTED if committed_only else READ_UNCOMMITTED)[client]
    got = consume(bootstrap, topic, count, client=client, partitions=PARTITIONS,
                  timeout=TIMEOUT_S, settle=0.5, conf=conf)  # fmt: skip
    out: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
    for g in got:
        out[g.partition].append(g.value)
    return out


def by_partition(values: list[bytes]) -> dict[int, list[bytes | None]]:
    """Where send_all puts ``values``: value i on partition i % PARTITIONS."""
    return {p: list(values[p::PARTITIONS]) for p in range(PARTITIONS)}


def send_all(p: Producer, topic: str, values: list[bytes]) -> list:
    return [p.send(topic, v, key=v, partition=i % PARTITIONS) for i, v in enumerate(values)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_commit_is_visible_abort_is_not_and_commit_after_abort_is(broker, strategy):
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS, prefix=f"txn-{strategy}")
    committed_values = [b"c%d" % i for i in range(20)]
    aborted_values = [b"a%d" % i for i in range(10)]
    later_values = [b"d%d" % i for i in range(10)]
    p = new_producer(bs, f"vis-{strategy}", strategy)
    try:
        p.init_transactions(TIMEOUT_S)

        p.begin_transaction()
        futures = send_all(p, topic, committed_values)
        p.commit_transaction(TIMEOUT_S)
        assert all(f.done() and f.exception() is None for f in futures)
        for client in CONSUMERS:
            assert visible(bs, topic, 20, client=client) == by_partition(committed_values), client

        # aborted after its records reached the log: read_uncommitted sees them
        p.begin_transaction()
        futures = send_all(p, topic, aborted_values)
        p.flush(TIMEOUT_S)
        assert all(f.result(0).offset >= 0 for f in futures)
        p.abort_transaction(TIMEOUT_S)
        for client in CONSUMERS:
            assert visible(bs, topic, 20, client=client) == by_partition(committed_values), client
        everything = visible(bs, topic, 30, committed_only=False)
        assert sorted(v for vs in everything.values() for v in vs) == sorted(
            committed_values + aborted_values
        )

        # the producer goes on after the abort
        p.begin_transaction()
        send_all(p, topic, later_values)
        p.commit_transaction(TIMEOUT_S)
        expected = by_partition(committed_values)
        for part, vs in by_partition(later_values).items():
            expected[part] += vs
        for client in CONSUMERS:
            assert visible(bs, topic, 30, client=client) == expected, client
        assert p.metrics()["txn-abort-time-ns-total"] > 0
    finally:
        p.close(10)
    assert p.pool.available_memory() == p.pool.total_memory


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_zombie_is_fenced_at_commit(broker, strategy):
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS, prefix=f"zombie-{strategy}")
    txn_id = f"zombie-{strategy}"
    old = new_producer(bs, txn_id, strategy)
    new = None
    try:
        old.init_transactions(TIMEOUT_S)
        old.begin_transaction()
        send_all(old, topic, [b"old%d" % i for i in range(6)])
        old.flush(TIMEOUT_S)
        # a second instance with the same transactional.id: InitProducerId aborts the
        # open transaction and bumps the epoch
        new = new_producer(bs, txn_id, strategy)
        new.init_transactions(TIMEOUT_S)
        assert new.producer_id == old.producer_id and new.producer_epoch > old.producer_epoch
        with pytest.raises(ProducerFencedError) as fenced:
            old.commit_transaction(TIMEOUT_S)
        assert fenced.value.fatal and not fenced.value.txn_requires_abort
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"more", partition=0)
        new.begin_transaction()
        new_values = [b"new%d" % i for i in range(4)]
        send_all(new, topic, new_values)
        new.commit_transaction(TIMEOUT_S)
        for client in CONSUMERS:
            assert visible(bs, topic, 4, client=client) == by_partition(new_values), client
    finally:
        old.close(10)
        if new is not None:
            new.close(10)


def test_a_zombie_record_is_abortable_and_the_abort_finds_it_fenced(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS, prefix="zombie-send")
    old = new_producer(bs, "zombie-send")
    new = None
    try:
        old.init_transactions(TIMEOUT_S)
        old.begin_transaction()
        old.send(topic, b"before", partition=0).result(TIMEOUT_S)
        new = new_producer(bs, "zombie-send")
        new.init_transactions(TIMEOUT_S)
        # the partition's producer state has the new epoch (the fence's abort marker):
        # INVALID_PRODUCER_EPOCH, abortable (KIP-588)
        err = old.send(topic, b"after", partition=0).exception(TIMEOUT_S)
        assert isinstance(err, InvalidProducerEpochError), err
        assert err.txn_requires_abort and not err.fatal
        with pytest.raises(ProducerFencedError) as fenced:
            old.abort_transaction(TIMEOUT_S)
        assert fenced.value.fatal
        new.begin_transaction()
        new.send(topic, b"new", partition=0)
        new.commit_transaction(TIMEOUT_S)
        assert visible(bs, topic, 1) == {0: [b"new"], 1: []}
    finally:
        old.close(10)
        if new is not None:
            new.close(10)


# -- offsets in the transaction ----------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_offsets_sent_to_the_transaction_are_committed_with_it(broker, strategy):
    """Consume-transform-produce: a kafka-python group consumer reads 20 inputs; rounds
    of (10, commit), (5, abort), then a new consumer and (10, commit). The group's
    committed offset is 10, 10, 20; the outputs visible to read_committed are each
    input's transform once."""
    from kafka import KafkaConsumer, TopicPartition

    bs = broker.bootstrap
    src = create_topic(bs, prefix=f"eos-in-{strategy}")
    dst = create_topic(bs, prefix=f"eos-out-{strategy}")
    group = f"eos-{strategy}"
    produce(bs, src, [Rec(b"k%d" % i, b"v%d" % i) for i in range(20)], client="confluent",
            partition=0)  # fmt: skip

    def new_consumer() -> KafkaConsumer:
        return KafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             request_timeout_ms=30_000)  # fmt: skip

    def while_open() -> None:
        # the aborted round's offsets are pending: unstable for require_stable readers
        assert committed(bs, group, src) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert committed(bs, group, src, stable=False) == (10, 0)

    rounds = [(10, True, False, None, 10), (5, False, False, while_open, 10),
              (10, True, True, None, 20)]  # fmt: skip
    consumed: list[int] = []
    p = new_producer(bs, f"eos-{strategy}", strategy)
    c = new_consumer()
    try:
        p.init_transactions(TIMEOUT_S)
        for n, commit, fresh, check, expected in rounds:
            if fresh:
                c.close()
                c = new_consumer()
            got: list = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500, max_records=n - len(got)).values():
                    got += recs
            assert len(got) == n, f"consumed {len(got)} of {n}"
            consumed += [r.offset for r in got]
            p.begin_transaction()
            for r in got:
                p.send(dst, b"out-" + r.value, key=r.key, partition=0)
            meta = c.group_metadata()
            assert meta.generation_id >= 1 and meta.member_id  # a real member (KIP-447)
            p.send_offsets_to_transaction({TopicPartition(src, 0): got[-1].offset + 1}, meta,
                                          TIMEOUT_S)  # fmt: skip
            if check is not None:
                check()
            if commit:
                p.commit_transaction(TIMEOUT_S)
            else:
                p.abort_transaction(TIMEOUT_S)
            # EndTxn is answered once the outcome is decided; the marker reaches
            # __consumer_offsets right after (until then: unstable), as in Kafka
            wait_until(lambda e=expected: committed(bs, group, src) == (e, 0), 10,
                       what=lambda e=expected: f"committed {e}, not {committed(bs, group, src)}")  # fmt: skip
    finally:
        c.close()
        p.close(10)
    assert consumed == list(range(15)) + list(range(10, 20))
    outputs = consume(bs, dst, 20, client="confluent", timeout=TIMEOUT_S, settle=0.5,
                      conf=READ_COMMITTED["confluent"])  # fmt: skip
    assert [g.value for g in outputs] == [b"out-v%d" % i for i in range(20)]


def test_offsets_with_a_group_id_alone(broker):
    bs = broker.bootstrap
    src = create_topic(bs, prefix="offsets-src")
    dst = create_topic(bs, partitions=PARTITIONS, prefix="offsets-dst")
    group = "offsets-plain"
    p = new_producer(bs, "offsets-plain")
    try:
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        p.send(dst, b"x", partition=0)
        p.send_offsets_to_transaction({(src, 0): 7}, group, TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)
        wait_until(lambda: committed(bs, group, src) == (7, 0), 10,
                   what=lambda: f"offset 7 committed, not {committed(bs, group, src)}")  # fmt: skip
        p.begin_transaction()
        p.send_offsets_to_transaction({(src, 0): 9}, group, TIMEOUT_S)
        p.abort_transaction(TIMEOUT_S)
        wait_until(lambda: committed(bs, group, src) == (7, 0), 10,
                   what=lambda: f"offset 7 kept, not {committed(bs, group, src)}")  # fmt: skip
    finally:
        p.close(10)


# -- asyncio, close ---------------------------------------------------------------------------


def test_the_asyncio_producer_commits_and_aborts(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS, prefix="aio-txn")

    async def main() -> None:
        async with AIOProducer({"bootstrap.servers": bs, "transactional.id": "aio-txn",
                                "buffer.memory.allocation.strategy": "incremental",
                                "linger.ms": 0}) as p:  # fmt: skip
            await p.init_transactions(TIMEOUT_S)
            p.begin_transaction()
            futs = [await p.send(topic, b"c%d" % i, partition=i % PARTITIONS) for i in range(4)]
            await p.commit_transaction(TIMEOUT_S)
            assert [(await f).partition for f in futs] == [0, 1, 0, 1]
            p.begin_transaction()
            aborted = [await p.send(topic, b"a%d" % i, partition=0) for i in range(3)]
            await p.flush(TIMEOUT_S)
            for f in aborted:
                await f
            await p.abort_transaction(TIMEOUT_S)

    run_async(main(), 120)
    assert visible(bs, topic, 4) == by_partition([b"c%d" % i for i in range(4)])


def test_close_aborts_the_open_transaction(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS, prefix="close-txn")
    p = new_producer(bs, "close-txn")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    send_all(p, topic, [b"left-open%d" % i for i in range(4)])
    p.flush(TIMEOUT_S)
    p.close(TIMEOUT_S)
    q = new_producer(bs, "close-txn")
    try:
        q.init_transactions(TIMEOUT_S)  # nothing left to fence: the close aborted it
        q.begin_transaction()
        send_all(q, topic, [b"next"])
        q.commit_transaction(TIMEOUT_S)
        assert visible(bs, topic, 1) == {0: [b"next"], 1: []}
        assert len(visible(bs, topic, 5, committed_only=False)[0]) == 3
    finally:
        q.close(10)
