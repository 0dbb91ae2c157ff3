"""tidegate's Spark data source: Spark's Kafka source and sink as a Spark 4 Python Data
Source that speaks Kafka's protocol itself (no JVM connector jar).

    import tidegate.spark
    tidegate.spark.register(spark)
    df = (spark.read.format("tidegate")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "KafkaDataSource", "register"]

#: The name to use with ``spark.read.format(...)`` and friends.
FORMAT = "tidegate"


def register(spark: Any) -> str:
    """Register the data source with ``spark`` (a SparkSession); returns its format name."""
    from .source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    return FORMAT


def __getattr__(name: str) -> Any:  # the source module imports pyspark: load it on use
    if name == "KafkaDataSource":
        from .source import KafkaDataSource

        return KafkaDataSource
    raise AttributeError(name)
