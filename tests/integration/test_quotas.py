"""Client quotas against a real tidegate process: KIP-219 enforcement (throttle_time_ms
at once, the connection muted for the throttle even for a client that ignores it), the
byte-rate quotas measured with confluent-kafka and kafka-python, the request quota, and
quota administration (KIP-546) applied live and persisted across a restart.

The whole module runs in about two minutes; the 20 s producer run is what the issue asks.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
import warnings

import psutil
import pytest

warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tests.conftest import metrics_overrides, wait_until
from tidegate.errors import ErrorCode

from .clients import alter_quotas, configs_cli, create_topic, sample, scrape
from .rawclient import RawClient, fetch_body, produce_body, repeated_batch

pytestmark = pytest.mark.timeout(180)


# -- helpers ------------------------------------------------------------------------------
def describe_quotas(bootstrap: str, components=(), strict: bool = False) -> dict:
    """DescribeClientQuotas v1: {(("user", name), ...): {key: value}}."""
    with RawClient.connect(bootstrap) as c:
        resp = c.request(
            48,
            1,
            {
                "components": [
                    {"entity_type": t, "match_type": m, "match": n} for t, m, n in components
                ],
                "strict": strict,
            },
        )
    assert resp.error_code == ErrorCode.none, resp.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in resp.entries
    }


METADATA_V12 = {"topics": [], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}


# -- KIP-219 enforcement with a raw client that ignores the hint ----------------------------
def test_produce_throttle_answers_at_once_and_mutes_the_connection(broker):
    """Over producer_byte_rate the response carries throttle_time_ms and comes back at
    once; the next request on the connection (sent immediately, ignoring the hint) is
    read only when the throttle ends; another connection is not held up."""
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    assert alter_quotas(broker.bootstrap, {"client-id": "greedy"}, {"producer_byte_rate": 20_000}) \
        == [(ErrorCode.none, None)]
    with RawClient.connect(broker.bootstrap) as c, RawClient.connect(broker.bootstrap) as other:
        t0 = time.monotonic()
        # ~240 KB in one request: O = 240 KB / 10 s (a new client's padded window) = 24 KB/s
        # over a 20 KB/s bound, so the throttle is (24 - 20) / 20 * 10 s = about 2 s.
        resp = c.request(0, 9, produce_body(topic, {0: repeated_batch(b"x" * 1000, 240)}), client_id="greedy")
        answered = time.monotonic() - t0
        throttle_ms = resp.throttle_time.total_seconds() * 1000
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert 1500 <= throttle_ms <= 2600, throttle_ms
        assert answered < 1.0, f"a throttled response must be sent at once ({answered:.2f} s)"
        # another client is served while this connection is muted
        t1 = time.monotonic()
        other.request(3, 12, METADATA_V12, client_id="someone-else")
        assert time.monotonic() - t1 < 0.5
        # the greedy client ignores the hint: its next request waits for the throttle
        t2 = time.monotonic()
        c.request(3, 12, METADATA_V12, client_id="greedy")
        waited = time.monotonic() - t0
        assert waited >= throttle_ms / 1000 - 0.05, (waited, throttle_ms)
        assert time.monotonic() - t2 < throttle_ms / 1000 + 1.0


def test_acks0_produce_is_throttled_by_the_mute(broker):
    """acks=0 has no response to carry the throttle, but the connection is muted anyway."""
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    alter_quotas(broker.bootstrap, {"client-id": "fire-and-forget"}, {"producer_byte_rate": 20_000})
    with RawClient.connect(broker.bootstrap) as c:
        t0 = time.monotonic()
        c.send(0, 9, produce_body(topic, {0: repeated_batch(b"y" * 1000, 240)}, acks=0), client_id="fire-and-forget")
        c.request(3, 12, METADATA_V12, client_id="fire-and-forget")
        assert time.monotonic() - t0 >= 1.4


def test_throttled_fetch_is_empty_with_throttle_time(broker):
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    with RawClient.connect(broker.bootstrap) as c:
        c.request(0, 9, produce_body(topic, {0: repeated_batch(b"z" * 1000, 240)}), client_id="loader")
    alter_quotas(broker.bootstrap, {"client-id": "slow-reader"}, {"consumer_byte_rate": 20_000})
    with RawClient.connect(broker.bootstrap) as c:
        t0 = time.monotonic()
        resp = c.request(1, 12, fetch_body(topic), client_id="slow-reader")
        assert time.monotonic() - t0 < 1.0
        part = resp.responses[0].partitions[0]
        assert resp.throttle_time.total_seconds() > 1.0
        assert part.error_code == ErrorCode.none
        assert part.high_watermark == 240
        assert not part.records, "a throttled fetch carries no records"
        # the bytes were taken back: once the throttle is over, the data comes
        time.sleep(resp.throttle_time.total_seconds())
    alter_quotas(broker.bootstrap, {"client-id": "slow-reader"}, {"consumer_byte_rate": None})
    with RawClient.connect(broker.bootstrap) as c:
        resp = c.request(1, 12, fetch_body(topic), client_id="slow-reader")
        assert resp.throttle_time.total_seconds() == 0
        assert len(resp.responses[0].partitions[0].records) > 200_000


def test_api_versions_is_exempt(broker):
    alter_quotas(broker.bootstrap, {"client-id": "tiny"}, {"request_percentage": 0.01})
    with RawClient.connect(broker.bootstrap) as c:
        # 0.01 % of a thread over the first 10 s (the rate's shortest span) is 1 ms of
        # request time: a few Metadata requests violate it (how many depends on how fast
        # each is handled). The throttle is capped at one window.
        for sent in range(1, 1001):
            resp = c.request(3, 12, METADATA_V12, client_id="tiny")
            if resp.throttle_time.total_seconds() > 0:
                break
        assert 0 < resp.throttle_time.total_seconds() <= 1.0, f"not throttled after {sent} requests"
        # over its quota, the client's ApiVersions requests are still answered unthrottled
        for _ in range(50):
            resp = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"},
                             client_id="tiny")
            assert resp.throttle_time.total_seconds() == 0


# -- quota administration ------------------------------------------------------------------
def test_alter_describe_validate_persist(broker):
    b = broker.bootstrap
    assert alter_quotas(b, {"user": "alice"}, {"request_percentage": 50}) == [(ErrorCode.none, None)]
    assert alter_quotas(b, {"user": None, "client-id": None}, {"producer_byte_rate": 1048576,
                                                               "consumer_byte_rate": 2097152}) \
        == [(ErrorCode.none, None)]
    assert alter_quotas(b, {"client-id": "c1"}, {"consumer_byte_rate": 1000}, validate_only=True) \
        == [(ErrorCode.none, None)]
    # Kafka's validation: unknown key, a fraction for a LONG key, bad entities
    assert alter_quotas(b, {"user": "alice"}, {"bogus_rate": 1})[0] == (
        ErrorCode.invalid_request, "Invalid configuration key bogus_rate")
    assert alter_quotas(b, {"user": "alice"}, {"producer_byte_rate": 1.5})[0] == (
        ErrorCode.invalid_request, "producer_byte_rate cannot be a fractional value.")
    assert alter_quotas(b, {"group": "g"}, {"producer_byte_rate": 1})[0][0] == ErrorCode.invalid_request
    assert alter_quotas(b, {"user": ""}, {"producer_byte_rate": 1})[0][0] == ErrorCode.invalid_request
    everything = {
        (("user", "alice"),): {"request_percentage": 50.0},
        (("client-id", None), ("user", None)): {"consumer_byte_rate": 2097152.0,
                                                 "producer_byte_rate": 1048576.0},
    }
    assert describe_quotas(b) == everything
    assert describe_quotas(b, [("user", 0, "alice")]) == {(("user", "alice"),): everything[(("user", "alice"),)]}
    assert describe_quotas(b, [("user", 1, None)]) == {k: v for k, v in everything.items() if ("user", None) in k}
    assert describe_quotas(b, [("user", 2, None)], strict=True) == {(("user", "alice"),): {"request_percentage": 50.0}}
    assert describe_quotas(b, [("client-id", 2, None)]) == {}
    broker.restart()
    assert describe_quotas(b) == everything
    data = json.loads((broker.data_dir / "client-quotas.json").read_text())
    assert data["version"] == 1
    # remove one key, then the last key of the entity
    alter_quotas(b, {"user": None, "client-id": None}, {"producer_byte_rate": None})
    alter_quotas(b, {"user": "alice"}, {"request_percentage": None})
    assert describe_quotas(b) == {(("client-id", None), ("user", None)): {"consumer_byte_rate": 2097152.0}}


def test_kafka_python_protocol_classes_manage_quotas(broker):
    """kafka-python's own AlterClientQuotas/DescribeClientQuotas encodings (it has no
    admin method for them) are understood, and the change applies to a live connection."""
    from kafka.protocol.admin.client_quotas import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    with RawClient.connect(broker.bootstrap) as live:
        live.request(3, 12, METADATA_V12, client_id="live")  # a connection made before the quota
        try:
            req = AlterClientQuotasRequest(
                entries=[([("client-id", "live")], [("producer_byte_rate", 20000.0, False)])],
                validate_only=False,
            )
            resp = admin._manager.run(admin._manager.send, req)
            assert [e.error_code for e in resp.entries] == [0]
            desc = admin._manager.run(
                admin._manager.send, DescribeClientQuotasRequest(components=[], strict=False)
            )
            assert desc.error_code == 0
            assert [(v.key, v.value) for e in desc.entries for v in e.values] == [
                ("producer_byte_rate", 20000.0)
            ]
        finally:
            admin.close()
        resp = live.request(0, 9, produce_body(topic, {0: repeated_batch(b"x" * 1000, 240)}), client_id="live")
        assert resp.throttle_time.total_seconds() > 1.0


# -- real clients under byte-rate quotas ---------------------------------------------------
#: The byte-rate runs use 3 quota samples instead of Kafka's 11: the arithmetic is the
#: same, but a new client's first burst (what the padded window allows: samples - 1
#: windows' worth, 10 MB at 1 MB/s with 11) and the sawtooth that follows (a burst each
#: time that sample expires, every ~12 s) would dominate a 20 s measurement. With 3
#: samples the sawtooth period is ~2 s, so 20 s averages over many periods. The default
#: config's sawtooth is measured in docs/quotas.md.
SHORT_WINDOW_BROKER = {"quota.window.num": "3"}


def test_confluent_producer_held_at_producer_byte_rate(broker_factory):
    """A confluent-kafka producer producing flat out under producer_byte_rate=1 MB/s for
    20 s measures about 1 MB/s, and librdkafka reports the throttle."""
    broker = broker_factory(SHORT_WINDOW_BROKER)
    rate = 1_000_000
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    alter_quotas(broker.bootstrap, {"client-id": "cfk-producer"}, {"producer_byte_rate": rate})
    throttles: list[float] = []
    stats_throttle: list[int] = []

    def on_stats(raw: str) -> None:
        for b in json.loads(raw)["brokers"].values():
            if b.get("nodeid", -1) >= 0 and b["throttle"]["cnt"]:
                stats_throttle.append(b["throttle"]["max"])

    acked = [0]
    acked_at: list[tuple[float, int]] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[0] += len(msg.value())
            acked_at.append((time.monotonic(), acked[0]))

    p = Producer({
        "bootstrap.servers": broker.bootstrap,
        "client.id": "cfk-producer",
        "linger.ms": 5,
        "batch.size": 256 * 1024,
        "queue.buffering.max.kbytes": 4096,
        "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
        "stats_cb": on_stats,
        "statistics.interval.ms": 1000,
        "log_level": 0,
    })
    value = b"v" * 1000
    start = time.monotonic()
    end = start + 20
    while time.monotonic() < end:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)
    # bytes acknowledged within the 20 s (the quota counts request bytes, ~1 % more)
    measured = next((n for t, n in reversed(acked_at) if t <= end), 0) / 20
    print(f"producer: {measured / 1e6:.3f} MB/s over 20 s; throttle_cb {len(throttles)} "
          f"events, max {max(throttles, default=0):.3f} s; stats throttle max "
          f"{max(stats_throttle, default=0)} ms")
    assert 0.9 * rate <= measured <= 1.1 * rate, measured
    assert throttles, "librdkafka's throttle_cb saw the broker's throttle_time_ms"
    assert stats_throttle, "librdkafka's statistics report the throttle"


def test_kafka_python_consumer_held_at_consumer_byte_rate(broker_factory):
    """A kafka-python consumer reading a backlog under consumer_byte_rate=500 KB/s for
    20 s measures about 500 KB/s, and its fetch-throttle-time metric shows the throttle."""
    broker = broker_factory(SHORT_WINDOW_BROKER)
    rate = 500_000
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    with RawClient.connect(broker.bootstrap) as c:
        # 15 MB, more than 20 s at the quota, in batches of 20 KB (a fetch returns whole
        # batches, at least one however large)
        for _ in range(750):
            c.request(0, 9, produce_body(topic, {0: repeated_batch(b"r" * 1000, 20)}), client_id="loader")
    alter_quotas(broker.bootstrap, {"client-id": "kp-consumer"}, {"consumer_byte_rate": rate})
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        client_id="kp-consumer",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        # fetches small against the quota window's allowance (1 MB here): a fetch that
        # violates the quota is answered empty and its bytes are not counted, so fetches
        # as large as the whole allowance would waste every other round trip
        max_partition_fetch_bytes=50_000,
        fetch_max_bytes=50_000,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got = 0
        marks = []
        start = time.monotonic()
        end = start + 20
        while time.monotonic() < end:
            for records in consumer.poll(timeout_ms=200).values():
                got += sum(len(r.value) for r in records)
            marks.append((time.monotonic(), got))
        measured = got / (marks[-1][0] - start)
        # kafka-python 3 keeps the broker's throttle_time_ms in its connection metrics
        throttle = {
            f"{group}/{name}": value
            for group, values in consumer.metrics().items()
            for name, value in values.items()
            if "throttle-time" in name
        }
        print(f"consumer: {measured / 1e3:.0f} KB/s over 20 s; {throttle}")
        assert 0.9 * rate <= measured <= 1.1 * rate, measured
        assert any(name.endswith("throttle-time-max") and value > 0
                   for name, value in throttle.items()), throttle
    finally:
        consumer.close()


# -- the request quota ------------------------------------------------------------------------
def _hammer(bootstrap: str, client_id: str, stop: threading.Event, latencies: list[float],
            pause: float = 0.0) -> None:
    with RawClient.connect(bootstrap) as c:
        while not stop.is_set():
            t = time.perf_counter()
            c.request(3, 12, METADATA_V12, client_id=client_id)
            latencies.append(time.perf_counter() - t)
            if pause:
                time.sleep(pause)


def _broker_cpu_share(proc: psutil.Process, seconds: float) -> float:
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return ((after.user - before.user) + (after.system - before.system)) / seconds


def test_request_percentage_holds_a_greedy_client_near_its_share(broker_factory):
    """A client-id at request_percentage=5 sending tiny requests in a tight loop (ignoring
    throttle hints) costs the broker about 5 % of a thread; a second, unthrottled client
    keeps its latency."""
    broker = broker_factory(SHORT_WINDOW_BROKER)  # 3 samples: see SHORT_WINDOW_BROKER
    alter_quotas(broker.bootstrap, {"client-id": "greedy"}, {"request_percentage": 5})
    proc = psutil.Process(broker.pid)
    stop = threading.Event()
    greedy: list[float] = []
    polite: list[float] = []
    polite_thread = threading.Thread(
        target=_hammer, args=(broker.bootstrap, "polite", stop, polite, 0.01)
    )
    greedy_thread = threading.Thread(target=_hammer, args=(broker.bootstrap, "greedy", stop, greedy))
    polite_thread.start()
    try:
        time.sleep(1)
        baseline = _broker_cpu_share(proc, 4)  # the polite client alone
        polite_alone = list(polite)
        greedy_thread.start()
        time.sleep(1)
        n0 = len(greedy)
        both = _broker_cpu_share(proc, 12)
        n1 = len(greedy)
    finally:
        stop.set()
        polite_thread.join(10)
        greedy_thread.join(10)
    share = both - baseline
    with_greedy = polite[len(polite_alone):]
    p50 = statistics.median(with_greedy) * 1000
    p99 = statistics.quantiles(with_greedy, n=100)[98] * 1000
    p50_alone = statistics.median(polite_alone) * 1000
    print(f"greedy share of the broker's CPU {share:.1%} (request_percentage=5); "
          f"{(n1 - n0) / 12:.0f} req/s; polite p50 {p50:.2f} ms (alone {p50_alone:.2f}) "
          f"p99 {p99:.2f} ms")
    # Process CPU also counts what the request time does not (the loop's own bookkeeping,
    # reading the socket), so the share is a little above the quota; unthrottled, the
    # greedy client takes the whole thread.
    assert 0.02 <= share <= 0.10, share
    assert p50 < max(3 * p50_alone, 3.0), (p50, p50_alone)
    assert max(greedy) > 0.3, "the greedy client was held back by the mute"


# -- tidegate configs ---------------------------------------------------------------------------
def _configs(broker, *args: str) -> subprocess.CompletedProcess:
    return configs_cli(broker.bootstrap, *args)


def test_cli_alters_and_describes_like_kafka_configs(broker):
    r = _configs(broker, "--alter", "--add-config", "request_percentage=50",
                 "--entity-type", "users", "--entity-name", "alice")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for user alice.\n"), r.stderr
    r = _configs(broker, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                 "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                 "--entity-default")
    assert r.returncode == 0, r.stderr
    r = _configs(broker, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert r.stdout == "Quota configs for user-principal 'alice' are request_percentage=50.0\n"
    r = _configs(broker, "--describe")
    assert r.stdout.splitlines() == [
        "Quota configs for user-principal 'alice' are request_percentage=50.0",
        (
            "Quota configs for the default user-principal, the default client-id are "
            "consumer_byte_rate=2097152.0,producer_byte_rate=1048576.0"
        ),
    ]
    assert describe_quotas(broker.bootstrap)[(("client-id", None), ("user", None))] == {
        "consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}
    r = _configs(broker, "--alter", "--delete-config", "producer_byte_rate",
                 "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                 "--entity-default")
    assert r.returncode == 0, r.stderr
    r = _configs(broker, "--alter", "--delete-config", "producer_byte_rate",
                 "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                 "--entity-default")
    assert (r.returncode, r.stderr) == (1, "Invalid config(s): producer_byte_rate\n")
    r = _configs(broker, "--alter", "--add-config", "producer_byte_rate=1.5",
                 "--entity-type", "users", "--entity-name", "alice")
    assert r.returncode == 1
    assert "INVALID_REQUEST" in r.stderr and "cannot be a fractional value" in r.stderr


# -- metrics ------------------------------------------------------------------------------------
def test_quota_metrics_per_entity(broker_factory):
    broker = broker_factory(metrics_overrides())
    url = broker.metrics_url

    topic = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, client="raw")
    alter_quotas(broker.bootstrap, {"client-id": "greedy"}, {"producer_byte_rate": 20_000})
    alter_quotas(broker.bootstrap, {"user": None}, {"request_percentage": 100})
    with RawClient.connect(broker.bootstrap) as c:
        c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        resp = c.request(0, 9, produce_body(topic, {0: repeated_batch(b"x" * 1000, 240)}), client_id="greedy")
        throttle_ms = resp.throttle_time.total_seconds() * 1000
        during = scrape(url)  # while the connection is muted
    greedy_entity = {"client_id": "greedy", "user": ""}

    def produce_sample(name: str) -> float | None:
        return sample(during, f"kafka_server_produce_{name}", **greedy_entity)

    assert produce_sample("byte_rate") > 20_000
    assert produce_sample("throttle_time_ms") == pytest.approx(throttle_ms)
    assert produce_sample("throttle_time_max_ms") == pytest.approx(throttle_ms)
    assert produce_sample("throttle_time") is None
    assert sample(during, "tidegate_quota_produce_bound", **greedy_entity) == 20_000
    assert sample(during, "kafka_server_produce_queue_size") == 1
    # the request quota is per user (the user default): user ANONYMOUS, client-id ""
    anonymous = {"client_id": "", "user": "ANONYMOUS"}
    assert sample(during, "kafka_server_request_request_time", **anonymous) > 0
    assert sample(during, "kafka_server_request_exempt_request_time") > 0
    wait_until(lambda: sample(scrape(url), "kafka_server_produce_queue_size") == 0,
               throttle_ms / 1000 + 5, what="the throttle ending")  # fmt: skip
    top = subprocess.run(
        [sys.executable, "-m", "tidegate", "top", "--once", "--interval", "0.2", "--metrics-url", url],
        capture_output=True, text=True, timeout=60, check=False,
    )
    section = top.stdout.split("Top clients by throttle time", 1)[1].split("\n\n", 1)[0]
    # a client-id quota: no user tag, shown as "-"
    greedy = next(line for line in section.splitlines() if " greedy " in f"{line} ")
    assert greedy.split()[:3] == ["-", "greedy", f"{throttle_ms:,.0f}"], top.stdout
