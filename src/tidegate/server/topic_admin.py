"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and
DescribeTopicPartitions, for :class:`~tidegate.server.kafka_apis.KafkaApis`.

Kafka splits this between the broker (``KafkaApis``, ``DescribeTopicPartitionsRequestHandler``,
``ReplicaManager.deleteRecords``) and the controller (``ControllerApis`` and
``ReplicationControlManager``: validation, the error codes and messages). On a one-node
KRaft cluster this node is both, so the controller's checks run here, as a
single-broker Kafka cluster answers. Topic creations and partition additions run one
request at a time, as the controller's event queue applies them; their file work runs on
a worker thread and the request is answered through ``respond`` when it is done.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from tidegate.config import (
    BrokerConfig,
    ConfigError,
    describe_topic_configs,
    validate_topic_configs,
)
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Parked, Request
from tidegate.protocol.messages._base import ZERO_UUID, Message
from tidegate.protocol.messages.create_partitions import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from tidegate.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from tidegate.protocol.messages.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from tidegate.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from tidegate.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from tidegate.server.log_manager import PreparedPartitions
from tidegate.server.metadata import TopicInfo, TopicStore
from tidegate.server.replica_manager import DeleteRecordsResult, ReplicaManager
from tidegate.server.request_handler_helper import Respond
from tidegate.utils.topic import InvalidTopicError, is_internal_topic, validate_topic_name

if TYPE_CHECKING:
    from tidegate.metrics.prometheus import BrokerMetrics
    from tidegate.server.group_apis import GroupApis

log = logging.getLogger(__name__)

#: What a topic allows when no authorizer is configured: every operation Kafka defines
#: for topics (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
#: DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11) as AuthHelper.authorizedOperations' bit field.
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
#: Kafka's max.request.partition.size.limit default: DescribeTopicPartitions' largest page.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
#: Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: the most partitions one
#: CreateTopics request may ask for (and, as QuorumController.MAX_RECORDS_PER_USER_OP
#: bounds its records, one CreatePartitions request may add).
MAX_PARTITIONS_PER_BATCH = 10_000
#: the message of the PolicyViolationException Kafka's controller makes of an operation
#: whose records outgrow that bound (EventHandlerExceptionInfo)
EXCESSIVE_BATCH_MESSAGE = "Unable to perform excessively large batch operation."

#: the response of a CreateTopics or CreatePartitions run in its turn
R = TypeVar("R", bound=Message)


