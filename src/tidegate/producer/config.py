"""Producer configuration: Kafka's keys, defaults and validation rules.

``Producer({"bootstrap.servers": "host:9092", "acks": "all", ...})``. Unknown keys
are refused with the key's name; so are Kafka keys for features this producer does
not have (serializers, interceptors), unless they are given their default value. The security
keys (``security.protocol``, ``sasl.*``, ``ssl.*``) are those of
:class:`tidegate.client.security.ClientSecurity`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.client.security import SECURITY_KEYS, ClientSecurity, SecurityConfigError
from tidegate.config.definitions import ConfigError
from tidegate.record.compression import codec_id
from tidegate.utils import INT32_MAX

__all__ = ["ConfigError", "ProducerConfig"]

log = logging.getLogger("tidegate.producer")




@dataclass
class ProducerConfig:
    bootstrap_servers: str
    client_id: str = "tidegate-producer"
    acks: int = -1
    batch_size: int = 16384
    linger_ms: int = 5
    buffer_memory: int = 33554432
    buffer_memory_allocation_strategy: str = "full"
    max_block_ms: int = 60000
    max_request_size: int = 1048576
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    retries: int = INT32_MAX
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    max_in_flight_requests_per_connection: int = 5
    compression_type: int = 0
    enable_idempotence: bool = True
    enable_idempotence_explicit: bool = False
    partitioner: Any = None
    partitioner_ignore_keys: bool = False
    partitioner_adaptive_partitioning_enable: bool = True
    partitioner_availability_timeout_ms: int = 0
    metadata_max_age_ms: int = 300000
    metadata_max_idle_ms: int = 300000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    socket_connection_setup_timeout_ms: int = 10000
    send_buffer_bytes: int = 131072
    receive_buffer_bytes: int = 32768
    metrics_sample_window_ms: int = 30000
    metrics_num_samples: int = 2
    transaction_timeout_ms: int = 60000
    transactional_id: str | None = None
    security: ClientSecurity = field(default_factory=ClientSecurity)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, conf: Mapping[str, Any]) -> ProducerConfig:
        conf = dict(conf)
        if "bootstrap.servers" not in conf:
            raise ConfigError("bootstrap.servers is required")
        kw: dict[str, Any] = {"bootstrap_servers": _str(conf, "bootstrap.servers")}
        explicit = set(conf)
        try:
            kw["security"] = ClientSecurity.from_config(conf)
        except SecurityConfigError as exc:
            raise ConfigError(str(exc)) from None
        for key, value in conf.items():
            if key == "bootstrap.servers" or key in SECURITY_KEYS:
                continue
            parser = _PARSERS.get(key)
            if parser is None:
                if key in _UNSUPPORTED:
                    default = _UNSUPPORTED[key]
                    if str(value).lower() != str(default).lower():
                        raise ConfigError(
                            f"{key}={value!r} is not supported by tidegate's producer"
                            f" (only {default!r})"
                        )
                    continue
                raise ConfigError(f"unknown producer config {key!r}")
            attr, fn = parser
            try:
                kw[attr] = fn(value)
            except ConfigError:
                raise
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value {value!r} for {key}: {exc}") from None
        cfg = cls(**kw)
        cfg.enable_idempotence_explicit = "enable.idempotence" in explicit
        cfg._validate(explicit)
        return cfg

    def _validate(self, explicit: set[str]) -> None:
        for name in (
            "batch_size",
            "linger_ms",
            "max_block_ms",
            "retries",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "metadata_max_age_ms",
            "reconnect_backoff_ms",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name.replace('_', '.')} must be >= 0")
        for name in (
            "buffer_memory",
            "max_request_size",
            "request_timeout_ms",
            "max_in_flight_requests_per_connection",
            "delivery_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '.')} must be >= 1")
        if self.acks not in (-1, 0, 1):
            raise ConfigError(f"acks must be all, -1, 0 or 1, got {self.acks}")
        # delivery.timeout.ms >= linger.ms + request.timeout.ms (Kafka: error if the user
        # set it, otherwise raised to the sum)
        floor = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < floor:
            if "delivery.timeout.ms" in explicit:
                raise ConfigError(
                    f"delivery.timeout.ms should be equal to or larger than linger.ms + "
                    f"request.timeout.ms ({floor})"
                )
            self.delivery_timeout_ms = floor
        if self.transaction_timeout_ms < 1:
            raise ConfigError("transaction.timeout.ms must be >= 1")
        # idempotence: on by default; silently off when other settings rule it out,
        # an error when it was asked for explicitly (Kafka's
        # postProcessAndValidateIdempotenceConfigs)
        if self.enable_idempotence:
            conflicts = []
            if self.max_in_flight_requests_per_connection > 5:
                conflicts.append("max.in.flight.requests.per.connection must be <= 5")
            if self.retries == 0:
                conflicts.append("retries must be > 0")
            if self.acks != -1:
                conflicts.append("acks must be all")
            if conflicts:
                if self.enable_idempotence_explicit:
                    raise ConfigError("enable.idempotence=true requires: " + "; ".join(conflicts))
                log.info("idempotence disabled: %s", "; ".join(conflicts))
                self.enable_idempotence = False
        # checked after idempotence, which the lines above may have switched off
        if self.transactional_id is not None and not self.enable_idempotence:
            raise ConfigError("Cannot set a transactional.id without also enabling idempotence.")

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def strategy_incremental(self) -> bool:
        return self.buffer_memory_allocation_strategy == "incremental"


def _str(conf: Mapping[str, Any], key: str) -> str:
    v = conf[key]
    if isinstance(v, (list, tuple)):
        return ",".join(v)
    return str(v)


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise TypeError("expected an integer")
    return int(v)


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _acks(v: Any) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ValueError("expected all, -1, 0 or 1")


def _transactional_id(v: Any) -> str | None:
    # Kafka's NonEmptyString validator; None is the default (not transactional)
    if v is None:
        return None
    s = str(v)
    if not s.strip():
        raise ValueError("String may not be empty")
    return s


def _strategy(v: Any) -> str:
    s = str(v).strip().lower()
    if s not in ("full", "incremental"):
        raise ValueError("expected full or incremental")
    return s


def _compression(v: Any) -> int:
    return codec_id(str(v).strip().lower())


def _partitioner(v: Any) -> Any:
    from .partitioner import RoundRobinPartitioner

    if v is None or v == "" or v == "default":
        return None
    if callable(v) and not isinstance(v, type):
        return v
    if isinstance(v, type):
        return v()
    s = str(v)
    if s in (
        "round_robin",
        "roundrobin",
        "RoundRobinPartitioner",
        "org.apache.kafka.clients.producer.RoundRobinPartitioner",
    ):
        return RoundRobinPartitioner()
    raise ValueError(
        "expected None, 'round_robin' or a callable(topic, key, num_partitions, "
        "available_partitions) -> int"
    )


_PARSERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "client.id": ("client_id", str),
    "acks": ("acks", _acks),
    "batch.size": ("batch_size", _int),
    "linger.ms": ("linger_ms", _int),
    "buffer.memory": ("buffer_memory", _int),
    "buffer.memory.allocation.strategy": ("buffer_memory_allocation_strategy", _strategy),
    "max.block.ms": ("max_block_ms", _int),
    "max.request.size": ("max_request_size", _int),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "retries": ("retries", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "compression.type": ("compression_type", _compression),
    "enable.idempotence": ("enable_idempotence", _bool),
    "transactional.id": ("transactional_id", _transactional_id),
    "transaction.timeout.ms": ("transaction_timeout_ms", _int),
    "partitioner.class": ("partitioner", _partitioner),
    "partitioner.ignore.keys": ("partitioner_ignore_keys", _bool),
    "partitioner.adaptive.partitioning.enable": ("partitioner_adaptive_partitioning_enable", _bool),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "metadata.max.idle.ms": ("metadata_max_idle_ms", _int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "socket.connection.setup.timeout.ms": ("socket_connection_setup_timeout_ms", _int),
    "send.buffer.bytes": ("send_buffer_bytes", _int),
    "receive.buffer.bytes": ("receive_buffer_bytes", _int),
    "metrics.sample.window.ms": ("metrics_sample_window_ms", _int),
    "metrics.num.samples": ("metrics_num_samples", _int),
}

#: Kafka producer keys accepted only at their default (features not implemented).
_UNSUPPORTED: dict[str, Any] = {
    "key.serializer": "None",
    "value.serializer": "None",
    "interceptor.classes": "",
    "compression.gzip.level": "-1",
    "compression.zstd.level": "3",
    "compression.lz4.level": "9",
    "connections.max.idle.ms": "540000",
    # KIP-794's exclusion of slow brokers from sticky choices is not implemented
    "partitioner.availability.timeout.ms": "0",
}
