"""The client's network thread against a broker that answers badly (issue 30): for every
API tidegate's client stack sends, a response that is damaged (the broker fuzzer's
mutations: bit flips, truncation, extreme lengths and counts, bad varints and tagged
fields), random bytes, a correlation id nobody sent, or well-formed but surprising
(random field values drawn by Hypothesis from kio's schema of the version: unknown
error codes, negative offsets, empty or repeated arrays, null strings; no throttle
time, which the client honours however long it is).

Properties: a blocking request ends with its response or a Kafka error (never another
exception, never a wait past its timeout); the connection is failed and reconnected,
so the next request on the same client succeeds; ApiVersions and SASL answered badly
fail the connection setup with a Kafka error and the client connects once the broker
behaves; the producer's sender thread lives through damaged ApiVersions, Metadata,
InitProducerId and Produce responses, reports every record's outcome through its
future (a success or a Kafka error) and flushes.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import random
import struct
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.fake_broker import FakeBroker, HangUp
from tests.fuzz.fuzzer import mutate
from tests.kio_codec import build, encode_body, response_class
from tidegate.client import KafkaClient, client_version_range
from tidegate.errors import KafkaError

pytestmark = pytest.mark.timeout(300)

#: every API the client stack sends: the producer, the fetcher and group member, the
#: admin calls behind the CLI tools, SASL, ApiVersions
CLIENT_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 28,
               29, 30, 31, 32, 33, 36, 37, 42, 44, 47, 48, 49)  # fmt: skip
EXAMPLES_PER_API = 12
#: the client's request timeout in these tests: a damaged size prefix that promises
#: more bytes than come is only noticed by it
REQUEST_TIMEOUT_MS = 400

_FUZZ = settings(max_examples=EXAMPLES_PER_API, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))  # fmt: skip


def _versions(api_key: int) -> tuple[int, int]:
    lo, hi = client_version_range(api_key)
    return lo, min(hi, 12)


def _flexible(api_key: int, version: int) -> bool:
    return bool(response_class(api_key, version).__flexible__) and api_key != 18


@st.composite
def bad_answers(draw: Any, api_key: int, version: int) -> Any:
    """A tamper for one response of ``api_key`` at ``version``: the frame the broker
    would send is replaced by a damaged, random, misaddressed or surprising one."""
    kind = draw(st.sampled_from(["damaged", "random", "correlation", "surprising"]))
    hang_up = draw(st.booleans())
    wrap = HangUp if hang_up else bytes
    if kind == "damaged":
        seed = draw(st.integers(0, 2**32 - 1))
        return lambda frame: wrap(mutate(frame, random.Random(seed)))
    if kind == "random":
        junk = draw(st.binary(max_size=64))
        prefixed = draw(st.booleans())
        return lambda frame: wrap((struct.pack(">i", len(junk)) + junk) if prefixed else junk)
    if kind == "correlation":
        delta = draw(st.integers(1, 2**31 - 1))
        return lambda frame: wrap(
            frame[:4] + struct.pack(">i", (struct.unpack_from(">i", frame, 4)[0] + delta) & 0x7FFFFFFF) + frame[8:]
        )
    resp = draw(st.from_type(response_class(api_key, version)))
    if hasattr(resp, "throttle_time"):
        # a throttle is honoured (KIP-219) however long: not what this test is about
        resp = dataclasses.replace(resp, throttle_time=datetime.timedelta(0))
    try:
        body = encode_body(resp)
    except Exception:  # noqa: BLE001 - a value kio cannot write is no response at all
        assume(False)
    tags = b"\x00" if _flexible(api_key, version) else b""

    def surprising(frame: bytes) -> bytes:
        data = frame[4:8] + tags + body
        return wrap(struct.pack(">i", len(data)) + data)

    return surprising


def _defaults(api_key: int, version: int, request: Any) -> Any:
    return build(response_class(api_key, version), {})


@pytest.fixture(scope="module")
def broker():
    """A fake broker that advertises every client API at every version kio has and
    answers each with its defaults."""
    apis = [(k, *_versions(k)) for k in CLIENT_APIS if k not in (0, 3, 18)]
    handlers = {k: functools.partial(_defaults, k) for k in CLIENT_APIS if k not in (0, 3, 18)}
    fb = FakeBroker(apis=apis, handlers=handlers)
    yield fb
    fb.close()


def _once(fb: FakeBroker, api_key: int, tamper: Any) -> None:
    """Tamper with the next response of ``api_key`` only."""
    lock = threading.Lock()
    used = [False]

    def hook(key: int, version: int, frame: bytes) -> bytes | None:
        with lock:
            if key != api_key or used[0]:
                return frame
            used[0] = True
        return tamper(frame)

    fb.tamper = hook


def _answers(client: KafkaClient) -> None:
    """The client is usable: a Metadata request gets its answer (a second one when the
    first went out on a connection the broker had just hung up). A connection the bad
    answer throttled (a damaged throttle_time, honoured as KIP-219 says) is waiting as
    told: nothing to ask it then."""
    now = client.clock.nanoseconds()
    if any(c.throttle_until_ns > now for c in client._conns.values()):
        return
    try:
        client.metadata([], timeout_ms=5_000)
    except KafkaError as exc:
        assert exc.retriable, repr(exc)
        client.metadata([], timeout_ms=5_000)


@pytest.mark.parametrize("api_key", CLIENT_APIS)
def test_a_bad_response_fails_its_request_and_the_client_goes_on(broker, api_key):
    lo, hi = _versions(api_key)

    @_FUZZ
    @given(st.data())
    def case(data: Any) -> None:
        version = data.draw(st.integers(lo, hi), label="version")
        tamper = data.draw(bad_answers(api_key, version), label="answer")
        with KafkaClient(broker.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS,
                         reconnect_backoff_ms=1, reconnect_backoff_max_ms=10) as client:  # fmt: skip
            client.await_ready(None, 5_000)
            _once(broker, api_key, tamper)
            try:
                client.request(api_key, {}, version=version, timeout_ms=REQUEST_TIMEOUT_MS * 4)
            except KafkaError:
                pass  # the error a bad response is: the request failed, nothing else
            broker.tamper = None
            _answers(client)

    case()


@pytest.mark.parametrize("api_key", [18, 17, 36])
def test_a_bad_handshake_fails_the_connection_setup_with_a_kafka_error(api_key):
    """ApiVersions (at every version the client asks at) and the SASL exchange answered
    badly: connecting fails with a Kafka error (an authentication error for SASL), and
    a client with the same settings connects once the broker behaves."""
    handlers = {
        17: lambda v, req: {"error_code": 0, "mechanisms": ["PLAIN"]},
        36: lambda v, req: {"error_code": 0, "auth_bytes": b""},
    }
    fb = FakeBroker(apis=[(17, 0, 1), (36, 0, 2)], handlers=handlers)
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "u", "sasl.password": "p"}  # fmt: skip
    versions = {18: (0, 3), 17: (1, 1), 36: (0, 2)}[api_key]
    try:

        @_FUZZ
        @given(st.data())
        def case(data: Any) -> None:
            version = data.draw(st.integers(*versions), label="version")
            tamper = data.draw(bad_answers(api_key, version), label="answer")
            _once(fb, api_key, tamper)
            with KafkaClient(fb.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS,
                             socket_connection_setup_timeout_ms=REQUEST_TIMEOUT_MS,
                             reconnect_backoff_ms=1, reconnect_backoff_max_ms=10, security=security) as client:
                try:
                    client.await_ready(None, 3_000)
                except KafkaError:
                    pass
            fb.tamper = None
            with KafkaClient(fb.bootstrap, security=security) as client:
                _answers(client)

        case()
    finally:
        fb.close()


def test_the_producer_lives_through_bad_responses(caplog):
    """The idempotent producer against a broker whose first ApiVersions, Metadata,
    InitProducerId and Produce answers are bad: every record's future ends with its
    offset or a Kafka error, flush returns, the sender thread never crashes. (An answer
    the producer must take at its word, such as ApiVersions without InitProducerId
    while enable.idempotence=true, is a fatal Kafka error that send() raises.)"""
    from tidegate.producer import Producer

    fb = FakeBroker(init_producer_id=True, topics={"t": 2})
    caplog.set_level(logging.ERROR, logger="tidegate.producer")
    try:

        @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.data())
        def case(data: Any) -> None:
            plan: dict[int, list[Any]] = {}
            for api_key, version in ((18, 3), (3, 12), (22, 4), (0, 9)):
                n = data.draw(st.integers(0, 2), label=f"bad answers to {api_key}")
                plan[api_key] = [data.draw(bad_answers(api_key, version)) for _ in range(n)]
            lock = threading.Lock()

            def hook(key: int, version: int, frame: bytes) -> bytes | None:
                with lock:
                    todo = plan.get(key)
                    tamper = todo.pop(0) if todo else None
                return frame if tamper is None else tamper(frame)

            fb.tamper = hook
            p = Producer({"bootstrap.servers": fb.bootstrap, "enable.idempotence": True, "acks": "all",
                          "linger.ms": 0, "request.timeout.ms": REQUEST_TIMEOUT_MS, "delivery.timeout.ms": 2_000,
                          "retry.backoff.ms": 10, "reconnect.backoff.ms": 1, "reconnect.backoff.max.ms": 10,
                          "max.block.ms": 1_000})  # fmt: skip
            sender = p._sender
            try:
                # (metadata naming brokers that cannot be reached strands the producer, as
                # it strands Kafka's until metadata.recovery.strategy rebootstraps: each
                # send then fails after max.block.ms)
                futures = [p.send("t", b"v%d" % i, partition=i % 2) for i in range(4)]
                assert p.flush(10) == 0
                for f in futures:
                    exc = f.exception(0)
                    assert exc is None or isinstance(exc, KafkaError), repr(exc)
                # the thread runs on, unless a fatal error (an InitProducerId error the
                # producer cannot go on after, say) ended it as it ends Kafka's
                assert sender.is_alive() or isinstance(sender.fatal_error, KafkaError)
            except KafkaError:
                # send() or flush() raised the producer's fatal error: a broker that
                # says it has no InitProducerId while enable.idempotence=true, say
                assert sender.fatal_error is not None
            finally:
                p.close(5)
                fb.tamper = None
            assert "crashed" not in caplog.text, caplog.text
            assert sender.fatal_error is None or isinstance(sender.fatal_error, KafkaError)

        case()
    finally:
        fb.close()
