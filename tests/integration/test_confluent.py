"""confluent-kafka (librdkafka) against a real tidegate process.

Per codec: AdminClient creates the topic, a Producer sends 10,000 records (keys,
values, headers, explicit timestamps) with that codec and acks 0/1/all, a Consumer
reads them back by assign+seek and every field and offset is checked; ListOffsets is
checked through both the Consumer and AdminClient.list_offsets; then the broker is
restarted and the same records are read again. Separate tests cover exact
offsets-for-times on one-record batches, LogAppendTime topics and topic deletion.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .clients import (
    ACKS_BY_CODEC,
    CODECS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    RECORDS_PER_CODEC,
    ROUNDTRIP_TOPIC_CONFIG,
    Rec,
    admin_client,
    assert_records_match,
    base_timestamp,
    check_list_offsets,
    confluent_list_offset,
    consume,
    create_topic,
    make_records,
    new_consumer,
    produce,
    segment_count,
)

pytestmark = pytest.mark.timeout(120)

CFK = "confluent"


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"cfk-{codec}"
    create_topic(broker.bootstrap, topic, configs=ROUNDTRIP_TOPIC_CONFIG, client=CFK)
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]
    delivered = produce(broker.bootstrap, topic, sent, client=CFK, codec=codec, acks=acks)
    if acks != 0:
        # The produce response's base offset gives each message its offset.
        assert [d.offset for d in delivered] == list(range(len(sent)))
        assert [(d.timestamp_type, d.timestamp) for d in delivered] == [
            (CREATE_TIME, r.timestamp) for r in sent
        ]

    got = consume(broker.bootstrap, topic, len(sent), client=CFK)
    assert_records_match(sent, got)
    check_list_offsets(broker.bootstrap, topic, sent, client=CFK)

    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()
    assert consume(broker.bootstrap, topic, len(sent), client=CFK) == got
    # Seeking into the middle of the log after recovery lands on the exact record.
    middle = len(sent) // 2 + 17
    assert consume(broker.bootstrap, topic, len(sent) - middle, client=CFK, start=middle) == (
        got[middle:]
    )
    check_list_offsets(broker.bootstrap, topic, sent, client=CFK)


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "cfk-times"
    create_topic(broker.bootstrap, topic, client=CFK)
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)
    produce(broker.bootstrap, topic, sent, client=CFK, acks=-1, linger_ms=0, flush_every=1)
    check_list_offsets(broker.bootstrap, topic, sent, client=CFK)
    admin = admin_client(broker.bootstrap, client=CFK)
    for i in (0, 1, 13, 29):
        q = sent[i].timestamp - 5  # between record i-1 and record i
        offset, ts = confluent_list_offset(admin, topic, OffsetSpec.for_timestamp(q))
        assert (offset, ts) == (i, sent[i].timestamp)
    offset, ts = confluent_list_offset(admin, topic, OffsetSpec.max_timestamp())
    assert (offset, ts) == (29, sent[29].timestamp)


def test_log_append_time_topic(broker):
    topic = "cfk-lat"
    admin = admin_client(broker.bootstrap, client=CFK)
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"},
                 client=CFK)  # fmt: skip
    sent = make_records(2000, base_timestamp() - 86_400_000)
    before = int(time.time() * 1000)
    delivered = produce(broker.bootstrap, topic, sent, client=CFK, codec="lz4", acks=1)
    after = int(time.time() * 1000)
    for d in delivered:
        assert d.timestamp_type == LOG_APPEND_TIME
        assert before <= d.timestamp <= after

    got = consume(broker.bootstrap, topic, len(sent), client=CFK)
    assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
    for g, r in zip(got, sent):
        assert before <= g.timestamp <= after, (
            f"offset {g.offset}: {g.timestamp} not in [{before}, {after}]"
        )
        assert g.timestamp != r.timestamp
    # The produce responses carried the append times the consumer reads.
    assert {g.timestamp for g in got} == {d.timestamp for d in delivered}
    # Lookups by time use the append times, not the producer's CreateTime.
    assert confluent_list_offset(admin, topic, OffsetSpec.for_timestamp(sent[-1].timestamp))[0] == 0
    assert confluent_list_offset(admin, topic, OffsetSpec.for_timestamp(after + 60_000))[0] == -1


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=10).topics)


def topic_id(admin: AdminClient, name: str):
    return str(
        admin.describe_topics(TopicCollection([name]), request_timeout=10)[name].result(10).topic_id
    )


def test_delete_topic_then_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    admin = admin_client(b.bootstrap, client=CFK)
    create_topic(b.bootstrap, "cfk-keep", client=CFK)
    create_topic(b.bootstrap, "cfk-drop", client=CFK)
    keep = make_records(3000, base_timestamp(), seed=1)
    produce(b.bootstrap, "cfk-keep", keep, client=CFK, codec="zstd", acks=-1)
    produce(b.bootstrap, "cfk-drop", make_records(500, base_timestamp(), seed=2), client=CFK,
            acks=1)  # fmt: skip
    keep_id = topic_id(admin, "cfk-keep")
    drop_id = topic_id(admin, "cfk-drop")
    assert {"cfk-keep", "cfk-drop"} <= topic_names(admin)

    admin.delete_topics(["cfk-drop"], operation_timeout=10)["cfk-drop"].result(10)
    assert "cfk-drop" not in topic_names(admin)
    md = admin.list_topics("cfk-drop", timeout=10)
    assert md.topics["cfk-drop"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as exc:
        topic_id(admin, "cfk-drop")
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # A producer that looks the topic up is told it does not exist.
    errors: list = []
    delivered = produce(b.bootstrap, "cfk-drop", keep[:1], client=CFK, acks=1,
                        conf={"topic.metadata.propagation.max.ms": 100}, errors=errors)  # fmt: skip
    assert delivered == []
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics(["cfk-drop"], operation_timeout=10)["cfk-drop"].result(10)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    got = consume(b.bootstrap, "cfk-keep", len(keep), client=CFK)
    assert_records_match(keep, got)
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap, client=CFK)
    assert "cfk-drop" not in topic_names(admin)
    assert topic_id(admin, "cfk-keep") == keep_id
    assert consume(b.bootstrap, "cfk-keep", len(keep), client=CFK) == got

    # Re-creating the deleted name gives a new, empty topic: none of the old data returns.
    create_topic(b.bootstrap, "cfk-drop", client=CFK)
    assert topic_id(admin, "cfk-drop") != drop_id
    assert confluent_list_offset(admin, "cfk-drop", OffsetSpec.latest())[0] == 0
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap, client=CFK)
    assert confluent_list_offset(admin, "cfk-drop", OffsetSpec.latest())[0] == 0
    assert consume(b.bootstrap, "cfk-keep", len(keep), client=CFK) == got


def test_consume_with_fetch_limits_smaller_than_a_batch(broker):
    """KIP-74: a batch larger than the fetch limits is still returned, so the consumer
    makes progress instead of stalling."""
    topic = "cfk-tiny-fetch"
    create_topic(broker.bootstrap, topic, client=CFK)
    sent = make_records(3000, base_timestamp(), seed=5)
    produce(broker.bootstrap, topic, sent, client=CFK, codec="gzip", acks=1)
    limits = {
        "fetch.max.bytes": 1024,
        "message.max.bytes": 1024,  # librdkafka wants fetch.max.bytes >= this
        "max.partition.fetch.bytes": 512,
    }
    assert_records_match(sent, consume(broker.bootstrap, topic, len(sent), client=CFK, conf=limits))


def test_waiting_fetch_is_woken_by_produce(broker):
    """A consumer at the log end long-polls (fetch.wait.max.ms=10s); a produce must
    answer it at once rather than when the wait expires."""
    topic = "cfk-long-poll"
    create_topic(broker.bootstrap, topic, client=CFK)
    c: Consumer = new_consumer(broker.bootstrap, client=CFK, conf={"fetch.wait.max.ms": 10_000})
    try:
        c.assign([CTopicPartition(topic, 0, 0)])
        assert c.consume(1, 1.0) == []  # the consumer is now parked in a fetch
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "log_level": 0})
        p.produce(topic, value=b"wake up", partition=0)
        assert p.flush(10) == 0
        sent_at = time.monotonic()
        msgs = []
        while not msgs and time.monotonic() - sent_at < 9:
            msgs = [m for m in c.consume(1, 0.1) if not m.error()]
        latency = time.monotonic() - sent_at
    finally:
        c.close()
    assert [m.value() for m in msgs] == [b"wake up"]
    assert latency < 3, f"the waiting fetch answered after {latency:.1f}s"


def test_batch_larger_than_topic_max_message_bytes_is_rejected(broker):
    topic = "cfk-small-max"
    create_topic(broker.bootstrap, topic, configs={"max.message.bytes": "2048"}, client=CFK)
    errors: list = []
    delivered = produce(broker.bootstrap, topic, [Rec(b"k", b"x" * 8192, (), base_timestamp())],
                        client=CFK, acks=1, errors=errors)  # fmt: skip
    assert delivered == []
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    # Smaller records still go in, and nothing of the rejected batch was stored.
    small = make_records(5, base_timestamp(), headers=False)
    delivered = produce(broker.bootstrap, topic, small, client=CFK, acks=1)
    assert [d.offset for d in delivered] == list(range(5))
    assert_records_match(small, consume(broker.bootstrap, topic, 5, client=CFK))
