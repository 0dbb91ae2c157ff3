"""TLS listeners: SSL and SASL_SSL with real clients, the certificate principal, and
muting over TLS. Certificates are made at run time with trustme; no key is committed."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct

import pytest

from tests.conftest import free_port
from tests.integration.clients import USERS, roundtrip, write_users
from tests.integration.rawclient import RawClient, frame
from tests.unit.test_connection import HoldingProcessor, Processor
from tidegate.clock import SYSTEM_CLOCK
from tidegate.network.memory_pool import NONE, SimpleMemoryPool
from tidegate.network.mute_state import MuteReason
from tidegate.network.request_channel import PARKED, Request, RequestChannel, SendResponse
from tidegate.network.socket_server import SocketServer
from tidegate.scheduler import AsyncioScheduler
from tidegate.security.listener import ListenerSecurity
from tidegate.security.tls import build_server_context, subject_dn

pytestmark = pytest.mark.timeout(120)


def test_subject_dn_is_rfc2253_most_specific_first():
    cert = {"subject": ((("countryName", "NL"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "writer"),))}
    assert subject_dn(cert) == "CN=writer,O=Acme\\, Inc,C=NL"
    assert subject_dn({}) is None


# -- in-process: the shell over TLS ------------------------------------------------------
class RecordingProcessor(Processor):
    """Parks every request (its memory released) until the test answers it."""

    def __init__(self):
        self.requests: list[tuple[bytes, str, Request]] = []
        self.server = None

    def handle(self, request):
        payload = bytes(request.payload)  # release_buffer drops the bytes of a parked request
        request.release_buffer()
        self.requests.append((payload, request.context.principal, request))
        return PARKED

    def answer(self, i, data):
        self.server.channel.send_response(self.requests[i][2], SendResponse([data]))


def server_settings(pki, client_auth="none", truststore=None):
    """The SSL listener keys of a shell-level test."""
    return {"ssl.keystore.location": str(pki["server"]), "ssl.key.password": None,
            "ssl.client.auth": client_auth, "ssl.truststore.location": truststore,
            "ssl.truststore.certificates": None}


async def wait_for(check, what):
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def shell(proc, pool, max_request_size):
    """A SocketServer on the running loop's scheduler, answering for ``proc``."""
    server = SocketServer(proc, RequestChannel(), pool, max_request_size,
                          AsyncioScheduler(asyncio.get_running_loop(), SYSTEM_CLOCK), clock=SYSTEM_CLOCK)
    proc.server = server
    return server


async def tls_shell(pki, settings, proc, pool, max_request_size):
    """:func:`shell` with an SSL listener: (server, host, port, a client context that
    trusts the test CA)."""
    server = shell(proc, pool, max_request_size)
    sec = ListenerSecurity("SSL", "SSL", ssl_context=build_server_context(settings.get, "SSL"))
    host, port = await server.start_listener("SSL", "127.0.0.1", 0, sec)
    return server, host, port, ssl.create_default_context(cafile=str(pki["ca"]))


async def open_tls(host, port, client_ctx):
    return await asyncio.wait_for(asyncio.open_connection(
        host, port, ssl=client_ctx, server_hostname="127.0.0.1"), 10)


@pytest.mark.parametrize("client_auth, with_cert, principal", [
    ("required", True, "CN=writer,OU=clients,O=Tidegate Tests"),
    ("requested", False, "ANONYMOUS"),
    ("none", True, "ANONYMOUS"),
])
def test_tls_shell_principal_and_muting(pki, client_auth, with_cert, principal):
    settings = server_settings(pki, client_auth, str(pki["ca"]))

    async def run():
        proc = RecordingProcessor()
        server, host, port, client_ctx = await tls_shell(pki, settings, proc, NONE, 1 << 20)
        if with_cert:
            client_ctx.load_cert_chain(str(pki["client"]))
        reader, writer = await asyncio.open_connection(host, port, ssl=client_ctx,
                                                       server_hostname="127.0.0.1")
        # two pipelined requests: the second is read (held, muted RECEIVED) but not
        # processed while the first is in flight
        writer.write(frame(b"first-request") + frame(b"second-request"))
        await writer.drain()
        for _ in range(100):
            if proc.requests:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert [r[0] for r in proc.requests] == [b"first-request"]
        (conn,) = server.connections.values()
        assert conn.mute_state.reasons == MuteReason.IN_FLIGHT | MuteReason.RECEIVED
        assert conn.principal == principal and conn.authenticated
        proc.answer(0, frame(b"one"))
        for _ in range(100):
            if len(proc.requests) == 2:
                break
            await asyncio.sleep(0.01)
        assert [r[0] for r in proc.requests] == [b"first-request", b"second-request"]
        assert {r[1] for r in proc.requests} == {principal}
        proc.answer(1, frame(b"two"))
        got = await asyncio.wait_for(reader.readexactly(14), 5)
        assert got == frame(b"one") + frame(b"two")
        writer.close()
        await server.shutdown(1)

    asyncio.run(run())


