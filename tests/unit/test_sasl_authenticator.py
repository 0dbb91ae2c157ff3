"""The SASL state machine, PLAIN, SCRAM and the credential store, without sockets."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
import scramp

from tests.integration.rawclient import decode_response, encode_request
from tidegate.clock import MockClock
from tidegate.protocol.apis import ApiKey
from tidegate.security.authenticator import SaslServerAuthenticator, SaslState, generic_failure
from tidegate.security.credentials import (
    STORE_FILE,
    CredentialsError,
    CredentialStore,
    DescribeResult,
    StaticCredentials,
    load_credentials_file,
    parse_plain_jaas,
)
from tidegate.security.scram import (
    SaslAuthenticationError,
    SaslError,
    ScramSaslServer,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)

MECHS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def store(tmp_path=None, **plain) -> CredentialStore:
    static = StaticCredentials(plain=dict(plain))
    for user, pw in plain.items():
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            static.scram[(user, m)] = credential_from_password(m, pw)
    return CredentialStore(tmp_path, static, fsync=False)


def req(api_key: int, version: int, body: dict, cid: int = 1) -> bytes:
    return encode_request(api_key, version, cid, body)


def unframe(data: bytes) -> bytes:
    return data[4:]


def handshake(auth: SaslServerAuthenticator, mechanism: str, version: int = 1):
    step = auth.receive(req(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism}))
    _, resp = decode_response(ApiKey.SASL_HANDSHAKE, version, unframe(step.response))
    return step, resp


def authenticate(auth: SaslServerAuthenticator, token: bytes, version: int = 2, cid: int = 2):
    step = auth.receive(req(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}, cid))
    _, resp = decode_response(ApiKey.SASL_AUTHENTICATE, version, unframe(step.response))
    return step, resp


# -- RFC 7677 -----------------------------------------------------------------------
def test_rfc7677_test_vector():
    """RFC 7677 section 3: user "user", password "pencil", the exchange given there."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = credential_from_salted_password(
        "SCRAM-SHA-256", salt, salted_password("SCRAM-SHA-256", "pencil", salt, 4096), 4096
    )
    assert cred == credential_from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramSaslServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None, b"k" * 32,
                             server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate_response(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


def scram_exchange(auth, mechanism, user, password, version=2):
    client = scramp.ScramClient([mechanism], user, password)
    step, resp = authenticate(auth, client.get_client_first().encode(), version)
    if resp.error_code:
        return step, resp
    client.set_server_first(resp.auth_bytes.decode())
    step, resp = authenticate(auth, client.get_client_final().encode(), version, cid=3)
    if not resp.error_code:
        client.set_server_final(resp.auth_bytes.decode())  # verifies the server signature
    return step, resp


# -- the state machine ------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_success_after_api_versions(mechanism):
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    step = auth.receive(req(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                     "client_software_version": "1"}))
    assert step.forward and step.response is None and step.close is None
    assert auth.state is SaslState.HANDSHAKE_REQUEST
    step, resp = handshake(auth, mechanism)
    assert resp.error_code == 0 and list(resp.mechanisms) == MECHS
    step, resp = scram_exchange(auth, mechanism, "alice", "alice-secret")
    assert resp.error_code == 0 and step.close is None
    assert auth.complete and auth.principal == "alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_look_the_same(mechanism):
    outcomes = []
    for user, pw in (("alice", "wrong"), ("nobody", "wrong")):
        auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
        handshake(auth, mechanism)
        client = scramp.ScramClient([mechanism], user, pw)
        step, first = authenticate(auth, client.get_client_first().encode())
        assert first.error_code == 0 and step.close is None  # the unknown user gets a salt too
        server_first = first.auth_bytes.decode()
        client.set_server_first(server_first)
        step, resp = authenticate(auth, client.get_client_final().encode(), cid=3)
        assert step.close and auth.state is SaslState.FAILED
        outcomes.append((resp.error_code, resp.error_message, server_first.split(",")[2]))
    assert outcomes[0][:2] == outcomes[1][:2] == (58, generic_failure(mechanism))
    assert outcomes[0][2] == outcomes[1][2] == "i=4096"


