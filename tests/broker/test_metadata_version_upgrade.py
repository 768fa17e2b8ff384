"""A data dir finalized at metadata.version 4.0-IV3 (25), as this software wrote them before
Kafka 4.1-4.3's levels, still starts at 25 and is upgraded online to 4.3-IV0 (30) by
``cormorant features upgrade --release-version 4.3``, which every later start keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.cli import main
from broker.cluster.cluster_mode import METADATA_DIR
from broker.tools.client import KafkaClient
from controller.quorum import LocalQuorum
from tests.broker.broker_process import BrokerProcess
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord


def finalized(broker: BrokerProcess) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    with KafkaClient.connect(broker.bootstrap) as c:
        r = c.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), ApiVersionsResponse, 3)
    return ({f.name: f.max_version_level for f in r.finalized_features},
            {f.name: (f.min_version, f.max_version) for f in r.supported_features})


def finalize_metadata_version(data_dir: Path, level: int) -> None:
    """Appends a FeatureLevelRecord to the stopped node's metadata journal."""
    async def append() -> None:
        quorum = LocalQuorum(1, data_dir / METADATA_DIR)
        try:
            await quorum.append([FeatureLevelRecord(name="metadata.version", feature_level=level)])
        finally:
            quorum.close()
    trio.run(append)


def test_a_data_dir_at_4_0_iv3_starts_and_is_upgraded_online(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        levels, supported = finalized(broker)
        assert levels["metadata.version"] == 30 and supported["metadata.version"] == (7, 30)
    finally:
        assert broker.stop() == 0
    finalize_metadata_version(data, 25)
    broker = BrokerProcess(data).start()
    try:
        levels, _ = finalized(broker)
        assert levels == {"metadata.version": 25, "group.version": 1, "transaction.version": 2, "share.version": 1}
        assert main(["features", "--bootstrap-server", broker.bootstrap, "upgrade", "--release-version", "4.3"]) == 0
        assert capsys.readouterr().out.splitlines()[0] == "metadata.version was upgraded to 4.3-IV0."
        assert finalized(broker)[0]["metadata.version"] == 30
    finally:
        assert broker.stop() == 0
    broker = BrokerProcess(data).start()
    try:
        assert finalized(broker)[0]["metadata.version"] == 30
    finally:
        assert broker.stop() == 0
