"""Storage errors (docs/reliability.md "Storage errors"): ENOSPC and EIO injected at
chosen writes and fsyncs of real files, in the log layer and through the broker core.

``DiskFaults`` wraps ``os.pwrite``, ``os.write``, ``os.pread``, ``os.ftruncate`` and the fsyncs: a
rule names the file (by suffix of its path; a checkpoint by its name, also while it is
written as a temporary file), the call and the error, and may let part of a ``pwrite``
through first, which is how a full disk tears a batch.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from tests.core_harness import CoreHarness
from tests.integration.rawclient import fetch_body, produce_body
from tests.unit.logs import batch as lbatch
from tests.unit.logs import crash, open_log, read_all
from tests.unit.test_apis import FETCH, PRODUCE, batch, batches_in
from tidegate.clock import MockClock
from tidegate.errors import ErrorCode as E
from tidegate.log import local_log
from tidegate.log.dir_failure import LogDirFailureChannel, StorageError, UnrecoverableWriteError
from tidegate.log.local_log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from tidegate.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT_FILE, LogCleanerManager
from tidegate.metrics.prometheus import BrokerMetrics
from tidegate.utils.files import TMP_MARK

API_VERSIONS, DESCRIBE_LOG_DIRS = 18, 35


class DiskFaults:
    """Raise ``OSError(err)`` from chosen calls on files whose path ends with a suffix."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rules: list[dict] = []
        self.hits = 0
        real_pwrite, real_pread, real_ftruncate = os.pwrite, os.pread, os.ftruncate
        real_fsync, real_fdatasync = os.fsync, local_log._fdatasync

        def path_of(fd: int) -> str:
            try:
                return os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return ""

        def rule_for(call: str, fd: int) -> dict | None:
            if not self.rules:
                return None
            path = path_of(fd)
            # a file replaced atomically is written as NAME.tmp-...: the rule for NAME holds
            name = path.split(TMP_MARK, 1)[0]
            for r in self.rules:
                if r["call"] == call and name.endswith(r["suffix"]):
                    return r
            return None

        def pwrite(fd, data, position):
            r = rule_for("pwrite", fd)
            if r is None:
                return real_pwrite(fd, data, position)
            self.hits += 1
            keep = r["partial"]
            if keep:
                # a full disk takes the first bytes, then refuses the rest
                real_pwrite(fd, bytes(memoryview(data)[:keep]), position)
                r["partial"] = 0
                return keep
            raise OSError(r["err"], os.strerror(r["err"]))

        def failing(real, call):
            def f(fd, *args):
                r = rule_for(call, fd)
                if r is None:
                    return real(fd, *args)
                self.hits += 1
                raise OSError(r["err"], os.strerror(r["err"]))

            return f

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "write", failing(os.write, "write"))
        monkeypatch.setattr(os, "pread", failing(real_pread, "pread"))
        monkeypatch.setattr(os, "ftruncate", failing(real_ftruncate, "ftruncate"))
        monkeypatch.setattr(os, "fsync", failing(real_fsync, "fsync"))
        monkeypatch.setattr(local_log, "_fdatasync", failing(real_fdatasync, "fsync"))

    def fail(self, call: str, suffix: str, err: int = errno.ENOSPC, *, partial: int = 0) -> None:
        self.rules.append({"call": call, "suffix": suffix, "err": err, "partial": partial})

    def clear(self) -> None:
        self.rules.clear()


@pytest.fixture
def faults(monkeypatch):
    return DiskFaults(monkeypatch)


# -- the failure channel (sans-IO) ---------------------------------------------------------


def storage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tidegate.log.dir_failure"]


def test_a_full_dir_refuses_writes_until_one_succeeds_and_logs_once(caplog):
    caplog.set_level(logging.INFO)
    clock = MockClock()
    ch = LogDirFailureChannel("/data", clock, repeat_interval_ms=60_000)
    enospc = OSError(errno.ENOSPC, "No space left on device")
    for _ in range(100):
        assert ch.error(StorageError("append", enospc)) is False
        clock.advance(10)
    assert ch.full and not ch.offline and ch.offline_log_directory_count == 0
    assert ch.storage_errors == 100
    assert len(storage_lines(caplog)) == 1  # 99 repeats within the interval are counted
    assert "is full" in storage_lines(caplog)[0] and "No space left" in storage_lines(caplog)[0]
    clock.advance(60_000)
    ch.error(StorageError("append", enospc))
    assert len(storage_lines(caplog)) == 2 and "99 more" in storage_lines(caplog)[1]
    ch.write_succeeded()
    assert not ch.full
    assert "space again" in storage_lines(caplog)[2]
    ch.write_succeeded()
    assert len(storage_lines(caplog)) == 3


