"""Reconciliation (CurrentAssignmentBuilder): every transition Kafka 4.2's
CurrentAssignmentBuilderTest pins (reference 1.6, section 4 item 31)."""

from __future__ import annotations

import uuid

import pytest

from tidegate.coordinator.group.modern.consumer.consumer_group_member import ConsumerGroupMember
from tidegate.coordinator.group.modern.consumer.current_assignment_builder import (
    CurrentAssignmentBuilder,
    FencedMemberEpochError,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.member_state import MemberState
from tidegate.coordinator.group.modern.topics import TopicsImage

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN

T1 = uuid.UUID("11111111-1111-1111-1111-111111111111")
T2 = uuid.UUID("22222222-2222-2222-2222-222222222222")
IMAGE = TopicsImage.of((T1, "topic1", 10), (T2, "topic2", 10))


def mk(*topics: tuple[uuid.UUID, tuple[int, ...]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(p) for t, p in topics}


def t1(*p: int) -> tuple[uuid.UUID, tuple[int, ...]]:
    return (T1, p)


def t2(*p: int) -> tuple[uuid.UUID, tuple[int, ...]]:
    return (T2, p)


def member(state, epoch, previous, assigned, pending=None, names=("topic1", "topic2"), regex=""):
    return ConsumerGroupMember(
        "member",
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        subscribed_topic_names=frozenset(names),
        subscribed_topic_regex=regex,
        assigned_partitions=assigned,
        partitions_pending_revocation=pending or {},
    )


def reconcile(m, target_epoch, target, epoch_of=lambda t, p: -1, owned=None, **kw):
    return CurrentAssignmentBuilder(
        m,
        target_assignment_epoch=target_epoch,
        target_assignment=target,
        current_partition_epoch=epoch_of,
        owned_topic_partitions=owned,
        metadata_image=kw.pop("image", IMAGE),
        **kw,
    ).build()


def owned(*topics):
    return [(t, list(p)) for t, p in topics]


def test_stable_to_stable():
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))
    new = reconcile(m, 11, mk(t1(1, 2, 3), t2(4, 5, 6)), lambda t, p: 10)
    assert new == member(STABLE, 11, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))


def test_stable_to_stable_with_new_partitions():
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))
    new = reconcile(m, 11, mk(t1(1, 2, 3, 4), t2(4, 5, 6, 7)))
    assert new == member(STABLE, 11, 10, mk(t1(1, 2, 3, 4), t2(4, 5, 6, 7)))


def test_stable_to_unrevoked_partitions():
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))
    new = reconcile(m, 11, mk(t1(2, 3, 4), t2(5, 6, 7)))
    # The epoch stays while partitions are revoked; nothing is added yet.
    assert new == member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(1), t2(4)))


def test_stable_to_unreleased_partitions():
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))
    new = reconcile(m, 11, mk(t1(1, 2, 3, 4), t2(4, 5, 6, 7)), lambda t, p: 10)
    assert new == member(UNRELEASED, 11, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))


def test_stable_to_unreleased_when_revoked_partitions_are_no_longer_owned():
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)))
    new = reconcile(
        m, 11, mk(t1(1, 2, 3), t2(4, 5, 7)), lambda t, p: 10 if t == T2 else -1, owned=[]
    )
    assert new == member(UNRELEASED, 11, 10, mk(t1(1, 2, 3), t2(4, 5)))


def test_unrevoked_partitions_to_stable():
    m = member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(1), t2(4)))
    new = reconcile(m, 11, mk(t1(2, 3), t2(5, 6)), owned=owned(t1(2, 3), t2(5, 6)))
    assert new == member(STABLE, 11, 10, mk(t1(2, 3), t2(5, 6)))


@pytest.mark.parametrize(
    "reported",
    [
        None,  # not reported: still owns everything
        owned(t1(1, 2, 3), t2(5, 6)),
        owned(t1(2, 3), t2(4, 5, 6)),
    ],
)
def test_remains_in_unrevoked_partitions(reported):
    m = member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(1), t2(4)))
    assert reconcile(m, 12, mk(t1(3), t2(6)), owned=reported) is m


