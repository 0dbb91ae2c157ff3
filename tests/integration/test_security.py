"""SASL (PLAIN, SCRAM-SHA-256/512) and SCRAM administration with real clients.

One broker process with a PLAINTEXT and a SASL_PLAINTEXT listener on loopback, users
from a credentials file; confluent-kafka (librdkafka), kafka-python and a raw client.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid

import pytest
import scramp
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tests.conftest import BrokerProcess, wait_until
from tests.integration.clients import (
    USERS,
    alter_quotas,
    create_topic,
    roundtrip,
    sasl_overrides,
)
from tests.integration.rawclient import RawClient, decode_response
from tidegate.protocol.apis import ApiKey

pytestmark = pytest.mark.timeout(120)

SASL = "SASL_PLAINTEXT"
FIVE = [f"v{i}".encode() for i in range(5)]  # what roundtrip(conf, 5) reads back


@pytest.fixture
def secure(broker_factory, tmp_path):
    """A broker with a PLAINTEXT (``bootstrap``) and a SASL_PLAINTEXT listener, users USERS."""
    return broker_factory(sasl_overrides(tmp_path))


def sasl_conf(broker: BrokerProcess, mechanism: str, user: str, password: str, **extra) -> dict:
    return {
        "bootstrap.servers": broker.listener(SASL),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_produce_consume_over_sasl(secure, mechanism):
    got = roundtrip(sasl_conf(secure, mechanism, "alice", USERS["alice"]))
    assert got == [f"v{i}".encode() for i in range(50)]


def test_kafka_python_scram(secure):
    conf = {"bootstrap_servers": secure.listener(SASL), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bob",
            "sasl_plain_password": USERS["bob"]}
    got = roundtrip(conf, 20, client="kafka-python", prefix="kp-sec")
    assert got == [f"v{i}".encode() for i in range(20)]


def _auth_error(conf: dict) -> str:
    """The error librdkafka reports for a failed login (its timing detail removed)."""
    errors: list[str] = []
    p = Producer({**conf, "error_cb": lambda e: errors.append(e.str())})
    wait_until(lambda: errors, 15, step=lambda: p.poll(0.2), what="an authentication error")
    return re.sub(r" \(after \d+ms in state [A-Z_]+\)", "", errors[0])


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_and_unknown_user_same_client_error(secure, mechanism):
    wrong = _auth_error(sasl_conf(secure, mechanism, "alice", "not-her-password"))
    unknown = _auth_error(sasl_conf(secure, mechanism, "mallory", "not-her-password"))
    assert wrong == unknown
    assert "Authentication failed" in wrong


def _raw_scram_first(bootstrap: str, user: str):
    with RawClient.connect(bootstrap) as rc:
        rc.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        client = scramp.ScramClient(["SCRAM-SHA-256"], user, "wrong")
        first = rc.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first.auth_bytes.decode())
        final = rc.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()})
        closed = rc.closed_by_peer(5)
        return first, final, closed


def test_raw_scram_unknown_user_fails_at_the_same_step(secure):
    a_first, a_final, a_closed = _raw_scram_first(secure.listener(SASL), "alice")
    m_first, m_final, m_closed = _raw_scram_first(secure.listener(SASL), "mallory")
    assert a_first.error_code == m_first.error_code == 0
    assert a_final.error_code == m_final.error_code == 58
    assert a_final.error_message == m_final.error_message
    assert a_closed and m_closed


def test_request_before_authentication_closes_the_connection(secure):
    with RawClient.connect(secure.listener(SASL)) as rc:
        versions = rc.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                                       "client_software_version": "1"})
        assert versions.error_code == 0
        keys = {k.api_key for k in versions.api_keys}
        assert {17, 36, 50, 51} <= keys
        rc.send(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        assert rc.closed_by_peer(5)
    with RawClient.connect(secure.listener(SASL)) as rc:  # not even ApiVersions first
        rc.send(ApiKey.CREATE_TOPICS, 7, {"topics": [], "timeout": 1000, "validate_only": False})
        assert rc.closed_by_peer(5)
    assert "during SASL handshake" in secure.log_text()


def test_handshake_v0_raw_plain_token(secure):
    with RawClient.connect(secure.listener(SASL)) as rc:
        hs = rc.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        assert hs.error_code == 0 and "PLAIN" in hs.mechanisms
        rc.send_raw(len(b"\0alice\0alice-secret").to_bytes(4, "big") + b"\0alice\0alice-secret")
        assert rc.recv_frame() == b""
        md = rc.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        assert md.brokers[0].port == secure.listener_port(SASL)


def test_plaintext_listener_beside_sasl(secure):
    got = roundtrip({"bootstrap.servers": secure.bootstrap}, n=10)
    assert got == [f"v{i}".encode() for i in range(10)]
    with RawClient.connect(secure.bootstrap) as rc:
        md = rc.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        assert md.brokers[0].port == secure.port  # the listener the client is on
        hs = rc.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == 34  # ILLEGAL_SASL_STATE, as Kafka answers on PLAINTEXT


def test_scram_admin_new_user_logs_in_and_survives_restart(secure):
    admin = AdminClient(sasl_conf(secure, "SCRAM-SHA-256", "alice", USERS["alice"]))
    futs = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                     b"carol-pw"),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"dave-pw"),
    ])
    for f in futs.values():
        f.result(10)
    described = {u: f.result(10) for u, f in
                 admin.describe_user_scram_credentials(["carol", "dave"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["carol"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    assert [(i.mechanism, i.iterations) for i in described["dave"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)]
    with pytest.raises(KafkaException) as info:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    assert info.value.args[0].code() == 91  # RESOURCE_NOT_FOUND
    everyone = admin.describe_user_scram_credentials().result(10)
    assert set(everyone) == {"alice", "bob", "carol", "dave"}  # the file's two, the new two
    # too few iterations
    bad = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x")])
    with pytest.raises(KafkaException) as info:
        bad["erin"].result(10)
    assert info.value.args[0].code() == 93  # UNACCEPTABLE_CREDENTIAL
    # the new users log in at once, without a restart
    assert roundtrip(sasl_conf(secure, "SCRAM-SHA-256", "carol", "carol-pw"), 5) == FIVE
    assert roundtrip(sasl_conf(secure, "SCRAM-SHA-512", "dave", "dave-pw"), 5) == FIVE
    data_dir = secure.data_dir
    text = (data_dir / "scram-credentials.json").read_text()
    assert "carol-pw" not in text and "dave-pw" not in text
    secure.restart()  # waits for every listener
    assert roundtrip(sasl_conf(secure, "SCRAM-SHA-256", "carol", "carol-pw"), 5) == FIVE
    admin = AdminClient(sasl_conf(secure, "SCRAM-SHA-512", "dave", "dave-pw"))
    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])["carol"].result(10)
    err = _auth_error(sasl_conf(secure, "SCRAM-SHA-256", "carol", "carol-pw"))
    assert "Authentication failed" in err


def test_unsupported_mechanism(secure):
    with RawClient.connect(secure.listener(SASL)) as rc:
        rc.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        _, resp = decode_response(ApiKey.SASL_HANDSHAKE, 1, rc.recv_frame())
        assert resp.error_code == 33 and set(resp.mechanisms) == {"PLAIN", "SCRAM-SHA-256",
                                                                  "SCRAM-SHA-512"}
        assert rc.closed_by_peer(5)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_over_sasl(secure, mechanism):
    """The system kcat's librdkafka may be old: older releases repeat the client nonce in
    the SCRAM final message, which Kafka (and tidegate) accept."""
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}"]
    topic = f"kc-{mechanism.lower()}"
    sasl = secure.listener(SASL)
    subprocess.run(["kcat", "-b", sasl, *auth, "-t", topic, "-P"], input=b"hello\n",
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", sasl, *auth, "-t", topic, "-C", "-o", "beginning",
                          "-e", "-q"], capture_output=True, check=True, timeout=30)
    assert out.stdout == b"hello\n"


def test_user_quota_applies_to_the_sasl_principal(secure):
    """A producer_byte_rate for user alice throttles alice's SASL connections (librdkafka
    reports the broker's throttle) and not bob's: quotas see the authenticated user."""
    assert alter_quotas(secure.bootstrap, {"user": "alice"}, {"producer_byte_rate": 20_000}) == [(0, None)]
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(secure.bootstrap, topic, client="confluent")

    def throttled_as(user: str) -> int:
        throttles: list[int] = []
        p = Producer({
            **sasl_conf(secure, "PLAIN", user, USERS[user]), "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        })
        for _ in range(400):  # 400 KB: 40 KB/s over the minimum 10 s measuring span
            p.produce(topic, value=b"x" * 1000)
        assert p.flush(30) == 0
        deadline = time.monotonic() + 5
        while not throttles and time.monotonic() < deadline:
            p.poll(0.1)
        return max(throttles, default=0)

    assert throttled_as("alice") > 0
    assert throttled_as("bob") == 0
