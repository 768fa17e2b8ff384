"""DescribeConfigs of a BROKER resource with node.id, broker.id, both or neither set.

Kafka treats the two as synonyms (its populateSynonyms copies whichever is given into the
other): both are reported as static settings with the node's id, whichever was set, in
every version, for all keys or named ones, with and without synonyms. (The 3-node
cluster, whose nodes set only node.id, is covered by compat_tests/test_cluster_mode.py.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from config import ConfigSource
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseDescribeConfigsResult,
)

BROKER = 4
NODE_ID = 5
#: Cormorant's node.id default (a node started without either setting).
DEFAULT_NODE_ID = 1

SETTINGS = {
    "node.id": {"node.id": str(NODE_ID)},
    "broker.id": {"broker.id": str(NODE_ID)},
    "both": {"node.id": str(NODE_ID), "broker.id": str(NODE_ID)},
    "neither": {},
}


@pytest.fixture(scope="module", params=list(SETTINGS))
def configured(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BrokerProcess]]:
    name: str = request.param
    broker = BrokerProcess(tmp_path_factory.mktemp(f"ids-{name}") / "data", SETTINGS[name]).start()
    try:
        yield name, broker
    finally:
        assert broker.stop() == 0, broker.logs()[-3000:]


def describe(broker: BrokerProcess, node_id: int, keys: list[str] | None, synonyms: bool,
             version: int) -> DescribeConfigsResponseDescribeConfigsResult:
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsRequestDescribeConfigsResource(
            resource_type=BROKER, resource_name=str(node_id), configuration_keys=keys)],
        include_synonyms=synonyms)
    with KafkaClient.connect(broker.bootstrap, timeout_s=10) as client:
        result = client.send(request, DescribeConfigsResponse, version).results[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    return result


@pytest.mark.parametrize("keys", [None, ["broker.id"], ["node.id"], ["broker.id", "node.id"]])
@pytest.mark.parametrize("version", [1, 4])
def test_broker_id_and_node_id_are_described_whichever_is_set(
    configured: tuple[str, BrokerProcess], keys: list[str] | None, version: int
) -> None:
    name, broker = configured
    node_id = DEFAULT_NODE_ID if name == "neither" else NODE_ID
    source = ConfigSource.DEFAULT_CONFIG if name == "neither" else ConfigSource.STATIC_BROKER_CONFIG
    result = describe(broker, node_id, keys, True, version)
    entries = {c.name: c for c in result.configs}
    wanted = keys or ["broker.id", "node.id"]
    assert set(wanted) <= set(entries)
    for key in wanted:
        entry = entries[key]
        assert entry.value == str(node_id), (key, entry.value)
        assert entry.config_source == source, (key, entry.config_source)
        assert entry.synonyms, key
        assert all(s.name == key for s in entry.synonyms), entry.synonyms
        if source is ConfigSource.STATIC_BROKER_CONFIG:
            first = entry.synonyms[0]
            assert (first.value, first.source) == (str(NODE_ID), ConfigSource.STATIC_BROKER_CONFIG)
        assert entry.synonyms[-1].source == ConfigSource.DEFAULT_CONFIG
    without = describe(broker, node_id, keys, False, version)
    assert {c.name: c.value for c in without.configs if c.name in wanted} == dict.fromkeys(wanted, str(node_id))
    assert all(not c.synonyms for c in without.configs)
