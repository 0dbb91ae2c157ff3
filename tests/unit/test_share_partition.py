"""The share-partition state machine (KIP-932) on the fake clock with a real timing wheel.

Each test is named after the Kafka test it pins (``SharePartitionTest`` = SPT,
``SharePartitionManagerTest`` = SPMT, ``ShareFetchAcknowledgeRequestTest`` = SFART);
the numbers are the items of section 4 of ../shared/reference/kafka-4-groups.md.
Where Kafka asserts its own bookkeeping (timer task objects, metrics) these assert
the same behaviour through tidegate's (a lock pending, the timer's size).
"""

from __future__ import annotations

import pytest

from tests.unit.logs import batch, marker, open_log, pbatch
from tests.unit.share_helpers import (
    ACQUISITION_LOCK_TIMEOUT_MS,
    KEY,
    MEMBER_ID,
    Env,
    ack,
    acquire,
    error,
    initialize,
    offset_states,
    ranges,
    read,
    records,
    release,
)
from tidegate.errors import ErrorCode
from tidegate.server.share import (
    AcknowledgeType,
    FetchedBatch,
    PersisterStateBatch,
    RecordState,
    ShareAcquireMode,
    ShareAutoOffsetReset,
    ShareFetchRead,
    SharePartitionState,
    ShareResult,
)
from tidegate.server.share.share_partition import fetched_batches

ACCEPT = int(AcknowledgeType.ACCEPT)
RELEASE = int(AcknowledgeType.RELEASE)
REJECT = int(AcknowledgeType.REJECT)
RENEW = int(AcknowledgeType.RENEW)
GAP = int(AcknowledgeType.GAP)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                              RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
IRS = ErrorCode.invalid_record_state
IR = ErrorCode.invalid_request
OK = ShareResult()
LOCK = ACQUISITION_LOCK_TIMEOUT_MS


@pytest.fixture
def env() -> Env:
    return Env()


def state_of(sp, first):
    b = sp.batch_at(first)
    return b.record_state(), b.delivery_count(), b.member_id()


# -- 37: share.auto.offset.reset at load ----------------------------------------------


@pytest.fixture
def log(tmp_path):
    """A real partition log: 20 records with timestamps 1000..1019, log start moved to 5."""
    plog = open_log(tmp_path)
    for i in range(20):
        plog.append(batch(1, ts=1_000 + i), 0)
    plog.increment_log_start_offset(5, 0)
    yield plog
    plog.close()


@pytest.mark.parametrize(("reset", "expected"), [
    (ShareAutoOffsetReset.earliest(), 5),
    (ShareAutoOffsetReset.latest(), 20),
    (None, 20),  # no group config: latest
    (ShareAutoOffsetReset.by_duration(990), 10),  # now 2000 - 990 = the record at ts 1010
])
def test_maybe_initialize_default_start_epoch_group_config(env, log, reset, expected):
    """37. SPT testMaybeInitializeDefaultStartEpochGroupConfigReturnsEarliest / ...Latest
    / ...ByDuration / ...NotPresent: an uninitialized start offset (-1) resolves through
    the log's ListOffsets lookup."""
    env.persister.initialize(KEY, 0, -1, lambda _e: None)
    sp = env.partition(active=False)
    assert initialize(sp, offsets=log, reset=reset, wall_clock_ms=2_000) == OK
    assert sp.state is SharePartitionState.ACTIVE
    assert (sp.start_offset, sp.end_offset, sp.state_epoch) == (expected, expected, 0)
    assert sp.next_fetch_offset() == expected
    assert sp.cached_batches() == []


def test_maybe_initialize_fetch_offset_for_latest_timestamp_throws_error(env):
    """SPT testMaybeInitializeFetchOffsetFor*ThrowsError: no offset for the reset -> FAILED."""
    env.persister.initialize(KEY, 0, -1, lambda _e: None)
    sp = env.partition(active=False)
    assert error(initialize(sp, offsets=None)) is ErrorCode.offset_not_available
    assert sp.state is SharePartitionState.FAILED
    assert error(initialize(sp)) is ErrorCode.unknown_server_error


def test_maybe_initialize_with_persisted_start_offset_ignores_reset(env):
    """The reset applies only without a start offset: an initialized one never moves."""
    sp = env.loaded(3, [], state_epoch=2)
    assert (sp.start_offset, sp.end_offset, sp.state_epoch) == (3, 3, 2)


def test_maybe_initialize_with_read_exception(env):
    """SPT testMaybeInitializeWithErrorPartitionResponse: a persister error fails the load
    (an uninitialized share-partition is the coordinator's INVALID_REQUEST)."""
    sp = env.partition(active=False)
    assert error(initialize(sp)) is ErrorCode.unknown_server_error
    assert sp.state is SharePartitionState.FAILED


def test_maybe_initialize_with_invalid_start_offset_state_batches(env):
    """SPT: a persisted batch below the start offset fails the load."""
    env.persister.put(KEY, 3, 6, [PersisterStateBatch(5, 10, 0, 2), PersisterStateBatch(11, 15, 4, 3)])
    sp = env.partition(active=False)
    assert error(initialize(sp)) is ErrorCode.unknown_server_error
    assert sp.state is SharePartitionState.FAILED


def test_maybe_initialize_share_partition_again_concurrent_requests(env):
    """SPT testMaybeInitializeSharePartitionAgainConcurrentRequests: while loading, other
    callers get the retriable LEADER_NOT_AVAILABLE; once loaded, success at once."""
    env.persister.initialize(KEY, 0, 0, lambda _e: None)
    sp = env.partition(active=False)
    pending = []

    def slow_read(key, leader_epoch, callback):
        pending.append(lambda: env.persister.read(key, leader_epoch, callback))

    env.persister.read, real_read = slow_read, env.persister.read
    first: list = []
    sp.maybe_initialize(first.append, wall_clock_ms=env.clock.wall_milliseconds())
    assert first == [] and sp.state is SharePartitionState.INITIALIZING
    assert error(initialize(sp)) is ErrorCode.leader_not_available
    env.persister.read = real_read
    pending.pop()()
    assert first == [OK] and initialize(sp) == OK


# -- 38: persisted gaps ----------------------------------------------------------------


def test_maybe_initialize_state_batches_with_gap_at_beginning(env):
    """38. SPT testMaybeInitializeStateBatchesWithGapAtBeginning."""
    sp = env.loaded(10, [(15, 20, 2, 2), (21, 30, 4, 3)])
    assert (sp.start_offset, sp.end_offset, sp.state_epoch) == (10, 30, 3)
    assert sp.next_fetch_offset() == 10
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(15, 20), (21, 30)]
    assert state_of(sp, 15) == (ACKNOWLEDGED, 2, "")
    assert state_of(sp, 21) == (ARCHIVED, 3, "")
    assert sp.gap_window == (10, 30)


