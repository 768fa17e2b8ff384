"""Outcomes of the compatibility suite per (client, scenario), for the published matrix.

Active only when ``CORMORANT_COMPAT_MATRIX_OUT`` names a JSON file: every compat test's
outcome is recorded there at the end of the session, with its client, scenario and the
reason of a skip, xfail or failure. ``scripts/gen_compat_matrix.py`` runs the suite with it
and turns the files into ``docs/compatibility-matrix.md``.

A test's client is its ``client``, ``producer`` or ``consumer`` parameter (``confluent`` and
``kafka_python`` spelled as the matrix spells them), or a ``variant`` parameter naming a Java
client, else the module's ``MATRIX_CLIENT``, else ``several`` (scenarios that drive several clients at once). Its
scenario is ``<module>: <test>``; any other parameters (acks, codec, ...) are its variant,
and a (client, scenario) cell sums up its variants.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from . import settings

MATRIX_ENV = "CORMORANT_COMPAT_MATRIX_OUT"
CLIENT_PARAMS = ("client", "producer", "consumer")
#: The Java security tests name their client (java, java4) in a ``variant`` parameter.
JAVA_VARIANT_PARAM = "variant"
#: Parameter values naming a client otherwise than the matrix does.
CLIENT_ALIASES = {"confluent": "confluent-kafka", "kafka_python": "kafka-python"}
SEVERAL = "several"
REASON_CHARS_MAX = 300


@dataclass
class Outcome:
    client: str
    scenario: str
    variant: str
    nodeid: str
    outcome: str = ""  # passed, failed, error, skipped, xfailed, xpassed; "" = did not run
    reason: str = ""


def classify(item: pytest.Item) -> tuple[str, str, str]:
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = dict(callspec.params) if callspec is not None else {}
    client = None
    for name in CLIENT_PARAMS:
        if name in params:
            client = str(params.pop(name))
            break
    if client is None and params.get(JAVA_VARIANT_PARAM) in ("java", "java4"):
        client = str(params.pop(JAVA_VARIANT_PARAM))
    if client is not None:
        client = CLIENT_ALIASES.get(client, client)
    if client is None:
        module = getattr(item, "module", None)
        client = str(getattr(module, "MATRIX_CLIENT", SEVERAL))
    stem = Path(str(item.fspath)).stem.removeprefix("test_")
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    variant = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return client, f"{stem}: {name}", variant


def _reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    elif hasattr(report, "wasxfail"):
        text = str(report.wasxfail)
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", "") or report.longreprtext)
    text = " ".join(text.split())
    for prefix in ("Skipped: ", "reason: "):
        text = text.removeprefix(prefix)
    return text[:REASON_CHARS_MAX]


class MatrixRecorder:
    """A pytest plugin collecting one Outcome per compat test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outcomes: dict[str, Outcome] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.get_closest_marker("compat") is None:
                continue
            client, scenario, variant = classify(item)
            self.outcomes[item.nodeid] = Outcome(client, scenario, variant, item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.outcomes.get(report.nodeid)
        if entry is None:
            return
        if report.when == "call" or report.skipped or report.failed:
            if hasattr(report, "wasxfail"):
                state = "xfailed" if report.skipped else "xpassed"
            elif report.failed:
                state = "failed" if report.when == "call" else "error"
            elif report.skipped:
                state = "skipped"
            else:
                state = "passed"
            if entry.outcome in ("failed", "error") and state == "error":
                return  # keep the first failure (a teardown error after a failed call)
            entry.outcome = state
            entry.reason = "" if state == "passed" else _reason(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        ran = [o for o in self.outcomes.values() if o.outcome]
        doc = {
            "target": settings.target(),
            "idempotence": "client defaults",
            "results": [asdict(o) for o in ran],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(doc, indent=1), "utf-8")


def register(config: pytest.Config) -> None:
    """Install the recorder when CORMORANT_COMPAT_MATRIX_OUT is set."""
    out = os.environ.get(MATRIX_ENV, "").strip()
    if out and not config.pluginmanager.has_plugin("compat-matrix"):
        config.pluginmanager.register(MatrixRecorder(Path(out)), "compat-matrix")
