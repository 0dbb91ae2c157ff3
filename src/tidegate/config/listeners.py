"""Listeners, security-protocol maps and listener-prefixed overrides.

``listeners`` / ``advertised.listeners`` entries (``NAME://host:port``, parsed into
:class:`Listener`), ``listener.security.protocol.map``, the
``listener.name.<listener>.<key>`` overrides (Kafka's listener prefix) and
``metrics.listener``. The ``check_*`` functions are the validators the broker key
table (:mod:`.broker_keys`) uses; :class:`~.broker.BrokerConfig` combines the
parsed pieces.

``parse_listener_overrides`` takes the broker keys' parser as an argument, so this
module depends on :mod:`.definitions` only and the broker keys can use its checks.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tidegate.config.definitions import ConfigError, ConfigType, parse_type

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


def check_listener_list(key: str, entries: list[str]) -> None:
    """The ``listeners``/``advertised.listeners`` validator."""
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


def parse_protocol_map(name: str, entries: list[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` entries -> {LISTENER: PROTOCOL}."""
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


def check_protocol_map(name: str, entries: list[str]) -> None:
    """The ``listener.security.protocol.map`` validator."""
    parse_protocol_map(name, entries)


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
    "max.connections",
    "max.connection.creation.rate",
)
JAAS_SUFFIX = ".sasl.jaas.config"
LISTENER_PREFIX_RE = re.compile(r"listener\.name\.(?P<listener>[A-Za-z0-9_-]+)\.(?P<key>.+)")


def parse_listener_overrides(
    prefixed: Mapping[str, Any],
    listener_names: Iterable[str],
    parse_value: Callable[[str, Any], Any],
) -> dict[str, dict[str, Any]]:
    """``listener.name.<listener>.<key>`` (Kafka's listener prefix) for the keys in
    LISTENER_OVERRIDABLE and ``<mechanism>.sasl.jaas.config``: {LISTENER: {key: value}}.

    ``prefixed`` holds only keys matching LISTENER_PREFIX_RE; ``listener_names`` are the
    defined listeners; ``parse_value(key, raw)`` parses an overridable key's value."""
    names = set(listener_names)
    out: dict[str, dict[str, Any]] = {}
    for full, raw in prefixed.items():
        match = LISTENER_PREFIX_RE.fullmatch(full)
        assert match is not None
        listener, key = match["listener"].upper(), match["key"]
        if listener not in names:
            raise ConfigError.invalid(full, raw, f"Listener {listener} is not defined in listeners")
        if key in LISTENER_OVERRIDABLE:
            value = parse_value(key, raw)
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


# --------------------------------------------------------------------------------------
# metrics.listener
# --------------------------------------------------------------------------------------
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


def check_metrics_listener(name: str, value: Any) -> None:
    """The ``metrics.listener`` validator."""
    parse_metrics_listener(value, name)
