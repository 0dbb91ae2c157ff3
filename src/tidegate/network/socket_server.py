"""The asyncio shell: accepts connections and moves bytes, nothing more.

Each connection is a :class:`KafkaConnection` (an ``asyncio.BufferedProtocol``)
reading each request straight into a buffer from the memory pool, one request
processed at a time, responses written in order. Muting is
``pause_reading``/``resume_reading`` driven by :class:`ChannelMuteState`.
Decoding, handling and encoding live in the sans-IO layers; handlers that must
wait (acks=all, long-poll fetch) hand back an awaitable and the connection stays
muted until it resolves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import random
import socket
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidegate.network.memory_pool import MemoryPool
from tidegate.network.mute_state import ChannelMuteState, MuteReason
from tidegate.network.receive import InvalidReceiveError, NetworkReceive

if TYPE_CHECKING:
    from tidegate.metrics import RequestMetrics
    from tidegate.security.listener import ListenerSecurity

log = logging.getLogger(__name__)

_connection_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and on which listener (Kafka's RequestContext).

    ``connection`` is the :class:`KafkaConnection` itself (None when a processor is
    driven without one): quotas read its ``principal`` and ``authenticated`` and mute
    it for a throttle.
    """

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
    connection: KafkaConnection | None = field(default=None, compare=False, repr=False)


class RequestProcessor(Protocol):
    """What the shell needs from the broker: bytes in, response bytes (or None) out.

    ``process`` returns ``bytes`` to send, ``None`` for no response (acks=0), or
    an awaitable resolving to either while the connection stays muted.
    """

    def process(self, payload: bytearray, ctx: RequestContext, release: Callable[[], None]) -> Any: ...

    # Optional: ``record_exempt_request_time_ns(ns)`` takes the loop time spent on a SASL
    # frame before login (exempt from the request quota, still measured as
    # exempt-request-time); KafkaApis has it, test processors need not.


class ConnectionClosed(Exception):
    """Raised by a processor to close the connection that sent the request."""


