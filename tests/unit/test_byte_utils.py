"""The one varint implementation against Kafka's encodings (ByteUtilsTest's values)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.utils.byte_utils import (
    VarintError,
    read_uvarint,
    read_varlong,
    size_of_uvarint,
    size_of_varlong,
    uvarint,
    varlong,
    write_varlong,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**31 - 1, b"\xff\xff\xff\xff\x07")],
)
def test_unsigned_varints_match_kafka(value: int, encoded: bytes) -> None:
    assert uvarint(value) == encoded
    assert read_uvarint(encoded, 0) == (value, len(encoded))
    assert size_of_uvarint(value) == len(encoded)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (-(2**63), b"\xff" * 9 + b"\x01")],
)
def test_zigzag_varints_match_kafka(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varlong(value, out)
    assert bytes(out) == encoded == varlong(value)
    assert read_varlong(encoded, 0) == (value, len(encoded))
    assert size_of_varlong(value) == len(encoded)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_round_trip(value: int) -> None:
    out = bytearray()
    write_varlong(value, out)
    assert read_varlong(bytes(out), 0) == (value, len(out))


def test_truncated_and_overlong_varints_are_refused() -> None:
    with pytest.raises(VarintError):
        read_uvarint(b"\x80", 0)
    with pytest.raises(VarintError):
        read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(VarintError):
        read_varlong(b"\x80", 0)
    with pytest.raises(VarintError):
        read_varlong(b"\xff" * 11, 0)
    with pytest.raises(VarintError):
        read_uvarint(b"\x05\x80", 1, end=2)
