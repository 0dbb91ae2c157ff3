"""KIP-227 incremental fetch sessions: the sans-IO cache (the cases of Kafka's
FetchSessionTest) and the Fetch handler's session paths, over real logs."""

from __future__ import annotations

import os
import uuid
from itertools import count

import pytest

from tests.core_harness import CoreHarness
from tests.integration.rawclient import fetch_topics_body as fetch_body
from tests.unit.test_apis import FETCH, NOW, batch, batches_in
from tidegate.errors import ErrorCode
from tidegate.metrics.prometheus import BrokerMetrics
from tidegate.server.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    new_context,
    next_epoch,
)
from tidegate.utils import INT32_MAX


def dummy(size: int) -> dict:
    return {("t", i): CachedPartition(("t", i), 0, 100) for i in range(size)}


def contains(cache: FetchSessionCache, *ids: int) -> None:
    assert sorted(s.id for s in cache) == sorted(ids)


@pytest.fixture
def ids():
    return count(1).__next__


def test_next_epoch_wraps_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(5) == 6
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_session_cache_eviction_protects_young_and_larger_sessions(ids):
    """Kafka's FetchSessionTest.testSessionCache."""
    cache = FetchSessionCache(3, 100, id_source=ids)
    assert cache.size == 0
    id1 = cache.maybe_create_session(0, False, 10, True, lambda: dummy(10))
    id2 = cache.maybe_create_session(10, False, 20, True, lambda: dummy(20))
    id3 = cache.maybe_create_session(20, False, 30, True, lambda: dummy(30))
    # full, and every session younger than the eviction time: no room
    assert cache.maybe_create_session(30, False, 40, True, lambda: dummy(40)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(40, False, 5, True, lambda: dummy(5)) == INVALID_SESSION_ID
    contains(cache, id1, id2, id3)
    cache.touch(cache.get(id1), 200)
    # id2 went unused for longer than the eviction time: it goes
    id4 = cache.maybe_create_session(210, False, 11, True, lambda: dummy(11))
    contains(cache, id1, id3, id4)
    cache.touch(cache.get(id1), 400)
    cache.touch(cache.get(id3), 390)
    cache.touch(cache.get(id4), 400)
    # nothing stale: the least valuable old session (id1, 10 partitions) gives way to 50
    id5 = cache.maybe_create_session(410, False, 50, True, lambda: dummy(50))
    contains(cache, id3, id4, id5)
    # ... but not to a smaller one
    assert cache.maybe_create_session(410, False, 5, True, lambda: dummy(5)) == INVALID_SESSION_ID
    # a privileged (follower) session outranks every unprivileged one
    id6 = cache.maybe_create_session(410, True, 5, True, lambda: dummy(5))
    contains(cache, id3, id5, id6)
    assert cache.evictions_total == 3


def test_resize_cached_sessions_counts_partitions(ids):
    """Kafka's FetchSessionTest.testResizeCachedSessions."""
    cache = FetchSessionCache(2, 100, id_source=ids)
    assert (cache.total_partitions, cache.size, cache.evictions_total) == (0, 0, 0)
    id1 = cache.maybe_create_session(0, False, 2, True, lambda: dummy(2))
    session1 = cache.get(id1)
    assert session1 is not None and session1.size == 2
    assert (cache.total_partitions, cache.size, cache.evictions_total) == (2, 1, 0)
    id2 = cache.maybe_create_session(0, False, 4, True, lambda: dummy(4))
    session2 = cache.get(id2)
    assert session2 is not None
    contains(cache, id1, id2)
    assert (cache.total_partitions, cache.size, cache.evictions_total) == (6, 2, 0)
    cache.touch(session1, 200)
    cache.touch(session2, 200)
    id3 = cache.maybe_create_session(200, False, 5, True, lambda: dummy(5))
    contains(cache, id2, id3)
    assert (cache.total_partitions, cache.size, cache.evictions_total) == (9, 2, 1)
    cache.remove(id3)
    contains(cache, id2)
    assert (cache.total_partitions, cache.size, cache.evictions_total) == (4, 1, 1)
    del session2.partitions[next(iter(session2.partitions))]
    assert (session2.size, session2.cached_size) == (3, 4)
    cache.touch(session2, session2.last_used_ms)
    assert cache.total_partitions == 3


def test_privileged_session_is_protected_from_unprivileged_newcomers(ids):
    """A follower (privileged) session outranks every consumer session however large,
    young or old; only going unused for the eviction time lets a consumer take its slot."""
    cache = FetchSessionCache(1, 100, id_source=ids)
    follower = cache.maybe_create_session(0, True, 1, True, lambda: dummy(1))
    assert cache.maybe_create_session(10, False, 1000, True, lambda: dummy(1000)) == INVALID_SESSION_ID
    cache.touch(cache.get(follower), 150)  # older than the eviction time, but in use
    assert cache.maybe_create_session(160, False, 1000, True, lambda: dummy(1000)) == INVALID_SESSION_ID
    consumer = cache.maybe_create_session(251, False, 1, True, lambda: dummy(1))  # unused > 100 ms
    assert consumer != INVALID_SESSION_ID
    contains(cache, consumer)


def test_session_ids_are_nonzero_and_unique():
    draws = iter([0, 7, 7, 9])
    cache = FetchSessionCache(10, id_source=lambda: next(draws))
    assert cache.maybe_create_session(0, False, 1, False, lambda: dummy(1)) == 7
    assert cache.maybe_create_session(0, False, 1, False, lambda: dummy(1)) == 9


def test_zero_slots_never_create_a_session():
    cache = FetchSessionCache(0)
    assert cache.maybe_create_session(0, False, 1, False, lambda: dummy(1)) == INVALID_SESSION_ID


def test_new_context_paths(ids):
    cache = FetchSessionCache(10, id_source=ids)
    data = [(("t", 0), 5, 100, -1, -1)]
    assert new_context(cache, 0, 12, 0, FINAL_EPOCH, data, []).kind == "sessionless"
    assert new_context(cache, 0, 12, 0, 0, data, []).kind == "full"
    assert new_context(cache, 0, 12, 42, 1, data, []).error is ErrorCode.fetch_session_id_not_found
    sid = cache.maybe_create_session(0, False, 2, False, lambda: dummy(2))
    assert new_context(cache, 0, 12, sid, 5, [], []).error is ErrorCode.invalid_fetch_session_epoch
    # a session by names cannot be continued by ids (Fetch v13+) or back
    assert new_context(cache, 0, 13, sid, 1, [], []).error is ErrorCode.fetch_session_topic_id_error
    ctx = new_context(cache, 5, 12, sid, 1, [(("t", 0), 9, 50, -1, -1), (("t", 7), 0, 10, -1, -1)], [("t", 1)])
    assert ctx.kind == "incremental" and ctx.session is not None
    assert ctx.session.epoch == ctx.expected_epoch == 2
    assert list(ctx.session.partitions) == [("t", 0), ("t", 7)]
    assert ctx.session.partitions[("t", 0)].fetch_offset == 9
    assert cache.total_partitions == 2
    # forgetting every partition ends the session
    assert new_context(cache, 6, 12, sid, 2, [], [("t", 0), ("t", 7)]).kind == "sessionless"
    assert cache.get(sid) is None and cache.total_partitions == 0
    # a full request naming a session closes it
    sid = cache.maybe_create_session(0, False, 2, False, lambda: dummy(2))
    assert new_context(cache, 0, 12, sid, 0, data, []).kind == "full"
    assert cache.get(sid) is None


def test_cached_partition_must_respond_rules():
    cp = CachedPartition(("t", 0), 0, 100, high_watermark=10, log_start_offset=0)
    none = ErrorCode.none
    assert not cp.maybe_update_response_data(0, none, 10, 0, False, True)
    assert cp.maybe_update_response_data(100, none, 10, 0, False, True)  # records
    assert cp.maybe_update_response_data(0, none, 11, 0, False, True)  # high watermark moved
    assert not cp.maybe_update_response_data(0, none, 11, 0, False, True)
    assert cp.maybe_update_response_data(0, none, 11, 3, False, True)  # log start moved
    assert cp.maybe_update_response_data(0, none, 11, 3, True, True)  # diverging epoch
    # an error is always sent, and forgets the high watermark so recovery is sent too
    assert cp.maybe_update_response_data(0, ErrorCode.not_leader_or_follower, 11, 3, False, True)
    assert cp.maybe_update_response_data(0, none, 11, 3, False, True)
    # without update nothing is remembered
    assert cp.maybe_update_response_data(0, none, 12, 3, False, False)
    assert cp.high_watermark == 11


# ---------------------------------------------------------------------------
# The Fetch handler's session paths, over real logs


def parts_of(resp):
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


def fetch(h, version, topics, **kw):
    return h.request(FETCH, version, fetch_body(topics, **kw))


def test_full_then_incremental_answers_only_changed_partitions(h):
    h.create_topic("s", partitions=3)
    for p in range(3):
        h.produce("s", p, batch(b"x"))
    full = fetch(h, 12, [("s", None, [(p, 0, 1000) for p in range(3)])], session_epoch=0)
    assert full.error_code == ErrorCode.none and full.session_id != INVALID_SESSION_ID
    assert len(parts_of(full)) == 3
    sid = full.session_id
    assert h.apis.fetch_sessions.size == 1 and h.apis.fetch_sessions.total_partitions == 3
    # the client moved its offsets; nothing new since: an empty incremental response
    inc = fetch(h, 12, [("s", None, [(p, 1, 1000) for p in range(3)])], session_id=sid, session_epoch=1)
    assert (inc.error_code, inc.session_id, inc.responses) == (ErrorCode.none, sid, ())
    # one partition gets a record: only it is answered, with its records, though the
    # request names no partition at all
    h.produce("s", 1, batch(b"y"))
    inc = fetch(h, 12, [], session_id=sid, session_epoch=2)
    got = parts_of(inc)
    assert list(got) == [("s", 1)]
    assert [b for b, _, _ in batches_in(got[("s", 1)].records)] == [1]
    assert got[("s", 1)].high_watermark == 2
    # epochs: a repeat of the last epoch, or a skipped one, is refused
    for epoch in (2, 9):
        bad = fetch(h, 12, [], session_id=sid, session_epoch=epoch)
        assert bad.error_code == ErrorCode.invalid_fetch_session_epoch and bad.responses == ()
    ok = fetch(h, 12, [("s", None, [(1, 2, 1000)])], session_id=sid, session_epoch=3)
    assert ok.error_code == ErrorCode.none and ok.responses == ()


def test_unknown_session_id(h):
    resp = fetch(h, 12, [], session_id=12345, session_epoch=1)
    assert (resp.error_code, resp.session_id) == (ErrorCode.fetch_session_id_not_found, 0)


def test_sessionless_fetch_and_versions_before_7_open_no_session(h):
    h.create_topic("s")
    assert fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_epoch=-1).session_id == 0
    assert h.apis.fetch_sessions.size == 0


