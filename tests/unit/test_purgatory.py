"""DelayedOperation and DelayedOperationPurgatory: Kafka's DelayedOperationTest cases.

Fake clock, no threads.  Numbers refer to section 2 of the reference's test cases.
"""

from __future__ import annotations

import random

import pytest

from tests.fake_loop import clock_at
from tidegate.clock import MockClock
from tidegate.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from tidegate.server.timer import SystemTimer


class MockOp(DelayedOperation):
    """Completable on demand; records every callback in ``events``."""

    def __init__(self, delay_ms: int, name: str = "", events: list | None = None):
        super().__init__(delay_ms)
        self.name = name
        self.completable = False
        self.events = events if events is not None else []
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if self.completable:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.events.append(("complete", self.name))

    def on_expiration(self) -> None:
        self.events.append(("expire", self.name))


@pytest.fixture
def clock():
    return clock_at(10_000)


@pytest.fixture
def purgatory(clock):
    p = DelayedOperationPurgatory("mock", SystemTimer(clock=clock))
    yield p
    p.shutdown()


def advance_to(purgatory: DelayedOperationPurgatory, clock: MockClock, t: int) -> None:
    """Event-loop style: wake at each due bucket up to ``t``."""
    while (nxt := purgatory.timer.next_expiration_ms()) is not None and nxt <= t:
        clock.set_milliseconds(max(clock.milliseconds(), nxt))
        purgatory.advance_clock()
    clock.set_milliseconds(max(clock.milliseconds(), t))
    purgatory.advance_clock()


# --- DelayedOperation -----------------------------------------------------------------


def test_force_complete_succeeds_exactly_once_and_cancels_the_timeout(purgatory, clock):
    op = MockOp(1000, "r")
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert purgatory.delayed == 1
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.is_completed
    assert purgatory.delayed == 0  # gone from the timer at once
    assert op.events == [("complete", "r")]
    advance_to(purgatory, clock, clock.milliseconds() + 5000)
    assert op.events == [("complete", "r")]  # no expiry after completion
    assert purgatory.expirations_total == 0


def test_try_complete_or_else_runs_the_action_only_when_not_complete():
    calls = []
    op = MockOp(1000)
    assert op.try_complete_or_else(lambda: calls.append("watch")) is False
    assert calls == ["watch"] and op.tries == 2
    done = MockOp(1000)
    done.completable = True
    assert done.try_complete_or_else(lambda: calls.append("nope")) is True
    assert calls == ["watch"] and done.tries == 1


def test_try_complete_or_else_second_try_catches_an_event_during_the_action():
    op = MockOp(1000)

    def watch():
        op.completable = True  # the event happens between the two tries

    assert op.try_complete_or_else(watch) is True
    assert op.is_completed


def test_safe_try_complete_does_not_retry_a_completed_operation():
    op = MockOp(1000)
    op.completable = True
    assert op.safe_try_complete() is True
    assert op.safe_try_complete() is False
    assert op.tries == 1


# --- case 8: satisfaction by check_and_complete -----------------------------------------


def test_8_request_satisfaction(purgatory):
    r1, r2 = MockOp(100_000, "r1"), MockOp(100_000, "r2")
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    assert purgatory.check_and_complete("test2") == 0
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 1
    assert purgatory.check_and_complete("test1") == 0
    r2.completable = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.check_and_complete("test2") == 0
    assert purgatory.watched == 0 and purgatory.delayed == 0
    assert purgatory.watched_keys() == []  # empty lists are forgotten


def test_8_operation_completable_at_once_is_neither_watched_nor_timed(purgatory):
    op = MockOp(1000)
    op.completable = True
    assert purgatory.try_complete_else_watch(op, ["k1", "k2"]) is True
    assert purgatory.watched == 0 and purgatory.delayed == 0
    assert purgatory.estimated_total_operations == 0


