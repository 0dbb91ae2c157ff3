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
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tidegate.config.broker_keys import BROKER_KEYS, single_node
from tidegate.config.definitions import (
    INT,
    LIST,
    MEDIUM,
    STRING,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Importance,
    OneOf,
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
    topic("cleanup.policy", [], "Only delete: old segments are deleted by retention.",
          type=LIST, default=["delete"], importance=MEDIUM,
          validator=OneOf(("delete",), {"compact": "log compaction is not supported yet"})),
    topic("compression.type", [],
          "Only producer: batches are stored exactly as the producer sent them.",
          type=STRING, default="producer", importance=MEDIUM,
          validator=OneOf(("producer",), {
              c: "tidegate stores batches exactly as the producer sent them; only "
                 "compression.type=producer is supported"
              for c in ("uncompressed", "zstd", "lz4", "snappy", "gzip")})),
    topic("min.insync.replicas", [],
          "Accepted for compatibility; a single node has one in-sync replica, so only 1.",
          type=INT, default=1, importance=MEDIUM, validator=single_node),
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

    def is_default(self, name: str) -> bool:
        """True if the broker key ``name`` was not set."""
        ...

    def get(self, name: str) -> Any:
        """The typed value of the broker key ``name``."""
        ...


def _parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        if name not in TOPIC_CONFIG:
            raise TOPIC_CONFIG.unknown(name)
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}", name=name)
        value = TOPIC_CONFIG.parse_value(name, raw)
        if TOPIC_CONFIG[name].unlimited_if_negative and value < 0:
            value = -1
        parsed[name] = value
    return parsed


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validate CreateTopics-style configs; returns them with canonical string values
    (trimmed, ``true``/``false``, lists comma-joined). ConfigError names the key."""
    canonical: dict[str, str] = {}
    for name, value in _parse_topic_configs(configs).items():
        text = convert_to_string(value)
        assert text is not None  # _parse_topic_configs refuses null values
        canonical[name] = text
    return canonical


def topic_log_config(broker_cfg: BrokerDefaults, topic_overrides: Mapping[str, str]) -> LogConfig:
    """The LogConfig of a topic: its overrides, else what the broker keys resolve to."""
    parsed = _parse_topic_configs(topic_overrides)
    kwargs = {}
    for field in dataclasses.fields(LogConfig):
        name = field.name.replace("_", ".")
        kwargs[field.name] = parsed[name] if name in parsed else broker_cfg.topic_default(name)
    return LogConfig(**kwargs)


def describe_topic_configs(
    broker_cfg: BrokerDefaults, overrides: Mapping[str, str]
) -> list[ConfigEntry]:
    """DescribeConfigs entries for every topic key.

    Source: DYNAMIC_TOPIC_CONFIG for the topic's overrides, STATIC_BROKER_CONFIG when
    a broker synonym was set, DEFAULT_CONFIG otherwise. Synonyms list, in precedence
    order, the override, the broker synonyms that were set (as set, unconverted) and
    the broker synonyms' defaults.
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
        for syn in key.synonyms:
            if not broker_cfg.is_default(syn.name):
                synonyms.append(
                    ConfigSynonym(
                        syn.name,
                        convert_to_string(broker_cfg.get(syn.name)),
                        ConfigSource.STATIC_BROKER_CONFIG,
                    )
                )
        for syn in key.synonyms:
            default = BROKER_KEYS[syn.name].default_string
            if default is not None:
                synonyms.append(ConfigSynonym(syn.name, default, ConfigSource.DEFAULT_CONFIG))
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
