"""Option parsing and validation for the ``tidegate`` Spark data source.

The options, their defaults and the checks (with the messages) are those of Spark's
built-in Kafka source (``KafkaSourceProvider``): source options are case-insensitive,
``kafka.``-prefixed options go to the Kafka client with the prefix dropped, and what
the built-in source refuses is refused here with the same ``IllegalArgumentException``
text (raised as :class:`ValueError`, which Spark shows with the message).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.client.security import ClientSecurity

from .offsets import (
    EARLIEST,
    LATEST,
    TopicPartition,
    parse_partition_offsets,
    parse_partition_timestamps,
    parse_partitions,
)

__all__ = ["OffsetSpec", "ReadOptions", "WriteOptions", "consumer_settings"]

log = logging.getLogger("tidegate.spark")

ASSIGN = "assign"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribepattern"
STRATEGY_OPTION_KEYS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)  # Spark's Set order

INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you want your streaming query to fail on such cases, set the source "
    'option "failOnDataLoss" to "true".'
)
INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your streaming query to fail on such cases, set the "
    'source option "failOnDataLoss" to "false".'
)

_AUTO_OFFSET_RESET_MESSAGE = (
    "Kafka option 'auto.offset.reset' is not supported.\n"
    "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'\n"
    "to specify where to start. Structured Streaming manages which offsets are consumed\n"
    "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
    "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
    "'startingoffsets' only applies when a new Streaming query is started, and\n"
    "that resuming will always pick up from where the query left off. See the docs for more\n"
    "details."
)
_GROUP_ID_MESSAGE = (
    "Kafka option 'group.id' is not supported as user-specified consumer groups are not "
    "used to track offsets."
)

@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: ``earliest``, ``latest``, per-partition offsets
    (``-2``/``-1`` allowed inside), a global timestamp or per-partition timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    """Source options keyed case-insensitively (Spark's CaseInsensitiveMap); kafka.*
    keys keep the case of their tail."""
    out: dict[str, str] = {}
    for k, v in options.items():
        if v is None:
            continue
        kl = k.lower()
        out[("kafka." + k[6:]) if kl.startswith("kafka.") else kl] = str(v)
    return out


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v == "true":
        return True
    if v == "false":
        return False
    # Scala's String.toBoolean
    raise ValueError(f'For input string: "{value}"')


def _long(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f'For input string: "{value}"') from None


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.``-prefixed options with the prefix dropped."""
    return {k[6:]: v for k, v in options.items() if k.startswith("kafka.")}


def _offset_spec(
    params: Mapping[str, str], ts_key: str, by_ts_key: str, key: str, default: str
) -> OffsetSpec:
    if ts_key in params:
        s = params[ts_key].strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(s))
        except ValueError:
            raise ValueError(f"Expected a single long value, got {s}") from None
    if by_ts_key in params:
        return OffsetSpec("timestamps", offsets=parse_partition_timestamps(params[by_ts_key]))
    v = params.get(key)
    if v is None:
        return OffsetSpec(default)
    v = v.strip()
    if v.lower() in ("latest", "earliest"):
        return OffsetSpec(v.lower())
    return OffsetSpec("offsets", offsets=parse_partition_offsets(v))


