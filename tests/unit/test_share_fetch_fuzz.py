"""Several members of one share group never hold one record at once (KIP-932): a
Hypothesis test over interleaved fetches (long polls included), acknowledgements
(piggy-backed and alone: ACCEPT, RELEASE, REJECT), lock expiries, closes, disconnects and
appends from three members, through the ShareFetch/ShareAcknowledge handling on fake time
over a real log.

The model: a member holds the offsets a response handed it until it acknowledges them,
closes, disconnects, or their lock (1 s from the acquisition) expires. Checked at every
answer: an acquired offset is held by no other member; its delivery count is one more
than the deliveries before; the response carries its record (whole batches, CRCs
checked); it was never ACCEPTed or REJECTed; it is delivered at most
``delivery.count.limit`` times; an acknowledgement of offsets the member holds succeeds.
At the end, with every lock expired, one member drains the partition: every offset ever
appended was delivered at least once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.share_fetching import (
    ACCEPT,
    LOCK_MS,
    REJECT,
    RELEASE,
    Broker,
    Call,
    Consumer,
    ack_errors,
    acquired,
    batches_of,
    partitions_of,
)
from tidegate.errors import ErrorCode

MEMBERS = 3
LIMIT = 5
#: (kind, member, max records, max wait, ack type, piggy-backed, ms): one flat tuple, so
#: the kinds are drawn with these weights
op = st.tuples(
    st.sampled_from(["fetch"] * 5 + ["ack"] * 4 + ["produce"] * 2 + ["advance", "close", "disconnect"]),
    st.integers(0, MEMBERS - 1),
    st.integers(1, 8),
    st.sampled_from([0, 0, 300]),
    st.sampled_from([ACCEPT, RELEASE, RELEASE, REJECT]),
    st.booleans(),
    st.sampled_from([1, 50, 200, 999, 1_000, 1_500]),
)


class Model:
    def __init__(self, broker: Broker, topic_id) -> None:
        self.broker = broker
        self.tp = (topic_id, 0)
        self.consumers = [broker.consumer(f"member-{i}", connection_id=i + 1) for i in range(MEMBERS)]
        #: member -> offset -> when it was acquired
        self.holding: list[dict[int, int]] = [{} for _ in range(MEMBERS)]
        self.deliveries: dict[int, int] = {}
        self.done: set[int] = set()
        self.produced = 0
        self.pending: list[tuple[int, Call]] = []
        #: fetches parked when their connection closed (never answered)
        self.abandoned: list[Call] = []

    def expire(self) -> None:
        now = self.broker.now
        for held in self.holding:
            for offset in [o for o, at in held.items() if at + LOCK_MS <= now]:
                del held[offset]

    def received(self, m: int, call: Call) -> None:
        """Check and record what a (possibly parked) fetch handed member ``m``."""
        self.expire()
        response = call.response
        if response.error_code != ErrorCode.none:
            return
        data = partitions_of(response).get(self.tp)
        sent = {o for base, last in batches_of(data) for o in range(base, last + 1)} if data is not None else set()
        for first, last, count in acquired(response, self.tp):
            assert set(range(first, last + 1)) <= sent, (first, last, sorted(sent))
            for offset in range(first, last + 1):
                assert offset not in self.done, offset
                for other, held in enumerate(self.holding):
                    assert offset not in held, (offset, m, other)
                assert count == self.deliveries.get(offset, 0) + 1, (offset, count)
                assert count <= LIMIT
                self.deliveries[offset] = count
                self.holding[m][offset] = call.at if call.at is not None else self.broker.now

    def settle(self) -> None:
        """Check the parked fetches that were answered meanwhile (in answer order)."""
        assert not any(call.done for call in self.abandoned)
        answered = sorted((c.at, i, m, c) for i, (m, c) in enumerate(self.pending) if c.done)
        self.pending = [(m, c) for m, c in self.pending if not c.done]
        for _at, _i, m, call in answered:
            self.received(m, call)

    def acks_of(self, m: int, ack_type: int) -> dict:
        held = sorted(self.holding[m])
        return {self.tp: [(o, o, ack_type) for o in held]} if held else {}

    def acked(self, m: int, ack_type: int, response) -> None:
        if not self.holding[m]:
            return
        assert ack_errors(response).get(self.tp) == ErrorCode.none, (m, response)
        if ack_type in (ACCEPT, REJECT):
            self.done |= set(self.holding[m])
        self.holding[m].clear()

    def step(self, operation: tuple) -> None:
        kind, m, max_records, max_wait, ack_type, piggyback, ms = operation
        self.expire()
        if kind == "produce":
            self.broker.produce("t", 0, 1, batches=max_records)
            self.produced += max_records
        elif kind == "advance":
            self.broker.advance(ms)
        elif kind == "fetch":
            self.fetch(m, max_records, max_wait)
        elif kind == "ack":
            self.ack(m, ack_type, piggyback)
        elif kind == "close":
            c = self.consumers[m]
            if c.epoch > 0 and not self.parked(m):
                assert c.close().response.error_code == ErrorCode.none
                self.holding[m].clear()
        else:
            c = self.consumers[m]
            c.disconnect()
            c.epoch = 0
            self.holding[m].clear()
            # Its parked fetch must never answer (abandoned with the connection): the
            # client cannot read it, and the records it would acquire would be locked to
            # a member whose session ended (its ShareAcknowledge at epoch > 0 answers
            # SHARE_SESSION_NOT_FOUND, as Kafka's does).
            self.abandoned += [call for pm, call in self.pending if pm == m]
            self.pending = [(pm, call) for pm, call in self.pending if pm != m]
        self.settle()

    def parked(self, m: int) -> bool:
        return any(pm == m for pm, _c in self.pending)

    def fetch(self, m: int, max_records: int, max_wait: int) -> None:
        if self.parked(m):
            return  # one request at a time per member, as a client sends them
        c: Consumer = self.consumers[m]
        call = c.fetch(self.tp, max_records=max_records, max_wait=max_wait)
        self.pending.append((m, call))

    def ack(self, m: int, ack_type: int, piggyback: bool) -> None:
        c = self.consumers[m]
        if c.epoch == 0 or self.parked(m):
            return
        acks = self.acks_of(m, ack_type)
        if piggyback:
            call = c.fetch(self.tp, acks=acks, max_records=3)
            self.acked(m, ack_type, call.response)
            self.pending.append((m, call))
        elif acks:
            self.acked(m, ack_type, c.acknowledge(acks).response)

    def drain(self) -> None:
        """Every lock expired, then one member takes and accepts everything left."""
        self.broker.advance(10 * LOCK_MS)
        self.settle()
        self.expire()
        assert not self.pending
        drainer = self.broker.consumer("drainer", connection_id=99)
        while True:
            call = drainer.fetch(self.tp, max_records=50)
            ranges = acquired(call.response, self.tp)
            if not ranges:
                break
            for first, last, _count in ranges:
                for offset in range(first, last + 1):
                    assert offset not in self.done
                    self.deliveries[offset] = self.deliveries.get(offset, 0) + 1
            drainer.acknowledge({self.tp: [(f, l, ACCEPT) for f, l, _c in ranges]})
        assert set(self.deliveries) == set(range(self.produced))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=5, max_size=50))
# Member 0's fetch parks (member 2 holds everything), its connection closes, member 2's
# release wakes the parked fetch: abandoned, it answers nothing and acquires nothing.
@example([("fetch", 2, 3, 0, 1, False, 1)] + [("fetch", 0, 1, 0, 1, False, 1)] * 6
         + [("fetch", 0, 1, 300, 1, False, 1), ("disconnect", 0, 1, 0, 1, False, 1),
            ("ack", 2, 1, 0, 2, False, 1), ("ack", 0, 1, 0, 1, False, 1)])
# Member 0 holds records and its fetch parks when its connection closes: the release
# wakes that fetch, which must not take them back for the ended session.
@example([("fetch", 0, 8, 0, 1, False, 1), ("fetch", 0, 1, 300, 1, False, 1),
          ("disconnect", 0, 1, 0, 1, False, 1)])
def test_members_never_hold_one_record_at_once(operations):
    with tempfile.TemporaryDirectory() as d:
        broker = Broker(Path(d))
        topic_id = broker.create_topic("t", 1)
        model = Model(broker, topic_id)
        model.step(("produce", 0, 3, 0, 0, False, 0))
        for operation in operations:
            model.step(operation)
        model.drain()
