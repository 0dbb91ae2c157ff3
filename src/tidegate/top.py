"""``tidegate top``: what a broker is doing and holding back, refreshed every second.

Reads the broker's Prometheus endpoint (``metrics.listener``) and shows, from the
difference between two scrapes, throughput per topic, requests per API, the memory
pool and muted connections, the purgatories, open transactions, the groups (classic, consumer
protocol and share: state, epoch, members, a share group's in-flight records), the clients taking
the most request time, the quota counters (user and client-id) with the most throttle time, and
connections.

With ``--bootstrap-server`` it asks the broker over the Kafka protocol (through
confluent-kafka) for its ``metrics.listener`` (DescribeConfigs) and uses that. If
the broker has no metrics listener, only what the Kafka protocol tells, topics and
their offsets (so messages/s from offset deltas), can be shown; every other section
says so.

The view is computed once (:func:`build_view`) and rendered either with rich
(:func:`render_rich`, a live terminal view) or as plain text (:func:`render_plain`,
when stdout is not a terminal or with ``--once``).
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:  # an optional dependency, imported where used
    from confluent_kafka.admin import AdminClient

Labels = dict[str, str]

TOP_ROWS = 10
HTTP_TIMEOUT_S = 5.0
UNBOUNDED_POOL = 2**62  # a pool reporting more than this available is Kafka's MemoryPool.NONE


class SourceError(Exception):
    """The broker could not be read; the message says why."""


# --------------------------------------------------------------------------------------
# snapshots
# --------------------------------------------------------------------------------------
@dataclass
class Snapshot:
    """One scrape: sample name -> [(labels, value)], and when it was taken."""

    at: float
    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    #: Set when only part of the picture is available (no metrics listener).
    limitation: str | None = None

    @classmethod
    def parse(cls, text: str, at: float) -> Snapshot:
        samples: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name].append((dict(s.labels), float(s.value)))
        return cls(at, dict(samples))

    def has(self, name: str) -> bool:
        return name in self.samples

    def values(self, name: str, label: str | None = None) -> dict[str, float]:
        """Values of a sample summed by one label ("" when ``label`` is None)."""
        out: dict[str, float] = defaultdict(float)
        for labels, value in self.samples.get(name, ()):
            out[labels.get(label, "") if label else ""] += value
        return dict(out)

    def value(self, name: str, default: float = 0.0) -> float:
        return self.values(name).get("", default)


def rates(prev: Snapshot | None, cur: Snapshot, name: str, label: str) -> dict[str, float]:
    """Per-second increase of a counter by label between two snapshots (0 if unknown)."""
    now = cur.values(name, label)
    if prev is None:
        return dict.fromkeys(now, 0.0)
    dt = cur.at - prev.at
    before = prev.values(name, label)
    return {k: max(v - before.get(k, 0.0), 0.0) / dt if dt > 0 else 0.0 for k, v in now.items()}


# --------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------
def metrics_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/metrics``; a path given is kept."""
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


class MetricsSource:
    """Scrapes the broker's Prometheus endpoint."""

    def __init__(self, url: str) -> None:
        self.url = metrics_url(url)
        self.description = self.url

    def sample(self) -> Snapshot:
        try:
            with urllib.request.urlopen(self.url, timeout=HTTP_TIMEOUT_S) as resp:
                text = resp.read().decode("utf-8")
        except OSError as exc:
            raise SourceError(f"cannot read {self.url}: {exc}") from None
        return Snapshot.parse(text, time.monotonic())


