"""The scenarios of the cluster tests, each run with tidegate's client and with
confluent-kafka's (librdkafka) as the reference: the same records, the same faults at
the same points, the same checks.

A scenario produces :data:`RECORDS` records (value ``str(i)``, key ``k{i % 60}``, so
every partition gets an increasing run of values) while a fault plan acts at given
record indexes (:class:`Faults`); then the topic is read back to its end. The checks
(:func:`check_log`): every acknowledged record is in the log at the offset it was
acknowledged with (nothing acknowledged is lost), no value is there twice (nothing
written twice: idempotence), values increase within each partition (order per
partition holds), and no record failed (every fault here is one Kafka's clients ride
out with retries).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.client import KafkaClient
from tidegate.client.fetcher import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    end_offsets,
    list_offsets,
    read_range,
)

__all__ = [
    "KEYS",
    "PARTITIONS",
    "RECORDS",
    "Faults",
    "Outcome",
    "check_log",
    "check_moves_followed",
    "produce",
    "read_log",
    "read_log_confluent",
    "tidegate",
]

RECORDS = 3_000
PARTITIONS = 6
KEYS = 60
#: every wait of a scenario is bounded by this
TIMEOUT_S = 60.0
PRODUCE, FETCH, METADATA = 0, 1, 3


@dataclass
class Faults:
    """What happens to the cluster at which record index: ``at[i]`` runs before record
    ``i`` is sent (a step for later goes through ``MockCluster.later``)."""

    at: dict[int, Callable[[], None]] = field(default_factory=dict)

    def before(self, i: int) -> None:
        step = self.at.get(i)
        if step is not None:
            step()


@dataclass
class Outcome:
    """What the producer reported: value -> (partition, offset) of each acknowledged
    record, and the errors of those that failed."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    failed_values: set[int] = field(default_factory=set)


def _paced(n: int, faults: Faults, send: Callable[[int], None], poll: Callable[[], None]) -> None:
    """Send records 0..n-1 with a 5 ms pause every 100 (about 150 ms in all), so that
    records keep coming while a fault lasts and batches are in flight when it starts."""
    for i in range(n):
        faults.before(i)
        send(i)
        if i % 100 == 99:
            poll()
            time.sleep(0.005)


def produce(client: str, bootstrap: str, topic: str, faults: Faults, *, n: int = RECORDS,
            conf: dict[str, Any] | None = None, transactions: int = 0,
            on_producer: Callable[[Any], None] | None = None) -> Outcome:  # fmt: skip
    """Produce ``n`` records with ``client`` ("tidegate-full", "tidegate-incremental" or
    "confluent"), idempotent with acks=all; with ``transactions`` the records are sent
    in that many committed transactions (``conf`` names the transactional.id).
    ``on_producer`` is handed tidegate's producer once it is created."""
    if client == "confluent":
        return _produce_confluent(bootstrap, topic, faults, n, conf or {}, transactions)
    return _produce_tidegate(bootstrap, topic, faults, n, client.split("-", 1)[1], conf or {}, transactions,
                             on_producer)  # fmt: skip


def _in_transactions(n: int, transactions: int, faults: Faults, send: Callable[[int], None],
                     flush: Callable[[], None], begin: Callable[[], None], commit: Callable[[], None]) -> None:  # fmt: skip
    per = -(-n // transactions)
    for start in range(0, n, per):
        begin()
        for i in range(start, min(n, start + per)):
            faults.before(i)
            send(i)
        commit()
    flush()


def _produce_tidegate(bootstrap: str, topic: str, faults: Faults, n: int, strategy: str, conf: dict[str, Any],
                      transactions: int, on_producer: Callable[[Any], None] | None) -> Outcome:  # fmt: skip
    from tidegate.producer import Producer

    settings = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                "buffer.memory.allocation.strategy": strategy, **conf}  # fmt: skip
    p = Producer(settings)
    if on_producer is not None:
        on_producer(p)
    out = Outcome()
    futures: dict[int, Any] = {}
    try:
        if transactions:
            p.init_transactions(TIMEOUT_S)
            _in_transactions(n, transactions, faults, lambda i: futures.__setitem__(i, p.send(topic, b"%d" % i, key=b"k%d" % (i % KEYS))),
                             lambda: p.flush(TIMEOUT_S), p.begin_transaction,
                             lambda: p.commit_transaction(TIMEOUT_S))  # fmt: skip
        else:
            _paced(n, faults, lambda i: futures.__setitem__(i, p.send(topic, b"%d" % i, key=b"k%d" % (i % KEYS))),
                   lambda: None)  # fmt: skip
        assert p.flush(TIMEOUT_S) == 0, "records left unsent"
    finally:
        p.close(TIMEOUT_S)
    for i, f in futures.items():
        exc = f.exception(0)
        if exc is not None:
            out.failed.append(f"{i}: {exc!r}")
            out.failed_values.add(i)
        else:
            md = f.result(0)
            out.acked[i] = (md.partition, md.offset)
    return out


