"""Admin requests: topics, partitions, configs, the cluster, client quotas.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster, DescribeClientQuotas and AlterClientQuotas, for
:class:`~tidegate.server.kafka_apis.KafkaApis` (which registers them): on a one-node
KRaft cluster this node is the controller, so the controller's validation and Kafka's
error codes and messages are reproduced here. Handlers take the request and the time and
return the response as nested dicts with Kafka's field names.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidegate.config import (
    TOPIC_CONFIG,
    BrokerConfig,
    ConfigError,
    describe_topic_configs,
    validate_topic_configs,
)
from tidegate.config.alter import AlterConfigError, AlterOp, apply_config_ops
from tidegate.config.broker import BROKER_CONFIG
from tidegate.network.request_channel import Request
from tidegate.server.endpoints import Endpoints
from tidegate.server.metadata import (
    BrokerConfigStore,
    InvalidTopicError,
    TopicInfo,
    TopicStore,
    is_internal_topic,
    validate_topic_name,
)
from tidegate.server.quota.quota_factory import QuotaConfigError, QuotaManagers
from tidegate.server.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from tidegate.metrics.prometheus import BrokerMetrics
    from tidegate.server.group_apis import GroupApis

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
ZERO_UUID = uuid.UUID(int=0)


class _Resource:
    """One resource of an AlterConfigs/IncrementalAlterConfigs request on its way through
    the two steps Kafka splits it into: the broker's checks, then the controller's."""

    __slots__ = ("error", "message", "new_configs", "req")

    def __init__(self, req: Any) -> None:
        self.req = req
        self.error: ErrorCode = ErrorCode.none
        self.message: str | None = None
        #: the resource's whole set of configs after the request (set once it validates)
        self.new_configs: dict[str, str] | None = None

    def fail(self, error: ErrorCode, message: str | None) -> None:
        self.error, self.message = error, message

    @property
    def failed(self) -> bool:
        return self.error is not ErrorCode.none

    def response(self) -> dict:
        return {
            "error_code": self.error,
            "error_message": self.message,
            "resource_type": self.req.resource_type,
            "resource_name": self.req.resource_name,
        }


class AdminApis:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        replicas: ReplicaManager,
        store: TopicStore,
        quotas: QuotaManagers,
        endpoints: Endpoints,
        groups: GroupApis,
        broker_configs: BrokerConfigStore,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.replicas = replicas
        self.logs = replicas.logs
        self.store = store
        self.quotas = quotas
        self.endpoints = endpoints
        self.groups = groups
        #: where the dynamic broker configs are persisted
        self.broker_configs = broker_configs
        #: the broker's metrics when they are on (deleted topics leave them)
        self.metrics: BrokerMetrics | None = None

    def _topic_by_id(self, topic_id: uuid.UUID | None) -> TopicInfo | None:
        return None if topic_id is None else self.store.get_by_id(topic_id)

    # -- CreateTopics -----------------------------------------------------------------
    def handle_create_topics(self, request: Request, now_ms: int) -> dict:
        req = request.body
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
                info = self.logs.create_topic(name, partitions, configs)
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
    def handle_delete_topics(self, request: Request, now_ms: int) -> dict:
        req = request.body
        if request.header.api_version >= 6:
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
            self.logs.delete_topic(info.name)
            if self.metrics is not None:
                self.metrics.topics.remove(info.name)
            self.replicas.partitions_removed((info.name, p) for p in range(info.partitions))
            self.groups.on_topic_deleted(info.name)
            log.info("deleted topic %s", info.name)
            responses.append(
                {"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.none}
            )
        return {"throttle_time": 0, "responses": responses}


    # -- CreatePartitions ------------------------------------------------------------------
    def handle_create_partitions(self, request: Request, now_ms: int) -> dict:
        req = request.body
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
                    self.logs.add_partitions(t.name, t.count)
                except OSError as exc:
                    log.error("could not add partitions to %s: %s", t.name, exc)
                    result["error_code"] = ErrorCode.kafka_storage_error
                    result["error_message"] = f"could not create the new partitions' logs: {exc}"
                    continue
                log.info("topic %s now has %d partitions", t.name, t.count)
        return {"throttle_time": 0, "results": results}

    # -- DescribeConfigs ----------------------------------------------------------------------
    def handle_describe_configs(self, request: Request, now_ms: int) -> dict:
        req = request.body
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
                try:
                    validate_topic_name(r.resource_name)
                except InvalidTopicError as exc:
                    result["error_code"] = ErrorCode.invalid_topic_exception
                    result["error_message"] = str(exc)
                    continue
                info = self.store.get(r.resource_name)
                if info is None:  # Kafka sets no message here
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                entries = describe_topic_configs(self.config, info.configs)
            elif r.resource_type == RESOURCE_BROKER:
                name = r.resource_name
                if name and not _is_int(name):
                    result["error_code"] = ErrorCode.invalid_request
                    result["error_message"] = f"Broker id must be an integer, but it is: {name}"
                    continue
                if name and int(name) != self.node_id:
                    result["error_code"] = ErrorCode.invalid_request
                    result["error_message"] = (
                        f"Unexpected broker id, expected {self.node_id} or empty string, "
                        f"but received {name}"
                    )
                    continue
                entries = self.config.describe(per_broker=bool(name))
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
                    "documentation": (e.documentation or None) if include_doc else None,
                }
                for e in entries
                if keys is None or e.name in keys
            ]
        return {"throttle_time": 0, "results": results}

    # -- AlterConfigs / IncrementalAlterConfigs ------------------------------------------------
    def handle_incremental_alter_configs(self, request: Request, now_ms: int) -> dict:
        req = request.body
        return self._alter_configs(req.resources, req.validate_only, incremental=True)

    def handle_alter_configs(self, request: Request, now_ms: int) -> dict:
        """The legacy AlterConfigs: each resource's configs are replaced by the request's."""
        req = request.body
        return self._alter_configs(req.resources, req.validate_only, incremental=False)

    def _alter_configs(self, resources: Any, validate_only: bool, *, incremental: bool) -> dict:
        """Kafka's two steps: the broker's (``ConfigAdminManager.preprocess``: duplicates,
        null values, resource types, BROKER resources validated against the dynamic
        broker configs), then the controller's (``ConfigurationControlManager``: topic
        configs validated as at creation, the topic must exist), and the result applied
        live and persisted unless ``validate_only``. One answer per resource, in order."""
        items = [_Resource(r) for r in resources]
        seen: dict[tuple[int, str], int] = {}
        for item in items:
            key = (item.req.resource_type, item.req.resource_name)
            seen[key] = seen.get(key, 0) + 1
        for item in items:
            if seen[(item.req.resource_type, item.req.resource_name)] > 1:
                item.fail(ErrorCode.invalid_request, "Each resource must appear at most once.")
            else:
                self._preprocess(item, incremental)
        for item in items:
            if item.failed:
                continue
            if item.req.resource_type == RESOURCE_TOPIC:
                self._alter_topic(item, incremental)
            if not item.failed and not validate_only:
                self._apply(item)
        return {"throttle_time": 0, "responses": [item.response() for item in items]}

    def _preprocess(self, item: _Resource, incremental: bool) -> None:
        r = item.req
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            item.fail(ErrorCode.invalid_request, "Error due to duplicate config keys")
            return
        nulls = [
            c.name
            for c in r.configs
            if c.value is None and not (incremental and c.config_operation == AlterOp.DELETE)
        ]
        if nulls:
            item.fail(ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}")
            return
        if r.resource_type == RESOURCE_BROKER:
            self._preprocess_broker(item, incremental)
        elif r.resource_type in (RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_CLIENT_METRICS) and (
            incremental or r.resource_type != RESOURCE_BROKER_LOGGER
        ):
            # Kafka 4.0 has these (log4j levels, KIP-848 group configs, KIP-714 client
            # metrics subscriptions); tidegate does not (docs/protocol.md)
            kind = {8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}[r.resource_type]
            item.fail(ErrorCode.invalid_request, f"tidegate does not support {kind} configs")
        elif r.resource_type != RESOURCE_TOPIC:
            item.fail(ErrorCode.invalid_request, f"Unknown resource type {r.resource_type}")

    def _preprocess_broker(self, item: _Resource, incremental: bool) -> None:
        """A BROKER resource: "" is the cluster default, else this node's id; the new set
        of dynamic configs must pass :meth:`BrokerConfig.validate_dynamic` (any failure
        is INVALID_REQUEST, as in Kafka: KAFKA-13609)."""
        name = item.req.resource_name
        if name:
            if not _is_int(name):
                item.fail(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}")
                return
            if int(name) != self.node_id:
                item.fail(
                    ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {self.node_id}, but received {name}",
                )
                return
        per_broker = bool(name)
        configs = item.req.configs
        try:
            if incremental:
                new = apply_config_ops(
                    self.config.dynamic_configs(per_broker),
                    [(c.name, c.config_operation, c.value) for c in configs],
                    BROKER_CONFIG,
                )
            else:
                new = {c.name: c.value for c in configs}
            self.config.validate_dynamic(new, per_broker)
        except AlterConfigError as exc:
            item.fail(ErrorCode(exc.error_code), str(exc))
            return
        except ConfigError as exc:
            item.fail(ErrorCode.invalid_request, str(exc))
            return
        item.new_configs = new

    def _alter_topic(self, item: _Resource, incremental: bool) -> None:
        """The controller's part for a TOPIC resource: the name, the new configs (whole
        set) validated as at creation, then that the topic exists."""
        r = item.req
        name = r.resource_name
        if not name:
            item.fail(ErrorCode.invalid_request, "Default topic resources are not allowed.")
            return
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            item.fail(ErrorCode.invalid_topic_exception, str(exc))
            return
        info = self.store.get(name)
        try:
            if incremental:
                new = apply_config_ops(
                    info.configs if info is not None else {},
                    [(c.name, c.config_operation, c.value) for c in r.configs],
                    TOPIC_CONFIG,
                )
            else:
                new = {c.name: c.value for c in r.configs}
            new = validate_topic_configs(new)
        except AlterConfigError as exc:
            item.fail(ErrorCode(exc.error_code), str(exc))
            return
        except ConfigError as exc:
            item.fail(ErrorCode.invalid_config, str(exc))
            return
        if info is None:
            item.fail(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
            return
        item.new_configs = new

    def _apply(self, item: _Resource) -> None:
        """Persist, then apply live: a topic's partitions take their new LogConfig; a
        dynamic broker config changes the broker's values and every topic's defaults."""
        r = item.req
        new = item.new_configs
        assert new is not None
        try:
            if r.resource_type == RESOURCE_TOPIC:
                if new != self.store.topics[r.resource_name].configs:
                    self.store.set_configs(r.resource_name, new)
                    self.logs.topic_config_updated(r.resource_name)
                    log.info("topic %s configs are now %s", r.resource_name, new)
            else:
                per_broker = bool(r.resource_name)
                default = self.config.dynamic_configs(False)
                broker = self.config.dynamic_configs(True)
                self.broker_configs.save(
                    default if per_broker else new, new if per_broker else broker
                )
                self.config.set_dynamic(new, per_broker)
                self.logs.broker_config_updated()
                log.info(
                    "dynamic broker configs (%s) are now %s",
                    f"broker {r.resource_name}" if per_broker else "cluster default",
                    {k: ("[hidden]" if k not in BROKER_CONFIG or BROKER_CONFIG[k].sensitive else v)
                     for k, v in new.items()},
                )  # fmt: skip
        except OSError as exc:
            log.error("could not persist the configs of %s: %s", r.resource_name, exc)
            item.fail(ErrorCode.kafka_storage_error, f"could not persist the configs: {exc}")

    # -- DescribeCluster --------------------------------------------------------------------------
    def handle_describe_cluster(self, request: Request, now_ms: int) -> dict:
        req = request.body
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
        host, port = self.endpoints.endpoint(request.context)
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
    def handle_describe_client_quotas(self, request: Request, now_ms: int) -> dict:
        req = request.body
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

    def handle_alter_client_quotas(self, request: Request, now_ms: int) -> dict:
        req = request.body
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


def _is_int(text: str) -> bool:
    """Whether Java's ``Integer.parseInt`` reads ``text`` (an optional sign, digits)."""
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and -(2**31) <= int(text) < 2**31
