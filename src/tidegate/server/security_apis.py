"""Request handlers for identity: SCRAM credential administration, and the SASL
requests that reach the broker once a connection is past authentication.

SaslHandshake and SaslAuthenticate are consumed by the connection's
``SaslServerAuthenticator`` before authentication; when they reach KafkaApis (on a
PLAINTEXT or SSL listener, or again after a successful login) Kafka answers
ILLEGAL_SASL_STATE, and so does tidegate.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tidegate.network.request_channel import Request
from tidegate.security.credentials import CredentialStore


class SecurityApis:
    def __init__(self, credentials: CredentialStore) -> None:
        self.credentials = credentials

    def handle_sasl_handshake(self, request: Request, now_ms: int) -> dict:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}

    def handle_sasl_authenticate(self, request: Request, now_ms: int) -> dict:
        ctx = request.context
        return {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate request received after successful authentication"
            if ctx.security_protocol.startswith("SASL")
            else f"SaslAuthenticate request received on a {ctx.security_protocol} listener",
            "auth_bytes": b"",
        }

    def handle_describe_user_scram_credentials(self, request: Request, now_ms: int) -> dict:
        req = request.body
        users = None if req.users is None else [u.name for u in req.users]
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "results": [
                {**r, "credential_infos": r["credential_infos"]}
                for r in self.credentials.describe(users)
            ],
        }

    def handle_alter_user_scram_credentials(self, request: Request, now_ms: int) -> dict:
        req = request.body
        results = self.credentials.alter(
            [(d.name, d.mechanism) for d in req.deletions],
            [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in req.upsertions],
        )
        return {
            "throttle_time": 0,
            "results": [
                {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
                for r in results
            ],
        }
