"""tidegate's consumers on librdkafka's 3-broker mock cluster, and confluent-kafka's
consumer in the same scenarios as the reference.

- The fetcher (what the Spark source's executors read with): 3,000 records of 6
  partitions read while Fetch requests are refused with NOT_LEADER_OR_FOLLOWER and
  REQUEST_TIMED_OUT, while leaders move twice (the position is validated at the new
  leader with OffsetForLeaderEpoch, KIP-320), while the leader being read is down for
  2 s, and with 200 ms RTT on one broker.
- A consumer group (``tidegate console-consumer --group``, a process, on the classic and
  on the consumer protocol — the mock answers ConsumerGroupHeartbeat v1 only;
  confluent-kafka's Consumer subscribed): records consumed while they are produced, with
  the group coordinator moved to another broker, Fetch errors, and leaders moved.

Checks: every record read exactly once, in order within its partition.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from tidegate.client import KafkaClient
from tidegate.client.fetcher import list_offsets, read_range_batches

from .scenarios import FETCH, KEYS, PARTITIONS, RECORDS, TIMEOUT_S, Faults, produce

pytestmark = pytest.mark.timeout(180)

OFFSET_FOR_LEADER_EPOCH = 23
#: OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, ConsumerGroupHeartbeat
GROUP_APIS = (8, 9, 11, 12, 13, 14, 68)


def _fill(cluster, topic: str) -> None:
    """The records in batches of at most 25, so that reading a partition takes several
    Fetches (a batch larger than the fetch size comes whole, KIP-74)."""
    cluster.create_topic(topic, PARTITIONS)
    out = produce("confluent", cluster.bootstrap, topic, Faults(), conf={"batch.num.messages": 25})
    assert len(out.acked) == RECORDS and not out.failed


def _check(got: list[tuple[int, int]]) -> None:
    """(partition, value) in the order read: all records once, in order per partition."""
    values = [v for _, v in got]
    assert len(values) == len(set(values)), "a record was read twice"
    assert sorted(values) == list(range(RECORDS)), f"{RECORDS - len(set(values))} records not read"
    for p in range(PARTITIONS):
        vals = [v for q, v in got if q == p]
        assert vals == sorted(vals), f"partition {p} read out of order"
        assert {v % KEYS for v in vals} <= set(range(KEYS))


def _fetch_faults(scenario: str, cluster, topic: str, leader_of: Callable[[int], int]) -> Faults:
    """Faults by the number of records read so far."""
    if scenario == "fetch errors":
        return Faults({500: lambda: cluster.push_request_errors(FETCH, [6, 7, 6, 7])})
    if scenario == "leaders moved twice":
        return Faults({1000: lambda: cluster.move_leaders(topic, PARTITIONS, 1),
                       2000: lambda: cluster.move_leaders(topic, PARTITIONS, 2)})  # fmt: skip

    def down() -> None:
        broker = leader_of(3)  # the partition read next
        cluster.broker_down(broker)
        cluster.later(2.0, lambda: cluster.broker_up(broker))

    if scenario == "the leader down for 2 s":
        return Faults({1500: down})
    if scenario == "200 ms rtt on one broker":
        return Faults({0: lambda: cluster.set_rtt(2, 200)})
    raise AssertionError(scenario)


SCENARIOS = ["fetch errors", "leaders moved twice", "the leader down for 2 s", "200 ms rtt on one broker"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fetcher(mock_cluster, topic_name, scenario):
    _fill(mock_cluster, topic_name)
    mock_cluster.start_tracking()
    got: list[tuple[int, int]] = []
    with KafkaClient(mock_cluster.bootstrap) as c:
        c.bootstrap()
        tps = [(topic_name, p) for p in range(PARTITIONS)]
        ends = list_offsets(c, dict.fromkeys(tps, -1))
        faults = _fetch_faults(scenario, mock_cluster, topic_name, lambda p: c.cluster.leader_for(topic_name, p))
        for tp in tps:
            # small fetches, so that each partition takes several and faults land mid-read
            for recs in read_range_batches(c, tp, 0, ends[tp], partition_max_bytes=2048, timeout_ms=TIMEOUT_S * 1000):
                for r in recs:
                    faults.before(len(got))
                    got.append((tp[1], int(r.value)))
    _check(got)
    if scenario == "leaders moved twice":
        # KIP-320: the positions were validated at the new leaders
        assert any(key == OFFSET_FOR_LEADER_EPOCH for _, key in mock_cluster.requests())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fetcher_reference(mock_cluster, topic_name, scenario):
    """confluent-kafka's consumer, assigned every partition from the start."""
    _fill(mock_cluster, topic_name)
    c = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": f"{topic_name}-ref",
                  "enable.auto.commit": False, "fetch.max.bytes": 2048, "message.max.bytes": 2048,
                  "max.partition.fetch.bytes": 2048})  # fmt: skip
    try:
        c.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
        leaders = {}
        md = c.list_topics(topic_name, timeout=10).topics[topic_name]
        leaders = {p: m.leader for p, m in md.partitions.items()}
        faults = _fetch_faults(scenario, mock_cluster, topic_name, leaders.__getitem__)
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < RECORDS and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            faults.before(len(got))
            got.append((msg.partition(), int(msg.value())))
    finally:
        c.close()
    _check(got)


