"""Fuzzing every API tidegate advertises, over raw sockets (issue 19).

Two kinds of case:

* **structured**: a request of one advertised (API key, version) with random field
  values, drawn by Hypothesis from kio's schema of that version (``st.from_type`` on
  the kio entity; record sets are random bytes, real batches or real batches with
  damage). Waits and timeouts are clamped so that no valid request parks for long,
  and partition counts are kept small: the fuzzer looks for parser and validation
  defects, not for how many partitions the disk holds;
* **mutated**: a frame a real client sent (recorded through :class:`RecordingProxy`
  while confluent-kafka, kafka-python and aiokafka produce, consume and administer)
  with damage: bit flips, truncation, junk appended, the size prefix or an int32 or
  an array count set to an extreme, an overlong varint, a compact string length made
  wrong, tagged fields duplicated or unknown.

:class:`Fuzzer` sends cases to a broker and checks the properties after each batch:
the broker process lives, every case is answered (with its correlation id) or its
connection closed or left silent, and a well-behaved client on its own connection keeps
producing and reading back its records. :func:`final_checks` then checks the broker's
log has no traceback, its memory stayed within the KIP-72 pool bound plus a margin,
and — after a clean stop — every segment passes recovery's validation.

Bounded slices run in CI (``tests/fuzz/test_fuzz.py``); the long run is

    .venv/bin/python -m tests.fuzz.fuzzer --cases 100000

which starts its own broker and prints a summary (see docs/reliability.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import random
import socket
import struct
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import psutil
from kio.index import load_request_schema
from kio.static.primitive import Records

from tests.conftest import readable
from tests.integration.rawclient import RawClient, encode_request, frame
from tidegate.log.config import LogConfig
from tidegate.log.local_log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from tidegate.log.log import Log
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey
from tidegate.record.batch_builder import Record, build_batch

#: how long a case may stay unanswered before its connection is dropped ("silent": a
#: produce with acks=0, a request parked in a purgatory)
SILENT_AFTER_S = 0.1
#: the broker settings of a fuzzing run: a small request pool (so that its bound is
#: what memory is checked against), no rebalance delay (JoinGroups answer at once)
FUZZ_OVERRIDES = {
    "socket.request.max.bytes": str(16 * 1024 * 1024),
    "queued.max.request.bytes": str(32 * 1024 * 1024),
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "transaction.state.log.num.partitions": "4",
}
#: RSS allowed above the pool bound: the interpreter, the loaded modules, the logs
RSS_MARGIN = 200 * 1024 * 1024

_I32 = struct.Struct(">i")


# -- cases ---------------------------------------------------------------------------------
def advertised() -> list[tuple[int, int]]:
    """Every (API key, version) the broker advertises."""
    return [(int(k), v) for k, r in SUPPORTED_APIS.items() for v in range(r.min_version, r.max_version + 1)]


def _batch(values: list[bytes]) -> bytes:
    return bytes(build_batch([Record(v, key=b"k") for v in values]))


_real_batches = st.lists(st.binary(max_size=64), min_size=1, max_size=4).map(_batch)


@st.composite
def _damaged_batch(draw: Any) -> bytes:
    data = bytearray(draw(_real_batches))
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


st.register_type_strategy(
    Records,  # type: ignore[type-abstract]
    st.one_of(st.binary(max_size=256), _real_batches, _damaged_batch()).map(Records),  # type: ignore[arg-type]
)

#: fields clamped in structured cases (top level and nested): waits that would park a
#: valid request, and counts that would make a valid request create a lot on disk
_WAIT_FIELDS = {"max_wait", "timeout", "session_timeout", "rebalance_timeout", "timeout_ms",
                "transaction_timeout"}
_SMALL_FIELDS = {"num_partitions": 4, "count": 4, "replication_factor": 1}


def _clamp(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_clamp(v) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if f.name in _WAIT_FIELDS and isinstance(v, datetime.timedelta):
            changes[f.name] = min(v, datetime.timedelta(milliseconds=50))
        elif f.name in _WAIT_FIELDS and isinstance(v, int):
            changes[f.name] = min(v, 50)
        elif f.name in _SMALL_FIELDS and isinstance(v, int):
            changes[f.name] = min(v, _SMALL_FIELDS[f.name])
        elif isinstance(v, tuple) or dataclasses.is_dataclass(v):
            changes[f.name] = _clamp(v)
    return dataclasses.replace(value, **changes) if changes else value


def structured(api_key: int, version: int) -> st.SearchStrategy[bytes]:
    """Frames of one (API, version) with random field values from kio's schema."""
    cls = load_request_schema(api_key, version)
    return st.builds(
        lambda body, cid, client_id: frame(encode_request(api_key, version, cid, _clamp(body), client_id)),
        st.from_type(cls),
        st.integers(0, 2**31 - 1),
        st.one_of(st.none(), st.text(max_size=20)),
    )


