"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): Kafka's ``AclApis`` and the
controller's ``AclControlManager`` on one node. Changes are written to ``acls.json``
(atomically, fsynced) before they are answered and apply to the next request of every
connection. Without an authorizer every ACL API answers SECURITY_DISABLED. The CLUSTER
ALTER / DESCRIBE checks are the authorization step's (tidegate.server.authorization).
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.security.authorizer.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    code,
)
from tidegate.security.authorizer.acl_store import AclStore
from tidegate.security.authorizer.standard_authorizer import StandardAuthorizer

log = logging.getLogger(__name__)
_DISABLED = "No Authorizer is configured."


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        code(ResourceType, c.resource_type),  # type: ignore[arg-type]
        c.resource_name,
        code(PatternType, getattr(c, "resource_pattern_type", PatternType.LITERAL)),  # type: ignore[arg-type]
        c.principal,
        c.host,
        code(AclOperation, c.operation),  # type: ignore[arg-type]
        code(AclPermissionType, c.permission_type),  # type: ignore[arg-type]
    )


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        code(ResourceType, f.resource_type_filter),  # type: ignore[arg-type]
        f.resource_name_filter,
        code(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)),  # type: ignore[arg-type]
        f.principal_filter,
        f.host_filter,
        code(AclOperation, f.operation),  # type: ignore[arg-type]
        code(AclPermissionType, f.permission_type),  # type: ignore[arg-type]
    )


class AclApis:
    def __init__(self, authorizer: StandardAuthorizer | None, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store

    def _save(self) -> None:
        assert self.authorizer is not None
        self.store.save(list(self.authorizer.acls))

    def handle_create_acls(self, request: Request) -> dict:
        creations = request.body.creations
        a = self.authorizer
        if a is None:
            return {"throttle_time": 0, "results": [
                {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED} for _ in creations]}
        results = []
        added = []
        for c in creations:
            acl = _binding(c)
            reason = acl.invalid_reason()
            if reason is not None:
                results.append({"error_code": ErrorCode.invalid_request, "error_message": reason})
                continue
            if a.create(acl):
                added.append(acl)
            results.append({"error_code": ErrorCode.none, "error_message": None})
        if added:
            try:
                self._save()
            except OSError as exc:
                log.error("could not write the ACLs: %s", exc)
                a.delete([_exact(acl) for acl in added])
                return {"throttle_time": 0, "results": [
                    {"error_code": ErrorCode.kafka_storage_error, "error_message": str(exc)} for _ in creations]}
            for acl in added:
                log.info("added ACL %s", acl)
        return {"throttle_time": 0, "results": results}

    def handle_describe_acls(self, request: Request) -> dict:
        a = self.authorizer
        if a is None:
            return {"throttle_time": 0, "error_code": ErrorCode.security_disabled, "error_message": _DISABLED,
                    "resources": []}
        f = _filter(request.body)
        reason = f.unknown_reason()
        if reason is not None:
            return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "error_message": reason,
                    "resources": []}
        grouped: dict[tuple[int, str, int], list[dict]] = {}
        for acl in a.describe(f):
            grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                 "permission_type": acl.permission}
            )
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "resources": [
                {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "acls": acls}
                for (rtype, name, pattern), acls in grouped.items()
            ],
        }

    def handle_delete_acls(self, request: Request) -> dict:
        filters = request.body.filters
        a = self.authorizer
        if a is None:
            return {"throttle_time": 0, "filter_results": [
                {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED, "matching_acls": []}
                for _ in filters]}
        parsed = [_filter(f) for f in filters]
        results: list[dict] = []
        valid = []
        for f in parsed:
            reason = f.unknown_reason()
            if reason is not None:
                results.append({"error_code": ErrorCode.invalid_request, "error_message": reason,
                                "matching_acls": []})
            else:
                results.append({})
                valid.append(f)
        removed = a.delete(valid)
        if any(removed):
            try:
                self._save()
            except OSError as exc:
                log.error("could not write the ACLs: %s", exc)
                for acls in removed:
                    for acl in acls:
                        a.create(acl)
                return {"throttle_time": 0, "filter_results": [
                    {"error_code": ErrorCode.kafka_storage_error, "error_message": str(exc), "matching_acls": []}
                    for _ in filters]}
        it = iter(removed)
        for i, r in enumerate(results):
            if r:
                continue
            acls = next(it)
            for acl in acls:
                log.info("removed ACL %s", acl)
            results[i] = {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {"error_code": ErrorCode.none, "error_message": None, "resource_type": acl.resource_type,
                     "resource_name": acl.name, "pattern_type": acl.pattern_type, "principal": acl.principal,
                     "host": acl.host, "operation": acl.operation, "permission_type": acl.permission}
                    for acl in acls
                ],
            }
        return {"throttle_time": 0, "filter_results": results}


def _exact(acl: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(acl.resource_type, acl.name, acl.pattern_type, acl.principal, acl.host,
                            acl.operation, acl.permission)
