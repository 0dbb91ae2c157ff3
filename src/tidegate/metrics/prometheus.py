"""Broker metrics: plain counters on the hot path, Prometheus families at scrape time.

Each broker owns one :class:`BrokerMetrics` with its own ``CollectorRegistry`` (not
prometheus_client's global one, so one process can host several brokers): the hot-path
counters (:mod:`tidegate.metrics.request_metrics`), the scrape-time collectors
(:mod:`tidegate.metrics.collectors`) registered for the parts the broker has, served by
:class:`~tidegate.metrics.http_server.MetricsHttpServer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, generate_latest

from tidegate.clock import Clock
from tidegate.metrics.collectors import (
    AuthorizerCollector,
    AuthorizerState,
    ClassicGroupsState,
    CleanerState,
    FetchSessionCacheCollector,
    FetchSessionsState,
    FlusherCollector,
    FlusherState,
    GroupCoordinatorCollector,
    LogCleanerCollector,
    LogCollector,
    LogDirFailureCollector,
    LogDirFailures,
    ModernGroupsState,
    PartitionLog,
    PurgatoryCollector,
    PurgatoryState,
    QuotaCollector,
    QuotasState,
    RequestCollector,
    ShareGroupCollector,
    SharePartitionsState,
    SocketServerCollector,
    SocketServerState,
    TopicCollector,
    TransactionCoordinatorCollector,
    TransactionCoordinatorState,
)
from tidegate.metrics.request_metrics import MAX_CLIENT_IDS, RequestMetrics, TopicMetrics


class BrokerMetrics:
    """One broker's registry and the plain counters its mechanisms update.

    ``requests`` and ``topics`` are the hot-path counters; the broker wires them in
    only when metrics are enabled (``metrics.listener`` set). The scrape-time
    collectors (connections, logs, memory pool, purgatories) read live state and
    cost nothing between scrapes.
    """

    def __init__(self, *, max_client_ids: int = MAX_CLIENT_IDS) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestMetrics(max_client_ids)
        self.topics = TopicMetrics()
        self.purgatories: dict[str, PurgatoryState] = {}
        self.registry.register(RequestCollector(self.requests))
        self.registry.register(TopicCollector(self.topics))
        self.registry.register(PurgatoryCollector(self.purgatories))

    def register_socket_server(self, server: SocketServerState) -> None:
        self.registry.register(SocketServerCollector(server))

    def register_logs(self, logs: Callable[[], Mapping[tuple[str, int], PartitionLog]]) -> None:
        self.registry.register(LogCollector(logs))

    def register_log_cleaner(self, cleaner: CleanerState, clock: Clock) -> None:
        """Expose the log cleaner's gauges (Kafka's LogCleaner metrics)."""
        self.registry.register(LogCleanerCollector(cleaner, clock))

    def register_purgatory(self, name: str, purgatory: PurgatoryState) -> None:
        """Expose a purgatory as ``delayedOperation=name`` ("Produce", "Fetch"), read at
        scrape time."""
        self.purgatories[name] = purgatory

    def unregister_purgatory(self, name: str) -> None:
        self.purgatories.pop(name, None)

    def register_quotas(self, quotas: QuotasState) -> None:
        """Expose the client-quota managers (per-entity rates and throttle times)."""
        self.registry.register(QuotaCollector(quotas))

    def register_transaction_coordinator(self, coordinator: TransactionCoordinatorState) -> None:
        """Expose the transaction coordinator's load times, marker retries and states."""
        self.registry.register(TransactionCoordinatorCollector(coordinator))

    def register_group_coordinators(
        self, classic: ClassicGroupsState, consumer: ModernGroupsState, share: ModernGroupsState
    ) -> None:
        """Expose the group-coordinator-metrics of the three group coordinators (groups per
        protocol and state, rebalances, offsets) and each group's members and epoch."""
        self.registry.register(GroupCoordinatorCollector(classic, consumer, share))

    def register_share_partitions(self, partitions: SharePartitionsState) -> None:
        """Expose the share metrics: ShareSessionCache, each share-partition's
        SharePartitionMetrics, ShareGroupMetrics and the share BrokerTopicMetrics."""
        self.registry.register(ShareGroupCollector(partitions))

    def register_authorizer(self, authorizer: AuthorizerState) -> None:
        """Expose the authorizer's ACL count and its allowed/denied decisions."""
        self.registry.register(AuthorizerCollector(authorizer))

    def register_fetch_sessions(self, cache: FetchSessionsState) -> None:
        """Expose the fetch session cache's ``size``, ``total_partitions`` and
        ``evictions_total``."""
        self.registry.register(FetchSessionCacheCollector(cache))

    def register_flusher(self, flusher: FlusherState) -> None:
        """Expose the group-commit flusher's ``rounds`` and ``requests`` counters."""
        self.registry.register(FlusherCollector(flusher))

    def register_log_dir_failures(self, channel: LogDirFailures) -> None:
        """Expose the log dir's offline count, full flag and storage-error counter."""
        self.registry.register(LogDirFailureCollector(channel))

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
