"""The Spark source on librdkafka's 3-broker mock cluster: a streaming query reading a
3-partition topic in micro-batches into a Parquet sink while the partitions' leaders
move (twice) and records keep coming; every record is in the sink exactly once.

The driver plans each micro-batch with ListOffsets (and a Fetch) at the leaders it
knows, which answer NOT_LEADER_OR_FOLLOWER once leadership moved: it refreshes its
metadata and asks the new ones. Executors read their ranges from the leaders of the
moment (a leader moving within one range read is tests/cluster/test_consumer_cluster's
fetcher scenario)."""

from __future__ import annotations

import time

import pytest

from .scenarios import KEYS, TIMEOUT_S

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
