"""Reading a whole log back: what a coordinator does when it loads its internal topic.

:func:`replay_batches` yields every batch from the log start offset to the log end, in
offset order, reading the log in bounded chunks (``transaction.state.log.load.buffer.size``
/ ``offsets.load.buffer.size`` in Kafka): its producer id and epoch, whether it is
transactional or a control batch (a transaction marker), and its records, control
records included. The group coordinator needs all of that (transactional offset
commits stay pending until their producer's marker); the transaction coordinator needs
only the data records, :func:`replay_records`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import NamedTuple

from tidegate.record.record_batch import iter_batches, read_header
from tidegate.record.records import ConsumerRecord, decode_batch_records, iter_decoded_batches

from .log import Log

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 5 * 1024 * 1024


class ReplayedBatch(NamedTuple):
    base_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    #: the records at or after the log start offset (a control batch: its marker record)
    records: list[ConsumerRecord]


def replay_batches(plog: Log, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[ReplayedBatch]:
    offset = plog.log_start_offset
    end = plog.log_end_offset
    while offset < end:
        data = plog.read(offset, chunk_bytes)
        if not data:
            break
        last = offset
        for batch in iter_decoded_batches(data):
            if batch.last_offset < offset:
                continue
            records = [r for r in decode_batch_records(batch, include_control=True) if r.offset >= offset]
            if records:
                last = records[-1].offset
            yield ReplayedBatch(
                batch.base_offset, batch.producer_id, batch.producer_epoch, batch.is_transactional,
                batch.is_control, records,
            )  # fmt: skip
        # continue after the last whole batch read (a batch may hold only skipped records)
        nxt = offset
        for pos, _size in iter_batches(data):
            nxt = read_header(data, pos).next_offset
        if nxt <= offset:
            log.error("replay of %s stopped at offset %d (no progress)", plog, offset)
            break
        offset = max(nxt, last + 1)


def replay_records(
    plog: Log, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of every data record (control batches skipped)."""
    for batch in replay_batches(plog, chunk_bytes):
        if not batch.is_control:
            for r in batch.records:
                yield r.offset, r.key, r.value
