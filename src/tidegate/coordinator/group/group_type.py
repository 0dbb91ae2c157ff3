"""Which kind of group a group id names (Kafka's ``Group.GroupType``), and how one group
coordinator asks another about the ids it does not own.

One group id names at most one group: a classic group, a KIP-848 consumer group or a
KIP-932 share group. Each coordinator answers :meth:`group_type` for its own groups and
is handed a :data:`GroupTypeLookup` for the others (the broker composes them), so a
request of one protocol on a group of another is answered as Kafka does: a share group
heartbeat, describe or admin request on a consumer or classic group, and a consumer group
heartbeat on a share group, are GROUP_ID_NOT_FOUND; a JoinGroup on a share group is
INCONSISTENT_GROUP_PROTOCOL.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class GroupType(enum.Enum):
    """A group's type, as ListGroups v5 shows it (``GroupType``, ``TypesFilter``)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"
    STREAMS = "streams"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: str) -> GroupType | None:
        """The type of a TypesFilter entry, case-insensitively; None if unknown (an
        unknown type matches no group)."""
        try:
            return cls(name.strip().lower())
        except ValueError:
            return None


#: group id -> the type of the group with that id, None if there is none
GroupTypeLookup = Callable[[str], "GroupType | None"]


def no_other_groups(group_id: str) -> GroupType | None:
    """A :data:`GroupTypeLookup` that knows no group (a coordinator on its own)."""
    return None
