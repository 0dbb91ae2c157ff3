"""Why a connection's requests are not being processed, or its socket not read:
Kafka's channel mute reasons, kept distinct.

A connection processes its next request only while no reason holds. Each mechanism
adds and removes only its own reason, so relieving memory pressure never unmutes a
connection that still has a request in flight or a throttle to serve.

Two kinds of reason (:data:`STOPS_READING`):

* Most stop reading the socket (``pause_reading``): the peer is not reading our
  responses, the pool has no memory for the next body, a quota throttle, a shutdown,
  and ``RECEIVED`` (a whole request has been read and waits: one is the bound).
* ``IN_FLIGHT`` and ``SENDING`` only hold the next request back. Kafka's Processor
  mutes the channel while a request is in flight (one request at a time per
  connection, responses in order); here the socket is still read meanwhile, into
  pool memory as always (KIP-72), and a request that arrives is held, read but not
  processed (``RECEIVED``, which pauses reading), until the one before it is
  answered. A connection parked on a long poll thus costs no ``pause_reading`` /
  ``resume_reading`` pair (two ``epoll_ctl`` calls with uvloop) per request, and its
  client going away is seen at once.
"""

from __future__ import annotations

import enum


class MuteReason(enum.Flag):
    NONE = 0
    IN_FLIGHT = enum.auto()  # one request at a time per connection, as Kafka does
    SEND_BUFFER = enum.auto()  # the peer is not reading our responses
    MEMORY = enum.auto()  # KIP-72: the memory pool had no room for the next request
    THROTTLE = enum.auto()  # KIP-124/219: serving a quota throttle
    SHUTDOWN = enum.auto()  # the broker is draining before it stops
    SENDING = enum.auto()  # a response with file regions is being sent (one at a time)
    RECEIVED = enum.auto()  # a whole request was read while another reason held it back


#: the reasons that pause reading the socket; the others (IN_FLIGHT, SENDING) only hold
#: the next request back
STOPS_READING = (
    MuteReason.SEND_BUFFER | MuteReason.MEMORY | MuteReason.THROTTLE | MuteReason.SHUTDOWN | MuteReason.RECEIVED
)._value_
#: the bits of IN_FLIGHT and RECEIVED, for the connection's hot path
IN_FLIGHT_BIT = MuteReason.IN_FLIGHT._value_
RECEIVED_BIT = MuteReason.RECEIVED._value_


class ChannelMuteState:
    """A connection's mute reasons, kept as the bits of their values: every parked
    request mutes and unmutes its connection (IN_FLIGHT), and an ``enum.Flag``
    operation is a Python call, several per request; ``reasons`` gives them as a
    :class:`MuteReason`."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits = 0

    @property
    def reasons(self) -> MuteReason:
        return MuteReason(self.bits)

    @property
    def muted(self) -> bool:
        """Some reason holds: the next request waits."""
        return self.bits != 0

    @property
    def stops_reading(self) -> bool:
        """Some reason holds that stops reading the socket."""
        return (self.bits & STOPS_READING) != 0

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
