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
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from .clients import (
    ACKS_BY_CODEC,
    CODECS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    RECORDS_PER_CODEC,
    ROUNDTRIP_TOPIC_CONFIG,
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

TS_TYPES = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}


# -- client helpers --------------------------------------------------------------------


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def create_topic(
    admin: AdminClient, name: str, partitions: int = 1, config: dict | None = None
) -> None:
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[name].result(15)


def produce(
    bootstrap: str,
    topic: str,
    records: list[Rec],
    *,
    codec: str = "none",
    acks: int = 1,
    batch_per_record: bool = False,
    extra: dict | None = None,
    errors: list | None = None,
) -> list:
    """Send ``records`` to partition 0; returns the delivered messages in send order.

    Delivery errors fail the call unless an ``errors`` list is given to collect them."""
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "acks": acks,
        "linger.ms": 0 if batch_per_record else 5,
        "log_level": 0,
    }
    conf.update(extra or {})
    p = Producer(conf)
    delivered: list = []
    expect_errors = errors is not None
    errors = [] if errors is None else errors

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    for r in records:
        while True:
            try:
                p.produce(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    timestamp=r.timestamp,
                    partition=0,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if batch_per_record:
            assert p.flush(10) == 0
    assert p.flush(30) == 0, "messages still queued after 30s"
    if not expect_errors:
        assert not errors, f"{len(errors)} delivery errors, first: {errors[0]}"
        assert len(delivered) == len(records)
    return delivered


def new_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidegate-integration",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "log_level": 0,
        }
    )


def to_got(m) -> Got:
    ts_type, ts = m.timestamp()
    return Got(
        m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts, TS_TYPES.get(ts_type, -1)
    )


def consume(
    bootstrap: str, topic: str, count: int, start: int = 0, timeout: float = 30.0
) -> list[Got]:
    c = new_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, start)])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                got.append(to_got(m))
        # Nothing beyond what was produced.
        extra = [m for m in c.consume(10, 0.2) if not m.error()]
        assert not extra, f"unexpected record at offset {extra[0].offset()}"
        return got
    finally:
        c.close()


def list_offset(admin: AdminClient, topic: str, spec) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)
    return info.offset, info.timestamp


def check_list_offsets(bootstrap: str, topic: str, sent: list[Rec], *, exact: bool = False) -> None:
    n = len(sent)
    admin = admin_client(bootstrap)
    assert list_offset(admin, topic, OffsetSpec.earliest())[0] == 0
    assert list_offset(admin, topic, OffsetSpec.latest())[0] == n
    c = new_consumer(bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, n)
        for q in timestamp_queries(sent) + [sent[-1].timestamp + 1]:
            offset, ts = list_offset(admin, topic, OffsetSpec.for_timestamp(q))
            check_offset_for_time(sent, q, offset, ts, exact=exact)
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, q)], timeout=10)
            assert tp.error is None
            check_offset_for_time(sent, q, tp.offset, exact=exact)
    finally:
        c.close()


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"cfk-{codec}"
    create_topic(admin_client(broker.bootstrap), topic, config=ROUNDTRIP_TOPIC_CONFIG)
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]
    delivered = produce(broker.bootstrap, topic, sent, codec=codec, acks=acks)
    if acks != 0:
        # The produce response's base offset gives each message its offset.
        assert [m.offset() for m in delivered] == list(range(len(sent)))
        assert all(
            m.timestamp() == (TIMESTAMP_CREATE_TIME, r.timestamp) for m, r in zip(delivered, sent)
        )

    got = consume(broker.bootstrap, topic, len(sent))
    assert_records_match(sent, got)
    check_list_offsets(broker.bootstrap, topic, sent)

    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()
    assert consume(broker.bootstrap, topic, len(sent)) == got
    # Seeking into the middle of the log after recovery lands on the exact record.
    middle = len(sent) // 2 + 17
    assert consume(broker.bootstrap, topic, len(sent) - middle, start=middle) == got[middle:]
    check_list_offsets(broker.bootstrap, topic, sent)


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "cfk-times"
    create_topic(admin_client(broker.bootstrap), topic)
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)
    produce(broker.bootstrap, topic, sent, acks=-1, batch_per_record=True)
    check_list_offsets(broker.bootstrap, topic, sent, exact=True)
    for i in (0, 1, 13, 29):
        q = sent[i].timestamp - 5  # between record i-1 and record i
        offset, ts = list_offset(admin_client(broker.bootstrap), topic, OffsetSpec.for_timestamp(q))
        assert (offset, ts) == (i, sent[i].timestamp)
    offset, ts = list_offset(admin_client(broker.bootstrap), topic, OffsetSpec.max_timestamp())
    assert (offset, ts) == (29, sent[29].timestamp)


