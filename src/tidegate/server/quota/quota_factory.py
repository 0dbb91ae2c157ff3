"""The broker's quota managers and their configuration: Kafka's QuotaFactory.QuotaManagers
with the KIP-546 half of ClientQuotaMetadataManager (AlterClientQuotas and
DescribeClientQuotas, persisted).

The arithmetic is :mod:`.client_quota_manager` and :mod:`.client_request_quota_manager`;
this module puts the three managers together:

* :class:`QuotaManagers` owns one manager per quota type, configured from
  ``quota.window.num`` and ``quota.window.size.seconds``.
* Throttling is each manager's ``throttle``: a ThrottledChannel on the manager's
  throttle timer, which the broker's one scheduler drives with the purgatories' timers
  (``QuotaManagers.throttle_timers``); KafkaApis decides the throttle and the shell
  mutes the connection until the channel ends it.
* :meth:`QuotaManagers.alter` / :meth:`QuotaManagers.describe` implement the two admin
  APIs with Kafka's validation, apply changes to the managers at once (live counters
  get their new bound on the next record, as Kafka re-evaluates sensors' quota
  configs), and persist the whole configuration to ``client-quotas.json`` in the data
  directory (write to a temporary file, fsync, rename, fsync the directory).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tidegate.clock import Clock
from tidegate.errors import ErrorCode
from tidegate.protocol.messages.alter_client_quotas import AlterClientQuotasRequestEntryData
from tidegate.protocol.messages.describe_client_quotas import ComponentData
from tidegate.server.quota.client_quota_manager import (
    DEFAULT,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    EntityName,
    QuotaEntity,
    QuotaType,
)
from tidegate.server.quota.client_request_quota_manager import ClientRequestQuotaManager
from tidegate.server.timer import SystemTimer
from tidegate.utils import INT32_MAX
from tidegate.utils.files import write_atomically

log = logging.getLogger(__name__)

QUOTAS_FILE = "client-quotas.json"
FORMAT_VERSION = 1

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

# DescribeClientQuotas match types (ClientQuotaFilterComponent)
MATCH_TYPE_EXACT = 0
MATCH_TYPE_DEFAULT = 1
MATCH_TYPE_SPECIFIED = 2

#: quota keys and whether Kafka types them LONG (whole numbers) or DOUBLE
QUOTA_KEYS: dict[str, bool] = {
    QuotaType.PRODUCE.config_key: True,
    QuotaType.FETCH.config_key: True,
    QuotaType.REQUEST.config_key: False,
}
#: the one quota key of an ip entity (KIP-612), an INT
IP_CONNECTION_RATE = "connection_creation_rate"
IP_QUOTA_KEYS: dict[str, bool] = {IP_CONNECTION_RATE: True}


#: an ip entity's name: an address, or DEFAULT
IpName = EntityName


class QuotaConfigError(ValueError):
    """An invalid quota entity, key or value: answered with INVALID_REQUEST."""


def entity_from_components(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """A QuotaEntity from KIP-546 (entity_type, entity_name) pairs (null name: default),
    validated as Kafka's ClientQuotaControlManager does."""
    seen: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type in seen:
            raise QuotaConfigError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaConfigError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise QuotaConfigError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaConfigError("Invalid empty client quota entity")
    if IP in seen:
        raise QuotaConfigError("an ip entity is an IpEntity (ip_entity_from_components)")

    def level(t: str) -> Any:
        if t not in seen:
            return None
        name = seen[t]
        return DEFAULT if name is None else name

    return QuotaEntity(level(USER), level(CLIENT_ID))


def ip_entity_from_components(components: Iterable[tuple[str, str | None]]) -> IpName | None:
    """The IP of an ``ip`` entity (an address, or :data:`DEFAULT`), None when the entity
    has no ip component; validated as Kafka's ClientQuotaControlManager does. Host names
    are refused: Kafka resolves them, tidegate does no DNS lookup on its loop."""
    items = list(components)
    types = [t for t, _ in items]
    if IP not in types:
        return None
    if len(set(types)) != len(types):
        raise QuotaConfigError(f"Invalid client quota entity, duplicate entity entry {IP}")
    if len(types) > 1:
        raise QuotaConfigError("Invalid quota entity combination, IP entity should"
                               "not be combined with User or ClientId")  # Kafka's (missing) space
    (_, name), = items
    if name is None:
        return DEFAULT
    if name == "":
        raise QuotaConfigError(f"Empty {IP} not supported")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        raise QuotaConfigError(f"{name} is not a valid IP or resolvable host.") from None


