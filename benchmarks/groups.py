#!/usr/bin/env python3
"""Consumer groups (issue 27): the classic protocol against the consumer protocol
(KIP-848), side by side in one run.

**In process, on fake time** (no sockets): the broker's core as the broker wires it
(:class:`~tidegate.server.broker_core.BrokerCore` on ``tests/fake_loop.FakeLoop``, real
logs, ``__consumer_offsets`` appended and fsynced as the broker does), 1,000 partitions
over 4 topics, groups of 10 and of 100 members. The members are simulated clients that
behave as librdkafka's do:

* ``classic``: JoinGroup (v4+: MEMBER_ID_REQUIRED, then again with the id), SyncGroup (the
  leader assigns with the range assignor, on the client), Heartbeat every 3 s
  (heartbeat.interval.ms); REBALANCE_IN_PROGRESS makes a member give up all its
  partitions (eager) and join again; a member leaving sends LeaveGroup. The broker's
  group.initial.rebalance.delay.ms is Kafka's default, 3 s.
* ``consumer``: ConsumerGroupHeartbeat at the interval the broker gives (5 s); an answer
  whose assignment differs from what the member owns is reconciled at once (revoked
  partitions dropped, new ones taken) and acknowledged by an immediate heartbeat
  carrying the owned partitions; a member leaving sends epoch -1. The server assignor is
  the default (uniform).

Members start at random times within ``--join-spread-ms`` (1 s); each repeat draws new
times (the same for both protocols). Cases, for each protocol and size:

* ``form``: from the last member's first request to a stable group (classic: every
  member holds its SyncGroup answer of the last generation; consumer: the group is
  STABLE and every member owns its target);
* ``join``: one member joins the stable group (at a random moment of the heartbeat
  cycle), until the group is stable again;
* ``leave``: one member leaves, until its partitions are owned by the others;
* ``heartbeat``: a steady heartbeat of a stable group (nothing changes), CPU per
  request of the coordinator call, every member heartbeating in turn.

Each case reports the fake-clock time it took (a property of the protocol and the
intervals), the requests the members sent, and the broker's CPU (``thread_time`` of
the coordinator calls and of the loop turns that serve them: appends and their fsync,
timers; the simulated clients' own work is outside it, and so is the broker's periodic
log maintenance, turned off here). At the end of each case the
benchmark checks that every partition is owned by exactly one member.

**End to end** (``--e2e``, default on): a tidegate broker started for the run, one
connection, N raw requests back to back (each sent once the previous answer is read):
ApiVersions (the shell's floor), a classic Heartbeat of a 1-member stable group, a
steady ConsumerGroupHeartbeat; requests/s and the broker's CPU per request (psutil).

Medians over ``--repeat`` runs (default 5), with the spread (min-max) beside them.

    python benchmarks/groups.py                      # ~1-2 minutes
    python benchmarks/groups.py --repeat 9 --json out.json
    python benchmarks/groups.py --sizes 10 --no-e2e
    # before/after: another checkout's src/ run by turns with this one, in child processes
    python benchmarks/groups.py --base main=/work/main/src
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the tidegate measured: this checkout's, or another's (``--base`` runs this script again
#: with TIDEGATE_SRC set to the other checkout's src/)
SRC = Path(os.environ.get("TIDEGATE_SRC") or ROOT / "src")
sys.path[:0] = [str(SRC), str(ROOT), str(ROOT / "benchmarks")]

from _common import CpuMeter, SpawnedTidegate, format_table, git_describe

from tests.core_harness import CoreHarness
from tests.fake_loop import FakeLoop, clock_at
from tidegate.client.group_member import range_assign
from tidegate.coordinator.group.group_metadata import JoinResult, SyncResult
from tidegate.coordinator.group.modern.consumer.consumer_group import (
    ConsumerGroupState,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
)
from tidegate.errors import ErrorCode
from tidegate.protocol.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

TOPICS = 4
PARTITIONS = 1000
#: librdkafka's defaults
CLASSIC_HEARTBEAT_MS = 3000
SESSION_TIMEOUT_MS = 45_000
MAX_POLL_INTERVAL_MS = 300_000
PROTOCOLS = ("classic", "consumer")
CASES = ("form", "join", "leave")


# -- the broker's core on fake time, and the simulated clients' event queue ----------------
class TimedLoop(FakeLoop):
    """FakeLoop that counts the CPU of the work handed to a worker (the flusher's fsync
    of ``__consumer_offsets``): how much of the broker's CPU is durability."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.submitted_ns = 0

    def submit(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        def timed() -> Any:
            start = time.thread_time_ns()
            try:
                return fn()
            finally:
                self.submitted_ns += time.thread_time_ns() - start

        super().submit(timed, on_done)


class World:
    """One broker core (fake clock, real logs in a temporary directory) holding the
    topics; each run uses a group of its own in it."""

    def __init__(self, path: Path, partitions: int, topics: int = TOPICS, rtt_ms: int = 1) -> None:
        #: a request's round trip: the members read each answer this long after sending
        self.rtt_ms = rtt_ms
        self.harness = CoreHarness(path, loop=TimedLoop(clock_at(1_000_000)))
        self.timed_loop: TimedLoop = self.harness.loop  # type: ignore[assignment]
        core = self.harness.core
        # The broker's periodic maintenance walks every partition each second of fake time
        # whatever the groups do: it would count against the protocol whose case lasts longer.
        for task in core._tasks:
            task.cancel()
        self.loop = self.harness.loop
        self.classic = core.group_coordinator
        self.consumer = core.consumer_group_coordinator
        per, extra = divmod(partitions, topics)
        self.partitions = {f"topic-{t}": per + (t < extra) for t in range(topics)}
        for name, count in self.partitions.items():
            self.harness.logs.create_topic(name, count, {})
        self.topic_ids = {name: self.harness.store.get(name).topic_id for name in self.partitions}
        self.names = {tid: name for name, tid in self.topic_ids.items()}
        self.subscription = encode_subscription(self.partitions)
        self._cpu_ns = 0
        self.requests = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def close(self) -> None:
        self.harness.close()

    def now(self) -> int:
        return self.loop.time_ms()

    # -- broker CPU ---------------------------------------------------------------------
    def broker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One request into the coordinator, and the loop turns that complete it (the
        append's fsync, the answer once durable): its CPU counts as the broker's."""
        self.requests += 1
        start = time.thread_time_ns()
        out = fn(*args)
        self.loop.run_pending()
        self._cpu_ns += time.thread_time_ns() - start
        return out

    def cpu_mark(self) -> tuple[int, int, int]:
        """(broker CPU ns, of which fsync ns, requests) so far."""
        return self._cpu_ns, self.timed_loop.submitted_ns, self.requests

    # -- simulated time -------------------------------------------------------------------
    def at(self, at_ms: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (at_ms, next(self._seq), fn))

    def run(self, done: Callable[[], bool], limit_ms: int = 600_000) -> int:
        """Run the clients' events and the broker's timers in time order until ``done()``;
        the fake time it was reached at."""
        deadline = self.now() + limit_ms
        loop = self.loop
        while not done():
            client = self._events[0][0] if self._events else None
            armed = loop.armed
            broker = armed[0] if armed else None
            nxt = min(t for t in (client, broker) if t is not None)
            if nxt > deadline:
                raise TimeoutError(f"no stable group within {limit_ms} ms of fake time")
            if broker is not None and broker <= nxt and (client is None or broker < client):
                start = time.thread_time_ns()
                loop.run_until(broker)  # the broker's timers (their answers queue client events)
                self._cpu_ns += time.thread_time_ns() - start
                continue
            if nxt > self.now():
                loop.run_until(nxt)  # nothing of the broker's is due before
            _, _, fn = heapq.heappop(self._events)
            fn()
        return self.now()

    def drain(self, ms: int) -> None:
        """Let ``ms`` of fake time pass with the clients heartbeating."""
        end = self.now() + ms
        self.run(lambda: bool(self._events) and self._events[0][0] > end and self._quiet_until(end))

    def _quiet_until(self, end: int) -> bool:
        armed = self.loop.armed
        if armed and armed[0] <= end:
            return False
        self.loop.run_until(end)
        return True


# -- simulated clients ---------------------------------------------------------------------
class Ownership:
    """Who owns what across a group's members as they change it: how many partitions
    were revoked from a member, and for how long partitions had no owner at all
    (partition-seconds: an eager rebalance leaves every partition without one until the
    new assignment arrives; an incremental one only those that move)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.owners: dict[tuple[str, int], int] = {}
        self.unowned_since: dict[tuple[str, int], int] = {}
        self.unowned_ms = 0
        self.revoked = 0

    def changed(self, old: frozenset[tuple[str, int]], new: frozenset[tuple[str, int]]) -> None:
        now = self.world.now()
        owners, since = self.owners, self.unowned_since
        for tp in old - new:
            self.revoked += 1
            owners[tp] -= 1
            if owners[tp] == 0:
                since[tp] = now
        for tp in new - old:
            if owners.get(tp, 0) == 0 and tp in since:
                self.unowned_ms += now - since.pop(tp)
            owners[tp] = owners.get(tp, 0) + 1

    def mark(self) -> tuple[float, int]:
        """(unowned partition-ms so far, counting those still unowned up to now; revocations)."""
        now = self.world.now()
        return self.unowned_ms + sum(now - t for t in self.unowned_since.values()), self.revoked


class Member:
    """What both kinds of member share: the world, an id, what it owns, and a token that
    drops the events of a superseded schedule."""

    def __init__(self, world: World, ownership: Ownership, group_id: str, name: str) -> None:
        self.world = world
        self.ownership = ownership
        self.group_id = group_id
        self.name = name
        self.owned: frozenset[tuple[str, int]] = frozenset()
        self.token = 0
        self.left = False

    def own(self, partitions: frozenset[tuple[str, int]]) -> None:
        """What the member now owns (partitions revoked, partitions taken)."""
        self.ownership.changed(self.owned, partitions)
        self.owned = partitions

    def answered(self, fn: Callable[[], None]) -> None:
        """``fn`` (the member reading an answer) once the answer has crossed the network:
        a round trip after the request, as the broker answers at once."""
        self.world.at(self.world.now() + self.world.rtt_ms, fn)

    def later(self, delay_ms: int, fn: Callable[[], None]) -> None:
        """``fn`` in ``delay_ms`` unless the member reschedules or leaves meanwhile."""
        self.token += 1
        token = self.token

        def run() -> None:
            if self.token == token and not self.left:
                fn()

        self.world.at(self.world.now() + delay_ms, run)


class ClassicMember(Member):
    """librdkafka's classic consumer with the eager range assignor."""

    def __init__(self, world: World, ownership: Ownership, group_id: str, name: str) -> None:
        super().__init__(world, ownership, group_id, name)
        self.member_id = ""
        self.generation = -1
        self.synced = False

    def start(self) -> None:
        self.join()

    def join(self) -> None:
        self.synced = False
        self.own(frozenset())  # eager: everything is revoked before joining
        w = self.world
        w.broker(
            w.classic.handle_join_group, self.group_id, self.member_id, None, True, False, "bench",
            "/127.0.0.1", MAX_POLL_INTERVAL_MS, SESSION_TIMEOUT_MS, "consumer",
            [("range", w.subscription)], self._joined,
        )  # fmt: skip

    def _joined(self, result: JoinResult) -> None:
        self.answered(lambda: self._on_join(result))

    def _on_join(self, result: JoinResult) -> None:
        if self.left:
            return
        if result.error is ErrorCode.member_id_required:
            self.member_id = result.member_id
            self.join()
            return
        if result.error is not ErrorCode.none:
            raise AssertionError(f"JoinGroup of {self.name}: {result.error.name}")
        self.member_id, self.generation = result.member_id, result.generation_id
        assignments: dict[str, bytes] = {}
        if result.leader_id == self.member_id:
            subscriptions = {mid: decode_subscription(meta) for mid, _, meta in result.members}
            assignments = {
                mid: encode_assignment(parts)
                for mid, parts in range_assign(subscriptions, self.world.partitions).items()
            }
        w = self.world
        w.broker(
            w.classic.handle_sync_group, self.group_id, self.generation, self.member_id, "consumer",
            "range", None, assignments, self._synced,
        )  # fmt: skip

    def _synced(self, result: SyncResult) -> None:
        self.answered(lambda: self._on_sync(result))

    def _on_sync(self, result: SyncResult) -> None:
        if self.left:
            return
        if result.error is ErrorCode.rebalance_in_progress:
            self.join()
            return
        if result.error is not ErrorCode.none:
            raise AssertionError(f"SyncGroup of {self.name}: {result.error.name}")
        self.own(frozenset(decode_assignment(result.assignment)))
        self.synced = True
        self.later(CLASSIC_HEARTBEAT_MS, self.heartbeat)

    def heartbeat(self) -> None:
        w = self.world
        error = w.broker(w.classic.handle_heartbeat, self.group_id, self.member_id, None, self.generation)
        self.answered(lambda: self._on_heartbeat(error))

    def _on_heartbeat(self, error: ErrorCode) -> None:
        if self.left:
            return
        if error is ErrorCode.rebalance_in_progress:
            self.join()
        elif error is ErrorCode.none:
            self.later(CLASSIC_HEARTBEAT_MS, self.heartbeat)
        else:
            raise AssertionError(f"Heartbeat of {self.name}: {error.name}")

    def steady_call(self) -> Callable[[], object]:
        classic, group_id, member_id, generation = (
            self.world.classic, self.group_id, self.member_id, self.generation
        )
        return lambda: classic.handle_heartbeat(group_id, member_id, None, generation)

    def steady_request(self) -> tuple[int, int, dict]:
        return 12, 4, {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                       "group_instance_id": None}

    def leave(self) -> None:
        self.own(frozenset())
        self.left = True
        w = self.world
        w.broker(w.classic.handle_leave_group, self.group_id, [(self.member_id, None, "bench")])


class ConsumerMember(Member):
    """librdkafka's KIP-848 consumer (ConsumerGroupHeartbeat v1, client member id)."""

    def __init__(self, world: World, ownership: Ownership, group_id: str, name: str) -> None:
        super().__init__(world, ownership, group_id, name)
        self.member_id = str(uuid.UUID(int=random.getrandbits(128)))
        self.epoch = 0
        self.interval_ms = 5000
        self.ack = False

    def start(self) -> None:
        self.epoch = 0
        self._send(ConsumerGroupHeartbeat(
            self.group_id, self.member_id, 0, rebalance_timeout_ms=MAX_POLL_INTERVAL_MS,
            subscribed_topic_names=sorted(self.world.partitions), subscribed_topic_regex="",
            topic_partitions=[], client_id="bench", client_host="/127.0.0.1",
        ))  # fmt: skip

    def heartbeat(self) -> None:
        owned = None
        if self.ack:  # the partitions it now owns, after a change
            by_topic: dict[uuid.UUID, list[int]] = {}
            for name, p in self.owned:
                by_topic.setdefault(self.world.topic_ids[name], []).append(p)
            owned = list(by_topic.items())
            self.ack = False
        self._send(ConsumerGroupHeartbeat(self.group_id, self.member_id, self.epoch, topic_partitions=owned,
                                          client_id="bench", client_host="/127.0.0.1"))

    def _send(self, request: ConsumerGroupHeartbeat) -> None:
        w = self.world
        w.broker(w.consumer.consumer_group_heartbeat, request, self._answered)

    def _answered(self, result: ConsumerGroupHeartbeatResult) -> None:
        self.answered(lambda: self._on_answer(result))

    def _on_answer(self, result: ConsumerGroupHeartbeatResult) -> None:
        if self.left:
            return
        if result.error is not ErrorCode.none:
            raise AssertionError(f"ConsumerGroupHeartbeat of {self.name}: {result.error.name} {result.error_message}")
        self.epoch, self.interval_ms = result.member_epoch, result.heartbeat_interval_ms
        if result.assignment is not None:
            names = self.world.names
            owned = frozenset((names[t], p) for t, ps in result.assignment.items() for p in ps)
            if owned != self.owned:
                self.own(owned)
                self.ack = True
        self.later(0 if self.ack else self.interval_ms, self.heartbeat)

    def steady_call(self) -> Callable[[], object]:
        manager = self.world.consumer
        request = ConsumerGroupHeartbeat(self.group_id, self.member_id, self.epoch, client_id="bench",
                                         client_host="/127.0.0.1")

        def call() -> None:
            manager.consumer_group_heartbeat(request, _ignore)

        return call

    def steady_request(self) -> tuple[int, int, dict]:
        return 68, 1, steady_consumer_heartbeat(self.group_id, self.member_id, self.epoch)

    def leave(self) -> None:
        self.own(frozenset())
        self.left = True
        w = self.world
        w.broker(w.consumer.consumer_group_heartbeat,
                 ConsumerGroupHeartbeat(self.group_id, self.member_id, -1), _ignore)


def _ignore(_result: object) -> None:
    pass


def steady_consumer_heartbeat(group_id: str, member_id: str, epoch: int) -> dict:
    """A steady ConsumerGroupHeartbeat v1 body (kio's field names): nothing changes."""
    return {"group_id": group_id, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}


# -- one run: a group formed, joined, left, heartbeating ------------------------------------
@dataclass
class CaseResult:
    fake_ms: int
    cpu_ms: float
    requests: int
    #: partitions revoked from members, and partition-seconds without an owner (join, leave)
    revoked: int = 0
    unowned_s: float = 0.0
    #: of ``cpu_ms``, the fsync of the records written
    fsync_ms: float = 0.0


@dataclass
class RunResult:
    cases: dict[str, CaseResult] = field(default_factory=dict)
    #: CPU per steady heartbeat: the coordinator call, and the whole request in process
    #: (KafkaApis.handle: decoded from its bytes, authorized, answered, encoded)
    heartbeat_us: float = 0.0
    request_us: float = 0.0


def _case(fake_ms: int, before: tuple[int, int, int], after: tuple[int, int, int], revoked: int = 0,
          unowned_s: float = 0.0) -> CaseResult:
    cpu, fsync, requests = (a - b for a, b in zip(after, before, strict=True))
    return CaseResult(fake_ms, cpu / 1e6, requests, revoked, unowned_s, fsync / 1e6)


class Group:
    """The members of one group of one protocol in a world, and when it is stable."""

    def __init__(self, world: World, protocol: str, group_id: str) -> None:
        self.world = world
        self.protocol = protocol
        self.group_id = group_id
        self.members: list[Member] = []
        self.ownership = Ownership(world)
        self._names = (f"m{i}" for i in itertools.count())

    def new_member(self) -> Member:
        cls = ClassicMember if self.protocol == "classic" else ConsumerMember
        member = cls(self.world, self.ownership, self.group_id, next(self._names))
        self.members.append(member)
        return member

    def active(self) -> list[Member]:
        return [m for m in self.members if not m.left]

    def stable(self) -> bool:
        members = self.active()
        if self.protocol == "classic":
            group = self.world.classic.groups.get(self.group_id)
            if group is None or str(group.state) != "Stable" or len(group.members) != len(members):
                return False
            return all(m.synced and m.generation == group.generation_id for m in members)  # type: ignore[attr-defined]
        cgroup = self.world.consumer.groups.get(self.group_id)
        if cgroup is None or cgroup.state is not ConsumerGroupState.STABLE or len(cgroup.members) != len(members):
            return False
        names = self.world.names
        for m in members:
            broker_member = cgroup.members.get(m.member_id)  # type: ignore[attr-defined]
            if broker_member is None:
                return False
            assigned = {(names[t], p) for t, ps in broker_member.assigned_partitions.items() for p in ps}
            if assigned != m.owned:
                return False
        return True

    def check_ownership(self) -> None:
        """Every partition owned by exactly one member."""
        owned = [tp for m in self.active() for tp in m.owned]
        total = sum(self.world.partitions.values())
        if len(owned) != total or len(set(owned)) != total:
            raise AssertionError(
                f"{self.protocol} group {self.group_id}: {len(owned)} partitions owned, "
                f"{len(set(owned))} distinct, {total} exist"
            )

    def measure(self, start: Callable[[], None], at_ms: int) -> CaseResult:
        """``start`` at fake time ``at_ms`` (the clients heartbeating meanwhile), then run
        until the group is stable: fake time from ``at_ms``, broker CPU and requests."""
        w = self.world
        w.run(lambda: w.now() >= at_ms or (bool(w._events) and w._events[0][0] > at_ms and w._quiet_until(at_ms)))
        mark = w.cpu_mark()
        unowned0, revoked0 = self.ownership.mark()
        start()
        done = w.run(self.stable)
        unowned1, revoked1 = self.ownership.mark()
        self.check_ownership()
        return _case(done - at_ms, mark, w.cpu_mark(), revoked1 - revoked0, (unowned1 - unowned0) / 1000)


def run_once(world: World, protocol: str, members: int, rnd: random.Random, group_id: str,
             join_spread_ms: int = 1000, heartbeat_calls: int = 2000) -> RunResult:
    """One group of ``members`` formed, measured steady, joined, left, then emptied."""
    result = RunResult()
    group = Group(world, protocol, group_id)
    t0 = world.now() + 1000
    offsets = sorted(rnd.uniform(0, join_spread_ms) for _ in range(members))
    first = [group.new_member() for _ in range(members)]
    for member, offset in zip(first, offsets, strict=True):
        world.at(t0 + int(offset), member.start)
    last_join = t0 + int(offsets[-1])
    mark = world.cpu_mark()
    done = world.run(group.stable)
    group.check_ownership()
    result.cases["form"] = _case(done - last_join, mark, world.cpu_mark())

    world.drain(2 * 5000)
    result.heartbeat_us = steady_heartbeat_us(group, [m.steady_call() for m in group.active()], heartbeat_calls)
    result.request_us = steady_heartbeat_us(group, [steady_request_call(world, m) for m in group.active()],
                                            heartbeat_calls)
    world.harness.outcomes.clear()

    interval = CLASSIC_HEARTBEAT_MS if protocol == "classic" else 5000
    joining = group.new_member()
    result.cases["join"] = group.measure(joining.start, world.now() + interval + int(rnd.uniform(0, interval)))
    world.drain(2 * 5000)
    leaving = rnd.choice(group.active())
    result.cases["leave"] = group.measure(leaving.leave, world.now() + interval + int(rnd.uniform(0, interval)))

    for member in group.active():  # empty the group: no timer of it runs into the next run
        member.leave()
    world.drain(1000)
    return result


def steady_request_call(world: World, member: Member) -> Callable[[], object]:
    """A steady heartbeat of ``member`` as bytes into ``KafkaApis.handle``, as the socket
    server hands a request over (encoded by kio beforehand)."""
    from tests.integration.rawclient import encode_request

    key, version, body = member.steady_request()  # type: ignore[attr-defined]
    payload = encode_request(key, version, 7, body)
    send = world.harness.send_payload
    return lambda: send(bytearray(payload))


def steady_heartbeat_us(group: Group, fns: Sequence[Callable[[], object]], calls: int, blocks: int = 10) -> float:
    """CPU per steady heartbeat of a stable group, every member in turn (``fns``, one per
    member): the median of ``blocks`` blocks of about ``calls / blocks`` heartbeats,
    after a garbage collection (one owed by the run before would land in one block)."""
    rounds = max(1, calls // blocks // len(fns))
    loop = group.world.loop
    samples = []
    gc.collect()
    for _ in range(blocks):
        start = time.thread_time_ns()
        for _ in range(rounds):
            for fn in fns:
                fn()
        loop.run_pending()
        samples.append((time.thread_time_ns() - start) / 1e3 / (rounds * len(fns)))
    if not group.stable():
        raise AssertionError(f"{group.protocol}: steady heartbeats changed the group")
    return statistics.median(samples)


def run_in_process(sizes: Sequence[int], repeat: int, partitions: int = PARTITIONS,
                   join_spread_ms: int = 1000, heartbeat_calls: int = 2000, rtt_ms: int = 1,
                   log: Callable[[str], None] = print) -> dict[tuple[str, int], list[RunResult]]:
    """Every (protocol, size) ``repeat`` times, the protocols interleaved run by run,
    one broker core per size."""
    out: dict[tuple[str, int], list[RunResult]] = {}
    for size in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="tidegate-bench-groups-"))
        world = World(tmp, partitions, rtt_ms=rtt_ms)
        try:
            for r in range(repeat):
                for protocol in PROTOCOLS:
                    rnd = random.Random(r * 1000 + size)  # the same join times for both protocols
                    random.seed(r)
                    res = run_once(world, protocol, size, rnd, f"{protocol}-{size}-{r}", join_spread_ms,
                                   heartbeat_calls)
                    out.setdefault((protocol, size), []).append(res)
                    log(f"  {protocol:8} {size:4} members, run {r + 1}/{repeat}: "
                        + ", ".join(f"{c} {v.fake_ms} ms/{v.cpu_ms:.1f} cpu ms" for c, v in res.cases.items())
                        + f", heartbeat {res.heartbeat_us:.1f} us ({res.request_us:.1f} us as a request)")
        finally:
            world.close()
            shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- end to end: raw requests on one connection to a real broker --------------------------
def end_to_end(bootstrap: str, pid: int | None, requests: int, partitions: int = PARTITIONS,
               run: int = 0) -> dict[str, dict]:
    """ApiVersions, a classic Heartbeat and a steady ConsumerGroupHeartbeat, ``requests``
    of each back to back on one connection: requests/s and broker CPU per request. Run
    ``run`` uses groups of its own, left at the end."""
    from tests.integration.rawclient import RawClient, create_topics_body

    per, extra = divmod(partitions, TOPICS)
    out: dict[str, dict] = {}
    meter = CpuMeter(pid)
    classic_group, consumer_group = f"e2e-classic-{run}", f"e2e-consumer-{run}"
    with RawClient.connect(bootstrap, timeout=30) as c:
        for t in range(TOPICS):
            body = create_topics_body(f"topic-{t}", per + (t < extra))
            r = c.request(19, 7, body)
            assert r.topics[0].error_code in (0, 36), r  # 36: already exists
        names = [f"topic-{t}" for t in range(TOPICS)]

        # classic: a one-member group, stable
        join = {"group_id": classic_group, "session_timeout": SESSION_TIMEOUT_MS,
                "rebalance_timeout": MAX_POLL_INTERVAL_MS, "member_id": "", "group_instance_id": None,
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": encode_subscription(names)}],
                "reason": None}  # fmt: skip
        r = c.request(11, 9, join)
        if r.error_code == ErrorCode.member_id_required.value:
            join["member_id"] = r.member_id
            r = c.request(11, 9, join)
        assert r.error_code == 0, r
        member_id, generation = r.member_id, r.generation_id
        sizes = {f"topic-{t}": per + (t < extra) for t in range(TOPICS)}
        parts = range_assign({member_id: names}, sizes)[member_id]
        r = c.request(14, 5, {"group_id": classic_group, "generation_id": generation, "member_id": member_id,
                              "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                              "assignments": [{"member_id": member_id, "assignment": encode_assignment(parts)}]})
        assert r.error_code == 0, r
        heartbeat = {"group_id": classic_group, "generation_id": generation, "member_id": member_id,
                     "group_instance_id": None}

        # consumer: one member, its assignment acknowledged
        cmember = str(uuid.uuid4())
        r = c.request(68, 1, {"group_id": consumer_group, "member_id": cmember, "member_epoch": 0,
                              "instance_id": None, "rack_id": None, "rebalance_timeout": MAX_POLL_INTERVAL_MS,
                              "subscribed_topic_names": names, "subscribed_topic_regex": "",
                              "server_assignor": None, "topic_partitions": []})
        assert r.error_code == 0, r
        epoch = r.member_epoch
        owned = [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in r.assignment.topic_partitions]
        steady = steady_consumer_heartbeat(consumer_group, cmember, epoch)
        r = c.request(68, 1, {**steady, "topic_partitions": owned})
        assert r.error_code == 0 and r.member_epoch == epoch, r

        cases: list[tuple[str, int, int, dict]] = [
            ("ApiVersions v3", 18, 3, {"client_software_name": "bench", "client_software_version": "1"}),
            ("Heartbeat v4 (classic)", 12, 4, heartbeat),
            ("ConsumerGroupHeartbeat v1", 68, 1, steady),
        ]
        for label, key, version, body in cases:
            for _ in range(50):  # warm the path
                c.request(key, version, body)
            cpu0, t0 = meter.now(), time.perf_counter()
            for _ in range(requests):
                r = c.request(key, version, body)
            elapsed = time.perf_counter() - t0
            cpu1 = meter.now()
            assert r.error_code == 0, (label, r)
            out[label] = {
                "per_s": requests / elapsed,
                "cpu_us": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / requests * 1e6,
            }
        c.request(13, 5, {"group_id": classic_group, "members": [{"member_id": member_id, "group_instance_id": None,
                                                                 "reason": None}]})
        c.request(68, 1, steady_consumer_heartbeat(consumer_group, cmember, -1))
    return out


# -- reporting ------------------------------------------------------------------------------
def _stat(values: Sequence[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def table(results: dict[tuple[str, int], list[RunResult]], partitions: int = PARTITIONS) -> str:
    rows = []
    for size in sorted({size for _, size in results}):
        for case in CASES:
            for protocol in PROTOCOLS:
                runs = results.get((protocol, size))
                if not runs:
                    continue
                rs = [r.cases[case] for r in runs]
                moves = case != "form"
                rows.append([
                    f"{size} x {partitions} {case}" if protocol == PROTOCOLS[0] else "",
                    protocol,
                    _stat([r.fake_ms / 1000 for r in rs], ".1f"),
                    _stat([r.cpu_ms for r in rs], ".1f"),
                    _stat([r.fsync_ms for r in rs], ".1f"),
                    _stat([float(r.requests) for r in rs], ".0f"),
                    _stat([float(r.revoked) for r in rs], ".0f") if moves else "",
                    _stat([r.unowned_s for r in rs], ".0f") if moves else "",
                ])
    return format_table(
        ["members x partitions, case", "protocol", "fake s", "broker CPU ms", "of which fsync", "requests", "revoked",
         "unowned partition-s"],
        rows,
    )


def heartbeat_table(results: dict[tuple[str, int], list[RunResult]]) -> str:
    rows = [
        [f"{size}", protocol, _stat([r.heartbeat_us for r in runs], ".1f"), _stat([r.request_us for r in runs], ".1f"),
         "< 50" if protocol == "consumer" else ""]
        for (protocol, size), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]
    return format_table(["members", "protocol", "coordinator us", "request us (KafkaApis)", "goal"], rows)


def _e2e_rows(e2e: dict[str, dict[str, list[dict]]]) -> list[list[str]]:
    rows = []
    for target, cases in e2e.items():
        for label, vs in cases.items():
            cpu = [v["cpu_us"] for v in vs if v["cpu_us"] is not None]
            rows.append([label if len(e2e) == 1 else f"{label} [{target}]",
                         _stat([v["per_s"] for v in vs], ".0f"), _stat(cpu, ".0f") if cpu else "?"])
    return rows


def _run_child(src: Path, args: argparse.Namespace, out: Path) -> dict:
    """One in-process round of this script under ``src`` (a child process)."""
    cmd = [sys.executable, __file__, "--repeat", "1", "--no-e2e", "--json", str(out), "--sizes",
           *map(str, args.sizes), "--join-spread-ms", str(args.join_spread_ms), "--rtt-ms", str(args.rtt_ms),
           "--quiet"]
    subprocess.run(cmd, check=True, env={**os.environ, "TIDEGATE_SRC": str(src)})
    return json.loads(out.read_text())["in_process"]


def compare(args: argparse.Namespace) -> dict:
    """This checkout and each ``--base`` by turns: the in-process cases in a child process
    per round and target, then the end-to-end rows against a broker of each."""
    targets = {"this": ROOT / "src", **dict(spec.split("=", 1) for spec in args.base)}
    tmp = Path(tempfile.mkdtemp(prefix="tidegate-bench-groups-"))
    merged: dict[str, dict[tuple[str, int], list[RunResult]]] = {name: {} for name in targets}
    try:
        for r in range(args.repeat):
            for name, src in targets.items():
                print(f"round {r + 1}/{args.repeat}: {name} ({src})", flush=True)
                for key, runs in _run_child(Path(src), args, tmp / f"{name}-{r}.json").items():
                    protocol, size = key.split()
                    merged[name].setdefault((protocol, int(size)), []).extend(_run_result(d) for d in runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for name, results in merged.items():
        print(f"\n[{name}]")
        print(table(results))
    print()
    print(heartbeat_table_compare(merged))
    doc: dict[str, Any] = {"in_process": {name: _dump(results) for name, results in merged.items()}}
    if args.e2e:
        doc["end_to_end"] = run_e2e(targets, args)
    return doc


def _run_result(d: dict) -> RunResult:
    return RunResult({c: CaseResult(**v) for c, v in d["cases"].items()}, d["heartbeat_us"], d["request_us"])


def _dump(results: dict[tuple[str, int], list[RunResult]]) -> dict:
    return {f"{p} {s}": [{"cases": {c: vars(v) for c, v in r.cases.items()}, "heartbeat_us": r.heartbeat_us,
                          "request_us": r.request_us} for r in runs]
            for (p, s), runs in results.items()}


def heartbeat_table_compare(merged: dict[str, dict[tuple[str, int], list[RunResult]]]) -> str:
    rows = []
    for name, results in merged.items():
        for (protocol, size), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            rows.append([f"{size}", protocol, name, _stat([r.heartbeat_us for r in runs], ".1f"),
                         _stat([r.request_us for r in runs], ".1f")])
    return format_table(["members", "protocol", "tidegate", "coordinator us", "request us (KafkaApis)"], rows)


def run_e2e(targets: dict[str, Path | str], args: argparse.Namespace) -> dict[str, dict[str, list[dict]]]:
    """A broker of each target, the end-to-end rows against each by turns."""
    brokers = {
        name: SpawnedTidegate(overrides=["group.initial.rebalance.delay.ms=0"], log_level="WARNING",
                              env={"PYTHONPATH": str(src)})
        for name, src in targets.items()
    }
    e2e: dict[str, dict[str, list[dict]]] = {name: {} for name in targets}
    try:
        for broker in brokers.values():
            broker.start()
        for run in range(args.repeat):
            for name, broker in brokers.items():
                for label, v in end_to_end(broker.bootstrap, broker.pid, args.e2e_requests, run=run).items():
                    e2e[name].setdefault(label, []).append(v)
    finally:
        for broker in brokers.values():
            broker.cleanup()
    print()
    print(f"end to end, one connection, {args.e2e_requests} requests back to back, {args.repeat} runs")
    print(format_table(["request", "requests/s", "broker CPU us/request"], _e2e_rows(e2e)))
    return e2e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--join-spread-ms", type=int, default=1000)
    parser.add_argument("--rtt-ms", type=int, default=1, help="a request's round trip, fake time")
    parser.add_argument("--e2e", action=argparse.BooleanOptionalAction, default=True,
                        help="also the end-to-end rows through a spawned broker")
    parser.add_argument("--e2e-requests", type=int, default=5000)
    parser.add_argument("--base", action="append", default=[], metavar="NAME=SRC",
                        help="another checkout's src/, measured by turns with this one")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    def load() -> str:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())

    if not args.quiet:
        print(f"tidegate {git_describe() or '?'}, python {sys.version.split()[0]}, repeat {args.repeat}, "
              f"load average {load()}")
    if args.base:
        doc = compare(args)
    else:
        results = run_in_process(args.sizes, args.repeat, join_spread_ms=args.join_spread_ms, rtt_ms=args.rtt_ms,
                                 log=(lambda _line: None) if args.quiet else print)
        doc = {"in_process": _dump(results)}
        if not args.quiet:
            print()
            print(table(results))
            print()
            print(heartbeat_table(results))
        if args.e2e:
            doc["end_to_end"] = run_e2e({"this": SRC}, args)
    if not args.quiet:
        print(f"load average at the end {load()}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
