"""Kafka's ClientQuotaManager (KIP-13, KIP-55): the sans-IO byte-rate quota arithmetic.

A rendering of Kafka's quota mechanism with Kafka's names, on the metric core of
:mod:`tidegate.metrics.stats` (``Sensor`` with its record-then-check, ``Rate``,
``Quota``; ``QuotaUtils`` is :mod:`tidegate.metrics.quota_utils`): ``QuotaType`` and the
entity resolution of ``QuotaEntity``, ``ClientQuotaManager`` (one per quota type:
Produce and Fetch byte rates; ``ClientRequestQuotaManager`` in
:mod:`.client_request_quota_manager` extends it for the Request quota), and
``ThrottledChannel``, a timer task on the manager's throttle timer standing in for
Kafka's ``DelayQueue``.

Plain objects, no threads, no locks, no I/O.  A manager reads the monotonic time of
the :class:`~tidegate.clock.Clock` it is built with (as Kafka's reads its ``Time``);
its sensors are handed that time on every record and read.
Kafka guards these objects with a read-write lock because request threads record
while the admin path updates quotas; tidegate calls everything from its one event
loop, so the observable behaviour is the same without them.

What a caller (KafkaApis's respond step) does with it, as Kafka's ``KafkaApis`` does:

1. After handling a request, record on each quota that applies
   (``maybe_record_and_get_throttle_time_ms``); each returns a throttle time in ms,
   0 when that quota is not violated.  The value is recorded even when it violates
   the quota (record first, then check).
2. When several quotas are violated the delay is their maximum, not the sum
   (:func:`max_throttle`).  The manager whose throttle is the larger one throttles
   the channel (Kafka: the byte-rate manager if its throttle is strictly larger,
   otherwise the request manager).
3. A throttled Fetch gets an empty response, so its bytes are un-recorded
   (``unrecord_quota_sensor``).
4. ``throttle(...)`` puts a :class:`ThrottledChannel` on that manager's throttle
   timer (and records throttle-time); the network layer sends the
   response at once with ``throttle_time_ms`` (KIP-219) and mutes the connection;
   when the timer expires the channel, its ``on_end`` unmutes it.

Deliberate differences from Kafka, none visible on the wire:

* User names are used as metric tags as they are (Kafka url-encodes them for
  ZooKeeper paths), and the default entity is the :data:`DEFAULT` sentinel rather
  than the string ``"<default>"``, so no real user or client id can collide with it.
* Besides Kafka's ``throttle-time`` average, the throttle-time sensor also keeps a
  max; a snapshot reports 0.0 where Kafka's ``Avg``/``Max`` would be NaN (nothing
  throttled in the window).  The stats themselves return NaN like Kafka's.
* Sensors are not removed by a background task: an inactive sensor (one hour, as
  Kafka) is replaced on next use, and :meth:`ClientQuotaManager.expire_sensors`
  drops them in bulk.
"""

from __future__ import annotations

import enum
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from tidegate.clock import Clock, MonotonicMs
from tidegate.metrics.quota_utils import throttle_time
from tidegate.metrics.stats import (
    METRICS_NUM_SAMPLES_DEFAULT,
    METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    Avg,
    Max,
    MetricConfig,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
)
from tidegate.server.timer import SystemTimer, TimerTask

__all__ = [
    "DEFAULT",
    "NANOS_TO_PERCENTAGE_PER_SECOND",
    "NUM_QUOTA_SAMPLES_DEFAULT",
    "QUOTA_WINDOW_SIZE_SECONDS_DEFAULT",
    "UNLIMITED_BOUND",
    "ClientQuotaManager",
    "ClientQuotaManagerConfig",
    "ClientQuotaMetrics",
    "ClientSensors",
    "QuotaEntity",
    "QuotaType",
    "ThrottledChannel",
    "max_throttle",
    "nanos_to_percentage",
]

