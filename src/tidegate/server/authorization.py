"""The authorization step of the request pipeline (Kafka's ``AuthHelper`` and the
checks at the top of each ``KafkaApis.handle*``), sans-IO.

:meth:`AuthorizationStep.authorize` runs after decoding and before the handler. A
per-API check function (:data:`CHECKS`) decides, with Kafka's operations and error
codes (docs/security.md has the table), one of:

* everything is allowed: the handler gets the request as decoded;
* nothing may happen (a cluster-level denial, a transactional id the principal may not
  write): the check returns the whole answer and the handler is never called;
* some topics, partitions, groups or resources are denied: the check replaces
  ``request.body`` with a copy that holds only the allowed ones and sets
  ``request.authz_merge``, which adds the denied ones with their errors to the
  handler's response (Kafka's ``authorizedTopics`` / ``unauthorizedTopicResponses``).
  The merge also fills the ``*_authorized_operations`` fields and drops what an
  unfiltered listing (all topics, all groups) must not reveal.

The handler never sees a denied resource; :meth:`KafkaApis._respond` applies the merge
to every answer, parked or not. With no authorizer (``authorizer.class.name`` empty)
only Metadata, DescribeCluster, DescribeGroups, ConsumerGroupDescribe and
DescribeTopicPartitions get a merge (every supported operation bit is set).
"""

from __future__ import annotations

import functools
import ipaddress
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tidegate.errors import ErrorCode as E
from tidegate.network.request_channel import Request, RequestContext
from tidegate.protocol.apis import ApiKey, api_name
from tidegate.security.authorizer.acl import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    all_operations_bits,
)
from tidegate.security.authorizer.standard_authorizer import StandardAuthorizer
from tidegate.server.metadata import TopicStore

READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
TAF = E.topic_authorization_failed
GAF = E.group_authorization_failed
CAF = E.cluster_authorization_failed
TIDAF = E.transactional_id_authorization_failed
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
#: DescribeConfigs' resource types (ConfigResource.Type) and the ACL resource of each
_CONFIG_RESOURCE = {2: (TOPIC, TAF), 4: (CLUSTER, CAF), 8: (CLUSTER, CAF), 16: (CLUSTER, CAF), 32: (GROUP, GAF)}

Merge = Callable[[dict], dict]
_api_name = functools.cache(api_name)
#: the answer that closes the connection: a Produce with acks=0 denied, which has no
#: response to carry the error (Kafka's ``closeConnection`` in ``handleProduceRequest``)
CLOSE_CONNECTION: dict = {}


