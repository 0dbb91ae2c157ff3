"""``tidegate serve``: the broker, as ``kafka-server-start.sh server.properties
[--override key=value]*``; its help lists every broker configuration key."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from tidegate import __version__
from tidegate.cli.base import main

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
