"""What a KIP-848 consumer group and a KIP-932 share group have in common (Kafka's
``ModernGroup``): the group epoch and metadata hash, the members, the target assignment
and its epoch, how many members subscribe to each topic name, the subscription type, the
metadata refresh deadline, and the errors the coordinator answers with.

:class:`~.consumer.consumer_group.ConsumerGroup` and :class:`~.share.share_group.ShareGroup`
extend it; everything here is the replay of the group's records, changed only by the
coordinator's replay.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from tidegate.clock import MonotonicMs
from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    HOMOGENEOUS,
    Assignment,
    SubscriptionType,
)
from tidegate.coordinator.group.modern.records import CoordinatorRecord, GroupRecordTypes, tombstone
from tidegate.coordinator.group.modern.subscription import SubscriptionCount
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import BrokerResponseError, ErrorCode
from tidegate.utils import INT32_MAX

#: Kafka's METADATA_REFRESH_INTERVAL_MS: after a refresh, the subscribed topics' metadata
#: is refreshed again only when a topic changes (or a write failed).
METADATA_REFRESH_INTERVAL_MS = INT32_MAX
#: a metadata refresh deadline already passed: the next heartbeat refreshes
_REFRESH_NOW = MonotonicMs(-(2**63))


def api_error(code: ErrorCode, message: str) -> BrokerResponseError:
    """An error the coordinator answers with (Kafka's ``ApiException`` of that code)."""
    return BrokerResponseError(code.value, message)


def error_code_of(exc: BrokerResponseError) -> ErrorCode:
    """The code of an error the coordinator raised."""
    return ErrorCode.unknown_server_error if exc.code is None else ErrorCode(exc.code)


class IllegalStateError(RuntimeError):
    """Records that contradict the group's state (Kafka's IllegalStateException): a bug,
    or a log not written by this coordinator."""


class ModernMember(Protocol):
    """What the group and its coordinator read of a member (a consumer or a share group
    member)."""

    @property
    def member_id(self) -> str: ...

    @property
    def member_epoch(self) -> int: ...

    @property
    def subscribed_topic_names(self) -> frozenset[str]: ...

    def replace(self, **changes: Any) -> Any: ...


M = TypeVar("M", bound=ModernMember)


# -- subscription counts (never changed in place: computed copies share the count objects) ----
def add_count(counts: dict[str, int], key: str, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)


def add_topic_count(
    counts: dict[str, SubscriptionCount], name: str, by_name: int = 0, by_regex: int = 0
) -> None:
    old = counts.get(name)
    if old is None:
        new = SubscriptionCount(by_name, by_regex)
    else:
        new = SubscriptionCount(old.by_name_count + by_name, old.by_regex_count + by_regex)
    if new.by_name_count <= 0 and new.by_regex_count <= 0:
        counts.pop(name, None)
    else:
        counts[name] = new


def update_name_counts(
    counts: dict[str, SubscriptionCount], old: ModernMember | None, new: ModernMember | None
) -> None:
    """Count ``new``'s subscribed names instead of ``old``'s."""
    if old is not None:
        for name in old.subscribed_topic_names:
            add_topic_count(counts, name, by_name=-1)
    if new is not None:
        for name in new.subscribed_topic_names:
            add_topic_count(counts, name, by_name=1)


T = TypeVar("T")


def described_topic_partitions(
    assignment: Assignment, image: MetadataImage, make: Callable[..., T]
) -> list[T]:
    """An assignment as a describe response's topic-partitions (``make(topic_id=...,
    topic_name=..., partitions=...)``); topics that no longer exist are left out."""
    out = []
    for topic_id, partitions in assignment.items():
        topic = image.get_by_id(topic_id)
        if topic is not None:
            out.append(
                make(topic_id=topic_id, topic_name=topic.name, partitions=sorted(partitions))
            )
    return out


class ModernGroup(Generic[M]):
    """A modern group's state shared by both protocols (Kafka's ``ModernGroup``)."""

    #: the types of the protocol's records
    RECORDS: ClassVar[GroupRecordTypes]

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, M] = {}
        #: member id -> its target assignment
        self.target_assignment: dict[str, Assignment] = {}
        #: topic name -> how the members subscribe to it
        self.subscribed_topic_names: dict[str, SubscriptionCount] = {}
        self.subscription_type: SubscriptionType = HOMOGENEOUS
        #: (deadline on the monotonic clock, the group epoch it was set at); soft state
        self.metadata_refresh_deadline: tuple[MonotonicMs, int] = (_REFRESH_NOW, 0)
        self.dead = False

    @property
    def state(self) -> Any:
        """The group's state (the protocol's enum; its ``str`` is Kafka's state name)."""
        raise NotImplementedError

    def _new_member(self, member_id: str) -> M:
        """A new member of this group's kind (not added)."""
        raise NotImplementedError

    def update_member(self, new: M) -> None:
        """Add or replace a member, keeping the counts derived from the members."""
        raise NotImplementedError

    def remove_member(self, member_id: str) -> None:
        raise NotImplementedError

    def is_empty(self) -> bool:
        return not self.members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def num_members(self) -> int:
        return len(self.members)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names

    def has_subscriptions(self) -> bool:
        """Whether the members subscribe to anything (a topic change concerns the group)."""
        return bool(self.subscribed_topic_names)

    # -- members ------------------------------------------------------------------------------
    def member(self, member_id: str) -> M:
        """The member; UNKNOWN_MEMBER_ID if there is none."""
        member = self.members.get(member_id)
        if member is None:
            raise api_error(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {self.group_id}."
            )
        return member

    def get_or_maybe_create_member(self, member_id: str, create_if_not_exists: bool) -> M:
        """The member, or a new one (not added to the group) when ``create_if_not_exists``."""
        member = self.members.get(member_id)
        if member is not None:
            return member
        if not create_if_not_exists:
            return self.member(member_id)
        return self._new_member(member_id)

    # -- target assignment ------------------------------------------------------------------
    def update_target_assignment(self, member_id: str, assignment: Assignment) -> None:
        self.target_assignment[member_id] = assignment

    def remove_target_assignment(self, member_id: str) -> None:
        self.target_assignment.pop(member_id, None)

    def target_assignment_of(self, member_id: str) -> Assignment:
        return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def compute_subscribed_topic_names(
        self, old: M | None, new: M | None
    ) -> dict[str, SubscriptionCount]:
        """The subscription counts once ``old`` is replaced by ``new`` (a copy)."""
        counts = dict(self.subscribed_topic_names)
        update_name_counts(counts, old, new)
        return counts

    # -- deletion ---------------------------------------------------------------------------------
    def create_group_tombstone_records(self) -> list[CoordinatorRecord]:
        """Every record of the group as a tombstone, in Kafka's order: members' current
        and target assignments, the target epoch, members, the protocol's own records
        (:meth:`_own_tombstone_records`), then the group."""
        types, group_id = self.RECORDS, self.group_id
        return [
            *(tombstone(types.current_member_assignment, group_id, m) for m in self.members),
            *(tombstone(types.target_assignment_member, group_id, m) for m in self.members),
            tombstone(types.target_assignment_metadata, group_id),
            *(tombstone(types.member_metadata, group_id, m) for m in self.members),
            *self._own_tombstone_records(),
            tombstone(types.group_metadata, group_id),
        ]

    def _own_tombstone_records(self) -> list[CoordinatorRecord]:
        return []

    # -- metadata refresh (soft state, not in any record) -------------------------------------
    def set_metadata_refresh_deadline(self, deadline_ms: MonotonicMs, group_epoch: int) -> None:
        self.metadata_refresh_deadline = (deadline_ms, group_epoch)

    def request_metadata_refresh(self) -> None:
        self.metadata_refresh_deadline = (_REFRESH_NOW, 0)

    def has_metadata_expired(self, now_ms: MonotonicMs) -> bool:
        """A refresh is due when the deadline passed, or when the epoch it was set at is
        above the group's (the write that set it failed)."""
        deadline, epoch = self.metadata_refresh_deadline
        return now_ms >= deadline or self.group_epoch < epoch


def topic_partitions_of(assignments: Iterable[Assignment]) -> Mapping[uuid.UUID, set[int]]:
    """The union of assignments, topic id -> partitions."""
    out: dict[uuid.UUID, set[int]] = {}
    for assignment in assignments:
        for topic_id, partitions in assignment.items():
            out.setdefault(topic_id, set()).update(partitions)
    return out
