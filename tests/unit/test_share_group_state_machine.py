"""A Hypothesis state machine over the KIP-932 coordinator: share consumers join,
heartbeat, change their subscriptions, leave, stop heartbeating long enough to expire and
rejoin when fenced, while topics are created, grown, deleted and created again, the
persister answers at once, later (holding its calls) or with an error, and the broker
restarts (an initialization in flight is lost with it).

After every step, for every member: each partition it is assigned (and each in its
target) of a topic that exists is initialized, and of a topic it subscribes to. At the
end, with the persister answering again and the clients heartbeating: every member STABLE
at the assignment epoch, holding its target; every partition of a subscribed topic
initialized and held by someone; no partition of topic t held by more than
ceil(M_t / P_t) members (M_t members subscribe to t, P_t partitions it has; the simple
assignor's sharing bound, reference 2.3).

The log is a list of the (key, value) pairs the coordinator appends (encoded by the real
codec, replayed through it at every restart) and the topics an in-memory image, as in the
consumer group state machine, whose broker and topic rules (time passing, topics
created, grown and deleted) this one takes.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.unit.share_groups import HeldPersister
from tests.unit.test_consumer_group_state_machine import TOPICS, Broker, TopicChanges
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.share.share_group import ShareGroup, ShareGroupState
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupConfig,
    ShareGroupHeartbeat,
    ShareGroupManager,
)
from tidegate.errors import ErrorCode as E

G = "g"
CLIENTS = ("c1", "c2", "c3", "c4", "c5")
SUBSCRIPTIONS = st.sampled_from([("t1",), ("t1", "t2"), ("t2", "t3", "t4"), ("t3",), TOPICS])
#: how long the clients heartbeat at the end: a lost initialization is retried after 30 s
CONVERGE_MS = 60_000
#: errors after which a share consumer joins again
REJOIN = {E.fenced_member_epoch, E.unknown_member_id, E.group_id_not_found}


class ShareBroker(Broker):
    """The consumer group state machine's broker with a share group coordinator."""

    def __init__(self) -> None:
        self.persister = HeldPersister()
        super().__init__()

    def _new_manager(self) -> ShareGroupManager:
        self.persister.image = self.topics
        return ShareGroupManager(
            ShareGroupConfig(), image=self.topics, append=self._append, timer=self.timer,
            clock=self.clock, persister=self.persister,
        )  # fmt: skip

    def restart(self) -> None:
        self.persister.forget_held()  # the calls in flight die with the broker
        super().restart()


@dataclass
class Client:
    name: str
    member_id: str = ""
    epoch: int = 0
    joined: bool = False
    subscription: tuple[str, ...] = ("t1",)
    assignment: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    generation: int = 0

    def reset(self) -> None:
        self.joined, self.epoch, self.assignment = False, 0, {}


