"""Configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for
:class:`~tidegate.server.kafka_apis.KafkaApis`.

Kafka's ``ConfigHelper`` (describing a topic's or a broker's configs with their sources
and synonyms) and ``ConfigAdminManager`` (the broker's checks of an alteration) with,
on a one-node KRaft cluster, the controller's part (``ConfigurationControlManager``:
topic configs validated as at creation, the topic must exist) and the result applied
live and persisted: a topic's partitions take their new LogConfig, a dynamic broker
config changes the broker's values and every topic's defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol, TypeVar

from tidegate.config import (
    TOPIC_CONFIG,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    describe_topic_configs,
    validate_topic_configs,
)
from tidegate.config.alter import AlterConfigError, AlterOp, apply_config_ops
from tidegate.config.broker import BROKER_CONFIG, MIN_INSYNC_REPLICAS
from tidegate.coordinator.group.group_config import GroupConfigManager
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages import alter_configs, incremental_alter_configs
from tidegate.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from tidegate.server.metadata import BrokerConfigStore, TopicStore
from tidegate.server.replica_manager import ReplicaManager
from tidegate.utils import INT32_MAX
from tidegate.utils.topic import InvalidTopicError, validate_topic_name

log = logging.getLogger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
#: the config resource types Kafka 4.0 has and tidegate does not (docs/protocol.md)
_UNSUPPORTED_RESOURCES = {
    RESOURCE_BROKER_LOGGER: "BROKER_LOGGER",
    RESOURCE_CLIENT_METRICS: "CLIENT_METRICS",
    RESOURCE_GROUP: "GROUP",
}

#: One config of an alteration: (name, AlterConfigOp.OpType id, value); a legacy
#: AlterConfigs' configs are all SET
ConfigOp = tuple[str, int, str | None]


#: a resource's response entry (the Protocol's, and a call's)
E_co = TypeVar("E_co", covariant=True)
R = TypeVar("R")


class _ResourceAnswer(Protocol[E_co]):
    """The response entry of a resource: AlterConfigs' or IncrementalAlterConfigs'."""

    def __call__(
        self, *, error_code: int, error_message: str | None, resource_type: int, resource_name: str
    ) -> E_co: ...


class _Resource:
    """One resource of an AlterConfigs/IncrementalAlterConfigs request on its way through
    the two steps Kafka splits it into: the broker's checks, then the controller's."""

    __slots__ = ("error", "message", "new_configs", "ops", "resource_name", "resource_type")

    def __init__(self, resource_type: int, resource_name: str, ops: list[ConfigOp]) -> None:
        self.resource_type = resource_type
        self.resource_name = resource_name
        self.ops = ops
        self.error: ErrorCode = ErrorCode.none
        self.message: str | None = None
        #: the resource's whole set of configs after the request (set once it validates)
        self.new_configs: dict[str, str] | None = None

    def fail(self, error: ErrorCode, message: str | None) -> None:
        self.error, self.message = error, message

    @property
    def failed(self) -> bool:
        return self.error is not ErrorCode.none


class ConfigAdminApis:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        store: TopicStore,
        broker_configs: BrokerConfigStore,
        group_configs: GroupConfigManager | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.logs = replicas.logs
        self.store = store
        #: where the dynamic broker configs are persisted
        self.broker_configs = broker_configs
        #: the GROUP resources' configs (None: GROUP resources refused)
        self.group_configs = group_configs

    # -- DescribeConfigs (Kafka's ConfigHelper) ------------------------------------------------
    def handle_describe_configs(self, request: Request) -> DescribeConfigsResponse:
        req = request.body_as(DescribeConfigsRequest)
        results = []
        for r in req.resources:
            result = DescribeConfigsResult(resource_type=r.resource_type, resource_name=r.resource_name)
            results.append(result)
            entries = self._described(r, result)
            if entries is None:
                continue
            keys = set(r.configuration_keys) if r.configuration_keys else None
            result.configs = [
                _described_config(e, req.include_synonyms, req.include_documentation)
                for e in entries
                if keys is None or e.name in keys
            ]
        return DescribeConfigsResponse(results=results)

    def _described(self, r: DescribeConfigsResource, result: DescribeConfigsResult) -> list[ConfigEntry] | None:
        """The entries of a DescribeConfigs resource, or None with ``result``'s error set."""
        if r.resource_type == RESOURCE_TOPIC:
            try:
                validate_topic_name(r.resource_name)
            except InvalidTopicError as exc:
                result.error_code, result.error_message = ErrorCode.invalid_topic_exception, str(exc)
                return None
            info = self.store.get(r.resource_name)
            if info is None:  # Kafka sets no message here
                result.error_code = ErrorCode.unknown_topic_or_partition
                return None
            return describe_topic_configs(self.config, info.configs)
        if r.resource_type == RESOURCE_BROKER:
            name = r.resource_name
            if name and not _is_int(name):
                result.error_code = ErrorCode.invalid_request
                result.error_message = f"Broker id must be an integer, but it is: {name}"
                return None
            if name and int(name) != self.node_id:
                result.error_code = ErrorCode.invalid_request
                result.error_message = (
                    f"Unexpected broker id, expected {self.node_id} or empty string, but received {name}"
                )
                return None
            return self.config.describe(per_broker=bool(name))
        if r.resource_type == RESOURCE_GROUP and self.group_configs is not None:
            if not r.resource_name:
                result.error_code, result.error_message = ErrorCode.invalid_request, "Group name must not be empty."
                return None
            return self.group_configs.describe_entries(r.resource_name)
        result.error_code = ErrorCode.invalid_request
        result.error_message = f"Unsupported resource type {r.resource_type}"
        return None

    # -- AlterConfigs / IncrementalAlterConfigs (Kafka's ConfigAdminManager) -------------------
    def handle_incremental_alter_configs(
        self, request: Request
    ) -> incremental_alter_configs.IncrementalAlterConfigsResponse:
        req = request.body_as(incremental_alter_configs.IncrementalAlterConfigsRequest)
        items = [_Resource(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
                 for r in req.resources]  # fmt: skip
        answers = self._alter_configs(items, req.validate_only, incremental_alter_configs.AlterConfigsResourceResponse,
                                      incremental=True)  # fmt: skip
        return incremental_alter_configs.IncrementalAlterConfigsResponse(responses=answers)

    def handle_alter_configs(self, request: Request) -> alter_configs.AlterConfigsResponse:
        """The legacy AlterConfigs: each resource's configs are replaced by the request's."""
        req = request.body_as(alter_configs.AlterConfigsRequest)
        items = [_Resource(r.resource_type, r.resource_name, [(c.name, AlterOp.SET, c.value) for c in r.configs])
                 for r in req.resources]  # fmt: skip
        answers = self._alter_configs(items, req.validate_only, alter_configs.AlterConfigsResourceResponse,
                                      incremental=False)  # fmt: skip
        return alter_configs.AlterConfigsResponse(responses=answers)

    def _alter_configs(
        self, items: list[_Resource], validate_only: bool, answer: _ResourceAnswer[R], *, incremental: bool
    ) -> list[R]:
        """Kafka's two steps: the broker's (``ConfigAdminManager.preprocess``: duplicates,
        null values, resource types, BROKER resources validated against the dynamic
        broker configs), then the controller's (``ConfigurationControlManager``: topic
        configs validated as at creation, the topic must exist), and the result applied
        live and persisted unless ``validate_only``. One answer per resource, in order."""
        seen: dict[tuple[int, str], int] = {}
        for item in items:
            key = (item.resource_type, item.resource_name)
            seen[key] = seen.get(key, 0) + 1
        for item in items:
            if seen[(item.resource_type, item.resource_name)] > 1:
                item.fail(ErrorCode.invalid_request, "Each resource must appear at most once.")
            else:
                self._preprocess(item, incremental)
        for item in items:
            if item.failed:
                continue
            if item.resource_type == RESOURCE_TOPIC:
                self._alter_topic(item, incremental)
            if not item.failed and not validate_only:
                self._apply(item)
        return [
            answer(error_code=i.error, error_message=i.message, resource_type=i.resource_type,
                   resource_name=i.resource_name)
            for i in items
        ]  # fmt: skip

    def _preprocess(self, item: _Resource, incremental: bool) -> None:
        names = [name for name, _op, _value in item.ops]
        if len(set(names)) != len(names):
            item.fail(ErrorCode.invalid_request, "Error due to duplicate config keys")
            return
        nulls = [
            name for name, op, value in item.ops if value is None and not (incremental and op == AlterOp.DELETE)
        ]
        if nulls:
            item.fail(ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}")
            return
        rtype = item.resource_type
        if rtype == RESOURCE_BROKER:
            self._preprocess_broker(item, incremental)
        elif rtype == RESOURCE_GROUP and self.group_configs is not None:
            self._preprocess_group(item, self.group_configs, incremental)
        elif rtype in _UNSUPPORTED_RESOURCES and (incremental or rtype != RESOURCE_BROKER_LOGGER):
            # Kafka 4.0 has these (log4j levels, KIP-848 group configs, KIP-714 client
            # metrics subscriptions); tidegate does not (docs/protocol.md)
            item.fail(ErrorCode.invalid_request, f"tidegate does not support {_UNSUPPORTED_RESOURCES[rtype]} configs")
        elif rtype != RESOURCE_TOPIC:
            item.fail(ErrorCode.invalid_request, f"Unknown resource type {rtype}")

    def _preprocess_group(self, item: _Resource, group_configs: GroupConfigManager, incremental: bool) -> None:
        """A GROUP resource (reference 1.15): the group need not exist; an empty name is
        INVALID_REQUEST, an unknown key or a value the merged configs refuse
        INVALID_CONFIG."""
        name = item.resource_name
        if not name:
            item.fail(ErrorCode.invalid_request, "Group name must not be empty.")
            return
        try:
            changes = group_configs.changes_of(
                name, item.ops if incremental else None, None if incremental else _replaced(item.ops)
            )
            item.new_configs = group_configs.validate(name, changes)
        except ConfigError as exc:
            item.fail(ErrorCode.invalid_config, str(exc))
        except ValueError as exc:
            item.fail(ErrorCode.invalid_request, str(exc))

    def _preprocess_broker(self, item: _Resource, incremental: bool) -> None:
        """A BROKER resource: "" is the cluster default, else this node's id; the new set
        of dynamic configs must pass :meth:`BrokerConfig.validate_dynamic` (any failure
        is INVALID_REQUEST, as in Kafka: KAFKA-13609)."""
        name = item.resource_name
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
        try:
            if incremental:
                new = apply_config_ops(self.config.dynamic_configs(per_broker), item.ops, BROKER_CONFIG)
            else:
                new = _replaced(item.ops)
            self.config.validate_dynamic(new, per_broker)
            if not per_broker and MIN_INSYNC_REPLICAS not in new:
                item.fail(
                    ErrorCode.invalid_config,
                    f"Cluster-level {MIN_INSYNC_REPLICAS} cannot be removed while eligible leader replicas "
                    "are enabled (KIP-966).",
                )
                return
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
        name = item.resource_name
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
                new = apply_config_ops(info.configs if info is not None else {}, item.ops, TOPIC_CONFIG)
            else:
                new = _replaced(item.ops)
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
        name = item.resource_name
        new = item.new_configs
        assert new is not None
        try:
            if item.resource_type == RESOURCE_GROUP and self.group_configs is not None:
                self.group_configs.alter(name, self.group_configs.changes_of(name, None, new))
                log.info("group %s configs are now %s", name, new)
            elif item.resource_type == RESOURCE_TOPIC:
                if new != self.store.topics[name].configs:
                    self.store.set_configs(name, new)
                    self.logs.topic_config_updated(name)
                    log.info("topic %s configs are now %s", name, new)
            else:
                per_broker = bool(name)
                default = self.config.dynamic_configs(False)
                broker = self.config.dynamic_configs(True)
                self.broker_configs.save(
                    default if per_broker else new, new if per_broker else broker
                )
                self.config.set_dynamic(new, per_broker)
                self.logs.broker_config_updated()
                log.info(
                    "dynamic broker configs (%s) are now %s",
                    f"broker {name}" if per_broker else "cluster default",
                    {k: ("[hidden]" if k not in BROKER_CONFIG or BROKER_CONFIG[k].sensitive else v)
                     for k, v in new.items()},
                )  # fmt: skip
        except OSError as exc:
            log.error("could not persist the configs of %s: %s", name, exc)
            item.fail(ErrorCode.kafka_storage_error, f"could not persist the configs: {exc}")


def _described_config(
    e: ConfigEntry, include_synonyms: bool, include_doc: bool
) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=e.name, value=e.value, read_only=e.read_only, config_source=e.source, is_sensitive=e.is_sensitive,
        synonyms=[DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source) for s in e.synonyms]
        if include_synonyms else [],
        config_type=e.config_type,
        documentation=(e.documentation or None) if include_doc else None,
    )  # fmt: skip


def _replaced(ops: Iterable[ConfigOp]) -> dict[str, str]:
    """A legacy AlterConfigs' new set of configs: the request's (null values were refused)."""
    return {name: value for name, _op, value in ops if value is not None}


def _is_int(text: str) -> bool:
    """Whether Java's ``Integer.parseInt`` reads ``text`` (an optional sign, digits)."""
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and -INT32_MAX - 1 <= int(text) <= INT32_MAX
