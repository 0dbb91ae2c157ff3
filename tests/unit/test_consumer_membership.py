"""The client's consumer-protocol member, sans IO (tidegate.client.consumer_membership):
the heartbeat fields Kafka's client sends (full on join and after errors, only changes
otherwise), the heartbeat timing on the fake clock, revoke-first reconciliation, fencing,
leaving and the fatal errors, with scripted ConsumerGroupHeartbeat responses; then members
driven against the broker's real consumer group coordinator (tests.unit.consumer_groups)
on the same fake clock, checking that no partition ever has two owners."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from tests.unit.consumer_groups import Harness
from tidegate.client.consumer_membership import ConsumerMembership, MemberState
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import ConsumerGroupHeartbeat
from tidegate.errors import BrokerResponseError
from tidegate.protocol.messages.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from tidegate.server.consumer_group_apis import heartbeat_response

FOO, BAR = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {FOO: "foo", BAR: "bar"}
MS = 1_000_000


def answer(epoch: int, assignment: dict[uuid.UUID, Sequence[int]] | None = None, *, member_id: str = "m1",
           interval: int = 3000, error: int = 0) -> ConsumerGroupHeartbeatResponse:  # fmt: skip
    return ConsumerGroupHeartbeatResponse(
        error_code=error, member_id=member_id if not error else None, member_epoch=epoch, heartbeat_interval=interval,
        assignment=None if assignment is None else Assignment(topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=t, partitions=list(ps))
            for t, ps in assignment.items()]),
    )  # fmt: skip


def owned_field(body: dict) -> dict[uuid.UUID, list[int]] | None:
    tps = body["topic_partitions"]
    return None if tps is None else {tp["topic_id"]: tp["partitions"] for tp in tps}


def member(**kw) -> ConsumerMembership:
    return ConsumerMembership("grp", ["foo", "bar"], "m1", **kw)


def joined(m: ConsumerMembership, epoch: int, assignment: dict[uuid.UUID, Sequence[int]], now: int = 0) -> None:
    """Join and reconcile ``assignment`` at ``epoch``, acknowledged."""
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(epoch, assignment), now)
    rec = m.reconcile(NAMES)
    assert rec is not None
    assert m.reconciled(rec, NAMES, now)
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(epoch), now)
    assert m.state is MemberState.STABLE


def test_the_join_heartbeat_carries_every_field_and_the_client_made_member_id():
    m = member(instance_id="i1", rack_id="r1", rebalance_timeout_ms=60_000, server_assignor="range")
    assert m.heartbeat_due(0)
    body = m.heartbeat_request(1)
    assert body == {
        "group_id": "grp", "member_id": "m1", "member_epoch": 0, "instance_id": "i1", "rack_id": "r1",
        "rebalance_timeout": 60_000, "subscribed_topic_names": ["bar", "foo"], "subscribed_topic_regex": "",
        "server_assignor": "range", "topic_partitions": [],
    }  # fmt: skip


def test_v0_joins_without_a_member_id_and_takes_the_coordinators():
    m = member()
    assert m.heartbeat_request(0)["member_id"] == ""
    m.on_heartbeat_response(answer(1, {}, member_id="given"), 0)
    assert m.member_id == "given"
    assert m.heartbeat_request(0)["member_id"] == "given"


def test_steady_heartbeats_carry_only_what_changed_at_the_coordinators_interval():
    m = member(instance_id="i1")
    joined(m, 1, {FOO: [0, 1]}, now=0)
    assert m.heartbeat_interval_ms == 3000
    assert not m.heartbeat_due(2999 * MS) and m.heartbeat_due(3000 * MS)
    assert m.time_to_next_heartbeat_ms(1000 * MS) == 2000
    body = m.heartbeat_request(1)
    assert body == {
        "group_id": "grp", "member_id": "m1", "member_epoch": 1, "instance_id": "i1", "rack_id": None,
        "rebalance_timeout": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": None,
    }  # fmt: skip
    m.on_heartbeat_response(answer(1, interval=500), 3000 * MS)
    assert m.heartbeat_due(3500 * MS) and not m.heartbeat_due(3499 * MS)


def test_a_new_assignment_is_reconciled_and_acknowledged_at_once():
    m = member()
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(1, {FOO: [0, 1], BAR: [2]}), 0)
    assert m.state is MemberState.RECONCILING
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.epoch == 1
    assert rec.added == (("bar", 2), ("foo", 0), ("foo", 1)) and rec.revoked == ()
    assert m.owned_partitions() == []  # owned once the caller took them
    assert m.reconciled(rec, NAMES, 10 * MS)
    assert m.state is MemberState.ACKNOWLEDGING and m.heartbeat_due(10 * MS)
    assert m.owned_partitions() == [("bar", 2), ("foo", 0), ("foo", 1)]
    assert owned_field(m.heartbeat_request(1)) == {FOO: [0, 1], BAR: [2]}
    m.on_heartbeat_response(answer(1), 10 * MS)
    assert m.state is MemberState.STABLE
    assert owned_field(m.heartbeat_request(1)) is None


def test_partitions_are_revoked_before_the_epoch_moves_and_the_rest_after():
    m = member()
    joined(m, 1, {FOO: [0, 1, 2]})
    # the coordinator keeps the member at epoch 1 until it stops reporting foo-2
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(1, {FOO: [0, 1]}), 0)
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.revoked == (("foo", 2),) and rec.added == ()
    assert m.reconciled(rec, NAMES, 0)
    assert owned_field(m.heartbeat_request(1)) == {FOO: [0, 1]}
    # then the next epoch, with bar-0 freed by another member
    m.on_heartbeat_response(answer(2, {FOO: [0, 1], BAR: [0]}), 0)
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.epoch == 2 and rec.revoked == () and rec.added == (("bar", 0),)
    assert m.reconciled(rec, NAMES, 0)
    assert owned_field(m.heartbeat_request(1)) == {FOO: [0, 1], BAR: [0]}


def test_a_new_epoch_with_the_same_partitions_is_acknowledged():
    m = member()
    joined(m, 1, {FOO: [0]})
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(2, {FOO: [0]}), 0)
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.revoked == rec.added == ()
    assert m.reconciled(rec, NAMES, 0)
    assert owned_field(m.heartbeat_request(1)) == {FOO: [0]}


def test_topic_ids_the_metadata_does_not_name_yet_wait():
    m = member()
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(1, {FOO: [0], BAR: [1]}), 0)
    only_foo = {FOO: "foo"}
    assert m.unresolved_topic_ids(only_foo) == {BAR}
    rec = m.reconcile(only_foo)
    assert rec is not None and rec.added == (("foo", 0),)
    assert m.reconciled(rec, only_foo, 0)
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(1), 0)
    assert m.state is MemberState.RECONCILING  # bar-1 is still to take
    assert m.reconcile(only_foo) is None
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.added == (("bar", 1),)


def test_an_assignment_changed_during_the_revocation_keeps_the_revocation_only():
    m = member()
    joined(m, 1, {FOO: [0, 1]})
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(2, {FOO: [0], BAR: [0]}), 0)
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.revoked == (("foo", 1),)
    # the revocation's commit sent a heartbeat that brought a newer assignment
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(3, {FOO: [0], BAR: [1]}), 0)
    assert not m.reconciled(rec, NAMES, 0)
    assert m.owned_partitions() == [("foo", 0)]
    rec = m.reconcile(NAMES)
    assert rec is not None and rec.epoch == 3 and rec.added == (("bar", 1),) and rec.revoked == ()


@pytest.mark.parametrize("error", [25, 110])  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
def test_a_fenced_member_loses_its_partitions_and_rejoins_at_epoch_0_under_its_id(error):
    m = member()
    joined(m, 4, {FOO: [0, 1]})
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(4, error=error), 5 * MS)
    assert m.state is MemberState.FENCED and not m.heartbeat_due(5 * MS)
    assert m.owned_partitions() == [("foo", 0), ("foo", 1)]  # what the caller reports lost
    m.rejoin(5 * MS)
    assert m.heartbeat_due(5 * MS) and m.owned_partitions() == []
    body = m.heartbeat_request(1)
    assert body["member_id"] == "m1" and body["member_epoch"] == 0
    assert body["topic_partitions"] == [] and body["subscribed_topic_names"] == ["bar", "foo"]
    assert body["rebalance_timeout"] == 300_000


@pytest.mark.parametrize("error", [14, 15, 16])  # LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
def test_after_a_coordinator_error_the_next_heartbeat_has_every_field_after_a_backoff(error):
    m = member(server_assignor="uniform")
    joined(m, 2, {FOO: [0]})
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(2, error=error), 0)
    assert not m.heartbeat_due(99 * MS) and m.heartbeat_due(100 * MS)
    body = m.heartbeat_request(1)
    assert body["member_epoch"] == 2  # still a member: only the fields are sent again
    assert body["subscribed_topic_names"] == ["bar", "foo"] and body["rebalance_timeout"] == 300_000
    assert body["server_assignor"] == "uniform" and owned_field(body) == {FOO: [0]}
    m.on_heartbeat_failure(100 * MS)  # no answer this time: the backoff doubles
    assert not m.heartbeat_due(299 * MS) and m.heartbeat_due(300 * MS)
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(2), 300 * MS)
    assert m.state is MemberState.STABLE and m.heartbeat_due(3300 * MS)


@pytest.mark.parametrize("error", [111, 112, 81, 30, 42, 82])
def test_errors_no_heartbeat_fixes_raise(error):
    m = member()
    m.heartbeat_request(1)
    with pytest.raises(BrokerResponseError) as info:
        m.on_heartbeat_response(answer(0, error=error), 0)
    assert info.value.code == error
    assert m.state is MemberState.FATAL and not m.heartbeat_due(10**12)


def test_leaving_is_epoch_minus_1_and_a_static_member_minus_2():
    m = member()
    joined(m, 3, {FOO: [0]})
    body = m.leave_request()
    assert body is not None and body["member_epoch"] == -1 and body["instance_id"] is None
    assert body["topic_partitions"] is None and body["subscribed_topic_names"] is None
    m.on_heartbeat_response(answer(-1), 0)  # a leave's answer changes nothing
    m.left()
    assert m.state is MemberState.UNSUBSCRIBED and m.owned_partitions() == [] and not m.heartbeat_due(10**12)
    assert m.leave_request() is None

    static = member(instance_id="i1")
    joined(static, 3, {FOO: [0]})
    body = static.leave_request()
    assert body is not None and body["member_epoch"] == -2 and body["instance_id"] == "i1"


def test_a_fenced_member_does_not_send_a_leave():
    m = member()
    joined(m, 3, {FOO: [0]})
    m.heartbeat_request(1)
    m.on_heartbeat_response(answer(3, error=110), 0)
    assert m.leave_request() is None


# -- against the broker's coordinator ------------------------------------------------------------


class Driven:
    """A membership whose heartbeats the harness's coordinator answers (as the broker's
    handler converts them), reconciled through a checker of who owns what."""

    def __init__(self, h: Harness, owners: dict[tuple[str, int], str], name: str, **kw) -> None:
        self.h, self.owners, self.name = h, owners, name
        self.m = ConsumerMembership("grp", ["foo"], f"id-{name}", rebalance_timeout_ms=5_000, **kw)
        self.callbacks: list[str] = []

    def names(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.h.topics.topics.items()}

    def send(self, body: dict) -> None:
        owned = body["topic_partitions"]
        request = ConsumerGroupHeartbeat(
            body["group_id"], body["member_id"], body["member_epoch"], instance_id=body["instance_id"],
            rack_id=body["rack_id"], rebalance_timeout_ms=body["rebalance_timeout"],
            subscribed_topic_names=body["subscribed_topic_names"],
            subscribed_topic_regex=body["subscribed_topic_regex"], server_assignor=body["server_assignor"],
            topic_partitions=None if owned is None else [(tp["topic_id"], tp["partitions"]) for tp in owned],
        )  # fmt: skip
        answers = self.h.send(request)
        self.h.loop.run_pending()
        (result,) = answers
        self.m.on_heartbeat_response(heartbeat_response(result), self.h.clock.nanoseconds())

    def poll(self) -> None:
        m, now = self.m, self.h.clock.nanoseconds()
        if m.state is MemberState.FENCED:
            self.release(m.owned_partitions(), "lost")
            m.rejoin(now)
        if m.heartbeat_due(now):
            self.send(m.heartbeat_request(1))
        rec = m.reconcile(self.names())
        if rec is not None:
            self.release(rec.revoked, "revoked")
            if m.reconciled(rec, self.names(), now):
                for tp in rec.added:
                    assert self.owners.get(tp, self.name) == self.name, f"{tp} given to {self.name}: {self.owners}"
                    self.owners[tp] = self.name
                self.callbacks += ["assigned"] if rec.added else []

    def release(self, partitions: Sequence[tuple[str, int]], why: str) -> None:
        for tp in partitions:
            if why == "lost" and self.owners.get(tp) != self.name:
                continue  # taken from a fenced member: another may own it already
            assert self.owners.pop(tp) == self.name
        self.callbacks += [why] if partitions else []


def run(h: Harness, members: Sequence[Driven], ms: int, step: int = 100) -> None:
    for _ in range(ms // step):
        for d in members:
            d.poll()
        h.advance(step, step)


def test_members_against_the_coordinator_split_the_partitions_without_two_owners(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 6)
    owners: dict[tuple[str, int], str] = {}
    a = Driven(h, owners, "a")
    run(h, [a], 1_000)
    assert a.m.owned_partitions() == [("foo", p) for p in range(6)]
    b, c = Driven(h, owners, "b"), Driven(h, owners, "c")
    run(h, [a, b, c], 30_000)
    assert sorted(len(d.m.owned_partitions()) for d in (a, b, c)) == [2, 2, 2]
    assert len(owners) == 6
    assert {d.m.member_epoch for d in (a, b, c)} == {h.group().group_epoch}
    # b leaves: its partitions go to the others once it said so
    body = b.m.leave_request()
    assert body is not None
    b.release(b.m.owned_partitions(), "revoked")
    b.send(body)
    b.m.left()
    run(h, [a, c], 30_000)
    assert sorted(len(d.m.owned_partitions()) for d in (a, c)) == [3, 3]
    assert h.group().state.value == "Stable"


def test_a_member_fenced_by_its_session_timeout_rejoins_with_nothing_owned(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 2)
    owners: dict[tuple[str, int], str] = {}
    a, b = Driven(h, owners, "a"), Driven(h, owners, "b")
    run(h, [a, b], 20_000)
    assert len(a.m.owned_partitions()) == len(b.m.owned_partitions()) == 1
    # b pauses past its session timeout: the coordinator removes it and a gets its partition
    for tp in b.m.owned_partitions():
        del owners[tp]
    run(h, [a], 50_000)
    assert a.m.owned_partitions() == [("foo", 0), ("foo", 1)]
    # b's next heartbeat is fenced: it loses what it had and joins again at epoch 0
    run(h, [b], 200)  # the fencing answer, then the loss and the join
    assert b.callbacks[-1] == "lost" and b.m.owned_partitions() == []
    run(h, [a, b], 20_000)
    assert len(a.m.owned_partitions()) == len(b.m.owned_partitions()) == 1


def test_a_static_member_coming_back_gets_its_partitions_without_a_rebalance(tmp_path):
    h = Harness(tmp_path)
    h.create_topic("foo", 4)
    owners: dict[tuple[str, int], str] = {}
    a = Driven(h, owners, "a")
    s = Driven(h, owners, "s", instance_id="static-1")
    run(h, [a, s], 20_000)
    mine = s.m.owned_partitions()
    assert len(mine) == 2
    epoch, seen_by_a = h.group().group_epoch, list(a.callbacks)
    body = s.m.leave_request()
    assert body is not None and body["member_epoch"] == -2
    s.release(mine, "revoked")
    s.send(body)
    s.m.left()
    run(h, [a], 5_000)  # within the session timeout: nothing moves
    back = Driven(h, owners, "s", instance_id="static-1")
    back.m.member_id = "id-s-again"  # a new process, a new member id
    run(h, [a, back], 5_000)
    assert back.m.owned_partitions() == mine
    assert h.group().group_epoch == epoch  # no rebalance
    assert a.callbacks == seen_by_a  # a saw nothing move
