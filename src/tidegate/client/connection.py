"""One non-blocking connection to one broker (Kafka's ``KafkaChannel`` +
``InFlightRequests`` for a single node).

A connection goes DISCONNECTED -> CONNECTING [-> TLS_HANDSHAKE] -> CHECKING_API_VERSIONS
[-> AUTHENTICATING] -> READY. With TLS (``SSL``/``SASL_SSL``) the socket is wrapped
in an ``ssl.SSLSocket`` once TCP is connected and the handshake is driven by
:meth:`do_handshake` on readiness events (``SSLWantReadError``/``SSLWantWriteError``
say which event to wait for). An SSLSocket has no ``sendmsg``: writes then go out in
chunks of up to 64 KiB (small buffers joined), and a chunk that hit
``SSLWantWriteError`` is retried unchanged, as OpenSSL requires; reads drain the TLS
buffer until ``SSLWantReadError`` (decrypted bytes OpenSSL holds are invisible to
``select``). SASL (AUTHENTICATING) is driven by the client, not here.
Requests are queued as lists of buffers and written with ``socket.sendmsg``
(scatter-gather: a produce request's record batches go to the kernel straight from
the buffers or chunks that hold them, never joined into one copy first). Up to
``max_in_flight`` requests may await their responses; Kafka answers the requests
of one connection in order, so responses are matched to the oldest in-flight
request and its correlation id is checked.

The connection does no waiting of its own: :class:`tidegate.client.KafkaClient`
selects on its socket and calls :meth:`on_writable` / :meth:`on_readable`.
"""

from __future__ import annotations

import enum
import errno
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable
from typing import Any, final

from tidegate.errors import ConnectionError_, KafkaError, SslAuthenticationError

__all__ = ["BrokerConnection", "ConnectionState", "InFlightRequest"]

_I32 = struct.Struct(">i")
#: Linux's IOV_MAX: at most this many buffers per sendmsg call.
IOV_MAX = 1024
#: A response larger than this closes the connection (a corrupt size prefix).
MAX_RESPONSE_SIZE = 1 << 30
#: TLS writes: small buffers are joined into chunks of up to this many bytes; a large
#: buffer is written in slices of at most _TLS_MAX_SLICE.
_TLS_CHUNK = 65536
_TLS_MAX_SLICE = 1 << 18


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    TLS_HANDSHAKE = "tls_handshake"
    CHECKING_API_VERSIONS = "checking_api_versions"
    AUTHENTICATING = "authenticating"
    READY = "ready"


class InFlightRequest:
    """A request from the moment it is queued until its response (or failure)."""

    __slots__ = (
        "api_key",
        "api_version",
        "buffers",
        "callback",
        "correlation_id",
        "created_ns",
        "done",
        "error",
        "expect_response",
        "internal",
        "node_id",
        "response",
        "sent_ns",
        "size",
    )

    def __init__(
        self,
        node_id: int,
        api_key: int,
        api_version: int,
        correlation_id: int,
        buffers: list[Any],
        expect_response: bool,
        callback: Callable[[InFlightRequest], None] | None,
        created_ns: int,
    ) -> None:
        self.node_id = node_id
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.buffers = buffers
        self.size = sum(len(b) for b in buffers)
        self.expect_response = expect_response
        self.callback = callback
        self.created_ns = created_ns
        self.sent_ns = 0
        self.response: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.internal = False

    def __repr__(self) -> str:
        return (
            f"InFlightRequest(node={self.node_id}, api_key={self.api_key} v{self.api_version}, "
            f"cid={self.correlation_id}, done={self.done})"
        )


