"""Consumer-side requests on :class:`~tidegate.client.KafkaClient`: ListOffsets and Fetch.

This is the part of Kafka's ``Fetcher`` / ``OffsetFetcher`` that a reader with
explicitly assigned partitions needs (the Spark data source; a benchmark), without
groups or a poll loop:

- :func:`list_offsets` resolves EARLIEST (-2), LATEST (-1) or a timestamp per
  partition, one request per partition leader, refreshing metadata and retrying when
  leadership moved;
- :func:`end_offsets` is LATEST checked against a Fetch's high watermark (its last
  stable offset at ``read_committed``; some Kafka-compatible brokers answer LATEST
  short of it);
- :func:`fetch` sends one Fetch to one broker for a set of positions and returns the
  raw records per partition, with the high watermark, last stable offset, log start
  offset and (``read_committed``) the aborted transactions the records overlap; given
  a :class:`FetchSessionHandler` it fetches through a KIP-227 incremental session
  (only changed positions sent, only changed partitions answered);
- :class:`CompletedFetch` reads one partition of one Fetch response the way Kafka's
  consumer does: control records (transaction markers) never reach the application,
  and at ``read_committed`` neither do the batches of aborted transactions; the
  position moves over both;
- :func:`read_range_batches` (and :func:`read_range`, record by record) reads
  ``[start, end)`` of one partition as records, one Fetch of at most
  ``partition_max_bytes`` at a time, so memory stays bounded by that (plus one
  decompressed batch) however long the range is.

``isolation_level`` is Kafka's: 0 ``read_uncommitted`` (up to the high watermark), 1
``read_committed`` (up to the last stable offset, aborted transactions dropped).

Fetch v12 is the newest version used: from v13 Fetch names topics by id, which
needs Metadata topic ids and gains nothing here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidegate.errors import (
    INVALID_METADATA_CODES,
    BrokerResponseError,
    KafkaError,
    OffsetOutOfRangeError,
)
from tidegate.record.control_records import ControlRecordType, parse_control_key
from tidegate.record.records import (
    BatchInfo,
    ConsumerRecord,
    decode_batch_records,
    iter_decoded_batches,
)

from .client import KafkaClient

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedTransaction",
    "CompletedFetch",
    "FetchOffsetOutOfRangeError",
    "FetchSessionHandler",
    "OffsetOutOfRangeError",
    "PartitionFetch",
    "end_offsets",
    "fetch",
    "list_offsets",
    "read_range",
    "read_range_batches",
]

FETCH = 1
LIST_OFFSETS = 2
EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
OFFSET_OUT_OF_RANGE = 1
FETCH_SESSION_ID_NOT_FOUND = 70
#: FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR
SESSION_ERRORS = frozenset({70, 71, 106})
#: Fetch from v13 identifies topics by topic id; v12 is the last by name.
FETCH_MAX_VERSION = 12
LIST_OFFSETS_MAX_VERSION = 7

TopicPartition = tuple[str, int]


class FetchOffsetOutOfRangeError(OffsetOutOfRangeError):
    """A Fetch position is outside ``[log_start_offset, high_watermark]`` (retention
    deleted it, or the partition was recreated): the shared
    :class:`~tidegate.errors.OffsetOutOfRangeError`, re-exported here, with the partition,
    the position and the partition's range (ListOffsets EARLIEST and LATEST)."""

    def __init__(self, tp: TopicPartition, offset: int, log_start: int, high_watermark: int):
        self.tp = tp
        self.offset = offset
        self.log_start_offset = log_start
        self.high_watermark = high_watermark
        super().__init__(
            f"offset {offset} of {tp[0]}-{tp[1]} is out of range "
            f"(log start {log_start}, high watermark {high_watermark})"
        )


class AbortedTransaction(NamedTuple):
    """An entry of a Fetch response's ``aborted_transactions`` (``read_committed``)."""

    producer_id: int
    first_offset: int


@dataclass(slots=True)
class PartitionFetch:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None
    #: -1 when the broker does not say (Fetch < v4)
    last_stable_offset: int = -1
    #: None at read_uncommitted (and from a broker that does not say); a list, maybe
    #: empty, at read_committed
    aborted_transactions: list[AbortedTransaction] | None = None


