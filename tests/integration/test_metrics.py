"""The metrics endpoint and ``tidegate top`` against a real broker process.

confluent-kafka produces N records of a known size and consumes them; a scrape of
``/metrics`` over HTTP must show the counters moved by exactly that much. A raw client
sends a known number of requests, one of them failing, and the request, error and
histogram counters must move by exactly those numbers.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.conftest import free_port, metrics_overrides, wait_until
from tidegate.errors import ErrorCode

from .clients import admin_client, create_topic, new_consumer, produce, sample, scrape
from .rawclient import RawClient, create_topics_body, fetch_body, produce_body, repeated_batch

pytestmark = pytest.mark.timeout(120)

N = 300
VALUE_SIZE = 100
TOPIC = "metered"
PRODUCER_ID = "metrics-test-producer"
CONSUMER_ID = "metrics-test-consumer"
RAW_ID = "metrics-test-raw"
DEFAULT_POOL = 256 * 1024 * 1024  # queued.max.request.bytes unset, socket.request.max.bytes 100 MiB
HISTOGRAMS = (
    "requestqueuetimems",
    "localtimems",
    "remotetimems",
    "responsesendtimems",
    "totaltimems",
)


@pytest.fixture
def metered(broker_factory):
    return broker_factory({**metrics_overrides(), "auto.create.topics.enable": "false"})


def produce_and_consume(bootstrap: str) -> Consumer:
    """Create TOPIC, produce N records, consume them all; the consumer is left open."""
    create_topic(bootstrap, TOPIC, client="confluent")
    values = [bytes([65 + i % 26]) * VALUE_SIZE for i in range(N)]
    produce(bootstrap, TOPIC, values, client="confluent", partition=None, acks=-1,
            conf={"client.id": PRODUCER_ID})  # fmt: skip
    consumer = new_consumer(bootstrap, client="confluent", conf={"client.id": CONSUMER_ID})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[int] = []

    def poll() -> None:
        msg = consumer.poll(1)
        if msg is not None:
            assert not msg.error(), msg.error()
            got.append(msg.offset())

    wait_until(lambda: len(got) >= N, 30, step=poll, what=f"{N} records consumed")
    assert got == list(range(N))
    return consumer


def test_counters_move_by_what_was_produced_and_consumed(metered):
    consumer = produce_and_consume(metered.bootstrap)
    try:
        # an error to count: metadata of a topic that does not exist (auto-create is off)
        admin = admin_client(metered.bootstrap, client="confluent")
        md = admin.list_topics("does-not-exist", timeout=10)
        assert md.topics["does-not-exist"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        s = scrape(metered.metrics_url)
        live_connections = sample(
            s, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT"
        )
    finally:
        consumer.close()

    assert sample(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == N
    bytes_in = sample(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    assert bytes_in >= N * VALUE_SIZE
    assert bytes_in == sample(s, "kafka_log_log_size", topic=TOPIC, partition="0")
    assert sample(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= bytes_in
    assert sample(s, "kafka_log_log_logendoffset", topic=TOPIC, partition="0") == N
    assert sample(s, "kafka_log_log_logstartoffset", topic=TOPIC, partition="0") == 0
    assert live_connections >= 1  # the consumer is still connected

    for request in ("Produce", "Fetch", "Metadata", "ApiVersions", "CreateTopics"):
        n = sample(s, "kafka_network_requestmetrics_requests_total", request=request)
        # how often the clients asked varies, except for the one topic created
        assert n == 1 if request == "CreateTopics" else n > 0, (request, n)
        # every answered request is in each latency histogram once
        for h in HISTOGRAMS:
            name = f"kafka_network_requestmetrics_{h}_count"
            assert sample(s, name, request=request) == n, (h, request)
        assert (
            sample(s, "kafka_network_requestmetrics_totaltimems_bucket", request=request, le="+Inf")
            == n
        )
    # acks=all waits for the fsync: Produce spends time parked (remote)
    assert sample(s, "kafka_network_requestmetrics_remotetimems_sum", request="Produce") > 0
    assert (
        sample(
            s,
            "kafka_network_requestmetrics_errors_total",
            request="Metadata",
            error="UNKNOWN_TOPIC_OR_PARTITION",
        )
        >= 1  # (librdkafka may ask more than once for the missing topic)
    )
    assert sample(s, "tidegate_client_requests_total", client_id=PRODUCER_ID) > 0
    assert sample(s, "tidegate_client_requests_total", client_id=CONSUMER_ID) > 0
    # the default pool, max(256 MiB, socket.request.max.bytes): used + available is its size
    # (the consumer may have a request in flight)
    used = sample(s, "kafka_network_socketserver_memorypoolused")
    assert used + sample(s, "kafka_network_socketserver_memorypoolavailable") == DEFAULT_POOL


def test_counters_move_by_exactly_the_requests_sent(metered):
    """Between two scrapes one connection sends 2 CreateTopics (the second fails with
    TOPIC_ALREADY_EXISTS), 5 Produce and 3 Fetch requests, and nothing else runs."""
    topic, produces, fetches, per_batch = "exact", 5, 3, 4
    with RawClient.connect(metered.bootstrap) as c:
        before = scrape(metered.metrics_url)
        resp = c.request(19, 7, create_topics_body(topic), client_id=RAW_ID)
        assert resp.topics[0].error_code == ErrorCode.none
        resp = c.request(19, 7, create_topics_body(topic), client_id=RAW_ID)
        assert resp.topics[0].error_code == ErrorCode.topic_already_exists
        for _ in range(produces):
            body = produce_body(topic, {0: repeated_batch(b"p" * VALUE_SIZE, per_batch)})
            resp = c.request(0, 9, body, client_id=RAW_ID)
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        for _ in range(fetches):
            resp = c.request(1, 12, fetch_body(topic, offset=0), client_id=RAW_ID)
            assert resp.responses[0].partitions[0].error_code == ErrorCode.none
        # each response was handed to the socket before the client read it: all counted
        after = scrape(metered.metrics_url)

    def moved(name: str, **labels: str) -> float:
        return (sample(after, name, **labels) or 0.0) - (sample(before, name, **labels) or 0.0)

    def moved_sum(name: str) -> float:
        return sum(v for (n, _), v in after.items() if n == name) - sum(
            v for (n, _), v in before.items() if n == name
        )

    sent = {"CreateTopics": 2, "Produce": produces, "Fetch": fetches}
    base = "kafka_network_requestmetrics_"
    for request, n in sent.items():
        assert moved(base + "requests_total", request=request) == n, request
        for h in HISTOGRAMS:
            assert moved(f"{base}{h}_count", request=request) == n, (h, request)
        assert moved(base + "responsesendtimems_bucket", request=request, le="+Inf") == n
    assert moved_sum(base + "requests_total") == sum(sent.values())
    # exactly one error, on the request and with the code that failed
    assert moved(base + "errors_total", request="CreateTopics", error="TOPIC_ALREADY_EXISTS") == 1
    assert moved_sum(base + "errors_total") == 1
    assert moved("tidegate_client_requests_total", client_id=RAW_ID) == sum(sent.values())
    # every request was answered before the scrape: nothing of the pool in use
    assert sample(after, "kafka_network_socketserver_memorypoolused") == 0
    assert sample(after, "kafka_network_socketserver_memorypoolavailable") == DEFAULT_POOL

    size = sample(after, "kafka_log_log_size", topic=topic, partition="0")
    assert sample(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == (
        produces * per_batch
    )
    assert moved("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == (
        produces * per_batch
    )
    assert moved("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == size
    # every Fetch from offset 0 returned the whole log
    assert moved("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == fetches * size


def test_metrics_endpoint_serves_only_metrics(metered):
    base = metered.metrics_url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(base + "/", timeout=10)
    assert info.value.code == 404
    assert "serving metrics on http://127.0.0.1:" in metered.log_text()


def test_no_metrics_listener_no_http(broker):
    listening = {
        c.laddr.port
        for c in psutil.Process(broker.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {broker.port}
    assert "serving metrics" not in broker.log_text()


def run_top(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidegate", "top", *args, "--once", "--interval", "0.3"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_top_once_names_the_topic_and_the_client(metered):
    produce_and_consume(metered.bootstrap).close()
    result = run_top("--metrics-url", metered.metrics_url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "== Topics" in out and "== Top clients by request time" in out
    topic_row = next(line for line in out.splitlines() if line.startswith(TOPIC + " "))
    assert f"{N:,}" in topic_row  # records in the log and messages in since start
    assert PRODUCER_ID in out and CONSUMER_ID in out
    throttled = out.split("== Top clients by throttle time\n", 1)[1].split("\n\n", 1)[0]
    assert throttled == "nothing throttled: no client quotas configured or in use"


def test_top_finds_the_metrics_listener_from_the_bootstrap_server(metered):
    produce_and_consume(metered.bootstrap).close()
    result = run_top("--bootstrap-server", metered.bootstrap)
    assert result.returncode == 0, result.stderr
    assert metered.metrics_url in result.stdout.splitlines()[0]
    assert TOPIC in result.stdout and PRODUCER_ID in result.stdout


def test_top_without_metrics_listener_shows_offsets_and_says_so(broker):
    produce(broker.bootstrap, "plain", [b"x"] * 5, client="confluent", partition=None)
    result = run_top("--bootstrap-server", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    assert "no metrics.listener" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("plain "))
    assert " 5 " in row + " "


def test_top_reports_an_unreachable_endpoint():
    result = run_top("--metrics-url", f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert "cannot read" in result.stderr
