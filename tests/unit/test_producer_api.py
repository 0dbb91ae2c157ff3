"""Producer API without a broker: configuration, and errors that reach the caller
through the future and the delivery callback (never raised from send)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.fake_broker import FakeBroker as _FakeBroker
from tidegate.client.errors import KafkaError, KafkaTimeoutError
from tidegate.client.metadata import BrokerNode, Cluster, PartitionInfo, TopicMetadata
from tidegate.producer import (
    BufferExhaustedError,
    ConfigError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    RecordTooLargeError,
)


def dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def unreachable_producer(**conf) -> Producer:
    """A producer whose metadata names a broker nobody listens on: batches are
    accepted and pile up, nothing is ever sent."""
    port = dead_port()
    base = {"bootstrap.servers": f"127.0.0.1:{port}", "reconnect.backoff.max.ms": 200}
    base.update(conf)
    p = Producer(base)
    parts = tuple(PartitionInfo("t", i, 1) for i in range(8))
    cluster = Cluster({1: BrokerNode(1, "127.0.0.1", port)}, {"t": TopicMetadata("t", 0, parts)})
    p._client.update_cluster(cluster)
    p._metadata.update(cluster, p.clock.milliseconds())
    return p


# -- configuration ------------------------------------------------------------------------


def test_config_defaults_are_kafkas():
    c = ProducerConfig.from_dict({"bootstrap.servers": "h:1"})
    assert (c.acks, c.batch_size, c.linger_ms, c.buffer_memory) == (-1, 16384, 5, 33554432)
    assert (c.max_block_ms, c.max_request_size, c.delivery_timeout_ms) == (60000, 1048576, 120000)
    assert c.buffer_memory_allocation_strategy == "full"
    assert c.enable_idempotence and not c.enable_idempotence_explicit


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"no.such.key": 1}, "unknown producer config 'no.such.key'"),
        ({"acks": "2"}, "acks"),
        ({"buffer.memory.allocation.strategy": "lazy"}, "full or incremental"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"transactional.id": ""}, "transactional.id"),
        (
            {"transactional.id": "tx", "enable.idempotence": False},
            "Cannot set a transactional.id without also enabling idempotence",
        ),
        # idempotence off by default because of acks: Kafka's ConfigException too
        (
            {"transactional.id": "tx", "acks": 1},
            "Cannot set a transactional.id without also enabling idempotence",
        ),
        ({"transactional.id": "tx", "enable.idempotence": True, "acks": 1}, "acks must be all"),
        ({"transaction.timeout.ms": 0}, "transaction.timeout.ms"),
        ({"delivery.timeout.ms": 100}, "delivery.timeout.ms should be"),
        ({"enable.idempotence": True, "acks": 1}, "acks must be all"),
        (
            {"enable.idempotence": "true", "max.in.flight.requests.per.connection": 6},
            "max.in.flight",
        ),
    ],
)
def test_config_errors_name_the_key(conf, message):
    with pytest.raises(ConfigError, match=message):
        ProducerConfig.from_dict({"bootstrap.servers": "h:1", **conf})


def test_transactional_id_and_transaction_timeout_are_kafkas():
    c = ProducerConfig.from_dict({"bootstrap.servers": "h:1"})
    assert c.transactional_id is None and c.transaction_timeout_ms == 60000
    c = ProducerConfig.from_dict(
        {"bootstrap.servers": "h:1", "transactional.id": "tx", "transaction.timeout.ms": 5000}
    )
    assert c.transactional and c.transactional_id == "tx" and c.transaction_timeout_ms == 5000
    assert c.enable_idempotence
    # None is the default: not transactional
    assert not ProducerConfig.from_dict(
        {"bootstrap.servers": "h:1", "transactional.id": None}
    ).transactional


def test_idempotence_quietly_off_when_other_settings_rule_it_out():
    c = ProducerConfig.from_dict({"bootstrap.servers": "h:1", "acks": "1"})
    assert not c.enable_idempotence
    c = ProducerConfig.from_dict(
        {"bootstrap.servers": "h:1", "max.in.flight.requests.per.connection": 10}
    )
    assert not c.enable_idempotence


def test_strategy_is_case_insensitive_and_delivery_timeout_is_raised():
    c = ProducerConfig.from_dict(
        {
            "bootstrap.servers": "h:1",
            "buffer.memory.allocation.strategy": "INCREMENTAL",
            "request.timeout.ms": 200_000,
        }
    )
    assert c.strategy_incremental
    assert c.delivery_timeout_ms == 200_005  # linger.ms + request.timeout.ms


# -- errors through the future ------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_buffer_exhausted_is_delivered_through_future_and_callback(strategy):
    p = unreachable_producer(
        **{
            "batch.size": 1024,
            "buffer.memory": 4096,
            "max.block.ms": 50,
            "buffer.memory.allocation.strategy": strategy,
            "enable.idempotence": False,
        }
    )
    try:
        delivered = []
        futs = []
        for part in range(5):
            futs.append(
                p.send(
                    "t",
                    b"x" * 100,
                    partition=part,
                    on_delivery=lambda md, err: delivered.append((md, err)),
                )
            )
        t0 = time.monotonic()
        assert not any(f.done() for f in futs[:4])  # four batches hold the 4 KiB
        assert futs[4].done()
        assert time.monotonic() - t0 < 1
        with pytest.raises(BufferExhaustedError):
            futs[4].result(0)
        assert isinstance(futs[4].exception(), BufferExhaustedError)
        assert len(delivered) == 1
        md, err = delivered[0]
        assert md is None and isinstance(err, BufferExhaustedError)
        m = p.metrics()
        assert m["buffer-exhausted-total"] == 1
        assert m["bufferpool-wait-time-ns-total"] >= 40_000_000
        assert m["waiting-threads"] == 0
    finally:
        p.close(0)
    # close(0) fails what was queued
    for f in futs[:4]:
        assert isinstance(f.exception(1), ProducerClosedError)


def test_record_too_large_is_delivered_through_the_future():
    p = unreachable_producer(**{"max.request.size": 1000, "enable.idempotence": False})
    try:
        f = p.send("t", b"x" * 2000, partition=0)
        with pytest.raises(RecordTooLargeError, match="max.request.size"):
            f.result(0)
        f = p.send("t", b"x" * 900, headers={"big": b"y" * 200}, partition=0)
        assert isinstance(f.exception(0), RecordTooLargeError)
    finally:
        p.close(0)


def test_unknown_topic_times_out_through_the_future():
    p = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{dead_port()}",
            "max.block.ms": 100,
            "reconnect.backoff.max.ms": 50,
        }
    )
    try:
        t0 = time.monotonic()
        f = p.send("missing", b"v")
        assert time.monotonic() - t0 < 2
        with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
            f.result(0)
    finally:
        p.close(0)


def test_invalid_partition_is_reported_through_the_future():
    p = unreachable_producer(**{"enable.idempotence": False, "max.block.ms": 50})
    try:
        f = p.send("t", b"v", partition=99)
        assert f.done()
        err = f.exception()
        assert type(err) is KafkaError  # not retriable, not a timeout
        assert str(err) == "Invalid partition given with record: 99 is not in the range [0...8)."
    finally:
        p.close(0)


def test_send_after_close_raises_and_types_are_checked():
    p = unreachable_producer(**{"enable.idempotence": False})
    with pytest.raises(TypeError):
        p.send("t", 12345, partition=0)
    with pytest.raises(TypeError):
        p.send("t", b"v", headers=[(b"bytes-key", b"v")], partition=0)
    f = p.send("t", "text value", key="text key", headers={"h": "v"}, partition=0)
    assert not f.done()
    p.close(0)
    with pytest.raises(ProducerClosedError):
        p.send("t", b"v", partition=0)
    assert isinstance(f.exception(1), ProducerClosedError)


def test_close_with_timeout_gives_up_and_fails_queued_records():
    p = unreachable_producer(**{"enable.idempotence": False})
    f = p.send("t", b"v", partition=1)
    t0 = time.monotonic()
    p.close(0.2)
    assert time.monotonic() - t0 < 3
    assert isinstance(f.exception(1), ProducerClosedError)
    assert not any(
        t.name.startswith("tidegate-producer-network-thread") and t.is_alive() and t is p._sender
        for t in threading.enumerate()
    )


def test_flush_with_timeout_returns_the_records_left():
    p = unreachable_producer(**{"enable.idempotence": False})
    try:
        for _ in range(3):
            p.send("t", b"v", partition=2)
        assert p.flush(0.05) == 3
    finally:
        p.close(0)


def test_user_partitioner_callable_and_round_robin():
    seen = []

    def by_length(topic, key, num_partitions, available):
        seen.append((topic, num_partitions, tuple(available)))
        return len(key) % num_partitions

    p = unreachable_producer(**{"enable.idempotence": False, "partitioner.class": by_length})
    try:
        f = p.send("t", b"v", key=b"abc")
        assert f.partition == 3
        assert seen == [("t", 8, tuple(range(8)))]
    finally:
        p.close(0)
    p = unreachable_producer(**{"enable.idempotence": False, "partitioner.class": "round_robin"})
    try:
        assert [p.send("t", b"v", key=b"same").partition for _ in range(10)] == [
            0,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            0,
            1,
        ]
    finally:
        p.close(0)


def test_keyed_records_use_murmur2_and_keyless_stick():
    from tidegate.producer.partitioner import partition_for_key

    p = unreachable_producer(**{"enable.idempotence": False})
    try:
        for i in range(50):
            key = b"key-%d" % i
            assert p.send("t", b"v", key=key).partition == partition_for_key(key, 8)
        keyless = {p.send("t", b"v").partition for _ in range(20)}
        assert len(keyless) == 1  # 20 small records stay on one partition
        ignore = unreachable_producer(
            **{"enable.idempotence": False, "partitioner.ignore.keys": True}
        )
        try:
            assert len({ignore.send("t", b"v", key=b"k%d" % i).partition for i in range(20)}) == 1
        finally:
            ignore.close(0)
    finally:
        p.close(0)


# -- idempotence negotiation against a fake broker -------------------------------------------


def test_idempotence_off_with_a_warning_when_the_broker_lacks_init_producer_id(caplog):
    fb = _FakeBroker(init_producer_id=False)
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{fb.port}"})
        try:
            md = p.send("t", b"v").result(10)
            assert md.offset == 0
            assert p.idempotent is False
            assert "does not support InitProducerId" in caplog.text
            (req,) = fb.produce_requests
            # no producer id in the batch: bytes 43..51 of the header are -1
            records = req.topic_data[0].partition_data[0].records
            assert records[43:51] == b"\xff" * 8
        finally:
            p.close(5)
    finally:
        fb.close()


def test_explicit_idempotence_fails_clearly_without_init_producer_id():
    from tidegate.producer import IdempotenceUnsupportedError

    fb = _FakeBroker(init_producer_id=False)
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{fb.port}", "enable.idempotence": True})
        try:
            # the first record fails through its future, or, if the sender already
            # knows, send raises: either way the error names the missing API
            try:
                err = p.send("t", b"v").exception(10)
            except IdempotenceUnsupportedError as exc:
                err = exc
            assert isinstance(err, IdempotenceUnsupportedError), err
            assert "InitProducerId" in str(err)
            with pytest.raises(IdempotenceUnsupportedError):
                p.send("t", b"v")
            assert fb.produce_requests == []
        finally:
            p.close(5)
    finally:
        fb.close()


def test_idempotent_batches_carry_producer_id_and_sequences():
    import struct

    fb = _FakeBroker(init_producer_id=True)
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{fb.port}", "linger.ms": 0})
        try:
            for i in range(3):
                p.send("t", b"v%d" % i).result(10)
            assert p.idempotent is True and p.producer_id == 4242
            seqs = []
            for req in fb.produce_requests:
                rec = req.topic_data[0].partition_data[0].records
                pid, epoch, seq, count = struct.unpack_from(">qhii", rec, 43)
                assert (pid, epoch) == (4242, 0)
                seqs.append((seq, count))
            # each batch starts where the previous one ended
            expected = 0
            for seq, count in seqs:
                assert seq == expected
                expected += count
        finally:
            p.close(5)
    finally:
        fb.close()


def test_asyncio_producer_against_the_fake_broker():
    import asyncio

    from tidegate.producer import AIOProducer

    fb = _FakeBroker(init_producer_id=False)

    async def main():
        async with AIOProducer(
            {"bootstrap.servers": f"127.0.0.1:{fb.port}", "enable.idempotence": False}
        ) as p:
            md = await p.send_and_wait("t", b"v", key=b"k")
            assert (md.topic, md.partition, md.offset) == ("t", 0, 0)
            futs = [await p.send("t", b"x%d" % i) for i in range(10)]
            assert await p.flush(5) == 0
            for f in futs:
                assert isinstance(f, asyncio.Future) and (await f).partition == 0

    try:
        asyncio.run(main())
    finally:
        fb.close()


@pytest.mark.parametrize("strategy", ["full", "incremental"])
def test_batch_or_chunks_larger_than_the_pool_fail_through_the_future(strategy):
    # full: batch.size above buffer.memory; incremental: a record whose chunks round up
    # past buffer.memory
    conf = {
        "enable.idempotence": False,
        "buffer.memory.allocation.strategy": strategy,
        "max.request.size": 1 << 20,
    }
    if strategy == "full":
        conf.update({"batch.size": 8192, "buffer.memory": 4096})
        value = b"x" * 10
    else:
        conf.update({"batch.size": 1000, "buffer.memory": 2500})
        value = b"x" * 2300  # 61 + ~2330 bytes fit in 2500, three 1000-byte chunks do not
    p = unreachable_producer(**conf)
    try:
        f = p.send("t", value, partition=0)
        assert isinstance(f.exception(0), RecordTooLargeError)
    finally:
        p.close(0)


def test_retriable_error_is_retried_after_a_metadata_refresh():
    fb = _FakeBroker(produce_errors=[6, 6])  # NOT_LEADER_OR_FOLLOWER twice, then success
    try:
        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{fb.port}",
                "enable.idempotence": False,
                "retry.backoff.ms": 10,
            }
        )
        try:
            md = p.send("t", b"v").result(10)
            assert md.offset == 0
            assert len(fb.produce_requests) == 3
            # each NOT_LEADER made the producer ask for metadata again before retrying
            produce_at = [i for i, k in enumerate(fb.requests) if k == 0]
            assert any(k == 3 for k in fb.requests[produce_at[0] : produce_at[1]])
        finally:
            p.close(5)
    finally:
        fb.close()


def test_a_partition_whose_leader_left_the_metadata_is_asked_for_again_at_once():
    """A Metadata answer naming a leader missing from its brokers (librdkafka's mock
    cluster answers so while that broker is down): the producer asks again after
    retry.backoff.ms, not after metadata.max.age.ms (it used to sleep until then)."""
    fb = _FakeBroker()
    answers = []

    def metadata(version, req):
        answers.append(version)
        leader = 8 if len(answers) == 1 else 7  # the first answer: a leader it does not list
        return {"brokers": [{"node_id": 7, "host": "127.0.0.1", "port": fb.port}], "controller_id": 7,
                "topics": [{"error_code": 0, "name": "t", "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": leader, "replica_nodes": [7],
                     "isr_nodes": [7]}]}]}  # fmt: skip

    fb.handlers[3] = metadata
    try:
        p = Producer({"bootstrap.servers": fb.bootstrap, "enable.idempotence": False, "retry.backoff.ms": 10})
        try:
            assert p.send("t", b"v", partition=0).result(5).offset == 0
            assert len(answers) >= 2
        finally:
            p.close(5)
    finally:
        fb.close()


def test_non_retriable_error_fails_the_record():
    fb = _FakeBroker(produce_errors=[87])  # INVALID_RECORD
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{fb.port}", "enable.idempotence": False})
        try:
            err = p.send("t", b"v").exception(10)
            assert err is not None and getattr(err, "code", None) == 87
            assert len(fb.produce_requests) == 1
        finally:
            p.close(5)
    finally:
        fb.close()


def test_retries_stop_at_the_retries_setting():
    fb = _FakeBroker(produce_errors=[6] * 10)
    try:
        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{fb.port}",
                "enable.idempotence": False,
                "retries": 2,
                "retry.backoff.ms": 5,
            }
        )
        try:
            err = p.send("t", b"v").exception(10)
            assert getattr(err, "code", None) == 6
            assert len(fb.produce_requests) == 3  # the first attempt and two retries
        finally:
            p.close(5)
    finally:
        fb.close()
