"""Kafka's KafkaApis: decide what each request gets, sans-IO.

``handle(request)`` runs one request through the pipeline, the same for every API:

1. **decode** (:mod:`tidegate.protocol.codec`): an unknown key or version is answered
   UNSUPPORTED_VERSION, bytes that do not parse close the connection; the request's
   pool memory is released as soon as the body is decoded (Produce: after the append);
2. **authorize** (:mod:`tidegate.server.authorization`): the API's ACL check answers
   the whole request (a denial), or lets it through with the denied topics, partitions
   or groups removed and a merge that adds their errors to the handler's response;
3. **handle**: the API's handler reads the request typed (``request.body_as(XRequest)``)
   and returns the response message (``XResponse``), ``None`` for no response (acks=0),
   or :data:`PARKED` when the answer comes from a callback: from a purgatory later
   (through :meth:`RequestHandlerHelper.send_response` and the RequestChannel), or at
   once while the handler still runs (acks=1, a fetch with data), in which case
   ``handle`` returns it (``Request.answered``);
4. **respond** (:class:`~tidegate.server.request_handler_helper.RequestHandlerHelper`,
   Kafka's ``sendResponseMaybeThrottle``): the authorization merge, quotas (record the
   request's time and bytes, decide the KIP-219 throttle), metrics, encode.

The outcome is a plain value (:mod:`tidegate.network.request_channel`): response
pieces, no response, close, or PARKED, with the throttle and the after-send action
for the shell. KafkaApis never creates a future, never reads the system clock (it
reads the injected :class:`~tidegate.clock.Clock`, Kafka's ``time``: monotonic time for
fetch sessions), never touches a connection. Appends and fetches go through
:class:`~tidegate.server.replica_manager.ReplicaManager`; the group, transaction, admin
(topics, configs, client quotas, log dirs, the cluster), security and ACL APIs live in
their own handler classes, built by
:class:`~tidegate.server.broker_core.BrokerCore` and handed in (they import nothing from
this module).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.config import BrokerConfig
from tidegate.errors import ErrorCode
from tidegate.log.segment import TimestampAndOffset
from tidegate.network.request_channel import (
    PARKED,
    CloseConnectionResponse,
    Outcome,
    Parked,
    Request,
    Response,
    SendResponse,
)
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.protocol.codec import (
    InvalidRequestError,
    RequestHeader,
    UnsupportedRequestVersionError,
    decode_request,
    encode_error_only,
    encode_response,
)
from tidegate.protocol.messages._base import ZERO_UUID, Records
from tidegate.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from tidegate.protocol.messages.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)
from tidegate.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from tidegate.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from tidegate.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from tidegate.protocol.messages.offset_for_leader_epoch import (
    EpochEndOffset as LeaderEpochEndOffset,
)
from tidegate.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from tidegate.protocol.messages.produce import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from tidegate.record.record_batch import is_transactional_batch
from tidegate.server.acl_apis import AclApis
from tidegate.server.authorization import AuthorizationStep
from tidegate.server.cluster_admin import ClusterAdminApis
from tidegate.server.config_admin import ConfigAdminApis
from tidegate.server.consumer_group_apis import ConsumerGroupApis
from tidegate.server.delayed_fetch import FetchCompletionBatch
from tidegate.server.endpoints import Endpoints
from tidegate.server.features import (
    FINALIZED_FEATURES_EPOCH,
    finalized_feature_keys,
    finalized_features,
    supported_feature_keys,
)
from tidegate.server.fetch_session import (
    INVALID_SESSION_ID,
    FetchContext,
    FetchSession,
    FetchSessionCache,
    SessionKey,
    new_context,
    new_session_partitions,
    settled,
)
from tidegate.server.group_apis import GroupApis
from tidegate.server.log_dir_admin import LogDirAdminApis
from tidegate.server.metadata import TopicInfo, TopicStore
from tidegate.server.quota_admin import QuotaAdminApis
from tidegate.server.replica_manager import (
    READ_COMMITTED,
    FetchParams,
    FetchPartition,
    FetchPartitionData,
    PartitionResponse,
    ReplicaManager,
    check_leader_epoch,
)
from tidegate.server.request_handler_helper import Answer, RequestHandlerHelper
from tidegate.server.security_apis import SecurityApis
from tidegate.server.share_group_apis import ShareGroupApis
from tidegate.server.topic_admin import TopicAdminApis
from tidegate.server.transaction_apis import TransactionApis
from tidegate.utils import INT32_MAX
from tidegate.utils.topic import InvalidTopicError, is_internal_topic, validate_topic_name

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.server.quota.quota_factory import QuotaManagers

log = logging.getLogger(__name__)

NO_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
#: the first ListOffsets version that accepts each special timestamp (Kafka's
#: ``ReplicaManager.timestampMinSupportedVersion``); others are UNSUPPORTED_VERSION
TIMESTAMP_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1

#: A request handler: the answer now (a response message, None for no response), or PARKED
Handler = Callable[[Request], Answer | Parked]


class KafkaApis:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        *,
        request_helper: RequestHandlerHelper,
        authorization: AuthorizationStep,
        replicas: ReplicaManager,
        store: TopicStore,
        quotas: QuotaManagers,
        fetch_sessions: FetchSessionCache,
        endpoints: Endpoints,
        groups: GroupApis,
        consumer_groups: ConsumerGroupApis,
        share_groups: ShareGroupApis,
        transactions: TransactionApis,
        topic_admin: TopicAdminApis,
        config_admin: ConfigAdminApis,
        quota_admin: QuotaAdminApis,
        log_dir_admin: LogDirAdminApis,
        cluster_admin: ClusterAdminApis,
        security: SecurityApis,
        acls: AclApis,
        time: Clock,
    ) -> None:
        """The parts KafkaApis answers with, and the table of every API's handler (long:
        one line per API, as Kafka's ``handle`` match)."""
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        #: the respond step, and where parked answers go (Kafka's RequestHandlerHelper)
        self.request_helper = request_helper
        self.authorization = authorization
        self.replicas = replicas
        self.logs = replicas.logs
        self.store = store
        self.quotas = quotas
        self.time = time
        #: KIP-227 incremental fetch sessions (Kafka's FetchManager's cache)
        self.fetch_sessions = fetch_sessions
        self.endpoints = endpoints
        self.groups = groups
        self.transactions = transactions
        #: the finalized feature levels ApiVersions reports (fixed while the broker runs)
        self.finalized_features = finalized_features(
            consumer_protocol=consumer_groups.enabled, share_groups=share_groups.enabled
        )
        self.handlers: dict[int, Handler] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.INIT_PRODUCER_ID: transactions.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
            ApiKey.END_TXN: transactions.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.CREATE_TOPICS: topic_admin.handle_create_topics,
            ApiKey.DELETE_TOPICS: topic_admin.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: topic_admin.handle_create_partitions,
            ApiKey.DELETE_RECORDS: topic_admin.handle_delete_records,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: topic_admin.handle_describe_topic_partitions,
            ApiKey.DESCRIBE_CONFIGS: config_admin.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: config_admin.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: config_admin.handle_incremental_alter_configs,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: quota_admin.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: quota_admin.handle_alter_client_quotas,
            ApiKey.DESCRIBE_LOG_DIRS: log_dir_admin.handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: log_dir_admin.handle_alter_replica_log_dirs,
            ApiKey.DESCRIBE_CLUSTER: cluster_admin.handle_describe_cluster,
            ApiKey.DESCRIBE_QUORUM: cluster_admin.handle_describe_quorum,
            ApiKey.ELECT_LEADERS: cluster_admin.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: cluster_admin.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: cluster_admin.handle_list_partition_reassignments,
            ApiKey.UNREGISTER_BROKER: cluster_admin.handle_unregister_broker,
            ApiKey.ADD_RAFT_VOTER: cluster_admin.handle_add_raft_voter,
            ApiKey.REMOVE_RAFT_VOTER: cluster_admin.handle_remove_raft_voter,
            ApiKey.LIST_CONFIG_RESOURCES: cluster_admin.handle_list_config_resources,
            ApiKey.DESCRIBE_PRODUCERS: cluster_admin.handle_describe_producers,
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: groups.handle_join_group,
            ApiKey.SYNC_GROUP: groups.handle_sync_group,
            ApiKey.HEARTBEAT: groups.handle_heartbeat,
            ApiKey.LEAVE_GROUP: groups.handle_leave_group,
            ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
            ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
            ApiKey.TXN_OFFSET_COMMIT: groups.handle_txn_offset_commit,
            ApiKey.LIST_GROUPS: groups.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
            ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
            ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.handle_consumer_group_describe,
            ApiKey.SHARE_GROUP_HEARTBEAT: share_groups.handle_share_group_heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: share_groups.handle_share_group_describe,
            ApiKey.SHARE_FETCH: share_groups.handle_share_fetch,
            ApiKey.SHARE_ACKNOWLEDGE: share_groups.handle_share_acknowledge,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_groups.handle_describe_share_group_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_groups.handle_alter_share_group_offsets,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_groups.handle_delete_share_group_offsets,
            ApiKey.SASL_HANDSHAKE: security.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: security.handle_sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: security.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: security.handle_alter_user_scram_credentials,
            ApiKey.CREATE_DELEGATION_TOKEN: security.handle_create_delegation_token,
            ApiKey.RENEW_DELEGATION_TOKEN: security.handle_renew_delegation_token,
            ApiKey.EXPIRE_DELEGATION_TOKEN: security.handle_expire_delegation_token,
            ApiKey.DESCRIBE_DELEGATION_TOKEN: security.handle_describe_delegation_token,
            ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
            ApiKey.CREATE_ACLS: acls.handle_create_acls,
            ApiKey.DELETE_ACLS: acls.handle_delete_acls,
        }
        assert set(self.handlers) == set(SUPPORTED_APIS), "advertised and handled APIs differ"

    # -- the pipeline ---------------------------------------------------------------------
    def handle(self, request: Request) -> Outcome:
        """Decode, authorize, handle and respond. Returns the response outcome, or PARKED."""
        try:
            header, body = decode_request(request.payload)
        except UnsupportedRequestVersionError as exc:
            request.release_buffer()
            ctx = request.context
            log.info("%s from %s:%s", exc, ctx.client_address, ctx.client_port)
            return SendResponse([self._unsupported_version(exc)])
        except InvalidRequestError as exc:
            request.release_buffer()
            return CloseConnectionResponse(str(exc))
        request.header = header
        request.body = body
        key = header.api_key
        if key != ApiKey.PRODUCE:
            request.release_buffer()  # fully decoded: its bytes are not needed
        denied = self.authorization.authorize(request)
        if denied is not None:
            request.release_buffer()  # Produce: nothing is appended
            if isinstance(denied, Response):
                return denied  # closing the connection
            return self.request_helper.respond(request, denied)
        request.in_handler = True
        try:
            answer = self.handlers[key](request)
        finally:
            request.in_handler = False
            if key == ApiKey.PRODUCE:
                request.release_buffer()  # the records are appended by now
        if not isinstance(answer, Parked):
            return self.request_helper.respond(request, answer)
        answered = request.answered
        if answered is not None:  # a callback answered while the handler ran
            request.answered = None
            return answered
        self.request_helper.request_parked(request)
        return PARKED

    def try_complete_actions(self) -> None:
        """Run the work deferred until the responses just sent are written."""
        self.replicas.try_complete_actions()

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """The shell's SASL exchange before login: exempt, measured (RequestProcessor)."""
        self.request_helper.record_exempt_request_time_ns(ns)

    def _unsupported_version(self, exc: UnsupportedRequestVersionError) -> bytes:
        if exc.api_key == ApiKey.API_VERSIONS:
            # KIP-511: answer with a v0 body carrying the supported range, so the
            # client can retry with a version both sides know.
            header = RequestHeader(exc.api_key, 0, exc.correlation_id, None, False)
            response = self._api_versions_response(0)
            response.error_code = ErrorCode.unsupported_version
            return encode_response(header, response)
        metrics = self.request_helper.metrics
        if metrics is not None:
            metrics.requests.error(exc.api_key, ErrorCode.unsupported_version)
        return encode_error_only(exc.correlation_id, ErrorCode.unsupported_version.value)

    # -- ApiVersions ----------------------------------------------------------------------
    def _api_versions_response(self, version: int) -> ApiVersionsResponse:
        """Every API's range and (v3+) the feature levels (Kafka's ApiVersionManager,
        server/features.py)."""
        return ApiVersionsResponse(
            api_keys=[
                ApiVersion(api_key=int(r.key), min_version=r.min_version, max_version=r.max_version)
                for r in SUPPORTED_APIS.values()
            ],
            supported_features=supported_feature_keys(version),
            finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
            finalized_features=finalized_feature_keys(self.finalized_features),
        )

    def handle_api_versions(self, request: Request) -> ApiVersionsResponse:
        return self._api_versions_response(request.header.api_version)

    # -- Metadata -------------------------------------------------------------------------
    def _topic_metadata(self, info: TopicInfo) -> MetadataResponseTopic:
        return MetadataResponseTopic(
            name=info.name,
            topic_id=info.topic_id,
            is_internal=is_internal_topic(info.name),
            partitions=self.replicas.partition_states(info, MetadataResponsePartition),
        )

    def handle_metadata(self, request: Request) -> MetadataResponse:
        version = request.header.api_version
        req = request.body_as(MetadataRequest)
        topics_out: list[MetadataResponseTopic] = []
        if req.topics is None or (version == 0 and not req.topics):
            # null (v1+) or empty (v0) means every topic, internal ones included, as
            # Kafka's metadata cache lists them (is_internal tells them apart)
            topics_out = [self._topic_metadata(info) for info in self.store.topics.values()]
        elif version < 12 and any(t.name is None or t.topic_id != ZERO_UUID for t in req.topics):
            # KafkaApis: "Topic name can not be null for version" / "Topic IDs are not
            # supported in requests for version" (v10, v11), answered by the request's
            # getErrorResponse: each topic INVALID_REQUEST, a null name as ""
            log.info("Metadata v%d with a null topic name or a topic id: INVALID_REQUEST", version)
            return MetadataResponse(topics=[
                MetadataResponseTopic(error_code=ErrorCode.invalid_request, name=t.name or "", topic_id=t.topic_id)
                for t in req.topics
            ])  # fmt: skip
        else:
            for t in req.topics:
                name = t.name
                if name is None:
                    info = self.store.get_by_id(t.topic_id)
                    if info is None:
                        topics_out.append(MetadataResponseTopic(
                            error_code=ErrorCode.unknown_topic_id, name=None, topic_id=t.topic_id
                        ))  # fmt: skip
                        continue
                else:
                    info = self.store.get(name)
                if info is None:
                    topics_out.append(self._auto_create(name, req.allow_auto_topic_creation))
                else:
                    topics_out.append(self._topic_metadata(info))
        host, port = self.endpoints.endpoint(request.context)
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=self.node_id, host=host, port=port)],
            cluster_id=self.cluster_id,
            controller_id=self.node_id,
            topics=topics_out,
        )

    def _auto_create(self, name: str | None, allow_auto: bool) -> MetadataResponseTopic:
        assert name is not None
        if is_internal_topic(name):  # created by the group coordinator, never by a lookup
            return MetadataResponseTopic(error_code=ErrorCode.unknown_topic_or_partition, name=name)
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return MetadataResponseTopic(error_code=ErrorCode.invalid_topic_exception, name=name)
        if name in self.logs.creating:  # a CreateTopics is making it: not ready yet
            return MetadataResponseTopic(error_code=ErrorCode.leader_not_available, name=name)
        if allow_auto and self.config.get("auto.create.topics.enable"):
            try:
                info = self.logs.create_topic(name, self.config.get("num.partitions"), {})
            except OSError as exc:
                log.error("could not auto-create topic %s: %s", name, exc)
                return MetadataResponseTopic(error_code=ErrorCode.kafka_storage_error, name=name)
            log.info("auto-created topic %s with %d partition(s)", name, info.partitions)
            return self._topic_metadata(info)
        return MetadataResponseTopic(error_code=ErrorCode.unknown_topic_or_partition, name=name)

    # -- Produce --------------------------------------------------------------------------
    def handle_produce(self, request: Request) -> ProduceResponse | Parked:
        """Kafka's ``handleProduceRequest``: from v13 (KIP-516) topics are named by id, an
        unknown id answered UNKNOWN_TOPIC_ID for its partitions (the authorization step
        resolved the known ones' names first)."""
        req = request.body_as(ProduceRequest)
        acks = req.acks
        entries: dict[tuple[str, int], Records | None] = {}
        order: list[tuple[TopicProduceData, list[tuple[str, int]]]] = []
        unknown_ids: list[TopicProduceData] = []
        has_transactional = False
        by_id = request.header.api_version >= 13
        for topic in req.topic_data:
            if by_id:
                name = self.store.topic_name(topic.topic_id)
                if name is None:
                    unknown_ids.append(topic)
                    continue
                topic.name = name
            keys = []
            for pd in topic.partition_data:
                key = (topic.name, pd.index)
                keys.append(key)
                records = entries[key] = pd.records
                if records is not None and is_transactional_batch(records):
                    has_transactional = True
            order.append((topic, keys))
        helper = self.request_helper

        if has_transactional and req.transactional_id is None:
            # Kafka: transactional records need a transactional id the client may write
            # (WRITE on it), else the whole request fails
            if acks == 0:
                helper.close_connection(request, _ACKS_0_ERROR)
                return PARKED
            denied = PartitionResponse(ErrorCode.transactional_id_authorization_failed)
            return self._produce_response(order, dict.fromkeys(entries, denied), unknown_ids)

        def respond(results: dict[tuple[str, int], PartitionResponse]) -> None:
            response = self._produce_response(order, results, unknown_ids)
            if acks != 0:
                helper.send_response(request, response)
                return
            # Kafka: no response, but an error in any partition (the denied topics'
            # included) closes the connection, so the producer refreshes its metadata
            merged = helper.merged(request, response)
            if any(p.error_code for t in merged.responses for p in t.partition_responses):
                helper.close_connection(request, _ACKS_0_ERROR)
            else:
                helper.send_response(request, None)

        self.replicas.append_records(
            req.timeout, acks, entries, respond,
            transactional_id=req.transactional_id, generic_txn_errors=request.header.api_version >= 11,
        )  # fmt: skip
        return PARKED

    @staticmethod
    def _produce_response(
        order: list[tuple[TopicProduceData, list[tuple[str, int]]]],
        results: dict[tuple[str, int], PartitionResponse],
        unknown_ids: list[TopicProduceData],
    ) -> ProduceResponse:
        responses = []
        for topic, keys in order:
            parts = []
            for key in keys:
                r = results[key]
                parts.append(PartitionProduceResponse(
                    index=key[1],
                    error_code=r.error,
                    base_offset=r.base_offset,
                    log_append_time=r.log_append_time,
                    log_start_offset=r.log_start_offset,
                    record_errors=[
                        BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in r.record_errors
                    ],
                    error_message=r.error_message,
                ))  # fmt: skip
            responses.append(
                TopicProduceResponse(topic_id=topic.topic_id, name=topic.name, partition_responses=parts)
            )
        for topic in unknown_ids:
            responses.append(TopicProduceResponse(topic_id=topic.topic_id, partition_responses=[
                PartitionProduceResponse(index=p.index, error_code=ErrorCode.unknown_topic_id, base_offset=-1)
                for p in topic.partition_data
            ]))  # fmt: skip
        return ProduceResponse(responses=responses)

    # -- Fetch ----------------------------------------------------------------------------
    def handle_fetch(self, request: Request) -> FetchResponse | Parked:
        """Kafka's ``handleFetchRequest`` with KIP-227 sessions: the fetch context
        (:func:`~tidegate.server.fetch_session.new_context`) decides which partitions
        are read (the request's, or an incremental session's) and which are answered."""
        header = request.header
        req = request.body_as(FetchRequest)
        version = header.api_version
        by_id = version >= 13
        fetch_data: list[tuple[SessionKey, int, int, int, int]] = []
        for t in req.topics:
            tkey = t.topic_id if by_id else t.topic
            for p in t.partitions:
                fetch_data.append(
                    ((tkey, p.partition), p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                     p.last_fetched_epoch)
                )  # fmt: skip
        if version >= 7:
            to_forget: list[SessionKey] = [
                (f.topic_id if by_id else f.topic, index)
                for f in req.forgotten_topics_data for index in f.partitions
            ]  # fmt: skip
            ctx = new_context(self.fetch_sessions, self.time.milliseconds(), version, req.session_id,
                              req.session_epoch, fetch_data, to_forget)
        else:
            ctx = FetchContext("sessionless")
        if ctx.kind == "error":
            return FetchResponse(error_code=ctx.error, session_id=INVALID_SESSION_ID)
        # a follower's session is privileged in the cache (v15+ names it in replica_state)
        replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
        privileged = replica_id >= 0
        max_bytes = req.max_bytes
        # Under a fetch quota a response is at most what the quota allows in its whole
        # window (Kafka's getMaxValueInQuotaWindow), so one response cannot earn a
        # throttle of many windows.
        if self.quotas.fetch.quotas_enabled:
            window_max = self.quotas.fetch.max_value_in_quota_window(
                request.context.principal, header.client_id or ""
            )
            max_bytes = int(min(window_max, max_bytes))
        params = FetchParams(req.max_wait, req.min_bytes, min(max_bytes, INT32_MAX), req.isolation_level)
        if ctx.session is not None:
            return self._fetch_incremental(request, ctx, ctx.session, by_id, privileged, params)
        names: dict[Any, str | None] = {}
        partitions: list[FetchPartition] = []
        for key, offset, pmax, cle, lfe in fetch_data:
            name = _topic_name(self.store, by_id, names, key[0])
            partitions.append(
                FetchPartition((name, key[1]) if name is not None else None, offset, pmax, cle, lfe)
            )
        del request.body  # a parked fetch keeps what it needs of it (_FetchAnswer)
        # a sessionless fetch keeps only its keys; a full one its request's partitions too
        # (for the session it creates)
        keys = [entry[0] for entry in fetch_data]
        self.replicas.fetch_messages(params, partitions, _FetchAnswer(
            self, request, keys, fetch_data if ctx.kind == "full" else None, partitions, by_id, privileged,
            params.isolation_level == READ_COMMITTED,
        ))
        return PARKED

    def _answer_fetch(self, answer: _FetchAnswer, results: list[FetchPartitionData]) -> None:
        """Answer a (sessionless or full) fetch with its read ``results``; a full fetch
        creates its session from them (its partitions left unsettled to read next)."""
        fetch_data, keys = answer.fetch_data, answer.keys
        session_id = INVALID_SESSION_ID
        if fetch_data is not None and self.fetch_sessions.max_entries > 0:
            partitions, read_committed = answer.partitions, answer.read_committed
            session_id = self.fetch_sessions.maybe_create_session(
                self.time.milliseconds(), answer.privileged, len(keys), answer.by_id,
                lambda: new_session_partitions(fetch_data, results, (fp.key for fp in partitions)),
            )
            session = self.fetch_sessions.get(session_id)
            if session is not None:
                # what the first incremental fetch must read: the partitions this
                # response left unsettled (records, errors, data still behind)
                self.fetch_sessions.track(session, [
                    key for key, (_, offset, *_rest), r in zip(keys, fetch_data, results, strict=True)
                    if not settled(offset, r, read_committed)
                ], read_committed)
        response = FetchResponse(session_id=session_id)
        batch = self.replicas.completion_batch
        request = answer.request
        self._fetch_topics(request, response, answer.by_id, keys, answer.partitions, results, batch)
        self.request_helper.send_response(request, response, batch.encoded if batch is not None else None)

    def _fetch_incremental(
        self, request: Request, ctx: FetchContext, session: FetchSession, by_id: bool, privileged: bool,
        params: FetchParams,
    ) -> Parked:
        """An incremental fetch reads only the session's dirty partitions (those that
        changed, or that the client was not yet told everything about; see
        :mod:`tidegate.server.fetch_session`): an idle poll of a session of N partitions
        costs O(changed), not O(N). Every topic of the session is authorized on every
        fetch (Kafka's handleFetchRequest): a denied topic's partitions are answered
        TOPIC_AUTHORIZATION_FAILED (and so stay dirty until allowed again)."""
        read_committed = params.isolation_level == READ_COMMITTED
        offline = self.replicas.log_dir_offline
        if session.read_committed is not read_committed or offline:
            session.mark_all_dirty()  # settled for the other isolation level (or no log dir)
            session.read_committed = read_committed
        names: dict[Any, str | None] = {}
        name_of = functools.partial(_topic_name, self.store, by_id, names)
        denied: set[str] = set()
        if not privileged:  # a follower was checked for CLUSTER_ACTION
            topics = {n for n in map(name_of, session.topic_keys()) if n is not None}
            denied = self.authorization.unreadable_topics(request, topics)
            if denied:
                for key in session.partitions:
                    if name_of(key[0]) in denied:
                        session.dirty.add(key)

        del request.body  # a parked fetch keeps what it needs of it (_IncrementalFetchAnswer)
        answer = _IncrementalFetchAnswer(self, request, ctx, session, by_id, read_committed, names, denied)
        self.replicas.fetch_session_messages(params, session, answer)
        return PARKED

    def _incremental_fetch_response(
        self, request: Request, by_id: bool, ctx: FetchContext, keys: list[SessionKey],
        partitions: list[FetchPartition], results: list[FetchPartitionData], read_committed: bool,
        batch: FetchCompletionBatch | None = None,
    ) -> FetchResponse:
        """Kafka's ``IncrementalFetchContext.updateAndGenerateResponseData`` over the
        partitions read (the dirty ones): only those with news, each remembered as sent;
        one that returned records moves to the end of the session, so a size-limited
        response rotates fairly. Each read partition settles (leaves the dirty set) once
        nothing in it is left to tell."""
        session = ctx.session
        assert session is not None
        if session.epoch != ctx.expected_epoch:  # another request used the session meanwhile
            return FetchResponse(error_code=ErrorCode.invalid_fetch_session_epoch, session_id=session.id)
        cached = session.partitions
        sel_keys: list[SessionKey] = []
        sel_parts: list[FetchPartition] = []
        sel_results: list[FetchPartitionData] = []
        for key, fp, r in zip(keys, partitions, results, strict=True):
            cp = cached.get(key)
            if cp is None:
                continue
            size = len(r.records)
            if cp.maybe_update_response_data(size, r.error, r.high_watermark, r.log_start_offset,
                                             r.diverging_epoch is not None, True):
                sel_keys.append(key)
                sel_parts.append(fp)
                sel_results.append(r)
                if size > 0:
                    session.move_to_end(key)
            session.settle(cp, r, read_committed)
        response = FetchResponse(session_id=session.id)
        self._fetch_topics(request, response, by_id, sel_keys, sel_parts, sel_results, batch)
        return response

    def _fetch_topics(
        self, request: Request, response: FetchResponse, by_id: bool, keys: list[SessionKey],
        partitions: list[FetchPartition], results: list[FetchPartitionData],
        batch: FetchCompletionBatch | None = None,
    ) -> None:
        """The response's topics: consecutive partitions of one topic share an entry, as
        Kafka's ``FetchResponse.of`` groups them; a fenced leader epoch names the current
        leader and its endpoint (KIP-951, v16+). A read shared by a completion ``batch``
        gives one response partition for all its fetches."""
        responses = response.responses
        last: Any = _NO_TOPIC
        parts: list[PartitionData] = []
        for key, fp, r in zip(keys, partitions, results, strict=True):
            tkey, index = key
            if tkey != last:
                last = tkey
                parts = []
                responses.append(
                    FetchableTopicResponse(topic_id=tkey, partitions=parts) if by_id
                    else FetchableTopicResponse(topic=tkey, partitions=parts)
                )  # fmt: skip
            if batch is not None and r.shared:
                made = batch.parts.get((id(r), by_id))
                if made is not None:
                    parts.append(made[1])
                    continue
            error = r.error
            if by_id and error is ErrorCode.unknown_topic_or_partition:
                error = ErrorCode.unknown_topic_id
            part = PartitionData(
                partition_index=index,
                error_code=error,
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                aborted_transactions=None if r.aborted_transactions is None else [
                    AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in r.aborted_transactions
                ],
                records=r.records,
            )  # fmt: skip
            if r.diverging_epoch is not None:
                part.diverging_epoch = EpochEndOffset(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
            if error is ErrorCode.fenced_leader_epoch and fp.key is not None:
                plog = self.replicas.get_log(*fp.key)
                part.current_leader = LeaderIdAndEpoch(
                    leader_id=self.node_id, leader_epoch=plog.leader_epoch if plog is not None else -1
                )
                if not response.node_endpoints:
                    host, port = self.endpoints.endpoint(request.context)
                    response.node_endpoints.append(NodeEndpoint(node_id=self.node_id, host=host, port=port))
            if batch is not None and r.shared:
                batch.parts[(id(r), by_id)] = (r, part)
            parts.append(part)

    # -- ListOffsets ----------------------------------------------------------------------
    def handle_list_offsets(self, request: Request) -> ListOffsetsResponse:
        """Kafka's ``ReplicaManager.fetchOffset`` on one node: a partition named twice gets
        INVALID_REQUEST (once), a special timestamp the version predates
        UNSUPPORTED_VERSION, a stale or future ``current_leader_epoch``
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; timestamps are searched record by
        record; leader epochs are answered from v4."""
        version = request.header.api_version
        req = request.body_as(ListOffsetsRequest)
        read_committed = req.isolation_level == READ_COMMITTED
        wanted: dict[str, dict[int, ListOffsetsPartition]] = {}
        duplicates: set[tuple[str, int]] = set()
        for t in req.topics:
            parts = wanted.setdefault(t.name, {})
            for p in t.partitions:
                if p.partition_index in parts:
                    duplicates.add((t.name, p.partition_index))
                else:
                    parts[p.partition_index] = p
        return ListOffsetsResponse(topics=[
            ListOffsetsTopicResponse(name=name, partitions=[
                self._list_offset(name, p, version, (name, index) in duplicates, read_committed)
                for index, p in parts.items()
            ])
            for name, parts in wanted.items()
        ])  # fmt: skip

    def _list_offset(
        self, topic: str, p: ListOffsetsPartition, version: int, duplicate: bool, read_committed: bool
    ) -> ListOffsetsPartitionResponse:
        out = ListOffsetsPartitionResponse(partition_index=p.partition_index)
        ts = p.timestamp
        if duplicate:
            out.error_code = ErrorCode.invalid_request
            return out
        if ts < 0 and version < TIMESTAMP_MIN_VERSION.get(ts, INT32_MAX):
            out.error_code = ErrorCode.unsupported_version  # Kafka's isListOffsetsTimestampUnsupported
            return out
        plog: Log | None = self.replicas.get_log(topic, p.partition_index)
        if plog is None:
            out.error_code = ErrorCode.unknown_topic_or_partition
            return out
        if self.replicas.log_dir_offline:
            out.error_code = ErrorCode.kafka_storage_error
            return out
        epoch_error = check_leader_epoch(plog, p.current_leader_epoch)
        if epoch_error is not ErrorCode.none:
            out.error_code = epoch_error
            return out
        # read_committed sees the log up to the last stable offset (Kafka's
        # Partition.fetchOffsetForTimestamp)
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        if ts == LATEST_TIMESTAMP:
            found: TimestampAndOffset | None = TimestampAndOffset(NO_TIMESTAMP, upper, plog.leader_epoch)
        elif ts in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            found = TimestampAndOffset(NO_TIMESTAMP, -1, -1)  # no tiered storage (KIP-1005, KIP-1023)
        elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            found = plog.offset_for_timestamp(EARLIEST_TIMESTAMP)  # local = all: no tiers
        else:
            found = plog.offset_for_timestamp(ts)
            if found is not None and found.offset >= upper:
                found = None  # beyond what a consumer may read: no offset
        if found is not None:
            out.offset = found.offset
            out.timestamp = found.timestamp
            if found.leader_epoch is not None and version >= 4:
                out.leader_epoch = found.leader_epoch
        return out

    # -- OffsetForLeaderEpoch --------------------------------------------------------------
    def handle_offset_for_leader_epoch(self, request: Request) -> OffsetForLeaderEpochResponse:
        """KIP-320 truncation detection: the end offset of each asked epoch (Kafka's
        ``Partition.lastOffsetForLeaderEpoch``); a consumer validates its position with it
        after a metadata change. Each partition has one stable epoch, so a consumer asking
        for it gets (epoch, log end offset) and keeps its position."""
        topics = []
        for t in request.body_as(OffsetForLeaderEpochRequest).topics:
            parts = []
            for p in t.partitions:
                error, epoch, end = self.replicas.last_offset_for_leader_epoch(
                    (t.topic, p.partition), p.current_leader_epoch, p.leader_epoch
                )
                parts.append(LeaderEpochEndOffset(error_code=error, partition=p.partition, leader_epoch=epoch,
                                                  end_offset=end))
            topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return OffsetForLeaderEpochResponse(topics=topics)

    # -- FindCoordinator ----------------------------------------------------------------------
    def handle_find_coordinator(self, request: Request) -> FindCoordinatorResponse:
        """This node coordinates every group and every transactional id; the coordinator's
        internal topic is created on first use."""
        req = request.body_as(FindCoordinatorRequest)
        version = request.header.api_version
        key_type = req.key_type
        keys = list(req.coordinator_keys) if version >= 4 else [req.key]
        host, port = self.endpoints.endpoint(request.context)
        message: str | None
        if key_type == COORDINATOR_TYPE_GROUP:
            error, message = self.groups.coordinator_error()
        elif key_type == COORDINATOR_TYPE_TRANSACTION:
            error, message = self.transactions.coordinator_error()
        else:
            error, message = ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        if error is ErrorCode.none:
            coordinators = [Coordinator(key=key, node_id=self.node_id, host=host, port=port) for key in keys]
        else:
            coordinators = [Coordinator(key=key, node_id=-1, port=-1, error_code=error, error_message=message)
                            for key in keys]
        if version >= 4:
            return FindCoordinatorResponse(coordinators=coordinators)
        only = coordinators[0]
        return FindCoordinatorResponse(
            error_code=only.error_code,
            error_message=only.error_message,
            node_id=only.node_id,
            host=only.host,
            port=only.port,
        )


#: why an acks=0 Produce closes its connection (Kafka's closeConnection)
_ACKS_0_ERROR = "acks=0 produce with an error in a partition: closing the connection, as Kafka does"
_NO_TOPIC = object()  # no topic yet, while grouping a fetch response's partitions

__all__ = ["PARKED", "KafkaApis"]


def _topic_name(store: TopicStore, by_id: bool, names: dict[Any, str | None], tkey: Any) -> str | None:
    """The name of the topic a fetch names by ``tkey`` (its id when ``by_id``), None if
    unknown; remembered in ``names`` (one request's)."""
    if tkey not in names:
        info = store.get_by_id(tkey) if by_id else store.get(tkey)
        names[tkey] = info.name if info is not None else None
    return names[tkey]


class _FetchAnswer:
    """All a parked (sessionless or full) fetch keeps of its request, to answer it
    (``KafkaApis._answer_fetch``; a :class:`~tidegate.server.delayed_fetch.FetchAnswer`):
    one slotted object instead of closures, the decoded request dropped (issue 29:
    memory per parked long poll)."""

    __slots__ = ("apis", "by_id", "fetch_data", "keys", "partitions", "privileged", "read_committed", "request")

    def __init__(
        self, apis: KafkaApis, request: Request, keys: list[SessionKey],
        fetch_data: list[tuple[SessionKey, int, int, int, int]] | None, partitions: list[FetchPartition],
        by_id: bool, privileged: bool, read_committed: bool,
    ) -> None:
        self.apis = apis
        self.request = request
        self.keys = keys
        #: a full fetch's partitions as requested (its session is made of them); None
        #: for a sessionless one
        self.fetch_data = fetch_data
        self.partitions = partitions
        self.by_id = by_id
        self.privileged = privileged
        self.read_committed = read_committed

    @property
    def abandoned(self) -> bool:
        return self.request.abandoned

    def __call__(self, results: list[FetchPartitionData]) -> None:
        self.apis._answer_fetch(self, results)


class _IncrementalFetchAnswer:
    """All a parked incremental fetch keeps of its request (a
    :class:`~tidegate.server.delayed_fetch.SessionFetchAnswer`): ``select`` names the
    session's dirty partitions to read (watching them), the call answers with what
    changed; a topic the request may not read answers TOPIC_AUTHORIZATION_FAILED."""

    __slots__ = ("apis", "by_id", "ctx", "denied", "names", "read_committed", "request", "session")

    def __init__(
        self, apis: KafkaApis, request: Request, ctx: FetchContext, session: FetchSession, by_id: bool,
        read_committed: bool, names: dict[Any, str | None], denied: set[str],
    ) -> None:
        self.apis = apis
        self.request = request
        self.ctx = ctx
        self.session = session
        self.by_id = by_id
        self.read_committed = read_committed
        self.names = names
        self.denied = denied

    @property
    def abandoned(self) -> bool:
        return self.request.abandoned

    def name_of(self, tkey: Any) -> str | None:
        return _topic_name(self.apis.store, self.by_id, self.names, tkey)

    def select(self) -> tuple[list[Any], list[FetchPartition]]:
        cache = self.apis.fetch_sessions
        session, denied, name_of = self.session, self.denied, self.name_of
        keys: list[Any] = []
        partitions: list[FetchPartition] = []
        for cp in session.dirty_in_order():
            key = cp.key
            name = name_of(key[0])
            keys.append(key)
            if name is None or name in denied:
                partitions.append(FetchPartition(None, cp.fetch_offset, cp.max_bytes,
                                                 cp.current_leader_epoch, cp.last_fetched_epoch))
                continue
            tp = (name, key[1])
            cache.watch(session, cp, tp)
            partitions.append(FetchPartition(tp, cp.fetch_offset, cp.max_bytes,
                                             cp.current_leader_epoch, cp.last_fetched_epoch))
        return keys, partitions

    def __call__(self, keys: list[Any], partitions: list[FetchPartition], results: list[FetchPartitionData]) -> None:
        if self.denied:
            for i, key in enumerate(keys):
                if self.name_of(key[0]) in self.denied:
                    results[i] = FetchPartitionData(ErrorCode.topic_authorization_failed)
        apis = self.apis
        batch = apis.replicas.completion_batch
        request = self.request
        response = apis._incremental_fetch_response(request, self.by_id, self.ctx, keys, partitions, results,
                                                    self.read_committed, batch)
        apis.request_helper.send_response(request, response, batch.encoded if batch is not None else None)
