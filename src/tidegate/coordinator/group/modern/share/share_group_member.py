"""A KIP-932 share group member (Kafka's ``ShareGroupMember``) and its reconciliation
(Kafka's ``ShareGroupAssignmentBuilder``).

Immutable, and wholly made of what the group's records hold: the member metadata record
(rack id, client id and host, subscribed topic names) and the current assignment record
(member epoch, previous epoch, state, assigned partitions). A share group has no static
members, no regular expressions and no revocation: a member always moves straight to the
target epoch with its target, STABLE.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tidegate.coordinator.group.assignor.api import EMPTY_ASSIGNMENT, Assignment
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.topics import MetadataImage, topic_ids


def _empty() -> Assignment:
    return EMPTY_ASSIGNMENT


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned_partitions: Assignment = field(default_factory=_empty)

    #: a share group member has no instance id (the target assignment builder asks)
    instance_id = None
    #: nor a regular expression
    subscribed_topic_regex = None

    def replace(self, **changes: Any) -> ShareGroupMember:
        """A copy with ``changes`` (Kafka's ``ShareGroupMember.Builder``)."""
        return dataclasses.replace(self, **changes)

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        """STABLE at the target assignment epoch."""
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch


def reconcile(
    member: ShareGroupMember,
    target_assignment_epoch: int,
    target_assignment: Assignment,
    has_subscription_changed: bool,
    image: MetadataImage,
) -> ShareGroupMember:
    """Kafka's ``ShareGroupAssignmentBuilder.build``: a member behind the target epoch
    moves to it, STABLE, with its target; a member whose subscription changed keeps its
    epoch. Either way it gets only the target's topics it subscribes to (the target may
    lag behind the subscription)."""
    if target_assignment_epoch != member.member_epoch:
        return member.replace(
            state=MemberState.STABLE,
            assigned_partitions=_subscribed_only(member, target_assignment, image),
            member_epoch=target_assignment_epoch,
            previous_member_epoch=member.member_epoch,
        )
    if has_subscription_changed:
        return member.replace(
            assigned_partitions=_subscribed_only(member, target_assignment, image)
        )
    return member


def _subscribed_only(
    member: ShareGroupMember, assignment: Assignment, image: MetadataImage
) -> Assignment:
    subscribed = topic_ids(member.subscribed_topic_names, image)
    if all(topic_id in subscribed for topic_id in assignment):
        return assignment  # reused as it is, as Kafka does
    return {t: p for t, p in assignment.items() if t in subscribed}
