"""librdkafka's mock cluster, started through ctypes: N Kafka brokers on loopback inside
this process, whose leaders, coordinators, availability, latency and request errors a
test controls.

The confluent-kafka wheel ships librdkafka (``confluent_kafka.libs/librdkafka*.so``),
which exports the ``rd_kafka_mock_*`` functions of its ``src/rdkafka_mock.h``. A mock
cluster belongs to an ``rd_kafka_t`` handle (a producer handle with no bootstrap servers
here: it never connects anywhere) and runs its brokers on librdkafka's own threads, so
clients in the test process (tidegate's, confluent-kafka's) reach it over real sockets.

What the mock is (and is not), from librdkafka's source: every broker answers for every
partition from one shared log per partition, so moving a leader loses nothing; the
leader answers Produce and Fetch, the others NOT_LEADER_OR_FOLLOWER; a leader move bumps
the partition's leader epoch; a broker set down closes its connections and refuses new
ones (same port); request errors pushed for an API are answered, one per request, by
whichever broker gets the next request of that API, before any other processing (a
refused Produce appends nothing); it checks idempotent producers' sequences; it answers
ApiVersions only up to v2 (a v3 request gets UNSUPPORTED_VERSION in v3's flexible
format), OffsetFetch up to v6, OffsetForLeaderEpoch only at v2, and has no
DescribeGroups or ListGroups. It advertises JoinGroup v6, SyncGroup v4 and LeaveGroup
v3-v4 but reads them with the layout of older versions (an int32 array count in a
flexible request, LeaveGroup's single member id), closing the connection: librdkafka
itself stops at JoinGroup v5, SyncGroup v3 and LeaveGroup v1. :class:`MockCluster`
advertises only the versions it reads (:data:`READABLE_VERSIONS`), so clients
negotiate down as they would with an older broker.

:func:`load` returns None with the reason when the library or a symbol is missing, so
tests skip with it instead of failing.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["MockCluster", "load", "unavailable_reason"]

# argument and return types of every function used (rdkafka_mock.h); the variadic
# rd_kafka_mock_push_request_errors is reached through its _array twin, which takes the
# same errors as a C array (variadic calls through ctypes are not portable)
_P = ctypes.c_void_p
_ERR = ctypes.c_int
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "rd_kafka_conf_new": (_P, []),
    "rd_kafka_conf_set": (_ERR, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "rd_kafka_new": (_P, [ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_size_t]),
    "rd_kafka_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_new": (_P, [_P, ctypes.c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [_P]),
    "rd_kafka_mock_topic_create": (_ERR, [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    "rd_kafka_mock_partition_set_leader": (_ERR, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]),
    "rd_kafka_mock_partition_set_follower": (_ERR, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_down": (_ERR, [_P, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_up": (_ERR, [_P, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_rtt": (_ERR, [_P, ctypes.c_int32, ctypes.c_int]),
    "rd_kafka_mock_push_request_errors_array": (None, [_P, ctypes.c_int16, ctypes.c_size_t,
                                                        ctypes.POINTER(_ERR)]),
    "rd_kafka_mock_clear_request_errors": (None, [_P, ctypes.c_int16]),
    "rd_kafka_mock_coordinator_set": (_ERR, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32]),
    "rd_kafka_mock_set_apiversion": (_ERR, [_P, ctypes.c_int16, ctypes.c_int16, ctypes.c_int16]),
    "rd_kafka_mock_start_request_tracking": (None, [_P]),
    "rd_kafka_mock_get_requests": (ctypes.POINTER(_P), [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "rd_kafka_mock_request_id": (ctypes.c_int32, [_P]),
    "rd_kafka_mock_request_api_key": (ctypes.c_int16, [_P]),
    "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(_P), ctypes.c_size_t]),
    "rd_kafka_err2name": (ctypes.c_char_p, [_ERR]),
}

#: {api key: (min, max)}: the versions of the classic group APIs the mock reads
#: correctly (see the module docstring)
READABLE_VERSIONS = {11: (0, 5), 14: (0, 3), 13: (0, 2)}  # JoinGroup, SyncGroup, LeaveGroup

_lib: ctypes.CDLL | None = None
_reason: str | None = None


def _library_path() -> str | None:
    try:
        import confluent_kafka
    except ImportError:
        return None
    site = Path(confluent_kafka.__file__).resolve().parent.parent
    found = sorted(glob.glob(str(site / "confluent_kafka.libs" / "librdkafka*.so*")))
    found += sorted(glob.glob(str(site / "confluent_kafka" / ".dylibs" / "librdkafka*.dylib")))
    return found[0] if found else None


def load() -> ctypes.CDLL | None:
    """librdkafka with the mock functions typed, or None (:func:`unavailable_reason`)."""
    global _lib, _reason
    if _lib is not None or _reason is not None:
        return _lib
    path = os.environ.get("TIDEGATE_LIBRDKAFKA") or _library_path()
    if path is None:
        _reason = "no librdkafka: confluent-kafka's wheel (confluent_kafka.libs/librdkafka*.so) is not installed"
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        _reason = f"cannot load {path}: {exc}"
        return None
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        _reason = f"{path} does not export {', '.join(missing)} (a librdkafka without its mock cluster)"
        return None
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib = lib
    return lib


def unavailable_reason() -> str | None:
    load()
    return _reason


class MockClusterError(RuntimeError):
    """A mock cluster call returned an error."""


class MockCluster:
    """``brokers`` mock brokers (ids 1..N) on loopback; :attr:`bootstrap` reaches them.
    Close it (or use it as a context manager) to stop them."""

    def __init__(self, brokers: int = 3) -> None:
        lib = load()
        if lib is None:
            raise MockClusterError(unavailable_reason())
        self._lib = lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # the handle's own client has no bootstrap servers: quiet its warning about that
        lib.rd_kafka_conf_set(conf, b"log_level", b"2", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER
        if not self._rk:
            raise MockClusterError(f"rd_kafka_new: {errstr.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise MockClusterError("rd_kafka_mock_cluster_new failed")
        self.broker_ids = list(range(1, brokers + 1))
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self._timers: list[threading.Timer] = []
        for api_key, (lo, hi) in READABLE_VERSIONS.items():
            self.set_api_versions(api_key, lo, hi)

    @property
    def _handle(self) -> int:
        """The cluster, for a call into librdkafka (a closed one would be a use after free)."""
        if not self._mc:
            raise MockClusterError("the mock cluster is closed")
        return self._mc

    def later(self, delay_s: float, step: Callable[[], None]) -> None:
        """Run ``step`` (a broker back up, say) on a timer thread in ``delay_s``; closing
        the cluster first cancels it."""
        timer = threading.Timer(delay_s, step)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _check(self, err: int, what: str) -> None:
        if err:
            raise MockClusterError(f"{what}: {self._lib.rd_kafka_err2name(err).decode()}")

    # -- topics and leaders ------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication_factor: int = 3) -> None:
        """A topic whose partitions' leaders are spread over the brokers."""
        self._check(self._lib.rd_kafka_mock_topic_create(self._handle, name.encode(), partitions,
                                                         replication_factor), f"create {name}")  # fmt: skip

    def set_leader(self, topic: str, partition: int, broker: int) -> None:
        """Move a partition's leadership to ``broker`` (its leader epoch goes up by one)."""
        self._check(self._lib.rd_kafka_mock_partition_set_leader(self._handle, topic.encode(), partition, broker),
                    f"leader of {topic}-{partition}")  # fmt: skip

    def set_follower(self, topic: str, partition: int, broker: int) -> None:
        """The broker a consumer is told to fetch from (KIP-392)."""
        self._check(self._lib.rd_kafka_mock_partition_set_follower(self._handle, topic.encode(), partition, broker),
                    f"follower of {topic}-{partition}")  # fmt: skip

    def move_leaders(self, topic: str, partitions: int, shift: int = 1) -> None:
        """Every partition's leader moves to the next broker (``shift`` further): the
        leader of partition p goes to broker ``(p + shift) % N + 1``."""
        n = len(self.broker_ids)
        for p in range(partitions):
            self.set_leader(topic, p, (p + shift) % n + 1)

    # -- brokers -----------------------------------------------------------------------------
    def broker_down(self, broker: int) -> None:
        """Close the broker's connections and refuse new ones (its port stays)."""
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._handle, broker), f"broker {broker} down")

    def broker_up(self, broker: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._handle, broker), f"broker {broker} up")

    def set_rtt(self, broker: int, rtt_ms: int) -> None:
        """Delay every response of ``broker`` by ``rtt_ms``."""
        self._check(self._lib.rd_kafka_mock_broker_set_rtt(self._handle, broker, rtt_ms), f"rtt of {broker}")

    def set_coordinator(self, key_type: str, key: str, broker: int) -> None:
        """Make ``broker`` the coordinator of a group (``key_type="group"``) or a
        transactional id (``"transaction"``); the others answer NOT_COORDINATOR."""
        self._check(self._lib.rd_kafka_mock_coordinator_set(self._handle, key_type.encode(), key.encode(), broker),
                    f"{key_type} coordinator of {key}")  # fmt: skip

    def set_api_versions(self, api_key: int, min_version: int, max_version: int) -> None:
        """The versions of ``api_key`` every broker advertises (and accepts)."""
        self._check(self._lib.rd_kafka_mock_set_apiversion(self._handle, api_key, min_version, max_version),
                    f"versions of api {api_key}")  # fmt: skip

    # -- injected errors ---------------------------------------------------------------------
    def push_request_errors(self, api_key: int, errors: Iterable[int]) -> None:
        """The next requests of ``api_key`` (to any broker) are answered with these error
        codes, one per request, in order."""
        codes = list(errors)
        arr = (_ERR * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._handle, api_key, len(codes), arr)

    def clear_request_errors(self, api_key: int) -> None:
        self._lib.rd_kafka_mock_clear_request_errors(self._handle, api_key)

    # -- request tracking --------------------------------------------------------------------
    def start_tracking(self) -> None:
        self._lib.rd_kafka_mock_start_request_tracking(self._handle)

    def requests(self) -> list[tuple[int, int]]:
        """(broker id, api key) of every request since :meth:`start_tracking`."""
        count = ctypes.c_size_t()
        arr = self._lib.rd_kafka_mock_get_requests(self._handle, ctypes.byref(count))
        try:
            return [(self._lib.rd_kafka_mock_request_id(arr[i]), self._lib.rd_kafka_mock_request_api_key(arr[i]))
                    for i in range(count.value)]  # fmt: skip
        finally:
            if arr:
                self._lib.rd_kafka_mock_request_destroy_array(arr, count.value)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            if timer.is_alive():
                timer.join()
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockCluster:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
