#!/usr/bin/env python3
"""KIP-932 share fetching, in process (no sockets): the broker's CPU through ShareFetch
and acknowledgements, and how exactly a record whose lock expires is redelivered.

**Throughput**: one 8-partition topic holding ``--records`` records (in batches of
``--batch-records``, 100-byte values), consumed by 1, 4 or 16 share consumers of one
group through :func:`tidegate.server.share.share_apis.handle_share_fetch` over real logs
(tidegate's broker parts: ``LogManager``, ``ReplicaManager``, the share-partition manager
with an in-memory persister). The members' assignment is the simple assignor's (1: all
eight partitions; 4: two each; 16: one each, every partition shared by two). Each member
in turn sends a ShareFetch (MaxRecords 500, librdkafka's max.poll.records; MaxWaitMs 0)
carrying the ACCEPTs of its previous answer, each response encoded by tidegate's codec
(what the broker sends), until every record is accepted. Acknowledged ``batch``: one
AcknowledgementBatch per acquired range; ``one-by-one``: one per record (what a client
acknowledging record by record sends). Beside it, ``classic``: one consumer reading the
same records with plain Fetch (``ReplicaManager.read_from_log``, 1 MiB per partition,
the response encoded by the Fetch fast path): its records stay in their files, so this
is the broker's CPU with nothing done per record, not a comparison of consumers (the
issue's share-versus-classic goal is measured with real clients over sockets).

**Lock-expiry precision**: ``--in-flight`` records (default 100,000, 10 partitions of
10,000: ``group.share.partition.max.record.locks``' maximum) acquired by one member and
never acknowledged, in acquisitions of 10 records (10,000 locks: the wheel's stress) or
of 500 (200 locks: librdkafka's max.poll.records); a second member long-polls
(ShareFetch, MaxWaitMs 30 s, taking everything acquirable) and is handed each record
again when its lock expires. On the real clock and the real timer, driven as the broker
drives it (``TimerReaper`` on a uvloop loop, start-up's objects frozen out of the garbage
collector's reach as ``tidegate serve`` freezes them), with ``--lock-ms`` locks:
redelivery time (the long poll's answer) minus the lock's deadline as the broker set it
(its millisecond of the acquisition + the lock duration), per record, in whole ms of the
monotonic clock, p50/p99/max (the issue's goal: lock duration + 2 wheel ticks at p99; a
tick is 1 ms). A probe task added to the locks' timer with each acquisition's deadline
gives the timer's own lateness (the loop busy handing records out, or the process not
scheduled on a loaded machine, delays both). The measurement's own bookkeeping is in
flat arrays, so it adds nothing to the collector's walk.

**Real clients** (``--clients RECORDS``): confluent-kafka's classic ``Consumer`` against
1, 4 and 16 ``ShareConsumer``s (threads, implicit acknowledgement) on a tidegate broker
process, the same records, fresh groups, the cases interleaved over ``--rounds``: the
issue's goal, 16 share consumers together at >= 50 % of one classic consumer.

    python benchmarks/share_groups.py                 # about a minute and a half
    python benchmarks/share_groups.py --clients 400000 --rounds 2
    python benchmarks/share_groups.py --json out.json
"""

from __future__ import annotations

import argparse
import array
import asyncio
import gc
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from tidegate.clock import SYSTEM_CLOCK, Clock, MockClock
from tidegate.config import BrokerConfig, topic_log_config
from tidegate.protocol.codec import RequestHeader, encode_response
from tidegate.protocol.fetch_fast import encode_fetch_response, release_pieces
from tidegate.protocol.messages import fetch as fm
from tidegate.protocol.messages import share_fetch as sf
from tidegate.record.batch_builder import Record, build_batch
from tidegate.scheduler import AsyncioScheduler
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.replica_manager import FetchParams, FetchPartition, ReplicaManager
from tidegate.server.share import InMemoryPersister, SharePartitionKey
from tidegate.server.share.share_apis import ShareRequestContext, handle_share_fetch
from tidegate.server.share.share_partition import ShareAutoOffsetReset
from tidegate.server.share.share_partition_manager import ShareGroupSettings, SharePartitionManager
from tidegate.server.timer import SelfTimedTask
from tidegate.server.timer_reaper import TimerReaper

