"""Kafka's LogManager: the partition logs of the data directory and their lifecycle.

Loading every partition at start (recovering after a crash), creating and deleting
them with their topics, and the periodic work on every log (time-based flush,
retention, recovery-point and leader-epoch checkpoints, producer-id expiry). Appending
and fetching belong to :class:`~tidegate.server.replica_manager.ReplicaManager`, which
holds one of these. Each partition directory carries a ``partition.metadata`` file with
its topic id, as Kafka's does, so a directory left behind by a deleted topic is never
mistaken for a new topic of the same name.

The log start offsets live where Kafka keeps them: ``log-start-offset-checkpoint`` in
the log directory, one ``topic partition offset`` line per partition whose start is
above its first segment (elsewhere the first segment's base offset says it), read when
the logs are loaded and written through the scheduler on a worker thread
(:meth:`LogManager.checkpoint_log_start_offsets`: DeleteRecords waits for it), when a
topic is deleted, and at shutdown.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidegate.clock import Clock
from tidegate.log.checkpoint import CheckpointWrite, CheckpointWriter, read_checkpoint_file
from tidegate.log.cleaner import Cleaner
from tidegate.log.config import LogConfig
from tidegate.log.dir_failure import LogDirFailureChannel, StorageError
from tidegate.log.local_log import partition_dir
from tidegate.log.log import Log
from tidegate.log.log_cleaner import LogCleaner
from tidegate.log.log_cleaner_manager import LogCleanerManager
from tidegate.server.metadata import TopicInfo, TopicStore
from tidegate.utils.files import TMP_MARK, open_dir, write_atomically
from tidegate.utils.topic import is_internal_topic

if TYPE_CHECKING:
    from tidegate.scheduler import OnDone, Scheduler

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
#: Kafka's per-log-directory file of log start offsets (``LogManager.LogStartOffsetCheckpointFile``).
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"

TopicPartition = tuple[str, int]


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    try:
        for line in (directory / PARTITION_METADATA).read_text().splitlines():
            if line.startswith("topic_id:"):
                return uuid.UUID(line.split(":", 1)[1].strip())
    except (OSError, ValueError):
        return None
    return None


@dataclass(slots=True)
class PreparedPartitions:
    """Partition logs opened for a topic (or new partitions of one) but not yet
    registered: the result of the file work a worker thread does for CreateTopics and
    CreatePartitions."""

    info: TopicInfo
    start: int
    end: int
    logs: dict[TopicPartition, Log]


class LogManager:
    def __init__(
        self,
        root: Path,
        store: TopicStore,
        log_config_for: Callable[[TopicInfo], LogConfig],
        clock: Clock,
        scheduler: Scheduler,
    ) -> None:
        self.root = root
        self.store = store
        self.log_config_for = log_config_for
        #: the logs are handed its wall time (retention, roll, flush.ms: Kafka's ``time``)
        self.clock = clock
        #: where checkpoint writes run (a worker thread)
        self.scheduler = scheduler
        self.logs: dict[TopicPartition, Log] = {}
        #: the log dir's I/O failures and whether it is full or offline (docs/reliability.md)
        self.failure_channel = LogDirFailureChannel(str(root), clock)
        #: told of a partition whose log start offset retention may have moved (the
        #: ReplicaManager's: incremental fetch sessions report it)
        self.log_start_moved: Callable[[TopicPartition], None] | None = None
        #: topics whose creation is under way on a worker thread (not in the store yet)
        self.creating: set[str] = set()
        self._lso_writer = CheckpointWriter(LOG_START_OFFSET_CHECKPOINT_FILE)
        #: the log start offsets read at load, handed to the logs as they open
        self._loaded_log_start_offsets: dict[TopicPartition, int] = {}
        #: the entries of the last log-start-offset-checkpoint written (or read)
        self._checkpointed_lsos: dict[TopicPartition, int] = {}
        #: the log cleaner (log.cleaner.enable), set up by :meth:`enable_cleaner`
        self.cleaner: LogCleaner | None = None
        self._root_fd = -1

    def enable_cleaner(
        self, dedupe_buffer_size: int, load_factor: float = 0.9, io_buffer_size: int = 524288
    ) -> LogCleaner:
        """Start compacting logs whose cleanup.policy includes compact; the first dirty
        offsets are in ``cleaner-offset-checkpoint`` in the data directory."""
        self._root_fd = open_dir(self.root)
        self.cleaner = LogCleaner(
            LogCleanerManager(self._root_fd, self.failure_channel),
            Cleaner(dedupe_buffer_size, load_factor, clock=self.clock, io_buffer_size=io_buffer_size),
        )
        return self.cleaner

    def clean(self) -> bool:
        """One pass of the log cleaner (the filthiest eligible log); False: none was due."""
        if self.cleaner is None:
            return False
        return self.cleaner.clean_once(self.logs, self.clock.wall_milliseconds())

    # -- lifecycle ---------------------------------------------------------
    def load(self) -> None:
        """Open every partition of every stored topic; remove directories of deleted topics."""
        wanted: dict[Path, TopicInfo] = {}
        for info in self.store.topics.values():
            for p in range(info.partitions):
                wanted[partition_dir(self.root, info.name, p)] = info
        self._loaded_log_start_offsets = self._read_log_start_offsets()
        self._checkpointed_lsos = dict(self._loaded_log_start_offsets)
        for child in sorted(self.root.iterdir()):
            if TMP_MARK in child.name and child.is_file():
                child.unlink(missing_ok=True)  # a file replacement cut short by a crash
                continue
            if not child.is_dir():
                continue
            owner = wanted.get(child)
            if owner is None or _read_topic_id(child) not in (None, owner.topic_id):
                log.info("removing %s: it belongs to no live topic", child)
                shutil.rmtree(child, ignore_errors=True)
        for info in self.store.topics.values():
            if is_internal_topic(info.name) and "cleanup.policy" not in info.configs:
                # created by a tidegate older than its log cleaner: Kafka creates the
                # internal topics compacted, so their offsets and transaction states
                # are never removed by time retention
                self.store.set_configs(info.name, {**info.configs, "cleanup.policy": "compact"})
                log.info("%s: cleanup.policy=compact, as Kafka creates it", info.name)
            self._open_partitions(info, 0, info.partitions)
        self._loaded_log_start_offsets = {}
        for (topic, partition), plog in self.logs.items():
            if not plog.had_clean_shutdown:
                log.info(
                    "recovered %s-%d after an unclean shutdown: log end offset %d, "
                    "%d byte(s) of torn or corrupt tail truncated",
                    topic,
                    partition,
                    plog.log_end_offset,
                    plog.recovered_truncated_bytes,
                )
            elif plog.recovered_truncated_bytes:
                log.warning(
                    "%s-%d: %d byte(s) of corrupt tail truncated despite a clean shutdown; "
                    "log end offset %d",
                    topic,
                    partition,
                    plog.recovered_truncated_bytes,
                    plog.log_end_offset,
                )

    def _open_partitions(self, info: TopicInfo, start: int, end: int) -> None:
        self.logs.update(self._open_logs(info, start, end))

    def _open_logs(self, info: TopicInfo, start: int, end: int) -> dict[TopicPartition, Log]:
        """Create (or open) the directories and logs of partitions ``start..end-1``
        without registering them: safe on a worker thread (it reads only the topic, the
        configs and the loaded start offsets)."""
        config = self.log_config_for(info)
        now = self.clock.wall_milliseconds()
        opened: dict[TopicPartition, Log] = {}
        for p in range(start, end):
            directory = partition_dir(self.root, info.name, p)
            directory.mkdir(parents=True, exist_ok=True)
            meta = directory / PARTITION_METADATA
            if not meta.exists():
                write_atomically(meta, f"version: 0\ntopic_id: {info.topic_id}\n".encode())
            opened[(info.name, p)] = Log(
                directory, config, now,
                log_start_offset=self._loaded_log_start_offsets.get((info.name, p)),
            )  # fmt: skip
        return opened

    def internal_log(self, topic: str, configs: Mapping[str, str], create: bool) -> Log | None:
        """Partition 0 of a one-partition internal topic (``__consumer_offsets``,
        ``__share_group_state``), created with ``configs`` on first use when ``create``
        (as Kafka creates them on a coordinator's first need); None if it does not exist."""
        plog = self.get_log(topic, 0)
        if plog is None and create and self.store.get(topic) is None:
            self.create_topic(topic, 1, dict(configs))
            log.info("created the internal topic %s", topic)
            plog = self.get_log(topic, 0)
        return plog

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        """Open every partition log first, then persist the topic: all or nothing.

        If a log cannot be opened (no disk space, out of file descriptors) the
        logs opened so far are deleted and the topic is not stored, so a failed
        create never leaves a topic with missing partitions behind. This runs the
        file work inline; CreateTopics requests use :meth:`prepare_topic` on a worker
        thread and :meth:`commit_topic` on the loop instead.
        """
        return self.commit_topic(self.prepare_topic(name, partitions, configs))

    def prepare_topic(self, name: str, partitions: int, configs: dict[str, str]) -> PreparedPartitions:
        """The file work of creating a topic (every partition's directory and log), safe
        on a worker thread; nothing is visible until :meth:`commit_topic`. On an error the
        directories made so far are removed and the error raised."""
        info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs))
        return PreparedPartitions(info, 0, partitions, self._open_logs_or_roll_back(info, 0, partitions))

    def commit_topic(self, prepared: PreparedPartitions) -> TopicInfo:
        """Register prepared logs and persist the topic (on the loop)."""
        info = prepared.info
        self.logs.update(prepared.logs)
        try:
            return self.store.add(info)
        except BaseException:
            self._drop_partitions(info.name, 0, info.partitions)
            raise

    def add_partitions(self, name: str, count: int) -> None:
        self.commit_partitions(self.prepare_partitions(name, count))

    def prepare_partitions(self, name: str, count: int) -> PreparedPartitions:
        """The file work of growing ``name`` to ``count`` partitions (worker-thread safe)."""
        info = self.store.topics[name]
        old = info.partitions
        return PreparedPartitions(info, old, count, self._open_logs_or_roll_back(info, old, count))

    def commit_partitions(self, prepared: PreparedPartitions) -> None:
        name, old, count = prepared.info.name, prepared.start, prepared.end
        self.logs.update(prepared.logs)
        try:
            self.store.set_partitions(name, count)
        except BaseException:
            self._drop_partitions(name, old, count)
            raise

    def _open_logs_or_roll_back(self, info: TopicInfo, start: int, end: int) -> dict[TopicPartition, Log]:
        try:
            return self._open_logs(info, start, end)
        except BaseException:
            self._remove_partition_dirs(info.name, start, end)
            raise

    def _remove_partition_dirs(self, name: str, start: int, end: int) -> None:
        for p in range(start, end):
            shutil.rmtree(partition_dir(self.root, name, p), ignore_errors=True)

    def discard(self, prepared: PreparedPartitions) -> None:
        """Close and remove prepared logs that will not be committed."""
        for plog in prepared.logs.values():
            try:
                plog.close()
            except Exception:
                log.exception("error closing a discarded log of %s", prepared.info.name)
        self._remove_partition_dirs(prepared.info.name, prepared.start, prepared.end)

    def _drop_partitions(self, name: str, start: int, end: int) -> None:
        for p in range(start, end):
            plog = self.logs.pop((name, p), None)
            if plog is not None:
                try:
                    plog.delete()
                except Exception:
                    log.exception("error removing partition %s-%d", name, p)
        self._remove_partition_dirs(name, start, end)

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.store.delete(name)
        for p in range(info.partitions):
            plog = self.logs.pop((name, p), None)
            if plog is not None:
                plog.delete()
            shutil.rmtree(partition_dir(self.root, name, p), ignore_errors=True)
        if self.cleaner is not None:
            for p in range(info.partitions):
                if (name, p) in self.cleaner.manager.checkpoints:
                    self.cleaner.manager.update_checkpoint((name, p), None)
        if any(tp[0] == name for tp in self._checkpointed_lsos):
            # As Kafka on a deletion: the topic's start offsets leave the checkpoint now,
            # before a new topic of the same name could be loaded with them.
            try:
                self._lso_checkpoint().run()
            except OSError as exc:
                log.error("could not write %s: %s", LOG_START_OFFSET_CHECKPOINT_FILE, exc)
        return info

    # -- configs changed at run time (AlterConfigs) ---------------------------
    def topic_config_updated(self, name: str) -> None:
        """A topic's configs changed: its partitions take the new LogConfig, which the
        next append, retention pass and roll use (Kafka's ``Log.updateConfig``)."""
        info = self.store.topics[name]
        config = self.log_config_for(info)
        for p in range(info.partitions):
            plog = self.logs.get((name, p))
            if plog is not None:
                plog.update_config(config)

    def broker_config_updated(self) -> None:
        """A dynamic broker default changed: every topic's LogConfig is rebuilt from its
        own overrides and the new defaults (Kafka's ``DynamicLogConfig.reconfigure``)."""
        for name in self.store.topics:
            self.topic_config_updated(name)

    def close(self) -> None:
        lsos = self._lso_checkpoint()
        failures = self.failure_channel
        for plog in self.logs.values():
            if failures.offline:
                # no flush, checkpoint or clean-shutdown marker: the next start recovers
                plog.abandon()
                continue
            try:
                plog.close()
            except OSError as exc:
                failures.error(StorageError(f"close of {plog.directory.name}", exc))
                plog.abandon()
            except Exception:
                log.exception("error closing %s", plog)
        self.logs.clear()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1
        if failures.offline:
            return
        try:
            lsos.run()
        except OSError as exc:
            log.error("could not write %s: %s", LOG_START_OFFSET_CHECKPOINT_FILE, exc)

    # -- log-start-offset-checkpoint -------------------------------------------------
    def _read_log_start_offsets(self) -> dict[TopicPartition, int]:
        fd = open_dir(self.root)
        try:
            lines = read_checkpoint_file(fd, LOG_START_OFFSET_CHECKPOINT_FILE)
        finally:
            os.close(fd)
        out: dict[TopicPartition, int] = {}
        for line in lines or ():
            parts = line.split(" ")
            try:
                topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
            except (IndexError, ValueError):
                log.warning("ignoring malformed line %r of %s", line, LOG_START_OFFSET_CHECKPOINT_FILE)
                continue
            out[(topic, partition)] = offset
        return out

    def _lso_checkpoint(self) -> CheckpointWrite:
        """The write of every log's start offset that its first segment does not imply
        (Kafka's ``checkpointLogStartOffsetsInDir``), to run on any thread."""
        entries = {
            tp: plog.log_start_offset
            for tp, plog in self.logs.items()
            if not plog.closed and plog.log_start_offset > plog.segments[0].base_offset
        }
        self._checkpointed_lsos = entries
        fd = open_dir(self.root)
        try:
            return self._lso_writer.ticket(
                fd, [f"{t} {p} {offset}" for (t, p), offset in sorted(entries.items())]
            )
        finally:
            os.close(fd)

    def checkpoint_failed(self, what: str) -> OnDone:
        """The ``on_done`` of a checkpoint write run off the loop: an I/O error goes to the
        log dir's failure channel (ENOSPC: full; anything else: offline until restart), as
        Kafka hands a checkpoint's IOException to its LogDirFailureChannel."""
        failures = self.failure_channel

        def on_done(_result: object, exc: BaseException | None) -> None:
            if isinstance(exc, OSError):
                failures.error(StorageError(what, exc))
            elif exc is not None:
                log.error("%s failed: %s", what, exc)

        return on_done

    def checkpoint_log_start_offsets(
        self, on_done: Callable[[BaseException | None], None] | None = None
    ) -> None:
        """Write ``log-start-offset-checkpoint`` on a worker thread and call ``on_done``
        (with the error, if any) once it is durable."""
        ticket = self._lso_checkpoint()
        report = self.checkpoint_failed(f"{LOG_START_OFFSET_CHECKPOINT_FILE} write")

        def done(_result: object, exc: BaseException | None) -> None:
            report(None, exc)
            if on_done is not None:
                on_done(exc)

        self.scheduler.submit(ticket.run, done)

    def leader_epoch_checkpoints(self) -> list[CheckpointWrite]:
        """The leader-epoch-checkpoint writes of logs whose epochs were trimmed since."""
        tickets = []
        for plog in self.logs.values():
            ticket = plog.checkpoint_leader_epochs()
            if ticket is not None:
                tickets.append(ticket)
        return tickets

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def recovery_point_checkpoints(self) -> list:
        """Checkpoint writes for every log whose recovery point moved (run them off the loop)."""
        tickets = []
        for plog in self.logs.values():
            ticket = plog.checkpoint_recovery_point()
            if ticket is not None:
                tickets.append(ticket)
        return tickets

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """``producer.id.expiration.ms``: forget idle idempotent producers on every partition
        (idle since their last batch's max timestamp: the wall clock)."""
        now_ms = self.clock.wall_milliseconds()
        removed = 0
        for plog in self.logs.values():
            removed += plog.remove_expired_producers(now_ms, expiration_ms)
        return removed

    def maintenance(self, retention_due: bool) -> None:
        """Time-based flush (flush.ms) and, when due, retention on every partition."""
        now_ms = self.clock.wall_milliseconds()
        failures = self.failure_channel
        if failures.offline:
            return  # nothing is flushed or deleted in an offline dir (its state is unknown)
        for key, plog in list(self.logs.items()):
            try:
                plog.maybe_flush_by_time(now_ms)
            except OSError as exc:
                failures.error(StorageError(f"flush of {plog.directory.name}", exc, fatal=True))
                return
            if retention_due and (self.cleaner is None or self.cleaner.in_progress is not plog):
                try:
                    deleted = plog.apply_retention(now_ms)
                except OSError as exc:
                    if failures.error(StorageError(f"retention of {plog.directory.name}", exc)):
                        return
                    continue
                if deleted:
                    log.info("retention deleted %d segment(s) of %s", deleted, plog)
                    if self.log_start_moved is not None:
                        self.log_start_moved(key)
