"""The rest of the admin protocol through the three Python clients, against a real
tidegate process: DeleteRecords (and its durability across a restart and kill -9),
leader epochs (consumers validating their positions with OffsetForLeaderEpoch after a
leader epoch change, and detecting a truncation), DescribeLogDirs and
AlterReplicaLogDirs, DescribeTopicPartitions (KIP-966) and the describe-topics calls,
ListOffsets exact inside a batch, internal topics in Metadata, DescribeProducers,
ElectLeaders, partition reassignments, DescribeQuorum, and what kafka-python infers from
ApiVersions.

A single node never changes a partition's leader epoch; the epoch tests stop the broker
and start a new epoch on the partition's log the way a new leader would (as Kafka's
``Partition.makeLeader``: the next batches carry it), then start the broker again on the
same port while the consumer keeps running, as a client sees a leader failover.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

# kafka-python loads its protocol schemas with importlib.resources' deprecated API.
warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kerr
from kafka.admin import OffsetSpec as KOffsetSpec
from kafka.record.memory_records import MemoryRecordsBuilder

from tests.conftest import free_port, wait_until
from tidegate.log import Log, LogConfig
from tidegate.record.batch_builder import Record, build_batch

from .clients import (
    admin_client,
    consume,
    create_topic,
    new_consumer,
    produce,
    run_async,
    sample,
    scrape,
    segment_count,
)
from .rawclient import RawClient, produce_partition

pytestmark = pytest.mark.timeout(120)

NODE = 1
INTERNAL = "__consumer_offsets"


@pytest.fixture(scope="module")
def mb(module_broker_factory):
    """One broker for the tests that need no restart."""
    return module_broker_factory()


def values(n: int, prefix: bytes = b"v") -> list[bytes]:
    return [prefix + b"%d" % i for i in range(n)]


def commit_once(bootstrap: str, group: str, topic: str) -> None:
    """A group commit: it creates __consumer_offsets, as a first consumer group does."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()


# -- DeleteRecords ---------------------------------------------------------------------------


def test_delete_records_with_confluent(mb):
    topic = create_topic(mb.bootstrap, partitions=2, configs={"segment.bytes": "300"}, client="confluent")
    for p in (0, 1):
        produce(mb.bootstrap, topic, values(10), client="confluent", partition=p, flush_every=1)
    segments_before = segment_count(mb.data_dir, topic)
    admin = admin_client(mb.bootstrap, client="confluent")
    futures = admin.delete_records([TopicPartition(topic, 0, 5), TopicPartition(topic, 1, -1)],
                                   request_timeout=10)  # fmt: skip
    low = {tp.partition: f.result(10).low_watermark for tp, f in futures.items()}
    assert low == {0: 5, 1: 10}  # -1: up to the high watermark
    assert segment_count(mb.data_dir, topic) < segments_before  # whole segments below went
    c = new_consumer(mb.bootstrap, client="confluent")
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (5, 10)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (10, 10)
    finally:
        c.close()
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=10)
    assert earliest[TopicPartition(topic, 0)].result(10).offset == 5
    assert [g.offset for g in consume(mb.bootstrap, topic, 5, client="confluent", start=5)] == [5, 6, 7, 8, 9]
    # Below the start: the consumer's fetch is OFFSET_OUT_OF_RANGE (auto.offset.reset=error).
    with pytest.raises(KafkaException) as exc:
        consume(mb.bootstrap, topic, 1, client="confluent", start=3, timeout=10)
    assert exc.value.args[0].code() == KafkaError._AUTO_OFFSET_RESET

    def failure(tp: TopicPartition) -> int:
        with pytest.raises(KafkaException) as exc:
            admin.delete_records([tp], request_timeout=10)[tp].result(10)
        return exc.value.args[0].code()

    assert failure(TopicPartition(topic, 0, 11)) == KafkaError.OFFSET_OUT_OF_RANGE
    commit_once(mb.bootstrap, "cfk-delete-records", topic)
    assert failure(TopicPartition(INTERNAL, 0, 0)) == KafkaError.TOPIC_EXCEPTION


