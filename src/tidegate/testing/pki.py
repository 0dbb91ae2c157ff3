"""Certificates and SASL users made at run time for brokers under test.

:func:`make_pki` writes a CA, a server certificate for 127.0.0.1/localhost and a client
certificate (no key is ever committed); :func:`write_users` writes a
``sasl.credentials.file``. Certificates need ``trustme`` (``pip install
tidegate[testing]``); it is imported only when certificates are asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_users(path: Path, users: dict[str, str]) -> Path:
    """A SASL credentials file (``sasl.credentials.file``) giving each user its password
    (for PLAIN and both SCRAM mechanisms)."""
    path.write_text(json.dumps({"users": {u: {"password": p} for u, p in users.items()}}))
    return path


def make_pki(directory: Path) -> dict[str, Any]:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate
    (CN=writer), written under ``directory``.

    Returns paths ``ca``, ``server`` (key + chain), ``client`` (key + chain),
    ``client_cert``, ``client_key``, and the PEM text ``server_chain_text`` and
    ``server_key_text`` (for ``ssl.keystore.certificate.chain``/``ssl.keystore.key``).
    """
    try:
        import trustme
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError(
            "TLS brokers under test need trustme: pip install 'tidegate[testing]'"
        ) from exc
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Tidegate Test CA")
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("writer@example.org", common_name="writer",
                           organization_name="Tidegate Tests", organization_unit_name="clients")
    paths: dict[str, Any] = {
        "ca": directory / "ca.pem",
        "server": directory / "server.pem",
        "client_cert": directory / "client-cert.pem",
        "client_key": directory / "client-key.pem",
        "client": directory / "client.pem",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["client"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    paths["client_cert"].write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    paths["server_chain_text"] = b"".join(b.bytes() for b in server.cert_chain_pems).decode()
    paths["server_key_text"] = server.private_key_pem.bytes().decode()
    return paths
