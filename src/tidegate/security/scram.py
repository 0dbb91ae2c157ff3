"""SCRAM (RFC 5802, RFC 7677) the way Kafka uses it: credentials and the server side.

A :class:`ScramCredential` is what the broker keeps per user and mechanism: salt,
iteration count, StoredKey and ServerKey. The password, and the salted password,
are never kept. :class:`ScramSaslServer` (Kafka's name) runs one exchange with
Kafka's rules:

* messages are parsed with the grammar of Kafka's ScramMessages; the client-final
  nonce must *end with* the nonce the server sent, as Kafka checks it. Older
  librdkafka releases (e.g. Debian's kcat) repeat the client nonce in front of it, so
  a strict equality check (the ``scramp`` library's, tried first) locks them out.
  That is why the exchange is written here, on ``hmac``/``hashlib``; ``scramp`` is
  the independent implementation the tests check it against;
* an unknown user fails exactly like a wrong password: the server answers the first
  message with a fake salt (deterministic per user, so a second attempt sees the same
  salt, as it would for a real user) and the proof check fails at the final message;
* errors carry no detail to the client (the authenticator sends Kafka's generic
  "invalid credentials" message), the detail goes to the broker log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tidegate.errors import SaslAuthenticationError

#: Kafka's admin ScramMechanism type ids (AlterUserScramCredentials, Describe...).
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISM_TYPES: dict[str, int] = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS_BY_TYPE: dict[int, str] = {v: k for k, v in MECHANISM_TYPES.items()}
_HASHES = {SCRAM_SHA_256: hashlib.sha256, SCRAM_SHA_512: hashlib.sha512}

#: Kafka's bounds (ScramMechanism.minIterations, ScramControlManager.MAX_ITERATIONS).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


def is_scram(mechanism: str) -> bool:
    return mechanism in MECHANISM_TYPES


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """Kafka's ScramCredential: what authenticates a user, without the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # never log key material
        return f"ScramCredential(iterations={self.iterations}, salt=[hidden], keys=[hidden])"


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
    "Server Key") (RFC 5802 section 3); what AlterUserScramCredentials sends is the
    salted password, which the broker turns into these two and then forgets."""
    hf = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", hf).digest()
    stored_key = hf(client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", hf).digest()
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC."""
    name = "sha256" if mechanism == SCRAM_SHA_256 else "sha512"
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def credential_from_password(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A fresh credential (32 random bytes of salt unless given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def fake_credential(mechanism: str, username: str, secret: bytes) -> ScramCredential:
    """What an unknown user is answered with: a salt derived from the user name and a
    broker secret (stable across attempts, like a real user's), keys nobody can match."""
    def derive(label: str) -> bytes:
        return hmac.new(secret, f"{label}\0{mechanism}\0{username}".encode(), hashlib.sha512).digest()

    size = _HASHES[mechanism]().digest_size
    return ScramCredential(
        derive("salt")[:32], derive("stored")[:size], derive("server")[:size], DEFAULT_ITERATIONS
    )


class SaslError(Exception):
    """A failed exchange whose detail must not reach the client (Kafka's SaslException):
    the client is sent a generic message, the detail is logged. One whose message is
    safe to send is a :class:`tidegate.errors.SaslAuthenticationError` (Kafka's
    SaslAuthenticationException)."""


# Kafka's ScramMessages grammar
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # any ASCII but NUL and ","
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_BASE64 = r"(?:[A-Za-z0-9/+]{4})*(?:[A-Za-z0-9/+]{3}=|[A-Za-z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
    rf"p=(?P<proof>{_BASE64})"
)


def _unescape_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramSaslServer:
    """The server side of one SCRAM exchange: client-first -> server-first,
    client-final -> server-final. ``lookup`` returns the credential of a user or None."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        fake_secret: bytes,
        server_nonce: str | None = None,
    ) -> None:
        if not is_scram(mechanism):
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._hf = _HASHES[mechanism]
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._server_nonce = server_nonce or secrets.token_hex(16)
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.complete = False
        self.failed = False
        self.authorization_id: str | None = None
        self.username: str | None = None  # the user name the client gave, known or not (logs)

    def evaluate_response(self, token: bytes) -> bytes:
        if self.complete or self.failed:
            raise SaslError("unexpected SCRAM message after the exchange ended")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            self.failed = True
            raise SaslError("SCRAM message is not UTF-8") from None
        try:
            if self._credential is None:
                return self._client_first(text)
            return self._client_final(text)
        except (SaslError, SaslAuthenticationError):
            self.failed = True
            raise

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslError(f"Invalid SCRAM client first message format: {text!r}")
        username = _unescape_saslname(m["saslname"])
        self.username = username
        extensions = dict(e.split("=", 1) for e in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslError("delegation tokens (tokenauth) are not supported")
        authzid = m["authzid"]
        if authzid and _unescape_saslname(authzid) != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        cred = self._lookup(username)
        self._known_user = cred is not None
        if cred is None:
            cred = fake_credential(self.mechanism, username, self._fake_secret)
        self._credential = cred
        self._gs2_header = m["gs2"]
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + self._server_nonce
        salt = base64.b64encode(cred.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        return self._server_first.encode("utf-8")

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslError(f"Invalid SCRAM client final message format: {text!r}")
        if not m["nonce"].endswith(self._nonce):  # Kafka's check (see the module doc)
            raise SaslError("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(m["channel"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise SaslError("invalid base64 in the SCRAM client final message") from None
        if channel != self._gs2_header.encode("utf-8"):
            raise SaslError("SCRAM channel binding does not match the GS2 header")
        cred = self._credential
        assert cred is not None
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, m["without_proof"])
        ).encode("utf-8")
        client_signature = hmac.new(cred.stored_key, auth_message, self._hf).digest()
        if len(proof) != len(client_signature):
            raise SaslError("Invalid client credentials (proof of the wrong length)")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self._hf(client_key).digest(), cred.stored_key):
            raise SaslError("Invalid client credentials"
                            + ("" if self._known_user else " (unknown user)"))
        if not self._known_user:  # unreachable: a fake credential has no password
            raise SaslError("unknown user")
        server_signature = hmac.new(cred.server_key, auth_message, self._hf).digest()
        self.complete = True
        self.authorization_id = self.username
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)
