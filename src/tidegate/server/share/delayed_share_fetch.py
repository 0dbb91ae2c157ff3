"""Kafka's ``DelayedShareFetch`` (KIP-932): a ShareFetch's fetch half parked in the share
fetch purgatory until it can acquire records, sans-IO.

A :class:`ShareFetch` is what a ShareFetch asks of its share-partitions (Kafka's
``ShareFetch``): the member, the limits, the partitions that already failed and the
callback that gets the answer once. :class:`DelayedShareFetch` is watched under each
share-partition's key (group, topic id, partition: acknowledgements, releases, lock
expiries and loads there may make records acquirable) and each partition's (topic id,
partition: appends there move the high watermark or the last stable offset).

:meth:`DelayedShareFetch.try_complete` acquires nothing: it completes when the
acquirable partitions hold ``min_bytes`` between their next fetch offset and the
readable end (the high watermark, or the last stable offset for ``read_committed``),
each counted up to its share of ``max_bytes`` (Kafka's estimate, which assumes what is
there is acquirable), when a partition failed or went away, or when every partition
failed. :meth:`DelayedShareFetch.on_complete` (on completion, and at ``max_wait_ms``: the
one last attempt) reads and acquires: ``max_bytes`` split evenly over the partitions
that can acquire records, read in one ``ReplicaManager.read_from_log`` (KIP-74: the first
batch of the first partition with data even when larger), ``max_records`` a soft total
across them; each partition answers the whole log batches covering what it acquired
with the acquired ranges and their delivery counts (Kafka's ``ShareFetchUtils
.processFetchResponse``). A read below the log start offset moves the share-partition's
start offset there and answers no error (Kafka's OFFSET_OUT_OF_RANGE handling). Nothing
acquirable by ``max_wait_ms`` is an answer with no records, never an error.

Single-threaded: the share-partition's fetch lock is taken and released within one
completion (no other acquisition can interleave), as Kafka takes it per acquiring fetch.
That is where ShareGroupMetrics ``TopicPartitionsAcquireTimeMs`` (since the fetch
arrived) and ``RequestTopicPartitionsFetchRatio`` (locks taken over partitions asked
for) are recorded, once per answered fetch (see :mod:`.metrics`).
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from tidegate.errors import ErrorCode
from tidegate.protocol.messages.share_fetch import AcquiredRecords as AcquiredRecordsData
from tidegate.protocol.messages.share_fetch import PartitionData
from tidegate.record.file_region import FileRegion
from tidegate.server.purgatory import DelayedOperation
from tidegate.server.replica_manager import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchParams,
    FetchPartition,
)

from .share_partition import (
    AcquiredRecords,
    ShareAcquireMode,
    ShareFetchRead,
    SharePartition,
    SharePartitionState,
    TopicIdPartition,
    region_batches,
)

if TYPE_CHECKING:
    from tidegate.log.index import AbortedTxn
    from tidegate.log.log import Log

    from .share_partition_manager import SharePartitionManager

__all__ = [
    "DelayedShareFetch",
    "ShareFetch",
    "ShareFetchParams",
    "ShareFetchPartition",
    "covering",
]

FetchResults = dict[TopicIdPartition, PartitionData]


class ShareFetchParams(NamedTuple):
    """A ShareFetch's limits (``max_bytes`` already capped by ``fetch.max.bytes`` and the
    fetch quota, ``min_bytes`` by ``max_bytes``); ``session_epoch`` rotates the order
    the partitions are read in."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int
    acquire_mode: ShareAcquireMode = ShareAcquireMode.BATCH_OPTIMIZED
    session_epoch: int = 0


class ShareFetchPartition(NamedTuple):
    """A partition to fetch, its topic id resolved to a name."""

    topic_id: uuid.UUID
    partition: int
    topic: str


