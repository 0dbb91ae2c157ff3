"""Hierarchical timing wheels: Kafka's TimerTaskList/TimingWheel/Timer cases, fake clock.

Numbers in the test names refer to section 2 of ../shared/reference/kafka-internals.md.
"""

from __future__ import annotations

import random

import pytest

from tests.fake_loop import clock_at
from tidegate.clock import MockClock
from tidegate.server.timer import (
    BucketQueue,
    SelfTimedTask,
    SystemTimer,
    TaskCounter,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
    TimingWheel,
)


class RecordingTask(TimerTask):
    """Records (id, clock at run) into a shared list every time it runs."""

    def __init__(self, delay_ms: int, ident, out: list, clock: MockClock | None = None):
        super().__init__(delay_ms)
        self.ident = ident
        self.out = out
        self.clock = clock

    def run(self) -> None:
        self.out.append((self.ident, self.clock.milliseconds() if self.clock else None))


class NoopTask(TimerTask):
    def run(self) -> None:
        pass


def drive(timer: SystemTimer, clock: MockClock, limit: int = 100_000) -> int:
    """Jump the fake clock from one due bucket to the next until nothing is scheduled."""
    wakeups = 0
    while (nxt := timer.next_expiration_ms()) is not None:
        clock.set_milliseconds(max(clock.milliseconds(), nxt))
        assert timer.advance_clock() is True
        wakeups += 1
        assert wakeups < limit
    return wakeups


# --- case 1: TimingWheel.add -------------------------------------------------------------


@pytest.fixture
def wheel():
    counter = TaskCounter()
    queue = BucketQueue()
    return TimingWheel(10, 5, 1000, counter, queue), counter, queue


