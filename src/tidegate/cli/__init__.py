"""The ``tidegate`` command line (also ``python -m tidegate``).

``tidegate serve [SERVER_PROPERTIES] [--config PATH] [--override key=value ...]``
mirrors ``kafka-server-start.sh server.properties [--override key=value]*``.
"""

from __future__ import annotations

import gc
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from tidegate import __version__
from tidegate.cli.base import _run_admin, admin_options, main

if TYPE_CHECKING:
    from tidegate.config import ConfigError

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CONFIG_ERROR_EXIT = 2

log = logging.getLogger("tidegate.cli")


def config_key_help() -> Iterator[tuple[str, str]]:
    """(heading, doc) per broker key, generated from the table so help never goes stale:
    heading is "name (type, default X, valid Y)"."""
    from tidegate.config import BROKER_CONFIG

    for name, key in BROKER_CONFIG.items():
        default = key.default_string
        details = [key.type.label, f"default {'null' if default is None else default}"]
        valid = str(key.validator) if key.validator is not None else ""
        if valid:
            details.append(f"valid {valid}")
        yield f"{name} ({', '.join(details)})", key.doc


class _ServeCommand(click.Command):
    """``serve`` with the broker keys listed after the options."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        with formatter.section("Broker configuration keys"):
            formatter.write_text(
                "Set in the properties file or with --override key=value (overrides win). "
                "Unknown keys are rejected. Details: docs/configuration.md. As in Kafka, "
                "listener.name.<listener>.<key> overrides sasl.enabled.mechanisms and the ssl.* "
                "keys for one listener, and listener.name.<listener>.plain.sasl.jaas.config "
                "gives it PLAIN users (docs/security.md)."
            )
            for heading, doc in config_key_help():
                formatter.write_paragraph()
                formatter.write_text(heading)
                with formatter.indentation():
                    formatter.write_text(doc)


def _config_error(ctx: click.Context, exc: ConfigError) -> None:
    click.echo(f"tidegate: {exc}", err=True)
    ctx.exit(CONFIG_ERROR_EXIT)




@main.command(cls=_ServeCommand, context_settings={"max_content_width": 120})
@click.argument("properties_file", required=False, metavar="[SERVER_PROPERTIES]")
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="Java properties file with broker configuration (same as SERVER_PROPERTIES).",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a configuration key, winning over the properties file. Repeatable.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    help="Logging threshold.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    properties_file: str | None,
    config_path: str | None,
    overrides: tuple[str, ...],
    log_level: str,
) -> None:
    """Run the broker until it is stopped (SIGINT/SIGTERM).

    Configuration comes from the defaults, then SERVER_PROPERTIES (or --config),
    then each --override in order; a configuration error exits with status 2.
    """
    if properties_file is not None and config_path is not None and properties_file != config_path:
        raise click.UsageError(
            "Give the properties file either as SERVER_PROPERTIES or with --config, not both."
        )
    # This process becomes the broker. What it imports and builds until it listens (about
    # 54k objects) lives as long as it does: no collection walks it while it is made (77
    # of them took 10-20 ms of a 0.14 s start here); the broker freezes it and turns the
    # collector back on as it starts listening (tidegate.server.broker).
    gc.disable()
    try:
        code = _serve(ctx, config_path or properties_file, overrides, log_level)
    finally:
        gc.enable()  # on a failed start; a started broker did as it began listening
    ctx.exit(code)


def _serve(ctx: click.Context, path: str | None, overrides: tuple[str, ...], log_level: str) -> int:
    # imported here: --help, the other commands and config errors stay fast
    from tidegate.config import BrokerConfig, ConfigError

    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    try:
        config = BrokerConfig.load(path, overrides)
    except ConfigError as exc:
        _config_error(ctx, exc)
        return CONFIG_ERROR_EXIT
    log.info(
        "tidegate %s config values:\n%s",
        __version__,
        "\n".join(f"\t{e.name} = {e.value}" for e in config.describe()),
    )

    from tidegate.server import broker

    try:
        code = broker.run(config)
    except ConfigError as exc:  # e.g. a cluster.id that contradicts meta.properties
        _config_error(ctx, exc)
        return CONFIG_ERROR_EXIT
    return int(code or 0)


@main.command(context_settings={"max_content_width": 120})
@click.option(
    "--metrics-url",
    metavar="URL",
    help="The broker's metrics endpoint (its metrics.listener), e.g. "
    "http://127.0.0.1:9404/metrics; /metrics is added to a bare http://host:port.",
)
@click.option(
    "--bootstrap-server",
    metavar="HOST:PORT",
    help="A broker's Kafka listener: its metrics.listener is looked up with DescribeConfigs "
    "(needs confluent-kafka). Without one only topics and offsets can be shown.",
)
@click.option("--once", is_flag=True, help="Print one plain table and exit (also when not a tty).")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between refreshes (and between the two samples of --once).",
)
@click.pass_context
def top(
    ctx: click.Context,
    metrics_url: str | None,
    bootstrap_server: str | None,
    once: bool,
    interval: float,
) -> None:
    """A live view of a broker: throughput per topic, requests, the memory pool and muted
    connections, purgatories, the busiest clients, connections.

    Refreshes every second until Ctrl-C. When stdout is not a terminal, or with --once,
    it takes two samples INTERVAL apart, prints one plain table and exits.
    """
    import sys

    from tidegate import top as top_view

    if not metrics_url and not bootstrap_server:
        raise click.UsageError("Give --metrics-url URL or --bootstrap-server HOST:PORT.")
    try:
        source: top_view.MetricsSource | top_view.KafkaSource
        if metrics_url:
            source = top_view.MetricsSource(metrics_url)
        else:
            assert bootstrap_server is not None
            source = top_view.discover(bootstrap_server)
        if once or not sys.stdout.isatty():
            top_view.run_once(source, interval, lambda text: click.echo(text, nl=False))
        else:
            top_view.run_live(source, interval)
    except top_view.SourceError as exc:
        click.echo(f"tidegate top: {exc}", err=True)
        ctx.exit(1)
    except KeyboardInterrupt:
        ctx.exit(0)


# -- tidegate configs: like kafka-configs.sh ---------------------------------------------------
_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_ENTITY_LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_ENTITY_SINGULAR = {"user": "user", "client-id": "client", "ip": "ip"}
#: entity types whose configs are config resources (DescribeConfigs/AlterConfigs)
_RESOURCE_TYPES = {"topics": 2, "brokers": 4}
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
              help="topics, brokers, users, clients or ips; users and clients together (users "
              "first) for a (user, client-id) entity.")
@click.option("--entity-name", "entity_names", multiple=True, metavar="NAME",
              help="The entity's name, one per --entity-type, in the same order (a broker's is "
              "its node id).")
@click.option("--entity-default", "entity_defaults", count=True,
              help="The default entity (<default>; for brokers the cluster-wide default) for the "
              "--entity-type after the named ones.")
@click.option("--describe", is_flag=True,
              help="List the configs of the entity (or of all entities of the type).")
@click.option("--all", "describe_all", is_flag=True,
              help="With --describe of topics or brokers: every config, not only the dynamic ones.")
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
    describe: bool,
    describe_all: bool,
    alter: bool,
    add_config: str | None,
    add_config_file: str | None,
    delete_config: tuple[str, ...],
    command_config: str | None,
) -> None:
    """Describe or alter topic, broker and client-quota configs over the wire, like
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
      tidegate configs --alter --add-config 'request_percentage=50' \\
          --entity-type users --entity-name alice
      tidegate configs --alter --add-config 'connection_creation_rate=5' \\
          --entity-type ips --entity-name 10.0.0.7

    Topics are changed with IncrementalAlterConfigs, the broker's dynamic configs (per
    broker, or the cluster default with --entity-default) with AlterConfigs, quotas with
    AlterClientQuotas (KIP-546); every change applies at once and persists across broker
    restarts. --describe lists what is set on the entity (with --all: every config), each
    with its synonyms, as kafka-configs.sh prints them.
    """
    from tidegate.config import ConfigError, read_properties

    if describe == alter:
        raise click.UsageError("Give exactly one of --describe and --alter.")
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
    if resource == ["topics"] and entity_defaults:
        raise click.UsageError("--entity-default is for brokers, users and clients.")
    deletes = [k.strip() for item in delete_config for k in item.split(",") if k.strip()]
    additions = _parse_add_config(add_config) if add_config else {}
    if add_config_file:
        if not resource:
            raise click.UsageError("--add-config-file is for topics and brokers.")
        try:
            additions = {**read_properties(add_config_file), **additions}
        except ConfigError as exc:
            raise click.UsageError(f"--add-config-file: {exc}") from None
    if alter and not additions and not deletes:
        raise click.UsageError("--alter needs --add-config or --delete-config.")
    if describe and (additions or deletes):
        raise click.UsageError("--add-config and --delete-config go with --alter.")
    if describe_all and not (describe and resource):
        raise click.UsageError("--all goes with --describe of topics or brokers.")

    def work(client: Any) -> None:
        if resource:
            name = names[0] if names else None
            entity = "" if name is None and entity_defaults else name
            _resource_configs(ctx, client, resource[0], entity, describe_all, additions, deletes, alter)
        else:
            _quota_configs(ctx, client, entity_types, names, additions, deletes, describe)

    _run_admin(ctx, "configs", bootstrap_server, command_config, work)


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
    """kafka-configs.sh on topics and brokers (ConfigCommand's describeResourceConfig and
    alterConfig): the entity's dynamic configs are those whose source is its own level."""
    from tidegate.client.admin import (
        OP_DELETE,
        OP_SET,
        alter_configs,
        describe_configs,
        incremental_alter_configs,
    )
    from tidegate.config import ConfigSource

    resource_type = _RESOURCE_TYPES[entity_type]
    singular = entity_type[:-1]
    if entity_type == "brokers" and name:
        try:
            int(name)
        except ValueError:
            click.echo(f"tidegate configs: The entity name for brokers must be a valid integer "
                       f"broker id, found: {name}", err=True)  # fmt: skip
            ctx.exit(1)

    def own_source(entity: str) -> ConfigSource:
        if entity_type == "topics":
            return ConfigSource.DYNAMIC_TOPIC_CONFIG
        if entity == "":
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return ConfigSource.DYNAMIC_BROKER_CONFIG

    def entries(entity: str, synonyms: bool, everything: bool) -> list:
        found = describe_configs(client, resource_type, entity, include_synonyms=synonyms)
        if not everything:
            found = [e for e in found if e.source == own_source(entity)]
        return sorted(found, key=lambda e: e.name)

    if not alter:
        if name is not None:
            entities = [name]
        elif entity_type == "topics":
            entities = sorted(client.metadata().topics)
        else:
            entities = [str(n) for n in sorted(client.bootstrap().brokers)] + [""]
        for entity in entities:
            if entity == "":
                click.echo(f"Default configs for {entity_type} in the cluster are:")
            else:
                scope = "All" if describe_all else "Dynamic"
                click.echo(f"{scope} configs for {singular} {entity} are:")
            for entry in entries(entity, True, describe_all):
                click.echo(_config_line(entry))
        return
    assert name is not None
    old = {e.name: e for e in entries(name, False, False)}
    missing = [k for k in deletes if k not in old]
    if missing:
        click.echo(f"tidegate configs: Invalid config(s): {','.join(missing)}", err=True)
        ctx.exit(1)
    if entity_type == "topics":
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


