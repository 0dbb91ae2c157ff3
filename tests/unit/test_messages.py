"""tidegate's generated messages and codec against kio, exhaustively: every version of every
request and response tidegate.protocol.messages covers.

* ours -> kio: a random instance of our class, restricted to the fields of the version,
  written by our codec, read by kio's native reader and written back by kio's writer:
  the same bytes;
* kio -> ours: a random kio object (Hypothesis ``from_type``), written by kio, read by
  our codec into the object kio's converts to, written back by our codec: the same bytes;
* the generated files are what the generator makes of the installed kio, and
  ``ErrorCode`` is kio's, member for member;
* malformed bytes only ever raise ``SchemaError``.

A few examples per version keep the whole file under a minute.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
import struct
import typing
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, assume, given, settings
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader

import tests.fuzz.fuzzer  # noqa: F401 - registers the strategy of kio's Records
from tests.kio_codec import encode_body, request_class, response_class
from tidegate.errors import ErrorCode
from tidegate.protocol import generator, messages
from tidegate.protocol.messages import ZERO_UUID, Message
from tidegate.protocol.serialization import (
    SchemaError,
    read_message,
    read_request_header,
    read_response_header,
    write_message,
    write_request_header,
    write_response_header,
)

EXAMPLES = 3
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def cases() -> list[tuple[int, int, bool]]:
    """(api key, version, response?) of every message version the package covers."""
    out = []
    for api_key in messages.MODULES:
        module = messages.api_module(api_key)
        for response, spec in ((False, module.REQUEST), (True, module.RESPONSE)):
            out += [(api_key, v, response) for v in range(spec[1], spec[2] + 1)]
    return out


def case_id(case: tuple[int, int, bool]) -> str:
    api_key, version, response = case
    return f"{messages.MODULES[api_key]}-v{version}-{'response' if response else 'request'}"


CASES = cases()


def classes(api_key: int, version: int, response: bool) -> tuple[type[Message], type, bool]:
    module = messages.api_module(api_key)
    cls, _first, _last, flexible_from = module.RESPONSE if response else module.REQUEST
    kio_cls = (response_class if response else request_class)(api_key, version)
    flexible = flexible_from is not None and version >= flexible_from
    assert flexible == kio_cls.__flexible__
    return cls, kio_cls, flexible


def kio_types(kio_cls: type) -> dict[str, tuple[str | None, Any]]:
    """field -> (kio's kafka_type, the kio entity class below it or None)."""
    hints = typing.get_type_hints(kio_cls)
    out = {}
    for f in dataclasses.fields(kio_cls):
        tp = hints[f.name]
        for _ in range(3):
            args = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
            tp = args[0] if args else tp
        out[f.name] = (f.metadata.get("kafka_type"), tp if dataclasses.is_dataclass(tp) else None)
    return out


# -- random instances of our classes ---------------------------------------------------------------
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1), "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1), "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
}  # fmt: skip
_KIO_INTS = {
    "error_code": st.sampled_from([int(c) for c in KioErrorCode]),
    "timedelta_i64": st.integers(-(2**40), 2**40),  # kio goes through a float and a timedelta
    "datetime_i64": st.integers(0, 2**45),  # kio's datetime range
}


def _value(wire_type: str, kio_type: str | None, default: Any) -> st.SearchStrategy[Any]:
    if kio_type == "datetime_i64" and default == -1:  # kio's nullable datetime: -1 is None
        return st.one_of(st.just(-1), _KIO_INTS[kio_type])
    if kio_type in _KIO_INTS:
        return _KIO_INTS[kio_type]
    if wire_type in _INTS:
        return _INTS[wire_type]
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": _TEXT,
        "bytes": st.binary(max_size=8),
        "records": st.binary(max_size=8),
        "uuid": st.one_of(st.just(ZERO_UUID), st.uuids()),
    }[wire_type]


