"""aiokafka (asyncio client) against a real tidegate process.

Same checks as the confluent-kafka module, through AIOKafkaAdminClient,
AIOKafkaProducer (with its defaults) and AIOKafkaConsumer with assign+seek. Each
test drives its own event loop with asyncio.run, so no asyncio pytest plugin is
needed.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnknownTopicOrPartitionError

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


def run(coro, timeout: float = 90.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


# -- client helpers (coroutines) -------------------------------------------------------


class Admin:
    def __init__(self, bootstrap: str) -> None:
        self.client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)

    async def __aenter__(self) -> AIOKafkaAdminClient:
        await self.client.start()
        return self.client

    async def __aexit__(self, *exc) -> None:
        await self.client.close()


async def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None
) -> None:
    async with Admin(bootstrap) as admin:
        resp = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})]
        )
        assert [(t[0], t[1]) for t in resp.topic_errors] == [(name, 0)]


async def produce(
    bootstrap: str,
    topic: str,
    records: list[Rec],
    *,
    codec: str = "none",
    acks=1,
    batch_per_record=False,
) -> list:
    """Send ``records`` to partition 0; returns the RecordMetadata of each, in send order."""
    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all" if acks == -1 else acks,
        linger_ms=0 if batch_per_record else 5,
    )
    await p.start()
    try:
        futures = []
        for r in records:
            fut = await p.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
                partition=0,
            )
            if batch_per_record:
                await fut
            futures.append(fut)
        return list(await asyncio.gather(*futures))
    finally:
        await p.stop()


async def consume(
    bootstrap: str, topic: str, count: int, start: int = 0, timeout: float = 30.0
) -> list[Got]:
    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
    )
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            batches = await c.getmany(timeout_ms=500, max_records=5000)
            for recs in batches.values():
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
        extra = [r for recs in (await c.getmany(timeout_ms=200)).values() for r in recs]
        assert not extra, f"unexpected record at offset {extra[0].offset}"
        return got
    finally:
        await c.stop()


async def check_list_offsets(
    bootstrap: str, topic: str, sent: list[Rec], *, exact: bool = False
) -> None:
    n = len(sent)
    tp = TopicPartition(topic, 0)
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await c.start()
    try:
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: n}
        for q in timestamp_queries(sent) + [sent[-1].timestamp + 1]:
            found = (await c.offsets_for_times({tp: q}))[tp]
            if found is None:
                check_offset_for_time(sent, q, None, exact=exact)
            else:
                check_offset_for_time(sent, q, found.offset, found.timestamp, exact=exact)
    finally:
        await c.stop()


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_field_then_restart(broker, codec):
    topic = f"aio-{codec}"
    sent = make_records(RECORDS_PER_CODEC, base_timestamp(), seed=200 + CODECS.index(codec))
    acks = ACKS_BY_CODEC[codec]

    async def first_run() -> list[Got]:
        await create_topic(broker.bootstrap, topic, configs=ROUNDTRIP_TOPIC_CONFIG)
        metas = await produce(broker.bootstrap, topic, sent, codec=codec, acks=acks)
        if acks != 0:
            assert [m.offset for m in metas] == list(range(len(sent)))
            # (RecordMetadata.timestamp is not checked: aiokafka 0.14 reports the batch's
            # first CreateTime for every record of a batch.)
            assert {m.timestamp_type for m in metas} == {0}
        got = await consume(broker.bootstrap, topic, len(sent))
        assert_records_match(sent, got)
        await check_list_offsets(broker.bootstrap, topic, sent)
        return got

    got = run(first_run())
    assert segment_count(broker.data_dir, topic) > 1, "10,000 records should span several segments"
    assert broker.stop() == 0
    broker.start()

    async def after_restart() -> None:
        assert await consume(broker.bootstrap, topic, len(sent)) == got
        await check_list_offsets(broker.bootstrap, topic, sent)

    run(after_restart())


def test_offsets_for_times_exact_with_one_record_per_batch(broker):
    topic = "aio-times"
    sent = make_records(30, base_timestamp(), ts_step=lambda i: 10 * i)

    async def body() -> None:
        await create_topic(broker.bootstrap, topic)
        metas = await produce(broker.bootstrap, topic, sent, acks=-1, batch_per_record=True)
        assert [m.offset for m in metas] == list(range(30))
        await check_list_offsets(broker.bootstrap, topic, sent, exact=True)

    run(body())


def test_log_append_time_topic(broker):
    topic = "aio-lat"
    sent = make_records(2000, base_timestamp() - 86_400_000)

    async def body() -> None:
        await create_topic(
            broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"}
        )
        before = int(time.time() * 1000)
        metas = await produce(broker.bootstrap, topic, sent, codec="zstd", acks=1)
        after = int(time.time() * 1000)
        assert all(before <= m.timestamp <= after for m in metas)
        assert {m.timestamp_type for m in metas} == {LOG_APPEND_TIME}

        got = await consume(broker.bootstrap, topic, len(sent))
        assert_records_match(sent, got, timestamp_type=LOG_APPEND_TIME, check_timestamps=False)
        for g, r in zip(got, sent):
            assert before <= g.timestamp <= after, f"offset {g.offset}: {g.timestamp} not in window"
            assert g.timestamp != r.timestamp
        assert {g.timestamp for g in got} == {m.timestamp for m in metas}

    run(body())


def test_delete_topic_then_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    keep = make_records(3000, base_timestamp(), seed=21)

    async def before_restart() -> list[Got]:
        await create_topic(b.bootstrap, "aio-keep")
        await create_topic(b.bootstrap, "aio-drop")
        await produce(b.bootstrap, "aio-keep", keep, codec="gzip", acks=-1)
        await produce(b.bootstrap, "aio-drop", keep[:100], acks=1)
        async with Admin(b.bootstrap) as admin:
            resp = await admin.delete_topics(["aio-drop"])
            assert [tuple(t)[:2] for t in resp.topic_error_codes] == [("aio-drop", 0)]
            assert "aio-drop" not in await admin.list_topics()
            [desc] = await admin.describe_topics(["aio-drop"])
            assert desc["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
            resp = await admin.delete_topics(["aio-drop"])
            assert [tuple(t)[:2] for t in resp.topic_error_codes] == [
                ("aio-drop", UNKNOWN_TOPIC_OR_PARTITION)
            ]
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, request_timeout_ms=1500)
        await p.start()
        try:
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send_and_wait("aio-drop", b"after", partition=0)
        finally:
            await p.stop()
        got = await consume(b.bootstrap, "aio-keep", len(keep))
        assert_records_match(keep, got)
        return got

    got = run(before_restart())
    assert b.stop() == 0
    b.start()

    async def after_restart() -> None:
        async with Admin(b.bootstrap) as admin:
            assert "aio-drop" not in await admin.list_topics()
        assert await consume(b.bootstrap, "aio-keep", len(keep)) == got
        await create_topic(b.bootstrap, "aio-drop")
        assert await consume(b.bootstrap, "aio-drop", 0) == []

    run(after_restart())
