"""The authorization step of the request pipeline (Kafka's ``AuthHelper`` and the
checks at the top of each ``KafkaApis.handle*``), sans-IO.

:meth:`AuthorizationStep.authorize` runs after decoding and before the handler. A
per-API check function (:data:`CHECKS`) decides, with Kafka's operations and error
codes (docs/security.md has the table), one of:

* everything is allowed: the handler gets the request as decoded;
* nothing may happen (a cluster-level denial, a transactional id the principal may not
  write): the check returns the whole answer, a response message, and the handler is
  never called (or a :class:`~tidegate.network.request_channel.CloseConnectionResponse`:
  an acks=0 Produce has no response to carry the error);
* some topics, partitions, groups or resources are denied: the check takes them out of
  the request message the handler reads and sets ``request.authz_merge``, which adds
  the denied ones with their errors to the handler's response message (Kafka's
  ``authorizedTopics`` / ``unauthorizedTopicResponses``). The merge also fills the
  ``*_authorized_operations`` fields and drops what an unfiltered listing (all topics,
  all groups) must not reveal.

Checks and merges read and build the generated message classes of each API; the
respond step (:class:`~tidegate.server.request_handler_helper.RequestHandlerHelper`)
applies the merge to every answer, parked or not, once it is a message. The handler
never sees a denied resource. With no authorizer (``authorizer.class.name`` empty)
only Metadata, DescribeCluster, DescribeGroups, ConsumerGroupDescribe and
DescribeTopicPartitions get a merge (every supported operation bit is set).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import (
    CloseConnectionResponse,
    Request,
    RequestContext,
    Response,
)
from tidegate.protocol.apis import ApiKey, api_name
from tidegate.protocol.messages._base import Message
from tidegate.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from tidegate.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from tidegate.protocol.messages.add_raft_voter import AddRaftVoterResponse
from tidegate.protocol.messages.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntityData,
    AlterClientQuotasResponseEntryData,
)
from tidegate.protocol.messages.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from tidegate.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsResponse,
)
from tidegate.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)
from tidegate.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from tidegate.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from tidegate.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from tidegate.protocol.messages.consumer_group_describe import (
    DescribedGroup as DescribedConsumerGroup,
)
from tidegate.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tidegate.protocol.messages.create_acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
)
from tidegate.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from tidegate.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from tidegate.protocol.messages.delete_acls import (
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from tidegate.protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from tidegate.protocol.messages.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from tidegate.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from tidegate.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
)
from tidegate.protocol.messages.describe_acls import DescribeAclsResponse
from tidegate.protocol.messages.describe_client_quotas import DescribeClientQuotasResponse
from tidegate.protocol.messages.describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from tidegate.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from tidegate.protocol.messages.describe_groups import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from tidegate.protocol.messages.describe_log_dirs import DescribeLogDirsResponse
from tidegate.protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    TopicResponse,
)
from tidegate.protocol.messages.describe_producers import (
    PartitionResponse as ProducersPartitionResponse,
)
from tidegate.protocol.messages.describe_quorum import DescribeQuorumResponse
from tidegate.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
)
from tidegate.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseTopic,
)
from tidegate.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from tidegate.protocol.messages.describe_transactions import (
    TransactionState as DescribedTransaction,
)
from tidegate.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsResponse,
)
from tidegate.protocol.messages.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from tidegate.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from tidegate.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from tidegate.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from tidegate.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from tidegate.protocol.messages.incremental_alter_configs import (
    AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse,
)
from tidegate.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from tidegate.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from tidegate.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from tidegate.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from tidegate.protocol.messages.list_config_resources import ListConfigResourcesResponse
from tidegate.protocol.messages.list_groups import ListGroupsResponse
from tidegate.protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from tidegate.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsResponse,
)
from tidegate.protocol.messages.list_transactions import ListTransactionsResponse
from tidegate.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
)
from tidegate.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from tidegate.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from tidegate.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from tidegate.protocol.messages.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from tidegate.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from tidegate.protocol.messages.remove_raft_voter import RemoveRaftVoterResponse
from tidegate.protocol.messages.share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from tidegate.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from tidegate.protocol.messages.share_group_describe import DescribedGroup as DescribedShareGroup
from tidegate.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tidegate.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidegate.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from tidegate.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from tidegate.protocol.messages.unregister_broker import UnregisterBrokerResponse
from tidegate.protocol.messages.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
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
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.cluster_authorization_failed
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.transactional_id_authorization_failed
#: DescribeConfigs' resource types (ConfigResource.Type) and the ACL resource of each
_CONFIG_RESOURCE = {
    2: (TOPIC, TOPIC_AUTHORIZATION_FAILED),
    4: (CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    8: (CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    16: (CLUSTER, CLUSTER_AUTHORIZATION_FAILED),
    32: (GROUP, GROUP_AUTHORIZATION_FAILED),
}

T = TypeVar("T")  # an entry of a request (a topic, a group, a resource)
E = TypeVar("E", bound=Message)  # an entry of a response
M = TypeVar("M", bound=Message)  # a response message
_api_name = functools.cache(api_name)
#: why a Produce with acks=0 is closed when denied: it has no response to carry the error
#: (Kafka's ``closeConnection`` in ``handleProduceRequest``)
ACKS_0_DENIED = "acks=0 produce denied: closing the connection, as Kafka does"


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


#: A check's decision: None (go on, maybe with a filtered request and a merge), the whole
#: response message, or a response of the shell's (closing the connection).
Decision = Message | Response | None
Check = Callable[[Session, Request, "AuthorizationStep"], Decision]


class DescribedGroupLike(Protocol):
    """A described consumer or share group (the two messages' DescribedGroup)."""

    error_code: int
    error_message: str | None
    members: Any


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

    def describable_topics(self, request: Request, names: Iterable[str]) -> list[str]:
        """The topics the request's principal may DESCRIBE (what a consumer group's regular
        expression resolves to for it, and what ConsumerGroupDescribe may show)."""
        if self.authorizer is None:
            return list(names)
        s = self.session(request)
        return [name for name in names if s.allow(DESCRIBE, TOPIC, name, audit=False)]

    def hide_undescribable_group(self, request: Request, group: DescribedGroupLike, topics: set[str]) -> None:
        """Kafka's check for ConsumerGroupDescribe and ShareGroupDescribe: a topic of the
        group's assignments (``topics``) the principal may not DESCRIBE makes the group
        TOPIC_AUTHORIZATION_FAILED, without its members."""
        if len(self.describable_topics(request, topics)) == len(topics):
            return
        group.error_code = ErrorCode.topic_authorization_failed
        group.error_message = "The group has described topic(s) that the client is not authorized to describe."
        group.members = []

    def authorize(self, request: Request) -> Decision:
        """Run the request's check: None lets it through (maybe with a filtered body and
        a merge), a message is the whole answer, a shell response closes the connection."""
        key = request.header.api_key
        if self.authorizer is None:
            check = CHECKS_WITHOUT_AUTHORIZER.get(key)
        else:
            check = CHECKS.get(key)
        if check is None:
            return None
        return check(self.session(request), request, self)


# -- helpers ------------------------------------------------------------------------------
def _add_merge(request: Request, cls: type[M], merge: Callable[[M], None]) -> None:
    """Have the respond step apply ``merge`` to the response (a ``cls``), after any merge
    added before."""

    def typed(response: Message) -> None:
        if not isinstance(response, cls):
            raise TypeError(f"the authorization merge of a {cls.__name__} got a {type(response).__name__}")
        merge(response)

    previous = request.authz_merge
    if previous is None:
        request.authz_merge = typed
        return

    def both(response: Message) -> None:
        previous(response)
        typed(response)

    request.authz_merge = both


def _split(items: Iterable[T], allowed: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    ok: list[T] = []
    denied: list[T] = []
    for item in items:
        (ok if allowed(item) else denied).append(item)
    return ok, denied


def _filtered(
    request: Request,
    items: list[T],
    ok: list[T],
    extra: list[E],
    cls: type[M],
    entries: Callable[[M], list[E]],
    whole: Callable[[list[E]], M],
) -> M | None:
    """The common end of a check that split a request's ``items`` into ``ok`` and denied
    ones answered by ``extra``: nothing denied, go on; nothing allowed, the whole answer
    ``whole(extra)``; else the request keeps ``ok`` (``items`` is the request's own list,
    changed in place) and the response's ``entries`` get ``extra`` at the end."""
    if not extra:
        return None
    if not ok:
        return whole(extra)
    items[:] = ok
    _add_merge(request, cls, lambda response: entries(response).extend(extra))
    return None


def _partitioned(
    request: Request,
    s: Session,
    op: AclOperation,
    topics: list[T],
    name_of: Callable[[T], str | None],
    denied_topic: Callable[[T], E],
    cls: type[M],
    entries: Callable[[M], list[E]],
    whole: Callable[[list[E]], M],
) -> M | None:
    """The common case: a request of ``topics``, each checked for ``op`` on the topic; a
    denied one answered with ``denied_topic(t)`` in the response's ``entries``."""
    seen: dict[str, bool] = {}

    def allowed(t: T) -> bool:
        name = name_of(t)
        if name is None:
            return True  # an unknown topic id: the handler answers UNKNOWN_TOPIC_ID
        if name not in seen:
            seen[name] = s.allow(op, TOPIC, name)
        return seen[name]

    ok, denied = _split(topics, allowed)
    return _filtered(request, topics, ok, [denied_topic(t) for t in denied], cls, entries, whole)


# -- the data path --------------------------------------------------------------------------
def _produce_denied(t: TopicProduceData, error: ErrorCode) -> TopicProduceResponse:
    return TopicProduceResponse(topic_id=t.topic_id, name=t.name, partition_responses=[
        PartitionProduceResponse(index=p.index, error_code=error, base_offset=-1) for p in t.partition_data
    ])  # fmt: skip


def check_produce(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(ProduceRequest)
    acks = req.acks
    if req.transactional_id is not None and not s.allow(WRITE, TRANSACTIONAL_ID, req.transactional_id):
        if acks == 0:
            return CloseConnectionResponse(ACKS_0_DENIED)
        return ProduceResponse(
            responses=[_produce_denied(t, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for t in req.topic_data]
        )
    by_id = request.header.api_version >= 13  # KIP-516

    def name_of(t: TopicProduceData) -> str | None:
        return step.store.topic_name(t.topic_id) if by_id else t.name

    out = _partitioned(
        request, s, WRITE, req.topic_data, name_of,
        lambda t: _produce_denied(t, TOPIC_AUTHORIZATION_FAILED),
        ProduceResponse, lambda r: r.responses, lambda extra: ProduceResponse(responses=extra),
    )  # fmt: skip
    if out is not None and acks == 0:
        return CloseConnectionResponse(ACKS_0_DENIED)  # acks=0: every topic denied
    # acks=0 with some topics denied: the rest is appended, then the connection closed
    # (KafkaApis.handle_produce sees the denied topics' errors in the merged response)
    return out


def check_fetch(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(FetchRequest)
    version = request.header.api_version
    replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
    if replica_id >= 0:
        if s.allow_cluster(CLUSTER_ACTION):
            return None
        error = CLUSTER_AUTHORIZATION_FAILED
    else:
        error = TOPIC_AUTHORIZATION_FAILED
    by_id = version >= 13

    def name_of(t: FetchTopic) -> str | None:
        return step.store.topic_name(t.topic_id) if by_id else t.topic

    def denied(t: FetchTopic) -> FetchableTopicResponse:
        parts = [PartitionData(partition_index=p.partition, error_code=error, high_watermark=-1, records=b"")
                 for p in t.partitions]
        if by_id:
            return FetchableTopicResponse(topic_id=t.topic_id, partitions=parts)
        return FetchableTopicResponse(topic=t.topic, partitions=parts)

    if error is CLUSTER_AUTHORIZATION_FAILED:
        return FetchResponse(responses=[denied(t) for t in req.topics])
    return _partitioned(
        request, s, READ, req.topics, name_of, denied,
        FetchResponse, lambda r: r.responses, lambda extra: FetchResponse(responses=extra),
    )  # fmt: skip


def check_list_offsets(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _partitioned(
        request, s, DESCRIBE, request.body_as(ListOffsetsRequest).topics, lambda t: t.name,
        lambda t: ListOffsetsTopicResponse(name=t.name, partitions=[
            ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]),
        ListOffsetsResponse, lambda r: r.topics, lambda extra: ListOffsetsResponse(topics=extra),
    )  # fmt: skip


def check_metadata(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(MetadataRequest)
    version = request.header.api_version
    all_topics = req.topics is None or (version == 0 and not req.topics)
    include_topic_ops = req.include_topic_authorized_operations
    include_cluster_ops = req.include_cluster_authorized_operations
    denied_entries: list[MetadataResponseTopic] = []
    if req.topics is not None and not all_topics and s.authorizer is not None:
        may_create: bool | None = None
        ok = []
        for t in req.topics:
            name = t.name
            if name is None:
                info = step.store.get_by_id(t.topic_id)
                if info is None or s.allow(DESCRIBE, TOPIC, info.name):
                    ok.append(t)
                else:
                    denied_entries.append(MetadataResponseTopic(
                        error_code=TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=t.topic_id
                    ))  # fmt: skip
                continue
            if not s.allow(DESCRIBE, TOPIC, name):
                denied_entries.append(MetadataResponseTopic(error_code=TOPIC_AUTHORIZATION_FAILED, name=name))
                continue
            if req.allow_auto_topic_creation and step.store.get(name) is None:
                # auto-creation needs CREATE on the cluster or the topic
                if may_create is None:
                    may_create = s.allow_cluster(CREATE, audit=False)
                if not may_create and not s.allow(CREATE, TOPIC, name):
                    denied_entries.append(MetadataResponseTopic(error_code=TOPIC_AUTHORIZATION_FAILED, name=name))
                    continue
            ok.append(t)
        if len(ok) != len(req.topics):
            req.topics = ok
    # v0: an empty list means every topic; the handler's list is then replaced
    drop_all = version == 0 and not all_topics and not req.topics

    def merge(response: MetadataResponse) -> None:
        topics = response.topics
        if drop_all:
            topics = []
        elif all_topics and s.authorizer is not None:
            topics = [t for t in topics if t.name is not None and s.allow(DESCRIBE, TOPIC, t.name, audit=False)]
        if include_topic_ops:
            for t in topics:
                if t.name is not None and t.error_code == ErrorCode.none:
                    t.topic_authorized_operations = s.operations(TOPIC, t.name)
        response.topics = topics + denied_entries
        if include_cluster_ops:
            response.cluster_authorized_operations = (
                s.operations(CLUSTER, CLUSTER_NAME) if s.allow_cluster(DESCRIBE, audit=False) else 0
            )

    if all_topics or denied_entries or include_topic_ops or include_cluster_ops:
        _add_merge(request, MetadataResponse, merge)
    return None


def check_offset_for_leader_epoch(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow_cluster(CLUSTER_ACTION, audit=False):
        return None
    return _partitioned(
        request, s, DESCRIBE, request.body_as(OffsetForLeaderEpochRequest).topics, lambda t: t.topic,
        lambda t: OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            EpochEndOffset(error_code=TOPIC_AUTHORIZATION_FAILED, partition=p.partition) for p in t.partitions]),
        OffsetForLeaderEpochResponse, lambda r: r.topics, lambda extra: OffsetForLeaderEpochResponse(topics=extra),
    )  # fmt: skip


# -- groups -----------------------------------------------------------------------------------
def check_join_group(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow(READ, GROUP, request.body_as(JoinGroupRequest).group_id):
        return None
    # protocol_name is nullable from v7 (Kafka's JoinGroupResponse: "" before)
    return JoinGroupResponse(
        error_code=GROUP_AUTHORIZATION_FAILED, protocol_name=None if request.header.api_version >= 7 else ""
    )


def check_sync_group(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow(READ, GROUP, request.body_as(SyncGroupRequest).group_id):
        return None
    return SyncGroupResponse(error_code=GROUP_AUTHORIZATION_FAILED)


def check_heartbeat(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow(READ, GROUP, request.body_as(HeartbeatRequest).group_id):
        return None
    return HeartbeatResponse(error_code=GROUP_AUTHORIZATION_FAILED)


def check_leave_group(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow(READ, GROUP, request.body_as(LeaveGroupRequest).group_id):
        return None
    return LeaveGroupResponse(error_code=GROUP_AUTHORIZATION_FAILED)


def check_offset_commit(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    """READ on the group, then READ on each topic; from v10 a topic is named by id and
    checked on the name it resolves to (an unknown id: the handler answers
    UNKNOWN_TOPIC_ID), and a denied topic is answered with its id."""
    req = request.body_as(OffsetCommitRequest)
    by_id = request.header.api_version >= 10

    def denied(t: OffsetCommitRequestTopic, error: ErrorCode) -> OffsetCommitResponseTopic:
        return OffsetCommitResponseTopic(topic_id=t.topic_id, name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error) for p in t.partitions
        ])  # fmt: skip

    def name_of(t: OffsetCommitRequestTopic) -> str | None:
        return step.store.topic_name(t.topic_id) if by_id else t.name

    if not s.allow(READ, GROUP, req.group_id):
        return OffsetCommitResponse(topics=[denied(t, GROUP_AUTHORIZATION_FAILED) for t in req.topics])
    return _partitioned(
        request, s, READ, req.topics, name_of, lambda t: denied(t, TOPIC_AUTHORIZATION_FAILED),
        OffsetCommitResponse, lambda r: r.topics, lambda extra: OffsetCommitResponse(topics=extra),
    )  # fmt: skip


def check_txn_offset_commit(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(TxnOffsetCommitRequest)

    def denied(t: TxnOffsetCommitRequestTopic, error: ErrorCode) -> TxnOffsetCommitResponseTopic:
        return TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error)
            for p in t.partitions
        ])  # fmt: skip

    if not s.allow(WRITE, TRANSACTIONAL_ID, req.transactional_id):
        return TxnOffsetCommitResponse(topics=[denied(t, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for t in req.topics])
    if not s.allow(READ, GROUP, req.group_id):
        return TxnOffsetCommitResponse(topics=[denied(t, GROUP_AUTHORIZATION_FAILED) for t in req.topics])
    return _partitioned(
        request, s, READ, req.topics, lambda t: t.name, lambda t: denied(t, TOPIC_AUTHORIZATION_FAILED),
        TxnOffsetCommitResponse, lambda r: r.topics, lambda extra: TxnOffsetCommitResponse(topics=extra),
    )  # fmt: skip


def check_offset_delete(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(OffsetDeleteRequest)
    if not s.allow(DELETE, GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return _partitioned(
        request, s, READ, req.topics, lambda t: t.name,
        lambda t: OffsetDeleteResponseTopic(name=t.name, partitions=[
            OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]),
        OffsetDeleteResponse, lambda r: r.topics, lambda extra: OffsetDeleteResponse(topics=extra),
    )  # fmt: skip


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def _visible_topics(s: Session, topics: list[N]) -> list[N]:
    """The topics of an unfiltered offset listing the principal may DESCRIBE (the others
    are left out silently, as Kafka filters them)."""
    return [t for t in topics if s.allow(DESCRIBE, TOPIC, t.name, audit=False)]


def check_offset_fetch(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    """One group before v8, a batch of groups from v8: a group the principal may not
    DESCRIBE is GROUP_AUTHORIZATION_FAILED; its named topics it may not DESCRIBE are
    answered TOPIC_AUTHORIZATION_FAILED per partition; an unnamed (all partitions)
    listing leaves them out. From v10 topics are named by id, checked on the name the id
    resolves to (an unknown id: the handler answers UNKNOWN_TOPIC_ID)."""
    req = request.body_as(OffsetFetchRequest)
    version = request.header.api_version
    if version < 8:
        if not s.allow(DESCRIBE, GROUP, req.group_id):
            return OffsetFetchResponse(error_code=GROUP_AUTHORIZATION_FAILED)
        topics = req.topics
        answers: list[OffsetFetchResponseTopic] = []
        if topics is not None:
            ok, denied = _split(topics, lambda t: s.allow(DESCRIBE, TOPIC, t.name))
            answers = [_offset_fetch_denied(t) for t in denied]
            if answers:
                req.topics = ok

        def merge_one(response: OffsetFetchResponse) -> None:
            shown = _visible_topics(s, response.topics) if topics is None else response.topics
            response.topics = shown + answers

        _add_merge(request, OffsetFetchResponse, merge_one)
        return None
    by_id = version >= 10

    def topic_allowed(t: OffsetFetchRequestTopics) -> bool:
        name = step.store.topic_name(t.topic_id) if by_id else t.name
        return name is None or s.allow(DESCRIBE, TOPIC, name)

    groups = []
    denied_groups: list[OffsetFetchResponseGroup] = []
    per_group: dict[str, tuple[list[OffsetFetchResponseTopics], bool]] = {}
    for g in req.groups:
        if not s.allow(DESCRIBE, GROUP, g.group_id):
            denied_groups.append(OffsetFetchResponseGroup(group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED))
            continue
        group_answers: list[OffsetFetchResponseTopics] = []
        if g.topics is not None:
            ok_topics, denied_topics = _split(g.topics, topic_allowed)
            group_answers = [_offset_fetch_group_denied(t) for t in denied_topics]
            if group_answers:
                g.topics = ok_topics
        per_group[g.group_id] = (group_answers, g.topics is None)
        groups.append(g)
    if not groups:
        return OffsetFetchResponse(groups=denied_groups)
    req.groups = groups

    def merge(response: OffsetFetchResponse) -> None:
        for rg in response.groups:
            group_answers, filter_all = per_group.get(rg.group_id, ([], False))
            shown = _visible_topics(s, rg.topics) if filter_all else rg.topics
            rg.topics = shown + group_answers
        response.groups = response.groups + denied_groups

    _add_merge(request, OffsetFetchResponse, merge)
    return None


def _offset_fetch_denied(t: OffsetFetchRequestTopic) -> OffsetFetchResponseTopic:
    return OffsetFetchResponseTopic(name=t.name, partitions=[
        OffsetFetchResponsePartition(partition_index=i, committed_offset=-1, metadata="",
                                     error_code=TOPIC_AUTHORIZATION_FAILED)
        for i in t.partition_indexes
    ])  # fmt: skip


def _offset_fetch_group_denied(t: OffsetFetchRequestTopics) -> OffsetFetchResponseTopics:
    return OffsetFetchResponseTopics(topic_id=t.topic_id, name=t.name, partitions=[
        OffsetFetchResponsePartitions(partition_index=i, committed_offset=-1, metadata="",
                                      error_code=TOPIC_AUTHORIZATION_FAILED)
        for i in t.partition_indexes
    ])  # fmt: skip


def check_find_coordinator(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(FindCoordinatorRequest)
    if req.key_type == 0:
        rtype, error = GROUP, GROUP_AUTHORIZATION_FAILED
    elif req.key_type == 1:
        rtype, error = TRANSACTIONAL_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        return None  # the handler answers INVALID_REQUEST
    if request.header.api_version < 4:
        if s.allow(DESCRIBE, rtype, req.key):
            return None
        return FindCoordinatorResponse(error_code=error, node_id=-1, port=-1)
    ok, denied = _split(req.coordinator_keys, lambda k: s.allow(DESCRIBE, rtype, k))
    return _filtered(
        request, req.coordinator_keys, ok,
        [Coordinator(key=k, node_id=-1, port=-1, error_code=error) for k in denied],
        FindCoordinatorResponse, lambda r: r.coordinators, lambda extra: FindCoordinatorResponse(coordinators=extra),
    )  # fmt: skip


def check_consumer_group_heartbeat(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(ConsumerGroupHeartbeatRequest)
    if not s.allow(READ, GROUP, req.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=GROUP_AUTHORIZATION_FAILED, member_epoch=-1)
    for name in req.subscribed_topic_names or ():
        if not s.allow(DESCRIBE, TOPIC, name):
            return ConsumerGroupHeartbeatResponse(error_code=TOPIC_AUTHORIZATION_FAILED, member_epoch=-1)
    return None


def check_share_group_heartbeat(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    """READ on the group, DESCRIBE on every subscribed topic (Kafka's
    handleShareGroupHeartbeat)."""
    req = request.body_as(ShareGroupHeartbeatRequest)
    if not s.allow(READ, GROUP, req.group_id):
        return ShareGroupHeartbeatResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    for name in req.subscribed_topic_names or ():
        if not s.allow(DESCRIBE, TOPIC, name):
            return ShareGroupHeartbeatResponse(error_code=TOPIC_AUTHORIZATION_FAILED)
    return None


def check_share_fetch(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    """READ on the group for the whole request; the topics' READ is checked on the
    session's partitions by the handler (server/share/share_apis.py)."""
    if not s.allow(READ, GROUP, request.body_as(ShareFetchRequest).group_id or ""):
        return ShareFetchResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return None


def check_share_acknowledge(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if not s.allow(READ, GROUP, request.body_as(ShareAcknowledgeRequest).group_id or ""):
        return ShareAcknowledgeResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return None


def check_describe_share_group_offsets(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    """DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for that group); the topics'
    DESCRIBE is the handler's, per partition."""
    groups = request.body_as(DescribeShareGroupOffsetsRequest).groups
    ok, denied = _split(groups, lambda g: s.allow(DESCRIBE, GROUP, g.group_id))
    return _filtered(
        request, groups, ok,
        [DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED)
         for g in denied],
        DescribeShareGroupOffsetsResponse, lambda r: r.groups,
        lambda extra: DescribeShareGroupOffsetsResponse(groups=extra),
    )  # fmt: skip


def check_alter_share_group_offsets(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if not s.allow(READ, GROUP, request.body_as(AlterShareGroupOffsetsRequest).group_id):
        return AlterShareGroupOffsetsResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return None


def check_delete_share_group_offsets(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if not s.allow(DELETE, GROUP, request.body_as(DeleteShareGroupOffsetsRequest).group_id):
        return DeleteShareGroupOffsetsResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return None


class _DescribedGroup(Protocol):
    """A group of DescribeGroups or ConsumerGroupDescribe."""

    error_code: int
    group_id: str
    authorized_operations: int


G = TypeVar("G", bound=_DescribedGroup)


def _described_groups(
    s: Session, request: Request, group_ids: list[str], include_ops: bool, denied_group: Callable[[str], G],
    cls: type[M], entries: Callable[[M], list[G]], whole: Callable[[list[G]], M],
) -> Decision:
    """DescribeGroups and ConsumerGroupDescribe: a group the principal may not DESCRIBE
    is answered ``denied_group(id)``; the others' authorized operations when asked."""
    ok, denied = _split(group_ids, lambda g: s.allow(DESCRIBE, GROUP, g))
    extra = [denied_group(g) for g in denied]
    if not ok and extra:
        return whole(extra)
    if denied:
        group_ids[:] = ok

    def merge(response: M) -> None:
        groups = entries(response)
        if include_ops:
            for g in groups:
                if g.error_code == ErrorCode.none:
                    g.authorized_operations = s.operations(GROUP, g.group_id)
        groups.extend(extra)

    if extra or include_ops:
        _add_merge(request, cls, merge)
    return None


def check_describe_groups(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(DescribeGroupsRequest)
    return _described_groups(
        s, request, req.groups, req.include_authorized_operations,
        lambda g: DescribedGroup(error_code=GROUP_AUTHORIZATION_FAILED, group_id=g),
        DescribeGroupsResponse, lambda r: r.groups, lambda extra: DescribeGroupsResponse(groups=extra),
    )  # fmt: skip


def check_consumer_group_describe(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(ConsumerGroupDescribeRequest)
    return _described_groups(
        s, request, req.group_ids, req.include_authorized_operations,
        lambda g: DescribedConsumerGroup(error_code=GROUP_AUTHORIZATION_FAILED, group_id=g, group_epoch=-1,
                                         assignment_epoch=-1),
        ConsumerGroupDescribeResponse, lambda r: r.groups, lambda extra: ConsumerGroupDescribeResponse(groups=extra),
    )  # fmt: skip


def check_share_group_describe(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(ShareGroupDescribeRequest)
    return _described_groups(
        s, request, req.group_ids, req.include_authorized_operations,
        lambda g: DescribedShareGroup(error_code=GROUP_AUTHORIZATION_FAILED, group_id=g, group_epoch=-1,
                                      assignment_epoch=-1),
        ShareGroupDescribeResponse, lambda r: r.groups, lambda extra: ShareGroupDescribeResponse(groups=extra),
    )  # fmt: skip


def check_delete_groups(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    names = request.body_as(DeleteGroupsRequest).groups_names
    ok, denied = _split(names, lambda g: s.allow(DELETE, GROUP, g))
    return _filtered(
        request, names, ok,
        [DeletableGroupResult(group_id=g, error_code=GROUP_AUTHORIZATION_FAILED) for g in denied],
        DeleteGroupsResponse, lambda r: r.results, lambda extra: DeleteGroupsResponse(results=extra),
    )  # fmt: skip


def check_list_groups(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow_cluster(DESCRIBE, audit=False):
        return None

    def merge(response: ListGroupsResponse) -> None:
        response.groups = [g for g in response.groups if s.allow(DESCRIBE, GROUP, g.group_id, audit=False)]

    _add_merge(request, ListGroupsResponse, merge)
    return None


# -- transactions -------------------------------------------------------------------------------
def check_init_producer_id(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    tid = request.body_as(InitProducerIdRequest).transactional_id
    if tid is None:
        # the cluster check is not audited: WRITE on any topic is enough (Kafka 4.0)
        if s.allow_cluster(IDEMPOTENT_WRITE, audit=False) or s.allow_any(WRITE, TOPIC):
            return None
        error = CLUSTER_AUTHORIZATION_FAILED
    elif s.allow(WRITE, TRANSACTIONAL_ID, tid):
        return None
    else:
        error = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return InitProducerIdResponse(error_code=error, producer_id=-1, producer_epoch=-1)


def check_add_partitions_to_txn(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(AddPartitionsToTxnRequest)
    if request.header.api_version >= 4:
        if s.allow_cluster(CLUSTER_ACTION):
            return None
        return AddPartitionsToTxnResponse(error_code=CLUSTER_AUTHORIZATION_FAILED)
    topics = req.v3_and_below_topics

    def results(error_of: Callable[[str], ErrorCode]) -> AddPartitionsToTxnResponse:
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
            AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=error_of(t.name))
                for p in t.partitions])
            for t in topics])  # fmt: skip

    if not s.allow(WRITE, TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
        return results(lambda name: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t.name for t in topics if not s.allow(WRITE, TOPIC, t.name)}
    if denied:
        # Kafka: the unauthorized partitions fail, the others are not attempted
        return results(lambda name: TOPIC_AUTHORIZATION_FAILED if name in denied else ErrorCode.operation_not_attempted)
    return None


def check_add_offsets_to_txn(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    req = request.body_as(AddOffsetsToTxnRequest)
    if not s.allow(WRITE, TRANSACTIONAL_ID, req.transactional_id):
        return AddOffsetsToTxnResponse(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not s.allow(READ, GROUP, req.group_id):
        return AddOffsetsToTxnResponse(error_code=GROUP_AUTHORIZATION_FAILED)
    return None


def check_end_txn(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow(WRITE, TRANSACTIONAL_ID, request.body_as(EndTxnRequest).transactional_id):
        return None
    return EndTxnResponse(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def check_write_txn_markers(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow_cluster(ALTER, audit=False) or s.allow_cluster(CLUSTER_ACTION):
        return None
    return WriteTxnMarkersResponse(markers=[
        WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            WritableTxnMarkerTopicResult(name=t.name, partitions=[
                WritableTxnMarkerPartitionResult(partition_index=p, error_code=CLUSTER_AUTHORIZATION_FAILED)
                for p in t.partition_indexes])
            for t in m.topics])
        for m in request.body_as(WriteTxnMarkersRequest).markers])  # fmt: skip


def check_describe_transactions(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    ids = request.body_as(DescribeTransactionsRequest).transactional_ids
    ok, denied = _split(ids, lambda t: s.allow(DESCRIBE, TRANSACTIONAL_ID, t))
    extra = [
        DescribedTransaction(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=t,
                             transaction_start_time=-1, producer_id=-1, producer_epoch=-1)
        for t in denied
    ]  # fmt: skip
    if not ok and extra:
        return DescribeTransactionsResponse(transaction_states=extra)
    if denied:
        ids[:] = ok

    def merge(response: DescribeTransactionsResponse) -> None:
        for state in response.transaction_states:
            state.topics = [t for t in state.topics if s.allow(DESCRIBE, TOPIC, t.topic, audit=False)]
        response.transaction_states.extend(extra)

    _add_merge(request, DescribeTransactionsResponse, merge)
    return None


def check_list_transactions(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    def merge(response: ListTransactionsResponse) -> None:
        response.transaction_states = [
            t for t in response.transaction_states
            if s.allow(DESCRIBE, TRANSACTIONAL_ID, t.transactional_id, audit=False)
        ]  # fmt: skip

    _add_merge(request, ListTransactionsResponse, merge)
    return None


# -- admin --------------------------------------------------------------------------------------
def check_create_topics(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    topics = request.body_as(CreateTopicsRequest).topics
    denied: list[CreatableTopic] = []
    if s.allow_cluster(CREATE, audit=False):
        ok = list(topics)
    else:
        ok, denied = _split(topics, lambda t: s.allow(CREATE, TOPIC, t.name))
    extra = [CreatableTopicResult(name=t.name, error_code=TOPIC_AUTHORIZATION_FAILED) for t in denied]
    if not ok:
        return CreateTopicsResponse(topics=extra)
    if denied:
        topics[:] = ok

    def merge(response: CreateTopicsResponse) -> None:
        for t in response.topics:
            if t.error_code == ErrorCode.none and not s.allow(DESCRIBE_CONFIGS, TOPIC, t.name, audit=False):
                t.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED
                t.configs = None
        response.topics.extend(extra)

    if s.authorizer is not None:
        _add_merge(request, CreateTopicsResponse, merge)
    return None


def check_delete_topics(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if s.allow_cluster(DELETE, audit=False):
        return None
    req = request.body_as(DeleteTopicsRequest)
    extra: list[DeletableTopicResult] = []

    def whole(answers: list[DeletableTopicResult]) -> DeleteTopicsResponse:
        return DeleteTopicsResponse(responses=answers)

    if request.header.api_version < 6:
        ok_names, denied_names = _split(req.topic_names, lambda name: s.allow(DELETE, TOPIC, name))
        extra = [DeletableTopicResult(name=n, error_code=TOPIC_AUTHORIZATION_FAILED) for n in denied_names]
        return _filtered(request, req.topic_names, ok_names, extra, DeleteTopicsResponse, lambda r: r.responses, whole)
    ok: list[DeleteTopicState] = []
    for t in req.topics:
        if t.name is not None:
            if s.allow(DELETE, TOPIC, t.name):
                ok.append(t)
            else:
                extra.append(DeletableTopicResult(name=t.name, topic_id=t.topic_id,
                                                  error_code=TOPIC_AUTHORIZATION_FAILED))
            continue
        info = step.store.get_by_id(t.topic_id)
        if info is None:
            ok.append(t)  # the handler answers UNKNOWN_TOPIC_ID
        elif not s.allow(DESCRIBE, TOPIC, info.name):
            extra.append(DeletableTopicResult(name=None, topic_id=t.topic_id, error_code=ErrorCode.unknown_topic_id))
        elif not s.allow(DELETE, TOPIC, info.name):
            extra.append(DeletableTopicResult(name=info.name, topic_id=t.topic_id,
                                              error_code=TOPIC_AUTHORIZATION_FAILED))
        else:
            ok.append(t)
    return _filtered(request, req.topics, ok, extra, DeleteTopicsResponse, lambda r: r.responses, whole)


def check_create_partitions(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _partitioned(
        request, s, ALTER, request.body_as(CreatePartitionsRequest).topics, lambda t: t.name,
        lambda t: CreatePartitionsTopicResult(name=t.name, error_code=TOPIC_AUTHORIZATION_FAILED),
        CreatePartitionsResponse, lambda r: r.results, lambda extra: CreatePartitionsResponse(results=extra),
    )  # fmt: skip


def check_delete_records(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _partitioned(
        request, s, DELETE, request.body_as(DeleteRecordsRequest).topics, lambda t: t.name,
        lambda t: DeleteRecordsTopicResult(name=t.name, partitions=[
            DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                         error_code=TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]),
        DeleteRecordsResponse, lambda r: r.topics, lambda extra: DeleteRecordsResponse(topics=extra),
    )  # fmt: skip


def check_describe_producers(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _partitioned(
        request, s, READ, request.body_as(DescribeProducersRequest).topics, lambda t: t.name,
        lambda t: TopicResponse(name=t.name, partitions=[
            ProducersPartitionResponse(partition_index=i, error_code=TOPIC_AUTHORIZATION_FAILED)
            for i in t.partition_indexes]),
        DescribeProducersResponse, lambda r: r.topics, lambda extra: DescribeProducersResponse(topics=extra),
    )  # fmt: skip


class _ConfigResource(Protocol):
    """A resource of DescribeConfigs, AlterConfigs or IncrementalAlterConfigs."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=_ConfigResource)


def _config_resources(
    s: Session, request: Request, op: AclOperation, resources: list[R],
    denied_resource: Callable[[R, ErrorCode], E], cls: type[M], entries: Callable[[M], list[E]],
    whole: Callable[[list[E]], M],
) -> Decision:
    """``op`` on each resource: the topic's for a topic, the cluster's for a broker or
    broker logger, the group's for a group; an unknown type is the handler's
    INVALID_REQUEST."""

    def allowed(r: R) -> bool:
        rtype, _ = _CONFIG_RESOURCE.get(r.resource_type, (None, None))
        if rtype is None:
            return True
        return s.allow(op, rtype, CLUSTER_NAME if rtype is CLUSTER else r.resource_name)

    ok, denied = _split(resources, allowed)
    extra = [denied_resource(r, _CONFIG_RESOURCE[r.resource_type][1]) for r in denied]
    return _filtered(request, resources, ok, extra, cls, entries, whole)


def check_describe_configs(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _config_resources(
        s, request, DESCRIBE_CONFIGS, request.body_as(DescribeConfigsRequest).resources,
        lambda r, error: DescribeConfigsResult(error_code=error, resource_type=r.resource_type,
                                               resource_name=r.resource_name),
        DescribeConfigsResponse, lambda resp: resp.results, lambda extra: DescribeConfigsResponse(results=extra),
    )  # fmt: skip


def check_alter_configs(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _config_resources(
        s, request, ALTER_CONFIGS, request.body_as(AlterConfigsRequest).resources,
        lambda r, error: AlterConfigsResourceResponse(error_code=error, resource_type=r.resource_type,
                                                      resource_name=r.resource_name),
        AlterConfigsResponse, lambda resp: resp.responses, lambda extra: AlterConfigsResponse(responses=extra),
    )  # fmt: skip


def check_incremental_alter_configs(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    return _config_resources(
        s, request, ALTER_CONFIGS, request.body_as(IncrementalAlterConfigsRequest).resources,
        lambda r, error: IncrementalAlterConfigsResourceResponse(error_code=error, resource_type=r.resource_type,
                                                                 resource_name=r.resource_name),
        IncrementalAlterConfigsResponse, lambda resp: resp.responses,
        lambda extra: IncrementalAlterConfigsResponse(responses=extra),
    )  # fmt: skip


def _cluster(op: AclOperation, answer: Callable[[Request, ErrorCode], Message]) -> Check:
    """An API that needs ``op`` on the cluster; else ``answer(request,
    CLUSTER_AUTHORIZATION_FAILED)``."""

    def check(s: Session, request: Request, step: AuthorizationStep) -> Decision:
        if s.allow_cluster(op):
            return None
        return answer(request, CLUSTER_AUTHORIZATION_FAILED)

    return check


def _alter_replica_log_dirs_denied(request: Request, error: ErrorCode) -> AlterReplicaLogDirsResponse:
    results: dict[str, list[int]] = {}
    for d in request.body_as(AlterReplicaLogDirsRequest).dirs:
        for t in d.topics:
            results.setdefault(t.name, []).extend(t.partitions)
    return AlterReplicaLogDirsResponse(results=[
        AlterReplicaLogDirTopicResult(topic_name=name, partitions=[
            AlterReplicaLogDirPartitionResult(partition_index=p, error_code=error) for p in parts])
        for name, parts in results.items()])  # fmt: skip


def _alter_client_quotas_denied(request: Request, error: ErrorCode) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(entries=[
        AlterClientQuotasResponseEntryData(error_code=error, entity=[
            AlterClientQuotasResponseEntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity])
        for entry in request.body_as(AlterClientQuotasRequest).entries])  # fmt: skip


def _alter_scram_denied(request: Request, error: ErrorCode) -> AlterUserScramCredentialsResponse:
    req = request.body_as(AlterUserScramCredentialsRequest)
    users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
    return AlterUserScramCredentialsResponse(
        results=[AlterUserScramCredentialsResult(user=u, error_code=error) for u in users]
    )


def _elect_leaders_denied(request: Request, error: ErrorCode) -> ElectLeadersResponse:
    topics = request.body_as(ElectLeadersRequest).topic_partitions or ()
    return ElectLeadersResponse(error_code=error, replica_election_results=[
        ReplicaElectionResult(topic=t.topic, partition_result=[
            PartitionResult(partition_id=p, error_code=error) for p in t.partitions])
        for t in topics])  # fmt: skip


#: the message of an ACL API's CLUSTER_AUTHORIZATION_FAILED (Kafka's exception message)
_CLUSTER_DENIED = "Cluster authorization failed."


def _create_acls_denied(request: Request, error: ErrorCode) -> CreateAclsResponse:
    return CreateAclsResponse(results=[
        AclCreationResult(error_code=error, error_message=_CLUSTER_DENIED)
        for _ in request.body_as(CreateAclsRequest).creations
    ])  # fmt: skip


def _delete_acls_denied(request: Request, error: ErrorCode) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsFilterResult(error_code=error, error_message=_CLUSTER_DENIED)
        for _ in request.body_as(DeleteAclsRequest).filters
    ])  # fmt: skip


def check_describe_cluster(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    if not request.body_as(DescribeClusterRequest).include_cluster_authorized_operations:
        return None

    def merge(response: DescribeClusterResponse) -> None:
        response.cluster_authorized_operations = (
            s.operations(CLUSTER, CLUSTER_NAME) if s.allow_cluster(DESCRIBE, audit=False) else 0
        )

    _add_merge(request, DescribeClusterResponse, merge)
    return None


def check_describe_topic_partitions(s: Session, request: Request, step: AuthorizationStep) -> Decision:
    named = {t.name for t in request.body_as(DescribeTopicPartitionsRequest).topics}

    def merge(response: DescribeTopicPartitionsResponse) -> None:
        topics = []
        for t in response.topics:
            name = t.name
            if name is None:
                topics.append(t)
            elif s.allow(DESCRIBE, TOPIC, name, audit=name in named):
                if t.error_code == ErrorCode.none:
                    t.topic_authorized_operations = s.operations(TOPIC, name)
                topics.append(t)
            elif name in named:
                topics.append(DescribeTopicPartitionsResponseTopic(error_code=TOPIC_AUTHORIZATION_FAILED, name=name))
        response.topics = topics

    _add_merge(request, DescribeTopicPartitionsResponse, merge)
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
    ApiKey.JOIN_GROUP: check_join_group,
    ApiKey.SYNC_GROUP: check_sync_group,
    ApiKey.HEARTBEAT: check_heartbeat,
    ApiKey.LEAVE_GROUP: check_leave_group,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: check_consumer_group_heartbeat,
    ApiKey.DESCRIBE_GROUPS: check_describe_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: check_consumer_group_describe,
    ApiKey.DELETE_GROUPS: check_delete_groups,
    ApiKey.SHARE_GROUP_HEARTBEAT: check_share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: check_share_group_describe,
    ApiKey.SHARE_FETCH: check_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: check_share_acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: check_describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: check_alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: check_delete_share_group_offsets,
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
    ApiKey.DESCRIBE_CONFIGS: check_describe_configs,
    ApiKey.ALTER_CONFIGS: check_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: check_incremental_alter_configs,
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(
        DESCRIBE, lambda r, error: DescribeLogDirsResponse(error_code=error)),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _cluster(ALTER, _alter_replica_log_dirs_denied),
    ApiKey.DESCRIBE_ACLS: _cluster(
        DESCRIBE, lambda r, error: DescribeAclsResponse(error_code=error, error_message=_CLUSTER_DENIED)),
    ApiKey.CREATE_ACLS: _cluster(ALTER, _create_acls_denied),
    ApiKey.DELETE_ACLS: _cluster(ALTER, _delete_acls_denied),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(
        DESCRIBE_CONFIGS, lambda r, error: DescribeClientQuotasResponse(error_code=error)),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(ALTER_CONFIGS, _alter_client_quotas_denied),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(
        DESCRIBE, lambda r, error: DescribeUserScramCredentialsResponse(error_code=error)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(ALTER, _alter_scram_denied),
    ApiKey.ELECT_LEADERS: _cluster(ALTER, _elect_leaders_denied),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(
        ALTER, lambda r, error: AlterPartitionReassignmentsResponse(error_code=error)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(
        DESCRIBE, lambda r, error: ListPartitionReassignmentsResponse(error_code=error)),
    ApiKey.DESCRIBE_QUORUM: _cluster(DESCRIBE, lambda r, error: DescribeQuorumResponse(error_code=error)),
    ApiKey.UNREGISTER_BROKER: _cluster(ALTER, lambda r, error: UnregisterBrokerResponse(error_code=error)),
    ApiKey.ADD_RAFT_VOTER: _cluster(ALTER, lambda r, error: AddRaftVoterResponse(error_code=error)),
    ApiKey.REMOVE_RAFT_VOTER: _cluster(ALTER, lambda r, error: RemoveRaftVoterResponse(error_code=error)),
    ApiKey.LIST_CONFIG_RESOURCES: _cluster(
        DESCRIBE_CONFIGS, lambda r, error: ListConfigResourcesResponse(error_code=error)),
    ApiKey.DESCRIBE_CLUSTER: check_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: check_describe_topic_partitions,
}

#: without an authorizer only the authorized-operations fields need the step
CHECKS_WITHOUT_AUTHORIZER: dict[int, Check] = {
    key: CHECKS[key]
    for key in (ApiKey.METADATA, ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE,
                ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_TOPIC_PARTITIONS)
}  # fmt: skip

#: APIs no check applies to (Kafka's KafkaApis checks nothing for them, or the handler
#: refuses them whatever the principal): every other API must be in CHECKS
UNCHECKED = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.CREATE_DELEGATION_TOKEN,
     ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.DESCRIBE_DELEGATION_TOKEN}
)  # fmt: skip
