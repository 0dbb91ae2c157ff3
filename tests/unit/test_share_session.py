"""Share sessions (KIP-932, reference 2.6): the cache, the epochs of ShareFetch and
ShareAcknowledge, release on close and on disconnect; and the validation of
acknowledgement batches (reference 2.5).

Named after Kafka's ``ShareSessionCacheTest``, ``SharePartitionManagerTest`` (SPMT) and
``ShareFetchAcknowledgeRequestTest`` (SFART); numbers are items of section 4 of
../shared/reference/kafka-4-groups.md.
"""

from __future__ import annotations

import uuid

import pytest

from tests.unit.share_helpers import MEMBER_ID, Env, acquire, records
from tidegate.errors import ErrorCode
from tidegate.server.share import (
    AcknowledgeType,
    RecordState,
    ShareAcknowledgementBatch,
    ShareResult,
    ShareSessionCache,
    ShareSessionKey,
    acknowledge_session_update,
    new_context,
    release_session,
    validate_acknowledgement_batches,
)
from tidegate.server.share.session import FINAL_EPOCH, INITIAL_EPOCH

TOPIC = uuid.UUID(int=7)
OTHER_TOPIC = uuid.UUID(int=8)


def parts(n: int, topic: uuid.UUID = TOPIC) -> list[tuple[uuid.UUID, int]]:
    return [(topic, i) for i in range(n)]


class Listener:
    """A ShareGroupListener that records its calls."""

    def __init__(self) -> None:
        self.left: list[tuple[str, str]] = []
        self.empty: list[str] = []

    def on_member_leave(self, group_id: str, member_id: str) -> None:
        self.left.append((group_id, member_id))

    def on_group_empty(self, group_id: str) -> None:
        self.empty.append(group_id)


def member() -> str:
    return str(uuid.uuid4())


# -- ShareSessionCacheTest ------------------------------------------------------------------


def test_share_session_cache():
    """ShareSessionCacheTest testShareSessionCache: full at max entries, no eviction."""
    cache = ShareSessionCache(3)
    keys = [cache.maybe_create_session("grp", member(), parts(n), f"conn-{n}") for n in (10, 20, 30)]
    assert all(keys)
    assert cache.maybe_create_session("grp", member(), parts(40), "conn-4") is None
    assert cache.maybe_create_session("grp", member(), parts(5), "conn-5") is None
    assert [cache.get(k).size for k in keys] == [10, 20, 30]
    assert (cache.size, cache.num_partitions, cache.evictions) == (3, 60, 0)


def test_resize_cached_sessions():
    """ShareSessionCacheTest testResizeCachedSessions: the partition count follows."""
    cache = ShareSessionCache(2)
    key1 = cache.maybe_create_session("grp", member(), parts(2), "conn-1")
    assert (cache.size, cache.num_partitions) == (1, 2)
    key2 = cache.maybe_create_session("grp", member(), parts(4), "conn-2")
    assert (cache.size, cache.num_partitions) == (2, 6)
    assert cache.maybe_create_session("grp", member(), parts(5), "conn-3") is None
    cache.remove(key1)
    assert (cache.size, cache.num_partitions) == (1, 4)
    session2 = cache.get(key2)
    session2.update([], parts(1))
    assert (session2.size, session2.cached_size, cache.num_partitions) == (3, 4, 4)
    cache.update_num_partitions(session2)
    assert (session2.cached_size, cache.num_partitions) == (3, 3)


def test_remove_connection():
    """53. ShareSessionCacheTest testRemoveConnection / SFART
    testShareSessionEvictedOnConnectionDrop: a closed connection frees its session."""
    cache = ShareSessionCache(3)
    key1 = cache.maybe_create_session("grp", member(), parts(1), "conn-1")
    key2 = cache.maybe_create_session("grp", member(), parts(2), "conn-2")
    key3 = cache.maybe_create_session("grp", member(), parts(3), "conn-3")
    assert cache.maybe_create_session("grp", member(), parts(40), "conn-4") is None
    assert cache.on_disconnect("conn-1") == key1
    assert (cache.size, cache.num_partitions, cache.evictions) == (2, 5, 1)
    key4 = cache.maybe_create_session("grp", member(), parts(4), "conn-6")
    assert {key2, key3, key4} == {k for k in (key2, key3, key4) if cache.get(k) is not None}
    assert (cache.size, cache.num_partitions, cache.evictions) == (3, 9, 1)


def test_remove_all_sessions():
    """ShareSessionCacheTest testRemoveAllSessions."""
    cache = ShareSessionCache(3)
    for n in (10, 20, 30):
        cache.maybe_create_session("grp", member(), parts(n), f"conn-{n}")
    cache.remove_all_sessions()
    assert (cache.size, cache.num_partitions) == (0, 0)


