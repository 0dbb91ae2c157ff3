"""The cluster scenarios that need no fault injection, against the peer broker (Tansu,
``../shared/tools/peer-broker.sh``; skipped with the reason when it cannot start): the
idempotent producer (tidegate's, both buffer strategies, and confluent-kafka's) writing
3,000 records to 6 partitions, checked as on the mock cluster; those records read back
by tidegate's fetcher, by ``tidegate console-consumer`` and by confluent-kafka's
consumer, alike; ``tidegate topics --describe``.

(Tansu's transactions are incomplete and a new consumer group waits about half its
session timeout before it joins, so neither is here; tests/integration covers a group
on Tansu.)"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tidegate.client import KafkaClient
from tidegate.client.admin import create_topic

from .scenarios import (
    PARTITIONS,
    RECORDS,
    TIMEOUT_S,
    Faults,
    check_log,
    produce,
    read_log,
    tidegate,
)

pytestmark = pytest.mark.timeout(180)


def _topic(bootstrap: str, name: str) -> str:
    with KafkaClient(bootstrap) as c:
        create_topic(c, name, PARTITIONS)
    return name


@pytest.mark.parametrize("client", ["tidegate-full", "tidegate-incremental", "confluent"])
def test_idempotent_producer(peer_bootstrap, topic_name, client):
    topic = _topic(peer_bootstrap, topic_name)
    out = produce(client, peer_bootstrap, topic, Faults())
    check_log(out, read_log(peer_bootstrap, topic))


def test_consumers_read_the_same(peer_bootstrap, topic_name):
    topic = _topic(peer_bootstrap, topic_name)
    produce("tidegate-full", peer_bootstrap, topic, Faults())
    log = read_log(peer_bootstrap, topic)
    fetched = sorted((p, v) for p, recs in log.items() for _, v in recs)
    assert len(fetched) == RECORDS
    r = tidegate("console-consumer", "--bootstrap-server", peer_bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", str(RECORDS), "--timeout-ms", "20000", "--property", "print.partition=true")
    assert r.returncode == 0, r.stderr
    console = sorted((int(p.removeprefix("Partition:")), int(v))
                     for p, v in (line.split("\t") for line in r.stdout.decode().splitlines()))  # fmt: skip
    assert console == fetched
    c = Consumer({"bootstrap.servers": peer_bootstrap, "group.id": f"{topic}-ref", "enable.auto.commit": False})
    reference: list[tuple[int, int]] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(reference) < RECORDS and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                reference.append((msg.partition(), int(msg.value())))
    finally:
        c.close()
    assert sorted(reference) == fetched


def test_topics_describe(peer_bootstrap, topic_name):
    topic = _topic(peer_bootstrap, topic_name)
    r = tidegate("topics", "--bootstrap-server", peer_bootstrap, "--describe", "--topic", topic)
    assert r.returncode == 0, r.stderr
    assert f"PartitionCount: {PARTITIONS}".encode() in r.stdout
    assert r.stdout.count(b"\tPartition: ") == PARTITIONS
