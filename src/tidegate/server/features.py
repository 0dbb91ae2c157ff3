"""The feature levels ApiVersions v3+ reports (KIP-584, KIP-1022): Kafka's
``BrokerFeatures`` (what this broker's software supports) and ``FinalizedFeatures``
(the levels the cluster runs at), for tidegate's single combined node.

A level is advertised only where tidegate implements what it means to clients:

* ``metadata.version`` 29 (4.2-IV1), the level a new Kafka 4.2 cluster is formatted
  at: tidegate's API ranges are Kafka 4.0-4.2's (docs/protocol.md), and share.version 1
  needs at least 4.1-IV1. tidegate runs at that one level only (no UpdateFeatures), so
  the supported range is that level alone.
* ``group.version`` 1 (KIP-848's consumer protocol): finalized while
  ``group.coordinator.rebalance.protocols`` includes ``consumer``, absent (level 0)
  otherwise.
* ``share.version`` 1 (KIP-932's share groups): finalized while ``group.share.enable``
  is on, absent otherwise.
* ``transaction.version``: not advertised. Level 1 is the flexible ``__transaction_state``
  value (tidegate writes version 0) and level 2 is KIP-890 part 2 (Produce v12's implicit
  AddPartitionsToTxn, EndTxn v5's per-transaction epoch bump), which tidegate does not
  implement: a Java or librdkafka producer that saw level 2 would switch protocols.
* ``kraft.version``: not advertised. The voter set is static (level 0, as a combined node
  formatted with ``controller.quorum.voters``); AddRaftVoter is refused.
* ``eligible.leader.replicas.version``, ``streams.version``: not implemented (no ELR
  tracking, no KIP-1071 streams groups): not advertised.

As in Kafka, a supported feature whose highest level is 0 is left out, a finalized level
0 is left out, and an ApiVersions request below v4 gets no supported feature whose
lowest level is 0 (KAFKA-17492: older clients fail to read it). The finalized features
never change while the broker runs; their epoch (Kafka's metadata log offset) is 0, the
end offset DescribeQuorum reports for tidegate's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.protocol.messages.api_versions import FinalizedFeatureKey, SupportedFeatureKey

METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"

#: IBP_4_2_IV1, Kafka 4.2's latest production metadata.version
METADATA_VERSION_4_2_IV1 = 29
#: GV_1: the consumer rebalance protocol (KIP-848)
GROUP_VERSION_CONSUMER_PROTOCOL = 1
#: SV_1: share groups (KIP-932)
SHARE_VERSION_SHARE_GROUPS = 1

#: The epoch of the finalized features (Kafka's metadata offset; tidegate's is 0)
FINALIZED_FEATURES_EPOCH = 0


@dataclass(frozen=True)
class SupportedVersionRange:
    """The levels of one feature this broker's software can run at (Kafka's class)."""

    min_version: int
    max_version: int


#: Kafka's ``BrokerFeatures.defaultSupportedFeatures`` for tidegate, in a fixed order
SUPPORTED_FEATURES: dict[str, SupportedVersionRange] = {
    METADATA_VERSION: SupportedVersionRange(METADATA_VERSION_4_2_IV1, METADATA_VERSION_4_2_IV1),
    GROUP_VERSION: SupportedVersionRange(0, GROUP_VERSION_CONSUMER_PROTOCOL),
    SHARE_VERSION: SupportedVersionRange(0, SHARE_VERSION_SHARE_GROUPS),
}


def finalized_features(*, consumer_protocol: bool, share_groups: bool) -> dict[str, int]:
    """The finalized level of every feature (0: off), from the broker's switches."""
    return {
        METADATA_VERSION: METADATA_VERSION_4_2_IV1,
        GROUP_VERSION: GROUP_VERSION_CONSUMER_PROTOCOL if consumer_protocol else 0,
        SHARE_VERSION: SHARE_VERSION_SHARE_GROUPS if share_groups else 0,
    }


def supported_feature_keys(request_version: int) -> list[SupportedFeatureKey]:
    """ApiVersionsResponse's SupportedFeatures (Kafka's ``maybeFilterSupportedFeatureKeys``):
    below v4, features whose lowest level is 0 are left out."""
    return [
        SupportedFeatureKey(name=name, min_version=r.min_version, max_version=r.max_version)
        for name, r in SUPPORTED_FEATURES.items()
        if not (request_version < 4 and r.min_version == 0)
    ]


def finalized_feature_keys(finalized: dict[str, int]) -> list[FinalizedFeatureKey]:
    """ApiVersionsResponse's FinalizedFeatures (Kafka's ``createFinalizedFeatureKeys``):
    min and max level both the finalized level; level 0 left out."""
    return [
        FinalizedFeatureKey(name=name, min_version_level=level, max_version_level=level)
        for name, level in finalized.items()
        if level != 0
    ]
