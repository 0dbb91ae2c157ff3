#!/usr/bin/env python3
"""KIP-932 share-partitions, in process: memory per in-flight record and acquire+ack
throughput of :class:`tidegate.server.share.SharePartition` (issue 28's goal: <= 200
bytes of broker memory per in-flight record).

Memory (``tracemalloc``: every byte Python allocated for the in-flight state, its
locks' timing-wheel entries included) with 100,000 records in flight, held as 10
share-partitions of 10,000 (``group.share.partition.max.record.locks`` allows at most
10,000), on one timing wheel, lock duration 30 s:

* ``1-record batches``: the log holds 1-record batches, members fetch 500 records at a
  time (librdkafka's max.poll.records): an acquisition caches one range per fetch
  (Kafka's design), one lock each;
* ``100-record batches``: the same with 100-record log batches;
* ``one lock per record``: the worst case, every record acquired on its own (MaxRecords
  1, or records throttled near their delivery limit): one cached batch and one lock
  per record, all acquired in the same millisecond (the fake clock stands still), so
  the locks share their expiration's int;
* ``one lock per record, 1 ms apart``: the same with the clock moved 1 ms between
  acquisitions: each lock has an expiration of its own (the worst case of all);
* ``split, acked piecewise``: 100-record batches in 500-record acquisitions, then every
  other record acknowledged (the rest still in flight): per-offset state, the
  acquisitions' locks shared by what is left;
* ``split, re-acquired``: as above but every other record RELEASEd and acquired again
  (a fetch takes the released records of the log batch it reads): per-offset state
  plus one lock per re-acquired record, as Kafka keeps one per offset there.

The persister stores nothing (the share coordinator's state is not the
share-partition's memory). Throughput (fake clock, same persister, no tracemalloc): records/s through
acquire + acknowledge of 500-record fetches, acknowledged as one range, as per-record
types in one range, or as 500 one-record ranges; and lock expiry of 100,000 records.

    python benchmarks/share_partition.py            # a few seconds
    python benchmarks/share_partition.py --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable

from tidegate.clock import MockClock
from tidegate.errors import ErrorCode
from tidegate.server.share import (
    FetchedBatch,
    PersisterReadResult,
    ShareAcknowledgementBatch,
    ShareFetchRead,
    SharePartition,
    SharePartitionState,
)
from tidegate.server.timer import SystemTimer

PARTITIONS = 10
PER_PARTITION = 10_000
LOCK_MS = 30_000
MEMBERS = [f"member-{i}" for i in range(8)]
ACCEPT, RELEASE = 1, 2


class NullPersister:
    """A persister that stores nothing and answers every call at once: the share state
    the coordinator keeps is not the share-partition's memory, nor its cost."""

    def initialize(self, key, state_epoch, start_offset, callback) -> None:
        callback(ErrorCode.none)

    def read(self, key, leader_epoch, callback) -> None:
        callback(PersisterReadResult())

    def write(self, write, callback) -> None:
        callback(ErrorCode.none)

    def delete(self, key, callback) -> None:
        callback(ErrorCode.none)


class World:
    def __init__(self, partitions: int = PARTITIONS, max_in_flight: int = PER_PARTITION) -> None:
        self.clock = MockClock()
        self.timer = SystemTimer(clock=self.clock)
        self.persister = NullPersister()
        self.partitions = []
        for p in range(partitions):
            sp = SharePartition("group", uuid.UUID(int=1), p, timer=self.timer, persister=self.persister,
                                max_in_flight_records=max_in_flight, record_lock_duration_ms=LOCK_MS,
                                state=SharePartitionState.ACTIVE)
            sp.update_cache_and_offsets(BASE)  # loaded at the log start (earliest)
            self.partitions.append(sp)


#: where the logs start: offsets of a long-lived partition, 8-byte ints (each offset a
#: Python int object of its own, as in a broker)
BASE = 10**12


def log_of(total: int, batch_records: int) -> list[FetchedBatch]:
    """A partition's log from BASE: a fresh list (and fresh offset ints) per partition."""
    end = BASE + total
    return [FetchedBatch(o, min(o + batch_records, end) - 1) for o in range(BASE, end, batch_records)]


