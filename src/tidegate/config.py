"""Broker and topic configuration, the Kafka way.

One table (``_TABLE``) defines every key tidegate accepts, broker-level and
topic-level alike: name, type, default, validator, importance and a one-line
doc. Topic keys that have broker synonyms (``retention.ms`` <- ``log.retention.ms``
<- ``log.retention.minutes`` <- ``log.retention.hours``) take their type and
validator from the first synonym, so each rule is written exactly once.

Adding a key is one ``broker(...)`` line in ``_TABLE`` (plus a row in
docs/configuration.md; a unit test checks the doc lists every key). Unknown
keys are rejected, so a key should only be added once the broker honours it.

Values are parsed like Kafka's ``ConfigDef``: strings are trimmed, ``int`` is
32-bit, ``long`` 64-bit, booleans are ``true``/``false`` (any case), lists are
comma-separated. Error messages use Kafka's wording, e.g.
``Invalid value -3 for configuration num.partitions: Value must be at least 1``.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import enum
import re
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from tidegate.log.config import LogConfig
from tidegate.network.memory_pool import queued_max_request_bytes_problem

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

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS


# --------------------------------------------------------------------------------------
# errors and enums
# --------------------------------------------------------------------------------------
class ConfigError(ValueError):
    """A configuration problem; the message names the key and the bad value.

    ``name`` is the offending key (None when the problem is not about one key,
    e.g. an unreadable file) and ``value`` the rejected value.
    """

    def __init__(self, message: str, *, name: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.name = name
        self.value = value

    @classmethod
    def invalid(cls, name: str, value: Any, reason: str | None = None) -> ConfigError:
        """Kafka's ``ConfigException(name, value, message)`` wording."""
        message = f"Invalid value {_display(value)} for configuration {name}"
        if reason:
            message += f": {reason}"
        return cls(message, name=name, value=value)


class ConfigType(enum.IntEnum):
    """Value types; the numbers are DescribeConfigs' ``config_type`` ids (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7
    PASSWORD = 9

    @property
    def label(self) -> str:
        return self.name.lower()


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` ids (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# --------------------------------------------------------------------------------------
# validators
# --------------------------------------------------------------------------------------
class Validator:
    """Checks a parsed (typed) value; raises ConfigError. ``str()`` is the
    "valid values" text shown in help and docs. None (an unset nullable key) is
    never passed to a validator."""

    def __call__(self, name: str, value: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def __str__(self) -> str:
        return ""


@dataclass(frozen=True)
class Range(Validator):
    min: float | None = None
    max: float | None = None

    @classmethod
    def at_least(cls, minimum: float) -> Range:
        return cls(minimum, None)

    @classmethod
    def between(cls, minimum: float, maximum: float) -> Range:
        return cls(minimum, maximum)

    def __call__(self, name: str, value: Any) -> None:
        if self.min is not None and value < self.min:
            raise ConfigError.invalid(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError.invalid(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


@dataclass(frozen=True)
class OneOf(Validator):
    """The value (each element, for a list) must be one of ``options``.

    ``unsupported`` maps values Kafka accepts but tidegate does not (yet) to the
    reason, so users get "not supported" rather than "not a valid value".
    """

    options: tuple[str, ...]
    unsupported: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __call__(self, name: str, value: Any) -> None:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ConfigError.invalid(name, value, self._must_be())
        for item in items:
            if item in self.unsupported:
                raise ConfigError.invalid(name, item, self.unsupported[item])
            if item not in self.options:
                raise ConfigError.invalid(name, item, self._must_be())

    def _must_be(self) -> str:
        return "String must be one of: " + ", ".join(self.options)

    def __str__(self) -> str:
        return "[" + ", ".join(self.options) + "]"


@dataclass(frozen=True)
class Check(Validator):
    """A custom rule: ``fn(name, value)`` raises ConfigError; ``description`` is its help text."""

    fn: Callable[[str, Any], None]
    description: str = ""

    def __call__(self, name: str, value: Any) -> None:
        self.fn(name, value)

    def __str__(self) -> str:
        return self.description


# --------------------------------------------------------------------------------------
# listeners
# --------------------------------------------------------------------------------------
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = SECURITY_PROTOCOLS

# NAME://host:port; host may be empty (all interfaces), a name, IPv4, or IPv6
# (bracketed or not: the port is whatever follows the last colon).
_LISTENER_RE = re.compile(
    r"(?P<name>[A-Za-z0-9_-]+)://"
    r"(?:\[(?P<v6>[0-9A-Za-z:.%]*)\]|(?P<host>[0-9A-Za-z%._:-]*))"
    r":(?P<port>[0-9]+)"
)


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint. ``host == ""`` binds all interfaces;
    ``port == 0`` binds an ephemeral port. Names are upper-cased (Kafka normalises them)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _parse_endpoint(entry: str, key: str) -> tuple[str, str, int]:
    """``NAME://host:port`` -> (upper-cased name, host, port); ConfigError names ``key``."""
    match = _LISTENER_RE.fullmatch(entry.strip())
    if match is None:
        raise ConfigError.invalid(
            key,
            entry,
            "Unable to parse it as a listener; expected NAME://host:port, "
            "e.g. PLAINTEXT://127.0.0.1:9092",
        )
    host = match["v6"] if match["v6"] is not None else match["host"]
    port = int(match["port"])
    if port > 65535:
        raise ConfigError.invalid(key, entry, f"Port {port} is out of range [0,...,65535]")
    return match["name"].upper(), host, port


