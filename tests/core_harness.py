"""The broker's core on fake time, driven request by request: no sockets, no event loop.

:class:`CoreHarness` builds the same :class:`~tidegate.server.broker_core.BrokerCore` the
broker runs, on a :class:`~tests.fake_loop.FakeLoop` (a MockClock underneath) and a
:class:`RecordingChannel` standing in for the SocketServer. Tests send encoded requests
into ``KafkaApis.handle``, get the outcome back (a response, PARKED, close), move fake
time with ``h.loop.advance(ms)`` and read parked requests' answers from the channel.
Every time-dependent behaviour (acks=all, long polls, group sessions, throttles) is
exact: nothing sleeps.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from tests.fake_loop import FakeLoop
from tests.integration.rawclient import (
    create_topics_body,
    decode_response,
    encode_request,
    fetch_topics_body,
    list_offsets_body,
    produce_body,
)
from tests.unit.logs import crash_all
from tidegate.config import BrokerConfig
from tidegate.errors import ErrorCode
from tidegate.metrics.prometheus import BrokerMetrics
from tidegate.network.request_channel import (
    PARKED,
    CloseConnectionResponse,
    Outcome,
    Request,
    RequestChannel,
    RequestContext,
    Response,
    SendResponse,
)
from tidegate.protocol.apis import ApiKey
from tidegate.server.broker_core import BrokerCore

CTX = RequestContext(7, "PLAINTEXT", "127.0.0.1", 40000)


class RecordingChannel(RequestChannel[Any]):
    """The RequestChannel of a test: keeps each parked request's response and every
    end of a throttle, in order, and does what the shell does once a response is
    written (its ``after_send``)."""

    def __init__(self) -> None:
        super().__init__()
        self.responses: list[tuple[Request, Response]] = []
        self.throttle_ends: list[int] = []
        #: every request in the order the shell would write its response (immediate ones too)
        self.sent: list[Request] = []

    def send_response(self, request: Request, response: Response) -> None:
        self.responses.append((request, response))
        self.written(request, response)

    def written(self, request: Request, response: Response) -> None:
        self.sent.append(request)
        if response.after_send is not None:
            response.after_send()

    def end_throttling(self, connection_id: int) -> None:
        self.throttle_ends.append(connection_id)

    def response_to(self, request: Request) -> Response | None:
        for req, resp in self.responses:
            if req is request:
                return resp
        return None


def response_bytes(response: Response) -> bytes:
    assert isinstance(response, SendResponse), response
    return b"".join(bytes(p) for p in response.pieces)


def decode_frame(api_key: int, version: int, data: bytes, correlation_id: int) -> Any:
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    cid, body = decode_response(api_key, version, data[4:])
    assert cid == correlation_id
    return body


class CoreHarness:
    def __init__(
        self, root: Path, props: dict | None = None, *, loop: FakeLoop | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)  # Broker._lock does this before loading
        self.loop = loop if loop is not None else FakeLoop()
        self.clock = self.loop.clock
        self.config = BrokerConfig(
            {
                "log.dirs": str(root),
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "cluster.id": "test-cluster",
                **(props or {}),
            }
        )
        self.channel = RecordingChannel()
        self.core = BrokerCore(self.config, root, self.loop, clock=self.clock, channel=self.channel, metrics=metrics)
        self.core.start()
        self.apis = self.core.apis
        self.replicas = self.core.replicas
        self.logs = self.core.logs
        self.store = self.core.store
        self.flusher = self.replicas.flusher
        self._cid = 100
        #: how long each request's handling takes, in ns of fake time (the request quota
        #: measures it): the shell stamps the request this long before handle runs
        self.handler_ns = 0
        #: (request, immediate outcome) of every request sent
        self.outcomes: list[tuple[Request, Outcome]] = []

    def close(self) -> None:
        self.core.stop_serving()
        self.core.close()

    def crash(self) -> None:
        """kill -9: every log is dropped without flush, snapshot or clean-shutdown marker
        (what was written stays, as in the page cache), and nothing else runs."""
        crash_all(self.logs)

    # -- plumbing ---------------------------------------------------------------------------
    def send(
        self, api_key: int, version: int, body: dict, correlation_id: int | None = None,
        ctx: RequestContext = CTX,
    ) -> tuple[Request, Outcome, int, list[int]]:
        """(request, outcome, correlation id, release counter) of one encoded request."""
        if correlation_id is None:
            self._cid += 1
            correlation_id = self._cid
        payload = bytearray(encode_request(api_key, version, correlation_id, body))
        request, outcome = self.send_payload(payload, ctx)
        return request, outcome, correlation_id, self._last_released

    def send_payload(self, payload: bytearray, ctx: RequestContext = CTX) -> tuple[Request, Outcome]:
        """Hand raw request bytes to KafkaApis as the shell does; the release counter of the
        last call is ``self._last_released``."""
        released = [0]
        self._last_released = released

        def release() -> None:
            released[0] += 1

        request = Request(ctx, payload, release, self.clock.nanoseconds() - self.handler_ns)
        outcome = self.apis.handle(request)
        self.outcomes.append((request, outcome))
        if isinstance(outcome, Response):
            # as the shell: write it, run its after-send action, then the deferred work
            self.channel.written(request, outcome)
            self.apis.try_complete_actions()
        return request, outcome

    def request(self, api_key: int, version: int, body: dict, ctx: RequestContext = CTX) -> Any:
        """A request answered at once: the decoded response."""
        _request, outcome, cid, released = self.send(api_key, version, body, ctx=ctx)
        assert released[0] == 1, f"release called {released[0]} times"
        assert outcome is not PARKED, "expected an immediate response, got PARKED"
        assert not isinstance(outcome, CloseConnectionResponse), outcome
        assert isinstance(outcome, Response)
        self.loop.run_pending()
        return decode_frame(api_key, version, response_bytes(outcome), cid)

    def park(self, api_key: int, version: int, body: dict, ctx: RequestContext = CTX) -> tuple[Request, int]:
        """A request that must wait: (the request, its correlation id)."""
        request, outcome, cid, released = self.send(api_key, version, body, ctx=ctx)
        assert released[0] == 1, f"release called {released[0]} times"
        assert outcome is PARKED, f"expected PARKED, got {outcome!r}"
        return request, cid

    def answer(self, request: Request, cid: int, within_ms: int = 0) -> Any:
        """The decoded answer to a parked request, moving fake time up to ``within_ms``
        (in 1 ms steps, so the time it was answered at is exact: ``self.clock``)."""
        deadline = self.clock.milliseconds() + within_ms
        self.loop.run_pending()
        while self.channel.response_to(request) is None and self.clock.milliseconds() < deadline:
            self.loop.advance(1)
        response = self.channel.response_to(request)
        assert response is not None, f"not answered within {within_ms} ms"
        header = request.header
        return decode_frame(header.api_key, header.api_version, response_bytes(response), cid)

    def request_parked(self, api_key: int, version: int, body: dict, within_ms: int = 0,
                       ctx: RequestContext = CTX) -> Any:
        """A request that parks and is answered within ``within_ms`` of fake time."""
        request, cid = self.park(api_key, version, body, ctx=ctx)
        return self.answer(request, cid, within_ms)

    # -- conveniences -------------------------------------------------------------
    def create_topic(self, name, partitions=1, configs=None):
        resp = self.request_parked(  # the logs are made on a worker thread
            ApiKey.CREATE_TOPICS, 7, create_topics_body(name, partitions, configs)
        )
        assert resp.topics[0].error_code == ErrorCode.none, resp
        return resp.topics[0].topic_id

    def produce(self, topic, partition, batch, acks=1, version=9, transactional_id=None):
        body = produce_body(topic, {partition: batch}, acks, transactional_id=transactional_id)
        resp = self.request(ApiKey.PRODUCE, version, body)
        return resp.responses[0].partition_responses[0]

    def fetch(self, version, topics, **kw):
        return self.request(ApiKey.FETCH, version, fetch_topics_body(topics, **kw))

    def list_offsets(self, topic, timestamp, partition=0, version=7):
        body = list_offsets_body(topic, partition, timestamp)
        return self.request(ApiKey.LIST_OFFSETS, version, body).topics[0].partitions[0]

    def metadata(self, version, topics, allow_auto=True):
        body = {
            "topics": topics,
            "allow_auto_topic_creation": allow_auto,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        return self.request(ApiKey.METADATA, version, body)
