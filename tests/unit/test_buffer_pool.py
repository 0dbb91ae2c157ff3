"""BufferPool: Kafka's semantics and KIP-1332's multi-chunk allocation.

Numbered cases are those of section 4 of the reference (kafka-internals.md),
after Kafka's BufferPoolTest and BufferPoolChunkAllocationTest. Time is fake
(MockClock) wherever the pool reads it. A lone timeout uses the autojump clock (the
wait advances fake time by the whole timeout, so "blocked for max.block.ms" is exact
and instant). Cases where a second thread wakes a blocked allocation use
``MockClock(autojump=False)``: the blocked thread really waits on its Condition, is
woken by the notify, and times out only when the test advances the fake time past
max.block.ms, so wait times are exact and no assertion races a real timeout. Real
time appears only as generous upper bounds on thread scheduling (``wait_until``,
``join``), which a correct pool meets in milliseconds. Two tests use the real clock
on purpose and say why.
"""

from __future__ import annotations

import functools
import random
import threading
import time

import pytest

from tests.conftest import wait_until as shared_wait_until
from tidegate.clock import SYSTEM_CLOCK, MockClock
from tidegate.producer.buffer_pool import BufferPool, chunk_size_for
from tidegate.producer.errors import BufferExhaustedError, ProducerClosedError
from tidegate.producer.metrics import Metrics

#: The suite's wait_until for these thread hand-offs: polling every millisecond, 5 s at most.
wait_until = functools.partial(shared_wait_until, timeout=5.0, interval=0.001)


def stepped_clock():
    """Fake time that moves only when the test advances it (see the module docstring)."""
    return MockClock(autojump=False)


def wait_ns(pool):
    """``bufferpool-wait-time-ns-total``: fake nanoseconds spent blocked so far. It is
    recorded each time a blocked allocation wakes (notified or timed out), under the
    pool lock, before it decides to take memory or wait again."""
    return pool.metrics.get("bufferpool-wait-time-ns-total")


def wait_woken(pool, total_ns, what="the waiter to wake"):
    """Until the blocked allocation has woken and recorded ``total_ns`` of wait in all,
    then until it is waiting again: the pool lock, taken here by queued(), is held by
    the waiter from recording its wait until its next Condition wait releases it, and
    the start of that next wait is read under it. So fake time advanced after this
    returns counts towards the next wait, never lost between two."""
    wait_until(lambda: wait_ns(pool) == total_ns, what=what)
    pool.queued()


def in_thread(fn):
    """Run fn in a thread; returns (thread, box) where box gets 'result' or 'error'."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
        box["done_at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


# -- case 1: the free list ---------------------------------------------------------------


def test_case1_simple_allocation_and_the_free_list():
    total = 64 * 1024
    pool = BufferPool(total, 1024, clock=MockClock())
    buf = pool.allocate(1024, 1000)
    assert len(buf) == 1024
    assert pool.unallocated_memory() == total - 1024
    assert pool.available_memory() == total - 1024
    buf[0:5] = b"dirty"
    pool.deallocate(buf)
    assert pool.available_memory() == total
    assert pool.free_buffers() == 1  # kept for reuse
    again = pool.allocate(1024, 1000)
    assert again is buf  # recycled; writers start at their own position, like clear()
    assert pool.available_memory() == total - 1024
    pool.deallocate(again)
    big = pool.allocate(2048, 1000)
    assert len(big) == 2048
    assert pool.available_memory() == total - 2048
    pool.deallocate(big)
    assert pool.available_memory() == total
    assert pool.free_buffers() == 1  # the 2048-byte buffer is not pooled


def test_case2_cannot_allocate_more_than_the_pool():
    pool = BufferPool(1024, 512, clock=MockClock())
    pool.allocate(1024, 10)
    clock_start = time.monotonic()
    with pytest.raises(ValueError):
        pool.allocate(1025, 10_000)
    assert time.monotonic() - clock_start < 0.5  # refused at once, no blocking


def test_case3_delayed_allocation_completes_after_memory_is_returned():
    """The waiter parks (queued() == 1 is read under the pool lock, which the waiter
    holds from joining the queue until its Condition wait releases it, so it is
    waiting by then); 999 fake ms later the 1 KiB comes back and the notify completes
    it with no further fake time: exactly 999 ms blocked, within case 3's 1 s."""
    clock = stepped_clock()
    pool = BufferPool(5 * 1024, 1024, clock=clock)
    held = pool.allocate(1024, 1000)
    t, box = in_thread(lambda: pool.allocate(5 * 1024, 5000))
    wait_until(lambda: pool.queued() == 1, what="the waiter to park")
    clock.advance(999)
    assert "result" not in box and "error" not in box
    pool.deallocate(held)
    t.join(2)
    assert len(box["result"]) == 5 * 1024
    assert wait_ns(pool) == 999_000_000
    assert pool.queued() == 0
    assert pool.available_memory() == 0
    assert pool.metrics.get("buffer-exhausted-total") == 0


