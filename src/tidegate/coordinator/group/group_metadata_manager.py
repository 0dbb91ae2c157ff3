"""Committed offsets and group metadata, kept durable in ``__consumer_offsets``
(the storage half of Kafka's ``GroupMetadataManager``).

Kafka keeps consumer group state in a compacted internal topic: every offset
commit is a record keyed by (group, topic, partition), every stored group
generation a record keyed by the group, and a deletion a tombstone (a record
with a null value). A coordinator that takes over a partition replays it and
the latest record of each key wins. tidegate does the same with one partition,
``__consumer_offsets-0``, stored through the ordinary :class:`~tidegate.log.log.Log`
(so the same crash recovery applies: after a kill -9 every whole, CRC-valid
batch is kept).

Format (tidegate's own, not Kafka's binary schemas; nothing outside the broker
reads it): uncompressed v2 record batches whose record keys are compact JSON
arrays, ``["o", group, topic, partition]`` for an offset and ``["g", group]``
for a (classic) group, and whose values are JSON objects (``v`` is the format version),
or null for a tombstone. A KIP-848 consumer group is the records of
:mod:`tidegate.coordinator.group.modern.consumer.records` (Kafka's record types 3, 5, 6,
7, 8 and 16), keyed ``["cg", group]`` (epoch and metadata hash), ``["cgm", group, member]``
(member metadata), ``["cgta", group]`` (target assignment epoch), ``["cgtm", group,
member]`` (a member's target), ``["cgc", group, member]`` (its current assignment) and
``["cgr", group, regex]`` (a resolved regular expression). A KIP-932 share group is the
records of :mod:`tidegate.coordinator.group.modern.share.records` (types 10-15), keyed the
same way with ``sg`` for ``cg`` (``["sg", group]``, ``["sgm", group, member]``,
``["sgta", group]``, ``["sgtm", group, member]``, ``["sgc", group, member]``) and
``["sgs", group]`` for its share-partitions (initializing, initialized, deleting). Topic
ids are strings, partitions sorted lists (:func:`encode_coordinator_record`,
:func:`decode_coordinator_record`). The classic coordinator's replay skips them, each
modern group coordinator replays only its own types.

Transactional offset commits (TxnOffsetCommit) are written as Kafka's coordinator
writes them: a transactional batch with the producer's id and epoch (base sequence 0),
later followed by that producer's COMMIT or ABORT marker, which the transaction
coordinator appends. Replay hands every batch, markers included, to the group
coordinator, which keeps such offsets pending until their marker; only plain commits
and committed transactions' offsets are live here.

Compaction: ``__consumer_offsets`` is created with ``cleanup.policy=compact`` (as
Kafka's) and the broker's log cleaner (:mod:`tidegate.log.cleaner`) compacts it like
any compacted topic: the latest record per key stays, tombstones go after
delete.retention.ms, records of open transactions are never cleaned. Replay at startup
reads what the cleaner left.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.coordinator.group.assignor.api import Assignment
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ClassicProtocol,
)
from tidegate.coordinator.group.modern.consumer.records import (
    ClassicGroupMetadataValue,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.records import (
    CoordinatorRecord,
    GroupMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)
from tidegate.coordinator.group.modern.share.records import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    TopicPartitionsInfo,
)
from tidegate.errors import ErrorCode
from tidegate.log.log import Log
from tidegate.log.replay import ReplayedBatch, replay_batches
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.records import decode_batch_records, iter_decoded_batches
from tidegate.utils.topic import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tidegate.coordinator.group.group_metadata import GroupMetadata
    from tidegate.coordinator.group.modern.records import RecordValue
    from tidegate.server.replica_manager import PartitionResponse

log = logging.getLogger(__name__)

#: ReplicaManager.append_records: (timeout, acks, entries, callback, ...) -> results
AppendRecords = Callable[..., "dict[tuple[str, int], PartitionResponse]"]

OFFSETS_TOPIC = GROUP_METADATA_TOPIC_NAME
OFFSETS_PARTITION = 0
OFFSETS_KEY = (OFFSETS_TOPIC, OFFSETS_PARTITION)
FORMAT_VERSION = 1



@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset as OffsetFetch returns it, with what retention needs."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    #: OffsetCommit v2-v4 ``retention_time``: an explicit expiry (None: offsets.retention.minutes)
    expire_timestamp: int | None = None
    #: the offset of its record in __consumer_offsets (-1 until appended): when a transaction
    #: commits, its offsets replace committed ones only if written later (Kafka's recordOffset)
    record_offset: int = field(default=-1, compare=False)


# -- record keys and values ----------------------------------------------------------------
def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _dumps(["o", group_id, topic, partition])


def group_key(group_id: str) -> bytes:
    return _dumps(["g", group_id])


def encode_offset(om: OffsetAndMetadata) -> bytes:
    return _dumps(
        {
            "v": FORMAT_VERSION,
            "offset": om.offset,
            "epoch": om.leader_epoch,
            "metadata": om.metadata,
            "ts": om.commit_timestamp,
            "expire": om.expire_timestamp,
        }
    )


def decode_offset(value: bytes) -> OffsetAndMetadata:
    d = json.loads(value)
    return OffsetAndMetadata(d["offset"], d["epoch"], d["metadata"], d["ts"], d["expire"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_group(
    *,
    protocol_type: str | None,
    generation: int,
    protocol_name: str | None,
    leader: str | None,
    state_timestamp: int,
    members: Iterable[dict],
) -> bytes:
    """A group generation as stored after a rebalance: ``members`` are dicts with
    member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
    session_timeout_ms, subscription (bytes) and assignment (bytes)."""
    return _dumps(
        {
            "v": FORMAT_VERSION,
            "protocol_type": protocol_type,
            "generation": generation,
            "protocol": protocol_name,
            "leader": leader,
            "state_ts": state_timestamp,
            "members": [
                {
                    **{k: v for k, v in m.items() if k not in ("subscription", "assignment")},
                    "subscription": _b64(m["subscription"]),
                    "assignment": _b64(m["assignment"]),
                }
                for m in members
            ],
        }
    )


def classic_group_value(group: GroupMetadata, assignment: Mapping[str, bytes], state_timestamp: int) -> bytes:
    """A classic group's stored generation (:func:`encode_group`): its members with their
    subscription to the selected protocol and their ``assignment``."""
    protocol = group.protocol_name
    return encode_group(
        protocol_type=group.protocol_type,
        generation=group.generation_id,
        protocol_name=protocol,
        leader=group.leader_id,
        state_timestamp=state_timestamp,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription": m.metadata(protocol) if protocol is not None else b"",
                "assignment": assignment.get(m.member_id, b""),
            }
            for m in group.members.values()
        ],
    )


def decode_group(value: bytes) -> dict:
    d = json.loads(value)
    for m in d["members"]:
        m["subscription"] = base64.b64decode(m["subscription"])
        m["assignment"] = base64.b64decode(m["assignment"])
    return d


def parse_key(key: bytes) -> tuple:
    """``("o", group, topic, partition)``, ``("g", group)``, or a consumer group
    record's key (``("cg", group)``, ``("cgm", group, member)``, ...)."""
    return tuple(json.loads(key))