def test_unknown_user_salt_is_stable():
    creds = store()
    salts = []
    for _ in range(2):
        auth = SaslServerAuthenticator(MECHS, creds)
        handshake(auth, "SCRAM-SHA-256")
        client = scramp.ScramClient(["SCRAM-SHA-256"], "ghost", "x")
        _, first = authenticate(auth, client.get_client_first().encode())
        salts.append(first.auth_bytes.decode().split(",")[1])
    assert salts[0] == salts[1]


def test_plain_success_wrong_password_and_unknown_user():
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    handshake(auth, "PLAIN")
    step, resp = authenticate(auth, b"\0alice\0alice-secret")
    assert resp.error_code == 0 and auth.complete and auth.principal == "alice"
    messages = []
    for token in (b"\0alice\0nope", b"\0ghost\0nope"):
        auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
        handshake(auth, "PLAIN")
        step, resp = authenticate(auth, token)
        assert step.close and resp.error_code == 58
        messages.append(resp.error_message)
    assert messages == ["Authentication failed: Invalid username or password"] * 2


def test_plain_malformed_and_authzid():
    for token, message in (
        (b"alice\0secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0\0secret", "Authentication failed: username not specified"),
        (b"bob\0alice\0alice-secret",
         "Authentication failed: Client requested an authorization id that is different from username"),
    ):
        auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
        handshake(auth, "PLAIN")
        _, resp = authenticate(auth, token)
        assert resp.error_message == message
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    handshake(auth, "PLAIN")
    _, resp = authenticate(auth, b"alice\0alice\0alice-secret")
    assert resp.error_code == 0


def test_handshake_v0_raw_tokens():
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    step, resp = handshake(auth, "SCRAM-SHA-256", version=0)
    assert resp.error_code == 0 and not auth.kafka_headers
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    step = auth.receive(client.get_client_first().encode())
    client.set_server_first(unframe(step.response).decode())
    step = auth.receive(client.get_client_final().encode())
    client.set_server_final(unframe(step.response).decode())
    assert auth.complete and auth.principal == "alice"
    # PLAIN v0: an empty framed token answers success
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    handshake(auth, "PLAIN", version=0)
    step = auth.receive(b"\0alice\0alice-secret")
    assert step.response == b"\0\0\0\0" and auth.complete
    auth = SaslServerAuthenticator(MECHS, store(alice="alice-secret"))
    handshake(auth, "PLAIN", version=0)
    step = auth.receive(b"\0alice\0bad")
    assert step.close and step.response is None


def test_unsupported_mechanism_answers_then_closes():
    auth = SaslServerAuthenticator(["SCRAM-SHA-512"], store())
    step, resp = handshake(auth, "GSSAPI")
    assert resp.error_code == 33 and list(resp.mechanisms) == ["SCRAM-SHA-512"]
    assert step.close


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}),
    (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0a\0b"}),
])
def test_other_requests_before_handshake_close(api_key, version, body):
    auth = SaslServerAuthenticator(MECHS, store())
    step = auth.receive(req(api_key, version, body))
    assert step.close and step.response is None and not step.forward
    assert "during SASL handshake" in step.close


def test_request_other_than_authenticate_after_handshake_closes():
    auth = SaslServerAuthenticator(MECHS, store(alice="a"))
    handshake(auth, "PLAIN")
    step = auth.receive(req(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False}))
    assert step.close and "during SASL authentication" in step.close


def test_second_api_versions_and_garbage_close():
    auth = SaslServerAuthenticator(MECHS, store())
    assert auth.receive(req(ApiKey.API_VERSIONS, 0, {})).forward
    assert auth.receive(req(ApiKey.API_VERSIONS, 0, {})).close
    assert SaslServerAuthenticator(MECHS, store()).receive(b"\x60\x01").close


def test_unsupported_api_versions_version_does_not_advance():
    auth = SaslServerAuthenticator(MECHS, store())
    assert auth.receive(encode_request(ApiKey.API_VERSIONS, 3, 1, {}).replace(
        b"\x00\x03", b"\x00\x63", 1)).forward
    assert auth.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST


# -- the credential store ----------------------------------------------------------------
def upsert(name, mech_type=1, iterations=4096, password="pw"):
    mech = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mech_type, "SCRAM-SHA-256")
    salt = b"sixteen-byte-salt-" + name.encode()
    return (name, mech_type, iterations, salt, salted_password(mech, password, salt, iterations))


