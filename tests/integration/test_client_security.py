"""tidegate's own client side over SASL and TLS: ``tidegate.client.KafkaClient``
(metadata, ListOffsets, Fetch) and ``tidegate.producer.Producer`` against one real
broker process with SASL_PLAINTEXT, SSL and SASL_SSL listeners on loopback.

Users come from a credentials file (``clients.USERS``), certificates from trustme
(the ``pki`` fixture); failed logins must surface as
``SaslAuthenticationError`` at once, not be retried until a timeout.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import free_port, wait_until
from tests.integration.clients import USERS, Rec, produce, sasl_overrides, write_users
from tidegate.client import KafkaClient
from tidegate.client.errors import SaslAuthenticationError, SslAuthenticationError
from tidegate.client.fetcher import end_offsets, read_range
from tidegate.producer import Producer

pytestmark = pytest.mark.timeout(120)


def jaas(mechanism: str, user: str, password: str) -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return (
        f"org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";'
    )


@pytest.fixture(scope="module")
def listeners(module_broker_factory, tmp_path_factory, pki):
    """One broker with a PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL listener: {name: address}."""
    names = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
    proc = module_broker_factory({
        "listeners": ",".join(f"{n}://127.0.0.1:{free_port()}" for n in names),
        "sasl.credentials.file": str(write_users(tmp_path_factory.mktemp("users") / "users.json")),
        "ssl.keystore.location": str(pki["server"]),
        "ssl.truststore.location": str(pki["ca"]),
        "ssl.client.auth": "requested",
    })  # fmt: skip
    return {n: proc.listener(n) for n in names}


def tidegate_roundtrip(conf: dict, n: int = 30) -> list[bytes]:
    """Produce n records with the Producer, read them back with KafkaClient (Metadata,
    ListOffsets, Fetch), both with the same security keys."""
    topic = f"cs-{uuid.uuid4().hex[:8]}"
    bootstrap = conf["bootstrap.servers"]
    security = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    values = [Rec(b"k", f"v{i}".encode()) for i in range(n)]
    delivered = produce(bootstrap, topic, values, client="tidegate", partition=None, acks=-1,
                        linger_ms=2, conf=security)  # fmt: skip
    assert [d.offset for d in delivered] == list(range(n))
    with KafkaClient(bootstrap, security=security) as c:
        cluster = c.metadata([topic], timeout_ms=10_000)
        assert cluster.partition_count(topic) == 1
        # the broker names the listener the client came in on
        (broker,) = cluster.brokers.values()
        assert f"{broker.host}:{broker.port}" == conf["bootstrap.servers"]
        end = end_offsets(c, [(topic, 0)], timeout_ms=10_000)[(topic, 0)]
        got = [r.value for r in read_range(c, (topic, 0), 0, end, timeout_ms=10_000)]
    return got


EXPECTED = [f"v{i}".encode() for i in range(30)]


@pytest.mark.parametrize("mechanism, style", [
    ("PLAIN", "jaas"),
    ("SCRAM-SHA-256", "jaas"),
    ("SCRAM-SHA-512", "username"),  # librdkafka's sasl.username / sasl.password
])  # fmt: skip
def test_sasl_plaintext(listeners, mechanism, style):
    conf = {"bootstrap.servers": listeners["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism}  # fmt: skip
    if style == "jaas":
        conf["sasl.jaas.config"] = jaas(mechanism, "alice", USERS["alice"])
    else:
        conf |= {"sasl.username": "bob", "sasl.password": USERS["bob"]}
    got = tidegate_roundtrip(conf)
    assert got == EXPECTED


def test_ssl_with_truststore_file(listeners, pki):
    conf = {"bootstrap.servers": listeners["SSL"], "security.protocol": "SSL",
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"])}  # fmt: skip
    got = tidegate_roundtrip(conf)
    assert got == EXPECTED


def test_ssl_with_pem_text_and_client_certificate(listeners, pki):
    conf = {"bootstrap.servers": listeners["SSL"], "security.protocol": "SSL",
            "ssl.truststore.certificates": pki["ca"].read_text(),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["client"])}  # fmt: skip
    got = tidegate_roundtrip(conf)
    assert got == EXPECTED


def test_sasl_ssl_scram(listeners, pki):
    conf = {"bootstrap.servers": listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
            "ssl.truststore.location": str(pki["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas("SCRAM-SHA-512", "alice", USERS["alice"])}  # fmt: skip
    got = tidegate_roundtrip(conf)
    assert got == EXPECTED


def test_large_values_over_tls(listeners, pki):
    """Requests and responses far larger than a TLS record and the socket buffers."""
    conf = {"bootstrap.servers": listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
            "ssl.truststore.location": str(pki["ca"]), "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}  # fmt: skip
    topic = f"big-{uuid.uuid4().hex[:8]}"
    values = [bytes([i]) * (300_000 + i) for i in range(8)]
    bootstrap = conf["bootstrap.servers"]
    security = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    delivered = produce(bootstrap, topic, values, client="tidegate", partition=None, acks=-1,
                        linger_ms=None,
                        conf={**security, "batch.size": 1 << 20, "max.request.size": 4 << 20})
    assert [d.offset for d in delivered] == list(range(8))
    with KafkaClient(bootstrap, security=security) as c:
        c.metadata([topic], timeout_ms=10_000)
        got = [r.value for r in read_range(c, (topic, 0), 0, 8, partition_max_bytes=4 << 20,
                                           timeout_ms=10_000)]  # fmt: skip
    assert got == values


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_is_a_sasl_authentication_error(listeners, pki, protocol, mechanism):
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas(mechanism, "alice", "wrong"),
            "ssl.truststore.location": str(pki["ca"])}  # fmt: skip
    started = time.monotonic()
    with (
        KafkaClient(listeners[protocol], security=conf) as c,
        pytest.raises(SaslAuthenticationError, match="Authentication failed") as exc,
    ):
        c.bootstrap(timeout_ms=20_000)
    assert not exc.value.retriable
    assert time.monotonic() - started < 5  # raised at once, not after the timeout

    # the producer: the send (or its future) fails with the broker's message
    p = Producer({"bootstrap.servers": listeners[protocol], **conf, "max.block.ms": 20_000})
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        p.send("never", b"x").result(20)
    assert time.monotonic() - started < 5
    p.close()


def test_unknown_mechanism_on_the_broker(broker_factory, tmp_path):
    """A mechanism the listener does not enable: the broker's list is in the error."""
    proc = broker_factory(sasl_overrides(tmp_path, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"}))
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}  # fmt: skip
    with (
        KafkaClient(proc.listener("SASL_PLAINTEXT"), security=conf) as c,
        pytest.raises(SaslAuthenticationError, match=r"'PLAIN' not enabled.*SCRAM-SHA-512"),
    ):
        c.bootstrap(timeout_ms=20_000)


def test_untrusted_certificate_is_an_ssl_authentication_error(listeners, tmp_path):
    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    conf = {"security.protocol": "SSL", "ssl.truststore.location": str(other)}
    started = time.monotonic()
    with (
        KafkaClient(listeners["SSL"], security=conf) as c,
        pytest.raises(SslAuthenticationError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        c.bootstrap(timeout_ms=20_000)
    assert time.monotonic() - started < 5


def test_hostname_check_and_disabling_it(broker_factory, tmp_path):
    """A certificate for another name: refused by default (https), accepted with
    ssl.endpoint.identification.algorithm empty (the chain is still verified)."""
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("broker.example").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "broker.pem")
    )
    proc = broker_factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{free_port()}",
        "ssl.keystore.location": str(tmp_path / "broker.pem"),
    })  # fmt: skip
    ssl_address = proc.listener("SSL")
    conf = {"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "ca.pem")}
    with (
        KafkaClient(ssl_address, security=conf) as c,
        pytest.raises(SslAuthenticationError, match="IP address mismatch|hostname"),
    ):
        c.bootstrap(timeout_ms=20_000)
    conf["ssl.endpoint.identification.algorithm"] = ""
    with KafkaClient(ssl_address, security=conf) as c:
        # the broker names itself by the SSL listener the client came in on
        assert [b.address for b in c.bootstrap(timeout_ms=20_000).brokers.values()] == [ssl_address]


def test_login_retried_after_the_credentials_are_fixed(listeners):
    """A recorded login failure is raised while the node backs off; the next attempt
    after the backoff really logs in again (here: once the user exists)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    user = f"u{uuid.uuid4().hex[:6]}"
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": "late-pw"}  # fmt: skip
    with KafkaClient(listeners["SASL_PLAINTEXT"], security=conf, reconnect_backoff_ms=100) as c:
        with pytest.raises(SaslAuthenticationError):
            c.bootstrap(timeout_ms=10_000)
        admin = AdminClient({"bootstrap.servers": listeners["PLAINTEXT"]})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, b"late-pw")])[
            user
        ].result(10)
        brokers: list[str] = []

        def logged_in() -> bool:
            try:
                cluster = c.bootstrap(timeout_ms=10_000)
            except SaslAuthenticationError:
                return False
            brokers.extend(b.address for b in cluster.brokers.values())
            return True

        wait_until(logged_in, 10, interval=0.2, what="a login with the new credentials")
        assert brokers == [listeners["SASL_PLAINTEXT"]]


def test_tidegate_configs_command_config(listeners, pki, tmp_path):
    """`tidegate configs --command-config` (kafka-configs.sh's option) over SASL_SSL."""
    import subprocess
    import sys

    def run(props: str) -> subprocess.CompletedProcess:
        path = tmp_path / "client.properties"
        path.write_text(props)
        return subprocess.run(
            [sys.executable, "-m", "tidegate", "configs", "--bootstrap-server",
             listeners["SASL_SSL"], "--command-config", str(path), "--describe"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    base = (
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"ssl.truststore.location={pki['ca']}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="{pw}";\n'
    )
    r = run(base.replace("{pw}", USERS["alice"]))
    assert r.returncode == 0, r.stderr
    r = run(base.replace("{pw}", "wrong"))
    assert r.returncode == 1
    assert "Authentication failed" in r.stderr
    r = run("security.protocol=SASL_SSL\n")
    assert r.returncode == 2 and "GSSAPI" in r.stderr


def test_sasl_client_on_a_plaintext_listener(listeners):
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}  # fmt: skip
    with (
        KafkaClient(listeners["PLAINTEXT"], security=conf) as c,
        pytest.raises(SaslAuthenticationError, match=r"ILLEGAL_SASL_STATE.*a SASL listener\?"),
    ):
        c.bootstrap(timeout_ms=10_000)
