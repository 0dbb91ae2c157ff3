"""``tidegate.producer.Producer``: a Kafka producer with Kafka's configuration keys.

::

    from tidegate.producer import Producer

    p = Producer({"bootstrap.servers": "127.0.0.1:9092",
                  "buffer.memory.allocation.strategy": "incremental"})
    fut = p.send("events", b"value", key=b"user-1", headers=[("h", b"v")])
    print(fut.result(10))        # RecordMetadata(topic, partition, offset, ...)
    p.flush()
    p.close()

``send`` returns at once (unless it must wait for metadata or buffer memory, at
most ``max.block.ms``) with a :class:`~tidegate.producer.batch.RecordFuture`;
every outcome of the record, including ``BufferExhaustedError`` and
``RecordTooLargeError``, is delivered through that future and the optional
``on_delivery(metadata, exception)`` callback. ``send`` raises only for misuse
(wrong types, a closed producer, a record outside a transaction) and after an
error that stopped the producer or must first abort the transaction.

With ``transactional.id`` set, Kafka's transactional API::

    p = Producer({"bootstrap.servers": "127.0.0.1:9092", "transactional.id": "orders-1"})
    p.init_transactions()
    p.begin_transaction()
    p.send("orders", b"...")
    p.send_offsets_to_transaction({("in", 0): 42}, ConsumerGroupMetadata("group"))
    p.commit_transaction()          # or abort_transaction()

An error raised by these calls says what is left to do: ``err.txn_requires_abort``
(call ``abort_transaction()``, then go on), ``err.fatal`` (only ``close()``), or
``err.retriable`` (a timeout: call the same method again). See ``docs/transactions.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.client import KafkaClient
from tidegate.clock import SYSTEM_CLOCK, Clock
from tidegate.errors import BrokerResponseError, KafkaError, KafkaTimeoutError
from tidegate.record.batch_builder import record_size_upper_bound
from tidegate.record.record_batch import RECORD_BATCH_OVERHEAD

from .accumulator import RecordAccumulator
from .batch import FailedFuture, RecordFuture
from .buffer_pool import BufferPool, chunk_size_for
from .config import ProducerConfig
from .errors import (
    IllegalStateError,
    ProducerClosedError,
    RecordTooLargeError,
)
from .metadata import ProducerMetadata
from .metrics import Metrics
from .partitioner import partition_for_key
from .sender import Sender
from .transaction_manager import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    State,
    TransactionalRequestResult,
    TransactionManager,
)

__all__ = ["Producer"]

log = logging.getLogger("tidegate.producer")

_FATAL_TOPIC_ERRORS = {17, 29}  # INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED
_client_seq = 0
_client_seq_lock = threading.Lock()


def _default_client_id(transactional_id: str | None) -> str:
    """Kafka's default client.id: ``producer-<transactional.id>``, else ``producer-<n>``."""
    if transactional_id is not None:
        return f"producer-{transactional_id}"
    global _client_seq
    with _client_seq_lock:
        _client_seq += 1
        return f"producer-{_client_seq}"


def _as_bytes(v: Any, what: str) -> Any:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes, str or None, not {type(v).__name__}")


def _headers(h: Any) -> Sequence[tuple[str, bytes | None]]:
    if not h:
        return ()
    items = h.items() if isinstance(h, Mapping) else h
    out = []
    for k, v in items:
        if not isinstance(k, str):
            raise TypeError(f"header keys must be str, not {type(k).__name__}")
        out.append((k, _as_bytes(v, "a header value")))
    return out


