"""tidegate.config: Kafka-style broker and topic configuration."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tidegate.config import (
    BROKER_CONFIG,
    TOPIC_CONFIG,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    describe_topic_configs,
    new_cluster_id,
    parse_listener,
    parse_overrides,
    parse_properties,
    topic_log_config,
    validate_topic_configs,
)
from tidegate.config.definitions import UpdateMode
from tidegate.log.config import LogConfig

LONG_MAX = 9223372036854775807
WEEK_MS = 7 * 24 * 3600 * 1000
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
KAFKA_SERVER_PROPERTIES = Path(__file__).resolve().parents[1] / "data" / "kafka-4-server.properties"


def cfg(**props: str) -> BrokerConfig:
    """BrokerConfig from keyword args, ``log_retention_ms`` -> ``log.retention.ms``."""
    return BrokerConfig({k.replace("_", "."): v for k, v in props.items()})


def error_of(props: dict) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    return str(info.value)


# ---- defaults --------------------------------------------------------------------------
def test_defaults_are_kafkas_except_loopback_and_data_dir():
    c = BrokerConfig()
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert c.advertised_listeners == c.listeners
    assert c.log_dir == Path("./tidegate-data")
    assert c.node_id == 1
    assert c.cluster_id is None
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.log_segment_bytes == 1073741824
    assert c.log_roll_ms == WEEK_MS
    assert c.log_retention_ms == WEEK_MS
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_flush_interval_messages == LONG_MAX
    assert c.log_flush_interval_ms == LONG_MAX  # unset: falls back to the scheduler interval
    assert c.log_flush_scheduler_interval_ms == LONG_MAX
    assert c.log_index_interval_bytes == 4096
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.socket_request_max_bytes == 104857600
    assert c.message_max_bytes == 1048588
    assert c.listener_security_protocol_map == {
        "PLAINTEXT": "PLAINTEXT",
        "SSL": "SSL",
        "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
    }
    assert c.originals == {}


def test_get_returns_typed_values_and_none_for_unset_nullable_keys():
    c = cfg(num_partitions="3", auto_create_topics_enable="FALSE")
    assert c.get("num.partitions") == 3
    assert c.get("auto.create.topics.enable") is False
    assert c.get("log.retention.ms") is None
    assert c.get("listeners") == ["PLAINTEXT://127.0.0.1:9092"]
    with pytest.raises(ConfigError, match="Unknown configuration 'nope'"):
        c.get("nope")


def test_typed_python_values_are_accepted():
    c = BrokerConfig({"num.partitions": 4, "auto.create.topics.enable": False})
    assert c.num_partitions == 4
    assert c.auto_create_topics_enable is False


def test_broker_log_config_matches_kafka_topic_defaults():
    assert BrokerConfig().log_config == LogConfig()


# ---- properties files ------------------------------------------------------------------
def test_parse_properties_handles_comments_separators_and_whitespace():
    text = (
        "# a comment\n"
        "! another comment\n"
        "   # indented comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d\t=  spaced value  \n"
        "e=\n"
        "f\n"
        "g==x\n"
        "a=last wins\n"
    )
    assert parse_properties(text) == {
        "a": "last wins",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",  # Java keeps trailing whitespace; typed parsing trims it
        "e": "",
        "f": "",
        "g": "=x",
    }


def test_parse_properties_continuations_and_escapes():
    text = (
        "listeners=PLAINTEXT://127.0.0.1:1,\\\n"
        "          OTHER://127.0.0.1:2\n"
        "# comment ending with a backslash does not continue \\\n"
        "k=v\n"
        "two\\\\=escaped backslash, not a continuation\\\\\n"
        "key\\ with\\:colon=\\u0041\\tB\n"
        "trailing=\\\n"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://127.0.0.1:1,OTHER://127.0.0.1:2",
        "k": "v",
        "two\\": "escaped backslash, not a continuation\\",
        "key with:colon": "A\tB",
        "trailing": "",
    }


def test_parse_properties_crlf_and_malformed_unicode_escape():
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}
    with pytest.raises(ConfigError, match="line 2: malformed"):
        parse_properties("a=1\nb=\\u12x4\n", "server.properties")


def test_load_reads_file_then_overrides_win(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(
        "# tidegate test\n"
        "num.partitions = 3\n"
        "log.dirs: " + str(tmp_path / "data") + "\n"
        "auto.create.topics.enable false\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,\\\n"
        "    INTERNAL://127.0.0.1:19093\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT\n",
        encoding="utf-8",
    )
    c = BrokerConfig.load(props, ["num.partitions=5", "node.id = 7"])
    assert c.num_partitions == 5  # override beats the file
    assert c.node_id == 7
    assert c.auto_create_topics_enable is False  # from the file
    assert c.log_dir == tmp_path / "data"
    assert [str(lst) for lst in c.listeners] == [
        "PLAINTEXT://127.0.0.1:19092",
        "INTERNAL://127.0.0.1:19093",
    ]
    assert c.originals["num.partitions"] == "5"
    assert c.source("num.partitions") is ConfigSource.STATIC_BROKER_CONFIG
    assert c.source("log.segment.bytes") is ConfigSource.DEFAULT_CONFIG


def test_load_without_file_and_later_override_wins():
    c = BrokerConfig.load(None, ["num.partitions=2", "num.partitions=9"])
    assert c.num_partitions == 9


def test_load_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        BrokerConfig.load(tmp_path / "nope.properties", [])


@pytest.mark.parametrize("bad", ["num.partitions", "=3", ""])
def test_malformed_override_is_rejected(bad):
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_overrides([bad])


def test_override_value_may_contain_equals_and_be_empty():
    assert parse_overrides(["a=b=c", "d="]) == {"a": "b=c", "d": ""}


# ---- unknown keys and invalid values ---------------------------------------------------
def test_unknown_key_is_rejected_naming_it():
    assert error_of({"log.dir.foo": "x"}).startswith("Unknown configuration 'log.dir.foo'")


def test_unknown_key_suggests_close_match_and_topic_key_hint():
    assert "did you mean 'num.partitions'" in error_of({"num.partition": "3"})
    msg = error_of({"retention.ms": "1000"})
    assert "topic-level" in msg and "log.retention.ms" in msg


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"num.partitions": "-3"},
            "Invalid value -3 for configuration num.partitions: Value must be at least 1",
        ),
        (
            {"num.partitions": "three"},
            "Invalid value three for configuration num.partitions: Not a number of type INT",
        ),
        (
            {"num.partitions": "2147483648"},
            "Invalid value 2147483648 for configuration num.partitions: Not a number of type INT",
        ),
        (
            {"auto.create.topics.enable": "yes"},
            (
                "Invalid value yes for configuration auto.create.topics.enable: "
                "Expected value to be either true or false"
            ),
        ),
        (
            {"log.message.timestamp.type": "createtime"},
            (
                "Invalid value createtime for configuration log.message.timestamp.type: "
                "String must be one of: CreateTime, LogAppendTime"
            ),
        ),
        (
            {"log.segment.bytes": "13"},
            "Invalid value 13 for configuration log.segment.bytes: Value must be at least 14",
        ),
        ({"node.id": "-1"}, "Invalid value -1 for configuration node.id"),
        ({"message.max.bytes": "1_000"}, "Not a number of type INT"),
        ({"socket.request.max.bytes": "0"}, "Value must be at least 1"),
    ],
)
def test_invalid_values_are_rejected_with_kafkas_wording(props, message):
    assert message in error_of(props)


def test_config_error_carries_key_and_value():
    with pytest.raises(ConfigError) as info:
        cfg(num_partitions="0")
    assert info.value.name == "num.partitions"
    assert info.value.value == 0
    assert isinstance(info.value, ValueError)


# ---- group coordinator bounds (Kafka's GroupCoordinatorConfig / ShareGroupConfig) -----------
C = "group.consumer."


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        ({C + "session.timeout.ms": "30000"}, C + "session.timeout.ms",
         f"{C}session.timeout.ms must be greater than or equal to {C}min.session.timeout.ms"),
        ({C + "session.timeout.ms": "60001"}, C + "session.timeout.ms",
         f"{C}session.timeout.ms must be less than or equal to {C}max.session.timeout.ms"),
        ({C + "max.session.timeout.ms": "40000"}, C + "max.session.timeout.ms",
         f"{C}max.session.timeout.ms must be greater than or equal to {C}min.session.timeout.ms"),
        ({C + "heartbeat.interval.ms": "4999"}, C + "heartbeat.interval.ms",
         f"{C}heartbeat.interval.ms must be greater than or equal to {C}min.heartbeat.interval.ms"),
        ({C + "heartbeat.interval.ms": "15001"}, C + "heartbeat.interval.ms",
         f"{C}heartbeat.interval.ms must be less than or equal to {C}max.heartbeat.interval.ms"),
        ({C + "min.heartbeat.interval.ms": "16000"}, C + "max.heartbeat.interval.ms",
         f"{C}max.heartbeat.interval.ms must be greater than or equal to {C}min.heartbeat.interval.ms"),
        # each within its bounds, but the interval not below the timeout
        ({C + "min.session.timeout.ms": "1000", C + "session.timeout.ms": "10000",
          C + "heartbeat.interval.ms": "10000"}, C + "heartbeat.interval.ms",
         f"{C}heartbeat.interval.ms must be less than {C}session.timeout.ms"),
        ({"group.share.record.lock.duration.ms": "1000"}, "group.share.record.lock.duration.ms",
         ("group.share.record.lock.duration.ms must be greater than or equal to "
          "group.share.min.record.lock.duration.ms")),
        ({"group.share.max.size": "300", "group.share.max.share.sessions": "250"}, "group.share.max.share.sessions",
         "group.share.max.share.sessions must be greater than or equal to group.share.max.size"),
    ],
)  # fmt: skip
def test_group_bounds_are_checked_at_start_with_kafkas_messages(props, key, message):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    assert (str(info.value), info.value.name) == (message, key)


def test_group_bounds_accept_a_value_on_each_bound():
    config = BrokerConfig({C + "min.session.timeout.ms": "6000", C + "session.timeout.ms": "6000",
                           C + "heartbeat.interval.ms": "5000", C + "max.heartbeat.interval.ms": "5000"})  # fmt: skip
    assert (config.get(C + "session.timeout.ms"), config.get(C + "heartbeat.interval.ms")) == (6000, 5000)


# ---- KIP-72: queued.max.request.bytes and queued.max.requests ------------------------------
MIB = 1024 * 1024


def test_queued_max_request_bytes_below_the_largest_request_is_rejected():
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"queued.max.request.bytes": "1000"})
    assert info.value.name == "queued.max.request.bytes" and info.value.value == 1000
    msg = str(info.value)
    assert msg.startswith("Invalid value 1000 for configuration queued.max.request.bytes")
    assert "at least socket.request.max.bytes (104857600)" in msg
    # the bound follows socket.request.max.bytes
    BrokerConfig({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1000"})
    assert "at least socket.request.max.bytes (1001)" in error_of(
        {"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"}
    )


@pytest.mark.parametrize("value", ["0", "-1"])
def test_queued_max_requests_below_one_is_rejected(value):
    msg = error_of({"queued.max.requests": value})
    assert msg == (
        f"Invalid value {value} for configuration queued.max.requests: Value must be at least 1"
    )


def test_queued_max_request_bytes_default_is_bounded_256_mib():
    c = BrokerConfig({})
    assert c.get("queued.max.request.bytes") is None  # unset, as the user sees it
    assert c.queued_max_request_bytes == 256 * MIB == BrokerConfig.DEFAULT_QUEUED_MAX_REQUEST_BYTES
    assert c.get("queued.max.requests") == 500


def test_queued_max_request_bytes_default_follows_a_larger_socket_request_max_bytes():
    c = BrokerConfig({"socket.request.max.bytes": "400000000"})
    assert c.queued_max_request_bytes == 400_000_000  # the largest request must fit
    assert BrokerConfig({"socket.request.max.bytes": "1000"}).queued_max_request_bytes == 256 * MIB


@pytest.mark.parametrize("value", [-1, 0])
def test_queued_max_request_bytes_zero_or_negative_disables_the_pool(value):
    c = BrokerConfig({"queued.max.request.bytes": str(value)})
    assert c.queued_max_request_bytes == value  # <= 0: no pool (memory_pool.create_pool)
    assert not c.is_default("queued.max.request.bytes")


def test_queued_max_request_bytes_set_explicitly_is_taken_as_is():
    c = BrokerConfig({"queued.max.request.bytes": str(64 * MIB), "socket.request.max.bytes": "1000"})
    assert c.queued_max_request_bytes == 64 * MIB


def test_replication_factor_above_one_explains_single_node():
    msg = error_of({"default.replication.factor": "3"})
    assert "default.replication.factor" in msg and "single-node" in msg


def test_more_than_one_log_dir_is_rejected():
    msg = error_of({"log.dirs": "/a,/b"})
    assert "log.dirs" in msg and "exactly one log directory" in msg
    assert "exactly one log directory" in error_of({"log.dir": "/a,/b"})


def test_log_dirs_wins_over_log_dir():
    assert cfg(log_dir="/x", log_dirs="/y").log_dir == Path("/y")
    assert cfg(log_dir="/x").log_dir == Path("/x")


def test_cluster_id_is_validated_and_generated_ids_are_valid():
    assert cfg(cluster_id="MkU3OEVBNTcwNTJENDM2Qg").cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert "cluster.id" in error_of({"cluster.id": "has space"})
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    for cid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) and not cid.startswith("-")
        assert cfg(cluster_id=cid).cluster_id == cid


# ---- listeners ---------------------------------------------------------------------------
def test_listener_parsing_variants():
    assert parse_listener("PLAINTEXT://:9092") == Listener("PLAINTEXT", "", 9092, "PLAINTEXT")
    assert parse_listener("plaintext://host.example:0").name == "PLAINTEXT"
    assert parse_listener("PLAINTEXT://[::1]:9092").host == "::1"
    assert parse_listener("PLAINTEXT://::1:9092") == Listener("PLAINTEXT", "::1", 9092)
    assert str(parse_listener("PLAINTEXT://[::1]:9092")) == "PLAINTEXT://[::1]:9092"
    assert parse_listener("SSL://h:1").security_protocol == "SSL"


@pytest.mark.parametrize(
    "bad", ["localhost:9092", "PLAINTEXT://host", "PLAINTEXT://host:port", "PLAINTEXT://h:70000"]
)
def test_bad_listener_is_rejected(bad):
    msg = error_of({"listeners": bad})
    assert msg.startswith(f"Invalid value {bad} for configuration listeners")


def test_empty_host_binds_all_interfaces_and_is_advertised_as_hostname(monkeypatch):
    monkeypatch.setattr("socket.getfqdn", lambda: "broker.example")
    c = cfg(listeners="PLAINTEXT://:0")
    assert c.listeners == (Listener("PLAINTEXT", "", 0, "PLAINTEXT"),)
    assert c.advertised_listeners == (Listener("PLAINTEXT", "broker.example", 0, "PLAINTEXT"),)


def test_tls_listener_without_a_keystore_is_rejected():
    msg = error_of({"listeners": "SSL://127.0.0.1:9093"})
    assert "listeners" in msg and "SSL" in msg and "needs ssl.keystore.location" in msg
    msg = error_of(
        {
            "listeners": "CLIENT://127.0.0.1:9093",
            "listener.security.protocol.map": "CLIENT:SASL_SSL",
            "ssl.keystore.key": "x",
        }
    )
    assert "CLIENT uses SASL_SSL, which needs" in msg
    c = BrokerConfig({"listeners": "CLIENT://127.0.0.1:9093",
               "listener.security.protocol.map": "CLIENT:SASL_SSL",
               "listener.name.client.ssl.keystore.location": "/k.pem"})
    assert c.listener_get("CLIENT", "ssl.keystore.location") == "/k.pem"


def test_security_keys_and_listener_prefix():
    c = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.SASL_PLAINTEXT.plain.sasl.jaas.config": "x required;",
    })
    assert c.get("sasl.enabled.mechanisms") == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert c.listener_get("SASL_PLAINTEXT", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert c.listener_get("PLAINTEXT", "sasl.enabled.mechanisms") == c.get("sasl.enabled.mechanisms")
    assert c.listener_get("SASL_PLAINTEXT", "plain.sasl.jaas.config") == "x required;"
    assert c.listener_get("PLAINTEXT", "plain.sasl.jaas.config") is None
    assert "GSSAPI (Kerberos) is not supported" in error_of({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"})
    assert "OAUTHBEARER is not supported" in error_of({"sasl.enabled.mechanisms": "OAUTHBEARER"})
    assert "JKS stores are not supported" in error_of({"ssl.keystore.type": "JKS"})
    assert "Listener OTHER is not defined" in error_of({"listener.name.other.ssl.client.auth": "none"})
    assert "a listener may override" in error_of({"listener.name.plaintext.num.partitions": "3"})
    assert "String must be one of: none, requested, required" in error_of({"ssl.client.auth": "maybe"})


def test_custom_listener_name_needs_a_protocol_mapping():
    assert "No security protocol defined for listener CLIENT" in error_of(
        {"listeners": "CLIENT://127.0.0.1:9093"}
    )
    c = cfg(
        listeners="CLIENT://127.0.0.1:9093",
        listener_security_protocol_map="client:plaintext",
    )
    assert c.listeners == (Listener("CLIENT", "127.0.0.1", 9093, "PLAINTEXT"),)


def test_bad_protocol_map_is_rejected():
    assert "Unknown security protocol FOO" in error_of(
        {"listener.security.protocol.map": "PLAINTEXT:FOO"}
    )
    assert "Map entry should be of form" in error_of(
        {"listener.security.protocol.map": "PLAINTEXT"}
    )


def test_duplicate_listener_names_and_ports_are_rejected():
    msg = error_of({"listeners": "PLAINTEXT://127.0.0.1:1,plaintext://127.0.0.1:2"})
    assert "different name" in msg
    msg = error_of(
        {
            "listeners": "A://127.0.0.1:1,B://127.0.0.2:1",
            "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
        }
    )
    assert "different port" in msg
    assert "At least one listener" in error_of({"listeners": ""})


def test_advertised_listeners_must_name_existing_listeners():
    c = cfg(
        listeners="PLAINTEXT://0.0.0.0:9092",
        advertised_listeners="PLAINTEXT://broker.example:19092",
    )
    assert c.advertised_listeners == (Listener("PLAINTEXT", "broker.example", 19092),)
    msg = error_of({"advertised.listeners": "OTHER://broker.example:9092"})
    assert "advertised.listeners" in msg and "OTHER" in msg


def test_meta_address_cannot_be_advertised():
    msg = error_of({"listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert "advertised.listeners" in msg and "0.0.0.0" in msg


# ---- retention / roll / flush precedence ------------------------------------------------
def test_retention_precedence_ms_over_minutes_over_hours():
    assert cfg(log_retention_hours="1").log_retention_ms == 3_600_000
    assert cfg(log_retention_hours="1", log_retention_minutes="2").log_retention_ms == 120_000
    assert (
        cfg(
            log_retention_hours="1", log_retention_minutes="2", log_retention_ms="5"
        ).log_retention_ms
        == 5
    )


def test_negative_retention_means_unlimited():
    assert cfg(log_retention_ms="-1").log_retention_ms == -1
    assert cfg(log_retention_hours="-1").log_retention_ms == -1
    assert cfg(log_retention_minutes="-7").log_retention_ms == -1
    assert "Value must be at least -1" in error_of({"log.retention.ms": "-2"})


def test_roll_ms_wins_over_hours():
    assert cfg(log_roll_hours="2").log_roll_ms == 7_200_000
    assert cfg(log_roll_hours="2", log_roll_ms="1000").log_roll_ms == 1000


def test_flush_interval_ms_falls_back_to_scheduler_interval():
    assert cfg(log_flush_scheduler_interval_ms="500").log_flush_interval_ms == 500
    assert (
        cfg(
            log_flush_scheduler_interval_ms="500", log_flush_interval_ms="100"
        ).log_flush_interval_ms
        == 100
    )


# ---- topic configs -------------------------------------------------------------------------
def test_validate_topic_configs_returns_canonical_strings():
    assert validate_topic_configs(
        {"retention.ms": " 1000 ", "cleanup.policy": "delete", "compression.type": "producer"}
    ) == {"retention.ms": "1000", "cleanup.policy": "delete", "compression.type": "producer"}
    assert validate_topic_configs({}) == {}


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"retention.msx": "1"}, "Unknown topic config name: retention.msx"),
        ({"log.retention.ms": "1"}, "Unknown topic config name: log.retention.ms"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"segment.bytes": "10"}, "Invalid value 10 for configuration segment.bytes"),
        ({"retention.ms": "soon"}, "Not a number of type LONG"),
        ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
        ({"cleanup.policy": "shred"}, "String must be one of: compact, delete"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"compression.type": "rar"},
         ("Invalid value rar for configuration compression.type: String must be one of: "
         "uncompressed, zstd, lz4, snappy, gzip, producer")),
        ({"compression.type": "GZIP"}, "String must be one of"),  # Kafka's check is exact
        ({"compression.gzip.level": "10"},
         ("Invalid value 10 for configuration compression.gzip.level: "
         "Value must be between 1 and 9 or equal to -1")),
        ({"compression.gzip.level": "0"}, "Value must be between 1 and 9 or equal to -1"),
        ({"compression.lz4.level": "18"},
         "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17"),
        ({"compression.zstd.level": "-131073"}, "Value must be at least -131072"),
        ({"min.insync.replicas": "0"},
         "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        ({"message.timestamp.after.max.ms": "-1"}, "Value must be at least 0"),
        ({"segment.jitter.ms": "-1"}, "Value must be at least 0"),
        ({"local.retention.ms": "-3"}, "Value must be at least -2"),
        ({"preallocate": "yes"}, "Expected value to be either true or false"),
        ({"leader.replication.throttled.replicas": "0:1,x"},
         ("Invalid value [0:1, x] for configuration leader.replication.throttled.replicas: "
         "leader.replication.throttled.replicas must be the literal '*' or a list of replicas "
         "in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")),
        ({"remote.storage.enable": "true"},
         ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
         "with remote log storage.")),
        ({"flush.messages": "0"}, "Value must be at least 1"),
        # Kafka's LogConfig.validateValues, against the other value or its default
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
         "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
        ({"max.compaction.lag.ms": "5", "min.compaction.lag.ms": "6"},
         "conflict topic config setting min.compaction.lag.ms (6) > max.compaction.lag.ms (5)"),
    ],
)
def test_invalid_topic_configs_are_rejected(configs, message):
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert message in str(info.value)
    assert info.value.name == ("min.compaction.lag.ms" if "conflict" in message else next(iter(configs)))


def test_every_kafka_4_topic_config_is_accepted():
    """Kafka 4.0's LogConfig keys with a valid value each; what tidegate does with each is
    in docs/configuration.md."""
    valid = {
        "segment.bytes": "1048576", "segment.ms": "60000", "segment.jitter.ms": "10",
        "segment.index.bytes": "4096", "flush.messages": "10", "flush.ms": "1000",
        "retention.bytes": "100", "retention.ms": "1000", "max.message.bytes": "1000",
        "index.interval.bytes": "100", "file.delete.delay.ms": "0",
        "cleanup.policy": "delete", "unclean.leader.election.enable": "true",
        "min.insync.replicas": "2", "compression.type": "zstd", "compression.gzip.level": "9",
        "compression.lz4.level": "1", "compression.zstd.level": "-5", "preallocate": "true",
        "message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1",
        "message.timestamp.after.max.ms": "1", "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "0:1,1:1",
        "message.downconversion.enable": "false", "remote.storage.enable": "false",
        "local.retention.ms": "-2", "local.retention.bytes": "-2",
        "remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true",
        "min.cleanable.dirty.ratio": "0.3", "delete.retention.ms": "1000",
        "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "100000",
    }  # fmt: skip
    assert validate_topic_configs(valid) == valid
    for codec in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
        assert validate_topic_configs({"compression.type": codec}) == {"compression.type": codec}


def test_kafka_4_topic_defaults():
    entries = {e.name: e.value for e in describe_topic_configs(BrokerConfig(), {})}
    assert {k: entries[k] for k in (
        "compression.type", "compression.gzip.level", "compression.lz4.level",
        "compression.zstd.level", "min.insync.replicas", "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms", "segment.jitter.ms", "segment.index.bytes",
        "file.delete.delay.ms", "preallocate", "unclean.leader.election.enable",
        "message.downconversion.enable", "leader.replication.throttled.replicas",
        "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
        "remote.log.copy.disable", "remote.log.delete.on.disable",
    )} == {
        "compression.type": "producer", "compression.gzip.level": "-1",
        "compression.lz4.level": "9", "compression.zstd.level": "3",
        "min.insync.replicas": "1", "message.timestamp.before.max.ms": str(LONG_MAX),
        "message.timestamp.after.max.ms": "3600000", "segment.jitter.ms": "0",
        "segment.index.bytes": "10485760", "file.delete.delay.ms": "60000",
        "preallocate": "false", "unclean.leader.election.enable": "false",
        "message.downconversion.enable": "true", "leader.replication.throttled.replicas": "",
        "remote.storage.enable": "false", "local.retention.ms": "-2",
        "local.retention.bytes": "-2", "remote.log.copy.disable": "false",
        "remote.log.delete.on.disable": "false",
    }  # fmt: skip


def test_first_broker_synonyms_of_topic_keys_are_cluster_wide_dynamic():
    """Kafka's DynamicLogConfig: the broker key a topic key defaults from first can be
    changed at run time for the whole cluster (log.retention.ms), its secondary names
    cannot (log.retention.hours)."""
    for key in TOPIC_CONFIG.values():
        for i, syn in enumerate(key.synonyms):
            mode = BROKER_CONFIG[syn.name].update_mode
            assert mode is (UpdateMode.CLUSTER_WIDE if i == 0 else UpdateMode.READ_ONLY), syn.name
    assert BROKER_CONFIG["producer.id.expiration.ms"].update_mode is UpdateMode.CLUSTER_WIDE
    # Kafka's per-broker listener and TLS keys: tidegate cannot apply them while running
    for name in ("listeners", "advertised.listeners", "listener.security.protocol.map",
                 "sasl.enabled.mechanisms", "ssl.client.auth", "ssl.keystore.location"):
        assert BROKER_CONFIG[name].update_mode is UpdateMode.READ_ONLY, name


def test_topic_validation_shares_the_broker_rules():
    # one rule per key: the topic key inherits type and validator from its broker synonym
    for broker_name, topic_name in [
        ("log.segment.bytes", "segment.bytes"),
        ("log.flush.interval.messages", "flush.messages"),
        ("log.message.timestamp.type", "message.timestamp.type"),
    ]:
        assert TOPIC_CONFIG[topic_name].validator is BROKER_CONFIG[broker_name].validator
        assert TOPIC_CONFIG[topic_name].type is BROKER_CONFIG[broker_name].type


def test_topic_log_config_maps_every_field():
    broker = cfg(log_segment_bytes="2048", log_retention_hours="1", log_roll_ms="1000")
    lc = topic_log_config(broker, {})
    assert lc == LogConfig(segment_bytes=2048, retention_ms=3_600_000, segment_ms=1000)
    lc = topic_log_config(
        broker,
        {
            "segment.bytes": "4096",
            "segment.ms": "10",
            "retention.ms": "20",
            "retention.bytes": "30",
            "flush.messages": "40",
            "flush.ms": "50",
            "index.interval.bytes": "60",
            "max.message.bytes": "70",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "delete",
        },
    )
    assert lc == LogConfig(
        segment_bytes=4096,
        segment_ms=10,
        retention_ms=20,
        retention_bytes=30,
        flush_messages=40,
        flush_ms=50,
        index_interval_bytes=60,
        max_message_bytes=70,
        message_timestamp_type="LogAppendTime",
    )


def test_every_log_config_field_is_a_topic_key():
    for field in dataclasses.fields(LogConfig):
        key = TOPIC_CONFIG[field.name.replace("_", ".")]
        default = tuple(key.default) if isinstance(key.default, list) else key.default
        assert default == field.default, field.name


def test_an_empty_cleanup_policy_is_neither_delete_nor_compact():
    """Kafka 4 accepts cleanup.policy= (what SUBTRACT of the last policy leaves): the log is
    kept forever and never compacted."""
    assert validate_topic_configs({"cleanup.policy": ""}) == {"cleanup.policy": ""}
    lc = topic_log_config(BrokerConfig(), {"cleanup.policy": ""})
    assert lc.cleanup_policy == ()
    assert not lc.delete and not lc.compact
    assert cfg(log_cleanup_policy="").topic_default("cleanup.policy") == []
    with pytest.raises(ConfigError, match="String must be one of: compact, delete"):
        validate_topic_configs({"cleanup.policy": "compact,shred"})


def test_topic_log_config_rejects_bad_overrides():
    with pytest.raises(ConfigError, match="segment.ms"):
        topic_log_config(BrokerConfig(), {"segment.ms": "0"})


# ---- describe ----------------------------------------------------------------------------
def _by_name(entries):
    return {e.name: e for e in entries}


def test_broker_describe_sources_and_values():
    c = cfg(num_partitions="3", log_retention_hours="24")
    entries = _by_name(c.describe())
    assert set(entries) == set(BROKER_CONFIG)
    e = entries["num.partitions"]
    assert (e.value, e.source, e.read_only, e.is_sensitive) == (
        "3",
        ConfigSource.STATIC_BROKER_CONFIG,
        True,
        False,
    )
    assert e.source == 4 and e.config_type == ConfigType.INT == 3
    assert e.documentation == BROKER_CONFIG["num.partitions"].doc
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("num.partitions", "3", 4),
        ("num.partitions", "1", 5),
    ]
    d = entries["log.segment.bytes"]
    assert (d.value, d.source) == ("1073741824", ConfigSource.DEFAULT_CONFIG)
    assert entries["log.retention.ms"].value is None  # unset nullable key, as Kafka reports it
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["auto.create.topics.enable"].config_type == ConfigType.BOOLEAN
    # positional shape: (name, value, source, read_only, is_sensitive, type, doc, synonyms)
    assert tuple(e)[:7] == ("num.partitions", "3", 4, True, False, 3, e.documentation)


def test_describe_reports_the_queued_max_request_bytes_in_force():
    e = _by_name(BrokerConfig().describe())["queued.max.request.bytes"]
    assert (e.value, e.source) == ("268435456", ConfigSource.DEFAULT_CONFIG)
    assert [(s.value, s.source) for s in e.synonyms] == [("268435456", ConfigSource.DEFAULT_CONFIG)]
    big = _by_name(cfg(socket_request_max_bytes="400000000").describe())["queued.max.request.bytes"]
    assert (big.value, big.source) == ("400000000", ConfigSource.DEFAULT_CONFIG)
    off = _by_name(cfg(queued_max_request_bytes="0").describe())["queued.max.request.bytes"]
    assert (off.value, off.source) == ("0", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in off.synonyms] == [
        ("0", ConfigSource.STATIC_BROKER_CONFIG),
        ("268435456", ConfigSource.DEFAULT_CONFIG),
    ]


def test_is_default_tracks_what_the_user_set():
    c = cfg(num_partitions="1")  # set to the default value: still a static config
    assert not c.is_default("num.partitions")
    assert c.is_default("node.id")


def test_describe_topic_configs_sources_and_synonyms():
    broker = cfg(log_retention_hours="24")
    entries = _by_name(describe_topic_configs(broker, {"segment.bytes": "2048"}))
    assert set(entries) == set(TOPIC_CONFIG)

    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.read_only) == ("2048", 1, False)
    assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
        ("segment.bytes", "2048", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]

    # Kafka lists the synonyms of log.retention.ms from the first one named so: with only
    # log.retention.hours set there is none, and the value's source is DEFAULT_CONFIG
    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.synonyms) == (
        str(24 * 3_600_000), ConfigSource.DEFAULT_CONFIG, ()
    )
    ret = _by_name(describe_topic_configs(cfg(log_retention_ms="5000", log_retention_hours="24"),
                                          {"retention.ms": "7"}))["retention.ms"]
    assert (ret.value, ret.source) == ("7", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
        ("retention.ms", "7", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]

    roll = entries["segment.ms"]
    assert (roll.value, roll.source) == (str(WEEK_MS), ConfigSource.DEFAULT_CONFIG)

    flush = entries["flush.ms"]
    assert (flush.value, flush.source) == (str(LONG_MAX), ConfigSource.DEFAULT_CONFIG)

    cleanup = entries["cleanup.policy"]
    assert (cleanup.value, cleanup.source) == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert [(s.name, s.value, s.source) for s in cleanup.synonyms] == [
        ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG)
    ]
    assert entries["compression.type"].value == "producer"
    assert [(s.name, s.value, s.source) for s in entries["compression.type"].synonyms] == [
        ("compression.type", "producer", ConfigSource.DEFAULT_CONFIG)
    ]
    assert entries["min.insync.replicas"].value == "1"


def test_describe_topic_configs_rejects_invalid_overrides():
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        describe_topic_configs(BrokerConfig(), {"nope": "1"})


# ---- the table and the docs ---------------------------------------------------------------
def test_every_default_is_valid_and_documented_in_the_table():
    for definition in (BROKER_CONFIG, TOPIC_CONFIG):
        for name, key in definition.items():
            assert key.doc, name
            if key.default is not None:
                assert definition.parse_value(name, key.default_string) == key.default, name


def _doc_table_keys() -> set[str]:
    return set(
        re.findall(
            r"^\|\s*`([a-z][a-z0-9.]*)`\s*\|", DOCS.read_text(encoding="utf-8"), re.MULTILINE
        )
    )


def test_docs_list_every_key_and_no_stale_ones():
    documented = _doc_table_keys()
    defined = set(BROKER_CONFIG) | set(TOPIC_CONFIG)
    assert defined - documented == set(), "keys missing from docs/configuration.md"
    assert documented - defined == set(), "docs/configuration.md lists keys that do not exist"


def test_repr_hides_secrets_also_in_listener_overrides():
    text = repr(BrokerConfig({
        "listeners": "SASL_SSL://127.0.0.1:1",
        "listener.name.sasl_ssl.ssl.keystore.key": "KEY-TEXT",
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": "CHAIN-TEXT",
        "ssl.key.password": "PW",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": 'x required user_a="JAAS-PW";',
    }))
    assert not any(secret in text for secret in ("KEY-TEXT", "CHAIN-TEXT", "PW", "JAAS-PW"))


# ---- Kafka's own server.properties -------------------------------------------------------
def test_kafkas_stock_server_properties_are_accepted():
    """Kafka 4's shipped KRaft file: its thread, quorum and replication keys are accepted,
    the controller listener is neither bound nor advertised, the rest takes effect."""
    c = BrokerConfig.load(KAFKA_SERVER_PROPERTIES)
    assert [str(lst) for lst in c.listeners] == ["PLAINTEXT://:9092"]
    assert [str(lst) for lst in c.controller_listeners] == ["CONTROLLER://:9093"]
    assert [(lst.name, lst.host, lst.port) for lst in c.advertised_listeners] == [("PLAINTEXT", "localhost", 9092)]
    assert c.get("process.roles") == ["broker", "controller"]
    assert (c.get("num.io.threads"), c.get("num.network.threads")) == (8, 3)
    assert c.get("socket.send.buffer.bytes") == 102400
    assert c.get("log.retention.hours") == 168 and c.log_dir == Path("/tmp/kraft-combined-logs")


def test_kafka_defaults_of_the_accepted_kraft_keys():
    c = BrokerConfig({})
    assert c.get("process.roles") == [] and c.get("controller.listener.names") is None
    assert (c.get("num.network.threads"), c.get("num.io.threads"), c.get("background.threads")) == (3, 8, 10)
    assert c.get("offsets.topic.replication.factor") == 3
    assert c.get("socket.send.buffer.bytes") == 102400
    assert c.get("delete.topic.enable") is True
    assert c.controller_listeners == ()


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"process.roles": "broker,zookeeper"},
         "Unknown process role 'zookeeper' (only 'broker' and 'controller' are allowed roles)"),
        ({"inter.broker.listener.name": "INTERNAL"},
         "inter.broker.listener.name must be a listener name defined in listeners"),
        ({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
          "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"},
         "every listener is a controller listener"),
        ({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
          "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
          "inter.broker.listener.name": "CONTROLLER"},
         "(and not a controller listener): PLAINTEXT"),
        ({"num.io.threads": "0"}, "Invalid value 0 for configuration num.io.threads"),
    ],
)  # fmt: skip
def test_kraft_keys_are_validated(props, message):
    assert message in error_of(props)


def test_per_listener_connection_limits_change_per_broker_at_run_time():
    """Kafka's ListenerConnectionQuota reconfigurables: listener.name.<l>.max.connections
    and .max.connection.creation.rate in the per-broker dynamic layer win over the static
    value, go when removed, and are refused as a cluster-wide default."""
    c = cfg(listeners="PLAINTEXT://:9092,INTERNAL://:9093",
            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            **{"listener.name.internal.max.connections": "10"})  # fmt: skip
    seen: list[int] = []
    c.reconfigurables.append(lambda: seen.append(c.listener_override("INTERNAL", "max.connections")))
    assert c.listener_override("INTERNAL", "max.connections") == 10
    layer = {"listener.name.internal.max.connections": "20",
             "listener.name.PLAINTEXT.max.connection.creation.rate": "5"}  # fmt: skip
    c.validate_dynamic(layer, per_broker=True)
    c.set_dynamic(layer, per_broker=True)
    assert c.listener_override("INTERNAL", "max.connections") == 20
    assert c.listener_override("plaintext", "max.connection.creation.rate") == 5
    # described as Kafka types it: as its base key, with its value, not sensitive
    entry = {e.name: e for e in c.describe()}["listener.name.internal.max.connections"]
    assert entry[:6] == ("listener.name.internal.max.connections", "20", ConfigSource.DYNAMIC_BROKER_CONFIG,
                         False, False, ConfigType.INT)  # fmt: skip
    c.set_dynamic({}, per_broker=True)
    assert c.listener_override("INTERNAL", "max.connections") == 10 and seen == [20, 10]
    for props, per_broker, message in [
        (layer, False, ("Cannot update these configs at default cluster level, broker id must be "
                       "specified: Set(listener.name.internal.max.connections, "
                       "listener.name.PLAINTEXT.max.connection.creation.rate)")),
        ({"listener.name.other.max.connections": "1"}, True, "Listener OTHER is not defined in listeners"),
        ({"listener.name.internal.max.connections": "-1"}, True,
         "Invalid value -1 for configuration max.connections"),
        ({"listener.name.internal.ssl.keystore.location": "/k.pem"}, True, "Cannot update these configs dynamically"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as info:
            c.validate_dynamic(props, per_broker)
        assert message in str(info.value)
