"""``__transaction_state`` records: Kafka's TransactionLog key and value formats.

Key (``TransactionLogKey``): int16 version 0, then the transactional id as a string
(int16 length + UTF-8). Value (``TransactionLogValue`` version 0, the format a cluster
at transaction.version 0 writes; tidegate advertises no finalized transaction.version):

===============================  ========================================
ProducerId                       int64
ProducerEpoch                    int16
TransactionTimeoutMs             int32
TransactionStatus                int8 (the state id)
TransactionPartitions            [{Topic string, PartitionIds [int32]}], null when Empty
TransactionLastUpdateTimestampMs int64
TransactionStartTimestampMs      int64
===============================  ========================================

A null value (tombstone) means the id expired. ``lastProducerEpoch`` is not stored (as in
Kafka: after a reload an InitProducerId "retry" of the old epoch is fenced). An id lives
in partition ``abs(Java String.hashCode(id)) % transaction.state.log.num.partitions``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tidegate.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from tidegate.utils.topic import TRANSACTION_STATE_TOPIC_NAME

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME
KEY_VERSION = 0
VALUE_VERSION = 0

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_VALUE_TAIL = struct.Struct(">qq")  # last update, start


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``partitionFor``: ``Utils.abs(hashCode) % num_partitions``."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    return _H.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key, or None for a key version this broker cannot read
    (skipped, as Kafka skips unknown key versions)."""
    (version,) = _H.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    (n,) = _H.unpack_from(data, 2)
    return bytes(data[4 : 4 + n]).decode("utf-8")


def encode_value(t: TxnTransitMetadata) -> bytes:
    if t.state is TransactionState.DEAD or t.state is TransactionState.PREPARE_EPOCH_FENCE:
        raise ValueError(f"{t.state} is never written to the transaction log")
    out = bytearray(_VALUE_HEAD.pack(VALUE_VERSION, t.producer_id, t.producer_epoch, t.txn_timeout_ms,
                                     t.state.id))
    if t.state is TransactionState.EMPTY:
        out += _I.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(t.topic_partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += _I.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            out += _string(topic)
            out += _I.pack(len(partitions))
            out += b"".join(_I.pack(p) for p in partitions)
    out += _VALUE_TAIL.pack(t.txn_last_update_timestamp, t.txn_start_timestamp)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(data, 0)
    if version != VALUE_VERSION:
        raise ValueError(f"transaction log value version {version} of {transactional_id!r}")
    pos = _VALUE_HEAD.size
    (count,) = _I.unpack_from(data, pos)
    pos += 4
    partitions: list[tuple[str, int]] = []
    for _ in range(max(count, 0)):
        (n,) = _H.unpack_from(data, pos)
        topic = bytes(data[pos + 2 : pos + 2 + n]).decode("utf-8")
        pos += 2 + n
        (pcount,) = _I.unpack_from(data, pos)
        pos += 4
        for _ in range(pcount):
            (p,) = _I.unpack_from(data, pos)
            partitions.append((topic, p))
            pos += 4
    last_update, start = _VALUE_TAIL.unpack_from(data, pos)
    return TransactionMetadata(
        transactional_id, pid, epoch, timeout, TransactionState.from_id(status), last_update,
        last_producer_epoch=NO_PRODUCER_EPOCH, topic_partitions=partitions, txn_start_timestamp=start,
    )  # fmt: skip


def partitions_by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return out