def test_8_operation_completed_by_the_second_try_is_watched_but_not_timed(purgatory):
    class SecondTime(MockOp):
        def try_complete(self):
            self.tries += 1
            return self.force_complete() if self.tries == 2 else False

    op = SecondTime(1000)
    assert purgatory.try_complete_else_watch(op, ["k1", "k2"]) is True
    assert purgatory.delayed == 0
    assert purgatory.watched == 2  # like Kafka: watched, dropped at the next check/purge
    assert purgatory.estimated_total_operations == 1
    assert purgatory.check_and_complete("k1") == 0
    assert purgatory.watched == 1


def test_8_watching_stops_at_the_first_key_after_completion(purgatory):
    op = MockOp(1000)
    keys = ["a", "b", "c"]

    class Keys(list):
        def __iter__(self):
            for i, k in enumerate(list.__iter__(self)):
                if i == 1:
                    op.force_complete()  # completed by someone while being watched
                yield k

    # Kafka returns the result of the second try_complete: False, the op was completed
    # by someone else; it is neither re-watched nor timed
    assert purgatory.try_complete_else_watch(op, Keys(keys)) is False
    assert op.is_completed
    assert purgatory.watchers_for("a") == [op]
    assert purgatory.watchers_for("b") == [] and purgatory.watchers_for("c") == []
    assert purgatory.delayed == 0


def test_8_empty_watch_keys_are_an_error(purgatory):
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(MockOp(1000), [])


# --- case 9: expiry ---------------------------------------------------------------------


def test_9_request_expiry(purgatory, clock):
    events: list = []
    start = clock.milliseconds()
    r1 = MockOp(20, "r1", events)
    r2 = MockOp(200_000, "r2", events)
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    advance_to(purgatory, clock, start + 19)
    assert not r1.is_completed
    advance_to(purgatory, clock, start + 20)
    assert r1.is_completed
    assert events == [("complete", "r1"), ("expire", "r1")]  # on_complete, then on_expiration
    assert not r2.is_completed
    assert purgatory.delayed == 1
    assert purgatory.expirations_total == 1
    # the expired op is still watched until its key is checked (or a purge)
    assert purgatory.watched == 2
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.watched == 1


def test_9_a_zero_delay_operation_expires_while_being_added(purgatory):
    op = MockOp(0, "z")
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert op.is_completed and op.events == [("complete", "z"), ("expire", "z")]
    assert purgatory.delayed == 0 and op.is_cancelled
    assert purgatory.expirations_total == 1


def test_9_expiry_with_an_injected_executor_still_completes_once(clock):
    deferred: list = []
    p = DelayedOperationPurgatory("x", SystemTimer(clock=clock, executor=deferred.append))
    op = MockOp(5, "e")
    p.try_complete_else_watch(op, ["k"])
    clock.advance(5)
    p.advance_clock()
    assert not op.is_completed and len(deferred) == 1
    op.completable = True
    assert p.check_and_complete("k") == 1  # completed before the deferred expiry ran
    deferred[0]()
    assert op.events == [("complete", "e")]
    assert p.expirations_total == 0


# --- case 10: bookkeeping -------------------------------------------------------------------


def test_10_request_purge_bookkeeping(purgatory):
    r1, r2, r3 = MockOp(100_000), MockOp(100_000), MockOp(100_000)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert purgatory.delayed == 3
    assert purgatory.watched == 6
    assert purgatory.num_delayed_operations == 3 and purgatory.purgatory_size == 6

    r2.completable = True
    r2.try_complete()
    assert purgatory.delayed == 2
    r3.completable = True
    r3.try_complete()
    assert purgatory.delayed == 1

    purgatory.check_and_complete("test1")
    assert purgatory.watched == 4
    purgatory.check_and_complete("test2")
    assert purgatory.watched == 2
    purgatory.check_and_complete("test3")
    assert purgatory.watched == 1
    assert purgatory.watched_keys() == ["test1"]


# --- case 11: cancel_for_key ----------------------------------------------------------------


