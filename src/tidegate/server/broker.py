"""Starting and stopping a broker: the thin asyncio shell around the sans-IO core.

``run(config)`` is what ``tidegate serve`` calls. It locks the data directory,
opens the logs (recovering after a crash), wires the core (ReplicaManager, the
coordinators, KafkaApis) to the shell (the SocketServer and the one scheduler that
drives every timer, background fsync and periodic task), starts the listeners, and on
SIGINT/SIGTERM drains: listeners close, parked requests are answered, logs are
flushed and closed, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import resource
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tidegate.clock import SYSTEM_CLOCK, Clock
from tidegate.config import BrokerConfig, parse_metrics_listener
from tidegate.network import memory_pool
from tidegate.network.connection_quotas import ConnectionQuotas, connection_limits
from tidegate.network.request_channel import RequestChannel
from tidegate.network.socket_server import KafkaConnection, SocketServer
from tidegate.scheduler import AsyncioScheduler
from tidegate.security.listener import build_credential_store, build_listener_security
from tidegate.server.broker_core import BrokerCore
from tidegate.server.kafka_apis import KafkaApis
from tidegate.server.log_manager import LogManager
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.timer_reaper import TimerReaper

if TYPE_CHECKING:
    from tidegate.metrics.http_server import MetricsHttpServer
    from tidegate.metrics.prometheus import BrokerMetrics

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class Broker:
    """The broker in an asyncio loop, at full speed once it listens: nothing is left to
    do after the listeners open (docs/architecture.md, "Messages and start-up").
    ``owns_process``: ``tidegate serve``, whose process is the broker's alone. It starts
    with the garbage collector off (``tidegate serve`` turns it off before importing the
    broker); as the listeners open, what start-up allocated is moved out of the
    collector's reach (``gc.freeze``: a full collection walking it would stop the loop
    while parked long polls wait) and the collector is turned back on."""

    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK, owns_process: bool = False) -> None:
        self.config = config
        self.owns_process = owns_process
        self.clock = clock
        self.data_dir = Path(config.log_dir).resolve()
        self._lock_fd: int | None = None
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.apis: KafkaApis | None = None
        self.socket_server: SocketServer | None = None
        self.scheduler: AsyncioScheduler | None = None
        self.reaper: TimerReaper | None = None
        self.core: BrokerCore | None = None
        self.bound: dict[str, tuple[str, int]] = {}
        self._metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsHttpServer | None = None
        self.metrics_bound: tuple[str, int] | None = None

    def _lock(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(
                f"{self.data_dir} is in use by another tidegate process (lock {LOCK_FILE})"
            ) from None
        self._lock_fd = fd

    async def start(self) -> None:
        began = time.perf_counter()
        self._lock()
        config = self.config
        scheduler = self.scheduler = AsyncioScheduler(asyncio.get_running_loop(), self.clock)
        # SCRAM credentials persist in the data directory; sasl.credentials.file adds users
        self.credentials = build_credential_store(config, self.data_dir)
        # Kafka's RequestChannel: the core sends parked answers and throttle ends through
        # it, the SocketServer's connections register in it
        channel: RequestChannel[KafkaConnection] = RequestChannel()
        metrics_endpoint = parse_metrics_listener(config.get("metrics.listener"))
        if metrics_endpoint is not None:
            # counted into on the request path: built before the parts that count
            from tidegate.metrics.prometheus import BrokerMetrics

            self._metrics = BrokerMetrics()
        counting = self._metrics
        core = self.core = BrokerCore(
            config, self.data_dir, scheduler, clock=self.clock, channel=channel, credentials=self.credentials,
            metrics=counting,
        )  # fmt: skip
        self.logs, self.replicas, self.apis, self.reaper = core.logs, core.replicas, core.apis, core.reaper
        max_request = config.get("socket.request.max.bytes")
        pool = memory_pool.create_pool(config.queued_max_request_bytes, max_request, self.clock)
        log.info("request memory pool: %r, queued.max.requests=%d", pool, config.get("queued.max.requests"))
        self.socket_server = SocketServer(
            core.apis,
            channel,
            pool,
            max_request,
            scheduler,
            max_queued_requests=config.get("queued.max.requests"),
            receive_buffer_bytes=config.get("socket.receive.buffer.bytes"),
            socket_send_buffer_bytes=config.get("socket.send.buffer.bytes"),
            sasl_max_receive_size=config.get("sasl.server.max.receive.size"),
            clock=self.clock,
            # KIP-612 ip quotas come from the client quota configuration
            quotas=ConnectionQuotas(connection_limits(config), core.quotas.connection_rate_for_ip),
            connections_max_idle_ms=config.get("connections.max.idle.ms"),
            request_metrics=counting.requests if counting is not None else None,
            disconnect_listeners=(core.share_partitions.connection_closed,),
        )
        config.reconfigurables.append(self.socket_server.limits_changed)
        core.start()
        await self._start_metrics(metrics_endpoint)
        for listener in config.listeners:
            security = None
            if listener.security_protocol != "PLAINTEXT":
                security = build_listener_security(config, listener, self.credentials)
            host, port = await self.socket_server.start_listener(
                listener.name, listener.host, listener.port, security
            )
            self.bound[listener.name] = (host, port)
            core.endpoints.bound_ports[listener.name] = port
            extra = ""
            if security is not None and security.sasl:
                extra = f" (SASL mechanisms {', '.join(security.mechanisms)})"
            log.info("listening on %s://%s:%d, security protocol %s%s", listener.name, host, port,
                     listener.security_protocol, extra)
        for listener in config.controller_listeners:
            log.info("not listening on %s: a KRaft controller listener (controller.listener.names); "
                     "a tidegate node is its own controller", listener)
        self._started(time.perf_counter() - began)

    def _started(self, took_s: float) -> None:
        """Log the one line that says the broker is ready: how long it took (``tidegate
        serve``: since the process started) and, in a process of its own, how much CPU
        that was, after moving start-up's objects out of the garbage collector's reach
        and turning it back on."""
        assert self.core is not None
        node, cluster = self.config.node_id, self.core.cluster_id
        if not self.owns_process:
            log.info("tidegate node %d of cluster %s started in %.3f s", node, cluster, took_s)
            return
        gc.freeze()
        gc.enable()
        log.info("tidegate node %d of cluster %s started in %.2f s (%.2f s of CPU; %d start-up "
                 "objects moved out of the garbage collector's reach)", node, cluster,
                 process_age_s() or took_s, time.process_time(), gc.get_freeze_count())

    @property
    def metrics(self) -> BrokerMetrics:
        """The broker's Prometheus registry and collectors. Built as it starts with
        metrics.listener set (and counted into on the request path); otherwise on first
        use, once started: the scrape-time gauges work, the counters stay at zero, and a
        broker nobody asks does not import prometheus_client (15-20 ms of every start)."""
        if self._metrics is None:
            from tidegate.metrics.prometheus import BrokerMetrics

            self._metrics = BrokerMetrics()
            self._register_collectors(self._metrics)
        return self._metrics

    def _register_collectors(self, metrics: BrokerMetrics) -> None:
        """The scrape-time collectors: the parts' live state, read when scraped."""
        assert self.socket_server is not None and self.core is not None, "the broker is not started"
        core = self.core
        logs = core.logs
        metrics.register_socket_server(self.socket_server)
        for purgatory in core.purgatories:
            metrics.register_purgatory(purgatory.name, purgatory)
        metrics.register_flusher(core.replicas.flusher)
        metrics.register_log_dir_failures(core.logs.failure_channel)
        metrics.register_fetch_sessions(core.fetch_sessions)
        metrics.register_logs(lambda: logs.logs)
        if logs.cleaner is not None:
            metrics.register_log_cleaner(logs.cleaner, core.clock)
        metrics.register_quotas(core.quotas)
        metrics.register_transaction_coordinator(core.transaction_coordinator)
        metrics.register_group_coordinators(
            core.group_coordinator, core.consumer_group_coordinator, core.share_group_coordinator
        )
        metrics.register_share_partitions(core.share_partitions)
        if core.authorizer is not None:
            metrics.register_authorizer(core.authorizer)

    async def _start_metrics(self, endpoint: tuple[str, int] | None) -> None:
        """With metrics.listener set: the collectors of the registry the request path
        already counts into, and the HTTP endpoint."""
        if endpoint is None:
            return
        assert self._metrics is not None
        from tidegate.metrics.http_server import MetricsHttpServer

        self._register_collectors(self._metrics)
        self.metrics_server = MetricsHttpServer(self._metrics)
        self.metrics_bound = await self.metrics_server.start(*endpoint)
        host, port = self.metrics_bound
        log.info("serving metrics on http://%s:%d/metrics", host, port)

    async def shutdown(self) -> None:
        log.info("shutting down")
        if self.metrics_server is not None:
            await self.metrics_server.close()
        if self.socket_server is not None:
            self.socket_server.stop_reading()
            with contextlib.suppress(ValueError):
                self.config.reconfigurables.remove(self.socket_server.limits_changed)
        if self.core is not None:
            self.core.stop_serving()
        if self.socket_server is not None:
            await self.socket_server.shutdown()
        if self.scheduler is not None:
            self.scheduler.shutdown()
            await self.scheduler.drain()
        if self.core is not None:
            self.core.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("shut down cleanly")


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: ``/proc/self/stat``, to the kernel's
    clock tick, 10 ms), or None where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        start_ticks = int(stat.rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


async def serve(config: BrokerConfig) -> int:
    broker = Broker(config, owns_process=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except Exception as exc:  # noqa: BLE001 - any start failure: say why, exit 1
        log.error("could not start: %s", exc)
        await broker.shutdown()
        return 1
    await stop.wait()
    await broker.shutdown()
    return 0


def raise_nofile_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (each connection is a
    descriptor; the soft limit is often 1,024 while the hard one allows far more) and
    log both; (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    was = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the file descriptor limit (RLIMIT_NOFILE) from %d to %d: %s",
                        soft, hard, exc)
    log.info("file descriptor limit (RLIMIT_NOFILE): soft %s (was %s), hard %s: at most about that "
             "many connections", _limit(soft), _limit(was), _limit(hard))
    return soft, hard


def _limit(n: int) -> str:
    return "unlimited" if n == resource.RLIM_INFINITY else str(n)


def run(config: BrokerConfig) -> int:
    """Run a broker until SIGINT/SIGTERM; the exit code for ``tidegate serve``."""
    raise_nofile_limit()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))
