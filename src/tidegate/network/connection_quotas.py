"""Connection limits, sans-IO: Kafka's ``ConnectionQuotas`` (KIP-306, KIP-402, KIP-612)
and the Selector's idle-connection expiry.

Driven by the socket server with the monotonic milliseconds of its clock
(:data:`~tidegate.clock.MonotonicMs`, the ``now_ms`` of every call); no sockets, no
timers, no clock here. The limits are read through a :class:`QuotaLimits` callable on every
decision, so a dynamic config change (IncrementalAlterConfigs) applies to the next
connection without a restart.

An accepted connection is *admitted* as Kafka's acceptor admits it
(``ConnectionQuotas.inc``):

1. its creation is recorded in the listener's and the broker's
   ``connection-accept-rate`` sensors; over ``max.connection.creation.rate`` (per
   listener or broker-wide) the admission is delayed by Kafka's quota throttle time;
2. it waits until a slot is free: fewer than the listener's ``max.connections`` on
   the listener and fewer than ``max.connections`` on the broker;
3. it is counted, and if its address already had ``max.connections.per.ip`` (or its
   override) connections it is refused (Kafka's ``TooManyConnectionsException``: the
   connection is closed at once).

Kafka's acceptor blocks while it waits (step 1 and 2), so later connections queue
behind; the socket server keeps them in that order. Kafka may also close the
least-recently-used connection of another listener when a connection on the
*inter-broker* listener would exceed ``max.connections`` (KIP-402); a single-node
tidegate has no inter-broker listener, so that case cannot arise.
"""

from __future__ import annotations

import dataclasses
import math
import socket
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from tidegate.clock import MonotonicMs
from tidegate.metrics.quota_utils import bounded_throttle_time, throttle_time
from tidegate.metrics.stats import (
    Avg,
    Max,
    MetricConfig,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
)
from tidegate.utils import INT32_MAX

if TYPE_CHECKING:
    from tidegate.config.broker import BrokerConfig



@dataclasses.dataclass(frozen=True)
class QuotaLimits:
    """The limits in force (read on every decision)."""

    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    per_ip_overrides: Mapping[str, int] = dataclasses.field(default_factory=dict)
    max_connection_creation_rate: int = INT32_MAX
    #: listener.name.<l>.max.connections / .max.connection.creation.rate
    listener_max_connections: Mapping[str, int] = dataclasses.field(default_factory=dict)
    listener_creation_rate: Mapping[str, int] = dataclasses.field(default_factory=dict)
    quota_window_num: int = 11
    quota_window_size_ms: int = 1000

    def max_per_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)