def test_11_cancel_for_key_returns_the_cancelled_operations(purgatory, clock):
    a, b, c = MockOp(10_000), MockOp(10_000), MockOp(10_000)
    purgatory.try_complete_else_watch(a, ["key"])
    purgatory.try_complete_else_watch(b, ["key"])
    purgatory.try_complete_else_watch(c, ["key2"])
    cancelled = purgatory.cancel_for_key("key")
    assert cancelled == [a, b]
    assert purgatory.delayed == 1
    assert purgatory.watched == 1
    assert not a.is_completed and not b.is_completed  # cancelled, not completed
    advance_to(purgatory, clock, clock.milliseconds() + 20_000)
    assert a.events == [] and b.events == []  # and they never expire
    assert c.is_completed


def test_11_cancel_for_an_unknown_key_is_empty(purgatory):
    assert purgatory.cancel_for_key("nope") == []


def test_complete_all_answers_every_watched_operation_once(purgatory):
    """A broker shutting down answers its parked requests: each operation completes once,
    whatever keys it is watched on, and its timeout is cancelled."""
    events: list = []
    a, b = MockOp(10_000, "a", events), MockOp(10_000, "b", events)
    purgatory.try_complete_else_watch(a, ["k1", "k2"])
    purgatory.try_complete_else_watch(b, ["k2"])
    assert purgatory.complete_all() == 2
    assert events == [("complete", "a"), ("complete", "b")] and purgatory.delayed == 0
    assert purgatory.complete_all() == 0


# --- case 12: purge trigger ------------------------------------------------------------------


def make_purgatory(clock, purge_interval):
    return DelayedOperationPurgatory("p", SystemTimer(clock=clock), purge_interval=purge_interval)


def test_12_completing_more_than_the_interval_purges_on_the_next_advance(clock):
    p = make_purgatory(clock, purge_interval=10)
    ops = [MockOp(100_000, str(i)) for i in range(25)]
    for op in ops:
        p.try_complete_else_watch(op, ["a", "b"])
    assert p.watched == 50 and p.estimated_total_operations == 25
    for op in ops[:11]:
        op.force_complete()  # completed without checking their keys
    assert p.watched == 50
    assert p.purge_due
    p.advance_clock()
    assert p.watched == 2 * 14  # only the pending operations are left
    assert p.estimated_total_operations == 14 == p.delayed
    assert p.purges_total == 1
    assert not p.purge_due


def test_12_no_purge_at_or_below_the_interval(clock):
    p = make_purgatory(clock, purge_interval=10)
    ops = [MockOp(100_000) for _ in range(25)]
    for op in ops:
        p.try_complete_else_watch(op, ["a", "b"])
    for op in ops[:10]:
        op.force_complete()
    assert not p.purge_due
    p.advance_clock()
    assert p.watched == 50 and p.purges_total == 0


def test_12_expired_operations_count_towards_the_purge_and_empty_keys_go(clock):
    p = make_purgatory(clock, purge_interval=5)
    for i in range(8):
        p.try_complete_else_watch(MockOp(50), [("topic", i)])
    keeper = MockOp(100_000)
    p.try_complete_else_watch(keeper, [("topic", 99)])
    clock.advance(50)
    p.advance_clock()  # 8 expire: estimated 9 - delayed 1 > 5 -> purge in the same call
    assert p.expirations_total == 8
    assert p.watched == 1
    assert p.watched_keys() == [("topic", 99)]


def test_12_purge_is_driven_by_the_estimate_not_by_the_watch_list_size(clock):
    """Many pending (not completed) operations never trigger a purge: the old design's
    weakness was purging by size."""
    p = make_purgatory(clock, purge_interval=10)
    for _ in range(500):
        p.try_complete_else_watch(MockOp(100_000), ["a", "b", "c"])
    p.advance_clock()
    assert p.purges_total == 0 and p.watched == 1500


# --- case 13: "concurrency" -------------------------------------------------------------------