def test_maybe_initialize_state_batches_with_multiple_gaps(env):
    """38. SPT testMaybeInitializeStateBatchesWithMultipleGaps."""
    sp = env.loaded(10, [(15, 20, 2, 2), (30, 40, 4, 3)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 40, 10)
    assert [b.first for b in sp.cached_batches()] == [15, 30]
    assert sp.gap_window == (10, 40)


def test_maybe_initialize_state_batches_with_gap_not_at_beginning(env):
    """38. SPT testMaybeInitializeStateBatchesWithGapNotAtBeginning: the terminal prefix is
    dropped and the SPSO stops at the gap."""
    sp = env.loaded(15, [(15, 20, 2, 2), (30, 40, 4, 3)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (21, 40, 21)
    assert [b.first for b in sp.cached_batches()] == [30]
    assert sp.gap_window == (21, 40)


def test_maybe_initialize_state_batches_without_gaps(env):
    """SPT testMaybeInitializeStateBatchesWithoutGaps: an all-terminal state leaves an
    empty cache past it."""
    sp = env.loaded(15, [(15, 20, 2, 2), (21, 30, 4, 3)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (31, 31, 31)
    assert sp.cached_batches() == [] and sp.gap_window is None


def test_acquire_gap_at_beginning_and_records_fetched_from_gap(env):
    """38. SPT testAcquireGapAtBeginningAndRecordsFetchedFromGap."""
    sp = env.loaded(11, [(21, 30, 2, 2), (31, 40, 4, 1)])
    assert acquire(sp, records(11, 5), 5) == ranges((11, 15, 1))
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (11, 40, 16)
    assert sp.gap_window == (16, 40)


def test_acquire_gap_at_beginning_and_fetched_records_overlap_in_flight_batches(env):
    """38. SPT testAcquireGapAtBeginningAndFetchedRecordsOverlapInFlightBatches: the gap
    is acquirable, the persisted terminal batches are not."""
    sp = env.loaded(11, [(21, 30, 2, 2), (31, 40, 4, 1)])
    assert acquire(sp, records(11, 15), 10) == ranges((11, 20, 1))
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (11, 40, 41)
    assert sp.gap_window == (21, 40)


def test_acquire_gap_holds_the_start_offset_until_acknowledged(env):
    """38. The gap holds the SPSO back until its records are acknowledged."""
    sp = env.loaded(11, [(21, 30, 2, 2)])
    assert sp.start_offset == 11
    acquire(sp, records(11, 10), 10)
    assert ack(sp, (11, 20, ACCEPT)) == OK
    # Kafka stops at the gap window's start while the window lasts (end offset unchanged)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (21, 30, 31)
    acquire(sp, records(31, 2), 2)
    assert sp.gap_window is None
    assert ack(sp, (31, 32, ACCEPT)) == OK
    assert (sp.start_offset, sp.end_offset) == (33, 33)
    assert sp.cached_batches() == []


def test_maybe_initialize_available_persisted_batches_are_redelivered_with_their_count(env):
    """Guarantee 3: a record acquired at a crash comes back AVAILABLE with its count."""
    sp = env.loaded(0, [(0, 4, 0, 2)])
    assert acquire(sp, records(0, 5), 5) == ranges((0, 4, 3))


# -- 39: soft MaxRecords and BatchSize -------------------------------------------------


def test_acquire_single_record(env):
    """SPT testAcquireSingleRecord."""
    sp = env.partition()
    assert acquire(sp, records(0, 1), 1) == ranges((0, 0, 1))
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 0, 1)
    assert state_of(sp, 0) == (ACQUIRED, 1, MEMBER_ID)
    assert sp.batch_at(0).locked and env.timer.size == 1


def test_acquire_with_max_fetch_records(env):
    """39. SPT testAcquireWithMaxFetchRecords: a whole batch even past MaxRecords."""
    sp = env.partition()
    assert acquire(sp, records(0, 5), 5, max_records=10) == ranges((0, 4, 1))
    assert sp.next_fetch_offset() == 5
    assert acquire(sp, records(0, 25), 20, max_records=10) == ranges((5, 24, 1))
    assert sp.next_fetch_offset() == 25
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(0, 4), (5, 24)]
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)


def test_acquire_with_multiple_batches_and_max_fetch_records(env):
    """39. SPT testAcquireWithMultipleBatchesAndMaxFetchRecords: MaxRecords met at the
    batch boundary (1-record batches stop at MaxRecords)."""
    sp = env.partition()
    fetched = read((10, 5), (15, 10), (25, 5))
    assert acquire(sp, fetched, 15, max_records=10) == ranges((10, 24, 1))
    assert sp.next_fetch_offset() == 25
    sp2 = Env().partition()
    ones = read(*((o, 1) for o in range(20)))
    assert acquire(sp2, ones, 5, max_records=5) == ranges((0, 4, 1))


def test_acquire_with_batch_size_and_single_batch(env):
    """39. SPT testAcquireWithBatchSizeAndSingleBatch: one log batch is never cut."""
    sp = env.partition()
    assert acquire(sp, records(0, 5), 5, batch_size=2, max_records=10) == ranges((0, 4, 1))
    assert [b.first for b in sp.cached_batches()] == [0]


def test_acquire_with_batch_size_and_multiple_batches(env):
    """39. SPT testAcquireWithBatchSizeAndMultipleBatches: ranges of about BatchSize, cut
    at batch boundaries (the gap 7-9 rides with the first)."""
    sp = env.partition()
    fetched = read((2, 5), (10, 5), (15, 7), (22, 6))
    assert acquire(sp, fetched, 26, batch_size=5, max_records=100) == ranges(
        (2, 9, 1), (10, 14, 1), (15, 21, 1), (22, 27, 1))
    assert sp.next_fetch_offset() == 28
    assert [b.first for b in sp.cached_batches()] == [2, 10, 15, 22]
    assert env.timer.size == 4  # one lock per acquired batch


def test_acquire_with_batch_size_and_max_fetch_records(env):
    """39. SPT testAcquireWithBatchSizeAndMaxFetchRecords."""
    sp = env.partition()
    fetched = read((0, 5), (5, 15), (20, 15))
    assert acquire(sp, fetched, 20, batch_size=2, max_records=10) == ranges((0, 4, 1), (5, 19, 1))
    assert sp.next_fetch_offset() == 20
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(0, 4), (5, 19)]


def test_acquire_same_batch_again(env):
    """SPT testAcquireSameBatchAgain: nothing is handed out twice."""
    sp = env.partition()
    acquire(sp, records(10, 5), 5)
    assert acquire(sp, records(10, 5), 0) == []
    assert acquire(sp, records(12, 3), 0) == []


def test_acquire_with_empty_fetch_records(env):
    """SPT testAcquireWithEmptyFetchRecords."""
    sp = env.partition()
    assert acquire(sp, ShareFetchRead([]), 0, fetch_offset=0) == []
    assert sp.next_fetch_offset() == 0


def test_acquire_multiple_records_with_overlap_and_new_batch(env):
    """SPT testAcquireMultipleRecordsWithOverlapAndNewBatch."""
    sp = env.partition()
    assert acquire(sp, records(0, 5), 5) == ranges((0, 4, 1))
    assert acquire(sp, records(0, 10), 5) == ranges((5, 9, 1))
    assert sp.next_fetch_offset() == 10


# -- 40: record_limit ------------------------------------------------------------------


def test_acquire_single_batch_in_record_limit_mode(env):
    """40. SPT testAcquireSingleBatchInRecordLimitMode: exactly MaxRecords of a batch."""
    sp = env.partition(lock_ms=LOCK)
    limit = ShareAcquireMode.RECORD_LIMIT
    assert acquire(sp, records(0, 10), 5, mode=limit, batch_size=2, max_records=5) == ranges((0, 4, 1))
    assert sp.next_fetch_offset() == 5
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(0, 9)]
    states = offset_states(sp, 0)
    assert states[0] == states[4] == ("ACQUIRED", 1, MEMBER_ID)
    assert states[5] == states[9] == ("AVAILABLE", 0, "")
    with pytest.raises(ValueError):
        sp.batch_at(0).record_state()
    assert acquire(sp, records(0, 10), 5, member="member-2", mode=limit, batch_size=2, max_records=5) == \
        ranges((5, 9, 1))
    assert sp.next_fetch_offset() == 10
    assert offset_states(sp, 0)[9] == ("ACQUIRED", 1, "member-2")


def test_acquire_multiple_batches_in_record_limit_mode(env):
    """40. SPT testAcquireMultipleBatchesInRecordLimitMode: the batch holding the limit is
    cached whole, the rest of it AVAILABLE."""
    sp = env.partition(lock_ms=LOCK)
    fetched = read((10, 5), (15, 15), (30, 15))
    assert acquire(sp, fetched, 10, mode=ShareAcquireMode.RECORD_LIMIT, max_records=10) == ranges((10, 19, 1))
    assert sp.next_fetch_offset() == 20
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(10, 29)]
    states = offset_states(sp, 10)
    assert states[19] == ("ACQUIRED", 1, MEMBER_ID) and states[20] == ("AVAILABLE", 0, "")


def test_acknowledge_in_record_limit_mode(env):
    """40. SPT testAcknowledgeInRecordLimitMode."""
    sp = env.partition(lock_ms=LOCK)
    limit = ShareAcquireMode.RECORD_LIMIT
    assert acquire(sp, records(0, 10), 1, mode=limit, batch_size=2, max_records=1, fetch_offset=0) == \
        ranges((0, 0, 1))
    assert ack(sp, (0, 0, ACCEPT)) == OK
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (1, 1, 9)
    assert offset_states(sp, 0)[1][0] == "AVAILABLE"
    assert acquire(sp, records(0, 10), 2, mode=limit, batch_size=2, max_records=2, fetch_offset=0) == \
        ranges((1, 2, 1))
    assert ack(sp, (1, 1, ACCEPT)) == OK
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (3, 2, 9)
    assert offset_states(sp, 0)[2][0] == "ACQUIRED" and offset_states(sp, 0)[3][0] == "AVAILABLE"