def parse_listener(
    entry: str,
    security_protocol_map: Mapping[str, str] | None = None,
    *,
    key: str = "listeners",
) -> Listener:
    """Parse one ``NAME://host:port``. The security protocol comes from the map
    (Kafka's default map when None); ConfigError names ``key`` on failure."""
    name, host, port = _parse_endpoint(entry, key)
    protocol_map = _DEFAULT_PROTOCOL_MAP if security_protocol_map is None else security_protocol_map
    protocol = protocol_map.get(name)
    if protocol is None:
        raise ConfigError.invalid(
            key,
            entry,
            f"No security protocol defined for listener {name} in "
            f"listener.security.protocol.map (add e.g. {name}:PLAINTEXT)",
        )
    return Listener(name, host, port, protocol)


def _check_listener_list(key: str, entries: list[str]) -> None:
    # syntax and uniqueness only: protocols are checked once the protocol map is known
    if not entries:
        raise ConfigError.invalid(key, "", "At least one listener is required")
    names: set[str] = set()
    ports: set[int] = set()
    for entry in entries:
        name, _host, port = _parse_endpoint(entry, key)
        if name in names:
            raise ConfigError.invalid(
                key, entries, f"Each listener must have a different name; {name} appears twice"
            )
        names.add(name)
        if key == "listeners" and port != 0:
            if port in ports:
                raise ConfigError.invalid(
                    key, entries, f"Each listener must have a different port; {port} appears twice"
                )
            ports.add(port)


