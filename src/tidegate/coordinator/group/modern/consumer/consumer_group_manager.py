"""The KIP-848 consumer group protocol, sans-IO: the consumer-group half of Kafka's
``GroupMetadataManager`` (``consumerGroupHeartbeat``, ``consumerGroupLeave``, the static
member paths, the session and rebalance timeouts, the regular expressions, replay) and the
request checks of its ``GroupCoordinatorService``.

**Records first** (a heartbeat, a leave, a timeout, a regex resolution computes its
records, appends them, replays them, answers once durable) and **timers** on the timing
wheel are :class:`~tidegate.coordinator.group.modern.group_manager.ModernGroupManager`'s,
shared with the share group coordinator. The timers here: a session timeout per member,
re-armed by every heartbeat (a static member parked at epoch -2 keeps the one it had),
and a rebalance timeout armed when a member enters
UNREVOKED_PARTITIONS, cancelled when it leaves it, fencing the member only if it is still
at that epoch. Both fence the member like a leave (tombstones and an epoch bump).
:meth:`ConsumerGroupManager.on_loaded` arms them for the members a replay brought back,
so a restarted broker resumes its groups where they were.

**Regular expressions** (RE2, whole-name match) are resolved against the topic store after
the heartbeat that needs it, as a write of its own (Kafka resolves them on an executor): a
new regex does not bump the group epoch at once; its resolution does if it matches topics,
or if a member's target still holds what the member subscribed to before (Kafka leaves
those to nobody). A target computed meanwhile (another bump is due) counts the member with
its new regex in the group's subscription type. The image's ``version`` tells when topics
changed: groups then recompute their subscribed topics' metadata hash on their next
heartbeat (a new hash bumps the epoch) and regexes are resolved again.

**Online migration** (reference 1.13, ``group.consumer.migration.policy``): a join
heartbeat to a classic group with members upgrades it (``classic_conversion``); the
classic coordinator hands the JoinGroup, SyncGroup, Heartbeat and LeaveGroup of a
consumer group's id here (``classic_group_join`` and the rest), answered as Kafka's
classic member paths of a consumer group, with a session, a join and a sync timeout per
classic member; the fencing of the last consumer-protocol member downgrades the group,
which the classic coordinator adopts.

Inputs are plain values (:class:`ConsumerGroupHeartbeat`), answers come through a
callback (:class:`ConsumerGroupHeartbeatResult`); the clock, the topic metadata, the
append, the timer, the per-group configs and the classic groups are injected.
"""

from __future__ import annotations

import enum
import functools
import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tidegate.clock import Clock, MonotonicMs
from tidegate.coordinator.group.assignor import CONSUMER_GROUP_ASSIGNORS
from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    PartitionAssignor,
    SubscriptionType,
)
from tidegate.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicJoinGroup,
    JoinCallback,
    JoinResult,
    SyncCallback,
    SyncResult,
)
from tidegate.coordinator.group.group_metadata_manager import classic_group_value
from tidegate.coordinator.group.group_type import GroupType, GroupTypeLookup, no_other_groups
from tidegate.coordinator.group.modern.consumer.classic_conversion import (
    CustomAssignorUserDataError,
    classic_group_from_consumer,
    consumer_group_from_classic,
    consumer_group_records,
    consumer_protocol_assignment,
)
from tidegate.coordinator.group.modern.consumer.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.current_assignment_builder import (
    CurrentAssignmentBuilder,
    OwnedTopicPartitions,
)
from tidegate.coordinator.group.modern.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    CoordinatorRecord,
    RecordType,
    member_with_assignment,
    new_classic_group_record,
    new_classic_group_tombstone_record,
    new_consumer_group_current_assignment_record,
    new_consumer_group_current_assignment_tombstone_record,
    new_consumer_group_epoch_record,
    new_consumer_group_member_subscription_record,
    new_consumer_group_member_subscription_tombstone_record,
    new_consumer_group_regular_expression_record,
    new_consumer_group_regular_expression_tombstone,
    new_consumer_group_target_assignment_record,
    new_consumer_group_target_assignment_tombstone_record,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.consumer.topic_regex import (
    TopicFilter,
    refresh_regular_expressions,
    throw_if_regular_expression_is_invalid,
)
from tidegate.coordinator.group.modern.group_manager import (
    AppendRecords,
    CoordinatorOperation,
    GroupConfigLookup,
    HeartbeatResult,
    ModernGroupManager,
    is_blank,
    no_group_configs,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.modern_group import (
    METADATA_REFRESH_INTERVAL_MS,
    api_error,
    error_code_of,
)
from tidegate.coordinator.group.modern.records import CONSUMER_GROUP_RECORD_TYPES
from tidegate.coordinator.group.modern.subscription import subscribed_topic_ids
from tidegate.coordinator.group.modern.target_assignment_builder import TargetAssignmentBuilder
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import BrokerResponseError, ErrorCode
from tidegate.protocol.consumer_protocol import (
    consumer_protocol_version,
    decode_owned_partitions,
    decode_subscription,
    decode_subscription_rack,
)
from tidegate.protocol.messages import consumer_group_describe
from tidegate.server.timer import SystemTimer
from tidegate.utils import INT32_MAX

if TYPE_CHECKING:
    from tidegate.config import BrokerConfig
    from tidegate.coordinator.group.group_metadata import GroupMetadata
    from tidegate.coordinator.group.modern.records import RecordValue

log = logging.getLogger(__name__)


#: A member leaves (Kafka's ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: A static member leaves for now and comes back under its instance id.
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: From this ConsumerGroupHeartbeat version on, the client generates its member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
#: Regexes are resolved again at most this often (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS).
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000
#: The group configs a consumer group reads (reference 1.15), falling back to the broker's.
CONSUMER_SESSION_TIMEOUT_MS_CONFIG = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS_CONFIG = "consumer.heartbeat.interval.ms"

class ClassicGroups(Protocol):
    """The classic groups a consumer group shares its group ids with (the classic
    coordinator, wired in by the broker)."""

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        """Whether the classic group with this id has no member; None if there is none."""
        ...

    def remove_empty_classic_group(self, group_id: str) -> None:
        """An empty classic group was replaced by a consumer group (its record was
        tombstoned): forget it, keeping its committed offsets."""
        ...

    def classic_group(self, group_id: str) -> GroupMetadata | None:
        """The classic group of this id (an upgrade converts it); None if there is none."""
        ...

    def hand_over_classic_group(self, group_id: str) -> None:
        """The classic group was upgraded to a consumer group (its record tombstoned):
        its parked JoinGroup and SyncGroup answer REBALANCE_IN_PROGRESS, its timers stop,
        the id keeps only its committed offsets there."""
        ...

    def adopt_downgraded_group(self, group: GroupMetadata) -> None:
        """A consumer group was downgraded (its records tombstoned and ``group``'s record
        written in one batch): ``group`` is the classic group it became; take it, arm its
        members' sessions and rebalance."""
        ...


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker's consumer group configs (Kafka's ``GroupCoordinatorConfig``)."""

    #: group.consumer.session.timeout.ms
    session_timeout_ms: int = 45_000
    #: group.consumer.heartbeat.interval.ms
    heartbeat_interval_ms: int = 5_000
    #: group.consumer.max.size
    max_size: int = INT32_MAX
    #: group.consumer.assignors; the first is the default
    assignors: tuple[str, ...] = ("uniform", "range")
    #: group.consumer.regex.refresh.interval.ms (internal)
    regex_refresh_interval_ms: int = 600_000
    #: group.consumer.migration.policy: disabled, downgrade, upgrade or bidirectional
    migration_policy: str = "bidirectional"
    #: group.max.size: the classic group a downgrade makes may not be larger
    classic_max_size: int = INT32_MAX

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> ConsumerGroupConfig:
        return cls(
            session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
            heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
            max_size=config.get("group.consumer.max.size"),
            assignors=tuple(config.get("group.consumer.assignors")),
            regex_refresh_interval_ms=config.get("group.consumer.regex.refresh.interval.ms"),
            migration_policy=str(config.get("group.consumer.migration.policy")).lower(),
            classic_max_size=config.get("group.max.size"),
        )


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    """A ConsumerGroupHeartbeat request (v0/v1 fields) and what the broker knows of its
    sender: the API version, client id and host, and the ACL filter of its principal."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: the partitions the member owns; None = not sent
    topic_partitions: OwnedTopicPartitions | None = None
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""
    #: the topics the member's principal may DESCRIBE (regex resolution); None: no authorizer
    topic_filter: TopicFilter | None = field(default=None, compare=False)


