"""Whether share groups are served: as in Kafka 4, only while the cluster's finalized
``share.version`` is 1 or more. Every share-group API (heartbeat, describe, fetch,
acknowledge, the offset APIs) answers UNSUPPORTED_VERSION otherwise.

Share groups' dead-letter topics (KIP-1191, broker/share/dead_letters.py) are written only
while it is 2 or more (Kafka 4.4's ``ShareVersion.supportsShareGroupDLQ``)."""

from __future__ import annotations

from controller.features import SHARE_VERSION, level
from controller.image import MetadataImage

DISABLED_MESSAGE = "Share groups are not enabled (share.version is 0)."
#: The share.version from which archived records are copied to a group's dead-letter topic.
DEAD_LETTER_QUEUE_SHARE_VERSION = 2


def share_groups_enabled(image: MetadataImage) -> bool:
    return level(image.features, SHARE_VERSION) >= 1


def dead_letter_queues_enabled(image: MetadataImage) -> bool:
    return level(image.features, SHARE_VERSION) >= DEAD_LETTER_QUEUE_SHARE_VERSION
