"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): Kafka's ``AclApis`` and the
controller's ``AclControlManager`` on one node. Changes are written to ``acls.json``
(atomically, fsynced) before they are answered and apply to the next request of every
connection. Without an authorizer every ACL API answers SECURITY_DISABLED. The CLUSTER
ALTER / DESCRIBE checks are the authorization step's (tidegate.server.authorization).
"""

from __future__ import annotations

import logging
from typing import Protocol

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages.create_acls import (
    AclCreation,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
)
from tidegate.protocol.messages.delete_acls import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from tidegate.protocol.messages.describe_acls import (
    AclDescription,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)
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


class _Filter(Protocol):
    """An ACL filter of DescribeAcls (the request itself) or DeleteAcls (each filter)."""

    resource_type_filter: int
    resource_name_filter: str | None
    pattern_type_filter: int
    principal_filter: str | None
    host_filter: str | None
    operation: int
    permission_type: int


def _binding(c: AclCreation) -> AclBinding:
    return AclBinding(
        code(ResourceType, c.resource_type),  # type: ignore[arg-type]
        c.resource_name,
        code(PatternType, c.resource_pattern_type),  # type: ignore[arg-type]
        c.principal,
        c.host,
        code(AclOperation, c.operation),  # type: ignore[arg-type]
        code(AclPermissionType, c.permission_type),  # type: ignore[arg-type]
    )


def _filter(f: _Filter) -> AclBindingFilter:
    return AclBindingFilter(
        code(ResourceType, f.resource_type_filter),  # type: ignore[arg-type]
        f.resource_name_filter,
        code(PatternType, f.pattern_type_filter),  # type: ignore[arg-type]
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

    def handle_create_acls(self, request: Request) -> CreateAclsResponse:
        creations = request.body_as(CreateAclsRequest).creations
        a = self.authorizer
        if a is None:
            return CreateAclsResponse(results=[
                AclCreationResult(error_code=ErrorCode.security_disabled, error_message=_DISABLED) for _ in creations
            ])  # fmt: skip
        results = []
        added = []
        for c in creations:
            acl = _binding(c)
            reason = acl.invalid_reason()
            if reason is not None:
                results.append(AclCreationResult(error_code=ErrorCode.invalid_request, error_message=reason))
                continue
            if a.create(acl):
                added.append(acl)
            results.append(AclCreationResult())
        if added:
            try:
                self._save()
            except OSError as exc:
                log.error("could not write the ACLs: %s", exc)
                a.delete([_exact(acl) for acl in added])
                return CreateAclsResponse(results=[
                    AclCreationResult(error_code=ErrorCode.kafka_storage_error, error_message=str(exc))
                    for _ in creations
                ])  # fmt: skip
            for acl in added:
                log.info("added ACL %s", acl)
        return CreateAclsResponse(results=results)

    def handle_describe_acls(self, request: Request) -> DescribeAclsResponse:
        a = self.authorizer
        if a is None:
            return DescribeAclsResponse(error_code=ErrorCode.security_disabled, error_message=_DISABLED)
        f = _filter(request.body_as(DescribeAclsRequest))
        reason = f.unknown_reason()
        if reason is not None:
            return DescribeAclsResponse(error_code=ErrorCode.invalid_request, error_message=reason)
        grouped: dict[tuple[int, str, int], list[AclDescription]] = {}
        for acl in a.describe(f):
            grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                AclDescription(principal=acl.principal, host=acl.host, operation=acl.operation,
                               permission_type=acl.permission)
            )
        return DescribeAclsResponse(resources=[
            DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls)
            for (rtype, name, pattern), acls in grouped.items()
        ])  # fmt: skip

    def handle_delete_acls(self, request: Request) -> DeleteAclsResponse:
        filters = request.body_as(DeleteAclsRequest).filters
        a = self.authorizer
        if a is None:
            return DeleteAclsResponse(filter_results=[
                DeleteAclsFilterResult(error_code=ErrorCode.security_disabled, error_message=_DISABLED)
                for _ in filters
            ])  # fmt: skip
        results: list[DeleteAclsFilterResult | None] = []
        valid = []
        for f in map(_filter, filters):
            reason = f.unknown_reason()
            if reason is not None:
                results.append(DeleteAclsFilterResult(error_code=ErrorCode.invalid_request, error_message=reason))
            else:
                results.append(None)
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
                return DeleteAclsResponse(filter_results=[
                    DeleteAclsFilterResult(error_code=ErrorCode.kafka_storage_error, error_message=str(exc))
                    for _ in filters
                ])  # fmt: skip
        it = iter(removed)
        out: list[DeleteAclsFilterResult] = []
        for r in results:
            if r is None:
                acls = next(it)
                for acl in acls:
                    log.info("removed ACL %s", acl)
                r = DeleteAclsFilterResult(matching_acls=[
                    DeleteAclsMatchingAcl(resource_type=acl.resource_type, resource_name=acl.name,
                                          pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                                          operation=acl.operation, permission_type=acl.permission)
                    for acl in acls
                ])  # fmt: skip
            out.append(r)
        return DeleteAclsResponse(filter_results=out)


def _exact(acl: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(acl.resource_type, acl.name, acl.pattern_type, acl.principal, acl.host,
                            acl.operation, acl.permission)
