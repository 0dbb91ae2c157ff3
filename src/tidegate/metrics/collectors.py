"""Scrape-time collectors: the broker's counters and live state as Prometheus families.

Custom ``prometheus_client`` collectors turn the hot-path counters
(:mod:`tidegate.metrics.request_metrics`) and the live state of the socket server, the logs,
the memory pool, the purgatories, the quotas, the authorizer and the coordinators into metric
families with Kafka's MBean names mapped the way the usual JMX exporter rules map them
(``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t`` ->
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``). docs/metrics.md has the
whole table. They run on the broker's event loop, so they never race the broker's dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tidegate.clock import Clock
from tidegate.errors import ErrorCode
from tidegate.metrics.request_metrics import (
    NS_PER_MS,
    Histogram,
    RequestMetrics,
    TopicMetrics,
)

if TYPE_CHECKING:
    from tidegate.log.log_cleaner_manager import LogCleanerManager
    from tidegate.network.connection_quotas import ConnectionQuotas
    from tidegate.network.memory_pool import MemoryPool
    from tidegate.network.mute_state import ChannelMuteState


# --------------------------------------------------------------------------------------
# collectors (scrape time, on the event loop)
# --------------------------------------------------------------------------------------
# Each collector reads a live component through a Protocol naming what it reads: the
# broker's parts fit them (tidegate.server.broker registers them), and nothing here imports
# the server.


class PartitionLog(Protocol):
    """A partition log (``tidegate.log.log.Log``) as LogCollector reads it."""

    @property
    def closed(self) -> bool: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def segments(self) -> Sized: ...


class ConnectionState(Protocol):
    """A connection of the SocketServer (``KafkaConnection``)."""

    @property
    def listener_name(self) -> str: ...
    @property
    def mute_state(self) -> ChannelMuteState: ...
    @property
    def closed(self) -> bool: ...


class SocketServerState(Protocol):
    """The SocketServer (``tidegate.network.socket_server``): its listeners, connections,
    connection limits (None: none configured) and request memory pool."""

    @property
    def bound(self) -> Mapping[str, tuple[str, int]]: ...
    @property
    def connections(self) -> Mapping[int, ConnectionState]: ...
    @property
    def pending(self) -> Mapping[str, Iterable[ConnectionState]]: ...
    @property
    def idle_closed_total(self) -> Mapping[str, int]: ...
    @property
    def quotas(self) -> ConnectionQuotas | None: ...
    @property
    def pool(self) -> MemoryPool: ...
    @property
    def clock(self) -> Clock: ...

    def acceptor_blocked_ns(self, listener: str) -> int: ...

    def response_bytes_in_flight(self) -> int: ...


class PurgatoryState(Protocol):
    """A ``DelayedOperationPurgatory``'s gauges and expiry counter."""

    @property
    def purgatory_size(self) -> int: ...
    @property
    def num_delayed_operations(self) -> int: ...
    @property
    def expirations_total(self) -> int: ...


class FetchSessionsState(Protocol):
    """The KIP-227 ``FetchSessionCache``."""

    @property
    def size(self) -> int: ...
    @property
    def total_partitions(self) -> int: ...
    @property
    def evictions_total(self) -> int: ...


class FlusherState(Protocol):
    """The acks=all group-commit ``LogFlusher``."""

    @property
    def rounds(self) -> int: ...
    @property
    def requests(self) -> int: ...


