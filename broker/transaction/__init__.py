"""The transaction coordinator: producer ids, transactional ids and their transactions.

Mirrors Kafka's ``kafka.coordinator.transaction`` package (3.9). State lives in
the compacted internal topic ``__transaction_state`` through the shared
:class:`~broker.coordinator.CoordinatorRuntime`; commit and abort markers
reach partition leaders through WriteTxnMarkers.

- :mod:`broker.transaction.metadata`: one transactional id's state machine.
- :mod:`broker.transaction.records`: its records in ``__transaction_state``.
- :mod:`broker.transaction.shard`: the transactional ids of one partition.
- :mod:`broker.transaction.coordinator`: the request flows (InitProducerId,
  AddPartitionsToTxn, EndTxn, ...), timeouts and expiration.
- :mod:`broker.transaction.markers`: sending markers and completing transactions.
- :mod:`broker.transaction.producer_ids`: producer id blocks from the controller.
- :mod:`broker.transaction.verification`: verifying a transaction's first write
  to a partition with the coordinator (KIP-890), for produces of transactional batches.
- :mod:`broker.transaction.write_markers`: the partition leader's side of WriteTxnMarkers.
"""
