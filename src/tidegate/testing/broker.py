"""A tidegate broker for test suites: in this process (its own thread and event loop)
or in a subprocess (which a test can kill and restart).

::

    with Broker() as broker:
        broker.create_topic("events", partitions=3)
        broker.produce("events", [b"a", (b"key", b"b")])
        assert [r.value for r in broker.consume("events")] == [b"a", b"b"]

Every listener binds port 0 the first time (no race for a "free" port) and keeps its
port across :meth:`Broker.restart`. The helpers (topics, produce/consume, groups,
offsets and lag) use tidegate's own client over the PLAINTEXT listener.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from tidegate.client.admin import describe_groups, list_group_offsets
from tidegate.client.client import KafkaClient
from tidegate.client.fetcher import EARLIEST, end_offsets, list_offsets, read_range
from tidegate.errors import error_for_code as for_code
from tidegate.record.records import ConsumerRecord

from .pki import make_pki, write_users

log = logging.getLogger(__name__)

Mode = Literal["inprocess", "subprocess"]

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_GROUPS = 15
OFFSET_FETCH = 9

#: what a record given to :meth:`Broker.produce` may be: a value, or (key, value)
RecordLike = bytes | str | None | tuple[bytes | str | None, bytes | str | None]

_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")
#: the line ``tidegate serve`` logs once every listener is open: it serves at full speed
_STARTED = re.compile(r"tidegate node \d+ of cluster \S+ started in ")


class BrokerError(RuntimeError):
    """The broker did not start, or a helper's request failed."""


