"""A full disk, for real: the broker's log dir on a 16 MiB tmpfs (docs/reliability.md
"Storage errors").

A filler file takes all but about 1 MiB; a confluent-kafka producer then streams
records until the disk is full. Every failed delivery must be KAFKA_STORAGE_ERROR (not
a timeout or a closed connection), the broker must log one line about it and no
traceback. The broker is then killed (-9) and restarted while the disk is still full:
it must start, recover, and serve every acknowledged record. Once the filler is removed
writes resume, and a consumer reads every acknowledged record, in order, at the offset
its delivery report gave.

Mounting a tmpfs needs root: the test skips otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .clients import create_topic, read_to_end

pytestmark = [pytest.mark.timeout(150)]

DISK_MB = 16
VALUE_SIZE = 1024
LEFT_FREE = 1 << 20  # what the filler leaves for the broker to fill


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    mnt = tmp_path / "data"  # the broker's log dir itself (its log file stays outside)
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mnt)],
                       check=False, capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path, leave: int) -> None:
    """Write ``path`` until the file system is full, then give back ``leave`` bytes."""
    chunk = b"\0" * (1 << 16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        size = 0
        while True:
            try:
                n = os.write(fd, chunk)
            except OSError:
                break
            if n == 0:
                break
            size += n
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)


def produce_until_full(bootstrap: str, topic: str, start: int, limit_s: float = 30.0):
    """Stream records (acks=all, no retries, so each failure reports its own error) until
    20 deliveries failed; ({offset: value} acknowledged, [error names])."""
    from confluent_kafka import Producer

    acked: dict[int, bytes] = {}
    errors: list[str] = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err.name())

    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
        "enable.idempotence": False, "linger.ms": 5, "message.timeout.ms": 10_000,
        "batch.num.messages": 16, "log_level": 0,
    })  # fmt: skip
    deadline = time.monotonic() + limit_s
    n = start
    while len(errors) < 20 and time.monotonic() < deadline:
        for _ in range(32):
            p.produce(topic, value=b"r%08d-" % n + b"x" * VALUE_SIZE, partition=0, on_delivery=report)
            n += 1
        p.poll(0.02)
    assert p.flush(15) == 0
    return acked, errors


def produce_some(bootstrap: str, topic: str, start: int, count: int) -> dict[int, bytes]:
    from confluent_kafka import Producer

    acked: dict[int, bytes] = {}
    failed: list[str] = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err.name())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0,
                  "message.timeout.ms": 20_000})  # fmt: skip
    for n in range(start, start + count):
        p.produce(topic, value=b"r%08d-" % n + b"y" * 100, partition=0, on_delivery=report)
    assert p.flush(30) == 0
    assert not failed, failed
    return acked


def test_a_full_disk_answers_storage_errors_and_recovers(small_disk, broker_factory):
    assert small_disk.name == "data"
    b = broker_factory({"log.flush.offset.checkpoint.interval.ms": "1000"}, name="data")
    topic = create_topic(b.bootstrap, client="tidegate")
    fill(small_disk / "filler", LEFT_FREE)

    acked, errors = produce_until_full(b.bootstrap, topic, 0)
    assert len(acked) > 100, "the disk filled before anything was written"
    assert errors, "the disk never filled"
    assert set(errors) == {"KAFKA_STORAGE_ERROR"}, errors  # not timeouts, not disconnects
    text = b.log_text()
    assert text.count("is full (") == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert max(acked) == len(acked) - 1  # acknowledged offsets run from 0 without a gap

    # kill -9 and restart while the disk is still full: recovery, then reads. A torn
    # batch is left at the tail (as a crash mid-write would) for recovery to cut off.
    b.kill()
    filler = small_disk / "filler"
    os.truncate(filler, filler.stat().st_size - (64 << 10))
    segment = max((small_disk / f"{topic}-0").glob("*.log"))
    with open(segment, "ab") as f:
        f.write(b"\0" * 8 + b"\x00\x00\x10\x00" + b"torn" * 20)  # a batch header, cut short
    fill(small_disk / "filler2", 0)
    b.start()
    got = read_to_end(b.bootstrap, topic)[0]
    assert len(got) >= len(acked)
    for g in got:
        if g.offset in acked:
            assert g.value == acked[g.offset], f"offset {g.offset} changed"
    assert "Traceback" not in b.log_text()
    assert re.search(r"recovered .* [1-9][0-9]* byte\(s\) of torn or corrupt tail truncated", b.log_text())

    # space returns: writes resume, and everything acknowledged reads back in order
    filler.unlink()
    (small_disk / "filler2").unlink()
    more = produce_some(b.bootstrap, topic, 1_000_000, 200)
    assert min(more) >= len(got)
    everything = read_to_end(b.bootstrap, topic)[0]
    offsets = [g.offset for g in everything]
    assert offsets == list(range(len(everything)))
    by_offset = {g.offset: g.value for g in everything}
    for off, value in {**acked, **more}.items():
        assert by_offset[off] == value
    b.stop()
    assert "Traceback" not in b.log_text()
