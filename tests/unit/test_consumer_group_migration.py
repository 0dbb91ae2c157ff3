"""Online migration between the classic and consumer protocols (reference 1.13; section 4
items 23-26, named after Kafka 4.2's GroupMetadataManagerTest): the upgrade of a classic
group when a consumer-protocol member joins, the classic members of a consumer group
through JoinGroup/SyncGroup/Heartbeat/LeaveGroup, the downgrade when the last
consumer-protocol member leaves or is fenced, the policies, and restarts after each
conversion. On fake time over a real ``__consumer_offsets`` (tests/unit/consumer_groups.py)
with the classic coordinator beside the consumer group coordinator, as the broker wires
them."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tests.unit.consumer_groups import T0, Harness, mk
from tidegate.coordinator.group.group_metadata import (
    PREPARING_REBALANCE,
    STABLE,
    JoinResult,
    SyncResult,
)
from tidegate.coordinator.group.group_metadata_manager import AppendError, decode_group
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import ConsumerGroupConfig
from tidegate.coordinator.group.modern.consumer.records import RecordType
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.errors import ErrorCode as E
from tidegate.log.replay import replay_batches
from tidegate.protocol.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)

G = "grp"
#: the classic members' session timeout: longer than the consumer protocol's 45 s, so a
#: consumer-protocol member's session can expire while they keep theirs
CLASSIC_SESSION = 60_000
REBALANCE = 30_000


def join(h: Harness, member_id: str = "", instance_id: str | None = None, *, topics=("foo",),
         protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
         require_known: bool = False) -> list[JoinResult]:  # fmt: skip
    """A classic JoinGroup; its answers so far (after the loop ran)."""
    out: list[JoinResult] = []
    h.classic.handle_join_group(
        G, member_id, instance_id, require_known, True, "client", "/127.0.0.1", REBALANCE,
        CLASSIC_SESSION, protocol_type, protocols or [("range", encode_subscription(topics))], out.append,
    )  # fmt: skip
    h.loop.run_pending()
    return out


def sync(h: Harness, member_id: str, generation: int, instance_id: str | None = None,
         assignments: dict[str, bytes] | None = None, protocol_name: str | None = "range") -> list[SyncResult]:  # fmt: skip
    out: list[SyncResult] = []
    h.classic.handle_sync_group(G, generation, member_id, "consumer", protocol_name, instance_id,
                                assignments or {}, out.append)  # fmt: skip
    h.loop.run_pending()
    return out


def beat(h: Harness, member_id: str, generation: int, instance_id: str | None = None) -> E:
    return h.classic.handle_heartbeat(G, member_id, instance_id, generation)


def partitions(data: bytes) -> list[tuple[str, int]]:
    return decode_assignment(data)


def subscription(version: int, topics=("foo",), rack: str | None = None) -> bytes:
    """A ConsumerProtocol subscription in ``version`` (v1+: no owned partitions; v2+:
    generation -1; v3+: ``rack``), as a Java or librdkafka member sends it."""
    data = struct.pack(">h", version) + encode_subscription(topics)[2:]
    if version >= 1:
        data += struct.pack(">i", 0)
    if version >= 2:
        data += struct.pack(">i", -1)
    if version >= 3:
        data += struct.pack(">h", -1) if rack is None else struct.pack(">h", len(rack)) + rack.encode()
    return data


def with_user_data(assignment: bytes, user_data: bytes) -> bytes:
    """``assignment`` (null user data) carrying an assignor's ``user_data`` instead."""
    return assignment[:-4] + struct.pack(">i", len(user_data)) + user_data


def stable_classic_group(h: Harness, n: int = 2, partitions_: int = 4,
                         user_data: bytes | None = None) -> tuple[int, list[str]]:  # fmt: skip
    """A Stable classic group of ``n`` members over topic foo's partitions, assigned by
    its leader (range; with ``user_data`` in each assignment if given); (generation,
    member ids)."""
    h.create_topic("foo", partitions_)
    (first,) = join(h)  # the initial delay is 0 here: the first member makes generation 1
    results = [first]
    for _ in range(n - 1):  # each newcomer starts a rebalance the others rejoin
        answers = [join(h)] + [join(h, r.member_id) for r in results]
        h.advance(100)
        results = [a[0] for a in answers]
    assert all(r.error is E.none for r in results), results
    generation = results[0].generation_id
    ids = [r.member_id for r in results]
    share = partitions_ // n
    assignment = {
        mid: encode_assignment(("foo", p) for p in range(i * share, (i + 1) * share)) for i, mid in enumerate(ids)
    }
    if user_data is not None:
        assignment = {mid: with_user_data(data, user_data) for mid, data in assignment.items()}
    leader = next(r.member_id for r in results if r.members)
    for mid in sorted(ids, key=lambda m: m != leader):  # the leader's SyncGroup first
        (answer,) = sync(h, mid, generation, assignments=assignment if mid == leader else None)
        assert answer.error is E.none
    group = h.classic.classic_group(G)
    assert group is not None and group.state is STABLE
    return generation, ids


