"""KIP-848's consumer group protocol with a real client: confluent-kafka with
``group.protocol=consumer`` (librdkafka sends ConsumerGroupHeartbeat v1, commits with
OffsetCommit v9 and member epochs) against a real tidegate process.

A checker follows every consumer's assignment through its assign and revoke callbacks:
no partition is owned by two consumers at once, at any poll. The broker's heartbeat
interval is lowered (group.consumer.heartbeat.interval.ms and its minimum) so a
rebalance takes a few hundred milliseconds instead of Kafka's 5 s heartbeats.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from .clients import base_timestamp, create_topic, make_records, produce

pytestmark = pytest.mark.timeout(180)

CFK = "confluent"
FAST = {
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "200",
}


class Owners:
    """Who owns which partition, from the consumers' callbacks; a partition given to a
    consumer while another still owns it fails the test."""

    def __init__(self) -> None:
        self.owner: dict[tuple[str, int], str] = {}

    def callbacks(self, name: str) -> dict:
        def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                assert self.owner.get(key, name) == name, f"{key} given to {name}, still owned by {self.owner[key]}"
                self.owner[key] = name

        def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            for tp in partitions:
                self.owner.pop((tp.topic, tp.partition), None)

        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}

    def of(self, name: str) -> set[tuple[str, int]]:
        return {tp for tp, who in self.owner.items() if who == name}


def new_member(bootstrap: str, group: str, **conf: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0, **conf,
    })  # fmt: skip


def poll_all(members: Mapping[str, Any], got: dict[str, list], until, timeout: float = 60.0) -> None:
    """Poll every member in turn, committing what each read, until ``until()``."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out: " + repr(
            {name: sorted((tp.topic, tp.partition) for tp in c.assignment()) for name, c in members.items()}
        )
        for name, c in members.items():
            msgs = c.consume(100, 0.1)
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                got[name].append((m.topic(), m.partition(), m.offset()))
            if msgs:
                c.commit(asynchronous=False)


def read_offsets(got: dict[str, list]) -> list[tuple[str, int, int]]:
    return sorted(r for records in got.values() for r in records)


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int, seed: int = 0) -> None:
    recs = make_records(partitions * per_partition, base_timestamp(), seed=seed)
    produce(bootstrap, topic, recs, client=CFK, partition=lambda i: i % partitions)


def expected(topic: str, partitions: Iterable[int], per_partition: int, start: int = 0):
    return sorted((topic, p, o) for p in partitions for o in range(start, start + per_partition))


def test_one_consumer_reads_everything_and_commits_survive_a_restart(broker_factory):
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "one", 3, client=CFK)
    fill(broker.bootstrap, "one", 3, 50)
    c = new_member(broker.bootstrap, "g1")
    assert c.memberid()  # KIP-1082: the client names itself before it joins
    c.subscribe(["one"])
    got: dict[str, list] = {"c": []}
    poll_all({"c": c}, got, lambda: len(got["c"]) >= 150)
    assert read_offsets(got) == expected("one", range(3), 50)
    member_id = c.memberid()
    broker.restart()
    fill(broker.bootstrap, "one", 3, 10, seed=1)
    # the same member carries on: its group, epoch and committed offsets were recovered
    poll_all({"c": c}, got, lambda: len(got["c"]) >= 180)
    assert read_offsets(got) == sorted(expected("one", range(3), 50) + expected("one", range(3), 10, 50))
    assert c.memberid() == member_id
    c.close()
    # a new consumer of the group starts from the committed offsets
    fill(broker.bootstrap, "one", 3, 5, seed=2)
    again = new_member(broker.bootstrap, "g1")
    again.subscribe(["one"])
    more: dict[str, list] = {"c": []}
    poll_all({"c": again}, more, lambda: len(more["c"]) >= 15)
    time.sleep(0.5)
    assert read_offsets(more) == expected("one", range(3), 5, 60)
    again.close()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_two_consumers_split_six_partitions_and_rebalance(broker_factory, assignor):
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "six", 6, client=CFK)
    fill(broker.bootstrap, "six", 6, 20)
    owners = Owners()
    a = new_member(broker.bootstrap, "g2", **{"group.remote.assignor": assignor})
    a.subscribe(["six"], **owners.callbacks("a"))
    got: dict[str, list] = {"a": [], "b": []}
    members = {"a": a}
    poll_all(members, got, lambda: len(owners.of("a")) == 6)
    b = new_member(broker.bootstrap, "g2", **{"group.remote.assignor": assignor})
    b.subscribe(["six"], **owners.callbacks("b"))
    members["b"] = b
    poll_all(members, got, lambda: len(owners.of("a")) == 3 and len(owners.of("b")) == 3)
    if assignor == "range":  # contiguous ranges, members sorted by id
        first, second = sorted(["a", "b"], key=lambda n: members[n].memberid())
        assert owners.of(first) == {("six", p) for p in (0, 1, 2)}
        assert owners.of(second) == {("six", p) for p in (3, 4, 5)}
    poll_all(members, got, lambda: len(read_offsets(got)) >= 120)
    assert read_offsets(got) == expected("six", range(6), 20)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (description,) = [f.result() for f in admin.describe_consumer_groups(["g2"]).values()]
    assert str(description.type).endswith("CONSUMER")
    assert {m.member_id for m in description.members} == {a.memberid(), b.memberid()}
    assigned = sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions)
    assert assigned == list(range(6))

    # b leaves: a takes everything back, and reads what b had not
    b.close()
    del members["b"]
    fill(broker.bootstrap, "six", 6, 5, seed=1)
    poll_all(members, got, lambda: len(owners.of("a")) == 6 and len(read_offsets(got)) >= 150)
    assert read_offsets(got) == sorted(expected("six", range(6), 20) + expected("six", range(6), 5, 20))
    a.close()


