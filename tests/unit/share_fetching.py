"""A SharePartitionManager on fake time over the broker's real parts: the ``LogManager``
and ``ReplicaManager`` in a temporary directory (records appended through
``append_records``, which wakes parked share fetches through its hook), the ``TopicStore``
as the metadata image, the share-partitions' state in an ``InMemoryPersister`` with the
share coordinator's checks (or the share coordinator itself), and the manager's two
timers driven by a ``TimerReaper`` on a ``FakeLoop``, as the broker drives them.

:class:`Consumer` speaks as a share consumer does (librdkafka's epochs: 0, then +1 per
answered request), through :func:`handle_share_fetch` / :func:`handle_share_acknowledge`
with the typed requests; answers are the typed responses."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.fake_loop import FakeLoop, clock_at
from tidegate.config import BrokerConfig, topic_log_config
from tidegate.errors import ErrorCode
from tidegate.protocol.messages import share_acknowledge as sa
from tidegate.protocol.messages import share_fetch as sf
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import iter_batches, read_header
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.share import (
    InMemoryPersister,
    Persister,
    ShareAutoOffsetReset,
    SharePartitionKey,
)
from tidegate.server.share.share_apis import (
    ShareRequestContext,
    handle_share_acknowledge,
    handle_share_fetch,
)
from tidegate.server.share.share_partition_manager import (
    ShareGroupSettings,
    SharePartitionManager,
    SharePartitionManagerConfig,
)
from tidegate.server.timer_reaper import TimerReaper

T0 = 1_000_000
BROKER = BrokerConfig()
GROUP = "group"
LOCK_MS = 1_000
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0

#: (topic id, partition)
TP = tuple[uuid.UUID, int]
#: (first offset, last offset, acknowledge type or types)
Ack = tuple[int, int, int | Sequence[int]]


def value_batch(n: int = 1, *, size: int = 20, ts: int = 1_000, **kw: Any) -> bytearray:
    return build_batch([Record(b"v" * size, key=b"k%d" % i, timestamp=ts + i) for i in range(n)], **kw)


class Broker:
    """The share-fetching part of a broker (see the module docstring). ``settings`` are
    every group's :class:`ShareGroupSettings` unless :attr:`group_settings` names one
    (by default: 1 s locks, ``share.auto.offset.reset=earliest``)."""

    def __init__(self, path: Path, *, settings: ShareGroupSettings | None = None,
                 config: SharePartitionManagerConfig | None = None, persister: Persister | None = None,
                 loop: FakeLoop | None = None, replicas: ReplicaManager | None = None,
                 topics: TopicStore | None = None) -> None:
        self.loop = loop if loop is not None else FakeLoop(clock_at(T0))
        self.clock = self.loop.clock
        if replicas is None:
            topics = TopicStore(path)
            logs = LogManager(path, topics, lambda info: topic_log_config(BROKER, info.configs), self.clock,
                              self.loop)
            logs.load()
            replicas = ReplicaManager(logs, self.loop, clock=self.clock, fetch_sessions=FetchSessionCache(1000))
        assert topics is not None
        self.topics = topics
        self.replicas = replicas
        self.logs = replicas.logs
        self.persister: Any = persister if persister is not None else InMemoryPersister(self.partitions)
        self.settings = settings or ShareGroupSettings(record_lock_duration_ms=LOCK_MS,
                                                       auto_offset_reset=ShareAutoOffsetReset.earliest())
        self.group_settings: dict[str, ShareGroupSettings] = {}
        self.spm = SharePartitionManager(self.replicas, self.topics, self.persister, clock=self.clock,
                                         config=config, group_settings=self.settings_of)
        self.replicas.share_fetch_wakeup = self.spm.partitions_changed
        self.reaper = TimerReaper(self.loop.call_at)
        self.reaper.add_timer("share-group-lock-timeout", self.spm.lock_timer)
        self.reaper.add_purgatory(self.spm.purgatory)

    def settings_of(self, group_id: str) -> ShareGroupSettings:
        return self.group_settings.get(group_id, self.settings)

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        info = self.topics.get_by_id(topic_id)
        return None if info is None else info.partitions

    @property
    def now(self) -> int:
        return self.clock.milliseconds()

    # -- topics and records -------------------------------------------------------------

    def create_topic(self, name: str = "t", partitions: int = 1, *, group: str | None = GROUP,
                     start_offset: int = -1) -> uuid.UUID:
        """A topic, its share-partitions initialized for ``group`` as the group
        coordinator does (start offset -1: ``share.auto.offset.reset`` at the first load)."""
        topic_id = self.logs.create_topic(name, partitions, {}).topic_id
        if group is not None:
            self.initialize(group, topic_id, range(partitions), start_offset)
        return topic_id

    def initialize(self, group: str, topic_id: uuid.UUID, partitions: Iterable[int], start_offset: int = -1,
                   state_epoch: int = 0) -> None:
        for p in partitions:
            out: list[ErrorCode] = []
            self.persister.initialize(SharePartitionKey(group, topic_id, p), state_epoch, start_offset, out.append)
            self.run()
            assert out == [ErrorCode.none], out

    def append(self, topic: str, partition: int, batch: bytes | bytearray, *, from_client: bool = True) -> int:
        """Append one batch as a Produce (acks=1) does, then run what the shell runs
        once the response is written (the parked fetches' wake-ups); its base offset."""
        out: list[Any] = []
        self.replicas.append_records(0, 1, {(topic, partition): batch}, out.append, from_client=from_client,
                                     internal_topics_allowed=not from_client)
        result = out[0][(topic, partition)]
        assert result.error is ErrorCode.none, result
        self.run()
        return result.base_offset

    def produce(self, topic: str = "t", partition: int = 0, records: int = 1, *, batches: int = 1,
                size: int = 20) -> None:
        """``batches`` batches of ``records`` records each."""
        for _ in range(batches):
            self.append(topic, partition, value_batch(records, size=size))

    def run(self) -> None:
        self.replicas.try_complete_actions()
        self.loop.run_pending()

    def advance(self, ms: int) -> None:
        """Move fake time; the reaper expires locks and parked fetches as they fall due."""
        self.loop.advance(ms)
        self.run()

    def consumer(self, member_id: str = "member-1", *, group: str = GROUP, connection_id: int = 1) -> Consumer:
        return Consumer(self, member_id, group, connection_id)


class Call:
    """One request's answer: ``response`` is None while it waits; ``at`` is when it came."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.response: Any = None
        self.at: int | None = None
        self.count = 0

    def answer(self, response: Any) -> None:
        self.count += 1
        assert self.count == 1, "answered twice"
        self.response = response
        self.at = self.broker.now

    @property
    def done(self) -> bool:
        return self.response is not None


def _fetch_topics(partitions: Sequence[TP], acks: Mapping[TP, Sequence[Ack]]) -> list[sf.FetchTopic]:
    topics: dict[uuid.UUID, sf.FetchTopic] = {}
    for tp in list(partitions) + [tp for tp in acks if tp not in partitions]:
        topic = topics.setdefault(tp[0], sf.FetchTopic(topic_id=tp[0]))
        topic.partitions.append(sf.FetchPartition(
            partition_index=tp[1],
            acknowledgement_batches=[sf.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=_types(t))
                                     for f, l, t in acks.get(tp, ())]))
    return list(topics.values())


def _types(t: int | Sequence[int]) -> list[int]:
    return [t] if isinstance(t, int) else list(t)


class Consumer:
    """A share consumer: a member id, a connection, and the session epoch librdkafka keeps
    (0 first, +1 after each answer without a session error, 0 again after one)."""

    def __init__(self, broker: Broker, member_id: str, group: str, connection_id: int) -> None:
        self.broker = broker
        self.member_id = member_id
        self.group = group
        self.connection_id = connection_id
        self.epoch = 0
        self.version = 1
        #: every request's "the client went away" (the shell's ``request.abandoned``)
        self.abandoned = False
        #: the current connection's: set when it closes (see :meth:`disconnect`)
        self._gone = [False]
        self.topic_authorized: Any = None

    def context(self) -> ShareRequestContext:
        gone = self._gone
        return ShareRequestContext(self.version, self.connection_id, ("localhost", 9092),
                                   topic_authorized=self.topic_authorized,
                                   abandoned=lambda: self.abandoned or gone[0])

    def _next_epoch(self, call: Call, epoch: int | None) -> None:
        def update(response: Any) -> None:
            call.answer(response)
            if epoch is not None:
                return
            if response.error_code in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                                       ErrorCode.share_session_limit_reached):
                self.epoch = 0
            elif response.error_code == ErrorCode.none and self.epoch >= 0:
                self.epoch = 1 if self.epoch == 2**31 - 1 else self.epoch + 1
        self._update = update

    def fetch(self, *partitions: TP, acks: Mapping[TP, Sequence[Ack]] | None = None,
              forget: Sequence[TP] = (), epoch: int | None = None, max_wait: int = 0, min_bytes: int = 1,
              max_bytes: int = 52_428_800, max_records: int = 500, batch_size: int = 500,
              **fields: Any) -> Call:
        """A ShareFetch of ``partitions`` (with ``acks`` piggy-backed) at the consumer's
        epoch (or ``epoch``); the :class:`Call` answered now or later."""
        call = Call(self.broker)
        self._next_epoch(call, epoch)
        forgotten: dict[uuid.UUID, sf.ForgottenTopic] = {}
        for topic_id, p in forget:
            forgotten.setdefault(topic_id, sf.ForgottenTopic(topic_id=topic_id)).partitions.append(p)
        request = sf.ShareFetchRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch, max_wait=max_wait, min_bytes=min_bytes,
            max_bytes=max_bytes, max_records=max_records, batch_size=batch_size,
            topics=_fetch_topics(partitions, acks or {}), forgotten_topics_data=list(forgotten.values()), **fields)
        handle_share_fetch(self.broker.spm, request, self.context(), self._update)
        self.broker.run()
        return call

    def acknowledge(self, acks: Mapping[TP, Sequence[Ack]], *, epoch: int | None = None, **fields: Any) -> Call:
        call = Call(self.broker)
        self._next_epoch(call, epoch)
        topics: dict[uuid.UUID, sa.AcknowledgeTopic] = {}
        for (topic_id, p), batches in acks.items():
            topic = topics.setdefault(topic_id, sa.AcknowledgeTopic(topic_id=topic_id))
            topic.partitions.append(sa.AcknowledgePartition(
                partition_index=p,
                acknowledgement_batches=[sa.AcknowledgementBatch(first_offset=f, last_offset=l,
                                                                 acknowledge_types=_types(t))
                                         for f, l, t in batches]))
        request = sa.ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch, topics=list(topics.values()), **fields)
        handle_share_acknowledge(self.broker.spm, request, self.context(), self._update)
        self.broker.run()
        return call

    def close(self, acks: Mapping[TP, Sequence[Ack]] | None = None) -> Call:
        """librdkafka's close: ShareAcknowledge at epoch -1 with the pending acks."""
        call = self.acknowledge(acks or {}, epoch=-1)
        self.epoch = 0
        return call

    def disconnect(self) -> None:
        """The connection closes as the socket server closes one: the request parked
        on it is abandoned, so it never answers nor acquires (a client cannot read an
        answer on a closed connection), then the disconnect listener runs (the session
        ends, the member's records are released). The next request comes on a new
        connection."""
        self._gone[0] = True
        self.broker.spm.connection_closed(self.connection_id)
        self._gone = [False]
        self.broker.run()


# -- reading responses ------------------------------------------------------------------------


def partitions_of(response: sf.ShareFetchResponse) -> dict[TP, sf.PartitionData]:
    return {(t.topic_id, p.partition_index): p for t in response.responses for p in t.partitions}


def acquired(response: sf.ShareFetchResponse, tp: TP | None = None) -> Any:
    """(first, last, delivery count) of the acquired ranges of ``tp``, or of every
    partition as a dict."""
    ranges = {k: [(r.first_offset, r.last_offset, r.delivery_count) for r in p.acquired_records]
              for k, p in partitions_of(response).items()}
    if tp is not None:
        return ranges.get(tp, [])
    return {k: v for k, v in ranges.items() if v}


def batches_of(data: sf.PartitionData) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch a partition's records carry."""
    records = data.records or b""
    out = []
    for position, _size in iter_batches(records, verify_crc=True):
        header = read_header(records, position)
        out.append((header.base_offset, header.last_offset))
    return out


def offsets(ranges: Iterable[tuple[int, int, int]]) -> list[int]:
    return [o for first, last, _count in ranges for o in range(first, last + 1)]


def ack_errors(response: Any) -> dict[TP, int]:
    """Each partition's acknowledgement outcome: AcknowledgeErrorCode of a ShareFetch
    response, ErrorCode of a ShareAcknowledge response."""
    out = {}
    for t in response.responses:
        for p in t.partitions:
            code = p.acknowledge_error_code if isinstance(p, sf.PartitionData) else p.error_code
            out[(t.topic_id, p.partition_index)] = code
    return out
