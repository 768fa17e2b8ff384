"""The settings a log reads: a topic's resolved configuration.

``LogConfig`` is :class:`config.topic.TopicConfig` (Kafka's ``LogConfig``): field
names are the topic config names with dots turned into underscores
(``segment.bytes`` is ``segment_bytes``), defaults are Kafka's, and values are
checked as Kafka's ConfigDef checks them, so the log holds what the broker resolved
and nothing is copied field by field.
"""

from __future__ import annotations

from config.topic import TopicConfig as LogConfig
from config.types import LONG_MAX

__all__ = ["LONG_MAX", "LogConfig"]
