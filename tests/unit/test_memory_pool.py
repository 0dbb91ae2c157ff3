"""KIP-72 memory pools: kafka-internals section 1 cases, dry spells, ownership, wiring."""

import logging

import pytest

from tests.fake_loop import clock_at
from tidegate.clock import MockClock
from tidegate.network import memory_pool
from tidegate.network.memory_pool import (
    NONE,
    SimpleMemoryPool,
    create_pool,
    validate_queued_max_request_bytes,
)


def pool(size, max_single, strict=False, clock=None, debug=True, **kw):
    return SimpleMemoryPool(size, max_single, strict, clock or MockClock(), debug=debug, **kw)


def depleted_at(p, clock, ms):
    """MemoryPoolAvgDepletedPercent read with the pool's clock moved to ``ms``."""
    clock.set_milliseconds(ms)
    return p.avg_depleted_percent()


# -- case 1: construction ----------------------------------------------------
@pytest.mark.parametrize("size, max_single", [(0, 7), (-1, 7), (100, 0), (100, -1), (100, 101)])
def test_invalid_construction(size, max_single):
    with pytest.raises(ValueError):
        SimpleMemoryPool(size, max_single, False, MockClock())


def test_max_single_equal_to_size_is_allowed():
    p = pool(100, 100)
    assert p.size == 100 and p.available == 100 and p.used == 0
    assert not p.is_out_of_memory


# -- case 2: allocation bounds, release(None) --------------------------------
@pytest.mark.parametrize("size", [11, 0, -1])
def test_invalid_allocation_sizes(size):
    p = pool(1000, 10)
    with pytest.raises(ValueError):
        p.try_allocate(size)
    assert p.available == 1000 and p.outstanding == 0


def test_release_none():
    p = pool(1000, 10)
    with pytest.raises(ValueError):
        p.release(None)
    p = pool(1000, 10, debug=False)
    with pytest.raises(ValueError):
        p.release(None)


# -- case 3: non-strict over-allocation --------------------------------------
def test_non_strict_pool_over_allocates_by_less_than_one_request():
    p = pool(21, 10)
    b1 = p.try_allocate(10)
    assert isinstance(b1, bytearray) and len(b1) == 10 and b1 == bytearray(10)
    assert p.available == 11
    b2 = p.try_allocate(10)
    assert p.available == 1
    b3 = p.try_allocate(10)
    assert b3 is not None and len(b3) == 10
    assert p.available == -9 and p.used == 30 and p.is_out_of_memory
    assert p.try_allocate(1) is None
    assert p.available == -9
    p.release(b3)
    assert p.available == 1
    b4 = p.try_allocate(10)
    assert b4 is not None and p.available == -9
    assert p.try_allocate(1) is None
    # worst case outstanding = size + max_single - 1
    assert p.used == 21 + 10 - 1
    for b in (b1, b2, b4):
        p.release(b)
    assert p.available == 21 and p.outstanding == 0


# -- case 4: strict vs non-strict --------------------------------------------
def test_strict_pool_only_allocates_what_fits():
    p = pool(100, 60, strict=True)
    assert p.try_allocate(60) is not None
    assert p.available == 40
    assert p.try_allocate(60) is None
    assert p.available == 40 and not p.is_out_of_memory
    assert p.try_allocate(40) is not None
    assert p.available == 0 and p.is_out_of_memory


def test_non_strict_pool_same_sequence():
    p = pool(100, 60, strict=False)
    assert p.try_allocate(60) is not None
    assert p.try_allocate(60) is not None
    assert p.available == -20 and p.is_out_of_memory and p.used == 120
    assert p.try_allocate(1) is None


def test_buffers_are_distinct_and_writable():
    p = pool(100, 10)
    a, b = p.try_allocate(10), p.try_allocate(10)
    a[:] = b"x" * 10
    assert b == bytearray(10) and a is not b


# -- case 5: debug pool rejects foreign buffers and double release -----------
def test_debug_rejects_foreign_buffer():
    p = pool(100, 10, debug=True)
    p.try_allocate(10)
    with pytest.raises(ValueError):
        p.release(bytearray(10))
    with pytest.raises(ValueError):
        p.release(NONE.try_allocate(10))
    assert p.available == 90 and p.outstanding == 1


