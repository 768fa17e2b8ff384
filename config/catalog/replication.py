"""Broker settings of follower replication (Kafka's ``ReplicationConfigs``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_0,
    CLUSTER_WIDE,
    INT,
    LONG,
    group,
    key,
)
from config.types import ConfigKey

REPLICATION: Final[list[ConfigKey]] = group("Replication", [
    key("replica.lag.time.max.ms", LONG, "30000",
        "A follower that has not caught up for this long leaves the ISR."),
    key("replica.fetch.max.bytes", INT, "1048576", "Bytes a follower asks for per partition.", AT_LEAST_0),
    key("replica.fetch.min.bytes", INT, "1", "Bytes a follower's fetch waits for."),
    key("replica.fetch.wait.max.ms", INT, "500",
        "Longest wait of a follower's fetch; at most replica.lag.time.max.ms."),
    key("replica.fetch.response.max.bytes", INT, "10485760", "Bytes a follower asks for per fetch.",
        AT_LEAST_0),
    key("replica.fetch.backoff.ms", INT, "1000", "Pause after a follower's fetch fails.", AT_LEAST_0),
    key("replica.socket.timeout.ms", INT, "30000",
        "Network timeout of follower fetches; at least replica.fetch.wait.max.ms."),
    key("replica.high.watermark.checkpoint.interval.ms", LONG, "5000",
        "How often high watermarks are checkpointed to disk."),
    key("num.replica.fetchers", INT, "1", "Fetcher tasks per source broker.", mode=CLUSTER_WIDE),
])  # fmt: skip
