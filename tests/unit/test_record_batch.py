"""Record batch v2 headers: layout, validation, offset assignment.

Batches are built with ``tidegate.record.batch_builder`` (varint records + CRC-32C)
and cross-checked byte for byte against kafka-python's
``DefaultRecordBatchBuilder``, which is how we know the layout is Kafka's.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidegate.log.validator import validate_batches
from tidegate.record import record_batch as rb
from tidegate.record.batch_builder import Record, build_batch, varint
from tidegate.record.record_batch import (
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
    assign_offsets,
    iter_batches,
    read_header,
)
from tidegate.utils.byte_utils import varlong

MAX = 1 << 20


def recs(n: int, ts: int = 1_000, value: bytes = b"value") -> list[Record]:
    return [Record(value + b"-%d" % i, key=b"k%d" % i, timestamp=ts + i) for i in range(n)]


def kafka_python_batch(
    records: list[Record], compression: int = 0, *, producer_id: int = -1
) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 20,
    )
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytearray(builder.build())


def kafka_python_batches(buf) -> list:
    mr = MemoryRecords(bytes(buf))
    out = []
    while (batch := mr.next_batch()) is not None:
        out.append(batch)
    return out


def refresh_crc(buf: bytearray, pos: int = 0) -> None:
    size = rb.batch_size(buf, pos)
    crc = crc32c(bytes(buf[pos + rb.ATTRIBUTES_OFFSET : pos + size]))
    struct.pack_into(">I", buf, pos + rb.CRC_OFFSET, crc)


# -- layout ---------------------------------------------------------------------


def test_header_constants_match_the_v2_layout():
    assert rb.HEADER_STRUCT.size == rb.RECORD_BATCH_OVERHEAD == 61
    assert (rb.BATCH_LENGTH_OFFSET, rb.PARTITION_LEADER_EPOCH_OFFSET, rb.MAGIC_OFFSET) == (
        8,
        12,
        16,
    )
    assert (rb.CRC_OFFSET, rb.ATTRIBUTES_OFFSET, rb.LAST_OFFSET_DELTA_OFFSET) == (17, 21, 23)
    assert (rb.BASE_TIMESTAMP_OFFSET, rb.MAX_TIMESTAMP_OFFSET, rb.PRODUCER_ID_OFFSET) == (
        27,
        35,
        43,
    )
    assert (rb.PRODUCER_EPOCH_OFFSET, rb.BASE_SEQUENCE_OFFSET, rb.RECORDS_COUNT_OFFSET) == (
        51,
        53,
        57,
    )


def test_builder_is_byte_identical_to_kafka_python():
    records = [
        Record(b"v" * 300, key=b"key-0", timestamp=1_700_000_000_000),
        Record(None, key=None, timestamp=1_700_000_000_005),
        Record(b"", key=b"k", timestamp=1_699_999_999_990, headers=[("h1", b"x"), ("h2", None)]),
    ]
    ours = build_batch(records, partition_leader_epoch=0)  # kafka-python writes epoch 0
    theirs = kafka_python_batch(records)
    assert bytes(ours) == bytes(theirs)


def test_header_fields_read_from_a_kafka_python_batch():
    records = recs(5, ts=2_000)
    buf = kafka_python_batch(records, producer_id=77)
    h = read_header(buf)
    assert h.base_offset == 0
    assert h.size == len(buf) == rb.batch_size(buf)
    assert h.magic == 2
    assert h.last_offset_delta == 4 and h.records_count == 5
    assert h.base_timestamp == 2_000 and h.max_timestamp == 2_004
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 0, 0)
    assert h.last_sequence == 4 and h.has_producer_id
    assert h.compression_type == 0 and h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control
    assert h.crc == crc32c(bytes(buf[21:]))
    assert rb.is_crc_valid(buf, 0, len(buf))
    assert rb.last_offset(buf) == 4 and rb.max_timestamp(buf) == 2_004
    assert rb.records_count(buf) == 5 and rb.attributes(buf) == 0


def test_our_batches_decode_in_kafka_python():
    buf = build_batch(
        recs(3, ts=5_000), transactional=True, producer_id=9, producer_epoch=1, base_sequence=10
    )
    [batch] = kafka_python_batches(buf)
    assert batch.validate_crc()
    assert batch.is_transactional
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch] == [
        (0, 5_000, b"k0", b"value-0"),
        (1, 5_001, b"k1", b"value-1"),
        (2, 5_002, b"k2", b"value-2"),
    ]
    h = read_header(buf)
    assert h.is_transactional and h.last_sequence == 12


def test_attribute_bits():
    h = read_header(build_batch(recs(1), control=True, log_append_time=True))
    assert h.is_control and h.timestamp_type == 1 and not h.is_transactional
    gz = read_header(kafka_python_batch(recs(20, value=b"x" * 50), compression=1))
    assert gz.compression_type == rb.COMPRESSION_GZIP


def test_the_builders_varint_table_is_byte_utils_zigzag():
    for value, expected in [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01")]:
        assert varint(value) == expected
    for value in (0, 1, 127, 128, 2**14 - 1, 2**14, -1, -(2**14), 2**40):
        assert varint(value) == varlong(value)
    # every entry of the table, written out by byte count, is the computed encoding
    assert [varint(value) for value in range(2**14)] == [varlong(value) for value in range(2**14)]


# -- framing and validation ---------------------------------------------------------


def test_validate_returns_positions_counts_and_max_timestamp():
    a = build_batch(recs(3, ts=100))
    b = build_batch(recs(2, ts=900))
    c = build_batch(recs(4, ts=500))
    blob = a + b + c
    v = validate_batches(blob, MAX)
    assert v.positions == [0, len(a), len(a) + len(b)]
    assert v.batch_count == 3
    assert v.num_records == 9
    assert v.size_bytes == len(blob)
    assert v.max_timestamp == 901 and v.max_timestamp_batch == 1
    assert [h.records_count for h in v.headers] == [3, 2, 4]
    assert list(iter_batches(blob)) == [(0, len(a)), (len(a), len(b)), (len(a) + len(b), len(c))]


def test_validate_accepts_memoryview_and_bytes():
    buf = build_batch(recs(2))
    assert validate_batches(memoryview(buf), MAX).num_records == 2
    assert validate_batches(bytes(buf), MAX).num_records == 2


def test_crc_mismatch_is_corrupt_message():
    buf = build_batch(recs(3))
    buf[-1] ^= 0x01  # flip a bit in the last record
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(buf, MAX)
    assert e.value.error_code == 2
    assert isinstance(e.value, RecordBatchError)


def test_crc_mismatch_in_a_header_field_covered_by_the_crc():
    buf = build_batch(recs(3))
    struct.pack_into(">q", buf, rb.MAX_TIMESTAMP_OFFSET, 123)
    with pytest.raises(CorruptRecordError):
        validate_batches(buf, MAX)


def test_crc_error_in_second_batch_reports_its_position():
    a, b = build_batch(recs(1)), build_batch(recs(2))
    b[30] ^= 0xFF
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(a + b, MAX)
    assert e.value.position == len(a)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported_for_message_format(magic):
    buf = build_batch(recs(1))
    buf[rb.MAGIC_OFFSET] = magic
    with pytest.raises(UnsupportedForMessageFormatError) as e:
        validate_batches(buf, MAX)
    assert e.value.error_code == 43


def test_magic_above_two_is_corrupt():
    buf = build_batch(recs(1))
    buf[rb.MAGIC_OFFSET] = 3
    with pytest.raises(CorruptRecordError):
        validate_batches(buf, MAX)


def test_batch_larger_than_max_message_bytes_is_record_too_large():
    buf = build_batch([Record(b"x" * 1000)])
    assert validate_batches(buf, len(buf)).num_records == 1  # exactly the limit is fine
    with pytest.raises(RecordTooLargeError) as e:
        validate_batches(buf, len(buf) - 1)
    assert e.value.error_code == 10


def test_too_large_is_checked_before_the_crc_like_kafka():
    buf = build_batch([Record(b"x" * 1000)])
    buf[-1] ^= 1
    with pytest.raises(RecordTooLargeError):
        validate_batches(buf, 100)


@pytest.mark.parametrize("cut", [1, 10, 60, 61])
def test_truncated_buffer_is_corrupt(cut):
    buf = build_batch(recs(2)) + build_batch(recs(2))
    with pytest.raises(CorruptRecordError):
        validate_batches(buf[:-cut], MAX)


@pytest.mark.parametrize("size", [1, 5, 16, 17, 40])
def test_short_buffer_is_corrupt(size):
    with pytest.raises(CorruptRecordError):
        validate_batches(build_batch(recs(1))[:size], MAX)


def test_empty_records_are_corrupt():
    with pytest.raises(CorruptRecordError):
        validate_batches(b"", MAX)


@pytest.mark.parametrize("length", [-5, 0, 13, 48])
def test_impossible_batch_length_is_corrupt(length):
    buf = build_batch(recs(1))
    struct.pack_into(">i", buf, rb.BATCH_LENGTH_OFFSET, length)
    with pytest.raises(CorruptRecordError):
        validate_batches(buf, MAX)


def test_zero_filled_tail_is_corrupt():
    buf = build_batch(recs(1)) + bytes(100)
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(buf, MAX)
    assert e.value.position == len(buf) - 100


@pytest.mark.parametrize("field", [rb.LAST_OFFSET_DELTA_OFFSET, rb.RECORDS_COUNT_OFFSET])
def test_negative_counts_are_corrupt_even_with_a_valid_crc(field):
    buf = build_batch(recs(2))
    struct.pack_into(">i", buf, field, -1)
    refresh_crc(buf)
    with pytest.raises(CorruptRecordError):
        validate_batches(buf, MAX, from_client=False)


def test_client_batch_must_have_base_offset_zero():
    buf = build_batch(recs(1), base_offset=7)
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(buf, MAX)
    assert e.value.error_code == 87
    assert validate_batches(buf, MAX, from_client=False).num_records == 1


def test_client_batch_count_must_match_last_offset_delta():
    buf = build_batch(recs(3))
    struct.pack_into(">i", buf, rb.RECORDS_COUNT_OFFSET, 2)
    refresh_crc(buf)
    with pytest.raises(InvalidRecordError):
        validate_batches(buf, MAX)


def test_clients_may_not_write_control_batches():
    buf = build_batch(recs(1), control=True)
    with pytest.raises(InvalidRecordError):
        validate_batches(buf, MAX)
    assert validate_batches(buf, MAX, from_client=False).num_records == 1


def test_idempotent_batch_needs_a_sequence():
    buf = build_batch(recs(1), producer_id=5, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError):
        validate_batches(buf, MAX)


def test_single_batch_rule_is_optional():
    blob = build_batch(recs(1)) + build_batch(recs(1))
    assert validate_batches(blob, MAX).batch_count == 2
    with pytest.raises(InvalidRecordError):
        validate_batches(blob, MAX, single_batch=True)


def test_iter_batches_verify_crc():
    a, b = build_batch(recs(1)), build_batch(recs(1))
    b[-1] ^= 1
    assert len(list(iter_batches(a + b))) == 2  # framing only
    it = iter_batches(a + b, verify_crc=True)
    assert next(it) == (0, len(a))
    with pytest.raises(CorruptRecordError):
        next(it)


# -- offset assignment ----------------------------------------------------------------


def test_offsets_are_assigned_sequentially_across_batches():
    batches = [build_batch(recs(n)) for n in (3, 1, 5)]
    blob = bytearray(b"".join(batches))
    before = bytes(blob)
    v = validate_batches(blob, MAX)
    last = assign_offsets(blob, 100, positions=v.positions)
    assert last == 108
    hs = [read_header(blob, p) for p in v.positions]
    assert [(h.base_offset, h.last_offset) for h in hs] == [(100, 102), (103, 103), (104, 108)]
    # Only baseOffset changed: everything the CRC covers is untouched.
    for p, size in iter_batches(blob):
        assert blob[p + 8 : p + size] == before[p + 8 : p + size]
    validate_batches(blob, MAX, from_client=False)
    decoded = [r.offset for batch in kafka_python_batches(blob) for r in batch]
    assert decoded == list(range(100, 109))


def test_assign_offsets_without_positions_and_leader_epoch():
    blob = build_batch(recs(2)) + build_batch(recs(2))
    assert assign_offsets(blob, 0, partition_leader_epoch=4) == 3
    assert [read_header(blob, p).partition_leader_epoch for p, _ in iter_batches(blob)] == [4, 4]
    assert all(rb.is_crc_valid(blob, p, s) for p, s in iter_batches(blob))


def test_log_append_time_rewrites_max_timestamp_and_keeps_a_valid_crc():
    blob = build_batch(recs(3, ts=1_000)) + build_batch(recs(2, ts=2_000))
    assign_offsets(blob, 10, log_append_time_ms=9_999)
    for p, size in iter_batches(blob):
        h = read_header(blob, p)
        assert h.timestamp_type == 1
        assert h.max_timestamp == 9_999
        assert h.base_timestamp in (1_000, 2_000)  # Kafka leaves baseTimestamp alone
        assert rb.is_crc_valid(blob, p, size)
    validate_batches(blob, MAX, from_client=False)
    batches = kafka_python_batches(blob)
    assert all(b.validate_crc() for b in batches)
    assert [(r.offset, r.timestamp) for b in batches for r in b] == [
        (o, 9_999) for o in range(10, 15)
    ]


def test_log_append_time_on_a_compressed_batch_does_not_touch_the_payload():
    records = recs(50, value=b"compress me " * 10)
    buf = kafka_python_batch(records, compression=1)
    payload = bytes(buf[61:])
    assign_offsets(buf, 1_000, log_append_time_ms=42)
    assert bytes(buf[61:]) == payload
    [batch] = kafka_python_batches(buf)
    assert batch.validate_crc() and batch.compression_type == 1
    assert [(r.offset, r.timestamp, r.value) for r in batch][-1] == (1_049, 42, records[-1].value)
