"""Sans-IO reading of size-prefixed requests, Kafka's ``NetworkReceive``.

The 4-byte big-endian size is read first; the body buffer is then taken from
the memory pool and the body is read straight into it. Nothing here touches a
socket: the asyncio shell asks :meth:`NetworkReceive.get_buffer` where to put
the next bytes and reports how many arrived with :meth:`NetworkReceive.advance`.
"""

from __future__ import annotations

import struct

from tidegate.network.memory_pool import BufferAllocator

_SIZE = struct.Struct(">i")
_EMPTY = memoryview(bytearray(0))


class InvalidReceiveError(Exception):
    """A size prefix that is negative or above ``socket.request.max.bytes``."""


class NetworkReceive:
    __slots__ = ("_max_size", "_payload", "_pool", "_read", "_size", "_size_buf", "_size_read")

    def __init__(self, max_size: int, pool: BufferAllocator) -> None:
        self._max_size = max_size
        self._pool = pool
        self._size_buf = bytearray(4)
        self._size_read = 0
        self._size = -1
        self._payload: bytearray | None = None
        self._read = 0

    @property
    def size_known(self) -> bool:
        return self._size >= 0

    @property
    def size(self) -> int:
        return self._size

    @property
    def requires_memory(self) -> bool:
        """Size known, body not yet allocated: the next read needs pool memory."""
        return self._size > 0 and self._payload is None

    def complete(self) -> bool:
        return self._size == 0 or (self._payload is not None and self._read == self._size)

    def try_allocate(self) -> bool:
        """Take the body buffer from the pool; False (muting the caller) if it has none."""
        if self._payload is None and self._size > 0:
            self._payload = self._pool.try_allocate(self._size)
        return self._payload is not None or self._size == 0

    def get_buffer(self) -> memoryview:
        """Where the next bytes go: the rest of the size prefix, else the rest of the body."""
        if self._size < 0:
            return memoryview(self._size_buf)[self._size_read :]
        if self._payload is None:
            return _EMPTY
        return memoryview(self._payload)[self._read :]

    def advance(self, n: int) -> None:
        """Record ``n`` bytes written into the last buffer from :meth:`get_buffer`."""
        if self._size < 0:
            self._size_read += n
            if self._size_read == 4:
                size = _SIZE.unpack(self._size_buf)[0]
                if size < 0:
                    raise InvalidReceiveError(f"invalid negative request size {size}")
                if size > self._max_size:
                    raise InvalidReceiveError(
                        f"request size {size} larger than socket.request.max.bytes "
                        f"{self._max_size}"
                    )
                self._size = size
                self.try_allocate()
        else:
            self._read += n

    def payload(self) -> bytearray:
        """The complete body (a pool buffer the caller must release), empty for size 0."""
        assert self.complete()
        return self._payload if self._payload is not None else bytearray(0)

    def release(self) -> None:
        """Give an unfinished body back to the pool (connection closed mid-request)."""
        if self._payload is not None:
            self._pool.release(self._payload)
            self._payload = None
