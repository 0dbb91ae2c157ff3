"""The ``tidegate`` Spark data source: Kafka's protocol from a Spark 4 Python Data Source.

Reads and writes any Kafka-compatible broker with nothing but pip (no
spark-sql-kafka jar), with the options, row schema and offsets JSON of Spark's
built-in Kafka source:

- :class:`KafkaDataSource` — ``spark.read/readStream/write/writeStream.format("tidegate")``;
- :class:`KafkaBatchReader` — one input partition per topic-partition and offset range
  (split further by ``minPartitions`` / ``maxRecordsPerPartition``);
- :class:`KafkaStreamReader` — offsets are the startingOffsets JSON shape
  (``{"topic": {"0": 42}}``); ``maxOffsetsPerTrigger`` is split across partitions in
  proportion to their lag; ``Trigger.AvailableNow`` stops at the offsets seen when the
  query started;
- :class:`KafkaBatchWriter` / :class:`KafkaStreamWriter` — rows go through
  :class:`tidegate.producer.Producer` (at-least-once).

The driver resolves offsets with ListOffsets; executors read their range with Fetch,
at most ``max.partition.fetch.bytes`` per request, and yield Arrow record batches of
at most :data:`ARROW_BATCH_ROWS` rows, so an executor holds one fetch response and
one Arrow batch at a time whatever the size of its range.

With ``kafka.isolation.level=read_committed`` (Spark's option) the latest offsets are
last stable offsets and executors drop aborted transactions as Kafka's consumer does;
at either level transaction markers never become rows. Rows carry their real
offsets; a range ``[start, end)`` is read to its end even when its last offsets are
markers or aborted records, so micro-batches neither stall nor repeat.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidegate.client import KafkaClient
from tidegate.client.fetcher import (
    FetchOffsetOutOfRangeError,
    end_offsets,
    list_offsets,
    read_range_batches,
)
from tidegate.errors import AuthenticationError, KafkaError

from .offsets import (
    EARLIEST,
    LATEST,
    TopicPartition,
    format_tps,
    json_to_offsets,
    offsets_to_dict,
)
from .options import (
    INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE,
    INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE,
    OffsetSpec,
    ReadOptions,
    WriteOptions,
    consumer_settings,
)

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older Spark 4.x
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


__all__ = [
    "ARROW_BATCH_ROWS",
    "KafkaBatchReader",
    "KafkaBatchWriter",
    "KafkaDataSource",
    "KafkaInputPartition",
    "KafkaStreamReader",
    "KafkaStreamWriter",
    "kafka_schema",
]

log = logging.getLogger("tidegate.spark")

#: Rows per Arrow record batch an executor yields.
ARROW_BATCH_ROWS = 10_000


def kafka_schema(include_headers: bool = False) -> StructType:
    """The row schema of Spark's Kafka source: ``key binary, value binary, topic string,
    partition int, offset long, timestamp timestamp, timestampType int`` plus
    ``headers array<struct<key:string,value:binary>>`` with includeHeaders. Built from
    types, not DDL: Python workers have no SparkContext to parse DDL with."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


# -- partitions and reading (executors) ---------------------------------------------------


class KafkaInputPartition(InputPartition):
    """``[start, end)`` of one topic-partition. Plain attributes: pickled to executors."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _client(settings: Mapping[str, Any]) -> KafkaClient:
    return KafkaClient(
        settings["bootstrap_servers"],
        client_id=settings["client_id"],
        request_timeout_ms=settings["request_timeout_ms"],
        reconnect_backoff_ms=settings["reconnect_backoff_ms"],
        reconnect_backoff_max_ms=settings["reconnect_backoff_max_ms"],
        socket_connection_setup_timeout_ms=settings["socket_connection_setup_timeout_ms"],
        receive_buffer_bytes=settings["receive_buffer_bytes"],
        send_buffer_bytes=settings["send_buffer_bytes"],
        security=settings["security"],
    )


def _report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Spark's ``reportDataLoss``: fail the query, or log and go on."""
    if fail_on_data_loss:
        raise KafkaDataLossError(f"{message}. {INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE}")
    log.warning("%s. %s", message, INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE)


class KafkaDataLossError(RuntimeError):
    """Offsets a query needs are gone from Kafka (Spark's IllegalStateException with
    the failOnDataLoss instruction)."""