def test_share_group_listener_events():
    """ShareSessionCacheTest testShareGroupListenerEvents: a disconnect is a member
    leaving; the last one leaving empties the group; a session already ended by a newer
    one of the same member is not dropped by the old connection."""
    listener = Listener()
    cache = ShareSessionCache(3, listener)
    m1, m2 = member(), member()
    key1 = cache.maybe_create_session("grp", m1, parts(1), "conn-1")
    cache.maybe_create_session("grp", m2, parts(1), "conn-2")
    assert cache.num_members("grp") == 2
    cache.remove(key1)
    assert listener.left == [] and cache.num_members("grp") == 1
    cache.maybe_create_session("grp", m1, parts(1), "conn-1")
    assert cache.num_members("grp") == 2
    cache.on_disconnect("conn-1")
    assert listener.left == [("grp", m1)] and listener.empty == []
    assert cache.num_members("grp") == 1
    cache.on_disconnect("conn-2")
    assert listener.left == [("grp", m1), ("grp", m2)] and listener.empty == ["grp"]
    assert cache.num_members("grp") is None


def test_share_group_listener_events_multiple_groups():
    """ShareSessionCacheTest testShareGroupListenerEventsMultipleGroups."""
    listener = Listener()
    cache = ShareSessionCache(3, listener)
    m1, m2 = member(), member()
    cache.maybe_create_session("grp1", m1, parts(1), "conn-1")
    cache.maybe_create_session("grp2", m2, parts(1), "conn-2")
    cache.on_disconnect("conn-1")
    assert listener.left == [("grp1", m1)] and listener.empty == ["grp1"]
    assert cache.num_members("grp1") is None and cache.num_members("grp2") == 1


def test_share_group_listener_events_on_stale_session():
    """ShareSessionCacheTest testShareGroupListenerEventsOnStaleSession: a session closed by
    the client (final epoch): its connection closing is no member leave, but empties the
    group."""
    listener = Listener()
    cache = ShareSessionCache(3, listener)
    key = cache.maybe_create_session("grp", member(), parts(1), "conn-1")
    cache.remove(key)
    assert cache.num_members("grp") == 0
    assert cache.on_disconnect("conn-1") is None
    assert listener.left == [] and listener.empty == ["grp"]


def test_no_share_group_listener_registered():
    """ShareSessionCacheTest testNoShareGroupListenerRegistered."""
    cache = ShareSessionCache(3)
    key = cache.maybe_create_session("grp", member(), parts(1), "conn-1")
    assert cache.on_disconnect("conn-1") == key
    assert cache.num_members("grp") is None
    assert cache.on_disconnect("conn-unknown") is None


# -- ShareFetch / ShareAcknowledge session epochs (SPMT newContext, SFART) -----------------------


def test_new_context_throws_error_when_share_session_not_found_on_final_epoch():
    """SPMT testNewContextThrowsErrorWhenShareSessionNotFoundOnFinalEpoch."""
    cache = ShareSessionCache(10)
    ctx = new_context(cache, "grp", member(), FINAL_EPOCH, [], [], False, "c")
    assert ctx.error is ErrorCode.share_session_not_found


def test_share_fetch_initial_epoch_with_acknowledgements():
    """52. SFART testShareFetchInitialEpochWithAcknowledgements / SPMT
    testNewContextThrowsErrorWhenAcknowledgeDataPresentOnInitialEpoch."""
    cache = ShareSessionCache(10)
    ctx = new_context(cache, "grp", member(), INITIAL_EPOCH, parts(1), [], True, "c")
    assert ctx.error is ErrorCode.invalid_request
    assert cache.size == 0


def test_new_context_throws_error_when_share_session_cache_is_full_on_initial_epoch():
    """53. SPMT testNewContextThrowsErrorWhenShareSessionCacheIsFullOnInitialEpoch."""
    cache = ShareSessionCache(1)
    assert new_context(cache, "grp", member(), INITIAL_EPOCH, parts(2), [], False, "c1").initial
    ctx = new_context(cache, "grp", member(), INITIAL_EPOCH, parts(2), [], False, "c2")
    assert ctx.error is ErrorCode.share_session_limit_reached


def test_new_context_existing_session_new_request_with_initial_epoch():
    """SPMT testNewContextExistingSessionNewRequestWithInitialEpoch: epoch 0 again replaces
    the member's session (even with the cache full)."""
    cache = ShareSessionCache(1)
    m = member()
    first = new_context(cache, "grp", m, INITIAL_EPOCH, parts(2), [], False, "c")
    first.session.epoch = 5
    second = new_context(cache, "grp", m, INITIAL_EPOCH, parts(2), [], False, "c")
    assert second.initial and second.session is not first.session
    assert cache.size == 1 and second.session.epoch == 1