@pytest.mark.parametrize("rules, principal", [
    ("RULE:^CN=([^,]*),.*$/$1/L,DEFAULT", "writer"),
    ("DEFAULT", "CN=writer,OU=clients,O=Tidegate Tests"),
    ("RULE:^CN=reader,.*$/reader/", None),  # no rule matches: refused, as Kafka's principal builder
])
def test_the_certificate_dn_becomes_the_principal_through_the_mapping_rules(pki, rules, principal):
    """Kafka's DefaultKafkaPrincipalBuilder maps an SSL client's DN once, when it
    connects, so ACLs, quotas and logs all see the mapped name; a DN no rule matches
    fails the connection."""
    from tidegate.security.authorizer.principal import SslPrincipalMapper

    settings = server_settings(pki, "required", str(pki["ca"]))

    async def run():
        proc = RecordingProcessor()
        server = shell(proc, NONE, 1 << 20)
        sec = ListenerSecurity("SSL", "SSL", ssl_context=build_server_context(settings.get, "SSL"),
                               principal_mapper=SslPrincipalMapper(rules))
        host, port = await server.start_listener("SSL", "127.0.0.1", 0, sec)
        client_ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        client_ctx.load_cert_chain(str(pki["client"]))
        reader, writer = await open_tls(host, port, client_ctx)
        writer.write(frame(b"request"))
        await writer.drain()
        if principal is None:
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing read
            assert proc.requests == []
        else:
            await wait_for(lambda: proc.requests, "the request")
            assert proc.requests[0][1] == principal
        writer.close()
        await server.shutdown(1)

    asyncio.run(run())


def test_tls_required_client_auth_refuses_clients_without_a_certificate(pki):
    settings = server_settings(pki, "required", str(pki["ca"]))

    async def run():
        proc = RecordingProcessor()
        server, host, port, client_ctx = await tls_shell(pki, settings, proc, NONE, 1 << 20)
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection(host, port, ssl=client_ctx,
                                                           server_hostname="127.0.0.1")
            writer.write(frame(b"x"))
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(1), 5)
        assert not proc.requests
        await server.shutdown(1)

    asyncio.run(run())


def test_tls_memory_muting_keeps_handshakes_and_already_decrypted_bytes(pki):
    """KIP-72 over TLS (docs/memory-pool.md, "TLS"): a connection muted for memory
    has bytes already decrypted in its TLS layer, which the socket will never signal
    again; resuming must drain them. A handshake is never muted: a connection is only
    handed to the shell (and can only be muted) once its handshake is done."""
    settings = server_settings(pki)

    async def run():
        pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=SYSTEM_CLOCK)
        proc = HoldingProcessor()  # keeps each request's memory until answered
        server, host, port, client_ctx = await tls_shell(pki, settings, proc, pool, 1000)

        _ra, wa = await open_tls(host, port, client_ctx)
        wa.write(frame(b"A" * 1000))  # fills the pool
        await wait_for(lambda: len(proc.requests) == 1, "A's request")
        assert pool.available == 0
        (conn_a,) = server.connections.values()

        rb, wb = await open_tls(host, port, client_ctx)
        b1, b2 = b"first:" + b"1" * 300, b"second:" + b"2" * 400
        wb.write(frame(b1) + frame(b2))  # one write: one TLS record holding both frames
        await wait_for(lambda: server.memory_muted, "B to be muted for memory")
        (conn_b,) = server.memory_muted
        assert conn_b.mute_state.reasons == MuteReason.MEMORY
        ssl_b = conn_b.transport.get_extra_info("ssl_object")
        # B's bytes after its size prefix were taken off the socket and decrypted
        await wait_for(lambda: ssl_b.pending() == len(b1) + 4 + len(b2), "B's decrypted bytes")

        # the pool is empty: a new TLS connection still completes its handshake
        _rc, wc = await open_tls(host, port, client_ctx)
        await wait_for(lambda: len(server.connections) == 3, "C's connection")
        (conn_c,) = set(server.connections.values()) - {conn_a, conn_b}
        assert conn_c.transport.get_extra_info("ssl_object").version() is not None
        assert conn_c.mute_state.reasons == MuteReason.NONE
        assert len(proc.requests) == 1 and conn_b in server.memory_muted

        proc.answer(0, frame(b"done-a"))  # A answered: its 1000 bytes back
        await wait_for(lambda: len(proc.requests) == 2, "B's first frame")
        assert proc.requests[1][0] == b1
        proc.answer(1, frame(b"r1"))
        await wait_for(lambda: len(proc.requests) == 3, "B's second frame")
        assert proc.requests[2][0] == b2
        proc.answer(2, frame(b"r2"))
        assert await asyncio.wait_for(rb.readexactly(12), 5) == frame(b"r1") + frame(b"r2")
        await wait_for(lambda: pool.outstanding == 0, "every buffer back")
        assert pool.available == 1000
        for w in (wa, wb, wc):
            w.close()
        await server.shutdown(1)

    asyncio.run(run())


