"""Request handlers of KIP-932's share groups, for
:class:`tidegate.server.kafka_apis.KafkaApis`: ShareGroupHeartbeat (v1) and
ShareGroupDescribe (v1) over the group coordinator's
:class:`~tidegate.coordinator.group.modern.share.share_group_manager.ShareGroupManager`;
ShareFetch and ShareAcknowledge (v1-v2) over the broker's
:class:`~tidegate.server.share.share_partition_manager.SharePartitionManager`
(:mod:`tidegate.server.share.share_apis`); DescribeShareGroupOffsets (v0-v1),
AlterShareGroupOffsets and DeleteShareGroupOffsets (v0) over the group coordinator.

Every one answers UNSUPPORTED_VERSION while ``group.share.enable`` is off (Kafka's
``isShareGroupProtocolEnabled``). The ACL checks that decide a whole request (READ on the
group for the heartbeat, fetch, acknowledge and AlterShareGroupOffsets; DESCRIBE on each
described group; DELETE for DeleteShareGroupOffsets; DESCRIBE on the heartbeat's
subscribed topics) are the authorization step's (server/authorization.py). The topic
checks that answer per partition are here, as Kafka's KafkaApis: READ on each fetched or
acknowledged topic (handed to the share-partition manager: a session's partitions are
checked on every fetch), DESCRIBE on DescribeShareGroupOffsets' topics, READ on
AlterShareGroupOffsets' and DeleteShareGroupOffsets' topics (TOPIC_AUTHORIZATION_FAILED);
a described share group with a topic the principal may not DESCRIBE in a member's
assignment answers TOPIC_AUTHORIZATION_FAILED without its members.

Answers that wait for a write (heartbeats, acknowledgements, the offsets APIs) and parked
share fetches go through ``respond``, possibly during the handler (the answer then is
the request's outcome).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable

from tidegate.config import BrokerConfig
from tidegate.coordinator.group.modern.share.share_group_manager import (
    ShareGroupHeartbeat,
    ShareGroupHeartbeatResult,
    ShareGroupManager,
)
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Parked, Request
from tidegate.protocol.messages import share_acknowledge as sa
from tidegate.protocol.messages import share_fetch as sf
from tidegate.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from tidegate.protocol.messages.share_group_describe import (
    DescribedGroup,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tidegate.protocol.messages.share_group_heartbeat import (
    Assignment,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    TopicPartitions,
)
from tidegate.server.authorization import AuthorizationStep
from tidegate.server.endpoints import Endpoints
from tidegate.server.quota.quota_factory import QuotaManagers
from tidegate.server.request_handler_helper import Respond
from tidegate.server.share.share_apis import (
    ShareRequestContext,
    handle_share_acknowledge,
    handle_share_fetch,
)
from tidegate.server.share.share_partition_manager import SharePartitionManager
from tidegate.utils import INT32_MAX

__all__ = ["ShareGroupApis", "share_heartbeat_response"]

_TOPIC_AUTHORIZATION_FAILED = "The client is not authorized to access this topic."


def share_heartbeat_response(result: ShareGroupHeartbeatResult) -> ShareGroupHeartbeatResponse:
    """The coordinator's answer as the response message (assignment None: not sent)."""
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(topic_partitions=[
            TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in result.assignment.items()
        ])  # fmt: skip
    return ShareGroupHeartbeatResponse(
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms,
        assignment=assignment,
    )


