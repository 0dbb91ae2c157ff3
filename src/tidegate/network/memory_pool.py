"""Memory for incoming requests (KIP-72).

The network layer takes every request body's buffer from a pool *before* the
body is read. This release ships the unbounded :data:`NONE` pool; the bounded
``SimpleMemoryPool`` (``queued.max.request.bytes``) plugs into the same seam.
"""

from __future__ import annotations

from typing import Protocol


class MemoryPool(Protocol):
    def try_allocate(self, size: int) -> bytearray | None: ...

    def release(self, buffer: bytearray) -> None: ...

    @property
    def size(self) -> int: ...

    @property
    def available(self) -> int: ...

    @property
    def is_out_of_memory(self) -> bool: ...


class _NonePool:
    """Kafka's ``MemoryPool.NONE``: always a fresh buffer, never out of memory."""

    size = 2**63 - 1
    available = 2**63 - 1
    is_out_of_memory = False

    def try_allocate(self, size: int) -> bytearray:
        if size < 1:
            raise ValueError(f"requested size {size} <= 0")
        return bytearray(size)

    def release(self, buffer: bytearray) -> None:
        if buffer is None:
            raise ValueError("release(None)")

    def __repr__(self) -> str:
        return "MemoryPool.NONE"


NONE: MemoryPool = _NonePool()
