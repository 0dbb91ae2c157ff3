"""Fetch responses sent from the segment files (sendfile, regions): a slow consumer
holds the broker to a bounded amount of memory, and a segment deleted by retention
while its bytes are in flight still sends them whole."""

import re
import socket
import time
import urllib.request

from tests.conftest import metrics_overrides, wait_until
from tests.integration.rawclient import (
    RawClient,
    create_topics_body,
    decode_response,
    fetch_body,
    produce_partition,
    repeated_batch,
)
from tidegate.log.records import decode_batch_records, iter_decoded_batches

RECORD = 64 * 1024
PER_BATCH = 15  # just under 1 MiB batches (max.message.bytes)
BATCHES = 8  # one ~8 MiB segment, then the next batch rolls


def gauge(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert m, name
    return float(m.group(1))


def test_segment_deleted_mid_send_still_sends_and_memory_stays_bounded(broker_factory):
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
        for v in [*values, b"roll"]:
            assert produce_partition(c, "zc", repeated_batch(v, PER_BATCH if v != b"roll" else 1)).error_code == 0
    segment0 = b.data_dir / "zc-0" / "00000000000000000000.log"
    assert segment0.exists()
    with RawClient.connect(b.bootstrap, timeout=30) as slow:
        # a consumer that does not read: the broker's socket fills and it must wait
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        cid = slow.send(1, 12, fetch_body("zc", 0, partition_max_bytes=64 * 1024 * 1024))
        time.sleep(0.5)
        # held: at most one chunk of a region in the transport, not the 8 MiB response
        held = gauge(b.metrics_url, "kafka_network_socketserver_responsememoryinflight")
        assert held <= 2 * 64 * 1024, held
        with RawClient.connect(b.bootstrap) as admin:
            resource = {"resource_type": 2, "resource_name": "zc",
                        "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]}
            alter = admin.request(44, 1, {"resources": [resource], "validate_only": False})
            assert alter.responses[0].error_code == 0
        wait_until(lambda: not segment0.exists(), 30, interval=0.2, what="retention deleting segment 0")
        got, resp = decode_response(1, 12, slow.recv_frame())
    assert got == cid
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    batches = list(iter_decoded_batches(part.records))
    # the whole segment 0, read from the deleted file
    assert len(batches) >= BATCHES
    expected = [[v] * PER_BATCH for v in values] + [[b"roll"]]
    assert [[r.value for r in decode_batch_records(x)] for x in batches] == expected[: len(batches)]


def test_a_segment_truncated_under_a_region_closes_only_that_connection(broker_factory):
    """A segment file cut short while a region of it is being sent (nothing in the broker
    does that; an operator or a failing disk can): the frame cannot be completed, so the
    broker closes that connection (the client retries, as with Kafka's FileRecords
    writeTo) instead of sending garbage, and keeps serving everyone else."""
    b = broker_factory({"log.segment.bytes": BATCHES * (PER_BATCH * (RECORD + 100) + 100)})
    values = [bytes([i]) * RECORD for i in range(BATCHES)]
    with RawClient.connect(b.bootstrap) as c:
        assert c.request(19, 7, create_topics_body("zt")).topics[0].error_code == 0
        assert c.request(19, 7, create_topics_body("other")).topics[0].error_code == 0
        for v in [*values, b"roll"]:
            assert produce_partition(c, "zt", repeated_batch(v, PER_BATCH if v != b"roll" else 1)).error_code == 0
    segment0 = b.data_dir / "zt-0" / "00000000000000000000.log"
    with RawClient.connect(b.bootstrap, timeout=30) as slow:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.send(1, 12, fetch_body("zt", 0, partition_max_bytes=64 * 1024 * 1024))
        time.sleep(0.5)  # the broker's socket is full: the region is part sent
        with open(segment0, "r+b") as f:
            f.truncate(1024 * 1024)
        assert slow.closed_by_peer(timeout=20)
    # the broker still serves: another topic takes records and gives them back
    with RawClient.connect(b.bootstrap) as c:
        assert produce_partition(c, "other", repeated_batch(b"after", 3)).error_code == 0
        resp = c.request(1, 12, fetch_body("other", 0))
        (batch,) = iter_decoded_batches(resp.responses[0].partitions[0].records)
        assert [r.value for r in decode_batch_records(batch)] == [b"after"] * 3
    assert b.alive()