@dataclass
class ReadOptions:
    strategy: str  # subscribe | subscribepattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec("earliest"))
    ending: OffsetSpec = field(default_factory=lambda: OffsetSpec("latest"))
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    no_match_strategy: str = "error"  # startingOffsetsByTimestampStrategy
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    #: tidegate's own option ``tidegate.arrow`` (default true): executors yield Arrow
    #: record batches; false yields Python tuples (slower; kept for comparison)
    arrow: bool = True
    kafka: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (a pattern must match the whole name, as
        Java's ``Pattern.matcher(topic).matches()``)."""
        if self.strategy == SUBSCRIBE:
            return topic in self.topics
        if self.strategy == SUBSCRIBE_PATTERN:
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool) -> ReadOptions:
        params = _lower(options)
        if streaming:
            if "endingoffsets" in params:
                raise ValueError("ending offset not valid in streaming queries")
            if "endingoffsetsbytimestamp" in params:
                raise ValueError("ending timestamp not valid in streaming queries")
        else:
            starting = _offset_spec(
                params, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets",
                "earliest",
            )  # fmt: skip
            if starting.kind == "latest":
                raise ValueError("starting offset can't be latest for batch queries on Kafka")
            if starting.kind == "offsets":
                for (t, p), off in starting.offsets.items():
                    if off == LATEST:
                        raise ValueError(
                            f"startingOffsets for {t}-{p} can't be latest for batch queries "
                            "on Kafka"
                        )
            ending = _offset_spec(
                params, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", "latest"
            )
            if ending.kind == "earliest":
                raise ValueError("ending offset can't be earliest for batch queries on Kafka")
            if ending.kind == "offsets":
                for (t, p), off in ending.offsets.items():
                    if off == EARLIEST:
                        raise ValueError(
                            f"ending offset for {t}-{p} can't be earliest for batch queries "
                            "on Kafka"
                        )
        opts = cls._general(params)
        opts.starting = _offset_spec(
            params, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets",
            "latest" if streaming else "earliest",
        )  # fmt: skip
        if not streaming:
            opts.ending = _offset_spec(
                params, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", "latest"
            )
            _check_offset_limit_validity(opts.starting, opts.ending)
            for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
                if key in params:
                    name = {"maxoffsetspertrigger": "maxOffsetsPerTrigger",
                            "minoffsetspertrigger": "minOffsetsPerTrigger",
                            "maxtriggerdelay": "maxTriggerDelay"}[key]  # fmt: skip
                    log.warning("%s option ignored in batch queries", name)
        else:
            for key, name in (("minoffsetspertrigger", "minOffsetsPerTrigger"),
                              ("maxtriggerdelay", "maxTriggerDelay")):  # fmt: skip
                if key in params:
                    raise ValueError(
                        f"Option '{name}' is not supported by the tidegate source yet; "
                        "use maxOffsetsPerTrigger to bound micro-batches"
                    )
        return opts

    @classmethod
    def _general(cls, params: dict[str, str]) -> ReadOptions:
        """Kafka's ``validateGeneralOptions``: the subscription strategy, the limits, the
        ``kafka.*`` consumer settings, then the other general options."""
        opts = cls._with_strategy(params)
        opts._set_limits(params)
        opts.kafka = _checked_kafka_params(params)
        if "failondataloss" in params:
            opts.fail_on_data_loss = _bool("failOnDataLoss", params["failondataloss"])
        if "includeheaders" in params:
            opts.include_headers = _bool("includeHeaders", params["includeheaders"])
        if "startingoffsetsbytimestampstrategy" in params:
            s = params["startingoffsetsbytimestampstrategy"].strip().lower()
            if s not in ("error", "latest"):
                raise ValueError(f"No value found for '{s.upper()}'")
            opts.no_match_strategy = s
        if "tidegate.arrow" in params:
            opts.arrow = _bool("tidegate.arrow", params["tidegate.arrow"])
        if "kafkaconsumer.polltimeoutms" in params:
            opts.poll_timeout_ms = _long("kafkaConsumer.pollTimeoutMs",
                                         params["kafkaconsumer.polltimeoutms"])  # fmt: skip
        if "fetchoffset.numretries" in params:
            opts.fetch_offset_num_retries = _long("fetchoffset.numRetries",
                                                  params["fetchoffset.numretries"])  # fmt: skip
        if "fetchoffset.retryintervalms" in params:
            opts.fetch_offset_retry_interval_ms = _long(
                "fetchoffset.retryIntervalMs", params["fetchoffset.retryintervalms"]
            )
        return opts

    @classmethod
    def _with_strategy(cls, params: dict[str, str]) -> ReadOptions:
        """Options with the one subscription strategy given (assign, subscribe or
        subscribePattern) and its value checked."""
        specified = [k for k in STRATEGY_OPTION_KEYS if k in params]
        if not specified:
            raise ValueError(
                "One of the following options must be specified for Kafka source: "
                + ", ".join(STRATEGY_OPTION_KEYS)
                + ". See the docs for more details."
            )
        if len(specified) > 1:
            raise ValueError(
                "Only one of the following options can be specified for Kafka source: "
                + ", ".join(STRATEGY_OPTION_KEYS)
                + ". See the docs for more details."
            )
        strategy = specified[0]
        value = params[strategy]
        opts = cls(strategy=strategy)
        if strategy == ASSIGN:
            if not value.strip().startswith("{"):
                raise ValueError(
                    "No topicpartitions to assign as specified value for option "
                    f"'assign' is '{value}'"
                )
            opts.assigned = tuple(parse_partitions(value))
        elif strategy == SUBSCRIBE:
            topics = tuple(t.strip() for t in value.split(",") if t.strip())
            if not topics:
                raise ValueError(
                    "No topics to subscribe to as specified value for option "
                    f"'subscribe' is '{value}'"
                )
            opts.topics = topics
        else:
            pattern = value.strip()
            if not pattern:
                raise ValueError(
                    "Pattern to subscribe is empty as specified value for option "
                    f"'subscribePattern' is '{value}'"
                )
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"Invalid subscribePattern '{pattern}': {exc}") from None
            opts.pattern = pattern
        return opts

    def _set_limits(self, params: dict[str, str]) -> None:
        """minPartitions, maxRecordsPerPartition, maxOffsetsPerTrigger: positive when given."""
        if "minpartitions" in params:
            p = _long("minPartitions", params["minpartitions"])
            if p <= 0:
                raise ValueError("minPartitions must be positive")
            self.min_partitions = p
        if "maxrecordsperpartition" in params:
            p = _long("maxRecordsPerPartition", params["maxrecordsperpartition"])
            if p <= 0:
                raise ValueError("maxRecordsPerPartition must be positive")
            self.max_records_per_partition = p
        if "maxoffsetspertrigger" in params:
            m = _long("maxOffsetsPerTrigger", params["maxoffsetspertrigger"])
            if m <= 0:
                raise ValueError("maxOffsetsPerTrigger must be positive")
            self.max_offsets_per_trigger = m


