"""What every ``tidegate`` subcommand module shares: the ``main`` click group, the
connection options of the admin subcommands and the admin client runner."""

from __future__ import annotations

from typing import Any

import click

from tidegate import __version__


def admin_options(command: Any) -> Any:
    """The connection options every admin subcommand shares, as Kafka's scripts name them:
    ``--bootstrap-server`` and ``--command-config`` (client security properties)."""
    command = click.option(
        "--command-config", "command_config", metavar="FILE",
        type=click.Path(exists=True, dir_okay=False),
        help="A properties file with client settings: security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.* (see docs/security.md).")(command)
    return click.option(
        "--bootstrap-server", default="localhost:9092", show_default=True, metavar="HOST:PORT",
        help="The broker (or any Kafka cluster) to connect to.")(command)


@click.group(name="tidegate", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tidegate")
def main() -> None:
    """tidegate: a Kafka-wire-compatible message broker."""


def _run_admin(
    ctx: click.Context, command: str, bootstrap_server: str, command_config: str | None, work: Any
) -> None:
    """Connect an admin client (``--command-config``: its security settings) and run
    ``work(client)``; a broker error or a connection failure exits 1 with its message."""
    from tidegate.client import BrokerResponseError, KafkaClient, KafkaError, SecurityConfigError
    from tidegate.config import ConfigError, read_properties

    try:
        security = read_properties(command_config) if command_config else None
    except ConfigError as exc:
        raise click.UsageError(f"--command-config: {exc}") from None
    try:
        with KafkaClient(bootstrap_server, client_id=f"tidegate-{command}",
                         request_timeout_ms=30_000, security=security) as client:
            work(client)
    except SecurityConfigError as exc:
        raise click.UsageError(f"--command-config: {exc}") from None
    except (BrokerResponseError, KafkaError) as exc:
        click.echo(f"tidegate {command}: {exc}", err=True)
        ctx.exit(1)


__all__ = ["_run_admin", "admin_options", "main"]
