"""Who may log in: PLAIN passwords and SCRAM credentials.

Two sources:

* static, from ``sasl.credentials.file`` (JSON, see docs/security.md) and the PLAIN
  JAAS form ``listener.name.<l>.plain.sasl.jaas.config`` (``user_alice="secret"``):
  PLAIN passwords, and SCRAM credentials derived from a password at start-up or
  given already salted;
* dynamic, from AlterUserScramCredentials: SCRAM credentials kept in
  ``scram-credentials.json`` in the log directory, written atomically (temporary
  file, fsync, rename, fsync of the directory) and read at start-up.

A SCRAM lookup takes the dynamic credential first, then the static one. Changes
apply to the next authentication at once: authenticators look credentials up when
a client sends its first SCRAM message.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidegate.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MECHANISMS_BY_TYPE,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
)
from tidegate.utils.files import write_atomically

log = logging.getLogger(__name__)

STORE_FILE = "scram-credentials.json"
STORE_VERSION = 1


class CredentialsError(ValueError):
    """A credentials file or store that cannot be used (the broker does not start)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as exc:
        raise CredentialsError(f"{what} is not valid base64: {exc}") from None


def _credential_to_json(cred: ScramCredential) -> dict[str, Any]:
    return {
        "salt": _b64(cred.salt),
        "stored_key": _b64(cred.stored_key),
        "server_key": _b64(cred.server_key),
        "iterations": cred.iterations,
    }


def _credential_from_json(obj: Any, what: str) -> ScramCredential:
    if not isinstance(obj, dict):
        raise CredentialsError(f"{what} must be an object")
    try:
        iterations = obj["iterations"]
        salt, stored, server = obj["salt"], obj["stored_key"], obj["server_key"]
    except KeyError as exc:
        raise CredentialsError(f"{what} lacks {exc.args[0]!r}") from None
    if not isinstance(iterations, int) or iterations < MIN_ITERATIONS:
        raise CredentialsError(f"{what}: iterations must be an integer >= {MIN_ITERATIONS}")
    return ScramCredential(
        _unb64(salt, f"{what}.salt"),
        _unb64(stored, f"{what}.stored_key"),
        _unb64(server, f"{what}.server_key"),
        iterations,
    )


# --------------------------------------------------------------------------------------
# the static file
# --------------------------------------------------------------------------------------
@dataclass
class StaticCredentials:
    plain: dict[str, str] = field(default_factory=dict)
    scram: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)


