"""Kafka's DelayedFetch: a long-poll fetch parked in the fetch purgatory.

A fetch with ``max_wait_ms`` > 0 that finds fewer than ``min_bytes`` waits here,
watched on each of its topic-partitions. Every append to one of them calls
``check_and_complete`` for that key, which runs :meth:`DelayedFetch.try_complete`:
the fetch completes as soon as the bytes appended since it parked (each partition
counting up to its own max bytes) reach ``min_bytes``, one of its partitions is
deleted, or a fetch offset falls outside the log (truncation, retention). A
``read_committed`` fetch counts only the bytes below the last stable offset, which
moves when a transaction's marker is appended (an append like any other). When
the wait expires the timer completes it with whatever is there. Completion calls
``respond``, which re-reads the logs and answers. A parked fetch holds no task
and no thread: just this object on the timing wheel and the watcher lists.

An incremental fetch of a KIP-227 session parks a :class:`SessionDelayedFetch` instead,
on the session's one key, checking only the session's dirty partitions.

The fetches one append completes (a fan-out: many consumers tailing one partition all
wait at its end) re-read the same bytes and answer the same partitions. They do that
once: the :class:`FetchCompletionBatch` of the wake-up holds a read made by a second
fetch in memory for every later one, the response partition built from it, and its
encoding, so each further answer costs its header and its write (issue 29).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from tidegate.protocol.fetch_fast import SharedPartitions
from tidegate.record.file_region import FileRegion
from tidegate.server.purgatory import DelayedOperation

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.protocol.messages.fetch import PartitionData
    from tidegate.server.fetch_session import FetchSession
    from tidegate.server.replica_manager import (
        FetchParams,
        FetchPartition,
        FetchPartitionData,
        ReplicaManager,
    )

#: The largest read a completion batch shares in memory (Kafka's default
#: max.partition.fetch.bytes): a larger one is sent from the file to each fetch.
SHARED_READ_MAX = 1 << 20


class FetchCompletionBatch:
    """What the parked fetches completed by one event share (the module doc). Lives for
    one wake-up (``ReplicaManager.completion_batch``); everything in it is read-only
    once made, and holds what its keys' ids name, so no id is reused meanwhile.

    ``reads`` (``ReplicaManager.read_from_log``): by what decides a read (the log, the
    offset, the limit, whether it is the response's first, the isolation level and the
    log's offsets), None once one fetch read it (from the file, as alone), then the
    shared :class:`FetchPartitionData` (records in memory) the second made, or
    :data:`UNSHARED` (too large, or unreadable: each reads its own). ``parts``
    (``KafkaApis``): the response partition built from a shared read, by (its id,
    whether topics go by id). ``encoded``: those partitions encoded, per version
    (:func:`~tidegate.protocol.fetch_fast.encode_fetch_response`)."""

    __slots__ = ("encoded", "parts", "reads")

    def __init__(self) -> None:
        self.reads: dict[tuple[Any, ...], FetchPartitionData | object | None] = {}
        self.parts: dict[tuple[int, bool], tuple[FetchPartitionData, PartitionData]] = {}
        self.encoded: SharedPartitions = {}

    def lookup(self, key: tuple[Any, ...]) -> FetchPartitionData | bool:
        """The shared read for ``key``; else True for the second fetch to make it (it
        reads, then hands its result to :meth:`keep` for the others), False for the first
        (it reads from the file as alone) and for a read not shared."""
        seen = self.reads.get(key, _UNSEEN)
        if seen is None:
            return True
        if seen is _UNSEEN:
            self.reads[key] = None
            return False
        if seen is UNSHARED:
            return False
        return cast("FetchPartitionData", seen)

    def keep(self, key: tuple[Any, ...], data: FetchPartitionData) -> FetchPartitionData:
        """The second fetch's read of ``key``: its records read into memory once (at most
        :data:`SHARED_READ_MAX`; a larger or unreadable one stays its own, and each later
        fetch reads for itself) and the result kept for every later fetch, which sends
        them without a file read of its own."""
        records = data.records
        if isinstance(records, FileRegion):
            if records.length > SHARED_READ_MAX:
                self.reads[key] = UNSHARED
                return data
            try:
                data.records = records.read()
            except OSError:  # truncated under the read: each reads (and fails) on its own
                self.reads[key] = UNSHARED
                return data
            records.close()
        data.shared = True
        self.reads[key] = data
        return data


#: a read a completion batch does not share (see :class:`FetchCompletionBatch`)
UNSHARED = object()
_UNSEEN = object()  # a read no fetch of the batch made yet


@dataclass(slots=True)
class FetchPartitionStatus:
    key: tuple[str, int]
    log: Log  # the partition's Log when the fetch parked (identity detects deletion)
    fetch_offset: int
    max_bytes: int
    bytes_at_start: int  # readable bytes when the fetch parked
    appended_at_start: int  # ReplicaManager.appended_bytes for the key then


class FetchAnswer(Protocol):
    """What answers a parked fetch (``KafkaApis``' one slotted object per fetch, which is
    all a parked fetch keeps of its request): called with the re-read partitions;
    ``abandoned`` True once its client went away (the completion then neither re-reads
    nor calls it)."""

    @property
    def abandoned(self) -> bool: ...

    def __call__(self, results: list[FetchPartitionData], /) -> None: ...


class SessionFetchAnswer(Protocol):
    """What answers a parked incremental fetch: as :class:`FetchAnswer`, and ``select()``
    names the partitions to read at completion (the session's dirty ones, as (session
    keys, partitions)); called with those and their re-read."""

    @property
    def abandoned(self) -> bool: ...

    def select(self) -> tuple[list[Any], list[FetchPartition]]: ...

    def __call__(self, keys: list[Any], partitions: list[FetchPartition], results: list[FetchPartitionData],
                 /) -> None: ...


class _DelayedFetchBase(DelayedOperation):
    """What both parked fetches hold: the bytes that complete them, the replica
    manager, the fetch's parameters, the isolation level."""

    __slots__ = ("min_bytes", "params", "read_committed", "replicas")

    def __init__(self, params: FetchParams, replicas: ReplicaManager, read_committed: bool) -> None:
        super().__init__(params.max_wait_ms)
        self.min_bytes = params.min_bytes
        self.params = params
        self.replicas = replicas
        self.read_committed = read_committed


