"""Kafka's producer ``BufferPool``, with KIP-1332's multi-chunk allocation.

The pool bounds the memory of every open and in-flight batch to ``buffer.memory``.
It is shared by the threads calling ``send`` (which allocate) and the sender
thread (which returns memory when batches complete), so, as in Kafka, all state is
guarded by one lock and each blocked allocation waits on its own condition in a
FIFO queue; memory handed back wakes the head of the queue.

Two ways to allocate, one per ``buffer.memory.allocation.strategy``:

``allocate(size, max_block_ms)`` (``full``)
    One buffer. ``size == poolable_size`` reuses a buffer from the free list. When
    memory is short the caller waits in FIFO order and accumulates partial amounts
    across wake-ups (so a large request is not starved), refunding what it
    accumulated on timeout or close.

``allocate_chunks(total_size, max_block_ms)`` (``incremental``)
    ``ceil(total_size / chunk)`` chunks of ``poolable_size`` bytes, all or nothing.
    A request takes one waiter slot however many chunks it needs and holds nothing
    while parked: it takes its chunks at once when it is at the head of the queue and
    they are all available, so a timeout, close or interrupt has nothing to refund
    but what it never took. Requests arriving while others are parked queue behind
    them (a stream of small requests cannot starve a large one), and a
    non-blocking request (``max_block_ms == 0``, the mid-batch growth path) fails
    at once instead of queueing. Kafka's ``allocateChunks`` instead lets the woken
    head hold chunks between wake-ups; the observable contract (atomic, FIFO,
    exact refunds) is the same.

Buffers are ``bytearray`` objects. Memory is reserved under the lock and the
``bytearray`` itself is created outside it, as Kafka allocates the ByteBuffer
outside the lock.
"""

from __future__ import annotations

import threading
from collections import deque

from tidegate.clock import Clock
from tidegate.metrics.stats import TimeUnit

from .errors import BufferExhaustedError, ProducerClosedError
from .metrics import Metrics

__all__ = ["MAX_CHUNK_SIZE", "MIN_CHUNK_SIZE", "BufferPool", "chunk_size_for"]

#: KIP-1332: chunks are ``min(16384, batch.size)`` bytes ...
MAX_CHUNK_SIZE = 16 * 1024
#: ... and at least 128, so the 61-byte batch header always fits in the first chunk.
MIN_CHUNK_SIZE = 128


def chunk_size_for(batch_size: int) -> int:
    """The chunk size KIP-1332 uses for ``batch.size``."""
    return max(MIN_CHUNK_SIZE, min(MAX_CHUNK_SIZE, batch_size))


