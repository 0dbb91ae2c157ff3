"""The JSON shapes of Spark's Kafka source: partition lists and partition offsets.

``assign`` is ``{"topicA":[0,1],"topicB":[0]}``; ``startingOffsets`` /
``endingOffsets`` (and the streaming offsets this source checkpoints) are
``{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}`` where -2 means earliest and -1
latest. Spark writes them with topics and partitions in order; so does
:func:`offsets_to_json`. Parse errors carry the messages of Spark's ``JsonUtils``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

__all__ = [
    "EARLIEST",
    "LATEST",
    "TopicPartition",
    "json_to_offsets",
    "offsets_to_dict",
    "offsets_to_json",
    "parse_partition_offsets",
    "parse_partition_timestamps",
    "parse_partitions",
]

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]

_PARTITIONS_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0": 1000, "1": 1000}, "topicB": {"0": 2000, "1": 2000}}'


def _bad(example: str, text: str) -> ValueError:
    return ValueError(f"Expected e.g. {example}, got {text}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_partitions(text: str) -> list[TopicPartition]:
    """``{"t":[0,1]}`` -> [("t", 0), ("t", 1)]."""
    try:
        obj = json.loads(text)
    except ValueError:
        raise _bad(_PARTITIONS_EXAMPLE, text) from None
    if not isinstance(obj, dict):
        raise _bad(_PARTITIONS_EXAMPLE, text)
    out: list[TopicPartition] = []
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(_is_int(p) for p in parts):
            raise _bad(_PARTITIONS_EXAMPLE, text)
        out.extend((str(topic), p) for p in parts)
    return out


def _parse_nested(text: str, example: str) -> dict[TopicPartition, int]:
    try:
        obj = json.loads(text)
    except ValueError:
        raise _bad(example, text) from None
    if not isinstance(obj, dict):
        raise _bad(example, text)
    out: dict[TopicPartition, int] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise _bad(example, text)
        for p, off in parts.items():
            if not _is_int(off) or not str(p).lstrip("-").isdigit():
                raise _bad(example, text)
            out[(str(topic), int(p))] = off
    return out


def parse_partition_offsets(text: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":23,"1":-2}}`` -> {("t", 0): 23, ("t", 1): -2}."""
    return _parse_nested(text, _OFFSETS_EXAMPLE)


def parse_partition_timestamps(text: str) -> dict[TopicPartition, int]:
    return _parse_nested(text, _TIMESTAMPS_EXAMPLE)


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The nested-dict form, topics and partitions in order (what Spark checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for t, p in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def json_to_offsets(obj: Mapping[str, Mapping[str, int]] | str) -> dict[TopicPartition, int]:
    """Inverse of :func:`offsets_to_dict` (also accepts the JSON text)."""
    if isinstance(obj, str):
        return parse_partition_offsets(obj)
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def format_tps(tps: Iterable[TopicPartition]) -> str:
    """``t-0, t-1`` as Kafka prints TopicPartitions."""
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))
