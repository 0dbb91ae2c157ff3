"""ISO-8601 durations as Java's ``Duration.parse`` takes them (``PnDTnHnMn.nS``): the
``--by-duration`` of the consumer-group tools and ``share.auto.offset.reset``'s
``by_duration:`` (Kafka's ``ShareGroupAutoOffsetResetStrategy``)."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:\.\d+)?)S)?)?", re.IGNORECASE
)


def parse_duration(text: str) -> int:
    """``text`` in milliseconds (an optional leading sign); ValueError if it is not one."""
    m = _DURATION.fullmatch(text)
    if m is None or text.upper().endswith("T") or not any(m.groups()[1:]):
        raise ValueError(f"Error parsing duration '{text}': expected ISO-8601 PnDTnHnMn.nS")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups()[1:])
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return int((-total if m.group(1) == "-" else total) * 1000)
