"""``tidegate consumer-groups`` (kafka-consumer-groups.sh) against a live broker with a
group made by a real client (confluent-kafka), and against the peer broker where it has
the group APIs: list, describe (offsets and lag, members, state), reset offsets (dry run,
execute, each scenario), delete offsets, delete groups, Kafka's columns and messages."""

from __future__ import annotations

import re
import time

from click.testing import CliRunner
from confluent_kafka import Consumer, Producer

from tests.conftest import metrics_overrides, wait_until
from tidegate.cli import main
from tidegate.cli.group_tools import parse_datetime, parse_duration
from tidegate.client import KafkaClient
from tidegate.client.admin import create_topic


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["consumer-groups", "--bootstrap-server", bootstrap, *args])
    return result.exit_code, result.stdout, result.stderr


def fill(bootstrap: str, topic: str, per_partition: int, partitions: int = 3) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition * partitions):
        p.produce(topic, b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, topic: str, **conf: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": "cg-test", **conf})  # fmt: skip
    c.subscribe([topic])
    return c


def consume(c: Consumer, n: int, timeout: float = 30.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    return got


def test_list_describe_reset_and_delete(broker):
    b = broker.bootstrap
    with KafkaClient(b) as client:
        create_topic(client, "cg-orders", 3)
    fill(b, "cg-orders", 10)
    c = consumer(b, "cg-app", "cg-orders")
    assert len(consume(c, 30)) == 30
    c.commit(asynchronous=False)
    fill(b, "cg-orders", 2)  # 2 more per partition: a lag of 2 each

    code, out, _ = groups(b, "--list")
    assert code == 0 and "cg-app" in out.split()
    code, out, _ = groups(b, "--list", "--state")
    assert code == 0 and out.splitlines()[0] == f"{'GROUP':<25} {'STATE':<20}"
    assert f"{'cg-app':<25} {'Stable':<20}" in out.splitlines()
    assert "cg-app" not in groups(b, "--list", "--state", "Empty")[1]

    code, out, err = groups(b, "--describe", "--group", "cg-app")
    lines = out.splitlines()
    assert code == 0 and err == "" and lines[0] == ""
    assert re.fullmatch(r"GROUP {11}TOPIC {11}PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG {13}CONSUMER-ID +"
                        r"HOST {12}CLIENT-ID", lines[1]), lines[1]
    rows = [line.split() for line in lines[2:]]
    assert [r[:6] for r in rows] == [["cg-app", "cg-orders", str(p), "10", "12", "2"] for p in range(3)]
    assert all(r[6].startswith("cg-test-") and r[7] == "/127.0.0.1" and r[8] == "cg-test" for r in rows)

    code, out, _ = groups(b, "--describe", "--group", "cg-app", "--members", "--verbose")
    head, row = out.splitlines()[1:]
    assert head.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                            "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
    assert row.split()[2:] == ["/127.0.0.1", "cg-test", "3", "-", "cg-orders:0,1,2", "-", "-"]
    code, out, _ = groups(b, "--describe", "--group", "cg-app", "--state")
    host, port = b.split(":")
    assert out.splitlines()[2].split() == ["cg-app", f"{host}:{port}", "(1)", "range", "Stable", "1"]

    # an active group's offsets are not reset
    code, out, _ = groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders", "--to-earliest",
                          "--execute")  # fmt: skip
    assert "Error: Assignments can only be reset if the group 'cg-app' is inactive, but the current state is " \
           "Stable." in out
    c.close()
    wait_until(lambda: "Empty" in groups(b, "--describe", "--group", "cg-app", "--state")[1], 30,
               what="the group to become empty")  # fmt: skip

    code, out, err = groups(b, "--describe", "--group", "cg-app")
    assert err == "\nConsumer group 'cg-app' has no active members.\n"
    assert [line.split()[3:] for line in out.splitlines()[2:]] == [["10", "12", "2", "-", "-", "-"]] * 3

    # dry run (the default) prints the plan and changes nothing
    code, out, _ = groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders", "--to-earliest")
    assert out == ("\nGROUP           TOPIC           PARTITION  NEW-OFFSET\n"
                   + "".join(f"cg-app          cg-orders       {p:<10} 0\n" for p in range(3)))  # fmt: skip
    assert broker.committed("cg-app") == {("cg-orders", p): 10 for p in range(3)}
    groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders:1", "--to-earliest", "--execute")
    assert broker.committed("cg-app")[("cg-orders", 1)] == 0
    groups(b, "--reset-offsets", "--group", "cg-app", "--all-topics", "--shift-by", "-3", "--execute")
    assert broker.committed("cg-app") == {("cg-orders", 0): 7, ("cg-orders", 1): 0, ("cg-orders", 2): 7}
    groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders", "--to-offset", "1000", "--execute")
    assert set(broker.committed("cg-app").values()) == {12}  # kept within the log
    groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders",
           "--to-datetime", "2000-01-01T00:00:00.000Z", "--execute")  # fmt: skip
    assert set(broker.committed("cg-app").values()) == {0}
    code, out, _ = groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders:2",
                          "--by-duration", "PT0S", "--execute")  # fmt: skip
    assert "Warn: Partition 2 from topic cg-orders is empty. Falling back to latest known offset." in out
    assert broker.committed("cg-app")[("cg-orders", 2)] == 12
    groups(b, "--reset-offsets", "--group", "cg-app", "--topic", "cg-orders:2", "--to-offset", "5", "--execute")

    # a consumer of the group starts where the reset put it
    again = consumer(b, "cg-app", "cg-orders")
    got = consume(again, 12 + 12 + 7)
    assert sorted((m.partition(), m.offset()) for m in got)[:1] == [(0, 0)]
    assert min(m.offset() for m in got if m.partition() == 2) == 5
    again.close()
    wait_until(lambda: "Empty" in groups(b, "--describe", "--group", "cg-app", "--state")[1], 30,
               what="the group to become empty")  # fmt: skip

    code, out, _ = groups(b, "--delete-offsets", "--group", "cg-app", "--topic", "cg-orders:0")
    assert out == ("Request succeeded for deleting offsets from group cg-app.\n\n"
                   f"{'TOPIC':<15} {'PARTITION':<10} {'STATUS':<15}\n{'cg-orders':<15} {'0':<10} {'Successful':<15}\n")
    assert ("cg-orders", 0) not in broker.committed("cg-app")

    code, _, err = groups(b, "--delete", "--group", "cg-app", "--topic", "cg-orders")  # Kafka refuses it
    assert code == 2 and "The consumer does not support topic-specific offset deletion" in err
    assert "cg-app" in groups(b, "--list")[1].split()  # not deleted
    code, out, _ = groups(b, "--delete", "--group", "cg-app", "--group", "cg-missing")
    assert out == ("\nError: Deletion of some consumer groups failed:\n"
                   "* Group 'cg-missing' could not be deleted due to: "
                   "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist.\n"
                   "\nThese consumer groups were deleted successfully: 'cg-app'\n")
    assert groups(b, "--describe", "--group", "cg-app") == (
        0, "\nError: Consumer group 'cg-app' does not exist.\n", "")


