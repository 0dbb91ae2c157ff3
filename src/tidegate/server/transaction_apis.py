"""Request handlers of the transaction APIs, for :class:`tidegate.server.kafka_apis.KafkaApis`.

InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
DescribeTransactions and ListTransactions: each maps the request message of whatever
version arrived onto the sans-IO
:class:`~tidegate.coordinator.transaction.transaction_coordinator.TransactionCoordinator`
and its answer onto the response message. Requests that wait for a
``__transaction_state`` write return PARKED and are answered through ``respond``
(:meth:`RequestHandlerHelper.send_response
<tidegate.server.request_handler_helper.RequestHandlerHelper.send_response>`), as the group
handlers are.

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
from typing import TYPE_CHECKING

from tidegate.clock import Clock
from tidegate.coordinator.transaction.transaction_coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
)
from tidegate.coordinator.transaction.transaction_log import partitions_by_topic
from tidegate.coordinator.transaction.transaction_metadata import TransactionResult
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Parked, Request
from tidegate.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from tidegate.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from tidegate.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    TopicData,
)
from tidegate.protocol.messages.describe_transactions import (
    TransactionState as DescribedTransaction,
)
from tidegate.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from tidegate.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from tidegate.protocol.messages.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
    TransactionState,
)
from tidegate.protocol.messages.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from tidegate.record.control_records import end_transaction_marker_batch
from tidegate.utils.topic import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tidegate.server.replica_manager import PartitionResponse, ReplicaManager
    from tidegate.server.request_handler_helper import Respond

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class TransactionApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        replicas: ReplicaManager,
        offsets_partition_for: Callable[[str], TopicPartition],
        clock: Clock,
        *,
        respond: Respond,
    ) -> None:
        self.coordinator = coordinator
        #: its wall clock stamps the markers WriteTxnMarkers writes
        self.clock = clock
        self.replicas = replicas
        #: the __consumer_offsets partition of a group, created if need be (AddOffsetsToTxn)
        self.offsets_partition_for = offsets_partition_for
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond

    def coordinator_error(self) -> tuple[ErrorCode, str | None]:
        """FindCoordinator for a transactional id: NONE once __transaction_state exists
        (created here on first use, as Kafka does), else why this broker cannot coordinate."""
        if not self.coordinator.active:
            return ErrorCode.coordinator_not_available, "the transaction coordinator is not running"
        try:
            self.coordinator.txn_manager.ensure_topic()
        except OSError as exc:
            log.error("could not create __transaction_state: %s", exc)
            return ErrorCode.coordinator_not_available, f"cannot create __transaction_state: {exc}"
        return ErrorCode.none, None

    # -- InitProducerId -------------------------------------------------------------------------
    def handle_init_producer_id(self, request: Request) -> InitProducerIdResponse | Parked:
        """Idempotent producers (no transactional id) get a fresh producer id at epoch 0;
        transactional ones go through the coordinator (fencing, epoch bumps, KIP-360)."""
        req = request.body_as(InitProducerIdRequest)
        pid = req.producer_id
        epoch = req.producer_epoch
        if (pid == -1) != (epoch == -1):
            return self._init_response(InitProducerIdResult(-1, -1, ErrorCode.invalid_request))  # both or neither
        expected = None if pid == -1 else (pid, epoch)

        def answer(result: InitProducerIdResult) -> None:
            self.respond(request, self._init_response(result))

        self.coordinator.handle_init_producer_id(
            req.transactional_id, req.transaction_timeout, expected, answer,
            producer_fenced_supported=request.header.api_version >= 4,
        )  # fmt: skip
        return PARKED

    @staticmethod
    def _init_response(result: InitProducerIdResult) -> InitProducerIdResponse:
        return InitProducerIdResponse(error_code=result.error, producer_id=result.producer_id,
                                      producer_epoch=result.producer_epoch)

    # -- AddPartitionsToTxn ---------------------------------------------------------------------
    def handle_add_partitions_to_txn(self, request: Request) -> AddPartitionsToTxnResponse | Parked:
        req = request.body_as(AddPartitionsToTxnRequest)
        version = request.header.api_version
        if version <= 3:
            partitions = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]

            def answer(errors: dict[TopicPartition, ErrorCode]) -> None:
                self.respond(request, AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(errors)))

            self._add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                 req.v3_and_below_producer_epoch, partitions, version >= 2, answer)
            return PARKED
        # v4+: batches of transactions, as brokers send them (KIP-890 verification)
        transactions = list(req.transactions)
        if not transactions:
            return AddPartitionsToTxnResponse()
        results: list[AddPartitionsToTxnResult] = [AddPartitionsToTxnResult() for _ in transactions]
        remaining = len(transactions)

        def one_done(i: int, txn_id: str, errors: dict[TopicPartition, ErrorCode]) -> None:
            nonlocal remaining
            results[i] = AddPartitionsToTxnResult(transactional_id=txn_id, topic_results=_topic_results(errors))
            remaining -= 1
            if remaining == 0:
                self.respond(request, AddPartitionsToTxnResponse(results_by_transaction=results))

        for i, t in enumerate(transactions):
            partitions = [(topic.name, p) for topic in t.topics for p in topic.partitions]
            txn_id = t.transactional_id
            if t.verify_only:
                error, per_partition = self.coordinator.handle_verify_partitions(
                    txn_id, t.producer_id, t.producer_epoch, partitions
                )
                errors: dict[TopicPartition, ErrorCode] = (
                    per_partition if error is ErrorCode.none else dict.fromkeys(partitions, error)
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
            answer({tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                    for tp in partitions})
            return
        self.coordinator.handle_add_partitions(
            txn_id, pid, epoch, partitions, lambda error: answer(dict.fromkeys(partitions, error)),
            producer_fenced_supported=fenced_supported,
        )  # fmt: skip

    # -- AddOffsetsToTxn ------------------------------------------------------------------------
    def handle_add_offsets_to_txn(self, request: Request) -> AddOffsetsToTxnResponse | Parked:
        req = request.body_as(AddOffsetsToTxnRequest)
        try:
            tp = self.offsets_partition_for(req.group_id)
        except OSError as exc:
            log.error("cannot create %s: %s", GROUP_METADATA_TOPIC_NAME, exc)
            return AddOffsetsToTxnResponse(error_code=ErrorCode.coordinator_not_available)

        def answer(error: ErrorCode) -> None:
            self.respond(request, AddOffsetsToTxnResponse(error_code=error))

        self.coordinator.handle_add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, [tp], answer,
            producer_fenced_supported=request.header.api_version >= 2,
        )  # fmt: skip
        return PARKED

    # -- EndTxn ---------------------------------------------------------------------------------
    def handle_end_txn(self, request: Request) -> Parked:
        req = request.body_as(EndTxnRequest)

        def answer(error: ErrorCode) -> None:
            self.respond(request, EndTxnResponse(error_code=error))

        self.coordinator.handle_end_transaction(
            req.transactional_id, req.producer_id, req.producer_epoch,
            TransactionResult.COMMIT if req.committed else TransactionResult.ABORT, answer,
            producer_fenced_supported=request.header.api_version >= 2,
        )  # fmt: skip
        return PARKED

    # -- WriteTxnMarkers ------------------------------------------------------------------------
    def handle_write_txn_markers(self, request: Request) -> WriteTxnMarkersResponse | Parked:
        """Markers written on request (the admin's abortTransaction, KIP-664): each partition
        gets the control batch; a partition not hosted here gets UNKNOWN_TOPIC_OR_PARTITION."""
        response = WriteTxnMarkersResponse()
        to_write: list[tuple[TopicPartition, bytearray, WritableTxnMarkerPartitionResult, int, bool]] = []
        now_ms = self.clock.wall_milliseconds()
        for m in request.body_as(WriteTxnMarkersRequest).markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    part = WritableTxnMarkerPartitionResult(partition_index=p)
                    parts.append(part)
                    if self.replicas.get_log(t.name, p) is None:
                        part.error_code = ErrorCode.unknown_topic_or_partition
                    else:
                        batch = end_transaction_marker_batch(
                            m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result, now_ms
                        )
                        to_write.append(((t.name, p), batch, part, m.producer_id, m.transaction_result))
                topics.append(WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
            response.markers.append(WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        if not to_write:
            return response
        pending = len(to_write)

        def done() -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                self.respond(request, response)

        for tp, batch, part, producer_id, commit in to_write:
            self._append_marker(tp, batch, part, producer_id, commit, done)
        return PARKED

    def _append_marker(self, tp: TopicPartition, batch: bytearray, part: WritableTxnMarkerPartitionResult,
                       producer_id: int, commit: bool, done: Callable[[], None]) -> None:
        def appended(res: dict[TopicPartition, PartitionResponse]) -> None:
            part.error_code = res[tp].error
            if res[tp].error is ErrorCode.none:
                self.coordinator.markers.marker_written(tp, producer_id, commit)
            done()

        self.replicas.append_records(30_000, -1, {tp: batch}, appended,
                                     internal_topics_allowed=True, from_client=False)

    # -- DescribeTransactions / ListTransactions ------------------------------------------------
    def handle_describe_transactions(self, request: Request) -> DescribeTransactionsResponse:
        ids = request.body_as(DescribeTransactionsRequest).transactional_ids
        return DescribeTransactionsResponse(transaction_states=[
            DescribedTransaction(
                error_code=d.error,
                transactional_id=d.transactional_id,
                transaction_state=d.state,
                transaction_timeout=d.timeout_ms,
                transaction_start_time=d.start_timestamp,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[TopicData(topic=topic, partitions=parts)
                        for topic, parts in partitions_by_topic(d.partitions).items()],
            )
            for d in self.coordinator.handle_describe_transactions(ids)
        ])  # fmt: skip

    def handle_list_transactions(self, request: Request) -> ListTransactionsResponse:
        req = request.body_as(ListTransactionsRequest)
        error, transactions, unknown = self.coordinator.handle_list_transactions(
            req.state_filters, req.producer_id_filters, req.duration_filter
        )
        return ListTransactionsResponse(
            error_code=error,
            unknown_state_filters=unknown,
            transaction_states=[
                TransactionState(transactional_id=t, producer_id=pid, transaction_state=state)
                for t, pid, state in transactions
            ],
        )


def _topic_results(errors: dict[TopicPartition, ErrorCode]) -> list[AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), error in errors.items():
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=error)
        )
    return [AddPartitionsToTxnTopicResult(name=topic, results_by_partition=parts) for topic, parts in by_topic.items()]
