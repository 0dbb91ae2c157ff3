"""The broker's configuration: ``BROKER_CONFIG`` (the broker keys as a ConfigDef)
and :class:`BrokerConfig`, the validated, typed configuration a broker runs with.

``BrokerConfig`` parses every key against the table in :mod:`.broker_keys`,
builds the listeners (:mod:`.listeners`), checks the combinations no single key
can (keystores for SSL listeners, advertised listeners, KIP-72's
``queued.max.request.bytes`` rule, which lives here and which the network
layer's memory pool imports) and resolves the topic defaults (:mod:`.topic`).
It is the top of the config package: no other config module imports it.

It also holds Kafka's dynamic broker configs (KIP-226, ``DynamicBrokerConfig``): the
cluster-default and per-broker layers that IncrementalAlterConfigs and AlterConfigs
set on a BROKER resource. The effective value of a key is, in Kafka's precedence, the
per-broker dynamic value, the cluster-default dynamic value, the static value
(properties file, ``--override``), or the key's default; :meth:`BrokerConfig.get`,
the properties and :meth:`BrokerConfig.topic_default` always answer with it.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tidegate.config.broker_keys import BROKER_KEYS
from tidegate.config.definitions import (
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Scope,
    UpdateMode,
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
    import difflib  # only for a key nobody knows

    close = difflib.get_close_matches(name, list(BROKER_KEYS), n=1, cutoff=0.8)
    return f"did you mean '{close[0]}'?" if close else ""


BROKER_CONFIG = ConfigDef(BROKER_KEYS.values(), scope=Scope.BROKER, hint=_broker_hint)

#: Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``: the names one broker setting may
#: be given under, in precedence order (DescribeConfigs lists them as synonyms).
BROKER_SYNONYMS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        **dict.fromkeys(_roll := ("log.roll.ms", "log.roll.hours"), _roll),
        **dict.fromkeys(_jitter := ("log.roll.jitter.ms", "log.roll.jitter.hours"), _jitter),
        "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        **dict.fromkeys(
            _ret := ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), _ret
        ),
    }
)

#: Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS``: dynamic in Kafka only with a listener
#: prefix, so without one they are refused with Kafka's own message.
SECURITY_RECONFIGURABLE = frozenset(
    {
        "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
        "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
        "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)  # fmt: skip


def scala_set(names: Sequence[str]) -> str:
    """How Kafka's messages print a set of config names: ``Set(a, b)``."""
    return f"Set({', '.join(names)})"


#: the ``listener.name.<l>.`` keys a per-broker dynamic config may change (Kafka's
#: ListenerConnectionQuota reconfigurables; the TLS and SASL ones stay static here)
DYNAMIC_LISTENER_KEYS = ("max.connections", "max.connection.creation.rate")
#: the key KIP-966 keeps in the cluster default layer (:meth:`BrokerConfig.cluster_min_isr_record`)
MIN_INSYNC_REPLICAS = "min.insync.replicas"


def dynamic_listener_key(name: str) -> tuple[str, str] | None:
    """(LISTENER, key) of a dynamically changeable ``listener.name.<l>.<key>``, else None."""
    match = LISTENER_PREFIX_RE.fullmatch(name)
    if match is None or match["key"] not in DYNAMIC_LISTENER_KEYS:
        return None
    return match["listener"].upper(), match["key"]


def _typed_key(name: str) -> ConfigKey | None:
    """The definition of a broker key; for a per-listener connection limit, its base
    key's (Kafka types ``listener.name.<l>.<key>`` as ``<key>``); None if unknown."""
    found = dynamic_listener_key(name)
    return BROKER_CONFIG.get(found[1] if found is not None else name)


