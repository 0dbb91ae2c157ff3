"""The consumer side of transactions, sans-IO: :class:`tidegate.client.fetcher.CompletedFetch`
over hand-built batches (Kafka's client-side filtering, reference §2.11: the aborted list
in first-offset order, a producer entering the aborted set when a batch reaches its
entry's first offset, its transactional batches skipped, its ABORT marker taking it out,
control records never returned), and :func:`~tidegate.client.fetcher.read_range_batches`
over a stand-in client that answers Fetch from a real partition :class:`~tidegate.log.Log`
the way the broker does (up to the LSO at read_committed, with the aborted transactions
the data overlaps): ranges end on markers and aborted records, transactions span
fetches, and no fetch repeats."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from tests.unit.logs import marker, open_log
from tidegate.client.fetcher import (
    FETCH,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    CompletedFetch,
    FetchPosition,
    LogTruncationError,
    read_range,
    read_range_batches,
    validate_positions,
)
from tidegate.clock import MockClock
from tidegate.errors import KafkaError, OffsetOutOfRangeError, UnsupportedVersionError
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.control_records import end_transaction_marker_batch

A, B, C, D = 1, 2, 3, 4  # producer ids
PLAIN = -1  # a producer that is neither idempotent nor transactional


def data(base: int, n: int = 1, pid: int = PLAIN, txn: bool = True) -> bytes:
    """A batch of ``n`` records from ``base`` on, each record's value its offset: a
    transaction's batch unless ``pid`` is PLAIN or ``txn`` is false (idempotent only)."""
    recs = [Record(b"%d" % (base + i), b"k", 1_000 + i) for i in range(n)]
    return bytes(build_batch(
        recs, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1, transactional=txn and pid >= 0,
    ))  # fmt: skip


def end(offset: int, pid: int, commit: bool) -> bytes:
    """A COMMIT or ABORT marker at ``offset`` (the base offset is outside the CRC)."""
    batch = end_transaction_marker_batch(pid, 0, 0, commit, 1_000)
    struct.pack_into(">q", batch, 0, offset)
    return bytes(batch)


def read(
    buf: bytes, fetch_offset: int = 0, iso: int = READ_COMMITTED, aborted=(), end: int | None = None
) -> tuple[list[int], int]:
    """(offsets returned, next fetch offset) of one response."""
    cf = CompletedFetch(buf, fetch_offset, isolation_level=iso, aborted_transactions=aborted)
    got = [r for recs in cf.record_batches(end) for r in recs]
    assert all(r.value == b"%d" % r.offset for r in got)  # records keep their real offsets
    return [r.offset for r in got], cf.next_fetch_offset


# A aborts 0-1 (marker 2); B commits 3-4 (marker 5); a plain record at 6
ONE_ABORT = data(0, 2, A) + end(2, A, False) + data(3, 2, B) + end(5, B, True) + data(6)


def test_read_uncommitted_returns_aborted_records_but_never_markers():
    assert read(ONE_ABORT, iso=READ_UNCOMMITTED) == ([0, 1, 3, 4, 6], 7)
    # the aborted list means nothing at read_uncommitted (brokers send none)
    assert read(ONE_ABORT, iso=READ_UNCOMMITTED, aborted=[(A, 0)]) == ([0, 1, 3, 4, 6], 7)
    # a response ending on a marker: the position moves past it
    assert read(data(0, 2, A) + end(2, A, True), iso=READ_UNCOMMITTED) == ([0, 1], 3)


def test_read_committed_skips_the_aborted_transaction_and_the_markers():
    assert read(ONE_ABORT, aborted=[(A, 0)]) == ([3, 4, 6], 7)
    # only aborted transactions the broker lists are dropped
    assert read(ONE_ABORT, aborted=[]) == ([0, 1, 3, 4, 6], 7)
    # the whole response aborted: nothing to return, the position still moves past it
    assert read(data(0, 2, A) + data(2, 1, A) + end(3, A, False), aborted=[(A, 0)]) == ([], 4)


def test_the_aborted_list_is_taken_in_first_offset_order():
    buf = (data(0, 2, A) + end(2, A, False) + data(3, 2, B) + end(5, B, False)
           + data(6, 1, C) + end(7, C, True))  # fmt: skip
    # the broker's order is not trusted: unsorted, B's entry would hold A's back
    assert read(buf, aborted=[(B, 3), (A, 0)]) == ([6], 8)