def target_by_name(h: Harness, member_id: str) -> list[tuple[str, int]]:
    """The member's target assignment in the consumer group, as (topic, partition)."""
    return sorted(
        (h.topics.get_by_id(topic_id).name, p)
        for topic_id, ps in h.group(G).target_assignment_of(member_id).items()
        for p in ps
    )


def rejoin(h: Harness, member_id: str) -> int:
    """A classic member of a consumer group rejoins and syncs; its new generation."""
    (joined,) = join(h, member_id)
    assert joined.error is E.none, joined
    (synced,) = sync(h, member_id, joined.generation_id)
    assert synced.error is E.none, synced
    return joined.generation_id


def static_classic_member_upgraded(h: Harness) -> tuple[str, int]:
    """A classic group of one static member (instance i1) owning foo's two partitions,
    upgraded by consumer-protocol member c1; (its member id, its generation)."""
    h.create_topic("foo", 2)
    join(h, instance_id="i1")
    m1 = h.classic.classic_group(G).static_members["i1"]
    generation = h.classic.classic_group(G).generation_id
    sync(h, m1, generation, "i1", {m1: encode_assignment([("foo", 0), ("foo", 1)])})
    h.join("c1", group_id=G)
    return m1, generation


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def upgrade(h: Harness, member_id: str = "c1") -> tuple[int, list[str], Any]:
    generation, ids = stable_classic_group(h)
    result = h.join(member_id, group_id=G)
    return generation, ids, result


# ------------------------------------------------------------------------------- the upgrade
def test_consumer_group_heartbeat_with_stable_classic_group(h):
    """Item 23: the classic group's record is tombstoned, the consumer group is written
    with the classic members at the generation (their assignment as current and target),
    then the new member joins and bumps the epoch."""
    generation, (m1, m2), result = upgrade(h)
    batch = h.last_batch
    assert batch[0].type is RecordType.CLASSIC_GROUP_METADATA and batch[0].value is None
    group = h.group(G)
    foo = h.topics.get("foo").topic_id
    assert h.classic.classic_group(G) is None
    assert group.group_epoch == generation + 1 and result.member_epoch == generation + 1
    for mid, parts in ((m1, (0, 1)), (m2, (2, 3))):
        member = group.members[mid]
        assert member.use_classic_protocol
        assert member.classic_member_metadata.session_timeout_ms == CLASSIC_SESSION
        assert member.member_epoch == generation and member.assigned_partitions == mk((foo, parts))
        assert member.subscribed_topic_names == {"foo"}
    # the newcomer waits for a partition a classic member still holds
    assert group.members["c1"].state is MemberState.UNRELEASED_PARTITIONS
    assert h.manager.timeouts(G, m1)["session"] == h.clock.milliseconds() + CLASSIC_SESSION


def test_upgrade_answers_parked_joins_with_rebalance_in_progress(h):
    """A classic group in the middle of a rebalance: the parked JoinGroup answers
    REBALANCE_IN_PROGRESS and the member rejoins the consumer group."""
    _generation, (m1, _m2) = stable_classic_group(h)
    parked = join(h, m1, topics=("foo", "bar"))  # new metadata: a rebalance, m1 parked
    assert parked == [] and h.classic.groups[G].state is PREPARING_REBALANCE
    h.join("c1", group_id=G)
    assert [r.error for r in parked] == [E.rebalance_in_progress]
    (again,) = join(h, m1)
    assert again.error is E.none and again.member_id == m1


