"""``__share_group_state`` records: Kafka's ShareSnapshot (type 0) and ShareUpdate (type 1),
in tidegate's JSON convention (Kafka's ``ShareCoordinatorRecordHelpers`` and serde).

Format: the convention of ``__consumer_offsets`` (:mod:`tidegate.coordinator.group.group_metadata_manager`),
not Kafka's binary schemas: the records are read only by this broker, a JSON record is
readable with ``tidegate consume``/kcat when something goes wrong, and the coordinators'
records stay one format. Keys are compact JSON arrays, the value a JSON object (``v`` is
the format version) or null for a tombstone:

=======================================  ===================================================
``["ss", group, topic id, partition]``   ShareSnapshot: the whole state of the share-partition
                                         (``snapshot_epoch``, ``state_epoch``,
                                         ``leader_epoch``, ``start_offset``,
                                         ``delivery_complete_count``, ``create_ts``,
                                         ``write_ts``, ``batches``)
``["su", group, topic id, partition]``   ShareUpdate: a write's delta (``snapshot_epoch`` of
                                         the snapshot it follows, ``leader_epoch`` and
                                         ``start_offset``, -1 for unchanged,
                                         ``delivery_complete_count``, ``batches``)
=======================================  ===================================================

``batches`` is a list of ``[first offset, last offset, delivery state, delivery count]``.
A tombstone (deleting the share-partition's state) is the snapshot key with a null value.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidegate.server.share.persister import PersisterStateBatch, ShareGroupOffset, SharePartitionKey

__all__ = [
    "FORMAT_VERSION",
    "ShareRecord",
    "ShareRecordType",
    "ShareUpdate",
    "decode_record",
    "encode_record",
]

FORMAT_VERSION = 1


class ShareRecordType(enum.Enum):
    """Kafka's record types of the share coordinator (the key prefix here)."""

    SHARE_SNAPSHOT = "ss"
    SHARE_UPDATE = "su"


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A ShareUpdate value: a write's delta, applied with
    :func:`~tidegate.server.share.persister.merge_state`."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[PersisterStateBatch, ...]


class ShareRecord(NamedTuple):
    """One record: a snapshot (value a ShareGroupOffset), an update (a ShareUpdate) or a
    tombstone (a snapshot key, value None)."""

    type: ShareRecordType
    key: SharePartitionKey
    value: ShareGroupOffset | ShareUpdate | None

    @classmethod
    def snapshot(cls, key: SharePartitionKey, value: ShareGroupOffset) -> ShareRecord:
        return cls(ShareRecordType.SHARE_SNAPSHOT, key, value)

    @classmethod
    def update(cls, key: SharePartitionKey, value: ShareUpdate) -> ShareRecord:
        return cls(ShareRecordType.SHARE_UPDATE, key, value)

    @classmethod
    def tombstone(cls, key: SharePartitionKey) -> ShareRecord:
        return cls(ShareRecordType.SHARE_SNAPSHOT, key, None)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _batches(batches: tuple[PersisterStateBatch, ...]) -> list[list[int]]:
    return [list(b) for b in batches]


def _decode_batches(items: list[list[int]]) -> tuple[PersisterStateBatch, ...]:
    return tuple(PersisterStateBatch(*(int(x) for x in item)) for item in items)


def encode_record(record: ShareRecord) -> tuple[bytes, bytes | None]:
    """The (key, value-or-None) of a record as written to ``__share_group_state``."""
    rtype, key, value = record
    key_bytes = _dumps([rtype.value, key.group_id, str(key.topic_id), key.partition])
    if value is None:
        return key_bytes, None
    if isinstance(value, ShareGroupOffset):
        body: dict[str, Any] = {
            "snapshot_epoch": value.snapshot_epoch,
            "state_epoch": value.state_epoch,
            "leader_epoch": value.leader_epoch,
            "start_offset": value.start_offset,
            "delivery_complete_count": value.delivery_complete_count,
            "create_ts": value.create_timestamp,
            "write_ts": value.write_timestamp,
        }
    else:
        body = {
            "snapshot_epoch": value.snapshot_epoch,
            "leader_epoch": value.leader_epoch,
            "start_offset": value.start_offset,
            "delivery_complete_count": value.delivery_complete_count,
        }
    return key_bytes, _dumps({"v": FORMAT_VERSION, **body, "batches": _batches(value.state_batches)})


def decode_record(key: bytes, value: bytes | None) -> ShareRecord | None:
    """The record of a (key, value) read back; None for a key of another kind. Raises
    ValueError, KeyError, IndexError or TypeError for a malformed record."""
    parts = json.loads(key)
    try:
        rtype = ShareRecordType(parts[0])
    except ValueError:
        return None
    spk = SharePartitionKey(str(parts[1]), uuid.UUID(parts[2]), int(parts[3]))
    if value is None:
        return ShareRecord(rtype, spk, None)
    d = json.loads(value)
    batches = _decode_batches(d["batches"])
    if rtype is ShareRecordType.SHARE_SNAPSHOT:
        return ShareRecord.snapshot(spk, ShareGroupOffset(
            state_epoch=d["state_epoch"], start_offset=d["start_offset"], leader_epoch=d["leader_epoch"],
            state_batches=batches, delivery_complete_count=d["delivery_complete_count"],
            snapshot_epoch=d["snapshot_epoch"], create_timestamp=d["create_ts"], write_timestamp=d["write_ts"],
        ))  # fmt: skip
    return ShareRecord.update(spk, ShareUpdate(
        d["snapshot_epoch"], d["leader_epoch"], d["start_offset"], d["delivery_complete_count"], batches,
    ))  # fmt: skip
