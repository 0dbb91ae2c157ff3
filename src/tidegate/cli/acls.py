"""``tidegate acls``: Kafka's kafka-acls.sh: add, remove and list ACLs over the wire."""

from __future__ import annotations

import re
from typing import Any

import click

from tidegate.cli.base import _run_admin, admin_options, main

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
