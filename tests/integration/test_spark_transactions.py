"""The ``tidegate`` Spark source over transactional data: confluent-kafka's transactional
Producer (``transactional.id``, init/begin/commit/abort) writes committed and aborted
transactions, interleaved with each other and with plain records, to a real tidegate
broker; Spark (local[2]) reads them at ``kafka.isolation.level=read_committed`` and at
``read_uncommitted``.

- read_committed returns exactly the committed and plain records, at their real
  offsets; read_uncommitted also the aborted ones; neither ever a transaction marker;
- ranges that start or end inside aborted transactions or on markers complete;
- streaming: a micro-batch's end offset is the LSO (an open transaction holds it back),
  micro-batches cut by maxOffsetsPerTrigger inside aborted ranges neither stall nor
  repeat, a range holding only markers and aborted records is read through (no rows,
  offsets move on), and a query running while transactions commit and abort ends with
  every committed record exactly once.

tidegate only: the peer broker's transactions are incomplete (shared/tools/peer-broker.sh).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.conftest import wait_until
from tidegate.client import KafkaClient
from tidegate.client.fetcher import list_offsets

from .clients import create_topic, produce

pytestmark = pytest.mark.timeout(300)

QUERY_TIMEOUT_S = 120
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}




@pytest.fixture(scope="module")
def bootstrap(module_broker_factory) -> str:
    return module_broker_factory().bootstrap


# -- writing transactions ----------------------------------------------------------------------


@dataclass
class Ledger:
    """Every data record written: (partition, offset) -> (value, committed?); None
    for a record outside any transaction. Markers are counted per partition."""

    records: dict[tuple[int, int], tuple[bytes, bool | None]] = field(default_factory=dict)
    markers: dict[int, int] = field(default_factory=dict)

    def plain(self, bootstrap: str, topic: str, partition: int, n: int, tag: str) -> None:
        values = [f"{tag}-{i}".encode() for i in range(n)]
        for d in produce(bootstrap, topic, values, client="tidegate", partition=partition, acks=-1):
            self.records[(partition, d.offset)] = (values.pop(0), None)

    def rows(self, committed_only: bool) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) a reader at that isolation level must return."""
        return sorted((p, o, v) for (p, o), (v, c) in self.records.items()
                      if not committed_only or c is not False)  # fmt: skip


class TxnWriter:
    """A confluent-kafka transactional producer that notes what it wrote in a Ledger;
    every send is flushed, so the order of calls is the order in the log."""

    def __init__(self, bootstrap: str, txn_id: str, topic: str, ledger: Ledger) -> None:
        from confluent_kafka import Producer

        self.topic, self.ledger, self.txn_id = topic, ledger, txn_id
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                           "log_level": 0, "linger.ms": 0})  # fmt: skip
        self.p.init_transactions(30)
        self.pending: list[tuple[int, int, bytes]] = []
        self.n = 0

    def begin(self) -> TxnWriter:
        self.p.begin_transaction()
        return self

    def send(self, partition: int, n: int) -> TxnWriter:
        errors: list = []

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                self.pending.append((msg.partition(), msg.offset(), msg.value()))

        for _ in range(n):
            self.n += 1
            value = f"{self.txn_id}-{self.n}".encode()
            self.p.produce(self.topic, value, partition=partition, on_delivery=delivered)
        assert self.p.flush(30) == 0 and not errors, errors
        return self

    def end(self, commit: bool) -> None:
        if commit:
            self.p.commit_transaction(30)
        else:
            self.p.abort_transaction(30)
        for p in {p for p, _, _ in self.pending}:
            self.ledger.markers[p] = self.ledger.markers.get(p, 0) + 1
        for p, o, v in self.pending:
            self.ledger.records[(p, o)] = (v, commit)
        self.pending = []


def offsets(bootstrap: str, topic: str, partitions: int, isolation_level: int) -> dict[int, int]:
    """LATEST of every partition: the high watermark (0) or the last stable offset (1)."""
    with KafkaClient(bootstrap) as c:
        got = list_offsets(c, {(topic, p): -1 for p in range(partitions)},
                           isolation_level=isolation_level)  # fmt: skip
    return {p: o for (_, p), o in got.items()}


def decided(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The end offsets once every transaction's markers are written (the coordinator
    writes them after EndTxn answers): LSO = high watermark."""
    ends: list[dict[int, int]] = []

    def settled() -> bool:
        ends[:] = [offsets(bootstrap, topic, partitions, 0)]
        return offsets(bootstrap, topic, partitions, 1) == ends[0]

    wait_until(settled, 30, interval=0.1, what="the LSO reaching the high watermark")
    return ends[0]


# -- reading ------------------------------------------------------------------------------------


def read_rows(spark, bootstrap: str, **options) -> list[tuple[int, int, bytes]]:
    r = spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return sorted((row["partition"], row["offset"], bytes(row["value"]))
                  for row in r.load().select("partition", "offset", "value").collect())  # fmt: skip


def stream(spark, bootstrap: str, topic: str, out: Path, ckpt: Path, trigger: dict, **options):
    r = (spark.readStream.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest"))  # fmt: skip
    for k, v in options.items():
        r = r.option(k, v)
    return (
        r.load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(**trigger)
        .start()
    )


def await_done(query) -> list[dict]:
    """Wait for an AvailableNow query; its micro-batches' progress."""
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish in time"
    assert query.exception() is None, query.exception()
    return list(query.recentProgress)