class LogDirFailures(Protocol):
    """The log dir's ``LogDirFailureChannel``."""

    @property
    def offline_log_directory_count(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def storage_errors(self) -> int: ...


class CleanerState(Protocol):
    """The log cleaner (``tidegate.log.log_cleaner.LogCleaner``): its last run's figures."""

    @property
    def last_run_ms(self) -> int: ...
    @property
    def max_dirty_percent(self) -> float: ...
    @property
    def recopy_percent(self) -> float: ...
    @property
    def max_clean_time_secs(self) -> float: ...
    @property
    def max_buffer_utilization_percent(self) -> float: ...
    @property
    def manager(self) -> LogCleanerManager: ...


class AuthorizerState(Protocol):
    """The ``StandardAuthorizer``'s ACLs and decision counters."""

    @property
    def acls(self) -> Sized: ...
    @property
    def allowed_count(self) -> int: ...
    @property
    def denied_count(self) -> int: ...
    @property
    def denied_by_api(self) -> Mapping[str, int]: ...


class QuotaKind(Protocol):
    """A quota type (``QuotaType``): its metric group and config key."""

    @property
    def group(self) -> str: ...
    @property
    def config_key(self) -> str: ...


class EntityQuotaMetrics(Protocol):
    """One entity's quota figures (``ClientQuotaMetrics``)."""

    @property
    def user(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def rate(self) -> float: ...
    @property
    def quota(self) -> float: ...
    @property
    def throttle_time_avg(self) -> float: ...
    @property
    def throttle_time_max(self) -> float: ...


class QuotaManagerState(Protocol):
    """A ``ClientQuotaManager``: its type, rate metric, throttled connections, entities."""

    @property
    def quota_type(self) -> QuotaKind: ...
    @property
    def quota_metric_name(self) -> str: ...
    @property
    def queue_size(self) -> int: ...

    def entity_metrics(self) -> Sequence[EntityQuotaMetrics]: ...


class RequestQuotaState(QuotaManagerState, Protocol):
    """The ``ClientRequestQuotaManager``, which also measures exempt requests."""

    def exempt_request_time(self) -> float: ...


class QuotasState(Protocol):
    """The broker's ``QuotaManagers``."""

    @property
    def managers(self) -> Mapping[Any, QuotaManagerState]: ...
    @property
    def request(self) -> RequestQuotaState: ...


class TransactionLoadState(Protocol):
    """The ``TransactionStateManager``'s partition load times."""

    @property
    def partition_load_times_ms(self) -> Sequence[int]: ...


class MarkerChannelState(Protocol):
    """The ``TransactionMarkerChannelManager``'s counters."""

    @property
    def retry_queue_size(self) -> int: ...
    @property
    def markers_written(self) -> int: ...


class TransactionCoordinatorState(Protocol):
    """The ``TransactionCoordinator``: its state manager's load times, the marker channel,
    and its counts."""

    @property
    def txn_manager(self) -> TransactionLoadState: ...
    @property
    def markers(self) -> MarkerChannelState: ...
    @property
    def commits(self) -> int: ...
    @property
    def aborts(self) -> int: ...

    def state_counts(self) -> Mapping[str, int]: ...

    def oldest_open_transaction_age_ms(self) -> int: ...


class ShareSessionsState(Protocol):
    """The share session cache (``tidegate.server.share.session.ShareSessionCache``)."""

    @property
    def size(self) -> int: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def evictions(self) -> int: ...


class SharePartitionState(Protocol):
    """One share-partition (``tidegate.server.share.SharePartition``): its
    SharePartitionMetrics."""

    @property
    def in_flight_records(self) -> int: ...
    @property
    def in_flight_batches(self) -> int: ...
    @property
    def acquired_records(self) -> int: ...
    @property
    def lock_timeouts(self) -> int: ...
    @property
    def records_acquired(self) -> int: ...
    @property
    def delivery_limit_archived(self) -> int: ...
    @property
    def batch_message_count(self) -> Histogram: ...
    @property
    def fetch_lock_time(self) -> Histogram: ...
    @property
    def fetch_lock_ratio(self) -> Histogram: ...


class ShareTopicState(Protocol):
    """A topic's share request counters (``tidegate.server.share.metrics.ShareTopicStats``)."""

    total_fetches: int
    failed_fetches: int
    total_acknowledgements: int
    failed_acknowledgements: int


class ShareCountersState(Protocol):
    """The broker's share counters (``tidegate.server.share.metrics.ShareGroupMetrics``)."""

    @property
    def acknowledgements(self) -> Mapping[str, int]: ...
    @property
    def topics(self) -> Mapping[str, ShareTopicState]: ...
    @property
    def partition_load_time(self) -> Histogram: ...
    @property
    def fetch_ratio(self) -> Mapping[str, Histogram]: ...
    @property
    def acquire_time(self) -> Mapping[str, Histogram]: ...


class SharePartitionsState(Protocol):
    """The ``SharePartitionManager``: its session cache, its share counters and each
    share-partition as (group, topic, partition, share-partition)."""

    @property
    def sessions(self) -> ShareSessionsState: ...
    @property
    def metrics(self) -> ShareCountersState: ...

    def share_partition_metrics(self) -> Iterable[tuple[str, str, int, SharePartitionState]]: ...


class GroupsState(Protocol):
    """A group coordinator as the metrics read it: its groups per state, and each group's
    (group id, state, epoch, members)."""

    def state_counts(self) -> Mapping[str, int]: ...

    def group_summaries(self) -> Iterable[tuple[str, str, int, int]]: ...


class ModernGroupsState(GroupsState, Protocol):
    """A KIP-848 or KIP-932 coordinator (``ConsumerGroupManager``, ``ShareGroupManager``):
    also its group epoch bumps."""

    @property
    def rebalances(self) -> int: ...


class ClassicGroupsState(GroupsState, Protocol):
    """The classic ``GroupCoordinator``, which also keeps every group's committed offsets:
    its completed rebalances and the offsets committed, expired and deleted."""

    @property
    def rebalances_completed(self) -> int: ...
    @property
    def offsets_committed(self) -> int: ...
    @property
    def offsets_expired(self) -> int: ...
    @property
    def offsets_deleted(self) -> int: ...


def error_name(code: int) -> str:
    """Kafka's ``Errors`` name of a code, e.g. ``UNKNOWN_TOPIC_OR_PARTITION``."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{int(code)}"


_HISTOGRAMS = (
    ("requestqueuetimems", "queue", "Time from the request's last byte to processing start (ms)."),
    ("localtimems", "local", "Time the request was processed on the event loop (ms)."),
    ("remotetimems", "remote", "Time the request was parked: acks=all flush, long-poll (ms)."),
    ("responsesendtimems", "send", "Time to hand the response to the socket (ms)."),
    ("totaltimems", "total", "Time from the request's last byte to its response sent (ms)."),
)


class RequestCollector(Collector):
    def __init__(self, requests: RequestMetrics) -> None:
        self.requests = requests

    def collect(self) -> Iterable[Metric]:
        rm = self.requests
        apis = sorted(rm.apis.values(), key=lambda s: s.name)
        if rm._unknown_api.requests or rm._unknown_api.errors:
            apis.append(rm._unknown_api)
        total = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API (RequestMetrics RequestsPerSec).",
            labels=["request"],
        )
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, per API and error (RequestMetrics ErrorsPerSec); "
            "per partition where the response is per partition. NONE is not counted.",
            labels=["request", "error"],
        )
        for s in apis:
            total.add_metric([s.name], s.requests)
            for code, n in sorted(s.errors.items()):
                errors.add_metric([s.name, error_name(code)], n)
        yield total
        yield errors
        for suffix, attr, doc in _HISTOGRAMS:
            family = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{suffix}", doc, labels=["request"]
            )
            for s in apis:
                h: Histogram = getattr(s, attr)
                family.add_metric([s.name], h.buckets(), h.scaled_sum())
            yield family
        client_requests = CounterMetricFamily(
            "tidegate_client_requests",
            "Requests answered, per client id (at most 1000 ids; the rest are 'other').",
            labels=["client_id"],
        )
        client_time = CounterMetricFamily(
            "tidegate_client_requesttimems",
            "Total time of the requests of a client id, last byte to response sent (ms).",
            labels=["client_id"],
        )
        for c in rm.client_rows():
            client_requests.add_metric([c.client_id], c.requests)
            client_time.add_metric([c.client_id], c.time_ns / NS_PER_MS)
        yield client_requests
        yield client_time


class TopicCollector(Collector):
    def __init__(self, topics: TopicMetrics) -> None:
        self.topics = topics

    def collect(self) -> Iterable[Metric]:
        fams = [
            (
                CounterMetricFamily(
                    "kafka_server_brokertopicmetrics_messagesin",
                    "Records appended, per topic (BrokerTopicMetrics MessagesInPerSec).",
                    labels=["topic"],
                ),
                "messages_in",
            ),
            (
                CounterMetricFamily(
                    "kafka_server_brokertopicmetrics_bytesin",
                    "Record batch bytes appended, per topic (BrokerTopicMetrics BytesInPerSec).",
                    labels=["topic"],
                ),
                "bytes_in",
            ),
            (
                CounterMetricFamily(
                    "kafka_server_brokertopicmetrics_bytesout",
                    "Record bytes sent in fetch responses, per topic "
                    "(BrokerTopicMetrics BytesOutPerSec).",
                    labels=["topic"],
                ),
                "bytes_out",
            ),
        ]
        items = sorted(self.topics.topics.items())
        for family, attr in fams:
            for topic, stats in items:
                family.add_metric([topic], getattr(stats, attr))
            yield family


class LogCollector(Collector):
    """kafka.log:type=Log gauges, read from the open partition logs."""

    def __init__(self, logs: Callable[[], Mapping[tuple[str, int], PartitionLog]]) -> None:
        self.logs = logs

    def collect(self) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Partition size on disk (bytes).", labels=labels
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "The next offset to be assigned.", labels=labels
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "The first offset still in the log.", labels=labels
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of the partition.", labels=labels
        )
        for (topic, partition), plog in sorted(self.logs().items()):
            if plog.closed:
                continue
            lv = [topic, str(partition)]
            size.add_metric(lv, plog.size_bytes)
            end.add_metric(lv, plog.log_end_offset)
            start.add_metric(lv, plog.log_start_offset)
            segments.add_metric(lv, len(plog.segments))
        yield from (size, end, start, segments)


class LogCleanerCollector(Collector):
    """kafka.log:type=LogCleaner and LogCleanerManager gauges, read from the broker's
    log cleaner (:class:`tidegate.log.log_cleaner.LogCleaner`)."""

    def __init__(self, cleaner: CleanerState, clock: Clock) -> None:
        self.cleaner = cleaner
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        c = self.cleaner
        # last_run_ms is the wall time the broker handed the cleaner's last look
        since = max(0, self.clock.wall_milliseconds() - c.last_run_ms) if c.last_run_ms else 0
        for name, doc, value in (
            ("kafka_log_logcleanermanager_max_dirty_percent",
             "Dirty share of the dirtiest compacted log, in percent (max-dirty-percent).",
             c.max_dirty_percent),
            ("kafka_log_logcleaner_cleaner_recopy_percent",
             "Bytes written over bytes read by the last clean, in percent.", c.recopy_percent),
            ("kafka_log_logcleaner_max_clean_time_secs",
             "Duration of the last clean (s).", c.max_clean_time_secs),
            ("kafka_log_logcleaner_max_buffer_utilization_percent",
             "Offset map fill of the last clean, in percent.",
             c.max_buffer_utilization_percent),
            ("kafka_log_logcleanermanager_time_since_last_run_ms",
             "Milliseconds since the cleaner last looked for a log to clean.", since),
            ("kafka_log_logcleanermanager_uncleanable_partitions_count",
             "Partitions whose cleaning failed and that are skipped from then on.",
             len(c.manager.uncleanable)),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family


class SocketServerCollector(Collector):
    """Connections per listener, muted connections per reason, and the memory pool."""

    def __init__(self, server: SocketServerState) -> None:
        self.server = server

    def collect(self) -> Iterable[Metric]:
        from tidegate.network.mute_state import MuteReason

        server = self.server
        conns = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open connections, per listener (socket-server-metrics connection-count).",
            labels=["listener"],
        )
        per_listener = dict.fromkeys(server.bound, 0)
        muted = {r.name: 0 for r in MuteReason if r.name is not None and r.name != "NONE"}
        for c in list(server.connections.values()):
            per_listener[c.listener_name] = per_listener.get(c.listener_name, 0) + 1
            reasons = c.mute_state.reasons
            if reasons:
                for name in muted:
                    if reasons & MuteReason[name]:
                        muted[name] += 1
        for listener, n in sorted(per_listener.items()):
            conns.add_metric([listener], n)
        yield conns
        muted_fam = GaugeMetricFamily(
            "tidegate_network_socketserver_mutedconnections",
            "Connections whose next request waits, per mute reason (a connection may have several; all "
            "but IN_FLIGHT and SENDING also stop reading its socket).",
            labels=["reason"],
        )
        for reason, n in muted.items():
            muted_fam.add_metric([reason], n)
        yield muted_fam
        yield from connection_limit_metrics(server)
        yield GaugeMetricFamily(
            "kafka_network_socketserver_responsememoryinflight",
            "Bytes held by responses being sent: transport buffers plus file-region "
            "chunks read for TLS (SocketServer ResponseMemoryInFlight).",
            value=server.response_bytes_in_flight(),
        )
        yield from pool_metrics(server.pool)


def connection_limit_metrics(server: SocketServerState) -> Iterator[Metric]:
    """KIP-306/402/612 connection limits (docs/security.md#connection-limits), per listener."""
    listeners = sorted(server.bound)
    lbl = ["listener"]
    quotas = server.quotas
    now = server.clock.milliseconds()
    pending_by_listener = server.pending
    idle_closed = server.idle_closed_total
    rate = GaugeMetricFamily(
        "kafka_server_socketservermetrics_connection_accept_rate",
        "New connections accepted per second (socket-server-metrics connection-accept-rate).",
        labels=lbl)
    throttle = GaugeMetricFamily(
        "kafka_server_socketservermetrics_connection_accept_throttle_time",
        "Average ms an accepted connection waited for max.connection.creation.rate "
        "(socket-server-metrics connection-accept-throttle-time).", labels=lbl)
    created = CounterMetricFamily(
        "kafka_server_socketservermetrics_connection_creation",
        "Connections admitted past the connection limits (connection-creation-total).",
        labels=lbl)
    refused = CounterMetricFamily(
        "tidegate_network_socketserver_connections_refused",
        "Connections closed at once because their IP address had max.connections.per.ip.",
        labels=lbl)
    throttled = CounterMetricFamily(
        "tidegate_network_socketserver_connections_throttled",
        "Connections whose admission was delayed by max.connection.creation.rate.", labels=lbl)
    blocked = CounterMetricFamily(
        "tidegate_network_socketserver_connections_blocked",
        "Times a connection had to wait for a slot (max.connections, per listener or broker).",
        labels=lbl)
    ip_throttled = CounterMetricFamily(
        "tidegate_network_socketserver_connections_ip_throttled",
        "Connections closed unserved because their address was over its connection_creation_rate "
        "client quota (KIP-612).", labels=lbl)
    ip_throttle = GaugeMetricFamily(
        "kafka_server_socketservermetrics_ip_connection_accept_throttle_time",
        "Average ms a connection over its address' connection_creation_rate was held before its "
        "close (socket-server-metrics ip-connection-accept-throttle-time).", labels=lbl)
    blocked_time = CounterMetricFamily(
        "kafka_network_acceptor_acceptorblockedpercent",
        "Nanoseconds the listener's acceptor waited for a connection slot or the creation rate (Kafka's "
        "Acceptor AcceptorBlockedPercent meter): rate() / 1e9 is the fraction of time blocked.",
        labels=lbl)
    pending = GaugeMetricFamily(
        "tidegate_network_socketserver_pendingconnections",
        "Accepted connections waiting for admission (not read yet).", labels=lbl)
    idle = CounterMetricFamily(
        "tidegate_network_socketserver_idle_closed",
        "Connections closed after connections.max.idle.ms without activity.", labels=lbl)
    for name in listeners:
        if quotas is not None:
            rate.add_metric([name], quotas.accept_rate(name, now))
            throttle.add_metric([name], quotas.throttle_time_avg(name, now))
            created.add_metric([name], quotas.accepted_total.get(name, 0))
            refused.add_metric([name], quotas.refused_per_ip_total.get(name, 0))
            throttled.add_metric([name], quotas.throttled_total.get(name, 0))
            blocked.add_metric([name], quotas.blocked_total.get(name, 0))
            blocked_time.add_metric([name], server.acceptor_blocked_ns(name))
            ip_throttled.add_metric([name], quotas.ip_throttled_total.get(name, 0))
            ip_throttle.add_metric([name], quotas.ip_throttle_time_avg(name, now))
        queue = pending_by_listener.get(name, ())
        pending.add_metric([name], sum(1 for c in queue if not c.closed))
        idle.add_metric([name], idle_closed.get(name, 0))
    yield from (rate, throttle, created, refused, throttled, blocked, blocked_time, ip_throttled,
                ip_throttle, pending, idle)


def pool_metrics(pool: MemoryPool) -> Iterator[Metric]:
    """KIP-72 memory pool gauges."""
    yield GaugeMetricFamily(
        "kafka_network_socketserver_memorypoolavailable",
        "Bytes the request memory pool can still hand out (SocketServer MemoryPoolAvailable).",
        value=pool.available,
    )
    yield GaugeMetricFamily(
        "kafka_network_socketserver_memorypoolused",
        "Bytes of the request memory pool in use (SocketServer MemoryPoolUsed).",
        value=pool.used,
    )
    yield GaugeMetricFamily(
        "kafka_network_socketserver_memorypoolavgdepletedpercent",
        "Fraction (0..1, as in Kafka) of recent time the pool was depleted "
        "(SocketServer MemoryPoolAvgDepletedPercent).",
        value=pool.avg_depleted_percent(),
    )
    yield GaugeMetricFamily(
        "kafka_network_socketserver_memorypooldepletedtimetotal",
        "Total time the pool was depleted, ms (memory-pool-depleted-time-total).",
        value=pool.depleted_time_total_ms,
    )


class PurgatoryCollector(Collector):
    def __init__(self, purgatories: Mapping[str, PurgatoryState]) -> None:
        self.purgatories = purgatories

    def collect(self) -> Iterable[Metric]:
        label = ["delayedOperation"]
        size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Operations watched in the purgatory, counted once per watch key "
            "(DelayedOperationPurgatory PurgatorySize).",
            labels=label,
        )
        delayed = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "Operations waiting in the purgatory (DelayedOperationPurgatory NumDelayedOperations).",
            labels=label,
        )
        expires = CounterMetricFamily(
            "kafka_server_delayedoperationpurgatory_expires",
            "Operations that completed by timing out (Delayed{Produce,Fetch}Metrics ExpiresPerSec).",
            labels=label,
        )
        for name, p in sorted(self.purgatories.items()):
            size.add_metric([name], p.purgatory_size)
            delayed.add_metric([name], p.num_delayed_operations)
            expires.add_metric([name], p.expirations_total)
        yield from (size, delayed, expires)


class FetchSessionCacheCollector(Collector):
    """KIP-227 fetch sessions (``tidegate.server.fetch_session.FetchSessionCache``):
    Kafka's ``kafka.server:type=FetchSessionCache`` MBeans."""

    def __init__(self, cache: FetchSessionsState) -> None:
        self.cache = cache

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions in the cache (FetchSessionCache NumIncrementalFetchSessions).",
            value=self.cache.size,
        )
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions over all incremental fetch sessions "
            "(FetchSessionCache NumIncrementalFetchPartitionsCached).",
            value=self.cache.total_partitions,
        )
        yield CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Sessions evicted to make room for new ones "
            "(FetchSessionCache IncrementalFetchSessionEvictionsPerSec).",
            value=self.cache.evictions_total,
        )


