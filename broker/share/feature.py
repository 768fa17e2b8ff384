"""Whether share groups are served: as in Kafka 4, only while the cluster's finalized
``share.version`` is 1 or more. Every share-group API (heartbeat, describe, fetch,
acknowledge, the offset APIs) answers UNSUPPORTED_VERSION otherwise."""

from __future__ import annotations

from controller.features import SHARE_VERSION, level
from controller.image import MetadataImage

DISABLED_MESSAGE = "Share groups are not enabled (share.version is 0)."


def share_groups_enabled(image: MetadataImage) -> bool:
    return level(image.features, SHARE_VERSION) >= 1
