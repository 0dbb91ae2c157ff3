"""A bounded slice of the fuzzer (tests/fuzz/fuzzer.py) on every CI run: structured
requests for every advertised (API, version), mutations of real clients' frames on a
PLAINTEXT listener and on a SASL listener before and after authentication, then the
whole-run properties (no traceback, memory within the pool bound, every segment valid).
The long run is ``python -m tests.fuzz.fuzzer --cases 100000``."""

from __future__ import annotations

import pytest

from tests.integration.clients import USERS, sasl_overrides
from tests.integration.rawclient import RawClient
from tidegate.protocol.apis import ApiKey

from .fuzzer import (
    FUZZ_OVERRIDES,
    Fuzzer,
    advertised,
    check_log_text,
    check_rss,
    check_segments,
    mutated_cases,
    record_client_frames,
    send_cases,
    start_recorded_broker,
    steered,
    steered_pairs,
    structured,
)

pytestmark = pytest.mark.timeout(300)

#: structured cases per (API, version): about 300 pairs, so a few thousand cases
EXAMPLES_PER_VERSION = 8
MUTATED_CASES = 1200
POOL_BYTES = int(FUZZ_OVERRIDES["queued.max.request.bytes"])


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    broker, proxy = start_recorded_broker(tmp_path_factory.mktemp("fuzz") / "data")
    fuzzer = Fuzzer("127.0.0.1", broker.port, broker.alive)
    try:
        corpus = record_client_frames(proxy)
        yield broker, fuzzer, corpus
    finally:
        fuzzer.close()
        proxy.close()
        broker.stop_or_kill()


@pytest.mark.parametrize(("api_key", "version"), advertised())
def test_structured_requests(target, api_key, version):
    _broker, fuzzer, _corpus = target
    send_cases(fuzzer, structured(api_key, version), EXAMPLES_PER_VERSION)


#: steered cases per (API, version) of the group APIs (about 20 pairs)
STEERED_EXAMPLES_PER_VERSION = 40


@pytest.mark.parametrize(("api_key", "version"), steered_pairs())
def test_steered_group_requests(target, api_key, version):
    """KIP-848's and KIP-932's APIs and the GROUP config resource with near-valid group
    ids, member ids, epochs, subscriptions, config keys and values: the coordinators'
    state machines and the group config validation, not only the request parsers."""
    _broker, fuzzer, _corpus = target
    send_cases(fuzzer, steered(api_key, version), STEERED_EXAMPLES_PER_VERSION)
    fuzzer.check_well_behaved_client()


def test_mutated_client_frames(target):
    _broker, fuzzer, corpus = target
    keys = {int.from_bytes(f[4:6], "big") for f in corpus}
    # the recorded corpus covers what the clients did: produce, fetch, groups, admin
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
            ApiKey.OFFSET_COMMIT, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_CONFIGS,
            ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE} <= keys, keys
    for i, data in enumerate(mutated_cases(corpus, seed=7, n=MUTATED_CASES)):
        fuzzer.send(data)
        if i % 250 == 0:
            fuzzer.check_well_behaved_client()
    o = fuzzer.outcomes
    assert o.closed > 0 and o.answered > 0  # both kinds of damage were met


def test_the_run_kept_every_promise(target):
    """After all the cases above: a well-behaved client still works, memory stayed within
    the request pool's bound plus a margin, the log has no traceback, and after a clean
    stop every segment passes recovery's validation."""
    broker, fuzzer, _corpus = target
    fuzzer.check_well_behaved_client()
    check_rss(broker.pid, POOL_BYTES)
    check_log_text(broker.log_text())
    assert broker.stop() == 0
    assert check_segments(broker.data_dir) >= 1


def _plain_login(c: RawClient) -> None:
    user, password = next(iter(USERS.items()))
    hs = c.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert hs.error_code == 0, hs
    auth = c.request(ApiKey.SASL_AUTHENTICATE, 2, {
        "auth_bytes": b"\0" + user.encode() + b"\0" + password.encode()})
    assert auth.error_code == 0, auth


@pytest.mark.parametrize("authenticated", [False, True], ids=["before-auth", "after-auth"])
def test_mutations_on_a_sasl_listener(tmp_path, target, authenticated):
    """On a SASL_PLAINTEXT listener the same damage arrives before authentication (the
    authenticator must refuse it with a close, never a crash) and after it."""
    _broker, _fuzzer, corpus = target
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", overrides={**FUZZ_OVERRIDES, **sasl_overrides(tmp_path)})
    broker.start()
    port = broker.listener_port("SASL_PLAINTEXT")
    try:
        fuzzer = Fuzzer("127.0.0.1", port, broker.alive,
                        authenticate=_plain_login if authenticated else None)
        for i, data in enumerate(mutated_cases(corpus, seed=11 + authenticated, n=300)):
            fuzzer.send(data)
            if authenticated and i % 100 == 0:
                fuzzer.check_well_behaved_client()
        fuzzer.close()
        health = Fuzzer("127.0.0.1", port, broker.alive, authenticate=_plain_login)
        health.check_well_behaved_client()
        health.close()
        check_log_text(broker.log_text())
    finally:
        broker.stop_or_kill()
