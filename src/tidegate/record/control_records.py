"""Control records: the transaction markers (COMMIT, ABORT) a coordinator writes.

Kafka's ``ControlRecordType`` and ``EndTransactionMarker``: a control batch (the
transactional and control attribute bits set, the transaction's producer id and the
marker's epoch, base sequence -1, no compression) holding exactly one record whose

* key is int16 version (0) + int16 type (0 = ABORT, 1 = COMMIT; 2-6 are KRaft types),
* value is int16 version (0) + int32 coordinator epoch.

Newer key or value versions are read as version 0 (their first fields are the same);
unknown types are ignored by readers; a key shorter than 4 bytes is invalid.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from .batch_builder import Record, build_batch
from .records import RecordDecodeError, decode_batch_records, iter_decoded_batches

__all__ = [
    "ControlRecordType",
    "EndTransactionMarker",
    "InvalidControlRecordError",
    "end_transaction_marker_batch",
    "end_transaction_marker_of",
    "parse_control_key",
    "parse_end_transaction_marker",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VALUE_VERSION = 0


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    UNKNOWN = -1


class InvalidControlRecordError(ValueError):
    """A control record key or value too short to parse."""


class EndTransactionMarker(NamedTuple):
    type: ControlRecordType
    coordinator_epoch: int


def parse_control_key(key: bytes | memoryview | None) -> ControlRecordType:
    """The type of a control record (UNKNOWN for the types tidegate does not write)."""
    if key is None or len(key) < _KEY.size:
        raise InvalidControlRecordError(f"control record key of {0 if key is None else len(key)} bytes")
    _version, kind = _KEY.unpack_from(key)
    try:
        return ControlRecordType(kind)
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_end_transaction_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    kind = parse_control_key(key)
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidControlRecordError(f"not an end transaction marker: type {kind}")
    if value is None or len(value) < _VALUE.size:
        raise InvalidControlRecordError("end transaction marker value too short")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTransactionMarker(kind, coordinator_epoch)


def end_transaction_marker_batch(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int
) -> bytearray:
    """The control batch a coordinator appends to each partition of a transaction."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = Record(
        _VALUE.pack(CURRENT_END_TXN_MARKER_VALUE_VERSION, coordinator_epoch),
        _KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, kind),
        timestamp,
    )
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def end_transaction_marker_of(batch: bytes | memoryview) -> EndTransactionMarker | None:
    """The marker in one control batch (its first record), or None for the control types
    that are not transaction markers. Raises :class:`InvalidControlRecordError` for a
    control batch without a record or with a key or value too short to parse."""
    try:
        for info in iter_decoded_batches(batch):
            records = decode_batch_records(info, include_control=True)
            if not records:
                raise InvalidControlRecordError(f"control batch at offset {info.base_offset} has no record")
            kind = parse_control_key(records[0].key)
            if kind is ControlRecordType.UNKNOWN:
                return None
            return parse_end_transaction_marker(records[0].key, records[0].value)
    except RecordDecodeError as exc:
        raise InvalidControlRecordError(str(exc)) from exc
    raise InvalidControlRecordError("truncated control batch")
