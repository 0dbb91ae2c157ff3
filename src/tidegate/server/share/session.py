"""Share sessions (KIP-932, reference 2.6): Kafka's ``ShareSessionCache``,
``ShareSession`` and the session half of ``SharePartitionManager`` (``newContext``,
``acknowledgeSessionUpdate``, ``releaseSession``), sans-IO.

A share session is keyed by (group id, member id) and holds the partitions a member's
ShareFetch requests name. Its epoch: a ShareFetch at epoch 0 (``INITIAL_EPOCH``) drops
the member's old session and opens a new one (its next expected epoch 1); later
requests must carry the expected epoch, which then advances (after 2147483647 comes 1);
epoch -1 (``FINAL_EPOCH``) closes the session, and the member's acquired records go
back to the share-partitions (:func:`release_session`). A missing session (or one of
another member) is SHARE_SESSION_NOT_FOUND, a wrong epoch INVALID_SHARE_SESSION_EPOCH,
a full cache (``group.share.max.share.sessions``) SHARE_SESSION_LIMIT_REACHED: Kafka 4.2
evicts no session for a newcomer. A session also ends when the connection that opened it
closes (:meth:`ShareSessionCache.on_disconnect`): the listener is told the member left,
so its records are released. Sessions live in memory only: after a restart clients get
SHARE_SESSION_NOT_FOUND and open a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tidegate.errors import ErrorCode
from tidegate.server.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

from .share_partition import SharePartition, ShareResult, TopicIdPartition

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "ShareFetchContext",
    "ShareGroupListener",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionKey",
    "acknowledge_session_update",
    "new_context",
    "release_session",
]


class ShareSessionKey(NamedTuple):
    group_id: str
    member_id: str


@dataclass(eq=False, slots=True)
class ShareSession:
    """One member's session: its partitions (in request order; a partition whose last
    answer carried records moves to the end), the epoch its next request must carry, the
    connection that opened it. A partition's value is Kafka's ``requiresUpdateInResponse``
    (``CachedSharePartition``): added by a later request, or last answered with an error,
    it is in the next response even with nothing to report."""

    key: ShareSessionKey
    epoch: int
    connection_id: str
    partitions: dict[TopicIdPartition, bool] = field(default_factory=dict)
    #: size when the cache last counted it (-1: not yet)
    cached_size: int = -1

    @property
    def size(self) -> int:
        return len(self.partitions)

    def update(self, partitions: Iterable[TopicIdPartition], forget: Iterable[TopicIdPartition]
               ) -> tuple[list[TopicIdPartition], list[TopicIdPartition], list[TopicIdPartition]]:
        """Add the request's partitions (to be answered next time), drop the forgotten
        ones: (added, updated, removed)."""
        added: list[TopicIdPartition] = []
        updated: list[TopicIdPartition] = []
        removed: list[TopicIdPartition] = []
        parts = self.partitions
        for tp in partitions:
            if tp in parts:
                updated.append(tp)
            else:
                parts[tp] = True
                added.append(tp)
        for tp in forget:
            if tp in parts:
                del parts[tp]
                removed.append(tp)
        return added, updated, removed

    def update_cached_size(self) -> int:
        """Remember the current size; the change since the last count."""
        previous = self.cached_size
        self.cached_size = len(self.partitions)
        return self.cached_size - previous if previous != -1 else self.cached_size


class ShareGroupListener(Protocol):
    """Kafka's ``ShareGroupListener``: a member's session ended with its connection, and a
    group has no session left."""

    def on_member_leave(self, group_id: str, member_id: str) -> None: ...

    def on_group_empty(self, group_id: str) -> None: ...


class _ConnectionSession:
    """The session a connection opened; ``stale`` once that session ended otherwise (so
    the connection closing later does not drop a newer session of the same member)."""

    __slots__ = ("key", "stale")

    def __init__(self, key: ShareSessionKey) -> None:
        self.key = key
        self.stale = False


class ShareSessionCache:
    """At most ``max_entries`` sessions (``group.share.max.share.sessions``), the count of
    their partitions (the ``SharePartitionsCount`` gauge) and of sessions dropped by a
    closed connection (``ShareSessionEvictionsPerSec``)."""

    def __init__(self, max_entries: int, listener: ShareGroupListener | None = None) -> None:
        self.max_entries = max_entries
        self.listener = listener
        self._sessions: dict[ShareSessionKey, ShareSession] = {}
        self._members_per_group: dict[str, int] = {}
        self._connections: dict[str, _ConnectionSession] = {}
        self.num_partitions = 0
        self.evictions = 0

    def get(self, key: ShareSessionKey) -> ShareSession | None:
        return self._sessions.get(key)

    @property
    def size(self) -> int:
        return len(self._sessions)

    def num_members(self, group_id: str) -> int | None:
        return self._members_per_group.get(group_id)

    def maybe_create_session(self, group_id: str, member_id: str, partitions: Iterable[TopicIdPartition],
                             connection_id: str) -> ShareSessionKey | None:
        """A new session at the next epoch after 0; None when the cache is full."""
        if len(self._sessions) >= self.max_entries:
            return None
        key = ShareSessionKey(group_id, member_id)
        session = ShareSession(key, next_epoch(INITIAL_EPOCH), connection_id, dict.fromkeys(partitions, False))
        self._sessions[key] = session
        self.update_num_partitions(session)
        self._members_per_group[group_id] = self._members_per_group.get(group_id, 0) + 1
        self._connections[connection_id] = _ConnectionSession(key)
        return key

    def update_num_partitions(self, session: ShareSession) -> None:
        self.num_partitions += session.update_cached_size()

    def remove(self, key: ShareSessionKey) -> ShareSession | None:
        session = self._sessions.pop(key, None)
        if session is None:
            return None
        self.num_partitions -= session.cached_size
        group = key.group_id
        self._members_per_group[group] = self._members_per_group.get(group, 1) - 1
        owner = self._connections.get(session.connection_id)
        if owner is not None:
            owner.stale = True
        return session

    def remove_all_sessions(self) -> None:
        """Share groups were disabled: forget every session (connections stay mapped
        until they close)."""
        self._sessions.clear()
        self._members_per_group.clear()
        self.num_partitions = 0

    def on_disconnect(self, connection_id: str) -> ShareSessionKey | None:
        """The connection closed: the session it opened (unless already ended) ends, the
        listener hears the member left (and releases its records) and, when the group
        has no session left, that it is empty. Returns the ended session's key."""
        owner = self._connections.pop(connection_id, None)
        if owner is None:
            return None
        ended = None
        key = owner.key
        if not owner.stale and key in self._sessions:
            self.evictions += 1
            if self.listener is not None:
                self.listener.on_member_leave(key.group_id, key.member_id)
            self.remove(key)
            ended = key
        if self._members_per_group.get(key.group_id, 0) == 0:
            self._members_per_group.pop(key.group_id, None)
            if self.listener is not None:
                self.listener.on_group_empty(key.group_id)
        return ended