def test_forgotten_partitions_leave_the_session_and_the_last_one_closes_it(h):
    h.create_topic("s", partitions=2)
    sid = fetch(h, 12, [("s", None, [(0, 0, 1000), (1, 0, 1000)])], session_epoch=0).session_id
    h.produce("s", 0, batch(b"a"))
    h.produce("s", 1, batch(b"b"))
    inc = fetch(h, 12, [], session_id=sid, session_epoch=1, forgotten=[("s", None, [0])])
    assert list(parts_of(inc)) == [("s", 1)]
    assert h.apis.fetch_sessions.total_partitions == 1
    inc = fetch(h, 12, [], session_id=sid, session_epoch=2, forgotten=[("s", None, [1])])
    assert (inc.error_code, inc.session_id, inc.responses) == (ErrorCode.none, 0, ())
    assert h.apis.fetch_sessions.size == 0


def test_full_fetch_naming_a_session_closes_it_and_final_epoch_opens_none(h):
    h.create_topic("s")
    sid = fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_epoch=0).session_id
    resp = fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_id=sid, session_epoch=-1)
    assert resp.session_id == 0 and h.apis.fetch_sessions.size == 0
    assert fetch(h, 12, [], session_id=sid, session_epoch=1).error_code == ErrorCode.fetch_session_id_not_found


