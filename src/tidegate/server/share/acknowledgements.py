"""Acknowledgement batches of ShareFetch and ShareAcknowledge (KIP-932), and the check of
a partition's batches before anything is applied (Kafka's ``KafkaApis
.validateAcknowledgementBatches``, reference 2.5).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

from tidegate.errors import ErrorCode

__all__ = ["AcknowledgeType", "ShareAcknowledgementBatch", "validate_acknowledgement_batches"]


class AcknowledgeType(enum.IntEnum):
    """The acknowledge types of the protocol; GAP (0) marks an offset with no record (a
    control marker, a compacted record). RENEW (KIP-1222) exists only from v2 with
    ``IsRenewAck``."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ShareAcknowledgementBatch(NamedTuple):
    """One AcknowledgementBatches entry: one type for the whole range, or one per offset
    (``last_offset - first_offset + 1`` of them)."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


def validate_acknowledgement_batches(
    batches: Sequence[ShareAcknowledgementBatch], *, supports_renew: bool = False, is_renew_ack: bool = False
) -> tuple[ErrorCode, str | None]:
    """Check one partition's batches as Kafka does before applying them; the first bad
    batch makes the whole partition INVALID_REQUEST:

    * first offset after last offset;
    * a batch starting before the previous batch's last offset (Kafka compares with
      ``<``: a batch may start *at* the previous one's last offset);
    * no acknowledge types;
    * several types whose number is not ``last - first + 1``;
    * a type outside 0..3 (0..4 when the request version supports RENEW, v2);
    * RENEW (4) in a request without ``IsRenewAck``.

    An empty list is valid (nothing to do).
    """
    max_type = AcknowledgeType.RENEW if supports_renew else AcknowledgeType.REJECT
    previous_last = -1
    for batch in batches:
        first, last, types = batch
        if first > last:
            return ErrorCode.invalid_request, f"first offset {first} is after last offset {last}"
        if first < previous_last:
            return ErrorCode.invalid_request, f"batch at {first} starts before the previous batch's last offset"
        if not types:
            return ErrorCode.invalid_request, "no acknowledge types"
        if len(types) > 1 and last - first != len(types) - 1:
            return ErrorCode.invalid_request, "the number of acknowledge types does not match the batch's offsets"
        if any(t < 0 or t > max_type for t in types):
            return ErrorCode.invalid_request, f"invalid acknowledge type in {list(types)}"
        if not is_renew_ack and AcknowledgeType.RENEW in types:
            return ErrorCode.invalid_request, "RENEW without IsRenewAck"
        previous_last = last
    return ErrorCode.none, None
