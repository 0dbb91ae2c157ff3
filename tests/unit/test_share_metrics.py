"""The broker's share counters (tidegate.server.share.metrics), as Kafka's
SharePartitionManager marks them: records per acknowledge type (a batch with one type
counts its range, a batch with a type per offset each offset, GAP not at all), and the
share requests per topic, each topic once per request; and its histograms
(PartitionLoadTimeMs, RequestTopicPartitionsFetchRatio, TopicPartitionsAcquireTimeMs)."""

from __future__ import annotations

from tidegate.metrics.request_metrics import Histogram
from tidegate.server.share import ShareAcknowledgementBatch
from tidegate.server.share.metrics import ShareGroupMetrics

GAP, ACCEPT, RELEASE, REJECT, RENEW = range(5)


def test_acknowledged_records_are_counted_per_type():
    m = ShareGroupMetrics()
    m.record_acknowledgements([
        ShareAcknowledgementBatch(0, 9, (ACCEPT,)),  # ten records, one type
        ShareAcknowledgementBatch(10, 14, (ACCEPT, GAP, RELEASE, REJECT, REJECT)),
        ShareAcknowledgementBatch(15, 19, (GAP,)),  # no records there
        ShareAcknowledgementBatch(20, 20, (RENEW,)),
    ])
    assert m.acknowledgements == {"Accept": 11, "Release": 1, "Reject": 2, "Renew": 1}


def test_requests_count_each_topic_once_and_failures_apart():
    m = ShareGroupMetrics()
    m.fetch_requested(["a", "a", "b"], ["b", "b"])
    m.fetch_requested(["a"], [])
    m.acknowledge_requested(["a", "b"], ["a"])
    assert {t: (s.total_fetches, s.failed_fetches, s.total_acknowledgements, s.failed_acknowledgements)
            for t, s in m.topics.items()} == {"a": (2, 0, 1, 1), "b": (1, 1, 1, 0)}  # fmt: skip
    m.remove_topic("a")
    assert list(m.topics) == ["b"]


def test_partitions_acquired_ratio_and_time_per_group():
    """RequestTopicPartitionsFetchRatio: Kafka's ``(int) ((double) acquired / requested
    * 100)``, the double's truncation included (29 of 100 is 28 %), 0 when none; and
    TopicPartitionsAcquireTimeMs, ns in, ms out; each group its own series."""
    m = ShareGroupMetrics()
    m.partitions_acquired("g", 1, 3, 2_000_000)
    m.partitions_acquired("g", 29, 100, 500_000)
    m.partitions_acquired("g", 0, 2, 0)
    m.partitions_acquired("h", 4, 4, 7_000_000)
    ratio = m.fetch_ratio["g"]
    assert (ratio.count, ratio.sum) == (3, 33 + 28 + 0)
    assert [n for _le, n in ratio.buckets()][:5] == [1, 1, 1, 2, 3]  # 0; 28; 33
    assert (m.fetch_ratio["h"].count, m.fetch_ratio["h"].sum) == (1, 100)
    assert (m.acquire_time["g"].count, m.acquire_time["g"].scaled_sum()) == (3, 2.5)
    assert dict(m.acquire_time["h"].buckets())["5.0"] == 0 and dict(m.acquire_time["h"].buckets())["10.0"] == 1


def test_partition_load_time():
    m = ShareGroupMetrics()
    m.partition_loaded(20_000_000)
    m.partition_loaded(300_000)
    load = m.partition_load_time
    assert (load.count, load.scaled_sum()) == (2, 20.3)
    assert dict(load.buckets())["0.5"] == 1 and dict(load.buckets())["25.0"] == 2


def test_histogram_empty_copy_shares_buckets_not_counts():
    proto = Histogram((1, 10), scale=1000)
    proto.observe(5000)
    copy = proto.empty_copy()
    assert copy.bounds is proto.bounds and (copy.count, copy.sum, copy.scale) == (0, 0, 1000)
    copy.observe(20_000)
    assert copy.buckets() == [("1.0", 0), ("10.0", 0), ("+Inf", 1)] and proto.buckets()[1] == ("10.0", 1)
