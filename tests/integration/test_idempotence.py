"""Idempotent producers against a real tidegate process.

- confluent-kafka (``enable.idempotence=true``), kafka-python (idempotent by default)
  and aiokafka (``enable_idempotence=True``) produce, and what they sent is consumed
  exactly once; the stored batches carry the producer id and contiguous sequences.
- The same encoded Produce request sent twice over a raw socket (a producer id from
  InitProducerId) is written once and both answers carry the original offset, also
  after a clean restart and after a kill -9.
- Each client is run through a proxy that drops the responses to some Produce
  requests (the broker appended the batch, the client never heard): the client's own
  retries are deduplicated, where the same run without idempotence writes duplicates.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import warnings
from collections import Counter

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTP

from tests.conftest import BrokerProcess, free_port
from tidegate.log.batch_builder import Record, build_batch
from tidegate.log.record_batch import iter_batches, read_header

from .rawclient import RawClient, decode_response, encode_request, frame

pytestmark = pytest.mark.timeout(180)

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID = 0, 1, 2, 3, 22
NONE, OUT_OF_ORDER = 0, 45


# -- raw helpers ---------------------------------------------------------------------------


def ensure_topic(c: RawClient, topic: str, partitions: int = 1, configs: dict | None = None) -> None:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 5000,
        "validate_only": False,
    }
    assert c.request(19, 7, body).topics[0].error_code in (0, 36)  # created, or exists


def init_producer_id(c: RawClient, version: int = 4) -> tuple[int, int]:
    resp = c.request(
        INIT_PRODUCER_ID,
        version,
        {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
    )
    assert resp.error_code == NONE
    return resp.producer_id, resp.producer_epoch


def produce_frame(topic: str, batch: bytes, acks: int = 1, correlation_id: int = 7) -> bytes:
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    }
    return frame(encode_request(PRODUCE, 9, correlation_id, body))


def send_produce(c: RawClient, request: bytes):
    """Send already-encoded Produce bytes; the partition response."""
    c.send_raw(request)
    _cid, resp = decode_response(PRODUCE, 9, c.recv_frame())
    return resp.responses[0].partition_responses[0]


def stored(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Every batch header in the partition, read with raw Fetch requests."""
    out = []
    offset = 0
    with RawClient.connect(bootstrap) as c:
        for _ in range(10_000):  # bounded: one fetch per 1 MiB
            body = {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            }
            p = c.request(FETCH, 11, body).responses[0].partitions[0]
            assert p.error_code == NONE, p
            if not p.records:
                return out
            for pos, _size in iter_batches(p.records):
                h = read_header(p.records, pos)
                if h.base_offset >= offset:
                    out.append(h)
                offset = h.last_offset + 1
    raise AssertionError("fetch loop did not end")


def log_end_offset(bootstrap: str, topic: str) -> int:
    with RawClient.connect(bootstrap) as c:
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        }
        return c.request(LIST_OFFSETS, 5, body).topics[0].partitions[0].offset


def assert_idempotent_batches(headers) -> None:
    """One producer id, sequences contiguous from 0 in offset order: no batch twice."""
    assert headers, "nothing stored"
    assert {h.producer_id for h in headers} != {-1}
    by_pid: dict[tuple[int, int], int] = {}
    for h in headers:
        assert h.producer_id >= 0, "a batch without a producer id: idempotence was off"
        expected = by_pid.get((h.producer_id, h.producer_epoch), 0)
        assert h.base_sequence == expected, f"sequence {h.base_sequence} where {expected} was due"
        by_pid[(h.producer_id, h.producer_epoch)] = h.base_sequence + h.records_count