class Producer:
    """A thread-safe Kafka producer; one sender thread does all network I/O."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        clock: Clock = SYSTEM_CLOCK,
        _on_request: Any = None,
    ) -> None:
        self.config = cfg = ProducerConfig.from_dict(config)
        if "client.id" not in config:
            cfg.client_id = _default_client_id(cfg.transactional_id)
        self.clock = clock
        self._metrics = Metrics(clock, window_ms=cfg.metrics_sample_window_ms, samples=cfg.metrics_num_samples)
        poolable = chunk_size_for(cfg.batch_size) if cfg.strategy_incremental else cfg.batch_size
        self.pool = BufferPool(
            cfg.buffer_memory, max(1, poolable), clock=clock, metrics=self._metrics
        )
        self.accumulator = RecordAccumulator(
            self.pool,
            batch_size=cfg.batch_size,
            incremental=cfg.strategy_incremental,
            compression=cfg.compression_type,
            linger_ms=cfg.linger_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            adaptive_partitioning=cfg.partitioner_adaptive_partitioning_enable,
            clock=clock,
        )
        self._metadata = ProducerMetadata(
            refresh_backoff_ms=cfg.retry_backoff_ms,
            max_age_ms=cfg.metadata_max_age_ms,
            max_idle_ms=cfg.metadata_max_idle_ms,
            clock=clock,
        )
        self._client = KafkaClient(
            cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            max_in_flight_requests_per_connection=cfg.max_in_flight_requests_per_connection,
            reconnect_backoff_ms=cfg.reconnect_backoff_ms,
            reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
            socket_connection_setup_timeout_ms=cfg.socket_connection_setup_timeout_ms,
            send_buffer_bytes=cfg.send_buffer_bytes,
            receive_buffer_bytes=cfg.receive_buffer_bytes,
            security=cfg.security,
            clock=clock,
        )
        #: InitProducerId, sequence numbers and (with transactional.id) transactions;
        #: None when idempotence is off
        self._txn: TransactionManager | None = (
            TransactionManager(
                cfg.transactional_id,
                transaction_timeout_ms=cfg.transaction_timeout_ms,
                retry_backoff_ms=cfg.retry_backoff_ms,
                clock=clock,
            )
            if cfg.enable_idempotence
            else None
        )
        self._sender = Sender(
            cfg,
            self._client,
            self._metadata,
            self.accumulator,
            clock,
            transaction_manager=self._txn,
            on_batch_sent=_on_request,
        )
        self._partitioner = cfg.partitioner
        self._ignore_keys = cfg.partitioner_ignore_keys
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        self._closed = False
        self._records_sent = 0
        # KIP-691: time spent in the transactional calls that succeeded
        self._txn_time_ns = dict.fromkeys(
            ("txn-init", "txn-begin", "txn-send-offsets", "txn-commit", "txn-abort"), 0
        )
        self._register_metrics()
        self._sender.start()

    def _register_metrics(self) -> None:
        """The producer's own counters beside those of its parts."""
        self._metrics.add("record-send-total", lambda: self._records_sent)
        self._metrics.add("requests-sent-total", lambda: self._sender.requests_sent)
        for name in self._txn_time_ns:
            self._metrics.add(f"{name}-time-ns-total", self._txn_time_reader(name))

    # -- sending ---------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
        on_delivery: Any = None,
    ) -> RecordFuture:
        """Queue one record; returns its future.

        ``value``/``key``: bytes, str (UTF-8) or None. ``partition``: explicit
        partition, else the partitioner decides. ``headers``: ``[(str, bytes|None)]``
        or a dict. ``timestamp``: ms since the epoch (default now, CreateTime).
        ``on_delivery(metadata, exception)`` runs once on the sender thread (or in
        this call if the record fails before being queued).
        """
        if self._closed:
            raise ProducerClosedError("Cannot send after the producer is closed.")
        txn = self._txn
        transactional = txn is not None and txn.is_transactional
        if transactional:
            assert txn is not None
            # before anything is queued: no transaction open, or one that must be aborted
            txn.check_send()
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise fatal
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        hdrs = _headers(headers) if headers else ()
        clock = self.clock
        if timestamp is None:
            timestamp = clock.wall_milliseconds()
        elif timestamp < 0:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        try:
            start_ns = clock.nanoseconds()
            max_block: float = self.config.max_block_ms
            cluster = self._metadata.cluster
            nparts = cluster.partition_count(topic)
            self._metadata._topics[topic] = start_ns // 1_000_000
            if nparts is None or (partition is not None and partition >= nparts):
                cluster = self._wait_on_metadata(topic, partition, max_block)
                nparts = cluster.partition_count(topic)
                assert nparts is not None
                max_block = max(0.0, max_block - (clock.nanoseconds() - start_ns) / 1e6)
            if partition is None:
                partition = self._partition(topic, key, nparts, cluster)
            elif partition < 0:
                raise ValueError(f"invalid partition {partition}")
            approx = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            if hdrs or approx + 200 > self._max_record:
                self._ensure_valid_record_size(key, value, hdrs)
            res = self.accumulator.append(
                topic, partition, timestamp, key, value, hdrs, on_delivery, max_block, cluster
            )
        except ProducerClosedError:
            raise
        except KafkaError as exc:
            # BufferExhaustedError, RecordTooLargeError, KafkaTimeoutError,
            # BrokerResponseError, ...: through the future; in a transaction, the
            # transaction can then only be aborted (Kafka: an ApiException in send)
            if transactional:
                assert txn is not None
                txn.maybe_transition_to_error_state(exc)
            return FailedFuture(topic, partition if partition is not None else -1, exc, on_delivery)
        self._records_sent += 1
        if transactional:
            assert txn is not None
            # after the append, which chose the partition (Kafka does the same); the
            # sender sends AddPartitionsToTxn before the partition's first batch
            txn.maybe_add_partition((topic, res[3]))
        if res[1] or res[2]:
            self._sender.wakeup()
        return res[0]

    def _partition(self, topic: str, key: bytes | None, nparts: int, cluster: Any) -> int | None:
        """Kafka's ``partition``: the configured partitioner's choice, else the key's
        murmur2 partition; None: the accumulator's sticky partition (no key, or
        ``partitioner.ignore.keys``)."""
        if self._partitioner is not None:
            partition = int(self._partitioner(topic, key, nparts, cluster.available_partitions(topic)))
            if not 0 <= partition < nparts:
                raise KafkaError(f"partitioner returned {partition} for {topic} with {nparts} partitions")
            return partition
        if key is not None and not self._ignore_keys:
            return partition_for_key(key, nparts)
        return None

    def _ensure_valid_record_size(self, key: bytes | None, value: bytes | None, headers: Any) -> None:
        """Kafka's ``ensureValidRecordSize``: the record fits max.request.size and
        buffer.memory (RecordTooLargeError)."""
        size = RECORD_BATCH_OVERHEAD + record_size_upper_bound(key, value, headers)
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than "
                f"{self.config.max_request_size}, which is the value of the "
                f"max.request.size configuration."
            )
        if size > self.config.buffer_memory:
            raise RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than "
                f"the total memory buffer you have configured with the buffer.memory "
                f"configuration."
            )

    def _wait_on_metadata(self, topic: str, partition: int | None, max_block_ms: float) -> Any:
        """Kafka's ``waitOnMetadata``: block until ``topic`` (and ``partition``) is known."""
        clock = self.clock
        deadline = clock.nanoseconds() + int(max_block_ms * 1_000_000)
        md = self._metadata
        md.add(topic, clock.milliseconds())
        while True:
            cluster = md.cluster
            n = cluster.partition_count(topic)
            code = cluster.topic_error(topic)
            if code in _FATAL_TOPIC_ERRORS:
                raise BrokerResponseError(code, f"topic {topic}")
            if n is not None and (partition is None or partition < n):
                return cluster
            if n is not None and partition is not None:
                raise KafkaError(
                    f"Invalid partition given with record: {partition} is not in the range "
                    f"[0...{n})."
                )
            version = md.request_update()
            self._sender.wakeup()
            left = (deadline - clock.nanoseconds()) / 1e6
            if left <= 0 or not md.await_update(version, left):
                if self._sender.fatal_error is not None:
                    raise self._sender.fatal_error
                raise KafkaTimeoutError(
                    f"Topic {topic} not present in metadata after {max_block_ms:.0f} ms."
                )
            if self._sender.fatal_error is not None:
                raise self._sender.fatal_error

    # -- transactions ------------------------------------------------------------------------

    def _txn_time_reader(self, name: str) -> Callable[[], float]:
        return lambda: self._txn_time_ns[name]

    def _transaction_manager(self) -> TransactionManager:
        txn = self._txn
        if txn is None or not txn.is_transactional:
            raise IllegalStateError(
                "Cannot use transactional methods without enabling transactions by setting "
                "the transactional.id configuration property"
            )
        if self._closed:
            raise ProducerClosedError("Cannot perform operation after producer has been closed")
        return txn

    def _await(self, result: TransactionalRequestResult, timeout: float | None, metric: str,
               start_ns: int) -> None:  # fmt: skip
        self._sender.wakeup()
        result.wait(self.config.max_block_ms / 1000 if timeout is None else timeout)
        self._txn_time_ns[metric] += self.clock.nanoseconds() - start_ns

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its coordinator: InitProducerId fences any
        older producer with the same id and completes (or aborts) its last transaction,
        then this producer has its producer id and epoch. Call once, before anything
        else. Waits at most ``timeout`` seconds (default ``max.block.ms``); after a
        :class:`~tidegate.errors.KafkaTimeoutError`, call it again to go on waiting."""
        txn = self._transaction_manager()
        start = self.clock.nanoseconds()
        self._await(txn.initialize_transactions(), timeout, "txn-init", start)

    def begin_transaction(self) -> None:
        """Start a transaction (local only: the coordinator learns of it with the first
        partition or offsets added)."""
        txn = self._transaction_manager()
        start = self.clock.nanoseconds()
        txn.begin_transaction()
        self._txn_time_ns["txn-begin"] += self.clock.nanoseconds() - start

    def send_offsets_to_transaction(
        self,
        offsets: Any,
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce):
        AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
        group's coordinator. They count as committed when the transaction commits.

        ``offsets``: ``{(topic, partition): offset}``, where the offset is an int (the
        next offset to consume) or an :class:`OffsetAndMetadata` (or anything with
        ``offset`` and optionally ``metadata``, ``leader_epoch``), and the key anything
        with ``topic``/``partition`` or a pair; or a list of objects with ``topic``,
        ``partition`` and ``offset`` (confluent-kafka's ``TopicPartition``).
        ``group_metadata``: a :class:`ConsumerGroupMetadata` (or an object with its four
        fields, as kafka-python's ``KafkaConsumer.group_metadata()``; or just the group
        id, as Kafka's deprecated overload, which checks no membership)."""
        group = _group_metadata(group_metadata)
        txn = self._transaction_manager()
        normalized = _offsets(offsets)
        if not normalized:
            return
        start = self.clock.nanoseconds()
        result = txn.send_offsets_to_transaction(normalized, group)
        self._await(result, timeout, "txn-send-offsets", start)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction (a flush), then EndTxn(commit). Raises the
        error of a record that failed instead (the transaction must then be aborted)."""
        txn = self._transaction_manager()
        start = self.clock.nanoseconds()
        self._await(txn.begin_commit(), timeout, "txn-commit", start)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Fail the records not sent yet (``TransactionAbortedError``), then
        EndTxn(abort); after an error that asked for it, also bump the producer epoch
        (KIP-360). The producer may then begin a new transaction."""
        txn = self._transaction_manager()
        start = self.clock.nanoseconds()
        self._await(txn.begin_abort(), timeout, "txn-abort", start)

    @property
    def transactional_id(self) -> str | None:
        return self.config.transactional_id

    @property
    def transaction_state(self) -> State | None:
        """The transaction manager's state (None when idempotence is off)."""
        return self._txn.state if self._txn is not None else None

    # -- flush / close ------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued now and wait for it; returns the number of records
        still incomplete (0 unless ``timeout`` seconds passed first)."""
        self.accumulator.begin_flush()
        try:
            self._sender.wakeup()
            self.accumulator.await_flush_completion(timeout)
        finally:
            self.accumulator.end_flush()
        return sum(b.count for b in self.accumulator.incomplete() if not b.result.done)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (up to ``timeout`` seconds, default unbounded), then stop
        the sender. ``timeout=0`` fails queued records at once. Records still pending
        fail with ProducerClosedError."""
        if self._closed:
            return
        self._closed = True
        in_sender = threading.current_thread() is self._sender
        if timeout == 0 or in_sender:
            self._sender.force_close()
        else:
            self._sender.initiate_close()
            self._sender.join(timeout)
            if self._sender.is_alive():
                log.info("close timed out after %s s: failing the records still queued", timeout)
                self._sender.force_close()
        if not in_sender:
            self._sender.join()
        self.pool.close()

    def __enter__(self) -> Producer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- introspection ------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Kafka-named producer metrics (group ``producer-metrics``)."""
        return self._metrics.snapshot()

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        ms = self.config.max_block_ms if timeout is None else timeout * 1000
        cluster = self._wait_on_metadata(topic, None, ms)
        return [p.partition for p in cluster.partitions_for_topic(topic)]

    @property
    def idempotent(self) -> bool | None:
        """True/False once decided (default config: when the first broker answered)."""
        return self._sender._idempotent

    @property
    def producer_id(self) -> int:
        idem = self._sender.idempotence
        return idem.producer_id if idem is not None else -1

    @property
    def producer_epoch(self) -> int:
        idem = self._sender.idempotence
        return idem.producer_epoch if idem is not None else -1


def _group_metadata(group: Any) -> ConsumerGroupMetadata:
    """Kafka's ``throwIfInvalidGroupMetadata``."""
    if group is None:
        raise ValueError("Consumer group metadata could not be null")
    if isinstance(group, str):
        return ConsumerGroupMetadata(group)
    if not isinstance(group, ConsumerGroupMetadata):
        if not isinstance(getattr(group, "group_id", None), str):
            raise TypeError(
                "group_metadata must be a ConsumerGroupMetadata (or an object with its "
                f"fields, as kafka-python's) or a group id, not {type(group).__name__}"
            )
        # another client's snapshot of the same four fields (kafka-python's group_metadata())
        group = ConsumerGroupMetadata(
            group.group_id,
            int(getattr(group, "generation_id", -1)),
            getattr(group, "member_id", "") or "",
            getattr(group, "group_instance_id", None),
        )
    if group.generation_id > 0 and group.member_id == "":
        raise ValueError(f"Passed in group metadata {group} has generationId > 0 but member.id ")
    return group


