"""Page-view events as JSON, produced with tidegate's producer.

Each event: ``{"user": "u042", "url": "/pricing", "latency_ms": 87, "ts": "2026-...Z"}``,
keyed by user. Event times span ``minutes`` minutes starting at ``start``; the
generator returns the events so the pipeline can check Spark's answer against them.
"""

from __future__ import annotations

import datetime as dt
import json
import random

from tidegate.producer import Producer

URLS = ["/", "/pricing", "/docs", "/blog/kafka-on-python", "/signup", "/login"]


def make_events(n: int, start: dt.datetime, minutes: int, seed: int = 42) -> list[dict]:
    rnd = random.Random(seed)
    span_ms = minutes * 60_000
    events = []
    for i in range(n):
        at = start + dt.timedelta(milliseconds=i * span_ms // n)
        url = rnd.choices(URLS, weights=[30, 10, 25, 15, 10, 10])[0]
        base = {"/": 40, "/pricing": 80, "/docs": 60}.get(url, 120)
        events.append(
            {
                "user": f"u{rnd.randrange(200):03d}",
                "url": url,
                "latency_ms": int(rnd.expovariate(1 / base)) + 5,
                "ts": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            }
        )
    return events


def produce(bootstrap: str, topic: str, events: list[dict]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 20})
    try:
        for e in events:
            p.send(topic, json.dumps(e).encode(), key=e["user"].encode())
        p.flush(60)
    finally:
        p.close()
