"""A consumer group member on the classic protocol (Kafka's ``ConsumerCoordinator``, the
part ``tidegate console-consumer --group`` needs): join and sync with the range assignor,
heartbeats from the caller's poll loop, committed offsets, commits at the member's
generation, and leaving the group.

The consumer protocol's bytes come from :mod:`tidegate.protocol.consumer_protocol`
(re-exported here); the range assignor (:func:`range_assign`) is a plain function; the member sends
blocking requests on a :class:`~tidegate.client.KafkaClient` and keeps time through the
client's clock, so the caller drives it: :meth:`GroupMember.poll` between fetches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

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
    offset_fetch_body,
    offset_fetch_result,
)
from .client import KafkaClient
from .fetcher import is_retriable

__all__ = [
    "GroupMember",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
_REJOIN = {REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID}
#: a coordinator error that means: find the coordinator again (and resend)
_COORDINATOR = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
#: how long the member waits before looking the coordinator up again
RETRY_BACKOFF_S = 0.1


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


class GroupMember:
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
        self.client = client
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: list[TopicPartition] = []
        self._coordinator: int | None = None
        self._next_heartbeat_ns = 0
        self._rejoin = True

    @property
    def needs_join(self) -> bool:
        return self._rejoin

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

    def poll(self) -> bool:
        """A heartbeat when one is due; True when the member must rejoin (a rebalance:
        call :meth:`join`, then start from the committed offsets of the new assignment)."""
        if self._rejoin:
            return True
        now = self.client.clock.nanoseconds()
        if now >= self._next_heartbeat_ns:
            self._next_heartbeat_ns = now + self.heartbeat_interval_ms * 1_000_000
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": None}  # fmt: skip
            resp = self._request(ApiKey.HEARTBEAT, body, 4, timeout_ms=self.session_timeout_ms)
            self._check(int(resp.error_code), "Heartbeat")
        return self._rejoin

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (those without one left out)."""
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        if not topics:
            return {}
        body = offset_fetch_body(self.group_id, topics, True)
        code, offsets = offset_fetch_result(self._request(ApiKey.OFFSET_FETCH, body, OFFSET_FETCH_MAX_VERSION))
        self._check(code, "OffsetFetch")
        return offsets

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit at this member's generation (a rebalance in between makes the
        commit fail with a rejoin, as Kafka's CommitFailedException)."""
        if not offsets:
            return
        topics: dict[str, list[dict]] = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"group_id": self.group_id, "generation_id_or_member_epoch": self.generation,
                "member_id": self.member_id, "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
        resp = self._request(ApiKey.OFFSET_COMMIT, body, 8)  # v9+: KIP-848 member epochs
        for t in resp.topics:
            for p in t.partitions:
                self._check(int(p.error_code), "OffsetCommit")

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
