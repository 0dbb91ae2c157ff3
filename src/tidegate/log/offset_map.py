"""Kafka's ``SkimpyOffsetMap``: what the log cleaner remembers of the keys it has seen."""

from __future__ import annotations

import hashlib
import struct

from tidegate.utils import INT32_MAX

__all__ = ["OFFSET_MAP_ENTRY_SIZE", "SkimpyOffsetMap"]

#: Bytes per offset map entry, as Kafka's SkimpyOffsetMap: MD5 (16) + offset (8).
OFFSET_MAP_ENTRY_SIZE = 24
_EMPTY_HASH = bytes(16)
_OFFSET = struct.Struct(">q")


class SkimpyOffsetMap:
    """Kafka's ``SkimpyOffsetMap``: MD5 of a key -> the latest offset seen for it, in one
    buffer of ``memory`` bytes (16 bytes of hash and 8 of offset per slot, open
    addressing with linear probing), holding at most ``memory / 24 * load_factor`` keys.

    The buffer is the whole of the map's memory, as in Kafka (a dict of digests cost
    about 140 bytes a key, 6x the budget). It is allocated at the first put after
    :meth:`clear` (zero pages the kernel only backs once touched) and dropped by
    :meth:`clear`, so an idle cleaner holds none of it. An all-zero slot is empty;
    a key whose MD5 is all zeros would share that marker, as in Kafka."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory = memory
        self.load_factor = load_factor
        self.slots = min(memory, INT32_MAX) // OFFSET_MAP_ENTRY_SIZE
        self.capacity = int(self.slots * load_factor)
        if self.capacity < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no entry")
        self._buf: bytearray | None = None
        self._size = 0
        #: the last offset the map covers (Kafka's ``latestOffset``)
        self.latest_offset = -1

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self.capacity

    def _slot(self, buf: bytearray, digest: bytes) -> tuple[int, bool]:
        """(byte position of the digest's slot, whether it holds the digest already);
        (-1, False) when every slot holds another key."""
        slots = self.slots
        pos = int.from_bytes(digest[:8], "big") % slots
        for _ in range(slots):
            base = pos * OFFSET_MAP_ENTRY_SIZE
            stored = buf[base : base + 16]
            if stored == digest:
                return base, True
            if stored == _EMPTY_HASH:
                return base, False
            pos += 1
            if pos == slots:
                pos = 0
        return -1, False

    def put(self, key: bytes, offset: int) -> None:
        buf = self._buf
        if buf is None:
            buf = self._buf = bytearray(self.slots * OFFSET_MAP_ENTRY_SIZE)
        digest = hashlib.md5(key).digest()
        base, found = self._slot(buf, digest)
        if not found:
            if base < 0:
                raise ValueError("the offset map is full")  # callers stop at capacity
            buf[base : base + 16] = digest
            self._size += 1
        _OFFSET.pack_into(buf, base + 16, offset)
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when the map has not seen it."""
        buf = self._buf
        if buf is None:
            return -1
        base, found = self._slot(buf, hashlib.md5(key).digest())
        return _OFFSET.unpack_from(buf, base + 16)[0] if found else -1

    def clear(self) -> None:
        self._buf = None
        self._size = 0
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self._size / self.slots
