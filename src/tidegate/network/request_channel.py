"""The seam between the network shell and the request handlers: Kafka's RequestChannel.

The shell (:mod:`tidegate.network.socket_server`) reads a request's bytes into pool
memory and hands a :class:`Request` to the request processor
(:meth:`tidegate.server.kafka_apis.KafkaApis.handle`). The processor answers with a
:class:`Response` — plain values, no futures, no connection objects:

* :class:`SendResponse`: the encoded response as byte pieces (written in order),
* :class:`NoOpResponse`: nothing to send (acks=0),
* :class:`CloseConnectionResponse`: close the connection (a malformed request),

or with :data:`PARKED`: the request waits in a purgatory (acks=all, a long-poll fetch,
a JoinGroup during a rebalance) and its response arrives later through
:meth:`RequestChannel.send_response`. Every response may carry a throttle (KIP-219:
mute the connection for ``throttle_ms`` after sending; the end of the throttle arrives
through :meth:`RequestChannel.end_throttling`) and an ``after_send`` action (the request
quota's network-thread time, recorded once the response is written).

Nothing here does I/O: the module is shared by the sans-IO core and the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from tidegate.record.file_region import FileRegion


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and on which listener (Kafka's RequestContext)."""

    connection_id: int
    listener_name: str
    client_address: str
    client_port: int
    #: the authenticated user name; "ANONYMOUS" on PLAINTEXT listeners and SSL ones
    #: without a client certificate; the subject DN of an SSL client certificate
    principal: str = "ANONYMOUS"
    security_protocol: str = "PLAINTEXT"
    #: False only for the ApiVersions a SASL connection sends before logging in (the one
    #: request of an unauthenticated connection that reaches the broker)
    authenticated: bool = True


class Request:
    """One request handed over by the shell (Kafka's ``RequestChannel.Request``).

    ``payload`` is the request's bytes in memory taken from the KIP-72 pool;
    :meth:`release_buffer` gives that memory back (once; later calls do nothing).
    The processor releases it as soon as it no longer needs the bytes: after decoding,
    or for Produce after the append. ``start_ns`` is when the shell began processing it
    (the request quota measures handler time from there). ``header`` and ``body`` are
    set by the processor once decoded. ``abandoned`` is set by the shell when the
    connection goes away while the request is parked: its completion skips the work of
    building an answer nobody will read. ``authz_merge`` is the authorization step's
    merge of denied entries into the response, applied by the processor.
    """

    __slots__ = ("_release", "abandoned", "authz_merge", "body", "context", "header", "payload", "start_ns")

    def __init__(
        self,
        context: RequestContext,
        payload: bytearray,
        release: Callable[[], None] | None = None,
        start_ns: int = 0,
    ) -> None:
        self.context = context
        self.payload = payload
        self._release = release
        self.start_ns = start_ns
        # set once decoded: the RequestHeader and the request message (tidegate.protocol.codec)
        self.header: Any = None
        self.body: Any = None
        self.abandoned = False
        #: set by the authorization step when it filtered the request: adds the denied
        #: entries to the handler's response (tidegate.server.authorization)
        self.authz_merge: Callable[[dict], dict] | None = None

    def release_buffer(self) -> None:
        release = self._release
        if release is not None:
            self._release = None
            release()

    def __repr__(self) -> str:
        return f"Request(connection={self.context.connection_id}, header={self.header!r})"


class Response:
    """What to do with a connection once its request is answered.

    ``throttle_ms`` > 0: mute the connection (``MuteReason.THROTTLE``) after sending,
    until :meth:`RequestChannel.end_throttling` (KIP-219); ``throttle_quota`` says which
    quota it serves ("Produce", "Fetch" or "Request"). ``after_send``: called once the
    response has been written (the request quota records that time).
    """

    __slots__ = ("after_send", "throttle_ms", "throttle_quota")

    def __init__(self, throttle_ms: int = 0, after_send: Callable[[], None] | None = None) -> None:
        self.throttle_ms = throttle_ms
        self.throttle_quota: str | None = None
        self.after_send = after_send


class SendResponse(Response):
    """An encoded response: pieces written to the socket in order. A piece is bytes, or
    a :class:`~tidegate.record.file_region.FileRegion` (a Fetch's records, sent from the
    segment file: sendfile on PLAINTEXT, bounded chunks on TLS)."""

    __slots__ = ("pieces",)

    def __init__(
        self,
        pieces: Sequence[bytes | bytearray | memoryview | FileRegion],
        throttle_ms: int = 0,
        after_send: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(throttle_ms, after_send)
        self.pieces = pieces

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.pieces)

    def __repr__(self) -> str:
        return f"SendResponse({self.size} bytes, throttle_ms={self.throttle_ms})"


class NoOpResponse(Response):
    """No response is sent (Produce with acks=0); a throttle still mutes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"NoOpResponse(throttle_ms={self.throttle_ms})"


class CloseConnectionResponse(Response):
    """Close the connection: the request could not be parsed (``reason`` is logged)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def __repr__(self) -> str:
        return f"CloseConnectionResponse({self.reason!r})"


class _Parked:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PARKED"


#: The request waits in a purgatory; its response comes through RequestChannel.send_response.
PARKED: Final = _Parked()

Outcome = Response | _Parked


class RequestChannel(Protocol):
    """Where responses to parked requests and throttle ends go (the shell implements it)."""

    def send_response(self, request: Request, response: Response) -> None: ...

    def end_throttling(self, connection_id: int) -> None: ...


class RequestProcessor(Protocol):
    """What the shell needs from the broker (KafkaApis)."""

    def handle(self, request: Request) -> Outcome: ...

    def try_complete_actions(self) -> None:
        """Work deferred until the responses just sent are written (fetch wake-ups)."""

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """Loop time spent on a SASL frame before login: exempt from the request quota."""
