"""The classic group protocol state machine, sans-IO, on a fake clock.

The coordinator runs on real purgatories (timing wheels) whose timers read the
fake clock; ``Harness.advance`` moves it and expires what is due, so session,
rebalance and sync timeouts are exercised without sleeping. Offsets and group
metadata go to a real ``__consumer_offsets`` Log in ``tmp_path`` where a test
needs durability.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest

from tests.fake_loop import FakeLoop, clock_at
from tests.unit.logs import crash_all
from tidegate.clock import MockClock
from tidegate.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from tidegate.coordinator.group.group_metadata import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    SyncResult,
    subscribed_topics_of,
)
from tidegate.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    OffsetsLog,
    iter_records,
)
from tidegate.errors import ErrorCode as E
from tidegate.log.cleaner import Cleaner
from tidegate.log.config import LogConfig
from tidegate.log.log import Log
from tidegate.log.log_cleaner_manager import LogToClean
from tidegate.protocol.messages.describe_groups import DescribedGroup
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.timer import SystemTimer

T0 = 1_700_000_000_000
SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


RANGE = [("range", subscription("t"))]


class Reply:
    """A JoinGroup/SyncGroup callback: remembers the one result it gets."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, result) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def result(self):
        assert len(self.results) == 1, self.results
        return self.results[0]