class FlusherCollector(Collector):
    """Group commit of acks=all appends (``tidegate.server.log_flusher.LogFlusher``):
    fsync rounds started, and the acks=all appends that asked for one. Fewer rounds
    than requests means producers shared fsyncs."""

    def __init__(self, flusher: FlusherState) -> None:
        self.flusher = flusher

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "kafka_log_logflushstats_logflushes",
            "fsync rounds of the acks=all group-commit flusher (LogFlushStats "
            "LogFlushRateAndTimeMs count, for acks=all flushes only).",
            value=self.flusher.rounds,
        )
        yield CounterMetricFamily(
            "tidegate_log_flusher_flush_requests",
            "acks=all partition appends that asked the group-commit flusher for a flush.",
            value=self.flusher.requests,
        )


class LogDirFailureCollector(Collector):
    """The log dir's I/O failures (``tidegate.log.dir_failure.LogDirFailureChannel``):
    Kafka's LogManager OfflineLogDirectoryCount, whether the dir is full now (writes
    refused until space returns), and the storage errors reported since start."""

    def __init__(self, channel: LogDirFailures) -> None:
        self.channel = channel

    def collect(self) -> Iterable[Metric]:
        ch = self.channel
        yield GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log directories offline after an I/O error, until restart (LogManager "
            "OfflineLogDirectoryCount).",
            value=ch.offline_log_directory_count,
        )
        yield GaugeMetricFamily(
            "tidegate_log_dir_full",
            "1 while the log directory is out of space: appends answer KAFKA_STORAGE_ERROR "
            "until one succeeds.",
            value=1 if ch.full else 0,
        )
        yield CounterMetricFamily(
            "tidegate_log_storage_errors",
            "I/O errors of the write path (append, roll, fsync, checkpoint, retention).",
            value=ch.storage_errors,
        )


