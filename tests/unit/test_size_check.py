"""The collection-size check that runs before kio decodes a request
(tidegate.protocol.size_check): it walks exactly the bytes kio reads for every valid
request of every advertised version, and refuses lengths the request cannot hold —
the case the fuzzer found, where kio's allocation from a 2^32 - 1 count killed the
process."""

from __future__ import annotations

import struct

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings
from kio.index import load_request_schema
from kio.serial import entity_reader

from tests.fuzz.fuzzer import advertised, structured
from tidegate.protocol.codec import InvalidRequestError, decode_request
from tidegate.protocol.size_check import CollectionSizeError, check_sizes


@pytest.mark.parametrize(("api_key", "version"), advertised())
def test_the_walk_ends_where_kio_ends_for_every_valid_request(api_key, version):
    cls = load_request_schema(api_key, version)
    header_reader, body_reader = entity_reader(cls.__header_schema__), entity_reader(cls)

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(structured(api_key, version))
    def case(framed: bytes) -> None:
        buf = framed[4:]
        _header, offset = header_reader(buf, 0)
        try:
            _body, size = body_reader(buf, offset)
        except ValueError:  # kio writes timedeltas it cannot read back (i64 overflow)
            assume(False)
        assert check_sizes(cls.__header_schema__, cls, buf) == offset + size

    case()


# OffsetFetch v9 as librdkafka sends it, with the group array's count (a compact
# varint) replaced by 0xffffffff: 2^32 - 2 groups announced in a 51-byte request.
FOUND_BY_THE_FUZZER = (
    b"\x00\t\x00\t\x00\x00\x00\x08\x00\x07rdkafka\x00\xff\xff\xff\xff\x0f\x0cfuzz-corpus"
    b"\x00\xff\xff\xff\xff\x02\x10t-11077-1"
)


def test_a_huge_count_is_refused_before_kio_allocates():
    with pytest.raises(InvalidRequestError, match="Tried to allocate a collection of size"):
        decode_request(bytearray(FOUND_BY_THE_FUZZER))


@given(st.integers(1, 2**31 - 1))
@settings(max_examples=50, deadline=None)
def test_every_count_beyond_the_remaining_bytes_is_refused(count):
    """A Metadata v4 request (non-flexible: int32 counts) announcing ``count`` topics
    with fewer bytes than that left."""
    cls = load_request_schema(3, 4)
    header = struct.pack(">hhih", 3, 4, 1, 1) + b"c"
    body = struct.pack(">i", count) + b"\x00\x01t" + b"\x01"
    if count > len(body) - 4:
        with pytest.raises(CollectionSizeError):
            check_sizes(cls.__header_schema__, cls, header + body)