# -- tidegate acls: like kafka-acls.sh ------------------------------------------------------------
#: kafka-acls.sh's --operation names (AclOperation in CamelCase, any case accepted)
_ACL_OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                   "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens")
_PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def _acl_operation(name: str) -> Any:
    from tidegate.security.authorizer.acl import AclOperation

    return AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def _resource_text(acl: Any) -> str:
    return (f"ResourcePattern(resourceType={acl.resource_type.name}, name={acl.name}, "
            f"patternType={acl.pattern_type.name})")


def _entry_text(acl: Any) -> str:
    return (f"(principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
            f"permissionType={acl.permission.name})")


def _print_acls(acls: list[Any], heading: str) -> None:
    by_resource: dict[str, list[str]] = {}
    for acl in acls:
        by_resource.setdefault(_resource_text(acl), []).append(_entry_text(acl))
    for resource, entries in by_resource.items():
        click.echo(f"{heading} `{resource}`: ")
        for entry in entries:
            click.echo(f" \t{entry} ")
        click.echo("")


@main.command(context_settings={"max_content_width": 120})
@admin_options
@click.option("--add", is_flag=True, help="Add the ACLs.")
@click.option("--remove", is_flag=True, help="Remove the matching ACLs.")
@click.option("--list", "list_", is_flag=True, help="List the ACLs (of the given resources, or all).")
@click.option("--allow-principal", "allow_principals", multiple=True, metavar="PRINCIPAL",
              help="A principal (User:alice) the ACLs allow; repeatable.")