class CompletedFetch:
    """One partition of one Fetch response, read as Kafka's consumer reads it (its
    ``CompletedFetch``): the records the application may see, and where the next Fetch
    starts.

    Control batches (transaction markers) never reach the application, at either
    isolation level. At ``read_committed`` the response's aborted transactions are
    applied as Kafka's consumer applies them:

    1. the list is taken in order of first offset;
    2. a batch with a producer id moves every entry whose first offset is at or below
       the batch's last offset into the set of aborted producers;
    3. a transactional batch of a producer in that set is skipped whole;
    4. that producer's ABORT marker takes it out of the set again (so the same
       producer's later transactions are read).

    The state lives for one response: a transaction whose batches span two Fetches is
    listed in both responses (the broker lists every aborted transaction that ends at
    or after the fetch offset), so the second response skips the rest of it.

    ``next_fetch_offset`` starts at the fetch offset and moves past every batch read:
    past skipped batches and markers too, so a reader never fetches them again and a
    range whose last offsets are markers or aborted records is seen to its end.
    Sans-IO: bytes in, records out.
    """

    def __init__(
        self,
        records: bytes | memoryview | None,
        fetch_offset: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        aborted_transactions: Iterable[tuple[int, int]] | None = None,
    ) -> None:
        self.next_fetch_offset = fetch_offset
        self._records = records if records is not None else b""
        self._read_committed = isolation_level == READ_COMMITTED
        pending = [AbortedTransaction(*a) for a in aborted_transactions or ()]
        pending.sort(key=lambda a: a.first_offset)
        self._aborted_queue = deque(pending if self._read_committed else ())
        self._aborted_producers: set[int] = set()

    def skips(self, batch: BatchInfo) -> bool:
        """Whether none of ``batch``'s records reach the application: a control batch,
        or (read_committed) a transactional batch of a producer whose transaction was
        aborted. Call it once per batch of the response, in order: it moves the aborted
        transactions' state on."""
        pid = batch.producer_id
        if self._read_committed and pid >= 0:  # Kafka's hasProducerId
            queue = self._aborted_queue
            while queue and queue[0].first_offset <= batch.last_offset:
                self._aborted_producers.add(queue.popleft().producer_id)
            if batch.is_control:
                if _is_abort_marker(batch):
                    self._aborted_producers.discard(pid)
            elif batch.is_transactional and pid in self._aborted_producers:
                return True
        return batch.is_control

    def record_batches(self, end: int | None = None) -> Iterator[list[ConsumerRecord]]:
        """The visible records from ``next_fetch_offset`` on, a list per record batch
        (batches with none are not yielded), in offset order; iterate once.

        With ``end``, only offsets below it, and the walk stops at the first batch that
        starts at or after it: ``next_fetch_offset`` is then at least ``end`` once the
        response reached it (it can be past ``end`` when a batch straddles it), and the
        range up to ``end`` is complete."""
        for batch in iter_decoded_batches(self._records):
            if end is not None and batch.base_offset >= end:
                # the offsets between the last batch read and this one do not exist
                self.next_fetch_offset = max(self.next_fetch_offset, batch.base_offset)
                return
            pos = self.next_fetch_offset
            # a batch's last offset survives compaction of its last records: the next
            # fetch starts after the batch, not inside it (Kafka's nextOffset())
            self.next_fetch_offset = max(pos, batch.last_offset + 1)
            if not self.skips(batch):
                recs = decode_batch_records(batch)
                if recs and (recs[0].offset < pos or (end is not None and recs[-1].offset >= end)):
                    recs = [r for r in recs if pos <= r.offset and (end is None or r.offset < end)]
                if recs:
                    yield recs
            if end is not None and self.next_fetch_offset >= end:
                return  # not even decompressing the next batch


def _is_abort_marker(batch: BatchInfo) -> bool:
    """Whether a control batch is a transaction's ABORT marker (its first record's
    key; Kafka's ``containsAbortMarker``)."""
    recs = decode_batch_records(batch, include_control=True)
    return bool(recs) and parse_control_key(recs[0].key) is ControlRecordType.ABORT


