"""The broker's core, wired: every sans-IO part of one node, no sockets, no event loop.

:class:`BrokerCore` builds what a broker is made of — the LogManager and
ReplicaManager, the group coordinator and its purgatories, the client quota managers,
the request handlers and KafkaApis, and the TimerReaper that drives every timer — each
through its constructor (nothing is wired by setting attributes afterwards but the two
links between parts that use each other: ReplicaManager and the transaction coordinator,
which appends through it, and the transaction coordinator's markers and the group
coordinator's pending offsets), on a given
:class:`~tidegate.scheduler.Scheduler` and :class:`~tidegate.clock.Clock`. The shell
(:mod:`tidegate.server.broker`) builds one on the asyncio loop and puts a SocketServer in
front of it; tests build one on ``tests/fake_loop.FakeLoop`` and a MockClock and drive
requests straight into :meth:`KafkaApis.handle`, so the same wiring runs in both.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidegate.clock import Clock, MonotonicMs
from tidegate.config import BrokerConfig, topic_log_config
from tidegate.coordinator.group.group_config import GroupConfigManager
from tidegate.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from tidegate.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, OffsetsLog
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupConfig,
    ConsumerGroupManager,
)
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupConfig,
    ShareGroupManager,
)
from tidegate.coordinator.share.share_coordinator import (
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorConfig,
    share_group_state_topic_configs,
)
from tidegate.coordinator.transaction.producer_id_manager import ProducerIdManager
from tidegate.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from tidegate.coordinator.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
)
from tidegate.coordinator.transaction.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
)
from tidegate.log.cleaner import PreparedClean
from tidegate.network.request_channel import RequestChannel
from tidegate.scheduler import Cancellable, Scheduler
from tidegate.security.authorizer.acl_store import AclStore
from tidegate.security.authorizer.standard_authorizer import StandardAuthorizer, parse_super_users
from tidegate.security.credentials import CredentialStore
from tidegate.server.acl_apis import AclApis
from tidegate.server.authorization import AuthorizationStep
from tidegate.server.cluster_admin import ClusterAdminApis
from tidegate.server.config_admin import ConfigAdminApis
from tidegate.server.consumer_group_apis import ConsumerGroupApis
from tidegate.server.endpoints import Endpoints
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.group_apis import GroupApis, offsets_topic_configs
from tidegate.server.kafka_apis import KafkaApis
from tidegate.server.log_dir_admin import LogDirAdminApis
from tidegate.server.log_manager import LogManager
from tidegate.server.metadata import BrokerConfigStore, TopicStore, load_or_create_meta
from tidegate.server.purgatory import DelayedOperationPurgatory
from tidegate.server.quota.client_quota_manager import ClientQuotaManagerConfig
from tidegate.server.quota.quota_factory import QuotaManagers
from tidegate.server.quota_admin import QuotaAdminApis
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.request_handler_helper import RequestHandlerHelper
from tidegate.server.security_apis import SecurityApis
from tidegate.server.share.share_partition_manager import (
    ShareGroupSettings,
    SharePartitionManager,
    SharePartitionManagerConfig,
)
from tidegate.server.share_group_apis import ShareGroupApis
from tidegate.server.timer import SystemTimer
from tidegate.server.timer_reaper import TimerReaper
from tidegate.server.topic_admin import TopicAdminApis
from tidegate.server.transaction_apis import TransactionApis

if TYPE_CHECKING:
    from tidegate.log.cleaner_worker import CleanerWorker
    from tidegate.metrics.prometheus import BrokerMetrics

log = logging.getLogger(__name__)

MAINTENANCE_TICK_MS = 1000


class BrokerCore:
    """The broker's parts, each built with what it needs (Kafka's ``BrokerServer.startup``):
    the constructor reads as the parts list, in the order they depend on each other.

    ``channel`` is where the answers of parked requests and the ends of throttles go: the
    shell's :class:`~tidegate.network.request_channel.RequestChannel` (the SocketServer's
    connections register in it), a recording one in tests. ``metrics``: the broker's
    metrics when ``metrics.listener`` is set (nothing on the request path counts without
    them).
    """

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        scheduler: Scheduler,
        *,
        clock: Clock,
        channel: RequestChannel[Any],
        credentials: CredentialStore | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        """Build every part (long on purpose: the broker's parts list, read top to bottom,
        each part built once what it needs exists)."""
        self.config = config
        self.data_dir = data_dir
        self.scheduler = scheduler
        #: every component below is built with it (docs/architecture.md, "Time")
        self.clock = clock
        self.cluster_id = load_or_create_meta(data_dir, config.node_id, config.get("cluster.id"))
        self.store = TopicStore(data_dir)
        # Dynamic broker configs (IncrementalAlterConfigs on BROKER) apply before any log opens.
        self.broker_configs = BrokerConfigStore(data_dir)
        for dropped in config.load_dynamic(*self.broker_configs.load()):
            log.error("ignoring an invalid persisted dynamic broker config: %s", dropped)
        min_isr_layer = config.cluster_min_isr_record()
        if min_isr_layer is not None:  # KIP-966, as a Kafka 4.1+ controller at activation
            self.broker_configs.save(min_isr_layer, config.dynamic_configs(True))
            config.set_dynamic(min_isr_layer, per_broker=False)
            log.info("cluster-level min.insync.replicas=%s recorded (KIP-966)", min_isr_layer["min.insync.replicas"])
        self.logs = LogManager(
            data_dir, self.store, lambda info: topic_log_config(config, info.configs), clock, scheduler
        )
        started = clock.milliseconds()
        self.logs.load()
        if config.get("log.cleaner.enable"):
            self.logs.enable_cleaner(
                config.get("log.cleaner.dedupe.buffer.size"),
                config.get("log.cleaner.io.buffer.load.factor"),
                config.get("log.cleaner.io.buffer.size"),
            )
        log.info(
            "loaded %d partition log(s) of %d topic(s) from %s in %.2fs",
            len(self.logs.logs), len(self.store.topics), data_dir, (clock.milliseconds() - started) / 1000,
        )  # fmt: skip
        #: KIP-227 incremental fetch sessions (Kafka's FetchManager's cache)
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.replicas = ReplicaManager(
            self.logs,
            scheduler,
            clock=clock,
            fetch_sessions=self.fetch_sessions,
            fetch_purge_interval=config.get("fetch.purgatory.purge.interval.requests"),
            produce_purge_interval=config.get("producer.purgatory.purge.interval.requests"),
            node_id=config.node_id,
            topic_stats=metrics.topics if metrics is not None else None,
        )
        # Client quotas (docs/quotas.md): the three managers and their KIP-546 config.
        self.quotas = QuotaManagers(
            ClientQuotaManagerConfig(config.get("quota.window.num"), config.get("quota.window.size.seconds")),
            data_dir,
            clock=clock,
        )
        self.quotas.load()
        # The respond step every handler answers through (quotas, metrics, encoding), and
        # where it sends the answers of parked requests.
        self.request_helper = RequestHandlerHelper(channel, self.quotas, self.store, clock, metrics)
        respond = self.request_helper.send_response
        self.endpoints = Endpoints(config)
        # Authorization (docs/security.md): the StandardAuthorizer when configured, its
        # ACLs loaded before the first request is served.
        self.acl_store = AclStore(data_dir)
        self.authorizer: StandardAuthorizer | None = None
        if config.get("authorizer.class.name"):
            self.authorizer = StandardAuthorizer(
                parse_super_users(config.get("super.users")),
                config.get("allow.everyone.if.no.acl.found"),
                clock=clock,
            )
            self.authorizer.load(self.acl_store.load())
            log.info("authorizer %s: %d ACL(s) loaded", config.get("authorizer.class.name"),
                     len(self.authorizer.acls))
        self.authorization = AuthorizationStep(self.authorizer, self.store)
        self._build_group_coordinators(config, clock)
        self.groups = GroupApis(
            config, self.replicas, self.endpoints, self.offsets_log, self.group_coordinator,
            self.consumer_group_coordinator, self.share_group_coordinator, clock, respond=respond,
            topic_deletion_listeners=(self.share_coordinator.on_topics_deleted,
                                      self.share_partitions.on_topics_deleted),
        )  # fmt: skip
        self.consumer_groups = ConsumerGroupApis(
            config, self.consumer_group_coordinator, self.authorization, respond=respond
        )
        self.share_groups = ShareGroupApis(
            config, self.share_group_coordinator, self.share_partitions, self.authorization, self.endpoints,
            self.quotas, respond=respond,
        )  # fmt: skip
        self.credentials = credentials if credentials is not None else CredentialStore(None)
        # Transactions: the coordinator, its __transaction_state and markers; its periodic
        # tasks (timeouts, id expiry) and marker retries are tasks on its own timer.
        txn_config = TransactionConfig.from_broker(config)
        self.transaction_timer = SystemTimer(clock=clock)
        self.transaction_coordinator = TransactionCoordinator(
            txn_config,
            TransactionStateManager(txn_config, self.logs, self.replicas.append_records, data_dir, clock),
            ProducerIdManager(data_dir),
            TransactionMarkerChannelManager(self.replicas, self.transaction_timer, clock),
            self.transaction_timer,
            clock,
        )
        if config.get("transaction.partition.verification.enable"):
            # ReplicaManager and the coordinator use each other (the coordinator appends
            # through it): a link made once both exist
            self.replicas.transaction_verifier = self.transaction_coordinator.handle_verify_partitions
        self.transactions = TransactionApis(self.transaction_coordinator, self.replicas,
                                            self.groups.offsets_partition_for, clock, respond=respond)
        # Offsets in transactions: markers on __consumer_offsets commit or discard the
        # group coordinator's pending offsets.
        self.transaction_coordinator.markers.marker_listeners.append(self.group_coordinator.on_marker_written)
        # The other handlers, and KafkaApis: the pipeline and the data-path handlers.
        # The admin handlers, split as Kafka splits them: topics, configs (ConfigAdminManager,
        # ConfigHelper), client quotas, log dirs, the cluster and its KRaft quorum.
        self.topic_admin = TopicAdminApis(config, self.replicas, self.store, self.groups,
                                          respond=respond, metrics=metrics)
        self.config_admin = ConfigAdminApis(config, self.replicas, self.store, self.broker_configs,
                                            group_configs=self.group_configs)
        self.quota_admin = QuotaAdminApis(self.quotas)
        self.log_dir_admin = LogDirAdminApis(self.replicas)
        self.cluster_admin = ClusterAdminApis(config.node_id, self.cluster_id, self.replicas, self.store,
                                              self.endpoints, clock, group_configs=self.group_configs)
        self.security = SecurityApis(self.credentials)
        self.acls = AclApis(self.authorizer, self.acl_store)
        self.apis = KafkaApis(
            config,
            self.cluster_id,
            request_helper=self.request_helper,
            authorization=self.authorization,
            replicas=self.replicas,
            store=self.store,
            quotas=self.quotas,
            fetch_sessions=self.fetch_sessions,
            endpoints=self.endpoints,
            groups=self.groups,
            consumer_groups=self.consumer_groups,
            share_groups=self.share_groups,
            transactions=self.transactions,
            topic_admin=self.topic_admin,
            config_admin=self.config_admin,
            quota_admin=self.quota_admin,
            log_dir_admin=self.log_dir_admin,
            cluster_admin=self.cluster_admin,
            security=self.security,
            acls=self.acls,
            time=clock,
        )
        # The one scheduler drives every timer: delayed operations and throttles.
        self.reaper = TimerReaper(scheduler.call_at)
        for purgatory in self.purgatories:
            # fetches expiring at one tick share their reads (ReplicaManager.expire_fetches)
            advance = self.replicas.expire_fetches if purgatory is self.replicas.fetch_purgatory else None
            self.reaper.add_purgatory(purgatory, advance)
        for name, timer in self.quotas.throttle_timers():
            self.reaper.add_timer(name, timer)
        self.reaper.add_timer("TransactionCoordinator", self.transaction_timer)
        self.reaper.add_timer("ShareGroupLock", self.share_partitions.lock_timer)
        self._tasks: list[Cancellable] = []
        self._stopping = False
        #: log.cleaner.execution=process: the worker process, started on the first clean
        self._cleaner_worker: CleanerWorker | None = None
        #: when each periodic job is next due (monotonic: they are intervals)
        self._due_at: dict[str, MonotonicMs] = {}

    def _share_group_settings(self, group_id: str) -> ShareGroupSettings:
        """A share group's settings from its group configs over the broker's keys,
        derived again once the configs changed."""
        configs = self.group_configs
        cached = self._share_settings.get(group_id)
        if cached is None or cached[0] != configs.version:
            cached = (configs.version, ShareGroupSettings.of(configs.values(group_id)))
            self._share_settings[group_id] = cached
        return cached[1]

    def _build_group_coordinators(self, config: BrokerConfig, clock: Clock) -> None:
        """The group coordinators over ``__consumer_offsets`` (docs/groups.md): the classic
        one (Kafka's two purgatories: session expiry, and the join/sync phases of
        rebalances), KIP-848's consumer groups and KIP-932's share groups (their timers on
        the heartbeat purgatory's timing wheel, the topic store as their metadata image),
        and the share coordinator, share groups' state persister. Each knows the others'
        group ids (one id names one group), asked when needed."""
        #: group configs (IncrementalAlterConfigs on GROUP resources) over the group.* keys
        self.group_configs = GroupConfigManager(config, self.data_dir)
        self._share_settings: dict[str, tuple[int, ShareGroupSettings]] = {}
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", SystemTimer(clock=clock))
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", SystemTimer(clock=clock))
        logs = self.logs
        self.offsets_log = OffsetsLog(
            functools.partial(logs.internal_log, OFFSETS_TOPIC, offsets_topic_configs(config)),
            clock,
            append_records=self.replicas.append_records,
            timeout_ms=config.get("offsets.commit.timeout.ms"),
        )
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_broker(config), self.heartbeat_purgatory, self.rebalance_purgatory, self.offsets_log,
            clock,
            other_groups=lambda g: self.consumer_group_coordinator.group_type(g) or self.share_group_coordinator.group_type(g),
            consumer_groups=lambda g: self.consumer_group_coordinator.groups.get(g),
        )  # fmt: skip
        timer = self.heartbeat_purgatory.timer
        self.consumer_group_coordinator = ConsumerGroupManager(
            ConsumerGroupConfig.from_broker(config), image=self.store, append=self.offsets_log.append, timer=timer,
            clock=clock, classic_groups=self.group_coordinator,
            other_groups=lambda g: self.share_group_coordinator.group_type(g),
            group_configs=self.group_configs.int_configs,
        )  # fmt: skip
        self.group_coordinator.classic_members = self.consumer_group_coordinator
        share_state = self.share_coordinator_config = ShareCoordinatorConfig.from_broker(config)
        self.share_coordinator = ShareCoordinator(
            share_state,
            open_log=functools.partial(
                logs.internal_log, SHARE_GROUP_STATE_TOPIC, share_group_state_topic_configs(share_state)
            ),
            append_records=self.replicas.append_records,
            delete_records=self.replicas.delete_records,
            topic_partitions=self.store.partitions_of,
            clock=clock,
        )  # fmt: skip
        # Share fetching (docs/share-groups.md): the share-partitions, their locks and the
        # share fetch purgatory; appends wake parked share fetches.
        self.share_partitions = SharePartitionManager(
            self.replicas, self.store, self.share_coordinator, clock=clock,
            config=SharePartitionManagerConfig.from_broker(config), group_settings=self._share_group_settings,
        )  # fmt: skip
        self.replicas.share_fetch_wakeup = self.share_partitions.partitions_changed
        self.share_group_coordinator = ShareGroupManager(
            ShareGroupConfig.from_broker(config), image=self.store, append=self.offsets_log.append, timer=timer,
            clock=clock, persister=self.share_coordinator,
            other_groups=lambda g: self.group_coordinator.group_type(g) or self.consumer_group_coordinator.group_type(g),
            member_left=self.share_partitions.member_left_group, state_reset=self.share_partitions.drop_share_partitions,
            group_configs=self.group_configs.int_configs,
        )  # fmt: skip

    @property
    def purgatories(self) -> list[DelayedOperationPurgatory]:
        return [
            self.replicas.fetch_purgatory,
            self.replicas.produce_purgatory,
            self.heartbeat_purgatory,
            self.rebalance_purgatory,
            self.share_partitions.purgatory,
        ]

    def start(self) -> None:
        """Replay __consumer_offsets (arming members' session timers) and schedule the
        periodic work."""
        self.share_coordinator.startup()
        self.groups.start()
        self.transaction_coordinator.startup()
        start = self.clock.milliseconds()
        config = self.config
        self._cleaning = False
        self._intervals = {
            "retention": config.get("log.retention.check.interval.ms"),
            "checkpoint": config.get("log.flush.offset.checkpoint.interval.ms"),
            "producer-expiration": config.get("producer.id.expiration.check.interval.ms"),
            "offsets-retention": config.get("offsets.retention.check.interval.ms"),
            "log-cleaner": config.get("log.cleaner.backoff.ms"),
            "share-state-prune": self.share_coordinator_config.state_topic_prune_interval_ms,
            "share-state-cold-snapshot": self.share_coordinator_config.cold_partition_snapshot_interval_ms,
        }
        self._due_at = {name: MonotonicMs(start + interval) for name, interval in self._intervals.items()}
        schedule = self.scheduler.schedule
        self._tasks.append(schedule("log-maintenance", self.maintain_logs, MAINTENANCE_TICK_MS))
        self._tasks.append(schedule("group-maintenance", self.maintain_groups, MAINTENANCE_TICK_MS))

    # -- periodic work (Kafka's KafkaScheduler tasks) ----------------------------------
    def _due(self, name: str, now: MonotonicMs) -> bool:
        if now < self._due_at[name]:
            return False
        self._due_at[name] = MonotonicMs(now + self._intervals[name])
        return True

    def maintain_logs(self) -> None:
        """Time-based flush and retention, recovery-point and leader-epoch checkpoints
        (written on the scheduler's worker threads) and producer-id expiry, each when due."""
        now = self.clock.milliseconds()
        self.reaper.purge_if_due()
        self.logs.maintenance(self._due("retention", now))
        self._maybe_clean(now)
        if self._due("producer-expiration", now):
            removed = self.logs.remove_expired_producers(self.config.get("producer.id.expiration.ms"))
            if removed:
                log.info("removed %d expired producer id state(s)", removed)
        # No checkpoint of an offline dir: after a failed fsync a higher recovery point
        # would let the next start skip the validation of data that may not be on disk.
        if self._due("checkpoint", now) and not self.logs.failure_channel.offline:
            for ticket in self.logs.recovery_point_checkpoints():
                self.scheduler.submit(ticket.run, self.logs.checkpoint_failed("recovery-point checkpoint"))
            for epochs in self.logs.leader_epoch_checkpoints():
                self.scheduler.submit(epochs.run, self.logs.checkpoint_failed("leader-epoch checkpoint"))

    def _maybe_clean(self, due_now: MonotonicMs) -> None:
        """Kafka's cleaner thread: choose the filthiest log here, clean it off the loop
        (reads and ``.cleaned`` files only: in the worker process, or on a worker thread
        with log.cleaner.execution=thread), swap the result in back on the loop; when no
        log was due, look again after log.cleaner.backoff.ms."""
        cleaner = self.logs.cleaner
        if cleaner is None or self._cleaning or due_now < self._due_at["log-cleaner"]:
            return
        now = self.clock.wall_milliseconds()  # compaction lag and delete horizons: timestamps
        ltc = cleaner.choose(self.logs.logs, now)
        if ltc is None:
            self._due_at["log-cleaner"] = MonotonicMs(due_now + self._intervals["log-cleaner"])
            return
        # imported once a log is cleaned: pickle and the worker's plumbing cost every
        # start 1-2 ms otherwise
        from tidegate.log.cleaner_worker import CleanerWorker, CleanerWorkerDied, CleanJob

        log.info("beginning cleaning of %s: offsets %d to %d, %d dirty byte(s)", ltc.log,
                 ltc.first_dirty_offset, ltc.first_uncleanable_offset, ltc.cleanable_bytes)
        self._cleaning = True
        cleaner.in_progress = ltc.log
        cleaner.cleaner.throttler.rate = self.config.get("log.cleaner.io.max.bytes.per.second")

        def done(prepared: PreparedClean | None, exc: BaseException | None) -> None:
            self._cleaning = False
            cleaner.in_progress = None
            if isinstance(exc, CleanerWorkerDied):
                # the worker process was stopped (shutdown) or killed: not the log's fault
                log.warning("cleaning %s interrupted: %r", ltc.log, exc)
                return
            if exc is not None or prepared is None:
                cleaner.failed(ltc, exc or RuntimeError("no result"))
            else:
                cleaner.finish(ltc, prepared, self.clock.wall_milliseconds())

        if self.config.get("log.cleaner.execution") == "thread":
            self.scheduler.submit(lambda: cleaner.cleaner.prepare(ltc, now), done)
            return
        job = CleanJob.of(ltc, now, cleaner.cleaner)
        if self._cleaner_worker is None:
            self._cleaner_worker = CleanerWorker()
        worker = self._cleaner_worker

        def from_worker(result: Any, exc: BaseException | None) -> None:
            done(None if exc is not None else PreparedClean.of_worker(ltc.log, *result), exc)

        self.scheduler.submit(lambda: worker.run(job), from_worker)

    def maintain_groups(self) -> None:
        """Offset retention (the log cleaner compacts __consumer_offsets); the share
        coordinator's snapshots of cold share-partitions and the pruning of
        __share_group_state below the oldest snapshot."""
        now = self.clock.milliseconds()
        self.groups.maintenance(self._due("offsets-retention", now))
        if self._due("share-state-cold-snapshot", now):
            self.share_coordinator.snapshot_cold_partitions()
        if self._due("share-state-prune", now):
            self.share_coordinator.prune()

    # -- stopping ------------------------------------------------------------------------
    def stop_serving(self) -> None:
        """The first step of a shutdown: parked JoinGroup/SyncGroup requests answer
        NOT_COORDINATOR, parked long-poll fetches answer now with what they have."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self.share_partitions.shutdown()
        self.groups.shutdown()
        self.share_coordinator.shutdown()
        self.transaction_coordinator.shutdown()
        self.replicas.complete_fetches_now()
        if self._cleaner_worker is not None:
            self._cleaner_worker.close()  # a clean in progress is abandoned

    def close(self) -> None:
        """Stop the timers and close every log (flushed, clean-shutdown marker)."""
        self.reaper.shutdown()
        self.logs.close()
