"""Kafka's KafkaApis: decide what each request gets, sans-IO.

``handle(request)`` runs one request through the pipeline, the same for every API:

1. **decode** (:mod:`tidegate.protocol.codec`, kio): an unknown key or version is
   answered UNSUPPORTED_VERSION, bytes that do not parse close the connection; the
   request's pool memory is released as soon as the body is decoded (Produce: after
   the append);
2. **authorize** (:mod:`tidegate.server.authorization`): the API's ACL check answers
   the whole request (a denial), or lets it through with the denied topics, partitions
   or groups removed and a merge that adds their errors to the handler's response;
3. **handle**: the API's handler returns the response as nested dicts with Kafka's
   field names, ``None`` for no response (acks=0), or :data:`PARKED` when the request
   waits in a purgatory (its owner calls :meth:`KafkaApis.send_response` later);
4. **respond** (:meth:`KafkaApis._respond`, Kafka's ``sendResponseMaybeThrottle``):
   quotas (record the request's time and bytes, decide the KIP-219 throttle), metrics
   (error codes, bytes out), encode.

The outcome is a plain value (:mod:`tidegate.network.request_channel`): response
pieces, no response, close, or PARKED, with the throttle and the after-send action
for the shell. KafkaApis never creates a future, never reads the system clock (it
reads the injected :class:`~tidegate.clock.Clock`, Kafka's ``time``: handler time for
the request quota, monotonic time for fetch sessions), never touches a connection. Appends and fetches go through
:class:`~tidegate.server.replica_manager.ReplicaManager`; the group, admin and
security APIs live in their own handler classes, which this module imports (never the
other way round).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.config import BrokerConfig
from tidegate.errors import ErrorCode
from tidegate.log.segment import TimestampAndOffset
from tidegate.network.request_channel import (
    PARKED,
    CloseConnectionResponse,
    NoOpResponse,
    Outcome,
    Request,
    RequestChannel,
    RequestContext,
    Response,
    SendResponse,
)
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.protocol.codec import (
    InvalidRequestError,
    RequestHeader,
    UnsupportedRequestVersionError,
    build,
    decode_request,
    encode_error_only,
    encode_response,
    response_class,
)
from tidegate.protocol.fetch_fast import Piece, encode_fetch_response, fetch_response_size
from tidegate.record.record_batch import is_transactional_batch
from tidegate.security.authorizer.acl_store import AclStore
from tidegate.security.authorizer.standard_authorizer import StandardAuthorizer
from tidegate.server.acl_apis import AclApis
from tidegate.server.admin_apis import AdminApis
from tidegate.server.authorization import CLOSE_CONNECTION, AuthorizationStep
from tidegate.server.endpoints import Endpoints
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
from tidegate.server.metadata import BrokerConfigStore, TopicInfo, TopicStore
from tidegate.server.replica_manager import (
    MAX_INT32,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchParams,
    FetchPartition,
    FetchPartitionData,
    PartitionResponse,
    ReplicaManager,
    check_leader_epoch,
)
from tidegate.server.security_apis import SecurityApis
from tidegate.server.transaction_apis import TransactionApis
from tidegate.utils.topic import InvalidTopicError, is_internal_topic, validate_topic_name

if TYPE_CHECKING:
    from tidegate.log.log import Log
    from tidegate.metrics.prometheus import BrokerMetrics
    from tidegate.security.credentials import CredentialStore
    from tidegate.server.quota.client_quota_manager import ClientQuotaManager
    from tidegate.server.quota.quota_factory import QuotaManagers

log = logging.getLogger(__name__)

NO_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
#: the first ListOffsets version that accepts each special timestamp (Kafka's
#: ``ReplicaManager.timestampMinSupportedVersion``); others are UNSUPPORTED_VERSION
TIMESTAMP_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1

Handler = Callable[[Request], Any]


class _QuotaRequest:
    """What the quota step needs to know about one request while it is answered."""

    __slots__ = ("client_id", "exempt", "size", "user")

    def __init__(self, user: str, client_id: str, exempt: bool, size: int) -> None:
        self.user = user
        self.client_id = client_id
        self.exempt = exempt
        self.size = size


class KafkaApis:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        replicas: ReplicaManager,
        store: TopicStore,
        quotas: QuotaManagers,
        groups: GroupApis,
        transactions: TransactionApis,
        *,
        channel: RequestChannel | None = None,
        credentials: CredentialStore,
        endpoints: Endpoints,
        broker_configs: BrokerConfigStore,
        time: Clock,
        authorizer: StandardAuthorizer | None = None,
        acl_store: AclStore | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.replicas = replicas
        self.logs = replicas.logs
        self.store = store
        #: where answers to parked requests go: the SocketServer (set once it exists)
        self.channel: RequestChannel = channel if channel is not None else _NO_CHANNEL
        self.quotas = quotas
        self.time = time
        #: KIP-227 incremental fetch sessions (Kafka's FetchManager's cache)
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        replicas.fetch_sessions = self.fetch_sessions
        self.endpoints = endpoints
        self.groups = groups
        groups.respond = self.send_response
        self.transactions = transactions
        transactions.respond = self.send_response
        self.admin = admin = AdminApis(
            config, cluster_id, replicas, store, quotas, endpoints, groups, broker_configs, time
        )
        admin.respond = self.send_response
        self.security = security = SecurityApis(credentials)
        self.authorizer = authorizer
        self.authorization = AuthorizationStep(authorizer, store)
        acls = AclApis(authorizer, acl_store if acl_store is not None else AclStore(None))
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
            ApiKey.CREATE_TOPICS: admin.handle_create_topics,
            ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
            ApiKey.DELETE_RECORDS: admin.handle_delete_records,
            ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: admin.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_incremental_alter_configs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: admin.handle_alter_replica_log_dirs,
            ApiKey.DESCRIBE_LOG_DIRS: admin.handle_describe_log_dirs,
            ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
            ApiKey.ELECT_LEADERS: admin.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.handle_list_partition_reassignments,
            ApiKey.DESCRIBE_QUORUM: admin.handle_describe_quorum,
            ApiKey.DESCRIBE_CLUSTER: admin.handle_describe_cluster,
            ApiKey.DESCRIBE_PRODUCERS: admin.handle_describe_producers,
            ApiKey.UNREGISTER_BROKER: admin.handle_unregister_broker,
            ApiKey.LIST_CLIENT_METRICS_RESOURCES: admin.handle_list_client_metrics_resources,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: admin.handle_describe_topic_partitions,
            ApiKey.ADD_RAFT_VOTER: admin.handle_add_raft_voter,
            ApiKey.REMOVE_RAFT_VOTER: admin.handle_remove_raft_voter,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: admin.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: admin.handle_alter_client_quotas,
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
            ApiKey.CONSUMER_GROUP_HEARTBEAT: groups.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: groups.handle_consumer_group_describe,
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
        # Set by the broker when metrics are on (metrics.listener); None costs one check.
        self.metrics: BrokerMetrics | None = None
        # The request being handled, and its response if it was answered during its own
        # handler (a JoinGroup that completes the rebalance it joins).
        self._current: Request | None = None
        self._current_response: Response | None = None

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
            if denied is CLOSE_CONNECTION:
                return CloseConnectionResponse(_ACKS_0_ERROR)
            return self._respond(request, denied)
        self._current = request
        self._current_response = None
        try:
            values = self.handlers[key](request)
        finally:
            self._current = None
            if key == ApiKey.PRODUCE:
                request.release_buffer()  # the records are appended by now
        if values is not PARKED:
            return self._respond(request, values)
        answered = self._current_response
        if answered is not None:
            self._current_response = None
            return answered
        if self.quotas.enabled:
            # The handler's time so far, recorded now; the check comes with the answer.
            self._record_request_time(self._quota_request(request), self._elapsed_ns(request))
        return PARKED

    def send_response(self, request: Request, values: dict | None) -> None:
        """The answer to a parked request (a purgatory, the group coordinator)."""
        if request is self._current:
            self._current_response = self._respond(request, values)
            return
        if request.abandoned:
            return  # the connection went away
        request.start_ns = self.time.nanoseconds()  # time from here is this answer's
        self.channel.send_response(request, self._respond(request, values))

    def _send(self, request: Request, response: Response) -> None:
        """:meth:`send_response` of a response already made (closing the connection)."""
        if request is self._current:
            self._current_response = response
        elif not request.abandoned:
            self.channel.send_response(request, response)

    def try_complete_actions(self) -> None:
        """Run the work deferred until the responses just sent are written."""
        self.replicas.try_complete_actions()

    def _respond(self, request: Request, values: dict | None) -> Response:
        """The authorization step's merge, then quotas, metrics, encoding: Kafka's
        ``sendResponseMaybeThrottle``."""
        merge = request.authz_merge
        if merge is not None and values is not None:
            request.authz_merge = None
            values = merge(values)
        if self.quotas.enabled:
            return self._respond_with_quotas(request, values)
        header: RequestHeader = request.header
        if values is None:
            return NoOpResponse()
        if self.metrics is not None:
            self._account(header, values)
        return SendResponse(self._encode_pieces(header, values))

    # -- the quota step -------------------------------------------------------------------
    def _quota_request(self, request: Request) -> _QuotaRequest:
        header: RequestHeader = request.header
        ctx = request.context
        key = header.api_key
        # Exempt from the request quota, as in Kafka: ApiVersions, and the SASL exchange
        # before the connection is authenticated (their time is still measured).
        exempt = key == ApiKey.API_VERSIONS or (
            key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and not ctx.authenticated
        )
        return _QuotaRequest(ctx.principal, header.client_id or "", exempt, len(request.payload))

    def _elapsed_ns(self, request: Request) -> int:
        return max(self.time.nanoseconds() - request.start_ns, 0)

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """The shell's SASL exchange before login: exempt, measured (RequestProcessor)."""
        self.quotas.request.maybe_record_exempt_ns(ns)

    def _record_request_time(self, q: _QuotaRequest, ns: int) -> None:
        """Time spent on a request, recorded without a check (the next check sees it)."""
        request = self.quotas.request
        if q.exempt:
            request.maybe_record_exempt_ns(ns)
        else:
            request.record_network_thread_time_ns(q.user, q.client_id, ns)

    def _respond_with_quotas(self, request: Request, values: dict | None) -> Response:
        """Record, check and throttle (KIP-219), then encode the response.

        As Kafka's KafkaApis: the request time so far is recorded and checked on the
        request quota; Produce records the request's size on the produce quota, Fetch the
        response's size on the fetch quota; the throttle is the maximum of those that
        apply. A throttled Fetch is answered empty (its bytes are taken back: the client
        gets them later). The response carries ``throttle_time_ms`` in every version
        that has the field and is sent at once; the shell mutes the connection for the
        throttle time, also when there is no response (acks=0), until the throttle's
        timer task ends it. Encoding and writing the response are recorded after the
        write (the response's ``after_send``).
        """
        quotas = self.quotas
        header: RequestHeader = request.header
        key = header.api_key
        q = self._quota_request(request)
        clock = self.time
        if q.exempt:
            quotas.request.maybe_record_exempt_ns(self._elapsed_ns(request))
            encode_start = clock.nanoseconds()
            pieces = None
            if values is not None:
                if self.metrics is not None:
                    self._account(header, values)
                pieces = self._encode_pieces(header, values)
            return self._with_after_send(pieces, 0, q, encode_start)
        request_ms = quotas.request.maybe_record_request_time_ns(q.user, q.client_id, self._elapsed_ns(request))
        encode_start = clock.nanoseconds()
        byte_manager = None
        byte_ms = 0
        fetched = 0
        if key == ApiKey.PRODUCE:
            byte_manager = quotas.produce
            byte_ms = byte_manager.maybe_record_and_get_throttle_time_ms(q.user, q.client_id, q.size)
        elif key == ApiKey.FETCH and values is not None and quotas.fetch.quotas_enabled:
            byte_manager = quotas.fetch
            # The throttle is decided on the response's size, known without encoding
            # (Kafka's fetchResponseSize), so the response is encoded once.
            fetched = fetch_response_size(header.api_version, values)
            byte_ms = byte_manager.record_and_get_throttle_time_ms(q.user, q.client_id, fetched)
        throttle_ms = max(byte_ms, request_ms)
        if throttle_ms > 0:
            if key == ApiKey.FETCH and values is not None:
                if fetched:
                    quotas.fetch.unrecord_quota_sensor(q.user, q.client_id, fetched)
                values = self._throttled_fetch(values)
            if values is not None:
                values["throttle_time"] = throttle_ms
            manager: ClientQuotaManager = (
                byte_manager if byte_manager is not None and byte_ms > request_ms else quotas.request
            )
            connection_id = request.context.connection_id
            end = self.channel.end_throttling
            manager.throttle(q.user, q.client_id, throttle_ms, lambda: end(connection_id))
        pieces = None
        if values is not None:
            if self.metrics is not None:
                self._account(header, values)
            pieces = self._encode_pieces(header, values)
        response = self._with_after_send(pieces, throttle_ms, q, encode_start)
        if throttle_ms > 0:
            response.throttle_quota = manager.quota_type.group
        return response

    def _with_after_send(
        self, pieces: list[Piece] | None, throttle_ms: int, q: _QuotaRequest, since_ns: int
    ) -> Response:
        """The response, with the action that records the time from ``since_ns`` to the
        end of its write (Kafka's network-thread time) once the shell has written it."""
        clock = self.time
        record = self._record_request_time

        def after_send() -> None:
            record(q, max(clock.nanoseconds() - since_ns, 0))

        if pieces is None:
            return NoOpResponse(throttle_ms, after_send)
        return SendResponse(pieces, throttle_ms, after_send)

    @staticmethod
    def _throttled_fetch(values: dict) -> dict:
        """The answer to a throttled Fetch: the same partitions, high watermarks as
        usual, no records (the consumer fetches them again once the throttle ends)."""
        empty = dict(values)
        empty["responses"] = [
            {**t, "partitions": [{**p, "records": b""} for p in t["partitions"]]}
            for t in values["responses"]
        ]
        return empty

    # -- metrics and encoding -------------------------------------------------------------
    def _account(self, header: RequestHeader, values: dict) -> None:
        """Metrics from a response about to be sent: error codes per API (per partition
        for Produce and Fetch, as Kafka counts them) and Fetch's bytes out per topic."""
        assert self.metrics is not None
        requests = self.metrics.requests
        key = header.api_key
        if key == ApiKey.PRODUCE:
            for t in values["responses"]:
                for p in t["partition_responses"]:
                    if p["error_code"]:
                        requests.error(key, p["error_code"])
        elif key == ApiKey.FETCH:
            topics = self.metrics.topics
            by_id = header.api_version >= 13
            if values["error_code"]:
                requests.error(key, values["error_code"])
            for t in values["responses"]:
                if by_id:
                    info = self.store.get_by_id(t["topic_id"])
                    name = info.name if info is not None else None
                else:
                    name = t["topic"]
                size = 0
                for p in t["partitions"]:
                    if p["error_code"]:
                        requests.error(key, p["error_code"])
                    else:
                        size += len(p["records"] or b"")
                if size and name is not None:
                    topics.fetched(name, size)
        else:
            requests.count_errors(key, values)

    def _encode_pieces(self, header: RequestHeader, values: dict) -> list[Piece]:
        """The framed response as pieces: a Fetch's records stay file regions
        (:mod:`tidegate.protocol.fetch_fast`), anything else is one ``bytes``."""
        if header.api_key == ApiKey.FETCH:
            return encode_fetch_response(header.correlation_id, header.api_version, values)
        return [self._encode(header, values)]

    def _encode(self, header: RequestHeader, values: dict) -> bytes:
        return encode_response(header, build(response_class(header.api_key, header.api_version), values))

    def _unsupported_version(self, exc: UnsupportedRequestVersionError) -> bytes:
        if exc.api_key == ApiKey.API_VERSIONS:
            # KIP-511: answer with a v0 body carrying the supported range, so the
            # client can retry with a version both sides know.
            header = RequestHeader(exc.api_key, 0, exc.correlation_id, None, False)
            values = self._api_versions_body()
            values["error_code"] = ErrorCode.unsupported_version
            return self._encode(header, values)
        if self.metrics is not None:
            self.metrics.requests.error(exc.api_key, ErrorCode.unsupported_version)
        return encode_error_only(exc.correlation_id, ErrorCode.unsupported_version.value)

    # -- ApiVersions ----------------------------------------------------------------------
    def _api_versions_body(self) -> dict:
        return {
            "error_code": ErrorCode.none,
            "api_keys": [
                {"api_key": int(r.key), "min_version": r.min_version, "max_version": r.max_version}
                for r in SUPPORTED_APIS.values()
            ],
            "throttle_time": 0,
            "supported_features": [],
            "finalized_features_epoch": -1,
            "finalized_features": [],
            "zk_migration_ready": False,
        }

    def handle_api_versions(self, request: Request) -> dict:
        return self._api_versions_body()

    # -- Metadata -------------------------------------------------------------------------
    def _topic_metadata(self, info: TopicInfo) -> dict:
        return {
            "error_code": ErrorCode.none,
            "name": info.name,
            "topic_id": info.topic_id,
            "is_internal": is_internal_topic(info.name),
            "partitions": self.replicas.partition_states(info),
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def handle_metadata(self, request: Request) -> dict:
        version = request.header.api_version
        req = request.body
        topics_out = []
        if req.topics is None or (version == 0 and not req.topics):
            # null (v1+) or empty (v0) means every topic, internal ones included, as
            # Kafka's metadata cache lists them (is_internal tells them apart)
            topics_out = [self._topic_metadata(info) for info in self.store.topics.values()]
        elif version < 12 and any(t.name is None or getattr(t, "topic_id", None) not in (None, ZERO_UUID)
                                  for t in req.topics):
            # KafkaApis: "Topic name can not be null for version" / "Topic IDs are not
            # supported in requests for version" (v10, v11), answered by the request's
            # getErrorResponse: each topic INVALID_REQUEST, a null name as ""
            log.info("Metadata v%d with a null topic name or a topic id: INVALID_REQUEST", version)
            return {"throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
                    "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                    "topics": [{"error_code": ErrorCode.invalid_request, "name": t.name or "",
                                "topic_id": getattr(t, "topic_id", None) or ZERO_UUID,
                                "partitions": []} for t in req.topics]}
        else:
            allow_auto = getattr(req, "allow_auto_topic_creation", True)
            for t in req.topics:
                name = t.name
                if name is None:
                    info = self._topic_by_id(getattr(t, "topic_id", None))
                    if info is None:
                        topics_out.append(
                            {
                                "error_code": ErrorCode.unknown_topic_id,
                                "name": None,
                                "topic_id": getattr(t, "topic_id", ZERO_UUID),
                                "partitions": [],
                            }
                        )
                        continue
                else:
                    info = self.store.get(name)
                if info is None:
                    topics_out.append(self._auto_create(name, allow_auto))
                else:
                    topics_out.append(self._topic_metadata(info))
        host, port = self.endpoints.endpoint(request.context)
        return {
            "throttle_time": 0,
            "brokers": [{"node_id": self.node_id, "host": host, "port": port, "rack": None}],
            "cluster_id": self.cluster_id,
            "controller_id": self.node_id,
            "topics": topics_out,
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def _auto_create(self, name: str, allow_auto: bool) -> dict:
        error = ErrorCode.unknown_topic_or_partition
        if is_internal_topic(name):  # created by the group coordinator, never by a lookup
            return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "partitions": []}
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return {"error_code": ErrorCode.invalid_topic_exception, "name": name, "partitions": []}
        if name in self.logs.creating:  # a CreateTopics is making it: not ready yet
            return {"error_code": ErrorCode.leader_not_available, "name": name, "topic_id": ZERO_UUID,
                    "partitions": []}
        if allow_auto and self.config.get("auto.create.topics.enable"):
            try:
                info = self.logs.create_topic(name, self.config.get("num.partitions"), {})
            except OSError as exc:
                log.error("could not auto-create topic %s: %s", name, exc)
                return {"error_code": ErrorCode.kafka_storage_error, "name": name, "partitions": []}
            log.info("auto-created topic %s with %d partition(s)", name, info.partitions)
            return self._topic_metadata(info)
        return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "partitions": []}

    def _topic_by_id(self, topic_id: uuid.UUID | None) -> TopicInfo | None:
        return None if topic_id is None else self.store.get_by_id(topic_id)

    # -- Produce --------------------------------------------------------------------------
    def handle_produce(self, request: Request) -> Any:
        req = request.body
        acks = req.acks
        entries: dict[tuple[str, int], Any] = {}
        order: list[tuple[str, list[tuple[str, int]]]] = []
        has_transactional = False
        for topic in req.topic_data:
            keys = []
            for pd in topic.partition_data:
                key = (topic.name, pd.index)
                keys.append(key)
                records = entries[key] = pd.records
                if records is not None and is_transactional_batch(records):
                    has_transactional = True
            order.append((topic.name, keys))

        if has_transactional and req.transactional_id is None:
            # Kafka: transactional records need a transactional id the client may write
            # (WRITE on it), else the whole request fails
            if acks == 0:
                self._send(request, CloseConnectionResponse(_ACKS_0_ERROR))
                return PARKED
            tidaf = PartitionResponse(ErrorCode.transactional_id_authorization_failed)
            return self._produce_body(order, dict.fromkeys(entries, tidaf))

        def respond(results: dict[tuple[str, int], PartitionResponse]) -> None:
            body = self._produce_body(order, results)
            if acks == 0:
                # Kafka: no response, but an error in any partition (the denied topics'
                # included) closes the connection, so the producer refreshes its metadata
                merge, request.authz_merge = request.authz_merge, None
                merged = merge(body) if merge is not None else body
                if any(p["error_code"] for t in merged["responses"] for p in t["partition_responses"]):
                    self._send(request, CloseConnectionResponse(_ACKS_0_ERROR))
                else:
                    self.send_response(request, None)
                return
            self.send_response(request, body)

        self.replicas.append_records(
            req.timeout, acks, entries, respond,
            transactional_id=req.transactional_id, generic_txn_errors=request.header.api_version >= 11,
        )  # fmt: skip
        return PARKED

    @staticmethod
    def _produce_body(
        order: list[tuple[str, list[tuple[str, int]]]], results: dict[tuple[str, int], PartitionResponse]
    ) -> dict:
        responses = []
        for name, keys in order:
            parts = []
            for key in keys:
                r = results[key]
                parts.append(
                    {
                        "index": key[1],
                        "error_code": r.error,
                        "base_offset": r.base_offset,
                        "log_append_time": r.log_append_time,
                        "log_start_offset": r.log_start_offset,
                        "record_errors": [
                            {"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors
                        ]
                        if r.record_errors
                        else (),
                        "error_message": r.error_message,
                    }
                )
            responses.append({"name": name, "partition_responses": parts})
        return {"responses": responses, "throttle_time": 0, "node_endpoints": []}

    # -- Fetch ----------------------------------------------------------------------------
    def handle_fetch(self, request: Request) -> Any:
        """Kafka's ``handleFetchRequest`` with KIP-227 sessions: the fetch context
        (:func:`~tidegate.server.fetch_session.new_context`) decides which partitions
        are read (the request's, or an incremental session's) and which are answered."""
        header: RequestHeader = request.header
        req = request.body
        version = header.api_version
        by_id = version >= 13
        fetch_data: list[tuple[SessionKey, int, int, int, int]] = []
        for t in req.topics:
            tkey = t.topic_id if by_id else t.topic
            for p in t.partitions:
                fetch_data.append(
                    ((tkey, p.partition), p.fetch_offset, p.partition_max_bytes,
                     getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1))
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
            return self._fetch_response(ctx.error, INVALID_SESSION_ID, [], [])
        # a follower's session is privileged in the cache (v15+ names it in replica_state)
        replica_state = getattr(req, "replica_state", None)
        replica_id = replica_state.replica_id if version >= 15 and replica_state is not None else req.replica_id
        privileged = replica_id >= 0
        max_bytes = req.max_bytes if version >= 3 else MAX_INT32
        # Under a fetch quota a response is at most what the quota allows in its whole
        # window (Kafka's getMaxValueInQuotaWindow), so one response cannot earn a
        # throttle of many windows.
        if self.quotas.fetch.quotas_enabled:
            window_max = self.quotas.fetch.max_value_in_quota_window(
                request.context.principal, header.client_id or ""
            )
            max_bytes = int(min(window_max, max_bytes))
        params = FetchParams(
            req.max_wait, req.min_bytes, min(max_bytes, MAX_INT32),
            req.isolation_level if version >= 4 else READ_UNCOMMITTED,
        )  # fmt: skip
        if ctx.session is not None:
            return self._fetch_incremental(request, ctx, ctx.session, by_id, privileged, params)
        names: dict[Any, str | None] = {}
        partitions: list[FetchPartition] = []
        for key, offset, pmax, cle, lfe in fetch_data:
            tkey = key[0]
            if tkey not in names:
                info = self._topic_by_id(tkey) if by_id else self.store.get(tkey)
                names[tkey] = info.name if info is not None else None
            name = names[tkey]
            partitions.append(
                FetchPartition((name, key[1]) if name is not None else None, offset, pmax, cle, lfe)
            )
        read_committed = params.isolation_level == READ_COMMITTED

        def respond(results: list[FetchPartitionData]) -> None:
            keys = [entry[0] for entry in fetch_data]
            session_id = INVALID_SESSION_ID
            if ctx.kind == "full" and self.fetch_sessions.max_entries > 0:
                session_id = self.fetch_sessions.maybe_create_session(
                    self.time.milliseconds(), privileged, len(keys), by_id,
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
            node_endpoints: list[dict] = []
            topics = self._fetch_topics(request, by_id, keys, partitions, results, node_endpoints)
            self.send_response(request, self._fetch_response(ErrorCode.none, session_id, topics, node_endpoints))

        self.replicas.fetch_messages(params, partitions, respond, lambda: request.abandoned)
        return PARKED

    def _fetch_incremental(
        self, request: Request, ctx: FetchContext, session: FetchSession, by_id: bool, privileged: bool,
        params: FetchParams,
    ) -> Any:
        """An incremental fetch reads only the session's dirty partitions (those that
        changed, or that the client was not yet told everything about; see
        :mod:`tidegate.server.fetch_session`): an idle poll of a session of N partitions
        costs O(changed), not O(N). Every topic of the session is authorized on every
        fetch (Kafka's handleFetchRequest): a denied topic's partitions are answered
        TOPIC_AUTHORIZATION_FAILED (and so stay dirty until allowed again)."""
        cache = self.fetch_sessions
        read_committed = params.isolation_level == READ_COMMITTED
        offline = self.replicas.log_dir_offline
        if session.read_committed is not read_committed or offline:
            session.mark_all_dirty()  # settled for the other isolation level (or no log dir)
            session.read_committed = read_committed
        names: dict[Any, str | None] = {}

        def name_of(tkey: Any) -> str | None:
            if tkey not in names:
                info = self._topic_by_id(tkey) if by_id else self.store.get(tkey)
                names[tkey] = info.name if info is not None else None
            return names[tkey]

        denied: set[str] = set()
        if not privileged:  # a follower was checked for CLUSTER_ACTION
            topics = {n for n in map(name_of, session.topic_keys()) if n is not None}
            denied = self.authorization.unreadable_topics(request, topics)
            if denied:
                for key in session.partitions:
                    if name_of(key[0]) in denied:
                        session.dirty.add(key)

        def select() -> tuple[list[Any], list[FetchPartition]]:
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

        def respond(keys: list[Any], partitions: list[FetchPartition], results: list[FetchPartitionData]) -> None:
            if denied:
                for i, key in enumerate(keys):
                    if name_of(key[0]) in denied:
                        results[i] = FetchPartitionData(ErrorCode.topic_authorization_failed)
            body = self._incremental_fetch_body(request, by_id, ctx, keys, partitions, results, read_committed)
            self.send_response(request, body)

        self.replicas.fetch_session_messages(params, session, select, respond, lambda: request.abandoned)
        return PARKED

    def _incremental_fetch_body(
        self, request: Request, by_id: bool, ctx: FetchContext, keys: list[SessionKey],
        partitions: list[FetchPartition], results: list[FetchPartitionData], read_committed: bool,
    ) -> dict:
        """Kafka's ``IncrementalFetchContext.updateAndGenerateResponseData`` over the
        partitions read (the dirty ones): only those with news, each remembered as sent;
        one that returned records moves to the end of the session, so a size-limited
        response rotates fairly. Each read partition settles (leaves the dirty set) once
        nothing in it is left to tell."""
        session = ctx.session
        assert session is not None
        if session.epoch != ctx.expected_epoch:  # another request used the session meanwhile
            return self._fetch_response(ErrorCode.invalid_fetch_session_epoch, session.id, [], [])
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
        node_endpoints: list[dict] = []
        topics = self._fetch_topics(request, by_id, sel_keys, sel_parts, sel_results, node_endpoints)
        return self._fetch_response(ErrorCode.none, session.id, topics, node_endpoints)

    @staticmethod
    def _fetch_response(error: ErrorCode, session_id: int, responses: list, node_endpoints: list) -> dict:
        return {
            "throttle_time": 0,
            "error_code": error,
            "session_id": session_id,
            "responses": responses,
            "node_endpoints": node_endpoints,
        }

    def _fetch_topics(
        self, request: Request, by_id: bool, keys: list[SessionKey], partitions: list[FetchPartition],
        results: list[FetchPartitionData], node_endpoints: list[dict],
    ) -> list[dict]:
        """The response's topics: consecutive partitions of one topic share an entry, as
        Kafka's ``FetchResponse.of`` groups them."""
        responses: list[dict] = []
        last: Any = _NO_TOPIC
        parts: list[dict] = []
        for key, fp, r in zip(keys, partitions, results, strict=True):
            tkey, index = key
            if tkey != last:
                last = tkey
                parts = []
                responses.append(
                    {"topic": None if by_id else tkey, "topic_id": tkey if by_id else None, "partitions": parts}
                )
            error = r.error
            if by_id and error is ErrorCode.unknown_topic_or_partition:
                error = ErrorCode.unknown_topic_id
            part: dict[str, Any] = {
                "partition_index": index,
                "error_code": error,
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset,
                "log_start_offset": r.log_start_offset,
                "aborted_transactions": None
                if r.aborted_transactions is None
                else [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                      for a in r.aborted_transactions],
                "preferred_read_replica": -1,
                "records": r.records,
            }
            if r.diverging_epoch is not None:
                part["diverging_epoch"] = {
                    "epoch": r.diverging_epoch[0], "end_offset": r.diverging_epoch[1]
                }
            if error is ErrorCode.fenced_leader_epoch and fp.key is not None:
                # KIP-951 (v16+): the current leader, and its endpoint below
                plog = self.replicas.get_log(*fp.key)
                part["current_leader"] = {
                    "leader_id": self.node_id,
                    "leader_epoch": plog.leader_epoch if plog is not None else -1,
                }
                if not node_endpoints:
                    host, port = self.endpoints.endpoint(request.context)
                    node_endpoints.append(
                        {"node_id": self.node_id, "host": host, "port": port, "rack": None}
                    )
            parts.append(part)
        return responses

    # -- ListOffsets ----------------------------------------------------------------------
    def handle_list_offsets(self, request: Request) -> dict:
        """Kafka's ``ReplicaManager.fetchOffset`` on one node: a partition named twice gets
        INVALID_REQUEST (once), a special timestamp the version predates
        UNSUPPORTED_VERSION, a stale or future ``current_leader_epoch``
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; timestamps are searched record by
        record; leader epochs are answered from v4."""
        version = request.header.api_version
        read_committed = version >= 2 and request.body.isolation_level == READ_COMMITTED
        wanted: dict[str, dict[int, Any]] = {}
        duplicates: set[tuple[str, int]] = set()
        for t in request.body.topics:
            parts = wanted.setdefault(t.name, {})
            for p in t.partitions:
                if p.partition_index in parts:
                    duplicates.add((t.name, p.partition_index))
                else:
                    parts[p.partition_index] = p
        topics = []
        for name, parts in wanted.items():
            topics.append(
                {
                    "name": name,
                    "partitions": [
                        self._list_offset(name, p, version, (name, index) in duplicates, read_committed)
                        for index, p in parts.items()
                    ],
                }
            )
        return {"throttle_time": 0, "topics": topics}

    def _list_offset(self, topic: str, p: Any, version: int, duplicate: bool, read_committed: bool) -> dict:
        out = {
            "partition_index": p.partition_index,
            "error_code": ErrorCode.none,
            "timestamp": NO_TIMESTAMP,
            "offset": -1,
            "leader_epoch": -1,
        }
        ts = p.timestamp
        if duplicate:
            out["error_code"] = ErrorCode.invalid_request
            return out
        if ts < 0 and version < TIMESTAMP_MIN_VERSION.get(ts, MAX_INT32):
            out["error_code"] = ErrorCode.unsupported_version  # Kafka's isListOffsetsTimestampUnsupported
            return out
        plog: Log | None = self.replicas.get_log(topic, p.partition_index)
        if plog is None:
            out["error_code"] = ErrorCode.unknown_topic_or_partition
            return out
        if self.replicas.log_dir_offline:
            out["error_code"] = ErrorCode.kafka_storage_error
            return out
        epoch_error = check_leader_epoch(plog, getattr(p, "current_leader_epoch", -1))
        if epoch_error is not ErrorCode.none:
            out["error_code"] = epoch_error
            return out
        # read_committed sees the log up to the last stable offset (Kafka's
        # Partition.fetchOffsetForTimestamp)
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        if ts == LATEST_TIMESTAMP:
            found: TimestampAndOffset | None = TimestampAndOffset(NO_TIMESTAMP, upper, plog.leader_epoch)
        elif ts == LATEST_TIERED_TIMESTAMP:
            found = TimestampAndOffset(NO_TIMESTAMP, -1, -1)  # no tiered storage
        elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            found = plog.offset_for_timestamp(EARLIEST_TIMESTAMP)  # local = all: no tiers
        else:
            found = plog.offset_for_timestamp(ts)
            if found is not None and found.offset >= upper:
                found = None  # beyond what a consumer may read: no offset
        if found is not None:
            out["offset"] = found.offset
            out["timestamp"] = found.timestamp
            if found.leader_epoch is not None and version >= 4:
                out["leader_epoch"] = found.leader_epoch
        return out

    # -- OffsetForLeaderEpoch --------------------------------------------------------------
    def handle_offset_for_leader_epoch(self, request: Request) -> dict:
        """KIP-320 truncation detection: the end offset of each asked epoch (Kafka's
        ``Partition.lastOffsetForLeaderEpoch``); a consumer validates its position with it
        after a metadata change. Each partition has one stable epoch, so a consumer asking
        for it gets (epoch, log end offset) and keeps its position."""
        topics = []
        for t in request.body.topics:
            parts = []
            for p in t.partitions:
                error, epoch, end = self.replicas.last_offset_for_leader_epoch(
                    (t.topic, p.partition), getattr(p, "current_leader_epoch", -1), p.leader_epoch
                )
                parts.append(
                    {"error_code": error, "partition": p.partition, "leader_epoch": epoch, "end_offset": end}
                )
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    # -- FindCoordinator ----------------------------------------------------------------------
    def handle_find_coordinator(self, request: Request) -> dict:
        """This node coordinates every group and every transactional id; the coordinator's
        internal topic is created on first use."""
        header, req = request.header, request.body
        version = header.api_version
        key_type = getattr(req, "key_type", COORDINATOR_TYPE_GROUP)
        keys = list(req.coordinator_keys) if version >= 4 else [req.key]
        host, port = self.endpoints.endpoint(request.context)
        message: str | None
        if key_type == COORDINATOR_TYPE_GROUP:
            error, message = self.groups.coordinator_error()
        elif key_type == COORDINATOR_TYPE_TRANSACTION:
            error, message = self.transactions.coordinator_error()
        else:
            error, message = ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        coordinators = []
        for key in keys:
            if error is ErrorCode.none:
                coordinators.append({"key": key, "node_id": self.node_id, "host": host, "port": port,
                                     "error_code": error, "error_message": None})
            else:
                coordinators.append({"key": key, "node_id": -1, "host": "", "port": -1,
                                     "error_code": error, "error_message": message})
        if version >= 4:
            return {"throttle_time": 0, "coordinators": coordinators}
        only = coordinators[0]
        return {
            "throttle_time": 0,
            "error_code": only["error_code"],
            "error_message": only["error_message"],
            "node_id": only["node_id"],
            "host": only["host"],
            "port": only["port"],
        }


class _NoChannel:
    def send_response(self, request: Request, response: Response) -> None:
        raise RuntimeError("KafkaApis.channel is not set: no shell to answer parked requests")

    def end_throttling(self, connection_id: int) -> None:
        raise RuntimeError("KafkaApis.channel is not set")


_NO_CHANNEL = _NoChannel()
#: why an acks=0 Produce closes its connection (Kafka's closeConnection)
_ACKS_0_ERROR = "acks=0 produce with an error in a partition: closing the connection, as Kafka does"
_NO_TOPIC = object()  # no topic yet, while grouping a fetch response's partitions

__all__ = ["PARKED", "KafkaApis", "RequestContext"]
