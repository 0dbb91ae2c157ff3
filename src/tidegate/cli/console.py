"""``tidegate console-producer`` and ``tidegate console-consumer``: Kafka's
kafka-console-producer.sh (ConsoleProducer with its LineMessageReader) and
kafka-console-consumer.sh (ConsoleConsumer with its DefaultMessageFormatter), reading
stdin and writing stdout so they pipe like kcat. The producer is tidegate's own; the
consumer reads through :mod:`tidegate.client.fetcher` (KIP-227 sessions) and, with
``--group``, is a group member (:mod:`tidegate.client.group_member`) on the classic
protocol, or on KIP-848's consumer protocol with ``--consumer-property group.protocol=consumer``."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

import click

from tidegate.cli.base import admin_options, main

if TYPE_CHECKING:
    from tidegate.client.fetcher import FetchPosition

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def _properties(items: Iterable[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{option} {item!r}: expected key=value")
        out[key.strip()] = value
    return out


def _client_settings(config_files: Iterable[str | None], properties: Mapping[str, str]) -> dict[str, str]:
    """Client properties from ``--command-config``/``--*.config`` files, then the
    ``--*-property`` ones (which win), as Kafka's tools merge them."""
    from tidegate.config import ConfigError, read_properties

    out: dict[str, str] = {}
    for path in config_files:
        if path:
            try:
                out.update(read_properties(path))
            except ConfigError as exc:
                raise click.UsageError(f"{path}: {exc}") from None
    out.update(properties)
    return out


