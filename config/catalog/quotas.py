"""Broker settings of client quotas (Kafka's ``QuotaConfigs``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_1,
    INT,
    group,
    key,
)
from config.types import ConfigKey

QUOTAS: Final[list[ConfigKey]] = group("Quotas", [
    key("quota.window.num", INT, "11", "Samples a client quota's rate is measured over.", AT_LEAST_1),
    key("quota.window.size.seconds", INT, "1", "Length of each client quota sample.", AT_LEAST_1),
])  # fmt: skip
