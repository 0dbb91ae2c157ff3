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
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
from kafka import KafkaConsumer

from tests.conftest import metrics_overrides, wait_until

from .clients import (
    base_timestamp,
    create_topic,
    make_records,
    produce,
    sample,
    scrape,
    set_group_config,
)
from .rawclient import RawClient

pytestmark = pytest.mark.timeout(180)

CFK = "confluent"
FAST = {
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "200",
}


class Owners:
    """Who owns which partition, from the consumers' callbacks; a partition given to a
    consumer while another still owns it fails the test. ``events`` keeps every callback
    as (consumer, kind, partitions): what the application was handed, increment by
    increment."""

    def __init__(self) -> None:
        self.owner: dict[tuple[str, int], str] = {}
        self.events: list[tuple[str, str, frozenset[tuple[str, int]]]] = []

    def callbacks(self, name: str, *, lost: bool = True, apply: bool = False) -> dict:
        """The subscribe() callbacks of consumer ``name``: without ``lost``, lost
        partitions reach on_revoke (librdkafka's fallback); with ``apply``, the callbacks
        call incremental_assign/incremental_unassign themselves."""

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.events.append((name, "assign", _keys(partitions)))
            for tp in partitions:
                key = (tp.topic, tp.partition)
                assert self.owner.get(key, name) == name, f"{key} given to {name}, still owned by {self.owner[key]}"
                self.owner[key] = name
            if apply:
                consumer.incremental_assign(partitions)

        def released(kind: str) -> Any:
            def on_release(consumer: Consumer, partitions: list[TopicPartition]) -> None:
                self.events.append((name, kind, _keys(partitions)))
                for tp in partitions:
                    self.owner.pop((tp.topic, tp.partition), None)
                if apply:
                    consumer.incremental_unassign(partitions)

            return on_release

        out = {"on_assign": on_assign, "on_revoke": released("revoke")}
        if lost:
            out["on_lost"] = released("lost")
        return out

    def of(self, name: str) -> set[tuple[str, int]]:
        return {tp for tp, who in self.owner.items() if who == name}

    def forget(self, name: str) -> None:
        """Consumer ``name`` was closed: it owns nothing (a static member's temporary
        leave revokes nothing in the application)."""
        self.owner = {tp: who for tp, who in self.owner.items() if who != name}

    def of_events(self, name: str) -> list[tuple[str, frozenset[tuple[str, int]]]]:
        return [(kind, parts) for who, kind, parts in self.events if who == name]

    def balanced(self, members: Mapping[str, Consumer], every: set[tuple[str, int]]) -> bool:
        """Every partition of ``every`` owned (by one member: the callbacks check that),
        the members' shares within one of each other (the uniform assignor's balance),
        and each member's own view of its assignment the same as its callbacks'."""
        owned = {name: self.of(name) for name in members}
        sizes = sorted(map(len, owned.values()))
        return (
            set().union(*owned.values()) == every
            and sizes[-1] - sizes[0] <= 1
            and all(_keys(c.assignment()) == owned[name] for name, c in members.items())
        )


def _keys(partitions: Iterable[TopicPartition]) -> frozenset[tuple[str, int]]:
    return frozenset((tp.topic, tp.partition) for tp in partitions)


def partitions_of_topic(topic: str, n: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(n)}


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
    owners.forget("s")
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


class MemberProcess:
    """A consumer-protocol member in a process of its own (:data:`KILLED_MEMBER`), to be
    killed with SIGKILL: it never leaves. ``owned()`` is the size of its assignment as
    it last reported it."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_MEMBER, bootstrap, group, topic],
            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=lambda: self.lines.extend(iter(stdout.readline, "")), daemon=True).start()

    def owned(self) -> int | None:
        return int(self.lines[-1].split()[1]) if self.lines else None

    def kill(self) -> float:
        """SIGKILL; when it died (time.monotonic())."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        return time.monotonic()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_a_killed_consumer_is_fenced_when_its_session_expires(broker_factory):
    """kill -9 of a member: it never leaves, its session timeout (on the broker's timing
    wheel) fences it and the survivor gets its partitions (reference 1.8)."""
    broker = broker_factory({**FAST, "group.consumer.min.session.timeout.ms": str(SESSION_MS),
                             "group.consumer.session.timeout.ms": str(SESSION_MS)})  # fmt: skip
    create_topic(broker.bootstrap, "k", 6, client=CFK)
    victim = MemberProcess(broker.bootstrap, "g5", "k")
    owners = Owners()
    survivor = new_member(broker.bootstrap, "g5")
    survivor.subscribe(["k"], **owners.callbacks("s"))
    got: dict[str, list] = {"s": []}
    try:
        poll_all({"s": survivor}, got, lambda: len(owners.of("s")) == 3 and victim.owned() == 3)
        killed_at = victim.kill()
        poll_all({"s": survivor}, got, lambda: len(owners.of("s")) == 6, timeout=SESSION_MS / 1000 + 30)
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 - 1  # not before the session expired: it never left
        assert "fenced from the group because the member session expired" in broker.log_text()
    finally:
        victim.close()
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


