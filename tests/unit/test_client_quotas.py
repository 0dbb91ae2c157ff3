"""The broker's quota glue (tidegate.server.quota.quota_factory): KIP-546 validation and
filters, persistence, live application to the managers, and the throttle timers that
end connections' throttles (real KafkaConnection objects on a fake transport, the
scheduler on fake time)."""

from __future__ import annotations

import json

import pytest

from tests.fake_loop import FakeLoop
from tidegate.clock import MockClock
from tidegate.errors import ErrorCode
from tidegate.network.memory_pool import NONE
from tidegate.network.mute_state import MuteReason
from tidegate.network.request_channel import RequestChannel
from tidegate.network.socket_server import SocketServer
from tidegate.protocol.messages.alter_client_quotas import (
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    OpData,
)
from tidegate.protocol.messages.describe_client_quotas import ComponentData
from tidegate.server.quota.client_quota_manager import DEFAULT, UNLIMITED_BOUND, QuotaEntity
from tidegate.server.quota.quota_factory import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    QUOTAS_FILE,
    QuotaConfigError,
    QuotaManagers,
)
from tidegate.server.timer_reaper import TimerReaper

from .test_connection import ImmediateProcessor, connect


def entry(entity: dict, ops: dict) -> AlterClientQuotasRequestEntryData:
    return AlterClientQuotasRequestEntryData(
        entity=[AlterClientQuotasRequestEntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()],
    )


def component(entity_type, match_type, match=None) -> ComponentData:
    return ComponentData(entity_type=entity_type, match_type=match_type, match=match)


def described(quotas, components=(), strict=False):
    return {tuple(names.items()): values for names, values in quotas.describe(components, strict)}


@pytest.fixture
def quotas(tmp_path):
    return QuotaManagers(data_dir=tmp_path, clock=MockClock())


def test_alter_applies_to_the_managers_at_once(quotas):
    assert not quotas.enabled
    assert quotas.alter([entry({"user": "alice"}, {"request_percentage": 50})], False) == [
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
    assert results == [(ErrorCode.none, None)]
    assert quotas.entries == {} and not quotas.enabled
    assert not (tmp_path / QUOTAS_FILE).exists()


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({"user": "a"}, {"bogus": 1}, "Invalid configuration key bogus"),
        ({"user": "a"}, {"producer_byte_rate": 1.5}, "producer_byte_rate cannot be a fractional value."),
        ({"user": "a"}, {"request_percentage": 0}, "Quota request_percentage must be greater than 0"),
        ({"user": "a"}, {"consumer_byte_rate": -5}, "Quota consumer_byte_rate must be greater than 0"),
        ({"user": "a"}, {"request_percentage": float("inf")}, "Quota request_percentage must be a finite number"),
        ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
        ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
        ({"ip": "1.2.3.4", "user": "a"}, {"connection_creation_rate": 1},
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        ({"ip": "broker.example"}, {"connection_creation_rate": 1}, "broker.example is not a valid IP or resolvable host."),
        ({"ip": ""}, {"connection_creation_rate": 1}, "Empty ip not supported"),
        ({"ip": "1.2.3.4"}, {"producer_byte_rate": 1}, "Invalid configuration key producer_byte_rate"),
        ({"user": "a"}, {"connection_creation_rate": 1}, "Invalid configuration key connection_creation_rate"),
        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 2.5}, "connection_creation_rate cannot be a fractional value."),
        ({"ip": None}, {"connection_creation_rate": 2**31}, "Proposed value for connection_creation_rate is too large for an INT."),
    ],
)
def test_kafka_validation_is_invalid_request(quotas, entity, ops, message):
    good = entry({"client-id": "ok"}, {"producer_byte_rate": 100})
    results = quotas.alter([entry(entity, ops), good], False)
    assert results == [(ErrorCode.invalid_request, message), (ErrorCode.none, None)]
    assert list(quotas.entries) == [QuotaEntity(None, "ok")]  # the valid entry still applies


def test_ip_connection_creation_rates_are_set_described_persisted_and_removed(quotas, tmp_path):
    """KIP-612's ip entity: an address or the default, one INT key; the socket server
    reads the rate of an address (its own, else the default) on each new connection."""
    results = quotas.alter([entry({"ip": "10.0.0.1"}, {"connection_creation_rate": 5}),
                            entry({"ip": None}, {"connection_creation_rate": 50}),
                            entry({"ip": "::0:1"}, {"connection_creation_rate": 7})], False)  # fmt: skip
    assert results == [(ErrorCode.none, None)] * 3
    assert quotas.connection_rate_for_ip("10.0.0.1") == 5
    assert quotas.connection_rate_for_ip("::1") == 7  # addresses are compared normalized
    assert quotas.connection_rate_for_ip("10.0.0.2") == 50
    assert not quotas.enabled  # no request or byte-rate quota: their fast path stays on
    assert described(quotas, [component("ip", MATCH_TYPE_SPECIFIED)]) == {
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("ip", "::1"),): {"connection_creation_rate": 7.0},
    }
    assert described(quotas, [component("ip", MATCH_TYPE_DEFAULT)]) == {(("ip", None),): {"connection_creation_rate": 50.0}}
    again = QuotaManagers(data_dir=tmp_path, clock=MockClock())
    again.load()
    assert again.ip_rates == quotas.ip_rates
    quotas.alter([entry({"ip": None}, {"connection_creation_rate": None})], False)
    assert quotas.connection_rate_for_ip("10.0.0.2") is None


