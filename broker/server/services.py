"""What request handlers may use of their broker: the narrow, typed services of
:class:`BrokerServices`, built once by the node (``broker/node.py``, the composition
root) and handed to every request in its :class:`broker.server.dispatch.RequestContext`.

Handlers type against these classes and protocols, never against the node, so that
what a handler can reach is written down here, and adding a member is a decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.cluster.cluster_mode import ClusterMode
    from broker.cluster.controller_api import ControllerApi
    from broker.coordinator import CoordinatorLookup
    from broker.group.coordinator import GroupCoordinator
    from broker.log.manager import LogManager
    from broker.observability.metrics import BrokerMetrics
    from broker.observability.tracing import Tracing
    from broker.quotas.managers import QuotaManagers
    from broker.replication.isr import IsrManager
    from broker.replication.replica_manager import ReplicaManager
    from broker.replication.topic_configs import TopicConfigs
    from broker.security.authorizer import StandardAuthorizer
    from broker.security.password_encoder import DynamicPasswords
    from broker.server.fetch_sessions import FetchSessionCache
    from broker.server.response_errors import ClientErrorLog
    from broker.share.coordinator import ShareCoordinator
    from broker.transaction.coordinator import TransactionCoordinator
    from config import BrokerConfig
    from controller.image import MetadataImage
    from wire.generated.api_018_api_versions import ApiVersionsResponseApiVersion


@dataclass(frozen=True, slots=True)
class BrokerServices:
    node_id: int
    cluster_id: str
    #: The static configuration (dynamic settings are in the image; see ``topic_configs``).
    config: BrokerConfig
    clock_ms: Callable[[], int]
    #: The in-process controller of a single node, or the active controller of a cluster.
    controller: ControllerApi
    topic_configs: TopicConfigs
    replica_manager: ReplicaManager
    log_manager: LogManager
    fetch_sessions: FetchSessionCache
    #: The leader's ISR upkeep (cluster mode only): follower fetches feed it.
    isr_manager: IsrManager | None
    group_coordinator: GroupCoordinator
    transaction_coordinator: TransactionCoordinator
    share_coordinator: ShareCoordinator
    #: FindCoordinator key type -> the coordinator answering it.
    coordinators: Mapping[int, CoordinatorLookup]
    #: Kafka's StandardAuthorizer when authorizer.class.name names it; None: everything is allowed.
    authorizer: StandardAuthorizer | None
    quotas: QuotaManagers
    metrics: BrokerMetrics
    tracing: Tracing
    client_errors: ClientErrorLog
    dynamic_passwords: DynamicPasswords
    #: The APIs and versions this listener's dispatcher serves (ApiVersions).
    api_versions: Callable[[], list[ApiVersionsResponseApiVersion]]
    #: This node's roles in its cluster (a single node is a cluster of one).
    cluster: ClusterMode

    @property
    def image(self) -> MetadataImage:
        """The metadata image as this broker knows it now."""
        return self.controller.image

    def log_client_error(self, event: str, **context: Any) -> None:
        """A line about a client's mistake, rate-limited per event."""
        self.client_errors.log(event, **context)
