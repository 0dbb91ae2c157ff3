"""One command for the whole page-view pipeline, locally.

    python examples/pipeline/run.py                    # starts an embedded tidegate broker
    python examples/pipeline/run.py --bootstrap HOST:PORT --events 50000

1. a generator produces JSON page views into ``pageviews`` (3 partitions);
2. a Structured Streaming job reads them through the ``tidegate`` data source, parses
   them, aggregates per minute and per url with a watermark and writes the closed
   windows to the ``pageviews-per-minute`` topic and to Parquet;
3. a batch job reads ``pageviews-per-minute`` back and prints the table, which is
   checked against the generated events (views, average and max latency).

Nothing but pip is needed: Spark reads and writes Kafka through tidegate's Python
data source, no connector jar. Java 17+ must be on the PATH (or JAVA_HOME).
"""

from __future__ import annotations

import argparse
import datetime as dt
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generator
import jobs

from tidegate.client import KafkaClient

IN_TOPIC = "pageviews"
OUT_TOPIC = "pageviews-per-minute"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(data_dir / "broker.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data_dir / 'data'}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker did not start, see {data_dir / 'broker.log'}") from None
            time.sleep(0.1)


def create_topics(bootstrap: str) -> None:
    with KafkaClient(bootstrap) as c:
        resp = c.request(
            19,
            {
                "topics": [
                    {"name": IN_TOPIC, "num_partitions": 3, "replication_factor": 1},
                    {"name": OUT_TOPIC, "num_partitions": 1, "replication_factor": 1},
                ],
                "timeout": 10_000,
            },
            timeout_ms=15_000,
        )
        for t in resp.topics:
            if int(t.error_code) not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"cannot create {t.name}: error {int(t.error_code)}")


def spark_session():
    """local[2], bound to loopback, the source registered (tidegate.spark.local_session)."""
    import tidegate.spark

    return tidegate.spark.local_session("tidegate-pageviews", **{"spark.sql.shuffle.partitions": "4"})


def expected(events: list[dict]) -> dict[tuple[str, str], tuple[int, float, int]]:
    """(window start, url) -> (views, avg latency rounded to 0.1, max latency)."""
    acc: dict[tuple[str, str], list[int]] = defaultdict(list)
    for e in events:
        minute = e["ts"][:16]  # 2026-01-01T10:07
        acc[(minute, e["url"])].append(e["latency_ms"])
    return {k: (len(v), round(sum(v) / len(v), 1), max(v)) for k, v in acc.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="an existing broker (default: start tidegate)")
    ap.add_argument("--events", type=int, default=20_000, help="page views to generate")
    ap.add_argument("--minutes", type=int, default=5, help="event-time span of the views")
    ap.add_argument("--workdir", help="Parquet output and checkpoints (default: a temp dir)")
    args = ap.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="tidegate-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    bootstrap = args.bootstrap
    t0 = time.monotonic()
    try:
        if bootstrap is None:
            broker, bootstrap = start_broker(work)
            print(f"started tidegate on {bootstrap} (data in {work / 'data'})")
        create_topics(bootstrap)

        now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
        start = now - dt.timedelta(minutes=args.minutes + 10)
        events = generator.make_events(args.events, start, args.minutes)
        # one late view two minutes past the rest moves the watermark past the last
        # window, so it is emitted (live traffic does this in production)
        closer = {"user": "u000", "url": "/", "latency_ms": 1,
                  "ts": (start + dt.timedelta(minutes=args.minutes + 2)).isoformat(
                      timespec="milliseconds").replace("+00:00", "Z")}  # fmt: skip
        generator.produce(bootstrap, IN_TOPIC, [*events, closer])
        print(f"produced {len(events) + 1} page views to {IN_TOPIC!r}")

        spark = spark_session()
        jobs.aggregate_stream(
            spark, bootstrap, IN_TOPIC, OUT_TOPIC, str(work / "parquet"), str(work / "checkpoints")
        )
        table = jobs.read_results(spark, bootstrap, OUT_TOPIC)
        rows = table.collect()
        print(f"\n{OUT_TOPIC} (read back from the topic), {len(rows)} windows:")
        table.show(len(rows) or 1, truncate=False)
        parquet_rows = spark.read.parquet(str(work / "parquet")).count()

        want = expected(events)
        got = {
            (r["window_start"].strftime("%Y-%m-%dT%H:%M"), r["url"]):
                (r["views"], r["avg_latency_ms"], r["max_latency_ms"])
            for r in rows
        }  # fmt: skip
        ok = got == want and parquet_rows == len(rows)
        print(
            f"check: {len(got)} windows from the topic, {parquet_rows} in Parquet, "
            f"{len(want)} expected from the generated events -> {'OK' if ok else 'MISMATCH'}"
        )
        print(f"done in {time.monotonic() - t0:.0f}s; Parquet and checkpoints in {work}")
        spark.stop()
        return 0 if ok else 1
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(30)


if __name__ == "__main__":
    sys.exit(main())
