"""Transactions with real clients against a real broker: confluent-kafka (librdkafka),
kafka-python and aiokafka producing transactionally, read_committed and read_uncommitted
consumers of the same client reading back; zombie fencing; a transaction left open by a
producer killed with SIGKILL aborted by the coordinator after its timeout; the
coordinator's answers to out-of-order calls over the wire; and kill -9 of the broker
while transactions commit (every transaction all or nothing after the restart)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.conftest import wait_until
from tidegate.errors import ErrorCode as E

from .clients import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TRANSACTIONAL_CLIENTS,
    TransactionalProducer,
    consume,
    create_topic,
)
from .rawclient import RawClient, list_offsets_body, produce_body

pytestmark = pytest.mark.timeout(180)

PROPS = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    return module_broker_factory(PROPS)


def values(got) -> list[bytes]:
    return sorted(g.value for g in got)


def read(broker, topic, client, count, *, committed, partitions=2, timeout=30.0):
    conf = dict(READ_COMMITTED[client] if committed else READ_UNCOMMITTED[client])
    return consume(broker.bootstrap, topic, count, client=client, partitions=partitions, conf=conf,
                   timeout=timeout, settle=0.5)


@pytest.mark.parametrize("client", TRANSACTIONAL_CLIENTS)
def test_commit_abort_and_a_retried_commit(broker, client):
    topic = create_topic(broker.bootstrap, partitions=2)
    p = TransactionalProducer(client, broker.bootstrap, f"tx-{topic}")
    try:
        p.init()
        p.begin()
        for i in range(6):
            p.send(topic, b"c%d" % i, partition=i % 2)
        p.commit()
        p.begin()
        for i in range(4):
            p.send(topic, b"a%d" % i, partition=i % 2)
        p.flush()  # written, then aborted
        p.abort()
        p.begin()  # the aborted work, done again and committed
        for i in range(4):
            p.send(topic, b"r%d" % i, partition=i % 2)
        p.commit()
    finally:
        p.close()
    committed = read(broker, topic, client, 10, committed=True)
    assert values(committed) == sorted([b"c%d" % i for i in range(6)] + [b"r%d" % i for i in range(4)])
    everything = read(broker, topic, client, 14, committed=False)
    assert values(everything) == sorted(
        [b"c%d" % i for i in range(6)] + [b"a%d" % i for i in range(4)] + [b"r%d" % i for i in range(4)])
    # the records keep their log offsets: markers and aborted records leave gaps
    by_partition: dict[int, list[int]] = {}
    for g in committed:
        by_partition.setdefault(g.partition, []).append(g.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert max(by_partition[0]) > len(by_partition[0])  # a gap: the markers and aborted records


@pytest.mark.parametrize("client", TRANSACTIONAL_CLIENTS)
def test_a_second_instance_fences_the_zombie(broker, client):
    topic = create_topic(broker.bootstrap, partitions=1)
    txn_id = f"zombie-{topic}"
    zombie = TransactionalProducer(client, broker.bootstrap, txn_id)
    successor = None
    try:
        zombie.init()
        zombie.begin()
        zombie.send(topic, b"zombie-1")
        successor = TransactionalProducer(client, broker.bootstrap, txn_id)
        successor.init()  # bumps the epoch and aborts the zombie's open transaction
        with pytest.raises(Exception) as exc:
            zombie.send(topic, b"zombie-2")
            zombie.commit()
        assert zombie.fenced(exc.value), repr(exc.value)
        successor.begin()
        successor.send(topic, b"successor")
        successor.commit()
    finally:
        for p in (zombie, successor):
            if p is not None:
                with contextlib.suppress(Exception):  # a fenced producer may refuse to close cleanly
                    p.close()
    assert values(read(broker, topic, client, 1, committed=True, partitions=1)) == [b"successor"]


KILLED_PRODUCER = textwrap.dedent("""
    import sys, time
    from tests.integration.clients import TransactionalProducer
    p = TransactionalProducer(sys.argv[4], sys.argv[1], sys.argv[3], timeout_ms=5000)
    p.init()
    p.begin()
    for i in range(3):
        p.send(sys.argv[2], b"doomed-%d" % i, partition=0)
    p.flush()
    print("ready", flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("client", TRANSACTIONAL_CLIENTS)
def test_a_transaction_left_open_by_a_killed_producer_is_aborted_after_its_timeout(broker, client):
    topic = create_topic(broker.bootstrap, partitions=1)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PRODUCER, broker.bootstrap, topic, f"killed-{topic}", client],
                            stdout=subprocess.PIPE, text=True, cwd=root, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with RawClient.connect(broker.bootstrap) as c:

            def lso() -> int:
                return c.request(2, 5, list_offsets_body(topic, 0, -1, 1)).topics[0].partitions[0].offset

            def hw() -> int:
                return c.request(2, 5, list_offsets_body(topic, 0, -1, 0)).topics[0].partitions[0].offset

            # the open transaction holds read_committed back (for its 5 s timeout: long enough
            # for this check on a slow machine)
            assert (lso(), hw()) == (0, 3)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            killed_at = time.monotonic()
            wait_until(lambda: lso() == 4, timeout=15, what="the LSO moving past the aborted transaction")
            # at most the 5 s timeout (it began before the kill) + one 0.5 s check + the abort
            assert time.monotonic() - killed_at < 10
            assert hw() == 4  # the three records and the coordinator's ABORT marker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    p = TransactionalProducer(client, broker.bootstrap, f"after-{topic}")
    try:
        p.init()
        p.begin()
        p.send(topic, b"after")
        p.commit()
    finally:
        p.close()
    assert values(read(broker, topic, client, 1, committed=True, partitions=1)) == [b"after"]
    assert values(read(broker, topic, client, 4, committed=False, partitions=1)) == [
        b"after", b"doomed-0", b"doomed-1", b"doomed-2"]


