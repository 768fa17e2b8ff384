"""The controller calls handlers make, sent to the active controller (this node's own in process).

:class:`RemoteController` gives the handlers the same calls as the in-process
:class:`controller.service.Controller` (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs/IncrementalAlterConfigs, ACLs, client quotas, SCRAM credentials,
AllocateProducerIds) and forwards each as the Kafka request to the active controller
over the :class:`broker.cluster.controller_channel.ControllerChannel`, as Kafka's KRaft brokers
forward admin changes. After a change it waits, briefly, until this broker's metadata
shows it, so a client that created a topic finds it in the next Metadata answer.
"""


from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog

from broker.cluster.controller_channel import (
    OP_DELETE,
    OP_SET,
    PROPAGATION_WAIT_S,
    ControllerChannel,
    ControllerRequestError,
)
from broker.cluster.feature_requests import forward_update_features
from broker.quotas.quota_requests import QuotaChange, forward_alter_client_quotas
from broker.security.acl_requests import DeleteOutcome, forward_create_acls, forward_delete_acls
from controller.acls import AclFilter, StandardAcl
from controller.delta import MetadataPublisher, image_publisher
from controller.elections import PREFERRED, ElectionOutcome
from controller.features import FeatureUpdate
from controller.image import (
    BROKER_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    Endpoint,
    MetadataImage,
)
from controller.reassignment import ReassignmentOutcome
from controller.service import CreateTopicResult, TopicRequest
from wire.errors import ErrorCode
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableReplicaAssignment,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)
from wire.generated.api_020_delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsRequestDeleteTopicState,
    DeleteTopicsResponse,
)
from wire.generated.api_033_alter_configs import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
)
from wire.generated.api_037_create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsRequestCreatePartitionsAssignment,
    CreatePartitionsRequestCreatePartitionsTopic,
    CreatePartitionsResponse,
)
from wire.generated.api_043_elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersRequestTopicPartitions,
    ElectLeadersResponse,
)
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from wire.generated.api_045_alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsRequestReassignablePartition,
    AlterPartitionReassignmentsRequestReassignableTopic,
    AlterPartitionReassignmentsResponse,
)
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from wire.generated.api_067_allocate_producer_ids import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)

log = structlog.get_logger(__name__)



WaitForImage = Callable[[Callable[[MetadataImage], bool], float], Awaitable[bool]]


