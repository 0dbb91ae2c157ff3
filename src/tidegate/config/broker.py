"""The broker's configuration: ``BROKER_CONFIG`` (the broker keys as a ConfigDef)
and :class:`BrokerConfig`, the validated, typed configuration a broker runs with.

``BrokerConfig`` parses every key against the table in :mod:`.broker_keys`,
builds the listeners (:mod:`.listeners`), checks the combinations no single key
can (keystores for SSL listeners, advertised listeners, KIP-72's
``queued.max.request.bytes`` rule, which lives here and which the network
layer's memory pool imports) and resolves the topic defaults (:mod:`.topic`).
It is the top of the config package: no other config module imports it.
"""

from __future__ import annotations

import dataclasses
import difflib
import socket
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tidegate.config.broker_keys import BROKER_KEYS
from tidegate.config.definitions import (
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    Scope,
    convert_to_string,
    resolve,
    split_list,
)
from tidegate.config.listeners import (
    JAAS_SUFFIX,
    LISTENER_PREFIX_RE,
    SUPPORTED_SECURITY_PROTOCOLS,
    Listener,
    parse_listener,
    parse_listener_overrides,
    parse_protocol_map,
)
from tidegate.config.properties import parse_overrides, read_properties
from tidegate.config.topic import TOPIC_CONFIG, topic_log_config
from tidegate.log.config import LogConfig


def _broker_hint(name: str) -> str:
    if name in TOPIC_CONFIG:
        syns = TOPIC_CONFIG[name].synonyms
        if syns:
            return f"{name} is a topic-level configuration; the broker-level key is {syns[0].name}"
        return f"{name} is a topic-level configuration"
    close = difflib.get_close_matches(name, list(BROKER_KEYS), n=1, cutoff=0.8)
    return f"did you mean '{close[0]}'?" if close else ""


BROKER_CONFIG = ConfigDef(BROKER_KEYS.values(), scope=Scope.BROKER, hint=_broker_hint)


def validate_queued_max_request_bytes(value: int, socket_request_max_bytes: int) -> None:
    """KIP-72's rule for ``queued.max.request.bytes``: <= 0 (no pool) or at least the
    largest request. Raises ConfigError (a ValueError) naming the key otherwise.

    The one copy of the rule: BrokerConfig checks it when loading, and
    ``tidegate.network.memory_pool.create_pool`` when it builds a pool."""
    if 0 < value < socket_request_max_bytes:
        raise ConfigError.invalid(
            "queued.max.request.bytes",
            value,
            f"Value must be <= 0 (no bound) or at least socket.request.max.bytes "
            f"({socket_request_max_bytes}), so that the largest allowed request fits in the pool",
        )


