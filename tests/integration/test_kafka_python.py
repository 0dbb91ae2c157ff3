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

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, OffsetSpec
from kafka.errors import UnknownTopicOrPartitionError

from .clients import (
    ACKS_BY_CODEC,
    CODECS,
    LOG_APPEND_TIME,
    RECORDS_PER_CODEC,
    ROUNDTRIP_TOPIC_CONFIG,
    UNKNOWN_TOPIC_OR_PARTITION,
    Rec,
    admin_client,
    assert_records_match,
    base_timestamp,
    check_list_offsets,
    consume,
    create_topic,
    make_records,
    produce,
    segment_count,
)

pytestmark = pytest.mark.timeout(120)

KP = "kafka-python"


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"kp-{codec}"
    create_topic(broker.bootstrap, topic, configs=ROUNDTRIP_TOPIC_CONFIG, client=KP)
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=100 + CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]
    metas = produce(broker.bootstrap, topic, sent, client=KP, codec=codec, acks=acks)
    if acks != 0:
        assert [m.offset for m in metas] == list(range(len(sent)))
        assert [m.timestamp for m in metas] == [r.timestamp for r in sent]

    got = consume(broker.bootstrap, topic, len(sent), client=KP)
    assert_records_match(sent, got)
    check_list_offsets(broker.bootstrap, topic, sent, client=KP)

    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()
    assert consume(broker.bootstrap, topic, len(sent), client=KP) == got
    check_list_offsets(broker.bootstrap, topic, sent, client=KP)


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "kp-times"
    create_topic(broker.bootstrap, topic, client=KP)
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)
    metas = produce(broker.bootstrap, topic, sent, client=KP, acks=-1, linger_ms=0, flush_every=1)
    assert [m.offset for m in metas] == list(range(30))
    check_list_offsets(broker.bootstrap, topic, sent, client=KP)
    tp = TopicPartition(topic, 0)
    admin = admin_client(broker.bootstrap, client=KP)
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
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"},
                 client=KP)  # fmt: skip
    sent = make_records(2000, base_timestamp() - 86_400_000)
    before = int(time.time() * 1000)
    metas = produce(broker.bootstrap, topic, sent, client=KP, codec="gzip", acks=-1)
    after = int(time.time() * 1000)
    # The produce response carries the append time, and the client reports it.
    assert all(before <= m.timestamp <= after for m in metas)

    got = consume(broker.bootstrap, topic, len(sent), client=KP)
    assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
    for g, r in zip(got, sent):
        assert before <= g.timestamp <= after, (
            f"offset {g.offset}: {g.timestamp} not in [{before}, {after}]"
        )
        assert g.timestamp != r.timestamp
    assert {g.timestamp for g in got} == {m.timestamp for m in metas}


def test_delete_topic_then_restart(broker_factory):
    from kafka import KafkaProducer

    b = broker_factory({"auto.create.topics.enable": "false"})
    create_topic(b.bootstrap, "kp-keep", client=KP)
    create_topic(b.bootstrap, "kp-drop", client=KP)
    keep = make_records(3000, base_timestamp(), seed=11)
    produce(b.bootstrap, "kp-keep", keep, client=KP, codec="snappy", acks=1)

    admin = admin_client(b.bootstrap, client=KP)
    ids = {t["name"]: t["topic_id"] for t in admin.describe_topics(["kp-keep", "kp-drop"])}
    # A producer that already knows the topic, to see what producing after deletion gets.
    p = KafkaProducer(bootstrap_servers=b.bootstrap, retries=0, acks=1)
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

    got = consume(b.bootstrap, "kp-keep", len(keep), client=KP)
    assert_records_match(keep, got)
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap, client=KP)
    try:
        assert "kp-drop" not in admin.list_topics()
        [desc] = admin.describe_topics(["kp-keep"])
        assert desc["topic_id"] == ids["kp-keep"]
        assert consume(b.bootstrap, "kp-keep", len(keep), client=KP) == got
        # The deleted name can be created again and starts empty, with a new id.
        create_topic(b.bootstrap, "kp-drop", client=KP)
        [desc] = admin.describe_topics(["kp-drop"])
        assert desc["topic_id"] != ids["kp-drop"]
        tp = TopicPartition("kp-drop", 0)
        assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 0
    finally:
        admin.close()


def test_consume_with_fetch_limits_smaller_than_a_batch(broker):
    """KIP-74: a batch larger than the fetch limits is still returned whole."""
    topic = "kp-tiny-fetch"
    create_topic(broker.bootstrap, topic, client=KP)
    sent = make_records(3000, base_timestamp(), seed=6)
    produce(broker.bootstrap, topic, sent, client=KP, codec="lz4", acks=1)
    limits = {"fetch_max_bytes": 1024, "max_partition_fetch_bytes": 512}
    assert_records_match(sent, consume(broker.bootstrap, topic, len(sent), client=KP, conf=limits))


def test_keyed_records_across_partitions(broker):
    """The default partitioner spreads keys over 3 partitions; one consumer assigned all
    three (one Fetch for several partitions) gets each partition's records in order."""
    topic = "kp-multi"
    create_topic(broker.bootstrap, topic, partitions=3, client=KP)
    sent = make_records(3000, base_timestamp(), seed=9)
    sent = [r for r in sent if r.key is not None]  # null keys would be spread at random
    metas = produce(broker.bootstrap, topic, sent, client=KP, partition=None, codec="zstd", acks=1)
    by_partition: dict[int, list[Rec]] = {0: [], 1: [], 2: []}
    for r, m in zip(sent, metas, strict=True):
        assert m.offset == len(by_partition[m.partition])
        by_partition[m.partition].append(r)
    assert all(len(recs) > 100 for recs in by_partition.values())

    got = consume(broker.bootstrap, topic, len(sent), client=KP, partitions=3)
    for partition, recs in by_partition.items():
        assert_records_match(recs, [g for g in got if g.partition == partition])
    tps = [TopicPartition(topic, i) for i in range(3)]
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        assert c.end_offsets(tps) == {tp: len(by_partition[tp.partition]) for tp in tps}
    finally:
        c.close()


def test_check_version_reads_kafka_42(broker):
    """kafka-python infers the broker's version from ApiVersions: 4.2, from ListOffsets v11
    (Kafka 4.2) and Produce v13 (4.1) (docs/protocol.md)."""
    admin = admin_client(broker.bootstrap, client=KP)
    try:
        assert admin._client.check_version() == (4, 2)
    finally:
        admin.close()


def test_list_config_resources_by_type(broker):
    """ListConfigResources v1 (KIP-1142): topics, this broker, groups with configs."""
    admin = admin_client(broker.bootstrap, client=KP)
    try:
        topic = create_topic(broker.bootstrap)
        group = f"configured-{time.monotonic_ns()}"
        admin.alter_configs([ConfigResource("GROUP", group, {"consumer.session.timeout.ms": "50000"})])
        listed = admin.list_config_resources()
        assert topic in listed["topic"]
        assert group in listed["group"]
        assert (listed["broker"], listed["broker_logger"]) == (["1"], ["1"])
        assert "client_metrics" not in listed  # no subscriptions
        only_topics = admin.list_config_resources(["TOPIC"])
        assert list(only_topics) == ["topic"] and topic in only_topics["topic"]
        assert admin.list_config_resources(["GROUP", "BROKER"]).keys() == {"group", "broker"}
    finally:
        admin.close()
