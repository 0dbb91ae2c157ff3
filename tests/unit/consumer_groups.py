"""A KIP-848 consumer group coordinator on fake time, over the broker's real parts: the
``LogManager`` and ``ReplicaManager`` in a temporary directory, ``__consumer_offsets``
written through ``OffsetsLog.append`` (acks=all, fsynced when the fake loop runs), the
``TopicStore`` as the metadata image, the classic ``GroupCoordinator`` beside it (the
group ids they share) and a ``SystemTimer`` on the fake clock (the classic heartbeat
purgatory's, as the broker wires them). Shared by the consumer group test modules."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from tests.fake_loop import FakeLoop, clock_at
from tidegate.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from tidegate.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    OffsetsLog,
    decode_coordinator_record,
    parse_key,
)
from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroup
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    ConsumerGroupManager,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import ConsumerGroupMember
from tidegate.coordinator.group.modern.consumer.records import (
    CoordinatorRecord,
    new_classic_group_record,
    new_classic_group_tombstone_record,
)
from tidegate.errors import ErrorCode as E
from tidegate.log.config import LogConfig
from tidegate.log.log import Log
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.timer import SystemTimer

T0 = 1_000_000
SESSION = 45_000
INTERVAL = 5_000


def _decode(key: bytes, value: bytes | None) -> CoordinatorRecord:
    parsed = parse_key(key)
    if parsed[0] == "g":  # the classic coordinator's record: an upgrade's tombstone, a downgrade's group
        return new_classic_group_tombstone_record(parsed[1]) if value is None else new_classic_group_record(parsed[1], value)
    record = decode_coordinator_record(parsed, value)
    assert record is not None, parsed
    return record


def mk(*topics: tuple[uuid.UUID, Sequence[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment: ``mk((foo, (0, 1)), (bar, (2,)))``."""
    return {t: frozenset(p) for t, p in topics if p}