def test_sessions_by_topic_id_and_unknown_topic_id(h):
    tid = h.create_topic("s")
    ghost = uuid.uuid4()
    full = fetch(h, 13, [(None, tid, [(0, 0, 1000)]), (None, ghost, [(0, 0, 1000)])], session_epoch=0)
    got = {(t.topic_id, p.partition_index): p.error_code for t in full.responses for p in t.partitions}
    assert got == {(tid, 0): ErrorCode.none, (ghost, 0): ErrorCode.unknown_topic_id}
    sid = full.session_id
    # the unknown id is answered on every poll (an error always is); the known one only
    # when it changes
    inc = fetch(h, 13, [], session_id=sid, session_epoch=1)
    assert [(t.topic_id, p.error_code) for t in inc.responses for p in t.partitions] == [
        (ghost, ErrorCode.unknown_topic_id)
    ]
    # a session by ids cannot be continued by names
    bad = fetch(h, 12, [], session_id=sid, session_epoch=2)
    assert bad.error_code == ErrorCode.fetch_session_topic_id_error


def test_full_cache_answers_sessionless(tmp_path):
    h = CoreHarness(tmp_path / "data", {"max.incremental.fetch.session.cache.slots": 1})
    try:
        h.create_topic("s")
        assert fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_epoch=0).session_id != 0
        assert fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_epoch=0).session_id == 0
    finally:
        h.close()


