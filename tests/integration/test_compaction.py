"""Log compaction end to end: real clients produce updates and tombstones to a compacted
topic; once the broker's log cleaner ran, a consumer reads exactly the latest value of
every key (docs/compaction.md)."""

from __future__ import annotations

import time

import psutil
import pytest

from tests.conftest import metrics_overrides, wait_until

from .clients import Rec, configs_cli, consume, create_topic, produce, sample, scrape, segment_count


def log_bytes(broker, topic: str) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-0").glob("*.log"))


COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}

#: a compacted topic the cleaner leaves alone (its records are all younger than the lag; a
#: ``min.cleanable.dirty.ratio`` would not do: a log never cleaned is 100 % dirty)
HELD = {"min.compaction.lag.ms": "3600000"}


def release(bootstrap: str, topic: str) -> None:
    """Let the cleaner at a topic created with :data:`HELD` (the lag back to Kafka's 0)."""
    alter = configs_cli(bootstrap, "--entity-type", "topics", "--entity-name", topic, "--alter",
                        "--delete-config", "min.compaction.lag.ms")  # fmt: skip
    assert alter.returncode == 0, alter.stderr


@pytest.fixture(scope="module")
def cleaning_broker(module_broker_factory):
    return module_broker_factory({"log.cleaner.backoff.ms": "100", **metrics_overrides()})


def updates(n: int, nkeys: int, tag: str) -> tuple[list[Rec], dict[bytes, bytes | None]]:
    recs = []
    latest: dict[bytes, bytes | None] = {}
    for i in range(n):
        key = b"key-%d" % (i % nkeys)
        value = None if i % 7 == 3 else (b"%s-%d-" % (tag.encode(), i)) + b"x" * 100
        recs.append(Rec(key, value))
        latest[key] = value
    return recs, latest


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_consumers_read_the_latest_value_per_key_after_cleaning(cleaning_broker, client):
    bootstrap = cleaning_broker.bootstrap
    # held back until the records are in (a clean while they arrive would merge the
    # segments the check below counts)
    topic = create_topic(bootstrap, configs={**COMPACTED, **HELD}, client="confluent", prefix="compact")
    recs, latest = updates(600, 15, client)
    produce(bootstrap, topic, recs, client=client, flush_every=20)
    # one more record so that everything above sits in inactive (cleanable) segments
    produce(bootstrap, topic, [Rec(b"key-0", b"last")], client=client)
    latest[b"key-0"] = b"last"
    assert segment_count(cleaning_broker.data_dir, topic) > 5
    assert f"/{topic}-0', " not in cleaning_broker.log_text()  # not cleaned while held
    release(bootstrap, topic)
    # at least 100 bytes of value per live record were written
    bytes_written = sum(100 for r in recs if r.value is not None)

    def compacted() -> bool:
        got = consume(bootstrap, topic, 1, client=client, timeout=5, settle=0.3)
        return len(got) < 100

    wait_until(compacted, 30, what="the log cleaner compacting the topic", interval=0.3)
    got = consume(bootstrap, topic, 10_000, client=client, timeout=5, settle=0.5)
    offsets = [g.offset for g in got]
    assert offsets == sorted(set(offsets))  # offsets kept, in order, no duplicates
    seen: dict[bytes, bytes | None] = {}
    for g in got:
        assert g.key is not None
        seen[g.key] = g.value
    assert seen == {k: v for k, v in latest.items() if k in seen}
    # tombstoned keys are either still there as a tombstone or gone; live keys all there
    assert {k for k, v in latest.items() if v is not None} <= set(seen)
    assert log_bytes(cleaning_broker, topic) < bytes_written / 4
    metrics = scrape(cleaning_broker.metrics_url)
    recopy = sample(metrics, "kafka_log_logcleaner_cleaner_recopy_percent")
    assert recopy is not None and 0 < recopy < 50  # most bytes of a clean were dropped
    assert sample(metrics, "kafka_log_logcleanermanager_uncleanable_partitions_count") == 0
    since = sample(metrics, "kafka_log_logcleanermanager_time_since_last_run_ms")
    assert since is not None and since < 5_000


