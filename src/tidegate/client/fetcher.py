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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidegate.errors import (
    INVALID_METADATA_CODES,
    BrokerResponseError,
    KafkaError,
    OffsetOutOfRangeError,
    UnsupportedVersionError,
)
from tidegate.record.control_records import ControlRecordType, parse_control_key
from tidegate.record.records import (
    BatchInfo,
    ConsumerRecord,
    decode_batch_records,
    iter_decoded_batches,
)
from tidegate.utils import INT32_MAX

from .client import KafkaClient

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedTransaction",
    "CompletedFetch",
    "FetchOffsetOutOfRangeError",
    "FetchPosition",
    "FetchSessionHandler",
    "LogTruncationError",
    "OffsetOutOfRangeError",
    "PartitionFetch",
    "end_offsets",
    "fetch",
    "is_retriable",
    "list_offsets",
    "offsets_for_leader_epochs",
    "read_range",
    "read_range_batches",
    "refresh_metadata",
    "validate_positions",
]

FETCH = 1
LIST_OFFSETS = 2
OFFSET_FOR_LEADER_EPOCH = 23
EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
OFFSET_OUT_OF_RANGE = 1
FETCH_SESSION_ID_NOT_FOUND = 70
#: FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR
SESSION_ERRORS = frozenset({70, 71, 106})
#: how long a reader waits before fetching again after a retriable error
RETRY_BACKOFF_S = 0.1
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
        #: the leader epoch of the last batch read (None until one is): the epoch a
        #: position is validated with after a leader change (KIP-320)
        self.last_epoch: int | None = None
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
            if batch.partition_leader_epoch >= 0:
                self.last_epoch = batch.partition_leader_epoch
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
        last_error: KafkaError | None = None
        for node, tps in by_node.items():
            left = max(1.0, deadline - clock.milliseconds())
            topics: dict[str, list[dict]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    {
                        "partition_index": p,
                        "timestamp": pending[(t, p)],
                        "current_leader_epoch": client.cluster.leader_epoch(t, p),
                    }
                )
            body = {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            try:
                client.await_ready(node, left)
                version = client.api_version(node, LIST_OFFSETS, max_version=LIST_OFFSETS_MAX_VERSION)
                resp = client.request(LIST_OFFSETS, body, node_id=node, version=version, timeout_ms=left)
            except KafkaError as exc:
                if not is_retriable(exc):
                    raise
                # the leader went away (down, moved, timed out): ask the new one
                last_error = exc
                retry.update({tp: pending[tp] for tp in tps})
                continue
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
            refresh_metadata(client, {t for t, _ in pending}, timeout_ms)
    return result


def is_retriable(exc: KafkaError) -> bool:
    """Whether the same request may succeed after a metadata refresh and a backoff: a
    retriable error (a lost connection, a timeout, REQUEST_TIMED_OUT...) or stale
    metadata (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH...)."""
    return exc.retriable or exc.code in INVALID_METADATA_CODES


def refresh_metadata(client: KafkaClient, topics: Iterable[str], timeout_ms: float) -> bool:
    """Metadata of ``topics`` from any broker that answers; False (the old metadata
    kept) when none does: the caller backs off and tries again, as Kafka's clients do
    while brokers come and go."""
    try:
        client.metadata(sorted(set(topics)), timeout_ms=timeout_ms)
    except KafkaError as exc:
        if not is_retriable(exc):
            raise
        return False
    return True


class LogTruncationError(FetchOffsetOutOfRangeError):
    """KIP-320: after a leader change, the new leader's log ends below this reader's
    position in the epoch of the last records read (an unclean leader election
    truncated records that were read). Kafka's ``LogTruncationException``, also an
    out-of-range error; ``divergent_offset`` is where the logs part (the partition
    range given is [log start unknown (-1), divergent offset])."""

    def __init__(self, tp: TopicPartition, offset: int, divergent_offset: int) -> None:
        super().__init__(tp, offset, -1, divergent_offset)
        self.divergent_offset = divergent_offset
        message = (
            f"truncation detected for {tp[0]}-{tp[1]}: position {offset}, but the new "
            f"leader's log ends at {divergent_offset} for the epoch of the records read"
        )
        self.args = (message,)


@dataclass(slots=True)
class FetchPosition:
    """Where the next Fetch of a partition starts (Kafka's ``SubscriptionState.FetchPosition``):
    the offset, the leader epoch of the records before it (None: not known, e.g. a
    position from ListOffsets or a commit) and the leader and leader epoch the position
    was last valid for. :func:`validate_positions` checks it again when they change."""

    offset: int
    offset_epoch: int | None = None
    leader: int | None = None
    leader_epoch: int = -1

    def advance(self, completed: CompletedFetch) -> None:
        """Move past what ``completed`` read."""
        self.offset = completed.next_fetch_offset
        if completed.last_epoch is not None:
            self.offset_epoch = completed.last_epoch


def offsets_for_leader_epochs(
    client: KafkaClient, node: int, wanted: dict[TopicPartition, tuple[int, int]], *, timeout_ms: float
) -> dict[TopicPartition, tuple[int, int, int]]:
    """OffsetForLeaderEpoch (v2+, the first with the current leader epoch) to ``node``:
    for each partition (current leader epoch, epoch asked about), the answer (error
    code, the largest epoch up to the one asked about, the end offset of that epoch)."""
    version = client.api_version(node, OFFSET_FOR_LEADER_EPOCH, min_version=2, max_version=4)
    topics: dict[str, list[dict]] = {}
    for (t, p), (current, epoch) in wanted.items():
        topics.setdefault(t, []).append({"partition": p, "current_leader_epoch": current, "leader_epoch": epoch})
    body = {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
    resp = client.request(OFFSET_FOR_LEADER_EPOCH, body, node_id=node, version=version, timeout_ms=timeout_ms)
    return {(t.topic, int(r.partition)): (int(r.error_code), int(r.leader_epoch), int(r.end_offset))
            for t in resp.topics for r in t.partitions}  # fmt: skip


def validate_positions(
    client: KafkaClient, positions: Mapping[TopicPartition, FetchPosition], *, timeout_ms: float
) -> dict[TopicPartition, LogTruncationError]:
    """KIP-320, as Kafka's consumer validates positions: a position whose partition has a
    new leader (or leader epoch) since it was last valid, and whose records' epoch is
    known, is checked with OffsetForLeaderEpoch at the new leader. A log that ends below
    the position in that epoch was truncated: those partitions are returned with the
    error (their positions unchanged); the others are valid for their new leader.

    A leader without OffsetForLeaderEpoch v2 (or that refuses it: an authorizer asking
    CLUSTER_ACTION of versions before 3, as Kafka's does) cannot be asked: the position
    is taken as valid, as Kafka's consumer does with brokers that lack the API."""
    cluster = client.cluster
    by_node: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
    for tp, pos in positions.items():
        leader = cluster.leader_for(*tp)
        epoch = cluster.leader_epoch(*tp)
        if leader is None or (pos.leader == leader and pos.leader_epoch == epoch):
            continue
        if pos.offset_epoch is None or epoch < 0 or pos.leader is None:
            pos.leader, pos.leader_epoch = leader, epoch  # nothing to validate with
            continue
        by_node.setdefault(leader, {})[tp] = (epoch, pos.offset_epoch)
    truncated: dict[TopicPartition, LogTruncationError] = {}
    for node, wanted in by_node.items():
        try:
            client.await_ready(node, timeout_ms)
            answers = offsets_for_leader_epochs(client, node, wanted, timeout_ms=timeout_ms)
        except UnsupportedVersionError:
            answers = {}
        for tp, (current, _) in wanted.items():
            code, epoch, end = answers.get(tp, (0, -1, -1))
            if code in INVALID_METADATA_CODES:
                continue  # stale metadata: validated once it is refreshed
            pos = positions[tp]
            if code == 0 and 0 <= epoch and 0 <= end < pos.offset:
                truncated[tp] = LogTruncationError(tp, pos.offset, end)
                continue
            pos.leader, pos.leader_epoch = node, current
    return truncated


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
            self.epoch = 1 if self.epoch == INT32_MAX else self.epoch + 1

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
    body = {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": session.session_id if session is not None else 0,
        "session_epoch": session.epoch if session is not None else -1,
        **_fetch_topics(client, node, to_send, forget),
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
    out = _partition_fetches(resp)
    if session is not None:
        session.fill(positions, out)
    return out


def _fetch_topics(
    client: KafkaClient,
    node: int,
    to_send: Mapping[TopicPartition, tuple[int, int]],
    forget: Iterable[TopicPartition],
) -> dict[str, list[dict]]:
    """A Fetch request to ``node``'s ``topics`` (partition -> (offset,
    partition_max_bytes)) and ``forgotten_topics_data``."""
    topics: dict[str, list[dict]] = {}
    cluster = client.cluster
    for (t, p), (off, pmb) in to_send.items():
        # KIP-320: the leader epoch this client knows, so that a leader that moved on
        # (or a stale one) answers FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
        epoch = cluster.leader_epoch(t, p) if cluster.leader_for(t, p) == node else -1
        topics.setdefault(t, []).append({"partition": p, "fetch_offset": off, "partition_max_bytes": pmb,
                                         "current_leader_epoch": epoch})  # fmt: skip
    forgotten: dict[str, list[int]] = {}
    for t, p in forget:
        forgotten.setdefault(t, []).append(p)
    return {
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()],
    }


def _partition_fetches(resp: Any) -> dict[TopicPartition, PartitionFetch]:
    """Each partition of a Fetch response."""
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
    leave the end of the last batch unread, so the larger of the two is used. A
    leader that cannot be fetched from just then (moved, down) keeps ListOffsets'
    answer: a range read to it ends where the next one starts.
    """
    tps = list(tps)
    latest = list_offsets(
        client, dict.fromkeys(tps, LATEST), isolation_level=isolation_level, timeout_ms=timeout_ms
    )
    committed = isolation_level == READ_COMMITTED
    by_node, _ = _group_by_leader(client, latest)
    for node, node_tps in by_node.items():
        try:
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
        except KafkaError as exc:
            if not is_retriable(exc):
                raise
            continue  # the leader moved or went away since ListOffsets: its answer stands
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
    """The loop of :func:`read_range_batches`. The partition's leader comes from the
    client's metadata; when it moves (an error that says the metadata is stale, a lost
    connection, a timeout) the metadata is refreshed and the Fetch goes to the new
    leader, after the position is validated there (KIP-320). Only ``timeout_ms``
    without progress ends the read with the last error. (One loop, ~90 lines: the
    position, the stall clock and the session are its state across leader moves.)"""
    clock = client.clock
    position = FetchPosition(pos)
    stalled_since = clock.milliseconds()

    def stalled(error: KafkaError) -> None:
        """Back off before trying again; raise ``error`` once the read stalled too long."""
        if clock.milliseconds() - stalled_since > timeout_ms:
            raise error
        clock.sleep(RETRY_BACKOFF_S)
        refresh_metadata(client, [tp[0]], timeout_ms)

    while position.offset < end:
        leader = client.cluster.leader_for(*tp)
        if leader is None:
            stalled(KafkaError(f"no leader for {tp[0]}-{tp[1]}"))
            continue
        try:
            truncated = validate_positions(client, {tp: position}, timeout_ms=timeout_ms).get(tp)
            if truncated is not None:
                raise truncated
            got = fetch(
                client, leader, {tp: position.offset}, max_wait_ms=max_wait_ms,
                partition_max_bytes=partition_max_bytes, max_bytes=partition_max_bytes,
                isolation_level=isolation_level, session=sessions.setdefault(leader, FetchSessionHandler()),
            ).get(tp)  # fmt: skip
        except FetchOffsetOutOfRangeError as err:
            nxt = _out_of_range(on_out_of_range, err, end)
            if nxt is None:
                return
            position, stalled_since = FetchPosition(nxt), clock.milliseconds()
            continue
        except KafkaError as exc:
            if not is_retriable(exc):
                raise
            stalled(exc)
            continue
        if got is None:
            raise KafkaError(f"Fetch response without {tp[0]}-{tp[1]}")
        if got.error_code == OFFSET_OUT_OF_RANGE:
            # Kafka answers an error with no offsets (-1): the available range comes
            # from ListOffsets, as Spark's KafkaDataConsumer.getAvailableOffsetRange does
            earliest = list_offsets(client, {tp: -2}, timeout_ms=timeout_ms)[tp]
            latest = list_offsets(client, {tp: -1}, isolation_level=isolation_level, timeout_ms=timeout_ms)[tp]
            nxt = _out_of_range(on_out_of_range, FetchOffsetOutOfRangeError(tp, position.offset, earliest, latest),
                                end)  # fmt: skip
            if nxt is None:
                return
            position, stalled_since = FetchPosition(nxt), clock.milliseconds()
            continue
        if got.error_code:
            err2 = BrokerResponseError(got.error_code, f"Fetch {tp[0]}-{tp[1]}")
            if not is_retriable(err2):
                raise err2
            stalled(err2)
            continue
        completed = CompletedFetch(
            got.records,
            position.offset,
            isolation_level=isolation_level,
            aborted_transactions=got.aborted_transactions,
        )
        yield from completed.record_batches(end)
        if completed.next_fetch_offset >= end:
            return
        if completed.next_fetch_offset > position.offset:
            position.advance(completed)
            stalled_since = clock.milliseconds()
            continue
        if clock.milliseconds() - stalled_since > timeout_ms:
            lso = (
                f", last stable offset {got.last_stable_offset}"
                if isolation_level == READ_COMMITTED
                else ""
            )
            raise KafkaError(
                f"no records from {tp[0]}-{tp[1]} at offset {position.offset} within {timeout_ms:.0f} ms "
                f"(range ends at {end}, high watermark {got.high_watermark}{lso})"
            )


def _out_of_range(
    on_out_of_range: Callable[[FetchOffsetOutOfRangeError], int | None] | None,
    err: FetchOffsetOutOfRangeError,
    end: int,
) -> int | None:
    """Where a range read goes on from after ``err``: what ``on_out_of_range`` says (None:
    stop), or ``err`` raised without one."""
    if on_out_of_range is None:
        raise err
    nxt = on_out_of_range(err)
    return None if nxt is None or nxt >= end else nxt
