"""``tidegate consumer-groups``: Kafka's kafka-consumer-groups.sh (ConsumerGroupCommand)
over tidegate's admin calls (:mod:`tidegate.client.admin`): list, describe (offsets and
lag, members, state), reset offsets, delete groups and delete offsets, with Kafka's
flags, column layout and messages."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

import click

from tidegate.cli.base import _run_admin, admin_options, main
from tidegate.cli.group_tools import (
    KAFKA_ERRORS,
    MISSING,
    assignment_text,
    check_group_options,
    end_offsets,
    exception_text,
    new_offsets,
    parse_datetime,
    parse_duration,
    print_error,
    reset_scenarios,
    reset_target_options,
    table_row,
    topic_partitions,
)

_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
           "Assigning", "Reconciling")  # fmt: skip
#: the group types --list --type takes, as Kafka's GroupType prints them
_TYPES = ("Classic", "Consumer")
_EPILOG = """\b
Examples:
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --list --state
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --list --type consumer
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group orders-app
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group orders-app --members --verbose
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group orders-app \\
      --topic orders --to-datetime 2026-11-25T00:00:00.000 --execute
  tidegate consumer-groups --bootstrap-server 127.0.0.1:9092 --delete --group orders-app
"""


@main.command("consumer-groups", context_settings={"max_content_width": 120}, epilog=_EPILOG)
@admin_options
@click.option("--list", "list_", is_flag=True, help="List all consumer groups.")
@click.option("--describe", is_flag=True, help="Describe the groups: offsets and lag (default), --members or --state.")
@click.option("--delete", is_flag=True, help="Delete the groups (they must be empty).")
@click.option("--reset-offsets", is_flag=True,
              help="Reset the groups' offsets (the group must be inactive); --dry-run by default.")
@click.option("--delete-offsets", is_flag=True, help="Delete the group's offsets of the --topic partitions.")
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="A consumer group (repeatable).")
@click.option("--all-groups", is_flag=True, help="Every group (--describe, --delete, --reset-offsets).")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="A topic, or some of its partitions as topic:0,1 (--reset-offsets, --delete-offsets).")
@click.option("--all-topics", is_flag=True, help="--reset-offsets: every topic the group has offsets for.")
@click.option("--offsets", is_flag=True, help="--describe: the offsets and lag (the default).")
@click.option("--members", is_flag=True, help="--describe: the members.")
@click.option("--state", "state", is_flag=False, flag_value="", default=None, metavar="[STATES]",
              help="--describe: the groups' state; --list: show the state, or only groups in STATES (comma-separated).")
@click.option("--type", "type_", is_flag=False, flag_value="", default=None, metavar="[TYPES]",
              help="--list: show the group type, or only groups of TYPES (classic, consumer; comma-separated).")
@click.option("--verbose", is_flag=True,
              help="--describe: the committed leader epochs; with --members the epochs, current and target "
                   "assignments; with --state the group epochs.")
@click.option("--dry-run", is_flag=True, help="--reset-offsets: show the new offsets only (the default).")
@click.option("--execute", is_flag=True, help="--reset-offsets: commit the new offsets.")
@reset_target_options(current="the current (committed) offset")
@click.option("--by-duration", metavar="PnDTnHnMnS", help="Reset to the first offset at or after now minus a duration.")
@click.option("--shift-by", type=int, metavar="N", help="Move the committed offsets by N (may be negative).")
@click.option("--timeout", "timeout_ms", type=int, default=5000, show_default=True, metavar="MS",
              help="How long to wait for the broker's answers.")
@click.pass_context
def consumer_groups(
    ctx: click.Context, bootstrap_server: str, command_config: str | None, list_: bool, describe: bool,
    delete: bool, reset_offsets: bool, delete_offsets: bool, groups: tuple[str, ...], all_groups: bool,
    topics: tuple[str, ...], all_topics: bool, offsets: bool, members: bool, state: str | None, type_: str | None,
    verbose: bool,
    dry_run: bool, execute: bool, to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None,
    to_datetime: str | None, by_duration: str | None, shift_by: int | None, timeout_ms: int,
) -> None:
    """List, describe, reset and delete consumer groups, like Kafka's kafka-consumer-groups.sh."""
    check_group_options(ctx.params, "consumer")
    actions = [a for a, on in (("list", list_), ("describe", describe), ("delete", delete),
                                ("reset-offsets", reset_offsets), ("delete-offsets", delete_offsets)) if on]
    if len(actions) != 1:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                               "--reset-offsets, --delete-offsets")
    scenarios = reset_scenarios(to_earliest, to_latest, to_current, to_offset, to_datetime) + [
        s for s, on in (("by-duration", by_duration is not None), ("shift-by", shift_by is not None)) if on]
    if reset_offsets:
        if len(scenarios) != 1:
            raise click.UsageError("Option [reset-offsets] takes exactly one of: --to-earliest, --to-latest, "
                                   "--to-current, --to-offset, --to-datetime, --by-duration, --shift-by")
        if not topics and not all_topics:
            raise click.UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    elif scenarios or dry_run or execute:
        raise click.UsageError("--to-*, --by-duration, --shift-by, --dry-run and --execute go with --reset-offsets")
    states = [s.strip() for s in (state or "").split(",") if s.strip()]
    if list_ and states:
        bad = [s for s in states if s.lower() not in {x.lower() for x in _STATES}]
        if bad:
            raise click.UsageError(f"Invalid state list '{state}'. Valid states are: {', '.join(_STATES)}")
    types = [t.strip().lower() for t in (type_ or "").split(",") if t.strip()]
    if any(t not in {x.lower() for x in _TYPES} for t in types):
        raise click.UsageError(f"Invalid types list '{type_}'. Valid types are: {', '.join(_TYPES)}")
    reset_ms = parse_datetime(to_datetime) if to_datetime else None
    if by_duration:
        reset_ms = int(time.time() * 1000) - parse_duration(by_duration)

    def work(client: Any) -> None:
        from tidegate.client import admin

        def group_ids() -> list[str]:
            if all_groups:
                return [g.group_id for g in admin.list_groups(client, timeout_ms=timeout_ms)
                        if g.protocol_type in ("consumer", "")]
            return list(groups)

        if list_:
            _list(client, state, states, type_, types, timeout_ms)
        elif describe:
            _describe(client, group_ids(), members, state is not None, verbose, timeout_ms)
        elif delete:
            _delete(client, group_ids(), timeout_ms)
        elif delete_offsets:
            _delete_offsets(ctx, client, groups[0], topics, timeout_ms)
        else:
            spec = {"to-earliest": -2, "to-latest": -1}.get(scenarios[0])
            _reset(client, group_ids(), topics, all_topics, scenarios[0], spec, to_offset, shift_by,
                   reset_ms, execute, timeout_ms)  # fmt: skip

    _run_admin(ctx, "consumer-groups", bootstrap_server, command_config, work)


