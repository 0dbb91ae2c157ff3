"""The leader-epoch cache (Kafka's LeaderEpochFileCache) and its checkpoint files.

The cache's answers follow Kafka's LeaderEpochFileCacheTest; the log-level tests show
the stable epoch of a single node: every batch stamped with it, recorded once, kept
across clean and unclean restarts, trimmed with the log start offset and truncation.
"""

from __future__ import annotations

import os

import pytest

from tests.unit.logs import LOG_DIR, batch, crash, open_log
from tidegate.log.checkpoint import (
    CheckpointWriter,
    read_checkpoint_file,
    write_checkpoint_file,
)
from tidegate.log.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    EpochEntry,
    LeaderEpochFileCache,
)
from tidegate.record.record_batch import read_header


@pytest.fixture
def dir_fd(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)
    yield fd
    os.close(fd)


def file_text(tmp_path) -> str:
    return (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text()


# -- the cache -------------------------------------------------------------------------


def test_assign_writes_the_checkpoint_at_once_and_only_for_a_new_epoch(tmp_path, dir_fd):
    cache = LeaderEpochFileCache(dir_fd)
    assert cache.latest_epoch is None and cache.entries == []
    assert cache.assign(2, 6)
    assert file_text(tmp_path) == "0\n1\n2 6\n"  # Kafka's format: version, count, entries
    assert not cache.assign(2, 10)  # the same epoch later: nothing new
    assert cache.assign(3, 10)
    assert file_text(tmp_path) == "0\n2\n2 6\n3 10\n"
    assert LeaderEpochFileCache(dir_fd).entries == [(2, 6), (3, 10)]


def test_assign_drops_entries_that_would_break_monotonicity(dir_fd):
    cache = LeaderEpochFileCache(dir_fd)
    for epoch, start in ((1, 5), (2, 6), (3, 8)):
        cache.assign(epoch, start)
    cache.assign(2, 7)  # an older epoch, later offset: epochs 2 and 3 go
    assert cache.entries == [(1, 5), (2, 7)]
    cache.assign(4, 6)  # a newer epoch, earlier offset: (2, 7) goes
    assert cache.entries == [(1, 5), (4, 6)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined epoch
        (6, (6, 20)),  # the latest epoch ends at the log end offset
        (0, (0, 5)),  # below every known epoch: the first epoch's start
        (1, (1, 10)),  # a known epoch: the start of the next one
        (5, (5, 15)),
        (3, (1, 10)),  # unknown, between: the largest epoch below, the next one's start
        (7, (-1, -1)),  # above every known epoch
    ],
)
def test_end_offset_for(dir_fd, requested, expected):
    cache = LeaderEpochFileCache(dir_fd)
    cache.assign(1, 5)
    cache.assign(5, 10)
    cache.assign(6, 15)
    assert cache.end_offset_for(requested, 20) == expected


def test_end_offset_for_an_empty_cache_is_undefined(dir_fd):
    assert LeaderEpochFileCache(dir_fd).end_offset_for(0, 20) == (-1, -1)


def test_epoch_for_offset(dir_fd):
    cache = LeaderEpochFileCache(dir_fd)
    cache.assign(1, 5)
    cache.assign(3, 10)
    assert [cache.epoch_for_offset(o) for o in (0, 5, 9, 10, 99)] == [None, 1, 1, 3, 3]


def test_truncate_from_start_keeps_the_epoch_holding_the_new_start(tmp_path, dir_fd):
    cache = LeaderEpochFileCache(dir_fd)
    for epoch, start in ((0, 0), (1, 5), (2, 10)):
        cache.assign(epoch, start)
    assert not cache.truncate_from_start(0)  # nothing before it
    assert cache.truncate_from_start(7)
    assert cache.entries == [(1, 7), (2, 10)]
    assert cache.dirty
    assert file_text(tmp_path) == "0\n3\n0 0\n1 5\n2 10\n"  # written later, as Kafka
    ticket = cache.checkpoint()
    assert ticket is not None and cache.checkpoint() is None
    ticket.run()
    assert file_text(tmp_path) == "0\n2\n1 7\n2 10\n"
    assert cache.truncate_from_start(10)
    assert cache.entries == [(2, 10)]
    assert cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]


def test_truncate_from_end_drops_epochs_starting_at_or_after_it(dir_fd):
    cache = LeaderEpochFileCache(dir_fd)
    for epoch, start in ((0, 0), (1, 5), (2, 10)):
        cache.assign(epoch, start)
    assert not cache.truncate_from_end(11)
    assert cache.truncate_from_end(10)
    assert cache.entries == [(0, 0), (1, 5)]
    assert cache.truncate_from_end(3)
    assert cache.entries == [EpochEntry(0, 0)]


def test_a_malformed_checkpoint_is_read_as_far_as_it_goes(tmp_path, dir_fd):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n2\n0 0\nnonsense\n")
    assert LeaderEpochFileCache(dir_fd).entries == [(0, 0)]
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n5\n0 0\n")  # wrong count
    assert LeaderEpochFileCache(dir_fd).entries == []


# -- checkpoint files ----------------------------------------------------------------------


