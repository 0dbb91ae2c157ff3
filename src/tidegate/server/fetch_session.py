"""Incremental fetch sessions (KIP-227), as Kafka's ``FetchSession.scala``.

A consumer that fetches the same partitions on every poll may ask for a *session*: the
broker remembers the partitions (with their fetch offsets and what it last told the
client about each), and later *incremental* requests name only the partitions whose fetch
offset changed (plus ``forgotten_topics_data`` to drop some); the broker answers only the
partitions with something new (records, a moved high watermark or log start offset, an
error). Sans-IO: every entry point takes ``now_ms``, the monotonic time of the
caller's clock (:data:`~tidegate.clock.MonotonicMs`: a session's creation and last use
are compared with each other and with the eviction time, never with a timestamp).

* :class:`FetchSessionCache` — Kafka's ``FetchSessionCache``: at most
  ``max.incremental.fetch.session.cache.slots`` sessions; a new session may evict one
  that went unused for :data:`EVICTION_MS`, else the least valuable session older than
  that (fewer partitions first; follower sessions are *privileged* and only another
  privileged one may evict them while they are young). A client that asks for a new
  session on every poll therefore cannot push out established sessions.
* :func:`new_context` — Kafka's ``FetchManager.newContext``: a full request (epoch 0)
  closes the session it names and may open a new one; epoch -1 (``FINAL_EPOCH``, and
  every request before v7) is sessionless; an incremental request must name a cached
  session (FETCH_SESSION_ID_NOT_FOUND) at its current epoch (INVALID_FETCH_SESSION_EPOCH)
  with the same topic-id-ness (FETCH_SESSION_TOPIC_ID_ERROR).

Idle cost independent of the session's size (issue 18). The cache also keeps, per
partition of the log, the sessions that hold it (:meth:`FetchSessionCache.watch`); every
change the broker makes to a log (an append, so a new high watermark and last stable
offset; a new log start offset; a deleted partition) marks that partition *dirty* in those
sessions (:meth:`FetchSessionCache.partition_changed`). An incremental fetch reads only the
dirty partitions (plus those the request changed, which are marked dirty on arrival): a
partition the client was told everything about (caught up at the high watermark, or at the
last stable offset for ``read_committed``, no error) and that has not changed since cannot
enter the response by Kafka's ``maybeUpdateResponseData`` rules, so skipping it changes
nothing. A read partition leaves the dirty set only in that settled state
(:meth:`FetchSession.settle`): one that returned records, an error or a diverging epoch, or
still has data behind its fetch offset (a response size limit), is read again next time,
as Kafka would. A parked incremental fetch waits on the session's one purgatory key
(:func:`session_watch_key`), and its ``try_complete`` looks at the dirty partitions only.

Differences from Kafka: one cache shard (Kafka 3.8+ splits the slots over 8 shards by
session id range); the eviction orderings are found by a scan when the cache is full
(least recently used, least valuable) rather than kept in tree maps: a scan happens only
when a full cache is asked for a new session, and a scan of 1,000 sessions takes well
under a millisecond.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tidegate.clock import MonotonicMs
from tidegate.errors import ErrorCode
from tidegate.utils import INT32_MAX

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EVICTION_MS = 120_000

#: a session's partition key: (topic name, partition) before Fetch v13, (topic id,
#: partition) from v13 (a topic id the broker does not know stays in the session)
SessionKey = tuple[Any, int]


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: epochs wrap from INT32_MAX to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session (Kafka's ``CachedPartition``): the client's fetch
    parameters and what the broker last told it."""

    key: SessionKey
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    #: the log's (topic name, partition) this partition was last read from (None: not
    #: yet, or its topic id is unknown); the cache's watch on it
    tp: tuple[str, int] | None = None
    #: position in the session's fetch order (the dirty partitions are read in it)
    seq: int = 0

    def update_request(self, fetch_offset: int, max_bytes: int, current_leader_epoch: int,
                       last_fetched_epoch: int) -> None:
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch

    def maybe_update_response_data(
        self, records_size: int, error: ErrorCode, high_watermark: int, log_start_offset: int,
        diverging: bool, update: bool,
    ) -> bool:
        """Kafka's ``maybeUpdateResponseData``: whether an incremental response must carry
        this partition (records, a new high watermark or log start offset, an error, a
        diverging epoch), remembering the new values when ``update``. An error resets the
        remembered high watermark so the partition is sent again once the error clears."""
        must = records_size > 0
        if self.high_watermark != high_watermark:
            must = True
            if update:
                self.high_watermark = high_watermark
        if self.log_start_offset != log_start_offset:
            must = True
            if update:
                self.log_start_offset = log_start_offset
        if error is not ErrorCode.none:
            if update:
                self.high_watermark = -1
            must = True
        return must or diverging