def _truncate(path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


class Harness:
    def __init__(self, tmp_path=None, **config) -> None:
        self.clock = clock_at(0)
        if tmp_path is None:
            # the real graph always: a directory of its own when the test has none
            self._tmp = tempfile.TemporaryDirectory()
            tmp_path = Path(self._tmp.name)
        self.tmp_path = tmp_path
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.config = GroupConfig(**config)
        self._build()

    def _build(self) -> None:
        """The coordinator over the broker's real LogManager and ReplicaManager, on fake
        time: commits are appended through append_records and fsynced when the fake
        scheduler runs."""
        self.loop = FakeLoop(self.clock)
        self.heartbeat = DelayedOperationPurgatory("Heartbeat", SystemTimer(clock=self.clock))
        self.rebalance = DelayedOperationPurgatory("Rebalance", SystemTimer(clock=self.clock))
        self.logs = LogManager(
            self.tmp_path, TopicStore(self.tmp_path), lambda info: LogConfig(retention_ms=-1), self.clock,
            self.loop,
        )
        self.logs.load()
        self.replicas = ReplicaManager(self.logs, self.loop, clock=self.clock, fetch_sessions=FetchSessionCache(1000))
        self.store = OffsetsLog(self._open, self.clock, append_records=self.replicas.append_records)
        self.coord = GroupCoordinator(self.config, self.heartbeat, self.rebalance, self.store, self.clock)
        self.store.load(self.coord.replay_batch)
        self.coord.on_loaded()

    def _open(self, create: bool) -> Log | None:
        plog = self.logs.get_log(OFFSETS_TOPIC, 0)
        if plog is None and create:
            self.logs.create_topic(OFFSETS_TOPIC, 1, {})
            plog = self.logs.get_log(OFFSETS_TOPIC, 0)
        return plog

    @property
    def log(self) -> Log:
        plog = self.logs.get_log(OFFSETS_TOPIC, 0) if self.logs is not None else None
        assert plog is not None
        return plog

    def restart(self, *, crash: bool = False, before=None) -> Harness:
        """A new coordinator over the same data directory: after a clean close, or after
        a kill -9 (``crash``: the logs dropped without flush, snapshot or clean-shutdown
        marker; Log recovery keeps every whole batch)."""
        assert self.logs is not None
        if crash:
            crash_all(self.logs)
        else:
            self.logs.close()
        if before is not None:
            before()  # change the files between the two lives
        h = Harness.__new__(Harness)
        h.clock = clock_at(self.clock.milliseconds())
        h.tmp_path = self.tmp_path
        h.config = self.config
        h._build()
        return h

    def advance(self, ms: int) -> None:
        """Move the clock in 100 ms steps, expiring what is due at each."""
        end = self.clock.milliseconds() + ms
        while self.clock.milliseconds() < end:
            self.clock.set_milliseconds(min(end, self.clock.milliseconds() + 100))
            self.heartbeat.advance_clock()
            self.rebalance.advance_clock()

    # -- requests -----------------------------------------------------------------------
    def join(self, group="g", member_id="", instance=None, protocols=RANGE, *, session=SESSION,
             rebalance=REBALANCE, version=9, protocol_type="consumer", client="client") -> Reply:
        reply = Reply()
        self.coord.handle_join_group(
            group, member_id, instance, version >= 4, version >= 9, client, "/127.0.0.1",
            rebalance, session, protocol_type, list(protocols), reply,
        )
        return reply

    def sync(self, group, member_id, generation, assignments=None, instance=None) -> Reply:
        reply = Reply()
        self.coord.handle_sync_group(
            group, generation, member_id, None, None, instance, dict(assignments or {}), reply
        )
        return reply

    def heartbeat_(self, group, member_id, generation, instance=None):
        return self.coord.handle_heartbeat(group, member_id, instance, generation)

    def new_member(self, group="g", instance=None, **kw) -> Reply:
        """JoinGroup as a v4+ dynamic client does it: MEMBER_ID_REQUIRED, then again."""
        if instance is None:
            first = self.join(group, **kw)
            assert first.result.error is E.member_id_required
            return self.join(group, first.result.member_id, **kw)
        return self.join(group, instance=instance, **kw)

    def stable_group(self, n: int, group="g", instances=None) -> list[str]:
        """n members through join and sync: returns their member ids (leader first)."""
        ids: list[str] = []
        for i in range(n):
            instance = instances[i] if instances else None
            reply = self.new_member(group, instance)
            pending = [reply]
            # earlier members learn about the rebalance and rejoin
            for mid in ids:
                assert self.heartbeat_(group, mid, self.group(group).generation_id) is E.rebalance_in_progress
                pending.append(self.join(group, mid, instances[ids.index(mid)] if instances else None))
            assert all(r.done for r in pending), "the join phase should complete once all rejoined"
            results = [r.result for r in pending]
            ids = [results[0].member_id] + ids if not ids else ids + [results[0].member_id]
            generation = results[0].generation_id
            leader = results[0].leader_id
            syncs = {}
            for r in results:
                assert r.error is E.none
                assert r.generation_id == generation
                if r.member_id == leader:
                    assignment = {m[0]: f"assign-{m[0]}".encode() for m in r.members}
                else:
                    assignment = {}
                syncs[r.member_id] = (assignment, instances[ids.index(r.member_id)] if instances else None)
            replies = [
                self.sync(group, mid, generation, a, inst)
                for mid, (a, inst) in sorted(syncs.items(), key=lambda kv: kv[0] == leader)
            ]
            assert all(r.done and r.result.error is E.none for r in replies)
        assert self.group(group).state is STABLE
        return ids

    def group(self, group="g"):
        return self.coord.groups[group]


@pytest.fixture
def h() -> Harness:
    return Harness()


# ------------------------------------------------------------------------------------------
# join, sync, heartbeat
# ------------------------------------------------------------------------------------------
def test_first_member_needs_an_id_then_leads_generation_one(h):
    first = h.join()
    assert first.result.error is E.member_id_required
    member_id = first.result.member_id
    assert member_id.startswith("client-")
    assert h.group().pending_members == {member_id}

    joined = h.join("g", member_id).result
    assert joined.error is E.none
    assert (joined.generation_id, joined.leader_id, joined.member_id) == (1, member_id, member_id)
    assert joined.protocol_type == "consumer" and joined.protocol_name == "range"
    assert joined.members == [(member_id, None, RANGE[0][1])]
    assert h.group().state is COMPLETING_REBALANCE

    synced = h.sync("g", member_id, 1, {member_id: b"all"}).result
    assert synced == SyncResult(E.none, "consumer", "range", b"all")
    assert h.group().state is STABLE
    assert h.heartbeat_("g", member_id, 1) is E.none


def test_old_join_versions_skip_member_id_required(h):
    r = h.join(version=3).result
    assert r.error is E.none and r.generation_id == 1 and r.leader_id == r.member_id


def test_a_join_rebalances_and_followers_wait_for_the_leaders_sync(h):
    (a,) = h.stable_group(1)
    b_join = h.new_member()
    assert not b_join.done, "B waits for A to rejoin"
    assert h.group().state is PREPARING_REBALANCE
    assert h.heartbeat_("g", a, 1) is E.rebalance_in_progress
    assert h.sync("g", a, 1).result.error is E.rebalance_in_progress
    a_join = h.join("g", a)
    ra, rb = a_join.result, b_join.result
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader_id == rb.leader_id == a
    assert {m[0] for m in ra.members} == {a, rb.member_id} and rb.members == []
    b = rb.member_id

    follower = h.sync("g", b, 2)
    assert not follower.done, "the follower's SyncGroup parks until the leader's arrives"
    assert h.heartbeat_("g", b, 2) is E.none  # heartbeats are fine while completing
    leader = h.sync("g", a, 2, {a: b"pa", b: b"pb"})
    assert leader.result.assignment == b"pa" and follower.result.assignment == b"pb"
    assert h.group().state is STABLE
    # a stable group answers a late SyncGroup with the current assignment
    assert h.sync("g", b, 2).result.assignment == b"pb"
    assert h.coord.rebalances_completed == 2


def test_a_follower_rejoining_with_the_same_metadata_does_not_rebalance(h):
    a, b = h.stable_group(2)
    r = h.join("g", b).result
    assert r.error is E.none and r.generation_id == 2 and r.members == []
    assert h.group().state is STABLE
    # the leader rejoining does force one (it may have seen new topic metadata)
    assert not h.join("g", a).done
    assert h.group().state is PREPARING_REBALANCE


def test_leave_group_rebalances_the_rest(h):
    a, b = h.stable_group(2)
    error, members = h.coord.handle_leave_group("g", [(b, None, "bye")])
    assert error is E.none and members == [(b, None, E.none)]
    assert h.group().state is PREPARING_REBALANCE
    assert h.heartbeat_("g", a, 2) is E.rebalance_in_progress
    r = h.join("g", a).result
    assert r.generation_id == 3 and [m[0] for m in r.members] == [a]
    # leaving twice, or an unknown member
    _, members = h.coord.handle_leave_group("g", [(b, None, None), ("nobody", None, None)])
    assert [m[2] for m in members] == [E.unknown_member_id, E.unknown_member_id]


def test_last_member_leaving_empties_the_group(h):
    (a,) = h.stable_group(1)
    h.coord.handle_leave_group("g", [(a, None, None)])
    assert h.group().state is EMPTY
    assert h.group().generation_id == 2
    assert h.heartbeat_("g", a, 2) is E.unknown_member_id


# ------------------------------------------------------------------------------------------
# timeouts
# ------------------------------------------------------------------------------------------
def test_session_expiry_removes_a_silent_member_and_rebalances(h):
    a, b = h.stable_group(2)
    for _ in range(int(SESSION * 1.5) // 2000):  # A heartbeats every 2 s, B never
        h.advance(2000)
        if h.group().state is STABLE:
            assert h.heartbeat_("g", a, 2) is E.none
    assert b not in h.group().members
    assert h.group().state is PREPARING_REBALANCE
    assert h.heartbeat_("g", a, 2) is E.rebalance_in_progress
    r = h.join("g", a).result
    assert r.generation_id == 3 and [m[0] for m in r.members] == [a]


def test_session_expiry_timing(h):
    (a,) = h.stable_group(1)
    h.advance(SESSION - 200)
    assert a in h.group().members
    h.advance(400)
    assert a not in h.group().members
    assert h.group().state is EMPTY  # the join phase completes at once with nobody


def test_rebalance_timeout_kicks_members_that_do_not_rejoin(h):
    a, b = h.stable_group(2)
    c_join = h.new_member()
    a_join = h.join("g", a)
    assert not c_join.done and not a_join.done
    # B keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    for _ in range(REBALANCE // 2000 - 1):
        h.advance(2000)
        assert h.heartbeat_("g", b, 2) is E.rebalance_in_progress
    assert not a_join.done
    h.advance(2500)
    ra, rc = a_join.result, c_join.result
    assert ra.generation_id == rc.generation_id == 3
    assert {m[0] for m in ra.members} == {a, rc.member_id}
    assert b not in h.group().members
    assert h.heartbeat_("g", b, 3) is E.unknown_member_id


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(h):
    a, b = h.stable_group(2)
    h.coord.handle_leave_group("g", [(b, None, None)])
    c_join = h.new_member(session=60_000)  # its session outlasts the rebalance timeout
    a_join = h.join("g", a)
    c = c_join.result.member_id
    assert a_join.result.generation_id == 3
    leader_sync = h.sync("g", a, 3, {a: b"x", c: b"y"})
    assert leader_sync.result.error is E.none
    assert h.group().state is STABLE
    # C never sends SyncGroup; A heartbeats
    for _ in range(REBALANCE // 2000 - 1):
        h.advance(2000)
        assert h.heartbeat_("g", a, 3) is E.none
    assert c in h.group().members
    h.advance(2500)
    assert c not in h.group().members
    assert h.group().state is PREPARING_REBALANCE
    assert h.heartbeat_("g", a, 3) is E.rebalance_in_progress


def test_a_leader_that_never_syncs_sends_parked_followers_back_to_join(h):
    a, b = h.stable_group(2)
    assert not h.join("g", a).done
    assert h.join("g", b).done  # both rejoined: generation 3
    follower = h.sync("g", b, 3)
    h.advance(REBALANCE + 500)
    assert follower.result.error is E.rebalance_in_progress
    assert a not in h.group().members


def test_initial_rebalance_delay_waits_for_more_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.new_member()
    assert not a.done
    h.advance(2000)
    b = h.new_member()  # a member joined during the delay: another 3 s when it ends
    h.advance(3500)
    assert not a.done and not b.done
    h.advance(600)  # 3 s + 3 s after the first join
    assert a.result.generation_id == b.result.generation_id == 1
    assert len(a.result.members) + len(b.result.members) == 2


def test_a_pending_member_that_never_rejoins_expires(h):
    first = h.join()
    pending = first.result.member_id
    assert h.group().pending_members == {pending}
    h.advance(SESSION + 200)
    assert h.group().pending_members == set()
    assert h.join("g", pending).result.error is E.unknown_member_id


def test_heartbeats_keep_one_timer_entry_per_member():
    h = Harness()
    n = 2000
    ids = [h.join(f"g{i}", version=3).result.member_id for i in range(n)]
    assert h.heartbeat.delayed == n  # one DelayedHeartbeat per member on the one wheel
    for _ in range(3):
        for i, mid in enumerate(ids):
            assert h.heartbeat_(f"g{i}", mid, 1) is E.none
        h.advance(1000)
    assert h.heartbeat.delayed == n
    assert h.heartbeat.watched == n  # completed ones are dropped from the watcher lists


# ------------------------------------------------------------------------------------------
# static membership
# ------------------------------------------------------------------------------------------
def test_static_member_rejoin_keeps_the_generation_and_fences_the_old_id(h):
    a, b = h.stable_group(2, instances=["ia", "ib"])
    assert a.startswith("ia-") and b.startswith("ib-")
    before = h.coord.rebalances_completed
    # B restarts: a JoinGroup with no member id but its instance id
    r = h.join("g", "", "ib").result
    assert r.error is E.none and r.generation_id == 2
    new_b = r.member_id
    assert new_b != b and new_b.startswith("ib-")
    assert r.leader_id == a and r.skip_assignment is False and r.members == []
    assert h.group().state is STABLE and h.coord.rebalances_completed == before
    assert h.heartbeat_("g", a, 2) is E.none  # A sees no rebalance
    assert h.sync("g", new_b, 2, instance="ib").result.assignment == f"assign-{b}".encode()
    # the old incarnation is fenced
    assert h.heartbeat_("g", b, 2, "ib") is E.fenced_instance_id
    assert h.sync("g", b, 2, instance="ib").result.error is E.fenced_instance_id


def test_static_leader_rejoin_v9_skips_assignment(h):
    _a, b = h.stable_group(2, instances=["ia", "ib"])
    r = h.join("g", "", "ia").result
    assert r.error is E.none and r.skip_assignment is True and r.leader_id == r.member_id
    assert {m[0] for m in r.members} == {r.member_id, b}
    assert h.group().state is STABLE
    # before v9 the old leader id is returned, so the member does not assign
    r8 = h.join("g", "", "ia", version=8).result
    assert r8.leader_id == r.member_id and r8.member_id != r.member_id and not r8.skip_assignment


def test_static_member_with_a_different_protocol_rebalances(h):
    h.stable_group(2, instances=["ia", "ib"])
    both = [("roundrobin", subscription("t")), ("range", subscription("t"))]
    r = h.join("g", "", "ib", protocols=both)
    # range is still the only protocol both support: no rebalance
    assert r.done and h.group().state is STABLE
    # now both prefer roundrobin: the selected protocol changes, so the group rebalances
    assert not h.join("g", "", "ia", protocols=both).done
    assert h.group().state is PREPARING_REBALANCE
    assert h.join("g", "", "ia", protocols=[("sticky", b"")]).result.error is E.inconsistent_group_protocol


def test_a_static_member_that_does_not_rejoin_stays_until_its_session_expires(h):
    a, b = h.stable_group(2, instances=["ia", "ib"])
    a_join = h.join("g", a, "ia")  # leader rejoins: rebalance; B heartbeats but never rejoins
    for _ in range(REBALANCE // 2000 + 1):
        h.advance(2000)
        h.heartbeat_("g", b, 2, "ib")
    r = a_join.result
    assert r.generation_id == 3 and {m[0] for m in r.members} == {a, b}, "static B stays"


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------
def test_join_errors(h):
    assert h.join("").result.error is E.invalid_group_id
    assert h.join(session=1000).result.error is E.invalid_session_timeout
    assert h.join(session=2_000_000).result.error is E.invalid_session_timeout
    assert h.join("nogroup", "someone").result.error is E.unknown_member_id
    (a,) = h.stable_group(1)
    assert h.join("g", protocol_type="connect").result.error is E.inconsistent_group_protocol
    assert h.join("g", protocols=[("sticky", b"")]).result.error is E.inconsistent_group_protocol
    assert h.join("g", "stranger").result.error is E.unknown_member_id
    assert h.join("g", a, "not-static").result.error is E.unknown_member_id


def test_generation_and_member_errors(h):
    a, _b = h.stable_group(2)
    assert h.heartbeat_("g", a, 1) is E.illegal_generation
    assert h.heartbeat_("g", "stranger", 2) is E.unknown_member_id
    assert h.heartbeat_("nogroup", a, 2) is E.unknown_member_id
    assert h.sync("g", a, 7).result.error is E.illegal_generation
    assert h.sync("g", "stranger", 2).result.error is E.unknown_member_id
    assert h.coord.handle_commit_offsets(
        "g", a, None, 1, {("t", 0): OffsetAndMetadata(5)}
    )[0] == {("t", 0): E.illegal_generation}
    assert h.coord.handle_commit_offsets(
        "g", "", None, -1, {("t", 0): OffsetAndMetadata(5)}
    )[0] == {("t", 0): E.unknown_member_id}
    reply = Reply()
    h.coord.handle_sync_group("g", 2, a, "connect", None, None, {}, reply)
    assert reply.result.error is E.inconsistent_group_protocol


def test_group_max_size():
    h = Harness(max_size=2)
    _a, b = h.stable_group(2)
    assert h.join().result.error is E.group_max_size_reached
    assert h.join("g", b).done  # members still rejoin


def test_inactive_coordinator_answers_coordinator_not_available(h):
    a, _b = h.stable_group(2)
    parked = h.new_member()
    h.coord.shutdown()
    assert parked.result.error is E.not_coordinator
    assert h.heartbeat_("g", a, 2) is E.coordinator_not_available
    assert h.join().result.error is E.coordinator_not_available


# ------------------------------------------------------------------------------------------
# offsets
# ------------------------------------------------------------------------------------------
def test_offset_commit_and_fetch(h):
    om = OffsetAndMetadata(42, 3, "meta", T0)
    errors, _ = h.coord.handle_commit_offsets("simple", "", None, -1, {("t", 0): om})
    assert errors == {("t", 0): E.none}
    assert h.coord.handle_fetch_offsets("simple", [("t", 0), ("t", 1)]) == (
        E.none, {("t", 0): om, ("t", 1): None}
    )
    assert h.coord.handle_fetch_offsets("simple", None) == (E.none, {("t", 0): om})
    assert h.coord.handle_fetch_offsets("unknown", [("t", 0)]) == (E.none, {("t", 0): None})
    # the empty group id works for offsets, as in Kafka
    assert h.coord.handle_commit_offsets("", "", None, -1, {("t", 0): om})[0] == {("t", 0): E.none}

    a, b = h.stable_group(2)
    errors, _ = h.coord.handle_commit_offsets(
        "g", a, None, 2, {("t", 0): OffsetAndMetadata(1, metadata="x" * 5000), ("t", 1): OffsetAndMetadata(9)}
    )
    assert errors == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none}
    # during the sync phase commits are refused, in the join phase still allowed
    assert not h.join("g", a).done
    assert h.coord.handle_commit_offsets("g", b, None, 2, {("t", 2): OffsetAndMetadata(3)})[0] == {
        ("t", 2): E.none
    }
    h.join("g", b)
    assert h.group().state is COMPLETING_REBALANCE
    assert h.coord.handle_commit_offsets("g", b, None, 3, {("t", 2): OffsetAndMetadata(4)})[0] == {
        ("t", 2): E.rebalance_in_progress
    }
    # a commit from a generation of a group that does not exist (any more): Kafka 4
    # answers GROUP_ID_NOT_FOUND from OffsetCommit v9 on, ILLEGAL_GENERATION before
    assert h.coord.handle_commit_offsets("gone", "m", None, 4, {("t", 0): om}, 8)[0] == {
        ("t", 0): E.illegal_generation
    }
    assert h.coord.handle_commit_offsets("gone", "m", None, 4, {("t", 0): om}, 9)[0] == {
        ("t", 0): E.group_id_not_found
    }


def test_delete_groups_and_offsets(h):
    h.coord.handle_commit_offsets("empty", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
    a, _b = h.stable_group(2)
    h.coord.handle_commit_offsets("g", a, None, 2, {("t", 0): OffsetAndMetadata(1), ("u", 0): OffsetAndMetadata(2)})
    assert h.coord.handle_delete_groups(["g", "empty", "nope"]) == {
        "g": E.non_empty_group, "empty": E.none, "nope": E.group_id_not_found
    }
    assert "empty" not in h.coord.groups
    # the group consumes t, not u: only u's offset may go
    error, errors = h.coord.handle_delete_offsets("g", [("t", 0), ("u", 0)])
    assert error is E.none and errors == {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none}
    assert set(h.group().offsets) == {("t", 0)}
    assert h.coord.handle_delete_offsets("nope", [("t", 0)])[0] is E.group_id_not_found


def test_list_and_describe_groups(h):
    a, b = h.stable_group(2)
    h.coord.handle_commit_offsets("simple", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
    def listed(states=(), types=()):
        error, groups = h.coord.handle_list_groups(states, types)
        assert error is E.none
        return sorted((g.group_id, g.protocol_type, g.group_state, g.group_type) for g in groups)

    assert listed() == [("g", "consumer", "Stable", "classic"), ("simple", "", "Empty", "classic")]
    assert listed(["stable"]) == [("g", "consumer", "Stable", "classic")]
    assert listed(types=["consumer"]) == []
    assert listed(types=["Classic"]) == listed()
    group = h.coord.handle_describe_group("g")
    assert (group.error_code, group.group_id, group.group_state, group.protocol_type, group.protocol_data) == (
        E.none, "g", "Stable", "consumer", "range"
    )
    assert [m.member_id for m in group.members] == [a, b]
    assert group.members[0].member_assignment == f"assign-{a}".encode()
    assert h.coord.handle_describe_group("nope") == DescribedGroup(group_id="nope", group_state="Dead")


def test_subscribed_topics_parse_the_consumer_protocol():
    assert subscribed_topics_of(subscription("a", "bb")) == {"a", "bb"}
    with pytest.raises(ValueError):
        subscribed_topics_of(b"\x00")


def test_offsets_of_an_empty_group_expire_after_retention():
    h = Harness(offsets_retention_ms=60_000)
    (a,) = h.stable_group(1)
    h.coord.handle_commit_offsets("g", a, None, 1, {("t", 0): OffsetAndMetadata(7, commit_timestamp=T0)})
    h.coord.handle_commit_offsets("simple", "", None, -1, {("t", 0): OffsetAndMetadata(1, commit_timestamp=T0)})
    for _ in range(40):  # 80 s, heartbeating
        h.advance(2000)
        assert h.heartbeat_("g", a, 1) is E.none
    # a stable consumer group keeps the offsets of topics it subscribes to
    assert h.coord.cleanup_group_metadata() == 1  # only the standalone consumer's
    assert "simple" not in h.coord.groups
    assert ("t", 0) in h.group().offsets
    h.coord.handle_leave_group("g", [(a, None, None)])
    assert h.group().state is EMPTY
    h.clock.advance(59_000)
    assert h.coord.cleanup_group_metadata() == 0
    h.clock.advance(2_000)
    assert h.coord.cleanup_group_metadata() == 1
    assert "g" not in h.coord.groups  # empty and without offsets: removed


def test_explicit_retention_time_of_old_commits():
    h = Harness(offsets_retention_ms=10**9)
    h.coord.handle_commit_offsets(
        "simple", "", None, -1, {("t", 0): OffsetAndMetadata(1, commit_timestamp=T0, expire_timestamp=T0 + 5000)}
    )
    h.clock.set_milliseconds(4999)  # the wall clock at T0 + 4999
    assert h.coord.cleanup_group_metadata() == 0
    h.clock.set_milliseconds(5000)
    assert h.coord.cleanup_group_metadata() == 1


# ------------------------------------------------------------------------------------------
# durability
# ------------------------------------------------------------------------------------------
def test_groups_and_offsets_survive_a_restart(tmp_path):
    h = Harness(tmp_path)
    a, b = h.stable_group(2)
    _, wait = h.coord.handle_commit_offsets(
        "g", a, None, 2, {("t", 0): OffsetAndMetadata(10, 1, "m0", T0), ("t", 1): OffsetAndMetadata(20)}
    )
    # the commit's durability: pending until the fsync round the append asked for
    assert wait is not None and wait.error is None and h.log.recovery_point < h.log.log_end_offset
    h.loop.run_pending()
    assert wait.error is E.none and h.log.recovery_point == h.log.log_end_offset
    h.coord.handle_commit_offsets("g", b, None, 2, {("t", 1): OffsetAndMetadata(21)})  # latest wins
    h.coord.handle_commit_offsets("simple", "", None, -1, {("u", 3): OffsetAndMetadata(5)})
    h.coord.handle_commit_offsets("gone", "", None, -1, {("u", 0): OffsetAndMetadata(5)})
    assert h.coord.handle_delete_groups(["gone"]) == {"gone": E.none}

    h2 = h.restart()
    c = h2.coord
    assert set(c.groups) == {"g", "simple"}
    assert c.handle_fetch_offsets("g", None)[1] == {
        ("t", 0): OffsetAndMetadata(10, 1, "m0", T0), ("t", 1): OffsetAndMetadata(21)
    }
    g = c.groups["g"]
    assert g.state is STABLE and g.generation_id == 2 and g.leader_id == a
    assert list(g.members) == [a, b] and g.protocol_name == "range"
    assert g.members[b].assignment == f"assign-{b}".encode()
    # members carry on with their generation; their sessions restarted at the load
    assert h2.heartbeat_("g", a, 2) is E.none
    assert h2.sync("g", b, 2).result.assignment == f"assign-{b}".encode()
    for _ in range(SESSION // 2000 + 1):
        h2.advance(2000)
        h2.heartbeat_("g", a, 2)
    assert b not in g.members  # B never came back: expired, A rejoins alone
    assert h2.join("g", a).result.generation_id == 3


def test_an_empty_generation_is_stored_too(tmp_path):
    h = Harness(tmp_path)
    (a,) = h.stable_group(1)
    h.coord.handle_leave_group("g", [(a, None, None)])
    g = h.restart().coord.groups["g"]
    assert g.state is EMPTY and g.generation_id == 2 and not g.members


def test_static_rejoin_is_persisted(tmp_path):
    h = Harness(tmp_path)
    a, _b = h.stable_group(2, instances=["ia", "ib"])
    new_b = h.join("g", "", "ib").result.member_id
    g = h.restart().coord.groups["g"]
    assert set(g.members) == {a, new_b} and g.static_members == {"ia": a, "ib": new_b}


def test_the_log_cleaner_compacts_the_offsets_log_and_replay_gives_the_same_state(tmp_path):
    h = Harness(tmp_path)
    for i in range(300):
        h.coord.handle_commit_offsets("s", "", None, -1, {("t", i % 3): OffsetAndMetadata(i)})
    h.coord.handle_commit_offsets("dead", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
    h.coord.handle_delete_groups(["dead"])
    for _ in range(3):
        h.log.roll(T0)  # several segments
        h.coord.handle_commit_offsets("s", "", None, -1, {("t", 0): OffsetAndMetadata(299)})
    upper = h.log.segments[-1].base_offset
    Cleaner(1 << 20, clock=MockClock()).clean(LogToClean(("__consumer_offsets", 0), h.log, 0, upper, 0, 1), T0)
    live = list(iter_records(h.log.read(h.log.log_start_offset, 1 << 20), h.log.log_start_offset))
    below = [r for r in live if r[0] < upper]
    # one record per key below the active segment: 3 offsets, the dead group's tombstones
    assert len(below) == len({k for _, k, _ in below}) <= 6
    c = h.restart().coord
    assert c.handle_fetch_offsets("s", None)[1] == {
        ("t", 0): OffsetAndMetadata(299),
        ("t", 1): OffsetAndMetadata(298),
        ("t", 2): OffsetAndMetadata(299),
    }
    assert "dead" not in c.groups


def test_replay_after_a_torn_tail(tmp_path):
    """kill -9 mid-write: Log recovery keeps every whole batch, the replay the rest."""
    h = Harness(tmp_path)
    h.coord.handle_commit_offsets("s", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
    h.coord.handle_commit_offsets("s", "", None, -1, {("t", 0): OffsetAndMetadata(2)})
    h.log.flush()
    path = h.log.active_segment.log_path
    h.coord.handle_commit_offsets("s", "", None, -1, {("t", 0): OffsetAndMetadata(3)})
    size = path.stat().st_size
    h2 = h.restart(crash=True, before=lambda: _truncate(path, size - 5))  # the last batch torn
    assert h2.coord.handle_fetch_offsets("s", [("t", 0)])[1][("t", 0)].offset == 2