#: ``quota.window.num``: samples retained per quota Rate.
NUM_QUOTA_SAMPLES_DEFAULT: Final = 11
#: ``quota.window.size.seconds``: the time span of each sample.
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT: Final = 1
#: The bound of an entity with no quota: Kafka uses ``Long.MAX_VALUE``.
UNLIMITED_BOUND: Final = float(2**63 - 1)
#: Kafka's ``ClientRequestQuotaManager.NanosToPercentagePerSecond``: 10 ms of thread
#: time is 1.0, so the Rate (per second) of these values is a percentage of one thread.
NANOS_TO_PERCENTAGE_PER_SECOND: Final = 100.0 / 1_000_000_000
#: Sensors idle this long are dropped (Kafka's ``InactiveSensorExpirationTimeSeconds``).
INACTIVE_SENSOR_EXPIRATION_MS: Final = 3600 * 1000


def nanos_to_percentage(nanos: float) -> float:
    """Thread time in ns -> the value the request-time sensor records."""
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


def max_throttle(*throttle_times_ms: int) -> int:
    """The delay when several quotas are violated: the largest throttle, never the sum."""
    return max(0, *throttle_times_ms) if throttle_times_ms else 0


# --------------------------------------------------------------------------------------
# throttled channels
# --------------------------------------------------------------------------------------
class ThrottledChannel(TimerTask):
    """A connection throttled for ``throttle_time_ms`` (Kafka's ``ThrottledChannel``).

    A timer task on its quota manager's throttle timer: when the throttle ends, the
    timer runs it and it calls ``on_end`` (the shell unmutes the connection). The
    broker's one scheduler drives the timer, as it drives the purgatories'.
    """

    __slots__ = ("end_time_ms", "on_end", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, now_ms: MonotonicMs, on_end: Callable[[], object]) -> None:
        super().__init__(throttle_time_ms)
        self.throttle_time_ms = throttle_time_ms
        self.end_time_ms = MonotonicMs(now_ms + throttle_time_ms)
        self.on_end = on_end

    def get_delay(self, now_ms: MonotonicMs) -> int:
        """Time left until the channel may be unmuted (``getDelay``); <= 0 once due."""
        return self.end_time_ms - now_ms

    def run(self) -> None:
        self.on_end()

    def __repr__(self) -> str:
        return f"ThrottledChannel({self.throttle_time_ms} ms, ends {self.end_time_ms})"


# --------------------------------------------------------------------------------------
# quota types and entities
# --------------------------------------------------------------------------------------
class QuotaType(enum.Enum):
    """A quota type: its metric group name (Kafka's ``QuotaType``) and its config key."""

    PRODUCE = ("Produce", "producer_byte_rate")
    FETCH = ("Fetch", "consumer_byte_rate")
    REQUEST = ("Request", "request_percentage")

    def __init__(self, group: str, config_key: str) -> None:
        self.group = group
        self.config_key = config_key

    def __str__(self) -> str:
        return self.group

    @classmethod
    def from_config_key(cls, key: str) -> QuotaType:
        for quota_type in cls:
            if quota_type.config_key == key:
                return quota_type
        raise KeyError(f"unknown quota config {key!r}")


