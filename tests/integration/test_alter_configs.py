"""Topic and broker configuration at run time, through real clients and a real broker.

IncrementalAlterConfigs and AlterConfigs with confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient and aiokafka's AIOKafkaAdminClient: the change, what DescribeConfigs says
afterwards, validate_only, Kafka's errors, the change taking effect (a lowered
max.message.bytes refuses the next large produce, a lowered retention.ms deletes on the
next retention pass), persistence across a restart, ``tidegate configs`` on topics and
brokers, and recompression for every pair of producer codec and topic compression.type,
read back by real consumers.
"""

from __future__ import annotations

import warnings

import pytest

# kafka-python loads its protocol schemas with importlib.resources' deprecated API.
warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\) instead", DeprecationWarning)

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.admin import AlterConfigOp, ConfigResourceType
from kafka.admin import ConfigResource as KConfigResource

from tests.conftest import wait_until
from tidegate.record.record_batch import iter_batches, read_header

from .clients import (
    CODECS,
    Rec,
    admin_client,
    assert_records_match,
    base_timestamp,
    configs_cli,
    consume,
    create_topic,
    make_records,
    new_consumer,
    produce,
    run_async,
)
from .rawclient import RawClient, fetch_body

pytestmark = pytest.mark.timeout(120)

BROKER_ID = "1"
HOUR = 3_600_000
SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOpType.SET,
    AlterConfigOpType.DELETE,
    AlterConfigOpType.APPEND,
    AlterConfigOpType.SUBTRACT,
)
#: compression.type -> the codec id a stored batch then has (producer: the producer's)
TOPIC_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4, "producer": None}
#: the producers' codec names (clients.CODECS) -> codec id
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    """One broker for the topic-level tests; retention passes every 500 ms."""
    return module_broker_factory({"log.retention.check.interval.ms": "500"})


@pytest.fixture(scope="module")
def cfk(broker):
    return admin_client(broker.bootstrap, client="confluent")


@pytest.fixture
def kp(broker):
    admin = admin_client(broker.bootstrap, client="kafka-python")
    yield admin
    admin.close()


# -- helpers -------------------------------------------------------------------------------


def cfk_incremental(admin, resource_type, name, ops, validate_only=False) -> int | None:
    """IncrementalAlterConfigs with confluent-kafka: None, or the KafkaError code."""
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, op, v in ops]
    res = ConfigResource(resource_type, name, incremental_configs=entries)
    fut = admin.incremental_alter_configs([res], validate_only=validate_only, request_timeout=15)[res]
    return _error(fut)


def _error(fut) -> int | None:
    try:
        fut.result(15)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def cfk_describe(admin, resource_type, name) -> dict:
    """{key: (value, source, read_only)} (confluent-kafka's DescribeConfigs)."""
    res = ConfigResource(resource_type, name)
    entries = admin.describe_configs([res], request_timeout=15)[res].result(15)
    return {k: (e.value, e.source, e.is_read_only) for k, e in entries.items()}


def stored_codecs(bootstrap: str, topic: str) -> list[tuple[int, int, int, int]]:
    """(codec, producer id, base sequence, records) of every stored batch, by a raw Fetch."""
    with RawClient.connect(bootstrap) as c:
        resp = c.request(1, 12, fetch_body(topic, 0))
    records = resp.responses[0].partitions[0].records
    out = []
    for pos, _size in iter_batches(records):
        h = read_header(records, pos)
        out.append((h.compression_type, h.producer_id, h.base_sequence, h.records_count))
    return out


def log_start(bootstrap: str, topic: str) -> tuple[int, int]:
    c = new_consumer(bootstrap, client="confluent")
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


# -- confluent-kafka ----------------------------------------------------------------------------


