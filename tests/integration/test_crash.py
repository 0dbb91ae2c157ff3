"""Crash safety: kill -9 the broker mid-stream, restart, and find every acknowledged record.

A confluent-kafka producer (acks=all) streams distinct numbered records over
several partitions in a background thread and remembers every record whose
delivery report succeeded, with its offset. Once enough are acknowledged the
broker gets SIGKILL while the stream is still running, then starts again on the
same directory and port. A consumer reads every partition from the beginning:
each acknowledged (offset, value) must be there at exactly that offset, offsets
must run from 0 without gaps, every record must be intact (librdkafka checks the
CRCs), and producing afterwards must continue at the recovered log end.

A second test damages segment files while the broker is down (garbage appended
to one partition, another cut mid-batch) and checks that every whole batch is
still served and appends continue right after it.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from tidegate.errors import ErrorCode
from tidegate.record.batch_builder import Record, build_batch

from .clients import Got, ProducerThread, consume, create_topic, produce, read_to_end
from .rawclient import RawClient, produce_partition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TARGET_ACKED = 5000  # kill once this many records are acknowledged ...
PRODUCE_TIME_LIMIT = 15.0  # ... or after this long
MIN_ACKED = 500  # below this the test proves too little: fail rather than pass vacuously
VALUE_RE = re.compile(rb"^rec-(\d+)-p(\d+)-([0-9a-f]{8})$")


# -- helpers ----------------------------------------------------------------------------


def value_of(n: int, partition: int) -> bytes:
    # distinct, self-describing and checkable: a torn or mixed-up record cannot match
    tag = f"{(n * 2654435761 + partition) & 0xFFFFFFFF:08x}"
    return f"rec-{n}-p{partition}-{tag}".encode()


def check_value(value: bytes) -> tuple[int, int]:
    m = VALUE_RE.match(value)
    assert m is not None, f"not a record this test wrote: {value[:80]!r}"
    n, p = int(m.group(1)), int(m.group(2))
    assert value == value_of(n, p), f"record {n} is damaged: {value!r}"
    return n, p


def streaming_producer(bootstrap: str, topic: str, partitions: int, codec: str) -> ProducerThread:
    """rec-0, rec-1, ... round-robin over the partitions, acks=all, until stopped."""
    conf = {
        "acks": "all",
        "linger.ms": 2,
        "compression.type": codec,
        # many small requests rather than a few huge ones: the kill then lands
        # among dozens of in-flight batches on every partition
        "batch.num.messages": 50,
        "queue.buffering.max.messages": 3000,
        "enable.idempotence": False,
        # no retries: every value is sent once, so the log holds distinct values
        "message.send.max.retries": 0,
        "message.timeout.ms": 5000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200,
    }
    return ProducerThread(bootstrap, topic, conf, partitions=partitions, value_of=value_of)


def offsets_and_values(got: dict[int, list[Got]]) -> dict[int, list[tuple[int, bytes]]]:
    return {p: [(g.offset, g.value) for g in records] for p, records in got.items()}


def assert_log_intact(got: dict[int, list], acked: dict[tuple[int, int], bytes]) -> None:
    """Offsets contiguous from 0, values distinct and undamaged, every ack present where acked."""
    seen_values = set()
    for p, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(records))), f"partition {p}: offsets not contiguous from 0"
        last_n = -1
        for offset, value in records:
            n, vp = check_value(value)
            assert vp == p, f"record {n} of partition {vp} found in partition {p}"
            assert n > last_n, f"partition {p}: record {n} at offset {offset} after record {last_n}"
            last_n = n
            assert value not in seen_values, f"record {n} stored twice"
            seen_values.add(value)
    stored = {(p, o): v for p, records in got.items() for o, v in records}
    missing = [k for k in acked if k not in stored]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    wrong = [(k, acked[k], stored[k]) for k in acked if stored[k] != acked[k]]
    assert not wrong, f"{len(wrong)} acknowledged offsets hold other records, e.g. {wrong[:3]}"


def produce_after_restart(
    bootstrap: str, topic: str, partitions: int, codec: str, ends: dict[int, int]
) -> None:
    """New records land exactly at the recovered log end of each partition and read back."""
    per_partition = 20
    values = [f"after-{part}-{i}".encode() for part in range(partitions) for i in range(per_partition)]
    delivered = produce(bootstrap, topic, values, client="confluent", codec=codec, acks=-1,
                        linger_ms=2, partition=lambda i: i // per_partition)  # fmt: skip
    for part in range(partitions):
        offsets = sorted(d.offset for d in delivered if d.partition == part)
        assert offsets == list(range(ends[part], ends[part] + per_partition)), part
    got = consume(bootstrap, topic, partitions * per_partition, client="confluent",
                  partitions=partitions, start=ends, timeout=20)  # fmt: skip
    for part in range(partitions):
        assert [(g.offset, g.value) for g in got if g.partition == part] == [
            (ends[part] + i, f"after-{part}-{i}".encode()) for i in range(per_partition)
        ], part


# -- kill -9 mid-stream -------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_every_acknowledged_record_survives_kill_9(broker_factory, codec):
    partitions = 3
    topic = f"crash-{codec}"
    broker = broker_factory()
    create_topic(broker.bootstrap, topic, partitions, client="raw")

    stream = streaming_producer(broker.bootstrap, topic, partitions, codec)
    stream.start()
    deadline = time.monotonic() + PRODUCE_TIME_LIMIT
    while stream.acked_count < TARGET_ACKED and time.monotonic() < deadline and stream.is_alive():
        time.sleep(0.01)
    sent_before_kill = stream.sent
    broker.kill()  # SIGKILL while the producer is still sending
    time.sleep(0.3)  # let the producer run into the dead broker
    sent_after_kill = stream.sent
    stream.finish()
    acked = dict(stream.acked)
    print(f"{len(acked)} acknowledged, {stream.sent} sent, {stream.failed} failed")
    assert len(acked) >= MIN_ACKED, f"only {len(acked)} records acknowledged before the kill"
    assert sent_after_kill > sent_before_kill or stream.failed > 0, "the kill was not mid-stream"

    broker.start()
    log = broker.log_text()
    restart_at = log.rfind("config values:")
    assert re.search(r"recovered .*crash-.*unclean shutdown", log[restart_at:]), log[restart_at:][
        -3000:
    ]

    got = offsets_and_values(read_to_end(broker.bootstrap, topic, partitions))
    assert_log_intact(got, acked)
    # every partition received records, so the kill cut through several logs
    assert all(got[p] for p in range(partitions))
    ends = {p: len(got[p]) for p in range(partitions)}
    produce_after_restart(broker.bootstrap, topic, partitions, codec, ends)

    # and once more across a clean restart: nothing moves
    broker.stop()
    broker.start()
    again = offsets_and_values(read_to_end(broker.bootstrap, topic, partitions))
    for p in range(partitions):
        assert again[p][: ends[p]] == got[p]
        assert len(again[p]) == ends[p] + 20


# -- damaged tails ------------------------------------------------------------------------


def _produce_batches(
    client: RawClient, topic: str, partition: int, count: int
) -> list[list[bytes]]:
    batches = []
    for i in range(count):
        values = [f"{topic}-{partition}-b{i}-r{j}".encode() * 3 for j in range(3)]
        batch = bytes(build_batch([Record(v) for v in values]))
        part = produce_partition(client, topic, batch, partition=partition, acks=-1)
        assert (part.error_code, part.base_offset) == (ErrorCode.none, 3 * i)
        batches.append(values)
    return batches


def _last_segment(data_dir: Path, topic: str, partition: int) -> Path:
    segments = sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
    assert segments, f"no segment files for {topic}-{partition}"
    return segments[-1]


def _last_batch_size(path: Path) -> int:
    data = path.read_bytes()
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    assert pos == len(data)
    return len(data) - last


@pytest.mark.parametrize("shutdown", ["kill", "clean"])
def test_damaged_tail_is_cut_back_to_the_last_whole_batch(broker_factory, shutdown):
    topic = "tail"
    batches = 20
    broker = broker_factory({"log.index.interval.bytes": 256})
    create_topic(broker.bootstrap, topic, 3, client="raw")
    with RawClient.connect(broker.bootstrap) as c:
        written = {p: _produce_batches(c, topic, p, batches) for p in range(3)}
    if shutdown == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0

    # partition 0: garbage after the last batch
    seg0 = _last_segment(broker.data_dir, topic, 0)
    size0 = seg0.stat().st_size
    garbage = random.Random(42).randbytes(137)
    with open(seg0, "ab") as f:
        f.write(garbage)
    # partition 1: the last batch cut in half
    seg1 = _last_segment(broker.data_dir, topic, 1)
    size1 = seg1.stat().st_size
    last1 = _last_batch_size(seg1)
    with open(seg1, "r+b") as f:
        f.truncate(size1 - last1 // 2)
    # partition 2: untouched (control)

    broker.start()
    log = broker.log_text()[broker.log_text().rfind("config values:") :]
    assert "Traceback" not in log, log
    cut1 = last1 - last1 // 2
    if shutdown == "kill":
        assert (
            f"recovered {topic}-0 after an unclean shutdown: log end offset {3 * batches}, 137 byte(s)"
            in log
        ), log
        assert (
            f"recovered {topic}-1 after an unclean shutdown: log end offset {3 * batches - 3}, {cut1} byte(s)"
            in log
        )
        assert (
            f"recovered {topic}-2 after an unclean shutdown: log end offset {3 * batches}, 0 byte(s)"
            in log
        )
    else:
        assert (
            f"{topic}-0: 137 byte(s) of corrupt tail truncated despite a clean shutdown" in log
        ), log
        assert (
            f"{topic}-1: {cut1} byte(s) of corrupt tail truncated despite a clean shutdown" in log
        ), log
        assert f"{topic}-2:" not in log and "unclean shutdown" not in log
    assert seg0.stat().st_size == size0, "the garbage was not cut off"
    assert seg1.stat().st_size == size1 - last1, "the torn batch was not cut off"

    got = offsets_and_values(read_to_end(broker.bootstrap, topic, 3))
    expected = {
        0: [v for b in written[0] for v in b],
        1: [v for b in written[1][:-1] for v in b],
        2: [v for b in written[2] for v in b],
    }
    for p in range(3):
        assert [o for o, _ in got[p]] == list(range(len(expected[p]))), p
        assert [v for _, v in got[p]] == expected[p], p
    assert garbage not in seg0.read_bytes()

    # appends continue right after the last whole batch, and read back
    with RawClient.connect(broker.bootstrap) as c:
        for p in range(3):
            batch = bytes(build_batch([Record(b"after-damage")]))
            part = produce_partition(c, topic, batch, partition=p, acks=-1)
            assert (part.error_code, part.base_offset) == (ErrorCode.none, len(expected[p])), p
    got = offsets_and_values(read_to_end(broker.bootstrap, topic, 3))
    for p in range(3):
        assert got[p][-1] == (len(expected[p]), b"after-damage")
        assert [v for _, v in got[p][:-1]] == expected[p]
