"""IncrementalAlterConfigs (44) and AlterConfigs (33) through the real core on fake time.

Every operation and every error case of Kafka's ``ConfigAdminManager`` (the broker's
checks) and ``ConfigurationControlManager`` (the controller's), what DescribeConfigs
reports afterwards (values, ``config_source``, synonyms in Kafka's order), persistence
across a restart of the core, and the changes taking effect: retention on the next
retention pass, ``max.message.bytes`` and ``min.insync.replicas`` on the next produce,
the timestamp bounds, and ``compression.type`` recompressing the next batch.
"""

from __future__ import annotations

import json

import pytest

from tests.core_harness import CoreHarness, decode_frame, response_bytes
from tests.integration.rawclient import produce_body
from tests.unit.test_apis import NOW, batch, batches_in
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED
from tidegate.record.batch_builder import (
    Record,
    batch_crc,
    build_batch,
    encode_record,
    set_crc,
    write_header,
)
from tidegate.record.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from tidegate.record.record_batch import HEADER_SIZE, read_header
from tidegate.record.records import decode_records
from tidegate.server.metadata import BROKER_CONFIGS_FILE, TopicStore

#: what every broker's cluster default layer holds from its first start (KIP-966)
MIN_ISR_RECORD = {"min.insync.replicas": "1"}

ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS = 33, 44, 32
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LONG_MAX = 2**63 - 1
HOUR = 3_600_000


def incremental(h, resources, *, validate_only=False, version=1):
    """[(error_code, error_message, resource_type, resource_name)] of one request; each
    resource is (type, name, [(key, op, value), ...])."""
    body = {
        "resources": [
            {
                "resource_type": t,
                "resource_name": n,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
            for t, n, ops in resources
        ],
        "validate_only": validate_only,
    }
    resp = h.request(INCREMENTAL_ALTER_CONFIGS, version, body)
    return [(r.error_code, r.error_message, r.resource_type, r.resource_name) for r in resp.responses]


def legacy(h, resources, *, validate_only=False, version=2):
    """The same for AlterConfigs; each resource is (type, name, {key: value})."""
    body = {
        "resources": [
            {
                "resource_type": t,
                "resource_name": n,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for t, n, configs in resources
        ],
        "validate_only": validate_only,
    }
    resp = h.request(ALTER_CONFIGS, version, body)
    return [(r.error_code, r.error_message, r.resource_type, r.resource_name) for r in resp.responses]


def ok(resource_type, name):
    return (ErrorCode.none, None, resource_type, name)


def describe(h, resource_type, name, keys=None):
    """{key: (value, source, read_only, [(synonym, value, source)])} of one resource."""
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": True,
        "include_documentation": False,
    }  # fmt: skip
    (result,) = h.request(DESCRIBE_CONFIGS, 4, body).results
    assert result.error_code == ErrorCode.none, result
    return {
        c.name: (
            c.value, int(c.config_source), c.read_only,
            [(s.name, s.value, int(s.source)) for s in c.synonyms],
        )
        for c in result.configs
    }


def produce_acks_all(h, topic, records):
    """Produce with acks=all: answered at once on an error, after the fsync otherwise."""
    request, outcome, cid, _released = h.send(0, 9, produce_body(topic, {0: records}, acks=-1))
    if outcome is PARKED:
        resp = h.answer(request, cid, within_ms=1000)
    else:
        resp = decode_frame(0, 9, response_bytes(outcome), cid)
    return resp.responses[0].partition_responses[0]


# ---------------------------------------------------------------------------
# operations on a topic


def test_set_changes_the_topic_live_and_durably(h):
    h.create_topic("t", configs={"segment.bytes": "1048576"})
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "1000"),
                                         ("max.message.bytes", SET, " 2000 ")])]) == [ok(TOPIC, "t")]  # fmt: skip
    described = describe(h, TOPIC, "t", ["retention.ms", "max.message.bytes", "segment.bytes"])
    assert described == {
        "retention.ms": ("1000", 1, False, [("retention.ms", "1000", 1)]),
        "max.message.bytes": ("2000", 1, False, [("max.message.bytes", "2000", 1),
                                                  ("message.max.bytes", "1048588", 5)]),
        "segment.bytes": ("1048576", 1, False, [("segment.bytes", "1048576", 1),
                                                 ("log.segment.bytes", "1073741824", 5)]),
    }  # fmt: skip
    config = h.replicas.get_log("t", 0).config
    assert (config.retention_ms, config.max_message_bytes, config.segment_bytes) == (
        1000, 2000, 1048576
    )
    stored = TopicStore(h.root).get("t")  # what a restart reads
    assert stored.configs == {"segment.bytes": "1048576", "retention.ms": "1000",
                              "max.message.bytes": "2000"}  # fmt: skip