def _ensure_metadata(client: KafkaClient, topics: Iterable[str], timeout_ms: float) -> None:
    topics = sorted(set(topics))
    missing = [t for t in topics if t not in client.cluster.topics]
    if missing or not client.cluster.brokers:
        client.metadata(topics, timeout_ms=timeout_ms)


def _group_by_leader(
    client: KafkaClient, tps: Iterable[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    by_node: dict[int, list[TopicPartition]] = {}
    leaderless = []
    for tp in tps:
        leader = client.cluster.leader_for(*tp)
        if leader is None:
            leaderless.append(tp)
        else:
            by_node.setdefault(leader, []).append(tp)
    return by_node, leaderless


def list_offsets(
    client: KafkaClient,
    targets: dict[TopicPartition, int],
    *,
    isolation_level: int = 0,
    timeout_ms: float = 30_000,
    retries: int = 10,
    retry_backoff_ms: float = 100,
) -> dict[TopicPartition, int]:
    """The offset for each target: EARLIEST (-2), LATEST (-1) or a timestamp (the first
    offset whose timestamp is >= it; -1 when there is none)."""
    clock = client.clock
    deadline = clock.milliseconds() + timeout_ms
    _ensure_metadata(client, {t for t, _ in targets}, timeout_ms)
    result: dict[TopicPartition, int] = {}
    pending = dict(targets)
    attempt = 0
    while pending:
        by_node, leaderless = _group_by_leader(client, pending)
        retry: dict[TopicPartition, int] = {tp: pending[tp] for tp in leaderless}
        last_error: BrokerResponseError | None = None
        for node, tps in by_node.items():
            left = max(1.0, deadline - clock.milliseconds())
            client.await_ready(node, left)
            version = client.api_version(node, LIST_OFFSETS, max_version=LIST_OFFSETS_MAX_VERSION)
            topics: dict[str, list[dict]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    {"partition_index": p, "timestamp": pending[(t, p)]}
                )
            body = {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            resp = client.request(
                LIST_OFFSETS, body, node_id=node, version=version, timeout_ms=left
            )
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    code = int(p.error_code)
                    if code == 0:
                        if version == 0:
                            offs = list(p.old_style_offsets)
                            result[tp] = int(offs[0]) if offs else -1
                        else:
                            result[tp] = int(p.offset)
                    elif code in INVALID_METADATA_CODES or BrokerResponseError(code).retriable:
                        retry[tp] = pending[tp]
                        last_error = BrokerResponseError(code, f"ListOffsets {tp[0]}-{tp[1]}")
                    else:
                        raise BrokerResponseError(code, f"ListOffsets {tp[0]}-{tp[1]}")
        pending = retry
        if pending:
            attempt += 1
            if attempt > retries or clock.milliseconds() > deadline:
                raise last_error or KafkaError(
                    f"no leader for {sorted(pending)} after {attempt} attempts"
                )
            clock.sleep(retry_backoff_ms / 1000)
            client.metadata(sorted({t for t, _ in pending}), timeout_ms=timeout_ms)
    return result


class FetchSessionHandler:
    """The client side of one KIP-227 fetch session with one broker (Kafka's
    ``FetchSessionHandler``), sans-IO: :meth:`build` turns the wanted positions into a
    request's session id, epoch, partitions to send and partitions to forget;
    :meth:`handle_response` moves to the next epoch, or back to a full fetch after an
    error or when the broker gave no session (then every request is full, epoch 0,
    which a broker without sessions answers as a plain fetch).

    A partition missing from an incremental response had nothing new: :meth:`fill`
    answers it with no records and the offsets last reported for it."""

    __slots__ = ("epoch", "last", "sent", "session_id")

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0  # INITIAL_EPOCH: a full fetch asking for a session
        #: what the session holds: partition -> (fetch offset, partition max bytes)
        self.sent: dict[TopicPartition, tuple[int, int]] = {}
        self.last: dict[TopicPartition, PartitionFetch] = {}

    def build(
        self, wanted: dict[TopicPartition, tuple[int, int]]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], list[TopicPartition]]:
        """(partitions to send, partitions to forget) for the next request."""
        if self.epoch == 0:
            self.sent = dict(wanted)
            return dict(wanted), []
        to_send = {tp: v for tp, v in wanted.items() if self.sent.get(tp) != v}
        forget = [tp for tp in self.sent if tp not in wanted]
        self.sent = dict(wanted)
        for tp in forget:
            self.last.pop(tp, None)
        return to_send, forget

    def handle_response(self, error_code: int, session_id: int) -> None:
        if error_code:
            # FETCH_SESSION_ID_NOT_FOUND: start over; anything else: close the session
            # with the next full request (same id, epoch 0)
            if error_code == FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self.epoch = 0
        elif session_id == 0:
            self.session_id, self.epoch = 0, 0  # no session (cache full, or none offered)
        elif self.epoch == 0:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch == 2**31 - 1 else self.epoch + 1

    def reset(self) -> None:
        """Forget the session (the connection failed); the next request is full."""
        self.session_id = self.epoch = 0
        self.sent.clear()
        self.last.clear()

    def fill(self, wanted: Iterable[TopicPartition], got: dict[TopicPartition, PartitionFetch]) -> None:
        for tp in wanted:
            pf = got.get(tp)
            if pf is not None:
                self.last[tp] = pf
            else:
                prev = self.last.get(tp)
                if prev is not None:
                    got[tp] = PartitionFetch(0, prev.high_watermark, prev.log_start_offset, b"",
                                             prev.last_stable_offset, None if prev.aborted_transactions is None else [])


def close_session(client: KafkaClient, node: int, session: FetchSessionHandler) -> None:
    """End ``session`` on the broker (a Fetch of no partitions at FINAL_EPOCH naming it,
    which closes it without opening another), so a finished reader does not hold a slot
    of the broker's session cache. Best effort: a failure only leaves the session to
    the broker's eviction."""
    if session.session_id == 0:
        return
    body = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 0, "isolation_level": 0,
        "session_id": session.session_id, "session_epoch": -1, "topics": [], "forgotten_topics_data": [],
        "rack_id": "",
    }  # fmt: skip
    session.reset()
    try:
        version = client.api_version(node, FETCH, max_version=FETCH_MAX_VERSION)
        client.request(FETCH, body, node_id=node, version=version)
    except (KafkaError, OSError):
        pass


def fetch(
    client: KafkaClient,
    node: int,
    positions: dict[TopicPartition, int],
    *,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: int = 0,
    timeout_ms: float | None = None,
    session: FetchSessionHandler | None = None,
) -> dict[TopicPartition, PartitionFetch]:
    """One Fetch request to ``node`` for ``positions``; raw records per partition.
    With ``session`` (one per broker, used by one caller at a time) the request is
    incremental once the broker gave a session; the result still has every position."""
    client.await_ready(node, timeout_ms)
    version = client.api_version(node, FETCH, max_version=FETCH_MAX_VERSION)
    if version < 7:
        session = None  # sessions are Fetch v7+
    wanted = {tp: (off, partition_max_bytes) for tp, off in positions.items()}
    forget: list[TopicPartition] = []
    if session is not None:
        to_send, forget = session.build(wanted)
    else:
        to_send = wanted
    topics: dict[str, list[dict]] = {}
    for (t, p), (off, pmb) in to_send.items():
        topics.setdefault(t, []).append({"partition": p, "fetch_offset": off, "partition_max_bytes": pmb})
    forgotten: dict[str, list[int]] = {}
    for t, p in forget:
        forgotten.setdefault(t, []).append(p)
    body = {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": session.session_id if session is not None else 0,
        "session_epoch": session.epoch if session is not None else -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()],
        "rack_id": "",
    }
    wait = (timeout_ms or client.request_timeout_ms) + max_wait_ms
    try:
        resp = client.request(FETCH, body, node_id=node, version=version, timeout_ms=wait)
    except BaseException:
        if session is not None:
            session.reset()
        raise
    top_error = int(getattr(resp, "error_code", 0) or 0)
    if session is not None:
        was_incremental = session.epoch != 0
        session.handle_response(top_error, int(getattr(resp, "session_id", 0) or 0))
        if top_error in SESSION_ERRORS and was_incremental:
            # the broker lost or refused the session: once more as a full fetch
            return fetch(
                client, node, positions, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                partition_max_bytes=partition_max_bytes, isolation_level=isolation_level,
                timeout_ms=timeout_ms, session=session,
            )  # fmt: skip
    if top_error:
        raise BrokerResponseError(top_error, "Fetch")
    out: dict[TopicPartition, PartitionFetch] = {}
    for t in resp.responses:
        for p in t.partitions:
            aborted = getattr(p, "aborted_transactions", None)
            out[(t.topic, int(p.partition_index))] = PartitionFetch(
                int(p.error_code),
                int(p.high_watermark),
                int(getattr(p, "log_start_offset", -1)),
                p.records,
                int(getattr(p, "last_stable_offset", -1)),
                None
                if aborted is None
                else [AbortedTransaction(int(a.producer_id), int(a.first_offset)) for a in aborted],
            )
    if session is not None:
        session.fill(positions, out)
    return out