def test_delete_records_with_kafka_python(mb):
    topic = create_topic(mb.bootstrap, configs={"segment.bytes": "300"}, client="kafka-python")
    produce(mb.bootstrap, topic, values(12), client="kafka-python", partition=0, flush_every=1)
    tp = KTopicPartition(topic, 0)
    admin = admin_client(mb.bootstrap, client="kafka-python")
    c = new_consumer(mb.bootstrap, client="kafka-python")
    try:
        result = admin.delete_records({tp: 4})
        assert result[tp]["low_watermark"] == 4 and result[tp]["error_code"] == 0
        assert c.beginning_offsets([tp]) == {tp: 4}
        assert admin.list_partition_offsets({tp: KOffsetSpec.EARLIEST})[tp].offset == 4
        with pytest.raises(kerr.OffsetOutOfRangeError):
            admin.delete_records({tp: 13})
        assert admin.delete_records({tp: 2})[tp]["low_watermark"] == 4  # never backwards
    finally:
        c.close()
        admin.close()
    got = consume(mb.bootstrap, topic, 8, client="kafka-python", start=4)
    assert [g.offset for g in got] == list(range(4, 12))


def test_delete_records_with_aiokafka(mb):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.errors import OffsetOutOfRangeError

    topic = create_topic(mb.bootstrap, client="aiokafka")
    produce(mb.bootstrap, topic, values(6), client="aiokafka", partition=0)
    tp = ATopicPartition(topic, 0)

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=mb.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        c = AIOKafkaConsumer(bootstrap_servers=mb.bootstrap, group_id=None, enable_auto_commit=False)
        await c.start()
        try:
            assert await admin.delete_records({tp: RecordsToDelete(before_offset=3)}) == {tp: 3}
            assert await c.beginning_offsets([tp]) == {tp: 3}
            with pytest.raises(OffsetOutOfRangeError):
                await admin.delete_records({tp: RecordsToDelete(before_offset=7)})
        finally:
            await c.stop()
            await admin.close()

    run_async(go(), 60)


@pytest.mark.parametrize("how", ["stop", "kill -9"])
def test_deleted_records_stay_deleted_across_a_restart(broker, how):
    topic = create_topic(broker.bootstrap, client="confluent")
    produce(broker.bootstrap, topic, values(10), client="confluent", partition=0)
    admin = admin_client(broker.bootstrap, client="confluent")
    tp = TopicPartition(topic, 0, 6)
    assert admin.delete_records([tp], request_timeout=10)[tp].result(10).low_watermark == 6
    # the answer came once the start was durable: a kill -9 right after keeps it
    if how == "stop":
        assert broker.stop() == 0
    else:
        broker.kill()
    assert (broker.data_dir / "log-start-offset-checkpoint").read_text() == f"0\n1\n{topic} 0 6\n"
    broker.start()
    c = new_consumer(broker.bootstrap, client="confluent")
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (6, 10)
    finally:
        c.close()
    got = consume(broker.bootstrap, topic, 4, client="kafka-python", start=6)
    assert [(g.offset, g.value) for g in got] == [(i, b"v%d" % i) for i in range(6, 10)]


# -- leader epochs ---------------------------------------------------------------------------


def new_leader_epoch(data_dir: Path, topic: str, epoch: int, *, truncate_to: int | None = None) -> None:
    """With the broker stopped: start ``epoch`` on partition 0 as a new leader would, with
    one record (after cutting the log at ``truncate_to``: a leader that lost a tail)."""
    now_ms = int(time.time() * 1000)
    log = Log(data_dir / f"{topic}-0", LogConfig(), now_ms)
    try:
        if truncate_to is not None:
            log.truncate_to(truncate_to, 0)
        log.leader_epoch = epoch
        log.append(build_batch([Record(b"new leader", timestamp=now_ms)]), now_ms)
    finally:
        log.close()


def offset_for_leader_epoch_requests(broker) -> float:
    return sample(scrape(broker.metrics_url), "kafka_network_requestmetrics_requests_total",
                  request="OffsetForLeaderEpoch") or 0.0  # fmt: skip


