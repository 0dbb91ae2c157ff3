"""The share coordinator (KIP-932): share-partition state kept durable in
``__share_group_state`` (Kafka's ``ShareCoordinatorService`` and ``ShareCoordinatorShard``
for one node).

:class:`ShareCoordinator` is the durable :class:`~tidegate.server.share.persister.Persister`
the share-partitions use: Kafka's share-partition leader sends Initialize/Read/Write/
DeleteShareGroupState to the coordinator through its ``DefaultStatePersister``; on one
node that RPC is a method call, with the same answers. The checks are the ones every
persister keeps (:class:`~tidegate.server.share.persister.ShareStates`): an
uninitialized share-partition is INVALID_REQUEST, a lower leader epoch
FENCED_LEADER_EPOCH, a lower state epoch FENCED_STATE_EPOCH, an unknown topic or
partition UNKNOWN_TOPIC_OR_PARTITION.

**Records.** Each operation that changes a state is one record in one batch, appended
through ``ReplicaManager.append_records`` with acks=all as an internal-topic write; its
callback answers when the batch is fsynced (or with the error that stopped it:
Kafka's mapping, COORDINATOR_NOT_AVAILABLE for a timeout, NOT_COORDINATOR for a storage
error). An initialization writes a ShareSnapshot; a write writes a ShareUpdate (its
delta), or a ShareSnapshot of the merged state once the share-partition has had
``share.coordinator.snapshot.update.records.per.snapshot`` updates since its last
snapshot; a read with a newer leader epoch records that epoch the same way before it
answers; a delete writes a tombstone. Records are replayed into the states as soon as
they are appended (the states follow the log, as ``__consumer_offsets``' live map does),
so the next write is checked against them; at startup the same replay
(:meth:`ShareCoordinator.startup`) rebuilds every state from the log start offset: a
snapshot replaces the state, an update merges into it, a tombstone removes it. After a
kill -9 the log's recovery keeps every whole batch, so a state loses at most the writes
whose callbacks never answered.

**Bounding the log** (Kafka's way, not compaction). ``__share_group_state`` is created
with ``cleanup.policy=delete`` and no time or size retention, as KIP-932 defines it:
compaction keeps the latest record per key, which would keep a share-partition's last
update and drop the updates between its snapshot and that one. Instead every record
below the oldest of the live share-partitions' latest fsynced snapshots is redundant
(Kafka's ``ShareCoordinatorOffsetsManager``, which counts committed records only), and
:meth:`~ShareCoordinator.prune` deletes them with ``ReplicaManager.delete_records`` every
``share.coordinator.state.topic.prune.interval.ms``. An idle share-partition would hold
that offset back forever, so every ``share.coordinator.cold.partition.snapshot.interval.ms``
:meth:`~ShareCoordinator.snapshot_cold_partitions` rewrites the snapshot of each
share-partition whose snapshot is at least that old and has at least as many records
after it as there are share-partitions. (Kafka's tests pin that a partition is not
snapshotted again and again while nothing else is written; this rule keeps that, and
keeps moving an idle share-partition forward while others write.) After both, the log
holds O(share-partitions) records: a snapshot each, plus the updates written since.

**Topic deletion** (:meth:`~ShareCoordinator.on_topics_deleted`) tombstones every state
of the topic id, so a topic created again under the same name starts from nothing.

Sans-IO: the log is opened through ``open_log``, written through ``append_records`` and
pruned through ``delete_records`` (the ReplicaManager's), the topics known through
``topic_partitions``; time is the injected clock's wall time (record timestamps, the
snapshots' ages).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tidegate.clock import Clock
from tidegate.config import BrokerConfig
from tidegate.coordinator.group.group_metadata_manager import coordinator_operation_error
from tidegate.errors import ErrorCode
from tidegate.log.log import Log
from tidegate.log.replay import replay_records
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.share.persister import (
    UNINITIALIZED_START_OFFSET,
    Persister,
    PersisterReadResult,
    PersisterReadSummary,
    PersisterStateBatch,
    PersisterWrite,
    ReadCallback,
    ShareGroupOffset,
    SharePartitionKey,
    ShareStates,
    SummaryCallback,
    TopicPartitions,
    WriteCallback,
    combine_state_batches,
    merge_state,
)
from tidegate.utils.topic import SHARE_GROUP_STATE_TOPIC_NAME

from .records import ShareRecord, ShareRecordType, ShareUpdate, decode_record, encode_record

__all__ = [
    "SHARE_GROUP_STATE_KEY",
    "SHARE_GROUP_STATE_TOPIC",
    "ShareCoordinator",
    "ShareCoordinatorConfig",
    "share_group_state_topic_configs",
]

log = logging.getLogger(__name__)

SHARE_GROUP_STATE_TOPIC = SHARE_GROUP_STATE_TOPIC_NAME
#: the one partition a node keeps the share state in
SHARE_GROUP_STATE_KEY = (SHARE_GROUP_STATE_TOPIC, 0)
_NOT_AVAILABLE = ErrorCode.coordinator_not_available


class _AppendResult(Protocol):
    """What ``append_records`` reports per partition (the ReplicaManager's PartitionResponse)."""

    error: ErrorCode
    base_offset: int


class _DeleteResult(Protocol):
    """What ``delete_records`` reports per partition (the ReplicaManager's DeleteRecordsResult)."""

    error: ErrorCode
    low_watermark: int


#: ReplicaManager.append_records: (timeout, acks, entries, callback, *, internal_topics_allowed, from_client)
AppendRecords = Callable[..., Mapping[tuple[str, int], _AppendResult]]
#: ReplicaManager.delete_records: (offsets, callback, *, internal_topics_allowed)
DeleteRecords = Callable[..., None]


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    """The share coordinator's broker configs (Kafka's ``ShareCoordinatorConfig``)."""

    snapshot_update_records_per_snapshot: int = 500
    state_topic_segment_bytes: int = 104_857_600
    write_timeout_ms: int = 5000
    load_buffer_size: int = 5_242_880
    state_topic_prune_interval_ms: int = 300_000
    cold_partition_snapshot_interval_ms: int = 300_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> ShareCoordinatorConfig:
        return cls(
            config.get("share.coordinator.snapshot.update.records.per.snapshot"),
            config.get("share.coordinator.state.topic.segment.bytes"),
            config.get("share.coordinator.write.timeout.ms"),
            config.get("share.coordinator.load.buffer.size"),
            config.get("share.coordinator.state.topic.prune.interval.ms"),
            config.get("share.coordinator.cold.partition.snapshot.interval.ms"),
        )


def share_group_state_topic_configs(config: ShareCoordinatorConfig) -> dict[str, str]:
    """Topic configs of ``__share_group_state`` (Kafka's ``shareGroupStateTopicConfigs``):
    ``cleanup.policy=delete`` as KIP-932 defines it (pruned by the coordinator, see the
    module doc), no time or size retention (only pruning removes state), segments of
    ``share.coordinator.state.topic.segment.bytes``, stored as the coordinator writes them."""
    return {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "segment.bytes": str(config.state_topic_segment_bytes),
        "compression.type": "producer",
    }


class ShareCoordinator:
    """The share coordinator of one node, and the durable share-state
    :class:`~tidegate.server.share.persister.Persister` (see the module doc).

    ``open_log(create)`` returns ``__share_group_state-0``'s Log (None when the topic
    does not exist and ``create`` is False; the glue creates it with
    :func:`share_group_state_topic_configs` on the first write, as Kafka creates it on
    first use). ``append_records`` and ``delete_records`` are the ReplicaManager's;
    ``topic_partitions`` maps a topic id to its partition count (None: no such topic).
    Answers COORDINATOR_NOT_AVAILABLE before :meth:`startup` and after :meth:`shutdown`.
    """

    def __init__(
        self,
        config: ShareCoordinatorConfig,
        *,
        open_log: Callable[[bool], Log | None],
        append_records: AppendRecords,
        delete_records: DeleteRecords,
        topic_partitions: TopicPartitions,
        clock: Clock,
    ) -> None:
        self.config = config
        self._open_log = open_log
        self._append_records = append_records
        self._delete_records = delete_records
        self.clock = clock
        self.states = ShareStates(topic_partitions)
        #: updates written for each share-partition since its latest snapshot
        self._updates_since_snapshot: dict[SharePartitionKey, int] = {}
        #: Kafka's ShareCoordinatorOffsetsManager: each share-partition's snapshots and
        #: tombstones, (offset, is tombstone) in offset order, from the latest fsynced
        #: one on: every record below the lowest latest fsynced snapshot is redundant
        self._snapshot_offsets: dict[SharePartitionKey, list[tuple[int, bool]]] = {}
        self.active = False

    # -- lifecycle ------------------------------------------------------------------------
    def startup(self) -> int:
        """Replay ``__share_group_state`` from its log start offset into the states;
        returns the number of records read. A record this broker cannot read is skipped
        (logged), as Kafka skips unknown record types."""
        self.states.states.clear()
        self._updates_since_snapshot.clear()
        self._snapshot_offsets.clear()
        plog = self._open_log(False)
        n = 0
        if plog is not None:
            for offset, key, value in replay_records(plog, self.config.load_buffer_size):
                n += 1
                if key is None:
                    continue
                try:
                    record = decode_record(key, value)
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    log.error("skipping unreadable record at offset %d of %s: %r", offset, SHARE_GROUP_STATE_TOPIC,
                              exc)
                    continue
                if record is not None:
                    self._replay(offset, record)
        self.active = True
        if n:
            log.info("loaded %d share-partition state(s) from %d record(s) of %s", len(self.states), n,
                     SHARE_GROUP_STATE_TOPIC)
        return n

    def shutdown(self) -> None:
        self.active = False

    # -- the Persister -----------------------------------------------------------------------
    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   callback: WriteCallback) -> None:
        """Kafka's InitializeShareGroupState: a new snapshot with the given state epoch and
        start offset, no ranges (a share-partition initialized again, by
        AlterShareGroupOffsets, starts over with a higher state epoch)."""
        if not self.active:
            callback(_NOT_AVAILABLE)
            return
        error = self.states.initialize_error(key, state_epoch)
        if error is not None:
            callback(error.code)
            return
        current = self.states.get(key)
        now = self.clock.wall_milliseconds()
        value = ShareGroupOffset(
            state_epoch, start_offset,
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            create_timestamp=now, write_timestamp=now,
        )  # fmt: skip
        self._append([ShareRecord.snapshot(key, value)], callback)

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None:
        """Kafka's ReadShareGroupState: the state; a newer leader epoch is recorded first
        (written before the answer, as Kafka's ``readStateAndMaybeUpdateLeaderEpoch``)."""
        if not self.active:
            callback(PersisterReadResult(_NOT_AVAILABLE, error_message="Share coordinator is not available."))
            return
        error = self.states.read_error(key, leader_epoch)
        if error is not None:
            callback(PersisterReadResult(error.code, error_message=error.message))
            return
        state = self.states.states[key]
        result = state.read_result()
        if not self.states.leader_epoch_moved(key, leader_epoch):
            callback(result)
            return

        def written(code: ErrorCode) -> None:
            callback(result if code is ErrorCode.none else PersisterReadResult(code))

        record = self._state_record(key, UNINITIALIZED_START_OFFSET, leader_epoch, state.delivery_complete_count, ())
        self._append([record], written)

    def read_summary(self, key: SharePartitionKey, leader_epoch: int, callback: SummaryCallback) -> None:
        """Kafka's ReadShareGroupStateSummary (for DescribeShareGroupOffsets): start offset,
        leader epoch, state epoch and delivery complete count; start offset -1 for a
        share-partition with no state. Records nothing."""
        if not self.active:
            callback(PersisterReadSummary(_NOT_AVAILABLE, error_message="Share coordinator is not available."))
            return
        callback(self.states.summary(key))

    def write(self, write: PersisterWrite, callback: WriteCallback) -> None:
        """Kafka's WriteShareGroupState: a ShareUpdate (or ShareSnapshot, see the module
        doc); ``callback`` answers once it is fsynced."""
        if not self.active:
            callback(_NOT_AVAILABLE)
            return
        error = self.states.write_error(write)
        if error is not None:
            callback(error.code)
            return
        record = self._state_record(write.key, write.start_offset, write.leader_epoch,
                                    write.delivery_complete_count, write.state_batches)
        self._append([record], callback)

    def delete(self, key: SharePartitionKey, callback: WriteCallback) -> None:
        """Kafka's DeleteShareGroupState: a tombstone (nothing to delete: success, nothing
        written)."""
        if not self.active:
            callback(_NOT_AVAILABLE)
            return
        error = self.states.delete_error(key)
        if error is not None:
            callback(error.code)
            return
        if self.states.get(key) is None:
            callback(ErrorCode.none)
            return
        self._append([ShareRecord.tombstone(key)], callback)

    # -- metadata changes ---------------------------------------------------------------------
    def on_topics_deleted(self, topic_ids: Collection[uuid.UUID],
                          callback: WriteCallback | None = None) -> int:
        """Tombstone every state of the deleted topics (Kafka's ``maybeCleanupShareState``),
        in one batch; returns how many. ``callback`` (optional) answers when it is durable."""
        ids = set(topic_ids)
        keys = [key for key in self.states if key.topic_id in ids]
        if not self.active or not keys:
            if callback is not None:
                callback(ErrorCode.none if self.active else _NOT_AVAILABLE)
            return 0
        self._append([ShareRecord.tombstone(key) for key in keys], callback or _log_failure("topic deletion"))
        return len(keys)

    # -- bounding the log ------------------------------------------------------------------------
    def snapshot_cold_partitions(self, callback: WriteCallback | None = None) -> int:
        """Rewrite, in one batch, the snapshot of every share-partition whose latest
        snapshot was written ``share.coordinator.cold.partition.snapshot.interval.ms`` or
        more ago and has at least as many records after it as there are share-partitions
        (it then holds :meth:`prune` back); returns how many."""
        plog = self._open_log(False)
        if not self.active or plog is None:
            if callback is not None:
                callback(ErrorCode.none)
            return 0
        now = self.clock.wall_milliseconds()
        cold_before = now - self.config.cold_partition_snapshot_interval_ms
        behind = plog.log_end_offset - len(self.states)
        records = [
            ShareRecord.snapshot(key, dataclasses.replace(
                state, snapshot_epoch=state.snapshot_epoch + 1, write_timestamp=now))
            for key, state in self.states.states.items()
            if state.write_timestamp <= cold_before and self._latest_snapshot(key) < behind
        ]  # fmt: skip
        if records:
            self._append(records, callback or _log_failure("cold partition snapshot"))
        elif callback is not None:
            callback(ErrorCode.none)
        return len(records)

    def _latest_snapshot(self, key: SharePartitionKey) -> int:
        marks = self._snapshot_offsets.get(key)
        return marks[-1][0] if marks else -1

    def redundant_offset(self) -> int | None:
        """The offset below which every record is redundant (None: no log): the lowest
        of the share-partitions' latest snapshots among the fsynced records. A newer
        snapshot not yet fsynced does not count (a kill -9 may lose it; the one before
        must then still be there), nor does a share-partition with nothing fsynced yet
        (it has no record below the fsynced offset), nor one whose latest fsynced mark is
        its tombstone. Marks older than a share-partition's latest fsynced one are
        forgotten on the way."""
        plog = self._open_log(False)
        if plog is None:
            return None
        synced = plog.recovery_point
        needed = synced
        for key, marks in list(self._snapshot_offsets.items()):
            durable = [i for i, (offset, _tombstone) in enumerate(marks) if offset < synced]
            if not durable:
                continue
            del marks[:durable[-1]]  # the older ones are redundant
            offset, tombstone = marks[0]
            if not tombstone:
                needed = min(needed, offset)
            elif len(marks) == 1:
                del self._snapshot_offsets[key]
        return needed

    def prune(self, callback: WriteCallback | None = None) -> int | None:
        """Delete the redundant records (Kafka's ``performRecordPruning``): move the log
        start offset of ``__share_group_state`` up to :meth:`redundant_offset` through
        ``delete_records``. Returns that offset, None when nothing is to be pruned;
        ``callback`` answers when the new log start offset is durable."""
        plog = self._open_log(False)
        target = self.redundant_offset()
        if not self.active or plog is None or target is None or target <= plog.log_start_offset:
            if callback is not None:
                callback(ErrorCode.none)
            return None

        def deleted(results: Mapping[tuple[str, int], _DeleteResult]) -> None:
            result = results[SHARE_GROUP_STATE_KEY]
            if result.error is not ErrorCode.none:
                log.warning("pruning %s below offset %d failed: %s", SHARE_GROUP_STATE_TOPIC, target,
                            result.error.name)
            if callback is not None:
                callback(result.error)

        self._delete_records({SHARE_GROUP_STATE_KEY: target}, deleted, internal_topics_allowed=True)
        return target

    # -- records ----------------------------------------------------------------------------------
    def _state_record(self, key: SharePartitionKey, start_offset: int, leader_epoch: int,
                      delivery_complete_count: int, batches: Sequence[PersisterStateBatch]) -> ShareRecord:
        """The record of a checked write (Kafka's ``generateShareStateRecord``): an update
        with the write's delta, or, after ``snapshot.update.records.per.snapshot``
        updates, a snapshot of the state after the write."""
        state = self.states.states[key]
        if self._updates_since_snapshot.get(key, 0) >= self.config.snapshot_update_records_per_snapshot:
            now = self.clock.wall_milliseconds()
            merged = merge_state(state, start_offset, leader_epoch, delivery_complete_count, batches)
            return ShareRecord.snapshot(key, dataclasses.replace(
                merged, snapshot_epoch=state.snapshot_epoch + 1, create_timestamp=now, write_timestamp=now))
        # the write's own ranges combined (a later range wins where two overlap)
        delta = tuple(combine_state_batches((), batches, start_offset))
        return ShareRecord.update(key, ShareUpdate(state.snapshot_epoch, leader_epoch, start_offset,
                                                   delivery_complete_count, delta))

    def _replay(self, offset: int, record: ShareRecord) -> None:
        """Apply a record at ``offset`` to the states (Kafka's ``ShareCoordinatorShard.replay``)."""
        rtype, key, value = record
        states = self.states.states
        if value is None:
            states.pop(key, None)
            self._updates_since_snapshot.pop(key, None)
            self._snapshot_offsets.setdefault(key, []).append((offset, True))
        elif isinstance(value, ShareGroupOffset):
            states[key] = value
            self._updates_since_snapshot[key] = 0
            self._snapshot_offsets.setdefault(key, []).append((offset, False))
        else:
            assert rtype is ShareRecordType.SHARE_UPDATE
            current = states.get(key)
            if current is None:
                # its snapshot was pruned: a later snapshot or tombstone of the key follows
                current = ShareGroupOffset(0, UNINITIALIZED_START_OFFSET, snapshot_epoch=value.snapshot_epoch)
            states[key] = merge_state(current, value.start_offset, value.leader_epoch,
                                      value.delivery_complete_count, value.state_batches)
            self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1

    def _append(self, records: list[ShareRecord], callback: WriteCallback) -> None:
        """Append ``records`` (acks=all), replay them once appended, and call ``callback``
        once they are fsynced, or with the error that stopped them. They go as one batch,
        or as consecutive batches of at most the topic's max.message.bytes (the snapshots
        of many cold share-partitions, the tombstones of a deleted topic's), in one append."""
        try:
            plog = self._open_log(True)
        except OSError as exc:
            log.error("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC, exc)
            plog = None
        if plog is None:
            callback(_NOT_AVAILABLE)
            return
        now = self.clock.wall_milliseconds()
        encoded = [Record(value, key, now) for key, value in map(encode_record, records)]
        batch = b"".join(_batches(encoded, plog.config.max_message_bytes))
        early: list[ErrorCode] = []
        appended = False

        def durable(results: Mapping[tuple[str, int], _AppendResult]) -> None:
            code = coordinator_operation_error(results[SHARE_GROUP_STATE_KEY].error)
            if appended:
                callback(code)
            else:  # answered inside append_records: after the replay below
                early.append(code)

        try:
            results = self._append_records(
                self.config.write_timeout_ms, -1, {SHARE_GROUP_STATE_KEY: batch}, durable,
                internal_topics_allowed=True, from_client=False,
            )  # fmt: skip
        except OSError as exc:
            log.error("cannot append to %s: %s", SHARE_GROUP_STATE_TOPIC, exc)
            callback(ErrorCode.not_coordinator)
            return
        base_offset = results[SHARE_GROUP_STATE_KEY].base_offset
        if base_offset >= 0:
            for i, record in enumerate(records):
                self._replay(base_offset + i, record)
        appended = True
        if early:
            callback(early[0])


def _batches(records: Sequence[Record], max_bytes: int) -> list[bytearray]:
    """``records`` as v2 batches of at most ``max_bytes`` each (a single record larger
    than that goes alone, and the log refuses it)."""
    batch = build_batch(records)
    if len(batch) <= max_bytes or len(records) == 1:
        return [batch]
    half = len(records) // 2
    return _batches(records[:half], max_bytes) + _batches(records[half:], max_bytes)


def _log_failure(what: str) -> WriteCallback:
    def answered(code: ErrorCode) -> None:
        if code is not ErrorCode.none:
            log.warning("%s write to %s failed: %s", what, SHARE_GROUP_STATE_TOPIC, code.name)

    return answered


if TYPE_CHECKING:
    def _a_share_coordinator_is_a_persister(coordinator: ShareCoordinator) -> Persister:
        return coordinator  # mypy checks the signatures against the Persister protocol