@dataclass(frozen=True, slots=True)
class ShareFetchContext:
    """What a ShareFetch's session part decided (Kafka's ``ShareFetchContext``):
    ``error`` (top level), else ``final`` (epoch -1: acknowledge, then release), or the
    session and whether this request opened it (``initial``)."""

    error: ErrorCode = ErrorCode.none
    session: ShareSession | None = None
    initial: bool = False
    final: bool = False


def new_context(
    cache: ShareSessionCache,
    group_id: str,
    member_id: str,
    epoch: int,
    partitions: Sequence[TopicIdPartition],
    forgotten: Sequence[TopicIdPartition],
    has_acknowledgements: bool,
    connection_id: str,
) -> ShareFetchContext:
    """The session half of a ShareFetch (Kafka's ``SharePartitionManager.newContext``)."""
    key = ShareSessionKey(group_id, member_id)
    if epoch == FINAL_EPOCH:
        if cache.get(key) is None:
            return ShareFetchContext(ErrorCode.share_session_not_found)
        return ShareFetchContext(final=True)
    if epoch == INITIAL_EPOCH:
        if has_acknowledgements:
            return ShareFetchContext(ErrorCode.invalid_request)
        cache.remove(key)
        if cache.maybe_create_session(group_id, member_id, partitions, connection_id) is None:
            return ShareFetchContext(ErrorCode.share_session_limit_reached)
        return ShareFetchContext(session=cache.get(key), initial=True)
    session = cache.get(key)
    if session is None:
        return ShareFetchContext(ErrorCode.share_session_not_found)
    if session.epoch != epoch:
        return ShareFetchContext(ErrorCode.invalid_share_session_epoch)
    session.update(partitions, forgotten)
    cache.update_num_partitions(session)
    session.epoch = next_epoch(session.epoch)
    return ShareFetchContext(session=session)


def acknowledge_session_update(cache: ShareSessionCache, group_id: str, member_id: str, epoch: int) -> ErrorCode:
    """The session half of a ShareAcknowledge (Kafka's ``acknowledgeSessionUpdate``):
    epoch 0 is refused, -1 needs the session (the caller then releases), else the
    expected epoch, which advances."""
    if epoch == INITIAL_EPOCH:
        return ErrorCode.invalid_share_session_epoch
    session = cache.get(ShareSessionKey(group_id, member_id))
    if session is None:
        return ErrorCode.share_session_not_found
    if epoch == FINAL_EPOCH:
        return ErrorCode.none
    if session.epoch != epoch:
        return ErrorCode.invalid_share_session_epoch
    cache.update_num_partitions(session)
    session.epoch = next_epoch(session.epoch)
    return ErrorCode.none


def release_session(
    cache: ShareSessionCache,
    group_id: str,
    member_id: str,
    share_partitions: Callable[[TopicIdPartition], SharePartition | None],
    callback: Callable[[ErrorCode, dict[TopicIdPartition, ShareResult]], None],
) -> None:
    """End the member's session and release what it holds on each of its partitions
    (Kafka's ``releaseSession``): ``callback(error, results)`` once every release is
    written; SHARE_SESSION_NOT_FOUND without a session, UNKNOWN_TOPIC_OR_PARTITION for a
    partition without a share-partition here."""
    key = ShareSessionKey(group_id, member_id)
    session = cache.remove(key)
    if session is None:
        callback(ErrorCode.share_session_not_found, {})
        return
    results: dict[TopicIdPartition, ShareResult] = {}
    waiting = len(session.partitions)
    if not waiting:
        callback(ErrorCode.none, results)
        return

    def done(tp: TopicIdPartition, result: ShareResult) -> None:
        nonlocal waiting
        results[tp] = result
        waiting -= 1
        if not waiting:
            callback(ErrorCode.none, results)

    def release(tp: TopicIdPartition) -> None:
        share_partition = share_partitions(tp)
        if share_partition is None:
            done(tp, ShareResult(ErrorCode.unknown_topic_or_partition))
        else:
            share_partition.release_acquired_records(member_id, lambda result: done(tp, result))

    for tp in list(session.partitions):
        release(tp)
