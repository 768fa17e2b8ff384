"""share.version 0 turns every share-group API off (UNSUPPORTED_VERSION), as in Kafka 4;
level 1 serves them again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_057_update_features import (
    UpdateFeaturesRequest,
    UpdateFeaturesRequestFeatureUpdateKey,
    UpdateFeaturesResponse,
)
from wire.generated.api_076_share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from wire.generated.api_078_share_fetch import ShareFetchRequest, ShareFetchResponse
from wire.generated.api_079_share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from wire.generated.api_090_describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsResponse,
)
from wire.generated.api_091_alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from wire.generated.api_092_delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)

UNSUPPORTED = ErrorCode.UNSUPPORTED_VERSION
SAFE_DOWNGRADE = 2
UPGRADE = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-gate") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def set_share_version(client: KafkaClient, level: int, upgrade_type: int) -> None:
    response = client.send(UpdateFeaturesRequest(timeout_ms=10_000, feature_updates=[
        UpdateFeaturesRequestFeatureUpdateKey(feature="share.version", max_version_level=level,
                                              upgrade_type=upgrade_type)]), UpdateFeaturesResponse, 1)
    assert response.error_code == ErrorCode.NONE, response.error_message


def errors(client: KafkaClient) -> dict[str, int]:
    member = str(uuid.uuid4())
    heartbeat = client.send(ShareGroupHeartbeatRequest(group_id="gate", member_id=member, member_epoch=0,
                                                       subscribed_topic_names=["t"]), ShareGroupHeartbeatResponse)
    described = client.send(ShareGroupDescribeRequest(group_ids=["gate"]), ShareGroupDescribeResponse)
    fetched = client.send(ShareFetchRequest(group_id="gate", member_id=member, share_session_epoch=0,
                                            max_wait_ms=0, min_bytes=1, max_bytes=1024), ShareFetchResponse)
    acked = client.send(ShareAcknowledgeRequest(group_id="gate", member_id=member, share_session_epoch=1),
                        ShareAcknowledgeResponse)
    offsets = client.send(DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(group_id="gate", topics=None)]), DescribeShareGroupOffsetsResponse)
    altered = client.send(AlterShareGroupOffsetsRequest(group_id="gate"), AlterShareGroupOffsetsResponse)
    deleted = client.send(DeleteShareGroupOffsetsRequest(group_id="gate"), DeleteShareGroupOffsetsResponse)
    return {
        "heartbeat": heartbeat.error_code, "describe": described.groups[0].error_code, "fetch": fetched.error_code,
        "acknowledge": acked.error_code, "describe_offsets": offsets.groups[0].error_code,
        "alter_offsets": altered.error_code, "delete_offsets": deleted.error_code,
    }


def test_share_version_zero_turns_every_share_api_off(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as client:
        on = errors(client)
        assert UNSUPPORTED not in on.values(), on
        set_share_version(client, 0, SAFE_DOWNGRADE)
        try:
            off = errors(client)
            assert off == dict.fromkeys(off, UNSUPPORTED)
        finally:
            set_share_version(client, 1, UPGRADE)
        assert UNSUPPORTED not in errors(client).values()
