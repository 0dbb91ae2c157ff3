"""A Hypothesis state machine over the KIP-848 coordinator: clients that behave as real
consumers (they report the partitions they really hold, give up revoked ones as soon as
an answer drops them, take new ones when given, rejoin after being fenced) join,
heartbeat, leave, leave for now (static), miss heartbeats long enough to expire, while
topics are created, grown and deleted, and the broker restarts.

After every step: no partition is held by two members in the coordinator (assigned or
pending revocation), and no two clients the coordinator still counts as members hold one
partition. At the end, clients that keep heartbeating converge: every member STABLE at
the assignment epoch, holding exactly its target, the group STABLE.

Thousands of heartbeats per run: ``__consumer_offsets`` is a list of the (key, value)
pairs the coordinator appends (encoded by the real codec, replayed through it at every
restart) and the topics an in-memory image, so the run is CPU only. The real log, the
fsync and the TopicStore are the other consumer group test modules' (tests/unit/
consumer_groups.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.fake_loop import clock_at
from tidegate.coordinator.group.group_metadata_manager import (
    PendingAppend,
    decode_coordinator_record,
    parse_key,
)
from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroupState
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
    ConsumerGroupManager,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.topics import TopicMetadata
from tidegate.errors import ErrorCode as E
from tidegate.server.timer import SystemTimer

G = "g"
TOPICS = ("t1", "t2", "t3", "t4")
CLIENTS = ("c1", "c2", "c3", "c4")
STATIC = "s"
SUBSCRIPTIONS = st.sampled_from([("names", ("t1",)), ("names", ("t1", "t2")),
                                 ("names", ("t2", "t3", "t4")), ("regex", "t[0-9]"),
                                 ("regex", "t[34]"), ("names", ())])
#: how long clients heartbeat at the end for the group to settle: a new regex is resolved
#: at most every 10 s (REGEX_BATCH_REFRESH_MIN_INTERVAL_MS), a rebalance may wait on
#: that, and a static member's old instance may have to expire first (45 s)
CONVERGE_MS = 90_000
#: errors after which a consumer drops its partitions and joins again
REJOIN = {E.fenced_member_epoch, E.unknown_member_id, E.fenced_instance_id}


class Topics:
    """A mutable in-memory metadata image (what the TopicStore offers the coordinator)."""

    def __init__(self) -> None:
        self.by_name: dict[str, TopicMetadata] = {}
        self.version = 0

    def get(self, name: str) -> TopicMetadata | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return next((t for t in self.by_name.values() if t.topic_id == topic_id), None)

    def topic_names(self) -> Iterable[str]:
        return list(self.by_name)

    def put(self, name: str, partitions: int) -> None:
        old = self.by_name.get(name)
        topic_id = old.topic_id if old is not None else uuid.uuid4()
        self.by_name[name] = TopicMetadata(topic_id, name, partitions)
        self.version += 1

    def delete(self, name: str) -> None:
        del self.by_name[name]
        self.version += 1


class NoClassicGroups:
    """The classic groups of these runs: none (the machine's log is in memory and holds
    only consumer group records; tests/unit/consumer_groups.py runs the real classic
    coordinator beside the manager)."""

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        return None

    def remove_empty_classic_group(self, group_id: str) -> None:
        raise AssertionError("no classic group to replace")

    def classic_group(self, group_id: str) -> None:
        return None

    def hand_over_classic_group(self, group_id: str) -> None:
        raise AssertionError("no classic group to upgrade")

    def adopt_downgraded_group(self, group: object) -> None:
        raise AssertionError("no classic member to downgrade to")


class Broker:
    """The coordinator over an in-memory log; :meth:`restart` replays it."""

    def __init__(self) -> None:
        self.clock = clock_at(1_000_000)
        self.topics = Topics()
        self.log: list[tuple[bytes, bytes | None]] = []
        self._build()

    def _build(self) -> None:
        self.timer = SystemTimer(clock=self.clock)
        self.manager = self._new_manager()
        for key, value in self.log:
            record = decode_coordinator_record(parse_key(key), value)
            assert record is not None
            self.manager.replay(record)
        self.manager.on_loaded()

    def _new_manager(self) -> Any:
        """The coordinator under test, on this broker's image, log and timer."""
        return ConsumerGroupManager(
            ConsumerGroupConfig(), image=self.topics, append=self._append, timer=self.timer,
            clock=self.clock, classic_groups=NoClassicGroups(),
        )  # fmt: skip

    def _append(self, records: Sequence[tuple[bytes, bytes | None]]) -> PendingAppend:
        pending = PendingAppend()
        pending.base_offset = len(self.log)
        self.log.extend(records)
        pending.complete(E.none)
        return pending

    def restart(self) -> None:
        self.manager.shutdown()
        self._build()

    def advance(self, ms: int, step: int = 500) -> None:
        end = self.clock.milliseconds() + ms
        while self.clock.milliseconds() < end:
            self.clock.set_milliseconds(min(end, self.clock.milliseconds() + step))
            self.timer.advance_clock()


