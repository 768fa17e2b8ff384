"""The broker's metadata view: images are published once caught up, forwards only, and —
with preparers — only after the preparers are done with them (new partitions' files are
made off the event loop on every node, whichever controller wrote the records)."""

from __future__ import annotations

import dataclasses

import trio
import trio.testing

from broker.cluster.metadata_follower import MetadataView
from controller.image import MetadataImage


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


def test_listeners_hear_of_an_image_only_once_the_preparers_are_done() -> None:
    events: list[str] = []

    async def main() -> None:
        view = MetadataView()
        release = trio.Event()

        async def prepare(image: MetadataImage) -> None:
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

        async def prepare(image: MetadataImage) -> None:
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
