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
:meth:`RequestChannel.send_response` (a response made while the handler still runs is
returned instead: see :class:`Request`). Every response may carry a throttle (KIP-219:
mute the connection for ``throttle_ms`` after sending; the end of the throttle arrives
through :meth:`RequestChannel.end_throttling`) and an ``after_send`` action (the request
quota's network-thread time, recorded once the response is written).

Nothing here does I/O: the module is shared by the sans-IO core and the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar

from tidegate.protocol.codec import RequestHeader
from tidegate.protocol.messages._base import Message

if TYPE_CHECKING:
    from tidegate.record.file_region import FileRegion

M = TypeVar("M", bound=Message)


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


_RELEASED = bytearray()  # the payload of a request whose buffer went back to the pool


class Request:
    """One request handed over by the shell (Kafka's ``RequestChannel.Request``).

    ``payload`` is the request's bytes in memory taken from the KIP-72 pool;
    :meth:`release_buffer` gives that memory back (once; later calls do nothing) and
drops the bytes (``payload`` is empty from then on; ``size`` stays its length).
    The processor releases it as soon as it no longer needs the bytes: after decoding,
    or for Produce after the append. ``start_ns`` is when the shell began processing it
    (the request quota measures handler time from there).

    ``header`` and ``body`` are set by the processor once decoded (they are unset
    before): the header, and the API's request message, read typed with
    :meth:`body_as`. ``abandoned`` is set by the shell when the connection goes away
    while the request is parked: its completion skips the work of building an answer
    nobody will read. ``authz_merge`` is the authorization step's merge of denied
    entries into the response, applied by the processor.

    A response may be made while the request is still in its handler: the callback a
    handler gives ReplicaManager or a coordinator runs at once when nothing has to
    wait (acks=1, a fetch with data, a JoinGroup that completes its rebalance).
    ``in_handler`` says the handler is running; a response made then is kept in
    ``answered`` and the processor returns it as the request's outcome, written in the
    same turn without a round trip through the :class:`RequestChannel`. Once the
    handler has returned :data:`PARKED` unanswered, the response goes to the channel.
    """

    __slots__ = (
        "_release", "abandoned", "answered", "authz_merge", "body", "context", "header", "in_handler",
        "payload", "size", "start_ns",
    )  # fmt: skip

    header: RequestHeader
    body: Message

    def __init__(
        self,
        context: RequestContext,
        payload: bytearray,
        release: Callable[[], None] | None = None,
        start_ns: int = 0,
    ) -> None:
        self.context = context
        self.payload = payload
        self.size = len(payload)  # the request's size (quotas count it after the release)
        self._release = release
        self.start_ns = start_ns
        self.abandoned = False
        #: set by the authorization step when it filtered the request: adds the denied
        #: entries to the handler's response, in place (tidegate.server.authorization)
        self.authz_merge: Callable[[Message], None] | None = None
        self.in_handler = False
        self.answered: Response | None = None

    def body_as(self, cls: type[M]) -> M:
        """The request message, as the class of its API (``TypeError`` if it is not)."""
        body = self.body
        if not isinstance(body, cls):
            raise TypeError(f"{self!r} has a {type(body).__name__}, not a {cls.__name__}")
        return body

    def release_buffer(self) -> None:
        release = self._release
        if release is not None:
            self._release = None
            release()
            self.payload = _RELEASED  # a parked request does not keep its bytes

    def __repr__(self) -> str:
        header = getattr(self, "header", None)  # unset until decoded
        return f"Request(connection={self.context.connection_id}, header={header!r})"


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


class Parked:
    """The type of :data:`PARKED` (one instance)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PARKED"


#: The request waits in a purgatory; its response comes through RequestChannel.send_response.
PARKED: Final = Parked()

Outcome = Response | Parked


class Connection(Protocol):
    """A connection as the :class:`RequestChannel` sees it (the shell's KafkaConnection)."""

    def complete(self, request: Request, response: Response) -> None:
        """Send the response to ``request`` if it is this connection's parked request."""

    def end_throttling(self) -> None:
        """The KIP-219 throttle is over: read the connection again."""


C = TypeVar("C", bound=Connection)


class RequestChannel(Generic[C]):
    """Kafka's RequestChannel: where the core sends the answers of parked requests and the
    ends of throttles, routed to the connection each belongs to.

    It is built first, before the core that sends through it and the SocketServer whose
    connections register in :attr:`connections` (as Kafka's SocketServer and KafkaApis
    share one RequestChannel): every part then gets it in its constructor. An answer for
    a connection that is gone is dropped.
    """

    def __init__(self) -> None:
        #: open connections by id (the SocketServer's)
        self.connections: dict[int, C] = {}

    def send_response(self, request: Request, response: Response) -> None:
        conn = self.connections.get(request.context.connection_id)
        if conn is not None:
            conn.complete(request, response)

    def end_throttling(self, connection_id: int) -> None:
        conn = self.connections.get(connection_id)
        if conn is not None:
            conn.end_throttling()


class RequestProcessor(Protocol):
    """What the shell needs from the broker (KafkaApis)."""

    def handle(self, request: Request) -> Outcome:
        """The response to send now, or PARKED (it comes through the RequestChannel)."""

    def try_complete_actions(self) -> None:
        """Work deferred until the responses just sent are written (fetch wake-ups)."""

    def record_exempt_request_time_ns(self, ns: int) -> None:
        """Loop time spent on a SASL frame before login: exempt from the request quota."""
