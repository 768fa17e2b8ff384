"""A share group's settings in force at this broker: its group configs (config/group.py),
ConfigRecords of resource type GROUP that every broker reads from its metadata image, over
this broker's ``group.share.*`` defaults. Every partition leader of a group's topics
therefore applies the group's lock duration, delivery count limit and dead-letter topic,
wherever the group is coordinated.

Data dirs written before kept a group's settings as a JSON ``config`` record in its
``__share_group_state`` partition; :func:`legacy_configs` turns one into group configs,
which the share coordinator writes once to the metadata log (when the group has none
there) and then removes the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.share.shard import ShareDefaults
from config.group import (
    AUTO_OFFSET_RESET,
    DEAD_LETTER_TOPIC,
    DELIVERY_COUNT_LIMIT,
    RECORD_LOCK_DURATION_MS,
    ShareGroupSettings,
    share_group_settings,
)
from controller.image import MetadataImage


def share_settings(image: MetadataImage, group_id: str, defaults: ShareDefaults) -> ShareGroupSettings:
    return share_group_settings(image.group_config(group_id), defaults.record_lock_duration_ms,
                                defaults.delivery_count_limit, defaults.partition_max_record_locks)


def legacy_configs(value: Mapping[str, Any]) -> dict[str, str]:
    """The group configs of a JSON ``config`` record (unset values left out; the default
    ``latest`` reset too, as it was stored whether set or not)."""
    out: dict[str, str] = {}
    reset = value.get("auto_offset_reset")
    if isinstance(reset, str) and reset != "latest":
        out[AUTO_OFFSET_RESET] = reset
    for key, name in (("record_lock_duration_ms", RECORD_LOCK_DURATION_MS),
                      ("delivery_count_limit", DELIVERY_COUNT_LIMIT)):
        if isinstance(value.get(key), int):
            out[name] = str(value[key])
    topic = value.get("dead_letter_topic")
    if isinstance(topic, str) and topic:
        out[DEAD_LETTER_TOPIC] = topic
    return out