# -- confluent-kafka's consumer-protocol cases (reference 3.3: consumer_memberid,
# cooperative_rebalance_1/2, incremental_assign), and more members ---------------------------
def test_one_to_five_members_join_and_leave_one_by_one(broker_factory):
    """Members join one at a time up to five, then leave one at a time down to none.
    After each change the group settles with every partition owned by exactly one member
    (the callbacks' checker) in balanced shares, each member's id is the one it made
    before joining (KIP-1082) and the one describe_consumer_groups shows, and the records
    produced then are each read once, from the offsets committed before the change."""
    broker = broker_factory(FAST)
    bootstrap, topic, group, partitions = broker.bootstrap, "many", "g-many", 10
    create_topic(bootstrap, topic, partitions, client=CFK)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    owners = Owners()
    members: dict[str, Consumer] = {}
    got: dict[str, list] = {}
    produced = 0

    def settle_and_read() -> None:
        nonlocal produced
        poll_all(members, got, lambda: owners.balanced(members, partitions_of_topic(topic, partitions)))
        (description,) = [f.result(10) for f in admin.describe_consumer_groups([group]).values()]
        assert {m.member_id for m in description.members} == {c.memberid() for c in members.values()}
        fill(bootstrap, topic, partitions, 5, seed=produced)
        produced += 5
        poll_all(members, got, lambda: len(read_offsets(got)) >= produced * partitions)

    ids = {}
    for i in range(5):
        name = f"m{i}"
        c = new_member(bootstrap, group)
        ids[name] = c.memberid()
        assert ids[name], "KIP-1082: the member id exists before the first join"
        c.subscribe([topic], **owners.callbacks(name))
        members[name], got[name] = c, []
        settle_and_read()
    assert {name: c.memberid() for name, c in members.items()} == ids
    for name in list(members)[:-1]:
        members.pop(name).close()
        owners.forget(name)
        settle_and_read()
    for c in members.values():
        c.close()
    assert read_offsets(got) == expected(topic, range(partitions), produced)


def stalled_past_max_poll_interval(consumer: Consumer, seconds: float) -> int | None:
    """The application does not poll for longer than max.poll.interval.ms (``seconds``):
    librdkafka leaves the group, and the next poll reports it (an error event here; the
    confluent-kafka tests' version raised it). The error code of that poll."""
    time.sleep(seconds + 1)  # the stall itself, not a wait for something
    try:
        m = consumer.poll(1)
    except KafkaException as exc:
        return exc.args[0].code()
    return None if m is None or m.error() is None else m.error().code()


