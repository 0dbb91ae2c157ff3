"""Long polls answer exactly on time while groups rebalance: the whole core on fake time.

Hypothesis interleaves consumer-group members joining, heartbeating and going silent
(their sessions expire, rebalances start and complete, each scheduling new heartbeat and
join deadlines), produces, and long-poll fetches with random max waits, on the broker's
real BrokerCore (tests/core_harness) driven by one FakeLoop. Every parked fetch must be
answered exactly at its max wait, or at once when a produce to its partition arrives
first (after the producer's own response): never late because another purgatory's
operation expired and scheduled something further out (issue 13's rebalance defect).
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core_harness import CoreHarness, decode_frame, response_bytes
from tests.integration.rawclient import fetch_body, produce_body, repeated_batch
from tidegate.network.request_channel import PARKED
from tidegate.protocol.apis import ApiKey

TOPIC = "t"
PARTITIONS = 2


def subscription() -> bytes:
    return struct.pack(">hih", 0, 1, len(TOPIC)) + TOPIC.encode() + struct.pack(">i", -1)


def join_body(member_id: str) -> dict:
    return {
        "group_id": "g", "session_timeout": 6000, "rebalance_timeout": 10_000,
        "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription()}], "reason": None,
    }  # fmt: skip


action = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 3)),
    st.tuples(st.just("heartbeat"), st.integers(0, 3)),
    st.tuples(st.just("produce"), st.integers(0, PARTITIONS - 1)),
    st.tuples(st.just("fetch"), st.integers(0, PARTITIONS - 1), st.integers(1, 3000)),
    st.tuples(st.just("advance"), st.integers(1, 4000)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(action, min_size=5, max_size=40))
def test_long_polls_answer_on_time_under_group_activity(tmp_path_factory, actions):
    h = CoreHarness(tmp_path_factory.mktemp("core"))
    try:
        h.logs.create_topic(TOPIC, PARTITIONS, {})
        answered_at: dict[int, int] = {}
        send = h.channel.send_response

        def timed_send(request, response):
            answered_at[id(request)] = h.clock.milliseconds()
            send(request, response)

        h.channel.send_response = timed_send
        members: dict[int, str] = {}
        fetches = []  # (request, partition, parked at, max wait, event number)
        produced_at: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        for event, act in enumerate(actions):
            kind = act[0]
            if kind == "join":
                # JoinGroup v9: MEMBER_ID_REQUIRED first, then the join that parks in the
                # rebalance (answered when it completes, or not at all if superseded)
                _req, outcome, _cid, _ = h.send(ApiKey.JOIN_GROUP, 9, join_body(members.get(act[1], "")))
                if outcome is not PARKED and act[1] not in members:
                    resp = decode_frame(ApiKey.JOIN_GROUP, 9, response_bytes(outcome), _cid)
                    members[act[1]] = resp.member_id
                    h.send(ApiKey.JOIN_GROUP, 9, join_body(resp.member_id))
            elif kind == "heartbeat" and act[1] in members:
                h.send(ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1,
                                             "member_id": members[act[1]], "group_instance_id": None})
            elif kind == "produce":
                produced_at[act[1]].append((h.clock.milliseconds(), event))
                h.send(ApiKey.PRODUCE, 9, produce_body(TOPIC, {act[1]: repeated_batch(b"x")}))
            elif kind == "fetch":
                end = h.logs.get_log(TOPIC, act[1]).log_end_offset
                request, outcome, _cid, _ = h.send(
                    ApiKey.FETCH, 12, fetch_body(TOPIC, end, partition=act[1], max_wait=act[2])
                )
                assert outcome is PARKED  # at the log end, min_bytes 1: it waits
                fetches.append((request, act[1], h.clock.milliseconds(), act[2], event))
            elif kind == "advance":
                h.loop.advance(act[1])
        h.loop.advance(4000)  # every fetch's max wait has passed
        for request, partition, parked, max_wait, parked_event in fetches:
            assert id(request) in answered_at, (parked, max_wait)
            woken = [t for t, e in produced_at[partition] if e > parked_event and t < parked + max_wait]
            expected = woken[0] if woken else parked + max_wait
            assert answered_at[id(request)] == expected, (parked, max_wait, woken)
    finally:
        h.close()


def test_a_fetch_parked_across_a_rebalance_answers_at_its_max_wait(tmp_path):
    """The defect's exact shape: a member joins (the group's first rebalance waits
    group.initial.rebalance.delay.ms, 3 s), a fetch parks 2.9 s later with max wait 500 ms;
    at 3 s the rebalance completes and arms the member's session deadline 6 s out. The
    fetch still answers at 3.4 s, not when the session deadline's bucket comes due."""
    h = CoreHarness(tmp_path)
    try:
        h.logs.create_topic(TOPIC, 1, {})
        _req, outcome, cid, _ = h.send(ApiKey.JOIN_GROUP, 9, join_body(""))
        member = decode_frame(ApiKey.JOIN_GROUP, 9, response_bytes(outcome), cid).member_id
        start = h.clock.milliseconds()
        join, join_cid = h.park(ApiKey.JOIN_GROUP, 9, join_body(member))
        h.loop.advance(2900)
        fetch, fetch_cid = h.park(ApiKey.FETCH, 12, fetch_body(TOPIC, 0, max_wait=500))
        assert h.answer(join, join_cid, within_ms=100).error_code == 0
        assert h.clock.milliseconds() - start == 3000
        h.answer(fetch, fetch_cid, within_ms=1000)
        assert h.clock.milliseconds() - start == 3400
    finally:
        h.close()
