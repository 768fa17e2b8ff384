"""Topic settings as the controller checks them, with :mod:`config` (Kafka's
``ControllerConfigurationValidator``): names, values, and the checks that tie a
topic's settings to the defaults they combine with.

The defaults are this node's static configuration with the dynamic broker settings
of the image in force (this node's own, then the cluster default), as a broker
resolves them for its logs.
"""

from __future__ import annotations

from collections.abc import Mapping

from config import BrokerConfig, ConfigError, ConfigValue, TopicConfig
from controller.image import MetadataImage


class TopicConfigChecker:
    """Validates topic settings against the defaults in force; cached per dynamic change."""

    def __init__(self, node_id: int, static: BrokerConfig) -> None:
        self._node_id = node_id
        self._static = static
        self._seen: tuple[Mapping[str, str], Mapping[str, str]] | None = None
        self._defaults: Mapping[str, ConfigValue] = static.topic_defaults()

    def defaults(self, image: MetadataImage) -> Mapping[str, ConfigValue]:
        """The default of every topic setting under ``image``'s dynamic broker settings."""
        dynamic_broker = image.broker_config(self._node_id)
        dynamic_default = image.broker_config("")
        seen = self._seen
        # The image replaces a resource's config mapping when it changes, never edits it.
        if seen is None or seen[0] is not dynamic_broker or seen[1] is not dynamic_default:
            self._seen = (dynamic_broker, dynamic_default)
            try:
                effective = self._static.with_dynamic(dynamic_broker, dynamic_default)
            except ConfigError:
                effective = self._static  # as the brokers do: invalid dynamic settings are not applied
            self._defaults = effective.topic_defaults()
        return self._defaults

    def error(self, image: MetadataImage, configs: Mapping[str, str]) -> str | None:
        """Kafka's message for the first problem of ``configs`` (INVALID_CONFIG), or None."""
        try:
            TopicConfig.resolve(self.defaults(image), configs)
        except ConfigError as ex:
            return str(ex)
        return None
