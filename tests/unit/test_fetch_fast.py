"""The hand-written Fetch response encoder writes exactly kio's bytes, with the
records left as the pieces the log gave (file regions are never read by it)."""

import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kio_codec import encode_response
from tidegate.errors import ErrorCode
from tidegate.protocol.fetch_fast import (
    MAX_VERSION,
    MIN_VERSION,
    encode_fetch_response,
    fetch_response_size,
    release_pieces,
)
from tidegate.protocol.messages._base import Message
from tidegate.protocol.messages.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    SnapshotId,
)
from tidegate.record.file_region import FileRegion, materialize

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=0, max_size=12)


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    path = tmp_path_factory.mktemp("fetch_fast") / "segment"
    path.write_bytes(os.urandom(64 * 1024))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def records_strategy(fd):
    region = st.builds(
        lambda pos, n: FileRegion.of(fd, pos, n), st.integers(0, 32 * 1024), st.integers(0, 32 * 1024)
    )
    return st.one_of(st.none(), st.binary(max_size=5000), region)


def partitions(fd):
    return st.builds(
        PartitionData,
        partition_index=i32,
        error_code=st.sampled_from([ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.fenced_leader_epoch]),
        high_watermark=i64,
        last_stable_offset=i64,
        log_start_offset=i64,
        aborted_transactions=st.none() | st.lists(
            st.builds(AbortedTransaction, producer_id=i64, first_offset=i64), max_size=3),
        preferred_read_replica=i32,
        records=records_strategy(fd),
        # the tagged fields: left at their defaults (not written) or set
        diverging_epoch=st.builds(EpochEndOffset) | st.builds(EpochEndOffset, epoch=i32, end_offset=i64),
        current_leader=st.builds(LeaderIdAndEpoch) | st.builds(LeaderIdAndEpoch, leader_id=i32, leader_epoch=i32),
        snapshot_id=st.builds(SnapshotId) | st.builds(SnapshotId, end_offset=i64, epoch=i32),
    )  # fmt: skip


def responses(fd):
    topic = st.builds(FetchableTopicResponse, topic=names, topic_id=st.uuids(),
                      partitions=st.lists(partitions(fd), max_size=3))
    endpoint = st.builds(NodeEndpoint, node_id=i32, host=names, port=i32, rack=st.none() | names)
    return st.builds(
        FetchResponse,
        throttle_time=st.integers(0, 2**31 - 1),
        error_code=st.sampled_from([ErrorCode.none, ErrorCode.fetch_session_id_not_found]),
        session_id=i32,
        responses=st.lists(topic, max_size=3),
        node_endpoints=st.lists(endpoint, max_size=2),
    )


def as_values(message):
    """A message as the dict of Kafka's field names tests.kio_codec.build takes, records
    materialized (kio's independent encoding is the reference)."""
    values = {}
    for name in type(message).__slots__:
        value = getattr(message, name)
        if isinstance(value, Message):
            value = as_values(value)
        elif isinstance(value, list):
            value = [as_values(v) if isinstance(v, Message) else v for v in value]
        elif name == "records":
            value = materialize(value)
        values[name] = value
    return values


def kio_bytes(version, correlation_id, response):
    return encode_response(1, version, correlation_id, as_values(response))


def joined(pieces):
    return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in pieces)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_matches_kio(segment, version):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(response=responses(segment), correlation_id=i32)
    def check(response, correlation_id):
        pieces = encode_fetch_response(correlation_id, version, response)
        assert joined(pieces) == kio_bytes(version, correlation_id, response)
        assert fetch_response_size(version, response) == sum(len(p) for p in pieces)
        release_pieces(pieces)

    check()


