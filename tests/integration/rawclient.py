"""A tiny blocking raw-socket Kafka client for tests.

Encodes a request with kio (any API key/version kio knows, whatever the broker
supports), sends it with a chosen correlation id, reads exactly one
size-prefixed response and decodes it with kio after the right response header:
header v0 for ApiVersions (KIP-511) and non-flexible versions, header v1 (one
extra tagged-fields byte) for flexible versions.

It also sends arbitrary bytes, so tests can speak broken Kafka on purpose.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Sequence
from typing import Any, Self

from tests.kio_codec import decode_response, encode_request, response_header_size
from tidegate.record.batch_builder import Record, build_batch

__all__ = [
    "ConnectionClosedByBroker",
    "RawClient",
    "create_topics_body",
    "decode_response",  # kio's, re-exported
    "encode_request",  # kio's, re-exported
    "fetch_body",
    "fetch_topics_body",
    "frame",
    "list_offset",
    "list_offsets_body",
    "produce_body",
    "produce_partition",
    "repeated_batch",
    "response_header_size",  # kio's, re-exported
]

_I32 = struct.Struct(">i")


class ConnectionClosedByBroker(Exception):
    """The broker closed the connection (EOF or reset) while a response was expected."""


def frame(payload: bytes) -> bytes:
    """Size-prefix a request payload."""
    return _I32.pack(len(payload)) + payload


class RawClient:
    """One blocking TCP connection to a broker."""

    def __init__(
        self, host: str, port: int, timeout: float = 10.0, source: str | None = None,
        ssl_context: ssl.SSLContext | None = None, receive_buffer: int | None = None,
    ) -> None:
        """``source``: the local address to connect from (another loopback address,
        127.0.0.2 ..., to test per-IP limits). ``ssl_context``: talk TLS (an SSL
        listener). ``receive_buffer``: SO_RCVBUF, set before connecting (a slow
        consumer's small window)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            if receive_buffer is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            if source:
                sock.bind((source, 0))
            sock.connect((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._next_correlation_id = 1

    @classmethod
    def connect(
        cls, bootstrap: str, timeout: float = 10.0, source: str | None = None,
        ssl_context: ssl.SSLContext | None = None, receive_buffer: int | None = None,
    ) -> RawClient:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), timeout, source, ssl_context, receive_buffer)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- bytes ------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError as exc:
                raise ConnectionClosedByBroker("connection reset") from exc
            if not chunk:
                raise ConnectionClosedByBroker(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        """One size-prefixed response, without its size prefix."""
        (size,) = _I32.unpack(self._recv_exactly(4))
        assert 0 <= size < 1 << 30, f"implausible response size {size}"
        return self._recv_exactly(size)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True once the broker has closed the connection (EOF or reset) within ``timeout``.

        Any response bytes that arrive meanwhile are read and discarded.
        """
        deadline = time.monotonic() + timeout
        old = self.sock.gettimeout()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.sock.settimeout(left)
                try:
                    chunk = self.sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    return True
                except TimeoutError:
                    return False
                if not chunk:
                    return True
        finally:
            self.sock.settimeout(old)

    # -- requests -------------------------------------------------------------------
    def next_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id += 1
        return cid

    def send(
        self,
        api_key: int,
        version: int,
        body: Any,
        correlation_id: int | None = None,
        client_id: str | None = "rawclient",
    ) -> int:
        if correlation_id is None:
            correlation_id = self.next_correlation_id()
        self.send_raw(frame(encode_request(api_key, version, correlation_id, body, client_id)))
        return correlation_id

    def request(
        self,
        api_key: int,
        version: int,
        body: Any,
        correlation_id: int | None = None,
        client_id: str | None = "rawclient",
    ) -> Any:
        """Send one request, read and decode its response; checks the correlation id."""
        cid = self.send(api_key, version, body, correlation_id, client_id)
        got, response = decode_response(api_key, version, self.recv_frame())
        assert got == cid, f"correlation id {got} in the response, {cid} in the request"
        return response


# -- request bodies shared by the tests -------------------------------------------------
def create_topics_body(name: str, partitions: int = 1, configs: dict | None = None) -> dict:
    """CreateTopics v7 of one topic (replication factor 1, broker-assigned replicas)."""
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 10_000,
        "validate_only": False,
    }


def repeated_batch(value: bytes, count: int = 1) -> bytes:
    """One uncompressed batch of ``count`` records of ``value``."""
    return bytes(build_batch([Record(value)] * count))


def produce_body(
    topic: str, records_by_partition: dict[int, bytes], acks: int = 1, timeout: int = 5000,
    transactional_id: str | None = None,
) -> dict:
    """Produce (v3+) of one record set per partition of ``topic``."""
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": timeout,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": p, "records": bytes(r)} for p, r in records_by_partition.items()
                ],
            }
        ],
    }


def fetch_topics_body(
    topics: list, *, max_wait: int = 0, min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
    isolation_level: int = 0, session_id: int = 0, session_epoch: int = -1,
    forgotten: Sequence[tuple] = (),
) -> dict:
    """Fetch (v4+) by a consumer of ``[(name, topic_id, [(partition, fetch_offset,
    partition_max_bytes), ...]), ...]`` (names up to v12, ids from v13); isolation level
    0 read_uncommitted, 1 read_committed. ``session_id``/``session_epoch`` (v7+, KIP-227;
    the default is sessionless) and ``forgotten``: ``[(name, topic_id, [partition, ...])]``."""
    return {
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {
                "topic": name,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": off,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": pmb,
                    }
                    for p, off, pmb in parts
                ],
            }
            for name, topic_id, parts in topics
        ],
        "forgotten_topics_data": [
            {"topic": name, "topic_id": topic_id, "partitions": list(parts)} for name, topic_id, parts in forgotten
        ],
        "rack_id": "",
    }


def fetch_body(
    topic: str,
    offset: int = 0,
    *,
    partition: int = 0,
    max_wait: int = 0,
    min_bytes: int = 1,
    partition_max_bytes: int = 10 * 1024 * 1024,
    isolation_level: int = 0,
) -> dict:
    """Fetch (v4..v12) of one partition of ``topic`` from ``offset``, by a consumer."""
    return fetch_topics_body(
        [(topic, None, [(partition, offset, partition_max_bytes)])], max_wait=max_wait, min_bytes=min_bytes,
        isolation_level=isolation_level,
    )

def produce_partition(
    c: RawClient,
    topic: str,
    records: bytes,
    *,
    partition: int = 0,
    acks: int = 1,
    timeout: int = 5000,
    client_id: str | None = "rawclient",
) -> Any:
    """One Produce v9 of the record set ``records`` to one partition; its partition
    response (error code, base offset)."""
    body = produce_body(topic, {partition: records}, acks=acks, timeout=timeout)
    resp = c.request(0, 9, body, client_id=client_id)
    return resp.responses[0].partition_responses[0]


def list_offsets_body(topic: str, partition: int = 0, timestamp: int = -1, isolation_level: int = 0) -> dict:
    """ListOffsets (v1+) of one partition (timestamp -1 latest, -2 earliest, -3 max)."""
    return {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "timeout": 1000,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }


def list_offset(c: RawClient, topic: str, partition: int = 0, timestamp: int = -1) -> int:
    """ListOffsets v7 of one partition (timestamp -1 latest, -2 earliest); it must succeed."""
    resp = c.request(2, 7, list_offsets_body(topic, partition, timestamp))
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def committed(bootstrap: str, group: str, topic: str, *, stable: bool = True) -> tuple[int, int]:
    """(committed offset, error) of the group for partition 0 of ``topic`` (OffsetFetch
    v7, with or without require_stable: UNSTABLE_OFFSET_COMMIT while a transaction's
    offsets for it are pending)."""
    with RawClient.connect(bootstrap) as c:
        r = c.request(9, 7, {"group_id": group, "require_stable": stable,
                             "topics": [{"name": topic, "partition_indexes": [0]}]})  # fmt: skip
    assert r.error_code == 0
    p = r.topics[0].partitions[0]
    return p.committed_offset, p.error_code
