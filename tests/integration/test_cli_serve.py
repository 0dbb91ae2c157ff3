"""``tidegate serve`` as a process: help, configuration errors, the console script,
clean SIGTERM under load and the data directory lock."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from tests.conftest import BrokerProcess, free_port, wait_until
from tidegate.testing import Broker

from .clients import (
    ProducerThread,
    admin_client,
    consume,
    create_topic,
    new_consumer,
    produce,
    read_to_end,
)

pytestmark = pytest.mark.timeout(60)


def serve(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidegate", "serve", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


KAFKA_SERVER_PROPERTIES = Path(__file__).resolve().parents[1] / "data" / "kafka-4-server.properties"


def test_kafkas_own_server_properties_start_the_broker(tmp_path):
    """Kafka 4's config/server.properties with only the ports and log.dirs changed (and
    loopback instead of all interfaces): the broker starts, does not bind the KRaft
    controller listener, and clients produce and consume through what it advertises."""
    port, controller = free_port(), free_port()
    text = (KAFKA_SERVER_PROPERTIES.read_text()
            .replace("PLAINTEXT://:9092", f"PLAINTEXT://127.0.0.1:{port}").replace(":9092", f":{port}")
            .replace("CONTROLLER://:9093", f"CONTROLLER://127.0.0.1:{controller}").replace(":9093", f":{controller}")
            .replace("/tmp/kraft-combined-logs", str(tmp_path / "data")))  # fmt: skip
    assert text.count(str(port)) == 2 and text.count(str(controller)) == 3
    props = tmp_path / "server.properties"
    props.write_text(text)
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tidegate", "serve", str(props)],
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_until(lambda: " started" in log.read_text() or proc.poll() is not None, 30, what="the start")
        assert proc.poll() is None, log.read_text()
        assert f"not listening on CONTROLLER://127.0.0.1:{controller}" in log.read_text()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", controller), timeout=5).close()
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, "from-kafka-config", client="confluent")
        produce(bootstrap, "from-kafka-config", [b"a", b"b"], client="confluent")
        got = consume(bootstrap, "from-kafka-config", 2, client="confluent", timeout=20)
        assert [g.value for g in got] == [b"a", b"b"]
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-2000:]


@pytest.mark.parametrize(("send", "receive"), [(None, None), (65536, 32768), (-1, -1)])
def test_socket_buffer_keys_size_the_accepted_connections_buffers(send, receive):
    """socket.send.buffer.bytes / socket.receive.buffer.bytes become SO_SNDBUF / SO_RCVBUF
    of each accepted connection (Linux doubles what is set); -1 leaves the OS default."""
    overrides = {k: v for k, v in (("socket.send.buffer.bytes", send), ("socket.receive.buffer.bytes", receive))
                 if v is not None}  # fmt: skip
    with Broker(overrides=overrides) as b, socket.create_connection(("127.0.0.1", b.ports["PLAINTEXT"])):
        connections = b._server.socket_server.connections
        wait_until(lambda: len(connections) == 1, 10, what="the connection accepted")
        (conn,) = list(connections.values())
        sock = conn.transport.get_extra_info("socket")
        got = (sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    with socket.socket() as fresh:  # what the OS gives a socket nobody sized
        os_default = (fresh.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                      fresh.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))  # fmt: skip
    if send is None:  # Kafka's defaults
        assert got == (2 * 102400, 2 * 102400)
    elif send == -1:
        assert got[0] >= os_default[0] and got[1] >= os_default[1] and got != (2 * 102400, 2 * 102400)
    else:
        assert got == (2 * send, 2 * receive)


def test_help_lists_broker_keys():
    proc = serve("--help")
    assert proc.returncode == 0, proc.stderr
    for key in (
        "log.segment.bytes",
        "socket.request.max.bytes",
        "auto.create.topics.enable",
        "log.dirs",
    ):
        assert key in proc.stdout
    assert "--override" in proc.stdout


def test_unknown_override_exits_2_naming_the_key(tmp_path):
    proc = serve("--override", f"log.dirs={tmp_path / 'd'}", "--override", "foo.bar=1")
    assert proc.returncode == 2
    assert "foo.bar" in proc.stderr
    assert not (tmp_path / "d").exists(), "a configuration error must not touch the data dir"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("log.segment.bytes=abc", ("log.segment.bytes", "abc")),
        ("num.partitions=0", ("num.partitions", "0")),
        ("auto.create.topics.enable=maybe", ("auto.create.topics.enable", "maybe")),
        ("listeners=nonsense", ("listeners", "nonsense")),
    ],
)
def test_invalid_value_exits_2(tmp_path, override, words):
    proc = serve("--override", f"log.dirs={tmp_path / 'd'}", "--override", override)
    assert proc.returncode == 2, proc.stderr
    for word in words:
        assert word in proc.stderr


def test_invalid_properties_file_exits_2(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path / 'd'}\nlog.retention.bytes=lots\n")
    proc = serve(str(props))
    assert proc.returncode == 2
    assert "log.retention.bytes" in proc.stderr


def test_console_script_installed():
    script = Path(sys.executable).parent / "tidegate"
    assert script.is_file()
    proc = subprocess.run(
        [str(script), "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert "tidegate" in proc.stdout
    proc = subprocess.run(
        [str(script), "serve", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert "log.segment.bytes" in proc.stdout


def producer_loop(bootstrap: str, topic: str, acks: str, prefix: str) -> ProducerThread:
    """``<prefix>-0``, ``<prefix>-1``, ... as fast as the broker takes them."""
    conf = {
        "acks": acks,
        "linger.ms": 2,
        "message.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 200,
    }
    return ProducerThread(bootstrap, topic, conf, value_of=lambda n, _: f"{prefix}-{n}".encode())


def test_sigterm_with_active_producers_exits_0_and_keeps_acked_data(broker):
    for name in ("busy-all", "busy-one"):
        create_topic(broker.bootstrap, name, client="confluent")
    loops = {
        "all": producer_loop(broker.bootstrap, "busy-all", "all", "all"),
        "one": producer_loop(broker.bootstrap, "busy-one", "1", "one"),
    }
    for loop in loops.values():
        loop.start()
    wait_until(lambda: min(len(loop.acked) for loop in loops.values()) >= 500, 20,
               what="500 records acknowledged to each producer")  # fmt: skip

    assert broker.stop() == 0  # SIGTERM while both are sending
    for loop in loops.values():
        loop.finish()
    assert "shut down cleanly" in broker.log_text()

    broker.start()
    for prefix, loop in loops.items():
        records = [(g.offset, g.value) for g in read_to_end(broker.bootstrap, loop.topic)[0]]
        assert [o for o, _ in records] == list(range(len(records))), "offsets are not contiguous"
        stored = {v: o for o, v in records}
        assert len(stored) == len(records), "a value was stored twice"
        missing = {v: o for (_, o), v in loop.acked.items() if stored.get(v) != o}
        assert not missing, (
            f"{len(missing)} acknowledged records lost or moved, e.g. {next(iter(missing.items()))}"
        )
        # What was stored is each producer's sequence in order, acked or not.
        assert [v for _, v in records] == [f"{prefix}-{i}".encode() for i in range(len(records))]


def test_sigterm_with_a_parked_long_poll_fetch_exits_promptly(broker):
    """A consumer long-polling (fetch.wait.max.ms=30s) must not hold up shutdown: the
    parked fetch is answered at once and the broker exits 0."""
    create_topic(broker.bootstrap, "parked", client="confluent")
    c = new_consumer(broker.bootstrap, client="confluent", conf={"fetch.wait.max.ms": 30_000})
    try:
        c.assign([TopicPartition("parked", 0, 0)])
        assert c.consume(1, 1.0) == []  # now parked in a fetch on the broker
        started = time.monotonic()
        assert broker.stop() == 0
        elapsed = time.monotonic() - started
    finally:
        c.close()
    assert elapsed < 5, f"shutdown took {elapsed:.1f}s with a parked fetch"
    assert "shut down cleanly" in broker.log_text()


def test_second_broker_on_same_data_dir_refuses_to_start(broker):
    port = free_port()
    proc = serve(
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override",
        f"log.dirs={broker.data_dir}",
    )
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "in use by another tidegate process" in output
    assert str(broker.data_dir) in output
    # The first broker is unaffected and still serves.
    assert broker.alive()
    md = admin_client(broker.bootstrap, client="confluent").list_topics(timeout=10)
    assert [b.id for b in md.brokers.values()] == [1]

    # Once the first one stops, the directory is free again.
    assert broker.stop() == 0
    second = BrokerProcess(broker.data_dir, port=port).start()
    try:
        assert second.alive()
    finally:
        assert second.stop() == 0


def _api_versions_answered(port: int) -> bool:
    """An ApiVersions v0 on a new connection is answered (the broker accepts again)."""
    payload = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(struct.pack(">i", len(payload)) + payload)
            head = s.recv(8)
    except OSError:  # closed at once: still no descriptor free
        return False
    return len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 7


def test_descriptor_limit_is_raised_and_its_exhaustion_is_logged_without_dying_or_spinning(tmp_path):
    """``tidegate serve`` raises its soft RLIMIT_NOFILE to the hard limit and logs both;
    once connections take every descriptor it logs one clear error, keeps serving the
    connections it has without spinning, and accepts again when some close."""
    import psutil

    port = free_port()
    log = tmp_path / "broker.log"

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["prlimit", "--nofile=64:128", sys.executable, "-m", "tidegate", "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 'data'}"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    socks: list[socket.socket] = []
    try:
        wait_until(lambda: " started" in log.read_text() or proc.poll() is not None, 30, what="the start")
        assert proc.poll() is None, log.read_text()
        assert "RLIMIT_NOFILE): soft 128 (was 64), hard 128" in log.read_text()
        for _ in range(160):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        wait_until(lambda: "every file descriptor the broker may open is in use" in log.read_text(), 20,
                   what="the descriptor error")
        assert log.read_text().count("every file descriptor the broker may open is in use") == 1
        broker = psutil.Process(proc.pid)
        before = sum(broker.cpu_times()[:2])
        time.sleep(1.0)
        assert sum(broker.cpu_times()[:2]) - before < 0.5  # not spinning on accept
        assert proc.poll() is None
        for s in socks:
            s.close()
        socks.clear()
        wait_until(lambda: _api_versions_answered(port), 20, what="accepting again")
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-2000:]
