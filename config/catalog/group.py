"""Broker settings of the group coordinators: classic and consumer-protocol groups,
committed offsets, share groups (Kafka's ``GroupCoordinatorConfig`` and
``ShareGroupConfig``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_1,
    BOOLEAN,
    CLUSTER_WIDE,
    INT,
    LIST,
    LONG,
    SHORT,
    STRING,
    group,
    key,
)
from config.types import INT_MAX, ConfigKey
from config.validators import (
    EachOneOf,
    OneOf,
    Range,
)

#: Server-side assignors of consumer-protocol groups, by name and by Kafka's class name.
CONSUMER_GROUP_ASSIGNOR_CLASSES: Final = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
CONSUMER_GROUP_ASSIGNORS: Final = ("uniform", "range", *CONSUMER_GROUP_ASSIGNOR_CLASSES)

CONSUMER_GROUPS_AND_OFFSETS: Final[list[ConfigKey]] = group("Consumer groups and offsets", [
    key("offsets.topic.num.partitions", INT, "50", "Partitions of __consumer_offsets.", AT_LEAST_1),
    key("offsets.topic.replication.factor", SHORT, "3",
        "Replication factor of __consumer_offsets; lowered (with a warning) to the live brokers when it is created.", AT_LEAST_1),
    key("offsets.topic.segment.bytes", INT, "104857600", "Segment size of __consumer_offsets.", AT_LEAST_1),
    key("offsets.retention.minutes", INT, "10080",
        "How long committed offsets of an empty group are kept.", AT_LEAST_1),
    key("offsets.retention.check.interval.ms", LONG, "600000", "How often stale offsets are checked.",
        AT_LEAST_1),
    key("offsets.commit.timeout.ms", INT, "5000",
        "How long an offset commit waits for __consumer_offsets replication.", AT_LEAST_1),
    key("offset.metadata.max.bytes", INT, "4096", "Longest metadata string of a committed offset."),
    key("group.initial.rebalance.delay.ms", INT, "3000",
        "How long a new group waits for more members before its first rebalance."),
    key("group.min.session.timeout.ms", INT, "6000", "Shortest session timeout a member may ask for."),
    key("group.max.session.timeout.ms", INT, "1800000", "Longest session timeout a member may ask for."),
    key("group.max.size", INT, str(INT_MAX), "Most members in one group.", AT_LEAST_1),
])  # fmt: skip

CONSUMER_GROUP_PROTOCOL: Final[list[ConfigKey]] = group("Consumer groups (consumer rebalance protocol, KIP-848)", [
    key("group.consumer.session.timeout.ms", INT, "45000",
        "How long a consumer-protocol member may go without a heartbeat before it is fenced.", AT_LEAST_1),
    key("group.consumer.min.session.timeout.ms", INT, "45000",
        "Lower bound of group.consumer.session.timeout.ms.", AT_LEAST_1),
    key("group.consumer.max.session.timeout.ms", INT, "60000",
        "Upper bound of group.consumer.session.timeout.ms.", AT_LEAST_1),
    key("group.consumer.heartbeat.interval.ms", INT, "5000",
        "The heartbeat interval the coordinator gives consumer-protocol members.", AT_LEAST_1),
    key("group.consumer.min.heartbeat.interval.ms", INT, "5000",
        "Lower bound of group.consumer.heartbeat.interval.ms.", AT_LEAST_1),
    key("group.consumer.max.heartbeat.interval.ms", INT, "15000",
        "Upper bound of group.consumer.heartbeat.interval.ms.", AT_LEAST_1),
    key("group.consumer.max.size", INT, str(INT_MAX), "Most members in one consumer-protocol group.",
        AT_LEAST_1),
    key("group.consumer.assignors", LIST, "uniform,range",
        "Server-side assignors (uniform, range, or Kafka's class names of them); the first is used "
        "when members ask for none.", EachOneOf(CONSUMER_GROUP_ASSIGNORS)),
    key("group.consumer.migration.policy", STRING, "bidirectional",
        "Online migration between the classic and the consumer protocol: upgrade turns a classic "
        "group into a consumer group when a consumer-protocol member joins; downgrade turns it back "
        "when the last one leaves; bidirectional does both.",
        OneOf(("disabled", "downgrade", "upgrade", "bidirectional"))),
])  # fmt: skip

SHARE_GROUPS: Final[list[ConfigKey]] = group("Share groups (KIP-932)", [
    key("group.share.session.timeout.ms", INT, "45000",
        "How long a share-group member may go without a heartbeat before it is removed.", AT_LEAST_1),
    key("group.share.min.session.timeout.ms", INT, "45000",
        "Lower bound of a share group's share.session.timeout.ms.", AT_LEAST_1),
    key("group.share.max.session.timeout.ms", INT, "60000",
        "Upper bound of a share group's share.session.timeout.ms.", AT_LEAST_1),
    key("group.share.heartbeat.interval.ms", INT, "5000",
        "The heartbeat interval the coordinator gives share-group members.", AT_LEAST_1),
    key("group.share.min.heartbeat.interval.ms", INT, "5000",
        "Lower bound of a share group's share.heartbeat.interval.ms.", AT_LEAST_1),
    key("group.share.max.heartbeat.interval.ms", INT, "15000",
        "Upper bound of a share group's share.heartbeat.interval.ms.", AT_LEAST_1),
    key("group.share.record.lock.duration.ms", INT, "30000",
        "How long a share consumer holds the acquisition lock of a record it fetched.", Range(1000, 3_600_000)),
    key("group.share.min.record.lock.duration.ms", INT, "15000",
        "Lower bound of a share group's share.record.lock.duration.ms.", AT_LEAST_1),
    key("group.share.max.record.lock.duration.ms", INT, "60000",
        "Upper bound of a share group's share.record.lock.duration.ms.", AT_LEAST_1),
    key("group.share.delivery.count.limit", INT, "5",
        "Deliveries of a record before it is archived (and dead-lettered when the group says so).",
        Range(2, 10)),
    key("group.share.min.delivery.count.limit", INT, "2",
        "Lower bound of a share group's share.delivery.count.limit.", AT_LEAST_1),
    key("group.share.max.delivery.count.limit", INT, "10",
        "Upper bound of a share group's share.delivery.count.limit.", AT_LEAST_1),
    key("group.share.partition.max.record.locks", INT, "2000",
        "Most in-flight records of one share-partition.", Range(100, 10_000)),
    key("group.share.min.partition.max.record.locks", INT, "100",
        "Lower bound of a share group's share.partition.max.record.locks.", AT_LEAST_1),
    key("group.share.max.partition.max.record.locks", INT, "4000",
        "Upper bound of a share group's share.partition.max.record.locks.", AT_LEAST_1),
    key("group.share.max.size", INT, "200", "Most members in one share group.", Range(1, 1000)),
    key("errors.deadletterqueue.topic.name.prefix", STRING, "dlq.",
        "The prefix a share group's dead-letter topic name (errors.deadletterqueue.topic.name) must have "
        "for the broker to write to it (KIP-1191); empty: any name.", mode=CLUSTER_WIDE),
    key("errors.deadletterqueue.auto.create.topics.enable", BOOLEAN, "false",
        "Whether the broker creates a share group's dead-letter topic that does not exist yet, with the "
        "default partitions and replication factor and errors.deadletterqueue.group.enable=true (KIP-1191).",
        mode=CLUSTER_WIDE),
    key("share.coordinator.state.topic.num.partitions", INT, "50", "Partitions of __share_group_state.",
        AT_LEAST_1),
    key("share.coordinator.state.topic.replication.factor", SHORT, "3",
        "Replication factor of __share_group_state (lowered to the live brokers).", AT_LEAST_1),
    key("share.coordinator.state.topic.min.isr", SHORT, "2", "min.insync.replicas of __share_group_state.",
        AT_LEAST_1),
    key("share.coordinator.state.topic.segment.bytes", INT, "104857600",
        "Segment size of __share_group_state.", AT_LEAST_1),
])  # fmt: skip