def _parse_protocol_map(name: str, entries: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for entry in entries:
        listener, sep, protocol = entry.partition(":")
        listener, protocol = listener.strip().upper(), protocol.strip().upper()
        if not sep or not listener or not protocol:
            raise ConfigError.invalid(
                name, entry, "Map entry should be of form LISTENER_NAME:SECURITY_PROTOCOL"
            )
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid(
                name,
                entry,
                f"Unknown security protocol {protocol}; valid ones are "
                + ", ".join(SECURITY_PROTOCOLS),
            )
        if listener in result:
            raise ConfigError.invalid(name, entry, f"Listener {listener} is mapped twice")
        result[listener] = protocol
    return result


_DEFAULT_PROTOCOL_MAP = MappingProxyType({p: p for p in SECURITY_PROTOCOLS})

#: Keys a listener may override as ``listener.name.<listener>.<key>`` (Kafka's listener
#: prefix; the listener name in any case). ``<mechanism>.sasl.jaas.config`` exists only
#: in that prefixed form.
LISTENER_OVERRIDABLE = (
    "sasl.enabled.mechanisms",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
)
JAAS_SUFFIX = ".sasl.jaas.config"
_LISTENER_PREFIX_RE = re.compile(r"listener\.name\.(?P<listener>[A-Za-z0-9_-]+)\.(?P<key>.+)")


# --------------------------------------------------------------------------------------
# other custom checks
# --------------------------------------------------------------------------------------
def _check_single_log_dir(name: str, value: Any) -> None:
    # log.dirs is a list; log.dir is a string that Kafka also splits on commas
    dirs = value if isinstance(value, list) else _split_list(value)
    if len(dirs) != 1 or not dirs[0]:
        raise ConfigError.invalid(
            name,
            value,
            "tidegate supports exactly one log directory"
            + (f", but {len(dirs)} were given" if len(dirs) > 1 else ""),
        )


def _check_single_node(name: str, value: Any) -> None:
    if value != 1:
        raise ConfigError.invalid(
            name,
            value,
            "tidegate is a single-node broker, so every partition has exactly one replica; "
            "only 1 is supported",
        )


_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


def _check_cluster_id(name: str, value: Any) -> None:
    if not _CLUSTER_ID_RE.fullmatch(value):
        raise ConfigError.invalid(
            name, value, "A cluster id is 1-255 letters, digits, '.', '_' or '-'"
        )


def parse_metrics_listener(
    value: str | None, key: str = "metrics.listener"
) -> tuple[str, int] | None:
    """``http://host:port`` (optionally ending in ``/`` or ``/metrics``) -> (host, port);
    None when unset or empty (metrics off). ConfigError names ``key``."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    expected = "expected http://host:port, e.g. http://127.0.0.1:9404"
    try:
        url = urllib.parse.urlsplit(text)
        port = url.port
    except ValueError as exc:
        raise ConfigError.invalid(key, value, f"{exc}; {expected}") from None
    if url.scheme != "http":
        raise ConfigError.invalid(key, value, f"Only the http scheme is supported; {expected}")
    if not url.hostname or port is None:
        raise ConfigError.invalid(key, value, f"A host and a port are required; {expected}")
    if (
        url.username is not None
        or url.query
        or url.fragment
        or url.path not in ("", "/", "/metrics")
    ):
        raise ConfigError.invalid(key, value, f"Metrics are always served at /metrics; {expected}")
    return url.hostname, port


def _check_metrics_listener(name: str, value: Any) -> None:
    parse_metrics_listener(value, name)


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's format (a random UUID, base64url, 22 chars),
    never starting with '-' (Kafka avoids those: they look like CLI flags)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cid.startswith("-"):
            return cid


# --------------------------------------------------------------------------------------
# key definitions
# --------------------------------------------------------------------------------------
class Scope(enum.Enum):
    BROKER = "broker"
    TOPIC = "topic"


@dataclass(frozen=True)
class Synonym:
    """A broker key supplying a topic key's default; ``scale`` converts its unit to the
    topic key's (``log.retention.hours`` -> ``retention.ms``: 3600000)."""

    name: str
    scale: int = 1


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    importance: Importance
    doc: str
    scope: Scope = Scope.BROKER
    sensitive: bool = False
    # topic keys only: broker synonyms in precedence order (first non-null wins)
    synonyms: tuple[Synonym, ...] = ()
    # negative means unlimited: normalised to -1 (Kafka's retention semantics)
    unlimited_if_negative: bool = False

    @property
    def default_string(self) -> str | None:
        return convert_to_string(self.default)


def broker(
    name: str,
    type: ConfigType,
    default: Any,
    validator: Validator | None,
    importance: Importance,
    doc: str,
) -> ConfigKey:
    """A broker-level key (one line of the table)."""
    return ConfigKey(
        name, type, default, validator, importance, doc, sensitive=type is ConfigType.PASSWORD
    )


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
        type,  # type: ignore[arg-type]  # filled in from the synonym by ConfigDef
        default,
        validator,
        importance,  # type: ignore[arg-type]
        doc,
        scope=Scope.TOPIC,
        synonyms=syns,
        unlimited_if_negative=unlimited_if_negative,
    )


# short names for the table
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST, PASSWORD = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_listeners = Check(_check_listener_list, "NAME://host:port,...")
_UNSUPPORTED_MECHANISMS = {
    "GSSAPI": "GSSAPI (Kerberos) is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    "OAUTHBEARER": "OAUTHBEARER is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
}
_UNSUPPORTED_STORES = {
    t: f"{t} stores are not supported; convert to PEM (see docs/security.md)"
    for t in ("JKS", "PKCS12")
}
_log_dir = Check(_check_single_log_dir, "exactly one directory")
_single_node = Check(_check_single_node, "[1]")