def test_13_many_ops_checked_repeatedly_from_many_keys_complete_exactly_once(clock):
    """Kafka races 20 threads checking 100 ops; on one event loop the interleaving is
    the order of events, so we shuffle checks of many keys (each op on its own key and
    on shared keys), make each op completable after a random number of attempts, and
    check that every op completes exactly once and none is left behind."""
    rng = random.Random(42)
    p = make_purgatory(clock, purge_interval=20)
    completions: dict[int, int] = {}

    class Op(DelayedOperation):
        def __init__(self, i):
            super().__init__(10_000)
            self.i = i
            self.attempts_left = 20
            self.completable = False

        def try_complete(self):
            return self.completable and self.force_complete()

        def on_complete(self):
            completions[self.i] = completions.get(self.i, 0) + 1

    ops = [Op(i) for i in range(100)]
    shared = [f"shared-{j}" for j in range(7)]
    for op in ops:
        keys = [f"key{op.i}", rng.choice(shared), rng.choice(shared)]
        assert p.try_complete_else_watch(op, keys) is False

    schedule = [(op, attempt) for op in ops for attempt in range(20)]
    rng.shuffle(schedule)
    for op, _ in schedule:
        op.attempts_left -= 1
        if op.attempts_left == 0:
            op.completable = True
        # "racing checkers": the op's own key, a shared key, sometimes a purge
        p.check_and_complete(f"key{op.i}")
        p.check_and_complete(rng.choice(shared))
        if rng.random() < 0.05:
            p.advance_clock()
    assert all(op.is_completed for op in ops), "lost wake-up"
    assert completions == {i: 1 for i in range(100)}, "double or missing completion"
    assert p.delayed == 0
    clock.advance(20_000)
    p.advance_clock()
    assert completions == {i: 1 for i in range(100)}
    assert p.expirations_total == 0


def test_13_callbacks_may_reenter_the_purgatory_on_the_key_being_checked(purgatory):
    """on_complete watching a new op on the same key, and checking the key again,
    while check_and_complete walks that key's list."""
    events: list = []
    late = MockOp(100_000, "late", events)
    nested_results = []

    class Reentrant(MockOp):
        def on_complete(self):
            super().on_complete()
            purgatory.try_complete_else_watch(late, ["k"])
            nested_results.append(purgatory.check_and_complete("k"))

    first = Reentrant(100_000, "first", events)
    second = MockOp(100_000, "second", events)
    purgatory.try_complete_else_watch(first, ["k"])
    purgatory.try_complete_else_watch(second, ["k"])
    first.completable = True
    second.completable = True
    assert purgatory.check_and_complete("k") == 2
    assert nested_results == [0]  # the nested check saw only the new op, not completable
    assert events == [("complete", "first"), ("complete", "second")]
    assert purgatory.watchers_for("k") == [late]
    assert purgatory.delayed == 1
    late.completable = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched == 0


def test_13_completion_during_expiry_of_the_same_bucket_is_exactly_once(purgatory, clock):
    """An expiring op's on_complete completes its neighbour in the same bucket."""
    events: list = []
    b = MockOp(30, "b", events)

    class CompletesNeighbour(MockOp):
        def on_complete(self):
            super().on_complete()
            b.force_complete()

    a = CompletesNeighbour(30, "a", events)
    purgatory.try_complete_else_watch(a, ["k"])
    purgatory.try_complete_else_watch(b, ["k"])
    advance_to(purgatory, clock, clock.milliseconds() + 30)
    assert events == [("complete", "a"), ("complete", "b"), ("expire", "a")]
    assert purgatory.expirations_total == 1
    assert purgatory.delayed == 0


# --- shutdown and metrics -----------------------------------------------------------------


def test_metrics_are_plain_readable_attributes(purgatory, clock):
    for i in range(3):
        purgatory.try_complete_else_watch(MockOp(10), [i, "all"])
    assert (purgatory.purgatory_size, purgatory.num_delayed_operations) == (6, 3)
    clock.advance(10)
    purgatory.advance_clock()
    assert purgatory.expirations_total == 3
    assert purgatory.num_delayed_operations == 0


def test_shutdown_stops_expiry(purgatory, clock):
    op = MockOp(10)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.shutdown()
    clock.advance(100)
    assert purgatory.advance_clock() is False
    assert not op.is_completed
