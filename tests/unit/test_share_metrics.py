"""The broker's share counters (tidegate.server.share.metrics), as Kafka's
SharePartitionManager marks them: records per acknowledge type (a batch with one type
counts its range, a batch with a type per offset each offset, GAP not at all), and the
share requests per topic, each topic once per request."""

from __future__ import annotations

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
