"""Consumer group members (Kafka's ``ConsumerCoordinator`` and ``ConsumerMembershipManager``,
the parts ``tidegate console-consumer --group`` needs), picked by ``group.protocol`` as
Kafka's consumer picks its delegate (:func:`group_member`):

- :class:`GroupMember`, the classic protocol: join and sync with the range assignor,
  heartbeats, commits at the member's generation;
- :class:`ConsumerGroupMember`, KIP-848's consumer protocol: ConsumerGroupHeartbeat with
  a client-made member id, the coordinator's assignment reconciled revoke-first
  (:mod:`tidegate.client.consumer_membership`, sans IO), commits at the member epoch.

Both share the coordinator lookup, committed offsets and commits (:class:`_Member`) and are
driven by the caller: :meth:`poll` between fetches, which tells a
:class:`RebalanceListener` (Kafka's ``ConsumerRebalanceListener``) the partitions revoked,
assigned and lost. The consumer protocol's bytes come from
:mod:`tidegate.protocol.consumer_protocol` (re-exported here); the range assignor
(:func:`range_assign`) is a plain function; the members send blocking requests on a
:class:`~tidegate.client.KafkaClient` and keep time through the client's clock.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from tidegate.errors import BrokerResponseError, KafkaError
from tidegate.protocol.apis import ApiKey
from tidegate.protocol.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

from .admin import (
    OFFSET_FETCH_MAX_VERSION,
    find_group_coordinator,
    kafka_uuid,
    offset_fetch_body,
    offset_fetch_result,
)
from .client import KafkaClient
from .consumer_membership import COORDINATOR_ERRORS, ConsumerMembership, MemberState, Reconciliation
from .fetcher import is_retriable

__all__ = [
    "GROUP_PROTOCOLS",
    "ConsumerGroupMember",
    "GroupMember",
    "RebalanceListener",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "group_member",
    "range_assign",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113
_REJOIN = {REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID}
#: what an OffsetCommit or OffsetFetch of a consumer-protocol member answers when its
#: epoch is not the coordinator's (a lost heartbeat response, or the member was fenced)
_EPOCH_ERRORS = frozenset({STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH})
#: a coordinator error that means: find the coordinator again (and resend)
_COORDINATOR = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
#: how long the member waits before looking the coordinator up again
RETRY_BACKOFF_S = 0.1
#: Kafka's group.protocol values (the consumer's default is classic)
GROUP_PROTOCOLS = ("classic", "consumer")
#: the consumer keys Kafka's consumer refuses with group.protocol=consumer
CLASSIC_ONLY_KEYS = ("heartbeat.interval.ms", "partition.assignment.strategy", "session.timeout.ms")


def _coordinator_error(resp: Any) -> int | None:
    """A coordinator error in a group response (its top-level error code, or any
    partition's of an OffsetCommit or OffsetFetch, or that of an OffsetFetch v8+'s
    group), else None."""
    codes = []
    for where in (resp, *(getattr(resp, "groups", None) or ())):
        codes.append(int(getattr(where, "error_code", 0) or 0))
        for t in getattr(where, "topics", None) or ():
            codes += [int(getattr(p, "error_code", 0) or 0) for p in getattr(t, "partitions", ())]
    return next((c for c in codes if c in _COORDINATOR), None)


def range_assign(
    subscriptions: Mapping[str, Iterable[str]], partitions: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's ``RangeAssignor``: per topic, its members in member-id order each take a
    consecutive range, the first ``partitions % members`` one more."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    by_topic: dict[str, list[str]] = {}
    for member, topics in subscriptions.items():
        for t in set(topics):
            by_topic.setdefault(t, []).append(member)
    for topic, members in by_topic.items():
        count = partitions.get(topic, 0)
        members.sort()
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = per + (1 if i < extra else 0)
            out[member] += [(topic, p) for p in range(start, start + n)]
            start += n
    return {m: sorted(ps) for m, ps in out.items()}


class RebalanceListener(Protocol):
    """Kafka's ``ConsumerRebalanceListener``: what a member's :meth:`poll` tells the
    consumer. Revoked partitions are released (their offsets committed, if the consumer
    commits) before the member says so to the coordinator; lost ones were taken away
    (the member was fenced or left the group): they are dropped without a commit."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None: ...