def test_store_alter_persist_and_reload(tmp_path):
    s = CredentialStore(tmp_path)
    results = s.alter([], [upsert("alice", 1, 8192, "a-pw"), upsert("bob", 2)])
    assert sorted((r.user, r.error_code) for r in results) == [("alice", 0), ("bob", 0)]
    text = (tmp_path / STORE_FILE).read_text()
    assert "a-pw" not in text and "salted" not in text
    data = json.loads(text)
    assert set(data["credentials"]["alice"]["SCRAM-SHA-256"]) == {
        "salt", "stored_key", "server_key", "iterations"}
    again = CredentialStore(tmp_path)
    assert again.fake_secret == s.fake_secret
    cred = again.scram_credential("alice", "SCRAM-SHA-256")
    assert cred.iterations == 8192
    # the reloaded credential authenticates the password it was made from
    auth = SaslServerAuthenticator(MECHS, again)
    handshake(auth, "SCRAM-SHA-256")
    _, resp = scram_exchange(auth, "SCRAM-SHA-256", "alice", "a-pw")
    assert resp.error_code == 0
    assert again.describe(None) == [
        DescribeResult("alice", 0, None, [(1, 8192)]),  # (mechanism type, iterations)
        DescribeResult("bob", 0, None, [(2, 4096)]),
    ]
    assert [(r.user, r.error_code) for r in again.alter([("alice", 1)], [])] == [("alice", 0)]
    assert CredentialStore(tmp_path).scram_credential("alice", "SCRAM-SHA-256") is None


def test_store_alter_errors(tmp_path):
    s = CredentialStore(tmp_path)
    results = {r.user: (r.error_code, r.error_message) for r in s.alter(
        [("ghost", 1), ("dup", 1), ("weird", 9)],
        [upsert("dup"), upsert("few", iterations=1000), upsert("many", iterations=20000),
         upsert(""), upsert("twice"), upsert("twice"), ("nosalt", 1, 4096, b"", b"x" * 32)],
    )}
    assert results == {
        "ghost": (91, "Attempt to delete a user credential that does not exist"),
        "weird": (33, "Unknown SCRAM mechanism"),
        "dup": (91, "Attempt to delete a user credential that does not exist"),
        "few": (93, "Too few iterations"),
        "many": (93, "Too many iterations"),
        "": (93, "Username must not be empty"),
        "twice": (92, "A user credential cannot be altered twice in the same request"),
        "nosalt": (93, "Salt and salted password must not be empty"),
    }
    assert s.dynamic == {}


def test_store_describe_errors(tmp_path):
    s = CredentialStore(tmp_path)
    s.alter([], [upsert("alice")])
    got = {r.user: r.error_code for r in s.describe(["alice", "ghost", "alice"])}
    assert got == {"alice": 92, "ghost": 91}


def test_credentials_file(tmp_path):
    pre = credential_from_password("SCRAM-SHA-512", "carol-pw", 8192)
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"users": {
        "alice": {"password": "alice-pw"},
        "bob": {"password": "bob-pw", "mechanisms": ["PLAIN"]},
        "carol": {"scram": {"SCRAM-SHA-512": {
            "salt": base64.b64encode(pre.salt).decode(), "iterations": 8192,
            "stored_key": base64.b64encode(pre.stored_key).decode(),
            "server_key": base64.b64encode(pre.server_key).decode()}}},
    }}))
    static = load_credentials_file(path, ["SCRAM-SHA-256", "SCRAM-SHA-512"])
    assert static.plain == {"alice": "alice-pw", "bob": "bob-pw"}
    assert set(static.scram) == {("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"),
                                 ("carol", "SCRAM-SHA-512")}
    s = CredentialStore(tmp_path / "data", static, fsync=False)
    assert s.check_plain("bob", "bob-pw") and not s.check_plain("bob", "x")
    assert not s.check_plain("ghost", "x")
    auth = SaslServerAuthenticator(MECHS, s)
    handshake(auth, "SCRAM-SHA-512")
    _, resp = scram_exchange(auth, "SCRAM-SHA-512", "carol", "carol-pw")
    assert resp.error_code == 0
    # a file credential cannot be deleted through the API, and says why
    (r,) = s.alter([("carol", 2)], [])
    assert r.error_code == 91 and "sasl.credentials.file" in r.error_message
    path.write_text('{"users": {"x": {"password": ""}}}')
    with pytest.raises(CredentialsError, match="password"):
        load_credentials_file(path, [])


