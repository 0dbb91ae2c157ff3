"""The broker's hot-path counters: plain Python ints, no locks, no label sets.

Request metrics (Kafka's ``RequestMetrics`` in ``kafka.network.RequestChannel``: per API and
per client id, the queue/local/remote/send/total histograms) and per-topic byte and message
counters (``BrokerTopicMetrics``). :class:`Histogram` is a fixed-bucket histogram that costs
one ``bisect`` and two increments per observation. Nothing here imports prometheus_client:
the collectors (:mod:`tidegate.metrics.collectors`) turn these counters into metric families
at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from struct import Struct
from time import monotonic_ns

from tidegate.protocol.apis import api_name
from tidegate.protocol.messages._base import Message

NS_PER_MS = 1_000_000
#: Request latency bucket bounds, in ms (Prometheus ``le`` labels).
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip
#: How many distinct client ids get their own series; the rest are folded into "other".
MAX_CLIENT_IDS = 1000
OTHER_CLIENTS = "other"
#: API keys beyond this (no Kafka API has one) share one "Unknown" entry.
MAX_API_KEY = 127


# --------------------------------------------------------------------------------------
# hot-path building blocks
# --------------------------------------------------------------------------------------
class Histogram:
    """Fixed buckets, cumulative only at scrape time.

    ``observe(v)`` is one bisect into the bounds and two increments. Values are
    observed in raw units (e.g. ns) and exposed divided by ``scale`` (e.g. as ms).
    ``counts[i]`` holds observations in ``(bounds[i-1], bounds[i]]``; the last
    slot is the +Inf bucket.
    """

    __slots__ = ("_le", "bounds", "counts", "scale", "sum")

    def __init__(self, bounds: Iterable[float], scale: float = 1) -> None:
        bounds_list = sorted(bounds)
        self.scale = scale
        # whole bounds as ints: bisect compares an int value with an int twice as fast
        self.bounds = tuple(int(v) if isinstance(v, float) and v.is_integer() else v
                            for v in (b * scale for b in bounds_list))
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum: float = 0
        self._le = [_le_label(b) for b in bounds_list] + ["+Inf"]

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def empty_copy(self) -> Histogram:
        """A new empty histogram with these buckets, sharing their (immutable) bounds and
        labels: what an object made many times over (one per share-partition) holds."""
        h = Histogram.__new__(Histogram)
        h.scale = self.scale
        h.bounds = self.bounds
        h._le = self._le
        h.counts = [0] * len(self.counts)
        h.sum = 0
        return h

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs, ending with ``("+Inf", count)``."""
        out = []
        running = 0
        for le, n in zip(self._le, self.counts):
            running += n
            out.append((le, running))
        return out

    def scaled_sum(self) -> float:
        return self.sum / self.scale


def _le_label(bound: float) -> str:
    return repr(float(bound))


def latency_histogram() -> Histogram:
    """A request-time histogram observed in ns, exposed in ms."""
    return Histogram(LATENCY_BUCKETS_MS, scale=NS_PER_MS)


_LATENCY_BOUNDS_NS = latency_histogram().bounds
_REQUEST_HEADER = Struct(">h6xh")  # api_key, (api_version, correlation_id), client_id length


class ApiStats:
    """Per API key: requests, errors by code and the RequestMetrics time histograms."""

    __slots__ = ("errors", "local", "name", "queue", "remote", "requests", "send", "total")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        self.errors: dict[int, int] = {}
        self.queue = latency_histogram()
        self.local = latency_histogram()
        self.remote = latency_histogram()
        self.send = latency_histogram()
        self.total = latency_histogram()


class ClientStats:
    """Per client id: requests and the request time they took (ns)."""

    __slots__ = ("client_id", "requests", "time_ns")

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.requests = 0
        self.time_ns = 0