def _ip_name(ip: IpName) -> str | None:
    """An ip entity's name on the wire and in the file (None: the default)."""
    return ip if isinstance(ip, str) else None


def entity_components(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """The KIP-546 (entity_type, entity_name) pairs of an entity; default is None."""
    out: list[tuple[str, str | None]] = []
    for entity_type, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if isinstance(name, str):
            out.append((entity_type, name))
        elif name is DEFAULT:
            out.append((entity_type, None))
    return out


def validate_quota_value(key: str, value: float, keys: Mapping[str, bool] = QUOTA_KEYS) -> None:
    """Kafka's validateQuotaKeyValue for the keys of an entity type (``keys``: user and
    client-id quotas, or :data:`IP_QUOTA_KEYS`), with its messages."""
    if key not in keys:
        raise QuotaConfigError(f"Invalid configuration key {key}")
    if value <= 0:
        raise QuotaConfigError(f"Quota {key} must be greater than 0")
    if not math.isfinite(value):  # tidegate's: Kafka takes NaN/infinity for a DOUBLE
        raise QuotaConfigError(f"Quota {key} must be a finite number")
    if keys is IP_QUOTA_KEYS and value > INT32_MAX:
        raise QuotaConfigError(f"Proposed value for {key} is too large for an INT.")
    if keys[key] and abs(value % 1.0) > 1e-6:
        raise QuotaConfigError(f"{key} cannot be a fractional value.")


class QuotaManagers:
    """The broker's quota managers, connection throttling and quota configuration."""

    def __init__(
        self,
        config: ClientQuotaManagerConfig | None = None,
        data_dir: Path | None = None,
        *,
        clock: Clock,
    ) -> None:
        self.config = config if config is not None else ClientQuotaManagerConfig()
        self.clock = clock
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, self.config, clock=clock)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, self.config, clock=clock)
        self.request = ClientRequestQuotaManager(self.config, clock=clock)
        self.managers: dict[QuotaType, ClientQuotaManager] = {
            QuotaType.PRODUCE: self.produce,
            QuotaType.FETCH: self.fetch,
            QuotaType.REQUEST: self.request,
        }
        #: entity -> {quota key: value}: what DescribeClientQuotas lists and the file holds
        self.entries: dict[QuotaEntity, dict[str, float]] = {}
        #: KIP-612: IP (or DEFAULT) -> connection_creation_rate, read by the socket server
        self.ip_rates: dict[IpName, int] = {}
        self.path = data_dir / QUOTAS_FILE if data_dir is not None else None
        #: whether any quota of any type is configured (the per-request fast path)
        self.enabled = False

    # ---- configuration -------------------------------------------------------------
    def load(self) -> None:
        """Read the persisted configuration (if any) and apply it."""
        if self.path is None or not self.path.exists():
            return
        data = json.loads(self.path.read_text())
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: unknown format version {data.get('version')!r}")
        for item in data["quotas"]:
            ip = ip_entity_from_components(item["entity"].items())
            if ip is not None:
                for key, value in item["values"].items():
                    validate_quota_value(key, float(value), IP_QUOTA_KEYS)
                    self._set_ip(ip, float(value))
                continue
            entity = entity_from_components(item["entity"].items())
            for key, value in item["values"].items():
                validate_quota_value(key, float(value))
                self._set(entity, key, float(value))
        log.info("loaded %d client quota entit%s from %s", len(self.entries),
                 "y" if len(self.entries) == 1 else "ies", self.path)

    def _set(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        values = self.entries.setdefault(entity, {})
        if value is None:
            values.pop(key, None)
            if not values:
                del self.entries[entity]
        else:
            values[key] = value
        self.managers[QuotaType.from_config_key(key)].update_quota(entity, value)
        self.enabled = any(m.quotas_enabled for m in self.managers.values())

    def set_quota(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        """Set (or remove, with None) one quota, apply it at once and persist."""
        if value is not None:
            validate_quota_value(key, value)
        elif key not in QUOTA_KEYS:
            raise QuotaConfigError(f"Invalid configuration key {key}")
        self._set(entity, key, value)
        self.save()

    def connection_rate_for_ip(self, address: str) -> int | None:
        """The ``connection_creation_rate`` of an address: its own, else the ip default,
        else None (unlimited); Kafka's ``connectionRateForIp``."""
        rates = self.ip_rates
        if not rates:
            return None
        return rates.get(address, rates.get(DEFAULT))

    def _set_ip(self, ip: IpName, value: float | None) -> None:
        if value is None:
            self.ip_rates.pop(ip, None)
        else:
            self.ip_rates[ip] = int(value)

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "version": FORMAT_VERSION,
            "quotas": [
                {"entity": dict(entity_components(entity)), "values": dict(values)}
                for entity, values in self.entries.items()
            ] + [
                {"entity": {IP: _ip_name(ip)}, "values": {IP_CONNECTION_RATE: rate}}
                for ip, rate in self.ip_rates.items()
            ],
        }
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())

    # ---- AlterClientQuotas ---------------------------------------------------------
    def alter(
        self, entries: Iterable[AlterClientQuotasRequestEntryData], validate_only: bool
    ) -> list[tuple[ErrorCode, str | None]]:
        """AlterClientQuotas: (error, message) per entry; valid entries are applied
        (unless ``validate_only``) and the file is written once for the whole request."""
        results: list[tuple[ErrorCode, str | None]] = []
        changed = False
        for entry in entries:
            components = [(e.entity_type, e.entity_name) for e in entry.entity]
            try:
                ip = ip_entity_from_components(components)
                entity = entity_from_components(components) if ip is None else None
                keys = QUOTA_KEYS if ip is None else IP_QUOTA_KEYS
                ops: dict[str, float | None] = {}
                for op in entry.ops:
                    if op.key in ops:
                        raise QuotaConfigError(f"Duplicate quota key {op.key} in one entity")
                    if op.remove:
                        if op.key not in keys:
                            raise QuotaConfigError(f"Invalid configuration key {op.key}")
                        ops[op.key] = None
                    else:
                        validate_quota_value(op.key, float(op.value), keys)
                        ops[op.key] = float(op.value)
            except QuotaConfigError as exc:
                results.append((ErrorCode.invalid_request, str(exc)))
                continue
            results.append((ErrorCode.none, None))
            if validate_only:
                continue
            for key, value in ops.items():
                if ip is not None:
                    self._set_ip(ip, value)
                else:
                    assert entity is not None
                    self._set(entity, key, value)
                changed = True
            what = entity if ip is None else f"ip {_ip_name(ip) or '<default>'}"
            log.info("client quotas of %s altered: %s", what, ops)
        if changed:
            self.save()
        return results

    # ---- DescribeClientQuotas ------------------------------------------------------
    def describe(
        self, components: Iterable[ComponentData], strict: bool
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas: the configured entities matching the filter, each as its
        names by entity type (None: the default entity) and its quota values by key.

        Raises :class:`QuotaConfigError` for an invalid filter (the whole request fails
        with INVALID_REQUEST, as in Kafka)."""
        filters: dict[str, tuple[int, str | None]] = {}
        for c in components:
            if c.entity_type in filters:
                raise QuotaConfigError(f"Duplicate {c.entity_type} filter component entity type")
            if c.entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaConfigError(f"Custom entity type {c.entity_type!r} not supported")
            if c.entity_type == "":
                raise QuotaConfigError("Unexpected empty filter component entity type")
            if c.match_type == MATCH_TYPE_EXACT and c.match is None:
                raise QuotaConfigError(f"Exact match for {c.entity_type} requires a name")
            if c.match_type not in (MATCH_TYPE_EXACT, MATCH_TYPE_DEFAULT, MATCH_TYPE_SPECIFIED):
                raise QuotaConfigError(f"Unknown match type {c.match_type}")
            filters[c.entity_type] = (c.match_type, c.match)
        if IP in filters and (USER in filters or CLIENT_ID in filters):
            raise QuotaConfigError("Invalid entity filter component combination, IP filter "
                                   "component should not be used with user or clientId filter "
                                   "component.")
        described: list[tuple[dict[str, str | None], dict[str, float]]] = [
            (dict(entity_components(entity)), values) for entity, values in self.entries.items()
        ] + [
            ({IP: _ip_name(ip)}, {IP_CONNECTION_RATE: float(rate)})
            for ip, rate in self.ip_rates.items()
        ]
        return [
            (names, values)
            for names, values in described
            if not (strict and set(names) != set(filters))
            and all(self._matches(names, t, m) for t, m in filters.items())
        ]

    @staticmethod
    def _matches(names: Mapping[str, str | None], entity_type: str, match: tuple) -> bool:
        if entity_type not in names:
            return False
        match_type, value = match
        name = names[entity_type]
        if match_type == MATCH_TYPE_EXACT:
            return name == value
        if match_type == MATCH_TYPE_DEFAULT:
            return name is None
        return name is not None  # MATCH_TYPE_SPECIFIED: any named entity

    def throttle_timers(self) -> list[tuple[str, SystemTimer]]:
        """(name, timer) of each manager's throttled channels, for the scheduler."""
        return [(f"{t.group}Throttle", m.throttle_timer) for t, m in self.managers.items()]
