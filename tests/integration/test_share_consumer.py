"""KIP-932's share groups with a real client: confluent-kafka's ``ShareConsumer``
(librdkafka's share consumer: ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1)
against a real tidegate process.

Each test's group is configured before anyone joins, as confluent-kafka's own share
consumer tests do: ``share.auto.offset.reset=earliest`` through IncrementalAlterConfigs on
the GROUP resource (the default, latest, would skip what was produced before). A :class:`Holders` checker follows which consumer holds which record between its
poll and its acknowledgement: a record handed to a consumer while another still holds it
fails the test.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import AcknowledgeType, KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from tidegate.cli import main
from tidegate.protocol.apis import ApiKey

from .clients import create_topic, produce, set_group_config
from .rawclient import RawClient

pytestmark = pytest.mark.timeout(180)

Rec = tuple[int, int]  # (partition, offset)


def prepared(bootstrap: str, topic: str, group: str, partitions: int, n: int, batch: int = 10) -> None:
    """``topic`` with ``n`` records spread round-robin over its partitions, in batches of
    about ``batch``, and the group's share-partitions starting at the earliest offset."""
    create_topic(bootstrap, topic, partitions, client="raw")
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(n)], client="confluent",
            partition=lambda i: (i // batch) % partitions, flush_every=batch)  # fmt: skip
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})


def alter_start_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    body = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
        {"partition_index": p, "start_offset": o} for p, o in offsets.items()]}]}  # fmt: skip
    with RawClient.connect(bootstrap) as c:
        r = c.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)
    assert r.error_code == 0, r
    assert all(p.error_code == 0 for t in r.responses for p in t.partitions), r


def share_consumer(bootstrap: str, group: str, topic: str, **conf: object) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", "log_level": 0, **conf})  # fmt: skip
    c.subscribe([topic])
    return c


def polled(c: ShareConsumer, timeout: float = 0.5) -> list[Message]:
    msgs = list(c.poll(timeout))
    for m in msgs:
        if m.error():
            raise KafkaException(m.error())
    return msgs


def rec(m: Message) -> Rec:
    return m.partition(), m.offset()


class Holders:
    """Who holds which record (polled, not yet acknowledged): a record polled by one
    consumer while another holds it fails the test; every delivery is counted."""

    def __init__(self) -> None:
        self.holder: dict[Rec, str] = {}
        self.deliveries: Counter[Rec] = Counter()

    def took(self, name: str, msgs: list[Message]) -> None:
        for m in msgs:
            r = rec(m)
            assert self.holder.get(r, name) == name, f"{r} handed to {name} while {self.holder[r]} holds it"
            self.holder[r] = name
            self.deliveries[r] += 1
            assert m.delivery_count() == self.deliveries[r], (r, m.delivery_count(), self.deliveries[r])

    def done(self, msgs: list[Message]) -> None:
        for m in msgs:
            self.holder.pop(rec(m), None)


def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def consume_in_turns(consumers: dict[str, ShareConsumer], holders: Holders, total: int, timeout: float = 60.0) -> None:
    """Each consumer polls in turn and keeps its records while the others poll; then
    all accept theirs and commit, until ``total`` records are accepted."""
    accepted: set[Rec] = set()
    deadline = time.monotonic() + timeout
    while len(accepted) < total:
        assert time.monotonic() < deadline, f"{len(accepted)} of {total} accepted"
        held = {}
        for name, c in consumers.items():
            held[name] = polled(c, 0.2)
            holders.took(name, held[name])
        for name, c in consumers.items():
            for m in held[name]:
                c.acknowledge(m)
                accepted.add(rec(m))
            if held[name]:
                assert all(e is None for e in c.commit_sync().values())
            holders.done(held[name])


@pytest.fixture(scope="module")
def bootstrap(module_broker_factory) -> str:
    return module_broker_factory().bootstrap


