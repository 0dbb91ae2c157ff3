"""The ApiVersions table, pinned: exactly what tidegate advertises, how it compares with what
Kafka 4.0 advertises for a combined broker+controller node, the APIs deliberately left out
(docs/protocol.md lists them with the reason and the work that adds them), and what a
kafka-python client infers from it."""

from __future__ import annotations

import re
from pathlib import Path

from kafka.protocol.broker_version_data import (
    BROKER_API_VERSIONS,
    infer_broker_version_from_api_versions,
)

from tidegate.protocol.apis import SUPPORTED_APIS, ApiKey

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

#: What Kafka 4.0 advertises on a combined broker+controller node's broker listener
#: (key: (min, max)): the ApiVersions answer kafka-python 3.0 records for Kafka 4.0
#: (kafka/protocol/broker_version_data.py), matching Kafka 4.0's message specs.
KAFKA_40 = {
    0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 1),
    69: (0, 1), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}

#: APIs of later Kafka releases tidegate advertises with their Kafka 4.2 ranges: KIP-932's
#: share groups (GA in 4.2; ShareGroupHeartbeat and ShareGroupDescribe v0 were removed in 4.1).
BEYOND_40 = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}

#: Kafka 4.0 APIs tidegate does not advertise yet, and the work that adds each.
LEFT_OUT = {
    57: "UpdateFeatures",  # no feature levels: transaction version 2 is not implemented
}

#: Where tidegate's range differs from Kafka 4.0's, and why (docs/protocol.md says it too).
DIFFERENCES = {
    # Kafka advertises Produce from v0 (KAFKA-18659, for old librdkafka) and rejects
    # v0-2 anyway; tidegate advertises what it serves, to 4.1's v13 (topics by id)
    0: (3, 13),
    # ListOffsets v11 (KIP-1023, Kafka 4.2): the earliest-pending-upload timestamp
    2: (1, 11),
    # OffsetCommit v10 and OffsetFetch v10 (Kafka 4.2; unstable in 4.1): topics named by id
    8: (2, 10),
    9: (1, 10),
    # Kafka 4.0 dropped JoinGroup v0-1 (KIP-896; 4.1 serves them again); tidegate serves
    # 0-9, the range its client-needs table (kafka-internals.md section 5) asks for
    11: (0, 9),
    # EndTxn v5 and TxnOffsetCommit v5 belong to transaction version 2 (KIP-890 part 2),
    # which tidegate does not implement: advertising them would invite TV2 semantics
    26: (0, 4),
    28: (0, 4),
    # ListConfigResources v1 (KIP-1142): Kafka 4.1's and 4.2's range
    74: (0, 1),
}

#: tidegate's table, exactly (every change to it is a change to this test and the docs).
ADVERTISED = {
    key: DIFFERENCES.get(key, versions) for key, versions in KAFKA_40.items() if key not in LEFT_OUT
} | BEYOND_40


def test_the_advertised_table_is_pinned():
    assert {int(k): (r.min_version, r.max_version) for k, r in SUPPORTED_APIS.items()} == ADVERTISED


def test_every_kafka_40_api_is_advertised_or_deliberately_left_out():
    """Every Kafka 4.0 API, and the later ones of BEYOND_40."""
    advertised = {int(k) for k in SUPPORTED_APIS}
    assert advertised | set(LEFT_OUT) == set(KAFKA_40) | set(BEYOND_40)
    assert not advertised & set(LEFT_OUT)
    assert {ApiKey(k).name for k in advertised} <= set(ApiKey.__members__)


def test_kafka_python_infers_kafka_42_from_the_table():
    """kafka-python looks for ListOffsets v11 (4.2) and Produce v13 (4.1) first
    (docs/protocol.md); without them it would read 4.0."""
    versions = {int(k): (r.min_version, r.max_version) for k, r in SUPPORTED_APIS.items()}
    assert infer_broker_version_from_api_versions(versions) == (4, 2)
    assert infer_broker_version_from_api_versions(versions | {2: (1, 10)}) == (4, 1)
    assert infer_broker_version_from_api_versions(versions | {2: (1, 10), 0: (3, 12)}) == (4, 0)


def kafka_releases_with(key: int, versions: tuple[int, int]) -> str:
    """The Kafka releases 4.0-4.2 that advertise exactly ``versions`` for ``key`` ("4.0-4.2",
    "4.1", ... or "none"), from the ranges kafka-python records for each release."""
    matching = [f"4.{minor}" for minor in (0, 1, 2) if BROKER_API_VERSIONS[(4, minor)].get(key) == versions]
    if not matching:
        return "none"
    return matching[0] if len(matching) == 1 else f"{matching[0]}-{matching[-1]}"


def test_docs_name_the_kafka_releases_each_range_matches():
    rows = re.findall(r"^\| [A-Za-z]+ \| (\d+) \| [\d-]+ \| ([\d.\-a-z]+) \|", DOCS.read_text(), re.MULTILINE)
    assert {int(key): releases for key, releases in rows} == {
        key: kafka_releases_with(key, versions) for key, versions in ADVERTISED.items()
    }


def test_docs_list_every_api_with_its_versions_and_every_left_out_one():
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| [A-Za-z]+ \| (\d+) \| ([\d-]+) \|", text, re.MULTILINE))
    documented = {
        int(key): tuple(int(v) for v in (span.split("-") if "-" in span else (span, span)))
        for key, span in rows.items()
    }
    assert documented == ADVERTISED
    left_out = text[text.index("## Not implemented yet"):]
    for key, name in LEFT_OUT.items():
        assert f"{name} ({key})" in left_out, name
