"""Cluster metadata that must survive restarts: topics (names, ids, partition counts,
configs) and the dynamic broker configs.

Kafka keeps these in its ``__cluster_metadata`` log (TopicRecord, PartitionRecord,
ConfigRecord); a single-node tidegate keeps small JSON documents, each replaced
atomically (write, fsync, rename, fsync the directory) on every change, so a crash
leaves either the old or the new state. ``meta.properties`` carries the cluster id and
node id as Kafka's does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidegate.utils.files import write_atomically

TOPICS_FILE = "__tidegate_topics.json"
BROKER_CONFIGS_FILE = "__tidegate_broker_configs.json"
META_PROPERTIES = "meta.properties"
@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, d: dict) -> TopicInfo:
        return cls(d["name"], uuid.UUID(d["topic_id"]), int(d["partitions"]), dict(d["configs"]))


class TopicStore:
    """The persisted topic table, with lookups by name and by id.

    ``version`` goes up with every change and is kept in the file, so it never goes back
    across restarts (Kafka's metadata image version, the offset of the last record of the
    metadata log): the group coordinator compares it with the version a regular
    expression was resolved at, and notices topic changes by it.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / TOPICS_FILE
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        self.version = 0
        if self.path.exists():
            doc = json.loads(self.path.read_bytes())
            self.version = int(doc.get("metadata_version", 0))
            for d in doc["topics"]:
                info = TopicInfo.from_json(d)
                self.topics[info.name] = info
                self.by_id[info.topic_id] = info

    def _persist(self) -> None:
        self.version += 1
        doc = {
            "version": 1,
            "metadata_version": self.version,
            "topics": [t.to_json() for t in self.topics.values()],
        }
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def topic_names(self) -> Iterable[str]:
        return self.topics.keys()

    def get_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.by_id.get(topic_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None if there is none (Kafka's
        ``MetadataCache.getTopicName``): how a request that names topics by id (Produce
        v13+, Fetch v13+, OffsetCommit/OffsetFetch v10+) is resolved, for its
        authorization on the name and its handling alike."""
        info = self.by_id.get(topic_id)
        return None if info is None else info.name

    def partitions_of(self, topic_id: uuid.UUID) -> int | None:
        """The partition count of a topic by id; None if there is none (the share
        coordinator's ``TopicPartitions``)."""
        info = self.by_id.get(topic_id)
        return None if info is None else info.partitions

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        return self.add(TopicInfo(name, uuid.uuid4(), partitions, dict(configs)))

    def add(self, info: TopicInfo) -> TopicInfo:
        assert info.name not in self.topics
        self.topics[info.name] = info
        self.by_id[info.topic_id] = info
        try:
            self._persist()
        except BaseException:
            del self.topics[info.name]
            del self.by_id[info.topic_id]
            raise
        return info

    def delete(self, name: str) -> TopicInfo:
        info = self.topics.pop(name)
        self.by_id.pop(info.topic_id, None)
        self._persist()
        return info

    def set_partitions(self, name: str, partitions: int) -> None:
        info = self.topics[name]
        old, info.partitions = info.partitions, partitions
        try:
            self._persist()
        except BaseException:
            info.partitions = old
            raise

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's configs (AlterConfigs), durably; unchanged if that fails."""
        info = self.topics[name]
        old, info.configs = info.configs, dict(configs)
        try:
            self._persist()
        except BaseException:
            info.configs = old
            raise


class BrokerConfigStore:
    """The dynamic broker configs (KIP-226): the cluster default layer (resource name
    ``""``) and this node's layer, key -> value as set, in one JSON document."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / BROKER_CONFIGS_FILE

    def load(self) -> tuple[dict[str, str], dict[str, str]]:
        """(cluster default, this broker's): empty before anything was ever set."""
        if not self.path.exists():
            return {}, {}
        doc = json.loads(self.path.read_bytes())
        if doc.get("version") != 1:
            raise ValueError(f"{self.path}: unknown format version {doc.get('version')!r}")
        return dict(doc["default"]), dict(doc["broker"])

    def save(self, default: Mapping[str, str], broker: Mapping[str, str]) -> None:
        doc = {"version": 1, "default": dict(default), "broker": dict(broker)}
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())


def load_or_create_meta(directory: Path, node_id: int, cluster_id: str | None) -> str:
    """Read (or write, on first start) ``meta.properties``; return the cluster id.

    A data directory belongs to one cluster and one node: starting it with a
    different ``node.id`` or ``cluster.id`` is refused, as Kafka refuses it.
    """
    path = directory / META_PROPERTIES
    if path.exists():
        props = {}
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
        stored_node = int(props.get("node.id", node_id))
        if stored_node != node_id:
            raise RuntimeError(
                f"{path} belongs to node.id {stored_node}, not the configured {node_id}"
            )
        stored_cluster = props["cluster.id"]
        if cluster_id is not None and cluster_id != stored_cluster:
            raise RuntimeError(
                f"{path} belongs to cluster.id {stored_cluster}, not the configured {cluster_id}"
            )
        return stored_cluster
    if cluster_id is None:
        # Kafka's cluster ids are 16 random bytes, base64url without padding.
        import base64

        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    write_atomically(
        path,
        f"#\n#tidegate\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n".encode(),
    )
    return cluster_id
