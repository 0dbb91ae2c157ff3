"""Steps the server-side assignors share (Kafka's ``AssignorHelpers`` and the parts of
its builders that are the same in each): partition counts, quotas, keeping what a member
already has, and handing out the rest."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Collection, Iterable, Mapping

from tidegate.coordinator.group.assignor.api import (
    Assignment,
    PartitionAssignorException,
    SubscribedTopicDescriber,
)


def partition_counts(
    topic_ids: Iterable[uuid.UUID], describer: SubscribedTopicDescriber
) -> dict[uuid.UUID, int]:
    """Topic id -> partition count for the subscribed topics; a topic the describer does
    not know fails the assignment, as in Kafka."""
    counts: dict[uuid.UUID, int] = {}
    for topic_id in topic_ids:
        count = describer.num_partitions(topic_id)
        if count < 0:
            raise PartitionAssignorException(
                f"Members are subscribed to topic {topic_id} which doesn't exist in the "
                "topic metadata."
            )
        counts[topic_id] = count
    return counts


def quotas(owned: Mapping[str, int], total: int) -> dict[str, int]:
    """Spread ``total`` slots over the members of ``owned`` (member id -> how many of its
    current partitions it may keep): ``total // M`` each, one more for ``total % M`` of
    them. The extra slots go to the members that own the most, ties by member id, so a
    balanced assignment keeps its shape whatever order the members come in (Kafka's
    KAFKA-18688 fix gives the extras to members that already hold one more)."""
    base, extra = divmod(total, len(owned))
    result = dict.fromkeys(owned, base)
    if extra:
        for member_id in heapq.nsmallest(extra, owned, key=lambda m: (-owned[m], m)):
            result[member_id] += 1
    return result


def retain_partitions(
    assignment: Assignment,
    subscribed: Collection[uuid.UUID],
    counts: Mapping[uuid.UUID, int],
    claimed: dict[uuid.UUID, set[int]],
) -> tuple[Assignment, int]:
    """The part of a member's current ``assignment`` it may keep, and its size.

    A partition is kept if its topic is still subscribed and exists, the partition is
    within the topic's count, and no member before this one kept it (``claimed``, which
    this updates: a partition is given once even if two current assignments name it, as
    a static member's inherited target can). Returns ``assignment`` itself when nothing
    is dropped, so an unchanged member's mapping is handed back as it came.
    """
    kept: dict[uuid.UUID, frozenset[int]] | None = None
    unchanged = 0  # how many topics, from the start, are kept whole
    size = 0
    for topic_id, partitions in assignment.items():
        valid = partitions
        if topic_id in subscribed and topic_id in counts:
            count = counts[topic_id]
            if partitions and (min(partitions) < 0 or max(partitions) >= count):
                valid = frozenset(p for p in partitions if 0 <= p < count)
            taken = claimed.setdefault(topic_id, set())
            if taken and not taken.isdisjoint(valid):
                valid = valid - taken
            taken |= valid
        else:
            valid = frozenset()
        if kept is None:
            if valid is partitions:
                unchanged += 1
            else:  # the first change: copy the topics before this one
                kept = dict(item for _, item in zip(range(unchanged), assignment.items()))
        if kept is not None and valid:
            kept[topic_id] = valid
        size += len(valid)
    return (assignment if kept is None else kept), size


class PartitionPool:
    """Partitions still to hand out, topic by topic, each topic's in ascending order;
    :meth:`take` gives the next ``n`` (slices, not one Python step per partition)."""

    __slots__ = ("_offset", "_segments", "_topic", "remaining")

    def __init__(self, segments: list[tuple[uuid.UUID, list[int]]]) -> None:
        self._segments = [s for s in segments if s[1]]
        self._topic = 0
        self._offset = 0
        self.remaining = sum(len(s[1]) for s in self._segments)

    def take(self, n: int) -> dict[uuid.UUID, list[int]]:
        out: dict[uuid.UUID, list[int]] = {}
        n = min(n, self.remaining)
        self.remaining -= n
        while n > 0:
            topic_id, partitions = self._segments[self._topic]
            chunk = partitions[self._offset : self._offset + n]
            out[topic_id] = chunk
            n -= len(chunk)
            self._offset += len(chunk)
            if self._offset == len(partitions):
                self._topic += 1
                self._offset = 0
        return out


def merge(
    kept: Assignment, added: Mapping[uuid.UUID, Iterable[int]]
) -> dict[uuid.UUID, frozenset[int]]:
    """``kept`` plus ``added`` as a new assignment."""
    out = dict(kept)
    for topic_id, partitions in added.items():
        current = out.get(topic_id)
        out[topic_id] = frozenset(partitions) if current is None else current.union(partitions)
    return out
