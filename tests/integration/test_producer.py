"""tidegate's producer against a real tidegate broker and against the peer broker.

Records sent by ``tidegate.producer.Producer`` are read back by confluent-kafka and
kafka-python consumers (assign + seek, no groups) and compared field by field:
key, value, headers, timestamp, partition and offset; keyed records must sit on
the partition the Java client (= kafka-python's DefaultPartitioner) picks. Every
codec round-trips, under both buffer.memory allocation strategies. The peer broker
(Tansu, ``../shared/tools/peer-broker.sh``) is skipped if it cannot start.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.partitioner.default import murmur2 as java_compatible_murmur2

from tidegate.client import KafkaClient
from tidegate.client.errors import KafkaTimeoutError, UnsupportedVersionError
from tidegate.producer import Producer

from .clients import CODECS, Rec, base_timestamp, create_topic, make_records

pytestmark = pytest.mark.timeout(180)




@pytest.fixture(params=["tidegate", "peer"])
def bootstrap(request):
    if request.param == "tidegate":
        return request.getfixturevalue("broker").bootstrap
    return request.getfixturevalue("peer_bootstrap")




def java_partition(key: bytes, n: int) -> int:
    return (java_compatible_murmur2(key) & 0x7FFFFFFF) % n


def produce(bootstrap: str, topic: str, records: list[Rec], **conf) -> list:
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    try:
        futs = [
            p.send(topic, r.value, key=r.key, headers=list(r.headers), timestamp=r.timestamp)
            for r in records
        ]
        assert p.flush(60) == 0
        return [f.result(0) for f in futs]
    finally:
        p.close(30)


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        c.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                got.append(
                    (
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value(),
                        tuple(m.headers() or ()),
                        m.timestamp()[1],
                    )
                )
        return got
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=15_000,
    )
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=5000).values():
                got.extend(
                    (r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp)
                    for r in recs
                )
        return got
    finally:
        c.close()


def check_read_back(sent: list[Rec], metas: list, got: list[tuple], partitions: int) -> None:
    """Per partition, consumed records equal what was sent there, at the offsets the
    futures reported, with keys where the Java partitioner puts them."""
    assert len(got) == len(sent), f"consumed {len(got)}, sent {len(sent)}"
    by_partition: dict[int, list[tuple]] = defaultdict(list)
    for g in sorted(got, key=lambda g: (g[0], g[1])):
        by_partition[g[0]].append(g)
    expected: dict[int, list[tuple]] = defaultdict(list)
    for r, md in zip(sent, metas, strict=True):
        if r.key is not None:
            assert md.partition == java_partition(r.key, partitions), r.key
        expected[md.partition].append(
            (md.partition, md.offset, r.key, r.value, tuple(r.headers), r.timestamp)
        )
    for p in set(expected) | set(by_partition):
        want = sorted(expected[p], key=lambda e: e[1])
        have = by_partition[p]
        assert [h[1] for h in have] == [w[1] for w in want], f"partition {p} offsets"
        for h, w in zip(have, want, strict=True):
            assert h == w, f"partition {p} offset {w[1]}: {h!r} != {w!r}"


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_records_read_back_by_confluent_and_kafka_python(bootstrap, strategy):
    topic = create_topic(bootstrap, 4, prefix="prod")
    sent = make_records(1500, base_timestamp())
    metas = produce(bootstrap, topic, sent, **{"buffer.memory.allocation.strategy": strategy})
    assert {m.topic for m in metas} == {topic}
    check_read_back(sent, metas, consume_confluent(bootstrap, topic, 4, len(sent)), 4)
    check_read_back(sent, metas, consume_kafka_python(bootstrap, topic, 4, len(sent)), 4)


@pytest.mark.parametrize("strategy", ["full", "incremental"])
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(bootstrap, codec, strategy):
    """Every codec under both strategies. 500 records, ~30 KiB per partition before
    compression, batch.size 64 KiB and a long linger (flush sends at once): each
    partition's records form one batch, which under incremental is built in two or
    more 16 KiB chunks and written to the socket as a list of chunks."""
    topic = create_topic(bootstrap, 2, prefix="prod")
    sent = make_records(500, base_timestamp(), seed=CODECS.index(codec))
    metas = produce(
        bootstrap,
        topic,
        sent,
        **{
            "compression.type": codec,
            "buffer.memory.allocation.strategy": strategy,
            "batch.size": 65536,
            "linger.ms": 1000,
        },
    )
    check_read_back(sent, metas, consume_kafka_python(bootstrap, topic, 2, len(sent)), 2)
    check_read_back(sent, metas, consume_confluent(bootstrap, topic, 2, len(sent)), 2)


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_large_records_and_memory_fully_returned(broker, strategy):
    topic = create_topic(broker.bootstrap, 1, prefix="prod")
    ts = base_timestamp()
    sent = [
        Rec(b"k%d" % i, os.urandom(n), (), ts + i)
        for i, n in enumerate((10, 40_000, 5, 200_000, 16_384, 0))
    ]
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "batch.size": 16384,
            "buffer.memory.allocation.strategy": strategy,
            "linger.ms": 20,
        }
    )
    try:
        futs = [p.send(topic, r.value, key=r.key, partition=0, timestamp=r.timestamp) for r in sent]
        p.flush(30)
        metas = [f.result(0) for f in futs]
        assert [m.offset for m in metas] == list(range(len(sent)))
        assert p.pool.available_memory() == p.pool.total_memory  # every byte came back
    finally:
        p.close(10)
    check_read_back(sent, metas, consume_kafka_python(broker.bootstrap, topic, 1, len(sent)), 1)


def test_wire_bytes_identical_under_both_strategies_on_a_real_broker(broker):
    """Capture what each strategy hands to sendmsg for the same records: the record
    batches are byte-identical; the incremental ones are several chunks each."""
    ts = base_timestamp()
    sent = [
        Rec(b"k%d" % (i % 7), os.urandom(i % 900), (("h", b"%d" % i),), ts + i // 5)
        for i in range(300)
    ]
    captured = {}
    for strategy in ("full", "incremental"):
        topic = create_topic(broker.bootstrap, 1, prefix="prod")
        batches_bytes = []
        segment_counts = []

        def hook(node, version, buffers, batches, out=batches_bytes, counts=segment_counts):
            for b in batches:
                segs = b.segments()
                counts.append(len(segs))
                out.append(b"".join(bytes(s) for s in segs))

        p = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 60_000,
                "batch.size": 1 << 20,
                "enable.idempotence": False,
                "buffer.memory.allocation.strategy": strategy,
            },
            _on_request=hook,
        )
        try:
            for r in sent:
                p.send(
                    topic,
                    r.value,
                    key=r.key,
                    partition=0,
                    headers=list(r.headers),
                    timestamp=r.timestamp,
                )
            p.flush(30)
        finally:
            p.close(10)
        captured[strategy] = (batches_bytes, segment_counts)
    assert captured["full"][0] == captured["incremental"][0]
    assert len(captured["full"][0]) == 1  # one batch: linger held everything
    assert captured["full"][1] == [1]
    assert captured["incremental"][1][0] > 1  # scatter-gather over chunks


def test_idempotent_producer_on_a_broker_that_supports_it(peer_bootstrap):
    topic = create_topic(peer_bootstrap, 3, prefix="prod")
    sent = make_records(500, base_timestamp())
    p = Producer(
        {"bootstrap.servers": peer_bootstrap, "buffer.memory.allocation.strategy": "incremental"}
    )
    try:
        futs = [
            p.send(topic, r.value, key=r.key, headers=list(r.headers), timestamp=r.timestamp)
            for r in sent
        ]
        p.flush(30)
        metas = [f.result(0) for f in futs]
        assert p.idempotent is True
        assert p.producer_id >= 0
    finally:
        p.close(10)
    check_read_back(sent, metas, consume_kafka_python(peer_bootstrap, topic, 3, len(sent)), 3)


def test_idempotence_follows_the_brokers_api_versions(broker):
    with KafkaClient(broker.bootstrap) as c:
        c.bootstrap(timeout_ms=10_000)
        supported = c.supports(-1, 22)
    topic = create_topic(broker.bootstrap, 1, prefix="prod")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        p.send(topic, b"v").result(20)
        assert p.idempotent is supported
    finally:
        p.close(10)


def test_retries_across_a_broker_restart(broker):
    topic = create_topic(broker.bootstrap, 2, prefix="prod")
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 2,
            "retry.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    try:
        futs = [p.send(topic, b"before-%d" % i) for i in range(200)]
        p.flush(20)
        broker.stop()
        futs += [p.send(topic, b"during-%d" % i) for i in range(200)]
        time.sleep(0.5)
        broker.start()
        futs += [p.send(topic, b"after-%d" % i) for i in range(200)]
        assert p.flush(60) == 0
        errors = [f.exception(0) for f in futs if f.exception(0) is not None]
        assert not errors, errors[:3]
    finally:
        p.close(10)
    got = consume_kafka_python(broker.bootstrap, topic, 2, 600)
    assert {g[3] for g in got} == {
        f"{w}-{i}".encode() for w in ("before", "during", "after") for i in range(200)
    }


def test_delivery_timeout_when_the_broker_is_gone(broker):
    topic = create_topic(broker.bootstrap, 1, prefix="prod")
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "delivery.timeout.ms": 1500,
            "request.timeout.ms": 1000,
            "linger.ms": 0,
            "reconnect.backoff.max.ms": 100,
        }
    )
    try:
        p.send(topic, b"warm-up").result(20)
        broker.stop()
        t0 = time.monotonic()
        f = p.send(topic, b"lost")
        err = f.exception(10)
        assert isinstance(err, KafkaTimeoutError), err
        assert 1.0 < time.monotonic() - t0 < 6
    finally:
        p.close(0)


def test_metadata_refresh_picks_up_new_partitions(bootstrap):
    """metadata.max.age.ms: keys move to where the Java partitioner puts them once the
    producer's metadata shows the topic's new partition count."""
    topic = create_topic(bootstrap, 2, prefix="prod")
    key = next(b"k%d" % i for i in range(1000) if java_partition(b"k%d" % i, 4) == 3)
    p = Producer({"bootstrap.servers": bootstrap, "metadata.max.age.ms": 300})
    try:
        assert p.send(topic, b"v", key=key).result(20).partition == java_partition(key, 2)
        with KafkaClient(bootstrap) as c:
            try:
                r = c.request(
                    37,
                    {
                        "topics": [{"name": topic, "count": 4, "assignments": None}],
                        "timeout": 10_000,
                        "validate_only": False,
                    },
                )
            except UnsupportedVersionError:
                pytest.skip("this broker has no CreatePartitions (Tansu)")
            assert int(r.results[0].error_code) == 0, r
        deadline = time.monotonic() + 15
        while p.partitions_for(topic) != [0, 1, 2, 3]:
            assert time.monotonic() < deadline, "metadata never showed 4 partitions"
            time.sleep(0.1)
        assert p.send(topic, b"v", key=key).result(20).partition == 3
    finally:
        p.close(10)