def test_case4_buffer_exhausted_after_max_block_with_mock_clock():
    clock = MockClock()
    pool = BufferPool(2, 1, clock=clock)
    pool.allocate(1, 0)
    start = clock.nanoseconds()
    with pytest.raises(BufferExhaustedError):
        pool.allocate(2, 10)
    assert clock.nanoseconds() - start == 10_000_000  # the autojump wait: max.block.ms
    assert pool.queued() == 0
    assert pool.available_memory() == 1
    m = pool.metrics.snapshot()
    assert m["bufferpool-wait-time-ns-total"] == 10_000_000
    assert m["buffer-exhausted-total"] == 1
    # both recorded at 10 ms and read then: Kafka's rates pad the elapsed time to one
    # full 30 s window (2 samples of 30 s)
    assert m["buffer-exhausted-rate"] == 1 / 30  # per second
    assert m["bufferpool-wait-ratio"] == 10_000_000 / 30_000_000_000


def test_case4_buffer_exhausted_after_max_block_real_clock():
    """The real clock on purpose: the pool's timed wait on a real Condition must give
    up after max.block.ms of wall time too (the only test of Clock.wait itself)."""
    pool = BufferPool(2, 1, clock=SYSTEM_CLOCK)
    pool.allocate(1, 0)
    start = time.monotonic()
    with pytest.raises(BufferExhaustedError):
        pool.allocate(2, 10)
    assert time.monotonic() - start >= 0.010
    assert pool.queued() == 0
    assert pool.available_memory() == 1


def test_partial_accumulation_is_refunded_on_timeout():
    """allocate() accumulates across wake-ups; a timeout returns all of it."""
    clock = stepped_clock()
    pool = BufferPool(3, 1, clock=clock)
    a = pool.allocate(1, 0)
    b = pool.allocate(1, 0)
    c = pool.allocate(1, 0)
    t, box = in_thread(lambda: pool.allocate(3, 150))
    wait_until(lambda: pool.queued() == 1)
    clock.advance(10)
    pool.deallocate(a)  # the waiter takes it (partial)
    wait_woken(pool, 10_000_000, "the waiter to wake")
    assert pool.available_memory() == 0  # held by the waiter
    assert t.is_alive()
    clock.advance(140)  # max.block.ms reached
    t.join(3)
    assert isinstance(box["error"], BufferExhaustedError)
    assert wait_ns(pool) == 150_000_000
    assert pool.available_memory() == 1  # exactly what was freed, refunded once
    pool.deallocate(b)
    pool.deallocate(c)
    assert pool.available_memory() == 3


# -- case 5: FIFO and close ----------------------------------------------------------------


def test_case5_waiters_are_served_in_arrival_order():
    """Fake time never moves, so neither waiter can time out: the order is the pool's
    FIFO, and 2 still waiting after 1 was served is certain, not a race."""
    clock = stepped_clock()
    pool = BufferPool(2, 1, clock=clock)
    held = [pool.allocate(1, 0), pool.allocate(1, 0)]
    order = []
    t1, b1 = in_thread(lambda: (pool.allocate(1, 5000), order.append(1)))
    wait_until(lambda: pool.queued() == 1)
    t2, b2 = in_thread(lambda: (pool.allocate(1, 5000), order.append(2)))
    wait_until(lambda: pool.queued() == 2)
    pool.deallocate(held.pop())
    t1.join(2)
    assert order == [1]
    assert pool.queued() == 1 and t2.is_alive()
    pool.deallocate(held.pop())
    t2.join(2)
    assert order == [1, 2]
    assert "error" not in b1 and "error" not in b2
    assert pool.queued() == 0
    assert clock.nanoseconds() == 0 and wait_ns(pool) == 0


