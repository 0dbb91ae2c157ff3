"""tidegate.metrics and tidegate.top without sockets: histogram, counters, collectors,
KafkaApis accounting, the HTTP responder and the top view."""

from __future__ import annotations

import struct
import uuid

import pytest

from tests.core_harness import CTX, CoreHarness, decode_frame, response_bytes
from tests.fake_loop import clock_at
from tests.integration.rawclient import encode_request
from tidegate import top
from tidegate.clock import MockClock
from tidegate.config import BrokerConfig, ConfigError, parse_metrics_listener
from tidegate.errors import ErrorCode
from tidegate.metrics.collectors import error_name
from tidegate.metrics.http_server import MetricsHttpServer
from tidegate.metrics.prometheus import BrokerMetrics
from tidegate.metrics.request_metrics import NS_PER_MS, Histogram, RequestMetrics
from tidegate.network.memory_pool import NONE, SimpleMemoryPool
from tidegate.network.mute_state import ChannelMuteState, MuteReason
from tidegate.network.request_channel import Request
from tidegate.protocol.messages.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)
from tidegate.record.batch_builder import Record, build_batch
from tidegate.server.quota.client_quota_manager import QuotaEntity
from tidegate.server.quota.quota_factory import QuotaManagers

NOW = 1_700_000_000_000