def test_three_consumers_share_one_partition_one_holder_per_record(bootstrap):
    prepared(bootstrap, "one", "g-one", 1, 300, batch=5)
    consumers = {n: share_consumer(bootstrap, "g-one", "one", **{"max.poll.records": 10}) for n in "abc"}
    holders = Holders()
    try:
        consume_in_turns(consumers, holders, 300)
    finally:
        for c in consumers.values():
            c.close()
    assert sorted(holders.deliveries) == [(0, o) for o in range(300)]
    assert set(holders.deliveries.values()) == {1}


def test_three_consumers_share_six_partitions(bootstrap):
    prepared(bootstrap, "six", "g-six", 6, 600)
    consumers = {n: share_consumer(bootstrap, "g-six", "six") for n in "abc"}
    holders = Holders()
    try:
        consume_in_turns(consumers, holders, 600)
    finally:
        for c in consumers.values():
            c.close()
    assert len(holders.deliveries) == 600 and set(holders.deliveries.values()) == {1}
    assert {p for p, _ in holders.deliveries} == set(range(6))


def test_implicit_acknowledgement_accepts_what_was_polled(bootstrap):
    prepared(bootstrap, "implicit", "g-implicit", 2, 40)
    c = share_consumer(bootstrap, "g-implicit", "implicit", **{"share.acknowledgement.mode": "implicit"})
    got: list[Rec] = []
    until(lambda: bool(got.extend(rec(m) for m in polled(c))) or len(got) >= 40, "40 records")
    c.commit_sync()  # the last poll's records, accepted
    c.close()
    again = share_consumer(bootstrap, "g-implicit", "implicit")
    try:
        assert [rec(m) for _ in range(6) for m in polled(again)] == []
        produce(bootstrap, "implicit", [b"late"], client="confluent", partition=0)
        late: list[Message] = []
        until(lambda: bool(late.extend(polled(again))) or bool(late), "the late record")
        assert [(m.value(), m.delivery_count()) for m in late] == [(b"late", 1)]
        again.acknowledge(late[0])
        again.commit_sync()
    finally:
        again.close()
    assert sorted(got) == sorted(set(got)) and len(got) == 40


def test_release_redelivers_and_reject_archives(bootstrap):
    prepared(bootstrap, "acks", "g-acks", 1, 10, batch=10)
    c = share_consumer(bootstrap, "g-acks", "acks")
    try:
        first: list[Message] = []
        until(lambda: bool(first.extend(polled(c))) or len(first) >= 10, "10 records")
        kinds = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.REJECT}
        for m in first:
            c.acknowledge(m, kinds[m.offset() % 3])
        assert all(e is None for e in c.commit_sync().values())
        second: list[Message] = []
        until(lambda: bool(second.extend(polled(c))) or len(second) >= 3, "the released records")
        assert [(m.offset(), m.delivery_count()) for m in second] == [(1, 2), (4, 2), (7, 2)]
        for m in second:
            c.acknowledge(m)
        c.commit_sync()
        assert [m.offset() for _ in range(4) for m in polled(c)] == []  # rejected ones never come back
    finally:
        c.close()


def test_the_delivery_limit_archives(bootstrap):
    prepared(bootstrap, "limit", "g-limit", 1, 1)
    c = share_consumer(bootstrap, "g-limit", "limit")
    counts = []
    try:
        for _ in range(5):  # group.share.delivery.count.limit=5
            got: list[Message] = []
            until(lambda got=got: bool(got.extend(polled(c))) or bool(got), "the record again")
            counts.append(got[0].delivery_count())
            c.acknowledge(got[0], AcknowledgeType.RELEASE)
            c.commit_sync()
        assert [m.offset() for _ in range(4) for m in polled(c)] == []
    finally:
        c.close()
    assert counts == [1, 2, 3, 4, 5]


def test_close_releases_what_a_consumer_holds(bootstrap):
    prepared(bootstrap, "close", "g-close", 1, 20, batch=20)
    a = share_consumer(bootstrap, "g-close", "close")
    b = share_consumer(bootstrap, "g-close", "close")
    try:
        held: list[Message] = []
        until(lambda: bool(held.extend(polled(a))) or len(held) >= 20, "20 records held by a")
        assert [m.offset() for m in polled(b)] == []  # a holds them all (30 s locks)
        started = time.monotonic()
        a.close()
        got: list[Message] = []
        until(lambda: bool(got.extend(polled(b))) or len(got) >= 20, "the released records", timeout=15)
        assert time.monotonic() - started < 15  # released by the close, not by a lock expiry
        assert {(m.offset(), m.delivery_count()) for m in got} == {(o, 2) for o in range(20)}
        for m in got:
            b.acknowledge(m)
        b.commit_sync()
    finally:
        b.close()


