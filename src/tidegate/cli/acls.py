"""``tidegate acls``: Kafka's kafka-acls.sh: add, remove and list ACLs over the wire."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _AclOptions:
    """kafka-acls.sh's options, as click parses them (one field per option)."""

    bootstrap_server: str
    command_config: str | None
    add: bool
    remove: bool
    list_: bool
    allow_principals: tuple[str, ...]
    deny_principals: tuple[str, ...]
    allow_hosts: tuple[str, ...]
    deny_hosts: tuple[str, ...]
    operations: tuple[str, ...]
    topics: tuple[str, ...]
    groups: tuple[str, ...]
    cluster: bool
    transactional_ids: tuple[str, ...]
    delegation_tokens: tuple[str, ...]
    user_principals: tuple[str, ...]
    pattern_type: str | None
    principals: tuple[str, ...]
    producer: bool
    consumer: bool
    idempotent: bool
    force: bool

    def named_resources(self) -> list[tuple[Any, str]]:
        """(ResourceType, name) of each resource option, in kafka-acls.sh's order."""
        from tidegate.security.authorizer.acl import CLUSTER_NAME, ResourceType

        return [
            *((ResourceType.TOPIC, t) for t in self.topics),
            *((ResourceType.GROUP, g) for g in self.groups),
            *([(ResourceType.CLUSTER, CLUSTER_NAME)] if self.cluster else []),
            *((ResourceType.TRANSACTIONAL_ID, t) for t in self.transactional_ids),
            *((ResourceType.DELEGATION_TOKEN, t) for t in self.delegation_tokens),
            *((ResourceType.USER, u) for u in self.user_principals),
        ]

    def pattern(self) -> Any:
        from tidegate.security.authorizer.acl import PatternType

        return PatternType[(self.pattern_type or ("any" if self.list_ else "literal")).upper()]

    def check(self) -> None:
        """kafka-acls.sh's usage rules (click.UsageError)."""
        from tidegate.security.authorizer.acl import PatternType

        if self.add + self.remove + self.list_ != 1:
            raise click.UsageError("Give exactly one of --add, --remove and --list.")
        if self.producer and self.consumer:
            raise click.UsageError("Give --producer or --consumer, not both.")
        if (self.producer or self.consumer) and self.operations:
            raise click.UsageError("--producer and --consumer set the operations: no --operation.")
        if (self.producer or self.consumer) and not self.topics:
            raise click.UsageError("--producer and --consumer need --topic.")
        if self.idempotent and not self.producer:
            raise click.UsageError("--idempotent goes with --producer.")
        if self.add and self.pattern() not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise click.UsageError("--add needs --resource-pattern-type literal or prefixed.")
        if (self.add or self.remove) and not self.named_resources():
            raise click.UsageError("Give a resource: --topic, --group, --cluster, --transactional-id, ...")
        if self.add and not (self.allow_principals or self.deny_principals):
            raise click.UsageError("--add needs --allow-principal or --deny-principal.")
        for p in (*self.allow_principals, *self.deny_principals, *self.principals):
            if ":" not in p:
                raise click.UsageError(f"Invalid principal {p!r}: expected TYPE:NAME, e.g. User:alice.")

    def resources(self) -> list[tuple[Any, str]]:
        """The resources the ACLs are on: those named, and the cluster for --idempotent."""
        from tidegate.security.authorizer.acl import CLUSTER_NAME, ResourceType

        resources = self.named_resources()
        if self.producer and self.idempotent and (ResourceType.CLUSTER, CLUSTER_NAME) not in resources:
            resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
        return resources

    def entries(self) -> list[tuple[str, str, Any]]:
        """(principal, host, permission) of each ACL entry given."""
        from tidegate.security.authorizer.acl import AclPermissionType

        return [(p, h, AclPermissionType.ALLOW) for p in self.allow_principals for h in (self.allow_hosts or ("*",))] + [
            (p, h, AclPermissionType.DENY) for p in self.deny_principals for h in (self.deny_hosts or ("*",))]

    def operations_for(self, rtype: Any) -> list[Any]:
        """The operations of the ACLs on a resource of type ``rtype``."""
        from tidegate.security.authorizer.acl import AclOperation, ResourceType

        if self.producer:
            return {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                    ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                    ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE]}.get(rtype, [])
        if self.consumer:
            return {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                    ResourceType.GROUP: [AclOperation.READ]}.get(rtype, [])
        return [_acl_operation(o) for o in self.operations] or [AclOperation.ALL]


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
def acls(ctx: click.Context, **options: Any) -> None:
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
    opts = _AclOptions(**options)
    opts.check()
    work = _add_acls if opts.add else _remove_acls if opts.remove else _list_acls
    _run_admin(ctx, "acls", opts.bootstrap_server, opts.command_config, lambda client: work(client, opts))


def _add_acls(client: Any, opts: _AclOptions) -> None:
    from tidegate.client.admin import create_acls, describe_acls
    from tidegate.security.authorizer.acl import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
    )

    resources, pattern, entries = opts.resources(), opts.pattern(), opts.entries()
    bindings = [AclBinding(rtype, name, pattern, p, h, op, perm)
                for rtype, name in resources for op in opts.operations_for(rtype) for p, h, perm in entries]
    for rtype, name in resources:
        mine = [b for b in bindings if (b.resource_type, b.name) == (rtype, name)]
        _print_acls(mine, "Adding ACLs for resource")
    create_acls(client, bindings)
    current = [acl for rtype, name in resources
               for acl in describe_acls(client, AclBindingFilter(
                   rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY))]
    _print_acls(current, "Current ACLs for resource")


def _remove_acls(client: Any, opts: _AclOptions) -> None:
    from tidegate.client.admin import delete_acls
    from tidegate.security.authorizer.acl import AclBindingFilter, AclOperation, AclPermissionType

    resources, pattern, entries = opts.resources(), opts.pattern(), opts.entries()
    if entries:
        filters = [AclBindingFilter(rtype, name, pattern, p, h, op, perm)
                   for rtype, name in resources for op in opts.operations_for(rtype) for p, h, perm in entries]
    else:
        filters = [AclBindingFilter(rtype, name, pattern, None, None, AclOperation.ANY,
                                    AclPermissionType.ANY) for rtype, name in resources]
    if not opts.force and not click.confirm("Are you sure you want to remove the matching ACLs?"):
        return
    removed = [acl for found in delete_acls(client, filters) for acl in found]
    _print_acls(removed, "Removed ACLs for resource")
    if not removed:
        click.echo("No matching ACLs.")


def _list_acls(client: Any, opts: _AclOptions) -> None:
    from tidegate.client.admin import describe_acls
    from tidegate.security.authorizer.acl import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourceType,
    )

    pattern = opts.pattern()
    wanted: list[tuple[ResourceType, str | None]] = list(opts.resources()) or [(ResourceType.ANY, None)]
    seen: dict[Any, None] = {}
    for wtype, wname in wanted:
        for p in opts.principals or (None,):
            f = AclBindingFilter(wtype, wname, pattern, p, None, AclOperation.ANY, AclPermissionType.ANY)
            for acl in describe_acls(client, f):
                seen[acl] = None
    _print_acls(list(seen), "Current ACLs for resource")
