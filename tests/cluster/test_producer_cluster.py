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

from .scenarios import (
    PARTITIONS,
    PRODUCE,
    Faults,
    check_log,
    check_moves_followed,
    produce,
    read_log,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

CLIENTS = ("tidegate-full", "tidegate-incremental", "confluent")


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
    check_moves_followed(mock_cluster.requests(), marks)


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


#: error codes the mock answers one Produce request with: INVALID_RECORD (87) is one no
#: client retries (the request's batches fail for good, their sequences were never
#: written); OUT_OF_ORDER_SEQUENCE_NUMBER (45) is what a broker that checks sequences
#: answers the batch after such a gap
INVALID_RECORD, OUT_OF_ORDER_SEQUENCE_NUMBER = 87, 45


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("code", [INVALID_RECORD, OUT_OF_ORDER_SEQUENCE_NUMBER])
def test_a_batch_failing_for_good_bumps_the_epoch_kip_360(mock_cluster, topic_name, client, code):
    """Mid-stream, one Produce request is answered with an error that leaves a gap in its
    partitions' sequences. The idempotent producer keeps its producer id and bumps its
    epoch (KIP-360, as Java's client does it locally): the partitions of that request
    start again at sequence 0 under the new epoch, the others once their batches in
    flight are done. INVALID_RECORD fails that request's records (and only them);
    OUT_OF_ORDER_SEQUENCE_NUMBER is retried under the new epoch and nothing fails. Either
    way nothing is written twice and order per partition holds."""
    if client == "confluent" and code == OUT_OF_ORDER_SEQUENCE_NUMBER:
        pytest.skip("librdkafka makes OUT_OF_ORDER_SEQUENCE_NUMBER at the partition's first sequence a fatal "
                    "error ('sequence desynchronization'); Java's client bumps the epoch and retries")  # fmt: skip
    mock_cluster.create_topic(topic_name, PARTITIONS)
    sent: list[tuple[int, int, int, int]] = []  # partition, producer id, epoch, base sequence

    def watch(p) -> None:
        sender = p._sender
        inner = sender.on_batch_sent

        def on_batch_sent(node, version, buffers, batches):
            sent.extend((b.partition, b.producer_id, b.producer_epoch, b.base_sequence) for b in batches)
            if inner is not None:
                inner(node, version, buffers, batches)

        sender.on_batch_sent = on_batch_sent

    faults = Faults({1000: lambda: mock_cluster.push_request_errors(PRODUCE, [code])})
    out = produce(client, mock_cluster.bootstrap, topic_name, faults, on_producer=watch)
    check_log(out, read_log(mock_cluster.bootstrap, topic_name), failures=code == INVALID_RECORD)
    if client == "confluent":
        return  # librdkafka asks the broker for the bump (InitProducerId with its id and epoch)
    assert {pid for _, pid, _, _ in sent} == {sent[0][1]}, "the producer id changed"
    assert {epoch for _, _, epoch, _ in sent} == {0, 1}, "the epoch was not bumped once"
    for partition in range(PARTITIONS):
        epochs = [(epoch, seq) for q, _, epoch, seq in sent if q == partition]
        assert [e for e, _ in epochs] == sorted(e for e, _ in epochs), f"partition {partition} went back an epoch"
        bumped = [seq for e, seq in epochs if e == 1]
        assert not bumped or bumped[0] == 0, f"partition {partition}: epoch 1 starts at {bumped[0]}"
