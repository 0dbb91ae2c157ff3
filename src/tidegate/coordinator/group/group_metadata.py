"""A consumer group's state: Kafka's ``GroupMetadata`` and ``MemberMetadata``.

A :class:`GroupMetadata` holds a group's members, the protocols they support, its
generation, leader, :class:`GroupState` and committed offsets, and checks the state
transitions Kafka allows. It decides nothing about timing or storage: the
:class:`~tidegate.coordinator.group.group_coordinator.GroupCoordinator` drives it.
Parked JoinGroup/SyncGroup requests are the members' callbacks, answered with a
:class:`JoinResult` / :class:`SyncResult`.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tidegate.clock import Clock, WallMs
from tidegate.coordinator.group.group_metadata_manager import OffsetAndMetadata
from tidegate.errors import ErrorCode
from tidegate.protocol.consumer_protocol import decode_subscription

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
    EMPTY: {PREPARING_REBALANCE},
}


# ------------------------------------------------------------------------------------------
# results handed to the callbacks
# ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class JoinResult:
    member_id: str
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    #: (member id, group instance id, metadata): only the leader gets them
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class ClassicJoinGroup:
    """A JoinGroup request to a consumer group (a classic-protocol member, reference 1.13)."""

    group_id: str
    member_id: str
    instance_id: str | None
    #: JoinGroup v4+: a dynamic member without an id gets MEMBER_ID_REQUIRED first
    require_known_member_id: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


# ------------------------------------------------------------------------------------------
# members and groups
# ------------------------------------------------------------------------------------------
class MemberMetadata:
    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_satisfied",
        "is_new",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_new = False
        self.heartbeat_satisfied = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    @property
    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied  # new members can expire while awaiting join
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True  # members waiting on a rebalance satisfy heartbeats automatically
        return self.heartbeat_satisfied

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and a[1] == b[1] for a, b in zip(protocols, self.protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} does not support any of {candidates}")

    def __repr__(self) -> str:
        return (
            f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
            f"client={self.client_id!r}@{self.client_host})"
        )


def subscribed_topics_of(metadata: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription of any version. Raises ValueError if it
    does not parse."""
    return set(decode_subscription(metadata))


class GroupMetadata:
    """One group: members, protocols, generation, leader, state and committed offsets.
    Its state changes are stamped on the wall clock of ``clock`` (Kafka's GroupMetadata
    takes the coordinator's ``Time``): the stamp is persisted and offsets retention
    compares it with commit times."""

    def __init__(self, group_id: str, state: GroupState, clock: Clock) -> None:
        self.group_id = group_id
        self.state = state
        self._clock = clock
        #: when the group entered its state (None for groups loaded with offsets only)
        self.state_timestamp: WallMs | None = clock.wall_milliseconds()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        #: TxnOffsetCommit offsets awaiting their transaction's marker, per producer id
        self.pending_transactional_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}

    # -- queries -------------------------------------------------------------------------
    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    # -- offsets -------------------------------------------------------------------------
    @property
    def has_pending_transactions(self) -> bool:
        return bool(self.pending_transactional_offsets)

    def has_pending_offsets_for(self, tp: tuple[str, int]) -> bool:
        return any(tp in pending for pending in self.pending_transactional_offsets.values())

    def offset_partitions(self) -> list[tuple[str, int]]:
        """Partitions with a committed or a pending offset (committed first)."""
        out = dict.fromkeys(self.offsets)
        for pending in self.pending_transactional_offsets.values():
            out.update(dict.fromkeys(pending))
        return list(out)

    def add_pending_txn_offsets(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.pending_transactional_offsets.setdefault(producer_id, {}).update(offsets)

    def complete_pending_txn_offset_commit(
        self, producer_id: int, is_commit: bool
    ) -> list[tuple[tuple[str, int], OffsetAndMetadata]]:
        """The producer's transaction ended: on commit its offsets replace the committed
        ones written before them in the log (a plain commit written after the
        transactional one wins); on abort they are dropped. Returns what was committed."""
        pending = self.pending_transactional_offsets.pop(producer_id, None)
        if not pending or not is_commit:
            return []
        committed = []
        for tp, om in pending.items():
            current = self.offsets.get(tp)
            if current is None or current.record_offset < om.record_offset:
                self.offsets[tp] = om
                committed.append((tp, om))
            else:
                log.info(
                    "offset %d of %s-%d committed by producer %d in group %s is older than the "
                    "committed offset %d: not materialized",
                    om.offset, tp[0], tp[1], producer_id, self.group_id, current.offset,
                )
        return committed

    def remove_offsets(self, tps: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Forget the offsets of these partitions, committed and pending (what a tombstone
        does); returns those that had any."""
        removed = []
        for tp in tps:
            found = self.offsets.pop(tp, None) is not None
            for pending in self.pending_transactional_offsets.values():
                found = pending.pop(tp, None) is not None or found
            if found:
                removed.append(tp)
        return removed

    # -- transitions ---------------------------------------------------------------------
    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id} should be in one of "
                f"{sorted(s.value for s in _VALID_PREVIOUS[state])} before moving to {state}, "
                f"but it is {self.state}"
            )
        self.state = state
        self.state_timestamp = self._clock.wall_milliseconds()

    # -- membership ----------------------------------------------------------------------
    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in the group")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.awaiting_join = callback
        if callback is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick any member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for mid, member in self.members.items():
            if member.is_awaiting_join:
                log.info(
                    "leader %s of group %s did not rejoin before the rebalance timeout; %s leads",
                    self.leader_id,
                    self.group_id,
                    mid,
                )
                self.leader_id = mid
                return True
        return False

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        member = self.members.pop(old_id)
        # a duplicate instance still parked in JoinGroup/SyncGroup is fenced right away
        self.maybe_invoke_join_callback(member, JoinResult(old_id, ErrorCode.fenced_instance_id))
        self.maybe_invoke_sync_callback(member, SyncResult(ErrorCode.fenced_instance_id))
        member.member_id = new_id
        self.members[new_id] = member
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self.supported_protocols.update(name for name, _ in protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinResult) -> None:
        callback = member.awaiting_join
        if callback is not None:
            member.awaiting_join = None
            self.num_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    # -- protocols -----------------------------------------------------------------------
    def _candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        if not self.members:
            raise RuntimeError("cannot select a protocol for an empty group")
        candidates = self._candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[p] == n for p in protocols
        )

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics |= subscribed_topics_of(m.metadata(self.protocol_name))
        except ValueError as exc:
            log.warning("cannot parse the subscriptions of group %s: %s", self.group_id, exc)
            return None
        return topics

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        if self.state in (DEAD, PREPARING_REBALANCE) or self.protocol_name is None:
            raise RuntimeError(f"no member metadata for group {self.group_id} in state {self.state}")
        return [
            (mid, m.group_instance_id, m.metadata(self.protocol_name))
            for mid, m in self.members.items()
        ]

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{uuid.uuid4()}"

    def __repr__(self) -> str:
        return (
            f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
            f"members={list(self.members)})"
        )
