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