def test_a_producer_is_aborted_from_its_entrys_first_offset_until_its_abort_marker():
    # A commits 0-1, aborts 3-4, commits 6-7: only the middle transaction is dropped.
    # Taking A's entry at its first batch (0-1) would drop committed data; keeping A in
    # the aborted set past its ABORT marker would drop 6-7.
    buf = (data(0, 2, A) + end(2, A, True) + data(3, 2, A) + end(5, A, False)
           + data(6, 2, A) + end(8, A, True))  # fmt: skip
    assert read(buf, aborted=[(A, 3)]) == ([0, 1, 6, 7], 9)
    # two aborted transactions of one producer in one response, a commit after them
    buf = (data(0, 2, A) + end(2, A, False) + data(3, 2, A) + end(5, A, False)
           + data(6, 1, A) + end(7, A, True))  # fmt: skip
    assert read(buf, aborted=[(A, 0), (A, 3)]) == ([6], 8)


def test_interleaved_producers():
    # A (aborted) and B (committed) interleave with a plain record and an idempotent,
    # non-transactional producer C; A's next transaction, after its abort, is committed
    buf = (
        data(0, 2, A) + data(2, 2, B) + data(4) + data(5, 1, A) + data(6, 1, C, txn=False)
        + data(7, 1, B) + end(8, A, False) + data(9, 1, D) + end(10, B, True)
        + data(11, 2, A) + end(13, D, False) + end(14, A, True)
    )  # fmt: skip
    assert read(buf, aborted=[(D, 9), (A, 0)]) == ([2, 3, 4, 6, 7, 11, 12], 15)
    assert read(buf, iso=READ_UNCOMMITTED) == ([0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 12], 15)


def test_a_transaction_spanning_fetches_is_skipped_in_each_response():
    first = data(0, 2, A)
    rest = data(2, 2, A) + end(4, A, False) + data(5, 1, B) + end(6, B, True)
    # the broker lists A's aborted transaction in both responses: it ends (4) at or
    # after either fetch offset
    assert read(first, 0, aborted=[(A, 0)]) == ([], 2)
    assert read(rest, 2, aborted=[(A, 0)]) == ([5], 7)
    # a response cut inside a batch: the position stops after the last whole batch
    assert read(first + rest[:30], 0, aborted=[(A, 0)]) == ([], 2)


def test_a_fetch_offset_inside_a_batch_and_a_range_end():
    buf = data(0, 10) + data(10, 5)
    assert read(buf, 3, end=7) == ([3, 4, 5, 6], 10)  # past the end: the range is complete
    # the walk stops at the first batch starting at the end, without reading it
    assert read(buf, 0, end=10) == (list(range(10)), 10)
    # a range whose last offsets are a marker and an aborted transaction is complete
    tail = data(0, 1, B) + end(1, B, True) + data(2, 2, A) + end(4, A, False) + data(5)
    assert read(tail, 0, aborted=[(A, 2)], end=5) == ([0], 5)
    assert read(tail, 0, aborted=[(A, 2)], end=2) == ([0], 2)
    assert read(tail, 2, aborted=[(A, 2)], end=5) == ([], 5)


# -- read_range_batches against a partition log --------------------------------------------------


class LogClient:
    """Enough of :class:`~tidegate.client.KafkaClient` for :func:`read_range_batches`:
    Fetch answered from one :class:`~tidegate.log.Log` as the broker's
    ``ReplicaManager.read_from_log`` does. ``fetches`` records every fetch offset."""

    request_timeout_ms = 1_000

    def __init__(self, log) -> None:
        self.log = log
        self.clock = MockClock()
        self.cluster = SimpleNamespace(leader_for=lambda topic, partition: 0, leader_epoch=lambda topic, partition: -1)
        self.fetches: list[int] = []

    def await_ready(self, node, timeout_ms=None) -> None:
        pass

    def api_version(self, node, key, max_version) -> int:
        return max_version

    def metadata(self, topics, timeout_ms=None) -> None:
        pass

    def request(self, key, body, node_id, version, timeout_ms):
        assert key == FETCH
        (topic,) = body["topics"]
        (p,) = topic["partitions"]
        offset = p["fetch_offset"]
        self.fetches.append(offset)
        log = self.log
        lso = log.last_stable_offset
        committed = body["isolation_level"] == READ_COMMITTED
        records = log.read(offset, p["partition_max_bytes"], max_offset=lso if committed else None)
        if not records:
            self.clock.advance(body["max_wait"])  # nothing to read: the long poll waits it out
        aborted = None
        if committed:
            found = log.collect_aborted_transactions(offset, log.fetch_upper_bound(offset))
            aborted = [SimpleNamespace(producer_id=a.producer_id, first_offset=a.first_offset)
                       for a in found] if records else []  # fmt: skip
        part = SimpleNamespace(
            partition_index=p["partition"], error_code=0, high_watermark=log.high_watermark,
            last_stable_offset=lso, log_start_offset=log.log_start_offset,
            aborted_transactions=aborted, records=records,
        )  # fmt: skip
        return SimpleNamespace(error_code=0, responses=[
            SimpleNamespace(topic=topic["topic"], partitions=[part])])  # fmt: skip


