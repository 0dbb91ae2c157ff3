"""A modern group member's reconciliation state (Kafka's ``modern.MemberState``); the
values are the byte persisted in the current-assignment record."""

from __future__ import annotations

import enum


class MemberState(enum.IntEnum):
    #: reconciled with the target assignment
    STABLE = 0
    #: must revoke partitions before it can move to the next epoch
    UNREVOKED_PARTITIONS = 1
    #: at the target epoch, waiting for partitions their previous owners still hold
    UNRELEASED_PARTITIONS = 2
    #: a state written by a newer version (the member is fenced and rejoins)
    UNKNOWN = 127

    @classmethod
    def _missing_(cls, value: object) -> MemberState:
        return cls.UNKNOWN

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        """The state a persisted byte stands for; an unknown byte is :attr:`UNKNOWN`."""
        return cls(value)