def test_consumer_protocol_groups(broker_factory):
    """KIP-848 groups as kafka-consumer-groups.sh 4.x shows them: two confluent-kafka
    consumers with group.protocol=consumer (one static) beside a classic group; --list
    --type, the offsets view, --members --verbose with member epochs and target
    assignments, --state with the server-side assignor and (verbose) the epochs; and the
    broker's group-coordinator-metrics on one Prometheus scrape."""
    import urllib.request

    broker = broker_factory({**metrics_overrides(), "group.consumer.min.heartbeat.interval.ms": "200",
                             "group.consumer.heartbeat.interval.ms": "200"})
    b = broker.bootstrap
    with KafkaClient(b) as client:
        create_topic(client, "kip848", 4)
    fill(b, "kip848", 5, partitions=4)
    classic = consumer(b, "cg-classic", "kip848")
    assert len(consume(classic, 20)) == 20
    modern = [consumer(b, "cg-848", "kip848", **{"group.protocol": "consumer"}),
              consumer(b, "cg-848", "kip848", **{"group.protocol": "consumer", "group.instance.id": "static-1"})]

    got: list = []

    def stable() -> bool:
        for c in modern:
            got.extend(m for m in c.consume(100, 0.1) if not m.error())
        out = groups(b, "--describe", "--group", "cg-848", "--members")[1]
        return len(got) == 20 and "Stable" in groups(b, "--describe", "--group", "cg-848", "--state")[1] \
            and sorted(line.split()[-1] for line in out.splitlines()[2:]) == ["2", "2"]

    wait_until(stable, 60, what=lambda: f"both consumer-protocol members to own two partitions ({len(got)} read): "
               + groups(b, "--describe", "--group", "cg-848", "--members", "--verbose")[1])  # fmt: skip
    for c in modern:
        c.commit(asynchronous=False)

    code, out, _ = groups(b, "--list", "--type")
    assert code == 0 and out.splitlines()[0] == f"{'GROUP':<25} {'TYPE':<20}"
    assert f"{'cg-848':<25} {'Consumer':<20}" in out.splitlines()
    assert f"{'cg-classic':<25} {'Classic':<20}" in out.splitlines()
    code, out, _ = groups(b, "--list", "--type", "consumer", "--state")
    assert out.splitlines() == [f"{'GROUP':<25} {'TYPE':<20} {'STATE':<20}",
                                f"{'cg-848':<25} {'Consumer':<20} {'Stable':<20}"]
    assert groups(b, "--list", "--type", "classic")[1].split() == ["GROUP", "TYPE", "cg-classic", "Classic"]
    code, out, err = groups(b, "--list", "--type", "share")
    assert code == 2 and "Invalid types list 'share'. Valid types are: Classic, Consumer" in err

    # the offsets and lag: each of the four partitions with the member that owns it
    code, out, err = groups(b, "--describe", "--group", "cg-848")
    rows = [line.split() for line in out.splitlines()[2:]]
    assert code == 0 and err == ""
    assert sorted(r[1:6] for r in rows) == [["kip848", str(p), "5", "5", "0"] for p in range(4)]
    assert {r[8] for r in rows} == {"cg-test"} and len({r[6] for r in rows}) == 2
    code, out, _ = groups(b, "--describe", "--group", "cg-848", "--verbose")
    head, *rows = [line.split() for line in out.splitlines()[1:]]
    assert head[:5] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET"]
    assert sorted(r[1:5] for r in rows) == [["kip848", str(p), "0", "5"] for p in range(4)]  # librdkafka's epoch

    code, out, _ = groups(b, "--describe", "--group", "cg-848", "--members", "--verbose")
    head, *members = out.splitlines()[1:]
    assert head.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
    cells = [m.split() for m in members]
    assert sorted(len(c) for c in cells) == [9, 10]  # the dynamic member has no instance id
    static = next(c for c in cells if len(c) == 10)
    assert static[2] == "static-1"
    for c in cells:
        epoch, current, target_epoch, target = c[-4:]
        assert c[-5] == "2" and current == target and current.startswith("kip848:")
        assert int(epoch) == int(target_epoch) >= 2
    code, out, _ = groups(b, "--describe", "--group", "cg-848", "--state", "--verbose")
    head, row = out.splitlines()[1:]
    assert head.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                            "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]  # fmt: skip
    cells = row.split()
    assert cells[0] == "cg-848" and cells[3:5] == ["uniform", "Stable"] and cells[-1] == "2"
    assert int(cells[5]) == int(cells[6]) >= 2
    code, out, _ = groups(b, "--reset-offsets", "--group", "cg-848", "--topic", "kip848", "--to-earliest",
                          "--execute")  # fmt: skip
    assert "Error: Assignments can only be reset if the group 'cg-848' is inactive, but the current state is " \
           "Stable." in out
    code, out, _ = groups(b, "--describe", "--group", "cg-classic", "--state", "--verbose")
    assert out.splitlines()[2].split()[3:] == ["range", "Stable", "-", "-", "1"]

    with urllib.request.urlopen(broker.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    prefix = "kafka_server_group_coordinator_metrics_"
    for line in (f'{prefix}group_count{{protocol="consumer"}} 1.0', f'{prefix}group_count{{protocol="classic"}} 1.0',
                 f'{prefix}consumer_group_count{{state="stable"}} 1.0',
                 f'{prefix}classic_group_count{{state="stable"}} 1.0',
                 'tidegate_group_members{group="cg-848",protocol="consumer",state="stable"} 2.0'):
        assert line in text.splitlines(), line
    samples = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln.startswith(prefix)}
    assert samples[f"{prefix}consumer_group_rebalance_total"] >= 2  # created, then the second member
    assert samples[f"{prefix}offset_commit_total"] >= 4

    # tidegate top lists both groups
    from tests.integration.test_metrics import run_top

    result = run_top("--metrics-url", broker.metrics_url)
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("== Groups\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0].split() == ["group", "type", "state", "epoch", "members", "in-flight", "locked"]
    rows = {line.split()[0]: line.split()[1:] for line in section[2:-1]}
    assert rows["cg-848"][:2] == ["consumer", "Stable"] and rows["cg-848"][3:] == ["2", "-", "-"]
    assert rows["cg-classic"] == ["classic", "Stable", "1", "1", "-", "-"]
    assert section[-1].startswith("1 consumer, 0 share, 1 classic group(s); rebalances/s:")
    for c in (*modern, classic):
        c.close()


def test_usage_errors_exit_2(broker):
    code, _, err = groups(broker.bootstrap, "--list", "--delete", "--all-groups")
    assert code == 2 and "Command must include exactly one action" in err
    code, _, err = groups(broker.bootstrap, "--reset-offsets", "--group", "g", "--to-earliest")
    assert code == 2 and "One of the reset scopes should be defined: --all-topics, --topic." in err
    code, _, err = groups(broker.bootstrap, "--list", "--state", "Sleepy")
    assert code == 2 and "Invalid state list 'Sleepy'" in err


def test_datetime_and_duration_parse_as_kafka():
    assert parse_datetime("2026-11-25T10:00:00.000Z") == 1795600800000
    assert parse_datetime("2026-11-25T11:00:00.000+01:00") == 1795600800000
    assert parse_datetime("2026-11-25T09:00:00-0100") == 1795600800000
    assert parse_duration("PT1H30M") == 5_400_000
    assert parse_duration("P1DT0.5S") == 86_400_500
    assert parse_duration("-PT1M") == -60_000


def test_against_the_peer_broker(peer_bootstrap):
    """The peer broker (Tansu): the tool lists a group made there and describes its
    members and its offsets (OffsetFetch v8+, as Kafka's admin client sends it: Tansu
    answers the older versions' "all topics" with an empty body; the log end offset
    checked against a Fetch, as Tansu's ListOffsets LATEST can be short of it)."""
    b = peer_bootstrap
    fill(b, "cg-peer", 2, partitions=1)
    c = consumer(b, "cg-peer-app", "cg-peer")
    try:
        assert len(consume(c, 2, timeout=60)) == 2
        c.commit(asynchronous=False)  # Tansu lists a group once it has offsets
        code, out, err = groups(b, "--list")
        assert code == 0, err
        assert "cg-peer-app" in out.split()
        code, out, err = groups(b, "--describe", "--group", "cg-peer-app", "--members")
        assert code == 0, err
        (row,) = [line.split() for line in out.splitlines()[2:]]
        # (Tansu answers DescribeGroups without the member's host, client id or assignment)
        assert row[0] == "cg-peer-app" and row[1].startswith("cg-test-"), row
        code, out, err = groups(b, "--describe", "--group", "cg-peer-app")
        assert code == 0, err
        (row,) = [line.split() for line in out.splitlines()[2:]]
        assert row[:6] == ["cg-peer-app", "cg-peer", "0", "2", "2", "0"], row
    finally:
        c.close()
