"""Config and client-quota administration over the wire, on :class:`KafkaClient`.

``describe_client_quotas`` and ``alter_client_quotas`` speak DescribeClientQuotas (48)
and AlterClientQuotas (49) at the highest version both sides support, with entities as
``{entity_type: name}`` dicts where ``None`` is the ``<default>`` entity (a null name on
the wire), as in Kafka's ``ClientQuotaEntity``. ``describe_configs``,
``incremental_alter_configs`` and ``alter_configs`` speak DescribeConfigs (32),
IncrementalAlterConfigs (44) and AlterConfigs (33) on topic, broker and group resources,
``list_config_resources`` ListConfigResources (74, KIP-1142). ``tidegate configs`` is
built on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.errors import BrokerResponseError, ErrorCode, UnsupportedVersionError
from tidegate.protocol.apis import ApiKey
from tidegate.protocol.consumer_protocol import decode_assignment
from tidegate.security.authorizer.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

from .client import KafkaClient

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

#: DescribeConfigs/AlterConfigs resource types (Kafka's ConfigResource.Type)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ConfigSynonymInfo:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntryInfo:
    """One entry of a DescribeConfigs result (``source`` is Kafka's config_source id)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonymInfo, ...]


def describe_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    *,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = True,
    timeout_ms: float | None = None,
) -> list[ConfigEntryInfo]:
    """The configs of one resource (all, or ``keys``); BrokerResponseError on an error."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configuration_keys": None if keys is None else list(keys),
            }
        ],
        "include_synonyms": include_synonyms,
        "include_documentation": False,
    }
    resp = client.request(ApiKey.DESCRIBE_CONFIGS, body, timeout_ms=timeout_ms)
    (result,) = resp.results
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")
    return [
        ConfigEntryInfo(
            c.name,
            c.value,
            int(c.config_source),
            c.read_only,
            c.is_sensitive,
            tuple(ConfigSynonymInfo(s.name, s.value, int(s.source)) for s in c.synonyms),
        )
        for c in result.configs
    ]


def list_config_resources(
    client: KafkaClient, resource_types: Iterable[int], *, timeout_ms: float | None = None
) -> list[tuple[int, str]] | None:
    """The (type, name) of the config resources of ``resource_types`` (KIP-1142's
    ListConfigResources v1; Kafka's ``Admin.listConfigResources``); None from a broker
    without v1 (v0 lists client-metrics resources only) or one that answers
    UNSUPPORTED_VERSION or CLUSTER_AUTHORIZATION_FAILED, which kafka-configs.sh takes as
    "no such resources known"."""
    node = client.await_ready(None, timeout_ms)
    try:
        version = client.api_version(node, ApiKey.LIST_CONFIG_RESOURCES)
    except UnsupportedVersionError:
        return None
    if version < 1:
        return None
    body = {"resource_types": list(resource_types)}
    resp = client.request(ApiKey.LIST_CONFIG_RESOURCES, body, node_id=node, version=version, timeout_ms=timeout_ms)
    if resp.error_code in (ErrorCode.unsupported_version, ErrorCode.cluster_authorization_failed):
        return None
    if resp.error_code:
        raise BrokerResponseError(int(resp.error_code), "ListConfigResources")
    return [(int(r.resource_type), r.resource_name) for r in resp.config_resources]


def incremental_alter_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    ops: Iterable[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> None:
    """Apply (key, operation, value) operations to one resource; BrokerResponseError if
    the broker refuses them."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }
    resp = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body, timeout_ms=timeout_ms)
    _raise_on_error(resp)


def alter_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    configs: Mapping[str, str],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> None:
    """The legacy AlterConfigs: replace every config of one resource with ``configs``."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "validate_only": validate_only,
    }
    resp = client.request(ApiKey.ALTER_CONFIGS, body, timeout_ms=timeout_ms)
    _raise_on_error(resp)


def _raise_on_error(resp: object) -> None:
    (result,) = resp.responses  # type: ignore[attr-defined]
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")


@dataclass(frozen=True, slots=True)
class QuotaFilterComponent:
    """One filter component: an exact name, the default (``match_type=MATCH_DEFAULT``),
    or any named entity of the type (``MATCH_SPECIFIED``)."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_EXACT, name)

    @classmethod
    def of_default(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT, None)

    @classmethod
    def of_type(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_SPECIFIED, None)