class BrokerConnection:
    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        send_buffer_bytes: int = 131072,
        receive_buffer_bytes: int = 65536,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.node_id = node_id
        self.ssl_context = ssl_context
        #: during the TLS handshake: whether OpenSSL waits to write (else to read)
        self.handshake_wants_write = False
        self._tls_chunk: Any = None  # a TLS write chunk to retry unchanged
        #: the SASL exchange while AUTHENTICATING (driven by the client)
        self.sasl: Any = None
        self.host = host
        self.port = port
        self.state = ConnectionState.DISCONNECTED
        self.sock: socket.socket | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        # requests whose bytes are not all written yet (head is being written)
        self._outbox: deque[InFlightRequest] = deque()
        # request bytes to write, each request's followed by its end marker
        self._out_bufs: deque[memoryview | _EndOfRequest] = deque()
        # requests written that await a response, oldest first
        self.in_flight: deque[InFlightRequest] = deque()
        # response reader
        self._scratch = bytearray(65536)
        self._hdr = bytearray(4)
        self._hlen = 0
        self._body: bytearray | None = None
        self._bpos = 0
        self.connect_started_ns = 0
        self.throttle_until_ns = 0

    # -- connecting ----------------------------------------------------------------

    def connect(self, now_ns: int) -> None:
        """Start a non-blocking connect."""
        infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        family, type_, proto, _, addr = infos[0]
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
        if self._receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer_bytes)
        rc = sock.connect_ex(addr)
        if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            sock.close()
            raise ConnectionError_(
                f"connect to {self.host}:{self.port}: {errno.errorcode.get(rc, rc)}"
            )
        self.sock = sock
        self.state = ConnectionState.CONNECTING
        self.connect_started_ns = now_ns

    def finish_connect(self) -> None:
        """Called when the socket becomes writable while CONNECTING."""
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise ConnectionError_(
                f"connect to {self.host}:{self.port}: {errno.errorcode.get(err, err)}"
            )
        if self.ssl_context is not None:
            # the caller unregisters the plain socket first: wrapping detaches it
            self.sock = self.ssl_context.wrap_socket(
                self.sock, server_hostname=self.host, do_handshake_on_connect=False
            )
            self.state = ConnectionState.TLS_HANDSHAKE
            self.handshake_wants_write = True
            return
        self.state = ConnectionState.CHECKING_API_VERSIONS

    def do_handshake(self) -> bool:
        """Advance the TLS handshake; True once it is complete."""
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.handshake_wants_write = False
            return False
        except ssl.SSLWantWriteError:
            self.handshake_wants_write = True
            return False
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
            raise ConnectionError_(
                f"TLS handshake with {self.host}:{self.port}: connection closed ({exc})"
            ) from None
        except ssl.SSLError as exc:
            raise SslAuthenticationError(
                f"TLS handshake with {self.host}:{self.port} failed: {exc}"
            ) from None
        self.handshake_wants_write = False
        self.state = ConnectionState.CHECKING_API_VERSIONS
        return True

    # -- writing -----------------------------------------------------------------------

    def enqueue(self, request: InFlightRequest) -> None:
        self._outbox.append(request)
        bufs = self._out_bufs
        for b in request.buffers:
            if len(b):
                bufs.append(b if isinstance(b, memoryview) else memoryview(b))
        # a marker so on_writable knows where this request's bytes end
        bufs.append(_EndOfRequest(request))

    @property
    def wants_write(self) -> bool:
        return bool(self._out_bufs)

    def on_writable(self, now_ns: int) -> list[InFlightRequest]:
        """Write as much as the socket takes; returns requests fully written that
        expect no response (acks=0 produce), which are complete once written."""
        assert self.sock is not None
        if self.ssl_context is not None:
            return self._on_writable_tls(now_ns)
        bufs = self._out_bufs
        finished: list[InFlightRequest] = []
        while True:
            self._settle_written(now_ns, finished)
            if not bufs:
                break
            iov = []
            for b in bufs:
                if type(b) is _EndOfRequest:
                    continue
                iov.append(b)
                if len(iov) >= IOV_MAX:
                    break
            try:
                sent = self.sock.sendmsg(iov)
            except (BlockingIOError, InterruptedError):
                break
            full = sent == sum(len(b) for b in iov)
            self._advance(sent, now_ns, finished)
            if not full:
                break  # the socket buffer is full; wait for writability
        return finished

    def _advance(self, sent: int, now_ns: int, finished: list[InFlightRequest]) -> None:
        """Drop ``sent`` written bytes from the head of the write queue (slicing a
        memoryview copies nothing)."""
        bufs = self._out_bufs
        while sent > 0:
            head = bufs[0]
            if type(head) is _EndOfRequest:
                self._settle_written(now_ns, finished)
                continue
            n = len(head)
            if sent >= n:
                bufs.popleft()
                sent -= n
            else:
                bufs[0] = head[sent:]
                sent = 0

    def _next_tls_chunk(self) -> Any:
        """The next bytes to write from the queue head: a slice of a large buffer, or
        small buffers joined (fewer TLS records and syscalls)."""
        parts: list[memoryview] = []
        size = 0
        for b in self._out_bufs:
            if type(b) is _EndOfRequest:
                continue
            if not parts and len(b) >= _TLS_CHUNK // 4:
                return b[:_TLS_MAX_SLICE]
            take = b[: _TLS_CHUNK - size]
            parts.append(take)
            size += len(take)
            if size >= _TLS_CHUNK:
                break
        return b"".join(parts) if parts else None

    def _on_writable_tls(self, now_ns: int) -> list[InFlightRequest]:
        sock = self.sock
        assert sock is not None
        finished: list[InFlightRequest] = []
        while True:
            self._settle_written(now_ns, finished)
            if self._tls_chunk is None:
                self._tls_chunk = self._next_tls_chunk()
                if self._tls_chunk is None:
                    break
            chunk = self._tls_chunk
            try:
                sent = sock.send(chunk)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                break  # retried with the same chunk when writable
            self._tls_chunk = chunk[sent:] if sent < len(chunk) else None
            self._advance(sent, now_ns, finished)
        return finished

    def _settle_written(self, now_ns: int, finished: list[InFlightRequest]) -> None:
        """Pop end-of-request markers at the head of the write queue: those requests
        are fully written."""
        bufs = self._out_bufs
        while bufs:
            head = bufs[0]
            if type(head) is not _EndOfRequest:
                break
            bufs.popleft()
            req = head.request
            self._outbox.popleft()
            req.sent_ns = now_ns
            if req.expect_response:
                self.in_flight.append(req)
            else:
                finished.append(req)

    # -- reading -------------------------------------------------------------------------

    def on_readable(self, now_ns: int) -> list[bytes] | None:
        """Read what is available; the complete response frames (without size
        prefix), or None when the peer closed the connection."""
        assert self.sock is not None
        frames: list[bytes] = []
        # over TLS read until OpenSSL wants more from the socket: bytes it has already
        # decrypted would not make the socket readable again
        tls = self.ssl_context is not None
        _would_block = _TLS_WOULD_BLOCK if tls else _WOULD_BLOCK
        while True:
            if self._body is not None and len(self._body) - self._bpos >= 65536:
                # a large body: read straight into it
                try:
                    n = self.sock.recv_into(memoryview(self._body)[self._bpos :])
                except _would_block:
                    return frames
                if n == 0:
                    return frames or None  # frames first; the EOF is seen again next time
                self._bpos += n
                if self._bpos == len(self._body):
                    frames.append(bytes(self._body))
                    self._body = None
                    self._hlen = 0
                continue
            try:
                n = self.sock.recv_into(self._scratch)
            except _would_block:
                return frames
            if n == 0:
                return frames or None
            mv = memoryview(self._scratch)[:n]
            i = 0
            while i < n:
                if self._body is None:
                    take = min(4 - self._hlen, n - i)
                    self._hdr[self._hlen : self._hlen + take] = mv[i : i + take]
                    self._hlen += take
                    i += take
                    if self._hlen == 4:
                        (size,) = _I32.unpack(self._hdr)
                        if size < 4 or size > MAX_RESPONSE_SIZE:
                            raise ConnectionError_(f"invalid response size {size}")
                        self._body = bytearray(size)
                        self._bpos = 0
                else:
                    body = self._body
                    take = min(len(body) - self._bpos, n - i)
                    body[self._bpos : self._bpos + take] = mv[i : i + take]
                    self._bpos += take
                    i += take
                    if self._bpos == len(body):
                        frames.append(bytes(body))
                        self._body = None
                        self._hlen = 0
            if n < len(self._scratch) and not tls:
                return frames

    # -- closing ---------------------------------------------------------------------------

    def close(self, error: KafkaError | None = None) -> list[InFlightRequest]:
        """Close the socket; returns every request that will now never complete."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.state = ConnectionState.DISCONNECTED
        failed = list(self.in_flight) + list(self._outbox)
        self.in_flight.clear()
        self._outbox.clear()
        self._out_bufs.clear()
        self._tls_chunk = None
        self.handshake_wants_write = False
        self.sasl = None
        self._body = None
        self._hlen = 0
        self.api_versions = {}
        self.throttle_until_ns = 0
        return failed

    @property
    def in_flight_count(self) -> int:
        return len(self.in_flight) + len(self._outbox)


_WOULD_BLOCK = (BlockingIOError, InterruptedError)
_TLS_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


@final  # so that `type(b) is not _EndOfRequest` leaves a memoryview to the type checker
class _EndOfRequest:
    """Marks the end of one request's buffers in the write queue."""

    __slots__ = ("request",)

    def __init__(self, request: InFlightRequest) -> None:
        self.request = request

    def __len__(self) -> int:
        return 0