class QuotaCollector(Collector):
    """Client quotas (``tidegate.server.quota.quota_factory.QuotaManagers``), read at scrape time:
    per entity (the counters' ``user``/``client_id`` tags, "" where the quota is not per
    that level) the measured rate and the throttle time, per quota type the queue of
    throttled connections, and the exempt request time. Nothing is kept per request."""

    def __init__(self, quotas: QuotasState) -> None:
        self.quotas = quotas

    def collect(self) -> Iterable[Metric]:
        labels = ["user", "client_id"]
        for manager in self.quotas.managers.values():
            quota_type = manager.quota_type
            group = quota_type.group.lower()  # produce, fetch, request
            rate_name = manager.quota_metric_name.replace("-", "_")  # byte_rate, request_time
            unit = "bytes/s" if rate_name == "byte_rate" else "% of one thread"
            rate = GaugeMetricFamily(
                f"kafka_server_{group}_{rate_name}",
                f"{quota_type.group} quota rate per entity, {unit} "
                f"(kafka.server:type={quota_type.group} {manager.quota_metric_name}).",
                labels=labels,
            )
            # throttle-time is in ms without saying so: the name gets the unit suffix
            avg = GaugeMetricFamily(
                f"kafka_server_{group}_throttle_time_ms",
                f"Average throttle time per entity, ms "
                f"(kafka.server:type={quota_type.group} throttle-time).",
                labels=labels,
            )
            peak = GaugeMetricFamily(
                f"kafka_server_{group}_throttle_time_max_ms",
                "Largest throttle time per entity in the metric window, ms (tidegate).",
                labels=labels,
            )
            bound = GaugeMetricFamily(
                f"tidegate_quota_{group}_bound",
                f"The {quota_type.config_key} in force per entity (2^63-1: unlimited).",
                labels=labels,
            )
            for m in manager.entity_metrics():
                key = [m.user, m.client_id]
                rate.add_metric(key, m.rate)
                avg.add_metric(key, m.throttle_time_avg)
                peak.add_metric(key, m.throttle_time_max)
                bound.add_metric(key, m.quota)
            yield from (rate, avg, peak, bound)
            yield GaugeMetricFamily(
                f"kafka_server_{group}_queue_size",
                f"Connections muted for a {quota_type.group} throttle "
                f"(kafka.server:type={quota_type.group} queue-size).",
                value=manager.queue_size,
            )
        yield GaugeMetricFamily(
            "kafka_server_request_exempt_request_time",
            "Time on exempt requests (ApiVersions, SASL before authentication), % of one "
            "thread (kafka.server:type=Request exempt-request-time).",
            value=self.quotas.request.exempt_request_time(),
        )