# -- console-producer: Kafka's LineMessageReader -------------------------------------------
class LineReader:
    """Kafka's ``LineMessageReader``: one record per line; with ``parse.headers`` the
    headers (``k:v,k2:v2``) come first up to ``headers.delimiter``, with ``parse.key``
    the key up to ``key.separator``; ``null.marker`` makes a key, value or header value
    null. Raises ValueError with Kafka's message for a line it cannot split (unless
    ``ignore.error``)."""

    def __init__(self, props: Mapping[str, str]) -> None:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = props.get("null.marker")
        if self.null_marker is not None and self.null_marker in (
            self.key_separator, self.headers_delimiter, self.headers_separator, self.headers_key_separator
        ):  # fmt: skip
            raise click.UsageError("null.marker cannot be equal to any of the separators")

    def _null(self, text: str | None) -> bytes | None:
        if text is None or (self.null_marker is not None and text == self.null_marker):
            return None
        return text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one line (without its line break)."""
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, tail = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"No headers delimiter found on line number {number}: '{line}'")
            else:
                rest = tail
                for pair in head.split(self.headers_separator):
                    name, ksep, header_value = pair.partition(self.headers_key_separator)
                    if not ksep:
                        raise ValueError(f"No header key separator found in pair '{pair}' on line number {number}")
                    headers.append((name, self._null(header_value)))
        key: str | None = None
        value: str | None = rest
        if self.parse_key:
            k, sep, v = rest.partition(self.key_separator)
            if sep:
                key, value = k, v
            elif not self.ignore_error:
                raise ValueError(f"No key separator found on line number {number}: '{rest}'")
        return self._null(key), self._null(value), headers


@main.command("console-producer", context_settings={"max_content_width": 120})
@admin_options
@click.option("--topic", required=True, metavar="TOPIC", help="The topic to produce to.")
@click.option("--producer.config", "producer_config", metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="Producer properties (security.protocol, sasl.*, ssl.*, acks, ...).")
@click.option("--producer-property", "producer_properties", multiple=True, metavar="K=V",
              help="A producer property (repeatable); wins over the files.")
@click.option("--property", "reader_properties", multiple=True, metavar="K=V",
              help="A line reader property: parse.key, key.separator (tab), parse.headers, headers.delimiter "
              "(tab), headers.separator (,), headers.key.separator (:), null.marker, ignore.error.")
@click.option("--compression-codec", is_flag=False, flag_value="gzip", default=None,
              type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), help="Compression (alone: gzip).")
@click.option("--sync", is_flag=True, help="Send each record and wait for its acknowledgement.")
@click.option("--request-required-acks", default="-1", show_default=True, help="acks: -1 (all), 0 or 1.")
@click.option("--request-timeout-ms", type=int, default=1500, show_default=True, help="request.timeout.ms")
@click.option("--batch-size", type=int, default=16384, show_default=True, help="batch.size")
@click.option("--timeout", "linger_ms", type=int, default=1000, show_default=True, metavar="MS",
              help="linger.ms: how long a batch may wait for more records.")
@click.option("--max-block-ms", type=int, default=60000, show_default=True, help="max.block.ms")
@click.pass_context
def console_producer(
    ctx: click.Context, bootstrap_server: str, command_config: str | None, topic: str,
    producer_config: str | None, producer_properties: tuple[str, ...], reader_properties: tuple[str, ...],
    compression_codec: str | None, sync: bool, request_required_acks: str, request_timeout_ms: int,
    batch_size: int, linger_ms: int, max_block_ms: int,
) -> None:
    """Read records from standard input, one per line, and produce them to a topic, like
    Kafka's kafka-console-producer.sh.

    \b
      printf 'k1\\thello\\nk2\\tworld\\n' | tidegate console-producer --topic greetings \\
          --property parse.key=true
      tidegate console-producer --topic events --compression-codec zstd < events.txt
    """
    from tidegate.producer import Producer
    from tidegate.producer.config import ConfigError

    reader = LineReader(_properties(reader_properties, "--property"))
    settings = {
        "bootstrap.servers": bootstrap_server, "acks": request_required_acks,
        "request.timeout.ms": str(request_timeout_ms), "batch.size": str(batch_size),
        "linger.ms": str(linger_ms), "max.block.ms": str(max_block_ms), "client.id": "console-producer",
        "compression.type": compression_codec or "none",
    }  # fmt: skip
    settings.update(_client_settings([command_config, producer_config],
                                     _properties(producer_properties, "--producer-property")))  # fmt: skip
    try:
        producer = Producer(settings)
    except (ConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    failures: list[str] = []

    def on_delivery(_md: Any, exc: BaseException | None, key: bytes | None = None, size: int = 0) -> None:
        if exc is not None:
            failures.append(f"Error when sending message to topic {topic} with key: "
                            f"{'null' if key is None else f'{len(key)} bytes'}, value: {size} bytes with error: {exc}")

    stdin = sys.stdin.buffer
    progress = _progress("producing", stdin)
    sent = sent_bytes = 0
    try:
        for number, raw in enumerate(stdin, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
            try:
                key, value, headers = reader.parse(line, number)
            except ValueError as exc:
                click.echo(f"org.apache.kafka.common.KafkaException: {exc}", err=True)
                ctx.exit(1)
            size = len(value or b"")
            future = producer.send(topic, value, key=key, headers=headers or None,
                                   on_delivery=lambda md, exc, k=key, n=size: on_delivery(md, exc, k, n))  # fmt: skip
            if sync:
                with contextlib.suppress(Exception):  # reported through on_delivery
                    future.result()
            sent += 1
            sent_bytes += len(raw)
            if progress is not None:
                progress.update(sent, sent_bytes)
        producer.flush()
    finally:
        producer.close()
        if progress is not None:
            progress.stop()
    for failure in failures:
        click.echo(f"ERROR {failure}", err=True)
    if failures:
        ctx.exit(1)


class _Progress:
    """Records and bytes sent, on stderr (rich), while a large input is read."""

    def __init__(self, what: str, total: int | None) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                  TextColumn("{task.fields[records]} records"), TimeElapsedColumn(),
                                  transient=True, console=None)  # fmt: skip
        self._task = self._progress.add_task(what, total=total, records=0)
        self._progress.start()
        self._last = 0.0

    def update(self, records: int, done: int) -> None:
        now = time.monotonic()
        if now - self._last >= 0.1:
            self._last = now
            self._progress.update(self._task, completed=done, records=records)

    def stop(self) -> None:
        self._progress.stop()


def _progress(what: str, stdin: IO[bytes]) -> _Progress | None:
    """A progress display when a file (not a terminal) is piped in and stderr is a
    terminal; its size is the total when stdin is a regular file."""
    import os
    import stat

    if not sys.stderr.isatty():
        return None
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if os.isatty(fd):
        return None
    st = os.fstat(fd)
    return _Progress(what, st.st_size if stat.S_ISREG(st.st_mode) else None)


# -- console-consumer: Kafka's DefaultMessageFormatter -------------------------------------
class MessageFormatter:
    """Kafka's ``DefaultMessageFormatter``: per record, what the ``print.*`` properties
    ask for, in Kafka's order (timestamp, partition, offset, headers, key, value), each
    followed by ``key.separator`` or, after the last, ``line.separator``; null as
    ``null.literal``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        def flag(name: str, default: bool) -> bool:
            value = props.get(name)
            return default if value is None else value.strip().lower() == "true"

        self.print_timestamp = flag("print.timestamp", False)
        self.print_partition = flag("print.partition", False)
        self.print_offset = flag("print.offset", False)
        self.print_headers = flag("print.headers", False)
        self.print_key = flag("print.key", False)
        self.print_value = flag("print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def _bytes(self, value: bytes | None) -> bytes:
        return self.null_literal if value is None else value

    def format(self, partition: int, record: Any) -> bytes:
        out: list[bytes] = []
        columns = [
            (self.print_timestamp, lambda: (
                f"{_TIMESTAMP_TYPES[record.timestamp_type]}:{record.timestamp}".encode()
                if record.timestamp_type in _TIMESTAMP_TYPES and record.timestamp >= 0 else b"NO_TIMESTAMP")),
            (self.print_partition, lambda: b"Partition:%d" % partition),
            (self.print_offset, lambda: b"Offset:%d" % record.offset),
            (self.print_headers, lambda: self.headers_separator.join(
                name.encode() + b":" + self._bytes(value) for name, value in record.headers) or b"NO_HEADERS"),
            (self.print_key, lambda: self._bytes(record.key)),
            (self.print_value, lambda: self._bytes(record.value)),
        ]  # fmt: skip
        shown = [render for on, render in columns if on]
        for i, render in enumerate(shown):
            out.append(render())
            out.append(self.key_separator if i + 1 < len(shown) else self.line_separator)
        return b"".join(out)


def _parse_offset(text: str) -> int:
    if text == "earliest":
        return -2
    if text == "latest":
        return -1
    if text.isdigit():
        return int(text)
    raise click.UsageError("The provided offset value is incorrect. Valid values are 'earliest', 'latest', "
                           "or a non-negative long.")  # fmt: skip


@main.command("console-consumer", context_settings={"max_content_width": 120})
@admin_options
@click.option("--topic", metavar="TOPIC", help="The topic to consume.")
@click.option("--include", metavar="REGEX", help="Consume every topic whose whole name matches the regular expression.")
@click.option("--partition", type=int, metavar="N", help="Only this partition of --topic.")
@click.option("--offset", default=None, metavar="earliest|latest|N",
              help="With --partition: where to start (default latest).")
@click.option("--from-beginning", is_flag=True, help="Start from the earliest offset when there is no committed one.")
@click.option("--group", metavar="GROUP", help="Consume as a member of this consumer group (offsets committed).")
@click.option("--max-messages", type=int, metavar="N", help="Stop after N records.")
@click.option("--timeout-ms", type=int, metavar="MS", help="Stop when no record arrived for MS.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True, help="read_committed: only committed transactions.")
@click.option("--property", "formatter_properties", multiple=True, metavar="K=V",
              help="A formatter property: print.timestamp, print.partition, print.offset, print.headers, "
              "print.key, print.value, key.separator, line.separator, headers.separator, null.literal.")
@click.option("--consumer-property", "consumer_properties", multiple=True, metavar="K=V",
              help="A consumer property (auto.offset.reset, group.protocol, group.instance.id, "
              "group.remote.assignor, enable.auto.commit, security.protocol, sasl.*, ssl.*, client.id, ...).")
@click.option("--consumer.config", "consumer_config", metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="Consumer properties file.")
@click.option("--skip-message-on-error", is_flag=True, help="Accepted for Kafka's scripts (records are bytes).")
@click.pass_context
def console_consumer(
    ctx: click.Context, bootstrap_server: str, command_config: str | None, topic: str | None,
    include: str | None, partition: int | None, offset: str | None, from_beginning: bool, group: str | None,
    max_messages: int | None, timeout_ms: int | None, isolation_level: str,
    formatter_properties: tuple[str, ...], consumer_properties: tuple[str, ...], consumer_config: str | None,
    skip_message_on_error: bool,
) -> None:
    """Consume records and write them to standard output, like Kafka's
    kafka-console-consumer.sh.

    \b
      tidegate console-consumer --topic greetings --from-beginning \\
          --property print.key=true --property print.offset=true
      tidegate console-consumer --topic events --group audit --max-messages 100
      tidegate console-consumer --topic events --group audit --consumer-property group.protocol=consumer
      tidegate console-consumer --topic events --partition 0 --offset 42 --timeout-ms 5000
    """
    if (topic is None) == (include is None):
        raise click.UsageError("Exactly one of include/topic is required.")
    if partition is not None and topic is None:
        raise click.UsageError("The topic is required when partition is specified.")
    if offset is not None and partition is None:
        raise click.UsageError("The partition is required when offset is specified.")
    if group is not None and partition is not None:
        raise click.UsageError("Options group and partition cannot be specified together.")
    if from_beginning and offset is not None:
        raise click.UsageError("Options from-beginning and offset cannot be specified together.")
    start = _parse_offset(offset) if offset is not None else None
    formatter = MessageFormatter(_properties(formatter_properties, "--property"))
    settings = _client_settings([command_config, consumer_config],
                                _properties(consumer_properties, "--consumer-property"))  # fmt: skip
    reset = settings.pop("auto.offset.reset", "earliest" if from_beginning else "latest")
    if reset not in ("earliest", "latest", "none"):
        raise click.UsageError(f"Invalid value {reset} for configuration auto.offset.reset")
    out = sys.stdout.buffer
    from tidegate.client import KafkaError

    try:
        consumer = _ConsoleConsumer(bootstrap_server, settings, topic, include, partition, start, reset, group,
                                    1 if isolation_level == "read_committed" else 0)  # fmt: skip
    except KafkaError as exc:
        click.echo(f"ERROR {exc}", err=True)
        ctx.exit(1)
    count = 0
    failed = False
    try:
        for tp, record in consumer.records(timeout_ms):
            out.write(formatter.format(tp[1], record))
            count += 1
            if max_messages is not None and count >= max_messages:
                break
        out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # stdout closed (| head): stop quietly
        sys.stderr.close()
    except KafkaError as exc:
        click.echo(f"ERROR Error processing message, terminating consumer process: {exc}", err=True)
        failed = True
    finally:
        consumer.close()
        if not sys.stderr.closed:
            click.echo(f"Processed a total of {count} messages", err=True)
    if failed:
        ctx.exit(1)


class _ConsoleConsumer:
    """The poll loop: positions per partition, Fetch per leader (with a fetch session),
    heartbeats and auto-commits of the group member between fetches."""

    AUTO_COMMIT_INTERVAL_MS = 5_000  # Kafka's auto.commit.interval.ms default

    def __init__(
        self, bootstrap: str, settings: dict[str, str], topic: str | None, include: str | None,
        partition: int | None, start: int | None, reset: str, group: str | None, isolation_level: int,
    ) -> None:
        from tidegate.client import KafkaClient, SecurityConfigError
        from tidegate.client.group_member import group_member

        client_id = settings.pop("client.id", "console-consumer")
        self.auto_commit = settings.pop("enable.auto.commit", "true").strip().lower() != "false"
        interval = settings.pop("auto.commit.interval.ms", str(self.AUTO_COMMIT_INTERVAL_MS))
        if not interval.isdigit():
            raise click.UsageError(f"Invalid value {interval} for configuration auto.commit.interval.ms")
        self.auto_commit_interval_s = int(interval) / 1000
        max_age = settings.pop("metadata.max.age.ms", "300000")  # Kafka's default, 5 min
        if not max_age.isdigit():
            raise click.UsageError(f"Invalid value {max_age} for configuration metadata.max.age.ms")
        self.metadata_max_age_s = int(max_age) / 1000
        try:
            self.client = KafkaClient(bootstrap, client_id=client_id, security=settings or None)
        except SecurityConfigError as exc:
            raise click.UsageError(str(exc)) from None
        self.client.bootstrap()
        self._metadata_at = time.monotonic()
        self.reset = reset
        self.isolation_level = isolation_level
        self.positions: dict[tuple[str, int], FetchPosition] = {}
        self.sessions: dict[int, Any] = {}
        if include is not None:
            pattern = re.compile(include)
            cluster = self.client.metadata(None)
            topics = sorted(t for t in cluster.topics if pattern.fullmatch(t) and not t.startswith("__"))
        else:
            assert topic is not None
            topics = [topic]
        self.topics = topics
        try:
            self.member = group_member(self.client, group, topics, settings) if group is not None else None
        except ValueError as exc:
            self.client.close()
            raise click.UsageError(str(exc)) from None
        self._next_commit = 0.0
        if self.member is None:
            cluster = self.client.metadata(topics)
            if partition is not None:
                wanted = {(topics[0], partition): -1 if start is None else start}
            else:
                wanted = {(t, p): -2 if reset == "earliest" else -1
                          for t in topics for p in range(cluster.partition_count(t) or 0)}  # fmt: skip
            self._resolve(wanted)

    def _resolve(self, wanted: Mapping[tuple[str, int], int]) -> None:
        """Positions from specs: EARLIEST (-2) and LATEST (-1) through ListOffsets."""
        from tidegate.client.fetcher import FetchPosition, list_offsets

        specs = {tp: o for tp, o in wanted.items() if o < 0}
        offsets = {tp: o for tp, o in wanted.items() if o >= 0}
        if specs:
            offsets.update(list_offsets(self.client, specs, isolation_level=self.isolation_level))
        self.positions.update({tp: FetchPosition(o) for tp, o in offsets.items()})

    def offsets(self) -> dict[tuple[str, int], int]:
        """The position of every partition read (what the group commits)."""
        return {tp: p.offset for tp, p in self.positions.items()}

    # the group member's RebalanceListener
    def on_partitions_revoked(self, partitions: list[tuple[str, int]]) -> None:
        """Commit what was read of ``partitions`` (a commit after a rebalance may fail, as in
        Kafka) and stop fetching them."""
        assert self.member is not None
        gone = set(partitions)
        done = {tp: p.offset for tp, p in self.positions.items() if tp in gone}
        if done and self.auto_commit:
            with contextlib.suppress(Exception):
                self.member.commit(done)
        self.on_partitions_lost(partitions)

    def on_partitions_lost(self, partitions: list[tuple[str, int]]) -> None:
        for tp in partitions:
            self.positions.pop(tp, None)

    def on_partitions_assigned(self, partitions: list[tuple[str, int]]) -> None:
        """Start ``partitions`` from the group's committed offsets, else auto.offset.reset."""
        assert self.member is not None
        committed = self.member.committed(partitions)
        if self.reset == "none" and set(partitions) - set(committed):
            raise click.ClickException("No committed offset and auto.offset.reset=none")
        default = -2 if self.reset == "earliest" else -1
        self._resolve({tp: committed.get(tp, default) for tp in partitions})
        self._next_commit = time.monotonic() + self.auto_commit_interval_s

    def records(self, timeout_ms: int | None) -> Any:
        """(partition, record) in fetch order until ``timeout_ms`` passes without one."""
        last = time.monotonic()
        while True:
            member = self.member
            if member is not None:
                member.poll(self)
                if self.auto_commit and time.monotonic() >= self._next_commit:
                    member.commit(self.offsets())
                    self._next_commit = time.monotonic() + self.auto_commit_interval_s
            got = False
            for tp, record in self._fetch_once():
                got = True
                yield tp, record
            if got:
                last = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                return

    def _fetch_once(self) -> Any:
        """One Fetch per leader of the positions (validated first after a leader change,
        KIP-320), the records in fetch order. A leader that cannot be reached or that
        says the metadata is stale costs a metadata refresh and a backoff, as in Kafka's
        consumer, and so does ``metadata.max.age.ms`` passing; a partition whose
        position is out of range or was truncated starts again from auto.offset.reset."""
        from tidegate.client.fetcher import (
            CompletedFetch,
            FetchSessionHandler,
            fetch,
            is_retriable,
            refresh_metadata,
            validate_positions,
        )
        from tidegate.errors import KafkaError

        client = self.client
        try:
            truncated = validate_positions(client, self.positions, timeout_ms=client.request_timeout_ms)
        except KafkaError as exc:
            if not is_retriable(exc):
                raise
            truncated = {}
        for tp, err in truncated.items():
            click.echo(f"WARN {err}: resetting the position (auto.offset.reset={self.reset})", err=True)
            self._resolve({tp: -2 if self.reset == "earliest" else -1})
        by_node: dict[int, dict[tuple[str, int], int]] = {}
        stale = False
        for tp, pos in self.positions.items():
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                stale = True
                continue
            by_node.setdefault(leader, {})[tp] = pos.offset
        for node, positions in by_node.items():
            session = self.sessions.setdefault(node, FetchSessionHandler())
            try:
                answers = fetch(client, node, positions, max_wait_ms=500, isolation_level=self.isolation_level,
                                session=session)  # fmt: skip
            except KafkaError as exc:
                if not is_retriable(exc):
                    raise
                stale = True
                continue
            for tp, pf in answers.items():
                if tp not in self.positions:
                    continue
                if pf.error_code == 1:  # OFFSET_OUT_OF_RANGE: auto.offset.reset
                    self._resolve({tp: -2 if self.reset == "earliest" else -1})
                    continue
                if pf.error_code:
                    stale = True
                    continue
                done = CompletedFetch(pf.records, positions[tp], isolation_level=self.isolation_level,
                                      aborted_transactions=pf.aborted_transactions)  # fmt: skip
                pos = self.positions[tp]
                for batch in done.record_batches():
                    for record in batch:
                        pos.offset = record.offset + 1
                        yield tp, record
                pos.advance(done)
        if stale or not by_node:
            time.sleep(0.1)
        # leaders moved, or metadata.max.age.ms passed (leaders may move without an error
        # to say so)
        due = stale or not by_node or time.monotonic() - self._metadata_at >= self.metadata_max_age_s
        if due and refresh_metadata(client, self.topics, client.request_timeout_ms):
            self._metadata_at = time.monotonic()

    def close(self) -> None:
        try:
            if self.member is not None and self.member.member_id:
                if self.auto_commit:
                    with contextlib.suppress(Exception):  # closing: the offsets are committed if they can be
                        self.member.commit(self.offsets())
                with contextlib.suppress(Exception):
                    self.member.leave()
        finally:
            self.client.close()