@pytest.mark.parametrize(
    "exc",
    [
        StorageError("append", OSError(errno.EIO, "Input/output error")),
        # a failed fsync takes the dir offline whatever its errno (fsyncgate)
        StorageError("fsync", OSError(errno.ENOSPC, "No space left on device"), fatal=True),
        StorageError("append", UnrecoverableWriteError(errno.ENOSPC, "could not cut back")),
    ],
)
def test_eio_and_fsync_failures_take_the_dir_offline_for_good(exc, caplog):
    ch = LogDirFailureChannel("/data", MockClock())
    assert ch.error(exc) is True
    assert ch.offline and ch.offline_log_directory_count == 1 and not ch.writable
    ch.write_succeeded()
    assert ch.offline
    assert ch.error(StorageError("append", OSError(errno.ENOSPC, "full"))) is True  # stays offline
    assert len(storage_lines(caplog)) == 1 and "offline until restart" in storage_lines(caplog)[0]


# -- the log layer ----------------------------------------------------------------------------


def test_a_torn_append_is_cut_off_and_the_next_append_follows_it(tmp_path, faults):
    log = open_log(tmp_path)
    log.append(lbatch(3), 0)
    size = log.active_segment.size
    faults.fail("pwrite", ".log", partial=25)  # part of the batch reaches the file
    with pytest.raises(StorageError) as info:
        log.append(lbatch(2, size=400), 0)
    assert not info.value.fatal and info.value.cause.errno == errno.ENOSPC
    assert faults.hits == 2
    assert log.log_end_offset == 3 and log.active_segment.size == size
    assert os.path.getsize(log.active_segment.log_path) == size  # the torn bytes are gone
    faults.clear()
    assert log.append(lbatch(2), 0).first_offset == 3
    assert read_all(log) == [(0, 2), (3, 4)]
    crash(log)
    again = open_log(tmp_path)
    assert read_all(again) == [(0, 2), (3, 4)]  # recovery accepts the log
    again.close()


def test_a_failed_index_write_leaves_log_and_index_as_they_were(tmp_path, faults):
    log = open_log(tmp_path, index_interval_bytes=1)
    log.append(lbatch(1), 0)
    log.append(lbatch(1), 0)  # the second batch gets an index entry
    entries = list(log.active_segment.offset_index.entries())
    faults.fail("pwrite", ".index")
    with pytest.raises(StorageError):
        log.append(lbatch(1), 0)
    faults.clear()
    assert log.log_end_offset == 2 and list(log.active_segment.offset_index.entries()) == entries
    assert log.append(lbatch(1), 0).first_offset == 2
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]
    crash(log)
    again = open_log(tmp_path, index_interval_bytes=1)
    assert read_all(again) == [(0, 0), (1, 1), (2, 2)]
    assert again.append(lbatch(1), 0).first_offset == 3
    again.close()


def test_a_failed_roll_leaves_the_log_appendable(tmp_path, faults):
    log = open_log(tmp_path, segment_bytes=200)
    log.append(lbatch(1, size=150), 0)
    faults.fail("pwrite", ".snapshot")  # the producer-state snapshot a roll writes
    faults.fail("pwrite", ".log")
    with pytest.raises(StorageError) as info:
        log.append(lbatch(1, size=150), 0)
    assert info.value.what in ("segment roll", "append") and not info.value.fatal
    faults.clear()
    assert log.append(lbatch(1, size=150), 0).first_offset == 1
    assert read_all(log) == [(0, 0), (1, 1)]
    crash(log)
    again = open_log(tmp_path, segment_bytes=200)
    assert read_all(again) == [(0, 0), (1, 1)]
    again.close()


