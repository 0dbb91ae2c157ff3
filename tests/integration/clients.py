"""The integration tests' helpers, in one place.

The client test modules (confluent-kafka, kafka-python, aiokafka, tidegate's own
producer) produce the same deterministic record set, normalise what they consume into
:class:`Got` (and what their producers report into :class:`Delivered`), and check it
with the helpers here, so "exactly what was sent" means the same thing for every
client.

Every helper that talks to a broker through a client library takes ``client=``:
``"confluent"`` (confluent-kafka, librdkafka), ``"kafka-python"``, ``"aiokafka"``
(run to completion on an event loop of its own), ``"tidegate"`` (tidegate's
``KafkaClient``/``Producer``) or ``"raw"`` (:mod:`tests.integration.rawclient`, whose
request-body builders the raw-protocol tests use directly). Client configuration
(``conf=``) is in the client's own spelling: dotted keys for confluent-kafka and
tidegate, keyword arguments for kafka-python and aiokafka. Client libraries are
imported only by the helpers that use them.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rawclient import RawClient, create_topics_body

#: Compression codecs under test, as the producers spell them ("none" = uncompressed).
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Which acks each codec's run uses, so every client exercises acks=0, 1 and all.
ACKS_BY_CODEC = {"none": 0, "gzip": 1, "snappy": -1, "lz4": 1, "zstd": -1}

RECORDS_PER_CODEC = 10_000

#: Topic config of the per-codec round trips: small segments, so 10,000 records span
#: several segment files and reads, timestamp lookups and recovery cross segment edges.
ROUNDTRIP_TOPIC_CONFIG = {"segment.bytes": "131072"}

#: Kafka's TimestampType: 0 CreateTime, 1 LogAppendTime (kafka-python and aiokafka use these).
CREATE_TIME = 0
LOG_APPEND_TIME = 1

UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass(frozen=True, slots=True)
class Rec:
    """A record as the producer sends it (``timestamp`` None: the client's clock)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Got:
    """A record as a consumer returned it, in client-neutral form."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    timestamp_type: int  # CREATE_TIME or LOG_APPEND_TIME
    partition: int = 0


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where a produced record was written, in client-neutral form (send order)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: int | None  # CREATE_TIME, LOG_APPEND_TIME, or None if not reported


def base_timestamp() -> int:
    """A CreateTime an hour in the past: clearly not the broker's clock."""
    return int(time.time() * 1000) - 3_600_000


def make_records(
    n: int,
    base_ts: int,
    *,
    seed: int = 7,
    headers: bool = True,
    ts_step: Callable[[int], int] | None = None,
) -> list[Rec]:
    """``n`` deterministic records with awkward edges: null keys, null and empty values,
    binary payloads, repeated header keys, compressible and incompressible data, and
    non-decreasing timestamps with ties (``base_ts + i // 3`` by default)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 101 == 50 else b"key-%06d" % i
        if i % 257 == 100:
            value = None
        elif i % 263 == 7:
            value = b""
        elif i % 2:
            value = rnd.randbytes(rnd.randrange(1, 200))
        else:
            value = (b"value %d " % i) * rnd.randrange(1, 20)
        hdrs: tuple[tuple[str, bytes], ...] = ()
        if headers:
            hdrs = (("idx", str(i).encode()),)
            if i % 3 == 0:
                hdrs += (("bin", rnd.randbytes(rnd.randrange(0, 16))),)
            if i % 5 == 0:
                hdrs += (("dup", b"first"), ("dup", b"second"), ("empty", b""))
        ts = base_ts + (ts_step(i) if ts_step is not None else i // 3)
        out.append(Rec(key, value, hdrs, ts))
    return out


def assert_records_match(
    sent: Sequence[Rec],
    got: Sequence[Got],
    *,
    first_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
    check_timestamps: bool = True,
) -> None:
    """Every record back, in order, field for field, at contiguous offsets."""
    assert len(got) == len(sent), f"consumed {len(got)} records, produced {len(sent)}"
    offsets = [g.offset for g in got]
    expected_offsets = list(range(first_offset, first_offset + len(sent)))
    if offsets != expected_offsets:
        bad = next(i for i, (a, b) in enumerate(zip(offsets, expected_offsets)) if a != b)
        raise AssertionError(f"offsets not contiguous at #{bad}: {offsets[bad : bad + 5]}...")
    for i, (s, g) in enumerate(zip(sent, got)):
        where = f"record #{i} (offset {g.offset})"
        assert g.key == s.key, f"{where}: key {g.key!r} != {s.key!r}"
        assert g.value == s.value, f"{where}: value {g.value!r} != {s.value!r}"
        assert g.headers == s.headers, f"{where}: headers {g.headers!r} != {s.headers!r}"
        assert g.timestamp_type == timestamp_type, f"{where}: timestamp type {g.timestamp_type}"
        if check_timestamps:
            assert g.timestamp == s.timestamp, f"{where}: timestamp {g.timestamp} != {s.timestamp}"


def first_at_or_after(sent: Sequence[Rec], ts: int) -> int | None:
    """Index of the first record with timestamp >= ``ts`` (Kafka's offsetsForTimes answer)."""
    for i, r in enumerate(sent):
        if r.timestamp >= ts:
            return i
    return None


def timestamp_queries(sent: Sequence[Rec]) -> list[int]:
    """Target timestamps worth asking about: before the first record, exact hits,
    ties, between records and the last one."""
    first, last = sent[0].timestamp, sent[-1].timestamp
    mid = sent[len(sent) // 2].timestamp
    return sorted(
        {first - 1000, first, first + 1, mid, mid + 1, (first + last) // 2, last - 1, last}
    )


def first_with_max_timestamp(sent: Sequence[Rec]) -> int:
    """Index of the first record carrying the largest timestamp (Kafka's MAX_TIMESTAMP)."""
    top = max(r.timestamp for r in sent)
    return next(i for i, r in enumerate(sent) if r.timestamp == top)


def check_offset_for_time(
    sent: Sequence[Rec],
    query: int,
    offset: int | None,
    timestamp: int | None = None,
) -> None:
    """Check a ListOffsets-by-timestamp answer against what was sent (offsets from 0):
    as Kafka, the first record whose timestamp is >= the query, exact to the record
    inside its batch, and that record's timestamp (when the client reports it)."""
    expected = first_at_or_after(sent, query)
    if expected is None:
        assert offset is None or offset == -1, f"query {query} past the last record gave {offset}"
        return
    assert offset == expected, f"query {query}: offset {offset}, expected {expected}"
    if timestamp is not None:
        assert timestamp == sent[expected].timestamp, (
            f"query {query}: timestamp {timestamp}, expected {sent[expected].timestamp}"
        )


def segment_count(data_dir: Path, topic: str, partition: int = 0) -> int:
    return len(list((data_dir / f"{topic}-{partition}").glob("*.log")))


# -- topics ------------------------------------------------------------------------------

_topic_seq = itertools.count(1)


def unique_topic(prefix: str = "t") -> str:
    """A topic name unique per process and call."""
    return f"{prefix}-{os.getpid()}-{next(_topic_seq)}-{int(time.time() * 1000) % 100000}"


def create_topic(
    target: str | RawClient,
    name: str | None = None,
    partitions: int = 1,
    *,
    configs: dict | None = None,
    client: str = "tidegate",
    prefix: str = "t",
    exist_ok: bool = False,
    conf: dict | None = None,
) -> str:
    """Create one topic (replication factor 1) and return its name.

    ``target`` is a bootstrap address, or for ``client="raw"`` also an open
    :class:`RawClient` (the request then goes over that connection). Without ``name``
    the topic gets a fresh :func:`unique_topic` name. ``conf``: more settings of the
    confluent-kafka or kafka-python admin client (security). The creation must succeed;
    ``exist_ok`` (raw and tidegate clients) also accepts TOPIC_ALREADY_EXISTS."""
    name = name if name is not None else unique_topic(prefix)
    configs = dict(configs or {})
    ok = (0, 36) if exist_ok else (0,)
    if client == "raw":
        if isinstance(target, RawClient):
            resp = target.request(19, 7, create_topics_body(name, partitions, configs))
        else:
            with RawClient.connect(target) as c:
                resp = c.request(19, 7, create_topics_body(name, partitions, configs))
        assert resp.topics[0].error_code in ok, resp
    elif client == "tidegate":
        from tidegate.client import KafkaClient

        with KafkaClient(target) as c:
            topic = {"name": name, "num_partitions": partitions, "replication_factor": 1,
                     "configs": [{"name": k, "value": v} for k, v in configs.items()]}  # fmt: skip
            r = c.request(19, {"topics": [topic], "timeout": 10_000}, timeout_ms=15_000)
        assert int(r.topics[0].error_code) in ok, r
    else:
        assert not exist_ok, f"exist_ok is for the raw and tidegate clients, not {client}"
        if client == "confluent":
            from confluent_kafka.admin import NewTopic

            admin = admin_client(target, client="confluent", **(conf or {}))  # kept until done
            futures = admin.create_topics(
                [NewTopic(name, partitions, 1, config=configs)],
                operation_timeout=10,
                request_timeout=15,
            )
            futures[name].result(15)
        elif client == "kafka-python":
            admin = admin_client(target, client="kafka-python", **(conf or {}))
            try:
                spec = {"num_partitions": partitions, "replication_factor": 1, "configs": configs}
                result = admin.create_topics({name: spec})
                assert [t["error_code"] for t in result["topics"]] == [0], result
            finally:
                admin.close()
        elif client == "aiokafka":
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic

            async def create() -> None:
                admin = AIOKafkaAdminClient(bootstrap_servers=target, request_timeout_ms=10_000)
                await admin.start()
                try:
                    resp = await admin.create_topics(
                        [NewTopic(name, partitions, 1, topic_configs=configs)]
                    )
                finally:
                    await admin.close()
                assert [(t[0], t[1]) for t in resp.topic_errors] == [(name, 0)], resp

            run_async(create(), 30)
        else:
            raise ValueError(f"unknown client {client!r}")
    return name


def configs_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """``tidegate configs --bootstrap-server BOOTSTRAP ARGS...`` in a subprocess (output as text)."""
    return subprocess.run(
        [sys.executable, "-m", "tidegate", "configs", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def admin_client(bootstrap: str, *, client: str, **conf: Any):
    """An admin client of confluent-kafka (``AdminClient``) or kafka-python
    (``KafkaAdminClient``; close it)."""
    if client == "confluent":
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **conf})
    if client == "kafka-python":
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=bootstrap, **{"request_timeout_ms": 10_000, **conf}
        )
    raise ValueError(f"no admin client helper for {client!r}")


def run_async(coro, timeout: float = 90.0):
    """Run ``coro`` on an event loop of its own, bounded by ``timeout`` seconds."""

    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


# -- producing ---------------------------------------------------------------------------


def _records(records: Iterable[Rec | bytes]) -> list[Rec]:
    return [r if isinstance(r, Rec) else Rec(None, r) for r in records]


def _partition_for(partition: int | Callable[[int], int] | None, i: int) -> int | None:
    return partition(i) if callable(partition) else partition


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Rec | bytes],
    *,
    client: str,
    partition: int | Callable[[int], int] | None = 0,
    codec: str | None = None,
    acks: int | None = None,
    linger_ms: int | None = 5,
    flush_every: int = 0,
    conf: dict | None = None,
    errors: list | None = None,
    timeout: float = 30.0,
) -> list[Delivered]:
    """Send ``records`` (:class:`Rec`, or plain values) with one client; returns where
    each delivered record was written, in send order.

    ``partition``: a partition for every record, a function of the record's index, or
    None for the client's partitioner. ``codec``, ``acks`` (0, 1 or -1) and
    ``linger_ms``: None leaves the client's default. ``flush_every=n`` flushes after
    every n records (1: a batch per record). Delivery errors fail the call unless an
    ``errors`` list is given to collect them (the client's own error objects)."""
    recs = _records(records)
    senders = {
        "confluent": _produce_confluent,
        "kafka-python": _produce_kafka_python,
        "aiokafka": _produce_aiokafka,
        "tidegate": _produce_tidegate,
    }
    if client not in senders:
        raise ValueError(f"no produce helper for {client!r}")
    collected: list = []
    results = senders[client](
        bootstrap, topic, recs, partition, codec, acks, linger_ms, flush_every,
        dict(conf or {}), collected, timeout,
    )  # fmt: skip
    if errors is None:
        assert not collected, f"{len(collected)} delivery errors, first: {collected[0]}"
        assert len(results) == len(recs), f"{len(results)} of {len(recs)} records delivered"
    else:
        errors.extend(collected)
    return results


def _produce_confluent(bootstrap, topic, recs, partition, codec, acks, linger_ms, flush_every,
                       conf, errors, timeout) -> list[Delivered]:  # fmt: skip
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, "log_level": 0}
    for key, value in (("compression.type", codec), ("acks", acks), ("linger.ms", linger_ms)):
        if value is not None:
            settings[key] = value
    p = Producer({**settings, **conf})
    delivered: dict[int, Delivered] = {}

    def on_delivery(i: int, err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            ts_type, ts = msg.timestamp()
            delivered[i] = Delivered(msg.topic(), msg.partition(), msg.offset(), ts,
                                     confluent_timestamp_type(ts_type))  # fmt: skip

    for i, r in enumerate(recs):
        kw: dict = {"key": r.key, "value": r.value, "headers": list(r.headers)}
        if r.timestamp is not None:
            kw["timestamp"] = r.timestamp
        part = _partition_for(partition, i)
        if part is not None:
            kw["partition"] = part
        while True:
            try:
                p.produce(topic, on_delivery=lambda err, msg, i=i: on_delivery(i, err, msg), **kw)
                break
            except BufferError:  # the local queue is full: serve delivery reports
                p.poll(0.05)
        p.poll(0)
        if flush_every and (i + 1) % flush_every == 0:
            assert p.flush(timeout) == 0, f"messages still queued after {timeout}s"
    assert p.flush(timeout) == 0, f"messages still queued after {timeout}s"
    return [delivered[i] for i in sorted(delivered)]


def _python_producer_settings(bootstrap, codec, acks, linger_ms) -> dict:
    """kafka-python's and aiokafka's producer settings (they share the key names)."""
    settings: dict = {"bootstrap_servers": bootstrap}
    if codec is not None:
        settings["compression_type"] = None if codec == "none" else codec
    if acks is not None:
        settings["acks"] = "all" if acks == -1 else acks
    if linger_ms is not None:
        settings["linger_ms"] = linger_ms
    return settings


def _produce_kafka_python(bootstrap, topic, recs, partition, codec, acks, linger_ms, flush_every,
                          conf, errors, timeout) -> list[Delivered]:  # fmt: skip
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    settings = _python_producer_settings(bootstrap, codec, acks, linger_ms)
    p = KafkaProducer(**{**settings, **conf})
    try:
        futures = []
        for i, r in enumerate(recs):
            futures.append(
                p.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                       timestamp_ms=r.timestamp, partition=_partition_for(partition, i))
            )  # fmt: skip
            if flush_every and (i + 1) % flush_every == 0:
                p.flush(timeout)
        p.flush(timeout)
        delivered = []
        for f in futures:
            try:
                md = f.get(timeout=timeout)
            except KafkaError as exc:
                errors.append(exc)
                continue
            delivered.append(Delivered(md.topic, md.partition, md.offset, md.timestamp, None))
        return delivered
    finally:
        p.close(timeout=10)


