"""Request decoding and response encoding through kio."""

import io
import struct
import subprocess
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey, api_name
from tidegate.protocol.codec import (
    InvalidRequestError,
    RequestHeader,
    UnsupportedVersionError,
    build,
    decode_request,
    encode_error_only,
    encode_response,
    ms,
    request_class,
    response_class,
    warm_up_order,
)


def encode_request(api_key, version, correlation_id, client_id, body_values):
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(out, build(cls, body_values))
    return out.getvalue()


@pytest.mark.parametrize("version", [0, 4, 9, 12, 13])
def test_metadata_request_round_trip(version):
    topics = [{"name": "a", "topic_id": uuid.UUID(int=0)}]
    raw = encode_request(3, version, 42, "me", {"topics": topics})
    header, body = decode_request(raw)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, version, 42)
    assert header.client_id == "me"
    assert header.flexible == (version >= 9)
    assert [t.name for t in body.topics] == ["a"]


def test_null_client_id():
    raw = encode_request(18, 3, 1, None, {"client_software_name": "x", "client_software_version": "1"})
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
    with pytest.raises(InvalidRequestError):
        decode_request(raw)


def test_trailing_bytes_are_ignored_as_kafka_does():
    raw = encode_request(3, 1, 1, "c", {"topics": [{"name": "x"}]}) + b"junk"
    _header, body = decode_request(raw)
    assert [t.name for t in body.topics] == ["x"]


def test_truncated_body_is_invalid():
    raw = encode_request(3, 1, 1, "c", {"topics": [{"name": "abc"}]})
    with pytest.raises(InvalidRequestError):
        decode_request(raw[:-2])


def test_short_header_is_invalid():
    with pytest.raises(InvalidRequestError):
        decode_request(b"\x00\x03")


def test_build_drops_fields_a_version_lacks_and_defaults_the_rest():
    values = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [{"error_code": 3, "name": "t", "partitions": []}],
        "throttle_time": 5,
    }
    v0 = build(response_class(3, 0), values)
    assert not hasattr(v0, "cluster_id")
    v12 = build(response_class(3, 12), values)
    assert v12.cluster_id == "c"
    assert ms(v12.throttle_time) == 5
    assert v12.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert v12.topics[0].is_internal is False


def test_build_refuses_a_field_no_version_has():
    """A misspelt field would otherwise go out as its default (a JoinGroup sent with
    ``session_timeout_ms`` instead of kio's ``session_timeout`` went out with 0)."""
    with pytest.raises(TypeError, match="session_timeout_ms"):
        build(request_class(11, 5), {"group_id": "g", "session_timeout_ms": 10_000})
    # a field of a nested entity is checked too; one another version has is fine
    with pytest.raises(TypeError, match="partiton_index"):
        build(response_class(3, 12), {"topics": [{"name": "t", "partitions": [{"partiton_index": 0}]}]})
    assert build(request_class(11, 0), {"group_id": "g", "rebalance_timeout": 5}).group_id == "g"


def _imports_in_fresh_interpreter(setup: str, code: str) -> list[str]:
    """The modules ``code`` imports, run after ``setup`` in a new interpreter (this
    process has imported most of kio's schemas already)."""
    hook = "sys.addaudithook(lambda ev, args: seen.append(args[0]) if ev == 'import' else None)"
    script = f"import sys\n{setup}\nseen = []\n{hook}\n{code}\nprint('\\n'.join(seen))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.split()


def test_build_checks_a_newer_versions_field_with_one_import():
    """A dict built for the newest version, given to an older one: the key is checked
    against the newest version first, not by importing every version of the message
    (the first JoinGroup of a broker imported 20 modules on the event loop while parked
    long polls waited, 30 ms here and 200 ms beside two busy processes)."""
    imported = _imports_in_fresh_interpreter(
        "from tidegate.protocol.codec import build, response_class\ncls = response_class(11, 5)",
        "build(cls, {'member_id': 'm', 'skip_assignment': False, 'protocol_type': 'consumer'})",
    )
    versions = {m.split(".")[3] for m in imported if m.startswith("kio.schema.join_group.v")}
    assert versions == {"v9"}, imported


def test_warm_up_loads_every_api_version_once():
    """After :func:`warm_up` of every pair :func:`warm_up_order` lists, decoding a request
    and building and encoding its response imports nothing, for every supported API
    version: a broker's first request of an API does no start-up work."""
    order = warm_up_order()
    assert len(order) == len(set(order)) == sum(r.max_version - r.min_version + 1 for r in SUPPORTED_APIS.values())
    assert {v for _, v in order[: len(SUPPORTED_APIS)]} == {r.max_version for r in SUPPORTED_APIS.values()}
    imported = _imports_in_fresh_interpreter(
        "from tidegate.protocol.codec import *\nfrom tidegate.protocol import codec\n"
        "for api, v in codec.warm_up_order(): codec.warm_up(api, v)",
        "for api, v in codec.warm_up_order():\n"
        "    codec._request_reader(api, v)\n"
        "    try:  # defaults do not encode for every message (CreateDelegationToken's timestamps)\n"
        "        encode_response(RequestHeader(api, v, 1, None, False), build(response_class(api, v), {}))\n"
        "    except (AttributeError, TypeError, ValueError): pass",
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
    decoded, _ = entity_reader(type(body))(frame, 8)
    assert decoded == body


def test_flexible_response_has_tagged_field_byte():
    header = RequestHeader(3, 12, 5, "c", True)
    body = build(response_class(3, 12), {"brokers": [], "topics": []})
    frame = encode_response(header, body)
    assert frame[8] == 0  # empty tagged fields of response header v1
    decoded, _ = entity_reader(type(body))(frame, 9)
    assert decoded == body


def test_error_only_frame():
    assert encode_error_only(7, 35) == struct.pack(">iih", 6, 7, 35)


def test_api_table_names_and_kio_coverage():
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert api_name(ApiKey.DESCRIBE_CLUSTER) == "DescribeCluster"
    for r in SUPPORTED_APIS.values():
        for v in range(r.min_version, r.max_version + 1):
            request_class(r.key, v)
            response_class(r.key, v)