@click.option("--deny-principal", "deny_principals", multiple=True, metavar="PRINCIPAL",
              help="A principal the ACLs deny; repeatable.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="The client address the allow ACLs apply from (default *: any).")
@click.option("--deny-host", "deny_hosts", multiple=True, metavar="HOST",
              help="The client address the deny ACLs apply from (default *: any).")
@click.option("--operation", "operations", multiple=True,
              type=click.Choice(_ACL_OPERATIONS, case_sensitive=False),
              help="An operation of the ACLs (default All); repeatable.")
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic resource (* for all).")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="A consumer group resource.")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
              help="A transactional id resource.")
@click.option("--delegation-token", "delegation_tokens", multiple=True, metavar="ID",
              help="A delegation token resource.")
@click.option("--user-principal", "user_principals", multiple=True, metavar="PRINCIPAL",
              help="A user resource (CreateTokens/DescribeTokens).")
@click.option("--resource-pattern-type", "pattern_type", type=click.Choice(_PATTERN_TYPES, case_sensitive=False),
              default=None, help="literal or prefixed (default literal) for --add; also any or match "
              "for --list and --remove (default literal for --remove, any for --list).")
@click.option("--principal", "principals", multiple=True, metavar="PRINCIPAL",
              help="With --list: only the ACLs of this principal.")