def test_a_write_that_cannot_be_cut_back_is_unrecoverable(tmp_path, faults):
    log = open_log(tmp_path)
    log.append(lbatch(1), 0)
    faults.fail("pwrite", ".log", errno.EIO, partial=10)
    faults.fail("ftruncate", ".log", errno.EIO)
    with pytest.raises(StorageError) as info:
        log.append(lbatch(1, size=100), 0)
    assert isinstance(info.value.cause, UnrecoverableWriteError)
    ch = LogDirFailureChannel(str(tmp_path), MockClock())
    assert ch.error(info.value) is True
    faults.clear()
    crash(log)
    again = open_log(tmp_path)  # recovery cuts the torn tail off
    assert read_all(again) == [(0, 0)]
    again.close()


# -- through the broker ---------------------------------------------------------------------


pytestmark = pytest.mark.harness(topics={"s": 1})


def fetch_all(h: CoreHarness) -> list:
    resp = h.request(FETCH, 12, fetch_body("s", 0))
    part = resp.responses[0].partitions[0]
    return part.error_code, [b[0] for b in batches_in(part.records or b"")]


def produce(h: CoreHarness, value: bytes, acks: int = 1):
    if acks == 1:
        return h.produce("s", 0, batch(value, size=200))
    resp = h.request_parked(PRODUCE, 9, produce_body("s", {0: batch(value, size=200)}, acks))
    return resp.responses[0].partition_responses[0]


def test_a_full_disk_answers_storage_error_then_writes_resume(h, faults, caplog):
    caplog.set_level(logging.INFO)
    metrics = BrokerMetrics()
    metrics.register_log_dir_failures(h.logs.failure_channel)
    assert produce(h, b"a").base_offset == 0
    faults.fail("pwrite", ".log", partial=30)
    for i in range(20):
        part = produce(h, b"x%d" % i)
        assert part.error_code == E.kafka_storage_error and part.base_offset == -1
        assert "No space left on device" in part.error_message
    text = metrics.exposition().decode()
    assert "tidegate_log_dir_full 1.0" in text
    assert "tidegate_log_storage_errors_total 20.0" in text
    assert "kafka_log_logmanager_offlinelogdirectorycount 0.0" in text
    assert fetch_all(h) == (E.none, [0])  # reads keep working
    lines = storage_lines(caplog)
    assert len(lines) == 1 and "is full" in lines[0]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    faults.clear()
    assert produce(h, b"b").base_offset == 1
    assert produce(h, b"c", acks=-1).error_code == E.none  # fsync works again
    assert fetch_all(h) == (E.none, [0, 1, 2])
    assert "tidegate_log_dir_full 0.0" in metrics.exposition().decode()


def test_a_failed_fsync_takes_the_dir_offline_until_restart(h, faults, caplog):
    assert produce(h, b"a", acks=-1).error_code == E.none
    faults.fail("fsync", ".log", errno.EIO)
    body = produce_body("s", {0: batch(b"b", size=200)}, -1)
    resp = h.request_parked(PRODUCE, 9, body)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == E.kafka_storage_error
    faults.clear()  # a later fsync that works proves nothing: the dir stays offline
    channel = h.logs.failure_channel
    assert channel.offline and "fsync" in (channel.offline_reason or "")
    assert produce(h, b"c").error_code == E.kafka_storage_error
    assert fetch_all(h)[0] == E.kafka_storage_error
    assert h.list_offsets("s", -1).error_code == E.kafka_storage_error
    md = h.metadata(12, [{"name": "s", "topic_id": None}])
    mp = md.topics[0].partitions[0]
    assert mp.error_code == E.kafka_storage_error and list(mp.offline_replicas) == [1]
    dirs = h.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert dirs.results[0].error_code == E.kafka_storage_error
    assert h.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == E.none
    offline_lines = [m for m in storage_lines(caplog) if "offline until restart" in m]
    assert len(offline_lines) == 1
    plog = h.replicas.get_log("s", 0)
    rp = plog.recovery_point
    h.loop.advance(120_000)  # maintenance: no flush, no checkpoint of an offline dir
    assert plog.recovery_point == rp
    directory = Path(plog.directory)
    h.close()
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()  # the next start recovers
    again = CoreHarness(h.root)
    try:
        assert [b for b in fetch_all(again)[1]] in ([0], [0, 1])  # b was never acknowledged
        assert again.produce("s", 0, batch(b"d")).error_code == E.none
    finally:
        again.close()