class RemoteController:
    """The controller calls the handlers make, forwarded to the active controller.

    Also stands in for the in-process controller where the node reads metadata
    (``image``, ``add_metadata_publisher``) and registers the broker
    (``register_broker``, which runs :class:`BrokerLifecycle`).
    """

    def __init__(
        self,
        channel: ControllerChannel,
        image: Callable[[], MetadataImage],
        add_metadata_publisher: Callable[[MetadataPublisher], None],
        wait_for_image: WaitForImage,
        register: Callable[[int, Sequence[Endpoint], str | None], Awaitable[int]],
        bootstrap: Callable[[], Awaitable[None]] | None = None,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.channel = channel
        self._image = image
        self._add_metadata_publisher = add_metadata_publisher
        self._wait_for_image = wait_for_image
        self._register = register
        self._bootstrap = bootstrap
        self.request_timeout_s = request_timeout_s

    @property
    def image(self) -> MetadataImage:
        return self._image()

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._add_metadata_publisher(image_publisher(listener))

    def add_metadata_publisher(self, publisher: MetadataPublisher) -> None:
        self._add_metadata_publisher(publisher)

    async def bootstrap(self) -> None:
        """The active controller writes the bootstrap records: this node's own, if it is active now."""
        if self._bootstrap is not None:
            await self._bootstrap()

    async def register_broker(self, broker_id: int, endpoints: Sequence[Endpoint], rack: str | None) -> int:
        return await self._register(broker_id, endpoints, rack)

    async def create_topics(
        self, requests: Sequence[TopicRequest], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequestCreatableTopic(
                    name=r.name,
                    num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                    assignments=[CreateTopicsRequestCreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                                 for i, b in r.assignment_pairs()],
                    configs=[CreateTopicsRequestCreatableTopicConfig(name=k, value=v)
                             for k, v in sorted(r.configs.items())],
                )
                for r in requests
            ],
            timeout_ms=int(self.request_timeout_s * 1000),
            validate_only=validate_only,
        )
        reply = await self.channel.send_to_active(
            request, CreateTopicsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.topics))
        results = [
            CreateTopicResult(
                name=t.name,
                error=ErrorCode.for_code(t.error_code),
                message=t.error_message,
                topic_id=t.topic_id,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
            )
            for t in reply.topics
        ]
        created = {r.topic_id for r in results if r.error == ErrorCode.NONE}
        if created and not validate_only:
            await self._wait_for_image(lambda image: created <= set(image.topics_by_id), PROPAGATION_WAIT_S)
        return results

    async def delete_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequestDeleteTopicState(name=n) for n in names],
            topic_names=list(names),
            timeout_ms=int(self.request_timeout_s * 1000),
        )
        reply = await self.channel.send_to_active(
            request, DeleteTopicsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
        out = {t.name or "": ErrorCode.for_code(t.error_code) for t in reply.responses}
        gone = {name for name, code in out.items() if code == ErrorCode.NONE}
        if gone:
            await self._wait_for_image(lambda image: not gone & set(image.topic_ids), PROPAGATION_WAIT_S)
        return out

    async def create_partitions(
        self, changes: Sequence[tuple[str, int, list[list[int]] | None]], validate_only: bool
    ) -> dict[str, tuple[ErrorCode, str | None]]:
        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsRequestCreatePartitionsTopic(
                    name=name, count=count,
                    assignments=None if assignments is None else [
                        CreatePartitionsRequestCreatePartitionsAssignment(broker_ids=list(a)) for a in assignments],
                )
                for name, count, assignments in changes
            ],
            timeout_ms=int(self.request_timeout_s * 1000),
            validate_only=validate_only,
        )
        reply = await self.channel.send_to_active(
            request, CreatePartitionsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.results))
        out = {t.name: (ErrorCode.for_code(t.error_code), t.error_message) for t in reply.results}
        grown = {name: count for name, count, _ in changes if out.get(name, (None,))[0] == ErrorCode.NONE}
        if grown and not validate_only:
            def done(image: MetadataImage) -> bool:
                return all((t := image.topic(n)) is not None and len(t.partitions) >= c for n, c in grown.items())

            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return out

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        reply = await self.channel.send_to_active(
            request, AlterUserScramCredentialsResponse, timeout_s=self.request_timeout_s,
            not_controller=lambda r: any(u.error_code == ErrorCode.NOT_CONTROLLER for u in r.results))
        ok = {u.user for u in reply.results if u.error_code == ErrorCode.NONE}
        upserted = {(u.name, u.mechanism, u.salt) for u in request.upsertions if u.name in ok}
        deleted = {(d.name, d.mechanism) for d in request.deletions if d.name in ok}

        def done(image: MetadataImage) -> bool:
            credentials = image.scram_credentials
            return all((found := credentials.get((name, mechanism))) is not None and found.salt == salt
                       for name, mechanism, salt in upserted) and not any(key in credentials for key in deleted)

        if upserted or deleted:
            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return reply

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionOutcome]:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions or ():
            topics.setdefault(topic, []).append(index)
        request = ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=None if partitions is None else [
                ElectLeadersRequestTopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()],
            timeout_ms=int(self.request_timeout_s * 1000),
        )
        reply = await self.channel.send_to_active(request, ElectLeadersResponse, timeout_s=self.request_timeout_s)
        out = {
            (t.topic, r.partition_id): ElectionOutcome(ErrorCode.for_code(r.error_code), r.error_message)
            for t in reply.replica_election_results for r in t.partition_result
        }
        elected = [tp for tp, o in out.items() if o.error == ErrorCode.NONE]
        if elected:
            def done(image: MetadataImage) -> bool:
                for name, index in elected:
                    topic = image.topic(name)
                    part = topic.partitions.get(index) if topic is not None else None
                    if part is None or part.leader < 0 or (
                            election_type == PREFERRED and part.leader != part.replicas[0]):
                        return False
                return True

            await self._wait_for_image(done, PROPAGATION_WAIT_S)
        return out

    async def alter_reassignments(
        self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> dict[tuple[str, int], ReassignmentOutcome]:
        topics: dict[str, AlterPartitionReassignmentsRequestReassignableTopic] = {}
        for name, index, target in requests:
            topic = topics.setdefault(name, AlterPartitionReassignmentsRequestReassignableTopic(name=name))
            topic.partitions.append(AlterPartitionReassignmentsRequestReassignablePartition(
                partition_index=index, replicas=None if target is None else list(target)))
        request = AlterPartitionReassignmentsRequest(timeout_ms=int(self.request_timeout_s * 1000),
                                                     topics=list(topics.values()))
        reply = await self.channel.send_to_active(request, AlterPartitionReassignmentsResponse,
                                                  timeout_s=self.request_timeout_s)
        if reply.error_code != ErrorCode.NONE:
            return {(n, i): ReassignmentOutcome(ErrorCode.for_code(reply.error_code), reply.error_message)
                    for n, i, _ in requests}
        return {(t.name, p.partition_index): ReassignmentOutcome(ErrorCode.for_code(p.error_code), p.error_message)
                for t in reply.responses for p in t.partitions}

    async def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        replace_all: bool,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        code: int
        message: str | None
        if replace_all:
            legacy = AlterConfigsRequest(
                resources=[AlterConfigsRequestAlterConfigsResource(
                    resource_type=resource_type, resource_name=resource_name,
                    configs=[AlterConfigsRequestAlterableConfig(name=k, value=v)
                             for k, v in sorted(changes.items()) if v is not None])],
                validate_only=validate_only,
            )
            reply = await self.channel.send_to_active(
                legacy, AlterConfigsResponse, timeout_s=self.request_timeout_s,
                not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
            code, message = reply.responses[0].error_code, reply.responses[0].error_message
        else:
            incremental = IncrementalAlterConfigsRequest(
                resources=[IncrementalAlterConfigsRequestAlterConfigsResource(
                    resource_type=resource_type, resource_name=resource_name,
                    configs=[IncrementalAlterConfigsRequestAlterableConfig(
                        name=k, config_operation=OP_DELETE if v is None else OP_SET, value=v)
                        for k, v in sorted(changes.items())])],
                validate_only=validate_only,
            )
            inc = await self.channel.send_to_active(
                incremental, IncrementalAlterConfigsResponse, timeout_s=self.request_timeout_s,
                not_controller=lambda r: any(t.error_code == ErrorCode.NOT_CONTROLLER for t in r.responses))
            code, message = inc.responses[0].error_code, inc.responses[0].error_message
        result = ErrorCode.for_code(code)
        if result == ErrorCode.NONE and not validate_only and resource_type in (TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE):
            expected = dict(changes)

            def shown(image: MetadataImage) -> bool:
                current = image.configs.get((resource_type, resource_name), {})
                if replace_all:
                    return dict(current) == {k: v for k, v in expected.items() if v is not None}
                return all(current.get(k) == v for k, v in expected.items())

            await self._wait_for_image(shown, PROPAGATION_WAIT_S)
        return result, message

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[tuple[ErrorCode, str | None]]:
        return await forward_create_acls(self.channel, self.request_timeout_s, self._wait_for_image,
                                         PROPAGATION_WAIT_S, acls)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeleteOutcome]:
        return await forward_delete_acls(self.channel, self.request_timeout_s, self._wait_for_image,
                                         PROPAGATION_WAIT_S, filters)

    async def alter_client_quotas(self, changes: Sequence[QuotaChange],
                                  validate_only: bool) -> list[tuple[ErrorCode, str | None]]:
        return await forward_alter_client_quotas(self.channel, self.request_timeout_s, self._wait_for_image,
                                                 PROPAGATION_WAIT_S, changes, validate_only)

    async def update_features(self, updates: Sequence[FeatureUpdate],
                              validate_only: bool) -> tuple[ErrorCode, str | None]:
        return await forward_update_features(self.channel, self.request_timeout_s, self._wait_for_image,
                                             PROPAGATION_WAIT_S, updates, validate_only)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        reply = await self.channel.send_to_active(
            AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch),
            AllocateProducerIdsResponse, timeout_s=self.request_timeout_s)
        if reply.error_code != ErrorCode.NONE:
            raise ControllerRequestError(ErrorCode.for_code(reply.error_code), "AllocateProducerIds failed")
        return reply.producer_id_start, reply.producer_id_len


