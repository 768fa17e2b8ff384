"""The share coordinator's shard of one ``__share_group_state`` partition (KIP-932).

Kafka keeps each share-partition's state in ``__share_group_state`` (keyed by
``groupId:topicId:partition``, see broker/share/state_store.py); a share group's
membership is the group coordinator's, in ``__consumer_offsets``
(broker/group/share_groups.py), and its settings are group configs in the metadata
log (config/group.py, broker/share/group_configs.py). Records (JSON, compacted by
key; see docs/share-groups.md):

- key ``{"type":"state",...}``: a share-partition's state (state_store.py);
- key ``{"type":"config","group":G}``: the group's ``share.*`` settings as data dirs
  written before kept them; a loaded one is migrated to group configs by the share
  coordinator, then removed with a tombstone;
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


class ShareGroupShard:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        #: The share-partition states this partition keeps for partition leaders (Read/WriteShareGroupState).
        self.state = ShareStateStore()
        #: A group's settings in the record data dirs written before kept them in (migrated by the coordinator).
        self.on_legacy_config: Callable[[str, dict[str, Any] | None], None] | None = None

    # ------------------------------------------------------------ replay

    def replay(self, record: ReplayedRecord) -> None:
        try:
            key = json.loads(record.key)
            value = None if record.value is None else json.loads(record.value)
            if key.get("type") == "state":
                self.state.replay(key, value)
            elif key.get("type") == "config":
                if self.on_legacy_config is not None:
                    self.on_legacy_config(key["group"], value)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("share_state_record_skipped", offset=record.offset, error=str(e))

    def replay_end_transaction(self, producer_id: int, committed: bool, offset: int) -> None:
        pass

    def on_loaded(self) -> None:
        if self.state.states:
            log.info("share_state_loaded", partition=self.ctx.partition, share_partitions=len(self.state.states))

    def on_unloaded(self) -> None:
        self.state.states.clear()

    # ------------------------------------------------------------ legacy settings

    def remove_legacy_config(self, group_id: str, on_complete: Callable[[AppendResult], None]) -> None:
        """Tombstones the group's ``config`` record once its settings are group configs."""
        self.ctx.append([CoordinatorRecord(_key({"type": "config", "group": group_id}), None)], on_complete)