def end_offsets(
    client: KafkaClient,
    tps: Iterable[TopicPartition],
    *,
    isolation_level: int = 0,
    timeout_ms: float = 30_000,
) -> dict[TopicPartition, int]:
    """The end offset of each partition: the high watermark at read_uncommitted, the
    last stable offset at read_committed. ListOffsets LATEST (at that isolation level),
    checked against the same offset in a Fetch at that isolation level from the answer
    (one per leader, at most one byte asked per partition, min_bytes 0, so it does not
    wait).

    Kafka and tidegate answer both the same, and the Fetch then carries no records.
    Some Kafka-compatible brokers answer LATEST short of the high watermark (Tansu
    gives the base offset of the last batch + 1); reading up to that would silently
    leave the end of the last batch unread, so the larger of the two is used.
    """
    tps = list(tps)
    latest = list_offsets(
        client, dict.fromkeys(tps, LATEST), isolation_level=isolation_level, timeout_ms=timeout_ms
    )
    committed = isolation_level == READ_COMMITTED
    by_node, _ = _group_by_leader(client, latest)
    for node, node_tps in by_node.items():
        got = fetch(
            client,
            node,
            {tp: latest[tp] for tp in node_tps},
            max_wait_ms=1,  # Tansu answers a 0 ms fetch with no partitions at all
            min_bytes=0,
            max_bytes=1,
            partition_max_bytes=1,
            isolation_level=isolation_level,
            timeout_ms=timeout_ms,
        )
        for tp, pf in got.items():
            end = pf.last_stable_offset if committed else pf.high_watermark
            if pf.error_code == 0 and end > latest.get(tp, -1):
                latest[tp] = end
    return latest


