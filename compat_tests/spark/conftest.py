"""Fixtures of the Spark scenarios: one SparkSession for the run, one broker per module.

Every Spark test skips with one line when the connector jars (``CORMORANT_SPARK_JARS``) or
pyspark are missing; see sparkenv.py. The broker checks retention every 500 ms so that the
data-loss scenarios see segments deleted under a running query within a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from compat_tests.conftest import BrokerFactory
from compat_tests.harness.broker import Broker

from . import sparkenv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BROKER_OVERRIDES = {"log.retention.check.interval.ms": "500"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_jars() -> list[str]:
    if sparkenv.pyspark_version() is None:
        pytest.skip(sparkenv.SKIP_NO_PYSPARK)
    jars = sparkenv.jar_paths()
    if jars is None:
        pytest.skip(sparkenv.SKIP_NO_JARS)
    return jars


@pytest.fixture(scope="session")
def spark(spark_jars: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = sparkenv.build_session(spark_jars, tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    factory = BrokerFactory(tmp_path_factory)
    try:
        yield factory(BROKER_OVERRIDES)
    finally:
        factory.close_all()