class TopicAdminApis:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        store: TopicStore,
        groups: GroupApis,
        *,
        respond: Respond,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.logs = replicas.logs
        self.store = store
        #: told of deleted topics (their committed offsets go)
        self.groups = groups
        #: the broker's metrics when they are on (deleted topics leave them)
        self.metrics = metrics
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond
        #: a CreateTopics/CreatePartitions whose file work is on a worker thread, and the
        #: ones waiting for it (the controller applies them one at a time)
        self._topic_work_busy = False
        self._topic_work_waiting: deque[tuple[Request, Callable[[], Message | Parked]]] = deque()

    # -- one topic change at a time -------------------------------------------------------
    def _in_turn(self, request: Request, work: Callable[[], R | Parked]) -> R | Parked:
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
            if not isinstance(outcome, Parked):
                self.respond(request, outcome)

    # -- CreateTopics -----------------------------------------------------------------
    def handle_create_topics(self, request: Request) -> CreateTopicsResponse | Parked:
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
            return CreateTopicsResponse(
                topics=[_create_failure(t.name, ErrorCode.policy_violation, message) for t in req.topics]
            )
        return self._in_turn(request, lambda: self._create_topics(request))

    def _create_topics(self, request: Request) -> CreateTopicsResponse | Parked:
        req = request.body_as(CreateTopicsRequest)
        seen: dict[str, int] = {}
        for t in req.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        results: list[CreatableTopicResult] = []
        plans: list[tuple[int, str, int, dict[str, str]]] = []
        for t in req.topics:
            outcome = self._validate_creatable(t, seen[t.name] > 1)
            if isinstance(outcome, CreatableTopicResult):
                results.append(outcome)
            elif req.validate_only:
                results.append(self._created(t.name, ZERO_UUID, *outcome))
            else:
                plans.append((len(results), t.name, *outcome))
                results.append(CreatableTopicResult(name=t.name))  # replaced when created
        response = CreateTopicsResponse(topics=results)
        if not plans:
            return response
        self._topic_work_busy = True
        self.logs.creating.update(name for _index, name, _partitions, _configs in plans)

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
                self.respond(request, response)
            finally:
                self.logs.creating.difference_update(name for _index, name, _partitions, _configs in plans)
                self._topic_work_finished()

        work = [functools.partial(self.logs.prepare_topic, name, partitions, configs)
                for _index, name, partitions, configs in plans]  # fmt: skip
        self.replicas.scheduler.submit(functools.partial(_prepare_each, work), on_done)
        return PARKED

    def _validate_creatable(
        self, t: CreatableTopic, duplicate: bool
    ) -> CreatableTopicResult | tuple[int, dict[str, str]]:
        """A creatable topic's failure (its response entry), or its (partitions, configs)."""
        name = t.name

        def fail(code: ErrorCode, message: str) -> CreatableTopicResult:
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
            configs = validate_topic_configs({c.name: c.value for c in t.configs})
        except ConfigError as exc:
            return fail(ErrorCode.invalid_config, str(exc))
        return partitions, configs

    def _created(
        self, name: str, topic_id: uuid.UUID, partitions: int, configs: dict[str, str]
    ) -> CreatableTopicResult:
        described = [
            CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                  config_source=e.source, is_sensitive=e.is_sensitive)
            for e in describe_topic_configs(self.config, configs)
        ]  # fmt: skip
        return CreatableTopicResult(
            name=name, topic_id=topic_id, num_partitions=partitions, replication_factor=1, configs=described
        )

    # -- DeleteTopics -------------------------------------------------------------------
    def handle_delete_topics(self, request: Request) -> DeleteTopicsResponse:
        req = request.body_as(DeleteTopicsRequest)
        wanted: list[tuple[str | None, uuid.UUID]]
        if request.header.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(n, ZERO_UUID) for n in req.topic_names]
        if not self.config.get("delete.topic.enable"):
            # Kafka's handleDeleteTopicsRequest: every topic gets the error, before any lookup
            code = ErrorCode.topic_deletion_disabled if request.header.api_version >= 3 else ErrorCode.invalid_request
            return DeleteTopicsResponse(responses=[
                DeletableTopicResult(name=name, topic_id=topic_id, error_code=code,
                                     error_message="Topic deletion is disabled.")
                for name, topic_id in wanted])  # fmt: skip
        return DeleteTopicsResponse(responses=[self._delete_topic(name, topic_id) for name, topic_id in wanted])

    def _delete_topic(self, name: str | None, topic_id: uuid.UUID) -> DeletableTopicResult:
        """One topic of a DeleteTopics, named by name or (v6+, ``name`` None) by id."""
        if name is None:
            info = self.store.get_by_id(topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            info = self.store.get(name)
            missing = ErrorCode.unknown_topic_or_partition
        if info is None:
            return DeletableTopicResult(name=name, topic_id=topic_id, error_code=missing)
        if is_internal_topic(info.name):
            return DeletableTopicResult(name=info.name, topic_id=info.topic_id, error_code=ErrorCode.invalid_request,
                                        error_message=f"cannot delete the internal topic {info.name}")
        self.logs.delete_topic(info.name)
        if self.metrics is not None:
            self.metrics.topics.remove(info.name)
        self.replicas.partitions_removed((info.name, p) for p in range(info.partitions))
        self.groups.on_topic_deleted(info.name, info.topic_id)
        log.info("deleted topic %s", info.name)
        return DeletableTopicResult(name=info.name, topic_id=info.topic_id)

    # -- CreatePartitions ------------------------------------------------------------------
    def handle_create_partitions(self, request: Request) -> CreatePartitionsResponse | Parked:
        return self._in_turn(request, lambda: self._create_partitions(request))

    def _create_partitions(self, request: Request) -> CreatePartitionsResponse | Parked:
        """Validated on the loop; the new partitions' file work runs on a worker thread.
        As the controller's bounded record list, the new partitions of one request may
        number at most MAX_PARTITIONS_PER_BATCH: the topic that would pass it fails."""
        req = request.body_as(CreatePartitionsRequest)
        response = CreatePartitionsResponse()
        plans: list[tuple[CreatePartitionsTopicResult, str, int]] = []
        budget = MAX_PARTITIONS_PER_BATCH
        for t in req.topics:
            result = CreatePartitionsTopicResult(name=t.name)
            response.results.append(result)
            info = self.store.get(t.name)
            added = t.count - info.partitions if info is not None else 0
            error = self._partitions_error(t.name, info, t.count, t.assignments, added > budget)
            if error is not None:
                result.error_code, result.error_message = error
                continue
            budget -= added
            if not req.validate_only:
                plans.append((result, t.name, t.count))
        if not plans:
            return response
        self._topic_work_busy = True

        def on_done(prepared: list[PreparedPartitions | OSError] | None, exc: BaseException | None) -> None:
            try:
                for n, (result, name, count) in enumerate(plans):
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
                    result.error_code = ErrorCode.kafka_storage_error
                    result.error_message = f"could not create the new partitions' logs: {outcome}"
                self.respond(request, response)
            finally:
                self._topic_work_finished()

        work = [functools.partial(self.logs.prepare_partitions, name, count) for _result, name, count in plans]
        self.replicas.scheduler.submit(functools.partial(_prepare_each, work), on_done)
        return PARKED

    def _partitions_error(
        self, name: str, info: TopicInfo | None, count: int,
        assignments: list[CreatePartitionsAssignment] | None, over_budget: bool,
    ) -> tuple[ErrorCode, str] | None:
        """Why a topic of a CreatePartitions cannot grow to ``count`` partitions, if it cannot."""
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
        if is_internal_topic(name):
            return ErrorCode.invalid_request, f"cannot add partitions to the internal topic {name}"
        if count <= info.partitions:
            return ErrorCode.invalid_partitions, (
                f"Topic currently has {info.partitions} partitions, which is higher than or "
                f"equal to the requested {count}."
            )
        if assignments and any(tuple(a.broker_ids) != (self.node_id,) for a in assignments):
            return ErrorCode.invalid_replica_assignment, f"assignments must name only broker {self.node_id}"
        if over_budget:
            log.info("CreatePartitions refused for %s: %d new partitions (at most %d per request)",
                     name, count - info.partitions, MAX_PARTITIONS_PER_BATCH)
            return ErrorCode.policy_violation, EXCESSIVE_BATCH_MESSAGE
        return None

    # -- DeleteRecords ------------------------------------------------------------------------
    def handle_delete_records(self, request: Request) -> Parked:
        """Kafka's DeleteRecords: answered once the new log start offsets are durable
        (the checkpoint runs on a worker thread); see ReplicaManager.delete_records."""
        offsets: dict[tuple[str, int], int] = {}
        for t in request.body_as(DeleteRecordsRequest).topics:
            for p in t.partitions:
                offsets[(t.name, p.partition_index)] = p.offset  # named twice: the last wins

        def respond(results: dict[tuple[str, int], DeleteRecordsResult]) -> None:
            topics: dict[str, list[DeleteRecordsPartitionResult]] = {}
            for (topic, partition), r in results.items():
                if r.error is not ErrorCode.none:
                    log.debug("DeleteRecords on %s-%d: %s %s", topic, partition, r.error.name,
                              r.error_message or "")
                topics.setdefault(topic, []).append(DeleteRecordsPartitionResult(
                    partition_index=partition, low_watermark=r.low_watermark, error_code=r.error))  # fmt: skip
            self.respond(request, DeleteRecordsResponse(topics=[
                DeleteRecordsTopicResult(name=name, partitions=parts) for name, parts in topics.items()]))  # fmt: skip

        self.replicas.delete_records(offsets, respond)
        return PARKED

    # -- DescribeTopicPartitions (KIP-966) -------------------------------------------------------
    def handle_describe_topic_partitions(self, request: Request) -> DescribeTopicPartitionsResponse:
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
                return _describe_topic_partitions_error(
                    req, "DescribeTopicPartitionsRequest topic list should contain the cursor "
                    f"topic: {cursor.topic_name}"
                )
        if cursor is not None and cursor.partition_index < 0:
            return _describe_topic_partitions_error(
                req, f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}"
            )
        remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, req.response_partition_limit), 1)
        response = DescribeTopicPartitionsResponse()
        for name in sorted(names):
            if remaining == 0:
                # the previous topic is complete: continue from this one
                response.next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name)
                break
            info = self.store.get(name)
            if info is None:
                if not fetch_all:
                    response.topics.append(_missing_topic(name))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
            upper = min(info.partitions, start + remaining)
            partitions = self.replicas.partition_states(info, DescribeTopicPartitionsResponsePartition)[start:upper]
            for state in partitions:  # KIP-966: no ELR with one replica
                state.eligible_leader_replicas = []
                state.last_known_elr = []
            response.topics.append(DescribeTopicPartitionsResponseTopic(
                name=name, topic_id=info.topic_id, is_internal=is_internal_topic(name), partitions=partitions,
                topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS))  # fmt: skip
            if upper < info.partitions:
                response.next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(partitions)
        return response


