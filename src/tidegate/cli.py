"""The ``tidegate`` command line (also ``python -m tidegate``).

``tidegate serve [SERVER_PROPERTIES] [--config PATH] [--override key=value ...]``
mirrors ``kafka-server-start.sh server.properties [--override key=value]*``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import click

from tidegate import __version__
from tidegate.config import BROKER_CONFIG, BrokerConfig, ConfigError

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CONFIG_ERROR_EXIT = 2

log = logging.getLogger("tidegate.cli")


def config_key_help() -> Iterator[tuple[str, str]]:
    """(heading, doc) per broker key, generated from the table so help never goes stale:
    heading is "name (type, default X, valid Y)"."""
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


@click.group(name="tidegate", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tidegate")
def main() -> None:
    """tidegate: a Kafka-wire-compatible message broker."""


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
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    try:
        config = BrokerConfig.load(config_path or properties_file, overrides)
    except ConfigError as exc:
        _config_error(ctx, exc)
        return
    log.info(
        "tidegate %s config values:\n%s",
        __version__,
        "\n".join(f"\t{e.name} = {e.value}" for e in config.describe()),
    )

    from tidegate.server import broker  # lazily: --help and config errors stay fast

    try:
        code = broker.run(config)
    except ConfigError as exc:  # e.g. a cluster.id that contradicts meta.properties
        _config_error(ctx, exc)
        return
    ctx.exit(int(code or 0))


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


# -- tidegate configs: client quotas, like kafka-configs.sh ------------------------------------
_ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_ENTITY_LABELS = {"user": "user-principal", "client-id": "client-id"}


def _parse_add_config(text: str) -> dict[str, float]:
    """``k=v,k2=v2`` (kafka-configs.sh's --add-config) with numeric quota values."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--add-config")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(
                f"the value of {key.strip()} must be a number, got {value!r}",
                param_hint="--add-config",
            ) from None
    return out


def _entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for entity_type in ("user", "client-id"):
        if entity_type in entity:
            name = entity[entity_type]
            label = _ENTITY_LABELS[entity_type]
            parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    parts += [f"{t} '{n}'" for t, n in entity.items() if t not in _ENTITY_LABELS]
    return ", ".join(parts)


def _number(value: float) -> str:
    return repr(float(value))  # Kafka prints the Double: 1048576.0, 50.0


@main.command(context_settings={"max_content_width": 120})
@click.option("--bootstrap-server", default="localhost:9092", show_default=True,
              metavar="HOST:PORT", help="The broker to connect to.")
@click.option("--entity-type", "entity_types", multiple=True,
              type=click.Choice(sorted(_ENTITY_TYPES)),
              help="users or clients; both (users first) for a (user, client-id) entity.")
@click.option("--entity-name", "entity_names", multiple=True, metavar="NAME",
              help="The entity's name, one per --entity-type, in the same order.")
@click.option("--entity-default", "entity_defaults", count=True,
              help="The default entity (<default>) for the --entity-type after the named ones.")
@click.option("--describe", is_flag=True, help="List the quotas of the entity (or of all entities).")
@click.option("--alter", is_flag=True, help="Change the quotas of the entity.")
@click.option("--add-config", "add_config", metavar="K=V[,K=V]",
              help="Quotas to set with --alter: producer_byte_rate, consumer_byte_rate, "
              "request_percentage.")
@click.option("--delete-config", "delete_config", multiple=True, metavar="K[,K]",
              help="Quotas to remove with --alter (comma-separated or repeated).")
@click.option("--command-config", "command_config", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="A properties file with client settings: security.protocol, sasl.mechanism, "
              "sasl.jaas.config, ssl.* (see docs/security.md).")
@click.pass_context
def configs(
    ctx: click.Context,
    bootstrap_server: str,
    entity_types: tuple[str, ...],
    entity_names: tuple[str, ...],
    entity_defaults: int,
    describe: bool,
    alter: bool,
    add_config: str | None,
    delete_config: tuple[str, ...],
    command_config: str | None,
) -> None:
    """Describe or alter client quotas over the wire, like kafka-configs.sh.

    \b
      tidegate configs --alter --add-config 'request_percentage=50' \\
          --entity-type users --entity-name alice
      tidegate configs --describe --entity-type users --entity-name alice
      tidegate configs --alter --delete-config producer_byte_rate \\
          --entity-type users --entity-default --entity-type clients --entity-default

    Uses AlterClientQuotas/DescribeClientQuotas (KIP-546); a change applies at once to
    connected clients and persists across broker restarts.
    """
    from tidegate.client import BrokerResponseError, KafkaClient, KafkaError, SecurityConfigError
    from tidegate.client.admin import (
        QuotaFilterComponent,
        alter_client_quotas,
        describe_client_quotas,
    )
    from tidegate.config import ConfigError, read_properties

    if describe == alter:
        raise click.UsageError("Give exactly one of --describe and --alter.")
    if len(set(entity_types)) != len(entity_types):
        raise click.UsageError("Each --entity-type may be given once.")
    names: list[str | None] = [*entity_names, *([None] * entity_defaults)]
    if len(names) > len(entity_types):
        raise click.UsageError("More --entity-name/--entity-default than --entity-type.")
    types = sorted((_ENTITY_TYPES[t] for t in entity_types), key=lambda t: t != "user")
    if alter and len(names) != len(types):
        raise click.UsageError("--alter needs an --entity-name or --entity-default per --entity-type.")
    # names are given per --entity-type in the order typed; put them with their types
    by_type = dict(zip((_ENTITY_TYPES[t] for t in entity_types), names, strict=False))
    deletes = [k.strip() for item in delete_config for k in item.split(",") if k.strip()]
    additions = _parse_add_config(add_config) if add_config else {}
    if alter and not additions and not deletes:
        raise click.UsageError("--alter needs --add-config or --delete-config.")
    if describe and (additions or deletes):
        raise click.UsageError("--add-config and --delete-config go with --alter.")
    try:
        security = read_properties(command_config) if command_config else None
    except ConfigError as exc:
        raise click.UsageError(f"--command-config: {exc}") from None
    try:
        with KafkaClient(bootstrap_server, client_id="tidegate-configs",
                         request_timeout_ms=30_000, security=security) as client:
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
                    f"{'user' if t == 'user' else 'client'} {n if n is not None else '<default>'}"
                    for t, n in named
                )
                click.echo(f"Completed updating config for {what}.")
    except SecurityConfigError as exc:
        raise click.UsageError(f"--command-config: {exc}") from None
    except KafkaError as exc:
        click.echo(f"tidegate configs: {exc}", err=True)
        ctx.exit(1)
