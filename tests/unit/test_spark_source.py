"""The Spark source's pure parts, without Spark or a broker: the consumer-side record
decoder, option validation (Spark's messages), the offsets JSON, the proportional
maxOffsetsPerTrigger split and the input-partition split."""

from __future__ import annotations

import struct

import pytest

from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.compression import CODECS, compress
from tidegate.record.records import (
    LOG_APPEND_TIME,
    RecordDecodeError,
    decode_records,
)
from tidegate.spark.offsets import (
    json_to_offsets,
    offsets_to_dict,
    offsets_to_json,
    parse_partition_offsets,
    parse_partitions,
)
from tidegate.spark.options import ReadOptions, WriteOptions, consumer_settings

RECORDS = [
    Record(b"v0", b"k0", 1_000, (("h", b"x"), ("h", b"y"))),
    Record(None, None, 1_005, ()),
    Record(b"", b"k2", 1_002, (("n", None),)),
    Record(bytes(range(256)) * 10, b"k3", 1_010, ()),
]


def _compressed(batch: bytearray, codec: int) -> bytes:
    """``batch`` with its records section compressed (attributes and length fixed up;
    the decoder does not check the CRC)."""
    head, body = bytearray(batch[:61]), bytes(batch[61:])
    out = head + compress(codec, body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, attrs | codec)
    return bytes(out)


@pytest.mark.parametrize("codec", list(CODECS))
def test_decode_every_codec(codec):
    raw = build_batch(RECORDS, base_offset=40)
    buf = bytes(raw) if codec == "none" else _compressed(raw, CODECS[codec])
    got = list(decode_records(buf))
    assert [r.offset for r in got] == [40, 41, 42, 43]
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in RECORDS]
    assert [r.headers for r in got] == [tuple(r.headers) for r in RECORDS]
    assert [r.timestamp for r in got] == [1_000, 1_005, 1_002, 1_010]
    assert {r.timestamp_type for r in got} == {0}


def test_control_batches_skipped_and_log_append_time():
    control = build_batch([Record(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x00")],
                          base_offset=2, control=True, transactional=True, producer_id=7)  # fmt: skip
    data = build_batch(RECORDS[:2], base_offset=3, log_append_time=True)
    got = list(decode_records(bytes(build_batch(RECORDS[:2])) + bytes(control) + bytes(data)))
    assert [r.offset for r in got] == [0, 1, 3, 4]
    # LogAppendTime: every record carries the batch's max timestamp
    assert [(r.timestamp_type, r.timestamp) for r in got[2:]] == [(LOG_APPEND_TIME, 1_005)] * 2


def test_partial_trailing_batch_is_ignored_and_garbage_refused():
    a, b = bytes(build_batch(RECORDS, base_offset=0)), bytes(build_batch(RECORDS, base_offset=4))
    for cut in (5, 30, len(b) - 1):
        assert [r.offset for r in decode_records(a + b[:cut])] == [0, 1, 2, 3]
    legacy = bytearray(a)
    legacy[16] = 1  # magic 1
    with pytest.raises(RecordDecodeError, match="only v2"):
        list(decode_records(bytes(legacy)))


# -- options ---------------------------------------------------------------------------------------

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def _parse(streaming=False, **opts):
    return ReadOptions.parse({**BOOT, **opts}, streaming=streaming)


@pytest.mark.parametrize(
    ("opts", "streaming", "message"),
    [
        ({}, False, ("One of the following options must be specified for Kafka source: "
                    "subscribe, subscribepattern, assign. See the docs for more details.")),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, False,
         "Only one of the following options can be specified for Kafka source"),
        ({"subscribe": " , "}, False, ("No topics to subscribe to as specified value for option "
                                      "'subscribe' is ' , '")),
        ({"subscribePattern": "  "}, False, "Pattern to subscribe is empty"),
        ({"assign": "a:0"}, False, ("No topicpartitions to assign as specified value for option "
                                   "'assign' is 'a:0'")),
        ({"assign": '{"a":0}'}, False, 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got'),
        ({"subscribe": "a", "startingOffsets": "latest"}, False,
         "starting offset can't be latest for batch queries on Kafka"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False,
         "startingOffsets for a-0 can't be latest for batch queries on Kafka"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, False,
         "ending offset can't be earliest for batch queries on Kafka"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False,
         "ending offset for a-0 can't be earliest for batch queries on Kafka"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, False,
         'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {bad'),
        ({"subscribe": "a", "endingOffsets": "latest"}, True,
         "ending offset not valid in streaming queries"),
        ({"subscribe": "a", "kafka.group.id": "g"}, True, "Kafka option 'group.id' is not supported"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True,
         "Kafka option 'auto.offset.reset' is not supported"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, True,
         "Kafka option 'enable.auto.commit' is not supported"),
        ({"subscribe": "a", "kafka.value.deserializer": "x"}, True,
         "Kafka option 'value.deserializer' is not supported as values are deserialized"),
        ({"subscribe": "a", "minPartitions": "0"}, False, "minPartitions must be positive"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, False,
         "Expected a single long value, got soon"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":5}}',
          "endingOffsets": '{"a":{"0":3}}'}, False,
         ("The specified starting offset (5) is greater than ending offset (3) for topic "
         "partition a-0")),
        ({"subscribe": "a", "kafka.security.protocol": "SASL_PLAINTEXT",
          "kafka.sasl.jaas.config": "x required;"}, True, "Kafka's default is GSSAPI"),
        ({"subscribe": "a", "kafka.security.protocol": "SSL",
          "kafka.ssl.truststore.type": "JKS"}, False, "only PEM"),
    ],
)  # fmt: skip
def test_rejected_like_spark(opts, streaming, message):
    with pytest.raises(ValueError) as exc:
        _parse(streaming, **opts)
    assert message in str(exc.value)


def test_security_options_pass_through():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            'password="alice-secret";')
    opts = ReadOptions.parse(
        {"subscribe": "a", "kafka.bootstrap.servers": "h:1",
         "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
         "kafka.sasl.jaas.config": jaas},
        streaming=False,
    )  # fmt: skip
    sec = consumer_settings(opts.kafka)["security"]
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "alice-secret"
    )  # fmt: skip
    # the writer validates the same keys before any task starts
    with pytest.raises(ValueError, match="needs credentials"):
        WriteOptions.parse({"kafka.bootstrap.servers": "h:1",
                            "kafka.security.protocol": "SASL_SSL",
                            "kafka.sasl.mechanism": "PLAIN"})  # fmt: skip


