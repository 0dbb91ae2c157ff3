"""Admin APIs (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
DescribeCluster, Metadata auto-creation) through confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient, against a real tidegate process.
"""

from __future__ import annotations

import os
import uuid
import warnings

import pytest

# kafka-python loads its protocol schemas with importlib.resources' deprecated API.
warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from confluent_kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaProducer
from kafka import errors as kerr
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType

from tests.conftest import wait_until

from .clients import admin_client, configs_cli, consume, create_topic, new_consumer, produce

pytestmark = pytest.mark.timeout(60)

BROKER_ID = "1"


def cfk_admin(broker) -> AdminClient:
    return admin_client(broker.bootstrap, client="confluent")


@pytest.fixture
def kp_admin(broker):
    admin = admin_client(broker.bootstrap, client="kafka-python")
    yield admin
    admin.close()


def cfk_create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict:
    """Create topics; returns {name: None or the KafkaError code}."""
    futures = admin.create_topics(list(topics), validate_only=validate_only, request_timeout=10)
    out = {}
    for name, fut in futures.items():
        try:
            fut.result(10)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc.args[0].code()
    return out


def cfk_error(fut) -> int | None:
    try:
        fut.result(10)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def cfk_topic_configs(admin: AdminClient, name: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res], request_timeout=10)[res].result(10)


def cfk_partitions(admin: AdminClient, name: str) -> int:
    return len(admin.list_topics(name, timeout=10).topics[name].partitions)


def kp_codes(result: dict) -> dict:
    return {t["name"]: t["error_code"] for t in result["topics"]}


# -- CreateTopics / DescribeConfigs ----------------------------------------------------


def test_create_with_configs_and_describe_them_confluent(broker):
    admin = cfk_admin(broker)
    configs = {
        "retention.ms": "3600000",
        "segment.bytes": "1048576",
        "message.timestamp.type": "LogAppendTime",
    }
    assert cfk_create(admin, NewTopic("cfg-c", 2, 1, config=configs)) == {"cfg-c": None}
    entries = cfk_topic_configs(admin, "cfg-c")
    for key, value in configs.items():
        assert entries[key].value == value
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert not entries[key].is_default
    for key, value in {
        "retention.bytes": "-1",
        "cleanup.policy": "delete",
        "max.message.bytes": "1048588",
    }.items():
        assert entries[key].value == value
        assert entries[key].source == ConfigSource.DEFAULT_CONFIG.value
        assert entries[key].is_default
    assert cfk_partitions(admin, "cfg-c") == 2