# fmt: off
_TABLE: tuple[ConfigKey, ...] = (
    # ---- broker keys -------------------------------------------------------------------
    broker("listeners", LIST, "PLAINTEXT://127.0.0.1:9092", _listeners, HIGH,
           "Comma-separated NAME://host:port endpoints to bind; an empty host binds all "
           "interfaces, port 0 an ephemeral port."),
    broker("advertised.listeners", LIST, None, _listeners, HIGH,
           "Endpoints given to clients in metadata, named like listeners; if unset, the "
           "listeners themselves (an empty host is advertised as this machine's hostname)."),
    broker("listener.security.protocol.map", LIST,
           "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
           Check(_parse_protocol_map, "NAME:PROTOCOL,..."), LOW,
           "Maps listener names to security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, "
           "SASL_SSL). See docs/security.md."),
    broker("log.dirs", LIST, None, _log_dir, HIGH,
           "The directory holding the log data; overrides log.dir. tidegate supports "
           "exactly one directory."),
    broker("log.dir", STRING, "./tidegate-data", _log_dir, HIGH,
           "The log data directory, used when log.dirs is not set."),
    broker("node.id", INT, 1, Range.at_least(0), HIGH,
           "The id of this broker, as reported to clients in metadata."),
    broker("cluster.id", STRING, None, Check(_check_cluster_id, "[A-Za-z0-9._-]{1,255}"), MEDIUM,
           "The cluster id; if unset, one is generated and kept in meta.properties in the "
           "log directory."),
    broker("num.partitions", INT, 1, Range.at_least(1), MEDIUM,
           "The default number of partitions for new topics."),
    broker("default.replication.factor", INT, 1, _single_node, MEDIUM,
           "The default replication factor for new topics; a single node supports only 1."),
    broker("auto.create.topics.enable", BOOLEAN, True, None, HIGH,
           "Create a topic when a client asks for metadata of a topic that does not exist."),
    broker("log.segment.bytes", INT, 1073741824, Range.at_least(14), HIGH,
           "The maximum size of a single log segment file."),
    broker("log.roll.ms", LONG, None, Range.at_least(1), HIGH,
           "Roll a new segment after this many ms; if unset, log.roll.hours is used."),
    broker("log.roll.hours", INT, 168, Range.at_least(1), HIGH,
           "Roll a new segment after this many hours; secondary to log.roll.ms."),
    broker("log.retention.ms", LONG, None, Range.at_least(-1), HIGH,
           "Delete segments older than this many ms (-1: no time limit); if unset, "
           "log.retention.minutes is used."),
    broker("log.retention.minutes", INT, None, None, HIGH,
           "Retention in minutes, used if log.retention.ms is unset; if unset too, "
           "log.retention.hours is used."),
    broker("log.retention.hours", INT, 168, None, HIGH,
           "Retention in hours; tertiary to log.retention.ms and log.retention.minutes."),
    broker("log.retention.bytes", LONG, -1, None, HIGH,
           "Delete old segments while a partition is larger than this (-1: no size limit)."),
    broker("log.retention.check.interval.ms", LONG, 300000, Range.at_least(1), MEDIUM,
           "How often, in ms, the log checks for segments eligible for deletion."),
    broker("log.flush.interval.messages", LONG, LONG_MAX, Range.at_least(1), HIGH,
           "fsync a partition after this many messages have been appended to it."),
    broker("log.flush.interval.ms", LONG, None, Range.at_least(0), HIGH,
           "fsync a partition when its oldest unflushed message is this old (ms); if "
           "unset, log.flush.scheduler.interval.ms is used."),
    broker("log.flush.scheduler.interval.ms", LONG, LONG_MAX, Range.at_least(1), HIGH,
           "How often, in ms, the flusher checks whether any log needs flushing."),
    broker("log.flush.offset.checkpoint.interval.ms", INT, 60000, Range.at_least(0), HIGH,
           "How often, in ms, each partition's recovery point is checkpointed to disk."),
    broker("log.index.interval.bytes", INT, 4096, Range.at_least(0), MEDIUM,
           "Add an entry to the offset index every this many bytes of log."),
    broker("log.message.timestamp.type", STRING, "CreateTime",
           OneOf(("CreateTime", "LogAppendTime")), MEDIUM,
           "Record timestamps as sent by the producer (CreateTime) or as the append "
           "time (LogAppendTime)."),
    broker("socket.request.max.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The largest request the broker reads; larger requests close the connection."),
    broker("socket.receive.buffer.bytes", INT, 102400, Range.at_least(-1), HIGH,
           "SO_RCVBUF of accepted connections; -1: the OS default (autotuned). Bounds the "
           "kernel memory a connection muted for memory (KIP-72) can hold."),
    broker("fetch.purgatory.purge.interval.requests", INT, 1000, Range.at_least(1), MEDIUM,
           "Purge completed operations from the fetch purgatory's watcher lists when the "
           "estimated number of completed-but-watched fetches exceeds this."),
    broker("producer.purgatory.purge.interval.requests", INT, 1000, Range.at_least(1), MEDIUM,
           "The same for the produce purgatory (acks=all produces waiting for their fsync)."),
    broker("producer.id.expiration.ms", INT, 86400000, Range.at_least(1), LOW,
           "How long a partition keeps an idle producer id's state (epoch, last sequences) "
           "after that producer's last batch; a retry arriving later is not deduplicated."),
    broker("producer.id.expiration.check.interval.ms", INT, 600000, Range.at_least(1), LOW,
           "How often to remove producer ids idle for producer.id.expiration.ms."),
    broker("queued.max.request.bytes", LONG, None, None, MEDIUM,
           "KIP-72: bytes of request bodies the broker holds at once; <= 0 disables the bound. "
           "Unset: max(268435456, socket.request.max.bytes), so a broker is bounded out of the box. "
           "Otherwise must be >= socket.request.max.bytes."),
    broker("queued.max.requests", INT, 500, Range.at_least(1), HIGH,
           "The number of received requests the broker holds at once before it stops reading."),
    broker("message.max.bytes", INT, 1048588, Range.at_least(0), HIGH,
           "The largest record batch (after compression) the broker accepts."),
    # ---- client quotas (docs/quotas.md) ---------------------------------------------------
    broker("quota.window.num", INT, 11, Range.at_least(1), LOW,
           "The number of samples kept in memory for client quotas (each quota's Rate is "
           "measured over this many windows)."),
    broker("quota.window.size.seconds", INT, 1, Range.at_least(1), LOW,
           "The time span of each sample for client quotas; also the cap on one "
           "request_percentage throttle."),
    broker("metrics.listener", STRING, None, Check(_check_metrics_listener, "http://host:port"),
           MEDIUM,
           "Serve Prometheus metrics at http://host:port/metrics (port 0: ephemeral); unset "
           "or empty: no metrics endpoint and no per-request accounting. See docs/metrics.md."),
    # ---- security (docs/security.md) -----------------------------------------------------
    broker("sasl.enabled.mechanisms", LIST, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
           OneOf(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), _UNSUPPORTED_MECHANISMS), MEDIUM,
           "SASL mechanisms offered on SASL_PLAINTEXT and SASL_SSL listeners (Kafka's default, "
           "GSSAPI, is not supported). Overridable per listener."),
    broker("sasl.credentials.file", STRING, None, None, MEDIUM,
           "tidegate only: a JSON file of users: PLAIN passwords and SCRAM credentials (from a "
           "password, or pre-salted). See docs/security.md for the format."),
    broker("sasl.server.max.receive.size", INT, 524288, Range.at_least(1), LOW,
           "The largest request accepted before a SASL connection is authenticated; larger "
           "closes the connection."),
    broker("ssl.keystore.type", STRING, "PEM", OneOf(("PEM",), _UNSUPPORTED_STORES), MEDIUM,
           "Key store format; only PEM. Overridable per listener."),
    broker("ssl.keystore.location", STRING, None, None, HIGH,
           "PEM file with the server's private key and certificate chain (SSL, SASL_SSL). "
           "Overridable per listener."),
    broker("ssl.keystore.certificate.chain", PASSWORD, None, None, HIGH,
           "The server's certificate chain as PEM text (instead of ssl.keystore.location; with "
           "ssl.keystore.key)."),
    broker("ssl.keystore.key", PASSWORD, None, None, HIGH,
           "The server's private key as PEM text (with ssl.keystore.certificate.chain)."),
    broker("ssl.key.password", PASSWORD, None, None, HIGH,
           "Password of an encrypted private key."),
    broker("ssl.truststore.type", STRING, "PEM", OneOf(("PEM",), _UNSUPPORTED_STORES), MEDIUM,
           "Trust store format; only PEM."),
    broker("ssl.truststore.location", STRING, None, None, HIGH,
           "PEM file of CA certificates that client certificates are checked against."),
    broker("ssl.truststore.certificates", PASSWORD, None, None, HIGH,
           "CA certificates as PEM text (instead of ssl.truststore.location)."),
    broker("ssl.client.auth", STRING, "none", OneOf(("none", "requested", "required")), MEDIUM,
           "Client certificates on SSL/SASL_SSL listeners: none, requested (checked if sent) or "
           "required. On SSL listeners a client certificate's subject DN is the principal."),
    # ---- consumer groups (docs/groups.md) ------------------------------------------------
    broker("group.initial.rebalance.delay.ms", INT, 3000, Range.at_least(0), MEDIUM,
           "How long the first rebalance of an empty group waits for more members to join "
           "(again after each join, up to the rebalance timeout)."),
    broker("group.min.session.timeout.ms", INT, 6000, Range.at_least(0), MEDIUM,
           "The smallest session timeout a member may ask for (INVALID_SESSION_TIMEOUT below)."),
    broker("group.max.session.timeout.ms", INT, 1800000, Range.at_least(0), MEDIUM,
           "The largest session timeout a member may ask for (INVALID_SESSION_TIMEOUT above)."),
    broker("group.max.size", INT, INT_MAX, Range.at_least(1), MEDIUM,
           "The most members a group may have (GROUP_MAX_SIZE_REACHED beyond)."),
    broker("offsets.retention.minutes", INT, 10080, Range.at_least(1), HIGH,
           "Committed offsets of a group are deleted this long after the group became empty "
           "(or, for standalone consumers, after the commit)."),
    broker("offsets.retention.check.interval.ms", LONG, 600000, Range.at_least(1), HIGH,
           "How often committed offsets are checked for expiry."),
    broker("offset.metadata.max.bytes", INT, 4096, Range.at_least(0), HIGH,
           "The largest metadata string an offset commit may carry (OFFSET_METADATA_TOO_LARGE)."),
    broker("offsets.commit.timeout.ms", INT, 5000, Range.at_least(1), HIGH,
           "An offset commit waits at most this long for its record to be fsynced "
           "(REQUEST_TIMED_OUT after)."),
    broker("offsets.topic.segment.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The segment size of the internal __consumer_offsets topic."),
    broker("offsets.compaction.min.records", INT, 10000, Range.at_least(1), LOW,
           "tidegate only: rewrite __consumer_offsets once it holds more than this many records "
           "and more than 4 per live key (its compaction; see docs/groups.md)."),

    # ---- topic keys (CreateTopics configs, DescribeConfigs on a topic) -----------------
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
          type=INT, default=1, importance=MEDIUM, validator=_single_node),
)
# fmt: on