PARTITIONS = 8
GROUP = "bench"
BROKER = BrokerConfig()


class InlineScheduler:
    """A scheduler that runs everything at once (the throughput runs append with acks=1
    and never wait: nothing is scheduled for later)."""

    def call_soon(self, fn: Callable[[], None]) -> None:
        fn()

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Any:
        raise AssertionError("nothing is timed in the throughput runs")

    def submit(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        try:
            result, exc = fn(), None
        except Exception as e:  # noqa: BLE001 - handed on, as a worker thread would
            result, exc = None, e
        on_done(result, exc)

    def schedule(self, name: str, fn: Callable[[], None], period_ms: int) -> Any:
        raise AssertionError("no periodic work here")


class World:
    """A broker's share-fetching parts over a temporary directory."""

    def __init__(self, path: Path, scheduler: Any, clock: Clock, settings: ShareGroupSettings) -> None:
        self.clock = clock
        path.mkdir(parents=True, exist_ok=True)
        self.topics = TopicStore(path)
        self.logs = LogManager(path, self.topics, lambda info: topic_log_config(BROKER, info.configs), clock,
                               scheduler)
        self.logs.load()
        self.replicas = ReplicaManager(self.logs, scheduler, clock=clock, fetch_sessions=FetchSessionCache(1000))
        self.persister = InMemoryPersister()
        self.spm = SharePartitionManager(self.replicas, self.topics, self.persister, clock=clock,
                                         group_settings=lambda _g: settings)
        self.replicas.share_fetch_wakeup = self.spm.partitions_changed
        self.batch_bytes = 0

    def topic(self, partitions: int, records: int, batch_records: int) -> uuid.UUID:
        topic_id = self.logs.create_topic("t", partitions, {}).topic_id
        value = b"v" * 100
        batch = bytes(build_batch([Record(value, key=b"k%d" % i, timestamp=1_000) for i in range(batch_records)]))
        self.batch_bytes = len(batch)
        per_partition = records // partitions
        for p in range(partitions):
            for _ in range(per_partition // batch_records):
                self.replicas.append_records(0, 1, {("t", p): batch}, lambda _r: None)
            self.persister.initialize(SharePartitionKey(GROUP, topic_id, p), 0, -1, lambda _e: None)
        self.replicas.try_complete_actions()
        return topic_id


class Member:
    """A share consumer's session: its epoch and the acknowledgements it owes."""

    def __init__(self, world: World, member_id: str, partitions: list[tuple[uuid.UUID, int]], conn: int) -> None:
        self.world = world
        self.member_id = member_id
        self.partitions = partitions
        self.epoch = 0
        self.owed: dict[tuple[uuid.UUID, int], list[sf.AcknowledgementBatch]] = {}
        self.context = ShareRequestContext(1, conn, ("localhost", 9092))

    def request(self, max_records: int, max_wait: int = 0) -> sf.ShareFetchRequest:
        topics: dict[uuid.UUID, sf.FetchTopic] = {}
        for tp in self.partitions if self.epoch == 0 else list(self.owed):
            topic = topics.setdefault(tp[0], sf.FetchTopic(topic_id=tp[0]))
            topic.partitions.append(sf.FetchPartition(partition_index=tp[1],
                                                      acknowledgement_batches=self.owed.get(tp, [])))
        self.owed = {}
        return sf.ShareFetchRequest(group_id=GROUP, member_id=self.member_id, share_session_epoch=self.epoch,
                                    max_wait=max_wait, min_bytes=1, max_bytes=52_428_800, max_records=max_records,
                                    batch_size=max_records, topics=list(topics.values()))

    def answered(self, response: sf.ShareFetchResponse, one_by_one: bool) -> int:
        assert response.error_code == 0, response
        self.epoch += 1
        got = 0
        for topic in response.responses:
            for p in topic.partitions:
                assert p.acknowledge_error_code == 0, p
                for r in p.acquired_records:
                    got += r.last_offset - r.first_offset + 1
                    acks = self.owed.setdefault((topic.topic_id, p.partition_index), [])
                    if one_by_one:
                        acks += [sf.AcknowledgementBatch(first_offset=o, last_offset=o, acknowledge_types=[1])
                                 for o in range(r.first_offset, r.last_offset + 1)]
                    else:
                        acks.append(sf.AcknowledgementBatch(first_offset=r.first_offset, last_offset=r.last_offset,
                                                            acknowledge_types=[1]))
        return got


def assignment(topic_id: uuid.UUID, members: int) -> list[list[tuple[uuid.UUID, int]]]:
    """The simple assignor's answer on one topic: partitions dealt round-robin, each
    shared by ceil(members / partitions) members."""
    out: list[list[tuple[uuid.UUID, int]]] = [[] for _ in range(members)]
    if members <= PARTITIONS:
        for p in range(PARTITIONS):
            out[p % members].append((topic_id, p))
    else:
        for m in range(members):
            out[m].append((topic_id, m % PARTITIONS))
    return out


def run_share(path: Path, members: int, one_by_one: bool, records: int, batch_records: int) -> dict:
    world = World(path, InlineScheduler(), MockClock(),
                  ShareGroupSettings(auto_offset_reset=ShareAutoOffsetReset.earliest()))
    topic_id = world.topic(PARTITIONS, records, batch_records)
    total = records // PARTITIONS // batch_records * batch_records * PARTITIONS
    group = [Member(world, f"member-{i}", parts, i) for i, parts in enumerate(assignment(topic_id, members))]
    out: list[sf.ShareFetchResponse] = []
    acquired = 0
    sent = 0
    start = time.perf_counter()
    while True:
        idle = 0
        for member in group:
            handle_share_fetch(world.spm, member.request(500), member.context, out.append)
            response = out.pop()
            sent += len(encode_response(RequestHeader(78, 1, 1, "c", True), response))
            got = member.answered(response, one_by_one)
            acquired += got
            idle += not got
        if acquired >= total and idle == len(group):
            break
    for member in group:  # the last acknowledgements
        handle_share_fetch(world.spm, member.request(500), member.context, out.append)
    elapsed = time.perf_counter() - start
    assert acquired == total, (acquired, total)
    for p in range(PARTITIONS):
        sp = world.spm.share_partition(GROUP, (topic_id, p))
        assert sp is not None and not sp.cached_batches(), p
    return {"case": f"{members} share", "acks": "one-by-one" if one_by_one else "batch", "records": total,
            "seconds": elapsed, "records_per_s": total / elapsed, "response_mib": sent / 2**20}


def run_classic(path: Path, records: int, batch_records: int) -> dict:
    world = World(path, InlineScheduler(), MockClock(), ShareGroupSettings())
    world.topic(PARTITIONS, records, batch_records)
    total = records // PARTITIONS // batch_records * batch_records * PARTITIONS
    positions = [0] * PARTITIONS
    read = 0
    sent = 0
    start = time.perf_counter()
    while read < total:
        partitions = [FetchPartition(("t", p), positions[p], 1 << 20) for p in range(PARTITIONS)]
        results, _ = world.replicas.read_from_log(FetchParams(0, 1, 52_428_800), partitions)
        responses = []
        for p, data in enumerate(results):
            high = data.high_watermark
            n = len(data.records)
            if n:  # whole batches of one size: no need to read them
                got = n // world.batch_bytes * batch_records
                positions[p] += got
                read += got
            responses.append(fm.PartitionData(partition_index=p, error_code=0, high_watermark=high,
                                              last_stable_offset=high, log_start_offset=0, records=data.records))
        pieces = encode_fetch_response(1, 16, fm.FetchResponse(responses=[
            fm.FetchableTopicResponse(topic="t", topic_id=uuid.uuid4(), partitions=responses)]))
        sent += sum(len(piece) for piece in pieces)
        release_pieces(pieces)
    elapsed = time.perf_counter() - start
    return {"case": "1 classic", "acks": "-", "records": total, "seconds": elapsed,
            "records_per_s": total / elapsed, "response_mib": sent / 2**20}


# -- lock-expiry precision -----------------------------------------------------------------


#: partitions of the precision runs' topic
PRECISION_PARTITIONS = 10


def run_precision(path: Path, in_flight: int, lock_ms: int, per_lock: int) -> dict:
    partitions = PRECISION_PARTITIONS
    if in_flight <= 0 or in_flight % (partitions * per_lock):
        # the topic is written in whole per_lock-record batches per partition: anything
        # else leaves records unwritten, and the acquiring loop would wait for them forever
        raise ValueError(f"records in flight ({in_flight}) must be a positive multiple of "
                         f"{partitions} partitions x {per_lock} records per lock")
    settings = ShareGroupSettings(record_lock_duration_ms=lock_ms, partition_max_record_locks=10_000,
                                  auto_offset_reset=ShareAutoOffsetReset.earliest())
    # as `tidegate serve` does once it listens: what start-up allocated (here the imports
    # and the earlier runs' leftovers) is moved out of the garbage collector's reach, so
    # a full collection walks only what the broker holds since (the locks among it)
    gc.collect()
    gc.freeze()
    loop = uvloop.new_event_loop()  # the broker's loop (tidegate serve)
    try:
        scheduler = AsyncioScheduler(loop, SYSTEM_CLOCK)
        world = World(path, scheduler, SYSTEM_CLOCK, settings)
        reaper = TimerReaper(scheduler.call_at)
        reaper.add_timer("share-group-lock-timeout", world.spm.lock_timer)
        reaper.add_purgatory(world.spm.purgatory)
        topic_id = world.topic(partitions, in_flight, per_lock)
        tps = [(topic_id, p) for p in range(partitions)]
        return loop.run_until_complete(_precision(world, tps, in_flight, lock_ms, per_lock))
    finally:
        loop.close()
        gc.unfreeze()


class _Probe(SelfTimedTask):
    """A task on the locks' timer due when one acquisition's lock is: the timer's own
    lateness, without the work of handing the records out again. One slotted object per
    probe (as a lock is), so the probes add to the collector's walk no more than the
    locks they shadow."""

    __slots__ = ("due", "out")

    def __init__(self, due: int, out: list[int]) -> None:
        super().__init__()
        self.due = due
        self.out = out

    def run(self) -> None:
        if self.expire():
            self.out.append(SYSTEM_CLOCK.milliseconds() - self.due)


async def _precision(world: World, tps: list[tuple[uuid.UUID, int]], in_flight: int, lock_ms: int,
                     per_lock: int) -> dict:
    clock = SYSTEM_CLOCK
    holder = Member(world, "holder", tps, 1)
    # each record's deadline, by partition and offset, in flat arrays: the measurement's
    # own bookkeeping holds no object the garbage collector walks
    per_partition = in_flight // len(tps)
    deadline = [array.array("q", [-1]) * per_partition for _ in tps]
    out: list[sf.ShareFetchResponse] = []
    start = clock.milliseconds()
    probes: list[int] = []
    added = acquired = 0
    while acquired < in_flight:
        now = clock.milliseconds()
        handle_share_fetch(world.spm, holder.request(per_lock), holder.context, out.append)
        response = out.pop()
        holder.epoch += 1
        world.spm.lock_timer.schedule(_Probe(now + lock_ms, probes), now + lock_ms - clock.milliseconds())
        added += 1
        for topic in response.responses:
            for p in topic.partitions:
                d = deadline[p.partition_index]
                sp = world.spm.share_partition(GROUP, (topic.topic_id, p.partition_index))
                assert sp is not None
                for r in p.acquired_records:
                    # the lock's deadline as the broker set it: its millisecond of the
                    # acquisition plus the lock duration (no later than the clock read
                    # after the fetch, no earlier than the one before it)
                    batch = sp.batch_of(r.first_offset)
                    assert batch is not None and now + lock_ms <= batch.expiration_ms <= clock.milliseconds() + lock_ms
                    for o in range(r.first_offset, r.last_offset + 1):
                        d[o] = batch.expiration_ms
                    acquired += r.last_offset - r.first_offset + 1
    acquiring_ms = clock.milliseconds() - start
    assert acquiring_ms < lock_ms, f"acquiring took {acquiring_ms} ms, longer than the lock ({lock_ms} ms)"
    locks = world.spm.lock_timer.size - added
    taker = Member(world, "taker", tps, 2)
    late = array.array("q")
    done = asyncio.get_running_loop().create_future()

    def answered(response: sf.ShareFetchResponse) -> None:
        now = clock.milliseconds()
        taker.epoch += 1
        for topic in response.responses:
            for p in topic.partitions:
                d = deadline[p.partition_index]
                for r in p.acquired_records:
                    for o in range(r.first_offset, r.last_offset + 1):
                        late.append(now - d[o])
        if len(late) >= in_flight:
            done.set_result(None)
        else:
            asyncio.get_running_loop().call_soon(ask)

    def ask() -> None:
        handle_share_fetch(world.spm, taker.request(in_flight, max_wait=30_000), taker.context, answered)

    ask()
    await asyncio.wait_for(done, timeout=lock_ms / 1000 + 60)
    ordered = sorted(late)
    probes.sort()
    n = len(ordered)
    return {"records": n, "locks": locks, "lock_ms": lock_ms, "acquiring_ms": acquiring_ms,
            "per_lock": per_lock, "p50_ms": ordered[n // 2], "p99_ms": _p99(ordered), "max_ms": ordered[-1],
            "timer_p50_ms": probes[len(probes) // 2], "timer_p99_ms": _p99(probes), "timer_max_ms": probes[-1]}


def _p99(values: list[int]) -> int:
    return values[min(len(values) - 1, len(values) * 99 // 100)]


# -- real clients over sockets ------------------------------------------------------------


def _drain(consumers: list[Any], total: int, poll: Callable[[Any], int], timeout_s: float) -> dict:
    """Poll every consumer (one thread each) until ``total`` records came: records/s from
    the first record to the last (the groups' joins left out)."""
    import threading

    lock = threading.Lock()
    state = {"n": 0, "first": 0.0, "last": 0.0}
    deadline = time.monotonic() + timeout_s

    def loop(c: Any) -> None:
        while time.monotonic() < deadline:
            with lock:
                if state["n"] >= total:
                    return
            got = poll(c)
            if got:
                now = time.perf_counter()
                with lock:
                    state["first"] = state["first"] or now
                    state["n"] += got
                    state["last"] = now

    threads = [threading.Thread(target=loop, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    n, first, last = state["n"], state["first"], state["last"]
    assert n >= total, f"{n} of {total} records in {timeout_s} s"
    return {"records": n, "seconds": last - first, "records_per_s": n / max(last - first, 1e-9)}


def _classic_clients(bootstrap: str, topic: str, total: int, run: int) -> dict:
    from confluent_kafka import Consumer

    # a prefetch queue of 4 MiB, not librdkafka's 64 MiB: the measure starts at the first
    # record, and the records fetched while the group was joined would be counted free;
    # a full queue is fetched again after 1 ms, not 1 s
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-{run}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "queued.max.messages.kbytes": 4096,
                  "fetch.queue.backoff.ms": 1})  # fmt: skip
    c.subscribe([topic])
    try:
        out = _drain([c], total, lambda c: sum(1 for m in c.consume(1000, 0.5) if not m.error()), 120)
    finally:
        c.close()
    return {"case": "1 classic", **out}


def _share_clients(bootstrap: str, topic: str, total: int, members: int, run: int) -> dict:
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    group = f"share-{members}-{run}"
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        future.result(10)
    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
                 for _ in range(members)]  # fmt: skip
    for c in consumers:
        c.subscribe([topic])
    try:
        out = _drain(consumers, total, lambda c: sum(1 for m in c.poll(0.5) if not m.error()), 180)
    finally:
        for c in consumers:
            c.close()
    return {"case": f"{members} share", **out}


def run_clients(records: int, rounds: int) -> list[dict]:
    """confluent-kafka against a tidegate broker process: one classic ``Consumer`` and 1,
    4 and 16 ``ShareConsumer``s (one thread each, implicit acknowledgement: each poll
    accepts the previous one's records) reading the same ``records`` 100-byte records of
    one 8-partition topic, each run a fresh group, the cases interleaved ``rounds``
    times so a loaded machine weighs on them alike."""
    from confluent_kafka import Producer

    from tidegate.testing import Broker

    results = []
    # 1 s heartbeats: a member joining is assigned partitions within a second, not five
    # (the group's join is left out of the measure, but members join one by one)
    heartbeats = {"group.share.min.heartbeat.interval.ms": 1000, "group.share.heartbeat.interval.ms": 1000}
    with Broker(mode="subprocess", overrides=heartbeats) as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topic("clients", PARTITIONS)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 2000})
        for i in range(records):
            while True:
                try:
                    p.produce("clients", b"v" * 100, key=b"k%d" % i, partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(60)
        for run in range(rounds):
            results.append(_classic_clients(bootstrap, "clients", records, run))
            for members in (16, 4, 1):
                results.append(_share_clients(bootstrap, "clients", records, members, run))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=160_000, help="records in the throughput runs")
    ap.add_argument("--batch-records", type=int, default=50, help="records per log batch (throughput)")
    ap.add_argument("--in-flight", type=int, default=100_000, help="records in flight (precision)")
    ap.add_argument("--lock-ms", type=int, default=10_000, help="lock duration (precision)")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--clients", type=int, metavar="RECORDS", default=0,
                    help="also compare confluent-kafka's classic Consumer with 1, 4 and 16 ShareConsumers over "
                         "RECORDS records on a broker process")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the client comparison")
    args = ap.parse_args(argv)
    if args.in_flight <= 0 or args.in_flight % (PRECISION_PARTITIONS * 500):
        ap.error(f"--in-flight must be a positive multiple of {PRECISION_PARTITIONS * 500} "
                 f"({PRECISION_PARTITIONS} partitions, locks of 10 and of 500 records)")
    clients = run_clients(args.clients, args.rounds) if args.clients else []
    if clients:
        print(f"real clients, {args.clients:,} records of 100 bytes, {PARTITIONS} partitions, {args.rounds} "
              "interleaved rounds (records/s from the first record to the last):")
        classic = [c["records_per_s"] for c in clients if c["case"] == "1 classic"]
        for case in dict.fromkeys(c["case"] for c in clients):
            rates = [c["records_per_s"] for c in clients if c["case"] == case]
            print(f"  {case:<10} {' '.join(f'{r:>10,.0f}' for r in rates)}   "
                  f"vs classic {' '.join(f'{r / k:>5.0%}' for r, k in zip(rates, classic, strict=True))}")
        print()

    throughput = []
    with tempfile.TemporaryDirectory() as d:
        throughput.append(run_classic(Path(d) / "classic", args.records, args.batch_records))
        for members in (1, 4, 16):
            for one_by_one in (False, True):
                path = Path(d) / f"share-{members}-{one_by_one}"
                throughput.append(run_share(path, members, one_by_one, args.records, args.batch_records))
    print(f"throughput, {PARTITIONS} partitions, {args.records:,} records in {args.batch_records}-record batches "
          "(broker CPU in process; classic: reads left in their files, nothing per record):")
    print(f"  {'consumers':<10} {'acks':<11} {'records/s':>11} {'us/record':>10} {'response MiB':>13}")
    for t in throughput:
        print(f"  {t['case']:<10} {t['acks']:<11} {t['records_per_s']:>11,.0f} {1e6 / t['records_per_s']:>10.3f} "
              f"{t['response_mib']:>13.1f}")

    precision = []
    for per_lock in (10, 500):
        with tempfile.TemporaryDirectory() as d:
            precision.append(run_precision(Path(d), args.in_flight, args.lock_ms, per_lock))
    print(f"\nlock-expiry precision, {args.in_flight:,} records in flight, locks of {args.lock_ms} ms, real clock; "
          "redelivery = when the other member's long poll is answered:")
    print(f"  {'records/lock':>12} {'locks':>7} {'acquired in':>12} {'redelivery - deadline p50/p99/max':>34} "
          f"{'timer lateness p50/p99/max':>27}")
    for p in precision:
        print(f"  {p['per_lock']:>12} {p['locks']:>7,} {p['acquiring_ms']:>9} ms "
              f"{p['p50_ms']:>18}/{p['p99_ms']}/{p['max_ms']} ms {p['timer_p50_ms']:>17}/{p['timer_p99_ms']}/"
              f"{p['timer_max_ms']} ms")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"clients": clients, "throughput": throughput, "precision": precision}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