def test_bootstrap_servers_required():
    with pytest.raises(ValueError, match="Option 'kafka.bootstrap.servers' must be specified"):
        ReadOptions.parse({"subscribe": "a"}, streaming=False)


def test_defaults_and_case_insensitive_keys():
    batch = _parse(SUBSCRIBE="a, b")
    assert batch.topics == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = _parse(True, subscribePattern="ev.+", FAILONDATALOSS="false", includeHeaders="TRUE",
                    maxOffsetsPerTrigger="100")  # fmt: skip
    assert stream.starting.kind == "latest"
    assert (stream.fail_on_data_loss, stream.include_headers) == (False, True)
    assert stream.max_offsets_per_trigger == 100
    assert stream.matches("events") and not stream.matches("xevents") and not stream.matches("ev")
    s = consumer_settings({"bootstrap.servers": "h:1", "max.partition.fetch.bytes": "4096"})
    assert s["partition_max_bytes"] == 4096 and s["fetch_max_wait_ms"] == 500


def test_isolation_level_as_kafkas_consumer_checks_it():
    assert consumer_settings({"bootstrap.servers": "h:1"})["isolation_level"] == 0
    opts = _parse(subscribe="a", **{"kafka.isolation.level": " read_committed "})
    assert consumer_settings(opts.kafka)["isolation_level"] == 1
    assert consumer_settings({"bootstrap.servers": "h:1",
                              "isolation.level": "read_uncommitted"})["isolation_level"] == 0
    # Kafka's ConfigDef.ValidString is case-sensitive: the executors' consumer refuses it
    with pytest.raises(ValueError, match=(
        "Invalid value READ_COMMITTED for configuration isolation.level: String must be one "
        "of: read_committed, read_uncommitted")):
        _parse(True, subscribe="a", **{"kafka.isolation.level": "READ_COMMITTED"})


def test_write_options():
    assert WriteOptions.parse({**BOOT, "TOPIC": " t "}).topic == "t"
    with pytest.raises(ValueError, match="'key.serializer' is not supported"):
        WriteOptions.parse({**BOOT, "kafka.key.serializer": "x"})


# -- offsets JSON ------------------------------------------------------------------------------------


def test_offsets_json_round_trip():
    offs = {("b", 1): 5, ("a", 10): -2, ("a", 2): 7}
    assert offsets_to_json(offs) == '{"a":{"2":7,"10":-2},"b":{"1":5}}'
    assert json_to_offsets(offsets_to_dict(offs)) == offs
    assert json_to_offsets(offsets_to_json(offs)) == offs
    assert parse_partition_offsets('{"t":{"0":23,"1":-1}}') == {("t", 0): 23, ("t", 1): -1}
    assert parse_partitions('{"t":[0,1],"u":[3]}') == [("t", 0), ("t", 1), ("u", 3)]


# -- rate limit and partition split (need pyspark for the module import) ----------------------------


def test_rate_limit_in_proportion_to_lag():
    source = pytest.importorskip("tidegate.spark.source")
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 700, ("t", 1): 300, ("t", 2): 50}
    assert source._rate_limit(250, start, latest) == {("t", 0): 175, ("t", 1): 75, ("t", 2): 50}
    # a share below one offset rounds up, so a small partition is never starved
    assert source._rate_limit(10, {("a", 0): 0, ("b", 0): 0}, {("a", 0): 1000, ("b", 0): 1}) == {
        ("a", 0): 9,
        ("b", 0): 1,
    }
    assert source._rate_limit(5, start, start) == start


def test_split_ranges():
    source = pytest.importorskip("tidegate.spark.source")
    parts = source._split_ranges([(("t", 0), 0, 90), (("t", 1), 5, 15), (("t", 2), 3, 3)], 4, None)
    assert sum(p.end - p.start for p in parts) == 100
    assert len(parts) >= 4 and all(p.end > p.start for p in parts)
    by_tp = sorted((p.partition, p.start, p.end) for p in parts)
    # minPartitions 4 over 100 offsets: t-0 (90) in four even parts, t-1 (10) whole,
    # the empty t-2 in none
    assert by_tp == [(0, 0, 22), (0, 22, 45), (0, 45, 68), (0, 68, 90), (1, 5, 15)]
    capped = source._split_ranges([(("t", 0), 0, 95)], None, 10)
    # at most 10 offsets each: 95 in ten parts, boundaries at round(9.5 * i)
    assert [(p.start, p.end) for p in capped] == [
        (0, 10), (10, 19), (19, 28), (28, 38), (38, 48),
        (48, 57), (57, 66), (66, 76), (76, 86), (86, 95),
    ]  # fmt: skip
    assert max(p.end - p.start for p in capped) <= 10