class KafkaSource:
    """Topics and offsets over the Kafka protocol, for brokers without a metrics listener."""

    def __init__(self, admin: AdminClient, bootstrap: str, reason: str) -> None:
        self.admin = admin
        self.description = f"{bootstrap} (Kafka protocol only)"
        self.limitation = reason

    def sample(self) -> Snapshot:
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin = self.admin
        try:
            md = admin.list_topics(timeout=HTTP_TIMEOUT_S)
            parts = [
                TopicPartition(topic, p)
                for topic, t in md.topics.items()  # keyed by name (t.topic is Optional)
                if not t.error and not topic.startswith("__")
                for p in t.partitions
            ]
            snap = Snapshot(time.monotonic(), limitation=self.limitation)
            for spec, name in (
                (OffsetSpec.latest(), "kafka_log_log_logendoffset"),
                (OffsetSpec.earliest(), "kafka_log_log_logstartoffset"),
            ):
                if not parts:
                    break
                futures = admin.list_offsets(
                    {tp: spec for tp in parts}, request_timeout=HTTP_TIMEOUT_S
                )
                rows = snap.samples.setdefault(name, [])
                for tp, fut in futures.items():
                    info = fut.result()
                    rows.append(
                        ({"topic": tp.topic, "partition": str(tp.partition)}, float(info.offset))
                    )
            return snap
        except KafkaException as exc:
            raise SourceError(f"Kafka protocol error: {exc}") from None


def discover(bootstrap: str) -> MetricsSource | KafkaSource:
    """The broker's metrics listener (from DescribeConfigs), else a protocol-only source."""
    try:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    except ImportError:
        raise SourceError(
            "--bootstrap-server needs confluent-kafka (pip install confluent-kafka); "
            "or give the broker's metrics endpoint with --metrics-url"
        ) from None
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "client.id": "tidegate-top", "log_level": 0}
    )
    try:
        md = admin.list_topics(timeout=HTTP_TIMEOUT_S)
        node = md.controller_id if md.controller_id >= 0 else next(iter(md.brokers))
        resource = ConfigResource(ResourceType.BROKER, str(node))
        configs = admin.describe_configs([resource])[resource].result(timeout=HTTP_TIMEOUT_S)
    except (KafkaException, StopIteration) as exc:
        raise SourceError(f"cannot reach a broker at {bootstrap}: {exc}") from None
    entry = configs.get("metrics.listener")
    value = entry.value if entry is not None else None
    if value:
        parts = urllib.parse.urlsplit(value.strip())
        host = parts.hostname or ""
        if host in ("", "0.0.0.0", "::"):
            host = bootstrap.rsplit(":", 1)[0].strip("[]")  # wildcard bind: reach it as bootstrap
        if ":" in host:
            host = f"[{host}]"
        return MetricsSource(f"http://{host}:{parts.port}/metrics")
    reason = (
        "the broker has no metrics.listener: only topics and offsets (Kafka protocol) are "
        "shown; set metrics.listener=http://host:port for the full view"
    )
    if entry is None:
        reason = "the broker does not report metrics.listener: only topics and offsets are shown"
    return KafkaSource(admin, bootstrap, reason)


# --------------------------------------------------------------------------------------
# the view
# --------------------------------------------------------------------------------------
@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str | None = None


@dataclass
class View:
    header: str
    sections: list[Section]
    limitation: str | None = None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _num(n: float) -> str:
    return f"{n:,.0f}" if abs(n) >= 100 or n == int(n) else f"{n:,.1f}"


def _ms(n: float | None) -> str:
    return "-" if n is None else f"{n:.2f}"


NO_METRICS = "n/a: needs the broker's metrics listener"


def build_view(prev: Snapshot | None, cur: Snapshot, source: str) -> View:
    full = cur.limitation is None
    interval = f"{cur.at - prev.at:.1f}s" if prev is not None else "no interval yet"
    conns = cur.values("kafka_server_socketservermetrics_connection_count", "listener")
    req_rate = sum(
        rates(prev, cur, "kafka_network_requestmetrics_requests_total", "request").values()
    )
    header = f"tidegate top - {source} - rates over {interval}"
    if full:
        header += f" - {_num(sum(conns.values()))} connection(s), {_num(req_rate)} requests/s"
    sections = [
        _topics(prev, cur),
        _requests(prev, cur) if full else _na("Requests"),
        _memory(cur) if full else _na("Memory pool and muted connections"),
        _purgatories(prev, cur) if full else _na("Purgatories"),
        _transactions(prev, cur) if full else _na("Transactions"),
        _groups(prev, cur) if full else _na("Groups"),
        _log_cleaner(cur) if full else _na("Log cleaner"),
        _clients(prev, cur) if full else _na("Top clients by request time"),
        _throttled(prev, cur) if full else _na("Top clients by throttle time"),
        _connections(cur) if full else _na("Connections"),
    ]
    return View(header, sections, cur.limitation)


