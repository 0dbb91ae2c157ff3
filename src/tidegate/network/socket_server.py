"""The asyncio shell: accepts connections and moves bytes, nothing more.

Each connection is a :class:`KafkaConnection` (an ``asyncio.BufferedProtocol``)
reading each request straight into a buffer from the memory pool, one request
processed at a time, responses written in order. Muting is :class:`ChannelMuteState`:
its reasons hold the next request back, and most of them also stop reading
(``pause_reading``/``resume_reading``); a request in flight does not, so a request
that arrives meanwhile is read and held (at most one) until the answer went out.

Decoding, handling and encoding live in the sans-IO core: the connection hands a
:class:`~tidegate.network.request_channel.Request` to the processor (KafkaApis) and
acts on the outcome it returns, a plain value: write the response pieces, write
nothing, close, or wait (PARKED: the connection's next request waits until the response
arrives through the :class:`~tidegate.network.request_channel.RequestChannel` the core
and this server share, which routes it to the connection). A throttled response mutes
the connection after it is written until the channel's ``end_throttling``. Time and
deferred work come from the
broker's one :class:`~tidegate.scheduler.Scheduler`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import random
import resource
import socket
import struct
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock, MonotonicMs
from tidegate.network.connection_quotas import ConnectionQuotas, IdleExpiryManager
from tidegate.network.memory_pool import MemoryPool, RequestMemory
from tidegate.network.mute_state import (
    IN_FLIGHT_BIT,
    RECEIVED_BIT,
    STOPS_READING,
    ChannelMuteState,
    MuteReason,
)
from tidegate.network.receive import InvalidReceiveError, NetworkReceive
from tidegate.network.request_channel import (
    PARKED,
    CloseConnectionResponse,
    Request,
    RequestChannel,
    RequestContext,
    RequestProcessor,
    Response,
    SendResponse,
)
from tidegate.network.transport_layer import ChunkMemory, TransportLayer, close_regions
from tidegate.record.file_region import FileRegion

if TYPE_CHECKING:
    from tidegate.metrics.request_metrics import RequestMetrics, RequestTiming
    from tidegate.scheduler import Scheduler
    from tidegate.security.listener import ListenerSecurity

log = logging.getLogger(__name__)

_connection_ids = itertools.count(1)


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection.

    Identity (docs/security.md): ``principal`` is the user name ("ANONYMOUS" until a
    SASL login succeeds, and for PLAINTEXT and certificate-less SSL connections; the
    certificate's subject DN for SSL with a client certificate). ``authenticated`` is
    False only on SASL listeners until the login succeeds; until then only ApiVersions,
    SaslHandshake and SaslAuthenticate get through (``authenticator``), anything else
    closes the connection.
    """

    # Slotted: tens of thousands of idle or parked connections each hold one (an
    # instance dict of its ~25 attributes was ~1.2 KB of each connection's RSS).
    __slots__ = (
        "__weakref__", "_held", "_in_flight_timing", "_reading_paused", "_send_task", "admit_at_ms",
        "authenticated", "authenticator", "blocked_since_ns", "closed", "connection_id", "counted", "ctx",
        "in_flight", "is_admitted", "listener_name", "mute_state", "principal", "receive", "security",
        "security_protocol", "server", "transport", "transport_layer",
    )

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
        #: the parked request this connection waits on (muted IN_FLIGHT meanwhile: read,
        #: but the next request is held)
        self.in_flight: Request | None = None
        self._in_flight_timing: RequestTiming | None = None
        self._reading_paused = False
        #: counted by the server's ConnectionQuotas (admitted, or refused per IP)
        self.counted = False
        #: when the connection's admission may happen (creation-rate throttle), once at
        #: the head of its listener's queue of connections waiting for admission
        self.admit_at_ms: MonotonicMs | None = None
        #: when it, at the head of its listener's queue, first had to wait for a slot or
        #: for the connection creation rate (ns)
        self.blocked_since_ns: int | None = None
        self.is_admitted = False
        #: a request read and not processed yet: before admission (uvloop may read once
        #: despite pause_reading in connection_made), processed once admitted; or while
        #: the request before it is in flight or being sent (muted RECEIVED: nothing
        #: more is read), processed once no reason holds it back (:meth:`unmute`)
        self._held: NetworkReceive | None = None
        #: how responses reach the socket (made with the transport)
        self.transport_layer: TransportLayer | None = None
        #: the task sending a response that has file regions (SENDING mute meanwhile)
        self._send_task: asyncio.Task | None = None

    # -- asyncio callbacks -------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            if self.server.socket_send_buffer_bytes >= 0:
                # Kafka's socket.send.buffer.bytes (SO_SNDBUF; the kernel doubles it)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.server.socket_send_buffer_bytes)
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
        sock_fd = -1
        if sock is not None and self.server.fetch_sendfile and transport.get_extra_info("sslcontext") is None:
            sock_fd = sock.fileno()
        if sock is not None and sock.fileno() >= self.server.max_fds - 1:
            self.server.descriptors_exhausted()
        self.transport_layer = TransportLayer(transport, sock_fd, self.server.chunk_memory, self)
        peer = transport.get_extra_info("peername") or ("?", 0)
        refused = None
        if self.security is not None and self.security.principal_from_certificate:
            from tidegate.security.tls import subject_dn

            dn = subject_dn(transport.get_extra_info("peercert") or {})
            if dn:
                try:
                    self.principal = self.security.certificate_principal(dn)
                except ValueError as exc:
                    refused = f"failed authentication: {exc}"
        # the address interned: the many connections of one client host share the string
        self.ctx = RequestContext(
            self.connection_id, self.listener_name, sys.intern(str(peer[0])), int(peer[1]),
            self.principal, self.security_protocol, self.authenticated,
        )
        self.server.accept(self)
        if refused is not None:
            log.info("closing connection %s from %s: %s", self.connection_id, self._peer(), refused)
            self.close()

    def admitted(self) -> None:
        """Past the connection limits: the connection is served from now on."""
        server = self.server
        self.is_admitted = True
        server.connections[self.connection_id] = self
        server.touch(self)
        if server.draining:
            self.mute(MuteReason.SHUTDOWN)
        held, self._held = self._held, None
        if held is not None and not self.closed:
            self._process(held)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receive.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        idle = self.server.idle
        if idle is not None:
            idle.update(self.connection_id, self.server.clock.milliseconds())
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
            if not self.is_admitted:
                self._held = receive
                self._pause_until_admitted()
                return
            if self.mute_state.bits:
                # The request before it is still in flight (or being sent): this one
                # waits, read into its pool buffer, and nothing more is read meanwhile.
                self._held = receive
                self.mute(MuteReason.RECEIVED)
                return
            self._process(receive)
        elif not self.is_admitted:
            self._pause_until_admitted()

    def _pause_until_admitted(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()
            self._reading_paused = True

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.receive.release()
        if self._held is not None:
            self._held.release()
            self._held = None
        server = self.server
        if server.connections.get(self.connection_id) is self:
            del server.connections[self.connection_id]
        request = self.in_flight
        if request is not None:
            # Abandoned before the disconnect listeners run: ending a share session
            # releases its member's records and wakes parked share fetches, this
            # connection's own among them, which must not acquire them again for a
            # member whose session is gone (nobody would acknowledge them).
            request.abandoned = True
        server.connection_closed(self)
        server.memory_muted.pop(self, None)
        task = self._send_task
        if task is not None:
            task.cancel()  # its regions are closed by the task's cleanup
        if self.transport_layer is not None:
            self.transport_layer.writable_again()
        if request is not None:
            # The request stays in its purgatory until it completes or expires; its
            # answer is dropped then (abandoned) and its memory comes back now.
            self.in_flight = None
            request.release_buffer()
            server.request_done()

    def pause_writing(self) -> None:
        self.mute(MuteReason.SEND_BUFFER)

    def resume_writing(self) -> None:
        self.unmute(MuteReason.SEND_BUFFER)
        if self.transport_layer is not None:
            self.transport_layer.writable_again()

    # -- muting (network/mute_state.py) --------------------------------------
    def mute(self, reason: MuteReason) -> None:
        self.mute_state.mute(reason)
        self._sync_reading()

    def unmute(self, reason: MuteReason) -> None:
        """Drop a reason; a request read meanwhile (``RECEIVED``) is processed once no
        other reason holds it back."""
        state = self.mute_state
        state.unmute(reason)
        if state.bits == RECEIVED_BIT:
            self.server.scheduler.call_soon(self._process_held)
        self._sync_reading()

    def _process_held(self) -> None:
        """Only ``RECEIVED`` is left: the request read while another held it back is
        processed, and reading goes on. Run on the next turn of the loop, as a read
        after ``resume_reading`` would be: an unmute happens inside the core's
        callbacks (a purgatory's completion, the flusher's end of round), which must
        not see a new request handled in the middle of them."""
        held = self._held
        if held is None or not self.is_admitted or self.closed or self.mute_state.bits != RECEIVED_BIT:
            return  # gone, or held back again meanwhile (that unmute schedules it anew)
        self._held = None
        self.mute_state.unmute(MuteReason.RECEIVED)
        self._process(held)
        self._sync_reading()

    def _sync_reading(self) -> None:
        """Pause or resume reading the socket as the reasons that stop reading say
        (``IN_FLIGHT`` and ``SENDING`` do not)."""
        if self.closed or self.transport is None:
            return
        want_paused = (self.mute_state.bits & STOPS_READING) != 0
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
        clock = self.server.clock
        start = clock.nanoseconds()
        step = self.authenticator.receive(payload)
        if step.forward:
            return True  # ApiVersions: the broker measures it as exempt itself
        if payload:
            self.server.request_memory.release(payload)
        self._write([step.response] if step.response is not None else ())
        self.server.processor.record_exempt_request_time_ns(clock.nanoseconds() - start)
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
        server = self.server
        metrics = server.request_metrics
        timing = metrics.begin(payload) if metrics is not None else None
        memory = server.request_memory
        release = (lambda: memory.release(payload)) if payload else None  # size 0: no memory
        assert self.ctx is not None
        request = Request(self.ctx, payload, release, server.clock.nanoseconds())
        try:
            outcome = server.processor.handle(request)
        except Exception:
            request.release_buffer()
            key, version = (struct.unpack_from(">hh", payload) if len(payload) >= 4 else (None, None))
            log.exception("error processing a request (api_key=%s v%s) from %s; closing the connection",
                          key, version, self._peer())
            self.close()
            return
        if timing is not None:
            timing.local_done()
        if outcome is PARKED:
            self.in_flight = request
            self._in_flight_timing = timing
            server.parked += 1
            # one request at a time; the socket is still read (a reason that does not
            # stop reading: no pause_reading/resume_reading pair per parked request)
            self.mute_state.mute(MuteReason.IN_FLIGHT)
            return
        request.release_buffer()
        assert isinstance(outcome, Response)
        self._respond(outcome, timing)

    def complete(self, request: Request, response: Response) -> None:
        """The response to the parked request (RequestChannel.send_response)."""
        if request is not self.in_flight:
            return  # answered already, or the connection went away
        self.in_flight = None
        request.release_buffer()
        timing = self._in_flight_timing
        self._in_flight_timing = None
        if timing is not None:
            timing.remote_done()
        self.server.request_done()
        if self.closed:
            return
        self._respond(response, timing)
        if not self.closed:
            # IN_FLIGHT does not stop reading: dropping it only lets a held request through
            state = self.mute_state
            state.bits = bits = state.bits & ~IN_FLIGHT_BIT
            if bits == RECEIVED_BIT:
                self.server.scheduler.call_soon(self._process_held)

    def end_throttling(self) -> None:
        """The throttle's timer task ended (RequestChannel.end_throttling)."""
        if not self.closed:
            self.unmute(MuteReason.THROTTLE)

    def _respond(self, response: Response, timing: RequestTiming | None) -> None:
        if isinstance(response, CloseConnectionResponse):
            log.warning("closing connection %s from %s: %s", self.connection_id, self._peer(),
                        response.reason)
            self.close()
            return
        if isinstance(response, SendResponse):
            pieces = response.pieces
            # a response with file regions has its header piece before them
            if len(pieces) > 1 and any(isinstance(p, FileRegion) for p in pieces):
                layer = self.transport_layer
                if self.closed or layer is None:
                    close_regions(pieces)
                    return
                start = (0, 0)
                if layer.can_send_now:
                    self.server.touch(self)
                    try:
                        rest = layer.send_now(pieces)
                    except OSError as exc:
                        close_regions(pieces)
                        log.warning("closing connection %s from %s: sending a response failed: %r",
                                    self.connection_id, self._peer(), exc)
                        self.close()
                        return
                    if rest is None:
                        self._sent(response, timing)
                        return
                    start = rest
                # The rest is sent by a task (sendfile waits for the socket); nothing is
                # read from this connection until it is done, so responses stay in order.
                self.mute(MuteReason.SENDING)
                self._send_task = asyncio.get_running_loop().create_task(
                    self._send_rest(response, timing, start)
                )
                return
            self._write(pieces)
        self._sent(response, timing)

    def _sent(self, response: Response, timing: RequestTiming | None) -> None:
        after = response.after_send
        if after is not None:
            after()
        if timing is not None:
            timing.sent()
        if response.throttle_ms > 0:
            # KIP-219: the response went out at once; the connection is not read again
            # until the throttle's timer task ends it (RequestChannel.end_throttling).
            self.mute(MuteReason.THROTTLE)
        self.server.processor.try_complete_actions()

    def _write(self, pieces: Any) -> None:
        layer = self.transport_layer
        if self.closed or layer is None:
            return
        idle = self.server.idle
        if idle is not None:
            idle.update(self.connection_id, self.server.clock.milliseconds())
        layer.write(pieces)

    async def _send_rest(
        self, response: SendResponse, timing: RequestTiming | None, start: tuple[int, int] = (0, 0)
    ) -> None:
        """The rest of a response with file regions, from ``start`` (piece index, bytes
        of it sent) on (:meth:`TransportLayer.send`), muted ``SENDING`` meanwhile."""
        layer = self.transport_layer
        assert layer is not None
        ok = False
        try:
            await layer.send(response.pieces, start)
            ok = not self.closed
        except asyncio.CancelledError:
            pass  # the connection went away
        except (OSError, RuntimeError) as exc:
            # A segment truncated under the region: the frame cannot be completed, so
            # the connection is closed (the client retries), as Kafka's FileRecords.writeTo.
            log.warning("closing connection %s from %s: sending a response failed: %r",
                        self.connection_id, self._peer(), exc)
        finally:
            self._send_task = None
        if not ok:
            self.close()
            return
        self._sent(response, timing)
        if not self.closed:
            self.unmute(MuteReason.SENDING)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def _peer(self) -> str:
        return f"{self.ctx.client_address}:{self.ctx.client_port}" if self.ctx else "?"


class SocketServer:
    """Listeners and their connections; Kafka's SocketServer, one event loop.

    Its connections register in the :class:`~tidegate.network.request_channel.RequestChannel`
    it is built with (the one the core was built with): responses to parked requests
    and the ends of throttles come back through it.
    """

    #: Below this fraction of the pool available, memory-muted connections are
    #: unmuted in shuffled order so the same ones are not always served last (KIP-72).
    LOW_MEMORY_FRACTION = 0.1

    def __init__(
        self,
        processor: RequestProcessor,
        channel: RequestChannel[KafkaConnection],
        pool: MemoryPool,
        max_request_size: int,
        scheduler: Scheduler,
        *,
        send_buffer_bytes: int = 4 * 1024 * 1024,
        max_queued_requests: int = 500,
        shuffle: Callable[[list], None] = random.shuffle,
        receive_buffer_bytes: int = -1,
        socket_send_buffer_bytes: int = -1,
        sasl_max_receive_size: int = 524288,
        clock: Clock,
        quotas: ConnectionQuotas | None = None,
        connections_max_idle_ms: int = -1,
        request_metrics: RequestMetrics | None = None,
        disconnect_listeners: Sequence[Callable[[int], object]] = (),
    ) -> None:
        self.processor = processor
        #: told the id of every connection that closed (Kafka's
        #: ConnectionDisconnectListener: a share session opened on it ends)
        self.disconnect_listeners = tuple(disconnect_listeners)
        self.scheduler = scheduler
        self.clock = clock
        self.pool = pool
        self.request_memory = RequestMemory(pool, max_queued_requests)
        self.request_memory.on_release = self._memory_released_soon
        #: the pool memory region sends read into (TLS), handed out first
        self.chunk_memory = ChunkMemory(pool, self._memory_released_soon)
        self._unmute_scheduled = False
        self._shuffle = shuffle
        self.max_request_size = max_request_size
        self.send_buffer_bytes = send_buffer_bytes
        #: file regions go out with sendfile on PLAINTEXT connections; False reads them
        #: in chunks as on TLS (TIDEGATE_FETCH_SENDFILE=0: the benchmark's comparison)
        self.fetch_sendfile = os.environ.get("TIDEGATE_FETCH_SENDFILE", "1") != "0"
        self.receive_buffer_bytes = receive_buffer_bytes  # SO_RCVBUF; -1: the OS default
        self.socket_send_buffer_bytes = socket_send_buffer_bytes  # SO_SNDBUF; -1: the OS default
        self.sasl_max_receive_size = sasl_max_receive_size  # before SASL authentication
        self.channel = channel
        #: open connections by id: the channel's, which routes responses to them
        self.connections = channel.connections
        # Connections muted because their next request found no memory, in the
        # order they were muted (a dict as an ordered set).
        self.memory_muted: dict[KafkaConnection, None] = {}
        self.request_memory.waiting = self.memory_muted
        # Per-request timing (tidegate.metrics); None when metrics are off: one check each.
        self.request_metrics = request_metrics
        self.servers: list[asyncio.base_events.Server] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self.draining = False
        #: requests parked in the core, waiting for their response
        self.parked = 0
        self._idle: asyncio.Event | None = None
        # Connection limits (docs/security.md): None when nothing limits connections.
        self.quotas = quotas
        #: accepted connections waiting for admission, per listener, in accept order
        self.pending: dict[str, deque[KafkaConnection]] = {}
        self._admission_timers: dict[str, Any] = {}
        #: connections.max.idle.ms (Kafka's Selector idle expiry); None: -1, never
        self.idle = IdleExpiryManager(connections_max_idle_ms) if connections_max_idle_ms >= 0 else None
        self._idle_task: Any = None
        #: connections closed for idleness, per listener
        self.idle_closed_total: dict[str, int] = {}
        #: the process's descriptor limit (RLIMIT_NOFILE, soft), which bounds connections
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.max_fds = soft if soft != resource.RLIM_INFINITY else 1 << 62
        #: times a connection took the last descriptor (see :meth:`descriptors_exhausted`)
        self.descriptors_exhausted_total = 0
        self._descriptors_logged_ms: MonotonicMs | None = None

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
        self.start_idle_expiry()
        sockname = server.sockets[0].getsockname()
        self.bound[name] = (sockname[0], sockname[1])
        return self.bound[name]

    # -- connection limits -------------------------------------------------------------
    def descriptors_exhausted(self) -> None:
        """A connection was accepted on the last descriptor the process may open (the
        kernel hands out the lowest free one, so all are in use): until some close,
        accepting fails with EMFILE. The event loop neither dies nor spins on that
        (uvloop's libuv accepts and closes such connections at once on a descriptor it
        keeps in reserve; asyncio's stops accepting for a second), but says nothing a
        reader would understand, so this does, once a minute at most."""
        self.descriptors_exhausted_total += 1
        now = self.clock.milliseconds()
        last = self._descriptors_logged_ms
        if last is not None and now - last < 60_000:
            return
        self._descriptors_logged_ms = now
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.error(
            "every file descriptor the broker may open is in use (RLIMIT_NOFILE soft limit %d, hard %d; "
            "%d connections open): new connections are refused (closed as they are accepted) until some "
            "close. Raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) to serve more.",
            soft, hard, len(self.connections),
        )

    def accept(self, conn: KafkaConnection) -> None:
        """A new connection: admitted now, or held unread until the limits let it in
        (Kafka's acceptor blocks; here the connection waits in its listener's queue)."""
        if self.quotas is None:
            conn.admitted()
            return
        transport = conn.transport
        assert transport is not None
        transport.pause_reading()
        conn._reading_paused = True
        self.pending.setdefault(conn.listener_name, deque()).append(conn)
        self._admit(conn.listener_name)

    def _admit(self, listener: str) -> None:
        quotas = self.quotas
        queue = self.pending.get(listener)
        if quotas is None or not queue:
            return
        while queue:
            conn = queue[0]
            if conn.closed:
                queue.popleft()
                self._unblocked(listener, conn)
                continue
            now = self.clock.milliseconds()
            if conn.admit_at_ms is None:
                # at the head: the acceptor accepts it now (KIP-612 records it now)
                conn.admit_at_ms = MonotonicMs(now + quotas.record_connection(listener, now))
            if now < conn.admit_at_ms:
                if conn.blocked_since_ns is None:  # Kafka's acceptor blocks for the rate too
                    conn.blocked_since_ns = self.clock.nanoseconds()
                if listener not in self._admission_timers:
                    self._admission_timers[listener] = self.scheduler.call_at(
                        conn.admit_at_ms, lambda: self._admission_timer(listener))
                return
            if not quotas.slot_available(listener):
                quotas.blocked_total[listener] = quotas.blocked_total.get(listener, 0) + 1
                if conn.blocked_since_ns is None:
                    conn.blocked_since_ns = self.clock.nanoseconds()
                return  # connection_closed() tries again
            queue.popleft()
            self._unblocked(listener, conn)
            assert conn.ctx is not None
            address = conn.ctx.client_address
            throttle_ms = quotas.record_ip_connection(listener, address, now)
            if throttle_ms > 0:
                # Kafka's ConnectionThrottledException: the acceptor closes the socket,
                # unserved, once the throttle time has passed
                log.debug("Delaying closing of connection from %s for %d ms", address, throttle_ms)
                self.scheduler.call_at(MonotonicMs(now + throttle_ms), conn.close)
                continue
            conn.counted = True
            if not quotas.inc(listener, address):
                log.info("Rejected connection from %s, address already has the configured "
                         "maximum of %d connections.", address, quotas.limits().max_per_ip(address))
                conn.close()
                continue
            conn._sync_reading()
            conn.admitted()

    def limits_changed(self) -> None:
        """A dynamic config changed: connections held for a limit that may have been
        raised are tried again (Kafka's ConnectionQuotas notifyAll on reconfiguration)."""
        for listener in list(self.pending):
            self._admit(listener)

    def _unblocked(self, listener: str, conn: KafkaConnection) -> None:
        """The head of the queue left it: the time it blocked the listener's admissions
        counts in Kafka's AcceptorBlockedPercent."""
        if conn.blocked_since_ns is not None and self.quotas is not None:
            blocked = self.clock.nanoseconds() - conn.blocked_since_ns
            self.quotas.blocked_ns[listener] = self.quotas.blocked_ns.get(listener, 0) + blocked
            conn.blocked_since_ns = None

    def acceptor_blocked_ns(self, listener: str) -> int:
        """Nanoseconds the listener's admissions have waited for a slot or for the
        connection creation rate, the current wait included (Kafka's Acceptor
        ``AcceptorBlockedPercent`` meter counts the same)."""
        total = self.quotas.blocked_ns.get(listener, 0) if self.quotas is not None else 0
        queue = self.pending.get(listener)
        if queue and queue[0].blocked_since_ns is not None:
            total += self.clock.nanoseconds() - queue[0].blocked_since_ns
        return total

    def _admission_timer(self, listener: str) -> None:
        self._admission_timers.pop(listener, None)
        self._admit(listener)

    def connection_closed(self, conn: KafkaConnection) -> None:
        for disconnected in self.disconnect_listeners:
            try:
                disconnected(conn.connection_id)
            except Exception:
                log.exception("a disconnect listener failed for connection %s", conn.connection_id)
        if self.idle is not None:
            self.idle.remove(conn.connection_id)
        quotas = self.quotas
        if quotas is None or not conn.counted:
            return
        conn.counted = False
        assert conn.ctx is not None
        quotas.dec(conn.listener_name, conn.ctx.client_address)
        for listener in list(self.pending):
            self._admit(listener)

    def touch(self, conn: KafkaConnection) -> None:
        if self.idle is not None:
            self.idle.update(conn.connection_id, self.clock.milliseconds())

    def close_idle_connections(self) -> None:
        """Close connections idle longer than connections.max.idle.ms (Kafka's
        Selector.maybeCloseOldestConnection). A connection waiting for its parked
        request's response is not idle: it is marked active instead."""
        idle = self.idle
        if idle is None:
            return
        now = self.clock.milliseconds()
        for cid in idle.expired(now):
            conn = self.connections.get(cid)  # type: ignore[call-overload]
            if conn is None or conn.closed:
                idle.remove(cid)
                continue
            if conn.in_flight is not None or conn._send_task is not None:  # parked, or sending
                idle.update(cid, now)
                continue
            log.debug("closing connection %s from %s: idle for more than %d ms",
                      cid, conn._peer(), idle.max_idle_ms)
            name = conn.listener_name
            self.idle_closed_total[name] = self.idle_closed_total.get(name, 0) + 1
            idle.remove(cid)
            conn.close()

    def start_idle_expiry(self) -> None:
        if self.idle is not None and self._idle_task is None:
            period = max(1, min(self.idle.max_idle_ms // 2, 1000))
            self._idle_task = self.scheduler.schedule(
                "connections-max-idle", self.close_idle_connections, period)

    def response_bytes_in_flight(self) -> int:
        """Memory held by responses being sent: every connection's transport buffer
        plus the region chunk it has read and not yet written (the
        ResponseMemoryInFlight gauge). Regions sent with sendfile hold none."""
        total = 0
        for conn in list(self.connections.values()):
            transport = conn.transport
            if transport is not None and not conn.closed:
                total += transport.get_write_buffer_size()
            if conn.transport_layer is not None:
                total += conn.transport_layer.chunk_bytes
        return total

    def request_done(self) -> None:
        """A parked request was answered or abandoned (shutdown waits for none left)."""
        self.parked -= 1
        if self.parked == 0 and self._idle is not None:
            self._idle.set()

    # -- memory ------------------------------------------------------------------------
    def _memory_released_soon(self) -> None:
        """On a release: hand the memory on once the releasing call has returned.

        A request is released while its handler still holds the buffer (Produce
        releases after the append, inside the handler; the receive and the
        decoded views still point into it), so the bytes are only freed once that
        call returns. Allocating the next body right away would hold one more
        request than the pool accounts for: measured under a flood of 8 MiB
        requests, RSS reached pool + 2 requests instead of pool + 1. Running
        :meth:`memory_released` on the next turn of the scheduler (once, however
        many releases happen before it) keeps the bound.
        """
        if self._unmute_scheduled:
            return
        self._unmute_scheduled = True
        self.scheduler.call_soon(self._run_memory_released)

    def _run_memory_released(self) -> None:
        self._unmute_scheduled = False
        self.memory_released()

    def memory_released(self) -> None:
        """Give freed memory to region chunks waiting for it (TLS responses), then
        to connections muted for it, and let those read again.

        Each muted connection's body buffer is allocated *before* it is unmuted
        (a BufferedProtocol must never be handed an empty buffer), first come
        first served, or in shuffled order while the pool is nearly exhausted.
        Only the MEMORY mute reason is removed: a connection that also has a
        request in flight or a throttle to serve stays muted for that.
        """
        if not self.chunk_memory.hand_out():
            return  # region chunks first (TLS responses waiting to go on)
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

    # -- shutdown ----------------------------------------------------------------------
    def stop_reading(self) -> None:
        """Stop accepting connections and reading requests (parked ones still answer)."""
        self.draining = True
        for server in self.servers:
            server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        for timer in self._admission_timers.values():
            timer.cancel()
        self._admission_timers.clear()
        for queue in self.pending.values():
            for conn in queue:
                conn.close()
            queue.clear()
        for conn in list(self.connections.values()):
            conn.mute(MuteReason.SHUTDOWN)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop accepting, stop reading, let parked requests answer, then close."""
        self.stop_reading()
        if self.parked > 0:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), timeout)
            except TimeoutError:
                log.warning("%d parked request(s) not answered at shutdown", self.parked)
        for conn in list(self.connections.values()):
            if conn.transport is not None:
                conn.closed = True
                conn.transport.close()  # flushes buffered responses before closing
        for server in self.servers:
            await server.wait_closed()
