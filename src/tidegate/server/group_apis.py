"""Request handlers of the group APIs, for :class:`tidegate.server.kafka_apis.KafkaApis`.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (and FindCoordinator's answer for
groups): each reads the request message of whatever version arrived, calls the sans-IO
:class:`~tidegate.coordinator.group.group_coordinator.GroupCoordinator` and answers with the
response message.

JoinGroup and SyncGroup return PARKED: the coordinator's callback answers them through
``respond`` (RequestHandlerHelper.send_response), at once or when the rebalance gets that
far. An OffsetCommit is answered once its record is fsynced: the coordinator's write to
``__consumer_offsets`` goes through ReplicaManager.append_records with acks=all, like a
producer's. A TxnOffsetCommit is answered the same way; its offsets stay pending until
the producer's transaction marker reaches ``__consumer_offsets`` (docs/transactions.md,
"Offsets in transactions").
"""

from __future__ import annotations

import errno
import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol, TypedDict, TypeVar

from tidegate.clock import Clock, WallMs
from tidegate.config import BrokerConfig
from tidegate.coordinator.group.group_coordinator import (
    GroupCoordinator,
    coordinator_operation_error,
)
from tidegate.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    DEAD,
    JoinResult,
    SyncResult,
)
from tidegate.coordinator.group.group_metadata_manager import (
    OFFSETS_KEY,
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    OffsetsLog,
    PendingAppend,
)
from tidegate.coordinator.group.group_type import GroupType
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import ConsumerGroupManager
from tidegate.coordinator.group.modern.share.share_group_manager import ShareGroupManager
from tidegate.errors import ErrorCode
from tidegate.log.dir_failure import StorageError
from tidegate.log.replay import ReplayedBatch
from tidegate.network.request_channel import PARKED, Parked, Request
from tidegate.protocol.messages._base import ZERO_UUID, Message
from tidegate.protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from tidegate.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from tidegate.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from tidegate.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from tidegate.protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)
from tidegate.protocol.messages.list_groups import (
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from tidegate.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from tidegate.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from tidegate.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from tidegate.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from tidegate.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from tidegate.server.endpoints import Endpoints
from tidegate.server.metadata import TopicStore
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.request_handler_helper import Respond

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class _RequestedPartition(Protocol):
    """A partition of an OffsetCommit, TxnOffsetCommit or OffsetDelete request."""

    @property
    def partition_index(self) -> int: ...


class _RequestedTopic(Protocol):
    """A topic of an OffsetCommit, TxnOffsetCommit or OffsetDelete request."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[_RequestedPartition]: ...


class _CommittedPartition(_RequestedPartition, Protocol):
    """A partition of an OffsetCommit or TxnOffsetCommit request."""

    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_leader_epoch(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class _CommittedTopic(Protocol):
    """A topic of an OffsetCommit or TxnOffsetCommit request."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[_CommittedPartition]: ...


class _TopicById(Protocol):
    """A topic of an OffsetCommit or OffsetFetch request from v10, named by its id."""

    topic_id: uuid.UUID
    name: str


P = TypeVar("P", bound=Message)
T = TypeVar("T", bound=Message)
RT = TypeVar("RT", bound=_RequestedTopic)
IT = TypeVar("IT", bound=_TopicById)


def _partition_errors(
    topics: Sequence[RT], error_of: Callable[[TopicPartition], ErrorCode],
    partition: Callable[[int, ErrorCode], P], topic: Callable[[RT, list[P]], T],
) -> list[T]:  # fmt: skip
    """A response's topics, in the request's order, with one error per requested partition
    (OffsetCommit, TxnOffsetCommit, OffsetDelete): ``partition(index, error)`` and
    ``topic(requested topic, partitions)`` build the API's entities."""
    return [
        topic(t, [partition(p.partition_index, error_of((t.name, p.partition_index))) for p in t.partitions])
        for t in topics
    ]


def _resolve_topic_ids(store: TopicStore, topics: Sequence[IT]) -> tuple[list[IT], list[IT]]:
    """The topics of a request that names them by id (OffsetCommit and OffsetFetch v10,
    KIP-848), split as Kafka's handleOffsetCommitRequest and handleOffsetFetchRequest
    do: the known ones, their ``name`` set from the id, and the unknown ones (their
    partitions answered UNKNOWN_TOPIC_ID), each in the request's order."""
    known: list[IT] = []
    unknown: list[IT] = []
    for t in topics:
        name = store.topic_name(t.topic_id)
        if name is None:
            unknown.append(t)
        else:
            t.name = name
            known.append(t)
    return known, unknown


class _FetchedOffset(TypedDict):
    """One partition of an OffsetFetch answer: the fields of either version's entity
    (``OffsetFetchResponsePartition`` before v8, ``OffsetFetchResponsePartitions`` from v8)."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    error_code: int


def _fetched_offset(partition: int, committed: OffsetAndMetadata | None, error: ErrorCode) -> _FetchedOffset:
    """A partition's committed offset (offset and leader epoch -1, metadata "" when there
    is none) and error."""
    if committed is None:
        return _FetchedOffset(partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                              error_code=error)
    return _FetchedOffset(partition_index=partition, committed_offset=committed.offset,
                          committed_leader_epoch=committed.leader_epoch, metadata=committed.metadata,
                          error_code=error)


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """Topic configs of ``__consumer_offsets`` (Kafka's ``offsetsTopicConfigs``):
    compacted by the log cleaner, segments of ``offsets.topic.segment.bytes``, batches as
    large as a request may be (one OffsetCommit is one batch), and stored as the
    coordinator writes them whatever the broker's ``compression.type`` (Kafka sets
    ``compression.type=producer`` on it too)."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.get("offsets.topic.segment.bytes")),
        "max.message.bytes": str(config.get("socket.request.max.bytes")),
        "compression.type": "producer",
    }


