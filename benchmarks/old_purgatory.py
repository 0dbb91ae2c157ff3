"""Kafka 0.8's request purgatory, rendered faithfully -- for the benchmark only.

The broker uses :mod:`tidegate.server.purgatory`.  This module is not part of the
product: it lives beside ``benchmarks/purgatory.py`` (and ``purgatory_opcodes.py``) so
they can measure the design the timing wheels replaced, in the same language and driven
the same way; ``tests/unit/test_old_purgatory.py`` checks it.  It follows ``RequestPurgatory`` of Kafka
0.8.0/0.8.1 (and the "Request Purgatory (0.8)" wiki page):

* Every delayed request is put in a per-request delay queue (Java ``DelayQueue``; here a
  ``heapq`` of ``(due_ms, seq, request)``): O(log n) insert, no random delete.
* It is also appended to a watcher list for each of its keys (``(topic, partition)``).
* Completing a request only sets its ``satisfied`` flag.  It stays in the delay queue
  until it is due -- the reaper then pops it and skips it -- or until a purge, and stays
  in its watcher lists until the key is checked or a purge.
* The reaper (:meth:`RequestPurgatory.advance_clock`, the sans-IO form of the reaper
  thread's loop) expires due requests that nobody satisfied, then, when the number of
  requests watched since the last purge reaches ``purge_interval``
  (``*.purgatory.purge.interval.requests``), scans the whole delay queue and every
  watcher list and removes the satisfied requests, whether or not there are many.
* Watcher lists are never removed from the key map (0.8's ``Pool`` kept every key).

Same API surface as the new purgatory where it makes sense (``try_complete_else_watch``,
``check_and_complete``, ``watched``, ``delayed``, ``advance_clock``), so the benchmark
drives both identically.  Single-threaded: no locks (0.8 synchronised on each request
and each watcher list; one event loop needs neither).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Hashable

from tidegate.clock import Clock

__all__ = ["OldDelayedOperation", "RequestPurgatory"]


class OldDelayedOperation:
    """0.8's ``DelayedRequest``: a delay and an atomic ``satisfied`` flag.

    Same callbacks as :class:`tidegate.server.purgatory.DelayedOperation`:
    :meth:`try_complete` (0.8's ``checkSatisfied``; calls :meth:`force_complete` when the
    condition holds), :meth:`on_complete`, :meth:`on_expiration`.
    """

    __slots__ = ("delay_ms", "satisfied")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.satisfied = False

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        pass

    def force_complete(self) -> bool:
        """``satisfied.compareAndSet(false, true)``, then respond.  Exactly once."""
        if self.satisfied:
            return False
        self.satisfied = True
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self.satisfied


class RequestPurgatory:
    """Watchers per key plus a delay queue, with a request-count purge interval."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        purge_interval: int = 1000,
    ) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._clock = clock.milliseconds
        self._watchers_for_key: dict[Hashable, list[OldDelayedOperation]] = {}
        self._delay_queue: list[tuple[int, int, OldDelayedOperation]] = []
        self._seq = itertools.count()
        self._request_counter = 0  # requests watched since the last purge
        self.expirations_total = 0
        self.purges_total = 0

    def try_complete_else_watch(
        self, operation: OldDelayedOperation, watch_keys: Collection[Hashable]
    ) -> bool:
        """Check the request once; if not satisfied, ``watch`` it.  True iff completed.

        (0.8's KafkaApis checked satisfaction before calling ``watch``; ``watch`` itself
        bumps the request counter, appends to every key's list and enqueues the request
        for the reaper.)
        """
        if not watch_keys:
            raise ValueError("the watch key list can't be empty")
        if operation.try_complete():
            return True
        # watch(operation, watch_keys), inlined as the new purgatory inlines its watching
        self._request_counter += 1
        watchers = self._watchers_for_key
        for key in watch_keys:
            lst = watchers.get(key)
            if lst is None:
                watchers[key] = [operation]
            else:
                lst.append(operation)
        heapq.heappush(
            self._delay_queue,
            (self._clock() + operation.delay_ms, next(self._seq), operation),
        )
        return False

    def watch(self, operation: OldDelayedOperation, watch_keys: Collection[Hashable]) -> None:
        """0.8's ``watch``: count the request, add it to every key's list, enqueue it."""
        self._request_counter += 1
        watchers = self._watchers_for_key
        for key in watch_keys:
            lst = watchers.get(key)
            if lst is None:
                watchers[key] = [operation]
            else:
                lst.append(operation)
        heapq.heappush(
            self._delay_queue,
            (self._clock() + operation.delay_ms, next(self._seq), operation),
        )

    def check_and_complete(self, key: Hashable) -> int:
        """0.8's ``update(key)`` / ``collectSatisfiedRequests``: walk the key's list, drop
        satisfied requests, check the others; return how many this call satisfied."""
        watchers = self._watchers_for_key
        ops = watchers.get(key)
        if not ops:
            return 0
        # walk a detached list so that callbacks watching on this key cannot disturb it
        watchers[key] = []
        keep: list[OldDelayedOperation] = []
        completed = 0
        for op in ops:
            if op.satisfied:
                continue  # satisfied by someone else: remove it
            if op.try_complete():
                completed += 1
            else:
                keep.append(op)
        keep.extend(watchers[key])
        watchers[key] = keep
        return completed

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """One pass of the reaper loop: expire due requests, then purge if it is time.

        ``pollExpired`` pops every due request; already-satisfied ones are skipped (they
        paid for their heap slot until now).  ``timeout_ms`` is for signature parity only.
        Returns True if any request was due.
        """
        now = self._clock()
        queue = self._delay_queue
        heappop = heapq.heappop
        due = False
        while queue and queue[0][0] <= now:
            op = heappop(queue)[2]
            due = True
            if not op.satisfied:
                op.satisfied = True
                op.on_complete()
                self.expirations_total += 1
                op.on_expiration()
        if self._request_counter >= self.purge_interval:
            self.purge()
        return due

    def purge(self) -> int:
        """Remove satisfied requests from the delay queue and every watcher list."""
        self._request_counter = 0
        self.purges_total += 1
        queue = self._delay_queue
        live = [item for item in queue if not item[2].satisfied]
        purged = len(queue) - len(live)
        if purged:
            heapq.heapify(live)
            queue[:] = live
        for ops in self._watchers_for_key.values():
            kept = [op for op in ops if not op.satisfied]
            if len(kept) != len(ops):
                purged += len(ops) - len(kept)
                ops[:] = kept
        return purged

    def shutdown(self) -> None:
        self._delay_queue.clear()

    @property
    def watched(self) -> int:
        """Sum of watcher list sizes (satisfied-but-unpurged requests included)."""
        return sum(map(len, self._watchers_for_key.values()))

    @property
    def delayed(self) -> int:
        """Requests in the delay queue -- satisfied ones included until due or purged."""
        return len(self._delay_queue)

    @property
    def unsatisfied(self) -> int:
        """Requests in the delay queue still waiting (0.8's NumDelayedRequests); O(n)."""
        return sum(1 for item in self._delay_queue if not item[2].satisfied)

    purgatory_size = watched

    def next_expiration_ms(self) -> int | None:
        """Due time of the earliest request in the delay queue (satisfied or not)."""
        return self._delay_queue[0][0] if self._delay_queue else None