class Reader:
    """A consumer of one group subscribed to partition 0 of a topic, kept across broker
    restarts: (offset, leader epoch) of what it reads."""

    def __init__(self, client: str, bootstrap: str, topic: str) -> None:
        self.client = client
        if client == "kafka-python":
            self.c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   retry_backoff_ms=100, reconnect_backoff_max_ms=500)  # fmt: skip
        else:
            self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})  # fmt: skip
            self.c.subscribe([topic])

    def read(self, n: int, timeout: float = 40.0) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            if self.client == "kafka-python":
                for recs in self.c.poll(500).values():
                    got += [(r.offset, r.leader_epoch) for r in recs]
            else:
                m = self.c.poll(0.5)
                if m is not None and not m.error():
                    got.append((m.offset(), m.leader_epoch()))
        return got

    def close(self) -> None:
        self.c.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_a_consumer_validates_its_position_after_a_leader_epoch_change(broker_factory, client):
    """KIP-320: the consumer sees the partition's epoch go from 0 to 1 in Metadata,
    validates its position (epoch 0, offset 5) with OffsetForLeaderEpoch, is told epoch 0
    ends at 5, and keeps its position: the next record it reads is the new leader's."""
    broker = broker_factory({"metrics.listener": f"http://127.0.0.1:{free_port()}"})
    topic = create_topic(broker.bootstrap, client="confluent")
    produce(broker.bootstrap, topic, values(5), client="confluent", partition=0, flush_every=1)
    reader = Reader(client, broker.bootstrap, topic)
    try:
        assert reader.read(5) == [(i, 0) for i in range(5)]
        assert broker.stop() == 0
        new_leader_epoch(broker.data_dir, topic, 1)
        broker.start()
        assert reader.read(1) == [(5, 1)]  # not reset to 0 (earliest)
        assert offset_for_leader_epoch_requests(broker) >= 1
    finally:
        reader.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_a_consumer_detects_a_truncated_log_through_offset_for_leader_epoch(broker_factory, client):
    """The new leader's log ends epoch 0 at 3 (offsets 3 and 4 were lost): the consumer at
    5 asks for epoch 0's end, gets 3, and continues from there, with the new epoch's
    record, instead of an out-of-range reset to the earliest offset."""
    broker = broker_factory()
    topic = create_topic(broker.bootstrap, client="confluent")
    produce(broker.bootstrap, topic, values(5), client="confluent", partition=0, flush_every=1)
    reader = Reader(client, broker.bootstrap, topic)
    try:
        assert reader.read(5) == [(i, 0) for i in range(5)]
        assert broker.stop() == 0
        new_leader_epoch(broker.data_dir, topic, 1, truncate_to=3)
        broker.start()
        assert reader.read(1) == [(3, 1)]
    finally:
        reader.close()


def end_offset(c: RawClient, topic: str, epoch: int, current: int = -1) -> tuple[int, int, int]:
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
    p = c.request(23, 4, body).topics[0].partitions[0]
    return int(p.error_code), p.leader_epoch, p.end_offset


@pytest.mark.parametrize("how", ["stop", "kill -9"])
def test_the_leader_epoch_checkpoint_survives_a_restart(broker, how):
    topic = create_topic(broker.bootstrap, client="confluent")
    produce(broker.bootstrap, topic, values(4), client="confluent", partition=0, flush_every=1)
    assert broker.stop() == 0
    new_leader_epoch(broker.data_dir, topic, 3)  # epoch 3 from offset 4
    broker.start()
    produce(broker.bootstrap, topic, values(2, b"w"), client="kafka-python", partition=0, acks=1)
    if how == "stop":
        assert broker.stop() == 0
    else:
        broker.kill()
    checkpoint = broker.data_dir / f"{topic}-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n2\n0 0\n3 4\n"
    broker.start()
    admin = admin_client(broker.bootstrap, client="kafka-python")
    try:
        [described] = admin.describe_topics([topic])
        assert [p["leader_epoch"] for p in described["partitions"]] == [3]
    finally:
        admin.close()
    got = consume(broker.bootstrap, topic, 7, client="kafka-python")
    assert [(g.offset, g.value) for g in got][-2:] == [(5, b"w0"), (6, b"w1")]
    with RawClient.connect(broker.bootstrap) as c:
        assert end_offset(c, topic, 0) == (0, 0, 4)
        assert end_offset(c, topic, 3, current=3) == (0, 3, 7)
        assert end_offset(c, topic, 0, current=2)[0] == 74  # FENCED_LEADER_EPOCH