Entity = dict[str, str | None]


def describe_client_quotas(
    client: KafkaClient,
    components: Iterable[QuotaFilterComponent] = (),
    *,
    strict: bool = False,
    timeout_ms: float | None = None,
) -> list[tuple[Entity, dict[str, float]]]:
    """The configured quotas matching the filter: (entity, {key: value}) pairs."""
    body = {
        "components": [
            {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
            for c in components
        ],
        "strict": strict,
    }
    resp = client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body, timeout_ms=timeout_ms)
    if resp.error_code:
        raise BrokerResponseError(int(resp.error_code), resp.error_message or "")
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in resp.entries or ()
    ]


def alter_client_quotas(
    client: KafkaClient,
    alterations: Iterable[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> list[tuple[Entity, int, str | None]]:
    """Set (a number) or remove (``None``) quota keys per entity; returns
    (entity, error code, error message) per alteration, in order."""
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
            "ops": [
                {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                for k, v in ops.items()
            ],
        }
        for entity, ops in alterations
    ]
    resp = client.request(
        ApiKey.ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only},
        timeout_ms=timeout_ms,
    )  # fmt: skip
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            int(entry.error_code),
            entry.error_message,
        )
        for entry in resp.entries
    ]


# -- ACLs (CreateAcls, DescribeAcls, DeleteAcls) -----------------------------------------------
def _filter_body(f: AclBindingFilter) -> dict:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission),
    }


def create_acls(client: KafkaClient, bindings: Iterable[AclBinding], *, timeout_ms: float | None = None) -> None:
    """Create ACLs; the first failed creation raises."""
    body = {
        "creations": [
            {"resource_type": int(b.resource_type), "resource_name": b.name,
             "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
             "operation": int(b.operation), "permission_type": int(b.permission)}
            for b in bindings
        ]
    }  # fmt: skip
    resp = client.request(ApiKey.CREATE_ACLS, body, timeout_ms=timeout_ms)
    for result in resp.results:
        if result.error_code:
            raise BrokerResponseError(int(result.error_code), result.error_message or "")


def _binding(resource: object, entry: object) -> AclBinding:
    r: Any = resource
    e: Any = entry
    return AclBinding(
        ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type), e.principal, e.host,
        AclOperation(e.operation), AclPermissionType(e.permission_type),
    )  # fmt: skip


def describe_acls(client: KafkaClient, f: AclBindingFilter, *, timeout_ms: float | None = None) -> list[AclBinding]:
    """The ACLs matching the filter."""
    resp = client.request(ApiKey.DESCRIBE_ACLS, _filter_body(f), timeout_ms=timeout_ms)
    if resp.error_code:
        raise BrokerResponseError(int(resp.error_code), resp.error_message or "")
    return [_binding(r, a) for r in resp.resources for a in r.acls]


def delete_acls(
    client: KafkaClient, filters: Iterable[AclBindingFilter], *, timeout_ms: float | None = None
) -> list[list[AclBinding]]:
    """Delete the ACLs matching each filter; per filter, the ACLs removed."""
    resp = client.request(ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]}, timeout_ms=timeout_ms)
    out = []
    for result in resp.filter_results:
        if result.error_code:
            raise BrokerResponseError(int(result.error_code), result.error_message or "")
        out.append([
            AclBinding(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type), m.principal,
                       m.host, AclOperation(m.operation), AclPermissionType(m.permission_type))
            for m in result.matching_acls
        ])  # fmt: skip
    return out


# -- topics (CreateTopics 19, DeleteTopics 20, CreatePartitions 37, Metadata 3) ------------
@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]


def create_topic(
    client: KafkaClient, name: str, partitions: int = -1, replication_factor: int = -1,
    configs: Mapping[str, str] | None = None, *, timeout_ms: float | None = None,
) -> None:
    """CreateTopics of one topic (-1: the broker's defaults); BrokerResponseError on an error."""
    body = {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 30_000,
        "validate_only": False,
    }
    resp = client.request(ApiKey.CREATE_TOPICS, body, timeout_ms=timeout_ms)
    (result,) = resp.topics
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")


def delete_topics(client: KafkaClient, names: Iterable[str], *, timeout_ms: float | None = None) -> None:
    body = {"topic_names": list(names), "timeout": 30_000}
    resp = client.request(ApiKey.DELETE_TOPICS, body, max_version=5, timeout_ms=timeout_ms)
    for r in resp.responses:
        if r.error_code:
            raise BrokerResponseError(int(r.error_code), r.error_message or f"topic {r.name}")