def test_checkpoint_file_round_trip_and_atomic_replace(tmp_path, dir_fd):
    assert read_checkpoint_file(dir_fd, "x") is None
    write_checkpoint_file(dir_fd, "x", ["a 1 2", "b 0 7"])
    assert (tmp_path / "x").read_text() == "0\n2\na 1 2\nb 0 7\n"
    assert read_checkpoint_file(dir_fd, "x") == ["a 1 2", "b 0 7"]
    write_checkpoint_file(dir_fd, "x", [])
    assert read_checkpoint_file(dir_fd, "x") == []
    assert sorted(os.listdir(tmp_path)) == ["x"]  # no temporary file left behind
    (tmp_path / "x").write_text("1\n0\n")  # an unknown version
    assert read_checkpoint_file(dir_fd, "x") is None


def test_checkpoint_writes_finishing_out_of_order_keep_the_newest(tmp_path, dir_fd):
    writer = CheckpointWriter("x")
    older = writer.ticket(dir_fd, ["old"])
    newer = writer.ticket(dir_fd, ["new"])
    newer.run()
    older.run()  # ran later on another worker: skipped
    assert read_checkpoint_file(dir_fd, "x") == ["new"]
    writer.write(dir_fd, ["newest"])
    assert read_checkpoint_file(dir_fd, "x") == ["newest"]


# -- the log's stable epoch ------------------------------------------------------------------


def test_a_new_log_records_its_epoch_and_stamps_every_batch(tmp_path):
    log = open_log(tmp_path)
    assert log.leader_epoch == 0
    assert log.leader_epoch_cache.entries == [(0, 0)]  # assigned when it became leader
    assert file_text(tmp_path / LOG_DIR) == "0\n1\n0 0\n"
    log.append(batch(2), 0)
    log.append(batch(3), 0)
    data = log.read(0, 1 << 20)
    assert read_header(data, 0).partition_leader_epoch == 0
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 5)
    log.close()


@pytest.mark.parametrize("unclean", [False, True])
def test_the_epoch_and_its_start_survive_a_restart(tmp_path, unclean):
    log = open_log(tmp_path, leader_epoch=3)
    log.append(batch(4), 0)
    log.flush()
    if unclean:
        crash(log)
    else:
        log.close()
    # The epoch comes from the checkpoint, whatever the opener proposes.
    again = open_log(tmp_path)
    assert again.leader_epoch == 3
    assert again.leader_epoch_cache.entries == [(3, 0)]
    info = again.append(batch(1), 0)
    assert read_header(again.read(info.first_offset, 1000), 0).partition_leader_epoch == 3
    assert again.leader_epoch_cache.entries == [(3, 0)]  # the same epoch: nothing new
    again.close()


def test_recovery_rebuilds_a_lost_checkpoint_from_the_batches(tmp_path):
    log = open_log(tmp_path, leader_epoch=2)
    log.append(batch(2), 0)
    log.append(batch(2), 0)
    crash(log)
    (tmp_path / LOG_DIR / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    again = open_log(tmp_path)  # unclean: the segment is recovered, batch by batch
    assert again.leader_epoch == 2
    assert again.leader_epoch_cache.entries == [(2, 0)]
    again.close()


def test_a_lost_tail_takes_its_epochs_with_it(tmp_path):
    """An entry whose start is at or beyond the recovered end (a torn tail) goes, as
    Kafka's LogLoader truncates the cache to the log end offset."""
    log = open_log(tmp_path)
    log.append(batch(3), 0)
    log.flush()
    log.leader_epoch = 1  # a later epoch began at 3 ...
    log.append(batch(3), 0)
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 3)]
    crash(log)  # ... but its batch never reached the disk
    seg = tmp_path / LOG_DIR / f"{0:020d}.log"
    os.truncate(seg, os.path.getsize(seg) - 10)
    again = open_log(tmp_path)
    assert again.log_end_offset == 3
    assert again.leader_epoch_cache.entries == [(0, 0)]
    assert again.leader_epoch == 0
    again.close()


def test_the_log_start_offset_trims_the_cache(tmp_path):
    log = open_log(tmp_path, segment_bytes=len(batch(2)), retention_ms=-1)
    for _ in range(3):
        log.append(batch(2), 0)
    log.increment_log_start_offset(3, 0)
    assert log.leader_epoch_cache.entries == [(0, 3)]
    ticket = log.checkpoint_leader_epochs()
    assert ticket is not None
    ticket.run()
    assert file_text(tmp_path / LOG_DIR) == "0\n1\n0 3\n"
    assert log.checkpoint_leader_epochs() is None
    log.close()
    again = open_log(tmp_path, log_start_offset=3)
    assert again.leader_epoch_cache.entries == [(0, 3)]
    again.close()


def test_truncation_trims_from_the_end_and_a_full_truncation_starts_afresh(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(3), 0)
    log.leader_epoch = 4
    log.append(batch(3), 0)
    assert log.leader_epoch_cache.entries == [(0, 0), (4, 3)]
    log.truncate_to(3, 0)
    assert log.leader_epoch_cache.entries == [(0, 0)]
    log.truncate_to(0, 0)  # below the first segment: emptied, restarted
    assert log.leader_epoch_cache.entries == []
    log.append(batch(1), 0)  # the next batch records the epoch again
    assert log.leader_epoch_cache.entries == [(4, 0)]
    log.close()


def test_a_trim_written_after_its_partition_was_deleted_is_no_error(tmp_path):
    log = open_log(tmp_path, segment_bytes=len(batch(2)), retention_ms=-1)
    for _ in range(2):
        log.append(batch(2), 0)
    log.increment_log_start_offset(2, 0)
    ticket = log.checkpoint_leader_epochs()
    assert ticket is not None
    log.delete()  # DeleteTopics before the worker thread ran the write
    ticket.run()
    assert not (tmp_path / LOG_DIR).exists()
