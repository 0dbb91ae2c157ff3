"""A KIP-848 consumer group (Kafka's ``ModernGroup`` and ``ConsumerGroup``).

Everything here is the replay of the group's records (:mod:`.records`): the group epoch
and metadata hash, the members (:class:`ConsumerGroupMember`, with their current
assignments), the target assignment and its epoch, and the resolved regular expressions.
The :class:`~.consumer_group_manager.ConsumerGroupManager` changes a group only by
replaying the records it wrote, so the group after a restart (a replay of the log) is the
group before it.

Derived from those, kept up to date member by member as Kafka keeps them:

* the static members (instance id -> member id);
* the **partition epochs**: every partition a member holds or is still revoking -> that
  member's epoch. A partition in this map is unreleased and cannot go to another member
  (reconciliation asks :meth:`ConsumerGroup.current_partition_epoch`);
* the subscription counts: topic name -> how many members name it and how many resolved
  regexes match it; regex -> how many members use it; server assignor -> how many
  members prefer it; members speaking the classic protocol and the protocols they
  support (online migration);
* the subscription type (HOMOGENEOUS / HETEROGENEOUS).

The state (reference 1.12) is computed when asked, first match: EMPTY (no members),
ASSIGNING (group epoch above the assignment epoch), RECONCILING (a member not STABLE at
the assignment epoch), else STABLE; DEAD once deleted.

Offsets (reference 1.14): :meth:`ConsumerGroup.validate_offset_commit` and
:meth:`ConsumerGroup.validate_offset_fetch` raise Kafka's errors (UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH for a consumer-protocol member, ILLEGAL_GENERATION for a classic one,
UNSUPPORTED_VERSION for a consumer-protocol member committing below OffsetCommit v9);
:meth:`ConsumerGroup.validate_delete_group` wants an EMPTY group (NON_EMPTY_GROUP).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping

from tidegate.coordinator.group.assignor.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    SubscriptionType,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.records import (
    CoordinatorRecord,
    new_consumer_group_regular_expression_tombstone,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.modern_group import (
    IllegalStateError,
    ModernGroup,
    add_count,
    add_topic_count,
    api_error,
    described_topic_partitions,
    update_name_counts,
)
from tidegate.coordinator.group.modern.records import CONSUMER_GROUP_RECORDS
from tidegate.coordinator.group.modern.subscription import SubscriptionCount, subscription_type
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import ErrorCode
from tidegate.protocol.messages import consumer_group_describe

#: The group's protocol type, as ListGroups and DescribeGroups show it.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: A member's type in ConsumerGroupDescribe v1 (KIP-1099).
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


def _regex(member: ConsumerGroupMember | None) -> str | None:
    """The member's regex, None when it has none (Kafka's ``subscribedTopicRegexOrNull``)."""
    if member is None or not member.subscribed_topic_regex:
        return None
    return member.subscribed_topic_regex


def _update_assignor_counts(
    counts: dict[str, int], old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
) -> None:
    if old is not None and old.server_assignor_name is not None:
        add_count(counts, old.server_assignor_name, -1)
    if new is not None and new.server_assignor_name is not None:
        add_count(counts, new.server_assignor_name, 1)


def _preferred(counts: Mapping[str, int]) -> str | None:
    """The assignor most members prefer (ties: the one counted first, as Java's
    ``max`` over the map keeps the first maximum it meets)."""
    best: str | None = None
    for name, count in counts.items():
        if best is None or count > counts[best]:
            best = name
    return best


def described_partitions(
    assignment: Assignment, image: MetadataImage
) -> consumer_group_describe.Assignment:
    """An assignment with topic names; topics that no longer exist are left out."""
    return consumer_group_describe.Assignment(
        topic_partitions=described_topic_partitions(
            assignment, image, consumer_group_describe.TopicPartitions
        )
    )


class ConsumerGroup(ModernGroup[ConsumerGroupMember]):
    RECORDS = CONSUMER_GROUP_RECORDS

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        #: instance id -> member id
        self.static_members: dict[str, str] = {}
        #: regex -> members subscribed to it
        self.subscribed_regular_expressions: dict[str, int] = {}
        self.resolved_regular_expressions: dict[str, ResolvedRegularExpression] = {}
        #: server assignor name -> members preferring it
        self.server_assignors: dict[str, int] = {}
        self.num_classic_protocol_members = 0
        #: classic protocol name -> classic-protocol members supporting it
        self.classic_protocol_members_supported_protocols: dict[str, int] = {}
        self._partition_epochs: dict[uuid.UUID, dict[int, int]] = {}

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, {self.state}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={len(self.members)})"
        )

    # -- state ------------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        epoch = self.assignment_epoch
        for member in self.members.values():
            if not member.is_reconciled_to(epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def has_subscriptions(self) -> bool:
        return bool(self.subscribed_topic_names or self.subscribed_regular_expressions)

    # -- members ------------------------------------------------------------------------------
    def _new_member(self, member_id: str) -> ConsumerGroupMember:
        return ConsumerGroupMember(member_id)

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_member_id(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def update_member(self, new: ConsumerGroupMember) -> None:
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        update_name_counts(self.subscribed_topic_names, old, new)
        _update_assignor_counts(self.server_assignors, old, new)
        if old is not None:
            self._remove_partition_epochs(old)
        self._add_partition_epochs(new.assigned_partitions, new.member_epoch)
        self._add_partition_epochs(new.partitions_pending_revocation, new.member_epoch)
        self._update_regex_counts(old, new)
        if old is not None and old.instance_id is not None:
            self.static_members.pop(old.instance_id, None)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        self._update_classic_counts(old, new)
        self._update_subscription_type()

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        update_name_counts(self.subscribed_topic_names, old, None)
        _update_assignor_counts(self.server_assignors, old, None)
        self._remove_partition_epochs(old)
        self._update_regex_counts(old, None)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        self._update_classic_counts(old, None)
        self._update_subscription_type()

    def _update_regex_counts(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> None:
        old_regex, new_regex = _regex(old), _regex(new)
        if old_regex is not None:
            add_count(self.subscribed_regular_expressions, old_regex, -1)
        if new_regex is not None:
            add_count(self.subscribed_regular_expressions, new_regex, 1)

    def _update_classic_counts(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> None:
        for member, delta in ((old, -1), (new, 1)):
            metadata = None if member is None else member.classic_member_metadata
            if metadata is None:
                continue
            self.num_classic_protocol_members += delta
            for protocol in metadata.supported_protocols:
                add_count(self.classic_protocol_members_supported_protocols, protocol.name, delta)

    # -- classic-protocol members (online migration, reference 1.13) ----------------------------
    def supports_classic_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        """Whether a JoinGroup with these protocols may join (Kafka's
        ``supportsClassicProtocols``): type "consumer", and a protocol every classic-protocol
        member supports (any, in an empty group)."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        names = set(protocols)
        if not self.members:
            return bool(names)
        counts = self.classic_protocol_members_supported_protocols
        return any(counts.get(name, 0) == self.num_classic_protocol_members for name in names)

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        """Whether ``member_id`` is the only member speaking the consumer protocol."""
        member = self.members.get(member_id)
        return (
            member is not None
            and not member.use_classic_protocol
            and self.num_classic_protocol_members == len(self.members) - 1
        )

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether an UNRELEASED_PARTITIONS member still waits for a partition of its target
        that another member holds (Kafka's ``waitingOnUnreleasedPartition``)."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target_assignment.get(member.member_id, {}).items():
            assigned = member.assigned_partitions.get(topic_id, frozenset())
            for partition in partitions:
                if partition not in assigned and self.current_partition_epoch(topic_id, partition) != -1:
                    return True
        return False

    def _update_subscription_type(self) -> None:
        self.subscription_type = subscription_type(
            self.subscribed_regular_expressions, self.subscribed_topic_names, len(self.members)
        )

    # -- partition epochs ------------------------------------------------------------------------
    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding (or revoking) the partition, -1 if none does."""
        partitions = self._partition_epochs.get(topic_id)
        return -1 if partitions is None else partitions.get(partition, -1)

    def _remove_partition_epochs(self, member: ConsumerGroupMember) -> None:
        epoch = member.member_epoch
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                epochs = self._partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for partition in partitions:
                    if epochs.get(partition) == epoch:
                        del epochs[partition]
                if not epochs:
                    del self._partition_epochs[topic_id]

    def _add_partition_epochs(self, assignment: Assignment, epoch: int) -> None:
        for topic_id, partitions in assignment.items():
            epochs = self._partition_epochs.setdefault(topic_id, {})
            for partition in partitions:
                previous = epochs.get(partition)
                if previous is not None and previous >= epoch:
                    raise IllegalStateError(
                        f"Cannot set the epoch of {topic_id}-{partition} to {epoch} because the "
                        f"partition is still owned at epoch {previous}"
                    )
                epochs[partition] = epoch

    # -- target assignment, epochs, regexes --------------------------------------------------------
    def target_assignment_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """The member's target; a static member rejoining under a new id gets the target
        of the member id its instance id had."""
        if instance_id is not None:
            previous = self.static_member_id(instance_id)
            if previous is not None:
                member_id = previous
            else:
                return EMPTY_ASSIGNMENT
        return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def update_resolved_regular_expression(
        self, regex: str, resolved: ResolvedRegularExpression
    ) -> None:
        self.remove_resolved_regular_expression(regex)
        self.resolved_regular_expressions[regex] = resolved
        for name in resolved.topics:
            add_topic_count(self.subscribed_topic_names, name, by_regex=1)
        self._update_subscription_type()

    def remove_resolved_regular_expression(self, regex: str) -> None:
        old = self.resolved_regular_expressions.pop(regex, None)
        if old is not None:
            for name in old.topics:
                add_topic_count(self.subscribed_topic_names, name, by_regex=-1)
            self._update_subscription_type()

    def num_subscribed_members(self, regex: str) -> int:
        return self.subscribed_regular_expressions.get(regex, 0)

    def last_resolved_regular_expression_refresh_time_ms(self) -> int:
        """When the regexes were last resolved (they are resolved together); a very old
        time when none is."""
        for resolved in self.resolved_regular_expressions.values():
            return resolved.timestamp_ms
        return -(2**63)

    def last_resolved_regular_expression_version(self) -> int:
        for resolved in self.resolved_regular_expressions.values():
            return resolved.version
        return 0

    # -- what a heartbeat would change (copies; the group is unchanged) ---------------------------
    def compute_subscribed_topic_names(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> dict[str, SubscriptionCount]:
        counts = super().compute_subscribed_topic_names(old, new)
        old_regex = _regex(old)
        if (
            old_regex is not None
            and old_regex != _regex(new)
            and self.num_subscribed_members(old_regex) == 1
        ):
            self._drop_regex_topics(counts, old_regex)  # its last member leaves it
        return counts

    def _drop_regex_topics(self, counts: dict[str, SubscriptionCount], regex: str) -> None:
        resolved = self.resolved_regular_expressions.get(regex)
        if resolved is not None:
            for name in resolved.topics:
                add_topic_count(counts, name, by_regex=-1)

    def compute_subscribed_regular_expressions(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> dict[str, int]:
        counts = dict(self.subscribed_regular_expressions)
        old_regex, new_regex = _regex(old), _regex(new)
        if old_regex != new_regex:
            if old_regex is not None:
                add_count(counts, old_regex, -1)
            if new_regex is not None:
                add_count(counts, new_regex, 1)
        return counts

    def compute_subscription_type(
        self,
        old: ConsumerGroupMember | None,
        new: ConsumerGroupMember,
        names: Mapping[str, SubscriptionCount] | None = None,
    ) -> SubscriptionType:
        """The subscription type once ``old`` is replaced by ``new`` (a member joining
        counts one more); ``names``: :meth:`compute_subscribed_topic_names` of them, if
        already computed."""
        if names is None:
            names = self.compute_subscribed_topic_names(old, new)
        members = self.num_members()
        if not self.has_member(new.member_id) and not self.has_static_member(new.instance_id):
            members += 1
        return subscription_type(self.compute_subscribed_regular_expressions(old, new), names, members)

    def compute_subscribed_topic_names_without_deleted_members(
        self, removed: Iterable[ConsumerGroupMember], removed_regexes: Iterable[str]
    ) -> dict[str, SubscriptionCount]:
        counts = dict(self.subscribed_topic_names)
        for member in removed:
            update_name_counts(counts, member, None)
        for regex in removed_regexes:
            self._drop_regex_topics(counts, regex)
        return counts

    def compute_subscribed_topic_names_with_regexes(
        self, resolved: Mapping[str, ResolvedRegularExpression]
    ) -> dict[str, SubscriptionCount]:
        """The subscription counts once ``resolved`` replaces these regexes' resolutions."""
        counts = dict(self.subscribed_topic_names)
        for regex, new in resolved.items():
            old = self.resolved_regular_expressions.get(regex)
            old_topics = frozenset() if old is None else old.topics
            if old_topics != new.topics:
                for name in old_topics:
                    add_topic_count(counts, name, by_regex=-1)
                for name in new.topics:
                    add_topic_count(counts, name, by_regex=1)
        return counts

    def compute_preferred_server_assignor(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> str | None:
        counts = dict(self.server_assignors)
        _update_assignor_counts(counts, old, new)
        return _preferred(counts)

    @property
    def preferred_server_assignor(self) -> str | None:
        return _preferred(self.server_assignors)

    # -- offsets and deletion (reference 1.14) ---------------------------------------------------
    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        member_epoch: int,
        is_transactional: bool,
        api_version: int,
    ) -> None:
        """Kafka 4.2's ``ConsumerGroup.validateOffsetCommit``."""
        if member_epoch < 0 and not self.members:
            return  # the admin client, or a consumer without group management
        if is_transactional and member_epoch == -1 and member_id == "" and instance_id is None:
            return  # TxnOffsetCommit checks members only when one is given
        member = self.member(member_id)
        if not is_transactional and not member.use_classic_protocol and api_version < 9:
            raise api_error(
                ErrorCode.unsupported_version,
                "OffsetCommit version 9 or above must be used by members using the modern "
                "group protocol",
            )
        self._validate_member_epoch(member_epoch, member)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: no member id and a negative
        epoch (the admin client) is accepted."""
        if member_id is None and member_epoch < 0:
            return
        member = self.members.get(member_id or "")
        if member is None:
            raise api_error(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {self.group_id}."
            )
        self._validate_member_epoch(member_epoch, member)

    @staticmethod
    def _validate_member_epoch(received: int, member: ConsumerGroupMember) -> None:
        if received != member.member_epoch:
            if member.use_classic_protocol:
                raise api_error(
                    ErrorCode.illegal_generation,
                    f"The received generation id {received} does not match the expected "
                    f"member epoch {member.member_epoch}.",
                )
            raise api_error(
                ErrorCode.stale_member_epoch,
                f"The received member epoch {received} does not match the expected member "
                f"epoch {member.member_epoch}.",
            )

    def validate_delete_group(self) -> None:
        if self.state is not ConsumerGroupState.EMPTY:
            raise api_error(ErrorCode.non_empty_group, "The group is not empty.")

    def _own_tombstone_records(self) -> list[CoordinatorRecord]:
        return [
            new_consumer_group_regular_expression_tombstone(self.group_id, regex)
            for regex in self.resolved_regular_expressions
        ]

    # -- ConsumerGroupDescribe ------------------------------------------------------------------
    def describe(
        self, default_assignor: str, image: MetadataImage
    ) -> consumer_group_describe.DescribedGroup:
        """The group as ConsumerGroupDescribe shows it (Kafka's ``asDescribedGroup``)."""
        members = [
            consumer_group_describe.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex or None,
                assignment=described_partitions(m.assigned_partitions, image),
                target_assignment=described_partitions(
                    self.target_assignment.get(m.member_id, EMPTY_ASSIGNMENT), image
                ),
                member_type=(
                    MEMBER_TYPE_CLASSIC if m.use_classic_protocol else MEMBER_TYPE_CONSUMER
                ),
            )
            for m in self.members.values()
        ]
        return consumer_group_describe.DescribedGroup(
            group_id=self.group_id,
            group_state=str(self.state),
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor_name=self.preferred_server_assignor or default_assignor,
            members=members,
        )