#: The response's fields: ``assignment`` None = not sent (reference 1.5 step 9).
ConsumerGroupHeartbeatResult = HeartbeatResult


HeartbeatCallback = Callable[[ConsumerGroupHeartbeatResult], None]


def throw_if_consumer_group_heartbeat_request_is_invalid(
    request: ConsumerGroupHeartbeat, assignors: Collection[str]
) -> None:
    """INVALID_REQUEST and UNSUPPORTED_ASSIGNOR (reference 1.4; Kafka's
    ``GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid``)."""

    def invalid(message: str) -> BrokerResponseError:
        return api_error(ErrorCode.invalid_request, message)

    epoch = request.member_epoch
    if (
        request.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
        or epoch > 0
        or epoch == LEAVE_GROUP_MEMBER_EPOCH
    ) and not request.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if not request.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if is_blank(request.instance_id):
        raise invalid("InstanceId can't be empty.")
    if is_blank(request.rack_id):
        raise invalid("RackId can't be empty.")
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or len(request.topic_partitions) > 0:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in assignors:
        raise api_error(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )


def _is_subset(owned: OwnedTopicPartitions | None, assigned: Assignment) -> bool:
    """Whether every partition the member reports is assigned to it (None: not)."""
    if owned is None:
        return False
    for topic_id, partitions in owned:
        mine = assigned.get(topic_id)
        if mine is None or not mine.issuperset(partitions):
            return False
    return True


def throw_if_consumer_group_member_epoch_is_invalid(
    member: ConsumerGroupMember, received: int, owned: OwnedTopicPartitions | None
) -> None:
    """Epoch 0 is always accepted (a rejoin, KAFKA-19233); a larger epoch is fenced; a
    smaller one only if it is the previous epoch and the member reports a subset of its
    partitions (the answer with the new epoch was lost)."""
    if received == 0:
        return
    if received > member.member_epoch:
        raise api_error(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not _is_subset(owned, member.assigned_partitions)
    ):
        raise api_error(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )


class ConsumerGroupManager(ModernGroupManager[ConsumerGroup, ConsumerGroupMember]):
    RECORD_TYPES = CONSUMER_GROUP_RECORD_TYPES
    MEMBER_VALUES = (ConsumerGroupMemberMetadataValue, ConsumerGroupCurrentMemberAssignmentValue)
    TIMER_KINDS = ("session", "rebalance", "join", "sync")
    PROTOCOL = "consumer"
    SESSION_TIMEOUT_MS_CONFIG = CONSUMER_SESSION_TIMEOUT_MS_CONFIG
    HEARTBEAT_INTERVAL_MS_CONFIG = CONSUMER_HEARTBEAT_INTERVAL_MS_CONFIG
    config: ConsumerGroupConfig

    def __init__(
        self,
        config: ConsumerGroupConfig,
        *,
        image: MetadataImage,
        append: AppendRecords,
        timer: SystemTimer,
        clock: Clock,
        group_configs: GroupConfigLookup = no_group_configs,
        classic_groups: ClassicGroups,
        assignors: Mapping[str, PartitionAssignor] = CONSUMER_GROUP_ASSIGNORS,
        other_groups: GroupTypeLookup = no_other_groups,
    ) -> None:
        super().__init__(
            config, image=image, append=append, timer=timer, clock=clock, group_configs=group_configs
        )
        self.classic_groups = classic_groups
        #: the type of a group id this manager does not own (share groups): such an id
        #: is not a consumer group (GROUP_ID_NOT_FOUND)
        self.other_groups = other_groups
        unknown = [name for name in config.assignors if name not in assignors]
        if unknown or not config.assignors:
            raise ValueError(f"group.consumer.assignors: unknown or no assignor {unknown}")
        self.assignors = {name: assignors[name] for name in config.assignors}
        self.default_assignor = config.assignors[0]
        self._last_version_with_new_topics = image.version

    # -- lifecycle -------------------------------------------------------------------------
    def _schedule_timers_on_load(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """A member's session timeout, and the rebalance timeout of one revoking
        partitions."""
        super()._schedule_timers_on_load(group, member)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self._schedule_rebalance_timeout(group.group_id, member)

    # -- replay: the consumer group's own records ----------------------------------------------
    def _new_group(self, group_id: str) -> ConsumerGroup:
        return ConsumerGroup(group_id)

    def _member_without_assignment(self, member: ConsumerGroupMember) -> ConsumerGroupMember:
        return member_with_assignment(member, None)

    def _replay_own_value(self, group: ConsumerGroup, key: str, value: RecordValue) -> None:
        assert isinstance(value, ResolvedRegularExpression), value
        group.update_resolved_regular_expression(key, value)

    def _replay_own_tombstone(self, group: ConsumerGroup, t: RecordType, key: str) -> None:
        if t is RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION:
            group.remove_resolved_regular_expression(key)

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------
    def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeat, callback: HeartbeatCallback
    ) -> None:
        """Handle a heartbeat (a join at epoch 0, a leave at -1 or -2); ``callback`` gets
        the answer once what it changed is durable (maybe before this returns)."""

        def handle() -> tuple[CoordinatorOperation, ConsumerGroupHeartbeatResult]:
            throw_if_consumer_group_heartbeat_request_is_invalid(request, self.assignors)
            self._maybe_update_metadata_image()
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._consumer_group_leave(request)
            return self._consumer_group_heartbeat(request)

        self._heartbeat("ConsumerGroupHeartbeat", request.group_id, handle, callback)

    def _consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeat
    ) -> tuple[CoordinatorOperation, ConsumerGroupHeartbeatResult]:
        """Kafka's ``consumerGroupHeartbeat`` (reference 1.5): the member, its subscription,
        the group epoch, the target assignment, the member's reconciliation."""
        op = CoordinatorOperation()
        group_id, member_epoch = req.group_id, req.member_epoch
        create = member_epoch == 0
        group = self._get_or_maybe_create_consumer_group(group_id, create, op)
        self._throw_if_group_is_full(group, req.member_id)
        member_id = req.member_id or str(uuid.uuid4())  # v0: the coordinator names it
        if req.instance_id is None:
            member = group.get_or_maybe_create_member(member_id, create)
            throw_if_consumer_group_member_epoch_is_invalid(
                member, member_epoch, req.topic_partitions
            )
        else:
            member = self._get_or_maybe_subscribe_static_member(group, member_id, req, op)
        if create and member_id not in group.members:
            log.info("[GroupId %s] Member %s joins the consumer group.", group_id, member_id)

        updated = _updated_member(member, req)
        names_changed = self._has_member_subscription_changed(group_id, member, updated, op)
        regex_status = self._maybe_update_regular_expressions(group, member, updated, req, op)
        has_subscription_changed = names_changed or regex_status is not _RegexUpdate.NO_CHANGE
        group_epoch = group.group_epoch
        sub_type: SubscriptionType | None = None
        bump = (
            group_epoch == 0  # a new group leaves epoch 0 at once
            or names_changed
            or regex_status is _RegexUpdate.UPDATED_AND_RESOLVED
        )
        if bump or group.has_metadata_expired(self.clock.milliseconds()):
            group_epoch, sub_type = self._update_subscription_metadata(
                group, bump, member, updated, op
            )
        if group_epoch > group.assignment_epoch:
            if sub_type is None and updated != member:
                # The group's type does not count this member's change yet: a member that
                # joins, or takes a new regex, without a bump (the regex is unresolved)
                # while an earlier bump awaits its target. Kafka passes the group's type
                # here; an assignor told HOMOGENEOUS would give this member the topics of
                # another, which it never takes (reconciliation keeps to its own).
                sub_type = group.compute_subscription_type(member, updated)
            target = self._update_target_assignment(
                group, group_epoch, member, updated, sub_type or group.subscription_type, op
            )
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_assignment_of(updated.member_id, updated.instance_id)
        updated = self._maybe_reconcile(
            group, updated, target_epoch, target, has_subscription_changed, req.topic_partitions, op
        )
        op.after.append(lambda: self._schedule_session_timeout(group_id, member_id))

        full = (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.topic_partitions is not None
        )
        send_assignment = (
            member_epoch == 0
            or full
            or (
                updated.assigned_partitions is not member.assigned_partitions
                and updated.assigned_partitions != member.assigned_partitions
            )
        )
        return op, ConsumerGroupHeartbeatResult(
            member_id=updated.member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms(group_id),
            assignment=updated.assigned_partitions if send_assignment else None,
        )

    def _get_or_maybe_create_consumer_group(
        self, group_id: str, create: bool, op: CoordinatorOperation
    ) -> ConsumerGroup:
        """The group; a new one (replayed into being by its records) if ``create``. An
        empty classic group of that id is replaced; a classic group with members is
        upgraded when the migration policy allows it (reference 1.13), else GNF."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        self._throw_if_other_group(group_id)
        classic = self.classic_groups
        classic_empty = classic.classic_group_is_empty(group_id)
        if classic_empty is None:
            if not create:
                raise api_error(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id)
        if create and classic_empty:
            op.records.append(new_classic_group_tombstone_record(group_id))
            op.after.append(lambda: classic.remove_empty_classic_group(group_id))
            log.info("[GroupId %s] Converted the empty classic group to a consumer group.", group_id)
            return ConsumerGroup(group_id)
        if create:
            upgraded = self._maybe_upgrade_classic_group(group_id, op)
            if upgraded is not None:
                return upgraded
        raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    # -- online migration (reference 1.13) ---------------------------------------------------------
    def _maybe_upgrade_classic_group(
        self, group_id: str, op: CoordinatorOperation
    ) -> ConsumerGroup | None:
        """Kafka's ``validateOnlineUpgrade`` and ``convertToConsumerGroup``: the classic
        group's record is tombstoned and the consumer group it becomes written (its
        members keep the classic protocol, their assignment and generation); None if the
        policy, the protocol type or the size forbid it. GNF if a member's embedded
        protocol does not parse."""
        classic = self.classic_groups.classic_group(group_id)
        if classic is None:
            return None
        if not self.config.upgrade_enabled:
            log.info("[GroupId %s] Cannot upgrade the classic group: online upgrade disabled.", group_id)
            return None
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("[GroupId %s] Cannot upgrade the classic group: protocol type %s.",
                     group_id, classic.protocol_type)  # fmt: skip
            return None
        if len(classic.members) > self.config.max_size:
            log.info("[GroupId %s] Cannot upgrade the classic group: too many members.", group_id)
            return None
        try:
            group = consumer_group_from_classic(classic, self.image)
        except CustomAssignorUserDataError as exc:
            log.warning("[GroupId %s] Cannot upgrade the classic group: %s.", group_id, exc)
            raise api_error(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {group_id} to consumer group because an unsupported "
                "custom assignor is in use. Please refer to the documentation or switch to a "
                "default assignor before re-attempting the upgrade.",
            ) from exc
        except ValueError as exc:
            raise api_error(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade the classic group {group_id} to consumer group because the "
                "embedded consumer protocol is malformed.",
            ) from exc
        op.records.append(new_classic_group_tombstone_record(group_id))
        op.records.extend(consumer_group_records(group))
        members = list(group.members)
        classic_groups = self.classic_groups

        def hand_over() -> None:
            classic_groups.hand_over_classic_group(group_id)
            for member_id in members:
                self._schedule_session_timeout(group_id, member_id)

        op.after.append(hand_over)
        log.info("[GroupId %s] Upgrading the classic group (%d member(s)) to a consumer group.",
                 group_id, len(members))  # fmt: skip
        return group

    def _downgrade_operation(
        self, group: ConsumerGroup, leaving: ConsumerGroupMember
    ) -> CoordinatorOperation | None:
        """Kafka's ``validateOnlineDowngradeWithFencedMember`` and ``convertToClassicGroup``:
        when ``leaving`` is the last member speaking the consumer protocol, classic
        members are left, the policy allows it and they fit in group.max.size, the
        group's records are tombstoned and the classic group it becomes written, in one
        batch; the classic coordinator then takes it, and it rebalances. None: no
        downgrade."""
        group_id = group.group_id
        if not group.all_members_use_classic_protocol_except(leaving.member_id):
            return None
        if len(group.members) <= 1:
            return None
        if not self.config.downgrade_enabled:
            log.info("[GroupId %s] Cannot downgrade the consumer group: online downgrade disabled.", group_id)
            return None
        if len(group.members) - 1 > self.config.classic_max_size:
            log.info("[GroupId %s] Cannot downgrade the consumer group: larger than group.max.size.", group_id)
            return None
        try:
            classic = classic_group_from_consumer(group, self.image, self.clock, [leaving.member_id])
        except ValueError as exc:
            log.warning("[GroupId %s] Cannot downgrade the consumer group: %s", group_id, exc)
            return None
        # one batch, as Kafka's records of convertToClassicGroup: the consumer group's
        # tombstones and the classic group's record (a crash leaves one group or the other)
        assignments = {m.member_id: m.assignment for m in classic.members.values()}
        stored = classic_group_value(classic, assignments, self.clock.wall_milliseconds())
        op = CoordinatorOperation([*group.create_group_tombstone_records(), new_classic_group_record(group_id, stored)])
        members = list(group.members)
        classic_groups = self.classic_groups

        def hand_over() -> None:
            for member_id in members:
                self._cancel_timers(group_id, member_id)
            classic_groups.adopt_downgraded_group(classic)

        op.after.append(hand_over)
        log.info("[GroupId %s] Downgrading the consumer group to a classic group (member %s left).",
                 group_id, leaving.member_id)  # fmt: skip
        return op

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """An existing consumer group (Kafka's ``consumerGroup``): GROUP_ID_NOT_FOUND if
        there is none or the id is a classic group's (the offset APIs' check)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        self._throw_if_other_group(group_id)
        if self.classic_groups.classic_group_is_empty(group_id) is not None:
            raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} not found.")

    def _throw_if_other_group(self, group_id: str) -> None:
        """GROUP_ID_NOT_FOUND for a share group's id (reference 1.14, cross-type)."""
        if self.other_groups(group_id) is GroupType.SHARE:
            raise api_error(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    def group_type(self, group_id: str) -> GroupType | None:
        """CONSUMER if ``group_id`` is one of this manager's groups (the
        :data:`~tidegate.coordinator.group.group_type.GroupTypeLookup` it offers the
        other coordinators)."""
        return GroupType.CONSUMER if group_id in self.groups else None

    def _get_or_maybe_subscribe_static_member(
        self, group: ConsumerGroup, member_id: str, req: ConsumerGroupHeartbeat, op: CoordinatorOperation
    ) -> ConsumerGroupMember:
        """Static membership (reference 1.9): a new instance id makes a new member; one
        held by a member parked at -2 (or speaking the classic protocol) is taken over
        under the new member id, with its assignment; an active holder fences the
        newcomer (UNRELEASED_INSTANCE_ID). After the join, the instance id must be known
        (UNKNOWN_MEMBER_ID) and held by this member id (FENCED_INSTANCE_ID)."""
        instance_id = req.instance_id
        existing = group.static_member(instance_id)
        if req.member_epoch == 0:
            if existing is None:
                return group.get_or_maybe_create_member(member_id, True)
            if not existing.use_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise api_error(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {instance_id} cannot join the "
                    f"group because the instance id is owned by {existing.member_id} member.",
                )
            new = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._replace_member(op, group, existing, new)
            log.info(
                "[GroupId %s] Static member with instance id %s re-joins the consumer group. "
                "Created a new member %s to replace the existing member %s.",
                group.group_id, instance_id, member_id, existing.member_id,
            )  # fmt: skip
            return new
        member = _throw_if_static_member_is_unknown_or_fenced(existing, member_id, instance_id)
        throw_if_consumer_group_member_epoch_is_invalid(
            member, req.member_epoch, req.topic_partitions
        )
        return member

    def _replace_member(
        self, op: CoordinatorOperation, group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember
    ) -> None:
        group_id = group.group_id
        _remove_member_records(op.records, group_id, old.member_id)
        op.records.append(new_consumer_group_member_subscription_record(group_id, new))
        op.records.append(
            new_consumer_group_target_assignment_record(
                group_id, new.member_id, group.target_assignment.get(old.member_id, EMPTY_ASSIGNMENT)
            )
        )
        op.records.append(new_consumer_group_current_assignment_record(group_id, new))
        if old.member_id != new.member_id:
            op.after.append(lambda: self._cancel_timers(group_id, old.member_id))

    def _has_member_subscription_changed(
        self,
        group_id: str,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        op: CoordinatorOperation,
    ) -> bool:
        """Write the member's record if it changed; whether its topic names did."""
        if updated is not member and updated != member:
            op.records.append(new_consumer_group_member_subscription_record(group_id, updated))
            return updated.subscribed_topic_names != member.subscribed_topic_names
        return False

    def _maybe_update_regular_expressions(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        req: ConsumerGroupHeartbeat,
        op: CoordinatorOperation,
    ) -> _RegexUpdate:
        """Kafka's ``maybeUpdateRegularExpressions``: a changed regex is checked (a new
        one must compile: INVALID_REGULAR_EXPRESSION), a regex left by its last member is
        tombstoned, and the group's regexes are resolved again (after this write) when
        one is unresolved, topics were created since, or the refresh interval passed --
        at most every 10 s."""
        group_id = group.group_id
        old_regex = member.subscribed_topic_regex or ""
        new_regex = updated.subscribed_topic_regex or ""
        require_refresh = False
        status = _RegexUpdate.NO_CHANGE
        if old_regex != new_regex:
            status = _RegexUpdate.UPDATED
            if old_regex and group.num_subscribed_members(old_regex) == 1:
                op.records.append(new_consumer_group_regular_expression_tombstone(group_id, old_regex))
            if new_regex:
                if group.num_subscribed_members(new_regex) == 0:
                    throw_if_regular_expression_is_invalid(new_regex)
                    require_refresh = True
                elif new_regex in group.resolved_regular_expressions:
                    status = _RegexUpdate.UPDATED_AND_RESOLVED
            elif old_regex:
                status = _RegexUpdate.UPDATED_AND_RESOLVED

        if not require_refresh and not group.subscribed_regular_expressions:
            return status
        now = self.clock.wall_milliseconds()
        last_refresh = group.last_resolved_regular_expression_refresh_time_ms()
        if now <= last_refresh + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
            return status
        regexes = group.compute_subscribed_regular_expressions(member, updated)
        require_refresh = (
            require_refresh
            or len(regexes) != len(group.resolved_regular_expressions)
            or group.last_resolved_regular_expression_version() < self._last_version_with_new_topics
            or now > last_refresh + self.config.regex_refresh_interval_ms
        )
        if require_refresh and regexes:
            names, member_id, topic_filter = tuple(regexes), updated.member_id, req.topic_filter
            op.after.append(
                lambda: self._refresh_regular_expressions(group_id, member_id, names, topic_filter)
            )
        return status

    def _update_subscription_metadata(
        self,
        group: ConsumerGroup,
        bump: bool,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        op: CoordinatorOperation,
    ) -> tuple[int, SubscriptionType]:
        """The group's subscription as the heartbeat leaves it: its metadata hash (a new
        hash bumps the epoch), subscription type and epoch."""
        names = group.compute_subscribed_topic_names(member, updated)
        metadata_hash = self._metadata_hash(names)
        sub_type = group.compute_subscription_type(member, updated, names)
        group_epoch = group.group_epoch
        if bump or metadata_hash != group.metadata_hash:
            group_epoch += 1
            op.records.append(new_consumer_group_epoch_record(group.group_id, group_epoch, metadata_hash))
            self._log_bump(group.group_id, group_epoch, metadata_hash)
        group.set_metadata_refresh_deadline(
            MonotonicMs(self.clock.milliseconds() + METADATA_REFRESH_INTERVAL_MS), group_epoch
        )
        return group_epoch, sub_type

    def _update_target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        sub_type: SubscriptionType,
        op: CoordinatorOperation,
    ) -> Assignment:
        """A new target assignment by the group's preferred assignor; its changed member
        targets and epoch are written. An assignor failure answers UNKNOWN_SERVER_ERROR."""
        name = group.compute_preferred_server_assignor(member, updated) or self.default_assignor
        assignor = self.assignors.get(name) or self.assignors[self.default_assignor]
        builder = TargetAssignmentBuilder(
            group.group_id,
            group_epoch,
            assignor,
            members=group.members,
            target_assignment=group.target_assignment,
            subscription_type=sub_type,
            metadata_image=self.image,
            static_members=group.static_members,
            resolved_regular_expressions=group.resolved_regular_expressions,
        ).add_or_update_member(updated.member_id, updated)
        previous = group.static_member_id(updated.instance_id)
        if previous is not None and previous != updated.member_id:
            builder.remove_member(previous)  # the static member it replaces
        return self._build_target_assignment(group, builder, name, updated.member_id, op)

    def _maybe_reconcile(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        has_subscription_changed: bool,
        owned: OwnedTopicPartitions | None,
        op: CoordinatorOperation,
    ) -> ConsumerGroupMember:
        """One reconciliation step; its record if the member changed, and its rebalance
        timeout armed in UNREVOKED_PARTITIONS, cancelled otherwise."""
        if not has_subscription_changed and member.is_reconciled_to(target_epoch):
            return member
        updated = CurrentAssignmentBuilder(
            member,
            target_assignment_epoch=target_epoch,
            target_assignment=target,
            current_partition_epoch=group.current_partition_epoch,
            metadata_image=self.image,
            owned_topic_partitions=owned,
            has_subscription_changed=has_subscription_changed,
            resolved_regular_expressions=group.resolved_regular_expressions,
        ).build()
        if updated != member:
            group_id = group.group_id
            op.records.append(new_consumer_group_current_assignment_record(group_id, updated))
            if not updated.use_classic_protocol:
                if updated.state is MemberState.UNREVOKED_PARTITIONS:
                    op.after.append(lambda: self._schedule_rebalance_timeout(group_id, updated))
                else:
                    op.after.append(lambda: self._cancel(("rebalance", group_id, updated.member_id)))
        return updated

    # -- classic-protocol members of a consumer group (reference 1.13) ---------------------------
    def has_members(self, group_id: str) -> bool:
        """Whether a consumer group of this id has members (JoinGroup then joins it as a
        classic-protocol member; an empty one is converted to a classic group)."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def delete_empty_consumer_group(self, group_id: str) -> None:
        """A JoinGroup converts an empty consumer group to a classic group (Kafka's
        ``maybeDeleteEmptyConsumerGroup``): its records are tombstoned, its offsets stay."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            return
        log.info("[GroupId %s] Converting the empty consumer group to a classic group.", group_id)
        self._commit(CoordinatorOperation(group.create_group_tombstone_records()))

    def classic_group_join(self, request: ClassicJoinGroup, callback: JoinCallback) -> None:
        """A JoinGroup to a non-empty consumer group (Kafka's
        ``classicGroupJoinToConsumerGroup``), answered at once (once durable) with the
        member's epoch as the generation and no leader: the broker assigns."""
        try:
            if not self.active:
                raise api_error(ErrorCode.coordinator_not_available, "The coordinator is not active.")
            self._maybe_update_metadata_image()
            op, result = self._classic_group_join(request)
        except BrokerResponseError as exc:
            callback(JoinResult(request.member_id, error_code_of(exc)))
            return

        def done(error: ErrorCode) -> None:
            callback(result if error is ErrorCode.none else JoinResult(request.member_id, error))

        self._commit(op, done)

    def _classic_group_join(self, req: ClassicJoinGroup) -> tuple[CoordinatorOperation, JoinResult]:
        """The member from its embedded subscription, the group epoch, the target
        assignment, the member's reconciliation against the partitions it says it owns."""
        op = CoordinatorOperation()
        group_id = req.group_id
        group = self.consumer_group(group_id)
        if not self.config.upgrade_enabled and not self.config.downgrade_enabled:
            raise api_error(
                ErrorCode.inconsistent_group_protocol,
                f"Group {group_id} is a consumer group and online migration is disabled.",
            )
        is_unknown = not req.member_id
        member_id = req.member_id or str(uuid.uuid4())
        self._throw_if_group_is_full(group, member_id)
        if not req.protocols or not group.supports_classic_protocols(
            req.protocol_type, (name for name, _ in req.protocols)
        ):
            raise api_error(
                ErrorCode.inconsistent_group_protocol, f"Member {member_id}'s protocols are not supported."
            )
        if is_unknown and req.instance_id is None and req.require_known_member_id:
            return op, JoinResult(member_id, ErrorCode.member_id_required)
        member = self._classic_member(group, member_id, req, is_unknown, op)
        metadata = req.protocols[0][1]
        try:
            topics = decode_subscription(metadata)
            owned = decode_owned_partitions(metadata)
            rack = decode_subscription_rack(metadata)
        except ValueError as exc:
            raise api_error(ErrorCode.inconsistent_group_protocol, f"Malformed subscription: {exc}") from exc
        updated = _updated_classic_member(member, req, topics, rack)
        names_changed = self._has_member_subscription_changed(group_id, member, updated, op)
        group_epoch, sub_type = group.group_epoch, None
        if names_changed or group.has_metadata_expired(self.clock.milliseconds()):
            group_epoch, sub_type = self._update_subscription_metadata(group, names_changed, member, updated, op)
        if group_epoch > group.assignment_epoch:
            target = self._update_target_assignment(
                group, group_epoch, member, updated,
                sub_type or group.compute_subscription_type(member, updated), op,
            )  # fmt: skip
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_assignment_of(updated.member_id, updated.instance_id)
        updated = self._maybe_reconcile(
            group, updated, target_epoch, target, names_changed, self._by_topic_id(owned), op
        )
        new_id, timeout_ms = updated.member_id, req.rebalance_timeout_ms

        def arm() -> None:
            self._cancel(("join", group_id, new_id))
            self._schedule_session_timeout(group_id, new_id)
            self._schedule(
                ("sync", group_id, new_id),
                timeout_ms,
                lambda: self._fence_member_operation(group_id, new_id, "the member failed to sync within timeout"),
            )

        op.after.append(arm)
        return op, JoinResult(
            new_id,
            ErrorCode.none,
            updated.member_epoch,
            CONSUMER_PROTOCOL_TYPE,
            req.protocols[0][0],
        )

    def _by_topic_id(self, partitions: Iterable[tuple[str, int]]) -> OwnedTopicPartitions:
        """(topic name, partition) pairs by topic id; topics that no longer exist dropped."""
        by_id: dict[uuid.UUID, list[int]] = {}
        for name, partition in partitions:
            topic = self.image.get(name)
            if topic is not None:
                by_id.setdefault(topic.topic_id, []).append(partition)
        return list(by_id.items())

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, req: ClassicJoinGroup, is_unknown: bool,
        op: CoordinatorOperation,
    ) -> ConsumerGroupMember:  # fmt: skip
        """The joining member: a dynamic one is found or created; a static one joining
        with no member id takes over its instance id's member (the classic protocol
        fences the old one), else must hold its instance id."""
        if req.instance_id is None:
            return group.get_or_maybe_create_member(member_id, True)
        existing = group.static_member(req.instance_id)
        if not is_unknown:
            return _throw_if_static_member_is_unknown_or_fenced(existing, member_id, req.instance_id)
        if existing is None:
            return group.get_or_maybe_create_member(member_id, True)
        new = existing.replace(member_id=member_id)
        self._replace_member(op, group, existing, new)
        log.info(
            "[GroupId %s] Static member with instance id %s re-joins the consumer group with "
            "the classic protocol as %s, replacing %s.",
            group.group_id, req.instance_id, member_id, existing.member_id,
        )  # fmt: skip
        return new

    def _classic_member_of(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> tuple[ConsumerGroup, ConsumerGroupMember]:
        """Kafka's ``validateConsumerGroupMember`` for SyncGroup and Heartbeat: the member
        (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), speaking the classic protocol
        (UNKNOWN_MEMBER_ID), at this generation (ILLEGAL_GENERATION)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            raise api_error(ErrorCode.unknown_member_id, f"Group {group_id} not found.")
        if instance_id is None:
            member = group.member(member_id)
        else:
            member = _throw_if_static_member_is_unknown_or_fenced(
                group.static_member(instance_id), member_id, instance_id
            )
        if not member.use_classic_protocol:
            raise api_error(ErrorCode.unknown_member_id, f"Member {member_id} does not use the classic protocol.")
        if member.member_epoch != generation_id:
            raise api_error(
                ErrorCode.illegal_generation,
                f"The request generation id {generation_id} is not equal to the member epoch "
                f"{member.member_epoch} of member {member_id}.",
            )
        return group, member

    def _schedule_join_timeout_if_absent(self, group_id: str, member: ConsumerGroupMember) -> None:
        """A classic member told to rejoin must do so within its rebalance timeout."""
        key = ("join", group_id, member.member_id)
        if key not in self._timers:
            member_id = member.member_id
            self._schedule(
                key,
                member.rebalance_timeout_ms,
                lambda: self._fence_member_operation(
                    group_id, member_id, "the classic member failed to join within the rebalance timeout"
                ),
            )

    def classic_group_sync(
        self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
        protocol_name: str | None, instance_id: str | None, callback: SyncCallback,
    ) -> None:  # fmt: skip
        """A SyncGroup of a classic member of a consumer group (Kafka's
        ``classicGroupSyncToConsumerGroup``): its assigned partitions, or
        REBALANCE_IN_PROGRESS when the group moved on and it must rejoin."""
        try:
            group, member = self._classic_member_of(group_id, member_id, instance_id, generation_id)
            metadata = member.classic_member_metadata
            assert metadata is not None
            name = metadata.supported_protocols[0].name if metadata.supported_protocols else None
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != name
            ):
                raise api_error(
                    ErrorCode.inconsistent_group_protocol,
                    f"The protocol of member {member_id} is not the group's.",
                )
            self._throw_if_rebalance_in_progress(group, member)
        except BrokerResponseError as exc:
            callback(SyncResult(error_code_of(exc)))
            return
        # in the version of the member's first protocol's subscription (Kafka's
        # prepareAssignment); a JoinGroup parsed it, an upgrade may not have (then v0)
        first = metadata.supported_protocols[0].metadata if metadata.supported_protocols else b""
        try:
            version = consumer_protocol_version(first)
        except ValueError:
            version = 0
        assignment = consumer_protocol_assignment(member.assigned_partitions, self.image, version)

        def answer() -> None:
            self._cancel(("sync", group_id, member_id))
            self._schedule_session_timeout(group_id, member_id)
            callback(SyncResult(ErrorCode.none, protocol_type or CONSUMER_PROTOCOL_TYPE, protocol_name or name, assignment))

        self._commit(CoordinatorOperation(after=[answer]))

    def _throw_if_rebalance_in_progress(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """REBALANCE_IN_PROGRESS (and a join timeout) when the group epoch passed the
        member's, unless it is revoking partitions (its rejoin already happened)."""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join_timeout_if_absent(group.group_id, member)
            raise api_error(
                ErrorCode.rebalance_in_progress,
                f"A new rebalance is triggered in group {group.group_id} and member "
                f"{member.member_id} should rejoin to catch up.",
            )

    def classic_group_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """A Heartbeat of a classic member of a consumer group (Kafka's
        ``classicGroupHeartbeatToConsumerGroup``): re-arms its session; REBALANCE_IN_PROGRESS
        when it must rejoin (a newer group epoch, partitions to revoke, or partitions it
        waited for released)."""
        try:
            group, member = self._classic_member_of(group_id, member_id, instance_id, generation_id)
        except BrokerResponseError as exc:
            return error_code_of(exc)
        self._schedule_session_timeout(group_id, member.member_id)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)
            )
        ):
            self._schedule_join_timeout_if_absent(group_id, member)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def classic_group_leave(
        self, group_id: str, leaving: Sequence[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """A LeaveGroup of classic members of a consumer group (Kafka's
        ``classicGroupLeaveToConsumerGroup``): each is fenced (one group epoch bump);
        ``leaving`` is (member id, instance id, reason)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i, _ in leaving]
        out: list[tuple[str, str | None, ErrorCode]] = []
        members: list[ConsumerGroupMember] = []
        for member_id, instance_id, reason in leaving:
            try:
                if instance_id is None:
                    member = group.member(member_id)
                else:
                    static = group.static_member(instance_id)
                    if static is None:
                        raise api_error(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                    if member_id:  # an admin removes a static member by its instance id alone
                        _throw_if_static_member_is_unknown_or_fenced(static, member_id, instance_id)
                    member = static
                if not member.use_classic_protocol:
                    raise api_error(ErrorCode.unknown_member_id, f"Member {member_id} does not use the classic protocol.")
            except BrokerResponseError as exc:
                out.append((member_id, instance_id, error_code_of(exc)))
                continue
            log.info("[GroupId %s] Member %s left the consumer group through LeaveGroup; reason: %s",
                     group_id, member.member_id, reason or "not provided")  # fmt: skip
            members.append(member)
            out.append((member.member_id, instance_id, ErrorCode.none))
        if members:
            self._maybe_update_metadata_image()
            self._commit(self._fence_members(group, members))
        return ErrorCode.none, out

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        """A classic member's session timeout is its own (JoinGroup's)."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        metadata = None if member is None else member.classic_member_metadata
        if metadata is None:
            super()._schedule_session_timeout(group_id, member_id)
            return
        self._schedule(
            ("session", group_id, member_id),
            metadata.session_timeout_ms,
            lambda: self._fence_member_operation(group_id, member_id, "the classic member session expired"),
        )

    # -- leaving and fencing -------------------------------------------------------------------
    def _consumer_group_leave(
        self, req: ConsumerGroupHeartbeat
    ) -> tuple[CoordinatorOperation, ConsumerGroupHeartbeatResult]:
        """Epoch -1 (leave) or -2 (a static member leaves for now; reference 1.9)."""
        group = self.consumer_group(req.group_id)
        result = ConsumerGroupHeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is None:
            member = group.member(req.member_id)
            log.info("[GroupId %s] Member %s left the consumer group.", group.group_id, member.member_id)
            return self._fence_members(group, [member]), result
        member = _throw_if_static_member_is_unknown_or_fenced(
            group.static_member(req.instance_id), req.member_id, req.instance_id
        )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info(
                "[GroupId %s] Static member %s with instance id %s temporarily left the group.",
                group.group_id, member.member_id, req.instance_id,
            )  # fmt: skip
            parked = member.replace(
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
            )
            op = CoordinatorOperation([new_consumer_group_current_assignment_record(group.group_id, parked)])
            return op, result
        log.info(
            "[GroupId %s] Static member %s with instance id %s left the consumer group.",
            group.group_id, member.member_id, req.instance_id,
        )  # fmt: skip
        return self._fence_members(group, [member]), result

    def _fence_members(
        self, group: ConsumerGroup, members: Sequence[ConsumerGroupMember]
    ) -> CoordinatorOperation:
        """Their records and the regexes only they used are tombstoned, the group epoch
        is bumped, their timers cancelled; or, when the one leaving is the last member
        speaking the consumer protocol, the group is downgraded (reference 1.13)."""
        op = CoordinatorOperation()
        if not members:
            return op
        if len(members) == 1:
            downgrade = self._downgrade_operation(group, members[0])
            if downgrade is not None:
                return downgrade
        group_id = group.group_id
        for member in members:
            _remove_member_records(op.records, group_id, member.member_id)
        deleted = self._maybe_delete_resolved_regular_expressions(op, group, members)
        names = group.compute_subscribed_topic_names_without_deleted_members(members, deleted)
        metadata_hash = self._metadata_hash(names)
        group_epoch = group.group_epoch + 1
        op.records.append(new_consumer_group_epoch_record(group_id, group_epoch, metadata_hash))
        self._log_bump(group_id, group_epoch, metadata_hash)
        for member in members:
            op.after.append(functools.partial(self._cancel_timers, group_id, member.member_id))
        return op

    @staticmethod
    def _maybe_delete_resolved_regular_expressions(
        op: CoordinatorOperation, group: ConsumerGroup, members: Iterable[ConsumerGroupMember]
    ) -> list[str]:
        counts: dict[str, int] = {}
        for member in members:
            if member.subscribed_topic_regex:
                regex = member.subscribed_topic_regex
                counts[regex] = counts.get(regex, 0) + 1
        deleted = []
        for regex, count in counts.items():
            if group.num_subscribed_members(regex) == count:
                op.records.append(new_consumer_group_regular_expression_tombstone(group.group_id, regex))
                deleted.append(regex)
        return deleted

    # -- timers --------------------------------------------------------------------------------
    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch, timeout_ms = member.member_id, member.member_epoch, member.rebalance_timeout_ms

        def expire() -> None:
            group = self.groups.get(group_id)
            current = None if group is None else group.members.get(member_id)
            if current is not None and current.member_epoch == epoch:
                self._fence_member_operation(
                    group_id,
                    member_id,
                    f"it failed to transition from epoch {epoch} within {timeout_ms}ms",
                )

        self._schedule(("rebalance", group_id, member_id), timeout_ms, expire)

    # -- topics and regular expressions ----------------------------------------------------------
    def _maybe_update_metadata_image(self) -> bool:
        """The base's, and the regexes are resolved again when topics changed."""
        changed = super()._maybe_update_metadata_image()
        if changed:
            self._last_version_with_new_topics = self.image.version
        return changed

    def _refresh_regular_expressions(
        self,
        group_id: str,
        member_id: str,
        regexes: Collection[str],
        topic_filter: TopicFilter | None,
    ) -> None:
        self._maybe_update_metadata_image()
        resolved = refresh_regular_expressions(
            group_id,
            regexes,
            list(self.image.topic_names()),
            version=self.image.version,
            timestamp_ms=self.clock.wall_milliseconds(),
            topic_filter=topic_filter,
        )
        self._commit(self._handle_regular_expressions_result(group_id, member_id, resolved))

    def _handle_regular_expressions_result(
        self, group_id: str, member_id: str, resolved: Mapping[str, ResolvedRegularExpression]
    ) -> CoordinatorOperation:
        """Write the regexes' resolutions; a changed one (a first one that matches
        nothing only if it leaves a target stale), or a new metadata hash, bumps the
        group epoch."""
        op = CoordinatorOperation()
        group = self.groups.get(group_id)
        if group is None:
            return op
        still = {r: v for r, v in resolved.items() if group.num_subscribed_members(r) > 0}
        bump = False
        for regex, new in still.items():
            old = group.resolved_regular_expressions.get(regex)
            if old is not None:
                bump = bump or old.topics != new.topics
            else:
                bump = bump or bool(new.topics) or self._has_stale_target(group, regex, new)
            op.records.append(new_consumer_group_regular_expression_record(group_id, regex, new))
        metadata_hash = self._metadata_hash(group.compute_subscribed_topic_names_with_regexes(still))
        if bump or metadata_hash != group.metadata_hash:
            group_epoch = group.group_epoch + 1
            op.records.append(new_consumer_group_epoch_record(group_id, group_epoch, metadata_hash))
            self._log_bump(group_id, group_epoch, metadata_hash)
            group.set_metadata_refresh_deadline(
                MonotonicMs(self.clock.milliseconds() + METADATA_REFRESH_INTERVAL_MS), group_epoch
            )
        log.debug("[GroupId %s] regexes resolved for member %s: %s", group_id, member_id, still)
        return op

    def _has_stale_target(
        self, group: ConsumerGroup, regex: str, resolved: ResolvedRegularExpression
    ) -> bool:
        """Whether a member of ``regex``, first resolved (to no topics: else Kafka bumps
        anyway), has a target outside its subscription. It took the regex without a bump
        (it was unresolved) and gave up what it subscribed to before, which its target
        still holds: without a bump nobody takes it. Kafka compares the resolution with an
        empty one, sees no change and leaves those partitions unassigned."""
        for member in group.members.values():
            if member.subscribed_topic_regex != regex:
                continue
            target = group.target_assignment.get(member.member_id)
            if target and not target.keys() <= subscribed_topic_ids(
                member, {regex: resolved}, self.image
            ):
                return True
        return False

    # -- ConsumerGroupDescribe, ListGroups, DeleteGroups ------------------------------------------
    def consumer_group_describe(
        self, group_ids: Iterable[str]
    ) -> list[consumer_group_describe.DescribedGroup]:
        """One group of a ConsumerGroupDescribe response per id (without the authorized
        operations: the handler's); GROUP_ID_NOT_FOUND for a missing group or one of
        another type."""
        out = []
        for group_id in group_ids:
            try:
                group = self.consumer_group(group_id)
            except BrokerResponseError as exc:
                out.append(consumer_group_describe.DescribedGroup(
                    group_id=group_id, error_code=error_code_of(exc), error_message=exc.message
                ))  # fmt: skip
                continue
            out.append(group.describe(self.default_assignor, self.image))
        return out

    def list_groups(self, states: Collection[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of every consumer group in one of ``states`` (lower case;
        empty: all)."""
        wanted = {s.lower() for s in states}
        return [
            (group_id, str(group.state))
            for group_id, group in self.groups.items()
            if not wanted or str(group.state).lower() in wanted
        ]

    def delete_groups(
        self, group_ids: Iterable[str], callback: Callable[[dict[str, ErrorCode]], None]
    ) -> None:
        """DeleteGroups of consumer groups: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP unless the
        group is EMPTY; the groups' records are tombstoned in one write (their committed
        offsets are the caller's)."""
        errors: dict[str, ErrorCode] = {}
        op = CoordinatorOperation()
        for group_id in group_ids:
            try:
                group = self.consumer_group(group_id)
                group.validate_delete_group()
            except BrokerResponseError as exc:
                errors[group_id] = error_code_of(exc)
                continue
            op.records.extend(group.create_group_tombstone_records())
            errors[group_id] = ErrorCode.none
            log.info("[GroupId %s] deleting the consumer group", group_id)

        def done(error: ErrorCode) -> None:
            callback({g: (error if e is ErrorCode.none else e) for g, e in errors.items()})

        self._commit(op, done)

    def groups_in_state(self, state: ConsumerGroupState) -> int:
        return sum(1 for g in self.groups.values() if g.state is state)


class _RegexUpdate(enum.Enum):
    """How a heartbeat changed the member's regex (Kafka's UpdateRegularExpressionsResult)."""

    NO_CHANGE = 0
    UPDATED = 1
    UPDATED_AND_RESOLVED = 2


def _updated_member(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> ConsumerGroupMember:
    """The member with what the request sets (null / -1 fields leave it unchanged): the
    same object when nothing differs (a steady heartbeat copies nothing)."""
    changes: dict[str, object] = {}
    if req.client_id != member.client_id:
        changes["client_id"] = req.client_id
    if req.client_host != member.client_host:
        changes["client_host"] = req.client_host
    if member.classic_member_metadata is not None:
        changes["classic_member_metadata"] = None
    if req.instance_id is not None and req.instance_id != member.instance_id:
        changes["instance_id"] = req.instance_id
    if req.rack_id is not None and req.rack_id != member.rack_id:
        changes["rack_id"] = req.rack_id
    if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.server_assignor is not None and req.server_assignor != member.server_assignor_name:
        changes["server_assignor_name"] = req.server_assignor
    if req.subscribed_topic_names is not None:
        names = frozenset(req.subscribed_topic_names)
        if names != member.subscribed_topic_names:
            changes["subscribed_topic_names"] = names
    regex = req.subscribed_topic_regex
    if regex is None and member.subscribed_topic_regex is None:
        regex = ""
    if regex is not None and regex != member.subscribed_topic_regex:
        changes["subscribed_topic_regex"] = regex
    return member.replace(**changes) if changes else member


def _updated_classic_member(
    member: ConsumerGroupMember, req: ClassicJoinGroup, topics: Iterable[str], rack: str | None
) -> ConsumerGroupMember:
    """The member with what a JoinGroup sets: its subscription (and its rack, if the
    subscription names one), client, and the classic protocol's session timeout and
    protocols."""
    changes: dict[str, object] = {
        "subscribed_topic_names": frozenset(topics),
        "client_id": req.client_id,
        "client_host": req.client_host,
        "classic_member_metadata": ClassicMemberMetadata(
            req.session_timeout_ms,
            tuple(ClassicProtocol(name, data) for name, data in req.protocols),
        ),
    }
    if req.instance_id is not None:
        changes["instance_id"] = req.instance_id
    if rack is not None:
        changes["rack_id"] = rack
    if req.rebalance_timeout_ms != -1:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    return member.replace(**changes)


def _remove_member_records(records: list[CoordinatorRecord], group_id: str, member_id: str) -> None:
    """A member's tombstones, in Kafka's order (current, target, member)."""
    records.append(new_consumer_group_current_assignment_tombstone_record(group_id, member_id))
    records.append(new_consumer_group_target_assignment_tombstone_record(group_id, member_id))
    records.append(new_consumer_group_member_subscription_tombstone_record(group_id, member_id))


def _throw_if_static_member_is_unknown_or_fenced(
    member: ConsumerGroupMember | None, member_id: str, instance_id: str | None
) -> ConsumerGroupMember:
    if member is None:
        raise api_error(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        log.info(
            "Static member %s with instance id %s is fenced by existing member %s.",
            member_id, instance_id, member.member_id,
        )  # fmt: skip
        raise api_error(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )
    return member