class DelayedFetch(_DelayedFetchBase):
    """A parked fetch of the partitions it names: ``statuses`` to check, ``fetches`` to
    re-read at completion, for ``answer``."""

    __slots__ = ("answer", "fetches", "partitions")

    def __init__(
        self,
        params: FetchParams,
        partitions: list[FetchPartitionStatus],
        fetches: Sequence[FetchPartition],
        replicas: ReplicaManager,
        answer: FetchAnswer,
        *,
        read_committed: bool = False,
    ) -> None:
        super().__init__(params, replicas, read_committed)
        self.partitions = partitions
        self.fetches = fetches
        self.answer = answer

    def on_complete(self) -> None:
        answer = self.answer
        if not answer.abandoned:
            replicas = self.replicas
            answer(replicas.read_from_log(self.params, self.fetches, replicas.completion_batch)[0])

    def try_complete(self) -> bool:
        replicas = self.replicas
        accumulated = 0
        for st in self.partitions:
            log = replicas.get_log(*st.key)
            if log is not st.log:
                return self.force_complete()  # deleted (or deleted and re-created)
            if st.fetch_offset > log.log_end_offset or st.fetch_offset < log.log_start_offset:
                return self.force_complete()  # truncated or retention passed it
            if self.read_committed:
                readable = log.bytes_between(st.fetch_offset, log.last_stable_offset)
            else:
                readable = st.bytes_at_start + replicas.appended_bytes.get(st.key, 0) - st.appended_at_start
            accumulated += min(readable, st.max_bytes)
        if accumulated >= self.min_bytes:
            return self.force_complete()
        return False


class SessionDelayedFetch(_DelayedFetchBase):
    """A parked incremental fetch of a KIP-227 session: watched on the session's one
    purgatory key (:func:`~tidegate.server.fetch_session.session_watch_key`), which every
    change to one of the session's partitions checks. ``try_complete`` counts only the
    session's dirty partitions (the others are caught up and unchanged, so hold no
    bytes): the bytes between each fetch offset and the readable end (high watermark, or
    last stable offset for ``read_committed``), each up to its partition's max bytes.
    A deleted partition or a fetch offset outside its log completes it at once. The
    cost of a check is O(dirty), not O(partitions of the session)."""

    __slots__ = ("answer", "session")

    def __init__(
        self, params: FetchParams, session: FetchSession, replicas: ReplicaManager, answer: SessionFetchAnswer,
        *, read_committed: bool = False,
    ) -> None:
        super().__init__(params, replicas, read_committed)
        self.session = session
        self.answer = answer

    def on_complete(self) -> None:
        answer = self.answer
        if not answer.abandoned:
            keys, partitions = answer.select()
            replicas = self.replicas
            answer(keys, partitions, replicas.read_from_log(self.params, partitions, replicas.completion_batch)[0])

    def try_complete(self) -> bool:
        logs = self.replicas.logs.logs
        parts = self.session.partitions
        accumulated = 0
        for key in list(self.session.dirty):
            cp = parts.get(key)
            if cp is None:
                continue
            log = logs.get(cp.tp) if cp.tp is not None else None
            if log is None:
                return self.force_complete()  # deleted (or never known: an error to report)
            offset = cp.fetch_offset
            if offset > log.log_end_offset or offset < log.log_start_offset:
                return self.force_complete()  # truncated or retention passed it
            end = log.last_stable_offset if self.read_committed else log.high_watermark
            if end > offset:
                accumulated += min(log.bytes_between(offset, end), cp.max_bytes)
                if accumulated >= self.min_bytes:
                    return self.force_complete()
        return False
