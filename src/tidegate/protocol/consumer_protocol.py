"""The consumer protocol's embedded bytes (Kafka's ``ConsumerProtocol``): the
``ConsumerProtocolSubscription`` a member sends in JoinGroup's protocol metadata and the
``ConsumerProtocolAssignment`` the leader hands out in SyncGroup.

Every version starts with the same prefix — int16 version, then the topics (v0 of the
subscription: ``[topic string]``; of the assignment: ``[topic string, [int32 partition]]``)
— and later versions only append fields (user data, owned partitions, generation, rack),
so the decoders read that prefix of any version and ignore the rest. They check every
length against the bytes left and raise ``ValueError`` on what does not parse. The
subscription encoder writes version 0 with null user data, which every Kafka consumer
reads; the assignment encoder writes the version it is asked for (every version of the
assignment has the same fields), as Kafka's coordinator answers a classic member in the
version of its subscription (:func:`consumer_protocol_version`).

Used by the group coordinator (the topics a member subscribes to), the admin client
(DescribeGroups' member assignments) and tidegate's own group member.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = [
    "ASSIGNMENT_HIGHEST_VERSION",
    "assignment_user_data",
    "consumer_protocol_version",
    "decode_assignment",
    "decode_owned_partitions",
    "decode_subscription",
    "decode_subscription_rack",
    "encode_assignment",
    "encode_subscription",
]

TopicPartition = tuple[str, int]

#: ConsumerProtocolAssignment's versions are 0-3, one layout (Kafka's
#: ``checkAssignmentVersion`` writes a later version as 3)
ASSIGNMENT_HIGHEST_VERSION = 3


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise ValueError(f"consumer protocol bytes end at {len(self.data)}, need {self.pos + size}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int16(self) -> int:
        return self._take(">h", 2)

    def int32(self) -> int:
        return self._take(">i", 4)

    def count(self, item_size: int) -> int:
        """An array length: -1 (null) reads as empty; more items than bytes left is an error."""
        n = self.int32()
        if n < -1 or n * item_size > len(self.data) - self.pos:
            raise ValueError(f"bad array length {n}")
        return max(n, 0)

    def nullable_bytes(self) -> bytes | None:
        """Nullable bytes (int32 length, -1 = null)."""
        n = self.int32()
        if n < -1 or self.pos + max(n, 0) > len(self.data):
            raise ValueError(f"bad bytes length {n}")
        if n < 0:
            return None
        self.pos += n
        return bytes(self.data[self.pos - n : self.pos])

    def nullable_string(self) -> str | None:
        """A string whose length -1 is null."""
        if self.pos + 2 <= len(self.data) and self.data[self.pos : self.pos + 2] == b"\xff\xff":
            self.pos += 2
            return None
        return self.string()

    def string(self) -> str:
        n = self.int16()
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"bad string length {n}")
        raw = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(str(exc)) from exc


def encode_subscription(topics: Iterable[str]) -> bytes:
    """Version 0: [topic] (sorted, once each), user data null."""
    names = sorted(set(topics))
    return struct.pack(">hi", 0, len(names)) + b"".join(_string(t) for t in names) + struct.pack(">i", -1)


def decode_subscription(data: bytes) -> list[str]:
    """The topics of any version's subscription, in their order."""
    r = _Reader(data)
    r.int16()  # version
    return [r.string() for _ in range(r.count(2))]


def decode_owned_partitions(data: bytes) -> list[TopicPartition]:
    """The partitions a subscription says its member owns (v1+, after the user data;
    none before v1), sorted: what a classic member in a consumer group still holds."""
    return sorted(_read_subscription(data)[0])


def decode_subscription_rack(data: bytes) -> str | None:
    """The rack a v3+ subscription names (after the generation id); None before v3 or
    null."""
    return _read_subscription(data)[1]


def _read_subscription(data: bytes) -> tuple[list[TopicPartition], str | None]:
    """The owned partitions (v1+) and the rack (v3+) of a subscription."""
    r = _Reader(data)
    version = r.int16()
    for _ in range(r.count(2)):
        r.string()
    owned: list[TopicPartition] = []
    if version < 1:
        return owned, None
    r.nullable_bytes()  # user data
    for _ in range(r.count(2)):
        topic = r.string()
        owned += [(topic, r.int32()) for _ in range(r.count(4))]
    if version < 3:
        return owned, None
    r.int32()  # generation id (v2+)
    return owned, r.nullable_string()


def consumer_protocol_version(data: bytes) -> int:
    """The version a subscription or an assignment starts with (Kafka's
    ``ConsumerProtocol.deserializeVersion``)."""
    return _Reader(data).int16()


def encode_assignment(partitions: Iterable[TopicPartition], version: int = 0) -> bytes:
    """[topic, [partition]] (sorted), user data null, in ``version``: a version above
    :data:`ASSIGNMENT_HIGHEST_VERSION` is written as that one, a negative one is a
    ValueError (Kafka's ``serializeAssignment``)."""
    if version < 0:
        raise ValueError(f"unsupported assignment version {version}")
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", min(version, ASSIGNMENT_HIGHEST_VERSION), len(by_topic))]
    for t in sorted(by_topic):
        ps = sorted(by_topic[t])
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions of any version's assignment, sorted (no bytes: none)."""
    if not data:
        return []
    return sorted(_read_assignment(_Reader(data)))


def assignment_user_data(data: bytes | None) -> bytes | None:
    """The user data an assignor put in an assignment (None: null, or no bytes)."""
    if not data:
        return None
    r = _Reader(data)
    _read_assignment(r)
    return r.nullable_bytes()


def _read_assignment(r: _Reader) -> list[TopicPartition]:
    """The version and the partitions of an assignment (the reader then at its user data)."""
    r.int16()  # version
    out: list[TopicPartition] = []
    for _ in range(r.count(2)):
        topic = r.string()
        out += [(topic, r.int32()) for _ in range(r.count(4))]
    return out