def test_a_long_value_within_epsilon_of_a_whole_number_is_accepted(quotas):
    assert quotas.alter([entry({"user": "a"}, {"producer_byte_rate": 1000.0000001})], False) == [
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
    first = QuotaManagers(data_dir=tmp_path, clock=MockClock())
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
    second = QuotaManagers(data_dir=tmp_path, clock=MockClock())
    second.load()
    assert second.entries == first.entries
    assert second.enabled
    assert second.produce.quota("alice", "x").bound == 1000
    assert second.fetch.quota("anyone", "c").bound == 5000


def test_a_bound_change_applies_to_a_live_counter(quotas):
    """Kafka re-evaluates the quota config of existing sensors: a connection's next
    record is checked against the new bound, on the same samples."""
    quotas.alter([entry({"client-id": "c"}, {"producer_byte_rate": 1_000_000})], False)
    assert quotas.produce.maybe_record_and_get_throttle_time_ms("u", "c", 50_000) == 0
    quotas.alter([entry({"client-id": "c"}, {"producer_byte_rate": 1000})], False)
    # 50 kB + 1 byte over a padded 10 s window = 5 kB/s, five times the new bound
    assert quotas.produce.maybe_record_and_get_throttle_time_ms("u", "c", 1) == pytest.approx(40_000, abs=10)


def _throttle(server, manager, conn, client_id, ms):
    """What KafkaApis does for a throttled response: a ThrottledChannel whose end goes to
    the RequestChannel, and the shell muting the connection (here by hand)."""
    cid = conn.connection_id
    manager.throttle("ANONYMOUS", client_id, ms, lambda: server.channel.end_throttling(cid))
    conn.mute(MuteReason.THROTTLE)


def _shell_with_quotas():
    """A SocketServer and the quota managers sharing one FakeLoop, whose reaper drives
    the throttle timers as the broker's scheduler does."""
    loop = FakeLoop()
    server = SocketServer(ImmediateProcessor(), RequestChannel(), NONE, 1000, loop, clock=loop.clock)
    quotas = QuotaManagers(clock=loop.clock)
    reaper = TimerReaper(loop.call_at)
    for name, timer in quotas.throttle_timers():
        reaper.add_timer(name, timer)
    return loop, server, quotas


def test_throttles_end_at_their_deadlines_and_lift_only_the_throttle():
    loop, server, quotas = _shell_with_quotas()
    start = loop.time_ms()
    a, ta = connect(server)
    b, tb = connect(server)
    _throttle(server, quotas.produce, a, "a", 120)
    _throttle(server, quotas.request, b, "b", 40)
    b.mute(MuteReason.MEMORY)  # another reason, which the throttle's end must not lift
    assert ta.paused and tb.paused
    assert quotas.produce.queue_size == 1 and quotas.request.queue_size == 1
    loop.run_until(start + 39)
    assert quotas.request.queue_size == 1 and b.mute_state.has(MuteReason.THROTTLE)
    loop.run_until(start + 40)
    assert quotas.request.queue_size == 0
    assert not b.mute_state.has(MuteReason.THROTTLE) and b.mute_state.has(MuteReason.MEMORY)
    assert tb.paused and ta.paused
    loop.run_until(start + 119)
    assert ta.paused
    loop.run_until(start + 120)
    assert not ta.paused and quotas.produce.queue_size == 0
    b.unmute(MuteReason.MEMORY)
    assert not tb.paused
    assert loop.armed == []  # nothing left to wake up for


def test_an_earlier_throttle_moves_the_wakeup_and_a_closed_connection_is_skipped():
    loop, server, quotas = _shell_with_quotas()
    start = loop.time_ms()
    a, _ = connect(server)
    b, tb = connect(server)
    _throttle(server, quotas.fetch, a, "a", 500)
    assert loop.armed == [start + 400]  # the wheel bucket holding 500 (tick 400 level)
    _throttle(server, quotas.fetch, b, "b", 30)  # earlier: the wake-up moves
    assert loop.armed[0] == start + 20  # the tick-20 bucket holding 30: earlier than 400
    a.close()
    a.connection_lost(None)
    loop.run_until(start + 30)
    assert not tb.paused and quotas.fetch.queue_size == 1
    loop.run_until(start + 500)  # a's throttle ends with nobody to unmute
    assert quotas.fetch.queue_size == 0
