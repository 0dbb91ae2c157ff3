"""KIP-227 fetch sessions with real clients against a real tidegate process.

Of the installed clients only kafka-python 3.x opens sessions (its ``FetchSessionHandler``
sends epoch 0, then incremental requests); librdkafka does not implement KIP-227 and
aiokafka sends ``FINAL_EPOCH`` (-1), so both fetch sessionless. The broker's
FetchSessionCache metrics show which: a kafka-python consumer of many partitions holds
one session of all its partitions, the others none.
"""

from __future__ import annotations

import time
import warnings

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, TopicPartition

from tests.conftest import metrics_overrides
from tidegate.client import KafkaClient
from tidegate.client.fetcher import read_range_batches

from .clients import create_topic, produce, sample, scrape

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 300
BASE = "kafka_server_fetchsessioncache_"


def session_metrics(broker) -> tuple[float, float, float]:
    s = scrape(broker.metrics_url)
    return (
        sample(s, BASE + "numincrementalfetchsessions") or 0.0,
        sample(s, BASE + "numincrementalfetchpartitionscached") or 0.0,
        sample(s, BASE + "incrementalfetchsessionevictions_total") or 0.0,
    )


def fetch_requests(broker) -> float:
    return sample(scrape(broker.metrics_url), "kafka_network_requestmetrics_requests_total", request="Fetch") or 0.0


def test_kafka_python_consumer_of_many_partitions_holds_one_incremental_session(broker_factory):
    broker = broker_factory(metrics_overrides())
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS, client="kafka-python")
    # one record in every third partition
    first = [f"a{p}".encode() for p in range(0, PARTITIONS, 3)]
    produce(broker.bootstrap, topic, first, client="tidegate", partition=lambda i: 3 * i)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(first) and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in recs)
        assert sorted(got) == sorted(first)
        # the consumer now long-polls the idle broker through its session
        before = fetch_requests(broker)
        consumer.poll(timeout_ms=1500)
        assert fetch_requests(broker) - before >= 3
        assert session_metrics(broker) == (1.0, float(PARTITIONS), 0.0)
        # ... incrementally: the client's session handler is past its first epochs
        (meta,) = [h.next_metadata for h in consumer._fetcher._session_handlers.values()]
        assert meta.session_id != 0 and meta.epoch >= 3
        session_id, epoch = meta.session_id, meta.epoch
        # new records in two partitions reach the consumer over the incremental session
        produce(broker.bootstrap, topic, [b"late-1"], client="tidegate", partition=1)
        produce(broker.bootstrap, topic, [b"late-7"], client="tidegate", partition=7)
        late: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(late) < 2 and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                late.extend(r.value for r in recs)
        assert sorted(late) == [b"late-1", b"late-7"]
        # unassigning partitions shrinks the session (forgotten topics)
        consumer.assign(tps[:10])
        deadline = time.monotonic() + 30
        while session_metrics(broker)[1] != 10 and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert session_metrics(broker) == (1.0, 10.0, 0.0)
        (meta,) = [h.next_metadata for h in consumer._fetcher._session_handlers.values()]
        assert meta.session_id == session_id and meta.epoch > epoch  # the same session throughout
    finally:
        consumer.close()


def test_librdkafka_consumer_fetches_sessionless(broker_factory):
    broker = broker_factory(metrics_overrides())
    topic = create_topic(broker.bootstrap, partitions=4, client="kafka-python")
    produce(broker.bootstrap, topic, [b"x", b"y"], client="tidegate", partition=lambda i: i)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "fetch.wait.max.ms": 100,
                         "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(4)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert sorted(got) == [b"x", b"y"]
        assert fetch_requests(broker) >= 1
        assert session_metrics(broker)[:2] == (0.0, 0.0)
    finally:
        consumer.close()


def test_tidegate_range_reader_fetches_through_a_session_and_closes_it(broker_factory):
    """tidegate's own consumer side (the Spark source's reader): a range read of many
    fetches uses one incremental session, ended when the read is done."""
    broker = broker_factory(metrics_overrides())
    topic = create_topic(broker.bootstrap)
    sent = [f"r{i}".encode() for i in range(40)]
    produce(broker.bootstrap, topic, sent, client="tidegate", linger_ms=0, flush_every=1)
    with KafkaClient(broker.bootstrap) as c:
        c.metadata([topic])
        got = []
        during = None
        # one batch per Fetch
        for recs in read_range_batches(c, (topic, 0), 0, len(sent), partition_max_bytes=1):
            got.extend(r.value for r in recs)
            if len(got) == 20:
                during = session_metrics(broker)
        assert got == sent
        assert during == (1.0, 1.0, 0.0)
        assert session_metrics(broker)[:2] == (0.0, 0.0)
