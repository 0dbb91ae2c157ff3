"""The share-fetching counters of the broker (KIP-932), as Kafka names them: plain ints,
read by the scrape-time collector (:class:`tidegate.metrics.collectors.ShareGroupCollector`).

* :class:`ShareGroupMetrics` (Kafka's ``kafka.server:type=ShareGroupMetrics``):
  ``RecordAcknowledgementsPerSec{ackType}``, records whose acknowledgement was applied
  (written), per type: a batch with one type counts its whole range, a batch with a type
  per offset counts each (GAP entries are not counted, as in Kafka).
* Kafka's BrokerTopicMetrics ``TotalShareFetchRequestsPerSec`` /
  ``FailedShareFetchRequestsPerSec`` and ``TotalShareAcknowledgementRequestsPerSec`` /
  ``FailedShareAcknowledgementRequestsPerSec``, per topic: each request counts once per
  topic it fetches (acknowledges), a failure once per topic with a partition that
  answered an error (Kafka's ``SharePartitionManager``).

The share-partitions' own meters (``AcquisitionLockTimeoutPerSec``, the in-flight gauges)
live on each :class:`~.share_partition.SharePartition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .acknowledgements import AcknowledgeType, ShareAcknowledgementBatch

__all__ = ["ACK_TYPE_NAMES", "ShareGroupMetrics", "ShareTopicStats"]

#: the ``ackType`` tag of each counted type (Kafka capitalizes ``AcknowledgeType.toString``)
ACK_TYPE_NAMES: dict[int, str] = {
    AcknowledgeType.ACCEPT: "Accept",
    AcknowledgeType.RELEASE: "Release",
    AcknowledgeType.REJECT: "Reject",
    AcknowledgeType.RENEW: "Renew",
}


class ShareTopicStats:
    """One topic's share request counters (BrokerTopicMetrics)."""

    __slots__ = ("failed_acknowledgements", "failed_fetches", "total_acknowledgements", "total_fetches")

    def __init__(self) -> None:
        self.total_fetches = 0
        self.failed_fetches = 0
        self.total_acknowledgements = 0
        self.failed_acknowledgements = 0


class ShareGroupMetrics:
    """The broker's share counters (see the module docstring)."""

    def __init__(self) -> None:
        #: records acknowledged, by the ``ackType`` tag ("Accept", "Release", "Reject", "Renew")
        self.acknowledgements: dict[str, int] = dict.fromkeys(ACK_TYPE_NAMES.values(), 0)
        #: topic name -> its share request counters
        self.topics: dict[str, ShareTopicStats] = {}

    def record_acknowledgements(self, batches: Sequence[ShareAcknowledgementBatch]) -> None:
        """A partition's acknowledgement batches were applied."""
        counts = self.acknowledgements
        for batch in batches:
            types = batch.acknowledge_types
            if len(types) == 1:
                name = ACK_TYPE_NAMES.get(types[0])
                if name is not None:
                    counts[name] += batch.last_offset - batch.first_offset + 1
            else:
                for t in types:
                    name = ACK_TYPE_NAMES.get(t)
                    if name is not None:
                        counts[name] += 1

    def _stats(self, topic: str) -> ShareTopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = ShareTopicStats()
        return stats

    def fetch_requested(self, topics: Iterable[str], failed: Iterable[str]) -> None:
        """A ShareFetch fetched ``topics`` (each counted once); ``failed``: those with a
        partition that answered an error."""
        for topic in set(topics):
            self._stats(topic).total_fetches += 1
        for topic in set(failed):
            self._stats(topic).failed_fetches += 1

    def acknowledge_requested(self, topics: Iterable[str], failed: Iterable[str]) -> None:
        """A request's acknowledgements of ``topics`` were applied; ``failed``: the topics
        with a partition whose acknowledgement failed."""
        for topic in set(topics):
            self._stats(topic).total_acknowledgements += 1
        for topic in set(failed):
            self._stats(topic).failed_acknowledgements += 1

    def remove_topic(self, topic: str) -> None:
        """A deleted topic's series go away, as Kafka removes its topic metrics."""
        self.topics.pop(topic, None)
