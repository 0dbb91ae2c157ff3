"""Random sequences of acquire / acknowledge / release / lock expiry / log start movement /
slow and failed writes on one share-partition (Hypothesis state machine), against a
model of who holds what.

Invariants checked after every step and on every acquisition:

* one offset is never handed to two members at once (nor twice to one member while its
  lock lasts);
* an ACKNOWLEDGED or ARCHIVED offset is never delivered again;
* a delivery count never goes down and never passes the limit;
* nothing below the SPSO is AVAILABLE or handed out (and, as long as the log start did
  not move, nothing non-terminal is below it);
* every ACQUIRED record holds a pending lock, and the timer holds exactly those locks.
"""

from __future__ import annotations

from bisect import bisect_right

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.unit.share_helpers import Env
from tidegate.errors import ErrorCode
from tidegate.server.share import (
    AcknowledgeType,
    FetchedBatch,
    RecordState,
    ShareAcknowledgementBatch,
    ShareAcquireMode,
    ShareFetchRead,
    SharePartition,
    ShareResult,
)
from tidegate.server.share.in_flight import SHARED_LOCK, STATE_MASK, TRANSITION

MEMBERS = ("m1", "m2", "m3")
ACK_TYPES = [int(t) for t in (AcknowledgeType.GAP, AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                              AcknowledgeType.REJECT, AcknowledgeType.RENEW)]