def test_parked_incremental_fetch_watches_the_session_partitions(h):
    """The long poll of an incremental request that names no partition waits on the
    session's partitions, and an append to one of them answers it."""
    h.create_topic("s", partitions=2)
    sid = fetch(h, 12, [("s", None, [(0, 0, 1000), (1, 0, 1000)])], session_epoch=0).session_id
    request, cid = h.park(FETCH, 12, fetch_body([], session_id=sid, session_epoch=1, max_wait=10_000))
    h.loop.advance(50)
    assert h.channel.response_to(request) is None
    h.produce("s", 1, batch(b"wake"))
    resp = h.answer(request, cid)
    assert list(parts_of(resp)) == [("s", 1)]
    # an idle long poll times out empty
    request, cid = h.park(FETCH, 12, fetch_body([("s", None, [(1, 1, 1000)])], session_id=sid,
                                               session_epoch=2, max_wait=300))
    start = h.clock.milliseconds()
    resp = h.answer(request, cid, within_ms=1000)
    assert h.clock.milliseconds() - start == 300 and resp.responses == ()


def test_partition_with_records_moves_to_the_end_of_the_session(h):
    h.create_topic("s", partitions=3)
    sid = fetch(h, 12, [("s", None, [(p, 0, 1000) for p in range(3)])], session_epoch=0).session_id
    h.produce("s", 0, batch(b"a"))
    fetch(h, 12, [], session_id=sid, session_epoch=1)
    session = h.apis.fetch_sessions.get(sid)
    assert [k[1] for k in session.partitions] == [1, 2, 0]


def test_cache_metrics_under_kafka_names(ids):
    bm = BrokerMetrics()
    cache = FetchSessionCache(1, 100, id_source=ids)
    bm.register_fetch_sessions(cache)

    def value(name):
        return bm.registry.get_sample_value(name)

    base = "kafka_server_fetchsessioncache_"
    assert value(base + "numincrementalfetchsessions") == 0
    cache.maybe_create_session(0, False, 3, False, lambda: dummy(3))
    cache.maybe_create_session(500, False, 4, False, lambda: dummy(4))  # evicts the stale one
    assert value(base + "numincrementalfetchsessions") == 1
    assert value(base + "numincrementalfetchpartitionscached") == 4
    assert value(base + "incrementalfetchsessionevictions_total") == 1