def test_delete_reverts_to_the_default_and_a_missing_key_is_no_error(h):
    h.create_topic("t", configs={"retention.ms": "1000"})
    assert incremental(h, [(TOPIC, "t", [("retention.ms", DELETE, None),
                                         ("retention.bytes", DELETE, "ignored")])]) == [ok(TOPIC, "t")]  # fmt: skip
    assert describe(h, TOPIC, "t", ["retention.ms"]) == {
        "retention.ms": ("604800000", 5, False, [])
    }
    assert h.replicas.get_log("t", 0).config.retention_ms == 604800000
    assert h.store.get("t").configs == {}


def test_append_and_subtract_edit_list_keys_item_by_item(h):
    h.create_topic("t")
    key = "follower.replication.throttled.replicas"
    steps = [
        (APPEND, "0:1,1:1", "0:1,1:1"),  # from the default, empty
        (APPEND, "1:1,2:1", "0:1,1:1,2:1"),  # items already there are not repeated
        (SUBTRACT, "1:1,9:9", "0:1,2:1"),  # items not there are ignored
        (SUBTRACT, "0:1,2:1", ""),
    ]
    for op, value, expected in steps:
        assert incremental(h, [(TOPIC, "t", [(key, op, value)])]) == [ok(TOPIC, "t")]
        assert h.store.get("t").configs[key] == expected
        assert describe(h, TOPIC, "t", [key])[key][:2] == (expected, 1)
    # APPEND starts from the key's default when the topic has no value
    assert incremental(h, [(TOPIC, "t", [("cleanup.policy", APPEND, "delete")])]) == [ok(TOPIC, "t")]
    assert h.store.get("t").configs["cleanup.policy"] == "delete"


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(h):
    """Kafka 4 accepts an empty cleanup.policy: neither deleted nor compacted."""
    h.create_topic("t")
    ops = [("cleanup.policy", SUBTRACT, "delete")]
    assert incremental(h, [(TOPIC, "t", ops)]) == [ok(TOPIC, "t")]
    assert h.store.get("t").configs["cleanup.policy"] == ""
    assert describe(h, TOPIC, "t", ["cleanup.policy"])["cleanup.policy"][:2] == ("", 1)
    config = h.replicas.get_log("t", 0).config
    assert not config.delete and not config.compact


@pytest.mark.parametrize("op", [APPEND, SUBTRACT])
def test_append_and_subtract_on_a_key_that_is_not_a_list_is_invalid_config(h, op):
    h.create_topic("t", configs={"retention.ms": "1000"})
    name = "APPEND" if op == APPEND else "SUBTRACT"
    assert incremental(h, [(TOPIC, "t", [("retention.ms", op, "5")])]) == [
        (ErrorCode.invalid_config, f"Can't {name} to key retention.ms because its type is not LIST.",
         TOPIC, "t")
    ]  # fmt: skip
    assert h.store.get("t").configs == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("retention.ms", SET, "soon")],
         "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        ([("retention.msx", SET, "1")], "Unknown topic config name: retention.msx"),
        ([("compression.type", SET, "rar")],
         ("Invalid value rar for configuration compression.type: String must be one of: "
         "uncompressed, zstd, lz4, snappy, gzip, producer")),
        ([("remote.storage.enable", SET, "true")],
         ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
         "with remote log storage.")),
        # checked against the topic's other values (Kafka's LogConfig.validateValues)
        ([("max.compaction.lag.ms", SET, "500")],
         "conflict topic config setting min.compaction.lag.ms (1000) > max.compaction.lag.ms (500)"),
        # one bad key fails the resource: the good one is not applied either
        ([("retention.ms", SET, "5"), ("segment.bytes", SET, "10")],
         "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ],
)
def test_invalid_topic_configs_are_invalid_config_and_change_nothing(h, ops, message):
    h.create_topic("t", configs={"retention.ms": "1000", "min.compaction.lag.ms": "1000"})
    assert incremental(h, [(TOPIC, "t", ops)]) == [(ErrorCode.invalid_config, message, TOPIC, "t")]
    assert h.store.get("t").configs == {"retention.ms": "1000", "min.compaction.lag.ms": "1000"}
    assert h.replicas.get_log("t", 0).config.retention_ms == 1000


def test_validate_only_validates_and_applies_nothing(h):
    h.create_topic("t")
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "1000")])],
                       validate_only=True) == [ok(TOPIC, "t")]  # fmt: skip
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "x")])], validate_only=True) == [
        (ErrorCode.invalid_config,
         "Invalid value x for configuration retention.ms: Not a number of type LONG", TOPIC, "t")
    ]  # fmt: skip
    assert legacy(h, [(TOPIC, "t", {"retention.ms": "1000"})], validate_only=True) == [ok(TOPIC, "t")]
    assert h.store.get("t").configs == {}
    assert h.replicas.get_log("t", 0).config.retention_ms == 604800000
    assert describe(h, TOPIC, "t", ["retention.ms"])["retention.ms"][:2] == ("604800000", 5)