def test_consumer_group_heartbeat_with_classic_group_of_another_protocol_type(h):
    """Item 23: a classic group that is not a consumer group ("connect") is not upgraded."""
    h.create_topic("foo", 1)
    join(h, protocol_type="connect", protocols=[("p", b"x")])
    r = h.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (E.group_id_not_found, f"Group {G} is not a consumer group.")


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_upgrade_refused_by_the_migration_policy(tmp_path, policy):
    h = Harness(tmp_path, ConsumerGroupConfig(migration_policy=policy))
    stable_classic_group(h)
    r = h.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"])
    assert (r.error, r.error_message) == (E.group_id_not_found, f"Group {G} is not a consumer group.")
    assert h.classic.classic_group(G) is not None


def test_upgrade_refused_when_an_assignment_carries_a_custom_assignors_user_data(h):
    """Kafka's ConsumerGroup.fromClassicGroup: user data in a member's assignment would be
    lost in a consumer group, so the upgrade is refused (GROUP_ID_NOT_FOUND) and the
    classic group stays as it was."""
    stable_classic_group(h, user_data=b"sticky-state")
    r = h.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"])
    assert r.error is E.group_id_not_found
    assert "an unsupported custom assignor is in use" in r.error_message
    classic = h.classic.classic_group(G)
    assert classic is not None and classic.state is STABLE and G not in h.manager.groups


def test_upgrade_accepts_empty_user_data(h):
    """Empty (not null) user data, as aiokafka writes it, loses nothing: upgraded."""
    stable_classic_group(h, user_data=b"")
    assert h.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"]).error is E.none
    assert h.classic.classic_group(G) is None and len(h.group(G).members) == 3


def test_the_rack_of_a_classic_members_subscription(h):
    """Kafka's fromClassicGroup and classic JoinGroup: a v3 subscription's rack becomes
    the member's rack id in the consumer group, and a later JoinGroup naming another
    rack updates it (one naming none keeps it)."""
    h.create_topic("foo", 2)
    (joined,) = join(h, protocols=[("range", subscription(3, rack="rack-a"))])
    m1 = joined.member_id
    sync(h, m1, joined.generation_id, assignments={m1: encode_assignment([("foo", 0), ("foo", 1)])})
    h.join("c1", group_id=G)
    assert h.member(m1, G).rack_id == "rack-a"
    for rack, kept in (("rack-b", "rack-b"), (None, "rack-b")):
        (again,) = join(h, m1, protocols=[("range", subscription(3, rack=rack))])
        assert again.error is E.none and h.member(m1, G).rack_id == kept


def test_upgrade_refused_when_the_group_exceeds_the_consumer_group_max_size(tmp_path):
    h = Harness(tmp_path, ConsumerGroupConfig(max_size=1))
    stable_classic_group(h)
    assert h.heartbeat(G, "c1", 0, subscribed_topic_names=["foo"]).error is E.group_id_not_found


# ----------------------------------------------------- classic members in a consumer group
def test_classic_members_rejoin_and_reconcile_through_join_and_sync(h):
    """Item 26: a classic member behind the group epoch is told to rejoin
    (REBALANCE_IN_PROGRESS, with a join timeout); its JoinGroup answers at once with its
    new epoch as the generation and no leader; its SyncGroup gives its partitions; the
    consumer-protocol member then gets the partition released for it."""
    generation, (m1, m2), _ = upgrade(h)
    assert beat(h, m1, generation) is E.rebalance_in_progress
    assert "join" in h.manager.timeouts(G, m1)
    epoch = h.group(G).group_epoch
    for mid in (m1, m2):
        (joined,) = join(h, mid)
        assert (joined.error, joined.generation_id, joined.leader_id, joined.members) == (E.none, epoch, "", [])
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        assert "join" not in h.manager.timeouts(G, mid) and "sync" in h.manager.timeouts(G, mid)
        (synced,) = sync(h, mid, epoch)
        assert synced.error is E.none and "sync" not in h.manager.timeouts(G, mid)
        assert beat(h, mid, epoch) is E.none
    group = h.group(G)
    held = sorted(p for mid in (m1, m2) for _, ps in group.members[mid].assigned_partitions.items() for p in ps)
    assert len(held) == 3
    c1 = h.ack("c1", group_id=G)
    foo = h.topics.get("foo").topic_id
    assert c1.assignment == mk((foo, sorted({0, 1, 2, 3} - set(held))))
    assert all(m.state is MemberState.STABLE for m in h.group(G).members.values())


