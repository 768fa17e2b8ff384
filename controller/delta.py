"""MetadataDelta: what a run of committed metadata records changes in an image.

Kafka's MetadataDelta / MetadataPublisher model: the records of a committed batch are
replayed into a delta over the current image, the new image is built once from it
(sharing every unchanged part with the old one), and each publisher hears of the batch
once, as ``publisher(delta, new_image)``, doing work in proportion to the delta — the
partitions that changed, the config resources that changed — never a scan of the image.

A delta is built by :meth:`MetadataDelta.replay` (the state machine: every record is
checked against the image as of the records before it, as Kafka's image classes do) or by
:meth:`MetadataDelta.between` (two images, for a snapshot that replaced the state).
:meth:`MetadataDelta.apply` drops the changes that came back to the old value, so a
finished delta names exactly what differs between its base image and the new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from controller.acls import StandardAcl
from controller.image import (
    NO_CHANGE,
    TOPIC_RESOURCE,
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

__all__ = [
    "InvalidRecordError",
    "MetadataDelta",
    "MetadataPublisher",
    "TopicDelta",
    "TopicsDelta",
    "image_publisher",
]

_K = TypeVar("_K")
_V = TypeVar("_V")

#: Quota entity: sorted (entity type, entity name) pairs.
QuotaEntity = tuple[tuple[str, str | None], ...]


class InvalidRecordError(Exception):
    """A committed record that contradicts the image: a bug, never silently skipped."""


class TopicDelta:
    """A topic created, or whose partitions changed, in a delta."""

    __slots__ = ("image", "name", "partition_changes", "topic_id")

    def __init__(self, image: TopicImage | None, name: str, topic_id: uuid.UUID) -> None:
        #: The topic in the base image; None when the delta creates it.
        self.image = image
        self.name = name
        self.topic_id = topic_id
        #: partition index -> its new image (created or changed).
        self.partition_changes: dict[int, PartitionImage] = {}

    @property
    def created(self) -> bool:
        return self.image is None

    def partition(self, index: int) -> PartitionImage | None:
        """The partition as of the records replayed so far."""
        part = self.partition_changes.get(index)
        if part is None and self.image is not None:
            part = self.image.partitions.get(index)
        return part

    def previous(self, index: int) -> PartitionImage | None:
        """The partition in the base image (None: new in this delta)."""
        return None if self.image is None else self.image.partitions.get(index)

    def apply(self) -> TopicImage:
        if self.image is not None and not self.partition_changes:
            return self.image
        parts = dict(self.image.partitions) if self.image is not None else {}
        parts.update(self.partition_changes)
        return TopicImage(self.name, self.topic_id, parts)

    def _normalize(self) -> None:
        if self.image is None:
            return
        old = self.image.partitions
        for index in [i for i, part in self.partition_changes.items() if old.get(i) == part]:
            del self.partition_changes[index]


class TopicsDelta:
    """Topics created, changed and deleted (Kafka's TopicsDelta)."""

    __slots__ = ("_base", "changed", "deleted", "names")

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        #: topic id -> the topic created or changed.
        self.changed: dict[uuid.UUID, TopicDelta] = {}
        #: topic id -> the base image's topic, deleted.
        self.deleted: dict[uuid.UUID, TopicImage] = {}
        #: topic name -> its new id (None: no such topic any more).
        self.names: dict[str, uuid.UUID | None] = {}

    def __bool__(self) -> bool:
        return bool(self.changed or self.deleted)

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of the topic named ``name`` as of the records replayed so far."""
        if name in self.names:
            return self.names[name]
        return self._base.topic_ids.get(name)

    def topic(self, topic_id: uuid.UUID) -> TopicDelta | TopicImage | None:
        """The topic as of the records replayed so far."""
        changed = self.changed.get(topic_id)
        if changed is not None:
            return changed
        if topic_id in self.deleted:
            return None
        return self._base.topics_by_id.get(topic_id)

    def changed_named(self, name: str) -> TopicDelta | None:
        """The created or changed topic named ``name``, if any."""
        topic_id = self.names.get(name, self._base.topic_ids.get(name))
        return None if topic_id is None else self.changed.get(topic_id)

    def deleted_named(self, name: str) -> TopicImage | None:
        """The base image's topic named ``name``, if the delta deletes it."""
        for topic in self.deleted.values():
            if topic.name == name:
                return topic
        return None

    def changed_partitions(self) -> Iterator[tuple[TopicDelta, PartitionImage]]:
        """Every partition created or changed, with its topic."""
        for topic in self.changed.values():
            for part in topic.partition_changes.values():
                yield topic, part

    def _edit(self, topic_id: uuid.UUID) -> TopicDelta:
        changed = self.changed.get(topic_id)
        if changed is not None:
            return changed
        base = None if topic_id in self.deleted else self._base.topics_by_id.get(topic_id)
        if base is None:
            raise InvalidRecordError(f"partition for unknown topic id {topic_id}")
        changed = self.changed[topic_id] = TopicDelta(base, base.name, topic_id)
        return changed

    def _normalize(self) -> None:
        for topic_id, topic in list(self.changed.items()):
            topic._normalize()
            if topic.image is not None and not topic.partition_changes:
                del self.changed[topic_id]
        _drop_unchanged(self.names, self._base.topic_ids)


#: Hears of each committed batch: the delta, and the image it made.
MetadataPublisher = Callable[["MetadataDelta", MetadataImage], None]


def image_publisher(listener: Callable[[MetadataImage], None]) -> MetadataPublisher:
    """A publisher for a listener that only wants each new image."""

    def publish(_delta: MetadataDelta, image: MetadataImage) -> None:
        listener(image)

    return publish


class MetadataDelta:
    """Changes over ``image``, replayed record by record; :meth:`apply` makes the new image."""

    def __init__(self, image: MetadataImage) -> None:
        #: The image the delta applies to.
        self.image = image
        #: Offset of the last record replayed.
        self.offset = image.offset
        self.topics = TopicsDelta(image)
        #: broker id -> its registration (None: unregistered).
        self.brokers: dict[int, BrokerImage | None] = {}
        #: config resource -> its whole new config ({}: none left).
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        #: feature name -> its finalized level (None: no longer finalized).
        self.features: dict[str, int | None] = {}
        #: The next producer id, when it moved.
        self.next_producer_id: int | None = None
        self.scram_credentials: dict[tuple[str, int], ScramCredentialImage | None] = {}
        #: ACL id -> the ACL (None: removed).
        self.acls: dict[uuid.UUID, StandardAcl | None] = {}
        #: quota entity -> its whole new quotas ({}: none left).
        self.client_quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._result: MetadataImage | None = None

    # ------------------------------------------------------------ building

    @classmethod
    def between(cls, old: MetadataImage, new: MetadataImage) -> MetadataDelta:
        """What differs between two images (a snapshot replaced ``old`` by ``new``)."""
        delta = cls(old)
        delta.offset = new.offset
        topics = delta.topics
        if old.topics_by_id is not new.topics_by_id:
            for topic_id, topic in new.topics_by_id.items():
                before = old.topics_by_id.get(topic_id)
                if before is topic:
                    continue
                if before is not None and before.partitions.keys() <= topic.partitions.keys():
                    changed = TopicDelta(before, topic.name, topic_id)
                    changed.partition_changes.update(
                        (i, part) for i, part in topic.partitions.items() if before.partitions.get(i) != part)
                else:
                    # New, or (never made by records) a topic that lost partitions: deleted and created.
                    if before is not None:
                        topics.deleted[topic_id] = before
                    changed = TopicDelta(None, topic.name, topic_id)
                    changed.partition_changes.update(topic.partitions)
                topics.changed[topic_id] = changed
            topics.deleted.update((i, t) for i, t in old.topics_by_id.items() if i not in new.topics_by_id)
        if old.topic_ids is not new.topic_ids:
            topics.names.update(_differences(old.topic_ids, new.topic_ids))
        if old.brokers is not new.brokers:
            delta.brokers.update(_differences(old.brokers, new.brokers))
        if old.configs is not new.configs:
            delta.configs.update((k, {} if v is None else dict(v))
                                 for k, v in _differences(old.configs, new.configs).items())
        if old.features is not new.features:
            delta.features.update(_differences(old.features, new.features))
        if old.next_producer_id != new.next_producer_id:
            delta.next_producer_id = new.next_producer_id
        if old.scram_credentials is not new.scram_credentials:
            delta.scram_credentials.update(_differences(old.scram_credentials, new.scram_credentials))
        if old.acls is not new.acls:
            delta.acls.update(_differences(old.acls, new.acls))
        if old.client_quotas is not new.client_quotas:
            delta.client_quotas.update((k, {} if v is None else dict(v))
                                       for k, v in _differences(old.client_quotas, new.client_quotas).items())
        topics._normalize()
        delta._result = new
        return delta

    def replay_all(self, records: Iterable[tuple[int, Message]]) -> None:
        for offset, record in records:
            self.replay(offset, record)

    def replay(self, offset: int, record: Message) -> None:
        """Adds one committed record (``InvalidRecordError`` if it contradicts the image)."""
        if self._result is not None:
            raise RuntimeError("the delta was applied already")
        handler = _REPLAY.get(type(record))
        if handler is not None:
            handler(self, record)
        # Records this node does not act on (delegation tokens, ...) still advance it.
        self.offset = offset

    # ------------------------------------------------------------ reading

    def is_empty(self) -> bool:
        """No change but the offset (after :meth:`apply`)."""
        return not (self.topics or self.topics.names or self.brokers or self.configs or self.features
                    or self.next_producer_id is not None or self.scram_credentials or self.acls
                    or self.client_quotas)

    def config_changed(self, resource_type: int, resource_name: str) -> bool:
        return (resource_type, resource_name) in self.configs

    def apply(self) -> MetadataImage:
        """The new image (built once; the delta then names only real changes)."""
        if self._result is not None:
            return self._result
        base = self.image
        topics = self.topics
        topics._normalize()
        _drop_unchanged(self.brokers, base.brokers)
        _drop_unchanged_mappings(self.configs, base.configs)
        _drop_unchanged(self.features, base.features)
        if self.next_producer_id == base.next_producer_id:
            self.next_producer_id = None
        _drop_unchanged(self.scram_credentials, base.scram_credentials)
        _drop_unchanged(self.acls, base.acls)
        _drop_unchanged_mappings(self.client_quotas, base.client_quotas)
        topics_by_id = base.topics_by_id
        if topics:
            topics_by_id = dict(topics_by_id)
            for topic_id in topics.deleted:
                topics_by_id.pop(topic_id, None)
            for topic_id, topic in topics.changed.items():
                topics_by_id[topic_id] = topic.apply()
        self._result = MetadataImage(
            offset=self.offset,
            topics_by_id=topics_by_id,
            topic_ids=_patched(base.topic_ids, topics.names),
            brokers=_patched(base.brokers, self.brokers),
            configs=_patched(base.configs, {k: v or None for k, v in self.configs.items()}),
            features=_patched(base.features, self.features),
            next_producer_id=base.next_producer_id if self.next_producer_id is None else self.next_producer_id,
            scram_credentials=_patched(base.scram_credentials, self.scram_credentials),
            acls=_patched(base.acls, self.acls),
            client_quotas=_patched(base.client_quotas, {k: v or None for k, v in self.client_quotas.items()}),
        )
        return self._result

    # ------------------------------------------------------------ the state machine

    def _broker(self, broker_id: int) -> BrokerImage | None:
        if broker_id in self.brokers:
            return self.brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def _topic_record(self, rec: TopicRecord) -> None:
        topics = self.topics
        if topics.topic_id(rec.name) is not None:
            raise InvalidRecordError(f"topic {rec.name} already exists")
        if topics.topic(rec.topic_id) is not None:
            raise InvalidRecordError(f"topic id {rec.topic_id} already exists")
        topics.changed[rec.topic_id] = TopicDelta(None, rec.name, rec.topic_id)
        topics.names[rec.name] = rec.topic_id

    def _partition_record(self, rec: PartitionRecord) -> None:
        self.topics._edit(rec.topic_id).partition_changes[rec.partition_id] = PartitionImage(
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

    def _partition_change(self, rec: PartitionChangeRecord) -> None:
        topic = self.topics.changed.get(rec.topic_id)
        if topic is None and self.topics.topic(rec.topic_id) is not None:
            topic = self.topics._edit(rec.topic_id)
        old = None if topic is None else topic.partition(rec.partition_id)
        if topic is None or old is None:
            raise InvalidRecordError(f"change for unknown partition {rec.topic_id}-{rec.partition_id}")
        leader = old.leader if rec.leader == NO_CHANGE else rec.leader
        # Kafka bumps the leader epoch on a leader change, the partition epoch on any change.
        topic.partition_changes[rec.partition_id] = replace(
            old,
            leader=leader,
            leader_epoch=old.leader_epoch + 1 if leader != old.leader else old.leader_epoch,
            isr=old.isr if rec.isr is None else tuple(rec.isr),
            replicas=old.replicas if rec.replicas is None else tuple(rec.replicas),
            removing_replicas=old.removing_replicas if rec.removing_replicas is None else tuple(rec.removing_replicas),
            adding_replicas=old.adding_replicas if rec.adding_replicas is None else tuple(rec.adding_replicas),
            partition_epoch=old.partition_epoch + 1,
        )

    def _remove_topic(self, rec: RemoveTopicRecord) -> None:
        topics = self.topics
        topic = topics.topic(rec.topic_id)
        if topic is None:
            raise InvalidRecordError(f"removal of unknown topic id {rec.topic_id}")
        changed = topics.changed.pop(rec.topic_id, None)
        base = self.image.topics_by_id.get(rec.topic_id) if changed is None else changed.image
        if base is not None:
            topics.deleted[rec.topic_id] = base
        topics.names[topic.name] = None
        self.configs[(TOPIC_RESOURCE, topic.name)] = {}

    def _config(self, rec: ConfigRecord) -> None:
        key = (rec.resource_type, rec.resource_name)
        values = self.configs.get(key)
        if values is None:
            values = self.configs[key] = dict(self.image.configs.get(key, {}))
        if rec.value is None:
            values.pop(rec.name, None)
        else:
            values[rec.name] = rec.value

    def _register_broker(self, rec: RegisterBrokerRecord) -> None:
        self.brokers[rec.broker_id] = BrokerImage(
            broker_id=rec.broker_id,
            epoch=rec.broker_epoch,
            incarnation_id=rec.incarnation_id,
            endpoints=tuple(Endpoint(ep.name, ep.host, ep.port, ep.security_protocol) for ep in rec.end_points),
            rack=rec.rack,
            fenced=rec.fenced,
            in_controlled_shutdown=rec.in_controlled_shutdown,
        )

    def _set_fenced(self, broker_id: int, epoch: int, fenced: bool) -> None:
        broker = self._broker(broker_id)
        if broker is None or broker.epoch != epoch:
            raise InvalidRecordError(f"fencing change for unknown broker {broker_id} epoch {epoch}")
        self.brokers[broker_id] = replace(broker, fenced=fenced)

    def _fence(self, rec: FenceBrokerRecord) -> None:
        self._set_fenced(rec.id, rec.epoch, True)

    def _unfence(self, rec: UnfenceBrokerRecord) -> None:
        self._set_fenced(rec.id, rec.epoch, False)

    def _registration_change(self, rec: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(rec.broker_id)
        if broker is None:
            raise InvalidRecordError(f"registration change for unknown broker {rec.broker_id}")
        fenced = broker.fenced if rec.fenced == 0 else rec.fenced == 1
        shutdown = broker.in_controlled_shutdown if rec.in_controlled_shutdown == 0 else rec.in_controlled_shutdown == 1
        self.brokers[rec.broker_id] = replace(broker, fenced=fenced, in_controlled_shutdown=shutdown)

    def _unregister(self, rec: UnregisterBrokerRecord) -> None:
        self.brokers[rec.broker_id] = None

    def _feature(self, rec: FeatureLevelRecord) -> None:
        # Level 0: the feature is no longer finalized (metadata.version always is).
        gone = rec.feature_level == 0 and rec.name != "metadata.version"
        self.features[rec.name] = None if gone else rec.feature_level

    def _producer_ids(self, rec: ProducerIdsRecord) -> None:
        current = self.image.next_producer_id if self.next_producer_id is None else self.next_producer_id
        if rec.next_producer_id < current:
            raise InvalidRecordError("producer id blocks must only move forward")
        self.next_producer_id = rec.next_producer_id

    def _scram(self, rec: UserScramCredentialRecord) -> None:
        self.scram_credentials[(rec.name, rec.mechanism)] = ScramCredentialImage(
            rec.salt, rec.stored_key, rec.server_key, rec.iterations)

    def _remove_scram(self, rec: RemoveUserScramCredentialRecord) -> None:
        self.scram_credentials[(rec.name, rec.mechanism)] = None

    def _acl_exists(self, acl_id: uuid.UUID) -> bool:
        if acl_id in self.acls:
            return self.acls[acl_id] is not None
        return acl_id in self.image.acls

    def _acl(self, rec: AccessControlEntryRecord) -> None:
        if self._acl_exists(rec.id):
            raise InvalidRecordError(f"ACL {rec.id} already exists")
        self.acls[rec.id] = StandardAcl.of(rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal,
                                           rec.host, rec.operation, rec.permission_type)

    def _remove_acl(self, rec: RemoveAccessControlEntryRecord) -> None:
        if not self._acl_exists(rec.id):
            raise InvalidRecordError(f"removal of unknown ACL {rec.id}")
        self.acls[rec.id] = None

    def _client_quota(self, rec: ClientQuotaRecord) -> None:
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in rec.entity))
        values = self.client_quotas.get(entity)
        if values is None:
            values = self.client_quotas[entity] = dict(self.image.client_quotas.get(entity, {}))
        if rec.remove:
            values.pop(rec.key, None)
        else:
            values[rec.key] = rec.value


_REPLAY: dict[type[Message], Callable[[MetadataDelta, Any], None]] = {
    TopicRecord: MetadataDelta._topic_record,
    PartitionRecord: MetadataDelta._partition_record,
    PartitionChangeRecord: MetadataDelta._partition_change,
    RemoveTopicRecord: MetadataDelta._remove_topic,
    ConfigRecord: MetadataDelta._config,
    RegisterBrokerRecord: MetadataDelta._register_broker,
    FenceBrokerRecord: MetadataDelta._fence,
    UnfenceBrokerRecord: MetadataDelta._unfence,
    BrokerRegistrationChangeRecord: MetadataDelta._registration_change,
    UnregisterBrokerRecord: MetadataDelta._unregister,
    FeatureLevelRecord: MetadataDelta._feature,
    ProducerIdsRecord: MetadataDelta._producer_ids,
    UserScramCredentialRecord: MetadataDelta._scram,
    RemoveUserScramCredentialRecord: MetadataDelta._remove_scram,
    AccessControlEntryRecord: MetadataDelta._acl,
    RemoveAccessControlEntryRecord: MetadataDelta._remove_acl,
    ClientQuotaRecord: MetadataDelta._client_quota,
}


# ---------------------------------------------------------------- mapping helpers


def _differences(old: Mapping[_K, _V], new: Mapping[_K, _V]) -> dict[_K, _V | None]:
    """Keys whose value differs, with the new value (None where ``new`` lacks the key)."""
    out: dict[_K, _V | None] = {k: v for k, v in new.items() if k not in old or old[k] != v}
    out.update((k, None) for k in old if k not in new)
    return out


def _drop_unchanged(changes: dict[_K, _V | None], base: Mapping[_K, _V]) -> None:
    for key in [k for k, v in changes.items() if base.get(k) == v]:
        del changes[key]


def _drop_unchanged_mappings(changes: dict[_K, dict[str, _V]], base: Mapping[_K, Mapping[str, _V]]) -> None:
    for key in [k for k, v in changes.items() if v == dict(base.get(k, {}))]:
        del changes[key]


def _patched(base: Mapping[_K, _V], changes: Mapping[_K, _V | None]) -> Mapping[_K, _V]:
    """``base`` itself when nothing changed (images share unchanged parts), else a copy with the
    changes (None removes a key)."""
    if not changes:
        return base
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
