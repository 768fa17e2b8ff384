"""MetadataDelta: replaying records one by one or per batch gives the same image, and a
finished delta names exactly what differs between its base image and the new one."""

from __future__ import annotations

import itertools
import random
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.delta import InvalidRecordError, MetadataDelta
from controller.image import BROKER_RESOURCE, NO_CHANGE, TOPIC_RESOURCE, MetadataImage
from controller.state import apply
from wire.generated.metadata.rec_000_register_broker_record import (
    RegisterBrokerRecord,
    RegisterBrokerRecordBrokerEndpoint,
)
from wire.generated.metadata.rec_001_unregister_broker_record import UnregisterBrokerRecord
from wire.generated.metadata.rec_002_topic_record import TopicRecord
from wire.generated.metadata.rec_003_partition_record import PartitionRecord
from wire.generated.metadata.rec_004_config_record import ConfigRecord
from wire.generated.metadata.rec_005_partition_change_record import PartitionChangeRecord
from wire.generated.metadata.rec_007_fence_broker_record import FenceBrokerRecord
from wire.generated.metadata.rec_008_unfence_broker_record import UnfenceBrokerRecord
from wire.generated.metadata.rec_009_remove_topic_record import RemoveTopicRecord
from wire.generated.metadata.rec_011_user_scram_credential_record import UserScramCredentialRecord
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord
from wire.generated.metadata.rec_014_client_quota_record import (
    ClientQuotaRecord,
    ClientQuotaRecordEntityData,
)
from wire.generated.metadata.rec_015_producer_ids_record import ProducerIdsRecord
from wire.generated.metadata.rec_017_broker_registration_change_record import (
    BrokerRegistrationChangeRecord,
)
from wire.generated.metadata.rec_018_access_control_entry_record import AccessControlEntryRecord
from wire.generated.metadata.rec_019_remove_access_control_entry_record import (
    RemoveAccessControlEntryRecord,
)
from wire.generated.metadata.rec_022_remove_user_scram_credential_record import (
    RemoveUserScramCredentialRecord,
)
from wire.primitives import Message

BROKERS = (1, 2, 3, 4)
TOPIC_NAMES = ("a", "b", "c")
CONFIG_KEYS = ("retention.ms", "cleanup.policy")


def _record(rng: random.Random, image: MetadataImage, offset: int) -> Message:
    """One record that is valid against ``image`` (the state machine must accept it)."""
    while True:
        kind = rng.randrange(15)
        topics = sorted(image.topics_by_id.values(), key=lambda t: t.name)
        if kind == 0:
            free = [n for n in TOPIC_NAMES if n not in image.topic_ids]
            if free:
                return TopicRecord(name=rng.choice(free), topic_id=uuid.UUID(int=rng.getrandbits(128)))
        elif kind in (1, 2) and topics:
            topic = rng.choice(topics)
            replicas = rng.sample(BROKERS, 2)
            index = rng.randrange(len(topic.partitions) + 1)
            return PartitionRecord(partition_id=index, topic_id=topic.topic_id, replicas=replicas, isr=replicas,
                                   leader=replicas[0], leader_epoch=0, partition_epoch=0)
        elif kind in (3, 4) and any(t.partitions for t in topics):
            topic = rng.choice([t for t in topics if t.partitions])
            part = rng.choice(sorted(topic.partitions))
            leader = rng.choice([NO_CHANGE, -1, *BROKERS])
            isr = None if rng.random() < 0.5 else rng.sample(BROKERS, rng.randint(1, 3))
            return PartitionChangeRecord(partition_id=part, topic_id=topic.topic_id, leader=leader, isr=isr)
        elif kind == 5 and topics:
            return RemoveTopicRecord(topic_id=rng.choice(topics).topic_id)
        elif kind == 6:
            resource = rng.choice([(TOPIC_RESOURCE, n) for n in TOPIC_NAMES] + [(BROKER_RESOURCE, ""),
                                                                                 (BROKER_RESOURCE, "1")])
            value = None if rng.random() < 0.4 else str(rng.randrange(3))
            return ConfigRecord(resource_type=resource[0], resource_name=resource[1], name=rng.choice(CONFIG_KEYS),
                                value=value)
        elif kind == 7:
            return RegisterBrokerRecord(
                broker_id=rng.choice(BROKERS), incarnation_id=uuid.UUID(int=rng.getrandbits(128)),
                broker_epoch=offset, fenced=rng.random() < 0.5, rack=rng.choice([None, "r1"]),
                end_points=[RegisterBrokerRecordBrokerEndpoint(name="PLAINTEXT", host="h", port=9092)])
        elif kind == 8 and image.brokers:
            broker = image.brokers[rng.choice(sorted(image.brokers))]
            cls = FenceBrokerRecord if rng.random() < 0.5 else UnfenceBrokerRecord
            return cls(id=broker.broker_id, epoch=broker.epoch)
        elif kind == 9 and image.brokers:
            return BrokerRegistrationChangeRecord(broker_id=rng.choice(sorted(image.brokers)),
                                                  broker_epoch=0, fenced=rng.choice([0, 1, -1]),
                                                  in_controlled_shutdown=rng.choice([0, 1]))
        elif kind == 10 and image.brokers:
            return UnregisterBrokerRecord(broker_id=rng.choice(sorted(image.brokers)), broker_epoch=0)
        elif kind == 11:
            return FeatureLevelRecord(name=rng.choice(["metadata.version", "transaction.version"]),
                                      feature_level=rng.randrange(3))
        elif kind == 12:
            return ProducerIdsRecord(broker_id=1, broker_epoch=0,
                                     next_producer_id=image.next_producer_id + rng.choice([0, 1000]))
        elif kind == 13:
            user = rng.choice(["alice", "bob"])
            if rng.random() < 0.5:
                return UserScramCredentialRecord(name=user, mechanism=1, salt=b"s", stored_key=b"k",
                                                 server_key=bytes([rng.randrange(2)]), iterations=4096)
            return RemoveUserScramCredentialRecord(name=user, mechanism=1)
        else:
            if image.acls and rng.random() < 0.4:
                return RemoveAccessControlEntryRecord(id=rng.choice(sorted(image.acls)))
            if rng.random() < 0.5:
                return AccessControlEntryRecord(id=uuid.UUID(int=rng.getrandbits(128)), resource_type=2,
                                                resource_name=rng.choice(TOPIC_NAMES), pattern_type=3,
                                                principal="User:alice", host="*", operation=3, permission_type=3)
            return ClientQuotaRecord(entity=[ClientQuotaRecordEntityData(entity_type="user", entity_name="alice")],
                                     key="producer_byte_rate", value=float(rng.randrange(2)),
                                     remove=rng.random() < 0.4)


