"""The share-state persister interface: combining state batches as the share coordinator
does (Kafka's ``PersisterStateBatchCombinerTest``), and the coordinator's checks kept by
the in-memory persister (``ShareCoordinatorShardTest``: uninitialized, fenced epochs)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.share_helpers import KEY
from tidegate.errors import ErrorCode
from tidegate.server.share import InMemoryPersister, PersisterStateBatch, PersisterWrite
from tidegate.server.share.persister import combine_state_batches

B = PersisterStateBatch


@pytest.mark.parametrize(("current", "new", "start", "expected"), [
    ([], [B(0, 9, 2, 1)], 0, [B(0, 9, 2, 1)]),
    ([B(0, 9, 0, 1)], [B(3, 5, 2, 1)], 0, [B(0, 2, 0, 1), B(3, 5, 2, 1), B(6, 9, 0, 1)]),  # newer wins
    ([B(0, 9, 0, 1)], [B(0, 9, 4, 2)], 0, [B(0, 9, 4, 2)]),
    ([B(0, 4, 2, 1)], [B(5, 9, 2, 1)], 0, [B(0, 9, 2, 1)]),  # adjacent and equal: merged
    ([B(0, 4, 2, 1), B(5, 9, 0, 1)], [], 7, [B(7, 9, 0, 1)]),  # pruned below the start offset
    ([B(0, 9, 0, 1)], [B(12, 15, 4, 1), B(2, 3, 2, 1)], 1,
     [B(1, 1, 0, 1), B(2, 3, 2, 1), B(4, 9, 0, 1), B(12, 15, 4, 1)]),
])
def test_combine_state_batches(current, new, start, expected):
    assert combine_state_batches(current, new, start) == expected


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), st.sampled_from([0, 2, 4]),
                          st.integers(1, 3)), max_size=12),
       st.integers(0, 10))
def test_combine_state_batches_matches_applying_writes_offset_by_offset(writes, start):
    """The combined ranges say, for every offset at or above the start, what the last
    write covering it said; they are sorted and disjoint."""
    batches = [B(first, first + length, state, count) for first, length, state, count in writes]
    combined: list[B] = []
    for batch in batches:
        combined = combine_state_batches(combined, [batch], start)
    expected: dict[int, tuple[int, int]] = {}
    for batch in batches:
        for o in range(batch.first_offset, batch.last_offset + 1):
            expected[o] = (batch.delivery_state, batch.delivery_count)
    got = {o: (b.delivery_state, b.delivery_count) for b in combined for o in range(b.first_offset, b.last_offset + 1)}
    assert got == {o: v for o, v in expected.items() if o >= start}
    assert all(a.last_offset < b.first_offset for a, b in itertools.pairwise(combined))


def _call(fn, *args):
    out = []
    fn(*args, out.append)
    return out[0]


def test_in_memory_persister_checks_like_the_share_coordinator():
    p = InMemoryPersister()
    write = PersisterWrite(KEY, 1, 0, 0, (B(0, 4, 2, 1),))
    assert _call(p.read, KEY, 0).error is ErrorCode.invalid_request  # uninitialized
    assert _call(p.write, write) is ErrorCode.invalid_request
    assert _call(p.initialize, KEY, 2, -1) is ErrorCode.none
    assert _call(p.read, KEY, 3).start_offset == -1
    assert _call(p.write, write) is ErrorCode.fenced_leader_epoch  # leader epoch 0 < 3
    assert _call(p.write, PersisterWrite(KEY, 1, 3, 0, ())) is ErrorCode.fenced_state_epoch  # 1 < 2
    assert _call(p.write, PersisterWrite(KEY, 2, 3, 5, (B(3, 9, 2, 1),))) is ErrorCode.none
    stored = p.state(KEY)
    assert (stored.state_epoch, stored.start_offset, stored.state_batches) == (2, 5, (B(5, 9, 2, 1),))
    assert _call(p.delete, KEY) is ErrorCode.none and p.state(KEY) is None
