"""The topic keys and what is done with them: CreateTopics ``configs``
(:func:`validate_topic_configs`), a topic's :class:`LogConfig`
(:func:`topic_log_config`) and DescribeConfigs on a topic
(:func:`describe_topic_configs`).

Topic keys that have broker synonyms (``retention.ms`` <- ``log.retention.ms``
<- ``log.retention.minutes`` <- ``log.retention.hours``) take their type and
validator from the first synonym (in :mod:`.broker_keys`), so each rule is
written exactly once; their default is what the broker keys' defaults resolve to.

The functions take the broker's configuration as :class:`BrokerDefaults` (what
:class:`~.broker.BrokerConfig` provides) rather than importing ``BrokerConfig``:
``BrokerConfig`` builds its own LogConfig with :func:`topic_log_config`, so this
module sits below :mod:`.broker`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tidegate.config.broker_keys import BROKER_KEYS
from tidegate.config.definitions import (
    BOOLEAN,
    LIST,
    MEDIUM,
    Check,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Importance,
    Range,
    Scope,
    Synonym,
    Validator,
    convert_to_string,
    resolve,
    typed_default,
)
from tidegate.log.config import LogConfig

MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS


# --------------------------------------------------------------------------------------
# key definitions
# --------------------------------------------------------------------------------------
def topic(
    name: str,
    synonyms: Sequence[str | tuple[str, int]],
    doc: str,
    *,
    type: ConfigType | None = None,
    default: Any = None,
    validator: Validator | None = None,
    importance: Importance | None = None,
    unlimited_if_negative: bool = False,
) -> ConfigKey:
    """A topic-level key. With synonyms, type/validator/importance come from the first
    synonym and the default is what the broker's defaults resolve to."""
    syns = tuple(Synonym(s) if isinstance(s, str) else Synonym(*s) for s in synonyms)
    return ConfigKey(
        name,
        type,  # type: ignore[arg-type]  # filled in from the synonym by _build
        default,
        validator,
        importance,  # type: ignore[arg-type]
        doc,
        scope=Scope.TOPIC,
        synonyms=syns,
        unlimited_if_negative=unlimited_if_negative,
    )