@pytest.mark.parametrize("target_epoch", [12, 10])
def test_unrevoked_partitions_to_unrevoked_partitions(target_epoch):
    # KAFKA-19974 (4.2): leaving UNREVOKED for UNREVOKED keeps the epoch, so a
    # partition is owned by one member at any epoch.
    m = member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(1), t2(4)))
    new = reconcile(m, target_epoch, mk(t1(3), t2(6)), owned=owned(t1(2, 3), t2(5, 6)))
    assert new == member(UNREVOKED, 10, 10, mk(t1(3), t2(6)), mk(t1(2), t2(5)))


def test_unrevoked_partitions_to_unreleased_partitions():
    m = member(UNREVOKED, 11, 10, mk(t1(2, 3), t2(5, 6)))
    new = reconcile(
        m, 11, mk(t1(2, 3, 4), t2(5, 6, 7)), lambda t, p: 10, owned=owned(t1(2, 3), t2(5, 6))
    )
    assert new == member(UNRELEASED, 11, 11, mk(t1(2, 3), t2(5, 6)))


def test_unrevoked_to_stable_with_a_returned_partition_pending_revocation():
    # KAFKA-19449: partition 4 is pending revocation by this very member and back in
    # its target; it is not "held by someone else".
    m = member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(4)))
    held = {(T1, 2), (T1, 3), (T1, 4), (T2, 5), (T2, 6)}
    new = reconcile(
        m,
        12,
        mk(t1(2, 3, 4), t2(5, 6, 7)),
        lambda t, p: 10 if (t, p) in held else -1,
        owned=owned(t1(2, 3), t2(5, 6)),
    )
    assert new == member(STABLE, 12, 10, mk(t1(2, 3, 4), t2(5, 6, 7)))


def test_unreleased_partitions_to_stable():
    m = member(UNRELEASED, 11, 11, mk(t1(2, 3), t2(5, 6)))
    new = reconcile(m, 12, mk(t1(2, 3), t2(5, 6)), lambda t, p: 10)
    assert new == member(STABLE, 12, 11, mk(t1(2, 3), t2(5, 6)))


def test_unreleased_partitions_to_stable_with_new_partitions():
    m = member(UNRELEASED, 11, 11, mk(t1(2, 3), t2(5, 6)))
    new = reconcile(m, 11, mk(t1(2, 3, 4), t2(5, 6, 7)))
    assert new == member(STABLE, 11, 11, mk(t1(2, 3, 4), t2(5, 6, 7)))


def test_unreleased_partitions_to_unreleased_partitions():
    m = member(UNRELEASED, 11, 11, mk(t1(2, 3), t2(5, 6)))
    assert reconcile(m, 11, mk(t1(2, 3, 4), t2(5, 6, 7)), lambda t, p: 10) == m


def test_unreleased_partitions_to_unrevoked_partitions():
    m = member(UNRELEASED, 11, 11, mk(t1(2, 3), t2(5, 6)))
    new = reconcile(m, 12, mk(t1(3), t2(6)), lambda t, p: 10)
    assert new == member(UNREVOKED, 11, 11, mk(t1(3), t2(6)), mk(t1(2), t2(5)))


def test_unknown_state_fences_then_accepts_a_member_without_partitions():
    m = member(UNKNOWN, 11, 11, mk(t1(3), t2(6)), mk(t1(2), t2(5)))
    target = mk(t1(3), t2(6))
    with pytest.raises(FencedMemberEpochError) as e:
        reconcile(m, 12, target, lambda t, p: 10)
    assert e.value.code == 110
    with pytest.raises(FencedMemberEpochError):
        reconcile(m, 12, target, lambda t, p: 10, owned=owned(t1(3)))
    new = reconcile(m, 12, target, lambda t, p: 11, owned=[])
    assert new == member(STABLE, 12, 11, mk(t1(3), t2(6)))


@pytest.mark.parametrize(
    ("target_epoch", "changed"),
    [(11, False), (11, True), (10, True)],  # a new target always honours the subscription
)
def test_stable_to_stable_drops_topics_no_longer_subscribed(target_epoch, changed):
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)), names=("topic2",))
    new = reconcile(
        m,
        target_epoch,
        mk(t1(1, 2, 3), t2(4, 5, 6)),
        owned=owned(t2(4, 5, 6)),  # topic1's partitions are already given up
        has_subscription_changed=changed,
    )
    assert new == member(STABLE, target_epoch, 10, mk(t2(4, 5, 6)), names=("topic2",))


