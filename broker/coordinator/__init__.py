"""The shape every coordinator shares: state kept in an internal compacted topic.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) work the same way, as in Kafka's
``CoordinatorRuntime``: keys are hashed onto the partitions of the internal
topic, the broker that leads a partition is the coordinator for its keys, and
the partition's log *is* the state. :class:`CoordinatorRuntime` owns that
mechanism so a coordinator only writes its state machine (a *shard* per
partition):

- ``runtime.on_image(image)`` follows leadership in the metadata image: a
  partition this broker starts leading is loaded (its log replayed into a fresh
  shard: ``shard.replay(record)`` for every record, ``shard.on_loaded()`` at
  the end); one it stops leading is unloaded (``shard.on_unloaded()``).
- ``runtime.shard_for(key)`` says whether this broker serves a key right now:
  ``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS`` or the active shard.
- A shard talks to the world only through its :class:`ShardContext`:
  ``now_ms()`` (wall clock, for timestamps), ``schedule()``/``cancel()``
  (keyed timers on Trio's clock), ``append(records, on_complete)`` (written to
  the partition leader's log at once; ``on_complete`` runs when the high
  watermark passes them, acks=all) and ``random_uuid()``.
- ``await runtime.find_coordinator(key, listener)`` answers FindCoordinator,
  creating the internal topic on first use.

Shards are plain synchronous objects, so they can be tested with a fake
context and explicit time (see ``tests/broker/group``).
"""

from typing import Protocol

from broker.coordinator.hashing import java_string_hash, kafka_abs, partition_for
from broker.coordinator.runtime import (
    AppendResult,
    CoordinatorRecord,
    CoordinatorRuntime,
    InternalTopic,
    ReplayedRecord,
    Shard,
    ShardContext,
    await_callback,
)
from wire.errors import ErrorCode

#: FindCoordinator key types (Kafka's CoordinatorType).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


class CoordinatorLookup(Protocol):
    """What FindCoordinator asks of a coordinator; the node registers each in its FindCoordinator
    table (``BrokerServices.coordinators[key_type]``; the transaction coordinator under
    :data:`KEY_TYPE_TRANSACTION`)."""

    async def find_coordinator(self, key: str, listener: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the broker coordinating ``key``, as seen on ``listener``."""
        ...

__all__ = [
    "KEY_TYPE_GROUP",
    "KEY_TYPE_SHARE",
    "KEY_TYPE_TRANSACTION",
    "AppendResult",
    "CoordinatorLookup",
    "CoordinatorRecord",
    "CoordinatorRuntime",
    "InternalTopic",
    "ReplayedRecord",
    "Shard",
    "ShardContext",
    "await_callback",
    "java_string_hash",
    "kafka_abs",
    "partition_for",
]
