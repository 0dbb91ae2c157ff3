"""The config-definition machinery, Kafka's ``ConfigDef`` layer.

What a key *is* (``ConfigKey``: name, type, default, validator, importance, doc,
scope, broker synonyms), how its values are parsed and checked (``parse_type``,
the validators ``Range``/``OneOf``/``Check``), how a set of keys is looked up
(``ConfigDef``) and how a value is reported back (``convert_to_string``,
``ConfigEntry``/``ConfigSynonym`` for DescribeConfigs). No key is defined here:
the broker keys are in :mod:`.broker_keys`, the topic keys in :mod:`.topic`.

Values are parsed like Kafka's ``ConfigDef``: strings are trimmed, ``int`` is
32-bit, ``long`` 64-bit, booleans are ``true``/``false`` (any case), lists are
comma-separated. Error messages use Kafka's wording, e.g.
``Invalid value -3 for configuration num.partitions: Value must be at least 1``.

``ConfigEntry``/``ConfigSynonym`` live here rather than in :mod:`.broker` because
both the broker's and the topics' DescribeConfigs answers are made of them.

This module imports nothing from tidegate: every other config module builds on it.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidegate.utils import INT32_MAX

INT_MIN = -(2**31)
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


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
    """Value types; the numbers are DescribeConfigs' ``config_type`` ids (KIP-569).
    UNKNOWN is what Kafka reports for a dynamic broker config that no key defines."""

    UNKNOWN = 0
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
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class UpdateMode(enum.Enum):
    """Kafka's "Dynamic update mode" of a broker key: whether IncrementalAlterConfigs /
    AlterConfigs on a BROKER resource may change it without a restart."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


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
    reason, so users get "not supported" rather than "not a valid value". ``allow_empty``
    accepts an empty list (Kafka's ``ValidList.in(true, ...)``).
    """

    options: tuple[str, ...]
    unsupported: Mapping[str, str] = dataclasses.field(default_factory=dict)
    allow_empty: bool = False

    def __call__(self, name: str, value: Any) -> None:
        items = value if isinstance(value, list) else [value]
        if not items and not self.allow_empty:
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
    # broker keys only: whether (and where) it can be changed at run time
    update_mode: UpdateMode = UpdateMode.READ_ONLY

    @property
    def default_string(self) -> str | None:
        return convert_to_string(self.default)


# short names for the key tables
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


# --------------------------------------------------------------------------------------
# parsing typed values
# --------------------------------------------------------------------------------------
_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:NaN|Infinity)"
)


def split_list(text: str) -> list[str]:
    """A comma-separated list, items trimmed; ``[]`` for blank text."""
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
        lo, hi = (INT_MIN, INT32_MAX) if type is ConfigType.INT else (LONG_MIN, LONG_MAX)
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
            return split_list(value)
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


def typed_default(key: ConfigKey) -> ConfigKey:
    """Parse and validate a table default (Kafka's ConfigDef does the same at define time)."""
    if key.default is None:
        return key
    default = parse_type(key.name, key.default, key.type)
    if key.validator is not None:
        key.validator(key.name, default)
    return dataclasses.replace(key, default=default)


def resolve(key: ConfigKey, values: Mapping[str, Any]) -> Any:
    """A topic key's value from broker values: the first synonym that is not null."""
    for syn in key.synonyms:
        value = values.get(syn.name)
        if value is not None:
            if syn.scale != 1:
                value = value * syn.scale
            if key.unlimited_if_negative and value < 0:
                value = -1
            return value
    return key.default


# --------------------------------------------------------------------------------------
# ConfigDef
# --------------------------------------------------------------------------------------
class ConfigDef(Mapping[str, ConfigKey]):
    """An ordered, read-only set of key definitions with parsing and validation.

    ``hint(name)`` (broker scope) adds a hint to the unknown-key error, e.g. a
    suggestion or "is a topic-level configuration"; "" for none.
    """

    def __init__(
        self,
        keys: Iterable[ConfigKey],
        *,
        scope: Scope,
        hint: Callable[[str], str] | None = None,
    ) -> None:
        self.scope = scope
        self._hint = hint
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
            hint = self._hint(name) if self._hint is not None else ""
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