class _Member:
    """What both protocols' members do alike: find the group's coordinator and send to
    it, fetch the group's committed offsets and commit at the member's generation or
    epoch."""

    #: the highest OffsetCommit version the member sends
    OFFSET_COMMIT_MAX_VERSION = 8

    def __init__(
        self, client: KafkaClient, group_id: str, topics: Iterable[str], *, rebalance_timeout_ms: int,
        instance_id: str | None = None,
    ) -> None:  # fmt: skip
        self.client = client
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.instance_id = instance_id
        self._coordinator: int | None = None

    # the member's name and generation (classic) or epoch (consumer protocol) in its requests
    member_id: str

    def _epoch(self) -> int:
        raise NotImplementedError

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        """The member id and epoch an OffsetFetch names (v9+)."""
        return None, -1

    def _check(self, code: int, what: str) -> None:
        raise NotImplementedError

    def _node(self) -> int:
        if self._coordinator is None:
            self._coordinator = find_group_coordinator(self.client, self.group_id)
        return self._coordinator

    def _request(self, api_key: int, body: dict, max_version: int, *, timeout_ms: float | None = None) -> Any:
        """``body`` to the group's coordinator, as Kafka's ``AbstractCoordinator`` sends it:
        when the coordinator cannot be reached (down, timed out) or answers that it is
        not (or not yet) the coordinator, it is looked up again and the request sent
        there after a backoff, until ``timeout_ms`` (the rebalance timeout plus 5 s by
        default) passes. Other errors are the caller's."""
        timeout_ms = self.rebalance_timeout_ms + 5_000 if timeout_ms is None else timeout_ms
        clock = self.client.clock
        deadline = clock.nanoseconds() + int(timeout_ms * 1_000_000)
        while True:
            left = (deadline - clock.nanoseconds()) / 1_000_000
            try:
                resp = self.client.request(api_key, body, node_id=self._node(), max_version=max_version,
                                           timeout_ms=max(1.0, left))  # fmt: skip
                code = _coordinator_error(resp)
                if code is None:
                    return resp
                error: KafkaError = BrokerResponseError(code, f"group '{self.group_id}'")
            except KafkaError as exc:
                if not is_retriable(exc):
                    raise
                error = exc
            log.debug("group %s: coordinator %s unusable (%s): looking it up again",
                      self.group_id, self._coordinator, error)  # fmt: skip
            self._coordinator = None
            if clock.nanoseconds() >= deadline:
                raise error
            clock.sleep(RETRY_BACKOFF_S)

    def _fetch_committed(self, partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        if not topics:
            return 0, {}
        member_id, epoch = self._offset_fetch_member()
        body = offset_fetch_body(self.group_id, topics, True, member_id=member_id, member_epoch=epoch)
        return offset_fetch_result(self._request(ApiKey.OFFSET_FETCH, body, OFFSET_FETCH_MAX_VERSION))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (those without one left out)."""
        code, offsets = self._fetch_committed(partitions)
        self._check(code, "OffsetFetch")
        return offsets

    def _send_commit(self, offsets: Mapping[TopicPartition, int]) -> set[int]:
        """OffsetCommit of ``offsets`` at the member's generation or epoch; the partitions'
        error codes."""
        topics: dict[str, list[dict]] = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"group_id": self.group_id, "generation_id_or_member_epoch": self._epoch(),
                "member_id": self.member_id, "group_instance_id": self.instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
        resp = self._request(ApiKey.OFFSET_COMMIT, body, self.OFFSET_COMMIT_MAX_VERSION)
        return {int(p.error_code) for t in resp.topics for p in t.partitions} - {0}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit at this member's generation (a rebalance in between makes the
        commit fail with a rejoin, as Kafka's CommitFailedException)."""
        if offsets:
            for code in sorted(self._send_commit(offsets)):
                self._check(code, "OffsetCommit")


class GroupMember(_Member):
    """One member of ``group_id`` subscribed to ``topics`` (classic protocol, protocol
    type ``consumer``, the ``range`` assignor)."""

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        topics: Iterable[str],
        *,
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
    ) -> None:
        super().__init__(client, group_id, topics, rebalance_timeout_ms=rebalance_timeout_ms)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: list[TopicPartition] = []
        self._next_heartbeat_ns = 0
        self._rejoin = True

    @property
    def needs_join(self) -> bool:
        return self._rejoin

    def _epoch(self) -> int:
        return self.generation

    def _check(self, code: int, what: str) -> None:
        if code in _REJOIN:
            self._rejoin = True
            if code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                self.member_id, self.generation = "", -1
            return
        if code:
            raise BrokerResponseError(code, f"{what} of group '{self.group_id}'")

    def join(self) -> list[TopicPartition]:
        """JoinGroup (again with the member id the coordinator hands out), the leader's
        assignment, SyncGroup; the partitions this member got."""
        while True:
            self._rejoin = False
            body = {
                "group_id": self.group_id, "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": encode_subscription(self.topics)}],
            }  # fmt: skip
            resp = self._request(ApiKey.JOIN_GROUP, body, 9)
            code = int(resp.error_code)
            if code == MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            self._check(code, "JoinGroup")
            if self._rejoin:
                continue
            self.member_id = resp.member_id
            self.generation = int(resp.generation_id)
            assignments = []
            if resp.leader == self.member_id:
                subs = {m.member_id: decode_subscription(m.metadata) for m in resp.members}
                wanted = sorted({t for ts in subs.values() for t in ts})
                cluster = self.client.metadata(wanted)
                counts = {t: cluster.partition_count(t) or 0 for t in wanted}
                plan = range_assign(subs, counts)
                assignments = [{"member_id": m, "assignment": encode_assignment(ps)} for m, ps in plan.items()]
            body = {
                "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": assignments,
            }  # fmt: skip
            sync = self._request(ApiKey.SYNC_GROUP, body, 5)
            self._check(int(sync.error_code), "SyncGroup")
            if self._rejoin:
                continue
            self.assignment = decode_assignment(sync.assignment)
            self._next_heartbeat_ns = self.client.clock.nanoseconds() + self.heartbeat_interval_ms * 1_000_000
            return self.assignment

    def poll(self, listener: RebalanceListener | None = None) -> bool:
        """A heartbeat when one is due; True when the member must rejoin (a rebalance:
        call :meth:`join`, then start from the committed offsets of the new assignment).
        With a ``listener`` the member rejoins itself, eagerly as the classic protocol
        does: everything it owned is revoked (lost when its generation is gone) before
        the join, the new assignment assigned after it."""
        if not self._rejoin:
            now = self.client.clock.nanoseconds()
            if now >= self._next_heartbeat_ns:
                self._next_heartbeat_ns = now + self.heartbeat_interval_ms * 1_000_000
                body = {"group_id": self.group_id, "generation_id": self.generation,
                        "member_id": self.member_id, "group_instance_id": None}  # fmt: skip
                resp = self._request(ApiKey.HEARTBEAT, body, 4, timeout_ms=self.session_timeout_ms)
                self._check(int(resp.error_code), "Heartbeat")
        if listener is None or not self._rejoin:
            return self._rejoin
        if self.assignment:
            owned, self.assignment = list(self.assignment), []
            if self.generation < 0:  # UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: not ours to commit
                listener.on_partitions_lost(owned)
            else:
                listener.on_partitions_revoked(owned)
        listener.on_partitions_assigned(list(self.join()))
        return False

    def leave(self) -> None:
        """LeaveGroup (the group rebalances without waiting for the session timeout)."""
        if not self.member_id:
            return
        body = {"group_id": self.group_id, "members": [{"member_id": self.member_id, "group_instance_id": None,
                                                        "reason": None}]}  # fmt: skip
        try:
            self._request(ApiKey.LEAVE_GROUP, body, 5, timeout_ms=5_000)
        finally:
            self.member_id, self.generation = "", -1


