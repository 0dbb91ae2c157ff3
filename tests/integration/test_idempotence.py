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

import socket
import struct
import threading
import warnings
from collections import Counter

import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from kafka import KafkaProducer

from tests.conftest import BrokerProcess, free_port
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import iter_batches, read_header

from .clients import consume, create_topic, produce
from .rawclient import (
    RawClient,
    decode_response,
    encode_request,
    fetch_body,
    frame,
    list_offset,
    produce_body,
)

pytestmark = pytest.mark.timeout(180)

PRODUCE, FETCH, INIT_PRODUCER_ID = 0, 1, 22
NONE, OUT_OF_ORDER = 0, 45


# -- raw helpers ---------------------------------------------------------------------------


def init_producer_id(c: RawClient, version: int = 4) -> tuple[int, int]:
    resp = c.request(
        INIT_PRODUCER_ID,
        version,
        {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
    )
    assert resp.error_code == NONE
    return resp.producer_id, resp.producer_epoch


def produce_frame(topic: str, batch: bytes, acks: int = 1, correlation_id: int = 7) -> bytes:
    """A whole Produce v9 request of ``batch`` to partition 0, to send (again) byte for byte."""
    body = produce_body(topic, {0: batch}, acks=acks, timeout=10_000)
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
            body = fetch_body(topic, offset, partition=partition, partition_max_bytes=1 << 20)
            p = c.request(FETCH, 12, body).responses[0].partitions[0]
            assert p.error_code == NONE, p
            if not p.records:
                return out
            for pos, _size in iter_batches(p.records):
                h = read_header(p.records, pos)
                if h.base_offset >= offset:
                    out.append(h)
                offset = h.last_offset + 1
    raise AssertionError("fetch loop did not end")


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


def read_values(bootstrap: str, topic: str, count: int, client: str) -> list[bytes]:
    """The values of partition 0 from offset 0: ``count`` of them, and anything more that
    arrives within a second after (a duplicate)."""
    got = consume(bootstrap, topic, count, client=client, timeout=60, settle=1.0)
    return [g.value for g in got]


def test_confluent_kafka_with_enable_idempotence(broker):
    vals = values()
    delivered = produce(broker.bootstrap, "idem-ck", vals, client="confluent", timeout=60,
                        conf={"enable.idempotence": True})  # fmt: skip
    assert [d.offset for d in delivered] == list(range(N))
    assert read_values(broker.bootstrap, "idem-ck", N, "confluent") == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-ck"))


def test_kafka_python_idempotent_by_default(broker):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        assert p.config["enable_idempotence"] is True  # the default, not switched off
        vals = values(tag="kp")
        futures = [p.send("idem-kp", v, partition=0) for v in vals]
        p.flush(60)
        assert [f.get(30).offset for f in futures] == list(range(N))
    finally:
        p.close(timeout=10)
    assert read_values(broker.bootstrap, "idem-kp", N, "kafka-python") == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-kp"))


def test_aiokafka_with_enable_idempotence(broker):
    vals = values(tag="ai")
    delivered = produce(broker.bootstrap, "idem-ai", vals, client="aiokafka", timeout=60,
                        conf={"enable_idempotence": True})  # fmt: skip
    assert [d.offset for d in delivered] == list(range(N))
    assert read_values(broker.bootstrap, "idem-ai", N, "aiokafka") == vals
    assert_idempotent_batches(stored(broker.bootstrap, "idem-ai"))


# -- the same batch twice, over a raw socket --------------------------------------------------


@pytest.mark.parametrize("acks", [1, -1])
def test_the_same_produce_request_twice_is_written_once(broker, acks):
    with RawClient.connect(broker.bootstrap) as c:
        create_topic(c, "idem-raw", client="raw")
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
        assert list_offset(c2, "idem-raw") == 5
    headers = stored(broker.bootstrap, "idem-raw")
    assert [(h.base_offset, h.base_sequence) for h in headers] == [(0, 0), (3, 3)]


def _produce_raw_batches(bootstrap: str, topic: str, count: int) -> tuple[int, list, list[int]]:
    with RawClient.connect(bootstrap) as c:
        create_topic(c, topic, configs={"segment.bytes": "2000"}, client="raw")
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
    with RawClient.connect(b.bootstrap) as c:
        leo = list_offset(c, topic)
        for req, offset in zip(requests[-5:], offsets[-5:], strict=True):
            part = send_produce(c, req)
            assert (part.error_code, part.base_offset) == (NONE, offset)
        assert list_offset(c, topic) == leo  # nothing written twice
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
def proxied(broker_factory):
    """A broker that advertises a DroppingProxy in front of it as its address."""
    port = free_port()
    proxy = DroppingProxy(port)
    try:
        advertised = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        b = broker_factory({"advertised.listeners": advertised}, port=port)
        yield b, proxy, f"127.0.0.1:{proxy.port}"
    finally:
        proxy.close()


#: The proxy drops the answer to every 7th Produce, 3 at most. Every test below sends
#: 600 records flushed 20 at a time: at least 30 Produce requests, so exactly 3 drops.
DROPS = 3


def _duplicates(got: list[bytes]) -> int:
    return sum(n - 1 for n in Counter(got).values())


def test_confluent_kafka_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "ck")
    produce(bootstrap, "idem-lost", vals, client="confluent", flush_every=20, timeout=60,
            conf={"enable.idempotence": True})  # fmt: skip
    assert proxy.dropped == DROPS, "not every planned response was dropped"
    got = read_values(b.bootstrap, "idem-lost", len(vals), "confluent")
    assert got == vals  # once each, in order
    assert_idempotent_batches(stored(b.bootstrap, "idem-lost"))