def parse_per_ip_overrides(value: str | None, resolve: bool = True) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's ``max.connections.per.ip.overrides``); host
    names are resolved to their address, as Kafka's ``InetAddress.getByName``."""
    out: dict[str, int] = {}
    for entry in (value or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host:
            raise ValueError(f"Invalid max.connections.per.ip.overrides entry {entry!r}")
        n = int(count)
        if n < 0:
            raise ValueError(f"Negative limit in max.connections.per.ip.overrides: {entry!r}")
        address = host.strip("[]")
        if resolve:
            try:
                address = socket.gethostbyname(address)
            except OSError:
                pass
        out[address] = n
    return out


class ConnectionQuotas:
    """Counts per address, per listener and in total, and the creation-rate sensors."""

    def __init__(
        self, limits: Callable[[], QuotaLimits], ip_rate: Callable[[str], int | None] = lambda _address: None
    ) -> None:
        self.limits = limits
        self.counts: dict[str, int] = {}
        self.listener_counts: dict[str, int] = {}
        self.total = 0
        self._listener_rate: dict[str, tuple[Sensor, int]] = {}
        self._broker_rate: tuple[Sensor, int] | None = None
        #: connection-accept-throttle-time per listener (avg and max over the window)
        self.throttle_time: dict[str, Sensor] = {}
        #: cumulative counters by listener
        self.accepted_total: dict[str, int] = {}
        self.refused_per_ip_total: dict[str, int] = {}
        self.throttled_total: dict[str, int] = {}
        self.blocked_total: dict[str, int] = {}
        #: KIP-612's per-IP ``connection_creation_rate`` client quota of an address (None:
        #: unlimited): the broker's client quota configuration
        self.ip_rate = ip_rate
        self._ip_rate_sensors: dict[str, tuple[Sensor, int]] = {}
        #: ip-connection-accept-throttle-time per listener; closes for an IP's rate
        self.ip_throttle_time: dict[str, Sensor] = {}
        self.ip_throttled_total: dict[str, int] = {}
        #: nanoseconds each listener's admissions waited for a slot (finished waits)
        self.blocked_ns: dict[str, int] = {}

    # -- the creation rate (KIP-612) ------------------------------------------------
    def _sensor(self, cached: tuple[Sensor, int] | None, name: str, bound: int, now_ms: MonotonicMs,
                limits: QuotaLimits) -> tuple[Sensor, int]:
        if cached is not None and cached[1] == bound:
            return cached
        config = MetricConfig(
            samples=limits.quota_window_num, time_window_ms=limits.quota_window_size_ms,
            quota=Quota.upper_bound(bound),
        )
        sensor = Sensor(name, now_ms, config)
        old = cached[0].metrics.get("connection-accept-rate") if cached is not None else None
        metric = sensor.add("connection-accept-rate", Rate())
        if old is not None:
            metric.stat = old.stat  # a new bound keeps the measured rate
        return sensor, bound

    def record_connection(self, listener: str, now_ms: MonotonicMs) -> int:
        """Record one new connection on ``listener``; the ms its admission must wait
        (0 when both the listener's and the broker's creation rates hold)."""
        limits = self.limits()
        lbound = limits.listener_creation_rate.get(listener, INT32_MAX)
        lsensor = self._listener_rate[listener] = self._sensor(
            self._listener_rate.get(listener), f"ConnectionAcceptRate-{listener}", lbound,
            now_ms, limits)
        bsensor = self._broker_rate = self._sensor(
            self._broker_rate, "ConnectionAcceptRate", limits.max_connection_creation_rate,
            now_ms, limits)
        delay = 0
        for sensor, _ in (lsensor, bsensor):
            try:
                sensor.record(1.0, now_ms)
            except QuotaViolationError as e:
                delay = max(delay, throttle_time(e, now_ms))
        if delay > 0:
            self.throttled_total[listener] = self.throttled_total.get(listener, 0) + 1
        tsensor = self.throttle_time.get(listener)
        if tsensor is None:
            tsensor = self.throttle_time[listener] = Sensor(
                f"ConnectionAcceptThrottleTime-{listener}", now_ms,
                MetricConfig(samples=limits.quota_window_num,
                             time_window_ms=limits.quota_window_size_ms))
            tsensor.add("connection-accept-throttle-time", Avg())
            tsensor.add("connection-accept-throttle-time-max", Max())
        tsensor.record(float(delay), now_ms, check_quotas=False)
        return delay

    #: per-IP rate sensors kept before idle ones are dropped (Kafka expires them after an hour)
    MAX_IP_SENSORS = 10_000

    def record_ip_connection(self, listener: str, address: str, now_ms: MonotonicMs) -> int:
        """Kafka's ``recordIpConnectionMaybeThrottle``, after a slot was found: 0, or the
        ms after which the connection from ``address`` must be closed unserved because its
        IP is over its ``connection_creation_rate``. A throttled connection is taken back
        out of the IP's, the listener's and the broker's rates and is not counted."""
        bound = self.ip_rate(address)
        if bound is None:
            return 0
        limits = self.limits()
        if len(self._ip_rate_sensors) >= self.MAX_IP_SENSORS and address not in self._ip_rate_sensors:
            self._drop_idle_ip_sensors(now_ms, limits)
        cached = self._ip_rate_sensors[address] = self._sensor(
            self._ip_rate_sensors.get(address), f"ConnectionAcceptRate-{address}", bound, now_ms, limits)
        sensor = cached[0]
        try:
            sensor.record(1.0, now_ms)
            return 0
        except QuotaViolationError as e:
            delay = bounded_throttle_time(e, limits.quota_window_size_ms, now_ms)
        sensor.record(-1.0, now_ms, check_quotas=False)
        for rate in (self._listener_rate.get(listener), self._broker_rate):
            if rate is not None:
                rate[0].record(-1.0, now_ms, check_quotas=False)
        self.ip_throttled_total[listener] = self.ip_throttled_total.get(listener, 0) + 1
        tsensor = self.ip_throttle_time.get(listener)
        if tsensor is None:
            tsensor = self.ip_throttle_time[listener] = Sensor(
                f"IpConnectionAcceptThrottleTime-{listener}", now_ms,
                MetricConfig(samples=limits.quota_window_num, time_window_ms=limits.quota_window_size_ms))
            tsensor.add("ip-connection-accept-throttle-time", Avg())
        tsensor.record(float(delay), now_ms, check_quotas=False)
        return delay

    def _drop_idle_ip_sensors(self, now_ms: MonotonicMs, limits: QuotaLimits) -> None:
        """Forget the per-IP sensors of addresses with no connection in the whole window."""
        horizon = now_ms - limits.quota_window_num * limits.quota_window_size_ms
        for address, (sensor, _) in list(self._ip_rate_sensors.items()):
            if sensor.last_record_ms < horizon:
                del self._ip_rate_sensors[address]

    def ip_throttle_time_avg(self, listener: str, now_ms: MonotonicMs) -> float:
        sensor = self.ip_throttle_time.get(listener)
        if sensor is None:
            return 0.0
        value = sensor.metrics["ip-connection-accept-throttle-time"].value(now_ms)
        return 0.0 if math.isnan(value) else value

    def accept_rate(self, listener: str | None, now_ms: MonotonicMs) -> float:
        """connection-accept-rate of a listener (None: the broker's), per second."""
        cached = self._broker_rate if listener is None else self._listener_rate.get(listener)
        if cached is None:
            return 0.0
        return cached[0].metrics["connection-accept-rate"].value(now_ms)

    def throttle_time_avg(self, listener: str, now_ms: MonotonicMs) -> float:
        sensor = self.throttle_time.get(listener)
        if sensor is None:
            return 0.0
        value = sensor.metrics["connection-accept-throttle-time"].value(now_ms)
        return 0.0 if math.isnan(value) else value  # NaN (nothing recorded): 0

    # -- slots ------------------------------------------------------------------------
    def slot_available(self, listener: str) -> bool:
        """Kafka's ``connectionSlotAvailable``."""
        limits = self.limits()
        if self.listener_counts.get(listener, 0) >= limits.listener_max_connections.get(
            listener, INT32_MAX
        ):
            return False
        return self.total < limits.max_connections

    def inc(self, listener: str, address: str) -> bool:
        """Count a connection; False if its address is over its limit (Kafka counts it,
        then throws TooManyConnectionsException and the close decrements it: the
        caller must :meth:`dec` a refused connection too)."""
        count = self.counts.get(address, 0)
        self.counts[address] = count + 1
        self.total += 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        if count >= self.limits().max_per_ip(address):
            self.refused_per_ip_total[listener] = self.refused_per_ip_total.get(listener, 0) + 1
            return False
        self.accepted_total[listener] = self.accepted_total.get(listener, 0) + 1
        return True

    def dec(self, listener: str, address: str) -> None:
        count = self.counts.get(address, 0)
        if count <= 0:
            raise ValueError(f"Attempted to decrease connection count for address with no connections, address: {address}")
        if count == 1:
            del self.counts[address]
        else:
            self.counts[address] = count - 1
        self.total -= 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) - 1

    def get(self, address: str) -> int:
        return self.counts.get(address, 0)