class Partition:
    """A partition log written as producers and the coordinator write it; ``values``
    maps every data offset to whether its transaction committed (None: not in one)."""

    def __init__(self, tmp_path) -> None:
        self.log = open_log(tmp_path, segment_bytes=1_000)  # several segments
        self.seq: dict[int, int] = {}
        self.open: dict[int, list[int]] = {}
        self.committed: dict[int, bool | None] = {}

    def send(self, pid: int, n: int = 1) -> None:
        """``n`` records in one batch, in ``pid``'s open transaction (PLAIN: none)."""
        seq = self.seq.get(pid, 0)
        recs = [Record(b"v", b"k", 1_000) for _ in range(n)]
        kw = {} if pid == PLAIN else {"producer_id": pid, "producer_epoch": 0,
                                      "base_sequence": seq, "transactional": True}  # fmt: skip
        info = self.log.append(build_batch(recs, **kw), 0)
        offsets = list(range(info.first_offset, info.last_offset + 1))
        if pid == PLAIN:
            self.committed.update(dict.fromkeys(offsets))
        else:
            self.seq[pid] = seq + n
            self.open.setdefault(pid, []).extend(offsets)

    def end(self, pid: int, commit: bool) -> None:
        self.log.append(marker(commit, pid), 0, from_client=False)
        self.committed.update(dict.fromkeys(self.open.pop(pid), commit))

    def visible(self, start: int, end: int, iso: int) -> list[int]:
        return [o for o, c in sorted(self.committed.items())
                if start <= o < end and (iso == READ_UNCOMMITTED or c is not False)]  # fmt: skip


@pytest.fixture
def part(tmp_path):
    p = Partition(tmp_path)
    yield p
    p.log.close()


def _interleave(part: Partition) -> None:
    """Three producers interleaved over several segments: every third transaction of
    each is aborted, plain records in between; ends on an abort and a commit marker."""
    for round_ in range(6):
        for pid in (A, B, C):
            part.send(pid, 1 + (round_ + pid) % 3)
        part.send(PLAIN)
        for pid in (A, B, C):
            part.send(pid)
            part.end(pid, commit=(round_ + pid) % 3 != 0)


@pytest.mark.parametrize("iso", [READ_UNCOMMITTED, READ_COMMITTED])
def test_every_range_reads_to_its_end_without_refetching(part, iso):
    _interleave(part)
    hw = part.log.high_watermark
    assert part.log.last_stable_offset == hw
    assert len(part.log.segments) > 2
    client = LogClient(part.log)
    for start in range(hw):
        for stop in range(start + 1, hw + 1):
            client.fetches.clear()
            # one batch per Fetch: transactions span fetches, ranges end on markers
            records = read_range(client, ("t", 0), start, stop,
                                 partition_max_bytes=1, isolation_level=iso)  # fmt: skip
            got = [r.offset for r in records]
            assert got == part.visible(start, stop, iso), (start, stop)
            # every Fetch moved the position on: none repeats, none goes past the end
            assert client.fetches == sorted(set(client.fetches)), (start, stop)
            assert all(f < stop for f in client.fetches), (start, stop)


def test_read_committed_stops_at_the_lso_of_an_open_transaction(part):
    part.send(A, 2)
    part.end(A, commit=False)  # 0-1, marker 2
    part.send(B)  # 3: B's transaction stays open
    part.send(PLAIN)  # 4
    lso, hw = part.log.last_stable_offset, part.log.high_watermark
    assert (lso, hw) == (3, 5)
    client = LogClient(part.log)
    batches = list(read_range_batches(client, ("t", 0), 0, lso, isolation_level=READ_COMMITTED))
    assert batches == [] and client.fetches == [0]  # one Fetch reads [0, 3) to its end
    got = [r.offset for r in read_range(client, ("t", 0), 0, hw, isolation_level=READ_UNCOMMITTED)]
    assert got == [0, 1, 3, 4]
    # past the LSO nothing is readable at read_committed until B ends its transaction
    with pytest.raises(KafkaError, match="last stable offset 3"):
        list(read_range(client, ("t", 0), 0, hw, isolation_level=READ_COMMITTED, timeout_ms=100))
    part.end(B, commit=True)
    got = [r.offset for r in read_range(client, ("t", 0), 0, part.log.last_stable_offset,
                                        isolation_level=READ_COMMITTED)]  # fmt: skip
    assert got == [3, 4]