def _list(client: Any, state: str | None, states: list[str], type_: str | None, types: list[str],
          timeout_ms: int) -> None:
    """Kafka's ``listGroups``: the ids, or with --state / --type a table of the groups in
    those states and of those types."""
    from tidegate.client import admin

    canonical = {s.lower(): s for s in _STATES}
    listed = [g for g in admin.list_groups(client, [canonical[s.lower()] for s in states], types=types,
                                           timeout_ms=timeout_ms)
              if g.protocol_type in ("consumer", "")]  # fmt: skip
    if state is None and type_ is None:
        for g in listed:
            click.echo(g.group_id)
        return
    width = max([15, *(len(g.group_id) for g in listed)]) + 10
    columns = [("GROUP", width, lambda g: g.group_id)]
    if type_ is not None:
        columns.append(("TYPE", 20, lambda g: g.group_type.capitalize() or "Unknown"))
    if state is not None:
        columns.append(("STATE", 20, lambda g: g.state or "Unknown"))
    widths = [w for _, w, _ in columns]
    click.echo(table_row(widths, [name for name, _, _ in columns]))
    for g in listed:
        click.echo(table_row(widths, [cell(g) for _, _, cell in columns]))


def _should_print(group: str, state: str, rows: int) -> bool:
    """Kafka's ``shouldPrintMemberState``."""
    if state == "Dead":
        print_error(f"Consumer group '{group}' does not exist.")
        return False
    if state == "Empty":
        click.echo(f"\nConsumer group '{group}' has no active members.", err=True)
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        click.echo(f"\nWarning: Consumer group '{group}' is rebalancing.", err=True)
    return rows > 0


