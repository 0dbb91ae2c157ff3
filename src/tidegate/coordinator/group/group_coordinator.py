"""The classic consumer group protocol: Kafka's GroupCoordinator, sans-IO.

One broker is the coordinator of every group. A group moves through Kafka's states:

* ``Empty`` -- no members (a new group, or one whose members all left). Offsets may
  still be committed and fetched; offsets expire ``offsets.retention.minutes`` after
  the group became empty.
* ``PreparingRebalance`` -- a member joined, left, failed or changed its metadata.
  JoinGroup requests are parked (``DelayedJoin`` in the rebalance purgatory) until
  every known member has rejoined or the rebalance timeout passes; members that did
  not rejoin are dropped (static members stay). The first rebalance of an empty
  group waits ``group.initial.rebalance.delay.ms`` more per joining member, up to the
  rebalance timeout (``InitialDelayedJoin``).
* ``CompletingRebalance`` -- a new generation: every member has its JoinGroup answer
  and the leader (who got every member's metadata) computes the assignment. SyncGroup
  requests are parked until the leader's arrives. Members that do not send SyncGroup
  within the rebalance timeout are removed (``DelayedSync``).
* ``Stable`` -- assignments handed out; members heartbeat. A member whose session
  timeout passes without a heartbeat (``DelayedHeartbeat`` in the heartbeat purgatory)
  is removed, which starts a rebalance.
* ``Dead`` -- deleted (DeleteGroups, or an empty group whose offsets all expired).

Static membership (KIP-345): a member with ``group.instance.id`` that rejoins with an
unknown member id replaces its old member id; while the group is Stable and its
selected protocol does not change, that causes no rebalance (the others keep their
generation and assignment). Dynamic members joining with JoinGroup v4+ get
MEMBER_ID_REQUIRED first (KIP-394) and are tracked as pending until they rejoin.

Timeouts are :class:`~tidegate.server.purgatory.DelayedOperation` objects on the
timing wheels of two purgatories (Kafka's "Heartbeat" and "Rebalance"): a thousand
members cost a thousand wheel entries and one event-loop timer, not a timer each.
Every method here runs on the event loop's thread; answers leave through callbacks
(``JoinResult`` / ``SyncResult``), possibly long after the call returned.

Group metadata (after each rebalance) and committed offsets are written to
``__consumer_offsets`` through
:class:`~tidegate.coordinator.group.group_metadata_manager.OffsetsLog` and replayed
at start in log order (:meth:`GroupCoordinator.replay_batch`, then
:meth:`GroupCoordinator.on_loaded`), the same batches the KIP-848 and KIP-932
coordinators replay. One group id names one group: an id the modern coordinators own
(``other_groups``) is not a classic group here, though its committed offsets are kept
here like every group's; the offset APIs on a consumer group check its member's epoch,
and JoinGroup, SyncGroup, Heartbeat and LeaveGroup on a consumer group go to the consumer
group coordinator (``classic_members``: online migration, whose upgrade and downgrade
hand groups between the two through :meth:`GroupCoordinator.hand_over_classic_group` and
:meth:`GroupCoordinator.adopt_downgraded_group`).

Offsets in transactions (KIP-98, KIP-447): TxnOffsetCommit writes a transactional batch
of the producer; its offsets stay pending per (group, producer id), invisible to
OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable), until the producer's marker
reaches ``__consumer_offsets`` (:meth:`GroupCoordinator.on_transaction_completed`):
COMMIT makes them committed unless a plain commit was written after them, ABORT drops
them. Replay does the same with the markers in the log, so a transaction still open at
shutdown stays pending after a restart.

Kafka's layout: a group's state is :mod:`~tidegate.coordinator.group.group_metadata`,
the timeouts are :mod:`~tidegate.coordinator.group.delayed_operations`, the
``__consumer_offsets`` state is
:mod:`~tidegate.coordinator.group.group_metadata_manager`; this module decides.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tidegate.clock import Clock, WallMs
from tidegate.coordinator.group.delayed_operations import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    join_key,
    member_key,
    sync_key,
)
from tidegate.coordinator.group.group_metadata import (
    COMPLETING_REBALANCE,
    CONSUMER_PROTOCOL_TYPE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicJoinGroup,
    GroupMetadata,
    JoinCallback,
    JoinResult,
    MemberMetadata,
    SyncCallback,
    SyncResult,
)
from tidegate.coordinator.group.group_metadata_manager import (
    OFFSETS_KEY,
    AppendError,
    OffsetAndMetadata,
    OffsetsLog,
    PendingAppend,
    classic_group_value,
    coordinator_operation_error,
    decode_group,
    decode_offset,
    encode_offset,
    group_key,
    offset_key,
    parse_key,
)
from tidegate.coordinator.group.group_type import GroupType, GroupTypeLookup, no_other_groups
from tidegate.coordinator.group.modern.modern_group import error_code_of
from tidegate.errors import BrokerResponseError, ErrorCode
from tidegate.log.replay import ReplayedBatch
from tidegate.protocol.messages.describe_groups import DescribedGroup, DescribedGroupMember
from tidegate.protocol.messages.list_groups import ListedGroup
from tidegate.record.control_records import (
    ControlRecordType,
    InvalidControlRecordError,
    parse_control_key,
)
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.utils import INT32_MAX

if TYPE_CHECKING:
    from tidegate.coordinator.group.modern.consumer.consumer_group import ConsumerGroup

log = logging.getLogger(__name__)

#: group id -> the KIP-848 consumer group of that id, None if there is none
ConsumerGroupLookup = Callable[[str], "ConsumerGroup | None"]


def no_consumer_groups(group_id: str) -> ConsumerGroup | None:
    return None

class ClassicMembersOfConsumerGroups(Protocol):
    """The consumer group coordinator's side of online migration (reference 1.13): it
    answers JoinGroup, SyncGroup, Heartbeat and LeaveGroup of the classic-protocol members
    of its groups."""

    def has_members(self, group_id: str) -> bool: ...

    def delete_empty_consumer_group(self, group_id: str) -> None: ...

    def classic_group_join(self, request: ClassicJoinGroup, callback: JoinCallback) -> None: ...

    def classic_group_sync(
        self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
        protocol_name: str | None, instance_id: str | None, callback: SyncCallback,
    ) -> None: ...  # fmt: skip

    def classic_group_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode: ...

    def classic_group_leave(
        self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]: ...


UNKNOWN_MEMBER_ID = ""
#: Kafka's NewMemberJoinTimeoutMs: a new member's parked JoinGroup is dropped after this.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = INT32_MAX
    offsets_retention_ms: int = 10080 * 60_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS

    @classmethod
    def from_broker(cls, config: Any) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            max_size=config.get("group.max.size"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
            offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
        )


# ------------------------------------------------------------------------------------------
# the coordinator
# ------------------------------------------------------------------------------------------
#: APIs that accept an empty group id (Kafka keeps them working for the "" group).
_EMPTY_ID_OK = frozenset({"offset_commit", "offset_fetch", "describe_groups", "delete_groups"})


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig,
        heartbeat_purgatory: DelayedOperationPurgatory,
        rebalance_purgatory: DelayedOperationPurgatory,
        store: OffsetsLog,
        clock: Clock,
        *,
        other_groups: GroupTypeLookup = no_other_groups,
        consumer_groups: ConsumerGroupLookup = no_consumer_groups,
    ) -> None:
        """``other_groups`` names the type of a group id the modern coordinators own
        (KIP-848 consumer groups, KIP-932 share groups): such an id is not a classic group
        here, though this coordinator keeps its committed offsets (one offsets store per
        group id, as Kafka's OffsetMetadataManager); ``consumer_groups`` gives the
        consumer group whose members' epochs an offset commit or fetch is checked
        against."""
        self.config = config
        self.heartbeat_purgatory = heartbeat_purgatory
        self.rebalance_purgatory = rebalance_purgatory
        self.store = store
        #: its wall clock stamps state changes and decides offsets retention (the
        #: sessions and rebalances are timed by the purgatories' timers)
        self.clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        #: producer id -> groups with its pending transactional offsets (Kafka's
        #: GroupMetadataManager.openGroupsForProducer)
        self.open_groups_by_producer: dict[int, set[str]] = {}
        self.other_groups = other_groups
        self.consumer_groups = consumer_groups
        #: the consumer group coordinator, which answers the classic members of its groups
        #: (online migration); set by the broker once both are built
        self.classic_members: ClassicMembersOfConsumerGroups | None = None
        #: the latest group record of each group id seen by the replay at load
        self._stored: dict[str, dict | None] = {}
        self.active = False
        #: Kafka's group-completed-rebalance-count and offset-commit/-expiration/-deletion-count
        #: (group-coordinator-metrics), read by the metrics at scrape time
        self.rebalances_completed = 0
        self.offsets_committed = 0
        self.offsets_expired = 0
        self.offsets_deleted = 0

    # -- lifecycle --------------------------------------------------------------------------
    def replay_batch(self, batch: ReplayedBatch) -> None:
        """One batch of ``__consumer_offsets`` at load (the broker hands every batch to
        each coordinator's replay, then calls :meth:`on_loaded`)."""
        self._replay(batch, self._stored)

    def on_loaded(self) -> None:
        """The log is replayed: groups in their last stored generation, members' session
        timers armed; start serving."""
        self._finish_load(self._stored)
        self._stored = {}
        if self.groups:
            log.info(
                "loaded %d classic group(s) with %d committed offset(s) and %d open transaction(s)",
                len(self.groups),
                sum(len(g.offsets) for g in self.groups.values()),
                len(self.open_groups_by_producer),
            )  # fmt: skip
        self.active = True

    def _replay(self, batch: ReplayedBatch, stored: dict[str, dict | None]) -> None:
        """One batch of ``__consumer_offsets``, in log order (Kafka's replay): offsets of a
        plain commit are committed, those of a transactional batch pending for its
        producer until the producer's marker commits or discards them, a tombstone removes
        both; the latest group record per group is kept in ``stored``."""
        if batch.is_control:
            try:
                kind = parse_control_key(batch.records[0].key) if batch.records else ControlRecordType.UNKNOWN
            except InvalidControlRecordError as exc:
                log.warning("skipping an unreadable control record of __consumer_offsets: %s", exc)
                return
            if kind is not ControlRecordType.UNKNOWN:
                self.on_transaction_completed(batch.producer_id, kind is ControlRecordType.COMMIT)
            return
        producer_id = batch.producer_id if batch.is_transactional else -1
        for r in batch.records:
            if r.key is None:
                continue
            try:
                k = parse_key(r.key)
                if k[0] == "o":
                    group = self._get_or_create(k[1])
                    tp = (k[2], int(k[3]))
                    if r.value is None:
                        group.remove_offsets([tp])
                        continue
                    om = decode_offset(r.value)
                    om.record_offset = r.offset
                    if producer_id >= 0:
                        group.add_pending_txn_offsets(producer_id, {tp: om})
                        self.open_groups_by_producer.setdefault(producer_id, set()).add(group.group_id)
                    else:
                        group.offsets[tp] = om
                elif k[0] == "g":
                    stored[k[1]] = decode_group(r.value) if r.value is not None else None
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                log.warning("skipping an unreadable record of __consumer_offsets: %s", exc)

    def _finish_load(self, stored: dict[str, dict | None]) -> None:
        """Groups in their last stored generation; groups known only from offsets are Empty
        (simple groups); a group left with no record, offsets or open transaction is gone."""
        for group_id in stored.keys() | self.groups.keys():
            rec = stored.get(group_id)
            group = self._get_or_create(group_id)
            if rec is None:
                if not group.offsets and not group.has_pending_transactions:
                    del self.groups[group_id]
                    continue
                group.state_timestamp = None
                continue
            group.generation_id = rec["generation"]
            group.protocol_type = rec["protocol_type"]
            group.protocol_name = rec["protocol"]
            group.state_timestamp = rec["state_ts"]
            for m in rec["members"]:
                member = MemberMetadata(
                    m["member_id"],
                    m["group_instance_id"],
                    m["client_id"],
                    m["client_host"],
                    m["rebalance_timeout_ms"],
                    m["session_timeout_ms"],
                    rec["protocol_type"] or "",
                    [(rec["protocol"] or "", m["subscription"])],
                )
                member.assignment = m["assignment"]
                group.add(member)
            group.leader_id = rec["leader"] if rec["leader"] in group.members else group.leader_id
            if group.members:
                group.state = STABLE
            group.subscribed_topics = group.compute_subscribed_topics()
            for member in group.members.values():
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def shutdown(self) -> None:
        """Answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR (the clients look
        for the coordinator again) and stop serving."""
        self.active = False
        for group in self.groups.values():
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinResult(member.member_id, ErrorCode.not_coordinator))
                group.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.not_coordinator))

    def _validate_group_status(self, group_id: str | None, api: str) -> ErrorCode | None:
        if group_id is None or (group_id == "" and api not in _EMPTY_ID_OK):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        return None

    def _get_or_create(self, group_id: str) -> GroupMetadata:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.clock)
        return group

    # -- the modern protocols' groups (reference 1.14, cross-type) -----------------------------
    def _is_classic(self, group_id: str) -> bool:
        """Whether the id names a classic group (not the offsets of a modern group's id)."""
        return group_id in self.groups and self.other_groups(group_id) is None

    def group_type(self, group_id: str) -> GroupType | None:
        """CLASSIC if ``group_id`` is a classic group (the lookup the modern coordinators
        are handed)."""
        return GroupType.CLASSIC if self._is_classic(group_id) else None

    def classic_group_is_empty(self, group_id: str) -> bool | None:
        """Whether the classic group of this id has no member; None if there is none
        (the consumer group coordinator's ``ClassicGroups``)."""
        if not self._is_classic(group_id):
            return None
        return not self.groups[group_id].members

    def remove_empty_classic_group(self, group_id: str) -> None:
        """A consumer group replaced the empty classic group (its record is tombstoned):
        the id keeps only its committed offsets here."""
        group = self.groups.get(group_id)
        if group is not None:
            group.protocol_type = None
            group.protocol_name = None
            log.info("classic group %s is now a consumer group", group_id)

    def classic_group(self, group_id: str) -> GroupMetadata | None:
        """The classic group of this id (the consumer group coordinator's ``ClassicGroups``:
        an upgrade converts it)."""
        return self.groups[group_id] if self._is_classic(group_id) else None

    def hand_over_classic_group(self, group_id: str) -> None:
        """The classic group was upgraded to a consumer group (Kafka's
        ``convertToConsumerGroup``): parked JoinGroup and SyncGroup answer
        REBALANCE_IN_PROGRESS (the members rejoin, now in the consumer group), the group's
        timers complete, and the id keeps only its committed offsets here."""
        old = self.groups.get(group_id)
        if old is None:
            return
        for member in list(old.members.values()):
            old.maybe_invoke_join_callback(member, JoinResult(member.member_id, ErrorCode.rebalance_in_progress))
            old.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.rebalance_in_progress))
        offsets_only = GroupMetadata(group_id, EMPTY, self.clock)
        offsets_only.offsets = old.offsets
        offsets_only.pending_transactional_offsets = old.pending_transactional_offsets
        self.groups[group_id] = offsets_only
        member_ids = [*old.members, *old.pending_members]
        for member_id in list(old.members):
            old.remove(member_id)
        old.pending_members.clear()
        old.transition_to(DEAD)
        for member_id in member_ids:
            self.heartbeat_purgatory.check_and_complete(member_key(group_id, member_id))
        self.rebalance_purgatory.check_and_complete(join_key(group_id))
        self.rebalance_purgatory.check_and_complete(sync_key(group_id))
        log.info("classic group %s is now a consumer group (online upgrade)", group_id)

    def adopt_downgraded_group(self, group: GroupMetadata) -> None:
        """A consumer group was downgraded (Kafka's ``convertToClassicGroup``): ``group``,
        Stable at its epoch with the classic members and their assignments, replaces the
        offsets-only entry of its id (its record was written in the batch that tombstoned
        the consumer group); its members' sessions are armed, and it rebalances."""
        group_id = group.group_id
        old = self.groups.get(group_id)
        if old is not None:
            group.offsets = old.offsets
            group.pending_transactional_offsets = old.pending_transactional_offsets
        self.groups[group_id] = group
        for member in group.members.values():
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        self._prepare_rebalance(group, f"downgrade of group {group_id} from consumer to classic")

    def _modern_offset_error(
        self, group_id: str, validate: Callable[[ConsumerGroup], None]
    ) -> ErrorCode | None:
        """The offset APIs on a modern group's id: a share group's is GROUP_ID_NOT_FOUND, a
        consumer group's checks its member's epoch (``validate``: STALE_MEMBER_EPOCH,
        UNKNOWN_MEMBER_ID, ...); None: go on (a classic group, or none)."""
        kind = self.other_groups(group_id)
        if kind is None:
            return None
        if kind is not GroupType.CONSUMER:
            return ErrorCode.group_id_not_found
        consumer = self.consumer_groups(group_id)
        if consumer is None:
            return ErrorCode.group_id_not_found
        try:
            validate(consumer)
        except BrokerResponseError as exc:
            return error_code_of(exc)
        return ErrorCode.none

    # -- persistence -------------------------------------------------------------------------
    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> ErrorCode:
        state_timestamp = group.state_timestamp if group.state_timestamp is not None else self.clock.wall_milliseconds()
        value = classic_group_value(group, assignment, state_timestamp)
        try:
            self.store.append([(group_key(group.group_id), value)])
        except (OSError, AppendError) as exc:
            log.error("could not store the metadata of group %s: %s", group.group_id, exc)
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _append_tombstones(self, keys: list[bytes]) -> None:
        if not keys:
            return
        try:
            self.store.append([(k, None) for k in keys])
        except (OSError, AppendError) as exc:
            log.error("could not write %d tombstone(s) to __consumer_offsets: %s", len(keys), exc)

    # -- JoinGroup ----------------------------------------------------------------------------
    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        state = group.state
        if state in (EMPTY, DEAD):
            return True
        if state is PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or (
                group.num_awaiting_join < self.config.max_size
            )
        return member_id in group.members or group.size < self.config.max_size

    def handle_join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        support_skipping_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: JoinCallback,
        reason: str | None = None,
    ) -> None:
        error = self._validate_group_status(group_id, "join_group")
        kind = self.other_groups(group_id) if error is None else None
        delegate = self.classic_members
        if kind is GroupType.CONSUMER and delegate is not None:
            if delegate.has_members(group_id):
                # a classic-protocol member of a consumer group (online migration)
                delegate.classic_group_join(
                    ClassicJoinGroup(
                        group_id, member_id, group_instance_id, require_known_member_id, client_id,
                        client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                    ),
                    callback,
                )  # fmt: skip
                return
            delegate.delete_empty_consumer_group(group_id)  # it becomes a classic group
        elif kind is not None:
            # a share group: Kafka's answer with the migration policy DISABLED
            error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            callback(JoinResult(member_id, error))
            return
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            callback(JoinResult(member_id, ErrorCode.invalid_session_timeout))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                callback(JoinResult(member_id, ErrorCode.unknown_member_id))
                return
            group = self._get_or_create(group_id)
        why = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._do_new_member_join(
                group, group_instance_id, require_known_member_id, support_skipping_assignment,
                client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                protocols, callback, why,
            )
        else:
            self._do_current_member_join(
                group, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, callback, why,
            )
        if group.state is PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _do_new_member_join(
        self, group: GroupMetadata, group_instance_id: str | None, require_known_member_id: bool,
        support_skipping_assignment: bool, client_id: str, client_host: str,
        rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], callback: JoinCallback, reason: str,
    ) -> None:
        if group.state is DEAD:
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
            return
        new_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_id = group.static_members.get(group_instance_id)
            if old_id is not None:
                log.info(
                    "static member %s of group %s rejoins in %s: member id %s replaces %s",
                    group_instance_id, group.group_id, group.state, new_id, old_id,
                )
                self._update_static_member_and_rebalance(
                    group, old_id, new_id, group_instance_id, protocols, rebalance_timeout_ms,
                    session_timeout_ms, callback, reason, support_skipping_assignment,
                )
            else:
                self._add_member_and_rebalance(
                    rebalance_timeout_ms, session_timeout_ms, new_id, group_instance_id, client_id,
                    client_host, protocol_type, protocols, group, callback, reason,
                )
        elif require_known_member_id:
            # KIP-394: hand out the id first; the member is pending until it rejoins with it
            group.pending_members.add(new_id)
            self._add_pending_member_expiration(group, new_id, session_timeout_ms)
            callback(JoinResult(new_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(
                rebalance_timeout_ms, session_timeout_ms, new_id, None, client_id, client_host,
                protocol_type, protocols, group, callback, reason,
            )

    def _validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info(
                    "member %s with group.instance.id %s is fenced by member %s in group %s",
                    member_id, group_instance_id, current, group.group_id,
                )
                return ErrorCode.fenced_instance_id
            return None
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        return None

    def _do_current_member_join(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback, reason: str,
    ) -> None:
        if group.state is DEAD:
            callback(JoinResult(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            callback(JoinResult(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # pending members are always dynamic: this id was never handed to a static one
                callback(JoinResult(member_id, ErrorCode.unknown_member_id))
                return
            self._add_member_and_rebalance(
                rebalance_timeout_ms, session_timeout_ms, member_id, None, client_id, client_host,
                protocol_type, protocols, group, callback, reason,
            )
            return
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            callback(JoinResult(member_id, error))
            return
        member = group.members[member_id]
        state = group.state
        if state is PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, callback
            )
        elif state is COMPLETING_REBALANCE:
            if member.matches(protocols):
                # the same metadata (it probably missed the JoinGroup answer): answer again
                callback(
                    JoinResult(
                        member_id, ErrorCode.none, group.generation_id, group.protocol_type,
                        group.protocol_name, group.leader_id or "", False,
                        group.current_member_metadata() if group.is_leader(member_id) else [],
                    )
                )
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, callback
                )
        elif state is STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader rejoining forces a rebalance (it may have seen new metadata)
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, callback
                )
            else:
                callback(
                    JoinResult(
                        member_id, ErrorCode.none, group.generation_id, group.protocol_type,
                        group.protocol_name, group.leader_id or "",
                    )
                )
        else:
            log.warning("member %s rejoins group %s in state %s", member_id, group.group_id, state)
            callback(JoinResult(member_id, ErrorCode.unknown_member_id))

    def _add_member_and_rebalance(
        self, rebalance_timeout_ms: int, session_timeout_ms: int, member_id: str,
        group_instance_id: str | None, client_id: str, client_host: str, protocol_type: str,
        protocols: list[tuple[str, bytes]], group: GroupMetadata, callback: JoinCallback,
        reason: str,
    ) -> None:
        member = MemberMetadata(
            member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, protocols,
        )
        member.is_new = True
        if group.state is PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # A new member cannot heartbeat while its JoinGroup is parked (the connection is
        # muted): drop it if the rebalance has not answered it after this long.
        self._complete_and_schedule_next_expiration(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(
            group, f"adding member {member_id} (instance {group_instance_id}); reason: {reason}"
        )

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_id: str, new_id: str, instance_id: str,
        protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int, session_timeout_ms: int,
        callback: JoinCallback, reason: str, support_skipping_assignment: bool,
    ) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        state = group.state
        if state is STABLE:
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance. Persist the new member id and answer with
                # the current generation; the member's SyncGroup gets its old assignment.
                error = self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
                if error is not ErrorCode.none:
                    group.update_member(member, old_protocols, old_rebalance, old_session, None)
                    old = group.replace_static_member(instance_id, new_id, old_id)
                    self._complete_and_schedule_next_heartbeat_expiration(group, old)
                    callback(
                        JoinResult(
                            UNKNOWN_MEMBER_ID, error, group.generation_id, group.protocol_type,
                            group.protocol_name, current_leader or "",
                        )
                    )
                elif support_skipping_assignment:
                    # JoinGroup v9: a static leader learns it leads but skips the assignor
                    is_leader = group.is_leader(new_id)
                    group.maybe_invoke_join_callback(
                        member,
                        JoinResult(
                            new_id, ErrorCode.none, group.generation_id, group.protocol_type,
                            group.protocol_name, group.leader_id or "", is_leader,
                            group.current_member_metadata() if is_leader else [],
                        ),
                    )
                else:
                    # older versions: the old leader id, so this member never runs an
                    # assignment a stable group would ignore
                    group.maybe_invoke_join_callback(
                        member,
                        JoinResult(
                            new_id, ErrorCode.none, group.generation_id, group.protocol_type,
                            group.protocol_name, current_leader or "",
                        ),
                    )
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with a protocol change; {reason}"
                )
        elif state is COMPLETING_REBALANCE:
            # the leader may already hold the old member id: assign again
            self._prepare_rebalance(group, f"static member {instance_id} rejoined; {reason}")
        elif state is PREPARING_REBALANCE:
            pass
        else:
            raise RuntimeError(f"static member {instance_id} rejoins group {group.group_id} in {state}")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int, session_timeout_ms: int, callback: JoinCallback,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined in {group.state}")

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state is COMPLETING_REBALANCE:
            # members parked in SyncGroup learn they must rejoin
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        if group.state is EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            op: DelayedJoin = InitialDelayedJoin(
                self, group, delay, delay, max(group.rebalance_timeout_ms() - delay, 0)
            )
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms())
        group.transition_to(PREPARING_REBALANCE)
        log.info(
            "preparing to rebalance group %s with old generation %d (%s)",
            group.group_id, group.generation_id, reason,
        )
        self.rebalance_purgatory.try_complete_else_watch(op, [join_key(group.group_id)])

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # a new member may still be parked in JoinGroup: it retries on UNKNOWN_MEMBER_ID
        group.maybe_invoke_join_callback(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        state = group.state
        if state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif state is PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.state is PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _on_complete_join(self, group: GroupMetadata) -> None:
        not_rejoined = [
            m for m in group.members.values() if not m.is_awaiting_join and not m.is_static
        ]
        if not_rejoined:
            log.info(
                "group %s removed dynamic members that did not rejoin: %s",
                group.group_id, [m.member_id for m in not_rejoined],
            )
            for m in not_rejoined:
                group.remove(m.member_id)
                self._remove_heartbeat_for_leaving_member(group, m.member_id)
        if group.state is DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # only static members that did not rejoin are left: wait another round
            log.error("group %s could not complete the rebalance: no member rejoined", group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms()), [join_key(group.group_id)]
            )
            return
        group.init_next_generation()
        self.rebalances_completed += 1
        if group.state is EMPTY:
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            if self._store_group(group, {}) is not ErrorCode.none:
                log.warning("could not store the empty generation of group %s", group.group_id)
            return
        log.info(
            "stabilized group %s generation %d with %d member(s)",
            group.group_id, group.generation_id, group.size,
        )
        members = group.current_member_metadata()
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            group.maybe_invoke_join_callback(
                member,
                JoinResult(
                    member.member_id, ErrorCode.none, group.generation_id, group.protocol_type,
                    group.protocol_name, group.leader_id or "", False,
                    members if is_leader else [],
                ),
            )
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    # -- SyncGroup -------------------------------------------------------------------------------
    def handle_sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:
        error = self._validate_group_status(group_id, "sync_group")
        if error is not None:
            callback(SyncResult(error))
            return
        if self.classic_members is not None and self.other_groups(group_id) is GroupType.CONSUMER:
            self.classic_members.classic_group_sync(
                group_id, generation_id, member_id, protocol_type, protocol_name, group_instance_id, callback
            )
            return
        group = self.groups.get(group_id)
        if group is None:
            callback(SyncResult(ErrorCode.unknown_member_id))
            return
        if group.state is DEAD:
            callback(SyncResult(ErrorCode.coordinator_not_available))
            return
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is None:
            if generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            elif (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            callback(SyncResult(error))
            return
        state = group.state
        if state is EMPTY:
            callback(SyncResult(ErrorCode.unknown_member_id))
        elif state is PREPARING_REBALANCE:
            callback(SyncResult(ErrorCode.rebalance_in_progress))
        elif state is COMPLETING_REBALANCE:
            group.members[member_id].awaiting_sync = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {mid: assignments.get(mid, b"") for mid in group.members}
                missing = [mid for mid in group.members if mid not in assignments]
                if missing:
                    log.warning(
                        "group %s generation %d: empty assignment for %s",
                        group.group_id, group.generation_id, missing,
                    )
                error = self._store_group(group, assignment)
                if group.state is COMPLETING_REBALANCE and generation_id == group.generation_id:
                    if error is not ErrorCode.none:
                        self._reset_and_propagate_assignment_error(group, error)
                        self._maybe_prepare_rebalance(group, f"error {error.name} storing the assignment")
                    else:
                        for member in group.members.values():
                            member.assignment = assignment[member.member_id]
                        self._propagate_assignment(group, ErrorCode.none)
                        group.transition_to(STABLE)
        else:  # STABLE
            self._remove_pending_sync_member(group, member_id)
            member = group.members[member_id]
            callback(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        ptype = group.protocol_type if ok else None
        pname = group.protocol_name if ok else None
        for member in list(group.members.values()):
            if group.maybe_invoke_sync_callback(member, SyncResult(error, ptype, pname, member.assignment)):
                # restart the session clock once the member has its answer
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms()),
            [sync_key(group.group_id)],
        )

    def _on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id or group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return
        if group.pending_sync_members:
            late = sorted(group.pending_sync_members)
            for member_id in late:
                group.remove(member_id)
                self._remove_heartbeat_for_leaving_member(group, member_id)
            log.info("group %s removed members that sent no SyncGroup in time: %s", group.group_id, late)
            self._prepare_rebalance(group, f"removing {late} on pending sync expiration")

    # -- heartbeats and session expiry ---------------------------------------------------------
    def _complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        key = member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key]
        )

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [member_key(group.group_id, member_id)],
        )

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))

    def _try_complete_heartbeat(self, op: DelayedHeartbeat) -> bool:
        group = op.group
        if group.state is DEAD:
            return op.force_complete()
        member = group.members.get(op.member_id)
        if op.is_pending:
            return op.force_complete() if member is not None else False
        if member is None or member.has_satisfied_heartbeat:
            return op.force_complete()
        return False

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.state is DEAD:
            return
        if is_pending:
            if group.is_pending_member(member_id):
                log.info("pending member %s of group %s expired", member_id, group.group_id)
                self._remove_pending_member_and_update_group(group, member_id)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat:
            log.info("member %s of group %s failed (session timeout); removing it", member_id, group.group_id)
            self._remove_member_and_update_group(group, member, f"member {member_id} session expired")

    def handle_heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self._validate_group_status(group_id, "heartbeat")
        if error is not None:
            return error
        if self.classic_members is not None and self.other_groups(group_id) is GroupType.CONSUMER:
            return self.classic_members.classic_group_heartbeat(group_id, member_id, group_instance_id, generation_id)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        state = group.state
        if state is EMPTY:
            return ErrorCode.unknown_member_id
        self._complete_and_schedule_next_heartbeat_expiration(group, group.members[member_id])
        if state is PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup ------------------------------------------------------------------------------
    def handle_leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving``: (member id, group instance id, reason). Returns the top-level error
        and one error per leaving member."""
        error = self._validate_group_status(group_id, "leave_group")
        if error is not None:
            return error, []
        if self.classic_members is not None and self.other_groups(group_id) is GroupType.CONSUMER:
            return self.classic_members.classic_group_leave(group_id, leaving)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(mid, iid, ErrorCode.unknown_member_id) for mid, iid, _ in leaving]
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available, []
        out = []
        for member_id, instance_id, reason in leaving:
            why = reason or "not provided"
            if member_id == UNKNOWN_MEMBER_ID:
                # administrative removal of a static member by instance id
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    out.append((member_id, instance_id, ErrorCode.unknown_member_id))
                else:
                    self._remove_current_member(group, current, why)
                    out.append((member_id, instance_id, ErrorCode.none))
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
                out.append((member_id, instance_id, ErrorCode.none))
            else:
                err = self._validate_current_member(group, member_id, instance_id)
                if err is None:
                    self._remove_current_member(group, member_id, why)
                    err = ErrorCode.none
                out.append((member_id, instance_id, err))
        return ErrorCode.none, out

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.members[member_id]
        self._remove_member_and_update_group(group, member, f"member {member_id} left; reason: {reason}")
        self._remove_heartbeat_for_leaving_member(group, member_id)
        log.info("member %s left group %s (reason: %s)", member_id, group.group_id, reason)

    # -- offsets ------------------------------------------------------------------------------------
    def _validate_offset_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None,
        *, is_transactional: bool = False,
    ) -> ErrorCode | None:  # fmt: skip
        """Kafka's ``ClassicGroup.validateOffsetCommit``."""
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.state is EMPTY:
            return None  # admin clients and consumers without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if group.state is not EMPTY and not is_transactional:
            # only members commit for a non-empty group; TxnOffsetCommit v0-v2 carry no
            # member, so transactional commits are accepted without one
            return ErrorCode.unknown_member_id
        return None

    def handle_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        api_version: int = 9,
    ) -> tuple[dict[tuple[str, int], ErrorCode], PendingAppend | None]:
        """Errors per partition, and the write's durability to wait on before answering
        (None if nothing was written). Offsets are visible to OffsetFetch once this
        returns. A consumer group's commit is checked against its member's epoch
        (``generation_id`` is the member epoch from OffsetCommit v9 on)."""

        def all_(error: ErrorCode) -> tuple[dict, None]:
            return {tp: error for tp in offsets}, None

        error = self._validate_group_status(group_id, "offset_commit")
        if error is not None:
            return all_(error)
        modern = self._modern_offset_error(
            group_id,
            lambda g: g.validate_offset_commit(member_id, group_instance_id, generation_id, False, api_version),
        )
        if modern is not None:
            if modern is not ErrorCode.none:
                return all_(modern)
            return self._store_offsets(self._get_or_create(group_id), offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Kafka 4: GROUP_ID_NOT_FOUND from v9 on, ILLEGAL_GENERATION before
                return all_(ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation)
            log.info("creating simple consumer group %s from an offset commit", group_id)
            group = self._get_or_create(group_id)
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return all_(error)
        state = group.state
        if state is COMPLETING_REBALANCE:
            return all_(ErrorCode.rebalance_in_progress)
        if state in (STABLE, PREPARING_REBALANCE):
            self._complete_and_schedule_next_heartbeat_expiration(group, group.members[member_id])
        return self._store_offsets(group, offsets)

    def handle_txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        verify_transaction: Callable[[], ErrorCode] | None = None,
    ) -> tuple[dict[tuple[str, int], ErrorCode], PendingAppend | None]:
        """TxnOffsetCommit: Kafka's GroupCoordinatorService.commitTransactionalOffsets and
        OffsetMetadataManager.commitTransactionalOffset. In order: COORDINATOR_NOT_AVAILABLE
        while not serving, INVALID_GROUP_ID for an empty id, ``verify_transaction`` (KIP-890:
        the group's offsets partition must be in the producer's transaction), then the
        group checks of an offset commit, without the member requirement of a non-empty
        group and without REBALANCE_IN_PROGRESS. The offsets are written as one
        transactional batch of the producer and stay pending (invisible to OffsetFetch)
        until the producer's marker reaches __consumer_offsets
        (:meth:`on_transaction_completed`)."""

        def all_(error: ErrorCode) -> tuple[dict, None]:
            return {tp: error for tp in offsets}, None

        if not self.active:
            return all_(ErrorCode.coordinator_not_available)
        if not group_id:
            return all_(ErrorCode.invalid_group_id)
        if verify_transaction is not None:
            verified = verify_transaction()
            if verified is not ErrorCode.none:
                return all_(verified)
        modern = self._modern_offset_error(
            group_id, lambda g: g.validate_offset_commit(member_id, group_instance_id, generation_id, True, 0)
        )
        if modern is not None:
            if modern is not ErrorCode.none:
                return all_(modern)
            return self._store_offsets(self._get_or_create(group_id), offsets, producer_id, producer_epoch)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(ErrorCode.illegal_generation)
            log.info("creating simple consumer group %s from a transactional offset commit", group_id)
            group = self._get_or_create(group_id)
        error = self._validate_offset_commit(
            group, generation_id, member_id, group_instance_id, is_transactional=True
        )
        if error is not None:
            return all_(error)
        return self._store_offsets(group, offsets, producer_id, producer_epoch)

    def on_transaction_completed(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT or ABORT marker is in __consumer_offsets (Kafka's
        onTransactionCompleted / replayEndTransactionMarker): its pending offsets become
        committed, where no later plain commit exists, or are dropped."""
        materialized = []
        for group_id in self.open_groups_by_producer.pop(producer_id, ()):
            group = self.groups.get(group_id)
            if group is None:
                continue
            for tp, om in group.complete_pending_txn_offset_commit(producer_id, commit):
                materialized.append((offset_key(group_id, *tp), encode_offset(om)))
        self.store.materialize(materialized)

    def on_marker_written(self, tp: tuple[str, int], producer_id: int, commit: bool) -> None:
        """A transaction marker reached a partition: only ours matters here."""
        if tp == OFFSETS_KEY:
            self.on_transaction_completed(producer_id, commit)

    def has_pending_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        """Whether a transaction has written an offset for this partition that its marker
        has not committed or aborted yet (OffsetFetch require_stable: UNSTABLE_OFFSET_COMMIT)."""
        group = self.groups.get(group_id)
        return group is not None and group.has_pending_offsets_for(tp)

    def _store_offsets(
        self, group: GroupMetadata, offsets: dict[tuple[str, int], OffsetAndMetadata],
        producer_id: int = -1, producer_epoch: int = -1,
    ) -> tuple[dict[tuple[str, int], ErrorCode], PendingAppend | None]:  # fmt: skip
        """Write the offsets (a transactional batch when ``producer_id`` is set) and make
        them committed, or pending for the producer."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        records = []
        limit = self.config.offset_metadata_max_bytes
        for tp, om in offsets.items():
            if om.metadata is not None and len(om.metadata.encode()) > limit:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                errors[tp] = ErrorCode.none
                records.append((tp, om))
        if not records:
            return errors, None
        try:
            wait = self.store.append(
                [(offset_key(group.group_id, t, p), encode_offset(om)) for (t, p), om in records],
                producer_id=producer_id, producer_epoch=producer_epoch,
            )  # fmt: skip
        except (OSError, AppendError) as exc:
            log.error("could not store offsets of group %s: %s", group.group_id, exc)
            error = ErrorCode.not_coordinator
            if isinstance(exc, AppendError) and producer_id >= 0:
                error = coordinator_operation_error(exc.error)  # e.g. INVALID_PRODUCER_EPOCH
            for tp, _ in records:
                errors[tp] = error
            return errors, None
        self.offsets_committed += len(records)
        base = wait.base_offset
        for i, (_tp, om) in enumerate(records):
            om.record_offset = base + i
        if producer_id >= 0:
            group.add_pending_txn_offsets(producer_id, dict(records))
            self.open_groups_by_producer.setdefault(producer_id, set()).add(group.group_id)
        else:
            group.offsets.update(records)
        return errors, wait

    def handle_fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None]]:  # fmt: skip
        """Committed offsets (None where there is none); ``partitions=None``: all of them.
        A consumer group's fetch (OffsetFetch v9: ``member_id``, ``member_epoch``) is
        checked against its member's epoch."""
        error = self._validate_group_status(group_id, "offset_fetch")
        if error is None:
            modern = self._modern_offset_error(group_id, lambda g: g.validate_offset_fetch(member_id, member_epoch))
            error = None if modern is ErrorCode.none else modern
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and group.state is not DEAD else {}
        if partitions is None:
            return ErrorCode.none, dict(offsets)
        return ErrorCode.none, {tp: offsets.get(tp) for tp in partitions}

    def handle_delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self._validate_group_status(group_id, "offset_delete")
        if error is not None:
            return error, {}
        kind = self.other_groups(group_id)
        if kind is not None:
            return self._delete_offsets_of_modern_group(group_id, kind, partitions)
        group = self.groups.get(group_id)
        if group is None or group.state is DEAD:
            return ErrorCode.group_id_not_found, {}
        errors: dict[tuple[str, int], ErrorCode] = {}
        if group.state is EMPTY:
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        removed = group.remove_offsets(eligible)
        self._append_tombstones([offset_key(group_id, t, p) for t, p in removed])
        self.offsets_deleted += len(removed)
        for tp in eligible:
            errors[tp] = ErrorCode.none
        if removed:
            log.info("deleted %d offset(s) of group %s", len(removed), group_id)
        return ErrorCode.none, errors

    def _delete_offsets_of_modern_group(
        self, group_id: str, kind: GroupType, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete on a consumer group (Kafka's OffsetMetadataManager.deleteOffsets):
        a topic the group subscribes to is GROUP_SUBSCRIBED_TO_TOPIC, the others' offsets
        are tombstoned; a share group's id is GROUP_ID_NOT_FOUND."""
        consumer = self.consumer_groups(group_id) if kind is GroupType.CONSUMER else None
        if consumer is None:
            return ErrorCode.group_id_not_found, {}
        errors = {
            tp: ErrorCode.group_subscribed_to_topic if consumer.is_subscribed_to_topic(tp[0]) else ErrorCode.none
            for tp in partitions
        }
        group = self.groups.get(group_id)
        if group is not None:
            removed = group.remove_offsets([tp for tp, e in errors.items() if e is ErrorCode.none])
            self._append_tombstones([offset_key(group_id, t, p) for t, p in removed])
            self.offsets_deleted += len(removed)
        return ErrorCode.none, errors

    def remove_offsets_of_topic(self, topic: str) -> int:
        """A topic was deleted: forget every group's offsets for it, pending ones too."""
        keys: list[bytes] = []
        for group in self.groups.values():
            tps = [tp for tp in group.offset_partitions() if tp[0] == topic]
            keys.extend(offset_key(group.group_id, *tp) for tp in group.remove_offsets(tps))
        self._append_tombstones(keys)
        return len(keys)

    def _remove_expired_offsets(self, group: GroupMetadata, now: WallMs) -> list[tuple[str, int]]:
        retention = self.config.offsets_retention_ms

        def expired(base: Callable[[OffsetAndMetadata], int], subscribed: set[str] | None = None) -> list:
            out = []
            for tp, om in group.offsets.items():
                if subscribed and tp[0] in subscribed:
                    continue
                if group.has_pending_offsets_for(tp):
                    continue  # not while a transaction has an offset pending for it
                if om.expire_timestamp is None:
                    if now - base(om) >= retention:
                        out.append(tp)
                elif now >= om.expire_timestamp:
                    out.append(tp)
            return out

        if group.protocol_type is not None and group.state is EMPTY:
            # no member: everything expires `retention` after the group became empty
            ts = group.state_timestamp
            tps = expired(lambda om: ts if ts is not None else om.commit_timestamp)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None:
            tps = expired(lambda om: om.commit_timestamp, group.subscribed_topics)
        elif group.protocol_type is None:
            tps = expired(lambda om: om.commit_timestamp)  # a simple (standalone) consumer
        else:
            tps = []
        for tp in tps:
            del group.offsets[tp]
        return tps

    def cleanup_group_metadata(self) -> int:
        """Expire offsets by ``offsets.retention.minutes``; an empty group left without
        offsets is removed. Returns the number of offsets expired."""
        if not self.active:
            return 0
        now = self.clock.wall_milliseconds()
        keys: list[bytes] = []
        removed = 0
        for group_id, group in list(self.groups.items()):
            owned = self.other_groups(group_id) is not None
            consumer = self.consumer_groups(group_id) if owned else None
            if owned and (consumer is None or consumer.members):
                continue  # a modern group's offsets expire only while it has no member
            tps = self._remove_expired_offsets(group, now)
            removed += len(tps)
            keys.extend(offset_key(group_id, t, p) for t, p in tps)
            if group.state is EMPTY and not group.offsets and not group.has_pending_transactions:
                group.transition_to(DEAD)
                del self.groups[group_id]
                if not owned:
                    keys.append(group_key(group_id))
                log.info("group %s is empty and has no offsets left: removed", group_id)
        self._append_tombstones(keys)
        self.offsets_expired += removed
        if removed:
            log.info("expired %d committed offset(s)", removed)
        return removed

    # -- metrics -----------------------------------------------------------------------------------
    def _classic_groups(self) -> list[GroupMetadata]:
        """The classic groups (the ids of consumer and share groups keep only their offsets
        here)."""
        return [g for g in self.groups.values() if g.state is not DEAD and self.other_groups(g.group_id) is None]

    def state_counts(self) -> dict[str, int]:
        """Classic groups per state ("Empty", "Stable", ...): Kafka's classic-group-count."""
        counts: dict[str, int] = {}
        for g in self._classic_groups():
            counts[g.state.value] = counts.get(g.state.value, 0) + 1
        return counts

    def group_summaries(self) -> list[tuple[str, str, int, int]]:
        """(group id, state, generation, members) of every classic group, for the metrics."""
        return [(g.group_id, g.state.value, g.generation_id, len(g.members)) for g in self._classic_groups()]

    # -- listing, describing, deleting -------------------------------------------------------------
    def handle_list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        """Every group passing the filters, as ListGroups lists it (group type "classic")."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        if types and GroupType.CLASSIC not in {GroupType.parse(t) for t in types}:
            return ErrorCode.none, []
        wanted_states = {s.lower() for s in states}
        return ErrorCode.none, [
            ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
                        group_type=str(GroupType.CLASSIC))
            for g in self.groups.values()
            if (not wanted_states or g.state.value.lower() in wanted_states) and self.other_groups(g.group_id) is None
        ]  # fmt: skip

    def handle_describe_group(self, group_id: str) -> DescribedGroup:
        """The group as DescribeGroups describes it (Kafka's GroupMetadataManager.describeGroups):
        a group that does not exist is ``Dead`` with no error (DescribeGroups v6 answers it
        GROUP_ID_NOT_FOUND); protocol, metadata and assignments are shown once Stable."""
        error = self._validate_group_status(group_id, "describe_groups")
        if error is not None:
            return DescribedGroup(group_id=group_id, error_code=error)
        group = self.groups.get(group_id)
        if group is None or self.other_groups(group_id) is not None:
            # none, or not a classic group (reference 1.14)
            return DescribedGroup(group_id=group_id, group_state=DEAD.value)
        protocol = group.protocol_name if group.state is STABLE else None
        return DescribedGroup(
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=protocol if protocol is not None else "",
            members=[
                DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(protocol) if protocol is not None else b"",
                    member_assignment=m.assignment if protocol is not None else b"",
                )
                for m in group.members.values()
            ],
        )

    def delete_offsets_of_group(self, group_id: str) -> None:
        """A modern group was deleted: its committed offsets go too (tombstoned)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            tps = group.remove_offsets(group.offset_partitions())
            self._append_tombstones([offset_key(group_id, t, p) for t, p in tps])

    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        keys: list[bytes] = []
        for group_id in group_ids:
            error = self._validate_group_status(group_id, "delete_groups")
            if error is not None:
                out[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is DEAD or self.other_groups(group_id) is not None:
                out[group_id] = ErrorCode.group_id_not_found
            elif group.state is EMPTY:
                group.transition_to(DEAD)
                del self.groups[group_id]
                # committed and pending offsets alike (Kafka's deleteAllOffsets)
                tps = group.remove_offsets(group.offset_partitions())
                keys.extend(offset_key(group_id, t, p) for t, p in tps)
                keys.append(group_key(group_id))
                out[group_id] = ErrorCode.none
                log.info("deleted group %s", group_id)
            else:
                out[group_id] = ErrorCode.non_empty_group
        self._append_tombstones(keys)
        return out
