"""What ``tidegate consumer-groups`` and ``tidegate share-groups`` share (Kafka's
ConsumerGroupCommand and ShareGroupCommand): their option checks with Kafka's messages,
the ``--reset-offsets`` targets and how the new offsets are found, the parsing of
datetimes and durations, and Kafka's column and error printing."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import click

from tidegate.utils import durations

#: a click command function (what the options decorate)
_F = TypeVar("_F", bound=Callable[..., Any])


MISSING = "-"


#: Kafka's Errors: (exception class, message) of the codes these commands print
KAFKA_ERRORS = {
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    15: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    24: ("InvalidGroupIdException", "The configured groupId is invalid."),
    25: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    30: ("GroupAuthorizationException", "Group authorization failed."),
    68: ("GroupNotEmptyException", "The group is not empty."),
    69: ("GroupIdNotFoundException", "The group id does not exist."),
    86: ("GroupSubscribedToTopicException", "The consumer group is actively subscribed to the topic"),
}


#: kafka-consumer-groups.sh's warning for --reset-offsets without --dry-run or --execute
#: (verbatim, the missing space after "missing." included)
_NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing.In a future major release, the default "
    "behavior of this command will be to prompt the user before executing the reset rather than doing a dry run. "
    "You should add the --dry-run option explicitly if you are scripting this command and want to keep the "
    "current default behavior without prompting."
)


def exception_text(code: int) -> str:
    """An error as Kafka's tool prints a thrown exception."""
    name, message = KAFKA_ERRORS.get(code, ("KafkaException", f"error code {code}"))
    return f"org.apache.kafka.common.errors.{name}: {message}"


def print_error(message: str) -> None:
    click.echo(f"\nError: {message}")


def table_row(fmt: list[int], values: Iterable[Any]) -> str:
    """One line of Kafka's ``%-Ns`` columns (the last one unpadded)."""
    cells = [str(v) for v in values]
    return " ".join(f"{c:<{w}}" if w else c for c, w in zip(cells, fmt, strict=True))