@functools.lru_cache(maxsize=4096)
def java_host_address(address: str) -> str:
    """The client address as Java's ``InetAddress.getHostAddress()`` writes it (ACL
    hosts are compared with it): IPv4 dotted, IPv6 uncompressed without leading zeros."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return ":".join(format(int(group, 16), "x") for group in ip.exploded.split(":"))
    return str(ip)


class Session:
    """One request's principal and host, and the decisions made for it."""

    __slots__ = ("api", "authorizer", "host", "principal")

    def __init__(self, authorizer: StandardAuthorizer | None, principal: str, host: str, api: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.api = api

    def allow(self, op: AclOperation, rtype: ResourceType, name: str, *, audit: bool = True) -> bool:
        a = self.authorizer
        if a is None:
            return True
        return a.authorize(self.principal, self.host, op, rtype, name, api=self.api, audit=audit)

    def allow_cluster(self, op: AclOperation, *, audit: bool = True) -> bool:
        return self.allow(op, CLUSTER, CLUSTER_NAME, audit=audit)

    def allow_any(self, op: AclOperation, rtype: ResourceType) -> bool:
        a = self.authorizer
        if a is None:
            return True
        return a.authorize_by_resource_type(self.principal, self.host, op, rtype, api=self.api)

    def operations(self, rtype: ResourceType, name: str) -> int:
        a = self.authorizer
        if a is None:
            return all_operations_bits(rtype)
        return a.authorized_operations(self.principal, self.host, rtype, name)


Check = Callable[[Session, Request, "AuthorizationStep"], dict | None]


class AuthorizationStep:
    def __init__(
        self,
        authorizer: StandardAuthorizer | None,
        store: TopicStore,
    ) -> None:
        self.authorizer = authorizer
        self.store = store

    @staticmethod
    def principal(ctx: RequestContext) -> str:
        """Kafka's KafkaPrincipal of the connection, as ``User:<name>`` (an SSL client's
        name is already mapped by ``ssl.principal.mapping.rules`` when it connects)."""
        return "User:" + ctx.principal

    def session(self, request: Request) -> Session:
        ctx = request.context
        return Session(
            self.authorizer,
            self.principal(ctx),
            java_host_address(ctx.client_address),
            _api_name(request.header.api_key),
        )

    def unreadable_topics(self, request: Request, names: Iterable[str]) -> set[str]:
        """The topics of an incremental fetch session the request's principal may no
        longer READ: a session's partitions are checked on every fetch (Kafka's
        handleFetchRequest authorizes ``fetchContext.foreachPartition``), so an ACL
        removed while a consumer polls applies to its next fetch."""
        if self.authorizer is None:
            return set()
        s = self.session(request)
        return {name for name in set(names) if not s.allow(READ, TOPIC, name)}

    def authorize(self, request: Request) -> dict | None:
        """Run the request's check: None lets it through (maybe with a filtered body and
        a merge), a dict is the whole answer."""
        key = request.header.api_key
        if self.authorizer is None:
            check = CHECKS_WITHOUT_AUTHORIZER.get(key)
        else:
            check = CHECKS.get(key)
        if check is None:
            return None
        return check(self.session(request), request, self)


# -- helpers ------------------------------------------------------------------------------
def _add_merge(request: Request, merge: Merge) -> None:
    previous = request.authz_merge
    if previous is None:
        request.authz_merge = merge
    else:
        request.authz_merge = lambda values: merge(previous(values))


def _split(items: Iterable[Any], allowed: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for item in items:
        (ok if allowed(item) else denied).append(item)
    return ok, denied


def _replace(request: Request, **changes: Any) -> None:
    """Take the denied entries out of the request the handler will read."""
    for name, value in changes.items():
        setattr(request.body, name, value)


def _partitioned(
    request: Request,
    s: Session,
    op: AclOperation,
    *,
    field: str,
    response_field: str,
    denied_topic: Callable[[Any], dict],
    base: dict,
    name_of: Callable[[Any], str | None] = lambda t: t.name,
) -> dict | None:
    """The common case: a request of topics, each checked for ``op`` on the topic; the
    denied topics answered with ``denied_topic(t)`` in the response's ``response_field``.
    When nothing is left the answer is ``base`` with the denied topics."""
    topics = getattr(request.body, field)
    seen: dict[str, bool] = {}

    def allowed(t: Any) -> bool:
        name = name_of(t)
        if name is None:
            return True  # an unknown topic id: the handler answers UNKNOWN_TOPIC_ID
        if name not in seen:
            seen[name] = s.allow(op, TOPIC, name)
        return seen[name]

    ok, denied = _split(topics, allowed)
    if not denied:
        return None
    extra = [denied_topic(t) for t in denied]
    if not ok:
        base[response_field] = extra
        return base
    _replace(request, **{field: ok})

    def merge(values: dict) -> dict:
        values[response_field] = list(values[response_field]) + extra
        return values

    _add_merge(request, merge)
    return None


def _error_partitions(error: E, **fields: Any) -> Callable[[list[int]], list[dict]]:
    def make(indexes: list[int]) -> list[dict]:
        return [{"partition_index": i, "error_code": error, **fields} for i in indexes]

    return make


# -- the data path --------------------------------------------------------------------------
def check_produce(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    acks = req.acks

    def answer(t: Any, error: E) -> dict:
        return {
            "name": t.name,
            "partition_responses": [
                {"index": p.index, "error_code": error, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": -1, "record_errors": (), "error_message": None}
                for p in t.partition_data
            ],
        }

    base = {"responses": [], "throttle_time": 0, "node_endpoints": []}
    if req.transactional_id is not None and not s.allow(WRITE, TXN, req.transactional_id):
        if acks == 0:
            return CLOSE_CONNECTION
        base["responses"] = [answer(t, TIDAF) for t in req.topic_data]
        return base
    out = _partitioned(
        request, s, WRITE, field="topic_data", response_field="responses",
        denied_topic=lambda t: answer(t, TAF), base=base,
    )  # fmt: skip
    if out is not None and acks == 0:
        return CLOSE_CONNECTION  # acks=0: every topic denied
    # acks=0 with some topics denied: the rest is appended, then the connection closed
    # (KafkaApis.handle_produce sees the denied topics' errors in the merged response)
    return out


def check_fetch(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    version = request.header.api_version
    replica_id = req.replica_state.replica_id if version >= 15 else getattr(req, "replica_id", -1)
    if replica_id >= 0:
        if s.allow_cluster(CLUSTER_ACTION):
            return None
        error: E = CAF
    else:
        error = TAF
    by_id = version >= 13

    def name_of(t: Any) -> str | None:
        if by_id:
            info = step.store.get_by_id(t.topic_id)
            return info.name if info is not None else None
        return t.topic

    def denied(t: Any) -> dict:
        return {
            "topic": None if by_id else t.topic,
            "topic_id": t.topic_id if by_id else None,
            "partitions": [
                {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                 "preferred_read_replica": -1, "records": b""}
                for p in t.partitions
            ],
        }

    if error is CAF:
        return {"throttle_time": 0, "error_code": E.none, "session_id": 0,
                "responses": [denied(t) for t in req.topics], "node_endpoints": []}
    base = {"throttle_time": 0, "error_code": E.none, "session_id": 0, "responses": [], "node_endpoints": []}
    return _partitioned(
        request, s, READ, field="topics", response_field="responses", denied_topic=denied, base=base,
        name_of=name_of,
    )  # fmt: skip


def check_list_offsets(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    make = _error_partitions(TAF, timestamp=-1, offset=-1, leader_epoch=-1)
    return _partitioned(
        request, s, DESCRIBE, field="topics", response_field="topics",
        denied_topic=lambda t: {"name": t.name, "partitions": make([p.partition_index for p in t.partitions])},
        base={"throttle_time": 0, "topics": []},
    )  # fmt: skip


def check_metadata(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    version = request.header.api_version
    all_topics = req.topics is None or (version == 0 and not req.topics)
    include_topic_ops = getattr(req, "include_topic_authorized_operations", False)
    include_cluster_ops = getattr(req, "include_cluster_authorized_operations", False)
    denied_entries: list[dict] = []
    if not all_topics and s.authorizer is not None:
        allow_auto = getattr(req, "allow_auto_topic_creation", True)
        may_create: bool | None = None
        ok = []
        for t in req.topics:
            name = t.name
            if name is None:
                topic_id = getattr(t, "topic_id", None)
                info = step.store.get_by_id(topic_id) if topic_id is not None else None
                if info is None or s.allow(DESCRIBE, TOPIC, info.name):
                    ok.append(t)
                else:
                    denied_entries.append({"error_code": TAF, "name": None, "topic_id": t.topic_id,
                                           "is_internal": False, "partitions": []})
                continue
            if not s.allow(DESCRIBE, TOPIC, name):
                denied_entries.append({"error_code": TAF, "name": name, "topic_id": ZERO_UUID,
                                       "is_internal": False, "partitions": []})
                continue
            if allow_auto and step.store.get(name) is None:
                # auto-creation needs CREATE on the cluster or the topic
                if may_create is None:
                    may_create = s.allow_cluster(CREATE, audit=False)
                if not may_create and not s.allow(CREATE, TOPIC, name):
                    denied_entries.append({"error_code": TAF, "name": name, "topic_id": ZERO_UUID,
                                           "is_internal": False, "partitions": []})
                    continue
            ok.append(t)
        if len(ok) != len(req.topics):
            _replace(request, topics=ok)
    # v0: an empty list means every topic; the handler's list is then replaced
    drop_all = version == 0 and not all_topics and not request.body.topics

    def merge(values: dict) -> dict:
        topics = values["topics"]
        if drop_all:
            topics = []
        elif all_topics and s.authorizer is not None:
            topics = [t for t in topics if s.allow(DESCRIBE, TOPIC, t["name"], audit=False)]
        if include_topic_ops:
            for t in topics:
                if t.get("name") is not None and t["error_code"] == E.none:
                    t["topic_authorized_operations"] = s.operations(TOPIC, t["name"])
        values["topics"] = list(topics) + denied_entries
        if include_cluster_ops:
            values["cluster_authorized_operations"] = (
                s.operations(CLUSTER, CLUSTER_NAME) if s.allow_cluster(DESCRIBE, audit=False) else 0
            )
        return values

    if all_topics or denied_entries or include_topic_ops or include_cluster_ops:
        _add_merge(request, merge)
    return None


def check_offset_for_leader_epoch(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow_cluster(CLUSTER_ACTION, audit=False):
        return None
    return _partitioned(
        request, s, DESCRIBE, field="topics", response_field="topics",
        denied_topic=lambda t: {"topic": t.topic, "partitions": [
            {"error_code": TAF, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            for p in t.partitions]},
        base={"throttle_time": 0, "topics": []}, name_of=lambda t: t.topic,
    )  # fmt: skip


# -- groups -----------------------------------------------------------------------------------
def _group_only(op: AclOperation, answer: Callable[[Request], dict]) -> Check:
    def check(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
        if s.allow(op, GROUP, request.body.group_id):
            return None
        return answer(request)

    return check


def _all_partitions(request: Request, error: E) -> list[dict]:
    return [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                        for p in t.partitions]}
        for t in request.body.topics
    ]


def _commit_topics(s: Session, request: Request) -> dict | None:
    return _partitioned(
        request, s, READ, field="topics", response_field="topics",
        denied_topic=lambda t: {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": TAF} for p in t.partitions]},
        base={"throttle_time": 0, "topics": []},
    )  # fmt: skip


def check_offset_commit(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if not s.allow(READ, GROUP, request.body.group_id):
        return {"throttle_time": 0, "topics": _all_partitions(request, GAF)}
    return _commit_topics(s, request)


def check_txn_offset_commit(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    if not s.allow(WRITE, TXN, req.transactional_id):
        return {"throttle_time": 0, "topics": _all_partitions(request, TIDAF)}
    if not s.allow(READ, GROUP, req.group_id):
        return {"throttle_time": 0, "topics": _all_partitions(request, GAF)}
    return _commit_topics(s, request)


def check_offset_delete(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if not s.allow(DELETE, GROUP, request.body.group_id):
        return {"error_code": GAF, "throttle_time": 0, "topics": []}
    return _partitioned(
        request, s, READ, field="topics", response_field="topics",
        denied_topic=lambda t: {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": TAF} for p in t.partitions]},
        base={"error_code": E.none, "throttle_time": 0, "topics": []},
    )  # fmt: skip


def _offset_fetch_filter(s: Session, topics: Any) -> tuple[Any, list[dict], bool]:
    """One group's topics: (allowed topics, denied answers, filter the response?)."""
    if topics is None:
        return None, [], True  # every partition: the response is filtered, silently
    ok, denied = _split(topics, lambda t: s.allow(DESCRIBE, TOPIC, t.name))
    answers = [
        {"name": t.name, "partitions": [
            {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": TAF} for i in t.partition_indexes]}
        for t in denied
    ]  # fmt: skip
    return ok, answers, False


def _visible_topics(s: Session, topics: list[dict]) -> list[dict]:
    return [t for t in topics if s.allow(DESCRIBE, TOPIC, t["name"], audit=False)]


def check_offset_fetch(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    if request.header.api_version < 8:
        if not s.allow(DESCRIBE, GROUP, req.group_id):
            return {"throttle_time": 0, "topics": [], "error_code": GAF}
        ok, answers, filter_all = _offset_fetch_filter(s, req.topics)
        if answers:
            _replace(request, topics=ok)

        def merge_one(values: dict) -> dict:
            topics = _visible_topics(s, values["topics"]) if filter_all else list(values["topics"])
            values["topics"] = topics + answers
            return values

        _add_merge(request, merge_one)
        return None
    groups = []
    denied_groups: list[dict] = []
    per_group: dict[str, tuple[list[dict], bool]] = {}
    for g in req.groups:
        if not s.allow(DESCRIBE, GROUP, g.group_id):
            denied_groups.append({"group_id": g.group_id, "topics": [], "error_code": GAF})
            continue
        ok, answers, filter_all = _offset_fetch_filter(s, g.topics)
        per_group[g.group_id] = (answers, filter_all)
        if answers:
            g.topics = ok
        groups.append(g)
    if not groups:
        return {"throttle_time": 0, "groups": denied_groups}
    _replace(request, groups=groups)

    def merge(values: dict) -> dict:
        for g in values["groups"]:
            answers, filter_all = per_group.get(g["group_id"], ([], False))
            topics = _visible_topics(s, g["topics"]) if filter_all else list(g["topics"])
            g["topics"] = topics + answers
        values["groups"] = list(values["groups"]) + denied_groups
        return values

    _add_merge(request, merge)
    return None


def check_find_coordinator(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    version = request.header.api_version
    key_type = getattr(req, "key_type", 0)
    if key_type == 0:
        rtype, error = GROUP, GAF
    elif key_type == 1:
        rtype, error = TXN, TIDAF
    else:
        return None  # the handler answers INVALID_REQUEST
    if version < 4:
        if s.allow(DESCRIBE, rtype, req.key):
            return None
        return {"throttle_time": 0, "error_code": error, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    ok, denied = _split(req.coordinator_keys, lambda k: s.allow(DESCRIBE, rtype, k))
    if not denied:
        return None
    extra = [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": error, "error_message": None}
             for k in denied]
    if not ok:
        return {"throttle_time": 0, "coordinators": extra}
    _replace(request, coordinator_keys=ok)

    def merge(values: dict) -> dict:
        values["coordinators"] = list(values["coordinators"]) + extra
        return values

    _add_merge(request, merge)
    return None


def check_consumer_group_heartbeat(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    if not s.allow(READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": GAF, "error_message": None, "member_epoch": -1}
    for name in req.subscribed_topic_names or ():
        if not s.allow(DESCRIBE, TOPIC, name):
            return {"throttle_time": 0, "error_code": TAF, "error_message": None, "member_epoch": -1}
    return None


def _describe_groups(field: str, empty: Callable[[str], dict], ops_field: str) -> Check:
    def check(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
        req = request.body
        include_ops = getattr(req, "include_authorized_operations", False)
        ok, denied = _split(getattr(req, field), lambda g: s.allow(DESCRIBE, GROUP, g))
        extra = [empty(g) for g in denied]
        if not ok and extra:
            return {"throttle_time": 0, "groups": extra}
        if denied:
            _replace(request, **{field: ok})

        def merge(values: dict) -> dict:
            if include_ops:
                for g in values["groups"]:
                    if g["error_code"] == E.none:
                        g[ops_field] = s.operations(GROUP, g["group_id"])
            values["groups"] = list(values["groups"]) + extra
            return values

        if extra or include_ops:
            _add_merge(request, merge)
        return None

    return check


check_describe_groups = _describe_groups(
    "groups",
    lambda g: {"error_code": GAF, "error_message": None, "group_id": g, "group_state": "",
               "protocol_type": "", "protocol_data": "", "members": [],
               "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED},
    "authorized_operations",
)
check_consumer_group_describe = _describe_groups(
    "group_ids",
    lambda g: {"error_code": GAF, "error_message": None, "group_id": g, "group_state": "",
               "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
               "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED},
    "authorized_operations",
)


def check_delete_groups(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    ok, denied = _split(request.body.groups_names, lambda g: s.allow(DELETE, GROUP, g))
    if not denied:
        return None
    extra = [{"group_id": g, "error_code": GAF} for g in denied]
    if not ok:
        return {"throttle_time": 0, "results": extra}
    _replace(request, groups_names=ok)

    def merge(values: dict) -> dict:
        values["results"] = list(values["results"]) + extra
        return values

    _add_merge(request, merge)
    return None


def check_list_groups(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow_cluster(DESCRIBE, audit=False):
        return None

    def merge(values: dict) -> dict:
        values["groups"] = [g for g in values["groups"] if s.allow(DESCRIBE, GROUP, g["group_id"], audit=False)]
        return values

    _add_merge(request, merge)
    return None


# -- transactions -------------------------------------------------------------------------------
def check_init_producer_id(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    tid = request.body.transactional_id
    if tid is None:
        # the cluster check is not audited: WRITE on any topic is enough (Kafka 4.0)
        if s.allow_cluster(IDEMPOTENT_WRITE, audit=False) or s.allow_any(WRITE, TOPIC):
            return None
        error: E = CAF
    elif s.allow(WRITE, TXN, tid):
        return None
    else:
        error = TIDAF
    return {"throttle_time": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}


def check_add_partitions_to_txn(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    if request.header.api_version >= 4:
        if s.allow_cluster(CLUSTER_ACTION):
            return None
        return {"throttle_time": 0, "error_code": CAF, "results_by_transaction": []}
    topics = req.v3_and_below_topics

    def results(error_of: Callable[[str], E]) -> dict:
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": t.name, "results_by_partition": [
                {"partition_index": p, "partition_error_code": error_of(t.name)} for p in t.partitions]}
            for t in topics]}  # fmt: skip

    if not s.allow(WRITE, TXN, req.v3_and_below_transactional_id):
        return results(lambda name: TIDAF)
    denied = {t.name for t in topics if not s.allow(WRITE, TOPIC, t.name)}
    if denied:
        # Kafka: the unauthorized partitions fail, the others are not attempted
        return results(lambda name: TAF if name in denied else E.operation_not_attempted)
    return None


def check_add_offsets_to_txn(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    req = request.body
    if not s.allow(WRITE, TXN, req.transactional_id):
        return {"throttle_time": 0, "error_code": TIDAF}
    if not s.allow(READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": GAF}
    return None


def check_end_txn(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow(WRITE, TXN, request.body.transactional_id):
        return None
    return {"throttle_time": 0, "error_code": TIDAF, "producer_id": -1, "producer_epoch": -1}


def check_write_txn_markers(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow_cluster(ALTER, audit=False) or s.allow_cluster(CLUSTER_ACTION):
        return None
    return {"markers": [
        {"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": CAF}
                                            for p in t.partition_indexes]}
            for t in m.topics]}
        for m in request.body.markers]}  # fmt: skip


def check_describe_transactions(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    ok, denied = _split(request.body.transactional_ids, lambda t: s.allow(DESCRIBE, TXN, t))
    extra = [{"error_code": TIDAF, "transactional_id": t, "transaction_state": "", "transaction_timeout": 0,
              "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
             for t in denied]
    if not ok and extra:
        return {"throttle_time": 0, "transaction_states": extra}
    if denied:
        _replace(request, transactional_ids=ok)

    def merge(values: dict) -> dict:
        for state in values["transaction_states"]:
            state["topics"] = [t for t in state["topics"] if s.allow(DESCRIBE, TOPIC, t["topic"], audit=False)]
        values["transaction_states"] = list(values["transaction_states"]) + extra
        return values

    _add_merge(request, merge)
    return None


def check_list_transactions(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    def merge(values: dict) -> dict:
        values["transaction_states"] = [
            t for t in values["transaction_states"] if s.allow(DESCRIBE, TXN, t["transactional_id"], audit=False)
        ]
        return values

    _add_merge(request, merge)
    return None


# -- admin --------------------------------------------------------------------------------------
def check_create_topics(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    cluster_create = s.allow_cluster(CREATE, audit=False)
    topics = request.body.topics
    if cluster_create:
        ok, denied = list(topics), list[Any]()
    else:
        ok, denied = _split(topics, lambda t: s.allow(CREATE, TOPIC, t.name))
    extra = [{"name": t.name, "topic_id": ZERO_UUID, "error_code": TAF, "error_message": None,
              "topic_config_error_code": E.none, "num_partitions": -1, "replication_factor": -1,
              "configs": None} for t in denied]
    if not ok:
        return {"throttle_time": 0, "topics": extra}
    if denied:
        _replace(request, topics=ok)

    def merge(values: dict) -> dict:
        for t in values["topics"]:
            if t["error_code"] == E.none and not s.allow(DESCRIBE_CONFIGS, TOPIC, t["name"], audit=False):
                t["topic_config_error_code"] = TAF
                t["configs"] = None
        values["topics"] = list(values["topics"]) + extra
        return values

    if s.authorizer is not None:
        _add_merge(request, merge)
    return None


def check_delete_topics(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow_cluster(DELETE, audit=False):
        return None
    by_id = request.header.api_version >= 6
    topics = request.body.topics if by_id else request.body.topic_names
    ok, extra = [], []
    for t in topics:
        name, topic_id = (t.name, t.topic_id) if by_id else (t, None)
        if name is None:
            info = step.store.get_by_id(topic_id) if topic_id is not None else None
            if info is None:
                ok.append(t)  # the handler answers UNKNOWN_TOPIC_ID
            elif not s.allow(DESCRIBE, TOPIC, info.name):
                extra.append({"name": None, "topic_id": topic_id, "error_code": E.unknown_topic_id,
                              "error_message": None})
            elif not s.allow(DELETE, TOPIC, info.name):
                extra.append({"name": info.name, "topic_id": topic_id, "error_code": TAF, "error_message": None})
            else:
                ok.append(t)
        elif s.allow(DELETE, TOPIC, name):
            ok.append(t)
        else:
            extra.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": TAF, "error_message": None})
    if not extra:
        return None
    if not ok:
        return {"throttle_time": 0, "responses": extra}
    _replace(request, **{"topics" if by_id else "topic_names": ok})

    def merge(values: dict) -> dict:
        values["responses"] = list(values["responses"]) + extra
        return values

    _add_merge(request, merge)
    return None


def check_create_partitions(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    return _partitioned(
        request, s, ALTER, field="topics", response_field="results",
        denied_topic=lambda t: {"name": t.name, "error_code": TAF, "error_message": None},
        base={"throttle_time": 0, "results": []},
    )  # fmt: skip


def check_delete_records(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    return _partitioned(
        request, s, DELETE, field="topics", response_field="topics",
        denied_topic=lambda t: {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "low_watermark": -1, "error_code": TAF}
            for p in t.partitions]},
        base={"throttle_time": 0, "topics": []},
    )  # fmt: skip


def check_describe_producers(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    return _partitioned(
        request, s, READ, field="topics", response_field="topics",
        denied_topic=lambda t: {"name": t.name, "partitions": [
            {"partition_index": i, "error_code": TAF, "error_message": None, "active_producers": []}
            for i in t.partition_indexes]},
        base={"throttle_time": 0, "topics": []},
    )  # fmt: skip


def _configs(op: AclOperation, response_field: str, with_configs: bool) -> Check:
    def check(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
        def allowed(r: Any) -> bool:
            rtype, _ = _CONFIG_RESOURCE.get(r.resource_type, (None, None))
            if rtype is None:
                return True  # the handler answers INVALID_REQUEST
            return s.allow(op, rtype, CLUSTER_NAME if rtype is CLUSTER else r.resource_name)

        ok, denied = _split(request.body.resources, allowed)
        extra = []
        for r in denied:
            entry = {"error_code": _CONFIG_RESOURCE[r.resource_type][1], "error_message": None,
                     "resource_type": r.resource_type, "resource_name": r.resource_name}
            if with_configs:
                entry["configs"] = []
            extra.append(entry)
        if not extra:
            return None
        if not ok:
            return {"throttle_time": 0, response_field: extra}
        _replace(request, resources=ok)

        def merge(values: dict) -> dict:
            values[response_field] = list(values[response_field]) + extra
            return values

        _add_merge(request, merge)
        return None

    return check


def _cluster(op: AclOperation, answer: Callable[[Request, E], dict]) -> Check:
    """An API that needs ``op`` on the cluster; else ``answer(request, CAF)``."""

    def check(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
        if s.allow_cluster(op):
            return None
        return answer(request, CAF)

    return check


def _top_level(extra: dict | None = None) -> Callable[[Request, E], dict]:
    def answer(request: Request, error: E) -> dict:
        return {"throttle_time": 0, "error_code": error, "error_message": None, **(extra or {})}

    return answer


def _alter_replica_log_dirs_denied(request: Request, error: E) -> dict:
    results: dict[str, list[int]] = {}
    for d in request.body.dirs:
        for t in d.topics:
            results.setdefault(t.name, []).extend(t.partitions)
    return {"throttle_time": 0, "results": [
        {"topic_name": name, "partitions": [{"partition_index": p, "error_code": error} for p in parts]}
        for name, parts in results.items()]}  # fmt: skip


def _alter_client_quotas_denied(request: Request, error: E) -> dict:
    return {"throttle_time": 0, "entries": [
        {"error_code": error, "error_message": None,
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
        for entry in request.body.entries]}  # fmt: skip


def _alter_scram_denied(request: Request, error: E) -> dict:
    users = dict.fromkeys([d.name for d in request.body.deletions] + [u.name for u in request.body.upsertions])
    return {"throttle_time": 0, "results": [{"user": u, "error_code": error, "error_message": None} for u in users]}


def _elect_leaders_denied(request: Request, error: E) -> dict:
    topics = request.body.topic_partitions or ()
    return {"throttle_time": 0, "error_code": error, "replica_election_results": [
        {"topic": t.topic, "partition_result": [
            {"partition_id": p, "error_code": error, "error_message": None} for p in t.partitions]}
        for t in topics]}  # fmt: skip


def _describe_log_dirs_denied(request: Request, error: E) -> dict:
    return {"throttle_time": 0, "error_code": error, "results": []}


def _acl_denied(field: str, entries: str) -> Callable[[Request, E], dict]:
    def answer(request: Request, error: E) -> dict:
        one: dict[str, Any] = {"error_code": error, "error_message": "Cluster authorization failed."}
        if field == "filter_results":
            one["matching_acls"] = []
        return {"throttle_time": 0, field: [dict(one) for _ in getattr(request.body, entries)]}

    return answer


def check_describe_acls(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if s.allow_cluster(DESCRIBE):
        return None
    return {"throttle_time": 0, "error_code": CAF, "error_message": "Cluster authorization failed.",
            "resources": []}


def check_describe_cluster(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    if not getattr(request.body, "include_cluster_authorized_operations", False):
        return None

    def merge(values: dict) -> dict:
        values["cluster_authorized_operations"] = (
            s.operations(CLUSTER, CLUSTER_NAME) if s.allow_cluster(DESCRIBE, audit=False) else 0
        )
        return values

    _add_merge(request, merge)
    return None


def check_describe_topic_partitions(s: Session, request: Request, step: AuthorizationStep) -> dict | None:
    named = {t.name for t in request.body.topics}

    def merge(values: dict) -> dict:
        topics = []
        for t in values["topics"]:
            name = t["name"]
            if s.allow(DESCRIBE, TOPIC, name, audit=name in named):
                if t["error_code"] == E.none:
                    t["topic_authorized_operations"] = s.operations(TOPIC, name)
                topics.append(t)
            elif name in named:
                topics.append({"error_code": TAF, "name": name, "topic_id": ZERO_UUID, "is_internal": False,
                               "partitions": [], "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
        values["topics"] = topics
        return values

    _add_merge(request, merge)
    return None


CHECKS: dict[int, Check] = {
    ApiKey.PRODUCE: check_produce,
    ApiKey.FETCH: check_fetch,
    ApiKey.LIST_OFFSETS: check_list_offsets,
    ApiKey.METADATA: check_metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: check_offset_for_leader_epoch,
    ApiKey.OFFSET_COMMIT: check_offset_commit,
    ApiKey.OFFSET_FETCH: check_offset_fetch,
    ApiKey.OFFSET_DELETE: check_offset_delete,
    ApiKey.FIND_COORDINATOR: check_find_coordinator,
    ApiKey.JOIN_GROUP: _group_only(READ, lambda r: {
        "throttle_time": 0, "error_code": GAF, "generation_id": -1, "leader": "", "member_id": "", "members": [],
        # nullable from v7 (Kafka's JoinGroupResponse: "" before)
        "protocol_name": None if r.header.api_version >= 7 else ""}),
    ApiKey.SYNC_GROUP: _group_only(READ, lambda r: {"throttle_time": 0, "error_code": GAF, "assignment": b""}),
    ApiKey.HEARTBEAT: _group_only(READ, lambda r: {"throttle_time": 0, "error_code": GAF}),
    ApiKey.LEAVE_GROUP: _group_only(READ, lambda r: {"throttle_time": 0, "error_code": GAF, "members": []}),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: check_consumer_group_heartbeat,
    ApiKey.DESCRIBE_GROUPS: check_describe_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: check_consumer_group_describe,
    ApiKey.DELETE_GROUPS: check_delete_groups,
    ApiKey.LIST_GROUPS: check_list_groups,
    ApiKey.INIT_PRODUCER_ID: check_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: check_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: check_add_offsets_to_txn,
    ApiKey.END_TXN: check_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: check_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: check_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: check_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: check_list_transactions,
    ApiKey.CREATE_TOPICS: check_create_topics,
    ApiKey.DELETE_TOPICS: check_delete_topics,
    ApiKey.CREATE_PARTITIONS: check_create_partitions,
    ApiKey.DELETE_RECORDS: check_delete_records,
    ApiKey.DESCRIBE_PRODUCERS: check_describe_producers,
    ApiKey.DESCRIBE_CONFIGS: _configs(DESCRIBE_CONFIGS, "results", True),
    ApiKey.ALTER_CONFIGS: _configs(ALTER_CONFIGS, "responses", False),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(ALTER_CONFIGS, "responses", False),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(DESCRIBE, _describe_log_dirs_denied),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _cluster(ALTER, _alter_replica_log_dirs_denied),
    ApiKey.DESCRIBE_ACLS: check_describe_acls,
    ApiKey.CREATE_ACLS: _cluster(ALTER, _acl_denied("results", "creations")),
    ApiKey.DELETE_ACLS: _cluster(ALTER, _acl_denied("filter_results", "filters")),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(DESCRIBE_CONFIGS, _top_level({"entries": None})),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(ALTER_CONFIGS, _alter_client_quotas_denied),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(DESCRIBE, _top_level({"results": []})),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(ALTER, _alter_scram_denied),
    ApiKey.ELECT_LEADERS: _cluster(ALTER, _elect_leaders_denied),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(ALTER, _top_level({"responses": []})),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(DESCRIBE, _top_level({"topics": []})),
    ApiKey.DESCRIBE_QUORUM: _cluster(DESCRIBE, _top_level({"topics": [], "nodes": []})),
    ApiKey.UNREGISTER_BROKER: _cluster(ALTER, _top_level()),
    ApiKey.ADD_RAFT_VOTER: _cluster(ALTER, _top_level()),
    ApiKey.REMOVE_RAFT_VOTER: _cluster(ALTER, _top_level()),
    ApiKey.LIST_CLIENT_METRICS_RESOURCES: _cluster(DESCRIBE_CONFIGS, _top_level({"config_resources": []})),
    ApiKey.DESCRIBE_CLUSTER: check_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: check_describe_topic_partitions,
}

#: without an authorizer only the authorized-operations fields need the step
CHECKS_WITHOUT_AUTHORIZER: dict[int, Check] = {
    key: CHECKS[key]
    for key in (ApiKey.METADATA, ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE,
                ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_TOPIC_PARTITIONS)
}  # fmt: skip

#: APIs no check applies to (Kafka's KafkaApis checks nothing for them, or the handler
#: refuses them whatever the principal): every other API must be in CHECKS
UNCHECKED = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.CREATE_DELEGATION_TOKEN,
     ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.DESCRIBE_DELEGATION_TOKEN}
)  # fmt: skip