@dataclass
class Client:
    name: str
    member_id: str = ""
    epoch: int = 0
    joined: bool = False
    owned: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    subscription: tuple = ("names", ("t1",))
    generation: int = 0

    @property
    def instance_id(self) -> str | None:
        return "instance-s" if self.name == STATIC else None

    def reset(self) -> None:
        self.joined, self.epoch, self.owned = False, 0, {}

    def reported(self) -> list[tuple[uuid.UUID, list[int]]]:
        return [(t, sorted(p)) for t, p in self.owned.items() if p]


class TopicChanges:
    """The rules of a group state machine that change the world around the group (its
    broker is ``self.b``): time passes, topics are created, grown and deleted."""

    b: Broker

    @rule(ms=st.integers(1_000, 50_000))
    def time_passes(self, ms):
        """Nobody heartbeats: sessions (45 s) and rebalance timeouts (20 s) may expire."""
        self.b.advance(ms, step=1000)

    @rule(topic=st.sampled_from(TOPICS), partitions=st.integers(1, 4))
    def create_or_grow_topic(self, topic, partitions):
        info = self.b.topics.get(topic)
        if info is None or partitions > info.partitions:
            self.b.topics.put(topic, partitions)

    @precondition(lambda self: len(self.b.topics.by_name) > 2)
    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic):
        if self.b.topics.get(topic) is not None:
            self.b.topics.delete(topic)


