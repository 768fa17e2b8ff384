"""Spark's own Kafka connector (``format("kafka")``), driven through PySpark, in the suite.

The connector jars cannot come from Maven here, so the tests take them from the directory
named by ``CORMORANT_SPARK_JARS`` (``spark-sql-kafka-0-10_2.13-4.0.0.jar``,
``spark-token-provider-kafka-0-10_2.13-4.0.0.jar``, ``kafka-clients-3.9.0.jar``,
``commons-pool2-2.12.0.jar``; ``scripts/get_spark_jars.sh`` puts them there). Without it,
or without pyspark 4.0.x, every Spark test skips with one line saying how to get them.

Spark stays on loopback (driver host and bind address 127.0.0.1, no UI) and every
``kafka.*`` timeout is short, so a broker that does not answer fails a test in seconds
instead of the connector's default minutes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARS_ENV = "CORMORANT_SPARK_JARS"
REQUIRED_JARS = (
    "spark-sql-kafka-0-10_2.13-",
    "spark-token-provider-kafka-0-10_2.13-",
    "kafka-clients-",
    "commons-pool2-",
)
SKIP_NO_JARS = (
    f"{JARS_ENV} is not set to a directory holding Spark's Kafka connector jars: run "
    "scripts/get_spark_jars.sh '' DIR (or MIRROR_GIT_DIR DIR without GitHub access) and export "
    f"{JARS_ENV}=DIR"
)
SKIP_NO_PYSPARK = "pyspark 4.0.x is not installed: pip install -e '.[spark]'"

#: Offset lookups and consumer polls: a few seconds, a few retries.
READ_OPTIONS: dict[str, str] = {
    "kafka.request.timeout.ms": "10000",
    "kafka.default.api.timeout.ms": "20000",
    "kafka.session.timeout.ms": "10000",
    "fetchOffset.numRetries": "3",
    "fetchOffset.retryIntervalMs": "200",
    "kafkaConsumer.pollTimeoutMs": "15000",
    "includeHeaders": "true",
}
WRITE_OPTIONS: dict[str, str] = {
    "kafka.request.timeout.ms": "10000",
    "kafka.delivery.timeout.ms": "20000",
    "kafka.max.block.ms": "20000",
    "kafka.linger.ms": "0",
}


def jar_paths() -> list[str] | None:
    """The connector jars from ``CORMORANT_SPARK_JARS``, or None when any is missing."""
    folder = os.environ.get(JARS_ENV, "").strip()
    if not folder or not Path(folder).is_dir():
        return None
    jars = sorted(str(p) for p in Path(folder).glob("*.jar"))
    names = [Path(j).name for j in jars]
    if not all(any(n.startswith(prefix) for n in names) for prefix in REQUIRED_JARS):
        return None
    return jars


def pyspark_version() -> str | None:
    try:
        import pyspark
    except ImportError:
        return None
    return str(pyspark.__version__)


def build_session(jars: list[str], work_dir: Path) -> SparkSession:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cormorant-compat")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.local.dir", str(work_dir / "spark-local"))
        .config("spark.sql.warehouse.dir", str(work_dir / "warehouse"))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_options(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **READ_OPTIONS, **(extra or {})}


def write_options(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark's sink keeps the Java producer's defaults: idempotent (InitProducerId v5), acks=all."""
    return {"kafka.bootstrap.servers": bootstrap, **WRITE_OPTIONS, **(extra or {})}


def checkpoint_offsets(checkpoint: Path) -> dict[str, dict[int, int]]:
    """The Kafka end offsets of the last planned batch, read from the checkpoint folder.

    (In PySpark 4.0 a query's progress ``endOffset`` is a Python repr, not JSON.)
    ``offsets/N`` holds a version line, a metadata line, then one line per source.
    """
    files = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    if not files:
        return {}
    last = max(files, key=lambda p: int(p.name))
    source_line = last.read_text("utf-8").splitlines()[2]
    raw: dict[str, dict[str, int]] = json.loads(source_line)
    return {topic: {int(p): o for p, o in parts.items()} for topic, parts in raw.items()}


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, step_s: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step_s)