def test_plain_jaas():
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="admin-secret" user_admin="admin-secret" '
            'user_alice="al\\"ice";')
    assert parse_plain_jaas(text, "k") == {"admin": "admin-secret", "alice": 'al"ice'}
    with pytest.raises(CredentialsError):
        parse_plain_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required;", "k")


def test_old_librdkafka_nonce_repetition_is_accepted_as_kafka_does():
    """Older librdkafka sends r=<client nonce><client nonce><server nonce> in its final
    message; Kafka checks only that it ends with the nonce the server sent."""
    cred = credential_from_password("SCRAM-SHA-256", "pw")
    server = ScramSaslServer("SCRAM-SHA-256", lambda u: cred, b"k" * 32, server_nonce="SRV")
    first = server.evaluate_response(b"n,,n=alice,r=CLI").decode()
    assert first.startswith("r=CLISRV,")
    salt = base64.b64decode(first.split(",")[1][2:])
    without_proof = "c=biws,r=CLICLISRV"
    auth = f"n=alice,r=CLI,{first},{without_proof}".encode()
    sp = salted_password("SCRAM-SHA-256", "pw", salt, 4096)
    client_key = hmac.new(sp, b"Client Key", hashlib.sha256).digest()
    sig = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True)))
    assert server.evaluate_response(without_proof.encode() + b",p=" + proof).startswith(b"v=")
    assert server.complete and server.authorization_id == "alice"
    # a nonce that does not end with the server's fails
    server = ScramSaslServer("SCRAM-SHA-256", lambda u: cred, b"k" * 32, server_nonce="SRV")
    server.evaluate_response(b"n,,n=alice,r=CLI")
    with pytest.raises(SaslError, match="nonce"):
        server.evaluate_response(b"c=biws,r=CLISRVX,p=" + proof)


def test_scram_escaped_names_authzid_and_garbage():
    cred = credential_from_password("SCRAM-SHA-512", "pw")
    creds = {"a,b=c": cred}
    auth = SaslServerAuthenticator(MECHS, store())
    auth.credentials.static.scram[("a,b=c", "SCRAM-SHA-512")] = cred
    handshake(auth, "SCRAM-SHA-512")
    _, resp = scram_exchange(auth, "SCRAM-SHA-512", "a,b=c", "pw")
    assert resp.error_code == 0 and auth.principal == "a,b=c"
    server = ScramSaslServer("SCRAM-SHA-512", creds.get, b"k" * 32)
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        server.evaluate_response(b"n,a=bob,n=a=2Cb=3Dc,r=abc")
    for garbage in (b"hello", b"y,,n=x,r=abc", b"\xff\xfe", b"n,,n=x,r=abc,tokenauth=true"):
        with pytest.raises(SaslError):
            ScramSaslServer("SCRAM-SHA-512", creds.get, b"k" * 32).evaluate_response(garbage)


def test_fake_credential_keys_never_verify():
    """The keys of the fake credential are not derived from any password."""
    s = store()
    server = ScramSaslServer("SCRAM-SHA-256", lambda u: s.scram_credential(u, "SCRAM-SHA-256"),
                             s.fake_secret)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "ghost", "")
    client.set_server_first(server.evaluate_response(client.get_client_first().encode()).decode())
    with pytest.raises(SaslError):
        server.evaluate_response(client.get_client_final().encode())
    assert server.failed and not server.complete