def test_out_of_order_calls_over_the_wire(broker):
    """What the coordinator answers to calls out of their order (reference §2.3-2.5),
    over a real connection with raw requests."""
    topic = create_topic(broker.bootstrap, partitions=1)
    txn_id = f"raw-{topic}"
    with RawClient.connect(broker.bootstrap) as c:
        def end(pid, epoch, commit, tid=txn_id):
            return c.request(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                     "committed": commit}).error_code

        def add(pid, epoch, tid=txn_id):
            r = c.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

        def add_offsets(pid, epoch, tid=txn_id):
            return c.request(25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                     "group_id": "g"}).error_code

        assert end(1, 0, True, tid="never-initialised") == E.invalid_producer_id_mapping
        assert add(1, 0, tid="never-initialised") == E.invalid_producer_id_mapping
        assert add_offsets(1, 0, tid="never-initialised") == E.invalid_producer_id_mapping
        c.request(10, 4, {"key": txn_id, "key_type": 1})  # FindCoordinator creates __transaction_state
        r = c.request(22, 4, {"transactional_id": txn_id, "transaction_timeout": 60_000, "producer_id": -1,
                              "producer_epoch": -1})
        assert r.error_code == E.none
        pid, epoch = r.producer_id, r.producer_epoch
        assert end(pid, epoch, True) == E.invalid_txn_state  # commit with no transaction
        assert end(pid, epoch, False) == E.invalid_txn_state
        assert add(pid, epoch + 1) == E.producer_fenced
        assert add(pid + 1, epoch) == E.invalid_producer_id_mapping
        batch = _txn_batch(pid, epoch)
        r = c.request(0, 9, produce_body(topic, {0: batch}, acks=-1, transactional_id=txn_id))
        assert r.responses[0].partition_responses[0].error_code == E.invalid_txn_state  # not added
        assert add(pid, epoch) == E.none
        r = c.request(0, 9, produce_body(topic, {0: batch}, acks=-1, transactional_id=txn_id))
        assert r.responses[0].partition_responses[0].error_code == E.none
        assert end(pid, epoch, True) == E.none
        # while its markers are written, the transaction answers CONCURRENT_TRANSACTIONS
        # (clients retry); once complete, a retry of the same commit succeeds
        wait_until(lambda: end(pid, epoch, True) != E.concurrent_transactions, timeout=10,
                   what="the commit to complete")
        assert end(pid, epoch, True) == E.none  # a retry of the same commit
        assert end(pid, epoch, False) == E.invalid_txn_state  # the other result
        r = c.request(22, 4, {"transactional_id": txn_id, "transaction_timeout": 10**9, "producer_id": -1,
                              "producer_epoch": -1})
        assert r.error_code == E.invalid_transaction_timeout