@dataclass(slots=True, eq=False)
class FetchSession:
    """Kafka's ``FetchSession``. ``partitions`` keeps the fetch order; a partition that
    returned records moves to the end (so a response size limit rotates fairly)."""

    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: MonotonicMs
    last_used_ms: MonotonicMs
    epoch: int
    partitions: dict[SessionKey, CachedPartition] = field(default_factory=dict)
    #: size when last touched (-1: never), which the cache's partition count holds
    cached_size: int = -1
    #: the partitions an incremental fetch must read (every one until the cache tracks
    #: the session: :meth:`FetchSessionCache.track`)
    dirty: set[SessionKey] = field(default_factory=set)
    #: the isolation level the dirty set was settled for (None: none yet)
    read_committed: bool | None = None
    _next_seq: int = 0
    #: topic key -> how many of its partitions the session holds
    _topics: dict[Any, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        topics = self._topics
        for key, cp in self.partitions.items():
            cp.seq = self._next_seq
            self._next_seq += 1
            topics[key[0]] = topics.get(key[0], 0) + 1
        self.dirty = set(self.partitions)

    def topic_keys(self) -> Iterable[Any]:
        """The session's distinct topics (names, or ids from Fetch v13)."""
        return self._topics.keys()

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: less valuable sorts first."""
        return (self.privileged, self.cached_size, self.id)

    def update(
        self, fetch_data: Iterable[tuple[SessionKey, int, int, int, int]], to_forget: Iterable[SessionKey],
        on_forget: Callable[[FetchSession, CachedPartition], None] | None = None,
    ) -> tuple[list[SessionKey], list[SessionKey], list[SessionKey]]:
        """Apply an incremental request: (key, fetch_offset, max_bytes,
        current_leader_epoch, last_fetched_epoch) adds or updates, ``to_forget`` removes.
        Returns (added, updated, removed), as Kafka's ``FetchSession.update``. Added and
        updated partitions are dirty (read by this fetch); ``on_forget`` sees each removed
        partition (the cache drops its watch)."""
        added: list[SessionKey] = []
        updated: list[SessionKey] = []
        removed: list[SessionKey] = []
        parts = self.partitions
        for key, offset, max_bytes, cle, lfe in fetch_data:
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(key, offset, max_bytes, cle, lfe, seq=self._next_seq)
                self._next_seq += 1
                self._topics[key[0]] = self._topics.get(key[0], 0) + 1
                added.append(key)
            else:
                cached.update_request(offset, max_bytes, cle, lfe)
                updated.append(key)
            self.dirty.add(key)
        for key in to_forget:
            gone = parts.pop(key, None)
            if gone is not None:
                removed.append(key)
                self.dirty.discard(key)
                left = self._topics[key[0]] - 1
                if left:
                    self._topics[key[0]] = left
                else:
                    del self._topics[key[0]]
                if on_forget is not None:
                    on_forget(self, gone)
        return added, updated, removed

    def move_to_end(self, key: SessionKey) -> None:
        cp = self.partitions[key] = self.partitions.pop(key)
        cp.seq = self._next_seq
        self._next_seq += 1

    def mark_all_dirty(self) -> None:
        self.dirty = set(self.partitions)

    def dirty_in_order(self) -> list[CachedPartition]:
        """The dirty partitions in fetch order: O(dirty log dirty) when few are dirty."""
        parts = self.partitions
        dirty = self.dirty
        if 4 * len(dirty) >= len(parts):
            return [cp for key, cp in parts.items() if key in dirty]
        found = [cp for key in dirty if (cp := parts.get(key)) is not None]
        found.sort(key=_seq_of)
        return found

    def settle(self, cp: CachedPartition, result: Any, read_committed: bool) -> None:
        """After answering ``cp`` with ``result`` (a FetchPartitionData): it stays dirty
        unless nothing in it can enter a response until its log changes (no records, no
        error, no diverging epoch, the fetch offset at the readable end)."""
        if settled(cp.fetch_offset, result, read_committed):
            self.dirty.discard(cp.key)
        else:
            self.dirty.add(cp.key)


def settled(fetch_offset: int, result: Any, read_committed: bool) -> bool:
    """Whether a partition answered with ``result`` (FetchPartitionData) can only enter a
    later incremental response after its log changes: no records, no error, no diverging
    epoch, and the fetch offset at the readable end (high watermark, or last stable
    offset for ``read_committed``)."""
    return (
        result.error is ErrorCode.none
        and result.diverging_epoch is None
        and not result.records
        and fetch_offset >= (result.last_stable_offset if read_committed else result.high_watermark)
    )


def _seq_of(cp: CachedPartition) -> int:
    return cp.seq


def session_watch_key(session: FetchSession) -> tuple[str, int]:
    """The one fetch-purgatory key a parked incremental fetch of ``session`` waits on."""
    return ("fetch-session", session.id)


class FetchSessionCache:
    """Kafka's ``FetchSessionCache``. ``id_source`` draws candidate session ids
    (random positive int32s; injectable so tests are deterministic)."""

    def __init__(
        self, max_entries: int = 1000, eviction_ms: int = EVICTION_MS,
        id_source: Callable[[], int] | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._id_source = id_source or (lambda: random.randint(1, INT32_MAX))
        self._sessions: dict[int, FetchSession] = {}
        #: log partition -> the (session, session key) pairs that hold it
        self._watchers: dict[tuple[str, int], set[tuple[FetchSession, SessionKey]]] = {}
        #: partitions over all sessions (Kafka's NumIncrementalFetchPartitionsCached)
        self.num_partitions = 0
        #: Kafka's IncrementalFetchSessionEvictionsPerSec count
        self.evictions_total = 0

    # -- metrics ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Kafka's NumIncrementalFetchSessions."""
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        return self.num_partitions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def __iter__(self) -> Iterator[FetchSession]:
        return iter(self._sessions.values())

    def _new_session_id(self) -> int:
        while True:
            sid = self._id_source()
            if sid != INVALID_SESSION_ID and sid not in self._sessions:
                return sid

    def maybe_create_session(
        self, now_ms: MonotonicMs, privileged: bool, size: int, uses_topic_ids: bool,
        create_partitions: Callable[[], dict[SessionKey, CachedPartition]],
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache is full and nothing
        may be evicted for it (the client then fetches sessionless)."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(
            self._new_session_id(), privileged, uses_topic_ids, now_ms, now_ms, next_epoch(INITIAL_EPOCH),
            create_partitions(),
        )
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _evictable(self, session: FetchSession, privileged: bool, now_ms: MonotonicMs) -> bool:
        """Kafka's evictableByAll (sessions older than eviction_ms) and, for a privileged
        newcomer, evictableByPrivileged (also every young unprivileged session). The test
        uses the time of the session's last touch, as Kafka's maps are filled then."""
        old = session.last_used_ms - session.creation_ms > self.eviction_ms
        return old or (privileged and not session.privileged)

    def _try_evict(self, privileged: bool, size: int, now_ms: MonotonicMs) -> bool:
        """Kafka's ``tryEvict``: the least recently used session if stale, else the least
        valuable evictable session if it is worth no more than the newcomer."""
        if not self._sessions:
            return False
        lru = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions_total += 1
            return True
        candidates = [s for s in self._sessions.values() if self._evictable(s, privileged, now_ms)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self.remove(victim.id)
        self.evictions_total += 1
        return True

    def touch(self, session: FetchSession, now_ms: MonotonicMs) -> None:
        """Mark a session used now and recount its partitions (Kafka's ``touch``)."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = session.size
        self.num_partitions += session.cached_size

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return None
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        for cp in session.partitions.values():
            self.unwatch(session, cp)
        return session

    # -- change tracking (what makes an idle incremental fetch O(changed)) -------------------
    def watch(self, session: FetchSession, cp: CachedPartition, tp: tuple[str, int]) -> None:
        """``cp`` of ``session`` reads the log of ``tp``: changes to it mark ``cp`` dirty."""
        if cp.tp == tp:
            return
        self.unwatch(session, cp)
        cp.tp = tp
        entry = (session, cp.key)
        holders = self._watchers.get(tp)
        if holders is None:
            self._watchers[tp] = {entry}
        else:
            holders.add(entry)

    def unwatch(self, session: FetchSession, cp: CachedPartition) -> None:
        tp = cp.tp
        if tp is None:
            return
        cp.tp = None
        holders = self._watchers.get(tp)
        if holders is not None:
            holders.discard((session, cp.key))
            if not holders:
                del self._watchers[tp]

    def track(self, session: FetchSession, dirty: Iterable[SessionKey], read_committed: bool) -> None:
        """A new session's partitions (their ``tp`` set from the full fetch) are watched
        from now; only ``dirty`` ones need reading by the first incremental fetch."""
        for cp in session.partitions.values():
            tp = cp.tp
            if tp is not None:
                cp.tp = None
                self.watch(session, cp, tp)
        session.dirty = set(dirty)
        session.read_committed = read_committed

    def partition_changed(self, tp: tuple[str, int]) -> list[FetchSession]:
        """The log of ``tp`` changed: mark it dirty in every session that holds it, and
        return those sessions (whose parked fetches may now complete)."""
        holders = self._watchers.get(tp)
        if not holders:
            return []
        out = []
        for session, key in holders:
            session.dirty.add(key)
            out.append(session)
        return out


# -- contexts (Kafka's FetchContext subclasses) -----------------------------------------------
@dataclass(slots=True)
class FetchContext:
    """What one Fetch request covers and how its response is shaped.

    ``kind``: ``"sessionless"`` (answer every requested partition, session id 0),
    ``"full"`` (answer every requested partition and try to open a session),
    ``"incremental"`` (fetch the session's partitions, answer the changed ones) or
    ``"error"`` (answer ``error`` with no partitions, session id 0)."""

    kind: str
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    #: the session epoch the response must still find (else INVALID_FETCH_SESSION_EPOCH)
    expected_epoch: int = 0


def request_is_full(epoch: int) -> bool:
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def new_context(
    cache: FetchSessionCache, now_ms: MonotonicMs, version: int, session_id: int, epoch: int,
    fetch_data: list[tuple[SessionKey, int, int, int, int]], to_forget: list[SessionKey],
) -> FetchContext:
    """Kafka's ``FetchManager.newContext``."""
    if request_is_full(epoch):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full request closes the session it names
        if epoch == FINAL_EPOCH:
            return FetchContext("sessionless")
        return FetchContext("full")
    session = cache.get(session_id)
    if session is None:
        return FetchContext("error", ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return FetchContext("error", ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != (version >= 13):
        return FetchContext("error", ErrorCode.fetch_session_topic_id_error)
    session.update(fetch_data, to_forget, cache.unwatch)
    if not session.partitions:
        # every partition forgotten: the session ends, and the request is answered
        # as a sessionless one (of no partitions)
        cache.remove(session.id)
        return FetchContext("sessionless")
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return FetchContext("incremental", session=session, expected_epoch=session.epoch)


def new_session_partitions(
    fetch_data: Iterable[tuple[SessionKey, int, int, int, int]], results: Iterable[Any],
    tps: Iterable[tuple[str, int] | None] | None = None,
) -> dict[SessionKey, CachedPartition]:
    """A new session's partitions from a full request and its response (Kafka's
    ``CachedPartition(part, reqData, respData)``: the high watermark and log start offset
    the client was just told). ``results`` are FetchPartitionData; ``tps`` the logs read
    (for :meth:`FetchSessionCache.track`)."""
    out: dict[SessionKey, CachedPartition] = {}
    tp_list = list(tps) if tps is not None else None
    for i, ((key, offset, max_bytes, cle, lfe), r) in enumerate(zip(fetch_data, results, strict=True)):
        hw = r.high_watermark if r.error is ErrorCode.none else -1
        cp = out[key] = CachedPartition(key, offset, max_bytes, cle, lfe, hw, r.log_start_offset)
        if tp_list is not None:
            cp.tp = tp_list[i]
    return out
