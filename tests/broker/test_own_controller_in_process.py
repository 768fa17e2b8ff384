"""A node that is broker and controller reaches its own controller in process: while its
controller is the active one, registration, heartbeats and forwarded changes open no
connection to its controller listener."""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from broker.node import BrokerNode
from config import load_config
from controller.service import TopicRequest
from wire.errors import ErrorCode

ESTABLISHED = "01"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def established_to(port: int) -> int:
    """Established TCP connections whose local or remote end is 127.0.0.1:``port``."""
    count = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == ESTABLISHED and port in (int(local.split(":")[1], 16), int(remote.split(":")[1], 16)):
                count += 1
    return count


def test_a_combined_node_registers_and_forwards_to_its_own_active_controller_without_a_socket(
    tmp_path: Path,
) -> None:
    controller_port = free_port()
    config, _ = load_config(None, [
        "node.id=1", "process.roles=broker,controller",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}", "controller.listener.names=CONTROLLER",
        f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
        f"log.dirs={tmp_path / 'data'}", "metrics.listener=", "broker.heartbeat.interval.ms=100",
    ])
    node = BrokerNode(config)
    seen: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(60):
                await nursery.start(node.run)
            seen["epoch"] = node.broker_epoch
            results = await node.controller.create_topics([TopicRequest("in-process", 3, 1)])
            seen["created"] = [r.error for r in results]
            seen["partitions"] = len(node.image.topic("in-process").partitions)  # type: ignore[union-attr]
            await trio.sleep(0.5)  # a few heartbeats
            me = node.image.brokers[1]
            seen["registered"] = (me.epoch, me.fenced)
            seen["connections"] = established_to(controller_port)
            node.request_shutdown()

    trio.run(main)
    epoch = seen["epoch"]
    assert isinstance(epoch, int) and epoch >= 0
    assert seen["registered"] == (epoch, False)
    assert seen["created"] == [ErrorCode.NONE]
    assert seen["partitions"] == 3
    assert seen["connections"] == 0