def test_acquisition_lock_timeout_multiple_record_batch_in_record_limit_mode(env):
    """40. SPT testAcquisitionLockTimeoutMultipleRecordBatchInRecordLimitMode: the taken
    offsets expire together, the rest were never delivered."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 10), 5, mode=ShareAcquireMode.RECORD_LIMIT, max_records=5)
    assert env.timer.size == 1
    env.advance(LOCK)
    assert env.timer.size == 0
    assert all(offset_states(sp, 0)[o] == ("AVAILABLE", 1, "") for o in range(5))
    assert all(offset_states(sp, 0)[o] == ("AVAILABLE", 0, "") for o in range(5, 10))
    assert sp.next_fetch_offset() == 0


# -- 41: the in-flight bound -----------------------------------------------------------


def test_acquire_with_max_in_flight_records_and_try_acquire_new_batch(env):
    """41. SPT testAcquireWithMaxInFlightRecordsAndTryAcquireNewBatch."""
    sp = env.partition(max_in_flight_records=20)
    assert acquire(sp, records(0, 10), 10) == ranges((0, 9, 1))
    fetched = read((10, 5), (15, 10), (25, 5), (30, 2))
    assert acquire(sp, fetched, 15) == ranges((10, 24, 1))
    assert sp.next_fetch_offset() == 25
    assert acquire(sp, records(25, 10), 0, fetch_offset=25) == []
    assert sp.next_fetch_offset() == 25
    assert not sp.can_acquire_records()


def test_acquire_with_max_in_flight_records_and_release_last_offset(env):
    """41. SPT testAcquireWithMaxInFlightRecordsAndReleaseLastOffset: at the cap, released
    records inside the cached range are still handed out."""
    sp = env.partition(max_in_flight_records=20)
    fetched = read((10, 5), (15, 10), (25, 5), (30, 3))
    assert acquire(sp, fetched, 20) == ranges((10, 29, 1))
    assert sp.next_fetch_offset() == 30
    assert ack(sp, (15, 19, RELEASE)) == OK
    assert sp.next_fetch_offset() == 15
    assert sp.can_acquire_records()
    assert acquire(sp, fetched, 5, fetch_offset=15) == ranges((15, 19, 2))
    assert sp.next_fetch_offset() == 30
    assert ack(sp, (29, 29, RELEASE)) == OK
    assert sp.next_fetch_offset() == 29
    assert acquire(sp, fetched, 1, fetch_offset=29) == ranges((29, 29, 2))
    assert sp.next_fetch_offset() == 30


def test_acquire_with_max_in_flight_records_release_batch_and_acquire_subset_records(env):
    """41. SPT testAcquireWithMaxInFlightRecordsReleaseBatchAndAcquireSubsetRecords."""
    sp = env.partition(max_in_flight_records=20)
    acquire(sp, records(0, 5), 5)
    acquire(sp, records(5, 10), 10)
    acquire(sp, records(15, 10), 10)
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(0, 4), (5, 14), (15, 24)]
    assert ack(sp, (5, 14, RELEASE)) == OK
    assert sp.next_fetch_offset() == 5
    assert acquire(sp, records(5, 10), 10, fetch_offset=5) == ranges((5, 14, 2))
    assert sp.next_fetch_offset() == 25


# -- 42, 43: acknowledgement errors and rollback -----------------------------------------


def test_acknowledge_single_record_batch(env):
    """SPT testAcknowledgeSingleRecordBatch: the SPSO moves past it, the cache empties,
    the lock is cancelled."""
    sp = env.partition()
    acquire(sp, records(0, 1), 1)
    assert ack(sp, (0, 0, ACCEPT)) == OK
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (1, 1, 1)
    assert sp.cached_batches() == [] and env.timer.size == 0


def test_acknowledge_multiple_record_batch_with_gap_offsets(env):
    """SPT testAcknowledgeMultipleRecordBatchWithGapOffsets: per-offset types, GAP for the
    offsets without a record (a batch 10-18 holding 10-14 and 18)."""
    sp = env.partition()
    assert acquire(sp, records(5, 2), 2) == ranges((5, 6, 1))
    assert sp.next_fetch_offset() == 7
    assert acquire(sp, read((10, 9)), 9) == ranges((10, 18, 1))
    assert sp.next_fetch_offset() == 19
    types = (RELEASE,) * 5 + (GAP,) * 3 + (ACCEPT,)
    assert ack(sp, (5, 6, RELEASE), (10, 18, types)) == OK
    assert sp.next_fetch_offset() == 5
    assert state_of(sp, 5) == (AVAILABLE, 1, "")
    assert offset_states(sp, 10) == {
        **{o: ("AVAILABLE", 1, "") for o in range(10, 15)},
        **{o: ("ARCHIVED", 1, "") for o in range(15, 18)},
        18: ("ACKNOWLEDGED", 1, ""),
    }


def test_acknowledge_out_of_range_cached_data(env):
    """43. SPT testAcknowledgeOutOfRangeCachedData: before the cache INVALID_RECORD_STATE,
    past it INVALID_REQUEST."""
    sp = env.partition()
    assert error(ack(sp, (0, 15, REJECT))) is IRS
    acquire(sp, records(5, 5), 5)
    assert error(ack(sp, (20, 25, REJECT))) is IR
    assert error(ack(sp, (8, 12, REJECT))) is IR  # runs past the acquired records
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)


def test_acknowledge_with_another_member(env):
    """42. SPT testAcknowledgeWithAnotherMember."""
    sp = env.partition()
    acquire(sp, records(5, 5), 5)
    result = ack(sp, (5, 9, REJECT), member="member-2")
    assert result == ShareResult(IRS, "Member is not the owner of batch record")
    assert error(ack(sp, (6, 7, REJECT), member="member-2")) is IRS
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)
    assert ack(sp, (6, 7, REJECT)) == OK
    assert ack(sp, (8, 8, ACCEPT), member="member-2") == ShareResult(IRS, "Member is not the owner of offset")


def test_acknowledge_when_offset_not_acquired(env):
    """42. SPT testAcknowledgeWhenOffsetNotAcquired."""
    sp = env.partition()
    acquire(sp, records(5, 5), 5)
    assert ack(sp, (5, 9, RELEASE)) == OK
    assert error(ack(sp, (5, 9, ACCEPT))) is IRS
    assert acquire(sp, records(5, 5), 5) == ranges((5, 9, 2))
    assert ack(sp, (6, 8, REJECT)) == OK
    assert error(ack(sp, (6, 8, REJECT))) is IRS


@pytest.mark.parametrize("last_ack", [(15, 19, ACCEPT), (16, 19, ACCEPT)], ids=["full_batch", "subset"])
def test_acknowledge_rollback(env, last_ack):
    """42. SPT testAcknowledgeRollbackWithFullBatchError / ...WithSubsetError: one bad batch
    (acknowledging records already acknowledged in the same request) rolls back all."""
    sp = env.partition()
    for start in (5, 10, 15):
        acquire(sp, records(start, 5), 5)
    result = ack(sp, (5, 9, RELEASE), (10, 14, ACCEPT), (15, 19, ACCEPT), last_ack)
    assert error(result) is IRS
    for start in (5, 10, 15):
        assert state_of(sp, start) == (ACQUIRED, 1, MEMBER_ID)
    assert env.persister.writes == []


def test_acknowledge_with_another_member_rollback_subset_error(env):
    """42. SPT testAcknowledgeWithAnotherMemberRollbackSubsetError: offsets of a split batch
    roll back too."""
    sp = env.partition()
    acquire(sp, records(5, 5), 5)
    acquire(sp, records(10, 5), 5, member="member-2")
    result = ack(sp, (5, 7, ACCEPT), (10, 12, ACCEPT))
    assert error(result) is IRS
    assert all(offset_states(sp, 5)[o] == ("ACQUIRED", 1, MEMBER_ID) for o in range(5, 10))
    assert state_of(sp, 10) == (ACQUIRED, 1, "member-2")
    assert sp.start_offset == 5


def test_invalid_acknowledge_type_in_batch_acknowledgement(env):
    """51. SPT testInvalidAcknowledgeTypeInBatchAcknowledgement / ...InSubsetAcknowledgement."""
    sp = env.partition()
    acquire(sp, records(1, 10), 10)
    assert error(ack(sp, (1, 10, 5))) is IR
    assert error(ack(sp, (2, 3, -1))) is IR
    assert state_of(sp, 1) == (ACQUIRED, 1, MEMBER_ID)


# -- 44: lock expiry -----------------------------------------------------------------------


def test_acquisition_lock_expires_exactly_at_its_duration(env):
    """Expiry is exact to the wheel's tick (1 ms): a lock of D ms taken at t expires when
    the clock reaches t + D, not before, not a tick later."""
    sp = env.partition(lock_ms=LOCK)
    env.advance(7)
    acquire(sp, records(0, 3), 3)
    env.advance(LOCK - 1)
    assert state_of(sp, 0) == (ACQUIRED, 1, MEMBER_ID)
    assert env.timer.next_expiration_ms() == 7 + LOCK
    env.advance(1)
    assert state_of(sp, 0) == (AVAILABLE, 1, "")
    assert env.timer.size == 0 and env.wakes == 1


@pytest.mark.parametrize("duration", [1, 2, 19, 20, 21, 399, 400, 401, 8_000, 30_000, 60_001])
def test_acquisition_lock_expiry_precision_across_wheel_levels(env, duration):
    """The same, for durations held in the overflow wheels (20 ms, 400 ms, 8 s levels)."""
    sp = env.partition(lock_ms=duration)
    env.advance(3)
    acquire(sp, records(0, 1), 1)
    env.advance(duration - 1)
    assert state_of(sp, 0)[0] is ACQUIRED
    env.advance(1)
    assert state_of(sp, 0)[0] is AVAILABLE


def test_acquisition_lock_timeout_cause_max_delivery_count_exceed(env):
    """44. SPT testAcquisitionLockTimeoutCauseMaxDeliveryCountExceed."""
    sp = env.partition(lock_ms=LOCK, max_delivery_count=2)
    acquire(sp, records(0, 10), 10)
    acquire(sp, records(10, 10), 10)
    assert env.timer.size == 2
    env.advance(LOCK)
    assert env.timer.size == 0 and sp.next_fetch_offset() == 0
    assert state_of(sp, 10) == (AVAILABLE, 1, "")
    acquire(sp, records(10, 10), 10)
    assert state_of(sp, 10) == (ACQUIRED, 2, MEMBER_ID)
    env.advance(LOCK)
    assert state_of(sp, 10) == (ARCHIVED, 2, "")
    assert env.timer.size == 0 and sp.next_fetch_offset() == 0


def test_acquisition_lock_timeout_cause_spso_move_forward(env):
    """44. SPT testAcquisitionLockTimeoutCauseSPSOMoveForward: archived at the limit, the
    SPSO moves past them."""
    sp = env.partition(lock_ms=LOCK, max_delivery_count=2)
    acquire(sp, records(0, 10), 10)
    env.advance(LOCK)
    assert state_of(sp, 0) == (AVAILABLE, 1, "")
    acquire(sp, records(0, 5), 5)
    assert env.timer.size == 5  # each offset acquired on its own has its own lock
    env.advance(LOCK)
    states = offset_states(sp, 0)
    assert [states[o] for o in range(10)] == [("ARCHIVED", 2, "")] * 5 + [("AVAILABLE", 1, "")] * 5
    assert env.timer.size == 0 and sp.next_fetch_offset() == 5 and sp.start_offset == 5


def test_acquisition_lock_timeout_cause_spso_move_forward_and_clear_cached_state(env):
    """44. SPT testAcquisitionLockTimeoutCauseSPSOMoveForwardAndClearCachedState."""
    sp = env.partition(lock_ms=LOCK, max_delivery_count=2)
    acquire(sp, records(0, 10), 10)
    env.advance(LOCK)
    acquire(sp, records(0, 10), 10)
    env.advance(LOCK)
    assert sp.cached_batches() == []
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 10, 10)


def test_acknowledge_after_acquisition_lock_timeout(env):
    """44. SPT testAcknowledgeAfterAcquisitionLockTimeout: a late ack is INVALID_RECORD_STATE."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(5, 5), 5)
    env.advance(LOCK)
    assert state_of(sp, 5) == (AVAILABLE, 1, "") and sp.next_fetch_offset() == 5
    assert error(ack(sp, (5, 9, ACCEPT))) is IRS
    assert error(ack(sp, (5, 9, REJECT))) is IRS
    assert not sp.batch_at(5).locked and env.timer.size == 0