def ours(cls: type[Message], kio_cls: type, version: int) -> st.SearchStrategy[Message]:
    """Instances of ``cls`` with random values in the fields ``version`` has."""
    module = messages.api_module(type_api(cls))
    kio = kio_types(kio_cls)
    prototype = cls()
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, wire_type, (first, last), nullable, _tag in module.SCHEMA[cls]:
        if not first <= version <= last:
            continue
        kio_type, kio_entity = kio[name]
        element = wire_type.removeprefix("[]")
        if element[0].isupper():
            value = st.deferred(lambda e=element, k=kio_entity: ours(getattr(module, e), k, version))
        else:
            value = _value(element, kio_type, getattr(prototype, name))
        if wire_type.startswith("[]"):
            value = st.lists(value, max_size=3)
        if nullable is not None and nullable[0] <= version <= nullable[1]:
            value = st.one_of(st.none(), value)
        fields[name] = value
    return st.builds(cls, **fields)


def type_api(cls: type[Message]) -> int:
    return typing.cast(int, __import__(cls.__module__, fromlist=["API_KEY"]).API_KEY)


# -- kio objects as ours -----------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def from_kio(value: Any, cls: type[Message] | None = None) -> Any:
    """A kio value as our codec reads the same bytes."""
    if isinstance(value, tuple):
        return [from_kio(v, cls) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        assert cls is not None
        module = messages.api_module(type_api(cls))
        entities = {name: wire.removeprefix("[]") for name, wire, *_ in module.SCHEMA[cls]}
        out = cls()
        for f in dataclasses.fields(value):
            entity = entities[f.name]
            sub = getattr(module, entity) if entity[0].isupper() else None
            kafka_type = f.metadata.get("kafka_type")
            v = getattr(value, f.name)
            if v is None and kafka_type == "datetime_i64":
                v = -1
            elif v is None and kafka_type == "uuid":
                v = ZERO_UUID
            setattr(out, f.name, from_kio(v, sub))
        return out
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH).total_seconds() * 1000)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, KioErrorCode):
        return int(value)
    if isinstance(value, bytes):
        return bytes(value)
    return value


def canonical(value: Any) -> Any:
    """``value`` comparable with ``==`` (NaN floats made equal)."""
    if isinstance(value, Message):
        return (type(value).__name__, *(canonical(getattr(value, n)) for n in type(value).__slots__))
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def kio_write(obj: Any) -> bytes:
    return encode_body(obj)


# -- the round trips -----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_our_bytes_are_kios(case):
    version = case[1]
    cls, kio_cls, flexible = classes(*case)
    read_kio = entity_reader(kio_cls)

    @SETTINGS
    @given(ours(cls, kio_cls, version))
    def check(message: Message) -> None:
        out = bytearray()
        write_message(message, version, flexible, out)
        kio_obj, size = read_kio(bytes(out), 0)
        assert size == len(out)
        assert kio_write(kio_obj) == out
        back, end = read_message(cls, version, flexible, bytes(out))
        assert end == len(out) and canonical(back) == canonical(message)

    check()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_kios_bytes_are_ours(case):
    version = case[1]
    cls, kio_cls, flexible = classes(*case)

    @SETTINGS
    @given(st.from_type(kio_cls))
    def check(kio_obj: Any) -> None:
        try:
            data = kio_write(kio_obj)
            entity_reader(kio_cls)(data, 0)  # kio writes some values it cannot read back
        except (ValueError, TypeError, OverflowError, UnicodeEncodeError, struct.error):
            assume(False)
        message, end = read_message(cls, version, flexible, data)
        assert end == len(data)
        assert canonical(message) == canonical(from_kio(kio_obj, cls))
        out = bytearray()
        write_message(message, version, flexible, out)
        assert bytes(out) == data

    check()


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, "", "client-é"])
def test_headers_are_kios(flexible, client_id):
    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2
    from kio.schema.response_header.v0.header import ResponseHeader as R0
    from kio.schema.response_header.v1.header import ResponseHeader as R1

    kio_header = (V2 if flexible else V1)(request_api_key=3, request_api_version=12, correlation_id=-7,
                                          client_id=client_id)
    out = bytearray()
    write_request_header(3, 12, -7, client_id, flexible, out)
    assert bytes(out) == kio_write(kio_header)
    assert read_request_header(bytes(out) + b"body", flexible) == (client_id, len(out))
    out = bytearray()
    write_response_header(2**31 - 1, flexible, out)
    assert bytes(out) == kio_write((R1 if flexible else R0)(correlation_id=2**31 - 1))
    assert read_response_header(bytes(out), flexible) == (2**31 - 1, len(out))