def idem_batch(pid: int, seq: int, n: int, epoch: int = 0, tag: bytes = b"raw") -> bytearray:
    recs = [Record(b"%s-%d" % (tag, seq + i), key=b"k%d" % (seq + i)) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


# -- real clients, end to end ------------------------------------------------------------------

N = 3_000


def values(n: int = N, tag: str = "m") -> list[bytes]:
    return [b"%s-%06d" % (tag.encode(), i) for i in range(n)]


def consume_confluent(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "idem", "enable.auto.commit": False,
         "auto.offset.reset": "earliest", "log_level": 0}
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                assert m.error() is None, m.error()
                got.append(m.value())
        # anything beyond ``count`` would be a duplicate: look a little longer
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            got += [m.value() for m in c.consume(500, 0.2) if m.error() is None]
        return got
    finally:
        c.close()


def confluent_produce(
    bootstrap: str, topic: str, vals: list[bytes], chunk: int = 0, **conf
) -> list[int]:
    """Produce to partition 0; with ``chunk``, flush every ``chunk`` records (many requests)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0, **conf})
    offsets: list[int] = []
    errors: list = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i, v in enumerate(vals):
        for _ in range(1000):  # bounded retry on a full local queue
            try:
                p.produce(topic, value=v, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if chunk and i % chunk == chunk - 1:
            assert p.flush(60) == 0
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return offsets


def test_confluent_kafka_with_enable_idempotence(broker):
    vals = values()
    offsets = confluent_produce(broker.bootstrap, "idem-ck", vals, **{"enable.idempotence": True})
    assert sorted(offsets) == list(range(N))
    assert consume_confluent(broker.bootstrap, "idem-ck", N) == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-ck"))


def test_kafka_python_idempotent_by_default(broker):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        assert p.config["enable_idempotence"] is True  # the default, not switched off
        vals = values(tag="kp")
        futures = [p.send("idem-kp", v, partition=0) for v in vals]
        p.flush(60)
        assert sorted(f.get(30).offset for f in futures) == list(range(N))
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KpTP("idem-kp", 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            for recs in c.poll(1000).values():
                got += [r.value for r in recs]
        got += [r.value for recs in c.poll(500).values() for r in recs]
    finally:
        c.close()
    assert got == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-kp"))


async def _aiokafka_roundtrip(bootstrap: str, topic: str, vals: list[bytes], **kw) -> list[bytes]:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **kw)
    await p.start()
    try:
        futures = [await p.send(topic, v, partition=0) for v in vals]
        metas = await asyncio.wait_for(asyncio.gather(*futures), 60)
        assert sorted(m.offset for m in metas) == list(range(len(vals)))
    finally:
        await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await c.start()
    try:
        tp = AioTP(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(vals) and time.monotonic() < deadline:
            for recs in (await c.getmany(timeout_ms=1000)).values():
                got += [r.value for r in recs]
        for recs in (await c.getmany(timeout_ms=500)).values():
            got += [r.value for r in recs]
        return got
    finally:
        await c.stop()


def test_aiokafka_with_enable_idempotence(broker):
    vals = values(tag="ai")
    got = asyncio.run(_aiokafka_roundtrip(broker.bootstrap, "idem-ai", vals, enable_idempotence=True))
    assert got == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-ai"))


# -- the same batch twice, over a raw socket --------------------------------------------------


@pytest.mark.parametrize("acks", [1, -1])
def test_the_same_produce_request_twice_is_written_once(broker, acks):
    with RawClient.connect(broker.bootstrap) as c:
        ensure_topic(c, "idem-raw")
        pid, epoch = init_producer_id(c)
        assert epoch == 0
        first_req = produce_frame("idem-raw", idem_batch(pid, 0, 3), acks)
        second_req = produce_frame("idem-raw", idem_batch(pid, 3, 2), acks)
        first = send_produce(c, first_req)
        second = send_produce(c, second_req)
        assert (first.error_code, first.base_offset) == (NONE, 0)
        assert (second.error_code, second.base_offset) == (NONE, 3)
        again = send_produce(c, first_req)  # byte for byte the same request
        assert (again.error_code, again.base_offset) == (NONE, 0)
    with RawClient.connect(broker.bootstrap) as c2:  # a retry after a reconnect
        again = send_produce(c2, second_req)
        assert (again.error_code, again.base_offset) == (NONE, 3)
        gap = send_produce(c2, produce_frame("idem-raw", idem_batch(pid, 9, 1), acks))
        assert gap.error_code == OUT_OF_ORDER
    assert log_end_offset(broker.bootstrap, "idem-raw") == 5
    headers = stored(broker.bootstrap, "idem-raw")
    assert [(h.base_offset, h.base_sequence) for h in headers] == [(0, 0), (3, 3)]


def _produce_raw_batches(bootstrap: str, topic: str, count: int) -> tuple[int, list, list[int]]:
    with RawClient.connect(bootstrap) as c:
        ensure_topic(c, topic, configs={"segment.bytes": "2000"})
        pid, _ = init_producer_id(c)
        requests, offsets = [], []
        for i in range(count):
            req = produce_frame(topic, idem_batch(pid, 3 * i, 3, tag=b"x" * 30))
            part = send_produce(c, req)
            assert part.error_code == NONE
            requests.append(req)
            offsets.append(part.base_offset)
    return pid, requests, offsets


def _retries_after_restart(b: BrokerProcess, topic: str, pid: int, requests, offsets) -> None:
    leo = log_end_offset(b.bootstrap, topic)
    with RawClient.connect(b.bootstrap) as c:
        for req, offset in zip(requests[-5:], offsets[-5:], strict=True):
            part = send_produce(c, req)
            assert (part.error_code, part.base_offset) == (NONE, offset)
        assert log_end_offset(b.bootstrap, topic) == leo  # nothing written twice
        nxt = send_produce(c, produce_frame(topic, idem_batch(pid, 3 * len(requests), 3)))
        assert (nxt.error_code, nxt.base_offset) == (NONE, leo)
        new_pid, _ = init_producer_id(c)
        assert new_pid >= 1000 and new_pid != pid  # ids of the previous run never come back
    headers = stored(b.bootstrap, topic)
    assert_idempotent_batches(headers)
    assert len(headers) == len(requests) + 1


def test_retries_are_deduplicated_after_a_clean_restart(broker):
    pid, requests, offsets = _produce_raw_batches(broker.bootstrap, "idem-restart", 30)
    assert broker.stop() == 0
    broker.start()
    _retries_after_restart(broker, "idem-restart", pid, requests, offsets)


def test_retries_are_deduplicated_after_kill_9(broker):
    pid, requests, offsets = _produce_raw_batches(broker.bootstrap, "idem-kill", 30)
    broker.kill()
    broker.start()
    assert "recovered idem-kill-0 after an unclean shutdown" in broker.log_text()
    _retries_after_restart(broker, "idem-kill", pid, requests, offsets)


# -- the clients' own retries, forced by a proxy ----------------------------------------------


class DroppingProxy:
    """Forwards Kafka traffic to the broker but, for selected Produce requests, closes
    the client's connection instead of passing the broker's answer on: the batch is in
    the log and the client does not know, so it retries it."""

    def __init__(self, target_port: int, drop_every: int = 7, max_drops: int = 3) -> None:
        self.target_port = target_port
        self.drop_every = drop_every
        self.max_drops = max_drops
        self.produce_requests = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(0.5)
            doomed: set[int] = set()
            self._start(self._requests, client, upstream, doomed)
            self._start(self._responses, client, upstream, doomed)

    def _read_frame(self, s: socket.socket) -> bytes | None:
        buf = b""
        need = 4
        size = None
        while not self._stop.is_set():
            try:
                chunk = s.recv(need - len(buf))
            except TimeoutError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
            if len(buf) == need:
                if size is None:
                    size = struct.unpack(">i", buf)[0]
                    need = 4 + size
                else:
                    return buf
        return None

    def _requests(self, client, upstream, doomed: set[int]) -> None:
        while (f := self._read_frame(client)) is not None:
            api_key, _version, cid = struct.unpack_from(">hhi", f, 4)
            if api_key == PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                    if self.produce_requests % self.drop_every == 0 and self.dropped < self.max_drops:
                        self.dropped += 1
                        doomed.add(cid)
            try:
                upstream.sendall(f)
            except OSError:
                break
        self._close(client, upstream)

    def _responses(self, client, upstream, doomed: set[int]) -> None:
        while (f := self._read_frame(upstream)) is not None:
            (cid,) = struct.unpack_from(">i", f, 4)
            if cid in doomed:
                break  # the broker answered; the client never hears it
            try:
                client.sendall(f)
            except OSError:
                break
        self._close(client, upstream)

    @staticmethod
    def _close(*socks) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for t in self._threads:
            t.join(5)


@pytest.fixture
def proxied(tmp_path):
    """A broker that advertises a DroppingProxy in front of it as its address."""
    port = free_port()
    proxy = DroppingProxy(port)
    b = BrokerProcess(
        tmp_path / "data",
        port=port,
        overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"},
    )
    b.start()
    try:
        yield b, proxy, f"127.0.0.1:{proxy.port}"
    finally:
        proxy.close()
        if b.alive():
            b.stop(10)


def _duplicates(got: list[bytes]) -> int:
    return sum(n - 1 for n in Counter(got).values())


def test_confluent_kafka_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "ck")
    confluent_produce(bootstrap, "idem-lost", vals, chunk=20, **{"enable.idempotence": True})
    assert proxy.dropped >= 1, "no response was dropped: the test proved nothing"
    got = consume_confluent(b.bootstrap, "idem-lost", len(vals))
    assert _duplicates(got) == 0 and sorted(got) == sorted(vals)
    assert_idempotent_batches(stored(b.bootstrap, "idem-lost"))


def test_without_idempotence_the_same_lost_responses_write_duplicates(proxied):
    """The control: the proxy really makes clients resend batches the broker kept."""
    b, proxy, bootstrap = proxied
    vals = values(600, "dup")
    confluent_produce(bootstrap, "dup-lost", vals, chunk=20, **{"enable.idempotence": False})
    assert proxy.dropped >= 1
    got = consume_confluent(b.bootstrap, "dup-lost", len(vals))
    assert set(got) == set(vals)
    assert _duplicates(got) >= 1


def test_kafka_python_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "kp")
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, request_timeout_ms=5000)
    try:
        futures = []
        for i in range(0, len(vals), 20):  # many small requests
            futures += [p.send("idem-lost-kp", v, partition=0) for v in vals[i : i + 20]]
            p.flush(60)
        for f in futures:
            f.get(30)
    finally:
        p.close(timeout=10)
    assert proxy.dropped >= 1
    headers = stored(b.bootstrap, "idem-lost-kp")
    assert sum(h.records_count for h in headers) == len(vals)
    assert_idempotent_batches(headers)


def test_aiokafka_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "ai")

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, enable_idempotence=True)
        await p.start()
        try:
            for i in range(0, len(vals), 20):  # many small requests
                futures = [await p.send("idem-lost-ai", v, partition=0) for v in vals[i : i + 20]]
                await asyncio.wait_for(asyncio.gather(*futures), 60)
        finally:
            await p.stop()

    asyncio.run(run())
    assert proxy.dropped >= 1
    headers = stored(b.bootstrap, "idem-lost-ai")
    assert sum(h.records_count for h in headers) == len(vals)
    assert_idempotent_batches(headers)
