"""Record batches and on-disk logs for the unit tests of the log layer.

test_log, test_log_recovery and test_producer_state each had their own copies of
these (a batch builder, opening a log in ``tmp_path``, a simulated kill -9, and
reading every batch back).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tidegate.log import Log, LogConfig
from tidegate.record.batch_builder import Record, build_batch
from tidegate.record.control_records import end_transaction_marker_batch
from tidegate.record.record_batch import iter_batches, read_header

if TYPE_CHECKING:
    from tidegate.server.log_manager import LogManager

#: The partition directory open_log uses under ``tmp_path``.
LOG_DIR = "t-0"
#: The producer id pbatch writes with by default.
PID = 1000


def batch(n: int = 1, ts: int = 1_000, size: int = 20, tag: bytes = b"") -> bytearray:
    """``n`` records: values ``tag + b"v" * size``, keys ``k0, k1, ...``, timestamps
    ``ts, ts + 1, ...``."""
    return build_batch(
        [Record(tag + b"v" * size, key=b"k%d" % i, timestamp=ts + i) for i in range(n)]
    )


def pbatch(
    seq: int, n: int = 1, pid: int = PID, epoch: int = 0, ts: int = 1_000, **kw
) -> bytearray:
    """A batch of ``n`` records from producer ``pid``/``epoch`` starting at sequence ``seq``
    (``transactional=True`` for a transaction's batch)."""
    recs = [Record(b"v%010d" % (seq + i), key=b"k", timestamp=ts + i) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def marker(commit: bool, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0, ts: int = 1_000) -> bytearray:
    """A COMMIT or ABORT marker, as the transaction coordinator writes it."""
    return end_transaction_marker_batch(pid, epoch, coordinator_epoch, commit, ts)


def open_log(
    tmp_path: Path,
    cfg: LogConfig | None = None,
    now: int = 0,
    *,
    log_start_offset: int | None = None,
    leader_epoch: int = 0,
    **settings,
) -> Log:
    """The log of ``tmp_path / LOG_DIR`` with ``cfg`` (or ``LogConfig(**settings)``);
    ``log_start_offset`` is what the log directory's checkpoint would hand it,
    ``leader_epoch`` the epoch a new log starts with."""
    if cfg is None:
        cfg = LogConfig(**settings)
    else:
        assert not settings, "pass a LogConfig or settings, not both"
    return Log(tmp_path / LOG_DIR, cfg, now, log_start_offset=log_start_offset, leader_epoch=leader_epoch)


def crash(log: Log) -> None:
    """Drop the log like kill -9 would: no flush, no checkpoint, no snapshot, no marker."""
    log._release()


def crash_all(logs: LogManager) -> None:
    """kill -9 of a broker: every log of ``logs`` dropped as :func:`crash` drops one (what
    was written stays, as in the page cache)."""
    for plog in logs.logs.values():
        crash(plog)
    logs.logs.clear()


def batch_headers(log: Log) -> list:
    """The header of every batch in the log, reading it a fetch at a time from the log
    start; every batch's CRC must be valid and no read may come back empty."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"empty read at {offset}"
        for p, _ in iter_batches(data, verify_crc=True):
            h = read_header(data, p)
            out.append(h)
            offset = h.last_offset + 1
    return out


def read_all(log: Log) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in the log (see :func:`batch_headers`)."""
    return [(h.base_offset, h.last_offset) for h in batch_headers(log)]
