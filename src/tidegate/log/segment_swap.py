"""The log cleaner's segment swap: Kafka's ``.cleaned`` -> ``.swap`` -> replace protocol
(``LocalLog.replaceSegments``, ``LogCleaner.createNewCleanedSegment`` and the swap files
``LogLoader`` completes).

A clean writes its replacement for a run of segments as ``<base>.log.cleaned`` (and
``<base>.txnindex.cleaned``) with a :class:`CleanedSegmentWriter`, off the event loop and
without touching the log. :func:`swap_in` then replaces the segments, each step durable
before the next: the files are renamed ``.swap`` (the commit point: from here a crash
completes the replacement at load), the old segments are deleted, the ``.swap`` suffix
is dropped, and the new segment's indexes are rebuilt. :func:`complete_swaps`, run by
the :class:`~tidegate.log.log_loader.LogLoader` when a directory opens, deletes the
``.cleaned`` files of a clean cut short and completes a committed swap.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from tidegate.clock import WallMs
from tidegate.record.record_batch import HEADER_STRUCT, LOG_OVERHEAD
from tidegate.utils.files import fsync_dir

from .index import AbortedTxn, TransactionIndex
from .local_log import SEGMENT_FILE_RE, LocalLog
from .segment import LogSegment

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "CleanedSegmentWriter",
    "can_swap",
    "complete_swaps",
    "discard_cleaned",
    "swap_in",
]

#: Kafka's suffixes for the log cleaner's replacement segments: written as ``.cleaned``,
#: renamed to ``.swap`` once complete (the commit point), renamed into place once the
#: segments they replace are gone.
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
_SWAP_RE = re.compile(r"^(\d{20})\.(log|txnindex)\.(cleaned|swap)$")


class CleanedSegmentWriter:
    """``<base>.log.cleaned`` in a partition directory, written as a clean goes through
    at most ``buffer_size`` bytes held (the write half of log.cleaner.io.buffer.size),
    then fsynced with its ``.txnindex.cleaned`` by :meth:`finish`: what a clean leaves
    for the swap. Needs no open log, so a cleaner worker process uses it too."""

    def __init__(self, directory: Path, base: int, buffer_size: int = 262144) -> None:
        self.directory = Path(directory)
        self.base = base
        self.buffer_size = max(1, buffer_size)
        self.written = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        path = self.directory / (f"{base:020d}.log" + CLEANED_FILE_SUFFIX)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.written += len(data)
        if self._pending_bytes >= self.buffer_size:
            self._drain()

    def _drain(self) -> None:
        view = memoryview(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        while view:
            view = view[os.write(self._fd, view) :]

    def finish(self, aborted: list[AbortedTxn]) -> None:
        """The rest written and fsynced, the transaction index beside it, the directory
        fsynced."""
        try:
            self._drain()
            os.fsync(self._fd)
        finally:
            self.close()
        if aborted:
            xi = TransactionIndex(self.directory / (f"{self.base:020d}.txnindex" + CLEANED_FILE_SUFFIX), self.base)
            xi.reset(aborted)
            xi.flush()
            xi.close()
        fsync_dir(self.directory)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def discard_cleaned(directory: Path, base: int) -> None:
    """Remove what a :class:`CleanedSegmentWriter` wrote (the segments changed meanwhile)."""
    for name in (f"{base:020d}.log", f"{base:020d}.txnindex"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / (name + CLEANED_FILE_SUFFIX))


def can_swap(local: LocalLog, old: list[LogSegment]) -> bool:
    """``old`` is still a run of consecutive inactive segments of the log."""
    return local.next_base_after(old) is not None


def swap_in(
    local: LocalLog,
    old: list[LogSegment],
    aborted: list[AbortedTxn],
    now_ms: WallMs,
    on_step: Callable[[str], None] | None = None,
) -> LogSegment:
    """Swap ``old`` (consecutive inactive segments) for the one whose ``.cleaned`` files
    are written (their cleaned batches, offsets unchanged, and the ``aborted``
    transactions of its ``.txnindex``): Kafka's ``replaceSegments``. Steps, each durable
    before the next (``on_step`` is called after each: crash tests): ``swap`` (renamed
    ``.swap``: from here a crash completes the replacement at load), ``deleted`` (old
    segments removed), ``renamed`` (the ``.swap`` suffix dropped); the indexes are then
    rebuilt."""
    local.check_open()
    step = on_step or (lambda _name: None)
    next_base = local.next_base_after(old)
    if next_base is None:
        raise ValueError("swap_in takes consecutive inactive segments")
    d = local.directory
    dir_fd = local.dir_fd
    base = old[0].base_offset
    log_name = f"{base:020d}.log"
    txn_name = f"{base:020d}.txnindex"
    names = [log_name] + ([txn_name] if aborted else [])
    for name in names:
        os.rename(d / (name + CLEANED_FILE_SUFFIX), d / (name + SWAP_FILE_SUFFIX))
    os.fsync(dir_fd)
    step("swap")
    local.forget_segments(old)
    os.fsync(dir_fd)
    step("deleted")
    for name in names:
        os.rename(d / (name + SWAP_FILE_SUFFIX), d / name)
    os.fsync(dir_fd)
    step("renamed")
    seg = LogSegment.open(d, base, local.config.index_interval_bytes, now_ms)
    seg.recover()
    seg.txn_index.reset(aborted)
    seg.txn_index.flush()
    seg.set_next_offset(next_base)
    seg.release_index_fds()
    local.replace_segments(old, seg)
    return seg


def complete_swaps(directory: Path) -> bool:
    """Kafka's LogLoader for the cleaner's leftovers: ``.cleaned`` files (a clean cut
    short before its commit point) are deleted; a ``.swap`` log (committed) replaces
    every segment whose base offset lies in its offset range, then takes its place.
    Returns whether the directory changed (its fsync is the caller's)."""
    d = directory
    cleaned: list[str] = []
    swaps: dict[int, list[str]] = {}
    for name in os.listdir(d):
        m = _SWAP_RE.match(name)
        if m is None:
            continue
        if m.group(3) == "cleaned":
            cleaned.append(name)
        else:
            swaps.setdefault(int(m.group(1)), []).append(name)
    for name in cleaned:
        os.unlink(d / name)
    for base, names in sorted(swaps.items()):
        log_swap = f"{base:020d}.log{SWAP_FILE_SUFFIX}"
        if log_swap not in names:
            for name in names:  # an index without its log: nothing to complete
                os.unlink(d / name)
            continue
        end = _next_offset_of_file(d / log_swap, base)
        for name in os.listdir(d):
            m = SEGMENT_FILE_RE.match(name)
            if m and base <= int(m.group(1)) < end:
                os.unlink(d / name)
        for name in names:
            os.rename(d / name, d / name[: -len(SWAP_FILE_SUFFIX)])
    return bool(cleaned or swaps)


def _next_offset_of_file(path: Path, base: int) -> int:
    """The offset after the last whole batch of a log file (``base`` when it has none)."""
    end = base
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + HEADER_STRUCT.size <= len(data):
        h = HEADER_STRUCT.unpack_from(data, pos)
        size = h[1] + LOG_OVERHEAD
        if h[1] < 0 or pos + size > len(data):
            break
        end = h[0] + h[6] + 1
        pos += size
    return end
