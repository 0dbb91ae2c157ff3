"""Group commit for acks=all: one fsync round per partition log at a time.

After an acks=all append the produce handler asks for a flush of that log. If no
round is running one starts at once: the log's buffers are handed to a worker
thread to fsync (``Log.begin_flush`` / ``FlushTicket.run`` /
``Log.complete_flush``). Appends that arrive while a round runs are covered by
the next round, started as soon as the current one ends, so N producers writing
to a partition pay for about one fsync per round instead of one each. When a
round ends, ``on_flushed(key)`` lets the produce purgatory complete every
DelayedProduce the new recovery point satisfies.

The worker thread is the scheduler's (``submit(fn, on_done)``): the flusher decides
when rounds start and end, the shell runs the fsync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidegate.scheduler import OnDone

log = logging.getLogger(__name__)

Key = tuple[str, int]


class LogFlusher:
    def __init__(
        self,
        on_flushed: Callable[[Key], object],
        submit: Callable[[Callable[[], Any], OnDone], None],
        on_error: Callable[[Key, BaseException], object] | None = None,
    ) -> None:
        self.on_flushed = on_flushed
        self._submit = submit
        #: told of a failed fsync before ``on_flushed`` (the log dir goes offline)
        self.on_error = on_error
        #: a failed fsync stops every later round: the page cache's state is unknown
        #: after one (fsyncgate), so no later fsync may advance a recovery point
        self.halted = False
        self._running: dict[Key, Any] = {}  # key -> the log being flushed
        self._again: set[Key] = set()
        self.rounds = 0  # fsync rounds started (tests and docs compare it to requests)
        self.requests = 0

    def request(self, key: Key, plog: Any) -> None:
        """Make everything appended to ``plog`` so far durable, soon."""
        self.requests += 1
        if self.halted:
            self.on_flushed(key)
            return
        if key in self._running:
            self._again.add(key)
            return
        self._start(key, plog)

    def _start(self, key: Key, plog: Any) -> None:
        ticket = plog.begin_flush()
        self._running[key] = plog
        self.rounds += 1
        self._submit(ticket.run, lambda _result, exc: self._done(key, plog, ticket, exc))

    def _done(self, key: Key, plog: Any, ticket: Any, exc: BaseException | None) -> None:
        del self._running[key]
        if exc is not None:
            # The data stays unflushed. With on_error (the broker) the log dir goes
            # offline and waiting producers answer KAFKA_STORAGE_ERROR; without it
            # they time out (REQUEST_TIMED_OUT).
            self.halted = True
            if self.on_error is not None:
                self.on_error(key, exc)
            else:
                log.error("fsync of %s-%d failed: %s", key[0], key[1], exc)
        elif not self.halted:
            plog.complete_flush(ticket)
        try:
            self.on_flushed(key)
        finally:
            if key in self._again:
                self._again.discard(key)
                if not self.halted and not plog.closed and plog.recovery_point < plog.log_end_offset:
                    self._start(key, plog)

    @property
    def in_progress(self) -> int:
        return len(self._running)
