"""The broker's quota glue (tidegate.server.client_quotas): KIP-546 validation and
filters, persistence, live application to the managers, and the throttle timer that
unmutes connections (real KafkaConnection objects on a fake transport, a real loop)."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace as NS

import pytest
from kio.schema.errors import ErrorCode

from tidegate.network.memory_pool import NONE
from tidegate.network.mute_state import MuteReason
from tidegate.network.socket_server import SocketServer
from tidegate.server.client_quotas import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    QUOTAS_FILE,
    BrokerQuotas,
    QuotaConfigError,
)
from tidegate.server.quotas import DEFAULT, UNLIMITED_BOUND, QuotaEntity

from .test_connection import ImmediateProcessor, connect


def entry(entity: dict, ops: dict):
    return NS(
        entity=[NS(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[NS(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()],
    )


def component(entity_type, match_type, match=None):
    return NS(entity_type=entity_type, match_type=match_type, match=match)


def errors(results):
    return [(r["error_code"], r["error_message"]) for r in results]


def described(quotas, components=(), strict=False):
    return {
        tuple((e["entity_type"], e["entity_name"]) for e in item["entity"]): {
            v["key"]: v["value"] for v in item["values"]
        }
        for item in quotas.describe(components, strict)
    }


@pytest.fixture
def quotas(tmp_path):
    return BrokerQuotas(data_dir=tmp_path)


def test_alter_applies_to_the_managers_at_once(quotas):
    assert not quotas.enabled
    assert errors(quotas.alter([entry({"user": "alice"}, {"request_percentage": 50})], False)) == [
        (ErrorCode.none, None)
    ]
    assert quotas.enabled
    assert quotas.request.quota("alice", "any").bound == 50
    assert quotas.produce.quota("alice", "any").bound == UNLIMITED_BOUND
    quotas.alter([entry({"user": None, "client-id": None}, {"producer_byte_rate": 1024})], False)
    assert quotas.produce.quota("bob", "c").bound == 1024
    assert quotas.produce.configured_quotas() == {QuotaEntity(DEFAULT, DEFAULT): 1024.0}
    quotas.alter([entry({"user": "alice"}, {"request_percentage": None})], False)
    quotas.alter([entry({"user": None, "client-id": None}, {"producer_byte_rate": None})], False)
    assert not quotas.enabled and quotas.entries == {}


def test_validate_only_changes_nothing(quotas, tmp_path):
    results = quotas.alter([entry({"client-id": "c"}, {"consumer_byte_rate": 10})], True)
    assert errors(results) == [(ErrorCode.none, None)]
    assert quotas.entries == {} and not quotas.enabled
    assert not (tmp_path / QUOTAS_FILE).exists()


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({"user": "a"}, {"bogus": 1}, "Invalid configuration key bogus"),
        ({"user": "a"}, {"producer_byte_rate": 1.5}, "Configuration producer_byte_rate must be a Long value"),
        ({"user": "a"}, {"request_percentage": 0}, "Configuration request_percentage must be a positive number, not 0.0"),
        ({"user": "a"}, {"consumer_byte_rate": -5}, "Configuration consumer_byte_rate must be a positive number, not -5.0"),
        ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
        ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 1}, "ip quotas (connection_creation_rate) are not supported by tidegate"),
    ],
)
def test_kafka_validation_is_invalid_request(quotas, entity, ops, message):
    good = entry({"client-id": "ok"}, {"producer_byte_rate": 100})
    results = quotas.alter([entry(entity, ops), good], False)
    assert errors(results) == [(ErrorCode.invalid_request, message), (ErrorCode.none, None)]
    assert list(quotas.entries) == [QuotaEntity(None, "ok")]  # the valid entry still applies


def test_a_long_value_within_epsilon_of_a_whole_number_is_accepted(quotas):
    assert errors(quotas.alter([entry({"user": "a"}, {"producer_byte_rate": 1000.0000001})], False)) == [
        (ErrorCode.none, None)
    ]


def test_describe_filters(quotas):
    quotas.alter(
        [
            entry({"user": "alice"}, {"request_percentage": 50}),
            entry({"user": None}, {"request_percentage": 10}),
            entry({"user": "alice", "client-id": "c1"}, {"producer_byte_rate": 1000}),
            entry({"client-id": "c1"}, {"consumer_byte_rate": 2000}),
            entry({"client-id": None}, {"consumer_byte_rate": 3000}),
        ],
        False,
    )
    assert len(described(quotas)) == 5
    assert described(quotas, [component("user", MATCH_TYPE_EXACT, "alice")]) == {
        (("user", "alice"),): {"request_percentage": 50.0},
        (("user", "alice"), ("client-id", "c1")): {"producer_byte_rate": 1000.0},
    }
    assert described(quotas, [component("user", MATCH_TYPE_EXACT, "alice")], strict=True) == {
        (("user", "alice"),): {"request_percentage": 50.0},
    }
    assert described(quotas, [component("user", MATCH_TYPE_DEFAULT)]) == {
        (("user", None),): {"request_percentage": 10.0},
    }
    assert set(described(quotas, [component("client-id", MATCH_TYPE_SPECIFIED)])) == {
        (("user", "alice"), ("client-id", "c1")),
        (("client-id", "c1"),),
    }
    assert set(described(quotas, [component("client-id", MATCH_TYPE_SPECIFIED)], strict=True)) == {
        (("client-id", "c1"),),
    }
    assert described(quotas, [component("user", MATCH_TYPE_EXACT, "bob")]) == {}


@pytest.mark.parametrize(
    "components",
    [
        [component("user", MATCH_TYPE_EXACT, "a"), component("user", MATCH_TYPE_DEFAULT)],
        [component("group", MATCH_TYPE_SPECIFIED)],
        [component("user", MATCH_TYPE_EXACT, None)],
        [component("user", 7)],
        [component("ip", MATCH_TYPE_SPECIFIED), component("user", MATCH_TYPE_SPECIFIED)],
    ],
)
def test_describe_rejects_bad_filters(quotas, components):
    with pytest.raises(QuotaConfigError):
        quotas.describe(components, False)


def test_persisted_across_restarts(tmp_path):
    first = BrokerQuotas(data_dir=tmp_path)
    first.alter(
        [
            entry({"user": "alice", "client-id": None}, {"producer_byte_rate": 1000, "request_percentage": 25}),
            entry({"client-id": "c"}, {"consumer_byte_rate": 5000}),
        ],
        False,
    )
    path = tmp_path / QUOTAS_FILE
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert {"entity": {"user": "alice", "client-id": None},
            "values": {"producer_byte_rate": 1000.0, "request_percentage": 25.0}} in data["quotas"]
    assert [p.name for p in tmp_path.iterdir()] == [QUOTAS_FILE]  # no temporary file left
    second = BrokerQuotas(data_dir=tmp_path)
    second.load()
    assert second.entries == first.entries
    assert second.enabled
    assert second.produce.quota("alice", "x").bound == 1000
    assert second.fetch.quota("anyone", "c").bound == 5000


def test_a_bound_change_applies_to_a_live_counter(quotas):
    """Kafka re-evaluates the quota config of existing sensors: a connection's next
    record is checked against the new bound, on the same samples."""
    now = 1_000_000
    quotas.alter([entry({"client-id": "c"}, {"producer_byte_rate": 1_000_000})], False)
    assert quotas.produce.maybe_record_and_get_throttle_time_ms("u", "c", 50_000, now) == 0
    quotas.alter([entry({"client-id": "c"}, {"producer_byte_rate": 1000})], False)
    # 50 kB + 1 byte over a padded 10 s window = 5 kB/s, five times the new bound
    assert quotas.produce.maybe_record_and_get_throttle_time_ms("u", "c", 1, now) == pytest.approx(40_000, abs=10)


def test_throttle_mutes_and_one_timer_unmutes_in_order():
    async def main():
        server = SocketServer(ImmediateProcessor(), NONE, max_request_size=1000)
        quotas = BrokerQuotas()
        a, ta = connect(server)
        b, tb = connect(server)
        quotas.throttle(quotas.produce, a, "ANONYMOUS", "a", 120)
        quotas.throttle(quotas.request, b, "ANONYMOUS", "b", 40)
        b.mute(MuteReason.MEMORY)  # another reason, which the throttle's end must not lift
        assert ta.paused and tb.paused
        assert quotas.produce.queue_size == 1 and quotas.request.queue_size == 1
        start = time.monotonic()
        while quotas.request.queue_size:
            await asyncio.sleep(0.005)
        assert 0.035 <= time.monotonic() - start < 0.1
        assert not b.mute_state.has(MuteReason.THROTTLE) and b.mute_state.has(MuteReason.MEMORY)
        assert tb.paused and ta.paused
        while quotas.produce.queue_size:
            await asyncio.sleep(0.005)
        assert 0.115 <= time.monotonic() - start < 0.2
        assert not ta.paused
        b.unmute(MuteReason.MEMORY)
        assert not tb.paused

    asyncio.run(main())


def test_an_earlier_throttle_rearms_the_timer_and_a_closed_connection_is_skipped():
    async def main():
        server = SocketServer(ImmediateProcessor(), NONE, max_request_size=1000)
        quotas = BrokerQuotas()
        a, _ = connect(server)
        b, tb = connect(server)
        quotas.throttle(quotas.fetch, a, "ANONYMOUS", "a", 500)
        quotas.throttle(quotas.fetch, b, "ANONYMOUS", "b", 30)  # earlier: the timer moves
        a.close()
        await asyncio.sleep(0.08)
        assert not tb.paused
        assert quotas.fetch.queue_size == 1
        quotas.shutdown()

    asyncio.run(main())