# -- log dirs ----------------------------------------------------------------------------------


def test_describe_and_alter_log_dirs_with_kafka_python(mb):
    from kafka import TopicPartitionReplica

    topic = create_topic(mb.bootstrap, partitions=2, client="kafka-python")
    produce(mb.bootstrap, topic, values(20), client="kafka-python", partition=1)
    admin = admin_client(mb.bootstrap, client="kafka-python")
    try:
        [broker_dirs] = admin.describe_log_dirs({topic: [0, 1]})
        assert broker_dirs["broker"] == NODE
        [d] = broker_dirs["log_dirs"]
        assert (d["error_code"], d["log_dir"]) == (0, os.path.abspath(mb.data_dir))
        st = os.statvfs(mb.data_dir)
        assert d["total_bytes"] == st.f_blocks * st.f_frsize
        assert 0 < d["usable_bytes"] <= d["total_bytes"]
        sizes = {(t["name"], p["partition_index"]): (p["partition_size"], p["offset_lag"], p["is_future_key"])
                 for t in d["topics"] for p in t["partitions"]}
        on_disk = sum(f.stat().st_size for f in (mb.data_dir / f"{topic}-1").glob("*.log"))
        assert sizes == {(topic, 0): (0, 0, False), (topic, 1): (on_disk, 0, False)}
        assert on_disk > 0
        result = admin.alter_replica_log_dirs({
            TopicPartitionReplica(topic, 0, NODE): os.path.abspath(mb.data_dir),
            TopicPartitionReplica(topic, 1, NODE): "/elsewhere",
        })
        assert {tpr.partition: err for tpr, err in result.items()} == {
            0: kerr.NoError, 1: kerr.LogDirNotFoundError
        }
    finally:
        admin.close()


# -- topics: KIP-966 and Metadata ----------------------------------------------------------------


def test_describe_topic_partitions_pages_with_kafka_python(mb):
    a = create_topic(mb.bootstrap, partitions=3, prefix="dtp-a", client="kafka-python")
    b = create_topic(mb.bootstrap, partitions=2, prefix="dtp-b", client="kafka-python")
    admin = admin_client(mb.bootstrap, client="kafka-python")
    try:
        first = admin.describe_topic_partitions([a, b], response_partition_limit=2)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [
            (a, [0, 1])
        ]
        assert first["next_cursor"] == {"topic_name": a, "partition_index": 2}
        second = admin.describe_topic_partitions([a, b], response_partition_limit=2,
                                                 cursor=first["next_cursor"])  # fmt: skip
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in second["topics"]] == [
            (a, [2]), (b, [0])
        ]
        assert second["next_cursor"] == {"topic_name": b, "partition_index": 1}
        p = first["topics"][0]["partitions"][0]
        assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"]) == (NODE, 0, [NODE], [NODE])
        unknown = admin.describe_topic_partitions(["no-such-topic"])
        assert [(t["name"], t["error_code"]) for t in unknown["topics"]] == [("no-such-topic", 3)]
    finally:
        admin.close()


