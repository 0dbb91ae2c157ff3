"""``tidegate topics``: Kafka's kafka-topics.sh: create, list, describe, alter and delete
topics over the wire."""

from __future__ import annotations

from typing import Any

import click

from tidegate.cli.base import _run_admin, admin_options, main

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
    from tidegate.client import BrokerResponseError
    from tidegate.client.admin import (
        create_partitions,
        create_topic,
        delete_topics,
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
    config_map = _config_map(configs)
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
        elif found:
            _print_descriptions(client, found)

    _run_admin(ctx, "topics", bootstrap_server, command_config, work)


def _config_map(configs: tuple[str, ...]) -> dict[str, str]:
    """The --config K=V options."""
    config_map: dict[str, str] = {}
    for c in configs:
        key, sep, value = c.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--config {c!r}: expected K=V")
        config_map[key] = value
    return config_map


def _print_descriptions(client: Any, names: list[str]) -> None:
    """kafka-topics.sh --describe: a line per topic (its overridden configs), one per partition."""
    from tidegate.client import UnsupportedVersionError
    from tidegate.client.admin import RESOURCE_TOPIC, describe_configs, describe_topics

    configs_supported = True
    for d in describe_topics(client, names):
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