def _describe(client: Any, group_ids: list[str], members: bool, state: bool, verbose: bool, timeout_ms: int) -> None:
    """Kafka's ``describeGroups``: each group described as ``Admin.describeConsumerGroups``
    does (ConsumerGroupDescribe, DescribeGroups for a classic group), then its offsets
    and lag (the default), its members or its state."""
    from tidegate.client import admin

    described = admin.describe_consumer_groups(client, group_ids, timeout_ms=timeout_ms)
    for desc in sorted(described, key=lambda d: d.group_id):
        if desc.error_code:
            print_error(f"Executing consumer group command failed due to {exception_text(desc.error_code)}")
            continue
        group = desc.group_id
        if state:
            _describe_state(desc, verbose)
            continue
        if members:
            _describe_members(desc, verbose)
            continue
        epochs: dict[tuple[str, int], int] = {}
        committed = admin.list_group_offsets(client, group, leader_epochs=epochs, timeout_ms=timeout_ms)
        rows: list[list[Any]] = []
        assigned: set[tuple[str, int]] = set()
        for m in sorted(desc.members, key=lambda m: -len(m.assignment)):
            if not m.assignment:
                continue
            assigned.update(m.assignment)
            rows += _partition_rows(client, group, m.assignment, committed, m.member_id, m.host, m.client_id,
                                    timeout_ms)  # fmt: skip
        rest = sorted(set(committed) - assigned)
        if rest:
            rows += _partition_rows(client, group, rest, committed, MISSING, MISSING, MISSING, timeout_ms)
        if not _should_print(group, desc.state, len(rows)):
            continue
        _print_offsets(rows, epochs if verbose else None)


def _print_offsets(rows: list[list[Any]], epochs: dict[tuple[str, int], int] | None) -> None:
    """Kafka's ``printOffsets``; with ``epochs`` (--verbose) the LEADER-EPOCH of each
    committed offset after PARTITION ("-" where none was committed)."""
    head = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
            "CLIENT-ID"]  # fmt: skip
    widths = [max([15, *(len(str(r[0])) for r in rows)]), max([15, *(len(str(r[1])) for r in rows)]),
              10, 15, 15, 15, max([15, *(len(str(r[6])) for r in rows)]),
              max([15, *(len(str(r[7])) for r in rows)]), 0]  # fmt: skip
    if epochs is not None:
        head.insert(3, "LEADER-EPOCH")
        widths.insert(3, 15)
        rows = [[*r[:3], epochs.get((r[1], r[2]), MISSING), *r[3:]] for r in rows]
    click.echo()
    click.echo(table_row(widths, head))
    for r in rows:
        click.echo(table_row(widths, r))


def _or_missing(value: Any) -> Any:
    return MISSING if value is None else value


def _describe_state(desc: Any, verbose: bool) -> None:
    """Kafka's ``printStates``; --verbose adds a consumer group's group epoch and target
    assignment epoch ("-" for a classic group)."""
    if not _should_print(desc.group_id, desc.state, 1):
        return
    node, host, port = desc.coordinator
    coordinator = f"{host}:{port}  ({node})"
    widths = [max(15, len(desc.group_id)), max(25, len(coordinator)), 20, 20]
    head = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [desc.group_id, coordinator, desc.protocol or MISSING, desc.state]
    if verbose:
        widths += [15, 25]
        head += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [_or_missing(desc.group_epoch), _or_missing(desc.target_assignment_epoch)]
    click.echo()
    click.echo(table_row([*widths, 0], [*head, "#MEMBERS"]))
    click.echo(table_row([*widths, 0], [*row, len(desc.members)]))