def test_confluent_incremental_operations_and_describe(broker, cfk):
    topic = create_topic(broker.bootstrap, configs={"segment.bytes": "1048576"})
    key = "follower.replication.throttled.replicas"
    assert cfk_incremental(cfk, ResourceType.TOPIC, topic, [
        ("retention.ms", SET, "3600000"), (key, APPEND, "0:1,1:1"), ("segment.bytes", DELETE, None),
    ]) is None  # fmt: skip
    described = cfk_describe(cfk, ResourceType.TOPIC, topic)
    assert described["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert described[key] == ("0:1,1:1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert described["segment.bytes"] == ("1073741824", ConfigSource.DEFAULT_CONFIG.value, False)
    assert cfk_incremental(cfk, ResourceType.TOPIC, topic, [(key, SUBTRACT, "0:1")]) is None
    assert cfk_describe(cfk, ResourceType.TOPIC, topic)[key][0] == "1:1"
    # synonyms, as librdkafka returns them (by name)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entry = cfk.describe_configs([res], request_timeout=15)[res].result(15)["retention.ms"]
    assert {n: (s.value, s.source) for n, s in entry.synonyms.items()} == {
        "retention.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    }


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(broker, cfk):
    """Kafka 4 accepts an empty cleanup.policy (neither delete nor compact)."""
    topic = create_topic(broker.bootstrap)
    assert cfk_incremental(cfk, ResourceType.TOPIC, topic, [
        ("cleanup.policy", SUBTRACT, "delete"),
    ]) is None  # fmt: skip
    described = cfk_describe(cfk, ResourceType.TOPIC, topic)
    assert described["cleanup.policy"] == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)


def test_the_cluster_default_keeps_min_insync_replicas_as_kafka_4_1(broker, cfk):
    """KIP-966: a Kafka 4.1+ cluster records min.insync.replicas at the cluster level (the
    static value) and refuses its removal; every topic describes it as a non-default
    DYNAMIC_DEFAULT_BROKER_CONFIG (what confluent-kafka's incremental_alter_configs test
    expects of a 4.2 broker)."""
    topic = create_topic(broker.bootstrap)
    described = cfk_describe(cfk, ResourceType.TOPIC, topic)
    assert described["min.insync.replicas"] == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
    r = _configs(broker, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}\n" in r.stdout
    r = _configs(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config", "min.insync.replicas")
    assert (r.returncode, r.stderr) == (1, (
        "tidegate configs: INVALID_CONFIG (40): Cluster-level min.insync.replicas cannot be removed while "
        "eligible leader replicas are enabled (KIP-966).\n"))  # fmt: skip
    assert cfk_describe(cfk, ResourceType.TOPIC, topic)["min.insync.replicas"][0] == "1"


def test_confluent_validate_only_and_errors(broker, cfk):
    topic = create_topic(broker.bootstrap)
    assert cfk_incremental(cfk, ResourceType.TOPIC, topic, [("retention.ms", SET, "1000")],
                           validate_only=True) is None  # fmt: skip
    assert cfk_describe(cfk, ResourceType.TOPIC, topic)["retention.ms"][1] == (
        ConfigSource.DEFAULT_CONFIG.value
    )
    cases = [
        ([("retention.ms", SET, "soon")], KafkaError.INVALID_CONFIG),
        ([("no.such.config", SET, "1")], KafkaError.INVALID_CONFIG),
        ([("retention.ms", APPEND, "1")], KafkaError.INVALID_CONFIG),
        ([("compression.type", SET, "brotli")], KafkaError.INVALID_CONFIG),
    ]
    for ops, code in cases:
        assert cfk_incremental(cfk, ResourceType.TOPIC, topic, ops) == code, ops
    assert cfk_incremental(cfk, ResourceType.TOPIC, "no-such-topic", [("retention.ms", SET, "1")]) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    assert cfk_incremental(cfk, ResourceType.BROKER, BROKER_ID, [("num.partitions", SET, "3")]) == (
        KafkaError.INVALID_REQUEST
    )


def test_confluent_legacy_alter_configs_replaces_the_set(broker, cfk):
    topic = create_topic(broker.bootstrap, configs={"retention.ms": "1000", "segment.bytes": "1048576"})
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "5000"})
    assert _error(cfk.alter_configs([res], request_timeout=15)[res]) is None
    described = cfk_describe(cfk, ResourceType.TOPIC, topic)
    assert described["max.message.bytes"][:2] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert described["retention.ms"][:2] == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    assert described["segment.bytes"][:2] == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)