class AuthorizerCollector(Collector):
    """The StandardAuthorizer (``tidegate.security.authorizer``), read at scrape time:
    Kafka's authorizer metrics (``kafka.server:type=kafka.security.authorizer.metrics``)
    as counters, plus the denials per API (tidegate's split of authorization-denied)."""

    def __init__(self, authorizer: AuthorizerState) -> None:
        self.authorizer = authorizer

    def collect(self) -> Iterable[Metric]:
        a = self.authorizer
        prefix = "kafka_security_authorizer_metrics"
        yield GaugeMetricFamily(f"{prefix}_acls_total_count", "ACLs in the authorizer (acls-total-count).",
                                value=len(a.acls))
        yield CounterMetricFamily(f"{prefix}_authorization_allowed",
                                  "Authorization checks that allowed (authorization-allowed-rate-per-minute's "
                                  "count).", value=a.allowed_count)
        yield CounterMetricFamily(f"{prefix}_authorization_denied",
                                  "Authorization checks that denied (authorization-denied-rate-per-minute's "
                                  "count).", value=a.denied_count)
        by_api = CounterMetricFamily(f"{prefix}_authorization_denied_by_api",
                                     "Denied authorization checks per request API (tidegate's split of "
                                     "authorization-denied; a request may count several).", labels=["request"])
        for api, count in sorted(a.denied_by_api.items()):
            by_api.add_metric([api], count)
        yield by_api


