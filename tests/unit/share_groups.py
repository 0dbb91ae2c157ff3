"""A KIP-932 share group coordinator on fake time, over the broker's real parts (the
consumer group harness's: ``LogManager``, ``ReplicaManager``, ``__consumer_offsets``
through ``OffsetsLog.append``, the ``TopicStore`` as the metadata image, a ``SystemTimer``)
and the share-partitions' real state store (``InMemoryPersister``, with the share
coordinator's checks), whose answers :class:`HeldPersister` can hold or fail. Shared by
the share group test modules."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.unit.consumer_groups import Harness
from tidegate.coordinator.group.modern.share.share_group import ShareGroup
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupConfig,
    ShareGroupHeartbeat,
    ShareGroupHeartbeatResult,
    ShareGroupManager,
)
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember
from tidegate.coordinator.group.modern.topics import MetadataImage
from tidegate.errors import ErrorCode as E
from tidegate.server.share.persister import (
    InMemoryPersister,
    PersisterWrite,
    ReadCallback,
    SharePartitionKey,
    SummaryCallback,
    WriteCallback,
)


def subdir(tmp_path: Path, name: str) -> Path:
    """A directory of its own for a second broker's parts."""
    path = tmp_path / name
    path.mkdir()
    return path


class HeldPersister:
    """The share-partitions' ``InMemoryPersister``, with the share coordinator's checks
    against the topics of ``image``, whose answers to initialize and delete can be held
    (``hold``: until :meth:`release`, the persister answering later) or failed (``fail``:
    that error, nothing stored). ``calls`` lists what was asked, in order."""

    def __init__(self) -> None:
        self.image: MetadataImage | None = None
        self.store = InMemoryPersister(self._partitions)
        self.hold = False
        self.fail: E | None = None
        self.calls: list[tuple[str, SharePartitionKey, int, int]] = []
        self._held: list[Callable[[], None]] = []

    def _partitions(self, topic_id: uuid.UUID) -> int | None:
        topic = None if self.image is None else self.image.get_by_id(topic_id)
        return None if topic is None else topic.partitions

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int, callback: WriteCallback) -> None:
        self.calls.append(("initialize", key, state_epoch, start_offset))
        self._run(functools.partial(self.store.initialize, key, state_epoch, start_offset, callback), callback)

    def delete(self, key: SharePartitionKey, callback: WriteCallback) -> None:
        self.calls.append(("delete", key, -1, -1))
        self._run(functools.partial(self.store.delete, key, callback), callback)

    def read_summary(self, key: SharePartitionKey, leader_epoch: int, callback: SummaryCallback) -> None:
        self.store.read_summary(key, leader_epoch, callback)

    def read(self, key: SharePartitionKey, leader_epoch: int, callback: ReadCallback) -> None:
        self.store.read(key, leader_epoch, callback)

    def write(self, write: PersisterWrite, callback: WriteCallback) -> None:
        self.store.write(write, callback)

    def asked(self, kind: str) -> list[SharePartitionKey]:
        """The share-partitions of the calls of ``kind``, in order."""
        return [key for k, key, _, _ in self.calls if k == kind]

    def initializations(self) -> dict[SharePartitionKey, tuple[int, int]]:
        """Each share-partition's last initialization: (state epoch, start offset)."""
        return {key: (epoch, offset) for k, key, epoch, offset in self.calls if k == "initialize"}

    def release(self) -> int:
        """Answer the held calls, in order; how many there were."""
        held, self._held = self._held, []
        for call in held:
            call()
        return len(held)

    def forget_held(self) -> None:
        """The held calls are lost (a crash of the share coordinator or the broker)."""
        self._held.clear()

    def _run(self, call: Callable[[], None], callback: WriteCallback) -> None:
        fail = self.fail
        run = call if fail is None else functools.partial(callback, fail)
        if self.hold:
            self._held.append(run)
        else:
            run()


def keys(group_id: str, *topics: tuple[uuid.UUID, Iterable[int]]) -> list[SharePartitionKey]:
    """``keys(G, (foo, range(3)), (bar, [0]))``: the share-partitions, in that order."""
    return [SharePartitionKey(group_id, t, p) for t, parts in topics for p in parts]


class ShareHarness(Harness):
    """The consumer group harness with a :class:`ShareGroupManager` in the place of the
    consumer group coordinator."""

    def __init__(
        self,
        tmp_path: Any,
        config: ShareGroupConfig | None = None,
        persister: HeldPersister | None = None,
        **kw: Any,
    ) -> None:
        self.persister = persister or HeldPersister()
        self.share_config = config or ShareGroupConfig()
        super().__init__(tmp_path, **kw)

    def _new_manager(self) -> ShareGroupManager:
        self.persister.image = self.topics
        return ShareGroupManager(
            self.share_config,
            image=self.topics,
            append=self._append,
            timer=self.timer,
            clock=self.clock,
            persister=self.persister,
            **self.kw,
        )

    def _kept_on_restart(self) -> dict[str, Any]:
        return {"persister": self.persister, "share_config": self.share_config}

    @property
    def share(self) -> ShareGroupManager:
        manager: ShareGroupManager = self.manager
        return manager

    # -- requests ---------------------------------------------------------------------------
    def send(self, request: ShareGroupHeartbeat) -> list[ShareGroupHeartbeatResult]:  # type: ignore[override]
        """Send without running the loop: the answers so far (empty until durable)."""
        answers: list[ShareGroupHeartbeatResult] = []
        self.share.share_group_heartbeat(request, answers.append)
        return answers

    def heartbeat(  # type: ignore[override]
        self, group_id: str = "grp", member_id: str = "m1", epoch: int = 0, **fields: Any
    ) -> ShareGroupHeartbeatResult:
        """One heartbeat, answered once durable."""
        answers = self.send(ShareGroupHeartbeat(group_id, member_id, epoch, **fields))
        self.loop.run_pending()
        assert len(answers) == 1, answers
        return answers[0]

    def join(  # type: ignore[override]
        self, member_id: str, topics: Sequence[str] = ("foo",), group_id: str = "grp", **kw: Any
    ) -> ShareGroupHeartbeatResult:
        result = self.heartbeat(group_id, member_id, 0, subscribed_topic_names=list(topics), **kw)
        assert result.error is E.none, result
        return result

    def beat(self, member_id: str, group_id: str = "grp", **kw: Any) -> ShareGroupHeartbeatResult:
        """A steady heartbeat at the member's epoch."""
        return self.heartbeat(group_id, member_id, self.member(member_id, group_id).member_epoch, **kw)

    def release(self) -> None:
        """The persister answers what it held; the writes that follow are made durable."""
        self.persister.release()
        self.loop.run_pending()

    # -- state --------------------------------------------------------------------------------
    def group(self, group_id: str = "grp") -> ShareGroup:
        group: ShareGroup = self.share.groups[group_id]
        return group

    def member(self, member_id: str, group_id: str = "grp") -> ShareGroupMember:  # type: ignore[override]
        return self.group(group_id).members[member_id]

    def initialized(self, group_id: str = "grp") -> dict[uuid.UUID, frozenset[int]]:
        return self.group(group_id).initialized_partitions()

    def initializing(self, group_id: str = "grp") -> dict[uuid.UUID, frozenset[int]]:
        return {t: v.partitions for t, v in self.group(group_id).initializing_topics.items()}
