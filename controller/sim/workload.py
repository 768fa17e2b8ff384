"""Random metadata changes that are valid against a given image.

The simulation writes these through the quorum the way the active controller
does: validated against the image at some end offset, then appended with that
offset as the compare-and-set condition.
"""

from __future__ import annotations

import random
import uuid

from controller.image import TOPIC_RESOURCE, MetadataImage
from wire.generated.metadata.rec_000_register_broker_record import (
    RegisterBrokerRecord,
    RegisterBrokerRecordBrokerEndpoint,
)
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.generated.metadata.rec_007_fence_broker_record import FenceBrokerRecord
from wire.generated.metadata.rec_008_unfence_broker_record import UnfenceBrokerRecord
from wire.generated.metadata.rec_009_remove_topic_record import RemoveTopicRecord
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord
from wire.generated.metadata.rec_015_producer_ids_record import ProducerIdsRecord
from wire.primitives import Message

BROKER_IDS = (1, 2, 3, 4, 5)


def random_change(image: MetadataImage, rng: random.Random) -> list[Message]:
    """One to a few records that apply cleanly to ``image``, in order."""
    end = image.offset + 1
    choices = ["register"]
    brokers = sorted(image.brokers)
    if brokers:
        choices += ["topic", "topic", "fence", "producer_ids", "feature"]
    if image.topics_by_id:
        choices += ["delete", "config", "partition_change", "partition_change"]
    kind = rng.choice(choices)
    if kind == "register":
        broker = rng.choice(BROKER_IDS)
        return [RegisterBrokerRecord(
            broker_id=broker,
            incarnation_id=uuid.UUID(int=rng.getrandbits(128)),
            broker_epoch=end,
            end_points=[RegisterBrokerRecordBrokerEndpoint(name="PLAINTEXT", host="127.0.0.1",
                                                           port=9000 + broker, security_protocol=0)],
            rack=None,
            fenced=rng.random() < 0.5,
        )]
    if kind == "topic":
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        name = f"t{rng.getrandbits(32):08x}"
        if name in image.topic_ids:
            return []
        records: list[Message] = [TopicRecord(name=name, topic_id=topic_id)]
        for index in range(rng.randint(1, 3)):
            replicas = rng.sample(brokers, min(len(brokers), rng.randint(1, 3)))
            records.append(PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas,
                                           isr=list(replicas), leader=replicas[0], leader_epoch=0,
                                           partition_epoch=0))
        return records
    if kind == "fence":
        chosen = image.brokers[rng.choice(brokers)]
        if chosen.fenced:
            return [UnfenceBrokerRecord(id=chosen.broker_id, epoch=chosen.epoch)]
        return [FenceBrokerRecord(id=chosen.broker_id, epoch=chosen.epoch)]
    if kind == "producer_ids":
        return [ProducerIdsRecord(broker_id=brokers[0], broker_epoch=-1,
                                  next_producer_id=image.next_producer_id + 1000)]
    if kind == "feature":
        return [FeatureLevelRecord(name="metadata.version", feature_level=rng.randint(7, 21))]
    topic = image.topics_by_id[rng.choice(sorted(image.topics_by_id))]
    if kind == "delete":
        return [RemoveTopicRecord(topic_id=topic.topic_id)]
    if kind == "config":
        value = None if rng.random() < 0.3 else str(rng.randint(1, 10**6))
        return [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic.name, name="retention.ms",
                             value=value)]
    part = topic.partitions[rng.choice(sorted(topic.partitions))]
    isr = sorted(rng.sample(list(part.replicas), rng.randint(1, len(part.replicas))))
    leader = rng.choice([*isr, -1])
    return [PartitionChangeRecord(topic_id=topic.topic_id, partition_id=part.partition, isr=isr, leader=leader)]