class Broker:
    """One tidegate broker under test.

    ``mode``: ``"inprocess"`` (default; starts in well under a second) or
    ``"subprocess"`` (``python -m tidegate serve``; :meth:`kill` and :meth:`restart`
    test a client's recovery from a crash).

    ``partitions``: ``num.partitions``; ``auto_create``: ``auto.create.topics.enable``;
    ``overrides``: any broker config (``--override`` keys); ``users``: {user: password}
    adds a SASL listener (PLAIN, SCRAM-SHA-256/512); ``tls``: adds an SSL listener (and
    SASL_SSL with ``users``) with certificates generated at start (:attr:`pki`);
    ``quotas``: ``[(entity, {key: value})]`` set with AlterClientQuotas once started,
    e.g. ``[({"client-id": "slow"}, {"producer_byte_rate": 1024})]``.

    Unlike a production broker, ``group.initial.rebalance.delay.ms`` is 0 unless
    overridden (as in Kafka's own test harness): a group forms as soon as its first
    member joins.

    ``data_dir``: the log directory (default: ``data`` in a temporary directory, removed by
    :meth:`stop` unless ``keep=True``).
    """

    def __init__(
        self,
        *,
        mode: Mode = "inprocess",
        partitions: int | None = None,
        auto_create: bool | None = None,
        overrides: Mapping[str, Any] | None = None,
        users: Mapping[str, str] | None = None,
        tls: bool = False,
        quotas: Sequence[tuple[Mapping[str, str | None], Mapping[str, float | None]]] = (),
        data_dir: str | Path | None = None,
        keep: bool = False,
        start_timeout: float = 30.0,
        log_path: str | Path | None = None,
    ) -> None:
        if mode not in ("inprocess", "subprocess"):
            raise ValueError(f"mode must be 'inprocess' or 'subprocess', not {mode!r}")
        self.mode: Mode = mode
        self.users = dict(users or {})
        self.tls = tls
        self.quotas = list(quotas)
        self.keep = keep
        self.start_timeout = start_timeout
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._tmp: Path | None = None
        # as Kafka's own test clusters and testcontainers do: a first consumer's group
        # forms at once instead of after Kafka's 3 s default
        self.overrides: dict[str, Any] = {"group.initial.rebalance.delay.ms": 0}
        if partitions is not None:
            self.overrides["num.partitions"] = partitions
        if auto_create is not None:
            self.overrides["auto.create.topics.enable"] = str(bool(auto_create)).lower()
        self.overrides.update(overrides or {})
        #: {listener name: port}, fixed once the broker first bound them
        self.ports: dict[str, int] = {}
        #: the generated certificates (see :func:`tidegate.testing.pki.make_pki`) when ``tls``
        self.pki: dict[str, Any] | None = None
        self._client: KafkaClient | None = None
        self._client_lock = threading.Lock()
        # in-process
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None
        # subprocess
        self.proc: subprocess.Popen[bytes] | None = None
        #: the subprocess's output (default: broker.log beside the data directory)
        self.log_path: Path | None = Path(log_path) if log_path is not None else None

    # -- life cycle ---------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        if self._given_dir is not None:
            return self._given_dir
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="tidegate-"))
        return self._tmp / "data"

    @property
    def running(self) -> bool:
        if self.mode == "inprocess":
            return self._thread is not None and self._thread.is_alive()
        return self.proc is not None and self.proc.poll() is None

    def _listener_specs(self) -> dict[str, str]:
        """{listener name: spec}: a ``listeners`` override as given, else those the
        options ask for (port 0 until first bound)."""
        if "listeners" in self.overrides:
            specs = [s.strip() for s in str(self.overrides["listeners"]).split(",") if s.strip()]
            return {spec.split("://", 1)[0]: spec for spec in specs}
        names = ["PLAINTEXT"]
        if self.users:
            names.append("SASL_PLAINTEXT")
        if self.tls:
            names.append("SSL")
            if self.users:
                names.append("SASL_SSL")
        return {n: f"{n}://127.0.0.1:{self.ports.get(n, 0)}" for n in names}

    def _config(self) -> dict[str, Any]:
        base = self.data_dir.parent  # broker.log, users.json, pki/ go beside the data
        props: dict[str, Any] = {
            "listeners": ",".join(self._listener_specs().values()),
            "log.dirs": str(self.data_dir),
        }
        if self.users:
            props["sasl.credentials.file"] = str(write_users(base / "users.json", self.users))
            props["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
        if self.tls:
            if self.pki is None:
                self.pki = make_pki(base / "pki")
            props["ssl.keystore.location"] = str(self.pki["server"])
            props["ssl.truststore.location"] = str(self.pki["ca"])
            props["ssl.client.auth"] = "requested"
        props.update(self.overrides)
        return props

    def start(self) -> Broker:
        """Start the broker and return once every listener accepts connections."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self._config()
        if self.mode == "inprocess":
            self._start_inprocess(props)
        else:
            self._start_subprocess(props)
        if self.quotas:
            from tidegate.client.admin import alter_client_quotas

            with self._client_lock:
                for _entity, code, message in alter_client_quotas(self.client, self.quotas):
                    if code:
                        raise BrokerError(f"quota not set: {for_code(code, message)!r}")
        return self

    def _start_inprocess(self, props: dict[str, Any]) -> None:
        from tidegate.config import BrokerConfig
        from tidegate.server.broker import Broker as Server

        try:
            config = BrokerConfig(props)
        except ValueError as exc:  # ConfigError
            raise BrokerError(f"broker did not start: {exc}") from exc
        server = Server(config)
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        async def boot() -> None:
            try:
                await server.start()
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failure.append(exc)
                await server.shutdown()
            finally:
                started.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.create_task(boot())
            try:
                loop.run_forever()
            finally:
                loop.close()

        thread = threading.Thread(target=run, name="tidegate-broker", daemon=True)
        thread.start()
        if not started.wait(self.start_timeout):
            raise BrokerError(f"broker did not start within {self.start_timeout}s")
        if failure:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            raise BrokerError(f"broker did not start: {failure[0]}") from failure[0]
        self._loop, self._thread, self._server = loop, thread, server
        for name, (_host, port) in server.bound.items():
            self.ports[name] = port

    def _start_subprocess(self, props: dict[str, Any]) -> None:
        args = [sys.executable, "-m", "tidegate", "serve", "--log-level", "info"]
        for k, v in props.items():
            args += ["--override", f"{k}={v}"]
        if self.log_path is None:
            self.log_path = self.data_dir.parent / "broker.log"
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
        wanted = set(self._listener_specs())
        deadline = time.monotonic() + self.start_timeout
        found: dict[str, int] = {}
        while True:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            found = {m[1]: int(m[3]) for m in _LISTENING.finditer(text)}
            if _STARTED.search(text):
                if not wanted <= found.keys():
                    self.kill()
                    raise BrokerError(f"broker started without listeners {sorted(wanted - found.keys())}")
                break
            if self.proc.poll() is not None:
                raise BrokerError(f"broker exited with {self.proc.returncode}:\n{text[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerError(f"broker did not start within {self.start_timeout}s")
            time.sleep(0.005)  # a broker listens ~0.15 s after its spawn: look often
        self.ports.update(found)

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stop cleanly (SIGTERM for a subprocess, SIGKILL if it has not exited within
        ``timeout``) and remove the temporary directory unless ``keep``. Returns the
        subprocess's exit status (0 after a clean shutdown)."""
        rc = self._shutdown(timeout)
        if self._tmp is not None and not self.keep:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        return rc

    def _close_client(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _shutdown(self, timeout: float = 30.0) -> int | None:
        self._close_client()
        rc = None
        if self.mode == "inprocess":
            loop, thread, server = self._loop, self._thread, self._server
            if loop is None or thread is None:
                return None
            if thread.is_alive():
                asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(timeout)
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout)
            self._loop = self._thread = self._server = None
        elif self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            rc = self.proc.returncode
            self.proc = None
        return rc

    def kill(self) -> None:
        """SIGKILL the subprocess broker: no flush, no clean shutdown (a crash)."""
        if self.mode != "subprocess":
            raise BrokerError("kill() needs mode='subprocess'")
        self._close_client()
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> Broker:
        """Stop (if running) and start again on the same ports and data directory."""
        self._shutdown()
        return self.start()

    def __enter__(self) -> Broker:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and client settings --------------------------------------------------
    def listener(self, name: str = "PLAINTEXT") -> str:
        """``host:port`` of listener ``name`` (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL)."""
        if name not in self.ports:
            raise KeyError(f"no {name} listener (listeners: {', '.join(self.ports) or 'none'})")
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def bootstrap_servers(self) -> str:
        return self.listener("PLAINTEXT")

    def client_config(
        self, listener: str = "PLAINTEXT", user: str | None = None,
        mechanism: str = "SCRAM-SHA-512", *, client: Literal["confluent", "tidegate"] = "confluent",
    ) -> dict[str, str]:
        """Settings (dotted keys) for confluent-kafka (``client="confluent"``) or tidegate's
        client and producer (``"tidegate"``, which spells the CA file as Kafka's Java
        client does) to reach ``listener``, logged in as ``user`` (default: the first of
        ``users``)."""
        conf = {"bootstrap.servers": self.listener(listener), "security.protocol": listener}
        if listener.startswith("SASL"):
            user = user or next(iter(self.users))
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": self.users[user]})
        if listener in ("SSL", "SASL_SSL"):
            assert self.pki is not None
            key = "ssl.ca.location" if client == "confluent" else "ssl.truststore.location"
            conf[key] = str(self.pki["ca"])
        return conf

    # -- helpers ------------------------------------------------------------------------
    @property
    def client(self) -> KafkaClient:
        """The helpers' tidegate client (PLAINTEXT listener), made on first use."""
        if self._client is None:
            self._client = KafkaClient(self.bootstrap_servers, client_id="tidegate-testing")
        return self._client

    def _request(self, api_key: int, body: dict[str, Any], version: int) -> Any:
        with self._client_lock:
            return self.client.request(api_key, body, version=version)

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None,
        *, exist_ok: bool = False,
    ) -> str:
        """CreateTopics; returns ``name``. Waits until its partitions have leaders."""
        body = {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": str(v)} for k, v in (config or {}).items()],
            }],
            "timeout": 30_000,
            "validate_only": False,
        }
        resp = self._request(CREATE_TOPICS, body, 7)
        result = resp.topics[0]
        if result.error_code and not (exist_ok and result.error_code == 36):
            raise for_code(result.error_code, result.error_message)
        self._await_topic(name)
        return name

    def _await_topic(self, name: str, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            with self._client_lock:
                cluster = self.client.metadata([name])
            parts = cluster.available_partitions(name)
            if parts:
                return len(parts)
            if time.monotonic() > deadline:
                raise BrokerError(f"topic {name} has no partitions after {timeout}s")
            time.sleep(0.01)

    def delete_topic(self, *names: str) -> None:
        """DeleteTopics (a topic that does not exist is an error)."""
        resp = self._request(DELETE_TOPICS, {"topic_names": list(names), "timeout": 30_000}, 5)
        for r in resp.responses:
            if r.error_code:
                raise for_code(r.error_code, r.error_message)

    def partitions(self, topic: str) -> list[int]:
        with self._client_lock:
            cluster = self.client.metadata([topic])
        if cluster.topic_error(topic):
            raise for_code(cluster.topic_error(topic), None)
        return sorted(p.partition for p in cluster.partitions_for_topic(topic))

    def produce(
        self, topic: str, records: Iterable[RecordLike], *, partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None, **producer_config: Any,
    ) -> list[tuple[int, int]]:
        """Produce each record (a value, or a (key, value) pair) with tidegate's producer
        (acks=all, idempotent) and wait; returns (partition, offset) of each, in order.
        ``producer_config``: more producer settings, dots spelled as ``_``."""
        from tidegate.producer import Producer

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 0}
        conf.update({k.replace("_", "."): v for k, v in producer_config.items()})
        producer = Producer(conf)
        try:
            futures = []
            for rec in records:
                key, value = rec if isinstance(rec, tuple) else (None, rec)
                futures.append(producer.send(topic, value, key=key, partition=partition,
                                             headers=list(headers) if headers else None))
            producer.flush()
            return [(md.partition, md.offset) for md in (f.result(30) for f in futures)]
        finally:
            producer.close()

    def end_offsets(self, topic: str) -> dict[int, int]:
        """{partition: high watermark}."""
        tps = [(topic, p) for p in self.partitions(topic)]
        with self._client_lock:
            return {p: o for (_, p), o in end_offsets(self.client, tps).items()}

    def consume(
        self, topic: str, *, partitions: Iterable[int] | None = None,
        from_offsets: Mapping[int, int] | None = None,
    ) -> list[ConsumerRecord]:
        """Every record now in ``topic`` (or ``partitions``), partition by partition in
        offset order, read from the earliest offset (or ``from_offsets``) to the end.
        Records carry ``.key``, ``.value``, ``.offset``, ``.timestamp``, ``.headers``."""
        parts = list(partitions) if partitions is not None else self.partitions(topic)
        tps = [(topic, p) for p in parts]
        out: list[ConsumerRecord] = []
        with self._client_lock:
            ends = end_offsets(self.client, tps)
            starts = list_offsets(self.client, dict.fromkeys(tps, EARLIEST))
            for tp in tps:
                start = (from_offsets or {}).get(tp[1], starts[tp])
                out.extend(read_range(self.client, tp, start, ends[tp]))
        return out

    def group_state(self, group: str) -> str:
        """The group's state as DescribeGroups says (Stable, Empty, Dead, ...)."""
        with self._client_lock:
            (desc,) = describe_groups(self.client, [group])
        if desc.error_code:
            raise for_code(desc.error_code, None)
        return desc.state

    def wait_for_group(self, group: str, state: str = "Stable", timeout: float = 30.0) -> None:
        """Wait until ``group`` is in ``state`` (a consumer group is Stable once every
        member joined and has its assignment)."""
        deadline = time.monotonic() + timeout
        while (now := self.group_state(group)) != state:
            if time.monotonic() > deadline:
                raise BrokerError(f"group {group} is {now}, not {state}, after {timeout}s")
            time.sleep(0.05)

    def committed(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """{(topic, partition): committed offset} of ``group`` (all its topics, or one)."""
        with self._client_lock:
            offsets = list_group_offsets(self.client, group, require_stable=True)
        return {tp: o for tp, o in offsets.items() if topic is None or tp[0] == topic}

    def lag(self, group: str, topic: str) -> dict[int, int]:
        """{partition: end offset - committed offset} (the whole partition when nothing
        is committed)."""
        committed = self.committed(group, topic)
        return {p: end - committed.get((topic, p), 0) for p, end in self.end_offsets(topic).items()}
