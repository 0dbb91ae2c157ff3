"""The ACLs on disk: ``acls.json`` in the data directory, replaced atomically (write,
fsync, rename, fsync the directory) on every change, read once at start-up before the
broker serves requests (Kafka keeps them in the metadata log; a single node keeps a
file, like its topics and SCRAM credentials)."""

from __future__ import annotations

import json
from pathlib import Path

from tidegate.utils.files import write_atomically

from .acl import AclBinding

FILE_NAME = "acls.json"
VERSION = 1


class AclStore:
    def __init__(self, data_dir: Path | None) -> None:
        self.path = data_dir / FILE_NAME if data_dir is not None else None

    def load(self) -> list[AclBinding]:
        if self.path is None or not self.path.exists():
            return []
        doc = json.loads(self.path.read_text())
        if doc.get("version") != VERSION:
            raise ValueError(f"{self.path}: unknown version {doc.get('version')!r}")
        return [AclBinding.from_json(entry) for entry in doc["acls"]]

    def save(self, acls: list[AclBinding]) -> None:
        if self.path is None:
            return
        doc = {"version": VERSION, "acls": [acl.to_json() for acl in acls]}
        write_atomically(self.path, json.dumps(doc, indent=1).encode())
