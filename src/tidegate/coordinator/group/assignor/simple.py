"""The share groups' ``simple`` assignor (KIP-932; Kafka's ``SimpleAssignor`` with its
homogeneous and heterogeneous builders).

A partition may be shared: with M members and P assignable partitions each partition
goes to ``S = ceil(M / P)`` members (one when P >= M), and the ``S * P`` slots are spread
over the members as evenly as they go, the extra slots to the members that already hold
the most. Balance first, then stickiness:

1. drop what a member holds of topics it no longer subscribes to and of partitions that
   are not assignable (share-partitions not yet initialized, or gone);
2. trim members holding more than their quota;
3. trim partitions held by more than S members;
4. fill the partitions short of S holders: members under the even share, most room
   first, then the extra slots the trims left unused, to the first members that can use
   them; each takes the partitions it lacks that need the most holders (a member never
   holds a partition twice; if nobody can take one, a slight imbalance is tolerated, as
   in Kafka).

Run again from its own output, nothing moves (Kafka's builders are the same when nothing
changed; see :func:`_share` for what that takes here).

Homogeneous subscriptions run this once over all the subscribed partitions; heterogeneous
ones run it per topic among that topic's subscribers and combine the results. Examples
(reference 2.3): 3 members / 6 partitions: 2 each; 5 members / 2 partitions: each
partition to 3 members, quotas 2,1,1,1,1; 3 members / 1 partition: all three share it.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping

from tidegate.coordinator.group.assignor.api import (
    HOMOGENEOUS,
    Assignment,
    GroupAssignment,
    GroupSpec,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.assignor.helpers import partition_counts, quotas

SIMPLE_ASSIGNOR_NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]


class SimpleAssignor:
    name = SIMPLE_ASSIGNOR_NAME

    def assign(
        self, group_spec: GroupSpec, topic_describer: SubscribedTopicDescriber
    ) -> GroupAssignment:
        members = group_spec.members
        if not members:
            return GroupAssignment({})
        member_ids = sorted(members)
        groups: list[tuple[list[str], frozenset[uuid.UUID]]]
        if group_spec.subscription_type is HOMOGENEOUS:
            groups = [(member_ids, members[member_ids[0]].subscribed_topic_ids)]
        else:
            subscribers: dict[uuid.UUID, list[str]] = {}
            for member_id in member_ids:
                for topic_id in members[member_id].subscribed_topic_ids:
                    subscribers.setdefault(topic_id, []).append(member_id)
            groups = [(s, frozenset((t,))) for t, s in subscribers.items()]
        all_topics = {t for _, topic_ids in groups for t in topic_ids}
        counts = partition_counts(sorted(all_topics), topic_describer)

        held: dict[str, set[TopicPartition]] = {m: set() for m in member_ids}
        kept_whole: dict[str, int] = dict.fromkeys(member_ids, 0)  # current partitions kept
        for group_members, topic_ids in groups:
            targets = [
                (t, p)
                for t in sorted(topic_ids)
                for p in range(counts[t])
                if group_spec.is_partition_assignable(t, p)
            ]
            current = {m: _current(members[m].assignment, topic_ids) for m in group_members}
            for member_id, (partitions, kept) in _share(group_members, targets, current).items():
                held[member_id] |= partitions
                kept_whole[member_id] += kept

        out: dict[str, Assignment] = {}
        for member_id in member_ids:
            original = members[member_id].assignment
            size = sum(len(p) for p in original.values())
            if kept_whole[member_id] == size == len(held[member_id]):
                out[member_id] = original  # unchanged: hand back the same mapping
            else:
                out[member_id] = _as_assignment(held[member_id])
        return GroupAssignment(out)


def _current(assignment: Assignment, topic_ids: frozenset[uuid.UUID]) -> list[TopicPartition]:
    """A member's current partitions of ``topic_ids``, in the order it keeps them first."""
    return [(t, p) for t, ps in assignment.items() if t in topic_ids for p in sorted(ps)]


def _share(
    member_ids: list[str],
    targets: list[TopicPartition],
    current: Mapping[str, list[TopicPartition]],
) -> dict[str, tuple[set[TopicPartition], int]]:
    """One balanced, sticky share of ``targets`` among ``member_ids``: member id -> (its
    partitions, how many of them it already had).

    Every member may hold ``base`` partitions, ``extra`` of them one more. A member keeps
    its extra slot only if it still holds ``base + 1`` after both trims; the slots the
    trims leave unused are spare, for the first members that can take a partition still
    short of holders. The extras are not fixed before the trims: a member given one
    because it held the most may lose the partition to an over-shared trim and then be
    unable to use it (it already holds every partition short of holders), and a second
    run, seeing it hold no more than the others, would hand the slot to someone else.
    With the spare slots handed on, a run from this function's own output changes
    nothing: a full share keeps every extra where it is, and a stuck one (every member
    with room holds every partition short of holders) stays stuck the same way.
    """
    if not targets:
        return {m: (set(), 0) for m in member_ids}
    sharing = -(-len(member_ids) // len(targets))
    slots = sharing * len(targets)
    target_set = set(targets)
    holding = {m: [tp for tp in current[m] if tp in target_set] for m in member_ids}
    quota = quotas({m: len(h) for m, h in holding.items()}, slots)
    held = {m: set(holding[m][: quota[m]]) for m in member_ids}

    holders: dict[TopicPartition, list[str]] = {}
    for member_id in member_ids:
        for tp in holding[member_id][: quota[member_id]]:
            holders.setdefault(tp, []).append(member_id)
    for tp, members in holders.items():
        for member_id in members[sharing:]:
            held[member_id].discard(tp)
        del members[sharing:]
    kept = {m: len(held[m]) for m in member_ids}

    base, extra = divmod(slots, len(member_ids))  # base >= 1: slots >= members
    spare = extra - sum(1 for m in member_ids if kept[m] > base)
    short = [(len(holders.get(tp, ())) - sharing, i, tp) for i, tp in enumerate(targets)]
    needy = [entry for entry in short if entry[0] < 0]
    heapq.heapify(needy)  # (-need, position, partition)
    # Members furthest below ``base`` first, then the spare slots in member order; each
    # takes the partitions it lacks that need the most holders.
    for member_id in sorted((m for m in member_ids if kept[m] < base), key=kept.__getitem__):
        _take(held[member_id], base - kept[member_id], needy)
    for member_id in member_ids:
        if not spare or not needy:
            break
        if len(held[member_id]) == base:
            spare -= _take(held[member_id], 1, needy)
    return {m: (held[m], kept[m]) for m in member_ids}


def _take(
    mine: set[TopicPartition], room: int, needy: list[tuple[int, int, TopicPartition]]
) -> int:
    """Add to ``mine`` up to ``room`` partitions of the ``needy`` heap it lacks, the most
    needed first, updating the heap; how many it took."""
    taken = 0
    passed = []
    while taken < room and needy:
        entry = heapq.heappop(needy)
        if entry[2] not in mine:
            mine.add(entry[2])
            taken += 1
            entry = (entry[0] + 1, entry[1], entry[2])
        if entry[0] < 0:
            passed.append(entry)
    for entry in passed:
        heapq.heappush(needy, entry)
    return taken


def _as_assignment(partitions: set[TopicPartition]) -> dict[uuid.UUID, frozenset[int]]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in partitions:
        by_topic.setdefault(topic_id, []).append(partition)
    return {t: frozenset(p) for t, p in by_topic.items()}
