"""tidegate's own client on KIP-848's consumer protocol (``group.protocol=consumer``)
against a real tidegate broker, side by side with confluent-kafka's consumer-protocol
members: the group member of ``tidegate console-consumer`` in this process (polled in
turn with the others by test_consumer_protocol's ``poll_all``, its ownership followed by
the same checker: never two owners of a partition), the console consumer as a process,
a static member restarting, a commit at a stale epoch, and ConsumerGroupHeartbeat v0.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from tidegate.cli.console import _ConsoleConsumer
from tidegate.client import KafkaClient
from tidegate.client.admin import create_partitions, find_group_coordinator, list_groups
from tidegate.client.group_member import ConsumerGroupMember
from tidegate.protocol.apis import ApiKey

from .clients import create_topic
from .test_consumer_protocol import (
    CFK,
    FAST,
    Owners,
    expected,
    fill,
    new_member,
    poll_all,
    read_offsets,
)

pytestmark = pytest.mark.timeout(180)


class _Message:
    def __init__(self, tp: tuple[str, int], offset: int) -> None:
        self._tp, self._offset = tp, offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._tp[0]

    def partition(self) -> int:
        return self._tp[1]

    def offset(self) -> int:
        return self._offset


class TidegateMember(_ConsoleConsumer):
    """The console consumer's group member and poll loop, here in the test process,
    answering poll_all as a confluent Consumer does; its rebalance callbacks go to the
    ownership checker too."""

    def __init__(self, bootstrap: str, group: str, topic: str, owners: Owners, name: str, **props: str) -> None:
        self.checker = owners.callbacks(name)
        super().__init__(bootstrap, {"group.protocol": "consumer", **props}, topic, None, None, None, "earliest",
                         group, 0)  # fmt: skip

    def on_partitions_revoked(self, partitions: list[tuple[str, int]]) -> None:
        super().on_partitions_revoked(partitions)
        self.checker["on_revoke"](self, [TopicPartition(*tp) for tp in partitions])

    def on_partitions_lost(self, partitions: list[tuple[str, int]]) -> None:
        super().on_partitions_lost(partitions)
        self.checker["on_lost"](self, [TopicPartition(*tp) for tp in partitions])

    def on_partitions_assigned(self, partitions: list[tuple[str, int]]) -> None:
        self.checker["on_assign"](self, [TopicPartition(*tp) for tp in partitions])
        super().on_partitions_assigned(partitions)

    # what poll_all calls
    def consume(self, n: int, timeout: float) -> list[_Message]:
        out: list[_Message] = []
        for tp, record in self.records(int(timeout * 1000)):
            out.append(_Message(tp, record.offset))
            if len(out) >= n:
                break
        return out

    def commit(self, asynchronous: bool = False) -> None:
        assert self.member is not None
        self.member.commit(self.offsets())

    def assignment(self) -> list[TopicPartition]:
        assert self.member is not None
        return [TopicPartition(*tp) for tp in self.member.assignment]


def group_type(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (description,) = [f.result() for f in admin.describe_consumer_groups([group]).values()]
    return description


def test_two_tidegate_members_and_a_confluent_one_share_a_group(broker_factory):
    broker = broker_factory(FAST)
    b = broker.bootstrap
    create_topic(b, "mixed", 6, client=CFK)
    fill(b, "mixed", 6, 20)
    owners = Owners()
    got: dict[str, list] = {"t1": [], "c": [], "t2": []}
    t1 = TidegateMember(b, "mixed-g", "mixed", owners, "t1")
    members: dict[str, Any] = {"t1": t1}
    poll_all(members, got, lambda: len(read_offsets(got)) >= 120)
    assert len(owners.of("t1")) == 6
    assert t1.member is not None and len(t1.member.member_id) == 22  # KIP-1082: a Uuid the client made

    c = new_member(b, "mixed-g")
    c.subscribe(["mixed"], **owners.callbacks("c"))
    members["c"] = c
    members["t2"] = TidegateMember(b, "mixed-g", "mixed", owners, "t2")
    poll_all(members, got, lambda: sorted(len(owners.of(n)) for n in members) == [2, 2, 2])
    fill(b, "mixed", 6, 20, seed=1)
    poll_all(members, got, lambda: len(read_offsets(got)) >= 240)
    description = group_type(b, "mixed-g")
    assert description.type == ConsumerGroupType.CONSUMER and len(description.members) == 3

    t2 = members.pop("t2")
    t2.close()  # commits what it read and leaves (epoch -1): its partitions move at once
    owners.owner = {tp: who for tp, who in owners.owner.items() if who != "t2"}
    fill(b, "mixed", 6, 10, seed=2)
    poll_all(members, got, lambda: len(read_offsets(got)) >= 300 and len(owners.owner) == 6)
    assert read_offsets(got) == sorted(expected("mixed", range(6), 20) + expected("mixed", range(6), 20, 20)
                                       + expected("mixed", range(6), 10, 40))  # fmt: skip
    assert got["t1"] and got["c"] and got["t2"]
    c.close()
    t1.close()


def console(bootstrap: str, topic: str, group: str, timeout_ms: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidegate", "console-consumer", "--bootstrap-server", bootstrap,
                             "--topic", topic, "--group", group, "--from-beginning", "--timeout-ms", str(timeout_ms),
                             "--consumer-property", "group.protocol=consumer", "--property", "print.value=false",
                             "--property", "print.partition=true", "--property", "print.offset=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def printed(topic: str, out: bytes) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of each record the console printed."""
    got = []
    for line in out.decode().splitlines():
        partition, offset = line.split("\t")
        got.append((topic, int(partition.removeprefix("Partition:")), int(offset.removeprefix("Offset:"))))
    return got


