"""The broker keys: one ``broker(...)`` line per key tidegate accepts in
server.properties / ``--override``, with its type, default, validator,
importance and a one-line doc.

Adding a key is one ``broker(...)`` line in ``_TABLE`` (plus a row in
docs/configuration.md; a unit test checks the doc lists every key). Unknown
keys are rejected, so a key should only be added once the broker honours it.
A key that sets a topic's default also gets a ``topic(...)`` line in
:mod:`.topic`, naming this key as its synonym.

``mode=`` is Kafka's "dynamic update mode": a key Kafka lets IncrementalAlterConfigs
change at run time is ``CLUSTER_WIDE`` (the default broker resource ``""`` or this
node's id) here too, and the broker applies the change live
(:class:`~.broker.BrokerConfig` keeps the dynamic layers). As in Kafka's
``DynamicLogConfig``, every key that is the first synonym of a topic key is
cluster-wide (a unit test checks it). Kafka's per-broker listener and TLS keys stay
read-only in tidegate: it cannot rebind listeners or reload TLS material at run time.

The table is here rather than in :mod:`.broker` because the topic keys take
their type, validator and default from their broker synonyms, while
``BrokerConfig`` needs the topic keys: broker keys -> topic keys -> BrokerConfig,
as Kafka's ``ServerLogConfigs`` -> ``LogConfig`` -> ``KafkaConfig``.
``BROKER_CONFIG`` (the ConfigDef, whose unknown-key errors point at topic keys)
is built in :mod:`.broker`.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tidegate.config.definitions import (
    BOOLEAN,
    HIGH,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    LOW,
    MEDIUM,
    PASSWORD,
    STRING,
    Check,
    ConfigError,
    ConfigKey,
    ConfigType,
    Importance,
    OneOf,
    Range,
    UpdateMode,
    Validator,
    split_list,
    typed_default,
)
from tidegate.config.listeners import (
    check_listener_list,
    check_metrics_listener,
    check_protocol_map,
)
from tidegate.security.authorizer.principal import SslPrincipalMapper
from tidegate.security.authorizer.standard_authorizer import STANDARD_AUTHORIZER, parse_super_users
from tidegate.utils import INT32_MAX


# --------------------------------------------------------------------------------------
# custom checks
# --------------------------------------------------------------------------------------
def _check_single_log_dir(name: str, value: Any) -> None:
    # log.dirs is a list; log.dir is a string that Kafka also splits on commas
    dirs = value if isinstance(value, list) else split_list(value)
    if len(dirs) != 1 or not dirs[0]:
        raise ConfigError.invalid(
            name,
            value,
            "tidegate supports exactly one log directory"
            + (f", but {len(dirs)} were given" if len(dirs) > 1 else ""),
        )


def _check_per_ip_overrides(name: str, value: Any) -> None:
    # Kafka's getMap: host:count pairs, the counts non-negative integers
    for entry in (value or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError.invalid(
                name, value, f"Map entry '{entry}' is improperly formatted; expected host:count"
            )


def _check_single_node(name: str, value: Any) -> None:
    if value != 1:
        raise ConfigError.invalid(
            name,
            value,
            "tidegate is a single-node broker, so every partition has exactly one replica; "
            "only 1 is supported",
        )


_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


def _check_cluster_id(name: str, value: Any) -> None:
    if not _CLUSTER_ID_RE.fullmatch(value):
        raise ConfigError.invalid(
            name, value, "A cluster id is 1-255 letters, digits, '.', '_' or '-'"
        )


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's format (a random UUID, base64url, 22 chars),
    never starting with '-' (Kafka avoids those: they look like CLI flags)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cid.startswith("-"):
            return cid


# --------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------
def broker(
    name: str,
    type: ConfigType,
    default: Any,
    validator: Validator | None,
    importance: Importance,
    doc: str,
    *,
    mode: UpdateMode = UpdateMode.READ_ONLY,
) -> ConfigKey:
    """A broker-level key (one line of the table)."""
    return ConfigKey(
        name, type, default, validator, importance, doc,
        sensitive=type is ConfigType.PASSWORD, update_mode=mode,
    )  # fmt: skip


def _check_gzip_level(name: str, value: Any) -> None:
    # Kafka's CompressionType.GZIP.levelValidator: Deflater's 1..9, or -1 (its default, 6)
    if value > 9 or (value < 1 and value != -1):
        raise ConfigError.invalid(name, value, "Value must be between 1 and 9 or equal to -1")


#: Kafka's BrokerCompressionType names, in Kafka's order (the validator's message lists them)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
gzip_level = Check(_check_gzip_level, "[1,...,9] or -1")
lz4_level = Range.between(1, 17)
zstd_level = Range.between(-131072, 22)
compression_type = OneOf(COMPRESSION_TYPES)


_listeners = Check(check_listener_list, "NAME://host:port,...")
_UNSUPPORTED_MECHANISMS = {
    "GSSAPI": "GSSAPI (Kerberos) is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    "OAUTHBEARER": "OAUTHBEARER is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
}
_UNSUPPORTED_STORES = {
    t: f"{t} stores are not supported; convert to PEM (see docs/security.md)"
    for t in ("JKS", "PKCS12")
}
_log_dir = Check(_check_single_log_dir, "exactly one directory")


def _check_rebalance_protocols(name: str, value: Any) -> None:
    # Kafka's GroupCoordinatorConfig: a list of known protocols that includes classic
    for protocol in value:
        if protocol not in ("classic", "consumer", "share", "streams"):
            raise ConfigError.invalid(name, value, "String must be one of: classic, consumer, share, streams")
    if "classic" not in value:
        raise ConfigError.invalid(name, value, "The classic rebalance protocol must be enabled.")


def _check_consumer_assignors(name: str, value: Any) -> None:
    if not value:
        raise ConfigError.invalid(name, value, "At least one assignor must be given.")
    if len(set(value)) != len(value):
        raise ConfigError.invalid(name, value, "Values must not be duplicated.")
    for assignor in value:
        if assignor not in ("uniform", "range"):
            raise ConfigError.invalid(name, value, f"Unknown assignor {assignor}: uniform and range exist.")


def _check_migration_policy(name: str, value: Any) -> None:
    if value.lower() not in ("disabled", "downgrade", "upgrade", "bidirectional"):
        raise ConfigError.invalid(
            name, value, "String must be one of (case insensitive): disabled, downgrade, upgrade, bidirectional"
        )


def _check_share_assignors(name: str, value: Any) -> None:
    # Kafka's GroupCoordinatorConfig: share groups take exactly one assignor
    if value != ["simple"]:
        raise ConfigError.invalid(name, value, "exactly one assignor, simple, must be given")


_rebalance_protocols = Check(_check_rebalance_protocols, "[classic, consumer, share, streams], with classic")
_consumer_assignors = Check(_check_consumer_assignors, "[uniform, range], no duplicates")
_migration_policy = Check(_check_migration_policy, "[disabled, downgrade, upgrade, bidirectional]")
_share_assignors = Check(_check_share_assignors, "[simple]")


def _check_process_roles(name: str, value: Any) -> None:
    for role in value or ():
        if role not in ("broker", "controller"):
            raise ConfigError.invalid(name, value, f"Unknown process role '{role}' (only 'broker' and 'controller' are allowed roles)")


_process_roles = Check(_check_process_roles, "[broker, controller]")


def _check_authorizer(name: str, value: Any) -> None:
    if value not in ("", STANDARD_AUTHORIZER):
        raise ConfigError.invalid(name, value, f"the only authorizer is {STANDARD_AUTHORIZER}")


def _check_super_users(name: str, value: Any) -> None:
    try:
        parse_super_users(value)
    except ValueError as exc:
        raise ConfigError.invalid(name, value, str(exc)) from None


def _check_principal_rules(name: str, value: Any) -> None:
    try:
        SslPrincipalMapper(value)
    except ValueError as exc:
        raise ConfigError.invalid(name, value, str(exc)) from None


_authorizer_class = Check(_check_authorizer, f"empty or {STANDARD_AUTHORIZER}")
_super_users = Check(_check_super_users, "User:name;User:name2")
_principal_rules = Check(_check_principal_rules, "RULE:pattern/replacement/[LU],...,DEFAULT")
CLUSTER = UpdateMode.CLUSTER_WIDE
#: replication factors: also the validator of the topic key min.insync.replicas
single_node = Check(_check_single_node, "[1]")

# fmt: off
_TABLE: tuple[ConfigKey, ...] = (
    broker("listeners", LIST, "PLAINTEXT://127.0.0.1:9092", _listeners, HIGH,
           "Comma-separated NAME://host:port endpoints to bind; an empty host binds all "
           "interfaces, port 0 an ephemeral port."),
    broker("advertised.listeners", LIST, None, _listeners, HIGH,
           "Endpoints given to clients in metadata, named like listeners; if unset, the "
           "listeners themselves (an empty host is advertised as this machine's hostname)."),
    broker("listener.security.protocol.map", LIST,
           "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
           Check(check_protocol_map, "NAME:PROTOCOL,..."), LOW,
           "Maps listener names to security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, "
           "SASL_SSL). See docs/security.md."),
    broker("log.dirs", LIST, None, _log_dir, HIGH,
           "The directory holding the log data; overrides log.dir. tidegate supports "
           "exactly one directory."),
    broker("log.dir", STRING, "./tidegate-data", _log_dir, HIGH,
           "The log data directory, used when log.dirs is not set."),
    broker("node.id", INT, 1, Range.at_least(0), HIGH,
           "The id of this broker, as reported to clients in metadata."),
    # Kafka's KRaft and thread-pool keys, as its stock config/server.properties sets them:
    # accepted so that file starts tidegate unchanged; one node is its own controller
    broker("process.roles", LIST, "", _process_roles, HIGH,
           "Kafka's KRaft roles (broker, controller). Accepted only: a tidegate node is the "
           "broker and the controller of its one-node cluster."),
    broker("controller.listener.names", LIST, None, None, HIGH,
           "Listeners of Kafka's KRaft controller quorum: tidegate has none, so listeners "
           "named here are neither bound nor advertised (one INFO line says so)."),
    broker("controller.quorum.voters", LIST, "", None, HIGH,
           "Kafka's static controller quorum (id@host:port,...). Accepted only."),
    broker("controller.quorum.bootstrap.servers", LIST, "", None, HIGH,
           "Kafka's dynamic controller quorum (host:port,...). Accepted only."),
    broker("metadata.log.dir", STRING, None, None, HIGH,
           "Kafka's KRaft metadata log directory. Accepted only: tidegate keeps its metadata "
           "in the log directory."),
    broker("inter.broker.listener.name", STRING, None, None, MEDIUM,
           "The listener brokers use among themselves; it must name a listener. Accepted "
           "only: one node has no other broker to talk to."),
    broker("num.network.threads", INT, 3, Range.at_least(1), HIGH,
           "Kafka's network threads. Accepted only: one event loop moves every byte."),
    broker("num.io.threads", INT, 8, Range.at_least(1), HIGH,
           "Kafka's request handler threads. Accepted only: requests are handled on the event "
           "loop, file work on its worker threads."),
    broker("num.recovery.threads.per.data.dir", INT, 2, Range.at_least(1), HIGH,
           "Kafka's log recovery threads per directory. Accepted only."),
    broker("background.threads", INT, 10, Range.at_least(1), HIGH,
           "Kafka's background task threads. Accepted only."),
    broker("num.replica.fetchers", INT, 1, Range.at_least(1), HIGH,
           "Kafka's replica fetcher threads. Accepted only: one node has no followers."),
    broker("offsets.topic.replication.factor", INT, 3, Range.at_least(1), HIGH,
           "Kafka's replication factor of __consumer_offsets; one node stores one copy "
           "whatever this says (accepted for compatibility)."),
    broker("delete.topic.enable", BOOLEAN, True, None, HIGH,
           "Whether DeleteTopics deletes; false answers TOPIC_DELETION_DISABLED (INVALID_REQUEST "
           "below DeleteTopics v3), as Kafka."),
    broker("cluster.id", STRING, None, Check(_check_cluster_id, "[A-Za-z0-9._-]{1,255}"), MEDIUM,
           "The cluster id; if unset, one is generated and kept in meta.properties in the "
           "log directory."),
    broker("num.partitions", INT, 1, Range.at_least(1), MEDIUM,
           "The default number of partitions for new topics."),
    broker("default.replication.factor", INT, 1, single_node, MEDIUM,
           "The default replication factor for new topics; a single node supports only 1."),
    broker("auto.create.topics.enable", BOOLEAN, True, None, HIGH,
           "Create a topic when a client asks for metadata of a topic that does not exist."),
    broker("log.segment.bytes", INT, 1073741824, Range.at_least(14), HIGH,
           "The maximum size of a single log segment file.",
           mode=CLUSTER),
    broker("log.roll.ms", LONG, None, Range.at_least(1), HIGH,
           "Roll a new segment after this many ms; if unset, log.roll.hours is used.",
           mode=CLUSTER),
    broker("log.roll.hours", INT, 168, Range.at_least(1), HIGH,
           "Roll a new segment after this many hours; secondary to log.roll.ms."),
    broker("log.retention.ms", LONG, None, Range.at_least(-1), HIGH,
           "Delete segments older than this many ms (-1: no time limit); if unset, "
           "log.retention.minutes is used.",
           mode=CLUSTER),
    broker("log.retention.minutes", INT, None, None, HIGH,
           "Retention in minutes, used if log.retention.ms is unset; if unset too, "
           "log.retention.hours is used."),
    broker("log.retention.hours", INT, 168, None, HIGH,
           "Retention in hours; tertiary to log.retention.ms and log.retention.minutes."),
    broker("log.retention.bytes", LONG, -1, None, HIGH,
           "Delete old segments while a partition is larger than this (-1: no size limit).",
           mode=CLUSTER),
    broker("log.retention.check.interval.ms", LONG, 300000, Range.at_least(1), MEDIUM,
           "How often, in ms, the log checks for segments eligible for deletion."),
    broker("log.flush.interval.messages", LONG, LONG_MAX, Range.at_least(1), HIGH,
           "fsync a partition after this many messages have been appended to it.",
           mode=CLUSTER),
    broker("log.flush.interval.ms", LONG, None, Range.at_least(0), HIGH,
           "fsync a partition when its oldest unflushed message is this old (ms); if "
           "unset, log.flush.scheduler.interval.ms is used.",
           mode=CLUSTER),
    broker("log.flush.scheduler.interval.ms", LONG, LONG_MAX, Range.at_least(1), HIGH,
           "How often, in ms, the flusher checks whether any log needs flushing."),
    broker("log.flush.offset.checkpoint.interval.ms", INT, 60000, Range.at_least(0), HIGH,
           "How often, in ms, each partition's recovery point is checkpointed to disk."),
    broker("log.index.interval.bytes", INT, 4096, Range.at_least(0), MEDIUM,
           "Add an entry to the offset index every this many bytes of log.",
           mode=CLUSTER),
    broker("log.roll.jitter.ms", LONG, None, None, HIGH,
           "The most random jitter subtracted from a segment's roll time (ms); if unset, "
           "log.roll.jitter.hours is used. Accepted only: tidegate rolls without jitter.",
           mode=CLUSTER),
    broker("log.roll.jitter.hours", INT, 0, Range.at_least(0), HIGH,
           "The roll jitter in hours, used if log.roll.jitter.ms is unset. Accepted only."),
    broker("log.index.size.max.bytes", INT, 10485760, Range.at_least(4), MEDIUM,
           "The largest offset index of a segment, in bytes. Accepted only: tidegate's "
           "indexes grow with their segment.",
           mode=CLUSTER),
    broker("log.cleanup.policy", LIST, ["delete"],
           OneOf(("compact", "delete"), allow_empty=True), MEDIUM,
           "The default cleanup policy: delete (retention), compact (the log cleaner), "
           "both, or empty (neither: the log is kept forever and never compacted).",
           mode=CLUSTER),
    broker("log.cleaner.enable", BOOLEAN, True, None, MEDIUM,
           "Run the log cleaner (compacted topics are not compacted without it)."),
    broker("log.cleaner.threads", INT, 1, Range.at_least(0), MEDIUM,
           "Log cleaner threads. tidegate runs one cleaner; accepted for compatibility.",
           mode=CLUSTER),
    broker("log.cleaner.dedupe.buffer.size", LONG, 134217728, None, MEDIUM,
           "Memory for the cleaner's offset map (24 bytes per key, as Kafka's).",
           mode=CLUSTER),
    broker("log.cleaner.io.buffer.size", INT, 524288, Range.at_least(0), MEDIUM,
           "The cleaner's read plus write buffer.",
           mode=CLUSTER),
    broker("log.cleaner.io.buffer.load.factor", ConfigType.DOUBLE, 0.9, None, MEDIUM,
           "How full the cleaner's offset map may get.",
           mode=CLUSTER),
    broker("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, 1.7976931348623157e308,
           None, MEDIUM, "Throttle on the cleaner's reads plus writes, in bytes per second "
           "(Kafka's Throttler: checked every 300 ms, the excess slept off).",
           mode=CLUSTER),
    broker("log.cleaner.execution", STRING, "process", OneOf(("process", "thread")), MEDIUM,
           "tidegate only: where a clean's reading and rewriting runs: process (a worker "
           "process, so the clean's Python work does not take the event loop's GIL) or "
           "thread (a worker thread of the broker). The swap is always on the broker."),
    broker("log.cleaner.backoff.ms", LONG, 15000, Range.at_least(0), MEDIUM,
           "How long the cleaner sleeps when no log needs cleaning.",
           mode=CLUSTER),
    broker("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, 0.5, Range.between(0, 1),
           MEDIUM, "Clean a log once this share of it is dirty.",
           mode=CLUSTER),
    broker("log.cleaner.delete.retention.ms", LONG, 86400000, Range.at_least(0), MEDIUM,
           "How long tombstones and removable transaction markers stay after a clean.",
           mode=CLUSTER),
    broker("log.cleaner.min.compaction.lag.ms", LONG, 0, Range.at_least(0), MEDIUM,
           "Records younger than this stay uncompacted.",
           mode=CLUSTER),
    broker("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, Range.at_least(1), MEDIUM,
           "A dirty record older than this makes its log eligible whatever the ratio.",
           mode=CLUSTER),
    broker("log.segment.delete.delay.ms", LONG, 60000, Range.at_least(0), HIGH,
           "How long a deleted segment's files are kept before removal. Accepted only: "
           "tidegate removes them at once.",
           mode=CLUSTER),
    broker("log.preallocate", BOOLEAN, False, None, MEDIUM,
           "Preallocate new segment files. Accepted only: tidegate never preallocates.",
           mode=CLUSTER),
    broker("log.message.timestamp.before.max.ms", LONG, LONG_MAX, Range.at_least(0), MEDIUM,
           "With CreateTime, a record more than this many ms older than the broker's clock "
           "is refused (INVALID_TIMESTAMP).",
           mode=CLUSTER),
    broker("log.message.timestamp.after.max.ms", LONG, 3600000, Range.at_least(0), MEDIUM,
           "With CreateTime, a record more than this many ms ahead of the broker's clock is "
           "refused (INVALID_TIMESTAMP). Kafka 4.0's default: one hour.",
           mode=CLUSTER),
    broker("log.message.downconversion.enable", BOOLEAN, True, None, LOW,
           "Deprecated and without effect in Kafka 4.0, which never converts message formats.",
           mode=CLUSTER),
    broker("log.local.retention.ms", LONG, -2, Range.at_least(-2), MEDIUM,
           "Tiered storage's local retention (-2: retention.ms). Accepted only: tidegate has no "
           "tiered storage.",
           mode=CLUSTER),
    broker("log.local.retention.bytes", LONG, -2, Range.at_least(-2), MEDIUM,
           "Tiered storage's local retention bytes (-2: retention.bytes). Accepted only.",
           mode=CLUSTER),
    broker("compression.type", STRING, "producer", compression_type, HIGH,
           "The codec batches are stored with: producer (as sent) or uncompressed, gzip, "
           "snappy, lz4, zstd (batches in another codec are recompressed on append).",
           mode=CLUSTER),
    broker("compression.gzip.level", INT, -1, gzip_level, MEDIUM,
           "The gzip level when the broker compresses (-1: gzip's default, 6).",
           mode=CLUSTER),
    broker("compression.lz4.level", INT, 9, lz4_level, MEDIUM,
           "The lz4 level when the broker compresses (9: lz4's fast compressor, else LZ4 HC).",
           mode=CLUSTER),
    broker("compression.zstd.level", INT, 3, zstd_level, MEDIUM,
           "The zstd level when the broker compresses.",
           mode=CLUSTER),
    broker("min.insync.replicas", INT, 1, Range.at_least(1), HIGH,
           "acks=all produces need this many in-sync replicas; a single node has one, so "
           "more makes them fail with NOT_ENOUGH_REPLICAS, as in Kafka.",
           mode=CLUSTER),
    broker("unclean.leader.election.enable", BOOLEAN, False, None, HIGH,
           "Accepted only: a single node never elects another leader.",
           mode=CLUSTER),
    broker("log.message.timestamp.type", STRING, "CreateTime",
           OneOf(("CreateTime", "LogAppendTime")), MEDIUM,
           "Record timestamps as sent by the producer (CreateTime) or as the append "
           "time (LogAppendTime).",
           mode=CLUSTER),
    broker("socket.request.max.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The largest request the broker reads; larger requests close the connection."),
    broker("socket.send.buffer.bytes", INT, 102400, Range.at_least(-1), HIGH,
           "SO_SNDBUF of accepted connections; -1: the OS default (autotuned)."),
    broker("socket.receive.buffer.bytes", INT, 102400, Range.at_least(-1), HIGH,
           "SO_RCVBUF of accepted connections; -1: the OS default (autotuned). Bounds the "
           "kernel memory a connection muted for memory (KIP-72) can hold."),
    broker("max.incremental.fetch.session.cache.slots", INT, 1000, Range.at_least(0), MEDIUM,
           "The most incremental fetch sessions (KIP-227) the broker keeps; 0 answers every "
           "Fetch sessionless."),
    broker("fetch.purgatory.purge.interval.requests", INT, 1000, Range.at_least(1), MEDIUM,
           "Purge completed operations from the fetch purgatory's watcher lists when the "
           "estimated number of completed-but-watched fetches exceeds this."),
    broker("producer.purgatory.purge.interval.requests", INT, 1000, Range.at_least(1), MEDIUM,
           "The same for the produce purgatory (acks=all produces waiting for their fsync)."),
    broker("producer.id.expiration.ms", INT, 86400000, Range.at_least(1), LOW,
           "How long a partition keeps an idle producer id's state (epoch, last sequences) "
           "after that producer's last batch; a retry arriving later is not deduplicated.",
           mode=CLUSTER),
    broker("producer.id.expiration.check.interval.ms", INT, 600000, Range.at_least(1), LOW,
           "How often to remove producer ids idle for producer.id.expiration.ms."),
    broker("queued.max.request.bytes", LONG, None, None, MEDIUM,
           "KIP-72: bytes of request bodies the broker holds at once; <= 0 disables the bound. "
           "Unset: max(268435456, socket.request.max.bytes), so a broker is bounded out of the box. "
           "Otherwise must be >= socket.request.max.bytes."),
    # ---- connection limits (docs/security.md, KIP-306/402/612) -----------------------------
    broker("max.connections", INT, INT32_MAX, Range.at_least(0), MEDIUM,
           "The most connections the broker holds; at the limit new connections wait "
           "(unread) until one closes. Per listener: listener.name.<l>.max.connections.",
           mode=CLUSTER),
    broker("max.connections.per.ip", INT, INT32_MAX, Range.at_least(0), MEDIUM,
           "The most connections from one IP address; more are closed at once.",
           mode=CLUSTER),
    broker("max.connections.per.ip.overrides", STRING, "",
           Check(_check_per_ip_overrides, "host:count,..."), MEDIUM,
           "Per-IP or hostname limits overriding max.connections.per.ip: host:count,...",
           mode=CLUSTER),
    broker("max.connection.creation.rate", INT, INT32_MAX, Range.at_least(0), MEDIUM,
           "KIP-612: the most new connections per second the broker accepts; over it, "
           "accepting is delayed. Per listener: listener.name.<l>.max.connection.creation.rate.",
           mode=CLUSTER),
    broker("connections.max.idle.ms", LONG, 600000, None, MEDIUM,
           "Close connections idle (nothing read or written) for this long; -1: never. Also "
           "bounds a SASL connection that never authenticates."),
    broker("queued.max.requests", INT, 500, Range.at_least(1), HIGH,
           "The number of received requests the broker holds at once before it stops reading."),
    broker("message.max.bytes", INT, 1048588, Range.at_least(0), HIGH,
           "The largest record batch (after compression) the broker accepts.",
           mode=CLUSTER),
    # ---- client quotas (docs/quotas.md) ---------------------------------------------------
    broker("quota.window.num", INT, 11, Range.at_least(1), LOW,
           "The number of samples kept in memory for client quotas (each quota's Rate is "
           "measured over this many windows)."),
    broker("quota.window.size.seconds", INT, 1, Range.at_least(1), LOW,
           "The time span of each sample for client quotas; also the cap on one "
           "request_percentage throttle."),
    broker("metrics.listener", STRING, None, Check(check_metrics_listener, "http://host:port"),
           MEDIUM,
           "Serve Prometheus metrics at http://host:port/metrics (port 0: ephemeral); unset "
           "or empty: no metrics endpoint and no per-request accounting. See docs/metrics.md."),
    # ---- security (docs/security.md) -----------------------------------------------------
    broker("sasl.enabled.mechanisms", LIST, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
           OneOf(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), _UNSUPPORTED_MECHANISMS), MEDIUM,
           "SASL mechanisms offered on SASL_PLAINTEXT and SASL_SSL listeners (Kafka's default, "
           "GSSAPI, is not supported). Overridable per listener."),
    broker("sasl.credentials.file", STRING, None, None, MEDIUM,
           "tidegate only: a JSON file of users: PLAIN passwords and SCRAM credentials (from a "
           "password, or pre-salted). See docs/security.md for the format."),
    broker("sasl.server.max.receive.size", INT, 524288, Range.at_least(1), LOW,
           "The largest request accepted before a SASL connection is authenticated; larger "
           "closes the connection."),
    broker("ssl.keystore.type", STRING, "PEM", OneOf(("PEM",), _UNSUPPORTED_STORES), MEDIUM,
           "Key store format; only PEM. Overridable per listener."),
    broker("ssl.keystore.location", STRING, None, None, HIGH,
           "PEM file with the server's private key and certificate chain (SSL, SASL_SSL). "
           "Overridable per listener."),
    broker("ssl.keystore.certificate.chain", PASSWORD, None, None, HIGH,
           "The server's certificate chain as PEM text (instead of ssl.keystore.location; with "
           "ssl.keystore.key)."),
    broker("ssl.keystore.key", PASSWORD, None, None, HIGH,
           "The server's private key as PEM text (with ssl.keystore.certificate.chain)."),
    broker("ssl.key.password", PASSWORD, None, None, HIGH,
           "Password of an encrypted private key."),
    broker("ssl.truststore.type", STRING, "PEM", OneOf(("PEM",), _UNSUPPORTED_STORES), MEDIUM,
           "Trust store format; only PEM."),
    broker("ssl.truststore.location", STRING, None, None, HIGH,
           "PEM file of CA certificates that client certificates are checked against."),
    broker("ssl.truststore.certificates", PASSWORD, None, None, HIGH,
           "CA certificates as PEM text (instead of ssl.truststore.location)."),
    broker("ssl.client.auth", STRING, "none", OneOf(("none", "requested", "required")), MEDIUM,
           "Client certificates on SSL/SASL_SSL listeners: none, requested (checked if sent) or "
           "required. On SSL listeners a client certificate's subject DN is the principal."),
    broker("ssl.principal.mapping.rules", STRING, "DEFAULT", _principal_rules, LOW,
           "Rules that map a TLS client certificate's subject DN to a principal name "
           "(RULE:pattern/replacement/[LU], ..., DEFAULT: the DN itself), as Kafka's."),
    # ---- authorization (docs/security.md) ------------------------------------------------
    broker("authorizer.class.name", STRING, "", _authorizer_class, HIGH,
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns on ACLs; empty: no "
           "authorization (every client may do everything)."),
    broker("super.users", STRING, None, _super_users, MEDIUM,
           "Principals allowed everything, separated by ';' (User:admin;User:ops)."),
    broker("allow.everyone.if.no.acl.found", BOOLEAN, False, None, MEDIUM,
           "With an authorizer: allow an operation on a resource that has no ACL at all."),
    # ---- consumer groups (docs/groups.md) ------------------------------------------------
    broker("group.initial.rebalance.delay.ms", INT, 3000, Range.at_least(0), MEDIUM,
           "How long the first rebalance of an empty group waits for more members to join "
           "(again after each join, up to the rebalance timeout)."),
    broker("group.min.session.timeout.ms", INT, 6000, Range.at_least(0), MEDIUM,
           "The smallest session timeout a member may ask for (INVALID_SESSION_TIMEOUT below)."),
    broker("group.max.session.timeout.ms", INT, 1800000, Range.at_least(0), MEDIUM,
           "The largest session timeout a member may ask for (INVALID_SESSION_TIMEOUT above)."),
    broker("group.max.size", INT, INT32_MAX, Range.at_least(1), MEDIUM,
           "The most members a group may have (GROUP_MAX_SIZE_REACHED beyond)."),
    # ---- the consumer group protocol (KIP-848; docs/groups.md) ---------------------------
    broker("group.coordinator.rebalance.protocols", LIST, "classic,consumer", _rebalance_protocols, MEDIUM,
           "The group protocols the coordinator speaks: classic (JoinGroup/SyncGroup) and "
           "consumer (KIP-848's ConsumerGroupHeartbeat; without it that API answers "
           "UNSUPPORTED_VERSION). Must include classic."),
    broker("group.consumer.session.timeout.ms", INT, 45000, Range.at_least(1), MEDIUM,
           "A consumer-protocol member is fenced after this long without a heartbeat."),
    broker("group.consumer.min.session.timeout.ms", INT, 45000, Range.at_least(1), MEDIUM,
           "The smallest consumer.session.timeout.ms a group config may set."),
    broker("group.consumer.max.session.timeout.ms", INT, 60000, Range.at_least(1), MEDIUM,
           "The largest consumer.session.timeout.ms a group config may set."),
    broker("group.consumer.heartbeat.interval.ms", INT, 5000, Range.at_least(1), MEDIUM,
           "How often a consumer-protocol member is told to heartbeat."),
    broker("group.consumer.min.heartbeat.interval.ms", INT, 5000, Range.at_least(1), MEDIUM,
           "The smallest consumer.heartbeat.interval.ms a group config may set."),
    broker("group.consumer.max.heartbeat.interval.ms", INT, 15000, Range.at_least(1), MEDIUM,
           "The largest consumer.heartbeat.interval.ms a group config may set."),
    broker("group.consumer.max.size", INT, INT32_MAX, Range.at_least(1), MEDIUM,
           "The most members a consumer group may have (GROUP_MAX_SIZE_REACHED beyond)."),
    broker("group.consumer.assignors", LIST, "uniform,range", _consumer_assignors, MEDIUM,
           "The server-side assignors a member may name (group.remote.assignor; "
           "UNSUPPORTED_ASSIGNOR otherwise); the first is the default."),
    broker("group.consumer.migration.policy", STRING, "bidirectional", _migration_policy, MEDIUM,
           "Kafka's online migration between the classic and consumer protocols "
           "(disabled, downgrade, upgrade, bidirectional): a classic group with members is "
           "upgraded when a consumer-protocol member joins, a consumer group downgraded when "
           "its last consumer-protocol member leaves (docs/groups.md)."),
    broker("group.consumer.regex.refresh.interval.ms", INT, 600000, Range.at_least(10000), LOW,
           "How often a consumer group's regular expressions are resolved again when no "
           "topic changed (Kafka's internal key)."),
    # ---- share groups (KIP-932; docs/share-groups.md) -------------------------------------
    broker("group.share.enable", BOOLEAN, True, None, LOW,
           "Share groups on (Kafka's internal key; a 4.2 cluster enables them with the "
           "share.version feature). Off: every share group API answers UNSUPPORTED_VERSION."),
    broker("group.share.session.timeout.ms", INT, 45000, Range.at_least(1), MEDIUM,
           "How long a share group member may go without a heartbeat before it is removed."),
    broker("group.share.min.session.timeout.ms", INT, 45000, Range.at_least(1), MEDIUM,
           "The smallest share.session.timeout.ms a group config may set."),
    broker("group.share.max.session.timeout.ms", INT, 60000, Range.at_least(1), MEDIUM,
           "The largest share.session.timeout.ms a group config may set."),
    broker("group.share.heartbeat.interval.ms", INT, 5000, Range.at_least(1), MEDIUM,
           "How often a share group member is told to heartbeat."),
    broker("group.share.min.heartbeat.interval.ms", INT, 5000, Range.at_least(1), MEDIUM,
           "The smallest share.heartbeat.interval.ms a group config may set."),
    broker("group.share.max.heartbeat.interval.ms", INT, 15000, Range.at_least(1), MEDIUM,
           "The largest share.heartbeat.interval.ms a group config may set."),
    broker("group.share.max.size", INT, 200, Range.between(1, 1000), MEDIUM,
           "The most members a share group may have (GROUP_MAX_SIZE_REACHED beyond)."),
    broker("group.share.assignors", LIST, "simple", _share_assignors, MEDIUM,
           "The share group assignor (exactly one: simple)."),
    broker("group.share.record.lock.duration.ms", INT, 30000, Range.between(1000, 3600000), MEDIUM,
           "How long a share group member holds an acquired record before it is released "
           "for redelivery (a group's share.record.lock.duration.ms overrides it)."),
    broker("group.share.min.record.lock.duration.ms", INT, 15000, Range.between(1000, 30000), MEDIUM,
           "The smallest record lock duration (of the broker or a group config)."),
    broker("group.share.max.record.lock.duration.ms", INT, 60000, Range.between(30000, 3600000), MEDIUM,
           "The largest record lock duration (of the broker or a group config)."),
    broker("group.share.delivery.count.limit", INT, 5, Range.between(2, 10), MEDIUM,
           "How many times a record is delivered at most: a release at the limit archives it."),
    broker("group.share.partition.max.record.locks", INT, 2000, Range.between(100, 10000), MEDIUM,
           "The most in-flight records of one share-partition (between its start and end offsets)."),
    broker("group.share.max.share.sessions", INT, 2000, Range.at_least(1), MEDIUM,
           "The most share sessions the broker keeps (SHARE_SESSION_LIMIT_REACHED beyond); at "
           "least group.share.max.size."),
    broker("group.share.initialize.retry.interval.ms", INT, 30000, Range.at_least(1), LOW,
           "How long a share-partition's initialization may take before a heartbeat tries "
           "again (Kafka's internal key)."),
    broker("share.fetch.purgatory.purge.interval.requests", INT, 1000, Range.at_least(1), MEDIUM,
           "How many share fetches may park before the share fetch purgatory drops completed ones."),
    broker("offsets.retention.minutes", INT, 10080, Range.at_least(1), HIGH,
           "Committed offsets of a group are deleted this long after the group became empty "
           "(or, for standalone consumers, after the commit)."),
    broker("offsets.retention.check.interval.ms", LONG, 600000, Range.at_least(1), HIGH,
           "How often committed offsets are checked for expiry."),
    broker("offset.metadata.max.bytes", INT, 4096, Range.at_least(0), HIGH,
           "The largest metadata string an offset commit may carry (OFFSET_METADATA_TOO_LARGE)."),
    broker("offsets.commit.timeout.ms", INT, 5000, Range.at_least(1), HIGH,
           "An offset commit waits at most this long for its record to be fsynced "
           "(REQUEST_TIMED_OUT after)."),
    broker("offsets.topic.segment.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The segment size of the internal __consumer_offsets topic."),
    # -- the transaction coordinator (docs/transactions.md) --
    broker("transaction.max.timeout.ms", INT, 900000, Range.at_least(1), HIGH,
           "The largest transaction.timeout.ms a producer may ask for; a larger one is refused "
           "with INVALID_TRANSACTION_TIMEOUT."),
    broker("transactional.id.expiration.ms", INT, 604800000, Range.at_least(1), HIGH,
           "How long a transactional id with no transaction in progress is kept after its last "
           "update before the coordinator forgets it."),
    broker("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000,
           Range.at_least(1), LOW,
           "How often the coordinator aborts transactions open longer than their timeout."),
    broker("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000,
           Range.at_least(1), LOW,
           "How often the coordinator removes transactional ids past transactional.id.expiration.ms."),
    broker("transaction.state.log.num.partitions", INT, 50, Range.at_least(1), HIGH,
           "The number of partitions of the internal __transaction_state topic."),
    broker("transaction.state.log.segment.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The segment size of the internal __transaction_state topic."),
    broker("transaction.state.log.replication.factor", INT, 3, Range.at_least(1), HIGH,
           "Kafka's replication factor of __transaction_state; one node stores one copy whatever "
           "this says (accepted for compatibility)."),
    broker("transaction.state.log.min.isr", INT, 2, Range.at_least(1), HIGH,
           "Kafka's min.insync.replicas of __transaction_state (accepted for compatibility)."),
    broker("transaction.state.log.load.buffer.size", INT, 5242880, Range.at_least(1), LOW,
           "How many bytes are read at a time while the coordinator loads __transaction_state."),
    broker("transaction.partition.verification.enable", BOOLEAN, True, None, LOW,
           "Verify with the coordinator that a transactional produce's partition was added to the "
           "transaction before appending (KIP-890 part 1)."),
    # -- the share coordinator, __share_group_state (KIP-932; docs/share-groups.md) --
    broker("share.coordinator.state.topic.num.partitions", INT, 50, Range.at_least(1), HIGH,
           "Kafka's partition count of __share_group_state. Accepted only: one node keeps the "
           "share state in one partition, as it keeps __consumer_offsets."),
    broker("share.coordinator.state.topic.replication.factor", INT, 3, Range.at_least(1), HIGH,
           "Kafka's replication factor of __share_group_state; one node stores one copy whatever "
           "this says (accepted for compatibility)."),
    broker("share.coordinator.state.topic.min.isr", INT, 2, Range.at_least(1), HIGH,
           "Kafka's min.insync.replicas of __share_group_state (accepted for compatibility)."),
    broker("share.coordinator.state.topic.segment.bytes", INT, 104857600, Range.at_least(1), HIGH,
           "The segment size of the internal __share_group_state topic."),
    broker("share.coordinator.state.topic.compression.codec", INT, 0, Range.between(0, 4), HIGH,
           "Kafka's compression codec id of __share_group_state records. Accepted only: the "
           "records are written uncompressed."),
    broker("share.coordinator.snapshot.update.records.per.snapshot", INT, 500, Range.between(0, 500),
           MEDIUM,
           "How many ShareUpdate records the share coordinator writes for a share partition "
           "between two ShareSnapshot records of it."),
    broker("share.coordinator.write.timeout.ms", INT, 5000, Range.at_least(1), HIGH,
           "A share-state write waits at most this long for its record to be fsynced "
           "(the share-partition's write fails with COORDINATOR_NOT_AVAILABLE after)."),
    broker("share.coordinator.load.buffer.size", INT, 5242880, Range.at_least(1), HIGH,
           "How many bytes are read at a time while the share coordinator loads "
           "__share_group_state."),
    broker("share.coordinator.state.topic.prune.interval.ms", INT, 300000, Range.at_least(1), LOW,
           "How often the share coordinator deletes the records of __share_group_state that newer "
           "snapshots made redundant (Kafka's internal key)."),
    broker("share.coordinator.cold.partition.snapshot.interval.ms", INT, 300000, Range.at_least(1),
           LOW,
           "How often the share coordinator rewrites the snapshot of a share partition not written "
           "for this long, so that it does not hold the prune point back (Kafka's internal key)."),
    broker("share.coordinator.threads", INT, 1, Range.at_least(1), MEDIUM,
           "Kafka's share coordinator threads. Accepted only: it runs on the event loop."),
    broker("share.coordinator.append.linger.ms", INT, -1, Range.at_least(-1), MEDIUM,
           "Kafka's share coordinator write linger. Accepted only: concurrent acks=all writes "
           "share one fsync round (docs/durability.md)."),
)
# fmt: on


def _build() -> Mapping[str, ConfigKey]:
    keys: dict[str, ConfigKey] = {}
    for key in _TABLE:
        if key.name in keys:
            raise ValueError(f"configuration {key.name} is defined twice")
        keys[key.name] = typed_default(key)
    return MappingProxyType(keys)


#: Every broker key by name, in table order, with its default parsed and validated.
BROKER_KEYS = _build()
