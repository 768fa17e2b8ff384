"""A share group's settings asked of the broker keeping them.

A group's ``share.*`` settings are kept by the leader of the group id's
``__share_group_state`` partition, while its group coordinator (the leader of its
``__consumer_offsets`` partition, which starts new share-partitions where
``share.auto.offset.reset`` says) may be another broker: it asks with DescribeConfigs
(resource type GROUP) over the inter-broker listener and reads the entries whose
source is GROUP_CONFIG.
"""

from __future__ import annotations

import structlog

from broker.share import group_configs
from broker.share.group import ShareGroupSettings
from broker.share.persister import PeerRequester
from config.types import ConfigSource
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)

log = structlog.get_logger(__name__)

#: DescribeConfigs v1+ says where each value comes from.
DESCRIBE_CONFIGS_VERSION = 4


async def remote_settings(peers: PeerRequester, broker_id: int, group_id: str,
                          timeout_s: float) -> ShareGroupSettings | None:
    """The group's settings at ``broker_id`` (None: no answer, or an error)."""
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequestDescribeConfigsResource(
        resource_type=group_configs.GROUP, resource_name=group_id, configuration_keys=None)])
    response = await peers.request(broker_id, request, DescribeConfigsResponse, timeout_s,
                                   DESCRIBE_CONFIGS_VERSION)
    if response is None or not response.results or response.results[0].error_code != ErrorCode.NONE:
        log.info("share_group_settings_unavailable", group_id=group_id, broker_id=broker_id)
        return None
    ops = [(c.name, group_configs.SET, c.value) for c in response.results[0].configs
           if c.config_source == ConfigSource.GROUP_CONFIG and c.name in group_configs.NAMES]
    try:
        return group_configs.apply(ShareGroupSettings(), ops)
    except group_configs.GroupConfigError as ex:
        log.warning("share_group_settings_unreadable", group_id=group_id, broker_id=broker_id, error=str(ex))
        return None