def test_acquisition_lock_on_acknowledging_multiple_subset_record_batch_with_gap_offsets(env):
    """SPT: a batch split by a piecewise ack keeps its lock for what is still acquired, and
    the lock is cancelled with its last holder."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(5, 10), 10)
    assert ack(sp, (5, 7, ACCEPT), (9, 9, REJECT)) == OK
    assert sp.batch_at(5).locked and env.timer.size == 1
    assert ack(sp, (8, 8, ACCEPT), (10, 14, ACCEPT)) == OK
    assert env.timer.size == 0 and sp.cached_batches() == []
    assert sp.start_offset == 15


def test_acquisition_lock_after_different_acknowledges(env):
    """SPT testAcquisitionLockAfterDifferentAcknowledges: only what is still acquired
    expires, with the batch's original deadline."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(5, 10), 10)
    env.advance(40)
    assert ack(sp, (5, 6, RELEASE), (7, 8, ACCEPT)) == OK
    env.advance(LOCK - 41)
    assert offset_states(sp, 5)[9] == ("ACQUIRED", 1, MEMBER_ID)
    env.advance(1)
    states = offset_states(sp, 5)
    assert states[5] == ("AVAILABLE", 1, "") and states[7] == ("ACKNOWLEDGED", 1, "")
    assert all(states[o] == ("AVAILABLE", 1, "") for o in range(9, 15))


# -- 45: lock duration read at acquisition -------------------------------------------------


def test_schedule_acquisition_lock_timeout_value_updates_successfully(env):
    """45. SPT testScheduleAcquisitionLockTimeoutValueFromGroupConfig / ...UpdatesSuccessfully:
    the group config is read at each acquisition; a change affects later locks only."""
    duration = [500]
    sp = env.partition(lock_ms=lambda: duration[0])
    acquire(sp, records(0, 1), 1)
    duration[0] = 1_000
    acquire(sp, records(1, 1), 1)
    env.advance(500)
    assert state_of(sp, 0)[0] is AVAILABLE and state_of(sp, 1)[0] is ACQUIRED
    env.advance(500)
    assert state_of(sp, 1)[0] is AVAILABLE


# -- 46: release ---------------------------------------------------------------------------


def test_release_single_record_batch(env):
    """SPT testReleaseSingleRecordBatch: the session ends, the record is free again."""
    sp = env.partition()
    acquire(sp, records(0, 1), 1)
    assert release(sp) == OK
    assert state_of(sp, 0) == (AVAILABLE, 1, "")
    assert env.timer.size == 0 and sp.next_fetch_offset() == 0


def test_release_acquired_records_with_another_member(env):
    """SPT testReleaseAcquiredRecordsWithAnotherMember: only the member's records."""
    sp = env.partition()
    acquire(sp, records(5, 1), 1)
    acquire(sp, records(10, 5), 5, member="member-2")
    assert ack(sp, (10, 11, ACCEPT), member="member-2") == OK
    assert release(sp, "member-2") == OK
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)
    states = offset_states(sp, 10)
    assert states[10] == ("ACKNOWLEDGED", 1, "") and states[12] == ("AVAILABLE", 1, "")


def test_release_acquired_records_do_not_decrease_delivery_count(env):
    """46. SPT testReleaseAcquiredRecordsDoNotDecreaseDeliveryCount: released after the log
    start moved, what is below it is archived, the rest AVAILABLE at its count."""
    sp = env.partition()
    acquire(sp, records(5, 5), 5)
    acquire(sp, records(10, 5), 5)
    assert ack(sp, (12, 13, ACCEPT)) == OK
    sp.update_cache_and_offsets(11)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (15, 11, 14)
    assert release(sp) == OK
    assert state_of(sp, 5) == (ARCHIVED, 1, "")
    states = offset_states(sp, 10)
    assert [states[o] for o in range(10, 15)] == [
        ("ARCHIVED", 1, ""), ("AVAILABLE", 1, ""), ("ACKNOWLEDGED", 1, ""), ("ACKNOWLEDGED", 1, ""),
        ("AVAILABLE", 1, "")]