def read_range(
    client: KafkaClient,
    tp: TopicPartition,
    start: int,
    end: int,
    **kwargs: Any,
) -> Iterator[ConsumerRecord]:
    """The records of ``tp`` with ``start <= offset < end``, one by one (see
    :func:`read_range_batches`, which takes the same arguments)."""
    for recs in read_range_batches(client, tp, start, end, **kwargs):
        yield from recs


def read_range_batches(
    client: KafkaClient,
    tp: TopicPartition,
    start: int,
    end: int,
    *,
    partition_max_bytes: int = 1024 * 1024,
    max_wait_ms: int = 500,
    isolation_level: int = 0,
    timeout_ms: float = 120_000,
    on_out_of_range: Callable[[FetchOffsetOutOfRangeError], int | None] | None = None,
) -> Iterator[list[ConsumerRecord]]:
    """The records of ``tp`` with ``start <= offset < end``, in order, a list per record
    batch (fewer Python-level steps per record than one generator step each).

    Each Fetch asks for at most ``partition_max_bytes`` (a batch larger than that is
    still returned whole, as Kafka does since KIP-74, so progress never stalls).
    Offsets missing inside the range (compaction, control records, and at
    ``read_committed`` aborted transactions, see :class:`CompletedFetch`) are skipped
    silently: the range is complete once the position passes ``end``, even when its
    last offsets are markers or aborted records. When ``start`` (or a later position)
    is out of range, ``on_out_of_range`` decides: it returns the offset to continue
    from, or None to stop; without it the error is raised. ``timeout_ms`` bounds the
    time spent without progress (the offsets up to ``end`` must be readable at
    ``isolation_level``: ``end`` comes from a ListOffsets the caller made at it).
    """
    pos = start
    sessions: dict[int, FetchSessionHandler] = {}  # one incremental fetch session per leader
    try:
        yield from _read_range(client, tp, pos, end, partition_max_bytes, max_wait_ms, isolation_level,
                               timeout_ms, on_out_of_range, sessions)
    finally:
        for node, session in sessions.items():
            close_session(client, node, session)