def test_lowered_max_message_bytes_refuses_the_next_large_produce(broker, cfk):
    topic = create_topic(broker.bootstrap)
    big = [Rec(b"k", b"x" * 5000)]
    assert [d.offset for d in produce(broker.bootstrap, topic, big, client="confluent")] == [0]
    assert cfk_incremental(cfk, ResourceType.TOPIC, topic, [("max.message.bytes", SET, "2000")]) is None
    errors: list = []
    produce(broker.bootstrap, topic, big, client="confluent", errors=errors,
            conf={"retries": 0})  # fmt: skip
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    small = [Rec(b"k", b"small")]
    assert [d.offset for d in produce(broker.bootstrap, topic, small, client="confluent")] == [1]


def test_lowered_retention_deletes_on_the_next_retention_pass(broker, kp):
    topic = create_topic(broker.bootstrap)
    old = base_timestamp() - 600_000  # 70 minutes ago
    recs = [Rec(b"k", b"v%d" % i, timestamp=old + i) for i in range(10)]
    produce(broker.bootstrap, topic, recs, client="kafka-python")
    assert log_start(broker.bootstrap, topic) == (0, 10)
    result = kp.alter_configs(
        [KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "60000"})],
        incremental=True,
    )
    assert result == {"topic": {topic: "OK"}}
    wait_until(lambda: log_start(broker.bootstrap, topic) == (10, 10), 10,
               what="retention to delete the old records")  # fmt: skip


# -- kafka-python -------------------------------------------------------------------------------


def test_kafka_python_incremental_and_legacy(broker, kp):
    topic = create_topic(broker.bootstrap)
    res = KConfigResource(ConfigResourceType.TOPIC, topic, configs={
        "retention.ms": (AlterConfigOp.SET, "7200000"),
        "cleanup.policy": (AlterConfigOp.APPEND, "delete"),
    })  # fmt: skip
    assert kp.alter_configs([res], incremental=True) == {"topic": {topic: "OK"}}
    described = kp.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)],
                                    include_synonyms=True)["topic"][topic]  # fmt: skip
    assert {k: (v["value"], v["config_source"]) for k, v in described.items()} == {
        "retention.ms": ("7200000", "DYNAMIC_TOPIC_CONFIG"),
        "cleanup.policy": ("delete", "DYNAMIC_TOPIC_CONFIG"),
    }
    assert [(s["name"], s["value"], s["source"]) for s in described["retention.ms"]["synonyms"]] == [
        ("retention.ms", "7200000", "DYNAMIC_TOPIC_CONFIG")
    ]
    # the legacy API, asked for explicitly: the client keeps the other modified keys itself
    res = KConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "4000"})
    assert kp.alter_configs([res], incremental=False) == {"topic": {topic: "OK"}}
    described = kp.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    assert {k: v["value"] for k, v in described.items()} == {
        "retention.ms": "7200000", "cleanup.policy": "delete", "max.message.bytes": "4000",
    }  # fmt: skip
    # DELETE: back to the default
    res = KConfigResource(ConfigResourceType.TOPIC, topic,
                          configs={"retention.ms": (AlterConfigOp.DELETE, None)})  # fmt: skip
    assert kp.alter_configs([res], incremental=True) == {"topic": {topic: "OK"}}
    described = kp.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    assert set(described) == {"cleanup.policy", "max.message.bytes"}


def test_kafka_python_validate_only_and_errors(broker, kp):
    topic = create_topic(broker.bootstrap)
    res = KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1"})
    assert kp.alter_configs([res], validate_only=True, incremental=True) == {"topic": {topic: "OK"}}
    assert kp.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic] == {}
    bad = KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "soon"})
    [(name, result)] = kp.alter_configs([bad], incremental=True)["topic"].items()
    assert name == topic
    assert result.startswith("[Error 40] InvalidConfigurationError")
    assert "Invalid value soon for configuration retention.ms: Not a number of type LONG" in result
    ghost = KConfigResource(ConfigResourceType.TOPIC, "ghost-topic", configs={"retention.ms": "1"})
    # (kafka-python checks the keys against the topic's described configs first: skipped)
    result = kp.alter_configs([ghost], incremental=True, raise_on_unknown=False)["topic"]["ghost-topic"]
    assert result.startswith("[Error 3] UnknownTopicOrPartitionError")
    assert "The topic 'ghost-topic' does not exist." in result
    # a broker key that cannot change at run time
    broker_res = KConfigResource(ConfigResourceType.BROKER, BROKER_ID, configs={"num.partitions": "2"})
    result = kp.alter_configs([broker_res], incremental=True, raise_on_unknown=False)["broker"][BROKER_ID]
    assert result.startswith("[Error 42] InvalidRequestError")
    assert "Cannot update these configs dynamically: Set(num.partitions)" in result


