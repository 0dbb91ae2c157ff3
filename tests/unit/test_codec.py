"""Request decoding, response encoding and building messages from dicts
(tidegate.protocol.codec), checked against kio as the reference codec."""

import struct
import subprocess
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from tests.kio_codec import decode_body, encode_request
from tests.kio_codec import response_class as kio_response_class
from tidegate.errors import ErrorCode
from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey, api_name
from tidegate.protocol.codec import (
    InvalidRequestError,
    RequestHeader,
    SchemaError,
    UnsupportedVersionError,
    build,
    decode_request,
    decode_response,
    encode_error_only,
    encode_response,
    message_versions,
    request_class,
    response_class,
    supported_versions,
)
from tidegate.protocol.codec import (
    encode_request as encode_our_request,
)
from tidegate.protocol.messages import ZERO_UUID
from tidegate.protocol.messages.join_group import JoinGroupResponse, JoinGroupResponseMember
from tidegate.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
)


@pytest.mark.parametrize("version", [0, 4, 9, 12, 13])
def test_metadata_request_round_trip(version):
    topics = [{"name": "a", "topic_id": uuid.UUID(int=0)}]
    raw = encode_request(3, version, 42, {"topics": topics}, "me")
    header, body = decode_request(raw)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, version, 42)
    assert header.client_id == "me"
    assert header.flexible == (version >= 9)
    assert type(body) is MetadataRequest
    assert [t.name for t in body.topics] == ["a"]
    assert body.topics[0].topic_id == ZERO_UUID  # kio's None: the zero uuid here


def test_a_pool_buffer_decodes_like_bytes_and_is_released():
    raw = bytearray(encode_request(3, 12, 1, {"topics": [{"name": "x"}]}))
    _header, body = decode_request(raw)
    raw += b"more"  # resizing fails while a view of the buffer is alive
    assert body.topics[0].name == "x"


def test_null_client_id():
    raw = encode_request(18, 3, 1, {"client_software_name": "x", "client_software_version": "1"}, None)
    header, body = decode_request(raw)
    assert header.client_id is None
    assert body.client_software_name == "x"


@pytest.mark.parametrize("key,version", [(0, 2), (1, 3), (3, 14), (9999, 0), (18, 5)])
def test_unsupported_versions(key, version):
    raw = struct.pack(">hhi", key, version, 77) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(raw)
    assert info.value.correlation_id == 77


def test_garbage_body_is_invalid_request():
    raw = struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff"
    with pytest.raises(InvalidRequestError) as info:
        decode_request(raw)
    assert isinstance(info.value, SchemaError) and isinstance(info.value, ValueError)


def test_trailing_bytes_are_ignored_as_kafka_does():
    raw = encode_request(3, 1, 1, {"topics": [{"name": "x"}]}, "c") + b"junk"
    _header, body = decode_request(raw)
    assert [t.name for t in body.topics] == ["x"]


def test_truncated_body_is_invalid():
    raw = encode_request(3, 1, 1, {"topics": [{"name": "abc"}]}, "c")
    for cut in range(8, len(raw)):
        with pytest.raises(InvalidRequestError):
            decode_request(raw[:cut])


def test_short_header_is_invalid():
    with pytest.raises(InvalidRequestError):
        decode_request(b"\x00\x03")


def test_a_null_array_where_the_version_has_none_is_refused():
    """Metadata v0's topics are not nullable (v1+'s are): a -1 count is refused, as
    Kafka's generated parser refuses it, before a handler iterates over None."""
    raw = encode_request(3, 0, 1, {"topics": []}, "c")
    with pytest.raises(InvalidRequestError, match="non-nullable field topics was serialized as null"):
        decode_request(raw[:-4] + b"\xff\xff\xff\xff")
    raw = encode_request(3, 1, 1, {"topics": []}, "c")
    assert decode_request(raw[:-4] + b"\xff\xff\xff\xff")[1].topics is None


def test_a_string_that_is_not_utf8_is_invalid():
    raw = encode_request(3, 1, 1, {"topics": [{"name": "ab"}]}, "c")
    with pytest.raises(InvalidRequestError, match="utf-8"):
        decode_request(raw[:-2] + b"\xff\xfe")


