"""Consumer-side requests on :class:`~tidegate.client.KafkaClient`: ListOffsets and Fetch.

This is the part of Kafka's ``Fetcher`` / ``OffsetFetcher`` that a reader with
explicitly assigned partitions needs (the Spark data source; a benchmark), without
groups or a poll loop:

- :func:`list_offsets` resolves EARLIEST (-2), LATEST (-1) or a timestamp per
  partition, one request per partition leader, refreshing metadata and retrying when
  leadership moved;
- :func:`end_offsets` is LATEST checked against a Fetch's high watermark (some
  Kafka-compatible brokers answer LATEST short of it);
- :func:`fetch` sends one Fetch to one broker for a set of positions and returns the
  raw records per partition, with the high watermark and log start offset;
- :func:`read_range_batches` (and :func:`read_range`, record by record) reads ``[start, end)`` of one partition as records, one Fetch
  of at most ``partition_max_bytes`` at a time, so memory stays bounded by that
  (plus one decompressed batch) however long the range is.

Fetch v12 is the newest version used: from v13 Fetch names topics by id, which
needs Metadata topic ids and gains nothing here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tidegate.errors import (
    INVALID_METADATA_CODES,
    BrokerResponseError,
    KafkaError,
    OffsetOutOfRangeError,
)
from tidegate.log.records import ConsumerRecord, decode_batch_records, iter_decoded_batches

from .client import KafkaClient

__all__ = [
    "EARLIEST",
    "LATEST",
    "FetchOffsetOutOfRangeError",
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
OFFSET_OUT_OF_RANGE = 1
#: Fetch from v13 identifies topics by topic id; v12 is the last by name.
FETCH_MAX_VERSION = 12
LIST_OFFSETS_MAX_VERSION = 7

TopicPartition = tuple[str, int]


class FetchOffsetOutOfRangeError(OffsetOutOfRangeError):
    """A Fetch position is outside ``[log_start_offset, high_watermark]`` (retention
    deleted it, or the partition was recreated): the shared
    :class:`~tidegate.errors.OffsetOutOfRangeError`, re-exported here, with the partition,
    the position and the range the broker answered with."""

    def __init__(self, tp: TopicPartition, offset: int, log_start: int, high_watermark: int):
        self.tp = tp
        self.offset = offset
        self.log_start_offset = log_start
        self.high_watermark = high_watermark
        super().__init__(
            f"offset {offset} of {tp[0]}-{tp[1]} is out of range "
            f"(log start {log_start}, high watermark {high_watermark})"
        )


@dataclass(slots=True)
class PartitionFetch:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None


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
    deadline = time.monotonic() + timeout_ms / 1000
    _ensure_metadata(client, {t for t, _ in targets}, timeout_ms)
    result: dict[TopicPartition, int] = {}
    pending = dict(targets)
    attempt = 0
    while pending:
        by_node, leaderless = _group_by_leader(client, pending)
        retry: dict[TopicPartition, int] = {tp: pending[tp] for tp in leaderless}
        last_error: BrokerResponseError | None = None
        for node, tps in by_node.items():
            left = max(1.0, (deadline - time.monotonic()) * 1000)
            client.await_ready(node, left)
            version = client.api_version(node, LIST_OFFSETS, max_version=LIST_OFFSETS_MAX_VERSION)
            topics: dict[str, list[dict]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    {"partition_index": p, "timestamp": pending[(t, p)], "max_num_offsets": 1}
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
            if attempt > retries or time.monotonic() > deadline:
                raise last_error or KafkaError(
                    f"no leader for {sorted(pending)} after {attempt} attempts"
                )
            time.sleep(retry_backoff_ms / 1000)
            client.metadata(sorted({t for t, _ in pending}), timeout_ms=timeout_ms)
    return result


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
) -> dict[TopicPartition, PartitionFetch]:
    """One Fetch request to ``node`` for ``positions``; raw records per partition."""
    client.await_ready(node, timeout_ms)
    version = client.api_version(node, FETCH, max_version=FETCH_MAX_VERSION)
    topics: dict[str, list[dict]] = {}
    for (t, p), off in positions.items():
        topics.setdefault(t, []).append(
            {"partition": p, "fetch_offset": off, "partition_max_bytes": partition_max_bytes}
        )
    body = {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    wait = (timeout_ms or client.request_timeout_ms) + max_wait_ms
    resp = client.request(FETCH, body, node_id=node, version=version, timeout_ms=wait)
    top_error = int(getattr(resp, "error_code", 0) or 0)
    if top_error:
        raise BrokerResponseError(top_error, "Fetch")
    out: dict[TopicPartition, PartitionFetch] = {}
    for t in resp.responses:
        for p in t.partitions:
            out[(t.topic, int(p.partition_index))] = PartitionFetch(
                int(p.error_code),
                int(p.high_watermark),
                int(getattr(p, "log_start_offset", -1)),
                p.records,
            )
    return out


def end_offsets(
    client: KafkaClient,
    tps: Iterable[TopicPartition],
    *,
    isolation_level: int = 0,
    timeout_ms: float = 30_000,
) -> dict[TopicPartition, int]:
    """The end offset (high watermark) of each partition: ListOffsets LATEST, checked
    against the high watermark of a Fetch at that offset (one per leader, at most one
    byte asked per partition, min_bytes 0, so it does not wait).

    Kafka and tidegate answer both the same, and the Fetch then carries no records.
    Some Kafka-compatible brokers answer LATEST short of the high watermark (Tansu
    gives the base offset of the last batch + 1); reading up to that would silently
    leave the end of the last batch unread, so the larger of the two is used.
    """
    tps = list(tps)
    latest = list_offsets(
        client, dict.fromkeys(tps, LATEST), isolation_level=isolation_level, timeout_ms=timeout_ms
    )
    if isolation_level != 0:
        return latest  # the last stable offset is what ListOffsets answers
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
            timeout_ms=timeout_ms,
        )
        for tp, pf in got.items():
            if pf.error_code == 0 and pf.high_watermark > latest.get(tp, -1):
                latest[tp] = pf.high_watermark
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
    Offsets missing inside the range (compaction, control records, aborted
    transactions) are skipped silently. When ``start`` (or a later position) is out
    of range, ``on_out_of_range`` decides: it returns the offset to continue from, or
    None to stop; without it the error is raised. ``timeout_ms`` bounds the time spent
    without progress (the records up to ``end`` must exist: ``end`` comes from a
    ListOffsets the caller made).
    """
    pos = start
    stalled_since = time.monotonic()
    while pos < end:
        leader = client.cluster.leader_for(*tp)
        if leader is None:
            client.metadata([tp[0]], timeout_ms=timeout_ms)
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                if time.monotonic() - stalled_since > timeout_ms / 1000:
                    raise KafkaError(f"no leader for {tp[0]}-{tp[1]}")
                time.sleep(0.1)
                continue
        got = fetch(
            client,
            leader,
            {tp: pos},
            max_wait_ms=max_wait_ms,
            partition_max_bytes=partition_max_bytes,
            max_bytes=partition_max_bytes,
            isolation_level=isolation_level,
        ).get(tp)
        if got is None:
            raise KafkaError(f"Fetch response without {tp[0]}-{tp[1]}")
        if got.error_code == OFFSET_OUT_OF_RANGE:
            err = FetchOffsetOutOfRangeError(tp, pos, got.log_start_offset, got.high_watermark)
            if on_out_of_range is None:
                raise err
            nxt = on_out_of_range(err)
            if nxt is None or nxt >= end:
                return
            pos = nxt
            stalled_since = time.monotonic()
            continue
        if got.error_code:
            err2 = BrokerResponseError(got.error_code, f"Fetch {tp[0]}-{tp[1]}")
            if got.error_code in INVALID_METADATA_CODES or err2.retriable:
                if time.monotonic() - stalled_since > timeout_ms / 1000:
                    raise err2
                time.sleep(0.1)
                client.metadata([tp[0]], timeout_ms=timeout_ms)
                continue
            raise err2
        progressed = False
        if got.records:
            for batch in iter_decoded_batches(got.records):
                if batch.last_offset < pos:
                    continue
                if batch.base_offset >= end:
                    return
                recs = decode_batch_records(batch)
                if batch.base_offset < pos or batch.last_offset >= end:
                    recs = [r for r in recs if pos <= r[0] < end]
                if recs:
                    yield recs
                if batch.last_offset >= end - 1:
                    return
                pos = batch.last_offset + 1
                progressed = True
        if progressed:
            stalled_since = time.monotonic()
            continue
        if time.monotonic() - stalled_since > timeout_ms / 1000:
            raise KafkaError(
                f"no records from {tp[0]}-{tp[1]} at offset {pos} within {timeout_ms:.0f} ms "
                f"(range ends at {end}, high watermark {got.high_watermark})"
            )