def test_unknown_topic_after_validation_as_the_controller_does(h):
    assert incremental(h, [(TOPIC, "ghost", [("retention.ms", SET, "1")])]) == [
        (ErrorCode.unknown_topic_or_partition, "The topic 'ghost' does not exist.", TOPIC, "ghost")
    ]
    # the configs are validated first
    assert incremental(h, [(TOPIC, "ghost", [("retention.ms", SET, "x")])])[0][0] == (
        ErrorCode.invalid_config
    )
    assert legacy(h, [(TOPIC, "ghost", {"retention.ms": "1"})])[0][:2] == (
        ErrorCode.unknown_topic_or_partition, "The topic 'ghost' does not exist."
    )
    assert h.store.get("ghost") is None


def test_topic_names(h):
    assert incremental(h, [(TOPIC, "", [("retention.ms", SET, "1")]),
                           (TOPIC, "bad name", [("retention.ms", SET, "1")])]) == [
        (ErrorCode.invalid_request, "Default topic resources are not allowed.", TOPIC, ""),
        (ErrorCode.invalid_topic_exception,
         ("Topic name \"bad name\" is illegal, it contains a character other than ASCII "
         "alphanumerics, '.', '_' and '-'"), TOPIC, "bad name"),
    ]  # fmt: skip


def test_legacy_alter_configs_replaces_the_whole_set(h):
    h.create_topic("t", configs={"retention.ms": "1000", "segment.bytes": "1048576"})
    assert legacy(h, [(TOPIC, "t", {"max.message.bytes": "5000"})]) == [ok(TOPIC, "t")]
    assert h.store.get("t").configs == {"max.message.bytes": "5000"}
    config = h.replicas.get_log("t", 0).config
    assert (config.retention_ms, config.segment_bytes, config.max_message_bytes) == (
        604800000, 1073741824, 5000
    )
    assert legacy(h, [(TOPIC, "t", {})]) == [ok(TOPIC, "t")]
    assert h.store.get("t").configs == {}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_alter_configs_versions(h, version):
    h.create_topic("t")
    assert legacy(h, [(TOPIC, "t", {"retention.ms": str(version + 1)})], version=version) == [
        ok(TOPIC, "t")
    ]
    assert h.store.get("t").configs == {"retention.ms": str(version + 1)}


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_versions(h, version):
    h.create_topic("t")
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "7")])], version=version) == [
        ok(TOPIC, "t")
    ]
    assert h.store.get("t").configs == {"retention.ms": "7"}


def test_internal_topics_are_altered_like_any_topic(h):
    """Kafka's controller does not refuse config changes to __consumer_offsets."""
    h.apis.groups.offsets_log.log(create=True)
    assert incremental(h, [(TOPIC, "__consumer_offsets", [("min.insync.replicas", SET, "1")])]) == [
        ok(TOPIC, "__consumer_offsets")
    ]
    assert h.store.get("__consumer_offsets").configs["min.insync.replicas"] == "1"


# ---------------------------------------------------------------------------
# INVALID_REQUEST, as the broker's checks answer it


def test_a_resource_named_twice_fails_both_and_others_go_on(h):
    h.create_topic("t")
    h.create_topic("u")
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "1")]),
                           (TOPIC, "u", [("retention.ms", SET, "2")]),
                           (TOPIC, "t", [("retention.ms", SET, "3")])]) == [
        (ErrorCode.invalid_request, "Each resource must appear at most once.", TOPIC, "t"),
        ok(TOPIC, "u"),
        (ErrorCode.invalid_request, "Each resource must appear at most once.", TOPIC, "t"),
    ]  # fmt: skip
    assert (h.store.get("t").configs, h.store.get("u").configs) == ({}, {"retention.ms": "2"})
    assert legacy(h, [(TOPIC, "t", {}), (TOPIC, "t", {})])[0][:2] == (
        ErrorCode.invalid_request, "Each resource must appear at most once."
    )


def test_a_key_named_twice_is_invalid_request(h):
    h.create_topic("t")
    expected = [(ErrorCode.invalid_request, "Error due to duplicate config keys", TOPIC, "t")]
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "1"),
                                         ("retention.ms", DELETE, None)])]) == expected  # fmt: skip
    body = {"resources": [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "retention.ms", "value": "1"}, {"name": "retention.ms", "value": "2"}]}],
        "validate_only": False}  # fmt: skip
    resp = h.request(ALTER_CONFIGS, 2, body)
    assert (resp.responses[0].error_code, resp.responses[0].error_message) == expected[0][:2]


