"""The connection state machine with a fake transport: muted for memory, in flight, a
request read while another is in flight (held), throttles.

No sockets, no event loop: a fake transport records pause/resume and writes; bytes
are pushed the way asyncio's BufferedProtocol does (get_buffer, then buffer_updated);
the server's scheduler is a FakeLoop, so deferred work (the memory hand-out) runs
exactly when the test says (``loop.run_pending()``).
"""

import struct

import pytest

from tests.fake_loop import FakeLoop, clock_at
from tidegate.clock import MockClock
from tidegate.network.connection_quotas import ConnectionQuotas, QuotaLimits
from tidegate.network.memory_pool import NONE, SimpleMemoryPool
from tidegate.network.mute_state import MuteReason
from tidegate.network.request_channel import PARKED, NoOpResponse, RequestChannel, SendResponse
from tidegate.network.socket_server import KafkaConnection, SocketServer


class FakeTransport:
    def __init__(self):
        self.paused = False
        self.pauses = 0
        self.resumes = 0
        self.written = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def pause_reading(self):
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self):
        assert self.paused
        self.paused = False
        self.resumes += 1

    def write(self, data):
        self.written.append(bytes(data))

    def close(self):
        self.closed = True


class Processor:
    """The parts of the RequestProcessor interface a test processor does not vary."""

    def try_complete_actions(self):
        pass

    def record_exempt_request_time_ns(self, ns):
        pass


class HoldingProcessor(Processor):
    """Parks every request, keeping its memory, until the test answers it."""

    def __init__(self):
        self.requests = []  # (payload, request)
        self.server = None

    def handle(self, request):
        self.requests.append((bytes(request.payload), request))
        return PARKED

    def answer(self, i, data):
        """Answer the i-th request through the server (the core's RequestChannel)."""
        response = SendResponse([data]) if data is not None else NoOpResponse()
        self.server.channel.send_response(self.requests[i][1], response)


class ImmediateProcessor(Processor):
    def __init__(self):
        self.payloads = []

    def handle(self, request):
        self.payloads.append(bytes(request.payload))
        return SendResponse([b"resp"])


def serve(proc, pool, max_request_size, **kw):
    """A SocketServer on a FakeLoop: (server, loop)."""
    loop = FakeLoop()
    server = SocketServer(proc, RequestChannel(), pool, max_request_size, loop, **{"clock": loop.clock, **kw})
    proc.server = server
    return server, loop


def connect(server):
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def push(conn, data):
    """Deliver bytes as asyncio does; stop when the connection stops reading."""
    pos = 0
    while pos < len(data) and not conn.transport.paused and not conn.closed:
        buf = conn.get_buffer(-1)
        assert len(buf) > 0, "a BufferedProtocol must never hand out an empty buffer"
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n
    return pos


def frame(body):
    return struct.pack(">i", len(body)) + body


def test_out_of_memory_mutes_until_release_then_serves_the_second():
    """kafka-internals section 1, case 6: pool (900, 900), two 900-byte requests."""

    def main():
        pool = SimpleMemoryPool(900, 900, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 900)
        a, ta = connect(server)
        b, tb = connect(server)
        push(a, frame(b"a" * 900))
        assert len(proc.requests) == 1 and pool.available == 0
        assert a.mute_state.has(MuteReason.IN_FLIGHT) and not ta.paused  # still read
        sent = push(b, frame(b"b" * 900))
        assert sent == 4  # only the size prefix: no memory for the body
        assert b.mute_state.reasons == MuteReason.MEMORY and tb.paused
        assert b in server.memory_muted and server.request_memory.is_out_of_memory
        assert len(proc.requests) == 1
        proc.answer(0, b"done-a")
        loop.run_pending()
        # a's memory went back; b got it and reads again; a is answered and unmuted
        assert ta.written == [b"done-a"] and not ta.paused
        assert not tb.paused and b not in server.memory_muted
        assert pool.available == 0  # now held by b's body buffer
        push(b, (b"b" * 900))
        assert len(proc.requests) == 2 and proc.requests[1][0] == b"b" * 900
        proc.answer(1, None)
        loop.run_pending()
        assert pool.available == 900 and pool.outstanding == 0

    main()


