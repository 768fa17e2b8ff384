"""Fixtures of the compatibility suite: the broker under test and one driver per client.

The broker target comes from CORMORANT_COMPAT_TARGET (``cormorant`` by default, or
``tansu``); see harness/settings.py for every switch. A cormorant broker that cannot start
fails the tests loudly; a client that is not installed skips its tests with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from compat_tests.harness import matrix, settings
from compat_tests.harness.broker import Broker, make_broker
from compat_tests.harness.drivers import Driver, Unsupported
from compat_tests.harness.groups import GroupMember
from compat_tests.harness.scenario import get_driver

_COMPAT_DIR = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy functions.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")
    matrix.register(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _COMPAT_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.compat)


def pytest_report_header() -> list[str]:
    return [f"compat target: {settings.target()}; producers keep their idempotence defaults"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A feature a client does not have (Unsupported) is a skip, not a failure."""
    outcome = yield
    excinfo = outcome.excinfo
    if excinfo is not None and issubclass(excinfo[0], Unsupported):
        outcome.force_exception(pytest.skip.Exception(f"unsupported: {excinfo[1]}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test carries the tail of its broker's log, to tell client from broker faults."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    for name in ("own_broker", "broker"):
        broker = funcargs.get(name)
        if isinstance(broker, Broker):
            report.sections.append((f"broker log ({name})", broker.log_tail()))


class BrokerFactory:
    """Starts brokers in fresh temp dirs and stops every one of them at the end."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._brokers: list[Broker] = []

    def __call__(self, overrides: Mapping[str, str] | None = None) -> Broker:
        broker = make_broker(self._tmp.mktemp(f"broker-{settings.target()}"), overrides)
        self._brokers.append(broker)
        broker.start()
        return broker

    def started(self) -> int:
        """How many brokers this factory has started so far (for ``close_since``)."""
        return len(self._brokers)

    def close_since(self, started: int) -> None:
        """Stops the brokers started after ``started`` (stopping one twice is harmless)."""
        for broker in self._brokers[started:]:
            broker.close()
        del self._brokers[started:]

    def close_all(self) -> None:
        self.close_since(0)


@pytest.fixture(scope="session")
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path_factory)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture(autouse=True)
def brokers_end_with_their_test(broker_factory: BrokerFactory) -> Iterator[None]:
    """The brokers a test starts with ``broker_factory`` stop when it ends, not at the end of the
    session (a module fixture's brokers, started before this, stay up for its module)."""
    started = broker_factory.started()
    yield
    broker_factory.close_since(started)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker per test module (scenarios in a module use distinct topics)."""
    factory = BrokerFactory(tmp_path_factory)
    try:
        yield factory()
    finally:
        factory.close_all()


@pytest.fixture
def own_broker(broker_factory: BrokerFactory) -> Iterator[Broker]:
    """A broker for this test alone (restarts, kills)."""
    factory_broker = broker_factory()
    try:
        yield factory_broker
    finally:
        factory_broker.close()


@pytest.fixture
def driver_for(broker: Broker) -> Callable[[str], Driver]:
    return lambda name: get_driver(name, broker)


@pytest.fixture
def members() -> Iterator[list[GroupMember]]:
    """Every group member a test starts (it appends them) is killed at the end, whatever happened."""
    started: list[GroupMember] = []
    yield started
    for m in started:
        m.kill()