def _partition_rows(
    client: Any, group: str, partitions: Iterable[tuple[str, int]], committed: dict, member: str, host: str,
    client_id: str, timeout_ms: int,
) -> list[list[Any]]:
    """Kafka's ``describePartitions``: one row per partition, sorted by topic and partition."""
    parts = sorted(partitions)
    ends = end_offsets(client, parts, -1, timeout_ms)
    rows = []
    for tp in parts:
        offset = committed.get(tp)
        end = ends.get(tp)
        lag = end - offset if offset is not None and end is not None and end >= 0 else None
        rows.append([group, tp[0], tp[1], MISSING if offset is None else offset,
                     MISSING if end is None or end < 0 else end, MISSING if lag is None else lag,
                     member, host, client_id])  # fmt: skip
    return rows


def _describe_members(desc: Any, verbose: bool) -> None:
    """Kafka's ``printMembers``: --verbose adds each member's epoch and current assignment,
    the group's target assignment epoch and the member's target ("-" where a classic
    group has none), and UPGRADED when a consumer group has members of both protocols."""
    group = desc.group_id
    if desc.state == "Dead":
        _should_print(group, desc.state, 0)
        return
    _should_print(group, desc.state, len(desc.members))
    ms = list(desc.members)
    with_instance = any(m.group_instance_id for m in ms)
    widths = [max([15, len(group)]), max([15, *(len(m.member_id) for m in ms)])]
    if with_instance:
        widths.append(max([17, *(len(m.group_instance_id or "") for m in ms)]))
    widths += [max([15, *(len(m.host) for m in ms)]), max([15, *(len(m.client_id) for m in ms)]), 15]
    current = [assignment_text(m.assignment) or MISSING for m in ms]
    target = [assignment_text(m.target_assignment or ()) or MISSING for m in ms]
    migrating = {m.upgraded for m in ms} >= {True, False}
    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else []), "HOST", "CLIENT-ID",
              "#PARTITIONS"]  # fmt: skip
    tail_widths = [15, max([20, *(len(c) for c in current)]), 15, max([20, *(len(t) for t in target)])]
    tail = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    if migrating:
        tail_widths.append(0)
        tail.append("UPGRADED")
    line = table_row(widths, header) + " "
    if verbose:
        line += table_row(tail_widths, tail)
    click.echo()
    click.echo(line)
    for m, cur, tgt in zip(ms, current, target, strict=True):
        cells = [group, m.member_id, *([m.group_instance_id or ""] if with_instance else []), m.host, m.client_id,
                 len(m.assignment)]  # fmt: skip
        line = table_row(widths, cells) + " "
        if verbose:
            upgraded = [MISSING if m.upgraded is None else str(m.upgraded).lower()] if migrating else []
            line += table_row(tail_widths, [_or_missing(m.member_epoch), cur, _or_missing(desc.target_assignment_epoch),
                                       tgt, *upgraded])  # fmt: skip
        click.echo(line)


def _delete(client: Any, group_ids: list[str], timeout_ms: int) -> None:
    from tidegate.client import admin

    results = admin.delete_groups(client, group_ids, timeout_ms=timeout_ms)
    ok = [g for g, code in results.items() if code == 0]
    failed = {g: code for g, code in results.items() if code != 0}
    if not failed:
        click.echo(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in ok)}) was successful.")
        return
    print_error("Deletion of some consumer groups failed:")
    for g, code in failed.items():
        click.echo(f"* Group '{g}' could not be deleted due to: {exception_text(code)}")
    if ok:
        click.echo(f"\nThese consumer groups were deleted successfully: {', '.join(repr(g) for g in ok)}")