def test_client_session_handler_sends_only_changes_and_recovers():
    from tidegate.client.fetcher import FetchSessionHandler, PartitionFetch

    s = FetchSessionHandler()
    wanted = {("t", 0): (0, 100), ("t", 1): (5, 100)}
    assert s.build(wanted) == (wanted, []) and s.epoch == 0
    s.handle_response(0, 77)
    assert (s.session_id, s.epoch) == (77, 1)
    got = {("t", 0): PartitionFetch(0, 3, 0, b"xyz", 3, None), ("t", 1): PartitionFetch(0, 5, 0, b"", 5, None)}
    s.fill(wanted, got)
    # the next request names only the moved partition, and forgets a dropped one
    assert s.build({("t", 0): (3, 100)}) == ({("t", 0): (3, 100)}, [("t", 1)])
    s.handle_response(0, 77)
    assert s.epoch == 2
    # an absent partition had nothing new: no records, its last offsets
    out: dict = {}
    s.fill([("t", 0)], out)
    assert out[("t", 0)].records == b"" and out[("t", 0)].high_watermark == 3
    # an epoch error closes the session with the next full request; a lost session
    # starts over; no session given keeps asking with full requests
    s.handle_response(ErrorCode.invalid_fetch_session_epoch.value, 0)
    assert (s.session_id, s.epoch) == (77, 0)
    s.handle_response(ErrorCode.fetch_session_id_not_found.value, 0)
    assert (s.session_id, s.epoch) == (0, 0)
    s.handle_response(0, 0)
    assert (s.session_id, s.epoch) == (0, 0)


def test_a_full_cache_evicts_the_stale_session_and_keeps_the_young_one(tmp_path):
    """Kafka's eviction rules through the Fetch handler, on the broker's own clock: with
    two slots, a session S unused for more than min.incremental.fetch.session.eviction.ms
    (120 s) is stale and gives way to any newcomer; a young session Y, created and reused
    within that time, is protected even from a newcomer with more partitions. Every
    session here is reused once by an incremental fetch (a touch), so creation and last
    use must come from the same clock."""
    h = CoreHarness(tmp_path / "data", {"max.incremental.fetch.session.cache.slots": 2})
    try:
        h.create_topic("s", partitions=3)
        s_id = fetch(h, 12, [("s", None, [(p, 0, 1000) for p in range(3)])], session_epoch=0).session_id
        assert fetch(h, 12, [], session_id=s_id, session_epoch=1).error_code == ErrorCode.none
        h.loop.advance(100_000)
        y_id = fetch(h, 12, [("s", None, [(0, 0, 1000)])], session_epoch=0).session_id
        assert fetch(h, 12, [], session_id=y_id, session_epoch=1).error_code == ErrorCode.none
        assert 0 not in (s_id, y_id)
        h.loop.advance(30_000)  # S last used 130 s ago (stale), Y 30 s ago (young)
        n_id = fetch(h, 12, [("s", None, [(1, 0, 1000), (2, 0, 1000)])], session_epoch=0).session_id
        assert n_id != INVALID_SESSION_ID
        assert sorted(s.id for s in h.apis.fetch_sessions) == sorted([y_id, n_id])
        assert fetch(h, 12, [], session_id=s_id, session_epoch=2).error_code == ErrorCode.fetch_session_id_not_found
        assert fetch(h, 12, [], session_id=y_id, session_epoch=2).error_code == ErrorCode.none
        # nothing stale now, and both sessions are young: a larger newcomer evicts neither
        h.loop.advance(1_000)
        big = fetch(h, 12, [("s", None, [(p, 0, 1000) for p in range(3)])], session_epoch=0)
        assert big.session_id == INVALID_SESSION_ID
        assert sorted(s.id for s in h.apis.fetch_sessions) == sorted([y_id, n_id])
        assert h.apis.fetch_sessions.evictions_total == 1
    finally:
        h.close()


@pytest.mark.parametrize("version", [12, 15])
def test_a_follower_session_is_privileged(h, version):
    h.create_topic("s")
    body = fetch_body([("s", None, [(0, 0, 1000)])], session_epoch=0)
    body["replica_id"] = 1
    body["replica_state"] = {"replica_id": 1, "replica_epoch": -1}
    sid = h.request(FETCH, version, body).session_id
    assert h.apis.fetch_sessions.get(sid).privileged
    consumer = fetch(h, version, [("s", None, [(0, 0, 1000)])], session_epoch=0).session_id
    assert not h.apis.fetch_sessions.get(consumer).privileged


