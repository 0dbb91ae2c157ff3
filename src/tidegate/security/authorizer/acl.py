"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings
and binding filters with their int8 codes (``org.apache.kafka.common.acl`` and
``org.apache.kafka.common.resource``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The CLUSTER resource's only name.
CLUSTER_NAME = "kafka-cluster"
#: LITERAL ``*``: every resource of the type; ``User:*``: every principal.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

#: ALLOW ACLs only: an operation that is allowed also allows these (Kafka's
#: ``StandardAuthorizerData``: READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS
#: implies DESCRIBE_CONFIGS).
IMPLIED_BY = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

#: The operations each resource type supports (the ``*_authorized_operations`` bits).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


#: Kafka's ``AUTHORIZED_OPERATIONS_OMITTED`` (``Integer.MIN_VALUE``): the authorized
#: operations of a resource the request did not ask them for (the messages' default)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def all_operations_bits(resource_type: ResourceType) -> int:
    """The bit field with every supported operation of the type set (no authorizer)."""
    return sum(1 << op for op in SUPPORTED_OPERATIONS.get(resource_type, ()))


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_json(self) -> dict:
        return {
            "resourceType": self.resource_type.name,
            "name": self.name,
            "patternType": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permissionType": self.permission.name,
        }

    @classmethod
    def from_json(cls, doc: dict) -> AclBinding:
        return cls(
            ResourceType[doc["resourceType"]],
            doc["name"],
            PatternType[doc["patternType"]],
            doc["principal"],
            doc["host"],
            AclOperation[doc["operation"]],
            AclPermissionType[doc["permissionType"]],
        )

    def invalid_reason(self) -> str | None:
        """Why CreateAcls answers INVALID_REQUEST for this binding (``AclControlManager.
        validateNewAcl``), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return "Invalid resourceType " + self.resource_type.name
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "Invalid patternType " + self.pattern_type.name
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return "Invalid operation " + self.operation.name
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return "Invalid permissionType " + self.permission.name
        if not self.name:
            return "Resource name should not be empty"
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
        if ":" not in self.principal:
            return f"Could not parse principal from `{self.principal}` (no colon is present " \
                   "separating the principal type from the principal name)"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' filter and each of DeleteAcls' filters (``AclBindingFilter``):
    ANY / None match everything; pattern MATCH matches every ACL that applies to the name."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def unknown_reason(self) -> str | None:
        for field, value in (
            ("resourceType", self.resource_type), ("patternType", self.pattern_type),
            ("operation", self.operation), ("permissionType", self.permission),
        ):  # fmt: skip
            if value == 0:
                return f"Invalid {field} UNKNOWN in the filter"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission == acl.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        pattern = self.pattern_type
        if pattern is PatternType.MATCH:
            if self.name is None:
                return True
            if acl.pattern_type is PatternType.LITERAL:
                return acl.name in (self.name, WILDCARD)
            return self.name.startswith(acl.name)
        if pattern is not PatternType.ANY and pattern != acl.pattern_type:
            return False
        return self.name is None or self.name == acl.name


def code(enum_type: type[enum.IntEnum], value: int) -> enum.IntEnum:
    """An int8 code as its enum member; an unknown code is UNKNOWN (0)."""
    try:
        return enum_type(value)
    except ValueError:
        return enum_type(0)
