"""``GET /metrics`` served from the broker's own event loop (``metrics.listener``)."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING

from prometheus_client.exposition import choose_encoder

if TYPE_CHECKING:
    from tidegate.metrics.prometheus import BrokerMetrics

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024
HTTP_READ_TIMEOUT_S = 10.0
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]")
_ACCEPT = re.compile(rb"^accept:[ \t]*(.*?)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


class MetricsHttpServer:
    """``GET /metrics`` over HTTP/1.1 on the broker's event loop; 404 for anything else.

    One request per connection (``Connection: close``), which Prometheus handles.
    """

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self.server: asyncio.base_events.Server | None = None
        self.bound: tuple[str, int] | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(
            self._handle, host or None, port, reuse_address=True, limit=MAX_HEADER_BYTES
        )
        sockname = self.server.sockets[0].getsockname()
        self.bound = (sockname[0], sockname[1])
        return self.bound

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._handlers):
                task.cancel()
            await self.server.wait_closed()
            self.server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_READ_TIMEOUT_S)
            status, ctype, body = self._respond(head)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    def _respond(self, head: bytes) -> tuple[str, str, bytes]:
        match = _REQUEST_LINE.match(head)
        if match is None:
            return "400 Bad Request", "text/plain; charset=utf-8", b"bad request\n"
        method, target = match[1], match[2]
        path = target.split(b"?", 1)[0]
        if path != b"/metrics":
            return "404 Not Found", "text/plain; charset=utf-8", b"only /metrics is served here\n"
        if method != b"GET":
            return "405 Method Not Allowed", "text/plain; charset=utf-8", b"use GET\n"
        # Prometheus' own content negotiation: the classic text format (0.0.4) unless
        # the scraper asks for OpenMetrics.
        accept = _ACCEPT.search(head)
        encoder, content_type = choose_encoder(accept[1].decode("latin-1") if accept else "")
        return "200 OK", content_type, encoder(self.metrics.registry)
