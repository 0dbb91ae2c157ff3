"""Request handlers of the transaction APIs, for :class:`tidegate.server.kafka_apis.KafkaApis`.

InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
DescribeTransactions and ListTransactions: each maps the kio request of whatever version
arrived onto the sans-IO :class:`~tidegate.coordinator.transaction.transaction_coordinator.TransactionCoordinator`
and its answer onto the response dict (Kafka field names). Requests that wait for a
``__transaction_state`` write return PARKED and are answered through ``respond``
(KafkaApis.send_response), as the group handlers are.

Version rules that are the broker's, not the coordinator's: InitProducerId before v4 and
AddPartitionsToTxn/AddOffsetsToTxn/EndTxn before v2 get INVALID_PRODUCER_EPOCH where
later versions get PRODUCER_FENCED; AddPartitionsToTxn answers every partition with the
same error, and when a partition does not exist, that one gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing is added).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock
from tidegate.coordinator.transaction.transaction_coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
)
from tidegate.coordinator.transaction.transaction_log import partitions_by_topic
from tidegate.coordinator.transaction.transaction_metadata import TransactionResult
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Request
from tidegate.record.control_records import end_transaction_marker_batch
from tidegate.utils.topic import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tidegate.server.replica_manager import PartitionResponse, ReplicaManager

log = logging.getLogger(__name__)

E = ErrorCode
TopicPartition = tuple[str, int]


class TransactionApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        replicas: ReplicaManager,
        offsets_partition_for: Callable[[str], TopicPartition],
        clock: Clock,
    ) -> None:
        self.coordinator = coordinator
        #: its wall clock stamps the markers WriteTxnMarkers writes
        self.clock = clock
        self.replicas = replicas
        #: the __consumer_offsets partition of a group, created if need be (AddOffsetsToTxn)
        self.offsets_partition_for = offsets_partition_for
        #: answers a parked request (KafkaApis sets it to its send_response)
        self.respond: Callable[[Request, dict | None], None] = _unset_respond

    def coordinator_error(self) -> tuple[ErrorCode, str | None]:
        """FindCoordinator for a transactional id: NONE once __transaction_state exists
        (created here on first use, as Kafka does), else why this broker cannot coordinate."""
        if not self.coordinator.active:
            return E.coordinator_not_available, "the transaction coordinator is not running"
        try:
            self.coordinator.txn_manager.ensure_topic()
        except OSError as exc:
            log.error("could not create __transaction_state: %s", exc)
            return E.coordinator_not_available, f"cannot create __transaction_state: {exc}"
        return E.none, None

    # -- InitProducerId -------------------------------------------------------------------------
    def handle_init_producer_id(self, request: Request) -> Any:
        """Idempotent producers (no transactional id) get a fresh producer id at epoch 0;
        transactional ones go through the coordinator (fencing, epoch bumps, KIP-360)."""
        version = request.header.api_version
        req = request.body
        pid = getattr(req, "producer_id", -1)
        epoch = getattr(req, "producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            return self._init_body(InitProducerIdResult(-1, -1, E.invalid_request))  # both or neither
        expected = None if pid == -1 else (pid, epoch)

        def answer(result: InitProducerIdResult) -> None:
            self.respond(request, self._init_body(result))

        self.coordinator.handle_init_producer_id(
            req.transactional_id, req.transaction_timeout, expected, answer,
            producer_fenced_supported=version >= 4,
        )  # fmt: skip
        return PARKED

    @staticmethod
    def _init_body(result: InitProducerIdResult) -> dict:
        return {"throttle_time": 0, "error_code": result.error, "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch}

    # -- AddPartitionsToTxn ---------------------------------------------------------------------
    def handle_add_partitions_to_txn(self, request: Request) -> Any:
        version = request.header.api_version
        req = request.body
        if version <= 3:
            partitions = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]

            def answer(errors: dict[TopicPartition, ErrorCode]) -> None:
                self.respond(request, {"throttle_time": 0, "results_by_topic_v3_and_below":
                                       self._topic_results(errors)})

            self._add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                 req.v3_and_below_producer_epoch, partitions, version >= 2, answer)
            return PARKED
        # v4+: batches of transactions, as brokers send them (KIP-890 verification)
        transactions = list(req.transactions)
        results: list[dict | None] = [None] * len(transactions)
        remaining = len(transactions)

        def one_done(i: int, txn_id: str, errors: dict[TopicPartition, ErrorCode]) -> None:
            nonlocal remaining
            results[i] = {"transactional_id": txn_id, "topic_results": self._topic_results(errors)}
            remaining -= 1
            if remaining == 0:
                self.respond(request, {"throttle_time": 0, "error_code": E.none,
                                       "results_by_transaction": results})

        if not transactions:
            return {"throttle_time": 0, "error_code": E.none, "results_by_transaction": []}
        for i, t in enumerate(transactions):
            partitions = [(topic.name, p) for topic in t.topics for p in topic.partitions]
            txn_id: str = t.transactional_id
            if t.verify_only:
                error, per_partition = self.coordinator.handle_verify_partitions(
                    txn_id, t.producer_id, t.producer_epoch, partitions
                )
                errors: dict[TopicPartition, ErrorCode] = (
                    per_partition if error is E.none else dict.fromkeys(partitions, error)
                )
                one_done(i, txn_id, errors)
            else:
                self._add_partitions(
                    txn_id, t.producer_id, t.producer_epoch, partitions, True,
                    functools.partial(one_done, i, txn_id),
                )  # fmt: skip
        return PARKED

    def _add_partitions(
        self, txn_id: str, pid: int, epoch: int, partitions: list[TopicPartition], fenced_supported: bool,
        answer: Callable[[dict[TopicPartition, ErrorCode]], None],
    ) -> None:  # fmt: skip
        unknown = {tp for tp in partitions if self.replicas.get_log(*tp) is None}
        if unknown:
            answer({tp: E.unknown_topic_or_partition if tp in unknown else E.operation_not_attempted
                    for tp in partitions})
            return
        self.coordinator.handle_add_partitions(
            txn_id, pid, epoch, partitions, lambda error: answer(dict.fromkeys(partitions, error)),
            producer_fenced_supported=fenced_supported,
        )  # fmt: skip

    @staticmethod
    def _topic_results(errors: dict[TopicPartition, ErrorCode]) -> list[dict]:
        by_topic: dict[str, list[dict]] = {}
        for (topic, p), error in errors.items():
            by_topic.setdefault(topic, []).append({"partition_index": p, "partition_error_code": error})
        return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]

    # -- AddOffsetsToTxn ------------------------------------------------------------------------
    def handle_add_offsets_to_txn(self, request: Request) -> Any:
        req = request.body
        try:
            tp = self.offsets_partition_for(req.group_id)
        except OSError as exc:
            log.error("cannot create %s: %s", GROUP_METADATA_TOPIC_NAME, exc)
            return {"throttle_time": 0, "error_code": E.coordinator_not_available}

        def answer(error: ErrorCode) -> None:
            self.respond(request, {"throttle_time": 0, "error_code": error})

        self.coordinator.handle_add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, [tp], answer,
            producer_fenced_supported=request.header.api_version >= 2,
        )  # fmt: skip
        return PARKED

    # -- EndTxn ---------------------------------------------------------------------------------
    def handle_end_txn(self, request: Request) -> Any:
        req = request.body

        def answer(error: ErrorCode) -> None:
            self.respond(request, {"throttle_time": 0, "error_code": error})

        self.coordinator.handle_end_transaction(
            req.transactional_id, req.producer_id, req.producer_epoch,
            TransactionResult.COMMIT if req.committed else TransactionResult.ABORT, answer,
            producer_fenced_supported=request.header.api_version >= 2,
        )  # fmt: skip
        return PARKED

    # -- WriteTxnMarkers ------------------------------------------------------------------------
    def handle_write_txn_markers(self, request: Request) -> Any:
        """Markers written on request (the admin's abortTransaction, KIP-664): each partition
        gets the control batch; a partition not hosted here gets UNKNOWN_TOPIC_OR_PARTITION."""
        results: list[dict] = []
        to_write: list[tuple[TopicPartition, bytearray, dict, int, bool]] = []
        now_ms = self.clock.wall_milliseconds()
        for m in request.body.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    part = {"partition_index": p, "error_code": E.none}
                    parts.append(part)
                    if self.replicas.get_log(t.name, p) is None:
                        part["error_code"] = E.unknown_topic_or_partition
                    else:
                        batch = end_transaction_marker_batch(
                            m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result, now_ms
                        )
                        to_write.append(((t.name, p), batch, part, m.producer_id, m.transaction_result))
                topics.append({"name": t.name, "partitions": parts})
            results.append({"producer_id": m.producer_id, "topics": topics})
        body = {"markers": results}
        if not to_write:
            return body
        pending = len(to_write)

        def done() -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                self.respond(request, body)

        for tp, batch, part, producer_id, commit in to_write:
            self._append_marker(tp, batch, part, producer_id, commit, done)
        return PARKED

    def _append_marker(self, tp: TopicPartition, batch: bytearray, part: dict, producer_id: int, commit: bool,
                       done: Callable[[], None]) -> None:
        def appended(res: dict[TopicPartition, PartitionResponse]) -> None:
            part["error_code"] = res[tp].error
            if res[tp].error is E.none:
                self.coordinator.markers.marker_written(tp, producer_id, commit)
            done()

        self.replicas.append_records(30_000, -1, {tp: batch}, appended,
                                     internal_topics_allowed=True, from_client=False)

    # -- DescribeTransactions / ListTransactions ------------------------------------------------
    def handle_describe_transactions(self, request: Request) -> dict:
        states = []
        for d in self.coordinator.handle_describe_transactions(request.body.transactional_ids):
            states.append({
                "error_code": d.error,
                "transactional_id": d.transactional_id,
                "transaction_state": d.state,
                "transaction_timeout": d.timeout_ms,
                "transaction_start_time": d.start_timestamp,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "topics": [{"topic": topic, "partitions": parts}
                           for topic, parts in partitions_by_topic(d.partitions).items()],
            })  # fmt: skip
        return {"throttle_time": 0, "transaction_states": states}

    def handle_list_transactions(self, request: Request) -> dict:
        req = request.body
        error, transactions, unknown = self.coordinator.handle_list_transactions(
            req.state_filters, req.producer_id_filters, getattr(req, "duration_filter", -1)
        )
        return {
            "throttle_time": 0,
            "error_code": error,
            "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": t, "producer_id": pid, "transaction_state": state}
                for t, pid, state in transactions
            ],
        }


def _unset_respond(request: Request, values: dict | None) -> None:
    raise RuntimeError("TransactionApis.respond is set by KafkaApis")
