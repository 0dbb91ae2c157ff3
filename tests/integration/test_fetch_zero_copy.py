"""Fetch responses sent from the segment files (sendfile, regions): a slow consumer
holds the broker to a bounded amount of memory (on TLS, one chunk from the request
memory pool), a segment deleted by retention or DeleteRecords while its bytes are in
flight still sends them whole, and one cut short under a region closes only that
connection."""

import os
import re
import socket
import ssl
import struct
import time
import urllib.request

import pytest

from tests.conftest import metrics_overrides, readable, wait_until
from tests.integration.rawclient import (
    RawClient,
    create_topics_body,
    decode_response,
    fetch_body,
    produce_partition,
    repeated_batch,
)
from tidegate.record.records import decode_batch_records, iter_decoded_batches

RECORD = 64 * 1024
PER_BATCH = 15  # just under 1 MiB batches (max.message.bytes)
BATCHES = 8  # one ~8 MiB segment, then the next batch rolls
ROLL = b"r" * RECORD


def gauge(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert m, name
    return float(m.group(1))


@pytest.mark.parametrize("how", ["retention", "delete_records"])
def test_segment_deleted_mid_send_still_sends_and_memory_stays_bounded(broker_factory, how):
    b = broker_factory(
        {
            **metrics_overrides(),
            "log.retention.check.interval.ms": 200,
            "log.segment.bytes": BATCHES * (PER_BATCH * (RECORD + 100) + 100),
        }
    )
    # records carry timestamp 0: retention is off until the fetch is in flight
    values = [bytes([i]) * RECORD for i in range(BATCHES)]
    with RawClient.connect(b.bootstrap) as c:
        assert c.request(19, 7, create_topics_body("zc", configs={"retention.ms": "-1"})).topics[0].error_code == 0
        for v in values:
            assert produce_partition(c, "zc", repeated_batch(v, PER_BATCH)).error_code == 0
        # too big for what is left of segment 0: it rolls
        assert produce_partition(c, "zc", repeated_batch(ROLL, 1)).error_code == 0
    segment0 = b.data_dir / "zc-0" / "00000000000000000000.log"
    assert segment0.exists()
    with RawClient.connect(b.bootstrap, timeout=30) as slow:
        # a consumer that does not read: the broker's socket fills and it must wait
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        cid = slow.send(1, 12, fetch_body("zc", 0, partition_max_bytes=64 * 1024 * 1024))
        # the response has begun (its regions were taken from segment 0) before the delete
        assert readable(slow.sock, 10), "no response bytes within 10 s"
        time.sleep(0.2)  # and the broker's socket buffer has filled
        # held: at most one chunk of a region in the transport, not the 8 MiB response
        held = gauge(b.metrics_url, "kafka_network_socketserver_responsememoryinflight")
        assert held <= 2 * 64 * 1024, held
        with RawClient.connect(b.bootstrap) as admin:
            if how == "retention":
                resource = {"resource_type": 2, "resource_name": "zc",
                            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]}
                alter = admin.request(44, 1, {"resources": [resource], "validate_only": False})
                assert alter.responses[0].error_code == 0
            else:  # everything below the roll batch: segment 0 is deleted at once
                body = {"topics": [{"name": "zc", "partitions": [
                    {"partition_index": 0, "offset": BATCHES * PER_BATCH}]}], "timeout": 10_000}
                deleted = admin.request(21, 2, body).topics[0].partitions[0]
                assert (deleted.error_code, deleted.low_watermark) == (0, BATCHES * PER_BATCH)
        wait_until(lambda: not segment0.exists(), 30, interval=0.2, what=f"{how} deleting segment 0")
        got, resp = decode_response(1, 12, slow.recv_frame())
    assert got == cid
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    batches = list(iter_decoded_batches(part.records))
    # the whole segment 0, read from the deleted file
    assert len(batches) >= BATCHES
    expected = [[v] * PER_BATCH for v in values] + [[ROLL]]
    assert [[r.value for r in decode_batch_records(x)] for x in batches] == expected[: len(batches)]


# -- TLS: regions read into pool memory; a segment cut short under a region ----------------
CHUNK = 64 * 1024


def _tls_overrides(pki, extra: dict | None = None) -> dict:
    from tests.conftest import free_port

    return {
        **metrics_overrides(),
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{free_port()}",
        "ssl.keystore.location": str(pki["server"]),
        "ssl.truststore.location": str(pki["ca"]),
        # a pool, so the region chunks read for TLS are taken from it and counted
        "queued.max.request.bytes": 16 * 1024 * 1024,
        "socket.request.max.bytes": 16 * 1024 * 1024,
        **(extra or {}),
    }


