"""Request handlers: Kafka's KafkaApis, as functions of decoded requests.

Every handler takes the request header, the kio request of the version the client
sent and the connection context, and returns the response as plain nested dicts
(Kafka field names), which :func:`tidegate.protocol.codec.build` turns into the
matching kio response version. A handler that must wait (acks=all until the data
is durable, a fetch until min_bytes arrive) returns a coroutine instead; the
network shell keeps the connection muted until it resolves.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidegate.config import (
    BrokerConfig,
    ConfigError,
    describe_topic_configs,
    validate_topic_configs,
)
from tidegate.log.record_batch import RecordBatchError
from tidegate.network.socket_server import ConnectionClosed, RequestContext
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.protocol.codec import (
    InvalidRequestError,
    RequestHeader,
    build,
    decode_request,
    encode_error_only,
    encode_response,
    ms,
    response_class,
)
from tidegate.protocol.codec import (
    UnsupportedRequestVersionError as UnsupportedVersionError,  # the one decode_request raises
)
from tidegate.security.credentials import CredentialStore
from tidegate.server.client_quotas import BrokerQuotas, QuotaConfigError
from tidegate.server.delayed_fetch import DelayedFetch, FetchPartitionStatus
from tidegate.server.delayed_produce import DelayedProduce
from tidegate.server.group_apis import GroupApis
from tidegate.server.group_offsets import is_internal_topic
from tidegate.server.log_flusher import LogFlusher
from tidegate.server.metadata import InvalidTopicError, validate_topic_name
from tidegate.server.producer_id_manager import ProducerIdManager
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.quotas import ClientQuotaManagerConfig
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.security_apis import SecurityApis
from tidegate.server.timer import SystemTimer
from tidegate.server.timer_reaper import TimerReaper

if TYPE_CHECKING:
    from tidegate.metrics import BrokerMetrics

log = logging.getLogger(__name__)

NO_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
ZERO_UUID = uuid.UUID(int=0)
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class _QuotaRequest:
    """What the quota checks need to know about one request while it is answered."""

    __slots__ = ("client_id", "conn", "exempt", "size", "user")

    def __init__(self, conn: Any, user: str, client_id: str, exempt: bool, size: int) -> None:
        self.conn = conn
        self.user = user
        self.client_id = client_id
        self.exempt = exempt
        self.size = size


class Purgatories:
    """The fetch and produce purgatories, the group-commit flusher feeding the
    produce one, and the reaper that expires their operations on the event loop."""

    def __init__(self, fetch_purge_interval: int = 1000, produce_purge_interval: int = 1000) -> None:
        self.fetch = DelayedOperationPurgatory("Fetch", SystemTimer(), fetch_purge_interval)
        self.produce = DelayedOperationPurgatory("Produce", SystemTimer(), produce_purge_interval)
        # Consumer groups (Kafka's two): session expiry, and the join/sync phases of rebalances.
        self.heartbeat = DelayedOperationPurgatory("Heartbeat", SystemTimer())
        self.rebalance = DelayedOperationPurgatory("Rebalance", SystemTimer())
        self.flusher = LogFlusher(self.produce.check_and_complete)
        self.reaper = TimerReaper([self.fetch, self.produce, self.heartbeat, self.rebalance])

    def complete_fetches_now(self) -> int:
        """Answer every parked fetch with what is there now (broker shutdown)."""
        completed = 0
        for key in self.fetch.watched_keys():
            for op in self.fetch.watchers_for(key):
                if op.force_complete():
                    completed += 1
        return completed

    def shutdown(self) -> None:
        self.reaper.shutdown()


class KafkaApis:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        replicas: ReplicaManager,
        purgatories: Purgatories | None = None,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        *,
        producer_ids: ProducerIdManager | None = None,
        credentials: CredentialStore | None = None,
        quotas: BrokerQuotas | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.replicas = replicas
        self.store = replicas.store
        self.purgatories = purgatories if purgatories is not None else Purgatories()
        self.fetch_purgatory = self.purgatories.fetch
        self.produce_purgatory = self.purgatories.produce
        self.flusher = self.purgatories.flusher
        self.now_ms = now_ms
        # InitProducerId: ids persisted in blocks in the data directory (never reused).
        self.producer_ids = producer_ids if producer_ids is not None else ProducerIdManager(replicas.root)
        # Consumer groups: the coordinator and its handlers (server/group_apis.py).
        self.groups = GroupApis(self)
        # SASL and SCRAM credential administration (server/security_apis.py); without a
        # store (unit tests) credentials live in memory only.
        self.security = SecurityApis(self, credentials if credentials is not None else CredentialStore(None))
        # Client quotas (docs/quotas.md): the three managers, throttling, KIP-546 config.
        if quotas is None:
            quotas = BrokerQuotas(
                ClientQuotaManagerConfig(
                    config.get("quota.window.num"), config.get("quota.window.size.seconds")
                ),
                replicas.root,
            )
            quotas.load()
        self.quotas = quotas
        self.handlers: dict[int, Callable[[RequestHeader, Any, RequestContext], Any]] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.FIND_COORDINATOR: self.groups.handle_find_coordinator,
            ApiKey.JOIN_GROUP: self.groups.handle_join_group,
            ApiKey.SYNC_GROUP: self.groups.handle_sync_group,
            ApiKey.HEARTBEAT: self.groups.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.groups.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.groups.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.groups.handle_offset_fetch,
            ApiKey.LIST_GROUPS: self.groups.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.groups.handle_describe_groups,
            ApiKey.DELETE_GROUPS: self.groups.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.groups.handle_offset_delete,
            ApiKey.SASL_HANDSHAKE: self.security.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.security.handle_sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.security.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.security.handle_alter_user_scram_credentials,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas,
        }
        assert set(self.handlers) == set(SUPPORTED_APIS), "advertised and handled APIs differ"
        # Ports actually bound per listener name, for listeners configured with port 0.
        self.bound_ports: dict[str, int] = {}
        # Set by the broker when metrics are on (metrics.listener); None costs one check.
        self.metrics: BrokerMetrics | None = None

    # -- entry point from the network shell ---------------------------------
    def _decode(
        self, payload: bytearray, ctx: RequestContext, release: Callable[[], None]
    ) -> tuple[RequestHeader, Any] | bytes:
        """The request's header and body, or the encoded UNSUPPORTED_VERSION answer (its
        memory released). A malformed request closes the connection."""
        try:
            return decode_request(payload)
        except UnsupportedVersionError as exc:
            release()
            log.info("%s from %s:%s", exc, ctx.client_address, ctx.client_port)
            return self._unsupported_version(exc)
        except InvalidRequestError as exc:
            raise ConnectionClosed(str(exc)) from exc

    def process(self, payload: bytearray, ctx: RequestContext, release: Callable[[], None]) -> Any:
        """Decode, handle, encode. Returns bytes, None (no response) or an awaitable."""
        if self.quotas.enabled:
            return self._process_with_quotas(payload, ctx, release)
        decoded = self._decode(payload, ctx, release)
        if isinstance(decoded, bytes):
            return decoded  # UNSUPPORTED_VERSION
        header, body = decoded
        if header.api_key != ApiKey.PRODUCE:
            release()  # everything but Produce is fully decoded: its bytes are not needed
        result = self.handlers[header.api_key](header, body, ctx)
        if header.api_key == ApiKey.PRODUCE:
            release()  # records are appended by now
        if result is None:
            return None
        if isinstance(result, asyncio.Future):
            return self._finish_later(header, result)
        if asyncio.iscoroutine(result):
            return self._finish_async(header, result)
        if self.metrics is not None:
            self._account(header, result)
        return self._encode(header, result)

    def _process_with_quotas(
        self, payload: bytearray, ctx: RequestContext, release: Callable[[], None]
    ) -> Any:
        """:meth:`process` while any client quota is configured: the same steps, timed
        for the request quota, with the byte-rate quotas recorded and KIP-219 throttling
        applied to the response (:meth:`_respond_with_quotas`)."""
        start = time.perf_counter_ns()
        size = len(payload)
        decoded = self._decode(payload, ctx, release)
        if isinstance(decoded, bytes):
            return decoded  # UNSUPPORTED_VERSION
        header, body = decoded
        key = header.api_key
        conn = ctx.connection
        user = conn.principal if conn is not None else "ANONYMOUS"
        # Exempt from the request quota, as in Kafka: ApiVersions, and the SASL exchange
        # before the connection is authenticated (their time is still measured).
        exempt = key == ApiKey.API_VERSIONS or (
            key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and conn is not None and not conn.authenticated
        )
        q = _QuotaRequest(conn, user, header.client_id or "", exempt, size)
        if key != ApiKey.PRODUCE:
            release()
        result = self.handlers[key](header, body, ctx)
        if key == ApiKey.PRODUCE:
            release()
        if isinstance(result, asyncio.Future) or asyncio.iscoroutine(result):
            # The handler's time so far is recorded now and checked with the response.
            self._record_request_time(q, time.perf_counter_ns() - start)
            if isinstance(result, asyncio.Future):
                return self._finish_later(header, result, q)
            return self._finish_async(header, result, q)
        return self._respond_with_quotas(header, q, result, start)

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """The shell's SASL exchange before login: exempt, measured (RequestProcessor)."""
        self.quotas.request.maybe_record_exempt_ns(ns)

    def _record_request_time(self, q: _QuotaRequest, ns: int) -> None:
        """Loop time spent on a request, recorded without a check (the next check sees it)."""
        request = self.quotas.request
        if q.exempt:
            request.maybe_record_exempt_ns(ns)
        else:
            request.record_network_thread_time_ns(q.user, q.client_id, ns)

    def _respond_with_quotas(
        self, header: RequestHeader, q: _QuotaRequest, values: dict | None, start_ns: int
    ) -> bytes | None:
        """Record, check and throttle (KIP-219), then encode the response.

        As Kafka's KafkaApis: the request time so far is recorded and checked on the
        request quota; Produce records the request's size on the produce quota, Fetch the
        response's size on the fetch quota; the throttle is the maximum of those that
        apply. A throttled Fetch is answered empty (its bytes are taken back: the client
        gets them later). The response carries ``throttle_time_ms`` in every version
        that has the field and is sent at once; the connection is muted with
        ``MuteReason.THROTTLE`` for the throttle time, also when there is no response
        (acks=0). Encoding and writing the response are recorded after the write.
        """
        quotas = self.quotas
        key = header.api_key
        if q.exempt:
            quotas.request.maybe_record_exempt_ns(time.perf_counter_ns() - start_ns)
            encoded = None
            if values is not None:
                if self.metrics is not None:
                    self._account(header, values)
                encoded = self._encode(header, values)
            self._after_send(q, time.perf_counter_ns())
            return encoded
        request_ms = quotas.request.maybe_record_request_time_ns(
            q.user, q.client_id, time.perf_counter_ns() - start_ns
        )
        encode_start = time.perf_counter_ns()
        encoded = None
        byte_manager = None
        byte_ms = 0
        fetched = 0
        if key == ApiKey.PRODUCE:
            byte_manager = quotas.produce
            byte_ms = byte_manager.maybe_record_and_get_throttle_time_ms(q.user, q.client_id, q.size)
        elif key == ApiKey.FETCH and values is not None and quotas.fetch.quotas_enabled:
            byte_manager = quotas.fetch
            encoded = self._encode(header, values)
            fetched = len(encoded)
            byte_ms = byte_manager.record_and_get_throttle_time_ms(q.user, q.client_id, fetched)
        throttle_ms = max(byte_ms, request_ms)
        if throttle_ms > 0:
            if key == ApiKey.FETCH and values is not None:
                if fetched:
                    quotas.fetch.unrecord_quota_sensor(q.user, q.client_id, fetched)
                values = self._throttled_fetch(values)
                encoded = None
            if values is not None:
                values["throttle_time"] = throttle_ms
                encoded = None
            manager = byte_manager if byte_manager is not None and byte_ms > request_ms else quotas.request
            quotas.throttle(manager, q.conn, q.user, q.client_id, throttle_ms)
        if values is not None:
            if self.metrics is not None:
                self._account(header, values)
            if encoded is None:
                encoded = self._encode(header, values)
        self._after_send(q, encode_start)
        return encoded

    def _after_send(self, q: _QuotaRequest, since_ns: int) -> None:
        """Record the time from ``since_ns`` to the end of the response's write (Kafka's
        network-thread time), once the connection has written it."""
        conn = q.conn
        if conn is None:
            return
        record = self._record_request_time
        conn.after_send = lambda: record(q, time.perf_counter_ns() - since_ns)

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

    def _finish_later(
        self, header: RequestHeader, parked: asyncio.Future, q: _QuotaRequest | None = None
    ) -> asyncio.Future:
        """The encoded answer to a parked request (DelayedFetch, DelayedProduce), chained
        to its future by callbacks: a parked request holds no task, only two futures.
        Cancelling the answer (the connection went away) cancels ``parked``, so its
        completion skips the work of answering."""
        answer = parked.get_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if answer.done():
                return
            if f.cancelled():
                answer.cancel()
                return
            try:
                values = f.result()
                if q is not None and self.quotas.enabled:
                    values = self._respond_with_quotas(header, q, values, time.perf_counter_ns())
                elif values is not None:
                    if self.metrics is not None:
                        self._account(header, values)
                    values = self._encode(header, values)
            except Exception as exc:  # noqa: BLE001 - the connection logs it and closes
                answer.set_exception(exc)
                return
            answer.set_result(values)

        def cancelled(a: asyncio.Future) -> None:
            if a.cancelled():
                parked.cancel()

        parked.add_done_callback(done)
        answer.add_done_callback(cancelled)
        return answer

    async def _finish_async(
        self, header: RequestHeader, coro: Awaitable[Any], q: _QuotaRequest | None = None
    ) -> bytes | None:
        result = await coro
        if q is not None and self.quotas.enabled:
            return self._respond_with_quotas(header, q, result, time.perf_counter_ns())
        if result is None:
            return None
        if self.metrics is not None:
            self._account(header, result)
        return self._encode(header, result)

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

    def _encode(self, header: RequestHeader, values: dict) -> bytes:
        return encode_response(header, build(response_class(header.api_key, header.api_version), values))

    def _unsupported_version(self, exc: UnsupportedVersionError) -> bytes:
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

    # -- helpers --------------------------------------------------------------
    def _endpoint(self, ctx: RequestContext | None) -> tuple[str, int]:
        """The advertised endpoint of the listener the request came in on."""
        listeners = self.config.advertised_listeners
        chosen = listeners[0]
        for lst in listeners:
            if ctx is not None and lst.name == ctx.listener_name:
                chosen = lst
                break
        port = chosen.port or self.bound_ports.get(chosen.name, 0)
        return chosen.host, port

    def _topic_by_id(self, topic_id: uuid.UUID | None):
        return None if topic_id is None else self.store.get_by_id(topic_id)

    # -- ApiVersions ----------------------------------------------------------
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

    def handle_api_versions(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        return self._api_versions_body()

    # -- Metadata -------------------------------------------------------------
    def _partition_metadata(self, partitions: int) -> list[dict]:
        node = self.node_id
        return [
            {
                "error_code": ErrorCode.none,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": (node,),
                "isr_nodes": (node,),
                "offline_replicas": (),
            }
            for p in range(partitions)
        ]

    def _topic_metadata(self, info) -> dict:
        return {
            "error_code": ErrorCode.none,
            "name": info.name,
            "topic_id": info.topic_id,
            "is_internal": is_internal_topic(info.name),
            "partitions": self._partition_metadata(info.partitions),
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def handle_metadata(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        version = header.api_version
        topics_out = []
        if req.topics is None or (version == 0 and not req.topics):
            # null (v1+) or empty (v0) means every topic
            # ... except internal ones (__consumer_offsets), unless asked for by name
            topics_out = [
                self._topic_metadata(info)
                for info in self.store.topics.values()
                if not is_internal_topic(info.name)
            ]
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
        host, port = self._endpoint(ctx)
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
        if allow_auto and self.config.get("auto.create.topics.enable"):
            try:
                info = self.replicas.create_topic(name, self.config.get("num.partitions"), {})
            except OSError as exc:
                log.error("could not auto-create topic %s: %s", name, exc)
                return {"error_code": ErrorCode.kafka_storage_error, "name": name, "partitions": []}
            log.info("auto-created topic %s with %d partition(s)", name, info.partitions)
            return self._topic_metadata(info)
        return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "partitions": []}

    # -- Produce ---------------------------------------------------------------
    def handle_produce(self, header: RequestHeader, req: Any, ctx: RequestContext) -> Any:
        acks = req.acks
        now = self.now_ms()
        responses = []
        pending: dict[tuple[str, int], tuple[Any, int, dict]] = {}
        appended_keys: list[tuple[str, int]] = []
        for topic in req.topic_data:
            name = topic.name
            info = self.store.get(name)
            parts = []
            for pd in topic.partition_data:
                part = {
                    "index": pd.index,
                    "error_code": ErrorCode.none,
                    "base_offset": -1,
                    "log_append_time": -1,
                    "log_start_offset": -1,
                    "record_errors": [],
                    "error_message": None,
                }
                parts.append(part)
                if acks not in (0, 1, -1):
                    part["error_code"] = ErrorCode.invalid_required_acks
                    continue
                if is_internal_topic(name):
                    part["error_code"] = ErrorCode.invalid_topic_exception
                    part["error_message"] = f"Cannot append to internal topic {name}"
                    continue
                plog = self.replicas.get_log(name, pd.index) if info is not None else None
                if plog is None:
                    part["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                if req.transactional_id is not None:
                    part["error_code"] = ErrorCode.transactional_id_authorization_failed
                    part["error_message"] = "transactions are not supported by this broker yet"
                    continue
                records = pd.records
                if not records:
                    part["error_code"] = ErrorCode.corrupt_message
                    part["error_message"] = "empty records"
                    continue
                try:
                    appended = plog.append(records, now, single_batch=True)
                except RecordBatchError as exc:
                    part["error_code"] = ErrorCode(exc.error_code)
                    part["error_message"] = str(exc)
                    log.info("produce to %s-%d rejected: %s", name, pd.index, exc)
                    continue
                part["base_offset"] = appended.first_offset
                part["log_append_time"] = appended.log_append_time_ms
                part["log_start_offset"] = plog.log_start_offset
                if appended.duplicate:
                    # An idempotent producer's retry: answered with the original offsets,
                    # nothing appended (acks=all still waits for the original's fsync).
                    log.debug("duplicate batch to %s-%d: original base offset %d",
                              name, pd.index, appended.first_offset)
                elif self.metrics is not None:
                    self.metrics.topics.appended(name, appended.num_records, appended.size_bytes)
                key = (name, pd.index)
                self.replicas.record_append(key, appended.size_bytes)
                appended_keys.append(key)
                if acks == -1:
                    pending[key] = (plog, appended.last_offset, part)
                    self.flusher.request(key, plog)
            responses.append({"name": name, "partition_responses": parts})
        if appended_keys:
            self._complete_fetches_after_response(appended_keys)
        if acks == 0:
            return None
        body = {"responses": responses, "throttle_time": 0, "node_endpoints": []}
        if not pending:
            return body
        # acks=all on one node: answered once the batches are fsynced (docs/durability.md),
        # by the group-commit flusher completing this DelayedProduce.
        fut = asyncio.get_running_loop().create_future()

        def respond() -> None:
            if not fut.done():
                fut.set_result(body)

        op = DelayedProduce(ms(req.timeout), pending, self.replicas, respond)
        self.produce_purgatory.try_complete_else_watch(op, list(pending))
        return fut

    # -- Fetch -------------------------------------------------------------------
    def _fetch_targets(self, header: RequestHeader, req: Any) -> list[tuple[Any, str | None, Any]]:
        """(request topic, topic name or None if unknown, topic info) per requested topic."""
        out = []
        for t in req.topics:
            if header.api_version >= 13:
                info = self._topic_by_id(t.topic_id)
            else:
                info = self.store.get(t.topic)
            out.append((t, info))
        return out

    def _read_fetch(
        self, header: RequestHeader, req: Any, targets, max_bytes: int = 2**31 - 1
    ) -> tuple[dict, int]:
        remaining = min(req.max_bytes if header.api_version >= 3 else 2**31 - 1, max_bytes)
        total = 0
        responses = []
        by_id = header.api_version >= 13
        for t, info in targets:
            parts = []
            for p in t.partitions:
                out = {
                    "partition_index": p.partition,
                    "error_code": ErrorCode.none,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "aborted_transactions": None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                parts.append(out)
                plog = self.replicas.get_log(info.name, p.partition) if info is not None else None
                if plog is None:
                    out["error_code"] = (
                        ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                    )
                    continue
                hw = plog.high_watermark
                out["high_watermark"] = hw
                out["last_stable_offset"] = hw
                out["log_start_offset"] = plog.log_start_offset
                if p.fetch_offset < plog.log_start_offset or p.fetch_offset > plog.log_end_offset:
                    out["error_code"] = ErrorCode.offset_out_of_range
                    continue
                # KIP-74: the first batch of the first partition with data is returned
                # even when it exceeds the limits, so a consumer can always make
                # progress; every later partition stays within both limits.
                limit = min(p.partition_max_bytes, remaining)
                data = plog.read(p.fetch_offset, max(limit, 0), min_one_batch=total == 0)
                out["records"] = bytes(data)
                total += len(data)
                remaining -= len(data)
            responses.append(
                {
                    "topic": t.topic if not by_id else None,
                    "topic_id": t.topic_id if by_id else None,
                    "partitions": parts,
                }
            )
        body = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,  # no fetch session: clients send full fetches (KIP-227 allows it)
            "responses": responses,
            "node_endpoints": [],
        }
        return body, total

    def handle_fetch(self, header: RequestHeader, req: Any, ctx: RequestContext) -> Any:
        targets = self._fetch_targets(header, req)
        # Under a fetch quota a response is at most what the quota allows in its whole
        # window (Kafka's getMaxValueInQuotaWindow), so one response cannot earn a
        # throttle of many windows.
        max_bytes = 2**31 - 1
        if self.quotas.fetch.quotas_enabled:
            conn = ctx.connection
            user = conn.principal if conn is not None else "ANONYMOUS"
            window_max = self.quotas.fetch.max_value_in_quota_window(user, header.client_id or "")
            max_bytes = int(min(window_max, max_bytes))
        body, total = self._read_fetch(header, req, targets, max_bytes)
        max_wait = ms(req.max_wait)
        if max_wait <= 0 or total >= req.min_bytes or not targets or self._has_error(body):
            return body
        # Park in the fetch purgatory until min_bytes arrive, a partition goes away,
        # or max_wait passes (DelayedFetch); no task or thread per parked fetch.
        statuses = []
        appended = self.replicas.appended_bytes
        for (t, info), out in zip(targets, body["responses"], strict=True):
            for p, part in zip(t.partitions, out["partitions"], strict=True):
                key = (info.name, p.partition)
                statuses.append(
                    FetchPartitionStatus(
                        key,
                        self.replicas.get_log(*key),
                        p.fetch_offset,
                        p.partition_max_bytes,
                        len(part["records"]),
                        appended.get(key, 0),
                    )
                )
        fut = asyncio.get_running_loop().create_future()

        def respond() -> None:
            if not fut.done():
                fut.set_result(
                    self._read_fetch(header, req, self._fetch_targets(header, req), max_bytes)[0]
                )

        op = DelayedFetch(max_wait, req.min_bytes, statuses, self.replicas, respond)
        self.fetch_purgatory.try_complete_else_watch(op, [st.key for st in statuses])
        return fut

    @staticmethod
    def _has_error(body: dict) -> bool:
        return any(p["error_code"] != ErrorCode.none for t in body["responses"] for p in t["partitions"])

    # -- ListOffsets --------------------------------------------------------------
    def handle_list_offsets(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        topics = []
        for t in req.topics:
            info = self.store.get(t.name)
            parts = []
            for p in t.partitions:
                out = {
                    "partition_index": p.partition_index,
                    "error_code": ErrorCode.none,
                    "timestamp": NO_TIMESTAMP,
                    "offset": -1,
                    "leader_epoch": 0,
                }
                parts.append(out)
                plog = self.replicas.get_log(t.name, p.partition_index) if info is not None else None
                if plog is None:
                    out["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                ts = p.timestamp
                if ts == LATEST_TIMESTAMP or ts == LATEST_TIERED_TIMESTAMP:
                    out["offset"] = plog.high_watermark
                elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    out["offset"] = plog.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = plog.max_timestamp_offset()
                    if found is not None:
                        out["offset"], out["timestamp"] = found
                elif ts < 0:
                    out["error_code"] = ErrorCode.invalid_request
                else:
                    found = plog.offset_for_timestamp(ts)
                    if found is not None:
                        out["offset"], out["timestamp"] = found
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    # -- CreateTopics -----------------------------------------------------------------
    def handle_create_topics(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        results = []
        seen: dict[str, int] = {}
        for t in req.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        for t in req.topics:
            results.append(self._create_one(t, req.validate_only, seen[t.name] > 1))
        return {"throttle_time": 0, "topics": results}

    def _create_one(self, t: Any, validate_only: bool, duplicate: bool) -> dict:
        name = t.name

        def fail(code: ErrorCode, message: str) -> dict:
            return {
                "name": name,
                "topic_id": ZERO_UUID,
                "error_code": code,
                "error_message": message,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
            }

        if duplicate:
            return fail(ErrorCode.invalid_request, f"Duplicate topic name {name} in the request")
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            return fail(ErrorCode.invalid_topic_exception, str(exc))
        if self.store.get(name) is not None:
            return fail(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if is_internal_topic(name):
            return fail(ErrorCode.invalid_request, f"{name} is an internal topic the broker creates")
        if t.assignments:
            partitions = len(t.assignments)
            for a in t.assignments:
                if tuple(a.broker_ids) != (self.node_id,):
                    return fail(
                        ErrorCode.invalid_replica_assignment,
                        f"replica assignment {list(a.broker_ids)} names brokers other than "
                        f"the single node {self.node_id}",
                    )
            if t.num_partitions != -1 or t.replication_factor != -1:
                return fail(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
        else:
            partitions = t.num_partitions
            if partitions == -1:
                partitions = self.config.get("num.partitions")
            if partitions <= 0:
                return fail(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
            rf = t.replication_factor
            if rf == -1:
                rf = self.config.get("default.replication.factor")
            if rf <= 0:
                return fail(
                    ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
                )
            if rf > 1:
                return fail(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {rf} time(s): The target replication "
                    "factor of " + str(rf) + " cannot be reached because only 1 broker(s) are "
                    "registered.",
                )
        try:
            configs = validate_topic_configs({c.name: c.value for c in t.configs or ()})
        except ConfigError as exc:
            return fail(ErrorCode.invalid_config, str(exc))
        if validate_only:
            topic_id = ZERO_UUID
        else:
            try:
                info = self.replicas.create_topic(name, partitions, configs)
            except OSError as exc:
                log.error("could not create topic %s: %s", name, exc)
                return fail(ErrorCode.kafka_storage_error, f"could not create the topic's logs: {exc}")
            topic_id = info.topic_id
            log.info("created topic %s (%d partitions, configs %s)", name, partitions, configs)
        described = [
            {
                "name": e.name,
                "value": e.value,
                "read_only": e.read_only,
                "config_source": e.source,
                "is_sensitive": e.is_sensitive,
            }
            for e in describe_topic_configs(self.config, configs)
        ]
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": partitions,
            "replication_factor": 1,
            "configs": described,
        }

    # -- DeleteTopics -------------------------------------------------------------------
    def handle_delete_topics(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        if header.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(n, None) for n in req.topic_names]
        responses = []
        for name, topic_id in wanted:
            if name is None:
                info = self._topic_by_id(topic_id)
                missing = ErrorCode.unknown_topic_id
            else:
                info = self.store.get(name)
                missing = ErrorCode.unknown_topic_or_partition
            if info is None:
                responses.append(
                    {
                        "name": name,
                        "topic_id": topic_id or ZERO_UUID,
                        "error_code": missing,
                        "error_message": None,
                    }
                )
                continue
            if is_internal_topic(info.name):
                responses.append(
                    {
                        "name": info.name,
                        "topic_id": info.topic_id,
                        "error_code": ErrorCode.invalid_request,
                        "error_message": f"cannot delete the internal topic {info.name}",
                    }
                )
                continue
            self.replicas.delete_topic(info.name)
            if self.metrics is not None:
                self.metrics.topics.remove(info.name)
            self._wake_deleted(info)
            self.groups.on_topic_deleted(info.name)
            log.info("deleted topic %s", info.name)
            responses.append(
                {"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.none}
            )
        return {"throttle_time": 0, "responses": responses}

    def _complete_fetches_after_response(self, keys: list[tuple[str, int]]) -> None:
        """Wake fetches parked on the appended partitions once this produce is answered.

        As Kafka's delayed-operation action queue does: completing a parked fetch
        re-reads and encodes its answer, and with many parked consumers that work
        must not delay the producer's own response. On the event loop the checks run
        on the next iteration, after the response is written; without a loop (the
        sans-IO tests) they run at once.
        """
        check = self.fetch_purgatory.check_and_complete
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            for key in keys:
                check(key)
            return
        for key in keys:
            loop.call_soon(check, key)

    def _wake_deleted(self, info) -> None:
        """Parked fetches and acks=all produces on a deleted topic answer now."""
        for p in range(info.partitions):
            self.fetch_purgatory.check_and_complete((info.name, p))
            self.produce_purgatory.check_and_complete((info.name, p))

    # -- InitProducerId ---------------------------------------------------------------------
    def handle_init_producer_id(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        """Idempotent producers get a fresh producer id with epoch 0, as Kafka's
        TransactionCoordinator answers every request without a transactional id (also
        v3+ requests carrying a current id and epoch: Kafka ignores them then, and the
        clients take whatever id and epoch come back). Transactional ids are refused
        with TRANSACTIONAL_ID_AUTHORIZATION_FAILED: there is no transaction coordinator,
        and that code makes every client fail at once with a clear error instead of
        retrying a coordinator lookup until it times out (docs/idempotence.md)."""
        body = {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": -1, "producer_epoch": -1}
        txn_id = req.transactional_id
        if txn_id is not None:
            if txn_id == "":
                body["error_code"] = ErrorCode.invalid_request
            else:
                body["error_code"] = ErrorCode.transactional_id_authorization_failed
                log.info("InitProducerId for transactional id %r refused: transactions are "
                         "not supported", txn_id)
            return body
        pid = getattr(req, "producer_id", -1)
        epoch = getattr(req, "producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            body["error_code"] = ErrorCode.invalid_request  # Kafka: both or neither
            return body
        try:
            body["producer_id"] = self.producer_ids.generate()
        except OSError as exc:
            # Kafka answers this when no id block can be had: retriable, clients retry.
            log.error("cannot reserve a block of producer ids: %s", exc)
            body["error_code"] = ErrorCode.coordinator_load_in_progress
            return body
        body["producer_epoch"] = 0
        return body

    # -- CreatePartitions ------------------------------------------------------------------
    def handle_create_partitions(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        results = []
        for t in req.topics:
            info = self.store.get(t.name)
            result = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
            results.append(result)
            if info is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"The topic '{t.name}' does not exist."
                continue
            if is_internal_topic(t.name):
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"cannot add partitions to the internal topic {t.name}"
                continue
            if t.count <= info.partitions:
                result["error_code"] = ErrorCode.invalid_partitions
                result["error_message"] = (
                    f"Topic currently has {info.partitions} partitions, which is higher than or "
                    f"equal to the requested {t.count}."
                )
                continue
            if t.assignments and any(tuple(a.broker_ids) != (self.node_id,) for a in t.assignments):
                result["error_code"] = ErrorCode.invalid_replica_assignment
                result["error_message"] = f"assignments must name only broker {self.node_id}"
                continue
            if not req.validate_only:
                try:
                    self.replicas.add_partitions(t.name, t.count)
                except OSError as exc:
                    log.error("could not add partitions to %s: %s", t.name, exc)
                    result["error_code"] = ErrorCode.kafka_storage_error
                    result["error_message"] = f"could not create the new partitions' logs: {exc}"
                    continue
                log.info("topic %s now has %d partitions", t.name, t.count)
        return {"throttle_time": 0, "results": results}

    # -- DescribeConfigs ----------------------------------------------------------------------
    def handle_describe_configs(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        include_synonyms = getattr(req, "include_synonyms", False)
        include_doc = getattr(req, "include_documentation", False)
        results = []
        for r in req.resources:
            result = {
                "error_code": ErrorCode.none,
                "error_message": None,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
                "configs": [],
            }
            results.append(result)
            if r.resource_type == RESOURCE_TOPIC:
                info = self.store.get(r.resource_name)
                if info is None:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                    result["error_message"] = f"Topic {r.resource_name} does not exist"
                    continue
                entries = describe_topic_configs(self.config, info.configs)
            elif r.resource_type == RESOURCE_BROKER:
                if r.resource_name not in ("", str(self.node_id)):
                    result["error_code"] = ErrorCode.invalid_request
                    result["error_message"] = (
                        f"Unexpected broker id, expected {self.node_id} or empty string, "
                        f"but received {r.resource_name}"
                    )
                    continue
                entries = self.config.describe()
            else:
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"Unsupported resource type {r.resource_type}"
                continue
            keys = set(r.configuration_keys) if r.configuration_keys else None
            result["configs"] = [
                {
                    "name": e.name,
                    "value": e.value,
                    "read_only": e.read_only,
                    "config_source": e.source,
                    "is_sensitive": e.is_sensitive,
                    "synonyms": [
                        {"name": s.name, "value": s.value, "source": s.source} for s in e.synonyms
                    ]
                    if include_synonyms
                    else [],
                    "config_type": e.config_type,
                    "documentation": e.documentation if include_doc else None,
                }
                for e in entries
                if keys is None or e.name in keys
            ]
        return {"throttle_time": 0, "results": results}

    # -- DescribeCluster --------------------------------------------------------------------------
    def handle_describe_cluster(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        endpoint_type = getattr(req, "endpoint_type", 1)
        if endpoint_type != 1:
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.unsupported_endpoint_type,
                "error_message": "tidegate has no separate controller endpoints",
                "endpoint_type": endpoint_type,
                "cluster_id": self.cluster_id,
                "controller_id": -1,
                "brokers": [],
                "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        host, port = self._endpoint(ctx)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": self.cluster_id,
            "controller_id": self.node_id,
            "brokers": [
                {"broker_id": self.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}
            ],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    # -- DescribeClientQuotas / AlterClientQuotas (KIP-546) ---------------------------------
    def handle_describe_client_quotas(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        try:
            entries = self.quotas.describe(req.components, req.strict)
        except QuotaConfigError as exc:
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.invalid_request,
                "error_message": str(exc),
                "entries": None,
            }
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                "entries": entries}

    def handle_alter_client_quotas(self, header: RequestHeader, req: Any, ctx: RequestContext) -> dict:
        try:
            results = self.quotas.alter(req.entries, req.validate_only)
        except OSError as exc:
            log.error("could not persist client quotas: %s", exc)
            results = [
                {
                    "error_code": ErrorCode.kafka_storage_error,
                    "error_message": f"could not persist the client quotas: {exc}",
                    "entity": [
                        {"entity_type": e.entity_type, "entity_name": e.entity_name}
                        for e in entry.entity
                    ],
                }
                for entry in req.entries
            ]
        return {"throttle_time": 0, "entries": results}
