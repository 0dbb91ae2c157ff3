"""Config and client-quota administration over the wire, on :class:`KafkaClient`.

``describe_client_quotas`` and ``alter_client_quotas`` speak DescribeClientQuotas (48)
and AlterClientQuotas (49) at the highest version both sides support, with entities as
``{entity_type: name}`` dicts where ``None`` is the ``<default>`` entity (a null name on
the wire), as in Kafka's ``ClientQuotaEntity``. ``describe_configs``,
``incremental_alter_configs`` and ``alter_configs`` speak DescribeConfigs (32),
IncrementalAlterConfigs (44) and AlterConfigs (33) on topic and broker resources.
``tidegate configs`` is built on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidegate.errors import BrokerResponseError
from tidegate.protocol.apis import ApiKey

from .client import KafkaClient

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

#: DescribeConfigs/AlterConfigs resource types (Kafka's ConfigResource.Type)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ConfigSynonymInfo:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntryInfo:
    """One entry of a DescribeConfigs result (``source`` is Kafka's config_source id)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonymInfo, ...]


def describe_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    *,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = True,
    timeout_ms: float | None = None,
) -> list[ConfigEntryInfo]:
    """The configs of one resource (all, or ``keys``); BrokerResponseError on an error."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configuration_keys": None if keys is None else list(keys),
            }
        ],
        "include_synonyms": include_synonyms,
        "include_documentation": False,
    }
    resp = client.request(ApiKey.DESCRIBE_CONFIGS, body, timeout_ms=timeout_ms)
    (result,) = resp.results
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")
    return [
        ConfigEntryInfo(
            c.name,
            c.value,
            int(c.config_source),
            c.read_only,
            c.is_sensitive,
            tuple(ConfigSynonymInfo(s.name, s.value, int(s.source)) for s in c.synonyms),
        )
        for c in result.configs
    ]


def incremental_alter_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    ops: Iterable[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> None:
    """Apply (key, operation, value) operations to one resource; BrokerResponseError if
    the broker refuses them."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }
    resp = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body, timeout_ms=timeout_ms)
    _raise_on_error(resp)


def alter_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    configs: Mapping[str, str],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> None:
    """The legacy AlterConfigs: replace every config of one resource with ``configs``."""
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "validate_only": validate_only,
    }
    resp = client.request(ApiKey.ALTER_CONFIGS, body, timeout_ms=timeout_ms)
    _raise_on_error(resp)


def _raise_on_error(resp: object) -> None:
    (result,) = resp.responses  # type: ignore[attr-defined]
    if result.error_code:
        raise BrokerResponseError(int(result.error_code), result.error_message or "")


@dataclass(frozen=True, slots=True)
class QuotaFilterComponent:
    """One filter component: an exact name, the default (``match_type=MATCH_DEFAULT``),
    or any named entity of the type (``MATCH_SPECIFIED``)."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_EXACT, name)

    @classmethod
    def of_default(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT, None)

    @classmethod
    def of_type(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_SPECIFIED, None)


Entity = dict[str, str | None]


def describe_client_quotas(
    client: KafkaClient,
    components: Iterable[QuotaFilterComponent] = (),
    *,
    strict: bool = False,
    timeout_ms: float | None = None,
) -> list[tuple[Entity, dict[str, float]]]:
    """The configured quotas matching the filter: (entity, {key: value}) pairs."""
    body = {
        "components": [
            {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
            for c in components
        ],
        "strict": strict,
    }
    resp = client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body, timeout_ms=timeout_ms)
    if resp.error_code:
        raise BrokerResponseError(int(resp.error_code), resp.error_message or "")
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in resp.entries or ()
    ]


def alter_client_quotas(
    client: KafkaClient,
    alterations: Iterable[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
    *,
    validate_only: bool = False,
    timeout_ms: float | None = None,
) -> list[tuple[Entity, int, str | None]]:
    """Set (a number) or remove (``None``) quota keys per entity; returns
    (entity, error code, error message) per alteration, in order."""
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
            "ops": [
                {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                for k, v in ops.items()
            ],
        }
        for entity, ops in alterations
    ]
    resp = client.request(
        ApiKey.ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only},
        timeout_ms=timeout_ms,
    )  # fmt: skip
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            int(entry.error_code),
            entry.error_message,
        )
        for entry in resp.entries
    ]