class RequestTiming:
    """One request's timestamps (``time.monotonic_ns``, the shell's clock), from its last byte to its response.

    The connection calls :meth:`local_done` when ``process`` returns, :meth:`remote_done`
    when an awaitable result resolves, and :meth:`sent` once the response is written;
    :meth:`sent` records everything.
    """

    __slots__ = ("api", "client", "local", "received", "remote", "started")

    def __init__(self, api: ApiStats, client: ClientStats, received: int) -> None:
        self.api = api
        self.client = client
        self.received = received
        self.started = monotonic_ns()
        self.local = 0
        self.remote = 0

    def local_done(self) -> None:
        self.local = self.remote = monotonic_ns()

    def remote_done(self) -> None:
        self.remote = monotonic_ns()

    def sent(self) -> None:
        # Histogram.observe inlined five times: this runs once per request.
        now = monotonic_ns()
        received, started, local, remote = self.received, self.started, self.local, self.remote
        api = self.api
        api.requests += 1
        b = _LATENCY_BOUNDS_NS
        h = api.queue
        v = started - received
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        h = api.local
        v = local - started
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        h = api.remote
        v = remote - local
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        h = api.send
        v = now - remote
        h.counts[bisect_left(b, v)] += 1
        h.sum += v
        h = api.total
        total = now - received
        h.counts[bisect_left(b, total)] += 1
        h.sum += total
        client = self.client
        client.requests += 1
        client.time_ns += total


class RequestMetrics:
    """Kafka's RequestMetrics (per API) plus request counts and time per client id."""

    def __init__(self, max_client_ids: int = MAX_CLIENT_IDS) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.clients: dict[bytes, ClientStats] = {}
        self.max_client_ids = max_client_ids
        self._other = ClientStats(OTHER_CLIENTS)
        self._unknown_api = ApiStats("Unknown")

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            if not 0 <= api_key <= MAX_API_KEY:
                return self._unknown_api
            stats = self.apis[api_key] = ApiStats(api_name(api_key))
        return stats

    def client(self, raw: bytes) -> ClientStats:
        stats = self.clients.get(raw)
        if stats is None:
            if len(self.clients) >= self.max_client_ids:
                return self._other
            stats = self.clients[raw] = ClientStats(raw.decode("utf-8", "replace"))
        return stats

    def begin(self, payload: bytearray) -> RequestTiming | None:
        """Start timing a request whose last byte just arrived; None if it has no header.

        Reads the api key and the client id straight from the request header v1/v2
        (api_key int16, api_version int16, correlation_id int32, client_id nullable
        int16-length string), so nothing waits for the full decode.
        """
        received = monotonic_ns()
        if len(payload) < 10:
            return None
        api_key, n = _REQUEST_HEADER.unpack_from(payload)
        raw = bytes(payload[10 : 10 + n]) if n > 0 else b""
        return RequestTiming(
            self.apis.get(api_key) or self.api(api_key),
            self.clients.get(raw) or self.client(raw),
            received,
        )

    def error(self, api_key: int, code: int) -> None:
        errors = self.api(api_key).errors
        errors[code] = errors.get(code, 0) + 1

    def count_errors(self, api_key: int, response: Message) -> None:
        """Count every non-zero ``error_code`` in a response message (for the low-rate
        APIs; Produce and Fetch count theirs per partition where they are answered)."""
        for code in _error_codes(response):
            if code:
                self.error(api_key, code)

    def client_rows(self) -> list[ClientStats]:
        rows = list(self.clients.values())
        if self._other.requests:
            rows.append(self._other)
        return rows


def _error_codes(message: Message) -> Iterator[int]:
    """Every ``error_code`` field of a message and of the entities it holds."""
    names: tuple[str, ...] = type(message).__slots__
    for name in names:
        value = getattr(message, name)
        if name == "error_code":
            yield value
        elif isinstance(value, Message):
            yield from _error_codes(value)
        elif isinstance(value, list) and value and isinstance(value[0], Message):
            for item in value:
                yield from _error_codes(item)


class TopicStats:
    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


class TopicMetrics:
    """Kafka's BrokerTopicMetrics per topic: messages and bytes in, bytes out."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}

    def stats(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def appended(self, topic: str, records: int, size: int) -> None:
        stats = self.topics.get(topic) or self.stats(topic)
        stats.messages_in += records
        stats.bytes_in += size

    def fetched(self, topic: str, size: int) -> None:
        (self.topics.get(topic) or self.stats(topic)).bytes_out += size

    def remove(self, topic: str) -> None:
        """A deleted topic's series go away, as Kafka removes its topic metrics."""
        self.topics.pop(topic, None)