# --------------------------------------------------------------------------------------
# parsing typed values
# --------------------------------------------------------------------------------------
_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:NaN|Infinity)"
)


def _split_list(text: str) -> list[str]:
    text = text.strip()
    return [] if not text else re.split(r"\s*,\s*", text)


def parse_type(name: str, value: Any, type: ConfigType) -> Any:
    """Kafka's ``ConfigDef.parseType``: a string (or an already typed value) to ``type``."""
    if value is None:
        raise ConfigError.invalid(name, None, "Null value is not allowed")
    if type is ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ConfigError.invalid(name, value, "Expected value to be either true or false")
    if type in (ConfigType.INT, ConfigType.LONG):
        lo, hi = (INT_MIN, INT_MAX) if type is ConfigType.INT else (LONG_MIN, LONG_MAX)
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            number = None
        if number is None or not lo <= number <= hi:
            raise ConfigError.invalid(name, value, f"Not a number of type {type.name}")
        return number
    if type is ConfigType.DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _DOUBLE_RE.fullmatch(value.strip()):
            return float(value.strip().replace("Infinity", "inf"))
        raise ConfigError.invalid(name, value, "Not a number of type DOUBLE")
    if type is ConfigType.LIST:
        if isinstance(value, str):
            return _split_list(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value]
        raise ConfigError.invalid(name, value, "Expected a comma separated list")
    if type is ConfigType.PASSWORD:
        if isinstance(value, str):
            return value
        raise ConfigError.invalid(name, value, "Expected value to be a string")
    if isinstance(value, str):  # STRING
        return value.strip()
    raise ConfigError.invalid(name, value, "Expected value to be a string")