def test_an_expired_lock_redelivers_to_another_consumer(broker_factory):
    broker = broker_factory({"group.share.record.lock.duration.ms": "1000",
                             "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    bs = broker.bootstrap
    prepared(bs, "expiry", "g-expiry", 1, 5, batch=5)
    a = share_consumer(bs, "g-expiry", "expiry")
    b = share_consumer(bs, "g-expiry", "expiry")
    try:
        held: list[Message] = []
        until(lambda: bool(held.extend(polled(a))) or len(held) >= 5, "5 records held by a")
        taken_at = time.monotonic()
        got: list[Message] = []
        until(lambda: bool(got.extend(polled(b, 0.1))) or len(got) >= 5, "the expired records", timeout=20)
        assert time.monotonic() - taken_at >= 0.9
        assert [(m.offset(), m.delivery_count()) for m in got] == [(o, 2) for o in range(5)]
        for m in held:  # a's lock is gone (b holds them now): its acknowledgement is refused
            a.acknowledge(m)
        (error,) = a.commit_sync().values()
        assert error is not None and "INVALID_RECORD_STATE" in str(error), error
        for m in got:
            b.acknowledge(m)
        assert all(e is None for e in b.commit_sync().values())
    finally:
        a.close()
        b.close()


def test_kill_9_keeps_acknowledged_records_and_delivery_counts(broker_factory):
    """Records 0-29 accepted, 30-39 released once then held again, 40-59 released twice
    then held again (by another consumer) when the broker is killed: after the restart
    30-59 come back with the counts their last written release gave them plus this
    delivery, and nothing accepted is delivered again."""
    broker = broker_factory()
    bs = broker.bootstrap
    prepared(bs, "crash", "g-crash", 1, 60, batch=10)
    a = share_consumer(bs, "g-crash", "crash", **{"socket.timeout.ms": 2000})
    held: list[Message] = []
    until(lambda: bool(held.extend(polled(a))) or len(held) >= 60, "60 records")
    for m in held:
        a.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 30 else AcknowledgeType.RELEASE)
    assert all(e is None for e in a.commit_sync().values())
    again: list[Message] = []
    until(lambda: bool(again.extend(polled(a))) or len(again) >= 30, "30 released records")
    assert {(m.offset(), m.delivery_count()) for m in again} == {(o, 2) for o in range(30, 60)}
    for m in again:
        if m.offset() >= 40:
            a.acknowledge(m, AcknowledgeType.RELEASE)
    a.commit_sync()  # a still holds 30-39
    c = share_consumer(bs, "g-crash", "crash", **{"socket.timeout.ms": 2000})
    third: list[Message] = []
    until(lambda: bool(third.extend(polled(c))) or len(third) >= 20, "40-59 again")
    assert {(m.offset(), m.delivery_count()) for m in third} == {(o, 3) for o in range(40, 60)}
    broker.kill()
    a.close()
    c.close()
    broker.start()
    b = share_consumer(bs, "g-crash", "crash")
    try:
        got: list[Message] = []
        until(lambda: bool(got.extend(polled(b))) or len(got) >= 30, "the in-flight records", timeout=60)
        assert {(m.offset(), m.delivery_count()) for m in got} == (
            {(o, 2) for o in range(30, 40)} | {(o, 3) for o in range(40, 60)})  # fmt: skip
        for m in got:
            b.acknowledge(m)
        b.commit_sync()
        assert [m.offset() for _ in range(4) for m in polled(b)] == []
    finally:
        b.close()


def share_groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["share-groups", "--bootstrap-server", bootstrap, *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_share_groups_command_lists_describes_and_deletes(bootstrap):
    prepared(bootstrap, "cli", "g-cli", 2, 20)
    c = share_consumer(bootstrap, "g-cli", "cli", **{"client.id": "sg-test"})
    seen: set[Rec] = set()

    def poll_and_acknowledge() -> bool:
        for m in polled(c):
            seen.add(rec(m))
            c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 5 else AcknowledgeType.RELEASE)
        return len(seen) >= 20

    until(poll_and_acknowledge, "20 records")
    c.commit_sync()

    code, out, _ = share_groups(bootstrap, "--list")
    assert code == 0 and "g-cli" in out.split()
    code, out, _ = share_groups(bootstrap, "--list", "--state")
    assert out.splitlines()[0].split() == ["GROUP", "STATE"] and ["g-cli", "Stable"] in [
        line.split() for line in out.splitlines()]
    code, out, _ = share_groups(bootstrap, "--describe", "--group", "g-cli", "--members")
    head, row = out.splitlines()[1:]
    assert head.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert row.split()[2:] == ["/127.0.0.1", "sg-test", "2", "cli:0,1"]
    code, out, _ = share_groups(bootstrap, "--describe", "--group", "g-cli", "--state", "--verbose")
    assert out.splitlines()[1].split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH",
                                           "ASSIGNMENT-EPOCH", "#MEMBERS"]  # fmt: skip
    assert out.splitlines()[2].split()[3] == "Stable" and out.splitlines()[2].split()[-1] == "1"
    code, out, _ = share_groups(bootstrap, "--delete", "--group", "g-cli")
    assert "Share group 'g-cli' is not EMPTY." in out
    c.close()

    code, out, _ = share_groups(bootstrap, "--describe", "--group", "g-cli")
    lines = out.splitlines()
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    # each partition: 10 records, 0-4 accepted, 5-9 released (a lag of 5)
    rows = {int(r.split()[2]): r.split()[3:] for r in lines[2:]}
    assert set(rows) == {0, 1} and all(len(v) == 2 for v in rows.values())
    assert sum(int(lag) for _, lag in rows.values()) == 10
    code, _, err = share_groups(bootstrap, "--delete", "--group", "g-cli", "--topic", "cli")  # Kafka refuses it
    assert code == 2 and "Option [delete] does not take the option: [topic]" in err
    assert "g-cli" in share_groups(bootstrap, "--list")[1].split()  # not deleted
    code, out, _ = share_groups(bootstrap, "--delete", "--group", "g-cli")
    assert code == 0 and out.strip() == "Deletion of requested share groups ('g-cli') was successful."
    assert "g-cli" not in share_groups(bootstrap, "--list")[1].split()
    code, out, _ = share_groups(bootstrap, "--describe", "--group", "g-cli")
    assert "Error: Share group 'g-cli' does not exist." in out


