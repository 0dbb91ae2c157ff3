"""The record codec and the hand-written wire paths, in process: microseconds per call.

What the per-record and per-request hot paths cost in CPython, without a broker: encoding
and sizing 1,000 records (the producer's path), decoding and scanning a 1,000-record batch
(the consumer's and the log validator's), the cleaner's re-encoding, and the varint-heavy
Produce request writer, Produce request decoder and Fetch response encoder (200
partitions, flexible versions). Medians of ``--repeat`` runs of ``--number`` calls.

To compare two checkouts, run it under each one's ``src`` (same machine, back to back)::

    PYTHONPATH=src .venv/bin/python benchmarks/record_codec.py
    PYTHONPATH=../other/src .venv/bin/python benchmarks/record_codec.py
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

from tidegate.log import cleaned_batch
from tidegate.producer.produce_request import produce_request_buffers
from tidegate.protocol.fetch_fast import encode_fetch_response
from tidegate.protocol.produce_fast import decode_produce
from tidegate.record.batch_builder import (
    Record,
    build_batch,
    encode_record,
    record_size_upper_bound,
)
from tidegate.record.records import decode_batch_records, iter_decoded_batches, scan_records

N = 1000
BASE_TS = 1_700_000_000_000
HEADERS = (("h1", b"x" * 8), ("h2", None))


def _records(headers: tuple = ()) -> list[Record]:
    return [Record(b"v" * 100, b"k" * 16 + b"%d" % i, BASE_TS + i * 7, headers) for i in range(N)]


RECORDS = _records()
RECORDS_WITH_HEADERS = _records(HEADERS)
BATCH = bytes(build_batch(RECORDS))
(DECODED,) = iter_decoded_batches(BATCH)
(DECODED_WITH_HEADERS,) = iter_decoded_batches(bytes(build_batch(RECORDS_WITH_HEADERS)))
PARTITIONS = [(p, [BATCH[:200]], 200) for p in range(100)]
TOPICS = [("topic-a", PARTITIONS), ("topic-b", PARTITIONS)]
PRODUCE_FRAME = bytearray(b"".join(produce_request_buffers(9, 1, "c", -1, 30000, TOPICS)))[4:]
FETCH_VALUES = {
    "throttle_time": 0,
    "error_code": 0,
    "session_id": 0,
    "responses": [
        {
            "topic": f"t{t}",
            "partitions": [
                {"partition_index": p, "error_code": 0, "high_watermark": 10,
                 "last_stable_offset": 10, "log_start_offset": 0, "aborted_transactions": None,
                 "preferred_read_replica": -1, "records": BATCH[:300]}
                for p in range(50)
            ],
        }
        for t in range(4)
    ],
}  # fmt: skip


def encode_records() -> None:
    for i, r in enumerate(RECORDS):
        encode_record(i, r.timestamp - BASE_TS, r.key, r.value, ())


def size_records() -> None:
    for r in RECORDS_WITH_HEADERS:
        record_size_upper_bound(r.key, r.value, r.headers)


def cleaner_reencode() -> None:
    for r in cleaned_batch.parse_records(DECODED.records, 0, DECODED.base_timestamp):
        cleaned_batch.encode_record_tail(r, DECODED.base_timestamp)


CASES: dict[str, Callable[[], object]] = {
    "build_batch, 1000 records": lambda: build_batch(RECORDS),
    "encode_record x1000": encode_records,
    "record_size_upper_bound x1000 (2 headers)": size_records,
    "decode_batch_records, 1000 records": lambda: decode_batch_records(DECODED),
    "decode_batch_records, 1000 (2 headers)": lambda: decode_batch_records(DECODED_WITH_HEADERS),
    "scan_records, 1000 records": lambda: scan_records(DECODED.records, N),
    "cleaner parse + re-encode, 1000 records": cleaner_reencode,
    "produce_request_buffers v9, 200 partitions": lambda: produce_request_buffers(
        9, 1, "c", -1, 30000, TOPICS
    ),
    "decode_produce v9, 200 partitions": lambda: decode_produce(PRODUCE_FRAME),
    "encode_fetch_response v12, 200 partitions": lambda: encode_fetch_response(1, 12, FETCH_VALUES),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=40)
    args = parser.parse_args()
    for name, fn in CASES.items():
        times = timeit.repeat(fn, repeat=args.repeat, number=args.number)
        print(f"{name:45s} {statistics.median(times) / args.number * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