@pytest.mark.parametrize("chunks", [False, True])
def test_case5_close_fails_every_waiter(chunks):
    """Fake time never moves: the waiters end because close() notifies them, not by a
    timeout."""
    clock = stepped_clock()
    pool = BufferPool(2, 1, clock=clock)
    pool.allocate(1, 0)
    pool.allocate(1, 0)
    alloc = (lambda: pool.allocate_chunks(1, 5000)) if chunks else (lambda: pool.allocate(1, 5000))
    t1, b1 = in_thread(alloc)
    wait_until(lambda: pool.queued() == 1)
    t2, b2 = in_thread(alloc)
    wait_until(lambda: pool.queued() == 2)
    pool.close()
    t1.join(2)
    t2.join(2)
    for box in (b1, b2):
        assert isinstance(box["error"], ProducerClosedError)
        assert "closed" in str(box["error"])
    assert pool.queued() == 0
    assert clock.nanoseconds() == 0
    assert pool.metrics.get("buffer-exhausted-total") == 0
    with pytest.raises(ProducerClosedError):
        pool.allocate(1, 0)
    with pytest.raises(ProducerClosedError):
        pool.allocate_chunks(1, 0)


def test_deallocate_works_after_close():
    pool = BufferPool(1024, 512, clock=MockClock())
    b = pool.allocate(512, 0)
    c = pool.allocate_chunks(512, 0)
    pool.close()
    pool.deallocate(b)
    pool.deallocate_chunks(c)
    assert pool.available_memory() == 1024


# -- case 6: stress ----------------------------------------------------------------------------


def test_case6_stress_many_threads_random_sizes():
    """The real clock on purpose: real threads contending for the pool lock and
    Conditions is what is under test; no allocation is meant to time out."""
    total = 5 * 1024
    pool = BufferPool(total, 1024, clock=SYSTEM_CLOCK)
    errors = []

    def worker(seed):
        rnd = random.Random(seed)
        try:
            for _ in range(50_000):
                size = 1024 if rnd.random() < 0.5 else rnd.randint(1, total)
                buf = pool.allocate(size, 60_000)
                pool.deallocate(buf, size)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors
    assert pool.available_memory() == total
    assert pool.queued() == 0


def test_stress_chunks_many_threads():
    """Real clock, as in case 6."""
    chunk = 128
    pool = BufferPool(16 * chunk, chunk, clock=SYSTEM_CLOCK)
    errors = []

    def worker(seed):
        rnd = random.Random(seed)
        try:
            for _ in range(5_000):
                got = pool.allocate_chunks(rnd.randint(1, 16 * chunk), 60_000)
                pool.deallocate_chunks(got)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert pool.available_memory() == 16 * chunk
    assert pool.queued() == 0


# -- case 7: chunk counts ------------------------------------------------------------------------


def test_case7_chunk_counts_round_up():
    pool = BufferPool(1024, 64, clock=MockClock())
    for size, n in ((64, 1), (65, 2), (256, 4), (1, 1), (1024, 16)):
        got = pool.allocate_chunks(size, 100)
        assert len(got) == n
        assert all(len(c) == 64 for c in got)
        assert pool.available_memory() == 1024 - 64 * n
        pool.deallocate_chunks(got)
        assert pool.available_memory() == 1024


def test_case7_invalid_chunk_requests():
    pool = BufferPool(128, 64, clock=MockClock())
    with pytest.raises(ValueError):
        pool.allocate_chunks(129, 100)  # 3 chunks > the pool
    with pytest.raises(ValueError):
        pool.allocate_chunks(0, 100)
    with pytest.raises(ValueError):
        pool.allocate_chunks(-1, 100)
    assert pool.available_memory() == 128