def _txn_batch(pid: int, epoch: int) -> bytes:
    from tidegate.record.batch_builder import Record, build_batch

    return bytes(build_batch([Record(b"raw", timestamp=int(time.time() * 1000))], producer_id=pid,
                             producer_epoch=epoch, base_sequence=0, transactional=True))


# -- kill -9 of the broker -------------------------------------------------------------------------

TXN_PARTITIONS = 3
PER_TXN = 3  # records per transaction, one per partition


@pytest.mark.slow
def test_kill_9_while_transactions_commit_leaves_every_transaction_whole(broker_factory):
    """A confluent-kafka producer commits transactions of one record per partition in a
    loop while the broker is killed with SIGKILL and restarted three times. Afterwards a
    read_committed consumer sees every transaction whole or not at all, and every
    transaction whose commit the producer saw succeed is there."""
    b = broker_factory(PROPS)
    topic = create_topic(b.bootstrap, partitions=TXN_PARTITIONS)
    committed: list[int] = []
    attempted = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        from confluent_kafka import KafkaException

        n = 0
        while not stop.is_set():
            p = TransactionalProducer("confluent", b.bootstrap, f"kill9-{topic}",
                                      conf={"message.timeout.ms": 20_000, "socket.timeout.ms": 5_000})
            try:
                p.init()
                while not stop.is_set():
                    p.begin()
                    attempted[0] = n
                    for part in range(TXN_PARTITIONS):
                        p.send(topic, b"txn-%d-p%d" % (n, part), partition=part)
                    p.commit()
                    committed.append(n)
                    n += 1
            except KafkaException:
                n += 1  # that transaction's fate is unknown: never reuse its number
                time.sleep(0.2)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        for _ in range(3):
            target = len(committed) + 20
            wait_until(lambda t=target: len(committed) >= t, timeout=60, what="20 more commits")
            b.kill()
            time.sleep(0.3)
            b.start()
        target = len(committed) + 20
        wait_until(lambda: len(committed) >= target, timeout=60, what="commits after the last restart")
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert len(committed) >= 80
    got = consume(b.bootstrap, topic, PER_TXN * len(committed), client="confluent",
                  partitions=TXN_PARTITIONS, conf=READ_COMMITTED["confluent"], timeout=60, settle=1.0)
    seen: dict[int, set[int]] = {}
    for g in got:
        _, n, part = g.value.decode().split("-")
        assert int(part[1:]) == g.partition
        seen.setdefault(int(n), set()).add(g.partition)
    half = {n: parts for n, parts in seen.items() if len(parts) != TXN_PARTITIONS}
    assert not half, f"transactions half visible to read_committed: {half}"
    missing = set(committed) - set(seen)
    assert not missing, f"committed transactions lost: {sorted(missing)[:20]}"
    assert len(got) == PER_TXN * len(seen)  # nothing twice


def test_kafka_python_admin_describes_and_lists_transactions(broker):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    topic = create_topic(broker.bootstrap, partitions=2)
    txn_id = f"admin-{topic}"
    p = TransactionalProducer("confluent", broker.bootstrap, txn_id, timeout_ms=45_000)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        p.init()
        p.begin()
        p.send(topic, b"x", partition=1)
        p.flush()
        d = admin.describe_transactions([txn_id])[txn_id]
        assert (str(d.state.value), d.transaction_timeout_ms) == ("Ongoing", 45_000)
        assert {(tp.topic, tp.partition) for tp in d.topic_partitions} == {(topic, 1)}
        assert d.transaction_start_time_ms > 0
        listed = [t for ts in admin.list_transactions(state_filters=["Ongoing"]).values() for t in ts]
        assert txn_id in {t.transactional_id for t in listed}
        listed = [t for ts in admin.list_transactions(producer_id_filters=[d.producer_id]).values() for t in ts]
        assert [t.transactional_id for t in listed] == [txn_id]
        p.commit()
        wait_until(lambda: str(admin.describe_transactions([txn_id])[txn_id].state.value) == "CompleteCommit",
                   timeout=10, what="CompleteCommit")
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["no-such-id"])
    finally:
        p.close()
        admin.close()
