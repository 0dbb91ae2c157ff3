"""How a response's bytes reach a connection's socket: Kafka's ``TransportLayer`` and the
``Send`` written through it (``NetworkSend``, ``RecordsSend``).

A response is a list of pieces: bytes, and :class:`~tidegate.record.file_region.FileRegion`
slices of segment files (a Fetch's records). Bytes go through the asyncio transport.
Regions, as Kafka's ``PlaintextTransportLayer.transferFrom``, go with ``os.sendfile``
straight from the segment file to the socket on PLAINTEXT connections, only while the
transport has nothing buffered so bytes stay in order; on TLS (as Kafka's
``SslTransportLayer``, and with ``TIDEGATE_FETCH_SENDFILE=0``) they are read in chunks
into one buffer of the request memory pool per connection (KIP-72), each written once the
transport has drained the previous one. A :class:`TransportLayer` first sends what the
socket takes at once (:meth:`TransportLayer.send_now`, no task); the rest goes on from a
task the connection runs (:meth:`TransportLayer.send`), waiting for the socket.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from tidegate.network.memory_pool import MemoryPool
from tidegate.record.file_region import FileRegion, RegionTruncatedError

__all__ = ["ChunkMemory", "TransportLayer", "close_regions", "sendfile_while_writable"]


def sendfile_while_writable(sock_fd: int, region: FileRegion, sent: int) -> int:
    """``os.sendfile`` the region from byte ``sent`` on until it is all sent or the
    socket is full; returns the bytes of the region sent by then. A region that ends
    early (its segment truncated under it) raises :class:`RegionTruncatedError`."""
    length = region.length
    while sent < length:
        try:
            n = os.sendfile(sock_fd, region.fd, region.position + sent, length - sent)
        except BlockingIOError:
            break
        if n == 0:
            raise RegionTruncatedError(f"file region truncated at {sent} of {length} bytes")
        sent += n
    return sent


def close_regions(pieces: Any) -> None:
    """Close the file regions of a response (sent, or never to be)."""
    for p in pieces:
        if isinstance(p, FileRegion):
            p.close()


class ChunkMemory:
    """The request memory pool as region sends use it (TLS): a send takes one chunk of
    at most :attr:`chunk_bytes`, waiting when the pool has no room; freed memory goes
    to waiting sends first (:meth:`hand_out`), ahead of connections muted for memory:
    sending responses is what lets their clients send requests."""

    #: the most bytes of a file region held in memory at once per connection (TLS)
    SEND_CHUNK = 64 * 1024

    def __init__(self, pool: MemoryPool, on_release: Callable[[], None]) -> None:
        self.pool = pool
        #: called when a chunk went back to the pool (the server hands the memory on)
        self.on_release = on_release
        #: sends waiting for pool memory for their chunk: (future, size)
        self.waiters: deque[tuple[asyncio.Future, int]] = deque()
        #: a chunk's size: SEND_CHUNK, or less if the pool allows no more at once
        self.chunk_bytes = min(self.SEND_CHUNK, getattr(pool, "max_single_allocation", self.SEND_CHUNK))

    async def allocate(self, size: int) -> bytearray:
        buf = self.pool.try_allocate(size)
        if buf is not None:
            return buf
        # handed over by hand_out, ahead of connections muted for memory
        waiter: asyncio.Future[bytearray] = asyncio.get_running_loop().create_future()
        self.waiters.append((waiter, size))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed over as the send ended
                self.release(waiter.result())
            raise

    def release(self, buf: bytearray) -> None:
        self.pool.release(buf)
        self.on_release()

    def hand_out(self) -> bool:
        """Give freed memory to the waiting sends, in arrival order; False when one is
        still waiting (the pool has no room for it)."""
        waiters = self.waiters
        while waiters:
            waiter, size = waiters[0]
            if waiter.done():  # its connection went away
                waiters.popleft()
                continue
            buf = self.pool.try_allocate(size)
            if buf is None:
                return False
            waiters.popleft()
            waiter.set_result(buf)
        return True


class Closable(Protocol):
    """What the transport layer reads of its connection: whether it went away."""

    closed: bool


class TransportLayer:
    """One connection's way to its socket for responses (Kafka's ``TransportLayer``):
    bytes through the asyncio ``transport``; file regions with ``sendfile`` on the
    socket's descriptor ``sock_fd`` (PLAINTEXT), or in chunks of ``memory`` when it is
    -1 (TLS, or sendfile off). ``connection.closed`` says whether the connection went
    away (the connection itself rather than a closure over it: a function and its
    cell were ~200 B of every open connection)."""

    __slots__ = ("_chunk", "_conn", "_drained", "_memory", "_writable_fd", "chunk_bytes", "sock_fd",
                 "transport")

    def __init__(self, transport: Any, sock_fd: int, memory: ChunkMemory, connection: Closable) -> None:
        self.transport = transport
        #: the socket's descriptor when regions go out with sendfile (PLAINTEXT), else -1
        self.sock_fd = sock_fd
        self._memory = memory
        self._conn = connection
        self._drained: asyncio.Future | None = None
        #: the pool buffer regions are read into on TLS (one per connection, while sending)
        self._chunk: bytearray | None = None
        #: its size: the memory this connection's response holds beyond the transport's
        self.chunk_bytes = 0
        #: a duplicate of the socket's descriptor, waited on for writability while a
        #: response is sent
        self._writable_fd = -1

    def write(self, pieces: Any) -> None:
        """Bytes pieces through the transport (buffered there if the socket is full)."""
        if len(pieces) == 1:
            self.transport.write(pieces[0])
        elif pieces:
            self.transport.writelines(pieces)

    @property
    def can_send_now(self) -> bool:
        """Regions can go out at once: with sendfile, and nothing buffered before them."""
        return self.sock_fd >= 0 and not self.transport.get_write_buffer_size()

    def send_now(self, pieces: Any) -> tuple[int, int] | None:
        """Send what the socket takes right now, without a task (:attr:`can_send_now`):
        byte pieces with ``os.write`` and regions with ``os.sendfile`` straight to the
        socket. None if everything went; else where to go on from: (piece index, bytes
        of that piece already sent). A frame cut short by the socket leaves the rest to
        :meth:`send`."""
        fd = self.sock_fd
        for i, piece in enumerate(pieces):
            if isinstance(piece, FileRegion):
                sent = sendfile_while_writable(fd, piece, 0)
                if sent < piece.length:
                    return i, sent
                piece.close()
            else:
                try:
                    n = os.write(fd, piece)
                except BlockingIOError:
                    n = 0
                if n < len(piece):
                    return i, n
        return None

    async def send(self, pieces: Any, start: tuple[int, int] = (0, 0)) -> None:
        """Send the pieces from ``start`` (piece index, bytes of it already sent) on:
        bytes through the transport, file regions with ``sendfile`` once the transport
        has drained and whenever the socket is writable again, or in chunks from the
        memory pool. The broker holds at most the transport's buffer (its high-water
        mark) plus one chunk per connection: a slow consumer is waited for, not buffered
        for. Every region is closed and the chunk released when it returns or raises
        (an ``OSError`` or ``RuntimeError``: a segment truncated under a region)."""
        transport = self.transport
        limits = transport.get_write_buffer_limits()
        # Told (writable_again) as soon as the transport's buffer is empty: only then may
        # sendfile write to the socket without reordering bytes, or the next chunk go.
        transport.set_write_buffer_limits(high=0, low=0)
        index, skip = start
        try:
            for piece in pieces[index:]:
                if self._conn.closed:
                    break
                if not isinstance(piece, FileRegion):
                    transport.write(memoryview(piece)[skip:] if skip else piece)
                elif self.sock_fd >= 0:
                    await self._sendfile(piece, skip)
                    piece.close()
                else:
                    await self._write_chunks(piece)
                    piece.close()
                skip = 0
        finally:
            close_regions(pieces)
            if not self._conn.closed:
                transport.set_write_buffer_limits(high=limits[1], low=limits[0])
            self._release_chunk()
            self._close_writable_fd()

    def writable_again(self) -> None:
        """The transport's buffer drained (or the connection went away): a send waiting
        for it goes on."""
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def _wait_drained(self) -> None:
        transport = self.transport
        while not self._conn.closed and transport.get_write_buffer_size():
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
            self._drained = None

    async def _wait_writable(self) -> None:
        """Until the socket can take more bytes. The transport owns the socket's
        descriptor in the loop, so the wait is on a duplicate of it (made once per
        response, on its first full socket)."""
        loop = asyncio.get_running_loop()
        if self._writable_fd < 0:
            self._writable_fd = os.dup(self.sock_fd)
        fd = self._writable_fd
        waiter = loop.create_future()

        def writable() -> None:
            if not waiter.done():
                waiter.set_result(None)

        loop.add_writer(fd, writable)
        try:
            await waiter
        finally:
            loop.remove_writer(fd)

    def _close_writable_fd(self) -> None:
        fd, self._writable_fd = self._writable_fd, -1
        if fd >= 0:
            os.close(fd)

    async def _sendfile(self, region: FileRegion, sent: int = 0) -> None:
        """``os.sendfile`` from the region's descriptor straight to the socket, only
        while the transport has nothing buffered (uvloop has no ``loop.sendfile``, and
        bytes must stay in order), waiting for the socket to be writable when it is
        full. No record byte is read into the broker."""
        while sent < region.length and not self._conn.closed:
            await self._wait_drained()
            if self._conn.closed:
                return
            sent = sendfile_while_writable(self.sock_fd, region, sent)
            if sent < region.length:
                await self._wait_writable()

    async def _write_chunks(self, region: FileRegion) -> None:
        """A region read in chunks of at most ``chunk_bytes`` into one buffer from the
        memory pool (held for the whole send, counted by ResponseMemoryInFlight), each
        written once the transport has drained the previous one. When the pool has no
        room the send waits for a release, as a request read does (KIP-72)."""
        transport = self.transport
        offset = 0
        while offset < region.length and not self._conn.closed:
            await self._wait_drained()
            if self._conn.closed:
                return
            buf = self._chunk
            if buf is None:
                size = min(self._memory.chunk_bytes, region.length - offset)
                buf = self._chunk = await self._memory.allocate(size)
                self.chunk_bytes = size
                if self._conn.closed:
                    return
            n = min(len(buf), region.length - offset)
            view = memoryview(buf)[:n]
            region.readinto_at(view, offset)
            transport.write(view)
            offset += n

    def _release_chunk(self) -> None:
        buf, self._chunk = self._chunk, None
        self.chunk_bytes = 0
        if buf is not None:
            self._memory.release(buf)
