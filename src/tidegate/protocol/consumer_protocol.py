"""The consumer protocol's embedded bytes (Kafka's ``ConsumerProtocol``): the
``ConsumerProtocolSubscription`` a member sends in JoinGroup's protocol metadata and the
``ConsumerProtocolAssignment`` the leader hands out in SyncGroup.

Every version starts with the same prefix — int16 version, then the topics (v0 of the
subscription: ``[topic string]``; of the assignment: ``[topic string, [int32 partition]]``)
— and later versions only append fields (user data, owned partitions, generation, rack),
so the decoders read that prefix of any version and ignore the rest. They check every
length against the bytes left and raise ``ValueError`` on what does not parse. The
encoders write version 0 with null user data, which every Kafka consumer reads.

Used by the group coordinator (the topics a member subscribes to), the admin client
(DescribeGroups' member assignments) and tidegate's own group member.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = [
    "decode_assignment",
    "decode_owned_partitions",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

TopicPartition = tuple[str, int]


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

    def skip_bytes(self) -> None:
        """Nullable bytes (int32 length, -1 = null)."""
        n = self.int32()
        if n < -1 or self.pos + max(n, 0) > len(self.data):
            raise ValueError(f"bad bytes length {n}")
        self.pos += max(n, 0)

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
    r = _Reader(data)
    version = r.int16()
    for _ in range(r.count(2)):
        r.string()
    if version < 1:
        return []
    r.skip_bytes()  # user data
    out: list[TopicPartition] = []
    for _ in range(r.count(2)):
        topic = r.string()
        out += [(topic, r.int32()) for _ in range(r.count(4))]
    return sorted(out)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """Version 0: [topic, [partition]] (sorted), user data null."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t in sorted(by_topic):
        ps = sorted(by_topic[t])
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions of any version's assignment, sorted (no bytes: none)."""
    if not data:
        return []
    r = _Reader(data)
    r.int16()  # version
    out: list[TopicPartition] = []
    for _ in range(r.count(2)):
        topic = r.string()
        out += [(topic, r.int32()) for _ in range(r.count(4))]
    return sorted(out)