class ConsumerGroupMember(_Member):
    """One member of ``group_id`` subscribed to ``topics`` on KIP-848's consumer protocol
    (Kafka's ``group.protocol=consumer``): the coordinator assigns, with its
    ``group.remote.assignor`` if given. The IO shell of a :class:`ConsumerMembership`:
    it sends the heartbeats the membership builds, names the assignment's topic ids from
    metadata and carries out the reconciliations through the :class:`RebalanceListener`
    given to :meth:`poll`."""

    #: v9 carries the member epoch (KIP-848), which the coordinator checks for this member
    OFFSET_COMMIT_MAX_VERSION = 9
    #: v1: the member names itself (KIP-1082); v0 when the coordinator has only that
    HEARTBEAT_MAX_VERSION = 1
    #: how often the member asks for metadata while topic ids of its assignment are unknown
    METADATA_RETRY_MS = 1_000
    #: reconciliation steps one poll may take (each is a heartbeat or a reconciliation)
    MAX_STEPS_PER_POLL = 8

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        topics: Iterable[str],
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        server_assignor: str | None = None,
        member_id: str | None = None,
    ) -> None:
        super().__init__(client, group_id, topics, rebalance_timeout_ms=rebalance_timeout_ms,
                         instance_id=instance_id)  # fmt: skip
        self.membership = ConsumerMembership(
            group_id, self.topics, member_id or kafka_uuid(uuid.uuid4()), instance_id=instance_id,
            rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms, server_assignor=server_assignor,
        )  # fmt: skip
        self._metadata_at_ns: int | None = None

    @property
    def member_id(self) -> str:  # type: ignore[override]
        """The id this member made itself (KIP-1082; on a v0 coordinator, the one it got)."""
        return self.membership.member_id

    @property
    def member_epoch(self) -> int:
        return self.membership.member_epoch

    @property
    def assignment(self) -> list[TopicPartition]:
        """The partitions this member owns."""
        return self.membership.owned_partitions()

    def _epoch(self) -> int:
        return self.membership.member_epoch

    def _offset_fetch_member(self) -> tuple[str | None, int]:
        return self.membership.member_id, self.membership.member_epoch

    def _check(self, code: int, what: str) -> None:
        if code:
            raise BrokerResponseError(code, f"{what} of group '{self.group_id}'")

    def _heartbeat(self) -> None:
        """One ConsumerGroupHeartbeat (v1, v0 when the coordinator has only that), its
        answer taken by the membership; a coordinator that cannot be reached or says it
        is not the coordinator is looked up again before the next one."""
        m = self.membership
        try:
            node = self._node()
            self.client.await_ready(node)
            version = self.client.api_version(node, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                                              max_version=self.HEARTBEAT_MAX_VERSION)  # fmt: skip
            body = m.heartbeat_request(version)
            resp = self.client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body, node_id=node, version=version)
        except KafkaError as exc:
            if not is_retriable(exc):
                raise
            log.debug("group %s: heartbeat failed (%s): looking the coordinator up again", self.group_id, exc)
            self._coordinator = None
            m.on_heartbeat_failure(self.client.clock.nanoseconds())
            return
        if int(resp.error_code) in COORDINATOR_ERRORS:
            self._coordinator = None
        m.on_heartbeat_response(resp, self.client.clock.nanoseconds())

    def _topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of the subscribed topics, from metadata (asked again, at most
        every METADATA_RETRY_MS, while the assignment names a topic id it lacks)."""
        def known() -> dict[uuid.UUID, str]:
            return {tm.topic_id: name for name, tm in self.client.cluster.topics.items() if tm.topic_id is not None}

        names = known()
        now = self.client.clock.nanoseconds()
        due = self._metadata_at_ns is None or now - self._metadata_at_ns >= self.METADATA_RETRY_MS * 1_000_000
        if self.membership.unresolved_topic_ids(names) and due:
            self._metadata_at_ns = now
            try:
                self.client.metadata(self.topics)
            except KafkaError as exc:
                if not is_retriable(exc):
                    raise
            names = known()
        return names

    def poll(self, listener: RebalanceListener) -> None:
        """Heartbeats when due and the reconciliation of a new assignment: the revoked
        partitions first (``listener`` commits them and stops fetching them), then the
        new ones, acknowledged with an immediate heartbeat; a fenced member loses its
        partitions and rejoins. Raises :class:`BrokerResponseError` for a heartbeat error
        no rejoin fixes (Kafka's fatal ones: UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
        UNSUPPORTED_ASSIGNOR, ...)."""
        m = self.membership
        clock = self.client.clock
        for _ in range(self.MAX_STEPS_PER_POLL):
            if m.state is MemberState.FENCED:
                lost = m.owned_partitions()
                if lost:
                    listener.on_partitions_lost(lost)
                m.rejoin(clock.nanoseconds())
            if m.heartbeat_due(clock.nanoseconds()):
                self._heartbeat()
                continue
            names = self._topic_names()
            rec = m.reconcile(names)
            if rec is None:
                return
            self._carry_out(rec, names, listener)

    def _carry_out(self, rec: Reconciliation, names: Mapping[uuid.UUID, str], listener: RebalanceListener) -> None:
        """Revoke, then (unless the member was fenced or got a newer assignment meanwhile)
        own the new partitions; the acknowledging heartbeat is then due."""
        if rec.revoked:
            listener.on_partitions_revoked(list(rec.revoked))
        if not self.membership.reconciled(rec, names, self.client.clock.nanoseconds()):
            return
        log.debug("group %s: member %s reconciled at epoch %s: revoked %s, added %s", self.group_id,
                  self.member_id, rec.epoch, rec.revoked, rec.added)  # fmt: skip
        if rec.added:
            listener.on_partitions_assigned(list(rec.added))

    def _at_epoch(self, send: Callable[[], set[int]]) -> set[int]:
        """``send`` (a commit or an offset fetch at the member epoch); when the coordinator
        says the epoch is stale, a heartbeat learns the current one and ``send`` goes once
        more at it (Kafka's client retries these while the member is still in the group).
        The error codes of the last try."""
        codes = send()
        if not codes & _EPOCH_ERRORS:
            return codes
        m = self.membership
        epoch = m.member_epoch
        m.heartbeat_now(self.client.clock.nanoseconds())
        self._heartbeat()
        if m.member_epoch != epoch and m.state not in (MemberState.FENCED, MemberState.JOINING):
            return send()
        return codes

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = list(partitions)
        got: dict[TopicPartition, int] = {}

        def fetch() -> set[int]:
            code, offsets = self._fetch_committed(wanted)
            got.clear()
            got.update(offsets)
            return {code} - {0}

        for code in sorted(self._at_epoch(fetch)):
            self._check(code, "OffsetFetch")
        return got

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit at the member epoch. A commit the coordinator refuses because the
        member is no longer at that epoch (fenced, or partitions moved) is dropped with a
        log line, as Kafka's CommitFailedException; other errors raise."""
        if not offsets:
            return
        codes = self._at_epoch(lambda: self._send_commit(offsets))
        if codes & _EPOCH_ERRORS:
            log.info("group %s: commit at epoch %s refused (%s): the member is rejoining", self.group_id,
                     self.member_epoch, sorted(codes))  # fmt: skip
        for code in sorted(codes - _EPOCH_ERRORS):
            self._check(code, "OffsetCommit")

    def leave(self) -> None:
        """The leave heartbeat: epoch -1, or -2 for a static member (its partitions wait
        for it to come back within the session timeout)."""
        body = self.membership.leave_request()
        if body is None:
            return
        try:
            self.client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body, node_id=self._node(),
                                max_version=self.HEARTBEAT_MAX_VERSION, timeout_ms=5_000)  # fmt: skip
        except KafkaError as exc:
            log.debug("group %s: leave heartbeat failed (%s)", self.group_id, exc)
        finally:
            self.membership.left()


