"""The one-voter quorum's journal: committed records survive restarts, a torn or
corrupt tail is cut off, and replay rebuilds the same image."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import trio

from controller.image import TOPIC_RESOURCE
from controller.quorum import LocalQuorum
from controller.service import Controller, ControllerSettings, TopicRequest
from controller.state import apply
from wire.errors import ErrorCode


def make_controller(path: Path, seed: int = 1) -> tuple[Controller, LocalQuorum]:
    quorum = LocalQuorum(1, path)
    controller = Controller(1, quorum, ControllerSettings(), random.Random(seed))
    controller.replay(list(quorum.replay()))
    return controller, quorum


async def setup_cluster(controller: Controller) -> None:
    from controller.image import Endpoint

    await controller.bootstrap()
    await controller.register_broker(1, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)


def test_replay_after_restart_gives_the_same_image(tmp_path: Path) -> None:
    async def main() -> None:
        controller, quorum = make_controller(tmp_path)
        await setup_cluster(controller)
        results = await controller.create_topics(
            [TopicRequest("a", 3), TopicRequest("b", 1, configs={"retention.ms": "1000"})]
        )
        assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
        assert (await controller.delete_topics(["a"]))["a"] == ErrorCode.NONE
        before = controller.image
        quorum.close()
        again, quorum2 = make_controller(tmp_path)
        assert again.image == before
        assert again.image.topic("b") is not None
        assert again.image.configs[(TOPIC_RESOURCE, "b")] == {"retention.ms": "1000"}
        quorum2.close()

    trio.run(main)


def test_torn_and_corrupt_tails_are_cut(tmp_path: Path) -> None:
    async def main() -> None:
        controller, quorum = make_controller(tmp_path)
        await setup_cluster(controller)
        await controller.create_topics([TopicRequest("a", 2)])
        good_end = quorum.end_offset
        image = controller.image
        quorum.close()
        journal = tmp_path / "metadata.journal"
        data = journal.read_bytes()
        for tail in (data[-7:], b"\x00" * 40, bytes(random.Random(3).randbytes(100))):
            journal.write_bytes(data + tail)
            again, q = make_controller(tmp_path)
            assert q.end_offset == good_end
            assert again.image == image
            q.close()
            assert journal.read_bytes() == data
        # A flipped bit inside the last entry loses that entry only.
        flipped = bytearray(data)
        flipped[-3] ^= 0x10
        journal.write_bytes(bytes(flipped))
        again, q = make_controller(tmp_path)
        assert q.end_offset == good_end - 1
        q.close()

    trio.run(main)


def test_topic_validation_matches_kafka(tmp_path: Path) -> None:
    async def main() -> None:
        controller, quorum = make_controller(tmp_path)
        await setup_cluster(controller)
        results = await controller.create_topics([
            TopicRequest("ok", 2),
            TopicRequest("ok", 2),
            TopicRequest("bad name!"),
            TopicRequest("x" * 250),
            TopicRequest(".."),
            TopicRequest("zero", 0),
            TopicRequest("rf", 1, 3),
        ])
        assert [r.error for r in results] == [
            ErrorCode.NONE,
            ErrorCode.INVALID_REQUEST,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.INVALID_PARTITIONS,
            ErrorCode.INVALID_REPLICATION_FACTOR,
        ]
        again = await controller.create_topics([TopicRequest("ok", 1), TopicRequest("o_k", 1)])
        assert [r.error for r in again] == [ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NONE]
        collide = await controller.create_topics([TopicRequest("o.k", 1)])
        assert collide[0].error == ErrorCode.INVALID_TOPIC_EXCEPTION
        quorum.close()

    trio.run(main)


def test_apply_is_pure(tmp_path: Path) -> None:
    from controller.image import MetadataImage
    from wire.generated.metadata.rec_002_topic_record import TopicRecord

    empty = MetadataImage()
    tid = uuid.UUID(int=5)
    after = apply(empty, TopicRecord(name="t", topic_id=tid), 0)
    assert empty.topic("t") is None
    assert after.topic("t") is not None and after.offset == 0
