"""KIP-932 share groups on the group coordinator, sans-IO: the share-group half of Kafka's
``GroupMetadataManager`` (``shareGroupHeartbeat``, ``shareGroupLeave``, the session
timeouts, the share-partition initialization, replay) and of its ``GroupCoordinatorService``
(the request checks, the persister calls, the admin operations).

Records first and timers on the timing wheel are
:class:`~tidegate.coordinator.group.modern.group_manager.ModernGroupManager`'s, shared with
the consumer group coordinator.

**ShareGroupHeartbeat** (reference 2.3): a group is created only by a join (epoch 0), a
member only by a join; epoch 0 is always accepted, a larger epoch or a smaller one other
than the previous is FENCED_MEMBER_EPOCH; a new member of a full group
(``group.share.max.size``) is GROUP_MAX_SIZE_REACHED. The group epoch is bumped when a
member's subscription changes, the subscribed topics' metadata hash changes, or
*initialized share-partitions are missing from the target assignment*; the target is then
computed by the ``simple`` assignor over the initialized share-partitions only. A member
always moves straight to the target epoch, STABLE, with its target filtered to its
subscription. The answer carries the assignment when the member joins (epoch 0), sends its
subscription, or its assignment changed. A leave (-1) and a session timeout tombstone the
member and bump the epoch.

**Share-partition initialization**: subscribed share-partitions that are neither
initialized nor initializing (an initialization older than
``group.share.initialize.retry.interval.ms`` counts as lost) are recorded as initializing
in the heartbeat's write; once it is durable the persister is asked to initialize them
(state epoch = the group epoch, start offset -1); on success they are recorded as
initialized and the next heartbeat bumps the epoch and assigns them; on failure they are
no longer initializing, and the next heartbeat tries again. Single-node note (reference
2.3): when the persister answers during the call, the heartbeat is not answered yet: once
the initialized record is durable the member's heartbeat is run again, so the first answer
already carries the new partitions. New partitions and topics created later are found the
same way (a new metadata hash bumps the epoch and the heartbeat initializes what is new).
A deleted topic leaves the three sets (a write of its own, when the coordinator sees the
topic store's version change, or :meth:`ShareGroupManager.on_topics_deleted`) and, through
the new metadata hash, the assignments; a topic created again under the same name has a
new id and starts afresh.

**Admin** (reference 2.10): ShareGroupDescribe, ListGroups, DeleteGroups (EMPTY required;
the state of initialized and initializing share-partitions is deleted first, then the
group is tombstoned), DescribeShareGroupOffsets (start offset, leader epoch, lag = log end
- start - delivery complete count), AlterShareGroupOffsets (creates the group if missing,
EMPTY required, initializes the share-partitions again with the given start offsets at a
state epoch above any used before: the group epoch is bumped for it), and
DeleteShareGroupOffsets. Each takes plain inputs and answers, through a callback, the
generated response entities the handlers send.

**Other groups**: an id that names a consumer or classic group (the injected
``other_groups``) is GROUP_ID_NOT_FOUND here; :meth:`ShareGroupManager.group_type` and
:meth:`ShareGroupManager.join_group_error` are what the other coordinators ask.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tidegate.clock import Clock, MonotonicMs
from tidegate.config import BrokerConfig
from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    PartitionAssignor,
    SubscriptionType,
)
from tidegate.coordinator.group.assignor.simple import SimpleAssignor
from tidegate.coordinator.group.group_type import GroupType, GroupTypeLookup, no_other_groups
from tidegate.coordinator.group.modern.group_manager import (
    AppendRecords,
    CoordinatorOperation,
    GroupConfigLookup,
    HeartbeatResult,
    ModernGroupManager,
    is_blank,
    no_group_configs,
)
from tidegate.coordinator.group.modern.modern_group import (
    METADATA_REFRESH_INTERVAL_MS,
    api_error,
    error_code_of,
    topic_partitions_of,
    update_name_counts,
)
from tidegate.coordinator.group.modern.records import (
    SHARE_GROUP_RECORD_TYPES,
    CoordinatorRecord,
    RecordType,
)
from tidegate.coordinator.group.modern.share.persister import (
    PartitionErrors,
    Summaries,
    delete_state,
    first_error,
    initialize_state,
    read_summary,
)
from tidegate.coordinator.group.modern.share.records import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    member_with_assignment,
    new_share_group_current_assignment_record,
    new_share_group_current_assignment_tombstone_record,
    new_share_group_epoch_record,
    new_share_group_member_subscription_record,
    new_share_group_member_subscription_tombstone_record,
    new_share_group_state_partition_metadata_record,
    new_share_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.share.share_group import (
    SHARE_PROTOCOL_TYPE,
    InitMap,
    InitMapValue,
    ShareGroup,
    ShareGroupState,
    combine_init_maps,
    infos,
)
from tidegate.coordinator.group.modern.share.share_group_member import (
    ShareGroupMember,
    reconcile,
)
from tidegate.coordinator.group.modern.subscription import subscription_type
from tidegate.coordinator.group.modern.target_assignment_builder import TargetAssignmentBuilder
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import BrokerResponseError, ErrorCode
from tidegate.protocol.messages import list_groups, share_group_describe
from tidegate.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequestTopic,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequestTopic,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from tidegate.server.share.persister import (
    UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
    UNINITIALIZED_START_OFFSET,
    Persister,
    PersisterReadSummary,
)
from tidegate.server.timer import SystemTimer

if TYPE_CHECKING:
    from tidegate.coordinator.group.modern.records import RecordValue

log = logging.getLogger(__name__)


#: A member leaves (Kafka's ShareGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: The longest member id a client may send (a UUID's string form; KafkaApis' check).
MAX_MEMBER_ID_LENGTH = 36
#: The group configs a share group reads (reference 1.15), falling back to the broker's.
SHARE_SESSION_TIMEOUT_MS_CONFIG = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS_CONFIG = "share.heartbeat.interval.ms"
SIMPLE_ASSIGNOR = SimpleAssignor()


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The broker's share group configs (Kafka's ``GroupCoordinatorConfig``, reference
    2.11)."""

    #: group.share.session.timeout.ms
    session_timeout_ms: int = 45_000
    #: group.share.heartbeat.interval.ms
    heartbeat_interval_ms: int = 5_000
    #: group.share.max.size
    max_size: int = 200
    #: group.share.assignors: exactly one
    assignors: tuple[str, ...] = ("simple",)
    #: group.share.initialize.retry.interval.ms (internal)
    initialize_retry_interval_ms: int = 30_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> ShareGroupConfig:
        return cls(
            session_timeout_ms=config.get("group.share.session.timeout.ms"),
            heartbeat_interval_ms=config.get("group.share.heartbeat.interval.ms"),
            max_size=config.get("group.share.max.size"),
            assignors=tuple(config.get("group.share.assignors")),
            initialize_retry_interval_ms=config.get("group.share.initialize.retry.interval.ms"),
        )


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeat:
    """A ShareGroupHeartbeat request (v1) and what the broker knows of its sender."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    #: None: unchanged since the last heartbeat
    subscribed_topic_names: Sequence[str] | None = None
    client_id: str = ""
    client_host: str = ""


ShareGroupHeartbeatResult = HeartbeatResult


HeartbeatCallback = Callable[[ShareGroupHeartbeatResult], None]


@dataclass(frozen=True, slots=True)
class _Initialize:
    """An InitializeShareGroupState call to make once the write that recorded the
    share-partitions as initializing is durable."""

    group_id: str
    state_epoch: int
    #: topic id -> partition -> start offset
    start_offsets: Mapping[uuid.UUID, Mapping[int, int]]


def throw_if_share_group_heartbeat_request_is_invalid(request: ShareGroupHeartbeat) -> None:
    """INVALID_REQUEST (reference 2.3; Kafka's ``GroupCoordinatorService.
    throwIfShareGroupHeartbeatRequestIsInvalid`` and KafkaApis' member id length check)."""

    def invalid(message: str) -> BrokerResponseError:
        return api_error(ErrorCode.invalid_request, message)

    if not request.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if len(request.member_id) > MAX_MEMBER_ID_LENGTH:
        raise invalid(f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters.")
    if not request.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if is_blank(request.rack_id):
        raise invalid("RackId can't be empty.")
    if request.member_epoch == 0:
        if not request.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif request.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def throw_if_share_group_member_epoch_is_invalid(member: ShareGroupMember, received: int) -> None:
    """Epoch 0 is always accepted (a rejoin); a larger epoch is fenced; a smaller one
    only if it is the previous epoch (the answer with the new epoch was lost)."""
    if received == 0:
        return
    if received > member.member_epoch:
        raise api_error(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise api_error(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}), and it does not match "
            f"the previous member epoch ({member.previous_member_epoch}). The member must "
            "abandon all its partitions and rejoin.",
        )


def _updated_member(member: ShareGroupMember, req: ShareGroupHeartbeat) -> ShareGroupMember:
    """The member with what the request sets (null fields leave it unchanged)."""
    changes: dict[str, object] = {"client_id": req.client_id, "client_host": req.client_host}
    if req.rack_id is not None:
        changes["rack_id"] = req.rack_id
    if req.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = frozenset(req.subscribed_topic_names)
    updated = member.replace(**changes)
    return member if updated == member else updated


class ShareGroupManager(ModernGroupManager[ShareGroup, ShareGroupMember]):
    RECORD_TYPES = SHARE_GROUP_RECORD_TYPES
    MEMBER_VALUES = (ShareGroupMemberMetadataValue, ShareGroupCurrentMemberAssignmentValue)
    PROTOCOL = "share"
    SESSION_TIMEOUT_MS_CONFIG = SHARE_SESSION_TIMEOUT_MS_CONFIG
    HEARTBEAT_INTERVAL_MS_CONFIG = SHARE_HEARTBEAT_INTERVAL_MS_CONFIG
    config: ShareGroupConfig

    def __init__(
        self,
        config: ShareGroupConfig,
        *,
        image: MetadataImage,
        append: AppendRecords,
        timer: SystemTimer,
        clock: Clock,
        persister: Persister,
        group_configs: GroupConfigLookup = no_group_configs,
        other_groups: GroupTypeLookup = no_other_groups,
        assignor: PartitionAssignor = SIMPLE_ASSIGNOR,
        member_left: Callable[[str, str], None] | None = None,
        state_reset: Callable[[str, Collection[uuid.UUID] | None], None] | None = None,
    ) -> None:
        super().__init__(
            config,
            image=image,
            append=append,
            timer=timer,
            clock=clock,
            group_configs=group_configs,
        )
        if config.assignors != (assignor.name,):
            raise ValueError(
                f"group.share.assignors must name exactly one assignor: {assignor.name}"
            )
        self.persister = persister
        #: the type of a group id this manager does not own (consumer and classic groups)
        self.other_groups = other_groups
        self.assignor = assignor
        #: told (group id, member id) once a member's removal (a leave, a session
        #: timeout) is written: the share-partition manager releases what it holds
        #: unless its share session lives on (that session's end releases it)
        self.member_left = member_left
        #: told (group id, topic ids or None: all) once the persister deleted or
        #: initialized again a group's share state (DeleteGroups, DeleteShareGroupOffsets,
        #: AlterShareGroupOffsets): the share-partition manager drops what it caches
        self.state_reset = state_reset

    # -- replay: the share group's own records ------------------------------------------------
    def _new_group(self, group_id: str) -> ShareGroup:
        return ShareGroup(group_id)

    def _member_without_assignment(self, member: ShareGroupMember) -> ShareGroupMember:
        return member_with_assignment(member, None)

    def _replay_own_value(self, group: ShareGroup, key: str, value: RecordValue) -> None:
        assert isinstance(value, ShareGroupStatePartitionMetadataValue), value
        group.replay_state_partition_metadata(value, self.clock.milliseconds())

    def _replay_own_tombstone(self, group: ShareGroup, t: RecordType, key: str) -> None:
        if t is RecordType.SHARE_GROUP_STATE_PARTITION_METADATA:
            group.replay_state_partition_metadata(None, self.clock.milliseconds())

    # -- the groups -----------------------------------------------------------------------------
    def group_type(self, group_id: str) -> GroupType | None:
        """SHARE if ``group_id`` is one of this manager's groups (the
        :data:`~tidegate.coordinator.group.group_type.GroupTypeLookup` it offers the other
        coordinators)."""
        return GroupType.SHARE if group_id in self.groups else None

    def join_group_error(self, group_id: str) -> ErrorCode | None:
        """What a JoinGroup of this group id answers when it names a share group
        (INCONSISTENT_GROUP_PROTOCOL, as Kafka's ``classicGroupJoin``), None otherwise."""
        return ErrorCode.inconsistent_group_protocol if group_id in self.groups else None

    def share_group(self, group_id: str) -> ShareGroup:
        """An existing share group (Kafka's ``shareGroup``): GROUP_ID_NOT_FOUND if there is
        none or the id names a group of another type."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        self._throw_if_other_group(group_id)
        raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} not found.")

    def _get_or_maybe_create_share_group(self, group_id: str, create: bool) -> ShareGroup:
        """The group; a new one (replayed into being by its records) if ``create``."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        self._throw_if_other_group(group_id)
        if not create:
            raise api_error(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        return ShareGroup(group_id)

    def _throw_if_other_group(self, group_id: str) -> None:
        if self.other_groups(group_id) is not None:
            raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")

    def groups_in_state(self, state: ShareGroupState) -> int:
        return sum(1 for g in self.groups.values() if g.state is state)

    # -- ShareGroupHeartbeat ------------------------------------------------------------------
    def share_group_heartbeat(
        self, request: ShareGroupHeartbeat, callback: HeartbeatCallback
    ) -> None:
        """Handle a heartbeat (a join at epoch 0, a leave at -1); ``callback`` gets the
        answer once what it changed is durable (maybe before this returns)."""
        init: _Initialize | None = None

        def handle() -> tuple[CoordinatorOperation, ShareGroupHeartbeatResult]:
            nonlocal init
            throw_if_share_group_heartbeat_request_is_invalid(request)
            self._maybe_update_metadata_image()
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._share_group_leave(request)
            op, result, init = self._share_group_heartbeat(request)
            return op, result

        def then(result: ShareGroupHeartbeatResult) -> None:
            if init is None:
                callback(result)
            else:
                self._initialize_then_answer(init, request, result, callback)

        self._heartbeat("ShareGroupHeartbeat", request.group_id, handle, callback, then)

    def _share_group_heartbeat(
        self, req: ShareGroupHeartbeat
    ) -> tuple[CoordinatorOperation, ShareGroupHeartbeatResult, _Initialize | None]:
        """Kafka's ``shareGroupHeartbeat`` (reference 2.3): the member, its subscription,
        the group epoch, the target assignment, the member's assignment, and the
        share-partitions to initialize."""
        op = CoordinatorOperation()
        group_id, member_id, member_epoch = req.group_id, req.member_id, req.member_epoch
        create = member_epoch == 0
        group = self._get_or_maybe_create_share_group(group_id, create)
        self._throw_if_group_is_full(group, member_id)
        member = group.get_or_maybe_create_member(member_id, create)
        throw_if_share_group_member_epoch_is_invalid(member, member_epoch)
        if create and member_id not in group.members:
            log.info("[GroupId %s] Member %s joins the share group.", group_id, member_id)

        updated = _updated_member(member, req)
        bump = False
        if updated != member:
            op.records.append(new_share_group_member_subscription_record(group_id, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names
        bump = bump or self._initialized_assignment_pending(group)
        group_epoch, names, sub_type = (
            group.group_epoch,
            group.subscribed_topic_names,
            group.subscription_type,
        )
        now = self.clock.milliseconds()
        if bump or group.has_metadata_expired(now):
            names = group.compute_subscribed_topic_names(member, updated)
            metadata_hash = self._metadata_hash(names)
            members = group.num_members() + (0 if group.has_member(member_id) else 1)
            sub_type = subscription_type({}, names, members)
            bump = bump or metadata_hash != group.metadata_hash
            if bump:
                group_epoch += 1
                op.records.append(
                    new_share_group_epoch_record(group_id, group_epoch, metadata_hash)
                )
                self._log_bump(group_id, group_epoch, metadata_hash)
            group.set_metadata_refresh_deadline(
                MonotonicMs(now + METADATA_REFRESH_INTERVAL_MS), group_epoch
            )
        if group_epoch > group.assignment_epoch:
            target = self._update_target_assignment(group, group_epoch, updated, sub_type, op)
            target_epoch = group_epoch
        else:
            target, target_epoch = group.target_assignment_of(member_id), group.assignment_epoch
        updated = self._maybe_reconcile(group_id, updated, target_epoch, target, bump, op)
        op.after.append(lambda: self._schedule_session_timeout(group_id, member_id))

        send_assignment = (
            member_epoch == 0
            or req.subscribed_topic_names is not None
            or updated.assigned_partitions != member.assigned_partitions
        )
        result = ShareGroupHeartbeatResult(
            member_id=member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms(group_id),
            assignment=updated.assigned_partitions if send_assignment else None,
        )
        return op, result, self._maybe_initialize(group, group_epoch, names, op)

    def _initialized_assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's ``initializedAssignmentPending``: a subscribed topic whose initialized
        share-partitions differ from those the target assignment holds (they were
        initialized since the target was computed). Topics that no longer exist are left
        out (their ids wait for the cleanup)."""
        if not group.members or not group.initialized_topics or not group.subscribed_topic_names:
            return False
        assigned = topic_partitions_of(group.target_assignment.values())
        for topic_id, value in group.initialized_topics.items():
            topic = self.image.get_by_id(topic_id)
            if topic is None or topic.name not in group.subscribed_topic_names:
                continue
            if assigned.get(topic_id) != value.partitions:
                return True
        return False

    def _update_target_assignment(
        self,
        group: ShareGroup,
        group_epoch: int,
        updated: ShareGroupMember,
        sub_type: SubscriptionType,
        op: CoordinatorOperation,
    ) -> Assignment:
        """A new target assignment by the simple assignor over the initialized
        share-partitions; its changed member targets and epoch are written. An assignor
        failure answers UNKNOWN_SERVER_ERROR."""
        builder = TargetAssignmentBuilder(
            group.group_id,
            group_epoch,
            self.assignor,
            members=group.members,
            target_assignment=group.target_assignment,
            subscription_type=sub_type,
            metadata_image=self.image,
            assignable_partitions=group.initialized_partitions(),
        ).add_or_update_member(updated.member_id, updated)
        return self._build_target_assignment(group, builder, self.assignor.name, updated.member_id, op)

    def _maybe_reconcile(
        self,
        group_id: str,
        member: ShareGroupMember,
        target_epoch: int,
        target: Assignment,
        has_subscription_changed: bool,
        op: CoordinatorOperation,
    ) -> ShareGroupMember:
        if not has_subscription_changed and member.is_reconciled_to(target_epoch):
            return member
        updated = reconcile(member, target_epoch, target, has_subscription_changed, self.image)
        if updated != member:
            op.records.append(new_share_group_current_assignment_record(group_id, updated))
            log.info(
                "[GroupId %s] Member %s new assignment state: epoch=%d, previousEpoch=%d, "
                "assignedPartitions=%s.",
                group_id, updated.member_id, updated.member_epoch, updated.previous_member_epoch,
                {t: sorted(p) for t, p in updated.assigned_partitions.items()},
            )  # fmt: skip
        return updated

    # -- leaving and fencing -------------------------------------------------------------------
    def _share_group_leave(
        self, req: ShareGroupHeartbeat
    ) -> tuple[CoordinatorOperation, ShareGroupHeartbeatResult]:
        group = self.share_group(req.group_id)
        member = group.member(req.member_id)
        log.info("[GroupId %s] Member %s left the share group.", group.group_id, member.member_id)
        result = ShareGroupHeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)
        return self._fence_members(group, [member]), result

    def _fence_members(
        self, group: ShareGroup, members: Sequence[ShareGroupMember]
    ) -> CoordinatorOperation:
        """Their three records are tombstoned, the group epoch is bumped (with the
        metadata hash of what the others subscribe to), their timers cancelled."""
        op = CoordinatorOperation()
        group_id = group.group_id
        names = dict(group.subscribed_topic_names)
        for member in members:
            member_id = member.member_id
            op.records.append(
                new_share_group_current_assignment_tombstone_record(group_id, member_id)
            )
            op.records.append(
                new_share_group_target_assignment_tombstone_record(group_id, member_id)
            )
            op.records.append(
                new_share_group_member_subscription_tombstone_record(group_id, member_id)
            )
            update_name_counts(names, member, None)
        metadata_hash = self._metadata_hash(names)
        group_epoch = group.group_epoch + 1
        op.records.append(new_share_group_epoch_record(group_id, group_epoch, metadata_hash))
        self._log_bump(group_id, group_epoch, metadata_hash)
        for member in members:
            member_id = member.member_id
            op.after.append(functools.partial(self._cancel_timers, group_id, member_id))
            if self.member_left is not None:
                op.after.append(functools.partial(self.member_left, group_id, member_id))
        return op

    # -- share-partition initialization --------------------------------------------------------
    def _maybe_initialize(
        self, group: ShareGroup, group_epoch: int, names: Iterable[str], op: CoordinatorOperation
    ) -> _Initialize | None:
        """Kafka's ``maybeCreateInitializeShareGroupStateRequest``: the subscribed
        share-partitions neither initialized nor initializing (recently) are recorded as
        initializing (in ``op``); the call that initializes them, once ``op`` is durable."""
        change = self._subscribed_topics_change_map(group, names)
        if not change:
            return None
        op.records.append(self._initializing_record(group, change))
        return _Initialize(
            group.group_id,
            group_epoch,
            {t: dict.fromkeys(v.partitions, UNINITIALIZED_START_OFFSET) for t, v in change.items()},
        )

    def _subscribed_topics_change_map(
        self, group: ShareGroup, names: Iterable[str]
    ) -> dict[uuid.UUID, InitMapValue]:
        """Kafka's ``subscribedTopicsChangeMap``: per subscribed topic, its partitions
        neither initialized nor initializing for less than the retry interval."""
        now = self.clock.milliseconds()
        retry_ms = self.config.initialize_retry_interval_ms
        fresh = {
            t: v for t, v in group.initializing_topics.items() if now - v.timestamp_ms < retry_ms
        }
        already = combine_init_maps(group.initialized_topics, fresh)
        change = {}
        for name in names:
            topic = self.image.get(name)
            if topic is None:
                continue
            done = already.get(topic.topic_id)
            have = frozenset() if done is None else done.partitions
            if len(have) < topic.partitions:
                missing = frozenset(range(topic.partitions)) - have
                change[topic.topic_id] = InitMapValue(name, missing, now)
        return change

    def _initializing_record(self, group: ShareGroup, new: InitMap) -> CoordinatorRecord:
        """Record 15 with ``new`` added to the initializing share-partitions (and no
        longer deleting)."""
        initializing = combine_init_maps(group.initializing_topics, new)
        deleting = {t: n for t, n in group.deleting_topics.items() if t not in new}
        return new_share_group_state_partition_metadata_record(
            group.group_id, infos(initializing), infos(group.initialized_topics), deleting
        )

    def _initialize_then_answer(
        self,
        init: _Initialize,
        request: ShareGroupHeartbeat,
        result: ShareGroupHeartbeatResult,
        callback: HeartbeatCallback,
    ) -> None:
        """Ask the persister to initialize; answer the heartbeat now if it answers later
        (Kafka), else once the share-partitions are recorded as initialized, with the
        member's heartbeat run again so that they are assigned in this answer."""

        written_early: list[bool] = []
        answered_at_once: bool | None = None  # known once the persister call returns

        def finish(ok: bool) -> None:
            if ok:
                self._heartbeat_again(request, result, callback)
            else:
                callback(result)

        def initialized(ok: bool) -> None:
            if answered_at_once is None:
                written_early.append(ok)
            elif answered_at_once:
                finish(ok)

        answered_at_once = self._initialize_share_group_state(init, initialized)
        if not answered_at_once:
            callback(result)
        elif written_early:
            finish(written_early[0])

    def _heartbeat_again(
        self,
        request: ShareGroupHeartbeat,
        first: ShareGroupHeartbeatResult,
        callback: HeartbeatCallback,
    ) -> None:
        """The member's heartbeat once more, at the epoch it was just given, answered as
        one with ``first`` (the assignment is sent if either sends it)."""
        group = self.groups.get(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if member is None:
            callback(first)
            return
        again = replace(
            request, member_epoch=member.member_epoch, rack_id=None, subscribed_topic_names=None
        )
        try:
            op, second, init = self._share_group_heartbeat(again)
        except Exception as exc:  # the first answer stands
            if not isinstance(exc, BrokerResponseError):
                log.exception("ShareGroupHeartbeat of group %s failed", request.group_id)
            callback(first)
            return

        def done(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                callback(first)
                return
            if init is not None:
                self._initialize_share_group_state(init)
            if first.assignment is not None and second.assignment is None:
                current = self.groups[request.group_id].members.get(request.member_id)
                assignment = EMPTY_ASSIGNMENT if current is None else current.assigned_partitions
                callback(replace(second, assignment=assignment))
            else:
                callback(second)

        self._commit(op, done)

    def _initialize_share_group_state(
        self, init: _Initialize, on_written: Callable[[bool], None] | None = None
    ) -> bool:
        """InitializeShareGroupState through the persister; its answer is recorded (the
        share-partitions initialized, or no longer initializing) and ``on_written`` told
        whether they are initialized, once that write is durable. Whether the persister
        answered before this returned."""
        answered = False
        partitions = {t: frozenset(p) for t, p in init.start_offsets.items()}

        def persisted(errors: PartitionErrors) -> None:
            nonlocal answered
            answered = True
            error = first_error(errors)
            if error is ErrorCode.none:
                op = self._initialized_op(init.group_id, partitions)
            else:
                log.error(
                    "[GroupId %s] Initializing the state of %s failed: %s.",
                    init.group_id, partitions, error.name,
                )  # fmt: skip
                op = self._uninitialized_op(init.group_id, partitions)

            def written(write_error: ErrorCode) -> None:
                if on_written is not None:
                    on_written(error is ErrorCode.none and write_error is ErrorCode.none)

            self._commit(op, written)

        initialize_state(
            self.persister, init.group_id, init.state_epoch, init.start_offsets, persisted
        )
        return answered

    def _initialized_op(
        self, group_id: str, partitions: Mapping[uuid.UUID, frozenset[int]]
    ) -> CoordinatorOperation:
        """Kafka's ``initializeShareGroupState``: the share-partitions move from
        initializing to initialized."""
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorOperation()
        now = self.clock.milliseconds()
        added = {}
        for topic_id, parts in partitions.items():
            topic = self.image.get_by_id(topic_id)
            if topic is not None:  # a topic deleted meanwhile stays out
                added[topic_id] = InitMapValue(topic.name, parts, now)
        initialized = combine_init_maps(group.initialized_topics, added)
        initializing = self._without(group.initializing_topics, partitions)
        record = new_share_group_state_partition_metadata_record(
            group_id, infos(initializing), infos(initialized), group.deleting_topics
        )
        return CoordinatorOperation([record])

    def _uninitialized_op(
        self, group_id: str, partitions: Mapping[uuid.UUID, frozenset[int]]
    ) -> CoordinatorOperation:
        """Kafka's ``uninitializeShareGroupState``: the share-partitions are no longer
        initializing (the next heartbeat tries again)."""
        group = self.groups.get(group_id)
        if group is None or not group.initializing_topics:
            return CoordinatorOperation()
        initializing = self._without(group.initializing_topics, partitions)
        record = new_share_group_state_partition_metadata_record(
            group_id, infos(initializing), infos(group.initialized_topics), group.deleting_topics
        )
        return CoordinatorOperation([record])

    @staticmethod
    def _without(
        init_map: InitMap, partitions: Mapping[uuid.UUID, Collection[int]]
    ) -> dict[uuid.UUID, InitMapValue]:
        out = {}
        for topic_id, value in init_map.items():
            left = value.partitions - frozenset(partitions.get(topic_id, ()))
            if left:
                out[topic_id] = replace(value, partitions=left)
        return out

    # -- topics ----------------------------------------------------------------------------------
    def on_loaded(self) -> None:
        """The base's, and topics deleted while the coordinator was away leave the groups'
        share-partitions."""
        super().on_loaded()
        self._cleanup_vanished_topics()

    def _maybe_update_metadata_image(self) -> bool:
        """The base's, and topics that no longer exist leave the groups' share-partitions
        (a write of its own)."""
        changed = super()._maybe_update_metadata_image()
        if changed:
            self._cleanup_vanished_topics()
        return changed

    def _cleanup_vanished_topics(self) -> None:
        gone = {
            topic_id
            for group in self.groups.values()
            for topic_id in group.share_partition_topic_ids()
            if self.image.get_by_id(topic_id) is None
        }
        if gone:
            self._commit(self._cleanup_share_group_state(gone))

    def on_topics_deleted(self, topic_ids: Collection[uuid.UUID]) -> None:
        """Topics were deleted: they leave every group's share-partitions (Kafka's
        ``maybeCleanupShareGroupState``; their state is the share coordinator's to
        delete)."""
        self._commit(self._cleanup_share_group_state(topic_ids))

    def _cleanup_share_group_state(self, topic_ids: Collection[uuid.UUID]) -> CoordinatorOperation:
        op = CoordinatorOperation()
        gone = frozenset(topic_ids)
        for group in self.groups.values():
            if not gone & group.share_partition_topic_ids():
                continue
            op.records.append(
                new_share_group_state_partition_metadata_record(
                    group.group_id,
                    infos({t: v for t, v in group.initializing_topics.items() if t not in gone}),
                    infos({t: v for t, v in group.initialized_topics.items() if t not in gone}),
                    {t: n for t, n in group.deleting_topics.items() if t not in gone},
                )
            )
            log.info(
                "[GroupId %s] Deleted topics %s leave the share group.",
                group.group_id,
                sorted(map(str, gone)),
            )
        return op

    # -- ShareGroupDescribe, ListGroups ---------------------------------------------------------
    def share_group_describe(
        self, group_ids: Iterable[str]
    ) -> list[share_group_describe.DescribedGroup]:
        """One group of a ShareGroupDescribe response per id (without the authorized
        operations: the handler's): INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND
        for a missing group or one of another type."""
        out = []
        for group_id in group_ids:
            try:
                if not self.active:
                    raise api_error(ErrorCode.coordinator_not_available, "The coordinator is not active.")
                if not group_id:
                    raise api_error(ErrorCode.invalid_group_id, "The group id is empty.")
                out.append(self.share_group(group_id).describe(self.assignor.name, self.image))
            except BrokerResponseError as exc:
                out.append(share_group_describe.DescribedGroup(
                    group_id=group_id, error_code=error_code_of(exc).value, error_message=exc.message
                ))  # fmt: skip
        return out

    def list_groups(
        self, states_filter: Collection[str] = (), types_filter: Collection[str] = ()
    ) -> list[list_groups.ListedGroup]:
        """ListGroups' entries for the share groups in one of ``states_filter`` (any
        case; empty: all), none if ``types_filter`` is given without ``share``."""
        if types_filter and GroupType.SHARE not in {GroupType.parse(t) for t in types_filter}:
            return []
        states = {s.strip().lower() for s in states_filter}
        return [
            list_groups.ListedGroup(
                group_id=group_id,
                protocol_type=SHARE_PROTOCOL_TYPE,
                group_state=str(group.state),
                group_type=str(GroupType.SHARE),
            )
            for group_id, group in self.groups.items()
            if not states or str(group.state).lower() in states
        ]

    # -- DeleteGroups --------------------------------------------------------------------------
    def delete_groups(
        self, group_ids: Iterable[str], callback: Callable[[dict[str, ErrorCode]], None]
    ) -> None:
        """DeleteGroups of the share groups among ``group_ids`` (the others are left out
        of the answer: they are the other coordinators'): NON_EMPTY_GROUP unless EMPTY;
        the state of the initialized and initializing share-partitions is deleted first
        (they are recorded as deleting meanwhile; a failure answers its error and keeps
        the group), then the group is tombstoned."""
        self._maybe_update_metadata_image()
        targets = [g for g in dict.fromkeys(group_ids) if g in self.groups]
        results: dict[str, ErrorCode] = {}
        if not targets or not self.active:
            callback(dict.fromkeys(targets, ErrorCode.coordinator_not_available))
            return

        def one_done(group_id: str, error: ErrorCode) -> None:
            results[group_id] = error
            if len(results) == len(targets):
                callback(results)

        for group_id in targets:
            try:
                self.groups[group_id].validate_empty()
            except BrokerResponseError as exc:
                one_done(group_id, error_code_of(exc))
                continue
            log.info("[GroupId %s] deleting the share group", group_id)
            self._delete_share_group(group_id, functools.partial(one_done, group_id))

    def _delete_share_group(self, group_id: str, on_done: Callable[[ErrorCode], None]) -> None:
        group = self.groups[group_id]
        candidates = self._delete_candidates(group)
        op = CoordinatorOperation()
        if group.has_state_partition_metadata:
            deleting = {t: v.topic_name for t, v in candidates.items()}
            op.records.append(
                new_share_group_state_partition_metadata_record(group_id, {}, {}, deleting)
            )

        def deleted(errors: PartitionErrors) -> None:
            error = first_error(errors)
            if error is not ErrorCode.none:
                log.error(
                    "[GroupId %s] deleting the share group's state failed: %s", group_id, error.name
                )
                on_done(error)
            else:
                self._state_reset(group_id, None)
                self._tombstone_share_group(group_id, on_done)

        def written(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                on_done(error)
            elif not candidates:
                self._tombstone_share_group(group_id, on_done)
            else:
                partitions = {t: v.partitions for t, v in candidates.items()}
                delete_state(self.persister, group_id, partitions, deleted)

        self._commit(op, written)

    def _state_reset(self, group_id: str, topic_ids: Collection[uuid.UUID] | None) -> None:
        if self.state_reset is not None:
            self.state_reset(group_id, topic_ids)

    def _delete_candidates(self, group: ShareGroup) -> dict[uuid.UUID, InitMapValue]:
        """Kafka's ``shareGroupBuildPartitionDeleteRequest``: the initialized and
        initializing share-partitions, and every partition of the topics a previous
        deletion left deleting; only of topics that exist (a deleted topic's state went
        with it, and the persister refuses an unknown topic)."""
        candidates = {
            t: v
            for t, v in combine_init_maps(group.initialized_topics, group.initializing_topics).items()
            if self.image.get_by_id(t) is not None
        }
        retry = {}
        for topic_id in group.deleting_topics:
            topic = self.image.get_by_id(topic_id)
            if topic is not None:
                retry[topic_id] = InitMapValue(
                    topic.name, frozenset(range(topic.partitions)), MonotonicMs(-1)
                )
        return combine_init_maps(candidates, retry)

    def _tombstone_share_group(self, group_id: str, on_done: Callable[[ErrorCode], None]) -> None:
        """The group's records as tombstones, if it is still there and still EMPTY."""
        try:
            group = self.share_group(group_id)
            group.validate_empty()
        except BrokerResponseError as exc:
            on_done(error_code_of(exc))
            return
        self._commit(CoordinatorOperation(group.create_group_tombstone_records()), on_done)

    # -- DescribeShareGroupOffsets ------------------------------------------------------------
    def describe_share_group_offsets(
        self,
        group_id: str,
        topics: Sequence[DescribeShareGroupOffsetsRequestTopic] | None,
        log_end_offset: Callable[[uuid.UUID, int], int | None],
        callback: Callable[[DescribeShareGroupOffsetsResponseGroup], None],
    ) -> None:
        """One group of a DescribeShareGroupOffsets response (reference 2.10): each
        share-partition's start offset and leader epoch from the persister's summary,
        and (v1) its lag, the partition's log end offset (``log_end_offset``: None for
        an unknown partition) minus the start offset minus the delivery complete count.
        ``topics`` None: every initialized share-partition of the group. A topic that
        does not exist, or a share-partition without state, has start offset -1; the
        group need not exist."""
        if not self.active:
            callback(DescribeShareGroupOffsetsResponseGroup(
                group_id=group_id, error_code=ErrorCode.coordinator_not_available.value
            ))  # fmt: skip
            return
        requested: dict[uuid.UUID, tuple[str, list[int]]] = {}
        unknown: list[DescribeShareGroupOffsetsResponseTopic] = []
        if topics is None:
            group = self.groups.get(group_id)
            for topic_id, value in ({} if group is None else group.initialized_topics).items():
                topic = self.image.get_by_id(topic_id)
                if topic is not None:
                    requested[topic_id] = (topic.name, sorted(value.partitions))
        else:
            for t in topics:
                meta = self.image.get(t.topic_name)
                if meta is None:
                    unknown.append(DescribeShareGroupOffsetsResponseTopic(
                        topic_name=t.topic_name,
                        partitions=[
                            DescribeShareGroupOffsetsResponsePartition(
                                partition_index=p, start_offset=UNINITIALIZED_START_OFFSET
                            )
                            for p in t.partitions
                        ],
                    ))  # fmt: skip
                else:
                    requested[meta.topic_id] = (t.topic_name, list(t.partitions))
        if not requested:
            callback(DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=unknown))
            return

        def summarized(summaries: Summaries) -> None:
            described = [
                DescribeShareGroupOffsetsResponseTopic(
                    topic_name=name,
                    topic_id=topic_id,
                    partitions=[
                        _described_partition(
                            topic_id, p, summaries.get(topic_id, {}).get(p), log_end_offset
                        )
                        for p in partitions
                    ],
                )
                for topic_id, (name, partitions) in requested.items()
            ]
            callback(
                DescribeShareGroupOffsetsResponseGroup(
                    group_id=group_id, topics=described + unknown
                )
            )

        read_summary(
            self.persister, group_id, {t: frozenset(p) for t, (_, p) in requested.items()}, summarized
        )

    # -- AlterShareGroupOffsets ---------------------------------------------------------------
    def alter_share_group_offsets(
        self,
        group_id: str,
        topics: Sequence[AlterShareGroupOffsetsRequestTopic],
        callback: Callable[[AlterShareGroupOffsetsResponse], None],
    ) -> None:
        """AlterShareGroupOffsets (reference 2.10): the group is created if missing and
        must be EMPTY (NON_EMPTY_GROUP; another type's id: GROUP_ID_NOT_FOUND); unknown
        topics and partitions are UNKNOWN_TOPIC_OR_PARTITION. The others are recorded as
        initializing, then initialized by the persister with the given start offsets at a
        state epoch above every one used before (the group epoch is bumped for it), so
        that share-partitions a leader still caches are fenced and load the new state."""

        def failed(error: ErrorCode, message: str | None = None) -> None:
            callback(AlterShareGroupOffsetsResponse(error_code=error.value, error_message=message))

        try:
            if not self.active:
                raise api_error(ErrorCode.coordinator_not_available, "The coordinator is not active.")
            if not group_id:
                raise api_error(ErrorCode.invalid_group_id, "The group id is empty.")
            group = self._get_or_maybe_create_share_group(group_id, True)
            group.validate_empty()
        except BrokerResponseError as exc:
            failed(error_code_of(exc), exc.message)
            return
        offsets, response = self._alter_offsets_request(topics)
        if not offsets:
            callback(response)
            return
        state_epoch = group.group_epoch + 1
        now = self.clock.milliseconds()
        initializing = {
            t: InitMapValue(self._topic_name(t), frozenset(p), now) for t, p in offsets.items()
        }
        op = CoordinatorOperation([
            new_share_group_epoch_record(group_id, state_epoch, group.metadata_hash),
            self._initializing_record(group, initializing),
        ])  # fmt: skip
        log.info(
            "[GroupId %s] Bumped group epoch to %d to initialize share-partitions at new offsets.",
            group_id, state_epoch,
        )  # fmt: skip

        def persisted(errors: PartitionErrors) -> None:
            if first_error(errors) is not ErrorCode.none:
                callback(_with_partition_errors(response, errors))
                return
            self._state_reset(group_id, list(offsets))
            partitions = {t: frozenset(p) for t, p in offsets.items()}
            self._commit(
                self._initialized_op(group_id, partitions),
                lambda error: callback(response) if error is ErrorCode.none else failed(error),
            )

        def written(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                failed(error)
            else:
                initialize_state(self.persister, group_id, state_epoch, offsets, persisted)

        self._commit(op, written)

    def _alter_offsets_request(
        self, topics: Sequence[AlterShareGroupOffsetsRequestTopic]
    ) -> tuple[dict[uuid.UUID, dict[int, int]], AlterShareGroupOffsetsResponse]:
        """The start offsets to set, topic id -> partition -> offset, and the response
        (UNKNOWN_TOPIC_OR_PARTITION for the partitions that do not exist)."""
        offsets: dict[uuid.UUID, dict[int, int]] = {}
        responses = []
        for t in topics:
            meta = self.image.get(t.topic_name)
            partitions = []
            for p in t.partitions:
                if meta is not None and 0 <= p.partition_index < meta.partitions:
                    offsets.setdefault(meta.topic_id, {})[p.partition_index] = p.start_offset
                    partitions.append(
                        AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index)
                    )
                else:
                    partitions.append(AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.unknown_topic_or_partition.value,
                        error_message=_UNKNOWN_TOPIC_OR_PARTITION,
                    ))  # fmt: skip
            topic_id = uuid.UUID(int=0) if meta is None else meta.topic_id
            responses.append(AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=topic_id, partitions=partitions
            ))  # fmt: skip
        return offsets, AlterShareGroupOffsetsResponse(responses=responses)

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        topic = self.image.get_by_id(topic_id)
        return "<UNKNOWN>" if topic is None else topic.name

    # -- DeleteShareGroupOffsets --------------------------------------------------------------
    def delete_share_group_offsets(
        self,
        group_id: str,
        topic_names: Iterable[str],
        callback: Callable[[DeleteShareGroupOffsetsResponse], None],
    ) -> None:
        """DeleteShareGroupOffsets (reference 2.10): the group must exist as a share group
        (GROUP_ID_NOT_FOUND) and be EMPTY (NON_EMPTY_GROUP); a topic that does not exist
        or has no initialized share-partition is UNKNOWN_TOPIC_OR_PARTITION. The others
        move to deleting, their state is deleted, then they leave the group's
        share-partitions (a topic whose deletion failed stays deleting and is retried by
        the next deletion)."""
        try:
            if not self.active:
                raise api_error(ErrorCode.coordinator_not_available, "The coordinator is not active.")
            if not group_id:
                raise api_error(ErrorCode.invalid_group_id, "The group id is empty.")
            group = self.share_group(group_id)
            group.validate_empty()
        except BrokerResponseError as exc:
            callback(DeleteShareGroupOffsetsResponse(
                error_code=error_code_of(exc).value, error_message=exc.message
            ))  # fmt: skip
            return
        results: list[DeleteShareGroupOffsetsResponseTopic] = []
        initialized = dict(group.initialized_topics)
        deleting = dict(group.deleting_topics)
        to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for name in dict.fromkeys(topic_names):
            meta = self.image.get(name)
            value = None if meta is None else initialized.pop(meta.topic_id, None)
            if meta is not None and value is not None:
                to_delete[meta.topic_id] = (name, value.partitions)
                deleting[meta.topic_id] = name
            elif meta is not None and meta.topic_id in deleting:
                to_delete[meta.topic_id] = (name, frozenset(range(meta.partitions)))
            else:
                message = _UNKNOWN_TOPIC_OR_PARTITION if meta is None else _NO_OFFSETS_TO_DELETE
                results.append(DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, error_code=ErrorCode.unknown_topic_or_partition.value, error_message=message
                ))  # fmt: skip
        op = CoordinatorOperation()
        if group.has_state_partition_metadata:
            op.records.append(new_share_group_state_partition_metadata_record(
                group_id, infos(group.initializing_topics), infos(initialized), deleting
            ))  # fmt: skip

        def answer(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                callback(DeleteShareGroupOffsetsResponse(error_code=error.value))
            else:
                callback(DeleteShareGroupOffsetsResponse(responses=results))

        def deleted(errors: PartitionErrors) -> None:
            done: list[uuid.UUID] = []
            for topic_id, (name, _) in to_delete.items():
                error = first_error({topic_id: errors.get(topic_id, {})})
                results.insert(len(done), DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=topic_id, error_code=error.value,
                    error_message=None if error is ErrorCode.none else error.name,
                ))  # fmt: skip
                if error is ErrorCode.none:
                    done.append(topic_id)
            if done:
                self._state_reset(group_id, done)
            self._commit(self._deleted_op(group_id, done), answer)

        def written(error: ErrorCode) -> None:
            if error is not ErrorCode.none or not to_delete:
                answer(error)
            else:
                partitions = {t: p for t, (_, p) in to_delete.items()}
                delete_state(self.persister, group_id, partitions, deleted)

        self._commit(op, written)

    def _deleted_op(self, group_id: str, topic_ids: Collection[uuid.UUID]) -> CoordinatorOperation:
        """Kafka's ``completeDeleteShareGroupOffsets``: the topics are no longer deleting."""
        group = self.groups.get(group_id)
        if group is None or not topic_ids:
            return CoordinatorOperation()
        deleting = {t: n for t, n in group.deleting_topics.items() if t not in topic_ids}
        record = new_share_group_state_partition_metadata_record(
            group_id, infos(group.initializing_topics), infos(group.initialized_topics), deleting
        )
        return CoordinatorOperation([record])


_UNKNOWN_TOPIC_OR_PARTITION = "This server does not host this topic-partition."
_NO_OFFSETS_TO_DELETE = "There is no offset information to delete."


def _described_partition(
    topic_id: uuid.UUID,
    partition: int,
    summary: PersisterReadSummary | None,
    log_end_offset: Callable[[uuid.UUID, int], int | None],
) -> DescribeShareGroupOffsetsResponsePartition:
    """A share-partition's entry: no lag unless the summary has a start offset and a
    delivery complete count (an error reads as no state: start offset -1, leader epoch
    0); UNKNOWN_TOPIC_OR_PARTITION when the log end offset is unknown."""
    if summary is None or summary.error is not ErrorCode.none:
        return DescribeShareGroupOffsetsResponsePartition(
            partition_index=partition, start_offset=UNINITIALIZED_START_OFFSET, leader_epoch=0
        )
    if (
        summary.start_offset == UNINITIALIZED_START_OFFSET
        or summary.delivery_complete_count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT
    ):
        return DescribeShareGroupOffsetsResponsePartition(
            partition_index=partition,
            start_offset=summary.start_offset,
            leader_epoch=summary.leader_epoch,
        )
    end = log_end_offset(topic_id, partition)
    if end is None:
        return DescribeShareGroupOffsetsResponsePartition(
            partition_index=partition,
            error_code=ErrorCode.unknown_topic_or_partition.value,
            error_message=_UNKNOWN_TOPIC_OR_PARTITION,
        )
    return DescribeShareGroupOffsetsResponsePartition(
        partition_index=partition,
        start_offset=summary.start_offset,
        leader_epoch=summary.leader_epoch,
        lag=end - summary.start_offset - summary.delivery_complete_count,
    )


def _with_partition_errors(
    response: AlterShareGroupOffsetsResponse, errors: PartitionErrors
) -> AlterShareGroupOffsetsResponse:
    """The response with the persister's per-partition errors (Kafka's
    ``buildErrorResponse``): partitions that had no error take the persister's."""
    for topic in response.responses:
        for partition in topic.partitions:
            error = errors.get(topic.topic_id, {}).get(partition.partition_index, ErrorCode.none)
            if partition.error_code == 0 and error is not ErrorCode.none:
                partition.error_code = error.value
                partition.error_message = error.name
    return response
