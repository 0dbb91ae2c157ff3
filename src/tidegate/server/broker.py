"""Starting and stopping a broker: the thin asyncio shell around the sans-IO core.

``run(config)`` is what ``tidegate serve`` calls. It locks the data directory,
opens the logs (recovering after a crash), starts the listeners and a
maintenance task (time-based flush, retention), and on SIGINT/SIGTERM drains:
listeners close, in-flight requests are answered, logs are flushed and closed,
and the process exits 0.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import time
from pathlib import Path

from tidegate.config import BrokerConfig, parse_metrics_listener, topic_log_config
from tidegate.metrics import BrokerMetrics, MetricsHttpServer
from tidegate.network import memory_pool
from tidegate.network.socket_server import SocketServer
from tidegate.security.listener import build_credential_store, build_listener_security
from tidegate.server.apis import KafkaApis, Purgatories
from tidegate.server.metadata import TopicStore, load_or_create_meta
from tidegate.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
MAINTENANCE_TICK_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = Path(config.log_dir).resolve()
        self._lock_fd: int | None = None
        self.replicas: ReplicaManager | None = None
        self.apis: KafkaApis | None = None
        self.socket_server: SocketServer | None = None
        self._maintenance: asyncio.Task | None = None
        self._group_maintenance: asyncio.Task | None = None
        self.bound: dict[str, tuple[str, int]] = {}
        # Always there (mechanisms register into it); counting and HTTP only when
        # metrics.listener is set.
        self.metrics = BrokerMetrics()
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
        self._lock()
        cluster_id = load_or_create_meta(
            self.data_dir, self.config.node_id, self.config.get("cluster.id")
        )
        store = TopicStore(self.data_dir)
        self.replicas = ReplicaManager(
            self.data_dir,
            store,
            lambda info: topic_log_config(self.config, info.configs),
            now_ms,
        )
        started = time.monotonic()
        self.replicas.load()
        log.info(
            "loaded %d partition log(s) of %d topic(s) from %s in %.2fs",
            len(self.replicas.logs),
            len(store.topics),
            self.data_dir,
            time.monotonic() - started,
        )
        self.purgatories = Purgatories(
            self.config.get("fetch.purgatory.purge.interval.requests"),
            self.config.get("producer.purgatory.purge.interval.requests"),
        )
        # SCRAM credentials persist in the data directory; sasl.credentials.file adds users
        self.credentials = build_credential_store(self.config, self.data_dir)
        self.apis = KafkaApis(self.config, cluster_id, self.replicas, self.purgatories, now_ms,
                              credentials=self.credentials)
        self.apis.groups.start()  # replay __consumer_offsets, arm members' session timers
        max_request = self.config.get("socket.request.max.bytes")
        pool = memory_pool.create_pool(self.config.queued_max_request_bytes, max_request)
        log.info("request memory pool: %r, queued.max.requests=%d",
                 pool, self.config.get("queued.max.requests"))
        self.socket_server = SocketServer(
            self.apis,
            pool,
            max_request,
            max_queued_requests=self.config.get("queued.max.requests"),
            receive_buffer_bytes=self.config.get("socket.receive.buffer.bytes"),
            sasl_max_receive_size=self.config.get("sasl.server.max.receive.size"),
        )
        await self._start_metrics()
        for listener in self.config.listeners:
            security = None
            if listener.security_protocol != "PLAINTEXT":
                security = build_listener_security(self.config, listener, self.credentials)
            host, port = await self.socket_server.start_listener(
                listener.name, listener.host, listener.port, security
            )
            self.bound[listener.name] = (host, port)
            self.apis.bound_ports[listener.name] = port
            extra = ""
            if security is not None and security.sasl:
                extra = f" (SASL mechanisms {', '.join(security.mechanisms)})"
            log.info("listening on %s://%s:%d, security protocol %s%s", listener.name, host, port,
                     listener.security_protocol, extra)
        self._maintenance = asyncio.create_task(self._maintain())
        self._group_maintenance = asyncio.create_task(self._maintain_groups())
        log.info("tidegate node %d of cluster %s started", self.config.node_id, cluster_id)

    async def _start_metrics(self) -> None:
        assert self.socket_server is not None and self.apis is not None
        replicas = self.replicas
        assert replicas is not None
        self.metrics.register_socket_server(self.socket_server)
        self.metrics.register_purgatory("Fetch", self.purgatories.fetch)
        self.metrics.register_purgatory("Produce", self.purgatories.produce)
        self.metrics.register_purgatory("Heartbeat", self.purgatories.heartbeat)
        self.metrics.register_purgatory("Rebalance", self.purgatories.rebalance)
        self.metrics.register_flusher(self.purgatories.flusher)
        self.metrics.register_logs(lambda: replicas.logs)
        self.metrics.register_quotas(self.apis.quotas)
        endpoint = parse_metrics_listener(self.config.get("metrics.listener"))
        if endpoint is None:
            return
        self.apis.metrics = self.metrics
        self.socket_server.request_metrics = self.metrics.requests
        self.metrics_server = MetricsHttpServer(self.metrics)
        self.metrics_bound = await self.metrics_server.start(*endpoint)
        host, port = self.metrics_bound
        log.info("serving metrics on http://%s:%d/metrics", host, port)

    async def _maintain(self) -> None:
        """Time-based flush and retention; recovery-point checkpoints on their own timer."""
        retention_ms = self.config.get("log.retention.check.interval.ms")
        checkpoint_ms = self.config.get("log.flush.offset.checkpoint.interval.ms")
        expiration_ms = self.config.get("producer.id.expiration.ms")
        expiration_check_ms = self.config.get("producer.id.expiration.check.interval.ms")
        start = now_ms()
        next_retention = start + retention_ms
        next_checkpoint = start + checkpoint_ms
        next_expiration = start + expiration_check_ms
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(MAINTENANCE_TICK_S)
            now = now_ms()
            due = now >= next_retention
            if due:
                next_retention = now + retention_ms
            try:
                assert self.replicas is not None
                self.purgatories.reaper.purge_if_due()
                self.replicas.maintenance(now, due)
                if now >= next_expiration:
                    next_expiration = now + expiration_check_ms
                    removed = self.replicas.remove_expired_producers(now, expiration_ms)
                    if removed:
                        log.info("removed %d expired producer id state(s)", removed)
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_ms
                    for ticket in self.replicas.recovery_point_checkpoints():
                        await loop.run_in_executor(None, ticket.run)
            except Exception:
                log.exception("log maintenance failed")

    async def _maintain_groups(self) -> None:
        """Offset retention (offsets.retention.check.interval.ms) and the compaction of
        __consumer_offsets, whose fsync runs off the event loop."""
        assert self.apis is not None
        groups = self.apis.groups
        interval = self.config.get("offsets.retention.check.interval.ms")
        next_check = now_ms() + interval
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(MAINTENANCE_TICK_S)
            now = now_ms()
            try:
                due = now >= next_check
                if due:
                    next_check = now + interval
                groups.maintenance(now, due)
                offsets_log = groups.offsets_log
                if offsets_log.needs_compaction:
                    ticket = offsets_log.begin_compaction()
                    if ticket is not None:
                        await loop.run_in_executor(None, ticket.flush.run)
                        offsets_log.finish_compaction(ticket)
            except Exception:
                log.exception("group maintenance failed")

    async def shutdown(self) -> None:
        log.info("shutting down")
        if self._maintenance is not None:
            self._maintenance.cancel()
        if self._group_maintenance is not None:
            self._group_maintenance.cancel()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        if self.socket_server is not None:
            self.socket_server.stop_reading()
            if self.apis is not None:
                self.apis.groups.shutdown()  # parked JoinGroup/SyncGroup: NOT_COORDINATOR
            # Parked long-poll fetches answer now with what they have, rather than
            # holding the shutdown for up to their max wait.
            self.purgatories.complete_fetches_now()
            await self.socket_server.shutdown()
        self.purgatories.shutdown()
        if self.apis is not None:
            self.apis.quotas.shutdown()  # the throttle timer
        if self.replicas is not None:
            self.replicas.close()  # flushes every log and writes its clean-shutdown marker
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("shut down cleanly")


async def serve(config: BrokerConfig) -> int:
    broker = Broker(config)
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


def run(config: BrokerConfig) -> int:
    """Run a broker until SIGINT/SIGTERM; the exit code for ``tidegate serve``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))
