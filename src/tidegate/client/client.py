"""A synchronous Kafka protocol client: Kafka's ``NetworkClient`` in Python.

One :class:`KafkaClient` owns a connection per broker (plus the bootstrap
addresses until real broker ids are known), negotiates API versions on each
connection (ApiVersions, highest version both sides support, with the KIP-511
fallback when the broker does not know the version asked for), assigns
correlation ids, pipelines up to ``max.in.flight.requests.per.connection``
requests per connection, fails requests that exceed ``request.timeout.ms``
(closing their connection, as Kafka does), reconnects with exponential backoff,
and honours broker throttling (KIP-219).

Security (``security``: a :class:`~tidegate.client.security.ClientSecurity`, or a
mapping of Kafka's ``security.protocol``/``sasl.*``/``ssl.*`` keys): TLS wraps the
socket before ApiVersions; SASL runs after it, as Kafka's ``SaslClientAuthenticator``
does with SaslHandshake v1: SaslHandshake naming the mechanism, then
SaslAuthenticate (the highest version both sides have, up to v2) until the
mechanism is done. A failed login or TLS handshake is an
:class:`~tidegate.errors.AuthenticationError`: not retriable, recorded per
node (:meth:`KafkaClient.authentication_error`) and raised by the blocking helpers
instead of waiting for the timeout.

It is single-threaded: one thread calls :meth:`send` and :meth:`poll` (the
producer's sender thread; a script; ``tidegate top``). :meth:`wakeup` is the one
method other threads may call, to cut a :meth:`poll` short.

Two ways to use it:

- blocking: ``client.request(ApiKey, {...})`` returns the decoded response message
  (``client.metadata(["topic"])`` returns a :class:`~tidegate.client.Cluster`);
- event loop: ``client.ready(node)``, ``client.send(...)`` with a callback, and
  ``client.poll(timeout_ms)`` to make progress, which is what the producer does.
"""

from __future__ import annotations

import logging
import random
import selectors
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tidegate.clock import SYSTEM_CLOCK, Clock
from tidegate.errors import (
    AuthenticationError,
    BrokerResponseError,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    SaslAuthenticationError,
    UnsupportedVersionError,
)
from tidegate.protocol.apis import ApiKey
from tidegate.protocol.codec import message_versions

from .connection import BrokerConnection, ConnectionState, InFlightRequest
from .framing import (
    decode_api_versions_fallback,
    decode_response,
    encode_request,
)
from .metadata import Cluster
from .security import ClientSecurity, sasl_client

__all__ = ["KafkaClient", "client_version_range", "parse_bootstrap"]

log = logging.getLogger(__name__)

API_VERSIONS = 18
METADATA = 3
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
#: The newest ApiVersions this client sends first (v3 is the first flexible one).
_API_VERSIONS_MAX = 3
#: Response versions from which the broker throttles *after* answering (KIP-219), so
#: the client must hold off sending for throttle_time_ms itself.
_CLIENT_SIDE_THROTTLE_FROM = {
    0: 6, 1: 8, 3: 6, 2: 3, 8: 4, 9: 4, 10: 2, 14: 2, 13: 2, 12: 2, 16: 2, 15: 2,
    20: 2, 18: 2, 11: 3, 19: 3,
}  # fmt: skip


def client_version_range(api_key: int) -> tuple[int, int]:
    """The versions of ``api_key`` this client can speak (those its messages cover)."""
    try:
        return message_versions(api_key)
    except KeyError:
        raise UnsupportedVersionError(f"no schema for api_key {api_key}") from None


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    if isinstance(servers, str):
        servers = [s for s in servers.split(",")]
    out = []
    for s in servers:
        s = s.strip()
        if not s:
            continue
        if "://" in s:
            s = s.split("://", 1)[1]
        if s.startswith("["):  # [ipv6]:port
            host, _, port = s[1:].partition("]:")
        else:
            host, _, port = s.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"invalid bootstrap server {s!r}: expected host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError("bootstrap.servers is empty")
    return out


