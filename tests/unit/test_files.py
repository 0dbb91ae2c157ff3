"""tidegate.utils.files: a replaced file holds the old bytes or the new ones, never a mix,
and leaves no temporary file behind."""

from __future__ import annotations

import errno
import os

import pytest

from tidegate.utils.files import TMP_MARK, fsync_dir, replace_file, write_atomically


def test_write_atomically_replaces_the_file(tmp_path):
    path = tmp_path / "state.json"
    write_atomically(path, b"old")
    write_atomically(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_short_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_atomically(path, b"old")
    real_write = os.write

    def full_disk(fd, data):
        if len(data) > 2:
            return real_write(fd, bytes(data[:2]))  # a short write, then no room left
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomically(path, b"much newer content")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert not [p for p in tmp_path.iterdir() if TMP_MARK in p.name]


def test_replace_file_in_a_directory_descriptor(tmp_path):
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        replace_file(dir_fd, "checkpoint", b"0\n1\n", sync_dir=True)
        replace_file(dir_fd, "checkpoint", b"0\n2\n", sync_dir=False, sync=False)
    finally:
        os.close(dir_fd)
    assert (tmp_path / "checkpoint").read_bytes() == b"0\n2\n"
    fsync_dir(tmp_path)