@dataclass(frozen=True)
class _ReadConfig:
    """What an executor needs to read a partition (picklable, no live objects)."""

    settings: dict[str, Any]
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    arrow: bool


def read_partition(cfg: _ReadConfig, part: KafkaInputPartition) -> Iterator[Any]:
    """Read one input partition: Arrow record batches of the Kafka schema (or tuples
    when ``cfg.arrow`` is false)."""
    tp = (part.topic, part.partition)
    settings = cfg.settings

    def on_out_of_range(err: FetchOffsetOutOfRangeError) -> int | None:
        if 0 <= err.log_start_offset and err.offset < err.log_start_offset:
            _report_data_loss(
                f"Cannot fetch offset {err.offset} (TopicPartition: {tp[0]}-{tp[1]}): the "
                f"earliest offset available is {err.log_start_offset}, so offsets "
                f"[{err.offset}, {min(err.log_start_offset, part.end)}) are lost",
                cfg.fail_on_data_loss,
            )
            return err.log_start_offset
        _report_data_loss(
            f"Cannot fetch offset {err.offset} (TopicPartition: {tp[0]}-{tp[1]}): the "
            f"partition ends at {err.high_watermark} (was the topic deleted and recreated?), "
            f"so offsets [{err.offset}, {part.end}) are lost",
            cfg.fail_on_data_loss,
        )
        return None

    client = _client(settings)
    try:
        batches = read_range_batches(
            client,
            tp,
            part.start,
            part.end,
            partition_max_bytes=settings["partition_max_bytes"],
            max_wait_ms=settings["fetch_max_wait_ms"],
            isolation_level=settings["isolation_level"],
            timeout_ms=cfg.poll_timeout_ms,
            on_out_of_range=on_out_of_range,
        )
        if cfg.arrow:
            yield from _arrow_batches(batches, part.topic, part.partition, cfg.include_headers)
        else:
            yield from _tuples(batches, part.topic, part.partition, cfg.include_headers)
    finally:
        client.close()


def _tuples(batches, topic: str, partition: int, include_headers: bool) -> Iterator[tuple]:
    import datetime

    utc = datetime.UTC
    from_ts = datetime.datetime.fromtimestamp
    for recs in batches:
        for off, ts, ts_type, key, value, headers in recs:
            row: tuple[object, ...] = (
                key, value, topic, partition, off, from_ts(ts / 1000, utc), ts_type
            )
            if include_headers:
                row += ([(k, v) for k, v in headers],)
            yield row


_arrow_schemas: dict[bool, Any] = {}


def _arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema Spark expects of a Python source's batches (its own conversion
    of the Kafka schema, timestamps in UTC)."""
    s = _arrow_schemas.get(include_headers)
    if s is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        s = to_arrow_schema(kafka_schema(include_headers), timezone="UTC")
        _arrow_schemas[include_headers] = s
    return s


def _arrow_batches(batches, topic: str, partition: int, include_headers: bool) -> Iterator[Any]:
    """Record batches of about :data:`ARROW_BATCH_ROWS` rows: records are collected
    as decoded (tuples) and turned into columns with one ``zip`` per Arrow batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema(include_headers)
    types = [f.type for f in schema]

    def build(recs: list) -> Any:
        n = len(recs)
        offsets, timestamps, ts_types, keys, values, headers = zip(*recs)
        arrays = [
            pa.array(keys, types[0]),
            pa.array(values, types[1]),
            pa.array([topic] * n, types[2]),
            pa.array([partition] * n, types[3]),
            pa.array(offsets, types[4]),
            # ms since the epoch -> Spark's microseconds, UTC
            pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(types[5]),
            pa.array(ts_types, types[6]),
        ]
        if include_headers:
            arrays.append(
                pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], types[7])
            )
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    pending: list = []
    for recs in batches:
        pending.extend(recs)
        if len(pending) >= ARROW_BATCH_ROWS:
            yield build(pending)
            pending = []
    if pending:
        yield build(pending)


# -- offsets on the driver ------------------------------------------------------------------


