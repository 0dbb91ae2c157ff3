"""Kafka's StandardAuthorizer, sans-IO: ACLs in memory and the decision of one
(principal, host, operation, resource), as ``StandardAuthorizerData`` decides it.

Decision order (docs/security.md):

1. a super user (``super.users``) is allowed everything;
2. until the ACLs are loaded (:meth:`StandardAuthorizer.load`) nobody else is;
3. the candidate ACLs are those of the resource's type whose pattern covers its name:
   LITERAL with the same name, LITERAL ``*``, PREFIXED with a prefix of the name;
4. an ACL applies when its principal is the requester's or ``User:*``, its host is ``*``
   or the client's address, and its operation is ALL or the requested one (for ALLOW
   ACLs also an operation that implies it: READ/WRITE/DELETE/ALTER imply DESCRIBE,
   ALTER_CONFIGS implies DESCRIBE_CONFIGS);
5. any applicable DENY denies; else any applicable ALLOW allows;
6. else denied, unless the resource has no candidate ACL at all and
   ``allow.everyone.if.no.acl.found`` is true.

Each denial is logged (logger ``tidegate.authorizer``, Kafka's ``kafka.authorizer.logger``)
once per (principal, resource, operation) per minute of the injected clock.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from tidegate.clock import Clock, MonotonicMs

from .acl import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

audit_log = logging.getLogger("tidegate.authorizer")

#: the StandardAuthorizer's class name, the one value ``authorizer.class.name`` accepts
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: a denial is logged again after this long (per principal, resource, operation)
AUDIT_INTERVAL_MS = 60_000
_DENY = AclPermissionType.DENY
_ALLOW = AclPermissionType.ALLOW


class AuthorizerNotReadyError(Exception):
    """Kafka's AuthorizerNotReadyException: the ACLs are not loaded yet."""


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users`` as Kafka's StandardAuthorizer reads it: split on ``;``, trimmed,
    blanks dropped; each entry needs a ``:`` (principal type and name)."""
    users = set()
    for part in (text or "").split(";"):
        entry = part.strip()
        if not entry:
            continue
        if ":" not in entry or entry.startswith(":"):
            raise ValueError(f"invalid super.users entry {entry!r}: expected a principal such as User:admin")
        users.add(entry)
    return frozenset(users)


class StandardAuthorizer:
    def __init__(
        self,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
        *,
        clock: Clock,
    ) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        #: its monotonic time spaces out the audit lines of repeated denials
        self._clock = clock
        self.ready = False
        #: every ACL, in creation order
        self.acls: dict[AclBinding, None] = {}
        #: (resource type, name) -> ACLs of LITERAL / PREFIXED resources of that name
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._last_logged: dict[tuple[str, ResourceType, str, AclOperation], MonotonicMs] = {}
        #: denials per API name (the metric), and how many decisions were made
        self.denied_by_api: Counter[str] = Counter()
        self.allowed_count = 0
        self.denied_count = 0

    # -- ACL state ----------------------------------------------------------------------
    def load(self, acls: Iterable[AclBinding]) -> None:
        """The initial load: from now on, decisions use the ACLs."""
        for acl in acls:
            self._add(acl)
        self.ready = True

    def _add(self, acl: AclBinding) -> bool:
        if acl in self.acls:
            return False
        self.acls[acl] = None
        index = self._literal if acl.pattern_type is PatternType.LITERAL else self._prefixed
        index.setdefault((acl.resource_type, acl.name), []).append(acl)
        return True

    def _remove(self, acl: AclBinding) -> None:
        del self.acls[acl]
        index = self._literal if acl.pattern_type is PatternType.LITERAL else self._prefixed
        key = (acl.resource_type, acl.name)
        entries = index[key]
        entries.remove(acl)
        if not entries:
            del index[key]

    def create(self, acl: AclBinding) -> bool:
        """Add one ACL (already validated); False if it existed (nothing changes)."""
        return self._add(acl)

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every ACL each filter matches; per filter, the ACLs it removed."""
        results = []
        for f in filters:
            matched = [acl for acl in self.acls if f.matches(acl)]
            for acl in matched:
                self._remove(acl)
            results.append(matched)
        return results

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        return [acl for acl in self.acls if f.matches(acl)]

    # -- decisions ------------------------------------------------------------------------
    def _candidates(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        found += self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        if self._prefixed:
            for i in range(1, len(name) + 1):
                found += self._prefixed.get((resource_type, name[:i]), ())
        return found

    def _decide(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        if not self.ready:
            raise AuthorizerNotReadyError("the ACLs are not loaded yet")
        candidates = self._candidates(resource_type, name)
        if not candidates:
            return self.allow_everyone_if_no_acl_found
        implying = IMPLIED_BY.get(operation, frozenset())
        allowed = False
        for acl in candidates:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission is _DENY:
                if acl.operation is AclOperation.ALL or acl.operation == operation:
                    return False
            elif acl.operation is AclOperation.ALL or acl.operation == operation or acl.operation in implying:
                allowed = True
        return allowed

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        api: str | None = None,
        audit: bool = True,
    ) -> bool:
        """One decision; a denial is logged (deduplicated) and counted against ``api``
        unless ``audit`` is False (Kafka's ``logIfDenied``)."""
        try:
            allowed = self._decide(principal, host, operation, resource_type, name)
        except AuthorizerNotReadyError:
            allowed = False
        if not audit:
            return allowed
        if allowed:
            self.allowed_count += 1
            return True
        self.denied_count += 1
        if api is not None:
            self.denied_by_api[api] += 1
        self._audit(principal, host, operation, resource_type, name, api)
        return False

    def _audit(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
        name: str, api: str | None,
    ) -> None:  # fmt: skip
        key = (principal, resource_type, name, operation)
        now = self._clock.milliseconds()
        last = self._last_logged.get(key)
        if last is not None and now - last < AUDIT_INTERVAL_MS:
            return
        if len(self._last_logged) > 10_000:  # bounded: forget entries older than a minute
            self._last_logged = {k: t for k, t in self._last_logged.items() if now - t < AUDIT_INTERVAL_MS}
        self._last_logged[key] = now
        audit_log.info(
            'Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s '
            "for request = %s (logged once per minute per principal, resource and operation)",
            principal, operation.name, host, resource_type.name, name, api,
        )  # fmt: skip

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
        *, api: str | None = None,
    ) -> bool:  # fmt: skip
        """Kafka's ``Authorizer.authorizeByResourceType``: may the principal perform the
        operation on at least one resource of the type? (an applicable ALLOW, LITERAL or
        PREFIXED, that no applicable DENY covers)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode", audit=False):
            return True
        if principal in self.super_users or not self.ready:
            return False
        implying = IMPLIED_BY.get(operation, frozenset())

        def applies(acl: AclBinding) -> bool:
            return (
                acl.resource_type == resource_type
                and acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (WILDCARD, host)
            )

        denied_literal = set()
        denied_prefixes = set()
        for acl in self.acls:
            if applies(acl) and acl.permission is _DENY and acl.operation in (AclOperation.ALL, operation):
                if acl.pattern_type is PatternType.LITERAL:
                    if acl.name == WILDCARD:
                        self._count_denial(api)
                        return False
                    denied_literal.add(acl.name)
                else:
                    denied_prefixes.add(acl.name)
        for acl in self.acls:
            if not (applies(acl) and acl.permission is _ALLOW):
                continue
            if not (acl.operation in (AclOperation.ALL, operation) or acl.operation in implying):
                continue
            if acl.pattern_type is PatternType.LITERAL and acl.name == WILDCARD:
                return True
            if acl.pattern_type is PatternType.LITERAL and acl.name in denied_literal:
                continue
            if any(acl.name.startswith(p) for p in denied_prefixes):
                continue
            return True
        self._count_denial(api)
        return False

    def _count_denial(self, api: str | None) -> None:
        self.denied_count += 1
        if api is not None:
            self.denied_by_api[api] += 1

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bit field: 1 << op for each supported operation
        allowed (no audit, as Kafka's ``AuthHelper.authorizedOperations``)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name, audit=False):
                bits |= 1 << op
        return bits
