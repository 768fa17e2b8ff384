"""apply_all: runs of PartitionRecords applied at once give the image record-by-record apply gives."""

from __future__ import annotations

import random
import uuid

import pytest

from controller.image import MetadataImage
from controller.state import InvalidRecordError, apply, apply_all
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.primitives import Message


def _records(seed: int) -> list[tuple[int, Message]]:
    rng = random.Random(seed)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(6)]
    out: list[Message] = []
    for i, topic_id in enumerate(ids):
        out.append(TopicRecord(name=f"t{i}", topic_id=topic_id))
        if rng.random() < 0.5:
            out.append(ConfigRecord(resource_type=2, resource_name=f"t{i}", name="retention.ms", value="1000"))
        for p in range(rng.randint(1, 30)):
            out.append(PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1], isr=[1], leader=1))
        # Interleave: a later partition of an earlier topic, then re-assign one partition.
        if i:
            out.append(PartitionRecord(partition_id=99, topic_id=ids[i - 1], replicas=[2], isr=[2], leader=2))
            out.append(PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[3], isr=[3], leader=3))
    return list(enumerate(out))


@pytest.mark.parametrize("seed", range(5))
def test_apply_all_equals_one_by_one(seed: int) -> None:
    records = _records(seed)
    one_by_one = MetadataImage()
    for offset, record in records:
        one_by_one = apply(one_by_one, record, offset)
    assert apply_all(MetadataImage(), records) == one_by_one
    # And in two halves, as commits arrive.
    half = len(records) // 2
    assert apply_all(apply_all(MetadataImage(), records[:half]), records[half:]) == one_by_one


def test_a_partition_of_an_unknown_topic_is_refused() -> None:
    with pytest.raises(InvalidRecordError):
        apply_all(MetadataImage(), [(0, PartitionRecord(partition_id=0, topic_id=uuid.uuid4(), replicas=[1]))])
