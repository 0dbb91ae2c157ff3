"""Reading a whole log back: what a coordinator does when it loads its internal topic.

:func:`replay_records` yields ``(offset, key, value)`` for every data record from the
log start offset to the log end, in offset order, reading the log in bounded chunks
(``transaction.state.log.load.buffer.size`` / ``offsets.load.buffer.size`` in Kafka).
Control batches carry no data records and are skipped by the record decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from .log import Log
from .record_batch import iter_batches, read_header
from .records import decode_batch_records, iter_decoded_batches

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 5 * 1024 * 1024


def replay_records(
    plog: Log, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    offset = plog.log_start_offset
    end = plog.log_end_offset
    while offset < end:
        data = plog.read(offset, chunk_bytes)
        if not data:
            break
        last = offset
        for batch in iter_decoded_batches(data):
            for r in decode_batch_records(batch):
                if r.offset >= offset:
                    last = r.offset
                    yield r.offset, r.key, r.value
        # continue after the last whole batch read (a batch may hold only skipped records)
        nxt = offset
        for pos, _size in iter_batches(data):
            nxt = read_header(data, pos).next_offset
        if nxt <= offset:
            log.error("replay of %s stopped at offset %d (no progress)", plog, offset)
            break
        offset = max(nxt, last + 1)
