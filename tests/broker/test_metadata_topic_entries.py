"""The Metadata handler's topic entries, kept between requests per listener: each answer
is the current image's, whatever was answered before (images change a topic at a time)."""

from __future__ import annotations

import dataclasses
import uuid

from broker.handlers.h03_metadata import topic_metadata
from controller.image import BrokerImage, Endpoint, MetadataImage, PartitionImage, TopicImage
from wire.errors import ErrorCode

LISTENER = "PLAINTEXT"


def broker(broker_id: int, fenced: bool = False) -> BrokerImage:
    return BrokerImage(broker_id, 1, uuid.UUID(int=broker_id), (Endpoint(LISTENER, "127.0.0.1", 9000 + broker_id),),
                       None, fenced)


def topic(number: int, leader: int, epoch: int = 0) -> TopicImage:
    tid = uuid.UUID(int=number)
    return TopicImage(f"t{number}", tid, {p: PartitionImage(tid, p, (1, 2), (1, 2), leader, epoch, epoch)
                                          for p in range(3)})


def image(topics: list[TopicImage], brokers: list[BrokerImage]) -> MetadataImage:
    return MetadataImage(topics_by_id={t.topic_id: t for t in topics}, topic_ids={t.name: t.topic_id for t in topics},
                         brokers={b.broker_id: b for b in brokers})


def test_an_answer_follows_the_image_it_is_given() -> None:
    first, second = topic(1, leader=1), topic(2, leader=2)
    before = image([first, second], [broker(1), broker(2)])
    answer = topic_metadata(before, first, LISTENER)
    assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in answer.partitions] == [(0, 1, 0), (1, 1, 0),
                                                                                           (2, 1, 0)]
    # A caller may change its entry (authorized operations; the dispatcher frees lists).
    answer.topic_authorized_operations = 8
    answer.partitions.clear()
    again = topic_metadata(before, first, LISTENER)
    assert again.topic_authorized_operations == -2147483648
    assert len(again.partitions) == 3

    # A leader change for one topic: a new image with a new image of that topic only.
    moved = topic(1, leader=2, epoch=1)
    after = dataclasses.replace(before, topics_by_id={moved.topic_id: moved, second.topic_id: second})
    assert {(p.leader_id, p.leader_epoch) for p in topic_metadata(after, moved, LISTENER).partitions} == {(2, 1)}
    assert {p.leader_id for p in topic_metadata(after, second, LISTENER).partitions} == {2}

    # Broker 2 fenced: its partitions have no leader on this listener, and it is offline.
    fenced = dataclasses.replace(after, brokers={1: broker(1), 2: broker(2, fenced=True)})
    for entry in (topic_metadata(fenced, moved, LISTENER), topic_metadata(fenced, second, LISTENER)):
        assert {(p.error_code, p.leader_id) for p in entry.partitions} == {(ErrorCode.LEADER_NOT_AVAILABLE, -1)}
        assert {tuple(p.offline_replicas) for p in entry.partitions} == {(2,)}
