"""Bytecodes per answer of a fan-out wake-up, by function: the Python cost load cannot move.

The broker's core (``tests.core_harness.CoreHarness``: ``BrokerCore`` on the fake clock
and loop) and a real ``SocketServer`` share one ``RequestChannel``; ``--fetches``
``KafkaConnection``s, each on a transport that only counts its writes, park one Fetch
v4 long poll each at the end of a one-partition topic (the frame ``fanout.py`` sends);
then one Produce of one record (acks=1) wakes them. The wake-up (the produce, its
response and the ``ActionQueue`` that completes the parked fetches) runs under
``sys.settrace`` with opcode events: the bytecodes CPython executes per answer, in
total and per Python function. Like ``purgatory_opcodes.py`` the counts are exact and
repeatable on a busy machine and leave out what runs in C below a bytecode (the send,
allocation); ``--time`` reports the wake-up's CPU per answer instead (no tracing, no
sockets: the Python part of ``fanout.py``'s wake CPU, noisy under load).

    .venv/bin/python benchmarks/fanout_opcodes.py                 # 2,000 parked fetches
    PYTHONPATH=/tmp/main/src .venv/bin/python benchmarks/fanout_opcodes.py   # another tree
    .venv/bin/python benchmarks/fanout_opcodes.py --time --runs 5
"""

from __future__ import annotations

import argparse
import collections
import gc
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ (the core harness)
import parked_fetches as pf


class CountingTransport:
    """The parts of an asyncio transport a connection uses; writes are only counted.
    One connection gets a real socket: the first fetch of a wake-up sends its records
    from the file (``sendfile``), as it would alone."""

    __slots__ = ("sock", "writes")

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock = sock
        self.writes = 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "socket":
            return self.sock
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def write(self, data: object) -> None:
        self.writes += 1

    def writelines(self, data: object) -> None:
        self.writes += 1

    def close(self) -> None:
        pass


def wake(fetches: int, trace: collections.Counter | None) -> float:
    """Park ``fetches`` long polls, wake them with one produce; CPU µs per answer (with
    ``trace``: counts the wake-up's bytecodes per function into it)."""
    from tests.core_harness import CoreHarness
    from tidegate.network.memory_pool import NONE
    from tidegate.network.request_channel import RequestChannel
    from tidegate.network.socket_server import KafkaConnection, SocketServer
    from tidegate.record.batch_builder import Record, build_batch

    h = CoreHarness(Path(tempfile.mkdtemp(prefix="fanout-opcodes-")) / "data")
    h.create_topic("fan")
    # from here the channel routes answers to the connections, as the broker's does
    h.channel.send_response = RequestChannel.send_response.__get__(h.channel)  # type: ignore[method-assign]
    server = SocketServer(h.apis, h.channel, NONE, 1 << 20, h.loop, clock=h.clock)
    frame = pf.fetch_v4_frame("fan", 0, 0, 30_000)
    a, b = socket.socketpair()
    conns = []
    for i in range(fetches):
        conn = KafkaConnection(server, "PLAINTEXT")
        conn.connection_made(CountingTransport(a if i == 0 else None))
        pos = 0
        while pos < len(frame):
            buf = conn.get_buffer(-1)
            n = min(len(buf), len(frame) - pos)
            buf[:n] = frame[pos : pos + n]
            conn.buffer_updated(n)
            pos += n
        conns.append(conn)
    assert h.replicas.fetch_purgatory.delayed == fetches
    batch = build_batch([Record(b"wake up")])
    gc.collect()
    gc.disable()
    try:
        if trace is not None:

            def local(frame, event, arg):
                if event == "opcode":
                    code = frame.f_code
                    trace[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
                return local

            def tracer(frame, event, arg):
                frame.f_trace_opcodes = True
                return local

            sys.settrace(tracer)
        c0 = time.process_time()
        h.produce("fan", 0, batch)
        c1 = time.process_time()
    finally:
        sys.settrace(None)
        gc.enable()
    answered = 1 + sum(c.transport.writes for c in conns[1:])  # the first sent with sendfile
    assert answered == fetches, f"{answered} of {fetches} answered"
    h.close()
    a.close()
    b.close()
    return (c1 - c0) / fetches * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fetches", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25, help="functions listed")
    ap.add_argument("--time", action="store_true", help="CPU µs per answer instead (untraced)")
    ap.add_argument("--runs", type=int, default=3, help="runs with --time")
    args = ap.parse_args(argv)
    import tidegate

    print(f"tidegate from {Path(tidegate.__file__).parent}; {args.fetches} parked Fetch v4, one produce")
    if args.time:
        runs = [wake(args.fetches, None) for _ in range(args.runs)]
        print("CPU µs per answer: " + " ".join(f"{r:.1f}" for r in runs) + f" (best {min(runs):.1f})")
        return 0
    wake(min(args.fetches, 50), collections.Counter())  # first-use work (codec builds, imports)
    counts: collections.Counter = collections.Counter()
    wake(args.fetches, counts)
    print(f"bytecodes per answer: {sum(counts.values()) / args.fetches:.0f}")
    for name, n in counts.most_common(args.top):
        print(f"  {n / args.fetches:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
