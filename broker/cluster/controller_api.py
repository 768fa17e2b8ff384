"""What a broker asks of the controller, whichever controller that is.

Every node, a single one too, sends each call to the active controller
(:class:`broker.cluster.remote_controller.RemoteController`): in process when that is
this node's own controller, over the controller listener when it is another node's.
Handlers, coordinators and the node type against :class:`ControllerApi` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from controller.acls import AclFilter, StandardAcl
from controller.delta import MetadataPublisher
from controller.elections import ElectionOutcome
from controller.features import FeatureUpdate
from controller.image import Endpoint, MetadataImage
from controller.reassignment import ReassignmentOutcome
from controller.service import CreateTopicResult, TopicRequest
from wire.errors import ErrorCode
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

#: One client-quota entity (pairs of entity type and name) and its keys to set (a value) or remove (None).
QuotaChange = tuple[Sequence[tuple[str, str | None]], Mapping[str, float | None]]
#: Per DeleteAcls filter: its error, message and the ACLs it removed.
DeleteOutcome = tuple[ErrorCode, str | None, list[StandardAcl]]


class MetadataSource(Protocol):
    """The metadata image as this broker knows it now, and a way to hear of every new one."""

    @property
    def image(self) -> MetadataImage: ...

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None: ...

    def add_metadata_publisher(self, publisher: MetadataPublisher) -> None:
        """``publisher(delta, image)`` hears of each new image once, with what changed."""
        ...


class QuorumState(Protocol):
    """The metadata quorum as DescribeQuorum and the metrics report it."""

    @property
    def epoch(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    def is_leader(self) -> bool: ...


class TopicCreator(Protocol):
    """Creating topics (the coordinators create their internal topics through it)."""

    async def create_topics(
        self, requests: Sequence[TopicRequest], validate_only: bool = False
    ) -> list[CreateTopicResult]: ...


class ProducerIdSource(Protocol):
    """Blocks of producer ids (Kafka's AllocateProducerIds), for the transaction coordinator."""

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]: ...


class ControllerApi(MetadataSource, TopicCreator, ProducerIdSource, Protocol):
    """Every call a broker makes on the controller; errors come back as Kafka error codes."""

    async def bootstrap(self) -> None: ...

    async def register_broker(self, broker_id: int, endpoints: Sequence[Endpoint], rack: str | None) -> int: ...

    async def delete_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]: ...

    async def create_partitions(
        self, changes: Sequence[tuple[str, int, list[list[int]] | None]], validate_only: bool
    ) -> dict[str, tuple[ErrorCode, str | None]]: ...

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionOutcome]: ...

    async def alter_reassignments(
        self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> dict[tuple[str, int], ReassignmentOutcome]: ...

    async def alter_configs(
        self, resource_type: int, resource_name: str, changes: Mapping[str, str | None], replace_all: bool,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]: ...

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[tuple[ErrorCode, str | None]]: ...

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeleteOutcome]: ...

    async def alter_client_quotas(
        self, entries: Sequence[QuotaChange], validate_only: bool
    ) -> list[tuple[ErrorCode, str | None]]: ...

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool
    ) -> tuple[ErrorCode, str | None]: ...

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        """Raises NotControllerError when this node's controller is not the active one."""
        ...