def _checked_kafka_params(params: dict[str, str]) -> dict[str, str]:
    """The ``kafka.*`` consumer settings, refusing those the source sets itself (as
    Kafka's ``validateGeneralOptions``) and checking the rest up front."""
    kafka = kafka_params(params)
    if "group.id" in kafka:
        raise ValueError(_GROUP_ID_MESSAGE)
    if "auto.offset.reset" in kafka:
        raise ValueError(_AUTO_OFFSET_RESET_MESSAGE)
    if "key.deserializer" in kafka:
        raise ValueError(
            "Kafka option 'key.deserializer' is not supported as keys are deserialized as "
            "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
            "deserialize the keys."
        )
    if "value.deserializer" in kafka:
        raise ValueError(
            "Kafka option 'value.deserializer' is not supported as values are deserialized "
            "as byte arrays with ByteArrayDeserializer. Use DataFrame operations to "
            "explicitly deserialize the values."
        )
    for c in ("enable.auto.commit", "interceptor.classes"):
        if c in kafka:
            raise ValueError(f"Kafka option '{c}' is not supported")
    if "bootstrap.servers" not in kafka:
        raise ValueError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
        )
    _check_security(kafka)
    consumer_settings(kafka)  # numbers and isolation.level checked up front
    return kafka


def _check_security(kafka: Mapping[str, str]) -> ClientSecurity:
    """``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` for the client;
    an invalid or unsupported value fails the query up front (a ValueError)."""
    return ClientSecurity.from_config(kafka)