def sink_rows(spark, out: Path) -> list[tuple[int, int, bytes]]:
    if not out.exists() or not any(out.glob("*.parquet")):
        return []
    return sorted((r["partition"], r["offset"], bytes(r["value"]))
                  for r in spark.read.parquet(str(out)).collect())  # fmt: skip


def _offsets_json(value, topic: str) -> dict[int, int]:
    obj = json.loads(value) if isinstance(value, str) else value
    return {int(p): int(o) for p, o in (obj or {}).get(topic, {}).items()}


def batch_ranges(progress: list[dict], topic: str) -> list[tuple[dict, dict, int]]:
    """(start offsets, end offsets, rows) of each micro-batch that ran."""
    out = []
    for p in progress:
        src = p["sources"][0]
        start = _offsets_json(src["startOffset"], topic)
        end = _offsets_json(src["endOffset"], topic)
        if start != end:
            out.append((start, end, p["numInputRows"]))
    return out


def check_contiguous(ranges: list[tuple[dict, dict, int]], first: dict[int, int]) -> dict[int, int]:
    """Every micro-batch starts where the one before ended (nothing skipped, nothing
    read twice) and moves forward; returns where the last one ended."""
    at = dict(first)
    for start, end, _rows in ranges:
        assert {p: start.get(p, 0) for p in end} == {p: at.get(p, 0) for p in end}, (start, at)
        assert all(end[p] >= start.get(p, 0) for p in end) and end != start
        at = end
    return at


# -- tests --------------------------------------------------------------------------------------


def _write_mixed(bootstrap: str, topic: str, ledger: Ledger, tag: str) -> None:
    """Two transactional producers and plain records over two partitions: committed,
    aborted, interleaved; partition 1 ends with an aborted transaction and its marker."""
    w1 = TxnWriter(bootstrap, f"{tag}-1", topic, ledger)
    w2 = TxnWriter(bootstrap, f"{tag}-2", topic, ledger)
    ledger.plain(bootstrap, topic, 0, 3, f"{tag}-plain-a")
    w1.begin().send(0, 3).send(1, 2).end(commit=True)
    w1.begin().send(0, 4).send(1, 1).end(commit=False)
    w1.begin()
    w2.begin()
    w1.send(0, 2)
    w2.send(0, 3).send(1, 2)
    w1.send(0, 1).send(1, 1)
    w2.end(commit=False)
    w1.end(commit=True)
    ledger.plain(bootstrap, topic, 0, 2, f"{tag}-plain-b")
    w2.begin().send(1, 5).end(commit=False)