class ShareGroupMachine(TopicChanges, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = ShareBroker()
        self.b.topics.put("t1", 3)
        self.b.topics.put("t2", 2)
        self.clients = {name: Client(name) for name in CLIENTS}

    def teardown(self) -> None:
        self._converge()

    @property
    def manager(self) -> ShareGroupManager:
        manager: ShareGroupManager = self.b.manager
        return manager

    # -- the client's side ---------------------------------------------------------------
    def _send(self, client: Client, epoch: int, names: tuple[str, ...] | None = None) -> None:
        answers: list = []
        request = ShareGroupHeartbeat(
            G, client.member_id, epoch, subscribed_topic_names=None if names is None else list(names)
        )
        self.manager.share_group_heartbeat(request, answers.append)
        assert len(answers) == 1, "the in-memory log is durable at once"
        r = answers[0]
        if r.error in REJOIN:
            client.reset()
        elif epoch == -1:
            assert r.error is E.none, r
            client.reset()
        else:
            assert r.error is E.none, r
            client.joined, client.epoch = True, r.member_epoch
            if r.assignment is not None:
                client.assignment = dict(r.assignment)
        self.b.advance(500)

    def _join(self, client: Client) -> None:
        if not client.member_id:
            client.generation += 1
            client.member_id = f"{client.name}-{client.generation}"
        self._send(client, 0, client.subscription)

    # -- rules --------------------------------------------------------------------------------
    @rule(name=st.sampled_from(CLIENTS), subscription=SUBSCRIPTIONS)
    def join(self, name, subscription):
        client = self.clients[name]
        if not client.joined:
            client.subscription = subscription
            self._join(client)

    @rule(name=st.sampled_from(CLIENTS))
    def heartbeat(self, name):
        client = self.clients[name]
        if client.joined:
            self._send(client, client.epoch)

    @rule(name=st.sampled_from(CLIENTS), subscription=SUBSCRIPTIONS)
    def change_subscription(self, name, subscription):
        client = self.clients[name]
        if client.joined:
            client.subscription = subscription
            self._send(client, client.epoch, subscription)

    @rule(name=st.sampled_from(CLIENTS))
    def leave(self, name):
        client = self.clients[name]
        if client.joined:
            self._send(client, -1)

    @rule(hold=st.booleans())
    def persister_answers_later(self, hold):
        self.b.persister.hold = hold

    @rule()
    def persister_answers_held_calls(self):
        self.b.persister.release()

    @rule(fail=st.sampled_from([None, E.coordinator_not_available]))
    def persister_fails(self, fail):
        self.b.persister.fail = fail

    @rule()
    def restart(self):
        before = self._state()
        self.b.restart()
        assert self._state() == before, "the replay rebuilt another group"

    # -- checks -------------------------------------------------------------------------------
    def _group(self) -> ShareGroup | None:
        group: ShareGroup | None = self.manager.groups.get(G)
        return group

    def _state(self):
        """The group as its records make it; share-partitions of topics deleted meanwhile
        left out (a coordinator that starts cleans them up)."""
        group = self._group()
        if group is None:
            return None

        def existing(topics):
            return {t: v for t, v in topics.items() if self.b.topics.get_by_id(t) is not None}

        return (group.group_epoch, group.assignment_epoch, dict(group.members),
                dict(group.target_assignment), existing(group.initialized_partitions()),
                existing({t: v.partitions for t, v in group.initializing_topics.items()}),
                existing(group.deleting_topics))  # fmt: skip

    @invariant()
    def assigned_partitions_are_initialized_and_subscribed(self):
        group = self._group()
        if group is None:
            return
        initialized = group.initialized_partitions()
        for member in group.members.values():
            target = group.target_assignment.get(member.member_id, {})
            for assignment in (member.assigned_partitions, target):
                for topic_id, partitions in assignment.items():
                    topic = self.b.topics.get_by_id(topic_id)
                    if topic is None:
                        continue  # deleted: it leaves at the member's next heartbeat
                    assert topic.name in member.subscribed_topic_names, (member, topic)
                    assert partitions <= initialized.get(topic_id, frozenset()), (member, initialized)

    def _settled(self) -> bool:
        group = self._group()
        joined = {c.member_id for c in self.clients.values() if c.joined}
        if group is None or not group.members:
            return not joined
        if set(group.members) != joined or group.group_epoch != group.assignment_epoch:
            return False
        if self.manager._initialized_assignment_pending(group):
            return False
        for member in group.members.values():
            if not member.is_reconciled_to(group.assignment_epoch):
                return False
            for name in member.subscribed_topic_names:
                topic = self.b.topics.get(name)
                done = None if topic is None else group.initialized_topics.get(topic.topic_id)
                if topic is not None and (done is None or len(done.partitions) < topic.partitions):
                    return False
        return True

    def _converge(self) -> None:
        """The persister answers again; everyone heartbeats (rejoining if fenced) until
        the group settles, within CONVERGE_MS of the fake clock."""
        self.b.persister.hold, self.b.persister.fail = False, None
        self.b.persister.release()
        deadline = self.b.clock.milliseconds() + CONVERGE_MS
        while True:
            for client in self.clients.values():
                if client.joined:
                    self._send(client, client.epoch)
                elif client.member_id:  # it was in the group: it comes back
                    self._join(client)
            if self._settled() or self.b.clock.milliseconds() >= deadline:
                break
        assert self._settled(), self._group()
        group = self._group()
        if group is None or not group.members:
            return
        self.assigned_partitions_are_initialized_and_subscribed()
        self._check_settled_assignment(group)

    def _check_settled_assignment(self, group: ShareGroup) -> None:
        assert group.state is ShareGroupState.STABLE
        holders: dict[tuple[uuid.UUID, int], int] = {}
        for member in group.members.values():
            assert member.state is MemberState.STABLE
            assert dict(member.assigned_partitions) == dict(group.target_assignment.get(member.member_id, {}))
            client = next(c for c in self.clients.values() if c.member_id == member.member_id)
            assert client.assignment == dict(member.assigned_partitions)
            for topic_id, partitions in member.assigned_partitions.items():
                for p in partitions:
                    holders[(topic_id, p)] = holders.get((topic_id, p), 0) + 1
        for name in {n for m in group.members.values() for n in m.subscribed_topic_names}:
            topic = self.b.topics.get(name)
            if topic is None:
                continue
            subscribers = sum(1 for m in group.members.values() if name in m.subscribed_topic_names)
            bound = math.ceil(subscribers / topic.partitions)
            for p in range(topic.partitions):
                assert 1 <= holders.get((topic.topic_id, p), 0) <= bound, (name, p, holders, bound)


ShareGroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestShareGroupMachine = ShareGroupMachine.TestCase
