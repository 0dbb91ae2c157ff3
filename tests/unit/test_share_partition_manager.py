"""Share fetching (KIP-932): the SharePartitionManager, DelayedShareFetch and the
ShareFetch/ShareAcknowledge handling, on fake time over real logs, the real timing wheels
and the real purgatory.

Named after Kafka's ``ShareFetchAcknowledgeRequestTest`` (SFART), ``SharePartitionManagerTest``
(SPMT) and ``DelayedShareFetchTest`` (DSFT); numbers are items of section 4 of
../shared/reference/kafka-4-groups.md.
"""

from __future__ import annotations

import uuid

import pytest

from tests.kio_codec import decode_response
from tests.unit.logs import marker, pbatch
from tests.unit.share_fetching import (
    ACCEPT,
    GAP,
    GROUP,
    LOCK_MS,
    REJECT,
    RELEASE,
    T0,
    Broker,
    ack_errors,
    acquired,
    batches_of,
    offsets,
    partitions_of,
    value_batch,
)
from tests.unit.share_state import Node
from tidegate.errors import ErrorCode
from tidegate.protocol.codec import RequestHeader, encode_response
from tidegate.protocol.messages import share_acknowledge as sa
from tidegate.protocol.messages import share_fetch as sf
from tidegate.server.share import (
    InMemoryPersister,
    RecordState,
    ShareAutoOffsetReset,
    SharePartitionKey,
    SharePartitionState,
)
from tidegate.server.share.share_apis import handle_share_acknowledge, handle_share_fetch
from tidegate.server.share.share_partition_manager import (
    ShareGroupSettings,
    SharePartitionManagerConfig,
)

E = ErrorCode


@pytest.fixture
def broker(tmp_path) -> Broker:
    return Broker(tmp_path)


def one_partition(broker: Broker, records: int = 10, **kw) -> tuple[uuid.UUID, int]:
    topic_id = broker.create_topic("t", 1, **kw)
    if records:
        broker.produce("t", 0, records)
    return topic_id, 0


# -- fetching -----------------------------------------------------------------------------------


def test_share_fetch_request_success(broker):
    """SFART testShareFetchRequestSuccess: the records, acquired with count 1, the lock
    duration, no error; the records are the log's batches."""
    tp = one_partition(broker, 10)
    call = broker.consumer().fetch(tp)
    response = call.response
    assert (response.error_code, response.acquisition_lock_timeout) == (E.none, LOCK_MS)
    data = partitions_of(response)[tp]
    assert (data.error_code, data.acknowledge_error_code) == (E.none, E.none)
    assert acquired(response, tp) == [(0, 9, 1)]
    assert batches_of(data) == [(0, 9)]
    assert response.node_endpoints == []


def test_share_fetch_request_success_multiple_partitions(broker):
    topic_id = broker.create_topic("t", 3)
    for p in range(3):
        broker.produce("t", p, 2 + p)
    response = broker.consumer().fetch(*[(topic_id, p) for p in range(3)]).response
    assert acquired(response) == {(topic_id, 0): [(0, 1, 1)], (topic_id, 1): [(0, 2, 1)], (topic_id, 2): [(0, 3, 1)]}


def test_records_are_the_batches_covering_the_acquired_ranges(broker):
    """Records = the whole log batches from the one holding the first acquired offset to
    the one holding the last: the batches of records held by another member, before and
    after, are not sent (reference 2.4). Released cached records and new ones after the
    cache are read apart: the cached batches others hold after the last released record
    are skipped (clients take the records of the acquired ranges)."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=6)  # offsets 0..5, one batch each
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    assert acquired(a.fetch(tp, max_records=2).response, tp) == [(0, 1, 1)]
    assert acquired(b.fetch(tp, max_records=2).response, tp) == [(2, 3, 1)]
    a.acknowledge({tp: [(0, 1, RELEASE)]})
    response = a.fetch(tp, max_records=10).response
    assert acquired(response, tp) == [(0, 1, 2), (4, 5, 1)]
    assert batches_of(partitions_of(response)[tp]) == [(0, 0), (1, 1), (4, 4), (5, 5)]
    b.acknowledge({tp: [(2, 3, ACCEPT)]})
    a.acknowledge({tp: [(0, 1, RELEASE), (4, 4, RELEASE)]})
    response = b.fetch(tp, max_records=10).response
    assert acquired(response, tp) == [(0, 1, 3), (4, 4, 2)]
    assert batches_of(partitions_of(response)[tp]) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]


def test_share_fetch_encodes_as_kafka_reads_it(broker):
    """The typed responses written by tidegate's codec read back with kio (the reference)
    in every version the clients use."""
    tp = one_partition(broker, 3)
    consumer = broker.consumer()
    fetch = consumer.fetch(tp).response
    ack = consumer.acknowledge({tp: [(0, 2, ACCEPT)]}).response
    for version in (1, 2):
        body = encode_response(RequestHeader(78, version, 7, "c", True), fetch)
        _cid, decoded = decode_response(78, version, body[4:])
        part = decoded.responses[0].partitions[0]
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records] == [(0, 2, 1)]
        assert bytes(part.records) == partitions_of(fetch)[tp].records
        body = encode_response(RequestHeader(79, version, 8, "c", True), ack)
        _cid, decoded = decode_response(79, version, body[4:])
        assert decoded.responses[0].partitions[0].error_code == 0


def test_max_records_is_a_soft_limit_met_at_batch_boundaries(broker):
    """SPT testAcquireWithMaxFetchRecords through a fetch (39): 1-record batches stop at
    MaxRecords, a larger batch is taken whole."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=10)
    broker.produce("t", 0, 20)
    a = broker.consumer("a")
    assert acquired(a.fetch(tp, max_records=5).response, tp) == [(0, 4, 1)]
    assert acquired(a.fetch(tp, max_records=7).response, tp) == [(5, 29, 1)]