def test_null_values(h):
    h.create_topic("t")
    # only DELETE may carry a null value
    assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, None),
                                         ("segment.ms", APPEND, None),
                                         ("retention.bytes", DELETE, None)])]) == [
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms, segment.ms",
         TOPIC, "t")
    ]  # fmt: skip
    # the legacy API has no DELETE: any null is refused
    assert legacy(h, [(TOPIC, "t", {"retention.ms": None})]) == [
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms", TOPIC, "t")
    ]


def test_unknown_resource_types_and_broker_logger_in_the_legacy_api(h):
    assert incremental(h, [(99, "x", [])]) == [
        (ErrorCode.invalid_request, "Unknown resource type 99", 99, "x")
    ]
    assert legacy(h, [(BROKER_LOGGER, "1", {"kafka": "DEBUG"}), (99, "x", {})]) == [
        (ErrorCode.invalid_request, "Unknown resource type 8", BROKER_LOGGER, "1"),
        (ErrorCode.invalid_request, "Unknown resource type 99", 99, "x"),
    ]


def test_an_unknown_operation_is_invalid_request(h):
    h.create_topic("t")
    assert incremental(h, [(TOPIC, "t", [("retention.ms", 7, "1")]),
                           (BROKER, "1", [("log.retention.ms", 9, "1")])]) == [
        (ErrorCode.invalid_request, "Unknown operations type 7", TOPIC, "t"),
        (ErrorCode.invalid_request, "Unknown operations type 9", BROKER, "1"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("2", "Unexpected broker id, expected 1, but received 2"),
        ("one", "Node id must be an integer, but it is: one"),
    ],
)
def test_a_broker_name_other_than_empty_or_this_node(h, name, message):
    assert incremental(h, [(BROKER, name, [("log.retention.ms", SET, "1")])]) == [
        (ErrorCode.invalid_request, message, BROKER, name)
    ]
    assert legacy(h, [(BROKER, name, {"log.retention.ms": "1"})]) == [
        (ErrorCode.invalid_request, message, BROKER, name)
    ]


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("log.retention.ms", SET, "abc")],
         "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
        ([("compression.type", SET, "brotli")],
         ("Invalid value brotli for configuration compression.type: String must be one of: "
         "uncompressed, zstd, lz4, snappy, gzip, producer")),
        ([("num.partitions", SET, "3")], "Cannot update these configs dynamically: Set(num.partitions)"),
        ([("log.retention.hours", SET, "3"), ("listeners", SET, "PLAINTEXT://:1")],
         "Cannot update these configs dynamically: Set(log.retention.hours, listeners)"),
        ([("ssl.keystore.location", SET, "/k.pem")],
         ("These security configs can be dynamically updated only per-listener using the "
         "listener prefix: Set(ssl.keystore.location)")),
        ([("log.local.retention.ms", SET, "-1")], "Invalid dynamic configuration"),
        ([("log.retention.ms", APPEND, "5")],
         "Config value append is not allowed for config key: log.retention.ms"),
    ],
)
@pytest.mark.parametrize("name", ["", "1"])
def test_dynamic_broker_configs_that_fail_validation(h, ops, message, name):
    code = ErrorCode.invalid_config if "not allowed" in message else ErrorCode.invalid_request
    assert incremental(h, [(BROKER, name, ops)]) == [(code, message, BROKER, name)]
    assert h.config.dynamic_configs(True) == {} and h.config.dynamic_configs(False) == MIN_ISR_RECORD
    assert json.loads((h.root / BROKER_CONFIGS_FILE).read_text())["default"] == MIN_ISR_RECORD  # as at start


def test_append_to_an_unknown_broker_key_is_an_unexpected_error(h):
    assert incremental(h, [(BROKER, "1", [("no.such.key", APPEND, "a")])]) == [
        (ErrorCode.unknown_server_error,
         "The server experienced an unexpected error when processing the request.", BROKER, "1")
    ]  # fmt: skip


# ---------------------------------------------------------------------------
# dynamic broker configs


def test_a_cluster_default_changes_what_topics_without_their_own_value_use(h):
    h.create_topic("plain")
    h.create_topic("own", configs={"retention.ms": "5000"})
    assert incremental(h, [(BROKER, "", [("log.retention.ms", SET, "60000")])]) == [ok(BROKER, "")]
    assert h.replicas.get_log("plain", 0).config.retention_ms == 60000
    assert h.replicas.get_log("own", 0).config.retention_ms == 5000
    assert describe(h, TOPIC, "plain", ["retention.ms"]) == {
        "retention.ms": ("60000", 3, False, [("log.retention.ms", "60000", 3),
                                             ("log.retention.hours", "168", 5)])
    }  # fmt: skip
    assert describe(h, TOPIC, "own", ["retention.ms"])["retention.ms"] == (
        "5000", 1, False,
        [("retention.ms", "5000", 1), ("log.retention.ms", "60000", 3),
         ("log.retention.hours", "168", 5)],
    )  # fmt: skip
    # the cluster-default resource lists what is set there, with its own synonyms only
    assert describe(h, BROKER, "") == {
        "log.retention.ms": ("60000", 3, False, [("log.retention.ms", "60000", 3)]),
        "min.insync.replicas": ("1", 3, False, [("min.insync.replicas", "1", 3)]),
    }
    # this broker's: every key; the dynamic key's source and synonyms
    mine = describe(h, BROKER, "1")
    assert mine["log.retention.ms"] == (
        "60000", 3, False, [("log.retention.ms", "60000", 3), ("log.retention.hours", "168", 5)]
    )
    assert mine["log.retention.hours"] == ("168", 5, True, [("log.retention.hours", "168", 5)])
    assert mine["num.partitions"][2] is True  # read-only: not dynamic
    assert mine["message.max.bytes"][2] is False


