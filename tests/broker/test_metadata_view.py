"""MetadataView: publishers hear nothing until the broker has caught up, then one delta that
makes the caught-up image, then each fetched batch's own delta; every delta they hear starts
from the image they heard of last."""

from __future__ import annotations

import uuid
from dataclasses import replace

from broker.cluster.metadata_follower import MetadataView
from controller.delta import MetadataDelta
from controller.image import MetadataImage
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.primitives import Message


def _batch(image: MetadataImage, records: list[Message]) -> MetadataDelta:
    delta = MetadataDelta(image)
    delta.replay_all(enumerate(records, image.offset + 1))
    delta.apply()
    return delta


def _topic(name: str, partitions: int) -> list[Message]:
    topic_id = uuid.uuid4()
    return [TopicRecord(name=name, topic_id=topic_id),
            *(PartitionRecord(partition_id=i, topic_id=topic_id, replicas=[1], isr=[1], leader=1)
              for i in range(partitions))]


def test_publishers_hear_a_chain_of_deltas_from_the_caught_up_image_on() -> None:
    view = MetadataView()
    heard: list[tuple[MetadataDelta, MetadataImage]] = []
    images: list[MetadataImage] = []
    view.add_publisher(lambda delta, image: heard.append((delta, image)))
    view.add_listener(images.append)
    first = _batch(MetadataImage(), _topic("a", 3))
    view.on_metadata_update(first, first.apply())
    second = _batch(first.apply(), _topic("b", 2))
    view.on_metadata_update(second, second.apply())
    assert heard == [] and images == []  # not caught up yet

    view.mark_caught_up()
    (delta, image), = heard
    assert image is second.apply() and images == [image]
    assert delta.image.offset == -1
    assert {t.name for t in delta.topics.changed.values()} == {"a", "b"}

    third = _batch(image, _topic("c", 1))
    view.on_metadata_update(third, third.apply())
    assert heard[-1] == (third, third.apply())  # contiguous: the fetched batch's own delta

    # A snapshot replacing the state (no delta): what differs from the published image.
    later = replace(_batch(MetadataImage(), _topic("d", 4)).apply(), offset=third.apply().offset + 10)
    view.update(later)
    delta, image = heard[-1]
    assert image is later and delta.image is third.apply()
    assert {t.name for t in delta.topics.deleted.values()} == {"a", "b", "c"}
    assert {t.name for t in delta.topics.changed.values()} == {"d"}

    # An image behind the published one is not published.
    view.update(third.apply())
    assert heard[-1][1] is later and view.image is later