def _check_offset_limit_validity(start: OffsetSpec, end: OffsetSpec) -> None:
    if start.kind == end.kind and start.kind in ("offsets", "timestamps"):
        if set(start.offsets) != set(end.offsets):
            s = ", ".join(f"{t}-{p}" for t, p in sorted(start.offsets))
            e = ", ".join(f"{t}-{p}" for t, p in sorted(end.offsets))
            raise ValueError(
                "Kafka data source in batch query should have the same topic partitions in "
                f"starting and ending offsets/timestamps. start: {s}, end: {e}"
            )
        for tp, so in start.offsets.items():
            eo = end.offsets[tp]
            if so > eo and so >= 0 and eo >= 0:
                what = "offset" if start.kind == "offsets" else "timestamp"
                raise ValueError(
                    f"The specified starting {what} ({so}) is greater than ending {what} "
                    f"({eo}) for topic partition {tp[0]}-{tp[1]}"
                )


def consumer_settings(kafka: Mapping[str, str]) -> dict[str, Any]:
    """The reader's client settings from the ``kafka.*`` options (Kafka consumer defaults
    otherwise: fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB, fetch.max.wait.ms
    500, request.timeout.ms 30 s, isolation.level read_uncommitted).

    ``isolation.level`` is checked as Kafka's consumer checks it (trimmed, then exactly
    ``read_committed`` or ``read_uncommitted``; its ConfigException's message): at
    ``read_committed`` the driver's latest offsets are last stable offsets and executors
    drop aborted transactions (:class:`tidegate.client.fetcher.CompletedFetch`)."""
    iso = kafka.get("isolation.level", "read_uncommitted").strip()
    if iso not in ("read_uncommitted", "read_committed"):
        raise ValueError(
            f"Invalid value {iso} for configuration isolation.level: String must be one of: "
            "read_committed, read_uncommitted"
        )
    return {
        "bootstrap_servers": kafka["bootstrap.servers"],
        "client_id": kafka.get("client.id", "tidegate-spark"),
        "request_timeout_ms": int(kafka.get("request.timeout.ms", 30_000)),
        "reconnect_backoff_ms": int(kafka.get("reconnect.backoff.ms", 50)),
        "reconnect_backoff_max_ms": int(kafka.get("reconnect.backoff.max.ms", 1000)),
        "socket_connection_setup_timeout_ms": int(
            kafka.get("socket.connection.setup.timeout.ms", 10_000)
        ),
        "receive_buffer_bytes": int(kafka.get("receive.buffer.bytes", 65536)),
        "send_buffer_bytes": int(kafka.get("send.buffer.bytes", 131072)),
        "fetch_max_bytes": int(kafka.get("fetch.max.bytes", 50 * 1024 * 1024)),
        "partition_max_bytes": int(kafka.get("max.partition.fetch.bytes", 1024 * 1024)),
        "fetch_max_wait_ms": int(kafka.get("fetch.max.wait.ms", 500)),
        "isolation_level": 1 if iso == "read_committed" else 0,
        # strings only, so the settings pickle to executors; the SSLContext is built there
        "security": ClientSecurity.from_config(kafka),
    }


@dataclass
class WriteOptions:
    topic: str | None
    kafka: dict[str, str]

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> WriteOptions:
        params = _lower(options)
        kafka = kafka_params(params)
        if "key.serializer" in kafka:
            raise ValueError(
                "Kafka option 'key.serializer' is not supported as keys are serialized with "
                "ByteArraySerializer."
            )
        if "value.serializer" in kafka:
            raise ValueError(
                "Kafka option 'value.serializer' is not supported as value are serialized with "
                "ByteArraySerializer."
            )
        if "bootstrap.servers" not in kafka:
            raise ValueError(
                "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
            )
        _check_security(kafka)
        topic = params.get("topic")
        return cls(topic.strip() if topic is not None else None, kafka)
