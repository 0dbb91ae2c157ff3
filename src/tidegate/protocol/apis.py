"""The API keys tidegate implements and the version range of each.

ApiVersions advertises exactly this table, and the request decoder refuses
anything outside it, so what is advertised and what is implemented cannot
drift apart. The ranges are Kafka 4.0's for a combined broker+controller node
(docs/protocol.md lists the APIs of Kafka 4.0 left out, and why); kio supplies
the schema for every version listed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74  # ListClientMetricsResources before KIP-1142
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True, slots=True)
class ApiRange:
    key: ApiKey
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


SUPPORTED_APIS: dict[int, ApiRange] = {
    r.key: r
    for r in (
        ApiRange(ApiKey.PRODUCE, 3, 13),
        ApiRange(ApiKey.FETCH, 4, 17),
        ApiRange(ApiKey.LIST_OFFSETS, 1, 11),
        ApiRange(ApiKey.METADATA, 0, 13),
        ApiRange(ApiKey.OFFSET_COMMIT, 2, 10),
        ApiRange(ApiKey.OFFSET_FETCH, 1, 10),
        ApiRange(ApiKey.FIND_COORDINATOR, 0, 6),
        ApiRange(ApiKey.JOIN_GROUP, 0, 9),
        ApiRange(ApiKey.HEARTBEAT, 0, 4),
        ApiRange(ApiKey.LEAVE_GROUP, 0, 5),
        ApiRange(ApiKey.SYNC_GROUP, 0, 5),
        ApiRange(ApiKey.DESCRIBE_GROUPS, 0, 6),
        ApiRange(ApiKey.LIST_GROUPS, 0, 5),
        ApiRange(ApiKey.SASL_HANDSHAKE, 0, 1),
        ApiRange(ApiKey.API_VERSIONS, 0, 4),
        ApiRange(ApiKey.CREATE_TOPICS, 2, 7),
        ApiRange(ApiKey.DELETE_TOPICS, 1, 6),
        ApiRange(ApiKey.DELETE_RECORDS, 0, 2),
        ApiRange(ApiKey.INIT_PRODUCER_ID, 0, 5),
        ApiRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4),
        ApiRange(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5),
        ApiRange(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4),
        ApiRange(ApiKey.END_TXN, 0, 4),  # v5 is transaction version 2 (not advertised)
        ApiRange(ApiKey.WRITE_TXN_MARKERS, 1, 1),
        ApiRange(ApiKey.TXN_OFFSET_COMMIT, 0, 4),  # v5 is transaction version 2 (not advertised)
        ApiRange(ApiKey.DESCRIBE_CONFIGS, 1, 4),
        ApiRange(ApiKey.ALTER_CONFIGS, 0, 2),
        ApiRange(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2),
        ApiRange(ApiKey.DESCRIBE_LOG_DIRS, 1, 4),
        ApiRange(ApiKey.SASL_AUTHENTICATE, 0, 2),
        ApiRange(ApiKey.CREATE_PARTITIONS, 0, 3),
        ApiRange(ApiKey.DESCRIBE_ACLS, 1, 3),
        ApiRange(ApiKey.CREATE_ACLS, 1, 3),
        ApiRange(ApiKey.DELETE_ACLS, 1, 3),
        ApiRange(ApiKey.CREATE_DELEGATION_TOKEN, 1, 3),
        ApiRange(ApiKey.RENEW_DELEGATION_TOKEN, 1, 2),
        ApiRange(ApiKey.EXPIRE_DELEGATION_TOKEN, 1, 2),
        ApiRange(ApiKey.DESCRIBE_DELEGATION_TOKEN, 1, 3),
        ApiRange(ApiKey.DELETE_GROUPS, 0, 2),
        ApiRange(ApiKey.ELECT_LEADERS, 0, 2),
        ApiRange(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1),
        ApiRange(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0),
        ApiRange(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0),
        ApiRange(ApiKey.OFFSET_DELETE, 0, 0),
        ApiRange(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1),
        ApiRange(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1),
        ApiRange(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0),
        ApiRange(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0),
        ApiRange(ApiKey.DESCRIBE_QUORUM, 0, 2),
        ApiRange(ApiKey.DESCRIBE_CLUSTER, 0, 2),
        ApiRange(ApiKey.DESCRIBE_PRODUCERS, 0, 0),
        ApiRange(ApiKey.UNREGISTER_BROKER, 0, 0),
        ApiRange(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0),
        ApiRange(ApiKey.LIST_TRANSACTIONS, 0, 1),
        ApiRange(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1),
        ApiRange(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1),
        ApiRange(ApiKey.LIST_CONFIG_RESOURCES, 0, 1),
        ApiRange(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0),
        # KIP-932 share groups (Kafka 4.2's ranges; librdkafka sends v1)
        ApiRange(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1),
        ApiRange(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1),
        ApiRange(ApiKey.SHARE_FETCH, 1, 2),
        ApiRange(ApiKey.SHARE_ACKNOWLEDGE, 1, 2),
        ApiRange(ApiKey.ADD_RAFT_VOTER, 0, 0),
        ApiRange(ApiKey.REMOVE_RAFT_VOTER, 0, 0),
        ApiRange(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1),
        ApiRange(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0),
        ApiRange(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0),
    )
}


def api_name(api_key: int) -> str:
    """Kafka's request name (``Produce``, ``ListOffsets`` ...), used in logs and metrics."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"Unknown({api_key})"