def _produce_aiokafka(bootstrap, topic, recs, partition, codec, acks, linger_ms, flush_every,
                      conf, errors, timeout) -> list[Delivered]:  # fmt: skip
    from aiokafka import AIOKafkaProducer

    settings = _python_producer_settings(bootstrap, codec, acks, linger_ms)

    async def send_all() -> list:
        p = AIOKafkaProducer(**{**settings, **conf})
        await p.start()
        try:
            futures = []
            for i, r in enumerate(recs):
                futures.append(
                    await p.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp, partition=_partition_for(partition, i))
                )  # fmt: skip
                if flush_every and (i + 1) % flush_every == 0:
                    await asyncio.gather(*futures[-flush_every:], return_exceptions=True)
            return await asyncio.gather(*futures, return_exceptions=True)
        finally:
            await p.stop()

    delivered = []
    for md in run_async(send_all(), timeout + 60):
        if isinstance(md, BaseException):
            errors.append(md)
        elif md is None:  # acks=0: aiokafka reports nothing
            delivered.append(Delivered(topic, -1, -1, None, None))
        else:
            delivered.append(
                Delivered(md.topic, md.partition, md.offset, md.timestamp, md.timestamp_type)
            )
    return delivered


def _produce_tidegate(bootstrap, topic, recs, partition, codec, acks, linger_ms, flush_every,
                      conf, errors, timeout) -> list[Delivered]:  # fmt: skip
    from tidegate.producer import Producer

    settings: dict = {"bootstrap.servers": bootstrap}
    for key, value in (("compression.type", codec), ("acks", acks), ("linger.ms", linger_ms)):
        if value is not None:
            settings[key] = value
    p = Producer({**settings, **conf})
    try:
        futures = []
        for i, r in enumerate(recs):
            futures.append(
                p.send(topic, r.value, key=r.key, partition=_partition_for(partition, i),
                       headers=list(r.headers), timestamp=r.timestamp)
            )  # fmt: skip
            if flush_every and (i + 1) % flush_every == 0:
                assert p.flush(timeout) == 0, f"records still incomplete after {timeout}s"
        assert p.flush(timeout) == 0, f"records still incomplete after {timeout}s"
        delivered = []
        for f in futures:
            if f.exception(timeout) is not None:
                errors.append(f.exception(0))
                continue
            md = f.result(0)
            delivered.append(Delivered(md.topic, md.partition, md.offset, md.timestamp, None))
        return delivered
    finally:
        p.close(30)


