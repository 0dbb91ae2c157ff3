"""The uniform assignor when members subscribe to different topics (Kafka's
``UniformHeterogeneousAssignmentBuilder``, as reworked in KAFKA-17710).

1. Every member keeps what it has of the topics it still subscribes to (existing
   partitions, each kept once).
2. The partitions nobody kept go out topic by topic, topics with the most partitions per
   subscriber first (then fewer subscribers, then topic id), each partition to the
   subscriber of its topic with the fewest partitions in all.
3. Balancing: for each topic with two or more subscribers, partitions of that topic move
   from its most loaded subscribers (those that hold some of it) to its least loaded ones
   while their totals differ by more than one; the pass over the topics repeats until a
   whole round moves nothing, at most 16 rounds. Where subscribers of a topic all
   subscribe alike this ends balanced within one; with overlapping subscriptions it ends
   nearly so, as Kafka's does.

Members are numbered in member id order, so the result does not depend on the order the
group spec lists them in.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidegate.coordinator.group.assignor.api import (
    Assignment,
    GroupAssignment,
    GroupSpec,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.assignor.helpers import partition_counts, retain_partitions

if TYPE_CHECKING:
    from fractions import Fraction

#: Rounds of the final balancing pass at most (Kafka's ``MAX_ITERATION_COUNT``).
MAX_ITERATION_COUNT = 16


class UniformHeterogeneousAssignmentBuilder:
    def __init__(self, spec: GroupSpec, describer: SubscribedTopicDescriber) -> None:
        self.member_ids = sorted(spec.members)
        self.current: list[Assignment] = [spec.members[m].assignment for m in self.member_ids]
        subscriptions = [spec.members[m].subscribed_topic_ids for m in self.member_ids]
        #: topic id -> the indices of its subscribers, ascending
        self.subscribers: dict[uuid.UUID, list[int]] = {}
        for index, topic_ids in enumerate(subscriptions):
            for topic_id in topic_ids:
                self.subscribers.setdefault(topic_id, []).append(index)
        self.counts = partition_counts(sorted(self.subscribers), describer)
        #: partitions each member has in the new assignment
        self.loads = [0] * len(self.member_ids)
        #: topic id -> owner index of each partition (-1: nobody yet)
        self.owners = {t: [-1] * c for t, c in self.counts.items()}
        #: the members whose assignment changed, as mutable copies
        self.changed: dict[int, dict[uuid.UUID, set[int]]] = {}

        claimed: dict[uuid.UUID, set[int]] = {}
        for index, topic_ids in enumerate(subscriptions):
            kept, self.loads[index] = retain_partitions(
                self.current[index], topic_ids, self.counts, claimed
            )
            self.current[index] = kept
            for topic_id, partitions in kept.items():
                owners = self.owners[topic_id]
                for partition in partitions:
                    owners[partition] = index

    def build(self) -> GroupAssignment:
        for topic_id in self._sorted_topics(self.counts):
            unassigned = [p for p, o in enumerate(self.owners[topic_id]) if o == -1]
            if unassigned:
                self._assign_to_least_loaded(topic_id, unassigned)
        self._balance()
        members: dict[str, Assignment] = {}
        for index, member_id in enumerate(self.member_ids):
            copy = self.changed.get(index)
            if copy is None:
                members[member_id] = self.current[index]
            else:
                members[member_id] = {t: frozenset(p) for t, p in copy.items() if p}
        return GroupAssignment(members)

    def _sorted_topics(self, topic_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        """Most partitions per subscriber first, then fewer subscribers, then topic id."""
        from fractions import Fraction  # here: importing it (and decimal) cost every start 2-3 ms

        def key(topic_id: uuid.UUID) -> tuple[Fraction, int, uuid.UUID]:
            subscribers = len(self.subscribers[topic_id])
            return (-Fraction(self.counts[topic_id], subscribers), subscribers, topic_id)

        return sorted(topic_ids, key=key)

    def _assign_to_least_loaded(self, topic_id: uuid.UUID, partitions: list[int]) -> None:
        heap = [(self.loads[i], i) for i in self.subscribers[topic_id]]
        heapq.heapify(heap)
        for partition in partitions:
            _, index = heap[0]
            self._move(topic_id, partition, index)
            heapq.heapreplace(heap, (self.loads[index], index))

    def _balance(self) -> None:
        topics = self._sorted_topics([t for t, s in self.subscribers.items() if len(s) >= 2])
        last_moved = -1
        for _ in range(MAX_ITERATION_COUNT):
            for position, topic_id in enumerate(topics):
                if position == last_moved:
                    return  # a whole round since the last move: nothing more helps
                if self._balance_topic(topic_id) or last_moved == -1:
                    last_moved = position

    def _balance_topic(self, topic_id: uuid.UUID) -> int:
        """Move partitions of one topic from its most to its least loaded subscribers
        until their totals differ by at most one or no loaded subscriber holds any of it.
        Returns how many moved."""
        loads = self.loads
        subscribers = self.subscribers[topic_id]
        if max(loads[i] for i in subscribers) - min(loads[i] for i in subscribers) <= 1:
            return 0
        held: dict[int, list[int]] = {}  # owner -> its partitions of the topic, ascending
        for partition, owner in enumerate(self.owners[topic_id]):
            held.setdefault(owner, []).append(partition)
        # Both heaps hold (load, member) entries; an entry whose load is no longer the
        # member's is stale and skipped, and every load change pushes a fresh entry.
        least = [(loads[i], i) for i in subscribers]
        most = [(-loads[i], -i) for i in subscribers if held.get(i)]
        heapq.heapify(least)
        heapq.heapify(most)
        moved = 0
        while most:
            load, donor = -most[0][0], -most[0][1]
            if load != loads[donor] or not held[donor]:
                heapq.heappop(most)
                continue
            if least[0][0] != loads[least[0][1]]:
                heapq.heappop(least)
                continue
            receiver = least[0][1]
            if loads[donor] - loads[receiver] <= 1:
                break
            self._move(topic_id, held[donor].pop(), receiver)
            moved += 1
            heapq.heappush(least, (loads[donor], donor))
            heapq.heappush(least, (loads[receiver], receiver))
            if held[donor]:
                heapq.heappush(most, (-loads[donor], -donor))
            if held.get(receiver):
                heapq.heappush(most, (-loads[receiver], -receiver))
        return moved

    def _move(self, topic_id: uuid.UUID, partition: int, index: int) -> None:
        """Give ``partition`` to member ``index``, taking it from its owner if any."""
        owners = self.owners[topic_id]
        previous = owners[partition]
        if previous != -1:
            self._writable(previous)[topic_id].discard(partition)
            self.loads[previous] -= 1
        self._writable(index).setdefault(topic_id, set()).add(partition)
        owners[partition] = index
        self.loads[index] += 1

    def _writable(self, index: int) -> dict[uuid.UUID, set[int]]:
        copy = self.changed.get(index)
        if copy is None:
            copy = self.changed[index] = {t: set(p) for t, p in self.current[index].items()}
        return copy