def test_describe_topics_and_internal_topics_with_every_client(mb):
    """Each client's describe/list-topics: partitions led by this node at epoch 0, and
    __consumer_offsets listed by an all-topics Metadata, marked internal, as Kafka lists it."""
    topic = create_topic(mb.bootstrap, partitions=2, prefix="desc", client="confluent")
    commit_once(mb.bootstrap, "describe-topics", topic)

    admin = admin_client(mb.bootstrap, client="confluent")
    futures = admin.describe_topics(TopicCollection([topic, INTERNAL]), request_timeout=10)
    described = {name: f.result(10) for name, f in futures.items()}
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
            for p in described[topic].partitions] == [(0, NODE, [NODE], [NODE]), (1, NODE, [NODE], [NODE])]
    assert (described[topic].is_internal, described[INTERNAL].is_internal) == (False, True)
    assert {topic, INTERNAL} <= set(admin.list_topics(timeout=10).topics)

    kp = admin_client(mb.bootstrap, client="kafka-python")
    try:
        assert {topic, INTERNAL} <= set(kp.list_topics())
        internal = {t["name"]: t["is_internal"] for t in kp.describe_topics()}
        assert (internal[topic], internal[INTERNAL]) == (False, True)
    finally:
        kp.close()

    from aiokafka.admin import AIOKafkaAdminClient

    async def aio() -> None:
        a = AIOKafkaAdminClient(bootstrap_servers=mb.bootstrap, request_timeout_ms=10_000)
        await a.start()
        try:
            assert {topic, INTERNAL} <= set(await a.list_topics())
            topics = {t["topic"]: t for t in await a.describe_topics([topic, INTERNAL])}
            assert (topics[topic]["is_internal"], topics[INTERNAL]["is_internal"]) == (False, True)
            assert [(p["partition"], p["leader"]) for p in topics[topic]["partitions"]] == [(0, NODE), (1, NODE)]
        finally:
            await a.close()

    run_async(aio(), 60)


# -- ListOffsets inside a batch ------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 1, 4])  # none, gzip, zstd
def test_list_offsets_by_time_and_max_timestamp_are_exact_inside_a_batch(mb, codec):
    """One batch of three records stamped 100, 400, 200 (offsets 0-2): MAX_TIMESTAMP and
    "the first at or after 150" are both offset 1, for every client."""
    topic = create_topic(mb.bootstrap, prefix=f"ts{codec}", client="confluent")
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for ts in (100, 400, 200):
        builder.append(timestamp=ts, key=b"k", value=b"value", headers=[])
    builder.close()
    with RawClient.connect(mb.bootstrap) as c:
        assert produce_partition(c, topic, bytes(builder.buffer())).base_offset == 0

    admin = admin_client(mb.bootstrap, client="confluent")
    tp = TopicPartition(topic, 0)

    def listed(spec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)
        return info.offset, info.timestamp

    assert listed(OffsetSpec.max_timestamp()) == (1, 400)
    assert listed(OffsetSpec.for_timestamp(150)) == (1, 400)
    assert listed(OffsetSpec.for_timestamp(100)) == (0, 100)
    assert listed(OffsetSpec.for_timestamp(401)) == (-1, -1)
    c = new_consumer(mb.bootstrap, client="confluent")
    try:
        [found] = c.offsets_for_times([TopicPartition(topic, 0, 150)], timeout=10)
        assert found.offset == 1
    finally:
        c.close()

    ktp = KTopicPartition(topic, 0)
    kc = new_consumer(mb.bootstrap, client="kafka-python")
    kadmin = admin_client(mb.bootstrap, client="kafka-python")
    try:
        found = kc.offsets_for_times({ktp: 150})[ktp]
        assert (found.offset, found.timestamp) == (1, 400)
        mx = kadmin.list_partition_offsets({ktp: KOffsetSpec.MAX_TIMESTAMP})[ktp]
        assert (mx.offset, mx.timestamp) == (1, 400)
    finally:
        kc.close()
        kadmin.close()

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def aio() -> tuple[int, int]:
        ac = AIOKafkaConsumer(bootstrap_servers=mb.bootstrap, group_id=None, enable_auto_commit=False)
        await ac.start()
        try:
            atp = ATopicPartition(topic, 0)
            found = (await ac.offsets_for_times({atp: 150}))[atp]
            return found.offset, found.timestamp
        finally:
            await ac.stop()

    assert run_async(aio(), 60) == (1, 400)


# -- producers, elections, reassignments, the quorum ---------------------------------------------