def test_share_fetch_request_invalid_share_session_epoch():
    """52. SFART testShareFetchRequestInvalidShareSessionEpoch: a skipped epoch."""
    cache = ShareSessionCache(10)
    m = member()
    new_context(cache, "grp", m, INITIAL_EPOCH, parts(1), [], False, "c")
    assert new_context(cache, "grp", m, 1, parts(1), [], False, "c").error is ErrorCode.none
    assert new_context(cache, "grp", m, 3, parts(1), [], False, "c").error is ErrorCode.invalid_share_session_epoch
    assert new_context(cache, "grp", m, 2, parts(1), [], False, "c").error is ErrorCode.none


def test_share_fetch_request_share_session_not_found():
    """52. SFART testShareFetchRequestShareSessionNotFound: another member id."""
    cache = ShareSessionCache(10)
    new_context(cache, "grp", member(), INITIAL_EPOCH, parts(1), [], False, "c")
    assert new_context(cache, "grp", member(), 1, parts(1), [], False, "c").error is \
        ErrorCode.share_session_not_found
    assert new_context(cache, "grp-2", member(), 1, parts(1), [], False, "c").error is \
        ErrorCode.share_session_not_found


def test_share_acknowledge_initial_request_error():
    """52. SFART testShareAcknowledgeInitialRequestError / ...InvalidShareSessionEpoch /
    ...ShareSessionNotFound."""
    cache = ShareSessionCache(10)
    m = member()
    assert acknowledge_session_update(cache, "grp", m, INITIAL_EPOCH) is ErrorCode.invalid_share_session_epoch
    assert acknowledge_session_update(cache, "grp", m, 1) is ErrorCode.share_session_not_found
    new_context(cache, "grp", m, INITIAL_EPOCH, parts(1), [], False, "c")
    assert acknowledge_session_update(cache, "grp", m, 2) is ErrorCode.invalid_share_session_epoch
    assert acknowledge_session_update(cache, "grp", m, 1) is ErrorCode.none
    assert new_context(cache, "grp", m, 2, [], [], False, "c").error is ErrorCode.none  # the ack advanced it
    assert acknowledge_session_update(cache, "grp", m, FINAL_EPOCH) is ErrorCode.none
    assert cache.get(ShareSessionKey("grp", m)).epoch == 3  # the final epoch does not advance it


def test_share_session_epoch_wraps_to_one():
    """2.6: after 2147483647 comes 1 (never 0, the initial epoch)."""
    cache = ShareSessionCache(10)
    m = member()
    ctx = new_context(cache, "grp", m, INITIAL_EPOCH, parts(1), [], False, "c")
    ctx.session.epoch = 2**31 - 1
    assert new_context(cache, "grp", m, 2**31 - 1, [], [], False, "c").error is ErrorCode.none
    assert ctx.session.epoch == 1


def test_share_fetch_request_forget_topic_partitions():
    """54. SFART testShareFetchRequestForgetTopicPartitions: forgotten partitions leave the
    session; added ones join; the count follows."""
    cache = ShareSessionCache(10)
    m = member()
    ctx = new_context(cache, "grp", m, INITIAL_EPOCH, parts(2), [], False, "c")
    assert list(ctx.session.partitions) == parts(2) and cache.num_partitions == 2
    new_context(cache, "grp", m, 1, [(OTHER_TOPIC, 0)], [(TOPIC, 1)], False, "c")
    assert list(ctx.session.partitions) == [(TOPIC, 0), (OTHER_TOPIC, 0)]
    assert cache.num_partitions == 2
    assert ctx.session.update([(TOPIC, 0)], [(TOPIC, 9)]) == ([], [(TOPIC, 0)], [])


# -- release of a member's records (SPMT testReleaseSession*, SFART testShareSessionCloseWith*) ----


def _release(cache, group, m, lookup):
    out = []
    release_session(cache, group, m, lookup, lambda code, results: out.append((code, results)))
    assert len(out) == 1
    return out[0]