# -- aiokafka -----------------------------------------------------------------------------------


def aio_admin_call(bootstrap, call):
    from aiokafka.admin import AIOKafkaAdminClient

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
        await admin.start()
        try:
            return await call(admin)
        finally:
            await admin.close()

    return run_async(run(), 60)


def test_aiokafka_alter_and_describe(broker):
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AType

    topic = create_topic(broker.bootstrap, configs={"retention.ms": "1000"})

    async def alter(admin, configs):
        responses = await admin.alter_configs([AConfigResource(AType.TOPIC, topic, configs)])
        return [tuple(r) for resp in responses for r in resp.resources]

    async def describe(admin):
        (resp,) = await admin.describe_configs([AConfigResource(AType.TOPIC, topic)])
        ((error, _message, _type, name, entries),) = resp.resources
        assert (error, name) == (0, topic)
        return {e[0]: (e[1], e[3]) for e in entries}  # name: (value, config_source)

    # aiokafka's alter_configs is the legacy AlterConfigs: the set is replaced
    assert aio_admin_call(broker.bootstrap, lambda a: alter(a, {"max.message.bytes": "3000"})) == [
        (0, None, 2, topic)
    ]
    described = aio_admin_call(broker.bootstrap, describe)
    assert described["max.message.bytes"] == ("3000", 1)
    assert described["retention.ms"] == ("604800000", 5)
    # errors, as Kafka answers them
    [(code, message, _t, _n)] = aio_admin_call(broker.bootstrap,
                                               lambda a: alter(a, {"compression.type": "rar"}))  # fmt: skip
    assert (code, message) == (
        40, ("Invalid value rar for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer"),
    )  # fmt: skip
    assert aio_admin_call(broker.bootstrap, describe)["max.message.bytes"] == ("3000", 1)


# -- broker configs, persistence ----------------------------------------------------------------


