"""``tidegate top``: a live view of a broker from its metrics (:mod:`tidegate.top`)."""

from __future__ import annotations

import click

from tidegate.cli.base import main


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