def test_1_wheel_add_valid_task_goes_into_a_bucket_and_queues_it(wheel):
    w, counter, queue = wheel
    assert w.add(TimerTaskEntry(NoopTask(20), 1020)) is True
    assert len(queue) == 1
    assert counter.value == 1
    bucket = w.buckets[(1020 // 10) % 5]
    assert bucket.expiration_ms == 1020
    assert len(bucket) == 1


def test_1_wheel_refuses_expired_task(wheel):
    w, counter, queue = wheel
    assert w.add(TimerTaskEntry(NoopTask(-1), 999)) is False
    assert counter.value == 0 and len(queue) == 0


def test_1_wheel_refuses_cancelled_task(wheel):
    w, counter, _ = wheel
    task = NoopTask(20)
    entry = TimerTaskEntry(task, 1020)
    task.cancel()
    assert task.is_cancelled
    assert w.add(entry) is False
    assert counter.value == 0


def test_1_wheel_refuses_task_in_the_current_tick(wheel):
    w, counter, _ = wheel
    assert w.add(TimerTaskEntry(NoopTask(5), 1005)) is False
    assert counter.value == 0


def test_1_same_bucket_round_queues_the_bucket_once(wheel):
    w, counter, queue = wheel
    for exp in (1020, 1021, 1029):
        assert w.add(TimerTaskEntry(NoopTask(0), exp))
    assert counter.value == 3
    assert len(queue) == 1  # a heap of buckets, not of tasks


# --- case 2: advance_clock ------------------------------------------------------------


def test_2_advance_clock_within_a_tick_does_not_move(wheel):
    w, _, _ = wheel
    w.advance_clock(1005)
    assert w.current_time_ms == 1000


def test_2_advance_clock_to_the_next_tick(wheel):
    w, _, _ = wheel
    w.advance_clock(1010)
    assert w.current_time_ms == 1010
    w.advance_clock(1037)
    assert w.current_time_ms == 1030  # rounded down to the tick


def test_2_start_is_rounded_down_to_the_tick():
    w = TimingWheel(10, 5, 1007, TaskCounter(), BucketQueue())
    assert w.current_time_ms == 1000


# --- case 3: overflow wheels ----------------------------------------------------------


def test_3_overflow_wheel_is_created_lazily_and_reused(wheel):
    w, counter, _ = wheel
    assert w.overflow_wheel is None
    assert w.add(TimerTaskEntry(NoopTask(60), 1060)) is True
    overflow = w.overflow_wheel
    assert overflow is not None
    assert overflow.tick_ms == 50 and overflow.wheel_size == 5
    assert overflow.current_time_ms == 1000
    assert w.add(TimerTaskEntry(NoopTask(61), 1061)) is True
    assert w.overflow_wheel is overflow
    assert counter.value == 2
    # both landed in the overflow wheel's bucket for [1050, 1100)
    assert overflow.buckets[(1060 // 50) % 5].expiration_ms == 1050
    assert len(overflow.buckets[(1060 // 50) % 5]) == 2


def test_3_advancing_moves_the_overflow_wheel_in_its_own_ticks(wheel):
    w, _, _ = wheel
    w.add(TimerTaskEntry(NoopTask(60), 1060))
    w.advance_clock(1060)
    assert w.current_time_ms == 1060
    assert w.overflow_wheel.current_time_ms == 1050


def test_3_task_at_plus_25_moves_from_level_2_down_to_level_1():
    clock = MockClock()
    timer = SystemTimer(tick_ms=1, wheel_size=20, clock=clock)
    out: list = []
    timer.add(RecordingTask(25, "t", out, clock))
    level1 = timer.timing_wheel
    level2 = level1.overflow_wheel
    assert level2 is not None and level2.tick_ms == 20 and level2.interval_ms == 400
    assert level2.buckets[1].expiration_ms == 20
    assert timer.next_expiration_ms() == 20
    clock.set_milliseconds(19)
    assert timer.advance_clock() is False
    clock.set_milliseconds(20)
    assert timer.advance_clock() is True
    assert out == []  # re-inserted, not run
    assert level1.buckets[25 % 20].expiration_ms == 25
    assert timer.next_expiration_ms() == 25
    clock.set_milliseconds(24)
    timer.advance_clock()
    assert out == []
    clock.set_milliseconds(25)
    timer.advance_clock()
    assert out == [("t", 25)]
    assert timer.size == 0


def test_3_three_levels_span_20_400_8000_ms():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    timer.add(NoopTask(7999))
    l1 = timer.timing_wheel
    l3 = l1.overflow_wheel.overflow_wheel
    assert l3 is not None and l3.tick_ms == 400 and l3.interval_ms == 8000
    assert l3.overflow_wheel is None
    timer.add(NoopTask(8000))
    assert l3.overflow_wheel is not None


# --- case 4: lists sharing a counter ------------------------------------------------------


def test_4_three_lists_share_a_counter_and_readding_moves_entries():
    counter = TaskCounter()
    list1, list2, list3 = (TimerTaskList(counter) for _ in range(3))
    tasks = []
    for i in range(1, 11):
        task = NoopTask(0)
        list1.add(TimerTaskEntry(task, 10))
        assert counter.value == i
        tasks.append(task)
    for task in tasks[:4]:
        before = counter.value
        list2.add(TimerTaskEntry(task, 10))  # a new entry removes the old one
        assert counter.value == before
    assert (len(list1), len(list2)) == (6, 4)
    for task in tasks[4:]:
        before = counter.value
        list3.add(TimerTaskEntry(task, 10))
        assert counter.value == before
    assert (len(list1), len(list2), len(list3)) == (0, 4, 6)
    assert counter.value == 10

    list1.foreach(TimerTask.cancel)
    assert (len(list1), len(list2), len(list3)) == (0, 4, 6)
    list2.foreach(TimerTask.cancel)
    assert (len(list1), len(list2), len(list3)) == (0, 0, 6)
    list3.foreach(TimerTask.cancel)
    assert (len(list1), len(list2), len(list3)) == (0, 0, 0)
    assert counter.value == 0


def test_4_add_removes_the_entry_from_its_other_list_first():
    counter = TaskCounter()
    a, b = TimerTaskList(counter), TimerTaskList(counter)
    entry = TimerTaskEntry(NoopTask(0), 5)
    a.add(entry)
    b.add(entry)  # same entry object moved
    assert (len(a), len(b), counter.value) == (0, 1, 1)
    assert entry.list is b


def test_4_remove_only_acts_on_its_own_entries():
    counter = TaskCounter()
    a, b = TimerTaskList(counter), TimerTaskList(counter)
    entry = TimerTaskEntry(NoopTask(0), 5)
    a.add(entry)
    b.remove(entry)
    assert (len(a), counter.value, entry.list) == (1, 1, a)
    a.remove(entry)
    assert (len(a), counter.value, entry.list) == (0, 0, None)
    a.remove(entry)  # idempotent
    assert counter.value == 0


def test_4_flush_hands_every_entry_over_in_order_and_unschedules_the_bucket():
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    entries = [TimerTaskEntry(NoopTask(0), 7) for _ in range(5)]
    for e in entries:
        bucket.add(e)
    assert bucket.set_expiration(7) is True
    seen = []
    bucket.flush(lambda e: seen.append((e, e.list)))
    assert [e for e, _ in seen] == entries
    assert all(lst is None for _, lst in seen)  # already unlinked when handed over
    assert bucket.expiration_ms == -1 and len(bucket) == 0 and counter.value == 0
    assert not bucket and bucket.is_empty


def test_4_set_expiration_reports_only_changes():
    bucket = TimerTaskList(TaskCounter())
    assert bucket.set_expiration(10) is True
    assert bucket.set_expiration(10) is False
    assert bucket.set_expiration(20) is True
    assert bucket.get_expiration() == 20


def test_4_a_task_holds_at_most_one_entry():
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    task = NoopTask(0)
    first = TimerTaskEntry(task, 1)
    bucket.add(first)
    second = TimerTaskEntry(task, 2)
    assert first.list is None and first.cancelled
    assert task.timer_task_entry is second and not second.cancelled
    assert counter.value == 0  # the old entry left; the new one is not in a list yet
    task.cancel()
    assert task.is_cancelled and second.cancelled


# --- case 5: list delay -------------------------------------------------------------------


def test_5_list_delay_follows_the_clock():
    clock = clock_at(123_456)
    bucket = TimerTaskList(TaskCounter())
    bucket.set_expiration(clock.milliseconds() + 10_000)
    clock.advance(5_000)
    assert bucket.get_delay(clock.milliseconds()) == 5_000
    clock.advance(7_000)
    assert bucket.get_delay(clock.milliseconds()) == 0  # never negative


# --- case 6: already expired tasks --------------------------------------------------------


def test_6_negative_delays_run_at_once():
    clock = clock_at(50)
    timer = SystemTimer(tick_ms=1, wheel_size=3, clock=clock)
    out: list = []
    for d in range(-5, 0):
        timer.add(RecordingTask(d, d, out, clock))
    timer.advance_clock(0)
    assert sorted(i for i, _ in out) == [-5, -4, -3, -2, -1]
    assert timer.size == 0


def test_6_expired_tasks_go_to_the_executor_when_one_is_injected():
    clock = MockClock()
    submitted: list = []
    timer = SystemTimer(tick_ms=1, wheel_size=3, clock=clock, executor=submitted.append)
    out: list = []
    for d in (-3, 0):
        timer.add(RecordingTask(d, d, out, clock))
    timer.add(RecordingTask(2, 2, out, clock))
    assert out == [] and len(submitted) == 2  # handed over, not run inline
    clock.set_milliseconds(2)
    timer.advance_clock()
    assert len(submitted) == 3
    for run in submitted:
        run()
    assert sorted(i for i, _ in out) == [-3, 0, 2]


# --- case 7: many tasks, each exactly once ------------------------------------------------


def test_7_every_task_runs_exactly_once_and_on_time():
    clock = MockClock()
    timer = SystemTimer(tick_ms=1, wheel_size=3, clock=clock)
    out: list = []
    expected = []
    tasks = []
    for i in range(5):
        tasks.append(RecordingTask(i, i, out, clock))
        expected.append(i)
    for i in range(10, 100):
        tasks += [RecordingTask(i, i, out, clock), RecordingTask(i, i, out, clock)]
        expected += [i, i]
    for i in range(100, 500):
        tasks.append(RecordingTask(i, i, out, clock))
        expected.append(i)
    random.Random(7).shuffle(tasks)
    for task in tasks:
        timer.add(task)
    drive(timer, clock)
    assert sorted(i for i, _ in out) == sorted(expected)
    # tick 1 and wake-ups exactly at bucket expirations: each ran at its expiration
    assert all(ran_at == i for i, ran_at in out)
    assert timer.size == 0
    assert timer.advance_clock() is False


def test_7_thousands_of_random_tasks_with_cancels_and_clock_jumps():
    rng = random.Random(1234)
    clock = clock_at(1_000_000)
    timer = SystemTimer(tick_ms=1, wheel_size=20, clock=clock)
    out: list = []
    live: dict[int, int] = {}  # id -> expiration
    cancelled: set[int] = set()
    tasks = {}
    next_id = 0
    for _round in range(200):
        for _ in range(rng.randrange(0, 60)):
            delay = rng.choice([rng.randrange(-3, 25), rng.randrange(0, 500),
                                rng.randrange(0, 20_000)])
            task = RecordingTask(delay, next_id, out, clock)
            tasks[next_id] = task
            live[next_id] = clock.milliseconds() + delay
            timer.add(task)
            next_id += 1
        for ident in rng.sample(sorted(live), k=min(len(live), rng.randrange(0, 5))):
            if ident not in {i for i, _ in out}:
                tasks[ident].cancel()
                cancelled.add(ident)
                del live[ident]
        clock.advance(rng.choice([0, 1, 3, 17, 250, 4_000]))
        timer.advance_clock()
    clock.advance(50_000)
    drive(timer, clock)
    ran = [i for i, _ in out]
    assert len(ran) == len(set(ran)), "a task ran twice"
    assert not cancelled & set(ran), "a cancelled task ran"
    assert set(ran) == set(range(next_id)) - cancelled
    for ident, ran_at in out:
        assert ran_at >= live[ident]
    assert timer.size == 0
    assert next_id > 4000


def test_7_tasks_never_run_before_their_expiration():
    clock = MockClock()
    timer = SystemTimer(tick_ms=1, wheel_size=20, clock=clock)
    out: list = []
    tasks = [RecordingTask(d, d, out, clock) for d in range(1, 3000, 7)]
    for t in tasks:
        timer.add(t)
    for now in range(3100):
        clock.set_milliseconds(now)
        timer.advance_clock()
        assert all(ran_at >= i for i, ran_at in out)
    assert sorted(i for i, _ in out) == list(range(1, 3000, 7))
    assert all(ran_at == i for i, ran_at in out)


# --- SystemTimer bookkeeping and the sans-IO driver contract ----------------------------


def test_size_counts_tasks_in_buckets_and_cancel_decrements_at_once():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    tasks = [NoopTask(d) for d in (5, 50, 5000, 5)]
    for t in tasks:
        timer.add(t)
    assert timer.size == 4
    tasks[1].cancel()
    assert timer.size == 3
    tasks[1].cancel()
    assert timer.size == 3


def test_readding_a_task_moves_it():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []
    task = RecordingTask(10, "x", out, clock)
    timer.add(task)
    task.delay_ms = 30
    timer.add(task)
    assert timer.size == 1
    clock.set_milliseconds(10)
    timer.advance_clock()
    assert out == []
    drive(timer, clock)
    assert out == [("x", 30)]


def test_the_heap_holds_buckets_not_tasks():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    for _ in range(1000):
        timer.add(NoopTask(5))
    assert timer.size == 1000
    assert len(timer._queue) == 1


def test_next_expiration_skips_buckets_whose_tasks_all_completed():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    early = [NoopTask(3) for _ in range(10)]
    for t in early:
        timer.add(t)
    late = NoopTask(12)
    timer.add(late)
    assert timer.next_expiration_ms() == 3
    for t in early:
        t.cancel()
    assert timer.next_expiration_ms() == 12  # no wake-up for an emptied bucket
    # the emptied bucket is scheduled again if a task lands in it in the same round
    again = NoopTask(3)
    timer.add(again)
    assert timer.next_expiration_ms() == 3
    late.cancel()
    again.cancel()
    assert timer.next_expiration_ms() is None


def test_on_schedule_reports_bucket_scheduling_not_each_task():
    clock = MockClock()
    scheduled: list[int] = []
    timer = SystemTimer(clock=clock, on_schedule=scheduled.append)
    for _ in range(100):
        timer.add(NoopTask(7))
    timer.add(NoopTask(9))
    timer.add(NoopTask(45))  # level 2 bucket [40, 60)
    assert scheduled == [7, 9, 40]


def test_a_single_wakeup_driver_sees_every_expiry():
    """Simulate an event loop that arms one wake-up and re-arms from on_schedule."""
    clock = MockClock()
    armed: list[int | None] = [None]

    def on_schedule(exp: int) -> None:
        if armed[0] is None or exp < armed[0]:
            armed[0] = exp

    timer = SystemTimer(clock=clock, on_schedule=on_schedule)
    out: list = []
    rng = random.Random(5)
    pending = 0
    wakeups = 0
    for step in range(300):
        if step < 200:
            for _ in range(3):
                timer.add(RecordingTask(rng.randrange(1, 900), step, out, clock))
                pending += 1
        target = clock.milliseconds() + 5
        # sleep until the armed wake-up if it is before the next "request"
        while armed[0] is not None and armed[0] <= target:
            clock.set_milliseconds(max(clock.milliseconds(), armed[0]))
            armed[0] = None
            timer.advance_clock()
            wakeups += 1
            nxt = timer.next_expiration_ms()
            if nxt is not None and (armed[0] is None or nxt < armed[0]):
                armed[0] = nxt
        clock.set_milliseconds(target)
    while armed[0] is not None:
        clock.set_milliseconds(max(clock.milliseconds(), armed[0]))
        armed[0] = None
        timer.advance_clock()
        wakeups += 1
        armed[0] = timer.next_expiration_ms()
    assert len(out) == pending
    assert timer.size == 0
    assert wakeups < clock.milliseconds()  # far fewer wake-ups than a 1 ms tick loop


def test_a_lagging_wheel_still_expires_on_time():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []
    clock.set_milliseconds(3_600_000)  # an hour idle: the wheels never moved
    timer.add(RecordingTask(500, "poll", out, clock))
    drive(timer, clock)
    assert out == [("poll", 3_600_500)]


def test_a_task_added_by_a_running_task_is_scheduled_normally():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []

    class Chain(TimerTask):
        def __init__(self, delay, left):
            super().__init__(delay)
            self.left = left

        def run(self):
            out.append(clock.milliseconds())
            if self.left:
                timer.add(Chain(self.delay_ms, self.left - 1))

    timer.add(Chain(7, 4))
    drive(timer, clock)
    assert out == [7, 14, 21, 28, 35]


def test_advance_clock_reports_whether_anything_was_due():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    assert timer.advance_clock() is False
    timer.add(NoopTask(2))
    clock.set_milliseconds(1)
    assert timer.advance_clock() is False
    clock.set_milliseconds(2)
    assert timer.advance_clock() is True


def test_shutdown_stops_the_timer():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []
    timer.add(RecordingTask(5, 1, out, clock))
    timer.shutdown()
    clock.set_milliseconds(10)
    assert timer.advance_clock() is False
    assert timer.next_expiration_ms() is None
    assert out == []
    with pytest.raises(RuntimeError):
        timer.add(NoopTask(1))


def test_wheel_rejects_nonsense_geometry():
    with pytest.raises(ValueError):
        TimingWheel(0, 20, 0, TaskCounter(), BucketQueue())


def test_bucket_queue_drops_stale_items():
    queue = BucketQueue()
    bucket = TimerTaskList(TaskCounter())
    bucket.set_expiration(5)
    queue.offer(bucket)
    bucket.set_expiration(50)  # rescheduled: the item for 5 is stale
    queue.offer(bucket)
    assert queue.poll(10) is None
    assert queue.poll(50) is bucket
    assert queue.poll(10_000) is None
    other = TimerTaskList(TaskCounter())
    other.set_expiration(7)
    queue.offer(other)
    other.flush(lambda e: None)  # flushed: unscheduled, the item is stale
    assert queue.peek_expiration() is None and len(queue) == 0


def test_a_task_due_within_the_current_tick_runs_at_once():
    clock = clock_at(1000)
    timer = SystemTimer(tick_ms=10, wheel_size=5, clock=clock)
    out: list = []
    timer.add(RecordingTask(5, "soon", out, clock))  # 1005 < current 1000 + tick 10
    assert out == [("soon", 1000)]
    assert timer.size == 0


def test_non_positive_delays_run_at_once_even_when_the_wheel_lags():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []
    clock.set_milliseconds(3_600_000)  # the wheels have not moved for an hour
    timer.add(RecordingTask(0, "zero", out, clock))
    timer.add(RecordingTask(-7, "negative", out, clock))
    assert out == [("zero", 3_600_000), ("negative", 3_600_000)]
    assert timer.size == 0


# --- the add fast path: the previous add's bucket is reused while the wheels stand still ---


def test_adds_with_one_expiration_share_a_bucket_and_each_runs_once():
    clock = MockClock()
    scheduled: list = []
    timer = SystemTimer(clock=clock, on_schedule=scheduled.append)
    out: list = []
    for i in range(5):
        timer.add(RecordingTask(200, i, out, clock))  # all expire at 200 (level 2)
    assert timer.size == 5
    assert scheduled == [200]  # one bucket, scheduled once
    drive(timer, clock)
    assert sorted(out) == [(i, 200) for i in range(5)]
    assert timer.size == 0


def test_an_add_after_the_wheels_moved_does_not_reuse_a_flushed_bucket():
    clock = MockClock()
    timer = SystemTimer(clock=clock)  # tick 1, wheel 20: level 2 spans 400 ms
    out: list = []
    timer.add(RecordingTask(25, "first", out, clock))  # level 2, bucket due at 20
    clock.set_milliseconds(20)
    assert timer.advance_clock() is True  # that bucket is flushed: "first" moves to level 1
    timer.add(RecordingTask(5, "second", out, clock))  # the same expiration, 25
    assert timer.size == 2
    assert timer.next_expiration_ms() == 25
    clock.set_milliseconds(25)
    assert timer.advance_clock() is True
    assert sorted(out) == [("first", 25), ("second", 25)]
    assert timer.size == 0


def test_an_add_after_its_emptied_bucket_was_unscheduled_schedules_it_again():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []
    gone = RecordingTask(200, "gone", out, clock)
    timer.add(gone)
    gone.cancel()
    assert timer.next_expiration_ms() is None  # the empty bucket is unscheduled
    timer.add(RecordingTask(200, "kept", out, clock))  # same expiration, same bucket
    assert timer.next_expiration_ms() == 200
    drive(timer, clock)
    assert out == [("kept", 200)]


def test_a_task_added_by_a_task_that_runs_during_advance_clock_is_placed_afresh():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    out: list = []

    class Chain(TimerTask):
        def __init__(self, delay_ms: int, left: int) -> None:
            super().__init__(delay_ms)
            self.left = left

        def run(self) -> None:
            out.append(clock.milliseconds())
            if self.left:
                timer.add(Chain(30, self.left - 1))  # re-entrant add while flushing

    timer.add(Chain(30, 3))
    timer.add(RecordingTask(60, "other", out, clock))
    drive(timer, clock)
    assert out == [30, 60, ("other", 60), 90, 120] or out == [30, ("other", 60), 60, 90, 120]
    assert timer.size == 0


class SelfTimed(SelfTimedTask):
    """A task that is its own entry, recording its (effective) runs."""

    __slots__ = ("ran",)

    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def run(self) -> None:
        if self.expire():
            self.ran += 1


def test_self_timed_tasks_run_at_their_deadline_across_the_levels():
    clock = MockClock()
    timer = SystemTimer(tick_ms=1, wheel_size=20, clock=clock)
    tasks = {delay: SelfTimed() for delay in (1, 19, 20, 399, 400, 8_000, 30_000)}
    for delay, task in tasks.items():
        timer.schedule(task, delay)
        assert task.pending and timer.size == len([t for t in tasks.values() if t.pending])
    for delay, task in sorted(tasks.items()):
        clock.advance(delay - clock.milliseconds() - 1)
        timer.advance_clock()
        assert task.ran == 0, delay  # not a millisecond early
        clock.advance(1)
        timer.advance_clock()
        assert task.ran == 1 and not task.pending, delay
    assert timer.size == 0


def test_a_self_timed_task_cancelled_or_scheduled_again_runs_once_at_its_last_deadline():
    clock = MockClock()
    timer = SystemTimer(clock=clock)
    cancelled, moved = SelfTimed(), SelfTimed()
    timer.schedule(cancelled, 10)
    timer.schedule(moved, 10)
    cancelled.cancel()
    cancelled.cancel()  # twice is harmless
    timer.schedule(moved, 50)  # moves it: one entry, the later deadline
    assert timer.size == 1 and not cancelled.pending
    clock.advance(10)
    timer.advance_clock()
    assert (cancelled.ran, moved.ran) == (0, 0)
    clock.advance(40)
    timer.advance_clock()
    assert (cancelled.ran, moved.ran) == (0, 1) and timer.size == 0


def test_a_self_timed_run_queued_on_the_executor_does_not_go_ahead_once_cancelled_or_rescheduled():
    clock = MockClock()
    queued: list = []
    timer = SystemTimer(clock=clock, executor=queued.append)
    a, b, c = SelfTimed(), SelfTimed(), SelfTimed()
    for task in (a, b, c):
        timer.schedule(task, 5)
    clock.advance(5)
    timer.advance_clock()
    assert len(queued) == 3 and a.pending  # handed out, not run yet: still pending
    b.cancel()
    timer.schedule(c, 100)
    for run in queued:
        run()
    assert (a.ran, b.ran, c.ran) == (1, 0, 0) and timer.size == 1


def test_self_timed_tasks_due_in_the_same_millisecond_share_their_expiration_int():
    clock = MockClock()
    clock.advance(10**9)  # expirations beyond the small-int cache
    timer = SystemTimer(clock=clock)
    a, b, c = SelfTimed(), SelfTimed(), SelfTimed()
    timer.schedule(a, 30_000)
    timer.schedule(b, 30_000)
    clock.advance(1)
    timer.schedule(c, 29_999)
    assert a.expiration_ms is b.expiration_ms is c.expiration_ms


def test_a_self_timed_task_with_no_delay_runs_at_once():
    timer = SystemTimer(clock=MockClock())
    task = SelfTimed()
    timer.schedule(task, 0)
    assert task.ran == 1 and timer.size == 0 and not task.pending
