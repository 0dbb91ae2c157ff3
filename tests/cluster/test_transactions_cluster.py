"""tidegate's transactional producer on librdkafka's 3-broker mock cluster, and
confluent-kafka's in the same scenarios as the reference: 3,000 records in 10
committed transactions while the transaction coordinator moves to another broker in
the middle of a transaction (the old one answers NOT_COORDINATOR), while leaders move
twice, and while Produce requests are refused with NOT_LEADER_OR_FOLLOWER and
REQUEST_TIMED_OUT (the mock checks a transactional producer's sequences, so a batch
written out of order would be refused). Read back at read_committed: every record
once, in order per partition, none failed; and the producer's transactional requests
after the move went to the new coordinator."""

from __future__ import annotations

import pytest

from .scenarios import PARTITIONS, PRODUCE, Faults, check_log, produce, read_log

pytestmark = pytest.mark.timeout(120)

CLIENTS = ("tidegate-full", "tidegate-incremental", "confluent")
TRANSACTIONS = 10
END_TXN, ADD_PARTITIONS_TO_TXN = 26, 24


def _run(cluster, topic: str, client: str, faults: Faults) -> None:
    out = produce(client, cluster.bootstrap, topic, faults, transactions=TRANSACTIONS,
                  conf={"transactional.id": f"{topic}-txn"})  # fmt: skip
    check_log(out, read_log(cluster.bootstrap, topic, committed=True))


@pytest.mark.parametrize("client", CLIENTS)
def test_transaction_coordinator_moved_mid_transaction(mock_cluster, topic_name, client):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    tid = f"{topic_name}-txn"
    mock_cluster.set_coordinator("transaction", tid, 1)
    mock_cluster.start_tracking()
    # transaction 4 of 10 (records 900-1199): the coordinator moves after its first
    # records, so its AddPartitionsToTxn/EndTxn meet a broker that is no longer it
    _run(mock_cluster, topic_name, client, Faults({950: lambda: mock_cluster.set_coordinator("transaction", tid, 2)}))
    txn_brokers = [b for b, key in mock_cluster.requests() if key in (END_TXN, ADD_PARTITIONS_TO_TXN)]
    assert txn_brokers[0] == 1 and txn_brokers[-1] == 2, txn_brokers


@pytest.mark.parametrize("client", CLIENTS)
def test_transactions_while_leaders_move(mock_cluster, topic_name, client):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    _run(mock_cluster, topic_name, client, Faults({1050: lambda: mock_cluster.move_leaders(topic_name, PARTITIONS, 1),
                                                   2050: lambda: mock_cluster.move_leaders(topic_name, PARTITIONS, 2)}))  # fmt: skip


@pytest.mark.parametrize("client", CLIENTS)
def test_transactions_with_produce_errors(mock_cluster, topic_name, client):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    _run(mock_cluster, topic_name, client,
         Faults({1050: lambda: mock_cluster.push_request_errors(PRODUCE, [6, 7, 6, 6, 7, 7])}))  # fmt: skip