class _OffsetReader:
    """The driver's view of the subscribed partitions and their offsets (Spark's
    ``KafkaOffsetReader``), over one :class:`KafkaClient`."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.settings = consumer_settings(opts.kafka)
        self._client: KafkaClient | None = None

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            self._client = _client(self.settings)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def partitions(self) -> list[TopicPartition]:
        """The topic-partitions the strategy selects now."""
        opts = self.opts
        timeout = self.settings["request_timeout_ms"]
        if opts.strategy == "assign":
            return sorted(set(opts.assigned))
        if opts.strategy == "subscribe":
            cluster = self.client.metadata(list(opts.topics), timeout_ms=timeout)
            names = [t for t in opts.topics if cluster.topic_error(t) == 0]
        else:
            cluster = self.client.metadata(None, timeout_ms=timeout)
            names = [t for t in cluster.topics if not t.startswith("__") and opts.matches(t)]
        out = []
        for t in names:
            for p in cluster.partitions_for_topic(t):
                out.append((t, p.partition))
        return sorted(out)

    def _retrying(self, call: Any) -> dict[TopicPartition, int]:
        """``call()`` up to fetchoffset.numRetries times, fetchoffset.retryIntervalMs apart."""
        attempts = max(1, self.opts.fetch_offset_num_retries)
        for i in range(attempts):
            try:
                return call()
            except KafkaError as exc:
                if i == attempts - 1 or isinstance(exc, AuthenticationError):
                    raise  # the same credentials fail again: no point in retrying
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def _list(self, targets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets at the query's isolation level; LATEST (-1) targets are resolved
        to the high watermark (read_committed: the last stable offset)."""
        if not targets:
            return {}
        iso = self.settings["isolation_level"]
        timeout = self.settings["request_timeout_ms"]
        latest = [tp for tp, o in targets.items() if o == LATEST]
        others = {tp: o for tp, o in targets.items() if o != LATEST}
        out: dict[TopicPartition, int] = {}
        if others:
            out.update(
                self._retrying(
                    lambda: list_offsets(
                        self.client, others, isolation_level=iso, timeout_ms=timeout
                    )
                )
            )
        if latest:
            out.update(
                self._retrying(
                    lambda: end_offsets(
                        self.client, latest, isolation_level=iso, timeout_ms=timeout
                    )
                )
            )
        return out

    def earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(dict.fromkeys(tps, EARLIEST))

    def latest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(dict.fromkeys(tps, LATEST))

    def resolve(
        self, spec: OffsetSpec, tps: Sequence[TopicPartition], *, starting: bool
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for ``tps`` from a starting/ending spec."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            specified = spec.offsets
            if set(specified) != set(tps):
                raise ValueError(
                    "If startingOffsets contains specific offsets, you must specify all "
                    "TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
                    f"Specified: {format_tps(specified)} Assigned: {format_tps(tps)}"
                    if starting
                    else "If endingOffsets contains specific offsets, you must specify all "
                    "TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
                    f"Specified: {format_tps(specified)} Assigned: {format_tps(tps)}"
                )
            concrete = {tp: o for tp, o in specified.items() if o >= 0}
            concrete.update(self._list({tp: o for tp, o in specified.items() if o < 0}))
            return concrete
        # timestamps
        if spec.kind == "timestamp":
            assert spec.timestamp is not None  # options.py builds this kind with one
            targets = dict.fromkeys(tps, spec.timestamp)
        else:
            if set(spec.offsets) != set(tps):
                raise ValueError(
                    "If starting/endingOffsetsByTimestamp contains specific offsets, you must "
                    f"specify all topics. Specified: {format_tps(spec.offsets)} "
                    f"Assigned: {format_tps(tps)}"
                )
            targets = dict(spec.offsets)
        found = self._list(targets)
        missing = [tp for tp, o in found.items() if o < 0]
        if missing:
            if starting and self.opts.no_match_strategy == "latest" or not starting:
                found.update(self.latest(missing))
            else:
                tp = missing[0]
                raise ValueError(
                    f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                    f"timestamp {targets[tp]}."
                )
        return found


def _split_ranges(
    ranges: list[tuple[TopicPartition, int, int]],
    min_partitions: int | None,
    max_records: int | None,
) -> list[KafkaInputPartition]:
    """Spark's ``KafkaOffsetRangeCalculator``: one partition per range, split further so
    there are at least ``minPartitions`` (big ranges split in proportion to their size)
    and none holds more than ``maxRecordsPerPartition``."""
    ranges = [r for r in ranges if r[2] > r[1]]
    total = sum(e - s for _, s, e in ranges)
    out = []
    for (t, p), s, e in ranges:
        size = e - s
        parts = 1
        if min_partitions and min_partitions > len(ranges) and total > 0:
            parts = max(parts, round(size / total * min_partitions))
        if max_records:
            parts = max(parts, math.ceil(size / max_records))
        parts = max(1, min(parts, size))
        step = size / parts
        for i in range(parts):
            a = s + round(i * step)
            b = e if i == parts - 1 else s + round((i + 1) * step)
            if b > a:
                out.append(KafkaInputPartition(t, p, a, b))
    return out


def _rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Spark's ``KafkaMicroBatchStream.rateLimit``: ``limit`` offsets split across
    partitions in proportion to their lag (a share below one rounds up, others down)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start}
    sizes = {tp: n for tp, n in sizes.items() if n > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + n)
    return out


