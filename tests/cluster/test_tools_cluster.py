"""The CLI tools (processes, as a user runs them) on librdkafka's 3-broker mock cluster:
``topics --describe`` shows each partition's leader as the cluster has it, before and
after the leaders move; an API the cluster lacks (the mock has no DescribeConfigs,
ListGroups, DescribeGroups or CreateTopics) fails that call alone with Kafka's
UnsupportedVersion message naming the API; ``console-producer`` writes through leader
moves."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from .scenarios import PARTITIONS, read_log, tidegate

pytestmark = pytest.mark.timeout(120)


def _leaders(out: bytes) -> dict[int, int]:
    return {int(p): int(leader) for p, leader in re.findall(rb"Partition: (\d+)\tLeader: (\d+)", out)}


def test_topics_describe_follows_the_leaders(mock_cluster, topic_name):
    mock_cluster.create_topic(topic_name, PARTITIONS)
    for shift in (0, 1):
        if shift:
            mock_cluster.move_leaders(topic_name, PARTITIONS, shift)
        r = tidegate("topics", "--bootstrap-server", mock_cluster.bootstrap, "--describe", "--topic", topic_name)
        assert r.returncode == 0, r.stderr
        # DescribeConfigs is missing: the partitions are shown, the configs are not
        assert b"WARN Configs not shown: " in r.stderr and b"DESCRIBE_CONFIGS (api key 32)" in r.stderr
        leaders = _leaders(r.stdout)
        assert sorted(leaders) == list(range(PARTITIONS))
        if shift:
            assert leaders == {p: (p + shift) % 3 + 1 for p in range(PARTITIONS)}


@pytest.mark.parametrize(
    ("args", "api"),
    [
        (("consumer-groups", "--list"), b"LIST_GROUPS (api key 16)"),
        (("consumer-groups", "--describe", "--group", "g"), b"DESCRIBE_GROUPS (api key 15)"),
        (("topics", "--create", "--topic", "new", "--partitions", "2"), b"CREATE_TOPICS (api key 19)"),
    ],
)
def test_an_api_the_cluster_lacks_is_a_clear_error(mock_cluster, args, api):
    r = tidegate(*args, "--bootstrap-server", mock_cluster.bootstrap)
    assert r.returncode == 1
    assert b"does not support " + api in r.stderr, r.stderr


def test_console_producer_through_leader_moves(mock_cluster, topic_name):
    """Lines piped in while the leaders move (twice): all written, once each, in order."""
    mock_cluster.create_topic(topic_name, PARTITIONS)
    proc = subprocess.Popen([sys.executable, "-m", "tidegate", "console-producer", "--bootstrap-server",
                             mock_cluster.bootstrap, "--topic", topic_name, "--property", "parse.key=true",
                             "--timeout", "5"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None
    try:
        for part in range(3):
            proc.stdin.write(b"".join(b"k%d\t%d\n" % (i % 60, i) for i in range(part * 500, part * 500 + 500)))
            proc.stdin.flush()
            time.sleep(0.5)
            if part < 2:
                mock_cluster.move_leaders(topic_name, PARTITIONS, part + 1)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and err == b"", err
    log = read_log(mock_cluster.bootstrap, topic_name)
    values = [v for recs in log.values() for _, v in recs]
    assert sorted(values) == list(range(1500))
    for recs in log.values():
        assert [v for _, v in recs] == sorted(v for _, v in recs)
