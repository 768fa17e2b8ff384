"""One driver per Kafka client, all with the interface in base.py.

``DRIVERS`` maps the names used in test ids to driver classes, in a fixed order that the
scenarios use for their rotations.
"""

from __future__ import annotations

from .aiokafka_driver import AiokafkaDriver
from .base import (
    ALL_CODECS,
    Capabilities,
    ClientError,
    ClusterMetadata,
    ConsumedRecord,
    Delivery,
    Driver,
    DriverUnavailable,
    Record,
    Unsupported,
)
from .confluent import ConfluentDriver
from .java import Java4Driver, JavaDriver
from .kafka_python import KafkaPythonDriver
from .kafkajs import KafkajsDriver
from .kcat import KcatDriver

DRIVERS: dict[str, type[Driver]] = {
    "kafka-python": KafkaPythonDriver,
    "aiokafka": AiokafkaDriver,
    "confluent-kafka": ConfluentDriver,
    "kcat": KcatDriver,
    "kafkajs": KafkajsDriver,
    "java": JavaDriver,
    "java4": Java4Driver,
}
DRIVER_NAMES: tuple[str, ...] = tuple(DRIVERS)

__all__ = [
    "ALL_CODECS",
    "DRIVERS",
    "DRIVER_NAMES",
    "Capabilities",
    "ClientError",
    "ClusterMetadata",
    "ConsumedRecord",
    "Delivery",
    "Driver",
    "DriverUnavailable",
    "Record",
    "Unsupported",
    "make_driver",
]


def make_driver(name: str, bootstrap: str) -> Driver:
    """Build the driver, or raise DriverUnavailable naming what is missing."""
    cls = DRIVERS[name]
    cls.check_available()
    return cls(bootstrap)