def create_partitions(client: KafkaClient, name: str, count: int, *, timeout_ms: float | None = None) -> None:
    body = {"topics": [{"name": name, "count": count, "assignments": None}], "timeout": 30_000,
            "validate_only": False}
    resp = client.request(ApiKey.CREATE_PARTITIONS, body, timeout_ms=timeout_ms)
    (result,) = resp.results
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")


def describe_topics(
    client: KafkaClient, names: Iterable[str] | None = None, *, timeout_ms: float | None = None
) -> list[TopicDescription]:
    """Metadata of ``names`` (None: every topic), sorted by name; a named topic that does
    not exist raises BrokerResponseError."""
    body = {"topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
    resp = client.request(ApiKey.METADATA, body, max_version=12, timeout_ms=timeout_ms)
    out = []
    for t in resp.topics:
        if t.error_code:
            raise BrokerResponseError(int(t.error_code), f"topic '{t.name}'")
        parts = tuple(sorted(
            (PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                           tuple(getattr(p, "offline_replicas", ()))) for p in t.partitions),
            key=lambda p: p.partition))
        out.append(TopicDescription(t.name, kafka_uuid(getattr(t, "topic_id", None)),
                                    bool(getattr(t, "is_internal", False)), parts))
    return sorted(out, key=lambda d: d.name)


def kafka_uuid(value: Any) -> str:
    """A topic id as Kafka prints it (Uuid.toString: URL-safe base64, no padding)."""
    import base64
    import uuid

    raw = value.bytes if isinstance(value, uuid.UUID) else bytes(16)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# -- consumer groups (FindCoordinator 10, ListGroups 16, DescribeGroups 15, OffsetFetch 9,
#    OffsetCommit 8, DeleteGroups 42, OffsetDelete 47) -------------------------------------
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    #: "classic", "consumer", "share" (ListGroups v5); "" from an older broker
    group_type: str = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: the partitions of its assignment (consumer protocol), sorted
    assignment: tuple[TopicPartition, ...]
    #: a consumer group's member (ConsumerGroupDescribe): its epoch, its target assignment
    #: (sorted), and whether it speaks the consumer protocol (False: a classic member of
    #: a consumer group; None: unknown, ConsumerGroupDescribe v0); None for a classic group
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None
    upgraded: bool | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error_code: int
    state: str
    protocol_type: str
    #: the assignor the members agreed on (range, roundrobin, ...), the server-side
    #: assignor of a consumer group (uniform, range)
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: tuple[int, str, int]
    #: "classic" or "consumer" (Kafka's GroupType)
    group_type: str = "classic"
    #: a consumer group's group epoch and target assignment epoch (None for a classic group)
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


def find_group_coordinator(client: KafkaClient, group: str, *, timeout_ms: float | None = None) -> int:
    """The node id of ``group``'s coordinator (FindCoordinator, key type GROUP), known to
    ``client`` from then on."""
    return group_coordinator(client, group, timeout_ms=timeout_ms)[0]


def group_coordinator(
    client: KafkaClient, group: str, *, timeout_ms: float | None = None
) -> tuple[int, str, int]:
    """(node id, host, port) of ``group``'s coordinator (:func:`find_group_coordinator`)."""
    node = client.await_ready(None, timeout_ms)
    version = client.api_version(node, ApiKey.FIND_COORDINATOR, max_version=4)
    if version >= 4:
        body: dict = {"key_type": 0, "coordinator_keys": [group]}
    else:
        body = {"key": group, "key_type": 0}
    resp = client.request(ApiKey.FIND_COORDINATOR, body, node_id=node, version=version, timeout_ms=timeout_ms)
    found = resp.coordinators[0] if version >= 4 else resp
    if found.error_code:
        raise BrokerResponseError(int(found.error_code), found.error_message or f"group '{group}'")
    if found.node_id not in client.nodes():
        client.add_node(found.node_id, found.host, found.port)
    return int(found.node_id), str(found.host), int(found.port)


