"""Why a connection is not being read: Kafka's channel mute reasons, kept distinct.

A connection is read only while no reason holds. Each mechanism adds and removes
only its own reason, so relieving memory pressure never unmutes a connection
that still has a request in flight or a throttle to serve.
"""

from __future__ import annotations

import enum


class MuteReason(enum.Flag):
    NONE = 0
    IN_FLIGHT = enum.auto()  # one request at a time per connection, as Kafka does
    SEND_BUFFER = enum.auto()  # the peer is not reading our responses
    MEMORY = enum.auto()  # KIP-72: the memory pool had no room for the next request
    THROTTLE = enum.auto()  # KIP-124/219: serving a quota throttle
    SHUTDOWN = enum.auto()
    SENDING = enum.auto()  # a response with file regions is being sent (one at a time)  # the broker is draining before it stops


class ChannelMuteState:
    __slots__ = ("reasons",)

    def __init__(self) -> None:
        self.reasons = MuteReason.NONE

    @property
    def muted(self) -> bool:
        return bool(self.reasons)

    def mute(self, reason: MuteReason) -> bool:
        """Add a reason; True if the channel went from readable to muted."""
        was = bool(self.reasons)
        self.reasons |= reason
        return not was

    def unmute(self, reason: MuteReason) -> bool:
        """Drop a reason; True if no reason is left and the channel becomes readable."""
        was = bool(self.reasons)
        self.reasons &= ~reason
        return was and not self.reasons

    def has(self, reason: MuteReason) -> bool:
        return bool(self.reasons & reason)