class IdleExpiryManager:
    """Kafka's ``Selector.IdleExpiryManager``: connections in order of last activity;
    those idle longer than ``connections.max.idle.ms`` are expired."""

    def __init__(self, max_idle_ms: int) -> None:
        self.max_idle_ms = max_idle_ms
        self.last_active: OrderedDict[Hashable, MonotonicMs] = OrderedDict()

    def update(self, key: Hashable, now_ms: MonotonicMs) -> None:
        self.last_active[key] = now_ms
        self.last_active.move_to_end(key)

    def remove(self, key: Hashable) -> None:
        self.last_active.pop(key, None)

    def expired(self, now_ms: MonotonicMs) -> list[Hashable]:
        """The connections idle for longer than the limit, least recently active first."""
        out = []
        for key, at in self.last_active.items():
            if now_ms - at <= self.max_idle_ms:
                break
            out.append(key)
        return out

    def next_expiry_ms(self) -> int | None:
        """When the least recently active connection expires (None if there is none)."""
        for at in self.last_active.values():
            return at + self.max_idle_ms + 1
        return None


def connection_limits(config: BrokerConfig) -> Callable[[], QuotaLimits]:
    """The limits from a broker config, re-read on every call (dynamic keys change
    under it) and re-built only when one of them changed."""
    names = [lst.name for lst in config.listeners]
    cache: list[Any] = [None, None]

    def limits() -> QuotaLimits:
        key = (
            config.get("max.connections"),
            config.get("max.connections.per.ip"),
            config.get("max.connections.per.ip.overrides"),
            config.get("max.connection.creation.rate"),
            config.get("quota.window.num"),
            config.get("quota.window.size.seconds"),
            # listener.name.<l>.: static, or a per-broker dynamic config
            tuple((name, config.listener_override(name, "max.connections"),
                   config.listener_override(name, "max.connection.creation.rate")) for name in names),
        )  # fmt: skip
        if cache[0] != key:
            listener_max = {name: int(n) for name, n, _ in key[6] if n is not None}
            listener_rate = {name: int(r) for name, _, r in key[6] if r is not None}
            cache[0] = key
            cache[1] = QuotaLimits(
                max_connections=key[0],
                max_connections_per_ip=key[1],
                per_ip_overrides=parse_per_ip_overrides(key[2]),
                max_connection_creation_rate=key[3],
                listener_max_connections=listener_max,
                listener_creation_rate=listener_rate,
                quota_window_num=key[4],
                quota_window_size_ms=key[5] * 1000,
            )
        result: QuotaLimits = cache[1]
        return result

    return limits