def test_release_unmutes_only_the_memory_reason():
    def main():
        pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 100)
        a, _ta = connect(server)
        b, tb = connect(server)
        push(a, frame(b"x" * 100))
        push(b, struct.pack(">i", 50))
        assert b.mute_state.reasons == MuteReason.MEMORY
        b.mute(MuteReason.THROTTLE)  # e.g. a quota throttle arrives meanwhile
        proc.answer(0, None)
        loop.run_pending()
        assert b.mute_state.reasons == MuteReason.THROTTLE  # memory reason gone...
        assert tb.paused  # ...but still not read: the throttle holds
        b.unmute(MuteReason.THROTTLE)
        assert not tb.paused
        push(b, b"y" * 50)
        assert proc.requests[1][0] == b"y" * 50

    main()


def test_request_count_bound_applies_with_memory_to_spare():
    def main():
        proc = HoldingProcessor()
        server, loop = serve(proc, NONE, 1000, max_queued_requests=1)
        a, _ta = connect(server)
        b, tb = connect(server)
        push(a, frame(b"a" * 10))
        push(b, frame(b"b" * 10))
        assert len(proc.requests) == 1 and b.mute_state.reasons == MuteReason.MEMORY
        proc.answer(0, None)
        loop.run_pending()
        assert not tb.paused
        push(b, b"b" * 10)
        assert len(proc.requests) == 2

    main()


def test_fifo_unmute_order_when_memory_is_plentiful():
    def main():
        pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        shuffles = []

        def reverse(items):
            shuffles.append(list(items))
            items.reverse()

        server, loop = serve(proc, pool, 1000, shuffle=reverse)
        big, _ = connect(server)
        push(big, frame(b"z" * 1000))  # takes the whole pool
        waiters = [connect(server) for _ in range(3)]
        for conn, _t in waiters:
            push(conn, struct.pack(">i", 10))
        assert list(server.memory_muted) == [c for c, _ in waiters]
        proc.answer(0, None)
        loop.run_pending()
        # Plenty free (1000 of 1000): first come, first served, no shuffle.
        assert shuffles == [] and not server.memory_muted

    main()


def test_shuffle_used_below_ten_percent():
    def main():
        pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        calls = []

        def reverse(items):
            calls.append(len(items))
            items.reverse()

        server, loop = serve(proc, pool, 1000, shuffle=reverse)
        a, _ = connect(server)
        push(a, frame(b"a" * 960))  # available 40
        b, _ = connect(server)
        push(b, frame(b"b" * 40))  # available 0
        waiters = [connect(server)[0] for _ in range(3)]
        for w in waiters:
            push(w, struct.pack(">i", 10))
        assert list(server.memory_muted) == waiters
        proc.answer(1, None)  # frees 40: available 40 < 10% of 1000
        loop.run_pending()
        assert calls == [3]
        # reversed order: the last muted connection was served first
        assert waiters[2] not in server.memory_muted
        assert waiters[1] not in server.memory_muted  # 40 - 10 = 30 >= 1 still allocates
        assert pool.available <= 10

    main()


def test_zero_size_request_takes_nothing_from_the_pool():
    pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())

    class Zero(Processor):
        def __init__(self):
            self.seen = []

        def handle(self, request):
            self.seen.append(bytes(request.payload))
            request.release_buffer()
            return SendResponse([b"resp"])

    proc = Zero()
    server, _loop = serve(proc, pool, 100)
    a, _ta = connect(server)
    push(a, struct.pack(">i", 0))
    assert proc.seen == [b""] and pool.available == 100 and pool.outstanding == 0


def test_connection_closed_mid_request_releases_its_buffer():
    pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
    server, _loop = serve(ImmediateProcessor(), pool, 1000)
    a, _ta = connect(server)
    push(a, frame(b"q" * 500)[:100])
    assert pool.outstanding == 1
    a.connection_lost(None)
    assert pool.outstanding == 0 and pool.available == 1000