def _na(title: str) -> Section:
    return Section(title, [], [], NO_METRICS)


def _partition_sums(cur: Snapshot, name: str) -> tuple[dict[str, float], dict[str, int]]:
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for labels, value in cur.samples.get(name, ()):
        sums[labels.get("topic", "")] += value
        counts[labels.get("topic", "")] += 1
    return sums, counts


def _topics(prev: Snapshot | None, cur: Snapshot) -> Section:
    end, partitions = _partition_sums(cur, "kafka_log_log_logendoffset")
    start, _ = _partition_sums(cur, "kafka_log_log_logstartoffset")
    size, _ = _partition_sums(cur, "kafka_log_log_size")
    have_counters = cur.has("kafka_server_brokertopicmetrics_messagesin_total") or cur.has(
        "kafka_network_requestmetrics_requests_total"
    )
    if have_counters:
        msgs = rates(prev, cur, "kafka_server_brokertopicmetrics_messagesin_total", "topic")
    else:  # protocol only: the end offsets moved by this many records
        msgs = rates(prev, cur, "kafka_log_log_logendoffset", "topic")
    b_in = rates(prev, cur, "kafka_server_brokertopicmetrics_bytesin_total", "topic")
    b_out = rates(prev, cur, "kafka_server_brokertopicmetrics_bytesout_total", "topic")
    total_in = cur.values("kafka_server_brokertopicmetrics_messagesin_total", "topic")
    topics = sorted(set(end) | set(total_in), key=lambda t: (-msgs.get(t, 0.0), t))
    rows = []
    for t in topics:
        rows.append(
            [
                t,
                str(partitions.get(t, 0)),
                _num(msgs.get(t, 0.0)),
                human_bytes(b_in.get(t, 0.0)) + "/s" if have_counters else "-",
                human_bytes(b_out.get(t, 0.0)) + "/s" if have_counters else "-",
                human_bytes(size[t]) if t in size else "-",
                _num(end.get(t, 0.0) - start.get(t, 0.0)),
                _num(total_in[t]) if t in total_in else "-",
            ]
        )
    return Section(
        "Topics",
        ["topic", "parts", "msgs in/s", "bytes in/s", "bytes out/s", "size", "records", "msgs in"],
        rows,
        None if rows else "no topics",
    )


def _hist_avg(prev: Snapshot | None, cur: Snapshot, name: str) -> dict[str, float | None]:
    """Mean of a histogram over the interval (or since start without one), per request."""
    s_now = cur.values(f"{name}_sum", "request")
    c_now = cur.values(f"{name}_count", "request")
    s_prev = prev.values(f"{name}_sum", "request") if prev is not None else {}
    c_prev = prev.values(f"{name}_count", "request") if prev is not None else {}
    out: dict[str, float | None] = {}
    for k, c in c_now.items():
        dc = c - c_prev.get(k, 0.0)
        if dc <= 0:
            out[k] = None
        else:
            out[k] = (s_now.get(k, 0.0) - s_prev.get(k, 0.0)) / dc
    return out


def _requests(prev: Snapshot | None, cur: Snapshot) -> Section:
    base = "kafka_network_requestmetrics_"
    rate = rates(prev, cur, base + "requests_total", "request")
    total = cur.values(base + "requests_total", "request")
    err_rate = rates(prev, cur, base + "errors_total", "request")
    errors = cur.values(base + "errors_total", "request")
    total_ms = _hist_avg(prev, cur, base + "totaltimems")
    local_ms = _hist_avg(prev, cur, base + "localtimems")
    remote_ms = _hist_avg(prev, cur, base + "remotetimems")
    rows = [
        [
            r,
            _num(rate.get(r, 0.0)),
            _num(total[r]),
            _num(err_rate.get(r, 0.0)),
            _num(errors.get(r, 0.0)),
            _ms(total_ms.get(r)),
            _ms(local_ms.get(r)),
            _ms(remote_ms.get(r)),
        ]
        for r in sorted(total, key=lambda r: (-rate.get(r, 0.0), -total[r], r))
        if total[r] or errors.get(r)
    ]
    return Section(
        "Requests",
        ["request", "req/s", "requests", "errors/s", "errors", "avg ms", "local ms", "remote ms"],
        rows,
        None if rows else "no requests yet",
    )