def test_batch_size_splits_new_ranges_at_batch_boundaries(broker):
    """SPT testAcquireWithBatchSize* through a fetch: AcquiredRecords entries of about
    BatchSize, cut at log batch boundaries."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 2, batches=5)  # batches at 0, 2, 4, 6, 8
    response = broker.consumer().fetch(tp, batch_size=4).response
    assert acquired(response, tp) == [(0, 3, 1), (4, 7, 1), (8, 9, 1)]


def test_max_records_is_a_total_across_partitions(broker):
    topic_id = broker.create_topic("t", 2)
    broker.produce("t", 0, 1, batches=4)
    broker.produce("t", 1, 1, batches=4)
    response = broker.consumer().fetch((topic_id, 0), (topic_id, 1), max_records=3).response
    assert offsets(acquired(response, (topic_id, 0))) == [0, 1, 2]
    assert acquired(response, (topic_id, 1)) == []


def test_partitions_rotate_by_session_epoch(broker):
    """Kafka's round-robin PartitionRotateStrategy: a later epoch reads from partition
    ``epoch % n`` on, so a partition is not starved by the ones before it."""
    topic_id = broker.create_topic("t", 3)
    for p in range(3):
        broker.produce("t", p, 1, batches=10)
    tps = [(topic_id, p) for p in range(3)]
    consumer = broker.consumer()
    first = consumer.fetch(*tps, max_records=2).response  # epoch 0: no rotation
    assert acquired(first) == {tps[0]: [(0, 1, 1)]}
    second = consumer.fetch(*tps, max_records=2).response  # epoch 1: from partition 1
    assert acquired(second) == {tps[1]: [(0, 1, 1)]}
    third = consumer.fetch(*tps, max_records=2).response  # epoch 2: from partition 2
    assert acquired(third) == {tps[2]: [(0, 1, 1)]}
    served = [next(iter(acquired(consumer.fetch(*tps, max_records=2).response))) for _ in range(6)]
    assert served == tps + tps  # round-robin: nobody starved


def test_max_bytes_split_evenly_over_acquirable_partitions(broker):
    """MaxBytes is split evenly over the partitions that can acquire (Kafka's uniform
    PartitionMaxBytesStrategy); the first batch of the first partition with data goes
    even when larger (KIP-74)."""
    topic_id = broker.create_topic("t", 2)
    for p in range(2):
        for _ in range(4):
            broker.append("t", p, value_batch(1, size=400))
    size = len(value_batch(1, size=400))
    tps = [(topic_id, 0), (topic_id, 1)]
    response = broker.consumer().fetch(*tps, max_bytes=4 * size).response
    assert acquired(response) == {tps[0]: [(0, 1, 1)], tps[1]: [(0, 1, 1)]}
    response = broker.consumer("b", connection_id=2).fetch(*tps, max_bytes=size // 2).response
    assert acquired(response) == {tps[0]: [(2, 2, 1)]}


def test_latest_reset_skips_what_was_there_before_the_load(tmp_path):
    """share.auto.offset.reset=latest (the default, 37): records before the first load
    are not delivered; those after are."""
    broker = Broker(tmp_path, settings=ShareGroupSettings(record_lock_duration_ms=LOCK_MS))
    tp = one_partition(broker, 5)
    consumer = broker.consumer()
    assert acquired(consumer.fetch(tp).response) == {}
    broker.produce("t", 0, 2)
    assert acquired(consumer.fetch(tp).response, tp) == [(5, 6, 1)]


def test_two_groups_each_see_every_record(broker):
    """SFART testShareFetchRequestNoSharingBetweenMultipleConsumersFromDifferentGroups (56)."""
    tp = one_partition(broker, 10)
    broker.initialize("other", tp[0], [0])
    a = broker.consumer("a")
    b = broker.consumer("b", group="other", connection_id=2)
    assert acquired(a.fetch(tp).response, tp) == [(0, 9, 1)]
    assert acquired(b.fetch(tp).response, tp) == [(0, 9, 1)]


def test_share_fetch_request_successful_sharing_between_multiple_consumers(broker):
    """SFART (56): three members fetching in turn never get one record twice."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=30)
    members = [broker.consumer(f"m{i}", connection_id=i) for i in range(3)]
    seen: list[int] = []
    for _round in range(4):
        for m in members:
            seen += offsets(acquired(m.fetch(tp, max_records=4).response, tp))
    assert sorted(seen) == list(range(30)) and len(seen) == 30


# -- errors of a fetch ---------------------------------------------------------------------------


def test_member_id_is_checked(broker):
    tp = one_partition(broker, 1)
    for member in ("", "x" * 37):
        response = broker.consumer(member).fetch(tp).response
        assert response.error_code == E.invalid_request
        assert broker.consumer(member).acknowledge({tp: [(0, 0, ACCEPT)]}, epoch=1).response.error_code \
            == E.invalid_request


def test_unknown_topic_id_and_partition(broker):
    topic_id = broker.create_topic("t", 1)
    unknown = uuid.uuid4()
    response = broker.consumer().fetch((topic_id, 0), (topic_id, 5), (unknown, 0)).response
    errors = {tp: p.error_code for tp, p in partitions_of(response).items()}
    assert errors[(topic_id, 5)] == E.unknown_topic_or_partition
    assert errors[(unknown, 0)] == E.unknown_topic_id


def test_topic_authorization_failed_per_partition(broker):
    """READ on each topic, checked on the session's partitions on every fetch."""
    topic_id = broker.create_topic("t", 1)
    secret = broker.create_topic("secret", 1)
    broker.produce("t", 0, 1)
    broker.produce("secret", 0, 1)
    consumer = broker.consumer()
    consumer.topic_authorized = lambda name: name != "secret"
    response = consumer.fetch((topic_id, 0), (secret, 0)).response
    assert partitions_of(response)[(secret, 0)].error_code == E.topic_authorization_failed
    assert acquired(response) == {(topic_id, 0): [(0, 0, 1)]}
    response = consumer.fetch().response  # a later epoch: the session's partitions
    assert partitions_of(response)[(secret, 0)].error_code == E.topic_authorization_failed
    response = consumer.acknowledge({(secret, 0): [(0, 0, ACCEPT)]}).response
    assert ack_errors(response) == {(secret, 0): E.topic_authorization_failed}