class BrokerConfig:
    """Validated, typed broker configuration.

    ``BrokerConfig(props)`` takes a mapping of key -> value (strings as in a
    properties file, or already typed values such as ``3`` or ``True``);
    ``BrokerConfig.load(path, overrides)`` reads a file then applies overrides.
    Unset keys take their defaults. Raises ConfigError on any unknown key,
    invalid value or inconsistent combination.
    """

    definition = BROKER_CONFIG

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        originals = dict(props or {})
        prefixed = {n: v for n, v in originals.items() if LISTENER_PREFIX_RE.fullmatch(n)}
        unknown = [name for name in originals if name not in BROKER_CONFIG and name not in prefixed]
        if unknown:
            errors = [BROKER_CONFIG.unknown(name) for name in unknown]
            message = "; ".join(str(e) for e in errors)
            raise ConfigError(message, name=unknown[0], value=unknown[0])
        values = {name: key.default for name, key in BROKER_CONFIG.items()}
        for name, raw in originals.items():
            if name not in prefixed:
                values[name] = BROKER_CONFIG.parse_value(name, raw)
        self._originals = MappingProxyType(originals)
        self._values = MappingProxyType(values)
        self._protocol_map = MappingProxyType(
            parse_protocol_map(
                "listener.security.protocol.map", values["listener.security.protocol.map"]
            )
        )
        self._listeners = self._build_listeners("listeners", values["listeners"])
        self._listener_overrides = parse_listener_overrides(
            prefixed, (lst.name for lst in self._listeners), BROKER_CONFIG.parse_value
        )
        self._validate_security()
        self._validate_advertised()
        self._validate_queued_max_request_bytes()
        self._log_config = topic_log_config(self, {})

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def load(
        cls, properties_path: str | Path | None = None, overrides: Sequence[str] = ()
    ) -> BrokerConfig:
        """Read ``properties_path`` (if given), then apply ``key=value`` overrides."""
        props = read_properties(properties_path) if properties_path is not None else {}
        props.update(parse_overrides(overrides))
        return cls(props)

    def _build_listeners(self, key: str, entries: list[str]) -> tuple[Listener, ...]:
        listeners = tuple(parse_listener(e, self._protocol_map, key=key) for e in entries)
        for listener in listeners:
            if listener.security_protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError.invalid(
                    key,
                    str(listener),
                    f"Security protocol {listener.security_protocol} is not supported yet; "
                    "this release of tidegate implements only PLAINTEXT",
                )
        return listeners

    def listener_get(self, listener: str, name: str) -> Any:
        """A key's value for one listener: its ``listener.name.<listener>.`` override, else
        the broker-wide value (None for an unset jaas config)."""
        overrides = self._listener_overrides.get(listener.upper(), {})
        if name in overrides:
            return overrides[name]
        if name.endswith(JAAS_SUFFIX):
            return None
        return self.get(name)

    def _validate_security(self) -> None:
        for lst in self._listeners:
            if lst.security_protocol in ("SSL", "SASL_SSL"):
                location = self.listener_get(lst.name, "ssl.keystore.location")
                chain = self.listener_get(lst.name, "ssl.keystore.certificate.chain")
                key = self.listener_get(lst.name, "ssl.keystore.key")
                if location is None and (chain is None or key is None):
                    raise ConfigError.invalid(
                        "listeners",
                        str(lst),
                        f"Listener {lst.name} uses {lst.security_protocol}, which needs "
                        "ssl.keystore.location (PEM with key and certificate chain) or both "
                        "ssl.keystore.certificate.chain and ssl.keystore.key",
                    )

    #: tidegate's default for queued.max.request.bytes when unset (see docs/configuration.md).
    DEFAULT_QUEUED_MAX_REQUEST_BYTES = 268435456

    @property
    def queued_max_request_bytes(self) -> int:
        """The KIP-72 pool size in force: the configured value, or tidegate's bounded default."""
        value = self._values["queued.max.request.bytes"]
        return self._default_queued_max_request_bytes() if value is None else value

    def _default_queued_max_request_bytes(self) -> int:
        """Unset: 256 MiB, or socket.request.max.bytes if larger (the largest request fits)."""
        return max(self.DEFAULT_QUEUED_MAX_REQUEST_BYTES, self._values["socket.request.max.bytes"])

    def _validate_queued_max_request_bytes(self) -> None:
        value = self._values["queued.max.request.bytes"]
        if value is None:
            return
        validate_queued_max_request_bytes(value, self._values["socket.request.max.bytes"])

    def _validate_advertised(self) -> None:
        explicit = self._values["advertised.listeners"]
        if explicit is None:
            advertised = self._listeners
        else:
            advertised = self._build_listeners("advertised.listeners", explicit)
            names = [lst.name for lst in self._listeners]
            for lst in advertised:
                if lst.name not in names:
                    raise ConfigError.invalid(
                        "advertised.listeners",
                        str(lst),
                        f"Listener {lst.name} is not defined in listeners; advertised "
                        f"listener names must be among: {', '.join(names)}",
                    )
        for lst in advertised:
            if lst.host in ("0.0.0.0", "::"):
                raise ConfigError.invalid(
                    "advertised.listeners",
                    str(lst),
                    f"Cannot advertise the non-routable meta-address {lst.host}; set "
                    "advertised.listeners to an address clients can reach (or bind with an "
                    "empty host, e.g. PLAINTEXT://:9092, to advertise this machine's hostname)",
                )
        self._advertised_raw = advertised

    # ---- generic access ----------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The typed value of a broker key (its default if unset; None for unset nullable keys)."""
        try:
            return self._values[name]
        except KeyError:
            raise BROKER_CONFIG.unknown(name) from None

    @property
    def originals(self) -> Mapping[str, Any]:
        """What the user set (file + overrides), unparsed."""
        return self._originals

    def is_default(self, name: str) -> bool:
        if name not in BROKER_CONFIG:
            raise BROKER_CONFIG.unknown(name)
        return name not in self._originals

    def source(self, name: str) -> ConfigSource:
        """STATIC_BROKER_CONFIG if set in the file/overrides, else DEFAULT_CONFIG."""
        return (
            ConfigSource.DEFAULT_CONFIG
            if self.is_default(name)
            else ConfigSource.STATIC_BROKER_CONFIG
        )

    def as_dict(self) -> dict[str, Any]:
        """Every broker key's typed value."""
        return dict(self._values)

    def topic_default(self, name: str) -> Any:
        """A topic key's value for topics that do not override it (from its broker synonyms)."""
        key = TOPIC_CONFIG.get(name)
        if key is None:
            raise TOPIC_CONFIG.unknown(name)
        return resolve(key, self._values)

    def _effective_default(self, name: str) -> str | None:
        """The default in force for a key whose table default is None but which is never
        unbounded when unset (queued.max.request.bytes), as a string; None otherwise."""
        if name == "queued.max.request.bytes":
            return convert_to_string(self._default_queued_max_request_bytes())
        return None

    def describe(self) -> list[ConfigEntry]:
        """DescribeConfigs entries for every broker key (all read-only: no dynamic configs).

        An unset key reports its default with source DEFAULT_CONFIG. For a key whose
        default is computed (queued.max.request.bytes: max(256 MiB,
        socket.request.max.bytes)) that is the value in force, not null.
        """
        entries = []
        for name, key in BROKER_CONFIG.items():
            value = None if key.sensitive else convert_to_string(self._values[name])
            computed = self._effective_default(name)
            if value is None and computed is not None:
                value = computed
            synonyms = []
            if name in self._originals:
                synonyms.append(ConfigSynonym(name, value, ConfigSource.STATIC_BROKER_CONFIG))
            if key.default is not None:
                default = None if key.sensitive else key.default_string
                synonyms.append(ConfigSynonym(name, default, ConfigSource.DEFAULT_CONFIG))
            elif computed is not None:
                synonyms.append(ConfigSynonym(name, computed, ConfigSource.DEFAULT_CONFIG))
            entries.append(
                ConfigEntry(
                    name,
                    value,
                    self.source(name),
                    True,
                    key.sensitive,
                    key.type,
                    key.doc,
                    tuple(synonyms),
                )
            )
        return entries

    # ---- convenience properties --------------------------------------------------------
    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Endpoints to bind (host "" = all interfaces, port 0 = ephemeral)."""
        return self._listeners

    @cached_property
    def advertised_listeners(self) -> tuple[Listener, ...]:
        """Endpoints for clients: advertised.listeners, else listeners. An empty host is
        replaced by this machine's fully qualified hostname (Kafka's behaviour). A port of 0
        means "the port the same-named listener actually bound"."""
        fqdn = None
        result = []
        for lst in self._advertised_raw:
            if lst.host == "":
                fqdn = fqdn or socket.getfqdn()
                lst = dataclasses.replace(lst, host=fqdn)
            result.append(lst)
        return tuple(result)

    @property
    def listener_security_protocol_map(self) -> Mapping[str, str]:
        return self._protocol_map

    @property
    def log_dir(self) -> Path:
        """The single log directory: log.dirs if set, else log.dir."""
        dirs = self._values["log.dirs"]
        return Path(dirs[0] if dirs is not None else split_list(self._values["log.dir"])[0])

    @property
    def node_id(self) -> int:
        return self._values["node.id"]

    @property
    def cluster_id(self) -> str | None:
        """The configured cluster id, or None (the broker then uses meta.properties)."""
        return self._values["cluster.id"]

    @property
    def num_partitions(self) -> int:
        return self._values["num.partitions"]

    @property
    def default_replication_factor(self) -> int:
        return self._values["default.replication.factor"]

    @property
    def auto_create_topics_enable(self) -> bool:
        return self._values["auto.create.topics.enable"]

    @property
    def log_segment_bytes(self) -> int:
        return self._values["log.segment.bytes"]

    @property
    def log_roll_ms(self) -> int:
        """Effective: log.roll.ms, else log.roll.hours in ms."""
        return self.topic_default("segment.ms")

    @property
    def log_retention_ms(self) -> int:
        """Effective: log.retention.ms > .minutes > .hours, in ms; -1 = unlimited."""
        return self.topic_default("retention.ms")

    @property
    def log_retention_bytes(self) -> int:
        return self._values["log.retention.bytes"]

    @property
    def log_retention_check_interval_ms(self) -> int:
        return self._values["log.retention.check.interval.ms"]

    @property
    def log_flush_interval_messages(self) -> int:
        return self._values["log.flush.interval.messages"]

    @property
    def log_flush_interval_ms(self) -> int:
        """Effective: log.flush.interval.ms, else log.flush.scheduler.interval.ms (Kafka).
        With the defaults this is Long.MAX: no time-based flush."""
        return self.topic_default("flush.ms")

    @property
    def log_flush_scheduler_interval_ms(self) -> int:
        return self._values["log.flush.scheduler.interval.ms"]

    @property
    def log_index_interval_bytes(self) -> int:
        return self._values["log.index.interval.bytes"]

    @property
    def log_message_timestamp_type(self) -> str:
        return self._values["log.message.timestamp.type"]

    @property
    def socket_request_max_bytes(self) -> int:
        return self._values["socket.request.max.bytes"]

    @property
    def message_max_bytes(self) -> int:
        return self._values["message.max.bytes"]

    @property
    def log_config(self) -> LogConfig:
        """The LogConfig of a topic without overrides."""
        return self._log_config

    def __repr__(self) -> str:
        def shown(name: str, value: Any) -> Any:
            key = BROKER_CONFIG.get(name)
            if name.endswith(JAAS_SUFFIX):
                return "[hidden]"
            if key is None:  # a listener override: hidden if the base key is sensitive
                m = LISTENER_PREFIX_RE.fullmatch(name)
                key = BROKER_CONFIG.get(m["key"]) if m else None
            return "[hidden]" if key is not None and key.sensitive else value

        return f"BrokerConfig({ {n: shown(n, v) for n, v in self._originals.items()}!r})"