def test_the_share_groups_command_resets_and_deletes_offsets(bootstrap):
    """kafka-share-groups.sh's --reset-offsets (only on an empty group; --dry-run prints,
    --execute sets, then a ShareConsumer starts there) and --delete-offsets (then the
    group starts again by share.auto.offset.reset)."""
    prepared(bootstrap, "reset", "g-reset", 1, 20, batch=20)
    c = share_consumer(bootstrap, "g-reset", "reset")
    got: list[Message] = []
    until(lambda: bool(got.extend(polled(c))) or len(got) >= 20, "20 records")
    for m in got:
        c.acknowledge(m)
    assert all(e is None for e in c.commit_sync().values())

    code, out, _ = share_groups(bootstrap, "--reset-offsets", "--group", "g-reset", "--topic", "reset",
                                "--to-earliest")  # fmt: skip
    assert code == 2 and "takes the option: [execute] or [dry-run]" in out + _
    code, out, _ = share_groups(bootstrap, "--reset-offsets", "--group", "g-reset", "--topic", "reset",
                                "--to-earliest", "--execute")  # fmt: skip
    assert code == 1 and "Error: Share group 'g-reset' is not empty." in out
    c.close()

    def reset(*args: str) -> list[list[str]]:
        code, out, err = share_groups(bootstrap, "--reset-offsets", "--group", "g-reset", *args)
        assert code == 0, (out, err)
        lines = [line.split() for line in out.splitlines() if line.strip()]
        assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        return lines[1:]

    def start_offset() -> str:
        rows = share_groups(bootstrap, "--describe", "--group", "g-reset")[1].splitlines()[2:]
        return rows[0].split()[3]

    # the persisted start offset (the SPSO's move past the accepted records is written
    # with the share-partition's next write; the lag says they are done)
    current = start_offset()
    assert reset("--topic", "reset", "--to-offset", "5", "--dry-run") == [["g-reset", "reset", "0", "5"]]
    assert start_offset() == current  # a dry run changes nothing
    assert reset("--all-topics", "--to-latest", "--dry-run") == [["g-reset", "reset", "0", "20"]]
    assert reset("--to-latest", "--dry-run") == [["g-reset", "reset", "0", "20"]]  # no scope: all, as Kafka
    assert reset("--all-topics", "--to-current", "--dry-run") == [["g-reset", "reset", "0", current]]
    assert reset("--topic", "reset:0", "--to-offset", "500", "--dry-run") == [["g-reset", "reset", "0", "20"]]
    assert reset("--topic", "reset", "--to-datetime", "2000-01-01T00:00:00.000Z", "--dry-run") == [
        ["g-reset", "reset", "0", "0"]]
    assert reset("--topic", "reset", "--to-offset", "15", "--execute") == [["g-reset", "reset", "0", "15"]]
    assert start_offset() == "15"
    c = share_consumer(bootstrap, "g-reset", "reset")
    again: list[Message] = []
    until(lambda: bool(again.extend(polled(c))) or len(again) >= 5, "records 15-19")
    assert [(m.offset(), m.delivery_count()) for m in again] == [(o, 1) for o in range(15, 20)]
    for m in again:
        c.acknowledge(m)
    c.commit_sync()

    code, out, _ = share_groups(bootstrap, "--delete-offsets", "--group", "g-reset", "--topic", "reset")
    assert code == 1 and "Error: " in out  # the group has a member
    c.close()
    code, out, _ = share_groups(bootstrap, "--delete-offsets", "--group", "g-reset", "--topic", "reset",
                                "--topic", "no-such-topic")  # fmt: skip
    rows = [line.split(maxsplit=1) for line in out.splitlines() if line.strip()]
    assert rows[0] == ["TOPIC", "STATUS"] and rows[2] == ["reset", "Successful"], out
    assert rows[1][0] == "no-such-topic" and rows[1][1].startswith("Error: "), out
    assert "has no offset information" in share_groups(bootstrap, "--describe", "--group", "g-reset")[1]
    c = share_consumer(bootstrap, "g-reset", "reset")  # earliest again: all 20, first deliveries
    try:
        fresh: list[Message] = []
        until(lambda: bool(fresh.extend(polled(c))) or len(fresh) >= 20, "all 20 records again")
        assert sorted((m.offset(), m.delivery_count()) for m in fresh) == [(o, 1) for o in range(20)]
        for m in fresh:
            c.acknowledge(m)
        c.commit_sync()
    finally:
        c.close()
    code, out, _ = share_groups(bootstrap, "--delete-offsets", "--group", "g-none", "--topic", "reset")
    assert code == 1 and "Error: " in out


