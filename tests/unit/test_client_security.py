"""tidegate.client.security: the JAAS parser, the config keys, and the SASL clients
(SCRAM against the RFC 7677 test vector and against the broker's own SCRAM server)."""

from __future__ import annotations

import base64

import pytest

from tidegate.client.errors import SaslAuthenticationError
from tidegate.client.security import (
    ClientSecurity,
    PlainClient,
    ScramClient,
    SecurityConfigError,
    parse_jaas_config,
)
from tidegate.security.scram import (
    ScramSaslServer,
    credential_from_salted_password,
    salted_password,
)

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
    'password="alice-secret";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
    '    username="bob"\n    password="p\\"w;=x";'
)


def test_jaas_plain_and_scram():
    assert parse_jaas_config(PLAIN_JAAS) == (
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        {"username": "alice", "password": "alice-secret"},
    )
    module, opts = parse_jaas_config(SCRAM_JAAS)
    assert module.endswith("ScramLoginModule")
    assert opts == {"username": "bob", "password": 'p"w;=x'}
    # bare words and other flags are Kafka's grammar too
    assert parse_jaas_config("a.B optional username=u tokenauth=true;")[1] == {
        "username": "u",
        "tokenauth": "true",
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ('a.B required username="u"', "must end with ';'"),
        ('a.B username="u";', "control flag"),
        ("a.B required username;", "key=value"),
        ('a.B required username="u', "unterminated"),
        ("a.B required; c.D required;", "contains 2 login modules, should be 1"),
    ],
)
def test_jaas_errors(text, message):
    with pytest.raises(SecurityConfigError, match=message):
        parse_jaas_config(text)


def test_config_defaults_and_keys():
    assert ClientSecurity.from_config({}).protocol == "PLAINTEXT"
    sec = ClientSecurity.from_config(
        {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.jaas.config": SCRAM_JAAS}
    )  # fmt: skip
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", 'p"w;=x'
    )  # fmt: skip
    assert 'p"w' not in repr(sec)
    sec = ClientSecurity.from_config(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": "u", "sasl.password": "p"}
    )  # fmt: skip
    assert (sec.username, sec.password, sec.uses_sasl, sec.uses_tls) == ("u", "p", True, False)


@pytest.mark.parametrize(
    "conf, message",
    [
        ({"security.protocol": "TLS"}, "String must be one of: PLAINTEXT, SSL"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": PLAIN_JAAS},
         "Kafka's default is GSSAPI"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
          "sasl.jaas.config": PLAIN_JAAS}, "OAUTHBEARER is not supported"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
          "sasl.jaas.config": PLAIN_JAAS}, "needs the login module"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs credentials"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
          "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                              'required username="u";'}, "needs password"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "only PEM"),
        ({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"}, "only PEM"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"},
         "cannot load the TLS trust store"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
         "expected https or empty"),
    ],
)  # fmt: skip
def test_config_errors(conf, message):
    with pytest.raises(SecurityConfigError, match=message):
        ClientSecurity.from_config(conf)


def test_endpoint_identification():
    on = ClientSecurity.from_config({"security.protocol": "SSL"})
    off = ClientSecurity.from_config(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert on.ssl_context().check_hostname and not off.ssl_context().check_hostname


def test_plain_client():
    c = PlainClient("alice", "pw")
    assert c.first() == b"\x00alice\x00pw"
    assert c.step(b"") is None and c.complete


def test_scram_sha256_rfc7677_vector():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.step(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert not c.complete
    assert c.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert c.complete


def _vector_client():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    c.first()
    c.step(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    return c


@pytest.mark.parametrize(
    "server_final, message",
    [
        (b"v=" + base64.b64encode(b"x" * 32), "invalid server signature"),
        (b"e=invalid-proof", "the broker says invalid-proof"),
        (b"garbage", "invalid SCRAM message"),
    ],
)
def test_scram_server_final_checked(server_final, message):
    c = _vector_client()
    with pytest.raises(SaslAuthenticationError, match=message):
        c.step(server_final)
    assert not c.complete


@pytest.mark.parametrize(
    "server_first, message",
    [
        (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=abcXYZ,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000", "less than the minimum 4096"),
        (b"r=abcXYZ,s=!!,i=4096", "invalid SCRAM server-first"),
    ],
)
def test_scram_server_first_checked(server_first, message):
    c = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    c.first()
    with pytest.raises(SaslAuthenticationError, match=message):
        c.step(server_first)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["carol", "odd,name=x"])
def test_scram_client_against_the_broker_server(mechanism, user):
    salt = b"0123456789abcdef"
    cred = credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, "pw", salt, 4096), 4096
    )
    server = ScramSaslServer(mechanism, lambda name: cred if name == user else None, b"k" * 32)
    client = ScramClient(mechanism, user, "pw")
    server_first = server.evaluate_response(client.first())
    server_final = server.evaluate_response(client.step(server_first))
    assert server.complete and server.authorization_id == user
    assert client.step(server_final) is None and client.complete