def list_groups(
    client: KafkaClient, states: Iterable[str] = (), *, types: Iterable[str] = (), timeout_ms: float | None = None
) -> list[GroupListing]:
    """Every group of every broker (ListGroups to each, as Kafka's Admin.listGroups),
    optionally only those in ``states`` (KIP-518) and of ``types`` (KIP-848's v5 filter:
    classic, consumer, share), sorted by id."""
    client.metadata([], timeout_ms=timeout_ms)
    out: dict[str, GroupListing] = {}
    for node in client.nodes():
        body = {"states_filter": list(states), "types_filter": list(types)}
        resp = client.request(ApiKey.LIST_GROUPS, body, node_id=node, max_version=5, timeout_ms=timeout_ms)
        if resp.error_code:
            raise BrokerResponseError(int(resp.error_code), "ListGroups")
        for g in resp.groups:
            out[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state or "",
                                           (getattr(g, "group_type", None) or "").lower())
    return [out[k] for k in sorted(out)]


def _consumer_assignment(data: bytes | None) -> tuple[TopicPartition, ...]:
    """The partitions of a consumer protocol assignment; () when it is not one."""
    try:
        return tuple(decode_assignment(data))
    except ValueError:
        return ()


def describe_groups(
    client: KafkaClient, groups: Iterable[str], *, timeout_ms: float | None = None
) -> list[GroupDescription]:
    """DescribeGroups of each group at its coordinator; a group that does not exist comes
    back in state ``Dead`` (as Kafka answers), an error in ``error_code``."""
    out = []
    for group in groups:
        where = group_coordinator(client, group, timeout_ms=timeout_ms)
        node = where[0]
        body = {"groups": [group], "include_authorized_operations": False}
        resp = client.request(ApiKey.DESCRIBE_GROUPS, body, node_id=node, max_version=5, timeout_ms=timeout_ms)
        g = resp.groups[0]
        consumer = g.protocol_type in ("consumer", "")
        members = tuple(
            MemberDescription(
                m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                _consumer_assignment(m.member_assignment) if consumer else (),
            )
            for m in g.members
        )  # fmt: skip
        out.append(GroupDescription(g.group_id, int(g.error_code), g.group_state, g.protocol_type,
                                    g.protocol_data, members, where))  # fmt: skip
    return out


def _topic_partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    """The (topic, partition) pairs of a ConsumerGroupDescribe or ShareGroupDescribe
    assignment, sorted."""
    return tuple(sorted((tp.topic_name, p) for tp in assignment.topic_partitions for p in tp.partitions))


def describe_consumer_groups(
    client: KafkaClient, groups: Iterable[str], *, timeout_ms: float | None = None
) -> list[GroupDescription]:
    """Each group as Kafka's ``Admin.describeConsumerGroups`` describes it: ConsumerGroupDescribe
    (KIP-848) at its coordinator first, and DescribeGroups (:func:`describe_groups`) for a
    group it does not know as a consumer group (GROUP_ID_NOT_FOUND: a classic group, or
    none; or no error with a negative group epoch, as Tansu answers) or when the broker
    lacks the API."""
    out = []
    for group in groups:
        where = group_coordinator(client, group, timeout_ms=timeout_ms)
        client.await_ready(where[0], timeout_ms)  # its ApiVersions say whether it has the API
        if not client.supports(where[0], ApiKey.CONSUMER_GROUP_DESCRIBE):
            out += describe_groups(client, [group], timeout_ms=timeout_ms)
            continue
        body = {"group_ids": [group], "include_authorized_operations": False}
        g = client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, body, node_id=where[0], max_version=1,
                           timeout_ms=timeout_ms).groups[0]  # fmt: skip
        if g.error_code == ErrorCode.group_id_not_found or (g.error_code == ErrorCode.none and g.group_epoch < 0):
            # not a consumer group; a broker may say so with no error and epoch -1 (Tansu
            # answers a classic group so): no consumer group has a negative epoch
            out += describe_groups(client, [group], timeout_ms=timeout_ms)
            continue
        members = tuple(
            MemberDescription(
                m.member_id, m.instance_id, m.client_id, m.client_host, _topic_partitions(m.assignment),
                m.member_epoch, _topic_partitions(m.target_assignment),
                {0: False, 1: True}.get(int(getattr(m, "member_type", -1))),
            )
            for m in g.members
        )  # fmt: skip
        state = g.group_state if not g.error_code else "Dead"
        out.append(GroupDescription(g.group_id, int(g.error_code), state, "consumer", g.assignor_name, members,
                                    where, "consumer", g.group_epoch, g.assignment_epoch))  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    #: its assigned partitions, sorted
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    error_code: int
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMemberDescription, ...]
    coordinator: tuple[int, str, int]