def test_connection_closed_with_a_request_in_flight_gives_its_memory_back():
    """The processor still holds the request (a parked acks=all, a long poll) when the
    client goes away: the shell marks it abandoned and releases its buffer exactly once,
    a connection waiting for that memory gets it, and a late answer is dropped."""

    def main():
        pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 1000)
        a, ta = connect(server)
        push(a, frame(b"a" * 700))
        b, _tb = connect(server)
        push(b, struct.pack(">i", 600))  # 300 free: non-strict, so b gets them
        c, tc = connect(server)
        push(c, struct.pack(">i", 500))  # nothing free: c waits for memory
        assert pool.available == -300 and pool.outstanding == 2
        assert list(server.memory_muted) == [c] and tc.paused
        parked = proc.requests[0][1]
        assert a.in_flight is parked and server.parked == 1
        a.connection_lost(None)  # the peer reset the connection mid-request
        loop.run_pending()
        assert parked.abandoned and a.in_flight is None and server.parked == 0
        # a's 700 came back (available 400) and went on to c, waiting for it: 400 - 500
        assert not server.memory_muted and not tc.paused
        assert pool.available == -100 and pool.outstanding == 2
        assert server.request_memory.outstanding == 2
        proc.answer(0, b"late")  # the purgatory completes it after all: dropped
        assert ta.written == []  # nothing is written to a closed connection
        push(b, b"b" * 600)
        push(c, b"c" * 500)
        assert [r[0] for r in proc.requests[1:]] == [b"b" * 600, b"c" * 500]
        proc.answer(1, None)
        proc.answer(2, None)
        loop.run_pending()
        # exact accounting: every byte back, no double release (the debug pool raises)
        assert pool.available == 1000 and pool.outstanding == 0
        assert server.request_memory.outstanding == 0

    main()


def test_a_request_in_flight_is_abandoned_before_the_disconnect_listeners_run():
    """Ending the share session (a disconnect listener) releases records and wakes parked
    share fetches, this connection's own among them: it must already be abandoned then,
    or it takes the records back for a member whose session is gone."""
    seen = []
    pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
    proc = HoldingProcessor()
    server, loop = serve(proc, pool, 1000,
                         disconnect_listeners=[lambda _id: seen.append(proc.requests[0][1].abandoned)])
    a, _ta = connect(server)
    push(a, frame(b"a" * 10))
    assert a.in_flight is proc.requests[0][1]
    a.connection_lost(None)
    loop.run_pending()
    assert seen == [True] and a.in_flight is None and server.parked == 0


def test_closed_memory_muted_connection_is_forgotten():
    def main():
        pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 100)
        a, _ = connect(server)
        push(a, frame(b"x" * 100))
        b, _tb = connect(server)
        push(b, struct.pack(">i", 100))
        assert b in server.memory_muted
        b.connection_lost(None)
        assert b not in server.memory_muted
        proc.answer(0, None)
        loop.run_pending()
        assert pool.available == 100

    main()


def test_immediate_responses_never_mute():
    server, _loop = serve(ImmediateProcessor(), NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"1") + frame(b"2") + frame(b"3"))
    assert ta.written == [b"resp"] * 3 and ta.pauses == 0


def test_oversized_size_prefix_closes():
    server, _loop = serve(ImmediateProcessor(), NONE, 100)
    a, ta = connect(server)
    push(a, struct.pack(">i", 101))
    assert ta.closed


@pytest.mark.parametrize("reason", [MuteReason.SEND_BUFFER, MuteReason.THROTTLE])
def test_other_mute_reasons_pause_and_resume(reason):
    server, _loop = serve(ImmediateProcessor(), NONE, 100)
    a, ta = connect(server)
    a.mute(reason)
    assert ta.paused
    a.unmute(reason)
    assert not ta.paused


def test_freed_memory_is_handed_on_only_after_the_releasing_call_returns():
    """The releasing handler still holds its buffer: the hand-out waits a loop turn,
    so at most pool + one request is ever alive (measured: +2 requests otherwise)."""

    def main():
        pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 100)
        a, _ = connect(server)
        b, tb = connect(server)
        push(a, frame(b"a" * 100))
        push(b, struct.pack(">i", 100))
        assert b in server.memory_muted
        seen_during_release = []
        real = server.memory_released

        def spy():
            seen_during_release.append(pool.available)
            real()

        server.memory_released = spy
        proc.answer(0, None)  # a's answer releases its buffer
        # released, but b has not been handed the memory inside that call
        assert b in server.memory_muted and tb.paused
        loop.run_pending()
        assert seen_during_release == [100]  # ran once, on a later loop turn
        assert b not in server.memory_muted and not tb.paused

    main()