class _Default:
    """The default entity at one level (``<default>``; a null name in KIP-546).

    Only :data:`DEFAULT` exists; pickling and copying give it back.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"


#: The ``<default>`` user or client-id of a :class:`QuotaEntity`.
DEFAULT: Final = _Default()

EntityName = str | _Default


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """What a quota is configured on: a user, a client-id, or a (user, client-id).

    ``None`` leaves a level out; :data:`DEFAULT` is that level's default.  The eight
    shapes a lookup considers, in precedence order, for user U and client-id C::

        1 QuotaEntity(U, C)         2 QuotaEntity(U, DEFAULT)      3 QuotaEntity(U)
        4 QuotaEntity(DEFAULT, C)   5 QuotaEntity(DEFAULT, DEFAULT)
        6 QuotaEntity(DEFAULT)      7 QuotaEntity(client_id=C)
        8 QuotaEntity(client_id=DEFAULT)
    """

    user: EntityName | None = None
    client_id: EntityName | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client-id, or both")
        for name in (self.user, self.client_id):
            if name is not None and not isinstance(name, str | _Default):
                raise TypeError(f"an entity name is a str or DEFAULT, not {name!r}")

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("default user" if self.user is DEFAULT else f"user {self.user}")
        if self.client_id is not None:
            parts.append(
                "default client-id" if self.client_id is DEFAULT else f"client-id {self.client_id}"
            )
        return " ".join(parts)


# Kafka's QuotaTypes bits: which entity shapes have a quota configured.
_NO_QUOTAS = 0
_CLIENT_ID_QUOTA_ENABLED = 1
_USER_QUOTA_ENABLED = 2
_USER_CLIENT_ID_QUOTA_ENABLED = 4

_DEFAULT_USER_CLIENT = QuotaEntity(DEFAULT, DEFAULT)
_DEFAULT_USER = QuotaEntity(DEFAULT, None)
_DEFAULT_CLIENT = QuotaEntity(None, DEFAULT)


def _quota_type_bit(entity: QuotaEntity) -> int:
    if entity.user is not None and entity.client_id is not None:
        return _USER_CLIENT_ID_QUOTA_ENABLED
    if entity.user is not None:
        return _USER_QUOTA_ENABLED
    return _CLIENT_ID_QUOTA_ENABLED


# --------------------------------------------------------------------------------------
# quota managers
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClientQuotaManagerConfig:
    """``quota.window.num`` and ``quota.window.size.seconds``."""

    num_quota_samples: int = NUM_QUOTA_SAMPLES_DEFAULT
    quota_window_size_seconds: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT

    def __post_init__(self) -> None:
        if self.num_quota_samples < 1 or self.quota_window_size_seconds < 1:
            raise ValueError("quota.window.num and quota.window.size.seconds must be >= 1")


@dataclass(frozen=True, slots=True)
class ClientSensors:
    """The sensors of one set of metric tags: the quota Rate and the throttle time."""

    metric_tags: tuple[str, str]  # (user, client-id); "" where the quota is not per that level
    quota_sensor: Sensor
    throttle_time_sensor: Sensor


@dataclass(frozen=True, slots=True)
class ClientQuotaMetrics:
    """One entity's metrics as plain numbers, for the metrics collector and ``top``."""

    user: str  # the metric tags: "" where the quota is not per user / per client-id
    client_id: str
    rate: float  # byte-rate in bytes/s, or request-time in % of one thread
    quota: float  # the bound in force (UNLIMITED_BOUND when none)
    throttle_time_avg: float  # ms, over the throttle-time sensor's window; 0.0 if none
    throttle_time_max: float