def test_release_never_lowers_the_delivery_count(env):
    """46. RELEASE acks: the count climbs 1..5 and the 5th RELEASE archives (reference
    3.3 committed_releases_archive_at_delivery_limit)."""
    sp = env.partition()
    counts = []
    for _ in range(5):
        got = acquire(sp, records(0, 1), 1, fetch_offset=sp.next_fetch_offset())
        counts.append(got[0].delivery_count)
        assert ack(sp, (0, 0, RELEASE)) == OK
    assert counts == [1, 2, 3, 4, 5]
    assert sp.cached_batches() == [] and sp.start_offset == 1


def test_max_delivery_count_limit_exceeded_for_records_subset(env):
    """SPT testMaxDeliveryCountLimitExceededForRecordsSubset: per-offset limit."""
    sp = env.partition(max_delivery_count=2)
    acquire(sp, records(10, 5), 5)
    acquire(sp, records(15, 5), 5)
    assert ack(sp, (10, 12, ACCEPT), (13, 16, RELEASE), (17, 19, ACCEPT)) == OK
    assert acquire(sp, records(10, 5), 2) == ranges((13, 14, 2))
    assert acquire(sp, records(15, 5), 2) == ranges((15, 16, 2))
    assert ack(sp, (13, 16, RELEASE)) == OK
    assert sp.next_fetch_offset() == 20 and sp.cached_batches() == []


# -- 47: the write comes first ---------------------------------------------------------------


def test_acknowledge_batch_with_write_share_group_state_failure(env):
    """47. SPT testAcknowledgeBatchWithWriteShareGroupStateFailure: a failed write rolls
    the acknowledgement back and the partition answers the persister's error."""
    sp = env.partition()
    acquire(sp, records(5, 10), 10)
    env.persister.fail_writes = ErrorCode.unknown_topic_or_partition
    assert error(ack(sp, (5, 14, ACCEPT))) is ErrorCode.unknown_topic_or_partition
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)
    assert sp.batch_at(5).locked and not sp.batch_at(5).in_transition()


def test_acknowledge_offset_with_write_share_group_state_failure(env):
    """47. SPT testAcknowledgeOffsetWithWriteShareGroupStateFailure."""
    sp = env.partition()
    acquire(sp, records(5, 6), 6)
    env.persister.fail_writes = ErrorCode.group_id_not_found
    assert error(ack(sp, (8, 10, REJECT))) is ErrorCode.group_id_not_found
    assert all(offset_states(sp, 5)[o] == ("ACQUIRED", 1, MEMBER_ID) for o in range(5, 11))


def test_acknowledge_completes_only_when_the_write_succeeds(env):
    """47, guarantee 1: the acknowledgement's answer waits for its write; meanwhile the
    records are in transition (neither acquirable nor acknowledgeable)."""
    sp = env.partition()
    acquire(sp, records(0, 5), 5)
    env.persister.hold_writes = True
    assert ack(sp, (0, 4, ACCEPT)) is None
    assert sp.batch_at(0).in_transition() and sp.start_offset == 0
    assert error(ack(sp, (0, 4, ACCEPT))) is IRS
    out: list = []
    sp.acknowledge(MEMBER_ID, [], out.append)
    assert out == [OK]
    env.persister.complete_held()
    assert sp.cached_batches() == [] and sp.start_offset == 5
    assert env.persister.state(KEY).start_offset == 0  # written before the SPSO moved


def test_release_batch_with_write_share_group_state_failure(env):
    """47. SPT testReleaseBatchWithWriteShareGroupStateFailure."""
    sp = env.partition()
    acquire(sp, records(5, 10), 10)
    env.persister.fail_writes = ErrorCode.group_id_not_found
    assert error(release(sp)) is ErrorCode.group_id_not_found
    assert state_of(sp, 5) == (ACQUIRED, 1, MEMBER_ID)


def test_acquisition_lock_on_batch_with_write_share_group_state_failure(env):
    """47. SPT testAcquisitionLockOnBatchWithWriteShareGroupStateFailure: the expiry
    transition stands although its write failed."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(5, 10), 10)
    env.persister.fail_writes = ErrorCode.group_id_not_found
    env.advance(LOCK)
    assert state_of(sp, 5) == (AVAILABLE, 1, "") and sp.next_fetch_offset() == 5
    assert env.timer.size == 0


def test_acquisition_lock_timeout_with_write_state_rpc_failure(env):
    """47. SPT testAcquisitionLockTimeoutWithWriteStateRPCFailure: the lock expires while
    the ack's write waits; the write fails: AVAILABLE, not ACQUIRED."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 2), 2)
    env.persister.hold_writes = True
    assert ack(sp, (0, 1, ACCEPT)) is None
    assert sp.batch_at(0).in_transition() and sp.batch_at(0).record_state() is ACKNOWLEDGED
    env.advance(LOCK)
    assert sp.batch_at(0).record_state() is ACKNOWLEDGED and env.timer.size == 0
    env.persister.fail_held(ErrorCode.group_id_not_found)
    assert state_of(sp, 0) == (AVAILABLE, 1, "")
    assert not sp.batch_at(0).in_transition() and sp.next_fetch_offset() == 0


def test_acquisition_lock_timeout_with_concurrent_acknowledgement(env):
    """SPT testAcquisitionLockTimeoutWithConcurrentAcknowledgement: the write succeeds
    after the lock expired: the acknowledgement stands."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 5), 5)
    env.persister.hold_writes = True
    assert ack(sp, (0, 1, ACCEPT), (2, 4, RELEASE)) is None
    env.advance(LOCK)
    env.persister.complete_held()
    states = offset_states(sp, 0)
    assert [states[o][0] for o in range(5)] == ["ACKNOWLEDGED"] * 2 + ["AVAILABLE"] * 3
    assert sp.start_offset == 2


def test_write_carries_state_epoch_start_offset_and_ranges(env):
    """The PersisterWrite of an acknowledgement: state epoch, start offset, and the new
    states as ranges (per-offset acks coalesced)."""
    sp = env.loaded(0, [], state_epoch=4)
    acquire(sp, records(0, 6), 6)
    assert ack(sp, (0, 5, (ACCEPT, ACCEPT, REJECT, REJECT, RELEASE, ACCEPT))) == OK
    write = env.persister.writes[-1]
    assert (write.key, write.state_epoch, write.start_offset) == (KEY, 4, 0)
    assert write.state_batches == (PersisterStateBatch(0, 1, 2, 1), PersisterStateBatch(2, 3, 4, 1),
                                   PersisterStateBatch(4, 4, 0, 1), PersisterStateBatch(5, 5, 2, 1))


# -- 48: log start movement --------------------------------------------------------------------


def test_lso_movement_for_archiving_batches(env):
    """48. SPT testLsoMovementForArchivingBatches: AVAILABLE below the log start archived,
    ACQUIRED kept (archived when their lock ends)."""
    sp = env.partition()
    for start in range(2, 37, 5):
        acquire(sp, records(start, 5), 5)
    assert ack(sp, (2, 6, ACCEPT), (12, 16, RELEASE), (22, 26, RELEASE), (27, 31, REJECT)) == OK
    sp.update_cache_and_offsets(20)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (22, 20, 36)
    assert [b.first for b in sp.cached_batches()] == [7, 12, 17, 22, 27, 32]
    assert state_of(sp, 7) == (ACQUIRED, 1, MEMBER_ID)
    assert state_of(sp, 12) == (ARCHIVED, 1, "")
    assert state_of(sp, 22) == (AVAILABLE, 1, "")
    assert state_of(sp, 27) == (ARCHIVED, 1, "")


def test_lso_movement_to_end_offset(env):
    """48. SPT testLsoMovementToEndOffset."""
    sp = env.partition()
    acquire(sp, records(2, 5), 5)
    acquire(sp, records(7, 5), 5)
    assert ack(sp, (7, 8, RELEASE)) == OK
    sp.update_cache_and_offsets(11)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (12, 11, 11)
    assert offset_states(sp, 7) == {7: ("ARCHIVED", 1, ""), 8: ("ARCHIVED", 1, ""), 9: ("ACQUIRED", 1, MEMBER_ID),
                                    10: ("ACQUIRED", 1, MEMBER_ID), 11: ("ACQUIRED", 1, MEMBER_ID)}


def test_lso_movement_ahead_of_end_offset(env):
    """48. SPT testLsoMovementAheadOfEndOffset."""
    sp = env.partition()
    acquire(sp, records(2, 5), 5)
    acquire(sp, records(7, 5), 5)
    sp.update_cache_and_offsets(14)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (14, 14, 14)
    assert state_of(sp, 2) == (ACQUIRED, 1, MEMBER_ID)


def test_lso_movement_on_initialization_share_partition(env):
    """48. SPT testLsoMovementOnInitializationSharePartition: an empty cache follows."""
    sp = env.partition()
    sp.update_cache_and_offsets(5)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (5, 5, 5)
    sp.update_cache_and_offsets(3)  # never backwards
    assert sp.start_offset == 5


def test_lso_movement_then_acquisition_lock_timeout_then_acknowledge(env):
    """48. SPT testLsoMovementThenAcquisitionLockTimeoutThenAcknowledge: ACQUIRED records
    below the new start are archived at expiry (and leave the cache); an ack range
    reaching below the SPSO applies to what is cached."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(2, 5), 5)
    sp.update_cache_and_offsets(7)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (7, 7, 7)
    assert state_of(sp, 2) == (ACQUIRED, 1, MEMBER_ID) and sp.batch_at(2).locked
    env.advance(LOCK)
    assert sp.cached_batches() == []
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (7, 7, 7)
    acquire(sp, records(10, 5), 5)
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (15, 10, 14)
    assert ack(sp, (2, 14, RELEASE)) == OK
    assert (sp.next_fetch_offset(), sp.start_offset, sp.end_offset) == (10, 10, 14)
    assert state_of(sp, 10) == (AVAILABLE, 1, "") and not sp.batch_at(10).locked