def test_a_client_id_that_is_not_utf8_is_invalid():
    raw = struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe" + struct.pack(">i", 0)
    with pytest.raises(InvalidRequestError, match="client_id is not UTF-8"):
        decode_request(raw)


@pytest.mark.parametrize("version", [1, 9, 12])
def test_every_cut_or_damaged_header_is_invalid_or_unsupported(version):
    """Every byte of a request's header damaged in turn: the request decodes, or raises
    InvalidRequestError or UNSUPPORTED_VERSION, nothing else."""
    raw = encode_request(3, version, 1, {"topics": [{"name": "ab"}]}, "client")
    for at in range(20):
        for value in (0x00, 0x7F, 0x80, 0xFE, 0xFF):
            damaged = bytearray(raw)
            damaged[at] = value
            for data in (damaged, damaged[:at]):
                try:
                    decode_request(bytes(data))
                except (InvalidRequestError, UnsupportedVersionError):
                    pass


def test_build_makes_the_message_class_and_defaults_the_rest():
    values = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [{"error_code": ErrorCode.unknown_topic_or_partition, "name": "t", "partitions": [],
                    "topic_id": None}],
        "throttle_time": 5,
    }
    msg = build(response_class(3, 12), values)
    assert type(msg) is MetadataResponse and type(msg.topics[0]) is MetadataResponseTopic
    assert msg.cluster_id == "c" and msg.throttle_time == 5
    # an error code becomes its int, a null uuid the zero uuid; the rest are defaults
    assert msg.topics[0].error_code == 3 and type(msg.topics[0].error_code) is int
    assert msg.topics[0].topic_id == ZERO_UUID
    assert msg.topics[0].is_internal is False
    assert msg.topics[0].topic_authorized_operations == -(2**31)
    assert msg.error_code == 0
    # v0 has no cluster_id: it is dropped when written, as kio's v0 class drops it
    frame = encode_response(RequestHeader(3, 0, 7, None, False), msg)
    kio, _ = decode_body(kio_response_class(3, 0), frame, 8)
    assert [t.name for t in kio.topics] == ["t"] and not hasattr(kio, "cluster_id")


def test_build_refuses_a_field_no_version_has():
    """A misspelt field would otherwise go out as its default (a JoinGroup sent with
    ``session_timeout_ms`` instead of ``session_timeout`` went out with 0)."""
    with pytest.raises(TypeError, match="session_timeout_ms"):
        build(request_class(11, 5), {"group_id": "g", "session_timeout_ms": 10_000})
    # a field of a nested entity is checked too; one another version has is fine
    with pytest.raises(TypeError, match="partiton_index"):
        build(response_class(3, 12), {"topics": [{"name": "t", "partitions": [{"partiton_index": 0}]}]})
    assert build(request_class(11, 0), {"group_id": "g", "rebalance_timeout": 5}).group_id == "g"


def test_mutable_defaults_are_fresh_per_instance():
    a, b = MetadataResponse(), MetadataResponse()
    a.topics.append(MetadataResponseTopic(name="t"))
    assert b.topics == [] and a != b
    assert JoinGroupResponseMember(member_id="m") == JoinGroupResponseMember(member_id="m")
    assert "member_id='m'" in repr(JoinGroupResponseMember(member_id="m"))


