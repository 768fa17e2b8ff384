"""A single node is a cluster of one on a cluster's code path: its broker registers with its
own controller (in process), heartbeats to keep its session, and a restart — on a data
directory of the previous layout too, whose journal may hold no registration — serves
the same topics with the same leader epochs."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
import trio

from broker.node import BrokerNode
from config import load_config
from controller.image import Endpoint
from controller.quorum import LocalQuorum
from controller.service import Controller, ControllerSettings, TopicRequest
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.primitives import Message

METADATA_DIR = "__cluster_metadata-0"


def single_node(data: Path, *settings: str) -> BrokerNode:
    config, _ = load_config(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={data}", "metrics.listener=", *settings])
    return BrokerNode(config)


def test_a_single_node_registers_with_its_own_controller_and_heartbeats_to_keep_its_session(
    tmp_path: Path,
) -> None:
    # A one-second session: without heartbeats the controller would fence the broker within it.
    settings = ("broker.session.timeout.ms=1000", "broker.heartbeat.interval.ms=100", "num.partitions=2")
    seen: list[dict[str, object]] = []

    async def run_once() -> None:
        node = single_node(tmp_path / "data", *settings)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(30):
                names = await nursery.start(node.run)
            if not seen:
                await node.controller.create_topics([TopicRequest("kept")])
            registered = node.image.brokers[1]
            port = int(names[0].rsplit(":", 1)[1])
            await trio.sleep(2.5)  # two and a half sessions
            later = node.image.brokers[1]
            topic = node.image.topic("kept")
            assert topic is not None
            seen.append({
                "epoch": node.broker_epoch, "registered": (registered.epoch, registered.fenced),
                "endpoints": [(e.name, e.port) for e in registered.endpoints], "port": port,
                "later": (later.epoch, later.fenced),
                "leaders": {i: (p.leader, p.leader_epoch) for i, p in topic.partitions.items()},
                "describe": node.cluster.quorum.is_leader(),
            })
            node.request_shutdown()

    trio.run(run_once)
    trio.run(run_once)  # a restart on the same data
    first, second = seen
    for run in seen:
        epoch = run["epoch"]
        assert isinstance(epoch, int) and epoch >= 0
        # Registered (with the listener it serves on) and unfenced before it served, and still
        # unfenced sessions later: its heartbeats reached its controller.
        assert run["registered"] == (epoch, False)
        assert run["endpoints"] == [("PLAINTEXT", run["port"])]
        assert run["later"] == (epoch, False)
        assert run["describe"] is True
    assert isinstance(second["epoch"], int) and isinstance(first["epoch"], int)
    assert second["epoch"] > first["epoch"]
    # A restart moves no leadership: the leader epochs clients saw stay as they were.
    assert first["leaders"] == second["leaders"] == {0: (1, 0), 1: (1, 0)}


async def write_previous_layout(data: Path, with_registration: bool) -> None:
    """A metadata journal as a single node of the previous layout wrote it: its in-process
    controller registered the broker registered and unfenced in one batch — or, older, not at all."""
    quorum = LocalQuorum(1, data / METADATA_DIR)
    controller = Controller(1, quorum, ControllerSettings(), random.Random(7))
    await controller.bootstrap()
    if with_registration:
        await controller.register_broker(1, [Endpoint("PLAINTEXT", "127.0.0.1", 9092, 0)], None)
        results = await controller.create_topics([TopicRequest("legacy", 2, 1)])
        assert [r.error for r in results] == [ErrorCode.NONE]
    else:
        topic_id = uuid.UUID(int=random.Random(3).getrandbits(128))
        records: list[Message] = [TopicRecord(name="legacy", topic_id=topic_id)]
        records += [PartitionRecord(partition_id=i, topic_id=topic_id, replicas=[1], isr=[1], leader=1,
                                    leader_epoch=0, partition_epoch=0) for i in range(2)]
        await quorum.append(records)
    quorum.close()


@pytest.mark.parametrize("with_registration", [True, False], ids=["registered", "never-registered"])
def test_a_data_dir_of_the_previous_layout_starts_and_serves(tmp_path: Path, with_registration: bool) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
    data = tmp_path / "data"
    trio.run(write_previous_layout, data, with_registration)
    broker = BrokerProcess(data).start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for partition in (0, 1):
            producer.produce("legacy", f"record {partition}".encode(), partition=partition)
        assert producer.flush(30) == 0
        broker.stop()
        broker.start()  # and again, on what this layout wrote
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "legacy",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["legacy"])
        got: set[bytes] = set()
        try:
            for _ in range(120):
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.add(message.value())
                if len(got) == 2:
                    break
        finally:
            consumer.close()
        assert got == {b"record 0", b"record 1"}
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("legacy", timeout=10)
        assert metadata.controller_id == 1
        assert sorted((p.id, p.leader) for p in metadata.topics["legacy"].partitions.values()) == [(0, 1), (1, 1)]
    finally:
        broker.stop()
