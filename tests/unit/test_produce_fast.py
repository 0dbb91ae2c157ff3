"""The hand-written Produce decoder decodes exactly what kio decodes, without copying."""

import datetime
import random
import uuid

import pytest

from tests.kio_codec import decode_body, encode_request, request_class
from tidegate.protocol.codec import InvalidRequestError, decode_request
from tidegate.protocol.messages.produce import ProduceRequest
from tidegate.protocol.produce_fast import decode_produce
from tidegate.record.batch_builder import Record, build_batch


def encode(version, body, client_id="client-é", correlation_id=99):
    return encode_request(0, version, correlation_id, body, client_id)


def sample_body(rng, transactional_id=None, version=12):
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = []
        for p in range(rng.randint(0, 4)):
            n = rng.randint(1, 5)
            records = build_batch([Record(bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))))
                                   for _ in range(n)])
            if rng.random() < 0.1:
                records = None
            parts.append({"index": p * 7 + t, "records": records})
        if version >= 13:  # KIP-516: topics named by id
            topics.append({"topic_id": uuid.UUID(int=rng.getrandbits(128)), "partition_data": parts})
        else:
            topics.append({"name": f"topic-{t}-ü", "partition_data": parts})
    return {
        "transactional_id": transactional_id,
        "acks": rng.choice([0, 1, -1]),
        "timeout": rng.randint(0, 2**31 - 1),
        "topic_data": topics,
    }


def kio_decode(raw, version):
    cls = request_class(0, version)
    header, off = decode_body(cls.__header_schema__, raw)
    body, _ = decode_body(cls, raw, off)
    return header, body


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("seed", range(5))
def test_same_values_as_kio(version, seed):
    rng = random.Random(seed * 100 + version)
    raw = encode(version, sample_body(rng, transactional_id=rng.choice([None, "txn-1"]), version=version))
    k_header, k_body = kio_decode(raw, version)
    corr, client_id, fast = decode_produce(bytearray(raw))
    assert corr == k_header.correlation_id and client_id == k_header.client_id
    assert fast.transactional_id == k_body.transactional_id
    assert fast.acks == k_body.acks
    assert fast.timeout == k_body.timeout // datetime.timedelta(milliseconds=1)
    if version >= 13:
        assert [t.topic_id for t in fast.topic_data] == [t.topic_id for t in k_body.topic_data]
        assert {t.name for t in fast.topic_data} <= {""}
    else:
        assert [t.name for t in fast.topic_data] == [t.name for t in k_body.topic_data]
    for ft, kt in zip(fast.topic_data, k_body.topic_data, strict=True):
        assert [p.index for p in ft.partition_data] == [p.index for p in kt.partition_data]
        for fp, kp in zip(ft.partition_data, kt.partition_data, strict=True):
            if kp.records is None:
                assert fp.records is None
            else:
                assert bytes(fp.records) == bytes(kp.records)


def test_records_are_writable_views_into_the_request_buffer():
    raw = bytearray(encode(9, sample_body(random.Random(1))))
    _, _, fast = decode_produce(raw)
    views = [p.records for t in fast.topic_data for p in t.partition_data if p.records]
    assert views
    view = views[0]
    assert not view.readonly and view.obj is raw  # no copy: the pool buffer itself
    view[0:8] = b"\x00" * 7 + b"\x2a"
    assert raw.find(bytes(view[:8])) >= 0


def test_decode_request_uses_it_for_pool_buffers():
    raw = bytearray(encode(12, {"acks": -1, "timeout": 1500, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": build_batch([Record(b"v")])}]}]}))
    header, body = decode_request(raw)
    assert type(body) is ProduceRequest  # the generated message, as for bytes decoded generically
    assert type(decode_request(bytes(raw))[1]) is ProduceRequest
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 12, 99)
    assert header.flexible and header.client_id == "client-é"
    assert body.acks == -1 and body.timeout == 1500
    assert body.topic_data[0].partition_data[0].records.obj is raw


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_truncated_requests_are_invalid(version):
    raw = encode(version, sample_body(random.Random(5), version=version))
    for cut in (9, len(raw) // 2, len(raw) - 1):
        if cut >= len(raw):
            continue
        try:
            decode_produce(bytearray(raw[:cut]))
        except ValueError:
            continue
        # A cut exactly after a complete topic list is a shorter valid request only
        # if kio agrees; otherwise the fast path must have refused it.
        kio_decode(raw[:cut], version)
    with pytest.raises(InvalidRequestError):
        decode_request(bytearray(raw[:12]))


def test_null_topic_array_is_refused():
    raw = bytearray(encode(3, {"acks": 1, "timeout": 10, "topic_data": []}))
    raw[-4:] = b"\xff\xff\xff\xff"  # topic_data count -1
    with pytest.raises(InvalidRequestError):
        decode_request(raw)
