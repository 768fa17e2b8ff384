"""The group coordinator: classic consumer groups and committed offsets.

- :mod:`broker.group.group`: a group and its members (Kafka's GroupMetadata);
- :mod:`broker.group.shard`: the groups of one ``__consumer_offsets`` partition
  (Kafka's GroupCoordinator logic): loading, DescribeGroups, ListGroups, DeleteGroups,
  combining :mod:`broker.group.classic_protocol` (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup) and :mod:`broker.group.offset_commits` (committed offsets), with the
  requests and settings of :mod:`broker.group.shard_types`;
- :mod:`broker.group.records`: the ``__consumer_offsets`` record formats;
- :mod:`broker.group.coordinator`: the broker-facing facade the handlers call,
  running the shards on a :class:`~broker.coordinator.CoordinatorRuntime`.
"""
