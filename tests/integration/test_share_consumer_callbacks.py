"""confluent-kafka's ``ShareConsumer`` callbacks against a real tidegate process: the
acknowledgement-commit callback (``set_acknowledgement_commit_callback``) after an
explicit ``commit_async``, in implicit mode, after ``commit_sync`` and during ``close``,
and with the INVALID_RECORD_STATE of an acknowledgement that came after its lock expired
and another consumer took the records (confluent-kafka's ``callback_*``,
``lock_steal_with_committed_ack`` and ``per_partition_commit_results_with_lock_expiry``
cases); and ``throttle_cb`` under a ``consumer_byte_rate`` quota, then its zero event
once the throttling ends (``throttle_cb_fires_under_quota``,
``throttle_cb_emits_cleared_zero_event``). The share metrics, histograms included, are
read off the broker's /metrics endpoint after the lock-expiry case."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Message, ShareConsumer, TopicPartition

from tests.conftest import metrics_overrides

from .clients import alter_quotas, create_topic, produce, sample, scrape
from .test_share_consumer import polled, prepared, set_group_config, share_consumer, until

pytestmark = pytest.mark.timeout(180)

#: the lock the lock-expiry cases run with (Kafka's minimum; confluent-kafka's test cluster's)
ONE_SECOND_LOCKS = {"group.share.record.lock.duration.ms": "1000", "group.share.min.record.lock.duration.ms": "1000"}

Commit = tuple[dict[TopicPartition, set[int]], KafkaException | None]


class Commits:
    """What the acknowledgement-commit callback was called with: ({(topic, partition):
    offsets}, error text or None) per call."""

    def __init__(self, consumer: ShareConsumer) -> None:
        self.calls: list[tuple[dict[tuple[str, int], set[int]], str | None]] = []
        consumer.set_acknowledgement_commit_callback(self)

    def __call__(self, offsets: dict[TopicPartition, set[int]], error: KafkaException | None) -> None:
        self.calls.append(({(tp.topic, tp.partition): set(o) for tp, o in offsets.items()},
                           None if error is None else str(error)))  # fmt: skip

    def offsets(self) -> dict[tuple[str, int], set[int]]:
        """Every offset reported, per partition."""
        out: dict[tuple[str, int], set[int]] = {}
        for offsets, _error in self.calls:
            for tp, o in offsets.items():
                out.setdefault(tp, set()).update(o)
        return out


def poll_all(c: ShareConsumer, n: int) -> list[Message]:
    got: list[Message] = []
    until(lambda: bool(got.extend(polled(c))) or len(got) >= n, f"{n} records")
    return got


@pytest.fixture(scope="module")
def bootstrap(module_broker_factory) -> str:
    return module_broker_factory().bootstrap


def test_callback_fires_on_explicit_commit_async(bootstrap):
    prepared(bootstrap, "cb-async", "g-cb-async", 1, 10, batch=10)
    c = share_consumer(bootstrap, "g-cb-async", "cb-async")
    commits = Commits(c)
    try:
        for m in poll_all(c, 10):
            c.acknowledge(m)
        assert c.commit_async() is None
        until(lambda: bool(polled(c, 0.1)) or bool(commits.calls), "the callback")  # served from poll
        assert commits.calls == [({("cb-async", 0): set(range(10))}, None)]
    finally:
        c.close()


def test_callback_fires_in_implicit_mode_on_the_next_poll(bootstrap):
    prepared(bootstrap, "cb-implicit", "g-cb-implicit", 2, 20, batch=5)
    c = share_consumer(bootstrap, "g-cb-implicit", "cb-implicit", **{"share.acknowledgement.mode": "implicit"})
    commits = Commits(c)
    try:
        got = poll_all(c, 20)  # each poll accepts what the previous one returned
        until(lambda: bool(polled(c, 0.1)) or commits.offsets() == {("cb-implicit", 0): set(range(10)),
                                                                  ("cb-implicit", 1): set(range(10))},
              "every record's commit reported")  # fmt: skip
        assert all(error is None for _, error in commits.calls)
        assert len({(m.partition(), m.offset()) for m in got}) == 20
    finally:
        c.close()


def test_callback_fires_on_commit_sync_one_entry_per_partition(bootstrap):
    """Each partition's acknowledgements are reported once, clean; commit_sync answers
    per partition."""
    prepared(bootstrap, "cb-sync", "g-cb-sync", 2, 20, batch=10)
    c = share_consumer(bootstrap, "g-cb-sync", "cb-sync")
    commits = Commits(c)
    try:
        got: list[Message] = []

        def poll_and_acknowledge() -> bool:
            msgs = polled(c)
            for m in msgs:
                c.acknowledge(m)
            got.extend(msgs)
            return len(got) >= 20

        until(poll_and_acknowledge, "20 records")
        results = c.commit_sync()
        assert results and all(e is None for e in results.values())
        assert commits.offsets() == {("cb-sync", 0): set(range(10)), ("cb-sync", 1): set(range(10))}
        assert all(error is None and len(offsets) == 1 for offsets, error in commits.calls), commits.calls
        assert len(commits.calls) == len({(t, tuple(sorted(o))) for offsets, _ in commits.calls
                                          for t, o in offsets.items()})  # each reported once
    finally:
        c.close()


def test_callback_fires_during_close(bootstrap):
    prepared(bootstrap, "cb-close", "g-cb-close", 1, 10, batch=10)
    c = share_consumer(bootstrap, "g-cb-close", "cb-close")
    commits = Commits(c)
    for m in poll_all(c, 10):
        c.acknowledge(m)
    c.close()  # the pending acknowledgements go with the closing ShareAcknowledge
    assert commits.calls == [({("cb-close", 0): set(range(10))}, None)]
    again = share_consumer(bootstrap, "g-cb-close", "cb-close")
    try:
        assert [m.offset() for _ in range(4) for m in polled(again)] == []  # accepted for good
    finally:
        again.close()


@pytest.fixture(scope="module")
def short_locks(module_broker_factory):
    return module_broker_factory({**ONE_SECOND_LOCKS, **metrics_overrides()}, name="short-locks")


def stolen(bootstrap: str, topic: str, group: str, n: int) -> tuple[ShareConsumer, Commits, ShareConsumer, list[Message]]:
    """``topic`` with ``n`` records; ``a`` polls them (one partition, one poll) and holds
    them past their 1 s lock while ``b`` takes them (delivery count 2) and holds them
    too; then ``a`` acknowledges its records (locally: every acknowledgement of them is
    INVALID_RECORD_STATE now). (a, a's commit callback calls, b, b's records)."""
    prepared(bootstrap, topic, group, 1, n, batch=n)
    a = share_consumer(bootstrap, group, topic)
    commits = Commits(a)
    held = poll_all(a, n)
    b = share_consumer(bootstrap, group, topic)
    got = poll_all(b, n)
    assert {m.delivery_count() for m in got} == {2}
    for m in held:
        a.acknowledge(m)
    return a, commits, b, got


def accept_all(c: ShareConsumer, msgs: list[Message]) -> None:
    for m in msgs:
        c.acknowledge(m)
    assert all(e is None for e in c.commit_sync().values())
    c.close()


def test_callback_reports_invalid_record_state_on_commit_async_after_lock_expiry(short_locks):
    a, commits, b, taken = stolen(short_locks.bootstrap, "late-async", "g-late-async", 5)
    try:
        a.commit_async()
        until(lambda: bool(polled(a, 0.1)) or bool(commits.calls), "the callback")
        ((offsets, error),) = commits.calls
        assert offsets == {("late-async", 0): set(range(5))}
        assert error is not None and "INVALID_RECORD_STATE" in error, error
    finally:
        a.close()
        accept_all(b, taken)
    samples = scrape(short_locks.metrics_url)
    labels = {"group": "g-late-async", "topic": "late-async", "partition": "0"}
    assert sample(samples, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 5
    assert sample(samples, "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total",
                  topic="late-async") == 1  # fmt: skip
    # the histograms: one batch of five cached (b's redelivery takes it from the cache); every
    # fetch that took the fetch lock timed it, every answered fetch its acquire time and ratio
    share = "kafka_server_sharepartitionmetrics_"
    assert sample(samples, share + "inflightbatchmessagecount_count", **labels) == 1
    assert sample(samples, share + "inflightbatchmessagecount_sum", **labels) == 5
    locks = sample(samples, share + "fetchlocktimems_count", **labels)
    assert locks is not None and locks >= 2, locks  # a's fetch and b's
    assert sample(samples, share + "fetchlockratio_count", **labels) == locks
    group = "kafka_server_sharegroupmetrics_"
    fetches = sample(samples, group + "requesttopicpartitionsfetchratio_count", group="g-late-async")
    assert fetches is not None and fetches >= 2, fetches
    assert sample(samples, group + "topicpartitionsacquiretimems_count", group="g-late-async") == fetches
    assert (sample(samples, group + "topicpartitionsacquiretimems_sum", group="g-late-async") or 0) > 0
    assert (sample(samples, group + "partitionloadtimems_count") or 0) >= 1


def test_callback_reports_invalid_record_state_on_commit_sync_after_lock_expiry(short_locks):
    """Also confluent-kafka's lock_steal_with_committed_ack: the records are another
    member's now; that member's acknowledgements go through."""
    a, commits, b, taken = stolen(short_locks.bootstrap, "late-sync", "g-late-sync", 5)
    try:
        ((tp, error),) = a.commit_sync().items()
        assert (tp.topic, tp.partition) == ("late-sync", 0)
        assert error is not None and "INVALID_RECORD_STATE" in str(error), error
        ((offsets, reported),) = commits.calls
        assert offsets == {("late-sync", 0): set(range(5))} and "INVALID_RECORD_STATE" in str(reported)
    finally:
        a.close()
    accept_all(b, taken)


def test_per_partition_commit_results_with_lock_expiry(short_locks):
    """One partition's acknowledgement comes after its lock expired (another consumer
    holds the records), another's in time: each partition's outcome is its own."""
    bs = short_locks.bootstrap
    prepared(bs, "expire-x", "g-expire-xy", 1, 4, batch=4)
    create_topic(bs, "expire-y", 1, client="raw")
    a = share_consumer(bs, "g-expire-xy", "expire-x")
    a.subscribe(["expire-x", "expire-y"])
    commits = Commits(a)
    held = poll_all(a, 4)
    produce(bs, "expire-y", [b"y%d" % i for i in range(4)], client="confluent", flush_every=4)
    b = share_consumer(bs, "g-expire-xy", "expire-x")
    try:
        stolen_records = poll_all(b, 4)  # after a's lock expired
        for m in held:
            a.acknowledge(m)
        fresh: list[Message] = []  # the next poll carries a's late acknowledgements
        until(lambda: bool(fresh.extend(polled(a))) or len(fresh) >= 4, "expire-y's records")
        for m in fresh:
            a.acknowledge(m)
        results = {(tp.topic, tp.partition): e for tp, e in a.commit_sync().items()}
        assert results == {("expire-y", 0): None}
        until(lambda: len(commits.calls) >= 2 or bool(polled(a, 0.1)), "both outcomes")
        by_partition = {tp: error for offsets, error in commits.calls for tp in offsets}
        assert set(by_partition) == {("expire-x", 0), ("expire-y", 0)}
        assert "INVALID_RECORD_STATE" in str(by_partition[("expire-x", 0)]) and by_partition[("expire-y", 0)] is None
        for m in stolen_records:
            b.acknowledge(m)
        assert all(e is None for e in b.commit_sync().values())
    finally:
        a.close()
        b.close()


def test_throttle_cb_fires_under_a_quota_then_a_zero_event(broker_factory):
    """ShareFetch answers go on the fetch quota (``consumer_byte_rate``, here 1 KiB/s as
    confluent-kafka's test sets it): librdkafka's throttle_cb sees the broker's
    ThrottleTimeMs, then a 0 once a response comes unthrottled (the group heartbeats are
    not on the fetch quota). The records come whole in the first, throttled, response
    (an oversized first batch is answered)."""
    broker = broker_factory()
    bs = broker.bootstrap
    create_topic(bs, "throttled", 1, client="raw")
    produce(bs, "throttled", [b"x" * 1024 for _ in range(15)], client="confluent", flush_every=15)
    set_group_config(bs, "g-throttled", {"share.auto.offset.reset": "earliest"})
    alter_quotas(bs, {"client-id": "slow-share"}, {"consumer_byte_rate": 1024})
    throttles: list[float] = []
    c = share_consumer(bs, "g-throttled", "throttled", **{
        "client.id": "slow-share", "share.acknowledgement.mode": "implicit",
        "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})  # fmt: skip
    try:
        got: list[Message] = []
        until(lambda: bool(got.extend(polled(c, 1.0))) and False or any(t > 0 for t in throttles),
              "a throttled ShareFetch", timeout=30)  # fmt: skip
        assert len(got) == 15 and max(throttles) > 1, throttles  # 15 KiB over the quota's window at 1 KiB/s
        until(lambda: bool(polled(c, 1.0)) and False or throttles[-1] == 0, "the cleared (zero) event", timeout=30)
    finally:
        c.close()