class ClientQuotaManager:
    """Per-entity quota Rates, throttle times and throttled channels of one quota type.

    Resolution (first match wins, ``quota_limit``) and counter sharing
    (``quota_metric_tags``) follow Kafka's default quota callback:

    ====  ===============================  =========================
    1     /users/U/clients/C               counter per (user, client)
    2     /users/U/clients/<default>       counter per (user, client)
    3     /users/U                         counter per user
    4     /users/<default>/clients/C       counter per (user, client)
    5     /users/<default>/clients/<def>   counter per (user, client)
    6     /users/<default>                 counter per user
    7     /clients/C                       counter per client-id
    8     /clients/<default>               counter per client-id
    ====  ===============================  =========================

    No match: unlimited.  Counters are the sensors keyed by the metric tags, so when a
    quota change moves an entity to other tags it starts on a fresh counter (Kafka
    does the same); a bound change on the same tags applies to the live counter.
    """

    quota_metric_name = "byte-rate"

    def __init__(
        self,
        quota_type: QuotaType,
        config: ClientQuotaManagerConfig | None = None,
        *,
        clock: Clock,
        metrics_num_samples: int = METRICS_NUM_SAMPLES_DEFAULT,
        metrics_sample_window_ms: int = METRICS_SAMPLE_WINDOW_MS_DEFAULT,
    ) -> None:
        self.quota_type = quota_type
        self.config = config if config is not None else ClientQuotaManagerConfig()
        self.clock = clock
        #: config of the throttle-time (and exempt) sensors: the broker's metric config
        self.metrics_config = MetricConfig(metrics_num_samples, metrics_sample_window_ms)
        self._overridden_quotas: dict[QuotaEntity, Quota] = {}
        self._quota_types_enabled = _NO_QUOTAS
        self._quota_sensors: dict[tuple[str, str], Sensor] = {}
        self._throttle_time_sensors: dict[tuple[str, str], Sensor] = {}
        #: throttled channels, timer tasks that end their throttle (the broker's scheduler
        #: advances this timer with the purgatories')
        self.throttle_timer = SystemTimer(clock=clock)

    # ---- configuration -------------------------------------------------------------
    @property
    def quotas_enabled(self) -> bool:
        """Whether any quota of this type is configured; if not, nothing is recorded."""
        return self._quota_types_enabled != _NO_QUOTAS

    @property
    def max_throttle_time_ms(self) -> int | None:
        """The cap on one throttle; None: byte-rate throttles are not capped."""
        return None

    def update_quota(self, entity: QuotaEntity, quota: float | Quota | None) -> None:
        """Set (a bound) or remove (``None``) the quota of ``entity``; applies at once.

        Live counters keep their samples: the new bound is checked from the next record.
        """
        if quota is None:
            self._overridden_quotas.pop(entity, None)
        else:
            bound = quota.bound if isinstance(quota, Quota) else float(quota)
            if not bound > 0 or math.isinf(bound):
                raise ValueError(f"a quota bound must be a positive number, not {quota!r}")
            self._overridden_quotas[entity] = Quota(bound, True)
        enabled = _NO_QUOTAS
        for configured in self._overridden_quotas:
            enabled |= _quota_type_bit(configured)
        self._quota_types_enabled = enabled
        self.update_quota_metric_configs()

    def update_quota_metric_configs(self) -> None:
        """Give every live counter the bound its tags now resolve to."""
        for tags, sensor in self._quota_sensors.items():
            metric = sensor.metrics[self.quota_metric_name]
            bound = self._quota_limit_or_unlimited(tags)
            quota = metric.config.quota
            if quota is None or quota.bound != bound:
                metric.config = self._quota_metric_config(bound)

    def configured_quotas(self) -> dict[QuotaEntity, float]:
        """The configured bounds (what DescribeClientQuotas will list)."""
        return {entity: q.bound for entity, q in self._overridden_quotas.items()}

    # ---- resolution ----------------------------------------------------------------
    def quota_metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client-id) tags, hence the counter, a connection records on."""
        enabled = self._quota_types_enabled
        if enabled in (_NO_QUOTAS, _CLIENT_ID_QUOTA_ENABLED):
            return ("", client_id)
        if enabled == _USER_QUOTA_ENABLED:
            return (user, "")
        if enabled == _USER_CLIENT_ID_QUOTA_ENABLED:
            return (user, client_id)
        # quotas at several levels: the tags of the first level configured
        quotas = self._overridden_quotas
        if (
            QuotaEntity(user, client_id) in quotas  # 1
            or QuotaEntity(user, DEFAULT) in quotas  # 2
        ):
            return (user, client_id)
        if QuotaEntity(user, None) in quotas:  # 3
            return (user, "")
        if (
            QuotaEntity(DEFAULT, client_id) in quotas  # 4
            or _DEFAULT_USER_CLIENT in quotas  # 5
        ):
            return (user, client_id)
        if _DEFAULT_USER in quotas:  # 6
            return (user, "")
        return ("", client_id)  # 7, 8, or no quota at all

    def quota_limit(self, metric_tags: tuple[str, str]) -> float | None:
        """The bound for a counter's tags (levels 1,2,4,5 / 3,6 / 7,8); None: unlimited."""
        user, client_id = metric_tags
        quotas = self._overridden_quotas
        if user and client_id:
            candidates: Iterable[QuotaEntity] = (
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client_id),
                _DEFAULT_USER_CLIENT,
            )
        elif user:
            candidates = (QuotaEntity(user, None), _DEFAULT_USER)
        elif client_id:
            candidates = (QuotaEntity(None, client_id), _DEFAULT_CLIENT)
        else:
            return None
        for entity in candidates:
            quota = quotas.get(entity)
            if quota is not None:
                return quota.bound
        return None

    def _quota_limit_or_unlimited(self, metric_tags: tuple[str, str]) -> float:
        limit = self.quota_limit(metric_tags)
        return UNLIMITED_BOUND if limit is None else limit

    def quota(self, user: str, client_id: str) -> Quota:
        """The quota in force for a connection (``UNLIMITED_BOUND`` when none)."""
        return Quota.upper_bound(
            self._quota_limit_or_unlimited(self.quota_metric_tags(user, client_id))
        )

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without a certain throttle.

        ``bound * (samples - 1) * window seconds``; ``sys.float_info.max`` with no quota.
        Kafka's Fetch caps a response's size with it.
        """
        if not self.quotas_enabled:
            return sys.float_info.max
        limit = self.quota_limit(self.quota_metric_tags(user, client_id))
        if limit is None:
            return sys.float_info.max
        return limit * (self.config.num_quota_samples - 1) * self.config.quota_window_size_seconds

    # ---- sensors -------------------------------------------------------------------
    def _quota_metric_config(self, bound: float) -> MetricConfig:
        return MetricConfig(
            samples=self.config.num_quota_samples,
            time_window_ms=self.config.quota_window_size_seconds * 1000,
            quota=Quota(bound, True),
        )

    def quota_sensor_name(self, metric_tags: tuple[str, str]) -> str:
        return f"{self.quota_type.group}-{metric_tags[0]}:{metric_tags[1]}"

    def throttle_time_sensor_name(self, metric_tags: tuple[str, str]) -> str:
        return f"{self.quota_type.group}ThrottleTime-{metric_tags[0]}:{metric_tags[1]}"

    def _quota_sensor(self, tags: tuple[str, str], now_ms: MonotonicMs) -> Sensor:
        sensor = self._quota_sensors.get(tags)
        if sensor is None or sensor.has_expired(now_ms):
            sensor = Sensor(
                self.quota_sensor_name(tags), now_ms,
                inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
            )  # fmt: skip
            bound = self._quota_limit_or_unlimited(tags)
            sensor.add(self.quota_metric_name, Rate(), self._quota_metric_config(bound))
            self._quota_sensors[tags] = sensor
        return sensor

    def _throttle_time_sensor(self, tags: tuple[str, str], now_ms: MonotonicMs) -> Sensor:
        sensor = self._throttle_time_sensors.get(tags)
        if sensor is None or sensor.has_expired(now_ms):
            sensor = Sensor(
                self.throttle_time_sensor_name(tags), now_ms, self.metrics_config,
                inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
            )  # fmt: skip
            sensor.add("throttle-time", Avg())
            sensor.add("throttle-time-max", Max())
            self._throttle_time_sensors[tags] = sensor
        return sensor

    def get_or_create_quota_sensors(self, user: str, client_id: str, now: MonotonicMs) -> ClientSensors:
        tags = self.quota_metric_tags(user, client_id)
        return ClientSensors(
            tags, self._quota_sensor(tags, now), self._throttle_time_sensor(tags, now)
        )

    def expire_sensors(self) -> int:
        """Drop sensors idle for an hour (Kafka's sensor expiry); returns how many."""
        now = self.clock.milliseconds()
        dropped = 0
        for sensors in (self._quota_sensors, self._throttle_time_sensors):
            for tags in [t for t, s in sensors.items() if s.has_expired(now)]:
                del sensors[tags]
                dropped += 1
        return dropped

    # ---- recording -----------------------------------------------------------------
    def maybe_record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float) -> int:
        """:meth:`record_and_get_throttle_time_ms` if any quota is configured, else 0."""
        if not self.quotas_enabled:
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, value)

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float) -> int:
        """Record ``value``, then return the throttle in ms if the quota is now violated."""
        now = self.clock.milliseconds()
        sensors = self.get_or_create_quota_sensors(user, client_id, now)
        try:
            sensors.quota_sensor.record(value, now, True)
        except QuotaViolationError as e:
            return self.throttle_time(e, now)
        return 0

    def record_no_throttle(self, user: str, client_id: str, value: float) -> None:
        """Record without checking; the next checked record sees it."""
        now = self.clock.milliseconds()
        self.get_or_create_quota_sensors(user, client_id, now).quota_sensor.record(
            value, now, False
        )

    def unrecord_quota_sensor(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled Fetch is answered empty).

        Records ``-value`` unchecked; if the current window is still the one the value
        went into, the windowed sum returns exactly to what it was.
        """
        self.record_no_throttle(user, client_id, -value)

    unrecord = unrecord_quota_sensor

    def throttle_time(self, e: QuotaViolationError, now_ms: MonotonicMs) -> int:
        return throttle_time(e, now_ms)

    # ---- throttling ----------------------------------------------------------------
    def throttle(
        self,
        user: str,
        client_id: str,
        throttle_time_ms: int,
        on_end: Callable[[], object],
    ) -> ThrottledChannel | None:
        """Throttle a connection: record the throttle time and time its end.

        ``on_end`` runs once ``throttle_time_ms`` has passed (the throttle timer expires
        the :class:`ThrottledChannel`). Returns the channel, or None when
        ``throttle_time_ms`` is not positive (nothing to do).
        """
        if throttle_time_ms <= 0:
            return None
        now = self.clock.milliseconds()
        sensors = self.get_or_create_quota_sensors(user, client_id, now)
        sensors.throttle_time_sensor.record(throttle_time_ms, now)
        channel = ThrottledChannel(throttle_time_ms, now, on_end)
        self.throttle_timer.add(channel)
        return channel

    @property
    def queue_size(self) -> int:
        """Throttled channels not yet released (Kafka's ``queue-size`` of the type)."""
        return self.throttle_timer.size

    # ---- metrics -------------------------------------------------------------------
    def metrics_for(self, user: str, client_id: str) -> ClientQuotaMetrics | None:
        """The metrics of the counter ``(user, client_id)`` records on, if it exists."""
        tags = self.quota_metric_tags(user, client_id)
        if tags not in self._quota_sensors and tags not in self._throttle_time_sensors:
            return None
        return self._metrics(tags, self.clock.milliseconds())

    def entity_metrics(self) -> list[ClientQuotaMetrics]:
        """Every live counter's metrics (what the Prometheus collector will read)."""
        now = self.clock.milliseconds()
        tags_seen = dict.fromkeys(self._quota_sensors) | dict.fromkeys(self._throttle_time_sensors)
        return [self._metrics(tags, now) for tags in tags_seen]

    def _metrics(self, tags: tuple[str, str], now: MonotonicMs) -> ClientQuotaMetrics:
        rate = 0.0
        bound = self._quota_limit_or_unlimited(tags)
        quota_sensor = self._quota_sensors.get(tags)
        if quota_sensor is not None:
            metric = quota_sensor.metrics[self.quota_metric_name]
            rate = metric.value(now)
            if metric.config.quota is not None:
                bound = metric.config.quota.bound
        avg = peak = 0.0
        throttle_sensor = self._throttle_time_sensors.get(tags)
        if throttle_sensor is not None:
            avg = _zero_if_nan(throttle_sensor.metrics["throttle-time"].value(now))
            peak = _zero_if_nan(throttle_sensor.metrics["throttle-time-max"].value(now))
        return ClientQuotaMetrics(tags[0], tags[1], rate, bound, avg, peak)


def _zero_if_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else x
