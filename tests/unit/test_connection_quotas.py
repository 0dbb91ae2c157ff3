"""ConnectionQuotas and the idle expiry, sans-IO (Kafka's ConnectionQuotasTest cases)."""

from __future__ import annotations

import pytest

from tidegate.network.connection_quotas import (
    ConnectionQuotas,
    IdleExpiryManager,
    QuotaLimits,
    parse_per_ip_overrides,
)
from tidegate.utils import INT32_MAX


def quotas(**kw) -> tuple[ConnectionQuotas, list[QuotaLimits]]:
    box = [QuotaLimits(**kw)]
    return ConnectionQuotas(lambda: box[0]), box


def test_per_ip_limit_refuses_the_n_plus_first_and_counts_it_until_closed():
    q, _ = quotas(max_connections_per_ip=2)
    assert q.inc("PLAINTEXT", "127.0.0.1")
    assert q.inc("PLAINTEXT", "127.0.0.1")
    assert not q.inc("PLAINTEXT", "127.0.0.1")  # TooManyConnections
    assert q.get("127.0.0.1") == 3  # counted until the close decrements it
    assert q.refused_per_ip_total == {"PLAINTEXT": 1}
    assert q.inc("PLAINTEXT", "127.0.0.2")  # another address is not affected
    q.dec("PLAINTEXT", "127.0.0.1")  # the refused one closes: still 2 open
    assert not q.inc("PLAINTEXT", "127.0.0.1")
    q.dec("PLAINTEXT", "127.0.0.1")
    q.dec("PLAINTEXT", "127.0.0.1")  # one of the two closes
    assert q.inc("PLAINTEXT", "127.0.0.1")
    assert q.get("127.0.0.1") == 2


def test_per_ip_override_and_dynamic_change():
    q, box = quotas(max_connections_per_ip=1, per_ip_overrides={"127.0.0.3": 3})
    assert all(q.inc("L", "127.0.0.3") for _ in range(3))
    assert not q.inc("L", "127.0.0.3")
    assert q.inc("L", "127.0.0.2")
    assert not q.inc("L", "127.0.0.2")
    box[0] = QuotaLimits(max_connections_per_ip=10)  # applied to the next connection
    assert q.inc("L", "127.0.0.2")


def test_dec_without_connections_raises():
    q, _ = quotas()
    with pytest.raises(ValueError):
        q.dec("L", "10.0.0.1")


def test_broker_and_listener_slots():
    q, box = quotas(max_connections=3, listener_max_connections={"A": 1})
    assert q.slot_available("A")
    q.inc("A", "h")
    assert not q.slot_available("A")  # the listener's own limit
    assert q.slot_available("B")
    q.inc("B", "h")
    q.inc("B", "h")
    assert not q.slot_available("B")  # broker-wide: 3 open
    q.dec("A", "h")
    assert q.slot_available("B") and q.slot_available("A")
    box[0] = QuotaLimits(max_connections=2)
    assert not q.slot_available("B")


def test_creation_rate_throttles_with_kafkas_quota_arithmetic():
    # 2 windows of 1 s: the rate divides by at least 1 s, so a bound of 2/s lets 2 in
    q, _ = quotas(max_connection_creation_rate=2, quota_window_num=2, quota_window_size_ms=1000)
    now = 1_000_000
    assert q.record_connection("L", now) == 0
    assert q.record_connection("L", now) == 0
    delay = q.record_connection("L", now)
    # observed 3/s against 2/s over a 1000 ms window: (3 - 2) / 2 * 1000
    assert delay == 500
    assert q.throttled_total == {"L": 1}
    assert q.accept_rate("L", now) == pytest.approx(3.0)
    assert q.accept_rate(None, now) == pytest.approx(3.0)
    assert q.throttle_time_avg("L", now) == pytest.approx(500 / 3)
    # once the windows have passed, connections are accepted at once again
    assert q.record_connection("L", now + 5000) == 0


def test_listener_creation_rate_is_separate_from_other_listeners():
    q, _ = quotas(listener_creation_rate={"A": 1}, quota_window_num=2, quota_window_size_ms=1000)
    now = 5_000
    assert q.record_connection("A", now) == 0
    # 2/s against 1/s over the 1000 ms minimum window: (2 - 1) / 1 * 1000
    assert q.record_connection("A", now) == 1000
    assert all(q.record_connection("B", now) == 0 for _ in range(10))


def test_unlimited_by_default():
    q, _ = quotas()
    assert QuotaLimits().max_connections == INT32_MAX
    for _ in range(100):
        assert q.record_connection("L", 0) == 0
        assert q.slot_available("L")
        assert q.inc("L", "h")


def test_parse_per_ip_overrides():
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides("127.0.0.2:5, 10.1.2.3:0", resolve=False) == {
        "127.0.0.2": 5, "10.1.2.3": 0,
    }
    assert parse_per_ip_overrides("localhost:7") == {"127.0.0.1": 7}
    with pytest.raises(ValueError):
        parse_per_ip_overrides("nohost")


def test_idle_expiry_in_order_of_last_activity():
    idle = IdleExpiryManager(100)
    idle.update(1, 0)
    idle.update(2, 10)
    idle.update(3, 20)
    assert idle.expired(100) == []
    assert idle.next_expiry_ms() == 101
    idle.update(1, 50)  # activity moves it to the back
    assert idle.expired(111) == [2]
    assert idle.expired(151) == [2, 3, 1]
    idle.remove(2)
    assert idle.expired(151) == [3, 1]
    idle.remove(3)
    idle.remove(1)
    assert idle.next_expiry_ms() is None


def test_overrides_key_is_validated_when_set():
    from tidegate.config import BrokerConfig
    from tidegate.config.definitions import ConfigError

    assert BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.2:3,localhost:0"})
    with pytest.raises(ConfigError, match="improperly formatted"):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.2"})
    with pytest.raises(ConfigError, match="improperly formatted"):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.2:-1"})


def test_per_ip_zero_needs_overrides():
    from tidegate.config import BrokerConfig
    from tidegate.config.definitions import ConfigError

    with pytest.raises(ConfigError, match="can be set to zero only if"):
        BrokerConfig({"max.connections.per.ip": "0"})
    config = BrokerConfig({"max.connections.per.ip": "0",
                           "max.connections.per.ip.overrides": "127.0.0.1:10"})
    with pytest.raises(ConfigError, match="can be set to zero only if"):
        config.validate_dynamic({"max.connections.per.ip.overrides": ""}, per_broker=True)
    config.validate_dynamic({"max.connections.per.ip": "5", "max.connections.per.ip.overrides": ""},
                            per_broker=True)
