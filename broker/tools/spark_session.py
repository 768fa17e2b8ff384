"""The SparkSession and ``format("kafka")`` options shared by the Spark tools.

Spark's Kafka connector is not part of PySpark. The tools take its jars from a directory
(``--jars DIR`` or the ``CORMORANT_SPARK_JARS`` environment variable: the
spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2
jars; ``scripts/get_spark_jars.sh`` fills one). Only with ``--packages`` do they ask Spark to
resolve ``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>`` from Maven Central
(``spark.jars.packages``): without network access that fails deep inside Ivy, so it is never
the silent fallback. What is missing is said in one line.

A local master binds Spark to 127.0.0.1 and turns its UI off.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from broker.tools.client import ClientError, KafkaClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARS_ENV = "CORMORANT_SPARK_JARS"
INIT_PRODUCER_ID = 22
DEFAULT_MASTER = "local[2]"


class SparkUnavailable(Exception):
    """PySpark or the Kafka connector cannot be found."""


NO_JARS = (
    "Spark's Kafka connector jars are missing: set CORMORANT_SPARK_JARS (or --jars) to a "
    "directory holding them (scripts/get_spark_jars.sh fills one), or pass --packages to "
    "have Spark download them from Maven Central"
)
NO_PYSPARK = "pyspark is not installed: pip install 'cormorant[spark]'"


def connector_jars(jars_dir: str | None, packages: bool = False) -> list[str] | None:
    """The connector jars to load, or None when Spark is to resolve them (``packages``)."""
    folder = jars_dir or os.environ.get(JARS_ENV) or None
    if folder is None:
        if packages:
            return None
        raise SparkUnavailable(NO_JARS)
    if not Path(folder).is_dir():
        raise SparkUnavailable(f"{folder} (the connector jars' directory) is not a directory")
    jars = sorted(str(p) for p in Path(folder).glob("*.jar"))
    if not any(Path(j).name.startswith("spark-sql-kafka-0-10") for j in jars):
        raise SparkUnavailable(
            f"{folder} holds no spark-sql-kafka-0-10 jar (scripts/get_spark_jars.sh fills it)"
        )
    return jars


def check_spark(jars_dir: str | None = None, packages: bool = False) -> list[str] | None:
    """What :func:`connector_jars` returns, once pyspark is known to be there too; raises
    SparkUnavailable naming everything that is missing, before any work starts."""
    no_pyspark = importlib.util.find_spec("pyspark") is None
    try:
        jars = connector_jars(jars_dir, packages)
    except SparkUnavailable as ex:
        raise SparkUnavailable(f"{NO_PYSPARK}; {ex}" if no_pyspark else str(ex)) from None
    if no_pyspark:
        raise SparkUnavailable(NO_PYSPARK)
    return jars


def build_session(
    app_name: str,
    jars_dir: str | None = None,
    master: str = DEFAULT_MASTER,
    packages: bool = False,
) -> SparkSession:
    jars = check_spark(jars_dir, packages)
    try:
        import pyspark
        from pyspark.sql import SparkSession
    except ImportError as ex:
        raise SparkUnavailable(NO_PYSPARK) from ex
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
    )
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
    try:
        spark = builder.getOrCreate()
    except Exception as ex:  # PySpark raises its own errors when the JVM cannot start.
        first_line = (str(ex).strip().splitlines() or [type(ex).__name__])[0]
        raise SparkUnavailable(f"Spark did not start (is Java 17+ installed?): {first_line}") from ex
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


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jars", metavar="DIR",
        help=f"directory of Spark's Kafka connector jars (default: ${JARS_ENV})",
    )
    parser.add_argument(
        "--packages", action="store_true",
        help="without jars: have Spark download the connector from Maven Central",
    )