# -- change tracking: an idle incremental fetch costs O(changed), not O(partitions) ----------


def tracked(cache: FetchSessionCache, size: int, now: int = 0):
    """A session of ``size`` partitions of topic t, each reading the log ("t", i), all
    settled (nothing to read until a log changes)."""
    def parts():
        out = dummy(size)
        for key, cp in out.items():
            cp.tp = key
        return out

    session = cache.get(cache.maybe_create_session(now, False, size, False, parts))
    assert session.dirty == set(session.partitions)  # untracked: everything is read
    cache.track(session, [], False)
    return session


def test_log_changes_mark_the_partition_dirty_in_the_sessions_that_hold_it(ids):
    cache = FetchSessionCache(10, id_source=ids)
    a, b = tracked(cache, 5), tracked(cache, 3)
    assert a.dirty == b.dirty == set()
    assert cache.partition_changed(("t", 4)) == [a]
    assert sorted(s.id for s in cache.partition_changed(("t", 1))) == [a.id, b.id]
    assert cache.partition_changed(("u", 0)) == []
    assert a.dirty == {("t", 1), ("t", 4)} and b.dirty == {("t", 1)}
    # a read partition settles only when nothing is left to tell
    class R:
        error = ErrorCode.none
        diverging_epoch = None
        records = b""
        high_watermark = last_stable_offset = 0
    a.settle(a.partitions[("t", 1)], R, False)
    assert a.dirty == {("t", 4)}
    R.high_watermark = 7  # data behind the fetch offset (a response size limit): stays
    a.settle(a.partitions[("t", 4)], R, False)
    assert a.dirty == {("t", 4)}
    R.high_watermark, R.error = 0, ErrorCode.unknown_topic_or_partition  # errors always stay
    a.settle(a.partitions[("t", 4)], R, False)
    assert a.dirty == {("t", 4)}
    # a request's new and changed partitions are dirty; forgotten ones are no longer watched
    new_context(cache, 1, 12, a.id, a.epoch, [(("t", 0), 3, 100, -1, -1), (("t", 9), 0, 100, -1, -1)],
                [("t", 3)])
    assert a.dirty == {("t", 0), ("t", 4), ("t", 9)}
    assert cache.partition_changed(("t", 3)) == []
    # dirty partitions are read in the session's fetch order, which move_to_end rotates
    a.move_to_end(("t", 0))
    assert [cp.key[1] for cp in a.dirty_in_order()] == [4, 9, 0]
    # a removed session is watched no more
    cache.remove(a.id)
    assert cache.partition_changed(("t", 1)) == [b]


def reads(h):
    """Count the partitions each read_from_log call reads (list of counts)."""
    counts: list[int] = []
    real = h.apis.replicas.read_from_log

    def counting(params, partitions, batch=None):
        counts.append(len(partitions))
        return real(params, partitions, batch)

    h.apis.replicas.read_from_log = counting
    return counts


def test_idle_poll_of_a_2000_partition_session_reads_nothing_and_an_append_wakes_it(h):
    """The long poll of an idle session waits on one purgatory key and reads no
    partition; an append to one of its 2,000 partitions completes it with just that
    partition, read alone."""
    n = 2000
    proc = os.path.isdir("/proc/self/fd")
    fds_before = len(os.listdir("/proc/self/fd")) if proc else 0
    h.create_topic("big", partitions=n)
    if proc:  # lazy index files: each partition holds its segment log and directory open
        assert len(os.listdir("/proc/self/fd")) - fds_before <= 2 * n + 10
    full = fetch(h, 12, [("big", None, [(p, 0, 1000) for p in range(n)])], session_epoch=0)
    sid = full.session_id
    assert len(parts_of(full)) == n
    session = h.apis.fetch_sessions.get(sid)
    assert session.dirty == set()
    counts = reads(h)
    request, cid = h.park(FETCH, 12, fetch_body([], session_id=sid, session_epoch=1, max_wait=10_000))
    h.loop.advance(50)
    assert h.channel.response_to(request) is None
    assert counts == [0]
    assert h.apis.replicas.fetch_purgatory.watched_keys() == [("fetch-session", sid)]
    h.produce("big", 1234, batch(b"wake"))
    resp = h.answer(request, cid)
    assert list(parts_of(resp)) == [("big", 1234)]
    assert [b for b, _, _ in batches_in(parts_of(resp)[("big", 1234)].records)] == [0]
    assert counts == [0, 1]
    # the records told, the partition stays dirty until the client moves past them
    assert session.dirty == {("big", 1234)}
    resp = fetch(h, 12, [("big", None, [(1234, 1, 1000)])], session_id=sid, session_epoch=2)
    assert resp.responses == () and session.dirty == set()
    # an idle long poll expires empty, having read nothing
    request, cid = h.park(FETCH, 12, fetch_body([], session_id=sid, session_epoch=3, max_wait=200))
    assert h.answer(request, cid, within_ms=1000).responses == ()
    assert counts == [0, 1, 1, 0, 0]