def test_per_broker_wins_over_the_cluster_default_and_delete_falls_back(h):
    h.create_topic("t")
    assert incremental(h, [(BROKER, "", [("message.max.bytes", SET, "3000")]),
                           (BROKER, "1", [("message.max.bytes", SET, "2000")])]) == [
        ok(BROKER, ""), ok(BROKER, "1")]  # fmt: skip
    assert h.replicas.get_log("t", 0).config.max_message_bytes == 2000
    assert h.config.get("message.max.bytes") == 2000
    assert describe(h, BROKER, "1", ["message.max.bytes"])["message.max.bytes"] == (
        "2000", 2, False,
        [("message.max.bytes", "2000", 2), ("message.max.bytes", "3000", 3),
         ("message.max.bytes", "1048588", 5)],
    )  # fmt: skip
    assert describe(h, TOPIC, "t", ["max.message.bytes"])["max.message.bytes"][:2] == ("2000", 2)
    assert incremental(h, [(BROKER, "1", [("message.max.bytes", DELETE, None)])]) == [ok(BROKER, "1")]
    assert h.replicas.get_log("t", 0).config.max_message_bytes == 3000
    assert incremental(h, [(BROKER, "", [("message.max.bytes", DELETE, None)])]) == [ok(BROKER, "")]
    assert h.replicas.get_log("t", 0).config.max_message_bytes == 1048588


def test_legacy_alter_configs_on_the_broker_replaces_its_dynamic_set(h):
    assert incremental(h, [(BROKER, "1", [("log.retention.ms", SET, "100"),
                                          ("log.segment.bytes", SET, "2000000")])]) == [ok(BROKER, "1")]  # fmt: skip
    assert legacy(h, [(BROKER, "1", {"log.retention.bytes": "1000"})]) == [ok(BROKER, "1")]
    assert h.config.dynamic_configs(True) == {"log.retention.bytes": "1000"}
    assert h.config.get("log.segment.bytes") == 1073741824
    assert legacy(h, [(BROKER, "1", {"num.partitions": "2"})]) == [
        (ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(num.partitions)",
         BROKER, "1")
    ]  # fmt: skip


def test_custom_broker_keys_are_kept_and_reported_as_kafka_reports_them(h):
    assert incremental(h, [(BROKER, "1", [("my.plugin.setting", SET, "x")])]) == [ok(BROKER, "1")]
    body = {"resources": [{"resource_type": BROKER, "resource_name": "1",
                           "configuration_keys": ["my.plugin.setting"]}],
            "include_synonyms": True, "include_documentation": False}  # fmt: skip
    (c,) = h.request(DESCRIBE_CONFIGS, 4, body).results[0].configs
    assert (c.value, int(c.config_source), c.read_only, c.is_sensitive, int(c.config_type)) == (
        None, 2, True, True, 0
    )
    assert [(s.name, s.value, int(s.source)) for s in c.synonyms] == [("my.plugin.setting", None, 2)]


def test_the_cluster_default_records_min_insync_replicas_and_keeps_it(tmp_path):
    """KIP-966 (ELR, on in new Kafka 4.1+ clusters): at start the cluster default layer gets
    min.insync.replicas with the static value unless it has one; removing it is refused;
    changing it is allowed and survives a restart (not reset to the static value)."""
    h = CoreHarness(tmp_path / "d", {"min.insync.replicas": "2"})
    try:
        assert h.config.dynamic_configs(False) == {"min.insync.replicas": "2"}
        message = ("Cluster-level min.insync.replicas cannot be removed while eligible leader replicas are "
                   "enabled (KIP-966).")  # fmt: skip
        assert incremental(h, [(BROKER, "", [("min.insync.replicas", DELETE, None)])]) == [
            (ErrorCode.invalid_config, message, BROKER, "")]  # fmt: skip
        assert legacy(h, [(BROKER, "", {"log.retention.ms": "1"})]) == [
            (ErrorCode.invalid_config, message, BROKER, "")]  # fmt: skip
        assert incremental(h, [(BROKER, "", [("min.insync.replicas", SET, "1")])]) == [ok(BROKER, "")]
        # this broker's own layer may set and delete it freely
        assert incremental(h, [(BROKER, "1", [("min.insync.replicas", SET, "3")])]) == [ok(BROKER, "1")]
        assert incremental(h, [(BROKER, "1", [("min.insync.replicas", DELETE, None)])]) == [ok(BROKER, "1")]
    finally:
        h.close()
    h = CoreHarness(tmp_path / "d", {"min.insync.replicas": "2"})
    try:
        assert h.config.dynamic_configs(False) == {"min.insync.replicas": "1"}
    finally:
        h.close()


