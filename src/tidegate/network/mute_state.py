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
    """A connection's mute reasons, kept as the bits of their values: every request
    mutes and unmutes its connection (IN_FLIGHT), and an ``enum.Flag`` operation is a
    Python call, several per request; ``reasons`` gives them as a :class:`MuteReason`."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits = 0

    @property
    def reasons(self) -> MuteReason:
        return MuteReason(self.bits)

    @property
    def muted(self) -> bool:
        return self.bits != 0

    def mute(self, reason: MuteReason) -> bool:
        """Add a reason; True if the channel went from readable to muted."""
        was = self.bits
        self.bits = was | reason._value_
        return not was

    def unmute(self, reason: MuteReason) -> bool:
        """Drop a reason; True if no reason is left and the channel becomes readable."""
        was = self.bits
        self.bits = now = was & ~reason._value_
        return was != 0 and now == 0

    def has(self, reason: MuteReason) -> bool:
        return (self.bits & reason._value_) != 0
