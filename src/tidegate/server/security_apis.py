"""Request handlers for identity: SCRAM credential administration, delegation tokens,
and the SASL requests that reach the broker once a connection is past authentication.

SaslHandshake and SaslAuthenticate are consumed by the connection's
``SaslServerAuthenticator`` before authentication; when they reach KafkaApis (on a
PLAINTEXT or SSL listener, or again after a successful login) Kafka answers
ILLEGAL_SASL_STATE, and so does tidegate.

Delegation tokens (KIP-48) are answered as a Kafka broker without
``delegation.token.secret.key`` answers them: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on
PLAINTEXT and on SSL without a client certificate, DELEGATION_TOKEN_AUTH_DISABLED
elsewhere.
"""

from __future__ import annotations

from typing import Any

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.security.credentials import CredentialStore

USER_TYPE = "User"


def _token_requests_allowed(request: Request) -> bool:
    """Kafka's ``KafkaApis.allowTokenRequests``: not on PLAINTEXT, not on 1-way SSL."""
    ctx = request.context
    if ctx.security_protocol == "PLAINTEXT":
        return False
    return not (ctx.security_protocol == "SSL" and ctx.principal == "ANONYMOUS")


class SecurityApis:
    def __init__(self, credentials: CredentialStore) -> None:
        self.credentials = credentials

    # -- delegation tokens: disabled (no delegation.token.secret.key) ----------------------
    def handle_create_delegation_token(self, request: Request) -> dict:
        req = request.body
        requester = (USER_TYPE, request.context.principal)
        owner = (req.owner_principal_type, req.owner_principal_name) if getattr(
            req, "owner_principal_name", None
        ) else requester
        body: dict[str, Any] = {
            "throttle_time": 0,
            "principal_type": owner[0] or "",  # a null owner type: refused below
            "principal_name": owner[1],
            "token_requester_principal_type": requester[0],
            "token_requester_principal_name": requester[1],
            "token_id": "",
            "hmac": b"",
        }
        if not _token_requests_allowed(request):
            # CreateDelegationTokenResponse.prepareResponse: timestamps -1
            body.update(error_code=ErrorCode.delegation_token_request_not_allowed,
                        issue_timestamp=-1, expiry_timestamp=-1, max_timestamp=-1)
        elif owner[0] != USER_TYPE or any(r.principal_type != USER_TYPE for r in req.renewers):
            body.update(error_code=ErrorCode.invalid_principal_type,
                        issue_timestamp=-1, expiry_timestamp=-1, max_timestamp=-1)
        else:
            # the controller's answer (DelegationTokenControlManager): timestamps unset
            body.update(error_code=ErrorCode.delegation_token_auth_disabled,
                        issue_timestamp=0, expiry_timestamp=0, max_timestamp=0)
        return body

    def handle_renew_delegation_token(self, request: Request) -> dict:
        return self._token_refusal(request)

    def handle_expire_delegation_token(self, request: Request) -> dict:
        return self._token_refusal(request)

    @staticmethod
    def _token_refusal(request: Request) -> dict:
        if not _token_requests_allowed(request):
            return {"throttle_time": 0, "error_code": ErrorCode.delegation_token_request_not_allowed,
                    "expiry_timestamp": -1}
        return {"throttle_time": 0, "error_code": ErrorCode.delegation_token_auth_disabled,
                "expiry_timestamp": 0}

    def handle_describe_delegation_token(self, request: Request) -> dict:
        error = (
            ErrorCode.delegation_token_auth_disabled
            if _token_requests_allowed(request)
            else ErrorCode.delegation_token_request_not_allowed
        )
        return {"throttle_time": 0, "error_code": error, "tokens": []}

    def handle_sasl_handshake(self, request: Request) -> dict:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}

    def handle_sasl_authenticate(self, request: Request) -> dict:
        ctx = request.context
        return {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate request received after successful authentication"
            if ctx.security_protocol.startswith("SASL")
            else f"SaslAuthenticate request received on a {ctx.security_protocol} listener",
            "auth_bytes": b"",
        }

    def handle_describe_user_scram_credentials(self, request: Request) -> dict:
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

    def handle_alter_user_scram_credentials(self, request: Request) -> dict:
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