def test_new_requests_queue_behind_connections_waiting_for_memory():
    def main():
        pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())
        proc = HoldingProcessor()
        server, loop = serve(proc, pool, 100)
        hog, _ = connect(server)
        push(hog, frame(b"h" * 100))
        waiter, tw = connect(server)
        push(waiter, struct.pack(">i", 60))
        assert list(server.memory_muted) == [waiter]
        proc.answer(0, None)  # memory released; hand-out not yet run
        newcomer, tn = connect(server)
        push(newcomer, struct.pack(">i", 10))
        # the newcomer may not take the freed memory ahead of the waiter
        assert newcomer in server.memory_muted and tn.paused
        loop.run_pending()
        assert not tw.paused  # the waiter was served first ...
        assert list(server.memory_muted) == []  # ... and the newcomer right after (60+10 fit)
        assert not tn.paused

    main()


class OutcomeProcessor(Processor):
    """Answers each request with the next outcome of a list; records what ran when."""

    def __init__(self, outcomes, events):
        self.outcomes = list(outcomes)
        self.events = events

    def handle(self, request):
        return self.outcomes.pop(0)

    def try_complete_actions(self):
        self.events.append("actions")


class RecordingTransport(FakeTransport):
    def __init__(self, events):
        super().__init__()
        self.events = events

    def write(self, data):
        self.events.append(("write", bytes(data)))
        super().write(data)

    def writelines(self, pieces):
        for p in pieces:
            self.write(p)


def test_throttled_response_is_written_then_mutes_until_the_throttle_ends():
    events = []
    response = SendResponse([b"head", b"body"], throttle_ms=250, after_send=lambda: events.append("after"))
    proc = OutcomeProcessor([response], events)
    server, _loop = serve(proc, NONE, 100)
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = RecordingTransport(events)
    conn.connection_made(transport)
    push(conn, frame(b"req"))
    # written piece by piece, then the after-send action, then the deferred actions
    assert events == [("write", b"head"), ("write", b"body"), "after", "actions"]
    assert conn.mute_state.reasons == MuteReason.THROTTLE and transport.paused
    server.channel.end_throttling(conn.connection_id + 1000)  # another connection: nothing here
    assert transport.paused
    server.channel.end_throttling(conn.connection_id)
    assert conn.mute_state.reasons == MuteReason.NONE and not transport.paused


def test_no_response_with_a_throttle_still_mutes():
    proc = OutcomeProcessor([NoOpResponse(throttle_ms=10)], [])
    server, _loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"acks=0"))
    assert ta.written == [] and ta.paused and a.mute_state.reasons == MuteReason.THROTTLE


def test_close_outcome_closes_only_that_connection():
    from tidegate.network.request_channel import CloseConnectionResponse

    proc = OutcomeProcessor([CloseConnectionResponse("cannot decode"), SendResponse([b"ok"])], [])
    pool = SimpleMemoryPool(100, 100, strict=False, debug=True, clock=MockClock())
    server, _loop = serve(proc, pool, 100)
    a, ta = connect(server)
    b, tb = connect(server)
    push(a, frame(b"garbage"))
    push(b, frame(b"fine"))
    assert ta.closed and ta.written == []
    assert not tb.closed and tb.written == [b"ok"]
    assert pool.outstanding == 0  # both requests' memory came back


# -- connection limits (docs/security.md#connection-limits) ----------------------------------
def limited(limits, **kw):
    """A SocketServer with ConnectionQuotas(limits) on a FakeLoop whose clock it reads."""
    loop = FakeLoop(clock_at(1_000_000))
    proc = ImmediateProcessor()
    server = SocketServer(proc, RequestChannel(), NONE, 1 << 20, loop, clock=loop.clock,
                          quotas=ConnectionQuotas(lambda: limits), **kw)
    return server, loop, proc


def connect_from(server, address):
    conn = KafkaConnection(server, "PLAINTEXT")
    transport = FakeTransport()
    transport.get_extra_info = lambda name, default=None: (
        (address, 5555) if name == "peername" else default)
    conn.connection_made(transport)
    return conn, transport


