"""aiokafka (asyncio client) against a real tidegate process.

Same checks as the confluent-kafka module, through AIOKafkaAdminClient,
AIOKafkaProducer (with its defaults) and AIOKafkaConsumer with assign+seek. The
helpers of ``clients.py`` drive each on an event loop of their own (asyncio.run), so
no asyncio pytest plugin is needed.
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError

from .clients import (
    ACKS_BY_CODEC,
    CODECS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    RECORDS_PER_CODEC,
    ROUNDTRIP_TOPIC_CONFIG,
    UNKNOWN_TOPIC_OR_PARTITION,
    assert_records_match,
    base_timestamp,
    check_list_offsets,
    consume,
    create_topic,
    make_records,
    produce,
    run_async,
    segment_count,
)

pytestmark = pytest.mark.timeout(120)

AIO = "aiokafka"


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"aio-{codec}"
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=200 + CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]
    create_topic(broker.bootstrap, topic, configs=ROUNDTRIP_TOPIC_CONFIG, client=AIO)
    metas = produce(broker.bootstrap, topic, sent, client=AIO, codec=codec, acks=acks)
    if acks != 0:
        assert [m.offset for m in metas] == list(range(len(sent)))
        # (RecordMetadata.timestamp is not checked: aiokafka 0.14 reports the batch's
        # first CreateTime for every record of a batch.)
        assert {m.timestamp_type for m in metas} == {CREATE_TIME}
    got = consume(broker.bootstrap, topic, len(sent), client=AIO)
    assert_records_match(sent, got)
    check_list_offsets(broker.bootstrap, topic, sent, client=AIO)

    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()
    assert consume(broker.bootstrap, topic, len(sent), client=AIO) == got
    check_list_offsets(broker.bootstrap, topic, sent, client=AIO)


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "aio-times"
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)
    create_topic(broker.bootstrap, topic, client=AIO)
    metas = produce(broker.bootstrap, topic, sent, client=AIO, acks=-1, linger_ms=0, flush_every=1)
    assert [m.offset for m in metas] == list(range(30))
    check_list_offsets(broker.bootstrap, topic, sent, client=AIO)


def test_log_append_time_topic(broker):
    topic = "aio-lat"
    sent = make_records(2000, base_timestamp() - 86_400_000)
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"},
                 client=AIO)  # fmt: skip
    before = int(time.time() * 1000)
    metas = produce(broker.bootstrap, topic, sent, client=AIO, codec="zstd", acks=1)
    after = int(time.time() * 1000)
    assert all(before <= m.timestamp <= after for m in metas)
    assert {m.timestamp_type for m in metas} == {LOG_APPEND_TIME}

    got = consume(broker.bootstrap, topic, len(sent), client=AIO)
    assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
    for g, r in zip(got, sent):
        assert before <= g.timestamp <= after, f"offset {g.offset}: {g.timestamp} not in window"
        assert g.timestamp != r.timestamp
    assert {g.timestamp for g in got} == {m.timestamp for m in metas}


def test_delete_topic_then_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    keep = make_records(3000, base_timestamp(), seed=21)
    create_topic(b.bootstrap, "aio-keep", client=AIO)
    create_topic(b.bootstrap, "aio-drop", client=AIO)
    produce(b.bootstrap, "aio-keep", keep, client=AIO, codec="gzip", acks=-1)
    produce(b.bootstrap, "aio-drop", keep[:100], client=AIO, acks=1)

    async def delete_drop() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            resp = await admin.delete_topics(["aio-drop"])
            assert [tuple(t)[:2] for t in resp.topic_error_codes] == [("aio-drop", 0)]
            assert "aio-drop" not in await admin.list_topics()
            [desc] = await admin.describe_topics(["aio-drop"])
            assert desc["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
            resp = await admin.delete_topics(["aio-drop"])
            assert [tuple(t)[:2] for t in resp.topic_error_codes] == [
                ("aio-drop", UNKNOWN_TOPIC_OR_PARTITION)
            ]
        finally:
            await admin.close()
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, request_timeout_ms=1500)
        await p.start()
        try:
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send_and_wait("aio-drop", b"after", partition=0)
        finally:
            await p.stop()

    run_async(delete_drop())
    got = consume(b.bootstrap, "aio-keep", len(keep), client=AIO)
    assert_records_match(keep, got)
    assert b.stop() == 0
    b.start()

    async def drop_is_gone() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            assert "aio-drop" not in await admin.list_topics()
        finally:
            await admin.close()

    run_async(drop_is_gone())
    assert consume(b.bootstrap, "aio-keep", len(keep), client=AIO) == got
    create_topic(b.bootstrap, "aio-drop", client=AIO)
    assert consume(b.bootstrap, "aio-drop", 0, client=AIO) == []
