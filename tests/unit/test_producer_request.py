"""The hand-written Produce request encoder (scatter-gather buffers) is byte for
byte what kio encodes, for every version the producer speaks."""

from __future__ import annotations

import pytest

from tests.integration.rawclient import frame
from tests.kio_codec import encode_request
from tidegate.producer.produce_request import produce_request_buffers
from tidegate.record.batch_builder import Record, build_batch


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_request_buffers_equal_kio_encoding(version):
    b1 = bytes(build_batch([Record(b"v1", b"k", 5, [("h", b"x")])]))
    b2 = bytes(build_batch([Record(b"v2" * 100, None, 7)] * 3))
    topics = [
        ("topic-a", [(0, [b1[:10], memoryview(b1)[10:]], len(b1)), (3, [b2], len(b2))]),
        ("b" * 300, [(1, [b1], len(b1))]),  # a name long enough for a 2-byte varint
    ]
    bufs = produce_request_buffers(version, 42, "client-x", -1, 3000, topics)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 3000,
        "topic_data": [
            {
                "name": "topic-a",
                "partition_data": [{"index": 0, "records": b1}, {"index": 3, "records": b2}],
            },
            {"name": "b" * 300, "partition_data": [{"index": 1, "records": b1}]},
        ],
    }
    assert b"".join(bytes(b) for b in bufs) == frame(encode_request(0, version, 42, body, "client-x"))
    # the batches are referenced, not copied into the framing
    assert any(isinstance(b, memoryview) and b.obj is b1 for b in bufs)
    assert any(b is b2 for b in bufs)


def test_produce_request_refuses_unsupported_versions():
    with pytest.raises(ValueError):
        produce_request_buffers(13, 1, None, 1, 1, [])
    with pytest.raises(ValueError):
        produce_request_buffers(2, 1, None, 1, 1, [])
