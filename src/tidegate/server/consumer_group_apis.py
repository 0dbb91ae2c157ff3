"""Request handlers of KIP-848's consumer group protocol, for
:class:`tidegate.server.kafka_apis.KafkaApis`: ConsumerGroupHeartbeat (v0-v1) and
ConsumerGroupDescribe (v0-v1), over the sans-IO
:class:`~tidegate.coordinator.group.modern.consumer.consumer_group_manager.ConsumerGroupManager`.

Both answer UNSUPPORTED_VERSION unless ``consumer`` is one of
``group.coordinator.rebalance.protocols`` (Kafka's KafkaApis then). The ACL checks before
the coordinator (READ on the group, DESCRIBE on every subscribed topic name; DESCRIBE on
each described group) are the authorization step's (server/authorization.py); here, as
Kafka's GroupCoordinatorService: a regular expression resolves only to topics the member's
principal may DESCRIBE, and a described group with a topic the principal may not DESCRIBE
in any member's assignment answers TOPIC_AUTHORIZATION_FAILED without its members.

A heartbeat is answered once what it wrote to ``__consumer_offsets`` is durable (through
``respond``, possibly during the handler: the answer then is the request's outcome).
"""

from __future__ import annotations

import functools

from tidegate.config import BrokerConfig
from tidegate.coordinator.group.modern.consumer.consumer_group_manager import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    ConsumerGroupManager,
)
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import PARKED, Parked, Request
from tidegate.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
from tidegate.protocol.messages.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from tidegate.server.authorization import AuthorizationStep
from tidegate.server.request_handler_helper import Respond

__all__ = ["ConsumerGroupApis", "heartbeat_response"]


def heartbeat_response(result: ConsumerGroupHeartbeatResult) -> ConsumerGroupHeartbeatResponse:
    """The coordinator's answer as the response message (assignment None: not sent)."""
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in result.assignment.items()
        ])  # fmt: skip
    return ConsumerGroupHeartbeatResponse(
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms,
        assignment=assignment,
    )


class ConsumerGroupApis:
    def __init__(
        self,
        config: BrokerConfig,
        consumer_groups: ConsumerGroupManager,
        authorization: AuthorizationStep,
        *,
        respond: Respond,
    ) -> None:
        #: group.coordinator.rebalance.protocols includes consumer
        self.enabled = "consumer" in config.get("group.coordinator.rebalance.protocols")
        self.consumer_groups = consumer_groups
        self.authorization = authorization
        #: answers a parked request (RequestHandlerHelper.send_response)
        self.respond = respond

    def handle_consumer_group_heartbeat(self, request: Request) -> ConsumerGroupHeartbeatResponse | Parked:
        if not self.enabled:
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.unsupported_version)
        header, req = request.header, request.body_as(ConsumerGroupHeartbeatRequest)
        owned = req.topic_partitions
        heartbeat = ConsumerGroupHeartbeat(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout,
            subscribed_topic_names=req.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex if header.api_version >= 1 else None,
            server_assignor=req.server_assignor,
            topic_partitions=None if owned is None else [(tp.topic_id, tp.partitions) for tp in owned],
            api_version=header.api_version,
            client_id=header.client_id or "",
            client_host="/" + request.context.client_address,
            topic_filter=(
                None if self.authorization.authorizer is None
                else functools.partial(self.authorization.describable_topics, request)
            ),
        )  # fmt: skip
        self.consumer_groups.consumer_group_heartbeat(
            heartbeat, lambda result: self.respond(request, heartbeat_response(result))
        )
        return PARKED

    def handle_consumer_group_describe(self, request: Request) -> ConsumerGroupDescribeResponse:
        req = request.body_as(ConsumerGroupDescribeRequest)
        if not self.enabled:
            return ConsumerGroupDescribeResponse(groups=[
                DescribedGroup(error_code=ErrorCode.unsupported_version, group_id=g) for g in req.group_ids
            ])  # fmt: skip
        groups = self.consumer_groups.consumer_group_describe(req.group_ids)
        if self.authorization.authorizer is not None:
            for group in groups:
                self.authorization.hide_undescribable_group(request, group, {
                    tp.topic_name
                    for m in group.members
                    for tp in (*m.assignment.topic_partitions, *m.target_assignment.topic_partitions)
                })  # fmt: skip
        return ConsumerGroupDescribeResponse(groups=groups)