# -- KIP-320: positions validated after a leader change ---------------------------------------


class EpochClient:
    """Enough of :class:`~tidegate.client.KafkaClient` for
    :func:`~tidegate.client.fetcher.validate_positions`: the partition's leader and leader
    epoch from "metadata", and OffsetForLeaderEpoch answered with ``answer`` (error code,
    epoch, end offset); ``versions`` None: the leader has no OffsetForLeaderEpoch v2+."""

    def __init__(self, leader: int, epoch: int, answer=(0, 3, 100), versions=True) -> None:
        self.cluster = SimpleNamespace(leader_for=lambda t, p: leader, leader_epoch=lambda t, p: epoch)
        self.answer = answer
        self.versions = versions
        self.asked: list[tuple[int, dict]] = []

    def await_ready(self, node, timeout_ms=None) -> None:
        pass

    def api_version(self, node, key, min_version=None, max_version=None) -> int:
        if not self.versions:
            raise UnsupportedVersionError("no OffsetForLeaderEpoch")
        return 2

    def request(self, key, body, node_id, version, timeout_ms):
        self.asked.append((node_id, body))
        code, epoch, end = self.answer
        return SimpleNamespace(topics=[SimpleNamespace(topic=t["topic"], partitions=[
            SimpleNamespace(partition=p["partition"], error_code=code, leader_epoch=epoch, end_offset=end)
            for p in t["partitions"]]) for t in body["topics"]])  # fmt: skip


TP = ("t", 0)


def test_a_new_position_is_valid_for_the_leader_it_starts_with():
    client = EpochClient(leader=1, epoch=5)
    pos = FetchPosition(42)
    assert validate_positions(client, {TP: pos}, timeout_ms=1000) == {}
    assert client.asked == [] and (pos.leader, pos.leader_epoch) == (1, 5)


def test_after_a_leader_change_the_position_is_checked_at_the_new_leader():
    client = EpochClient(leader=2, epoch=6, answer=(0, 5, 100))
    pos = FetchPosition(90, offset_epoch=5, leader=1, leader_epoch=5)
    assert validate_positions(client, {TP: pos}, timeout_ms=1000) == {}
    ((node, body),) = client.asked
    assert node == 2
    assert body["topics"] == [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 6,
                                                             "leader_epoch": 5}]}]  # fmt: skip
    assert (pos.leader, pos.leader_epoch, pos.offset) == (2, 6, 90)


def test_a_log_that_ends_below_the_position_was_truncated():
    client = EpochClient(leader=2, epoch=6, answer=(0, 4, 70))
    pos = FetchPosition(90, offset_epoch=5, leader=1, leader_epoch=5)
    (err,) = validate_positions(client, {TP: pos}, timeout_ms=1000).values()
    assert isinstance(err, LogTruncationError) and isinstance(err, OffsetOutOfRangeError)
    assert (err.offset, err.divergent_offset) == (90, 70)
    assert "truncation detected for t-0" in str(err)
    assert pos.leader == 1  # still to be validated: the caller resets it


def test_a_leader_without_offset_for_leader_epoch_v2_is_taken_at_its_word():
    client = EpochClient(leader=2, epoch=6, versions=False)
    pos = FetchPosition(90, offset_epoch=5, leader=1, leader_epoch=5)
    assert validate_positions(client, {TP: pos}, timeout_ms=1000) == {}
    assert pos.leader == 2


def test_stale_metadata_leaves_the_position_to_validate_later():
    client = EpochClient(leader=2, epoch=6, answer=(74, -1, -1))  # FENCED_LEADER_EPOCH
    pos = FetchPosition(90, offset_epoch=5, leader=1, leader_epoch=5)
    assert validate_positions(client, {TP: pos}, timeout_ms=1000) == {}
    assert pos.leader == 1


def test_a_completed_fetch_carries_the_epoch_of_its_last_batch():
    batch = bytearray(data(0, 3))
    struct.pack_into(">i", batch, 12, 7)  # partitionLeaderEpoch (not in the CRC)
    done = CompletedFetch(bytes(batch), 0)
    assert [r.offset for recs in done.record_batches() for r in recs] == [0, 1, 2]
    pos = FetchPosition(0)
    pos.advance(done)
    assert (pos.offset, pos.offset_epoch) == (3, 7)