def _records(seed: int, count: int) -> list[tuple[int, Message]]:
    rng = random.Random(seed)
    image = MetadataImage()
    out: list[tuple[int, Message]] = []
    for offset in range(count):
        record = _record(rng, image, offset)
        image = apply(image, record, offset)
        out.append((offset, record))
    return out


def _batches(records: list[tuple[int, Message]], cuts: list[int]) -> list[list[tuple[int, Message]]]:
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    return [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _changes(delta: MetadataDelta) -> dict[str, Any]:
    """What a delta says changed, as plain values."""
    return {
        "topics": {tid: (t.created, t.name, dict(t.partition_changes)) for tid, t in delta.topics.changed.items()},
        "deleted": dict(delta.topics.deleted),
        "names": dict(delta.topics.names),
        "brokers": dict(delta.brokers),
        "configs": dict(delta.configs),
        "features": dict(delta.features),
        "next_producer_id": delta.next_producer_id,
        "scram": dict(delta.scram_credentials),
        "acls": dict(delta.acls),
        "quotas": dict(delta.client_quotas),
        "offset": delta.offset,
    }


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 80), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_per_batch_equals_one_by_one_and_names_exactly_what_differs(seed: int, count: int, cuts: list[int]) -> None:
    records = _records(seed, count)
    one_by_one = MetadataImage()
    for offset, record in records:
        one_by_one = apply(one_by_one, record, offset)
    image = MetadataImage()
    for batch in _batches(records, cuts):
        delta = MetadataDelta(image)
        delta.replay_all(batch)
        new = delta.apply()
        assert delta.image is image and new.offset == batch[-1][0]
        assert _changes(delta) == _changes(MetadataDelta.between(image, new))
        assert MetadataDelta.between(image, new).apply() is new
        image = new
    assert image == one_by_one
    whole = MetadataDelta(MetadataImage())
    whole.replay_all(records)
    assert whole.apply() == one_by_one


def test_a_delta_shares_what_it_did_not_change() -> None:
    records = _records(7, 60)
    image = MetadataImage()
    for offset, record in records:
        image = apply(image, record, offset)
    delta = MetadataDelta(image)
    delta.replay(60, ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=image.next_producer_id + 1000))
    new = delta.apply()
    assert new.next_producer_id == image.next_producer_id + 1000
    assert new.topics_by_id is image.topics_by_id and new.configs is image.configs and new.brokers is image.brokers
    assert not delta.topics and not delta.configs


def test_a_change_undone_within_the_batch_is_no_change() -> None:
    base = apply(MetadataImage(), ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms",
                                               value="1"), 0)
    delta = MetadataDelta(base)
    delta.replay(1, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value="2"))
    delta.replay(2, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value="1"))
    new = delta.apply()
    assert delta.is_empty() and new.configs is base.configs and new.offset == 2


def test_a_topic_created_and_deleted_within_the_batch_is_neither() -> None:
    topic_id = uuid.UUID(int=5)
    delta = MetadataDelta(MetadataImage())
    delta.replay(0, TopicRecord(name="a", topic_id=topic_id))
    delta.replay(1, PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1], isr=[1], leader=1))
    delta.replay(2, RemoveTopicRecord(topic_id=topic_id))
    assert delta.apply().topics_by_id == {} and delta.is_empty()


def test_a_delta_refuses_what_contradicts_the_image_as_of_its_earlier_records() -> None:
    topic_id = uuid.UUID(int=5)
    delta = MetadataDelta(MetadataImage())
    delta.replay(0, TopicRecord(name="a", topic_id=topic_id))
    delta.replay(1, RemoveTopicRecord(topic_id=topic_id))
    with pytest.raises(InvalidRecordError):
        delta.replay(2, PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1], isr=[1], leader=1))
    with pytest.raises(InvalidRecordError):
        delta.replay(2, PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=1))
    delta.replay(2, TopicRecord(name="a", topic_id=uuid.UUID(int=6)))
    with pytest.raises(InvalidRecordError):
        delta.replay(3, TopicRecord(name="a", topic_id=uuid.UUID(int=7)))
