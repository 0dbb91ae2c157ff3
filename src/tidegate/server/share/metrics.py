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

* ShareGroupMetrics' histograms: ``PartitionLoadTimeMs``, each share-partition load from
  the persister (read started to answered, once per load, not per fetch waiting for it);
  per group, ``RequestTopicPartitionsFetchRatio``, per completed share fetch the
  partitions whose fetch lock it took over the partitions it asked for, in percent (0
  when it took none), and ``TopicPartitionsAcquireTimeMs``, how long after the share
  fetch arrived it took its partitions' fetch locks. Kafka takes the locks in
  ``DelayedShareFetch.tryComplete`` as soon as a partition can acquire records (and
  releases them when min bytes is not met); tidegate takes them only in
  ``on_complete`` (:mod:`.delayed_share_fetch`), so both are per answered share fetch,
  the acquire time covering its long poll. Like Kafka's, the per-group series stay
  until the broker stops.

Times are measured in ns (:meth:`tidegate.clock.Clock.nanoseconds`) and exposed in ms,
as the request time histograms are. The share-partitions' own meters
(``AcquisitionLockTimeoutPerSec``, the in-flight gauges, ``InFlightBatchMessageCount``,
``FetchLockTimeMs``, ``FetchLockRatio``) live on each
:class:`~.share_partition.SharePartition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tidegate.metrics.request_metrics import Histogram, latency_histogram

from .acknowledgements import AcknowledgeType, ShareAcknowledgementBatch

__all__ = [
    "ACK_TYPE_NAMES",
    "BATCH_RECORDS_HISTOGRAM",
    "RATIO_HISTOGRAM",
    "TIME_HISTOGRAM",
    "ShareGroupMetrics",
    "ShareTopicStats",
]

# The buckets of the share histograms (each series is an ``empty_copy`` of one):
#: times, observed in ns, exposed in ms (the request time buckets)
TIME_HISTOGRAM = latency_histogram()
#: ratios in percent (Kafka records ``(int) (ratio * 100)``)
RATIO_HISTOGRAM = Histogram(range(0, 101, 10))
#: records per in-flight batch (up to group.share.partition.max.record.locks' maximum)
BATCH_RECORDS_HISTOGRAM = Histogram((1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000))

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
        #: PartitionLoadTimeMs (ns)
        self.partition_load_time = TIME_HISTOGRAM.empty_copy()
        #: group -> RequestTopicPartitionsFetchRatio (percent)
        self.fetch_ratio: dict[str, Histogram] = {}
        #: group -> TopicPartitionsAcquireTimeMs (ns)
        self.acquire_time: dict[str, Histogram] = {}

    def partition_loaded(self, elapsed_ns: int) -> None:
        """A share-partition's load from the persister took ``elapsed_ns``."""
        self.partition_load_time.observe(elapsed_ns)

    def partitions_acquired(self, group_id: str, acquired: int, requested: int, elapsed_ns: int) -> None:
        """A share fetch of ``group_id`` took the fetch locks of ``acquired`` of the
        ``requested`` partitions, ``elapsed_ns`` after it arrived."""
        ratio = self.fetch_ratio.get(group_id)
        if ratio is None:
            ratio = self.fetch_ratio[group_id] = RATIO_HISTOGRAM.empty_copy()
            self.acquire_time[group_id] = TIME_HISTOGRAM.empty_copy()
        ratio.observe(int(acquired / requested * 100) if acquired else 0)  # Kafka's double, truncated
        self.acquire_time[group_id].observe(elapsed_ns)

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