def _produce_confluent(bootstrap: str, topic: str, faults: Faults, n: int, conf: dict[str, Any],
                       transactions: int) -> Outcome:  # fmt: skip
    from confluent_kafka import Producer

    out = Outcome()

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            out.failed.append(f"{msg.value()!r}: {err}")
            out.failed_values.add(int(msg.value()))
        else:
            out.acked[int(msg.value())] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  **conf})  # fmt: skip

    def send(i: int) -> None:
        p.produce(topic, b"%d" % i, key=b"k%d" % (i % KEYS), on_delivery=report)
        p.poll(0)

    if transactions:
        p.init_transactions(TIMEOUT_S)
        _in_transactions(n, transactions, faults, send, lambda: p.flush(TIMEOUT_S), p.begin_transaction,
                         lambda: p.commit_transaction(TIMEOUT_S))  # fmt: skip
    else:
        _paced(n, faults, send, lambda: p.poll(0))
    assert p.flush(TIMEOUT_S) == 0, "records left unsent"
    return out


def read_log(bootstrap: str, topic: str, *, partitions: int = PARTITIONS, committed: bool = False) -> dict[int, list[tuple[int, int]]]:  # fmt: skip
    """(offset, value) of every record of ``topic``, per partition, read with
    tidegate's fetcher from the earliest offset to the end (read_committed: the last
    stable offset; ``end_offsets``, as Tansu's ListOffsets LATEST can be short)."""
    iso = READ_COMMITTED if committed else READ_UNCOMMITTED
    with KafkaClient(bootstrap) as c:
        c.bootstrap(timeout_ms=TIMEOUT_S * 1000)
        tps = [(topic, p) for p in range(partitions)]
        start = list_offsets(c, dict.fromkeys(tps, -2), timeout_ms=TIMEOUT_S * 1000)
        end = end_offsets(c, tps, isolation_level=iso, timeout_ms=TIMEOUT_S * 1000)
        return {tp[1]: [(r.offset, int(r.value)) for r in read_range(c, tp, start[tp], end[tp], isolation_level=iso)]
                for tp in tps}  # fmt: skip


def read_log_confluent(bootstrap: str, topic: str, n: int, *, partitions: int = PARTITIONS) -> dict[int, list[tuple[int, int]]]:  # fmt: skip
    """(offset, value) of every record of ``topic`` per partition, read from the start
    by confluent-kafka's consumer (every partition assigned) until ``n`` records came
    (or :data:`TIMEOUT_S` passed) and nothing more comes for a second."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    log: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline, count, quiet_until = time.monotonic() + TIMEOUT_S, 0, None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            log[msg.partition()].append((msg.offset(), int(msg.value())))
            count += 1
            if count >= n and quiet_until is None:
                quiet_until = time.monotonic() + 1.0  # anything written twice comes too
    finally:
        c.close()
    return log


def check_log(out: Outcome, log: dict[int, list[tuple[int, int]]], *, n: int = RECORDS,
              failures: bool = False) -> None:  # fmt: skip
    """Nothing acknowledged lost, nothing written twice, order per partition, no
    failures (see the module docstring); with ``failures``, some records failed (an
    error no client retries) and none of them is in the log."""
    failed = out.failed_values
    if failures:
        assert failed, "no record failed"
    else:
        assert not out.failed, f"{len(out.failed)} records failed: {out.failed[:5]}"
    assert sorted([*out.acked, *failed]) == list(range(n)), f"{n - len(out.acked)} records not acknowledged"
    where = {value: (p, offset) for p, recs in log.items() for offset, value in recs}
    values = [value for recs in log.values() for _, value in recs]
    assert len(values) == len(set(values)), "a record was written twice"
    assert not failed & set(values), "a record that failed is in the log"
    lost = [i for i, at in out.acked.items() if where.get(i) != at]
    assert not lost, f"{len(lost)} acknowledged records not where acknowledged: {[(i, out.acked[i], where.get(i)) for i in lost[:5]]}"  # fmt: skip
    for p, recs in log.items():
        vals = [v for _, v in recs]
        assert vals == sorted(vals), f"partition {p} out of order: {_first_disorder(vals)}"


def check_moves_followed(requests: list[tuple[int, int]], marks: list[int]) -> None:
    """The leader moves made at ``marks`` (indexes into the mock's tracked ``requests``)
    were followed: each was learnt from a Metadata request before the next (after the
    old leaders' NOT_LEADER_OR_FOLLOWER), and the Produce requests after the last went
    to the new leaders, all three brokers (each leads two of the six partitions)."""
    for start, end in zip(marks, [*marks[1:], len(requests)]):
        assert any(key == METADATA for _, key in requests[start:end]), (start, end)
    assert {b for b, key in requests[marks[-1]:] if key == PRODUCE} == {1, 2, 3}


def _first_disorder(vals: list[int]) -> tuple[int, int] | None:
    return next(((a, b) for a, b in itertools.pairwise(vals) if b < a), None)


def tidegate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """A ``tidegate`` CLI command run as a user runs it (a process of this interpreter)."""
    return subprocess.run([sys.executable, "-m", "tidegate", *args], input=stdin, capture_output=True,
                          timeout=TIMEOUT_S, check=False)  # fmt: skip


def wait_for(cond: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.05)
