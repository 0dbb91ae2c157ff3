"""Reconciliation: a consumer group member's next state toward its target assignment
(Kafka's ``CurrentAssignmentBuilder``, as in 4.2 -- KAFKA-19449 and KAFKA-19974 included;
reference 1.6).

Revoke before assign. Per topic, with T the member's target (empty for a topic it no
longer subscribes to): keep = current & T, revoke = current - keep, add = T - keep minus
the partitions another member still holds (those are *unreleased*: the member waits).

* revoke non-empty and the member still owns some of it -> UNREVOKED_PARTITIONS, epoch
  unchanged, assigned = keep, pending revocation = revoke;
* else add non-empty -> the target epoch, assigned = keep + add, UNRELEASED_PARTITIONS if
  it waits for some, else STABLE;
* else waiting -> the target epoch, UNRELEASED_PARTITIONS; else the target epoch, STABLE.

By state: STABLE recomputes when a newer target exists, else, if the subscription
changed, drops the topics no longer subscribed (to pending revocation while still owned);
UNREVOKED_PARTITIONS waits until the revoked partitions are no longer reported, then
recomputes; UNRELEASED_PARTITIONS recomputes every heartbeat; UNKNOWN (a state from a
newer version) fences the member unless it reports no partitions. Every epoch change
sets the previous epoch to the old one.

"Still owns": the heartbeat did not report its partitions (``owned_topic_partitions``
None), or it reports one pending revocation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence

from tidegate.coordinator.group.assignor.api import EMPTY_ASSIGNMENT, Assignment
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.subscription import subscribed_topic_ids
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import CodedError

#: The partitions a heartbeat reports owned: (topic id, partitions) entries as in the
#: request's TopicPartitions (None in the request = not reported).
OwnedTopicPartitions = Sequence[tuple[uuid.UUID, Collection[int]]]

#: (topic id, partition) -> the epoch of the member holding it, -1 if nobody does.
CurrentPartitionEpoch = Callable[[uuid.UUID, int], int]

_NONE: frozenset[int] = frozenset()


class FencedMemberEpochError(CodedError):
    """FENCED_MEMBER_EPOCH (110): the member must drop its partitions and rejoin."""

    code = 110


class CurrentAssignmentBuilder:
    """One reconciliation step for ``member``; :meth:`build` returns the member's next
    value (the member itself when nothing changes)."""

    def __init__(
        self,
        member: ConsumerGroupMember,
        *,
        target_assignment_epoch: int,
        target_assignment: Assignment,
        current_partition_epoch: CurrentPartitionEpoch,
        metadata_image: MetadataImage,
        owned_topic_partitions: OwnedTopicPartitions | None = None,
        has_subscription_changed: bool = False,
        resolved_regular_expressions: Mapping[str, ResolvedRegularExpression] | None = None,
    ) -> None:
        self.member = member
        self.target_assignment_epoch = target_assignment_epoch
        self.target_assignment = target_assignment
        self.current_partition_epoch = current_partition_epoch
        self.metadata_image = metadata_image
        self.owned_topic_partitions = owned_topic_partitions
        self.has_subscription_changed = has_subscription_changed
        self.resolved_regular_expressions = resolved_regular_expressions or {}
        self._subscribed: frozenset[uuid.UUID] | None = None

    def build(self) -> ConsumerGroupMember:
        """Raises :class:`FencedMemberEpochError` for a member in an unknown state that
        still reports partitions."""
        member = self.member
        state = member.state
        if state is MemberState.STABLE:
            if member.member_epoch != self.target_assignment_epoch:
                return self._compute_next_assignment(member.member_epoch)
            if self.has_subscription_changed:
                return self._update_current_assignment(member.member_epoch)
            return member
        if state is MemberState.UNREVOKED_PARTITIONS:
            if self._owns_revoked_partitions(member.partitions_pending_revocation):
                if self.has_subscription_changed:
                    return self._update_current_assignment(member.member_epoch)
                return member
            return self._compute_next_assignment(member.member_epoch)
        if state is MemberState.UNRELEASED_PARTITIONS:
            return self._compute_next_assignment(member.member_epoch)
        if self.owned_topic_partitions is None or len(self.owned_topic_partitions) > 0:
            raise FencedMemberEpochError(
                "The consumer group member is in a unknown state. "
                "The member must abandon all its partitions and rejoin."
            )
        return self._compute_next_assignment(self.target_assignment_epoch)

    def _subscribed_topic_ids(self) -> frozenset[uuid.UUID]:
        if self._subscribed is None:
            self._subscribed = subscribed_topic_ids(
                self.member, self.resolved_regular_expressions, self.metadata_image
            )
        return self._subscribed

    def _owns_revoked_partitions(self, revoked: Assignment) -> bool:
        if self.owned_topic_partitions is None:
            return True
        for topic_id, partitions in self.owned_topic_partitions:
            pending = revoked.get(topic_id)
            if pending and not pending.isdisjoint(partitions):
                return True
        return False

    def _update_current_assignment(self, member_epoch: int) -> ConsumerGroupMember:
        """Only drop the topics no longer subscribed (cheaper than a full recompute)."""
        member = self.member
        assigned = member.assigned_partitions
        subscribed = self._subscribed_topic_ids()
        pending: Mapping[uuid.UUID, frozenset[int]]
        if not subscribed and not member.partitions_pending_revocation:
            new_assigned: Assignment = EMPTY_ASSIGNMENT
            pending = assigned  # all of it goes
        else:
            dropped = [t for t in assigned if t not in subscribed]
            if not dropped:
                return member
            new_assigned = {t: p for t, p in assigned.items() if t in subscribed}
            merged = dict(member.partitions_pending_revocation)
            for topic_id in dropped:
                merged[topic_id] = merged.get(topic_id, _NONE) | assigned[topic_id]
            pending = merged
        if pending and self._owns_revoked_partitions(pending):
            return self._revoking(member_epoch, new_assigned, pending)
        # Already revoked: keep the state, shrink the assignment.
        return member.update_member_epoch(member_epoch, assigned_partitions=new_assigned)

    def _compute_next_assignment(self, member_epoch: int) -> ConsumerGroupMember:
        member = self.member
        assigned = member.assigned_partitions
        own_pending = member.partitions_pending_revocation
        target = self.target_assignment
        subscribed = self._subscribed_topic_ids()
        epoch_of = self.current_partition_epoch

        has_unreleased = False
        new_assigned: dict[uuid.UUID, frozenset[int]] = {}
        to_revoke: dict[uuid.UUID, frozenset[int]] = {}
        to_add: dict[uuid.UUID, frozenset[int]] = {}
        for topic_id in target.keys() | assigned.keys():
            wanted = target.get(topic_id, _NONE) if topic_id in subscribed else _NONE
            current = assigned.get(topic_id, _NONE)
            keep = current & wanted
            revoke = current - keep
            add = wanted - keep
            if add:
                # Held by someone else: wait. A partition this member is itself still
                # revoking is not held by "someone else" (KAFKA-19449).
                mine = own_pending.get(topic_id, _NONE)
                free = frozenset(p for p in add if p in mine or epoch_of(topic_id, p) == -1)
                if len(free) != len(add):
                    has_unreleased = True
                add = free
            if keep:
                new_assigned[topic_id] = keep
            if revoke:
                to_revoke[topic_id] = revoke
            if add:
                to_add[topic_id] = add

        if to_revoke and self._owns_revoked_partitions(to_revoke):
            return self._revoking(member_epoch, new_assigned, to_revoke)
        if to_add:
            for topic_id, partitions in to_add.items():
                new_assigned[topic_id] = new_assigned.get(topic_id, _NONE) | partitions
            state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        elif has_unreleased:
            state = MemberState.UNRELEASED_PARTITIONS
        else:
            state = MemberState.STABLE
        return member.update_member_epoch(
            self.target_assignment_epoch,
            state=state,
            assigned_partitions=new_assigned,
            partitions_pending_revocation=EMPTY_ASSIGNMENT,
        )

    def _revoking(
        self, member_epoch: int, assigned: Assignment, pending: Assignment
    ) -> ConsumerGroupMember:
        """UNREVOKED_PARTITIONS at ``member_epoch``: the member keeps ``assigned`` and must
        give up ``pending`` before it moves on."""
        return self.member.update_member_epoch(
            member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=assigned,
            partitions_pending_revocation=pending,
        )
