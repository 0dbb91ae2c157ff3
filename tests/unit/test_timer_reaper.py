"""The timer reaper on fake time: every delayed operation expires at its deadline.

Several purgatories, each with its own timer, share one armed wake-up. The defect
this pins: an operation expiring inside a wake-up that schedules a later operation
(a completed join arming heartbeat deadlines seconds out) armed the wake-up for
that later time, and the earlier buckets of the other purgatories waited for it
(long-poll fetches answered seconds late during a rebalance).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fake_loop import FakeLoop
from tidegate.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from tidegate.server.timer import SystemTimer
from tidegate.server.timer_reaper import TimerReaper


class Op(DelayedOperation):
    """Expires (never completes by itself); records when, and may schedule followers."""

    def __init__(self, name, delay_ms, fired, clock, then=None):
        super().__init__(delay_ms)
        self.name = name
        self.deadline = clock.milliseconds() + delay_ms
        self.fired = fired
        self.clock = clock
        self.then = then  # called on expiry: schedules follow-up operations

    def try_complete(self):
        return False

    def on_expiration(self):
        self.fired.append((self.name, self.deadline, self.clock.milliseconds()))
        if self.then is not None:
            self.then()


def purgatories(loop, names):
    clock = loop.clock
    ps = {n: DelayedOperationPurgatory(n, SystemTimer(clock=clock)) for n in names}
    reaper = TimerReaper(loop.call_at)
    for p in ps.values():
        reaper.add_purgatory(p)
    return ps, reaper


def test_an_expiry_scheduling_a_later_operation_does_not_delay_other_purgatories():
    loop = FakeLoop()
    ps, reaper = purgatories(loop, ["Fetch", "Heartbeat"])
    clock = loop.clock
    fired = []
    start = clock.milliseconds()

    def rebalance_done():
        # the completed join arms the members' session deadlines, 6 s out
        ps["Heartbeat"].try_complete_else_watch(Op("session", 6000, fired, clock), ["member"])

    ps["Fetch"].try_complete_else_watch(Op("fetch", 500, fired, clock), ["t-0"])
    ps["Heartbeat"].try_complete_else_watch(Op("join", 100, fired, clock, rebalance_done), ["g"])
    loop.run_until(start + 7000)

    assert [(n, at - start) for n, _, at in fired] == [("join", 100), ("fetch", 500), ("session", 6100)]
    assert all(at == deadline for _, deadline, at in fired)
    assert reaper.wakeups <= 6


def test_nothing_armed_while_idle():
    loop = FakeLoop()
    ps, _reaper = purgatories(loop, ["Fetch"])
    fired = []
    op = Op("fetch", 300, fired, loop.clock)
    ps["Fetch"].try_complete_else_watch(op, ["k"])
    assert loop.armed  # one wake-up for the bucket
    op.force_complete()  # completed by an append: the bucket empties
    loop.run_until(loop.time_ms() + 1000)
    assert fired == []
    assert ps["Fetch"].timer.next_expiration_ms() is None
    assert loop.armed == []  # nothing left armed, nothing polls


# An operation: (purgatory index, delay ms, follow-ups it schedules when it expires).
op_tree = st.recursive(
    st.tuples(st.integers(0, 3), st.integers(1, 20_000), st.just(())),
    lambda children: st.tuples(st.integers(0, 3), st.integers(1, 20_000), st.lists(children, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    roots=st.lists(st.tuples(st.integers(0, 5_000), op_tree), min_size=1, max_size=12),
    completions=st.lists(st.tuples(st.integers(0, 30_000), st.integers(0, 50)), max_size=10),
)
def test_every_expiry_fires_at_its_deadline(roots, completions):
    """Fetches, produces, group sessions and rebalances interleaved at random: operations
    start at random times, some complete early (an append, a heartbeat), and expiring
    ones schedule new ones in any purgatory. Each expiry runs exactly at its deadline."""
    loop = FakeLoop()
    names = ["Fetch", "Produce", "Heartbeat", "Rebalance"]
    ps, _reaper = purgatories(loop, names)
    clock = loop.clock
    start = clock.milliseconds()
    fired: list = []
    live: list[Op] = []
    counter = iter(range(10**6))

    def schedule(node):
        index, delay, children = node
        op = Op(f"op{next(counter)}", delay, fired, clock, then=lambda: [schedule(c) for c in children])
        live.append(op)
        ps[names[index]].try_complete_else_watch(op, [("k", index)])

    events = [(at, 0, tree) for at, tree in roots] + [(at, 1, pick) for at, pick in completions]
    for at, kind, what in sorted(events, key=lambda e: (e[0], e[1])):
        loop.run_until(start + at)
        if kind == 0:
            schedule(what)
        elif live:
            live[what % len(live)].force_complete()
    loop.run_until(start + 10**6)

    assert all(at == deadline for _, deadline, at in fired), [
        (n, at - deadline) for n, deadline, at in fired if at != deadline
    ]
    completed_early = {op.name for op in live} - {n for n, _, _ in fired}
    assert all(op.is_completed for op in live)
    assert len(fired) + len(completed_early) == len(live)
    assert loop.armed == []