class ConsumerGroupMachine(TopicChanges, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = Broker()
        self.b.topics.put("t1", 3)
        self.b.topics.put("t2", 2)
        self.clients = {name: Client(name) for name in (*CLIENTS, STATIC)}

    def teardown(self) -> None:
        self._converge()

    # -- the client's side ---------------------------------------------------------------
    def _send(self, client: Client, epoch: int, full: bool) -> None:
        kind, what = client.subscription
        fields: dict = {"instance_id": client.instance_id}
        if full:
            fields["rebalance_timeout_ms"] = 20_000
            if kind == "names":
                fields["subscribed_topic_names"] = list(what)
            else:
                fields["subscribed_topic_regex"] = what
        fields["topic_partitions"] = [] if epoch == 0 else client.reported()
        answers: list = []
        request = ConsumerGroupHeartbeat(G, client.member_id, epoch, **fields)
        self.b.manager.consumer_group_heartbeat(request, answers.append)
        assert len(answers) == 1, "the in-memory log is durable at once"
        self._handle(client, answers[0], epoch)
        self.b.advance(500)

    def _handle(self, client: Client, r, sent_epoch: int) -> None:
        if r.error in REJOIN:
            client.reset()
            return
        if r.error is E.unreleased_instance_id:
            client.reset()  # the old instance must expire first
            return
        assert r.error is E.none, r
        if sent_epoch < 0:
            client.reset()
            return
        client.joined, client.epoch = True, r.member_epoch
        if r.assignment is not None:
            # revoke what is gone at once, take what is new
            client.owned = {t: set(p) for t, p in r.assignment.items()}

    def _join(self, client: Client) -> None:
        if client.name == STATIC or not client.member_id:
            client.generation += 1
            client.member_id = f"{client.name}-{client.generation}"
        self._send(client, 0, full=True)

    # -- rules --------------------------------------------------------------------------------
    @rule(name=st.sampled_from((*CLIENTS, STATIC)), subscription=SUBSCRIPTIONS)
    def join(self, name, subscription):
        client = self.clients[name]
        if client.joined:
            return
        client.subscription = subscription
        self._join(client)

    @rule(name=st.sampled_from((*CLIENTS, STATIC)), full=st.booleans())
    def heartbeat(self, name, full):
        client = self.clients[name]
        if client.joined:
            self._send(client, client.epoch, full)

    @rule(name=st.sampled_from((*CLIENTS, STATIC)), subscription=SUBSCRIPTIONS)
    def change_subscription(self, name, subscription):
        client = self.clients[name]
        if client.joined:
            client.subscription = subscription
            self._send(client, client.epoch, full=True)

    @rule(name=st.sampled_from((*CLIENTS, STATIC)), temporarily=st.booleans())
    def leave(self, name, temporarily):
        client = self.clients[name]
        if not client.joined:
            return
        epoch = -2 if temporarily and client.instance_id else -1
        self._send(client, epoch, full=False)

    @rule()
    def restart(self):
        before = self._state()
        self.b.restart()
        assert self._state() == before, "the replay rebuilt another group"

    # -- checks -------------------------------------------------------------------------------
    def _state(self):
        group = self.b.manager.groups.get(G)
        if group is None:
            return None
        return (group.group_epoch, group.assignment_epoch, dict(group.members),
                dict(group.target_assignment), dict(group.resolved_regular_expressions))

    @invariant()
    def no_partition_has_two_holders(self):
        group = self.b.manager.groups.get(G)
        if group is None:
            return
        held: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        assert (topic_id, p) not in held, (member.member_id, held[(topic_id, p)])
                        held[(topic_id, p)] = member.member_id
                        assert group.current_partition_epoch(topic_id, p) == member.member_epoch
        clients: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients.values():
            member = group.members.get(client.member_id)
            if not client.joined or member is None or member.member_epoch != client.epoch:
                continue  # a zombie: the coordinator fenced it, it does not know yet
            for topic_id, partitions in client.owned.items():
                for p in partitions:
                    assert (topic_id, p) not in clients, (client.name, clients[(topic_id, p)])
                    clients[(topic_id, p)] = client.name

    def _settled(self) -> bool:
        """Every client in the group as a member STABLE at the assignment epoch, holding
        its target, and every regex resolved against the topics as they are now (else a
        resolution to come may change the targets)."""
        clients = {c.member_id: c for c in self.clients.values() if c.member_id}
        if not all(c.joined for c in clients.values()):
            return False
        group = self.b.manager.groups.get(G)
        if group is None:
            return not clients
        if set(group.members) != set(clients) or group.state is not ConsumerGroupState.STABLE:
            return False
        for member in group.members.values():
            target = group.target_assignment.get(member.member_id, {})
            if member.assigned_partitions != target or clients[member.member_id].owned != {
                t: set(p) for t, p in target.items()
            }:
                return False
        resolved = group.resolved_regular_expressions
        return all(
            regex in resolved and resolved[regex].version == self.b.topics.version
            for regex in group.subscribed_regular_expressions
        )

    def _converge(self) -> None:
        """Everyone heartbeats (rejoining if fenced) until the group settles, within
        CONVERGE_MS of the fake clock."""
        deadline = self.b.clock.milliseconds() + CONVERGE_MS
        while True:
            for client in self.clients.values():
                if client.joined:
                    self._send(client, client.epoch, full=False)
                elif client.member_id:  # it was in the group: it comes back
                    self._join(client)
            if self._settled() or self.b.clock.milliseconds() >= deadline:
                break
        group = self.b.manager.groups.get(G)
        if group is None or not group.members:
            return
        assert group.state is ConsumerGroupState.STABLE, group
        for member in group.members.values():
            assert member.state is MemberState.STABLE
            assert member.member_epoch == group.assignment_epoch
            assert dict(member.assigned_partitions) == dict(group.target_assignment.get(member.member_id, {}))
        for client in self.clients.values():
            member = group.members.get(client.member_id)
            if client.joined and member is not None:
                assert client.owned == {t: set(p) for t, p in member.assigned_partitions.items()}


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase


def test_a_member_joins_with_an_unresolved_regex_when_a_target_is_due():
    """The state machine's first find, replayed: c1's regex resolves (a bump, its target
    due), c2 joins with a regex not resolved yet and computes that target; every
    partition must end with c1."""
    state = ConsumerGroupMachine()
    state.join(name="c1", subscription=("regex", "t[0-9]"))
    state.no_partition_has_two_holders()
    state.join(name="c2", subscription=("regex", "t[34]"))
    state.no_partition_has_two_holders()
    state.teardown()
    group = state.b.manager.groups[G]
    assert {len(p) for p in group.members["c1-1"].assigned_partitions.values()} == {3, 2}


def test_the_group_settles_after_a_regex_resolved_10_s_later():
    """c1's regex is resolved only 10 s after c2's (REGEX_BATCH_REFRESH_MIN_INTERVAL_MS),
    then t3 moves from c2 to c1: the clients heartbeat that long and more at the end."""
    state = ConsumerGroupMachine()
    state.create_or_grow_topic(partitions=1, topic="t3")
    state.delete_topic(topic="t1")
    state.time_passes(ms=3000)
    state.join(name="c2", subscription=("regex", "t[0-9]"))
    state.join(name="c1", subscription=("regex", "t[34]"))
    state.teardown()
    group = state.b.manager.groups[G]
    assert group.resolved_regular_expressions["t[34]"].topics == {"t3"}
    assert group.members["c1-1"].assigned_partitions == {state.b.topics.by_name["t3"].topic_id: {0}}


def test_a_member_leaves_a_shared_topic_for_a_regex_matching_nothing():
    """c2 trades its regex (t1, t2, shared with c1's names) for one not resolved yet and
    matching nothing when it is: its share of t1 and t2 must go to c1."""
    state = ConsumerGroupMachine()
    state.time_passes(ms=18_000)
    state.join(name="c2", subscription=("regex", "t[0-9]"))
    state.join(name="c1", subscription=("names", ("t1", "t2")))
    state.change_subscription(name="c2", subscription=("regex", "t[34]"))
    state.no_partition_has_two_holders()
    state.teardown()
    group = state.b.manager.groups[G]
    assert sum(len(p) for p in group.members["c1-1"].assigned_partitions.values()) == 5