#: the group APIs whose structured cases are also steered (:func:`steered`): KIP-848's and
#: KIP-932's, and the config APIs on the GROUP resource
STEERED_APIS = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_HEARTBEAT,
                ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
                ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS)
#: ConfigResource.Type.GROUP
GROUP_RESOURCE = 32
_GROUPS = ("fuzz-g", "fuzz-corpus", "fuzz-corpus-848", "")
_MEMBERS = ("fuzz-member-1", "fuzz-member-2", "", "5c8b3f0e-3a36-4c9e-9d3e-1b2a3c4d5e6f")
_GROUP_CONFIG_KEYS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
                      "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.auto.offset.reset",
                      "share.isolation.level", "no.such.key", "")
_CONFIG_VALUES = ("45000", "5000", "0", "-1", "2147483648", "earliest", "latest", "by_duration:PT1H",
                  "by_duration:-PT1H", "read_committed", "x", "")
#: field name -> the values a steered case draws from (else kio's random value is kept)
_STEERED_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "resource_type": st.sampled_from((GROUP_RESOURCE, GROUP_RESOURCE, GROUP_RESOURCE, 2, 4)),
    "resource_name": st.sampled_from(_GROUPS),
    "group_id": st.sampled_from(_GROUPS),
    "group_ids": st.lists(st.sampled_from(_GROUPS), max_size=3).map(tuple),
    "member_id": st.sampled_from(_MEMBERS),
    "member_epoch": st.sampled_from((0, 0, 1, 2, -1, -2, 2**31 - 1)),
    "share_session_epoch": st.sampled_from((0, 1, -1)),
    "subscribed_topic_names": st.one_of(st.none(), st.lists(st.sampled_from(("fuzz-health", "nope")), max_size=2)
                                        .map(tuple)),
    "subscribed_topic_regex": st.one_of(st.none(), st.sampled_from(("", "fuzz-.*", "(", "a{1000000}", "^.*$"))),
    "server_assignor": st.one_of(st.none(), st.sampled_from(("uniform", "range", "sticky", ""))),
    "name": st.sampled_from(_GROUP_CONFIG_KEYS),
    "value": st.one_of(st.none(), st.sampled_from(_CONFIG_VALUES)),
    "config_operation": st.sampled_from((0, 1, 2, 3, 3, -1, 9)),
    "configuration_keys": st.one_of(st.none(), st.lists(st.sampled_from(_GROUP_CONFIG_KEYS), max_size=3).map(tuple)),
}