def test_create_with_configs_and_describe_them_kafka_python(kp_admin):
    result = kp_admin.create_topics(
        {
            "cfg-k": {
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": {"retention.ms": "123456"},
            }
        }
    )
    [topic] = result["topics"]
    assert topic["error_code"] == 0
    # CreateTopics v5+ returns the resulting configs too.
    assert topic["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic["configs"]["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

    described = kp_admin.describe_configs(
        [KConfigResource(ConfigResourceType.TOPIC, "cfg-k")], config_filter="all"
    )["topic"]["cfg-k"]
    assert described["retention.ms"]["value"] == "123456"
    assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert described["segment.bytes"]["value"] == "1073741824"
    assert described["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert described["message.timestamp.type"]["value"] == "CreateTime"
    # The default filter ("modified") keeps only what the topic overrides.
    modified = kp_admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-k")])
    assert set(modified["topic"]["cfg-k"]) == {"retention.ms"}
    # Asking for named keys returns just those.
    only = kp_admin.describe_configs(
        [KConfigResource(ConfigResourceType.TOPIC, "cfg-k", configs={"segment.ms": None})],
        config_filter="all",
    )
    assert set(only["topic"]["cfg-k"]) == {"segment.ms"}


def test_topic_defaults_from_broker_config_are_static(broker_factory):
    b = broker_factory({"log.retention.ms": "7200000"})
    admin = cfk_admin(b)
    assert cfk_create(admin, NewTopic("static", 1, 1)) == {"static": None}
    entry = cfk_topic_configs(admin, "static")["retention.ms"]
    assert (entry.value, entry.source) == ("7200000", ConfigSource.STATIC_BROKER_CONFIG.value)


def test_describe_broker_configs(broker, kp_admin):
    admin = cfk_admin(broker)
    res = ConfigResource(ResourceType.BROKER, BROKER_ID)
    entries = admin.describe_configs([res], request_timeout=10)[res].result(10)
    assert entries["log.segment.bytes"].value == "1073741824"
    assert entries["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["socket.request.max.bytes"].value == "104857600"
    # The fixture starts the broker with --override listeners=... and log.dirs=...
    assert entries["listeners"].value == f"PLAINTEXT://{broker.bootstrap}"
    assert entries["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["log.dirs"].value == str(broker.data_dir)

    described = kp_admin.describe_configs(
        [KConfigResource(ConfigResourceType.BROKER, BROKER_ID)], config_filter="all"
    )["broker"][BROKER_ID]
    assert described["auto.create.topics.enable"]["value"] == "true"
    assert described["auto.create.topics.enable"]["config_source"] == "DEFAULT_CONFIG"
    assert described["listeners"]["config_source"] == "STATIC_BROKER_CONFIG"

    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    err = cfk_error(admin.describe_configs([missing], request_timeout=10)[missing])
    assert err == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_errors_confluent(broker):
    admin = cfk_admin(broker)
    assert cfk_create(admin, NewTopic("exists", 1, 1)) == {"exists": None}
    assert cfk_create(admin, NewTopic("exists", 1, 1)) == {
        "exists": KafkaError.TOPIC_ALREADY_EXISTS
    }
    assert cfk_create(admin, NewTopic("bad/name", 1, 1)) == {"bad/name": KafkaError.TOPIC_EXCEPTION}
    assert cfk_create(admin, NewTopic("x" * 250, 1, 1)) == {"x" * 250: KafkaError.TOPIC_EXCEPTION}
    assert cfk_create(admin, NewTopic("rf3", 1, 3)) == {
        "rf3": KafkaError.INVALID_REPLICATION_FACTOR
    }
    assert cfk_create(admin, NewTopic("cfg", 1, 1, config={"no.such.key": "1"})) == {
        "cfg": KafkaError.INVALID_CONFIG
    }
    assert cfk_create(admin, NewTopic("cfg", 1, 1, config={"retention.ms": "soon"})) == {
        "cfg": KafkaError.INVALID_CONFIG
    }
    assert cfk_create(admin, NewTopic("asg", 1, replica_assignment=[[2]])) == {
        "asg": KafkaError.INVALID_REPLICA_ASSIGNMENT
    }
    assert cfk_create(admin, NewTopic("asg-ok", 2, replica_assignment=[[1], [1]])) == {
        "asg-ok": None
    }
    assert cfk_partitions(admin, "asg-ok") == 2
    # One failure does not stop the other topics of the same request.
    assert cfk_create(admin, NewTopic("exists", 1, 1), NewTopic("fresh", 3, 1)) == {
        "exists": KafkaError.TOPIC_ALREADY_EXISTS,
        "fresh": None,
    }
    topics = set(admin.list_topics(timeout=10).topics)
    assert topics == {"exists", "fresh", "asg-ok"}
    assert cfk_partitions(admin, "fresh") == 3


def test_create_errors_kafka_python(kp_admin):
    def codes(topics: dict) -> dict:
        return kp_codes(kp_admin.create_topics(topics, raise_errors=False))

    one = {"num_partitions": 1, "replication_factor": 1}
    assert codes({"exists": one}) == {"exists": 0}
    assert codes({"exists": one}) == {"exists": kerr.TopicAlreadyExistsError.errno}
    assert codes({"..": one}) == {"..": kerr.InvalidTopicError.errno}
    assert codes({"rf3": {"num_partitions": 1, "replication_factor": 3}}) == {
        "rf3": kerr.InvalidReplicationFactorError.errno
    }
    assert codes({"zero": {"num_partitions": 0, "replication_factor": 1}}) == {
        "zero": kerr.InvalidPartitionsError.errno
    }
    assert codes({"cfg": {**one, "configs": {"no.such.key": "1"}}}) == {
        "cfg": kerr.InvalidConfigurationError.errno
    }
    with pytest.raises(kerr.TopicAlreadyExistsError):
        kp_admin.create_topics({"exists": one})
    assert kp_admin.list_topics() == ["exists"]


def test_create_with_broker_defaults_and_describe_by_topic_id(broker_factory):
    b = broker_factory({"num.partitions": "2"})
    admin = admin_client(b.bootstrap, client="kafka-python")
    try:
        # Names only: num_partitions and replication_factor -1 take the broker defaults.
        [topic] = admin.create_topics(["dflt"])["topics"]
        assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (
            0,
            2,
            1,
        )
        [desc] = admin.describe_topics(["dflt"])
        assert len(desc["partitions"]) == 2
        # Metadata v12+ looks topics up by id (KIP-516).
        [by_id] = admin.describe_topics([uuid.UUID(desc["topic_id"])])
        assert (by_id["name"], by_id["error_code"]) == ("dflt", 0)
        [unknown] = admin.describe_topics([uuid.uuid4()])
        assert unknown["error_code"] == kerr.UnknownTopicIdError.errno
    finally:
        admin.close()


def test_validate_only_creates_nothing(broker, kp_admin):
    admin = cfk_admin(broker)
    assert cfk_create(admin, NewTopic("dry", 4, 1), validate_only=True) == {"dry": None}
    assert cfk_create(admin, NewTopic("dry-bad", 1, 3), validate_only=True) == {
        "dry-bad": KafkaError.INVALID_REPLICATION_FACTOR
    }
    result = kp_admin.create_topics(
        {"dry2": {"num_partitions": 2, "replication_factor": 1, "configs": {"retention.ms": "1"}}},
        validate_only=True,
    )
    assert kp_codes(result) == {"dry2": 0}
    assert kp_admin.list_topics() == []
    [desc] = kp_admin.describe_topics(["dry"])
    assert desc["error_code"] == kerr.UnknownTopicOrPartitionError.errno
    assert not [p for p in broker.data_dir.iterdir() if p.name.startswith("dry")]
    # ...and the name is still free.
    assert cfk_create(admin, NewTopic("dry", 1, 1)) == {"dry": None}


# -- CreatePartitions ------------------------------------------------------------------


def test_create_partitions_confluent(broker):
    admin = cfk_admin(broker)
    assert cfk_create(admin, NewTopic("grow", 1, 1)) == {"grow": None}
    fut = admin.create_partitions([NewPartitions("grow", 4)], request_timeout=10)["grow"]
    assert cfk_error(fut) is None
    assert cfk_partitions(admin, "grow") == 4
    assert sorted(p.name for p in broker.data_dir.iterdir() if p.name.startswith("grow-")) == [
        f"grow-{i}" for i in range(4)
    ]
    for count in (2, 4):
        fut = admin.create_partitions([NewPartitions("grow", count)], request_timeout=10)["grow"]
        assert cfk_error(fut) == KafkaError.INVALID_PARTITIONS
    fut = admin.create_partitions([NewPartitions("nope", 2)], request_timeout=10)["nope"]
    assert cfk_error(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART
    fut = admin.create_partitions(
        [NewPartitions("grow", 6)], validate_only=True, request_timeout=10
    )["grow"]
    assert cfk_error(fut) is None
    assert cfk_partitions(admin, "grow") == 4


def test_create_partitions_kafka_python_and_use_them(broker, kp_admin):
    kp_admin.create_topics({"grow-k": {"num_partitions": 1, "replication_factor": 1}})
    kp_admin.create_partitions({"grow-k": 4})
    [desc] = kp_admin.describe_topics(["grow-k"])
    assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2, 3]
    with pytest.raises(kerr.InvalidPartitionsError):
        kp_admin.create_partitions({"grow-k": 3})
    # The new partitions take data.
    delivered = produce(broker.bootstrap, "grow-k", [b"v"] * 3, client="kafka-python",
                        partition=lambda i: (3, 3, 2)[i])  # fmt: skip
    assert [(d.partition, d.offset) for d in delivered] == [(3, 0), (3, 1), (2, 0)]


# -- DeleteTopics ----------------------------------------------------------------------


def test_delete_unknown_topic(broker, kp_admin):
    admin = cfk_admin(broker)
    assert (
        cfk_error(admin.delete_topics(["ghost"], request_timeout=10)["ghost"])
        == KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        kp_admin.delete_topics(["ghost"])


# -- DescribeCluster -------------------------------------------------------------------


def test_describe_cluster(broker, kp_admin):
    admin = cfk_admin(broker)
    desc = admin.describe_cluster(request_timeout=10).result(10)
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, "127.0.0.1", broker.port)]
    assert desc.controller.id == 1
    assert desc.cluster_id
    kp = kp_admin.describe_cluster()
    assert kp["cluster_id"] == desc.cluster_id
    assert kp["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in kp["brokers"]] == [
        (1, "127.0.0.1", broker.port)
    ]
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == desc.cluster_id
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(1, "127.0.0.1", broker.port)]
    # The cluster id is kept in the data directory.
    assert broker.stop() == 0
    broker.start()
    assert (
        cfk_admin(broker).describe_cluster(request_timeout=10).result(10).cluster_id
        == desc.cluster_id
    )


def test_describe_features_kafka_python(broker, kp_admin):
    # kafka-python's describe_features: ApiVersions v3+ (kafka-features.sh describe reads
    # the same fields through Admin.describeFeatures)
    features = kp_admin.describe_features()
    assert features == {
        "metadata.version": {"supported": (29, 29), "finalized": (29, 29), "finalized_epoch": 0},
        "group.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 0},
        "share.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 0},
    }


def test_describe_features_with_consumer_protocol_and_share_groups_off(broker_factory):
    b = broker_factory({"group.coordinator.rebalance.protocols": "classic", "group.share.enable": "false"})
    admin = admin_client(b.bootstrap, client="kafka-python")
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    assert {name: f.get("finalized") for name, f in features.items()} == {
        "metadata.version": (29, 29), "group.version": None, "share.version": None,
    }


# -- Metadata auto-creation ------------------------------------------------------------


def test_auto_create_on_metadata_when_enabled(broker_factory):
    b = broker_factory({"num.partitions": "3"})
    admin = cfk_admin(b)
    # AdminClient's metadata request allows auto-creation: the topic appears with num.partitions.
    md = admin.list_topics("auto-yes", timeout=10)
    assert md.topics["auto-yes"].error is None
    assert len(md.topics["auto-yes"].partitions) == 3
    # A consumer's metadata request does not allow it (allow.auto.create.topics=false).
    c = new_consumer(b.bootstrap, client="confluent")
    try:
        md = c.list_topics("auto-no", timeout=10)
    finally:
        c.close()
    assert md.topics["auto-no"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # The consumer (group.id set) had the group coordinator create __consumer_offsets, and
    # Kafka lists internal topics in an all-topics Metadata (KafkaApis filters only by
    # DESCRIBE permission; is_internal marks them): "auto-no" was not created. The
    # coordinator creates the topic off the event loop, so it may appear a moment later.
    wait_until(lambda: "__consumer_offsets" in admin.list_topics(timeout=10).topics, 30,
               what="__consumer_offsets created for the consumer's FindCoordinator")
    assert set(admin.list_topics(timeout=10).topics) == {"auto-yes", "__consumer_offsets"}
    # Auto-created topics get the broker defaults and survive a restart.
    entry = cfk_topic_configs(admin, "auto-yes")["retention.ms"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value
    assert b.stop() == 0
    b.start()
    assert cfk_partitions(cfk_admin(b), "auto-yes") == 3


def test_no_auto_create_when_disabled(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    admin = cfk_admin(b)
    md = admin.list_topics("auto-off", timeout=10)
    assert md.topics["auto-off"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "auto-off" not in admin.list_topics(timeout=10).topics
    p = KafkaProducer(bootstrap_servers=b.bootstrap, max_block_ms=1500)
    try:
        with pytest.raises(kerr.KafkaTimeoutError):
            p.send("auto-off", b"v").get(5)
    finally:
        p.close(timeout=5)
    assert "auto-off" not in admin.list_topics(timeout=10).topics


# -- persistence -----------------------------------------------------------------------


def test_topics_persist_across_restart_with_ids_and_configs(broker):
    admin = cfk_admin(broker)
    assert cfk_create(
        admin,
        NewTopic("p1", 2, 1, config={"retention.ms": "86400000", "max.message.bytes": "65536"}),
        NewTopic("p2", 1, 1),
        NewTopic("p3", 1, 1),
    ) == {"p1": None, "p2": None, "p3": None}
    assert (
        cfk_error(admin.create_partitions([NewPartitions("p2", 3)], request_timeout=10)["p2"])
        is None
    )
    assert cfk_error(admin.delete_topics(["p3"], request_timeout=10)["p3"]) is None

    def snapshot(admin: AdminClient) -> dict:
        names = sorted(admin.list_topics(timeout=10).topics)
        futures = admin.describe_topics(TopicCollection(names), request_timeout=10)
        out = {}
        for name in names:
            d = futures[name].result(10)
            configs = cfk_topic_configs(admin, name)
            out[name] = (
                str(d.topic_id),
                len(d.partitions),
                {k: (e.value, e.source) for k, e in configs.items()},
            )
        return out

    before = snapshot(admin)
    assert set(before) == {"p1", "p2"}
    assert before["p1"][1:] == (2, before["p1"][2])
    assert before["p1"][2]["retention.ms"] == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert before["p2"][1] == 3
    assert broker.stop() == 0
    broker.start()
    assert snapshot(cfk_admin(broker)) == before
    # Killed rather than stopped: topic metadata is written atomically at each change.
    broker.kill()
    broker.start()
    assert snapshot(cfk_admin(broker)) == before


def test_retention_by_time_deletes_old_segments_in_a_running_broker(broker_factory):
    """log.retention.ms on a live broker: the maintenance task deletes whole segments
    whose records are all older than retention (the active one too, after rolling, as
    Kafka does), ListOffsets EARLIEST moves up to the log start offset, the end offset
    stays, and a consumer reading from the beginning starts at the log start offset."""
    b = broker_factory(
        {
            "log.retention.ms": 2000,
            "log.retention.check.interval.ms": 300,
            "log.segment.bytes": 20000,
        }
    )
    admin = admin_client(b.bootstrap, client="confluent")
    # Kept for an hour while the records go in (on a slow machine retention would delete the
    # first segments before the checks below), then the topic falls back to the broker's 2 s.
    create_topic(b.bootstrap, "ret", client="confluent", configs={"retention.ms": "3600000"})
    # one record per request: a batch each, so the segments roll at 20000 bytes
    produce(b.bootstrap, "ret", [b"x" * 500] * 300, client="confluent", linger_ms=0, flush_every=1)
    tp = TopicPartition("ret", 0)

    def offset(spec) -> int:
        return admin.list_offsets({tp: spec})[tp].result(10).offset

    def segment_bases() -> list[int]:
        return sorted(int(f.split(".")[0]) for f in os.listdir(part_dir) if f.endswith(".log"))

    part_dir = b.data_dir / "ret-0"
    before = segment_bases()
    assert len(before) > 3, before  # rolled at 20000 bytes
    assert offset(OffsetSpec.earliest()) == 0
    alter = configs_cli(b.bootstrap, "--entity-type", "topics", "--entity-name", "ret", "--alter",
                        "--delete-config", "retention.ms")  # fmt: skip
    assert alter.returncode == 0, alter.stderr
    wait_until(lambda: offset(OffsetSpec.earliest()) >= 300, 20, interval=0.3,
               what="retention deleting every old segment")  # fmt: skip
    assert offset(OffsetSpec.earliest()) == 300
    assert offset(OffsetSpec.latest()) == 300
    assert segment_bases() == [300]  # one empty active segment at the end offset
    # new records after it are served from the new log start offset
    produce(b.bootstrap, "ret", [f"new{i}".encode() for i in range(5)], client="confluent")
    got = consume(b.bootstrap, "ret", 5, client="confluent", start=OFFSET_BEGINNING, timeout=15)
    assert [(g.offset, g.value) for g in got] == [(300 + i, f"new{i}".encode()) for i in range(5)]
