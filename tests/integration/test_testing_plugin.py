"""The pytest plugin (tidegate.testing.pytest_plugin) as a user's suite sees it: run
with pytester, in a separate pytest process, with each client library, and under
pytest-xdist."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

pytest_plugins = ["pytester"]

#: A user's test suite: the fixtures with confluent-kafka, kafka-python, aiokafka and
#: tidegate's own producer (the examples of docs/testing.md).
CLIENT_SUITE = '''
import asyncio, os

import pytest


def test_confluent(tidegate_broker, tidegate_topic):
    from confluent_kafka import Consumer, Producer

    p = Producer({"bootstrap.servers": tidegate_broker.bootstrap_servers})
    p.produce(tidegate_topic, b"hello", key=b"k")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": tidegate_broker.bootstrap_servers,
                  "group.id": "g-confluent", "auto.offset.reset": "earliest"})
    c.subscribe([tidegate_topic])
    msg = None
    for _ in range(100):
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            break
    c.commit(asynchronous=False)
    c.close()
    assert (msg.key(), msg.value()) == (b"k", b"hello")
    assert tidegate_broker.lag("g-confluent", tidegate_topic) == {0: 0}


def test_kafka_python(tidegate_broker, tidegate_topic):
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(bootstrap_servers=tidegate_broker.bootstrap_servers)
    p.send(tidegate_topic, b"hello").get(10)
    p.close()
    c = KafkaConsumer(tidegate_topic, bootstrap_servers=tidegate_broker.bootstrap_servers,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    assert next(iter(c)).value == b"hello"
    c.close()


def test_aiokafka(tidegate_broker, tidegate_topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=tidegate_broker.bootstrap_servers)
        await p.start()
        await p.send_and_wait(tidegate_topic, b"hello")
        await p.stop()
        c = AIOKafkaConsumer(tidegate_topic, bootstrap_servers=tidegate_broker.bootstrap_servers,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            msg = await asyncio.wait_for(c.getone(), 10)
        finally:
            await c.stop()
        return msg.value

    assert asyncio.run(main()) == b"hello"


def test_tidegate_producer(tidegate_broker, tidegate_topic):
    from tidegate.producer import Producer

    p = Producer({"bootstrap.servers": tidegate_broker.bootstrap_servers})
    p.send(tidegate_topic, b"hello").result(10)
    p.close()
    assert [r.value for r in tidegate_broker.consume(tidegate_topic)] == [b"hello"]


def test_helpers(tidegate_broker, tidegate_topic):
    tidegate_broker.produce(tidegate_topic, [b"a", (b"k", b"b")])
    assert [(r.key, r.value) for r in tidegate_broker.consume(tidegate_topic)] == [
        (None, b"a"), (b"k", b"b")]
    with open(os.environ["WHERE"] + "/" + os.environ.get("PYTEST_XDIST_WORKER", "main"),
              "a") as f:
        f.write(tidegate_broker.bootstrap_servers + "\\n")
'''


def plugin_args() -> list[str]:
    """``-p`` for the plugin unless its entry point is installed (an editable install
    made before the entry point existed does not have it)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "tidegate" in names else ["-p", "tidegate.testing.pytest_plugin"]


def test_a_suite_with_every_client_passes(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("WHERE", str(tmp_path))
    pytester.makepyfile(test_suite=CLIENT_SUITE)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)


@pytest.mark.slow  # two pytest workers start: ~20 s on a busy 2-core machine
@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist missing")
def test_under_xdist_each_worker_has_its_own_broker(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("WHERE", str(tmp_path))
    pytester.makepyfile(test_suite=CLIENT_SUITE)
    # several tests so that both workers run some
    pytester.makepyfile(test_more="from test_suite import " + ", ".join(
        f"test_helpers as test_h{i}, test_tidegate_producer as test_p{i}" for i in range(3)))
    result = pytester.runpytest_subprocess(
        *plugin_args(), "-p", "no:cacheprovider", "-n", "2", "test_more.py")
    result.assert_outcomes(passed=6)
    seen = {p.name: set(p.read_text().split()) for p in tmp_path.iterdir()}
    assert set(seen) == {"gw0", "gw1"}
    assert all(len(addresses) == 1 for addresses in seen.values())
    assert seen["gw0"] != seen["gw1"]


def test_ini_scope_marker_and_factory(pytester):
    pytester.makeini("""
        [pytest]
        tidegate_broker_scope = function
        tidegate_partitions = 2
        tidegate_overrides =
            log.retention.ms=3600000
    """)
    pytester.makepyfile(test_settings='''
        import pytest
        from tidegate.client.admin import describe_configs

        SEEN = []

        def test_one(tidegate_broker, tidegate_topic):
            SEEN.append(tidegate_broker.bootstrap_servers)
            assert tidegate_broker.partitions(tidegate_topic) == [0]
            tidegate_broker.produce("auto-made", [b"x"])
            assert tidegate_broker.partitions("auto-made") == [0, 1]

        def test_two(tidegate_broker):
            SEEN.append(tidegate_broker.bootstrap_servers)
            assert SEEN[0] != SEEN[1]  # function scope: a broker each

        @pytest.mark.tidegate(partitions=4, topic_partitions=3,
                              topic_config={"retention.ms": "60000"})
        def test_marker(tidegate_broker, tidegate_topic):
            assert tidegate_broker.partitions(tidegate_topic) == [0, 1, 2]
            tidegate_broker.produce("auto-made", [b"x"])
            assert tidegate_broker.partitions("auto-made") == [0, 1, 2, 3]

        def test_factory(tidegate_broker_factory):
            a = tidegate_broker_factory(auto_create=False)
            b = tidegate_broker_factory()
            assert a.bootstrap_servers != b.bootstrap_servers
            b.produce("t", [b"auto-created here"])
            with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
                a.partitions("t")
    ''')
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
