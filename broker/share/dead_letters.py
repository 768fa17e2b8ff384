"""Dead-letter copies of archived share-group records (beyond Kafka 4.3, after KIP-1191).

Off unless a share group sets ``errors.deadletterqueue.topic.name``. Each record
the group archives because a consumer rejected it (REJECT) or because it ran out
of deliveries (``group.share.delivery.count.limit``) is copied, key, value and
headers, to that topic (partition: the source partition modulo the topic's
partitions), with these headers added:

- ``__dlq.errors.group.id``: the share group,
- ``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``: where it came from,
- ``__dlq.errors.reason``: ``rejected`` or ``delivery_count_exceeded``,
- ``__dlq.errors.delivery.count``: how many times it was delivered.

The copy is written by the broker leading the source partition when it also
leads the target partition; otherwise (and when the topic does not exist) the
record is only archived, with a warning in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from broker.log.producer_state import AppendOrigin
from broker.share.partition import ArchivedRecord
from broker.share.shard import ShareGroupConfigEntry
from wire.batch_builder import build_batch
from wire.records import NewRecord, Record, iter_batch_headers, iter_records

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition, ReplicaManager
    from controller.image import MetadataImage

log = structlog.get_logger(__name__)

#: Bytes read from the source log to find one archived record.
READ_BYTES = 1024 * 1024


def dead_letter_headers(group_id: str, topic: str, partition: int, record: ArchivedRecord) -> list[tuple[str, bytes]]:
    return [
        ("__dlq.errors.group.id", group_id.encode()),
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
        ("__dlq.errors.offset", str(record.offset).encode()),
        ("__dlq.errors.reason", record.reason.encode()),
        ("__dlq.errors.delivery.count", str(record.delivery_count).encode()),
    ]


class DeadLetterWriter:
    def __init__(self, node_id: int, image: Callable[[], MetadataImage], replica_manager: ReplicaManager) -> None:
        self.node_id = node_id
        self._image = image
        self._replica_manager = replica_manager

    def __call__(self, group: ShareGroupConfigEntry, topic: str, partition: int, records: list[ArchivedRecord]) -> None:
        target_name = group.settings.dead_letter_topic
        if not target_name or target_name == topic:
            return
        rm = self._replica_manager
        target_topic = self._image().topic(target_name)
        source = rm.get(topic, partition)
        if target_topic is None or not target_topic.partitions or source is None:
            log.warning("dead_letter_topic_unavailable", group_id=group.group_id, topic=target_name)
            return
        target = rm.get(target_name, partition % len(target_topic.partitions))
        if target is None or target.leader != self.node_id:
            log.warning("dead_letter_partition_not_local", group_id=group.group_id, topic=target_name)
            return
        copies: list[NewRecord] = []
        for archived in records:
            original = self._read(source, archived.offset)
            if original is None:
                continue
            copies.append(NewRecord(original.key, original.value,
                                    [*original.headers,
                                     *dead_letter_headers(group.group_id, topic, partition, archived)],
                                    timestamp=original.timestamp))
        if not copies:
            return
        try:
            target.append_records_to_leader(bytearray(build_batch(copies)), origin=AppendOrigin.COORDINATOR,
                                            required_acks=1)
        except Exception:
            log.exception("dead_letter_append_failed", group_id=group.group_id, topic=target_name)
            return
        log.info("dead_letters_written", group_id=group.group_id, topic=target_name, count=len(copies))

    @staticmethod
    def _read(source: Partition, offset: int) -> Record | None:
        data = source.log.read(offset, READ_BYTES, source.high_watermark, min_one_batch=True)
        if data.region is None:
            return None
        # Past the descriptor budget a read comes back as bytes rather than a file region.
        raw = data.region if isinstance(data.region, bytes) else data.region.read()
        for pos, header in iter_batch_headers(raw):
            if header.is_control or not header.base_offset <= offset <= header.last_offset:
                continue
            for record in iter_records(raw, pos):
                if record.offset == offset:
                    return record
        return None
