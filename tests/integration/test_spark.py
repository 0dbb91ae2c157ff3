"""The ``tidegate`` Spark data source with a real local Spark (local[2]) against a real
tidegate broker process and against the peer broker (Tansu).

What is produced is read back through Spark and compared field by field (key, value,
headers, timestamp, timestamp type, partition, offset) over batches written with every
codec; streaming runs several micro-batches under ``maxOffsetsPerTrigger``; a query
stopped mid-stream and restarted from its checkpoint, with new data produced in
between, writes every record exactly once to a Parquet file sink; rows written with
the sink (batch and streaming) read back exactly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from tests.conftest import wait_until
from tidegate.client import KafkaClient
from tidegate.client.fetcher import list_offsets

from .clients import (
    CODECS,
    USERS,
    Rec,
    base_timestamp,
    create_topic,
    make_records,
    produce,
    sasl_overrides,
)

pytestmark = pytest.mark.timeout(300)

#: Every wait on a streaming query is bounded by this.
QUERY_TIMEOUT_S = 120







@pytest.fixture(params=["tidegate", "peer"])
def bootstrap(request):
    if request.param == "tidegate":
        return request.getfixturevalue("broker").bootstrap
    return request.getfixturevalue("peer_bootstrap")




def produce_to(
    bootstrap: str, topic: str, partition: int, records: list[Rec], codec: str = "none"
) -> list[int]:
    """Send ``records`` to one partition with one codec (tidegate's Producer, acks=all);
    returns their offsets."""
    return [d.offset for d in produce(bootstrap, topic, records, client="tidegate",
                                      partition=partition, codec=codec, acks=-1)]  # fmt: skip


def read_df(spark, bootstrap: str, **options):
    r = spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df, headers: bool = True) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp ms, timestampType, topic)."""
    cols = [
        "partition",
        "offset",
        "key",
        "value",
        "unix_millis(timestamp) AS ts",
        "timestampType",
        "topic",
    ]
    if headers:
        cols.append("headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        hdrs = (
            tuple(
                (h["key"], bytes(h["value"]) if h["value"] is not None else None)
                for h in r["headers"]
            )
            if headers
            else ()
        )
        out.append(
            (
                r["partition"],
                r["offset"],
                bytes(r["key"]) if r["key"] is not None else None,
                bytes(r["value"]) if r["value"] is not None else None,
                hdrs,
                r["ts"],
                r["timestampType"],
                r["topic"],
            )
        )
    return sorted(out)


def expected_rows(topic: str, sent: dict[int, list[tuple[int, Rec]]]) -> list[tuple]:
    out = []
    for partition, recs in sent.items():
        for off, r in recs:
            out.append((partition, off, r.key, r.value, r.headers, r.timestamp, 0, topic))
    return sorted(out)


def _produce_codecs(bootstrap: str, topic: str, n_per_codec: int) -> dict[int, list]:
    """Every codec, into two partitions: batches of all codecs interleave in each."""
    sent: dict[int, list[tuple[int, Rec]]] = {0: [], 1: []}
    base = base_timestamp()
    for i, codec in enumerate(CODECS):
        recs = make_records(n_per_codec, base + i * 10_000, seed=i)
        for partition in (0, 1):
            part = recs[partition::2]
            offs = produce_to(bootstrap, topic, partition, part, codec)
            sent[partition] += list(zip(offs, part))
    return sent


# -- batch reads -------------------------------------------------------------------------------


def test_batch_read_equals_what_was_produced(spark, bootstrap):
    topic = create_topic(bootstrap, partitions=2, prefix="spark")
    sent = _produce_codecs(bootstrap, topic, 200)
    df = read_df(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = rows_of(df)
    assert len(got) == 1000
    assert got == expected_rows(topic, sent)

    # a sub-range by JSON offsets (-2 = earliest), assign, no headers column
    df = read_df(
        spark,
        bootstrap,
        assign=f'{{"{topic}":[0,1]}}',
        startingOffsets=f'{{"{topic}":{{"0":-2,"1":150}}}}',
        endingOffsets=f'{{"{topic}":{{"0":120,"1":-1}}}}',
    )
    assert "headers" not in df.columns
    got = rows_of(df, headers=False)
    want = [r[:4] + ((),) + r[5:] for r in expected_rows(topic, sent)]
    want = [r for r in want if (r[0] == 0 and r[1] < 120) or (r[0] == 1 and r[1] >= 150)]
    assert got == want


def test_batch_read_pattern_and_bounded_fetches(spark, bootstrap):
    """subscribePattern picks the matching topics only; a 1 KiB max.partition.fetch.bytes
    (many fetches per partition) and minPartitions splitting read the same rows."""
    a = create_topic(bootstrap, partitions=1, prefix="pat-a")
    b = create_topic(bootstrap, partitions=1, prefix="pat-b")
    other = create_topic(bootstrap, partitions=1, prefix="other")
    base = base_timestamp()
    for t in (a, b, other):
        produce_to(bootstrap, t, 0, make_records(300, base, headers=False), "lz4")
    df = read_df(spark, bootstrap, subscribePattern="pat-.*")
    assert sorted(df.groupBy("topic").count().collect()) == [(a, 300), (b, 300)]
    df = read_df(
        spark,
        bootstrap,
        subscribe=a,
        minPartitions="4",
        **{"kafka.max.partition.fetch.bytes": "1024"},
    )
    assert df.rdd.getNumPartitions() == 4
    offsets = sorted(r["offset"] for r in df.select("offset").collect())
    assert offsets == list(range(300))
    # the tuple path (tidegate.arrow=false) gives the same rows as the Arrow path
    recs = make_records(50, base)
    produce_to(bootstrap, other, 0, recs, "gzip")
    arrow = rows_of(read_df(spark, bootstrap, subscribe=other, includeHeaders="true"))
    tuples = read_df(spark, bootstrap, subscribe=other, includeHeaders="true",
                     **{"tidegate.arrow": "false"})  # fmt: skip
    assert rows_of(tuples) == arrow
    assert [r[5] for r in arrow[300:]] == [r.timestamp for r in recs]
    assert [r[4] for r in arrow[300:]] == [r.headers for r in recs]


def test_rejected_options(spark, broker):
    def fails(match: str, **opts) -> None:
        with pytest.raises(Exception, match=match):
            read_df(spark, broker.bootstrap, **opts).collect()

    fails("One of the following options must be specified for Kafka source")
    fails("Only one of the following options can be specified", subscribe="a", assign='{"a":[0]}')
    fails(
        "starting offset can't be latest for batch queries", subscribe="a", startingOffsets="latest"
    )
    fails(
        "ending offset can't be earliest for batch queries", subscribe="a", endingOffsets="earliest"
    )
    fails(
        "Kafka option 'auto.offset.reset' is not supported",
        subscribe="a",
        **{"kafka.auto.offset.reset": "earliest"},
    )
    fails("Kafka option 'group.id' is not supported", subscribe="a", **{"kafka.group.id": "g"})
    with pytest.raises(Exception, match="must be specified for configuring Kafka consumer"):
        spark.read.format("tidegate").option("subscribe", "a").load().collect()
    with pytest.raises(Exception, match="ending offset not valid in streaming queries"):
        (
            spark.readStream.format("tidegate")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", "a")
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("console")
            .start()
            .awaitTermination(30)
        )


# -- streaming -----------------------------------------------------------------------------------


def _stream(spark, bootstrap: str, topic: str, out: Path, ckpt: Path, trigger: dict, **opts):
    r = (
        spark.readStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for k, v in opts.items():
        r = r.option(k, v)
    return (
        r.load()
        .selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ts")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(**trigger)
        .start()
    )


def _await(query) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish in time"
    assert query.exception() is None, query.exception()


def _sink_rows(spark, out: Path) -> list[tuple]:
    df = spark.read.parquet(str(out))
    return sorted(
        (r["partition"], r["offset"], bytes(r["key"]) if r["key"] is not None else None)
        for r in df.collect()
    )


def test_stream_available_now_max_offsets_per_trigger(spark, bootstrap, tmp_path):
    """700 + 300 records, maxOffsetsPerTrigger=250: several micro-batches, each within
    the cap and split in proportion to lag, every record once."""
    topic = create_topic(bootstrap, partitions=2, prefix="spark")
    base = base_timestamp()
    recs = make_records(1000, base, headers=False)
    offs0 = produce_to(bootstrap, topic, 0, recs[:700], "zstd")
    offs1 = produce_to(bootstrap, topic, 1, recs[700:], "snappy")
    q = _stream(
        spark,
        bootstrap,
        topic,
        tmp_path / "out",
        tmp_path / "ckpt",
        {"availableNow": True},
        startingOffsets="earliest",
        maxOffsetsPerTrigger="250",
    )
    _await(q)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000
    assert len(sizes) >= 4 and max(sizes) <= 250, sizes
    first = q.recentProgress[0]["sources"][0]
    # the first batch takes 250 in proportion to lag 700:300 -> 175 + 75
    import json

    end = first["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    assert end == {topic: {"0": 175, "1": 75}}, end
    want = sorted(
        [(0, o, r.key) for o, r in zip(offs0, recs[:700])]
        + [(1, o, r.key) for o, r in zip(offs1, recs[700:])]
    )
    assert _sink_rows(spark, tmp_path / "out") == want


def test_stream_restart_from_checkpoint_exactly_once(spark, bootstrap, tmp_path):
    """A query stopped mid-stream, new data produced, then restarted on the same
    checkpoint: the file sink holds every record exactly once."""
    topic = create_topic(bootstrap, partitions=2, prefix="spark")
    base = base_timestamp()
    recs = make_records(1200, base, headers=False)
    sent = []
    for partition, chunk in ((0, recs[:400]), (1, recs[400:600])):
        sent += [
            (partition, o, r.key)
            for o, r in zip(produce_to(bootstrap, topic, partition, chunk), chunk)
        ]
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    # run 1: small micro-batches on a processing-time trigger, stopped after two batches
    q = _stream(
        spark,
        bootstrap,
        topic,
        out,
        ckpt,
        {"processingTime": "1 second"},
        startingOffsets="earliest",
        maxOffsetsPerTrigger="100",
    )

    def two_batches() -> bool:
        assert q.exception() is None, q.exception()
        return sum(1 for p in q.recentProgress if p["numInputRows"]) >= 2

    wait_until(two_batches, QUERY_TIMEOUT_S, interval=0.2, what="two micro-batches with rows")
    q.stop()
    first_run = len(_sink_rows(spark, out))
    assert 0 < first_run < 600
    # new data while the query is down
    for partition, chunk in ((0, recs[600:900]), (1, recs[900:])):
        sent += [
            (partition, o, r.key)
            for o, r in zip(produce_to(bootstrap, topic, partition, chunk), chunk)
        ]
    # run 2: same checkpoint; startingOffsets=latest must not matter on a restart
    q = _stream(
        spark,
        bootstrap,
        topic,
        out,
        ckpt,
        {"availableNow": True},
        startingOffsets="latest",
        maxOffsetsPerTrigger="500",
    )
    _await(q)
    assert _sink_rows(spark, out) == sorted(sent)


def test_stream_pattern_picks_up_new_topics_from_earliest(spark, bootstrap, tmp_path):
    """subscribePattern with startingOffsets=latest: records already there are skipped;
    a topic created later is read from its earliest offset (Spark's rule for new
    partitions), across a restart."""
    prefix = f"newt{os.getpid()}x{int(time.time()) % 10000}"
    a = create_topic(bootstrap, partitions=1, prefix=prefix)
    base = base_timestamp()
    old = make_records(20, base, headers=False)
    produce_to(bootstrap, a, 0, old)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        q = (
            spark.readStream.format("tidegate")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribePattern", f"{prefix}-.*")
            .load()
            .selectExpr("topic", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        _await(q)

    run()  # starts at latest: nothing to read yet
    new_a = make_records(5, base + 100, headers=False)
    produce_to(bootstrap, a, 0, new_a)
    b = create_topic(bootstrap, partitions=2, prefix=prefix)
    produce_to(bootstrap, b, 0, make_records(7, base, headers=False))
    produce_to(bootstrap, b, 1, make_records(3, base, headers=False))
    run()
    got = sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())
    want = sorted(
        [(a, 0, o) for o in range(20, 25)]
        + [(b, 0, o) for o in range(7)]
        + [(b, 1, o) for o in range(3)]
    )
    assert got == want


# -- writing ---------------------------------------------------------------------------------------


def test_write_then_read_back(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=3, prefix="spark")
    rows = [
        (
            f"k{i}" if i % 7 else None,
            f"value {i}".encode(),
            i % 3,
            [(f"h{i % 2}", f"{i}".encode())] if i % 4 else [],
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("tidegate").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).mode("append").save()
    got = read_df(spark, bootstrap, subscribe=topic, includeHeaders="true").collect()
    assert len(got) == 300
    by_value = {bytes(r["value"]): r for r in got}
    for key, value, partition, headers in rows:
        r = by_value[value]
        assert (bytes(r["key"]) if r["key"] is not None else None) == (
            key.encode() if key is not None else None
        )
        assert r["partition"] == partition
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == headers
    # offsets per partition are contiguous from 0: nothing written twice
    for p in range(3):
        offs = sorted(r["offset"] for r in got if r["partition"] == p)
        assert offs == list(range(100))

    # streaming write: the topic column routes rows; read back equals the source
    target = create_topic(bootstrap, partitions=1, prefix="spark")
    q = (
        spark.readStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", f"'{target}' AS topic")
        .writeStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    _await(q)
    back = read_df(spark, bootstrap, subscribe=target).collect()
    assert sorted(bytes(r["value"]) for r in back) == sorted(v for _, v, _, _ in rows)


def test_write_and_read_over_sasl_scram(spark, broker_factory, tmp_path):
    """Issue #8: kafka.security.protocol / kafka.sasl.mechanism / kafka.sasl.jaas.config
    pass through to the client (driver and executors) and to the producer."""
    b = broker_factory(sasl_overrides(tmp_path))
    sasl_address = b.listener("SASL_PLAINTEXT")
    topic = create_topic(b.bootstrap, partitions=2, prefix="spark-sasl")
    sasl = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule"
        f' required username="alice" password="{USERS["alice"]}";',
    }
    rows = [(f"k{i}", f"v{i}".encode(), i % 2) for i in range(100)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int")
    df.write.format("tidegate").option("kafka.bootstrap.servers", sasl_address).option(
        "topic", topic
    ).options(**sasl).mode("append").save()
    got = read_df(spark, sasl_address, subscribe=topic, **sasl).collect()
    assert sorted(
        (r["key"].decode(), bytes(r["value"]), r["partition"]) for r in got
    ) == sorted(rows)
    # a wrong password fails the query with the broker's message, at once
    bad = {**sasl, "kafka.sasl.jaas.config": sasl["kafka.sasl.jaas.config"].replace(
        USERS["alice"], "wrong")}  # fmt: skip
    started = time.monotonic()
    with pytest.raises(Exception, match="Authentication failed"):
        read_df(spark, sasl_address, subscribe=topic, **bad).collect()
    assert time.monotonic() - started < 30


def test_write_rejects_bad_columns(spark, broker):
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="value attribute type must be a String or BinaryType"):
        df.write.format("tidegate").option("kafka.bootstrap.servers", broker.bootstrap).option(
            "topic", "x"
        ).mode("append").save()
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic option required when no 'topic' attribute"):
        df.write.format("tidegate").option("kafka.bootstrap.servers", broker.bootstrap).mode(
            "append"
        ).save()


# -- data loss -------------------------------------------------------------------------------------


def test_fail_on_data_loss(spark, broker_factory):
    """Offsets deleted by retention fail the read, or are skipped with failOnDataLoss=false."""
    b = broker_factory(
        {
            "log.segment.bytes": "2048",
            "log.retention.bytes": "4096",
            "log.retention.check.interval.ms": "200",
        }
    )
    topic = create_topic(b.bootstrap, partitions=1, prefix="spark")
    recs = make_records(400, base_timestamp(), headers=False)
    for i in range(0, 400, 20):  # many small batches: many segments
        produce_to(b.bootstrap, topic, 0, recs[i : i + 20])

    def log_start() -> int:
        with KafkaClient(b.bootstrap) as c:
            return list_offsets(c, {(topic, 0): -2})[(topic, 0)]

    wait_until(lambda: log_start() > 0, 30, what="retention deleting a segment", interval=0.2)
    earliest = log_start()
    opts = {"assign": f'{{"{topic}":[0]}}', "startingOffsets": f'{{"{topic}":{{"0":0}}}}'}
    with pytest.raises(Exception, match="Some data may have been lost"):
        read_df(spark, b.bootstrap, **opts).collect()
    got = read_df(spark, b.bootstrap, failOnDataLoss="false", **opts).select("offset").collect()
    offsets = sorted(r["offset"] for r in got)
    assert offsets and offsets[0] >= earliest and offsets[-1] == 399
    assert offsets == list(range(offsets[0], 400))
