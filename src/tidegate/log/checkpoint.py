"""Checkpoint files: small files replaced atomically, Kafka's ``CheckpointFile``.

Kafka's format is a version line, a count line and one entry per line::

    0
    2
    <entry>
    <entry>

used for ``leader-epoch-checkpoint`` (entries ``epoch start_offset``, one file per
partition) and ``log-start-offset-checkpoint`` (entries ``topic partition offset``, one
file per log directory). A write goes to a temporary file in the same directory, is
fsynced, renamed over the old file, and the directory is fsynced: a crash leaves the old
or the new file, never a mix (:func:`tidegate.utils.files.replace_file`).

:class:`CheckpointWriter` numbers the writes of one file so they may run on any thread
(the scheduler's workers) in any order: a write that starts after a newer one finished
is skipped, so the file always ends with the newest content.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence

from tidegate.utils.files import replace_file

__all__ = [
    "CheckpointWrite",
    "CheckpointWriter",
    "read_checkpoint_file",
    "write_checkpoint_file",
]

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0


def write_checkpoint_file(dir_fd: int, name: str, entries: Sequence[str]) -> None:
    """Write Kafka's checkpoint format (version 0, count, entries), durably."""
    text = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(f"{e}\n" for e in entries)
    replace_file(dir_fd, name, text.encode("utf-8"), sync_dir=True)


def read_checkpoint_file(dir_fd: int, name: str) -> list[str] | None:
    """The entries of a checkpoint file; None when it is missing or malformed (a wrong
    version, a count that does not match): the caller treats that as no checkpoint."""
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    lines = b"".join(chunks).decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad version or count")
    except ValueError as exc:
        log.warning("ignoring malformed checkpoint file %s: %s", name, exc)
        return None
    return lines[2:]


class CheckpointWrite:
    """One write of a checkpoint file, to run on any thread (it owns a duplicate of the
    directory descriptor, so the directory's owner may close meanwhile). With
    ``missing_ok`` a directory deleted meanwhile (a partition's, with its topic) is not
    an error: there is nothing left to checkpoint."""

    __slots__ = ("_dir_fd", "_missing_ok", "_seq", "_writer", "entries")

    def __init__(
        self, writer: CheckpointWriter, dir_fd: int, seq: int, entries: list[str], missing_ok: bool
    ) -> None:
        self._writer = writer
        self._dir_fd = dir_fd
        self._seq = seq
        self._missing_ok = missing_ok
        self.entries = entries

    def run(self) -> None:
        """Write the file unless a newer write of it already finished; raises OSError."""
        try:
            self._writer._write(self._dir_fd, self._seq, self.entries)
        except FileNotFoundError:
            if not self._missing_ok:
                raise
        finally:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def __del__(self) -> None:
        # a write never run must not leak its descriptor
        if self._dir_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            self._dir_fd = -1


class CheckpointWriter:
    """The writes of one checkpoint file, numbered so the newest content always wins."""

    __slots__ = ("_lock", "_next", "_written", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._next = 0
        self._written = -1

    def write(self, dir_fd: int, entries: list[str]) -> None:
        """Write now, on this thread."""
        self._write(dir_fd, self._take(), entries)

    def ticket(self, dir_fd: int, entries: list[str], *, missing_ok: bool = False) -> CheckpointWrite:
        """A write to run later on any thread (``dir_fd`` is duplicated)."""
        return CheckpointWrite(self, os.dup(dir_fd), self._take(), entries, missing_ok)

    def _take(self) -> int:
        with self._lock:
            seq = self._next
            self._next += 1
        return seq

    def _write(self, dir_fd: int, seq: int, entries: list[str]) -> None:
        with self._lock:
            if seq <= self._written:
                return  # newer content is already on disk
            write_checkpoint_file(dir_fd, self.name, entries)
            self._written = seq