@pytest.mark.parametrize("version", VERSIONS)
def test_partitions_shared_by_a_completion_batch_encode_as_kio(segment, version):
    """Responses sharing partition objects (a completion batch: the same read answers
    many fetches) encode each such partition once per version and still write exactly
    kio's bytes, whatever their own header, throttle, session id and other topics; a
    partition with records over 4,096 bytes keeps them one shared piece."""
    big = PartitionData(partition_index=1, high_watermark=9, last_stable_offset=9, log_start_offset=0,
                        records=os.urandom(5000))

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(first=responses(segment), second=responses(segment), small=st.binary(max_size=300),
           correlation_ids=st.tuples(i32, i32))
    def check(first, second, small, correlation_ids):
        inline = PartitionData(partition_index=0, high_watermark=7, last_stable_offset=7, log_start_offset=0,
                               records=small)
        for response in (first, second):
            response.responses.append(FetchableTopicResponse(topic="shared", topic_id=uuid.uuid4(),
                                                             partitions=[inline, big]))
        shared: dict = {}
        for response, correlation_id in zip((first, second), correlation_ids, strict=True):
            pieces = encode_fetch_response(correlation_id, version, response, shared)
            assert joined(pieces) == kio_bytes(version, correlation_id, response)
            assert any(p is big.records for p in pieces)  # the same object, not a copy
            release_pieces(pieces)
        assert {key[1] for key in shared} == {version}
        assert {id(p) for p, *_ in shared.values()} >= {id(inline), id(big)}

    check()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_response_made_of_shared_partitions_is_encoded_once_then_reheaded(version):
    """A fan-out's answers (the same shared partitions, throttle, error and session):
    the second and later are the first's pieces with their own correlation id, still
    kio's bytes; one that differs in its throttle or session is encoded for itself."""
    big = PartitionData(partition_index=0, high_watermark=9, last_stable_offset=9, log_start_offset=0,
                        records=os.urandom(5000))
    small = PartitionData(partition_index=1, high_watermark=3, last_stable_offset=3, log_start_offset=0,
                          records=b"r" * 70)
    topic_id = uuid.uuid4()

    def response(throttle=0, session_id=0):
        return FetchResponse(throttle_time=throttle, session_id=session_id, responses=[
            FetchableTopicResponse(topic="fan", topic_id=topic_id, partitions=[big, small])])

    shared: dict = {}
    first = encode_fetch_response(1, version, response(), shared)
    wholes = [k for k in shared if not isinstance(k[0], int)]
    assert len(wholes) == 1
    for cid, resp in [(2, response()), (3, response()), (4, response(throttle=50)), (5, response(session_id=9))]:
        pieces = encode_fetch_response(cid, version, resp, shared)
        assert joined(pieces) == kio_bytes(version, cid, resp)
        assert any(p is big.records for p in pieces)  # the records are never copied
    assert joined(first) == kio_bytes(version, 1, response())
    # the throttled and the session's response are kept beside the first
    assert len([k for k in shared if not isinstance(k[0], int)]) == 3


def test_regions_are_pieces_not_bytes(segment):
    region = FileRegion.of(segment, 100, 20000)
    response = FetchResponse(responses=[FetchableTopicResponse(topic="t", topic_id=uuid.uuid4(), partitions=[
        PartitionData(partition_index=0, high_watermark=5, last_stable_offset=5, log_start_offset=0, records=region),
    ])])  # fmt: skip
    pieces = encode_fetch_response(7, 12, response)
    assert pieces[1] is region  # sent from the file, never read by the encoder
    assert all(isinstance(p, bytes) for i, p in enumerate(pieces) if i != 1)
    assert sum(len(p) for p in pieces) - 4 == int.from_bytes(pieces[0][:4], "big")


def test_dropped_region_closes_its_descriptor(segment):
    region = FileRegion.of(segment, 0, 10)
    fd = region.fd
    os.fstat(fd)
    del region
    with pytest.raises(OSError):
        os.fstat(fd)


def test_region_survives_unlink(tmp_path):
    path = tmp_path / "seg"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion.of(fd, 10, 100)
    os.close(fd)
    path.unlink()  # retention deletes the segment while the region is in flight
    assert region.read() == b"x" * 100
    region.close()