def test_broker_wide_limit_holds_new_connections_unread_until_one_closes():
    server, _loop, proc = limited(QuotaLimits(max_connections=1))
    first, t1 = connect_from(server, "10.0.0.1")
    assert first.is_admitted and not t1.paused
    second, t2 = connect_from(server, "10.0.0.2")
    third, t3 = connect_from(server, "10.0.0.3")
    assert t2.paused and t3.paused and not second.is_admitted
    assert push(second, frame(b"x")) == 0  # not read while it waits
    first.connection_lost(None)  # a slot frees: the head of the queue is admitted
    assert second.is_admitted and not t2.paused
    assert t3.paused and not third.is_admitted
    assert push(second, frame(b"x")) == 5 and proc.payloads == [b"x"]
    assert server.quotas.total == 1
    assert server.quotas.blocked_total["PLAINTEXT"] >= 2


def test_a_request_read_before_admission_is_held_until_admitted():
    # uvloop may read once although the connection paused reading in connection_made
    server, _loop, proc = limited(QuotaLimits(max_connections=1))
    first, _ = connect_from(server, "10.0.0.1")
    second, t2 = connect_from(server, "10.0.0.2")
    t2.paused = False  # as if the event loop read anyway
    assert push(second, frame(b"early")) == 4  # the size; then it pauses again
    assert proc.payloads == [] and t2.paused
    first.connection_lost(None)
    assert push(second, b"early") == 5
    assert proc.payloads == [b"early"]
    # a whole (empty) request read before admission is processed once admitted
    third, t3 = connect_from(server, "10.0.0.3")
    t3.paused = False
    assert push(third, frame(b"")) == 4
    assert proc.payloads == [b"early"] and t3.paused
    second.connection_lost(None)
    assert proc.payloads == [b"early", b""]


def test_over_the_per_ip_limit_the_connection_is_closed_and_counted_until_its_close():
    server, _loop, _ = limited(QuotaLimits(max_connections_per_ip=1,
                                          per_ip_overrides={"10.0.0.9": 2}))
    connect_from(server, "10.0.0.1")
    refused, t = connect_from(server, "10.0.0.1")
    assert t.closed and not refused.is_admitted
    assert server.quotas.get("10.0.0.1") == 2
    refused.connection_lost(None)
    assert server.quotas.get("10.0.0.1") == 1
    _, a = connect_from(server, "10.0.0.9")
    _, b = connect_from(server, "10.0.0.9")
    _, c = connect_from(server, "10.0.0.9")
    assert not a.closed and not b.closed and c.closed


def test_creation_rate_delays_admission_by_the_throttle_time():
    server, loop, _ = limited(QuotaLimits(max_connection_creation_rate=1, quota_window_num=2))
    first, _ = connect_from(server, "10.0.0.1")
    second, t2 = connect_from(server, "10.0.0.1")
    assert first.is_admitted and not second.is_admitted
    # 2 connections in a 1 s window against 1/s: (2 - 1) / 1 x 1000 ms
    assert second.admit_at_ms == loop.time_ms() + 1000
    loop.advance(999)
    assert not second.is_admitted
    loop.advance(2)
    assert second.is_admitted and not t2.paused


def test_an_address_over_its_connection_creation_rate_is_closed_unread_after_the_throttle():
    """KIP-612's ip quota, checked after the slots: the connection is not counted, never
    read, and closed once Kafka's throttle time (capped at one quota window) has passed;
    other addresses and the listener are not held up by it."""
    server, loop, proc = limited(QuotaLimits(quota_window_num=2, quota_window_size_ms=1000))
    server.quotas.ip_rate = {"10.0.0.1": 1}.get
    first, t1 = connect_from(server, "10.0.0.1")
    assert first.is_admitted and not t1.paused
    second, t2 = connect_from(server, "10.0.0.1")
    other, t3 = connect_from(server, "10.0.0.2")  # no quota for this address
    assert other.is_admitted and not t3.paused
    assert not second.is_admitted and t2.paused and not t2.closed
    assert push(second, frame(b"x")) == 0  # never read
    assert server.quotas.get("10.0.0.1") == 1 and server.quotas.total == 2  # not counted
    assert server.quotas.ip_throttled_total == {"PLAINTEXT": 1}
    # 2 connections in a 1 s window against 1/s: (2 - 1) / 1 x 1000 ms
    assert server.quotas.ip_throttle_time_avg("PLAINTEXT", loop.time_ms()) == 1000.0
    loop.advance(999)
    assert not t2.closed
    loop.advance(2)
    assert t2.closed and not second.is_admitted and proc.payloads == []
    # the throttled connection was taken back out of the address' rate: a window later
    # the address is below its rate again
    loop.advance(2000)
    third, t4 = connect_from(server, "10.0.0.1")
    assert third.is_admitted and not t4.paused


