"""tidegate.client: framing, scatter-gather writes, response matching, version
negotiation (with the KIP-511 fallback) and request timeouts, against socketpairs and
a tiny fake broker."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.conftest import readable
from tests.fake_broker import SILENT, AtVersion, FakeBroker
from tests.kio_codec import build, encode_body, response_class
from tidegate.client import KafkaClient, parse_bootstrap
from tidegate.client.connection import BrokerConnection, ConnectionState, InFlightRequest
from tidegate.client.errors import ConnectionError_, KafkaTimeoutError, NoBrokersAvailableError
from tidegate.client.framing import decode_response


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["PLAINTEXT://h:9092"]) == [("h", 9092)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap("nohost")
    with pytest.raises(ValueError):
        parse_bootstrap("")


def _readable(sock) -> None:
    """Until ``sock`` has something to read (data or EOF): a wait on the socket, not a sleep."""
    assert readable(sock, 10.0), "nothing arrived"


def _connected_pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    conn = BrokerConnection(1, "x", 0)
    conn.sock = a
    conn.state = ConnectionState.READY
    return conn, b


def test_connection_writes_with_sendmsg_scatter_gather(monkeypatch):
    conn, peer = _connected_pair()
    chunks = [bytearray(b"a" * 100), bytearray(b"b" * 50), bytearray(b"c" * 7)]
    calls = []
    real = conn.sock.sendmsg

    class Spy:
        def __init__(self, sock):
            self._s = sock

        def sendmsg(self, bufs):
            calls.append([len(b) for b in bufs])
            return real(bufs)

        def __getattr__(self, name):
            return getattr(self._s, name)

    conn.sock = Spy(conn.sock)
    req = InFlightRequest(1, 0, 9, 1, [b"head", *[memoryview(c) for c in chunks]], True, None, 0)
    conn.enqueue(req)
    conn.on_writable(0)
    assert calls == [[4, 100, 50, 7]]  # one call, four buffers, nothing joined
    assert list(conn.in_flight) == [req]
    got = peer.recv(1000)
    assert got == b"head" + b"a" * 100 + b"b" * 50 + b"c" * 7
    peer.close()


def test_connection_partial_writes_resume_where_they_stopped():
    conn, peer = _connected_pair()
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = [bytearray(bytes([i % 251]) * 50_000) for i in range(8)]
    req = InFlightRequest(1, 0, 9, 1, [memoryview(p) for p in payload], False, None, 0)
    conn.enqueue(req)
    received = bytearray()
    done = []
    deadline = time.monotonic() + 10
    while len(received) < 400_000 and time.monotonic() < deadline:
        done += conn.on_writable(0)
        try:
            peer.setblocking(False)
            received += peer.recv(65536)
        except BlockingIOError:
            pass
    assert bytes(received) == b"".join(payload)
    assert done == [req]  # acks=0 style: complete once written


def test_connection_reads_frames_split_anywhere():
    conn, peer = _connected_pair()
    frames = [
        struct.pack(">i", 4 + n) + struct.pack(">i", i) + bytes(n)
        for i, n in enumerate((0, 10, 70_000, 3))
    ]
    data = b"".join(frames)
    got = []
    for i in range(0, len(data), 777):
        peer.sendall(data[i : i + 777])
        _readable(conn.sock)
        out = conn.on_readable(0)
        assert out is not None
        got += out
    while len(got) < 4:
        got += conn.on_readable(0) or []
    assert [struct.unpack(">i", f[:4])[0] for f in got] == [0, 1, 2, 3]
    assert [len(f) for f in got] == [4, 14, 70_004, 7]
    peer.close()
    _readable(conn.sock)
    assert conn.on_readable(0) is None  # EOF


def test_connection_rejects_a_corrupt_size():
    conn, peer = _connected_pair()
    peer.sendall(struct.pack(">i", -5))
    _readable(conn.sock)
    with pytest.raises(ConnectionError_):
        conn.on_readable(0)


def _refuse_api_versions_v3(ver, req):
    """ApiVersions as a broker without v3 answers it (KIP-511): v0 with UNSUPPORTED_VERSION."""
    if ver == 3:
        return AtVersion(0, {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    return {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12},
                                          {"api_key": 18, "min_version": 0, "max_version": 2}]}


def _requests(fb):
    return [(k, v) for k, v, _ in fb.received]


def test_client_negotiates_versions_and_reads_metadata():
    fb = FakeBroker()
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}") as c:
            cluster = c.bootstrap(timeout_ms=5000)
            assert list(cluster.brokers) == [7]
            assert c.api_version(-1, 3) == 12
            assert _requests(fb)[:2] == [(18, 3), (3, 12)]
    finally:
        fb.close()


def test_client_falls_back_when_api_versions_v3_is_refused():
    fb = FakeBroker(handlers={18: _refuse_api_versions_v3})
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}") as c:
            c.bootstrap(timeout_ms=5000)
            assert _requests(fb)[:2] == [(18, 3), (18, 2)]
    finally:
        fb.close()


def _refuse_in_the_flexible_format(ver, req):
    """ApiVersions as librdkafka's mock cluster refuses v3: UNSUPPORTED_VERSION written
    in v3's own (flexible) format, which does not read as v0."""
    if ver == 3:
        return AtVersion(3, {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    return {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12},
                                          {"api_key": 18, "min_version": 0, "max_version": 2}]}


