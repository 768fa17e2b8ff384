"""A topic's settings are resolved once per metadata image: the image in force answers from
its own lookups (Produce reads them for every partition it appends to), and a new image —
a changed override or dynamic broker setting — is resolved afresh."""

from __future__ import annotations

from types import SimpleNamespace

from broker.replication.topic_configs import TopicConfigs
from config import load_config
from controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from wire.compression import Compression


def test_the_image_in_force_answers_from_its_own_lookups_and_a_new_image_is_resolved_afresh() -> None:
    config, _ = load_config(None, ["node.id=1", "process.roles=broker,controller"])
    first = MetadataImage(configs={(TOPIC_RESOURCE, "t"): {"retention.ms": "1000"}})
    current = [first]
    configs = TopicConfigs(config, 1, lambda: current[0])
    resolved = configs.topic_config(first, "t")
    assert resolved.retention_ms == 1000
    assert configs.topic_config(first, "t") is resolved
    assert configs.topic_config(first, "other").retention_ms == 7 * 24 * 3600 * 1000
    changed = MetadataImage(configs={(TOPIC_RESOURCE, "t"): {"retention.ms": "2000"}})
    current[0] = changed
    assert configs.topic_config(changed, "t").retention_ms == 2000
    # A dynamic broker default reaches a topic without an override of its own.
    dynamic = MetadataImage(configs={(TOPIC_RESOURCE, "t"): {"retention.ms": "2000"},
                                     (BROKER_RESOURCE, ""): {"log.retention.ms": "5000"}})
    current[0] = dynamic
    assert configs.topic_config(dynamic, "other").retention_ms == 5000
    assert configs.topic_config(dynamic, "t").retention_ms == 2000


def test_the_produce_policy_is_built_once_per_image_and_follows_a_change() -> None:
    config, _ = load_config(None, ["node.id=1", "process.roles=broker,controller"])
    first = MetadataImage(configs={(TOPIC_RESOURCE, "t"): {"message.timestamp.after.max.ms": "50",
                                                          "compression.type": "zstd"}})
    current = [first]
    configs = TopicConfigs(config, 1, lambda: current[0])
    partition = SimpleNamespace(topic="t")
    timestamps, target = configs.produce_policy_for(partition)  # type: ignore[arg-type]
    assert (timestamps.after_max_ms, target.codec) == (50, Compression.ZSTD)
    assert configs.produce_policy_for(partition) is configs.produce_policy_for(partition)  # type: ignore[arg-type]
    current[0] = MetadataImage(configs={(TOPIC_RESOURCE, "t"): {"message.timestamp.after.max.ms": "70"}})
    timestamps, target = configs.produce_policy_for(partition)  # type: ignore[arg-type]
    assert (timestamps.after_max_ms, target.codec) == (70, None)