class BufferPool:
    """A pool of ``bytearray`` buffers kept under ``memory`` bytes."""

    def __init__(
        self,
        memory: int,
        poolable_size: int,
        *,
        clock: Clock,
        metrics: Metrics | None = None,
    ) -> None:
        if memory <= 0 or poolable_size <= 0:
            raise ValueError("memory and poolable_size must be positive")
        self.total_memory = memory
        self.poolable_size = poolable_size
        self._clock = clock
        self._lock = threading.Lock()
        self._free: deque[bytearray] = deque()
        self._waiters: deque[threading.Condition] = deque()
        self._non_pooled_available = memory
        self._closed = False
        metrics = metrics if metrics is not None else Metrics(clock)
        self.metrics = metrics
        self._wait_time = metrics.meter(
            "bufferpool-wait-ratio", "bufferpool-wait-time-ns-total", unit=TimeUnit.NANOSECONDS
        )
        self._exhausted = metrics.meter("buffer-exhausted-rate", "buffer-exhausted-total")
        metrics.add("buffer-total-bytes", lambda: self.total_memory)
        metrics.add("buffer-available-bytes", self.available_memory)
        metrics.add("waiting-threads", self.queued)

    # -- allocation ------------------------------------------------------------------

    def allocate(self, size: int, max_block_ms: float) -> bytearray:
        """A buffer of ``size`` bytes, blocking up to ``max_block_ms`` for memory.

        Raises ValueError if ``size`` exceeds the whole pool, BufferExhaustedError
        on timeout (counted in ``buffer-exhausted-*``), ProducerClosedError if the
        pool is or becomes closed.
        """
        if size > self.total_memory:
            raise ValueError(
                f"Attempt to allocate {size} bytes, but there is a hard limit of "
                f"{self.total_memory} on memory allocations."
            )
        buffer: bytearray | None = None
        with self._lock:
            if self._closed:
                raise ProducerClosedError("Producer closed while allocating memory")
            try:
                if size == self.poolable_size and self._free:
                    return self._free.popleft()
                free_list_bytes = len(self._free) * self.poolable_size
                if self._non_pooled_available + free_list_bytes >= size:
                    self._free_up(size)
                    self._non_pooled_available -= size
                else:
                    accumulated = 0
                    more_memory = threading.Condition(self._lock)
                    remaining_ns = int(max_block_ms * 1_000_000)
                    self._waiters.append(more_memory)
                    try:
                        while accumulated < size:
                            remaining_ns -= self._await(more_memory, remaining_ns, size, True)
                            if accumulated == 0 and size == self.poolable_size and self._free:
                                buffer = self._free.popleft()
                                accumulated = size
                            else:
                                self._free_up(size - accumulated)
                                got = min(size - accumulated, self._non_pooled_available)
                                self._non_pooled_available -= got
                                accumulated += got
                        accumulated = 0  # success: nothing to refund
                    finally:
                        self._non_pooled_available += accumulated
                        self._waiters.remove(more_memory)
            finally:
                self._signal_next_waiter_if_memory_available()
        if buffer is not None:
            return buffer
        return bytearray(size)

    def allocate_chunks(self, total_size: int, max_block_ms: float) -> list[bytearray]:
        """``ceil(total_size / poolable_size)`` chunks, atomically.

        ``max_block_ms <= 0`` never waits: BufferExhaustedError at once if the chunks
        are not free now (or others are queued). A timeout here is *not* counted in
        ``buffer-exhausted-*``: the accumulator counts a record as dropped only when
        its blocking first-record allocation fails (:meth:`record_buffer_exhausted`).
        """
        if total_size <= 0:
            raise ValueError(f"totalSize must be positive: {total_size}")
        chunk = self.poolable_size
        n = -(-total_size // chunk)
        required = n * chunk
        if required > self.total_memory:
            raise ValueError(
                f"Attempt to allocate {total_size} bytes ({n} chunks of {chunk} = {required} "
                f"bytes), but the hard limit on memory allocations is {self.total_memory}."
            )
        with self._lock:
            if self._closed:
                raise ProducerClosedError("Producer closed while allocating memory")
            try:
                if not self._waiters and self._available_locked() >= required:
                    pooled = self._take_chunks_locked(n)
                elif max_block_ms <= 0:
                    raise BufferExhaustedError(
                        f"Failed to allocate {required} bytes ({n} chunks of {chunk}) without "
                        f"blocking. Total memory: {self.total_memory} bytes. Available memory: "
                        f"{self._available_locked()} bytes."
                    )
                else:
                    more_memory = threading.Condition(self._lock)
                    remaining_ns = int(max_block_ms * 1_000_000)
                    self._waiters.append(more_memory)
                    try:
                        while True:
                            remaining_ns -= self._await(more_memory, remaining_ns, required, False)
                            if (
                                self._waiters[0] is more_memory
                                and self._available_locked() >= required
                            ):
                                pooled = self._take_chunks_locked(n)
                                break
                    finally:
                        self._waiters.remove(more_memory)
            finally:
                self._signal_next_waiter_if_memory_available()
        while len(pooled) < n:
            pooled.append(bytearray(chunk))
        return pooled

    def try_allocate_chunks(self, total_size: int) -> list[bytearray] | None:
        """Non-blocking :meth:`allocate_chunks`: the chunks, or None if not free now."""
        try:
            return self.allocate_chunks(total_size, 0)
        except BufferExhaustedError:
            return None

    def _await(
        self, more_memory: threading.Condition, remaining_ns: int, size: int, count_exhausted: bool
    ) -> int:
        """Wait once (lock held); the nanoseconds waited. Raises on close or timeout."""
        clock = self._clock
        start = clock.nanoseconds()
        try:
            signalled = clock.wait(more_memory, remaining_ns)
        finally:
            waited = max(0, clock.nanoseconds() - start)
            self._wait_time.record(waited)
        if self._closed:
            raise ProducerClosedError("Producer closed while allocating memory")
        if not signalled:
            # For chunk requests the head may have been woken and found too little; a
            # timeout still means the whole request failed, nothing was taken.
            if count_exhausted:
                self._exhausted.record()
            raise BufferExhaustedError(
                f"Failed to allocate {size} bytes within the configured max blocking time. "
                f"Total memory: {self.total_memory} bytes. Available memory: "
                f"{self._available_locked()} bytes. Poolable size: {self.poolable_size} bytes"
            )
        return waited

    def _take_chunks_locked(self, n: int) -> list[bytearray]:
        """Take ``n`` chunks' worth (free list first, the rest as raw memory); the caller
        has checked that it is available. Returns the pooled chunks taken."""
        pooled: list[bytearray] = []
        free = self._free
        while len(pooled) < n and free:
            pooled.append(free.popleft())
        raw = (n - len(pooled)) * self.poolable_size
        self._non_pooled_available -= raw
        return pooled

    def _free_up(self, size: int) -> None:
        """Release free-list buffers (from the tail) into non-pooled memory until
        ``size`` bytes are unallocated or the free list is empty."""
        free = self._free
        while free and self._non_pooled_available < size:
            self._non_pooled_available += len(free.pop())

    def _available_locked(self) -> int:
        return self._non_pooled_available + len(self._free) * self.poolable_size

    def _signal_next_waiter_if_memory_available(self) -> None:
        if (self._non_pooled_available > 0 or self._free) and self._waiters:
            self._waiters[0].notify()

    # -- release -------------------------------------------------------------------------

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Return ``buffer`` (``size`` bytes of pool memory, default its length). A buffer
        of exactly the poolable size goes on the free list; other memory is simply
        unreserved. Wakes the head waiter. Works after close."""
        if size is None:
            size = len(buffer)
        with self._lock:
            if size == self.poolable_size and len(buffer) == size:
                self._free.append(buffer)
            else:
                self._non_pooled_available += size
            if self._waiters:
                self._waiters[0].notify()

    def deallocate_chunks(self, chunks: list[bytearray]) -> None:
        """Return several chunks under one lock acquisition."""
        if not chunks:
            return
        chunk = self.poolable_size
        with self._lock:
            for c in chunks:
                if len(c) == chunk:
                    self._free.append(c)
                else:
                    self._non_pooled_available += chunk
            if self._waiters:
                self._waiters[0].notify()

    def record_buffer_exhausted(self) -> None:
        """Count one record dropped for lack of memory (``buffer-exhausted-*``)."""
        self._exhausted.record()

    # -- state -----------------------------------------------------------------------------

    def available_memory(self) -> int:
        """Unallocated memory plus the free list."""
        with self._lock:
            return self._available_locked()

    def unallocated_memory(self) -> int:
        with self._lock:
            return self._non_pooled_available

    def reserved_memory(self) -> int:
        """Memory held by buffers/chunks handed out (``total - available``)."""
        return self.total_memory - self.available_memory()

    def free_buffers(self) -> int:
        with self._lock:
            return len(self._free)

    def queued(self) -> int:
        """Number of allocations blocked waiting for memory."""
        with self._lock:
            return len(self._waiters)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse further allocations and fail every blocked one ("producer closed").
        Memory can still be returned afterwards."""
        with self._lock:
            self._closed = True
            for waiter in self._waiters:
                waiter.notify()
