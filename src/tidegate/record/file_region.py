"""A byte range of a segment file, sent as it is (Kafka's ``FileRecords`` slice).

A fetch answers with regions instead of record bytes: the log finds where the batches
lie and the shell sends them with ``os.sendfile`` (PLAINTEXT) or reads them into
bounded buffers (TLS), so record bytes never pass through Python objects on the
PLAINTEXT path and a response never sits whole in memory.

A region owns its own file descriptor (``os.dup`` of the segment's), as Kafka keeps a
``FileRecords`` channel open for the duration of a send: retention or DeleteRecords
deleting the segment while a region is in flight unlinks the file, and the region still
reads the bytes it was made for. The descriptor is closed by :meth:`close` (the shell,
once sent) or when the region is dropped unsent (a parked fetch's first read, a
throttled answer). An in-place truncation shortening the file under a region makes
:meth:`read` / the send come up short: the shell then closes the connection, as Kafka's
``FileRecords.writeTo`` fails a truncated send.
"""

from __future__ import annotations

import os


class RegionTruncatedError(OSError):
    """The file behind a region became shorter than the region while it was sent."""


class FileRegion:
    """``length`` bytes at ``position`` of an open file (a dup'ed descriptor)."""

    __slots__ = ("fd", "length", "position")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    @classmethod
    def of(cls, fd: int, position: int, length: int) -> FileRegion:
        """A region of the file open as ``fd``, with a descriptor of its own."""
        return cls(os.dup(fd), position, length)

    def __len__(self) -> int:
        return self.length

    def __bytes__(self) -> bytes:
        return self.read()

    def read(self) -> bytes:
        """The region's bytes (tests, and answers that need them in memory)."""
        return self.read_at(0, self.length)

    def read_at(self, offset: int, size: int) -> bytes:
        """``size`` bytes from ``offset`` into the region; raises if the file is short."""
        data = os.pread(self.fd, size, self.position + offset)
        if len(data) < size:
            raise RegionTruncatedError(f"file region truncated: {len(data)} of {size} bytes")
        return data

    def readinto_at(self, buf: memoryview, offset: int) -> None:
        """Fill ``buf`` from ``offset`` into the region (the TLS send path)."""
        n = os.preadv(self.fd, [buf], self.position + offset)
        if n < len(buf):
            raise RegionTruncatedError(f"file region truncated: {n} of {len(buf)} bytes")

    def close(self) -> None:
        fd = self.fd
        if fd >= 0:
            self.fd = -1
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


def materialize(records: bytes | FileRegion | None) -> bytes | None:
    """Bytes for a ``records`` value that may be a region (None stays None)."""
    if isinstance(records, FileRegion):
        return records.read()
    return records