# -- the shell: KafkaConnection on a SASL listener (fake transport, no socket) -----------
def test_connection_authenticates_before_requests_reach_the_broker():
    from tests.unit.test_connection import FakeTransport, Processor, frame, push, serve
    from tidegate.network.memory_pool import SimpleMemoryPool
    from tidegate.network.request_channel import SendResponse
    from tidegate.network.socket_server import KafkaConnection
    from tidegate.security.listener import ListenerSecurity

    class Recorder(Processor):
        def __init__(self):
            self.seen = []
            self.authenticated = []
            self.exempt_ns = []

        def handle(self, request):
            ctx = request.context
            self.seen.append((bytes(request.payload[:2]), ctx.principal))
            self.authenticated.append(ctx.authenticated)
            request.release_buffer()
            return SendResponse([b"resp"])

        def record_exempt_request_time_ns(self, ns):
            self.exempt_ns.append(ns)

    pool = SimpleMemoryPool(1 << 20, 1 << 20, strict=False, clock=MockClock())
    rec = Recorder()
    server, _loop = serve(rec, pool, 1 << 20, sasl_max_receive_size=1024)
    sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", mechanisms=("PLAIN",),
                           credentials=store(alice="alice-secret"))
    conn = KafkaConnection(server, "SASL_PLAINTEXT", sec)
    transport = FakeTransport()
    conn.connection_made(transport)
    assert not conn.authenticated and conn.principal == "ANONYMOUS"
    push(conn, frame(req(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})))
    assert rec.seen == [(b"\x00\x12", "ANONYMOUS")]  # ApiVersions went to the broker
    push(conn, frame(req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})))
    push(conn, frame(req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})))
    assert conn.authenticated and conn.principal == "alice" and conn.ctx.principal == "alice"
    assert len(rec.seen) == 1 and len(transport.written) == 3
    assert len(rec.exempt_ns) == 2  # the handshake and the authenticate: exempt, measured
    assert pool.available == pool.size  # every SASL frame went back to the pool
    big = frame(req(ApiKey.METADATA, 12, {"topics": [{"name": "t" * 2000, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False}))
    push(conn, big)  # larger than sasl.server.max.receive.size: fine once authenticated
    assert rec.seen[-1] == (b"\x00\x03", "alice") and not transport.closed
    assert rec.authenticated == [False, True]


def test_connection_refuses_large_and_unexpected_frames_before_login():
    from tests.unit.test_connection import FakeTransport, ImmediateProcessor, frame, push, serve
    from tidegate.network.memory_pool import SimpleMemoryPool
    from tidegate.network.socket_server import KafkaConnection
    from tidegate.security.listener import ListenerSecurity

    pool = SimpleMemoryPool(1 << 20, 1 << 20, strict=False, clock=MockClock())
    proc = ImmediateProcessor()
    server, _loop = serve(proc, pool, 1 << 20, sasl_max_receive_size=1024)
    sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", mechanisms=("PLAIN",),
                           credentials=store())
    for payload in (b"\0" * 2000, req(ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})):
        conn = KafkaConnection(server, "SASL_PLAINTEXT", sec)
        transport = FakeTransport()
        conn.connection_made(transport)
        push(conn, frame(payload))
        assert transport.closed and transport.written == []
        assert pool.available == pool.size
    assert proc.payloads == []  # nothing reached the broker


def test_store_delete_then_upsert_same_user_is_duplicate(tmp_path):
    s = CredentialStore(tmp_path)
    s.alter([], [upsert("alice")])
    before = s.scram_credential("alice", "SCRAM-SHA-256")
    assert before is not None
    (r,) = s.alter([("alice", 1)], [upsert("alice", 2)])
    assert (r.user, r.error_code) == ("alice", 92)
    assert s.scram_credential("alice", "SCRAM-SHA-256") == before  # nothing applied


def test_missing_credentials_file_is_a_config_error(tmp_path):
    from tidegate.config import BrokerConfig, ConfigError
    from tidegate.security.listener import build_credential_store

    cfg = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:1",
                        "sasl.credentials.file": str(tmp_path / "nope.json")})
    with pytest.raises(ConfigError, match="does not exist"):
        build_credential_store(cfg, tmp_path)


def test_listener_jaas_users_replace_the_file_for_plain(tmp_path):
    from tidegate.config import BrokerConfig
    from tidegate.security.listener import build_credential_store, build_listener_security

    users = tmp_path / "users.json"
    users.write_text(json.dumps({"users": {"alice": {"password": "file-pw"}}}))
    cfg = BrokerConfig({
        "listeners": "A://127.0.0.1:1,B://127.0.0.1:2",
        "listener.security.protocol.map": "A:SASL_PLAINTEXT,B:SASL_PLAINTEXT",
        "sasl.credentials.file": str(users),
        "listener.name.a.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="jaas-pw";',
    })
    creds = build_credential_store(cfg, tmp_path / "data")
    outcomes = {}
    for lst in cfg.listeners:
        sec = build_listener_security(cfg, lst, creds)
        for pw in ("jaas-pw", "file-pw"):
            auth = sec.new_authenticator()
            handshake(auth, "PLAIN")
            _, resp = authenticate(auth, b"\0alice\0" + pw.encode())
            outcomes[(lst.name, pw)] = resp.error_code
    assert outcomes == {("A", "jaas-pw"): 0, ("A", "file-pw"): 58,
                        ("B", "jaas-pw"): 58, ("B", "file-pw"): 0}