def test_describe_producers_with_kafka_python(mb):
    topic = create_topic(mb.bootstrap, client="kafka-python")
    # kafka-python's producer is idempotent by default: one producer id, epoch 0
    produce(mb.bootstrap, topic, values(7), client="kafka-python", partition=0, acks=-1)
    tp = KTopicPartition(topic, 0)
    admin = admin_client(mb.bootstrap, client="kafka-python")
    try:
        [state] = admin.describe_producers([tp])[tp].active_producers
        assert (state.producer_epoch, state.last_sequence, state.coordinator_epoch,
                state.current_transaction_start_offset) == (0, 6, -1, -1)  # fmt: skip
        assert state.producer_id >= 0 and state.last_timestamp > 0
    finally:
        admin.close()


def test_elections_are_not_needed_on_one_broker(mb):
    topic = create_topic(mb.bootstrap, partitions=2, client="confluent")
    admin = admin_client(mb.bootstrap, client="confluent")
    # (confluent-kafka 2.16's elect_leaders fails on its own request_timeout keyword)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 1)]
                                 ).result(10)  # fmt: skip
    assert {tp.partition: err.code() for tp, err in result.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED
    }
    kp = admin_client(mb.bootstrap, client="kafka-python")
    try:
        r = kp.elect_leaders(1, {topic: [0, 1]})  # unclean: there is a leader already
        assert [(p.partition_id, p.error_code) for res in r.replica_election_results
                for p in res.partition_result] == [(0, 84), (1, 84)]  # fmt: skip
        tp = KTopicPartition(topic, 0)
        assert kp.alter_partition_reassignments({tp: [NODE]}) == {tp: None}  # already there
        assert kp.alter_partition_reassignments({tp: [NODE, 2]}) == {tp: kerr.InvalidReplicationAssignmentError}
        assert kp.alter_partition_reassignments({tp: None}) == {tp: kerr.NoReassignmentInProgressError}
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()


def test_describe_metadata_quorum_with_kafka_python(mb):
    admin = admin_client(mb.bootstrap, client="kafka-python")
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    [topic] = quorum["topics"]
    [p] = topic["partitions"]
    assert (topic["topic_name"], p["leader_id"], p["leader_epoch"], p["error"]) == (
        "__cluster_metadata", NODE, 1, None
    )
    assert [(v["replica_id"], v["log_end_offset"]) for v in p["current_voters"]] == [(NODE, 0)]
    assert p["observers"] == []
    assert quorum["nodes"] == [
        {"node_id": NODE, "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": mb.port}]}
    ]


# -- ApiVersions -------------------------------------------------------------------------------


def test_kafka_python_infers_kafka_42_and_works_when_told_40(mb):
    topic = create_topic(mb.bootstrap, client="kafka-python")
    produce(mb.bootstrap, topic, values(3), client="kafka-python", partition=0)
    inferred = admin_client(mb.bootstrap, client="kafka-python")
    try:
        assert inferred.get_broker_version_data(NODE).broker_version == (4, 2)
    finally:
        inferred.close()
    # Told the broker is Kafka 4.0, kafka-python uses Kafka 4.0's versions without asking.
    told = admin_client(mb.bootstrap, client="kafka-python", api_version=(4, 0))
    tp = KTopicPartition(topic, 0)
    try:
        assert told.delete_records({tp: 1})[tp]["low_watermark"] == 1
        assert told.list_partition_offsets({tp: KOffsetSpec.EARLIEST})[tp].offset == 1
        assert told.describe_log_dirs({topic: [0]})[0]["log_dirs"][0]["error_code"] == 0
        assert [t["name"] for t in told.describe_topic_partitions([topic])["topics"]] == [topic]
    finally:
        told.close()
    c = new_consumer(mb.bootstrap, client="kafka-python", conf={"api_version": (4, 0)})
    try:
        c.assign([tp])
        c.seek(tp, 1)
        wait_until(lambda: c.position(tp) == 1, 10, what="position")
        recs = [r for rs in c.poll(5000).values() for r in rs]
        assert [(r.offset, r.leader_epoch) for r in recs] == [(1, 0), (2, 0)]
    finally:
        c.close()
