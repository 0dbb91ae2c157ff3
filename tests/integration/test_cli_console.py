"""``tidegate console-producer`` and ``tidegate console-consumer`` as a user runs them
(processes piping stdin and stdout) against a live broker and the peer broker: keys,
headers and the print properties, where a consumer starts, a group that resumes and
shares partitions with a confluent-kafka consumer, read_committed."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer

from tests.conftest import wait_until
from tidegate.client import KafkaClient
from tidegate.client.admin import create_topic, describe_groups


def tidegate(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "tidegate", *args], input=stdin, capture_output=True,
                          timeout=timeout, check=False)  # fmt: skip


def produce_lines(bootstrap: str, topic: str, lines: bytes, *props: str) -> None:
    args = [a for p in props for a in ("--property", p)]
    r = tidegate("console-producer", "--bootstrap-server", bootstrap, "--topic", topic, *args, stdin=lines)
    assert r.returncode == 0 and r.stderr == b"", r.stderr


def consume(bootstrap: str, topic: str, *args: str) -> tuple[bytes, bytes]:
    r = tidegate("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def new_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    with KafkaClient(bootstrap) as client:
        create_topic(client, name, partitions)
    return name


def test_round_trip_with_keys_headers_and_print_properties(broker):
    b = broker.bootstrap
    topic = new_topic(b, "console-kv")
    produce_lines(b, topic, "h1:v1,h2:v2\tk1\thello\nh3:x\tk2\twörld\n".encode(),
                  "parse.key=true", "parse.headers=true")  # fmt: skip
    out, err = consume(b, topic, "--from-beginning", "--max-messages", "2", "--property", "print.timestamp=true",
                       "--property", "print.partition=true", "--property", "print.offset=true",
                       "--property", "print.headers=true", "--property", "print.key=true")  # fmt: skip
    lines = out.decode().splitlines()
    assert re.fullmatch(r"CreateTime:\d{13}\tPartition:0\tOffset:0\th1:v1,h2:v2\tk1\thello", lines[0]), lines[0]
    assert re.fullmatch(r"CreateTime:\d{13}\tPartition:0\tOffset:1\th3:x\tk2\twörld", lines[1]), lines[1]
    assert err == b"Processed a total of 2 messages\n"
    # plain values, a key separator of one's own, nulls as null.literal
    produce_lines(b, topic, b"k4|v4\nnull|v5\n", "parse.key=true", "key.separator=|", "null.marker=null")
    out, _ = consume(b, topic, "--partition", "0", "--offset", "2", "--max-messages", "2",
                     "--property", "print.key=true", "--property", "key.separator=:",
                     "--property", "null.literal=<null>")  # fmt: skip
    assert out == b"k4:v4\n<null>:v5\n"
    # a line without the key separator fails as Kafka's LineMessageReader does
    r = tidegate("console-producer", "--bootstrap-server", b, "--topic", topic, "--property", "parse.key=true",
                 stdin=b"no-separator\n")  # fmt: skip
    assert r.returncode == 1 and b"No key separator found on line number 1: 'no-separator'" in r.stderr


def test_latest_by_default_and_the_partition_offset_max_messages_options(broker):
    b = broker.bootstrap
    topic = new_topic(b, "console-where", 2)
    p = Producer({"bootstrap.servers": b})
    for i in range(10):
        p.produce(topic, b"old-%d" % i, partition=i % 2)
    p.flush(30)
    latest = subprocess.Popen([sys.executable, "-m", "tidegate", "console-consumer", "--bootstrap-server", b,
                               "--topic", topic, "--max-messages", "1", "--timeout-ms", "30000"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    i = 0
    while latest.poll() is None and i < 100:  # until the consumer (positioned at the end) sees one
        p.produce(topic, b"new-%d" % i)
        p.flush(30)
        i += 1
        time.sleep(0.3)
    out, err = latest.communicate(timeout=30)
    assert out.startswith(b"new-") and out.count(b"\n") == 1, (out, err)
    assert err == b"Processed a total of 1 messages\n"
    out, _ = consume(b, topic, "--partition", "1", "--offset", "2", "--max-messages", "3")
    assert out == b"old-5\nold-7\nold-9\n"
    out, err = consume(b, topic, "--from-beginning", "--max-messages", "4")
    assert len(out.splitlines()) == 4 and err == b"Processed a total of 4 messages\n"
    out, err = consume(b, topic, "--partition", "0", "--offset", "earliest", "--timeout-ms", "2000")
    assert out.splitlines()[:5] == [b"old-%d" % i for i in (0, 2, 4, 6, 8)]


def test_a_group_resumes_and_shares_partitions_with_a_confluent_consumer(broker_factory):
    # no initial rebalance delay: --timeout-ms counts from the console's start, join included
    # (as Kafka's console consumer, whose poll(timeout) joins the group)
    b = broker_factory({"group.initial.rebalance.delay.ms": 0}).bootstrap
    topic = new_topic(b, "console-group", 2)
    produce_lines(b, topic, b"a\nb\n")
    out, err = consume(b, topic, "--group", "console-g", "--from-beginning", "--timeout-ms", "3000")
    assert sorted(out.splitlines()) == [b"a", b"b"]
    produce_lines(b, topic, b"c\n")
    out, _ = consume(b, topic, "--group", "console-g", "--from-beginning", "--timeout-ms", "3000")
    assert out == b"c\n"  # the committed offsets: only what came after

    other = Consumer({"bootstrap.servers": b, "group.id": "console-shared", "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "range", "client.id": "confluent"})  # fmt: skip
    other.subscribe([topic])
    console = subprocess.Popen([sys.executable, "-m", "tidegate", "console-consumer", "--bootstrap-server", b,
                                "--topic", topic, "--group", "console-shared", "--from-beginning",
                                "--timeout-ms", "15000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    seen_other: list[bytes] = []

    def two_members_each_with_a_partition() -> bool:
        m = other.poll(0.2)
        if m is not None and not m.error():
            seen_other.append(m.value())
        with KafkaClient(b) as client:
            (desc,) = describe_groups(client, ["console-shared"])
        return desc.state == "Stable" and sorted(len(x.assignment) for x in desc.members) == [1, 1]

    try:
        wait_until(two_members_each_with_a_partition, 60, what="both consumers sharing the partitions",
                   interval=0.1)  # fmt: skip
        p = Producer({"bootstrap.servers": b})
        for i in range(20):
            p.produce(topic, b"shared-%d" % i, partition=i % 2)
        p.flush(30)
        deadline = time.monotonic() + 30
        while console.poll() is None and time.monotonic() < deadline:
            m = other.poll(0.2)
            if m is not None and not m.error():
                seen_other.append(m.value())
        out, err = console.communicate(timeout=30)
    finally:
        other.close()
        if console.poll() is None:
            console.kill()
    mine = out.splitlines()
    everything = [b"a", b"b", b"c"] + [b"shared-%d" % i for i in range(20)]
    assert sorted(mine + seen_other) == sorted(everything), (mine, seen_other, err)
    assert mine and seen_other and not set(mine) & set(seen_other)


def test_read_committed_hides_an_aborted_transaction(broker):
    b = broker.bootstrap
    topic = new_topic(b, "console-txn")
    p = Producer({"bootstrap.servers": b, "transactional.id": "console-txn-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(30)  # written to the log before the abort (librdkafka drops unsent records)
    p.abort_transaction(30)
    produce_lines(b, topic, b"after\n")
    out, _ = consume(b, topic, "--from-beginning", "--isolation-level", "read_committed", "--timeout-ms", "3000")
    assert out == b"committed\nafter\n"
    out, _ = consume(b, topic, "--from-beginning", "--timeout-ms", "3000")
    assert out == b"committed\naborted\nafter\n"


def test_usage_errors_exit_2(broker):
    r = tidegate("console-consumer", "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 2 and b"Exactly one of include/topic is required." in r.stderr
    r = tidegate("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--offset", "3")
    assert r.returncode == 2 and b"The partition is required when offset is specified." in r.stderr
    r = tidegate("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--partition", "0",
                 "--offset", "soon")  # fmt: skip
    assert r.returncode == 2 and b"The provided offset value is incorrect." in r.stderr
    r = tidegate("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--group", "g",
                 "--consumer-property", "group.protocol=eager")  # fmt: skip
    assert r.returncode == 2
    assert b"Invalid value eager for configuration group.protocol: String must be one of (case insensitive): " \
           b"CLASSIC, CONSUMER" in r.stderr
    r = tidegate("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--group", "g",
                 "--consumer-property", "group.protocol=consumer", "--consumer-property", "session.timeout.ms=9000")
    assert r.returncode == 2 and b"session.timeout.ms cannot be set when group.protocol=CONSUMER" in r.stderr


def test_against_the_peer_broker(peer_bootstrap):
    b = peer_bootstrap
    topic = "console-peer"
    produce_lines(b, topic, b"k1\tv1\nk2\tv2\n", "parse.key=true")
    out, _ = consume(b, topic, "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000",
                     "--property", "print.key=true")  # fmt: skip
    assert sorted(out.splitlines()) == [b"k1\tv1", b"k2\tv2"]