def test_without_idempotence_the_same_lost_responses_write_duplicates(proxied):
    """The control: the proxy really makes clients resend batches the broker kept."""
    b, proxy, bootstrap = proxied
    vals = values(600, "dup")
    produce(bootstrap, "dup-lost", vals, client="confluent", flush_every=20, timeout=60,
            conf={"enable.idempotence": False})  # fmt: skip
    assert proxy.dropped == DROPS
    got = read_values(b.bootstrap, "dup-lost", len(vals), "confluent")
    assert set(got) == set(vals)
    # each dropped response's batch was appended, then appended again by the retry
    assert _duplicates(got) >= DROPS


def test_kafka_python_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "kp")
    # many small requests
    produce(bootstrap, "idem-lost-kp", vals, client="kafka-python", linger_ms=0, flush_every=20,
            conf={"request_timeout_ms": 5000}, timeout=60)  # fmt: skip
    assert proxy.dropped == DROPS
    headers = stored(b.bootstrap, "idem-lost-kp")
    assert sum(h.records_count for h in headers) == len(vals)
    assert_idempotent_batches(headers)


def test_aiokafka_retries_after_lost_responses_are_deduplicated(proxied):
    b, proxy, bootstrap = proxied
    vals = values(600, "ai")

    # many small requests
    produce(bootstrap, "idem-lost-ai", vals, client="aiokafka", linger_ms=0, flush_every=20,
            conf={"enable_idempotence": True}, timeout=60)  # fmt: skip
    assert proxy.dropped == DROPS
    headers = stored(b.bootstrap, "idem-lost-ai")
    assert sum(h.records_count for h in headers) == len(vals)
    assert_idempotent_batches(headers)


# -- tidegate's producer: KIP-360 -------------------------------------------------------------


def test_tidegate_producer_bumps_its_epoch_after_a_batch_refused_for_good(broker):
    """A batch the broker refuses for good (MESSAGE_TOO_LARGE: larger than the topic's
    max.message.bytes) leaves a gap at its sequence, and the batches pipelined behind it
    come back OUT_OF_ORDER_SEQUENCE_NUMBER. tidegate's idempotent producer bumps its epoch
    as Java's client does (KIP-360): the same producer id at epoch 1, the partition's
    sequences from 0 again, which this broker accepts (a new epoch starts at 0, Kafka's
    ProducerStateManager). Only the large record's batch fails; every other record is
    stored once, in order."""
    from tidegate.producer import Producer, RecordTooLargeError

    topic = create_topic(broker.bootstrap, configs={"max.message.bytes": "2000"}, prefix="kip360")
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                  "batch.size": 1000})  # fmt: skip
    try:
        before = [p.send(topic, b"a-%03d" % i) for i in range(50)]
        for f in before:
            f.result(30)
        pid, epoch = p.producer_id, p.producer_epoch
        large = p.send(topic, b"L" * 3000)
        after = [p.send(topic, b"b-%03d" % i) for i in range(200)]
        assert p.flush(60) == 0
        with pytest.raises(RecordTooLargeError):
            large.result(0)
        # the records that shared the large one's batch fail with it, no other
        failed = [f for f in after if f.exception(0) is not None]
        assert all(isinstance(f.exception(0), RecordTooLargeError) for f in failed)
        assert failed == after[: len(failed)] and len(failed) < 5
        offsets = [f.result(0).offset for f in before + after[len(failed) :]]
        assert (p.producer_id, p.producer_epoch) == (pid, epoch + 1)
    finally:
        p.close(30)
    assert offsets == list(range(len(offsets)))  # every other record once, in order
    headers = stored(broker.bootstrap, topic)
    assert {h.producer_id for h in headers} == {pid}
    assert [h.producer_epoch for h in headers] == sorted(h.producer_epoch for h in headers)
    assert {h.producer_epoch for h in headers} == {epoch, epoch + 1}
    assert_idempotent_batches(headers)  # contiguous from 0 within each epoch