def test_cooperative_callbacks_hand_the_application_increments(broker_factory):
    """confluent-kafka's cooperative_rebalance_1 with the consumer protocol: a second
    subscribed topic is an on_assign of its partition alone; a second member's arrival
    an on_revoke of only the partitions it takes (the rest stay, never re-assigned) and
    its leave an on_assign of them back; a consumer that exceeds max.poll.interval.ms
    loses its partitions (_MAX_POLL_EXCEEDED, then on_lost) and gets them back when it
    polls again."""
    broker = broker_factory(FAST)
    bootstrap = broker.bootstrap
    for topic, n in (("co1", 1), ("co2", 1), ("co4", 4)):
        create_topic(bootstrap, topic, n, client=CFK)
    fill(bootstrap, "co1", 1, 1)
    owners = Owners()
    a = new_member(bootstrap, "g-coop", **{"max.poll.interval.ms": 4000})
    got: dict[str, list] = {"a": [], "b": []}
    a.subscribe(["co1"], **owners.callbacks("a"))
    poll_all({"a": a}, got, lambda: len(got["a"]) == 1)
    a.subscribe(["co1", "co2", "co4"], **owners.callbacks("a"))
    every = partitions_of_topic("co1", 1) | partitions_of_topic("co2", 1) | partitions_of_topic("co4", 4)
    poll_all({"a": a}, got, lambda: owners.of("a") == every)
    assert owners.of_events("a") == [
        ("assign", {("co1", 0)}), ("assign", frozenset(every - {("co1", 0)}))]  # fmt: skip

    b = new_member(bootstrap, "g-coop")
    b.subscribe(["co1", "co2", "co4"], **owners.callbacks("b"))
    members = {"a": a, "b": b}
    poll_all(members, got, lambda: owners.balanced(members, every))
    (revoked,) = [parts for kind, parts in owners.of_events("a")[2:] if kind == "revoke"]
    assert revoked == owners.of("b") and owners.of("a") == every - revoked
    assert owners.of_events("b") == [("assign", revoked)]
    b.close()
    owners.forget("b")
    del members["b"]
    poll_all(members, got, lambda: owners.of("a") == every)
    assert owners.of_events("a")[-1] == ("assign", revoked)

    assert stalled_past_max_poll_interval(a, 4) == KafkaError._MAX_POLL_EXCEEDED
    before = len(owners.events)
    poll_all(members, got, lambda: owners.of("a") == every and len(owners.events) > before + 1)
    assert owners.of_events("a")[-2:] == [("lost", frozenset(every)), ("assign", frozenset(every))]
    a.close()


def test_lost_partitions_reach_on_revoke_without_on_lost(broker_factory):
    """confluent-kafka's cooperative_rebalance_2: without an on_lost callback, the
    partitions a consumer lost (max.poll.interval.ms exceeded) reach on_revoke."""
    broker = broker_factory(FAST)
    create_topic(broker.bootstrap, "lost", 1, client=CFK)
    fill(broker.bootstrap, "lost", 1, 1)
    owners = Owners()
    c = new_member(broker.bootstrap, "g-lost", **{"max.poll.interval.ms": 4000})
    c.subscribe(["lost"], **owners.callbacks("c", lost=False))
    got: dict[str, list] = {"c": []}
    poll_all({"c": c}, got, lambda: len(got["c"]) == 1)
    assert stalled_past_max_poll_interval(c, 4) == KafkaError._MAX_POLL_EXCEEDED
    assert owners.of_events("c") == [("assign", {("lost", 0)})]
    poll_all({"c": c}, got, lambda: len(owners.of_events("c")) >= 2, timeout=10)
    assert owners.of_events("c")[1] == ("revoke", {("lost", 0)})
    c.close()


def test_incremental_assign_and_unassign_from_the_callbacks(broker_factory):
    """The application applies each increment itself (incremental_assign in on_assign,
    incremental_unassign in on_revoke), as a cooperative application does: two members
    split the partitions and read every record once, and the survivor of a leave takes
    the rest incrementally."""
    broker = broker_factory(FAST)
    bootstrap, topic, group = broker.bootstrap, "inc", "g-inc"
    create_topic(bootstrap, topic, 4, client=CFK)
    fill(bootstrap, topic, 4, 10)
    owners = Owners()
    members = {name: new_member(bootstrap, group) for name in ("a", "b")}
    got: dict[str, list] = {"a": [], "b": []}
    for name, c in members.items():
        c.subscribe([topic], **owners.callbacks(name, apply=True))
    poll_all(members, got, lambda: owners.balanced(members, partitions_of_topic(topic, 4)) and len(read_offsets(got)) >= 40)
    assert read_offsets(got) == expected(topic, range(4), 10)
    members.pop("b").close()
    owners.forget("b")
    kept = owners.of("a")
    since = len(owners.of_events("a"))
    fill(bootstrap, topic, 4, 5, seed=1)
    poll_all(members, got, lambda: owners.balanced(members, partitions_of_topic(topic, 4)) and len(read_offsets(got)) >= 60)
    assert read_offsets(got) == expected(topic, range(4), 15)
    # b's partitions came as an increment; a kept its own throughout
    assert owners.of_events("a")[since:] == [("assign", frozenset(partitions_of_topic(topic, 4) - kept))]
    assert _keys(members["a"].assignment()) == partitions_of_topic(topic, 4)
    members["a"].close()


