"""The producer's I/O thread (Kafka's ``Sender``).

Each loop (:meth:`Sender.run_once`): refresh metadata when needed; when idempotence
is on, send the transaction manager's next request (InitProducerId, and for a
transactional producer FindCoordinator, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn; one at a time, no produce data goes out while one is in
flight); ask the accumulator which leaders have sendable batches, drain them (at
most ``max.request.size`` per request), fail batches past ``delivery.timeout.ms``,
write one Produce request per leader (the batches' own buffers/chunks,
scatter-gather) and poll the network for responses, until woken or the next
deadline (linger, backoff, timeouts).

The transaction state itself is :class:`~tidegate.producer.transaction_manager.TransactionManager`
(sans-IO); this thread only moves its requests and responses.

Responses complete batches (success, or a retriable error re-queued with
exponential backoff while ``retries`` and ``delivery.timeout.ms`` allow, or a
final error); a completed batch runs its records' callbacks here, on this thread,
and returns its memory to the pool.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

from tidegate.client import KafkaClient
from tidegate.client.client import metadata_request_body
from tidegate.client.connection import InFlightRequest
from tidegate.client.metadata import Cluster
from tidegate.clock import Clock, MonotonicMs
from tidegate.errors import (
    INVALID_METADATA_CODES,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)

from .accumulator import RecordAccumulator
from .batch import ProducerBatch
from .config import ProducerConfig
from .errors import (
    ClusterAuthorizationError,
    IdempotenceUnsupportedError,
    IllegalStateError,
    ProducerClosedError,
    RecordTooLargeError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    error_for_code,
)
from .idempotence import IdempotenceState
from .metadata import ProducerMetadata
from .produce_request import MAX_PRODUCE_VERSION, produce_request_buffers
from .transaction_manager import CoordinatorType, TransactionManager, TxnRequestHandler

__all__ = ["Sender"]

log = logging.getLogger("tidegate.producer")

PRODUCE, METADATA, INIT_PRODUCER_ID = 0, 3, 22
#: Produce v12 tells the broker the producer runs transaction version 2 (it adds the
#: partitions itself); a transactional producer of version 1 stops at v11 (Kafka's
#: ``LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2``)
MAX_TRANSACTIONAL_PRODUCE_VERSION = 11
MESSAGE_TOO_LARGE = 10
DUPLICATE_SEQUENCE_NUMBER = 46


class Sender(threading.Thread):
    def __init__(
        self,
        config: ProducerConfig,
        client: KafkaClient,
        metadata: ProducerMetadata,
        accumulator: RecordAccumulator,
        clock: Clock,
        *,
        transaction_manager: TransactionManager | None = None,
        on_batch_sent: Any = None,
    ) -> None:
        super().__init__(name=f"tidegate-producer-network-thread | {config.client_id}", daemon=True)
        self.config = config
        self.client = client
        self.metadata = metadata
        self.accumulator = accumulator
        self.clock = clock
        self._running = True
        self._force_close = False
        self._metadata_in_flight = False
        #: the transactional request in flight (Kafka sends one at a time)
        self._txn_in_flight: TxnRequestHandler | None = None
        #: InitProducerId, sequence numbers and transactions; used once idempotence is on
        self.txn = transaction_manager
        self.idempotence: IdempotenceState | None = None
        # None: not decided yet (default config waits for the first broker's
        # ApiVersions); True/False once known
        self._idempotent: bool | None = (
            None if config.enable_idempotence and transaction_manager is not None else False
        )
        self.fatal_error: BaseException | None = None
        self._guarantee_order = config.max_in_flight_requests_per_connection == 1
        self.on_batch_sent = on_batch_sent
        self.requests_sent = 0

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> None:
        txn = self.txn
        if txn is not None:
            txn.set_poison_state_on_invalid_transition(True)
        try:
            while self._running:
                self.run_once()
            # graceful close: send what is left unless forced
            while not self._force_close and (
                self.accumulator.has_undrained()
                or self.client.has_in_flight()
                or self._has_pending_transactional_requests()
            ):
                if self.fatal_error is not None:
                    break
                self.run_once()
            # abort a transaction the application left open (Kafka does the same)
            while (
                not self._force_close
                and self.fatal_error is None
                and txn is not None
                and txn.is_transactional
                and txn.has_ongoing_transaction()
            ):
                if not txn.is_completing():
                    log.info("aborting the incomplete transaction at close")
                    try:
                        txn.begin_abort()
                    except Exception as exc:  # noqa: BLE001 - an error state: force close
                        log.error("could not abort the transaction at close: %s", exc)
                        self._force_close = True
                        break
                self.run_once()
            if self._force_close or self.fatal_error is not None:
                err = self.fatal_error or ProducerClosedError("Producer is closed forcefully.")
                self.accumulator.abort_incomplete_batches(err)
        except Exception:  # pragma: no cover - a bug; fail everything rather than hang
            log.exception("producer sender thread crashed")
            self.fatal_error = self.fatal_error or KafkaError("sender thread crashed")
            self.accumulator.abort_incomplete_batches(self.fatal_error)
        finally:
            if txn is not None:
                txn.close()
            self.client.close()
            # anything still incomplete now can never complete
            for b in self.accumulator.incomplete():
                if b.complete(-1, -1, self.fatal_error or ProducerClosedError("producer closed")):
                    self.accumulator.deallocate(b)
            self.metadata.wake_waiters()

    def initiate_close(self) -> None:
        self.accumulator.close()
        self._running = False
        self.wakeup()

    def _has_pending_transactional_requests(self) -> bool:
        txn = self.txn
        return (
            txn is not None
            and self._idempotent is True
            and (self._txn_in_flight is not None or txn.has_pending_requests())
            and txn.has_ongoing_transaction()
        )

    def force_close(self) -> None:
        self._force_close = True
        self.initiate_close()

    def wakeup(self) -> None:
        self.client.wakeup()

    # -- one loop --------------------------------------------------------------------------

    def run_once(self) -> None:
        now_ms = self.clock.milliseconds()
        metadata_wait = self._maybe_update_metadata(now_ms)
        if self._idempotent is None:
            self._decide_idempotence(now_ms)
        txn_wait = 1 << 30
        if self._idempotent:
            txn = self.txn
            assert txn is not None  # _idempotent is True only with a transaction manager
            if txn.has_fatal_error():
                assert txn.last_error is not None
                self._fatal(txn.last_error)
                return
            if txn.has_abortable_error() and self._handle_authorization_error(txn):
                return
            txn.maybe_resolve_sequences()
            txn.bump_idempotent_epoch_and_reset_id_if_needed()
            wait = self._maybe_send_and_poll_transactional_request(now_ms)
            if wait is None:
                self._check_authentication()
                return
            txn_wait = wait
        poll_ms = self._send_producer_data(now_ms)
        if not self._metadata_in_flight:
            # producing may have asked for metadata (a partition without a known leader:
            # its broker left the metadata while down): wake up for it, as Kafka's
            # NetworkClient.poll bounds its wait by the metadata timeout
            metadata_wait = min(metadata_wait, max(1, self.metadata.time_to_next_update(now_ms)))
        poll_ms = min(poll_ms, metadata_wait, txn_wait)
        poll_ms = min(poll_ms, self.client.next_timeout_ms(self.clock.nanoseconds()))
        if not self._running:
            poll_ms = min(poll_ms, 10)
        self.client.poll(max(0, poll_ms))
        self._check_authentication()

    def _check_authentication(self) -> None:
        auth = self.client.authentication_error()
        if auth is not None:
            # the same credentials fail again: fail the sends now (their futures and
            # send() callers get the error) instead of retrying until delivery.timeout.ms
            self._fatal(auth)

    def _send_producer_data(self, now_ms: MonotonicMs) -> int:
        acc = self.accumulator
        cluster = self.metadata.cluster
        res = acc.ready(cluster, now_ms)
        if res.unknown_leader_topics:
            self.metadata.request_update()
        ready = set()
        next_delay = res.next_ready_check_delay_ms
        now_ns = self.clock.nanoseconds()
        for node in res.ready_nodes:
            if self.client.ready(node, now_ns):
                ready.add(node)
            else:
                next_delay = min(next_delay, max(1, self.client.connection_delay_ms(node, now_ns)))
        can_drain = self._idempotent is False or (
            self._idempotent is True
            and self.idempotence is not None
            and self.idempotence.has_producer_id
        )
        batches: dict[int, list[ProducerBatch]] = {}
        if ready and can_drain:
            batches = acc.drain(cluster, ready, self.config.max_request_size, now_ms)
            if self._guarantee_order:
                for lst in batches.values():
                    for b in lst:
                        acc.mute(b.topic, b.partition)
        for b in acc.expired_batches(now_ms):
            last = f" (last error: {b.last_error})" if b.last_error is not None else ""
            self._fail_batch(
                b,
                KafkaTimeoutError(
                    f"Expiring {b.count} record(s) for {b.topic}-{b.partition}: "
                    f"{now_ms - b.created_ms} ms has passed since batch creation{last}"
                ),
                adjust_sequence_numbers=False,
            )
            if self._idempotent and self.txn is not None and b.base_sequence >= 0:
                # it was sent: whether it was written is unknown until the batches in
                # flight after it answer
                self.txn.mark_sequence_unresolved(b)
        next_delay = min(next_delay, acc.next_expiry_ms(now_ms))
        for node, lst in batches.items():
            self._send_produce_request(node, lst, now_ms)
        if batches:
            return 0
        return next_delay

    # -- produce requests ------------------------------------------------------------------

    def _send_produce_request(self, node: int, batches: list[ProducerBatch], now_ms: MonotonicMs) -> None:
        acks = self.config.acks
        tid = self.config.transactional_id
        try:
            version = self.client.api_version(
                node,
                PRODUCE,
                max_version=MAX_PRODUCE_VERSION
                if tid is None
                else MAX_TRANSACTIONAL_PRODUCE_VERSION,
            )
        except (UnsupportedVersionError, KafkaError) as exc:
            for b in batches:
                self._fail_batch(b, exc)
            return
        by_topic: dict[str, list[tuple[int, list[Any], int]]] = defaultdict(list)
        by_tp: dict[tuple[str, int], ProducerBatch] = {}
        for b in batches:
            self.accumulator.update_compression_ratio(b)
            by_topic[b.topic].append((b.partition, b.segments(), b.final_size))
            by_tp[(b.topic, b.partition)] = b
            b.in_flight = True
        cid = self.client.next_correlation_id()
        buffers = produce_request_buffers(
            version,
            cid,
            self.config.client_id,
            acks,
            self.config.request_timeout_ms,
            list(by_topic.items()),
            transactional_id=tid,
        )
        if self.on_batch_sent is not None:
            self.on_batch_sent(node, version, buffers, batches)

        def on_response(req: InFlightRequest) -> None:
            try:
                self._handle_produce_response(req, by_tp, acks)
            except Exception as exc:
                log.warning("produce response from node %s: %r", req.node_id, exc, exc_info=True)
                error = ConnectionError_(f"node {req.node_id}: unusable produce response ({exc!r})")
                for b in by_tp.values():
                    if not b.finalized and b.in_flight:
                        self._complete_batch(b, error, -1, -1, self.clock.milliseconds())

        try:
            self.client.send_buffers(
                node,
                PRODUCE,
                version,
                cid,
                buffers,
                expect_response=acks != 0,
                callback=on_response,
            )
            self.requests_sent += 1
        except KafkaError as exc:
            for b in batches:
                b.in_flight = False
                self._complete_batch(b, exc, -1, -1, self.clock.milliseconds())

    def _handle_produce_response(
        self, req: InFlightRequest, by_tp: dict[tuple[str, int], ProducerBatch], acks: int
    ) -> None:
        now_ms = self.clock.milliseconds()
        if self._guarantee_order:
            for b in by_tp.values():
                self.accumulator.unmute(b.topic, b.partition)
        if req.error is not None:
            # disconnect or request timeout: retriable for every batch
            log.debug("produce request to node %s failed: %s", req.node_id, req.error)
            self.metadata.request_update()
            for b in by_tp.values():
                self._complete_batch(b, req.error, -1, -1, now_ms)
            return
        if acks == 0 or req.response is None:
            for b in by_tp.values():
                self._complete_batch(b, None, -1, -1, now_ms)
            return
        seen = set()
        for topic_resp in req.response.responses:
            for p in topic_resp.partition_responses:
                tp = (topic_resp.name, int(p.index))
                batch = by_tp.get(tp)
                if batch is None:
                    continue
                seen.add(tp)
                code = int(p.error_code)
                log_append = int(p.log_append_time)
                err = None
                if code:
                    err = error_for_code(code, getattr(p, "error_message", None))
                log_start = int(getattr(p, "log_start_offset", -1))
                self._complete_batch(
                    batch, err, int(p.base_offset), log_append, now_ms, log_start
                )
        for tp, b in by_tp.items():
            if tp not in seen:
                self._complete_batch(
                    b, KafkaError(f"no response for partition {tp[0]}-{tp[1]}"), -1, -1, now_ms
                )

    def _can_retry(
        self,
        batch: ProducerBatch,
        err: BaseException,
        now_ms: MonotonicMs,
        log_start_offset: int = -1,
    ) -> bool:
        """Kafka's ``Sender.canRetry``: time and retries left, then the transaction
        manager decides for a sequenced batch (its sequence errors), else retriable."""
        if batch.finalized or not self._running and self._force_close:
            return False
        if now_ms - batch.created_ms >= self.accumulator.delivery_timeout_ms:
            return False
        if batch.attempts >= self.config.retries:
            return False
        retriable = bool(getattr(err, "retriable", False))
        code = getattr(err, "code", None)
        if self._idempotent and self.txn is not None and code is not None:
            return self.txn.can_retry(batch, code, retriable, log_start_offset)
        return retriable

    def _complete_batch(
        self,
        batch: ProducerBatch,
        err: BaseException | None,
        base_offset: int,
        log_append_time: int,
        now_ms: MonotonicMs,
        log_start_offset: int = -1,
    ) -> None:
        """Kafka's ``Sender.completeBatch``: succeed, retry, or fail the batch."""
        batch.in_flight = False
        txn = self.txn if self._idempotent else None
        if err is None:
            self._succeed(batch, base_offset, log_append_time)
            return
        batch.last_error = err
        code = getattr(err, "code", None)
        if code in INVALID_METADATA_CODES:
            self.metadata.request_update()
        if code == MESSAGE_TOO_LARGE:
            err = RecordTooLargeError(
                f"the broker refused a batch of {batch.count} record(s), {batch.final_size} "
                f"bytes, for {batch.topic}-{batch.partition} as too large (MESSAGE_TOO_LARGE)"
            )
        if self._can_retry(batch, err, now_ms, log_start_offset):
            log.debug(
                "retrying batch for %s-%s (attempt %d): %s",
                batch.topic,
                batch.partition,
                batch.attempts + 1,
                err,
            )
            self.accumulator.reenqueue(batch, now_ms)
            return
        if code == DUPLICATE_SEQUENCE_NUMBER and txn is not None:
            # the broker already has this batch: a success whose offset is unknown
            self._succeed(batch, base_offset, log_append_time)
            return
        # the sequence may be reused only if the broker surely did not write the batch
        self._fail_batch(batch, err, adjust_sequence_numbers=batch.attempts < self.config.retries)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self._idempotent and self.txn is not None:
            self.txn.handle_completed_batch(batch, base_offset)
        if batch.complete(base_offset, log_append_time, None):
            self.accumulator.deallocate(batch)

    def _fail_batch(
        self, batch: ProducerBatch, err: BaseException, *, adjust_sequence_numbers: bool = True
    ) -> None:
        if batch.finalized:
            return
        txn = self.txn
        if self._idempotent and txn is not None:
            # the transaction becomes abortable or the producer fatal, or (idempotent) the
            # epoch is bumped for the partition; classified before the callbacks run, so
            # they see err.txn_requires_abort / err.fatal
            try:
                txn.handle_failed_batch(batch, err, adjust_sequence_numbers)
            except IllegalStateError as exc:  # poisoned: the state is FATAL_ERROR now
                log.debug("failed batch of %s-%s: %s", batch.topic, batch.partition, exc)
        if batch.complete(-1, -1, err):
            self.accumulator.deallocate(batch)

    # -- metadata ------------------------------------------------------------------------------

    def _maybe_update_metadata(self, now_ms: MonotonicMs) -> int:
        """Send a Metadata request if one is due; returns how long the loop may sleep
        as far as metadata is concerned (Kafka's ``MetadataUpdater.maybeUpdate``)."""
        if self._metadata_in_flight:
            return 1 << 30  # the response wakes the poll
        wait = self.metadata.time_to_next_update(now_ms)
        if wait > 0:
            return wait
        node = self.client.least_loaded_node(self.clock.nanoseconds())
        if node is None or not self.client.ready(node):
            # nothing to ask yet: a connection is being set up (its completion wakes
            # the poll) or every broker is backing off
            return max(1, self.config.reconnect_backoff_ms)
        try:
            version = self.client.api_version(node, METADATA, max_version=12)
        except KafkaError as exc:
            self._fatal(exc)
            return 0
        body = metadata_request_body(version, self.metadata.topics(now_ms), True)
        self.metadata.attempt(now_ms)
        self._metadata_in_flight = True
        self.client.send(node, METADATA, body, version=version, callback=self._on_metadata)
        return 1 << 30

    def _on_metadata(self, req: InFlightRequest) -> None:
        self._metadata_in_flight = False
        now_ms = self.clock.milliseconds()
        if req.error is not None:
            self.metadata.failed_update(now_ms, req.error)
            return
        try:
            fresh = Cluster.from_response(req.response)
        except Exception as exc:  # noqa: BLE001 - a response this producer cannot use
            log.warning("metadata response from node %s: %r", req.node_id, exc)
            self.metadata.failed_update(now_ms, exc)
            return
        self.client.update_cluster(fresh)
        self.metadata.update(fresh, now_ms)

    # -- idempotence and transactions -----------------------------------------------------------

    def _decide_idempotence(self, now_ms: MonotonicMs) -> None:
        """Default config: idempotence only if the broker has InitProducerId (22)."""
        node = self.client.least_loaded_node(self.clock.nanoseconds())
        if node is None or not self.client.ready(node):
            return
        txn = self.txn
        assert txn is not None  # no decision to make without one
        if self.client.supports(node, INIT_PRODUCER_ID):
            self._idempotent = True
            self.idempotence = txn.idempotence
            self.accumulator.sequencer = txn
            return
        if txn.is_transactional:
            self._fatal(
                UnsupportedVersionError(
                    "transactional.id is set but the broker does not support transactions "
                    "(no InitProducerId, API key 22)"
                )
            )
            return
        if self.config.enable_idempotence_explicit:
            self._fatal(
                IdempotenceUnsupportedError(
                    "enable.idempotence=true but the broker does not support InitProducerId "
                    "(API key 22); set enable.idempotence=false to produce without it"
                )
            )
            return
        log.warning(
            "the broker does not support InitProducerId (API key 22): producing without "
            "idempotence (set enable.idempotence=false to silence this)"
        )
        self._idempotent = False

    def _maybe_send_and_poll_transactional_request(self, now_ms: MonotonicMs) -> int | None:
        """Send the transaction manager's next request (Kafka's
        ``maybeSendAndPollTransactionalRequest``). Returns None when this loop is done
        (a request was sent, or one is in flight and was polled for, or the loop should
        run again at once); otherwise how long the loop may sleep as far as transactional
        requests go, and the produce path runs."""
        txn = self.txn
        assert txn is not None
        acc = self.accumulator
        client = self.client
        backoff = self.config.retry_backoff_ms
        if self._txn_in_flight is not None:
            # one transactional request at a time: wait for its answer
            client.poll(min(backoff, client.next_timeout_ms(self.clock.nanoseconds())))
            return None
        if (txn.has_abortable_error() or txn.is_aborting()) and acc.has_incomplete():
            # batches not sent yet belong to a transaction that will be aborted
            error = txn.last_error or TransactionAbortedError()
            acc.abort_undrained_batches(error)
        handler = txn.next_request(acc.has_incomplete(), now_ms)
        if handler is None:
            return txn.retry_delay_ms(now_ms)
        now_ns = self.clock.nanoseconds()
        kind = handler.coordinator_type
        node = self._transactional_target(handler, now_ns)
        if node is None:
            return None
        if not client.ready(node, now_ns):
            # connecting, or backing off after a failed connection: wait up to
            # request.timeout.ms (Kafka's awaitNodeReady), then look the coordinator up again
            if handler.waiting_since_ms is None:
                handler.waiting_since_ms = now_ms
            if now_ms - handler.waiting_since_ms >= self.config.request_timeout_ms:
                handler.waiting_since_ms = None
                self._maybe_find_coordinator_and_retry(handler)
            else:
                txn.retry(handler, backoff=False)
            delay = client.connection_delay_ms(node, now_ns)
            client.poll(min(max(1, delay), backoff))
            return None
        handler.waiting_since_ms = None
        if kind is CoordinatorType.TRANSACTION:
            txn.handle_coordinator_ready(self._max_version(node, INIT_PRODUCER_ID))
        try:
            version = client.api_version(
                node,
                handler.api_key,
                max_version=handler.max_version,
                min_version=handler.min_version,
            )
        except UnsupportedVersionError as exc:
            handler.on_version_mismatch(exc)
            return None
        except KafkaError:  # the connection went away meanwhile
            txn.retry(handler, backoff=False)
            return None
        body = handler.body(version)

        def on_response(req: InFlightRequest) -> None:
            self._on_transactional_response(handler, req)

        try:
            client.send(node, handler.api_key, body, version=version, callback=on_response)
        except KafkaError as exc:
            log.debug("could not send %s to node %s: %s", handler.name, node, exc)
            self._maybe_find_coordinator_and_retry(handler)
            return None
        log.debug("sent %s v%d to node %s", handler.name, version, node)
        self._txn_in_flight = handler
        client.poll(min(backoff, client.next_timeout_ms(self.clock.nanoseconds())))
        return None

    def _transactional_target(self, handler: TxnRequestHandler, now_ns: int) -> int | None:
        """The node ``handler``'s request goes to: its coordinator (made known to the
        client), or the least loaded node; None when there is none yet (the handler is
        queued again)."""
        txn = self.txn
        assert txn is not None
        client = self.client
        kind = handler.coordinator_type
        if kind is not None:
            target = txn.coordinator(kind)
            if target is None:
                txn.coordinator_unknown(handler)
                return None
            client.add_node(target[0], target[1], target[2])
            return target[0]
        node = client.least_loaded_node(now_ns)
        if node is None:
            txn.retry(handler)
            client.poll(self.config.retry_backoff_ms)
        return node

    def _on_transactional_response(self, handler: TxnRequestHandler, req: InFlightRequest) -> None:
        self._txn_in_flight = None
        try:
            if req.error is not None:
                handler.on_disconnect()
            else:
                handler.on_response(req.response)
        except IllegalStateError as exc:
            # an invalid transition on this thread poisoned the state (FATAL_ERROR)
            log.error("transactional response to %s: %s", handler.name, exc)
        except Exception as exc:  # noqa: BLE001 - a response this producer cannot use
            # as a lost connection: the request is sent again (after finding the
            # coordinator again), until the application's timeout
            log.warning("unusable %s response from node %s: %r", handler.name, req.node_id, exc)
            handler.on_disconnect()

    def _maybe_find_coordinator_and_retry(self, handler: TxnRequestHandler) -> None:
        txn = self.txn
        assert txn is not None
        kind = handler.coordinator_type
        if kind is not None:
            txn.lookup_coordinator(kind, handler.coordinator_key)
        else:
            self.metadata.request_update()
        txn.retry(handler)

    def _max_version(self, node: int, api_key: int) -> int | None:
        conn = self.client.connection(node)
        versions = conn.api_versions.get(api_key) if conn is not None else None
        return versions[1] if versions is not None else None

    def _handle_authorization_error(self, txn: TransactionManager) -> bool:
        """TRANSACTIONAL_ID / CLUSTER_AUTHORIZATION_FAILED on InitProducerId: fail what was
        pending and start over from UNINITIALIZED, so that ``init_transactions`` can be
        called again once the ACLs allow it (Kafka's ``shouldHandleAuthorizationError``)."""
        error = txn.last_error
        if not isinstance(error, (TransactionalIdAuthorizationError, ClusterAuthorizationError)):
            return False
        self.accumulator.abort_incomplete_batches(error)
        txn.transition_to_uninitialized(error)
        return True

    def _fatal(self, err: BaseException) -> None:
        if self.fatal_error is None:
            log.error("producer failed: %s", err)
            self.fatal_error = err
        txn = self.txn
        if txn is not None and not txn.has_fatal_error():
            txn.transition_to_fatal_error(err)
        self.metadata.set_fatal(err)
        self.accumulator.abort_incomplete_batches(err)
        self._running = False
        self._force_close = True