def test_chunks_reuse_the_free_list_first():
    pool = BufferPool(1024, 64, clock=MockClock())
    got = pool.allocate_chunks(128, 0)
    pool.deallocate_chunks(got)
    assert pool.free_buffers() == 2
    again = pool.allocate_chunks(192, 0)
    assert again[0] is got[0] and again[1] is got[1]
    assert pool.available_memory() == 1024 - 192


def test_chunk_size_follows_batch_size():
    assert chunk_size_for(16384) == 16384
    assert chunk_size_for(4 * 1024 * 1024) == 16384
    assert chunk_size_for(1000) == 1000
    assert chunk_size_for(100) == 128  # floored: the 61-byte header fits the first chunk
    assert chunk_size_for(0) == 128


# -- case 8: atomic, FIFO, one waiter slot --------------------------------------------------------


def test_case8_parked_request_holds_nothing_and_completes():
    """Pool of 3 chunks, 2 held: a 2-chunk request parks with one chunk free and takes
    none of it, through 4,999 fake ms (1 ms short of max.block.ms); freeing one chunk
    completes it with no further fake time."""
    clock = stepped_clock()
    pool = BufferPool(3 * 64, 64, clock=clock)
    h1 = pool.allocate_chunks(64, 0)
    h2 = pool.allocate_chunks(64, 0)
    assert pool.available_memory() == 64
    t, box = in_thread(lambda: pool.allocate_chunks(128, 5000))
    wait_until(lambda: pool.queued() == 1, what="the 2-chunk waiter to park")
    # parked with one chunk free: it has taken none of it
    assert pool.available_memory() == 64
    clock.advance(4999)
    assert pool.available_memory() == 64
    assert pool.queued() == 1 and "error" not in box
    pool.deallocate_chunks(h1)
    t.join(2)
    assert len(box["result"]) == 2
    assert wait_ns(pool) == 4_999_000_000
    assert pool.available_memory() == 0
    assert pool.queued() == 0
    pool.deallocate_chunks(box["result"] + h2)
    assert pool.available_memory() == 3 * 64


def test_case8_fifo_multi_chunk_request_before_single():
    """Waiter M (2 chunks) then S (1). One chunk freed wakes only the head, M, which
    is still short and takes nothing (its wake-up is seen as exactly 7 fake ms of
    recorded wait); S must not jump it. Fake time then stays put, so neither can time
    out while the test frees the rest."""
    clock = stepped_clock()
    pool = BufferPool(3 * 64, 64, clock=clock)
    held = [pool.allocate_chunks(64, 0) for _ in range(3)]
    order = []
    tm, bm = in_thread(lambda: (pool.allocate_chunks(128, 5000), order.append("M")))
    wait_until(lambda: pool.queued() == 1)
    ts, bs = in_thread(lambda: (pool.allocate_chunks(64, 5000), order.append("S")))
    wait_until(lambda: pool.queued() == 2)
    clock.advance(7)
    pool.deallocate_chunks(held.pop())
    wait_woken(pool, 7_000_000, "M to wake")
    assert order == []  # one free chunk: M (head) cannot complete, S must not jump it
    assert pool.available_memory() == 64
    assert pool.queued() == 2
    pool.deallocate_chunks(held.pop())
    tm.join(2)
    assert order == ["M"]
    assert ts.is_alive()
    pool.deallocate_chunks(held.pop())
    ts.join(2)
    assert order == ["M", "S"]
    assert "error" not in bm and "error" not in bs
    assert pool.queued() == 0


def test_newcomers_queue_behind_a_parked_request():
    pool = BufferPool(2 * 64, 64, clock=stepped_clock())
    h = [pool.allocate_chunks(64, 0), pool.allocate_chunks(64, 0)]
    t, box = in_thread(lambda: pool.allocate_chunks(128, 5000))
    wait_until(lambda: pool.queued() == 1)
    pool.deallocate_chunks(h.pop())
    # a free chunk exists, but the parked 2-chunk request is first in line
    assert pool.try_allocate_chunks(64) is None
    assert pool.queued() == 1
    pool.deallocate_chunks(h.pop())
    t.join(2)
    assert len(box["result"]) == 2