def test_acquisition_lock_timeout_for_batches_post_start_offset_movement_to_middle_of_batch(env):
    """48. SPT testAcquisitionLockTimeoutForBatchesPostStartOffsetMovementToMiddleOfBatch."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(5, 10), 10)
    sp.update_cache_and_offsets(10)
    env.advance(LOCK)
    states = offset_states(sp, 5)
    assert [states[o][0] for o in range(5, 15)] == ["ARCHIVED"] * 5 + ["AVAILABLE"] * 5
    assert sp.next_fetch_offset() == 10


def test_lso_movement_with_write_state_rpc_failures_in_acknowledgement(env):
    """SPT testLsoMovementWithWriteStateRPCFailuresInAcknowledgement: archived while the
    RELEASE's write waited: the write fails, the record stays archived."""
    sp = env.partition()
    acquire(sp, records(2, 5), 5)
    acquire(sp, records(7, 5), 5)
    env.persister.hold_writes = True
    assert ack(sp, (2, 6, RELEASE), (7, 11, RELEASE)) is None
    sp.update_cache_and_offsets(9)
    env.persister.fail_held(ErrorCode.group_id_not_found)
    assert state_of(sp, 2) == (ARCHIVED, 1, "")
    states = offset_states(sp, 7)
    assert [states[o][0] for o in range(7, 12)] == ["ARCHIVED"] * 2 + ["ACQUIRED"] * 3
    assert states[9][2] == MEMBER_ID


# -- 49: read_committed ---------------------------------------------------------------------


def test_acquire_with_read_committed_isolation_level(env):
    """49. SPT testAcquireWithReadCommittedIsolationLevel: aborted batches are acquired,
    archived and left out of the answer."""
    sp = env.partition()
    aborted = {10, 58, 70}
    pid = 1000
    batches = [FetchedBatch(b, b + n - 1, pid if b in aborted else -1, b in aborted)
               for b, n in ((10, 5), (15, 5), (20, 15), (50, 8), (58, 10), (70, 5))]

    class Txn:
        producer_id = pid
        first_offset = 0

    got = acquire(sp, ShareFetchRead(batches, [Txn()]), 45, batch_size=10, max_records=100, read_committed=True)
    assert got == ranges((15, 19, 1), (20, 49, 1), (50, 57, 1), (68, 69, 1))
    assert sp.next_fetch_offset() == 75
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(10, 19), (20, 49), (50, 69), (70, 74)]
    assert state_of(sp, 20) == (ACQUIRED, 1, MEMBER_ID)
    assert state_of(sp, 70) == (ARCHIVED, 1, "")
    states = offset_states(sp, 10)
    assert all(states[o] == ("ARCHIVED", 1, "") for o in range(10, 15))
    assert all(states[o] == ("ACQUIRED", 1, MEMBER_ID) for o in range(15, 20))
    states = offset_states(sp, 50)
    assert [states[o][0] for o in range(50, 70)] == ["ACQUIRED"] * 8 + ["ARCHIVED"] * 10 + ["ACQUIRED"] * 2


def test_read_committed_over_a_real_log_archives_the_aborted_transaction(env, tmp_path):
    """49 on a real log: a committed and an aborted transaction, the markers inside the
    acquired ranges (clients ack them as GAP); the read's batches and aborted
    transactions are what Log.read and collect_aborted_transactions return."""
    plog = open_log(tmp_path)
    plog.append(pbatch(0, 3, pid=7, transactional=True), 0)   # 0-2, aborted below
    plog.append(pbatch(0, 2, pid=8, transactional=True), 0)   # 3-4, committed below
    plog.append(marker(False, pid=7), 0, from_client=False)  # 5: ABORT
    plog.append(marker(True, pid=8), 0, from_client=False)   # 6: COMMIT
    plog.append(batch(2), 0)                                  # 7-8
    data = plog.read(0, 1 << 20)
    fetched = ShareFetchRead(fetched_batches(data), plog.collect_aborted_transactions(0, plog.last_stable_offset))
    assert [b.is_abort_marker for b in fetched.batches] == [False, False, True, False, False]
    got = acquire(sp := env.partition(), fetched, 6, read_committed=True)
    assert got == ranges((3, 8, 1))
    assert all(offset_states(sp, 0)[o][0] == "ARCHIVED" for o in range(3))
    assert ack(sp, (3, 4, ACCEPT), (5, 6, GAP), (7, 8, ACCEPT)) == OK
    assert sp.start_offset == 9 and sp.cached_batches() == []
    plog.close()


def test_read_uncommitted_delivers_aborted_records(env):
    """read_uncommitted: nothing is filtered."""
    sp = env.partition()
    batches = [FetchedBatch(0, 2, 7, True), FetchedBatch(3, 3, 7, True, True, True)]

    class Txn:
        producer_id = 7
        first_offset = 0

    assert acquire(sp, ShareFetchRead(batches, [Txn()]), 4) == ranges((0, 3, 1))


# -- 50: throttling --------------------------------------------------------------------------


def test_acquire_records_halves_batch_size_on_each_failure_until_single_record_on_last_attempt(env):
    """50. SPT testAcquireRecordsHalvesBatchSizeOnEachFailureUntilSingleRecordOnLastAttempt."""
    sp = env.loaded(5, [(15, 34, 0, 4)], max_delivery_count=7, lock_ms=120)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (5, 34, 5)
    fetched = records(15, 20)
    assert acquire(sp, fetched, 10, fetch_offset=5) == ranges((15, 24, 5))
    env.advance(121)
    assert acquire(sp, fetched, 5, fetch_offset=5) == ranges((15, 19, 6))
    env.advance(121)
    for i in range(5):
        assert acquire(sp, fetched, 1, fetch_offset=5) == ranges((15 + i, 15 + i, 7))
    assert acquire(sp, fetched, 5, fetch_offset=5) == ranges((20, 24, 6))
    assert acquire(sp, fetched, 10, fetch_offset=5) == ranges((25, 34, 5))