def group_member(
    client: KafkaClient, group_id: str, topics: Iterable[str], config: Mapping[str, str]
) -> GroupMember | ConsumerGroupMember:
    """The member ``config`` asks for, by Kafka's consumer keys: ``group.protocol``
    (classic, the default, or consumer), ``max.poll.interval.ms`` (the rebalance timeout);
    classic: ``session.timeout.ms``, ``heartbeat.interval.ms``; consumer:
    ``group.remote.assignor``, ``group.instance.id``, ``client.rack``. Raises ValueError
    with Kafka's message for a value it refuses, or for a key of the other protocol."""

    def number(key: str, default: int) -> int:
        value = config.get(key)
        if value is None:
            return default
        if not value.strip().isdigit():
            raise ValueError(f"Invalid value {value} for configuration {key}: Not a number of type INT")
        return int(value)

    given = config.get("group.protocol", "classic")
    protocol = given.strip().lower()
    if protocol not in GROUP_PROTOCOLS:
        raise ValueError(f"Invalid value {given} for configuration group.protocol: "
                         f"String must be one of (case insensitive): {', '.join(GROUP_PROTOCOLS).upper()}")  # fmt: skip
    # Kafka's ConsumerConfig refuses the other protocol's keys
    refused = sorted(k for k in CLASSIC_ONLY_KEYS if k in config) if protocol == "consumer" else (
        ["group.remote.assignor"] if "group.remote.assignor" in config else [])  # fmt: skip
    if refused:
        raise ValueError(f"{', '.join(refused)} cannot be set when group.protocol={protocol.upper()}")
    rebalance_timeout_ms = number("max.poll.interval.ms", 300_000)
    if protocol == "classic":
        return GroupMember(client, group_id, topics, rebalance_timeout_ms=rebalance_timeout_ms,
                           session_timeout_ms=number("session.timeout.ms", 45_000),
                           heartbeat_interval_ms=number("heartbeat.interval.ms", 3_000))  # fmt: skip
    return ConsumerGroupMember(client, group_id, topics, rebalance_timeout_ms=rebalance_timeout_ms,
                               instance_id=config.get("group.instance.id") or None,
                               rack_id=config.get("client.rack") or None,
                               server_assignor=config.get("group.remote.assignor") or None)  # fmt: skip
