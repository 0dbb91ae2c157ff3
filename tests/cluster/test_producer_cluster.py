"""tidegate's idempotent producer (acks=all, both buffer.memory allocation strategies) on
librdkafka's 3-broker mock cluster, and confluent-kafka's producer in the same
scenarios as the reference: 3,000 records to 6 partitions while leaders move twice, a
broker is down for 2 s, Produce requests are refused with NOT_LEADER_OR_FOLLOWER and
REQUEST_TIMED_OUT, one broker answers 200 ms late. Checks (scenarios.check_log):
nothing acknowledged is lost, nothing is written twice, order per partition holds,
no record fails.

(The mock checks producer sequences only for transactional producers: there, a
reordering the producer caused would also be refused; here the log itself is checked.)
"""

from __future__ import annotations

import pytest

from .scenarios import PARTITIONS, PRODUCE, Faults, check_log, produce, read_log, wait_for

pytestmark = pytest.mark.timeout(120)

CLIENTS = ("tidegate-full", "tidegate-incremental", "confluent")
METADATA = 3


def _faults(scenario: str, cluster, topic: str) -> Faults:
    if scenario == "leaders moved twice":
        return Faults({1000: lambda: cluster.move_leaders(topic, PARTITIONS, 1),
                       2000: lambda: cluster.move_leaders(topic, PARTITIONS, 2)})  # fmt: skip
    if scenario == "a broker down for 2 s":
        return Faults({1000: lambda: (cluster.broker_down(2), cluster.later(2.0, lambda: cluster.broker_up(2)))})
    if scenario == "produce errors":
        # NOT_LEADER_OR_FOLLOWER (6), REQUEST_TIMED_OUT (7): one per Produce request
        return Faults({1000: lambda: cluster.push_request_errors(PRODUCE, [6, 7, 6, 6, 7, 7])})
    if scenario == "200 ms rtt on one broker":
        return Faults({0: lambda: cluster.set_rtt(2, 200)})
    raise AssertionError(scenario)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "scenario", ["leaders moved twice", "a broker down for 2 s", "produce errors", "200 ms rtt on one broker"]
)
def test_idempotent_producer(mock_cluster, topic_name, client, scenario):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    out = produce(client, mock_cluster.bootstrap, topic_name, _faults(scenario, mock_cluster, topic_name))
    check_log(out, read_log(mock_cluster.bootstrap, topic_name))


def test_produce_requests_follow_the_leaders(mock_cluster, topic_name):
    """The scenario did what it says: each move is learnt from a Metadata request (after
    the old leaders' NOT_LEADER_OR_FOLLOWER), and the records after the last move go to
    the new leaders (each broker leads two partitions throughout)."""
    mock_cluster.create_topic(topic_name, PARTITIONS)
    mock_cluster.start_tracking()
    marks: list[int] = []

    def move(shift: int) -> None:
        marks.append(len(mock_cluster.requests()))
        mock_cluster.move_leaders(topic_name, PARTITIONS, shift)

    out = produce("tidegate-full", mock_cluster.bootstrap, topic_name,
                  Faults({1000: lambda: move(1), 2000: lambda: move(2)}))  # fmt: skip
    check_log(out, read_log(mock_cluster.bootstrap, topic_name))
    requests = mock_cluster.requests()
    for start, end in zip(marks, [*marks[1:], len(requests)]):
        # each move was learnt from a Metadata request before the next (NOT_LEADER answers)
        assert any(key == METADATA for _, key in requests[start:end]), (start, end)
    # and the records after the last move went to all three brokers, the new leaders
    assert {b for b, key in requests[marks[-1]:] if key == PRODUCE} == {1, 2, 3}


def test_metadata_refreshed_on_max_age(mock_cluster, topic_name):
    """Leaders that move while the producer is idle (no error to tell it) are found by
    the refresh every metadata.max.age.ms; the next records go straight to them."""
    from tidegate.producer import Producer

    mock_cluster.create_topic(topic_name, PARTITIONS)
    p = Producer({"bootstrap.servers": mock_cluster.bootstrap, "metadata.max.age.ms": 300})
    try:
        for partition in range(PARTITIONS):
            p.send(topic_name, b"before", partition=partition).result(10)
        mock_cluster.move_leaders(topic_name, PARTITIONS, 1)
        moved = {q: (q + 1) % 3 + 1 for q in range(PARTITIONS)}
        wait_for(lambda: {q: p._metadata.cluster.leader_for(topic_name, q) for q in range(PARTITIONS)} == moved,
                 "the new leaders in the producer's metadata", timeout=10)  # fmt: skip
        mock_cluster.start_tracking()
        for partition in range(PARTITIONS):
            p.send(topic_name, b"after", partition=partition).result(10)
    finally:
        p.close(10)
    # one Produce per record: none went to a former leader and had to be retried
    assert [key for _, key in mock_cluster.requests() if key == PRODUCE] == [PRODUCE] * PARTITIONS
