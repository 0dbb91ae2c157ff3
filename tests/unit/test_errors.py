"""One class per Kafka error (tidegate.errors), whatever path it is imported from, and
the broker-side subclasses that add context caught by the shared class."""

import struct

import pytest

import tidegate.client
import tidegate.client.errors
import tidegate.client.fetcher
import tidegate.log
import tidegate.producer
import tidegate.protocol.codec
import tidegate.record.record_batch
import tidegate.security.scram
from tidegate import errors
from tidegate.errors import ErrorCode
from tidegate.log import LogOffsetOutOfRangeError
from tidegate.log.validator import validate_batches
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.record_batch import BatchTooLargeError, RecordBatchError


@pytest.mark.parametrize(
    "name,modules",
    [
        ("UnsupportedVersionError", [tidegate.client, tidegate.client.errors, tidegate.protocol.codec]),
        ("SaslAuthenticationError", [tidegate.client, tidegate.client.errors, tidegate.security.scram]),
        ("RecordTooLargeError", [tidegate.producer, tidegate.record.record_batch]),
        ("OffsetOutOfRangeError", [tidegate.log, tidegate.client.fetcher]),
    ],
)
def test_each_error_name_is_one_class(name, modules):
    for module in modules:
        assert getattr(module, name) is getattr(errors, name), module.__name__


@pytest.mark.parametrize(
    "cls,code",
    [
        (errors.UnsupportedVersionError, ErrorCode.unsupported_version),
        (errors.SaslAuthenticationError, ErrorCode.sasl_authentication_failed),
        (errors.RecordTooLargeError, ErrorCode.message_too_large),
        (errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    ],
)
def test_codes_are_kafkas(cls, code):
    assert issubclass(cls, errors.KafkaError)
    assert cls.code == code.value


def test_a_batch_over_max_message_bytes_is_both_a_batch_error_and_record_too_large():
    buf = build_batch([Record(b"x" * 100)])
    with pytest.raises(errors.RecordTooLargeError) as e:
        validate_batches(buf, 10)
    assert isinstance(e.value, BatchTooLargeError) and isinstance(e.value, RecordBatchError)
    assert e.value.error_code == e.value.code == ErrorCode.message_too_large.value
    assert e.value.position == 0


def test_an_unsupported_request_is_unsupported_version_with_its_header():
    with pytest.raises(errors.UnsupportedVersionError) as e:
        tidegate.protocol.codec.decode_request(struct.pack(">hhi", 0, 99, 5) + b"\x00\x00")
    assert isinstance(e.value, tidegate.protocol.codec.UnsupportedRequestVersionError)
    assert (e.value.api_key, e.value.api_version, e.value.correlation_id) == (0, 99, 5)


def test_offset_out_of_range_subclasses_carry_their_context():
    err = LogOffsetOutOfRangeError("out", 3, 7)
    assert isinstance(err, errors.OffsetOutOfRangeError)
    assert (err.error_code, err.code, err.log_start_offset, err.log_end_offset) == (1, 1, 3, 7)
    fetch_err = tidegate.client.fetcher.FetchOffsetOutOfRangeError(("t", 0), 9, 3, 7)
    assert isinstance(fetch_err, errors.OffsetOutOfRangeError) and fetch_err.code == 1
    assert (fetch_err.tp, fetch_err.offset, fetch_err.high_watermark) == (("t", 0), 9, 7)
