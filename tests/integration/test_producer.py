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
from kafka.partitioner.default import murmur2 as java_compatible_murmur2

from tests.conftest import wait_until
from tidegate.client import KafkaClient
from tidegate.client.errors import KafkaTimeoutError, UnsupportedVersionError
from tidegate.producer import Producer
from tidegate.producer.buffer_pool import chunk_size_for

from .clients import (
    CODECS,
    Delivered,
    Got,
    Rec,
    base_timestamp,
    consume,
    create_topic,
    make_records,
    produce,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["tidegate", "peer"])
def bootstrap(request):
    if request.param == "tidegate":
        return request.getfixturevalue("broker").bootstrap
    return request.getfixturevalue("peer_bootstrap")


def java_partition(key: bytes, n: int) -> int:
    return (java_compatible_murmur2(key) & 0x7FFFFFFF) % n


def produce_tidegate(bootstrap: str, topic: str, records: list[Rec], **conf) -> list[Delivered]:
    """The records through tidegate's Producer and its partitioner, with ``conf``."""
    return produce(bootstrap, topic, records, client="tidegate", partition=None, linger_ms=None,
                   conf=conf, timeout=60)  # fmt: skip


def check_read_back(sent: list[Rec], metas: list, got: list[Got], partitions: int) -> None:
    """Per partition, consumed records equal what was sent there, at the offsets the
    producer reported, with keys where the Java partitioner puts them."""
    assert len(got) == len(sent), f"consumed {len(got)}, sent {len(sent)}"
    have_by_partition: dict[int, list[tuple]] = defaultdict(list)
    for g in sorted(got, key=lambda g: (g.partition, g.offset)):
        have_by_partition[g.partition].append(
            (g.partition, g.offset, g.key, g.value, g.headers, g.timestamp)
        )
    expected: dict[int, list[tuple]] = defaultdict(list)
    for r, md in zip(sent, metas, strict=True):
        if r.key is not None:
            assert md.partition == java_partition(r.key, partitions), r.key
        expected[md.partition].append(
            (md.partition, md.offset, r.key, r.value, tuple(r.headers), r.timestamp)
        )
    for p in set(expected) | set(have_by_partition):
        want = sorted(expected[p], key=lambda e: e[1])
        have = have_by_partition[p]
        assert [h[1] for h in have] == [w[1] for w in want], f"partition {p} offsets"
        for h, w in zip(have, want, strict=True):
            assert h == w, f"partition {p} offset {w[1]}: {h!r} != {w!r}"


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_records_read_back_by_confluent_and_kafka_python(bootstrap, strategy):
    topic = create_topic(bootstrap, partitions=4, prefix="prod")
    sent = make_records(1500, base_timestamp())
    metas = produce_tidegate(
        bootstrap, topic, sent, **{"buffer.memory.allocation.strategy": strategy}
    )
    assert {m.topic for m in metas} == {topic}
    got = consume(bootstrap, topic, len(sent), client="confluent", partitions=4, timeout=60)
    check_read_back(sent, metas, got, 4)
    got = consume(bootstrap, topic, len(sent), client="kafka-python", partitions=4, timeout=60)
    check_read_back(sent, metas, got, 4)


@pytest.mark.parametrize("strategy", ["full", "incremental"])
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(bootstrap, codec, strategy):
    """Every codec under both strategies. 500 records, ~30 KiB per partition before
    compression, batch.size 64 KiB and a long linger (flush sends at once): each
    partition's records form one batch, which under incremental is built in two or
    more 16 KiB chunks and written to the socket as a list of chunks."""
    topic = create_topic(bootstrap, partitions=2, prefix="prod")
    sent = make_records(500, base_timestamp(), seed=CODECS.index(codec))
    metas = produce_tidegate(
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
    got = consume(bootstrap, topic, len(sent), client="kafka-python", partitions=2, timeout=60)
    check_read_back(sent, metas, got, 2)
    got = consume(bootstrap, topic, len(sent), client="confluent", partitions=2, timeout=60)
    check_read_back(sent, metas, got, 2)


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_large_records_and_memory_fully_returned(broker, strategy):
    topic = create_topic(broker.bootstrap, partitions=1, prefix="prod")
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
    got = consume(broker.bootstrap, topic, len(sent), client="kafka-python", timeout=60)
    check_read_back(sent, metas, got, 1)


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
        topic = create_topic(broker.bootstrap, partitions=1, prefix="prod")
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
    # scatter-gather over chunks: the batch filled as many 16 KiB chunks as it needs
    [size] = [len(b) for b in captured["full"][0]]
    assert captured["incremental"][1] == [-(-size // chunk_size_for(1 << 20))] != [1]


def test_idempotent_producer_on_a_broker_that_supports_it(peer_bootstrap):
    topic = create_topic(peer_bootstrap, partitions=3, prefix="prod")
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
    got = consume(peer_bootstrap, topic, len(sent), client="kafka-python", partitions=3, timeout=60)
    check_read_back(sent, metas, got, 3)


def test_idempotence_follows_the_brokers_api_versions(broker):
    with KafkaClient(broker.bootstrap) as c:
        c.bootstrap(timeout_ms=10_000)
        supported = c.supports(-1, 22)
    topic = create_topic(broker.bootstrap, partitions=1, prefix="prod")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        p.send(topic, b"v").result(20)
        assert p.idempotent is supported
    finally:
        p.close(10)


def test_retries_across_a_broker_restart(broker):
    topic = create_topic(broker.bootstrap, partitions=2, prefix="prod")
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
    got = consume(broker.bootstrap, topic, 600, client="kafka-python", partitions=2, timeout=60)
    # each once: the producer is idempotent on this broker, so its retries are not
    # written twice
    assert sorted(g.value for g in got) == sorted(
        f"{w}-{i}".encode() for w in ("before", "during", "after") for i in range(200)
    )


def test_delivery_timeout_when_the_broker_is_gone(broker):
    topic = create_topic(broker.bootstrap, partitions=1, prefix="prod")
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
    topic = create_topic(bootstrap, partitions=2, prefix="prod")
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
        wait_until(lambda: p.partitions_for(topic) == [0, 1, 2, 3], 15, interval=0.1,
                   what="the producer's metadata showing 4 partitions")  # fmt: skip
        assert p.send(topic, b"v", key=key).result(20).partition == 3
    finally:
        p.close(10)
