"""``tidegate share-groups``: Kafka's kafka-share-groups.sh (ShareGroupCommand) over
tidegate's admin calls (:mod:`tidegate.client.admin`): list, describe (start offsets and
lag, members, state) and delete share groups, reset their start offsets
(AlterShareGroupOffsets) and delete their offsets of topics (DeleteShareGroupOffsets),
with Kafka's flags, column layout and messages. No ``--from-file`` and ``--export``:
Kafka 4.2's tool has neither."""

from __future__ import annotations

from typing import Any

import click

from tidegate.cli.base import _run_admin, admin_options, main
from tidegate.cli.group_tools import (
    KAFKA_ERRORS,
    MISSING,
    assignment_text,
    check_group_options,
    exception_text,
    new_offsets,
    parse_datetime,
    print_error,
    reset_scenarios,
    reset_target_options,
    table_row,
    topic_partitions,
)

_STATES = ("Empty", "Stable", "Dead")
_EPILOG = """\b
Examples:
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --list --state
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --describe --group work-queue
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --describe --group work-queue --members --verbose
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --delete --group work-queue
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group work-queue \\
      --topic orders --to-earliest --execute
  tidegate share-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group work-queue --topic orders
"""


@main.command("share-groups", context_settings={"max_content_width": 120}, epilog=_EPILOG)
@admin_options
@click.option("--list", "list_", is_flag=True, help="List all share groups.")
@click.option("--describe", is_flag=True, help="Describe the groups: start offsets and lag (default), --members or --state.")
@click.option("--delete", is_flag=True, help="Delete the groups (they must be empty).")
@click.option("--reset-offsets", is_flag=True,
              help="Reset the group's start offsets (the group must be empty); with --dry-run or --execute.")
@click.option("--delete-offsets", is_flag=True, help="Delete the group's offsets of the --topic topics.")
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="A share group (repeatable).")
@click.option("--all-groups", is_flag=True, help="Every share group (--describe, --delete).")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="A topic, or some of its partitions as topic:0,1 (--reset-offsets); a topic (--delete-offsets).")
@click.option("--all-topics", is_flag=True, help="--reset-offsets: every topic the group has start offsets for.")
@click.option("--dry-run", is_flag=True, help="--reset-offsets: show the new offsets only.")
@click.option("--execute", is_flag=True, help="--reset-offsets: set the new offsets.")
@reset_target_options(current="the current start offset")
@click.option("--offsets", is_flag=True, help="--describe: the start offsets and lag (the default).")
@click.option("--members", is_flag=True, help="--describe: the members.")
@click.option("--state", "state", is_flag=False, flag_value="", default=None, metavar="[STATES]",
              help="--describe: the groups' state; --list: show the state, or only groups in STATES (comma-separated).")
@click.option("--verbose", is_flag=True, help="--describe: leader epochs, member and group epochs.")
@click.option("--timeout", "timeout_ms", type=int, default=30000, show_default=True, metavar="MS",
              help="How long to wait for the broker's answers.")
@click.pass_context
def share_groups(
    ctx: click.Context, bootstrap_server: str, command_config: str | None, list_: bool, describe: bool,
    delete: bool, reset_offsets: bool, delete_offsets: bool, groups: tuple[str, ...], all_groups: bool,
    topics: tuple[str, ...], all_topics: bool, dry_run: bool, execute: bool, to_earliest: bool, to_latest: bool,
    to_current: bool, to_offset: int | None, to_datetime: str | None, offsets: bool, members: bool,
    state: str | None, verbose: bool, timeout_ms: int,
) -> None:
    """List, describe, delete and reset share groups, like Kafka's kafka-share-groups.sh."""
    check_group_options(ctx.params, "share")
    actions = [a for a, on in (("list", list_), ("describe", describe), ("delete", delete),
                                ("reset-offsets", reset_offsets), ("delete-offsets", delete_offsets)) if on]
    if len(actions) != 1:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                               "--reset-offsets, --delete-offsets")
    scenarios = reset_scenarios(to_earliest, to_latest, to_current, to_offset, to_datetime)
    _check_offset_options(reset_offsets, scenarios, dry_run or execute or all_topics)
    states = [s.strip() for s in (state or "").split(",") if s.strip()]
    canonical = {s.lower(): s for s in _STATES}
    if list_ and any(s.lower() not in canonical for s in states):
        raise click.UsageError(f"Invalid state list '{state}'. Valid states are: {', '.join(_STATES)}")

    def work(client: Any) -> None:
        from tidegate.client import admin

        def group_ids() -> list[str]:
            if all_groups:
                return [g.group_id for g in admin.list_groups(client, types=["share"], timeout_ms=timeout_ms)]
            return list(dict.fromkeys(groups))

        if list_:
            listed = admin.list_groups(client, [canonical[s.lower()] for s in states], types=["share"],
                                       timeout_ms=timeout_ms)  # fmt: skip
            if state is None:
                for g in listed:
                    click.echo(g.group_id)
                return
            width = max([15, *(len(g.group_id) for g in listed)])
            click.echo(table_row([width, 0], ["GROUP", "STATE"]))
            for g in listed:
                click.echo(table_row([width, 0], [g.group_id, g.state or "Unknown"]))
        elif describe:
            _describe(client, group_ids(), members, state is not None, verbose, timeout_ms)
        elif delete:
            _delete(client, group_ids(), timeout_ms)
        elif delete_offsets:
            _delete_offsets(ctx, client, groups[0], topics, timeout_ms)
        else:
            _reset(ctx, client, groups[0], topics, scenarios[0], to_offset,
                   parse_datetime(to_datetime) if to_datetime else None, execute, timeout_ms)

    _run_admin(ctx, "share-groups", bootstrap_server, command_config, work)


