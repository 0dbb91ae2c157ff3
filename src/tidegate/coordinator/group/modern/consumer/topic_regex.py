"""Regular expression subscriptions with Kafka's semantics (KIP-848; reference 1.11).

Kafka compiles a member's ``SubscribedTopicRegex`` with RE2/J and resolves it against
every topic name with a **whole-name** match: ``^topic`` does not match ``topic-1``,
``^topic.*`` does. RE2 has no look-around and no back-references, and a pattern it refuses
is answered with INVALID_REGULAR_EXPRESSION. Python's :mod:`re` is a different engine (it
accepts both, and matches differently in corner cases), so this uses Google's RE2 through
the ``google-re2`` binding, the engine RE2/J ports.

* :func:`throw_if_regular_expression_is_invalid` -- Kafka's
  ``Utils.throwIfRegularExpressionIsInvalid``;
* :func:`refresh_regular_expressions` -- Kafka's
  ``GroupMetadataManager.refreshRegularExpressions``: every regex of a group against every
  topic name, then the ACL filter (the triggering member's DESCRIBE), each result stamped
  with the metadata version and time it was made at.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import re2  # type: ignore[import-untyped]

from tidegate.coordinator.group.modern.consumer.resolved_regular_expression import (
    ResolvedRegularExpression,
)
from tidegate.errors import CodedError

log = logging.getLogger(__name__)

#: The topics of ``names`` a member may DESCRIBE (the authorizer's filter), or None when
#: there is no authorizer.
TopicFilter = Callable[[Collection[str]], Collection[str]]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr


class InvalidRegularExpressionError(CodedError):
    """INVALID_REGULAR_EXPRESSION (128): RE2 does not compile the pattern."""

    code = 128


@functools.lru_cache(maxsize=1024)
def compile_regex(regex: str) -> Any:
    """The compiled pattern (cached: a group's few regexes are matched on every refresh).
    Raises ``re2.error`` for a pattern RE2 refuses."""
    return re2.compile(regex, options=_OPTIONS)


def throw_if_regular_expression_is_invalid(regex: str) -> None:
    try:
        compile_regex(regex)
    except re2.error as exc:
        description = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
        ) from None


def matches(regex: str, topic: str) -> bool:
    """Whether ``regex`` matches the whole of ``topic``."""
    return compile_regex(regex).fullmatch(topic) is not None


def refresh_regular_expressions(
    group_id: str,
    regexes: Iterable[str],
    topic_names: Iterable[str],
    *,
    version: int,
    timestamp_ms: int,
    topic_filter: TopicFilter | None = None,
) -> Mapping[str, ResolvedRegularExpression]:
    """Resolve every regex against every topic name. A pattern that does not compile
    (it was checked when the member sent it; this cannot happen) resolves to nothing."""
    resolved: dict[str, set[str]] = {}
    compiled = []
    for regex in regexes:
        resolved[regex] = set()
        try:
            compiled.append((regex, compile_regex(regex)))
        except re2.error as exc:
            log.error("[GroupId %s] cannot compile regular expression %r (%s): ignored",
                      group_id, regex, exc)
    for name in topic_names:
        for regex, pattern in compiled:
            if pattern.fullmatch(name) is not None:
                resolved[regex].add(name)
    if topic_filter is not None:
        everything = set().union(*resolved.values()) if resolved else set()
        allowed = set(topic_filter(everything))
        for topics in resolved.values():
            topics &= allowed
    return {
        regex: ResolvedRegularExpression(frozenset(topics), version, timestamp_ms)
        for regex, topics in resolved.items()
    }