def test_debug_rejects_double_release():
    p = pool(100, 10, debug=True)
    b = p.try_allocate(10)
    p.release(b)
    assert p.available == 100
    with pytest.raises(ValueError):
        p.release(b)
    assert p.available == 100


def test_debug_rejects_buffer_of_another_pool():
    p, q = pool(100, 10), pool(100, 10)
    b = q.try_allocate(10)
    with pytest.raises(ValueError):
        p.release(b)
    assert p.available == 100 and q.available == 90


def test_non_debug_double_release_logs_and_keeps_accounting(caplog):
    p = pool(100, 10, debug=False)
    b = p.try_allocate(10)
    keep = p.try_allocate(5)
    p.release(b)
    assert p.available == 95
    with caplog.at_level(logging.ERROR, logger=memory_pool.__name__):
        p.release(b)
        p.release(bytearray(7))
    assert p.available == 95 and p.used == 5 and p.outstanding == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    p.release(keep)
    assert p.available == 100


def test_release_gives_back_the_allocated_size_even_if_the_buffer_was_resized():
    p = pool(100, 10)
    b = p.try_allocate(10)
    del b[5:]
    p.release(b)
    assert p.available == 100


def test_released_buffer_is_not_pinned_by_the_pool():
    p = pool(100, 10)
    for _ in range(1000):  # ids get reused after release: must not confuse ownership
        p.release(p.try_allocate(10))
    assert p.available == 100 and p.outstanding == 0


# -- case 8 (pool parts): the dry-spell sensor -------------------------------
def test_dry_spell_records_end_minus_first_refusal_on_success():
    clock = clock_at(1_000)
    p = pool(100, 60, strict=True, clock=clock)
    b = p.try_allocate(60)
    assert p.try_allocate(60) is None  # first refusal: spell starts at 1000
    assert p.dry_spell_started_ms == 1_000
    clock.set_milliseconds(1_500)
    assert p.try_allocate(60) is None  # later refusals do not restart it
    assert p.dry_spell_started_ms == 1_000
    assert p.depleted_time_total_ms == 0  # not counted until it ends (as Kafka)
    clock.set_milliseconds(3_000)
    assert p.try_allocate(10) is not None  # success ends it
    assert p.depleted_time_total_ms == 2_000
    assert p.dry_spell_started_ms is None
    clock.set_milliseconds(4_000)
    p.release(b)  # no spell in progress: nothing more recorded
    assert p.depleted_time_total_ms == 2_000


def test_dry_spell_ends_on_release():
    clock = clock_at(10)
    p = pool(21, 10, clock=clock)
    bufs = [p.try_allocate(10) for _ in range(3)]
    clock.set_milliseconds(20)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(27)
    p.release(bufs[0])
    assert p.depleted_time_total_ms == 7
    clock.set_milliseconds(30)
    assert p.try_allocate(10) is not None  # no new spell started: nothing added
    assert p.try_allocate(1) is None
    clock.set_milliseconds(40)
    p.release(bufs[1])
    assert p.depleted_time_total_ms == 17


def test_rejected_release_does_not_end_a_dry_spell():
    clock = clock_at(0)
    p = pool(10, 10, debug=False, clock=clock)
    p.try_allocate(10)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(50)
    p.release(bytearray(10))
    assert p.dry_spell_started_ms == 0 and p.depleted_time_total_ms == 0


def test_clock_not_read_on_the_ordinary_path():
    class CountingClock(MockClock):
        reads = 0

        def milliseconds(self):
            self.reads += 1
            return super().milliseconds()

    clock = CountingClock()
    p = pool(100, 10, clock=clock)
    for _ in range(10):
        p.release(p.try_allocate(10))
    assert clock.reads == 0


