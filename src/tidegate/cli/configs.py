"""``tidegate configs``: Kafka's kafka-configs.sh: describe and alter topic, broker and
group configs and client quotas over the wire."""

from __future__ import annotations

import re
from typing import Any

import click

from tidegate.cli.base import _run_admin, admin_options, main

_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_ENTITY_LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_ENTITY_SINGULAR = {"user": "user", "client-id": "client", "ip": "ip"}
#: entity types whose configs are config resources (DescribeConfigs/AlterConfigs):
#: Kafka's ConfigResource.Type TOPIC, BROKER and GROUP (KIP-848/KIP-932 group configs)
_RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32}
#: kafka-configs.sh's split of --add-config: commas outside [...] separate entries
_ADD_CONFIG_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")
_ADD_CONFIG_PAIR = re.compile(r"\s*=\s*(?=[^\]]*(?:\[|$))")


def _parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` as kafka-configs.sh's ``--add-config`` reads it: entries split on
    commas outside square brackets, values stripped of their brackets."""
    out: dict[str, str] = {}
    for item in _ADD_CONFIG_SPLIT.split(text):
        pair = _ADD_CONFIG_PAIR.split(item)
        if len(pair) != 2:
            raise click.BadParameter(
                'Invalid entity config: all configs to be added must be in the format "key=val".',
                param_hint="--add-config",
            )
        key = pair[0].strip()
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise click.BadParameter(
                f"Invalid character found for config key: {key}", param_hint="--add-config"
            )
        out[key] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return out


def _quota_values(additions: dict[str, str]) -> dict[str, float]:
    """Client quotas are numbers."""
    out: dict[str, float] = {}
    for key, value in additions.items():
        try:
            out[key] = float(value)
        except ValueError:
            raise click.BadParameter(
                f"the value of {key} must be a number, got {value!r}", param_hint="--add-config"
            ) from None
    return out


def _entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for entity_type in ("user", "client-id", "ip"):
        if entity_type in entity:
            name = entity[entity_type]
            label = _ENTITY_LABELS[entity_type]
            parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    parts += [f"{t} '{n}'" for t, n in entity.items() if t not in _ENTITY_LABELS]
    return ", ".join(parts)


def _number(value: float) -> str:
    return repr(float(value))  # Kafka prints the Double: 1048576.0, 50.0


@main.command(context_settings={"max_content_width": 120})
@admin_options
@click.option("--entity-type", "entity_types", multiple=True,
              type=click.Choice(sorted([*_ENTITY_TYPES, *_RESOURCE_TYPES])),
              help="topics, brokers, groups, users, clients or ips; users and clients together (users "
              "first) for a (user, client-id) entity.")
@click.option("--entity-name", "entity_names", multiple=True, metavar="NAME",
              help="The entity's name, one per --entity-type, in the same order (a broker's is "
              "its node id).")
@click.option("--entity-default", "entity_defaults", count=True,
              help="The default entity (<default>; for brokers the cluster-wide default) for the "
              "--entity-type after the named ones.")
@click.option("--group", "group", metavar="GROUP",
              help="A group: the same as --entity-type groups --entity-name GROUP.")
@click.option("--describe", is_flag=True,
              help="List the configs of the entity (or of all entities of the type).")
@click.option("--all", "describe_all", is_flag=True,
              help="With --describe of topics, brokers or groups: every config, not only the dynamic ones.")
@click.option("--alter", is_flag=True, help="Change the configs of the entity.")
@click.option("--add-config", "add_config", metavar="K=V[,K=V]",
              help="Configs to set with --alter; a list value in square brackets: "
              "'k=[a,b]'. Quotas: producer_byte_rate, consumer_byte_rate, request_percentage.")
@click.option("--add-config-file", "add_config_file", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="A properties file of configs to set with --alter (topics and brokers).")
@click.option("--delete-config", "delete_config", multiple=True, metavar="K[,K]",
              help="Configs to remove with --alter (comma-separated or repeated).")
@click.pass_context
def configs(
    ctx: click.Context,
    bootstrap_server: str,
    entity_types: tuple[str, ...],
    entity_names: tuple[str, ...],
    entity_defaults: int,
    group: str | None,
    describe: bool,
    describe_all: bool,
    alter: bool,
    add_config: str | None,
    add_config_file: str | None,
    delete_config: tuple[str, ...],
    command_config: str | None,
) -> None:
    """Describe or alter topic, broker, group and client-quota configs over the wire, like
    kafka-configs.sh.

    \b
      tidegate configs --alter --entity-type topics --entity-name events \\
          --add-config retention.ms=3600000,cleanup.policy=[delete]
      tidegate configs --describe --entity-type topics --entity-name events
      tidegate configs --alter --entity-type brokers --entity-default \\
          --add-config log.retention.ms=86400000
      tidegate configs --alter --entity-type brokers --entity-name 1 \\
          --delete-config compression.type
      tidegate configs --describe --all --entity-type brokers --entity-name 1
      tidegate configs --alter --entity-type groups --entity-name work-queue \\
          --add-config share.auto.offset.reset=earliest
      tidegate configs --describe --group work-queue
      tidegate configs --alter --add-config 'request_percentage=50' \\
          --entity-type users --entity-name alice
      tidegate configs --alter --add-config 'connection_creation_rate=5' \\
          --entity-type ips --entity-name 10.0.0.7

    Topics and groups are changed with IncrementalAlterConfigs, the broker's dynamic configs (per
    broker, or the cluster default with --entity-default) with AlterConfigs, quotas with
    AlterClientQuotas (KIP-546); every change applies at once and persists across broker
    restarts. --describe lists what is set on the entity (with --all: every config), each
    with its synonyms, as kafka-configs.sh prints them.
    """
    if describe == alter:
        raise click.UsageError("Give exactly one of --describe and --alter.")
    if group is not None:  # kafka-configs.sh's shorthand, after the --entity-type ones
        entity_types, entity_names = (*entity_types, "groups"), (*entity_names, group)
    names, resource = _entities(entity_types, entity_names, entity_defaults, alter)
    additions, deletes = _changes(add_config, add_config_file, delete_config, resource)
    if alter and not additions and not deletes:
        raise click.UsageError("--alter needs --add-config or --delete-config.")
    if describe and (additions or deletes):
        raise click.UsageError("--add-config and --delete-config go with --alter.")
    if describe_all and not (describe and resource):
        raise click.UsageError("--all goes with --describe of topics, brokers or groups.")

    def work(client: Any) -> None:
        if resource:
            name = names[0] if names else None
            entity = "" if name is None and entity_defaults else name
            _resource_configs(ctx, client, resource[0], entity, describe_all, additions, deletes, alter)
        else:
            _quota_configs(ctx, client, entity_types, names, additions, deletes, describe)

    _run_admin(ctx, "configs", bootstrap_server, command_config, work)


def _entities(
    entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_defaults: int, alter: bool
) -> tuple[list[str | None], list[str]]:
    """The entity names (None: the default entity) and the config resource type given
    (topics or brokers; none for quotas), checked as kafka-configs.sh checks them."""
    if len(set(entity_types)) != len(entity_types):
        raise click.UsageError("Each --entity-type may be given once.")
    names: list[str | None] = [*entity_names, *([None] * entity_defaults)]
    if len(names) > len(entity_types):
        raise click.UsageError("More --entity-name/--entity-default than --entity-type.")
    resource = [t for t in entity_types if t in _RESOURCE_TYPES]
    if resource and len(entity_types) > 1:
        raise click.UsageError(f"--entity-type {resource[0]} cannot be combined with another.")
    if "ips" in entity_types and len(entity_types) > 1:
        raise click.UsageError("--entity-type ips cannot be combined with another.")
    if "ips" in entity_types and entity_names:
        import ipaddress

        try:
            ipaddress.ip_address(entity_names[0])
        except ValueError:
            raise click.UsageError("The entity name for ips must be a valid IP or resolvable host, "
                                   f"but it is: {entity_names[0]}") from None
    if alter and len(names) != len(entity_types):
        raise click.UsageError(
            "--entity-name or --entity-default must be specified with each --entity-type for --alter"
        )
    if resource in (["topics"], ["groups"]) and entity_defaults:
        raise click.UsageError("--entity-default is for brokers, users and clients.")
    return names, resource


def _changes(
    add_config: str | None, add_config_file: str | None, delete_config: tuple[str, ...], resource: list[str]
) -> tuple[dict[str, str], list[str]]:
    """The configs to set (--add-config over --add-config-file) and those to delete."""
    from tidegate.config import ConfigError, read_properties

    deletes = [k.strip() for item in delete_config for k in item.split(",") if k.strip()]
    additions = _parse_add_config(add_config) if add_config else {}
    if add_config_file:
        if not resource:
            raise click.UsageError("--add-config-file is for topics and brokers.")
        try:
            additions = {**read_properties(add_config_file), **additions}
        except ConfigError as exc:
            raise click.UsageError(f"--add-config-file: {exc}") from None
    return additions, deletes


def _config_line(entry: Any) -> str:
    """One config as kafka-configs.sh prints it (Java's ``ConfigEntry.ConfigSource`` names)."""
    from tidegate.config import ConfigSource

    def text(value: str | None) -> str:
        return "null" if value is None else value

    synonyms = ", ".join(
        f"{ConfigSource(s.source).name}:{s.name}={text(s.value)}" for s in entry.synonyms
    )
    sensitive = "true" if entry.is_sensitive else "false"
    return f"  {entry.name}={text(entry.value)} sensitive={sensitive} synonyms={{{synonyms}}}"


def _resource_configs(
    ctx: click.Context,
    client: Any,
    entity_type: str,
    name: str | None,
    describe_all: bool,
    additions: dict[str, str],
    deletes: list[str],
    alter: bool,
) -> None:
    """kafka-configs.sh on topics, brokers and groups (ConfigCommand's describeResourceConfig
    and alterConfig): the entity's dynamic configs are those whose source is its own level."""
    from tidegate.client.admin import (
        OP_DELETE,
        OP_SET,
        alter_configs,
        incremental_alter_configs,
    )

    resource_type = _RESOURCE_TYPES[entity_type]
    singular = entity_type[:-1]
    if entity_type == "brokers" and name:
        try:
            int(name)
        except ValueError:
            click.echo(f"tidegate configs: The entity name for brokers must be a valid integer "
                       f"broker id, found: {name}", err=True)  # fmt: skip
            ctx.exit(1)

    if not alter:
        _describe_resource_configs(client, entity_type, name, describe_all)
        return
    assert name is not None
    old = {e.name: e for e in _config_entries(client, entity_type, name, False, False)}
    missing = [k for k in deletes if k not in old]
    if missing:
        click.echo(f"tidegate configs: Invalid config(s): {','.join(missing)}", err=True)
        ctx.exit(1)
    if entity_type in ("topics", "groups"):
        ops = [(k, OP_SET, v) for k, v in additions.items()]
        ops += [(k, OP_DELETE, "") for k in deletes]
        incremental_alter_configs(client, resource_type, name, ops)
    else:
        # kafka-configs.sh alters broker configs with the legacy AlterConfigs: the whole
        # dynamic set of the level, the current entries with the additions, less the deletes
        new = {k: e.value for k, e in old.items() if k not in deletes}
        new.update(additions)
        hidden = [k for k, v in new.items() if v is None]
        if hidden:
            click.echo("tidegate configs: All sensitive broker config entries must be specified "
                       f"for --alter, missing entries: Set({', '.join(hidden)})", err=True)  # fmt: skip
            ctx.exit(1)
        alter_configs(client, resource_type, name, {k: v for k, v in new.items() if v is not None})
    if name:
        click.echo(f"Completed updating config for {singular} {name}.")
    else:
        click.echo(f"Completed updating default config for {entity_type} in the cluster.")


def _config_entries(client: Any, entity_type: str, entity: str, synonyms: bool, everything: bool) -> list:
    """The configs of a topic, broker (``""``: the brokers' default) or group, by name: all
    of them, or only the dynamic ones of its own level."""
    from tidegate.client.admin import describe_configs
    from tidegate.config import ConfigSource

    if entity_type == "topics":
        own = ConfigSource.DYNAMIC_TOPIC_CONFIG
    elif entity_type == "groups":
        own = ConfigSource.GROUP_CONFIG
    elif entity == "":
        own = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    else:
        own = ConfigSource.DYNAMIC_BROKER_CONFIG
    found = describe_configs(client, _RESOURCE_TYPES[entity_type], entity, include_synonyms=synonyms)
    if not everything:
        found = [e for e in found if e.source == own]
    return sorted(found, key=lambda e: e.name)


def _describe_resource_configs(client: Any, entity_type: str, name: str | None, describe_all: bool) -> None:
    """kafka-configs.sh --describe of a topic, broker or group (without a name: every topic,
    every broker and the default, every group and every group with configs)."""
    if entity_type == "groups":
        from tidegate.client.admin import RESOURCE_GROUP, list_config_resources, list_groups

        known = {g.group_id for g in list_groups(client)}
        with_configs = list_config_resources(client, [RESOURCE_GROUP])
        known |= {n for _, n in with_configs or ()}
        # kafka-configs.sh: a group unknown both ways has no configs to show (when the
        # broker cannot list the groups with configs, it describes the group all the same)
        if name is not None and name not in known and with_configs is not None and not describe_all:
            click.echo(f"The group '{name}' doesn't exist and doesn't have dynamic config.")
            return
    if name is not None:
        entities = [name]
    elif entity_type == "groups":
        entities = sorted(known)
    elif entity_type == "topics":
        entities = sorted(client.metadata().topics)
    else:
        entities = [str(n) for n in sorted(client.bootstrap().brokers)] + [""]
    for entity in entities:
        if entity == "":
            click.echo(f"Default configs for {entity_type} in the cluster are:")
        else:
            scope = "All" if describe_all else "Dynamic"
            click.echo(f"{scope} configs for {entity_type[:-1]} {entity} are:")
        for entry in _config_entries(client, entity_type, entity, True, describe_all):
            click.echo(_config_line(entry))


def _quota_configs(
    ctx: click.Context,
    client: Any,
    entity_types: tuple[str, ...],
    names: list[str | None],
    additions_text: dict[str, str],
    deletes: list[str],
    describe: bool,
) -> None:
    """kafka-configs.sh on users and clients: client quotas (KIP-546)."""
    from tidegate.client import BrokerResponseError
    from tidegate.client.admin import (
        QuotaFilterComponent,
        alter_client_quotas,
        describe_client_quotas,
    )

    types = sorted((_ENTITY_TYPES[t] for t in entity_types), key=lambda t: t != "user")
    # names are given per --entity-type in the order typed; put them with their types
    by_type = dict(zip((_ENTITY_TYPES[t] for t in entity_types), names, strict=False))
    additions = _quota_values(additions_text)
    if describe:
        components = []
        for t in types:
            if t not in by_type:
                components.append(QuotaFilterComponent.of_type(t))
            elif (name := by_type[t]) is None:
                components.append(QuotaFilterComponent.of_default(t))
            else:
                components.append(QuotaFilterComponent.of_entity(t, name))
        found = describe_client_quotas(client, components, strict=bool(types))
        for entity, values in found:
            text = ",".join(f"{k}={_number(v)}" for k, v in sorted(values.items()))
            click.echo(f"Quota configs for {_entity_text(entity)} are {text}")
        return
    entity = {t: by_type[t] for t in types}
    if deletes:
        exact = [
            QuotaFilterComponent.of_default(t) if n is None
            else QuotaFilterComponent.of_entity(t, n)
            for t, n in entity.items()
        ]
        current = describe_client_quotas(client, exact, strict=True)
        present = set().union(*(v.keys() for _, v in current)) if current else set()
        missing = [k for k in deletes if k not in present]
        if missing:
            click.echo(f"Invalid config(s): {','.join(missing)}", err=True)
            ctx.exit(1)
    ops: dict[str, float | None] = {k: None for k in deletes}
    ops.update(additions)
    [(_, code, message)] = alter_client_quotas(client, [(entity, ops)])
    if code:
        raise BrokerResponseError(code, message)
    named = list(entity.items())
    if all(n is None for _, n in named):
        click.echo(f"Completed updating default config for {' and '.join(entity_types)} "
                   "in the cluster.")
    else:
        what = ", ".join(
            f"{_ENTITY_SINGULAR[t]} {n if n is not None else '<default>'}"
            for t, n in named
        )
        click.echo(f"Completed updating config for {what}.")
