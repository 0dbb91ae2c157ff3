"""The exactly-once check: three transactional consume-transform-produce workers
(confluent-kafka, one process each) copy a 6-partition input of numbered records to an
output topic, each batch's output and input offsets committed in one transaction, while
the broker is killed with SIGKILL and restarted and workers are killed and restarted.
The output, read at read_committed, must hold every input record exactly once.

Workers exit on any error (a fenced or fatal producer, a broker gone for too long, a
call stuck for 30 s) and are restarted by the test with the same ``transactional.id`` (the new instance fences the
old one and aborts its open transaction); a killed worker's group membership lapses after
its session timeout and its partitions move to the others, whose offset fetches wait for
the dead worker's pending transactional offsets (UNSTABLE_OFFSET_COMMIT, KIP-447) until
its transaction is aborted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from .clients import READ_COMMITTED, consume, create_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RECORDS = 100_000
PARTITIONS = 6
WORKERS = 3
TIME_LIMIT_S = 300

PROPS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

WORKER = textwrap.dedent("""
    import os, sys, threading
    from confluent_kafka import Consumer, Producer

    # librdkafka's send_offsets_to_transaction can wait past its timeout for a group
    # coordinator it cached before the broker restarted (confluentinc/librdkafka#5456,
    # #5511): a worker whose loop stops moving for 30 s exits and is restarted, as a
    # supervisor would restart a stuck process
    def watchdog():
        os._exit(3)

    timer = None

    def alive():
        global timer
        if timer is not None:
            timer.cancel()
        timer = threading.Timer(30, watchdog)
        timer.daemon = True
        timer.start()

    bootstrap, src, dst, worker = sys.argv[1:5]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "eos-check", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "log_level": 0,
    })
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": f"eos-check-{worker}",
        "transaction.timeout.ms": 10000, "linger.ms": 5, "log_level": 0,
    })
    alive()
    producer.init_transactions(60)
    consumer.subscribe([src])
    while True:
        alive()
        msgs = [m for m in consumer.consume(500, 0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, value=b"out-" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
""")


def _committed(bootstrap: str, topic: str) -> int | None:
    """The records the group has committed (the sum of its committed input offsets), or
    None while the broker cannot tell."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-check", "log_level": 0,
                  "isolation.level": "read_committed"})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)
        return sum(max(tp.offset, 0) for tp in parts)
    except KafkaException:
        return None
    finally:
        c.close()


def test_every_record_exactly_once_through_broker_and_worker_kills(broker_factory, tmp_path):
    from confluent_kafka import Producer

    b = broker_factory(PROPS)
    src = create_topic(b.bootstrap, partitions=PARTITIONS, prefix="eos-in")
    dst = create_topic(b.bootstrap, partitions=PARTITIONS, prefix="eos-out")
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "log_level": 0})
    produced = 0

    def produce_up_to(fraction: float) -> None:
        """The input arrives in chunks, the next one just before each event, so the
        workers are busy when it strikes and cannot finish the input before the last one
        (with fast fetches they once copied everything between two samples)."""
        nonlocal produced
        for n in range(produced, int(fraction * RECORDS)):
            while True:
                try:
                    p.produce(src, b"%d" % n, partition=n % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
        produced = int(fraction * RECORDS)
        assert p.flush(60) == 0

    produce_up_to(0.2)

    logs = tmp_path / "workers.log"
    workers: dict[int, subprocess.Popen] = {}
    restarts = 0

    def start(i: int) -> None:
        with open(logs, "ab") as log:
            workers[i] = subprocess.Popen([sys.executable, "-c", WORKER, b.bootstrap, src, dst, str(i)],
                                          stdout=log, stderr=subprocess.STDOUT)

    # (fraction of the input committed, what to do): broker kills with restarts, and workers
    # killed with SIGKILL (their transactions left open, their membership left to lapse)
    events = [(0.15, "broker"), (0.35, "worker-0"), (0.55, "broker"), (0.75, "worker-1")]
    done_events: list[tuple[str, int]] = []
    started = time.monotonic()
    for i in range(WORKERS):
        start(i)
    committed = 0
    try:
        while time.monotonic() - started < TIME_LIMIT_S:
            now = _committed(b.bootstrap, src) if b.alive() else None
            committed = now if now is not None else committed
            if committed >= RECORDS:
                break
            if events and committed >= events[0][0] * RECORDS:
                _, what = events.pop(0)
                produce_up_to(1.0 if not events else events[0][0] + 0.05)
                done_events.append((what, committed))
                if what == "broker":
                    b.kill()
                    time.sleep(0.5)
                    b.start()
                else:
                    victim = workers[int(what.split("-")[1])]
                    os.kill(victim.pid, signal.SIGKILL)
                    victim.wait(10)
            for i, w in workers.items():
                if w.poll() is not None:  # killed, or gave up on an error: a new instance
                    restarts += 1
                    start(i)
            time.sleep(0.2)
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.kill()
                w.wait(10)
    elapsed = time.monotonic() - started
    assert committed == RECORDS, f"{committed} of {RECORDS} input records committed in {elapsed:.0f} s"
    assert not events, f"events not reached: {events}"
    got = consume(b.bootstrap, dst, RECORDS, client="confluent", partitions=PARTITIONS,
                  conf=READ_COMMITTED["confluent"], timeout=120, settle=1.0)
    seen: dict[int, int] = {}
    for g in got:
        assert g.value.startswith(b"out-"), g.value
        n = int(g.value[4:])
        seen[n] = seen.get(n, 0) + 1
    twice = {n: k for n, k in seen.items() if k > 1}
    missing = RECORDS - len(seen)
    print(f"exactly-once check: {RECORDS} records, {PARTITIONS} partitions, {WORKERS} workers, "
          f"{elapsed:.1f} s, events {done_events}, {restarts} worker restarts, "
          f"{len(got)} output records read_committed, {len(twice)} duplicated, {missing} missing")
    assert not twice, f"{len(twice)} records twice, e.g. {sorted(twice.items())[:5]}"
    assert missing == 0 and set(seen) == set(range(RECORDS))