def _group_faults(cluster, topic: str, group: str) -> Faults:
    """By the number of records produced: the coordinator moves, Fetch errors, leaders move."""
    return Faults({
        1000: lambda: cluster.set_coordinator("group", group, 2),
        1500: lambda: cluster.push_request_errors(FETCH, [6, 7, 6, 7]),
        2000: lambda: cluster.move_leaders(topic, PARTITIONS, 1),
    })  # fmt: skip


def _produce_slowly(cluster, topic: str, faults: Faults) -> None:
    """The records over about 3 s, so that the group consumes while they come."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(RECORDS):
        faults.before(i)
        p.produce(topic, b"%d" % i, key=b"k%d" % (i % KEYS))
        if i % 100 == 99:
            p.flush(TIMEOUT_S)
            time.sleep(0.1)
    assert p.flush(TIMEOUT_S) == 0


def _coordinator_moved(cluster) -> None:
    """The group's requests went to broker 1, then to broker 2."""
    brokers = [b for b, key in cluster.requests() if key in GROUP_APIS]
    assert brokers[0] == 1 and brokers[-1] == 2, brokers


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_group_console_consumer(mock_cluster, topic_name, protocol):
    group = f"{topic_name}-g"
    mock_cluster.create_topic(topic_name, PARTITIONS)
    mock_cluster.set_coordinator("group", group, 1)
    mock_cluster.start_tracking()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "console-consumer", "--bootstrap-server", mock_cluster.bootstrap,
         "--topic", topic_name, "--group", group, "--from-beginning", "--max-messages", str(RECORDS),
         "--timeout-ms", "30000", "--property", "print.partition=true",
         "--consumer-property", f"group.protocol={protocol}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _produce_slowly(mock_cluster, topic_name, _group_faults(mock_cluster, topic_name, group))
        out, err = proc.communicate(timeout=TIMEOUT_S * 2)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    got = []
    for line in out.decode().splitlines():
        partition, value = line.split("\t")
        got.append((int(partition.removeprefix("Partition:")), int(value)))
    _check(got)
    _coordinator_moved(mock_cluster)
    keys = {key for _, key in mock_cluster.requests()}
    assert (68 in keys, 11 in keys) == ((True, False) if protocol == "consumer" else (False, True))


def test_consumer_group_reference(mock_cluster, topic_name):
    group = f"{topic_name}-g"
    mock_cluster.create_topic(topic_name, PARTITIONS)
    mock_cluster.set_coordinator("group", group, 1)
    mock_cluster.start_tracking()
    c = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})  # fmt: skip
    got: list[tuple[int, int]] = []
    producer = threading.Thread(
        target=_produce_slowly, args=(mock_cluster, topic_name, _group_faults(mock_cluster, topic_name, group)),
        daemon=True,
    )
    try:
        c.subscribe([topic_name])
        producer.start()
        deadline = time.monotonic() + TIMEOUT_S * 2
        while len(got) < RECORDS and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), int(msg.value())))
    finally:
        producer.join(TIMEOUT_S)
        c.close()
    _check(got)
    _coordinator_moved(mock_cluster)