def confluent_timestamp_type(ts_type: int) -> int:
    """confluent-kafka's TIMESTAMP_* constant as CREATE_TIME/LOG_APPEND_TIME (-1: none)."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    return {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}.get(
        ts_type, -1
    )


class ProducerThread(threading.Thread):
    """A confluent-kafka producer sending numbered values flat out in a thread, until
    :meth:`finish`: record ``n`` goes to partition ``n % partitions`` with value
    ``value_of(n, partition)``. ``acked`` maps (partition, offset) to the value of every
    record whose delivery succeeded; ``failed`` counts the others, ``sent`` the records
    handed to the client."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        conf: dict,
        *,
        partitions: int = 1,
        value_of: Callable[[int, int], bytes] = lambda n, p: b"%d" % n,
    ) -> None:
        from confluent_kafka import Producer

        super().__init__(daemon=True)
        self.topic, self.partitions, self.value_of = topic, partitions, value_of
        self.producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, **conf})
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed = 0
        self.sent = 0
        self.error: BaseException | None = None

    def on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None:
                key = (msg.partition(), msg.offset())
                assert key not in self.acked, f"offset acknowledged twice: {key}"
                self.acked[key] = msg.value()
            else:
                self.failed += 1

    @property
    def acked_count(self) -> int:
        """Acknowledged records, counting only once every partition has some."""
        with self.lock:
            if len({p for p, _ in self.acked}) < self.partitions:
                return 0
            return len(self.acked)

    def run(self) -> None:
        try:
            n = 0
            while not self.stop_event.is_set():
                p = n % self.partitions
                try:
                    self.producer.produce(self.topic, value=self.value_of(n, p), partition=p,
                                          on_delivery=self.on_delivery)  # fmt: skip
                except BufferError:
                    self.producer.poll(0.01)
                    continue
                n += 1
                self.sent = n
                if n % 50 == 0:
                    self.producer.poll(0)
            # Stopped (the broker may be gone): drop whatever was not acknowledged;
            # reports that already arrived are still delivered by the poll below.
            self.producer.poll(0)
            self.producer.purge(in_queue=True, in_flight=True)
            self.producer.flush(5)
        except BaseException as exc:  # noqa: BLE001 - re-raised in finish()
            self.error = exc

    def finish(self) -> None:
        self.stop_event.set()
        self.join(20)
        assert not self.is_alive(), "producer thread did not stop"
        if self.error is not None:
            raise self.error