def test_renew_ack_request_needs_zero_limits(broker):
    """ShareFetch v2 with IsRenewAck: MaxBytes, MinBytes, MaxRecords, MaxWaitMs must be 0."""
    tp = one_partition(broker, 1)
    consumer = broker.consumer()
    consumer.version = 2
    consumer.fetch(tp)
    response = consumer.fetch(tp, acks={tp: [(0, 0, 4)]}, is_renew_ack=True).response
    assert response.error_code == E.invalid_request
    response = consumer.fetch(tp, acks={tp: [(0, 0, 4)]}, is_renew_ack=True, max_bytes=0, min_bytes=0,
                              max_records=0, max_wait=0).response
    assert (response.error_code, ack_errors(response)) == (E.none, {tp: E.none})
    assert acquired(response) == {}


def test_fetch_below_log_start_moves_the_start_offset_without_error(broker):
    """OFFSET_OUT_OF_RANGE (DeleteRecords moved the log start past the share-partition's
    start offset): the start offset follows, no partition error, the client fetches on."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=10)
    consumer = broker.consumer()
    consumer.fetch(tp, max_records=2)
    consumer.acknowledge({tp: [(0, 1, RELEASE)]})
    out: list = []
    broker.replicas.delete_records({("t", 0): 5}, out.append)
    broker.run()
    other = broker.consumer("b", connection_id=2)
    response = other.fetch(tp).response  # reads at 0: out of range
    assert partitions_of(response)[tp].error_code == E.none and acquired(response) == {}
    sp = broker.spm.share_partition(GROUP, tp)
    assert sp.start_offset == 5
    assert offsets(acquired(other.fetch(tp).response, tp)) == list(range(5, 10))


# -- sessions ----------------------------------------------------------------------------------


def test_share_fetch_initial_epoch_with_acknowledgements(broker):
    """SFART (52): epoch 0 with acknowledgements: INVALID_REQUEST, lock timeout 0."""
    tp = one_partition(broker, 1)
    response = broker.consumer().fetch(tp, acks={tp: [(0, 0, ACCEPT)]}).response
    assert (response.error_code, response.acquisition_lock_timeout, response.responses) == (E.invalid_request, 0, [])


def test_share_acknowledge_initial_request_error(broker):
    """SFART (52): ShareAcknowledge at epoch 0 is INVALID_SHARE_SESSION_EPOCH."""
    tp = one_partition(broker, 1)
    response = broker.consumer().acknowledge({tp: [(0, 0, ACCEPT)]}, epoch=0).response
    assert response.error_code == E.invalid_share_session_epoch


def test_share_fetch_request_invalid_share_session_epoch(broker):
    """SFART (52): a skipped epoch is INVALID_SHARE_SESSION_EPOCH, for both APIs."""
    tp = one_partition(broker, 1)
    consumer = broker.consumer()
    consumer.fetch(tp)
    assert consumer.fetch(tp, epoch=2).response.error_code == E.invalid_share_session_epoch
    assert consumer.acknowledge({tp: [(0, 0, ACCEPT)]}, epoch=5).response.error_code == E.invalid_share_session_epoch
    assert consumer.fetch(tp, epoch=1).response.error_code == E.none


def test_share_fetch_request_share_session_not_found(broker):
    """SFART (52): another member's epoch > 0 is SHARE_SESSION_NOT_FOUND, for both APIs."""
    tp = one_partition(broker, 1)
    broker.consumer().fetch(tp)
    other = broker.consumer("other", connection_id=2)
    assert other.fetch(tp, epoch=1).response.error_code == E.share_session_not_found
    assert other.acknowledge({tp: [(0, 0, ACCEPT)]}, epoch=1).response.error_code == E.share_session_not_found
    assert other.fetch(tp, epoch=-1).response.error_code == E.share_session_not_found


def test_share_session_limit_reached_is_answered_after_max_wait(tmp_path):
    """(53): a full cache answers SHARE_SESSION_LIMIT_REACHED after MaxWaitMs, so the
    client does not spin; a disconnect frees the session for another member
    (SFART testShareSessionEvictedOnConnectionDrop)."""
    broker = Broker(tmp_path, config=SharePartitionManagerConfig(max_share_sessions=1))
    tp = one_partition(broker, 1)
    first = broker.consumer("a")
    first.fetch(tp)
    second = broker.consumer("b", connection_id=2)
    call = second.fetch(tp, max_wait=500)
    assert not call.done
    broker.advance(499)
    assert not call.done
    broker.advance(1)
    assert call.response.error_code == E.share_session_limit_reached and call.at == T0 + 500
    first.disconnect()
    response = second.fetch(tp).response
    assert response.error_code == E.none and acquired(response, tp) == [(0, 0, 2)]  # released by the disconnect


def test_share_fetch_request_forget_topic_partitions(broker):
    """SFART testShareFetchRequestForgetTopicPartitions (54): a forgotten partition is no
    longer fetched; what was acquired there stays acquired."""
    topic_id = broker.create_topic("t", 2)
    broker.produce("t", 0, 2)
    broker.produce("t", 1, 2)
    tps = [(topic_id, 0), (topic_id, 1)]
    consumer = broker.consumer()
    consumer.fetch(*tps)
    broker.produce("t", 0, 2)
    broker.produce("t", 1, 2)
    response = consumer.fetch(forget=[tps[0]]).response
    assert acquired(response) == {tps[1]: [(2, 3, 1)]}
    assert list(broker.spm.sessions.get(broker.spm.sessions._sessions.__iter__().__next__()).partitions) == [tps[1]]


def test_later_epoch_responses_omit_partitions_with_nothing_to_report(broker):
    """ShareSessionContext: a later epoch answers the partitions with records, errors, an
    acknowledgement outcome, or added since; an error is answered on every fetch."""
    topic_id = broker.create_topic("t", 3)
    unknown = uuid.uuid4()
    broker.produce("t", 0, 1)
    tps = [(topic_id, 0), (topic_id, 1)]
    consumer = broker.consumer()
    first = consumer.fetch(*tps, (unknown, 0)).response
    assert set(partitions_of(first)) == {tps[0], tps[1], (unknown, 0)}
    broker.produce("t", 1, 1)
    second = consumer.fetch().response
    assert set(partitions_of(second)) == {tps[1], (unknown, 0)}
    third = consumer.fetch((topic_id, 2)).response  # added: answered once even with nothing
    assert set(partitions_of(third)) == {(topic_id, 2), (unknown, 0)}
    fourth = consumer.fetch(acks={tps[0]: [(0, 0, ACCEPT)]}).response
    assert set(partitions_of(fourth)) == {tps[0], (unknown, 0)}
    assert ack_errors(fourth)[tps[0]] == E.none


