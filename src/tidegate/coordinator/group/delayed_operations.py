"""The group coordinator's timeouts, as delayed operations (Kafka's DelayedHeartbeat,
DelayedJoin, InitialDelayedJoin and DelayedSync).

They sit on the timing wheels of the coordinator's two purgatories, "Heartbeat"
(:class:`DelayedHeartbeat`, keyed by :func:`member_key`) and "Rebalance" (the join
and sync phases, keyed by :func:`join_key` / :func:`sync_key`); completing or expiring
one calls back into the
:class:`~tidegate.coordinator.group.group_coordinator.GroupCoordinator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.coordinator.group.group_metadata import (
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    GroupMetadata,
)
from tidegate.server.purgatory import DelayedOperation

if TYPE_CHECKING:
    from tidegate.coordinator.group.group_coordinator import GroupCoordinator


def member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("member", group_id, member_id)


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


class DelayedHeartbeat(DelayedOperation):
    """Session expiry of one member (or a pending member's wait for its second JoinGroup)."""

    __slots__ = ("coordinator", "group", "is_pending", "member_id")

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str,
                 is_pending: bool, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.coordinator._try_complete_heartbeat(self)

    def on_expiration(self) -> None:
        self.coordinator._on_expire_heartbeat(self.group, self.member_id, self.is_pending)


class DelayedJoin(DelayedOperation):
    """The rebalance's join phase: completes when every member rejoined, or on timeout."""

    __slots__ = ("coordinator", "group")

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.group.has_all_members_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator._on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group: wait ``group.initial.rebalance.delay.ms``,
    again after each new member, until the rebalance timeout is used up."""

    __slots__ = ("configured_delay", "remaining_ms")

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata,
                 configured_delay: int, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay = configured_delay
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.coordinator.rebalance_purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, group, self.configured_delay, delay, remaining),
                [join_key(group.group_id)],
            )
        else:
            self.coordinator._on_complete_join(group)


class DelayedSync(DelayedOperation):
    """The sync phase: members that do not send SyncGroup within the rebalance timeout
    are removed and the group rebalances again."""

    __slots__ = ("coordinator", "generation_id", "group")

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, generation_id: int,
                 timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        group = self.group
        if (
            self.generation_id != group.generation_id
            or group.state in (DEAD, EMPTY, PREPARING_REBALANCE)
            or not group.pending_sync_members
        ):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        self.coordinator._on_expire_pending_sync(self.group, self.generation_id)