class TransactionCoordinatorCollector(Collector):
    """The transaction coordinator (``tidegate.coordinator.transaction``): Kafka's
    transaction-coordinator-metrics and TransactionMarkerChannelManager gauges, plus
    tidegate's counts of transactional ids per state and of completed transactions."""

    def __init__(self, coordinator: TransactionCoordinatorState) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        c = self.coordinator
        loads = c.txn_manager.partition_load_times_ms
        yield GaugeMetricFamily(
            "kafka_server_transaction_coordinator_metrics_partition_load_time_max",
            "Longest load of a __transaction_state partition at startup, ms "
            "(transaction-coordinator-metrics partition-load-time-max).",
            value=max(loads, default=0),
        )
        yield GaugeMetricFamily(
            "kafka_server_transaction_coordinator_metrics_partition_load_time_avg",
            "Average load of a __transaction_state partition at startup, ms "
            "(transaction-coordinator-metrics partition-load-time-avg).",
            value=sum(loads) / len(loads) if loads else 0,
        )
        yield GaugeMetricFamily(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize",
            "Transaction markers waiting to be written again (TransactionMarkerChannelManager "
            "LogAppendRetryQueueSize).",
            value=c.markers.retry_queue_size,
        )
        yield GaugeMetricFamily(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_unknowndestinationqueuesize",
            "Markers for partitions without a known leader (always 0: one node leads every "
            "partition; TransactionMarkerChannelManager UnknownDestinationQueueSize).",
            value=0,
        )
        states = GaugeMetricFamily(
            "tidegate_transaction_coordinator_transactional_ids",
            "Transactional ids the coordinator holds, per transaction state (tidegate only).",
            labels=["state"],
        )
        counts = c.state_counts()
        for name in sorted(counts):
            states.add_metric([name], counts[name])
        yield states
        oldest = GaugeMetricFamily(
            "tidegate_transaction_coordinator_oldest_open_transaction_age_ms",
            "Age of the oldest transaction not yet complete (0: none; tidegate only).",
            value=c.oldest_open_transaction_age_ms(),
        )
        yield oldest
        done = CounterMetricFamily(
            "tidegate_transaction_coordinator_completed_transactions",
            "Transactions completed since start (markers written, Complete* durable), per "
            "result (tidegate only).",
            labels=["result"],
        )
        done.add_metric(["commit"], c.commits)
        done.add_metric(["abort"], c.aborts)
        yield done
        yield CounterMetricFamily(
            "tidegate_transaction_coordinator_markers_written",
            "Transaction markers appended to partitions since start (tidegate only).",
            value=c.markers.markers_written,
        )