# -- modern group records (KIP-848 consumer groups, KIP-932 share groups) ---------------------
#: the key prefix of each modern group record type; the group's own records are keyed
#: [prefix, group], the others [prefix, group, member id or regex]
_MODERN_GROUP_PREFIXES: dict[RecordType, str] = {
    RecordType.CONSUMER_GROUP_METADATA: "cg",
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: "cgm",
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "cgta",
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "cgtm",
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "cgc",
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION: "cgr",
    RecordType.SHARE_GROUP_METADATA: "sg",
    RecordType.SHARE_GROUP_MEMBER_METADATA: "sgm",
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: "sgta",
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: "sgtm",
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: "sgc",
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA: "sgs",
}
_MODERN_GROUP_TYPES = {prefix: t for t, prefix in _MODERN_GROUP_PREFIXES.items()}
_GROUP_LEVEL = frozenset({
    RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
})  # fmt: skip


def _encode_assignment(assignment: Assignment) -> dict[str, list[int]]:
    return {str(topic_id): sorted(partitions) for topic_id, partitions in assignment.items()}


def _decode_assignment(d: dict[str, list[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {uuid.UUID(topic_id): frozenset(partitions) for topic_id, partitions in d.items()}


def _encode_topic_partitions(topics: Mapping[uuid.UUID, TopicPartitionsInfo]) -> list[list[Any]]:
    return [[str(t), info.topic_name, sorted(info.partitions)] for t, info in topics.items()]


def _decode_topic_partitions(topics: list[list[Any]]) -> dict[uuid.UUID, TopicPartitionsInfo]:
    return {uuid.UUID(t): TopicPartitionsInfo(name, frozenset(p)) for t, name, p in topics}


def _encode_value(value: RecordValue) -> dict[str, Any]:
    if isinstance(value, GroupMetadataValue):
        return {"epoch": value.epoch, "hash": value.metadata_hash}
    if isinstance(value, ConsumerGroupMemberMetadataValue):
        classic = value.classic_member_metadata
        return {
            "instance": value.instance_id,
            "rack": value.rack_id,
            "client_id": value.client_id,
            "client_host": value.client_host,
            "topics": sorted(value.subscribed_topic_names),
            "regex": value.subscribed_topic_regex,
            "rebalance_timeout_ms": value.rebalance_timeout_ms,
            "assignor": value.server_assignor_name,
            "classic": None if classic is None else {
                "session_timeout_ms": classic.session_timeout_ms,
                "protocols": [[p.name, _b64(p.metadata)] for p in classic.supported_protocols],
            },
        }  # fmt: skip
    if isinstance(value, TargetAssignmentMetadataValue):
        return {"epoch": value.assignment_epoch}
    if isinstance(value, TargetAssignmentMemberValue):
        return {"partitions": _encode_assignment(value.partitions)}
    if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        return {
            "epoch": value.member_epoch,
            "previous_epoch": value.previous_member_epoch,
            "state": int(value.state),
            "assigned": _encode_assignment(value.assigned_partitions),
            "pending": _encode_assignment(value.partitions_pending_revocation),
        }
    if isinstance(value, ResolvedRegularExpression):
        return {"topics": sorted(value.topics), "version": value.version, "ts": value.timestamp_ms}
    assert not isinstance(value, ClassicGroupMetadataValue), "stored as the classic coordinator stores it"
    return _encode_share_group_value(value)


def _encode_share_group_value(
    value: ShareGroupMemberMetadataValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue,
) -> dict[str, Any]:
    if isinstance(value, ShareGroupMemberMetadataValue):
        return {
            "rack": value.rack_id,
            "client_id": value.client_id,
            "client_host": value.client_host,
            "topics": sorted(value.subscribed_topic_names),
        }
    if isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        return {
            "epoch": value.member_epoch,
            "previous_epoch": value.previous_member_epoch,
            "state": int(value.state),
            "assigned": _encode_assignment(value.assigned_partitions),
        }
    return {
        "initializing": _encode_topic_partitions(value.initializing_topics),
        "initialized": _encode_topic_partitions(value.initialized_topics),
        "deleting": [[str(t), name] for t, name in value.deleting_topics.items()],
    }


def _decode_value(record_type: RecordType, d: dict[str, Any]) -> RecordValue:
    if record_type in (RecordType.CONSUMER_GROUP_METADATA, RecordType.SHARE_GROUP_METADATA):
        return GroupMetadataValue(d["epoch"], d["hash"])
    if record_type is RecordType.CONSUMER_GROUP_MEMBER_METADATA:
        classic = d["classic"]
        return ConsumerGroupMemberMetadataValue(
            instance_id=d["instance"],
            rack_id=d["rack"],
            client_id=d["client_id"],
            client_host=d["client_host"],
            subscribed_topic_names=frozenset(d["topics"]),
            subscribed_topic_regex=d["regex"] or "",
            rebalance_timeout_ms=d["rebalance_timeout_ms"],
            server_assignor_name=d["assignor"],
            classic_member_metadata=None if classic is None else ClassicMemberMetadata(
                classic["session_timeout_ms"],
                tuple(ClassicProtocol(n, base64.b64decode(m)) for n, m in classic["protocols"]),
            ),
        )  # fmt: skip
    if record_type in _TARGET_ASSIGNMENT_METADATA:
        return TargetAssignmentMetadataValue(d["epoch"])
    if record_type in _TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignmentMemberValue(_decode_assignment(d["partitions"]))
    if record_type is RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=d["epoch"],
            previous_member_epoch=d["previous_epoch"],
            state=MemberState.from_value(d["state"]),
            assigned_partitions=_decode_assignment(d["assigned"]),
            partitions_pending_revocation=_decode_assignment(d["pending"]),
        )
    if record_type is RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION:
        return ResolvedRegularExpression(frozenset(d["topics"]), d["version"], d["ts"])
    return _decode_share_group_value(record_type, d)


_TARGET_ASSIGNMENT_METADATA = (
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
)
_TARGET_ASSIGNMENT_MEMBER = (
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
)


def _decode_share_group_value(record_type: RecordType, d: dict[str, Any]) -> RecordValue:
    if record_type is RecordType.SHARE_GROUP_MEMBER_METADATA:
        return ShareGroupMemberMetadataValue(
            rack_id=d["rack"],
            client_id=d["client_id"],
            client_host=d["client_host"],
            subscribed_topic_names=frozenset(d["topics"]),
        )
    if record_type is RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        return ShareGroupCurrentMemberAssignmentValue(
            member_epoch=d["epoch"],
            previous_member_epoch=d["previous_epoch"],
            state=MemberState.from_value(d["state"]),
            assigned_partitions=_decode_assignment(d["assigned"]),
        )
    if record_type is RecordType.SHARE_GROUP_STATE_PARTITION_METADATA:
        return ShareGroupStatePartitionMetadataValue(
            initializing_topics=_decode_topic_partitions(d["initializing"]),
            initialized_topics=_decode_topic_partitions(d["initialized"]),
            deleting_topics={uuid.UUID(t): name for t, name in d["deleting"]},
        )
    raise ValueError(f"no value of record type {record_type}")


def encode_coordinator_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """A modern group record as a ``__consumer_offsets`` (key, value-or-None)."""
    if record.type is RecordType.CLASSIC_GROUP_METADATA:
        if record.value is None:
            return group_key(record.group_id), None
        assert isinstance(record.value, ClassicGroupMetadataValue), record.value
        return group_key(record.group_id), record.value.data
    prefix = _MODERN_GROUP_PREFIXES[record.type]
    parts = [prefix, record.group_id] if record.type in _GROUP_LEVEL else [prefix, record.group_id, record.key]
    value = None if record.value is None else _dumps({"v": FORMAT_VERSION, **_encode_value(record.value)})
    return _dumps(parts), value


def decode_coordinator_record(key: tuple, value: bytes | None) -> CoordinatorRecord | None:
    """The modern group record of a parsed key (:func:`parse_key`) and its value; None
    for a key of another kind (offsets, classic groups). Raises ValueError, KeyError,
    IndexError or TypeError for a malformed record."""
    record_type = _MODERN_GROUP_TYPES.get(key[0])
    if record_type is None:
        return None
    sub_key = "" if record_type in _GROUP_LEVEL else str(key[2])
    decoded = None if value is None else _decode_value(record_type, json.loads(value))
    return CoordinatorRecord(record_type, str(key[1]), sub_key, decoded)


#: Kafka's GroupCoordinatorService.handleOperationException: what a failed coordinator
#: write (or its KIP-890 verification) answers
_OPERATION_ERRORS = {
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


def coordinator_operation_error(error: ErrorCode) -> ErrorCode:
    """What the group coordinator answers when a write or its verification fails with
    ``error`` (Kafka's handleOperationException)."""
    return _OPERATION_ERRORS.get(error, error)


# -- reading records back --------------------------------------------------------------------
def iter_records(data: bytes, from_offset: int = 0) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record at ``from_offset`` or later, decoded by the
    one record decoder (:mod:`tidegate.record.records`); control batches carry none."""
    for batch in iter_decoded_batches(data):
        for r in decode_batch_records(batch):
            if r.offset >= from_offset:
                yield r.offset, r.key, r.value


# -- the log ------------------------------------------------------------------------------------
class AppendError(Exception):
    """A write to ``__consumer_offsets`` failed: nothing of it was appended (``error``:
    what the append answered)."""

    def __init__(self, message: str, error: ErrorCode = ErrorCode.unknown_server_error) -> None:
        super().__init__(message)
        self.error = error


class PendingAppend:
    """The durability of one append to ``__consumer_offsets``: callbacks run once it is
    fsynced (with ErrorCode.none) or not within the commit timeout (another code)."""

    __slots__ = ("_callbacks", "base_offset", "error")

    def __init__(self) -> None:
        self.error: ErrorCode | None = None
        #: the offset of the batch's first record (record i is at base_offset + i)
        self.base_offset = -1
        self._callbacks: list[Callable[[ErrorCode], None]] = []

    def add_callback(self, callback: Callable[[ErrorCode], None]) -> None:
        if self.error is not None:
            callback(self.error)
        else:
            self._callbacks.append(callback)

    def complete(self, error: ErrorCode) -> None:
        if self.error is not None:
            return
        self.error = error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(error)


class OffsetsLog:
    """``__consumer_offsets-0``: appends and replay (the log cleaner compacts it).

    ``open_log(create)`` returns the partition's Log (None if the topic does not exist
    and ``create`` is False); the broker creates the topic on first use, as Kafka does.
    Appends go through ``append_records`` (ReplicaManager.append_records, acks=all, as
    an internal topic), which asks for the fsync and wakes fetches of the topic.
    """

    def __init__(
        self,
        open_log: Callable[[bool], Log | None],
        clock: Clock,
        *,
        append_records: AppendRecords,
        timeout_ms: int = 5000,
    ) -> None:
        self._open_log = open_log
        self.clock = clock
        self._append_records = append_records
        self.timeout_ms = timeout_ms
        #: latest value of every live key (tombstoned keys are absent); transactional
        #: records enter only once their transaction commits (:meth:`materialize`)
        self.live: dict[bytes, bytes] = {}
        #: records from the log start offset to the end (what a replay reads)
        self.records_in_log = 0

    def log(self, create: bool = False) -> Log | None:
        return self._open_log(create)

    # -- startup ---------------------------------------------------------------------
    def load(self, replay: Callable[[ReplayedBatch], None] | None = None) -> int:
        """Replay the partition from its log start offset: every batch goes to ``replay``
        (the coordinator's state, markers included), and the latest non-transactional
        value per key becomes live. Returns the number of data records read."""
        self.live.clear()
        self.records_in_log = 0
        plog = self.log(False)
        if plog is None:
            return 0
        live = self.live
        n = 0
        for batch in replay_batches(plog):
            if not batch.is_control:
                n += len(batch.records)
            if not batch.is_control and not batch.is_transactional:
                for r in batch.records:
                    if r.key is None:
                        continue
                    if r.value is None:
                        live.pop(r.key, None)
                    else:
                        live[r.key] = r.value
            if replay is not None:
                replay(batch)
        self.records_in_log = n
        return n

    # -- writing ----------------------------------------------------------------------
    def append(
        self, records: Sequence[tuple[bytes, bytes | None]], *, producer_id: int = -1, producer_epoch: int = -1,
    ) -> PendingAppend:  # fmt: skip
        """Append ``(key, value-or-None)`` records as one batch; returns its durability
        (and the batch's first offset). With a ``producer_id`` the batch is transactional,
        as Kafka's coordinator writes a TxnOffsetCommit: that producer's id and epoch, base
        sequence 0, the transactional attribute; its values are not live until
        :meth:`materialize`. Raises OSError or :class:`AppendError` (and the log is
        unchanged) if the write fails."""
        plog = self.log(True)
        assert plog is not None
        now = self.clock.wall_milliseconds()  # the records' timestamps
        transactional = producer_id >= 0
        batch = build_batch(
            [Record(value, key, now) for key, value in records],
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0 if transactional else -1,
            transactional=transactional,
        )  # fmt: skip
        pending = PendingAppend()
        results = self._append_records(
            self.timeout_ms, -1, {OFFSETS_KEY: batch},
            lambda done: pending.complete(done[OFFSETS_KEY].error),
            internal_topics_allowed=True, from_client=False,
        )  # fmt: skip
        result = results[OFFSETS_KEY]
        if result.base_offset < 0:
            raise AppendError(f"{result.error.name}: {result.error_message or ''}", result.error)
        pending.base_offset = result.base_offset
        if not transactional:
            self.materialize(records)
        self.records_in_log += len(records)
        return pending

    def materialize(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Make values live: those of a plain append, or of a committed transaction."""
        for key, value in records:
            if value is None:
                self.live.pop(key, None)
            else:
                self.live[key] = value
