"""The controller checks new and altered topic settings itself, with the config package and
Kafka's messages: no callback into a broker."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from config import build_config
from controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, Endpoint
from controller.quorum import LocalQuorum
from controller.service import Controller, ControllerSettings, TopicRequest
from wire.errors import ErrorCode


async def started(tmp_path: Path, settings: ControllerSettings | None = None) -> Controller:
    controller = Controller(1, LocalQuorum(1, tmp_path), settings or ControllerSettings(), random.Random(3))
    await controller.bootstrap()
    await controller.register_broker(1, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
    return controller


def test_new_topic_settings_are_checked_with_kafkas_messages(tmp_path: Path) -> None:
    async def main() -> None:
        controller = await started(tmp_path)
        results = await controller.create_topics([
            TopicRequest("unknown", 1, configs={"retention.hours": "1"}),
            TopicRequest("bad-value", 1, configs={"segment.bytes": "13"}),
            TopicRequest("lags", 1, configs={"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}),
            TopicRequest("good", 1, configs={"retention.ms": "1000"}),
        ])
        assert [(r.error, r.message) for r in results] == [
            (ErrorCode.INVALID_CONFIG, "Unknown topic config name: retention.hours"),
            (ErrorCode.INVALID_CONFIG,
             "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
            (ErrorCode.INVALID_CONFIG,
             "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
            (ErrorCode.NONE, None),
        ]
        assert controller.image.topic("good") is not None
        assert controller.image.topic("unknown") is None

    trio.run(main)


def test_settings_combine_with_this_nodes_defaults_and_dynamic_ones(tmp_path: Path) -> None:
    async def main() -> None:
        config, _ = build_config({"log.cleaner.max.compaction.lag.ms": "100"})
        controller = await started(tmp_path, ControllerSettings(config=config))
        lag = {"min.compaction.lag.ms": "500"}
        [static] = await controller.create_topics([TopicRequest("t1", 1, configs=lag)], validate_only=True)
        assert (static.error, static.message) == (
            ErrorCode.INVALID_CONFIG,
            "conflict topic config setting min.compaction.lag.ms (500) > max.compaction.lag.ms (100)",
        )
        code, _ = await controller.alter_configs(
            BROKER_RESOURCE, "", {"log.cleaner.max.compaction.lag.ms": "1000"}, False, False)
        assert code == ErrorCode.NONE
        [dynamic] = await controller.create_topics([TopicRequest("t1", 1, configs=lag)])
        assert dynamic.error == ErrorCode.NONE

    trio.run(main)


def test_manual_assignments_get_kafkas_messages_after_the_settings(tmp_path: Path) -> None:
    async def main() -> None:
        controller = await started(tmp_path)
        results = await controller.create_topics([
            TopicRequest("both", 2, assignments={0: [1]}),
            TopicRequest("repeat", assignments=[(0, [1]), (0, [1])]),
            TopicRequest("unknown-broker", assignments={0: [7]}),
            TopicRequest("gap", assignments={0: [1], 2: [1]}),
            TopicRequest("config-first", assignments={0: [7]}, configs={"cleanup.policy": "archive"}),
            TopicRequest("ok", assignments=[(1, [1]), (0, [1])]),
        ])
        assert [(r.error, r.message) for r in results] == [
            (ErrorCode.INVALID_REQUEST,
             "A manual partition assignment was specified, but numPartitions was not set to -1."),
            (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for partition 0"),
            (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "The manual partition assignment includes broker 7, but no such broker is registered."),
            (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"),
            (ErrorCode.INVALID_CONFIG,
             "Invalid value archive for configuration cleanup.policy: String must be one of: compact, delete"),
            (ErrorCode.NONE, None),
        ]
        ok = controller.image.topic("ok")
        assert ok is not None and sorted(ok.partitions) == [0, 1]

    trio.run(main)


def test_altered_topic_settings_are_checked_before_the_topics_existence(tmp_path: Path) -> None:
    async def main() -> None:
        controller = await started(tmp_path)
        await controller.create_topics([TopicRequest("t", 1)])
        alter = controller.alter_configs
        assert await alter(TOPIC_RESOURCE, "", {"retention.ms": "1"}, False, False) == (
            ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        assert (await alter(TOPIC_RESOURCE, "a b", {"retention.ms": "1"}, False, False))[0] == (
            ErrorCode.INVALID_TOPIC_EXCEPTION)
        assert await alter(TOPIC_RESOURCE, "missing", {"retention.ms": "x"}, False, False) == (
            ErrorCode.INVALID_CONFIG, "Invalid value x for configuration retention.ms: Not a number of type LONG")
        assert await alter(TOPIC_RESOURCE, "missing", {"retention.ms": "1"}, False, False) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist.")
        assert await alter(TOPIC_RESOURCE, "t", {"retention.ms": "1"}, False, False) == (ErrorCode.NONE, None)
        assert controller.image.topic_config("t") == {"retention.ms": "1"}

    trio.run(main)