class KafkaClient:
    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str | None = "tidegate",
        request_timeout_ms: int = 30_000,
        max_in_flight_requests_per_connection: int = 5,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        socket_connection_setup_timeout_ms: int = 10_000,
        send_buffer_bytes: int = 131072,
        receive_buffer_bytes: int = 65536,
        security: ClientSecurity | Mapping[str, Any] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        if security is None:
            security = ClientSecurity()
        elif not isinstance(security, ClientSecurity):
            security = ClientSecurity.from_config(security)
        self.security = security
        self._ssl_context = security.ssl_context() if security.uses_tls else None
        #: the last authentication failure per node (cleared when a login succeeds)
        self._auth_errors: dict[int, AuthenticationError] = {}
        #: why the last attempt to set up a connection to each node failed (cleared once
        #: one is ready): what a blocking call that times out waiting for it names
        self._setup_errors: dict[int, BaseException] = {}
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.setup_timeout_ms = socket_connection_setup_timeout_ms
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        # bootstrap addresses are pseudo-nodes -1, -2, ... until metadata names brokers
        self._addresses: dict[int, tuple[str, int]] = {
            -(i + 1): hp for i, hp in enumerate(self._bootstrap)
        }
        self._conns: dict[int, BrokerConnection] = {}
        self._backoff: dict[int, tuple[int, int]] = {}  # node -> (until ns, failures)
        self._selector = selectors.DefaultSelector()
        self._registered: dict[int, int] = {}  # node -> registered event mask
        self._wake_r, self._wake_w = socket.socketpair()
        self._wakeup_pending = False
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._next_cid = 0
        self._completed: list[InFlightRequest] = []
        self.cluster = Cluster.empty()
        self._closed = False
        self._rng = random.Random()

    # -- addresses and connections -------------------------------------------------------

    def update_cluster(self, cluster: Cluster) -> None:
        """Adopt a new metadata snapshot: its brokers become connectable nodes."""
        self.cluster = cluster
        for node_id, b in cluster.brokers.items():
            old = self._addresses.get(node_id)
            self._addresses[node_id] = (b.host, b.port)
            if old is not None and old != (b.host, b.port) and node_id in self._conns:
                self._disconnect(node_id, ConnectionError_("broker address changed"))

    def add_node(self, node_id: int, host: str, port: int) -> None:
        """Learn a broker's address outside metadata (a FindCoordinator answer); an
        address metadata already gave is kept."""
        if node_id not in self._addresses:
            self._addresses[node_id] = (host, port)

    def nodes(self) -> list[int]:
        """Brokers from metadata if any, else the bootstrap pseudo-nodes."""
        brokers = [n for n in self._addresses if n >= 0 and n in self.cluster.brokers]
        return brokers or [n for n in self._addresses if n < 0]

    def connection(self, node_id: int) -> BrokerConnection | None:
        return self._conns.get(node_id)

    def is_ready(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return (
            conn is not None
            and conn.state is ConnectionState.READY
            and conn.in_flight_count < self.max_in_flight
            and conn.throttle_until_ns <= self.clock.nanoseconds()
        )

    def ready(self, node_id: int, now_ns: int | None = None) -> bool:
        """True if a request can be sent to ``node_id`` now; otherwise starts connecting
        (unless backing off) and returns False."""
        if self.is_ready(node_id):
            return True
        conn = self._conns.get(node_id)
        if conn is None or conn.state is ConnectionState.DISCONNECTED:
            self._maybe_connect(node_id, now_ns if now_ns is not None else self.clock.nanoseconds())
        return False

    def connection_delay_ms(self, node_id: int, now_ns: int) -> int:
        """How long before ``node_id`` might become ready: the remaining backoff or
        throttle time; 0 if nothing is known to be in the way."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.state is not ConnectionState.DISCONNECTED:
            if conn.throttle_until_ns > now_ns:
                return (conn.throttle_until_ns - now_ns) // 1_000_000 + 1
            return 0 if conn.state is ConnectionState.READY else self.request_timeout_ms
        until, _ = self._backoff.get(node_id, (0, 0))
        return max(0, (until - now_ns) // 1_000_000)

    def in_flight_count(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return conn.in_flight_count if conn is not None else 0

    def has_in_flight(self) -> bool:
        return any(c.in_flight_count for c in self._conns.values())

    def _maybe_connect(self, node_id: int, now_ns: int) -> None:
        if self._closed:
            return
        until, _ = self._backoff.get(node_id, (0, 0))
        if until > now_ns:
            return
        addr = self._addresses.get(node_id)
        if addr is None:
            return
        conn = self._conns.get(node_id)
        if conn is None:
            conn = BrokerConnection(
                node_id,
                addr[0],
                addr[1],
                send_buffer_bytes=self._send_buffer_bytes,
                receive_buffer_bytes=self._receive_buffer_bytes,
                ssl_context=self._ssl_context,
            )
            self._conns[node_id] = conn
        conn.host, conn.port = addr
        try:
            conn.connect(now_ns)
        except Exception as exc:  # noqa: BLE001 - an address a broker made up (not IDNA, say) too
            log.debug("connect to node %s (%s:%s) failed: %r", node_id, addr[0], addr[1], exc)
            self._setup_errors[node_id] = exc
            self._note_failure(node_id, now_ns)
            return
        # a new attempt: an earlier login failure no longer decides (credentials may
        # have been fixed on the broker meanwhile); a new failure is recorded again
        self._auth_errors.pop(node_id, None)
        self._register(conn)

    def _note_failure(self, node_id: int, now_ns: int) -> None:
        _, failures = self._backoff.get(node_id, (0, 0))
        backoff = min(self.reconnect_backoff_max_ms, self.reconnect_backoff_ms * (2**failures))
        backoff *= self._rng.uniform(0.8, 1.2)
        self._backoff[node_id] = (now_ns + int(backoff * 1_000_000), min(failures + 1, 20))

    def _register(self, conn: BrokerConnection) -> None:
        assert conn.sock is not None
        events = selectors.EVENT_READ
        if (
            conn.state is ConnectionState.CONNECTING
            or conn.wants_write
            or (conn.state is ConnectionState.TLS_HANDSHAKE and conn.handshake_wants_write)
        ):
            events |= selectors.EVENT_WRITE
        old = self._registered.get(conn.node_id)
        if old is None:
            self._selector.register(conn.sock, events, conn)
        elif old != events:
            self._selector.modify(conn.sock, events, conn)
        self._registered[conn.node_id] = events

    def _unregister(self, conn: BrokerConnection) -> None:
        if conn.node_id in self._registered:
            sock = conn.sock
            if sock is not None:  # a closed socket has left the selector with its fd
                try:
                    self._selector.unregister(sock)
                except (KeyError, ValueError):
                    pass
            del self._registered[conn.node_id]

    def _disconnect(self, node_id: int, error: KafkaError) -> None:
        conn = self._conns.get(node_id)
        if conn is None:
            return
        if conn.sock is not None:
            self._unregister(conn)
        was_ready = conn.state is ConnectionState.READY
        failed = conn.close(error)
        now = self.clock.nanoseconds()
        if not was_ready or failed:
            self._note_failure(node_id, now)
        log.debug("disconnected from node %s: %s (%d requests failed)", node_id, error, len(failed))
        for req in failed:
            if req.done:
                continue
            req.error = error
            self._complete(req)

    def authentication_error(self, node_id: int | None = None) -> AuthenticationError | None:
        """The authentication failure of ``node_id`` (of any node if None), if its last
        login failed."""
        if node_id is not None:
            return self._auth_errors.get(node_id)
        return next(iter(self._auth_errors.values()), None)

    def disconnect(self, node_id: int) -> None:
        self._disconnect(node_id, ConnectionError_("disconnected by the client"))

    # -- versions --------------------------------------------------------------------------

    def api_version(
        self,
        node_id: int,
        api_key: int,
        max_version: int | None = None,
        min_version: int | None = None,
    ) -> int:
        """The highest version of ``api_key`` both this client (its messages, capped at
        ``max_version``) and the broker behind ``node_id`` support."""
        conn = self._conns.get(node_id)
        if conn is None or not conn.api_versions:
            raise KafkaError(f"no API versions known for node {node_id} (not connected)")
        broker = conn.api_versions.get(api_key)
        if broker is None:
            raise UnsupportedVersionError(f"node {node_id} does not support {_api_name(api_key)}")
        lo, hi = client_version_range(api_key)
        if max_version is not None:
            hi = min(hi, max_version)
        if min_version is not None:
            lo = max(lo, min_version)
        v = min(hi, broker[1])
        if v < max(lo, broker[0]):
            raise UnsupportedVersionError(
                f"{_api_name(api_key)}: this client sends v{lo}-v{hi}, node {node_id} has "
                f"v{broker[0]}-v{broker[1]}"
            )
        return v

    def supports(self, node_id: int, api_key: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and api_key in conn.api_versions

    # -- sending ------------------------------------------------------------------------------

    def next_correlation_id(self) -> int:
        self._next_cid = (self._next_cid + 1) & 0x7FFFFFFF
        return self._next_cid

    def send(
        self,
        node_id: int,
        api_key: int,
        body: Any,
        *,
        version: int | None = None,
        max_version: int | None = None,
        expect_response: bool = True,
        callback: Callable[[InFlightRequest], None] | None = None,
    ) -> InFlightRequest:
        """Queue a request (a message or a dict body) to a ready node."""
        if version is None:
            version = self.api_version(node_id, api_key, max_version)
        cid = self.next_correlation_id()
        frame = encode_request(api_key, version, cid, self.client_id, body)
        return self.send_buffers(
            node_id,
            api_key,
            version,
            cid,
            [frame],
            expect_response=expect_response,
            callback=callback,
        )

    def send_buffers(
        self,
        node_id: int,
        api_key: int,
        version: int,
        correlation_id: int,
        buffers: list[Any],
        *,
        expect_response: bool = True,
        callback: Callable[[InFlightRequest], None] | None = None,
    ) -> InFlightRequest:
        """Queue an already framed request given as a list of buffers (written with
        scatter-gather as they are; they must stay unchanged until the request completes)."""
        conn = self._conns.get(node_id)
        if conn is None or conn.state is not ConnectionState.READY:
            raise ConnectionError_(f"node {node_id} is not ready")
        now = self.clock.nanoseconds()
        req = InFlightRequest(
            node_id, api_key, version, correlation_id, buffers, expect_response, callback, now
        )
        conn.enqueue(req)
        self._write_now(conn, now)
        return req

    def _write_now(self, conn: BrokerConnection, now: int) -> None:
        try:
            for req in conn.on_writable(now):
                self._complete(req)
        except OSError as exc:
            self._disconnect(conn.node_id, ConnectionError_(f"write failed: {exc}"))
            return
        if conn.sock is not None:
            self._register(conn)

    def _complete(self, req: InFlightRequest) -> None:
        req.done = True
        self._completed.append(req)

    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return (any thread). Like Java's
        ``Selector.wakeup``, repeated calls before the poll notices cost nothing."""
        if self._wakeup_pending:
            return
        self._wakeup_pending = True
        try:
            self._wake_w.send(b"\x00")
        except (BlockingIOError, OSError):
            pass

    # -- polling ---------------------------------------------------------------------------------

    def poll(self, timeout_ms: float) -> list[InFlightRequest]:
        """Do network I/O for up to ``timeout_ms`` (less if anything completes); run the
        callbacks of completed requests and return them."""
        if self._completed:
            timeout_ms = 0
        timeout = max(0.0, timeout_ms / 1000.0)
        try:
            events = self._selector.select(timeout)
        except InterruptedError:
            events = []
        now = self.clock.nanoseconds()
        for key, mask in events:
            conn = key.data
            if conn is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                # cleared after draining: a wakeup racing this leaves its byte behind,
                # which only makes the next select return at once
                self._wakeup_pending = False
                continue
            self._handle_io(conn, mask, now)
        self._check_timeouts(now)
        done, self._completed = self._completed, []
        for req in done:
            if req.callback is not None:
                try:
                    req.callback(req)
                except Exception:  # a callback bug must not kill the I/O thread
                    log.exception("request callback failed for %r", req)
        return done

    def _handle_io(self, conn: BrokerConnection, mask: int, now: int) -> None:
        node = conn.node_id
        try:
            if conn.state is ConnectionState.CONNECTING:
                if not mask & selectors.EVENT_WRITE:
                    return
                if conn.ssl_context is not None:
                    self._unregister(conn)  # the socket is wrapped, then registered anew
                conn.finish_connect()
                if conn.state is ConnectionState.TLS_HANDSHAKE:
                    if conn.do_handshake():
                        self._send_api_versions(conn, _API_VERSIONS_MAX)
                else:
                    self._send_api_versions(conn, _API_VERSIONS_MAX)
            elif conn.state is ConnectionState.TLS_HANDSHAKE:
                if conn.do_handshake():
                    self._send_api_versions(conn, _API_VERSIONS_MAX)
            elif mask & selectors.EVENT_WRITE and conn.wants_write:
                for req in conn.on_writable(now):
                    self._complete(req)
            if (
                mask & selectors.EVENT_READ
                and conn.sock is not None
                and conn.state is not ConnectionState.TLS_HANDSHAKE
            ):
                frames = conn.on_readable(now)
                if frames is None:
                    self._disconnect(
                        node, ConnectionError_(f"connection to node {node} closed by the broker")
                    )
                    return
                for frame in frames:
                    self._handle_frame(conn, frame, now)
                    if conn.sock is None:
                        return
        except Exception as exc:  # noqa: BLE001 - nothing a broker sends may kill this thread
            err = self._connection_error(conn, exc)
            if isinstance(err, AuthenticationError):
                log.error("authentication with node %s failed: %s", node, err)
                self._auth_errors[node] = err
            if conn.state is not ConnectionState.READY:
                self._setup_errors[node] = err
            self._disconnect(node, err)
            return
        if conn.sock is not None:
            self._register(conn)

    def _connection_error(self, conn: BrokerConnection, exc: Exception) -> KafkaError:
        """The Kafka error that fails ``conn`` after ``exc``: a KafkaError as it is; a
        socket error as a (retriable) network error; anything else is a response this
        client cannot make sense of, which fails the connection as Kafka's NetworkClient
        fails a connection whose response does not parse (during SASL: the login)."""
        node = conn.node_id
        if isinstance(exc, KafkaError):
            return exc
        if isinstance(exc, OSError):
            return ConnectionError_(f"node {node}: {exc}")
        log.warning("node %s (%s:%s) sent what this client cannot read: %r",
                    node, conn.host, conn.port, exc)  # fmt: skip
        if conn.state is ConnectionState.AUTHENTICATING:
            return SaslAuthenticationError(
                f"{self.security.mechanism} login with node {node} failed: an unreadable "
                f"message from the broker ({exc!r})"
            )
        return ConnectionError_(f"node {node}: unreadable response ({exc!r})")

    def _handle_frame(self, conn: BrokerConnection, frame: bytes, now: int) -> None:
        """Match a response to the oldest request in flight and complete it. The request
        leaves ``in_flight`` only once its response is handled: when anything about the
        response is wrong (another correlation id, a body that does not decode) the
        exception fails the connection, and with it this request too."""
        if not conn.in_flight:
            raise ConnectionError_(f"node {conn.node_id} sent a response nobody asked for")
        req = conn.in_flight[0]
        cid = int.from_bytes(frame[:4], "big", signed=True)
        if cid != req.correlation_id:
            raise ConnectionError_(
                f"correlation id {cid} from node {conn.node_id}, expected {req.correlation_id}"
            )
        if req.internal:
            if req.api_key == API_VERSIONS:
                self._handle_api_versions(conn, req, frame)
            else:
                self._handle_sasl(conn, req, frame)
            conn.in_flight.remove(req)
            return
        body = _decode_body(req, frame)
        conn.in_flight.popleft()
        req.response = body
        throttle = getattr(body, "throttle_time", None)
        if throttle is not None:
            t = int(throttle)
            if t > 0 and req.api_version >= _CLIENT_SIDE_THROTTLE_FROM.get(req.api_key, 99):
                conn.throttle_until_ns = max(conn.throttle_until_ns, now + t * 1_000_000)
        self._complete(req)

    # -- ApiVersions handshake ------------------------------------------------------------------

    def _send_api_versions(self, conn: BrokerConnection, version: int) -> None:
        conn.state = ConnectionState.CHECKING_API_VERSIONS
        cid = self.next_correlation_id()
        body: dict[str, Any] = {}
        if version >= 3:
            body = {"client_software_name": "tidegate", "client_software_version": "0.1.0"}
        frame = encode_request(API_VERSIONS, version, cid, self.client_id, body)
        req = InFlightRequest(
            conn.node_id, API_VERSIONS, version, cid, [frame], True, None, self.clock.nanoseconds()
        )
        req.internal = True
        conn.enqueue(req)
        self._write_now(conn, self.clock.nanoseconds())

    def _handle_api_versions(
        self, conn: BrokerConnection, req: InFlightRequest, frame: bytes
    ) -> None:
        """Kafka's ``NetworkClient.handleApiVersionsResponse``. A broker that does not
        know the version asked for answers UNSUPPORTED_VERSION with a v0 body listing
        its own ApiVersions range (KIP-511): ask again at the highest version both
        sides have. A refusal that cannot be read even as v0 (librdkafka's mock
        cluster writes it in the flexible format of the version it refused) or that
        names no range is answered as Java's client does: ask again at v0."""
        version = req.api_version
        body = _parse_api_versions(version, frame)
        code = int(body.error_code) if body is not None else None
        if code == UNSUPPORTED_VERSION or (body is None and version > 0):
            if version == 0:
                raise UnsupportedVersionError(f"node {conn.node_id} refused ApiVersions v0")
            theirs = _api_version_ranges(body) if body is not None else {}
            their_max = theirs.get(API_VERSIONS, (0, 0))[1]
            if their_max >= version:
                raise UnsupportedVersionError(
                    f"node {conn.node_id} refused ApiVersions v{version} but lists v0-v{their_max}"
                )
            log.debug("node %s refused ApiVersions v%d: asking at v%d", conn.node_id, version,
                      min(their_max, _API_VERSIONS_MAX))  # fmt: skip
            self._send_api_versions(conn, min(their_max, _API_VERSIONS_MAX))
            return
        if body is None:
            raise ConnectionError_(f"node {conn.node_id}: unreadable ApiVersions v0 response")
        if code:
            raise BrokerResponseError(code, "ApiVersions")
        conn.api_versions = _api_version_ranges(body)
        if self.security.uses_sasl:
            self._start_sasl(conn)
            return
        self._set_ready(conn)

    def _set_ready(self, conn: BrokerConnection) -> None:
        conn.state = ConnectionState.READY
        self._backoff.pop(conn.node_id, None)
        self._auth_errors.pop(conn.node_id, None)
        self._setup_errors.pop(conn.node_id, None)
        log.debug("node %s ready: %d APIs", conn.node_id, len(conn.api_versions))

    # -- SASL (Kafka's SaslClientAuthenticator, SaslHandshake v1) ---------------------------------

    def _send_internal(self, conn: BrokerConnection, api_key: int, version: int, body: Any) -> None:
        cid = self.next_correlation_id()
        frame = encode_request(api_key, version, cid, self.client_id, body)
        now = self.clock.nanoseconds()
        req = InFlightRequest(conn.node_id, api_key, version, cid, [frame], True, None, now)
        req.internal = True
        conn.enqueue(req)
        self._write_now(conn, now)

    def _start_sasl(self, conn: BrokerConnection) -> None:
        conn.state = ConnectionState.AUTHENTICATING
        rng = conn.api_versions.get(SASL_HANDSHAKE)
        if rng is None or rng[1] < 1 or SASL_AUTHENTICATE not in conn.api_versions:
            raise SaslAuthenticationError(
                f"node {conn.node_id} does not support SaslHandshake v1 and SaslAuthenticate"
            )
        conn.sasl = sasl_client(self.security)
        self._send_internal(conn, SASL_HANDSHAKE, 1, {"mechanism": self.security.mechanism})

    def _handle_sasl(self, conn: BrokerConnection, req: InFlightRequest, frame: bytes) -> None:
        body = _decode_body(req, frame)
        code = int(body.error_code)
        mech = self.security.mechanism
        sasl = conn.sasl
        if req.api_key == SASL_HANDSHAKE:
            if code == 33:  # UNSUPPORTED_SASL_MECHANISM
                raise SaslAuthenticationError(
                    f"Client SASL mechanism '{mech}' not enabled in the server, enabled "
                    f"mechanisms are {list(body.mechanisms)}"
                )
            if code:
                hint = f" (is {conn.host}:{conn.port} a SASL listener?)" if code == 34 else ""
                raise SaslAuthenticationError(
                    f"SaslHandshake failed: {BrokerResponseError(code).name} ({code}){hint}"
                )
            token = sasl.first()
        else:
            if code:
                message = getattr(body, "error_message", None)
                raise SaslAuthenticationError(
                    message or f"SaslAuthenticate failed: {BrokerResponseError(code).name}"
                )
            token = sasl.step(bytes(body.auth_bytes))
            if token is None:
                if not sasl.complete:
                    raise SaslAuthenticationError(f"{mech} exchange ended early")
                conn.sasl = None
                log.debug("node %s: authenticated as %s (%s)", conn.node_id,
                          self.security.username, mech)  # fmt: skip
                self._set_ready(conn)
                return
        version = self.api_version(conn.node_id, SASL_AUTHENTICATE, max_version=2)
        self._send_internal(conn, SASL_AUTHENTICATE, version, {"auth_bytes": token})

    # -- timeouts ----------------------------------------------------------------------------------

    def _check_timeouts(self, now: int) -> None:
        req_timeout = self.request_timeout_ms * 1_000_000
        setup_timeout = self.setup_timeout_ms * 1_000_000
        for node, conn in list(self._conns.items()):
            st = conn.state
            if st is ConnectionState.DISCONNECTED:
                continue
            if st is not ConnectionState.READY:
                if now - conn.connect_started_ns > setup_timeout:
                    err = KafkaTimeoutError(
                        f"connection to node {node} not ready after {self.setup_timeout_ms} ms"
                    )
                    self._setup_errors[node] = err
                    self._disconnect(node, err)
                continue
            oldest = conn.in_flight[0].sent_ns if conn.in_flight else None
            if conn._outbox:
                c = conn._outbox[0].created_ns
                oldest = c if oldest is None else min(oldest, c)
            if oldest is not None and now - oldest > req_timeout:
                self._disconnect(
                    node,
                    KafkaTimeoutError(
                        f"request to node {node} timed out after {self.request_timeout_ms} ms"
                    ),
                )

    def next_timeout_ms(self, now: int) -> int:
        """Milliseconds until the next request or connection-setup deadline."""
        best = None
        for conn in self._conns.values():
            if conn.state is ConnectionState.DISCONNECTED:
                continue
            if conn.state is not ConnectionState.READY:
                d = conn.connect_started_ns + self.setup_timeout_ms * 1_000_000
            elif conn.in_flight:
                d = conn.in_flight[0].sent_ns + self.request_timeout_ms * 1_000_000
            else:
                continue
            best = d if best is None else min(best, d)
        if best is None:
            return 1 << 30
        return max(0, (best - now) // 1_000_000 + 1)

    # -- choosing a node ---------------------------------------------------------------------------

    def least_loaded_node(self, now_ns: int | None = None) -> int | None:
        """A ready node with the fewest in-flight requests; else one that is connecting;
        else a disconnected one that may be connected now (the connection is started);
        else None (every connection is busy with ``max.in.flight`` requests, or backing
        off), as Kafka's ``leastLoadedNode``."""
        now = now_ns if now_ns is not None else self.clock.nanoseconds()
        nodes = self.nodes()
        self._rng.shuffle(nodes)
        best, best_load = None, None
        connecting = None
        disconnected = []
        for n in nodes:
            conn = self._conns.get(n)
            if conn is None or conn.state is ConnectionState.DISCONNECTED:
                disconnected.append(n)
            elif conn.state is ConnectionState.READY:
                load = conn.in_flight_count
                if load < self.max_in_flight and (best_load is None or load < best_load):
                    best, best_load = n, load
            else:
                connecting = n
        if best is not None:
            return best
        if connecting is not None:
            return connecting
        for n in disconnected:
            until, _ = self._backoff.get(n, (0, 0))
            if until <= now:
                self._maybe_connect(n, now)
                return n
        return None

    # -- blocking helpers -----------------------------------------------------------------------------

    def await_ready(self, node_id: int | None = None, timeout_ms: float | None = None) -> int:
        """Block until ``node_id`` (or any node) is ready; returns the node id."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self.clock.nanoseconds() + int(timeout_ms * 1_000_000)
        while True:
            now = self.clock.nanoseconds()
            node = node_id if node_id is not None else self.least_loaded_node(now)
            if node is not None and self.ready(node, now):
                return node
            auth = self.authentication_error(node_id)
            if auth is not None:
                raise auth
            left = (deadline - now) / 1_000_000
            if left <= 0:
                last = self._setup_errors.get(node_id) if node_id is not None else (
                    next(reversed(self._setup_errors.values()), None))  # fmt: skip
                why = f"; last error: {last}" if last is not None else ""
                if node_id is None:
                    raise NoBrokersAvailableError(
                        f"no broker ready within {timeout_ms:.0f} ms "
                        f"(bootstrap {', '.join(f'{h}:{p}' for h, p in self._bootstrap)}{why})"
                    )
                raise KafkaTimeoutError(f"node {node_id} not ready within {timeout_ms:.0f} ms{why}")
            wait = min(left, 50.0)
            if node is not None:
                d = self.connection_delay_ms(node, now)
                if d:
                    wait = min(left, max(1.0, d))
            self.poll(wait)

    def request(
        self,
        api_key: int,
        body: Any,
        *,
        node_id: int | None = None,
        version: int | None = None,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> Any:
        """Send one request and block for its decoded response."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self.clock.nanoseconds() + int(timeout_ms * 1_000_000)
        node = self.await_ready(node_id, timeout_ms)
        req = self.send(node, api_key, body, version=version, max_version=max_version)
        while not req.done:
            left = (deadline - self.clock.nanoseconds()) / 1_000_000
            if left <= 0:
                raise KafkaTimeoutError(f"no response to api_key {api_key} in {timeout_ms:.0f} ms")
            self.poll(min(left, 100.0))
        if req.error is not None:
            raise req.error
        return req.response

    def metadata(
        self,
        topics: Iterable[str] | None = None,
        *,
        allow_auto_topic_creation: bool = False,
        node_id: int | None = None,
        timeout_ms: float | None = None,
    ) -> Cluster:
        """Fetch metadata (all topics if ``topics`` is None) and adopt it."""
        node = self.await_ready(node_id, timeout_ms)
        version = self.api_version(node, METADATA, max_version=12)
        body = metadata_request_body(version, topics, allow_auto_topic_creation)
        resp = self.request(METADATA, body, node_id=node, version=version, timeout_ms=timeout_ms)
        cluster = Cluster.from_response(resp)
        if topics is not None:
            cluster = self.cluster.merged_with(cluster) if self.cluster.brokers else cluster
        self.update_cluster(cluster)
        return cluster

    def bootstrap(self, timeout_ms: float | None = None) -> Cluster:
        """Connect to a bootstrap server and learn the brokers."""
        return self.metadata([], timeout_ms=timeout_ms)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for node in list(self._conns):
            self._disconnect(node, ConnectionError_("client closed"))
        self._completed.clear()
        try:
            self._selector.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()

    def __enter__(self) -> KafkaClient:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metadata_request_body(
    version: int, topics: Iterable[str] | None, allow_auto_topic_creation: bool
) -> dict[str, Any]:
    """A Metadata request body for ``version``; ``topics=None`` asks for all topics
    (a null array from v1, an empty one in v0)."""
    topic_list: list[dict[str, str]] | None
    if topics is None:
        topic_list = None if version >= 1 else []
    else:
        topic_list = [{"name": t} for t in topics]
    body: dict[str, Any] = {"topics": topic_list}
    if version >= 4:
        body["allow_auto_topic_creation"] = allow_auto_topic_creation
    return body


def _decode_body(req: InFlightRequest, frame: bytes) -> Any:
    """A response's body; a frame that does not decode breaks the connection."""
    try:
        return decode_response(req.api_key, req.api_version, frame)[1]
    except Exception as exc:
        raise ConnectionError_(
            f"cannot decode api_key={req.api_key} v{req.api_version} response: {exc!r}"
        ) from exc


def _parse_api_versions(version: int, frame: bytes) -> Any:
    """An ApiVersions response body, or None when it does not parse. An error code of
    UNSUPPORTED_VERSION means the body is v0 (KIP-511); otherwise it is read at the
    version asked for and, failing that, at v0 (Java's ``ApiVersionsResponse.parse``)."""
    refused = len(frame) >= 6 and int.from_bytes(frame[4:6], "big", signed=True) == UNSUPPORTED_VERSION
    readers = [lambda: decode_api_versions_fallback(frame)]
    if not refused and version > 0:
        readers.insert(0, lambda: decode_response(API_VERSIONS, version, frame)[1])
    for read in readers:
        try:
            return read()
        except Exception:  # noqa: BLE001, S112 - a frame that does not read: try the next way
            continue
    return None


def _api_version_ranges(body: Any) -> dict[int, tuple[int, int]]:
    """{api key: (min version, max version)} of an ApiVersions response."""
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}


def _api_name(api_key: int) -> str:
    """Kafka's name of an API, as its UnsupportedVersionException says it (with the key)."""
    try:
        return f"{ApiKey(api_key).name} (api key {api_key})"
    except ValueError:
        return f"api key {api_key}"