def test_dynamic_broker_validate_only(h):
    assert incremental(h, [(BROKER, "", [("log.retention.ms", SET, "1")])],
                       validate_only=True) == [ok(BROKER, "")]  # fmt: skip
    assert h.config.dynamic_configs(False) == MIN_ISR_RECORD and h.config.get("log.retention.ms") is None


def test_dynamic_broker_configs_survive_a_restart_and_invalid_ones_are_dropped(tmp_path):
    h = CoreHarness(tmp_path / "d")
    try:
        h.create_topic("t")
        assert incremental(h, [(BROKER, "", [("log.retention.ms", SET, "60000")]),
                               (BROKER, "1", [("compression.type", SET, "lz4"),
                                              ("producer.id.expiration.ms", SET, "1000")])]) == [
            ok(BROKER, ""), ok(BROKER, "1")]  # fmt: skip
        assert json.loads((h.root / BROKER_CONFIGS_FILE).read_text()) == {
            "version": 1,
            "default": {"log.retention.ms": "60000", **MIN_ISR_RECORD},
            "broker": {"compression.type": "lz4", "producer.id.expiration.ms": "1000"},
        }
    finally:
        h.close()
    h = CoreHarness(tmp_path / "d")
    try:
        assert h.config.get("log.retention.ms") == 60000
        assert h.config.get("producer.id.expiration.ms") == 1000
        config = h.replicas.get_log("t", 0).config
        assert (config.retention_ms, config.compression_type) == (60000, "lz4")
        assert describe(h, TOPIC, "t", ["compression.type"])["compression.type"][:2] == ("lz4", 2)
    finally:
        h.close()
    # a value a later version refuses (edited by hand here) is dropped, not fatal
    path = tmp_path / "d" / BROKER_CONFIGS_FILE
    doc = json.loads(path.read_text())
    doc["broker"]["num.partitions"] = "3"
    doc["default"]["log.retention.ms"] = "soon"
    path.write_text(json.dumps(doc))
    h = CoreHarness(tmp_path / "d")
    try:
        assert h.config.dynamic_configs(False) == MIN_ISR_RECORD
        assert h.config.dynamic_configs(True) == {
            "compression.type": "lz4", "producer.id.expiration.ms": "1000"
        }
        assert h.config.get("num.partitions") == 1
    finally:
        h.close()


# ---------------------------------------------------------------------------
# changes take effect


def test_lowered_retention_deletes_on_the_next_retention_pass(tmp_path):
    h = CoreHarness(tmp_path / "d", {"log.retention.check.interval.ms": "1000"})
    try:
        h.create_topic("t")
        for i in range(3):
            assert h.produce("t", 0, batch(b"v%d" % i, ts=NOW - 60_000)).error_code == ErrorCode.none
        plog = h.replicas.get_log("t", 0)
        h.loop.advance(2000)
        assert (plog.log_start_offset, plog.log_end_offset) == (0, 3)  # a week's retention
        assert incremental(h, [(TOPIC, "t", [("retention.ms", SET, "30000")])]) == [ok(TOPIC, "t")]
        h.loop.advance(1000)  # the next pass
        assert (plog.log_start_offset, plog.log_end_offset) == (3, 3)
    finally:
        h.close()


def test_lowered_max_message_bytes_refuses_the_next_large_produce(h):
    h.create_topic("t")
    big = batch(b"x", size=3000)
    assert h.produce("t", 0, big).error_code == ErrorCode.none
    assert incremental(h, [(TOPIC, "t", [("max.message.bytes", SET, "1000")])]) == [ok(TOPIC, "t")]
    r = h.produce("t", 0, big)
    assert r.error_code == ErrorCode.message_too_large
    assert h.produce("t", 0, batch(b"small")).error_code == ErrorCode.none
    # the broker default governs topics without their own value
    h.create_topic("u")
    assert incremental(h, [(BROKER, "", [("message.max.bytes", SET, "1000")])]) == [ok(BROKER, "")]
    assert h.produce("u", 0, big).error_code == ErrorCode.message_too_large