def _check_throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: '*' or [partitionId]:[brokerId] items."""
    items = [item.strip() for item in value]
    if all(re.fullmatch(r"([0-9]+:[0-9]+)?", item) for item in items) or "".join(items) == "*":
        return
    raise ConfigError(
        f"Invalid value [{', '.join(value)}] for configuration {name}: {name} must be the "
        "literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
        name=name,
        value=value,
    )


throttled_replicas = Check(
    _check_throttled_replicas, "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)

# fmt: off
_TABLE: tuple[ConfigKey, ...] = (
    # CreateTopics configs, DescribeConfigs on a topic
    topic("segment.bytes", ["log.segment.bytes"],
          "The maximum size of a single log segment file."),
    topic("segment.ms", ["log.roll.ms", ("log.roll.hours", HOUR_MS)],
          "Roll a new segment when the active one is this old (ms)."),
    topic("retention.ms", ["log.retention.ms", ("log.retention.minutes", MINUTE_MS),
                           ("log.retention.hours", HOUR_MS)],
          "Delete segments older than this many ms (-1: no time limit).",
          unlimited_if_negative=True),
    topic("retention.bytes", ["log.retention.bytes"],
          "Delete old segments while a partition is larger than this (-1: no size limit).",
          unlimited_if_negative=True),
    topic("flush.messages", ["log.flush.interval.messages"],
          "fsync after this many messages."),
    topic("flush.ms", ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
          "fsync when the oldest unflushed message is this old (ms)."),
    topic("index.interval.bytes", ["log.index.interval.bytes"],
          "Add an offset index entry every this many bytes of log."),
    topic("max.message.bytes", ["message.max.bytes"],
          "The largest record batch (after compression) accepted for this topic."),
    topic("message.timestamp.type", ["log.message.timestamp.type"],
          "CreateTime (producer's timestamp) or LogAppendTime (broker's append time)."),
    topic("cleanup.policy", ["log.cleanup.policy"],
          "delete: retention deletes old segments; compact: the log cleaner keeps the "
          "latest record per key; compact,delete: both; empty: neither (kept forever, "
          "never compacted, as Kafka 4)."),
    topic("min.cleanable.dirty.ratio", ["log.cleaner.min.cleanable.ratio"],
          "Clean the log once this share of it is dirty."),
    topic("delete.retention.ms", ["log.cleaner.delete.retention.ms"],
          "How long tombstones and removable transaction markers stay after a clean."),
    topic("min.compaction.lag.ms", ["log.cleaner.min.compaction.lag.ms"],
          "Records younger than this stay uncompacted."),
    topic("max.compaction.lag.ms", ["log.cleaner.max.compaction.lag.ms"],
          "A dirty record older than this makes the log eligible for cleaning."),
    topic("compression.type", ["compression.type"],
          "The codec batches are stored with: producer keeps the producer's; uncompressed, "
          "gzip, snappy, lz4 or zstd recompress batches sent in another codec."),
    topic("compression.gzip.level", ["compression.gzip.level"],
          "The gzip level when compression.type is gzip (-1: gzip's default)."),
    topic("compression.lz4.level", ["compression.lz4.level"],
          "The lz4 level when compression.type is lz4 (9: the fast compressor)."),
    topic("compression.zstd.level", ["compression.zstd.level"],
          "The zstd level when compression.type is zstd."),
    topic("min.insync.replicas", ["min.insync.replicas"],
          "acks=all produces need this many in-sync replicas (a single node has one)."),
    topic("message.timestamp.before.max.ms", ["log.message.timestamp.before.max.ms"],
          "With CreateTime, refuse records more than this many ms older than the broker's clock."),
    topic("message.timestamp.after.max.ms", ["log.message.timestamp.after.max.ms"],
          "With CreateTime, refuse records more than this many ms ahead of the broker's clock."),
    # accepted and reported as Kafka reports them; no effect on a single node or tidegate's
    # storage (docs/configuration.md says which and why)
    topic("segment.jitter.ms", ["log.roll.jitter.ms", ("log.roll.jitter.hours", HOUR_MS)],
          "The most random jitter subtracted from the roll time. Accepted only.",
          validator=Range.at_least(0), importance=MEDIUM),
    topic("segment.index.bytes", ["log.index.size.max.bytes"],
          "The largest offset index of a segment. Accepted only."),
    topic("file.delete.delay.ms", ["log.segment.delete.delay.ms"],
          "How long deleted segment files are kept. Accepted only: removed at once."),
    topic("preallocate", ["log.preallocate"],
          "Preallocate new segment files. Accepted only."),
    topic("unclean.leader.election.enable", ["unclean.leader.election.enable"],
          "Elect an out-of-sync replica as a last resort. Accepted only: one replica."),
    topic("message.downconversion.enable", ["log.message.downconversion.enable"],
          "Deprecated and without effect in Kafka 4.0."),
    topic("leader.replication.throttled.replicas", [],
          "Replicas whose replication the leader throttles. Accepted only: no replication.",
          type=LIST, default=[], importance=MEDIUM, validator=throttled_replicas),
    topic("follower.replication.throttled.replicas", [],
          "Replicas whose replication followers throttle. Accepted only: no replication.",
          type=LIST, default=[], importance=MEDIUM, validator=throttled_replicas),
    topic("remote.storage.enable", [],
          "Tiered storage for the topic; true is refused: the broker has no tiered storage.",
          type=BOOLEAN, default=False, importance=MEDIUM),
    topic("local.retention.ms", ["log.local.retention.ms"],
          "Tiered storage's local retention (-2: retention.ms). Accepted only."),
    topic("local.retention.bytes", ["log.local.retention.bytes"],
          "Tiered storage's local retention bytes (-2: retention.bytes). Accepted only."),
    topic("remote.log.copy.disable", [],
          "Stop copying to tiered storage. Accepted only.",
          type=BOOLEAN, default=False, importance=MEDIUM),
    topic("remote.log.delete.on.disable", [],
          "Delete tiered data when tiered storage is disabled. Accepted only.",
          type=BOOLEAN, default=False, importance=MEDIUM),
)
# fmt: on


def _build() -> list[ConfigKey]:
    defaults = {k.name: k.default for k in BROKER_KEYS.values()}
    topic_keys: list[ConfigKey] = []
    for key in _TABLE:
        if key.synonyms:
            first = BROKER_KEYS[key.synonyms[0].name]
            key = dataclasses.replace(
                key,
                type=key.type or first.type,
                validator=key.validator or first.validator,
                importance=key.importance or first.importance,
            )
            key = dataclasses.replace(key, default=resolve(key, defaults))
        topic_keys.append(typed_default(key))
    return topic_keys


TOPIC_CONFIG = ConfigDef(_build(), scope=Scope.TOPIC)


# --------------------------------------------------------------------------------------
# topic configs
# --------------------------------------------------------------------------------------
class BrokerDefaults(Protocol):
    """What topic configs need from the broker's configuration (a BrokerConfig)."""

    def topic_default(self, name: str) -> Any:
        """A topic key's value for topics that do not override it."""
        ...

    def config_synonyms(self, name: str) -> list[ConfigSynonym]:
        """Kafka's synonyms of the broker key ``name`` (DescribeConfigs order)."""
        ...


