"""The Spark source and sink on librdkafka's 3-broker mock cluster: a streaming query
reading a 3-partition topic in micro-batches into a Parquet sink while the partitions'
leaders move (twice) and records keep coming: every record is in the sink exactly once;
and a keyed batch write of 3,000 rows into a 6-partition topic while its leaders move
(twice) in the middle of the write: every row is in the topic exactly once (read back
with confluent-kafka), in order per partition.

The driver plans each micro-batch with ListOffsets (and a Fetch) at the leaders it
knows, which answer NOT_LEADER_OR_FOLLOWER once leadership moved: it refreshes its
metadata and asks the new ones. Executors read their ranges from the leaders of the
moment (a leader moving within one range read is tests/cluster/test_consumer_cluster's
fetcher scenario)."""

from __future__ import annotations

import threading
import time

import pytest

from .scenarios import KEYS, TIMEOUT_S, check_moves_followed, read_log_confluent, wait_for

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

PARTITIONS = 3
PER_ROUND = 300


def _produce(cluster, topic: str, start: int) -> None:
    """Records ``start`` .. ``start + PER_ROUND - 1`` (confluent-kafka, acks=all)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "batch.num.messages": 25})
    for i in range(start, start + PER_ROUND):
        p.produce(topic, b"%d" % i, key=b"k%d" % (i % KEYS))
    assert p.flush(TIMEOUT_S) == 0


def _rows_read(query) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def _wait(query, cond, what: str) -> None:
    deadline = time.monotonic() + 120
    while not cond():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"{what} not reached: {query.recentProgress[-1:]}"
        time.sleep(0.2)


def test_streaming_read_through_leader_moves_writes_every_record_once(spark, mock_cluster, topic_name, tmp_path):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    _produce(mock_cluster, topic_name, 0)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = (
        spark.readStream.format("tidegate")
        .option("kafka.bootstrap.servers", mock_cluster.bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "120")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        # two moves, each while micro-batches are still behind, new records after each
        for shift in (1, 2):
            read_before = (shift - 1) * PER_ROUND + 120  # a micro-batch into the last round
            _wait(query, lambda n=read_before: _rows_read(query) >= n, "a micro-batch")
            mock_cluster.move_leaders(topic_name, PARTITIONS, shift)
            _produce(mock_cluster, topic_name, shift * PER_ROUND)
        _wait(query, lambda: _rows_read(query) >= 3 * PER_ROUND, "every record")
    finally:
        query.stop()
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    values = sorted(int(r["value"]) for r in rows)
    assert values == list(range(3 * PER_ROUND)), f"{len(values)} rows, {len(set(values))} distinct"
    for p in range(PARTITIONS):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
    assert len([pg for pg in query.recentProgress if pg["numInputRows"]]) >= 5


SINK_PARTITIONS = 6
ROWS = 3_000
#: producer settings that make the write take seconds on brokers 20 ms away (a few
#: records a batch, one request at a time per broker), so the leaders move mid-write
PACED = {"kafka.batch.size": "100", "kafka.linger.ms": "5", "kafka.max.in.flight.requests.per.connection": "1"}
RTT_MS = 20


def test_batch_write_through_leader_moves_writes_every_record_once(spark, mock_cluster, topic_name):
    """``df.write.format("tidegate")`` of 3,000 keyed rows (one Spark task, so the rows
    of each key go out in order), paced to take seconds (:data:`PACED`); the leaders of all six
    partitions move when a third and two thirds of the rows are in the topic. The task's
    producer (idempotent, acks=all) learns each move from NOT_LEADER_OR_FOLLOWER, refreshes
    its metadata and retries at the new leaders: no task fails, so Spark retries nothing,
    and every row is in the topic once, on its key's partition, in order."""
    from tidegate.client import KafkaClient
    from tidegate.client.fetcher import end_offsets
    from tidegate.producer.partitioner import partition_for_key

    mock_cluster.create_topic(topic_name, SINK_PARTITIONS)

    df = spark.range(0, ROWS, 1, 1).selectExpr(f"CONCAT('k', CAST(id % {KEYS} AS STRING)) AS key",
                                               "CAST(id AS STRING) AS value")  # fmt: skip
    marks: list[int] = []
    done = threading.Event()
    mover_errors: list[BaseException] = []

    def move_mid_write() -> None:
        tps = [(topic_name, p) for p in range(SINK_PARTITIONS)]
        try:
            with KafkaClient(mock_cluster.bootstrap) as client:
                client.bootstrap(timeout_ms=TIMEOUT_S * 1000)
                for shift in (1, 2):
                    at = shift * ROWS // 3
                    wait_for(lambda n=at: done.is_set() or sum(end_offsets(client, tps).values()) >= n,
                             f"{at} rows in the topic")  # fmt: skip
                    assert not done.is_set(), f"the write ended before move {shift}"
                    marks.append(len(mock_cluster.requests()))
                    mock_cluster.move_leaders(topic_name, SINK_PARTITIONS, shift)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            mover_errors.append(exc)

    for broker in (1, 2, 3):
        mock_cluster.set_rtt(broker, RTT_MS)
    mock_cluster.start_tracking()
    # the write runs on the test's thread (the session's Python data sources are
    # registered for it); the leaders move from another
    mover = threading.Thread(target=move_mid_write, daemon=True)
    mover.start()
    try:
        (df.write.format("tidegate").option("kafka.bootstrap.servers", mock_cluster.bootstrap)
         .option("topic", topic_name).options(**PACED).mode("append").save())  # fmt: skip
    finally:
        done.set()
        mover.join(TIMEOUT_S)
    assert not mover_errors, mover_errors
    assert len(marks) == 2
    log = read_log_confluent(mock_cluster.bootstrap, topic_name, ROWS, partitions=SINK_PARTITIONS)
    values = sorted(v for recs in log.values() for _, v in recs)
    assert values == list(range(ROWS)), f"{len(values)} records, {len(set(values))} distinct"
    for p, recs in log.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"partition {p}: offsets {recs[:5]}"
        vals = [v for _, v in recs]
        assert vals == sorted(vals), f"partition {p} out of order"
        assert {partition_for_key(b"k%d" % (v % KEYS), SINK_PARTITIONS) for v in vals} <= {p}
    check_moves_followed(mock_cluster.requests(), marks)  # the producer followed the moves