# -- the data source -------------------------------------------------------------------------


class KafkaDataSource(DataSource):
    """``format("tidegate")``: Spark's Kafka source and sink over Kafka's protocol."""

    @classmethod
    def name(cls) -> str:
        return "tidegate"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return kafka_schema(include)

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        if overwrite:
            raise ValueError(
                "Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
                "ErrorIfExists (default)."
            )
        return KafkaBatchWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(WriteOptions.parse(self.options), schema)


def _read_config(opts: ReadOptions) -> _ReadConfig:
    return _ReadConfig(
        consumer_settings(opts.kafka),
        opts.include_headers,
        opts.fail_on_data_loss,
        opts.poll_timeout_ms,
        opts.arrow,
    )


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.cfg = _read_config(opts)

    def partitions(self) -> Sequence[InputPartition]:
        offsets = _OffsetReader(self.opts)
        try:
            tps = offsets.partitions()
            start = offsets.resolve(self.opts.starting, tps, starting=True)
            end = offsets.resolve(self.opts.ending, tps, starting=False)
        finally:
            offsets.close()
        ranges = []
        for tp in tps:
            s, e = start[tp], end[tp]
            if s > e:
                raise ValueError(
                    f"The starting offset ({s}) is greater than the ending offset ({e}) for "
                    f"topic partition {tp[0]}-{tp[1]}"
                )
            ranges.append((tp, s, e))
        parts = _split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        # Spark needs at least one partition to plan a scan
        return parts or [KafkaInputPartition("", -1, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaInputPartition)
        if partition.end <= partition.start:
            return iter(())
        return read_partition(self.cfg, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Offsets are ``{"topic": {"partition": offset}}``."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.cfg = _read_config(opts)
        self._offsets: _OffsetReader | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow

    # the reader is pickled to executors for read(): no sockets in its state
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offsets"] = None
        return state

    @property
    def offsets(self) -> _OffsetReader:
        if self._offsets is None:
            self._offsets = _OffsetReader(self.opts)
        return self._offsets

    def initialOffset(self) -> dict:
        tps = self.offsets.partitions()
        start = self.offsets.resolve(self.opts.starting, tps, starting=True)
        log.info("initial offsets %s", start)
        return offsets_to_dict(start)

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.offsets.partitions()
        self._target = self.offsets.latest(tps)
        log.info("Trigger.AvailableNow: reading up to %s", self._target)

    def _latest(self) -> dict[TopicPartition, int]:
        if self._target is not None:
            return dict(self._target)
        return self.offsets.latest(self.offsets.partitions())

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        latest = self._latest()
        if start is None:
            return offsets_to_dict(latest)
        begin = json_to_offsets(start)
        # partitions that appeared since `start` begin at their earliest offset
        new = [tp for tp in latest if tp not in begin]
        begin_all = dict(begin)
        if new:
            begin_all.update(self.offsets.earliest(new))
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            end = _rate_limit(limit.max_rows, begin_all, latest)
        else:
            end = latest
        # a partition whose end went below its start (recreated topic) is left where
        # it is here and reported by partitions()
        return offsets_to_dict(end)

    def reportLatestOffset(self) -> dict | None:
        try:
            return offsets_to_dict(self.offsets.latest(self.offsets.partitions()))
        except KafkaError:
            return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = json_to_offsets(start)
        until = json_to_offsets(end)
        new = [tp for tp in until if tp not in begin]
        new_start = self.offsets.earliest(new) if new else {}
        for tp, off in new_start.items():
            if off != 0:
                log.info("new partition %s-%s starts at its earliest offset %d", *tp, off)
        deleted = [tp for tp in begin if tp not in until]
        if deleted:
            _report_data_loss(f"{format_tps(deleted)} are gone", self.opts.fail_on_data_loss)
        ranges = []
        for tp, e in until.items():
            s = begin[tp] if tp in begin else new_start[tp]
            if e < s:
                _report_data_loss(
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {e}, some "
                    "data may have been missed",
                    self.opts.fail_on_data_loss,
                )
                continue
            ranges.append((tp, s, e))
        return _split_ranges(ranges, self.opts.min_partitions, None)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(self.cfg, partition)

    def commit(self, end: dict) -> None:
        # Spark tracks the offsets in its checkpoint; nothing is committed to Kafka
        log.debug("committed %s", end)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


# -- writing ------------------------------------------------------------------------------------


class KafkaWriteCommitMessage(WriterCommitMessage):
    def __init__(self, records: int) -> None:
        self.records = records


_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def validate_write_schema(schema: StructType | None, topic_option: str | None) -> None:
    """Spark's ``KafkaWriter.validateQuery``: the columns a Kafka sink accepts."""
    if schema is None:
        return
    types = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    if topic_option is None:
        if "topic" not in types:
            raise ValueError(
                "topic option required when no 'topic' attribute is present. Use the topic "
                "option for setting a topic."
            )
        if types["topic"] != "string":
            raise ValueError("Topic type must be a String")
    elif "topic" in types and types["topic"] != "string":
        raise ValueError("Topic type must be a String")
    if "key" in types and types["key"] not in ("string", "binary"):
        raise ValueError("key attribute type must be a String or BinaryType")
    if "value" not in types:
        raise ValueError("Required attribute 'value' not found")
    if types["value"] not in ("string", "binary"):
        raise ValueError("value attribute type must be a String or BinaryType")
    if "headers" in types and types["headers"] != _HEADERS_TYPE:
        raise ValueError(f"headers attribute type must be a {_HEADERS_TYPE}")
    if "partition" in types and types["partition"] != "int":
        raise ValueError("partition attribute type must be an int")


def write_rows(wopts: WriteOptions, rows: Iterator[Any]) -> KafkaWriteCommitMessage:
    """Send every row with :class:`tidegate.producer.Producer`; wait for all of them and
    fail the task if any failed (so Spark retries it: at-least-once)."""
    from tidegate.producer import Producer

    conf: dict[str, Any] = dict(wopts.kafka)
    conf.setdefault("client.id", "tidegate-spark-writer")
    producer = Producer(conf)
    errors: list[BaseException] = []

    def on_delivery(_md: Any, exc: BaseException | None) -> None:
        if exc is not None and not errors:
            errors.append(exc)

    n = 0
    try:
        for row in rows:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = wopts.topic if wopts.topic is not None else d.get("topic")
            if topic is None:
                raise ValueError(
                    "null topic present in the data. Use the topic option for setting a topic."
                )
            headers = d.get("headers")
            if headers:
                headers = [(h[0], h[1]) for h in headers]
            producer.send(
                topic,
                d.get("value"),
                key=d.get("key"),
                partition=d.get("partition"),
                headers=headers or None,
                on_delivery=on_delivery,
            )
            n += 1
            if errors:
                raise errors[0]
        producer.flush()
        if errors:
            raise errors[0]
    finally:
        producer.close()
    return KafkaWriteCommitMessage(n)


class KafkaBatchWriter(DataSourceWriter):
    def __init__(self, wopts: WriteOptions, schema: StructType | None) -> None:
        validate_write_schema(schema, wopts.topic)
        self.wopts = wopts

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_rows(self.wopts, iterator)


class KafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, wopts: WriteOptions, schema: StructType | None) -> None:
        validate_write_schema(schema, wopts.topic)
        self.wopts = wopts

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_rows(self.wopts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(getattr(m, "records", 0) for m in messages if m is not None)
        log.info("micro-batch %d: %d records written", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; records already sent stay in Kafka", batchId)
