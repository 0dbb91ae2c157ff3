"""Partitioners: Java-compatible murmur2, KIP-794 sticky state, round robin."""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest
from kafka.partitioner.default import DefaultPartitioner as KafkaPythonPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tidegate.producer.partitioner import (
    BuiltInPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# Kafka's own test vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
KAFKA_MURMUR2_CASES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_CASES.items())
def test_murmur2_matches_kafkas_utils_test(data, expected):
    assert murmur2(data) == expected


def test_murmur2_matches_kafka_python_for_random_keys():
    rnd = random.Random(11)
    for n in range(200):
        data = rnd.randbytes(n)
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF


def test_to_positive_clears_the_sign_bit_like_java():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-2147483648) == 0
    assert to_positive(5) == 5


@pytest.mark.parametrize("num_partitions", [1, 3, 7, 100, 1000])
def test_keys_land_where_the_java_partitioner_puts_them(num_partitions):
    # kafka-python's DefaultPartitioner is Java-compatible: murmur2 & 0x7fffffff % n
    class FakeCluster:
        def topics(self):
            return {"t"}

        def partitions_for_topic(self, topic):
            return set(range(num_partitions))

        def available_partitions_for_topic(self, topic):
            return set(range(num_partitions))

    kp = KafkaPythonPartitioner()
    for i in range(2000):
        key = b"user-%d" % i if i % 3 else os.urandom(i % 40)
        expected = kp.partition("t", key, key, None, None, FakeCluster())
        assert partition_for_key(key, num_partitions) == expected


def test_sticky_partition_holds_until_batch_size_and_a_full_batch():
    bp = BuiltInPartitioner("t", 1000, random.Random(3))
    avail = list(range(10))
    info = bp.peek_current_partition_info(avail, 10)
    p0 = info.partition
    bp.update_partition_info(info, 999, avail, 10, enable_switch=True)
    assert not bp.is_partition_changed(info)
    bp.update_partition_info(info, 1, avail, 10, enable_switch=False)  # enough, batch not full
    assert not bp.is_partition_changed(info)
    bp.update_partition_info(info, 1, avail, 10, enable_switch=True)  # full: switch
    assert bp.is_partition_changed(info)
    info2 = bp.peek_current_partition_info(avail, 10)
    assert info2 is not info
    # 2 x batch.size switches even when the batch is not full
    bp.update_partition_info(info2, 2000, avail, 10, enable_switch=False)
    assert bp.is_partition_changed(info2)
    assert p0 in avail


def test_sticky_choice_is_uniform_over_available_partitions():
    bp = BuiltInPartitioner("t", 1, random.Random(5))
    seen = Counter()
    for _ in range(4000):
        info = bp.peek_current_partition_info([1, 3, 5], 6)
        seen[info.partition] += 1
        bp.update_partition_info(info, 1, [1, 3, 5], 6)
    assert set(seen) == {1, 3, 5}
    assert min(seen.values()) > 1000


def test_adaptive_load_stats_follow_kafkas_cumulative_frequency_table():
    bp = BuiltInPartitioner("t", 1, random.Random(7))
    bp.update_partition_load_stats([0, 3, 1], [0, 1, 2], 3)
    assert bp._cft == [4, 5, 8]  # Kafka's own example: sizes 0 3 1 -> 4 5 8
    seen = Counter(bp.next_partition([0, 1, 2], 3) for _ in range(8000))
    # weights 4:1:3
    assert seen[0] > seen[2] > seen[1]
    assert seen[0] / 8000 == pytest.approx(0.5, abs=0.05)
    bp.update_partition_load_stats([2, 2, 2], [0, 1, 2], 3)
    assert bp._cft is None  # all equal: plain uniform


def test_round_robin_cycles_through_available_partitions():
    rr = RoundRobinPartitioner()
    got = [rr("t", b"same-key", 4, [0, 1, 2, 3]) for _ in range(8)]
    assert got == [0, 1, 2, 3, 0, 1, 2, 3]
    other = [rr("u", None, 3, [2]) for _ in range(3)]
    assert other == [2, 2, 2]