# -- transactions ------------------------------------------------------------------------

#: The clients with a transactional producer.
TRANSACTIONAL_CLIENTS = ("confluent", "kafka-python", "aiokafka")

#: How each client spells the consumer setting for read_committed ...
READ_COMMITTED = {
    "confluent": {"isolation.level": "read_committed"},
    "kafka-python": {"isolation_level": "read_committed"},
    "aiokafka": {"isolation_level": "read_committed"},
}
#: ... and for read_uncommitted (librdkafka's default is read_committed, the others' not).
READ_UNCOMMITTED = {
    "confluent": {"isolation.level": "read_uncommitted"},
    "kafka-python": {"isolation_level": "read_uncommitted"},
    "aiokafka": {"isolation_level": "read_uncommitted"},
}


class TransactionalProducer:
    """A transactional producer of confluent-kafka, kafka-python or aiokafka behind one
    interface, each call in the client's own API (aiokafka's run to completion on an
    event loop of this object's). Errors are the client's own exceptions;
    :meth:`fenced` tells whether one means "fenced by a newer instance of the id"."""

    def __init__(self, client: str, bootstrap: str, transactional_id: str, *,
                 timeout_ms: int = 60_000, conf: dict | None = None) -> None:  # fmt: skip
        self.client = client
        self.loop: asyncio.AbstractEventLoop | None = None
        conf = dict(conf or {})
        if client == "confluent":
            from confluent_kafka import Producer

            self.p: Any = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                    "transaction.timeout.ms": timeout_ms, "log_level": 0, **conf})
        elif client == "kafka-python":
            from kafka import KafkaProducer

            self.p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                   enable_idempotence=True, transaction_timeout_ms=timeout_ms, **conf)
        elif client == "aiokafka":
            from aiokafka import AIOKafkaProducer

            self.loop = asyncio.new_event_loop()

            async def make() -> Any:
                return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                        transaction_timeout_ms=timeout_ms, **conf)

            self.p = self._run(make())
            self._run(self.p.start())
        else:
            raise ValueError(f"no transactional producer for {client!r}")

    def _run(self, coro: Any, timeout: float = 60.0) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def init(self) -> None:
        if self.client == "confluent":
            self.p.init_transactions(30)
        elif self.client == "kafka-python":
            self.p.init_transactions()
        # aiokafka initialises its transactional id in start()

    def begin(self) -> None:
        if self.client == "aiokafka":
            self._run(self.p.begin_transaction())  # waits for the producer id first
        else:
            self.p.begin_transaction()

    def send(self, topic: str, value: bytes, partition: int = 0, key: bytes | None = None) -> None:
        if self.client == "confluent":
            self.p.produce(topic, value=value, key=key, partition=partition)
            self.p.poll(0)
        elif self.client == "kafka-python":
            self.p.send(topic, value=value, key=key, partition=partition)
        else:
            self._run(self.p.send(topic, value=value, key=key, partition=partition))

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str, consumer: Any = None) -> None:
        """Commit ``{(topic, partition): next offset}`` for ``group_id`` in the transaction;
        with ``consumer`` (confluent-kafka, kafka-python) its group metadata (generation,
        member) is sent, as a consume-transform-produce loop does."""
        if self.client == "confluent":
            from confluent_kafka import TopicPartition

            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            meta = consumer.consumer_group_metadata() if consumer is not None else group_id
            self.p.send_offsets_to_transaction(tps, meta, 30)
        elif self.client == "kafka-python":
            from kafka import OffsetAndMetadata, TopicPartition

            kp_offsets = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
            self.p.send_offsets_to_transaction(kp_offsets, consumer.group_metadata() if consumer is not None
                                               else group_id)
        else:
            from aiokafka import TopicPartition as AioTP

            self._run(self.p.send_offsets_to_transaction({AioTP(t, p): o for (t, p), o in offsets.items()},
                                                         group_id))

    def flush(self) -> None:
        """Wait until everything sent so far is written (an abort after it has data to abort;
        without it librdkafka drops what is still queued)."""
        if self.client == "confluent":
            assert self.p.flush(30) == 0
        elif self.client == "kafka-python":
            self.p.flush(30)
        else:
            self._run(self.p.flush())

    def commit(self) -> None:
        if self.client == "confluent":
            self.p.commit_transaction(30)
        elif self.client == "kafka-python":
            self.p.commit_transaction()
        else:
            self._run(self.p.commit_transaction())

    def abort(self) -> None:
        if self.client == "confluent":
            self.p.abort_transaction(30)
        elif self.client == "kafka-python":
            self.p.abort_transaction()
        else:
            self._run(self.p.abort_transaction())

    def fenced(self, exc: BaseException) -> bool:
        if self.client == "confluent":
            from confluent_kafka import KafkaError

            err = exc.args[0] if exc.args else None
            return isinstance(err, KafkaError) and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                                                  KafkaError.INVALID_PRODUCER_EPOCH)
        if self.client == "kafka-python":
            from kafka.errors import InvalidProducerEpochError, ProducerFencedError

            return isinstance(exc, (ProducerFencedError, InvalidProducerEpochError))
        from aiokafka.errors import ProducerFenced

        return isinstance(exc, ProducerFenced)

    def close(self) -> None:
        if self.client == "confluent":
            self.p.flush(5)
        elif self.client == "kafka-python":
            self.p.close(5)
        else:
            try:
                self._run(self.p.stop(), 10)
            finally:
                assert self.loop is not None
                self.loop.close()