def _steer(value: Any, draw: Any) -> Any:
    """``value`` with the fields named in :data:`_STEERED_FIELDS` redrawn from their
    near-valid values, at every level (the type kio declared is kept where it allows)."""
    if isinstance(value, tuple):
        return tuple(_steer(v, draw) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        strategy = _STEERED_FIELDS.get(f.name)
        if strategy is not None and (v is None or isinstance(v, (int, str, tuple))) and not isinstance(v, bool):
            new = draw(strategy)
            if new is not None or v is None or "None" in str(f.type):
                changes[f.name] = new
        elif isinstance(v, tuple) or dataclasses.is_dataclass(v):
            changes[f.name] = _steer(v, draw)
    return dataclasses.replace(value, **changes) if changes else value


def steered(api_key: int, version: int) -> st.SearchStrategy[bytes]:
    """Frames of one of :data:`STEERED_APIS` whose group ids, member ids and epochs,
    subscriptions, config resources (mostly GROUP), config keys and values are drawn from
    small sets of near-valid values, so that the cases reach the coordinators' state
    machines and the GROUP config validation rather than stopping at the first check."""
    cls = load_request_schema(api_key, version)

    @st.composite
    def case(draw: Any) -> bytes:
        body = _steer(_clamp(draw(st.from_type(cls))), draw)
        return frame(encode_request(api_key, version, draw(st.integers(0, 2**31 - 1)), body, "fuzz"))

    return case()


def send_cases(fuzzer: Fuzzer, cases: st.SearchStrategy[bytes], examples: int) -> None:
    """Send ``examples`` frames drawn from ``cases`` (Hypothesis, no example database)."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(cases)
    def one(data: bytes) -> None:
        fuzzer.send(data)

    one()


def steered_pairs() -> list[tuple[int, int]]:
    """The advertised (API key, version) pairs of :data:`STEERED_APIS`."""
    return [(k, v) for k, v in advertised() if k in STEERED_APIS]


def _mutate_once(data: bytearray, rng: random.Random) -> None:
    n = len(data)
    kind = rng.randrange(9)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation (the size prefix still says the old length)
        del data[rng.randint(4, n):]
    elif kind == 2:  # junk appended inside the frame
        data += rng.randbytes(rng.randint(1, 64))
        data[0:4] = _I32.pack(len(data) - 4)
    elif kind == 3:  # the size prefix at an extreme
        data[0:4] = _I32.pack(rng.choice([0, 1, -1, -(2**31), 2**31 - 1, n, n + 1, n - 5]))
    elif kind == 4 and n >= 16:  # an int32 (a length, an array count) at an extreme
        at = rng.randrange(12, n - 3)
        data[at:at + 4] = _I32.pack(rng.choice([-1, -2, 0, 2**31 - 1, -(2**31), 0x7FFF, 1 << 24]))
    elif kind == 5 and n >= 16:  # an int16 (a string length) at an extreme
        at = rng.randrange(12, n - 1)
        data[at:at + 2] = struct.pack(">h", rng.choice([-1, -2, 0x7FFF, -(2**15)]))
    elif kind == 6 and n >= 14:  # an overlong varint: continuation bytes inserted
        at = rng.randrange(12, n)
        data[at:at] = b"\x80" * rng.randint(1, 10)
        data[0:4] = _I32.pack(len(data) - 4)
    elif kind == 7 and n >= 14:  # tagged fields: an unknown one, or one tag twice
        at = rng.randrange(12, n)
        tag = rng.choice([b"\x01\x00\x00", b"\x02\x05\x00\x00\x00\x00\x00", b"\x02\x00\x00\x00\x00"])
        data[at:at] = tag
        data[0:4] = _I32.pack(len(data) - 4)
    elif n >= 14:  # a compact length (varint) set huge
        at = rng.randrange(12, n)
        data[at:at + 1] = b"\xff\xff\xff\xff\x0f"
        data[0:4] = _I32.pack(len(data) - 4)


def mutate(original: bytes, rng: random.Random) -> bytes:
    """A damaged copy of a recorded frame (one to three mutations)."""
    data = bytearray(original)
    for _ in range(rng.randint(1, 3)):
        if len(data) < 5:
            break
        _mutate_once(data, rng)
    return bytes(data)


# -- recording real clients ---------------------------------------------------------------
class RecordingProxy:
    """A loopback TCP proxy in front of a broker that records every complete request
    frame clients send (size prefix included); responses pass through untouched. Start
    the broker with ``advertised.listeners`` naming :attr:`bootstrap` so that clients
    make every connection through the proxy, not only the bootstrap one."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self._server.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for src, dst, record in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, record), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
                if record:
                    buf += chunk
                    while len(buf) >= 4:
                        (size,) = _I32.unpack_from(buf, 0)
                        if len(buf) < 4 + size:
                            break
                        with self._lock:
                            self.frames.append(bytes(buf[: 4 + size]))
                        del buf[: 4 + size]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self._server.close()


# -- sending cases --------------------------------------------------------------------------
@dataclass
class Outcomes:
    answered: int = 0
    closed: int = 0
    silent: int = 0
    by_api: Counter = field(default_factory=Counter)

    def total(self) -> int:
        return self.answered + self.closed + self.silent


class CaseFailure(AssertionError):
    """A property broken by one case: the case's bytes are in the message."""


class Fuzzer:
    """Sends cases to one broker on reused connections and checks each answer."""

    def __init__(self, host: str, port: int, alive: Callable[[], bool], *,
                 authenticate: Callable[[RawClient], None] | None = None) -> None:
        self.host, self.port = host, port
        self.alive = alive
        self.authenticate = authenticate
        self.outcomes = Outcomes()
        self._conn: RawClient | None = None
        self._health: RawClient | None = None
        self._health_sent = 0

    def _connection(self) -> RawClient:
        if self._conn is None:
            self._conn = RawClient(self.host, self.port, timeout=10)
            if self.authenticate is not None:
                self.authenticate(self._conn)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def send(self, data: bytes) -> str:
        """Send one case; 'answered', 'closed' or 'silent'. Raises CaseFailure when the
        broker answers with another correlation id or dies."""
        conn = self._connection()
        api_key = struct.unpack_from(">h", data, 4)[0] if len(data) >= 6 else -1
        self.outcomes.by_api[api_key] += 1
        try:
            conn.send_raw(data)
        except OSError:
            self._drop()  # closed while we were still sending
            self.outcomes.closed += 1
            return self._after("closed", data)
        ready = readable(conn.sock, SILENT_AFTER_S)
        if not ready:
            self._drop()
            self.outcomes.silent += 1
            return self._after("silent", data)
        try:
            response = conn.recv_frame()
        except Exception:  # noqa: BLE001 - EOF, reset: the broker closed this connection
            self._drop()
            self.outcomes.closed += 1
            return self._after("closed", data)
        sent_cid = _I32.unpack_from(data, 8)[0] if len(data) >= 12 else None
        got_cid = _I32.unpack_from(response, 0)[0]
        if _I32.unpack_from(data, 0)[0] != len(data) - 4:
            # a size prefix shorter than the bytes sent: the rest starts the next frame
            # on this stream, so the connection cannot be reused for a clean case
            self._drop()
        elif sent_cid is not None and got_cid != sent_cid:
            raise CaseFailure(f"answered correlation id {got_cid} to a request with {sent_cid}: {data!r}")
        self.outcomes.answered += 1
        return self._after("answered", data)

    def _after(self, outcome: str, data: bytes) -> str:
        if not self.alive():
            raise CaseFailure(f"the broker died after this case ({outcome}): {data!r}")
        return outcome

    def check_well_behaved_client(self) -> None:
        """A client on its own long-lived connection: ApiVersions, then a produce of one
        record to ``fuzz-health`` whose offset must follow the previous one, read back."""
        if self._health is None:
            self._health = RawClient(self.host, self.port, timeout=10)
            if self.authenticate is not None:
                self.authenticate(self._health)
            self._health.request(ApiKey.CREATE_TOPICS, 7, {
                "topics": [{"name": "fuzz-health", "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout": 10_000, "validate_only": False})
        c = self._health
        av = c.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "health",
                                                  "client_software_version": "1"})
        assert av.error_code == 0, av
        value = b"health-%d" % self._health_sent
        resp = c.request(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": "fuzz-health", "partition_data": [
                {"index": 0, "records": _batch([value])}]}]})
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0, part
        fetched = c.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "fuzz-health", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": part.base_offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        fp = fetched.responses[0].partitions[0]
        assert fp.error_code == 0 and value in (fp.records or b""), fp
        self._health_sent += 1

    def close(self) -> None:
        self._drop()
        if self._health is not None:
            self._health.close()