def sample(metrics: BrokerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def header(api_key: int, client_id: bytes | None, version: int = 9, correlation: int = 1) -> bytes:
    if client_id is None:
        return struct.pack(">hhih", api_key, version, correlation, -1)
    return struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id


# ---- histogram ---------------------------------------------------------------------------
def test_histogram_buckets_are_le_inclusive_and_cumulative():
    h = Histogram([1, 5, 10])
    for v in (0, 1, 1.5, 5, 7, 10, 11, 1000):
        h.observe(v)
    assert h.buckets() == [("1.0", 2), ("5.0", 4), ("10.0", 6), ("+Inf", 8)]
    assert h.count == 8
    assert h.sum == pytest.approx(1035.5)


def test_histogram_scale_observes_raw_units_and_exposes_scaled():
    h = Histogram([0.5, 2], scale=NS_PER_MS)  # observed in ns, exposed in ms
    h.observe(400_000)  # 0.4 ms
    h.observe(500_000)  # exactly 0.5 ms: in the 0.5 bucket
    h.observe(3_000_000)
    assert h.buckets() == [("0.5", 2), ("2.0", 2), ("+Inf", 3)]
    assert h.scaled_sum() == pytest.approx(3.9)


# ---- request metrics ---------------------------------------------------------------------
def test_begin_reads_api_key_and_client_id_from_the_header():
    rm = RequestMetrics()
    t = rm.begin(bytearray(header(0, b"producer-1") + b"body"))
    assert t is not None and t.api.name == "Produce" and t.client.client_id == "producer-1"
    t.local_done()
    t.sent()
    t2 = rm.begin(bytearray(header(3, None)))  # null client id
    assert t2 is not None and t2.api.name == "Metadata" and t2.client.client_id == ""
    assert rm.begin(bytearray(b"\x00\x01")) is None  # too short to hold a header
    s = rm.api(0)
    assert s.requests == 1 and s.total.count == 1 and s.remote.count == 1
    assert s.remote.sum == 0  # answered synchronously: nothing parked
    assert rm.client(b"producer-1").requests == 1


def test_timing_splits_local_remote_and_send():
    rm = RequestMetrics()
    t = rm.begin(bytearray(header(1, b"c")))
    assert t is not None
    t.received, t.started, t.local, t.remote = 0, 1_000_000, 3_000_000, 3_000_000
    t.remote = 53_000_000  # parked 50 ms
    t.sent()
    s = rm.api(1)
    assert s.queue.scaled_sum() == pytest.approx(1)
    assert s.local.scaled_sum() == pytest.approx(2)
    assert s.remote.scaled_sum() == pytest.approx(50)
    assert s.total.count == 1 and s.total.scaled_sum() > 53
    assert rm.client(b"c").time_ns == s.total.sum


def test_client_ids_are_capped_and_the_rest_fold_into_other():
    bm = BrokerMetrics(max_client_ids=2)
    rm = bm.requests
    for cid in (b"a", b"b", b"c", b"d", b"a"):
        t = rm.begin(bytearray(header(18, cid, version=3)))
        assert t is not None
        t.local_done()
        t.sent()
    assert sample(bm, "tidegate_client_requests_total", client_id="a") == 2
    assert sample(bm, "tidegate_client_requests_total", client_id="b") == 1
    assert sample(bm, "tidegate_client_requests_total", client_id="other") == 2
    assert sample(bm, "tidegate_client_requests_total", client_id="c") is None


def test_unknown_api_keys_share_one_entry():
    rm = RequestMetrics()
    assert rm.api(57).name == "Unknown(57)"  # a Kafka API tidegate does not implement (UpdateFeatures)
    assert rm.api(30000) is rm.api(-5)
    assert rm.api(30000).name == "Unknown"


def test_count_errors_walks_nested_responses_and_skips_none():
    bm = BrokerMetrics()
    body = OffsetFetchResponse(groups=[
        OffsetFetchResponseGroup(group_id="a", error_code=ErrorCode.group_authorization_failed),
        OffsetFetchResponseGroup(group_id="b", topics=[OffsetFetchResponseTopics(name="t", partitions=[
            OffsetFetchResponsePartitions(partition_index=0, error_code=ErrorCode.unknown_topic_or_partition),
            OffsetFetchResponsePartitions(partition_index=1, error_code=ErrorCode.none),
        ])]),
    ])  # fmt: skip
    bm.requests.count_errors(9, body)
    assert sample(
        bm, "kafka_network_requestmetrics_errors_total", request="OffsetFetch",
        error="GROUP_AUTHORIZATION_FAILED",
    ) == 1  # fmt: skip
    assert sample(
        bm, "kafka_network_requestmetrics_errors_total", request="OffsetFetch",
        error="UNKNOWN_TOPIC_OR_PARTITION",
    ) == 1  # fmt: skip
    assert sample(bm, "kafka_network_requestmetrics_errors_total", request="OffsetFetch", error="NONE") is None
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(31999) == "UNKNOWN_31999"


def test_request_histograms_are_exposed_per_request():
    bm = BrokerMetrics()
    t = bm.requests.begin(bytearray(header(0, b"p")))
    assert t is not None
    t.received, t.started, t.local, t.remote = 0, 0, 200_000, 200_000
    t.sent()
    name = "kafka_network_requestmetrics_localtimems"
    assert sample(bm, f"{name}_bucket", request="Produce", le="0.25") == 1
    assert sample(bm, f"{name}_bucket", request="Produce", le="0.1") == 0
    assert sample(bm, f"{name}_count", request="Produce") == 1
    assert sample(bm, f"{name}_sum", request="Produce") == pytest.approx(0.2)
    for suffix in ("requestqueuetimems", "remotetimems", "responsesendtimems", "totaltimems"):
        assert sample(bm, f"kafka_network_requestmetrics_{suffix}_count", request="Produce") == 1
    assert sample(bm, "kafka_network_requestmetrics_requests_total", request="Produce") == 1


# ---- topic, log, socket server, pool and purgatory collectors -------------------------------
def test_topic_counters_and_removal():
    bm = BrokerMetrics()
    bm.topics.appended("t", 10, 1000)
    bm.topics.appended("t", 5, 400)
    bm.topics.fetched("t", 1400)
    assert sample(bm, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 15
    assert sample(bm, "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == 1400
    assert sample(bm, "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 1400
    bm.topics.remove("t")
    assert sample(bm, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") is None


class FakeLog:
    def __init__(self, start, end, size, segments=1, closed=False):
        self.log_start_offset, self.log_end_offset, self.size_bytes = start, end, size
        self.segments = [object()] * segments
        self.closed = closed


def test_log_collector_reads_partition_gauges_at_scrape_time():
    bm = BrokerMetrics()
    logs = {("t", 0): FakeLog(0, 10, 500), ("t", 1): FakeLog(3, 7, 90, 2)}
    bm.register_logs(lambda: logs)
    assert sample(bm, "kafka_log_log_logendoffset", topic="t", partition="0") == 10
    assert sample(bm, "kafka_log_log_logstartoffset", topic="t", partition="1") == 3
    assert sample(bm, "kafka_log_log_size", topic="t", partition="1") == 90
    assert sample(bm, "kafka_log_log_numlogsegments", topic="t", partition="1") == 2
    logs[("t", 0)] = FakeLog(0, 12, 600)  # live: the next scrape sees the change
    assert sample(bm, "kafka_log_log_logendoffset", topic="t", partition="0") == 12
    logs[("u", 0)] = FakeLog(0, 1, 1, closed=True)
    assert sample(bm, "kafka_log_log_size", topic="u", partition="0") is None


class FakeConn:
    """A connection as SocketServerCollector reads it (metrics.collectors.ConnectionState)."""

    def __init__(self, listener, *reasons):
        self.listener_name = listener
        self.mute_state = ChannelMuteState()
        self.closed = False
        for r in reasons:
            self.mute_state.mute(r)


class FakeServer:
    """A SocketServer without connection limits, as its collector reads it
    (metrics.collectors.SocketServerState)."""

    def __init__(self, pool, conns):
        self.pool = pool
        self.connections = dict(enumerate(conns))
        self.bound = {"PLAINTEXT": ("127.0.0.1", 9092), "INTERNAL": ("127.0.0.1", 9093)}
        self.pending = {}
        self.idle_closed_total = {}
        self.quotas = None
        self.clock = MockClock()

    def acceptor_blocked_ns(self, listener):
        return 0

    def response_bytes_in_flight(self):
        return 0


def test_socket_server_collector_counts_connections_and_mutes():
    conns = [
        FakeConn("PLAINTEXT"),
        FakeConn("PLAINTEXT", MuteReason.IN_FLIGHT, MuteReason.MEMORY),
        FakeConn("PLAINTEXT", MuteReason.MEMORY),
    ]
    bm = BrokerMetrics()
    bm.register_socket_server(FakeServer(NONE, conns))
    count = "kafka_server_socketservermetrics_connection_count"
    assert sample(bm, count, listener="PLAINTEXT") == 3
    assert sample(bm, count, listener="INTERNAL") == 0
    muted = "tidegate_network_socketserver_mutedconnections"
    assert sample(bm, muted, reason="MEMORY") == 2
    assert sample(bm, muted, reason="IN_FLIGHT") == 1
    assert sample(bm, muted, reason="THROTTLE") == 0
    # MemoryPool.NONE: unbounded, nothing used
    assert sample(bm, "kafka_network_socketserver_memorypoolavailable") == NONE.available
    assert sample(bm, "kafka_network_socketserver_memorypoolused") == 0


def test_memory_pool_gauges_follow_a_simple_memory_pool():
    clock = MockClock()
    pool = SimpleMemoryPool(1000, 1000, strict=True, clock=clock)
    bm = BrokerMetrics()
    bm.register_socket_server(FakeServer(pool, []))
    buf = pool.try_allocate(600)
    assert buf is not None
    assert sample(bm, "kafka_network_socketserver_memorypoolused") == 600
    assert sample(bm, "kafka_network_socketserver_memorypoolavailable") == 400
    assert pool.try_allocate(600) is None  # starts a dry spell
    clock.set_milliseconds(250)
    pool.release(buf)  # ends it: 250 ms depleted
    assert sample(bm, "kafka_network_socketserver_memorypooldepletedtimetotal") == 250
    # 250 depleted ms over Kafka's padded window (2 samples of 30 s: at least one full
    # window counted, 30 s here)
    assert sample(bm, "kafka_network_socketserver_memorypoolavgdepletedpercent") == 250 / 30_000


class FakePurgatory:
    """A purgatory's gauges (metrics.collectors.PurgatoryState)."""

    def __init__(self, size=0, delayed=0, expirations=0):
        self.purgatory_size = size
        self.num_delayed_operations = delayed
        self.expirations_total = expirations


def test_registered_purgatories_are_read_at_scrape_time():
    bm = BrokerMetrics()
    p = FakePurgatory(4, 3, 9)
    bm.register_purgatory("Produce", p)
    bm.register_purgatory("Fetch", FakePurgatory())
    base = "kafka_server_delayedoperationpurgatory_"
    assert sample(bm, base + "purgatorysize", delayedOperation="Produce") == 4
    assert sample(bm, base + "numdelayedoperations", delayedOperation="Produce") == 3
    assert sample(bm, base + "expires_total", delayedOperation="Produce") == 9
    assert sample(bm, base + "purgatorysize", delayedOperation="Fetch") == 0
    p.purgatory_size = 7
    assert sample(bm, base + "purgatorysize", delayedOperation="Produce") == 7
    bm.unregister_purgatory("Fetch")
    assert sample(bm, base + "purgatorysize", delayedOperation="Fetch") is None


def test_each_broker_has_its_own_registry():
    a, b = BrokerMetrics(), BrokerMetrics()
    a.topics.appended("t", 1, 1)
    assert sample(a, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 1
    assert sample(b, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") is None


# ---- KafkaApis accounting (sans-IO) --------------------------------------------------------
@pytest.fixture
def core(tmp_path):
    h = CoreHarness(tmp_path, {"auto.create.topics.enable": "false"})
    h.logs.create_topic("t", 1, {})
    yield h
    h.close()


@pytest.fixture
def metered(tmp_path):
    """A core counting into its BrokerMetrics (metrics.listener set)."""
    h = CoreHarness(tmp_path, {"auto.create.topics.enable": "false"}, metrics=BrokerMetrics())
    h.logs.create_topic("t", 1, {})
    yield h
    h.close()


@pytest.fixture
def apis(metered):
    return metered.apis


def call(apis, api_key, version, body):
    """Send one request to ``apis`` (answered at once here: acks=1, max_wait 0) and
    return its decoded response."""
    payload = bytearray(encode_request(api_key, version, 1, body))
    outcome = apis.handle(Request(CTX, payload))
    return decode_frame(api_key, version, response_bytes(outcome), 1)


def produce(apis, topic, batch):
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return call(apis, 0, 9, body)


def fetch(apis, topic, offset, version=12, topic_id=None):
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "topic_id": topic_id or uuid.UUID(int=0),
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return call(apis, 1, version, body)


def test_apis_count_messages_bytes_and_errors(apis):
    m = apis.request_helper.metrics
    batch = bytes(build_batch([Record(b"v" * 50) for _ in range(5)]))
    produce(apis, "t", batch)
    produce(apis, "t", batch)
    produce(apis, "missing", batch)
    assert sample(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 10
    assert sample(m, "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == 2 * len(batch)
    errors = "kafka_network_requestmetrics_errors_total"
    assert sample(m, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert sample(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="missing") is None

    fetch(apis, "t", 0)
    assert sample(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 2 * len(batch)
    fetch(apis, "t", 999)  # out of range: an error, no bytes
    assert sample(m, errors, request="Fetch", error="OFFSET_OUT_OF_RANGE") == 1
    topic_id = apis.store.get("t").topic_id
    fetch(apis, None, 0, version=13, topic_id=topic_id)  # by topic id
    assert sample(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 4 * len(batch)

    call(apis, 19, 7, {  # CreateTopics of an existing topic: counted by the generic walk
        "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": 5000, "validate_only": False,
    })  # fmt: skip
    assert sample(m, errors, request="CreateTopics", error="TOPIC_ALREADY_EXISTS") == 1

    call(apis, 20, 6, {"topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}], "timeout": 5000})
    assert sample(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") is None


def test_apis_without_metrics_answer_the_same(core):
    """metrics.listener unset: nothing on the request path counts (no BrokerMetrics is
    wired in), and every answer is the same as with metrics on."""
    apis = core.apis
    assert apis.request_helper.metrics is None and core.core.topic_admin.metrics is None
    assert core.replicas.topic_stats is None
    batch = bytes(build_batch([Record(b"v")]))
    ok = produce(apis, "t", batch).responses[0].partition_responses[0]
    assert (ok.error_code, ok.base_offset) == (0, 0)
    missing = produce(apis, "missing", batch).responses[0].partition_responses[0]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    part = fetch(apis, "t", 0).responses[0].partitions[0]
    # the stored batch is the producer's from the magic byte on (offset and leader epoch are set)
    assert (part.error_code, part.high_watermark, bytes(part.records)[16:]) == (0, 1, batch[16:])


# ---- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        ("http://127.0.0.1:9404", ("127.0.0.1", 9404)),
        ("http://0.0.0.0:0/", ("0.0.0.0", 0)),
        ("  http://[::1]:9404/metrics ", ("::1", 9404)),
        ("", None),
        (None, None),
    ],
)
def test_metrics_listener_values(value, expected):
    assert parse_metrics_listener(value) == expected


@pytest.mark.parametrize(
    "value, message",
    [
        ("https://127.0.0.1:9404", "Only the http scheme"),
        ("127.0.0.1:9404", "Only the http scheme"),
        ("http://127.0.0.1", "A host and a port are required"),
        ("http://:9404", "A host and a port are required"),
        ("http://127.0.0.1:70000", "out of range"),
        ("http://127.0.0.1:9404/other", "always served at /metrics"),
        ("http://u@127.0.0.1:9404", "always served at /metrics"),
    ],
)
def test_metrics_listener_rejects_bad_urls(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        BrokerConfig({"metrics.listener": value})
    assert "metrics.listener" in str(info.value)


def test_metrics_listener_is_off_by_default():
    assert BrokerConfig().get("metrics.listener") is None


# ---- HTTP responder (no socket) -------------------------------------------------------------
def test_http_responder_serves_metrics_and_404s_the_rest():
    bm = BrokerMetrics()
    bm.topics.appended("t", 1, 1)
    server = MetricsHttpServer(bm)
    status, ctype, body = server._respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == "200 OK" and ctype.startswith("text/plain; version=0.0.4")
    assert b'kafka_server_brokertopicmetrics_messagesin_total{topic="t"} 1.0' in body
    assert server._respond(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")[0] == "200 OK"
    status, ctype, body = server._respond(
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0,"
        b"text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n"
    )
    assert ctype.startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    assert server._respond(b"GET / HTTP/1.1\r\n\r\n")[0].startswith("404")
    assert server._respond(b"POST /metrics HTTP/1.1\r\n\r\n")[0].startswith("405")
    assert server._respond(b"garbage\r\n\r\n")[0].startswith("400")


# ---- tidegate top's view ---------------------------------------------------------------------
def _snapshot(bm: BrokerMetrics, at: float) -> top.Snapshot:
    return top.Snapshot.parse(bm.exposition().decode(), at)


def test_top_view_rates_names_topics_and_clients():
    bm = BrokerMetrics()
    bm.register_logs(lambda: {("orders", 0): FakeLog(0, 100, 4096)})
    bm.register_socket_server(FakeServer(NONE, [FakeConn("PLAINTEXT")]))
    bm.register_purgatory("Produce", FakePurgatory(size=2))
    bm.topics.appended("orders", 100, 10_000)
    first = _snapshot(bm, 10.0)
    bm.topics.appended("orders", 50, 5_000)
    for _ in range(4):
        t = bm.requests.begin(bytearray(header(0, b"billing-svc")))
        assert t is not None
        t.local_done()
        t.sent()
    second = _snapshot(bm, 12.0)
    view = top.build_view(first, second, "test")
    text = top.render_plain(view)
    sections = {s.title: s for s in view.sections}
    orders = sections["Topics"].rows[0]
    assert orders[0] == "orders" and orders[2] == "25"  # 50 records over 2 s
    assert orders[3] == "2.4 KiB/s"  # 5000 bytes / 2 s
    assert sections["Requests"].rows[0][:3] == ["Produce", "2", "4"]
    assert sections["Top clients by request time"].rows[0][0] == "billing-svc"
    assert sections["Purgatories"].rows[0][:2] == ["Produce", "2"]
    assert sections["Connections"].rows == [["INTERNAL", "0"], ["PLAINTEXT", "1"]]
    assert top.NO_THROTTLE in text
    assert "unbounded" in text
    assert "2 s" not in view.header and "rates over 2.0s" in view.header
    top.render_rich(view)  # renders without a terminal


def test_top_shows_the_log_cleaner():
    from tidegate.log.cleaner import Cleaner
    from tidegate.log.log_cleaner import LogCleaner

    clock = MockClock(start_ms=1_000)
    cleaner = LogCleaner(type("M", (), {"uncleanable": {("t", 0)}})(), Cleaner(1 << 20, clock=clock))  # type: ignore[arg-type]
    cleaner.max_dirty_percent, cleaner.recopy_percent, cleaner.last_run_ms = 42, 7, 1_000
    bm = BrokerMetrics()
    bm.register_log_cleaner(cleaner, clock)
    clock.advance(2_500)
    view = top.build_view(None, _snapshot(bm, 1.0), "test")
    rows = dict(map(tuple, {s.title: s for s in view.sections}["Log cleaner"].rows))
    assert rows["dirtiest compacted log"] == "42 % dirty"
    assert rows["last look"] == "2.5 s ago"
    assert "7 % of bytes kept" in rows["last clean"]
    assert rows["uncleanable partitions"] == "1"
    no_cleaner = top.build_view(None, _snapshot(BrokerMetrics(), 1.0), "test")
    assert {s.title: s for s in no_cleaner.sections}["Log cleaner"].note == "log.cleaner.enable=false"


def test_top_protocol_only_view_says_what_is_missing():
    snap = top.Snapshot(
        5.0,
        {
            "kafka_log_log_logendoffset": [({"topic": "a", "partition": "0"}, 40.0)],
            "kafka_log_log_logstartoffset": [({"topic": "a", "partition": "0"}, 0.0)],
        },
        limitation="no metrics listener",
    )
    before = top.Snapshot(4.0, {"kafka_log_log_logendoffset": [({"topic": "a"}, 30.0)]})
    view = top.build_view(before, snap, "b:9092")
    text = top.render_plain(view)
    assert "note: no metrics listener" in text
    assert view.sections[0].rows[0][:3] == ["a", "1", "10"]  # offsets moved by 10 in 1 s
    assert text.count(top.NO_METRICS) == 9


def test_metrics_url_defaults_the_path():
    assert top.metrics_url("http://h:1") == "http://h:1/metrics"
    assert top.metrics_url("h:1") == "http://h:1/metrics"
    assert top.metrics_url("http://h:1/custom") == "http://h:1/custom"


def test_the_real_purgatory_exposes_what_the_collector_reads():
    from tidegate.server.purgatory import DelayedOperationPurgatory
    from tidegate.server.timer import SystemTimer

    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock=MockClock()))
    bm = BrokerMetrics()
    bm.register_purgatory("Fetch", purgatory)
    base = "kafka_server_delayedoperationpurgatory_"
    assert sample(bm, base + "purgatorysize", delayedOperation="Fetch") == 0
    assert sample(bm, base + "numdelayedoperations", delayedOperation="Fetch") == 0
    assert sample(bm, base + "expires_total", delayedOperation="Fetch") == 0
    purgatory.shutdown()


# ---- quota metrics ----------------------------------------------------------------------------
def _nothing() -> None:
    pass


def _throttled_quotas() -> QuotaManagers:
    """Real quota managers on a fixed clock: a request quota on (alice, app), a user
    quota on bob and a client-id quota on greedy, each with one throttle recorded."""
    quotas = QuotaManagers(clock=clock_at(NOW))
    quotas.set_quota(QuotaEntity("alice", "app"), "request_percentage", 50)
    quotas.set_quota(QuotaEntity("bob"), "producer_byte_rate", 1000)
    quotas.set_quota(QuotaEntity(client_id="greedy"), "consumer_byte_rate", 1000)
    quotas.request.throttle("alice", "app", 120, _nothing)
    quotas.request.throttle("alice", "app", 80, _nothing)
    quotas.produce.throttle("bob", "any-client", 300, _nothing)
    quotas.fetch.throttle("carol", "greedy", 40, _nothing)
    return quotas


def test_request_throttle_time_has_kafkas_exporter_name_and_tags():
    bm = BrokerMetrics()
    bm.register_quotas(_throttled_quotas())
    who = {"user": "alice", "client_id": "app"}
    # kafka.server:type=Request,user=alice,client-id=app throttle-time (ms), averaged
    assert sample(bm, "kafka_server_request_throttle_time_ms", **who) == 100
    assert sample(bm, "kafka_server_request_throttle_time_max_ms", **who) == 120
    assert sample(bm, "kafka_server_request_throttle_time", **who) is None
    text = bm.exposition().decode()
    assert '# TYPE kafka_server_request_throttle_time_ms gauge' in text
    assert 'kafka_server_request_throttle_time_ms{client_id="app",user="alice"} 100.0' in text
    # the counter tags are Kafka's: "" where the quota is not per that level
    assert sample(bm, "kafka_server_produce_throttle_time_ms", user="bob", client_id="") == 300
    assert sample(bm, "kafka_server_fetch_throttle_time_ms", user="", client_id="greedy") == 40


def test_top_throttle_view_names_user_and_client_id():
    bm = BrokerMetrics()
    bm.register_quotas(_throttled_quotas())
    view = top.build_view(None, _snapshot(bm, 1.0), "test")
    section = {s.title: s for s in view.sections}["Top clients by throttle time"]
    assert section.columns == ["user", "client id", "avg throttle ms"]
    # a user quota (client_id "") is bob's row, not an anonymous "(none)" client
    assert section.rows == [["bob", "-", "300"], ["alice", "app", "100"], ["-", "greedy", "40"]]
    assert top.NO_THROTTLE not in top.render_plain(view)


def test_top_throttle_view_with_quotas_in_use_but_nothing_throttled():
    quotas = QuotaManagers(clock=clock_at(NOW))
    quotas.set_quota(QuotaEntity("alice"), "producer_byte_rate", 1_000_000)
    assert quotas.produce.record_and_get_throttle_time_ms("alice", "c", 10) == 0
    bm = BrokerMetrics()
    bm.register_quotas(quotas)
    (section,) = [s for s in top.build_view(None, _snapshot(bm, 1.0), "test").sections
                  if s.title == "Top clients by throttle time"]
    assert section.rows == [["alice", "-", "0"]]
    assert section.note == "quota counters in use, nothing throttled in the quota window"