def describe_share_groups(
    client: KafkaClient, groups: Iterable[str], *, timeout_ms: float | None = None
) -> list[ShareGroupDescription]:
    """ShareGroupDescribe (v1) of each group at its coordinator; a group that does not
    exist (or is not a share group) has state ``Dead`` and its error in ``error_code``."""
    out = []
    for group in groups:
        where = group_coordinator(client, group, timeout_ms=timeout_ms)
        body = {"group_ids": [group], "include_authorized_operations": False}
        g = client.request(ApiKey.SHARE_GROUP_DESCRIBE, body, node_id=where[0], version=1,
                           timeout_ms=timeout_ms).groups[0]  # fmt: skip
        members = tuple(
            ShareMemberDescription(m.member_id, m.client_id, m.client_host, m.member_epoch,
                                   _topic_partitions(m.assignment))
            for m in g.members
        )  # fmt: skip
        state = g.group_state if not g.error_code else "Dead"
        out.append(ShareGroupDescription(g.group_id, int(g.error_code), state, g.group_epoch,
                                         g.assignment_epoch, members, where))  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    #: -1: no state
    start_offset: int
    #: -1: unknown
    leader_epoch: int
    #: -1: unknown
    lag: int
    error_code: int


def describe_share_group_offsets(
    client: KafkaClient, group: str, *, timeout_ms: float | None = None
) -> dict[TopicPartition, SharePartitionOffset]:
    """Each initialized share-partition of ``group`` (DescribeShareGroupOffsets, v1 with
    its lag when the broker has it)."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    body = {"groups": [{"group_id": group, "topics": None}]}
    resp = client.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, body, node_id=node, max_version=1,
                          timeout_ms=timeout_ms)  # fmt: skip
    (g,) = resp.groups
    if g.error_code:
        raise BrokerResponseError(int(g.error_code), g.error_message or f"group '{group}'")
    return {
        (t.topic_name, p.partition_index): SharePartitionOffset(
            int(p.start_offset), int(p.leader_epoch), int(getattr(p, "lag", -1)), int(p.error_code))
        for t in g.topics for p in t.partitions
    }  # fmt: skip


def alter_share_group_offsets(
    client: KafkaClient, group: str, offsets: Mapping[TopicPartition, int], *, timeout_ms: float | None = None
) -> tuple[int, str | None, dict[TopicPartition, int]]:
    """AlterShareGroupOffsets: set where ``group``'s share-partitions start (the group must
    be empty); (the top-level error code and message, {(topic, partition): error code})."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    topics: dict[str, list[dict]] = {}
    for (t, p), offset in sorted(offsets.items()):
        topics.setdefault(t, []).append({"partition_index": p, "start_offset": offset})
    body = {"group_id": group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}
    resp = client.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, body, node_id=node, version=0, timeout_ms=timeout_ms)
    return int(resp.error_code), resp.error_message, {
        (t.topic_name, p.partition_index): int(p.error_code) for t in resp.responses for p in t.partitions}


def delete_share_group_offsets(
    client: KafkaClient, group: str, topics: Iterable[str], *, timeout_ms: float | None = None
) -> tuple[int, str | None, dict[str, tuple[int, str | None]]]:
    """DeleteShareGroupOffsets: drop ``group``'s share state of ``topics`` (the group must
    be empty); (the top-level error code and message, {topic: (error code, message)})."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    body = {"group_id": group, "topics": [{"topic_name": t} for t in dict.fromkeys(topics)]}
    resp = client.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, body, node_id=node, version=0, timeout_ms=timeout_ms)
    return int(resp.error_code), resp.error_message, {
        t.topic_name: (int(t.error_code), t.error_message) for t in resp.responses}


def list_group_offsets(
    client: KafkaClient, group: str, *, require_stable: bool = False,
    leader_epochs: dict[TopicPartition, int] | None = None, timeout_ms: float | None = None,
) -> dict[TopicPartition, int]:
    """{(topic, partition): committed offset} of ``group`` (OffsetFetch of all its topics;
    ``require_stable``: wait out offsets of open transactions, KIP-447), at the highest
    version both sides have, as Kafka's admin client asks (v8+ name the group in a list:
    Tansu answers the older versions' "all topics" with an empty body). ``leader_epochs``,
    if given, gets the committed leader epoch of each offset that has one."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    resp = client.request(ApiKey.OFFSET_FETCH, offset_fetch_body(group, None, require_stable), node_id=node,
                          max_version=OFFSET_FETCH_MAX_VERSION, timeout_ms=timeout_ms)  # fmt: skip
    code, offsets = offset_fetch_result(resp, leader_epochs)
    if code:
        raise BrokerResponseError(code, f"group '{group}'")
    return offsets


