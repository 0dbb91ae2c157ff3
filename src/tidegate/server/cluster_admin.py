"""The cluster and its KRaft quorum as a single-node cluster answers them: DescribeCluster,
DescribeQuorum, ElectLeaders, Alter/ListPartitionReassignments, UnregisterBroker,
Add/RemoveRaftVoter, ListConfigResources and DescribeProducers, for
:class:`~tidegate.server.kafka_apis.KafkaApis`.

On a one-node KRaft cluster this node is the only broker, the controller and the one
voter of the metadata quorum: Kafka's ``ControllerApis``, ``ReplicationControlManager``
and ``KafkaRaftClient`` answers are reproduced with their error codes and messages
(every partition already has its preferred leader, no reassignment is ever in
progress, the voter set is static).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from tidegate.clock import Clock
from tidegate.coordinator.group.group_config import GroupConfigManager
from tidegate.errors import ErrorCode
from tidegate.network.request_channel import Request
from tidegate.protocol.messages._base import ZERO_UUID
from tidegate.protocol.messages.add_raft_voter import AddRaftVoterRequest, AddRaftVoterResponse
from tidegate.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from tidegate.protocol.messages.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from tidegate.protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from tidegate.protocol.messages.describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeQuorumResponsePartitionData,
    DescribeQuorumResponseTopicData,
    Listener,
    Node,
    ReplicaState,
)
from tidegate.protocol.messages.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from tidegate.protocol.messages.list_config_resources import (
    ConfigResource,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from tidegate.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsResponse,
)
from tidegate.protocol.messages.remove_raft_voter import (
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)
from tidegate.protocol.messages.unregister_broker import (
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from tidegate.server.config_admin import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from tidegate.server.endpoints import Endpoints
from tidegate.server.metadata import TopicInfo, TopicStore
from tidegate.server.replica_manager import ReplicaManager
from tidegate.utils.topic import InvalidTopicError, validate_topic_name

log = logging.getLogger(__name__)

#: The KRaft metadata log (DescribeQuorum's only partition) and this voter's leader epoch:
#: the one election a single voter wins. tidegate's metadata is a JSON document, not a
#: replicated log, so the quorum reports an empty log (end offset and high watermark 0).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
QUORUM_LEADER_EPOCH = 1
QUORUM_HIGH_WATERMARK = 0
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
#: DescribeCluster's endpoint type of the brokers' listeners (2: the controllers')
ENDPOINT_TYPE_BROKERS = 1
#: Kafka's default messages (Errors.message()) for the errors answered with them.
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
#: The config resource types ListConfigResources v1 lists (Kafka's
#: ``ListConfigResourcesRequest.supportedResourceTypes``; v0 has CLIENT_METRICS only).
LIST_CONFIG_RESOURCES_V1 = (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER,
                            RESOURCE_CLIENT_METRICS, RESOURCE_GROUP)


class ClusterAdminApis:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        replicas: ReplicaManager,
        store: TopicStore,
        endpoints: Endpoints,
        clock: Clock,
        group_configs: GroupConfigManager,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.replicas = replicas
        self.store = store
        self.endpoints = endpoints
        #: its wall clock stamps this voter's fetch times in DescribeQuorum
        self.clock = clock
        #: the groups with configs (ListConfigResources lists them)
        self.group_configs = group_configs

    # -- DescribeCluster --------------------------------------------------------------------------
    def handle_describe_cluster(self, request: Request) -> DescribeClusterResponse:
        req = request.body_as(DescribeClusterRequest)
        if req.endpoint_type != ENDPOINT_TYPE_BROKERS:
            return DescribeClusterResponse(
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message="tidegate has no separate controller endpoints",
                endpoint_type=req.endpoint_type,
                cluster_id=self.cluster_id,
            )
        host, port = self.endpoints.endpoint(request.context)
        return DescribeClusterResponse(
            cluster_id=self.cluster_id,
            controller_id=self.node_id,
            brokers=[DescribeClusterBroker(broker_id=self.node_id, host=host, port=port)],
        )

    # -- DescribeProducers ----------------------------------------------------------------------
    def handle_describe_producers(self, request: Request) -> DescribeProducersResponse:
        """The producers each partition tracks (Kafka's ``UnifiedLog.activeProducers``)."""
        topics = []
        for t in request.body_as(DescribeProducersRequest).topics:
            topic_error: tuple[ErrorCode, str] | None = None
            try:
                validate_topic_name(t.name)
            except InvalidTopicError as exc:
                topic_error = (ErrorCode.invalid_topic_exception, str(exc))
            if topic_error is None and self.store.get(t.name) is None:
                topic_error = (ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)
            parts = []
            for index in t.partition_indexes:
                part = PartitionResponse(partition_index=index)
                parts.append(part)
                if topic_error is not None:
                    part.error_code, part.error_message = topic_error
                    continue
                plog = self.replicas.get_log(t.name, index)
                if plog is None:
                    part.error_code = ErrorCode.unknown_topic_or_partition
                    continue
                part.active_producers = [
                    ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                                  last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                                  coordinator_epoch=e.coordinator_epoch,
                                  current_txn_start_offset=e.current_txn_first_offset)
                    for _pid, e in sorted(plog.producer_state.producers.items())
                ]  # fmt: skip
            topics.append(TopicResponse(name=t.name, partitions=parts))
        return DescribeProducersResponse(topics=topics)

    # -- ElectLeaders, partition reassignments ---------------------------------------------------
    def handle_elect_leaders(self, request: Request) -> ElectLeadersResponse:
        """Kafka's controller (``ReplicationControlManager.electLeaders``) on one broker:
        every partition already has its preferred leader, this node, so each asked
        partition is ELECTION_NOT_NEEDED; asked for all partitions (null), every topic is
        listed with none (Kafka leaves out the partitions that need no election)."""
        req = request.body_as(ElectLeadersRequest)
        if req.election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            message = f"Unknown election type {req.election_type}"
            return ElectLeadersResponse(error_code=ErrorCode.invalid_request, replica_election_results=[
                ReplicaElectionResult(topic=t.topic, partition_result=[
                    PartitionResult(partition_id=p, error_code=ErrorCode.invalid_request, error_message=message)
                    for p in t.partitions])
                for t in req.topic_partitions or ()])  # fmt: skip
        if req.topic_partitions is None:
            return ElectLeadersResponse(
                replica_election_results=[ReplicaElectionResult(topic=name) for name in sorted(self.store.topics)]
            )
        results = []
        for t in req.topic_partitions:
            info = self.store.get(t.topic)
            parts = []
            for p in t.partitions:
                if info is None:
                    code, message = ErrorCode.unknown_topic_or_partition, f"No such topic as {t.topic}"
                elif not 0 <= p < info.partitions:
                    code, message = ErrorCode.unknown_topic_or_partition, f"No such partition as {t.topic}-{p}"
                else:
                    # preferred: this node already leads; unclean: there is a leader
                    code, message = ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
                parts.append(PartitionResult(partition_id=p, error_code=code, error_message=message))
            results.append(ReplicaElectionResult(topic=t.topic, partition_result=parts))
        return ElectLeadersResponse(replica_election_results=results)

    def handle_alter_partition_reassignments(self, request: Request) -> AlterPartitionReassignmentsResponse:
        """Kafka's controller (``alterPartitionReassignment``): the only possible target is
        this node, where every replica already is (no change, NONE); other brokers are not
        registered; nothing is ever in progress to cancel."""
        responses = []
        for t in request.body_as(AlterPartitionReassignmentsRequest).topics:
            info = self.store.get(t.name)
            parts = []
            for p in t.partitions:
                code, message = self._reassign(t.name, info, p.partition_index, p.replicas)
                if code is not ErrorCode.none:
                    log.info("Unable to alter partition reassignment for %s:%d: %s", t.name,
                             p.partition_index, message)
                parts.append(ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                           error_message=message))
            responses.append(ReassignableTopicResponse(name=t.name, partitions=parts))
        return AlterPartitionReassignmentsResponse(responses=responses)

    def _reassign(
        self, topic: str, info: TopicInfo | None, partition: int, replicas: list[int] | None
    ) -> tuple[ErrorCode, str | None]:
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
        if not 0 <= partition < info.partitions:
            return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}:{partition}."
        if replicas is None:
            # cancel: Kafka's NoReassignmentInProgressException carries the default message,
            # which ApiError.fromThrowable leaves out
            return ErrorCode.no_reassignment_in_progress, None
        invalid = ErrorCode.invalid_replica_assignment
        if not replicas:
            return invalid, "The manual partition assignment includes an empty replica list."
        previous = None
        for broker in sorted(replicas):
            if broker != self.node_id:
                return invalid, (
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered."
                )
            if broker == previous:
                return invalid, (
                    f"The manual partition assignment includes the broker {previous} more "
                    "than once."
                )
            previous = broker
        return ErrorCode.none, None  # [this node]: the current assignment, nothing to change

    def handle_list_partition_reassignments(self, request: Request) -> ListPartitionReassignmentsResponse:
        """No reassignment is ever in progress on one broker: nothing to list."""
        return ListPartitionReassignmentsResponse()

    # -- the KRaft quorum: DescribeQuorum, AddRaftVoter, RemoveRaftVoter, UnregisterBroker --------
    def handle_describe_quorum(self, request: Request) -> DescribeQuorumResponse:
        """A quorum of one voter, this node, leading the metadata log (Kafka's
        ``KafkaRaftClient.handleDescribeQuorumRequest``). The voter set is static
        (kraft.version 0): no directory id, as with ``controller.quorum.voters``."""
        topics = request.body_as(DescribeQuorumRequest).topics
        if not (
            len(topics) == 1
            and topics[0].topic_name == CLUSTER_METADATA_TOPIC
            and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0
        ):
            return DescribeQuorumResponse(topics=[
                DescribeQuorumResponseTopicData(topic_name=t.topic_name, partitions=[
                    DescribeQuorumResponsePartitionData(
                        partition_index=p.partition_index, error_code=ErrorCode.unknown_topic_or_partition,
                        error_message=UNKNOWN_TOPIC_OR_PARTITION_MESSAGE, leader_id=-1, leader_epoch=-1,
                        high_watermark=-1)
                    for p in t.partitions])
                for t in topics])  # fmt: skip
        now_ms = self.clock.wall_milliseconds()
        # the leader is always caught up (Kafka reports the current time for itself)
        voter = ReplicaState(replica_id=self.node_id, log_end_offset=QUORUM_HIGH_WATERMARK,
                             last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)  # fmt: skip
        partition = DescribeQuorumResponsePartitionData(
            leader_id=self.node_id, leader_epoch=QUORUM_LEADER_EPOCH, high_watermark=QUORUM_HIGH_WATERMARK,
            current_voters=[voter],
        )  # fmt: skip
        listeners = [Listener(name=name, host=host, port=port) for name, host, port in self.endpoints.listeners()]
        return DescribeQuorumResponse(
            topics=[DescribeQuorumResponseTopicData(topic_name=CLUSTER_METADATA_TOPIC, partitions=[partition])],
            nodes=[Node(node_id=self.node_id, listeners=listeners)],
        )

    def handle_add_raft_voter(self, request: Request) -> AddRaftVoterResponse:
        req = request.body_as(AddRaftVoterRequest)
        code, message = self._raft_voter_change(
            req.cluster_id, req.voter_id, req.voter_directory_id, "adding", "Add"
        )
        return AddRaftVoterResponse(error_code=code, error_message=message)

    def handle_remove_raft_voter(self, request: Request) -> RemoveRaftVoterResponse:
        req = request.body_as(RemoveRaftVoterRequest)
        code, message = self._raft_voter_change(
            req.cluster_id, req.voter_id, req.voter_directory_id, "removing", "Remove"
        )
        return RemoveRaftVoterResponse(error_code=code, error_message=message)

    def _raft_voter_change(
        self, cluster_id: str | None, voter_id: int, directory_id: uuid.UUID, doing: str, verb: str
    ) -> tuple[ErrorCode, str]:
        """Kafka's AddVoterHandler/RemoveVoterHandler on a static voter set (kraft.version
        0): the cluster id must match, the voter must name a directory, and then the
        change is refused with UNSUPPORTED_VERSION as Kafka refuses it."""
        if cluster_id is not None and cluster_id != self.cluster_id:
            return ErrorCode.inconsistent_cluster_id, (
                f'The given id "{cluster_id}" doesn\'t match the cluster id "{self.cluster_id}"'
            )
        if voter_id < 0 or directory_id == ZERO_UUID:
            return ErrorCode.invalid_request, f"{verb} voter request didn't include a valid voter"
        return ErrorCode.unsupported_version, (
            f"Cluster doesn't support {doing} voter because the kraft.version feature is 0"
        )

    def handle_unregister_broker(self, request: Request) -> UnregisterBrokerResponse:
        """Kafka's ``ReplicationControlManager.unregisterBroker``: only this node is
        registered. Unregistering it is accepted and changes nothing: it is the running
        broker and the controller at once, registered again by being up."""
        broker_id = request.body_as(UnregisterBrokerRequest).broker_id
        if broker_id != self.node_id:
            return UnregisterBrokerResponse(error_code=ErrorCode.broker_id_not_registered,
                                            error_message=f"Broker ID {broker_id} is not currently registered")
        log.info("UnregisterBroker for this node (%d): nothing to do on a single node", broker_id)
        return UnregisterBrokerResponse()

    # -- ListConfigResources (KIP-1142; v0 is KIP-714's ListClientMetricsResources) -------------
    def handle_list_config_resources(self, request: Request) -> ListConfigResourcesResponse:
        """The config resources of the requested types (none: every type the version has),
        as Kafka's ``KafkaApis.handleListConfigResources``: groups with configs set, no
        client-metrics subscriptions (no telemetry receiver), this node as BROKER_LOGGER and
        BROKER, every topic. A type the version lacks is UNSUPPORTED_VERSION."""
        supported = LIST_CONFIG_RESOURCES_V1 if request.header.api_version >= 1 else (RESOURCE_CLIENT_METRICS,)
        wanted = request.body_as(ListConfigResourcesRequest).resource_types or list(supported)
        if any(t not in supported for t in wanted):
            return ListConfigResourcesResponse(error_code=ErrorCode.unsupported_version)
        names: list[tuple[int, Iterable[str]]] = [
            (RESOURCE_GROUP, self.group_configs.group_ids()),
            (RESOURCE_CLIENT_METRICS, ()),
            (RESOURCE_BROKER_LOGGER, (str(self.node_id),)),
            (RESOURCE_BROKER, (str(self.node_id),)),
            (RESOURCE_TOPIC, self.store.topic_names()),
        ]
        return ListConfigResourcesResponse(config_resources=[
            ConfigResource(resource_name=name, resource_type=rtype)
            for rtype, of_type in names if rtype in wanted for name in of_type
        ])
