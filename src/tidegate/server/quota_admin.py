"""Client quotas (KIP-546): DescribeClientQuotas and AlterClientQuotas, for
:class:`~tidegate.server.kafka_apis.KafkaApis`.

Kafka's ``KafkaApis`` answers these from the quota entities the controller keeps
(``ClientQuotaControlManager``); here :class:`~tidegate.server.quota.quota_factory.QuotaManagers`
validates, applies and persists them, and this class maps the request onto it and its
answer onto the response.
"""

from __future__ import annotations

import logging

from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntityData,
    AlterClientQuotasResponseEntryData,
)
from tidegate.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from tidegate.server.quota.quota_factory import QuotaConfigError, QuotaManagers

log = logging.getLogger(__name__)


class QuotaAdminApis:
    def __init__(self, quotas: QuotaManagers) -> None:
        self.quotas = quotas

    def handle_describe_client_quotas(self, request: Request) -> DescribeClientQuotasResponse:
        req = request.body_as(DescribeClientQuotasRequest)
        try:
            described = self.quotas.describe(req.components, req.strict)
        except QuotaConfigError as exc:
            return DescribeClientQuotasResponse(error_code=ErrorCode.invalid_request, error_message=str(exc))
        return DescribeClientQuotasResponse(entries=[
            EntryData(entity=[EntityData(entity_type=t, entity_name=n) for t, n in names.items()],
                      values=[ValueData(key=k, value=v) for k, v in sorted(values.items())])
            for names, values in described])  # fmt: skip

    def handle_alter_client_quotas(self, request: Request) -> AlterClientQuotasResponse:
        req = request.body_as(AlterClientQuotasRequest)
        try:
            results = self.quotas.alter(req.entries, req.validate_only)
        except OSError as exc:
            log.error("could not persist client quotas: %s", exc)
            message = f"could not persist the client quotas: {exc}"
            results = [(ErrorCode.kafka_storage_error, message)] * len(req.entries)
        return AlterClientQuotasResponse(entries=[
            AlterClientQuotasResponseEntryData(error_code=error, error_message=message, entity=[
                AlterClientQuotasResponseEntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity])
            for entry, (error, message) in zip(req.entries, results, strict=True)])  # fmt: skip
