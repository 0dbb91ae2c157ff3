"""A KIP-932 share group coordinator on fake time, over the broker's real parts (the
consumer group harness's: ``LogManager``, ``ReplicaManager``, ``__consumer_offsets``
through ``OffsetsLog.append``, the ``TopicStore`` as the metadata image, a ``SystemTimer``)
and the share-partitions' real state store (``InMemoryPersister``), seen through the
group coordinator's persister calls by :class:`GroupStatePersister`. Shared by the share
group test modules."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.unit.consumer_groups import Harness
from tidegate.coordinator.group.modern.share.persister import (
    ErrorsCallback,
    PartitionStateSummary,
    SummaryCallback,
)
from tidegate.coordinator.group.modern.share.share_group import ShareGroup
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupConfig,
    ShareGroupHeartbeat,
    ShareGroupHeartbeatResult,
    ShareGroupManager,
)
from tidegate.coordinator.group.modern.share.share_group_member import ShareGroupMember
from tidegate.errors import ErrorCode as E
from tidegate.server.share.in_flight import RecordState
from tidegate.server.share.persister import InMemoryPersister, SharePartitionKey

#: the persisted delivery states that count as delivered for the lag (KIP-1226)
_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


def subdir(tmp_path: Path, name: str) -> Path:
    """A directory of its own for a second broker's parts."""
    path = tmp_path / name
    path.mkdir()
    return path


class GroupStatePersister:
    """The group coordinator's persister calls (``ShareGroupStatePersister``) over the
    share-partitions' ``InMemoryPersister``, partition by partition.

    ``hold``: calls wait until :meth:`release` (the persister answering later);
    ``fail``: every share-partition of the next calls answers that error (nothing
    stored). ``calls`` lists what was asked."""

    def __init__(self, store: InMemoryPersister | None = None) -> None:
        self.store = store or InMemoryPersister()
        self.hold = False
        self.fail: E | None = None
        self.calls: list[tuple[str, str, Any]] = []
        self._held: list[Callable[[], None]] = []

    def initialize_state(
        self,
        group_id: str,
        state_epoch: int,
        start_offsets: Mapping[uuid.UUID, Mapping[int, int]],
        callback: ErrorsCallback,
    ) -> None:
        offsets = {t: dict(p) for t, p in start_offsets.items()}
        self.calls.append(("initialize", group_id, (state_epoch, offsets)))

        def init(key: SharePartitionKey, done: Callable[[E], None]) -> None:
            self.store.initialize(key, state_epoch, offsets[key.topic_id][key.partition], done)

        self._each(group_id, offsets, init, callback)

    def delete_state(
        self, group_id: str, partitions: Mapping[uuid.UUID, Collection[int]], callback: ErrorsCallback
    ) -> None:
        self.calls.append(("delete", group_id, {t: sorted(p) for t, p in partitions.items()}))
        self._each(group_id, partitions, self.store.delete, callback)

    def read_summary(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Collection[int]],
        callback: SummaryCallback,
    ) -> None:
        def read() -> None:
            out: dict[uuid.UUID, dict[int, PartitionStateSummary]] = {}
            for topic_id, parts in partitions.items():
                for p in parts:
                    out.setdefault(topic_id, {})[p] = self.summary(SharePartitionKey(group_id, topic_id, p))
            callback(out)

        self._run(read)

    def summary(self, key: SharePartitionKey) -> PartitionStateSummary:
        state = self.store.state(key)
        if state is None:
            return PartitionStateSummary(E.invalid_request, "uninitialized share-partition")
        done = sum(
            b.last_offset - b.first_offset + 1 for b in state.state_batches if b.delivery_state in _TERMINAL
        )
        return PartitionStateSummary(
            state_epoch=state.state_epoch,
            start_offset=state.start_offset,
            delivery_complete_count=done if state.start_offset >= 0 else -1,
        )

    def release(self) -> int:
        """Answer the held calls, in order; how many there were."""
        held, self._held = self._held, []
        for call in held:
            call()
        return len(held)

    @property
    def held(self) -> int:
        return len(self._held)

    def _each(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Collection[int]],
        call: Callable[[SharePartitionKey, Callable[[E], None]], None],
        callback: ErrorsCallback,
    ) -> None:
        fail = self.fail

        def run() -> None:
            errors: dict[uuid.UUID, dict[int, E]] = {}
            for topic_id, parts in partitions.items():
                answers = errors.setdefault(topic_id, {})
                for p in parts:
                    if fail is not None:
                        answers[p] = fail
                    else:
                        call(SharePartitionKey(group_id, topic_id, p), functools.partial(answers.__setitem__, p))
            callback(errors)

        self._run(run)

    def _run(self, call: Callable[[], None]) -> None:
        if self.hold:
            self._held.append(call)
        else:
            call()


class ShareHarness(Harness):
    """The consumer group harness with a :class:`ShareGroupManager` in the place of the
    consumer group coordinator."""

    def __init__(
        self,
        tmp_path: Any,
        config: ShareGroupConfig | None = None,
        persister: GroupStatePersister | None = None,
        **kw: Any,
    ) -> None:
        self.persister = persister or GroupStatePersister()
        self.share_config = config or ShareGroupConfig()
        super().__init__(tmp_path, **kw)

    def _new_manager(self) -> ShareGroupManager:
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
