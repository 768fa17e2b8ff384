"""Broker settings of the transaction coordinator and producer ids (Kafka's
``TransactionStateManagerConfigs`` and ``TransactionLogConfigs``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_1,
    CLUSTER_WIDE,
    INT,
    SHORT,
    group,
    key,
)
from config.types import ConfigKey

TRANSACTIONS: Final[list[ConfigKey]] = group("Transactions and producer ids", [
    key("transaction.state.log.num.partitions", INT, "50", "Partitions of __transaction_state.", AT_LEAST_1),
    key("transaction.state.log.replication.factor", SHORT, "3", "Replication factor of __transaction_state.",
        AT_LEAST_1),
    key("transaction.state.log.min.isr", INT, "2", "min.insync.replicas of __transaction_state.", AT_LEAST_1),
    key("transaction.state.log.segment.bytes", INT, "104857600", "Segment size of __transaction_state.",
        AT_LEAST_1),
    key("transaction.max.timeout.ms", INT, "900000", "Longest transaction timeout a producer may ask for.",
        AT_LEAST_1),
    key("transactional.id.expiration.ms", INT, "604800000",
        "A transactional id unused for this long is expired.", AT_LEAST_1),
    key("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000",
        "How often timed-out transactions are aborted.", AT_LEAST_1),
    key("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000",
        "How often expired transactional ids are removed.", AT_LEAST_1),
    key("producer.id.expiration.ms", INT, "86400000",
        "Idempotent producer state is dropped this long after the producer's last write.", AT_LEAST_1,
        CLUSTER_WIDE),
    key("producer.id.expiration.check.interval.ms", INT, "600000",
        "How often expired producer ids are removed.", AT_LEAST_1),
])  # fmt: skip
