"""The 0.8 purgatory (benchmark baseline): watch, complete by check, expire, purge by
request count -- and its characteristic costs (satisfied requests linger)."""

from __future__ import annotations

import pytest

from benchmarks.old_purgatory import OldDelayedOperation, RequestPurgatory
from tests.fake_loop import clock_at


class MockOp(OldDelayedOperation):
    def __init__(self, delay_ms: int, name: str = "", events: list | None = None):
        super().__init__(delay_ms)
        self.name = name
        self.completable = False
        self.events = events if events is not None else []

    def try_complete(self) -> bool:
        return self.completable and self.force_complete()

    def on_complete(self) -> None:
        self.events.append(("complete", self.name))

    def on_expiration(self) -> None:
        self.events.append(("expire", self.name))


@pytest.fixture
def clock():
    return clock_at(5_000)


def test_watch_then_complete_by_check(clock):
    p = RequestPurgatory("old", clock)
    r1, r2 = MockOp(100_000, "r1"), MockOp(100_000, "r2")
    assert p.check_and_complete("k1") == 0
    assert p.try_complete_else_watch(r1, ["k1", "k2"]) is False
    assert p.try_complete_else_watch(r2, ["k1"]) is False
    assert p.watched == 3 and p.delayed == 2
    assert p.check_and_complete("k1") == 0
    r1.completable = True
    assert p.check_and_complete("k1") == 1
    assert p.check_and_complete("k1") == 0
    assert r1.events == [("complete", "r1")]
    # the satisfied request is still in k2's list and in the delay queue
    assert p.watched == 2
    assert p.delayed == 2 and p.unsatisfied == 1


def test_immediately_satisfied_request_is_not_watched(clock):
    p = RequestPurgatory("old", clock)
    op = MockOp(100)
    op.completable = True
    assert p.try_complete_else_watch(op, ["k"]) is True
    assert p.watched == 0 and p.delayed == 0


def test_empty_keys_are_an_error(clock):
    with pytest.raises(ValueError):
        RequestPurgatory("old", clock).try_complete_else_watch(MockOp(1), [])


def test_reaper_expires_due_unsatisfied_requests_once(clock):
    p = RequestPurgatory("old", clock)
    events: list = []
    r1, r2, r3 = MockOp(20, "r1", events), MockOp(20, "r2", events), MockOp(200, "r3", events)
    for r in (r1, r2, r3):
        p.try_complete_else_watch(r, ["k"])
    r2.force_complete()  # satisfied: stays in the delay queue until due
    clock.advance(19)
    assert p.advance_clock() is False
    assert p.delayed == 3
    clock.advance(1)
    assert p.advance_clock() is True
    assert events == [("complete", "r2"), ("complete", "r1"), ("expire", "r1")]
    assert p.delayed == 1 and p.expirations_total == 1
    clock.advance(1000)
    p.advance_clock()
    p.advance_clock()
    assert events[-2:] == [("complete", "r3"), ("expire", "r3")]
    assert p.expirations_total == 2
    assert p.next_expiration_ms() is None


def test_purge_by_request_count_cleans_the_queue_and_every_watcher_list(clock):
    p = RequestPurgatory("old", clock, purge_interval=10)
    ops = [MockOp(100_000, str(i)) for i in range(9)]
    for op in ops:
        p.try_complete_else_watch(op, ["a", "b"])
    for op in ops[:6]:
        op.force_complete()
    p.advance_clock()
    assert p.purges_total == 0  # 9 requests since the last purge: not yet
    assert p.watched == 18 and p.delayed == 9
    last = MockOp(100_000)
    p.try_complete_else_watch(last, ["c"])
    p.advance_clock()  # 10th request: purge, however few are satisfied
    assert p.purges_total == 1
    assert p.watched == 3 * 2 + 1
    assert p.delayed == 4 and p.unsatisfied == 4
    p.advance_clock()
    assert p.purges_total == 1  # the counter restarted


def test_purge_runs_even_when_nothing_is_satisfied(clock):
    """The interval counts requests, not completed ones: the old design's weakness."""
    p = RequestPurgatory("old", clock, purge_interval=10)
    for _ in range(30):
        p.try_complete_else_watch(MockOp(100_000), ["a"])
        p.advance_clock()
    assert p.purges_total == 3
    assert p.watched == 30


def test_keys_stay_in_the_map_after_their_lists_empty(clock):
    p = RequestPurgatory("old", clock)
    op = MockOp(100_000)
    p.try_complete_else_watch(op, ["k"])
    op.completable = True
    assert p.check_and_complete("k") == 1
    assert p.watched == 0
    assert "k" in p._watchers_for_key  # 0.8's Pool never removed keys
