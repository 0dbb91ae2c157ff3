"""The length checks of the request reader (tidegate.protocol.serialization): it reads
exactly the bytes kio reads for every valid request of every advertised version, and
refuses lengths the request cannot hold before allocating anything — the case the
fuzzer found, where kio's allocation from a 2^32 - 1 count killed the process."""

from __future__ import annotations

import struct

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.fuzz.fuzzer import advertised, structured
from tests.kio_codec import decode_body, request_class
from tidegate.protocol.codec import InvalidRequestError, decode_request, request_is_flexible
from tidegate.protocol.codec import request_class as our_request_class
from tidegate.protocol.serialization import SchemaError, read_message, read_request_header


@pytest.mark.parametrize(("api_key", "version"), advertised())
def test_the_reader_ends_where_kio_ends_for_every_valid_request(api_key, version):
    cls = request_class(api_key, version)
    flexible = request_is_flexible(api_key, version)

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(structured(api_key, version))
    def case(framed: bytes) -> None:
        buf = framed[4:]
        _header, offset = decode_body(cls.__header_schema__, buf)
        try:
            _body, size = decode_body(cls, buf, offset)
        except ValueError:  # kio writes timedeltas it cannot read back (i64 overflow)
            assume(False)
        _client_id, pos = read_request_header(buf, flexible)
        assert pos == offset
        _ours, end = read_message(our_request_class(api_key, version), version, flexible, buf, pos)
        assert end == offset + size

    case()


# OffsetFetch v9 as librdkafka sends it, with the group array's count (a compact
# varint) replaced by 0xffffffff: 2^32 - 2 groups announced in a 51-byte request.
FOUND_BY_THE_FUZZER = (
    b"\x00\t\x00\t\x00\x00\x00\x08\x00\x07rdkafka\x00\xff\xff\xff\xff\x0f\x0cfuzz-corpus"
    b"\x00\xff\xff\xff\xff\x02\x10t-11077-1"
)


def test_a_huge_count_is_refused_before_anything_is_allocated():
    with pytest.raises(InvalidRequestError, match="Tried to allocate a collection of size 4294967294"):
        decode_request(bytearray(FOUND_BY_THE_FUZZER))


@given(st.integers(1, 2**31 - 1))
@settings(max_examples=50, deadline=None)
def test_every_count_beyond_the_remaining_bytes_is_refused(count):
    """A Metadata v4 request (non-flexible: int32 counts) announcing ``count`` topics
    with fewer bytes than that left."""
    header = struct.pack(">hhih", 3, 4, 1, 1) + b"c"
    body = struct.pack(">i", count) + b"\x00\x01t" + b"\x01"
    if count > len(body) - 4:
        with pytest.raises(InvalidRequestError, match="Tried to allocate"):
            decode_request(header + body)


@given(st.integers(4, 2**15 - 1), st.booleans())
@settings(max_examples=50, deadline=None)
def test_every_string_longer_than_the_remaining_bytes_is_refused(length, flexible):
    """A Metadata request naming one topic whose name length (int16 in v4, a compact
    varint in v9) says more than the request holds."""
    if flexible:
        out = bytearray(struct.pack(">hhih", 3, 9, 1, 1) + b"c" + b"\x00" + b"\x02")
        n = length + 1
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    else:
        out = bytearray(struct.pack(">hhih", 3, 4, 1, 1) + b"c" + struct.pack(">ih", 1, length))
    out += b"abc"
    with pytest.raises(InvalidRequestError) as info:
        decode_request(out)
    assert isinstance(info.value, SchemaError)
