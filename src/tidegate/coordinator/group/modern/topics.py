"""The topic metadata the modern groups' core reads, and what it derives from it.

Kafka's group coordinator reads a ``CoordinatorMetadataImage``; here it is
:class:`MetadataImage`, a protocol with lookups by name and by id that the broker's topic
store (``server.metadata.TopicStore``) already satisfies, so the core never imports the
server. :class:`TopicsImage` is a plain in-memory one (tests, benchmarks).

Derived values:

* :func:`topic_ids` -- subscribed topic names to the ids of those that exist (Kafka's
  ``TopicIds``: a name that does not exist is ignored);
* :class:`SubscribedTopicDescriberImpl` -- the assignors' view (partition counts by id);
* :func:`compute_topic_hash`, :func:`compute_group_hash`, :func:`compute_metadata_hash`
  -- the metadata hash of a group's subscribed topics (KIP-1101, Kafka 4.1+), stored in
  the group's metadata record; a new hash bumps the group epoch (reference 1.5 step 6).
  Kafka hashes with XXH3-64; tidegate uses BLAKE2b with an 8-byte digest (``hashlib``,
  no new dependency) over the same fields: a version byte, the topic id, the name and
  the partition count (there are no racks on one node). The value is only ever compared
  with hashes this same code computed, so any stable hash serves.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Protocol

#: Version of the topic hash below (Kafka's ``TOPIC_HASH_MAGIC_BYTE``): change it with the
#: hash so that a stored hash from the old function never equals a new one.
TOPIC_HASH_MAGIC_BYTE = 0


class TopicImage(Protocol):
    """One topic (Kafka's ``CoordinatorMetadataImage.TopicMetadata``)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> int: ...


class MetadataImage(Protocol):
    """The topics, by name and by id (Kafka's ``CoordinatorMetadataImage``), every name
    (what a regular expression is matched against) and the image's version (it goes up
    with every change and never goes back)."""

    def get(self, name: str) -> TopicImage | None: ...

    def get_by_id(self, topic_id: uuid.UUID) -> TopicImage | None: ...

    def topic_names(self) -> Iterable[str]: ...

    @property
    def version(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic of a :class:`TopicsImage`."""

    topic_id: uuid.UUID
    name: str
    partitions: int


class TopicsImage:
    """An immutable in-memory :class:`MetadataImage`."""

    __slots__ = ("_by_id", "_by_name", "version")

    def __init__(self, topics: Iterable[TopicMetadata] = (), version: int = 0) -> None:
        self._by_name = {t.name: t for t in topics}
        self._by_id = {t.topic_id: t for t in self._by_name.values()}
        self.version = version

    @classmethod
    def of(cls, *topics: tuple[uuid.UUID, str, int]) -> TopicsImage:
        """``TopicsImage.of((topic_id, name, partitions), ...)``."""
        return cls(TopicMetadata(*t) for t in topics)

    def topic_names(self) -> Iterable[str]:
        return self._by_name.keys()

    def get(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[TopicMetadata]:
        return iter(self._by_name.values())


class SubscribedTopicDescriberImpl:
    """The assignors' :class:`~tidegate.coordinator.group.assignor.api.SubscribedTopicDescriber`
    over a :class:`MetadataImage`."""

    __slots__ = ("_image",)

    def __init__(self, image: MetadataImage) -> None:
        self._image = image

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        topic = self._image.get_by_id(topic_id)
        return -1 if topic is None else topic.partitions


def topic_ids(names: Iterable[str], image: MetadataImage) -> frozenset[uuid.UUID]:
    """The ids of the named topics that exist."""
    out = set()
    for name in names:
        topic = image.get(name)
        if topic is not None:
            out.add(topic.topic_id)
    return frozenset(out)


def _signed64(digest: bytes) -> int:
    return int.from_bytes(digest, "big", signed=True)


def compute_topic_hash(topic: TopicImage) -> int:
    """A signed 64-bit hash of the topic's id, name and partition count."""
    name = topic.name.encode()
    h = hashlib.blake2b(digest_size=8)
    h.update(bytes((TOPIC_HASH_MAGIC_BYTE,)))
    h.update(topic.topic_id.bytes)
    h.update(len(name).to_bytes(4, "big"))
    h.update(name)
    h.update(topic.partitions.to_bytes(4, "big", signed=True))
    return _signed64(h.digest())


def compute_group_hash(topic_hashes: Mapping[str, int]) -> int:
    """A group's metadata hash from its topics' hashes (topic name -> hash), in name
    order; 0 when there is no topic, as in Kafka."""
    if not topic_hashes:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topic_hashes):
        h.update(topic_hashes[name].to_bytes(8, "big", signed=True))
    return _signed64(h.digest())


def compute_metadata_hash(
    subscribed_topic_names: Iterable[str],
    image: MetadataImage,
    cache: MutableMapping[str, int] | None = None,
) -> int:
    """The metadata hash of the subscribed topics that exist (Kafka's
    ``ModernGroup.computeMetadataHash``). ``cache`` (topic name -> hash) saves hashing a
    topic again; the caller drops a topic's entry when the topic changes."""
    hashes: dict[str, int] = {}
    for name in subscribed_topic_names:
        topic = image.get(name)
        if topic is None:
            continue
        if cache is None:
            hashes[name] = compute_topic_hash(topic)
        else:
            cached = cache.get(name)
            if cached is None:
                cached = cache[name] = compute_topic_hash(topic)
            hashes[name] = cached
    return compute_group_hash(hashes)
