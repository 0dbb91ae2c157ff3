"""``tidegate topics`` (kafka-topics.sh) against a live broker, and against the peer
broker where it has the API: create with configs, list, describe (Kafka's lines),
alter the partition count, delete, and Kafka's errors and flags."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tidegate.cli import main


def topics(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["topics", "--bootstrap-server", bootstrap, *args])
    return result.exit_code, result.stdout, result.stderr


def test_create_list_describe_alter_delete(broker):
    b = broker.bootstrap
    assert topics(b, "--create", "--topic", "orders", "--partitions", "3",
                  "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact") == (
        0, "Created topic orders.\n", "")
    assert topics(b, "--create", "--topic", "plain") == (0, "Created topic plain.\n", "")
    code, out, err = topics(b, "--create", "--topic", "orders")
    assert (code, out, err) == (1, "", "Error while executing topic command : Topic 'orders' already exists.\n")
    assert topics(b, "--create", "--topic", "orders", "--if-not-exists") == (0, "", "")

    code, out, _ = topics(b, "--list")
    assert code == 0 and out.splitlines() == sorted(out.splitlines()) and {"orders", "plain"} <= set(out.split())

    code, out, _ = topics(b, "--describe", "--topic", "orders")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4, out
    assert re.fullmatch(r"Topic: orders\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 1"
                        r"\tConfigs: (cleanup.policy=compact,retention.ms=86400000"
                        r"|retention.ms=86400000,cleanup.policy=compact)"
                        # the cluster-level record a Kafka 4.1+ cluster keeps (KIP-966): not a default
                        r",min.insync.replicas=1", lines[0]), lines[0]
    for p, line in enumerate(lines[1:]):
        assert line == (f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
                        "\tElr: N/A\tLastKnownElr: N/A")

    assert topics(b, "--alter", "--topic", "orders", "--partitions", "5") == (0, "", "")
    assert "PartitionCount: 5" in topics(b, "--describe", "--topic", "orders")[1]
    code, _, err = topics(b, "--alter", "--topic", "orders", "--partitions", "2")
    assert code == 1 and "Topic currently has 5 partitions" in err

    assert topics(b, "--delete", "--topic", "plain") == (0, "", "")
    assert "plain" not in topics(b, "--list")[1].split()
    assert topics(b, "--describe", "--topic", "plain") == (
        1, "", "Error while executing topic command : Topic 'plain' does not exist as expected\n")
    assert topics(b, "--describe", "--topic", "plain", "--if-exists") == (0, "", "")


def test_usage_errors_exit_2(broker):
    result = CliRunner().invoke(main, ["topics", "--bootstrap-server", broker.bootstrap, "--list", "--delete"])
    assert result.exit_code == 2 and "Exactly one of" in result.stderr
    result = CliRunner().invoke(main, ["topics", "--bootstrap-server", broker.bootstrap, "--create",
                                       "--topic", "x", "--partitions", "0"])
    assert result.exit_code == 2 and "The partitions must be greater than 0" in result.stderr


def test_against_the_peer_broker(peer_bootstrap):
    code, out, err = topics(peer_bootstrap, "--create", "--topic", "cli-peer", "--partitions", "2")
    if code != 0:
        pytest.skip(f"the peer broker refused CreateTopics: {err}")
    assert out == "Created topic cli-peer.\n"
    assert "cli-peer" in topics(peer_bootstrap, "--list")[1].split()
    code, out, _ = topics(peer_bootstrap, "--describe", "--topic", "cli-peer")
    assert code == 0 and "PartitionCount: 2" in out