def test_a_new_log_start_offset_reaches_the_incremental_response(h):
    """DeleteRecords moves a partition's log start offset: the next incremental fetch
    reports it (Kafka's maybeUpdateResponseData), though nothing was appended."""
    h.create_topic("s", partitions=3)
    for _ in range(2):
        h.produce("s", 2, batch(b"x"))
    sid = fetch(h, 12, [("s", None, [(p, 2 if p == 2 else 0, 1000) for p in range(3)])],
                session_epoch=0).session_id
    assert fetch(h, 12, [], session_id=sid, session_epoch=1).responses == ()
    done = []
    h.apis.replicas.delete_records({("s", 2): 1}, done.append)
    h.loop.advance(10)
    got = parts_of(fetch(h, 12, [], session_id=sid, session_epoch=2))
    assert list(got) == [("s", 2)] and got[("s", 2)].log_start_offset == 1
    assert fetch(h, 12, [], session_id=sid, session_epoch=3).responses == ()


def test_a_log_start_offset_moved_by_retention_reaches_the_incremental_response(tmp_path):
    h = CoreHarness(tmp_path / "d", {"log.retention.check.interval.ms": "1000"})
    try:
        h.create_topic("t", partitions=2, configs={"retention.ms": "30000"})
        for i in range(3):
            assert h.produce("t", 0, batch(b"v%d" % i, ts=NOW - 60_000)).error_code == ErrorCode.none
        full = fetch(h, 12, [("t", None, [(0, 3, 1000), (1, 0, 1000)])], session_epoch=0)
        assert parts_of(full)[("t", 0)].log_start_offset == 0
        sid = full.session_id
        assert fetch(h, 12, [], session_id=sid, session_epoch=1).responses == ()
        h.loop.advance(2000)  # a retention pass deletes the old segments
        assert h.replicas.get_log("t", 0).log_start_offset == 3
        got = parts_of(fetch(h, 12, [], session_id=sid, session_epoch=2))
        assert list(got) == [("t", 0)] and got[("t", 0)].log_start_offset == 3
    finally:
        h.close()


def test_partitions_left_behind_by_the_response_limit_are_read_again(h):
    """A response's max_bytes lets only the first partition's batch through: the others
    still have data behind their fetch offsets, so they stay dirty and come next, as
    Kafka's incremental fetch (which reads every partition) would send them."""
    h.create_topic("s", partitions=3)
    for p in range(3):
        h.produce("s", p, batch(b"v", size=200))
    full = fetch(h, 12, [("s", None, [(p, 0, 1000) for p in range(3)])], session_epoch=0, max_bytes=10)
    got = parts_of(full)
    assert [k for k, p in got.items() if p.records] == [("s", 0)]
    sid = full.session_id
    seen = [("s", 0)]
    for epoch in (1, 2, 3):
        moved = [("s", None, [(seen[-1][1], 1, 1000)])]
        inc = parts_of(fetch(h, 12, moved, session_id=sid, session_epoch=epoch, max_bytes=10))
        seen += [k for k, p in inc.items() if p.records]
    assert seen == [("s", 0), ("s", 1), ("s", 2)]
    assert h.apis.fetch_sessions.get(sid).dirty == set()