@pytest.mark.parametrize(("target_epoch", "changed"), [(11, False), (11, True), (10, True)])
def test_stable_to_unrevoked_for_topics_no_longer_subscribed(target_epoch, changed):
    m = member(STABLE, 10, 10, mk(t1(1, 2, 3), t2(4, 5, 6)), names=("topic2",))
    new = reconcile(
        m,
        target_epoch,
        mk(t1(1, 2, 3), t2(4, 5, 6)),
        owned=owned(t1(1, 2, 3), t2(4, 5, 6)),
        has_subscription_changed=changed,
    )
    expected = member(UNREVOKED, 10, 10, mk(t2(4, 5, 6)), mk(t1(1, 2, 3)), names=("topic2",))
    assert new == expected


def test_remains_in_unrevoked_and_revokes_topics_no_longer_subscribed():
    m = member(UNREVOKED, 10, 10, mk(t1(2, 3), t2(5, 6)), mk(t1(1), t2(4)), names=("topic2",))
    new = reconcile(
        m,
        12,
        mk(t1(1, 3, 4), t2(6, 7)),
        owned=owned(t1(1, 2, 3), t2(4, 5, 6)),
        has_subscription_changed=True,
    )
    expected = member(UNREVOKED, 10, 10, mk(t2(5, 6)), mk(t1(1, 2, 3), t2(4)), names=("topic2",))
    assert new == expected


FOO = uuid.UUID("33333333-3333-3333-3333-333333333333")
BAR = uuid.UUID("44444444-4444-4444-4444-444444444444")
FOO_BAR = TopicsImage.of((FOO, "foo", 10), (BAR, "bar", 10))


def _regex_member(names):
    return member(STABLE, 10, 10, mk((FOO, (1, 2, 3)), (BAR, (4, 5, 6))), names=names, regex="bar*")


def _reconcile_regex(m, resolved):
    return reconcile(
        m,
        10,
        mk((FOO, (1, 2, 3)), (BAR, (4, 5, 6))),
        owned=owned((FOO, (1, 2, 3)), (BAR, (4, 5, 6))),
        has_subscription_changed=True,
        resolved_regular_expressions=resolved,
        image=FOO_BAR,
    )


def test_subscribed_topic_name_and_unresolved_regular_expression():
    # An unresolved regex matches nothing yet: bar is revoked, foo (by name) stays.
    new = _reconcile_regex(_regex_member(("foo",)), {})
    expected = member(
        UNREVOKED, 10, 10, mk((FOO, (1, 2, 3))), mk((BAR, (4, 5, 6))), names=("foo",), regex="bar*"
    )
    assert new == expected


def test_unresolved_regular_expression_alone_revokes_everything():
    new = _reconcile_regex(_regex_member(()), {})
    expected = member(
        UNREVOKED, 10, 10, {}, mk((FOO, (1, 2, 3)), (BAR, (4, 5, 6))), names=(), regex="bar*"
    )
    assert new == expected


def test_subscribed_topic_name_and_resolved_regular_expression():
    m = _regex_member(("foo",))
    resolved = {"bar*": ResolvedRegularExpression(frozenset({"bar"}), 12345, 0)}
    assert _reconcile_regex(m, resolved) is m


def test_a_new_target_always_moves_the_previous_epoch():
    m = member(STABLE, 10, 9, mk(t1(1)))
    new = reconcile(m, 11, mk(t1(1)))
    assert (new.member_epoch, new.previous_member_epoch, new.state) == (11, 10, STABLE)
    # A reconciled member with an unchanged subscription is returned as it is.
    assert reconcile(new, 11, mk(t1(1))) is new


def test_a_deleted_topic_is_revoked():
    # topic2 is gone from the metadata: its partitions leave the assignment.
    m = member(STABLE, 10, 10, mk(t1(1), t2(2)))
    image = TopicsImage.of((T1, "topic1", 10))
    new = reconcile(m, 11, mk(t1(1), t2(2)), owned=owned(t1(1), t2(2)), image=image)
    assert new == member(UNREVOKED, 10, 10, mk(t1(1)), mk(t2(2)))
