"""IncrementalAlterConfigs operations on a resource's configs (KIP-339).

:func:`apply_config_ops` turns a resource's current configs (key -> string, what the
topic store or the dynamic broker layer holds) and a request's operations into the new
configs, as Kafka does: SET replaces a value, DELETE removes it (back to the default),
APPEND and SUBTRACT edit a LIST key item by item, starting from its current value or,
when it has none, its default. The two resource types differ as they do in Kafka,
where topics are done by the controller (``ConfigurationControlManager``) and broker
configs by the broker first (``ConfigAdminManager.prepareIncrementalConfigs``): the
error messages, and an APPEND/SUBTRACT on a key no table defines (a topic says its type
is not LIST; a broker fails it as an unexpected error).

Validating the result is not done here: topic configs go through
:func:`~.topic.validate_topic_configs`, broker configs through
:meth:`~.broker.BrokerConfig.validate_dynamic`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from tidegate.config.definitions import ConfigDef, ConfigType, Scope, convert_to_string

#: Kafka's error codes these operations fail with
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_SERVER_ERROR = -1
#: Kafka's ``Errors.UNKNOWN_SERVER_ERROR`` message, what ApiError carries for unexpected ones
UNKNOWN_SERVER_ERROR_MESSAGE = (
    "The server experienced an unexpected error when processing the request."
)


class AlterOp(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigError(Exception):
    """An operation that cannot be applied: the resource answers ``error_code`` with
    this message."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def apply_config_ops(
    current: Mapping[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    definition: ConfigDef,
) -> dict[str, str]:
    """The configs after applying ``ops`` — (name, operation id, value) — to ``current``.

    ``definition`` is the resource's keys (``TOPIC_CONFIG`` or ``BROKER_CONFIG``): it
    says which keys are lists and their defaults. Raises :class:`AlterConfigError`.
    """
    topic = definition.scope is Scope.TOPIC
    configs = dict(current)
    for name, op_id, value in ops:
        try:
            op = AlterOp(op_id)
        except ValueError:
            raise AlterConfigError(
                INVALID_REQUEST, f"Unknown operations type {op_id}"
            ) from None
        if op is AlterOp.SET:
            assert value is not None  # null values are refused before the operations
            configs[name] = value
        elif op is AlterOp.DELETE:
            configs.pop(name, None)
        else:
            key = definition.get(name)
            if key is None and not topic:
                # Kafka looks the key up in a Scala map: an unexpected error, no message
                raise AlterConfigError(UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE)
            if key is None or key.type is not ConfigType.LIST:
                if topic:
                    message = f"Can't {op.name} to key {name} because its type is not LIST."
                else:
                    verb = "append" if op is AlterOp.APPEND else "subtract"
                    message = f"Config value {verb} is not allowed for config key: {name}"
                raise AlterConfigError(INVALID_CONFIG, message)
            assert value is not None
            old = configs.get(name)
            if old is None:
                old = convert_to_string(key.default) or ""
            items = [item for item in old.split(",") if item]
            changes = value.split(",")
            if op is AlterOp.APPEND:
                items += [item for item in changes if item not in items]
            else:
                for item in changes:
                    if item in items:
                        items.remove(item)
            configs[name] = ",".join(items)
    return configs
