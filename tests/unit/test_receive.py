"""Framing: the size prefix, partial reads, bounds, pool use (no sockets)."""

import struct

import pytest

from tidegate.network import memory_pool
from tidegate.network.mute_state import ChannelMuteState, MuteReason
from tidegate.network.receive import InvalidReceiveError, NetworkReceive


def feed(receive: NetworkReceive, data: bytes) -> None:
    """Push bytes the way the asyncio shell does: only as much as get_buffer asks for."""
    pos = 0
    while pos < len(data):
        buf = receive.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        receive.advance(n)
        pos += n


class CountingPool:
    def __init__(self):
        self.allocated = []
        self.released = []

    def try_allocate(self, size):
        buf = bytearray(size)
        self.allocated.append(size)
        return buf

    def release(self, buf):
        self.released.append(len(buf))


def test_whole_frame():
    r = NetworkReceive(1000, memory_pool.NONE)
    feed(r, struct.pack(">i", 5) + b"hello")
    assert r.complete()
    assert bytes(r.payload()) == b"hello"


def test_partial_reads_complete_only_at_the_end():
    # kafka-internals section 1, case 7: 128 bytes arriving as 4, 64, 64.
    r = NetworkReceive(1000, memory_pool.NONE)
    body = bytes(range(128))
    feed(r, struct.pack(">i", 128))
    assert not r.complete() and r.size == 128
    feed(r, body[:64])
    assert not r.complete()
    feed(r, body[64:])
    assert r.complete() and bytes(r.payload()) == body


def test_size_prefix_split_byte_by_byte():
    r = NetworkReceive(1000, memory_pool.NONE)
    for b in struct.pack(">i", 3):
        assert not r.size_known
        feed(r, bytes([b]))
    assert r.size == 3


def test_buffer_never_reaches_past_the_frame():
    r = NetworkReceive(1000, memory_pool.NONE)
    assert len(r.get_buffer()) == 4
    feed(r, struct.pack(">i", 10))
    assert len(r.get_buffer()) == 10
    feed(r, b"x" * 7)
    assert len(r.get_buffer()) == 3


@pytest.mark.parametrize("size", [-1, -(2**31), 1001])
def test_invalid_sizes_rejected(size):
    r = NetworkReceive(1000, memory_pool.NONE)
    with pytest.raises(InvalidReceiveError):
        feed(r, struct.pack(">i", size))


def test_body_allocated_from_pool_only_after_size_and_released_on_close():
    pool = CountingPool()
    r = NetworkReceive(1000, pool)
    feed(r, struct.pack(">i", 50)[:3])
    assert pool.allocated == []
    feed(r, struct.pack(">i", 50)[3:])
    assert pool.allocated == [50]
    feed(r, b"a" * 10)
    r.release()  # connection closed mid-request
    assert pool.released == [50]


def test_zero_size_request_takes_nothing_from_the_pool():
    pool = CountingPool()
    r = NetworkReceive(1000, pool)
    feed(r, struct.pack(">i", 0))
    assert r.complete() and pool.allocated == [] and r.payload() == bytearray()


def test_pool_refusal_leaves_receive_waiting_for_memory():
    class EmptyPool(CountingPool):
        def try_allocate(self, size):
            return None

    r = NetworkReceive(1000, EmptyPool())
    feed(r, struct.pack(">i", 20))
    assert r.requires_memory and not r.complete()
    assert len(r.get_buffer()) == 0


def test_mute_reasons_are_independent():
    m = ChannelMuteState()
    assert m.mute(MuteReason.IN_FLIGHT) is True
    assert m.mute(MuteReason.MEMORY) is False
    assert m.unmute(MuteReason.MEMORY) is False  # still in flight
    assert m.muted and m.has(MuteReason.IN_FLIGHT) and not m.has(MuteReason.MEMORY)
    assert m.unmute(MuteReason.IN_FLIGHT) is True
    assert not m.muted