def test_a_regex_subscription_picks_up_a_topic_created_later(broker_factory):
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "topic-a", 2, client=CFK)
    create_topic(broker.bootstrap, "other", 1, client=CFK)
    owners = Owners()
    c = new_member(broker.bootstrap, "g3", **{"topic.metadata.refresh.interval.ms": 1000})
    c.subscribe(["^topic-.*"], **owners.callbacks("c"))
    got: dict[str, list] = {"c": []}
    poll_all({"c": c}, got, lambda: owners.of("c") == {("topic-a", 0), ("topic-a", 1)})
    create_topic(broker.bootstrap, "topic-b", 1, client=CFK)
    fill(broker.bootstrap, "topic-b", 1, 10)
    # regexes are resolved again at most every 10 s after their last resolution
    poll_all({"c": c}, got, lambda: len(got["c"]) >= 10, timeout=40)
    assert ("topic-b", 0) in owners.of("c")
    assert read_offsets(got) == expected("topic-b", [0], 10)
    c.close()


def test_a_static_member_restarting_gets_its_partitions_back_without_a_rebalance(broker_factory):
    """librdkafka leaves with epoch -2 when group.instance.id is set; a new consumer with
    that instance id takes the member's place and assignment, and the other member's
    partitions never move (reference 1.9)."""
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "st", 4, client=CFK)
    owners = Owners()
    got: dict[str, list] = {"a": [], "s": []}
    a = new_member(broker.bootstrap, "g4")
    a.subscribe(["st"], **owners.callbacks("a"))
    s = new_member(broker.bootstrap, "g4", **{"group.instance.id": "static-1"})
    s.subscribe(["st"], **owners.callbacks("s"))
    members = {"a": a, "s": s}
    poll_all(members, got, lambda: len(owners.of("a")) == 2 and len(owners.of("s")) == 2)
    kept, static_partitions = owners.of("a"), owners.of("s")
    s.close()  # a temporary leave: its partitions stay its own
    del members["s"]
    owners.owner = {tp: who for tp, who in owners.owner.items() if who != "s"}
    back = new_member(broker.bootstrap, "g4", **{"group.instance.id": "static-1"})
    back.subscribe(["st"], **owners.callbacks("s"))
    members["s"] = back
    poll_all(members, got, lambda: owners.of("s") == static_partitions)
    assert owners.of("a") == kept
    fill(broker.bootstrap, "st", 4, 5)
    poll_all(members, got, lambda: len(read_offsets(got)) >= 20)
    assert read_offsets(got) == expected("st", range(4), 5)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (description,) = [f.result() for f in admin.describe_consumer_groups(["g4"]).values()]
    assert {m.group_instance_id for m in description.members} == {None, "static-1"}
    for c in members.values():
        c.close()


