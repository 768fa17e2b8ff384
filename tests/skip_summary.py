"""A pytest plugin (loaded by the root conftest.py): one line at the end of a run saying how
many tests skipped and why, grouped by reason, so that a run that skipped most of a suite
does not look like a full pass. ``pytest -rs`` still lists every skipped test."""

from __future__ import annotations

from collections import Counter

import pytest
from _pytest.terminal import TerminalReporter

REASON_CHARS_MAX = 120


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    reason = reason.removeprefix("Skipped: ").strip().splitlines()[0] if reason.strip() else "no reason"
    if len(reason) > REASON_CHARS_MAX:
        reason = reason[: REASON_CHARS_MAX - 3] + "..."
    return reason


def summary_line(reports: list[pytest.TestReport]) -> str | None:
    if not reports:
        return None
    reasons = Counter(skip_reason(r) for r in reports)
    parts = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common())
    noun = "test" if len(reports) == 1 else "tests"
    return f"{len(reports)} {noun} skipped: {parts} (pytest -rs lists them)"


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    reports = [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)]
    line = summary_line(reports)
    if line is not None:
        terminalreporter.write_line(line, yellow=True, bold=True)