def test_throttle_records_when_pending_deliveries_exist(env):
    """50. SPT testThrottleRecordsWhenPendingDeliveriesExist."""
    sp = env.loaded(5, [(15, 19, 0, 2), (20, 22, 4, 3), (26, 30, 0, 3)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (5, 30, 5)
    fetched = read((7, 13), (20, 8))
    assert acquire(sp, fetched, 16, fetch_offset=5) == ranges((7, 14, 1), (15, 19, 3), (23, 25, 1))
    assert sp.next_fetch_offset() == 26
    assert [(b.first, b.last) for b in sp.cached_batches()] == [(7, 14), (15, 19), (20, 22), (23, 25), (26, 30)]
    assert state_of(sp, 26) == (AVAILABLE, 3, "")
    assert acquire(sp, fetched, 2, fetch_offset=26) == ranges((26, 27, 4))


def test_last_attempt_record_isolation_with_mixed_delivery_count(env):
    """50. SPT testLastAttemptRecordIsolationWithMixedDeliveryCount: a record on its last
    attempt is not taken after others, and goes alone."""
    sp = env.loaded(15, [(15, 34, 0, 2)])
    fetched = records(15, 20)
    acquire(sp, fetched, 20, fetch_offset=15)
    assert ack(sp, (17, 17, RELEASE), (20, 20, RELEASE)) == OK
    acquire(sp, fetched, 2, fetch_offset=15)
    assert ack(sp, (15, 34, RELEASE)) == OK
    states = offset_states(sp, 15)
    assert [states[o][:2] for o in range(15, 19)] == [("AVAILABLE", 3), ("AVAILABLE", 3), ("AVAILABLE", 4),
                                                       ("AVAILABLE", 3)]
    assert acquire(sp, fetched, 2, fetch_offset=5) == ranges((15, 16, 4))
    assert acquire(sp, fetched, 1, fetch_offset=5) == ranges((17, 17, 5))


# -- 51: RENEW ---------------------------------------------------------------------------------


def test_renew_acknowledge_with_complete_batch_ack(env):
    """51. SPT testRenewAcknowledgeWithCompleteBatchAck: the lock restarts, nothing written."""
    sp = env.partition(lock_ms=LOCK, max_delivery_count=2)
    acquire(sp, records(0, 1), 1)
    env.advance(60)
    assert ack(sp, (0, 0, RENEW)) == OK
    assert env.persister.writes == [] and env.timer.size == 1
    assert state_of(sp, 0) == (ACQUIRED, 1, MEMBER_ID)
    env.advance(LOCK - 1)
    assert state_of(sp, 0)[0] is ACQUIRED
    env.advance(1)
    assert state_of(sp, 0) == (AVAILABLE, 1, "")
    assert env.timer.size == 0 and len(env.persister.writes) == 1


def test_renew_acknowledge_on_expired_batch(env):
    """51. SPT testRenewAcknowledgeOnExpiredBatch."""
    sp = env.partition(lock_ms=LOCK, max_delivery_count=2)
    acquire(sp, records(0, 1), 1)
    env.advance(LOCK + 1)
    assert error(ack(sp, (0, 0, RENEW))) is IRS
    assert env.timer.size == 0 and state_of(sp, 0)[0] is AVAILABLE
    assert len(env.persister.writes) == 1


def test_renew_acknowledge_with_per_offset_ack(env):
    """51. SPT testRenewAcknowledgeWithPerOffsetAck: renewed offsets get their own lock;
    the others keep the batch's."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 3), 3)
    env.advance(50)
    assert ack(sp, (0, 2, (ACCEPT, RENEW, RELEASE))) == OK
    states = offset_states(sp, 0)
    assert [states[o][0] for o in range(3)] == ["ACKNOWLEDGED", "ACQUIRED", "AVAILABLE"]
    assert env.timer.size == 1  # offset 1's own lock; the batch's lock has no holder left
    env.advance(LOCK - 1)
    assert offset_states(sp, 0)[1][0] == "ACQUIRED"
    env.advance(1)
    assert offset_states(sp, 0)[1] == ("AVAILABLE", 1, "")


def test_renew_runs_from_the_acknowledgement_while_its_write_waits(env):
    """51. Issue 28 (the state machine's sequence, shrunk): a RENEW in a request whose other
    acknowledgements wait for their write restarts the lock when the request is applied, as
    Kafka's acknowledgePerOffsetBatchRecords renews the timer while it walks the offsets (no
    rollback state, nothing to write). The renewed lock can expire before the write answers;
    the record is then AVAILABLE and another member takes it, and the write's answer leaves
    it with that member."""
    sp = env.partition(lock_ms=3, max_delivery_count=2)
    acquire(sp, records(0, 4), 4)
    env.advance(1)
    env.persister.hold_writes = True
    assert ack(sp, (0, 3, (GAP, GAP, GAP, RENEW))) is None  # the write of 0-2 waits
    env.advance(2)  # 3 ms after the acquisition: the batch's lock, not offset 3's renewed one
    assert offset_states(sp, 0)[3] == ("ACQUIRED", 1, MEMBER_ID)
    env.advance(1)  # 3 ms after the renewal
    assert offset_states(sp, 0)[3] == ("AVAILABLE", 1, "")
    assert acquire(sp, records(0, 4), 1, member="m2", fetch_offset=sp.next_fetch_offset()) == ranges((3, 3, 2))
    env.persister.hold_writes = False
    assert env.persister.complete_held() == 2  # the acknowledgement's write, then the expiry's
    assert offset_states(sp, 0) == {0: ("ARCHIVED", 1, ""), 1: ("ARCHIVED", 1, ""), 2: ("ARCHIVED", 1, ""),
                                    3: ("ACQUIRED", 2, "m2")}
    assert error(ack(sp, (3, 3, ACCEPT))) is IRS  # no longer the first member's
    assert ack(sp, (3, 3, ACCEPT), member="m2") == OK


def test_renew_stands_when_the_write_fails(env):
    """51. The renewal is not part of what a failed write rolls back: the other offsets go
    back to ACQUIRED under the batch's lock, the renewed one keeps its later deadline."""
    sp = env.partition(lock_ms=10, max_delivery_count=2)
    acquire(sp, records(0, 2), 2)
    env.advance(5)
    env.persister.hold_writes = True
    assert ack(sp, (0, 1, (ACCEPT, RENEW))) is None
    assert env.persister.fail_held(ErrorCode.group_id_not_found) == 1
    assert offset_states(sp, 0) == {0: ("ACQUIRED", 1, MEMBER_ID), 1: ("ACQUIRED", 1, MEMBER_ID)}
    env.advance(5)  # the batch's lock ends
    assert offset_states(sp, 0) == {0: ("AVAILABLE", 1, ""), 1: ("ACQUIRED", 1, MEMBER_ID)}
    env.advance(5)  # offset 1's renewed lock ends
    assert offset_states(sp, 0)[1] == ("AVAILABLE", 1, "")


# -- 55, 56: wake-ups, the delivery limit, sharing ----------------------------------------------


def test_acknowledge_completes_delayed_share_fetch_request(env):
    """55. SPMT testAcknowledgeCompletesDelayedShareFetchRequest: an acknowledgement, a
    release and an expiry each call the listener (where parked fetches retry)."""
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 4), 4)
    assert env.wakes == 0
    assert ack(sp, (0, 0, RELEASE)) == OK
    assert env.wakes == 1
    assert release(sp) == OK
    assert env.wakes == 2
    acquire(sp, records(4, 4), 4)
    env.advance(LOCK)
    assert env.wakes == 3


def test_share_acknowledge_request_max_delivery_attempt_exhausted(env):
    """56. SFART testShareAcknowledgeRequestMaxDeliveryAttemptExhausted (delivery count
    limit 2): released twice, the records are archived; only new ones come next."""
    sp = env.partition(max_delivery_count=2)
    for attempt in (1, 2):
        assert acquire(sp, records(0, 10), 10, fetch_offset=sp.next_fetch_offset()) == ranges((0, 9, attempt))
        assert ack(sp, (0, 9, RELEASE)) == OK
    assert sp.next_fetch_offset() == 10
    assert acquire(sp, read((0, 10), (10, 10)), 10, fetch_offset=0) == ranges((10, 19, 1))