def _client_tls(pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    return ctx


def _fill(b, topic: str, values: list[bytes]) -> None:
    with RawClient.connect(b.bootstrap) as c:
        assert c.request(19, 7, create_topics_body(topic)).topics[0].error_code == 0
        for v in values:
            assert produce_partition(c, topic, repeated_batch(v, PER_BATCH)).error_code == 0


def _read_until_closed(c: RawClient, timeout: float = 30) -> bytes:
    """Everything the broker sends until it closes the connection."""
    got = bytearray()
    c.sock.settimeout(timeout)
    while True:
        try:
            chunk = c.sock.recv(1 << 20)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        got += chunk
    return bytes(got)


def test_tls_slow_consumer_holds_one_pool_chunk(broker_factory, pki):
    """A TLS consumer that does not read: the broker holds its socket buffer plus one
    region chunk taken from the request memory pool (counted), never the response; the
    response then arrives whole and the chunk goes back to the pool."""
    b = broker_factory(_tls_overrides(pki))
    values = [bytes([i + 1]) * RECORD for i in range(BATCHES)]
    _fill(b, "tlszc", values)
    with RawClient.connect(b.listener("SSL"), timeout=30, ssl_context=_client_tls(pki),
                           receive_buffer=CHUNK) as slow:
        cid = slow.send(1, 12, fetch_body("tlszc", 0, partition_max_bytes=64 * 1024 * 1024))
        wait_until(lambda: gauge(b.metrics_url, "kafka_network_socketserver_memorypoolused") > 0, 10,
                   what="a region chunk taken from the pool")
        time.sleep(0.5)  # the socket is full: the send has stalled
        held = gauge(b.metrics_url, "kafka_network_socketserver_responsememoryinflight")
        used = gauge(b.metrics_url, "kafka_network_socketserver_memorypoolused")
        # the chunk (from the pool) plus its encrypted copy in the TLS transport at most
        assert CHUNK <= held <= 2 * CHUNK + 16 * 1024, held
        assert used == CHUNK, used
        # meanwhile the broker serves others
        with RawClient.connect(b.bootstrap) as other:
            part = other.request(1, 12, fetch_body("tlszc", 0, partition_max_bytes=CHUNK)).responses[0].partitions[0]
            assert part.error_code == 0 and part.records
        got, resp = decode_response(1, 12, slow.recv_frame())
    assert got == cid
    batches = list(iter_decoded_batches(resp.responses[0].partitions[0].records))
    assert [[r.value for r in decode_batch_records(x)] for x in batches] == [[v] * PER_BATCH for v in values]
    wait_until(lambda: gauge(b.metrics_url, "kafka_network_socketserver_memorypoolused") == 0, 10,
               what="the chunk back in the pool")
    assert gauge(b.metrics_url, "kafka_network_socketserver_responsememoryinflight") == 0


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_segment_truncated_mid_send_closes_only_that_connection(broker_factory, pki, listener):
    """A segment file cut short while a region of it is being sent (sendfile on
    PLAINTEXT, pool chunks on TLS): the frame cannot be completed, so that connection
    is closed with no garbage after the bytes that were sent; the broker keeps serving."""
    b = broker_factory(_tls_overrides(pki))
    values = [bytes([i + 1]) * RECORD for i in range(BATCHES)]
    _fill(b, "cut", values)
    _fill(b, "other", [b"o" * 100])
    segment = b.data_dir / "cut-0" / "00000000000000000000.log"
    original = segment.read_bytes()
    tls = _client_tls(pki) if listener == "SSL" else None
    with RawClient.connect(b.listener(listener), timeout=30, ssl_context=tls, receive_buffer=CHUNK) as slow:
        slow.send(1, 12, fetch_body("cut", 0, partition_max_bytes=64 * 1024 * 1024))
        time.sleep(0.5)  # the send has stalled on the full socket
        # past what the socket buffers have taken already (a few MiB)
        cut = len(original) - 2 * PER_BATCH * RECORD
        os.truncate(segment, cut)
        data = _read_until_closed(slow)
    (frame_size,) = struct.unpack(">i", data[:4])
    assert len(data) - 4 < frame_size, "the connection closes before the frame is complete"
    # the records are the segment from its start: what arrived after the header is
    # the segment's bytes up to the cut, nothing else
    header = data.index(original[:61], 0, 200)  # the first batch's header
    assert len(data) <= header + cut
    assert data[header:] == original[: len(data) - header]
    with RawClient.connect(b.bootstrap) as other:
        part = other.request(1, 12, fetch_body("other", 0)).responses[0].partitions[0]
        assert part.error_code == 0
        assert [r.value for x in iter_decoded_batches(part.records) for r in decode_batch_records(x)] == [b"o" * 100] * PER_BATCH
    assert b.alive()
