"""kafka-python (pure-Python client) against a real tidegate process.

Same checks as the confluent-kafka module, through KafkaAdminClient, KafkaProducer
(with its defaults: idempotent unless a test sets acks or retries that rule it out) and
KafkaConsumer with assign+seek, and ListOffsets through both KafkaConsumer and
KafkaAdminClient.list_partition_offsets.
"""

from __future__ import annotations

import time
import warnings

import pytest

# kafka-python loads its protocol schemas with importlib.resources' deprecated API.
warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, OffsetSpec
from kafka.errors import UnknownTopicOrPartitionError

from .clients import (
    ACKS_BY_CODEC,
    CODECS,
    LOG_APPEND_TIME,
    RECORDS_PER_CODEC,
    ROUNDTRIP_TOPIC_CONFIG,
    UNKNOWN_TOPIC_OR_PARTITION,
    Got,
    Rec,
    assert_records_match,
    base_timestamp,
    check_offset_for_time,
    make_records,
    segment_count,
    timestamp_queries,
)

pytestmark = pytest.mark.timeout(120)


# -- client helpers --------------------------------------------------------------------


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None
) -> None:
    admin = admin_client(bootstrap)
    try:
        result = admin.create_topics(
            {
                name: {
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "configs": configs or {},
                }
            }
        )
        assert [t["error_code"] for t in result["topics"]] == [0]
    finally:
        admin.close()


def new_producer(bootstrap: str, **kw) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, **kw)


def produce(
    bootstrap: str,
    topic: str,
    records: list[Rec],
    *,
    codec: str = "none",
    acks=1,
    batch_per_record=False,
) -> list:
    """Send ``records`` to partition 0; returns the RecordMetadata of each, in send order."""
    p = new_producer(
        bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all" if acks == -1 else acks,
        linger_ms=0 if batch_per_record else 5,
    )
    try:
        futures = []
        for r in records:
            futures.append(
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                    partition=0,
                )
            )
            if batch_per_record:
                p.flush(10)
        p.flush(30)
        return [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)


def new_consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=15_000,
    )


def consume(
    bootstrap: str, topic: str, count: int, start: int = 0, timeout: float = 30.0
) -> list[Got]:
    c = new_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=5000).values():
                got.extend(
                    Got(
                        r.offset,
                        r.key,
                        r.value,
                        tuple(r.headers or ()),
                        r.timestamp,
                        r.timestamp_type,
                    )
                    for r in recs
                )
        extra = [r for recs in c.poll(timeout_ms=200).values() for r in recs]
        assert not extra, f"unexpected record at offset {extra[0].offset}"
        return got
    finally:
        c.close()


def check_list_offsets(bootstrap: str, topic: str, sent: list[Rec], *, exact: bool = False) -> None:
    n = len(sent)
    tp = TopicPartition(topic, 0)
    c = new_consumer(bootstrap)
    admin = admin_client(bootstrap)
    try:
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: n}
        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == n
        for q in timestamp_queries(sent) + [sent[-1].timestamp + 1]:
            found = c.offsets_for_times({tp: q})[tp]
            if found is None:
                check_offset_for_time(sent, q, None, exact=exact)
            else:
                check_offset_for_time(sent, q, found.offset, found.timestamp, exact=exact)
    finally:
        c.close()
        admin.close()


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"kp-{codec}"
    create_topic(broker.bootstrap, topic, configs=ROUNDTRIP_TOPIC_CONFIG)
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=100 + CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]
    metas = produce(broker.bootstrap, topic, sent, codec=codec, acks=acks)
    if acks != 0:
        assert [m.offset for m in metas] == list(range(len(sent)))
        assert [m.timestamp for m in metas] == [r.timestamp for r in sent]

    got = consume(broker.bootstrap, topic, len(sent))
    assert_records_match(sent, got)
    check_list_offsets(broker.bootstrap, topic, sent)

    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()
    assert consume(broker.bootstrap, topic, len(sent)) == got
    check_list_offsets(broker.bootstrap, topic, sent)


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "kp-times"
    create_topic(broker.bootstrap, topic)
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)
    metas = produce(broker.bootstrap, topic, sent, acks=-1, batch_per_record=True)
    assert [m.offset for m in metas] == list(range(30))
    check_list_offsets(broker.bootstrap, topic, sent, exact=True)
    tp = TopicPartition(topic, 0)
    admin = admin_client(broker.bootstrap)
    try:
        for i in (0, 1, 13, 29):
            found = admin.list_partition_offsets({tp: sent[i].timestamp - 5})[tp]
            assert (found.offset, found.timestamp) == (i, sent[i].timestamp)
        found = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
        assert (found.offset, found.timestamp) == (29, sent[29].timestamp)
    finally:
        admin.close()