def _read_range(
    client: KafkaClient, tp: TopicPartition, pos: int, end: int, partition_max_bytes: int, max_wait_ms: int,
    isolation_level: int, timeout_ms: float,
    on_out_of_range: Callable[[FetchOffsetOutOfRangeError], int | None] | None,
    sessions: dict[int, FetchSessionHandler],
) -> Iterator[list[ConsumerRecord]]:
    clock = client.clock
    stalled_since = clock.milliseconds()
    while pos < end:
        leader = client.cluster.leader_for(*tp)
        if leader is None:
            client.metadata([tp[0]], timeout_ms=timeout_ms)
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                if clock.milliseconds() - stalled_since > timeout_ms:
                    raise KafkaError(f"no leader for {tp[0]}-{tp[1]}")
                clock.sleep(0.1)
                continue
        got = fetch(
            client,
            leader,
            {tp: pos},
            max_wait_ms=max_wait_ms,
            partition_max_bytes=partition_max_bytes,
            max_bytes=partition_max_bytes,
            isolation_level=isolation_level,
            session=sessions.setdefault(leader, FetchSessionHandler()),
        ).get(tp)
        if got is None:
            raise KafkaError(f"Fetch response without {tp[0]}-{tp[1]}")
        if got.error_code == OFFSET_OUT_OF_RANGE:
            # Kafka answers an error with no offsets (-1): the available range comes
            # from ListOffsets, as Spark's KafkaDataConsumer.getAvailableOffsetRange does
            earliest = list_offsets(client, {tp: -2}, timeout_ms=timeout_ms)[tp]
            latest = list_offsets(client, {tp: -1}, isolation_level=isolation_level, timeout_ms=timeout_ms)[tp]
            err = FetchOffsetOutOfRangeError(tp, pos, earliest, latest)
            if on_out_of_range is None:
                raise err
            nxt = on_out_of_range(err)
            if nxt is None or nxt >= end:
                return
            pos = nxt
            stalled_since = clock.milliseconds()
            continue
        if got.error_code:
            err2 = BrokerResponseError(got.error_code, f"Fetch {tp[0]}-{tp[1]}")
            if got.error_code in INVALID_METADATA_CODES or err2.retriable:
                if clock.milliseconds() - stalled_since > timeout_ms:
                    raise err2
                clock.sleep(0.1)
                client.metadata([tp[0]], timeout_ms=timeout_ms)
                continue
            raise err2
        completed = CompletedFetch(
            got.records,
            pos,
            isolation_level=isolation_level,
            aborted_transactions=got.aborted_transactions,
        )
        yield from completed.record_batches(end)
        if completed.next_fetch_offset >= end:
            return
        if completed.next_fetch_offset > pos:
            pos = completed.next_fetch_offset
            stalled_since = clock.milliseconds()
            continue
        if clock.milliseconds() - stalled_since > timeout_ms:
            lso = (
                f", last stable offset {got.last_stable_offset}"
                if isolation_level == READ_COMMITTED
                else ""
            )
            raise KafkaError(
                f"no records from {tp[0]}-{tp[1]} at offset {pos} within {timeout_ms:.0f} ms "
                f"(range ends at {end}, high watermark {got.high_watermark}{lso})"
            )
