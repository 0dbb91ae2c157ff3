"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: one message, ``[authzid] NUL
authcid NUL passwd``, checked against the configured passwords."""

from __future__ import annotations

from collections.abc import Callable

from tidegate.errors import SaslAuthenticationError
from tidegate.security.scram import SaslError

INVALID = "Authentication failed: Invalid username or password"


class PlainSaslServer:
    mechanism = "PLAIN"

    def __init__(self, check: Callable[[str, str], bool]) -> None:
        self._check = check
        self.complete = False
        self.authorization_id: str | None = None
        self.username: str | None = None

    def evaluate_response(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslError("unexpected SASL/PLAIN message after completion")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        tokens = text.split("\0", 3)
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}"
            )
        authzid, username, password = tokens
        self.username = username
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._check(username, password):
            raise SaslAuthenticationError(INVALID)
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.authorization_id = username
        self.complete = True
        return b""