def convert_to_string(value: Any) -> str | None:
    """Kafka's ``ConfigDef.convertToString``: the DescribeConfigs form of a typed value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def _display(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------------------
# ConfigDef
# --------------------------------------------------------------------------------------
class ConfigDef(Mapping[str, ConfigKey]):
    """An ordered, read-only set of key definitions with parsing and validation."""

    def __init__(self, keys: Iterable[ConfigKey], *, scope: Scope) -> None:
        self.scope = scope
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self._keys:
                raise ValueError(f"configuration {key.name} is defined twice")
            self._keys[key.name] = key

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def unknown(self, name: str) -> ConfigError:
        if self.scope is Scope.TOPIC:
            message = f"Unknown topic config name: {name}"
        else:
            message = f"Unknown configuration '{name}'"
            hint = _broker_hint(name)
            if hint:
                message += f" ({hint})"
        return ConfigError(message, name=name, value=name)

    def parse_value(self, name: str, value: Any) -> Any:
        """Parse and validate one value; ConfigError for unknown keys and bad values."""
        key = self._keys.get(name)
        if key is None:
            raise self.unknown(name)
        parsed = parse_type(name, value, key.type)
        if key.validator is not None:
            key.validator(name, parsed)
        return parsed


def _broker_hint(name: str) -> str:
    if name in _TOPIC_KEYS:
        syns = _TOPIC_KEYS[name].synonyms
        if syns:
            return f"{name} is a topic-level configuration; the broker-level key is {syns[0].name}"
        return f"{name} is a topic-level configuration"
    close = difflib.get_close_matches(name, list(_BROKER_KEYS), n=1, cutoff=0.8)
    return f"did you mean '{close[0]}'?" if close else ""


def _resolve(key: ConfigKey, values: Mapping[str, Any]) -> Any:
    """A topic key's value from broker values: the first synonym that is not null."""
    for syn in key.synonyms:
        value = values.get(syn.name)
        if value is not None:
            value = value * syn.scale
            if key.unlimited_if_negative and value < 0:
                value = -1
            return value
    return key.default