class ShareFetch:
    """The fetch half of a ShareFetch (Kafka's ``ShareFetch``): answered once, with the
    partitions that failed before the read (``erroneous``) added to what was read.
    ``abandoned()`` True (the client went away) answers nothing and acquires nothing."""

    __slots__ = ("abandoned", "callback", "completed", "erroneous", "group_id", "member_id", "params",
                 "read_committed")

    def __init__(self, group_id: str, member_id: str, params: ShareFetchParams,
                 callback: Callable[[FetchResults], None], *, read_committed: bool = False,
                 abandoned: Callable[[], bool] | None = None) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.params = params
        self.callback = callback
        self.read_committed = read_committed
        self.abandoned = abandoned
        self.erroneous: FetchResults = {}
        self.completed = False

    def add_erroneous(self, tp: TopicIdPartition, error: ErrorCode, message: str | None = None) -> None:
        if not self.completed:
            self.erroneous[tp] = error_partition(tp[1], error, message)

    @property
    def is_abandoned(self) -> bool:
        return self.abandoned is not None and self.abandoned()

    def complete(self, results: FetchResults) -> None:
        if self.completed:
            return
        self.completed = True
        if self.is_abandoned:
            return
        results.update(self.erroneous)
        self.callback(results)


def error_partition(partition: int, error: ErrorCode, message: str | None = None) -> PartitionData:
    """A partition answered with an error and nothing else (Kafka's
    ``ShareFetchResponse.partitionResponse``: empty records, not null)."""
    return PartitionData(partition_index=partition, error_code=error, error_message=message, records=b"")


def covering(spans: list[tuple[int, int]], first_offsets: list[int], acquired: list[AcquiredRecords]) -> tuple[int, int]:
    """The byte range of the whole log batches (their (position, size) ``spans`` and
    first offsets, in order) from the one holding the first acquired offset to the one
    holding the last (Kafka's ``maybeSliceFetchRecords``): clients drop the records
    outside the acquired ranges, so the batches before and after are not sent."""
    first = acquired[0].first_offset
    last = acquired[-1].last_offset
    lo = max(bisect_right(first_offsets, first) - 1, 0)
    hi = max(bisect_right(first_offsets, last) - 1, lo)
    return spans[lo][0], spans[hi][0] + spans[hi][1]


class _Candidate(NamedTuple):
    fetch_partition: ShareFetchPartition
    share_partition: SharePartition
    log: Log


