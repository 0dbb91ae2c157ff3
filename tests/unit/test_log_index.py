"""Offset and time indexes: Kafka's file formats, lookups, truncation, sanity checks."""

from __future__ import annotations

import struct

import pytest

from tidegate.log.index import CorruptIndexError, InvalidIndexEntryError, OffsetIndex, TimeIndex


def test_offset_index_file_format_is_kafkas(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100)
    idx.append(105, 0)
    idx.append(120, 4096)
    # relative offset int32 + position int32, big-endian
    assert path.read_bytes() == struct.pack(">iiii", 5, 0, 20, 4096)
    idx.close()
    again = OffsetIndex.load(path, 100)
    assert again.entries() == [(105, 0), (120, 4096)]
    assert len(again) == 2
    assert again.last_entry() == (120, 4096)


def test_offset_index_lookup_returns_the_largest_entry_at_or_below(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0)
    for off, pos in [(9, 100), (19, 200), (29, 300)]:
        idx.append(off, pos)
    assert idx.lookup(0) == 0  # before the first entry: the segment start
    assert idx.lookup(8) == 0
    assert idx.lookup(9) == 100
    assert idx.lookup(18) == 100
    assert idx.lookup(19) == 200
    assert idx.lookup(1_000) == 300
    assert idx.lookup_entry(25) == (19, 200)
    assert idx.lookup_entry(3) == (0, 0)
    idx.close()


def test_offset_index_rejects_out_of_order_entries(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0)
    idx.append(10, 100)
    with pytest.raises(InvalidIndexEntryError):
        idx.append(10, 200)
    with pytest.raises(InvalidIndexEntryError):
        idx.append(11, 100)
    idx.close()


def test_offset_index_truncate_to_removes_entries_at_or_after(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.truncate_to(30)
    assert idx.entries() == [(10, 100), (20, 200)]
    assert path.stat().st_size == 16
    idx.append(25, 250)
    idx.close()
    assert OffsetIndex.load(path, 0).entries() == [(10, 100), (20, 200), (25, 250)]


def test_time_index_file_format_and_maybe_append(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    idx = TimeIndex(path, 50)
    assert idx.maybe_append(1_000, 52)
    assert not idx.maybe_append(1_000, 60)  # not newer: skipped
    assert not idx.maybe_append(900, 61)
    assert idx.maybe_append(2_000, 70)
    assert path.read_bytes() == struct.pack(">qiqi", 1_000, 2, 2_000, 20)
    idx.close()
    assert TimeIndex.load(path, 50).entries() == [(1_000, 52), (2_000, 70)]


def test_time_index_lookup_is_kafkas(tmp_path):
    idx = TimeIndex(tmp_path / "t", 10)
    idx.maybe_append(100, 12)
    idx.maybe_append(200, 20)
    idx.maybe_append(300, 31)
    assert idx.lookup(50) == (-1, 10)  # older than everything: start of segment
    assert idx.lookup(100) == (100, 12)
    assert idx.lookup(250) == (200, 20)
    assert idx.lookup(10_000) == (300, 31)
    idx.truncate_to(20)
    assert idx.entries() == [(100, 12)]
    idx.close()


def test_torn_index_files_are_rejected(tmp_path):
    p = tmp_path / "0.index"
    p.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x01\x02")
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(p, 0)
    t = tmp_path / "0.timeindex"
    t.write_bytes(struct.pack(">qi", 1, 0)[:-1])
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(t, 0)


def test_missing_index_loads_empty_and_says_so(tmp_path):
    idx = OffsetIndex.load(tmp_path / "nope.index", 0)
    assert len(idx) == 0 and idx.was_missing


def test_offset_index_sanity_check(tmp_path):
    p = tmp_path / "0.index"
    p.write_bytes(struct.pack(">iiii", 5, 100, 3, 200))  # offsets go backwards
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(p, 0).sanity_check(10_000)
    p.write_bytes(struct.pack(">iiii", 5, 300, 9, 200))  # positions go backwards
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(p, 0).sanity_check(10_000)
    p.write_bytes(struct.pack(">iiii", 5, 100, 9, 200))
    OffsetIndex.load(p, 0).sanity_check(10_000)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(p, 0).sanity_check(200)  # points at the end of the log


def test_time_index_sanity_check(tmp_path):
    p = tmp_path / "0.timeindex"
    p.write_bytes(struct.pack(">qiqi", 200, 1, 100, 2))  # timestamps go backwards
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(p, 0).sanity_check(100)
    p.write_bytes(struct.pack(">qiqi", 100, 5, 200, 9))
    TimeIndex.load(p, 0).sanity_check(10)
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(p, 0).sanity_check(9)  # an entry for an offset past the log end


def test_reset_rewrites_the_file(tmp_path):
    p = tmp_path / "0.index"
    idx = OffsetIndex(p, 1_000)
    for i in range(10):
        idx.append(1_000 + i, i * 10)
    idx.reset([(1_003, 7), (1_009, 70)])
    assert p.read_bytes() == struct.pack(">iiii", 3, 7, 9, 70)
    assert idx.lookup(1_005) == 7
    idx.reset()
    assert p.read_bytes() == b"" and len(idx) == 0
    idx.close()
    t = TimeIndex(tmp_path / "0.timeindex", 1_000)
    t.reset([(5, 1_001), (9, 1_004)])
    assert (tmp_path / "0.timeindex").read_bytes() == struct.pack(">qiqi", 5, 1, 9, 4)
    t.close()