def test_client_asks_at_v0_when_a_refusal_does_not_read_as_v0():
    fb = FakeBroker(handlers={18: _refuse_in_the_flexible_format})
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}") as c:
            c.bootstrap(timeout_ms=5000)
            assert _requests(fb)[:3] == [(18, 3), (18, 0), (3, 12)]
    finally:
        fb.close()


def test_a_refused_api_versions_v0_is_a_clear_error():
    """A broker that refuses even ApiVersions v0: the connection fails, and a blocking
    call that waited for it names why."""
    fb = FakeBroker(handlers={18: lambda ver, req: AtVersion(0, {"error_code": 35, "api_keys": []})})
    try:
        with (
            KafkaClient(f"127.0.0.1:{fb.port}", reconnect_backoff_max_ms=50) as c,
            pytest.raises(NoBrokersAvailableError, match="last error: node -1 refused ApiVersions v0"),
        ):
            c.bootstrap(timeout_ms=1000)
        assert (18, 0) in _requests(fb)
    finally:
        fb.close()


def test_a_response_that_does_not_decode_fails_its_request_at_once():
    """A truncated body (the broker then stays silent): the request fails with a
    connection error now, not after its timeout, and the client reconnects."""
    fb = FakeBroker()
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}", request_timeout_ms=30_000) as c:
            c.bootstrap(timeout_ms=5000)
            fb.tamper = lambda key, ver, frame: struct.pack(">i", 6) + frame[4:10] if key == 3 else frame
            t0 = time.monotonic()
            with pytest.raises(ConnectionError_, match="cannot decode api_key=3"):
                c.request(3, {"topics": []}, timeout_ms=20_000)
            assert time.monotonic() - t0 < 5
            fb.tamper = None
            assert list(c.metadata([], timeout_ms=5000).brokers) == [7]
    finally:
        fb.close()


def test_client_request_timeout_closes_the_connection():
    fb = FakeBroker(handlers={3: lambda ver, req: SILENT})
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}", request_timeout_ms=200) as c:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                c.request(3, {"topics": []}, timeout_ms=3000)
            assert time.monotonic() - t0 < 2.5
            assert c.connection(-1).state is ConnectionState.DISCONNECTED
    finally:
        fb.close()


def test_a_node_busy_with_max_in_flight_requests_is_not_connected_again():
    """Every connection at max.in.flight: no least loaded node (Kafka's leastLoadedNode
    returns null), never a second connect on the busy connection's node, which swapped
    its socket under the selector and killed the producer's sender thread (KeyError: not
    registered) when the Spark sink wrote with max.in.flight 1."""
    fb = FakeBroker(handlers={3: lambda ver, req: SILENT})
    try:
        with KafkaClient(f"127.0.0.1:{fb.port}", max_in_flight_requests_per_connection=1) as c:
            node = c.await_ready(timeout_ms=5000)
            sock = c.connection(node).sock
            c.send(node, 3, {"topics": []}, version=12)
            assert c.least_loaded_node() is None
            c.poll(10)
            assert c.connection(node).sock is sock and c.connection(node).state is ConnectionState.READY
    finally:
        fb.close()


def test_client_no_broker_fails_clearly():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    with (
        KafkaClient(f"127.0.0.1:{port}", reconnect_backoff_max_ms=50) as c,
        pytest.raises(NoBrokersAvailableError, match="no broker ready"),
    ):
        c.bootstrap(timeout_ms=300)


def test_decode_response_skips_tagged_fields():
    resp = build(response_class(3, 12), {"brokers": [], "topics": [], "controller_id": 1})
    # header v1 with one tagged field (tag 5, 2 bytes) before the body
    frame = struct.pack(">i", 99) + b"\x01\x05\x02ab" + encode_body(resp)
    cid, body = decode_response(3, 12, frame)
    assert cid == 99 and body.controller_id == 1