#: A consumer-protocol member in a process of its own, reporting its assignment's size.
KILLED_MEMBER = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "log_level": 0})
owned = set()
def assigned(_c, parts):
    owned.update((p.topic, p.partition) for p in parts)
    print("ASSIGNED", len(owned), flush=True)
def revoked(_c, parts):
    owned.difference_update((p.topic, p.partition) for p in parts)
    print("ASSIGNED", len(owned), flush=True)
c.subscribe([sys.argv[3]], on_assign=assigned, on_revoke=revoked)
while True:
    c.poll(0.1)
"""
SESSION_MS = 3000


def test_a_killed_consumer_is_fenced_when_its_session_expires(broker_factory):
    """kill -9 of a member: it never leaves, its session timeout (on the broker's timing
    wheel) fences it and the survivor gets its partitions (reference 1.8)."""
    broker = broker_factory({**FAST, "group.consumer.min.session.timeout.ms": str(SESSION_MS),
                             "group.consumer.session.timeout.ms": str(SESSION_MS)})  # fmt: skip
    create_topic(broker.bootstrap, "k", 6, client=CFK)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MEMBER, broker.bootstrap, "g5", "k"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    owners = Owners()
    survivor = new_member(broker.bootstrap, "g5")
    survivor.subscribe(["k"], **owners.callbacks("s"))
    got: dict[str, list] = {"s": []}
    try:
        poll_all({"s": survivor}, got, lambda: len(owners.of("s")) == 3 and lines[-1:] == ["ASSIGNED 3\n"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        poll_all({"s": survivor}, got, lambda: len(owners.of("s")) == 6, timeout=SESSION_MS / 1000 + 30)
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 - 1  # not before the session expired: it never left
        assert "fenced from the group because the member session expired" in broker.log_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        survivor.close()


def test_offsets_committed_in_a_transaction_by_a_consumer_protocol_member(broker_factory):
    """send_offsets_to_transaction with a consumer-protocol member's group metadata:
    TxnOffsetCommit carries the member id and epoch, checked as OffsetCommit's; the
    offsets count once the transaction commits."""
    from confluent_kafka import Producer

    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "tin", 2, client=CFK)
    create_topic(broker.bootstrap, "tout", 2, client=CFK)
    fill(broker.bootstrap, "tin", 2, 30)
    c = new_member(broker.bootstrap, "g6", **{"isolation.level": "read_committed"})
    c.subscribe(["tin"])
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-g6", "log_level": 0})
    p.init_transactions(30)
    done = 0
    deadline = time.monotonic() + 60
    while done < 60:
        assert time.monotonic() < deadline, "timed out"
        msgs = [m for m in c.consume(100, 0.2) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce("tout", m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        done += len(msgs)
    committed = c.committed([TopicPartition("tin", 0), TopicPartition("tin", 1)], timeout=10)
    assert [tp.offset for tp in committed] == [30, 30]
    c.close()


def classic_member(bootstrap: str, group: str) -> Consumer:
    """A confluent-kafka consumer of the classic protocol (JoinGroup/SyncGroup/Heartbeat),
    heartbeating often so a rebalance reaches it quickly."""
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
    })  # fmt: skip


class KafkaPythonClassicMember:
    """kafka-python's KafkaConsumer (the classic protocol) behind the calls of confluent's
    Consumer that this module's helpers make.

    It polls on a thread of its own, as an application's consumer does, with a poll
    timeout longer than a rebalance, and hands its records to :meth:`consume`: kafka-python
    3.0 drops a JoinGroup/SyncGroup round that completes while no ``poll()`` awaits it
    (``ensure_active_group_async`` replaces a finished join task with a new JoinGroup).
    Polled in turn with the other members on one thread, a leader's round completes only
    while another member is polled (its rejoin completes the join), so the leader rejoined
    after every rebalance, never took its assignment, and kept the partitions of the one
    before: two members owning the same partitions until the test timed out."""

    #: longer than a rebalance here (the followers hear of it within a heartbeat, 300 ms)
    POLL_TIMEOUT_MS = 1000

    class Message:
        def __init__(self, record) -> None:
            self.record = record

        def error(self) -> None:
            return None

        def topic(self) -> str:
            return self.record.topic

        def partition(self) -> int:
            return self.record.partition

        def offset(self) -> int:
            return self.record.offset

    def __init__(self, bootstrap: str, group: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
        )  # fmt: skip
        self.records: queue.Queue = queue.Queue()
        self.failure: Exception | None = None
        self.stopping = threading.Event()
        self.poller: threading.Thread | None = None

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics)
        self.poller = threading.Thread(target=self._poll, name="kafka-python-member", daemon=True)
        self.poller.start()

    def _poll(self) -> None:
        """Poll, queue what was read, commit it (what poll_all does after each read)."""
        try:
            while not self.stopping.is_set():
                batches = self.consumer.poll(timeout_ms=self.POLL_TIMEOUT_MS, max_records=100)
                records = [r for records in batches.values() for r in records]
                for record in records:
                    self.records.put(record)
                if records:
                    self.consumer.commit()
        except Exception as exc:  # noqa: BLE001 -- re-raised by consume() on the test thread
            self.failure = exc

    def consume(self, num_messages: int, timeout: float) -> list:
        if self.failure is not None:
            raise self.failure
        out = []
        try:
            out.append(self.records.get(timeout=timeout))
            while len(out) < num_messages:
                out.append(self.records.get_nowait())
        except queue.Empty:
            pass
        return [self.Message(r) for r in out]

    def commit(self, asynchronous: bool = True) -> None:
        """The polling thread committed what it read before handing it over."""

    def assignment(self) -> set:
        return self.consumer.assignment()

    def close(self) -> None:
        self.stopping.set()
        if self.poller is not None:
            self.poller.join()
        self.consumer.close()


@pytest.mark.parametrize("classic_client", ["confluent", "kafka-python"])
def test_a_rolling_upgrade_and_downgrade_between_the_protocols(broker_factory, classic_client):
    """Reference 1.13, what an application's rolling upgrade does: two classic consumers,
    one replaced by a consumer-protocol one (the group is upgraded, the classic member
    keeps working in it), then the other (all consumer protocol), then back one by one
    (the classic newcomer joins the consumer group; the last consumer-protocol member's
    leave downgrades it). Records are produced once the group has settled after each
    step: each is read exactly once, from the offsets committed before the switch."""
    broker = broker_factory(FAST)
    bootstrap, topic, group, partitions = broker.bootstrap, "roll", "roll", 4
    create_topic(bootstrap, topic, partitions, client=CFK)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    got: dict[str, list] = {}
    members: dict[str, Any] = {}
    produced = 0

    def classic(name: str) -> None:
        if classic_client == "confluent":
            add(name, classic_member(bootstrap, group))
        else:
            add(name, KafkaPythonClassicMember(bootstrap, group))

    def add(name: str, consumer: Any) -> None:
        consumer.subscribe([topic])
        members[name] = consumer
        got.setdefault(name, [])

    def remove(name: str) -> None:
        members.pop(name).close()

    def group_type() -> str:
        (description,) = [f.result() for f in admin.describe_consumer_groups([group]).values()]
        return str(description.type).rsplit(".", 1)[-1]

    def step(expected_type: str) -> None:
        """Wait until every member owns a share of the partitions, produce 20 records a
        partition, read them all."""
        nonlocal produced

        def settled() -> bool:
            owned = [{tp.partition for tp in c.assignment()} for c in members.values()]
            return all(owned) and set().union(*owned) == set(range(partitions)) and (
                sum(map(len, owned)) == partitions
            )

        poll_all(members, got, settled)
        assert group_type() == expected_type
        fill(bootstrap, topic, partitions, 20, seed=produced)
        produced += 20
        poll_all(members, got, lambda: len(read_offsets(got)) >= produced * partitions)

    classic("classic-a")
    classic("classic-b")
    step("CLASSIC")
    remove("classic-a")  # the rolling upgrade
    add("consumer-a", new_member(bootstrap, group))
    step("CONSUMER")
    remove("classic-b")
    add("consumer-b", new_member(bootstrap, group))
    step("CONSUMER")
    remove("consumer-a")  # the rolling downgrade
    classic("classic-c")
    step("CONSUMER")
    remove("consumer-b")
    classic("classic-d")
    step("CLASSIC")
    for name in list(members):
        remove(name)
    assert read_offsets(got) == expected(topic, range(partitions), produced)
