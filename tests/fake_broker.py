"""A scripted Kafka broker on a loopback socket, for the producer's tests.

:class:`FakeBroker` answers ApiVersions (the APIs it was given), Metadata (its topics,
every partition led by itself) and Produce (every partition succeeds unless the test
queued error codes), and InitProducerId when asked; any other API goes to a handler
the test passes (``handlers={api_key: fn(version, request) -> response fields}``; a
handler may answer :data:`SILENT` to send nothing and read on, ``AtVersion(v,
fields)`` to answer at another version, as a broker refusing a version does, or a kio
response object to send as it is). Every request is decoded with kio and recorded in
order (``requests``: ``(api_key, version, request)``), so a test can check exactly what
the producer sent.

``tamper`` (settable at any time) sees every response frame before it is sent:
``fn(api_key, version, frame) -> bytes | None`` returns the bytes to send instead (a
damaged frame, random bytes, nothing; :class:`HangUp` bytes are sent and then the
connection is closed) or None to hang up, as a broken broker would.
"""

from __future__ import annotations

import io
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import is_dataclass
from typing import Any, NamedTuple

from kio.serial import entity_reader, entity_writer

from tests.kio_codec import build, request_class, response_class

#: a handler's answer: send nothing, keep reading (a broker that stopped answering)
SILENT: Any = object()


class AtVersion(NamedTuple):
    """A handler's answer encoded at ``version`` rather than the request's."""

    version: int
    fields: dict[str, Any]


class HangUp(bytes):
    """What a ``tamper`` sends before the broker closes the connection."""


Handler = Callable[[int, Any], "dict[str, Any] | AtVersion | None"]

#: (api key, min version, max version) a FakeBroker advertises by default
BASE_APIS = [(0, 3, 12), (3, 0, 12), (18, 0, 3)]


def _frame(cid: int, resp: Any, flexible: bool) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">i", cid))
    if flexible:
        out.write(b"\x00")
    entity_writer(type(resp))(out, resp)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


class FakeBroker:
    def __init__(
        self,
        init_producer_id: bool = False,
        produce_errors: Iterable[int] = (),
        *,
        apis: Iterable[tuple[int, int, int]] = (),
        handlers: dict[int, Handler] | None = None,
        topics: dict[str, int] | None = None,
    ) -> None:
        self.produce_requests: list[Any] = []
        #: api keys in arrival order (kept for the older tests)
        self.requests: list[int] = []
        #: (api key, version, decoded request) in arrival order
        self.received: list[tuple[int, int, Any]] = []
        self.produce_errors = list(produce_errors)
        self.topics = dict(topics or {"t": 1})
        self.handlers = dict(handlers or {})
        self.apis = list(BASE_APIS) + ([(22, 0, 4)] if init_producer_id else []) + list(apis)
        self.lock = threading.Lock()
        self.tamper: Callable[[int, int, bytes], bytes | None] | None = None
        self._offsets: dict[tuple[str, int], int] = {}
        outer = self

        class Conn(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                s = self.request
                while True:
                    hdr = s.recv(4, socket.MSG_WAITALL)
                    if len(hdr) < 4:
                        return
                    (n,) = struct.unpack(">i", hdr)
                    body = s.recv(n, socket.MSG_WAITALL)
                    key, ver, cid = struct.unpack(">hhi", body[:8])
                    cls = request_class(key, ver)
                    _, off = entity_reader(cls.__header_schema__)(body, 0)
                    req, _ = entity_reader(cls)(body, off)
                    with outer.lock:
                        outer.requests.append(key)
                        outer.received.append((key, ver, req))
                        fields = outer._answer(key, ver, req)
                    if fields is SILENT:
                        continue
                    if fields is None:
                        if key == 0:
                            continue  # acks=0
                        return  # unknown: hang up
                    if isinstance(fields, AtVersion):
                        ver, fields = fields
                    flexible = bool(response_class(key, ver).__flexible__) and key != 18
                    resp = fields if is_dataclass(fields) else build(response_class(key, ver), fields)
                    data: bytes | None = _frame(cid, resp, flexible)
                    tamper = outer.tamper
                    if tamper is not None:
                        data = tamper(key, ver, data)
                        if data is None:
                            return  # hang up
                    s.sendall(data)
                    if isinstance(data, HangUp):
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Conn)
        self.port = self.server.server_address[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, key: int, ver: int, req: Any) -> dict[str, Any] | AtVersion | None:
        handler = self.handlers.get(key)
        if handler is not None:
            return handler(ver, req)
        if key == 18:
            return {
                "error_code": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self.apis
                ],
            }
        if key == 3:
            return {
                "brokers": [{"node_id": 7, "host": "127.0.0.1", "port": self.port}],
                "controller_id": 7,
                "topics": [
                    {
                        "error_code": 0,
                        "name": name,
                        "partitions": [
                            {
                                "error_code": 0,
                                "partition_index": i,
                                "leader_id": 7,
                                "replica_nodes": [7],
                                "isr_nodes": [7],
                            }
                            for i in range(n)
                        ],
                    }
                    for name, n in self.topics.items()
                ],
            }
        if key == 0:
            self.produce_requests.append(req)
            code = self.produce_errors.pop(0) if self.produce_errors else 0
            if req.acks == 0:
                return None
            return {
                "responses": [
                    {
                        "name": t.name,
                        "partition_responses": [
                            {
                                "index": p.index,
                                "error_code": code,
                                "base_offset": self._append(t.name, p.index, p.records, code),
                            }
                            for p in t.partition_data
                        ],
                    }
                    for t in req.topic_data
                ]
            }
        if key == 22:
            return {"error_code": 0, "producer_id": 4242, "producer_epoch": 0}
        return None

    def _append(self, topic: str, partition: int, records: bytes, code: int) -> int:
        """The base offset of a batch (offsets count records per partition; the first
        batch of a partition is at 0)."""
        if code:
            return -1
        tp = (topic, partition)
        base = self._offsets.get(tp, 0)
        (last_delta,) = struct.unpack_from(">i", records, 23)
        self._offsets[tp] = base + last_delta + 1
        return base

    def of(self, api_key: int) -> list[Any]:
        """The decoded requests of ``api_key`` received so far."""
        with self.lock:
            return [r for k, _, r in self.received if k == api_key]

    def versions(self, api_key: int) -> list[int]:
        with self.lock:
            return [v for k, v, _ in self.received if k == api_key]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