def test_dynamic_broker_configs_apply_live_and_survive_a_restart(broker_factory):
    b = broker_factory()
    admin = admin_client(b.bootstrap, client="confluent")
    topic = create_topic(b.bootstrap, configs={"compression.type": "producer"})
    plain = create_topic(b.bootstrap)
    assert cfk_incremental(admin, ResourceType.BROKER, BROKER_ID, [
        ("message.max.bytes", SET, "3000"), ("compression.type", SET, "zstd"),
    ]) is None  # fmt: skip
    # the kafka-configs.sh way to a cluster default: tidegate's CLI (AlterConfigs on "")
    cli = _configs(b, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--add-config", "log.retention.ms=86400000")  # fmt: skip
    assert cli.stdout == "Completed updating default config for brokers in the cluster.\n", cli.stderr
    topic_cfg = admin_client(b.bootstrap, client="confluent")
    described = cfk_describe(topic_cfg, ResourceType.TOPIC, plain)
    assert described["max.message.bytes"][:2] == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert described["compression.type"][:2] == ("zstd", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert described["retention.ms"][:2] == (
        "86400000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    )
    brokers = cfk_describe(topic_cfg, ResourceType.BROKER, BROKER_ID)
    assert brokers["message.max.bytes"] == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert brokers["num.partitions"][2] is True

    def check() -> None:
        recs = [Rec(b"k", b"v" * 100)]
        produce(b.bootstrap, plain, recs, client="confluent", codec="gzip")
        produce(b.bootstrap, topic, recs, client="confluent", codec="gzip")
        assert {c[0] for c in stored_codecs(b.bootstrap, plain)} == {4}  # zstd, the default
        assert {c[0] for c in stored_codecs(b.bootstrap, topic)} == {1}  # the topic's own: producer
        errors: list = []
        produce(b.bootstrap, plain, [Rec(b"k", b"x" * 5000)], client="confluent", errors=errors,
                conf={"retries": 0})  # fmt: skip
        assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    check()
    b.restart()
    after = cfk_describe(admin_client(b.bootstrap, client="confluent"), ResourceType.TOPIC, plain)
    assert {k: after[k][:2] for k in ("max.message.bytes", "compression.type", "retention.ms")} == {
        "max.message.bytes": ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        "compression.type": ("zstd", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        "retention.ms": ("86400000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
    }
    check()


def test_topic_configs_survive_a_restart(broker_factory):
    b = broker_factory()
    admin = admin_client(b.bootstrap, client="confluent")
    topic = create_topic(b.bootstrap)
    assert cfk_incremental(admin, ResourceType.TOPIC, topic, [
        ("max.message.bytes", SET, "2000"), ("retention.ms", SET, "123456789"),
    ]) is None  # fmt: skip
    b.restart()
    described = cfk_describe(admin_client(b.bootstrap, client="confluent"), ResourceType.TOPIC, topic)
    assert described["max.message.bytes"][:2] == ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert described["retention.ms"][:2] == ("123456789", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    errors: list = []
    produce(b.bootstrap, topic, [Rec(b"k", b"x" * 5000)], client="confluent", errors=errors,
            conf={"retries": 0})  # fmt: skip
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


# -- tidegate configs --------------------------------------------------------------------------


def _configs(broker, *args: str):
    return configs_cli(broker.bootstrap, *args)


def test_cli_groups_like_kafka_configs(broker):
    """kafka-configs.sh --entity-type groups (and its --group shorthand): a group's dynamic
    configs (GROUP resources), set before the group exists, described, deleted."""
    r = _configs(broker, "--alter", "--entity-type", "groups", "--entity-name", "cfg-g",
                 "--add-config", "share.auto.offset.reset=earliest")  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "Completed updating config for group cfg-g.\n"), r.stderr
    # (the broker answers a group config without synonyms)
    expected = ("Dynamic configs for group cfg-g are:\n  share.auto.offset.reset=earliest sensitive=false "
                "synonyms={}\n")  # fmt: skip
    assert _configs(broker, "--describe", "--entity-type", "groups", "--entity-name", "cfg-g").stdout == expected
    assert _configs(broker, "--describe", "--group", "cfg-g").stdout == expected
    assert expected in _configs(broker, "--describe", "--entity-type", "groups").stdout
    r = _configs(broker, "--alter", "--group", "cfg-g", "--delete-config", "share.auto.offset.reset")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for group cfg-g.\n"), r.stderr
    r = _configs(broker, "--alter", "--group", "cfg-g", "--delete-config", "share.auto.offset.reset")
    assert (r.returncode, r.stderr) == (1, "tidegate configs: Invalid config(s): share.auto.offset.reset\n")
    r = _configs(broker, "--describe", "--group", "no-such-group")
    assert r.stdout == "The group 'no-such-group' doesn't exist and doesn't have dynamic config.\n"


def test_cli_topics_like_kafka_configs(broker):
    topic = create_topic(broker.bootstrap)
    r = _configs(broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
                 "--add-config", "retention.ms=3600000,follower.replication.throttled.replicas=[0:1,1:1]")  # fmt: skip
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for topic {topic}.\n"), r.stderr
    r = _configs(broker, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert r.stdout == (
        f"Dynamic configs for topic {topic} are:\n"
        "  follower.replication.throttled.replicas=0:1,1:1 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:follower.replication.throttled.replicas=0:1,1:1}\n"
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}\n"
    )
    r = _configs(broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
                 "--delete-config", "retention.ms")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _configs(broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
                 "--delete-config", "retention.ms")  # fmt: skip
    assert (r.returncode, r.stderr) == (1, "tidegate configs: Invalid config(s): retention.ms\n")
    r = _configs(broker, "--describe", "--all", "--entity-type", "topics", "--entity-name", topic)
    lines = r.stdout.splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in lines
    assert ("  segment.bytes=1073741824 sensitive=false "
            "synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}") in lines  # fmt: skip
    assert lines[1:] == sorted(lines[1:])
    r = _configs(broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
                 "--add-config", "retention.ms=soon")  # fmt: skip
    assert r.returncode == 1
    assert r.stderr == ("tidegate configs: INVALID_CONFIG (40): Invalid value soon for configuration "
                        "retention.ms: Not a number of type LONG\n")  # fmt: skip


def test_cli_brokers_like_kafka_configs(broker_factory):
    b = broker_factory()
    r = _configs(b, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                 "--add-config", "log.retention.bytes=1000000,compression.type=lz4")  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "Completed updating config for broker 1.\n"), r.stderr
    r = _configs(b, "--alter", "--entity-type", "brokers", "--entity-default",
                 "--add-config", "log.retention.bytes=2000000")  # fmt: skip
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n", r.stderr
    r = _configs(b, "--describe", "--entity-type", "brokers")
    assert r.stdout == (
        "Dynamic configs for broker 1 are:\n"
        "  compression.type=lz4 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:compression.type=lz4, "
        "DEFAULT_CONFIG:compression.type=producer}\n"
        "  log.retention.bytes=1000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.bytes=1000000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=2000000, DEFAULT_CONFIG:log.retention.bytes=-1}\n"
        "Default configs for brokers in the cluster are:\n"
        "  log.retention.bytes=2000000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=2000000}\n"
        # recorded at start, as a Kafka 4.1+ controller does (KIP-966)
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}\n"
    )
    r = _configs(b, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                 "--delete-config", "compression.type")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _configs(b, "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert r.stdout.splitlines()[1:] == [
        ("  log.retention.bytes=1000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.bytes=1000000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=2000000, DEFAULT_CONFIG:log.retention.bytes=-1}")
    ]
    r = _configs(b, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                 "--add-config", "num.partitions=3")  # fmt: skip
    assert (r.returncode, r.stderr) == (
        1, ("tidegate configs: INVALID_REQUEST (42): Cannot update these configs dynamically: "
           "Set(num.partitions)\n"),
    )  # fmt: skip


# -- recompression -------------------------------------------------------------------------------


def test_every_producer_codec_into_every_topic_compression_type(broker):
    """Each of the five producer codecs (confluent-kafka, idempotent) into a topic of each
    compression.type: every stored batch is in the topic's codec (the producer's for
    ``producer``) with the producer's id and sequence, and real consumers of all three
    libraries read back exactly what was sent."""
    sent = make_records(30, base_timestamp())
    topics = {t: create_topic(broker.bootstrap, configs={"compression.type": t}, prefix=f"rc-{t}")
              for t in TOPIC_CODECS}  # fmt: skip
    for codec in CODECS:
        for topic in topics.values():
            produce(broker.bootstrap, topic, sent, client="confluent", codec=codec, acks=-1,
                    linger_ms=100, conf={"enable.idempotence": True})  # fmt: skip
    readers = ["confluent", "kafka-python", "aiokafka"]
    for i, (compression, topic) in enumerate(topics.items()):
        batches = stored_codecs(broker.bootstrap, topic)
        assert sum(n for *_, n in batches) == 30 * len(CODECS)
        # one batch per producer here (30 records, linger 100 ms), each its own producer id
        assert len(batches) == len(CODECS), batches
        expected = [TOPIC_CODECS[compression]] * len(CODECS)
        if compression == "producer":
            expected = [CODEC_IDS[c] for c in CODECS]
        assert [b[0] for b in batches] == expected, compression
        assert [b[2] for b in batches] == [0] * len(CODECS)  # base sequences kept
        assert len({b[1] for b in batches}) == len(CODECS) and min(b[1] for b in batches) >= 0
        client = readers[i % len(readers)]
        got = consume(broker.bootstrap, topic, 30 * len(CODECS), client=client)
        for n in range(len(CODECS)):
            assert_records_match(sent, got[30 * n : 30 * (n + 1)], first_offset=30 * n)
