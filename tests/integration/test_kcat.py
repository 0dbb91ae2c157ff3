"""kcat (librdkafka's command-line client) against a real tidegate process.

Skipped when kcat is not installed (scripts/setup installs it with apt when root).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from .clients import CODECS

KCAT = shutil.which("kcat")

pytestmark = [
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed"),
    pytest.mark.timeout(60),
]


def kcat(broker, *args: str, stdin: str | None = None, timeout: float = 30) -> str:
    proc = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def produce(broker, topic: str, lines: list[str], *extra: str) -> None:
    kcat(broker, "-P", "-t", topic, *extra, stdin="".join(line + "\n" for line in lines))


def consume(broker, topic: str, fmt: str = "%k:%s\n", *extra: str) -> str:
    return kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt, *extra)


def metadata(broker, *extra: str) -> dict:
    return json.loads(kcat(broker, "-L", "-J", *extra))


def test_produce_consume_lines_with_keys_every_codec_then_restart(broker):
    expected = {}
    for codec in CODECS:
        topic = f"kcat-{codec}"
        lines = [f"key-{i}:{codec} value {i} " + "x" * (i % 50) for i in range(1000)]
        produce(broker, topic, lines, "-K:", "-z", codec, "-p", "0")
        out = consume(broker, topic, "%p %o %k:%s\n")
        assert out.splitlines() == [f"0 {i} {line}" for i, line in enumerate(lines)]
        expected[topic] = out

    assert broker.stop() == 0
    broker.start()
    for topic, out in expected.items():
        assert consume(broker, topic, "%p %o %k:%s\n") == out


def test_values_without_keys_and_headers(broker):
    lines = [f"line {i}" for i in range(200)]
    produce(broker, "kcat-plain", lines, "-H", "origin=kcat", "-H", "n=1")
    out = consume(broker, "kcat-plain", "%k|%s|%h\n").splitlines()
    assert out == [f"|{line}|origin=kcat,n=1" for line in lines]


def test_metadata_json(broker):
    produce(broker, "kcat-meta", ["a", "b"])
    md = metadata(broker)
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(1, f"127.0.0.1:{broker.port}")]
    topics = {t["topic"]: t for t in md["topics"]}
    assert set(topics) == {"kcat-meta"}
    [part] = topics["kcat-meta"]["partitions"]
    assert part["partition"] == 0
    assert part["leader"] == 1
    assert [r["id"] for r in part["replicas"]] == [1]
    assert [r["id"] for r in part["isrs"]] == [1]

    one = metadata(broker, "-t", "kcat-meta")
    assert [t["topic"] for t in one["topics"]] == ["kcat-meta"]


def test_consume_from_offset_and_count(broker):
    lines = [f"v{i}" for i in range(100)]
    produce(broker, "kcat-seek", lines)
    out = kcat(
        broker, "-C", "-t", "kcat-seek", "-p", "0", "-o", "60", "-c", "10", "-q", "-f", "%o:%s\n"
    )
    assert out.splitlines() == [f"{i}:v{i}" for i in range(60, 70)]
    # Negative offsets count back from the end (ListOffsets latest).
    out = kcat(broker, "-C", "-t", "kcat-seek", "-p", "0", "-o", "-5", "-e", "-q", "-f", "%s\n")
    assert out.splitlines() == lines[-5:]