def test_alter_share_group_offsets_sets_where_a_group_starts(bootstrap):
    """AlterShareGroupOffsets on a group that does not exist yet: its share-partitions
    start where it says (here, past the first 15 records), whatever
    share.auto.offset.reset says."""
    create_topic(bootstrap, "altered", 1, client="raw")
    produce(bootstrap, "altered", [f"v{i}".encode() for i in range(20)], client="confluent", flush_every=20)
    alter_start_offsets(bootstrap, "g-altered", "altered", {0: 15})
    c = share_consumer(bootstrap, "g-altered", "altered")
    try:
        got: list[Message] = []
        until(lambda: bool(got.extend(polled(c))) or len(got) >= 5, "records 15-19")
        assert [m.offset() for m in got] == list(range(15, 20))
        for m in got:
            c.acknowledge(m)
        c.commit_sync()
    finally:
        c.close()


def test_group_configs_are_described_and_refused_as_kafka_refuses_them(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    set_group_config(bootstrap, "g-configs", {"share.record.lock.duration.ms": "20000"})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "g-configs")]).values()
    configs = future.result(10)
    assert configs["share.record.lock.duration.ms"].value == "20000"
    assert configs["share.auto.offset.reset"].value == "latest" and configs["share.auto.offset.reset"].is_default
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        set_group_config(bootstrap, "g-configs", {"share.record.lock.duration.ms": "500"})
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        set_group_config(bootstrap, "g-configs", {"share.auto.offset.reset": "never"})


