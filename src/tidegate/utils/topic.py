"""Topic names: Kafka's ``common.internals.Topic`` (the internal topics, name validation).

The broker's metadata and handlers, the coordinators that own the internal topics and
anything else that needs a topic name's rules take them from here.
"""

from __future__ import annotations

import re

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "INTERNAL_TOPICS",
    "MAX_TOPIC_NAME_LENGTH",
    "SHARE_GROUP_STATE_TOPIC_NAME",
    "TRANSACTION_STATE_TOPIC_NAME",
    "InvalidTopicError",
    "is_internal_topic",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
#: The group coordinator's internal topic (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``).
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
#: The transaction coordinator's internal topic (Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``).
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
#: The share coordinator's internal topic (KIP-932; Kafka's ``Topic.SHARE_GROUP_STATE_TOPIC_NAME``).
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
#: Topics clients may read but never write, create, delete or grow (Kafka's ``Topic.INTERNAL_TOPICS``).
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME})


class InvalidTopicError(ValueError):
    """A topic name Kafka would reject (INVALID_TOPIC_EXCEPTION)."""


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate rules."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def is_internal_topic(name: str | None) -> bool:
    """Kafka's ``Topic.isInternal``."""
    return name in INTERNAL_TOPICS