def test_batch_reads_by_isolation_level(spark, bootstrap):
    topic = create_topic(bootstrap, partitions=2, prefix="txn-batch")
    ledger = Ledger()
    _write_mixed(bootstrap, topic, ledger, topic)
    hw = decided(bootstrap, topic, 2)
    # the log holds the data records and one marker per transaction and partition
    for p in (0, 1):
        assert hw[p] == sum(1 for q, _ in ledger.records if q == p) + ledger.markers[p]

    committed = read_rows(spark, bootstrap, subscribe=topic, **READ_COMMITTED)
    assert committed == ledger.rows(committed_only=True)
    # read_uncommitted: the aborted records too, never a marker
    uncommitted = read_rows(spark, bootstrap, subscribe=topic)
    assert uncommitted == ledger.rows(committed_only=False)
    assert len(uncommitted) == sum(hw.values()) - sum(ledger.markers.values())

    # ranges cut inside aborted transactions and on markers: partition 0 from the first
    # aborted record to its marker (exclusive, then inclusive), partition 1 from there
    # to its end, which is the last aborted transaction's marker
    aborted0 = sorted(o for (p, o), (_, c) in ledger.records.items() if p == 0 and c is False)
    first, marker_at = aborted0[0], aborted0[3] + 1  # w1's aborted 4 records, then its marker
    for end in (marker_at, marker_at + 1):
        opts = {"assign": json.dumps({topic: [0, 1]}),
                "startingOffsets": json.dumps({topic: {"0": first, "1": first // 2}}),
                "endingOffsets": json.dumps({topic: {"0": end, "1": -1}})}  # fmt: skip
        want = [r for r in ledger.rows(committed_only=True)
                if (r[0] == 0 and first <= r[1] < end) or (r[0] == 1 and r[1] >= first // 2)]
        assert read_rows(spark, bootstrap, **opts, **READ_COMMITTED) == want
        assert all(r[0] == 1 for r in want)  # partition 0's range holds only aborted data
    # a range holding only markers and aborted records reads as empty, at once
    only_aborted = {"assign": json.dumps({topic: [1]}),
                    "startingOffsets": json.dumps({topic: {"1": hw[1] - 6}})}  # fmt: skip
    started = time.monotonic()
    assert read_rows(spark, bootstrap, **only_aborted, **READ_COMMITTED) == []
    assert time.monotonic() - started < 60  # not a poll timeout (120 s)
    assert len(read_rows(spark, bootstrap, **only_aborted)) == 5


def test_stream_micro_batches_end_at_the_lso(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=2, prefix="txn-stream")
    ledger = Ledger()
    _write_mixed(bootstrap, topic, ledger, topic)
    # a transaction left open: the LSO of partition 0 stays at its first record
    w3 = TxnWriter(bootstrap, f"{topic}-3", topic, ledger).begin().send(0, 2)
    ledger.plain(bootstrap, topic, 1, 1, "after")  # partition 1 is not held back
    hw = offsets(bootstrap, topic, 2, 0)
    want_lso = {0: hw[0] - 2, 1: hw[1]}
    wait_until(lambda: offsets(bootstrap, topic, 2, 1) == want_lso, 30, interval=0.1,
               what="the LSO at the open transaction")  # fmt: skip
    lso = want_lso
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run(max_offsets: int = 4):
        q = stream(spark, bootstrap, topic, out, ckpt, {"availableNow": True},
                   maxOffsetsPerTrigger=str(max_offsets), **READ_COMMITTED)  # fmt: skip
        return batch_ranges(await_done(q), topic)

    # run 1: small micro-batches cut inside aborted ranges and on markers, up to the LSO
    ranges = run()
    assert len(ranges) >= 5
    assert check_contiguous(ranges, {0: 0, 1: 0}) == lso
    assert sum(n for _, _, n in ranges) == len(ledger.rows(committed_only=True))
    assert sink_rows(spark, out) == ledger.rows(committed_only=True)

    # run 2, same checkpoint: the open transaction commits, another aborts on partition 1
    w3.end(commit=True)
    w4 = TxnWriter(bootstrap, f"{topic}-4", topic, ledger)
    w4.begin().send(1, 3).end(commit=False)
    lso2 = decided(bootstrap, topic, 2)
    ranges = run()
    assert check_contiguous(ranges, lso) == lso2
    assert sink_rows(spark, out) == ledger.rows(committed_only=True)  # each record once

    # run 3: only an aborted transaction since: a micro-batch with no rows moves the
    # offsets over it (it does not stall the query or come back in the next run)
    w4.begin().send(0, 2).send(1, 2).end(commit=False)
    lso3 = decided(bootstrap, topic, 2)
    ranges = run(max_offsets=1000)
    assert [(s, e, n) for s, e, n in ranges] == [(lso2, lso3, 0)]
    assert run() == []  # nothing new
    assert sink_rows(spark, out) == ledger.rows(committed_only=True)

    # the same topic read_uncommitted: every data record (aborted ones too), no marker
    q = stream(spark, bootstrap, topic, tmp_path / "all", tmp_path / "ckpt-all",
               {"availableNow": True}, maxOffsetsPerTrigger="7")  # fmt: skip
    ranges = batch_ranges(await_done(q), topic)
    assert check_contiguous(ranges, {0: 0, 1: 0}) == offsets(bootstrap, topic, 2, 0)
    assert sink_rows(spark, tmp_path / "all") == ledger.rows(committed_only=False)


@pytest.mark.slow
def test_stream_running_while_transactions_commit_and_abort(spark, bootstrap, tmp_path):
    """A processing-time query at read_committed while two producers keep committing
    and aborting: it catches up to the LSO, every committed record once."""
    topic = create_topic(bootstrap, partitions=2, prefix="txn-live")
    ledger = Ledger()
    out = tmp_path / "out"
    q = stream(spark, bootstrap, topic, out, tmp_path / "ckpt",
               {"processingTime": "500 milliseconds"}, **READ_COMMITTED)  # fmt: skip
    writers = [TxnWriter(bootstrap, f"{topic}-{i}", topic, ledger) for i in range(2)]
    failed: list[BaseException] = []

    def write(w: TxnWriter, seed: int) -> None:
        try:
            for i in range(12):
                w.begin().send((i + seed) % 2, 1 + i % 3)
                if i % 4 == 1:
                    w.send((i + seed + 1) % 2, 2)
                w.end(commit=(i + seed) % 3 != 0)
                time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failed.append(exc)

    try:
        threads = [threading.Thread(target=write, args=(w, i)) for i, w in enumerate(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failed, failed
        lso = decided(bootstrap, topic, 2)

        def caught_up() -> bool:
            assert q.exception() is None, q.exception()
            ranges = batch_ranges(list(q.recentProgress), topic)
            return bool(ranges) and ranges[-1][1] == lso

        wait_until(caught_up, QUERY_TIMEOUT_S, interval=0.5, what="the query reaching the LSO")
    finally:
        q.stop()
    ranges = batch_ranges(list(q.recentProgress), topic)
    check_contiguous(ranges, ranges[0][0])
    assert sink_rows(spark, out) == ledger.rows(committed_only=True)
    assert any(c is False for _, c in ledger.records.values())