@pytest.mark.parametrize(("version", "answered"), [(0, 0), (1, 1), (3, 3), (5, 3)])
def test_classic_member_sync_answers_in_its_subscriptions_version(h, version, answered):
    """Kafka's prepareAssignment: the assignment is a ConsumerProtocolAssignment in the
    version of the member's (first protocol's) subscription, a version past 3 as 3."""
    _generation, (m1, _m2), _ = upgrade(h)
    (joined,) = join(h, m1, protocols=[("range", subscription(version))])
    assert joined.error is E.none
    (synced,) = sync(h, m1, joined.generation_id)
    assert synced.error is E.none
    assert struct.unpack(">h", synced.assignment[:2]) == (answered,)
    assert partitions(synced.assignment) == target_by_name(h, m1)


def test_classic_member_sync_and_heartbeat_errors(h):
    """Item 26: UNKNOWN_MEMBER_ID (unknown, or a consumer-protocol member),
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, and
    REBALANCE_IN_PROGRESS on SyncGroup when the group moved on."""
    generation, (m1, _m2), _ = upgrade(h)
    assert beat(h, "ghost", generation) is E.unknown_member_id
    assert beat(h, "c1", h.member("c1", G).member_epoch) is E.unknown_member_id
    assert beat(h, m1, generation + 5) is E.illegal_generation
    assert [r.error for r in sync(h, "ghost", generation)] == [E.unknown_member_id]
    assert [r.error for r in sync(h, m1, generation + 5)] == [E.illegal_generation]
    assert [r.error for r in sync(h, m1, generation, protocol_name="roundrobin")] == [E.inconsistent_group_protocol]
    assert [r.error for r in sync(h, m1, generation)] == [E.rebalance_in_progress]


def test_static_classic_member_is_fenced_by_instance_id(h):
    m1, generation = static_classic_member_upgraded(h)
    assert beat(h, "other", generation, "i1") is E.fenced_instance_id
    assert beat(h, m1, generation, "i2") is E.unknown_member_id
    # rejoining with no member id takes the instance id over (the classic protocol fences the old id)
    (joined,) = join(h, "", "i1")
    assert joined.error is E.none and joined.member_id != m1
    assert h.group(G).static_member("i1").member_id == joined.member_id and m1 not in h.group(G).members


def test_classic_member_join_to_consumer_group_errors(tmp_path):
    """Item 25: MEMBER_ID_REQUIRED first (v4+), a protocol type or protocols the classic
    members do not share, or a full group, are refused."""
    h = Harness(tmp_path, ConsumerGroupConfig(max_size=4))
    _generation, ids, _ = upgrade(h)
    (required,) = join(h, require_known=True)
    assert required.error is E.member_id_required and required.member_id
    assert required.member_id not in h.group(G).members
    assert [r.error for r in join(h, protocol_type="connect")] == [E.inconsistent_group_protocol]
    roundrobin = [("roundrobin", encode_subscription(["foo"]))]
    assert [r.error for r in join(h, protocols=roundrobin)] == [E.inconsistent_group_protocol]
    assert [r.error for r in join(h, required.member_id)] == [E.none]  # the fourth member
    assert [r.error for r in join(h)] == [E.group_max_size_reached]
    assert [r.error for r in join(h, ids[0])] == [E.none]  # a member already in it is not refused


def test_classic_member_join_to_consumer_group_with_disabled_migration_policy(tmp_path):
    """Item 25: with the policy disabled a JoinGroup to a consumer group with members is
    INCONSISTENT_GROUP_PROTOCOL."""
    h = Harness(tmp_path, ConsumerGroupConfig(migration_policy="disabled"))
    h.create_topic("foo", 2)
    h.join("c1", group_id=G)
    assert [r.error for r in join(h)] == [E.inconsistent_group_protocol]


def test_join_group_to_an_empty_consumer_group_converts_it_to_classic(h):
    """An empty consumer group is replaced by a classic group on a JoinGroup (its
    records tombstoned, its offsets kept)."""
    h.create_topic("foo", 2)
    h.join("c1", group_id=G)
    h.heartbeat(G, "c1", -1)
    assert not h.group(G).members
    (joined,) = join(h)
    assert joined.error is E.none
    assert G not in h.manager.groups and h.classic.classic_group(G) is not None