# -- consuming ---------------------------------------------------------------------------


def new_consumer(bootstrap: str, *, client: str, conf: dict | None = None):
    """A consumer that commits nothing and never resets offsets on its own: confluent-kafka
    (group id set but unused, CRCs checked) or kafka-python (no group). Close it."""
    if client == "confluent":
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tidegate-integration",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "check.crcs": True,
                "log_level": 0,
                **(conf or {}),
            }
        )
    if client == "kafka-python":
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=bootstrap,
            **{
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "none",
                "request_timeout_ms": 15_000,
                **(conf or {}),
            },
        )
    raise ValueError(f"no consumer helper for {client!r}")


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    client: str,
    partitions: int = 1,
    start: int | dict[int, int] = 0,
    timeout: float = 30.0,
    settle: float = 0.2,
    conf: dict | None = None,
) -> list[Got]:
    """Assign partitions ``0..partitions-1`` of ``topic`` from ``start`` (one offset for
    all, or {partition: offset}) and read until ``count`` records arrived or ``timeout``
    passed; then keep reading for ``settle`` seconds. Everything read is returned, in
    arrival order (each partition's in offset order), including anything beyond
    ``count``: a caller comparing with what it sent sees duplicates and strays. A
    consumer error raises."""
    starts = start if isinstance(start, dict) else {p: start for p in range(partitions)}
    readers = {
        "confluent": _consume_confluent,
        "kafka-python": _consume_kafka_python,
        "aiokafka": _consume_aiokafka,
    }
    if client not in readers:
        raise ValueError(f"no consume helper for {client!r}")
    return readers[client](bootstrap, topic, count, starts, timeout, settle, dict(conf or {}))


