"""The SparkSession and ``format("kafka")`` options shared by the Spark tools.

Spark's Kafka connector is not part of PySpark. The tools take its jars from a directory
(``--jars DIR`` or the ``CORMORANT_SPARK_JARS`` environment variable: the
spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2
jars); without one they ask Spark to resolve
``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>`` (``spark.jars.packages``),
which needs access to Maven Central.

A local master binds Spark to 127.0.0.1 and turns its UI off.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from broker.client import ClientError, KafkaClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARS_ENV = "CORMORANT_SPARK_JARS"
INIT_PRODUCER_ID = 22
DEFAULT_MASTER = "local[2]"


class SparkUnavailable(Exception):
    """PySpark or the Kafka connector cannot be found."""


def connector_jars(jars_dir: str | None) -> list[str] | None:
    folder = jars_dir or os.environ.get(JARS_ENV) or None
    if folder is None:
        return None
    jars = sorted(str(p) for p in Path(folder).glob("*.jar"))
    if not any(Path(j).name.startswith("spark-sql-kafka-0-10") for j in jars):
        raise SparkUnavailable(f"{folder} holds no spark-sql-kafka-0-10 jar")
    return jars


def build_session(
    app_name: str, jars_dir: str | None = None, master: str = DEFAULT_MASTER
) -> SparkSession:
    try:
        import pyspark
        from pyspark.sql import SparkSession
    except ImportError as ex:
        raise SparkUnavailable("pyspark is not installed: pip install 'cormorant[spark]'") from ex
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
    )
    jars = connector_jars(jars_dir)
    if jars is not None:
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
        builder = builder.config("spark.jars.packages", package)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_options(bootstrap: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.request.timeout.ms": "30000",
        "kafka.default.api.timeout.ms": "60000",
        "includeHeaders": "true",
    }


def write_options(bootstrap: str) -> dict[str, str]:
    """Spark's sink keeps the Java producer's defaults (idempotent, acks=all), except against
    a broker that does not offer InitProducerId, where idempotence is turned off."""
    options = {"kafka.bootstrap.servers": bootstrap}
    if not broker_offers(bootstrap, INIT_PRODUCER_ID):
        options["kafka.enable.idempotence"] = "false"
    return options


def broker_offers(bootstrap: str, api_key: int) -> bool:
    try:
        with KafkaClient.connect(bootstrap, timeout_s=10) as client:
            return api_key in client.api_versions
    except ClientError:
        return False
