"""Dead-letter records of archived share-group records, as Kafka 4.4 writes them (KIP-1191).

Off unless all of these hold, as Kafka 4.4 checks them (in this order) when a record is
archived:

- the cluster's finalized ``share.version`` is 2 or more (Kafka 4.4's SV_2; a new cluster
  starts at 1, UpdateFeatures raises it: broker/share/feature.py);
- the share group sets the group config ``errors.deadletterqueue.topic.name`` (config/group.py,
  read from the metadata image by every broker; blank, the default, is off);
- that name does not start with ``__`` (IncrementalAlterConfigs refuses such a name already);
- the topic, when it exists, opts in with its topic config
  ``errors.deadletterqueue.group.enable=true``: the topic's administrator, not whoever can
  alter the group, decides that the broker may write to it on a group's behalf;
- the name starts with the broker setting ``errors.deadletterqueue.topic.name.prefix``
  (dynamic, as both broker settings here: this broker's value, else the cluster default)
  (default ``dlq.``; empty: any name), so that a group cannot make the broker write into an
  arbitrary business topic;
- the topic exists, or the broker setting ``errors.deadletterqueue.auto.create.topics.enable``
  (default false) lets the broker create it (with the broker's default partitions and
  replication factor, and ``errors.deadletterqueue.group.enable=true``).

A group whose dead-letter topic fails a check keeps archiving its records, without a copy,
and the broker logs the reason in Kafka's words (``dead_letter_topic_refused``).

Each record the group archives because a consumer rejected it (REJECT) or because it ran
out of deliveries (``share.delivery.count.limit``) is then written to that topic (partition:
the source partition modulo the topic's partitions; timestamp: the time of the write) with
Kafka 4.4's context headers, UTF-8 strings:

- ``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``: where the
  record came from;
- ``__dlq.errors.group``: the share group;
- ``__dlq.errors.delivery.count``: how many times it was delivered;
- ``__dlq.errors.message``: why it was archived, in Kafka 4.4's words (the messages of its
  ``ShareGroupDLQManager.CLIENT_REJECT`` and ``DELIVERY_COUNT_EXCEEDED``): :data:`REASON_MESSAGES`.

The group config ``errors.deadletterqueue.copy.record.enable`` (default false) decides
whether the dead-letter record carries the archived record's key and value; without it the
record is the headers alone (null key and value). The archived record's own headers are not
copied, as in Kafka 4.4.

Beyond Kafka: a group whose dead-letter topic is the very topic a record came from gets no
copy (it would be delivered to the group again).

The record is written by the broker leading the source partition: appended directly when it
also leads the target partition, else produced to the target's leader over the inter-broker
listener (acks=all), in the background. When the target cannot be reached the record is
only archived, with a warning in the log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
import trio

from broker.log.producer_state import AppendOrigin
from broker.observability.share_metrics import ShareMetrics
from broker.share.partition import ArchivedRecord
from config.catalog import BROKER_CONFIGS, TOPIC_CONFIGS
from config.group import DEAD_LETTER_COPY_RECORD, INTERNAL_TOPIC_PREFIX, boolean_config
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

#: Bytes read from the source log to find one archived record (Kafka's DLQ_MAX_FETCH_BYTES).
READ_BYTES = 1024 * 1024
#: Produce to another broker: a version naming topics by name, and how long it may take.
PRODUCE_VERSION = 9
PRODUCE_TIMEOUT_MS = 10_000
#: How long a write waits for an auto-created dead-letter topic to get a leader.
CREATED_TOPIC_WAIT_S = 10.0
#: The topic config by which a topic accepts being a share group's dead-letter topic.
GROUP_ENABLE = "errors.deadletterqueue.group.enable"

#: Kafka 4.4's context headers (ShareGroupDLQRecordHelper).
HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
#: ``__dlq.errors.message`` by the reason a record was archived (ArchivedRecord.reason).
REASON_MESSAGES = {
    "rejected": "Offset rejected by client.",
    "delivery_count_exceeded": "Offset delivery count exceeded the threshold.",
}

#: Creates a topic with the broker's defaults and the given topic configs (the controller's answer).
TopicCreator = Callable[[str, dict[str, str]], Awaitable[ErrorCode]]
#: The broker settings of KIP-1191, dynamic and cluster-wide as in Kafka.
TOPIC_NAME_PREFIX = "errors.deadletterqueue.topic.name.prefix"
AUTO_CREATE_TOPICS = "errors.deadletterqueue.auto.create.topics.enable"


def accepts_dead_letters(image: MetadataImage, topic: str) -> bool:
    """Whether ``topic`` set ``errors.deadletterqueue.group.enable`` (default false)."""
    key = TOPIC_CONFIGS[GROUP_ENABLE]
    value = image.topic_config(topic).get(GROUP_ENABLE)
    return bool(key.default_value if value is None else key.parse(value))


def topic_refusal(image: MetadataImage, group_id: str, target: str, prefix: str, auto_create: bool) -> str | None:
    """Why ``group_id`` may not write to ``target`` (Kafka 4.4's message), or None."""
    if target.startswith(INTERNAL_TOPIC_PREFIX):
        return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {target}."
    exists = image.topic(target) is not None
    if exists and not accepts_dead_letters(image, target):
        return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {target}"
    if prefix and not target.startswith(prefix):
        return ("Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
                f"{group_id}, topic: {target}, prefix: {prefix}.")
    if not exists and not auto_create:
        return (f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, "
                f"topic: {target}.")
    return None


def broker_setting(image: MetadataImage, node_id: int, name: str, static: str) -> str:
    """A dynamic broker setting in force: this broker's own, else the cluster default, else
    the static value."""
    for layer in (image.broker_config(node_id), image.broker_config("")):
        if name in layer:
            return layer[name]
    return static


def dead_letter_headers(group_id: str, topic: str, partition: int, record: ArchivedRecord) -> list[tuple[str, bytes]]:
    headers = [
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(record.offset).encode()),
        (HEADER_GROUP, group_id.encode()),
        (HEADER_DELIVERY_COUNT, str(record.delivery_count).encode()),
    ]
    message = REASON_MESSAGES.get(record.reason)
    if message is not None:
        headers.append((HEADER_MESSAGE, message.encode()))
    return headers


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DeadLetterWriter:
    def __init__(self, node_id: int, image: Callable[[], MetadataImage], replica_manager: ReplicaManager,
                 peers: Callable[[], PeerRequester], spawn: Callable[[Callable[[], Awaitable[object]]], None],
                 metrics: ShareMetrics | None = None, *, topic_prefix: str = "dlq.", auto_create: bool = False,
                 create_topic: TopicCreator | None = None, clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        self.node_id = node_id
        self._image = image
        self._replica_manager = replica_manager
        self._peers = peers
        self._spawn = spawn
        self.metrics = metrics or ShareMetrics()
        #: The static ``errors.deadletterqueue.topic.name.prefix`` and ``…auto.create.topics.enable``
        #: (a dynamic value in the metadata image beats them).
        self.topic_prefix = topic_prefix
        self.auto_create = auto_create
        self._create_topic = create_topic
        self._clock_ms = clock_ms

    def __call__(self, group_id: str, target_name: str, topic: str, partition: int,
                 records: list[ArchivedRecord]) -> None:
        if not target_name or target_name == topic or not records:
            return
        image = self._image()
        prefix = broker_setting(image, self.node_id, TOPIC_NAME_PREFIX, self.topic_prefix)
        auto_create = BROKER_CONFIGS[AUTO_CREATE_TOPICS].parse(
            broker_setting(image, self.node_id, AUTO_CREATE_TOPICS, str(self.auto_create).lower()))
        refusal = topic_refusal(image, group_id, target_name, prefix.strip(),
                                bool(auto_create) and self._create_topic is not None)
        if refusal is not None:
            log.warning("dead_letter_topic_refused", group_id=group_id, topic=target_name, reason=refusal)
            return
        source = self._replica_manager.get(topic, partition)
        if source is None:
            log.warning("dead_letter_source_unavailable", group_id=group_id, topic=topic, partition=partition)
            return
        copy_record = boolean_config(image.group_config(group_id), DEAD_LETTER_COPY_RECORD)
        copies = [self._dead_letter(source, group_id, topic, partition, archived, copy_record)
                  for archived in records]
        if image.topic(target_name) is None:
            self._spawn(lambda: self._create_then_write(group_id, target_name, partition, copies))
            return
        self._write(group_id, target_name, partition, copies)

    def _dead_letter(self, source: Partition, group_id: str, topic: str, partition: int, archived: ArchivedRecord,
                     copy_record: bool) -> NewRecord:
        key = value = None
        if copy_record:
            # A record no longer in the log (deleted, compacted) still gets its headers.
            original = self._read(source, archived.offset)
            if original is not None:
                key, value = original.key, original.value
        return NewRecord(key, value, dead_letter_headers(group_id, topic, partition, archived),
                         timestamp=self._clock_ms())

    def _write(self, group_id: str, target_name: str, partition: int, copies: list[NewRecord]) -> None:
        target_topic = self._image().topic(target_name)
        if target_topic is None or not target_topic.partitions:
            log.warning("dead_letter_topic_unavailable", group_id=group_id, topic=target_name)
            return
        index = partition % len(target_topic.partitions)
        target = self._replica_manager.get(target_name, index)
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

    async def _create_then_write(self, group_id: str, target_name: str, partition: int,
                                 copies: list[NewRecord]) -> None:
        if self._create_topic is None:
            return
        error = await self._create_topic(target_name, {GROUP_ENABLE: "true"})
        if error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("dead_letter_topic_not_created", group_id=group_id, topic=target_name, error=error.name)
            return
        log.info("dead_letter_topic_created", group_id=group_id, topic=target_name)
        with trio.move_on_after(CREATED_TOPIC_WAIT_S):
            while not self._has_leaders(target_name):
                await trio.sleep(0.05)
        self._write(group_id, target_name, partition, copies)

    def _has_leaders(self, target_name: str) -> bool:
        topic = self._image().topic(target_name)
        return topic is not None and bool(topic.partitions) and all(p.leader >= 0 for p in topic.partitions.values())

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