class DelayedShareFetch(DelayedOperation):
    """A ShareFetch waiting for records it can acquire (see the module docstring).
    ``partitions`` are in the order they are read (rotated by the session epoch);
    ``requested``: how many the ShareFetch asked for (those without a log included)."""

    __slots__ = ("arrived_ns", "fetch", "manager", "partitions", "requested")

    def __init__(self, fetch: ShareFetch, manager: SharePartitionManager,
                 partitions: dict[TopicIdPartition, _Candidate], requested: int) -> None:
        super().__init__(fetch.params.max_wait_ms)
        self.fetch = fetch
        self.manager = manager
        self.partitions = partitions
        self.requested = requested
        self.arrived_ns = manager.clock.nanoseconds()

    def try_complete(self) -> bool:
        fetch = self.fetch
        if fetch.is_abandoned:
            return self.force_complete()
        ready: list[tuple[int, Log]] = []
        failed = 0
        get_log = self.manager.replicas.get_log
        for tp, (fp, sp, plog) in self.partitions.items():
            if tp in fetch.erroneous:
                failed += 1
                continue
            state = sp.state
            if state is SharePartitionState.INITIALIZING:
                continue  # its load completing wakes this fetch (the share-partition's key)
            if state is not SharePartitionState.ACTIVE or get_log(fp.topic, fp.partition) is not plog:
                return self.force_complete()  # fenced, failed or deleted: answer with the error now
            if not sp.can_acquire_records():
                continue
            offset = sp.next_fetch_offset()
            if offset < plog.log_start_offset or offset > plog.log_end_offset:
                return self.force_complete()  # the read fails: moves the start offset (on_complete)
            ready.append((offset, plog))
        if failed == len(self.partitions):
            return self.force_complete()
        if ready and self._min_bytes_satisfied(ready):
            return self.force_complete()
        return False

    def _min_bytes_satisfied(self, ready: list[tuple[int, Log]]) -> bool:
        """The readable bytes from each acquirable partition's next fetch offset, each up
        to its share of max bytes, reach min bytes (counted until they do)."""
        params = self.fetch.params
        share = params.max_bytes // len(ready)
        read_committed = self.fetch.read_committed
        accumulated = 0
        for offset, plog in ready:
            if accumulated >= params.min_bytes:
                break
            end = plog.last_stable_offset if read_committed else plog.high_watermark
            if end > offset:
                accumulated += min(plog.bytes_between(offset, end), share)
        return accumulated >= params.min_bytes

    def on_complete(self) -> None:
        fetch = self.fetch
        if fetch.is_abandoned:
            fetch.complete({})
            return
        fetch.complete(self._acquire())

    def _acquire(self) -> FetchResults:
        """Read the partitions that can acquire records and acquire from what was read;
        partitions that cannot be used answer their error."""
        fetch = self.fetch
        manager = self.manager
        results: FetchResults = {}
        candidates: list[tuple[TopicIdPartition, _Candidate]] = []
        now_ns = manager.clock.nanoseconds()
        for tp, candidate in self.partitions.items():
            if tp in fetch.erroneous:
                continue
            sp = candidate.share_partition
            state = sp.state
            if state is SharePartitionState.ACTIVE:
                if sp.can_acquire_records() and sp.try_acquire_fetch_lock(self, now_ns):
                    candidates.append((tp, candidate))
            elif state is not SharePartitionState.INITIALIZING:
                error = manager.unusable_error(tp, sp)
                results[tp] = error_partition(tp[1], error)
        manager.metrics.partitions_acquired(fetch.group_id, len(candidates), self.requested, now_ns - self.arrived_ns)
        if not candidates:
            return results
        try:
            self._read_and_acquire(candidates, results)
        finally:
            now_ns = manager.clock.nanoseconds()
            for _tp, candidate in candidates:
                candidate.share_partition.release_fetch_lock(self, now_ns)
        return results

    def _read_and_acquire(self, candidates: list[tuple[TopicIdPartition, _Candidate]],
                          results: FetchResults) -> None:
        fetch = self.fetch
        params = fetch.params
        per_partition = params.max_bytes // len(candidates)
        reads = [FetchPartition((c.fetch_partition.topic, c.fetch_partition.partition),
                                c.share_partition.next_fetch_offset(), per_partition)
                 for _tp, c in candidates]
        isolation = READ_COMMITTED if fetch.read_committed else READ_UNCOMMITTED
        data, _total = self.manager.replicas.read_from_log(
            FetchParams(0, 0, params.max_bytes, isolation), reads)
        remaining = params.max_records
        for (tp, candidate), read, fetched in zip(candidates, reads, data, strict=True):
            fp, sp, plog = candidate
            answer = PartitionData(partition_index=fp.partition, records=b"")
            results[tp] = answer
            if fetched.error is not ErrorCode.none:
                if fetched.error is ErrorCode.offset_out_of_range:
                    # the log start moved past the fetch offset (retention, DeleteRecords):
                    # the share-partition follows it and the client just fetches again
                    sp.update_cache_and_offsets(plog.log_start_offset)
                else:
                    answer.error_code = fetched.error
                continue
            records = fetched.records
            if not isinstance(records, FileRegion) or remaining <= 0:
                continue
            try:
                self._acquire_from(answer, candidate, records, fetched.aborted_transactions, read.fetch_offset,
                                   remaining, per_partition)
            finally:
                records.close()
            remaining -= sum(r.last_offset - r.first_offset + 1 for r in answer.acquired_records)

    def _acquire_from(self, answer: PartitionData, candidate: _Candidate, region: FileRegion,
                      aborted: Sequence[AbortedTxn] | None, fetch_offset: int, max_records: int,
                      max_bytes: int) -> None:
        """Acquire from one partition's read and answer the batches covering what was
        acquired (``aborted``: the aborted transactions a ``read_committed`` read
        overlaps). Only what the acquisition can take is read: batch headers, and the
        covering batches' bytes. A read from inside the cached range (records released
        or expired there) stops at the last cached record it can take, and the new
        records after the cache, if it can take some, are read separately: the batches
        others hold in between are neither parsed nor sent (clients take the records of
        the acquired ranges; the batches need not be contiguous)."""
        fetch = self.fetch
        sp = candidate.share_partition
        end = sp.cached_until
        reads: list[_Read] = []
        if fetch.read_committed or sp.gap_window is not None:
            # every batch: aborted transactions are looked for, gaps acquired as new records
            reads.append(_Read(region, max(end, fetch_offset - 1) + max_records))
        elif fetch_offset > end:
            reads.append(_Read(region, fetch_offset - 1 + max_records, end))
        else:
            last_cached, count = sp.cached_available(fetch_offset, max_records)
            if last_cached >= 0:
                reads.append(_Read(region, last_cached, end))
            if count < max_records:
                after = self._read_after_cache(candidate, end + 1, max_bytes)
                if after is not None:
                    reads.append(_Read(after, end + max_records - count, -1,
                                       after_offset=reads[-1].batches[-1].last_offset if reads else -1))
        try:
            self._answer(answer, sp, reads, aborted, fetch_offset, max_records)
        finally:
            for read in reads[1:]:
                read.region.close()

    def _read_after_cache(self, candidate: _Candidate, offset: int, max_bytes: int) -> FileRegion | None:
        """The log from just after the share-partition's cached range, if there is any."""
        fp = candidate.fetch_partition
        (data,), _total = self.manager.replicas.read_from_log(
            FetchParams(0, 0, max_bytes), [FetchPartition((fp.topic, fp.partition), offset, max_bytes)])
        records = data.records
        if isinstance(records, FileRegion):
            if data.error is ErrorCode.none:
                return records
            records.close()
        return None

    def _answer(self, answer: PartitionData, sp: SharePartition, reads: list[_Read],
                aborted: Sequence[AbortedTxn] | None, fetch_offset: int, max_records: int) -> None:
        fetch = self.fetch
        params = fetch.params
        batches = [b for read in reads for b in read.batches]
        if not batches:
            return
        acquired = sp.acquire(
            fetch.member_id, ShareFetchRead(batches, aborted), fetch_offset=fetch_offset, max_records=max_records,
            batch_size=params.batch_size, mode=params.acquire_mode, read_committed=fetch.read_committed,
        )
        if not acquired.records:
            return
        answer.records = b"".join(read.covering(acquired.records) for read in reads)
        answer.acquired_records = [
            AcquiredRecordsData(first_offset=r.first_offset, last_offset=r.last_offset,
                                delivery_count=r.delivery_count)
            for r in acquired.records
        ]