def test_repeated_topic_id_entries_are_merged(broker):
    """librdkafka writes new and acknowledging partitions of one topic in two entries."""
    topic_id = broker.create_topic("t", 2)
    broker.produce("t", 0, 1)
    broker.produce("t", 1, 1)
    consumer = broker.consumer()
    consumer.fetch((topic_id, 0))
    request = sf.ShareFetchRequest(
        group_id=GROUP, member_id=consumer.member_id, share_session_epoch=1, max_wait=0, min_bytes=1,
        max_records=10, batch_size=10,
        topics=[sf.FetchTopic(topic_id=topic_id, partitions=[sf.FetchPartition(partition_index=1)]),
                sf.FetchTopic(topic_id=topic_id, partitions=[sf.FetchPartition(
                    partition_index=0, acknowledgement_batches=[
                        sf.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[ACCEPT])])])])
    out: list[sf.ShareFetchResponse] = []
    handle_share_fetch(broker.spm, request, consumer.context(), out.append)
    (response,) = out
    assert len(response.responses) == 1
    assert ack_errors(response) == {(topic_id, 0): E.none, (topic_id, 1): E.none}
    assert acquired(response) == {(topic_id, 1): [(0, 0, 1)]}


# -- acknowledgements ------------------------------------------------------------------------


def test_share_fetch_request_piggybacked_accept(broker):
    """SFART testShareFetchRequestPiggybackedAccept: the outcome in AcknowledgeErrorCode;
    accepted records are never delivered again."""
    tp = one_partition(broker, 10)
    consumer = broker.consumer()
    consumer.fetch(tp)
    broker.produce("t", 0, 5)
    response = consumer.fetch(tp, acks={tp: [(0, 9, ACCEPT)]}).response
    assert ack_errors(response) == {tp: E.none}
    assert acquired(response, tp) == [(10, 14, 1)]
    broker.advance(LOCK_MS)
    assert acquired(consumer.fetch(tp).response, tp) == [(10, 14, 2)]


def test_share_acknowledge_request_success_release(broker):
    """SFART testShareAcknowledgeRequestSuccessRelease: released records come back with
    their count incremented."""
    tp = one_partition(broker, 10)
    consumer = broker.consumer()
    consumer.fetch(tp)
    assert ack_errors(consumer.acknowledge({tp: [(0, 9, RELEASE)]}).response) == {tp: E.none}
    assert acquired(consumer.fetch(tp).response, tp) == [(0, 9, 2)]


def test_share_fetch_request_piggybacked_reject(broker):
    """SFART testShareFetchRequestPiggybackedReject: rejected records are archived."""
    tp = one_partition(broker, 10)
    consumer = broker.consumer()
    consumer.fetch(tp)
    response = consumer.fetch(tp, acks={tp: [(0, 9, REJECT)]}).response
    assert ack_errors(response) == {tp: E.none} and acquired(response) == {}
    broker.advance(LOCK_MS)
    assert acquired(consumer.fetch(tp).response) == {}
    assert broker.spm.share_partition(GROUP, tp).start_offset == 10


def test_per_offset_types_and_gap(broker):
    """One batch with a type per offset (ACCEPT, RELEASE, REJECT, GAP)."""
    tp = one_partition(broker, 4)
    consumer = broker.consumer()
    consumer.fetch(tp)
    response = consumer.acknowledge({tp: [(0, 3, (ACCEPT, RELEASE, REJECT, GAP))]}).response
    assert ack_errors(response) == {tp: E.none}
    assert acquired(consumer.fetch(tp).response, tp) == [(1, 1, 2)]


def test_share_acknowledge_request_max_delivery_attempt_exhausted(broker):
    """SFART (56): five RELEASEs archive (delivery count limit 5)."""
    tp = one_partition(broker, 1)
    consumer = broker.consumer()
    for count in range(1, 6):
        assert acquired(consumer.fetch(tp).response, tp) == [(0, 0, count)]
        consumer.acknowledge({tp: [(0, 0, RELEASE)]})
    assert acquired(consumer.fetch(tp).response) == {}
    assert broker.spm.share_partition(GROUP, tp).start_offset == 1


def test_acknowledge_errors_per_partition(broker):
    """Per partition: INVALID_RECORD_STATE for records another member holds (42),
    INVALID_REQUEST for a bad batch, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION; an
    empty batch list succeeds; the other partitions are applied."""
    topic_id = broker.create_topic("t", 2)
    broker.produce("t", 0, 2)
    broker.produce("t", 1, 2)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch((topic_id, 0))
    b.fetch((topic_id, 1))
    unknown = uuid.uuid4()
    response = a.acknowledge({
        (topic_id, 0): [(0, 1, ACCEPT)],
        (topic_id, 1): [(0, 1, ACCEPT)],  # b's
        (topic_id, 7): [(0, 0, ACCEPT)],
        (unknown, 0): [(0, 0, ACCEPT)],
    }).response
    assert ack_errors(response) == {(topic_id, 0): E.none, (topic_id, 1): E.invalid_record_state,
                                    (topic_id, 7): E.unknown_topic_or_partition, (unknown, 0): E.unknown_topic_id}
    response = b.acknowledge({(topic_id, 1): [(1, 0, ACCEPT)], (topic_id, 0): []}).response
    assert ack_errors(response) == {(topic_id, 1): E.invalid_request, (topic_id, 0): E.none}
    response = b.acknowledge({(topic_id, 1): [(0, 1, 5)]}).response  # RENEW is v2 only
    assert ack_errors(response) == {(topic_id, 1): E.invalid_request}