def test_tls_region_chunks_come_from_the_memory_pool(pki, tmp_path):
    """On TLS a file region cannot be sent with sendfile: it is read in chunks, each a
    buffer of the request memory pool held until the transport has drained it, so a
    slow TLS consumer holds one chunk of pool memory (and the KIP-72 bound covers every
    connection's), and the chunks go back to the pool once sent."""
    from tidegate.record.file_region import FileRegion

    settings = server_settings(pki)
    data = bytes(range(256)) * 4096 * 8  # 8 MiB: more than the socket buffers take
    segment = tmp_path / "segment"
    segment.write_bytes(data)

    async def run():
        pool = SimpleMemoryPool(200_000, 200_000, strict=False, debug=True, clock=SYSTEM_CLOCK)
        proc = HoldingProcessor()
        server, host, port, client_ctx = await tls_shell(pki, settings, proc, pool, 1000)
        chunk = server.chunk_memory.SEND_CHUNK
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # a slow consumer
        sock.connect((host, port))
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            sock=sock, ssl=client_ctx, server_hostname="127.0.0.1", limit=1 << 16), 10)
        (conn,) = server.connections.values()
        writer.write(frame(b"fetch"))
        await wait_for(lambda: len(proc.requests) == 1, "the request")
        fd = os.open(segment, os.O_RDONLY)
        region = FileRegion.of(fd, 0, len(data))
        os.close(fd)
        server.channel.send_response(proc.requests[0][1], SendResponse([struct.pack(">i", len(data)), region]))
        # the client does not read: the send stops with one chunk out of the pool
        await wait_for(lambda: conn.transport_layer.chunk_bytes == chunk, "a chunk held for the slow reader")
        await asyncio.sleep(0.2)
        assert pool.size - pool.available == chunk  # the request's buffer is back, one chunk out
        assert server.response_bytes_in_flight() <= 2 * chunk + 64 * 1024
        got = await asyncio.wait_for(reader.readexactly(4 + len(data)), 30)
        assert got == struct.pack(">i", len(data)) + data
        await wait_for(lambda: pool.available == pool.size, "every chunk back in the pool")
        assert conn.transport_layer.chunk_bytes == 0
        writer.close()
        await server.shutdown(1)

    asyncio.run(run())