class SharePartitionMachine(RuleBasedStateMachine):
    env: Env
    sp: SharePartition

    @initialize(
        sizes=st.lists(st.integers(1, 6), min_size=3, max_size=25),
        max_delivery=st.integers(2, 6),
        lock_ms=st.integers(3, 40),
        max_in_flight=st.integers(4, 80),
    )
    def setup(self, sizes, max_delivery, lock_ms, max_in_flight):
        self.env = Env()
        self.lock_ms = lock_ms
        self.max_delivery = max_delivery
        self.sp = self.env.partition(max_delivery_count=max_delivery, lock_ms=lock_ms,
                                     max_in_flight_records=max_in_flight)
        self.log: list[FetchedBatch] = []
        offset = 0
        for n in sizes:
            self.log.append(FetchedBatch(offset, offset + n - 1))
            offset += n
        self.bases = [b.base_offset for b in self.log]
        self.log_end = offset
        self.log_start = 0
        self.log_start_moved = False
        #: offset -> (member, lock deadline) of records the model says a member holds
        self.held: dict[int, tuple[str, int]] = {}
        #: offsets acknowledged or archived for good
        self.done: set[int] = set()
        #: offset -> the last delivery count handed out
        self.counts: dict[int, int] = {}

    @property
    def now(self) -> int:
        return self.env.clock.milliseconds()

    def holder(self, offset: int) -> str | None:
        held = self.held.get(offset)
        if held is None or held[1] <= self.now:
            return None
        return held[0]

    # -- rules -------------------------------------------------------------------------------

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 30), batch_size=st.integers(1, 30),
          batches=st.integers(1, 6), record_limit=st.booleans())
    def acquire(self, member, max_records, batch_size, batches, record_limit):
        sp = self.sp
        fetch_offset = sp.next_fetch_offset()
        if fetch_offset < self.log_start:  # the log answers OFFSET_OUT_OF_RANGE
            sp.update_cache_and_offsets(self.log_start)
            return
        i = max(bisect_right(self.bases, fetch_offset) - 1, 0)
        read = [b for b in self.log[i:i + batches] if b.last_offset >= fetch_offset]
        start = sp.start_offset
        mode = ShareAcquireMode.RECORD_LIMIT if record_limit else ShareAcquireMode.BATCH_OPTIMIZED
        got = sp.acquire(member, ShareFetchRead(read), fetch_offset=fetch_offset, max_records=max_records,
                         batch_size=batch_size, mode=mode)
        total = 0
        for first, last, count in got.records:
            assert read and read[0].base_offset <= first <= last <= read[-1].last_offset
            for offset in range(first, last + 1):
                assert offset >= start, (offset, start)
                assert offset not in self.done, offset
                assert self.holder(offset) is None, (offset, self.held[offset], member)
                assert count == self.counts.get(offset, 0) + 1, (offset, count, self.counts.get(offset))
                assert count <= self.max_delivery
                self.counts[offset] = count
                self.held[offset] = (member, self.now + self.lock_ms)
                total += 1
        assert total == got.count
        if record_limit:
            assert total <= max_records

    def _ack_done(self, member, acks, start):
        def done(result: ShareResult) -> None:
            if result.error is not ErrorCode.none:
                return
            for ack in acks:
                types = ack.acknowledge_types
                for offset in range(ack.first_offset, ack.last_offset + 1):
                    ack_type = types[0] if len(types) == 1 else types[offset - ack.first_offset]
                    if offset < start or offset not in self.held or ack_type == AcknowledgeType.RENEW:
                        continue  # a renewal took effect when the acknowledgement came
                    del self.held[offset]
                    if ack_type != AcknowledgeType.RELEASE or self.counts[offset] >= self.max_delivery:
                        self.done.add(offset)
        return done

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member, data):
        mine = sorted(o for o in self.held if self.holder(o) == member)
        if mine and data.draw(st.booleans()):
            first = data.draw(st.sampled_from(mine))
            last = data.draw(st.integers(first, first + 4))
        else:
            first = data.draw(st.integers(0, self.log_end))
            last = data.draw(st.integers(first, first + 6))
        if data.draw(st.booleans()):
            types = tuple(data.draw(st.lists(st.sampled_from(ACK_TYPES), min_size=last - first + 1,
                                             max_size=last - first + 1)))
        else:
            types = (data.draw(st.sampled_from(ACK_TYPES)),)
        acks = [ShareAcknowledgementBatch(first, last, types)]
        start = self.sp.start_offset
        cached = [o for o in range(first, last + 1) if self.sp.batch_of(o) is not None]
        before = {o: self._state(o) for o in cached}
        holders = {o: self.holder(o) for o in cached}
        renewed = [o for o in range(first, last + 1) if o >= start and self.holder(o) == member
                   and (types[0] if len(types) == 1 else types[o - first]) == AcknowledgeType.RENEW]
        results: list[ShareResult] = []
        done = self._ack_done(member, acks, start)
        self.sp.acknowledge(member, acks, lambda r: (done(r), results.append(r)))
        # RENEW restarts the lock as the acknowledgement is applied, whatever becomes of the
        # write of the other records' new states (Kafka renews while it walks the batches and
        # keeps no rollback state for it); after an error found before the write, the offsets
        # walked before it are renewed and the rest not
        deadline = self.now + self.lock_ms
        for offset in renewed:
            if results and results[0].error is not ErrorCode.none and self._lock_deadline(offset) != deadline:
                continue
            self.held[offset] = (member, deadline)
        if not results:
            return  # the write waits
        if results[0].error is ErrorCode.none:
            # only records this member held were acknowledged
            assert all(holders[o] == member for o in cached if o >= start), (holders, member, start)
        elif not self.env.persister.held:
            # all or nothing: an error found before the write changes no record
            assert {o: self._state(o) for o in cached} == before

    def _lock_deadline(self, offset: int) -> int:
        """When the lock ``offset`` is under expires (-1: none)."""
        batch = self.sp.batch_of(offset)
        assert batch is not None
        offsets = batch.offsets
        if offsets is None or offsets.states[offset - batch.first] & SHARED_LOCK:
            return batch.expiration_ms
        lock = offsets.locks.get(offset - batch.first)
        entry = None if lock is None else lock.timer_task_entry
        return -1 if entry is None else entry.expiration_ms

    def _state(self, offset: int) -> tuple[RecordState, int, str]:
        batch = self.sp.batch_of(offset)
        assert batch is not None
        key = offset if batch.offsets is not None else None
        return batch.record_state(key), batch.delivery_count(key), batch.member_id(key)

    @rule(member=st.sampled_from(MEMBERS))
    def release(self, member):
        start = self.sp.start_offset
        busy = self._in_transition()
        # what the member holds now (not waiting for an acknowledgement's write) is released
        released = {o: h for o, h in self.held.items() if h[0] == member and h[1] > self.now and o not in busy}

        def done(result: ShareResult) -> None:
            if result.error is not ErrorCode.none:
                return
            for offset, hold in released.items():
                if self.held.get(offset) == hold:
                    del self.held[offset]
                    if offset < start or self.counts[offset] >= self.max_delivery:
                        self.done.add(offset)

        self.sp.release_acquired_records(member, done)

    @rule(ms=st.integers(1, 25))
    def advance(self, ms):
        self.env.advance(ms)
        for offset, (_holder, deadline) in list(self.held.items()):
            if deadline <= self.now and offset not in self._in_transition():
                del self.held[offset]
                if self.counts[offset] >= self.max_delivery:
                    self.done.add(offset)

    @rule(to=st.integers(1, 10))
    def move_log_start(self, to):
        new_start = min(self.log_start + to, self.log_end)
        if new_start <= self.log_start:
            return
        self.log_start = new_start
        self.log_start_moved = True
        self.sp.update_cache_and_offsets(new_start)

    @precondition(lambda self: not self.env.persister.hold_writes)
    @rule()
    def slow_writes(self):
        self.env.persister.hold_writes = True

    @precondition(lambda self: self.env.persister.hold_writes)
    @rule(fail=st.booleans())
    def answer_writes(self, fail):
        self.env.persister.hold_writes = False
        if fail:
            self.env.persister.fail_held(ErrorCode.coordinator_not_available)
        else:
            self.env.persister.complete_held()

    def _in_transition(self) -> set[int]:
        out = set()
        for batch in self.sp.cached_batches():
            for o in range(batch.first, batch.last + 1):
                if batch.in_transition(o if batch.offsets else None):
                    out.add(o)
        return out

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def states_locks_and_start_offset(self):
        sp = self.sp
        locks = 0
        for batch in sp.cached_batches():
            offsets = batch.offsets
            if offsets is None:
                raw = [batch.state] * batch.size
                counts = [batch.count] * batch.size
                members = [batch.member] * batch.size
                locked = [batch.locked] * batch.size
                locks += batch.locked
            else:
                raw, counts, members = list(offsets.states), list(offsets.counts), offsets.members
                locked = [bool(s & SHARED_LOCK) and batch.locked or i in offsets.locks
                          for i, s in enumerate(raw)]
                locks += batch.locked + len(offsets.locks)
                assert offsets.shared == sum(1 for s in raw if s & SHARED_LOCK)
                assert bool(offsets.shared) == batch.locked
            for i, state in enumerate(raw):
                offset = batch.first + i
                base = RecordState(state & STATE_MASK)
                assert counts[i] <= self.max_delivery
                if base is RecordState.AVAILABLE and not state & TRANSITION:
                    assert offset >= sp.start_offset, (offset, sp.start_offset)
                    assert offset not in self.done
                if not self.log_start_moved and not base.terminal:
                    assert offset >= sp.start_offset, (offset, base, sp.start_offset)
                if base is RecordState.ACQUIRED and not state & TRANSITION:
                    assert locked[i], (offset, batch)
                    assert members[i] != ""
                    holder = self.holder(offset)
                    assert holder in (None, members[i])
        assert locks == self.env.timer.size
        assert sp.next_fetch_offset() >= sp.start_offset or sp.gap_window is not None
        if sp.gap_window is None:
            assert sp.next_fetch_offset() == self.first_available(), (sp.next_fetch_offset(), self.first_available())

    def first_available(self) -> int:
        """next_fetch_offset by brute force: the first cached offset that is AVAILABLE
        (no transition pending), from the cache's head."""
        sp = self.sp
        batches = sp.cached_batches()
        for batch in batches:
            if batch.offsets is None:
                if batch.state == RecordState.AVAILABLE:
                    return batch.first
            else:
                k = batch.offsets.states.find(int(RecordState.AVAILABLE))
                if k >= 0:
                    return batch.first + k
        if not batches or sp.start_offset > batches[-1].last:
            return sp.end_offset
        return sp.end_offset + 1


SharePartitionMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSharePartitionFuzz = SharePartitionMachine.TestCase