def test_a_failed_read_takes_the_dir_offline_and_answers_storage_error(h, faults, caplog):
    """Kafka's LocalLog.read under maybeHandleIOException: an I/O error reading a
    segment for a Fetch takes the log dir offline (one line, no traceback) and the
    partition answers KAFKA_STORAGE_ERROR; the broker goes on answering."""
    caplog.set_level(logging.INFO)
    for v in (b"a", b"b", b"c"):
        assert produce(h, v).error_code == E.none
    faults.fail("pread", ".log", errno.EIO)
    # from an offset inside the segment: the read walks batch headers with pread
    resp = h.request(FETCH, 12, fetch_body("s", 1))
    part = resp.responses[0].partitions[0]
    assert faults.hits >= 1
    assert part.error_code == E.kafka_storage_error and not part.records
    assert part.high_watermark == -1
    channel = h.logs.failure_channel
    assert channel.offline and "read of s-0" in (channel.offline_reason or "")
    lines = [m for m in storage_lines(caplog) if "offline until restart" in m]
    assert len(lines) == 1 and "Input/output error" in lines[0]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    faults.clear()
    assert fetch_all(h)[0] == E.kafka_storage_error  # offline until restart
    assert produce(h, b"d").error_code == E.kafka_storage_error


# -- checkpoint writes ----------------------------------------------------------------------
CHECKPOINT_INTERVAL_MS = 60_000  # log.flush.offset.checkpoint.interval.ms


def test_a_failed_checkpoint_write_takes_the_dir_offline_and_leaves_the_old_file(h, faults, caplog):
    """Kafka hands a checkpoint's IOException to the LogDirFailureChannel: the dir goes
    offline (one line, no traceback). The file is replaced atomically, so what is on disk
    is the previous checkpoint, whole, and no temporary file is left."""
    caplog.set_level(logging.INFO)
    assert produce(h, b"a", acks=-1).error_code == E.none  # fsynced: the recovery point moves
    directory = Path(h.replicas.get_log("s", 0).directory)
    h.loop.advance(CHECKPOINT_INTERVAL_MS)
    before = (directory / RECOVERY_POINT_FILE).read_bytes()
    assert produce(h, b"b", acks=-1).error_code == E.none
    faults.fail("write", RECOVERY_POINT_FILE, errno.EIO)
    h.loop.advance(CHECKPOINT_INTERVAL_MS)
    assert faults.hits == 1
    channel = h.logs.failure_channel
    assert channel.offline and "recovery-point checkpoint" in (channel.offline_reason or "")
    assert (directory / RECOVERY_POINT_FILE).read_bytes() == before
    assert not [p.name for p in directory.iterdir() if TMP_MARK in p.name]
    lines = [m for m in storage_lines(caplog) if "offline until restart" in m]
    assert len(lines) == 1 and "Input/output error" in lines[0]
    assert not [r for r in caplog.records if r.exc_info]
    faults.clear()
    assert produce(h, b"c").error_code == E.kafka_storage_error  # offline until restart


def test_a_checkpoint_write_on_a_full_disk_marks_the_dir_full_until_a_write_succeeds(h, faults):
    assert produce(h, b"a", acks=-1).error_code == E.none
    faults.fail("write", RECOVERY_POINT_FILE)  # ENOSPC
    h.loop.advance(CHECKPOINT_INTERVAL_MS)
    channel = h.logs.failure_channel
    assert faults.hits == 1 and channel.full and not channel.offline
    assert fetch_all(h) == (E.none, [0])  # reads keep working
    faults.clear()
    assert produce(h, b"b").base_offset == 1
    assert not channel.full


def test_a_failed_cleaner_checkpoint_write_takes_the_dir_offline(tmp_path, faults):
    """LogCleanerManager.update_checkpoint (after each clean): an I/O error goes to the
    failure channel (Kafka's ``updateCheckpoints``); without a channel it is raised."""
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        LogCleanerManager(dir_fd).update_checkpoint(("c", 0), 10)
        written = (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text()
        channel = LogDirFailureChannel(str(tmp_path), MockClock())
        manager = LogCleanerManager(dir_fd, channel)
        assert manager.checkpoints == {("c", 0): 10}
        faults.fail("write", CLEANER_OFFSET_CHECKPOINT_FILE, errno.EIO)
        manager.update_checkpoint(("c", 0), 20)
        assert channel.offline and CLEANER_OFFSET_CHECKPOINT_FILE in (channel.offline_reason or "")
        assert (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text() == written
        with pytest.raises(OSError):
            LogCleanerManager(dir_fd).update_checkpoint(("c", 0), 30)
    finally:
        os.close(dir_fd)