#: Kafka's message when a topic asks for tiered storage the broker does not have.
TIERED_STORAGE_DISABLED = (
    "Tiered Storage functionality is disabled in the broker. "
    "Topic cannot be configured with remote log storage."
)


def _parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    # Kafka's order: null values (ControllerConfigurationValidator), then the names
    # (LogConfig.validateNames), then each value
    nulls = [name for name, raw in configs.items() if raw is None]
    if nulls:
        raise ConfigError(
            f"Null value not supported for topic configs: {','.join(nulls)}", name=nulls[0]
        )
    for name in configs:
        if name not in TOPIC_CONFIG:
            raise TOPIC_CONFIG.unknown(name)
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        value = TOPIC_CONFIG.parse_value(name, raw)
        if TOPIC_CONFIG[name].unlimited_if_negative and value < 0:
            value = -1
        parsed[name] = value
    return parsed


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validate a topic's whole set of configs (CreateTopics ``configs``, or what an
    AlterConfigs leaves): Kafka's ``LogConfig.validate``. Returns them with canonical
    string values (trimmed, ``true``/``false``, lists comma-joined). ConfigError names
    the key (INVALID_CONFIG with its message)."""
    parsed = _parse_topic_configs(configs)
    if parsed.get("remote.storage.enable"):
        raise ConfigError(TIERED_STORAGE_DISABLED, name="remote.storage.enable", value=True)
    # Kafka's LogConfig.validateValues, over the topic's values and the topic defaults
    min_lag = parsed.get("min.compaction.lag.ms", TOPIC_CONFIG["min.compaction.lag.ms"].default)
    max_lag = parsed.get("max.compaction.lag.ms", TOPIC_CONFIG["max.compaction.lag.ms"].default)
    if min_lag > max_lag:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
            f"max.compaction.lag.ms ({max_lag})", name="min.compaction.lag.ms",
        )  # fmt: skip
    canonical: dict[str, str] = {}
    for name, value in parsed.items():
        text = convert_to_string(value)
        assert text is not None  # _parse_topic_configs refuses null values
        canonical[name] = text
    return canonical


def topic_log_config(broker_cfg: BrokerDefaults, topic_overrides: Mapping[str, str]) -> LogConfig:
    """The LogConfig of a topic: its overrides, else what the broker keys resolve to."""
    parsed = _parse_topic_configs(topic_overrides)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(LogConfig):
        name = field.name.replace("_", ".")
        value = parsed[name] if name in parsed else broker_cfg.topic_default(name)
        kwargs[field.name] = tuple(value) if isinstance(value, list) else value
    return LogConfig(**kwargs)


def describe_topic_configs(
    broker_cfg: BrokerDefaults, overrides: Mapping[str, str]
) -> list[ConfigEntry]:
    """DescribeConfigs entries for every topic key, as Kafka's ``ConfigHelper`` makes them.

    Synonyms, in precedence order: the topic's own value (DYNAMIC_TOPIC_CONFIG), then
    Kafka's synonyms of the key's first broker synonym: each of that broker key's
    names (``log.retention.ms``, ``.minutes``, ``.hours``) set per broker
    (DYNAMIC_BROKER_CONFIG), then as the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG),
    then statically (STATIC_BROKER_CONFIG), then their non-null defaults (DEFAULT_CONFIG),
    dropping those before the first that is the first synonym itself (so with only
    ``log.retention.hours`` set, ``retention.ms`` reports no broker synonyms, as Kafka
    does). The source is the first synonym's, DEFAULT_CONFIG without one.
    """
    parsed = _parse_topic_configs(overrides)
    entries = []
    for name, key in TOPIC_CONFIG.items():
        synonyms: list[ConfigSynonym] = []
        if name in parsed:
            value = parsed[name]
            synonyms.append(
                ConfigSynonym(name, convert_to_string(value), ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        else:
            value = broker_cfg.topic_default(name)
        if key.synonyms:
            synonyms += broker_cfg.config_synonyms(key.synonyms[0].name)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name,
                convert_to_string(value),
                source,
                False,
                key.sensitive,
                key.type,
                key.doc,
                tuple(synonyms),
            )
        )
    return entries
