"""Shorthands the area modules of the catalog declare their settings with."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from config.types import ConfigKey, ConfigType, UpdateMode, Validator
from config.validators import Range

BOOLEAN: Final = ConfigType.BOOLEAN
STRING: Final = ConfigType.STRING
INT: Final = ConfigType.INT
SHORT: Final = ConfigType.SHORT
LONG: Final = ConfigType.LONG
DOUBLE: Final = ConfigType.DOUBLE
LIST: Final = ConfigType.LIST
PASSWORD: Final = ConfigType.PASSWORD
PER_BROKER: Final = UpdateMode.PER_BROKER
CLUSTER_WIDE: Final = UpdateMode.CLUSTER_WIDE

AT_LEAST_0: Final = Range(min=0)
AT_LEAST_1: Final = Range(min=1)

COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES: Final = ("compact", "delete")


def key(
    name: str,
    config_type: ConfigType,
    default: str | None,
    doc: str,
    validator: Validator | None = None,
    mode: UpdateMode = UpdateMode.READ_ONLY,
    *,
    kafka_default: str | None = None,
    cormorant_only: bool = False,
) -> ConfigKey:
    """A broker setting; ``default`` is written as in a properties file (None: Kafka's null)."""
    return ConfigKey(
        name=name,
        type=config_type,
        default=default,
        doc=doc,
        validator=validator,
        update_mode=mode,
        kafka_default=kafka_default,
        cormorant_only=cormorant_only,
    )


def topic_key(
    name: str,
    config_type: ConfigType,
    default: str | None,
    broker_synonym: str | None,
    doc: str,
    validator: Validator | None = None,
    *,
    implemented: bool = True,
) -> ConfigKey:
    """A topic setting; ``broker_synonym`` is the broker setting its default comes from."""
    return ConfigKey(
        name=name,
        type=config_type,
        default=default,
        doc=doc,
        validator=validator,
        update_mode=UpdateMode.CLUSTER_WIDE,
        broker_synonym=broker_synonym,
        implemented=implemented,
    )


def group(title: str, keys: Iterable[ConfigKey]) -> list[ConfigKey]:
    """``keys`` as one section (``title``) of the documentation."""
    return [dataclasses.replace(k, group=title) for k in keys]
