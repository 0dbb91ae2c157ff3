"""Kafka's ``RecordAccumulator`` (``full``) and ``ChunkedRecordAccumulator``
(``incremental``, KIP-1332) in one class.

Records are appended by the threads calling ``send`` into per-partition queues
of batches; the sender thread asks which leaders have sendable data
(:meth:`RecordAccumulator.ready`), takes batches out (:meth:`drain`) and hands
back the memory of completed ones (:meth:`deallocate`). Each partition queue has
its own lock, held only for in-memory work: blocking on the buffer pool always
happens outside it, after the current batch was closed for appends, so the sender
can always drain what the blocked thread was filling.

``full`` append (Kafka's ``RecordAccumulator.append``): try the last batch; if the
record does not fit, close that batch for appends; allocate ``max(batch.size,
record upper bound)`` (blocking up to what is left of ``max.block.ms``); retry
(another thread may have started a batch meanwhile) or start a new batch; return
an allocation that went unused.

``incremental`` append (``ChunkedRecordAccumulator.append``): a new batch
reserves only the chunks its first record needs (blocking). A batch that would
take the next record but lacks chunk capacity grows with a *non-blocking*
multi-chunk allocation; if the pool cannot serve it now, the batch is closed for
appends (so it can be drained) and the record goes down the blocking new-batch
path. Chunks a batch never wrote to return to the pool when it is closed.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from tidegate.client.metadata import Cluster
from tidegate.clock import Clock, MonotonicMs
from tidegate.record.batch_builder import record_size_upper_bound
from tidegate.record.compression import NONE
from tidegate.record.record_batch import RECORD_BATCH_OVERHEAD

from .batch import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    ChunkedProducerBatch,
    ProducerBatch,
    RecordFuture,
)
from .buffer_pool import BufferPool
from .errors import BufferExhaustedError, ProducerClosedError, RecordTooLargeError
from .partitioner import BuiltInPartitioner, StickyPartitionInfo

__all__ = ["PartitionQueue", "ReadyCheckResult", "RecordAccumulator", "RecordAppendResult"]

_HEADER = RECORD_BATCH_OVERHEAD
#: Kafka's CompressionRatioEstimator steps.
_RATIO_IMPROVING_STEP = 0.005
_RATIO_DETERIORATE_STEP = 0.05


class RecordAppendResult(NamedTuple):
    future: RecordFuture
    batch_is_full: bool
    new_batch_created: bool
    partition: int


class ReadyCheckResult(NamedTuple):
    ready_nodes: set[int]
    next_ready_check_delay_ms: int
    unknown_leader_topics: set[str]


class PartitionQueue:
    """The batches of one partition, oldest first, and the lock guarding them."""

    __slots__ = ("batches", "lock", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.lock = threading.Lock()
        self.batches: deque[ProducerBatch] = deque()


class _TopicInfo:
    __slots__ = ("builtin", "queues", "ratio")

    def __init__(self, builtin: BuiltInPartitioner) -> None:
        self.queues: dict[int, PartitionQueue] = {}
        self.builtin = builtin
        self.ratio = 1.0  # estimated compression ratio (CompressionRatioEstimator)


class RecordAccumulator:
    def __init__(
        self,
        pool: BufferPool,
        *,
        batch_size: int = 16384,
        incremental: bool = False,
        compression: int = NONE,
        linger_ms: int = 5,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120000,
        adaptive_partitioning: bool = True,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.pool = pool
        self.batch_size = batch_size
        self.incremental = incremental
        self.compression = compression
        self.linger_ms = linger_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.delivery_timeout_ms = delivery_timeout_ms
        self.adaptive = adaptive_partitioning
        self.clock = clock
        self._rng = rng or random.Random()
        self._topics: dict[str, _TopicInfo] = {}
        self._topics_lock = threading.Lock()
        self._incomplete: set[ProducerBatch] = set()
        self._incomplete_lock = threading.Lock()
        self._flushes_in_progress = 0
        self._closed = False
        self._drain_index: dict[int, int] = {}
        self._muted: set[tuple[str, int]] = set()
        #: set by the sender when idempotence is on: the transaction manager, which
        #: decides which batches may be drained (``may_drain``), assigns their sequence
        #: numbers (``assign``) and says when a transaction is completing (a commit
        #: flushes: ``is_completing``)
        self.sequencer: Any = None

    # -- topics and queues ---------------------------------------------------------------

    def _topic_info(self, topic: str) -> _TopicInfo:
        info = self._topics.get(topic)
        if info is None:
            with self._topics_lock:
                info = self._topics.get(topic)
                if info is None:
                    info = _TopicInfo(BuiltInPartitioner(topic, self.batch_size, self._rng))
                    self._topics[topic] = info
        return info

    def _queue(self, info: _TopicInfo, topic: str, partition: int) -> PartitionQueue:
        q = info.queues.get(partition)
        if q is None:
            with self._topics_lock:
                q = info.queues.get(partition)
                if q is None:
                    q = PartitionQueue(topic, partition)
                    info.queues[partition] = q
        return q

    def queue_for(self, topic: str, partition: int) -> PartitionQueue | None:
        info = self._topics.get(topic)
        return info.queues.get(partition) if info is not None else None

    def iter_queues(self) -> Iterable[PartitionQueue]:
        for info in list(self._topics.values()):
            yield from list(info.queues.values())

    # -- appending -------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        on_delivery: Any,
        max_block_ms: float,
        cluster: Cluster,
    ) -> tuple[RecordFuture, bool, bool, int]:
        """Append a record; ``partition=None`` lets the built-in partitioner choose
        (sticky). Returns ``(future, batch_is_full, new_batch_created, partition)``
        (a :class:`RecordAppendResult`). Raises BufferExhaustedError /
        ProducerClosedError.

        The common case (the partition's open batch takes the record) is handled
        inline here; everything else goes through the strategy's full algorithm.
        """
        info = self._topics.get(topic)
        if info is not None and not self._closed:
            if partition is None:
                pinfo = info.builtin._info
                eff = pinfo.partition if pinfo is not None else -1
            else:
                pinfo = None
                eff = partition
            q = info.queues.get(eff)
            if q is not None:
                with q.lock:
                    batches = q.batches
                    if batches and (pinfo is None or info.builtin._info is pinfo):
                        last = batches[-1]
                        before = last.est
                        r = last.try_append(timestamp, key, value, headers, on_delivery)
                        if r is not None and r.__class__ is not int:
                            full = last.closed_for_appends or last.write_limit <= last.est
                            if pinfo is not None:
                                produced = pinfo.produced_bytes + last.est - before
                                pinfo.produced_bytes = produced
                                sticky = info.builtin.sticky_batch_size
                                if produced >= sticky and (full or produced >= 2 * sticky):
                                    info.builtin.update_partition_info(
                                        pinfo,
                                        0,
                                        cluster.available_partitions(topic),
                                        cluster.partition_count(topic) or 1,
                                        enable_switch=full,
                                    )
                            return (r, full or len(batches) > 1, False, eff)
                        if r is None:
                            last.close_for_appends()
        if self.incremental:
            return self._append_chunked(
                topic, partition, timestamp, key, value, headers, on_delivery, max_block_ms, cluster
            )
        return self._append_full(
            topic, partition, timestamp, key, value, headers, on_delivery, max_block_ms, cluster
        )

    def _resolve(
        self, info: _TopicInfo, topic: str, partition: int | None, cluster: Cluster
    ) -> tuple[StickyPartitionInfo | None, int]:
        if partition is not None:
            return None, partition
        avail = cluster.available_partitions(topic)
        n = cluster.partition_count(topic) or 1
        pinfo = info.builtin.peek_current_partition_info(avail, n)
        return pinfo, pinfo.partition

    def _after_append(
        self,
        info: _TopicInfo,
        q: PartitionQueue,
        pinfo: StickyPartitionInfo | None,
        before: int,
        batch: ProducerBatch,
        fut: RecordFuture,
        new_batch: bool,
        cluster: Cluster,
    ) -> tuple[RecordFuture, bool, bool, int]:
        """Under ``q.lock``: feed the sticky partitioner and build the result."""
        last = q.batches[-1]
        full = len(q.batches) > 1 or last.is_full()
        if pinfo is not None:
            appended = batch.estimated_bytes_written() - before
            info.builtin.update_partition_info(
                pinfo,
                appended,
                cluster.available_partitions(q.topic),
                cluster.partition_count(q.topic) or 1,
                enable_switch=last.is_full(),
            )
        return (fut, full, new_batch, q.partition)

    def _try_append(
        self, q: PartitionQueue, timestamp: int, key: Any, value: Any, headers: Any, cb: Any
    ) -> tuple[ProducerBatch | None, Any, int]:
        """Append to the open batch: (batch, future | None | int gap, size before)."""
        if self._closed:
            raise ProducerClosedError("Producer closed while send in progress")
        if not q.batches:
            return None, None, 0
        last = q.batches[-1]
        before = last.estimated_bytes_written()
        r = last.try_append(timestamp, key, value, headers, cb)
        if r is None:
            last.close_for_appends()
        return last, r, before

    def _new_batch_size(self, key: Any, value: Any, headers: Any) -> int:
        """Kafka's ``estimateSizeInBytesUpperBound``: header + record upper bound."""
        return _HEADER + record_size_upper_bound(key, value, headers)

    def _append_full(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        cb: Any,
        max_block_ms: float,
        cluster: Cluster,
    ) -> tuple[RecordFuture, bool, bool, int]:
        info = self._topic_info(topic)
        buffer: bytearray | None = None
        remaining = max_block_ms
        clock = self.clock
        try:
            while True:
                pinfo, eff = self._resolve(info, topic, partition, cluster)
                q = self._queue(info, topic, eff)
                with q.lock:
                    if info.builtin.is_partition_changed(pinfo):
                        continue
                    batch, fut, before = self._try_append(q, timestamp, key, value, headers, cb)
                    if batch is not None and fut is not None:
                        return self._after_append(
                            info, q, pinfo, before, batch, fut, False, cluster
                        )
                if buffer is None:
                    size = max(self.batch_size, self._new_batch_size(key, value, headers))
                    start = clock.nanoseconds()
                    try:
                        buffer = self.pool.allocate(size, remaining)
                    except ValueError as exc:  # larger than the whole pool
                        raise RecordTooLargeError(str(exc)) from None
                    finally:
                        remaining = max(0.0, remaining - (clock.nanoseconds() - start) / 1e6)
                with q.lock:
                    if info.builtin.is_partition_changed(pinfo):
                        continue
                    batch, fut, before = self._try_append(q, timestamp, key, value, headers, cb)
                    if batch is not None and fut is not None:
                        # someone else started a batch while we allocated
                        return self._after_append(
                            info, q, pinfo, before, batch, fut, False, cluster
                        )
                    batch = ProducerBatch(
                        topic,
                        eff,
                        buffer,
                        self.pool,
                        write_limit=len(buffer),
                        compression=self.compression,
                        compression_ratio=info.ratio,
                        created_ms=clock.milliseconds(),
                    )
                    buffer = None
                    before = 0  # a new batch counts whole, header included (Kafka)
                    fut = batch.try_append(timestamp, key, value, headers, cb)
                    assert fut is not None, "a new batch takes its first record"
                    q.batches.append(batch)
                    with self._incomplete_lock:
                        self._incomplete.add(batch)
                    return self._after_append(info, q, pinfo, before, batch, fut, True, cluster)
        finally:
            if buffer is not None:
                self.pool.deallocate(buffer)

    def first_record_chunk_bytes(self, key: Any, value: Any, headers: Any, ratio: float) -> int:
        """Chunk bytes a new incremental batch reserves for its first record: the
        projected size of a batch holding just that record."""
        ub = record_size_upper_bound(key, value, headers)
        if self.compression == NONE:
            return _HEADER + ub
        return _HEADER + int(ub * ratio * COMPRESSION_RATE_ESTIMATION_FACTOR)

    def _append_chunked(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        cb: Any,
        max_block_ms: float,
        cluster: Cluster,
    ) -> tuple[RecordFuture, bool, bool, int]:
        """:meth:`append` for the incremental strategy (KIP-1332): the record goes into
        the partition's last batch, grown by more chunks if it must (never blocking), or
        into a new batch on chunks allocated outside the queue's lock (blocking up to
        ``max_block_ms``), the queue looked at again under the lock after each wait.

        One loop on purpose (about 110 lines): the chunks held (``new_chunks``, ``ext``)
        and the time left carry from one pass to the next, and the ``finally`` gives back
        whatever a pass leaves unused; split into helpers, each would have to hand both
        back and forth on the producer's hottest path."""
        info = self._topic_info(topic)
        new_chunks: list[bytearray] | None = None
        new_size = 0
        ext: list[bytearray] | None = None
        remaining = max_block_ms
        clock = self.clock
        pool = self.pool
        try:
            while True:
                pinfo, eff = self._resolve(info, topic, partition, cluster)
                q = self._queue(info, topic, eff)
                gap = 0
                to_extend = None
                with q.lock:
                    if info.builtin.is_partition_changed(pinfo):
                        continue
                    batch, r, before = self._try_append(q, timestamp, key, value, headers, cb)
                    if batch is not None and r is not None:
                        if r.__class__ is int:
                            gap, to_extend = r, batch
                        else:
                            return self._after_append(
                                info, q, pinfo, before, batch, r, False, cluster
                            )
                if gap:
                    # mid-batch growth: never blocks
                    ext = pool.try_allocate_chunks(gap)
                    if ext is None:
                        with q.lock:
                            if q.batches and q.batches[-1] is to_extend:
                                to_extend.close_for_appends()  # drainable; record blocks below
                        continue
                elif new_chunks is None:
                    new_size = self.first_record_chunk_bytes(key, value, headers, info.ratio)
                    start = clock.nanoseconds()
                    try:
                        new_chunks = pool.allocate_chunks(new_size, remaining)
                    except ValueError as exc:  # more chunks than the whole pool
                        raise RecordTooLargeError(str(exc)) from None
                    except BufferExhaustedError:
                        pool.record_buffer_exhausted()
                        raise
                    finally:
                        remaining = max(0.0, remaining - (clock.nanoseconds() - start) / 1e6)
                with q.lock:
                    if info.builtin.is_partition_changed(pinfo):
                        if ext is not None:
                            pool.deallocate_chunks(ext)
                            ext = None
                        continue
                    if ext is not None:
                        last = q.batches[-1] if q.batches else None
                        if (
                            last is to_extend
                            and isinstance(last, ChunkedProducerBatch)
                            and not last.closed_for_appends
                        ):
                            last.add_chunks(ext)
                            ext = None
                            batch, r, before = self._try_append(
                                q, timestamp, key, value, headers, cb
                            )
                            if batch is not None and r is not None and r.__class__ is not int:
                                return self._after_append(
                                    info, q, pinfo, before, batch, r, False, cluster
                                )
                            continue  # filled meanwhile: route again
                        pool.deallocate_chunks(ext)
                        ext = None
                        continue
                    # no gap to fill (ext is None), so the chunks for a new batch are here
                    assert new_chunks is not None
                    batch, r, before = self._try_append(q, timestamp, key, value, headers, cb)
                    if batch is not None and r is not None:
                        if r.__class__ is int:
                            # another thread opened a batch to extend instead
                            pool.deallocate_chunks(new_chunks)
                            new_chunks = None
                            continue
                        return self._after_append(info, q, pinfo, before, batch, r, False, cluster)
                    batch = ChunkedProducerBatch(
                        topic,
                        eff,
                        new_chunks,
                        pool,
                        write_limit=max(self.batch_size, self._new_batch_size(key, value, headers)),
                        compression=self.compression,
                        compression_ratio=info.ratio,
                        created_ms=clock.milliseconds(),
                    )
                    new_chunks = None
                    before = 0
                    r = batch.try_append(timestamp, key, value, headers, cb)
                    if r is None or isinstance(r, int):  # pragma: no cover - sized for it
                        raise AssertionError(f"new chunked batch refused its first record: {r}")
                    q.batches.append(batch)
                    with self._incomplete_lock:
                        self._incomplete.add(batch)
                    return self._after_append(info, q, pinfo, before, batch, r, True, cluster)
        finally:
            if new_chunks is not None:
                pool.deallocate_chunks(new_chunks)
            if ext is not None:
                pool.deallocate_chunks(ext)

    # -- the sender's side ---------------------------------------------------------------------

    def retry_backoff(self, attempts: int) -> float:
        """KIP-580 exponential backoff with 20% jitter, from retry.backoff.ms to
        retry.backoff.max.ms."""
        if attempts <= 0:
            return 0
        base = self.retry_backoff_ms * (2 ** min(attempts - 1, 30))
        b = min(self.retry_backoff_max_ms, base)
        return b * self._rng.uniform(0.8, 1.2) if b < self.retry_backoff_max_ms else b

    def ready(self, cluster: Cluster, now_ms: MonotonicMs) -> ReadyCheckResult:
        """Kafka's ``ready``: the leaders with at least one sendable partition, how long
        until the next partition may become sendable, and topics with partitions whose
        leader is unknown."""
        ready_nodes: set[int] = set()
        next_delay: float = 1 << 30
        unknown: set[str] = set()
        exhausted = self.pool.queued() > 0
        seq = self.sequencer
        forced = (
            self._closed
            or self._flushes_in_progress > 0
            or (seq is not None and seq.is_completing())
        )
        linger = self.linger_ms
        for topic, info in list(self._topics.items()):
            # adaptive partitioning once every partition has had a queue (Kafka: until
            # then the load stats could not steer towards the missing ones)
            n_parts = len(cluster.partitions_for_topic(topic))
            adaptive = self.adaptive and n_parts >= 2 and len(info.queues) >= n_parts
            sizes: list[int] = []
            ids: list[int] = []
            for partition, q in list(info.queues.items()):
                leader = cluster.leader_for(topic, partition)
                if leader is None:
                    if q.batches:
                        unknown.add(topic)
                    continue
                if adaptive:
                    sizes.append(len(q.batches))
                    ids.append(partition)
                if not q.batches:
                    continue
                with q.lock:
                    if not q.batches:
                        continue
                    batch = q.batches[0]
                    full = len(q.batches) > 1 or batch.is_full()
                if leader in ready_nodes or (topic, partition) in self._muted:
                    continue
                waited = now_ms - batch.last_attempt_ms
                backing_off = batch.attempts > 0 and waited < batch.backoff_ms
                time_to_wait = batch.backoff_ms if backing_off else linger
                expired = waited >= time_to_wait
                sendable = full or expired or exhausted or forced
                if sendable and not backing_off:
                    ready_nodes.add(leader)
                else:
                    left = max(time_to_wait - waited, 0)
                    next_delay = min(next_delay, left)
            if adaptive:
                info.builtin.update_partition_load_stats(sizes, ids, len(ids))
            elif self.adaptive:
                info.builtin.update_partition_load_stats(None, None, 0)
        return ReadyCheckResult(ready_nodes, int(next_delay), unknown)

    def drain(
        self, cluster: Cluster, nodes: Iterable[int], max_size: int, now_ms: MonotonicMs
    ) -> dict[int, list[ProducerBatch]]:
        """Take at most one batch per partition for each node, up to ``max_size`` bytes
        per node (a single larger batch goes alone), closing each batch (header, CRC,
        sequence numbers)."""
        out: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            parts = cluster.partitions_for_node(node)
            if not parts:
                continue
            n = len(parts)
            start = self._drain_index.get(node, 0) % n
            size = 0
            ready: list[ProducerBatch] = []
            for i in range(n):
                topic, partition = parts[(start + i) % n]
                q = self.queue_for(topic, partition)
                if q is None or not q.batches or (topic, partition) in self._muted:
                    continue
                with q.lock:
                    if not q.batches:
                        continue
                    first = q.batches[0]
                    if first.attempts > 0 and now_ms - first.last_attempt_ms < first.backoff_ms:
                        continue
                    if ready and size + first.estimated_size() > max_size:
                        self._drain_index[node] = (start + i) % n
                        break
                    seq = self.sequencer
                    if seq is not None and not seq.may_drain(first):
                        continue
                    q.batches.popleft()
                    if seq is not None:
                        seq.assign(first)
                    first.close()
                size += first.final_size
                ready.append(first)
            else:
                self._drain_index[node] = (start + 1) % n
            if ready:
                out[node] = ready
        return out

    def mute(self, topic: str, partition: int) -> None:
        self._muted.add((topic, partition))

    def unmute(self, topic: str, partition: int) -> None:
        self._muted.discard((topic, partition))

    def reenqueue(self, batch: ProducerBatch, now_ms: MonotonicMs) -> None:
        """Put a batch back for a retry, at the head of its queue (in sequence order when
        sequences are in use), after its backoff."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        batch.retry = True
        batch.backoff_ms = self.retry_backoff(batch.attempts)
        info = self._topic_info(batch.topic)
        q = self._queue(info, batch.topic, batch.partition)
        with q.lock:
            if batch.base_sequence >= 0:
                # insert before the first batch with a higher (or no) sequence
                items = list(q.batches)
                idx = 0
                while idx < len(items) and 0 <= items[idx].base_sequence < batch.base_sequence:
                    idx += 1
                q.batches.insert(idx, batch)
            else:
                q.batches.appendleft(batch)

    def expired_batches(self, now_ms: MonotonicMs) -> list[ProducerBatch]:
        """Batches still queued past ``delivery.timeout.ms`` since creation, removed."""
        out = []
        limit = self.delivery_timeout_ms
        for q in self.iter_queues():
            if not q.batches:
                continue
            with q.lock:
                while q.batches and now_ms - q.batches[0].created_ms >= limit:
                    b = q.batches.popleft()
                    b.close_for_appends()
                    out.append(b)
        return out

    def next_expiry_ms(self, now_ms: MonotonicMs) -> int:
        """Milliseconds until the oldest queued batch reaches delivery.timeout.ms."""
        best = 1 << 30
        for q in self.iter_queues():
            b = q.batches[0] if q.batches else None
            if b is not None:
                best = min(best, max(0, b.created_ms + self.delivery_timeout_ms - now_ms))
        return best

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch completed (or failed): forget it and return its memory."""
        with self._incomplete_lock:
            self._incomplete.discard(batch)
        batch.release_memory()

    def update_compression_ratio(self, batch: ProducerBatch) -> None:
        """Kafka's ``CompressionRatioEstimator.updateEstimation`` after a batch closed."""
        if self.compression == NONE or batch.uncompressed == 0:
            return
        info = self._topic_info(batch.topic)
        observed = batch.actual_compression_ratio
        cur = info.ratio
        if observed > cur:
            info.ratio = max(cur + _RATIO_DETERIORATE_STEP, observed)
        elif observed < cur:
            info.ratio = max(cur - _RATIO_IMPROVING_STEP, observed)

    # -- flush / close ---------------------------------------------------------------------------

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress -= 1

    def incomplete(self) -> list[ProducerBatch]:
        with self._incomplete_lock:
            return list(self._incomplete)

    def await_flush_completion(self, timeout_s: float | None) -> bool:
        deadline = None if timeout_s is None else self.clock.nanoseconds() + timeout_s * 1e9
        for b in self.incomplete():
            left = None
            if deadline is not None:
                left = max(0.0, (deadline - self.clock.nanoseconds()) / 1e9)
            if not b.result.wait(left):
                return False
        return True

    def has_undrained(self) -> bool:
        return any(q.batches for q in self.iter_queues())

    def has_incomplete(self) -> bool:
        with self._incomplete_lock:
            return bool(self._incomplete)

    def close(self) -> None:
        self._closed = True

    def abort_undrained_batches(self, error: BaseException) -> list[ProducerBatch]:
        """Fail the batches never drained (no sequence number yet; a batch being retried
        keeps its place), as a transaction is aborted (Kafka's ``abortUndrainedBatches``).
        Their records' futures fail with ``error``."""
        aborted = []
        for q in self.iter_queues():
            if not q.batches:
                continue
            with q.lock:
                keep: deque[ProducerBatch] = deque()
                while q.batches:
                    b = q.batches.popleft()
                    if b.base_sequence < 0:
                        b.close_for_appends()
                        aborted.append(b)
                    else:
                        keep.append(b)
                q.batches.extend(keep)
        for b in aborted:
            if b.complete(-1, -1, error):
                self.deallocate(b)
        return aborted

    def abort_incomplete_batches(self, error: BaseException) -> list[ProducerBatch]:
        """Fail every batch not yet sent (forced close); in-flight ones fail with their
        requests. Returns the aborted batches."""
        aborted = []
        for q in self.iter_queues():
            with q.lock:
                while q.batches:
                    b = q.batches.popleft()
                    b.close_for_appends()
                    aborted.append(b)
        for b in aborted:
            b.complete(-1, -1, error)
            self.deallocate(b)
        return aborted

    # -- observation (benchmarks, metrics) --------------------------------------------------------

    def buffered_bytes(self) -> int:
        """Bytes of record data in batches not yet completed (approximate, lock-free)."""
        total = 0
        for b in self.incomplete():
            try:
                total += b.buffered_bytes()
            except Exception:  # noqa: BLE001, S110 - racing a completion
                pass
        return total