def parse_datetime(text: str) -> int:
    """Kafka's ``Utils.getDateTime``: yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone
    (Z, +hh:mm, -hhmm); without one, the local time zone. Milliseconds since the epoch."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(Z|[+-]\d{2}:?\d{2})?", text)
    if m is None:
        raise click.UsageError(
            f"Error parsing timestamp '{text}': expected the format yyyy-MM-dd'T'HH:mm:ss.SSS"
        )
    stamp = datetime.fromisoformat(m.group(1))
    zone = m.group(2)
    if zone is None:
        stamp = stamp.astimezone()  # the local zone, as Kafka without one
    elif zone == "Z":
        stamp = stamp.replace(tzinfo=UTC)
    else:
        z = zone.replace(":", "")
        sign = 1 if z[0] == "+" else -1
        stamp = stamp.replace(tzinfo=timezone(sign * timedelta(hours=int(z[1:3]), minutes=int(z[3:5]))))
    return int(stamp.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration (:func:`tidegate.utils.durations.parse_duration`), in
    milliseconds; a usage error if it is not one."""
    try:
        return durations.parse_duration(text)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def reset_target_options(current: str) -> Callable[[_F], _F]:
    """The --to-* options of ``--reset-offsets`` both group tools take (kafka-consumer-groups.sh's
    and kafka-share-groups.sh's), in their order; ``current``: what --to-current resets to."""
    options = [
        click.option("--to-earliest", is_flag=True, help="Reset to the earliest offset."),
        click.option("--to-latest", is_flag=True, help="Reset to the latest offset."),
        click.option("--to-current", is_flag=True, help=f"Reset to {current}."),
        click.option("--to-offset", type=int, metavar="N", help="Reset to offset N (within the log's range)."),
        click.option("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                     help="Reset to the first offset at or after a time."),
    ]

    def decorate(f: _F) -> _F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def reset_scenarios(
    to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None, to_datetime: str | None
) -> list[str]:
    """The --to-* options given, by name (``--reset-offsets`` takes exactly one scenario)."""
    return [s for s, on in (("to-earliest", to_earliest), ("to-latest", to_latest), ("to-current", to_current),
                            ("to-offset", to_offset is not None), ("to-datetime", to_datetime is not None)) if on]


def _unavailable(params: Mapping[str, Any], needs: Mapping[str, tuple[str, ...]]) -> None:
    """joptsimple's ``availableIf``: an option given without any of the options it needs."""
    given = [name for name, wanted in needs.items() if _given(params, name)
             and not any(_given(params, w) for w in wanted)]  # fmt: skip
    if given:
        raise click.UsageError(f"Option(s) [{', '.join(given)}] are unavailable given other options on the "
                               "command line")  # fmt: skip


def _given(params: Mapping[str, Any], name: str) -> bool:
    """Whether option --``name`` is on the command line (a click parameter of that name;
    one the tool lacks is not)."""
    value = params.get({"list": "list_", "group": "groups", "topic": "topics", "type": "type_"}.get(
        name, name.replace("-", "_")))
    return value not in (None, False, ())


def _cant_be_used_with(params: Mapping[str, Any], option: str, others: Iterable[str]) -> None:
    """Kafka's ``CommandLineUtils.checkInvalidArgs``."""
    if _given(params, option):
        for other in others:
            if _given(params, other):
                raise click.UsageError(f'Option "[{option}]" can\'t be used with option "[{other}]"')


def check_group_options(params: Mapping[str, Any], tool: str) -> None:
    """The option checks kafka-consumer-groups.sh (``tool`` "consumer":
    ConsumerGroupCommandOptions) and kafka-share-groups.sh ("share":
    ShareGroupCommandOptions) share, in their order, with their messages: the sub-options
    of --describe and --list, --delete's and --delete-offsets' scope, --reset-offsets'
    execution options, and what --group and --topic go with. ``params``: the command's
    click parameters."""
    _unavailable(params, {"members": ("describe",), "offsets": ("describe",), "state": ("describe", "list"),
                          "verbose": ("describe",), "type": ("list",)})  # fmt: skip
    has = functools.partial(_given, params)
    if has("describe"):
        if not has("group") and not has("all-groups"):
            raise click.UsageError("Option [describe] takes one of these options: [all-groups], [group]")
        if sum(map(has, ("members", "offsets", "state"))) > 1:
            raise click.UsageError("Option [describe] takes at most one of these options: [members], [offsets], "
                                   "[state]")  # fmt: skip
        if params["state"]:
            raise click.UsageError("Option [describe] does not take a value for [state]")
    if has("delete"):
        if tool == "share":
            if not has("group") and not has("all-groups"):
                raise click.UsageError("Option [delete] takes the options [group] or [all-groups]")
            if has("group") and has("all-groups"):
                raise click.UsageError("Option [delete] takes either [group] or [all-groups], not both.")
            if has("topic"):
                raise click.UsageError("Option [delete] does not take the option: [topic]")
        else:
            if not has("group") and not has("all-groups"):
                raise click.UsageError("Option [delete] takes one of these options: [all-groups], [group]")
            if has("topic"):
                raise click.UsageError("The consumer does not support topic-specific offset deletion from a "
                                       "consumer group.")  # fmt: skip
    if has("delete-offsets") and (len(params["groups"]) != 1 or not has("topic")):
        raise click.UsageError("Option [delete-offsets] takes the following options: [group], [topic]")
    if has("reset-offsets"):
        _check_reset_execution(params, tool)
    _cant_be_used_with(params, "group", ["all-groups", "list"])
    _cant_be_used_with(params, "topic", ["list", "describe"])


def _check_reset_execution(params: Mapping[str, Any], tool: str) -> None:
    """--reset-offsets' --dry-run / --execute and group: the share tool needs one of the
    two and one --group; the consumer tool warns that it dry-runs without --execute."""
    has = functools.partial(_given, params)
    if has("dry-run") and has("execute"):
        raise click.UsageError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    if tool == "share":
        if not has("dry-run") and not has("execute"):
            raise click.UsageError("Option [reset-offsets] takes the option: [execute] or [dry-run]")
        if len(params["groups"]) != 1:
            raise click.UsageError("Option [reset-offsets] takes the option: [group]")
        return
    if not has("dry-run") and not has("execute"):
        click.echo(_NO_EXECUTE_WARNING, err=True)
    if not has("group") and not has("all-groups"):
        raise click.UsageError("Option [reset-offsets] takes one of these options: [all-groups], [group]")


def end_offsets(client: Any, partitions: Iterable[tuple[str, int]], spec: int, timeout_ms: int) -> dict:
    """ListOffsets of ``spec``; LATEST checked against a Fetch's high watermark
    (``end_offsets``: some Kafka-compatible brokers answer ListOffsets short of it)."""
    from tidegate.client.fetcher import LATEST, end_offsets, list_offsets

    targets = dict.fromkeys(partitions, spec)
    if not targets:
        return {}
    if spec == LATEST:
        return end_offsets(client, targets, timeout_ms=timeout_ms)
    return list_offsets(client, targets, timeout_ms=timeout_ms)


def assignment_text(assignment: Iterable[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()))


def topic_partitions(client: Any, topics: Iterable[str]) -> list[tuple[str, int]]:
    """Kafka's ``parseTopicPartitionsToReset``: ``topic:0,1`` as given, a bare topic as
    all of its partitions."""
    from tidegate.client.admin import describe_topics

    out: list[tuple[str, int]] = []
    bare = []
    for arg in topics:
        if ":" in arg:
            name, _, parts = arg.partition(":")
            try:
                out += [(name, int(p)) for p in parts.split(",")]
            except ValueError:
                raise click.UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions") from None
        else:
            bare.append(arg)
    if bare:
        for d in describe_topics(client, bare):
            out += [(d.name, p.partition) for p in d.partitions]
    return out


def new_offsets(
    client: Any, partitions: list[tuple[str, int]], committed: dict, scenario: str, spec: int | None,
    to_offset: int | None, shift_by: int | None, reset_ms: int | None, timeout_ms: int,
) -> dict[tuple[str, int], int]:
    """Kafka's GroupOffsetsResetter: the offset of each partition for the scenario, a
    requested offset kept within the log's range."""
    if not partitions:
        return {}
    if spec is not None:
        return end_offsets(client, partitions, spec, timeout_ms)
    ends = end_offsets(client, partitions, -1, timeout_ms)
    if reset_ms is not None:
        found = end_offsets(client, partitions, reset_ms, timeout_ms)
        out = {}
        for tp in partitions:
            if found.get(tp, -1) < 0:
                click.echo(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
                out[tp] = ends[tp]
            else:
                out[tp] = found[tp]
        return out
    if scenario == "to-current":
        return {tp: committed.get(tp, ends[tp]) for tp in partitions}
    starts = end_offsets(client, partitions, -2, timeout_ms)
    if scenario == "to-offset":
        assert to_offset is not None
        wanted = dict.fromkeys(partitions, to_offset)
    else:
        assert shift_by is not None
        wanted = {tp: committed.get(tp, ends[tp]) + shift_by for tp in partitions}
    return {tp: min(max(o, starts[tp]), ends[tp]) for tp, o in wanted.items()}