def _check_offset_options(reset_offsets: bool, scenarios: list[str], reset_options_given: bool) -> None:
    """The scenario of --reset-offsets (exactly one; its execution options and group are
    :func:`check_group_options`'); no scope is needed: without --topic, ShareGroupCommand
    resets every partition the group has a start offset for. ``reset_options_given``: --dry-run,
    --execute or --all-topics was given."""
    if not reset_offsets:
        if scenarios or reset_options_given:
            raise click.UsageError("--to-*, --all-topics, --dry-run and --execute go with --reset-offsets")
        return
    if len(scenarios) != 1:
        raise click.UsageError("Option [reset-offsets] takes one of these options: [to-current], [to-datetime], "
                               "[to-earliest], [to-latest], [to-offset]")


def _should_print(group: str, state: str, rows: int) -> bool:
    """Kafka's ``maybePrintEmptyGroupState``."""
    if state == "Dead":
        print_error(f"Share group '{group}' does not exist.")
    elif state == "Empty":
        click.echo(f"\nShare group '{group}' has no active members.", err=True)
    return state != "Dead" and rows > 0


def _describe(client: Any, group_ids: list[str], members: bool, state: bool, verbose: bool, timeout_ms: int) -> None:
    from tidegate.client import admin

    for desc in sorted(admin.describe_share_groups(client, group_ids, timeout_ms=timeout_ms), key=lambda d: d.group_id):
        group = desc.group_id
        if desc.error_code and desc.error_code != 69:  # GROUP_ID_NOT_FOUND reads as Dead
            print_error(f"Executing share group command failed due to {exception_text(desc.error_code)}")
            continue
        if state:
            _describe_state(desc, verbose)
        elif members:
            _describe_members(desc, verbose)
        elif _should_print(group, desc.state, 1):
            _describe_offsets(group, admin.describe_share_group_offsets(client, group, timeout_ms=timeout_ms),
                              verbose)  # fmt: skip


def _describe_state(desc: Any, verbose: bool) -> None:
    if not _should_print(desc.group_id, desc.state, 1):
        return
    node, host, port = desc.coordinator
    coordinator = f"{host}:{port}  ({node})"
    widths = [max(15, len(desc.group_id)), max(25, len(coordinator)), 15]
    head = ["GROUP", "COORDINATOR (ID)", "STATE"]
    row = [desc.group_id, coordinator, desc.state]
    if verbose:
        widths += [12, 17]
        head += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
        row += [desc.group_epoch, desc.assignment_epoch]
    click.echo()
    click.echo(table_row([*widths, 0], [*head, "#MEMBERS"]))
    click.echo(table_row([*widths, 0], [*row, len(desc.members)]))


def _describe_offsets(group: str, offsets: dict, verbose: bool) -> None:
    if not offsets:
        click.echo(f"\nShare group '{group}' has no offset information.")
        return
    widths = [max(15, len(group)), max([15, *(len(t) for t, _ in offsets)]), 10]
    head = ["GROUP", "TOPIC", "PARTITION"]
    if verbose:
        widths.append(13)
        head.append("LEADER-EPOCH")
    click.echo()
    click.echo(table_row([*widths, 13, 0], [*head, "START-OFFSET", "LAG"]))
    for (topic, partition), info in sorted(offsets.items()):
        row: list[Any] = [group, topic, partition]
        if verbose:
            row.append(MISSING if info.leader_epoch < 0 else info.leader_epoch)
        row += [MISSING if info.start_offset < 0 else info.start_offset, MISSING if info.lag < 0 else info.lag]
        click.echo(table_row([*widths, 13, 0], row))


def _describe_members(desc: Any, verbose: bool) -> None:
    members = sorted(desc.members, key=lambda m: m.member_id)
    if not _should_print(desc.group_id, desc.state, len(members)):
        return
    widths = [max(15, len(desc.group_id)), max([15, *(len(m.member_id) for m in members)]),
              max([15, *(len(m.host) for m in members)]), max([15, *(len(m.client_id) for m in members)]), 12]
    head = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        widths.append(13)
        head.append("MEMBER-EPOCH")
    click.echo()
    click.echo(table_row([*widths, 0], [*head, "ASSIGNMENT"]))
    for m in members:
        row: list[Any] = [desc.group_id, m.member_id, m.host, m.client_id, len(m.assignment)]
        if verbose:
            row.append(m.member_epoch)
        click.echo(table_row([*widths, 0], [*row, assignment_text(m.assignment)]))