def test_non_blocking_chunk_request_fails_at_once_without_queueing():
    clock = MockClock()
    pool = BufferPool(128, 64, clock=clock)
    pool.allocate_chunks(128, 0)
    with pytest.raises(BufferExhaustedError):
        pool.allocate_chunks(64, 0)
    assert pool.queued() == 0
    assert clock.nanoseconds() == 0
    # the growth path is not a dropped record: not counted as exhausted
    assert pool.metrics.get("buffer-exhausted-total") == 0


# -- case 9: exact refunds -------------------------------------------------------------------------


def test_case9_timeout_refunds_nothing_twice():
    """Two chunks freed while the 3-chunk request waits (it wakes twice, each time
    short); at 500 fake ms it gives up and exactly those 2 chunks are available."""
    clock = stepped_clock()
    pool = BufferPool(3 * 64, 64, clock=clock)
    held = [pool.allocate_chunks(64, 0) for _ in range(3)]
    assert pool.available_memory() == 0
    t, box = in_thread(lambda: pool.allocate_chunks(3 * 64, 500))
    wait_until(lambda: pool.queued() == 1)
    clock.advance(100)
    pool.deallocate_chunks(held.pop())
    wait_woken(pool, 100_000_000, "the first wake-up")
    clock.advance(100)
    pool.deallocate_chunks(held.pop())
    wait_woken(pool, 200_000_000, "the second wake-up")
    assert t.is_alive() and pool.available_memory() == 2 * 64
    clock.advance(300)
    t.join(3)
    assert isinstance(box["error"], BufferExhaustedError)
    assert wait_ns(pool) == 500_000_000
    assert pool.available_memory() == 2 * 64
    assert pool.queued() == 0
    pool.deallocate_chunks(held.pop())
    assert pool.available_memory() == 3 * 64


def test_case9_timeout_with_mock_clock_is_exact():
    clock = MockClock()
    pool = BufferPool(3 * 64, 64, clock=clock)
    for _ in range(3):
        pool.allocate_chunks(64, 0)
    with pytest.raises(BufferExhaustedError):
        pool.allocate_chunks(128, 500)
    assert clock.nanoseconds() == 500_000_000
    assert pool.available_memory() == 0
    assert pool.queued() == 0
    assert pool.metrics.get("bufferpool-wait-time-ns-total") == 500_000_000


def test_slow_path_success_accounting():
    pool = BufferPool(3 * 64, 64, clock=stepped_clock())
    held = [pool.allocate_chunks(64, 0) for _ in range(3)]
    t, box = in_thread(lambda: pool.allocate_chunks(128, 5000))
    wait_until(lambda: pool.queued() == 1)
    pool.deallocate_chunks(held.pop())
    pool.deallocate_chunks(held.pop())
    t.join(2)
    assert len(box["result"]) == 2
    assert pool.available_memory() == 0
    pool.deallocate_chunks(box["result"])
    pool.deallocate_chunks(held.pop())
    assert pool.available_memory() == 3 * 64


# -- metrics -----------------------------------------------------------------------------------------


def test_metrics_names_and_wait_ratio():
    clock = MockClock()
    metrics = Metrics(clock)
    pool = BufferPool(1, 1, clock=clock, metrics=metrics)
    pool.allocate(1, 0)
    for _ in range(3):
        with pytest.raises(BufferExhaustedError):
            pool.allocate(1, 1000)
    snap = metrics.snapshot()
    for name in (
        "bufferpool-wait-ratio",
        "bufferpool-wait-time-ns-total",
        "buffer-exhausted-rate",
        "buffer-exhausted-total",
    ):
        assert name in snap
    assert snap["bufferpool-wait-time-ns-total"] == 3e9
    assert snap["buffer-exhausted-total"] == 3
    # 3 s waited; the first sample opened when the first wait was recorded (t=1 s), so
    # 2 s elapsed, padded by one 30 s window as Kafka's Rate does: Kafka's
    # Meter(TimeUnit.NANOSECONDS) divides the 3e9 ns by 32 000 ms in ns
    assert snap["bufferpool-wait-ratio"] == 3e9 / 32e9
    assert snap["buffer-exhausted-rate"] == 3 / 32  # per second, the same window
    pool.record_buffer_exhausted()
    assert metrics.get("buffer-exhausted-total") == 4
