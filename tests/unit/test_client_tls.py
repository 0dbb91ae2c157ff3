"""BrokerConnection over TLS with real loopback sockets: the non-blocking handshake,
writes that meet SSLWantWriteError (the chunk is retried unchanged and the bytes
arrive exactly once, in order), and reads that drain OpenSSL's buffer.

The peer is a blocking ``ssl`` server in a thread that does not read until the
client's socket buffer is full."""

from __future__ import annotations

import selectors
import socket
import ssl
import struct
import threading

import pytest
import trustme

from tidegate.client.connection import BrokerConnection, ConnectionState, InFlightRequest
from tidegate.client.errors import SslAuthenticationError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def _server_context(ca) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    return ctx


def _client_context(ca) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(ctx)
    return ctx


def _wait(conn: BrokerConnection, sel: selectors.BaseSelector, write: bool) -> None:
    sel.modify(conn.sock, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
    assert sel.select(10), "socket not ready within 10 s"


def _connect(conn: BrokerConnection, sel: selectors.BaseSelector) -> None:
    conn.connect(0)
    sel.register(conn.sock, selectors.EVENT_WRITE)
    assert sel.select(10)
    sel.unregister(conn.sock)
    conn.finish_connect()
    assert conn.state is ConnectionState.TLS_HANDSHAKE
    sel.register(conn.sock, selectors.EVENT_WRITE)
    while not conn.do_handshake():
        _wait(conn, sel, conn.handshake_wants_write)
    assert conn.state is ConnectionState.CHECKING_API_VERSIONS


def test_tls_writes_retry_the_same_chunk_and_reads_drain(ca):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    # a mix of small buffers (joined into chunks) and large ones (sliced)
    bufs = [bytes([i % 251]) * size for i, size in
            enumerate([4, 2, 100, 70_000, 3, 900_000, 17, 16_384, 5, 1_200_000, 1])]  # fmt: skip
    expected = b"".join(bufs)
    responses = [struct.pack(">i", 4 + 200_000) + struct.pack(">i", 7) + b"r" * 200_000,
                 struct.pack(">i", 4 + 3) + struct.pack(">i", 8) + b"abc"]  # fmt: skip
    client_blocked = threading.Event()
    received: list[bytes] = []

    def serve() -> None:
        raw, _ = listener.accept()
        with _server_context(ca).wrap_socket(raw, server_side=True) as s:
            client_blocked.wait(20)
            got = bytearray()
            while len(got) < len(expected):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            received.append(bytes(got))
            s.sendall(b"".join(responses))
            s.recv(1)  # until the client closes

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = BrokerConnection(0, "127.0.0.1", port, send_buffer_bytes=65536,
                            ssl_context=_client_context(ca))  # fmt: skip
    sel = selectors.DefaultSelector()
    try:
        _connect(conn, sel)
        req = InFlightRequest(0, 0, 0, 7, bufs, True, None, 0)
        conn.enqueue(req)
        conn.on_writable(1)
        # the peer does not read yet: the write stopped on SSLWantWriteError with a
        # chunk pending that must be retried as it is
        assert conn.wants_write and conn._tls_chunk is not None
        pending = bytes(conn._tls_chunk)
        conn.on_writable(2)
        assert bytes(conn._tls_chunk) == pending
        client_blocked.set()
        while conn.wants_write:
            _wait(conn, sel, True)
            conn.on_writable(3)
        assert list(conn.in_flight) == [req] and req.sent_ns == 3
        frames: list[bytes] = []
        while len(frames) < 2:
            _wait(conn, sel, False)
            got = conn.on_readable(4)
            assert got is not None
            frames += got
        assert frames == [r[4:] for r in responses]
    finally:
        sel.close()
        conn.close()
        listener.close()
        t.join(10)
    assert received == [expected]


def test_untrusted_server_is_an_ssl_authentication_error(ca):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        raw, _ = listener.accept()
        try:
            with _server_context(trustme.CA()).wrap_socket(raw, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = BrokerConnection(0, "127.0.0.1", port, ssl_context=_client_context(ca))
    sel = selectors.DefaultSelector()
    try:
        with pytest.raises(SslAuthenticationError, match="CERTIFICATE_VERIFY_FAILED"):
            _connect(conn, sel)
    finally:
        sel.close()
        conn.close()
        listener.close()
        t.join(10)
