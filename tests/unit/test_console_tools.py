"""The console tools' pure parts: Kafka's DefaultMessageFormatter and LineMessageReader,
and the range assignor (tidegate.client.group_member)."""

from __future__ import annotations

import pytest

from tidegate.cli.console import LineReader, MessageFormatter
from tidegate.client.group_member import range_assign
from tidegate.record.records import ConsumerRecord

REC = ConsumerRecord(offset=7, timestamp=1700000000000, timestamp_type=0, key=b"k", value=b"v",
                     headers=(("h1", b"a"), ("h2", None)))  # fmt: skip


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, b"v\n"),
        ({"print.key": "true"}, b"k\tv\n"),
        ({"print.timestamp": "true", "print.partition": "true", "print.offset": "true", "print.headers": "true",
          "print.key": "true"}, b"CreateTime:1700000000000\tPartition:3\tOffset:7\th1:a,h2:null\tk\tv\n"),
        ({"print.key": "true", "print.value": "false"}, b"k\n"),
        ({"print.offset": "true", "key.separator": " | ", "line.separator": "\r\n"}, b"Offset:7 | v\r\n"),
        ({"print.headers": "true", "headers.separator": ";", "null.literal": "-"}, b"h1:a;h2:-\tv\n"),
    ],
)
def test_the_formatter_prints_as_kafkas_default_message_formatter(props, expected):
    assert MessageFormatter(props).format(3, REC) == expected


def test_the_formatter_for_a_record_without_key_headers_or_timestamp():
    rec = REC._replace(key=None, headers=(), timestamp=-1, timestamp_type=0)
    fmt = MessageFormatter({"print.key": "true", "print.headers": "true", "print.timestamp": "true"})
    assert fmt.format(0, rec) == b"NO_TIMESTAMP\tNO_HEADERS\tnull\tv\n"
    assert MessageFormatter({"print.timestamp": "true"}).format(0, REC._replace(timestamp_type=1)) == (
        b"LogAppendTime:1700000000000\tv\n")


def test_the_line_reader_splits_as_kafkas_line_message_reader():
    reader = LineReader({"parse.key": "true", "parse.headers": "true", "null.marker": "NULL"})
    assert reader.parse("a:1,b:NULL\tkey\tvalue\twith tab", 1) == (
        b"key", b"value\twith tab", [("a", b"1"), ("b", None)])
    assert reader.parse("a:1\tNULL\tNULL", 2) == (None, None, [("a", b"1")])
    with pytest.raises(ValueError, match="No key separator found on line number 3: 'novalue'"):
        reader.parse("a:1\tnovalue", 3)
    with pytest.raises(ValueError, match="No header key separator found in pair 'bad' on line number 4"):
        reader.parse("bad\tk\tv", 4)
    lenient = LineReader({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse("just a value", 1) == (None, b"just a value", [])
    assert LineReader({}).parse("k\tv", 1) == (None, b"k\tv", [])


def test_the_range_assignor_is_kafkas():
    subs = {"m2": ["t", "u"], "m1": ["t"], "m3": ["t"]}
    plan = range_assign(subs, {"t": 7, "u": 2})
    # t: 7 over m1, m2, m3 in member order -> 3, 2, 2; u only m2
    assert plan == {"m1": [("t", 0), ("t", 1), ("t", 2)], "m2": [("t", 3), ("t", 4), ("u", 0), ("u", 1)],
                    "m3": [("t", 5), ("t", 6)]}  # fmt: skip
    assert range_assign({"a": ["t"], "b": ["t"]}, {"t": 1}) == {"a": [("t", 0)], "b": []}