def once(c: Any, got: list) -> None:
    """One poll of a confluent member, committing what it read."""
    msgs = [m for m in c.consume(100, 0.1) if not m.error()]
    got += [(m.topic(), m.partition(), m.offset()) for m in msgs]
    if msgs:
        c.commit(asynchronous=False)


def test_console_consumer_on_the_consumer_protocol_commits_and_shares(broker_factory):
    b = broker_factory(FAST).bootstrap
    create_topic(b, "console-848", 2, client=CFK)
    fill(b, "console-848", 2, 3)
    out, err = console(b, "console-848", "cg", 3000).communicate(timeout=60)
    assert printed("console-848", out) == sorted(expected("console-848", range(2), 3)), err.decode()
    assert group_type(b, "cg").type == ConsumerGroupType.CONSUMER
    fill(b, "console-848", 2, 1, seed=1)
    out, err = console(b, "console-848", "cg", 3000).communicate(timeout=60)
    # only what came after the commits
    assert sorted(printed("console-848", out)) == expected("console-848", range(2), 1, 3), err.decode()

    # a confluent-kafka member and the console share the group's two partitions
    owners = Owners()
    other = new_member(b, "cg")
    other.subscribe(["console-848"], **owners.callbacks("c"))
    proc = console(b, "console-848", "cg", 15_000)
    got: dict[str, list] = {"c": []}
    try:
        deadline = time.monotonic() + 60
        while len(group_type(b, "cg").members) < 2 or len(owners.of("c")) != 1:
            assert time.monotonic() < deadline, "the console never joined beside the confluent member"
            once(other, got["c"])
        fill(b, "console-848", 2, 10, seed=2)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            once(other, got["c"])
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        other.close()
    from_console = printed("console-848", out)
    assert from_console and got["c"], err.decode()
    assert sorted(from_console + got["c"]) == expected("console-848", range(2), 10, 4)


