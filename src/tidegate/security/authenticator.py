"""Kafka's SaslServerAuthenticator as a sans-IO state machine.

The shell hands it each complete request frame read before the connection is
authenticated (still read into pool memory, KIP-72) and does what the returned
:class:`AuthStep` says: send bytes, pass the request on to the broker (ApiVersions,
so it is answered and counted like any other), close the connection. Nothing here
touches a socket or the clock.

States, as Kafka names them (GSSAPI's headerless first token is not supported, so
Kafka's INITIAL_REQUEST and HANDSHAKE_OR_VERSIONS_REQUEST are one state)::

    HANDSHAKE_OR_VERSIONS_REQUEST --ApiVersions--> HANDSHAKE_REQUEST
    HANDSHAKE_OR_VERSIONS_REQUEST / HANDSHAKE_REQUEST --SaslHandshake--> AUTHENTICATE
    AUTHENTICATE --tokens--> COMPLETE | FAILED

SaslHandshake v0 is followed by raw SASL tokens (size-prefixed frames both ways);
v1 by SaslAuthenticate requests carrying the tokens. Any other request before
authentication closes the connection without an answer, as Kafka does; a failed
authentication is answered (SASL_AUTHENTICATION_FAILED with a message) and then the
connection is closed.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.errors import ErrorCode, UnsupportedVersionError
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey, api_name
from tidegate.protocol.codec import (
    InvalidRequestError,
    decode_request,
    encode_response,
    peek_header,
)
from tidegate.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from tidegate.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from tidegate.security.credentials import CredentialStore
from tidegate.security.plain import PlainSaslServer
from tidegate.security.scram import (
    SaslAuthenticationError,
    SaslError,
    ScramSaslServer,
    is_scram,
)

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")

#: Mechanisms tidegate implements, in the order SaslHandshake lists them by default.

class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What the shell does with one frame: send ``response`` (already framed) if any,
    hand the request to the broker if ``forward``, then close if ``close`` (the reason,
    for the log)."""

    response: bytes | None = None
    forward: bool = False
    close: str | None = None