def _read_loop(poll: Callable[[float], list[Got]], count: int, timeout: float, settle: float):
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += poll(0.5)
    end = time.monotonic() + settle
    while (left := end - time.monotonic()) > 0:
        got += poll(left)
    return got


def _consume_confluent(bootstrap, topic, count, starts, timeout, settle, conf) -> list[Got]:
    from confluent_kafka import KafkaException, TopicPartition

    c = new_consumer(bootstrap, client="confluent", conf=conf)
    try:
        c.assign([TopicPartition(topic, p, o) for p, o in starts.items()])

        def poll(wait: float) -> list[Got]:
            out = []
            for m in c.consume(1000, wait):
                if m.error():
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                out.append(Got(m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts,
                               confluent_timestamp_type(ts_type), m.partition()))  # fmt: skip
            return out

        return _read_loop(poll, count, timeout, settle)
    finally:
        c.close()


def _got(r) -> Got:
    """A kafka-python or aiokafka ConsumerRecord as a Got."""
    return Got(r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp, r.timestamp_type,
               r.partition)  # fmt: skip


def _consume_kafka_python(bootstrap, topic, count, starts, timeout, settle, conf) -> list[Got]:
    from kafka import TopicPartition

    c = new_consumer(bootstrap, client="kafka-python", conf=conf)
    try:
        c.assign([TopicPartition(topic, p) for p in starts])
        for p, o in starts.items():
            c.seek(TopicPartition(topic, p), o)

        def poll(wait: float) -> list[Got]:
            batches = c.poll(timeout_ms=int(wait * 1000), max_records=5000)
            return [_got(r) for recs in batches.values() for r in recs]

        return _read_loop(poll, count, timeout, settle)
    finally:
        c.close()


