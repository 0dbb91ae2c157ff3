"""ShareFetch and ShareAcknowledge (KIP-932): the request handling of Kafka's
``KafkaApis.handleShareFetchRequest`` / ``handleShareAcknowledgeRequest``, over the
:class:`~.share_partition_manager.SharePartitionManager`, answering typed responses.

:func:`handle_share_fetch` and :func:`handle_share_acknowledge` are what a handler calls
with the typed request and a :class:`ShareRequestContext`; the callback gets the typed
response once (at once, or later: parked fetches, writes of acknowledgements).

**ShareFetch** (reference 2.4): a MemberId empty or longer than 36 characters is a
top-level INVALID_REQUEST, as is an ``IsRenewAck`` request (v2) with any of MaxBytes,
MinBytes, MaxRecords, MaxWaitMs set. Repeated TopicId entries of ``Topics`` are merged
(librdkafka writes new and acknowledging partitions separately). The session
(:func:`~.session.new_context`) answers its errors at the top level
(SHARE_SESSION_LIMIT_REACHED only after MaxWaitMs). The piggy-backed acknowledgements
run first, and each partition named in ``Topics`` gets its AcknowledgeErrorCode
(a partition entry is added for it if needed). Then the whole session's partitions are
fetched: UNKNOWN_TOPIC_ID for a topic id the broker does not know,
TOPIC_AUTHORIZATION_FAILED without READ on the topic, UNKNOWN_TOPIC_OR_PARTITION for a
partition it lacks; MaxBytes capped by ``fetch.max.bytes`` and the caller's cap (the
fetch quota's window), MinBytes by MaxBytes; no fetch for the closing epoch (-1), a
renewing request, or MaxRecords or MaxBytes 0. A later epoch's response carries only the
partitions with something to report (records, an error, an acknowledgement outcome, or
added to the session since: Kafka's ``ShareSessionContext``). The closing epoch then
releases what the member still holds. AcquisitionLockTimeoutMs is the group's lock
duration (0 with a top-level error).

**ShareAcknowledge** (reference 2.5): the session's epoch first
(:func:`~.session.acknowledge_session_update`: 0 is INVALID_SHARE_SESSION_EPOCH, -1
releases after the acknowledgements), then each partition as above.

The ACL checks (READ on the group for the whole request, READ on each topic) belong to
the authorization step; the topic check is handed in as
:attr:`ShareRequestContext.topic_authorized` because ShareFetch's fetched partitions are
the session's, not the request's (a request filtered by the authorization step would
drop denied partitions from the session instead of answering them
TOPIC_AUTHORIZATION_FAILED on every fetch).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tidegate.errors import ErrorCode
from tidegate.protocol.messages import share_acknowledge as sa
from tidegate.protocol.messages import share_fetch as sf
from tidegate.server.fetch_session import next_epoch
from tidegate.utils import INT32_MAX

from .acknowledgements import ShareAcknowledgementBatch, validate_acknowledgement_batches
from .delayed_share_fetch import (
    FetchResults,
    ShareFetchParams,
    ShareFetchPartition,
    TopicIdPartition,
    error_partition,
)
from .session import FINAL_EPOCH, ShareFetchContext, acknowledge_session_update, new_context
from .share_partition import ShareAcquireMode, ShareResult
from .share_partition_manager import SharePartitionManager

__all__ = [
    "MAX_MEMBER_ID_LENGTH",
    "ShareRequestContext",
    "handle_share_acknowledge",
    "handle_share_fetch",
]

#: the longest member id a client may send (a UUID's string form; KafkaApis' check)
MAX_MEMBER_ID_LENGTH = 36

AckResults = dict[TopicIdPartition, ShareResult]


@dataclass(frozen=True, slots=True)
class ShareRequestContext:
    """What the handler knows of a ShareFetch or ShareAcknowledge besides its body."""

    #: the request's API version
    version: int
    #: the connection it came in on: a session opened here ends when it closes
    connection_id: int
    #: (host, port) of that listener: where a NOT_LEADER_OR_FOLLOWER partition is led
    endpoint: tuple[str, int] = ("", 0)
    #: the caller's cap on a ShareFetch's MaxBytes (the fetch quota's window)
    max_bytes: int = INT32_MAX
    #: READ on a topic, by name (the authorization step's check); None: every topic
    topic_authorized: Callable[[str], bool] | None = None
    #: True once the client went away (a parked fetch then acquires nothing)
    abandoned: Callable[[], bool] | None = None


class _AckBatch(Protocol):
    """An AcknowledgementBatch of either request (the two generated classes)."""

    first_offset: int
    last_offset: int
    acknowledge_types: list[int]


class _Partition(Protocol):
    partition_index: int

    @property
    def acknowledgement_batches(self) -> Sequence[_AckBatch]: ...


class _Topic(Protocol):
    topic_id: uuid.UUID

    @property
    def partitions(self) -> Sequence[_Partition]: ...


#: topic id -> partition -> its acknowledgement batches, in request order
RequestAcks = dict[uuid.UUID, dict[int, list[ShareAcknowledgementBatch]]]


def merged_topics(topics: Sequence[_Topic]) -> RequestAcks:
    """The request's partitions with their acknowledgement batches, repeated TopicId
    entries (and partitions) merged in request order."""
    out: RequestAcks = {}
    for topic in topics:
        parts = out.setdefault(topic.topic_id, {})
        for partition in topic.partitions:
            batches = parts.setdefault(partition.partition_index, [])
            batches.extend(ShareAcknowledgementBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                           for b in partition.acknowledgement_batches)
    return out


def _member_id_error(member_id: str | None) -> str | None:
    if not member_id or not member_id.strip():
        return "The member id is empty."
    if len(member_id) > MAX_MEMBER_ID_LENGTH:
        return f"The member id is longer than {MAX_MEMBER_ID_LENGTH} characters."
    return None


# -- acknowledgements (both APIs) -----------------------------------------------------------


def _acknowledge(manager: SharePartitionManager, group_id: str, member_id: str, acks: RequestAcks,
                 context: ShareRequestContext, is_renew_ack: bool, callback: Callable[[AckResults], None]) -> None:
    """Check and apply each partition's acknowledgements (Kafka's ``handleAcknowledgements``
    with ``getAcknowledgeBatchesFrom*Request``): UNKNOWN_TOPIC_ID, then the batches'
    validation (INVALID_REQUEST), TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION;
    an empty list succeeds."""
    results: AckResults = {}
    apply: dict[TopicIdPartition, list[ShareAcknowledgementBatch]] = {}
    authorized = context.topic_authorized
    for topic_id, parts in acks.items():
        info = manager.topics.get_by_id(topic_id)
        for partition, batches in parts.items():
            tp = (topic_id, partition)
            if info is None:
                results[tp] = ShareResult(ErrorCode.unknown_topic_id)
                continue
            error, message = validate_acknowledgement_batches(batches, supports_renew=context.version >= 2,
                                                              is_renew_ack=is_renew_ack)
            if error is not ErrorCode.none:
                results[tp] = ShareResult(error, message)
            elif authorized is not None and not authorized(info.name):
                results[tp] = ShareResult(ErrorCode.topic_authorization_failed)
            elif partition >= info.partitions or manager.replicas.get_log(info.name, partition) is None:
                results[tp] = ShareResult(ErrorCode.unknown_topic_or_partition)
            elif not batches:
                results[tp] = ShareResult()
            else:
                apply[tp] = batches
    order = [(t, p) for t, parts in acks.items() for p in parts]

    def applied(outcomes: AckResults) -> None:
        results.update(outcomes)
        callback({tp: results[tp] for tp in order})

    manager.acknowledge(member_id, group_id, apply, applied)


def _release_then(manager: SharePartitionManager, group_id: str, member_id: str, answer: Callable[[], None]) -> None:
    """The closing epoch: the session ends and its records are released (after the
    request's acknowledgements were applied), then ``answer``."""
    manager.release_session(group_id, member_id, lambda _error, _results: answer())


# -- ShareFetch ------------------------------------------------------------------------------


def _fetch_error(error: ErrorCode, message: str | None = None) -> sf.ShareFetchResponse:
    return sf.ShareFetchResponse(error_code=error, error_message=message)


def _fetch_request_error(request: sf.ShareFetchRequest) -> str | None:
    message = _member_id_error(request.member_id)
    if message is None and request.is_renew_ack and (
            request.max_bytes or request.min_bytes or request.max_records or request.max_wait):
        message = "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 in a renewing ShareFetch."
    return message


def handle_share_fetch(manager: SharePartitionManager, request: sf.ShareFetchRequest, context: ShareRequestContext,
                       callback: Callable[[sf.ShareFetchResponse], None]) -> None:
    """A ShareFetch (see the module docstring): ``callback`` gets the response once."""
    message = _fetch_request_error(request)
    if message is not None:
        callback(_fetch_error(ErrorCode.invalid_request, message))
        return
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    acks = merged_topics(request.topics)
    has_acks = any(batches for parts in acks.values() for batches in parts.values())
    requested = [(t, p) for t, parts in acks.items() for p in parts]
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    ctx = new_context(manager.sessions, group_id, member_id, request.share_session_epoch, requested, forgotten,
                      has_acks, str(context.connection_id))
    if ctx.error is ErrorCode.share_session_limit_reached:
        manager.answer_later(request.max_wait, lambda: callback(_fetch_error(ctx.error)))
        return
    if ctx.error is not ErrorCode.none:
        callback(_fetch_error(ctx.error))
        return
    join = _FetchJoin(manager, request, ctx, context, callback, acks if has_acks else None)
    if has_acks:
        _acknowledge(manager, group_id, member_id, acks, context, request.is_renew_ack, join.acknowledged)
    else:
        join.acknowledged({})
    _fetch(manager, request, ctx, context, join.fetched)


def _fetch(manager: SharePartitionManager, request: sf.ShareFetchRequest, ctx: ShareFetchContext,
           context: ShareRequestContext, callback: Callable[[FetchResults], None]) -> None:
    """The fetch half: the session's partitions, checked, then acquired."""
    session = ctx.session
    if ctx.final or session is None:
        callback({})
        return
    errors: FetchResults = {}
    wanted: list[ShareFetchPartition] = []
    authorized = context.topic_authorized
    for topic_id, partition in session.partitions:
        info = manager.topics.get_by_id(topic_id)
        tp = (topic_id, partition)
        if info is None:
            errors[tp] = error_partition(partition, ErrorCode.unknown_topic_id)
        elif authorized is not None and not authorized(info.name):
            errors[tp] = error_partition(partition, ErrorCode.topic_authorization_failed)
        elif partition >= info.partitions or manager.replicas.get_log(info.name, partition) is None:
            errors[tp] = error_partition(partition, ErrorCode.unknown_topic_or_partition)
        else:
            wanted.append(ShareFetchPartition(topic_id, partition, info.name))
    max_bytes = min(request.max_bytes, manager.config.fetch_max_bytes, context.max_bytes)
    if not wanted or request.is_renew_ack or request.max_records <= 0 or max_bytes <= 0:
        callback(errors)
        return
    mode = ShareAcquireMode.RECORD_LIMIT if request.share_acquire_mode == 1 else ShareAcquireMode.BATCH_OPTIMIZED
    params = ShareFetchParams(request.max_wait, min(request.min_bytes, max_bytes), max_bytes, request.max_records,
                              request.batch_size, mode, request.share_session_epoch)

    def fetched(results: FetchResults) -> None:
        callback({**errors, **results})

    manager.fetch_messages(request.group_id or "", request.member_id or "", params, wanted, fetched,
                           context.abandoned)


class _FetchJoin:
    """Waits for both halves of a ShareFetch (the acknowledgements and the fetch), then
    builds the response (Kafka's ``combineShareFetchAndShareAcknowledgeResponses``)."""

    __slots__ = ("acks", "callback", "context", "ctx", "fetch_results", "manager", "request", "requested")

    def __init__(self, manager: SharePartitionManager, request: sf.ShareFetchRequest, ctx: ShareFetchContext,
                 context: ShareRequestContext, callback: Callable[[sf.ShareFetchResponse], None],
                 requested: RequestAcks | None) -> None:
        self.manager = manager
        self.request = request
        self.ctx = ctx
        self.context = context
        self.callback = callback
        self.requested = requested
        self.acks: AckResults | None = None
        self.fetch_results: FetchResults | None = None

    def acknowledged(self, results: AckResults) -> None:
        self.acks = results
        self._maybe_answer()

    def fetched(self, results: FetchResults) -> None:
        self.fetch_results = results
        self._maybe_answer()

    def _maybe_answer(self) -> None:
        if self.acks is None or self.fetch_results is None:
            return
        response = _fetch_response(self.manager, self.request, self.ctx, self.context, self.fetch_results,
                                   self.acks)
        if self.ctx.final:
            request = self.request
            _release_then(self.manager, request.group_id or "", request.member_id or "",
                          lambda: self.callback(response))
        else:
            self.callback(response)


def _fetch_response(manager: SharePartitionManager, request: sf.ShareFetchRequest, ctx: ShareFetchContext,
                    context: ShareRequestContext, results: FetchResults, acks: AckResults) -> sf.ShareFetchResponse:
    session = ctx.session
    if session is not None and not ctx.initial:
        if session.epoch != next_epoch(request.share_session_epoch):
            # the session moved on while this request waited (a duplicate request)
            return _fetch_error(ErrorCode.invalid_share_session_epoch)
        results = _updated_partitions(session.partitions, results)
    for tp, outcome in acks.items():
        data = results.get(tp)
        if data is None:
            data = results[tp] = sf.PartitionData(partition_index=tp[1], records=b"")
        data.acknowledge_error_code = outcome.error
        data.acknowledge_error_message = outcome.message
    topics: dict[uuid.UUID, sf.ShareFetchableTopicResponse] = {}
    nodes: dict[int, None] = {}
    for (topic_id, partition), data in results.items():
        _topic(topics, topic_id, sf.ShareFetchableTopicResponse).partitions.append(data)
        if data.error_code == ErrorCode.not_leader_or_follower:
            leader_id, leader_epoch = _leader(manager, topic_id, partition, nodes, context)
            data.current_leader = sf.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
    host, port = context.endpoint
    return sf.ShareFetchResponse(
        acquisition_lock_timeout=manager.lock_duration_ms(request.group_id or ""), responses=list(topics.values()),
        node_endpoints=[sf.NodeEndpoint(node_id=n, host=host, port=port) for n in nodes])


def _updated_partitions(partitions: dict[TopicIdPartition, bool], results: FetchResults) -> FetchResults:
    """A later epoch's partitions worth answering (Kafka's ``CachedSharePartition
    .maybeUpdateResponseData``): with records, with an error (answered again once the
    error is gone), or flagged since added to the session.

    Kafka also moves a partition that returned records to the end of the session's
    order (as KIP-227 fetch sessions do); together with the rotation by epoch that
    starves partitions (three partitions, one served per fetch: 1, 1, 0, 1, 1, 2, ...),
    so the session's order stays the request order here and the rotation alone makes
    the reads round-robin."""
    out: FetchResults = {}
    for tp, data in results.items():
        must = bool(data.records)
        if partitions.get(tp):
            must = True
            partitions[tp] = False
        if data.error_code != ErrorCode.none:
            partitions[tp] = True
            must = True
        if must:
            out[tp] = data
    return out


_Topic_T = TypeVar("_Topic_T", sf.ShareFetchableTopicResponse, sa.ShareAcknowledgeTopicResponse)


def _topic(topics: dict[uuid.UUID, _Topic_T], topic_id: uuid.UUID, new: Callable[..., _Topic_T]) -> _Topic_T:
    """A response's entry of ``topic_id`` (partitions are answered grouped by topic, in
    the order their topics first come)."""
    topic = topics.get(topic_id)
    if topic is None:
        topic = topics[topic_id] = new(topic_id=topic_id)
    return topic


def _leader(manager: SharePartitionManager, topic_id: uuid.UUID, partition: int, endpoints: dict[int, None],
            context: ShareRequestContext) -> tuple[int, int]:
    """This node leads every partition: a NOT_LEADER_OR_FOLLOWER partition (a fenced
    share-partition) names it as (leader id, leader epoch), and the response carries its
    endpoint (KIP-951; ``endpoints`` collects the node ids to describe)."""
    node_id = manager.replicas.node_id
    info = manager.topics.get_by_id(topic_id)
    plog = manager.replicas.get_log(info.name, partition) if info is not None else None
    endpoints[node_id] = None
    return node_id, plog.leader_epoch if plog is not None else -1


# -- ShareAcknowledge ---------------------------------------------------------------------------


def _ack_error(error: ErrorCode, message: str | None = None) -> sa.ShareAcknowledgeResponse:
    return sa.ShareAcknowledgeResponse(error_code=error, error_message=message)


def handle_share_acknowledge(manager: SharePartitionManager, request: sa.ShareAcknowledgeRequest,
                             context: ShareRequestContext,
                             callback: Callable[[sa.ShareAcknowledgeResponse], None]) -> None:
    """A ShareAcknowledge (see the module docstring): ``callback`` gets the response once
    every acknowledgement is written (and, for the closing epoch, released)."""
    message = _member_id_error(request.member_id)
    if message is not None:
        callback(_ack_error(ErrorCode.invalid_request, message))
        return
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    epoch = request.share_session_epoch
    error = acknowledge_session_update(manager.sessions, group_id, member_id, epoch)
    if error is not ErrorCode.none:
        callback(_ack_error(error))
        return
    acks = merged_topics(request.topics)

    def acknowledged(results: AckResults) -> None:
        response = _ack_response(manager, group_id, results, context)
        if epoch == FINAL_EPOCH:
            _release_then(manager, group_id, member_id, lambda: callback(response))
        else:
            callback(response)

    _acknowledge(manager, group_id, member_id, acks, context, request.is_renew_ack, acknowledged)


def _ack_response(manager: SharePartitionManager, group_id: str, results: AckResults,
                  context: ShareRequestContext) -> sa.ShareAcknowledgeResponse:
    topics: dict[uuid.UUID, sa.ShareAcknowledgeTopicResponse] = {}
    nodes: dict[int, None] = {}
    for (topic_id, partition), outcome in results.items():
        data = sa.PartitionData(partition_index=partition, error_code=outcome.error, error_message=outcome.message)
        _topic(topics, topic_id, sa.ShareAcknowledgeTopicResponse).partitions.append(data)
        if outcome.error is ErrorCode.not_leader_or_follower:
            leader_id, leader_epoch = _leader(manager, topic_id, partition, nodes, context)
            data.current_leader = sa.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
    host, port = context.endpoint
    return sa.ShareAcknowledgeResponse(
        acquisition_lock_timeout=manager.lock_duration_ms(group_id), responses=list(topics.values()),
        node_endpoints=[sa.NodeEndpoint(node_id=n, host=host, port=port) for n in nodes])