def _delete(client: Any, group_ids: list[str], timeout_ms: int) -> None:
    """Kafka's ``deleteShareGroups``: ids that are not share groups, or not empty, are
    refused before the request."""
    from tidegate.client import admin

    listed = {g.group_id: g.state for g in admin.list_groups(client, types=["share"], timeout_ms=timeout_ms)}
    failed: dict[str, str] = {}
    for g in group_ids:
        if g not in listed:
            failed[g] = f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group '{g}' is not a share group."
        elif listed[g] != "Empty":
            failed[g] = f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{g}' is not EMPTY."
    results = admin.delete_groups(client, [g for g in group_ids if g not in failed], timeout_ms=timeout_ms)
    ok = [g for g, code in results.items() if code == 0]
    failed |= {g: exception_text(code) for g, code in results.items() if code != 0}
    if not failed:
        click.echo(f"Deletion of requested share groups ({', '.join(repr(g) for g in ok)}) was successful.")
        return
    print_error("Deletion of some share groups failed:")
    for g, error in failed.items():
        click.echo(f"* Group '{g}' could not be deleted due to: {error}")
    if ok:
        click.echo(f"\nThese share groups were deleted successfully: {', '.join(repr(g) for g in ok)}")


def _reset(ctx: click.Context, client: Any, group: str, topics: tuple[str, ...], scenario: str,
           to_offset: int | None, reset_ms: int | None, execute: bool, timeout_ms: int) -> None:
    """Kafka's ``ShareGroupService.resetOffsets``: only an empty group (or none yet); the
    new start offsets of the --topic partitions (or of every partition the group has
    state for) printed, and set with --execute (AlterShareGroupOffsets)."""
    from tidegate.client import admin

    (desc,) = admin.describe_share_groups(client, [group], timeout_ms=timeout_ms)
    if desc.state not in ("Empty", "Dead"):
        print_error(f"Share group '{group}' is not empty.")
        ctx.exit(1)
    known = admin.describe_share_group_offsets(client, group, timeout_ms=timeout_ms)
    current = {tp: o.start_offset for tp, o in known.items() if o.start_offset >= 0}
    partitions = topic_partitions(client, topics) if topics else sorted(known)
    spec = {"to-earliest": -2, "to-latest": -1}.get(scenario)
    plan = new_offsets(client, partitions, current, scenario, spec, to_offset, None, reset_ms, timeout_ms)
    if execute and plan:
        top, message, results = admin.alter_share_group_offsets(client, group, plan, timeout_ms=timeout_ms)
        failed = [(tp, code) for tp, code in sorted(results.items()) if code]
        if top or failed:
            code = top or failed[0][1]
            where = "" if top else f" ({failed[0][0][0]}-{failed[0][0][1]})"
            print_error(f"Executing share group command failed due to {message or exception_text(code)}{where}")
            ctx.exit(1)
    gw = max(15, len(group))
    tw = max([15, *(len(t) for t, _ in plan)])
    click.echo()
    click.echo(table_row([gw, tw, 10, 0], ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
    for (t, p), offset in sorted(plan.items()):
        click.echo(table_row([gw, tw, 10, 0], [group, t, p, offset]))


def _delete_offsets(ctx: click.Context, client: Any, group: str, topics: tuple[str, ...], timeout_ms: int) -> None:
    """Kafka's ``ShareGroupService.deleteOffsets``: the group-level error, then each
    topic's status."""
    from tidegate.client import admin

    top, message, results = admin.delete_share_group_offsets(client, group, topics, timeout_ms=timeout_ms)
    default = KAFKA_ERRORS.get(top, ("", f"error code {top}"))[1]
    if top in (24, 69, 30, 68):  # INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, GROUP_AUTHORIZATION_FAILED, NON_EMPTY_GROUP
        print_error(message or default)
    elif top and top not in (29, 3):  # topic-level errors are shown per topic
        print_error(f"Encounter some unknown error: {message or default}")
    statuses = {t: results.get(t, (top, message)) for t in topics}
    if statuses:
        width = max([15, *(len(t) for t in statuses)])
        click.echo()
        click.echo(table_row([width, 0], ["TOPIC", "STATUS"]))
        for t, (code, text) in sorted(statuses.items()):
            status = "Successful" if code == 0 else \
                f"Error: {text or KAFKA_ERRORS.get(code, ('', f'error code {code}'))[1]}"
            click.echo(table_row([width, 0], [t, status]))
    if top:
        ctx.exit(1)