class Harness:
    def __init__(self, tmp_path: Any, config: ConsumerGroupConfig | None = None, **kw: Any) -> None:
        self.tmp_path = tmp_path
        self.clock = clock_at(T0)
        self.config = config or ConsumerGroupConfig()
        self.kw = kw
        #: every batch the manager appended, decoded back from what was written
        self.batches: list[list[CoordinatorRecord]] = []
        self._build()

    def _build(self) -> None:
        self.loop = FakeLoop(self.clock)
        self.topics = TopicStore(self.tmp_path)
        self.logs = LogManager(
            self.tmp_path, self.topics, lambda info: LogConfig(retention_ms=-1), self.clock, self.loop
        )
        self.logs.load()
        self.replicas = ReplicaManager(self.logs, self.loop, clock=self.clock, fetch_sessions=FetchSessionCache(1000))
        self.store = OffsetsLog(self._open, self.clock, append_records=self.replicas.append_records)
        self.timer = SystemTimer(clock=self.clock)
        #: the classic coordinator (its groups, every group's offsets), on the same wheel
        self.classic = GroupCoordinator(
            GroupConfig(initial_rebalance_delay_ms=0),
            DelayedOperationPurgatory("Heartbeat", self.timer),
            DelayedOperationPurgatory("Rebalance", self.timer),
            self.store,
            self.clock,
            other_groups=lambda g: self.manager.group_type(g),
            consumer_groups=lambda g: self.manager.groups.get(g),
        )
        self.manager = self._new_manager()
        self.classic.classic_members = self.manager
        self.store.load(self._replay)
        self.classic.on_loaded()
        self.manager.on_loaded()

    def _replay(self, batch) -> None:
        self.classic.replay_batch(batch)
        self.manager.replay_batch(batch)

    def _new_manager(self) -> Any:
        """The coordinator under test, on this harness's parts."""
        return ConsumerGroupManager(
            self.config,
            image=self.topics,
            append=self._append,
            timer=self.timer,
            clock=self.clock,
            classic_groups=self.classic,
            **self.kw,
        )

    def _append(self, records):
        pending = self.store.append(records)
        self.batches.append([_decode(k, v) for k, v in records])
        return pending

    def _kept_on_restart(self) -> dict[str, Any]:
        """What outlives the coordinator besides the directory (a subclass's parts)."""
        return {}

    def _open(self, create: bool) -> Log | None:
        plog = self.logs.get_log(OFFSETS_TOPIC, 0)
        if plog is None and create:
            self.logs.create_topic(OFFSETS_TOPIC, 1, {})
            plog = self.logs.get_log(OFFSETS_TOPIC, 0)
        return plog

    def restart(self) -> Harness:
        """A new coordinator over the same directory, loaded from the log."""
        self.manager.shutdown()
        self.logs.close()
        h = type(self).__new__(type(self))
        h.__dict__.update(self._kept_on_restart())
        h.tmp_path, h.config, h.kw, h.batches = self.tmp_path, self.config, self.kw, []
        h.clock = clock_at(self.clock.milliseconds())
        h._build()
        return h

    # -- topics -----------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> uuid.UUID:
        return self.logs.create_topic(name, partitions, {}).topic_id

    def delete_topic(self, name: str) -> None:
        self.logs.delete_topic(name)

    # -- requests ---------------------------------------------------------------------------
    def send(self, request: ConsumerGroupHeartbeat) -> list[ConsumerGroupHeartbeatResult]:
        """Send without running the loop: the answers so far (empty until durable)."""
        answers: list[ConsumerGroupHeartbeatResult] = []
        self.manager.consumer_group_heartbeat(request, answers.append)
        return answers

    def heartbeat(self, group_id: str = "grp", member_id: str = "m1", epoch: int = 0, **fields: Any):
        """One heartbeat, answered once durable. A join (epoch 0) gets the fields a
        client sends on a join unless given: rebalance timeout, empty owned partitions."""
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 5000)
            fields.setdefault("topic_partitions", [])
        answers = self.send(ConsumerGroupHeartbeat(group_id, member_id, epoch, **fields))
        self.loop.run_pending()
        assert len(answers) == 1, answers
        return answers[0]

    def join(self, member_id: str, topics: Sequence[str] = ("foo",), group_id: str = "grp", **kw):
        result = self.heartbeat(group_id, member_id, 0, subscribed_topic_names=list(topics), **kw)
        assert result.error is E.none, result
        return result

    def beat(self, member_id: str, group_id: str = "grp", **kw):
        """A steady heartbeat at the member's epoch (owned partitions not reported)."""
        return self.heartbeat(group_id, member_id, self.member(member_id, group_id).member_epoch, **kw)

    def ack(self, member_id: str, group_id: str = "grp", **kw):
        """A heartbeat reporting the partitions the member was last given."""
        member = self.member(member_id, group_id)
        owned = [(t, sorted(p)) for t, p in member.assigned_partitions.items()]
        return self.heartbeat(group_id, member_id, member.member_epoch, topic_partitions=owned, **kw)

    def advance(self, ms: int, step: int = 100) -> None:
        """Move the fake clock, expiring the timers due at each step."""
        end = self.clock.milliseconds() + ms
        while self.clock.milliseconds() < end:
            self.clock.set_milliseconds(min(end, self.clock.milliseconds() + step))
            self.timer.advance_clock()
            self.loop.run_pending()

    # -- state --------------------------------------------------------------------------------
    def group(self, group_id: str = "grp") -> ConsumerGroup:
        return self.manager.groups[group_id]

    def member(self, member_id: str, group_id: str = "grp") -> ConsumerGroupMember:
        return self.group(group_id).members[member_id]

    @property
    def last_batch(self) -> list[CoordinatorRecord]:
        return self.batches[-1]


def seed_group(
    h: Harness,
    group_id: str,
    epoch: int,
    members: Sequence[ConsumerGroupMember],
    targets: dict[str, dict[uuid.UUID, frozenset[int]]] | None = None,
    assignment_epoch: int | None = None,
    metadata_hash: int | None = None,
) -> ConsumerGroup:
    """A group as Kafka's tests build one (``ConsumerGroupBuilder``): its records
    replayed into the manager (not written). Targets default to what each member has;
    the metadata hash to that of the members' topics, so nothing bumps by itself."""
    from tidegate.coordinator.group.modern.consumer.records import (
        new_consumer_group_current_assignment_record,
        new_consumer_group_epoch_record,
        new_consumer_group_member_subscription_record,
        new_consumer_group_target_assignment_epoch_record,
        new_consumer_group_target_assignment_record,
    )
    from tidegate.coordinator.group.modern.topics import compute_metadata_hash

    if metadata_hash is None:
        names = set().union(*(m.subscribed_topic_names for m in members)) if members else set()
        metadata_hash = compute_metadata_hash(names, h.topics)
    replay = h.manager.replay
    for m in members:
        replay(new_consumer_group_member_subscription_record(group_id, m))
    replay(new_consumer_group_epoch_record(group_id, epoch, metadata_hash))
    for m in members:
        target = (targets or {}).get(m.member_id, m.assigned_partitions)
        replay(new_consumer_group_target_assignment_record(group_id, m.member_id, target))
    replay(new_consumer_group_target_assignment_epoch_record(
        group_id, epoch if assignment_epoch is None else assignment_epoch
    ))
    for m in members:
        replay(new_consumer_group_current_assignment_record(group_id, m))
    return h.group(group_id)
