"""Connection limits (KIP-306/402/612, docs/security.md#connection-limits) with raw
sockets from several loopback addresses, beside real clients.

Every test opens a bounded number of connections (at most a dozen) and waits at most
a few seconds for each outcome.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.conftest import metrics_overrides, wait_until
from tests.integration.clients import (
    admin_client,
    configs_cli,
    roundtrip,
    sample,
    sasl_overrides,
    scrape,
)
from tests.integration.rawclient import RawClient
from tidegate.errors import ErrorCode
from tidegate.protocol.apis import ApiKey

pytestmark = pytest.mark.timeout(120)

VERSIONS = {"client_software_name": "raw", "client_software_version": "1"}


def served(rc: RawClient) -> bool:
    """True if the broker answers an ApiVersions on this connection."""
    try:
        return rc.request(ApiKey.API_VERSIONS, 3, VERSIONS).error_code == 0
    except (ConnectionError, OSError, AssertionError):
        return False


def open_served(bootstrap: str, source: str, stack: contextlib.ExitStack) -> RawClient:
    rc = stack.enter_context(RawClient.connect(bootstrap, source=source))
    assert served(rc), f"a connection from {source} was not served"
    return rc


def metric(broker, name: str, listener: str = "PLAINTEXT") -> float:
    value = sample(scrape(broker.metrics_url), name, listener=listener)
    assert value is not None, name
    return value


def alter_broker_config(bootstrap: str, **configs: str) -> None:
    admin = admin_client(bootstrap, client="confluent")
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()
    ])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)


def test_per_ip_limit_refuses_the_next_connection_while_other_ips_connect(broker_factory):
    broker = broker_factory({
        "max.connections.per.ip": "2",
        "max.connections.per.ip.overrides": "127.0.0.3:4",
        **metrics_overrides(),
    })
    bootstrap = broker.bootstrap
    with contextlib.ExitStack() as stack:
        local = [open_served(bootstrap, "127.0.0.1", stack) for _ in range(2)]
        with RawClient.connect(bootstrap, source="127.0.0.1") as third:
            assert third.closed_by_peer(5)  # refused at once, as Kafka's TooManyConnections
        # other addresses are not affected: their own limit, and the override
        for _ in range(2):
            open_served(bootstrap, "127.0.0.2", stack)
        with RawClient.connect(bootstrap, source="127.0.0.2") as over:
            assert over.closed_by_peer(5)
        for _ in range(4):
            open_served(bootstrap, "127.0.0.3", stack)
        with RawClient.connect(bootstrap, source="127.0.0.3") as over:
            assert over.closed_by_peer(5)
        # the connections that were admitted are still served
        assert all(served(rc) for rc in local)
        assert metric(broker, "tidegate_network_socketserver_connections_refused_total") == 3
        # a closed connection frees its address' slot
        local.pop().close()
        wait_until(lambda: served(stack.enter_context(RawClient.connect(bootstrap, source="127.0.0.1"))),
                   timeout=10, what="a slot from 127.0.0.1 after one closed")
    # max.connections.per.ip is dynamic: raised for this broker, then a real client works
    alter_broker_config(bootstrap, **{"max.connections.per.ip": "50"})
    assert roundtrip({"bootstrap.servers": bootstrap}, 5) == [f"v{i}".encode() for i in range(5)]


def test_broker_wide_limit_holds_the_next_connection_until_one_closes(broker_factory):
    broker = broker_factory({"max.connections": "3", **metrics_overrides()})
    bootstrap = broker.bootstrap
    with contextlib.ExitStack() as stack:
        first = open_served(bootstrap, "127.0.0.1", stack)
        open_served(bootstrap, "127.0.0.2", stack)
        open_served(bootstrap, "127.0.0.3", stack)
        # the 4th is accepted by the kernel but not read: Kafka's acceptor blocks
        waiting = stack.enter_context(RawClient.connect(bootstrap, source="127.0.0.4", timeout=1))
        waiting.send(ApiKey.API_VERSIONS, 3, VERSIONS)
        with pytest.raises(TimeoutError):
            waiting.recv_frame()
        assert metric(broker, "tidegate_network_socketserver_pendingconnections") == 1
        assert metric(broker, "tidegate_network_socketserver_connections_blocked_total") >= 1
        blocked = "kafka_network_acceptor_acceptorblockedpercent_total"
        assert metric(broker, blocked) >= 0.9e9  # ns: at least the 1 s the recv waited, so far
        first.close()  # a slot frees: the waiting connection is admitted and answered
        waiting.sock.settimeout(10)
        assert len(waiting.recv_frame()) > 0
        after = metric(broker, blocked)
        assert after >= 0.9e9 and metric(broker, blocked) == after  # the wait is over
        assert metric(broker, "tidegate_network_socketserver_pendingconnections") == 0
        assert metric(broker, "kafka_server_socketservermetrics_connection_count") == 3


def test_listener_limit_applies_to_its_listener_only(broker_factory, tmp_path):
    overrides = sasl_overrides(tmp_path)
    overrides["listener.name.plaintext.max.connections"] = "1"
    broker = broker_factory(overrides)
    plain = broker.listener("PLAINTEXT")

    def set_limit(rc: RawClient, broker_id: str, limit: str) -> Any:
        resource = {"resource_type": 4, "resource_name": broker_id, "configs": [
            {"name": "listener.name.plaintext.max.connections", "config_operation": 0, "value": limit}]}
        body = {"resources": [resource], "validate_only": False}
        return rc.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]

    with contextlib.ExitStack() as stack:
        first = open_served(plain, "127.0.0.1", stack)  # the listener's one connection
        # the listener's limit is per broker, not a cluster-wide default (Kafka's rule)
        refused = set_limit(first, "", "3")
        assert refused.error_code == ErrorCode.invalid_request
        assert "broker id must be specified" in refused.error_message
        waiting = stack.enter_context(RawClient.connect(plain, source="127.0.0.2", timeout=1))
        waiting.send(ApiKey.API_VERSIONS, 3, VERSIONS)
        with pytest.raises(TimeoutError):
            waiting.recv_frame()
        for _ in range(3):  # the SASL listener is not limited
            open_served(broker.listener("SASL_PLAINTEXT"), "127.0.0.1", stack)
        # raised at run time for this broker, the held connection is admitted at once
        assert set_limit(first, "1", "3").error_code == ErrorCode.none
        waiting.sock.settimeout(10)
        assert len(waiting.recv_frame()) > 0
        open_served(plain, "127.0.0.3", stack)  # the third of three
        third = stack.enter_context(RawClient.connect(plain, source="127.0.0.4", timeout=1))
        assert not served(third)


def test_creation_rate_delays_accepts(broker_factory):
    # 2 connections/s over 2 windows of 1 s: the first two at once, then spaced out
    broker = broker_factory({
        "max.connection.creation.rate": "2", "quota.window.num": "2", **metrics_overrides(),
    })
    bootstrap = broker.bootstrap
    created_before = metric(broker, "kafka_server_socketservermetrics_connection_creation_total")
    time.sleep(1.1)  # a fresh window: whatever the fixture's readiness check connected is out of it
    start = time.monotonic()
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(RawClient.connect(bootstrap)) for _ in range(6)]
        for rc in conns:
            rc.send(ApiKey.API_VERSIONS, 3, VERSIONS)
        for rc in conns:
            assert len(rc.recv_frame()) > 0  # every connection is served in the end
    elapsed = time.monotonic() - start
    throttled = metric(broker, "tidegate_network_socketserver_connections_throttled_total")
    assert throttled >= 3
    assert metric(broker, "kafka_server_socketservermetrics_connection_creation_total") == created_before + 6
    assert metric(broker, "kafka_server_socketservermetrics_connection_accept_throttle_time") > 0
    # 6 connections at 2/s cannot all be admitted within a second
    assert elapsed >= 1.0
    # the acceptor blocked for the rate at least that long (Kafka's AcceptorBlockedPercent)
    blocked = metric(broker, "kafka_network_acceptor_acceptorblockedpercent_total")
    print(f"blocked {blocked / 1e9:.2f} s of {elapsed:.2f} s")
    assert 0.9e9 <= blocked <= elapsed * 1e9


def test_an_ip_connection_creation_rate_quota_closes_the_excess_of_that_address_only(broker_factory):
    """KIP-612's per-IP quota set with `tidegate configs --entity-type ips` (AlterClientQuotas):
    127.0.0.2 may open one connection per second; its second in the same second is closed
    unserved after the throttle time, while 127.0.0.3 keeps connecting."""
    broker = broker_factory({"quota.window.num": "2", **metrics_overrides()})
    bootstrap = broker.bootstrap
    r = configs_cli(bootstrap, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.2",
                    "--add-config", "connection_creation_rate=1")  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "Completed updating config for ip 127.0.0.2.\n"), r.stderr
    r = configs_cli(bootstrap, "--describe", "--entity-type", "ips")
    assert r.stdout == "Quota configs for ip '127.0.0.2' are connection_creation_rate=1.0\n", r.stderr
    with contextlib.ExitStack() as stack:
        open_served(bootstrap, "127.0.0.2", stack)
        over = stack.enter_context(RawClient.connect(bootstrap, source="127.0.0.2", timeout=1))
        over.send(ApiKey.API_VERSIONS, 3, VERSIONS)
        for _ in range(3):  # other addresses are not held up meanwhile
            open_served(bootstrap, "127.0.0.3", stack)
        start = time.monotonic()
        assert over.closed_by_peer(5)  # never answered, closed after the throttle time
        assert time.monotonic() - start <= 3  # the throttle is capped at the 1 s window
    assert metric(broker, "tidegate_network_socketserver_connections_ip_throttled_total") == 1
    assert metric(broker, "kafka_server_socketservermetrics_ip_connection_accept_throttle_time") > 0
    r = configs_cli(bootstrap, "--alter", "--entity-type", "ips", "--entity-name", "broker.example",
                    "--add-config", "connection_creation_rate=1")  # fmt: skip
    assert r.returncode == 2 and "must be a valid IP or resolvable host" in r.stderr


def test_idle_and_never_authenticating_connections_are_closed(broker_factory, tmp_path):
    broker = broker_factory(sasl_overrides(tmp_path, **{
        "connections.max.idle.ms": "1500", **metrics_overrides(),
    }))
    plain = broker.listener("PLAINTEXT")
    sasl = broker.listener("SASL_PLAINTEXT")
    with contextlib.ExitStack() as stack:
        start = time.monotonic()
        idle = stack.enter_context(RawClient.connect(plain))
        silent = stack.enter_context(RawClient.connect(sasl))  # never sends a byte
        handshaken = stack.enter_context(RawClient.connect(sasl))
        handshaken.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})  # never authenticates
        active = stack.enter_context(RawClient.connect(plain))
        # the active connection stays open while it keeps sending
        while time.monotonic() - start < 3:
            assert served(active)
            time.sleep(0.3)
        for rc in (idle, silent, handshaken):
            assert rc.closed_by_peer(5)
        assert time.monotonic() - start >= 1.5
        assert served(active)
        # a real client over SASL beside it
        conf = {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                "sasl.password": "alice-secret"}
        assert roundtrip(conf, 5) == [f"v{i}".encode() for i in range(5)]
    assert metric(broker, "tidegate_network_socketserver_idle_closed_total") >= 1
    assert metric(broker, "tidegate_network_socketserver_idle_closed_total",
                  "SASL_PLAINTEXT") >= 2


def test_no_scram_store_without_a_sasl_listener(broker_factory, tmp_path):
    broker = broker_factory()
    assert roundtrip({"bootstrap.servers": broker.bootstrap}, 1) == [b"v0"]
    assert not (broker.data_dir / "scram-credentials.json").exists()
    sasl = broker_factory(sasl_overrides(tmp_path), name="sasl")
    assert (sasl.data_dir / "scram-credentials.json").exists()