def _imports_in_fresh_interpreter(setup: str, code: str) -> list[str]:
    """The modules ``code`` imports, run after ``setup`` in a new interpreter."""
    script = (f"import sys\n{setup}\nbefore = set(sys.modules)\n{code}\n"
              "print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.split()


def test_the_broker_imports_neither_kio_nor_hypothesis():
    """kio (and the hypothesis it pulls in) is the generator's and the tests' reference
    codec, never the broker's: its 800 schema modules cost most of a second to import."""
    script = ("import sys, tidegate.server.broker, tidegate.client, tidegate.producer\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'kio', 'hypothesis'}))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_an_apis_first_request_imports_its_message_module_only():
    imported = _imports_in_fresh_interpreter(
        "from tests.kio_codec import encode_request\nfrom tidegate.protocol import codec\n"
        "raw = encode_request(11, 9, 1, {'group_id': 'g', 'member_id': '', 'protocol_type': 'consumer'})",
        "codec.decode_request(raw)",
    )
    assert imported == ["tidegate.protocol.messages.join_group"], imported


def test_prepare_builds_every_api_version_once():
    """Every supported API version's codec builds, and after :func:`prepare` of every pair
    :func:`supported_versions` lists, decoding a request and building and encoding its
    response imports and builds nothing more: ``prepare`` does all of a first request's
    start-up work (what benchmarks/codec.py times)."""
    order = supported_versions()
    assert len(order) == len(set(order)) == sum(r.max_version - r.min_version + 1 for r in SUPPORTED_APIS.values())
    assert {v for _, v in order[: len(SUPPORTED_APIS)]} == {r.max_version for r in SUPPORTED_APIS.values()}
    imported = _imports_in_fresh_interpreter(
        "from tidegate.protocol.codec import *\nfrom tidegate.protocol import codec, serialization\n"
        "for api, v in codec.supported_versions(): codec.prepare(api, v)\n"
        "built = len(serialization._readers) + len(serialization._writers)",
        "for api, v in codec.supported_versions():\n"
        "    req = request_class(api, v)\n"
        "    codec.reader(req, v, request_is_flexible(api, v))\n"
        "    encode_response(RequestHeader(api, v, 1, None, False), build(response_class(api, v), {}))\n"
        "assert len(serialization._readers) + len(serialization._writers) == built",
    )
    assert imported == []


@pytest.mark.parametrize("version", [0, 3, 4])
def test_response_encoding_matches_kio_and_header_versions(version):
    header = RequestHeader(18, version, 9, "c", version >= 3)
    body = build(response_class(18, version), {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 12}]})
    frame = encode_response(header, body)
    size, corr = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and corr == 9
    # ApiVersions always uses response header v0 (KIP-511): body starts right after.
    decoded, size = decode_body(kio_response_class(18, version), frame, 8)
    assert 8 + size == len(frame)
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(0, 3, 12)]
    assert decode_response(18, version, frame[4:])[1] == body


def test_flexible_response_has_tagged_field_byte():
    header = RequestHeader(3, 12, 5, "c", True)
    body = build(response_class(3, 12), {"brokers": [], "topics": []})
    frame = encode_response(header, body)
    assert frame[8] == 0  # empty tagged fields of response header v1
    decoded, size = decode_body(kio_response_class(3, 12), frame, 9)
    assert 9 + size == len(frame) and decoded.brokers == () and decoded.topics == ()


def test_client_frames_a_request_as_kio_does():
    body = {"group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 20_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}
    ours = encode_our_request(11, 9, 3, "cid", body)
    assert ours[4:] == encode_request(11, 9, 3, body, "cid")
    assert struct.unpack_from(">i", ours)[0] == len(ours) - 4


def test_a_join_group_response_with_members_matches_kio():
    msg = JoinGroupResponse(generation_id=3, protocol_type="consumer", protocol_name="range", leader="m1",
                            member_id="m1", members=[JoinGroupResponseMember(member_id="m1", metadata=b"xy")])
    for version in range(message_versions(11)[0], message_versions(11)[1] + 1):
        frame = encode_response(RequestHeader(11, version, 1, None, version >= 6), msg)
        offset = 9 if version >= 6 else 8
        kio, size = decode_body(kio_response_class(11, version), frame, offset)
        assert offset + size == len(frame)
        assert kio.error_code is KioErrorCode.none and kio.members[0].metadata == b"xy"


def test_error_only_frame():
    assert encode_error_only(7, 35) == struct.pack(">iih", 6, 7, 35)


def test_api_table_names_and_message_coverage():
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert api_name(ApiKey.DESCRIBE_CLUSTER) == "DescribeCluster"
    for r in SUPPORTED_APIS.values():
        for v in range(r.min_version, r.max_version + 1):
            request_class(r.key, v)
            response_class(r.key, v)
    with pytest.raises(UnsupportedVersionError):
        request_class(3, 99)
