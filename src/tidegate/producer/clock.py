"""The producer's injectable clock (defined in :mod:`tidegate.client.clock`, which the
network client shares)."""

from tidegate.client.clock import SYSTEM_CLOCK, Clock, MockClock

__all__ = ["SYSTEM_CLOCK", "Clock", "MockClock"]