class GroupApis:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        endpoints: Endpoints,
        offsets_log: OffsetsLog,
        coordinator: GroupCoordinator,
        consumer_groups: ConsumerGroupManager,
        share_groups: ShareGroupManager,
        clock: Clock,
        *,
        respond: Respond,
        topic_deletion_listeners: Sequence[Callable[[Collection[uuid.UUID]], object]] = (),
    ) -> None:
        """``offsets_log`` is ``__consumer_offsets``, which the three group coordinators
        share: the classic ``coordinator`` (its groups and every group's committed
        offsets), KIP-848's ``consumer_groups`` and KIP-932's ``share_groups``.
        ``topic_deletion_listeners`` are told the ids of deleted topics after the share
        groups (the share coordinator, which deletes their share state, and the
        share-partition manager, which drops what it caches)."""
        self.config = config
        #: its wall clock stamps offset commits (Kafka's KafkaApis: commit and expire times)
        self.clock = clock
        self.replicas = replicas
        self.logs = replicas.logs
        self.endpoints = endpoints
        self.node_id = config.node_id
        self.offsets_log = offsets_log
        self.coordinator = coordinator
        self.consumer_groups = consumer_groups
        self.share_groups = share_groups
        self.topic_deletion_listeners = tuple(topic_deletion_listeners)
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond

    def start(self) -> None:
        """Load groups and offsets (Kafka's coordinator load): every batch of
        ``__consumer_offsets`` goes to the three coordinators' replays, in log order,
        then each arms its timers and serves (once: a started broker's groups are live)."""
        if self.coordinator.active:
            return
        n = self.offsets_log.load(self._replay_batch)
        for coordinator in (self.coordinator, self.consumer_groups, self.share_groups):
            coordinator.on_loaded()
        if n:
            log.info("loaded %d record(s) of %s", n, OFFSETS_TOPIC)

    def _replay_batch(self, batch: ReplayedBatch) -> None:
        self.coordinator.replay_batch(batch)
        self.consumer_groups.replay_batch(batch)
        self.share_groups.replay_batch(batch)

    def shutdown(self) -> None:
        """Answer parked JoinGroup/SyncGroup requests and stop: from now on every group
        request answers COORDINATOR_NOT_AVAILABLE (the broker is going away)."""
        self.coordinator.shutdown()
        self.consumer_groups.shutdown()
        self.share_groups.shutdown()

    def maintenance(self, retention_due: bool) -> None:
        if retention_due:
            self.coordinator.cleanup_group_metadata()

    def on_topic_deleted(self, name: str, topic_id: uuid.UUID) -> None:
        """A topic was deleted: its committed offsets go, and it leaves every share
        group's share-partitions with its share state."""
        if self.coordinator.active:
            self.coordinator.remove_offsets_of_topic(name)
        self.share_groups.on_topics_deleted([topic_id])
        for listener in self.topic_deletion_listeners:
            listener([topic_id])

    def coordinator_error(self) -> tuple[ErrorCode, str | None]:
        """FindCoordinator for a group: NONE once __consumer_offsets exists (it is created
        here on first use, as Kafka does), else why this broker cannot coordinate."""
        try:
            if not self.coordinator.active:
                return ErrorCode.coordinator_not_available, "the broker is shutting down"
            self.offsets_log.log(True)
        except OSError as exc:
            self._creation_failed(exc)
            return ErrorCode.coordinator_not_available, f"cannot create {OFFSETS_TOPIC}: {exc}"
        return ErrorCode.none, None

    def _creation_failed(self, exc: OSError) -> None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # one rate-limited line from the log dir's failure channel
            self.replicas.failure_channel.error(StorageError(f"creating {OFFSETS_TOPIC}", exc))
        else:
            log.error("could not create %s: %s", OFFSETS_TOPIC, exc)

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The __consumer_offsets partition of a group (one partition), created if need be."""
        self.offsets_log.log(True)
        return OFFSETS_KEY

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------------
    def handle_join_group(self, request: Request) -> Parked:
        header, req = request.header, request.body_as(JoinGroupRequest)
        version = header.api_version

        def reply(r: JoinResult) -> None:
            name = r.protocol_name
            if name is None and version < 7:
                name = ""  # not nullable before v7
            self.respond(request, JoinGroupResponse(
                error_code=r.error,
                generation_id=r.generation_id,
                protocol_type=r.protocol_type,
                protocol_name=name,
                leader=r.leader_id,
                skip_assignment=r.skip_assignment,
                member_id=r.member_id,
                members=[JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                         for mid, iid, meta in r.members],
            ))  # fmt: skip

        self.coordinator.handle_join_group(
            req.group_id,
            req.member_id,
            req.group_instance_id,
            version >= 4,  # KIP-394: MEMBER_ID_REQUIRED first
            version >= 9,  # KIP-814: skip_assignment for a static leader
            header.client_id or "",
            "/" + request.context.client_address,
            req.rebalance_timeout if version >= 1 else req.session_timeout,
            req.session_timeout,
            req.protocol_type,
            [(p.name, bytes(p.metadata)) for p in req.protocols],
            reply,
            req.reason,
        )
        return PARKED

    def handle_sync_group(self, request: Request) -> Parked:
        req = request.body_as(SyncGroupRequest)

        def reply(r: SyncResult) -> None:
            self.respond(request, SyncGroupResponse(error_code=r.error, protocol_type=r.protocol_type,
                                                    protocol_name=r.protocol_name, assignment=r.assignment))

        self.coordinator.handle_sync_group(
            req.group_id,
            req.generation_id,
            req.member_id,
            req.protocol_type,
            req.protocol_name,
            req.group_instance_id,
            {a.member_id: bytes(a.assignment) for a in req.assignments},
            reply,
        )
        return PARKED

    def handle_heartbeat(self, request: Request) -> HeartbeatResponse:
        req = request.body_as(HeartbeatRequest)
        error = self.coordinator.handle_heartbeat(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
        return HeartbeatResponse(error_code=error)

    def handle_leave_group(self, request: Request) -> LeaveGroupResponse:
        """v3+ (KIP-345) leaves a batch of members, each answered; before, the one member's
        error is the response's."""
        req = request.body_as(LeaveGroupRequest)
        batched = request.header.api_version >= 3
        if batched:
            leaving = [(m.member_id, m.group_instance_id, m.reason) for m in req.members]
        else:
            leaving = [(req.member_id, None, None)]
        error, members = self.coordinator.handle_leave_group(req.group_id, leaving)
        if not batched and error is ErrorCode.none and members:
            error = members[0][2]
        return LeaveGroupResponse(error_code=error, members=[
            MemberResponse(member_id=mid, group_instance_id=iid, error_code=err) for mid, iid, err in members
        ])  # fmt: skip

    # -- OffsetCommit / TxnOffsetCommit / OffsetFetch / OffsetDelete ---------------------------------
    def handle_offset_commit(self, request: Request) -> OffsetCommitResponse | Parked:
        """Answered once the offsets are fsynced; if the write fails or is not durable
        within offsets.commit.timeout.ms, the partitions written answer as Kafka 4's group
        coordinator maps the append's error (handleOperationException: a storage error is
        NOT_COORDINATOR, a timeout COORDINATOR_NOT_AVAILABLE); v2-4 carry the offsets' retention.
        From v10 topics are named by id: an unknown id answers UNKNOWN_TOPIC_ID for its
        partitions (after the known topics), and every answered topic carries its id."""
        req = request.body_as(OffsetCommitRequest)
        version = request.header.api_version
        now = self.clock.wall_milliseconds()
        retention = req.retention_time
        topics, unknown_ids = (
            _resolve_topic_ids(self.logs.store, req.topics) if version >= 10 else (req.topics, [])
        )
        errors, offsets = self._requested_offsets(topics, now, now + retention if retention != -1 else None)

        def partition(index: int, error: ErrorCode) -> OffsetCommitResponsePartition:
            return OffsetCommitResponsePartition(partition_index=index, error_code=error)

        def topic(t: OffsetCommitRequestTopic, partitions: list[OffsetCommitResponsePartition]) -> OffsetCommitResponseTopic:
            return OffsetCommitResponseTopic(topic_id=t.topic_id, name=t.name, partitions=partitions)

        def response() -> OffsetCommitResponse:
            return OffsetCommitResponse(
                topics=_partition_errors(topics, errors.__getitem__, partition, topic)
                + _partition_errors(unknown_ids, lambda _: ErrorCode.unknown_topic_id, partition, topic)
            )

        if not offsets:
            return response()
        committed, wait = self.coordinator.handle_commit_offsets(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id_or_member_epoch, offsets, version
        )
        errors.update(committed)
        if wait is None:
            return response()
        return self._answer_when_durable(request, response, errors, wait, coordinator_operation_error)

    def _answer_when_durable(
        self, request: Request, response: Callable[[], Message], errors: dict[TopicPartition, ErrorCode],
        wait: PendingAppend, failed: Callable[[ErrorCode], ErrorCode],
    ) -> Parked:  # fmt: skip
        """Answer ``response()`` once the write is fsynced; if it is not within
        offsets.commit.timeout.ms (or the log went away), the partitions written (those
        whose error is NONE) answer ``failed(error)``."""

        def durable(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                for tp, e in errors.items():
                    if e is ErrorCode.none:
                        errors[tp] = failed(error)
            self.respond(request, response())

        wait.add_callback(durable)
        return PARKED

    def _requested_offsets(
        self, req_topics: Sequence[_CommittedTopic], now: WallMs, expire_at: int | None
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
        """The offsets of an OffsetCommit or TxnOffsetCommit request: every requested
        partition's error so far (UNKNOWN_TOPIC_OR_PARTITION for those that do not exist,
        else NONE), and the offsets to commit."""
        errors: dict[TopicPartition, ErrorCode] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in req_topics:
            info = self.logs.store.get(t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if info is None or not 0 <= p.partition_index < info.partitions:
                    errors[tp] = ErrorCode.unknown_topic_or_partition
                    continue
                errors[tp] = ErrorCode.none
                metadata = p.committed_metadata
                offsets[tp] = OffsetAndMetadata(p.committed_offset, p.committed_leader_epoch,
                                                metadata if metadata is not None else "", now, expire_at)
        return errors, offsets

    def handle_txn_offset_commit(self, request: Request) -> TxnOffsetCommitResponse | Parked:
        """TxnOffsetCommit v0-4 (transaction version 1; v5, where the commit itself adds the
        offsets partition to the transaction, is TV2 and not advertised). As Kafka's
        KafkaApis.handleTxnOffsetCommitRequest: an unknown topic or partition answers
        UNKNOWN_TOPIC_OR_PARTITION; the others go to the group coordinator, after the
        KIP-890 check that the group's offsets partition is in the transaction. Answered
        once the transactional batch is fsynced; before v2, COORDINATOR_LOAD_IN_PROGRESS
        is answered as COORDINATOR_NOT_AVAILABLE (clients before 2.0 did not expect it)."""
        req = request.body_as(TxnOffsetCommitRequest)
        version = request.header.api_version
        errors, offsets = self._requested_offsets(req.topics, self.clock.wall_milliseconds(), None)

        def response() -> TxnOffsetCommitResponse:
            return TxnOffsetCommitResponse(topics=_partition_errors(
                req.topics, errors.__getitem__,
                lambda index, error: TxnOffsetCommitResponsePartition(partition_index=index, error_code=error),
                lambda t, partitions: TxnOffsetCommitResponseTopic(name=t.name, partitions=partitions),
            ))  # fmt: skip

        if not offsets:
            return response()
        committed, wait = self.coordinator.handle_txn_commit_offsets(
            req.group_id, req.producer_id, req.producer_epoch, req.member_id, req.group_instance_id,
            req.generation_id, offsets,
            lambda: self._verify_offsets_partition(req.group_id, req.transactional_id, req.producer_id,
                                                   req.producer_epoch, version),
        )  # fmt: skip
        for tp, error in committed.items():
            if version < 2 and error is ErrorCode.coordinator_load_in_progress:
                error = ErrorCode.coordinator_not_available  # KAFKA-7296: older clients could crash on it
            errors[tp] = error
        if wait is None:
            return response()
        return self._answer_when_durable(request, response, errors, wait, coordinator_operation_error)

    def _verify_offsets_partition(
        self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int, version: int
    ) -> ErrorCode:
        """KIP-890 part 1: the transaction coordinator must have the group's offsets
        partition in this producer's transaction (AddOffsetsToTxn put it there), checked as
        for a produce (ReplicaManager.verify_transaction); v4 knows TRANSACTION_ABORTABLE,
        earlier versions get INVALID_TXN_STATE (AddPartitionsToTxnManager's
        txnOffsetCommitRequestVersionToTransactionSupportedOperation)."""
        try:
            tp = self.offsets_partition_for(group_id)
        except OSError as exc:
            self._creation_failed(exc)
            return ErrorCode.coordinator_not_available
        refused = self.replicas.verify_transaction(
            transactional_id, producer_id, producer_epoch, [tp], generic_errors=version >= 4
        )
        return coordinator_operation_error(refused.get(tp, ErrorCode.none))

    def _fetched_offsets(
        self, group_id: str, requested: Mapping[str, Sequence[int]] | None, require_stable: bool,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[str, list[_FetchedOffset]]]:  # fmt: skip
        """One group's offsets for OffsetFetch, by topic (every requested topic present, in
        order; None: every partition the group has). ``require_stable`` (v7+): a partition
        with a transactional offset awaiting its marker answers UNSTABLE_OFFSET_COMMIT, per
        partition (the group's error stays NONE, v8+ too), as Kafka's
        OffsetMetadataManager.fetchOffsets. A consumer group's member (v9: ``member_id``,
        ``member_epoch``) must be at its epoch."""
        coordinator = self.coordinator
        partitions = None if requested is None else [(t, p) for t, ps in requested.items() for p in ps]
        error, found = coordinator.handle_fetch_offsets(group_id, partitions, member_id, member_epoch)
        by_topic: dict[str, list[_FetchedOffset]] = {name: [] for name in requested or ()}
        for (topic, partition), om in sorted(found.items()):
            if require_stable and coordinator.has_pending_offsets(group_id, (topic, partition)):
                fetched = _fetched_offset(partition, None, ErrorCode.unstable_offset_commit)
            else:
                fetched = _fetched_offset(partition, om, ErrorCode.none)
            by_topic.setdefault(topic, []).append(fetched)
        return error, by_topic

    def handle_offset_fetch(self, request: Request) -> OffsetFetchResponse:
        """One group before v8 (v1: no group-level error, every requested partition carries
        it), a batch of groups from v8, their topics named by id from v10."""
        req = request.body_as(OffsetFetchRequest)
        version = request.header.api_version
        if version >= 8:
            return OffsetFetchResponse(groups=[
                self._offset_fetch_group(g, req.require_stable, version >= 10) for g in req.groups
            ])  # fmt: skip
        requested = None if req.topics is None else {t.name: t.partition_indexes for t in req.topics}
        error, by_topic = self._fetched_offsets(req.group_id, requested, req.require_stable)
        if error is not ErrorCode.none and version < 2 and requested is not None:
            by_topic = {name: [_fetched_offset(p, None, error) for p in parts] for name, parts in requested.items()}
        return OffsetFetchResponse(error_code=error, topics=[
            OffsetFetchResponseTopic(name=name, partitions=[OffsetFetchResponsePartition(**f) for f in fetched])
            for name, fetched in by_topic.items()
        ])  # fmt: skip

    def _offset_fetch_group(
        self, group: OffsetFetchRequestGroup, require_stable: bool, by_id: bool
    ) -> OffsetFetchResponseGroup:
        """One group of an OffsetFetch from v8. ``by_id`` (v10): the requested topics are
        named by id, an unknown one answered UNKNOWN_TOPIC_ID for its partitions (after the
        others, unless the group has an error, as Kafka's fetchPartitionOffsetsForGroup);
        every topic answered carries its id, and a listing of all the group's topics leaves
        out one without an id (it could not be named; Kafka's fetchAllOffsetsForGroup)."""
        topics = group.topics
        unknown_ids: list[OffsetFetchRequestTopics] = []
        if by_id and topics is not None:
            topics, unknown_ids = _resolve_topic_ids(self.logs.store, topics)
        requested = None if topics is None else {t.name: t.partition_indexes for t in topics}
        error, by_topic = self._fetched_offsets(group.group_id, requested, require_stable, group.member_id,
                                                group.member_epoch)
        answered = []
        for name, fetched in by_topic.items():
            topic_id = ZERO_UUID
            if by_id:
                info = self.logs.store.get(name)
                if info is None:
                    continue
                topic_id = info.topic_id
            answered.append(OffsetFetchResponseTopics(
                topic_id=topic_id, name=name, partitions=[OffsetFetchResponsePartitions(**f) for f in fetched]
            ))  # fmt: skip
        if error is ErrorCode.none:
            answered += [OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
                OffsetFetchResponsePartitions(**_fetched_offset(p, None, ErrorCode.unknown_topic_id))
                for p in t.partition_indexes
            ]) for t in unknown_ids]  # fmt: skip
        return OffsetFetchResponseGroup(group_id=group.group_id, error_code=error, topics=answered)

    def handle_offset_delete(self, request: Request) -> OffsetDeleteResponse:
        req = request.body_as(OffsetDeleteRequest)
        partitions = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        error, errors = self.coordinator.handle_delete_offsets(req.group_id, partitions)
        if error is not ErrorCode.none:
            return OffsetDeleteResponse(error_code=error)
        return OffsetDeleteResponse(topics=_partition_errors(
            req.topics, lambda tp: errors.get(tp, ErrorCode.none),
            lambda index, error: OffsetDeleteResponsePartition(partition_index=index, error_code=error),
            lambda t, partitions: OffsetDeleteResponseTopic(name=t.name, partitions=partitions),
        ))  # fmt: skip

    # -- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------------------
    def handle_list_groups(self, request: Request) -> ListGroupsResponse:
        """The classic groups, then the KIP-848 consumer groups."""
        req = request.body_as(ListGroupsRequest)
        error, groups = self.coordinator.handle_list_groups(req.states_filter, req.types_filter)
        if error is ErrorCode.none:
            groups += self._list_consumer_groups(req.states_filter, req.types_filter)
            groups += self.share_groups.list_groups(req.states_filter, req.types_filter)
        return ListGroupsResponse(error_code=error, groups=groups)

    def _list_consumer_groups(self, states: list[str], types: list[str]) -> list[ListedGroup]:
        """KIP-848 consumer groups as ListGroups shows them (reference 1.14): protocol
        type "consumer", their state ("Stable", ...), type "consumer"; a types filter
        (v5) without "consumer" leaves them out."""
        if types and GroupType.CONSUMER not in {GroupType.parse(t) for t in types}:
            return []
        return [
            ListedGroup(group_id=gid, protocol_type=CONSUMER_PROTOCOL_TYPE, group_state=state,
                        group_type=str(GroupType.CONSUMER))
            for gid, state in self.consumer_groups.list_groups(states)
        ]  # fmt: skip

    def handle_describe_groups(self, request: Request) -> DescribeGroupsResponse:
        """Each group as the coordinator describes it; from v6 (KIP-1043) a group that does
        not exist is GROUP_ID_NOT_FOUND rather than an empty ``Dead`` group. The authorized
        operations are the authorization step's to fill in, when asked for."""
        req = request.body_as(DescribeGroupsRequest)
        coordinator = self.coordinator
        groups = []
        for group_id in req.groups:
            group = coordinator.handle_describe_group(group_id)
            if request.header.api_version >= 6 and group.error_code == ErrorCode.none and group.group_state == DEAD.value:
                group.error_code = ErrorCode.group_id_not_found
                group.error_message = f"Group {group_id} not found."
            groups.append(group)
        return DescribeGroupsResponse(groups=groups)

    def handle_delete_groups(self, request: Request) -> DeleteGroupsResponse | Parked:
        """Classic groups are deleted at once; KIP-848 consumer groups (EMPTY only, else
        NON_EMPTY_GROUP) once their tombstones are durable, then their committed
        offsets (reference 1.14); share groups (EMPTY only) once their share state is
        deleted and their tombstones are durable (reference 2.10)."""
        req = request.body_as(DeleteGroupsRequest)
        ids = list(dict.fromkeys(req.groups_names))
        consumer_ids = [g for g in ids if self.consumer_groups.group_type(g) is not None]
        share_ids = [g for g in ids if self.share_groups.group_type(g) is not None]
        modern = {*consumer_ids, *share_ids}
        results = self.coordinator.handle_delete_groups([g for g in ids if g not in modern])

        def response() -> DeleteGroupsResponse:
            return DeleteGroupsResponse(results=[DeletableGroupResult(group_id=gid, error_code=results[gid])
                                                 for gid in ids])

        if not modern:
            return response()
        waiting = [bool(consumer_ids), bool(share_ids)].count(True)

        def deleted(errors: dict[str, ErrorCode]) -> None:
            nonlocal waiting
            for gid, err in errors.items():
                if err is ErrorCode.none and gid in consumer_ids:
                    self.coordinator.delete_offsets_of_group(gid)
            results.update(errors)
            waiting -= 1
            if not waiting:
                self.respond(request, response())

        if consumer_ids:
            self.consumer_groups.delete_groups(consumer_ids, deleted)
        if share_ids:
            self.share_groups.delete_groups(share_ids, deleted)
        return PARKED


__all__ = ["GroupApis", "offsets_topic_configs"]