def is_dynamic(name: str) -> bool:
    """Whether IncrementalAlterConfigs/AlterConfigs may change the broker key ``name``
    (a key no table line defines counts as dynamic: Kafka stores such custom keys)."""
    key = BROKER_CONFIG.get(name)
    if key is None:
        return not LISTENER_PREFIX_RE.fullmatch(name) or dynamic_listener_key(name) is not None
    return key.update_mode is not UpdateMode.READ_ONLY


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
        self._static_values = MappingProxyType(values)
        self._values = self._static_values
        #: the dynamic layers (raw strings as set): cluster default and this broker's
        self._dynamic_default: dict[str, str] = {}
        self._dynamic_broker: dict[str, str] = {}
        #: the per-broker layer's listener.name.<l>.max.connections/.max.connection.creation.rate
        self._dynamic_listener: dict[str, dict[str, Any]] = {}
        #: called after every dynamic change (Kafka's Reconfigurables), e.g. the socket
        #: server re-trying connections held for a limit that may have been raised
        self.reconfigurables: list[Callable[[], None]] = []
        self._protocol_map = MappingProxyType(
            parse_protocol_map(
                "listener.security.protocol.map", values["listener.security.protocol.map"]
            )
        )
        controllers = {n.upper() for n in values["controller.listener.names"] or ()}
        every = self._build_listeners("listeners", values["listeners"])
        #: Kafka's KRaft controller listeners (controller.listener.names): not bound here
        self.controller_listeners = tuple(lst for lst in every if lst.name.upper() in controllers)
        self._listeners = tuple(lst for lst in every if lst.name.upper() not in controllers)
        if not self._listeners:
            raise ConfigError.invalid(
                "listeners", ",".join(values["listeners"]),
                "every listener is a controller listener (controller.listener.names); "
                "clients need at least one other",
            )  # fmt: skip
        self._validate_inter_broker_listener(values["inter.broker.listener.name"])
        self._listener_overrides = parse_listener_overrides(
            prefixed, (lst.name for lst in self._listeners), BROKER_CONFIG.parse_value
        )
        self._validate_security()
        self._validate_advertised()
        self._validate_queued_max_request_bytes()
        self._check_connection_limits(self._values)
        self._validate_groups(values)
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

    def listener_override(self, listener: str, name: str) -> Any:
        """A key's ``listener.name.<listener>.`` override, None if the listener has none: a
        per-broker dynamic one (the connection limits) wins over the static one."""
        dynamic = self._dynamic_listener.get(listener.upper(), {})
        if name in dynamic:
            return dynamic[name]
        return self._listener_overrides.get(listener.upper(), {}).get(name)

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

    @classmethod
    def _validate_groups(cls, values: Mapping[str, Any]) -> None:
        """Kafka's GroupCoordinatorConfig and ShareGroupConfig requirements, in their order
        and with their messages (``Utils.require``): each protocol's heartbeat interval and
        session timeout within their bounds, the interval below the timeout; the share
        groups' record lock duration within its bounds, and as many share sessions as a
        share group may have members."""
        cls._validate_group_timeouts(values, "group.consumer.")
        cls._validate_group_timeouts(values, "group.share.")
        lock = "group.share.record.lock.duration.ms"
        _require(values, lock, values[lock] >= values["group.share.min.record.lock.duration.ms"],
                 f"{lock} must be greater than or equal to group.share.min.record.lock.duration.ms")
        _require(values, "group.share.max.record.lock.duration.ms",
                 values["group.share.max.record.lock.duration.ms"] >= values[lock],
                 f"group.share.max.record.lock.duration.ms must be greater than or equal to {lock}")
        _require(values, "group.share.max.share.sessions",
                 values["group.share.max.share.sessions"] >= values["group.share.max.size"],
                 "group.share.max.share.sessions must be greater than or equal to group.share.max.size")  # fmt: skip

    @staticmethod
    def _validate_group_timeouts(values: Mapping[str, Any], prefix: str) -> None:
        for what in ("heartbeat.interval.ms", "session.timeout.ms"):
            key, low_key, high_key = prefix + what, f"{prefix}min.{what}", f"{prefix}max.{what}"
            low, high, value = values[low_key], values[high_key], values[key]
            _require(values, high_key, high >= low, f"{high_key} must be greater than or equal to {low_key}")
            _require(values, key, value >= low, f"{key} must be greater than or equal to {low_key}")
            _require(values, key, value <= high, f"{key} must be less than or equal to {high_key}")
        interval = prefix + "heartbeat.interval.ms"
        _require(values, interval, values[interval] < values[prefix + "session.timeout.ms"],
                 f"{interval} must be less than {prefix}session.timeout.ms")  # fmt: skip

    def _validate_inter_broker_listener(self, name: str | None) -> None:
        names = [lst.name for lst in self._listeners]
        if name is not None and name.upper() not in (n.upper() for n in names):
            raise ConfigError.invalid(
                "inter.broker.listener.name", name,
                f"inter.broker.listener.name must be a listener name defined in listeners "
                f"(and not a controller listener): {', '.join(names)}",
            )  # fmt: skip

    def _validate_advertised(self) -> None:
        explicit = self._values["advertised.listeners"]
        if explicit is None:
            advertised = self._listeners
        else:
            controllers = {lst.name.upper() for lst in self.controller_listeners}
            advertised = tuple(
                lst for lst in self._build_listeners("advertised.listeners", explicit)
                if lst.name.upper() not in controllers
            )  # fmt: skip
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

    # ---- dynamic configs (KIP-226) --------------------------------------------------------
    def dynamic_configs(self, per_broker: bool) -> Mapping[str, str]:
        """The dynamic configs set on this broker (``per_broker``) or as the cluster default."""
        return MappingProxyType(self._dynamic_broker if per_broker else self._dynamic_default)

    def validate_dynamic(self, props: Mapping[str, str], per_broker: bool) -> None:
        """Check a whole new set of dynamic configs for one level as Kafka's
        ``DynamicBrokerConfig.validate`` does; ConfigError with Kafka's message (the
        request answers INVALID_REQUEST with it, KAFKA-13609).

        In Kafka's order: keys that cannot change at run time, TLS keys without a listener
        prefix, each value, then the whole configuration these layers would give. Keys no
        table line defines are accepted and kept, as Kafka keeps custom broker configs.
        """
        static = [
            n for n in props if not is_dynamic(n) and n not in SECURITY_RECONFIGURABLE
        ]
        if static:
            raise ConfigError(
                f"Cannot update these configs dynamically: {scala_set(static)}", name=static[0]
            )
        security = [n for n in props if n in SECURITY_RECONFIGURABLE]
        if security:
            raise ConfigError(
                "These security configs can be dynamically updated only per-listener using "
                f"the listener prefix: {scala_set(security)}",
                name=security[0],
            )
        per_listener = [n for n in props if dynamic_listener_key(n) is not None]
        if per_listener and not per_broker:
            raise ConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {scala_set(per_listener)}",
                name=per_listener[0],
            )
        for name, raw in props.items():
            if name in BROKER_CONFIG:
                BROKER_CONFIG.parse_value(name, raw)
        self._dynamic_listener_overrides(props)  # each listener named, each value valid
        layers = (props, self._dynamic_broker) if not per_broker else (self._dynamic_default, props)
        combined = self._layered(*layers)
        self._check_dynamic_combination(combined)
        self._check_connection_limits(combined)

    @staticmethod
    def _check_connection_limits(values: Mapping[str, Any]) -> None:
        """KafkaConfig's requirement: a per-IP limit of 0 needs overrides to let anyone in."""
        if values["max.connections.per.ip"] == 0 and not values["max.connections.per.ip.overrides"]:
            raise ConfigError(
                "requirement failed: max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set.",
                name="max.connections.per.ip",
            )

    @staticmethod
    def _check_dynamic_combination(values: Mapping[str, Any]) -> None:
        """Kafka's reconfiguration checks of a whole configuration (DynamicLogConfig's
        local retention rules); failing them is Kafka's "Invalid dynamic configuration"."""
        retention_ms = resolve(TOPIC_CONFIG["retention.ms"], values)
        local_ms = values["log.local.retention.ms"]
        retention_bytes = values["log.retention.bytes"]
        local_bytes = values["log.local.retention.bytes"]
        if (retention_ms != -1 and local_ms != -2 and (local_ms == -1 or local_ms > retention_ms)) or (
            retention_bytes > -1 and local_bytes != -2
            and (local_bytes == -1 or local_bytes > retention_bytes)
        ):  # fmt: skip
            raise ConfigError("Invalid dynamic configuration")

    def _layered(self, default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, Any]:
        """The typed values the static config gives with these dynamic layers on top
        (keys no table line defines are kept only in the layers)."""
        values = dict(self._static_values)
        for layer in (default, broker):
            for name, raw in layer.items():
                if name in BROKER_CONFIG:
                    values[name] = BROKER_CONFIG.parse_value(name, raw)
        return values

    def _dynamic_listener_overrides(self, props: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """{LISTENER: {key: value}} of a dynamic layer's per-listener connection limits,
        parsed as the static ``listener.name.<l>.`` keys are."""
        return parse_listener_overrides(
            {n: v for n, v in props.items() if dynamic_listener_key(n) is not None},
            (lst.name for lst in self._listeners), BROKER_CONFIG.parse_value,
        )  # fmt: skip

    def set_dynamic(self, props: Mapping[str, str], per_broker: bool) -> None:
        """Replace one dynamic layer (validated with :meth:`validate_dynamic`) and
        recompute every effective value and the topics' defaults."""
        if per_broker:
            self._dynamic_broker = dict(props)
            self._dynamic_listener = self._dynamic_listener_overrides(props)
        else:
            self._dynamic_default = dict(props)
        self._values = MappingProxyType(self._layered(self._dynamic_default, self._dynamic_broker))
        self._log_config = topic_log_config(self, {})
        for reconfigure in self.reconfigurables:
            reconfigure()

    def cluster_min_isr_record(self) -> dict[str, str] | None:
        """KIP-966 (eligible leader replicas, on by default in new Kafka 4.1+ clusters):
        the cluster default layer always holds ``min.insync.replicas``; when it does not,
        the new layer with the static value added (what Kafka's controller writes at
        activation), else None."""
        if MIN_INSYNC_REPLICAS in self._dynamic_default:
            return None
        return {**self._dynamic_default, MIN_INSYNC_REPLICAS: str(self._static_values[MIN_INSYNC_REPLICAS])}

    def load_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> list[str]:
        """Install persisted dynamic configs at start-up. As Kafka's
        ``fromPersistentProps``, an entry that is no longer valid (a key made static, a
        value refused) is dropped rather than stopping the broker; returns what was
        dropped, as "level: key (reason)" strings, for the log."""
        dropped: list[str] = []
        for per_broker, layer in ((False, default), (True, broker)):
            kept: dict[str, str] = {}
            for name, raw in layer.items():
                try:
                    self.validate_dynamic({**kept, name: raw}, per_broker)
                except ConfigError as exc:
                    dropped.append(f"{'broker' if per_broker else 'default'}: {name} ({exc})")
                    continue
                kept[name] = raw
            self.set_dynamic(kept, per_broker)
        return dropped

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
        """Where the value of ``name`` comes from: DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG (file/overrides) or
        DEFAULT_CONFIG."""
        if name in self._dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self._dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return (
            ConfigSource.DEFAULT_CONFIG
            if self.is_default(name)
            else ConfigSource.STATIC_BROKER_CONFIG
        )

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

    def config_synonyms(self, name: str) -> list[ConfigSynonym]:
        """Kafka's synonyms of the broker key ``name`` (``ConfigHelper.configSynonyms``):
        every name of the setting (:data:`BROKER_SYNONYMS`) set per broker, then as the
        cluster default, then statically, then their non-null defaults; those before the
        first named ``name`` are dropped. Values are null for sensitive keys."""
        key = _typed_key(name)
        hidden = key is None or key.sensitive  # Kafka hides keys of no known type
        names = BROKER_SYNONYMS.get(name, (name,))
        static = {  # a listener override is not a typed value: as given
            n: convert_to_string(self._static_values[n]) if n in self._static_values else str(self._originals[n])
            for n in names if n in self._originals
        }  # fmt: skip
        defaults = {}
        for n in names:
            default = BROKER_CONFIG[n].default_string if n in BROKER_CONFIG else None
            computed = self._effective_default(n)
            if default is not None or computed is not None:
                defaults[n] = default if default is not None else computed
        synonyms = [
            ConfigSynonym(n, None if hidden else layer[n], source)
            for layer, source in (
                (self._dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                (self._dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                (static, ConfigSource.STATIC_BROKER_CONFIG),
                (defaults, ConfigSource.DEFAULT_CONFIG),
            )
            for n in names
            if n in layer
        ]
        while synonyms and synonyms[0].name != name:
            del synonyms[0]
        return synonyms

    def describe(self, per_broker: bool = True) -> list[ConfigEntry]:
        """DescribeConfigs entries of this broker (``per_broker``: resource name = node
        id), or of the cluster default (resource name ``""``: only the keys set there), as
        Kafka's ``ConfigHelper`` makes them.

        Keys Kafka cannot change at run time are read-only. An unset nullable key reports
        null, except one whose default is computed (queued.max.request.bytes: max(256 MiB,
        socket.request.max.bytes)), which reports the value in force. A dynamic key no
        table line defines is reported as Kafka reports it: type UNKNOWN, sensitive.
        """
        if per_broker:
            names = list(BROKER_CONFIG)
            names += [n for n in {**self._dynamic_default, **self._dynamic_broker} if n not in BROKER_CONFIG]
        else:
            names = list(self._dynamic_default)
        entries = []
        for name in names:
            key = _typed_key(name)
            synonyms = self.config_synonyms(name)
            if not per_broker:
                synonyms = [
                    s for s in synonyms if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
                ]
            if key is None:
                value = None
            elif name not in BROKER_CONFIG:  # a per-listener limit: its layer's value
                value = self._dynamic_broker.get(name)
            elif not per_broker:
                value = None if key.sensitive else self._dynamic_default[name]
            else:
                value = None if key.sensitive else convert_to_string(self._values[name])
                if value is None and not key.sensitive:
                    value = self._effective_default(name)
            entries.append(
                ConfigEntry(
                    name,
                    value,
                    synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    not is_dynamic(name) or key is None,
                    key is None or key.sensitive,
                    key.type if key is not None else ConfigType.UNKNOWN,
                    key.doc if key is not None else "",
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


def _require(values: Mapping[str, Any], name: str, requirement: bool, message: str) -> None:
    """Kafka's ``Utils.require`` at broker start: refused with exactly ``message``."""
    if not requirement:
        raise ConfigError(message, name=name, value=values[name])