def _topic_partition(key: Any) -> tuple[str, int]:
    if hasattr(key, "topic") and hasattr(key, "partition"):
        return str(key.topic), int(key.partition)
    topic, partition = key
    return str(topic), int(partition)


def _offset_and_metadata(value: Any) -> OffsetAndMetadata:
    if isinstance(value, OffsetAndMetadata):
        om = value
    elif isinstance(value, int) and not isinstance(value, bool):
        om = OffsetAndMetadata(value)
    elif hasattr(value, "offset"):
        epoch = getattr(value, "leader_epoch", None)
        om = OffsetAndMetadata(
            int(value.offset),
            getattr(value, "metadata", None) or "",
            None if epoch is None or epoch < 0 else int(epoch),
        )
    else:
        raise TypeError(f"an offset must be an int or an OffsetAndMetadata, not {value!r}")
    if om.offset < 0:
        raise ValueError(f"Invalid negative offset {om.offset}")
    return om


def _offsets(offsets: Any) -> dict[tuple[str, int], OffsetAndMetadata]:
    if offsets is None:
        raise ValueError("offsets must not be None")
    if isinstance(offsets, Mapping):
        return {_topic_partition(k): _offset_and_metadata(v) for k, v in offsets.items()}
    return {_topic_partition(tp): _offset_and_metadata(tp) for tp in offsets}
