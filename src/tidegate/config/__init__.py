"""Broker and topic configuration, the Kafka way.

The package is layered like Kafka's config code; each module imports only the
ones above it in this list (never this ``__init__``), so there are no cycles:

- :mod:`.definitions` -- the machinery: ``ConfigError``, ``ConfigType``,
  ``ConfigSource``, the validators, ``ConfigKey``, ``ConfigDef``, typed parsing
  (``parse_type``, ``convert_to_string``) and the DescribeConfigs entries.
- :mod:`.listeners` -- ``listeners``, ``listener.security.protocol.map``,
  ``listener.name.<listener>.<key>`` overrides and ``metrics.listener``.
- :mod:`.properties` -- Java ``.properties`` files and ``key=value`` overrides.
- :mod:`.broker_keys` -- the broker key table (every key tidegate accepts).
- :mod:`.topic` -- the topic keys (defaults from their broker synonyms) and
  CreateTopics validation, a topic's LogConfig, DescribeConfigs on a topic.
- :mod:`.broker` -- ``BROKER_CONFIG`` and ``BrokerConfig``, the validated broker
  configuration, with KIP-72's ``queued.max.request.bytes`` rule.

This module only re-exports the public names, so ``from tidegate.config import
BrokerConfig`` keeps working.
"""

from tidegate.config.broker import BROKER_CONFIG, BrokerConfig
from tidegate.config.broker_keys import new_cluster_id
from tidegate.config.definitions import (
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Importance,
)
from tidegate.config.listeners import Listener, parse_listener, parse_metrics_listener
from tidegate.config.properties import parse_overrides, parse_properties, read_properties
from tidegate.config.topic import (
    TOPIC_CONFIG,
    describe_topic_configs,
    topic_log_config,
    validate_topic_configs,
)

__all__ = [
    "BROKER_CONFIG",
    "TOPIC_CONFIG",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Importance",
    "Listener",
    "describe_topic_configs",
    "new_cluster_id",
    "parse_listener",
    "parse_metrics_listener",
    "parse_overrides",
    "parse_properties",
    "read_properties",
    "topic_log_config",
    "validate_topic_configs",
]
