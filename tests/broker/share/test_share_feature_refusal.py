"""Which error a share-group request gets while share groups are not served."""

from __future__ import annotations

from broker.share.feature import share_groups_refusal
from controller.features import METADATA_VERSION, SHARE_VERSION
from controller.image import MetadataImage
from wire.errors import ErrorCode


def test_a_broker_that_has_not_loaded_the_features_answers_retriably() -> None:
    # A broker whose image has no feature records yet (it has not replayed the cluster's
    # bootstrap) must not answer UNSUPPORTED_VERSION: librdkafka's share consumer treats that as fatal.
    refusal = share_groups_refusal(MetadataImage())
    assert refusal is not None and refusal[0] is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_share_version_0_is_unsupported_and_1_is_served() -> None:
    disabled = share_groups_refusal(MetadataImage(features={METADATA_VERSION: 27, SHARE_VERSION: 0}))
    assert disabled is not None and disabled[0] is ErrorCode.UNSUPPORTED_VERSION
    assert share_groups_refusal(MetadataImage(features={METADATA_VERSION: 27})) is not None
    assert share_groups_refusal(MetadataImage(features={METADATA_VERSION: 27, SHARE_VERSION: 1})) is None
