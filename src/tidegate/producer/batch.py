"""Producer batches and record futures (Kafka's ``ProducerBatch``,
``ChunkedProducerBatch``, ``ProduceRequestResult``, ``FutureRecordMetadata``).

A batch holds the records for one partition in record batch v2 form from the
first append: the 61-byte header is reserved at the start of its memory, each
record is encoded with :func:`tidegate.record.batch_builder.encode_record` (the same
encoder the broker's tests use) and written straight after the previous one, and
at :meth:`ProducerBatch.close` the header and CRC are filled in, so sending it is
handing its memory to the socket.

Two kinds of memory, one per allocation strategy:

- :class:`ProducerBatch` (``full``): one ``bytearray`` of ``max(batch.size,
  first record)`` bytes from the pool;
- :class:`ChunkedProducerBatch` (``incremental``): a list of fixed-size chunks
  from the pool, written in order, grown by the accumulator before an append
  needs more; :meth:`segments` returns views of the used chunks, which the
  sender passes to ``sendmsg`` as they are.

With compression, record bytes go through a
:class:`~tidegate.record.compression.StreamCompressor` and the compressed output
is what lands in the batch's memory, as Kafka's compressor streams write into
the batch buffer.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from tidegate.record.batch_builder import (
    _VARINTS,
    MAX_RECORD_OVERHEAD,
    batch_crc,
    encode_record,
    record_size_upper_bound,
    set_crc,
    write_header,
)
from tidegate.record.compression import NONE, StreamCompressor
from tidegate.record.record_batch import RECORD_BATCH_OVERHEAD

from .buffer_pool import BufferPool

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "ChunkedProducerBatch",
    "FailedFuture",
    "ProduceRequestResult",
    "ProducerBatch",
    "RecordFuture",
    "RecordMetadata",
]

#: Kafka's ``COMPRESSION_RATE_ESTIMATION_FACTOR``: a safety margin on the estimate.
COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05
_HEADER = RECORD_BATCH_OVERHEAD
_NCACHED = len(_VARINTS)


class RecordMetadata(NamedTuple):
    """Where a record was written (Kafka's ``RecordMetadata``). ``offset`` is -1 for
    acks=0; ``timestamp`` is the broker's append time on LogAppendTime topics."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


class ProduceRequestResult:
    """The outcome of one batch, shared by the futures of its records."""

    __slots__ = (
        "_done",
        "_event",
        "base_offset",
        "error",
        "lock",
        "log_append_time",
        "partition",
        "topic",
    )

    def __init__(self, topic: str = "", partition: int = -1) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._event = threading.Event()
        self._done = False
        self.lock = threading.Lock()

    def set(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        with self.lock:
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self._done = True
        self._event.set()

    @property
    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class RecordFuture:
    """The future of one record (``concurrent.futures.Future``-like).

    ``result(timeout)`` -> :class:`RecordMetadata` or raises the record's error;
    ``exception(timeout)``; ``done()``; ``add_done_callback(fn)`` calls
    ``fn(future)`` on completion (on the sender thread, or at once if already done).
    A record cannot be cancelled once accepted: ``cancel()`` returns False.
    """

    __slots__ = ("_cbs", "_ksz", "_on_delivery", "_rel", "_result", "_ts", "_vsz")

    def __init__(
        self,
        result: ProduceRequestResult,
        relative_offset: int,
        timestamp: int,
        key_size: int,
        value_size: int,
        on_delivery: Any = None,
    ) -> None:
        self._result = result
        self._rel = relative_offset
        self._ts = timestamp
        self._ksz = key_size
        self._vsz = value_size
        self._cbs: list[Any] | None = None
        self._on_delivery = on_delivery

    # -- Future API -----------------------------------------------------------------
    def done(self) -> bool:
        return self._result._done

    def running(self) -> bool:
        return not self._result._done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._result._done and not self._result.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        err = self._result.error
        if err is not None:
            raise err
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._result._done and not self._result.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        return self._result.error

    def add_done_callback(self, fn: Any) -> None:
        r = self._result
        with r.lock:
            if not r._done:
                if self._cbs is None:
                    self._cbs = [fn]
                else:
                    self._cbs.append(fn)
                return
        fn(self)

    # -- internals -------------------------------------------------------------------
    def _metadata(self) -> RecordMetadata:
        r = self._result
        offset = r.base_offset + self._rel if r.base_offset >= 0 else -1
        ts = r.log_append_time if r.log_append_time >= 0 else self._ts
        return RecordMetadata(r.topic, r.partition, offset, ts, self._ksz, self._vsz)

    @property
    def partition(self) -> int:
        return self._result.partition

    @property
    def topic(self) -> str:
        return self._result.topic

    def _fire(self) -> None:
        """Run callbacks after the batch result was set (sender thread)."""
        cb = self._on_delivery
        if cb is not None:
            err = self._result.error
            try:
                cb(None if err is not None else self._metadata(), err)
            except Exception:
                import logging

                logging.getLogger("tidegate.producer").exception("delivery callback failed")
        if self._cbs:
            for fn in self._cbs:
                try:
                    fn(self)
                except Exception:
                    import logging

                    logging.getLogger("tidegate.producer").exception("done callback failed")

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("error" if self._result.error else "done")
        return f"<RecordFuture {self._result.topic}-{self._result.partition} {state}>"


class FailedFuture(RecordFuture):
    """A record that failed before it was appended (buffer exhausted, too large,
    metadata timeout): already done with ``error``."""

    __slots__ = ()

    def __init__(self, topic: str, partition: int, error: BaseException, on_delivery: Any = None):
        r = ProduceRequestResult(topic, partition if partition is not None else -1)
        r.set(-1, -1, error)
        super().__init__(r, 0, -1, -1, -1, on_delivery)
        self._fire()


class ProducerBatch:
    """A batch backed by one buffer (the ``full`` strategy)."""

    # not slotted: ChunkedProducerBatch adds fields; attribute access speed is the same.

    def __init__(
        self,
        topic: str,
        partition: int,
        buffer: bytearray,
        pool: BufferPool | None,
        *,
        write_limit: int,
        compression: int = NONE,
        compression_ratio: float = 1.0,
        created_ms: int = 0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.pool = pool
        self.buffer = buffer
        self.initial_capacity = len(buffer)
        self.pos = _HEADER
        self.write_limit = write_limit
        self.compression = compression
        self.compressor = StreamCompressor(compression) if compression != NONE else None
        # projected bytes per uncompressed byte (ratio x safety factor), 1.0 when uncompressed
        self.estimation = (
            compression_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR if compression != NONE else 1.0
        )
        self.actual_compression_ratio = 1.0
        self.count = 0
        self.uncompressed = 0  # record bytes written before compression
        self.est = _HEADER  # estimated_bytes_written(), kept current
        self.base_ts = -1
        self.max_ts = -1
        self.futures: list[RecordFuture] = []
        self.result = ProduceRequestResult(topic, partition)
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.attempts = 0
        #: KIP-360: an epoch bump renumbered this batch from sequence 0 (Kafka's
        #: ``sequenceHasBeenReset``)
        self.sequence_reset = False
        self.backoff_ms = 0.0
        self.retry = False
        #: the error of the last failed attempt (named when the batch expires)
        self.last_error: BaseException | None = None
        self.closed_for_appends = False
        self.closed = False  # header written, bytes final
        self.final_size = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.transactional = False
        self.in_flight = False
        self.finalized = False  # completed or failed
        self.close_after_append = False

    # -- appending ------------------------------------------------------------------------

    def estimated_bytes_written(self) -> int:
        """Kafka's ``estimatedBytesWritten``: header + record bytes (x ratio x 1.05 when
        compressed); exact when uncompressed."""
        return self.est

    def is_full(self) -> bool:
        return self.closed_for_appends or (self.count > 0 and self.write_limit <= self.est)

    def try_append(
        self,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        on_delivery: Any = None,
    ) -> RecordFuture | None:
        """Append a record, or None if the batch is full or closed (the caller starts a
        new batch). The first record of a batch is always accepted."""
        rec = self._encode_if_room(timestamp, key, value, headers)
        if rec is None:
            return None
        n = self.count
        if n == 0:
            self.base_ts = timestamp
        self.count = n + 1
        return self._finish_append(rec, n, timestamp, key, value, on_delivery)

    def _encode_if_room(self, timestamp: int, key: Any, value: Any, headers: Any) -> bytes | None:
        """The record encoded as the batch's next one, or None if the batch is closed or
        has no room for it (Kafka's ``hasRoomFor``: not full, and the write limit still
        fits the record uncompressed). The first record always fits."""
        if self.closed_for_appends:
            return None
        n = self.count
        if n == 0:
            return encode_record(0, 0, key, value, headers)
        rec = encode_record(n, timestamp - self.base_ts, key, value, headers)
        est = self.est
        limit = self.write_limit
        if limit <= est or limit < est + len(rec):
            return None
        return rec

    def _append_raw(self, rec: bytes) -> None:
        """Put an encoded record into the (uncompressed) batch."""
        self._write(rec)

    def _finish_append(
        self, rec: bytes, n: int, timestamp: int, key: Any, value: Any, on_delivery: Any
    ) -> RecordFuture:
        """The part of an append both strategies share: write the record (through the
        compressor if any), update the size estimate and the max timestamp, and hand
        out the record's future."""
        unc = self.uncompressed + len(rec)
        self.uncompressed = unc
        c = self.compressor
        if c is None:
            self._append_raw(rec)
            self.est = _HEADER + unc
        else:
            out = c.write(rec)
            if out:
                self._write(out)
            self.est = _HEADER + int(unc * self.estimation)
        self.max_ts = max(self.max_ts, timestamp)
        fut = RecordFuture(
            self.result,
            n,
            timestamp,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            on_delivery,
        )
        self.futures.append(fut)
        if self.close_after_append:
            self.close_for_appends()
        return fut

    def _write(self, data: bytes) -> None:
        p = self.pos
        n = len(data)
        # grows the bytearray past its pool size only when compressed output
        # overshoots the estimate (Kafka's ByteBufferOutputStream expansion)
        self.buffer[p : p + n] = data
        self.pos = p + n

    # -- closing --------------------------------------------------------------------------

    def close_for_appends(self) -> None:
        """No more records; flush the compressor (Kafka's ``closeForRecordAppends``)."""
        if self.closed_for_appends:
            return
        self.closed_for_appends = True
        c = self.compressor
        if c is not None:
            tail = c.finish()
            if tail:
                self._write(tail)
            self.compressor = None
            written = self._written() - _HEADER
            if self.uncompressed:
                self.actual_compression_ratio = written / self.uncompressed
        self._release_unused()

    def _written(self) -> int:
        return self.pos

    def _release_unused(self) -> None:
        """Chunked batches return chunks that never received data."""

    def set_producer_state(
        self, producer_id: int, epoch: int, base_sequence: int, transactional: bool = False
    ) -> None:
        """Idempotence: set at drain; a closed batch is re-closed (header and CRC
        rewritten) if its state changes, e.g. a retry renumbered by an epoch bump.
        ``transactional`` sets the batch's transactional attribute."""
        if (producer_id, epoch, base_sequence, transactional) != (
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.transactional,
        ):
            self.closed = False
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.base_sequence = base_sequence
        self.transactional = transactional

    def close(self) -> None:
        """Write the header and CRC: the batch's bytes are final (drain time)."""
        if self.closed:
            return
        self.close_for_appends()
        size = self._written()
        segs = self.segments_for(size)
        first = self._first_buffer()
        write_header(
            first,
            size=size,
            count=self.count,
            base_timestamp=self.base_ts,
            max_timestamp=self.max_ts,
            compression=self.compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=self.transactional,
        )
        set_crc(first, batch_crc(segs))
        self.final_size = size
        self.closed = True

    def _first_buffer(self) -> bytearray:
        return self.buffer

    def segments_for(self, size: int) -> list[memoryview]:
        return [memoryview(self.buffer)[:size]]

    def segments(self) -> list[memoryview]:
        """The batch's bytes as buffers to send (after :meth:`close`)."""
        return self.segments_for(self.final_size)

    def estimated_size(self) -> int:
        return self.final_size if self.closed else self.estimated_bytes_written()

    @property
    def records_count(self) -> int:
        return self.count

    # -- completion -----------------------------------------------------------------------

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> bool:
        """Set the outcome and run the record callbacks; False if already finalized."""
        if self.finalized:
            return False
        self.finalized = True
        self.result.set(base_offset, log_append_time, error)
        for f in self.futures:
            if f._on_delivery is not None or f._cbs:
                f._fire()
        return True

    def release_memory(self) -> None:
        """Return the batch's memory to the pool (after completion)."""
        buf = self.buffer
        if buf is not None and self.pool is not None:
            self.pool.deallocate(buf, self.initial_capacity)
        self.buffer = None  # type: ignore[assignment]

    def pool_bytes(self) -> int:
        """Pool memory this batch holds."""
        return self.initial_capacity if self.buffer is not None else 0

    def buffered_bytes(self) -> int:
        """Bytes of data actually in the batch's memory."""
        return self._written()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.topic}-{self.partition} records={self.count} "
            f"bytes={self._written()} closed={self.closed}>"
        )


class ChunkedProducerBatch(ProducerBatch):
    """A batch backed by linked chunks (the ``incremental`` strategy, KIP-1332)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        chunks: list[bytearray],
        pool: BufferPool,
        *,
        write_limit: int,
        compression: int = NONE,
        compression_ratio: float = 1.0,
        created_ms: int = 0,
    ) -> None:
        super().__init__(
            topic,
            partition,
            chunks[0],
            pool,
            write_limit=write_limit,
            compression=compression,
            compression_ratio=compression_ratio,
            created_ms=created_ms,
        )
        self.chunk_size = pool.poolable_size
        self.chunks = list(chunks)
        self.heap_chunks = 0  # trailing chunks not from the pool (compression overshoot)
        self.heap_flags: list[bool] = [False] * len(chunks)
        self.cur = 0  # index of the chunk being written
        self.cpos = _HEADER  # position in it
        self.written = _HEADER
        self.capacity_bytes = len(self.chunks) * self.chunk_size

    def capacity(self) -> int:
        return self.capacity_bytes

    def upper_bound(self, key: Any, value: Any, headers: Any) -> int:
        """``record_size_upper_bound`` with a fast path for the common no-headers case."""
        if headers:
            return record_size_upper_bound(key, value, headers)
        ub = MAX_RECORD_OVERHEAD + 1
        if key is None:
            ub += 1
        else:
            n = len(key)
            if n >= _NCACHED:
                return record_size_upper_bound(key, value, headers)
            ub += len(_VARINTS[n]) + n
        if value is None:
            ub += 1
        else:
            n = len(value)
            if n >= _NCACHED:
                return record_size_upper_bound(key, value, headers)
            ub += len(_VARINTS[n]) + n
        return ub

    def projected_size(self, upper_bound: int) -> int:
        """The batch's projected size with one more record of ``upper_bound`` bytes:
        header + (record bytes so far + the record) x ratio x 1.05 when compressed,
        exact otherwise (Kafka's ``estimatedBytesWrittenAfter``)."""
        total = self.uncompressed + upper_bound
        if self.compressor is None:
            return _HEADER + total
        return _HEADER + int(total * self.estimation)

    def try_append(  # type: ignore[override]
        self,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        on_delivery: Any = None,
    ) -> RecordFuture | int | None:
        """Like :meth:`ProducerBatch.try_append`, but when the batch would take the
        record (``hasRoomFor``) and its chunks lack capacity for the projected size,
        returns the missing bytes (an ``int``) without appending: the accumulator
        attaches chunks (:meth:`add_chunks`) and tries again."""
        rec = self._encode_if_room(timestamp, key, value, headers)
        if rec is None:
            return None
        n = self.count
        size = len(rec)
        # chunk capacity for the projected size (upper bound of the record, Kafka's
        # estimatedBytesWrittenAfter); the cheap check first
        cap = self.capacity_bytes
        if self.est + size + MAX_RECORD_OVERHEAD > cap or self.compressor is not None:
            gap = self.projected_size(self.upper_bound(key, value, headers)) - cap
            if gap > 0:
                return gap
        if n == 0:
            self.base_ts = timestamp
        self.count = n + 1
        return self._finish_append(rec, n, timestamp, key, value, on_delivery)

    def _append_raw(self, rec: bytes) -> None:
        """Put an encoded record into the current chunk, spilling into the next ones."""
        size = len(rec)
        cpos = self.cpos
        if cpos + size <= self.chunk_size:
            self.chunks[self.cur][cpos : cpos + size] = rec
            self.cpos = cpos + size
            self.written += size
        else:
            self._write(rec)

    def add_chunks(self, chunks: list[bytearray]) -> None:
        if self.closed_for_appends:
            raise RuntimeError("cannot add chunks to a batch closed for appends")
        self.chunks.extend(chunks)
        self.heap_flags.extend([False] * len(chunks))
        self.capacity_bytes = len(self.chunks) * self.chunk_size

    def _write(self, data: bytes) -> None:
        n = len(data)
        cs = self.chunk_size
        room = cs - self.cpos
        if n <= room:
            p = self.cpos
            self.chunks[self.cur][p : p + n] = data
            self.cpos = p + n
            self.written += n
            return
        mv = memoryview(data)
        i = 0
        chunks = self.chunks
        while i < n:
            room = cs - self.cpos
            if room == 0:
                if self.cur + 1 >= len(chunks):
                    self._grow(n - i)
                self.cur += 1
                self.cpos = 0
                room = cs
            take = min(room, n - i)
            p = self.cpos
            chunks[self.cur][p : p + take] = mv[i : i + take]
            self.cpos = p + take
            i += take
        self.written += n

    def _grow(self, need: int) -> None:
        """Mid-record growth (compressed output beyond the reservation): the pool
        without blocking, else chunks outside the pool, and the batch closes for
        appends after this record so it goes out early."""
        got = self.pool.try_allocate_chunks(need) if self.pool is not None else None
        if got is not None:
            self.chunks.extend(got)
            self.heap_flags.extend([False] * len(got))
        else:
            k = -(-need // self.chunk_size)
            self.chunks.extend(bytearray(self.chunk_size) for _ in range(k))
            self.heap_flags.extend([True] * k)
            self.heap_chunks += k
            self.close_after_append = True
        self.capacity_bytes = len(self.chunks) * self.chunk_size

    def _written(self) -> int:
        return self.written

    def _release_unused(self) -> None:
        """Chunks after the one being written never received data: back to the pool
        now, at batch close, not at completion (KIP-1332)."""
        keep = self.cur + 1
        unused = self.chunks[keep:]
        if not unused:
            return
        flags = self.heap_flags[keep:]
        del self.chunks[keep:]
        del self.heap_flags[keep:]
        pooled = [c for c, heap in zip(unused, flags, strict=True) if not heap]
        self.heap_chunks -= len(unused) - len(pooled)
        self.capacity_bytes = len(self.chunks) * self.chunk_size
        if self.pool is not None and pooled:
            self.pool.deallocate_chunks(pooled)

    def segments_for(self, size: int) -> list[memoryview]:
        cs = self.chunk_size
        out = []
        left = size
        for c in self.chunks:
            if left <= 0:
                break
            take = min(cs, left)
            out.append(memoryview(c)[:take])
            left -= take
        return out

    def _first_buffer(self) -> bytearray:
        return self.chunks[0]

    def release_memory(self) -> None:
        if self.chunks and self.pool is not None:
            self.pool.deallocate_chunks(
                [c for c, heap in zip(self.chunks, self.heap_flags, strict=True) if not heap]
            )
        self.chunks = []
        self.heap_flags = []
        self.buffer = None  # type: ignore[assignment]

    def pool_bytes(self) -> int:
        return (len(self.chunks) - self.heap_chunks) * self.chunk_size