def test_idle_connections_are_closed_after_connections_max_idle_ms():
    server, loop, _ = limited(QuotaLimits(), connections_max_idle_ms=100)
    server.start_idle_expiry()
    idle, ti = connect_from(server, "10.0.0.1")
    busy, tb = connect_from(server, "10.0.0.2")
    for _ in range(6):
        loop.advance(40)
        push(busy, frame(b"x"))
    assert ti.closed and not tb.closed
    assert server.idle_closed_total == {"PLAINTEXT": 1}
    idle.connection_lost(None)
    assert server.quotas.total == 1


# -- a request in flight: read on, hold the next (network/mute_state.py) ---------------------
class ParkOrAnswer(Processor):
    """Parks a request whose bytes start with ``park``; answers any other at once with
    ``re:`` and its bytes (a throttle of ``throttle_ms`` on the answer of a parked one)."""

    def __init__(self, throttle_ms=0):
        self.seen = []
        self.parked = []
        self.server = None
        self.throttle_ms = throttle_ms

    def handle(self, request):
        payload = bytes(request.payload)
        self.seen.append(payload)
        request.release_buffer()
        if payload.startswith(b"park"):
            self.parked.append(request)
            return PARKED
        return SendResponse([b"re:" + payload])

    def answer(self, i):
        request = self.parked[i]
        self.server.channel.send_response(
            request, SendResponse([b"done:%d" % i], throttle_ms=self.throttle_ms))


def test_a_parked_request_costs_no_pause_and_resume_of_reading():
    """The long poll's case: park, answer, park again: the socket is read throughout."""
    proc = ParkOrAnswer()
    server, _loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    for i in range(3):
        push(a, frame(b"park"))
        assert a.mute_state.reasons == MuteReason.IN_FLIGHT and a.in_flight is not None
        proc.answer(i)
        assert a.mute_state.reasons == MuteReason.NONE and a.in_flight is None
    assert ta.written == [b"done:0", b"done:1", b"done:2"]
    assert ta.pauses == 0 and ta.resumes == 0


def test_a_request_sent_while_one_is_in_flight_is_read_held_and_answered_after_it():
    """A client that pipelines: the second request is read into pool memory and held
    (muted RECEIVED: nothing more is read), processed once the first is answered, and
    its answer follows the first's."""

    pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
    proc = ParkOrAnswer()
    server, loop = serve(proc, pool, 1000)
    a, ta = connect(server)
    second, third = frame(b"two"), frame(b"three")
    assert push(a, frame(b"park") + second + third) == 8 + len(second)  # not the third
    assert proc.seen == [b"park"]  # the second is read, not processed
    assert a.mute_state.reasons == MuteReason.IN_FLIGHT | MuteReason.RECEIVED and ta.paused
    assert pool.outstanding == 1 and server.request_memory.outstanding == 1  # its body: KIP-72
    proc.answer(0)
    assert ta.written == [b"done:0"] and proc.seen == [b"park"]
    loop.run_pending()  # the held request, on the next turn (not inside the answer's call)
    assert ta.written == [b"done:0", b"re:two"]  # in order
    assert a.mute_state.reasons == MuteReason.NONE and not ta.paused
    assert push(a, third) == len(third)
    assert ta.written[-1] == b"re:three" and proc.seen == [b"park", b"two", b"three"]
    loop.run_pending()
    assert pool.outstanding == 0 and pool.available == 1000
    assert ta.pauses == 1 and ta.resumes == 1


def test_a_held_request_that_parks_again_keeps_reading_on():
    proc = ParkOrAnswer()
    server, loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"park-1") + frame(b"park-2"))
    assert a.mute_state.has(MuteReason.RECEIVED) and ta.paused
    proc.answer(0)
    loop.run_pending()
    assert proc.seen == [b"park-1", b"park-2"] and a.in_flight is proc.parked[1]
    assert a.mute_state.reasons == MuteReason.IN_FLIGHT and not ta.paused
    proc.answer(1)
    assert ta.written == [b"done:0", b"done:1"]


