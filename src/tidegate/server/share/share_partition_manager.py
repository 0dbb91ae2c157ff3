"""Kafka's ``SharePartitionManager`` (KIP-932): the broker's share-partitions and share
sessions, the fetch and acknowledgement of records, sans-IO.

* **The share-partition cache**: a :class:`~.share_partition.SharePartition` per (group,
  topic id, partition), created on the first fetch of it and loaded from the
  :class:`~.persister.Persister` (``share.auto.offset.reset`` for one without a start
  offset); a fetch meanwhile waits in the share fetch purgatory and the load's end wakes
  it. One that fails to load, or whose persister answers say it was fenced
  (NOT_LEADER_OR_FOLLOWER, FENCED_STATE_EPOCH, GROUP_ID_NOT_FOUND,
  UNKNOWN_TOPIC_OR_PARTITION), leaves the cache: the next fetch loads it again. Its
  acquisition locks are on the manager's own timing wheel (:attr:`lock_timer`), their
  duration the group's ``share.record.lock.duration.ms`` at each acquisition.
* **Fetch** (:meth:`SharePartitionManager.fetch_messages`): a
  :class:`~.delayed_share_fetch.DelayedShareFetch` in the share fetch purgatory
  (:attr:`purgatory`, ``share.fetch.purgatory.purge.interval.requests``), watched under
  each share-partition's key (woken by its acknowledgements, releases, lock expiries and
  load: the share-partition's listener) and each (topic id, partition) (woken by appends,
  through :meth:`SharePartitionManager.partitions_changed`, the ReplicaManager's hook).
  A lock expiry wakes a parked fetch in the same advance of the lock timer that expired
  it: exact to the wheel's tick.
* **Acknowledge** (:meth:`SharePartitionManager.acknowledge`) and **release**
  (:meth:`SharePartitionManager.release_session`: the session closed with epoch -1;
  :meth:`SharePartitionManager.connection_closed`: the connection that opened it closed;
  :meth:`SharePartitionManager.on_member_leave`: the member left the group, the group
  coordinator's hook).
* **Sessions**: the :class:`~.session.ShareSessionCache` (``group.share.max.share.sessions``).
* **Topics**: a deleted topic's share-partitions leave the cache
  (:meth:`SharePartitionManager.on_topics_deleted`); a topic created again under the same
  name has another id, so its share-partitions start afresh. A group whose persisted
  state the group coordinator deleted or initialized again leaves it too
  (:meth:`SharePartitionManager.drop_share_partitions`).

The request handling around it (sessions' epochs, the checks, the typed responses) is
:mod:`.share_apis`. One node leads every partition: there is no leadership change to
follow, the leader epoch is the log's.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidegate.clock import Clock
from tidegate.config import BrokerConfig
from tidegate.errors import ErrorCode
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.timer import FunctionTask, SystemTimer

from .acknowledgements import ShareAcknowledgementBatch
from .delayed_share_fetch import (
    DelayedShareFetch,
    FetchResults,
    ShareFetch,
    ShareFetchParams,
    ShareFetchPartition,
    TopicIdPartition,
    _Candidate,
)
from .metrics import ShareGroupMetrics
from .persister import Persister, SharePartitionKey
from .session import ShareSessionCache, ShareSessionKey, release_session
from .share_partition import ShareAutoOffsetReset, SharePartition, SharePartitionState, ShareResult

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.server.log_manager import TopicPartition
    from tidegate.server.metadata import TopicInfo
    from tidegate.server.replica_manager import ReplicaManager

__all__ = [
    "ShareGroupSettings",
    "SharePartitionManager",
    "SharePartitionManagerConfig",
    "TopicsById",
    "rotate_partitions",
]

log = logging.getLogger(__name__)

#: persister answers that say this share-partition is no longer the one to use (Kafka's
#: ``fencedSharePartitionHandler``): it leaves the cache and is loaded again
_FENCED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_state_epoch,
                     ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition})


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """What a share group's configs decide here (a group config, else the broker's
    ``group.share.*`` key): the lock duration (read at each acquisition), the delivery
    count limit and in-flight bound (read when a share-partition is created),
    ``share.auto.offset.reset`` (at a share-partition's first load) and
    ``share.isolation.level`` (at each fetch)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    auto_offset_reset: ShareAutoOffsetReset = field(default_factory=ShareAutoOffsetReset.latest)
    read_committed: bool = False

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> ShareGroupSettings:
        """From a group's config values in force (``GroupConfigManager.values``)."""
        return cls(
            record_lock_duration_ms=values["share.record.lock.duration.ms"],
            delivery_count_limit=values["share.delivery.count.limit"],
            partition_max_record_locks=values["share.partition.max.record.locks"],
            auto_offset_reset=ShareAutoOffsetReset.parse(values["share.auto.offset.reset"]),
            read_committed=values["share.isolation.level"] == "read_committed",
        )


@dataclass(frozen=True, slots=True)
class SharePartitionManagerConfig:
    """The broker's keys the manager reads."""

    #: group.share.max.share.sessions
    max_share_sessions: int = 2000
    #: share.fetch.purgatory.purge.interval.requests
    fetch_purge_interval_requests: int = 1000
    #: fetch.max.bytes: the most a ShareFetch answers
    fetch_max_bytes: int = 57_671_680
    #: the group.share.* keys: every group's settings unless its configs override them
    defaults: ShareGroupSettings = field(default_factory=ShareGroupSettings)

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> SharePartitionManagerConfig:
        return cls(
            max_share_sessions=config.get("group.share.max.share.sessions"),
            fetch_purge_interval_requests=config.get("share.fetch.purgatory.purge.interval.requests"),
            defaults=ShareGroupSettings(
                record_lock_duration_ms=config.get("group.share.record.lock.duration.ms"),
                delivery_count_limit=config.get("group.share.delivery.count.limit"),
                partition_max_record_locks=config.get("group.share.partition.max.record.locks"),
            ),
        )


class TopicsById(Protocol):
    """The metadata image's topics by id (:class:`tidegate.server.metadata.TopicStore`)."""

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...


def rotate_partitions(partitions: Sequence[ShareFetchPartition], session_epoch: int) -> list[ShareFetchPartition]:
    """Kafka's round-robin ``PartitionRotateStrategy``: start at ``epoch % n`` so no
    partition is starved by the ones before it taking the response's bytes and records
    (not for the opening or closing epoch)."""
    n = len(partitions)
    if n <= 1 or session_epoch < 1:
        return list(partitions)
    at = session_epoch % n
    return list(partitions[at:]) + list(partitions[:at])


class SharePartitionManager:
    """The share-partitions and share sessions of the broker (see the module docstring).

    ``group_settings`` gives a group's :class:`ShareGroupSettings` (its group configs over
    the broker's; default: ``config.defaults`` for every group). The two timers,
    :attr:`lock_timer` and :attr:`purgatory`'s, are driven by the broker's timer reaper."""

    def __init__(
        self,
        replicas: ReplicaManager,
        topics: TopicsById,
        persister: Persister,
        *,
        clock: Clock,
        config: SharePartitionManagerConfig | None = None,
        group_settings: Callable[[str], ShareGroupSettings] | None = None,
    ) -> None:
        self.replicas = replicas
        self.topics = topics
        self.persister = persister
        self.clock = clock
        self.config = config = config if config is not None else SharePartitionManagerConfig()
        defaults = config.defaults
        self.group_settings: Callable[[str], ShareGroupSettings] = (
            group_settings if group_settings is not None else lambda _group_id: defaults)
        #: the acquisition locks of every share-partition (Kafka's "share-group-lock-timeout")
        self.lock_timer = SystemTimer(clock=clock)
        self.purgatory = DelayedOperationPurgatory(
            "ShareFetch", SystemTimer(clock=clock), config.fetch_purge_interval_requests)
        self.sessions = ShareSessionCache(config.max_share_sessions, listener=self)
        #: ShareGroupMetrics and the share request counters of BrokerTopicMetrics
        self.metrics = ShareGroupMetrics()
        self._groups: dict[str, dict[TopicIdPartition, SharePartition]] = {}
        #: topic name -> id, for the topics with share-partitions here (appends are told
        #: by name, parked fetches wait by id)
        self._topic_ids: dict[str, uuid.UUID] = {}

    # -- the cache ------------------------------------------------------------------------

    def share_partition(self, group_id: str, tp: TopicIdPartition) -> SharePartition | None:
        group = self._groups.get(group_id)
        return None if group is None else group.get(tp)

    def share_partitions(self, group_id: str) -> list[SharePartition]:
        return list(self._groups.get(group_id, {}).values())

    def share_partition_metrics(self) -> list[tuple[str, str, int, SharePartition]]:
        """(group, topic name, partition, share-partition) of every cached share-partition
        of a topic that exists (the SharePartitionMetrics series)."""
        out = []
        for group_id, group in self._groups.items():
            for (topic_id, partition), sp in group.items():
                info = self.topics.get_by_id(topic_id)
                if info is not None:
                    out.append((group_id, info.name, partition, sp))
        return out

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.topics.get_by_id(topic_id)
        return None if info is None else info.name

    @property
    def num_share_partitions(self) -> int:
        return sum(map(len, self._groups.values()))

    def _get_or_create(self, group_id: str, fp: ShareFetchPartition) -> SharePartition:
        tp = (fp.topic_id, fp.partition)
        group = self._groups.setdefault(group_id, {})
        sp = group.get(tp)
        if sp is not None:
            return sp
        plog = self.replicas.get_log(fp.topic, fp.partition)
        settings = self.group_settings(group_id)
        key = SharePartitionKey(group_id, fp.topic_id, fp.partition)
        sp = SharePartition(
            group_id, fp.topic_id, fp.partition,
            timer=self.lock_timer,
            persister=self.persister,
            max_in_flight_records=settings.partition_max_record_locks,
            max_delivery_count=settings.delivery_count_limit,
            record_lock_duration_ms=functools.partial(self.lock_duration_ms, group_id),
            leader_epoch=plog.leader_epoch if plog is not None else 0,
            listener=functools.partial(self.purgatory.check_and_complete, key),
        )
        group[tp] = sp
        self._topic_ids[fp.topic] = fp.topic_id
        return sp

    def lock_duration_ms(self, group_id: str) -> int:
        """The group's acquisition lock duration (the response's AcquisitionLockTimeoutMs)."""
        return self.group_settings(group_id).record_lock_duration_ms

    def _remove(self, sp: SharePartition) -> None:
        """Drop ``sp`` from the cache (if it is still the one cached): fenced, its locks
        cancelled; fetches parked on it answer now."""
        key = sp.key
        group = self._groups.get(key.group_id)
        tp = (key.topic_id, key.partition)
        if group is None or group.get(tp) is not sp:
            return
        del group[tp]
        if not group:
            del self._groups[key.group_id]
        sp.mark_fenced()
        sp.cancel_locks()
        self.purgatory.check_and_complete(key)

    def unusable_error(self, tp: TopicIdPartition, sp: SharePartition) -> ErrorCode:
        """The error a fetch answers for a share-partition that is neither loading nor
        active: its topic is gone (UNKNOWN_TOPIC_ID), it was fenced
        (NOT_LEADER_OR_FOLLOWER: the client looks for the leader again) or failed to load."""
        if self.topics.get_by_id(tp[0]) is None:
            return ErrorCode.unknown_topic_id
        if sp.state is SharePartitionState.FENCED:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_server_error

    # -- fetch ----------------------------------------------------------------------------

    def fetch_messages(
        self,
        group_id: str,
        member_id: str,
        params: ShareFetchParams,
        partitions: Sequence[ShareFetchPartition],
        callback: Callable[[FetchResults], None],
        abandoned: Callable[[], bool] | None = None,
    ) -> None:
        """Acquire records of ``partitions`` for ``member_id`` (Kafka's ``fetchMessages``):
        ``callback`` gets each partition's answer, now or once records are acquirable,
        a partition failed, or ``params.max_wait_ms`` passed (see
        :mod:`.delayed_share_fetch`). The partitions must exist (the caller answers the
        unknown ones)."""
        settings = self.group_settings(group_id)
        names = {(fp.topic_id, fp.partition): fp.topic for fp in partitions}

        def answered(results: FetchResults) -> None:
            self.metrics.fetch_requested(names.values(), [
                names[tp] for tp, data in results.items() if data.error_code and tp in names])
            callback(results)

        fetch = ShareFetch(group_id, member_id, params, answered, read_committed=settings.read_committed,
                           abandoned=abandoned)
        candidates: dict[TopicIdPartition, _Candidate] = {}
        keys: list[object] = []
        for fp in rotate_partitions(partitions, params.session_epoch):
            tp = (fp.topic_id, fp.partition)
            plog = self.replicas.get_log(fp.topic, fp.partition)
            if plog is None:
                fetch.add_erroneous(tp, ErrorCode.unknown_topic_or_partition)
                continue
            sp = self._get_or_create(group_id, fp)
            candidates[tp] = _Candidate(fp, sp, plog)
            keys += (sp.key, tp)
            self._maybe_load(sp, plog, settings, fetch, tp)
        if len(fetch.erroneous) >= len(partitions):
            fetch.complete({})
            return
        self.purgatory.try_complete_else_watch(DelayedShareFetch(fetch, self, candidates, len(names)), keys)

    def _maybe_load(self, sp: SharePartition, plog: Log, settings: ShareGroupSettings, fetch: ShareFetch,
                    tp: TopicIdPartition) -> None:
        """Load ``sp`` if it is not yet: a failure leaves the cache and fails this fetch's
        partition; a load answered later wakes the fetches waiting for it. The load's
        time is ShareGroupMetrics PartitionLoadTimeMs (once per load: Kafka records it
        for each fetch that waited for the load)."""
        if sp.state is SharePartitionState.ACTIVE:
            return
        calling = True
        loading = sp.state is SharePartitionState.EMPTY
        started_ns = self.clock.nanoseconds()

        def loaded(result: ShareResult) -> None:
            if result.error is ErrorCode.leader_not_available:
                return  # loading for another fetch: its end wakes this one too
            if loading:
                self.metrics.partition_loaded(self.clock.nanoseconds() - started_ns)
            if result.error is not ErrorCode.none:
                log.info("share-partition %s failed to load: %s %s", sp.key, result.error.name, result.message)
                fetch.add_erroneous(tp, result.error, result.message)
                self._remove(sp)
            elif not calling:
                self.purgatory.check_and_complete(sp.key)

        sp.maybe_initialize(loaded, offsets=plog, reset=settings.auto_offset_reset,
                            wall_clock_ms=self.clock.wall_milliseconds())
        calling = False

    def answer_later(self, delay_ms: int, answer: Callable[[], object]) -> None:
        """Run ``answer`` after ``delay_ms`` on the share fetch purgatory's timer (a full
        session cache is answered after MaxWaitMs, so clients do not spin on it)."""
        self.purgatory.timer.add(FunctionTask(max(delay_ms, 0), answer))

    def partitions_changed(self, keys: Iterable[TopicPartition]) -> None:
        """Records were appended to these partitions (their high watermark or last stable
        offset moved), or they went away: fetches parked on them try again (the
        ReplicaManager's hook, run where it wakes parked fetches)."""
        topic_ids = self._topic_ids
        if not topic_ids:
            return
        check = self.purgatory.check_and_complete
        for topic, partition in keys:
            topic_id = topic_ids.get(topic)
            if topic_id is not None:
                check((topic_id, partition))

    # -- acknowledge and release ---------------------------------------------------------

    def acknowledge(
        self,
        member_id: str,
        group_id: str,
        acknowledgements: Mapping[TopicIdPartition, Sequence[ShareAcknowledgementBatch]],
        callback: Callable[[dict[TopicIdPartition, ShareResult]], None],
    ) -> None:
        """Apply each partition's acknowledgements (Kafka's ``acknowledge``): ``callback``
        gets every partition's outcome once each is written (UNKNOWN_TOPIC_OR_PARTITION
        for a share-partition not here). Parked fetches wake through the share-partitions'
        listeners."""
        results: dict[TopicIdPartition, ShareResult] = {}
        waiting = len(acknowledgements)
        if not waiting:
            callback(results)
            return

        def done(tp: TopicIdPartition, sp: SharePartition | None, result: ShareResult) -> None:
            nonlocal waiting
            if sp is not None and result.error in _FENCED:
                self._remove(sp)
            elif sp is not None and result.error is ErrorCode.none:
                self.metrics.record_acknowledgements(acknowledgements[tp])
            results[tp] = result
            waiting -= 1
            if not waiting:
                names = {tp: name for tp in acknowledgements if (name := self._topic_name(tp[0])) is not None}
                self.metrics.acknowledge_requested(
                    names.values(), [names[tp] for tp, r in results.items() if r.error and tp in names])
                callback({t: results[t] for t in acknowledgements})

        for tp, batches in acknowledgements.items():
            sp = self.share_partition(group_id, tp)
            if sp is None:
                done(tp, None, ShareResult(ErrorCode.unknown_topic_or_partition))
            else:
                sp.acknowledge(member_id, batches, functools.partial(done, tp, sp))

    def release_session(self, group_id: str, member_id: str,
                        callback: Callable[[ErrorCode, dict[TopicIdPartition, ShareResult]], None]) -> None:
        """End the member's session and release the records it holds in the session's
        partitions (Kafka's ``releaseSession``); ``callback`` once every release is
        written (SHARE_SESSION_NOT_FOUND without a session)."""
        release_session(self.sessions, group_id, member_id, functools.partial(self.share_partition, group_id),
                        callback)

    def on_member_leave(self, group_id: str, member_id: str) -> None:
        """The member is gone (its session's connection closed, or it left the group or
        was fenced by the group coordinator): every record it holds in the group's
        share-partitions becomes acquirable again (ARCHIVED at the delivery limit)."""
        for sp in self.share_partitions(group_id):
            sp.release_acquired_records(member_id, _ignore)

    def member_left_group(self, group_id: str, member_id: str) -> None:
        """The group coordinator's hook: the member left the group or was fenced. A member
        that still has a share session keeps its records: its session's end releases them
        (the closing ShareAcknowledge or ShareFetch, or its connection closing, as Kafka's
        ShareSessionCache tells its listener), and Kafka's group coordinator releases
        nothing. librdkafka's close sends the closing ShareAcknowledge, carrying the last
        acknowledgements, and the leaving heartbeat at once on two connections: releasing
        here would fail those acknowledgements whenever the heartbeat came first. Without
        a session (dropped by a new one at epoch 0, say) the records are released now
        instead of at their locks' expiry."""
        if self.sessions.get(ShareSessionKey(group_id, member_id)) is None:
            self.on_member_leave(group_id, member_id)

    def on_group_empty(self, group_id: str) -> None:
        """The group has no share session left (nothing to do: its share-partitions keep
        their state until they are fenced or their topic is deleted)."""

    def connection_closed(self, connection_id: int) -> None:
        """A client connection closed: the share session it opened ends, and its member's
        records are released (Kafka's connection disconnect listener)."""
        self.sessions.on_disconnect(str(connection_id))

    # -- topics ---------------------------------------------------------------------------

    def on_topics_deleted(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Deleted topics' share-partitions leave the cache (their persisted state is the
        share coordinator's to delete); fetches parked on them answer now."""
        deleted = set(topic_ids)
        for group in list(self._groups.values()):
            for tp, sp in list(group.items()):
                if tp[0] in deleted:
                    self._remove(sp)
                    self.purgatory.check_and_complete(tp)
        for name in [n for n, tid in self._topic_ids.items() if tid in deleted]:
            del self._topic_ids[name]
            self.metrics.remove_topic(name)

    def drop_share_partitions(self, group_id: str, topic_ids: Iterable[uuid.UUID] | None = None) -> None:
        """The group's persisted share state was deleted or initialized again (DeleteGroups,
        DeleteShareGroupOffsets, AlterShareGroupOffsets: the group coordinator's hook):
        its cached share-partitions (of ``topic_ids``, or all) are dropped, so the next
        fetch loads what is persisted now instead of acquiring from the old cache."""
        group = self._groups.get(group_id)
        if group is None:
            return
        wanted = None if topic_ids is None else set(topic_ids)
        for tp, sp in list(group.items()):
            if wanted is None or tp[0] in wanted:
                self._remove(sp)

    # -- shutdown -------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Answer every parked share fetch with what it can acquire now, then stop the
        timers."""
        self.purgatory.complete_all()
        self.purgatory.shutdown()
        self.lock_timer.shutdown()


def _ignore(_result: ShareResult) -> None:
    pass