def _typed_default(key: ConfigKey) -> ConfigKey:
    """Parse and validate a table default (Kafka's ConfigDef does the same at define time)."""
    if key.default is None:
        return key
    default = parse_type(key.name, key.default, key.type)
    if key.validator is not None:
        key.validator(key.name, default)
    return dataclasses.replace(key, default=default)


def _build() -> tuple[dict[str, ConfigKey], dict[str, ConfigKey]]:
    broker_keys = {k.name: _typed_default(k) for k in _TABLE if k.scope is Scope.BROKER}
    defaults = {k.name: k.default for k in broker_keys.values()}
    topic_keys: dict[str, ConfigKey] = {}
    for key in _TABLE:
        if key.scope is not Scope.TOPIC:
            continue
        if key.synonyms:
            first = broker_keys[key.synonyms[0].name]
            key = dataclasses.replace(
                key,
                type=key.type or first.type,
                validator=key.validator or first.validator,
                importance=key.importance or first.importance,
            )
            key = dataclasses.replace(key, default=_resolve(key, defaults))
        topic_keys[key.name] = _typed_default(key)
    return broker_keys, topic_keys


_BROKER_KEYS, _TOPIC_KEYS = _build()
BROKER_CONFIG = ConfigDef(_BROKER_KEYS.values(), scope=Scope.BROKER)
TOPIC_CONFIG = ConfigDef(_TOPIC_KEYS.values(), scope=Scope.TOPIC)


# --------------------------------------------------------------------------------------
# Java properties files and overrides
# --------------------------------------------------------------------------------------
_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java ``.properties`` text like ``java.util.Properties.load``.

    ``#``/``!`` comment lines, ``key=value`` / ``key: value`` / ``key value``,
    a trailing odd backslash continues the line (the next line's leading
    whitespace is dropped), ``\\t \\n \\r \\f \\uXXXX`` escapes and ``\\x`` -> ``x``.
    Later duplicates win. Trailing whitespace is kept, as Java does; typed
    parsing trims it.
    """
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, source, lineno)] = _unescape(value, source, lineno)
    return props


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    natural = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(natural):
        lineno = i + 1
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            line = natural[i].lstrip(_WHITESPACE) if i < len(natural) else ""
            i += 1
        parts.append(line)
        yield lineno, "".join(parts)


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    n = len(line)
    i = 0
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    i = min(i, n)
    key, j = line[:i], i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def _unescape(text: str, source: str, lineno: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = text[i + 1]
        if e == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source}, line {lineno}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(e, e))
            i += 2
    return "".join(out)


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file (UTF-8; a BOM is ignored). ConfigError if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"Properties file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Properties file {path} is not valid UTF-8: {exc.reason}") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read properties file {path}: {exc.strerror or exc}") from None
    return parse_properties(text, str(path))


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    """``key=value`` strings (kafka-server-start.sh's ``--override``) to a dict; later wins."""
    result: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"Invalid override '{item}': expected key=value, e.g. num.partitions=3",
                value=item,
            )
        result[key] = value
    return result


