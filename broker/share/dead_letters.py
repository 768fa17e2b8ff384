"""Dead-letter copies of archived share-group records (KIP-1191, Kafka 4.4; beyond Kafka 4.3).

Off unless all three hold, as KIP-1191 defines them:

- the cluster's finalized ``share.version`` is 2 or more (Kafka 4.4's SV_2; a new cluster
  starts at 1, UpdateFeatures raises it: broker/share/feature.py),
- the share group sets the group config ``errors.deadletterqueue.topic.name``
  (config/group.py, read from the metadata image by every broker),
- that topic opts in with its topic config ``errors.deadletterqueue.group.enable=true``:
  the topic's administrator, not whoever can alter the group, decides that the broker may
  write to it on a group's behalf.

Each record the group archives because a consumer rejected it (REJECT) or because it ran
out of deliveries (``share.delivery.count.limit``) is then copied, key, value and headers,
to that topic (partition: the source partition modulo the topic's partitions), with these
headers added:

- ``__dlq.errors.group.id``: the share group,
- ``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``: where it came from,
- ``__dlq.errors.reason``: ``rejected`` or ``delivery_count_exceeded``,
- ``__dlq.errors.delivery.count``: how many times it was delivered.

The copy is written by the broker leading the source partition: appended directly when it
also leads the target partition, else produced to the target's leader over the
inter-broker listener (acks=all), in the background. When the topic does not exist, has not
opted in, or the target cannot be reached, the record is only archived, with a warning in
the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from broker.log.producer_state import AppendOrigin
from broker.observability.share_metrics import ShareMetrics
from broker.share.partition import ArchivedRecord
from config.catalog import TOPIC_CONFIGS
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.generated.api_000_produce import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
    ProduceResponse,
)
from wire.records import NewRecord, Record, iter_batch_headers, iter_records

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition, ReplicaManager
    from broker.share.persister import PeerRequester
    from controller.image import MetadataImage

log = structlog.get_logger(__name__)

#: Bytes read from the source log to find one archived record.
READ_BYTES = 1024 * 1024
#: Produce to another broker: a version naming topics by name, and how long it may take.
PRODUCE_VERSION = 9
PRODUCE_TIMEOUT_MS = 10_000
#: The topic config by which a topic accepts being a share group's dead-letter topic.
GROUP_ENABLE = "errors.deadletterqueue.group.enable"


def accepts_dead_letters(image: MetadataImage, topic: str) -> bool:
    """Whether ``topic`` set ``errors.deadletterqueue.group.enable`` (default false)."""
    key = TOPIC_CONFIGS[GROUP_ENABLE]
    value = image.topic_config(topic).get(GROUP_ENABLE)
    return bool(key.default_value if value is None else key.parse(value))


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
    def __init__(self, node_id: int, image: Callable[[], MetadataImage], replica_manager: ReplicaManager,
                 peers: Callable[[], PeerRequester], spawn: Callable[[Callable[[], Awaitable[object]]], None],
                 metrics: ShareMetrics | None = None) -> None:
        self.node_id = node_id
        self._image = image
        self._replica_manager = replica_manager
        self._peers = peers
        self._spawn = spawn
        self.metrics = metrics or ShareMetrics()

    def __call__(self, group_id: str, target_name: str, topic: str, partition: int,
                 records: list[ArchivedRecord]) -> None:
        if not target_name or target_name == topic:
            return
        rm = self._replica_manager
        image = self._image()
        target_topic = image.topic(target_name)
        source = rm.get(topic, partition)
        if target_topic is None or not target_topic.partitions or source is None:
            log.warning("dead_letter_topic_unavailable", group_id=group_id, topic=target_name)
            return
        if not accepts_dead_letters(image, target_name):
            log.warning("dead_letter_topic_not_enabled", group_id=group_id, topic=target_name, config=GROUP_ENABLE)
            return
        copies: list[NewRecord] = []
        for archived in records:
            original = self._read(source, archived.offset)
            if original is None:
                continue
            copies.append(NewRecord(original.key, original.value,
                                    [*original.headers, *dead_letter_headers(group_id, topic, partition, archived)],
                                    timestamp=original.timestamp))
        if not copies:
            return
        index = partition % len(target_topic.partitions)
        target = rm.get(target_name, index)
        batch = build_batch(copies)
        if target is not None and target.leader == self.node_id:
            try:
                target.append_records_to_leader(bytearray(batch), origin=AppendOrigin.COORDINATOR, required_acks=1)
            except Exception:
                log.exception("dead_letter_append_failed", group_id=group_id, topic=target_name)
                return
            self.metrics.dead_lettered(len(copies))
            log.info("dead_letters_written", group_id=group_id, topic=target_name, count=len(copies))
            return
        leader = target_topic.partitions[index].leader
        if leader < 0:
            log.warning("dead_letter_partition_offline", group_id=group_id, topic=target_name, partition=index)
            return
        self._spawn(lambda: self._produce(leader, group_id, target_name, index, batch, len(copies)))

    async def _produce(self, leader: int, group_id: str, target: str, index: int, batch: bytes, count: int) -> None:
        request = ProduceRequest(acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS, topic_data=[ProduceRequestTopicProduceData(
            name=target, partition_data=[ProduceRequestPartitionProduceData(index=index, records=batch)])])
        response = await self._peers().request(leader, request, ProduceResponse, PRODUCE_TIMEOUT_MS / 1000,
                                               PRODUCE_VERSION)
        error = ErrorCode.REQUEST_TIMED_OUT if response is None else \
            ErrorCode.for_code(response.responses[0].partition_responses[0].error_code)
        if error is not ErrorCode.NONE:
            log.warning("dead_letter_produce_failed", group_id=group_id, topic=target, partition=index,
                        leader=leader, error=error.name)
            return
        self.metrics.dead_lettered(count)
        log.info("dead_letters_written", group_id=group_id, topic=target, count=count, leader=leader)

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
