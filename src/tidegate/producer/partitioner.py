"""Partitioners: Kafka's built-in one (murmur2 for keys, adaptive sticky without),
round robin, and user callables.

Keys are placed exactly where the Java client places them:
``toPositive(murmur2(key)) % numPartitions`` with Kafka's ``Utils.murmur2``
(seed ``0x9747b28c``), so records keyed the same way from Java, librdkafka's
``murmur2_random`` partitioner or kafka-python land on the same partition.

Keyless records follow KIP-480/KIP-794 (:class:`BuiltInPartitioner`): they stick to
one partition until at least ``batch.size`` bytes were produced to it *and* its
last batch is full (or ``2 x batch.size`` regardless), then switch; the next
partition is chosen at random, weighted towards partitions whose leaders have
shorter queues when adaptive partitioning is on.
"""

from __future__ import annotations

import array
import bisect
import random
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "BuiltInPartitioner",
    "RoundRobinPartitioner",
    "StickyPartitionInfo",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_LITTLE_ENDIAN = sys.byteorder == "little"


def _le_words(block: bytes) -> Sequence[int]:
    """``block`` (a multiple of 4 bytes) as little-endian unsigned 32-bit ints, as Java
    reads them: a zero-copy view on little-endian hosts, a swapped copy elsewhere."""
    if _LITTLE_ENDIAN:
        return memoryview(block).cast("I")
    words = array.array("I", block)  # pragma: no cover - big-endian hosts
    words.byteswap()  # pragma: no cover
    return words  # pragma: no cover


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    if n4:
        for k in _le_words(bytes(data[:n4])):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``BuiltInPartitioner.partitionForKey``."""
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitionInfo:
    """The current sticky partition of a topic and the bytes produced to it."""

    __slots__ = ("partition", "produced_bytes")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.produced_bytes = 0


class BuiltInPartitioner:
    """Per-topic state of the built-in partitioner for keyless records (KIP-794).

    The accumulator drives it as Kafka's does: :meth:`peek_current_partition_info`
    picks the partition to lock, :meth:`is_partition_changed` (under that partition's
    lock) detects a racing switch, and :meth:`update_partition_info` (under the same
    lock) adds the appended bytes and maybe switches.
    """

    def __init__(
        self,
        topic: str,
        sticky_batch_size: int,
        rng: random.Random | None = None,
    ) -> None:
        if sticky_batch_size < 1:
            raise ValueError(f"stickyBatchSize must be >= 1 but got {sticky_batch_size}")
        self.topic = topic
        self.sticky_batch_size = sticky_batch_size
        self._info: StickyPartitionInfo | None = None
        self._lock = threading.Lock()
        self._rng = rng or random.Random()
        # adaptive load stats: cumulative frequency table and partition ids
        self._cft: list[int] | None = None
        self._cft_ids: list[int] | None = None

    def _random(self) -> int:
        return self._rng.getrandbits(31)

    def next_partition(self, available: Sequence[int], num_partitions: int) -> int:
        rnd = self._random()
        cft, ids = self._cft, self._cft_ids
        if cft is None or ids is None:
            if available:
                return available[rnd % len(available)]
            return rnd % num_partitions
        weighted = rnd % cft[-1]
        # first entry strictly greater than the random value
        return ids[bisect.bisect_right(cft, weighted)]

    def peek_current_partition_info(
        self, available: Sequence[int], num_partitions: int
    ) -> StickyPartitionInfo:
        info = self._info
        if info is not None:
            return info
        with self._lock:
            if self._info is None:
                self._info = StickyPartitionInfo(self.next_partition(available, num_partitions))
            return self._info

    def is_partition_changed(self, info: StickyPartitionInfo | None) -> bool:
        return info is not None and self._info is not info

    def update_partition_info(
        self,
        info: StickyPartitionInfo | None,
        appended_bytes: int,
        available: Sequence[int],
        num_partitions: int,
        enable_switch: bool = True,
    ) -> None:
        """Add ``appended_bytes``; switch once ``batch.size`` bytes were produced and the
        caller allows it (the partition's batches are full), or at ``2 x batch.size``."""
        if info is None:
            return
        info.produced_bytes += appended_bytes
        produced = info.produced_bytes
        size = self.sticky_batch_size
        if (produced >= size and enable_switch) or produced >= size * 2:
            self._info = StickyPartitionInfo(self.next_partition(available, num_partitions))

    def update_partition_load_stats(
        self, queue_sizes: list[int] | None, partition_ids: list[int] | None, length: int
    ) -> None:
        """Adaptive partitioning: weight partitions by inverted queue size (Kafka's CFT).

        ``queue_sizes[i]`` is the number of batches queued for the leader of
        ``partition_ids[i]``; only the first ``length`` entries are used.
        """
        if queue_sizes is None or partition_ids is None:
            self._cft = self._cft_ids = None
            return
        if length < 1 or len(queue_sizes) < 2:
            self._cft = self._cft_ids = None
            return
        max_plus_1 = max(queue_sizes[:length]) + 1
        all_equal = all(q == queue_sizes[0] for q in queue_sizes[:length])
        if all_equal and length == len(queue_sizes):
            self._cft = self._cft_ids = None
            return
        cft = []
        running = 0
        for q in queue_sizes[:length]:
            running += max_plus_1 - q
            cft.append(running)
        self._cft, self._cft_ids = cft, list(partition_ids[:length])


class RoundRobinPartitioner:
    """Kafka's ``RoundRobinPartitioner``: each record to the next available partition of
    its topic, keys ignored. Pass as ``partitioner.class = "round_robin"``."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int]
    ) -> int:
        with self._lock:
            n = self._counters.get(topic, 0)
            self._counters[topic] = n + 1
        if available:
            return available[n % len(available)]
        return n % num_partitions


UserPartitioner = Callable[[str, Any, int, Sequence[int]], int]