def load_credentials_file(path: str | Path, scram_mechanisms: list[str]) -> StaticCredentials:
    """Read ``sasl.credentials.file``::

        {"users": {
            "alice": {"password": "alice-secret"},
            "bob":   {"password": "bob-secret", "mechanisms": ["PLAIN"]},
            "carol": {"scram": {"SCRAM-SHA-512": {"salt": "...", "stored_key": "...",
                                                 "server_key": "...", "iterations": 8192}}}
        }}

    A ``password`` serves PLAIN and, salted afresh at every start, each SCRAM
    mechanism in ``mechanisms`` (default: every enabled mechanism). ``scram`` entries
    are pre-salted credentials (no password in the file at all).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CredentialsError(f"sasl.credentials.file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise CredentialsError(f"cannot read sasl.credentials.file {path}: {exc}") from None
    users = data.get("users") if isinstance(data, dict) else None
    if not isinstance(users, dict):
        raise CredentialsError(f"{path}: expected an object with a \"users\" object")
    out = StaticCredentials()
    for user, entry in users.items():
        what = f"{path}: user {user!r}"
        if not user:
            raise CredentialsError(f"{path}: empty user name")
        if not isinstance(entry, dict):
            raise CredentialsError(f"{what} must be an object")
        unknown = set(entry) - {"password", "mechanisms", "scram"}
        if unknown:
            raise CredentialsError(f"{what}: unknown field(s) {sorted(unknown)}")
        password = entry.get("password")
        mechanisms = entry.get("mechanisms")
        if mechanisms is not None and (
            not isinstance(mechanisms, list) or not all(isinstance(m, str) for m in mechanisms)
        ):
            raise CredentialsError(f"{what}: mechanisms must be a list of names")
        if password is not None:
            if not isinstance(password, str) or not password:
                raise CredentialsError(f"{what}: password must be a non-empty string")
            wanted = mechanisms if mechanisms is not None else ["PLAIN", *scram_mechanisms]
            for mech in wanted:
                if mech == "PLAIN":
                    out.plain[user] = password
                elif mech in MECHANISM_TYPES:
                    if mech in scram_mechanisms:
                        out.scram[(user, mech)] = credential_from_password(mech, password)
                else:
                    raise CredentialsError(f"{what}: unsupported mechanism {mech!r}")
        scram = entry.get("scram", {})
        if not isinstance(scram, dict):
            raise CredentialsError(f"{what}: scram must be an object")
        for mech, cred in scram.items():
            if mech not in MECHANISM_TYPES:
                raise CredentialsError(f"{what}: unsupported SCRAM mechanism {mech!r}")
            out.scram[(user, mech)] = _credential_from_json(cred, f"{what}.scram.{mech}")
    return out


_JAAS_USER = re.compile(r'\buser_([^\s=]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_MODULE = re.compile(r"^\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b")


def parse_plain_jaas(text: str, key: str) -> dict[str, str]:
    """Users of a PlainLoginModule JAAS config: ``user_<name>="<password>"`` options."""
    m = _JAAS_MODULE.match(text)
    if m is None or not text.rstrip().endswith(";"):
        raise CredentialsError(
            f"{key}: expected 'org.apache.kafka.common.security.plain.PlainLoginModule "
            'required user_alice="alice-secret";\''
        )
    if m.group(1).rsplit(".", 1)[-1] != "PlainLoginModule":
        raise CredentialsError(f"{key}: only PlainLoginModule is supported, not {m.group(1)}")
    return {name: re.sub(r"\\(.)", r"\1", pw) for name, pw in _JAAS_USER.findall(text)}


# --------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AlterResult:
    user: str
    error_code: int
    error_message: str | None


@dataclass(frozen=True, slots=True)
class DescribeResult:
    """One user of DescribeUserScramCredentials: (mechanism type, iterations) of each
    credential it has."""

    user: str
    error_code: int
    error_message: str | None
    credentials: list[tuple[int, int]] = field(default_factory=list)


# Kafka error codes used here (kio's ErrorCode has them too; kept as ints so this
# module stays free of the codec).
NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


class CredentialStore:
    """PLAIN passwords and SCRAM credentials; the SCRAM ones persisted under ``root``."""

    def __init__(
        self,
        root: Path | None,
        static: StaticCredentials | None = None,
        *,
        fsync: bool = True,
        create: bool = True,
    ) -> None:
        self.root = root
        #: create the store file at start-up if missing (only with a SASL listener; else
        #: it is written at the first credential change)
        self._create = create
        self.static = static or StaticCredentials()
        self._fsync = fsync
        self.dynamic: dict[tuple[str, str], ScramCredential] = {}
        self.fake_secret = secrets.token_bytes(32)
        if root is not None:
            self._load()

    # -- lookups (authenticators) --------------------------------------------------
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        key = (user, mechanism)
        cred = self.dynamic.get(key)
        return cred if cred is not None else self.static.scram.get(key)

    def check_plain(self, user: str, password: str) -> bool:
        """Constant-time check; an unknown user costs the same comparison."""
        expected = self.static.plain.get(user)
        ok = hmac.compare_digest(
            (expected if expected is not None else "\0" + password).encode("utf-8"),
            password.encode("utf-8"),
        )
        return ok and expected is not None

    # -- persistence ----------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        return None if self.root is None else self.root / STORE_FILE

    def _load(self) -> None:
        path = self.path
        assert path is not None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if self._create:
                self._save()  # creates the file and the per-broker secret
            return
        except (OSError, ValueError) as exc:
            raise CredentialsError(f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
            raise CredentialsError(f"{path}: unknown format (expected version {STORE_VERSION})")
        self.fake_secret = _unb64(data.get("secret", ""), f"{path}: secret") or self.fake_secret
        creds = data.get("credentials", {})
        for user, mechs in creds.items():
            for mech, obj in mechs.items():
                if mech not in MECHANISM_TYPES:
                    raise CredentialsError(f"{path}: unknown mechanism {mech!r} for {user!r}")
                self.dynamic[(user, mech)] = _credential_from_json(obj, f"{path}: {user}/{mech}")
        log.info("loaded %d SCRAM credential(s) from %s", len(self.dynamic), path)

    def _save(self) -> None:
        path = self.path
        if path is None:
            return
        creds: dict[str, dict[str, Any]] = {}
        for (user, mech), cred in sorted(self.dynamic.items()):
            creds.setdefault(user, {})[mech] = _credential_to_json(cred)
        data = {"version": STORE_VERSION, "secret": _b64(self.fake_secret), "credentials": creds}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"),
                         sync=self._fsync, sync_dir=self._fsync, mode=0o600)  # fmt: skip

    # -- AlterUserScramCredentials / DescribeUserScramCredentials ------------------
    def alter(
        self,
        deletions: list[tuple[str, int]],
        upsertions: list[tuple[str, int, int, bytes, bytes]],
    ) -> list[AlterResult]:
        """Apply Kafka's rules (ScramControlManager.alterCredentials): one change per user
        per request (DUPLICATE_RESOURCE), known mechanism, non-empty name, iterations in
        [4096, 16384], deleting only what exists. Valid changes are applied and persisted
        together; each user gets one result."""
        errors: dict[str, tuple[int, str]] = {}
        to_delete: dict[str, tuple[str, str]] = {}
        to_upsert: dict[str, tuple[str, str, ScramCredential]] = {}
        duplicate = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for name, mech_type in deletions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None:
                errors[name] = duplicate
                continue
            mech = MECHANISMS_BY_TYPE.get(mech_type)
            error = self._check_name_and_mechanism(name, mech)
            if error is None and (name, mech) not in self.dynamic:
                if (name, mech) in self.static.scram:
                    error = (RESOURCE_NOT_FOUND, (
                        "Attempt to delete a user credential that does not exist (it is "
                        "defined in sasl.credentials.file; edit that file instead)"))
                else:
                    error = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if error is not None:
                errors[name] = error
            else:
                assert mech is not None
                to_delete[name] = (name, mech)
        for name, mech_type, iterations, salt, salted in upsertions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
                errors[name] = duplicate
                continue
            mech = MECHANISMS_BY_TYPE.get(mech_type)
            error = self._check_name_and_mechanism(name, mech)
            if error is None:
                if iterations < MIN_ITERATIONS:
                    error = (UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                elif iterations > MAX_ITERATIONS:
                    error = (UNACCEPTABLE_CREDENTIAL, "Too many iterations")
                elif not salt or not salted:
                    error = (UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
            if error is not None:
                errors[name] = error
                continue
            assert mech is not None
            to_upsert[name] = (name, mech, credential_from_salted_password(mech, salt, salted, iterations))
        if to_delete or to_upsert:
            for key in to_delete.values():
                self.dynamic.pop(key, None)
            for name, mech, cred in to_upsert.values():
                self.dynamic[(name, mech)] = cred
            self._save()
            log.info(
                "SCRAM credentials changed: %s",
                ", ".join([f"deleted {u}/{m}" for u, m in to_delete.values()]
                          + [f"set {u}/{m}" for u, m, _ in to_upsert.values()]),
            )
        results = [AlterResult(name, NONE, None) for name in to_delete]
        results += [AlterResult(name, NONE, None) for name in to_upsert]
        results += [AlterResult(name, code, msg) for name, (code, msg) in errors.items()]
        return results

    @staticmethod
    def _check_name_and_mechanism(name: str, mech: str | None) -> tuple[int, str] | None:
        if not name:
            return (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        if mech is None:
            return (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        return None

    def all_scram(self) -> dict[tuple[str, str], ScramCredential]:
        merged = dict(self.static.scram)
        merged.update(self.dynamic)
        return merged

    def describe(self, users: list[str] | None) -> list[DescribeResult]:
        """Kafka's ScramImage.describe: every user when ``users`` is None or empty; a
        user asked for twice is DUPLICATE_RESOURCE, one without credentials
        RESOURCE_NOT_FOUND."""
        creds = self.all_scram()
        wanted: dict[str, bool] = {}
        if not users:
            for user, _mech in creds:
                wanted[user] = False
        else:
            for user in users:
                wanted[user] = user in wanted
        results = []
        for user, duplicated in wanted.items():
            if duplicated:
                results.append(DescribeResult(
                    user, DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                ))
                continue
            infos = [
                (MECHANISM_TYPES[mech], creds[(user, mech)].iterations)
                for mech in MECHANISM_TYPES
                if (user, mech) in creds
            ]
            if infos:
                results.append(DescribeResult(user, NONE, None, infos))
            else:
                results.append(DescribeResult(
                    user, RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {user}"
                ))
        return results