class _Read:
    """The batches of one log read a share acquisition looks at (see
    :func:`~.share_partition.region_batches`), and the bytes of those covering what it
    acquired. ``after_offset``: batches up to it were in an earlier read."""

    __slots__ = ("batches", "firsts", "region", "spans")

    def __init__(self, region: FileRegion, last_needed: int, cached_until: int = -1, *,
                 after_offset: int = -1) -> None:
        self.region = region
        self.spans: list[tuple[int, int]] = []
        self.firsts: list[int] = []
        batches = region_batches(region, last_needed, self.spans, self.firsts, cached_until)
        while batches and batches[0].base_offset <= after_offset:
            del batches[0]
            del self.spans[0], self.firsts[0]
        self.batches = batches

    def covering(self, acquired: list[AcquiredRecords]) -> bytes:
        """The bytes of this read's batches from the one holding its first acquired
        offset to the one holding its last (Kafka's ``maybeSliceFetchRecords``)."""
        batches = self.batches
        if not batches:
            return b""
        lo_offset, hi_offset = batches[0].base_offset, batches[-1].last_offset
        mine = [r for r in acquired if r.last_offset >= lo_offset and r.first_offset <= hi_offset]
        if not mine:
            return b""
        lo, hi = covering(self.spans, self.firsts, mine)
        return self.region.read_at(lo, hi - lo)
