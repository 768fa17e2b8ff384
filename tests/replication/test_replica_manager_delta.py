"""ReplicaManager.apply_delta: visiting only what each committed batch changed leaves the
same local replicas (leaders, followers, epochs, logs on disk) as applying the final image
at once — also when prepare_image made the new replicas first (in slices, as for a
CreateTopics of thousands of partitions)."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication import replica_manager
from broker.replication.replica_manager import ReplicaManager
from controller.delta import MetadataDelta
from controller.image import NO_CHANGE, TOPIC_RESOURCE, MetadataImage
from controller.state import apply
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.generated.metadata.rec_009_remove_topic_record import RemoveTopicRecord
from wire.primitives import Message

NODE = 1
BROKERS = (1, 2, 3)


def _record(rng: random.Random, image: MetadataImage) -> Message:
    topics = sorted(image.topics_by_id.values(), key=lambda t: t.name)
    kind = rng.randrange(6)
    if kind == 0 or not topics:
        free = [n for n in ("a", "b", "c", "d") if n not in image.topic_ids]
        if free:
            return TopicRecord(name=rng.choice(free), topic_id=uuid.UUID(int=rng.getrandbits(128)))
    topic = rng.choice(topics)
    if kind == 1 and len(topics) > 1:
        return RemoveTopicRecord(topic_id=topic.topic_id)
    if kind == 2 and topic.partitions:
        index = rng.choice(sorted(topic.partitions))
        return PartitionChangeRecord(partition_id=index, topic_id=topic.topic_id,
                                     leader=rng.choice([NO_CHANGE, *BROKERS]),
                                     replicas=None if rng.random() < 0.6 else rng.sample(BROKERS, 2))
    if kind == 3:
        return ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic.name, name="retention.ms",
                            value=rng.choice([None, "1000", "2000"]))
    replicas = rng.sample(BROKERS, 2)
    return PartitionRecord(partition_id=rng.randrange(len(topic.partitions) + 1), topic_id=topic.topic_id,
                           replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)


def _replicas(rm: ReplicaManager) -> dict[tuple[str, int], tuple[object, ...]]:
    return {key: (p.topic_id, p.leader, p.leader_epoch, p.partition_epoch, p.replicas, p.isr, p.log.config)
            for key, p in rm.partitions.items()}


def _on_disk(logs: LogManager) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in logs.logs}


def _log_config(image: MetadataImage, topic: str) -> LogConfig:
    retention = image.topic_config(topic).get("retention.ms")
    return LogConfig() if retention is None else LogConfig(retention_ms=int(retention))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), batches=st.lists(st.integers(1, 12), min_size=1, max_size=10))
def test_deltas_leave_the_replicas_a_full_apply_makes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                                     batches: list[int]) -> None:
    # Small thresholds, so that these small deltas take the many-partitions path too.
    monkeypatch.setattr(replica_manager, "CREATE_IN_THREAD_MIN_PARTITIONS", 1)
    monkeypatch.setattr(replica_manager, "HOST_SLICE", 2)
    rng = random.Random(seed)
    run = tmp_path / str(seed) / "-".join(map(str, batches))
    by_delta_logs = LogManager([run / "delta"], LogConfig(), lambda: 1_000)
    at_once_logs = LogManager([run / "full"], LogConfig(), lambda: 1_000)
    by_delta = ReplicaManager(NODE, by_delta_logs, _log_config, {})
    at_once = ReplicaManager(NODE, at_once_logs, _log_config, {})
    try:
        image = current = MetadataImage()
        offset = 0
        by_delta.apply_image(image)
        for size in batches:
            delta = MetadataDelta(image)
            for _ in range(size):
                record = _record(rng, current)  # valid against the records before it
                current = apply(current, record, offset)
                delta.replay(offset, record)
                offset += 1
            image = delta.apply()
            if rng.random() < 0.5:
                trio.run(by_delta.prepare_image, delta, image)
            by_delta.apply_delta(delta, image)
        at_once.apply_image(image)
        assert _replicas(by_delta) == _replicas(at_once)
        assert _on_disk(by_delta_logs) == _on_disk(at_once_logs) == set(at_once.partitions)
        hosted = {(t.name, p.partition) for t in image.topics_by_id.values() for p in t.partitions.values()
                  if NODE in p.replicas}
        assert set(at_once.partitions) == hosted
    finally:
        by_delta_logs.close(0)
        at_once_logs.close(0)
