"""The consumer protocol's embedded bytes (tidegate.protocol.consumer_protocol): round
trips, later versions read by their shared prefix, byte equality with a real client's
encoding (aiokafka's ConsumerProtocol classes), and malformed bytes refused with
ValueError instead of being read past their end."""

from __future__ import annotations

import struct

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from tidegate.client.admin import _consumer_assignment
from tidegate.protocol.consumer_protocol import (
    assignment_user_data,
    consumer_protocol_version,
    decode_assignment,
    decode_owned_partitions,
    decode_subscription,
    decode_subscription_rack,
    encode_assignment,
    encode_subscription,
)


def test_round_trips():
    assert decode_subscription(encode_subscription(["b", "a", "a"])) == ["a", "b"]
    parts = [("t", 2), ("t", 0), ("u", 1)]
    assert decode_assignment(encode_assignment(parts)) == sorted(parts)
    assert decode_assignment(b"") == [] and decode_assignment(None) == []


def test_an_assignment_in_a_later_version():
    """Every ConsumerProtocolAssignment version has v0's fields: only the header differs;
    past 3 it is written as 3 (Kafka's checkAssignmentVersion), below 0 refused."""
    parts = [("t", 0), ("t", 2)]
    v0 = encode_assignment(parts)
    for version, written in ((0, 0), (1, 1), (3, 3), (7, 3)):
        data = encode_assignment(parts, version)
        assert consumer_protocol_version(data) == written and data[2:] == v0[2:]
        assert decode_assignment(data) == parts
    with pytest.raises(ValueError):
        encode_assignment(parts, -1)
    assert consumer_protocol_version(encode_subscription(["x"])) == 0
    with pytest.raises(ValueError):
        consumer_protocol_version(b"\x00")


def test_the_user_data_of_an_assignment():
    """What a (custom) assignor put beside the partitions: null, empty or bytes."""
    assert assignment_user_data(encode_assignment([("t", 0)])) is None
    assert assignment_user_data(b"") is None
    theirs = ConsumerProtocolMemberAssignment(0, [("t", [0])], b"").encode()
    assert assignment_user_data(theirs) == b""
    with_data = ConsumerProtocolMemberAssignment(0, [("t", [0])], b"state").encode()
    assert assignment_user_data(with_data) == b"state"
    with pytest.raises(ValueError):
        assignment_user_data(with_data[:-2])


def test_a_later_version_reads_by_its_v0_prefix():
    # v1 subscription: topics, user data (null), owned partitions (empty)
    v1 = b"\x00\x01" + encode_subscription(["x"])[2:-4] + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"
    assert decode_subscription(v1) == ["x"]
    # v3 subscription with a generation id and a rack after the owned partitions
    v3 = v1[:-4] + b"\x00\x00\x00\x00" + struct.pack(">i", 7) + struct.pack(">h", 2) + b"r1"
    assert decode_subscription(b"\x00\x03" + v3[2:]) == ["x"]


def test_owned_partitions_of_a_v1_and_later_subscription():
    """What a classic member in a consumer group still owns (online migration); none
    before v1."""
    assert decode_owned_partitions(encode_subscription(["x"])) == []
    owned = struct.pack(">i", 1) + struct.pack(">h", 1) + b"x" + struct.pack(">iii", 2, 3, 1)
    v1 = b"\x00\x01" + encode_subscription(["x"])[2:-4] + struct.pack(">i", 2) + b"ud" + owned
    assert decode_owned_partitions(v1) == [("x", 1), ("x", 3)]
    v3 = b"\x00\x03" + v1[2:] + struct.pack(">i", 7) + struct.pack(">h", 2) + b"r1"
    assert decode_owned_partitions(v3) == [("x", 1), ("x", 3)]
    with pytest.raises(ValueError):
        decode_owned_partitions(v1[:-3])


def test_the_rack_of_a_v3_subscription():
    """After the generation id (v2+): a rack from v3 on, null or absent before."""
    v0 = encode_subscription(["x"])
    v2 = b"\x00\x02" + v0[2:] + struct.pack(">ii", 0, 7)
    v3 = b"\x00\x03" + v2[2:]
    assert decode_subscription_rack(v0) is None and decode_subscription_rack(v2) is None
    assert decode_subscription_rack(v3 + struct.pack(">h", 2) + b"r1") == "r1"
    assert decode_subscription_rack(v3 + struct.pack(">h", -1)) is None
    with pytest.raises(ValueError):
        decode_subscription_rack(v3 + struct.pack(">h", 5) + b"r1")


def test_bytes_equal_a_real_clients():
    # aiokafka encodes user data b"" as an empty (not null) byte string: compare the prefix
    theirs = ConsumerProtocolMemberAssignment(0, [("t", [0, 2]), ("u", [1])], b"").encode()
    ours = encode_assignment([("t", 2), ("u", 1), ("t", 0)])
    assert ours[:-4] == theirs[:-4] and ours[-4:] == b"\xff\xff\xff\xff"
    assert decode_assignment(theirs) == [("t", 0), ("t", 2), ("u", 1)]
    sub = ConsumerProtocolMemberMetadata(0, ["a", "b"], b"").encode()
    assert encode_subscription(["b", "a"])[:-4] == sub[:-4]
    assert decode_subscription(sub) == ["a", "b"]
    back = ConsumerProtocolMemberAssignment.decode(ours)
    assert [(t, sorted(ps)) for t, ps in back.assignment] == [("t", [0, 2]), ("u", [1])]


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",  # no array length
        b"\x00\x00\xff\xff\xff\xfe",  # an array length of -2
        b"\x00\x00\x7f\xff\xff\xff",  # two billion topics in six bytes
        b"\x00\x00\x00\x00\x00\x01\x00\x05ab",  # a name longer than the bytes left
        b"\x00\x00\x00\x00\x00\x01\xff\xfe",  # a negative name length
        b"\x00\x00\x00\x00\x00\x01\x00\x01\xff",  # a name that is not UTF-8
    ],
)
def test_malformed_bytes_are_refused(data):
    with pytest.raises(ValueError):
        decode_subscription(data)
    with pytest.raises(ValueError):
        decode_assignment(data)
    assert _consumer_assignment(data) == ()


def test_an_assignment_with_too_many_partitions_is_refused():
    data = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1000) + struct.pack(">i", 0)
    with pytest.raises(ValueError):
        decode_assignment(data)
