"""A pytest plugin (loaded by the root conftest.py): no librdkafka client (confluent-kafka
Producer, Consumer, AdminClient) outlives its test module.

A client that outlives the broker it was made for keeps reconnecting, and logging
``Connect to ... failed: Connection refused``, for the rest of the run, and holds its threads
and sockets. At the end of each module: a client something still holds (a module global, a
fixture without teardown, a thread) fails the module; one that only a reference cycle kept
alive (a traceback holding the frame that holds the client) is freed by a garbage collection
and named in a ClientLeakWarning. The check is cheap: librdkafka names its threads, so
the common case is one look at the process's thread names.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

#: librdkafka's own thread, one per client handle (rd_kafka_new starts it, destroy joins it).
RDKAFKA_MAIN_THREAD = "rdk:main"
_TASKS = Path("/proc/self/task")


def rdkafka_handles_by_threads() -> int | None:
    """How many librdkafka handles this process has, from thread names; None where the
    thread names cannot be read (not Linux)."""
    if not _TASKS.is_dir():
        return None
    count = 0
    for task in _TASKS.iterdir():
        try:
            if (task / "comm").read_text().strip() == RDKAFKA_MAIN_THREAD:
                count += 1
        except OSError:  # the thread ended while we looked
            continue
    return count


def live_rdkafka_clients() -> list[object]:
    """The confluent-kafka client objects alive now, unreachable ones (in a reference cycle
    that the next full garbage collection frees) included."""
    ck = sys.modules.get("confluent_kafka")
    if ck is None:
        return []
    kinds: tuple[type, ...] = tuple(getattr(ck, name) for name in ("Producer", "Consumer") if hasattr(ck, name))
    admin = sys.modules.get("confluent_kafka.admin")
    if admin is not None and hasattr(admin, "AdminClient"):
        kinds += (admin.AdminClient,)
    return [o for o in gc.get_objects() if isinstance(o, kinds)]


def describe(client: object, found: list[object]) -> str:
    holders = []
    for ref in gc.get_referrers(client):
        if ref is found:
            continue
        if isinstance(ref, dict):
            keys = []
            for key, value in ref.items():  # a loop, not a comprehension: that would hold client in a cell
                if value is client:
                    keys.append(key)
            holders.append(f"dict key {keys[0]!r}" if keys else "dict")
        elif isinstance(ref, FrameType):
            holders.append(f"frame of {ref.f_code.co_name} ({ref.f_code.co_filename}:{ref.f_code.co_firstlineno})")
        else:
            holders.append(type(ref).__name__)
    return f"{type(client).__name__} held by: {', '.join(holders) or 'nothing visible'}"


class ClientLeakWarning(pytest.PytestWarning):
    """librdkafka clients that only a reference cycle kept alive at the end of a module (freed
    then: they would have gone on reconnecting until a full garbage collection happened to run),
    or that are held after a failed test. ``-W error::tests.client_leaks.ClientLeakWarning``
    makes them failures."""


def _held_by_frames_only(text: str) -> bool:
    holders = text.split(" held by: ", 1)[-1].split(", ")
    return all(h.startswith("frame of ") for h in holders)


def check_rdkafka_clients() -> tuple[str | None, str | None]:
    """(what a reference cycle alone kept alive, freed now; what is still held), each None when
    there is nothing of the kind."""
    if "confluent_kafka" not in sys.modules:
        return None, None
    # pytest keeps the traceback of the last failure (sys.last_traceback, for debuggers) until
    # the next test runs: its frames are not a leak of the test.
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    if rdkafka_handles_by_threads() == 0:
        return None, None
    described: dict[int, str] = {}
    before = live_rdkafka_clients()
    for client in before:
        described[id(client)] = describe(client, before)
    del before, client
    gc.collect()
    still = {id(c) for c in live_rdkafka_clients()} & set(described)
    cycled = [text for key, text in described.items() if key not in still]
    # A client held only by frames is a thread's (still winding down, or stuck: named in a
    # warning, not blamed on the module that happens to end while it runs).
    held = [text for key, text in described.items() if key in still and not _held_by_frames_only(text)]
    cycled += [text for key, text in described.items() if key in still and _held_by_frames_only(text)]
    handles = rdkafka_handles_by_threads()
    if not held and handles:
        held = [f"{handles} librdkafka handle(s) without a client object"]

    def listed(texts: list[str]) -> str | None:
        return f"{len(texts)} confluent-kafka client(s):\n  " + "\n  ".join(texts) if texts else None

    return listed(cycled), listed(held)


_failures: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failures.append(report.nodeid)


@pytest.fixture(scope="module", autouse=True)
def no_rdkafka_client_outlives_its_module(request: pytest.FixtureRequest) -> Iterator[None]:
    # Autouse and module-scoped: set up before, torn down after, every function-scoped fixture
    # of the module (its brokers, its clients).
    yield
    cycled, held = check_rdkafka_clients()
    advice = ("close them (Producer.close(), Consumer.close(), del an AdminClient) in a finally or a "
              "fixture's teardown")
    if cycled is not None:
        warnings.warn(ClientLeakWarning(
            f"only a reference cycle (a traceback holding a frame, say; freed now) or a thread's frames "
            f"kept these alive at the end of {request.node.nodeid}; {advice}: {cycled}"), stacklevel=1)
    if held is not None and _failures:
        # pytest keeps what a failed test's traceback holds (its frames, their clients): after
        # a failure the client may be that test's, in any module.
        warnings.warn(ClientLeakWarning(
            f"clients still held at the end of {request.node.nodeid}, after {len(_failures)} failed "
            f"test(s) (the last {_failures[-1]}, whose traceback pytest keeps); {advice}: {held}"), stacklevel=1)
    elif held is not None:
        pytest.fail(f"librdkafka clients outlived {request.node.nodeid}; {advice}: {held}", pytrace=False)
