"""What a modern group's members subscribe to, member by member and as a group.

* :func:`subscribed_topic_names` / :func:`subscribed_topic_ids` -- one member's topics:
  its names plus what its regex resolved to (an unresolved regex matches nothing yet);
  the target assignment and reconciliation both use these, as Kafka's
  ``TargetAssignmentBuilder`` and ``CurrentAssignmentBuilder`` do.
* :func:`subscription_counts` and :func:`subscription_type` -- the group's
  HOMOGENEOUS / HETEROGENEOUS type (reference 1.10; Kafka's
  ``ConsumerGroup.subscriptionType``): homogeneous if no member uses a regex and every
  subscribed name is subscribed by every member, or if every member uses one and the
  same regex and nothing else. Names count whether or not the topic exists, as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from tidegate.coordinator.group.assignor.api import (
    HETEROGENEOUS,
    HOMOGENEOUS,
    SubscriptionType,
)
from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.coordinator.group.modern.topics import MetadataImage, topic_ids


class SubscribedMember(Protocol):
    """What a member subscribes to (a consumer group member; a share group member has
    no regex and answers None)."""

    @property
    def subscribed_topic_names(self) -> frozenset[str]: ...

    @property
    def subscribed_topic_regex(self) -> str | None: ...


@dataclass(slots=True)
class SubscriptionCount:
    """How a topic name is subscribed (Kafka's ``SubscriptionCount``)."""

    #: members that name it
    by_name_count: int = 0
    #: distinct resolved regexes that match it
    by_regex_count: int = 0


def subscribed_topic_names(
    member: SubscribedMember,
    resolved_regular_expressions: Mapping[str, ResolvedRegularExpression],
) -> Collection[str]:
    """The member's subscribed names plus the topics its regex resolved to."""
    names = member.subscribed_topic_names
    regex = member.subscribed_topic_regex
    if regex:
        resolved = resolved_regular_expressions.get(regex)
        if resolved is not None and resolved.topics:
            return resolved.topics if not names else names | resolved.topics
    return names


def subscribed_topic_ids(
    member: SubscribedMember,
    resolved_regular_expressions: Mapping[str, ResolvedRegularExpression],
    image: MetadataImage,
) -> frozenset[uuid.UUID]:
    """The ids of the existing topics the member subscribes to, by name or by regex."""
    return topic_ids(subscribed_topic_names(member, resolved_regular_expressions), image)


def subscription_counts(
    members: Iterable[SubscribedMember],
    resolved_regular_expressions: Mapping[str, ResolvedRegularExpression],
) -> tuple[dict[str, int], dict[str, SubscriptionCount]]:
    """(regex -> members using it, topic name -> :class:`SubscriptionCount`), computed
    from scratch (the coordinator may keep them up to date member by member instead)."""
    regexes: dict[str, int] = {}
    topics: dict[str, SubscriptionCount] = {}
    for member in members:
        for name in member.subscribed_topic_names:
            topics.setdefault(name, SubscriptionCount()).by_name_count += 1
        if member.subscribed_topic_regex:
            regexes[member.subscribed_topic_regex] = (
                regexes.get(member.subscribed_topic_regex, 0) + 1
            )
    for regex in regexes:
        resolved = resolved_regular_expressions.get(regex)
        if resolved is not None:
            for name in resolved.topics:
                topics.setdefault(name, SubscriptionCount()).by_regex_count += 1
    return regexes, topics


def subscription_type(
    subscribed_regular_expressions: Mapping[str, int],
    subscribed_topic_names: Mapping[str, SubscriptionCount],
    number_of_members: int,
) -> SubscriptionType:
    """HOMOGENEOUS or HETEROGENEOUS from the group's subscription counts."""
    if not subscribed_regular_expressions:
        if all(c.by_name_count == number_of_members for c in subscribed_topic_names.values()):
            return HOMOGENEOUS
        return HETEROGENEOUS
    only_regex = len(subscribed_regular_expressions) == 1
    everyone = next(iter(subscribed_regular_expressions.values())) == number_of_members
    if only_regex and everyone:
        by_regex_only = (
            c.by_regex_count == 1 and c.by_name_count == 0 for c in subscribed_topic_names.values()
        )
        return HOMOGENEOUS if all(by_regex_only) else HETEROGENEOUS
    return HETEROGENEOUS