_GROUP_METRICS = "kafka_server_group_coordinator_metrics_"
#: the states of each protocol's per-state group count, as Kafka registers them
_CLASSIC_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
_SHARE_STATES = ("Empty", "Stable", "Dead")


class GroupCoordinatorCollector(Collector):
    """Kafka's group-coordinator-metrics (GroupCoordinatorMetrics) read from the three
    group coordinators: groups per protocol and per state, the rebalance and offset
    meters as counters; and tidegate's per-group gauges (members and epoch of each group,
    what ``tidegate top`` lists)."""

    def __init__(self, classic: ClassicGroupsState, consumer: ModernGroupsState, share: ModernGroupsState) -> None:
        self.classic = classic
        self.consumer = consumer
        self.share = share

    def collect(self) -> Iterable[Metric]:
        protocols = (("classic", self.classic, _CLASSIC_STATES), ("consumer", self.consumer, _CONSUMER_STATES),
                     ("share", self.share, _SHARE_STATES))  # fmt: skip
        counts = {name: coordinator.state_counts() for name, coordinator, _ in protocols}
        total = GaugeMetricFamily(
            _GROUP_METRICS + "group_count",
            "Groups per protocol: classic, consumer, share (group-coordinator-metrics group-count).",
            labels=["protocol"],
        )
        for name, _, _ in protocols:
            total.add_metric([name], sum(counts[name].values()))
        yield total
        for name, _, states in protocols:
            per_state = GaugeMetricFamily(
                f"{_GROUP_METRICS}{name}_group_count",
                f"{name.capitalize()} groups per state (group-coordinator-metrics {name}-group-count).",
                labels=["state"],
            )
            for state in states:
                per_state.add_metric([state.lower()], counts[name].get(state, 0))
            yield per_state
        for metric, doc, value in (
            ("group_completed_rebalance", "Classic group rebalances completed (a new generation)",
             self.classic.rebalances_completed),
            ("consumer_group_rebalance", "Consumer group epoch bumps", self.consumer.rebalances),
            ("share_group_rebalance", "Share group epoch bumps", self.share.rebalances),
            ("offset_commit", "Offsets committed (OffsetCommit and TxnOffsetCommit, per partition)",
             self.classic.offsets_committed),
            ("offset_expiration", "Committed offsets expired (offsets.retention.minutes)",
             self.classic.offsets_expired),
            ("offset_deletion", "Committed offsets deleted by OffsetDelete", self.classic.offsets_deleted),
        ):
            kafka = metric.replace("_", "-")
            yield CounterMetricFamily(
                _GROUP_METRICS + metric,
                f"{doc} since start (group-coordinator-metrics {kafka}-count; rate() is {kafka}-rate).",
                value=value,
            )
        members = GaugeMetricFamily(
            "tidegate_group_members",
            "Members of each group, with its protocol and state (tidegate only).",
            labels=["group", "protocol", "state"],
        )
        epoch = GaugeMetricFamily(
            "tidegate_group_epoch",
            "Each group's epoch: the group epoch of a consumer or share group, the generation "
            "of a classic group (tidegate only).",
            labels=["group", "protocol"],
        )
        for name, coordinator, _ in protocols:
            for group_id, state, group_epoch, count in sorted(coordinator.group_summaries()):
                members.add_metric([group_id, name, state.lower()], count)
                epoch.add_metric([group_id, name], group_epoch)
        yield members
        yield epoch


