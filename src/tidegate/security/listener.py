"""What a listener's security protocol means for its connections.

``ListenerSecurity`` is built once per listener at start-up and handed to the
socket server: the TLS context (SSL, SASL_SSL), and for SASL listeners a factory of
per-connection :class:`SaslServerAuthenticator` objects with the listener's
mechanisms and PLAIN users.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidegate.config import BrokerConfig, ConfigError, Listener
from tidegate.security.authenticator import SaslServerAuthenticator
from tidegate.security.authorizer.principal import SslPrincipalMapper
from tidegate.security.credentials import (
    CredentialsError,
    CredentialStore,
    StaticCredentials,
    load_credentials_file,
    parse_plain_jaas,
)
from tidegate.security.scram import is_scram
from tidegate.security.tls import build_server_context

#: Kafka's KafkaPrincipal.ANONYMOUS ("User:ANONYMOUS"); principals here are user names.
ANONYMOUS = "ANONYMOUS"


@dataclass
class ListenerSecurity:
    listener_name: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    credentials: CredentialStore | None = None
    plain_check: Callable[[str, str], bool] | None = None
    #: ``ssl.principal.mapping.rules`` (SSL listeners): a certificate's DN -> the user name
    principal_mapper: SslPrincipalMapper | None = None

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def principal_from_certificate(self) -> bool:
        """SSL (not SASL_SSL) listeners name a client by its certificate's subject DN."""
        return self.security_protocol == "SSL"

    def certificate_principal(self, dn: str) -> str:
        """The user name of a client certificate's subject DN, as Kafka's
        DefaultKafkaPrincipalBuilder forms it: through ``ssl.principal.mapping.rules``
        (the DN itself by default). ValueError when no rule matches: Kafka fails the
        connection's authentication then."""
        return self.principal_mapper.name(dn) if self.principal_mapper is not None else dn

    def new_authenticator(self) -> SaslServerAuthenticator | None:
        if not self.sasl:
            return None
        assert self.credentials is not None
        return SaslServerAuthenticator(self.mechanisms, self.credentials, self.plain_check)


def _plain_checker(users: dict[str, str]) -> Callable[[str, str], bool]:
    def check(user: str, password: str) -> bool:
        expected = users.get(user)
        ok = hmac.compare_digest(
            (expected if expected is not None else "\0" + password).encode(), password.encode()
        )
        return ok and expected is not None

    return check


def build_credential_store(config: BrokerConfig, root: Path | None) -> CredentialStore:
    """The broker's credentials: ``sasl.credentials.file`` plus the persisted SCRAM store."""
    enabled = sorted({
        m
        for lst in config.listeners
        for m in config.listener_get(lst.name, "sasl.enabled.mechanisms")
        if is_scram(m)
    } or {"SCRAM-SHA-256", "SCRAM-SHA-512"})
    path = config.get("sasl.credentials.file")
    try:
        static = load_credentials_file(path, enabled) if path is not None else StaticCredentials()
        # no SASL listener: no scram-credentials.json until a credential is altered
        sasl = any(lst.security_protocol.startswith("SASL_") for lst in config.listeners)
        return CredentialStore(root, static, create=sasl)
    except CredentialsError as exc:
        raise ConfigError(str(exc), name="sasl.credentials.file", value=path) from None


def build_listener_security(
    config: BrokerConfig, listener: Listener, credentials: CredentialStore
) -> ListenerSecurity:
    protocol = listener.security_protocol
    sec = ListenerSecurity(listener.name, protocol)

    def get(key: str):
        return config.listener_get(listener.name, key)

    if protocol in ("SSL", "SASL_SSL"):
        sec.ssl_context = build_server_context(get, listener.name)
    if protocol == "SSL":
        sec.principal_mapper = SslPrincipalMapper(get("ssl.principal.mapping.rules"))
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        sec.mechanisms = tuple(get("sasl.enabled.mechanisms"))
        sec.credentials = credentials
        jaas = get("plain.sasl.jaas.config")
        if jaas is not None:
            key = f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
            try:
                sec.plain_check = _plain_checker(parse_plain_jaas(jaas, key))
            except CredentialsError as exc:
                raise ConfigError(str(exc), name=key) from None
    return sec
