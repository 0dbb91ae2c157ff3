"""Kafka's RequestHandlerHelper: how a response leaves the core, the same for every API.

A handler's answer (a response message, ``None`` for no response, now or later) goes
through :meth:`RequestHandlerHelper.respond` — Kafka's ``sendResponseMaybeThrottle``:

1. the authorization step's merge (``Request.authz_merge``: the denied entries and the
   authorized-operations fields, :mod:`tidegate.server.authorization`);
2. quotas (KIP-124/219): the request's time on the request quota, Produce's request
   size on the produce quota, Fetch's response size and ShareFetch's records on the
   fetch quota; the largest throttle goes in the response's ``throttle_time`` and mutes
   the connection after it is written, until the throttle's timer task ends it through
   the channel;
3. metrics: error codes per API and Fetch's bytes out per topic;
4. encoding: one ``bytes``, or for Fetch the pieces of :mod:`tidegate.protocol.fetch_fast`
   (records stay file regions).

:meth:`RequestHandlerHelper.send_response` delivers an answer made at any time: while
the request is still in its handler (a callback that ran at once) it is kept on the
request and becomes the outcome of ``KafkaApis.handle``; once the handler returned
PARKED it goes to the :class:`~tidegate.network.request_channel.RequestChannel`. A
handler does not need to know which.

Every handler answers with the generated response message (``protocol.messages``), so
mypy checks every field it sets; the merge, the metrics and the encoder see messages only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from tidegate.clock import Clock
from tidegate.network.request_channel import (
    CloseConnectionResponse,
    NoOpResponse,
    Request,
    RequestChannel,
    Response,
    SendResponse,
)
from tidegate.protocol.apis import ApiKey
from tidegate.protocol.codec import encode_response
from tidegate.protocol.fetch_fast import (
    Piece,
    SharedPartitions,
    encode_fetch_response,
    fetch_response_size,
)
from tidegate.protocol.messages._base import Message
from tidegate.protocol.messages.fetch import FetchResponse, PartitionData
from tidegate.protocol.messages.produce import ProduceResponse
from tidegate.protocol.messages.share_fetch import ShareFetchResponse
from tidegate.server.metadata import TopicStore

if TYPE_CHECKING:
    from tidegate.metrics.prometheus import BrokerMetrics
    from tidegate.server.quota.client_quota_manager import ClientQuotaManager
    from tidegate.server.quota.quota_factory import QuotaManagers

M = TypeVar("M", bound=Message)

#: A handler's answer: the response message, or None for no response (acks=0).
Answer: TypeAlias = Message | None
#: How a handler class answers a request later: :meth:`RequestHandlerHelper.send_response`.
Respond: TypeAlias = Callable[[Request, Answer], None]


@runtime_checkable
class _Throttled(Protocol):
    """A response message with ``throttle_time`` (KIP-219's ``throttle_time_ms``)."""

    throttle_time: int


class _QuotaRequest:
    """What the quota step needs to know about one request while it is answered."""

    __slots__ = ("client_id", "exempt", "size", "user")

    def __init__(self, user: str, client_id: str, exempt: bool, size: int) -> None:
        self.user = user
        self.client_id = client_id
        self.exempt = exempt
        self.size = size


class RequestHandlerHelper:
    """The respond step of the pipeline (module doc), for KafkaApis and every handler class
    that answers a parked request."""

    def __init__(
        self,
        channel: RequestChannel[Any],
        quotas: QuotaManagers,
        store: TopicStore,
        time: Clock,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        #: where answers to parked requests and the ends of throttles go
        self.channel = channel
        self.quotas = quotas
        #: topic names of a Fetch by topic id, for the bytes-out metric
        self.store = store
        #: request and network-thread time for the request quota (Kafka's ``time``)
        self.time = time
        #: the broker's metrics when ``metrics.listener`` is set; None costs one check
        self.metrics = metrics

    # -- answering ------------------------------------------------------------------------
    def send_response(self, request: Request, answer: Answer, shared: SharedPartitions | None = None) -> None:
        """The answer to ``request``, made now or later (Kafka's ``sendResponse`` from a
        callback): see the module doc. ``shared``: a Fetch completion batch's encoded
        partitions (:func:`~tidegate.protocol.fetch_fast.encode_fetch_response`)."""
        if request.in_handler:
            request.answered = self.respond(request, answer, shared)
        elif not request.abandoned:
            request.start_ns = self.time.nanoseconds()  # time from here is this answer's
            self.channel.send_response(request, self.respond(request, answer, shared))

    def close_connection(self, request: Request, reason: str) -> None:
        """Close the request's connection instead of answering (Kafka's ``closeConnection``)."""
        response = CloseConnectionResponse(reason)
        if request.in_handler:
            request.answered = response
        elif not request.abandoned:
            self.channel.send_response(request, response)

    @staticmethod
    def merged(request: Request, response: M) -> M:
        """``response`` with the authorization step's merge applied (once)."""
        merge = request.authz_merge
        if merge is not None:
            request.authz_merge = None
            merge(response)
        return response

    def respond(self, request: Request, answer: Answer, shared: SharedPartitions | None = None) -> Response:
        """The merge, quotas, metrics, encoding (Kafka's ``sendResponseMaybeThrottle``)."""
        response = answer
        if response is not None:
            self.merged(request, response)
        if self.quotas.enabled:
            return self._respond_with_quotas(request, response, shared)
        if response is None:
            return NoOpResponse()
        if self.metrics is not None:
            self._account(request, response)
        return SendResponse(self._encode(request, response, shared))

    # -- the quota step -------------------------------------------------------------------
    def request_parked(self, request: Request) -> None:
        """The handler's time so far, recorded when it parks the request without a check
        (the check comes with the answer)."""
        if self.quotas.enabled:
            self._record_request_time(self._quota_request(request), self._elapsed_ns(request))

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """The shell's SASL exchange before login: exempt, measured."""
        self.quotas.request.maybe_record_exempt_ns(ns)

    def _quota_request(self, request: Request) -> _QuotaRequest:
        header = request.header
        ctx = request.context
        key = header.api_key
        # Exempt from the request quota, as in Kafka: ApiVersions, and the SASL exchange
        # before the connection is authenticated (their time is still measured).
        exempt = key == ApiKey.API_VERSIONS or (
            key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE) and not ctx.authenticated
        )
        return _QuotaRequest(ctx.principal, header.client_id or "", exempt, request.size)

    def _elapsed_ns(self, request: Request) -> int:
        return max(self.time.nanoseconds() - request.start_ns, 0)

    def _record_request_time(self, q: _QuotaRequest, ns: int) -> None:
        """Time spent on a request, recorded without a check (the next check sees it)."""
        request = self.quotas.request
        if q.exempt:
            request.maybe_record_exempt_ns(ns)
        else:
            request.record_network_thread_time_ns(q.user, q.client_id, ns)

    def _respond_with_quotas(
        self, request: Request, response: Message | None, shared: SharedPartitions | None = None
    ) -> Response:
        """Record, check and throttle (KIP-219), then encode the response.

        As Kafka's KafkaApis: the request time so far is recorded and checked on the
        request quota; Produce records the request's size on the produce quota, Fetch the
        response's size on the fetch quota; the throttle is the maximum of those that
        apply. A throttled Fetch is answered empty (its bytes are taken back: the client
        gets them later). The response carries ``throttle_time_ms`` in every version
        that has the field and is sent at once; the shell mutes the connection for the
        throttle time, also when there is no response (acks=0), until the throttle's
        timer task ends it. Encoding and writing the response are recorded after the
        write (the response's ``after_send``).
        """
        quotas = self.quotas
        q = self._quota_request(request)
        clock = self.time
        if q.exempt:
            quotas.request.maybe_record_exempt_ns(self._elapsed_ns(request))
            encode_start = clock.nanoseconds()
            return self._with_after_send(self._account_and_encode(request, response, shared), 0, q, encode_start)
        request_ms = quotas.request.maybe_record_request_time_ns(q.user, q.client_id, self._elapsed_ns(request))
        encode_start = clock.nanoseconds()
        byte_manager = None
        byte_ms = 0
        fetched = 0
        if request.header.api_key == ApiKey.PRODUCE:
            byte_manager = quotas.produce
            byte_ms = byte_manager.maybe_record_and_get_throttle_time_ms(q.user, q.client_id, q.size)
        elif isinstance(response, FetchResponse) and quotas.fetch.quotas_enabled:
            byte_manager = quotas.fetch
            # The throttle is decided on the response's size, known without encoding
            # (Kafka's fetchResponseSize), so the response is encoded once.
            fetched = fetch_response_size(request.header.api_version, response)
            byte_ms = byte_manager.record_and_get_throttle_time_ms(q.user, q.client_id, fetched)
        elif isinstance(response, ShareFetchResponse) and quotas.fetch.quotas_enabled:
            # KIP-932: a share fetch's records are on the fetch quota too; they are
            # acquired (locked to this member), so a throttled answer still carries them
            byte_manager = quotas.fetch
            size = sum(len(p.records) for t in response.responses for p in t.partitions if p.records is not None)
            byte_ms = byte_manager.record_and_get_throttle_time_ms(q.user, q.client_id, size)
        throttle_ms = max(byte_ms, request_ms)
        if throttle_ms <= 0:
            return self._with_after_send(self._account_and_encode(request, response, shared), 0, q, encode_start)
        if isinstance(response, FetchResponse):
            if fetched:
                quotas.fetch.unrecord_quota_sensor(q.user, q.client_id, fetched)
            _without_records(response)
        if isinstance(response, _Throttled):  # every version with the field carries it
            response.throttle_time = throttle_ms
        manager: ClientQuotaManager = (
            byte_manager if byte_manager is not None and byte_ms > request_ms else quotas.request
        )
        connection_id = request.context.connection_id
        end = self.channel.end_throttling
        manager.throttle(q.user, q.client_id, throttle_ms, lambda: end(connection_id))
        answer = self._with_after_send(self._account_and_encode(request, response), throttle_ms, q, encode_start)
        answer.throttle_quota = manager.quota_type.group
        return answer

    def _with_after_send(
        self, pieces: list[Piece] | None, throttle_ms: int, q: _QuotaRequest, since_ns: int
    ) -> Response:
        """The response, with the action that records the time from ``since_ns`` to the
        end of its write (Kafka's network-thread time) once the shell has written it."""
        clock = self.time
        record = self._record_request_time

        def after_send() -> None:
            record(q, max(clock.nanoseconds() - since_ns, 0))

        if pieces is None:
            return NoOpResponse(throttle_ms, after_send)
        return SendResponse(pieces, throttle_ms, after_send)

    # -- metrics and encoding -------------------------------------------------------------
    def _account_and_encode(
        self, request: Request, response: Message | None, shared: SharedPartitions | None = None
    ) -> list[Piece] | None:
        if response is None:
            return None
        if self.metrics is not None:
            self._account(request, response)
        return self._encode(request, response, shared)

    def _account(self, request: Request, response: Message) -> None:
        """Metrics from a response about to be sent: error codes per API (per partition
        for Produce and Fetch, as Kafka counts them) and Fetch's bytes out per topic."""
        assert self.metrics is not None
        requests = self.metrics.requests
        key = request.header.api_key
        if isinstance(response, ProduceResponse):
            for t in response.responses:
                for p in t.partition_responses:
                    if p.error_code:
                        requests.error(key, p.error_code)
        elif isinstance(response, FetchResponse):
            topics = self.metrics.topics
            by_id = request.header.api_version >= 13
            if response.error_code:
                requests.error(key, response.error_code)
            for ft in response.responses:
                if by_id:
                    info = self.store.get_by_id(ft.topic_id)
                    name = info.name if info is not None else None
                else:
                    name = ft.topic
                size = 0
                for fp in ft.partitions:
                    if fp.error_code:
                        requests.error(key, fp.error_code)
                    elif fp.records is not None:
                        size += len(fp.records)
                if size and name is not None:
                    topics.fetched(name, size)
        else:
            requests.count_errors(key, response)

    @staticmethod
    def _encode(request: Request, response: Message, shared: SharedPartitions | None = None) -> list[Piece]:
        """The framed response as pieces: a Fetch's records stay file regions
        (:mod:`tidegate.protocol.fetch_fast`), anything else is one ``bytes``."""
        header = request.header
        if isinstance(response, FetchResponse):
            return encode_fetch_response(header.correlation_id, header.api_version, response, shared)
        return [encode_response(header, response)]


def _without_records(response: FetchResponse) -> None:
    """A throttled Fetch: the same partitions, high watermarks as usual, no records (the
    consumer fetches them again once the throttle ends). The partitions are copies: one
    may be shared with other responses (a completion batch's)."""
    for t in response.responses:
        t.partitions = [_no_records(p) for p in t.partitions]


def _no_records(p: PartitionData) -> PartitionData:
    p = copy.copy(p)
    p.records = b""
    return p