def test_a_static_tidegate_member_restarting_gets_its_partitions_back(broker_factory):
    """A tidegate member with group.instance.id leaves with epoch -2 on close; a new one
    with that instance id (and a new member id) takes its place and partitions, and the
    other member's never move."""
    b = broker_factory(FAST).bootstrap
    create_topic(b, "static-848", 4, client=CFK)
    owners = Owners()
    got: dict[str, list] = {"a": [], "s": []}
    a = new_member(b, "sg")
    a.subscribe(["static-848"], **owners.callbacks("a"))
    s = TidegateMember(b, "sg", "static-848", owners, "s", **{"group.instance.id": "static-t"})
    members: dict[str, Any] = {"a": a, "s": s}
    poll_all(members, got, lambda: len(owners.of("a")) == 2 and len(owners.of("s")) == 2)
    kept, static_partitions = owners.of("a"), owners.of("s")
    assert s.member is not None
    first_id = s.member.member_id
    s.close()
    owners.owner = {tp: who for tp, who in owners.owner.items() if who != "s"}
    back = TidegateMember(b, "sg", "static-848", owners, "s", **{"group.instance.id": "static-t"})
    assert back.member is not None and back.member.member_id != first_id
    members["s"] = back
    poll_all(members, got, lambda: owners.of("s") == static_partitions)
    assert owners.of("a") == kept
    fill(b, "static-848", 4, 5)
    poll_all(members, got, lambda: len(read_offsets(got)) >= 20)
    assert read_offsets(got) == expected("static-848", range(4), 5)
    description = group_type(b, "sg")
    assert {m.group_instance_id for m in description.members} == {None, "static-t"}
    a.close()
    back.close()


class Recorder:
    """A RebalanceListener that keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []

    def on_partitions_revoked(self, partitions: list[tuple[str, int]]) -> None:
        self.calls.append(("revoked", partitions))

    def on_partitions_assigned(self, partitions: list[tuple[str, int]]) -> None:
        self.calls.append(("assigned", partitions))

    def on_partitions_lost(self, partitions: list[tuple[str, int]]) -> None:
        self.calls.append(("lost", partitions))


def poll_until(member: ConsumerGroupMember, listener: Recorder, done, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, (member.membership.state, member.assignment, listener.calls)
        member.poll(listener)
        time.sleep(0.02)


def test_a_commit_at_a_stale_epoch_learns_the_epoch_and_goes_again(broker_factory):
    """The answer to a heartbeat that moved the member to a new epoch is lost: its commit
    at the old epoch gets STALE_MEMBER_EPOCH, a heartbeat (every field, after the loss, so
    the coordinator takes the previous epoch) learns the new one and the commit is retried."""
    b = broker_factory(FAST).bootstrap
    create_topic(b, "stale", 1, client=CFK)
    with KafkaClient(b) as client:
        member, listener = ConsumerGroupMember(client, "stale-g", ["stale"]), Recorder()
        poll_until(member, listener, lambda: member.assignment == [("stale", 0)])
        epoch = member.member_epoch
        create_partitions(client, "stale", 2)  # the subscribed topics changed: a new group epoch
        node = find_group_coordinator(client, "stale-g")
        deadline = time.monotonic() + 30
        while True:  # heartbeats whose answers are "lost"
            resp = client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, member.membership.heartbeat_request(1),
                                  node_id=node)  # fmt: skip
            member.membership.on_heartbeat_failure(client.clock.nanoseconds())
            if resp.member_epoch > epoch:
                break
            assert time.monotonic() < deadline, "the coordinator never bumped the member's epoch"
            time.sleep(0.2)
        assert member.member_epoch == epoch
        member.commit({("stale", 0): 1})
        assert member.member_epoch == resp.member_epoch
        assert member.committed([("stale", 0)]) == {("stale", 0): 1}
        poll_until(member, listener, lambda: member.assignment == [("stale", 0), ("stale", 1)])
        member.leave()


def test_a_member_on_consumer_group_heartbeat_v0_is_named_by_the_coordinator(broker_factory):
    b = broker_factory(FAST).bootstrap
    create_topic(b, "v0", 2, client=CFK)
    with KafkaClient(b) as client:
        member, listener = ConsumerGroupMember(client, "v0-g", ["v0"]), Recorder()
        member.HEARTBEAT_MAX_VERSION = 0
        own_id = member.member_id
        poll_until(member, listener, lambda: len(member.assignment) == 2)
        assert member.member_id != own_id and member.member_epoch > 0
        assert listener.calls == [("assigned", [("v0", 0), ("v0", 1)])]
        member.commit({("v0", 1): 7})
        assert member.committed([("v0", 1)]) == {("v0", 1): 7}
        member.leave()
        assert {g.group_id: g.state for g in list_groups(client)}["v0-g"] == "Empty"
