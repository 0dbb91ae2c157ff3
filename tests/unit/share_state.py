"""A share coordinator on fake time over the broker's real parts: the ``LogManager`` and
``ReplicaManager`` in a temporary directory, ``__share_group_state`` written through
``append_records`` (acks=all, fsynced when the fake loop runs) and pruned through
``delete_records``, the ``TopicStore`` as the metadata image. :meth:`Node.restart` builds a
second node over the same directory (after a clean close or a kill -9), which replays
the log."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fake_loop import FakeLoop, clock_at
from tests.unit.logs import crash_all
from tidegate.clock import MockClock
from tidegate.config import BrokerConfig, topic_log_config
from tidegate.coordinator.share import (
    SHARE_GROUP_STATE_KEY,
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorConfig,
    share_group_state_topic_configs,
)
from tidegate.coordinator.share.records import ShareRecord, decode_record
from tidegate.log.log import Log
from tidegate.log.replay import replay_records
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import TopicStore
from tidegate.server.replica_manager import ReplicaManager

T0 = 1_000_000
BROKER = BrokerConfig()


class Node:
    def __init__(self, path: Path, config: ShareCoordinatorConfig | None = None, *,
                 clock: MockClock | None = None, state_topic_configs: dict[str, str] | None = None) -> None:
        self.path = path
        self.config = config or ShareCoordinatorConfig()
        self.clock = clock or clock_at(T0)
        self.state_topic_configs = (share_group_state_topic_configs(self.config) if state_topic_configs is None
                                    else state_topic_configs)
        self._build()

    def _build(self) -> None:
        self.loop = FakeLoop(self.clock)
        self.topics = TopicStore(self.path)
        self.logs = LogManager(self.path, self.topics, lambda info: topic_log_config(BROKER, info.configs),
                               self.clock, self.loop)
        self.logs.load()
        self.replicas = ReplicaManager(self.logs, self.loop, clock=self.clock, fetch_sessions=FetchSessionCache(1000))
        self.coordinator = ShareCoordinator(
            self.config,
            open_log=self._open,
            append_records=self.replicas.append_records,
            delete_records=self.replicas.delete_records,
            topic_partitions=self.partitions,
            clock=self.clock,
        )
        self.replayed = self.coordinator.startup()

    def _open(self, create: bool) -> Log | None:
        plog = self.logs.get_log(*SHARE_GROUP_STATE_KEY)
        if plog is None and create and self.topics.get(SHARE_GROUP_STATE_TOPIC) is None:
            self.logs.create_topic(SHARE_GROUP_STATE_TOPIC, 1, self.state_topic_configs)
            plog = self.logs.get_log(*SHARE_GROUP_STATE_KEY)
        return plog

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        info = self.topics.get_by_id(topic_id)
        return None if info is None else info.partitions

    @property
    def log(self) -> Log:
        plog = self._open(False)
        assert plog is not None
        return plog

    def create_topic(self, name: str, partitions: int = 3) -> uuid.UUID:
        return self.logs.create_topic(name, partitions, {}).topic_id

    def restart(self, *, crash: bool = False, before: Callable[[], object] | None = None) -> Node:
        """A new node over the same directory: after a clean close, or after a kill -9
        (``crash``: the logs dropped without flush or clean-shutdown marker; the log's
        recovery keeps every whole batch)."""
        self.coordinator.shutdown()
        if crash:
            crash_all(self.logs)
        else:
            self.logs.close()
        if before is not None:
            before()
        node = Node.__new__(Node)
        node.path, node.config, node.state_topic_configs = self.path, self.config, self.state_topic_configs
        node.clock = clock_at(self.clock.milliseconds())
        node._build()
        return node

    def call(self, fn: Callable[..., None], *args: Any) -> Any:
        """Call a callback API, let the fsync finish, return the one answer."""
        out: list[Any] = []
        fn(*args, out.append)
        self.loop.run_pending()
        assert len(out) == 1, out
        return out[0]

    def records(self) -> list[tuple[int, ShareRecord]]:
        """Every record from the log start offset, decoded."""
        out = []
        for offset, key, value in replay_records(self.log):
            assert key is not None
            record = decode_record(key, value)
            assert record is not None
            out.append((offset, record))
        return out
