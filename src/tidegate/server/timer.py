"""Hierarchical timing wheels: the timeout timer behind the request purgatory.

A sans-IO rendering of Kafka's ``server-common`` timer package (``TimerTask``,
``TimerTaskEntry``, ``TimerTaskList``, ``TimingWheel``, ``SystemTimer``): plain objects,
an injected :class:`~tidegate.clock.Clock`, no threads, no sleeps. Times are the clock's
monotonic milliseconds: typed :data:`~tidegate.clock.MonotonicMs` where they leave the
timer (:meth:`SystemTimer.next_expiration_ms`, ``on_schedule``); inside the wheels they
are plain ints on that clock (the hot paths add a delay to the time and bucket it).

How the pieces fit:

* A :class:`TimerTask` is something to run when its delay has passed.  Adding it to a
  timer wraps it in a :class:`TimerTaskEntry` (the link cell of a doubly linked list)
  and the task keeps a reference to that entry, so cancelling is an O(1) unlink.
* A :class:`TimerTaskList` is one bucket of a wheel: a circular doubly linked list with
  a sentinel.  An entry in no list has ``list`` None and its links point at
  :data:`UNLINKED` (never None, so the links type-check as plain entries).  All buckets of all levels share one :class:`TaskCounter`, so the timer
  knows how many tasks are pending without walking anything.
* A :class:`TimingWheel` has ``wheel_size`` buckets of ``tick_ms`` each.  A task beyond
  the wheel's interval goes to an overflow wheel (tick = this wheel's interval), created
  on demand; when an overflow bucket comes due its tasks are re-inserted and move down.
* :class:`SystemTimer` drives the wheels.  Kafka blocks a reaper thread on a
  ``DelayQueue`` of *buckets*; here the same priority queue (:class:`BucketQueue`, a heap
  of buckets, not of tasks) is polled by :meth:`SystemTimer.advance_clock`, and
  :meth:`SystemTimer.next_expiration_ms` tells an event loop when the earliest non-empty
  bucket is due.  A bucket is pushed only when its expiration changes, so the heap holds
  at most a few buckets per wheel level however many tasks are pending.

Driving it from asyncio (what the broker integration does): arm *one* ``loop.call_at``
for ``next_expiration_ms()``; when it fires call ``advance_clock()`` and re-arm for the
new ``next_expiration_ms()``; pass ``on_schedule`` so that a bucket queued earlier than
the armed wake-up re-arms it.  Never a 1 ms polling loop: the loop only wakes when a
non-empty bucket is due.

Single-threaded by design (one event loop): none of these classes take locks.  Kafka's
locks exist to let request threads add tasks while the reaper advances the clock; here
every call happens on the same thread, so the observable behaviour is the same without
them.  Task callbacks may add tasks to the timer while it is advancing (re-entrancy is
safe: a re-added task never lands in the bucket being flushed).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from tidegate.clock import Clock, MonotonicMs

__all__ = [
    "UNLINKED",
    "BucketQueue",
    "SystemTimer",
    "TaskCounter",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
]


class TaskCounter:
    """A mutable int shared by every bucket of one timer (Kafka's ``AtomicInteger``)."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"TaskCounter({self.value})"


class TimerTask:
    """Something to run once ``delay_ms`` has passed after it was added to a timer.

    Subclasses override :meth:`run`.  A task holds at most one :class:`TimerTaskEntry`;
    creating a new entry for it removes the old one from its bucket, so a task is never
    in two buckets.  "Cancelled" means "holds no entry".
    """

    __slots__ = ("_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._entry: TimerTaskEntry | None = None

    def run(self) -> None:
        """Called (by the timer's executor) when the task expires."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Remove the task from its bucket, if any; it will not run.  O(1)."""
        entry = self._entry
        if entry is not None:
            # Inlined TimerTaskEntry.remove() + TimerTaskList.remove(): this runs once per
            # completed purgatory operation, the hottest path after add.
            lst = entry.list
            if lst is not None:
                nxt = entry.next
                prv = entry.prev
                nxt.prev = prv
                prv.next = nxt
                entry.next = entry.prev = UNLINKED
                entry.list = None
                lst.task_counter.value -= 1
            self._entry = None

    @property
    def is_cancelled(self) -> bool:
        return self._entry is None

    @property
    def timer_task_entry(self) -> TimerTaskEntry | None:
        return self._entry


class FunctionTask(TimerTask):
    """A task that calls ``fn`` once (retries and backoffs of the coordinators)."""

    __slots__ = ("fn",)

    def __init__(self, delay_ms: int, fn: Callable[[], object]) -> None:
        super().__init__(delay_ms)
        self.fn = fn

    def run(self) -> None:
        self.fn()


class _Links:
    """What a bucket links: ``expiration_ms`` (absolute), ``list`` (the bucket, or None)
    and the neighbours there (:data:`UNLINKED` when in none)."""

    __slots__ = ("expiration_ms", "list", "next", "prev")

    expiration_ms: int
    list: TimerTaskList | None
    next: TimerTaskEntry
    prev: TimerTaskEntry


class TimerTaskEntry(_Links):
    """The link cell of a task in a bucket; ``expiration_ms`` is absolute.

    ``list`` is the bucket the entry is in, or None; ``next`` and ``prev`` are its
    neighbours there, or :data:`UNLINKED` when it is in none.
    """

    __slots__ = ("task",)

    task: TimerTask

    def __init__(self, task: TimerTask, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.list = None
        self.next = self.prev = UNLINKED
        # if the task is already held by another entry, that entry is removed
        # (inlined: one entry is created per timed task)
        old = task._entry
        if old is not None:
            lst = old.list
            if lst is not None:
                lst.remove(old)
        task._entry = self

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or given a newer entry."""
        return self.task._entry is not self

    def remove(self) -> None:
        lst = self.list
        if lst is not None:
            lst.remove(self)

    def __repr__(self) -> str:
        return f"TimerTaskEntry({self.task!r}, expiration_ms={self.expiration_ms})"


class SelfTimedTask(_Links):
    """A timed task that is its own bucket entry: one object where a :class:`TimerTask`
    takes two (the task and its :class:`TimerTaskEntry`), for timers holding very many
    tasks (a share-partition's acquisition locks, one per acquired batch). Scheduled with
    :meth:`SystemTimer.schedule`, cancelled with :meth:`cancel`; subclasses override
    :meth:`run`.

    ``expiration_ms`` is -1 while no expiry is pending: it is set when scheduled and
    cleared by :meth:`cancel` and by :meth:`expire` (a subclass's ``run`` calls it
    first), so a run queued on an executor finds out whether the task was cancelled or
    scheduled again meanwhile. The timer reads ``task`` and ``_entry`` of what a bucket
    holds: here both are the task itself (class-level properties, no slot)."""

    __slots__ = ()

    def __init__(self) -> None:
        self.expiration_ms = -1
        self.list = None
        self.next = self.prev = UNLINKED

    @property
    def task(self) -> SelfTimedTask:
        return self

    @property
    def _entry(self) -> SelfTimedTask:
        return self

    @property
    def cancelled(self) -> bool:
        return self.expiration_ms < 0

    @property
    def pending(self) -> bool:
        """Scheduled, and neither cancelled nor run since."""
        return self.expiration_ms >= 0

    def run(self) -> None:
        raise NotImplementedError

    def expire(self) -> bool:
        """In ``run``: True if this expiry stands (the task is still due: not cancelled,
        not scheduled again since the timer handed it out); the task is then no longer
        pending."""
        if self.list is not None or self.expiration_ms < 0:
            return False
        self.expiration_ms = -1
        return True

    def cancel(self) -> None:
        """Unlink the task from its bucket, if any; a queued run will not go ahead. O(1)."""
        lst = self.list
        if lst is not None:
            lst.remove(self)  # type: ignore[arg-type]  # linked as an entry
        self.expiration_ms = -1


class _SentinelEntry(TimerTaskEntry):
    """An entry without a task, linked to itself: a bucket's root (its ``next`` is the
    head, its ``prev`` the tail) or :data:`UNLINKED`.  Only its links are ever read."""

    __slots__ = ()

    def __init__(self) -> None:
        self.expiration_ms = -1
        self.list = None
        self.next = self.prev = self

    def __repr__(self) -> str:
        return "UNLINKED" if self is UNLINKED else "TimerTaskList root"


#: Where the links of an entry that is in no bucket point.
UNLINKED: TimerTaskEntry = _SentinelEntry()


class TimerTaskList:
    """One bucket: a circular doubly linked list of entries with a sentinel root.

    ``expiration_ms`` is the bucket's expiration (-1 when it is not scheduled).  The
    ``task_counter`` is shared with the other buckets of the same timer.
    """

    __slots__ = ("_root", "expiration_ms", "task_counter")

    def __init__(self, task_counter: TaskCounter) -> None:
        self.task_counter = task_counter
        self.expiration_ms = -1
        self._root: TimerTaskEntry = _SentinelEntry()

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket expiration; True only if the value changed."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def get_expiration(self) -> int:
        return self.expiration_ms

    def get_delay(self, now_ms: int) -> int:
        """Milliseconds until the bucket is due: ``max(expiration - now, 0)``."""
        return max(self.expiration_ms - now_ms, 0)

    def add(self, entry: TimerTaskEntry) -> None:
        """Append ``entry``, first removing it from any other list it is in."""
        lst = entry.list
        if lst is not None:
            lst.remove(entry)
        root = self._root
        tail = root.prev
        entry.next = root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self.task_counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink ``entry`` if (and only if) it is in this list."""
        if entry.list is self:
            nxt = entry.next
            prv = entry.prev
            nxt.prev = prv
            prv.next = nxt
            entry.next = entry.prev = UNLINKED
            entry.list = None
            self.task_counter.value -= 1

    def flush(self, callback: Callable[[TimerTaskEntry], object]) -> None:
        """Remove every entry, hand each to ``callback``; the bucket becomes unscheduled."""
        root = self._root
        counter = self.task_counter
        head = root.next
        while head is not root:
            # unlink the head (inlined remove(): head.list is self by construction)
            nxt = head.next
            nxt.prev = root
            root.next = nxt
            head.next = head.prev = UNLINKED
            head.list = None
            counter.value -= 1
            callback(head)
            head = root.next
        self.expiration_ms = -1

    def foreach(self, fn: Callable[[TimerTask], object]) -> None:
        """Call ``fn(task)`` for every task whose entry is still current (may cancel)."""
        root = self._root
        entry = root.next
        while entry is not root:
            nxt = entry.next
            if not entry.cancelled:
                fn(entry.task)
            entry = nxt

    def entries(self) -> Iterator[TimerTaskEntry]:
        root = self._root
        entry = root.next
        while entry is not root:
            nxt = entry.next
            yield entry
            entry = nxt

    @property
    def is_empty(self) -> bool:
        return self._root.next is self._root

    def __len__(self) -> int:  # O(n): for tests and debugging
        return sum(1 for _ in self.entries())

    def __bool__(self) -> bool:
        return self._root.next is not self._root

    def __repr__(self) -> str:
        return f"TimerTaskList(expiration_ms={self.expiration_ms})"


class BucketQueue:
    """A min-heap of buckets ordered by expiration: the sans-IO ``DelayQueue<TimerTaskList>``.

    A bucket is offered when its expiration changes (see :meth:`TimingWheel.add`).  The
    heap holds ``(expiration, seq, bucket)``; an item is *stale* when the bucket has since
    been flushed or rescheduled (its expiration no longer matches) and is dropped lazily.
    ``on_offer(expiration_ms)``, if set, is told about every offer, so an event loop can
    move its single wake-up earlier.
    """

    __slots__ = ("_heap", "_seq", "on_offer")

    def __init__(self, on_offer: Callable[[MonotonicMs], object] | None = None) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self.on_offer = on_offer

    def offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._heap, (expiration, next(self._seq), bucket))
        on_offer = self.on_offer
        if on_offer is not None:
            on_offer(MonotonicMs(expiration))

    def poll(self, now_ms: int) -> TimerTaskList | None:
        """Pop and return the earliest bucket due at ``now_ms`` (expiration <= now), or None."""
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if bucket.expiration_ms != expiration:
                heapq.heappop(heap)  # stale: flushed or rescheduled since it was offered
                continue
            if expiration > now_ms:
                return None
            heapq.heappop(heap)
            return bucket
        return None

    def peek_expiration(self) -> MonotonicMs | None:
        """Expiration of the earliest *non-empty* scheduled bucket, or None.

        Stale items are dropped.  An empty bucket at the head (all its tasks completed
        before it came due) is unscheduled on the spot -- what flushing it would do,
        minus advancing the wheel, which may lag safely -- so an event loop never wakes
        up for a bucket with nothing in it.  If a task lands in it later, setting its
        expiration again re-offers it.
        """
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if bucket.expiration_ms != expiration:
                heapq.heappop(heap)
                continue
            if bucket._root.next is bucket._root:
                heapq.heappop(heap)
                bucket.expiration_ms = -1
                continue
            return MonotonicMs(expiration)
        return None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class TimingWheel:
    """One level of hierarchical timing wheels.

    ``interval_ms = tick_ms * wheel_size``; the wheel holds entries expiring in
    ``[current_time_ms + tick_ms, current_time_ms + interval_ms)``; later ones go to the
    lazily created ``overflow_wheel`` (tick = this interval, same size).
    """

    __slots__ = (
        "buckets",
        "current_time_ms",
        "interval_ms",
        "overflow_wheel",
        "queue",
        "task_counter",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        task_counter: TaskCounter,
        queue: BucketQueue,
    ) -> None:
        if tick_ms <= 0 or wheel_size <= 0:
            raise ValueError("tick_ms and wheel_size must be positive")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.task_counter = task_counter
        self.queue = queue
        self.buckets = [TimerTaskList(task_counter) for _ in range(wheel_size)]
        # rounded down to a multiple of tick_ms
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self.overflow_wheel: TimingWheel | None = None

    def _add_overflow_wheel(self) -> TimingWheel:
        wheel = self.overflow_wheel
        if wheel is None:
            wheel = self.overflow_wheel = TimingWheel(
                self.interval_ms,
                self.wheel_size,
                self.current_time_ms,
                self.task_counter,
                self.queue,
            )
        return wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Put ``entry`` in its bucket.  False if cancelled or already expired (run it).

        Walks up the overflow wheels iteratively (Kafka recurses) and links the entry
        into the bucket inline: this runs for every timed task and every re-insertion.
        """
        expiration = entry.expiration_ms
        if entry.task._entry is not entry:
            return False  # cancelled
        wheel = self
        while True:
            tick = wheel.tick_ms
            current = wheel.current_time_ms
            if expiration < current + tick:
                return False  # already expired: the caller runs it
            if expiration < current + wheel.interval_ms:
                break
            overflow = wheel.overflow_wheel
            if overflow is None:
                overflow = wheel._add_overflow_wheel()
            wheel = overflow
        virtual_id = expiration // tick
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        # bucket.add(entry), inlined
        lst = entry.list
        if lst is not None:
            lst.remove(entry)
        root = bucket._root
        tail = root.prev
        entry.next = root
        entry.prev = tail
        entry.list = bucket
        tail.next = entry
        root.prev = entry
        bucket.task_counter.value += 1
        # Offer the bucket only when its expiration changes, i.e. it is being reused for
        # a new round; later adds in the same round pass the same value.
        bucket_expiration = virtual_id * tick
        if bucket.expiration_ms != bucket_expiration:
            bucket.expiration_ms = bucket_expiration
            wheel.queue.offer(bucket)
        return True

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - (time_ms % self.tick_ms)
            overflow = self.overflow_wheel
            if overflow is not None:
                overflow.advance_clock(self.current_time_ms)


class _TimerEntry(TimerTaskEntry):
    """A :class:`TimerTaskEntry` that :meth:`SystemTimer.add` fills in itself.

    ``__init__`` is ``object.__init__``, so ``_TimerEntry()`` allocates in C without a
    Python frame: about 40% cheaper than ``object.__new__(TimerTaskEntry)``, and it
    runs once per delayed request.
    """

    __slots__ = ()
    __init__ = object.__init__


class SystemTimer:
    """The timer: hierarchical wheels plus a priority queue of buckets, clock injected.

    ``clock.milliseconds()`` is the time of every add and advance.  Expired
    tasks are handed to ``executor(task.run)``; by default ``run()`` is called inline.
    An asyncio driver may pass ``loop.call_soon``.  ``on_schedule(expiration_ms)`` is
    called whenever a bucket is (re)scheduled -- at most once per bucket per wheel
    round, never per task -- so the driver can move its one wake-up earlier.
    """

    __slots__ = (
        "_clock",
        "_closed",
        "_counter",
        "_executor",
        "_hint_bucket",
        "_hint_expiration",
        "_last_scheduled",
        "_now",
        "_queue",
        "_wheel",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int = 1,
        wheel_size: int = 20,
        *,
        clock: Clock,
        start_ms: MonotonicMs | None = None,
        executor: Callable[[Callable[[], object]], object] | None = None,
        on_schedule: Callable[[MonotonicMs], object] | None = None,
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self._clock = clock
        #: the clock's reading, bound once: add() runs once per delayed request
        self._now = clock.milliseconds
        self._executor = executor
        self._counter = TaskCounter()
        self._queue = BucketQueue(on_schedule)
        self._wheel = TimingWheel(
            tick_ms,
            wheel_size,
            clock.milliseconds() if start_ms is None else start_ms,
            self._counter,
            self._queue,
        )
        self._closed = False
        # The bucket of the last add and its expiration: valid until a bucket is polled
        # (the wheels move, buckets are flushed) or peeked (an empty one may be
        # unscheduled). An expiration of None means no hint, and the bucket is then
        # not looked at (a placeholder until the first add sets it).
        self._hint_expiration: int | None = None
        self._hint_bucket: TimerTaskList = self._wheel.buckets[0]
        #: the expiration of the last :meth:`schedule` (its int object is shared)
        self._last_scheduled = -1

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def on_schedule(self) -> Callable[[MonotonicMs], object] | None:
        return self._queue.on_offer

    @on_schedule.setter
    def on_schedule(self, callback: Callable[[MonotonicMs], object] | None) -> None:
        self._queue.on_offer = callback

    @property
    def timing_wheel(self) -> TimingWheel:
        return self._wheel

    def _execute(self, task: TimerTask) -> None:
        executor = self._executor
        if executor is None:
            task.run()
        else:
            executor(task.run)

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now.

        A task whose delay is <= 0, or that the wheel refuses as already expired, runs
        now (unless it was cancelled).  Adding a task that is already scheduled moves it.
        """
        if self._closed:
            raise RuntimeError("timer is shut down")
        delay = task.delay_ms
        # This is TimerTaskEntry(task, now + delay) followed by TimingWheel.add(entry),
        # inlined: it runs once per delayed request, and two Python frames are a large
        # part of its cost.  Keep it in step with those two methods.
        entry = _TimerEntry()
        entry.task = task
        entry.expiration_ms = expiration = delay + self._now()
        old = task._entry
        if old is not None:
            lst = old.list
            if lst is not None:
                lst.remove(old)
        task._entry = entry
        if delay > 0:
            if expiration == self._hint_expiration:
                # Same expiration as the previous add and no bucket polled since, so the
                # wheels have not moved: the same bucket, already scheduled.  Requests
                # with one timeout arriving in the same millisecond take this path.
                bucket = self._hint_bucket
                root = bucket._root
                tail = root.prev
                entry.next = root
                entry.prev = tail
                entry.list = bucket
                tail.next = entry
                root.prev = entry
                self._counter.value += 1
                return
            wheel = self._wheel
            while True:
                tick = wheel.tick_ms
                current = wheel.current_time_ms
                if expiration < current + tick:
                    break  # already expired: run it below
                if expiration < current + wheel.interval_ms:
                    virtual_id = expiration // tick
                    bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                    root = bucket._root
                    tail = root.prev
                    entry.next = root
                    entry.prev = tail
                    entry.list = bucket
                    tail.next = entry
                    root.prev = entry
                    bucket.task_counter.value += 1
                    bucket_expiration = virtual_id * tick
                    if bucket.expiration_ms != bucket_expiration:
                        bucket.expiration_ms = bucket_expiration
                        wheel.queue.offer(bucket)
                    self._hint_expiration = expiration
                    self._hint_bucket = bucket
                    return
                overflow = wheel.overflow_wheel
                if overflow is None:
                    overflow = wheel._add_overflow_wheel()
                wheel = overflow
        entry.next = entry.prev = UNLINKED
        entry.list = None
        self._execute(task)

    def schedule(self, task: SelfTimedTask, delay_ms: int) -> None:
        """Schedule ``task`` (its own entry) to run ``delay_ms`` from now, moving it if it
        is scheduled already; a delay <= 0, or one the wheel refuses as expired, runs it
        now. Tasks due at the same millisecond share one ``expiration_ms`` int object
        (a timer of locks acquired many per millisecond keeps one per millisecond)."""
        if self._closed:
            raise RuntimeError("timer is shut down")
        task.cancel()
        expiration = delay_ms + self._now()
        last = self._last_scheduled
        task.expiration_ms = last if expiration == last else expiration
        self._last_scheduled = task.expiration_ms
        if delay_ms > 0 and self._wheel.add(task):  # type: ignore[arg-type]  # links as an entry
            return
        self._execute(task)  # type: ignore[arg-type]  # runs as a task

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Expire everything that is due now; True if any bucket was due.

        Pops every bucket whose expiration <= the clock's time, advances the wheels to it and
        flushes it (each entry moves down a level or runs).  ``timeout_ms`` is kept for
        Kafka's signature only: a sans-IO timer never blocks.  The caller waits, until
        :meth:`next_expiration_ms`, instead.

        Long on purpose (~100 lines): the wheels' advance, the bucket's flush and the
        re-add are inlined into one loop with their lookups in locals, the hot path of
        every expiry (benchmarks/purgatory.py measures it against the 0.8 design).
        """
        if self._closed:
            return False
        queue = self._queue
        heap = queue._heap
        if not heap:
            return False
        now = self._now()
        if heap[0][0] > now:
            # Nothing due (the head may be stale, but every item behind it is later
            # still): the common case when the driver ticks often, so no poll() frame.
            return False
        bucket = queue.poll(now)
        if bucket is None:
            return False
        wheel = self._wheel
        wheel_add = wheel.add
        executor = self._executor
        counter = self._counter
        buckets = wheel.buckets
        wheel_size = wheel.wheel_size
        tick = wheel.tick_ms
        interval = wheel.interval_ms
        while bucket is not None:
            self._hint_expiration = None  # the wheels move: see add()
            # TimingWheel.advance_clock(bucket expiration), iteratively over the levels
            time_ms = bucket.expiration_ms
            level: TimingWheel | None = wheel
            while level is not None and time_ms >= level.current_time_ms + level.tick_ms:
                time_ms = level.current_time_ms = time_ms - (time_ms % level.tick_ms)
                level = level.overflow_wheel
            current = wheel.current_time_ms
            due_before = current + tick
            level_end = current + interval
            # bucket.flush(re-add or run), inlined, and so is the re-add (TimingWheel.add)
            # for the two outcomes every first- and second-level bucket produces: an
            # entry that is due runs; one that expires within the first level moves to
            # its first-level bucket (a 200 ms timeout does this once: level 2, then
            # level 1).  Entries of higher levels take the general path.  root.next is
            # re-read after each entry, since a task that runs may cancel others.
            root = bucket._root
            head = root.next
            while head is not root:
                nxt = head.next
                nxt.prev = root
                root.next = nxt
                expiration = head.expiration_ms
                if expiration < due_before:
                    head.next = head.prev = UNLINKED
                    head.list = None
                    counter.value -= 1
                    task = head.task
                    if task._entry is head:  # not cancelled: it is due, run it
                        if executor is None:
                            task.run()
                        else:
                            executor(task.run)
                        # a task may have advanced the clock re-entrantly
                        current = wheel.current_time_ms
                        due_before = current + tick
                        level_end = current + interval
                elif expiration < level_end:
                    # move down to the first level; the task count is unchanged
                    virtual_id = expiration // tick
                    target = buckets[virtual_id % wheel_size]
                    troot = target._root
                    tail = troot.prev
                    head.next = troot
                    head.prev = tail
                    head.list = target
                    tail.next = head
                    troot.prev = head
                    target_expiration = virtual_id * tick
                    if target.expiration_ms != target_expiration:
                        target.expiration_ms = target_expiration
                        queue.offer(target)
                else:  # expires beyond the first level: TimingWheel.add finds it a level
                    head.next = head.prev = UNLINKED
                    head.list = None
                    counter.value -= 1
                    if not wheel_add(head):
                        task = head.task
                        if task._entry is head:
                            if executor is None:
                                task.run()
                            else:
                                executor(task.run)
                head = root.next
            bucket.expiration_ms = -1
            bucket = queue.poll(now)
        return True

    def next_expiration_ms(self) -> MonotonicMs | None:
        """When the earliest non-empty bucket is due (absolute ms), or None if none is."""
        if self._closed:
            return None
        self._hint_expiration = None  # peeking may unschedule an empty bucket: see add()
        return self._queue.peek_expiration()

    @property
    def size(self) -> int:
        """Tasks currently in buckets (cancelled or completed ones leave at once)."""
        return self._counter.value

    def shutdown(self) -> None:
        """Stop the timer: pending tasks never run, ``add`` raises afterwards."""
        self._closed = True
        self._queue.clear()

    @property
    def is_shutdown(self) -> bool:
        return self._closed
