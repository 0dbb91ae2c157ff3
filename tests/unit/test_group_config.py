"""Group configs (Kafka's GroupConfig/GroupConfigManager, reference 1.15): the keys and
their defaults (the broker's), validation on merged values, persistence, and their
effect on share groups on the broker's core (lock duration, share.auto.offset.reset)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.core_harness import CoreHarness
from tests.unit.test_apis import batch
from tests.unit.test_group_apis import call
from tests.unit.test_share_group_apis import ack, acquired, fetch, hb, share_fetch
from tidegate.config import BrokerConfig, ConfigError
from tidegate.coordinator.group.group_config import GROUP_CONFIG_KEYS, GroupConfigManager
from tidegate.protocol.apis import ApiKey
from tidegate.server.share.share_partition import ShareAutoOffsetReset
from tidegate.server.share.share_partition_manager import ShareGroupSettings


def test_every_key_defaults_to_the_brokers(tmp_path):
    m = GroupConfigManager(BrokerConfig({"group.share.record.lock.duration.ms": "20000"}), tmp_path)
    described = {name: (value, own) for name, value, own in m.describe("g")}
    assert set(described) == set(GROUP_CONFIG_KEYS)
    assert described["share.record.lock.duration.ms"] == ("20000", False)
    assert described["share.auto.offset.reset"] == ("latest", False)
    assert described["share.isolation.level"] == ("read_uncommitted", False)
    assert described["consumer.session.timeout.ms"] == ("45000", False)
    assert ShareGroupSettings.of(m.values("g")) == ShareGroupSettings(record_lock_duration_ms=20_000)


def test_set_values_are_kept_across_restarts_and_deleted_with_none(tmp_path):
    config = BrokerConfig({})
    m = GroupConfigManager(config, tmp_path)
    version = m.version
    m.alter("g", {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
                  "share.heartbeat.interval.ms": "6000"})  # fmt: skip
    assert m.version > version
    again = GroupConfigManager(config, tmp_path)
    assert again.configs("g") == m.configs("g")
    assert again.int_configs("g") == {"share.heartbeat.interval.ms": 6000}
    settings = ShareGroupSettings.of(again.values("g"))
    assert (settings.auto_offset_reset, settings.read_committed) == (ShareAutoOffsetReset.earliest(), True)
    again.alter("g", {"share.auto.offset.reset": None})
    assert again.configs("g") == {"share.isolation.level": "read_committed", "share.heartbeat.interval.ms": "6000"}
    assert {name: own for name, _, own in again.describe("g")}["share.auto.offset.reset"] is False


@pytest.mark.parametrize(("changes", "message"), [
    ({"share.unknown": "1"}, "Unknown group config name: share.unknown"),
    ({"share.record.lock.duration.ms": "1000"}, "must be at least 15000"),
    ({"share.record.lock.duration.ms": "70000"}, "must be at most 60000"),
    ({"share.record.lock.duration.ms": "abc"}, "must be an integer"),
    ({"share.heartbeat.interval.ms": "15000", "share.session.timeout.ms": "45000"}, None),
    ({"consumer.heartbeat.interval.ms": "15000", "consumer.session.timeout.ms": "15000"},
     "consumer.session.timeout.ms"),
    ({"share.auto.offset.reset": "sometime"}, "share.auto.offset.reset"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "share.auto.offset.reset"),
    ({"share.isolation.level": "READ_COMMITTED"}, "share.isolation.level"),
    ({"share.delivery.count.limit": "1"}, "must be at least 2"),
])  # fmt: skip
def test_updates_are_validated_on_the_merged_values(tmp_path, changes, message):
    m = GroupConfigManager(BrokerConfig({}), tmp_path)
    if message is None:
        m.alter("g", changes)
        return
    with pytest.raises(ConfigError, match=message):
        m.alter("g", changes)
    assert m.configs("g") == {}


def test_by_duration_parses(tmp_path):
    m = GroupConfigManager(BrokerConfig({}), tmp_path)
    m.alter("g", {"share.auto.offset.reset": "by_duration:PT1H"})
    assert ShareGroupSettings.of(m.values("g")).auto_offset_reset == ShareAutoOffsetReset.by_duration(3_600_000)


def test_a_group_config_sets_the_lock_duration_and_where_a_share_partition_starts(tmp_path):
    h = CoreHarness(tmp_path)
    topic_id = h.create_topic("t")
    h.produce("t", 0, batch(b"a", b"b"))
    h.core.group_configs.alter("g", {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": "20000"})  # fmt: skip
    assert call(h, ApiKey.SHARE_GROUP_HEARTBEAT, 1, hb()).error_code == 0
    f = share_fetch(h, fetch(topic_id))
    assert f.acquisition_lock_timeout == timedelta(seconds=20)
    assert acquired(f) == [(0, 0, 1, 1)]  # earliest: the records produced before anyone joined
    h.close()


def test_a_group_config_caps_the_in_flight_records_of_that_groups_share_partitions(tmp_path):
    # share.partition.max.record.locks set on one group: its share-partitions hold at most
    # that many records in flight; another group keeps the broker's bound (2000)
    h = CoreHarness(tmp_path)
    topic_id = h.create_topic("t")
    for _ in range(3):
        h.produce("t", 0, batch(*[b"r"] * 100))
    h.core.group_configs.alter("capped", {"share.auto.offset.reset": "earliest",
                                          "share.partition.max.record.locks": "100"})  # fmt: skip
    h.core.group_configs.alter("free", {"share.auto.offset.reset": "earliest"})

    def count(response):
        return sum(last - first + 1 for _p, first, last, _n in acquired(response))

    for group in ("capped", "free"):
        assert call(h, ApiKey.SHARE_GROUP_HEARTBEAT, 1, hb(group=group)).error_code == 0
    assert acquired(share_fetch(h, fetch(topic_id, group="capped"))) == [(0, 0, 99, 1)]
    assert count(share_fetch(h, fetch(topic_id, group="capped", epoch=1))) == 0  # at the bound
    assert count(share_fetch(h, fetch(topic_id, group="free"))) == 300
    # accepting the first 100 moves the start offset: room for the next 100
    a = call(h, ApiKey.SHARE_ACKNOWLEDGE, 1, ack(topic_id, {0: [(0, 99, 1)]}, epoch=2, group="capped"))
    assert [p.error_code for t in a.responses for p in t.partitions] == [0]
    assert acquired(share_fetch(h, fetch(topic_id, group="capped", epoch=3))) == [(0, 100, 199, 1)]
    h.close()


def test_group_resources_over_describe_configs_and_incremental_alter_configs(tmp_path):
    h = CoreHarness(tmp_path)

    def alter(name, *ops, validate_only=False):
        body = {"resources": [{"resource_type": 32, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": validate_only}
        (r,) = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
        return r.error_code, r.error_message

    def describe(name):
        body = {"resources": [{"resource_type": 32, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}
        (r,) = h.request(ApiKey.DESCRIBE_CONFIGS, 4, body).results
        return r.error_code, {c.name: (c.value, c.config_source) for c in r.configs}

    assert alter("g", ("share.auto.offset.reset", 0, "earliest"), validate_only=True) == (0, None)
    assert describe("g")[1]["share.auto.offset.reset"] == ("latest", 5)  # DEFAULT_CONFIG
    assert alter("g", ("share.auto.offset.reset", 0, "earliest")) == (0, None)
    assert describe("g")[1]["share.auto.offset.reset"] == ("earliest", 8)  # GROUP_CONFIG
    assert alter("g", ("share.unknown", 0, "1"))[0] == 40  # INVALID_CONFIG
    assert alter("g", ("share.isolation.level", 2, "x"))[0] == 40  # APPEND: not a list
    assert alter("", ("share.isolation.level", 0, "read_committed"))[0] == 42  # INVALID_REQUEST
    assert alter("g", ("share.auto.offset.reset", 1, None)) == (0, None)
    assert describe("g")[1]["share.auto.offset.reset"] == ("latest", 5)
    assert h.core.group_configs.configs("g") == {}
    h.close()