def _consume_aiokafka(bootstrap, topic, count, starts, timeout, settle, conf) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def read() -> list[Got]:
        defaults = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "none"}
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, **{**defaults, **conf})
        await c.start()
        try:
            c.assign([TopicPartition(topic, p) for p in starts])
            for p, o in starts.items():
                c.seek(TopicPartition(topic, p), o)
            got: list[Got] = []
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500, max_records=5000)
                got += [_got(r) for recs in batches.values() for r in recs]
            end = time.monotonic() + settle
            while (left := end - time.monotonic()) > 0:
                batches = await c.getmany(timeout_ms=int(left * 1000) + 1)
                got += [_got(r) for recs in batches.values() for r in recs]
            return got
        finally:
            await c.stop()

    return run_async(read(), timeout + settle + 60)


def read_to_end(bootstrap: str, topic: str, partitions: int = 1,
                timeout: float = 30.0) -> dict[int, list[Got]]:  # fmt: skip
    """Every record of every partition, from offset 0 to its high watermark (confluent-kafka,
    CRCs checked): {partition: [Got]}. Each log must start at 0 and be read whole."""
    from confluent_kafka import TopicPartition

    c = new_consumer(bootstrap, client="confluent")
    try:
        ends = {}
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0, f"partition {p} starts at {low}"
            ends[p] = high
    finally:
        c.close()
    got: dict[int, list[Got]] = {p: [] for p in range(partitions)}
    for g in consume(bootstrap, topic, sum(ends.values()), client="confluent",
                     partitions=partitions, timeout=timeout):  # fmt: skip
        got[g.partition].append(g)
    for p, records in got.items():
        assert len(records) == ends[p], f"partition {p}: read {len(records)} of {ends[p]} records"
    return got


def roundtrip(
    conf: dict,
    n: int = 50,
    *,
    client: str = "confluent",
    topic: str | None = None,
    prefix: str = "rt",
) -> list[bytes]:
    """Produce ``v0..v{n-1}`` (key ``k``, acks=all) to partition 0 of ``topic`` (by default
    a new one-partition topic) and read them back by assign, with confluent-kafka or
    kafka-python and the client config ``conf`` (bootstrap and security settings, in the
    client's spelling). Every delivery must succeed, at consecutive offsets; returns the
    values read back from the first of them, in offset order (within 20 s)."""
    key = {"confluent": "bootstrap.servers", "kafka-python": "bootstrap_servers"}[client]
    bootstrap = conf[key]
    security = {k: v for k, v in conf.items() if k != key}
    if topic is None:
        topic = create_topic(bootstrap, prefix=prefix, client=client, conf=security)
    values = [Rec(b"k", f"v{i}".encode()) for i in range(n)]
    delivered = produce(bootstrap, topic, values, client=client, acks=-1, conf=security,
                        timeout=20)  # fmt: skip
    first = delivered[0].offset
    assert [d.offset for d in delivered] == list(range(first, first + n))
    got = consume(bootstrap, topic, n, client=client, start=first, conf=security, timeout=20)
    assert [g.offset for g in got] == list(range(first, first + len(got)))
    return [g.value for g in got]


# -- offsets -----------------------------------------------------------------------------