class RequestMemory:
    """Both KIP-72 bounds at once: request bytes (the pool) and request count.

    ``queued.max.request.bytes`` is the pool's size; ``queued.max.requests``
    bounds how many request bodies are held at once (Kafka bounds its request
    queue with it; tidegate has no queue, so it bounds the bodies being read or
    processed). Whichever is hit first refuses the allocation. Every release
    calls ``on_release`` so that connections muted for memory can be unmuted.

    While connections wait for memory (``waiting``, the server's memory-muted
    connections) a new request queues behind them: only the server's hand-out
    (``granting``) allocates then. Otherwise a connection reading its next size
    between a release and the hand-out would take the freed memory ahead of
    connections that have waited for it, and the same busy connections would be
    served again and again. Used by one event loop only.
    """

    __slots__ = ("granting", "max_requests", "on_release", "outstanding", "pool", "waiting")

    def __init__(self, pool: MemoryPool, max_requests: int) -> None:
        self.pool = pool
        self.max_requests = max_requests
        self.outstanding = 0
        self.on_release: Callable[[], None] = lambda: None
        self.waiting: Sized = ()
        self.granting = False

    def try_allocate(self, size: int) -> bytearray | None:
        if self.outstanding >= self.max_requests:
            return None
        if self.waiting and not self.granting:
            return None
        buf = self.pool.try_allocate(size)
        if buf is not None:
            self.outstanding += 1
        return buf

    def release(self, buffer: bytearray) -> None:
        self.pool.release(buffer)
        self.outstanding -= 1
        self.on_release()

    @property
    def is_out_of_memory(self) -> bool:
        return self.outstanding >= self.max_requests or self.pool.is_out_of_memory


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection.

    Identity (docs/security.md): ``principal`` is the user name ("ANONYMOUS" until a
    SASL login succeeds, and for PLAINTEXT and certificate-less SSL connections; the
    certificate's subject DN for SSL with a client certificate). ``authenticated`` is
    False only on SASL listeners until the login succeeds; until then only ApiVersions,
    SaslHandshake and SaslAuthenticate get through (``authenticator``), anything else
    closes the connection.
    """

    def __init__(
        self, server: SocketServer, listener_name: str, security: ListenerSecurity | None = None
    ) -> None:
        self.server = server
        self.listener_name = listener_name
        self.connection_id = next(_connection_ids)
        self.security = security
        self.security_protocol = security.security_protocol if security else "PLAINTEXT"
        self.authenticator = security.new_authenticator() if security else None
        self.authenticated = self.authenticator is None
        self.principal = "ANONYMOUS"
        self.receive = NetworkReceive(self._max_receive_size(), server.request_memory)
        self.mute_state = ChannelMuteState()
        self.transport: asyncio.Transport | None = None
        self.ctx: RequestContext | None = None
        self.closed = False
        self.in_flight: asyncio.Future | None = None
        self._reading_paused = False
        # Called once after the next response is written (the request quota counts
        # the encode and write time of a response; see docs/quotas.md). None: nothing.
        self.after_send: Callable[[], None] | None = None

    # -- asyncio callbacks -------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            if self.server.receive_buffer_bytes >= 0:
                # Kafka's socket.receive.buffer.bytes. A connection muted for memory
                # leaves its client's bytes in this kernel buffer: with the OS default
                # (autotuned up to tcp_rmem's maximum, several MiB) a flood of muted
                # connections parks its requests in the kernel instead, and the host
                # can reach TCP memory pressure (dropped segments, retransmission
                # stalls for every connection).
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.server.receive_buffer_bytes)
                except OSError:
                    pass
        transport.set_write_buffer_limits(high=self.server.send_buffer_bytes)
        peer = transport.get_extra_info("peername") or ("?", 0)
        if self.security is not None and self.security.principal_from_certificate:
            from tidegate.security.tls import subject_dn

            self.principal = subject_dn(transport.get_extra_info("peercert") or {}) or "ANONYMOUS"
        self.ctx = RequestContext(
            self.connection_id, self.listener_name, str(peer[0]), int(peer[1]),
            self.principal, self.security_protocol, self.authenticated, self,
        )
        self.server.connections.add(self)
        if self.server.draining:
            self.mute(MuteReason.SHUTDOWN)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receive.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self.receive.advance(nbytes)
        except InvalidReceiveError as exc:
            log.warning("closing connection %s from %s: %s", self.connection_id, self._peer(), exc)
            self.close()
            return
        if self.receive.requires_memory:
            # KIP-72: the pool has no room for this body yet. Stop reading this
            # connection until a release makes room (SocketServer.memory_released).
            self.mute(MuteReason.MEMORY)
            self.server.memory_muted[self] = None
            return
        if self.receive.complete():
            receive = self.receive
            self.receive = NetworkReceive(self._max_receive_size(), self.server.request_memory)
            self._process(receive)

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.receive.release()
        self.server.connections.discard(self)
        self.server.memory_muted.pop(self, None)
        if self.in_flight is not None and not self.in_flight.done():
            self.in_flight.cancel()

    def pause_writing(self) -> None:
        self.mute(MuteReason.SEND_BUFFER)

    def resume_writing(self) -> None:
        self.unmute(MuteReason.SEND_BUFFER)

    # -- muting ------------------------------------------------------------
    def mute(self, reason: MuteReason) -> None:
        self.mute_state.mute(reason)
        self._sync_reading()

    def unmute(self, reason: MuteReason) -> None:
        self.mute_state.unmute(reason)
        self._sync_reading()

    def _sync_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        want_paused = self.mute_state.muted
        if want_paused and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not want_paused and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    # -- authentication ------------------------------------------------------
    def _max_receive_size(self) -> int:
        """Kafka's sasl.server.max.receive.size bounds requests before authentication."""
        if self.authenticated:
            return self.server.max_request_size
        return min(self.server.max_request_size, self.server.sasl_max_receive_size)

    def _authenticate(self, payload: bytearray) -> bool:
        """Hand a frame to the SASL authenticator; True if it goes on to the broker
        (ApiVersions). The frame was read into pool memory like any request."""
        assert self.authenticator is not None
        start = time.perf_counter_ns()
        step = self.authenticator.receive(payload)
        if step.forward:
            return True  # ApiVersions: the broker measures it as exempt itself
        if payload:
            self.server.request_memory.release(payload)
        self._send(step.response)
        record_exempt = self.server.record_exempt
        if record_exempt is not None:
            record_exempt(time.perf_counter_ns() - start)
        if step.close is not None:
            log.info("closing connection %s from %s: %s", self.connection_id, self._peer(), step.close)
            self.close()  # after the failure response: close() flushes what was written
            return False
        if self.authenticator.complete:
            self.authenticated = True
            self.principal = self.authenticator.principal or "ANONYMOUS"
            assert self.ctx is not None
            self.ctx = dataclasses.replace(self.ctx, principal=self.principal, authenticated=True)
            # the next frame may now be as large as socket.request.max.bytes
            self.receive = NetworkReceive(self._max_receive_size(), self.server.request_memory)
            log.debug("connection %s from %s authenticated as %s with %s", self.connection_id,
                      self._peer(), self.principal, self.authenticator.mechanism)
        return False

    # -- requests ----------------------------------------------------------
    def _process(self, receive: NetworkReceive) -> None:
        payload = receive.payload()
        if not self.authenticated and not self._authenticate(payload):
            return
        metrics = self.server.request_metrics
        timing = metrics.begin(payload) if metrics is not None else None
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                if payload:  # a zero-size request took nothing from the pool
                    self.server.request_memory.release(payload)

        assert self.ctx is not None
        try:
            result = self.server.processor.process(payload, self.ctx, release)
        except ConnectionClosed as exc:
            release()
            log.warning("closing connection %s from %s: %s", self.connection_id, self._peer(), exc)
            self.close()
            return
        except Exception:
            release()
            log.exception("error processing a request from %s; closing the connection", self._peer())
            self.close()
            return
        if timing is not None:
            timing.local_done()
        if inspect.isawaitable(result):
            self.mute(MuteReason.IN_FLIGHT)
            fut = asyncio.ensure_future(result)
            self.in_flight = fut
            fut.add_done_callback(lambda f: self._complete(f, release, timing))
        else:
            release()
            self._send(result)
            if timing is not None:
                timing.sent()

    def _complete(
        self, fut: asyncio.Future, release: Callable[[], None], timing: Any = None
    ) -> None:
        release()
        if timing is not None:
            timing.remote_done()
        self.in_flight = None
        if fut.cancelled() or self.closed:
            return
        exc = fut.exception()
        if exc is not None:
            if isinstance(exc, ConnectionClosed):
                log.warning("closing connection %s from %s: %s", self.connection_id, self._peer(), exc)
            else:
                log.error("error completing a request from %s", self._peer(), exc_info=exc)
            self.close()
            return
        self._send(fut.result())
        if timing is not None:
            timing.sent()
        self.unmute(MuteReason.IN_FLIGHT)
        self.server.on_idle(self)

    def _send(self, data: bytes | None) -> None:
        if data is not None and not self.closed and self.transport is not None:
            self.transport.write(data)
        if self.after_send is not None:
            after, self.after_send = self.after_send, None
            after()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def _peer(self) -> str:
        return f"{self.ctx.client_address}:{self.ctx.client_port}" if self.ctx else "?"


class SocketServer:
    """Listeners and their connections; Kafka's SocketServer, one event loop."""

    #: Below this fraction of the pool available, memory-muted connections are
    #: unmuted in shuffled order so the same ones are not always served last (KIP-72).
    LOW_MEMORY_FRACTION = 0.1

    def __init__(
        self,
        processor: RequestProcessor,
        pool: MemoryPool,
        max_request_size: int,
        send_buffer_bytes: int = 4 * 1024 * 1024,
        max_queued_requests: int = 500,
        shuffle: Callable[[list], None] = random.shuffle,
        receive_buffer_bytes: int = -1,
        sasl_max_receive_size: int = 524288,
    ) -> None:
        self.processor = processor
        self.record_exempt = getattr(processor, "record_exempt_request_time_ns", None)
        self.pool = pool
        self.request_memory = RequestMemory(pool, max_queued_requests)
        self.request_memory.on_release = self._memory_released_soon
        self._unmute_scheduled = False
        self._shuffle = shuffle
        self.max_request_size = max_request_size
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes  # SO_RCVBUF; -1: the OS default
        self.sasl_max_receive_size = sasl_max_receive_size  # before SASL authentication
        self.connections: set[KafkaConnection] = set()
        # Connections muted because their next request found no memory, in the
        # order they were muted (a dict as an ordered set).
        self.memory_muted: dict[KafkaConnection, None] = {}
        self.request_memory.waiting = self.memory_muted
        # Per-request timing (tidegate.metrics); None when metrics are off: one check each.
        self.request_metrics: RequestMetrics | None = None
        self.servers: list[asyncio.base_events.Server] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self.draining = False

    async def start_listener(
        self, name: str, host: str, port: int, security: ListenerSecurity | None = None
    ) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: KafkaConnection(self, name, security),
            host=host or None,
            port=port,
            reuse_address=True,
            backlog=1024,
            ssl=security.ssl_context if security is not None else None,
        )
        self.servers.append(server)
        sockname = server.sockets[0].getsockname()
        self.bound[name] = (sockname[0], sockname[1])
        return self.bound[name]

    def _memory_released_soon(self) -> None:
        """On a release: hand the memory on once the releasing call has returned.

        A request is released while its handler still holds the buffer (Produce
        releases after the append, inside the handler; the receive and the
        decoded views still point into it), so the bytes are only freed once that
        call returns. Allocating the next body right away would hold one more
        request than the pool accounts for: measured under a flood of 8 MiB
        requests, RSS reached pool + 2 requests instead of pool + 1. Running
        :meth:`memory_released` on the next loop iteration (once, however many
        releases happen before it) keeps the bound. Without a running loop (the
        protocol driven by hand) it runs at once.
        """
        if self._unmute_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.memory_released()
            return
        self._unmute_scheduled = True
        loop.call_soon(self._run_memory_released)

    def _run_memory_released(self) -> None:
        self._unmute_scheduled = False
        self.memory_released()

    def memory_released(self) -> None:
        """Give freed memory to connections muted for it, then let them read again.

        Each muted connection's body buffer is allocated *before* it is unmuted
        (a BufferedProtocol must never be handed an empty buffer), first come
        first served, or in shuffled order while the pool is nearly exhausted.
        Only the MEMORY mute reason is removed: a connection that also has a
        request in flight or a throttle to serve stays muted for that.
        """
        muted = self.memory_muted
        if not muted or self.request_memory.is_out_of_memory:
            return
        candidates = list(muted)
        pool = self.pool
        if pool.available < pool.size * self.LOW_MEMORY_FRACTION:
            self._shuffle(candidates)
        granted = []
        self.request_memory.granting = True
        try:
            for conn in candidates:
                if conn.closed:
                    muted.pop(conn, None)
                    continue
                if not conn.receive.try_allocate():
                    break
                muted.pop(conn, None)
                granted.append(conn)
        finally:
            self.request_memory.granting = False
        for conn in granted:
            conn.unmute(MuteReason.MEMORY)

    def on_idle(self, connection: KafkaConnection) -> None:
        """A connection finished its in-flight request (hook for shutdown draining)."""

    def stop_reading(self) -> None:
        """Stop accepting connections and reading requests (in-flight ones still answer)."""
        self.draining = True
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.mute(MuteReason.SHUTDOWN)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop accepting, stop reading, let in-flight requests answer, then close."""
        self.stop_reading()
        pending = [c.in_flight for c in self.connections if c.in_flight is not None]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.closed = True
                conn.transport.close()  # flushes buffered responses before closing
        for server in self.servers:
            await server.wait_closed()
