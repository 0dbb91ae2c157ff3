"""RecordAccumulator under both buffer.memory allocation strategies (KIP-1332).

No sockets: a fake cluster, a fake clock where blocking matters, and the real
drain/close/encode path, so "bytes on the wire" here are the produce request
buffers the sender would hand to sendmsg.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidegate.client.metadata import BrokerNode, Cluster, PartitionInfo, TopicMetadata
from tidegate.clock import MockClock
from tidegate.producer.accumulator import RecordAccumulator
from tidegate.producer.batch import ChunkedProducerBatch
from tidegate.producer.buffer_pool import BufferPool, chunk_size_for
from tidegate.producer.errors import BufferExhaustedError
from tidegate.producer.partitioner import partition_for_key
from tidegate.producer.produce_request import produce_request_buffers
from tidegate.record.compression import CODECS, NONE

KiB = 1024
MiB = 1024 * 1024


def cluster(partitions=4, topic="t", nodes=(1,)):
    return cluster_of({topic: partitions}, nodes)


def cluster_of(topics, nodes=(1,)):
    """A fake cluster: ``{topic: partition count}``, leaders spread over ``nodes``."""
    brokers = {n: BrokerNode(n, "127.0.0.1", 9000 + n) for n in nodes}
    meta = {}
    for topic, partitions in topics.items():
        parts = tuple(PartitionInfo(topic, i, nodes[i % len(nodes)]) for i in range(partitions))
        meta[topic] = TopicMetadata(topic, 0, parts)
    return Cluster(brokers, meta)


def make(
    incremental, *, batch_size=16 * KiB, memory=64 * MiB, compression=NONE, clock=None, linger_ms=5
):
    clock = clock or MockClock()
    poolable = chunk_size_for(batch_size) if incremental else batch_size
    pool = BufferPool(memory, poolable, clock=clock)
    acc = RecordAccumulator(
        pool,
        batch_size=batch_size,
        incremental=incremental,
        compression=compression,
        linger_ms=linger_ms,
        clock=clock,
        rng=random.Random(1),
    )
    return acc, pool, clock


def append(acc, cl, partition, value, key=None, headers=(), ts=1000, max_block=100, topic="t"):
    return acc.append(topic, partition, ts, key, value, headers, None, max_block, cl)


def drain_all(acc, cl, max_size=64 * MiB):
    out = []
    while True:
        got = acc.drain(cl, set(cl.brokers), max_size, 10**9)
        batches = [b for lst in got.values() for b in lst]
        if not batches:
            return out
        out += batches


def wire(batches, version=9):
    topics = {}
    for b in batches:
        topics.setdefault(b.topic, []).append((b.partition, b.segments(), b.final_size))
    bufs = produce_request_buffers(version, 1, "c", -1, 1000, list(topics.items()))
    return bufs, b"".join(bytes(x) for x in bufs)


# -- reservation: full vs incremental -----------------------------------------------------


def test_new_batch_reserves_batch_size_under_full_and_one_chunk_under_incremental():
    cl = cluster()
    full, fpool, _ = make(False, batch_size=4 * MiB)
    inc, ipool, _ = make(True, batch_size=4 * MiB)
    for acc in (full, inc):
        for p in range(4):
            append(acc, cl, p, b"x" * 100)
    assert fpool.reserved_memory() == 4 * 4 * MiB
    assert ipool.reserved_memory() == 4 * 16 * KiB
    assert ipool.poolable_size == 16 * KiB


def test_incremental_grows_chunk_by_chunk_without_blocking():
    cl = cluster()
    acc, pool, clock = make(True, batch_size=64 * KiB)
    for _ in range(300):  # ~ 300 x 130 B = 39 KiB: three chunks
        _fut, _full, _new, _ = append(acc, cl, 0, b"v" * 120)
    batch = acc.queue_for("t", 0).batches[-1]
    assert isinstance(batch, ChunkedProducerBatch)
    assert len(acc.queue_for("t", 0).batches) == 1
    assert len(batch.chunks) == 3
    assert pool.reserved_memory() == 3 * 16 * KiB
    assert clock.nanoseconds() == 0  # never waited
    assert batch.buffered_bytes() <= batch.capacity()


def test_uncompressed_reservation_is_exact_never_grows_mid_record():
    cl = cluster()
    acc, _pool, _ = make(True, batch_size=64 * KiB)
    rnd = random.Random(3)
    for _ in range(400):
        append(
            acc, cl, 0, os.urandom(rnd.randint(0, 900)), key=b"k" if rnd.random() < 0.5 else None
        )
    for b in acc.queue_for("t", 0).batches:
        assert b.heap_chunks == 0
        assert not b.close_after_append
        # never more than one chunk beyond what the data needs
        assert b.capacity() - b.buffered_bytes() < 16 * KiB + 1100


def test_first_record_spanning_several_chunks_is_one_atomic_allocation():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=64 * KiB, memory=4 * 16 * KiB)
    append(acc, cl, 0, b"z" * 40_000)
    batch = acc.queue_for("t", 0).batches[-1]
    assert len(batch.chunks) == 3
    assert pool.reserved_memory() == 3 * 16 * KiB


def test_growth_when_pool_is_exhausted_closes_the_batch_and_blocks_the_record():
    cl = cluster()
    clock = MockClock()
    # 3 chunks: partition 0 takes 2, partition 1 takes 1
    acc, pool, _ = make(True, batch_size=64 * KiB, memory=3 * 16 * KiB, clock=clock)
    append(acc, cl, 1, b"y" * 100)
    n = 0
    while True:
        q0 = acc.queue_for("t", 0)
        if (
            q0
            and q0.batches
            and len(q0.batches[-1].chunks) == 2
            and q0.batches[-1].capacity() - q0.batches[-1].buffered_bytes() < 400
        ):
            break
        append(acc, cl, 0, b"v" * 300)
        n += 1
        assert n < 1000
    first = acc.queue_for("t", 0).batches[-1]
    assert pool.available_memory() == 0
    # the next record needs a third chunk: growth fails without blocking, the batch
    # is closed (drainable), and the record blocks on the first-record path
    with pytest.raises(BufferExhaustedError):
        append(acc, cl, 0, b"v" * 300, max_block=50)
    assert first.closed_for_appends and first.is_full()
    assert clock.nanoseconds() == 50_000_000  # blocked exactly max.block.ms
    assert pool.metrics.get("buffer-exhausted-total") == 1
    assert pool.queued() == 0
    # ready: the closed batch is sendable now, not after linger
    res = acc.ready(cl, clock.milliseconds())
    assert 1 in res.ready_nodes
    # the sender completes partition 1's batch: its chunk comes back and the record
    # starts a new batch on partition 0
    b1 = acc.queue_for("t", 1).batches[0]
    acc.queue_for("t", 1).batches.popleft()
    b1.close()
    b1.complete(0, -1, None)
    acc.deallocate(b1)
    _fut, _full, new, part = append(acc, cl, 0, b"v" * 300, max_block=50)
    assert new and part == 0
    assert len(acc.queue_for("t", 0).batches) == 2


def test_growth_uses_free_memory_without_waiting_while_pool_has_room():
    cl = cluster()
    acc, pool, clock = make(True, batch_size=1 * MiB, memory=1 * MiB)
    for _ in range(2000):
        append(acc, cl, 0, b"q" * 200)
    assert clock.nanoseconds() == 0
    assert pool.metrics.get("buffer-exhausted-total") == 0


@pytest.mark.parametrize("incremental", [False, True])
def test_record_larger_than_batch_size_forms_its_own_batch(incremental):
    cl = cluster()
    acc, pool, _ = make(incremental, batch_size=1024)
    append(acc, cl, 0, b"a" * 100)
    append(acc, cl, 0, b"B" * 5000)
    append(acc, cl, 0, b"c" * 100)
    batches = list(acc.queue_for("t", 0).batches)
    assert [b.count for b in batches] == [1, 1, 1]
    assert batches[1].buffered_bytes() > 5000
    if incremental:
        assert pool.poolable_size == 1024
        assert len(batches[1].chunks) == 5  # ceil((61 + 5000 + overhead) / 1024)
    else:
        assert batches[1].initial_capacity >= 5061


def test_chunk_size_floor_keeps_the_header_in_the_first_chunk():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=16)
    assert pool.poolable_size == 128
    for _ in range(5):
        append(acc, cl, 0, b"x" * 10)
    batches = drain_all(acc, cl)
    assert all(len(b.segments()[0]) >= 61 for b in batches)


# -- compression-aware projection, growth and early returns ---------------------------------


def test_compressed_projection_uses_the_estimated_ratio():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=1 * MiB, compression=CODECS["gzip"])
    acc._topic_info("t").ratio = 0.2
    value = b"abcd" * 12_500  # 50 KB, very compressible
    append(acc, cl, 0, value)
    batch = acc.queue_for("t", 0).batches[-1]
    ub = batch.upper_bound(None, value, ())
    assert acc.first_record_chunk_bytes(None, value, (), 0.2) == 61 + int(ub * 0.2 * 1.05)
    assert len(batch.chunks) == 1  # uncompressed would need 4
    assert pool.reserved_memory() == 16 * KiB


def test_compressed_growth_mid_record_takes_pool_then_heap_and_closes_early():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=1 * MiB, memory=2 * 16 * KiB, compression=CODECS["zstd"])
    acc._topic_info("t").ratio = 0.01  # badly optimistic for random data
    append(acc, cl, 0, os.urandom(20_000))  # reserves 1 chunk for ~20 KB of output
    batch = acc.queue_for("t", 0).batches[-1]
    assert len(batch.chunks) == 1
    batch.close_for_appends()  # the compressor's output lands now: 20 KB > 16 KiB
    assert batch.buffered_bytes() > 20_000
    assert len(batch.chunks) == 2
    assert batch.heap_chunks == 0  # the second chunk came from the pool, without blocking
    assert pool.available_memory() == 0


def test_compressed_overflow_with_exhausted_pool_uses_heap_chunks():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=1 * MiB, memory=1 * 16 * KiB, compression=CODECS["lz4"])
    acc._topic_info("t").ratio = 0.01
    append(acc, cl, 0, os.urandom(30_000))
    batch = acc.queue_for("t", 0).batches[-1]
    assert pool.available_memory() == 0
    batch.close_for_appends()
    # ~30 KB of incompressible bytes take two 16 KiB chunks: the pool's one and one more
    # from the heap
    assert (len(batch.chunks), batch.heap_chunks) == (2, 1)
    assert pool.reserved_memory() == 16 * KiB  # the pool bound still holds
    batch.close()
    batch.complete(0, -1, None)
    acc.deallocate(batch)
    assert pool.available_memory() == 16 * KiB  # heap chunks are not "returned"


def test_compressed_ratio_estimate_moves_like_kafkas():
    cl = cluster()
    acc, _, _ = make(False, compression=CODECS["gzip"])
    append(acc, cl, 0, b"a" * 5000)
    (b,) = drain_all(acc, cl)
    acc.update_compression_ratio(b)
    assert b.actual_compression_ratio < 0.1
    assert acc._topic_info("t").ratio == pytest.approx(0.995)  # improves by 0.005 a batch


def test_unused_chunks_return_to_the_pool_at_close_not_completion():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=1 * MiB, compression=CODECS["gzip"])
    for _ in range(300):
        append(acc, cl, 0, b"hello world " * 20)  # ~75 KB, compresses to ~1 KB
    batch = acc.queue_for("t", 0).batches[-1]
    reserved_open = pool.reserved_memory()
    assert len(batch.chunks) >= 4  # reserved for the 1.05 x uncompressed estimate
    batch.close_for_appends()
    assert len(batch.chunks) == 1
    assert pool.reserved_memory() == 16 * KiB < reserved_open
    batch.close()
    batch.complete(0, -1, None)
    acc.deallocate(batch)
    assert pool.reserved_memory() == 0


def test_over_attached_empty_chunks_return_at_close():
    cl = cluster()
    acc, pool, _ = make(True, batch_size=64 * KiB)
    append(acc, cl, 0, b"x" * 100)
    batch = acc.queue_for("t", 0).batches[-1]
    batch.add_chunks(pool.allocate_chunks(2 * 16 * KiB, 0))  # e.g. two racing appenders
    assert pool.reserved_memory() == 3 * 16 * KiB
    batch.close_for_appends()
    assert pool.reserved_memory() == 16 * KiB


# -- wire bytes ---------------------------------------------------------------------------------


def _records(seed=5, n=600):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % rnd.randint(0, 50)
        size = rnd.choice((0, 10, 100, 700, 3000))
        value = None if i % 97 == 3 else (rnd.randbytes(size // 2) + b"r" * (size - size // 2))
        headers = [("h", b"v%d" % i), ("n", None)] if i % 5 == 0 else ()
        out.append((key, value, headers, 1_700_000_000_000 + i // 3))
    return out


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_wire_bytes_identical_under_both_strategies(codec):
    cl = cluster(partitions=3)
    results = {}
    for incremental in (False, True):
        acc, _pool, _ = make(incremental, batch_size=64 * KiB, compression=CODECS[codec])
        for i, (k, v, h, ts) in enumerate(_records()):
            append(acc, cl, i % 3, v, key=k, headers=h, ts=ts)
        batches = drain_all(acc, cl)
        results[incremental] = (batches, *wire(batches))
    _fb, fbufs, fbytes = results[False]
    ib, ibufs, ibytes = results[True]
    assert ibytes == fbytes
    assert len(ibytes) > 100_000
    # the incremental batches went out as several chunks each, referenced not copied
    assert len(ibufs) > len(fbufs)
    chunk_ids = {id(c) for b in ib for c in b.chunks}
    batch_segments = [s for s in ibufs if isinstance(s, memoryview)]
    assert batch_segments and all(id(s.obj) in chunk_ids for s in batch_segments)
    assert any(len(b.segments()) > 1 for b in ib)


def test_uncompressed_batch_is_kafka_pythons_bytes():
    cl = cluster(partitions=1)
    recs = _records(n=40)
    for incremental in (False, True):
        acc, _, _ = make(incremental, batch_size=1 * MiB)
        for k, v, h, ts in recs:
            append(acc, cl, 0, v, key=k, headers=h, ts=ts)
        (batch,) = drain_all(acc, cl)
        ours = b"".join(bytes(s) for s in batch.segments())
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
        for i, (k, v, h, ts) in enumerate(recs):
            builder.append(i, timestamp=ts, key=k, value=v, headers=list(h))
        theirs = bytearray(builder.build())
        # kafka-python writes partitionLeaderEpoch 0; Kafka's producer writes -1
        # (NO_PARTITION_LEADER_EPOCH), as we do. The broker overwrites it and the CRC
        # does not cover it; every other byte must match.
        assert ours[12:16] == b"\xff\xff\xff\xff"
        theirs[12:16] = b"\xff\xff\xff\xff"
        assert ours == bytes(theirs)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_decode_with_kafka_python(codec):
    cl = cluster(partitions=1)
    recs = _records(n=200, seed=9)
    acc, _, _ = make(True, batch_size=1 * MiB, compression=CODECS[codec])
    for k, v, h, ts in recs:
        append(acc, cl, 0, v, key=k, headers=h, ts=ts)
    (batch,) = drain_all(acc, cl)
    mr = MemoryRecords(b"".join(bytes(s) for s in batch.segments()))
    kb = mr.next_batch()
    assert kb.compression_type == CODECS[codec]
    got = [(r.key, r.value, tuple(r.headers), r.timestamp) for r in kb]
    assert got == [(k, v, tuple(h), ts) for k, v, h, ts in recs]


# -- section 4, case 10: the KIP's mixed workload --------------------------------------------


def _mixed_workload(incremental):
    """One producer, batch.size 4 MiB, buffer.memory 64 MiB (room for 16 full batches),
    max.block.ms 100, no sender draining: 9 keyless 1 KiB records to hot topic A for
    every keyed 100-byte record (distinct keys, murmur2 placement) to 1000-partition
    topic B; 1,000 keyed records touch ~620 partitions of B, A gets ~9 MiB. Each append
    is timed on the autojump fake clock, so "blocked" means fake time moved."""
    cl = cluster_of({"A": 4, "B": 1000})
    acc, pool, clock = make(incremental, batch_size=4 * MiB, memory=64 * MiB)
    hot_value, cold_value = os.urandom(1024), os.urandom(100)
    st = {"hot_ok": 0, "hot_blocked": 0, "hot_failed": 0, "cold_ok": 0, "cold_failed": 0}
    peak = 0
    for i in range(10_000):
        hot = i % 10 != 9
        start = clock.nanoseconds()
        try:
            if hot:
                acc.append("A", None, 1000, None, hot_value, (), None, 100, cl)
            else:
                key = b"user-%d" % i
                append(acc, cl, partition_for_key(key, 1000), cold_value, key=key, topic="B")
            st["hot_ok" if hot else "cold_ok"] += 1
        except BufferExhaustedError:
            st["hot_failed" if hot else "cold_failed"] += 1
        if hot and clock.nanoseconds() != start:
            st["hot_blocked"] += 1
        peak = max(peak, pool.reserved_memory())
    batches = [b for q in acc.iter_queues() for b in q.batches]
    st.update(
        peak=peak,
        reserved=pool.reserved_memory(),
        buffered=sum(b.buffered_bytes() for b in batches),
        batches=len(batches),
        b_partitions=len({b.partition for b in batches if b.topic == "B"}),
        exhausted=pool.metrics.get("buffer-exhausted-total"),
    )
    # all memory comes back once the sender has sent and completed everything
    for b in drain_all(acc, cl):
        b.complete(0, -1, None)
        acc.deallocate(b)
    st["after"] = pool.reserved_memory()
    return st, clock


@pytest.mark.timeout(30)
def test_case10_mixed_workload_full_exhausts_the_pool_incremental_follows_the_data():
    full, _ = _mixed_workload(False)
    inc, inc_clock = _mixed_workload(True)
    chunk = 16 * KiB
    cold = [partition_for_key(b"user-%d" % i, 1000) for i in range(9, 10_000, 10)]
    first_15 = list(dict.fromkeys(cold))[:15]
    # the same keys reach the same B partitions under both strategies
    assert inc["b_partitions"] == len(set(cold)) > 600 and inc["cold_failed"] == 0
    # full: every open batch holds a whole 4 MiB; 16 of them (A's first plus 15 B
    # partitions) take all 64 MiB, so most B partitions and A's next batch are refused
    # after blocking max.block.ms, while the data buffered is a fraction of that (A's
    # one full batch and ~0.1 MiB of B records)
    assert full["peak"] == 64 * MiB
    assert full["buffered"] * 10 < full["reserved"]
    assert full["reserved"] == full["batches"] * 4 * MiB
    assert full["b_partitions"] == 15
    # every keyed record for another partition than the first 15 is refused
    assert full["cold_failed"] == sum(p not in first_15 for p in cold) > 500
    assert full["hot_blocked"] > 0 and full["hot_failed"] == full["hot_blocked"]
    assert full["exhausted"] == full["cold_failed"] + full["hot_failed"]
    # incremental: the reservation is the bytes actually buffered, rounded up to a chunk
    # per open batch; at most 1/20 of the ~N x 4 MiB full would need for the same batches
    assert inc["hot_failed"] == inc["hot_blocked"] == 0 and inc["exhausted"] == 0
    assert inc_clock.nanoseconds() == 0  # no append, hot or keyed, ever waited
    assert inc["hot_ok"] == 9000 and inc["cold_ok"] == 1000
    assert inc["buffered"] <= inc["reserved"] < inc["buffered"] + inc["batches"] * chunk
    assert inc["peak"] < 32 * MiB  # never near the 64 MiB pool
    assert inc["peak"] * 20 <= inc["batches"] * 4 * MiB
    assert full["after"] == inc["after"] == 0


# -- ready / drain / expiry ------------------------------------------------------------------------


def test_ready_waits_for_linger_unless_full_or_memory_is_short():
    cl = cluster(partitions=2)
    acc, _pool, clock = make(False, batch_size=1024, linger_ms=100, memory=4 * 1024)
    append(acc, cl, 0, b"x" * 10)
    res = acc.ready(cl, clock.milliseconds())
    assert not res.ready_nodes and res.next_ready_check_delay_ms == 100
    clock.advance(100)
    assert acc.ready(cl, clock.milliseconds()).ready_nodes == {1}
    acc2, _, clock2 = make(False, batch_size=1024, linger_ms=10_000)
    for _ in range(20):
        append(acc2, cl, 1, b"y" * 100)  # more than one batch: the first is full
    assert acc2.ready(cl, clock2.milliseconds()).ready_nodes == {1}


def test_drain_one_batch_per_partition_within_max_request_size():
    cl = cluster(partitions=4)
    acc, _, clock = make(False, batch_size=1024)
    for p in range(4):
        for _ in range(20):
            append(acc, cl, p, b"z" * 100)
    got = acc.drain(cl, {1}, 2500, clock.milliseconds())[1]
    assert len({b.partition for b in got}) == len(got)
    assert sum(b.final_size for b in got) <= 2500
    assert all(b.closed for b in got)


def test_expired_batches_after_delivery_timeout():
    cl = cluster()
    acc, _, clock = make(False)
    acc.delivery_timeout_ms = 1000
    append(acc, cl, 0, b"x")
    assert acc.expired_batches(clock.milliseconds()) == []
    clock.advance(1000)
    (b,) = acc.expired_batches(clock.milliseconds())
    assert b.partition == 0 and not acc.has_undrained()


def test_keyless_records_stick_until_the_batch_fills():
    cl = cluster(partitions=8)
    acc, _, _ = make(False, batch_size=2048)
    parts = []
    for _ in range(400):
        _fut, _, _, p = acc.append("t", None, 1, None, b"x" * 100, (), None, 100, cl)
        parts.append(p)
    runs = [parts[0]]
    for p in parts[1:]:
        if p != runs[-1]:
            runs.append(p)
    assert len(runs) > 3  # it does move on
    # every stint put at least batch.size bytes (~17 records of ~120 B) on its partition
    counts = []
    n = 1
    for a, b in itertools.pairwise(parts):
        if a == b:
            n += 1
        else:
            counts.append(n)
            n = 1
    assert min(counts) >= 2048 // 120
    # and switched only when the partition's open batch was full (KIP-794)
    for q in acc.iter_queues():
        for b in list(q.batches)[:-1]:
            assert b.is_full()
