"""SCRAM (RFC 5802, RFC 7677) the way Kafka uses it: credentials and the server side.

A :class:`ScramCredential` is what the broker keeps per user and mechanism: salt,
iteration count, StoredKey and ServerKey. The password, and the salted password,
are never kept. The message exchange itself is done by ``scramp``; this module
only adapts it to Kafka's behaviour (:class:`ScramSaslServer`, Kafka's name):

* an unknown user fails exactly like a wrong password: the server answers the
  first message with a fake salt (deterministic per user, so a second attempt sees
  the same salt, as it would for a real user) and the proof check fails at the
  final message, with the same error;
* errors carry no detail to the client (the authenticator sends Kafka's generic
  "invalid credentials" message), the detail goes to the broker log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

import scramp

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
    """A fresh credential (random salt unless given), computed by scramp."""
    salt_, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(bytes(salt_), stored_key, server_key, i)


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
    the client is sent a generic message, the detail is logged."""


class SaslAuthenticationError(Exception):
    """A failed exchange whose message is safe to send to the client (Kafka's
    SaslAuthenticationException)."""


class ScramSaslServer:
    """The server side of one SCRAM exchange: client-first -> server-first,
    client-final -> server-final. ``lookup`` returns the credential of a user or None."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        fake_secret: bytes,
    ) -> None:
        if not is_scram(mechanism):
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._server: scramp.core.ScramServer | None = None
        self._known_user = False
        self.complete = False
        self.failed = False
        self.authorization_id: str | None = None
        self._username: str | None = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        cred = self._lookup(username)
        self._username = username
        self._known_user = cred is not None
        if cred is None:
            cred = fake_credential(self.mechanism, username, self._fake_secret)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def evaluate_response(self, token: bytes) -> bytes:
        if self.complete or self.failed:
            raise SaslError(f"unexpected SCRAM message in state {'complete' if self.complete else 'failed'}")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError as exc:
            self.failed = True
            raise SaslError(f"SCRAM message is not UTF-8: {exc}") from None
        try:
            if self._server is None:
                self._server = scramp.ScramMechanism(self.mechanism).make_server(self._auth_info)
                self._server.set_client_first(text)
                return self._server.get_server_first().encode("utf-8")
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except scramp.ScramException as exc:
            self.failed = True
            raise SaslError(f"SCRAM exchange failed: {exc}") from None
        if not self._known_user:  # unreachable in practice: a fake credential never verifies
            self.failed = True
            raise SaslError(f"unknown user {self._username!r}")
        self.complete = True
        self.authorization_id = self._username
        return final.encode("utf-8")

    @property
    def username(self) -> str | None:
        """The user name the client gave (known or not), for logs."""
        return self._username