def test_avg_depleted_percent_is_a_fraction_over_kafka_windows():
    clock = clock_at(0)
    p = pool(10, 10, clock=clock)  # defaults: 2 samples of 30 s
    # Reading a Kafka Rate that has no sample yet opens one at the time of the read
    # (SampledStat.oldest): the window starts at this read, t=0.
    assert p.avg_depleted_percent() == 0.0
    b = p.try_allocate(10)
    clock.set_milliseconds(1_000)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(4_000)
    p.release(b)  # 3000 ms recorded at t=4000, into the sample opened at t=0
    # elapsed 10000 ms (< one full window) is padded by one window: 3000 / 40000
    assert depleted_at(p, clock, 10_000) == 3_000 / 40_000
    clock.set_milliseconds(10_000)
    assert p.avg_depleted_percent() == 3_000 / 40_000

    b = p.try_allocate(10)
    clock.set_milliseconds(39_000)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(40_000)
    p.release(b)  # 1000 ms at t=40000: the first sample is complete, a second starts
    assert depleted_at(p, clock, 50_000) == 4_000 / 50_000  # both, since t=0
    # at 70 s the first sample (last event 4 s) is 60 s+ old and purged
    assert depleted_at(p, clock, 70_000) == 1_000 / 30_000
    # at 100 s both are purged
    assert depleted_at(p, clock, 100_000) == 0.0
    assert p.depleted_time_total_ms == 4_000  # the total never decays


def test_avg_depleted_percent_window_starts_at_the_first_spell_if_not_read_before():
    clock = clock_at(0)
    p = pool(10, 10, clock=clock)
    b = p.try_allocate(10)
    clock.set_milliseconds(1_000)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(4_000)
    p.release(b)  # 3000 ms recorded at t=4000 into a fresh sample starting at 4000
    # elapsed 6000 ms (< one full window) is padded by one window: 3000 / 36000
    assert depleted_at(p, clock, 10_000) == 3_000 / 36_000


def test_avg_depleted_percent_is_clamped_to_one():
    clock = clock_at(0)
    p = pool(10, 10, clock=clock)
    b = p.try_allocate(10)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(100_000)
    p.release(b)
    assert p.avg_depleted_percent() == 1.0
    assert p.depleted_time_total_ms == 100_000


def test_metric_window_is_configurable():
    clock = clock_at(0)
    p = pool(10, 10, clock=clock, metric_samples=1, metric_window_ms=1_000)
    b = p.try_allocate(10)
    assert p.try_allocate(1) is None
    clock.set_milliseconds(200)
    p.release(b)
    # one sample: no padding, elapsed 500 ms since the sample started at 200
    assert depleted_at(p, clock, 700) == 200 / 500
    assert depleted_at(p, clock, 1_200) == 0.0  # purged after samples * window


def test_metric_window_validation():
    with pytest.raises(ValueError):
        pool(10, 10, metric_samples=0, metric_window_ms=1_000)
    with pytest.raises(ValueError):
        pool(10, 10, metric_samples=2, metric_window_ms=0)


def test_depleted_rate_reuses_a_ring_of_samples_plus_one():
    # 100 dry spells of 1 ms, one every 10 ms over 1 s, on 2 samples of 100 ms
    clock = clock_at(0)
    p = pool(10, 10, clock=clock, metric_samples=2, metric_window_ms=100)
    b = p.try_allocate(10)
    for t in range(0, 1000, 10):
        clock.set_milliseconds(t)
        assert p.try_allocate(1) is None  # a spell starts at t
        clock.set_milliseconds(t + 1)
        p.release(b)  # and ends at t + 1: 1 ms recorded at t + 1
        b = p.try_allocate(10)
    assert p.depleted_time_total_ms == 100
    # at 991: the sample started at 701 (last event 791) is purged, those started at
    # 801 and 901 hold 10 ms each: 20 / (991 - 801)
    assert depleted_at(p, clock, 991) == 20 / 190


# -- release listeners -------------------------------------------------------
def test_release_listeners_are_called_after_accounting():
    p = pool(21, 10)
    seen = []
    p.add_release_listener(lambda: seen.append(("a", p.available, p.is_out_of_memory)))
    p.add_release_listener(lambda: seen.append(("b", p.available, p.is_out_of_memory)))
    bufs = [p.try_allocate(10) for _ in range(3)]
    assert seen == []
    p.release(bufs[0])
    assert seen == [("a", 1, False), ("b", 1, False)]