def test_acknowledge_after_lock_expiry_is_invalid_record_state(broker):
    """SPT testAcknowledgeAfterAcquisitionLockTimeout (44) through the API."""
    tp = one_partition(broker, 2)
    consumer = broker.consumer()
    consumer.fetch(tp)
    broker.advance(LOCK_MS)
    assert ack_errors(consumer.acknowledge({tp: [(0, 1, ACCEPT)]}).response) == {tp: E.invalid_record_state}


def test_acknowledge_completes_delayed_share_fetch_request(broker):
    """SPMT testAcknowledgeCompletesDelayedShareFetchRequest (55): a member's RELEASE
    answers another member's parked fetch at once, with the released records."""
    tp = one_partition(broker, 5)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    assert not call.done
    broker.advance(10)
    a.acknowledge({tp: [(0, 4, RELEASE)]})
    assert call.done and call.at == T0 + 10
    assert acquired(call.response, tp) == [(0, 4, 2)]


def test_acknowledge_does_not_complete_delayed_share_fetch_request(broker):
    """SPMT testAcknowledgeDoesNotCompleteDelayedShareFetchRequest: an ACCEPT makes nothing
    acquirable: the parked fetch waits on."""
    tp = one_partition(broker, 5)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    a.acknowledge({tp: [(0, 4, ACCEPT)]})
    assert not call.done


# -- long polls -------------------------------------------------------------------------------


def test_produce_wakes_a_parked_share_fetch(broker):
    """An append to the partition completes the parked fetch (the (topic id, partition)
    key, woken where the ReplicaManager wakes parked fetches)."""
    tp = one_partition(broker, 0)
    consumer = broker.consumer()
    call = consumer.fetch(tp, max_wait=5_000)
    assert not call.done
    broker.advance(100)
    broker.produce("t", 0, 3)
    assert call.done and call.at == T0 + 100
    assert acquired(call.response, tp) == [(0, 2, 1)]


def test_try_complete_when_min_bytes_not_satisfied(broker):
    """DSFT testTryCompleteWhenMinBytesNotSatisfied* (55): MinBytes gates the answer;
    at MaxWaitMs one last attempt acquires what is there."""
    tp = one_partition(broker, 0)
    size = len(value_batch(1))
    consumer = broker.consumer()
    call = consumer.fetch(tp, max_wait=1_000, min_bytes=3 * size)
    broker.produce("t", 0, 1)
    broker.produce("t", 0, 1)
    assert not call.done
    broker.produce("t", 0, 1)
    assert call.done and acquired(call.response, tp) == [(0, 2, 1)]
    call = consumer.fetch(tp, acks={tp: [(0, 2, ACCEPT)]}, max_wait=1_000, min_bytes=3 * size)
    broker.produce("t", 0, 1)
    broker.advance(999)
    assert not call.done
    broker.advance(1)
    assert call.done and call.at == T0 + 1_000 and acquired(call.response, tp) == [(3, 3, 1)]


def test_max_wait_answers_empty_partitions_never_an_error(broker):
    tp = one_partition(broker, 0)
    consumer = broker.consumer()
    call = consumer.fetch(tp, max_wait=500)
    broker.advance(500)
    assert call.response.error_code == E.none
    assert acquired(call.response) == {}
    assert all(p.error_code == E.none for p in partitions_of(call.response).values())


def test_lock_expiry_redelivers_to_another_member_at_the_lock_deadline(broker):
    """A lock not acknowledged in time: the records go to another member with the count
    incremented, and its parked fetch answers in the timer advance that expired the lock,
    exactly at the deadline (acquired at T, lock L: answered at T + L)."""
    tp = one_partition(broker, 5)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    broker.advance(7)
    acquired_at = broker.now
    a.fetch(tp)
    call = b.fetch(tp, max_wait=10_000)
    broker.advance(LOCK_MS - 1)
    assert not call.done
    broker.advance(1)
    assert call.done and call.at == acquired_at + LOCK_MS
    assert acquired(call.response, tp) == [(0, 4, 2)]
    assert ack_errors(a.acknowledge({tp: [(0, 4, ACCEPT)]}).response) == {tp: E.invalid_record_state}


def test_lock_duration_from_group_config_applies_to_later_locks(broker):
    """SPT testScheduleAcquisitionLockTimeoutValue* (45): the group's lock duration, read
    at each acquisition, also in AcquisitionLockTimeoutMs."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=2)
    consumer = broker.consumer()
    assert consumer.fetch(tp, max_records=1).response.acquisition_lock_timeout == LOCK_MS
    broker.group_settings[GROUP] = ShareGroupSettings(record_lock_duration_ms=5_000,
                                                      auto_offset_reset=ShareAutoOffsetReset.earliest())
    response = consumer.fetch(tp).response
    assert response.acquisition_lock_timeout == 5_000 and acquired(response, tp) == [(1, 1, 1)]
    broker.advance(LOCK_MS)  # the first lock (1 s) expired, the second (5 s) did not
    assert acquired(broker.consumer("b", connection_id=2).fetch(tp).response, tp) == [(0, 0, 2)]


def test_release_session_completes_delayed_share_fetch_request(broker):
    """SPMT testReleaseSessionCompletesDelayedShareFetchRequest (54): the closing epoch
    releases the member's records and a parked fetch gets them at once."""
    tp = one_partition(broker, 3)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    response = a.close().response
    assert response.error_code == E.none
    assert call.done and acquired(call.response, tp) == [(0, 2, 2)]
    assert broker.spm.sessions.get(("group", "a")) is None


