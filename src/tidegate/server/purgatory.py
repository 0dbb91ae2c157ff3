"""The request purgatory: delayed operations on hierarchical timing wheels.

A sans-IO rendering of Kafka's ``DelayedOperation`` and ``DelayedOperationPurgatory``
(server-common ``purgatory`` package).  A request that cannot be answered yet -- a
long-poll fetch waiting for ``min_bytes``, an ``acks=all`` produce waiting for its flush --
becomes a :class:`DelayedOperation`.  The purgatory watches it under one or more keys
(e.g. ``(topic, partition)``) so that an event on a key (an append, a flush, a deletion)
re-checks it via :meth:`DelayedOperationPurgatory.check_and_complete`, and puts it in a
:class:`~tidegate.server.timer.SystemTimer` so that it expires after ``delay_ms``.

Completing an operation removes it from the timer at once (O(1) unlink).  Its entries in
watcher lists are dropped lazily: when its keys are checked, or by a purge of all watcher
lists that runs when the *estimated* number of completed-but-still-watched operations
(estimated total minus timer size) exceeds ``purge_interval``.

Threading: tidegate runs every purgatory on one event loop, so there are no locks.
Kafka's per-operation lock and sharded watcher locks exist only to make concurrent
request threads safe; with a single thread the observable behaviour -- each operation
completes exactly once, no wake-up is lost between "try" and "watch", expiry runs
``on_complete`` then ``on_expiration`` -- is the same.  Callbacks (``on_complete``,
``on_expiration``) may call back into the purgatory (watch or check other operations).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable

from tidegate.server.timer import SystemTimer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask):
    """An operation whose answer may be delayed for at most ``delay_ms``.

    Subclasses implement :meth:`try_complete` (check the condition; if met, call
    :meth:`force_complete` and return its result), :meth:`on_complete` (build and send the
    answer: called exactly once, by whoever completes it) and :meth:`on_expiration`
    (called after ``on_complete`` when the operation timed out).
    """

    __slots__ = ("_completed", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        # TimerTask.__init__ inlined (one operation per delayed request)
        self.delay_ms = delay_ms
        self._entry = None
        self._completed = False
        self._purgatory: DelayedOperationPurgatory | None = None

    # -- to implement -------------------------------------------------------------
    def try_complete(self) -> bool:
        """Complete the operation if it can be; return True iff this call completed it."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """The completion logic; runs exactly once, inside :meth:`force_complete`."""

    def on_expiration(self) -> None:
        """Runs after :meth:`on_complete` when completion was forced by the timeout."""

    # -- mechanism ----------------------------------------------------------------
    def force_complete(self) -> bool:
        """Complete now if nobody has yet: True for exactly one caller.

        The winner cancels the timer entry and calls :meth:`on_complete`.
        """
        if self._completed:
            return False
        self._completed = True
        # cancel the timeout (inlined TimerTask.cancel(): once per completed operation).
        # The entry is dropped here, so only its list is cleared (what makes a second
        # remove a no-op); its next/prev die with it.
        entry = self._entry
        if entry is not None:
            lst = entry.list
            if lst is not None:
                nxt = entry.next
                prv = entry.prev
                nxt.prev = prv
                prv.next = nxt
                entry.list = None
                lst.task_counter.value -= 1
            self._entry = None
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    def safe_try_complete(self) -> bool:
        """:meth:`try_complete` unless already completed (then False)."""
        if self._completed:
            return False
        return self.try_complete()

    def try_complete_or_else(self, action: Callable[[], object]) -> bool:
        """Try; if not completed, run ``action`` (watch the keys) and try once more.

        Trying again after watching is what prevents a lost wake-up: an event that
        happened between the first try and the watch is seen by the second try, and any
        later event finds the operation on its watcher lists.
        """
        if self.try_complete():
            return True
        action()
        return self.try_complete()

    def run(self) -> None:
        """Expiry (called by the timer): if this forces completion, ``on_expiration``.

        That is ``if self.force_complete(): ...``, with force_complete inlined: half of
        the requests expire in the high-timeout benchmark.  Keep the two in step.
        """
        if self._completed:
            return
        self._completed = True
        entry = self._entry
        if entry is not None:
            # the timer unlinked the entry before running it; a deferred run (executor)
            # may find it in a bucket again if the task was re-added meanwhile
            lst = entry.list
            if lst is not None:
                lst.remove(entry)
            self._entry = None
        self.on_complete()
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory.expirations_total += 1
        self.on_expiration()


class DelayedOperationPurgatory:
    """Watcher lists keyed by any hashable, plus a timeout timer and the purge logic.

    One purgatory owns one timer (``delayed`` is the timer's size).  Drive it by calling
    :meth:`advance_clock` when ``timer.next_expiration_ms()`` is due; it expires what is
    due and purges watcher lists when needed.  Kafka's reaper also wakes every 200 ms
    while idle; an event-loop driver gets the same effect by calling ``advance_clock``
    soon after :attr:`purge_due` becomes true (see ``docs/purgatory.md``).

    Metrics, readable as plain attributes: :attr:`purgatory_size` (Kafka's
    PurgatorySize gauge, = :attr:`watched`), :attr:`num_delayed_operations`
    (NumDelayedOperations, = :attr:`delayed`) and :attr:`expirations_total` (a counter;
    the metrics layer turns it into expirations per second).
    """

    def __init__(
        self,
        name: str,
        timer: SystemTimer,
        purge_interval: int = 1000,
    ) -> None:
        self.name = name
        self.timer = timer
        self._timer_add = self.timer.add
        self._timer_advance = self.timer.advance_clock
        self._timer_count = self.timer._counter  # timer.size without the property call
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        # operations ever watched minus those purged (an over-estimate, as in Kafka)
        self.estimated_total_operations = 0
        self.expirations_total = 0
        self.purges_total = 0

    # -- operations -----------------------------------------------------------------
    def try_complete_else_watch(
        self, operation: DelayedOperation, watch_keys: Collection[Hashable]
    ) -> bool:
        """Complete ``operation`` now if possible, else watch it on every key and time it.

        Returns True iff the operation was completed by this call.  The sequence is
        Kafka's: try; watch all keys (stopping if it completes meanwhile) and count it
        once in the estimated total; try again (no lost wake-up); if still pending, add
        it to the timer.
        """
        if not watch_keys:
            raise ValueError("the watch key list can't be empty")
        if operation.try_complete():
            return True
        watchers = self._watchers
        operation._purgatory = self
        for key in watch_keys:
            if operation._completed:
                break
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [operation]
            else:
                ops.append(operation)
        self.estimated_total_operations += 1
        if operation.try_complete():
            return True
        if not operation._completed:
            self._timer_add(operation)
            if operation._completed:
                # it expired while being added (delay <= 0): make sure no entry is left
                operation.cancel()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watched on ``key``; return how many this did.

        Completed operations are dropped from the key's list (including ones completed
        elsewhere); the key is forgotten when its list becomes empty.
        """
        watchers = self._watchers
        ops = watchers.pop(key, None)
        if ops is None:
            return 0
        # The list is detached while we walk it, so callbacks that watch new operations
        # on this key (or check it again) cannot disturb the iteration.
        keep: list[DelayedOperation] = []
        completed = 0
        for op in ops:
            if op._completed:
                continue  # completed by someone else: just drop it
            if op.try_complete():
                completed += 1
            else:
                keep.append(op)
        added = watchers.get(key)
        if added is not None:  # watched on this key by a callback meanwhile
            keep.extend(added)
        if keep:
            watchers[key] = keep
        elif added is not None:
            del watchers[key]  # defensive: lists in the map are never empty
        return completed

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``: cancel the timeout of every operation on it (they are
        not completed) and return them.  Unknown key: an empty list."""
        ops = self._watchers.pop(key, None)
        if ops is None:
            return []
        for op in ops:
            op.cancel()
        return ops

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Expire what is due, then purge watcher lists if the estimate says so.

        Returns whether any timer bucket was due.  ``timeout_ms`` is passed to the timer
        for Kafka's signature; nothing blocks.
        """
        expired = self._timer_advance(timeout_ms)
        if self.estimated_total_operations - self._timer_count.value > self.purge_interval:
            self.purge()
        return expired

    def purge(self) -> int:
        """Drop completed operations from every watcher list; return how many entries.

        Resets the estimated total to the number of pending (timed) operations first, as
        Kafka does; operations watched during the purge are added on top.
        """
        self.estimated_total_operations = self.timer.size
        self.purges_total += 1
        watchers = self._watchers
        purged = 0
        for key, ops in list(watchers.items()):
            live = [op for op in ops if not op._completed]
            if len(live) != len(ops):
                purged += len(ops) - len(live)
                if live:
                    watchers[key] = live
                else:
                    del watchers[key]
        return purged

    def complete_all(self) -> int:
        """Force-complete every operation watched here, now (a broker shutting down
        answers its parked requests with what there is); how many this completed."""
        completed = 0
        for ops in list(self._watchers.values()):
            for op in list(ops):
                if op.force_complete():
                    completed += 1
        return completed

    def shutdown(self) -> None:
        """Stop the timer; pending operations will not expire any more."""
        self.timer.shutdown()

    # -- counts and metrics -----------------------------------------------------------
    @property
    def watched(self) -> int:
        """Sum of watcher list sizes: an operation counts once per key it is watched on,
        and completed operations count until they are dropped."""
        return sum(map(len, self._watchers.values()))

    @property
    def delayed(self) -> int:
        """Operations pending in the timer."""
        return self.timer.size

    @property
    def purge_due(self) -> bool:
        """True when the next :meth:`advance_clock` will purge the watcher lists."""
        return self.estimated_total_operations - self.timer.size > self.purge_interval

    purgatory_size = watched
    num_delayed_operations = delayed

    def watched_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def watchers_for(self, key: Hashable) -> list[DelayedOperation]:
        """A copy of the operations watched on ``key`` (for tests and debugging)."""
        return list(self._watchers.get(key, ()))

    def __repr__(self) -> str:
        return (
            f"DelayedOperationPurgatory({self.name!r}, watched={self.watched}, "
            f"delayed={self.delayed})"
        )