#: OffsetFetch v10 names topics by id
OFFSET_FETCH_MAX_VERSION = 9


def offset_fetch_body(
    group: str, topics: Mapping[str, Iterable[int]] | None, require_stable: bool, *,
    member_id: str | None = None, member_epoch: int = -1,
) -> dict:  # fmt: skip
    """An OffsetFetch body for any version (``topics`` None: all of the group's): the
    group's fields both at the top (v0-v7) and as the one entry of ``groups`` (v8+);
    building it for a version keeps that version's fields. A member of a consumer-protocol
    group names itself and its epoch (v9+, KIP-848); an admin or a classic member does not."""
    listed = None if topics is None else [{"name": t, "partition_indexes": list(ps)} for t, ps in topics.items()]
    return {"group_id": group, "topics": listed, "require_stable": require_stable,
            "groups": [{"group_id": group, "topics": listed, "member_id": member_id,
                        "member_epoch": member_epoch}]}  # fmt: skip


def offset_fetch_result(
    resp: Any, leader_epochs: dict[TopicPartition, int] | None = None
) -> tuple[int, dict[TopicPartition, int]]:
    """(the group's error code, {(topic, partition): committed offset}) of an OffsetFetch
    response of any version; partitions without a committed offset are left out.
    ``leader_epochs``, if given, gets the committed leader epochs (v5+) that are known."""
    groups = getattr(resp, "groups", None)
    where = groups[0] if groups else resp
    code = int(getattr(where, "error_code", 0) or 0)
    offsets = {(t.name, int(p.partition_index)): int(p.committed_offset)
               for t in where.topics or () for p in t.partitions if p.committed_offset >= 0}  # fmt: skip
    if leader_epochs is not None:
        leader_epochs.update({(t.name, int(p.partition_index)): int(p.committed_leader_epoch)
                              for t in where.topics or () for p in t.partitions
                              if p.committed_offset >= 0 and getattr(p, "committed_leader_epoch", -1) >= 0})  # fmt: skip
    return code, offsets


def alter_group_offsets(
    client: KafkaClient, group: str, offsets: Mapping[TopicPartition, int], *, timeout_ms: float | None = None
) -> dict[TopicPartition, int]:
    """Commit ``offsets`` for ``group`` as an admin (OffsetCommit, generation -1, no member:
    the group must be empty); {(topic, partition): error code}."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    topics: dict[str, list[dict]] = {}
    for (t, p), offset in sorted(offsets.items()):
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                         "committed_leader_epoch": -1, "committed_metadata": ""})
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
    resp = client.request(ApiKey.OFFSET_COMMIT, body, node_id=node, max_version=8, timeout_ms=timeout_ms)
    return {(t.name, p.partition_index): int(p.error_code) for t in resp.topics for p in t.partitions}


def delete_groups(client: KafkaClient, groups: Iterable[str], *, timeout_ms: float | None = None) -> dict[str, int]:
    """DeleteGroups at each group's coordinator; {group: error code}."""
    out = {}
    for group in groups:
        node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
        resp = client.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, node_id=node, max_version=2,
                              timeout_ms=timeout_ms)  # fmt: skip
        out[group] = int(resp.results[0].error_code)
    return out


def delete_group_offsets(
    client: KafkaClient, group: str, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
) -> tuple[int, dict[TopicPartition, int]]:
    """OffsetDelete: (the group's error code, {(topic, partition): error code})."""
    node = find_group_coordinator(client, group, timeout_ms=timeout_ms)
    topics: dict[str, list[dict]] = {}
    for t, p in sorted(set(partitions)):
        topics.setdefault(t, []).append({"partition_index": p})
    body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    resp = client.request(ApiKey.OFFSET_DELETE, body, node_id=node, version=0, timeout_ms=timeout_ms)
    return int(resp.error_code), {
        (t.name, p.partition_index): int(p.error_code) for t in resp.topics for p in t.partitions
    }