def test_share_session_close_with_share_fetch(broker):
    """SFART testShareSessionCloseWithShareFetch (54): a ShareFetch at epoch -1 applies
    its acknowledgements, fetches nothing, then releases the rest."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=4)
    consumer = broker.consumer()
    consumer.fetch(tp)
    response = consumer.fetch(tp, acks={tp: [(0, 1, ACCEPT)]}, epoch=-1).response
    assert response.error_code == E.none and ack_errors(response) == {tp: E.none}
    assert acquired(response) == {}
    other = broker.consumer("b", connection_id=2)
    assert acquired(other.fetch(tp).response, tp) == [(2, 3, 2)]
    assert consumer.fetch(tp, epoch=1).response.error_code == E.share_session_not_found


def test_share_session_close_with_share_acknowledge(broker):
    """SFART testShareSessionCloseWithShareAcknowledge: acks at -1 applied before the release."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=4)
    consumer = broker.consumer()
    consumer.fetch(tp)
    response = consumer.close({tp: [(0, 0, ACCEPT), (1, 1, REJECT)]}).response
    assert ack_errors(response) == {tp: E.none}
    assert acquired(broker.consumer("b", connection_id=2).fetch(tp).response, tp) == [(2, 3, 2)]


def test_connection_close_releases_and_wakes(broker):
    tp = one_partition(broker, 3)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    a.disconnect()
    assert call.done and acquired(call.response, tp) == [(0, 2, 2)]


def test_disconnect_abandons_the_parked_fetch_and_ends_the_session(broker):
    """A member's fetch parks and its connection closes: the release that wakes the
    fetch hands it nothing (abandoned: its client cannot read an answer), and the
    member's ShareAcknowledge at its old epoch answers SHARE_SESSION_NOT_FOUND (the
    disconnect listener ended the session, as Kafka's does); a session opened again
    at epoch 0 gets the released records (the fuzz test's example)."""
    tp = one_partition(broker, 3)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    assert acquired(b.fetch(tp).response, tp) == [(0, 2, 1)]
    assert acquired(a.fetch(tp).response, tp) == [] and a.epoch == 1
    parked = a.fetch(tp, max_wait=300)
    a.disconnect()
    assert ack_errors(b.acknowledge({tp: [(0, 2, RELEASE)]}).response) == {tp: E.none}
    broker.advance(300)
    assert not parked.done
    assert a.acknowledge({tp: [(0, 0, ACCEPT)]}).response.error_code == E.share_session_not_found
    assert a.epoch == 0
    assert acquired(a.fetch(tp).response, tp) == [(0, 2, 2)]


def test_disconnect_with_its_own_fetch_parked_releases_to_others(broker):
    """The member holds records and its next fetch is parked when its connection closes:
    the release wakes that fetch, abandoned by then, which takes nothing back for the
    ended session; another member gets the records at once."""
    tp = one_partition(broker, 3)
    a = broker.consumer("a")
    assert acquired(a.fetch(tp).response, tp) == [(0, 2, 1)]
    parked = a.fetch(tp, max_wait=300)
    a.disconnect()
    assert not parked.done
    assert acquired(broker.consumer("b", connection_id=2).fetch(tp).response, tp) == [(0, 2, 2)]


def test_member_leaving_the_group_releases_its_records(broker):
    """The group coordinator's hook (a member left or was fenced)."""
    tp = one_partition(broker, 3)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    broker.spm.on_member_leave(GROUP, "a")
    broker.run()
    assert call.done and acquired(call.response, tp) == [(0, 2, 2)]


def test_abandoned_fetch_acquires_nothing(broker):
    tp = one_partition(broker, 0)
    consumer = broker.consumer()
    call = consumer.fetch(tp, max_wait=5_000)
    consumer.abandoned = True
    broker.produce("t", 0, 2)
    assert not call.done
    assert acquired(broker.consumer("b", connection_id=2).fetch(tp).response, tp) == [(0, 1, 1)]


# -- loading ------------------------------------------------------------------------------------


class SlowReads:
    """The in-memory persister whose reads answer only when released (a share
    coordinator read waiting for its write of the new leader epoch)."""

    def __init__(self, store) -> None:
        self.store = store
        self.held: list = []
        self.reads = 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def read(self, key, leader_epoch, callback) -> None:
        self.reads += 1
        self.held.append(lambda: self.store.read(key, leader_epoch, callback))

    def release(self) -> None:
        held, self.held = self.held, []
        for answer in held:
            answer()


def test_pending_initialization_should_complete_fetch_request(tmp_path):
    """SPMT testPendingInitializationShouldCompleteFetchRequest: fetches of a loading
    share-partition wait in the purgatory (one load for all) and the load's end answers
    them."""
    slow = SlowReads(None)
    broker = Broker(tmp_path, persister=slow)  # type: ignore[arg-type]
    slow.store = InMemoryPersister(broker.partitions)
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=4)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    first = a.fetch(tp, max_wait=5_000, max_records=2)
    second = b.fetch(tp, max_wait=5_000, max_records=2)
    assert not first.done and not second.done and slow.reads == 1
    broker.advance(20)
    slow.release()
    broker.run()
    assert first.at == second.at == T0 + 20
    assert sorted(offsets(acquired(first.response, tp)) + offsets(acquired(second.response, tp))) == [0, 1, 2, 3]


def test_load_and_acquire_metrics_on_a_pending_initialization(tmp_path):
    """ShareGroupMetrics PartitionLoadTimeMs: the load, once (two fetches waited for it),
    20 ms of fake time; TopicPartitionsAcquireTimeMs: each fetch took its fetch lock 20 ms
    after it arrived; RequestTopicPartitionsFetchRatio: each took its one partition's lock
    (100 %). SharePartitionMetrics: two batches of two records cached; the fetch lock held
    no fake time, the second fetch found it free since the first released it (ratio 100)."""
    slow = SlowReads(None)
    broker = Broker(tmp_path, persister=slow)  # type: ignore[arg-type]
    slow.store = InMemoryPersister(broker.partitions)
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=4)
    first = broker.consumer("a").fetch(tp, max_wait=5_000, max_records=2)
    second = broker.consumer("b", connection_id=2).fetch(tp, max_wait=5_000, max_records=2)
    broker.advance(20)
    slow.release()
    broker.run()
    assert first.done and second.done
    metrics = broker.spm.metrics
    assert (metrics.partition_load_time.count, metrics.partition_load_time.scaled_sum()) == (1, 20.0)
    assert (metrics.acquire_time[GROUP].count, metrics.acquire_time[GROUP].scaled_sum()) == (2, 40.0)
    assert (metrics.fetch_ratio[GROUP].count, metrics.fetch_ratio[GROUP].sum) == (2, 200)
    sp = broker.spm.share_partition(GROUP, tp)
    assert sp is not None
    assert (sp.batch_message_count.count, sp.batch_message_count.sum) == (2, 4)
    assert (sp.fetch_lock_time.count, sp.fetch_lock_time.sum) == (2, 0)
    assert (sp.fetch_lock_ratio.count, sp.fetch_lock_ratio.sum) == (2, 200)