class ShareGroupApis:
    def __init__(
        self,
        config: BrokerConfig,
        share_groups: ShareGroupManager,
        share_partitions: SharePartitionManager,
        authorization: AuthorizationStep,
        endpoints: Endpoints,
        quotas: QuotaManagers,
        *,
        respond: Respond,
    ) -> None:
        #: group.share.enable
        self.enabled: bool = config.get("group.share.enable")
        self.share_groups = share_groups
        self.share_partitions = share_partitions
        self.authorization = authorization
        self.endpoints = endpoints
        self.quotas = quotas
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond

    # -- ShareGroupHeartbeat / ShareGroupDescribe ---------------------------------------------
    def handle_share_group_heartbeat(self, request: Request) -> ShareGroupHeartbeatResponse | Parked:
        if not self.enabled:
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.unsupported_version)
        header, req = request.header, request.body_as(ShareGroupHeartbeatRequest)
        heartbeat = ShareGroupHeartbeat(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            rack_id=req.rack_id,
            subscribed_topic_names=req.subscribed_topic_names,
            client_id=header.client_id or "",
            client_host="/" + request.context.client_address,
        )
        self.share_groups.share_group_heartbeat(
            heartbeat, lambda result: self.respond(request, share_heartbeat_response(result))
        )
        return PARKED

    def handle_share_group_describe(self, request: Request) -> ShareGroupDescribeResponse:
        req = request.body_as(ShareGroupDescribeRequest)
        if not self.enabled:
            return ShareGroupDescribeResponse(groups=[
                DescribedGroup(error_code=ErrorCode.unsupported_version, group_id=g) for g in req.group_ids
            ])  # fmt: skip
        groups = self.share_groups.share_group_describe(req.group_ids)
        if self.authorization.authorizer is not None:
            for group in groups:
                self.authorization.hide_undescribable_group(
                    request, group, {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
                )
        return ShareGroupDescribeResponse(groups=groups)

    # -- ShareFetch / ShareAcknowledge ------------------------------------------------------------
    def _context(self, request: Request) -> ShareRequestContext:
        header, ctx = request.header, request.context
        max_bytes = INT32_MAX
        if self.quotas.fetch.quotas_enabled:
            # one response is at most what the fetch quota allows in its whole window
            max_bytes = int(min(max_bytes, self.quotas.fetch.max_value_in_quota_window(
                ctx.principal, header.client_id or "")))  # fmt: skip
        topic_authorized: Callable[[str], bool] | None = None
        if self.authorization.authorizer is not None:
            def topic_authorized(name: str) -> bool:
                return not self.authorization.unreadable_topics(request, (name,))
        return ShareRequestContext(
            version=header.api_version,
            connection_id=ctx.connection_id,
            endpoint=self.endpoints.endpoint(ctx),
            max_bytes=max_bytes,
            topic_authorized=topic_authorized,
            abandoned=lambda: request.abandoned,
        )

    def handle_share_fetch(self, request: Request) -> sf.ShareFetchResponse | Parked:
        if not self.enabled:
            return sf.ShareFetchResponse(error_code=ErrorCode.unsupported_version)
        req = request.body_as(sf.ShareFetchRequest)
        handle_share_fetch(self.share_partitions, req, self._context(request),
                           lambda response: self.respond(request, response))
        return PARKED

    def handle_share_acknowledge(self, request: Request) -> sa.ShareAcknowledgeResponse | Parked:
        if not self.enabled:
            return sa.ShareAcknowledgeResponse(error_code=ErrorCode.unsupported_version)
        req = request.body_as(sa.ShareAcknowledgeRequest)
        handle_share_acknowledge(self.share_partitions, req, self._context(request),
                                 lambda response: self.respond(request, response))
        return PARKED

    # -- DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets --------------
    def _log_end_offset(self, topic_id: uuid.UUID, partition: int) -> int | None:
        info = self.share_partitions.topics.get_by_id(topic_id)
        plog = None if info is None else self.share_partitions.replicas.get_log(info.name, partition)
        return None if plog is None else plog.log_end_offset

    def handle_describe_share_group_offsets(self, request: Request) -> DescribeShareGroupOffsetsResponse | Parked:
        """Each group's share-partitions (the authorization step answered the groups the
        principal may not DESCRIBE); named topics it may not DESCRIBE are
        TOPIC_AUTHORIZATION_FAILED per partition (start offset and lag -1), and left out
        of an all-topics (null) answer, as Kafka's KafkaApis."""
        req = request.body_as(DescribeShareGroupOffsetsRequest)
        if not self.enabled:
            return DescribeShareGroupOffsetsResponse(groups=[
                DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=ErrorCode.unsupported_version)
                for g in req.groups
            ])  # fmt: skip
        if not req.groups:
            return DescribeShareGroupOffsetsResponse()
        answers: dict[int, DescribeShareGroupOffsetsResponseGroup] = {}

        def one(i: int, denied: list[DescribeShareGroupOffsetsResponseTopic],
                group: DescribeShareGroupOffsetsResponseGroup) -> None:  # fmt: skip
            if req.groups[i].topics is None and self.authorization.authorizer is not None:
                # all topics: those the principal may not DESCRIBE are left out (Kafka)
                allowed = set(self.authorization.describable_topics(request, [t.topic_name for t in group.topics]))
                group.topics = [t for t in group.topics if t.topic_name in allowed]
            group.topics.extend(denied)
            answers[i] = group
            if len(answers) == len(req.groups):
                self.respond(request, DescribeShareGroupOffsetsResponse(groups=[answers[j] for j in range(len(answers))]))

        for i, g in enumerate(req.groups):
            topics, denied = self._describable(request, g)
            self.share_groups.describe_share_group_offsets(
                g.group_id, topics, self._log_end_offset, functools.partial(one, i, denied)
            )
        return PARKED

    def _describable(
        self, request: Request, g: DescribeShareGroupOffsetsRequestGroup
    ) -> tuple[list[DescribeShareGroupOffsetsRequestTopic] | None, list[DescribeShareGroupOffsetsResponseTopic]]:
        """The group's topics the principal may DESCRIBE (None: every initialized one),
        and the answers of the others."""
        if g.topics is None or self.authorization.authorizer is None:
            return g.topics, []
        allowed = set(self.authorization.describable_topics(request, [t.topic_name for t in g.topics]))
        denied = [
            DescribeShareGroupOffsetsResponseTopic(topic_name=t.topic_name, partitions=[
                DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=-1, lag=-1, error_code=ErrorCode.topic_authorization_failed,
                    error_message=_TOPIC_AUTHORIZATION_FAILED,
                ) for p in t.partitions
            ])
            for t in g.topics if t.topic_name not in allowed
        ]  # fmt: skip
        return [t for t in g.topics if t.topic_name in allowed], denied

    def handle_alter_share_group_offsets(self, request: Request) -> AlterShareGroupOffsetsResponse | Parked:
        req = request.body_as(AlterShareGroupOffsetsRequest)
        if not self.enabled:
            return AlterShareGroupOffsetsResponse(error_code=ErrorCode.unsupported_version)
        unreadable = self.authorization.unreadable_topics(request, [t.topic_name for t in req.topics])
        denied = [
            AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name, partitions=[
                AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=ErrorCode.topic_authorization_failed,
                    error_message=_TOPIC_AUTHORIZATION_FAILED,
                ) for p in t.partitions
            ])
            for t in req.topics if t.topic_name in unreadable
        ]  # fmt: skip
        topics = [t for t in req.topics if t.topic_name not in unreadable]

        def answer(response: AlterShareGroupOffsetsResponse) -> None:
            response.responses.extend(denied)
            self.respond(request, response)

        self.share_groups.alter_share_group_offsets(req.group_id, topics, answer)
        return PARKED

    def handle_delete_share_group_offsets(self, request: Request) -> DeleteShareGroupOffsetsResponse | Parked:
        req = request.body_as(DeleteShareGroupOffsetsRequest)
        if not self.enabled:
            return DeleteShareGroupOffsetsResponse(error_code=ErrorCode.unsupported_version)
        names = [t.topic_name for t in req.topics]
        unreadable = self.authorization.unreadable_topics(request, names)
        denied = [
            DeleteShareGroupOffsetsResponseTopic(topic_name=name, error_code=ErrorCode.topic_authorization_failed,
                                                 error_message=_TOPIC_AUTHORIZATION_FAILED)
            for name in dict.fromkeys(names) if name in unreadable
        ]  # fmt: skip

        def answer(response: DeleteShareGroupOffsetsResponse) -> None:
            if response.error_code == ErrorCode.none:
                response.responses.extend(denied)
            self.respond(request, response)

        self.share_groups.delete_share_group_offsets(req.group_id, [n for n in names if n not in unreadable], answer)
        return PARKED
