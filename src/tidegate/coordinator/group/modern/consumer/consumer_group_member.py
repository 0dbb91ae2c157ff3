"""A KIP-848 consumer group member (Kafka's ``ConsumerGroupMember``).

Immutable, and wholly made of what the group's records hold: the member metadata record
(instance and rack id, client id and host, subscription, rebalance timeout, server
assignor, and for a member that speaks the classic protocol its
:class:`ClassicMemberMetadata`) and the current assignment record (member epoch, previous
epoch, :class:`~tidegate.coordinator.group.modern.member_state.MemberState`, assigned
partitions, partitions pending revocation). A change is a new value:
``member.replace(rack_id="r1")`` (``dataclasses.replace``) or
:meth:`ConsumerGroupMember.update_member_epoch`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tidegate.coordinator.group.assignor.api import EMPTY_ASSIGNMENT, Assignment
from tidegate.coordinator.group.modern.member_state import MemberState


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """A protocol a classic-protocol member supports (name, subscription metadata)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Set for a member that joined through JoinGroup (online migration, reference 1.13):
    its session timeout and the protocols of its last JoinGroup."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...] = ()


def _empty() -> Assignment:
    return EMPTY_ASSIGNMENT


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    #: "" (or None, as a record may hold) = no regex
    subscribed_topic_regex: str | None = ""
    server_assignor_name: str | None = None
    assigned_partitions: Assignment = field(default_factory=_empty)
    partitions_pending_revocation: Assignment = field(default_factory=_empty)
    classic_member_metadata: ClassicMemberMetadata | None = None

    def replace(self, **changes: Any) -> ConsumerGroupMember:
        """A copy with ``changes`` (Kafka's ``ConsumerGroupMember.Builder``)."""
        return dataclasses.replace(self, **changes)

    def update_member_epoch(self, member_epoch: int, **changes: Any) -> ConsumerGroupMember:
        """A copy at ``member_epoch`` whose previous epoch is this one's epoch (Kafka's
        ``Builder.updateMemberEpoch``), with ``changes``."""
        return dataclasses.replace(
            self, member_epoch=member_epoch, previous_member_epoch=self.member_epoch, **changes
        )

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        """STABLE at the target assignment epoch."""
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    @property
    def use_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None