def _reset(
    client: Any, group_ids: list[str], topics: tuple[str, ...], all_topics: bool, scenario: str,
    spec: int | None, to_offset: int | None, shift_by: int | None, reset_ms: int | None, execute: bool,
    timeout_ms: int,
) -> None:
    from tidegate.client import admin

    plans: dict[str, dict[tuple[str, int], int]] = {}
    for desc in admin.describe_consumer_groups(client, group_ids, timeout_ms=timeout_ms):
        group = desc.group_id
        if desc.state not in ("Empty", "Dead"):
            print_error(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                         f"state is {desc.state}.")  # fmt: skip
            plans[group] = {}
            continue
        committed = admin.list_group_offsets(client, group, timeout_ms=timeout_ms)
        partitions = sorted(committed) if all_topics else topic_partitions(client, topics)
        plan = new_offsets(client, partitions, committed, scenario, spec, to_offset, shift_by, reset_ms,
                            timeout_ms)  # fmt: skip
        if execute and plan:
            _commit_with_progress(client, group, plan, timeout_ms)
        plans[group] = plan
    gw = max([15, *(len(g) for g in plans)])
    tw = max([15, *(len(t) for plan in plans.values() for t, _ in plan)])
    click.echo()
    if plans:
        click.echo(table_row([gw, tw, 10, 0], ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
    for group, plan in plans.items():
        for (t, p), offset in plan.items():
            click.echo(table_row([gw, tw, 10, 0], [group, t, p, offset]))


def _commit_with_progress(client: Any, group: str, plan: dict[tuple[str, int], int], timeout_ms: int) -> None:
    """Commit the new offsets, in chunks behind a progress bar when the terminal shows one
    (a reset of many partitions)."""
    from tidegate.client import admin

    items = sorted(plan.items())
    chunk = 1000
    show = len(items) > chunk and sys.stderr.isatty()
    progress: Any = None
    if show:
        from rich.progress import Progress

        progress = Progress(transient=True)
        progress.start()
        task = progress.add_task(f"resetting {group}", total=len(items))
    try:
        for i in range(0, len(items), chunk):
            part = dict(items[i : i + chunk])
            errors = admin.alter_group_offsets(client, group, part, timeout_ms=timeout_ms)
            bad = {tp: code for tp, code in errors.items() if code}
            if bad:
                (tp, code), *_ = bad.items()
                raise click.ClickException(
                    f"Executing consumer group command failed due to {exception_text(code)} ({tp[0]}-{tp[1]})"
                )
            if progress is not None:
                progress.update(task, advance=len(part))
    finally:
        if progress is not None:
            progress.stop()


def _delete_offsets(ctx: click.Context, client: Any, group: str, topics: tuple[str, ...], timeout_ms: int) -> None:
    from tidegate.client import admin

    partitions = topic_partitions(client, topics)
    top, results = admin.delete_group_offsets(client, group, partitions, timeout_ms=timeout_ms)
    if top == 0:
        click.echo(f"Request succeeded for deleting offsets from group {group}.")
    elif top in (24, 69, 30, 68):
        print_error(KAFKA_ERRORS[top][1])
    elif top in (86, 29, 3):
        print_error("Encountered some partition-level error, see the follow-up details.")
    else:
        print_error(f"Encountered some unknown error: {top}")
    width = max([15, *(len(t) for t, _ in results)])
    click.echo()
    click.echo(table_row([width, 10, 15], ["TOPIC", "PARTITION", "STATUS"]))
    for (t, p), code in sorted(results.items(), key=lambda kv: kv[0][0] + str(kv[0][1])):
        status = "Successful" if code == 0 else f"Error: {KAFKA_ERRORS.get(code, ('', f'error code {code}'))[1]}"
        click.echo(table_row([width, 10, 15], [t, p, status]))
    if top:
        ctx.exit(1)