def test_release_listener_not_called_on_rejected_release_and_removable():
    p = pool(100, 10, debug=False)
    calls = []

    def listener():
        calls.append(1)

    p.add_release_listener(listener)
    b = p.try_allocate(10)
    p.release(b)
    p.release(b)  # rejected (logged): nothing was given back
    assert calls == [1]
    p.remove_release_listener(listener)
    p.remove_release_listener(listener)  # absent: no error
    p.release(p.try_allocate(10))
    assert calls == [1]


def test_release_listener_may_allocate_and_a_failing_one_does_not_stop_the_rest(caplog):
    p = pool(10, 10, debug=False)
    got = []

    def bad():
        raise RuntimeError("boom")

    p.add_release_listener(bad)
    p.add_release_listener(lambda: got.append(p.try_allocate(10)))
    with caplog.at_level(logging.ERROR, logger=memory_pool.__name__):
        p.release(p.try_allocate(10))
    assert len(got) == 1 and got[0] is not None and p.available == 0
    assert any("listener" in r.getMessage() for r in caplog.records)


def test_release_listener_error_propagates_in_debug():
    p = pool(10, 10, debug=True)

    def bad():
        raise RuntimeError("boom")

    p.add_release_listener(bad)
    b = p.try_allocate(10)
    with pytest.raises(RuntimeError):
        p.release(b)
    assert p.available == 10  # the release itself happened first


# -- NONE --------------------------------------------------------------------
def test_none_pool():
    b = NONE.try_allocate(5)
    assert isinstance(b, bytearray) and len(b) == 5
    assert NONE.try_allocate(5) is not b
    NONE.release(b)
    NONE.release(b)  # no-op, no ownership tracking
    with pytest.raises(ValueError):
        NONE.release(None)
    assert not NONE.is_out_of_memory and NONE.available > 0 and NONE.used == 0
    NONE.add_release_listener(lambda: pytest.fail("NONE never notifies"))
    NONE.release(b)
    assert NONE.depleted_time_total_ms == 0 and NONE.avg_depleted_percent() == 0.0
    assert repr(NONE) == "MemoryPool.NONE"


# -- broker wiring -----------------------------------------------------------
@pytest.mark.parametrize("value", [0, -1, -100])
def test_create_pool_disabled(value):
    assert create_pool(value, 100, MockClock()) is NONE


def test_create_pool_builds_a_non_strict_shared_pool():
    clock = MockClock()
    p = create_pool(64, 16, clock)
    assert isinstance(p, SimpleMemoryPool)
    assert p.size == 64 and p.max_single_allocation == 16 and not p.strict and not p.debug
    with pytest.raises(ValueError):
        p.try_allocate(17)
    bufs = [p.try_allocate(16) for _ in range(4)]
    assert p.available == 0
    assert p.try_allocate(1) is None
    p.release(bufs[0])
    assert p.try_allocate(16) is not None and p.available == 0
    assert create_pool(64, 16, clock, debug=True).debug


def test_create_pool_equal_sizes():
    p = create_pool(100, 100, MockClock())
    assert isinstance(p, SimpleMemoryPool) and p.size == 100


def test_create_pool_rejects_a_pool_smaller_than_the_largest_request():
    with pytest.raises(ValueError, match="socket.request.max.bytes"):
        create_pool(99, 100, MockClock())


@pytest.mark.parametrize("value", [-1, 0, 100, 101, 2**40])
def test_validate_accepts(value):
    validate_queued_max_request_bytes(value, 100)


@pytest.mark.parametrize("value", [1, 50, 99])
def test_validate_rejects_with_a_clear_message(value):
    with pytest.raises(ValueError) as exc:
        validate_queued_max_request_bytes(value, 100)
    msg = str(exc.value)
    assert "queued.max.request.bytes" in msg and "socket.request.max.bytes" in msg
    assert str(value) in msg and "100" in msg
