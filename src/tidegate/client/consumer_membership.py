"""A member of a consumer group on KIP-848's consumer protocol, sans IO (Kafka's
``ConsumerMembershipManager`` with the ``HeartbeatState`` of its
``ConsumerHeartbeatRequestManager``).

:class:`ConsumerMembership` is a plain object: it says when a ConsumerGroupHeartbeat is
due and builds its body, takes the response (or the failure to get one) at a time the
caller gives, and turns the coordinator's assignment into a :class:`Reconciliation` the
caller carries out — revoke first (commit and stop fetching), then take the new
partitions — before it acknowledges it with the next heartbeat. The caller (the IO shell
:class:`tidegate.client.group_member.ConsumerGroupMember`) sends the requests on a
:class:`~tidegate.client.KafkaClient`; the unit tests drive it with scripted responses on
a fake clock.

What the heartbeats carry, as Kafka's client sends them: the member id the client made
itself (KIP-1082, ConsumerGroupHeartbeat v1; on v0 the coordinator hands one out on the
first join), epoch 0 to join with every field set, then only what changed since the last
heartbeat (the rebalance timeout, subscription, server assignor, and the owned partitions
once a reconciliation changed them); every field again after any error. FENCED_MEMBER_EPOCH
and UNKNOWN_MEMBER_ID lose the partitions and rejoin at epoch 0 under the same id; a
leave is epoch -1, or -2 for a static member (``group.instance.id``) that will come back.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.errors import BrokerResponseError

__all__ = ["ConsumerMembership", "MemberState", "Reconciliation"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: partitions by topic id, as the heartbeats carry them
Partitions = dict[uuid.UUID, frozenset[int]]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
COORDINATOR_LOAD_IN_PROGRESS = 14
#: errors after which the member rejoins (epoch 0, same member id) having lost its partitions
FENCED = frozenset({UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH})
#: the coordinator moved or is not ready: find it again (or wait) and send a full heartbeat
COORDINATOR_ERRORS = frozenset({COORDINATOR_LOAD_IN_PROGRESS, 15, 16})


class MemberState(enum.Enum):
    """Kafka's ``MemberState`` (the states this member goes through)."""

    JOINING = "JOINING"  # the next heartbeat has epoch 0 and every field
    RECONCILING = "RECONCILING"  # the assignment differs from what the member owns
    ACKNOWLEDGING = "ACKNOWLEDGING"  # reconciled: the next heartbeat (now) says so
    STABLE = "STABLE"  # owns its assignment; heartbeats every interval
    FENCED = "FENCED"  # the caller must drop every partition (lost), then rejoin
    LEAVING = "LEAVING"  # the leave heartbeat is the last one
    UNSUBSCRIBED = "UNSUBSCRIBED"  # left the group
    FATAL = "FATAL"  # an error no heartbeat can fix (raised to the caller)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step toward the coordinator's assignment: give up ``revoked`` (after
    committing their offsets), then own ``added`` too; ``owned`` is what the member owns
    after it, by topic id, acknowledged with the next heartbeat."""

    epoch: int
    owned: Partitions
    revoked: tuple[TopicPartition, ...]
    added: tuple[TopicPartition, ...]
    target_version: int


def _named(partitions: Partitions, names: Mapping[uuid.UUID, str]) -> set[TopicPartition]:
    return {(names[t], p) for t, ps in partitions.items() for p in ps}


class ConsumerMembership:
    """The heartbeat and reconciliation state of one member of ``group_id`` subscribed to
    ``topics`` by name."""

    def __init__(
        self,
        group_id: str,
        topics: Iterable[str],
        member_id: str,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        server_assignor: str | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.member_id = member_id
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.member_epoch = 0
        self.state = MemberState.JOINING
        #: the coordinator's heartbeat.interval.ms, from its last answer
        self.heartbeat_interval_ms = 0
        self._next_heartbeat_ns = 0
        self._failures = 0
        #: v0 only: the coordinator named this member (the first join sends "")
        self._named_by_coordinator = False
        #: the coordinator's latest assignment (topic ids), its epoch, and a counter that
        #: changes with it (a reconciliation started on an older one is not completed)
        self._target: Partitions = {}
        self._target_epoch = -1
        self._target_version = 0
        #: what the member owns and the epoch it was reconciled at (Kafka's LocalAssignment)
        self._owned: Partitions = {}
        self._owned_epoch = -1
        self._names: dict[uuid.UUID, str] = {}
        # what the last heartbeat carried (Kafka's SentFields; None: not sent since a reset)
        self._sent_rebalance_timeout = -1
        self._sent_topics: list[str] | None = None
        self._sent_assignor: str | None = None
        self._sent_owned: tuple[int, Partitions] | None = None

    # -- timing ------------------------------------------------------------------------------

    def heartbeat_due(self, now_ns: int) -> bool:
        """A heartbeat should go now (its interval passed, or the member joins or
        acknowledges a reconciliation, after any backoff)."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.FENCED):
            return False
        return now_ns >= self._next_heartbeat_ns

    def time_to_next_heartbeat_ms(self, now_ns: int) -> float:
        return max(0.0, (self._next_heartbeat_ns - now_ns) / 1_000_000)

    def heartbeat_now(self, now_ns: int) -> None:
        """Send the next heartbeat without waiting for the interval (a commit found the
        epoch stale: the heartbeat learns the current one)."""
        self._next_heartbeat_ns = min(self._next_heartbeat_ns, now_ns)

    def _backoff(self, now_ns: int) -> None:
        delay = min(self.retry_backoff_ms * 2**self._failures, self.retry_backoff_max_ms)
        self._failures += 1
        self._next_heartbeat_ns = now_ns + int(delay * 1_000_000)

    # -- requests ------------------------------------------------------------------------------

    def _reset_sent_fields(self) -> None:
        self._sent_rebalance_timeout = -1
        self._sent_topics = None
        self._sent_assignor = None
        self._sent_owned = None

    def heartbeat_request(self, version: int) -> dict:
        """The body of the next ConsumerGroupHeartbeat at ``version`` (0 or 1): every
        field when joining or after an error, else what changed since the last one."""
        full = self.state is MemberState.JOINING
        member_id = self.member_id
        if version == 0 and self.member_epoch == 0 and not self._named_by_coordinator:
            member_id = ""  # v0: the coordinator names a new member
        body: dict[str, Any] = {
            "group_id": self.group_id, "member_id": member_id, "member_epoch": self.member_epoch,
            "instance_id": self.instance_id, "rack_id": self.rack_id if full else None,
            "rebalance_timeout": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None,
        }  # fmt: skip
        if full or self._sent_rebalance_timeout != self.rebalance_timeout_ms:
            body["rebalance_timeout"] = self._sent_rebalance_timeout = self.rebalance_timeout_ms
        if full or self._sent_topics != self.topics:
            body["subscribed_topic_names"] = self._sent_topics = list(self.topics)
            # no regex, said with the names as librdkafka says it (Kafka's coordinator takes
            # "" as none; librdkafka's mock cluster wants both fields or neither)
            body["subscribed_topic_regex"] = ""
        if self.server_assignor is not None and (full or self._sent_assignor != self.server_assignor):
            body["server_assignor"] = self._sent_assignor = self.server_assignor
        owned = (self._owned_epoch, self._owned)
        if full or self._sent_owned != owned:
            self._sent_owned = owned
            body["topic_partitions"] = [{"topic_id": t, "partitions": sorted(ps)}
                                        for t, ps in sorted(self._owned.items())]  # fmt: skip
        return body

    def leave_request(self) -> dict | None:
        """The leave heartbeat (epoch -1; -2 for a static member, whose partitions wait
        for it within the session timeout), or None when the member is not in the group."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.FENCED):
            self.state = MemberState.UNSUBSCRIBED
            return None
        self.state = MemberState.LEAVING
        epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.instance_id is not None else LEAVE_GROUP_MEMBER_EPOCH
        return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout": -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                "topic_partitions": None}  # fmt: skip

    def left(self) -> None:
        """The leave heartbeat went (answered or not): the member is out of the group."""
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = 0
        self._owned, self._owned_epoch = {}, -1
        self._target, self._target_epoch = {}, -1

    # -- responses -----------------------------------------------------------------------------

    def on_heartbeat_failure(self, now_ns: int) -> None:
        """No answer (timeout, disconnect) or a coordinator error: the next heartbeat goes
        after a backoff, with every field."""
        self._reset_sent_fields()
        self._backoff(now_ns)

    def on_heartbeat_response(self, resp: Any, now_ns: int) -> None:
        """Take a ConsumerGroupHeartbeat response. Raises :class:`BrokerResponseError`
        for an error no heartbeat can fix (the member is then FATAL)."""
        code = int(resp.error_code)
        if self.state in (MemberState.LEAVING, MemberState.UNSUBSCRIBED):
            return
        if code:
            self._reset_sent_fields()
            if code in FENCED:
                log.info("group %s: member %s at epoch %s fenced (%s): rejoining", self.group_id,
                         self.member_id, self.member_epoch, resp.error_message)  # fmt: skip
                self.state = MemberState.FENCED
                self._next_heartbeat_ns = now_ns
                return
            if code in COORDINATOR_ERRORS:
                self._backoff(now_ns)
                return
            self.state = MemberState.FATAL
            raise BrokerResponseError(code, resp.error_message or f"ConsumerGroupHeartbeat of group '{self.group_id}'")
        self._failures = 0
        if resp.member_id:
            self._named_by_coordinator = True
            self.member_id = resp.member_id
        self.member_epoch = int(resp.member_epoch)
        self.heartbeat_interval_ms = int(resp.heartbeat_interval)
        self._next_heartbeat_ns = now_ns + self.heartbeat_interval_ms * 1_000_000
        if resp.assignment is not None:
            target = {tp.topic_id: frozenset(tp.partitions) for tp in resp.assignment.topic_partitions
                      if tp.partitions}  # fmt: skip
            if target != self._target or self.member_epoch != self._target_epoch:
                self._target_version += 1
            self._target, self._target_epoch = target, self.member_epoch
        if self._target_epoch < 0:
            return  # a join answered without an assignment: wait for one
        if self._target != self._owned or self._target_epoch != self._owned_epoch:
            self.state = MemberState.RECONCILING
        else:
            self.state = MemberState.STABLE

    # -- reconciliation -------------------------------------------------------------------------

    def unresolved_topic_ids(self, names: Mapping[uuid.UUID, str]) -> set[uuid.UUID]:
        """Topic ids of the assignment ``names`` (topic id -> name, from metadata) lacks."""
        return {t for t in self._target if t not in names and t not in self._names}

    def reconcile(self, names: Mapping[uuid.UUID, str]) -> Reconciliation | None:
        """The next step toward the assignment (None when there is nothing to do). Topic
        ids ``names`` cannot resolve wait for the metadata to name them; the rest is
        reconciled now."""
        if self.state is not MemberState.RECONCILING:
            return None
        known = {**self._names, **names}
        target = {t: ps for t, ps in self._target.items() if t in known}
        keep = {t: ps & target.get(t, frozenset()) for t, ps in self._owned.items()}
        keep = {t: ps for t, ps in keep.items() if ps}
        if target == self._owned and self._target_epoch == self._owned_epoch:
            return None  # only unresolved topics differ
        revoked = {t: ps - target.get(t, frozenset()) for t, ps in self._owned.items()}
        added = {t: ps - keep.get(t, frozenset()) for t, ps in target.items()}
        return Reconciliation(
            self._target_epoch, target, tuple(sorted(_named(revoked, known))), tuple(sorted(_named(added, known))),
            self._target_version,
        )

    def reconciled(self, rec: Reconciliation, names: Mapping[uuid.UUID, str], now_ns: int) -> bool:
        """The caller released ``rec.revoked``: own ``rec.owned`` and acknowledge it now,
        True. False when the member was fenced or the assignment changed meanwhile (a
        heartbeat went while the revoked partitions were committed): the revocation
        stands, the new partitions are not taken (the next :meth:`reconcile` starts over)."""
        self._owned = {t: k for t, ps in self._owned.items() if (k := ps & rec.owned.get(t, frozenset()))}
        if self.state is not MemberState.RECONCILING or rec.target_version != self._target_version:
            return False
        self._names.update({t: names[t] for t in rec.owned if t in names})
        self._owned, self._owned_epoch = dict(rec.owned), rec.epoch
        self.state = MemberState.ACKNOWLEDGING
        self._next_heartbeat_ns = min(self._next_heartbeat_ns, now_ns)
        return True

    def owned_partitions(self) -> list[TopicPartition]:
        """What the member owns, by name."""
        return sorted(_named(self._owned, self._names))

    def rejoin(self, now_ns: int) -> None:
        """After the caller dropped the partitions of a fenced member: join again at epoch 0
        under the same member id, with every field."""
        self._owned, self._owned_epoch = {}, -1
        self._target, self._target_epoch = {}, -1
        self._target_version += 1
        self.member_epoch = 0
        self.state = MemberState.JOINING
        self._reset_sent_fields()
        self._next_heartbeat_ns = now_ns