def test_share_fetch_request_successful_sharing_between_multiple_consumers(env):
    """56. SFART testShareFetchRequestSuccessfulSharingBetweenMultipleConsumers: no record
    is held by two members; together they get everything."""
    sp = env.partition()
    seen: dict[int, str] = {}
    while sp.next_fetch_offset() < 30:
        for member in ("m1", "m2", "m3"):
            offset = sp.next_fetch_offset()
            if offset >= 30:
                break
            tail = read(*((o, 1) for o in range(offset, 30)))
            for first, last, _ in acquire(sp, tail, max_records=4, member=member, fetch_offset=offset):
                for o in range(first, last + 1):
                    assert o not in seen
                    seen[o] = member
    assert sorted(seen) == list(range(30))
    assert set(seen.values()) == {"m1", "m2", "m3"}


def test_share_fetch_request_no_sharing_between_multiple_consumers_from_different_groups(env):
    """56. SFART ...NoSharingBetweenMultipleConsumersFromDifferentGroups: state is per
    share-partition (group): each group gets every record."""
    first = env.partition()
    other = Env().partition()
    assert acquire(first, records(0, 10), 10, member="a") == ranges((0, 9, 1))
    assert acquire(other, records(0, 10), 10, member="b") == ranges((0, 9, 1))


# -- durability across a restart (guarantees 2 and 3) ----------------------------------------


def test_restart_keeps_acknowledged_and_redelivers_acquired_with_their_count(env):
    """Guarantees 2, 3: after a restart (a new SharePartition on the same persister)
    nothing acknowledged or archived comes back; a released record comes back with its
    count; a record acquired at the crash comes back with its last persisted count."""
    sp = env.loaded(0, [])
    acquire(sp, records(0, 10), 10)
    assert ack(sp, (0, 2, ACCEPT), (3, 3, REJECT), (4, 5, RELEASE)) == OK
    acquire(sp, records(0, 10), 2, fetch_offset=sp.next_fetch_offset())  # 4-5 again, count 2
    # crash: locks and the cache are gone, the persisted state is what is left
    again = Env()
    again.persister = env.persister
    sp2 = again.partition(active=False)
    assert initialize(sp2) == OK
    assert sp2.start_offset == 4
    got = acquire(sp2, records(0, 10), 6, fetch_offset=sp2.next_fetch_offset())
    assert got == ranges((4, 5, 2), (6, 9, 1))


def test_expiry_queued_by_an_executor_does_not_end_a_newer_lock(env):
    """With an executor that defers expired tasks (loop.call_soon), an expiry queued
    before the records were released and acquired again ends nothing."""
    from tidegate.server.timer import SystemTimer

    queued: list = []
    env.timer = SystemTimer(clock=env.clock, executor=queued.append)
    sp = env.partition(lock_ms=LOCK)
    acquire(sp, records(0, 3), 3)
    env.advance(LOCK)
    assert len(queued) == 1 and state_of(sp, 0)[0] is ACQUIRED
    assert ack(sp, (0, 2, RELEASE)) == OK
    acquire(sp, records(0, 3), 3, member="member-2")
    queued.pop()()
    assert state_of(sp, 0) == (ACQUIRED, 2, "member-2") and sp.batch_at(0).locked
    env.advance(LOCK)
    queued.pop()()
    assert state_of(sp, 0) == (AVAILABLE, 2, "")


def test_maybe_acquire_and_release_fetch_lock(env):
    """SPT testMaybeAcquireAndReleaseFetchLock: one acquiring fetch at a time."""
    sp = env.partition()
    first, second = object(), object()
    assert sp.try_acquire_fetch_lock(first, 0)
    assert not sp.try_acquire_fetch_lock(second, 0)
    sp.release_fetch_lock(second, 0)  # not the holder: no effect
    assert not sp.try_acquire_fetch_lock(second, 0)
    sp.release_fetch_lock(first, 0)
    assert sp.try_acquire_fetch_lock(second, 0)


MS = 1_000_000  # ns


def test_fetch_lock_time_and_ratio_metrics(env):
    """SPT testRecordFetchLockRatioMetric (and FetchLockTimeMs): at each release, the time
    held and held / (held + free before it was taken), in percent: 100 the first time
    and when both are 0. Times are ns: a hold of 0 after 1 ms free is 0 % (Kafka's 0 ms
    case would say 1 / 1 ms = 100 %). A release by a non-holder records nothing."""
    sp = env.partition()
    a, b = object(), object()
    assert sp.try_acquire_fetch_lock(a, 0)
    sp.release_fetch_lock(a, 4 * MS)  # held 4 ms, the first time: 100 %
    sp.release_fetch_lock(a, 9 * MS)  # not held: nothing
    assert sp.try_acquire_fetch_lock(b, 10 * MS)  # free for 6 ms
    sp.release_fetch_lock(b, 12 * MS)  # held 2 of 8 ms: 25 %
    assert sp.try_acquire_fetch_lock(a, 12 * MS)
    sp.release_fetch_lock(a, 12 * MS)  # 0 held, 0 free: 100 %
    assert sp.try_acquire_fetch_lock(a, 13 * MS)
    sp.release_fetch_lock(a, 13 * MS)  # 0 held after 1 ms free: 0 %
    assert sp.try_acquire_fetch_lock(b, 13 * MS + 1)
    sp.release_fetch_lock(b, 16 * MS + 1)  # 3 ms held after 1 ns free: int(99.99996) = 99 %
    held = sp.fetch_lock_time
    assert (held.count, held.scaled_sum()) == (5, 9.0)
    assert dict(held.buckets())["0.05"] == 2 and dict(held.buckets())["2.5"] == 3
    ratio = sp.fetch_lock_ratio
    assert (ratio.count, ratio.sum) == (5, 100 + 25 + 100 + 0 + 99)
    assert [n for _le, n in ratio.buckets()] == [1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 5, 5]


def test_in_flight_batch_message_count_metric(env):
    """SharePartitionMetrics InFlightBatchMessageCount: the records of each batch put in
    the cache, as Kafka records it: the batches of new records (cut at batch_size), a
    record_limit batch whole (not just its acquired prefix), each batch of a load;
    records acquired again from the cache add nothing."""
    sp = env.partition()
    assert acquire(sp, read((0, 2), (2, 3), (5, 10)), 15, batch_size=4, max_records=100) == ranges(
        (0, 4, 1), (5, 14, 1))
    assert acquire(sp, records(15, 10), 3, mode=ShareAcquireMode.RECORD_LIMIT, max_records=3) == ranges(
        (15, 17, 1))
    assert error(release(sp)) is ErrorCode.none
    assert acquire(sp, read((0, 2), (2, 3), (5, 10)), 15, batch_size=4, max_records=15) == ranges(
        (0, 4, 2), (5, 14, 2))
    counts = sp.batch_message_count
    assert (counts.count, counts.sum) == (3, 5 + 10 + 10)
    assert dict(counts.buckets())["5.0"] == 1 and dict(counts.buckets())["10.0"] == 3
    loaded = Env().loaded(10, [(15, 20, 2, 2), (21, 30, 4, 3), (31, 31, 0, 1)])
    assert (loaded.batch_message_count.count, loaded.batch_message_count.sum) == (3, 6 + 10 + 1)


def test_can_acquire_records_change_response_post_acknowledgement(env):
    """SPT testCanAcquireRecordsChangeResponsePostAcknowledgement."""
    sp = env.partition(max_in_flight_records=100)
    acquire(sp, records(0, 150), 150)
    assert not sp.can_acquire_records()
    assert ack(sp, (0, 149, ACCEPT)) == OK
    assert sp.can_acquire_records() and sp.in_flight_records == 0


def test_acquire_when_batches_removed_for_fetch_offset(env):
    """2.7. SPT testAcquireWhenBatchesRemovedForFetchOffset: cached AVAILABLE batches
    between the fetch offset and the first batch the read returned (compacted away) are
    archived, and the SPSO moves past them."""
    sp = env.partition()
    acquire(sp, records(0, 5), 5)
    acquire(sp, records(5, 5), 5)
    acquire(sp, records(10, 15), 15)
    assert release(sp) == OK
    assert len(sp.cached_batches()) == 3
    assert acquire(sp, read((5, 5)), 5, fetch_offset=0) == ranges((5, 9, 2))
    assert (sp.next_fetch_offset(), sp.start_offset) == (10, 0)
    assert state_of(sp, 0) == (ARCHIVED, 1, "")
    assert release(sp) == OK
    assert (sp.start_offset, sp.next_fetch_offset()) == (5, 5)
    assert [state_of(sp, b.first)[0] for b in sp.cached_batches()] == [AVAILABLE, AVAILABLE]