def test_read_committed_skips_aborted_transactions_and_waits_for_open_ones(bootstrap):
    create_topic(bootstrap, "txn", 1, client="raw")
    set_group_config(bootstrap, "g-txn", {"share.auto.offset.reset": "earliest",
                                          "share.isolation.level": "read_committed"})  # fmt: skip
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-txn"})
    p.init_transactions(10)
    for outcome in ("commit", "abort", "open"):
        p.begin_transaction()
        for i in range(3):
            p.produce("txn", f"{outcome}-{i}".encode(), partition=0)
        p.flush(10)
        if outcome == "commit":
            p.commit_transaction(10)
        elif outcome == "abort":
            p.abort_transaction(10)
    c = share_consumer(bootstrap, "g-txn", "txn")
    try:
        got: list[Message] = []

        def poll_and_accept() -> bool:
            for m in polled(c):
                got.append(m)
                c.acknowledge(m)
            return len(got) >= 3

        until(poll_and_accept, "the committed records")
        assert [m.value() for m in got] == [b"commit-0", b"commit-1", b"commit-2"]
        for _ in range(4):  # the open transaction holds the rest back
            poll_and_accept()
        assert len(got) == 3
        p.commit_transaction(10)
        until(lambda: poll_and_accept() and len(got) >= 6, "the records of the transaction once committed")
        assert [m.value() for m in got[3:]] == [b"open-0", b"open-1", b"open-2"]
        c.commit_sync()
    finally:
        c.close()


def test_a_partition_added_while_consuming_is_assigned_and_read(bootstrap):
    prepared(bootstrap, "grow", "g-grow", 1, 3, batch=3)
    c = share_consumer(bootstrap, "g-grow", "grow")
    try:
        got: list[Rec] = []

        def poll_and_accept() -> bool:
            for m in polled(c):
                got.append(rec(m))
                c.acknowledge(m)
            return False

        until(lambda: poll_and_accept() or len(got) >= 3, "partition 0's records")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_partitions([NewPartitions("grow", 2)]).values():
            future.result(10)
        produce(bootstrap, "grow", [b"new"], client="confluent", partition=1)
        until(lambda: poll_and_accept() or (1, 0) in got, "the new partition's record", timeout=40)
        assert sorted(got) == [(0, 0), (0, 1), (0, 2), (1, 0)]
        c.commit_sync()
    finally:
        c.close()


def test_a_topic_created_again_starts_afresh(bootstrap):
    """A share-partition is keyed by topic id: the topic deleted and created again under
    its name starts with no state (the new records from offset 0, delivered once)."""
    prepared(bootstrap, "again", "g-again", 1, 3, batch=3)
    c = share_consumer(bootstrap, "g-again", "again")
    try:
        got: list[tuple[bytes, int, int]] = []

        def poll_and_accept() -> bool:
            for m in polled(c):
                got.append((m.value(), m.offset(), m.delivery_count()))
                c.acknowledge(m)
            return False

        until(lambda: poll_and_accept() or len(got) >= 3, "the first topic's records")
        c.commit_sync()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.delete_topics(["again"]).values():
            future.result(10)
        create_topic(bootstrap, "again", 1, client="raw")
        produce(bootstrap, "again", [b"fresh-0", b"fresh-1"], client="confluent", partition=0)
        until(lambda: poll_and_accept() or len(got) >= 5, "the new topic's records", timeout=60)
        assert got[3:] == [(b"fresh-0", 0, 1), (b"fresh-1", 1, 1)]
        c.commit_sync()
    finally:
        c.close()
