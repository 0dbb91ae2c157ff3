"""Cluster metadata as the client sees it: an immutable snapshot per Metadata response.

:class:`Cluster` answers what the producer, ``tidegate top`` and the Spark source
ask of metadata (Kafka's ``Cluster``): brokers by id, partitions of a topic,
the leader of a partition, partitions with a leader, partitions led by a broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidegate.protocol.messages import ZERO_UUID

__all__ = ["BrokerNode", "Cluster", "PartitionInfo", "TopicMetadata"]


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1 when there is no leader
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    partitions: tuple[PartitionInfo, ...]
    topic_id: Any = None
    is_internal: bool = False


@dataclass(slots=True)
class Cluster:
    brokers: dict[int, BrokerNode]
    topics: dict[str, TopicMetadata]
    controller_id: int = -1
    cluster_id: str | None = None
    # derived indexes
    _leaders: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)
    _epochs: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)
    _available: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _by_node: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        by_node: dict[int, list[tuple[str, int]]] = {}
        for name, t in self.topics.items():
            avail = []
            for p in t.partitions:
                self._epochs[(name, p.partition)] = p.leader_epoch
                if p.leader >= 0 and p.leader in self.brokers:
                    self._leaders[(name, p.partition)] = p.leader
                    avail.append(p.partition)
                    by_node.setdefault(p.leader, []).append((name, p.partition))
            self._available[name] = tuple(sorted(avail))
            if t.error_code == 0 and t.partitions:
                self._counts[name] = len(t.partitions)
        self._by_node = {k: tuple(v) for k, v in by_node.items()}

    @classmethod
    def empty(cls) -> Cluster:
        return cls({}, {})

    @classmethod
    def from_response(cls, response: Any) -> Cluster:
        """Build from a MetadataResponse of any version."""
        brokers = {
            int(b.node_id): BrokerNode(
                int(b.node_id), b.host, int(b.port), b.rack
            )
            for b in response.brokers
        }
        topics = {}
        for t in response.topics:
            if t.name is None:
                continue
            parts = tuple(
                sorted(
                    (
                        PartitionInfo(
                            t.name,
                            int(p.partition_index),
                            int(p.leader_id),
                            int(p.leader_epoch),
                            tuple(int(r) for r in p.replica_nodes),
                            tuple(int(r) for r in p.isr_nodes),
                            int(p.error_code),
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                )
            )
            topics[t.name] = TopicMetadata(
                t.name,
                int(t.error_code),
                parts,
                None if t.topic_id == ZERO_UUID else t.topic_id,
                bool(t.is_internal),
            )
        return cls(
            brokers,
            topics,
            int(response.controller_id),
            response.cluster_id,
        )

    def merged_with(self, newer: Cluster, keep_topics: set[str] | None = None) -> Cluster:
        """``newer`` plus the topics of this snapshot it does not mention (a partial
        Metadata request only describes the topics asked for)."""
        topics = dict(self.topics)
        topics.update(newer.topics)
        if keep_topics is not None:
            topics = {k: v for k, v in topics.items() if k in keep_topics}
        return Cluster(
            dict(newer.brokers) or dict(self.brokers),
            topics,
            newer.controller_id,
            newer.cluster_id or self.cluster_id,
        )

    # -- queries -----------------------------------------------------------------

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self._leaders.get((topic, partition))

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch (-1 when unknown: Metadata before v7)."""
        return self._epochs.get((topic, partition), -1)

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions, or None if the topic is unknown or in error."""
        return self._counts.get(topic)

    def partitions_for_topic(self, topic: str) -> tuple[PartitionInfo, ...]:
        t = self.topics.get(topic)
        return t.partitions if t is not None else ()

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        """Partitions of ``topic`` whose leader is a known broker."""
        return self._available.get(topic, ())

    def partitions_for_node(self, node_id: int) -> tuple[tuple[str, int], ...]:
        return self._by_node.get(node_id, ())

    def broker(self, node_id: int) -> BrokerNode | None:
        return self.brokers.get(node_id)

    def topic_error(self, topic: str) -> int:
        t = self.topics.get(topic)
        return t.error_code if t is not None else 0