def test_fetch_ratio_counts_the_partitions_whose_fetch_lock_was_taken(tmp_path):
    """DSFT's RequestTopicPartitionsFetchRatio: locks taken over partitions asked for, not
    partitions that answered records: an empty partition that can acquire counts, one at
    its in-flight bound does not (0 % when none can); the acquire time of a fetch
    answered at once is 0."""
    broker = Broker(tmp_path, settings=ShareGroupSettings(
        record_lock_duration_ms=LOCK_MS, partition_max_record_locks=2, auto_offset_reset=ShareAutoOffsetReset.earliest()))
    topic_id = broker.create_topic("t", 2)
    broker.produce("t", 0, 2)
    p0, p1 = (topic_id, 0), (topic_id, 1)
    consumer = broker.consumer()
    assert acquired(consumer.fetch(p0, p1).response) == {p0: [(0, 1, 1)]}  # both locks taken: 100 %
    assert acquired(consumer.fetch(p0, p1).response) == {}  # p0 at its bound: 50 %
    assert acquired(broker.consumer("b", connection_id=2).fetch(p0).response) == {}  # 0 %
    ratio = broker.spm.metrics.fetch_ratio[GROUP]
    assert (ratio.count, ratio.sum, dict(ratio.buckets())["0.0"], dict(ratio.buckets())["50.0"]) == (3, 150, 1, 2)
    assert broker.spm.metrics.acquire_time[GROUP].sum == 0


def test_share_partition_initialization_exceptions(broker):
    """SPMT testSharePartitionInitializationExceptions: a share-partition the group
    coordinator never initialized fails to load; the partition answers the error, the
    share-partition leaves the cache and the next fetch tries again."""
    topic_id = broker.create_topic("t", 1, group=None)
    broker.produce("t", 0, 1)
    consumer = broker.consumer()
    response = consumer.fetch((topic_id, 0)).response
    assert partitions_of(response)[(topic_id, 0)].error_code == E.unknown_server_error
    assert broker.spm.share_partition(GROUP, (topic_id, 0)) is None
    broker.initialize(GROUP, topic_id, [0])
    assert acquired(consumer.fetch((topic_id, 0)).response) == {(topic_id, 0): [(0, 0, 1)]}


def test_fenced_share_partition_is_dropped_and_loaded_again(broker):
    """Re-initialized with a higher state epoch (AlterShareGroupOffsets): the old
    share-partition's write fails FENCED_STATE_EPOCH, the partition answers
    NOT_LEADER_OR_FOLLOWER with this node as the leader, and the next fetch loads the new
    state."""
    tp = one_partition(broker, 10)
    consumer = broker.consumer()
    consumer.fetch(tp)
    broker.initialize(GROUP, tp[0], [0], start_offset=5, state_epoch=1)
    response = consumer.acknowledge({tp: [(0, 9, ACCEPT)]}).response
    assert ack_errors(response) == {tp: E.not_leader_or_follower}
    leader = response.responses[0].partitions[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (broker.replicas.node_id, 0)
    assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [(1, "localhost", 9092)]
    assert broker.spm.share_partition(GROUP, tp) is None
    assert acquired(consumer.fetch(tp).response, tp) == [(5, 9, 1)]


# -- transactions -----------------------------------------------------------------------------


def test_read_committed_skips_aborted_transactions_and_stalls_at_an_open_one(tmp_path):
    """(49) share.isolation.level=read_committed: an aborted transaction's records are
    archived, never handed out; the markers fall inside acquired ranges (clients ack them
    as GAP); an open transaction stops delivery at the LSO until it is decided."""
    settings = ShareGroupSettings(record_lock_duration_ms=LOCK_MS, auto_offset_reset=ShareAutoOffsetReset.earliest(),
                                  read_committed=True)
    broker = Broker(tmp_path, settings=settings)
    tp = one_partition(broker, 0)
    broker.append("t", 0, pbatch(0, 3, pid=1, transactional=True))       # 0-2 aborted
    broker.append("t", 0, marker(False, pid=1), from_client=False)        # 3 ABORT
    broker.append("t", 0, pbatch(0, 2, pid=2, transactional=True))       # 4-5 committed
    broker.append("t", 0, marker(True, pid=2), from_client=False)         # 6 COMMIT
    broker.append("t", 0, pbatch(0, 2, pid=3, transactional=True))       # 7-8 open
    consumer = broker.consumer()
    response = consumer.fetch(tp).response
    assert acquired(response, tp) == [(3, 6, 1)]
    consumer.acknowledge({tp: [(3, 3, GAP), (4, 5, ACCEPT), (6, 6, GAP)]})
    call = consumer.fetch(tp, max_wait=5_000)
    assert not call.done  # stalled at the open transaction
    broker.append("t", 0, marker(True, pid=3), from_client=False)         # 9 COMMIT
    assert call.done and acquired(call.response, tp) == [(7, 9, 1)]
    assert broker.spm.share_partition(GROUP, tp).start_offset == 7


def test_read_uncommitted_reads_to_the_high_watermark(broker):
    tp = one_partition(broker, 0)
    broker.append("t", 0, pbatch(0, 2, pid=1, transactional=True))
    assert acquired(broker.consumer().fetch(tp).response, tp) == [(0, 1, 1)]


# -- topics ------------------------------------------------------------------------------------


def test_topic_deleted_and_recreated(broker):
    """A deleted topic's share-partitions leave the cache and parked fetches answer; a
    topic of the same name created again is a new id and starts at count 1."""
    tp = one_partition(broker, 3)
    a, b = broker.consumer("a"), broker.consumer("b", connection_id=2)
    a.fetch(tp)
    call = b.fetch(tp, max_wait=5_000)
    broker.logs.delete_topic("t")
    broker.replicas.partitions_removed([("t", 0)])
    broker.spm.on_topics_deleted([tp[0]])
    broker.run()
    # the partition went away first (the ReplicaManager's hook): the read answers UTP
    assert call.done and partitions_of(call.response)[tp].error_code == E.unknown_topic_or_partition
    assert broker.spm.num_share_partitions == 0 and broker.spm.lock_timer.size == 0
    new = one_partition(broker, 2)
    assert new[0] != tp[0]
    response = a.fetch(new).response
    assert acquired(response, new) == [(0, 1, 1)]


def test_share_state_reset_by_the_group_coordinator_is_loaded_again(broker):
    """AlterShareGroupOffsets initialized the share-partition again (the group coordinator
    calls drop_share_partitions): the next fetch loads the new start offset instead of
    acquiring from the old cache."""
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=10)
    consumer = broker.consumer()
    assert acquired(consumer.fetch(tp, max_records=2).response, tp) == [(0, 1, 1)]
    broker.initialize(GROUP, tp[0], [0], start_offset=6, state_epoch=1)
    broker.spm.drop_share_partitions(GROUP, [tp[0]])
    assert broker.spm.share_partition(GROUP, tp) is None
    assert offsets(acquired(consumer.fetch(tp).response, tp)) == [6, 7, 8, 9]
    broker.spm.drop_share_partitions("no-such-group")


