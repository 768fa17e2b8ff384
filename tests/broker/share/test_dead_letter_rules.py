"""broker/share/dead_letters.py's rules, as Kafka 4.4's ShareGroupDLQValidator applies them at
write time (in its order, with its messages), and Kafka 4.4's context headers."""

from __future__ import annotations

import uuid

from broker.share.dead_letters import dead_letter_headers, topic_refusal
from broker.share.partition import ArchivedRecord
from controller.image import TOPIC_RESOURCE, MetadataImage, TopicImage


def image(*topics: tuple[str, str | None]) -> MetadataImage:
    """Topics by name, each with its errors.deadletterqueue.group.enable (None: unset)."""
    ids = {name: uuid.uuid4() for name, _ in topics}
    return MetadataImage(
        topics_by_id={tid: TopicImage(name, tid, {}) for name, tid in ids.items()}, topic_ids=ids,
        configs={(TOPIC_RESOURCE, name): {"errors.deadletterqueue.group.enable": enabled}
                 for name, enabled in topics if enabled is not None})


def test_rules_in_kafkas_order_with_its_messages() -> None:
    # Kafka 4.4's (ShareGroupDLQStateManager) prefix message ends with a period after the prefix.
    img = image(("dlq.on", "true"), ("dlq.off", "false"), ("dlq.unset", None), ("orders.dead", "true"),
                ("__x", "true"))
    cases = [
        ("__x", "dlq.", False, "Configured DLQ topic name in share group: g cannot start with __, topic: __x."),
        ("dlq.off", "dlq.", False, "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.off"),
        ("dlq.unset", "dlq.", False,
         "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.unset"),
        # opted in, wrong prefix; and the prefix is checked before the topic's existence
        ("orders.dead", "dlq.", True, "Configured DLQ topic name does not comply with the DLQ topic prefix in "
                                      "share group: g, topic: orders.dead, prefix: dlq.."),
        ("orders.missing", "dlq.", True, "Configured DLQ topic name does not comply with the DLQ topic prefix in "
                                         "share group: g, topic: orders.missing, prefix: dlq.."),
        ("dlq.missing", "dlq.", False, "DLQ topic does not exist and auto create is disabled on cluster for share "
                                       "group: g, topic: dlq.missing."),
        ("dlq.missing", "dlq.", True, None),
        ("dlq.on", "dlq.", False, None),
        ("orders.dead", "", False, None),  # an empty prefix allows any name
    ]
    assert [topic_refusal(img, "g", target, prefix, auto) for target, prefix, auto, _ in cases] == \
        [want for *_, want in cases]


def test_kafka_4_4_context_headers() -> None:
    rejected = dead_letter_headers("g", "orders", 3, ArchivedRecord(17, "rejected", 1))
    assert rejected == [
        ("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"3"), ("__dlq.errors.offset", b"17"),
        ("__dlq.errors.group", b"g"), ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client.")]
    limit = dict(dead_letter_headers("g", "orders", 0, ArchivedRecord(2, "delivery_count_exceeded", 5)))
    assert limit["__dlq.errors.delivery.count"] == b"5"
    assert limit["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."
