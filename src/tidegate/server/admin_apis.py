"""Admin requests: topics, partitions, records, log dirs, configs, the cluster, the
quorum, client quotas.

CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs, AlterReplicaLogDirs,
DescribeTopicPartitions, DescribeProducers, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, DescribeCluster, DescribeQuorum, AddRaftVoter,
RemoveRaftVoter, UnregisterBroker, ListClientMetricsResources, DescribeClientQuotas and
AlterClientQuotas, for :class:`~tidegate.server.kafka_apis.KafkaApis` (which registers
them): on a one-node KRaft cluster this node is the only broker, the controller and the
one voter of the metadata quorum, so the controller's validation and Kafka's error codes
and messages are reproduced here as a single-broker Kafka cluster answers. Handlers take
the request and the time and return the response as nested dicts with Kafka's field
names (or PARKED, answered later through :attr:`AdminApis.respond`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.config import (
    TOPIC_CONFIG,
    BrokerConfig,
    ConfigError,
    describe_topic_configs,
    validate_topic_configs,
)
from tidegate.config.alter import AlterConfigError, AlterOp, apply_config_ops
from tidegate.config.broker import BROKER_CONFIG
from tidegate.coordinator.group.group_config import GroupConfigManager
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Request
from tidegate.protocol.messages.add_raft_voter import AddRaftVoterRequest
from tidegate.protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from tidegate.protocol.messages.alter_configs import AlterConfigsRequest
from tidegate.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
)
from tidegate.protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from tidegate.protocol.messages.create_partitions import CreatePartitionsRequest
from tidegate.protocol.messages.create_topics import CreateTopicsRequest
from tidegate.protocol.messages.delete_records import DeleteRecordsRequest
from tidegate.protocol.messages.delete_topics import DeleteTopicsRequest
from tidegate.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from tidegate.protocol.messages.describe_cluster import DescribeClusterRequest
from tidegate.protocol.messages.describe_configs import DescribeConfigsRequest
from tidegate.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from tidegate.protocol.messages.describe_producers import DescribeProducersRequest
from tidegate.protocol.messages.describe_quorum import DescribeQuorumRequest
from tidegate.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponsePartition,
)
from tidegate.protocol.messages.elect_leaders import ElectLeadersRequest
from tidegate.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tidegate.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest
from tidegate.protocol.messages.unregister_broker import UnregisterBrokerRequest
from tidegate.security.authorizer.acl import AUTHORIZED_OPERATIONS_OMITTED
from tidegate.server.endpoints import Endpoints
from tidegate.server.log_manager import PreparedPartitions
from tidegate.server.metadata import BrokerConfigStore, TopicInfo, TopicStore
from tidegate.server.quota.quota_factory import QuotaConfigError, QuotaManagers
from tidegate.server.replica_manager import DeleteRecordsResult, ReplicaManager
from tidegate.server.request_handler_helper import Respond
from tidegate.utils.topic import InvalidTopicError, is_internal_topic, validate_topic_name

if TYPE_CHECKING:
    from tidegate.metrics.prometheus import BrokerMetrics
    from tidegate.server.group_apis import GroupApis

log = logging.getLogger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
ZERO_UUID = uuid.UUID(int=0)
#: What a topic allows when no authorizer is configured: every operation Kafka defines
#: for topics (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
#: DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11) as AuthHelper.authorizedOperations' bit field.
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
#: Kafka's max.request.partition.size.limit default: DescribeTopicPartitions' largest page.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
#: The KRaft metadata log (DescribeQuorum's only partition) and this voter's leader epoch:
#: the one election a single voter wins. tidegate's metadata is a JSON document, not a
#: replicated log, so the quorum reports an empty log (end offset and high watermark 0).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
QUORUM_LEADER_EPOCH = 1
QUORUM_HIGH_WATERMARK = 0
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
#: Kafka's default messages (Errors.message()) for the errors answered with them.
#: Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: the most partitions one
#: CreateTopics request may ask for (and, as QuorumController.MAX_RECORDS_PER_USER_OP
#: bounds its records, one CreatePartitions request may add).
MAX_PARTITIONS_PER_BATCH = 10_000
#: the message of the PolicyViolationException Kafka's controller makes of an operation
#: whose records outgrow that bound (EventHandlerExceptionInfo)
EXCESSIVE_BATCH_MESSAGE = "Unable to perform excessively large batch operation."
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


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
        clock: Clock,
        *,
        respond: Respond,
        metrics: BrokerMetrics | None = None,
        group_configs: GroupConfigManager | None = None,
    ) -> None:
        self.config = config
        #: the GROUP resources' configs (None: GROUP resources refused)
        self.group_configs = group_configs
        self.clock = clock
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
        self.metrics = metrics
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond
        #: a CreateTopics/CreatePartitions whose file work is on a worker thread, and the
        #: ones waiting for it (the controller applies them one at a time)
        self._topic_work_busy = False
        self._topic_work_waiting: deque[tuple[Request, Callable[[], Any]]] = deque()

    def _topic_by_id(self, topic_id: uuid.UUID | None) -> TopicInfo | None:
        return None if topic_id is None else self.store.get_by_id(topic_id)

    # -- CreateTopics -----------------------------------------------------------------
    def handle_create_topics(self, request: Request) -> Any:
        """Kafka's controller: a request asking for more than MAX_PARTITIONS_PER_BATCH
        partitions in all fails whole (POLICY_VIOLATION); otherwise each topic is
        validated, then the file work of the valid ones (directories, logs, fsyncs) runs
        on a worker thread and the request is answered once it is done. Topic creations
        run one request at a time, as the controller's event queue does."""
        req = request.body_as(CreateTopicsRequest)
        total = _requested_partitions(req.topics, self.config.get("num.partitions"))
        if total > MAX_PARTITIONS_PER_BATCH:
            log.info("CreateTopics refused: %d partitions in one request (at most %d)",
                     total, MAX_PARTITIONS_PER_BATCH)
            message = "Excessively large number of partitions per request."
            return {"throttle_time": 0, "topics": [
                _create_failure(t.name, ErrorCode.policy_violation, message) for t in req.topics]}
        return self._in_turn(request, lambda: self._create_topics(request))

    def _create_topics(self, request: Request) -> Any:
        req = request.body_as(CreateTopicsRequest)
        seen: dict[str, int] = {}
        for t in req.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        results: list[dict | None] = []
        plans: list[tuple[int, str, int, dict[str, str]]] = []
        for t in req.topics:
            outcome = self._validate_creatable(t, seen[t.name] > 1)
            if isinstance(outcome, dict):
                results.append(outcome)
            elif req.validate_only:
                results.append(self._created(t.name, ZERO_UUID, *outcome))
            else:
                plans.append((len(results), t.name, *outcome))
                results.append(None)
        if not plans:
            return {"throttle_time": 0, "topics": results}
        self._topic_work_busy = True
        self.logs.creating.update(name for _index, name, _partitions, _configs in plans)

        def work() -> list[PreparedPartitions | OSError]:
            done: list[PreparedPartitions | OSError] = []
            for _index, name, partitions, configs in plans:
                try:
                    done.append(self.logs.prepare_topic(name, partitions, configs))
                except OSError as exc:
                    done.append(exc)
            return done

        def on_done(prepared: list[PreparedPartitions | OSError] | None, exc: BaseException | None) -> None:
            try:
                for n, (index, name, partitions, configs) in enumerate(plans):
                    outcome = exc if prepared is None else prepared[n]
                    if isinstance(outcome, PreparedPartitions):
                        try:
                            info = self.logs.commit_topic(outcome)
                        except OSError as error:
                            outcome = error
                        else:
                            log.info("created topic %s (%d partitions, configs %s)",
                                     name, partitions, configs)
                            results[index] = self._created(name, info.topic_id, partitions, configs)
                            continue
                    log.error("could not create topic %s: %s", name, outcome)
                    results[index] = _create_failure(
                        name, ErrorCode.kafka_storage_error, f"could not create the topic's logs: {outcome}")
                self.respond(request, {"throttle_time": 0, "topics": results})
            finally:
                self.logs.creating.difference_update(name for _index, name, _partitions, _configs in plans)
                self._topic_work_finished()

        self.replicas.scheduler.submit(work, on_done)
        return PARKED

    def _in_turn(self, request: Request, work: Callable[[], Any]) -> Any:
        """Run ``work`` (a topic creation or partition addition) now, or after the one in
        progress: the controller applies such requests one at a time."""
        if self._topic_work_busy:
            self._topic_work_waiting.append((request, work))
            return PARKED
        return work()

    def _topic_work_finished(self) -> None:
        self._topic_work_busy = False
        while self._topic_work_waiting and not self._topic_work_busy:
            request, work = self._topic_work_waiting.popleft()
            outcome = work()
            if outcome is not PARKED:
                self.respond(request, outcome)

    def _validate_creatable(self, t: Any, duplicate: bool) -> dict | tuple[int, dict[str, str]]:
        """A creatable topic's failure (a response entry), or its (partitions, configs)."""
        name = t.name

        def fail(code: ErrorCode, message: str) -> dict:
            return _create_failure(name, code, message)

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
        return partitions, configs

    def _created(self, name: str, topic_id: uuid.UUID, partitions: int, configs: dict[str, str]) -> dict:
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
    def handle_delete_topics(self, request: Request) -> dict:
        req = request.body_as(DeleteTopicsRequest)
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if request.header.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(n, None) for n in req.topic_names]
        if not self.config.get("delete.topic.enable"):
            # Kafka's handleDeleteTopicsRequest: every topic gets the error, before any lookup
            code = ErrorCode.topic_deletion_disabled if request.header.api_version >= 3 else ErrorCode.invalid_request
            return {"throttle_time": 0, "responses": [
                {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": code,
                 "error_message": "Topic deletion is disabled."}
                for name, topic_id in wanted]}  # fmt: skip
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
            self.groups.on_topic_deleted(info.name, info.topic_id)
            log.info("deleted topic %s", info.name)
            responses.append(
                {"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.none}
            )
        return {"throttle_time": 0, "responses": responses}


    # -- CreatePartitions ------------------------------------------------------------------
    def handle_create_partitions(self, request: Request) -> Any:
        return self._in_turn(request, lambda: self._create_partitions(request))

    def _create_partitions(self, request: Request) -> Any:
        """Validated on the loop; the new partitions' file work runs on a worker thread.
        As the controller's bounded record list, the new partitions of one request may
        number at most MAX_PARTITIONS_PER_BATCH: the topic that would pass it fails."""
        req = request.body_as(CreatePartitionsRequest)
        results: list[dict] = []
        plans: list[tuple[dict, str, int, int]] = []
        budget = MAX_PARTITIONS_PER_BATCH
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
            added = t.count - info.partitions
            if added > budget:
                log.info("CreatePartitions refused for %s: %d new partitions (at most %d per request)",
                         t.name, added, MAX_PARTITIONS_PER_BATCH)
                result["error_code"] = ErrorCode.policy_violation
                result["error_message"] = EXCESSIVE_BATCH_MESSAGE
                continue
            budget -= added
            if not req.validate_only:
                plans.append((result, t.name, info.partitions, t.count))
        body = {"throttle_time": 0, "results": results}
        if not plans:
            return body
        self._topic_work_busy = True

        def work() -> list[PreparedPartitions | OSError]:
            done: list[PreparedPartitions | OSError] = []
            for _result, name, _old, count in plans:
                try:
                    done.append(self.logs.prepare_partitions(name, count))
                except OSError as exc:
                    done.append(exc)
            return done

        def on_done(prepared: list[PreparedPartitions | OSError] | None, exc: BaseException | None) -> None:
            try:
                for n, (result, name, _old, count) in enumerate(plans):
                    outcome = exc if prepared is None else prepared[n]
                    if isinstance(outcome, PreparedPartitions):
                        try:
                            self.logs.commit_partitions(outcome)
                        except OSError as error:
                            outcome = error
                        else:
                            log.info("topic %s now has %d partitions", name, count)
                            continue
                    log.error("could not add partitions to %s: %s", name, outcome)
                    result["error_code"] = ErrorCode.kafka_storage_error
                    result["error_message"] = f"could not create the new partitions' logs: {outcome}"
                self.respond(request, body)
            finally:
                self._topic_work_finished()

        self.replicas.scheduler.submit(work, on_done)
        return PARKED

    # -- DescribeConfigs ----------------------------------------------------------------------
    def handle_describe_configs(self, request: Request) -> dict:
        req = request.body_as(DescribeConfigsRequest)
        include_synonyms = getattr(req, "include_synonyms", False)
        include_doc = getattr(req, "include_documentation", False)
        results = []
        for r in req.resources:
            result: dict[str, Any] = {
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
            elif r.resource_type == RESOURCE_GROUP and self.group_configs is not None:
                if not r.resource_name:
                    result["error_code"] = ErrorCode.invalid_request
                    result["error_message"] = "Group name must not be empty."
                    continue
                entries = self.group_configs.describe_entries(r.resource_name)
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
    def handle_incremental_alter_configs(self, request: Request) -> dict:
        req = request.body_as(IncrementalAlterConfigsRequest)
        return self._alter_configs(req.resources, req.validate_only, incremental=True)

    def handle_alter_configs(self, request: Request) -> dict:
        """The legacy AlterConfigs: each resource's configs are replaced by the request's."""
        req = request.body_as(AlterConfigsRequest)
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
        elif r.resource_type == RESOURCE_GROUP and self.group_configs is not None:
            self._preprocess_group(item, self.group_configs, incremental)
        elif r.resource_type in (RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_CLIENT_METRICS) and (
            incremental or r.resource_type != RESOURCE_BROKER_LOGGER
        ):
            # Kafka 4.0 has these (log4j levels, KIP-848 group configs, KIP-714 client
            # metrics subscriptions); tidegate does not (docs/protocol.md)
            kind = {8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}[r.resource_type]
            item.fail(ErrorCode.invalid_request, f"tidegate does not support {kind} configs")
        elif r.resource_type != RESOURCE_TOPIC:
            item.fail(ErrorCode.invalid_request, f"Unknown resource type {r.resource_type}")

    def _preprocess_group(self, item: _Resource, group_configs: GroupConfigManager, incremental: bool) -> None:
        """A GROUP resource (reference 1.15): the group need not exist; an empty name is
        INVALID_REQUEST, an unknown key or a value the merged configs refuse
        INVALID_CONFIG."""
        name = item.req.resource_name
        if not name:
            item.fail(ErrorCode.invalid_request, "Group name must not be empty.")
            return
        configs = item.req.configs
        try:
            changes = group_configs.changes_of(
                name, [(c.name, c.config_operation, c.value) for c in configs] if incremental else None,
                None if incremental else {c.name: c.value for c in configs},
            )  # fmt: skip
            item.new_configs = group_configs.validate(name, changes)
        except ConfigError as exc:
            item.fail(ErrorCode.invalid_config, str(exc))
        except ValueError as exc:
            item.fail(ErrorCode.invalid_request, str(exc))

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
            if r.resource_type == RESOURCE_GROUP and self.group_configs is not None:
                self.group_configs.alter(r.resource_name, self.group_configs.changes_of(r.resource_name, None, new))
                log.info("group %s configs are now %s", r.resource_name, new)
            elif r.resource_type == RESOURCE_TOPIC:
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
    def handle_describe_cluster(self, request: Request) -> dict:
        req = request.body_as(DescribeClusterRequest)
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
    def handle_describe_client_quotas(self, request: Request) -> dict:
        req = request.body_as(DescribeClientQuotasRequest)
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

    def handle_alter_client_quotas(self, request: Request) -> dict:
        req = request.body_as(AlterClientQuotasRequest)
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



    # -- DeleteRecords ------------------------------------------------------------------------
    def handle_delete_records(self, request: Request) -> Any:
        """Kafka's DeleteRecords: answered once the new log start offsets are durable
        (the checkpoint runs on a worker thread); see ReplicaManager.delete_records."""
        offsets: dict[tuple[str, int], int] = {}
        for t in request.body_as(DeleteRecordsRequest).topics:
            for p in t.partitions:
                offsets[(t.name, p.partition_index)] = p.offset  # named twice: the last wins

        def respond(results: dict[tuple[str, int], DeleteRecordsResult]) -> None:
            topics: dict[str, list[dict]] = {}
            for (topic, partition), r in results.items():
                if r.error is not ErrorCode.none:
                    log.debug("DeleteRecords on %s-%d: %s %s", topic, partition, r.error.name,
                              r.error_message or "")
                topics.setdefault(topic, []).append(
                    {"partition_index": partition, "low_watermark": r.low_watermark, "error_code": r.error}
                )
            self.respond(
                request,
                {
                    "throttle_time": 0,
                    "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                },
            )

        self.replicas.delete_records(offsets, respond)
        return PARKED

    # -- DescribeLogDirs / AlterReplicaLogDirs ---------------------------------------------------
    @property
    def log_dir(self) -> str:
        """The one log directory, as Kafka names it (``File.getAbsolutePath``)."""
        return os.path.abspath(self.logs.root)

    def handle_describe_log_dirs(self, request: Request) -> dict:
        """One log directory: each (asked) partition's size, offset lag 0 (the log end
        offset is the high watermark), the file system's total and usable bytes."""
        req = request.body_as(DescribeLogDirsRequest)
        wanted = (
            None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        )
        topics: dict[str, list[dict]] = {}
        for (topic, partition), plog in sorted(self.logs.logs.items()):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "partition_size": plog.size_bytes,
                    "offset_lag": 0,  # max(HW - LEO, 0): this node is the leader
                    "is_future_key": False,
                }
            )
        result: dict[str, Any] = {"error_code": ErrorCode.none, "log_dir": self.log_dir}
        try:
            if self.logs.failure_channel.offline:
                # Kafka's describeLogDirs: an offline dir answers KAFKA_STORAGE_ERROR, no topics
                raise OSError(f"log directory {self.log_dir} is offline")
            st = os.statvfs(self.logs.root)
        except OSError as exc:
            log.warning("unable to describe log dir %s: %s", self.log_dir, exc)
            result["error_code"] = ErrorCode.kafka_storage_error
            result["topics"] = []
        else:
            result["topics"] = [{"name": name, "partitions": parts} for name, parts in topics.items()]
            result["total_bytes"] = st.f_blocks * st.f_frsize
            result["usable_bytes"] = st.f_bavail * st.f_frsize
        return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}

    def handle_alter_replica_log_dirs(self, request: Request) -> dict:
        """Kafka's ``ReplicaManager.alterReplicaLogDirs`` with one log directory: moving a
        replica to where it already is succeeds and does nothing; any other path is
        LOG_DIR_NOT_FOUND."""
        results: dict[str, list[dict]] = {}
        for d in request.body_as(AlterReplicaLogDirsRequest).dirs:
            for t in d.topics:
                for p in t.partitions:
                    results.setdefault(t.name, []).append(
                        {"partition_index": p, "error_code": self._alter_replica_log_dir(t.name, p, d.path)}
                    )
        return {
            "throttle_time": 0,
            "results": [{"topic_name": name, "partitions": parts} for name, parts in results.items()],
        }

    def _alter_replica_log_dir(self, topic: str, partition: int, path: str) -> ErrorCode:
        # The future replica's directory name: <topic>-<partition>.<32 hex>-future (KAFKA-4893)
        if len(f"{topic}-{partition}") + 1 + 32 + len("-future") > 255:
            return ErrorCode.invalid_topic_exception
        if path != self.log_dir:
            log.info("AlterReplicaLogDirs for %s-%d: log dir %s is not found in the config",
                     topic, partition, path)
            return ErrorCode.log_dir_not_found
        if self.replicas.get_log(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.none  # already there

    # -- DescribeTopicPartitions (KIP-966) -------------------------------------------------------
    def handle_describe_topic_partitions(self, request: Request) -> dict:
        """Kafka's DescribeTopicPartitionsRequestHandler: topics in name order from the
        cursor on, at most ``response_partition_limit`` partitions (capped at 2000); when
        the budget runs out ``next_cursor`` names where to continue."""
        req = request.body_as(DescribeTopicPartitionsRequest)
        cursor = req.cursor
        cursor_topic = cursor.topic_name if cursor is not None else ""
        fetch_all = not req.topics
        if fetch_all:
            names = {n for n in self.store.topics if n >= cursor_topic}
        else:
            names = {t.name for t in req.topics if t.name >= cursor_topic}
            if cursor is not None and cursor.topic_name not in names:
                return self._describe_topic_partitions_error(
                    req, "DescribeTopicPartitionsRequest topic list should contain the cursor "
                    f"topic: {cursor.topic_name}"
                )
        if cursor is not None and cursor.partition_index < 0:
            return self._describe_topic_partitions_error(
                req, f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}"
            )
        remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, req.response_partition_limit), 1)
        topics: list[dict] = []
        next_cursor = None
        for name in sorted(names):
            if remaining == 0:
                # the previous topic is complete: continue from this one
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            info = self.store.get(name)
            if info is None:
                if not fetch_all:
                    try:
                        validate_topic_name(name)
                        error = ErrorCode.unknown_topic_or_partition
                    except InvalidTopicError:
                        error = ErrorCode.invalid_topic_exception
                    topics.append(
                        {
                            "error_code": error,
                            "name": name,
                            "topic_id": ZERO_UUID,
                            "is_internal": is_internal_topic(name),
                            "partitions": [],
                            "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS,
                        }
                    )
                continue
            start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
            upper = min(info.partitions, start + remaining)
            partitions = self.replicas.partition_states(info, DescribeTopicPartitionsResponsePartition)[start:upper]
            for state in partitions:  # KIP-966: no ELR with one replica
                state.eligible_leader_replicas = []
                state.last_known_elr = []
            topics.append(
                {
                    "error_code": ErrorCode.none,
                    "name": name,
                    "topic_id": info.topic_id,
                    "is_internal": is_internal_topic(name),
                    "partitions": partitions,
                    "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS,
                }
            )
            if upper < info.partitions:
                next_cursor = {"topic_name": name, "partition_index": upper}
                break
            remaining -= len(partitions)
        return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}

    @staticmethod
    def _describe_topic_partitions_error(req: Any, message: str) -> dict:
        """Kafka's answer to an InvalidRequestException: every asked topic with
        INVALID_REQUEST (the message goes to the log: the response has no field for it)."""
        log.info("invalid DescribeTopicPartitions request: %s", message)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "error_code": ErrorCode.invalid_request,
                    "name": t.name,
                    "topic_id": ZERO_UUID,
                    "is_internal": False,
                    "partitions": [],
                }
                for t in req.topics
            ],
            "next_cursor": None,
        }

    # -- DescribeProducers ----------------------------------------------------------------------
    def handle_describe_producers(self, request: Request) -> dict:
        """The idempotent producers each partition tracks (Kafka's
        ``UnifiedLog.activeProducers``): no transactions yet, so no coordinator epoch and
        no open transaction."""
        topics = []
        for t in request.body_as(DescribeProducersRequest).topics:
            topic_error: tuple[ErrorCode, str] | None = None
            try:
                validate_topic_name(t.name)
            except InvalidTopicError as exc:
                topic_error = (ErrorCode.invalid_topic_exception, str(exc))
            if topic_error is None and self.store.get(t.name) is None:
                topic_error = (ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)
            parts = []
            for index in t.partition_indexes:
                part: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none,
                                        "error_message": None, "active_producers": []}
                parts.append(part)
                plog = self.replicas.get_log(t.name, index) if topic_error is None else None
                if topic_error is not None:
                    part["error_code"], part["error_message"] = topic_error
                elif plog is None:
                    part["error_code"] = ErrorCode.unknown_topic_or_partition
                else:
                    part["active_producers"] = [
                        {
                            "producer_id": e.producer_id,
                            "producer_epoch": e.producer_epoch,
                            "last_sequence": e.last_seq,
                            "last_timestamp": e.last_timestamp,
                            "coordinator_epoch": e.coordinator_epoch,
                            "current_txn_start_offset": e.current_txn_first_offset,
                        }
                        for _pid, e in sorted(plog.producer_state.producers.items())
                    ]
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    # -- ElectLeaders, partition reassignments ---------------------------------------------------
    def handle_elect_leaders(self, request: Request) -> dict:
        """Kafka's controller (``ReplicationControlManager.electLeaders``) on one broker:
        every partition already has its preferred leader, this node, so each asked
        partition is ELECTION_NOT_NEEDED; asked for all partitions (null), every topic is
        listed with none (Kafka leaves out the partitions that need no election)."""
        req = request.body_as(ElectLeadersRequest)
        election_type = getattr(req, "election_type", ELECTION_PREFERRED)
        if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            message = f"Unknown election type {election_type}"
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.invalid_request,
                "replica_election_results": [
                    {
                        "topic": t.topic,
                        "partition_result": [
                            {"partition_id": p, "error_code": ErrorCode.invalid_request,
                             "error_message": message}
                            for p in t.partitions
                        ],
                    }
                    for t in req.topic_partitions or ()
                ],
            }
        results: list[dict[str, Any]] = []
        if req.topic_partitions is None:
            results = [{"topic": name, "partition_result": []} for name in sorted(self.store.topics)]
        else:
            for t in req.topic_partitions:
                info = self.store.get(t.topic)
                parts = []
                for p in t.partitions:
                    if info is None:
                        code, message = ErrorCode.unknown_topic_or_partition, f"No such topic as {t.topic}"
                    elif not 0 <= p < info.partitions:
                        code = ErrorCode.unknown_topic_or_partition
                        message = f"No such partition as {t.topic}-{p}"
                    else:
                        # preferred: this node already leads; unclean: there is a leader
                        code, message = ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
                    parts.append({"partition_id": p, "error_code": code, "error_message": message})
                results.append({"topic": t.topic, "partition_result": parts})
        return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": results}

    def handle_alter_partition_reassignments(self, request: Request) -> dict:
        """Kafka's controller (``alterPartitionReassignment``): the only possible target is
        this node, where every replica already is (no change, NONE); other brokers are not
        registered; nothing is ever in progress to cancel."""
        responses = []
        for t in request.body_as(AlterPartitionReassignmentsRequest).topics:
            info = self.store.get(t.name)
            parts = []
            for p in t.partitions:
                code, message = self._reassign(t.name, info, p.partition_index, p.replicas)
                if code is not ErrorCode.none:
                    log.info("Unable to alter partition reassignment for %s:%d: %s", t.name,
                             p.partition_index, message)
                parts.append({"partition_index": p.partition_index, "error_code": code,
                              "error_message": message})
            responses.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                "responses": responses}

    def _reassign(
        self, topic: str, info: TopicInfo | None, partition: int, replicas: Any
    ) -> tuple[ErrorCode, str | None]:
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
        if not 0 <= partition < info.partitions:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}:{partition}."
        if replicas is None:
            # cancel: Kafka's NoReassignmentInProgressException carries the default message,
            # which ApiError.fromThrowable leaves out
            return ErrorCode.no_reassignment_in_progress, None
        invalid = ErrorCode.invalid_replica_assignment
        if not replicas:
            return invalid, "The manual partition assignment includes an empty replica list."
        previous = None
        for broker in sorted(replicas):
            if broker != self.node_id:
                return invalid, (
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered."
                )
            if broker == previous:
                return invalid, (
                    f"The manual partition assignment includes the broker {previous} more "
                    "than once."
                )
            previous = broker
        return ErrorCode.none, None  # [this node]: the current assignment, nothing to change

    def handle_list_partition_reassignments(self, request: Request) -> dict:
        """No reassignment is ever in progress on one broker: nothing to list."""
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": []}

    # -- the KRaft quorum: DescribeQuorum, AddRaftVoter, RemoveRaftVoter, UnregisterBroker --------
    def handle_describe_quorum(self, request: Request) -> dict:
        """A quorum of one voter, this node, leading the metadata log (Kafka's
        ``KafkaRaftClient.handleDescribeQuorumRequest``). The voter set is static
        (kraft.version 0): no directory id, as with ``controller.quorum.voters``."""
        topics = request.body_as(DescribeQuorumRequest).topics
        if not (
            len(topics) == 1
            and topics[0].topic_name == CLUSTER_METADATA_TOPIC
            and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0
        ):
            return {
                "error_code": ErrorCode.none,
                "error_message": None,
                "topics": [
                    {
                        "topic_name": t.topic_name,
                        "partitions": [
                            {"partition_index": p.partition_index,
                             "error_code": ErrorCode.unknown_topic_or_partition,
                             "error_message": UNKNOWN_TOPIC_OR_PARTITION_MESSAGE,
                             "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                             "current_voters": [], "observers": []}
                            for p in t.partitions
                        ],
                    }
                    for t in topics
                ],
                "nodes": [],
            }
        now_ms = self.clock.wall_milliseconds()
        voter = {
            "replica_id": self.node_id,
            "replica_directory_id": ZERO_UUID,
            "log_end_offset": QUORUM_HIGH_WATERMARK,
            # the leader is always caught up (Kafka reports the current time for itself)
            "last_fetch_timestamp": now_ms,
            "last_caught_up_timestamp": now_ms,
        }
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "topics": [
                {
                    "topic_name": CLUSTER_METADATA_TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": ErrorCode.none,
                            "error_message": None,
                            "leader_id": self.node_id,
                            "leader_epoch": QUORUM_LEADER_EPOCH,
                            "high_watermark": QUORUM_HIGH_WATERMARK,
                            "current_voters": [voter],
                            "observers": [],
                        }
                    ],
                }
            ],
            "nodes": [
                {
                    "node_id": self.node_id,
                    "listeners": [
                        {"name": name, "host": host, "port": port}
                        for name, host, port in self.endpoints.listeners()
                    ],
                }
            ],
        }

    def handle_add_raft_voter(self, request: Request) -> dict:
        return self._raft_voter_change(request.body_as(AddRaftVoterRequest), "adding", "Add")

    def handle_remove_raft_voter(self, request: Request) -> dict:
        return self._raft_voter_change(request.body_as(RemoveRaftVoterRequest), "removing", "Remove")

    def _raft_voter_change(self, req: Any, doing: str, verb: str) -> dict:
        """Kafka's AddVoterHandler/RemoveVoterHandler on a static voter set (kraft.version
        0): the cluster id must match, the voter must name a directory, and then the
        change is refused with UNSUPPORTED_VERSION as Kafka refuses it."""
        if req.cluster_id is not None and req.cluster_id != self.cluster_id:
            code = ErrorCode.inconsistent_cluster_id
            message = f'The given id "{req.cluster_id}" doesn\'t match the cluster id "{self.cluster_id}"'
        elif req.voter_id < 0 or req.voter_directory_id in (None, ZERO_UUID):
            code = ErrorCode.invalid_request
            message = f"{verb} voter request didn't include a valid voter"
        else:
            code = ErrorCode.unsupported_version
            message = f"Cluster doesn't support {doing} voter because the kraft.version feature is 0"
        return {"throttle_time": 0, "error_code": code, "error_message": message}

    def handle_unregister_broker(self, request: Request) -> dict:
        """Kafka's ``ReplicationControlManager.unregisterBroker``: only this node is
        registered. Unregistering it is accepted and changes nothing: it is the running
        broker and the controller at once, registered again by being up."""
        broker_id = request.body_as(UnregisterBrokerRequest).broker_id
        if broker_id != self.node_id:
            return {"throttle_time": 0, "error_code": ErrorCode.broker_id_not_registered,
                    "error_message": f"Broker ID {broker_id} is not currently registered"}
        log.info("UnregisterBroker for this node (%d): nothing to do on a single node", broker_id)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}

    # -- ListClientMetricsResources (KIP-714) ----------------------------------------------------
    def handle_list_client_metrics_resources(self, request: Request) -> dict:
        """No client-metrics subscriptions exist (no telemetry receiver): an empty list."""
        return {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": []}


def _is_int(text: str) -> bool:
    """Whether Java's ``Integer.parseInt`` reads ``text`` (an optional sign, digits)."""
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and -(2**31) <= int(text) < 2**31


def _requested_partitions(topics: Any, default_partitions: int) -> int:
    """Kafka's ``validateTotalNumberOfPartitions``: an upper bound of the partitions a
    CreateTopics request would create."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def _create_failure(name: str, code: ErrorCode, message: str | None) -> dict:
    return {
        "name": name,
        "topic_id": ZERO_UUID,
        "error_code": code,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