@click.option("--producer", is_flag=True,
              help="Convenience: WRITE, DESCRIBE and CREATE on the topics (and WRITE, DESCRIBE on "
              "the transactional ids; --idempotent: IDEMPOTENT_WRITE on the cluster).")
@click.option("--consumer", is_flag=True,
              help="Convenience: READ and DESCRIBE on the topics, READ on the groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the cluster.")
@click.option("--force", is_flag=True, help="Remove without asking.")
@click.pass_context
def acls(
    ctx: click.Context,
    bootstrap_server: str,
    command_config: str | None,
    add: bool,
    remove: bool,
    list_: bool,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    delegation_tokens: tuple[str, ...],
    user_principals: tuple[str, ...],
    pattern_type: str | None,
    principals: tuple[str, ...],
    producer: bool,
    consumer: bool,
    idempotent: bool,
    force: bool,
) -> None:
    """Add, remove or list ACLs over the wire, like kafka-acls.sh (the broker needs
    authorizer.class.name; see docs/security.md).

    \b
      tidegate acls --add --allow-principal User:alice --operation Write \\
          --topic orders- --resource-pattern-type prefixed
      tidegate acls --add --allow-principal User:bob --consumer --topic events --group readers
      tidegate acls --list --topic orders-eu --resource-pattern-type match
      tidegate acls --remove --force --allow-principal User:alice --topic orders- \\
          --resource-pattern-type prefixed
    """
    from tidegate.client.admin import create_acls, delete_acls, describe_acls
    from tidegate.security.authorizer.acl import (
        CLUSTER_NAME,
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    if add + remove + list_ != 1:
        raise click.UsageError("Give exactly one of --add, --remove and --list.")
    resources: list[tuple[ResourceType, str]] = [
        *((ResourceType.TOPIC, t) for t in topics),
        *((ResourceType.GROUP, g) for g in groups),
        *([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else []),
        *((ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids),
        *((ResourceType.DELEGATION_TOKEN, t) for t in delegation_tokens),
        *((ResourceType.USER, u) for u in user_principals),
    ]
    if producer and consumer:
        raise click.UsageError("Give --producer or --consumer, not both.")
    if (producer or consumer) and operations:
        raise click.UsageError("--producer and --consumer set the operations: no --operation.")
    if (producer or consumer) and not topics:
        raise click.UsageError("--producer and --consumer need --topic.")
    if idempotent and not producer:
        raise click.UsageError("--idempotent goes with --producer.")
    pattern_name = (pattern_type or ("any" if list_ else "literal")).upper()
    pattern = PatternType[pattern_name]
    if add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError("--add needs --resource-pattern-type literal or prefixed.")
    if (add or remove) and not resources:
        raise click.UsageError("Give a resource: --topic, --group, --cluster, --transactional-id, ...")
    if add and not (allow_principals or deny_principals):
        raise click.UsageError("--add needs --allow-principal or --deny-principal.")
    for p in (*allow_principals, *deny_principals, *principals):
        if ":" not in p:
            raise click.UsageError(f"Invalid principal {p!r}: expected TYPE:NAME, e.g. User:alice.")

    def ops_for(rtype: ResourceType) -> list[AclOperation]:
        if producer:
            return {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                    ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                    ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE]}.get(rtype, [])
        if consumer:
            return {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                    ResourceType.GROUP: [AclOperation.READ]}.get(rtype, [])
        return [_acl_operation(o) for o in operations] or [AclOperation.ALL]

    if producer and idempotent and (ResourceType.CLUSTER, CLUSTER_NAME) not in resources:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    entries = [(p, h, AclPermissionType.ALLOW) for p in allow_principals for h in (allow_hosts or ("*",))]
    entries += [(p, h, AclPermissionType.DENY) for p in deny_principals for h in (deny_hosts or ("*",))]

    def work(client: Any) -> None:
        if add:
            bindings = [AclBinding(rtype, name, pattern, p, h, op, perm)
                        for rtype, name in resources for op in ops_for(rtype) for p, h, perm in entries]
            for rtype, name in resources:
                mine = [b for b in bindings if (b.resource_type, b.name) == (rtype, name)]
                _print_acls(mine, "Adding ACLs for resource")
            create_acls(client, bindings)
            current = [acl for rtype, name in resources
                       for acl in describe_acls(client, AclBindingFilter(
                           rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY))]
            _print_acls(current, "Current ACLs for resource")
        elif remove:
            if entries:
                filters = [AclBindingFilter(rtype, name, pattern, p, h, op, perm)
                           for rtype, name in resources for op in ops_for(rtype) for p, h, perm in entries]
            else:
                filters = [AclBindingFilter(rtype, name, pattern, None, None, AclOperation.ANY,
                                            AclPermissionType.ANY) for rtype, name in resources]
            if not force and not click.confirm("Are you sure you want to remove the matching ACLs?"):
                return
            removed = [acl for found in delete_acls(client, filters) for acl in found]
            _print_acls(removed, "Removed ACLs for resource")
            if not removed:
                click.echo("No matching ACLs.")
            return
        wanted: list[tuple[ResourceType, str | None]] = list(resources) or [(ResourceType.ANY, None)]
        seen: dict[Any, None] = {}
        for wtype, wname in wanted:
            for p in principals or (None,):
                f = AclBindingFilter(wtype, wname, pattern, p, None, AclOperation.ANY, AclPermissionType.ANY)
                for acl in describe_acls(client, f):
                    seen[acl] = None
        _print_acls(list(seen), "Current ACLs for resource")

    _run_admin(ctx, "acls", bootstrap_server, command_config, work)


# -- topics (kafka-topics.sh) --------------------------------------------------------------
_TOPICS_EPILOG = """\b
Examples:
  tidegate topics --bootstrap-server 127.0.0.1:9092 --create --topic orders --partitions 3 \\
      --config retention.ms=86400000 --config cleanup.policy=compact
  tidegate topics --bootstrap-server 127.0.0.1:9092 --list
  tidegate topics --bootstrap-server 127.0.0.1:9092 --describe --topic orders
  tidegate topics --bootstrap-server 127.0.0.1:9092 --alter --topic orders --partitions 6
  tidegate topics --bootstrap-server 127.0.0.1:9092 --delete --topic orders
"""


@main.command(context_settings={"max_content_width": 120}, epilog=_TOPICS_EPILOG)
@admin_options
@click.option("--create", is_flag=True, help="Create a topic.")
@click.option("--list", "list_", is_flag=True, help="List the topics (all, or those --topic names).")
@click.option("--describe", is_flag=True, help="Describe the topics: partitions, leaders, configs.")
@click.option("--alter", is_flag=True, help="Raise a topic's partition count (--partitions).")
@click.option("--delete", is_flag=True, help="Delete the topics --topic names.")
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable).")
@click.option("--partitions", type=int, help="Partition count (--create; --alter: the new count).")
@click.option("--replication-factor", type=int, help="Replication factor (--create).")
@click.option("--config", "configs", multiple=True, metavar="K=V", help="A topic config (--create; repeatable).")
@click.option("--if-not-exists", is_flag=True, help="--create: no error if the topic exists.")
@click.option("--if-exists", is_flag=True, help="--alter/--describe/--delete: no error if it does not.")
@click.option("--exclude-internal", is_flag=True, help="--list/--describe: leave out internal topics.")
@click.pass_context
def topics(
    ctx: click.Context, bootstrap_server: str, command_config: str | None, create: bool, list_: bool,
    describe: bool, alter: bool, delete: bool, topics: tuple[str, ...], partitions: int | None,
    replication_factor: int | None, configs: tuple[str, ...], if_not_exists: bool, if_exists: bool,
    exclude_internal: bool,
) -> None:
    """Create, list, describe, alter and delete topics, like Kafka's kafka-topics.sh."""
    from tidegate.client import BrokerResponseError, UnsupportedVersionError
    from tidegate.client.admin import (
        RESOURCE_TOPIC,
        create_partitions,
        create_topic,
        delete_topics,
        describe_configs,
        describe_topics,
    )

    actions = [name for name, on in (("--create", create), ("--list", list_), ("--describe", describe),
                                      ("--alter", alter), ("--delete", delete)) if on]
    if len(actions) != 1:
        raise click.UsageError("Exactly one of --create, --list, --describe, --alter, --delete is needed.")
    if (create or alter or delete) and not topics:
        raise click.UsageError(f"{actions[0]} needs --topic.")
    if create and len(topics) != 1:
        raise click.UsageError("--create takes one --topic.")
    if alter and partitions is None:
        raise click.UsageError("--alter needs --partitions (the new partition count).")
    config_map: dict[str, str] = {}
    for c in configs:
        key, sep, value = c.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--config {c!r}: expected K=V")
        config_map[key] = value
    if create and partitions is not None and partitions < 1:
        raise click.UsageError("The partitions must be greater than 0")
    if create and replication_factor is not None and not 1 <= replication_factor <= 32767:
        raise click.UsageError("The replication factor must be between 1 and 32767 inclusive")

    def fail(message: str) -> None:
        click.echo(f"Error while executing topic command : {message}", err=True)
        ctx.exit(1)

    def existing(client: Any) -> list[str]:
        names = [d.name for d in describe_topics(client)
                 if not (exclude_internal and d.internal)]
        return [n for n in names if n in topics] if topics else names

    def work(client: Any) -> None:
        if create:
            (name,) = topics
            try:
                create_topic(client, name, -1 if partitions is None else partitions,
                             -1 if replication_factor is None else replication_factor, config_map)
            except BrokerResponseError as exc:
                if exc.code == 36 and if_not_exists:  # TOPIC_ALREADY_EXISTS
                    return
                fail(exc.message or str(exc))
                return
            click.echo(f"Created topic {name}.")
            return
        found = existing(client)
        if list_:
            for name in found:
                click.echo(name)
            return
        missing = [t for t in topics if t not in found]
        if missing and not if_exists:
            fail(f"Topic '{missing[0]}' does not exist as expected")
            return
        if delete:
            if found:
                delete_topics(client, found)
        elif alter:
            assert partitions is not None
            for name in found:
                try:
                    create_partitions(client, name, partitions)
                except BrokerResponseError as exc:
                    fail(exc.message or str(exc))
                    return
        else:
            configs_supported = True
            for d in describe_topics(client, found) if found else []:
                entries = []
                if configs_supported:
                    try:
                        entries = describe_configs(client, RESOURCE_TOPIC, d.name, include_synonyms=False)
                    except UnsupportedVersionError as exc:
                        # a broker without DescribeConfigs (librdkafka's mock cluster): the
                        # partitions are still worth showing
                        click.echo(f"WARN Configs not shown: {exc}", err=True)
                        configs_supported = False
                overridden = ",".join(f"{e.name}={e.value}" for e in entries if e.source != 5)  # not DEFAULT_CONFIG
                rf = len(d.partitions[0].replicas) if d.partitions else 0
                click.echo(f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}"
                           f"\tReplicationFactor: {rf}\tConfigs: {overridden}")
                for p in d.partitions:
                    leader = str(p.leader) if p.leader >= 0 else "none"
                    click.echo(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader}"
                               f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                               "\tElr: N/A\tLastKnownElr: N/A")

    _run_admin(ctx, "topics", bootstrap_server, command_config, work)


# Subcommands kept in their own modules register themselves on ``main`` when imported.
from tidegate.cli import console, consumer_groups  # noqa: F401