def test_a_held_request_waits_for_the_throttle_of_the_answer_before_it():
    """KIP-219: a throttled answer mutes the connection until the throttle ends: not
    read, and a request read before the answer is not processed either."""
    proc = ParkOrAnswer(throttle_ms=100)
    server, loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"park") + frame(b"next"))
    proc.answer(0)
    loop.run_pending()
    assert ta.written == [b"done:0"] and proc.seen == [b"park"]
    assert a.mute_state.reasons == MuteReason.THROTTLE | MuteReason.RECEIVED and ta.paused
    server.channel.end_throttling(a.connection_id)
    loop.run_pending()
    assert proc.seen == [b"park", b"next"] and ta.written == [b"done:0", b"re:next"]
    assert a.mute_state.reasons == MuteReason.NONE and not ta.paused


def test_the_next_request_while_one_is_in_flight_waits_for_memory_like_any_other():
    """KIP-72 still bounds what a parked connection reads: no pool memory for the next
    body mutes it MEMORY (reading paused) until a release hands it some."""

    pool = SimpleMemoryPool(100, 100, strict=True, debug=True, clock=MockClock())
    proc = ParkOrAnswer()
    server, loop = serve(proc, pool, 100)
    hog_proc_conn, _ = connect(server)
    a, ta = connect(server)
    push(a, frame(b"park"))
    push(hog_proc_conn, struct.pack(">i", 100))  # takes the whole pool, body unread
    assert push(a, frame(b"next")) == 4
    assert a.mute_state.reasons == MuteReason.IN_FLIGHT | MuteReason.MEMORY and ta.paused
    hog_proc_conn.connection_lost(None)  # its buffer goes back
    loop.run_pending()
    assert a.mute_state.reasons == MuteReason.IN_FLIGHT and not ta.paused
    assert push(a, b"next") == 4 and a.mute_state.has(MuteReason.RECEIVED)
    proc.answer(0)
    loop.run_pending()
    assert ta.written == [b"done:0", b"re:next"]
    loop.run_pending()
    assert pool.outstanding == 0


def test_a_disconnect_with_a_request_parked_and_one_held_gives_both_back():
    pool = SimpleMemoryPool(1000, 1000, strict=False, debug=True, clock=MockClock())
    proc = HoldingProcessor()
    server, loop = serve(proc, pool, 1000)
    a, ta = connect(server)
    push(a, frame(b"a" * 100) + frame(b"b" * 200))
    assert len(proc.requests) == 1 and pool.outstanding == 2
    a.connection_lost(None)
    loop.run_pending()
    assert proc.requests[0][1].abandoned and server.parked == 0
    assert pool.outstanding == 0 and pool.available == 1000
    proc.answer(0, b"late")
    assert ta.written == [] and len(proc.requests) == 1  # the held one never ran


def test_shutdown_stops_reading_a_parked_connection():
    proc = ParkOrAnswer()
    server, _loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"park"))
    assert not ta.paused
    server.stop_reading()
    assert ta.paused and a.mute_state.reasons == MuteReason.IN_FLIGHT | MuteReason.SHUTDOWN
    proc.answer(0)  # parked requests still answer
    assert ta.written == [b"done:0"] and ta.paused


def test_a_held_request_is_not_processed_inside_the_call_that_answers_the_one_before_it():
    """The answer comes from inside the core (a purgatory's completion, the flusher's end
    of a round, which is not re-entrant): the held request runs on the next turn, as a
    read after resume_reading would."""
    proc = ParkOrAnswer()
    server, loop = serve(proc, NONE, 100)
    a, _ta = connect(server)
    push(a, frame(b"park") + frame(b"next"))
    proc.answer(0)
    assert proc.seen == [b"park"]
    loop.run_pending()
    assert proc.seen == [b"park", b"next"]


def test_a_held_request_scheduled_then_held_back_again_waits_for_that_reason():
    proc = ParkOrAnswer()
    server, loop = serve(proc, NONE, 100)
    a, ta = connect(server)
    push(a, frame(b"park") + frame(b"next"))
    proc.answer(0)  # schedules the held request ...
    a.mute(MuteReason.THROTTLE)  # ... but a throttle comes first
    loop.run_pending()
    assert proc.seen == [b"park"] and ta.paused
    a.unmute(MuteReason.THROTTLE)
    loop.run_pending()
    assert proc.seen == [b"park", b"next"] and not ta.paused
