"""Client-independent helpers for the integration tests.

The three client test modules (confluent-kafka, kafka-python, aiokafka) produce the
same deterministic record set, normalise what they consume into :class:`Got`, and
check it with the helpers here, so "exactly what was sent" means the same thing for
every client.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Compression codecs under test, as the producers spell them ("none" = uncompressed).
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Which acks each codec's run uses, so every client exercises acks=0, 1 and all.
ACKS_BY_CODEC = {"none": 0, "gzip": 1, "snappy": -1, "lz4": 1, "zstd": -1}

RECORDS_PER_CODEC = 10_000

#: Topic config of the per-codec round trips: small segments, so 10,000 records span
#: several segment files and reads, timestamp lookups and recovery cross segment edges.
ROUNDTRIP_TOPIC_CONFIG = {"segment.bytes": "131072"}

#: Kafka's TimestampType: 0 CreateTime, 1 LogAppendTime (kafka-python and aiokafka use these).
CREATE_TIME = 0
LOG_APPEND_TIME = 1

UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass(frozen=True, slots=True)
class Rec:
    """A record as the producer sends it."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True, slots=True)
class Got:
    """A record as a consumer returned it, in client-neutral form."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    timestamp_type: int  # CREATE_TIME or LOG_APPEND_TIME


def base_timestamp() -> int:
    """A CreateTime an hour in the past: clearly not the broker's clock."""
    return int(time.time() * 1000) - 3_600_000


def make_records(
    n: int,
    base_ts: int,
    *,
    seed: int = 7,
    headers: bool = True,
    ts_step: Callable[[int], int] | None = None,
) -> list[Rec]:
    """``n`` deterministic records with awkward edges: null keys, null and empty values,
    binary payloads, repeated header keys, compressible and incompressible data, and
    non-decreasing timestamps with ties (``base_ts + i // 3`` by default)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 101 == 50 else b"key-%06d" % i
        if i % 257 == 100:
            value = None
        elif i % 263 == 7:
            value = b""
        elif i % 2:
            value = rnd.randbytes(rnd.randrange(1, 200))
        else:
            value = (b"value %d " % i) * rnd.randrange(1, 20)
        hdrs: tuple[tuple[str, bytes], ...] = ()
        if headers:
            hdrs = (("idx", str(i).encode()),)
            if i % 3 == 0:
                hdrs += (("bin", rnd.randbytes(rnd.randrange(0, 16))),)
            if i % 5 == 0:
                hdrs += (("dup", b"first"), ("dup", b"second"), ("empty", b""))
        ts = base_ts + (ts_step(i) if ts_step is not None else i // 3)
        out.append(Rec(key, value, hdrs, ts))
    return out


def assert_records_match(
    sent: Sequence[Rec],
    got: Sequence[Got],
    *,
    first_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
    check_timestamps: bool = True,
) -> None:
    """Every record back, in order, field for field, at contiguous offsets."""
    assert len(got) == len(sent), f"consumed {len(got)} records, produced {len(sent)}"
    offsets = [g.offset for g in got]
    expected_offsets = list(range(first_offset, first_offset + len(sent)))
    if offsets != expected_offsets:
        bad = next(i for i, (a, b) in enumerate(zip(offsets, expected_offsets)) if a != b)
        raise AssertionError(f"offsets not contiguous at #{bad}: {offsets[bad : bad + 5]}...")
    for i, (s, g) in enumerate(zip(sent, got)):
        where = f"record #{i} (offset {g.offset})"
        assert g.key == s.key, f"{where}: key {g.key!r} != {s.key!r}"
        assert g.value == s.value, f"{where}: value {g.value!r} != {s.value!r}"
        assert g.headers == s.headers, f"{where}: headers {g.headers!r} != {s.headers!r}"
        assert g.timestamp_type == timestamp_type, f"{where}: timestamp type {g.timestamp_type}"
        if check_timestamps:
            assert g.timestamp == s.timestamp, f"{where}: timestamp {g.timestamp} != {s.timestamp}"


def first_at_or_after(sent: Sequence[Rec], ts: int) -> int | None:
    """Index of the first record with timestamp >= ``ts`` (Kafka's offsetsForTimes answer)."""
    for i, r in enumerate(sent):
        if r.timestamp >= ts:
            return i
    return None


def timestamp_queries(sent: Sequence[Rec]) -> list[int]:
    """Target timestamps worth asking about: before the first record, exact hits,
    ties, between records and the last one."""
    first, last = sent[0].timestamp, sent[-1].timestamp
    mid = sent[len(sent) // 2].timestamp
    return sorted(
        {first - 1000, first, first + 1, mid, mid + 1, (first + last) // 2, last - 1, last}
    )


def check_offset_for_time(
    sent: Sequence[Rec],
    query: int,
    offset: int | None,
    timestamp: int | None = None,
    *,
    exact: bool = False,
) -> None:
    """Check a ListOffsets-by-timestamp answer against what was sent (offsets from 0).

    tidegate answers with the base offset of the first batch whose max timestamp is
    >= the query, so in general the answer is at or before the first record with a
    timestamp >= the query; with one record per batch (``exact``) it is that record.
    ``timestamp`` (when the client reports it) is the batch's max timestamp: >= query.
    """
    expected = first_at_or_after(sent, query)
    if expected is None:
        assert offset is None or offset == -1, f"query {query} past the last record gave {offset}"
        return
    assert offset is not None and offset >= 0, f"query {query}: no offset, expected {expected}"
    if exact or expected == 0:
        assert offset == expected, f"query {query}: offset {offset}, expected {expected}"
    else:
        assert offset <= expected, f"query {query}: offset {offset} is after {expected}"
    if timestamp is not None and timestamp != -1:
        assert timestamp >= query, f"query {query}: returned timestamp {timestamp} is earlier"
        # The reported timestamp is one that a record at or after the answer carries.
        assert any(r.timestamp == timestamp for r in sent[offset:]), (
            f"query {query}: timestamp {timestamp} is not that of any record at or after {offset}"
        )


def segment_count(data_dir: Path, topic: str, partition: int = 0) -> int:
    return len(list((data_dir / f"{topic}-{partition}").glob("*.log")))


_topic_seq = 0


def create_topic(bootstrap: str, partitions: int, prefix: str = "t") -> str:
    """A fresh topic through tidegate's own client (CreateTopics v?: whatever both sides
    speak); its name is unique per process and call."""
    import os

    from tidegate.client import KafkaClient

    global _topic_seq
    _topic_seq += 1
    name = f"{prefix}-{os.getpid()}-{_topic_seq}-{int(time.time() * 1000) % 100000}"
    with KafkaClient(bootstrap) as c:
        r = c.request(
            19,
            {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                "timeout": 10_000,
            },
            timeout_ms=15_000,
        )
        assert int(r.topics[0].error_code) == 0, r
    return name


def roundtrip_confluent(conf: dict, n: int = 50, prefix: str = "rt") -> list[bytes]:
    """Create a one-partition topic, produce ``v0..v{n-1}`` with confluent-kafka (acks=all)
    and read them back by assign from offset 0, all with the client config ``conf``
    (security settings included). Returns the values read within 20 s."""
    import uuid

    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=b"k")
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got
