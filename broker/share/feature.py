"""Whether share groups are served: as in Kafka 4, only while the cluster's finalized
``share.version`` is 1 or more. Every share-group API (heartbeat, describe, fetch,
acknowledge, the offset APIs) answers UNSUPPORTED_VERSION otherwise.

Share groups' dead-letter topics (KIP-1191, broker/share/dead_letters.py) are written only
while it is 2 or more (Kafka 4.4's ``ShareVersion.supportsShareGroupDLQ``)."""

from __future__ import annotations

from controller.features import METADATA_VERSION, SHARE_VERSION, level
from controller.image import MetadataImage
from wire.errors import ErrorCode

DISABLED_MESSAGE = "Share groups are not enabled (share.version is 0)."
NOT_LOADED_MESSAGE = "This broker has not loaded the cluster's finalized features yet."
#: The share.version from which archived records are copied to a group's dead-letter topic.
DEAD_LETTER_QUEUE_SHARE_VERSION = 2


def share_groups_enabled(image: MetadataImage) -> bool:
    return level(image.features, SHARE_VERSION) >= 1


def dead_letter_queues_enabled(image: MetadataImage) -> bool:
    return level(image.features, SHARE_VERSION) >= DEAD_LETTER_QUEUE_SHARE_VERSION


def share_groups_refusal(image: MetadataImage) -> tuple[ErrorCode, str] | None:
    """Why a share-group request is refused, or None when share groups are served.

    A broker that has not replayed the cluster's feature records yet (every cluster finalizes
    ``metadata.version`` when it is formatted) cannot tell: it answers with a retriable error,
    since clients treat UNSUPPORTED_VERSION as fatal."""
    if share_groups_enabled(image):
        return None
    if METADATA_VERSION not in image.features:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, NOT_LOADED_MESSAGE
    return ErrorCode.UNSUPPORTED_VERSION, DISABLED_MESSAGE