def test_tls_region_send_waits_for_pool_memory_and_reuses_one_chunk(pki, tmp_path):
    """On TLS a response's file region is read into one chunk from the request memory
    pool (KIP-72), counted by ResponseMemoryInFlight: with the pool empty the send waits,
    a release hands the chunk over ahead of requests, and the region (several chunks
    through the one buffer) arrives intact; the chunk goes back when the send is done."""
    from tidegate.record.file_region import FileRegion

    settings = server_settings(pki)
    data = os.urandom(300_000)
    path = tmp_path / "segment.log"
    path.write_bytes(data)

    class Proc(HoldingProcessor):
        """Keeps the memory of requests starting with A, releases the others'."""

        def handle(self, request):
            if not bytes(request.payload).startswith(b"A"):
                request.release_buffer()
            return super().handle(request)

    async def run():
        pool = SimpleMemoryPool(100_000, 100_000, strict=False, debug=True, clock=SYSTEM_CLOCK)
        proc = Proc()
        server, host, port, client_ctx = await tls_shell(pki, settings, proc, pool, 100_000)

        rb, wb = await open_tls(host, port, client_ctx)
        wb.write(frame(b"fetch"))
        await wait_for(lambda: len(proc.requests) == 1, "B's request")
        _ra, wa = await open_tls(host, port, client_ctx)
        wa.write(frame(b"A" * 100_000))  # held: the pool is empty
        await wait_for(lambda: len(proc.requests) == 2, "A's request")
        assert pool.available == 0
        conn_b = proc.requests[0][1].context.connection_id
        fd = os.open(path, os.O_RDONLY)
        try:
            region = FileRegion.of(fd, 0, len(data))
        finally:
            os.close(fd)
        proc.server.channel.send_response(proc.requests[0][1], SendResponse([struct.pack(">i", len(data)), region]))
        assert await asyncio.wait_for(rb.readexactly(4), 5) == struct.pack(">i", len(data))
        await wait_for(lambda: server.chunk_memory.waiters, "B's send to wait for a chunk")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(rb.readexactly(1), 0.3)
        assert server.connections[conn_b].transport_layer.chunk_bytes == 0
        proc.answer(1, frame(b"done-a"))  # A's 100,000 bytes back: B's chunk first
        got = await asyncio.wait_for(rb.readexactly(len(data)), 10)
        assert got == data
        await wait_for(lambda: pool.outstanding == 0, "the chunk back in the pool")
        assert server.response_bytes_in_flight() == 0 and region.fd == -1
        for w in (wa, wb):
            w.close()
        await server.shutdown(1)

    asyncio.run(run())


# -- a broker process with real clients --------------------------------------------------
@pytest.fixture
def tls_broker(broker_factory, tmp_path, pki):
    ssl_port, sasl_ssl_port = free_port(), free_port()
    proc = broker_factory({
        "listeners": f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        # the SSL listener reads PEM files, the SASL_SSL one PEM text (listener overrides)
        "ssl.keystore.location": str(pki["server"]),
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": pki["server_chain_text"],
        "listener.name.sasl_ssl.ssl.keystore.key": pki["server_key_text"],
        "ssl.truststore.location": str(pki["ca"]),
        "ssl.client.auth": "requested",
        "sasl.credentials.file": str(write_users(tmp_path / "users.json")),
    })
    return proc, proc.listener("SSL"), proc.listener("SASL_SSL")


def test_confluent_over_ssl_with_client_certificate(tls_broker, pki):
    _, ssl_addr, _ = tls_broker
    conf = {"bootstrap.servers": ssl_addr, "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"]), "ssl.certificate.location": str(pki["client_cert"]),
            "ssl.key.location": str(pki["client_key"])}
    assert roundtrip(conf, 20, prefix="tls") == [f"v{i}".encode() for i in range(20)]


def test_confluent_over_sasl_ssl_scram(tls_broker, pki):
    _, _, sasl_addr = tls_broker
    conf = {"bootstrap.servers": sasl_addr, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}
    assert roundtrip(conf, 20, prefix="tls") == [f"v{i}".encode() for i in range(20)]


def test_plaintext_client_on_a_tls_listener_is_dropped(tls_broker):
    proc, ssl_addr, _ = tls_broker
    with RawClient.connect(ssl_addr) as rc:
        rc.send(18, 3, {"client_software_name": "raw", "client_software_version": "1"})
        assert rc.closed_by_peer(10)
    assert proc.alive()


def test_kafka_python_over_ssl_and_sasl_ssl(tls_broker, pki):
    _, ssl_addr, sasl_addr = tls_broker
    for conf in (
        {"bootstrap_servers": ssl_addr, "security_protocol": "SSL", "ssl_cafile": str(pki["ca"])},
        {"bootstrap_servers": sasl_addr, "security_protocol": "SASL_SSL",
         "ssl_cafile": str(pki["ca"]), "sasl_mechanism": "PLAIN",
         "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"]},
    ):
        got = roundtrip(conf, 10, client="kafka-python", prefix="kp")
        assert got == [f"v{i}".encode() for i in range(10)], conf["security_protocol"]
