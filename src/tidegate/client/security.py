"""Client-side security: Kafka's ``security.protocol``, ``sasl.*`` and ``ssl.*`` keys.

:class:`ClientSecurity` is parsed from the Java client's keys (plus librdkafka's
``sasl.username``/``sasl.password``) and validated up front; it holds only strings,
so it pickles (the Spark source ships it to executors). :meth:`ClientSecurity.ssl_context`
builds the ``ssl.SSLContext``; :func:`sasl_client` makes the SASL exchange for one
connection: :class:`PlainClient` or :class:`ScramClient` (RFC 5802/7677 written on
``hmac``/``hashlib``, with the server signature checked). All of it is sans-IO; the
bytes travel in SaslAuthenticate requests sent by :class:`tidegate.client.KafkaClient`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.errors import KafkaError, SaslAuthenticationError

__all__ = [
    "SECURITY_KEYS",
    "ClientSecurity",
    "PlainClient",
    "ScramClient",
    "SecurityConfigError",
    "parse_jaas_config",
    "sasl_client",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")

#: The keys :meth:`ClientSecurity.from_config` reads (Kafka client names, and
#: librdkafka's ``sasl.username``/``sasl.password``).
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)


class SecurityConfigError(ValueError):
    """An invalid or unsupported security setting (Kafka's ConfigException)."""


# -- JAAS ----------------------------------------------------------------------------------------


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """Kafka's ``sasl.jaas.config``: ``<LoginModule class> <flag> key="value" ...;``.

    Exactly one login module, as Kafka requires for the client; values are quoted
    (with backslash escapes) or bare words. Returns (class name, options).
    """
    tokens = _jaas_tokens(text)
    if not tokens:
        raise SecurityConfigError("sasl.jaas.config is empty")
    modules: list[tuple[str, dict[str, str]]] = []
    i = 0
    while i < len(tokens):
        kind, module = tokens[i]
        if kind != "word":
            raise SecurityConfigError(
                f"sasl.jaas.config: expected a login module class name, got {module!r}"
            )
        if (
            i + 1 >= len(tokens)
            or tokens[i + 1][0] != "word"
            or tokens[i + 1][1].lower() not in _FLAGS
        ):
            raise SecurityConfigError(
                f"sasl.jaas.config: login module {module} needs a control flag "
                f"({', '.join(_FLAGS)})"
            )
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise SecurityConfigError("sasl.jaas.config: the login module must end with ';'")
            kind, tok = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word" or i + 2 >= len(tokens) or tokens[i + 1][0] != "=":
                raise SecurityConfigError(
                    f"sasl.jaas.config: expected key=value in {module}'s options, got {tok!r}"
                )
            vkind, value = tokens[i + 2]
            if vkind not in ("word", "quoted"):
                raise SecurityConfigError(f"sasl.jaas.config: option {tok} has no value")
            options[tok] = value
            i += 3
        modules.append((module, options))
    if len(modules) != 1:
        raise SecurityConfigError(
            f"JAAS config property contains {len(modules)} login modules, should be 1 module"
        )
    return modules[0]


def _jaas_tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c == '"':
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise SecurityConfigError("sasl.jaas.config: unterminated quoted value")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    buf.append(c)
                    i += 1
            out.append(("quoted", "".join(buf)))
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            out.append(("word", text[i:j]))
            i = j
    return out


# -- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    keystore_location: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    key_password: str | None = None
    check_hostname: bool = True

    def __repr__(self) -> str:  # never print secrets
        return (
            f"ClientSecurity(protocol={self.protocol}, mechanism={self.mechanism}, "
            f"username={self.username!r})"
        )

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> ClientSecurity:
        """Read the security keys of a Kafka client config (other keys are ignored)."""

        def get(key: str) -> str | None:
            v = conf.get(key)
            return None if v is None else str(v)

        protocol = (get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"Invalid value {protocol} for configuration security.protocol: "
                f"String must be one of: {', '.join(PROTOCOLS)}"
            )
        mechanism = get("sasl.mechanism") or ("GSSAPI" if protocol.startswith("SASL") else "PLAIN")
        mechanism = mechanism.strip().upper()
        kw: dict[str, Any] = {"protocol": protocol, "mechanism": mechanism}
        if protocol.startswith("SASL"):
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(
                    f"sasl.mechanism={mechanism} is not supported by tidegate's client "
                    f"(supported: {', '.join(MECHANISMS)}); Kafka's default is GSSAPI, so set "
                    "sasl.mechanism explicitly"
                )
            username, password = get("sasl.username"), get("sasl.password")
            jaas = get("sasl.jaas.config")
            if jaas is not None:
                module, options = parse_jaas_config(jaas)
                want = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
                if module != want:
                    raise SecurityConfigError(
                        f"sasl.jaas.config: sasl.mechanism={mechanism} needs the login module "
                        f"{want}, not {module}"
                    )
                for opt in ("username", "password"):
                    if opt not in options:
                        raise SecurityConfigError(f"sasl.jaas.config: {module} needs {opt}=...")
                username, password = options["username"], options["password"]
            if username is None or password is None:
                raise SecurityConfigError(
                    f"security.protocol={protocol} needs credentials: sasl.jaas.config "
                    "(or sasl.username and sasl.password)"
                )
            kw["username"], kw["password"] = username, password
        if protocol in ("SSL", "SASL_SSL"):
            for key in ("ssl.truststore.type", "ssl.keystore.type"):
                t = (get(key) or "PEM").strip().upper()
                if t != "PEM":
                    raise SecurityConfigError(
                        f"{key}={t} is not supported by tidegate's client: only PEM (convert "
                        "with `openssl pkcs12 -in store.p12 -nodes -out store.pem`)"
                    )
            kw["truststore_location"] = get("ssl.truststore.location")
            kw["truststore_certificates"] = get("ssl.truststore.certificates")
            if kw["truststore_location"] and kw["truststore_certificates"]:
                raise SecurityConfigError(
                    "set ssl.truststore.location or ssl.truststore.certificates, not both"
                )
            kw["keystore_location"] = get("ssl.keystore.location")
            kw["keystore_certificate_chain"] = get("ssl.keystore.certificate.chain")
            kw["keystore_key"] = get("ssl.keystore.key")
            kw["key_password"] = get("ssl.key.password")
            if bool(kw["keystore_certificate_chain"]) != bool(kw["keystore_key"]):
                raise SecurityConfigError(
                    "ssl.keystore.certificate.chain and ssl.keystore.key go together"
                )
            if kw["keystore_location"] and kw["keystore_certificate_chain"]:
                raise SecurityConfigError(
                    "set ssl.keystore.location or ssl.keystore.certificate.chain/key, not both"
                )
            algo = get("ssl.endpoint.identification.algorithm")
            algo = "https" if algo is None else algo.strip().lower()
            if algo not in ("https", ""):
                raise SecurityConfigError(
                    f"ssl.endpoint.identification.algorithm={algo!r}: expected https or empty"
                )
            kw["check_hostname"] = algo == "https"
        sec = cls(**kw)
        if sec.uses_tls:
            sec.ssl_context()  # load the files now: a bad path is a configuration error
        return sec

    def ssl_context(self) -> ssl.SSLContext:
        """A client SSLContext (TLS 1.2+): the trust store (system CAs when unset), the
        client certificate if any, hostname checking unless disabled."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = self.check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            if self.truststore_location:
                ctx.load_verify_locations(cafile=self.truststore_location)
            elif self.truststore_certificates:
                ctx.load_verify_locations(cadata=self.truststore_certificates)
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(f"cannot load the TLS trust store: {exc}") from None
        try:
            if self.keystore_location:
                ctx.load_cert_chain(self.keystore_location, password=self.key_password)
            elif self.keystore_certificate_chain and self.keystore_key:
                with tempfile.TemporaryDirectory(prefix="tidegate-client-tls-") as tmp:
                    paths = []
                    for name, text in (
                        ("chain.pem", self.keystore_certificate_chain),
                        ("key.pem", self.keystore_key),
                    ):
                        path = os.path.join(tmp, name)
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                        with os.fdopen(fd, "w") as f:
                            f.write(text)
                        paths.append(path)
                    ctx.load_cert_chain(paths[0], paths[1], password=self.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(f"cannot load the TLS key store: {exc}") from None
        return ctx


# -- SASL clients ---------------------------------------------------------------------------------------


class PlainClient:
    """RFC 4616: one message, ``\\0user\\0password``."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._msg = b"\x00" + username.encode() + b"\x00" + password.encode()
        self.complete = False

    def first(self) -> bytes:
        return self._msg

    def step(self, challenge: bytes) -> bytes | None:
        self.complete = True
        return None


_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
#: Kafka's ScramMechanism.minIterations
_MIN_ITERATIONS = 4096


def _sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _fields(msg: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError(f"invalid SCRAM message from the broker: {msg!r}")
        out.setdefault(part[0], part[2:])
    return out


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka's
    ``ScramSaslClient`` does it: no channel binding (``n,,``), the user name escaped,
    the password not SASLprep'ed; the server's signature is verified."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        if mechanism not in _HASHES:
            raise SecurityConfigError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self._password = password.encode("utf-8")
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        self._client_first_bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._state = "first"
        self._server_signature = b""
        self.complete = False

    def first(self) -> bytes:
        self._state = "server-first"
        return ("n,," + self._client_first_bare).encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == "server-first":
            return self._client_final(challenge)
        if self._state == "server-final":
            self._verify(challenge)
            return None
        raise SaslAuthenticationError(f"unexpected SCRAM message in state {self._state}")

    def _client_final(self, challenge: bytes) -> bytes:
        server_first = challenge.decode("utf-8", "replace")
        f = _fields(server_first)
        if "e" in f:
            raise SaslAuthenticationError(f"SCRAM: the broker says {f['e']}")
        try:
            nonce, salt, iterations = f["r"], base64.b64decode(f["s"], validate=True), int(f["i"])
        except (KeyError, ValueError, binascii.Error):
            raise SaslAuthenticationError(
                f"invalid SCRAM server-first message: {server_first!r}"
            ) from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError("SCRAM: the broker's nonce does not extend the client's")
        if iterations < _MIN_ITERATIONS:
            raise SaslAuthenticationError(
                f"SCRAM: requested iterations {iterations} is less than the minimum "
                f"{_MIN_ITERATIONS} for {self.mechanism}"
            )
        name = "sha256" if self.mechanism == "SCRAM-SHA-256" else "sha512"
        salted = hashlib.pbkdf2_hmac(name, self._password, salt, iterations)
        client_final_bare = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{client_final_bare}".encode()
        client_key = self._hmac(salted, b"Client Key")
        stored_key = self._hash(client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self._hmac(salted, b"Server Key")
        self._server_signature = self._hmac(server_key, auth_message)
        self._state = "server-final"
        return f"{client_final_bare},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, challenge: bytes) -> None:
        server_final = challenge.decode("utf-8", "replace")
        f = _fields(server_final)
        if "e" in f:
            raise SaslAuthenticationError(f"SCRAM: the broker says {f['e']}")
        try:
            v = base64.b64decode(f["v"], validate=True)
        except (KeyError, binascii.Error):
            raise SaslAuthenticationError(
                f"invalid SCRAM server-final message: {server_final!r}"
            ) from None
        if not hmac.compare_digest(v, self._server_signature):
            raise SaslAuthenticationError(
                "SCRAM: invalid server signature (the broker does not know the password)"
            )
        self._state = "done"
        self.complete = True


def sasl_client(sec: ClientSecurity) -> PlainClient | ScramClient:
    if sec.username is None or sec.password is None:
        raise KafkaError("SASL needs a user name and a password")
    if sec.mechanism == "PLAIN":
        return PlainClient(sec.username, sec.password)
    return ScramClient(sec.mechanism, sec.username, sec.password)