def read_from(log: list[FetchedBatch], batch_records: int, offset: int, max_records: int) -> ShareFetchRead:
    """What a log read at ``offset`` of about ``max_records`` returns (whole batches)."""
    i = max(offset - BASE, 0) // batch_records
    n = max(1, -(-max_records // batch_records))
    return ShareFetchRead(log[i:i + n])


def fill(world: World, batch_records: int, fetch_records: int, ms_apart: int = 0) -> None:
    """Acquire PER_PARTITION records in every partition, ``fetch_records`` per fetch,
    the clock moved ``ms_apart`` between fetches (the locks' timer is not advanced:
    nothing expires)."""
    for sp in world.partitions:
        log = log_of(PER_PARTITION, batch_records)
        m = 0
        while True:
            offset = sp.next_fetch_offset()
            if offset >= BASE + PER_PARTITION:
                break
            got = sp.acquire(MEMBERS[m % len(MEMBERS)], read_from(log, batch_records, offset, fetch_records),
                             fetch_offset=offset, max_records=fetch_records, batch_size=500)
            assert got.count, (offset, sp.in_flight_records)
            m += 1
            if ms_apart:
                world.clock.advance(ms_apart)


def ack_every_other(world: World, ack_type: int) -> None:
    for sp in world.partitions:
        for batch in sp.cached_batches():
            member = batch.member
            acks = [ShareAcknowledgementBatch(o, o, (ack_type,)) for o in range(batch.first, batch.last + 1, 2)]
            sp.acknowledge(member, acks, lambda r: None)


def scenario_split_reacquired(world: World) -> None:
    fill(world, 100, 500)
    ack_every_other(world, RELEASE)
    for sp in world.partitions:
        log = log_of(PER_PARTITION, 100)
        while (offset := sp.next_fetch_offset()) < BASE + PER_PARTITION:
            got = sp.acquire("member-x", read_from(log, 100, offset, 1), fetch_offset=offset, max_records=1)
            assert got.count


SCENARIOS: dict[str, Callable[[World], None]] = {
    "1-record batches": lambda w: fill(w, 1, 500),
    "100-record batches": lambda w: fill(w, 100, 500),
    "one lock per record": lambda w: fill(w, 1, 1),
    "one lock per record, 1 ms apart": lambda w: fill(w, 1, 1, ms_apart=1),
    "split, acked piecewise": lambda w: (fill(w, 100, 500), ack_every_other(w, ACCEPT)),
    "split, re-acquired": scenario_split_reacquired,
}


def measure_memory(name: str) -> dict:
    gc.collect()
    world = World()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    SCENARIOS[name](world)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    in_flight = sum(sp.in_flight_records for sp in world.partitions)
    batches = sum(len(sp.cached_batches()) for sp in world.partitions)
    return {"scenario": name, "in_flight_records": in_flight, "cached_batches": batches,
            "locks": world.timer.size, "bytes": used, "bytes_per_record": used / in_flight}


def measure_throughput(batch_records: int, ack_style: str, total: int) -> dict:
    """Records/s through acquire (500 per fetch) + acknowledge of each fetch."""
    world = World(partitions=1, max_in_flight=2000)
    sp = world.partitions[0]
    log = log_of(total, batch_records)
    done = 0
    start = time.perf_counter()
    while done < total:
        offset = sp.next_fetch_offset()
        got = sp.acquire("m", read_from(log, batch_records, offset, 500), fetch_offset=offset,
                         max_records=500, batch_size=500)
        for first, last, _count in got.records:
            if ack_style == "one range":
                acks = [ShareAcknowledgementBatch(first, last, (ACCEPT,))]
            elif ack_style == "per-record types":
                acks = [ShareAcknowledgementBatch(first, last, (ACCEPT,) * (last - first + 1))]
            else:
                acks = [ShareAcknowledgementBatch(o, o, (ACCEPT,)) for o in range(first, last + 1)]
            sp.acknowledge("m", acks, lambda r: None)
        done += got.count
    elapsed = time.perf_counter() - start
    assert sp.start_offset == BASE + total and sp.cached_batches() == []
    return {"log batches": f"{batch_records}-record", "ack": ack_style, "records": total,
            "seconds": elapsed, "records_per_s": total / elapsed}


def measure_expiry(name: str) -> dict:
    """Time to expire every lock of a scenario (the records become AVAILABLE again)."""
    world = World()
    SCENARIOS[name](world)
    locks = world.timer.size
    world.clock.advance(LOCK_MS)
    start = time.perf_counter()
    world.timer.advance_clock()
    elapsed = time.perf_counter() - start
    assert world.timer.size == 0
    records = sum(sp.in_flight_records for sp in world.partitions)
    return {"scenario": name, "locks": locks, "records": records, "seconds": elapsed,
            "records_per_s": records / elapsed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per throughput run")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)

    memory = [measure_memory(name) for name in SCENARIOS]
    print(f"memory, {PARTITIONS} share-partitions x {PER_PARTITION:,} records in flight:")
    print(f"  {'scenario':<32} {'in flight':>10} {'batches':>8} {'locks':>8} {'MiB':>7} {'B/record':>9}")
    for m in memory:
        print(f"  {m['scenario']:<32} {m['in_flight_records']:>10,} {m['cached_batches']:>8,} {m['locks']:>8,} "
              f"{m['bytes'] / 2**20:>7.1f} {m['bytes_per_record']:>9.1f}")

    throughput = [measure_throughput(b, style, args.records)
                  for b in (1, 100) for style in ("one range", "per-record types", "one-record ranges")]
    print("\nacquire + acknowledge, 500 records per fetch:")
    for t in throughput:
        print(f"  {t['log batches']:>11} log batches, ack {t['ack']:<18} {t['records_per_s']:>12,.0f} records/s")

    expiry = [measure_expiry(name) for name in ("100-record batches", "one lock per record")]
    print("\nlock expiry:")
    for e in expiry:
        print(f"  {e['scenario']:<24} {e['locks']:>8,} locks, {e['records']:,} records in "
              f"{e['seconds'] * 1000:.1f} ms ({e['records_per_s']:,.0f} records/s)")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"memory": memory, "throughput": throughput, "expiry": expiry}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
