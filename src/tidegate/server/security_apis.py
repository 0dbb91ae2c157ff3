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

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from tidegate.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from tidegate.protocol.messages.describe_delegation_token import DescribeDelegationTokenResponse
from tidegate.protocol.messages.describe_user_scram_credentials import (
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from tidegate.protocol.messages.expire_delegation_token import ExpireDelegationTokenResponse
from tidegate.protocol.messages.renew_delegation_token import RenewDelegationTokenResponse
from tidegate.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from tidegate.protocol.messages.sasl_handshake import SaslHandshakeResponse
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
    def handle_create_delegation_token(self, request: Request) -> CreateDelegationTokenResponse:
        req = request.body_as(CreateDelegationTokenRequest)
        requester = (USER_TYPE, request.context.principal)
        owner = (req.owner_principal_type, req.owner_principal_name) if req.owner_principal_name else requester
        response = CreateDelegationTokenResponse(
            principal_type=owner[0] or "",  # a null owner type: refused below
            principal_name=owner[1] or "",
            token_requester_principal_type=requester[0],
            token_requester_principal_name=requester[1],
        )
        if not _token_requests_allowed(request):
            # CreateDelegationTokenResponse.prepareResponse: timestamps -1
            response.error_code = ErrorCode.delegation_token_request_not_allowed
            response.issue_timestamp = response.expiry_timestamp = response.max_timestamp = -1
        elif owner[0] != USER_TYPE or any(r.principal_type != USER_TYPE for r in req.renewers):
            response.error_code = ErrorCode.invalid_principal_type
            response.issue_timestamp = response.expiry_timestamp = response.max_timestamp = -1
        else:
            # the controller's answer (DelegationTokenControlManager): timestamps unset
            response.error_code = ErrorCode.delegation_token_auth_disabled
            response.issue_timestamp = response.expiry_timestamp = response.max_timestamp = 0
        return response

    def handle_renew_delegation_token(self, request: Request) -> RenewDelegationTokenResponse:
        error, expiry = self._token_refusal(request)
        return RenewDelegationTokenResponse(error_code=error, expiry_timestamp=expiry)

    def handle_expire_delegation_token(self, request: Request) -> ExpireDelegationTokenResponse:
        error, expiry = self._token_refusal(request)
        return ExpireDelegationTokenResponse(error_code=error, expiry_timestamp=expiry)

    @staticmethod
    def _token_refusal(request: Request) -> tuple[ErrorCode, int]:
        """(error, expiry timestamp) of a refused renewal or expiry."""
        if not _token_requests_allowed(request):
            return ErrorCode.delegation_token_request_not_allowed, -1
        return ErrorCode.delegation_token_auth_disabled, 0

    def handle_describe_delegation_token(self, request: Request) -> DescribeDelegationTokenResponse:
        error = (
            ErrorCode.delegation_token_auth_disabled
            if _token_requests_allowed(request)
            else ErrorCode.delegation_token_request_not_allowed
        )
        return DescribeDelegationTokenResponse(error_code=error)

    def handle_sasl_handshake(self, request: Request) -> SaslHandshakeResponse:
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state)

    def handle_sasl_authenticate(self, request: Request) -> SaslAuthenticateResponse:
        ctx = request.context
        return SaslAuthenticateResponse(
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication"
            if ctx.security_protocol.startswith("SASL")
            else f"SaslAuthenticate request received on a {ctx.security_protocol} listener",
        )

    def handle_describe_user_scram_credentials(self, request: Request) -> DescribeUserScramCredentialsResponse:
        req = request.body_as(DescribeUserScramCredentialsRequest)
        users = None if req.users is None else [u.name for u in req.users]
        return DescribeUserScramCredentialsResponse(results=[
            DescribeUserScramCredentialsResult(
                user=r.user, error_code=r.error_code, error_message=r.error_message,
                credential_infos=[CredentialInfo(mechanism=m, iterations=i) for m, i in r.credentials],
            )
            for r in self.credentials.describe(users)
        ])  # fmt: skip

    def handle_alter_user_scram_credentials(self, request: Request) -> AlterUserScramCredentialsResponse:
        req = request.body_as(AlterUserScramCredentialsRequest)
        results = self.credentials.alter(
            [(d.name, d.mechanism) for d in req.deletions],
            [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in req.upsertions],
        )
        return AlterUserScramCredentialsResponse(results=[
            AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code, error_message=r.error_message)
            for r in results
        ])  # fmt: skip