# --------------------------------------------------------------------------------------
# describe entries
# --------------------------------------------------------------------------------------
class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource


class ConfigEntry(NamedTuple):
    """One DescribeConfigs entry (ints for source/config_type are Kafka's wire ids)."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    config_type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = ()


# --------------------------------------------------------------------------------------
# BrokerConfig
# --------------------------------------------------------------------------------------
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
        prefixed = {n: v for n, v in originals.items() if _LISTENER_PREFIX_RE.fullmatch(n)}
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
            _parse_protocol_map(
                "listener.security.protocol.map", values["listener.security.protocol.map"]
            )
        )
        self._listeners = self._build_listeners("listeners", values["listeners"])
        self._listener_overrides = self._parse_listener_overrides(prefixed)
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

    def _parse_listener_overrides(self, prefixed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """``listener.name.<listener>.<key>`` (Kafka's listener prefix) for the keys in
        LISTENER_OVERRIDABLE and ``<mechanism>.sasl.jaas.config``."""
        names = {lst.name for lst in self._listeners}
        out: dict[str, dict[str, Any]] = {}
        for full, raw in prefixed.items():
            match = _LISTENER_PREFIX_RE.fullmatch(full)
            assert match is not None
            listener, key = match["listener"].upper(), match["key"]
            if listener not in names:
                raise ConfigError.invalid(
                    full, raw, f"Listener {listener} is not defined in listeners"
                )
            if key in LISTENER_OVERRIDABLE:
                value = BROKER_CONFIG.parse_value(key, raw)
            elif key.endswith(JAAS_SUFFIX) and key[: -len(JAAS_SUFFIX)].upper() in (
                "PLAIN",
                "SCRAM-SHA-256",
                "SCRAM-SHA-512",
            ):
                value = parse_type(full, raw, ConfigType.PASSWORD)
            else:
                raise ConfigError(
                    f"Unknown configuration '{full}' (a listener may override "
                    f"{', '.join(LISTENER_OVERRIDABLE)} and <mechanism>.sasl.jaas.config)",
                    name=full,
                    value=raw,
                )
            out.setdefault(listener, {})[key.lower() if key.endswith(JAAS_SUFFIX) else key] = value
        return out

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
        problem = queued_max_request_bytes_problem(value, self._values["socket.request.max.bytes"])
        if problem is not None:
            raise ConfigError.invalid("queued.max.request.bytes", value, problem)

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
        return _resolve(key, self._values)

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
        return Path(dirs[0] if dirs is not None else _split_list(self._values["log.dir"])[0])

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
                m = _LISTENER_PREFIX_RE.fullmatch(name)
                key = BROKER_CONFIG.get(m["key"]) if m else None
            return "[hidden]" if key is not None and key.sensitive else value

        return f"BrokerConfig({ {n: shown(n, v) for n, v in self._originals.items()}!r})"


# --------------------------------------------------------------------------------------
# topic configs
# --------------------------------------------------------------------------------------
def _parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for name, value in configs.items():
        if name not in TOPIC_CONFIG:
            raise TOPIC_CONFIG.unknown(name)
        if value is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}", name=name)
        value = TOPIC_CONFIG.parse_value(name, value)
        if TOPIC_CONFIG[name].unlimited_if_negative and value < 0:
            value = -1
        parsed[name] = value
    return parsed


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validate CreateTopics-style configs; returns them with canonical string values
    (trimmed, ``true``/``false``, lists comma-joined). ConfigError names the key."""
    return {name: convert_to_string(v) for name, v in _parse_topic_configs(configs).items()}


def topic_log_config(broker_cfg: BrokerConfig, topic_overrides: Mapping[str, str]) -> LogConfig:
    """The LogConfig of a topic: its overrides, else what the broker keys resolve to."""
    parsed = _parse_topic_configs(topic_overrides)
    kwargs = {}
    for field in dataclasses.fields(LogConfig):
        name = field.name.replace("_", ".")
        kwargs[field.name] = parsed[name] if name in parsed else broker_cfg.topic_default(name)
    return LogConfig(**kwargs)


def describe_topic_configs(
    broker_cfg: BrokerConfig, overrides: Mapping[str, str]
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
            default = BROKER_CONFIG[syn.name].default_string
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
