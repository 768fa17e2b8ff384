"""The share coordinator's shard of one ``__share_group_state`` partition (KIP-932).

Kafka keeps each share-partition's state in ``__share_group_state`` (keyed by
``groupId:topicId:partition``, see broker/share/state_store.py); a share group's
membership is the group coordinator's, in ``__consumer_offsets``
(broker/group/share_groups.py). Besides the states, a group's settings are kept
in the shard of the group's own partition. Records (JSON, compacted by key; see
docs/share-groups.md):

- key ``{"type":"state",...}``: a share-partition's state (state_store.py);
- key ``{"type":"config","group":G}``, value the group's ``share.*`` settings;
- a tombstone of either removes it.

Records ``"initialized"`` and ``"partition"`` of earlier versions (the share-partitions
a group covered, now its ShareGroupPartitionMetadata in ``__consumer_offsets``) are
skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from broker.coordinator import AppendResult, CoordinatorRecord, ReplayedRecord, ShardContext
from broker.share.group import ShareGroupSettings
from broker.share.state_store import ShareStateStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ShareDefaults:
    """Broker-level ``group.share.*`` settings of share-partitions (those of membership are the
    group coordinator's, broker/group/share_groups.py)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000


def _key(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass(slots=True)
class ShareGroupConfigEntry:
    """A group's settings as this shard keeps them (its group configs)."""

    group_id: str
    settings: ShareGroupSettings


class ShareGroupShard:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        #: group id -> its settings, for the groups hashed to this partition that have some
        self.groups: dict[str, ShareGroupConfigEntry] = {}
        #: The share-partition states this partition keeps for partition leaders (Read/WriteShareGroupState).
        self.state = ShareStateStore()

    # ------------------------------------------------------------ replay

    def replay(self, record: ReplayedRecord) -> None:
        try:
            key = json.loads(record.key)
            value = None if record.value is None else json.loads(record.value)
            if key.get("type") == "state":
                self.state.replay(key, value)
            elif key.get("type") == "config":
                if value is None:
                    self.groups.pop(key["group"], None)
                    return
                self.groups[key["group"]] = ShareGroupConfigEntry(key["group"], ShareGroupSettings(**value))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("share_state_record_skipped", offset=record.offset, error=str(e))

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None:
        pass

    def on_loaded(self) -> None:
        if self.groups or self.state.states:
            log.info("share_state_loaded", partition=self.ctx.partition, configured_groups=len(self.groups),
                     share_partitions=len(self.state.states))

    def on_unloaded(self) -> None:
        self.groups.clear()
        self.state.states.clear()

    # ------------------------------------------------------------ settings

    def set_settings(self, group_id: str, settings: ShareGroupSettings,
                     on_complete: Callable[[AppendResult], None] | None = None) -> None:
        self.groups[group_id] = ShareGroupConfigEntry(group_id, settings)
        value = {"auto_offset_reset": settings.auto_offset_reset,
                 "record_lock_duration_ms": settings.record_lock_duration_ms,
                 "delivery_count_limit": settings.delivery_count_limit,
                 "dead_letter_topic": settings.dead_letter_topic}
        self.ctx.append([CoordinatorRecord(_key({"type": "config", "group": group_id}),
                                           json.dumps(value).encode())], on_complete)

    def delete_settings(self, group_id: str) -> None:
        """The group was deleted: its settings go with it."""
        if self.groups.pop(group_id, None) is not None:
            self.ctx.append([CoordinatorRecord(_key({"type": "config", "group": group_id}), None)])
