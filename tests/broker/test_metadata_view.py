"""The broker's metadata view: images are published once caught up, forwards only, and —
with preparers — only after the preparers are done with them (new partitions' files are
made off the event loop on every node, whichever controller wrote the records); publishers
hear one delta that makes the caught-up image, then each batch's own delta, every delta
starting from the image they heard of last."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import replace

import trio
import trio.testing

from broker.cluster.metadata_follower import MetadataView
from controller.delta import MetadataDelta
from controller.image import MetadataImage
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.primitives import Message


def image_at(offset: int) -> MetadataImage:
    return dataclasses.replace(MetadataImage(), offset=offset)


def test_without_preparers_an_image_is_published_at_once_after_catching_up() -> None:
    view = MetadataView()
    heard: list[int] = []
    view.add_listener(lambda image: heard.append(image.offset))
    view.update(image_at(3))
    assert heard == [] and view.image.offset == -1  # not caught up yet
    view.mark_caught_up()
    view.update(image_at(5))
    view.update(image_at(4))  # older than the one published: held back
    assert heard == [3, 5]
    assert view.image.offset == 5


def test_a_publisher_that_raises_is_counted_and_the_others_still_hear() -> None:
    """As a Kafka broker's non-fatal publishing fault: the failure is counted and logged,
    the publishers after it hear of the image, and the next image is published too."""
    failures: list[int] = []
    view = MetadataView(lambda: failures.append(view.image.offset))
    heard: list[int] = []

    def broken(image: MetadataImage) -> None:
        if image.offset == 3:
            raise ValueError("cannot apply")

    view.add_listener(broken)
    view.add_listener(lambda image: heard.append(image.offset))
    view.update(image_at(3))
    view.mark_caught_up()
    view.update(image_at(4))
    assert failures == [3]
    assert heard == [3, 4]
    assert view.image.offset == 4


def test_listeners_hear_of_an_image_only_once_the_preparers_are_done() -> None:
    events: list[str] = []

    async def main() -> None:
        view = MetadataView()
        release = trio.Event()

        async def prepare(_delta: MetadataDelta, image: MetadataImage) -> None:
            events.append(f"prepare {image.offset}")
            if image.offset == 1:
                await release.wait()
            events.append(f"prepared {image.offset}")

        view.add_preparer(prepare)
        view.add_listener(lambda image: events.append(f"apply {image.offset}"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(view.run)
            view.update(image_at(1))
            view.mark_caught_up()
            await trio.testing.wait_all_tasks_blocked()
            assert events == ["prepare 1"]
            assert view.image.offset == -1
            view.update(image_at(2))  # arrives while 1 is being prepared
            await trio.testing.wait_all_tasks_blocked()
            assert events == ["prepare 1"]
            release.set()
            assert await view.wait_for(lambda image: image.offset == 2, 5.0)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert events == ["prepare 1", "prepared 1", "apply 1", "prepare 2", "prepared 2", "apply 2"]


def test_a_failing_preparer_leaves_the_work_to_the_listeners() -> None:
    heard: list[int] = []

    async def main() -> None:
        view = MetadataView()

        async def prepare(_delta: MetadataDelta, image: MetadataImage) -> None:
            raise OSError("no space left on device")

        view.add_preparer(prepare)
        view.add_listener(lambda image: heard.append(image.offset))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(view.run)
            view.mark_caught_up()
            view.update(image_at(7))
            assert await view.wait_for(lambda image: image.offset == 7, 5.0)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert heard[-1] == 7


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
