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

__all__ = ["FORMAT", "KafkaDataSource", "local_session", "register"]

#: The name to use with ``spark.read.format(...)`` and friends.
FORMAT = "tidegate"


def register(spark: Any) -> str:
    """Register the data source with ``spark`` (a SparkSession); returns its format name."""
    from .source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    return FORMAT


def local_session(app_name: str = "tidegate", cores: int = 2, **conf: str) -> Any:
    """A ``local[cores]`` SparkSession bound to loopback, with the source registered.

    Sets what Spark needs from the environment when it is missing (``JAVA_HOME`` from
    the ``java`` on the PATH, ``SPARK_LOCAL_IP``, ``PYSPARK_PYTHON`` = this interpreter),
    turns the UI and progress bars off and uses UTC. ``conf`` adds or overrides Spark
    settings, e.g. ``local_session(**{"spark.sql.shuffle.partitions": "4"})``.
    """
    import os
    import shutil
    import sys
    from pathlib import Path

    java = shutil.which("java")
    if not os.environ.get("JAVA_HOME") and java:
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parents[1])
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    settings = {
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def __getattr__(name: str) -> Any:  # the source module imports pyspark: load it on use
    if name == "KafkaDataSource":
        from .source import KafkaDataSource

        return KafkaDataSource
    raise AttributeError(name)