def test_min_insync_replicas_above_one_fails_acks_all(h):
    h.create_topic("t", configs={"min.insync.replicas": "2"})
    r = h.produce("t", 0, batch(b"a"), acks=1)
    assert (r.error_code, r.base_offset) == (ErrorCode.none, 0)
    r = produce_acks_all(h, "t", batch(b"b"))
    assert (r.error_code, r.error_message) == (
        ErrorCode.not_enough_replicas,
        ("The size of the current ISR Set(1) is insufficient to satisfy the min.isr requirement "
        "of 2 for partition t-0"),
    )
    assert incremental(h, [(TOPIC, "t", [("min.insync.replicas", DELETE, None)])]) == [ok(TOPIC, "t")]
    assert produce_acks_all(h, "t", batch(b"b")).error_code == ErrorCode.none


def test_timestamps_out_of_range_are_refused_with_record_errors(h):
    h.create_topic("t")
    future = NOW + HOUR + 1
    records = [Record(b"ok", timestamp=NOW), Record(b"late", timestamp=future),
               Record(b"later", timestamp=future + 5)]  # fmt: skip
    r = h.produce("t", 0, build_batch(records))
    assert (r.error_code, r.error_message) == (
        ErrorCode.invalid_timestamp,
        "One or more records have been rejected due to invalid timestamp",
    )
    window = f"[{NOW - LONG_MAX}, {NOW + HOUR}]"
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (1, (f"Timestamp {future} of message with offset 1 is out of range. The timestamp should "
            f"be within {window}")),
        (2, (f"Timestamp {future + 5} of message with offset 2 is out of range. The timestamp "
            f"should be within {window}")),
    ]  # fmt: skip
    assert h.replicas.get_log("t", 0).log_end_offset == 0
    # the bound is a topic config; an old record against before.max.ms
    assert incremental(h, [(TOPIC, "t", [("message.timestamp.after.max.ms", SET, str(LONG_MAX)),
                                         ("message.timestamp.before.max.ms", SET, "1000")])]) == [
        ok(TOPIC, "t")]  # fmt: skip
    old = h.produce("t", 0, build_batch([Record(b"old", timestamp=NOW - 1001)]))
    assert [(e.batch_index, e.batch_index_error_message) for e in old.record_errors] == [
        (0, (f"Timestamp {NOW - 1001} of message with offset 0 is out of range. The timestamp "
            f"should be within [{NOW - 1000}, {NOW + LONG_MAX - 2**64}]"))
    ]  # fmt: skip
    assert h.produce("t", 0, build_batch(records)).error_code == ErrorCode.none
    # LogAppendTime topics do not check
    h.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"})
    assert h.produce("lat", 0, build_batch(records)).error_code == ErrorCode.none


# ---------------------------------------------------------------------------
# compression.type


def _compressed_batch(codec, records, **header):
    """A batch of ``records`` compressed with ``codec`` (as a client builds it)."""
    from tidegate.record.compression import compress

    base = records[0].timestamp
    body = b"".join(encode_record(i, r.timestamp - base, r.key, r.value, r.headers)
                    for i, r in enumerate(records))  # fmt: skip
    payload = compress(codec, body)
    out = bytearray(HEADER_SIZE)
    write_header(out, size=HEADER_SIZE + len(payload), count=len(records), base_timestamp=base,
                 max_timestamp=max(r.timestamp for r in records), compression=codec, **header)  # fmt: skip
    out += payload
    set_crc(out, batch_crc((out,)))
    return out


RECORDS = [
    Record(b"v1", key=b"k1", timestamp=NOW - 30, headers=[("h", b"1"), ("h", None)]),
    Record(None, key=None, timestamp=NOW - 10),
    Record(b"x" * 5000, key=b"k3", timestamp=NOW - 20),
]


def _stored(h, topic):
    data = h.fetch(12, [(topic, None, [(0, 0, 10_000_000)])]).responses[0].partitions[0].records
    return data


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_batches_are_stored_in_the_topics_codec(h, source, target):
    codecs = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
    h.create_topic("t", configs={"compression.type": target})
    assert h.produce("t", 0, batch(b"first")).error_code == ErrorCode.none
    sent = _compressed_batch(source, RECORDS, producer_id=7, producer_epoch=2, base_sequence=0)
    r = h.produce("t", 0, sent)
    assert (r.error_code, r.base_offset) == (ErrorCode.none, 1)
    data = _stored(h, "t")
    [(_, _, _first), (base, last, stored)] = batches_in(data)
    assert (base, last) == (1, 3)
    header = read_header(stored)
    assert header.compression_type == codecs[target]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 0)
    assert (header.base_timestamp, header.max_timestamp, header.records_count) == (
        NOW - 30, NOW - 10, 3
    )
    assert [(c.offset, c.key, c.value, c.headers, c.timestamp) for c in decode_records(data)][1:] == [
        (1, b"k1", b"v1", (("h", b"1"), ("h", None)), NOW - 30),
        (2, None, None, (), NOW - 10),
        (3, b"k3", b"x" * 5000, (), NOW - 20),
    ]
    if source == codecs[target]:
        assert stored[HEADER_SIZE:] == bytes(sent[HEADER_SIZE:])  # kept as sent