def _prepare_each(work: Iterable[Callable[[], PreparedPartitions]]) -> list[PreparedPartitions | OSError]:
    """On a worker thread: each topic's file work (directories, logs, fsyncs), its
    failure kept in its place so the others still go ahead."""
    done: list[PreparedPartitions | OSError] = []
    for prepare in work:
        try:
            done.append(prepare())
        except OSError as exc:
            done.append(exc)
    return done


def _missing_topic(name: str) -> DescribeTopicPartitionsResponseTopic:
    """DescribeTopicPartitions' entry for an asked topic that does not exist."""
    try:
        validate_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except InvalidTopicError:
        error = ErrorCode.invalid_topic_exception
    return DescribeTopicPartitionsResponseTopic(error_code=error, name=name, is_internal=is_internal_topic(name),
                                                topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS)


def _describe_topic_partitions_error(
    req: DescribeTopicPartitionsRequest, message: str
) -> DescribeTopicPartitionsResponse:
    """Kafka's answer to an InvalidRequestException: every asked topic with
    INVALID_REQUEST (the message goes to the log: the response has no field for it)."""
    log.info("invalid DescribeTopicPartitions request: %s", message)
    return DescribeTopicPartitionsResponse(
        topics=[DescribeTopicPartitionsResponseTopic(error_code=ErrorCode.invalid_request, name=t.name)
                for t in req.topics]
    )  # fmt: skip


def _requested_partitions(topics: list[CreatableTopic], default_partitions: int) -> int:
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


def _create_failure(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
    return CreatableTopicResult(name=name, error_code=code, error_message=message)