def test_incremental_assign_without_a_subscription(broker_factory):
    """confluent-kafka's incremental_assign with group.protocol=consumer: partitions
    assigned by the application, offsets committed to the group (an admin-style commit,
    no member), a partition assigned twice _CONFLICT, unassigned ones no longer read, one
    not assigned _INVALID_ARG."""
    broker = broker_factory(FAST)
    bootstrap = broker.bootstrap
    for topic in ("ia1", "ia2"):
        create_topic(bootstrap, topic, 1, client=CFK)
        produce(bootstrap, topic, [f"{topic}-0".encode()], client=CFK)
    c = new_member(bootstrap, "g-ia", **{"auto.offset.reset": "error"})

    def one(timeout: float = 10) -> Any:
        m = c.poll(timeout)
        assert m is None or m.error() is None, m.error()
        return m

    c.incremental_assign([TopicPartition("ia1", 0, OFFSET_BEGINNING)])
    m = one()
    assert (m.topic(), m.partition(), m.offset()) == ("ia1", 0, 0)
    c.commit(m, asynchronous=False)
    with pytest.raises(KafkaException) as exc:
        c.incremental_assign([TopicPartition("ia1", 0, OFFSET_BEGINNING)])
    assert exc.value.args[0].code() == KafkaError._CONFLICT
    c.incremental_assign([TopicPartition("ia2", 0, OFFSET_BEGINNING)])
    m = one()
    assert (m.topic(), m.offset()) == ("ia2", 0)
    c.incremental_unassign([TopicPartition("ia1", 0)])
    produce(bootstrap, "ia1", [b"ia1-1"], client=CFK)
    produce(bootstrap, "ia2", [b"ia2-1"], client=CFK)
    m = one()
    assert (m.topic(), m.offset(), m.value()) == ("ia2", 1, b"ia2-1")
    c.incremental_assign([TopicPartition("ia1", 0)])  # from the committed offset
    m = one()
    assert (m.topic(), m.offset()) == ("ia1", 1)
    assert one(1) is None
    c.incremental_unassign([TopicPartition("ia1", 0)])
    with pytest.raises(KafkaException) as exc:
        c.incremental_unassign([TopicPartition("ia1", 0)])
    assert exc.value.args[0].code() == KafkaError._INVALID_ARG
    c.unassign()
    c.close()


def heartbeats(broker) -> float:
    """ConsumerGroupHeartbeat requests the broker answered so far (its request metrics)."""
    return sample(scrape(broker.metrics_url), "kafka_network_requestmetrics_requests_total",
                  request="ConsumerGroupHeartbeat") or 0.0  # fmt: skip


def test_group_configs_altered_at_run_time_reach_the_members(broker_factory):
    """IncrementalAlterConfigs on the GROUP resource while the group runs (reference
    1.15): DescribeConfigs shows the values as GROUP_CONFIG; the member's heartbeats slow
    to the group's consumer.heartbeat.interval.ms (the broker's request count), and a
    member killed with SIGKILL is fenced after the group's consumer.session.timeout.ms,
    not the broker's 45 s."""
    broker = broker_factory({**FAST, **metrics_overrides(), "group.consumer.min.session.timeout.ms": "1000"})
    bootstrap, topic, group = broker.bootstrap, "cfg", "g-cfg"
    create_topic(bootstrap, topic, 6, client=CFK)
    owners = Owners()
    survivor = new_member(bootstrap, group)
    survivor.subscribe([topic], **owners.callbacks("s"))
    members, got = {"s": survivor}, {"s": []}
    poll_all(members, got, lambda: len(owners.of("s")) == 6)

    def heartbeats_while_polling(seconds: float) -> float:
        start, deadline = heartbeats(broker), time.monotonic() + seconds
        poll_all(members, got, lambda: time.monotonic() >= deadline)
        return heartbeats(broker) - start

    assert heartbeats_while_polling(2) >= 4  # every 200 ms
    interval_ms, session_ms = 2000, 4000
    set_group_config(bootstrap, group, {"consumer.heartbeat.interval.ms": str(interval_ms),
                                        "consumer.session.timeout.ms": str(session_ms)})  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    configs = future.result(10)
    for key, value in (("consumer.heartbeat.interval.ms", interval_ms), ("consumer.session.timeout.ms", session_ms)):
        assert configs[key].value == str(value) and configs[key].source == ConfigSource.GROUP_CONFIG.value
    # the next answer carries the new interval; from then on the member heartbeats at it
    mark = heartbeats(broker)
    poll_all(members, got, lambda: heartbeats(broker) >= mark + 2, timeout=10)
    assert heartbeats_while_polling(5) <= 4  # 2 or 3 at 2 s; 25 at the old 200 ms

    victim = MemberProcess(bootstrap, group, topic)
    try:
        poll_all(members, got, lambda: len(owners.of("s")) == 3 and victim.owned() == 3)
        killed_at = victim.kill()
        poll_all(members, got, lambda: len(owners.of("s")) == 6)
        took = time.monotonic() - killed_at
        assert session_ms / 1000 - 1 <= took < 30, took
    finally:
        victim.close()
        survivor.close()