def test_producer_keeps_every_codec_and_recompression_keeps_idempotence(h):
    h.create_topic("keep")
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        sent = _compressed_batch(codec, RECORDS)
        assert h.produce("keep", 0, sent).error_code == ErrorCode.none
    assert [read_header(b[2]).compression_type for b in batches_in(_stored(h, "keep"))] == [
        NONE, GZIP, SNAPPY, LZ4, ZSTD
    ]
    h.create_topic("z", configs={"compression.type": "zstd"})
    sent = _compressed_batch(GZIP, RECORDS, producer_id=11, producer_epoch=0, base_sequence=0)
    assert h.produce("z", 0, sent).base_offset == 0
    retry = h.produce("z", 0, sent)  # the same batch again: a duplicate, not appended
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert h.replicas.get_log("z", 0).log_end_offset == 3


def test_records_not_in_kafka_order_are_reencoded(h):
    """A batch whose records' offset deltas are not 0..n-1 or whose base timestamp is not
    the first record's is rebuilt record by record, as Kafka's MemoryRecordsBuilder."""
    h.create_topic("t", configs={"compression.type": "lz4"})
    body = encode_record(0, 5, b"a", b"1") + encode_record(2, 7, b"b", b"2")
    out = bytearray(HEADER_SIZE)
    write_header(out, size=HEADER_SIZE + len(body), count=2, base_timestamp=NOW - 100,
                 max_timestamp=NOW - 93)  # fmt: skip
    out += body
    set_crc(out, batch_crc((out,)))
    # lastOffsetDelta is 1 (two records) although the second record says delta 2
    assert h.produce("t", 0, out).error_code == ErrorCode.none
    data = _stored(h, "t")
    [(_, _, stored)] = batches_in(data)
    header = read_header(stored)
    assert (header.compression_type, header.base_timestamp, header.max_timestamp) == (
        LZ4, NOW - 95, NOW - 93
    )
    assert [(c.offset, c.key, c.timestamp) for c in decode_records(data)] == [
        (0, b"a", NOW - 95), (1, b"b", NOW - 93)
    ]


def test_a_rebuilt_batch_over_max_message_bytes_is_refused_with_kafkas_message(h):
    import os

    h.create_topic("t", configs={"compression.type": "uncompressed", "max.message.bytes": "3000"})
    # 61 header bytes + one record of 4,000 bytes (4,009 encoded): 4,070 once uncompressed
    sent = _compressed_batch(ZSTD, [Record(os.urandom(1000) * 4, timestamp=NOW)])
    assert len(sent) < 3000
    r = h.produce("t", 0, sent)
    assert r.error_code == ErrorCode.message_too_large
    assert r.error_message == (
        "Message batch size is 4070 bytes in append topartition t-0 which exceeds the maximum "
        "configured size of 3000."
    )


def test_log_append_time_topics_recompress_with_the_append_time(h):
    h.create_topic("t", configs={"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
    assert h.produce("t", 0, _compressed_batch(NONE, RECORDS)).error_code == ErrorCode.none
    [(_, _, stored)] = batches_in(_stored(h, "t"))
    header = read_header(stored)
    assert (header.compression_type, header.timestamp_type, header.max_timestamp) == (GZIP, 1, NOW)
    assert {c.timestamp for c in decode_records(_stored(h, "t"))} == {NOW}


def test_the_broker_default_compression_type_applies_to_topics_without_one(tmp_path):
    h = CoreHarness(tmp_path / "d", {"compression.type": "snappy"})
    try:
        h.create_topic("t")
        h.create_topic("own", configs={"compression.type": "producer"})
        for topic in ("t", "own"):
            assert h.produce(topic, 0, _compressed_batch(GZIP, RECORDS)).error_code == ErrorCode.none
        assert read_header(batches_in(_stored(h, "t"))[0][2]).compression_type == SNAPPY
        assert read_header(batches_in(_stored(h, "own"))[0][2]).compression_type == GZIP
        assert describe(h, TOPIC, "t", ["compression.type"])["compression.type"] == (
            "snappy", 4, False, [("compression.type", "snappy", 4), ("compression.type", "producer", 5)]
        )
        # the group coordinator's topic keeps its writes as they are, as Kafka's does
        h.apis.groups.offsets_log.log(create=True)
        assert h.replicas.get_log("__consumer_offsets", 0).config.compression_type == "producer"
    finally:
        h.close()