# -- the checks after a run ------------------------------------------------------------------
def check_log_text(text: str) -> None:
    """No traceback: a malformed request is refused with a one-line reason."""
    assert "Traceback" not in text, text[text.index("Traceback") - 2000: text.index("Traceback") + 3000]


def check_rss(pid: int, pool_bytes: int) -> int:
    rss = psutil.Process(pid).memory_info().rss
    assert rss <= pool_bytes + RSS_MARGIN, f"broker RSS {rss} over the pool bound {pool_bytes} + margin"
    return rss


def check_segments(data_dir: Path) -> int:
    """With the broker stopped: open every partition log as after a crash (no
    clean-shutdown marker, no recovery point), so recovery validates every batch of
    every segment; nothing may be truncated. Returns the partitions checked."""
    checked = 0
    for d in sorted(p for p in data_dir.iterdir() if p.is_dir() and "-" in p.name):
        if not any(d.glob("*.log")):
            continue
        (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        (d / RECOVERY_POINT_FILE).unlink(missing_ok=True)
        plog = Log(d, LogConfig(), int(time.time() * 1000))
        try:
            assert plog.recovered_truncated_bytes == 0, f"{d}: {plog.recovered_truncated_bytes} bytes torn"
        finally:
            plog.close()
        checked += 1
    return checked


def start_recorded_broker(base: Path, overrides: dict | None = None) -> tuple[Any, RecordingProxy]:
    """A broker (tests.conftest.BrokerProcess) that advertises a :class:`RecordingProxy`
    in front of it: clients given ``proxy.bootstrap`` go through the proxy for every
    connection; the fuzzer talks to ``broker.port`` directly."""
    from tests.conftest import BrokerProcess, free_port

    port = free_port()
    proxy = RecordingProxy(("127.0.0.1", port))
    broker = BrokerProcess(base, port=port, overrides={
        **FUZZ_OVERRIDES, **(overrides or {}),
        "advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}"}).start()
    return broker, proxy


def record_client_frames(proxy: RecordingProxy) -> list[bytes]:
    """Frames real clients send through ``proxy``: confluent-kafka, kafka-python and
    aiokafka produce; kafka-python fetches and confluent-kafka consumes in a group and
    commits, with the classic protocol and with KIP-848's (ConsumerGroupHeartbeat,
    OffsetCommit v9); confluent-kafka's admin client describes that group
    (ConsumerGroupDescribe) and sets and reads its GROUP configs, and a confluent-kafka
    share consumer reads and acknowledges (ShareGroupHeartbeat, ShareFetch,
    ShareAcknowledge); kafka-python's admin client creates a topic, describes configs,
    groups and log dirs."""
    from tests.integration import clients

    bootstrap = proxy.bootstrap
    topic = clients.create_topic(bootstrap, client="kafka-python", partitions=2)
    for client in ("confluent", "kafka-python", "aiokafka"):
        clients.produce(bootstrap, topic, [b"v%d" % i for i in range(5)], client=client)
    clients.consume(bootstrap, topic, 15, client="kafka-python", partitions=2)
    _consume_in_a_group(bootstrap, topic, 15)
    _consume_in_a_group(bootstrap, topic, 15, group="fuzz-corpus-848", protocol="consumer")
    _administer_consumer_groups(bootstrap, topic)
    admin = clients.admin_client(bootstrap, client="kafka-python")
    try:
        from kafka.admin import ConfigResource, ConfigResourceType

        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        admin.list_groups()
        admin.describe_groups(["fuzz-corpus"])
        admin.describe_log_dirs()
    finally:
        admin.close()
    time.sleep(0.2)
    return list(proxy.frames)


def _consume_in_a_group(
    bootstrap: str, topic: str, count: int, group: str = "fuzz-corpus", protocol: str = "classic"
) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        assert got == count, f"read {got} of {count}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _administer_consumer_groups(bootstrap: str, topic: str) -> None:
    """ConsumerGroupDescribe, IncrementalAlterConfigs and DescribeConfigs on the GROUP
    resource (confluent-kafka's admin client), then a share consumer's round."""
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.describe_consumer_groups(["fuzz-corpus-848"]).values():
        future.result(10)
    for group, key in (("fuzz-corpus-848", "consumer.session.timeout.ms"), ("fuzz-share", "share.auto.offset.reset")):
        value = "50000" if key.startswith("consumer") else "earliest"
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(10)
        for future in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values():
            future.result(10)
    share = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-share", "log_level": 0})
    try:
        share.subscribe([topic])
        deadline = time.monotonic() + 30
        got = 0
        while got == 0 and time.monotonic() < deadline:
            got += sum(1 for m in share.poll(0.5) if not m.error())
        assert got, "the share consumer read nothing"
        share.commit_sync()
    finally:
        share.close()


def mutated_cases(corpus: list[bytes], seed: int, n: int) -> Iterable[bytes]:
    rng = random.Random(seed)
    for _ in range(n):
        yield mutate(rng.choice(corpus), rng)


# -- the long run -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz a tidegate broker started for the run.")
    parser.add_argument("--cases", type=int, default=100_000, help="cases in all (half structured)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="tidegate-fuzz-"))
    broker, proxy = start_recorded_broker(base / "data")
    fuzzer = Fuzzer("127.0.0.1", broker.port, broker.alive)
    t0 = time.monotonic()
    peak = 0
    try:
        corpus = record_client_frames(proxy)
        print(f"recorded {len(corpus)} client frames")
        pairs = [(structured, pair) for pair in advertised()] + [(steered, pair) for pair in steered_pairs()]
        per_pair = max(1, args.cases // 2 // len(pairs))

        for cases, (api_key, version) in pairs:
            send_cases(fuzzer, cases(api_key, version), per_pair)
            fuzzer.check_well_behaved_client()
            peak = max(peak, check_rss(broker.pid, int(FUZZ_OVERRIDES["queued.max.request.bytes"])))
        for i, data in enumerate(mutated_cases(corpus, args.seed, args.cases // 2)):
            fuzzer.send(data)
            if i % 500 == 0:
                fuzzer.check_well_behaved_client()
                peak = max(peak, check_rss(broker.pid, int(FUZZ_OVERRIDES["queued.max.request.bytes"])))
        fuzzer.check_well_behaved_client()
        fuzzer.close()
        check_log_text(broker.log_text())
        assert broker.stop() == 0
        partitions = check_segments(broker.data_dir)
    finally:
        broker.stop_or_kill()
        proxy.close()
    o = fuzzer.outcomes
    print(f"{o.total()} cases in {time.monotonic() - t0:.0f} s: {o.answered} answered, {o.closed} "
          f"closed, {o.silent} silent; peak broker RSS {peak / 2**20:.0f} MiB; "
          f"{partitions} partition logs recovered with nothing torn; no traceback in the log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
