"""The protocol codec: tidegate's messages (tidegate.protocol.codec) against kio, in one run.

Decoding, the broker's side (frame without its size prefix -> header and body):

* a Fetch request v15, 1 topic x 8 partitions, and 20 topics x 50 partitions;
* an OffsetCommit request v9 of 100 partitions;
* a Metadata request v12 naming 10 topics.

"tidegate" is ``codec.decode_request`` (a bytearray, as from the request pool). "kio"
is what the broker ran before: kio's native readers for the header and the body plus the
two walks that made them safe (the collection-size check before, the null-array check
after), taken from ``--base`` (a git revision read with ``git show``; by default the
last one with that codec, the parent of the commit that removed
``protocol/size_check.py``); "kio-native" is kio's readers alone (what kio costs
without those checks).

Encoding, the broker's side (a handler's dict -> frame), and the message alone:

* a Metadata response v12 of 100 topics x 8 partitions;
* a JoinGroup response v9 of 20 members with 100-byte metadata.

"tidegate" is ``codec.build`` + ``encode_response``, "kio" is the old path (the kio
object built from the dict, then kio's writer); the "message only" rows encode an
already built message (tidegate's message, kio's object).

Then the codec's build cost: importing the messages package and the codec, building
one API version's reader and writer, and every supported version's.

Every timing is the median of ``--repeat`` runs of ``--number`` calls (per call in µs).

Usage::

    .venv/bin/python benchmarks/codec.py
    .venv/bin/python benchmarks/codec.py --repeat 15 --base 6be5b03
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import textwrap
import time
import timeit
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.kio_codec import build as kio_build
from tests.kio_codec import encode_body, request_class
from tidegate.protocol import codec
from tidegate.protocol.codec import RequestHeader


def kio_request(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    """A request frame (no size prefix) written by kio."""
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=api_key, request_api_version=version, correlation_id=7,
                        client_id="bench")
    return encode_body(header) + encode_body(kio_build(cls, body))


def fetch_body(topics: int, partitions: int) -> dict[str, Any]:
    return {
        "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 500, "min_bytes": 1,
        "max_bytes": 52428800, "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic_id": uuid.uuid4(), "partitions": [
            {"partition": p, "current_leader_epoch": 0, "fetch_offset": 1000 * p,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1048576}
            for p in range(partitions)]} for _ in range(topics)],
        "forgotten_topics_data": [], "rack_id": "",
    }


def offset_commit_body(partitions: int) -> dict[str, Any]:
    return {
        "group_id": "bench-group", "generation_id_or_member_epoch": 3, "member_id": "member-1",
        "group_instance_id": None,
        "topics": [{"name": f"topic-{t}", "partitions": [
            {"partition_index": p, "committed_offset": 12345 + p, "committed_leader_epoch": 0,
             "committed_metadata": ""} for p in range(10)]} for t in range(partitions // 10)],
    }


def metadata_request_body(topics: int) -> dict[str, Any]:
    return {"topics": [{"name": f"topic-{t}", "topic_id": uuid.UUID(int=0)} for t in range(topics)],
            "allow_auto_topic_creation": True, "include_topic_authorized_operations": False}


def metadata_response(topics: int, partitions: int) -> dict[str, Any]:
    return {
        "throttle_time": 0, "cluster_id": "cluster", "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "topics": [{"error_code": 0, "name": f"topic-{t}", "topic_id": uuid.uuid4(), "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 0,
                                    "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                                   for p in range(partitions)],
                    "topic_authorized_operations": -2147483648} for t in range(topics)],
    }


def join_group_response(members: int) -> dict[str, Any]:
    return {
        "throttle_time": 0, "error_code": 0, "generation_id": 5, "protocol_type": "consumer",
        "protocol_name": "range", "leader": "member-0", "skip_assignment": False, "member_id": "member-0",
        "members": [{"member_id": f"member-{m}", "group_instance_id": None, "metadata": bytes(100)}
                    for m in range(members)],
    }


def old_codec(base: str) -> types.ModuleType:
    """The kio-based codec of ``base`` (``git show``), with its size check, as a module."""
    modules = {}
    for name in ("size_check", "codec"):
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:src/tidegate/protocol/{name}.py"],
                                capture_output=True, text=True, check=True).stdout
        module = types.ModuleType(f"_old_{name}")
        if name == "codec":
            source = source.replace("from tidegate.protocol.size_check import", "from _old_size_check import")
        sys.modules[module.__name__] = module
        exec(compile(source, f"{base}:{name}.py", "exec"), module.__dict__)  # noqa: S102 - a benchmark's baseline
        modules[name] = module
    return modules["codec"]


def kio_codec_revision() -> str:
    """The last revision whose codec was kio's: the parent of the commit that removed
    protocol/size_check.py (which only that codec used)."""
    removed = subprocess.run(["git", "-C", str(ROOT), "rev-list", "-1", "HEAD", "--",
                              "src/tidegate/protocol/size_check.py"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return f"{removed}^"


def per_call_us(fns: list[Callable[[], Any]], number: int, repeat: int) -> list[float]:
    """Median µs per call of each of ``fns``, their runs interleaved (a busy machine
    slows them alike)."""
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, times in zip(fns, runs, strict=True):
            times.append(timeit.timeit(fn, number=number))
    return [statistics.median(times) / number * 1e6 for times in runs]


def decode_cases(old: types.ModuleType) -> list[tuple[str, Callable[[], Any], Callable[[], Any], Callable[[], Any]]]:
    from kio.serial import entity_reader

    cases = []
    for label, api, version, body in [
        ("Fetch v15 request, 1 x 8 partitions", 1, 15, fetch_body(1, 8)),
        ("Fetch v15 request, 20 x 50 partitions", 1, 15, fetch_body(20, 50)),
        ("OffsetCommit v9 request, 100 partitions", 8, 9, offset_commit_body(100)),
        ("Metadata v12 request, 10 topics", 3, 12, metadata_request_body(10)),
    ]:
        raw = bytearray(kio_request(api, version, body))
        cls = request_class(api, version)
        header_reader, body_reader = entity_reader(cls.__header_schema__), entity_reader(cls)

        def native(raw: bytearray = raw, header_reader: Any = header_reader, body_reader: Any = body_reader) -> Any:
            view = memoryview(raw).toreadonly()
            _h, offset = header_reader(view, 0)
            return body_reader(view, offset)

        cases.append((label, lambda raw=raw: codec.decode_request(raw), lambda raw=raw: old.decode_request(raw), native))
    return cases


def encode_cases(old: types.ModuleType) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    cases = []
    for label, api, version, values in [
        ("Metadata v12 response, 100 x 8 partitions", 3, 12, metadata_response(100, 8)),
        ("JoinGroup v9 response, 20 members", 11, 9, join_group_response(20)),
    ]:
        header = RequestHeader(api, version, 7, "bench", True)
        old_header = old.RequestHeader(api, version, 7, "bench", True)
        ours_cls = codec.response_class(api, version)
        kio_cls = old.response_class(api, version)
        message = codec.build(ours_cls, values)
        kio_obj = old.build(kio_cls, values)
        assert codec.encode_response(header, message) == old.encode_response(old_header, kio_obj), label
        cases.append((label,
                      lambda h=header, c=ours_cls, v=values: codec.encode_response(h, codec.build(c, v)),
                      lambda h=old_header, c=kio_cls, v=values: old.encode_response(h, old.build(c, v))))
        cases.append((f"  {label.split(',')[0]}, message only",
                      lambda h=header, m=message: codec.encode_response(h, m),
                      lambda h=old_header, m=kio_obj: old.encode_response(h, m)))
    return cases


def build_costs() -> list[tuple[str, float]]:
    """Import and build costs, each in a fresh interpreter (ms of CPU)."""
    script = textwrap.dedent("""
        import sys, time
        t0 = time.process_time()
        from tidegate.protocol import codec, messages
        t1 = time.process_time()
        for k in messages.MODULES: messages.api_module(k)
        t2 = time.process_time()
        codec.prepare(3, 12)
        t3 = time.process_time()
        for api, v in codec.supported_versions(): codec.prepare(api, v)
        t4 = time.process_time()
        assert "kio" not in sys.modules and "hypothesis" not in sys.modules
        print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3)
    """)
    env_path = f"{ROOT / 'src'}"
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}).stdout.split()
            for _ in range(5)]
    medians = [statistics.median(float(r[i]) for r in runs) for i in range(4)]
    return [("import tidegate.protocol.codec (+ messages package)", medians[0]),
            ("import every API's message module", medians[1]),
            ("build Metadata v12's reader and writer (module imported)", medians[2]),
            (f"build every supported version's ({len(codec.supported_versions())})", medians[3])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--number", type=int, default=0, help="calls per run (default: about 0.1 s worth)")
    parser.add_argument("--base", help="git revision of the kio-based codec (default: the last one)")
    args = parser.parse_args()
    old = old_codec(args.base or kio_codec_revision())

    def number_for(fn: Callable[[], Any]) -> int:
        if args.number:
            return args.number
        t = time.perf_counter()
        fn()
        return max(1, int(0.1 / max(time.perf_counter() - t, 1e-7)))

    print(f"{'decode (µs per request)':48} {'tidegate':>10} {'kio':>10} {'kio-native':>11} {'kio/tidegate':>13}")
    for label, ours, theirs, native in decode_cases(old):
        n = number_for(ours)
        a, b, c = per_call_us([ours, theirs, native], n, args.repeat)
        print(f"{label:48} {a:10.1f} {b:10.1f} {c:11.1f} {b / a:13.2f}")
    print()
    print(f"{'encode (µs per response)':48} {'tidegate':>10} {'kio':>10} {'':>11} {'kio/tidegate':>13}")
    for label, ours, theirs in encode_cases(old):
        n = number_for(ours)
        a, b = per_call_us([ours, theirs], n, args.repeat)
        print(f"{label:48} {a:10.1f} {b:10.1f} {'':>11} {b / a:13.2f}")
    print()
    print(f"{'start-up (ms of CPU, fresh interpreter, median of 5)':62}")
    for label, value in build_costs():
        print(f"{label:62} {value:8.2f}")
    importlib.invalidate_caches()


if __name__ == "__main__":
    main()