def confluent_list_offset(admin, topic: str, spec, partition: int = 0) -> tuple[int, int]:
    """(offset, timestamp) of ``AdminClient.list_offsets`` for one partition."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    info = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)
    return info.offset, info.timestamp


def check_list_offsets(bootstrap: str, topic: str, sent: list[Rec], *, client: str) -> None:
    """ListOffsets on partition 0 through ``client`` (its consumer and, where it has one,
    its admin client): earliest 0, latest ``len(sent)``, max timestamp (admin clients) the
    first record with the largest timestamp, and every :func:`timestamp_queries` query
    (plus one past the last record) answered as :func:`check_offset_for_time` wants."""
    queries = timestamp_queries(sent) + [sent[-1].timestamp + 1]
    n = len(sent)
    top = first_with_max_timestamp(sent)
    if client == "confluent":
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin = admin_client(bootstrap, client="confluent")
        assert confluent_list_offset(admin, topic, OffsetSpec.earliest())[0] == 0
        assert confluent_list_offset(admin, topic, OffsetSpec.latest())[0] == n
        assert confluent_list_offset(admin, topic, OffsetSpec.max_timestamp()) == (
            top, sent[top].timestamp
        )
        c = new_consumer(bootstrap, client="confluent")
        try:
            assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, n)
            for q in queries:
                offset, ts = confluent_list_offset(admin, topic, OffsetSpec.for_timestamp(q))
                check_offset_for_time(sent, q, offset, ts)
                [tp] = c.offsets_for_times([TopicPartition(topic, 0, q)], timeout=10)
                assert tp.error is None
                check_offset_for_time(sent, q, tp.offset)
        finally:
            c.close()
    elif client == "kafka-python":
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec

        tp = TopicPartition(topic, 0)
        c = new_consumer(bootstrap, client="kafka-python")
        admin = admin_client(bootstrap, client="kafka-python")
        try:
            assert c.beginning_offsets([tp]) == {tp: 0}
            assert c.end_offsets([tp]) == {tp: n}
            assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
            assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == n
            mx = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
            assert (mx.offset, mx.timestamp) == (top, sent[top].timestamp)
            for q in queries:
                found = c.offsets_for_times({tp: q})[tp]
                if found is None:
                    check_offset_for_time(sent, q, None)
                else:
                    check_offset_for_time(sent, q, found.offset, found.timestamp)
        finally:
            c.close()
            admin.close()
    elif client == "aiokafka":
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def check() -> None:
            tp = TopicPartition(topic, 0)
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 enable_auto_commit=False)  # fmt: skip
            await c.start()
            try:
                assert await c.beginning_offsets([tp]) == {tp: 0}
                assert await c.end_offsets([tp]) == {tp: n}
                for q in queries:
                    found = (await c.offsets_for_times({tp: q}))[tp]
                    if found is None:
                        check_offset_for_time(sent, q, None)
                    else:
                        check_offset_for_time(sent, q, found.offset, found.timestamp)
            finally:
                await c.stop()

        run_async(check(), 60)
    else:
        raise ValueError(f"no ListOffsets helper for {client!r}")


# -- security ----------------------------------------------------------------------------

#: SASL users of the security tests' credentials file.
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def write_users(path: Path, users: dict[str, str] = USERS) -> Path:
    """A SASL credentials file (``sasl.credentials.file``) with ``users``
    (:func:`tidegate.testing.write_users`)."""
    from tidegate.testing import write_users as write

    return write(path, users)


def sasl_overrides(tmp_path: Path, **extra: str) -> dict:
    """Broker overrides for a PLAINTEXT and a SASL_PLAINTEXT listener on free ports, with
    :data:`USERS` (the file goes in ``tmp_path``); the broker's ``listener(name)`` gives
    each address."""
    from tests.conftest import free_port

    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},"
                     f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
        "sasl.credentials.file": str(write_users(tmp_path / "users.json")),
        **extra,
    }


# -- quotas ----------------------------------------------------------------------------


def alter_quotas(bootstrap: str, entity: dict, ops: dict, validate_only: bool = False) -> list:
    """AlterClientQuotas v1 over a raw connection: ``ops`` maps a key to a value or None
    (remove); ``entity`` maps entity type to name (None: the default)."""
    with RawClient.connect(bootstrap) as c:
        resp = c.request(
            49,
            1,
            {
                "entries": [
                    {
                        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                        "ops": [
                            {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in ops.items()
                        ],
                    }
                ],
                "validate_only": validate_only,
            },
        )
    return [(e.error_code, e.error_message) for e in resp.entries]


# -- metrics -----------------------------------------------------------------------------


def set_group_config(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource with confluent-kafka's
    AdminClient, as confluent-kafka's tests do."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """One scrape of a /metrics endpoint (it must answer 200 with Prometheus' text
    format): {(sample name, frozenset of its labels): value}; read with :func:`sample`."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly these labels in a :func:`scrape`."""
    return samples.get((name, frozenset(labels.items())))