def test_share_partition_key_and_state(broker):
    tp = one_partition(broker, 1)
    broker.consumer().fetch(tp)
    sp = broker.spm.share_partition(GROUP, tp)
    assert sp.key == SharePartitionKey(GROUP, tp[0], 0) and sp.state is SharePartitionState.ACTIVE


def test_shutdown_answers_parked_fetches(broker):
    tp = one_partition(broker, 0)
    call = broker.consumer().fetch(tp, max_wait=5_000)
    broker.spm.shutdown()
    assert call.done and call.response.error_code == E.none


def test_share_acknowledge_v2_carries_the_lock_duration(broker):
    tp = one_partition(broker, 1)
    consumer = broker.consumer()
    consumer.version = 2
    consumer.fetch(tp)
    response = consumer.acknowledge({tp: [(0, 0, 4)]}, is_renew_ack=True).response
    assert isinstance(response, sa.ShareAcknowledgeResponse)
    assert (response.acquisition_lock_timeout, ack_errors(response)) == (LOCK_MS, {tp: E.none})


# -- durable state (the share coordinator as the persister) ----------------------------------


def over_coordinator(node) -> Broker:
    """A broker whose share-partitions persist through the share coordinator of ``node``
    (``__share_group_state`` on the same logs, acks=all)."""
    return Broker(node.path, persister=node.coordinator, loop=node.loop, replicas=node.replicas,
                  topics=node.topics)


def test_acknowledgement_is_answered_once_durable(tmp_path):
    """Guarantee 1 (reference 2.9): an ACCEPT is answered only once its write to
    ``__share_group_state`` is fsynced."""
    node = Node(tmp_path)
    broker = over_coordinator(node)
    tp = one_partition(broker, 2)
    consumer = broker.consumer()
    call = consumer.fetch(tp, max_wait=500)  # the load waits for the write of the leader epoch
    assert acquired(call.response, tp) == [(0, 1, 1)] and call.at == T0
    request = sa.ShareAcknowledgeRequest(group_id=GROUP, member_id=consumer.member_id, share_session_epoch=1,
                                         topics=[sa.AcknowledgeTopic(topic_id=tp[0], partitions=[
                                             sa.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                                                 sa.AcknowledgementBatch(first_offset=0, last_offset=1,
                                                                         acknowledge_types=[ACCEPT])])])])
    out: list = []
    handle_share_acknowledge(broker.spm, request, consumer.context(), out.append)
    assert out == []  # the write waits for its fsync
    broker.run()
    assert ack_errors(out[0]) == {tp: E.none}


def test_restart_after_kill_keeps_acknowledged_and_redelivers_acquired_with_their_count(tmp_path):
    """Guarantees 2 and 3 (reference 2.9) across a kill -9 of the broker: acknowledged
    records are never delivered again, records acquired at the crash come back with their
    last persisted delivery count (a record released once, then acquired again: count 2
    on its next delivery)."""
    node = Node(tmp_path)
    broker = over_coordinator(node)
    tp = one_partition(broker, 0)
    broker.produce("t", 0, 1, batches=8)
    a = broker.consumer("a")
    assert acquired(a.fetch(tp, max_records=4, max_wait=500).response, tp) == [(0, 3, 1)]
    a.acknowledge({tp: [(0, 1, ACCEPT), (2, 2, RELEASE)]})
    assert acquired(a.fetch(tp, max_records=2).response, tp) == [(2, 2, 2), (4, 4, 1)]
    node = node.restart(crash=True)
    broker = over_coordinator(node)
    b = broker.consumer("b")
    response = b.fetch(tp, max_records=10, max_wait=500).response
    ranges = acquired(response, tp)
    assert offsets(ranges) == list(range(2, 8))
    assert {o: c for first, last, c in ranges for o in range(first, last + 1)}[2] == 2
    assert all(c == 1 for first, last, c in ranges if first > 2)


def test_a_member_leaving_the_group_keeps_its_records_while_its_session_lives(broker):
    """librdkafka's close: the leaving heartbeat may come before the closing
    ShareAcknowledge with the last acknowledgements; those must still apply."""
    tp = one_partition(broker, 3)
    a = broker.consumer("a")
    a.fetch(tp)
    broker.spm.member_left_group(GROUP, "a")
    broker.run()
    assert [b.record_state() for b in broker.spm.share_partitions(GROUP)[0].cached_batches()] == [
        RecordState.ACQUIRED]
    broker.spm.release_session(GROUP, "a", lambda _e, _r: None)  # the session's end releases them
    broker.run()
    assert [b.record_state() for b in broker.spm.share_partitions(GROUP)[0].cached_batches()] == [
        RecordState.AVAILABLE]
