"""tidegate.testing.Broker: life cycle, the listeners its options add, and its helpers,
against real clients."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tidegate.client import KafkaClient
from tidegate.client.admin import describe_client_quotas
from tidegate.testing import Broker, BrokerError


def test_two_in_process_brokers_at_once_and_their_directories():
    with Broker() as a, Broker(keep=True) as b:
        assert a.bootstrap_servers != b.bootstrap_servers
        a.create_topic("same-name")
        b.create_topic("same-name", partitions=2)
        a.produce("same-name", [b"in a"])
        assert [r.value for r in a.consume("same-name")] == [b"in a"]
        assert b.consume("same-name") == []
        a_dir, b_dir = a.data_dir, b.data_dir
        assert (a_dir / "same-name-0").is_dir()
    assert not a_dir.exists()
    assert (b_dir / "same-name-1").is_dir()  # keep=True
    shutil.rmtree(b_dir.parent)


def test_what_a_started_broker_has_not_imported():
    """Without metrics.listener no Prometheus registry is built until asked for
    (prometheus_client is not imported), and the log cleaner's worker process plumbing
    waits for a log to clean: neither is start-up work."""
    code = ("import sys\nfrom tidegate.testing import Broker\nb = Broker().start()\n"
            "print(sorted(m for m in ('prometheus_client', 'tidegate.metrics.prometheus', 'tidegate.metrics.collectors', "
            "'tidegate.log.cleaner_worker', 'fractions') if m in sys.modules))\n"
            "print(b'kafka_server_delayedoperationpurgatory' in b._server.metrics.exposition())\nb.stop()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["[]", "True"], out.stderr[-2000:]


def test_a_broker_that_cannot_start_says_why():
    with pytest.raises(BrokerError, match="num.partitions"):
        Broker(partitions=0).start()


def test_sasl_and_tls_listeners_take_the_client_config():
    users = {"alice": "alice-secret"}
    with Broker(users=users, tls=True) as broker:
        assert set(broker.ports) == {"PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"}
        for listener in ("SASL_PLAINTEXT", "SSL", "SASL_SSL"):
            conf = broker.client_config(listener, client="tidegate")
            with KafkaClient(conf["bootstrap.servers"], security=conf) as client:
                assert client.bootstrap(timeout_ms=10_000).brokers
        wrong = {**broker.client_config("SASL_PLAINTEXT"), "sasl.password": "nope"}
        with (KafkaClient(wrong["bootstrap.servers"], security=wrong) as client,
              pytest.raises(Exception, match="[Aa]uthentication")):
            client.bootstrap(timeout_ms=5_000)


def test_quotas_are_set_once_started():
    quota = ({"client-id": "slow"}, {"producer_byte_rate": 1024.0})
    with Broker(quotas=[quota]) as broker:
        got = describe_client_quotas(broker.client)
    assert [(dict(e), q) for e, q in got] == [({"client-id": "slow"}, {"producer_byte_rate": 1024.0})]


def test_group_helpers_follow_a_confluent_consumer():
    from confluent_kafka import Consumer, TopicPartition

    with Broker() as broker:
        broker.create_topic("events", partitions=2)
        broker.produce("events", [b"a", b"b", b"c"], partition=0)
        broker.produce("events", [b"d"], partition=1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["events"])
        try:
            msg = None
            while msg is None:
                msg = consumer.poll(0.2)
            broker.wait_for_group("g")
            assert broker.group_state("g") == "Stable"
            consumer.commit(offsets=[TopicPartition("events", 0, 2)], asynchronous=False)
            assert broker.committed("g") == {("events", 0): 2}
            assert broker.lag("g", "events") == {0: 1, 1: 1}
        finally:
            consumer.close()
        broker.wait_for_group("g", "Empty")
        with pytest.raises(BrokerError, match="Empty, not Stable"):
            broker.wait_for_group("g", timeout=0.2)
        broker.delete_topic("events")
        with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
            broker.partitions("events")


def test_subprocess_broker_survives_a_kill_on_its_ports():
    with Broker(mode="subprocess") as broker:
        broker.create_topic("t")
        broker.produce("t", [b"acked"])
        port = broker.ports["PLAINTEXT"]
        broker.kill()
        assert not broker.running
        broker.restart()
        assert broker.ports["PLAINTEXT"] == port
        # the restarted process appends to the log, and says when it is ready
        assert broker.log_path is not None
        assert len(re.findall(r" started in [\d.]+ s", broker.log_path.read_text())) == 2
        assert [r.value for r in broker.consume("t")] == [b"acked"]
        with pytest.raises(BrokerError, match="subprocess"):
            Broker().kill()
