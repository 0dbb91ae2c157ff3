"""The two Spark jobs of the pipeline.

``aggregate_stream``: Structured Streaming over the ``tidegate`` source: parse the
JSON page views, count them and average their latency per minute and per url with a
one-minute watermark, and write each closed window both to a Kafka topic (JSON, keyed
by url, through the ``tidegate`` sink) and to Parquet.

``read_results``: a batch read of the results topic back into a table.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EVENT_SCHEMA = "user string, url string, latency_ms int, ts timestamp"
RESULT_SCHEMA = (
    "window_start timestamp, window_end timestamp, url string, views long, "
    "users long, avg_latency_ms double, max_latency_ms int"
)


def per_minute(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    events = (
        spark.readStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 5000)
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
    )
    return (
        events.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "url")
        .agg(
            F.count("*").alias("views"),
            F.approx_count_distinct("user").alias("users"),
            F.round(F.avg("latency_ms"), 1).alias("avg_latency_ms"),
            F.max("latency_ms").alias("max_latency_ms"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "url",
            "views",
            "users",
            "avg_latency_ms",
            "max_latency_ms",
        )
    )


def aggregate_stream(
    spark: SparkSession,
    bootstrap: str,
    in_topic: str,
    out_topic: str,
    parquet_dir: str,
    checkpoint_dir: str,
    timeout_s: float = 300,
) -> None:
    """Run both sinks with ``Trigger.AvailableNow`` (everything in the topic now, in
    micro-batches of at most 5000 events) and wait for them."""
    results = per_minute(spark, bootstrap, in_topic)
    to_kafka = (
        results.select(
            F.col("url").alias("key"),
            F.to_json(F.struct(*results.columns)).alias("value"),
        )
        .writeStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .option("checkpointLocation", f"{checkpoint_dir}/kafka")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    to_parquet = (
        results.writeStream.format("parquet")
        .option("path", parquet_dir)
        .option("checkpointLocation", f"{checkpoint_dir}/parquet")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    for q in (to_kafka, to_parquet):
        if not q.awaitTermination(timeout_s):
            q.stop()
            raise TimeoutError(f"streaming query {q.name or q.id} did not finish in {timeout_s}s")
        if q.exception() is not None:
            raise RuntimeError(f"streaming query failed: {q.exception()}")


def read_results(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The results topic as a table (batch read through the same source)."""
    return (
        spark.read.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .select(F.from_json(F.col("value").cast("string"), RESULT_SCHEMA).alias("r"))
        .select("r.*")
        .orderBy("window_start", "url")
    )
