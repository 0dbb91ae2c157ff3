"""Group configs (Kafka's ``GroupConfig`` and ``GroupConfigManager``): per-group overrides
of the broker's ``group.consumer.*`` and ``group.share.*`` keys, set with
IncrementalAlterConfigs on a GROUP resource (reference 1.15).

The keys are Kafka 4.2's consumer and share ones, with 4.3's
``share.delivery.count.limit`` and ``share.partition.max.record.locks``; each defaults to
the broker's key. An update is validated on the merged values (what the group has set,
the change, the broker's defaults): an unknown key or a value of the wrong type is
INVALID_CONFIG; the timeouts and intervals must be within the broker's min/max and the
session timeout above the heartbeat interval; ``share.record.lock.duration.ms`` within
``group.share.min/max.record.lock.duration.ms``; ``share.auto.offset.reset`` earliest,
latest or by_duration:<ISO-8601 duration>; ``share.isolation.level`` read_committed or
read_uncommitted. A group need not exist to have configs (confluent-kafka's share
consumer tests configure a group before it joins).

Configs are kept in one JSON document in the data directory (``group-configs.json``,
written atomically): Kafka keeps them in its metadata log, which a single node does not
have. They apply dynamically: intervals and timeouts at the next heartbeat, a lock
duration at the next acquisition, the isolation level at the next fetch,
``share.auto.offset.reset`` when a share-partition is next initialized.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tidegate.config import BrokerConfig, ConfigError
from tidegate.config.alter import AlterOp
from tidegate.config.definitions import ConfigEntry, ConfigSource, ConfigType
from tidegate.utils.durations import parse_duration
from tidegate.utils.files import write_atomically

__all__ = ["GROUP_CONFIGS_FILE", "GROUP_CONFIG_KEYS", "GroupConfigKey", "GroupConfigManager"]

GROUP_CONFIGS_FILE = "group-configs.json"
#: what :meth:`GroupConfigManager.int_configs` answers for a group without configs
_NO_CONFIGS: Mapping[str, int] = MappingProxyType({})


def _auto_offset_reset(name: str, value: str) -> None:
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return
    prefix = "by_duration:"
    ok = lowered.startswith(prefix)
    if ok:
        try:
            ok = parse_duration(value.strip()[len(prefix):]) >= 0
        except ValueError:
            ok = False
    if not ok:
        raise ConfigError.invalid(name, value, "must be earliest, latest or by_duration:<PnDTnHnMn.nS> (not negative)")


def _isolation_level(name: str, value: str) -> None:
    if value not in ("read_committed", "read_uncommitted"):
        raise ConfigError.invalid(name, value, "must be read_committed or read_uncommitted")


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    name: str
    #: int or string
    type: str
    #: the broker key it overrides (its value is the default), or a fixed default
    broker_key: str | None
    default: str | None
    #: (min, max) broker keys (or fixed ints) bounding an int
    low: str | int | None = None
    high: str | int | None = None
    check: Callable[[str, str], None] | None = None
    doc: str = ""

    def default_value(self, broker: BrokerConfig) -> str:
        if self.broker_key is not None:
            return str(broker.get(self.broker_key))
        assert self.default is not None
        return self.default


GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {k.name: k for k in (
    GroupConfigKey("consumer.session.timeout.ms", "int", "group.consumer.session.timeout.ms", None,
                   "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
                   doc="A consumer-protocol member's session timeout."),
    GroupConfigKey("consumer.heartbeat.interval.ms", "int", "group.consumer.heartbeat.interval.ms", None,
                   "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
                   doc="A consumer-protocol member's heartbeat interval."),
    GroupConfigKey("share.session.timeout.ms", "int", "group.share.session.timeout.ms", None,
                   "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
                   doc="A share group member's session timeout."),
    GroupConfigKey("share.heartbeat.interval.ms", "int", "group.share.heartbeat.interval.ms", None,
                   "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms",
                   doc="A share group member's heartbeat interval."),
    GroupConfigKey("share.record.lock.duration.ms", "int", "group.share.record.lock.duration.ms", None,
                   "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms",
                   doc="How long a member holds an acquired record."),
    GroupConfigKey("share.delivery.count.limit", "int", "group.share.delivery.count.limit", None, 2, 10,
                   doc="How many times a record is delivered at most."),
    GroupConfigKey("share.partition.max.record.locks", "int", "group.share.partition.max.record.locks", None,
                   100, 10000, doc="The most in-flight records of one share-partition."),
    GroupConfigKey("share.auto.offset.reset", "string", None, "latest", check=_auto_offset_reset,
                   doc="Where a share-partition without a start offset starts."),
    GroupConfigKey("share.isolation.level", "string", None, "read_uncommitted", check=_isolation_level,
                   doc="Whether share fetches read to the high watermark or the last stable offset."),
)}  # fmt: skip

#: (session timeout, heartbeat interval) pairs whose merged values must be ordered
_ORDERED = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
            ("share.session.timeout.ms", "share.heartbeat.interval.ms"))  # fmt: skip


def _bound(broker: BrokerConfig, bound: str | int | None) -> int | None:
    return None if bound is None else bound if isinstance(bound, int) else int(broker.get(bound))


class GroupConfigManager:
    """Every group's configs (set values, as strings), validated against ``broker`` and
    kept in ``directory``."""

    def __init__(self, broker: BrokerConfig, directory: Path) -> None:
        self.broker = broker
        self.path = directory / GROUP_CONFIGS_FILE
        self._groups: dict[str, dict[str, str]] = {}
        #: goes up with every change (what caches of derived settings compare)
        self.version = 0
        if self.path.exists():
            doc = json.loads(self.path.read_bytes())
            if doc.get("version") != 1:
                raise ValueError(f"{self.path}: unknown format version {doc.get('version')!r}")
            self._groups = {g: dict(c) for g, c in doc["groups"].items()}

    def group_ids(self) -> list[str]:
        """The groups with configs set (Kafka's ``GroupConfigManager.groupIds``)."""
        return list(self._groups)

    def configs(self, group_id: str) -> dict[str, str]:
        """What ``group_id`` has set."""
        return dict(self._groups.get(group_id, {}))

    def describe(self, group_id: str) -> list[tuple[str, str, bool]]:
        """(name, value, set for the group) of every key (DescribeConfigs lists them all:
        GROUP_CONFIG if set, else DEFAULT_CONFIG with the broker's value)."""
        own = self._groups.get(group_id, {})
        return [(name, own[name], True) if name in own else (name, key.default_value(self.broker), False)
                for name, key in GROUP_CONFIG_KEYS.items()]  # fmt: skip

    def describe_entries(self, group_id: str) -> list[ConfigEntry]:
        """:meth:`describe` as DescribeConfigs entries (Kafka's ``ConfigHelper`` for a
        GROUP resource: source GROUP_CONFIG or DEFAULT_CONFIG, no synonyms)."""
        return [
            ConfigEntry(name, value, ConfigSource.GROUP_CONFIG if own else ConfigSource.DEFAULT_CONFIG, False, False,
                        ConfigType.INT if GROUP_CONFIG_KEYS[name].type == "int" else ConfigType.STRING,
                        GROUP_CONFIG_KEYS[name].doc)
            for name, value, own in self.describe(group_id)
        ]  # fmt: skip

    def changes_of(self, group_id: str, ops: list[tuple[str, int, str | None]] | None,
                   replacement: Mapping[str, str] | None = None) -> dict[str, str | None]:
        """The changes an IncrementalAlterConfigs (``ops``: name, operation id, value)
        or an AlterConfigs (``replacement``: the whole new set) asks of a group: SET and
        DELETE; APPEND and SUBTRACT are refused as for any key that is not a list
        (ConfigError, INVALID_CONFIG), an unknown operation is a ValueError
        (INVALID_REQUEST)."""
        if ops is None:
            assert replacement is not None
            return {**dict.fromkeys(self._groups.get(group_id, {})), **replacement}
        changes: dict[str, str | None] = {}
        for name, op_id, value in ops:
            if op_id == AlterOp.SET:
                changes[name] = value
            elif op_id == AlterOp.DELETE:
                changes[name] = None
            elif op_id in (AlterOp.APPEND, AlterOp.SUBTRACT):
                verb = "append" if op_id == AlterOp.APPEND else "subtract"
                raise ConfigError(f"Config value {verb} is not allowed for config key: {name}")
            else:
                raise ValueError(f"Unknown operations type {op_id}")
        return changes

    def values(self, group_id: str) -> dict[str, Any]:
        """Every key's value in force for ``group_id`` (ints parsed)."""
        return self._typed(self._merged(self._groups.get(group_id, {})))

    def int_configs(self, group_id: str) -> Mapping[str, int]:
        """The int keys ``group_id`` has set (the modern group managers' lookup, twice per
        heartbeat: a group that set none costs a dict lookup)."""
        own = self._groups.get(group_id)
        if not own:
            return _NO_CONFIGS
        return {k: int(v) for k, v in own.items() if GROUP_CONFIG_KEYS[k].type == "int"}

    def validate(self, group_id: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        """The group's configs after ``changes`` (None deletes a key), validated: a
        ConfigError (INVALID_CONFIG) names the first problem."""
        if not group_id:
            raise ConfigError("The group id is empty.")
        updated = dict(self._groups.get(group_id, {}))
        for name, value in changes.items():
            if name not in GROUP_CONFIG_KEYS:
                raise ConfigError(f"Unknown group config name: {name}")
            if value is None:
                updated.pop(name, None)
            else:
                updated[name] = value
        merged = self._merged(updated)
        typed = self._typed(merged)
        for name, key in GROUP_CONFIG_KEYS.items():
            low, high = _bound(self.broker, key.low), _bound(self.broker, key.high)
            value = typed[name]
            if low is not None and value < low:
                raise ConfigError.invalid(name, value, f"must be at least {low}")
            if high is not None and value > high:
                raise ConfigError.invalid(name, value, f"must be at most {high}")
            if key.check is not None:
                key.check(name, value)
        for session, heartbeat in _ORDERED:
            if typed[heartbeat] >= typed[session]:
                raise ConfigError.invalid(heartbeat, typed[heartbeat], f"must be less than {session}")
        return updated

    def alter(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        """Apply ``changes`` once validated (:meth:`validate`), durably."""
        updated = self.validate(group_id, changes)
        if updated:
            self._groups[group_id] = updated
        else:
            self._groups.pop(group_id, None)
        self.version += 1
        doc = {"version": 1, "groups": self._groups}
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def _merged(self, own: Mapping[str, str]) -> dict[str, str]:
        return {name: own.get(name, key.default_value(self.broker)) for name, key in GROUP_CONFIG_KEYS.items()}

    @staticmethod
    def _typed(merged: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in merged.items():
            if GROUP_CONFIG_KEYS[name].type == "int":
                try:
                    out[name] = int(value)
                except ValueError:
                    raise ConfigError.invalid(name, value, "must be an integer") from None
            else:
                out[name] = value
        return out
