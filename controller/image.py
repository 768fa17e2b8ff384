"""MetadataImage: the cluster's metadata as of one offset of the metadata log.

Images are immutable; :func:`controller.state.apply` returns a new image that
shares every unchanged part with the old one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from controller.acls import StandardAcl

EMPTY: Mapping[str, str] = MappingProxyType({})

#: ConfigRecord resource types (as DescribeConfigs/AlterConfigs use them).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CLIENT_METRICS_RESOURCE = 16
GROUP_RESOURCE = 32


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str) -> Endpoint | None:
        for ep in self.endpoints:
            if ep.name == listener:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class PartitionImage:
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()


#: PartitionRecord / PartitionChangeRecord leaders: none, and (in a change) unchanged.
NO_LEADER = -1
NO_CHANGE = -2

#: Topics Kafka keeps for itself (its ``Topic.INTERNAL_TOPICS``): Metadata shows them
#: ``is_internal``; clients may not produce to them or delete their records.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
#: The topics the coordinators create and write (not clients): the group, transaction and
#: share coordinators' state topics, which are exactly the internal topics.
COORDINATOR_TOPICS = INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class ScramCredentialImage:
    """A user's SCRAM credential for one mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class MetadataImage:
    #: Offset of the last record applied (-1 for the empty image).
    offset: int = -1
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)
    brokers: Mapping[int, BrokerImage] = field(default_factory=dict)
    #: (resource type, resource name) -> {config name: value}; broker "" is the cluster default.
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=dict)
    features: Mapping[str, int] = field(default_factory=dict)
    #: First producer id not yet handed out to any broker.
    next_producer_id: int = 0
    #: (user name, SCRAM mechanism type: 1 SHA-256, 2 SHA-512) -> credential.
    scram_credentials: Mapping[tuple[str, int], ScramCredentialImage] = field(default_factory=dict)
    #: ACLs by their id (AccessControlEntryRecord); replaced as a whole when one changes.
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=dict)
    #: Client quotas (ClientQuotaRecord): entity as sorted (type, name) pairs -> {quota key: value}.
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=dict)

    def topic(self, name: str) -> TopicImage | None:
        tid = self.topic_ids.get(name)
        return None if tid is None else self.topics_by_id.get(tid)

    def topic_config(self, name: str) -> Mapping[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), EMPTY)

    def broker_config(self, broker_id: int | str) -> Mapping[str, str]:
        return self.configs.get((BROKER_RESOURCE, str(broker_id)), EMPTY)

    def group_config(self, group_id: str) -> Mapping[str, str]:
        """A group's group configs (config/group.py); empty when it sets none."""
        return self.configs.get((GROUP_RESOURCE, group_id), EMPTY)

    def live_brokers(self) -> list[BrokerImage]:
        return [b for b in self.brokers.values() if not b.fenced]

    def serving_broker_ids(self) -> set[int]:
        """Brokers that may lead or join an ISR: unfenced and not shutting down."""
        return {b.broker_id for b in self.brokers.values() if not b.fenced and not b.in_controlled_shutdown}
