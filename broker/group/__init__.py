"""The group coordinator: classic consumer groups and committed offsets.

- :mod:`broker.group.group`: a group and its members (Kafka's GroupMetadata);
- :mod:`broker.group.shard`: the classic protocol for the groups of one
  ``__consumer_offsets`` partition (Kafka's GroupCoordinator logic);
- :mod:`broker.group.records`: the ``__consumer_offsets`` record formats;
- :mod:`broker.group.coordinator`: the broker-facing facade the handlers call,
  running the shards on a :class:`~broker.coordinator.CoordinatorRuntime`.
"""