def _memory(cur: Snapshot) -> Section:
    base = "kafka_network_socketserver_memorypool"
    available = cur.value(base + "available")
    used = cur.value(base + "used")
    muted = cur.values("tidegate_network_socketserver_mutedconnections", "reason")
    if available > UNBOUNDED_POOL:
        fill = "unbounded (no bound on request memory)"
        avail = "unbounded"
    else:
        size = available + used
        fill = f"{100.0 * used / size:.1f}% of {human_bytes(size)}" if size else "-"
        avail = human_bytes(available)
    rows = [
        ["pool used", f"{human_bytes(used)}"],
        ["pool fill", fill],
        ["pool available", avail],
        ["avg depleted", f"{100.0 * cur.value(base + 'avgdepletedpercent'):.1f}% of recent time"],
        ["depleted time total", f"{cur.value(base + 'depletedtimetotal'):,.0f} ms"],
        ["muted for memory", _num(muted.get("MEMORY", 0.0))],
        ["muted (any reason)", ", ".join(f"{k} {_num(v)}" for k, v in muted.items() if v) or "0"],
    ]
    return Section("Memory pool and muted connections", ["", "value"], rows)


def _purgatories(prev: Snapshot | None, cur: Snapshot) -> Section:
    base = "kafka_server_delayedoperationpurgatory_"
    size = cur.values(base + "purgatorysize", "delayedOperation")
    delayed = cur.values(base + "numdelayedoperations", "delayedOperation")
    expires = cur.values(base + "expires_total", "delayedOperation")
    exp_rate = rates(prev, cur, base + "expires_total", "delayedOperation")
    names = sorted(set(size) | set(delayed))
    rows = [
        [
            n,
            _num(size.get(n, 0.0)),
            _num(delayed.get(n, 0.0)),
            _num(exp_rate.get(n, 0.0)),
            _num(expires.get(n, 0.0)),
        ]
        for n in names
    ]
    return Section(
        "Purgatories",
        ["operation", "size", "delayed ops", "expired/s", "expired"],
        rows,
        None if rows else "no purgatory registered by this broker",
    )


#: transaction states, in the order a transaction goes through them
TXN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence", "CompleteCommit",
              "CompleteAbort", "Empty")