def describe_raw(bootstrap: str, group: str) -> Any:
    """ConsumerGroupDescribe v0 of one group with the raw client: its epochs, and each
    member's epoch, assignment and target (what confluent-kafka's describe leaves out)."""
    with RawClient.connect(bootstrap) as c:
        (described,) = c.request(69, 0, {"group_ids": [group], "include_authorized_operations": False}).groups
    return described


def partitions_of(assignment: Any) -> set[tuple[str, int]]:
    return {(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions}


def test_broker_killed_mid_reconciliation_resumes_the_group(broker_factory):
    """kill -9 of the broker while a member must revoke partitions for a newcomer
    (reference 1.6: the owner keeps its epoch with partitions pending revocation, the
    newcomer waits for them). Restarted on the same directory, the broker resumes the
    group from its records: same group epoch, members and pending revocation, no new
    rebalance; the revocation then completes. No partition is ever owned by two members,
    every record is read at least once, committed offsets never go back."""
    broker = broker_factory(FAST)
    bootstrap, topic, group, partitions = broker.bootstrap, "recon", "g-recon", 6
    create_topic(bootstrap, topic, partitions, client=CFK)
    fill(bootstrap, topic, partitions, 20)
    owners = Owners()
    got: dict[str, list] = {"a": [], "b": []}
    a = new_member(bootstrap, group)
    a.subscribe([topic], **owners.callbacks("a"))
    poll_all({"a": a}, got, lambda: len(read_offsets(got)) >= 120)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    committed: list[list[int]] = []

    def check_committed(consumer: Consumer) -> None:
        offsets = [tp.offset for tp in consumer.committed(tps, timeout=10)]
        assert not committed or all(o >= was for o, was in zip(offsets, committed[-1], strict=True)), (
            offsets, committed[-1])  # fmt: skip
        committed.append(offsets)

    check_committed(a)
    b = new_member(bootstrap, group)
    b.subscribe([topic], **owners.callbacks("b"))
    ids = {a.memberid(): "a", b.memberid(): "b"}

    def pending_revocation() -> Any:
        """The group, once a keeps its epoch revoking what b waits for (a is not polled:
        its application has not revoked them yet)."""
        d = describe_raw(bootstrap, group)
        if d.error_code != 0 or len(d.members) != 2:
            return None
        m = {ids[x.member_id]: x for x in d.members}
        waiting = not partitions_of(m["b"].assignment) and len(partitions_of(m["b"].target_assignment)) == 3
        revoking = m["a"].member_epoch < d.group_epoch and len(partitions_of(m["a"].assignment)) == 3
        return d if d.group_state == "Reconciling" and waiting and revoking else None

    before = None

    def caught() -> bool:
        nonlocal before
        b.poll(0.1)  # b has nothing to read yet
        before = pending_revocation()
        return before is not None

    wait_until(caught, 30, step=lambda: None, what="a revoking the partitions b waits for")
    assert owners.of("a") == {(topic, p) for p in range(partitions)} and not owners.of("b")

    broker.kill()
    broker.start()

    def resumed() -> Any:
        try:
            d = describe_raw(bootstrap, group)
        except OSError:
            return None
        return d if d.error_code == 0 else None

    wait_until(resumed, 30, what="the coordinator loaded")
    after = resumed()
    check_committed(a)
    assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
        before.group_epoch, before.assignment_epoch, "Reconciling")  # fmt: skip
    assert {(m.member_id, m.member_epoch) for m in after.members} == {
        (m.member_id, m.member_epoch) for m in before.members}  # fmt: skip

    members = {"a": a, "b": b}
    poll_all(members, got, lambda: owners.balanced(members, partitions_of_topic(topic, partitions)))
    fill(bootstrap, topic, partitions, 10, seed=1)
    poll_all(members, got, lambda: set(read_offsets(got)) >= set(expected(topic, range(partitions), 30)))
    check_committed(a)
    final = describe_raw(bootstrap, group)
    assert final.group_epoch == before.group_epoch, "a rebalance Kafka would not have made"
    assert final.group_state == "Stable" and {m.member_id for m in final.members} == set(ids)
    a.close()
    b.close()
