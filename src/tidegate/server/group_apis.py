"""Request handlers of the group APIs, for :class:`tidegate.server.kafka_apis.KafkaApis`.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and OffsetDelete: each turns
the kio request of whatever version arrived into a call on the sans-IO
:class:`~tidegate.coordinator.group.group_coordinator.GroupCoordinator` and its answer into
the response dict (Kafka field names) that ``KafkaApis`` builds and encodes.

A JoinGroup or SyncGroup the coordinator cannot answer yet (a rebalance is in
progress) returns PARKED; the coordinator's callback answers it later through
``respond`` (KafkaApis.send_response). An OffsetCommit is answered once its record is
fsynced: the coordinator's write to ``__consumer_offsets`` goes through
ReplicaManager.append_records with acks=all, like a producer's. A TxnOffsetCommit is
answered the same way; its offsets stay pending until the producer's transaction marker
reaches ``__consumer_offsets`` (docs/transactions.md, "Offsets in transactions").
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import Any

from tidegate.clock import Clock, WallMs
from tidegate.config import BrokerConfig
from tidegate.coordinator.group.group_coordinator import (
    GroupCoordinator,
    coordinator_operation_error,
)
from tidegate.coordinator.group.group_metadata import CONSUMER_PROTOCOL_TYPE, JoinResult, SyncResult
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
from tidegate.network.request_channel import PARKED, Request
from tidegate.protocol.messages.delete_groups import DeleteGroupsRequest
from tidegate.protocol.messages.describe_groups import DescribeGroupsRequest
from tidegate.protocol.messages.heartbeat import HeartbeatRequest
from tidegate.protocol.messages.join_group import JoinGroupRequest
from tidegate.protocol.messages.leave_group import LeaveGroupRequest
from tidegate.protocol.messages.list_groups import ListGroupsRequest
from tidegate.protocol.messages.offset_commit import OffsetCommitRequest
from tidegate.protocol.messages.offset_delete import OffsetDeleteRequest
from tidegate.protocol.messages.offset_fetch import OffsetFetchRequest
from tidegate.protocol.messages.sync_group import SyncGroupRequest
from tidegate.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from tidegate.security.authorizer.acl import AUTHORIZED_OPERATIONS_OMITTED
from tidegate.server.endpoints import Endpoints
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.request_handler_helper import Respond

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def offsets_topic_configs(config: Any) -> dict[str, str]:
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
    ) -> None:
        """``offsets_log`` is ``__consumer_offsets``, which the three group coordinators
        share: the classic ``coordinator`` (its groups and every group's committed
        offsets), KIP-848's ``consumer_groups`` and KIP-932's ``share_groups``."""
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

    def on_topic_deleted(self, name: str) -> None:
        if self.coordinator.active:
            self.coordinator.remove_offsets_of_topic(name)

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
    def handle_join_group(self, request: Request) -> Any:
        header, req = request.header, request.body_as(JoinGroupRequest)
        version = header.api_version
        session_timeout = req.session_timeout
        rebalance_timeout = req.rebalance_timeout if version >= 1 else session_timeout
        def body(r: JoinResult) -> dict:
            name = r.protocol_name
            if name is None and version < 7:
                name = ""  # not nullable before v7
            return {
                "throttle_time": 0,
                "error_code": r.error,
                "generation_id": r.generation_id,
                "protocol_type": r.protocol_type,
                "protocol_name": name,
                "leader": r.leader_id,
                "skip_assignment": r.skip_assignment,
                "member_id": r.member_id,
                "members": [
                    {"member_id": mid, "group_instance_id": iid, "metadata": meta}
                    for mid, iid, meta in r.members
                ],
            }

        def reply(r: JoinResult) -> None:
            self.respond(request, body(r))

        self.coordinator.handle_join_group(
            req.group_id,
            req.member_id,
            req.group_instance_id if version >= 5 else None,
            version >= 4,  # KIP-394: MEMBER_ID_REQUIRED first
            version >= 9,  # KIP-814: skip_assignment for a static leader
            header.client_id or "",
            "/" + request.context.client_address,
            rebalance_timeout,
            session_timeout,
            req.protocol_type,
            [(p.name, bytes(p.metadata)) for p in req.protocols],
            reply,
            getattr(req, "reason", None),
        )

        return PARKED

    def handle_sync_group(self, request: Request) -> Any:
        header, req = request.header, request.body_as(SyncGroupRequest)
        version = header.api_version
        def body(r: SyncResult) -> dict:
            return {
                "throttle_time": 0,
                "error_code": r.error,
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name,
                "assignment": r.assignment,
            }

        def reply(r: SyncResult) -> None:
            self.respond(request, body(r))

        self.coordinator.handle_sync_group(
            req.group_id,
            req.generation_id,
            req.member_id,
            getattr(req, "protocol_type", None),
            getattr(req, "protocol_name", None),
            req.group_instance_id if version >= 3 else None,
            {a.member_id: bytes(a.assignment) for a in req.assignments},
            reply,
        )

        return PARKED

    def handle_heartbeat(self, request: Request) -> dict:
        header, req = request.header, request.body_as(HeartbeatRequest)
        error = self.coordinator.handle_heartbeat(
            req.group_id,
            req.member_id,
            req.group_instance_id if header.api_version >= 3 else None,
            req.generation_id,
        )
        return {"throttle_time": 0, "error_code": error}

    def handle_leave_group(self, request: Request) -> dict:
        header, req = request.header, request.body_as(LeaveGroupRequest)
        version = header.api_version
        if version >= 3:
            leaving = [
                (m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in req.members
            ]
        else:
            leaving = [(req.member_id, None, None)]
        error, members = self.coordinator.handle_leave_group(req.group_id, leaving)
        if version < 3 and error is ErrorCode.none and members:
            error = members[0][2]  # one member: its error is the response's
        return {
            "throttle_time": 0,
            "error_code": error,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": err}
                for mid, iid, err in members
            ],
        }

    # -- OffsetCommit / OffsetFetch / OffsetDelete --------------------------------------------------
    def handle_offset_commit(self, request: Request) -> Any:
        header, req = request.header, request.body_as(OffsetCommitRequest)
        version = header.api_version
        now = self.clock.wall_milliseconds()
        retention = req.retention_time if 2 <= version <= 4 else -1
        topics, parts_by_tp, offsets = self._requested_offsets(
            req.topics, version >= 6, now, now + retention if retention != -1 else None
        )
        body = {"throttle_time": 0, "topics": topics}
        if not offsets:
            return body
        errors, wait = self.coordinator.handle_commit_offsets(
            req.group_id,
            req.member_id,
            req.group_instance_id if version >= 7 else None,
            req.generation_id_or_member_epoch,
            offsets,
            version,
        )
        for tp, error in errors.items():
            parts_by_tp[tp]["error_code"] = error
        if wait is None:
            return body
        return self._answer_when_durable(request, body, [parts_by_tp[tp] for tp, e in errors.items() if e is ErrorCode.none],
                                         wait, lambda _error: ErrorCode.request_timed_out)

    def _answer_when_durable(
        self, request: Request, body: dict, written: list[dict], wait: PendingAppend,
        failed: Callable[[ErrorCode], ErrorCode],
    ) -> Any:  # fmt: skip
        """Answer once the write is fsynced; if it is not within offsets.commit.timeout.ms
        (or the log went away), the ``written`` partitions answer ``failed(error)``."""

        def durable(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                for part in written:
                    if part["error_code"] == ErrorCode.none:
                        part["error_code"] = failed(error)
            self.respond(request, body)

        wait.add_callback(durable)
        return PARKED

    def _requested_offsets(
        self, req_topics: Any, with_leader_epoch: bool, now: WallMs, expire_at: int | None
    ) -> tuple[list[dict], dict[TopicPartition, dict], dict[TopicPartition, OffsetAndMetadata]]:
        """The offsets of an OffsetCommit or TxnOffsetCommit request: the response's topics
        (UNKNOWN_TOPIC_OR_PARTITION filled in for partitions that do not exist), each known
        partition's response entry, and the offsets to commit."""
        topics = []
        parts_by_tp: dict[TopicPartition, dict] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in req_topics:
            info = self.logs.store.get(t.name)
            parts = []
            for p in t.partitions:
                part = {"partition_index": p.partition_index, "error_code": ErrorCode.none}
                parts.append(part)
                if info is None or not 0 <= p.partition_index < info.partitions:
                    part["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                tp = (t.name, p.partition_index)
                parts_by_tp[tp] = part
                offsets[tp] = OffsetAndMetadata(
                    p.committed_offset,
                    p.committed_leader_epoch if with_leader_epoch else -1,
                    p.committed_metadata if p.committed_metadata is not None else "",
                    now,
                    expire_at,
                )
            topics.append({"name": t.name, "partitions": parts})
        return topics, parts_by_tp, offsets

    def handle_txn_offset_commit(self, request: Request) -> Any:
        """TxnOffsetCommit v0-4 (transaction version 1; v5, where the commit itself adds the
        offsets partition to the transaction, is TV2 and not advertised). As Kafka's
        KafkaApis.handleTxnOffsetCommitRequest: an unknown topic or partition answers
        UNKNOWN_TOPIC_OR_PARTITION; the others go to the group coordinator, after the
        KIP-890 check that the group's offsets partition is in the transaction. Answered
        once the transactional batch is fsynced; before v2, COORDINATOR_LOAD_IN_PROGRESS
        is answered as COORDINATOR_NOT_AVAILABLE (clients before 2.0 did not expect it)."""
        header, req = request.header, request.body_as(TxnOffsetCommitRequest)
        version = header.api_version
        topics, parts_by_tp, offsets = self._requested_offsets(
            req.topics, version >= 2, self.clock.wall_milliseconds(), None
        )
        body = {"throttle_time": 0, "topics": topics}
        if not offsets:
            return body
        errors, wait = self.coordinator.handle_txn_commit_offsets(
            req.group_id,
            req.producer_id,
            req.producer_epoch,
            getattr(req, "member_id", ""),
            getattr(req, "group_instance_id", None),
            getattr(req, "generation_id", -1),
            offsets,
            lambda: self._verify_offsets_partition(req.group_id, req.transactional_id, req.producer_id,
                                                   req.producer_epoch, version),
        )  # fmt: skip
        for tp, error in errors.items():
            if version < 2 and error is ErrorCode.coordinator_load_in_progress:
                error = ErrorCode.coordinator_not_available  # KAFKA-7296: older clients could crash on it
            parts_by_tp[tp]["error_code"] = error
        if wait is None:
            return body
        return self._answer_when_durable(
            request, body, [parts_by_tp[tp] for tp, e in errors.items() if e is ErrorCode.none], wait,
            coordinator_operation_error,
        )  # fmt: skip

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

    @staticmethod
    def _fetch_partitions(topics: Any) -> list[tuple[str, int]] | None:
        if topics is None:
            return None
        return [(t.name, p) for t in topics for p in t.partition_indexes]

    def _offset_fetch_group(
        self, group_id: str, topics: Any, version: int, require_stable: bool,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> dict:  # fmt: skip
        """One group's offsets. ``require_stable`` (v7+): a partition with a transactional
        offset awaiting its marker answers UNSTABLE_OFFSET_COMMIT, per partition (the group's
        error stays NONE, v8+ too), as Kafka's OffsetMetadataManager.fetchOffsets. A
        consumer group's member (v9: ``member_id``, ``member_epoch``) must be at its epoch."""
        coordinator = self.coordinator
        error, found = coordinator.handle_fetch_offsets(
            group_id, self._fetch_partitions(topics), member_id, member_epoch
        )
        by_topic: dict[str, list[dict]] = {}
        if topics is not None:
            for t in topics:
                by_topic.setdefault(t.name, [])
        for (topic, partition), om in sorted(found.items()):
            if require_stable and coordinator.has_pending_offsets(group_id, (topic, partition)):
                om, part_error = None, ErrorCode.unstable_offset_commit
            else:
                part_error = ErrorCode.none
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": om.offset if om is not None else -1,
                    "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                    "metadata": om.metadata if om is not None else "",
                    "error_code": part_error,
                }
            )
        if error is not ErrorCode.none and version < 2 and topics is not None:
            # v1 has no group-level error: every requested partition carries it
            by_topic = {
                t.name: [
                    {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                     "metadata": "", "error_code": error}
                    for p in t.partition_indexes
                ]
                for t in topics
            }
        return {
            "group_id": group_id,
            "error_code": error,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        }

    def handle_offset_fetch(self, request: Request) -> dict:
        header, req = request.header, request.body_as(OffsetFetchRequest)
        version = header.api_version
        require_stable = getattr(req, "require_stable", False)
        if version >= 8:
            return {
                "throttle_time": 0,
                "groups": [self._offset_fetch_group(g.group_id, g.topics, version, require_stable,
                                                    g.member_id, g.member_epoch)
                           for g in req.groups],
            }
        one = self._offset_fetch_group(req.group_id, req.topics, version, require_stable)
        return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}

    def handle_offset_delete(self, request: Request) -> dict:
        req = request.body_as(OffsetDeleteRequest)
        partitions = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        error, errors = self.coordinator.handle_delete_offsets(req.group_id, partitions)
        if error is not ErrorCode.none:
            return {"error_code": error, "throttle_time": 0, "topics": []}
        return {
            "error_code": ErrorCode.none,
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index,
                         "error_code": errors.get((t.name, p.partition_index), ErrorCode.none)}
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ],
        }

    # -- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------------------
    def handle_list_groups(self, request: Request) -> dict:
        req = request.body_as(ListGroupsRequest)
        error, groups = self.coordinator.handle_list_groups(
            getattr(req, "states_filter", ()) or (), getattr(req, "types_filter", ()) or ()
        )
        listed = [
            {"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": "classic"}
            for gid, ptype, state in groups
        ]
        if error is ErrorCode.none:
            listed += self._list_consumer_groups(req.states_filter, req.types_filter)
        return {"throttle_time": 0, "error_code": error, "groups": listed}

    def _list_consumer_groups(self, states: list[str], types: list[str]) -> list[dict]:
        """KIP-848 consumer groups as ListGroups shows them (reference 1.14): protocol
        type "consumer", their state ("Stable", ...), type "consumer"; a types filter
        (v5) without "consumer" leaves them out."""
        if types and GroupType.CONSUMER not in {GroupType.parse(t) for t in types}:
            return []
        return [
            {"group_id": gid, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
             "group_type": str(GroupType.CONSUMER)}
            for gid, state in self.consumer_groups.list_groups(states)
        ]  # fmt: skip

    def handle_describe_groups(self, request: Request) -> dict:
        header, req = request.header, request.body_as(DescribeGroupsRequest)
        version = header.api_version
        coordinator = self.coordinator
        out = []
        for group_id in req.groups:
            error, summary = coordinator.handle_describe_group(group_id)
            entry: dict[str, Any] = {
                "error_code": error,
                "error_message": None,
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                # filled by the authorization step when asked for
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
            if error is ErrorCode.none and summary is None:
                entry["group_state"] = "Dead"
                if version >= 6:
                    entry["error_code"] = ErrorCode.group_id_not_found
                    entry["error_message"] = f"Group {group_id} not found."
            elif summary is not None:
                entry["group_state"] = summary["state"]
                entry["protocol_type"] = summary["protocol_type"]
                entry["protocol_data"] = summary["protocol"]
                entry["members"] = summary["members"]
            out.append(entry)
        return {"throttle_time": 0, "groups": out}

    def handle_delete_groups(self, request: Request) -> Any:
        """Classic groups are deleted at once; KIP-848 consumer groups (EMPTY only, else
        NON_EMPTY_GROUP) once their tombstones are durable, then their committed
        offsets (reference 1.14)."""
        req = request.body_as(DeleteGroupsRequest)
        ids = list(dict.fromkeys(req.groups_names))
        consumer_ids = [g for g in ids if self.consumer_groups.group_type(g) is not None]
        results = self.coordinator.handle_delete_groups([g for g in ids if g not in consumer_ids])

        def body() -> dict:
            return {
                "throttle_time": 0,
                "results": [{"group_id": gid, "error_code": results[gid]} for gid in ids],
            }

        if not consumer_ids:
            return body()

        def deleted(errors: dict[str, ErrorCode]) -> None:
            for gid, err in errors.items():
                if err is ErrorCode.none:
                    self.coordinator.delete_offsets_of_group(gid)
            results.update(errors)
            self.respond(request, body())

        self.consumer_groups.delete_groups(consumer_ids, deleted)
        return PARKED


__all__ = ["GroupApis", "offsets_topic_configs"]