def test_release_session_success():
    """54. SPMT testReleaseSessionSuccess: each partition of the session releases the
    member's records; a failed release and a partition without share-partition report
    their errors."""
    env, failing = Env(), Env()
    sp1 = env.partition()
    sp2 = failing.partition()
    acquire(sp1, records(0, 5), 5)
    acquire(sp2, records(0, 5), 5)
    failing.persister.fail_writes = ErrorCode.group_id_not_found
    cache = ShareSessionCache(10)
    tp1, tp2, tp3 = (TOPIC, 0), (TOPIC, 2), (OTHER_TOPIC, 4)
    new_context(cache, "grp", MEMBER_ID, INITIAL_EPOCH, [tp1, tp2, tp3], [], False, "c")
    code, results = _release(cache, "grp", MEMBER_ID, {tp1: sp1, tp2: sp2}.get)
    assert code is ErrorCode.none
    assert results[tp1] == ShareResult()
    assert results[tp2].error is ErrorCode.group_id_not_found
    assert results[tp3] == ShareResult(ErrorCode.unknown_topic_or_partition)
    assert sp1.batch_at(0).record_state() is RecordState.AVAILABLE
    assert sp2.batch_at(0).record_state() is RecordState.ACQUIRED
    assert cache.size == 0


def test_release_session_with_incorrect_group_or_member_id():
    """SPMT testReleaseSessionWithIncorrectGroupId / ...MemberId."""
    cache = ShareSessionCache(10)
    new_context(cache, "grp", MEMBER_ID, INITIAL_EPOCH, parts(1), [], False, "c")
    assert _release(cache, "grp-2", MEMBER_ID, lambda tp: None) == (ErrorCode.share_session_not_found, {})
    assert _release(cache, "grp", member(), lambda tp: None) == (ErrorCode.share_session_not_found, {})
    assert cache.size == 1


def test_release_session_with_empty_topic_partitions():
    """SPMT testReleaseSessionWithEmptyTopicPartitions."""
    cache = ShareSessionCache(10)
    new_context(cache, "grp", MEMBER_ID, INITIAL_EPOCH, [], [], False, "c")
    assert _release(cache, "grp", MEMBER_ID, lambda tp: None) == (ErrorCode.none, {})


def test_share_session_close_with_share_fetch_releases_and_redelivers():
    """54. SFART testShareSessionCloseWithShareFetch: the final epoch closes the session
    and the member's records are redelivered to another member at count 2."""
    env = Env()
    sp = env.partition()
    cache = ShareSessionCache(10)
    tp = (TOPIC, 0)
    new_context(cache, "grp", MEMBER_ID, INITIAL_EPOCH, [tp], [], False, "c")
    acquire(sp, records(0, 10), 10)
    assert new_context(cache, "grp", MEMBER_ID, FINAL_EPOCH, [], [], False, "c").final
    assert _release(cache, "grp", MEMBER_ID, {tp: sp}.get)[0] is ErrorCode.none
    assert new_context(cache, "grp", MEMBER_ID, 1, [], [], False, "c").error is ErrorCode.share_session_not_found
    got = acquire(sp, records(0, 10), 10, member="member-2", fetch_offset=sp.next_fetch_offset())
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(0, 9, 2)]


# -- acknowledgement batch validation (reference 2.5) -------------------------------------------

A = int(AcknowledgeType.ACCEPT)
R = int(AcknowledgeType.RELEASE)


def b(first, last, *types):
    return ShareAcknowledgementBatch(first, last, tuple(types))


@pytest.mark.parametrize(("batches", "ok"), [
    ([], True),
    ([b(0, 4, A)], True),
    ([b(0, 2, A, R, 0)], True),                     # per offset, GAP included
    ([b(0, 4, A), b(4, 6, R)], True),                # Kafka compares with <: may start at the last
    ([b(5, 4, A)], False),                           # first > last
    ([b(0, 4, A), b(3, 6, R)], False),               # starts before the previous batch's last offset
    ([b(0, 4)], False),                              # no types
    ([b(0, 4, A, R)], False),                        # several types, wrong count
    ([b(0, 0, 5)], False),                           # bad type
    ([b(0, 0, -1)], False),
    ([b(0, 0, 4)], False),                           # RENEW without support (v1)
])
def test_validate_acknowledgement_batches(batches, ok):
    """2.5, KafkaApis validateAcknowledgementBatches: the first bad batch makes the
    partition INVALID_REQUEST."""
    code, message = validate_acknowledgement_batches(batches)
    assert (code is ErrorCode.none) is ok
    assert (message is None) is ok


def test_validate_acknowledgement_batches_renew():
    """51. RENEW (4) only in v2 and only with IsRenewAck."""
    renew = [b(0, 0, 4)]
    assert validate_acknowledgement_batches(renew, supports_renew=True)[0] is ErrorCode.invalid_request
    assert validate_acknowledgement_batches(renew, supports_renew=True, is_renew_ack=True)[0] is ErrorCode.none
    assert validate_acknowledgement_batches([b(0, 0, 5)], supports_renew=True, is_renew_ack=True)[0] is \
        ErrorCode.invalid_request