def test_log_append_time_topic(broker):
    topic = "cfk-lat"
    admin = admin_client(broker.bootstrap)
    create_topic(admin, topic, config={"message.timestamp.type": "LogAppendTime"})
    sent = make_records(2000, base_timestamp() - 86_400_000)
    before = int(time.time() * 1000)
    delivered = produce(broker.bootstrap, topic, sent, codec="lz4", acks=1)
    after = int(time.time() * 1000)
    for m in delivered:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before <= ts <= after

    got = consume(broker.bootstrap, topic, len(sent))
    assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
    for g, r in zip(got, sent):
        assert before <= g.timestamp <= after, (
            f"offset {g.offset}: {g.timestamp} not in [{before}, {after}]"
        )
        assert g.timestamp != r.timestamp
    # Lookups by time use the append times, not the producer's CreateTime.
    assert list_offset(admin, topic, OffsetSpec.for_timestamp(sent[-1].timestamp))[0] == 0
    assert list_offset(admin, topic, OffsetSpec.for_timestamp(after + 60_000))[0] == -1


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=10).topics)


def topic_id(admin: AdminClient, name: str):
    return str(
        admin.describe_topics(TopicCollection([name]), request_timeout=10)[name].result(10).topic_id
    )


def test_delete_topic_then_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    admin = admin_client(b.bootstrap)
    create_topic(admin, "cfk-keep")
    create_topic(admin, "cfk-drop")
    keep = make_records(3000, base_timestamp(), seed=1)
    produce(b.bootstrap, "cfk-keep", keep, codec="zstd", acks=-1)
    produce(b.bootstrap, "cfk-drop", make_records(500, base_timestamp(), seed=2), acks=1)
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
    produce(
        b.bootstrap,
        "cfk-drop",
        keep[:1],
        extra={"topic.metadata.propagation.max.ms": 100},
        errors=errors,
    )
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics(["cfk-drop"], operation_timeout=10)["cfk-drop"].result(10)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    got = consume(b.bootstrap, "cfk-keep", len(keep))
    assert_records_match(keep, got)
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap)
    assert "cfk-drop" not in topic_names(admin)
    assert topic_id(admin, "cfk-keep") == keep_id
    assert consume(b.bootstrap, "cfk-keep", len(keep)) == got

    # Re-creating the deleted name gives a new, empty topic: none of the old data returns.
    create_topic(admin, "cfk-drop")
    assert topic_id(admin, "cfk-drop") != drop_id
    assert list_offset(admin, "cfk-drop", OffsetSpec.latest())[0] == 0
    assert b.stop() == 0
    b.start()
    admin = admin_client(b.bootstrap)
    assert list_offset(admin, "cfk-drop", OffsetSpec.latest())[0] == 0
    assert consume(b.bootstrap, "cfk-keep", len(keep)) == got


def test_consume_with_fetch_limits_smaller_than_a_batch(broker):
    """KIP-74: a batch larger than the fetch limits is still returned, so the consumer
    makes progress instead of stalling."""
    topic = "cfk-tiny-fetch"
    create_topic(admin_client(broker.bootstrap), topic)
    sent = make_records(3000, base_timestamp(), seed=5)
    produce(broker.bootstrap, topic, sent, codec="gzip", acks=1)
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "tidegate-integration",
            "enable.auto.commit": False,
            "fetch.max.bytes": 1024,
            "message.max.bytes": 1024,  # librdkafka wants fetch.max.bytes >= this
            "max.partition.fetch.bytes": 512,
            "log_level": 0,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Got] = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            got.extend(to_got(m) for m in c.consume(1000, 0.5) if not m.error())
    finally:
        c.close()
    assert_records_match(sent, got)


def test_waiting_fetch_is_woken_by_produce(broker):
    """A consumer at the log end long-polls (fetch.wait.max.ms=10s); a produce must
    answer it at once rather than when the wait expires."""
    topic = "cfk-long-poll"
    create_topic(admin_client(broker.bootstrap), topic)
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "tidegate-integration",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10_000,
            "log_level": 0,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
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
    create_topic(admin_client(broker.bootstrap), topic, config={"max.message.bytes": "2048"})
    errors: list = []
    produce(broker.bootstrap, topic, [Rec(b"k", b"x" * 8192, (), base_timestamp())], errors=errors)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    # Smaller records still go in, and nothing of the rejected batch was stored.
    small = make_records(5, base_timestamp(), headers=False)
    delivered = produce(broker.bootstrap, topic, small)
    assert [m.offset() for m in delivered] == list(range(5))
    assert_records_match(small, consume(broker.bootstrap, topic, 5))