def generic_failure(mechanism: str) -> str:
    """Kafka's message when the detail must stay in the broker log."""
    return (
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


class SaslServerAuthenticator:
    """One connection's authentication on a SASL_PLAINTEXT or SASL_SSL listener."""

    def __init__(
        self,
        enabled_mechanisms: list[str] | tuple[str, ...],
        credentials: CredentialStore,
        plain_check: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.enabled_mechanisms = list(enabled_mechanisms)
        self.credentials = credentials
        # PLAIN users: the listener's JAAS config when it has one, else the credentials file
        self._plain_check = plain_check if plain_check is not None else credentials.check_plain
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.mechanism: str | None = None
        self.kafka_headers = False  # SaslHandshake v1+: tokens inside SaslAuthenticate
        self._server: PlainSaslServer | ScramSaslServer | None = None
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def username(self) -> str | None:
        """The user name the client tried (known or not), for logs."""
        return None if self._server is None else self._server.username

    # -- the one entry point -------------------------------------------------------
    def receive(self, payload: Any) -> AuthStep:
        state = self.state
        if state in (SaslState.HANDSHAKE_OR_VERSIONS_REQUEST, SaslState.HANDSHAKE_REQUEST):
            return self._handshake_phase(payload)
        if state is SaslState.AUTHENTICATE:
            if self.kafka_headers:
                return self._sasl_authenticate(payload)
            return self._raw_token(payload)
        return self._fail(f"request received in SASL state {state.name}")

    def _fail(self, reason: str, response: bytes | None = None) -> AuthStep:
        self.state = SaslState.FAILED
        return AuthStep(response=response, close=reason)

    # -- before the handshake --------------------------------------------------------
    def _handshake_phase(self, payload: Any) -> AuthStep:
        try:
            api_key, api_version, _cid = peek_header(payload)
        except InvalidRequestError as exc:
            return self._fail(f"not a Kafka request before SASL authentication ({exc}); "
                              "GSSAPI without a handshake is not supported")
        if api_key == ApiKey.API_VERSIONS:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
                return self._fail("unexpected ApiVersions request during SASL authentication "
                                  f"state {self.state.name}")
            if SUPPORTED_APIS[ApiKey.API_VERSIONS].supports(api_version):
                # A request for an unsupported version is answered (UNSUPPORTED_VERSION)
                # but does not advance the state: the client retries with a lower version.
                self.state = SaslState.HANDSHAKE_REQUEST
            return AuthStep(forward=True)
        if api_key != ApiKey.SASL_HANDSHAKE:
            return self._fail(f"unexpected Kafka request of type {api_name(api_key)} during "
                              "SASL handshake")
        try:
            header, req = decode_request(bytes(payload))
        except (InvalidRequestError, UnsupportedVersionError) as exc:
            return self._fail(f"invalid SaslHandshake request: {exc}")
        assert isinstance(req, SaslHandshakeRequest)  # the API key was checked above
        mechanism = req.mechanism
        if header.api_version >= 1:
            self.kafka_headers = True
        if mechanism not in self.enabled_mechanisms:
            response = encode_response(header, SaslHandshakeResponse(
                error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=list(self.enabled_mechanisms)
            ))
            return self._fail(f"unsupported SASL mechanism {mechanism!r}; enabled: "
                              f"{', '.join(self.enabled_mechanisms)}", response)
        self.mechanism = mechanism
        if mechanism == "PLAIN":
            self._server = PlainSaslServer(self._plain_check)
        else:
            assert is_scram(mechanism)
            self._server = ScramSaslServer(
                mechanism,
                lambda user: self.credentials.scram_credential(user, mechanism),
                self.credentials.fake_secret,
            )
        self.state = SaslState.AUTHENTICATE
        return AuthStep(response=encode_response(header, SaslHandshakeResponse(
            mechanisms=list(self.enabled_mechanisms)
        )))

    # -- tokens -----------------------------------------------------------------------
    def _evaluate(self, token: bytes) -> tuple[bytes | None, str | None, str | None]:
        """(server token, client-visible error, log detail)."""
        assert self._server is not None and self.mechanism is not None
        try:
            return self._server.evaluate_response(token), None, None
        except SaslAuthenticationError as exc:
            return None, str(exc), str(exc)
        except SaslError as exc:
            return None, generic_failure(self.mechanism), str(exc)

    def _finish_if_complete(self) -> None:
        assert self._server is not None
        if self._server.complete:
            self.state = SaslState.COMPLETE
            self.principal = self._server.authorization_id

    def _failure_reason(self, detail: str | None) -> str:
        return (f"failed authentication with SASL mechanism {self.mechanism} as user "
                f"{self.username!r}: {detail}")

    def _raw_token(self, payload: Any) -> AuthStep:
        """After SaslHandshake v0: the frame is the token, the answer is a framed token."""
        token, error, detail = self._evaluate(bytes(payload))
        if error is not None:
            return self._fail(self._failure_reason(detail))
        self._finish_if_complete()
        out = token or b""
        return AuthStep(response=_I32.pack(len(out)) + out)

    def _sasl_authenticate(self, payload: Any) -> AuthStep:
        try:
            api_key, _v, _cid = peek_header(payload)
        except InvalidRequestError as exc:
            return self._fail(f"invalid request during SASL authentication: {exc}")
        if api_key != ApiKey.SASL_AUTHENTICATE:
            return self._fail(f"unexpected Kafka request of type {api_name(api_key)} during "
                              "SASL authentication")
        try:
            header, req = decode_request(bytes(payload))
        except (InvalidRequestError, UnsupportedVersionError) as exc:
            return self._fail(f"invalid SaslAuthenticate request: {exc}")
        assert isinstance(req, SaslAuthenticateRequest)  # the API key was checked above
        token, error, detail = self._evaluate(req.auth_bytes)
        if error is not None:
            response = encode_response(header, SaslAuthenticateResponse(
                error_code=ErrorCode.sasl_authentication_failed, error_message=error
            ))
            return self._fail(self._failure_reason(detail), response)
        self._finish_if_complete()
        # session_lifetime 0: no re-authentication (connections.max.reauth.ms=0)
        return AuthStep(response=encode_response(header, SaslAuthenticateResponse(auth_bytes=token or b"")))

