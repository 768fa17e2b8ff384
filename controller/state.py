"""The metadata state machine: ``apply(image, record, offset) -> image``.

Pure: no I/O, no clock. Every node that replays the same committed records gets
the same image. Mirrors the replay logic of Kafka's MetadataDelta / image classes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from controller.acls import StandardAcl
from controller.image import (
    BrokerImage,
    Endpoint,
    MetadataImage,
    PartitionImage,
    ScramCredentialImage,
    TopicImage,
)
from wire.generated.metadata.rec_000_register_broker_record import RegisterBrokerRecord
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
from wire.generated.metadata.rec_014_client_quota_record import ClientQuotaRecord
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


class InvalidRecordError(Exception):
    """A committed record that contradicts the image: a bug, never silently skipped."""


def apply(image: MetadataImage, record: Message, offset: int) -> MetadataImage:
    handler = _HANDLERS.get(type(record))
    if handler is None:
        # Records this node does not act on (delegation tokens, features, ...) still advance it.
        return replace(image, offset=offset)
    new = handler(image, record)
    return replace(new, offset=offset)


def _topic(image: MetadataImage, rec: TopicRecord) -> MetadataImage:
    if rec.name in image.topic_ids:
        raise InvalidRecordError(f"topic {rec.name} already exists")
    topics = dict(image.topics_by_id)
    topics[rec.topic_id] = TopicImage(rec.name, rec.topic_id, {})
    ids = dict(image.topic_ids)
    ids[rec.name] = rec.topic_id
    return replace(image, topics_by_id=topics, topic_ids=ids)


def apply_all(image: MetadataImage, records: Sequence[tuple[int, Message]]) -> MetadataImage:
    """:func:`apply` of each record in order, with each run of PartitionRecords applied at once.

    One by one, every PartitionRecord copies the topic map: replaying or committing
    100,000 partitions would copy it 100,000 times.
    """
    i = 0
    while i < len(records):
        offset, record = records[i]
        if type(record) is not PartitionRecord:
            image = apply(image, record, offset)
            i += 1
            continue
        changed: dict[uuid.UUID, dict[int, PartitionImage]] = {}
        while i < len(records) and type(records[i][1]) is PartitionRecord:
            offset, rec = records[i]
            assert isinstance(rec, PartitionRecord)
            parts = changed.get(rec.topic_id)
            if parts is None:
                topic = image.topics_by_id.get(rec.topic_id)
                if topic is None:
                    raise InvalidRecordError(f"partition for unknown topic id {rec.topic_id}")
                parts = changed[rec.topic_id] = dict(topic.partitions)
            parts[rec.partition_id] = _partition_image(rec)
            i += 1
        topics = dict(image.topics_by_id)
        for topic_id, parts in changed.items():
            topics[topic_id] = replace(topics[topic_id], partitions=parts)
        image = replace(image, topics_by_id=topics, offset=offset)
    return image


def _partition(image: MetadataImage, rec: PartitionRecord) -> MetadataImage:
    topic = image.topics_by_id.get(rec.topic_id)
    if topic is None:
        raise InvalidRecordError(f"partition for unknown topic id {rec.topic_id}")
    return _with_partition(image, topic, _partition_image(rec))


def _partition_image(rec: PartitionRecord) -> PartitionImage:
    return PartitionImage(
        topic_id=rec.topic_id,
        partition=rec.partition_id,
        replicas=tuple(rec.replicas),
        isr=tuple(rec.isr),
        leader=rec.leader,
        leader_epoch=rec.leader_epoch,
        partition_epoch=rec.partition_epoch,
        removing_replicas=tuple(rec.removing_replicas),
        adding_replicas=tuple(rec.adding_replicas),
    )


def _with_partition(image: MetadataImage, topic: TopicImage, part: PartitionImage) -> MetadataImage:
    parts = dict(topic.partitions)
    parts[part.partition] = part
    topics = dict(image.topics_by_id)
    topics[topic.topic_id] = replace(topic, partitions=parts)
    return replace(image, topics_by_id=topics)


def _partition_change(image: MetadataImage, rec: PartitionChangeRecord) -> MetadataImage:
    topic = image.topics_by_id.get(rec.topic_id)
    if topic is None or rec.partition_id not in topic.partitions:
        raise InvalidRecordError(f"change for unknown partition {rec.topic_id}-{rec.partition_id}")
    old = topic.partitions[rec.partition_id]
    leader = old.leader if rec.leader == -2 else rec.leader
    # Kafka bumps the leader epoch on a leader change, the partition epoch on any change.
    leader_epoch = old.leader_epoch + 1 if leader != old.leader else old.leader_epoch
    part = replace(
        old,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=old.isr if rec.isr is None else tuple(rec.isr),
        replicas=old.replicas if rec.replicas is None else tuple(rec.replicas),
        removing_replicas=old.removing_replicas if rec.removing_replicas is None else tuple(rec.removing_replicas),
        adding_replicas=old.adding_replicas if rec.adding_replicas is None else tuple(rec.adding_replicas),
        partition_epoch=old.partition_epoch + 1,
    )
    return _with_partition(image, topic, part)


def _remove_topic(image: MetadataImage, rec: RemoveTopicRecord) -> MetadataImage:
    topic = image.topics_by_id.get(rec.topic_id)
    if topic is None:
        raise InvalidRecordError(f"removal of unknown topic id {rec.topic_id}")
    topics = dict(image.topics_by_id)
    del topics[rec.topic_id]
    ids = dict(image.topic_ids)
    ids.pop(topic.name, None)
    configs = dict(image.configs)
    configs.pop((2, topic.name), None)
    return replace(image, topics_by_id=topics, topic_ids=ids, configs=configs)


def _config(image: MetadataImage, rec: ConfigRecord) -> MetadataImage:
    key = (rec.resource_type, rec.resource_name)
    values = dict(image.configs.get(key, {}))
    if rec.value is None:
        values.pop(rec.name, None)
    else:
        values[rec.name] = rec.value
    configs = dict(image.configs)
    if values:
        configs[key] = values
    else:
        configs.pop(key, None)
    return replace(image, configs=configs)


def _register_broker(image: MetadataImage, rec: RegisterBrokerRecord) -> MetadataImage:
    brokers = dict(image.brokers)
    brokers[rec.broker_id] = BrokerImage(
        broker_id=rec.broker_id,
        epoch=rec.broker_epoch,
        incarnation_id=rec.incarnation_id,
        endpoints=tuple(
            Endpoint(ep.name, ep.host, ep.port, ep.security_protocol) for ep in rec.end_points
        ),
        rack=rec.rack,
        fenced=rec.fenced,
        in_controlled_shutdown=rec.in_controlled_shutdown,
    )
    return replace(image, brokers=brokers)


def _set_fenced(image: MetadataImage, broker_id: int, epoch: int, fenced: bool) -> MetadataImage:
    broker = image.brokers.get(broker_id)
    if broker is None or broker.epoch != epoch:
        raise InvalidRecordError(f"fencing change for unknown broker {broker_id} epoch {epoch}")
    brokers = dict(image.brokers)
    brokers[broker_id] = replace(broker, fenced=fenced)
    return replace(image, brokers=brokers)


def _fence(image: MetadataImage, rec: FenceBrokerRecord) -> MetadataImage:
    return _set_fenced(image, rec.id, rec.epoch, True)


def _unfence(image: MetadataImage, rec: UnfenceBrokerRecord) -> MetadataImage:
    return _set_fenced(image, rec.id, rec.epoch, False)


def _registration_change(image: MetadataImage, rec: BrokerRegistrationChangeRecord) -> MetadataImage:
    broker = image.brokers.get(rec.broker_id)
    if broker is None:
        raise InvalidRecordError(f"registration change for unknown broker {rec.broker_id}")
    fenced = broker.fenced if rec.fenced == 0 else rec.fenced == 1
    shutdown = broker.in_controlled_shutdown if rec.in_controlled_shutdown == 0 else rec.in_controlled_shutdown == 1
    brokers = dict(image.brokers)
    brokers[rec.broker_id] = replace(broker, fenced=fenced, in_controlled_shutdown=shutdown)
    return replace(image, brokers=brokers)


def _unregister(image: MetadataImage, rec: UnregisterBrokerRecord) -> MetadataImage:
    brokers = dict(image.brokers)
    brokers.pop(rec.broker_id, None)
    return replace(image, brokers=brokers)


def _feature(image: MetadataImage, rec: FeatureLevelRecord) -> MetadataImage:
    features = dict(image.features)
    if rec.feature_level == 0 and rec.name != "metadata.version":
        features.pop(rec.name, None)  # level 0: the feature is no longer finalized
    else:
        features[rec.name] = rec.feature_level
    return replace(image, features=features)


def _producer_ids(image: MetadataImage, rec: ProducerIdsRecord) -> MetadataImage:
    if rec.next_producer_id < image.next_producer_id:
        raise InvalidRecordError("producer id blocks must only move forward")
    return replace(image, next_producer_id=rec.next_producer_id)


def _scram(image: MetadataImage, rec: UserScramCredentialRecord) -> MetadataImage:
    credentials = dict(image.scram_credentials)
    credentials[(rec.name, rec.mechanism)] = ScramCredentialImage(rec.salt, rec.stored_key, rec.server_key,
                                                                  rec.iterations)
    return replace(image, scram_credentials=credentials)


def _remove_scram(image: MetadataImage, rec: RemoveUserScramCredentialRecord) -> MetadataImage:
    credentials = dict(image.scram_credentials)
    credentials.pop((rec.name, rec.mechanism), None)
    return replace(image, scram_credentials=credentials)


def _acl(image: MetadataImage, rec: AccessControlEntryRecord) -> MetadataImage:
    if rec.id in image.acls:
        raise InvalidRecordError(f"ACL {rec.id} already exists")
    acls = dict(image.acls)
    acls[rec.id] = StandardAcl.of(rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal,
                                  rec.host, rec.operation, rec.permission_type)
    return replace(image, acls=acls)


def _remove_acl(image: MetadataImage, rec: RemoveAccessControlEntryRecord) -> MetadataImage:
    if rec.id not in image.acls:
        raise InvalidRecordError(f"removal of unknown ACL {rec.id}")
    acls = dict(image.acls)
    del acls[rec.id]
    return replace(image, acls=acls)


def _client_quota(image: MetadataImage, rec: ClientQuotaRecord) -> MetadataImage:
    entity = tuple(sorted((e.entity_type, e.entity_name) for e in rec.entity))
    values = dict(image.client_quotas.get(entity, {}))
    if rec.remove:
        values.pop(rec.key, None)
    else:
        values[rec.key] = rec.value
    quotas = dict(image.client_quotas)
    if values:
        quotas[entity] = values
    else:
        quotas.pop(entity, None)
    return replace(image, client_quotas=quotas)


_HANDLERS: dict[type[Message], Callable[[MetadataImage, Any], MetadataImage]] = {
    TopicRecord: _topic,
    PartitionRecord: _partition,
    PartitionChangeRecord: _partition_change,
    RemoveTopicRecord: _remove_topic,
    ConfigRecord: _config,
    RegisterBrokerRecord: _register_broker,
    FenceBrokerRecord: _fence,
    UnfenceBrokerRecord: _unfence,
    BrokerRegistrationChangeRecord: _registration_change,
    UnregisterBrokerRecord: _unregister,
    FeatureLevelRecord: _feature,
    ProducerIdsRecord: _producer_ids,
    UserScramCredentialRecord: _scram,
    RemoveUserScramCredentialRecord: _remove_scram,
    AccessControlEntryRecord: _acl,
    RemoveAccessControlEntryRecord: _remove_acl,
    ClientQuotaRecord: _client_quota,
}