def test_classic_member_session_timeout_fences_it(h):
    """A classic member's own session timeout (JoinGroup's) fences it."""
    _generation, (m1, m2), _ = upgrade(h)
    epoch = rejoin(h, m2)
    for _ in range(6):  # c1 and m2 heartbeat, m1 does not
        h.advance(CLASSIC_SESSION // 6 - 100)
        h.beat("c1", group_id=G)
        if beat(h, m2, epoch) is E.rebalance_in_progress:
            epoch = rejoin(h, m2)
        assert (m1 in h.group(G).members) == (h.clock.milliseconds() < T0 + CLASSIC_SESSION)
    h.advance(1_000)
    assert m1 not in h.group(G).members and {m2, "c1"} <= set(h.group(G).members)


def test_classic_member_join_timeout_fences_it(h):
    """A classic member told to rejoin (REBALANCE_IN_PROGRESS) that does not is fenced
    after its rebalance timeout."""
    generation, (m1, m2), _ = upgrade(h)
    assert beat(h, m1, generation) is E.rebalance_in_progress  # arms m1's join timeout
    rejoin(h, m2)
    h.advance(REBALANCE - 1_000)
    assert m1 in h.group(G).members
    h.advance(2_000)
    assert m1 not in h.group(G).members and m2 in h.group(G).members


def test_classic_member_leave_group(h):
    """LeaveGroup of a classic member fences it (epoch bump); a consumer-protocol member
    is UNKNOWN_MEMBER_ID there."""
    _generation, (m1, _m2), _ = upgrade(h)
    epoch = h.group(G).group_epoch
    error, members = h.classic.handle_leave_group(G, [(m1, None, "bye"), ("c1", None, None)])
    h.loop.run_pending()
    assert error is E.none and [e for _, _, e in members] == [E.none, E.unknown_member_id]
    assert m1 not in h.group(G).members and h.group(G).group_epoch == epoch + 1


# ------------------------------------------------------------------------------ the downgrade
def test_last_consumer_protocol_member_leaving_consumer_group(h):
    """Item 24: the group's records are tombstoned and the classic coordinator takes a
    classic group at the group epoch with the classic members and their assignments,
    which rebalances; the members rejoin with their ids."""
    _generation, (m1, m2), _ = upgrade(h)
    epoch = h.group(G).group_epoch
    target = target_by_name(h, m1)
    r = h.heartbeat(G, "c1", -1)
    assert (r.error, r.member_epoch) == (E.none, -1)
    assert G not in h.manager.groups and not h.manager.timeouts(G, m1)
    classic = h.classic.classic_group(G)
    assert classic is not None and classic.state is PREPARING_REBALANCE
    assert set(classic.members) == {m1, m2} and classic.generation_id == epoch
    assert partitions(classic.members[m1].assignment) == target  # Kafka's: the target
    assert beat(h, m1, epoch) is E.rebalance_in_progress
    answers = [join(h, m1), join(h, m2)]
    results = [a[0] for a in answers]
    assert [r.error for r in results] == [E.none, E.none]
    assert {r.generation_id for r in results} == {epoch + 1}


def test_the_downgrade_is_one_write(h):
    """Kafka's convertToClassicGroup writes one batch: the consumer group's tombstones and
    the classic group's record, its members' assignments in the version of their
    subscriptions. A restart replays it into the classic group; nothing else stores it."""
    _generation, (m1, m2), _ = upgrade(h)
    for m, version in ((m1, 3), (m2, 1)):  # the classic members rejoin with later subscriptions
        (joined,) = join(h, m, protocols=[("range", subscription(version))])
        sync(h, m, joined.generation_id)
    epoch = h.group(G).group_epoch
    targets = {m: target_by_name(h, m) for m in (m1, m2)}
    written_from = h.store.log().log_end_offset
    h.heartbeat(G, "c1", -1)
    *tombstones, classic_record = h.last_batch
    assert tombstones and all(r.value is None and r.type is not RecordType.CLASSIC_GROUP_METADATA for r in tombstones)
    assert {r.key for r in tombstones} == {m1, m2, "c1", ""}
    assert classic_record.type is RecordType.CLASSIC_GROUP_METADATA and classic_record.group_id == G
    stored = decode_group(classic_record.value.data)
    assert stored["generation"] == epoch and stored["protocol"] == "range"
    members = {m["member_id"]: m for m in stored["members"]}
    assert {m: partitions(members[m]["assignment"]) for m in members} == targets
    assert {m: members[m]["assignment"][:2] for m in members} == {m1: b"\x00\x03", m2: b"\x00\x01"}
    # the classic group's record is in that batch only: the classic coordinator stored none
    batches = [b for b in replay_batches(h.store.log()) if b.base_offset >= written_from]
    assert [len(b.records) for b in batches] == [len(tombstones) + 1]
    h2 = h.restart()
    assert G not in h2.manager.groups
    classic = h2.classic.classic_group(G)
    assert classic is not None and classic.generation_id == epoch
    assert {m: partitions(classic.members[m].assignment) for m in (m1, m2)} == targets


def test_a_failed_downgrade_write_leaves_the_consumer_group(h):
    """The downgrade's one batch is not written: nothing changes, the leave answers the
    write's error, and a restart finds the consumer group (never neither group)."""
    _generation, (m1, m2), _ = upgrade(h)
    write = h.manager._append

    def failing(records):
        raise AppendError("NOT_ENOUGH_REPLICAS", E.not_enough_replicas)

    h.manager._append = failing
    r = h.heartbeat(G, "c1", -1)
    assert r.error is E.coordinator_not_available
    assert set(h.group(G).members) == {m1, m2, "c1"} and h.classic.classic_group(G) is None
    h.manager._append = write
    h2 = h.restart()
    assert set(h2.group(G).members) == {m1, m2, "c1"} and h2.classic.classic_group(G) is None


def test_last_consumer_protocol_member_session_timeout_in_consumer_group(h):
    """Item 24: the downgrade also follows a session timeout."""
    _generation, (m1, m2), _ = upgrade(h)
    epochs = {m: rejoin(h, m) for m in (m1, m2)}
    for _ in range(10):  # the classic members heartbeat, c1 does not
        h.advance(5_000)
        if G in h.manager.groups:
            for m in (m1, m2):
                beat(h, m, epochs[m])
    assert G not in h.manager.groups
    assert set(h.classic.classic_group(G).members) == {m1, m2}


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_downgrade_refused_by_the_migration_policy(tmp_path, policy):
    """Upgrade-only (or disabled, once upgraded under another policy): the last
    consumer-protocol member leaves an ordinary epoch bump."""
    h = Harness(tmp_path, ConsumerGroupConfig(migration_policy="upgrade"))
    _generation, (m1, m2), _ = upgrade(h)
    h.manager.config = ConsumerGroupConfig(migration_policy=policy)
    h.heartbeat(G, "c1", -1)
    assert set(h.group(G).members) == {m1, m2} and h.classic.classic_group(G) is None


def test_downgrade_refused_when_larger_than_the_classic_max_size(tmp_path):
    h = Harness(tmp_path, ConsumerGroupConfig(classic_max_size=1))
    upgrade(h)
    h.heartbeat(G, "c1", -1)
    assert G in h.manager.groups and h.classic.classic_group(G) is None


# ------------------------------------------------------------------------------------ restarts
def test_upgraded_group_resumes_after_a_restart(h):
    generation, (m1, m2), _ = upgrade(h)
    h2 = h.restart()
    group = h2.group(G)
    assert set(group.members) == {m1, m2, "c1"} and group.members[m1].use_classic_protocol
    assert h2.classic.classic_group(G) is None
    assert h2.manager.timeouts(G, m1)["session"] == h2.clock.milliseconds() + CLASSIC_SESSION
    assert beat(h2, m1, generation) is E.rebalance_in_progress


def test_downgraded_group_resumes_after_a_restart(h):
    _generation, (m1, m2), _ = upgrade(h)
    target = target_by_name(h, m2)
    h.heartbeat(G, "c1", -1)
    h2 = h.restart()
    assert G not in h2.manager.groups
    classic = h2.classic.classic_group(G)
    assert classic is not None and set(classic.members) == {m1, m2}
    assert partitions(classic.members[m2].assignment) == target


def test_classic_static_member_removed_by_its_instance_id(h):
    """LeaveGroup by instance id alone (an admin's removal) fences a static classic member;
    with another member id it is FENCED_INSTANCE_ID, an unknown instance UNKNOWN_MEMBER_ID."""
    static_classic_member_upgraded(h)
    error, members = h.classic.handle_leave_group(G, [("other", "i1", None), ("", "i9", None), ("", "i1", None)])
    h.loop.run_pending()
    assert error is E.none
    assert [e for _, _, e in members] == [E.fenced_instance_id, E.unknown_member_id, E.none]
    assert set(h.group(G).members) == {"c1"}
