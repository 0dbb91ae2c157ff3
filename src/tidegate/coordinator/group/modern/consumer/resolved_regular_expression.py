"""A subscribed regular expression resolved to topic names (Kafka's
``ResolvedRegularExpression``; the value of the ConsumerGroupRegularExpression record)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResolvedRegularExpression:
    #: the names of the topics the regex matched (whole-name, RE2 semantics)
    topics: frozenset[str]
    #: the metadata version the resolution was made at
    version: int = 0
    #: when the resolution was made (wall clock, ms; from the caller, never read here)
    timestamp_ms: int = 0