def _transactions(prev: Snapshot | None, cur: Snapshot) -> Section:
    base = "tidegate_transaction_coordinator_"
    states = cur.values(base + "transactional_ids", "state")
    done = rates(prev, cur, base + "completed_transactions_total", "result")
    open_ = sum(states.get(s, 0.0) for s in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"))
    rows = [
        ["open transactions", _num(open_)],
        ["oldest open", f"{cur.value(base + 'oldest_open_transaction_age_ms') / 1000:,.1f} s"],
        ["commits/s", _num(done.get("commit", 0.0))],
        ["aborts/s", _num(done.get("abort", 0.0))],
        ["markers/s", _num(sum(rates(prev, cur, base + "markers_written_total", "").values()))],
        ["marker retries queued", _num(cur.value(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize"))],
        ["ids by state", ", ".join(f"{st} {_num(states[st])}" for st in TXN_STATES if states.get(st)) or "none"],
    ]
    return Section("Transactions", ["", "value"], rows,
                   None if cur.has(base + "transactional_ids") else "no transaction coordinator metrics")


#: group types in the order the Groups section lists them
GROUP_TYPES = ("consumer", "share", "classic")
GROUPS = "kafka_server_group_coordinator_metrics_"


def _groups(prev: Snapshot | None, cur: Snapshot) -> Section:
    """The groups with the most members (tidegate_group_members and tidegate_group_epoch):
    type, state, epoch (a classic group's generation), members, and a share group's
    in-flight records (SharePartitionMetrics InFlightMessageCount over its partitions) and
    acquisition locks (tidegate_share_partition_acquired_records: records held now);
    the note has the rebalances and offset commits per second."""
    epochs = {(labels.get("group", ""), labels.get("protocol", "")): v
              for labels, v in cur.samples.get("tidegate_group_epoch", ())}  # fmt: skip
    in_flight = cur.values("kafka_server_sharepartitionmetrics_inflightmessagecount", "group")
    locked = cur.values("tidegate_share_partition_acquired_records", "group")
    groups = [(labels.get("group", ""), labels.get("protocol", ""), labels.get("state", ""), v)
              for labels, v in cur.samples.get("tidegate_group_members", ())]  # fmt: skip
    order = sorted(groups, key=lambda g: (-g[3], GROUP_TYPES.index(g[1]) if g[1] in GROUP_TYPES else 9, g[0]))
    rows = [
        [group, kind, state.capitalize(), _num(epochs.get((group, kind), 0.0)), _num(members),
         _num(in_flight.get(group, 0.0)) if kind == "share" else "-",
         _num(locked.get(group, 0.0)) if kind == "share" else "-"]
        for group, kind, state, members in order[:TOP_ROWS]
    ]  # fmt: skip

    def per_second(metric: str) -> str:
        return _num(sum(rates(prev, cur, GROUPS + metric + "_total", "").values()))

    counts = cur.values(GROUPS + "group_count", "protocol")
    note = (f"{', '.join(f'{_num(counts.get(t, 0.0))} {t}' for t in GROUP_TYPES)} group(s); rebalances/s: "
            f"consumer {per_second('consumer_group_rebalance')}, share {per_second('share_group_rebalance')}, "
            f"classic {per_second('group_completed_rebalance')}; offset commits/s {per_second('offset_commit')}")
    if len(groups) > TOP_ROWS:
        note += f"; the {TOP_ROWS} with the most members shown"
    if not cur.has(GROUPS + "group_count"):
        note = "no group coordinator metrics"
    return Section("Groups", ["group", "type", "state", "epoch", "members", "in-flight", "locked"], rows, note)


def _log_cleaner(cur: Snapshot) -> Section:
    """Kafka's LogCleaner / LogCleanerManager gauges (docs/compaction.md)."""
    mgr, cl = "kafka_log_logcleanermanager_", "kafka_log_logcleaner_"
    rows = [
        ["dirtiest compacted log", f"{cur.value(mgr + 'max_dirty_percent'):.0f} % dirty"],
        ["last look", f"{cur.value(mgr + 'time_since_last_run_ms') / 1000:,.1f} s ago"],
        ["last clean", (f"{cur.value(cl + 'max_clean_time_secs'):.0f} s, "
                        f"{cur.value(cl + 'cleaner_recopy_percent'):.0f} % of bytes kept, offset map "
                        f"{cur.value(cl + 'max_buffer_utilization_percent'):.0f} % full")],
        ["uncleanable partitions", _num(cur.value(mgr + "uncleanable_partitions_count"))],
    ]  # fmt: skip
    return Section("Log cleaner", ["", "value"], rows,
                   None if cur.has(mgr + "max_dirty_percent") else "log.cleaner.enable=false")


def _clients(prev: Snapshot | None, cur: Snapshot) -> Section:
    time_rate = rates(prev, cur, "tidegate_client_requesttimems_total", "client_id")
    req_rate = rates(prev, cur, "tidegate_client_requests_total", "client_id")
    time_total = cur.values("tidegate_client_requesttimems_total", "client_id")
    req_total = cur.values("tidegate_client_requests_total", "client_id")
    order = sorted(time_total, key=lambda c: (-time_rate.get(c, 0.0), -time_total[c], c))
    rows = [
        [
            c if c else "(none)",
            _num(req_rate.get(c, 0.0)),
            _num(time_rate.get(c, 0.0)),
            _num(req_total.get(c, 0.0)),
            f"{time_total[c]:,.0f}",
        ]
        for c in order[:TOP_ROWS]
    ]
    return Section(
        "Top clients by request time",
        ["client id", "req/s", "req ms/s", "requests", "req ms"],
        rows,
        "request time: last byte in to response out, parked time (long-poll, acks=all) "
        "included; at most 1000 client ids, the rest as 'other'"
        if rows
        else "no client requests yet",
    )


THROTTLE_SUFFIX = "_throttle_time_ms"  # kafka_server_{produce,fetch,request}_throttle_time_ms
NO_THROTTLE = "nothing throttled: no client quotas configured or in use"


def _throttled(prev: Snapshot | None, cur: Snapshot) -> Section:
    """Quota counters by the sum of their average throttle times (produce + fetch + request).

    A counter is keyed by Kafka's quota metric tags, user and client-id, "" where the
    quota is not per that level (a user quota has client_id ""): both are shown.
    """
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for name, samples in cur.samples.items():
        if not name.endswith(THROTTLE_SUFFIX):
            continue
        for labels, value in samples:
            if "user" in labels or "client_id" in labels:
                totals[labels.get("user", ""), labels.get("client_id", "")] += value
    title = "Top clients by throttle time"
    if not totals:
        return Section(title, [], [], NO_THROTTLE)
    order = sorted(totals, key=lambda k: (-totals[k], k))[:TOP_ROWS]
    return Section(
        title,
        ["user", "client id", "avg throttle ms"],
        [[u or "-", c or "-", f"{totals[u, c]:,.0f}"] for u, c in order],
        "per quota counter (user, client-id; - where the quota is not per that level); "
        "average throttle time over the quota window, produce + fetch + request"
        if any(totals.values())
        else "quota counters in use, nothing throttled in the quota window",
    )


def _connections(cur: Snapshot) -> Section:
    conns = cur.values("kafka_server_socketservermetrics_connection_count", "listener")
    rows = [[listener, _num(n)] for listener, n in sorted(conns.items())]
    return Section("Connections", ["listener", "open"], rows, None if rows else "no listeners")


# --------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------
def render_plain(view: View) -> str:
    lines = [view.header]
    if view.limitation:
        lines.append(f"note: {view.limitation}")
    for s in view.sections:
        lines.append("")
        lines.append(f"== {s.title}")
        if s.rows:
            table = [s.columns, *s.rows]
            widths = [max(len(r[i]) for r in table) for i in range(len(s.columns))]
            for j, row in enumerate(table):
                cells = [
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(row, widths))
                ]
                lines.append("  ".join(cells).rstrip())
                if j == 0:
                    lines.append("  ".join("-" * w for w in widths))
        if s.note:
            lines.append(s.note)
    return "\n".join(lines) + "\n"


def render_rich(view: View):  # -> rich renderable
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list = [Text(view.header, style="bold")]
    if view.limitation:
        parts.append(Text(f"note: {view.limitation}", style="yellow"))
    for s in view.sections:
        table = Table(title=s.title, title_justify="left", expand=False, show_edge=False)
        if s.rows:
            for i, col in enumerate(s.columns):
                table.add_column(col, justify="left" if i == 0 else "right", no_wrap=i == 0)
            for row in s.rows:
                table.add_row(*row)
            parts.append(table)
            if s.note:
                parts.append(Text(s.note, style="dim"))
        else:
            parts.append(Text(f"{s.title}: {s.note or ''}", style="dim"))
    return Group(*parts)


# --------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------
def run_once(source, interval: float, out: Callable[[str], object]) -> None:
    first = source.sample()
    time.sleep(interval)
    second = source.sample()
    out(render_plain(build_view(first, second, source.description)))


def run_live(source, interval: float, console=None) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = console or Console()
    prev: Snapshot | None = None
    with Live(Text("connecting ..."), console=console, auto_refresh=False, screen=False) as live:
        while True:
            started = time.monotonic()
            try:
                cur = source.sample()
            except SourceError as exc:
                live.update(Text(f"tidegate top - {exc} (retrying)", style="red"), refresh=True)
                prev = None
            else:
                live.update(render_rich(build_view(prev, cur, source.description)), refresh=True)
                prev = cur
            time.sleep(max(interval - (time.monotonic() - started), 0.05))