def test_unknown_tagged_fields_are_skipped():
    """A flexible entity's unknown tags (here tag 7 and 9 in a Metadata v12 request and
    its topic) are skipped; a known one is read within its size."""
    from tidegate.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic

    data = (b"\x02" + bytes(16) + b"\x02t" + b"\x01\x07\x02ab"  # one topic, an unknown tag
            + b"\x01\x00" + b"\x02\x07\x00\x09\x03xyz")  # two booleans, two unknown tags
    message, end = read_message(MetadataRequest, 12, True, data)
    assert end == len(data)
    assert message == MetadataRequest(topics=[MetadataRequestTopic(name="t")],
                                      allow_auto_topic_creation=True)


# -- malformed input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if not c[2]], ids=case_id)
def test_malformed_bytes_raise_schema_error_only(case):
    """Damage to a valid request (bit flips, truncation, a byte set to 0xff or 0x80, junk)
    reads or raises SchemaError: never IndexError, struct.error or UnicodeError."""
    version = case[1]
    cls, kio_cls, flexible = classes(*case)

    @SETTINGS
    @given(ours(cls, kio_cls, version), st.randoms(use_true_random=False))
    def check(message: Message, rng: random.Random) -> None:
        out = bytearray()
        write_message(message, version, flexible, out)
        for _ in range(rng.randint(1, 3)):
            if not out:
                break
            at = rng.randrange(len(out))
            kind = rng.randrange(4)
            if kind == 0:
                out[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del out[at:]
            elif kind == 2:
                out[at] = rng.choice([0xFF, 0x80, 0x7F, 0x00])
            else:
                out[at:at] = rng.randbytes(rng.randint(1, 6))
        try:
            read_message(cls, version, flexible, bytes(out))
        except SchemaError:
            pass

    check()


# -- the generated files and ErrorCode -------------------------------------------------------------
def test_the_generated_files_are_what_kio_gives():
    """``python -m tidegate.protocol.generator`` would change nothing: the messages match
    the installed kio (after a kio upgrade, run it and review the diff)."""
    rendered = generator.render_all()
    stale = [str(rel) for rel, text in rendered.items()
             if not (generator.PACKAGE_DIR / rel).exists() or (generator.PACKAGE_DIR / rel).read_text() != text]
    assert stale == []
    generated = {generator.PACKAGE_DIR / rel for rel in rendered} | {generator.PACKAGE_DIR / "_base.py"}
    assert set(generator.PACKAGE_DIR.glob("*.py")) == generated


def test_error_code_is_kios_member_for_member():
    ours_ = [(m.name, m.value, m.retriable) for m in ErrorCode]
    kios = [(m.name, int(m.value), bool(m.retriable)) for m in KioErrorCode]
    assert ours_ == kios
    assert ErrorCode(3) is ErrorCode.unknown_topic_or_partition and ErrorCode.unknown_topic_or_partition == 3
    assert type(ErrorCode.none.value) is int


def test_every_api_tidegate_serves_and_the_next_ones_have_messages():
    from tidegate.protocol.apis import SUPPORTED_APIS

    assert set(SUPPORTED_APIS) | set(generator.NEXT_APIS) == set(messages.MODULES)
    for api_key, r in SUPPORTED_APIS.items():
        module = messages.api_module(api_key)
        assert module.REQUEST[1] <= r.min_version and r.max_version <= module.REQUEST[2]

