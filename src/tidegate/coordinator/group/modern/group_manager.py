"""What the consumer group and the share group coordinators share (the runtime half of
Kafka's ``GroupMetadataManager`` and ``CoordinatorRuntime``): records first, timers on the
timing wheel, per-group configs, the topics' metadata hash.

**Records first.** An operation (a heartbeat, a leave, a timeout, an admin request)
computes the records of what changes without touching any group
(:class:`CoordinatorOperation`); they are appended to ``__consumer_offsets`` through the
injected ``append`` (``OffsetsLog.append``: one batch through
``ReplicaManager.append_records`` with acks=all) and then replayed into the groups
(:meth:`ModernGroupManager.replay`, the same code a broker start runs over the log). The
answer waits for the batch to be durable; a failed append changes nothing and answers as
Kafka does (COORDINATOR_NOT_AVAILABLE for UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS
and REQUEST_TIMED_OUT; NOT_COORDINATOR for storage errors). An operation that writes
nothing answers once the last write before it is durable, so nobody is answered with a
state that could still be lost.

**Timers** are tasks on the timing wheel the classic coordinator's heartbeat purgatory
runs on (its ``SystemTimer``, advanced by the broker's one timer reaper), keyed by (kind,
group id, member id): scheduling a key again replaces its task, and a task that was
replaced or cancelled never runs.

**Replay at start**: :meth:`ModernGroupManager.replay_batch` takes every batch of
``__consumer_offsets`` and replays the records of this manager's types; the others
(offsets, classic groups, the other protocol's groups) are left to their owners.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from tidegate.clock import Clock
from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    PartitionAssignorException,
)
from tidegate.coordinator.group.group_metadata_manager import (
    AppendError,
    PendingAppend,
    coordinator_operation_error,
    decode_coordinator_record,
    encode_coordinator_record,
    parse_key,
)
from tidegate.coordinator.group.modern.modern_group import (
    IllegalStateError,
    ModernGroup,
    ModernMember,
    api_error,
    error_code_of,
)
from tidegate.coordinator.group.modern.records import (
    CoordinatorRecord,
    GroupMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    member_updated_with,
    target_assignment_records,
)
from tidegate.coordinator.group.modern.subscription import SubscriptionCount
from tidegate.coordinator.group.modern.target_assignment_builder import TargetAssignmentBuilder
from tidegate.coordinator.group.modern.topics import MetadataImage, compute_metadata_hash
from tidegate.errors import BrokerResponseError, ErrorCode
from tidegate.log.replay import ReplayedBatch
from tidegate.server.timer import FunctionTask, SystemTimer

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from tidegate.coordinator.group.modern.records import RecordValue

log = logging.getLogger(__name__)


#: (key, value-or-None) pairs appended as one batch; returns its durability, raises
#: AppendError or OSError when nothing was appended (OffsetsLog.append).
AppendRecords = Callable[[Sequence[tuple[bytes, bytes | None]]], PendingAppend]
#: group id -> its group configs (IncrementalAlterConfigs on a GROUP resource), key -> value
GroupConfigLookup = Callable[[str], Mapping[str, int]]
#: (kind, group id, member id)
TimerKey = tuple[str, str, str]


def no_group_configs(group_id: str) -> Mapping[str, int]:
    return {}


def is_blank(value: str | None) -> bool:
    """Given but empty or whitespace (a request field INVALID_REQUEST refuses)."""
    return value is not None and not value.strip()


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """A Consumer/ShareGroupHeartbeat response's fields: ``assignment`` None = not sent."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(slots=True)
class CoordinatorOperation:
    """What an operation writes and does once written."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    #: run after the records are appended and replayed: timers, follow-up operations
    after: list[Callable[[], None]] = field(default_factory=list)


class GroupProtocolConfig(Protocol):
    """The broker's configs of a modern group protocol (``group.consumer.*`` or
    ``group.share.*``) the shared machinery reads."""

    @property
    def session_timeout_ms(self) -> int: ...

    @property
    def heartbeat_interval_ms(self) -> int: ...

    @property
    def max_size(self) -> int: ...


G = TypeVar("G", bound=ModernGroup[Any])
M = TypeVar("M", bound=ModernMember)


class ModernGroupManager(Generic[G, M]):
    """The shared machinery of a modern group protocol's coordinator; a subclass names
    its record types, its timers' kinds and its group configs, replays its records and
    says how members are fenced."""

    #: the record types :meth:`replay` applies (and :meth:`replay_batch` hands it)
    RECORD_TYPES: ClassVar[frozenset[RecordType]]
    #: the values of the member metadata and current assignment records
    MEMBER_VALUES: ClassVar[tuple[type[DataclassInstance], ...]]
    #: the kinds of a member's timers (:meth:`_cancel_timers` cancels them all)
    TIMER_KINDS: ClassVar[tuple[str, ...]] = ("session",)
    #: the protocol's name in log lines and errors ("consumer", "share")
    PROTOCOL: ClassVar[str]
    #: the group configs of the session timeout and heartbeat interval
    SESSION_TIMEOUT_MS_CONFIG: ClassVar[str]
    HEARTBEAT_INTERVAL_MS_CONFIG: ClassVar[str]

    def __init__(
        self,
        config: GroupProtocolConfig,
        *,
        image: MetadataImage,
        append: AppendRecords,
        timer: SystemTimer,
        clock: Clock,
        group_configs: GroupConfigLookup = no_group_configs,
    ) -> None:
        self.config = config
        self.image = image
        self._append = append
        self.timer = timer
        self.clock = clock
        self.group_configs = group_configs
        self.groups: dict[str, G] = {}
        self._timers: dict[TimerKey, FunctionTask] = {}
        self._topic_hash_cache: dict[str, int] = {}
        self._image_version = image.version
        #: the last append: an operation without records answers once it is durable
        self._last_append: PendingAppend | None = None
        self.active = False
        #: group epoch bumps (Kafka's consumer-/share-group-rebalance-count)
        self.rebalances = 0

    # -- lifecycle -------------------------------------------------------------------------
    def on_loaded(self) -> None:
        """The log is replayed: arm every member's timers (Kafka's ``onLoaded``), and
        serve."""
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_timers_on_load(group, member)
            log.info(
                "loaded %s group %s (epoch %d, %d member(s))",
                self.PROTOCOL, group.group_id, group.group_epoch, len(group.members),
            )  # fmt: skip
        self.active = True

    def _schedule_timers_on_load(self, group: G, member: M) -> None:
        self._schedule_session_timeout(group.group_id, member.member_id)

    # -- replay (Kafka's GroupMetadataManager.replay for each record type) ---------------------
    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record (a write just made, or the log at load); one of another type
        (the classic group tombstone a consumer group writes) is not this manager's."""
        t, group_id, key, value = record.type, record.group_id, record.key, record.value
        if t not in self.RECORD_TYPES:
            return
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return  # a tombstone of something already gone
            group = self.groups[group_id] = self._new_group(group_id)
        if value is None:
            self._replay_tombstone(group, t, key)
        elif isinstance(value, GroupMetadataValue):
            group.group_epoch = value.epoch
            group.metadata_hash = value.metadata_hash
        elif isinstance(value, TargetAssignmentMemberValue):
            group.update_target_assignment(key, value.partitions)
        elif isinstance(value, TargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(value, self.MEMBER_VALUES):
            member = group.get_or_maybe_create_member(key, True)
            group.update_member(member_updated_with(member, value))
        else:
            self._replay_own_value(group, key, value)

    def _replay_tombstone(self, group: G, t: RecordType, key: str) -> None:
        """A tombstone, with Kafka's checks that the group's records are deleted in order
        (IllegalStateError otherwise)."""
        types, group_id = group.RECORDS, group.group_id
        if t is types.group_metadata:
            if group.members or group.target_assignment or group.assignment_epoch != -1:
                raise IllegalStateError(
                    f"a tombstone deletes {self.PROTOCOL} group {group_id} before its members "
                    "and target assignment"
                )
            group.dead = True
            del self.groups[group_id]
        elif t is types.member_metadata:
            member = group.members.get(key)
            if member is not None and (member.member_epoch != -1 or key in group.target_assignment):
                raise IllegalStateError(
                    f"a tombstone deletes member {key} of {self.PROTOCOL} group {group_id} "
                    "before its assignments"
                )
            group.remove_member(key)
        elif t is types.current_member_assignment:
            member = group.members.get(key)
            if member is not None:
                group.update_member(self._member_without_assignment(member))
        elif t is types.target_assignment_member:
            group.remove_target_assignment(key)
        elif t is types.target_assignment_metadata:
            if group.target_assignment:
                raise IllegalStateError(
                    f"a tombstone deletes the target assignment of {self.PROTOCOL} group "
                    f"{group_id} while members still have one"
                )
            group.assignment_epoch = -1
        else:
            self._replay_own_tombstone(group, t, key)

    def _new_group(self, group_id: str) -> G:
        raise NotImplementedError

    def _member_without_assignment(self, member: M) -> M:
        """The member once its current assignment is tombstoned: epoch -1, nothing
        assigned (as Kafka's replay leaves it before the member's own tombstone)."""
        raise NotImplementedError

    def _replay_own_value(self, group: G, key: str, value: RecordValue) -> None:
        """A value of the protocol's own record types (regexes, share-partitions)."""
        raise NotImplementedError

    def _replay_own_tombstone(self, group: G, t: RecordType, key: str) -> None:
        raise NotImplementedError

    def replay_batch(self, batch: ReplayedBatch) -> None:
        """One batch of ``__consumer_offsets`` at load, in log order: the records of this
        manager's types are replayed, every other record is left to its owner."""
        if batch.is_control or batch.is_transactional:
            return
        for r in batch.records:
            if r.key is None:
                continue
            try:
                record = decode_coordinator_record(parse_key(r.key), r.value)
                if record is not None and record.type in self.RECORD_TYPES:
                    self.replay(record)
            except (ValueError, KeyError, IndexError, TypeError, IllegalStateError) as exc:
                log.warning("skipping a record of __consumer_offsets at %d: %s", r.offset, exc)

    def shutdown(self) -> None:
        self.active = False
        for task in self._timers.values():
            task.cancel()
        self._timers.clear()

    # -- metrics -------------------------------------------------------------------------------
    def state_counts(self) -> dict[str, int]:
        """Groups per state ("Empty", "Stable", ...): Kafka's consumer-/share-group-count."""
        counts: dict[str, int] = {}
        for group in self.groups.values():
            state = str(group.state)
            counts[state] = counts.get(state, 0) + 1
        return counts

    def group_summaries(self) -> list[tuple[str, str, int, int]]:
        """(group id, state, group epoch, members) of every group, for the metrics."""
        return [(g.group_id, str(g.state), g.group_epoch, len(g.members)) for g in self.groups.values()]

    # -- heartbeats ---------------------------------------------------------------------------
    def _heartbeat(
        self,
        name: str,
        group_id: str,
        handle: Callable[[], tuple[CoordinatorOperation, HeartbeatResult]],
        callback: Callable[[HeartbeatResult], None],
        then: Callable[[HeartbeatResult], None] | None = None,
    ) -> None:
        """Run a heartbeat: ``handle`` computes its operation and answer (or raises the
        error to answer); the answer goes to ``callback`` once the operation is durable,
        or to ``then`` if given (which answers ``callback`` itself)."""
        try:
            if not self.active:
                raise api_error(ErrorCode.coordinator_not_available, "The coordinator is not active.")
            op, result = handle()
        except BrokerResponseError as exc:
            callback(HeartbeatResult(error_code_of(exc), exc.message))
            return
        except Exception as exc:  # a bug: answer it rather than leave the member hanging
            log.exception("%s of group %s failed", name, group_id)
            callback(HeartbeatResult(ErrorCode.unknown_server_error, str(exc)))
            return

        def done(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                callback(HeartbeatResult(error))
            elif then is None:
                callback(result)
            else:
                then(result)

        self._commit(op, done)

    # -- writing -----------------------------------------------------------------------------
    def _commit(
        self, op: CoordinatorOperation, on_done: Callable[[ErrorCode], None] | None = None
    ) -> None:
        """Append the operation's records as one batch, replay them, run its follow-ups;
        ``on_done`` gets NONE once the batch is durable, else the error to answer."""

        def done(error: ErrorCode) -> None:
            if on_done is not None:
                on_done(ErrorCode.none if error is ErrorCode.none else coordinator_operation_error(error))

        if not op.records:
            for action in op.after:
                action()
            if self._last_append is None:
                done(ErrorCode.none)
            else:
                self._last_append.add_callback(lambda _error: done(ErrorCode.none))
            return
        try:
            pending = self._append([encode_coordinator_record(r) for r in op.records])
        except AppendError as exc:
            self._log_failed_write(op, exc)
            done(exc.error)
            return
        except OSError as exc:
            self._log_failed_write(op, exc)
            done(ErrorCode.kafka_storage_error)
            return
        self._last_append = pending
        try:
            for record in op.records:
                self.replay(record)
            for action in op.after:
                action()
        except Exception:
            log.exception("replaying %s group records failed: %s", self.PROTOCOL, op.records)
            done(ErrorCode.unknown_server_error)
            return
        pending.add_callback(done)

    def _log_failed_write(self, op: CoordinatorOperation, exc: Exception) -> None:
        log.error("could not write %d %s group record(s): %s", len(op.records), self.PROTOCOL, exc)

    # -- timers --------------------------------------------------------------------------------
    def _schedule(self, key: TimerKey, delay_ms: int, fn: Callable[[], None]) -> None:
        self._cancel(key)

        def run() -> None:
            if self._timers.get(key) is task:
                del self._timers[key]
                fn()

        task = FunctionTask(delay_ms, run)
        self._timers[key] = task
        self.timer.add(task)

    def _cancel(self, key: TimerKey) -> None:
        task = self._timers.pop(key, None)
        if task is not None:
            task.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for kind in self.TIMER_KINDS:
            self._cancel((kind, group_id, member_id))

    def timeouts(self, group_id: str, member_id: str) -> dict[str, int]:
        """The member's armed timeouts, kind -> expiration (monotonic ms): for tests and
        debugging."""
        out = {}
        for kind in self.TIMER_KINDS:
            task = self._timers.get((kind, group_id, member_id))
            entry = None if task is None else task.timer_task_entry
            if entry is not None:
                out[kind] = entry.expiration_ms
        return out

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self._schedule(
            ("session", group_id, member_id),
            self._session_timeout_ms(group_id),
            lambda: self._fence_member_operation(group_id, member_id, "the member session expired"),
        )

    def _group_config(self, group_id: str, key: str, default: int) -> int:
        """A group config (IncrementalAlterConfigs on the GROUP resource), else the
        broker's default."""
        return int(self.group_configs(group_id).get(key, default))

    def _session_timeout_ms(self, group_id: str) -> int:
        return self._group_config(
            group_id, self.SESSION_TIMEOUT_MS_CONFIG, self.config.session_timeout_ms
        )

    def _heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_config(
            group_id, self.HEARTBEAT_INTERVAL_MS_CONFIG, self.config.heartbeat_interval_ms
        )

    # -- members -------------------------------------------------------------------------------
    def _throw_if_group_is_full(self, group: G, member_id: str) -> None:
        """GROUP_MAX_SIZE_REACHED for a member that would join a full group (members
        already in it are never refused)."""
        limit = self.config.max_size
        if group.num_members() >= limit and (not member_id or not group.has_member(member_id)):
            raise api_error(
                ErrorCode.group_max_size_reached,
                f"The {self.PROTOCOL} group has reached its maximum capacity of {limit} members.",
            )

    def _build_target_assignment(
        self,
        group: G,
        builder: TargetAssignmentBuilder,
        assignor_name: str,
        member_id: str,
        op: CoordinatorOperation,
    ) -> Assignment:
        """Run the target assignment builder: its records go into ``op``; the answer is
        ``member_id``'s new target. An assignor failure answers UNKNOWN_SERVER_ERROR
        (and nothing is written)."""
        try:
            result = builder.build()
        except PartitionAssignorException as exc:
            message = f"Failed to compute a new target assignment for epoch {builder.group_epoch}: {exc}"
            log.error("[GroupId %s] %s.", group.group_id, message)
            raise api_error(ErrorCode.unknown_server_error, message) from exc
        log.info(
            "[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.",
            group.group_id, builder.group_epoch, assignor_name,
        )  # fmt: skip
        op.records.extend(target_assignment_records(group.RECORDS, result.records))
        return result.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def _fence_members(self, group: G, members: Sequence[M]) -> CoordinatorOperation:
        """The operation that removes members (a leave, a timeout): their records
        tombstoned, the group epoch bumped, their timers cancelled."""
        raise NotImplementedError

    def _fence_member_operation(self, group_id: str, member_id: str, reason: str) -> None:
        """Fence a member now (its session or rebalance timed out); nothing if it is
        gone already."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        log.info(
            "[GroupId %s] Member %s fenced from the group because %s.", group_id, member_id, reason
        )
        self._maybe_update_metadata_image()
        self._commit(self._fence_members(group, [member]))

    # -- topics --------------------------------------------------------------------------------
    def _maybe_update_metadata_image(self) -> bool:
        """Kafka's ``onMetadataUpdate``, by the image's version: when topics changed, the
        topic hashes are recomputed and every group subscribed to something refreshes its
        metadata hash on its next heartbeat. Whether the image changed."""
        version = self.image.version
        if version == self._image_version:
            return False
        self._image_version = version
        self._topic_hash_cache.clear()
        for group in self.groups.values():
            if group.has_subscriptions():
                group.request_metadata_refresh()
        return True

    def _metadata_hash(self, names: Collection[str] | Mapping[str, SubscriptionCount]) -> int:
        return compute_metadata_hash(names, self.image, self._topic_hash_cache)

    def _log_bump(self, group_id: str, group_epoch: int, metadata_hash: int) -> None:
        self.rebalances += 1
        log.info(
            "[GroupId %s] Bumped group epoch to %d with metadata hash %d.",
            group_id, group_epoch, metadata_hash,
        )  # fmt: skip