def test_a_compacted_topic_refuses_records_without_a_key(cleaning_broker):
    bootstrap = cleaning_broker.bootstrap
    topic = create_topic(bootstrap, configs=COMPACTED, client="confluent", prefix="compact")
    errors: list = []
    produce(bootstrap, topic, [Rec(None, b"no key")], client="confluent", errors=errors,
            conf={"retries": 0, "enable.idempotence": False})  # fmt: skip
    assert errors and "INVALID_RECORD" in str(errors[0]).upper().replace(" ", "_")


@pytest.mark.slow
def test_a_transactional_producer_on_a_compacted_topic(cleaning_broker):
    """Committed and aborted updates (confluent-kafka): once cleaned, read_committed and
    read_uncommitted consumers both read exactly the latest committed value per key."""
    from .clients import TransactionalProducer

    bootstrap = cleaning_broker.bootstrap
    topic = create_topic(bootstrap, configs=COMPACTED, client="confluent", prefix="compact")
    p = TransactionalProducer("confluent", bootstrap, f"txn-{topic}")
    latest: dict[bytes, bytes] = {}
    try:
        p.init()
        for t in range(30):
            p.begin()
            for k in range(5):
                p.send(topic, b"t%d-" % t + b"y" * 80, key=b"key-%d" % k)
            if t % 3 == 2:
                p.abort()
            else:
                p.commit()
                latest.update({b"key-%d" % k: b"t%d-" % t + b"y" * 80 for k in range(5)})
    finally:
        p.close()
    # unrelated keys push the transactions out of the active segment
    filler = [Rec(b"filler-%d" % i, b"z" * 100) for i in range(60)]
    produce(bootstrap, topic, filler, client="confluent", flush_every=10)
    latest.update({r.key: r.value for r in filler if r.key is not None and r.value is not None})

    def read(isolation: str) -> dict[bytes, bytes | None]:
        got = consume(bootstrap, topic, 10_000, client="confluent", timeout=3, settle=0.5,
                      conf={"isolation.level": isolation})  # fmt: skip
        out: dict[bytes, bytes | None] = {}
        for g in got:
            assert g.key is not None
            out[g.key] = g.value
        return out

    def aborted_gone() -> bool:
        return all(not v.startswith(b"t%d-" % t) for v in read("read_uncommitted").values()
                   for t in range(2, 30, 3) if v is not None)  # fmt: skip

    wait_until(aborted_gone, 30, what="the cleaner removing the aborted updates", interval=0.5)
    assert read("read_committed") == latest
    assert read("read_uncommitted") == latest


@pytest.mark.slow
def test_kill_9_while_the_cleaner_works_loses_no_latest_value(broker_factory):
    """kill -9 a few times while the cleaner is busy with a large dirty log: every
    restart completes or discards the interrupted swap (no .cleaned/.swap left) and the
    latest value of every key is there."""
    b = broker_factory({"log.cleaner.backoff.ms": "50"})
    # not cleanable while it fills, then made cleanable just before the kills
    configs = {**COMPACTED, **HELD, "segment.bytes": "65536"}
    topic = create_topic(b.bootstrap, configs=configs, client="confluent", prefix="compact")
    recs, latest = updates(20_000, 300, "kill")
    produce(b.bootstrap, topic, recs, client="confluent", linger_ms=20)
    produce(b.bootstrap, topic, [Rec(b"key-0", b"last")], client="confluent")
    latest[b"key-0"] = b"last"
    release(b.bootstrap, topic)
    workers_seen = 0
    for delay in (1.0, 1.2, 1.5, 2.0):  # the maintenance tick is 1 s: kills around the clean
        time.sleep(delay)
        assert b.proc is not None
        workers = psutil.Process(b.proc.pid).children()  # the cleaner's worker process
        workers_seen += len(workers)
        b.kill()
        # the worker dies with the broker (it must not write into the restarted one's logs)
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert alive == []
        b.start()
        got = consume(b.bootstrap, topic, 30_000, client="confluent", timeout=5, settle=0.5)
        seen = {g.key: g.value for g in got}
        assert {k: v for k, v in seen.items() if v is not None} == {
            k: v for k, v in latest.items() if v is not None
        }
    wait_until(lambda: "cleaned Log(" in b.log_text(), 30, what="a completed clean")
    assert workers_seen > 0  # the kills hit while the log was being cleaned in the worker