class ShareGroupCollector(Collector):
    """KIP-932 on the broker: the ShareSessionCache gauges, each share-partition's
    SharePartitionMetrics and the share counters (ShareGroupMetrics, BrokerTopicMetrics);
    the share groups' counts are the :class:`GroupCoordinatorCollector`'s."""

    def __init__(self, partitions: SharePartitionsState) -> None:
        self.partitions = partitions

    def collect(self) -> Iterable[Metric]:
        sessions = self.partitions.sessions
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharesessionscount",
                                "Share sessions in the cache (ShareSessionCache ShareSessionsCount).",
                                value=sessions.size)  # fmt: skip
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharepartitionscount",
                                "Partitions over all the share sessions (ShareSessionCache SharePartitionsCount).",
                                value=sessions.num_partitions)  # fmt: skip
        yield CounterMetricFamily("kafka_server_sharesessioncache_sharesessionevictions",
                                  "Share sessions dropped because their connection closed "
                                  "(ShareSessionCache ShareSessionEvictionsPerSec).",
                                  value=sessions.evictions)  # fmt: skip
        yield from self._share_partitions()
        yield from self._share_counters()

    def _share_partitions(self) -> Iterable[Metric]:
        labels = ["group", "topic", "partition"]
        records = GaugeMetricFamily(
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            "Records between a share-partition's start and end offsets (SharePartitionMetrics "
            "InFlightMessageCount).", labels=labels)
        batches = GaugeMetricFamily(
            "kafka_server_sharepartitionmetrics_inflightbatchcount",
            "Cached in-flight batches of a share-partition (SharePartitionMetrics InFlightBatchCount).",
            labels=labels)
        locked = GaugeMetricFamily(
            "tidegate_share_partition_acquired_records",
            "Records of a share-partition held under an acquisition lock now (tidegate's own: "
            "Kafka has no such gauge).", labels=labels)
        timeouts = CounterMetricFamily(
            "kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
            "Records whose acquisition lock expired (SharePartitionMetrics AcquisitionLockTimeoutPerSec).",
            labels=labels)
        acquired = CounterMetricFamily(
            "tidegate_share_partition_records_acquired",
            "Records handed out under an acquisition lock, redeliveries included (tidegate's own: "
            "Kafka counts acquisitions in no metric).", labels=labels)
        archived = CounterMetricFamily(
            "tidegate_share_partition_records_archived_at_delivery_limit",
            "Records archived because their delivery count reached share.delivery.count.limit "
            "(tidegate's own; rejected records are RecordAcknowledgementsPerSec{ackType=Reject}).",
            labels=labels)
        histograms = [(HistogramMetricFamily(f"kafka_server_sharepartitionmetrics_{name}", doc, labels=labels), attr)
                      for name, attr, doc in _SHARE_PARTITION_HISTOGRAMS]
        for group, topic, partition, sp in self.partitions.share_partition_metrics():
            values = [group, topic, str(partition)]
            records.add_metric(values, sp.in_flight_records)
            batches.add_metric(values, sp.in_flight_batches)
            locked.add_metric(values, sp.acquired_records)
            timeouts.add_metric(values, sp.lock_timeouts)
            acquired.add_metric(values, sp.records_acquired)
            archived.add_metric(values, sp.delivery_limit_archived)
            for family, attr in histograms:
                h: Histogram = getattr(sp, attr)
                family.add_metric(values, h.buckets(), h.scaled_sum())
        yield records
        yield batches
        yield locked
        yield timeouts
        yield acquired
        yield archived
        for family, _attr in histograms:
            yield family

    def _share_counters(self) -> Iterable[Metric]:
        counters = self.partitions.metrics
        acks = CounterMetricFamily(
            "kafka_server_sharegroupmetrics_recordacknowledgements",
            "Records acknowledged, per acknowledge type (ShareGroupMetrics RecordAcknowledgementsPerSec).",
            labels=["ackType"])
        for ack_type, count in counters.acknowledgements.items():
            acks.add_metric([ack_type], count)
        yield acks
        load = counters.partition_load_time
        loads = HistogramMetricFamily(
            "kafka_server_sharegroupmetrics_partitionloadtimems",
            "Time to load a share-partition's state from the persister, ms (ShareGroupMetrics PartitionLoadTimeMs).")
        loads.add_metric([], load.buckets(), load.scaled_sum())
        yield loads
        for name, attr, doc in _SHARE_GROUP_HISTOGRAMS:
            per_group = HistogramMetricFamily(f"kafka_server_sharegroupmetrics_{name}", doc, labels=["group"])
            for group, h in sorted(getattr(counters, attr).items()):
                per_group.add_metric([group], h.buckets(), h.scaled_sum())
            yield per_group
        topics = sorted(counters.topics.items())
        for name, attr, meter in _SHARE_TOPIC_COUNTERS:
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}",
                f"Share requests per topic (BrokerTopicMetrics {meter}).", labels=["topic"])
            for topic, stats in topics:
                family.add_metric([topic], getattr(stats, attr))
            yield family


#: (Prometheus name, SharePartition attribute, help) of the SharePartitionMetrics histograms
_SHARE_PARTITION_HISTOGRAMS = (
    ("inflightbatchmessagecount", "batch_message_count",
     ("Records of each in-flight batch put in a share-partition's cache, by an acquisition of new "
     "records or a load (SharePartitionMetrics InFlightBatchMessageCount).")),
    ("fetchlocktimems", "fetch_lock_time",
     ("How long a share fetch held a share-partition's fetch lock, ms: its log read and acquisition "
     "(SharePartitionMetrics FetchLockTimeMs).")),
    ("fetchlockratio", "fetch_lock_ratio",
     ("Time the fetch lock was held over the time since its previous release, percent, at each release "
     "(SharePartitionMetrics FetchLockRatio).")),
)
#: (Prometheus name, ShareGroupMetrics attribute, help) of the per-group ShareGroupMetrics histograms
_SHARE_GROUP_HISTOGRAMS = (
    ("requesttopicpartitionsfetchratio", "fetch_ratio",
     ("Partitions whose fetch lock a share fetch took over the partitions it asked for, percent, per "
     "answered share fetch (ShareGroupMetrics RequestTopicPartitionsFetchRatio).")),
    ("topicpartitionsacquiretimems", "acquire_time",
     ("Time from a share fetch's arrival to taking its partitions' fetch locks, ms, its long poll "
     "included (ShareGroupMetrics TopicPartitionsAcquireTimeMs).")),
)
#: (Prometheus name, ShareTopicStats attribute, Kafka meter) of the share request counters
_SHARE_TOPIC_COUNTERS = (
    ("totalsharefetchrequests", "total_fetches", "TotalShareFetchRequestsPerSec"),
    ("failedsharefetchrequests", "failed_fetches", "FailedShareFetchRequestsPerSec"),
    ("totalshareacknowledgementrequests", "total_acknowledgements", "TotalShareAcknowledgementRequestsPerSec"),
    ("failedshareacknowledgementrequests", "failed_acknowledgements", "FailedShareAcknowledgementRequestsPerSec"),
)
