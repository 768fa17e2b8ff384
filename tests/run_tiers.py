"""A pytest plugin (loaded by the root conftest.py): marks the tests that must run alone
``serial``. ``scripts/test`` runs the rest two at a time (pytest-xdist, one module per
worker) and then these one after the other, so that a test that measures time or load
never shares the machine with another test.

Serial are: the fault and cluster suites (three to five broker processes each, faults
timed against election and session timeouts), and the tests that measure the broker's
event-loop steps, request rates or throttling against a bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent

#: Directories and modules (relative to the project root) whose tests run alone.
SERIAL_PATHS = (
    "tests/replication",  # fault suites: 3-5 nodes, kills and network faults on a timetable
    "tests/integration",  # the metadata quorum: repeated kills, elections
    "tests/broker/test_isolation.py",  # event-loop steps measured against a bound
    "tests/broker/test_watchdog.py",  # slow-step detection
    "tests/broker/test_connection_fast_path.py",  # steps and per-request CPU
    "tests/broker/test_network_memory.py",  # the CPU of the steps reading a 100 MB frame
    "tests/broker/test_connection_quotas.py",  # connection creation rates
    "tests/broker/test_quota_enforcement.py",  # byte and request rates
    "tests/broker/log/test_retention_paced.py",  # steps of a retention round
    "tests/console/test_render_speed.py",  # page render times
    "compat_tests/test_quota_rates.py",  # clients' rates against a quota
    "compat_tests/test_produce_quota.py",  # a producer slowed to its quota
    "tests/test_bench_read_back.py",  # the benchmark's reader
)


def _is_serial(path: Path) -> bool:
    try:
        relative = path.resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return False
    return any(relative == p or relative.startswith(p + "/") for p in SERIAL_PATHS)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "serial: runs alone, never beside another test (tests/run_tiers.py)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_serial(Path(str(item.fspath))):
            item.add_marker(pytest.mark.serial)
