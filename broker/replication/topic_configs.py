"""Topic settings as this broker resolves them: the static configuration, the dynamic
broker settings of the metadata image in force, and each topic's overrides.

One cache per node; the log, Produce validation, DescribeConfigs and CreateTopics all
read it, so a topic's settings are resolved once per change of what they depend on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from broker.log.config import LogConfig
from broker.log.validation import TargetCompression, TimestampPolicy, target_compression
from broker.replication.partition import Partition
from config import (
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    TopicConfig,
    broker_synonym_chain,
    dynamic_log_layers,
)
from controller.image import MetadataImage

log = structlog.get_logger(__name__)

#: Resolved topic configurations kept before the cache starts over.
CACHE_LIMIT = 10_000


class TopicConfigs:
    def __init__(self, config: BrokerConfig, node_id: int, image: Callable[[], MetadataImage]) -> None:
        self.config = config
        self.node_id = node_id
        self._image = image
        self._topic_configs: dict[tuple[str, frozenset[tuple[str, str]]], TopicConfig] = {}
        # The dynamic broker settings the effective configuration was built from.
        self._dynamic_seen: tuple[Mapping[str, str], Mapping[str, str]] | None = None
        self._dynamic_layers: tuple[dict[str, str], dict[str, str]] = ({}, {})
        self._effective_config = config
        # Every lookup of the image in force, by topic: an image is immutable (a change is a new
        # image), so its topics' settings are resolved once per image; Produce reads them per partition.
        self._image_seen: MetadataImage | None = None
        self._by_topic: dict[str, TopicConfig] = {}
        # What validating a produce reads of each topic's settings, per image as well.
        self._produce_policies: dict[str, tuple[TimestampPolicy, TargetCompression]] = {}
        # DescribeConfigs' entries by a topic's overrides, for the dynamic layers in force: most
        # topics have none, and a console asks for every topic's settings at each refresh.
        self._described: dict[frozenset[tuple[str, str]], list[ConfigEntry]] = {}

    def effective_config(self, image: MetadataImage) -> BrokerConfig:
        """The static configuration with the dynamic log settings of ``image`` in force
        (this broker's own, then the cluster default): what topics default from."""
        dynamic_broker = image.broker_config(self.node_id)
        dynamic_default = image.broker_config("")
        # The image replaces a resource's config mapping when it changes, never edits it.
        seen = self._dynamic_seen
        if seen is not None and seen[0] is dynamic_broker and seen[1] is dynamic_default:
            return self._effective_config
        self._dynamic_seen = (dynamic_broker, dynamic_default)
        layers = dynamic_log_layers(dynamic_broker, dynamic_default)
        if layers == self._dynamic_layers:
            return self._effective_config  # only settings that do not apply to logs changed
        self._dynamic_layers = layers
        self._described.clear()  # synonyms name the dynamic layers
        per_broker, default = layers
        try:
            effective = self.config.with_dynamic(dynamic_broker, dynamic_default)
        except ConfigError as ex:
            log.error("dynamic_broker_config_invalid", key=ex.key, error=str(ex))
            effective = self.config
        if effective is not self._effective_config:
            log.info("dynamic_log_configs_applied", broker=per_broker, cluster_default=default)
            self._effective_config = effective
            self._topic_configs.clear()
        return effective

    def describe(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """A topic's settings as DescribeConfigs and CreateTopics report them, with the
        dynamic broker settings they default from; raises ConfigError."""
        effective = self.effective_config(self._image())
        key = frozenset(overrides.items())
        known = self._described.get(key)
        if known is not None:
            return list(known)
        resolved = TopicConfig.resolve(effective.topic_defaults(), overrides)
        per_broker, default = self._dynamic_layers  # as effective_config just read them
        described = resolved.describe(lambda name: broker_synonym_chain(self.config, name, per_broker, default))
        if len(self._described) > CACHE_LIMIT:
            self._described.clear()
        self._described[key] = described
        return list(described)

    def topic_config(self, image: MetadataImage, topic: str) -> TopicConfig:
        if image is self._image_seen:
            known = self._by_topic.get(topic)
            if known is not None:
                return known
        else:
            self._image_seen = image
            self._by_topic = {}
            self._produce_policies = {}
        resolved = self._resolve(image, topic)
        if len(self._by_topic) <= CACHE_LIMIT:
            self._by_topic[topic] = resolved
        return resolved

    def _resolve(self, image: MetadataImage, topic: str) -> TopicConfig:
        defaults = self.effective_config(image).topic_defaults
        overrides = image.topic_config(topic)
        key = (topic, frozenset(overrides.items()))
        cached = self._topic_configs.get(key)
        if cached is None:
            try:
                cached = TopicConfig.resolve(defaults(), overrides)
            except ConfigError as ex:
                log.error("topic_config_invalid", topic=topic, key=ex.key, error=str(ex))
                cached = TopicConfig.resolve(defaults(), {})
            if len(self._topic_configs) > CACHE_LIMIT:
                self._topic_configs.clear()
            self._topic_configs[key] = cached
        return cached

    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        return self.topic_config(image, topic)

    def produce_policy_for(self, partition: Partition) -> tuple[TimestampPolicy, TargetCompression]:
        """What validating a produce to ``partition`` reads of its topic's settings: the
        timestamp bounds and the topic's ``compression.type`` (one lookup per append, built
        once per image: a Produce to many partitions asks for each of them)."""
        image = self._image()
        if image is self._image_seen:
            known = self._produce_policies.get(partition.topic)
            if known is not None:
                return known
        tc = self.topic_config(image, partition.topic)
        policy = (TimestampPolicy(tc.message_timestamp_before_max_ms, tc.message_timestamp_after_max_ms),
                  target_compression(tc))
        if len(self._produce_policies) <= CACHE_LIMIT:
            self._produce_policies[partition.topic] = policy
        return policy

    def min_insync_replicas(self, topic: str) -> int:
        return self.topic_config(self._image(), topic).min_insync_replicas
