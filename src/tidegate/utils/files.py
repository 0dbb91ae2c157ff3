"""Replacing files atomically and durably (Kafka's ``Utils.atomicMoveWithFallback`` and
``Utils.flushDir``).

A replacement writes a temporary file in the same directory (named with
:data:`TMP_MARK`), fsyncs it, renames it over the old name and fsyncs the directory: a
crash leaves the old file or the new one, never a mix, and a short write (a full disk)
never renames a truncated file over a good one. The log, the broker's metadata, the
coordinators' files, quotas, credentials and ACLs all write through these.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path

__all__ = ["TMP_MARK", "fsync_dir", "open_dir", "replace_file", "write_atomically"]

#: Temporary files carry this mark; a directory's owner deletes leftovers when it opens.
TMP_MARK = ".tmp-"
_tmp_counter = itertools.count()


def replace_file(
    dir_fd: int, name: str, data: bytes, *, sync_dir: bool, sync: bool = True, mode: int = 0o644
) -> None:
    """Replace ``name`` in the directory ``dir_fd`` atomically: a tmp file (named with
    :data:`TMP_MARK`, which a directory's owner removes when it opens), fsync (unless ``sync`` is
    False: the caller fsyncs later), rename (and fsync the directory with ``sync_dir``).
    The one way tidegate replaces a file."""
    tmp = f"{name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}-{next(_tmp_counter)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:  # a short write (a full disk) must not rename a truncated file over
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    if sync_dir:
        os.fsync(dir_fd)


def write_atomically(
    path: Path, data: bytes, *, sync: bool = True, sync_dir: bool = True, mode: int = 0o644
) -> None:
    """Replace the file ``path`` atomically and durably (:func:`replace_file`)."""
    dir_fd = open_dir(path.parent)
    try:
        replace_file(dir_fd, path.name, data, sync_dir=sync_dir, sync=sync, mode=mode)
    finally:
        os.close(dir_fd)


def open_dir(path: Path) -> int:
    """A read-only descriptor of the directory ``path`` (to fsync it, or to open, rename
    and unlink files relative to it)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path``: a file created, renamed or deleted in it is durable."""
    fd = open_dir(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
