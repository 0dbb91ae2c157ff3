"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLContext`` from Kafka's PEM settings,
and Kafka's default principal for a client certificate (its subject DN)."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from tidegate.config import ConfigError

#: RFC 2253 short names, as Java's X500Principal.getName() prints them.
_DN_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _escape_dn_value(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(peercert: dict[str, Any]) -> str | None:
    """The subject of a certificate (``SSLObject.getpeercert()``) as an RFC 2253 string,
    most specific RDN first, like Java's ``X500Principal.getName()``: "CN=writer,O=Acme"."""
    subject = peercert.get("subject") if peercert else None
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_DN_NAMES.get(k, k)}={_escape_dn_value(v)}" for k, v in rdn))
    return ",".join(rdns)


def build_server_context(get: Callable[[str], Any], listener: str) -> ssl.SSLContext:
    """An SSLContext for one listener; ``get(key)`` gives the listener's value of a key
    (its ``listener.name.<l>.`` override or the broker value)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    password = get("ssl.key.password")
    location = get("ssl.keystore.location")
    try:
        if location is not None:
            ctx.load_cert_chain(location, password=password)
        else:
            chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
            # load_cert_chain reads files only: a private temporary directory, removed at once
            with tempfile.TemporaryDirectory(prefix="tidegate-tls-") as tmp:
                cert_path, key_path = os.path.join(tmp, "chain.pem"), os.path.join(tmp, "key.pem")
                for path, text in ((cert_path, chain), (key_path, key)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w") as f:
                        f.write(text)
                ctx.load_cert_chain(cert_path, key_path, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Listener {listener}: cannot load the TLS key store: {exc}") from None
    ctx.verify_mode = _CLIENT_AUTH[get("ssl.client.auth")]
    trust_location, trust_text = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if trust_location is not None:
            ctx.load_verify_locations(cafile=trust_location)
        elif trust_text is not None:
            ctx.load_verify_locations(cadata=trust_text)
        elif ctx.verify_mode != ssl.CERT_NONE:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Listener {listener}: cannot load the TLS trust store: {exc}") from None
    return ctx