def test_log_append_time_topic(broker):
    topic = "kp-lat"
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    sent = make_records(2000, base_timestamp() - 86_400_000)
    before = int(time.time() * 1000)
    metas = produce(broker.bootstrap, topic, sent, codec="gzip", acks=-1)
    after = int(time.time() * 1000)
    # The produce response carries the append time, and the client reports it.
    assert all(before <= m.timestamp <= after for m in metas)

    got = consume(broker.bootstrap, topic, len(sent))
    assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
    for g, r in zip(got, sent):
        assert before <= g.timestamp <= after, (
            f"offset {g.offset}: {g.timestamp} not in [{before}, {after}]"
        )
        assert g.timestamp != r.timestamp
    assert {g.timestamp for g in got} == {m.timestamp for m in metas}


def test_delete_topic_then_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    create_topic(b.bootstrap, "kp-keep")
    create_topic(b.bootstrap, "kp-drop")
    keep = make_records(3000, base_timestamp(), seed=11)
    produce(b.bootstrap, "kp-keep", keep, codec="snappy", acks=1)

    admin = admin_client(b.bootstrap)
    ids = {t["name"]: t["topic_id"] for t in admin.describe_topics(["kp-keep", "kp-drop"])}
    # A producer that already knows the topic, to see what producing after deletion gets.
    p = new_producer(b.bootstrap, retries=0, acks=1)
    assert p.send("kp-drop", b"before", partition=0).get(10).offset == 0

    admin.delete_topics(["kp-drop"])
    assert "kp-drop" not in admin.list_topics()
    [desc] = admin.describe_topics(["kp-drop"])
    assert desc["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(UnknownTopicOrPartitionError):
        p.send("kp-drop", b"after", partition=0).get(10)
    p.close(timeout=5)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-drop"])
    admin.close()

    got = consume(b.bootstrap, "kp-keep", len(keep))
    assert_records_match(keep, got)
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap)
    try:
        assert "kp-drop" not in admin.list_topics()
        [desc] = admin.describe_topics(["kp-keep"])
        assert desc["topic_id"] == ids["kp-keep"]
        assert consume(b.bootstrap, "kp-keep", len(keep)) == got
        # The deleted name can be created again and starts empty, with a new id.
        create_topic(b.bootstrap, "kp-drop")
        [desc] = admin.describe_topics(["kp-drop"])
        assert desc["topic_id"] != ids["kp-drop"]
        tp = TopicPartition("kp-drop", 0)
        assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 0
    finally:
        admin.close()


def test_consume_with_fetch_limits_smaller_than_a_batch(broker):
    """KIP-74: a batch larger than the fetch limits is still returned whole."""
    topic = "kp-tiny-fetch"
    create_topic(broker.bootstrap, topic)
    sent = make_records(3000, base_timestamp(), seed=6)
    produce(broker.bootstrap, topic, sent, codec="lz4", acks=1)
    c = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=1024,
        max_partition_fetch_bytes=512,
    )
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[Got] = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(
                    Got(
                        r.offset,
                        r.key,
                        r.value,
                        tuple(r.headers or ()),
                        r.timestamp,
                        r.timestamp_type,
                    )
                    for r in recs
                )
    finally:
        c.close()
    assert_records_match(sent, got)


def test_keyed_records_across_partitions(broker):
    """The default partitioner spreads keys over 3 partitions; one consumer assigned all
    three (one Fetch for several partitions) gets each partition's records in order."""
    topic = "kp-multi"
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = make_records(3000, base_timestamp(), seed=9)
    sent = [r for r in sent if r.key is not None]  # null keys would be spread at random
    p = new_producer(broker.bootstrap, compression_type="zstd", acks=1, linger_ms=5)
    try:
        futures = [
            p.send(
                topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp
            )
            for r in sent
        ]
        p.flush(30)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    by_partition: dict[int, list[Rec]] = {0: [], 1: [], 2: []}
    for r, m in zip(sent, metas):
        assert m.offset == len(by_partition[m.partition])
        by_partition[m.partition].append(r)
    assert all(len(recs) > 100 for recs in by_partition.values())

    c = new_consumer(broker.bootstrap)
    try:
        tps = [TopicPartition(topic, i) for i in range(3)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        got: dict[int, list[Got]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < len(sent) and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=500, max_records=5000).items():
                got[tp.partition].extend(
                    Got(
                        r.offset,
                        r.key,
                        r.value,
                        tuple(r.headers or ()),
                        r.timestamp,
                        r.timestamp_type,
                    )
                    for r in recs
                )
        assert c.end_offsets(tps) == {tp: len(by_partition[tp.partition]) for tp in tps}
    finally:
        c.close()
    for partition, recs in by_partition.items():
        assert_records_match(recs, got[partition])
